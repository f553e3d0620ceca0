#!/usr/bin/python3
"""tapegrad against PyTorch, side by side, on this machine.

Runs each benchmark case in tapegrad (the Google Benchmark programs in build/bench) and the
same case in PyTorch, with the same thread count and dtype, alternating the two so that drift
on a noisy machine hits both, and prints a markdown table of medians and ratios.

    /usr/bin/python3 tools/bench_vs_torch.py [--build build] [--rounds 5] [--filter conv]
                                              [--threads 1 2] [--write bench/README.md]

Each op family adds its cases to CASES below and to its bench/bench_<family>.cpp, under the
same name.

Both sides start every (case, threads) in a fresh process: tapegrad's benchmark program, and a
PyTorch worker (this script with --worker) that times its case each time it is asked, between
tapegrad's runs. A long-lived PyTorch process would carry the malloc heap of every case before:
glibc mmaps a block of 32 MB or more (and faults in all its pages at each call) unless a freed
heap top is large enough to hold it, so in one shared process PyTorch's 33.5 MB results came
out of an already-touched heap (no page faults) or not, depending on the cases that ran
before, while tapegrad's always paid ~8200 page faults per call.

Both processes also run with glibc told to keep freed memory (MALLOC_MMAP_THRESHOLD_ and
MALLOC_TRIM_THRESHOLD_ at 4 GB; --fresh-pages turns that off). Otherwise PyTorch's CPU
allocator hands every large result back to the kernel and faults it in again on the next call,
while tapegrad keeps freed buffers of 64 KB and more (framework/storage.cpp): on a busy host
those page faults made PyTorch's side 3 to 50 times slower from one day to the next, so the
ratios measured the machine's paging, not the kernels. With both sides reusing memory the
table compares kernels.
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def mlp_train_step():
    torch.manual_seed(0)
    sizes = [784, 256, 256, 10]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params.append((torch.randn(b, a) * 0.05).requires_grad_())
        params.append(torch.zeros(b, requires_grad=True))
    x, target = torch.randn(128, 784), torch.randn(128, 10)

    def step():
        h = x
        for i in range(0, len(params), 2):
            h = F.linear(h, params[i], params[i + 1])
            if i + 2 < len(params):
                h = torch.relu(h)
        loss = ((h - target) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.add_(p.grad, alpha=-0.01)
                p.grad = None
    return step


def matmul_fwd(n, dtype=torch.float32, precision=None):
    """precision: torch.set_float32_matmul_precision for this (fresh) worker process. PyTorch
    1.13 accepts "medium" but its CPU matmul ignores it (float32 all the same): the row then
    compares tapegrad's bf16 products with PyTorch's float32 ones."""
    if precision is not None:
        torch.set_float32_matmul_precision(precision)
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    return lambda: torch.matmul(a, b)


def linear_fwd_bwd(rows, i, o, dtype=torch.float32):
    x = torch.randn(rows, i).to(dtype).requires_grad_()
    w = torch.randn(o, i).to(dtype).requires_grad_()
    b = torch.randn(o).to(dtype).requires_grad_()
    g = torch.randn(rows, o).to(dtype)

    def step():
        F.linear(x, w, b).backward(g)
        x.grad = w.grad = b.grad = None  # as bench_core.cpp's zero_grad: fresh gradients each step
    return step


def fwd_bwd(x, fn):
    """Forward + backward with a ones gradient, as bench_core_ops.cpp's fwd_bwd."""
    x.requires_grad_(True)
    g = torch.ones_like(fn(x))

    def step():
        fn(x).backward(g)
        x.grad = None
    return step


def cross_entropy_case():
    t = torch.randint(0, 1000, (512,))
    return fwd_bwd(torch.randn(512, 1000), lambda x: F.cross_entropy(x, t))


def layer_norm_case():
    w, b = torch.ones(768), torch.zeros(768)
    return fwd_bwd(torch.randn(1024, 768), lambda x: F.layer_norm(x, (768,), w, b))


def add_bcast_case():
    a, b = torch.randn(1024, 1024), torch.randn(1024)
    return lambda: a + b


def mul_scalar_case():
    a = torch.randn(1 << 20)
    return lambda: a * 0.5


def embedding_case():
    idx = torch.randint(0, 10000, (32768,))
    return fwd_bwd(torch.randn(10000, 256), lambda w: F.embedding(idx, w))


