#!/usr/bin/env python3
"""fmha against PyTorch SDPA's FLASH_ATTENTION and CUDNN_ATTENTION backends.

Loads libfmha through ctypes (path: --lib, else $FMHA_LIB), runs it on the
same torch CUDA tensors as torch, in the same process, on torch's current
stream (passed with fmha_set_stream), and for each shape:

  * times fmha with the automatic choice and with each CUDA kernel forced by
    name, and torch SDPA with the FLASH_ATTENTION and CUDNN_ATTENTION
    backends: warm-up, then 7 groups of CUDA-event-timed repetitions, the
    median of the 7 group means (as /work/shared/tools/peers.py measures);
  * checks fmha's output against torch's (relative L2 against FLASH, else
    CUDNN);
  * prints a table: milliseconds, TFLOP/s of the effective work, and the
    speed against each backend: backend time / fmha time (> 1 means fmha is
    faster), as every fmha benchmark reports it;
  * with --plot FILE.png, draws TFLOP/s against N for fmha, cuDNN and FA2
    (the causal FP16 D=128 group, matplotlib).

Usage:
  python3 compare_torch.py --lib build/src/libfmha.so [--groups causal,decode]
         [--max-n 8192] [--forced-max-n 8192] [--kernels cuda_generic] [--json out.jsonl]
"""
import argparse
import ctypes
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# ---- the C API (include/fmha/fmha.h) ---------------------------------------

FMHA_SUCCESS = 0
FMHA_ERROR_UNSUPPORTED = 2
FMHA_DEVICE_CUDA = 1
FMHA_DTYPE = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3}
FMHA_MASK_NONE = 0
FMHA_MASK_CAUSAL = 1  # bottom-right


class FmhaTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p),
                ("dtype", ctypes.c_int),
                ("dims", ctypes.c_int64 * 4),
                ("strides", ctypes.c_int64 * 4)]


class FmhaForwardParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32),
                ("mask_flags", ctypes.c_uint32),
                ("q", FmhaTensor), ("k", FmhaTensor), ("v", FmhaTensor), ("o", FmhaTensor),
                ("lse", ctypes.POINTER(ctypes.c_float)),
                ("scale", ctypes.c_float),
                ("softcap", ctypes.c_float),
                ("window_left", ctypes.c_int32),
                ("window_right", ctypes.c_int32),
                ("kernel", ctypes.c_char_p),
                ("num_splits", ctypes.c_int32),
                ("reserved_", ctypes.c_int32)]


