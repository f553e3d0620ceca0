#!/usr/bin/env bash
# The main job: installs what is missing, builds Release, and runs the showcase program.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
build=${TAPEGRAD_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_BUILD_TESTS=OFF -DTAPEGRAD_BUILD_BENCH=OFF \
  -DTAPEGRAD_BUILD_EXAMPLES=ON
cmake --build "$build" -j "$(nproc)"
"$build/examples/train_mlp" "$@"
