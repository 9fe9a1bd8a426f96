#!/usr/bin/env python3
"""Does this torch expose an FP8 SDPA (issue 14's bar for FP8 prefill is
>= 1.0x cuDNN's FP8 SDPA when torch has one)? Tries
torch.nn.functional.scaled_dot_product_attention with float8_e4m3fn q, k, v
under each SDPA backend, B=1 H=32 N=8192 D=128 causal (and the cuDNN op
directly), prints what each says, and times whatever runs, beside BF16 SDPA
on FLASH_ATTENTION and CUDNN_ATTENTION of the same shape (CUDA events, the
median of 7 groups), so bench_cuda --suite fp8's fmha numbers can be put
next to them.

Usage: python3 probe_torch_fp8.py [--n 8192]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def bench(fn, groups=7, target_ms=25.0):
    fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn()
    e1.record()
    torch.cuda.synchronize()
    reps = max(1, int(target_ms / max(e0.elapsed_time(e1), 1e-3)))
    means = []
    for _ in range(groups):
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        torch.cuda.synchronize()
        means.append(e0.elapsed_time(e1) / reps)
    return statistics.median(means)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8192)
    a = ap.parse_args()
    B, H, N, D = 1, 32, a.n, 128
    flops = 4.0 * B * H * N * N * D * 0.5
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    q16, k16, v16 = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in (q16, k16, v16))
    rows = []
    for name, backend in [("FLASH_ATTENTION", SDPBackend.FLASH_ATTENTION),
                          ("CUDNN_ATTENTION", SDPBackend.CUDNN_ATTENTION),
                          ("EFFICIENT_ATTENTION", SDPBackend.EFFICIENT_ATTENTION),
                          ("MATH", SDPBackend.MATH)]:
        for dtype, (q, k, v) in [("bf16", (q16, k16, v16)), ("e4m3", (q8, k8, v8))]:
            if name in ("MATH", "EFFICIENT_ATTENTION") and dtype == "bf16":
                continue
            def run(q=q, k=k, v=v, backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            try:
                if name == "MATH" and N > 4096:
                    # The math path materializes [H, N, N]: probe it small.
                    qs, ks, vs = (x[:, :, :1024] for x in (q, k, v))
                    with sdpa_kernel(backend):
                        F.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
                    print(f"SDPA {name} {dtype}: runs (probed at N=1024; not timed)")
                    continue
                ms = bench(run)
                rows.append((name, dtype, ms))
                print(f"SDPA {name} {dtype}: {ms:.4f} ms, {flops / ms / 1e9:.1f} TFLOP/s")
            except Exception as e:  # noqa: BLE001 - the probe reports whatever torch says
                print(f"SDPA {name} {dtype}: not run: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    op = getattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention", None)
    if op is not None:
        try:
            op(q8, k8, v8, None, False, 0.0, True, False)
            print("aten._scaled_dot_product_cudnn_attention e4m3: runs")
        except Exception as e:  # noqa: BLE001
            print(f"aten._scaled_dot_product_cudnn_attention e4m3: not run: {type(e).__name__}: "
                  f"{str(e).splitlines()[0][:200]}")
    print("(causal, B=1 H=32 D=128, N=%d; TFLOP/s of the causal half)" % N)


if __name__ == "__main__":
    main()
