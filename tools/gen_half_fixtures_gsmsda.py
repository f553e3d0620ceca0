#!/usr/bin/python3
"""16-bit golden fixtures for grid_sample, affine_grid and multi-scale deformable attention.

Run with Debian's interpreter (the one that sees python3-torch, PyTorch 1.13):

    /usr/bin/python3 tools/gen_half_fixtures_gsmsda.py

It rewrites tests/data/half/gsmsda/: cases.json and small .npy files, read by
tests/test_half_grid_sample_msda.cpp. Seeds are fixed and torch runs on one thread.

Storage: npy has no bfloat16, so EVERY 16-bit tensor here (inputs and 16-bit references) is
stored as float32: each bfloat16 and float16 value is exact in float32, and the test converts
it back with .to(dtype), which is then exact too. The float64 answers are stored as float64.

Each case has its inputs (16-bit-exact values) and, per output or gradient, two references,
each stored flat and concatenated in the order of "outputs" (the json gives each one's shape):
  - "ref16": PyTorch's 16-bit result. PyTorch 1.13 has NO bfloat16 or float16 CPU kernel of
    grid_sample ("grid_sampler_2d_cpu not implemented for BFloat16"), so for grid_sample and
    for MSDA (whose reference is Deformable-DETR's pure-PyTorch formulation through
    grid_sample) the reference is PyTorch float32 on the 16-bit-exact inputs, each output
    rounded once to the 16-bit dtype: what PyTorch's CPU rule for 16-bit ops gives. The same
    holds for affine_grid in float16 (no CPU "bmm" for Half). affine_grid in bfloat16 is
    PyTorch's own bfloat16 op ("native": true): note that it builds its base grid in bfloat16
    (linspace rounded), which the float32 computation does not.
  - "ref64": PyTorch float64 on the same exact inputs: the answer both are measured against.

Gradients are torch autograd's for a random 16-bit-exact grad_output (grad_grid for
affine_grid). Cases:
  grid_sample: bilinear and nearest x zeros, border, reflection x align_corners both. The grid
    mixes random points with points exactly on pixel centres and half-pixel borders (exact
    binary fractions: W = 8, H = 4 without align_corners, W = 9, H = 5 with, so that ties and
    kinks are the same in every precision), +-1, the clip limits, and points far outside.
  affine_grid: align_corners both.
  ms_deform_attn: 3 levels of ragged sizes (4x5, 2x3, 1x2), locations partly outside [0, 1]
    and some exactly on pixel borders/centres and on 0 and 1. The spatial shapes are stored
    as int64; the test runs them as int32 and int64 both.
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'data', 'half',
                       'gsmsda')
DTYPES = {'bfloat16': torch.bfloat16, 'float16': torch.float16}


def exact(array, dtype):
    """The float64 array rounded to the 16-bit dtype (round to nearest even), back in float64."""
    return torch.from_numpy(np.asarray(array, dtype=np.float64)).to(dtype).to(torch.float64).numpy()


def save(name, array, dtype=np.float32):
    file = f'{name}.npy'
    np.save(os.path.join(OUT_DIR, file), np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder('<')))
    return file


def flat(tensors):
    return np.concatenate([t.detach().to(torch.float64).reshape(-1).numpy() for t in tensors])


def run_both(fn, inputs, grads, dtype16, native16=False):
    """fn(*tensors) -> outputs; returns (ref16, ref64, shapes) over outputs then input grads."""
    def run(dt):
        xs = [torch.from_numpy(a).to(dt).requires_grad_(True) for a in inputs]
        outs = fn(*xs)
        gs = [torch.from_numpy(g).to(dt) for g in grads]
        torch.autograd.backward(outs, gs)
        return list(outs) + [x.grad for x in xs]
    r64 = run(torch.float64)
    if native16:
        r16 = run(dtype16)
    else:
        r16 = [t.to(dtype16) for t in run(torch.float32)]  # float32, each rounded once
    return flat(r16), flat(r64), [list(t.shape) for t in r64]


def grid_points(rng, n, ho, wo, h, w, align, dtype):
    """(n, ho, wo, 2) grid: random points and exact points on the sampler's discontinuities."""
    coords = []
    for size in (w, h):
        if align:
            centre = lambda p: 2 * p / (size - 1) - 1  # noqa: E731
        else:
            centre = lambda p: (2 * p + 1) / size - 1  # noqa: E731
        specials = [centre(p) for p in range(size)] + [centre(p + 0.5) for p in range(-1, size)]
        specials += [-1.0, 1.0, centre(0), centre(size - 1), 2.7, -2.7, 1.9, -1.6]
        coords.append(np.array(specials))
    grid = rng.uniform(-1.25, 1.25, (n, ho, wo, 2))
    pick = rng.random((n, ho, wo, 2)) < 0.5
    for axis in (0, 1):
        sel = pick[..., axis]
        grid[..., axis][sel] = rng.choice(coords[axis], int(sel.sum()))
    return exact(grid, dtype)


