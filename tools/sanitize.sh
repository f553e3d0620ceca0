#!/usr/bin/env bash
# The checking build: the whole suite built with clang under AddressSanitizer and
# UndefinedBehaviorSanitizer (any finding stops the program and fails its test), with the
# libFuzzer drivers of fuzz/ built beside it for tools/fuzz.sh. Being a clang build, it is also
# the proof that the library builds with both of Debian's compilers (tools/test.sh uses GCC).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
TAPEGRAD_WITH_CHECKS=1 bash tools/install_deps.sh
# ccache keys on paths relative to the checkout, so clones in other folders (CI's) share it.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
build=${TAPEGRAD_SANITIZE_BUILD_DIR:-build-sanitize}
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_SANITIZE=address,undefined \
  -DTAPEGRAD_BUILD_FUZZ=ON -DTAPEGRAD_BUILD_TESTS=ON -DTAPEGRAD_BUILD_EXAMPLES=ON -DTAPEGRAD_BUILD_BENCH=OFF
cmake --build "$build" -j "$(nproc)"
cd "$build"
# Leaks are findings too; halt on the first error of any kind.
# allocator_may_return_null: an impossible allocation fails as it does without ASan (the
# library turns that into a tg::Error, which the tests check) instead of aborting.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:allocator_may_return_null=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
ctest --output-on-failure -j "$(nproc)"

# The threads of the library (the DataLoader's prefetch thread, data/data_loader.h) under
# ThreadSanitizer, on request: TAPEGRAD_SANITIZE_THREADS=1 adds a second build. Only the tests of
# code that starts threads of its own run there: libgomp is not instrumented, so ThreadSanitizer
# would report its OpenMP barriers in every kernel test (false positives, not our races).
if [ "${TAPEGRAD_SANITIZE_THREADS:-0}" = 1 ]; then
  cd "$root"
  tsan_build=${TAPEGRAD_TSAN_BUILD_DIR:-build-tsan}
  CC=clang CXX=clang++ cmake -S . -B "$tsan_build" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_SANITIZE=thread \
    -DTAPEGRAD_BUILD_TESTS=ON -DTAPEGRAD_BUILD_EXAMPLES=OFF -DTAPEGRAD_BUILD_BENCH=OFF
  cmake --build "$tsan_build" -j "$(nproc)" --target tapegrad_tests
  TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1} OMP_NUM_THREADS=1 "$tsan_build/tests/tapegrad_tests" \
    --gtest_filter='DataLoader*:TensorDataset*:Subset*:FashionMNIST*:IdxDataset*' --gtest_repeat=10 --gtest_brief=1
fi
