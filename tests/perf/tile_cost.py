#!/usr/bin/env python3
"""What a work tile costs besides its key tiles: fmha's cuda_sm90_ws beside
torch SDPA's cuDNN backend, from times over a sweep of key lengths.

Non-causal, fixed queries (B=1, H=32, Nq=8192, FP16 D=128 unless told), key
lengths Nk = 256 .. 16384: a kernel's time is close to a + b * Nk, with b the
cost of one key column over every row and a the fixed cost of the query
tiles (prologue, Q load, the first Q K^T that nothing overlaps, the
epilogue) plus the launch. a / b is that fixed cost in keys: the number of
extra keys per row it is worth. For causal N = 8192 a row sees 4096 keys on
average, so a fixed cost of x keys is about x / 4096 of the time.

Causal, square N = 1024 .. 16384: time = a N + b N^2 / 2 (a: per query row,
b: per visible pair), the same split from the causal side.

Usage (on a GPU machine):
  python3 tile_cost.py --lib build/src/libfmha.so [--kernel cuda_sm90_ws] [--dtype f16]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_torch as ct  # noqa: E402


def fit(xs, ys, basis):
    """Least squares of ys on the basis functions of x; the coefficients."""
    import numpy as np
    a = np.array([[f(x) for f in basis] for x in xs], dtype=float)
    c, *_ = np.linalg.lstsq(a, np.array(ys, dtype=float), rcond=None)
    return c


def times(fm, kernel, shapes, dtype, causal, d):
    rows = []
    for (nq, nk) in shapes:
        torch.manual_seed(0)
        q = torch.randn(1, 32, nq, d, device="cuda", dtype=dtype)
        k = torch.randn(1, 32, nk, d, device="cuda", dtype=dtype)
        v = torch.randn(1, 32, nk, d, device="cuda", dtype=dtype)
        o = torch.empty_like(q)
        p = fm.params(q, k, v, o, causal, kernel)
        fn, (st, msg) = fm.forward_fn(p)
        if fn is None:
            sys.exit(f"{kernel} declined N={nq}x{nk}: {msg}")
        f_ms = ct.bench(fn)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            c_ms = ct.bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        rows.append((nq, nk, f_ms, c_ms))
        del q, k, v, o
        torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.environ.get("FMHA_LIB"))
    ap.add_argument("--kernel", default="cuda_sm90_ws")
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--d", type=int, default=128)
    args = ap.parse_args()
    dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    fm = ct.Fmha(args.lib)

    nks = [256, 512, 1024, 2048, 4096, 8192, 16384]
    rows = times(fm, args.kernel, [(8192, nk) for nk in nks], dtype, False, args.d)
    print(f"non-causal B1 H32 Nq=8192 D{args.d} {args.dtype}: ms (speed = cuDNN time / fmha time)")
    print(f"{'Nk':>6} {'fmha':>9} {'cuDNN':>9} {'speed':>6}")
    for nq, nk, f_ms, c_ms in rows:
        print(f"{nk:>6} {f_ms:9.4f} {c_ms:9.4f} {c_ms / f_ms:6.3f}")
    fit_rows = [r for r in rows if r[1] >= 1024]
    for name, col in (("fmha", 2), ("cuDNN", 3)):
        a, b = fit([r[1] for r in fit_rows], [r[col] for r in fit_rows], [lambda x: 1.0, lambda x: x])
        print(f"  {name:6} fit over Nk >= 1024: a = {a * 1e3:8.1f} us fixed, b = {b * 1e6:7.2f} us per 1k keys, "
              f"a / b = {a / b:6.0f} keys")

    ns = [1024, 2048, 4096, 8192, 16384]
    rows = times(fm, args.kernel, [(n, n) for n in ns], dtype, True, args.d)
    print(f"\ncausal B1 H32 D{args.d} {args.dtype}: ms, TFLOP/s")
    print(f"{'N':>6} {'fmha':>9} {'cuDNN':>9} {'fmha TF':>8} {'cuDNN TF':>8} {'speed':>6}")
    for n, _, f_ms, c_ms in rows:
        fl = 4.0 * 32 * n * (n + 1) / 2 * args.d
        print(f"{n:>6} {f_ms:9.4f} {c_ms:9.4f} {fl / f_ms / 1e9:8.1f} {fl / c_ms / 1e9:8.1f} {c_ms / f_ms:6.3f}")
    for name, col in (("fmha", 2), ("cuDNN", 3)):
        a, b = fit([r[0] for r in rows], [r[col] for r in rows], [lambda x: x, lambda x: x * x / 2])
        print(f"  {name:6} fit: a = {a * 1e6:7.3f} us per 1k rows, b = {b * 1e9:7.3f} us per 1M pairs, "
              f"a / b = {a / b:6.0f} keys per row")


if __name__ == "__main__":
    main()
