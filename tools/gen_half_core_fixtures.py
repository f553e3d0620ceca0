#!/usr/bin/python3
"""Golden fixtures for the core ops in bfloat16 (issue 22), from PyTorch 1.13's CPU kernels.

Run with /usr/bin/python3 (Debian's python3-torch). Each case: inputs drawn in float64 with a
fixed seed and rounded to bfloat16 (so PyTorch, tapegrad and the float64 reference all read the
same values), the forward run by PyTorch in bfloat16 (mixed dtypes where the case is about type
promotion), a random upstream gradient `gout` (rounded to the output's dtype), and the gradient
of every differentiable input. The same forward and backward in float64 on the same values give
`out_f64` and `grad_<name>_f64`, the reference both 16-bit results are measured against.

npy has no bfloat16: every bfloat16 tensor is stored as float32 (each bfloat16 value is exact in
float32); cases.json gives each tensor's real dtype under "dtypes". Integer targets are int64.
Writes tests/data/half_core/cases.json and the .npy files beside it.

Every op here has a bfloat16 CPU kernel in PyTorch 1.13, so every reference is PyTorch's own
bfloat16 result (no float32 stand-in). float16 has no fixtures: PyTorch 1.13 lacks most float16 CPU
kernels; tests/test_registry_half.cpp checks float16 against float64 instead.
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

OUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "half_core"))
NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64", torch.int64: "int64"}
cases = []


def save(case, key, t):
    fname = f"{case}_{key}.npy"
    a = t.detach()
    a = a.to(torch.float32) if a.dtype == torch.bfloat16 else a
    np.save(os.path.join(OUT, fname), a.numpy())
    return fname


def add(name, fn, inputs, grad):
    """inputs: name -> (float64 master or int64 tensor, dtype the case feeds PyTorch)."""
    ins, ins64 = {}, {}
    for k, (v, dt) in inputs.items():
        if v.is_floating_point():
            exact = v.to(dt)  # the 16-bit (or float32) values themselves
            ins[k] = exact.clone().requires_grad_(k in grad)
            ins64[k] = exact.to(torch.float64).requires_grad_(k in grad)
        else:
            ins[k] = ins64[k] = v
    out = fn(**ins)
    out64 = fn(**ins64)
    g = torch.Generator().manual_seed(len(cases) + 5)
    gout = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.dtype)
    grads = torch.autograd.grad(out, [ins[k] for k in grad], gout)
    grads64 = torch.autograd.grad(out64, [ins64[k] for k in grad], gout.to(torch.float64))
    tensors, dtypes = {}, {}
    for k, v in ins.items():
        tensors[k], dtypes[k] = save(name, k, v), NAMES[v.dtype]
    for key, t in [("out", out), ("gout", gout), ("out_f64", out64)]:
        tensors[key], dtypes[key] = save(name, key, t), NAMES[t.dtype]
    for k, gr, gr64 in zip(grad, grads, grads64):
        tensors[f"grad_{k}"], dtypes[f"grad_{k}"] = save(name, f"grad_{k}", gr), NAMES[gr.dtype]
        tensors[f"grad_{k}_f64"], dtypes[f"grad_{k}_f64"] = save(name, f"grad_{k}_f64", gr64), "float64"
    cases.append({"name": name, "tensors": tensors, "dtypes": dtypes})


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(22)
    bf, f32 = torch.bfloat16, torch.float32
    r = lambda *s: torch.randn(*s, dtype=torch.float64)
    add("add_bf16_bf16_broadcast", lambda a, b: a + b, {"a": (r(4, 5), bf), "b": (r(5), bf)}, ["a", "b"])
    add("add_bf16_f32_promotes", lambda a, b: a + b, {"a": (r(4, 5), bf), "b": (r(4, 5), f32)}, ["a", "b"])
    add("mul_f32_bf16_broadcast", lambda a, b: a * b, {"a": (r(3, 1), f32), "b": (r(3, 4), bf)}, ["a", "b"])
    add("matmul", lambda a, b: a @ b, {"a": (r(2, 6, 40), bf), "b": (r(40, 7), bf)}, ["a", "b"])
    add("softmax", lambda x: torch.softmax(x * 3, dim=-1), {"x": (r(5, 33), bf)}, ["x"])
    add("log_softmax", lambda x: torch.log_softmax(x * 3, dim=1), {"x": (r(4, 9, 3), bf)}, ["x"])
    add("layer_norm", lambda x, w, b: F.layer_norm(x, (48,), w, b, 1e-5),
        {"x": (r(6, 48) * 2 + 1, bf), "w": (r(48), bf), "b": (r(48), bf)}, ["x", "w", "b"])
    add("sum", lambda x: x.sum(dim=1), {"x": (r(3, 200, 2), bf)}, ["x"])
    add("mean_all", lambda x: x.mean(), {"x": (r(30, 20) + 0.5, bf)}, ["x"])
    add("gelu", lambda x: F.gelu(x), {"x": (r(8, 16) * 2, bf)}, ["x"])
    add("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), {"x": (r(8, 16) * 2, bf)}, ["x"])
    add("cross_entropy", lambda x, t: F.cross_entropy(x, t),
        {"x": (r(16, 10) * 2, bf), "t": (torch.randint(0, 10, (16,)), torch.int64)}, ["x"])
    add("cross_entropy_smoothing_none", lambda x, t: F.cross_entropy(x, t, reduction="none", label_smoothing=0.1),
        {"x": (r(6, 5, 3), bf), "t": (torch.randint(0, 5, (6, 3)), torch.int64)}, ["x"])
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
