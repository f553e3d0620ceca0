#!/usr/bin/python3
"""Fixtures for tests/test_half_io.cpp (16-bit and int32 files), in tests/data/half_io/.

Run: /usr/bin/python3 tools/gen_half_io_fixtures.py   (PyTorch 1.13, numpy; seed 22)

torch_bf16.safetensors
    A bfloat16 checkpoint as PyTorch writes one: the state dict of a small
    nn.Sequential(Linear(4, 3), LayerNorm(3)) converted with .to(torch.bfloat16), plus a
    float16 tensor, an int32 tensor, a float32 tensor and a bf16 tensor of edge values (±0,
    ±inf, NaN, the smallest subnormal, the largest finite), and __metadata__ {"format": "pt"}
    as Hugging Face files carry. Debian has no `safetensors` package, so the writer below
    writes the format by hand: 8-byte little-endian header length, compact JSON header
    (tensors and data in sorted-name order, `__metadata__` first, padded with spaces to a
    multiple of 8 bytes: tools/fixtures/io.py's conventions, which save_safetensors follows),
    then the raw little-endian bytes. bf16 bytes come from tensor.view(torch.int16) (numpy has
    no bfloat16), so they are PyTorch's own bits.
f32_linear.safetensors
    A float32 state dict of nn.Linear(4, 3) (weight, bias). cases.json lists the bits
    PyTorch gets after bf16_module.load_state_dict(that dict): load_state_dict copies with
    conversion (param.copy_(input)), rounding to nearest even once.
np_f16.npy, np_i32.npy
    numpy.save of a float16 array (edge values: ±0, ±inf, NaN, the smallest subnormal
    2^-24, the largest finite 65504, ties) and an int32 array (int32 min and max). Loading
    then save_npy must give numpy's bytes back exactly.

cases.json lists every tensor's values as integer bit patterns (uint16 for bf16 and fp16,
uint32 for float32, plain integers for int32) so that the C++ test compares bits, NaN
payloads included.
"""
import json
import os
import struct

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "half_io")
ST_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64",
             torch.bfloat16: "BF16", torch.float16: "F16", torch.int32: "I32"}


def raw_bytes(t):
    """Little-endian bytes of a contiguous tensor; bf16 through its int16 bit patterns."""
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def bits(t):
    """Integer bit patterns (or values for integer dtypes) in C order, for exact checks."""
    t = t.contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        return (t.view(torch.int16).numpy().astype(np.int64) & 0xFFFF).reshape(-1).tolist()
    if t.dtype == torch.float32:
        return (t.view(torch.int32).numpy().astype(np.int64) & 0xFFFFFFFF).reshape(-1).tolist()
    return t.numpy().reshape(-1).tolist()


def write_safetensors(path, tensors, metadata=None):
    header = {}
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    offset = 0
    blobs = []
    for name in sorted(tensors):
        data = raw_bytes(tensors[name])
        header[name] = {"dtype": ST_DTYPES[tensors[name].dtype], "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def entries(tensors):
    return {name: {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "bits": bits(t)}
            for name, t in tensors.items()}


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(22)
    cases = []

    # A bf16 checkpoint written from PyTorch.
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3)).to(torch.bfloat16)
    with torch.no_grad():
        model[1].weight.copy_(torch.randn(3))  # not all ones: every bit pattern is checked
        model[1].bias.copy_(torch.randn(3))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    f32 = torch.finfo(torch.float32)
    edges = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"),
                          torch.finfo(torch.bfloat16).tiny / 128,  # 2^-133, the smallest subnormal
                          torch.finfo(torch.bfloat16).max, -1.5], dtype=torch.float32)
    state["edges"] = edges.to(torch.bfloat16)
    state["half"] = torch.randn(2, 3).to(torch.float16)
    state["index"] = torch.tensor([[-2147483648, 2147483647], [0, 7]], dtype=torch.int32)
    state["scale"] = torch.tensor([f32.max, f32.tiny, 1.0 / 3.0], dtype=torch.float32)
    write_safetensors(os.path.join(OUT, "torch_bf16.safetensors"), state, {"format": "pt"})
    cases.append({"name": "torch_bf16.safetensors", "metadata": {"format": "pt"}, "entries": entries(state)})

    # A float32 checkpoint loaded into a bf16 module: PyTorch converts while copying.
    lin = torch.nn.Linear(4, 3)
    f32_state = {k: v.detach().clone() for k, v in lin.state_dict().items()}
    write_safetensors(os.path.join(OUT, "f32_linear.safetensors"), f32_state)
    lin16 = torch.nn.Linear(4, 3).to(torch.bfloat16)
    lin16.load_state_dict(f32_state)
    cases.append({"name": "f32_linear.safetensors", "entries": entries(f32_state),
                  "loaded_into_bf16": entries({k: v.detach() for k, v in lin16.state_dict().items()})})

    # numpy-written float16 and int32 arrays.
    f16 = np.array([[0.0, -0.0, np.inf, -np.inf, np.nan, 2.0 ** -24],
                    [65504.0, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, -3.25, 1e-3, 2.0 ** -14]], dtype=np.float32)
    f16 = f16.astype(np.float16)  # 1 + 2^-11 ties down to 1, 1 + 3*2^-11 ties up to 1 + 2^-9
    np.save(os.path.join(OUT, "np_f16.npy"), f16)
    cases.append({"name": "np_f16.npy", "dtype": "float16", "shape": list(f16.shape),
                  "bits": f16.view(np.uint16).reshape(-1).astype(np.int64).tolist()})
    i32 = np.array([[-2147483648, -1, 0], [1, 65536, 2147483647]], dtype=np.int32)
    np.save(os.path.join(OUT, "np_i32.npy"), i32)
    cases.append({"name": "np_i32.npy", "dtype": "int32", "shape": list(i32.shape),
                  "bits": i32.reshape(-1).astype(np.int64).tolist()})

    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
