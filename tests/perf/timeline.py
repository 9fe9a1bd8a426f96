#!/usr/bin/env python3
"""Where a call's GPU time goes: the kernels of fmha and of torch SDPA's
CUDNN_ATTENTION / FLASH_ATTENTION backends on one shape, from a CUPTI
timeline (torch.profiler records every kernel of the process, fmha's ones
launched through ctypes included).

For each shape and implementation: warm-up, then `--iters` calls back to
back inside the profiler; the trace's kernels are grouped into calls (a call
is the kernels of one iteration, found by the repeating kernel-name
sequence), and the script prints, per kernel position in a call, its median
duration, and the median of the gaps between consecutive kernels (the
previous call's last kernel end -> this call's first start included), so a
launch gap, a dependent launch's overlap (a negative gap) and the kernels'
own times are told apart. Durations in microseconds.

Usage (on a GPU machine):
  python3 timeline.py --lib build/src/libfmha.so [--groups decode] [--iters 20]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_torch as ct  # noqa: E402


def kernels_of(trace_path):
    with open(trace_path) as f:
        tr = json.load(f)
    ev = [e for e in tr.get("traceEvents", []) if e.get("cat") == "kernel" and e.get("ph") == "X"]
    ev.sort(key=lambda e: e["ts"])
    return [(e["name"], float(e["ts"]), float(e["dur"])) for e in ev]


def short(name):
    name = name.split("(")[0]
    for cut in ("void ", "fmha::cuda::"):
        name = name.replace(cut, "")
    return name[:70]


def profile(fn, iters):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
        path = tf.name
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)
    ks = kernels_of(path)
    os.unlink(path)
    return ks


def summarize(ks, iters):
    """Per position in a call: (name, median dur, median gap before it)."""
    if not ks or len(ks) % iters != 0:
        return None, len(ks)
    per = len(ks) // iters
    rows = []
    for j in range(per):
        durs, gaps = [], []
        for i in range(1, iters):  # skip the first call (its gap is to the warm-up)
            n, ts, dur = ks[i * per + j]
            pn, pts, pdur = ks[i * per + j - 1]
            durs.append(dur)
            gaps.append(ts - (pts + pdur))
        rows.append((short(ks[j][0]), statistics.median(durs), statistics.median(gaps)))
    calls = [ks[i * per + per - 1][1] + ks[i * per + per - 1][2] - ks[i * per][1] for i in range(iters)]
    period = (ks[-1][1] + ks[-1][2] - ks[per][1]) / (iters - 1)  # first start of call 1 .. end of the last
    return dict(rows=rows, span=statistics.median(calls), period=period), per


ct.FMHA_DTYPE.setdefault(torch.float8_e4m3fn, 4)  # fmha.h's FMHA_DTYPE_F8E4M3 and F8E5M2
ct.FMHA_DTYPE.setdefault(torch.float8_e5m2, 5)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.environ.get("FMHA_LIB"))
    ap.add_argument("--groups", default="decode")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--min-n", type=int, default=0, help="skip shapes whose Nk is below this")
    ap.add_argument("--max-n", type=int, default=1 << 30, help="skip shapes whose Nk is above this")
    ap.add_argument("--splits", default="0", help="comma list of fmha num_splits to time (0 = automatic)")
    ap.add_argument("--peers", type=int, default=1, help="also time cuDNN and FA2 (0: fmha only)")
    ap.add_argument("--kv-dtype", default=None, choices=("e4m3", "e5m2"),
                    help="K/V in this FP8 dtype (an FP8 KV cache under the shape's q dtype; fmha only)")
    ap.add_argument("--plain", type=int, default=0,
                    help="run each fmha variant this many times without the profiler (for ncu), then stop")
    ap.add_argument("--kernel", default=None, help="force this fmha kernel (default: the automatic choice)")
    args = ap.parse_args()
    fm = ct.Fmha(args.lib)
    groups = ct.shape_groups()
    for g in args.groups.split(","):
        for s in groups[g]:
            if not args.min_n <= s["Nk"] <= args.max_n:
                continue
            torch.manual_seed(0)
            q = torch.randn(s["B"], s["Hq"], s["Nq"], s["D"], device="cuda", dtype=s["dtype"])
            k = torch.randn(s["B"], s["Hk"], s["Nk"], s["D"], device="cuda", dtype=s["dtype"])
            v = torch.randn(s["B"], s["Hk"], s["Nk"], s["D"], device="cuda", dtype=s["dtype"])
            if args.kv_dtype:
                fp8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[args.kv_dtype]
                k, v = k.to(fp8), v.to(fp8)
            o = torch.empty_like(q)
            gqa = s["Hq"] != s["Hk"]
            impls = []
            for sp in (int(x) for x in args.splits.split(",")):
                p = fm.params(q, k, v, o, s["causal"], args.kernel)
                p.num_splits = sp
                fn, (st, msg) = fm.forward_fn(p)
                if fn is not None:
                    plan = [ln.strip() for ln in fm.explain(p).splitlines() if "key splits" in ln]
                    print(f"{ct.label(s)} fmha splits={sp}: {plan[0] if plan else '?'}")
                    impls.append((f"fmha splits={sp}", fn))
                else:
                    print(f"{ct.label(s)} fmha splits={sp}: status {st}: {msg}")
            peers = (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION))
            if args.plain or args.kv_dtype:
                peers = ()
            for name, be in peers if args.peers else ():
                def sd(be=be):
                    with sdpa_kernel(be):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=s["causal"], enable_gqa=gqa)
                try:
                    sd()
                    impls.append((name, sd))
                except Exception as ex:  # backend does not take this shape
                    print(f"{ct.label(s)} {name}: {type(ex).__name__}")
            if args.plain:
                for name, f in impls:
                    for _ in range(args.plain):
                        f()
                torch.cuda.synchronize()
                impls = []
            for name, f in impls:
                ks = profile(f, args.iters)
                summ, per = summarize(ks, args.iters)
                if summ is None:
                    print(f"{ct.label(s)} {name}: {per} kernels in {args.iters} calls: not a repeating pattern")
                    for n, ts, dur in ks[:12]:
                        print(f"    {short(n)} {dur:.2f}")
                    continue
                print(f"{ct.label(s)} {name}: {per} kernel(s) per call, call span {summ['span']:.2f} us, "
                      f"period {summ['period']:.2f} us")
                for n, dur, gap in summ["rows"]:
                    print(f"    gap {gap:7.2f}  dur {dur:8.2f}  {n}")
            del q, k, v, o
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