def conv_case(backward, input_shape, weight_shape, stride, padding, groups=1, transposed=False,
              dtype=torch.float32):
    """As bench_conv.cpp: weight randn * 0.05, bias randn, a ones gradient for input, weight, bias."""
    x = torch.randn(*input_shape).to(dtype)
    w = (torch.randn(*weight_shape) * 0.05).to(dtype)
    b = torch.randn(weight_shape[1] * groups if transposed else weight_shape[0]).to(dtype)
    dims = len(input_shape) - 2
    fn = ([F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d] if transposed
          else [F.conv1d, F.conv2d, F.conv3d])[dims - 1]
    run = lambda: fn(x, w, b, stride=stride, padding=padding, groups=groups)
    if not backward:
        return run
    for t in (x, w, b):
        t.requires_grad_(True)
    g = torch.ones_like(run())

    def step():
        run().backward(g)
        x.grad = w.grad = b.grad = None
    return step


def reflect_conv_case(backward, conv):
    """As bench_conv.cpp's reflect_conv: nn.Conv2d(64, 64, 3, padding=1, padding_mode="reflect")
    on (8, 64, 56, 56) (its weight randn * 0.05, bias randn), or its F.pad alone; a ones gradient."""
    x = torch.randn(8, 64, 56, 56)
    m = torch.nn.Conv2d(64, 64, 3, padding=1, padding_mode="reflect")
    with torch.no_grad():
        m.weight.copy_(torch.randn(64, 64, 3, 3) * 0.05)
        m.bias.copy_(torch.randn(64))
    run = (lambda: m(x)) if conv else (lambda: F.pad(x, (1, 1, 1, 1), mode="reflect"))
    if not backward:
        m.requires_grad_(False)
        return run
    x.requires_grad_(True)
    g = torch.ones_like(run())

    def step():
        run().backward(g)
        x.grad = m.weight.grad = m.bias.grad = None
    return step


def gemm_case(m, k, n):
    a, b = torch.randn(m, k), torch.randn(k, n)
    return lambda: torch.mm(a, b)