class Fmha:
    """A CUDA handle on torch's current device and stream."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        self.lib = lib
        lib.fmha_create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        lib.fmha_create.restype = ctypes.c_int
        lib.fmha_destroy.argtypes = [ctypes.c_void_p]
        lib.fmha_destroy.restype = None
        lib.fmha_set_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.fmha_set_stream.restype = ctypes.c_int
        lib.fmha_forward_params_init.argtypes = [ctypes.POINTER(FmhaForwardParams)]
        lib.fmha_forward_params_init.restype = None
        lib.fmha_forward_workspace_size.argtypes = [ctypes.c_void_p, ctypes.POINTER(FmhaForwardParams),
                                                    ctypes.POINTER(ctypes.c_size_t)]
        lib.fmha_forward_workspace_size.restype = ctypes.c_int
        lib.fmha_forward.argtypes = [ctypes.c_void_p, ctypes.POINTER(FmhaForwardParams), ctypes.c_void_p,
                                     ctypes.c_size_t]
        lib.fmha_forward.restype = ctypes.c_int
        lib.fmha_forward_explain.argtypes = [ctypes.c_void_p, ctypes.POINTER(FmhaForwardParams),
                                             ctypes.c_char_p, ctypes.c_size_t]
        lib.fmha_forward_explain.restype = ctypes.c_int
        lib.fmha_kernel_count.argtypes = []
        lib.fmha_kernel_count.restype = ctypes.c_int
        lib.fmha_kernel_name.argtypes = [ctypes.c_int]
        lib.fmha_kernel_name.restype = ctypes.c_char_p
        lib.fmha_last_error_message.argtypes = []
        lib.fmha_last_error_message.restype = ctypes.c_char_p
        lib.fmha_version.argtypes = []
        lib.fmha_version.restype = ctypes.c_uint32

        # The struct layout must match the library's.
        p = FmhaForwardParams()
        lib.fmha_forward_params_init(ctypes.byref(p))
        if p.struct_size != ctypes.sizeof(FmhaForwardParams):
            sys.exit(f"fmha_forward_params is {p.struct_size} bytes in {path}, "
                     f"{ctypes.sizeof(FmhaForwardParams)} here: header and script disagree")

        self.handle = ctypes.c_void_p()
        st = lib.fmha_create(ctypes.byref(self.handle), FMHA_DEVICE_CUDA, torch.cuda.current_device())
        if st != FMHA_SUCCESS:
            sys.exit(f"fmha_create(CUDA): status {st}: {self.error()}")
        self.stream = None
        self._keep = []

    def error(self):
        return self.lib.fmha_last_error_message().decode()

    def kernels(self):
        return [self.lib.fmha_kernel_name(i).decode() for i in range(self.lib.fmha_kernel_count())]

    def sync_stream(self):
        s = torch.cuda.current_stream().cuda_stream
        if s != self.stream:
            st = self.lib.fmha_set_stream(self.handle, ctypes.c_void_p(s))
            if st != FMHA_SUCCESS:
                raise RuntimeError(f"fmha_set_stream: {self.error()}")
            self.stream = s

    @staticmethod
    def tensor(t):
        x = FmhaTensor()
        x.data = t.data_ptr()
        x.dtype = FMHA_DTYPE[t.dtype]
        for i in range(4):
            x.dims[i] = t.shape[i]
            x.strides[i] = t.stride(i)
        return x

    def params(self, q, k, v, o, causal, kernel=None, lse=None):
        p = FmhaForwardParams()
        self.lib.fmha_forward_params_init(ctypes.byref(p))
        p.q, p.k, p.v, p.o = self.tensor(q), self.tensor(k), self.tensor(v), self.tensor(o)
        p.mask_flags = FMHA_MASK_CAUSAL if causal else FMHA_MASK_NONE
        if kernel is not None:
            name = kernel.encode()
            self._keep.append(name)
            p.kernel = name
        if lse is not None:
            p.lse = ctypes.cast(lse.data_ptr(), ctypes.POINTER(ctypes.c_float))
        return p

    def workspace_bytes(self, p):
        n = ctypes.c_size_t(0)
        st = self.lib.fmha_forward_workspace_size(self.handle, ctypes.byref(p), ctypes.byref(n))
        return st, n.value

    def explain(self, p):
        buf = ctypes.create_string_buffer(4096)
        self.lib.fmha_forward_explain(self.handle, ctypes.byref(p), buf, len(buf))
        return buf.value.decode()

    def forward_fn(self, p):
        """A closure running fmha_forward(p) with its workspace, or (status, message)."""
        self.sync_stream()
        st, nbytes = self.workspace_bytes(p)
        if st != FMHA_SUCCESS:
            return None, (st, self.error())
        ws = torch.empty(max(nbytes, 16), dtype=torch.uint8, device="cuda")
        lib, handle, pref, wsp = self.lib, self.handle, ctypes.byref(p), ctypes.c_void_p(ws.data_ptr())

        def run():
            s = lib.fmha_forward(handle, pref, wsp, nbytes)
            if s != FMHA_SUCCESS:
                raise RuntimeError(f"fmha_forward: status {s}: {self.error()}")
        run._workspace = ws  # keep alive
        run._params = p
        return run, (FMHA_SUCCESS, f"{nbytes} workspace bytes")


# ---- timing -----------------------------------------------------------------

def bench(fn, target_ms=25.0, groups=7):
    """Median over `groups` groups of the mean time of a repetition, in ms."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    one = max(s.elapsed_time(e), 1e-3)
    reps = int(min(200, max(1, math.ceil(target_ms / one))))
    times = []
    for _ in range(groups):
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / reps)
    times.sort()
    return times[len(times) // 2]


def rel_l2(a, b):
    a = a.float()
    b = b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


# ---- shapes -----------------------------------------------------------------

def shape_groups():
    g = {}
    g["causal"] = [dict(B=1, Hq=32, Hk=32, Nq=n, Nk=n, D=128, causal=True, dtype=torch.float16)
                   for n in (512, 1024, 2048, 4096, 8192, 16384, 32768)]
    g["bf16"] = [dict(B=1, Hq=32, Hk=32, Nq=n, Nk=n, D=128, causal=True, dtype=torch.bfloat16)
                 for n in (2048, 8192, 16384)]
    g["noncausal"] = [dict(B=1, Hq=32, Hk=32, Nq=n, Nk=n, D=128, causal=False, dtype=torch.float16)
                      for n in (2048, 8192)]
    g["d64"] = [dict(B=1, Hq=32, Hk=32, Nq=n, Nk=n, D=64, causal=True, dtype=torch.float16)
                for n in (2048, 8192)]
    g["d256"] = [dict(B=1, Hq=32, Hk=32, Nq=n, Nk=n, D=256, causal=True, dtype=torch.float16)
                 for n in (2048, 8192)]
    g["gqa"] = [dict(B=8, Hq=32, Hk=8, Nq=2048, Nk=2048, D=128, causal=True, dtype=torch.bfloat16)]
    g["prefill"] = [dict(B=1, Hq=32, Hk=8, Nq=512, Nk=16384, D=128, causal=True, dtype=torch.bfloat16)]
    # Decode: issue 9's dense shapes (BF16 GQA 32/8 D=128, one query row;
    # docs/performance.md, "Paged decode, a tile per shape") after the F16
    # one; K+V bandwidth is printed under the table.
    g["decode"] = [dict(B=1, Hq=32, Hk=8, Nq=1, Nk=32768, D=128, causal=False, dtype=torch.float16),
                   dict(B=1, Hq=32, Hk=8, Nq=1, Nk=131072, D=128, causal=False, dtype=torch.bfloat16),
                   dict(B=16, Hq=32, Hk=8, Nq=1, Nk=8192, D=128, causal=False, dtype=torch.bfloat16)]
    return g


def label(s):
    dt = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}[s["dtype"]]
    m = "causal" if s["causal"] else "full"
    h = f"H{s['Hq']}" if s["Hq"] == s["Hk"] else f"H{s['Hq']}/{s['Hk']}"
    n = f"N{s['Nq']}" if s["Nq"] == s["Nk"] else f"N{s['Nq']}x{s['Nk']}"
    return f"B{s['B']} {h} {n} D{s['D']} {m} {dt}"


