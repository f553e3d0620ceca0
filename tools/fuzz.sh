#!/usr/bin/env bash
# Runs every libFuzzer driver of the checking build (tools/sanitize.sh builds them) for
# FUZZ_SECONDS seconds each (default 60), as many at once as there are cores, starting from the
# committed seed corpus fuzz/corpus/<name>/ (which it never changes). A crash, a sanitizer
# report, an exception other than tg::Error, a run over 10 s or an allocation over 2 GB is a
# finding: the script prints the driver's report and the input in hex, and fails.
# CI runs with a fixed seed (FUZZ_SEED, default 1), so that a run explores the same inputs
# each time for the same code; FUZZ_SEED=0 lets libFuzzer pick one.
#   FUZZ_SECONDS=3600 FUZZ_SEED=0 bash tools/fuzz.sh      # a longer hunt
#   build-sanitize/fuzz/fuzz_npy crash-...     # replay one input
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TAPEGRAD_SANITIZE_BUILD_DIR:-build-sanitize}
seconds=${FUZZ_SECONDS:-60}
export FUZZ_SEED=${FUZZ_SEED:-1}
drivers=("$build"/fuzz/fuzz_*)
[ -x "${drivers[0]}" ] || { echo "fuzz: no drivers in $build/fuzz; run tools/sanitize.sh first" >&2; exit 1; }
work=$(mktemp -d /tmp/tapegrad_fuzz.XXXXXX)
run_one() {
  local driver=$1 seconds=$2 work=$3
  local name; name=$(basename "$driver"); name=${name#fuzz_}
  mkdir -p "$work/$name/corpus" "$work/$name/findings"
  local seeds=(); [ -d "fuzz/corpus/$name" ] && seeds=("fuzz/corpus/$name")
  if UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
      "$driver" -seed="$FUZZ_SEED" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$work/$name/findings/" "$work/$name/corpus" "${seeds[@]}" \
      > "$work/$name.log" 2>&1; then
    local runs rate
    runs=$(grep -m1 'stat::number_of_executed_units' "$work/$name.log" | awk '{print $2}')
    rate=$(grep -m1 'stat::average_exec_per_sec' "$work/$name.log" | awk '{print $2}')
    echo "fuzz_$name: ${runs:-?} inputs in ${seconds} s (${rate:-?}/s), no finding"
  else
    echo "fuzz_$name: FINDING"; tail -60 "$work/$name.log"
    for f in "$work/$name/findings"/*; do [ -f "$f" ] && { echo "input $f:"; od -A x -t x1z "$f" | head -40; }; done
    return 1
  fi
}
export -f run_one
status=0
printf '%s\n' "${drivers[@]}" | xargs -P "$(nproc)" -I{} bash -c 'run_one "$@"' _ {} "$seconds" "$work" || status=1
[ $status -eq 0 ] && rm -rf "$work"
echo "fuzz: $([ $status -eq 0 ] && echo 'all drivers clean' || echo "findings kept in $work")"
exit $status
