#!/usr/bin/python3
"""Where a convolution's training step spends its time, against PyTorch, piece by piece.

For each case of bench_vs_torch.py's CONV_CASES: forward (no bias), grad_input, grad_weight and
grad_bias alone (torch.ops.aten.convolution_backward with a one-gradient mask, as
bench_conv.cpp's *_part_* cases call tapegrad's convolution_backward), alternating the two,
medians of several rounds.

    /usr/bin/python3 tools/conv_parts_vs_torch.py [--build build] [--rounds 3] [--filter 3x3]
                                                  [--threads 2] [--parts fwd gin gw gb]
"""
import argparse
import os
import re
import statistics
import sys

import torch
import torch.nn.functional as F

from bench_vs_torch import CONV_CASES, REUSE_MEMORY_ENV, time_tapegrad, time_torch, with_suffix


def torch_piece(part, input_shape, weight_shape, stride, padding, groups=1, transposed=False):
    x = torch.randn(*input_shape)
    w = torch.randn(*weight_shape) * 0.05
    dims = len(input_shape) - 2
    fn = ([F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d] if transposed
          else [F.conv1d, F.conv2d, F.conv3d])[dims - 1]
    fwd = lambda: fn(x, w, None, stride=stride, padding=padding, groups=groups)
    if part == "fwd":
        return fwd
    g = torch.ones_like(fwd())
    c_out = weight_shape[1] * groups if transposed else weight_shape[0]
    mask = [part == "gin", part == "gw", part == "gb"]
    return lambda: torch.ops.aten.convolution_backward(
        g, x, w, [c_out], [stride] * dims, [padding] * dims, [1] * dims, transposed, [0] * dims, groups, mask)


def main():
    # PyTorch runs in this process: keep freed memory here too, as bench_vs_torch's workers do
    if any(os.environ.get(k) != v for k, v in REUSE_MEMORY_ENV.items()):
        os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, **REUSE_MEMORY_ENV))
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[2])
    ap.add_argument("--filter", default="")
    ap.add_argument("--parts", nargs="+", default=["fwd", "gin", "gw", "gb"])
    args = ap.parse_args()
    for name, case_args in CONV_CASES.items():
        if args.filter and not re.search(args.filter, name):
            continue
        for threads in args.threads:
            torch.set_num_threads(threads)
            for part in args.parts:
                torch.manual_seed(0)
                fn = torch_piece(part, *case_args)
                case = with_suffix(name, "_part_" + part)
                ours, theirs = [], []
                for _ in range(args.rounds):
                    ours.append(time_tapegrad(args.build, "bench_conv", case, threads)[0])
                    theirs.append(time_torch(fn))
                a, b = statistics.median(ours), statistics.median(theirs)
                print(f"{case} t={threads}: tapegrad {a:7.3f} ms  PyTorch {b:7.3f} ms  ratio {a / b:5.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
