#!/usr/bin/env bash
# The test command: installs what is missing, builds everything in Release (library, tests,
# examples, benchmarks; benchmarks are built, never run) and runs the whole suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
# ccache keys on paths relative to the checkout, so clones in other folders (CI's) share it.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
build=${TAPEGRAD_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_BUILD_TESTS=ON -DTAPEGRAD_BUILD_EXAMPLES=ON \
  -DTAPEGRAD_BUILD_BENCH=ON
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure -j "$(nproc)"