def effective_flops(s):
    B, H, Nq, Nk, D = s["B"], s["Hq"], s["Nq"], s["Nk"], s["D"]
    if not s["causal"]:
        return 4.0 * B * H * Nq * Nk * D
    # bottom-right: row i sees min(Nk, i + 1 + Nk - Nq) keys
    off = Nk - Nq
    pairs = sum(max(0, min(Nk, i + 1 + off)) for i in range(Nq))
    return 4.0 * B * H * pairs * D


# ---- one shape ---------------------------------------------------------------

def run_shape(fm, s, kernels, forced_max_n, results):
    torch.manual_seed(0)
    dev = "cuda"
    q = torch.randn(s["B"], s["Hq"], s["Nq"], s["D"], device=dev, dtype=s["dtype"])
    k = torch.randn(s["B"], s["Hk"], s["Nk"], s["D"], device=dev, dtype=s["dtype"])
    v = torch.randn(s["B"], s["Hk"], s["Nk"], s["D"], device=dev, dtype=s["dtype"])
    flops = effective_flops(s)
    row = dict(shape=label(s), **{k_: (str(v_) if k_ == "dtype" else v_) for k_, v_ in s.items()})

    # torch backends
    gqa = s["Hq"] != s["Hk"]
    lower_right = s["causal"] and s["Nq"] != s["Nk"]
    mask = None
    if lower_right:
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(s["Nq"], s["Nk"])

    def sdpa():
        if lower_right:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        return F.scaled_dot_product_attention(q, k, v, is_causal=s["causal"], enable_gqa=gqa)

    outs = {}
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                outs[name] = sdpa()
                row[name + "_ms"] = bench(sdpa)
        except Exception as ex:  # backend does not take this shape
            row[name + "_error"] = type(ex).__name__ + ": " + str(ex).splitlines()[0][:100]
    if gqa and "cudnn_error" in row and not s["causal"]:
        # cuDNN declined enable_gqa: time it on K/V expanded to Hq heads, which
        # reads group-size times the bytes; reported apart, not as "vs cudnn".
        try:
            group = s["Hq"] // s["Hk"]
            ke, ve = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(q, ke, ve)
                row["cudnn_expanded_kv_ms"] = bench(lambda: F.scaled_dot_product_attention(q, ke, ve))
            del ke, ve
        except Exception as ex:
            row["cudnn_expanded_kv_error"] = type(ex).__name__ + ": " + str(ex).splitlines()[0][:100]
    ref_name = "flash" if "flash" in outs else ("cudnn" if "cudnn" in outs else None)
    ref = outs.get(ref_name)

    # fmha: automatic, then each CUDA kernel forced
    o = torch.empty_like(q)
    variants = [("auto", None)] + [(kn, kn) for kn in kernels]
    for vname, kernel in variants:
        if kernel == "cuda_generic" and s["Nq"] * s["Nk"] > forced_max_n ** 2:
            row[vname + "_skipped"] = f"Nq*Nk > (--forced-max-n {forced_max_n})^2"
            continue
        p = fm.params(q, k, v, o, s["causal"], kernel)
        if vname == "auto":
            chosen = [ln for ln in fm.explain(p).splitlines() if ln.startswith("chosen:")]
            row["auto_kernel"] = chosen[0].split()[1] if chosen else "?"
        fn, (st, msg) = fm.forward_fn(p)
        if fn is None:
            row[vname + "_error"] = ("unsupported: " if st == FMHA_ERROR_UNSUPPORTED else f"status {st}: ") + msg
            continue
        o.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        if ref is not None:
            row[vname + "_rel_l2_vs_" + ref_name] = rel_l2(o, ref)
        row[vname + "_nan"] = bool(torch.isnan(o).any().item())
        row[vname + "_ms"] = bench(fn)
    kv_bytes = 2.0 * s["B"] * s["Hk"] * s["Nk"] * s["D"] * q.element_size()
    for key in list(row):
        if key.endswith("_ms"):
            row[key.replace("_ms", "_tflops")] = flops / (row[key] * 1e-3) / 1e12
            if s["Nq"] == 1:  # decode: bound by the K/V bytes
                row[key.replace("_ms", "_kv_tbps")] = kv_bytes / (row[key] * 1e-3) / 1e12
    results.append(row)
    del q, k, v, o, outs
    torch.cuda.empty_cache()
    return row


