#!/usr/bin/env python3
"""torch.matmul and bench_gemm_sm90 at the same shape, one after the other in
one run, and the speed = torch time / fmha GEMM time (> 1: fmha faster).

    python3 tests/perf/gemm_vs_torch.py build/tests/perf/bench_gemm_sm90 [N]
"""
import re
import subprocess
import sys

import torch


def torch_ms(n, dtype, reps=20):
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        a @ b
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    return times[len(times) // 2]


def main():
    exe = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
    flops = 2.0 * n ** 3
    print(f"{'dtype':6} {'B layout':9} {'torch ms':>9} {'TF':>6} {'fmha ms':>9} {'TF':>6} {'speed':>6}")
    for dtype, flag in ((torch.float16, []), (torch.bfloat16, ["--bf16"])):
        for layout in ([], ["--nmajor"]):
            t = torch_ms(n, dtype)
            out = subprocess.run([exe, str(n), str(n), str(n), *flag, *layout], capture_output=True, text=True)
            m = re.search(r": ([0-9.]+) ms", out.stdout)
            if not m:
                print(out.stdout, out.stderr)
                continue
            f = float(m.group(1))
            name = "B[K][N]" if layout else "B[N][K]"
            print(f"{str(dtype)[6:]:6} {name:9} {t:9.4f} {flops / t / 1e9:6.0f} {f:9.4f} {flops / f / 1e9:6.0f} "
                  f"{t / f:6.3f}   {out.stdout.strip().split('max_rel_err')[-1].strip()}")


if __name__ == "__main__":
    main()
