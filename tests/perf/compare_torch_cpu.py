#!/usr/bin/env python3
"""fmha's CPU backend (bench_cpu) against PyTorch's CPU SDPA, one after the
other in one run on the same machine and thread counts; prints speed = torch
time / fmha time (> 1: fmha faster).

    python3 tests/perf/compare_torch_cpu.py build/tests/perf/bench_cpu [--threads 1,16]

Shapes: the Llama decode step (Hq=32 Hk=8 Nq=1 D=128, Nk=4096 and 16384;
bottom-right causal, which for one query is no mask) and prefill (H=8
N=2048 D=128 causal), in F16, BF16 and F32. torch: median of 7 timed calls
after 2 warm-ups, torch.set_num_threads(t); fmha: bench_cpu's median.
"""
import argparse
import re
import subprocess
import time

import torch
import torch.nn.functional as F

DT = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def torch_ms(hq, hk, nq, nk, d, causal, dtype, threads, reps=7):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, hq, nq, d, generator=g).to(DT[dtype])
    k = torch.randn(1, hk, nk, d, generator=g).to(DT[dtype])
    v = torch.randn(1, hk, nk, d, generator=g).to(DT[dtype])
    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal and nq == nk, enable_gqa=hq != hk)
    for _ in range(2):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def fmha_ms(exe, args, dtype, threads):
    out = subprocess.run([exe, *args, "--dtype", dtype, "--threads", str(threads), "--reps", "7"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == str(threads) and len(f) > 2:
            return float(f[1])
    raise RuntimeError(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_cpu")
    ap.add_argument("--threads", default="1,16")
    a = ap.parse_args()
    shapes = [("decode Nk=4096", (32, 8, 1, 4096, 128, True), ["--decode"]),
              ("decode Nk=16384", (32, 8, 1, 16384, 128, True), ["--decode", "--nk", "16384"]),
              ("prefill H8 N2048 causal", (8, 8, 2048, 2048, 128, True), ["--h", "8", "--n", "2048", "--d", "128"])]
    print(f"torch {torch.__version__}, CPU threads available {torch.get_num_threads()}")
    print(f"{'shape':26} {'dtype':5} {'thr':>4} {'torch ms':>9} {'fmha ms':>9} {'speed':>6}")
    for name, shp, args in shapes:
        for dtype in ("f16", "bf16", "f32"):
            for t in [int(x) for x in a.threads.split(",")]:
                tt = torch_ms(*shp, dtype, t)
                ft = fmha_ms(a.bench_cpu, args, dtype, t)
                print(f"{name:26} {dtype:5} {t:4} {tt:9.3f} {ft:9.3f} {tt / ft:6.2f}", flush=True)


if __name__ == "__main__":
    main()
