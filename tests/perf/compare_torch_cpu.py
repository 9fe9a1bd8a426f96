#!/usr/bin/env python3
"""fmha's CPU backend (bench_cpu) against PyTorch's CPU SDPA, one after the
other in one run on the same machine and thread counts; prints speed = torch
time / fmha time (> 1: fmha faster).

    python3 tests/perf/compare_torch_cpu.py build/tests/perf/bench_cpu [--threads 1,16]
        [--isa auto,amx,avx512fp16,...] [--shapes all|prefill|decode] [--dtypes f16,bf16,f32]

Shapes: the Llama decode step (Hq=32 Hk=8 Nq=1 D=128, Nk=4096 and 16384;
bottom-right causal, which for one query is no mask) and prefill (H=8
N=2048 D=128 causal), in F16, BF16 and F32. torch: median of 7 timed calls
after 2 warm-ups, torch.set_num_threads(t); fmha: bench_cpu's median.
With --isa, bench_cpu runs once per value of FMHA_CPU_ISA (the CPU path it
forces, src/backend/cpu/cpu_isa.h) beside the same torch time; each column
gives fmha ms, the speed and bench_cpu's sampled rel-L2 against float64. A
path this CPU lacks falls back (bench_cpu's stderr says so): its column is
marked "(fallback)".

With --rounds R (R > 1) or --before EXE (auto path only), every (shape,
dtype, threads) is timed R times, rounds interleaved (round 1 of every case,
then round 2, ...: a host whose speed drifts moves torch and fmha alike),
with EXE (a bench_cpu built from another commit) run beside fmha in each
round; the end prints per case the medians and the median over rounds of
the per-round speed torch / fmha (and torch / before).
"""
import os
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


def fmha_run(exe, args, dtype, threads, isa="auto"):
    """(median ms, rel-L2, fell back) of bench_cpu with FMHA_CPU_ISA=isa."""
    env = dict(os.environ, FMHA_CPU_ISA=isa)
    r = subprocess.run([exe, *args, "--dtype", dtype, "--threads", str(threads), "--reps", "7"],
                       capture_output=True, text=True, check=True, env=env)
    fell_back = "not available" in r.stderr
    for line in r.stdout.splitlines():
        f = line.split()
        if f and f[0] == str(threads) and len(f) > 6:
            return float(f[1]), float(f[6]), fell_back
    raise RuntimeError(r.stdout + r.stderr)


def fmha_ms(exe, args, dtype, threads):
    return fmha_run(exe, args, dtype, threads)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_cpu")
    ap.add_argument("--threads", default="1,16")
    ap.add_argument("--isa", default="auto", help="comma-separated FMHA_CPU_ISA values, one fmha column each")
    ap.add_argument("--shapes", default="all", choices=("all", "prefill", "decode"))
    ap.add_argument("--dtypes", default="f16,bf16,f32")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (auto path only)")
    ap.add_argument("--before", default=None, help="a second bench_cpu (another commit) timed beside fmha")
    a = ap.parse_args()
    isas = a.isa.split(",")
    shapes = [("decode Nk=4096", (32, 8, 1, 4096, 128, True), ["--decode"]),
              ("decode Nk=16384", (32, 8, 1, 16384, 128, True), ["--decode", "--nk", "16384"]),
              ("prefill H8 N2048 causal", (8, 8, 2048, 2048, 128, True), ["--h", "8", "--n", "2048", "--d", "128"])]
    if a.shapes != "all":
        shapes = [s for s in shapes if s[0].startswith(a.shapes)]
    print(f"torch {torch.__version__}, CPU threads available {torch.get_num_threads()}")
    if a.rounds > 1 or a.before:
        return rounds(a, shapes)
    if isas == ["auto"]:
        print(f"{'shape':26} {'dtype':5} {'thr':>4} {'torch ms':>9} {'fmha ms':>9} {'speed':>6}")
    else:
        print(f"{'shape':26} {'dtype':5} {'thr':>4} {'torch ms':>9}" +
              "".join(f" | {isa + ' ms':>15} {'speed':>6} {'rel-L2':>8}" for isa in isas))
    for name, shp, args in shapes:
        for dtype in a.dtypes.split(","):
            for t in [int(x) for x in a.threads.split(",")]:
                tt = torch_ms(*shp, dtype, t)
                if isas == ["auto"]:
                    ft = fmha_ms(a.bench_cpu, args, dtype, t)
                    print(f"{name:26} {dtype:5} {t:4} {tt:9.3f} {ft:9.3f} {tt / ft:6.2f}", flush=True)
                    continue
                cols = []
                for isa in isas:
                    ft, err, fell_back = fmha_run(a.bench_cpu, args, dtype, t, isa)
                    mark = "(fallback)" if fell_back else ""
                    cols.append(f" | {mark:>6}{ft:9.3f} {tt / ft:6.2f} {err:8.1e}")
                print(f"{name:26} {dtype:5} {t:4} {tt:9.3f}" + "".join(cols), flush=True)


def rounds(a, shapes):
    """--rounds / --before: interleaved rounds, then the medians."""
    med = lambda xs: sorted(xs)[len(xs) // 2]
    cases = [(name, shp, args, dtype, int(t)) for name, shp, args in shapes for dtype in a.dtypes.split(",")
             for t in a.threads.split(",")]
    times = {c[0:1] + c[3:]: [] for c in cases}
    before = " before ms" if a.before else ""
    print(f"{'round':5} {'shape':26} {'dtype':5} {'thr':>4} {'torch ms':>9} {'fmha ms':>9} {'speed':>6}"
          f" {'rel-L2':>8}{before:>10}")
    for rnd in range(a.rounds):
        for name, shp, args, dtype, t in cases:
            tt = torch_ms(*shp, dtype, t)
            ft, err, _ = fmha_run(a.bench_cpu, args, dtype, t)
            bt = fmha_run(a.before, args, dtype, t)[0] if a.before else float("nan")
            times[(name, dtype, t)].append((tt, ft, bt))
            extra = f" {bt:9.3f}" if a.before else ""
            print(f"{rnd + 1:5} {name:26} {dtype:5} {t:4} {tt:9.3f} {ft:9.3f} {tt / ft:6.2f} {err:8.1e}{extra}",
                  flush=True)
    print(f"\nmedians over {a.rounds} rounds (speed: median of the per-round torch / fmha)")
    head = f"{'shape':26} {'dtype':5} {'thr':>4} {'torch ms':>9} {'fmha ms':>9} {'speed':>6}"
    print(head + (f" {'before ms':>9} {'speed':>6} {'after/before':>12}" if a.before else ""))
    for (name, dtype, t), rs in times.items():
        line = (f"{name:26} {dtype:5} {t:4} {med([r[0] for r in rs]):9.3f} {med([r[1] for r in rs]):9.3f}"
                f" {med([r[0] / r[1] for r in rs]):6.2f}")
        if a.before:
            line += (f" {med([r[2] for r in rs]):9.3f} {med([r[0] / r[2] for r in rs]):6.2f}"
                     f" {med([r[2] / r[1] for r in rs]):12.2f}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