# name (as bench_conv.cpp's, without _fwd / _fwd_bwd) -> conv_case arguments
CONV_CASES = {
    "conv2d_3x3/N8_C64_H56_W56_O64_p1": ((8, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    "conv2d_3x3_s2/N8_C128_H28_W28_O128_p1": ((8, 128, 28, 28), (128, 128, 3, 3), 2, 1),
    "conv2d_1x1/N8_C256_H28_W28_O64": ((8, 256, 28, 28), (64, 256, 1, 1), 1, 0),
    "conv2d_depthwise_3x3/N8_C128_H56_W56_p1": ((8, 128, 56, 56), (128, 1, 3, 3), 1, 1, 128),
    "conv_transpose2d_4x4_s2/N8_C64_H28_W28_O32_p1": ((8, 64, 28, 28), (64, 32, 4, 4), 2, 1, 1, True),
    "conv1d_k5/N16_C64_L512_O64_p2": ((16, 64, 512), (64, 64, 5), 1, 2),
    "conv3d_3x3x3/N2_C16_D16_H32_W32_O16_p1": ((2, 16, 16, 32, 32), (16, 16, 3, 3, 3), 1, 1),
}


def with_suffix(name, suffix):
    head, tail = name.split("/", 1)
    return f"{head}{suffix}/{tail}"


def detr_train_step():
    """bench/bench_detr.cpp's case: an encoder layer (5440 tokens over 4 levels) and a decoder
    layer (300 queries), d_model 256, 8 heads, 4 points, d_ffn 1024, float32, dropout 0, through
    the fixture's modules (Deformable-DETR's architecture with the pure-PyTorch core)."""
    d = load_fixture_module("deformable_detr")
    C, Q, L = 256, 300, 4
    enc = d.EncoderLayer(C, 1024, L, 8, 4, torch.float32)
    dec = d.DecoderLayer(C, 1024, L, 8, 4, torch.float32)
    ss = torch.tensor([[64, 64], [32, 32], [16, 16], [8, 8]])
    lsi = torch.tensor([0, 4096, 5120, 5376])
    src, pos = torch.randn(1, 5440, C), torch.randn(1, 5440, C)
    tgt, query_pos, target = torch.randn(1, Q, C), torch.randn(1, Q, C), torch.randn(1, Q, C)
    valid = torch.ones(1, L, 2)
    enc_ref = d.get_reference_points(ss, valid)
    dec_ref = torch.rand(1, Q, 1, 2).expand(1, Q, L, 2).contiguous()
    params = list(enc.parameters()) + list(dec.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=1e-4)

    def step():
        opt.zero_grad()
        memory = enc(src, pos, enc_ref, ss, lsi)
        out = dec(tgt, query_pos, dec_ref, memory, ss, lsi)
        loss = ((out - target) ** 2).mean()
        loss.backward()
        opt.step()
    return step


def copy_case(shape):
    x, y = torch.randn(shape), torch.empty(shape)
    return lambda: y.copy_(x)


def group_norm_fwd(shape, groups, dtype=torch.float32):
    x, w, b = torch.randn(shape, dtype=dtype), torch.randn(shape[1], dtype=dtype), torch.randn(shape[1], dtype=dtype)
    return lambda: F.group_norm(x, groups, w, b)


def group_norm_bwd(shape, groups, dtype=torch.float32):
    """Backward alone: the autograd graph is kept and replayed with retain_graph."""
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    w = torch.randn(shape[1], dtype=dtype)
    y = F.group_norm(x, groups, w)
    g = torch.randn(shape, dtype=dtype)
    return lambda: torch.autograd.grad(y, x, g, retain_graph=True)


def upsample_fwd(shape, out, ac, dtype=torch.float32):
    x = torch.randn(shape, dtype=dtype)
    return lambda: F.interpolate(x, size=out, mode="bilinear", align_corners=ac)


def upsample_bwd(shape, out, ac, dtype=torch.float32):
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    y = F.interpolate(x, size=out, mode="bilinear", align_corners=ac)
    g = torch.randn(y.shape, dtype=dtype)
    return lambda: torch.autograd.grad(y, x, g, retain_graph=True)


def interp_fwd(shape, out, mode):
    x = torch.randn(shape)
    return lambda: F.interpolate(x, size=out, mode=mode, align_corners=False)


def nearest_fwd(shape, out):
    x = torch.randn(shape)
    return lambda: F.interpolate(x, size=out, mode="nearest")


def nearest_bwd(shape, out):
    x = torch.randn(shape, requires_grad=True)
    y = F.interpolate(x, size=out, mode="nearest")
    g = torch.randn(y.shape)
    return lambda: torch.autograd.grad(y, x, g, retain_graph=True)


def nearest_fwd_bwd(shape, out):
    x = torch.randn(shape, requires_grad=True)
    g = torch.randn(shape[:2] + out)

    def step():
        F.interpolate(x, size=out, mode="nearest").backward(g)
        x.grad = None
    return step


def batch_norm_case(shape, mode):
    """bench_batch_norm.cpp: "train_fwd_bwd" (the input, weight and bias gradients, running
    statistics updated), "train_fwd" or "eval_fwd"."""
    c = shape[1]
    x, w, b = torch.randn(shape), torch.randn(c), torch.randn(c)
    rm, rv, g = torch.zeros(c), torch.ones(c), torch.randn(shape)
    if mode == "eval_fwd":
        rm, rv = torch.randn(c), torch.rand(c) + 0.5
        return lambda: F.batch_norm(x, rm, rv, w, b, training=False)
    if mode == "train_fwd":
        return lambda: F.batch_norm(x, rm, rv, w, b, training=True)
    x.requires_grad_(), w.requires_grad_(), b.requires_grad_()

    def step():
        y = F.batch_norm(x, rm, rv, w, b, training=True)
        return torch.autograd.grad(y, (x, w, b), g)
    return step


def batch_norm_cases():
    cases = {}
    for shape in [(8, 64, 56, 56), (32, 256, 14, 14)]:
        name = "N{}_C{}_H{}_W{}".format(*shape)
        for mode in ("train_fwd_bwd", "train_fwd", "eval_fwd"):
            cases[f"batch_norm_{mode}/{name}"] = ("bench_batch_norm", lambda s=shape, m=mode: batch_norm_case(s, m))
    return cases


def load_fixture_module(name):
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", name + ".py")
    spec = importlib.util.spec_from_file_location(name + "_fixture", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def msda_inputs(queries, bs, heads, requires_grad):
    torch.manual_seed(0)
    channels, levels, points = 32, 4, 4
    shapes = torch.tensor([[64, 64], [32, 32], [16, 16], [8, 8]])
    value = torch.randn(bs, 5440, heads, channels, requires_grad=requires_grad)
    loc = torch.rand(bs, queries, heads, levels, points, 2, requires_grad=requires_grad)
    attn = torch.rand(bs, queries, heads, levels, points, requires_grad=requires_grad)
    return value, shapes, loc, attn


def msda_fwd(queries, bs, heads):
    ref = load_fixture_module("deformable_detr").ms_deform_attn_core_pytorch
    value, shapes, loc, attn = msda_inputs(queries, bs, heads, False)
    return lambda: ref(value, shapes, loc, attn)


def msda_bwd(queries, bs, heads):
    ref = load_fixture_module("deformable_detr").ms_deform_attn_core_pytorch
    value, shapes, loc, attn = msda_inputs(queries, bs, heads, True)
    out = ref(value, shapes, loc, attn)
    g = torch.randn(out.shape)
    return lambda: torch.autograd.grad(out, (value, loc, attn), g, retain_graph=True)


def norm_upsample_cases():
    cases = {"copy/N32_C64_H64_W64": ("bench_norm_upsample", lambda: copy_case((32, 64, 64, 64)))}
    for shape in [(8, 256, 32, 32), (32, 64, 64, 64), (4, 512, 8, 8)]:
        name = "N{}_C{}_H{}_W{}_G32".format(*shape)
        cases["group_norm_fwd/" + name] = ("bench_norm_upsample", lambda s=shape: group_norm_fwd(s, 32))
        cases["group_norm_bwd/" + name] = ("bench_norm_upsample", lambda s=shape: group_norm_bwd(s, 32))
    for shape, out in [((8, 64, 32, 32), (64, 64)), ((8, 256, 16, 16), (64, 64)), ((2, 32, 128, 128), (256, 256))]:
        for ac in (False, True):
            name = "N{}_C{}_H{}_W{}".format(*shape) + "_to{}x{}".format(*out) + ("_ac" if ac else "")
            cases["upsample_fwd/" + name] = ("bench_norm_upsample", lambda s=shape, o=out, a=ac: upsample_fwd(s, o, a))
            cases["upsample_bwd/" + name] = ("bench_norm_upsample", lambda s=shape, o=out, a=ac: upsample_bwd(s, o, a))
    # Issue 26's interpolate modes: F.interpolate, align_corners False, float32.
    for mode, shape, out in [("bicubic", (8, 64, 32, 32), (64, 64)), ("trilinear", (2, 16, 16, 16, 16), (32, 32, 32))]:
        dims = "_".join(f"{k}{v}" for k, v in zip("NCDHW" if len(shape) == 5 else "NCHW", shape))
        name = dims + "_to" + "x".join(str(o) for o in out)
        cases[f"upsample_{mode}_fwd/{name}"] = ("bench_norm_upsample", lambda s=shape, o=out, m=mode: interp_fwd(s, o, m))
        cases[f"upsample_{mode}_fwd_bwd/{name}"] = ("bench_norm_upsample", lambda s=shape, o=out, m=mode: fwd_bwd(
            torch.randn(s), lambda x: F.interpolate(x, size=o, mode=m, align_corners=False)))
    for name, q, bs, heads in [("encoder_B2_Q5440_H8", 5440, 2, 8), ("decoder_B2_Q300_H8", 300, 2, 8),
                               ("encoder_B1_Q5440_H8", 5440, 1, 8), ("encoder_B1_Q5440_H1", 5440, 1, 1)]:
        suffix = name + "_C32_L4_P4"
        cases["ms_deform_attn_fwd/" + suffix] = ("bench_ms_deform_attn", lambda q=q, b=bs, h=heads: msda_fwd(q, b, h))
        cases["ms_deform_attn_bwd/" + suffix] = ("bench_ms_deform_attn", lambda q=q, b=bs, h=heads: msda_bwd(q, b, h))
    # issue 26: interpolate nearest
    for kind, factory in (("fwd", nearest_fwd), ("bwd", nearest_bwd), ("fwd_bwd", nearest_fwd_bwd)):
        cases[f"interpolate_nearest_{kind}/N8_C64_H32_W32_to64x64"] = (
            "bench_norm_upsample", lambda f=factory: f((8, 64, 32, 32), (64, 64)))
    # bfloat16 rows (issue 22). PyTorch 1.13 has bf16 CPU kernels for group_norm and upsampling;
    # it has none for grid_sample, so Deformable DETR's reference cannot run in bf16 either: the
    # PyTorch side of the MSDA and grid_sample bf16 rows is its float32 time (the name says so).
    bf16 = torch.bfloat16
    cases["group_norm_fwd/N8_C256_H32_W32_G32_bf16"] = (
        "bench_norm_upsample", lambda: group_norm_fwd((8, 256, 32, 32), 32, bf16))
    cases["group_norm_bwd/N8_C256_H32_W32_G32_bf16"] = (
        "bench_norm_upsample", lambda: group_norm_bwd((8, 256, 32, 32), 32, bf16))
    cases["upsample_fwd/N8_C64_H32_W32_to64x64_bf16"] = (
        "bench_norm_upsample", lambda: upsample_fwd((8, 64, 32, 32), (64, 64), False, bf16))
    cases["upsample_bwd/N8_C64_H32_W32_to64x64_bf16"] = (
        "bench_norm_upsample", lambda: upsample_bwd((8, 64, 32, 32), (64, 64), False, bf16))
    for kind, factory in (("fwd", msda_fwd), ("bwd", msda_bwd)):
        cases[f"ms_deform_attn_{kind}/encoder_B2_Q5440_H8_C32_L4_P4_bf16"] = (
            "bench_ms_deform_attn", lambda f=factory: f(5440, 2, 8))
    return cases


def grid_sample_case(n, c, h, w, ho, wo, mode, padding, backward):
    """bench_grid_sample.cpp: forward, or the kernel API's backward (both gradients)."""
    x = torch.randn(n, c, h, w)
    grid = torch.rand(n, ho, wo, 2) * 2.2 - 1.1
    if not backward:
        return lambda: F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=False)
    g = torch.randn(n, c, ho, wo)
    m = {"bilinear": 0, "nearest": 1, "bicubic": 2}[mode]
    p = {"zeros": 0, "border": 1, "reflection": 2}[padding]
    return lambda: torch.ops.aten.grid_sampler_2d_backward(g, x, grid, m, p, False, [True, True])


def grid_sample3d_case(kind):
    """bench_grid_sample.cpp's volume rows: (2, 16, 32^3) sampled at (2, 32^3, 3), trilinear, zeros."""
    x = torch.randn(2, 16, 32, 32, 32)
    grid = torch.rand(2, 32, 32, 32, 3) * 2.2 - 1.1
    g = torch.randn(2, 16, 32, 32, 32)
    if kind == "fwd":
        return lambda: F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    if kind == "bwd":
        return lambda: torch.ops.aten.grid_sampler_3d_backward(g, x, grid, 0, 0, False, [True, True])
    x.requires_grad_(True)
    grid.requires_grad_(True)

    def step():
        F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False).backward(g)
        x.grad = grid.grad = None
    return step


def grid_sample_cases():
    cases = {}
    for n, c, s, mode, padding in [(8, 32, 64, "bilinear", "zeros"), (8, 32, 64, "bilinear", "reflection"),
                                   (8, 32, 64, "nearest", "zeros"), (1, 64, 128, "bilinear", "zeros")]:
        shape = f"N{n}_C{c}_H{s}_W{s}_Ho{s}_Wo{s}_{mode}_{padding}"
        for kind, bwd in (("fwd", False), ("bwd", True)):
            cases[f"grid_sample_{kind}/{shape}"] = (
                "bench_grid_sample", lambda n=n, c=c, s=s, mode=mode, padding=padding, bwd=bwd:
                grid_sample_case(n, c, s, s, s, s, mode, padding, bwd))
    # Volumes (issue 26): forward, the kernel API's backward, and forward + backward (autograd).
    vol = "N2_C16_D32_H32_W32_Do32_Ho32_Wo32_bilinear_zeros"
    cases[f"grid_sample_fwd/{vol}"] = ("bench_grid_sample", lambda: grid_sample3d_case("fwd"))
    cases[f"grid_sample_bwd/{vol}"] = ("bench_grid_sample", lambda: grid_sample3d_case("bwd"))
    cases[f"grid_sample3d_fwd_bwd/{vol}"] = ("bench_grid_sample", lambda: grid_sample3d_case("fwd_bwd"))
    for kind, bwd in (("fwd", False), ("bwd", True)):  # PyTorch's side in float32: see norm_upsample_cases
        cases[f"grid_sample_{kind}/N8_C32_H64_W64_Ho64_Wo64_bilinear_zeros_bf16"] = (
            "bench_grid_sample", lambda bwd=bwd: grid_sample_case(8, 32, 64, 64, 64, 64, "bilinear", "zeros", bwd))
    return cases


# case name (as in bench/*.cpp, without "/threads:N") -> (benchmark program, PyTorch callable factory)
CASES = {
    "matmul_fwd/N256": ("bench_core", lambda: matmul_fwd(256)),
    "matmul_fwd/N1024": ("bench_core", lambda: matmul_fwd(1024)),
    "linear_fwd_bwd/R2048_I512_O512": ("bench_core", lambda: linear_fwd_bwd(2048, 512, 512)),
    "matmul_fwd_bf16/N1024": ("bench_core", lambda: matmul_fwd(1024, torch.bfloat16)),
    "matmul_fwd_f32_medium/N1024": ("bench_core", lambda: matmul_fwd(1024, precision="medium")),
    "linear_fwd_bwd_bf16/R2048_I512_O512": ("bench_core", lambda: linear_fwd_bwd(2048, 512, 512, torch.bfloat16)),
    "mlp_train_step/B128_784_256_256_10": ("bench_core", mlp_train_step),
    "softmax_fwd_bwd/R64_C1000": ("bench_core_ops", lambda: fwd_bwd(torch.randn(64, 1000), lambda x: torch.softmax(x, 1))),
    "cross_entropy_fwd_bwd/N512_C1000": ("bench_core_ops", cross_entropy_case),
    "layer_norm_fwd_bwd/R1024_C768": ("bench_core_ops", layer_norm_case),
    "sum_fwd_bwd/R4096_C1024_dim1": ("bench_core_ops", lambda: fwd_bwd(torch.randn(4096, 1024), lambda x: x.sum(1))),
    "var_fwd_bwd/R4096_C1024_dim1": ("bench_core_ops", lambda: fwd_bwd(torch.randn(4096, 1024), lambda x: x.var(1))),
    "max_fwd_bwd/R4096_C1024_dim1":
        ("bench_core_ops", lambda: fwd_bwd(torch.randn(4096, 1024), lambda x: x.max(1).values)),
    "gelu_fwd_bwd/N1048576": ("bench_core_ops", lambda: fwd_bwd(torch.randn(1 << 20), F.gelu)),
    "relu_fwd_bwd/N1048576": ("bench_core_ops", lambda: fwd_bwd(torch.randn(1 << 20), torch.relu)),
    "sigmoid_fwd_bwd/N1048576": ("bench_core_ops", lambda: fwd_bwd(torch.randn(1 << 20), torch.sigmoid)),
    "add_bcast_fwd/R1024_C1024": ("bench_core_ops", add_bcast_case),
    "mul_scalar_fwd/N1048576": ("bench_core_ops", mul_scalar_case),
    "embedding_fwd_bwd/V10000_D256_T32768": ("bench_core_ops", embedding_case),
    "max_pool2d_fwd_bwd/N8_C64_H112_W112_k3_s2_p1":
        ("bench_core_ops", lambda: fwd_bwd(torch.randn(8, 64, 112, 112), lambda x: F.max_pool2d(x, 3, 2, 1))),
    "avg_pool2d_fwd_bwd/N8_C256_H28_W28_k2_s2":
        ("bench_core_ops", lambda: fwd_bwd(torch.randn(8, 256, 28, 28), lambda x: F.avg_pool2d(x, 2, 2))),
    "adaptive_avg_pool2d_fwd_bwd/N8_C512_H7_W7_to1":
        ("bench_core_ops", lambda: fwd_bwd(torch.randn(8, 512, 7, 7), lambda x: F.adaptive_avg_pool2d(x, 1))),
    "conv2d_3x3_reflect_fwd/N8_C64_H56_W56_O64_p1": ("bench_conv", lambda: reflect_conv_case(False, True)),
    "conv2d_3x3_reflect_fwd_bwd/N8_C64_H56_W56_O64_p1": ("bench_conv", lambda: reflect_conv_case(True, True)),
    "pad_reflect_fwd/N8_C64_H56_W56_p1": ("bench_conv", lambda: reflect_conv_case(False, False)),
    "pad_reflect_fwd_bwd/N8_C64_H56_W56_p1": ("bench_conv", lambda: reflect_conv_case(True, False)),
    "gemm_f32/M64_K576_N3136": ("bench_conv", lambda: gemm_case(64, 576, 3136)),
    "gemm_f32/M1024_K1024_N1024": ("bench_conv", lambda: gemm_case(1024, 1024, 1024)),
    "detr_train_step/enc1_dec1_D256_H8_L4_P4_Q300": ("bench_detr", detr_train_step),
    **norm_upsample_cases(),
    **batch_norm_cases(),
    **grid_sample_cases(),
}
for _name, _args in CONV_CASES.items():
    CASES[with_suffix(_name, "_fwd")] = ("bench_conv", lambda a=_args: conv_case(False, *a))
    CASES[with_suffix(_name, "_fwd_bwd")] = ("bench_conv", lambda a=_args: conv_case(True, *a))
# Reduced precision (issue 23): PyTorch in bfloat16 for tapegrad's bf16 rows and for its float32
# row under the Medium math mode (bf16 operands, float32 sums), whose PyTorch counterpart is
# autocast's bf16 convolution.
for _name, _args in {
    "conv2d_3x3_fwd_bwd_bf16/N8_C64_H56_W56_O64_p1": ((8, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    "conv2d_1x1_fwd_bwd_bf16/N8_C64_H56_W56_O64": ((8, 64, 56, 56), (64, 64, 1, 1), 1, 0),
    "conv2d_3x3_s2_fwd_bwd_bf16/N8_C128_H28_W28_O128_p1": ((8, 128, 28, 28), (128, 128, 3, 3), 2, 1),
    "conv2d_3x3_fwd_bwd_f32medium/N8_C64_H56_W56_O64_p1": ((8, 64, 56, 56), (64, 64, 3, 3), 1, 1),
}.items():
    CASES[_name] = ("bench_conv", lambda a=_args: conv_case(True, *a, dtype=torch.bfloat16))


def time_torch(fn, min_time=0.3):
    """Milliseconds per call: warm up, then as many calls as fit in min_time."""
    fn()
    start, n = time.perf_counter(), 0
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return 1e3 * elapsed / n


def worker_main(case, threads):
    """--worker: builds one case in this fresh process, then prints its time_torch() in ms for
    each line read from stdin, until stdin closes."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    fn = CASES[case][1]()
    time_torch(fn, 0.1)  # a fresh process's first calls pay one-off costs (thread pool, lazy init)
    print("ready", flush=True)
    for _ in sys.stdin:
        print(f"ms {time_torch(fn):.6f}", flush=True)


# glibc keeps freed memory in the heap instead of returning (and later faulting in) every block
REUSE_MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "4294967296"}
# the environment of both sides' processes (main() sets it from --fresh-pages)
CHILD_ENV = dict(os.environ, **REUSE_MEMORY_ENV)


class TorchWorker:
    """A PyTorch worker process for one (case, threads); time() asks it for one timing."""

    def __init__(self, case, threads):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", case, str(threads)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=CHILD_ENV)
        self.case = case
        self._reply("ready")

    def _reply(self, tag):
        """The worker's next line starting with tag (anything a case prints is skipped)."""
        for line in self.proc.stdout:
            if line.startswith(tag):
                return line[len(tag):].strip()
        raise SystemExit(f"the PyTorch worker for {self.case} stopped (exit code {self.proc.wait()})")

    def time(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return float(self._reply("ms "))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.stdin.close()
        self.proc.wait()


def time_tapegrad(build, program, case, threads):
    exe = os.path.join(build, "bench", program)
    pattern = "^" + re.escape(f"{case}/threads:{threads}") + "(/real_time)?$"
    out = subprocess.run([exe, f"--benchmark_filter={pattern}", "--benchmark_format=json",
                          "--benchmark_min_time=0.3"], capture_output=True, text=True, check=True, env=CHILD_ENV)
    report = json.loads(out.stdout)
    TAPEGRAD_INFO.setdefault("info", report.get("context", {}).get("tapegrad", "?"))
    runs = report["benchmarks"]
    if not runs:
        raise SystemExit(f"{exe} has no case {case}/threads:{threads}")
    r = runs[0]
    scale = {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[r["time_unit"]]
    return r["real_time"] * scale, r.get("peak_MB")


def openblas_coretype_env():
    """OPENBLAS_CORETYPE for PyTorch's side on CPUs newer than Debian's OpenBLAS (0.3.21) knows.

    It does not recognise e.g. Intel's model 207 (Emerald Rapids) and falls back to its slowest
    generic kernel ("Prescott"), which made PyTorch's matmul 5 to 40 times slower than it is and
    every matmul ratio meaningless. Unless the caller set OPENBLAS_CORETYPE, an AVX-512 CPU with
    bf16 gets Cooperlake's kernels and any other AVX-512 CPU SkylakeX's (what OpenBLAS picks on
    the CPUs it knows); the table's header says which.
    """
    if "OPENBLAS_CORETYPE" in os.environ:
        return {}
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return {}
    if "avx512_bf16" in flags:
        return {"OPENBLAS_CORETYPE": "Cooperlake"}
    if "avx512f" in flags:
        return {"OPENBLAS_CORETYPE": "SkylakeX"}
    return {}


def openblas_note():
    ok = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "libopenblas0-openmp"],
                        capture_output=True, text=True).stdout.startswith("install ok")
    return "" if ok else (" WARNING: Debian's libopenblas0-openmp is not installed, so PyTorch uses a reference "
                          "BLAS and its matmul times are not representative (apt-get install libopenblas0-openmp).")


# tg::info() of the first tapegrad run: the CPU, its vector features and the kernels' path.
TAPEGRAD_INFO = {}


def header(fresh_pages):
    cfg = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", cfg)
    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{datetime.date.today()} on {cpu}, {os.cpu_count()} cores. PyTorch {torch.__version__} "
            f"(oneDNN {'on' if torch.backends.mkldnn.is_available() else 'off'}, BLAS {blas.group(1) if blas else '?'}). "
            + ("glibc defaults: freed large blocks go back to the kernel (--fresh-pages)." if fresh_pages
               else "Both sides keep freed memory (glibc thresholds at 4 GB).")
            + openblas_note()
            + (f" OPENBLAS_CORETYPE={CHILD_ENV['OPENBLAS_CORETYPE']}." if "OPENBLAS_CORETYPE" in CHILD_ENV else "")
            + f" tapegrad: {TAPEGRAD_INFO.get('info', 'not run')}.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds per case; medians are reported")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--filter", default="", help="regex on case names")
    ap.add_argument("--write", help="replace the table between the markers of this markdown file")
    ap.add_argument("--fresh-pages", action="store_true",
                    help="glibc's default thresholds: both sides return large freed blocks to the kernel")
    ap.add_argument("--worker", nargs=2, metavar=("CASE", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    global CHILD_ENV
    CHILD_ENV = dict(os.environ) if args.fresh_pages else dict(os.environ, **REUSE_MEMORY_ENV)
    CHILD_ENV.update(openblas_coretype_env())
    torch.set_grad_enabled(True)
    if args.worker:
        return worker_main(args.worker[0], int(args.worker[1]))

    rows = []
    for case, (program, factory) in CASES.items():
        if args.filter and not re.search(args.filter, case):
            continue
        for threads in args.threads:
            ours, theirs, peak = [], [], None
            with TorchWorker(case, threads) as worker:
                for _ in range(args.rounds):
                    t, peak = time_tapegrad(args.build, program, case, threads)
                    ours.append(t)
                    theirs.append(worker.time())
            a, b = statistics.median(ours), statistics.median(theirs)
            rows.append((case, threads, a, b, a / b, peak))
            print(f"{case} threads={threads}: tapegrad {a:.3f} ms, PyTorch {b:.3f} ms, ratio {a / b:.2f}",
                  file=sys.stderr)

    lines = [header(args.fresh_pages), "", "| case | threads | tapegrad ms | PyTorch ms | ratio (ours / theirs) | tapegrad peak MB |",
             "|---|---|---|---|---|---|"]
    for case, threads, a, b, r, peak in rows:
        lines.append(f"| {case} | {threads} | {a:.3f} | {b:.3f} | {r:.2f} | {'' if peak is None else f'{peak:.1f}'} |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        with open(args.write) as f:
            text = f.read()
        begin, end = "<!-- bench table begin -->", "<!-- bench table end -->"
        if begin not in text or end not in text:
            raise SystemExit(f"{args.write} has no {begin} ... {end} markers")
        text = text[:text.index(begin) + len(begin)] + "\n" + table + "\n" + text[text.index(end):]
        from tempfile import NamedTemporaryFile
        with NamedTemporaryFile("w", dir=os.path.dirname(os.path.abspath(args.write)), delete=False) as tmp:
            tmp.write(text)
        os.replace(tmp.name, args.write)


if __name__ == "__main__":
    main()