def fmt_ms(x):
    return f"{x:9.3f}" if isinstance(x, float) else f"{'-':>9}"


def print_table(rows, kernels):
    cols = ["auto"] + kernels
    head = f"{'shape':38} {'auto kernel':14}" + "".join(f" {c[:12]:>12}" for c in cols) + \
        f" {'flash':>9} {'cudnn':>9} {'vs flash':>10} {'vs cudnn':>10} {'rel-L2':>9}"
    print("\ntimes in ms (median of 7 groups); speed vs X = X time / fmha automatic time (> 1: fmha faster)")
    print(head)
    print("-" * len(head))
    for r in rows:
        line = f"{r['shape']:38} {r.get('auto_kernel', '?'):14}"
        for c in cols:
            line += f" {fmt_ms(r.get(c + '_ms')):>12}"
        line += f" {fmt_ms(r.get('flash_ms'))} {fmt_ms(r.get('cudnn_ms'))}"
        for b in ("flash", "cudnn"):
            if isinstance(r.get("auto_ms"), float) and isinstance(r.get(b + "_ms"), float):
                line += f" {r[b + '_ms'] / r['auto_ms']:10.2f}"
            else:
                line += f" {'-':>10}"
        err = [v for k, v in r.items() if k.startswith("auto_rel_l2")]
        line += f" {err[0]:9.2e}" if err else f" {'-':>9}"
        print(line)
    print()
    for r in rows:
        bw = [f"{k[:-8]} {v:.2f}" for k, v in r.items() if k.endswith("_kv_tbps")]
        if bw:
            print(f"  {r['shape']}: K+V TB/s: " + ", ".join(bw))
    for r in rows:
        for k, v in r.items():
            if k.endswith("_error") or k.endswith("_skipped"):
                print(f"  {r['shape']}: {k}: {v}")


