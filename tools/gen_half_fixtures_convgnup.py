#!/usr/bin/python3
"""16-bit golden fixtures for convolution, group_norm and upsample_bilinear2d (issue 22).

Writes tests/data/half/convgnup/*.npy and cases.json. Run with Debian's python3 (PyTorch 1.13):
    /usr/bin/python3 tools/gen_half_fixtures_convgnup.py

For each case and each 16-bit dtype (bfloat16, float16), with fixed seeds:
  * the inputs and grad_output are drawn in float32 and rounded to the dtype, so they are exact
    in the dtype;
  * "torch": PyTorch's 16-bit forward output and every input gradient (autograd, grad_output
    as given). Where PyTorch 1.13 has no CPU kernel for the dtype (it raises "not implemented
    for 'Half'": float16 convolution, group_norm and upsample), the reference is instead PyTorch
    float32 on the same 16-bit-exact inputs with each result rounded once to float16, which is
    what PyTorch's own rule (compute in float32, round each output once) gives; cases.json
    says which in "torch_ref" ("native" or "float32_rounded_once"). The same fallback serves
    bfloat16 transposed convolution, which PyTorch 1.13 refuses with a wrong error (below).
  * "f64": PyTorch float64 on the same 16-bit-exact inputs and grad_output: the answer both
    16-bit results are measured against.

Storage: npy has no bfloat16, so every 16-bit tensor (inputs, grad_output, torch's results) is
stored as float32, where every bfloat16 and float16 value is exact; the test converts it back
with to(dtype), which is exact too. The float64 answers are stored as float64.
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "half", "convgnup")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}

torch.set_num_threads(1)

# name, kind, shapes of the inputs (input, then weight / bias or None), parameters
CONV = [
    ("conv2d_groups2_stride2_pad1_bias", (2, 4, 9, 9), (6, 2, 3, 3), True,
     dict(stride=[2, 2], padding=[1, 1], dilation=[1, 1], transposed=False, output_padding=[0, 0], groups=2)),
    ("conv1d_pad2_bias", (2, 3, 17), (4, 3, 5), True,
     dict(stride=[1], padding=[2], dilation=[1], transposed=False, output_padding=[0], groups=1)),
    ("conv3d_pad1_bias", (1, 2, 5, 5, 5), (3, 2, 3, 3, 3), True,
     dict(stride=[1, 1, 1], padding=[1, 1, 1], dilation=[1, 1, 1], transposed=False, output_padding=[0, 0, 0],
          groups=1)),
    # PyTorch 1.13's bfloat16 transposed convolution is broken on the CPU (it checks the weight
    # as a normal convolution's: "Given groups=1, weight of size [4, 3, 3, 3], expected
    # input[2, 4, 5, 5] to have 3 channels"), so the transposed cases' bfloat16 reference is
    # float32 rounded once too.
    ("conv_transpose2d_stride2_outpad1_bias", (2, 4, 5, 5), (4, 3, 3, 3), True,
     dict(stride=[2, 2], padding=[1, 1], dilation=[1, 1], transposed=True, output_padding=[1, 1], groups=1)),
    ("conv_transpose2d_groups2_stride2_bias", (2, 4, 5, 5), (4, 3, 3, 3), True,
     dict(stride=[2, 2], padding=[1, 1], dilation=[1, 1], transposed=True, output_padding=[1, 1], groups=2)),
    ("depthwise3x3_pad1_bias", (2, 4, 8, 8), (4, 1, 3, 3), True,
     dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1], transposed=False, output_padding=[0, 0], groups=4)),
    ("conv2d_nobias_dilation2", (1, 3, 10, 10), (5, 3, 3, 3), False,
     dict(stride=[1, 1], padding=[2, 2], dilation=[2, 2], transposed=False, output_padding=[0, 0], groups=1)),
]
GROUP_NORM = [
    ("group_norm_affine", (2, 6, 5, 7), 3, True),
    ("group_norm_no_affine", (3, 8, 4, 4), 4, False),
]
# name, input shape, output size, align_corners
UPSAMPLE = [
    ("upsample_up_size", (2, 3, 5, 6), (11, 13), False),
    ("upsample_up_size_ac", (2, 3, 5, 6), (9, 14), True),
    ("upsample_down_size", (2, 3, 12, 10), (5, 4), False),
    ("upsample_down_size_ac", (2, 3, 12, 10), (5, 4), True),
]


def conv_fn(p):
    def f(x, w, b):
        dims = x.dim() - 2
        if p["transposed"]:
            tconv = [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d][dims - 1]
            return tconv(x, w, b, p["stride"], p["padding"], p["output_padding"], p["groups"], p["dilation"])
        conv = [F.conv1d, F.conv2d, F.conv3d][dims - 1]
        return conv(x, w, b, p["stride"], p["padding"], p["dilation"], p["groups"])
    return f


def gn_fn(groups):
    return lambda x, w, b: F.group_norm(x, groups, w, b, eps=1e-5)


def up_fn(size, ac):
    return lambda x: F.interpolate(x, size=size, mode="bilinear", align_corners=ac)


def run(fn, inputs, grad_out, dtype):
    """Output and input gradients of fn on copies of inputs in dtype (None inputs stay None)."""
    xs = [None if t is None else t.to(dtype).detach().requires_grad_(True) for t in inputs]
    y = fn(*xs)
    y.backward(grad_out.to(dtype))
    return [y.detach()] + [None if x is None else x.grad.detach() for x in xs]


def reference(fn, inputs, grad_out, dtype):
    try:
        return run(fn, inputs, grad_out, dtype), "native"
    except RuntimeError as e:
        if "not implemented for" not in str(e) and "expected input" not in str(e):
            raise
        return [None if r is None else r.to(dtype) for r in run(fn, inputs, grad_out, torch.float32)], \
            "float32_rounded_once"


def save(name, t, as64=False):
    arr = t.to(torch.float64 if as64 else torch.float32).numpy()
    np.save(os.path.join(OUT, name + ".npy"), np.ascontiguousarray(arr))
    return name + ".npy"


def add_case(cases, name, op, seed, shapes, fn, params, out_shape_fn):
    for dname, dtype in DTYPES.items():
        g = torch.Generator().manual_seed(seed)
        inputs = []
        for i, s in enumerate(shapes):
            if s is None:
                inputs.append(None)
                continue
            scale = 1.0
            if op == "convolution" and i == 1:  # weight: keep the output O(1), as a default init does
                fan_in = s[1] * int(np.prod(s[2:]))
                scale = fan_in ** -0.5
            if op == "group_norm" and i == 1:
                inputs.append((1.0 + 0.5 * torch.randn(s, generator=g)).to(dtype).float())
                continue
            inputs.append((scale * torch.randn(s, generator=g)).to(dtype).float())
        y32 = fn(*inputs)
        grad_out = torch.randn(y32.shape, generator=g).to(dtype).float()
        torch_res, how = reference(fn, inputs, grad_out, dtype)
        f64 = run(fn, [None if t is None else t.double() for t in inputs], grad_out.double(), torch.float64)
        tag = f"{name}_{dname}"
        names = ["input", "weight", "bias"][: len(shapes)]
        tensors = {"grad_output": save(tag + "_grad_output", grad_out)}
        for n, t in zip(names, inputs):
            if t is not None:
                tensors[n] = save(f"{tag}_{n}", t)
        outs = ["output"] + ["grad_" + n for n in names]
        for n, t, t64 in zip(outs, torch_res, f64):
            if t is not None:
                tensors["torch_" + n] = save(f"{tag}_torch_{n}", t)
                tensors["f64_" + n] = save(f"{tag}_f64_{n}", t64, as64=True)
        cases.append(dict(name=tag, op=op, dtype=dname, torch_ref=how, params=params, tensors=tensors))


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".npy"):
            os.remove(os.path.join(OUT, f))
    cases = []
    seed = 2200
    for name, xs, ws, bias, p in CONV:
        c_out = ws[1] * p["groups"] if p["transposed"] else ws[0]
        add_case(cases, name, "convolution", seed, [xs, ws, (c_out,) if bias else None], conv_fn(p), p, None)
        seed += 1
    for name, xs, groups, affine in GROUP_NORM:
        shapes = [xs, (xs[1],), (xs[1],)] if affine else [xs]
        fn = gn_fn(groups) if affine else (lambda x, _g=groups: F.group_norm(x, _g, eps=1e-5))
        add_case(cases, name, "group_norm", seed, shapes, fn, dict(num_groups=groups, eps=1e-5), None)
        seed += 1
    for name, xs, size, ac in UPSAMPLE:
        add_case(cases, name, "upsample_bilinear2d", seed, [xs], up_fn(size, ac),
                 dict(output_size=list(size), align_corners=ac), None)
        seed += 1
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
    for c in cases:
        print(c["name"], c["torch_ref"])


if __name__ == "__main__":
    main()