def grid_sample_cases(rng, dname, dtype):
    cases = []
    for align in (False, True):
        h, w = (5, 9) if align else (4, 8)
        n, c, ho, wo = 2, 3, 3, 5
        x = exact(rng.standard_normal((n, c, h, w)), dtype)
        grid = grid_points(rng, n, ho, wo, h, w, align, dtype)
        go = exact(rng.standard_normal((n, c, ho, wo)), dtype)
        tag = f'{dname}_grid_ac{int(align)}'
        files = {'input': save(f'{tag}.input', x), 'grid': save(f'{tag}.grid', grid),
                 'grad_output': save(f'{tag}.grad_output', go)}
        for mode in ('bilinear', 'nearest'):
            for padding in ('zeros', 'border', 'reflection'):
                name = f'{dname}_grid_sample_{mode}_{padding}_ac{int(align)}'
                fn = lambda a, g: [F.grid_sample(a, g, mode=mode, padding_mode=padding,  # noqa: E731
                                                 align_corners=align)]
                r16, r64, shapes = run_both(fn, [x, grid], [go], dtype)
                cases.append({
                    'name': name, 'op': 'grid_sample', 'dtype': dname, 'mode': mode,
                    'padding_mode': padding, 'align_corners': align, 'native': False,
                    'outputs': ['output', 'grad_input', 'grad_grid'], 'shapes': shapes,
                    'tensors': dict(files, ref16=save(f'{name}.ref16', r16),
                                    ref64=save(f'{name}.ref64', r64, np.float64))})
    return cases


def affine_grid_cases(rng, dname, dtype):
    cases = []
    for align in (False, True):
        size = [2, 3, 4, 5]
        theta = exact(rng.standard_normal((2, 2, 3)), dtype)
        gg = exact(rng.standard_normal((2, 4, 5, 2)), dtype)
        name = f'{dname}_affine_grid_ac{int(align)}'
        native = dtype == torch.bfloat16  # PyTorch 1.13 has a bfloat16 CPU bmm, not a float16 one
        fn = lambda t: [F.affine_grid(t, size, align_corners=align)]  # noqa: E731
        r16, r64, shapes = run_both(fn, [theta], [gg], dtype, native16=native)
        cases.append({
            'name': name, 'op': 'affine_grid', 'dtype': dname, 'size': size, 'align_corners': align,
            'native': native, 'outputs': ['output', 'grad_theta'], 'shapes': shapes,
            'tensors': {'theta': save(f'{name}.theta', theta), 'grad_output': save(f'{name}.grad_output', gg),
                        'ref16': save(f'{name}.ref16', r16), 'ref64': save(f'{name}.ref64', r64, np.float64)}})
    return cases


def msda_reference(value, shapes, loc, attn):
    """Deformable-DETR's ms_deform_attn_core_pytorch (as tools/fixtures/ms_deform_attn.py)."""
    bs, _, heads, channels = value.shape
    _, queries, _, levels, points, _ = loc.shape
    per_level = value.split([h * w for h, w in shapes], dim=1)
    grids = 2 * loc - 1
    sampled = []
    for level, (h, w) in enumerate(shapes):
        v = per_level[level].flatten(2).transpose(1, 2).reshape(bs * heads, channels, h, w)
        g = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(F.grid_sample(v, g, mode='bilinear', padding_mode='zeros', align_corners=False))
    weights = attn.transpose(1, 2).reshape(bs * heads, 1, queries, levels * points)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1)
    return out.view(bs, heads * channels, queries).transpose(1, 2).contiguous()


def msda_cases(rng, dname, dtype):
    shapes = [(4, 5), (2, 3), (1, 2)]
    bs, heads, channels, queries, points = 2, 2, 4, 5, 3
    levels = len(shapes)
    sizes = [h * w for h, w in shapes]
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    value = exact(rng.standard_normal((bs, sum(sizes), heads, channels)), dtype)
    loc_shape = (bs, queries, heads, levels, points, 2)
    loc = rng.uniform(-0.15, 1.15, loc_shape)
    # Exactly on pixel borders and centres (x * W - 0.5 an integer or half integer: W in
    # {5, 3, 2} are not powers of two, so only the map's edges 0 and 1 and centres of
    # even-sized levels are exact binary fractions; those are what is used), and 0, 1, 0.5.
    specials = np.array([0.0, 1.0, 0.5, 0.25, 0.75, -0.5, 1.5])
    mask = rng.random(loc_shape) < 0.3
    loc[mask] = rng.choice(specials, int(mask.sum()))
    loc = exact(loc, dtype)
    attn = exact(rng.uniform(0.0, 1.0, loc_shape[:-1]), dtype)
    go = exact(rng.standard_normal((bs, queries, heads * channels)), dtype)
    name = f'{dname}_ms_deform_attn'
    fn = lambda v, l, a: [msda_reference(v, shapes, l, a)]  # noqa: E731
    r16, r64, out_shapes = run_both(fn, [value, loc, attn], [go], dtype)
    return [{
        'name': name, 'op': 'ms_deform_attn', 'dtype': dname, 'native': False,
        'outputs': ['output', 'grad_value', 'grad_sampling_locations', 'grad_attention_weights'],
        'shapes': out_shapes,
        'tensors': {'value': save(f'{name}.value', value),
                    'spatial_shapes': save(f'{name}.spatial_shapes', np.array(shapes), np.int64),
                    'level_start_index': save(f'{name}.level_start_index', start, np.int64),
                    'sampling_locations': save(f'{name}.sampling_locations', loc),
                    'attention_weights': save(f'{name}.attention_weights', attn),
                    'grad_output': save(f'{name}.grad_output', go),
                    'ref16': save(f'{name}.ref16', r16), 'ref64': save(f'{name}.ref64', r64, np.float64)}}]


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    for f in os.listdir(OUT_DIR):
        if f.endswith('.npy') or f == 'cases.json':
            os.remove(os.path.join(OUT_DIR, f))
    cases = []
    for i, (dname, dtype) in enumerate(DTYPES.items()):
        rng = np.random.default_rng(2200 + i)
        cases += grid_sample_cases(rng, dname, dtype)
        cases += affine_grid_cases(rng, dname, dtype)
        cases += msda_cases(rng, dname, dtype)
    with open(os.path.join(OUT_DIR, 'cases.json'), 'w') as f:
        json.dump(cases, f, indent=1)
    print(f'{len(cases)} cases in {OUT_DIR}')


if __name__ == '__main__':
    main()
