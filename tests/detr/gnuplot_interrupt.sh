#!/usr/bin/env bash
# train_detr with a gnuplot that is killed by SIGINT (as Ctrl-C would kill it): the run ends as an
# interrupted process (status 130 = 128 + SIGINT), gnuplot ran once (no retry after a signal) and
# the epoch's checkpoint, written before the plot, is there.
#   gnuplot_interrupt.sh <train_detr> <fashion-mnist dir> <work dir>
set -u
train_detr=$1 data=$2 work=$3
rm -rf "$work"
mkdir -p "$work/bin"
cat > "$work/bin/gnuplot" <<'SCRIPT'
#!/bin/sh
echo run >> "$(dirname "$0")/../gnuplot_runs"
kill -INT $$
SCRIPT
chmod +x "$work/bin/gnuplot"
PATH="$work/bin:$PATH" "$train_detr" --model tiny --train-scenes 8 --batch-size 8 --val-scenes 4 --epochs 2 \
  --threads 1 --no-progress --data-dir "$data" --out "$work/run"
status=$?
fail() { echo "FAIL: $*"; exit 1; }
[ "$status" -eq 130 ] || fail "exit status $status, expected 130 (killed by SIGINT)"
[ "$(cat "$work/gnuplot_runs")" = run ] || fail "gnuplot ran $(wc -l < "$work/gnuplot_runs") times, expected once"
[ -f "$work/run/checkpoint.safetensors" ] || fail "no checkpoint of epoch 1"
rm -rf "$work"
echo PASS
