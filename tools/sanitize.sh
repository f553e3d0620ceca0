#!/usr/bin/env bash
# The checking build: the whole suite built with clang under AddressSanitizer and
# UndefinedBehaviorSanitizer (any finding stops the program and fails its test), with the
# libFuzzer drivers of fuzz/ built beside it for tools/fuzz.sh. Being a clang build, it is also
# the proof that the library builds with both of Debian's compilers (tools/test.sh uses GCC).
set -euo pipefail
cd "$(dirname "$0")/.."
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
