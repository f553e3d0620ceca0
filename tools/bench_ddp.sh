#!/usr/bin/env bash
# Issue 24's benchmark: one detector epoch with 2 processes x 1 thread (MPI, DistributedDataParallel)
# against 1 process x 2 threads, on this machine, alternated `rounds` times; prints each run's epoch
# time and, for the MPI runs, the communication line (how much of the reduction backward hid).
#   bash tools/bench_ddp.sh [build dir] [rounds] [training scenes]
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
scenes=${3:-1024}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
grep -m1 'model name' /proc/cpuinfo
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(--epochs 1 --train-scenes "$scenes" --val-scenes 64 --no-progress)
for r in $(seq "$rounds"); do
  "$build/examples/train_detr" --threads 2 --out "$work/t2_$r" "${flags[@]}" | grep -o 'epoch 1:.*' | sed 's/^/1 process x 2 threads: /'
  mpirun -np 2 --bind-to none "$build/examples/train_detr" --threads 1 --out "$work/p2_$r" "${flags[@]}" |
    grep -E -o 'communication:.*|epoch 1:.*' | sed 's/^/2 processes x 1 thread: /'
done