def plot(rows, path):
    """TFLOP/s against N of the square causal FP16 D=128 rows: fmha (automatic),
    cuDNN and FA2, measured in this run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sel = [r for r in rows if r["causal"] and r["D"] == 128 and r["Nq"] == r["Nk"] and r["B"] == 1
           and r["dtype"] == str(torch.float16)]
    sel.sort(key=lambda r: r["Nq"])
    if not sel:
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, name in (("auto", "fmha"), ("cudnn", "cuDNN " + str(torch.backends.cudnn.version())),
                      ("flash", "FlashAttention-2 (torch)")):
        pts = [(r["Nq"], r[key + "_tflops"]) for r in sel if key + "_tflops" in r]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length N (B=1, H=32, D=128, causal, FP16)")
    ax.set_ylabel("TFLOP/s (visible pairs)")
    ax.set_title(torch.cuda.get_device_name() + ": attention forward")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.environ.get("FMHA_LIB"), help="path to libfmha.so (default $FMHA_LIB)")
    ap.add_argument("--groups", default="causal,bf16,noncausal,d64,prefill,decode",
                    help="comma list of shape groups: " + ",".join(shape_groups()))
    ap.add_argument("--max-n", type=int, default=1 << 30, help="skip shapes with Nq or Nk above this")
    ap.add_argument("--forced-max-n", type=int, default=8192,
                    help="time forced cuda_generic only while Nq*Nk <= this squared (it is slow)")
    ap.add_argument("--kernels", default=None,
                    help="comma list of CUDA kernels to force (default: every registered cuda_* kernel)")
    ap.add_argument("--json", default=None, help="also write one JSON row per shape here")
    ap.add_argument("--plot", default=None, help="write TFLOP/s against N of the causal group to this PNG")
    ap.add_argument("--quiet", action="store_true", help="print only the table, not a JSON line per shape")
    args = ap.parse_args()
    if not args.lib:
        sys.exit("give the library path with --lib or FMHA_LIB")
    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible to torch")

    fm = Fmha(args.lib)
    cuda_kernels = [k for k in fm.kernels() if k.startswith("cuda_")]
    kernels = cuda_kernels if args.kernels is None else [k for k in args.kernels.split(",") if k]
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}), "
          f"{torch.cuda.get_device_name()}, fmha {fm.lib.fmha_version()} from {args.lib}; "
          f"registered: {', '.join(fm.kernels())}", flush=True)
    groups = shape_groups()
    rows = []
    for gname in args.groups.split(","):
        if gname not in groups:
            sys.exit(f"unknown group {gname!r}; groups: {', '.join(groups)}")
        for s in groups[gname]:
            if max(s["Nq"], s["Nk"]) > args.max_n:
                continue
            r = run_shape(fm, s, kernels, args.forced_max_n, rows)
            if not args.quiet:
                print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    print_table(rows, kernels)
    if args.plot:
        plot(rows, args.plot)
    bad = [r["shape"] for r in rows
           if any(k.endswith("_nan") and v for k, v in r.items())
           or any(k.startswith("auto_rel_l2") and v > 2e-2 for k, v in r.items())]
    if bad:
        print("MISMATCH against torch (NaN or rel-L2 > 2e-2): " + "; ".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
