#!/usr/bin/python3
"""PyTorch timings of bench/bench_core_ops.cpp's cases (forward + backward, float32, 2 threads)."""
import time

import torch
import torch.nn.functional as F

import os
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
torch.manual_seed(0)


def bench(name, x, fn, reps=50):
    x.requires_grad_(True)
    for _ in range(3):
        y = fn(x)
        y.backward(torch.ones_like(y))
        x.grad = None
    t0 = time.perf_counter()
    for _ in range(reps):
        y = fn(x)
        y.backward(torch.ones_like(y))
        x.grad = None
    print(f"{name:32s} {(time.perf_counter() - t0) / reps * 1e6:10.0f} us")


t = torch.randint(0, 1000, (512,))
idx = torch.randint(0, 10000, (32768,))
w, b = torch.ones(768), torch.zeros(768)
bench("softmax_64x1000", torch.randn(64, 1000), lambda x: torch.softmax(x, 1))
bench("cross_entropy_512x1000", torch.randn(512, 1000), lambda x: F.cross_entropy(x, t))
bench("layer_norm_1024x768", torch.randn(1024, 768), lambda x: F.layer_norm(x, (768,), w, b))
bench("gelu_1M", torch.randn(1 << 20), F.gelu)
bench("embedding_32k_tokens_x256", torch.randn(10000, 256), lambda x: F.embedding(idx, x))
