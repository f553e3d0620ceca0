#!/usr/bin/python3
"""tapegrad against PyTorch, side by side, on this machine.

Runs each benchmark case in tapegrad (the Google Benchmark programs in build/bench) and the
same case in PyTorch, with the same thread count and dtype, alternating the two so that drift
on a noisy machine hits both, and prints a markdown table of medians and ratios.

    /usr/bin/python3 tools/bench_vs_torch.py [--build build] [--rounds 5] [--filter conv]
                                              [--threads 1 2] [--write bench/README.md]

Each op family adds its cases to CASES below and to its bench/bench_<family>.cpp, under the
same name.
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


def matmul_fwd(n):
    a, b = torch.randn(n, n), torch.randn(n, n)
    return lambda: torch.matmul(a, b)


def linear_fwd_bwd(rows, i, o):
    x = torch.randn(rows, i, requires_grad=True)
    w = torch.randn(o, i, requires_grad=True)
    b = torch.randn(o, requires_grad=True)
    g = torch.randn(rows, o)

    def step():
        F.linear(x, w, b).backward(g)
        x.grad = w.grad = b.grad = None  # tapegrad accumulates in place; PyTorch's first write allocates
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


def embedding_case():
    idx = torch.randint(0, 10000, (32768,))
    return fwd_bwd(torch.randn(10000, 256), lambda w: F.embedding(idx, w))


def detr_train_step():
    """bench/bench_detr.cpp's case: an encoder layer (5440 tokens over 4 levels) and a decoder
    layer (300 queries), d_model 256, 8 heads, 4 points, d_ffn 1024, float32, dropout 0, through
    the fixture's modules (Deformable-DETR's architecture with the pure-PyTorch core)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "deformable_detr.py")
    spec = importlib.util.spec_from_file_location("deformable_detr_fixture", path)
    d = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(d)
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


# case name (as in bench/*.cpp, without "/threads:N") -> (benchmark program, PyTorch callable factory)
CASES = {
    "matmul_fwd/N256": ("bench_core", lambda: matmul_fwd(256)),
    "matmul_fwd/N1024": ("bench_core", lambda: matmul_fwd(1024)),
    "linear_fwd_bwd/R2048_I512_O512": ("bench_core", lambda: linear_fwd_bwd(2048, 512, 512)),
    "mlp_train_step/B128_784_256_256_10": ("bench_core", mlp_train_step),
    "softmax_fwd_bwd/R64_C1000": ("bench_core_ops", lambda: fwd_bwd(torch.randn(64, 1000), lambda x: torch.softmax(x, 1))),
    "cross_entropy_fwd_bwd/N512_C1000": ("bench_core_ops", cross_entropy_case),
    "layer_norm_fwd_bwd/R1024_C768": ("bench_core_ops", layer_norm_case),
    "gelu_fwd_bwd/N1048576": ("bench_core_ops", lambda: fwd_bwd(torch.randn(1 << 20), F.gelu)),
    "embedding_fwd_bwd/V10000_D256_T32768": ("bench_core_ops", embedding_case),
    "detr_train_step/enc1_dec1_D256_H8_L4_P4_Q300": ("bench_detr", detr_train_step),
}


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


def time_tapegrad(build, program, case, threads):
    exe = os.path.join(build, "bench", program)
    pattern = "^" + re.escape(f"{case}/threads:{threads}") + "(/real_time)?$"
    out = subprocess.run([exe, f"--benchmark_filter={pattern}", "--benchmark_format=json",
                          "--benchmark_min_time=0.3"], capture_output=True, text=True, check=True)
    runs = json.loads(out.stdout)["benchmarks"]
    if not runs:
        raise SystemExit(f"{exe} has no case {case}/threads:{threads}")
    r = runs[0]
    scale = {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[r["time_unit"]]
    return r["real_time"] * scale, r.get("peak_MB")


def openblas_note():
    ok = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "libopenblas0-openmp"],
                        capture_output=True, text=True).stdout.startswith("install ok")
    return "" if ok else (" WARNING: Debian's libopenblas0-openmp is not installed, so PyTorch uses a reference "
                          "BLAS and its matmul times are not representative (apt-get install libopenblas0-openmp).")


def header():
    cfg = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", cfg)
    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{datetime.date.today()} on {cpu}, {os.cpu_count()} cores. PyTorch {torch.__version__} "
            f"(oneDNN {'on' if torch.backends.mkldnn.is_available() else 'off'}, BLAS {blas.group(1) if blas else '?'})."
            + openblas_note())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds per case; medians are reported")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--filter", default="", help="regex on case names")
    ap.add_argument("--write", help="replace the table between the markers of this markdown file")
    args = ap.parse_args()
    torch.set_grad_enabled(True)

    rows = []
    for case, (program, factory) in CASES.items():
        if args.filter and not re.search(args.filter, case):
            continue
        for threads in args.threads:
            torch.set_num_threads(threads)
            torch.manual_seed(0)
            fn = factory()
            ours, theirs, peak = [], [], None
            for _ in range(args.rounds):
                t, peak = time_tapegrad(args.build, program, case, threads)
                ours.append(t)
                theirs.append(time_torch(fn))
            a, b = statistics.median(ours), statistics.median(theirs)
            rows.append((case, threads, a, b, a / b, peak))
            print(f"{case} threads={threads}: tapegrad {a:.3f} ms, PyTorch {b:.3f} ms, ratio {a / b:.2f}",
                  file=sys.stderr)

    lines = [header(), "", "| case | threads | tapegrad ms | PyTorch ms | ratio (ours / theirs) | tapegrad peak MB |",
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
