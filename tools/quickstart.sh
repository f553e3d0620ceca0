#!/usr/bin/env bash
# The main job: installs what is missing, builds Release, and trains the detector demo
# (examples/train_detr: a small Deformable DETR on Fashion-MNIST scenes). Its files go to a
# fresh folder under runs/ unless --out is given; other flags go to train_detr as they are
# (bash tools/quickstart.sh --epochs 10 --threads 1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
build=${TAPEGRAD_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_BUILD_TESTS=OFF -DTAPEGRAD_BUILD_BENCH=OFF \
  -DTAPEGRAD_BUILD_EXAMPLES=ON
cmake --build "$build" -j "$(nproc)"
out=()
case " $* " in
  *" --out "* | *" --out="*) ;;
  *) out=(--out "runs/detr_$(date +%Y%m%d_%H%M%S)") ;;
esac
"$build/examples/train_detr" "${out[@]}" "$@"
