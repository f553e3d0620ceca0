#!/usr/bin/env bash
# Installs the Debian 12 packages tapegrad needs, skipping those already present (so a
# machine that has them all needs no network). Run as root.
set -euo pipefail
packages=(
  build-essential cmake ccache
  libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libstb-dev zlib1g-dev
  gnuplot-nox graphviz dataset-fashion-mnist
  libopenmpi-dev openmpi-bin  # tg::dist (framework/dist.h) and its mpirun tests
  qemu-user  # runs the portable build's tests on an emulated CPU without AVX (tests/CMakeLists.txt)
)
# clang, its sanitizer and libFuzzer runtimes and its OpenMP are for the checking build
# (tools/sanitize.sh, tools/fuzz.sh).
if [ "${TAPEGRAD_WITH_CHECKS:-0}" = "1" ]; then
  packages+=(clang libclang-rt-dev libomp-dev)
fi
# PyTorch is only for regenerating fixtures and for the benchmark comparison.
if [ "${TAPEGRAD_WITH_TORCH:-0}" = "1" ]; then
  packages+=(python3-torch python3-numpy libopenblas0-openmp)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
