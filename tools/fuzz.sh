#!/usr/bin/env bash
# Runs every libFuzzer driver of the checking build (tools/sanitize.sh builds them), as many at
# once as there are cores, starting from the committed seed corpus fuzz/corpus/<name>/ (which
# it never changes). A crash, a sanitizer report, an exception other than tg::Error, an input
# that runs over 10 s or allocates over 2 GB is a finding: the script prints the driver's
# report and the input in hex, keeps it, and fails.
#
# Two modes:
#   bash tools/fuzz.sh                         # CI: a fixed number of inputs per driver from a
#                                              # fixed seed (about a minute each), the same
#                                              # inputs every run for the same code
#   FUZZ_SECONDS=3600 bash tools/fuzz.sh       # a hunt: an hour per driver, a random seed
#   build-sanitize/fuzz/fuzz_npy crash-...     # replay one input
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TAPEGRAD_SANITIZE_BUILD_DIR:-build-sanitize}
drivers=("$build"/fuzz/fuzz_*)
[ -x "${drivers[0]}" ] || { echo "fuzz: no drivers in $build/fuzz; run tools/sanitize.sh first" >&2; exit 1; }
work=$(mktemp -d /tmp/tapegrad_fuzz.XXXXXX)
# Inputs per driver in CI mode: one to three minutes each on a 2-core machine running two at
# once (fuzz_op_args slows from 11,000 to 2,000 inputs/s as its corpus grows).
declare -A ci_runs=([npy]=1400000 [safetensors]=900000 [op_args]=300000 [idx]=170000)
run_one() {
  local driver=$1 work=$2
  local name; name=$(basename "$driver"); name=${name#fuzz_}
  mkdir -p "$work/$name/corpus" "$work/$name/findings"
  local seeds=(); [ -d "fuzz/corpus/$name" ] && seeds=("fuzz/corpus/$name")
  local bound
  if [ -n "${FUZZ_SECONDS:-}" ]; then
    bound=(-seed=0 -max_total_time="$FUZZ_SECONDS")
  else
    bound=(-seed=1 -runs="${CI_RUNS:-100000}" -max_total_time=600)
  fi
  if UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
      "$driver" "${bound[@]}" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$work/$name/findings/" "$work/$name/corpus" "${seeds[@]}" \
      > "$work/$name.log" 2>&1; then
    local runs rate time
    runs=$(grep -m1 'stat::number_of_executed_units' "$work/$name.log" | awk '{print $2}')
    rate=$(grep -m1 'stat::average_exec_per_sec' "$work/$name.log" | awk '{print $2}')
    echo "fuzz_$name: ${runs:-?} inputs (${rate:-?}/s), no finding"
  else
    echo "fuzz_$name: FINDING"; tail -60 "$work/$name.log"
    for f in "$work/$name/findings"/*; do [ -f "$f" ] && { echo "input $f:"; od -A x -t x1z "$f" | head -40; }; done
    return 1
  fi
}
export -f run_one
status=0
for driver in "${drivers[@]}"; do
  name=$(basename "$driver"); name=${name#fuzz_}
  printf '%s %s\n' "$driver" "${ci_runs[$name]:-100000}"
done | xargs -P "$(nproc)" -L1 bash -c 'CI_RUNS=$2 run_one "$1" "'"$work"'"' _ || status=1
[ $status -eq 0 ] && rm -rf "$work"
echo "fuzz: $([ $status -eq 0 ] && echo 'all drivers clean' || echo "findings kept in $work")"
exit $status
