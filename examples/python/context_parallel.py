"""context_parallel.py: causal attention over a sequence split across
processes (context parallelism, "ring attention"), built on two fmha calls:
a forward that returns the log-sum-exp (lse) of each row, and fmha_merge.

    torchrun --nproc-per-node 2 examples/python/context_parallel.py --check
    torchrun --nproc-per-node 2 examples/python/context_parallel.py --bench --seq 131072
    torchrun --nproc-per-node 3 examples/python/context_parallel.py --device cpu --check --seq 1000

One process per device: NCCL between GPUs (rank r uses GPU LOCAL_RANK), gloo
between CPU processes with fmha's CPU backend (--device cpu, the default
without a GPU). See docs/long_context.md for the algebra.

Layout (zig-zag). The sequence of S tokens is cut into 2N chunks (N =
processes); rank r holds the queries, keys and values of chunks r and
2N-1-r, so every rank has one early and one late chunk and the causal work
is balanced. When 2N does not divide S, chunk c has S // 2N tokens plus one
for the first S % 2N chunks (uneven chunks, no padding).

Ring. K/V shards travel around the ring: at step s rank r holds the shard of
rank src = (r - s) mod N, sends it to r + 1 and receives the next one from
r - 1 (batch_isend_irecv on a side CUDA stream, into the receive buffer not
in use: double-buffered) while fmha computes on the current stream. Per step
the mask follows the chunks (q chunk a against k chunk b): b == a causal,
b < a full, b > a skipped. With the zig-zag that is, for rank r:
    step 0 (own shard): q chunk r vs k chunk r, causal (square: the
        alignment does not matter); q chunk 2N-1-r vs k chunks [r, 2N-1-r],
        causal aligned bottom-right (query i of the chunk sees keys
        j <= i + len(chunk r): its diagonal is the last key);
    src < r: both q chunks vs k chunk src, no mask (k chunk 2N-1-src comes
        after both q chunks: skipped);
    src > r: q chunk 2N-1-r vs both k chunks of src, no mask (q chunk r
        comes before both: skipped).
Each step after the first is one unmasked block of the same size. Each
partial (o_i, lse_i) is merged into the running result in place with
fmha.merge: lse = log(exp(lse_a) + exp(lse_b)), o = sum exp(lse_i - lse) o_i.
N = 1 is one causal forward.

fmha calls. --fmha package uses the fmha Python package (SWIG); --fmha ctypes
a small ctypes wrapper of fmha_forward and fmha_merge over torch tensors
(libfmha from FMHA_LIBRARY, e.g. build/src/libfmha.so.0); auto (default)
takes the package when it imports, else ctypes.

--check runs the ring on random data and compares the gathered result with
one fmha forward over the whole sequence (o and lse): max error and
relative L2, exit status 1 past the dtype's tolerance. --seq and --dtype
take comma-separated lists (every combination is checked).
--bench times the ring (CUDA events, max over ranks), the same loop with the
communication skipped (compute only) and the transfers alone (comm only),
and reports TFLOP/s per GPU and how much of the transfer the compute hides.
"""
import argparse
import ctypes
import ctypes.util
import math
import os
import sys
import time

import torch
import torch.distributed as dist

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "f16": torch.float16, "f32": torch.float32,
          "fp32": torch.float32}
# Elementwise |ring - single| <= TOL * (1 + |single|) for o, and the same
# bound on lse. Both results are rounded to the dtype once, and the ring's
# o N more times (each in-place merge writes o in the dtype): a few units in
# the last place of the dtype.
TOL = {torch.bfloat16: 2 ** -6, torch.float16: 2 ** -8, torch.float32: 2e-5}
LSE_TOL = {torch.bfloat16: 1e-3, torch.float16: 1e-3, torch.float32: 2e-5}


# ---- fmha calls ------------------------------------------------------------------
class PackageOps:
    """fmha.forward and fmha.merge of the Python package."""

    name = "fmha package"

    def __init__(self, fmha):
        self.fmha = fmha

    def forward(self, q, k, v, *, causal, alignment, out, out_lse):
        self.fmha.forward(q, k, v, causal=causal, causal_alignment=alignment, out=out, out_lse=out_lse)

    def merge(self, outs, lses, *, out, out_lse):
        self.fmha.merge(outs, lses, out=out, out_lse=out_lse)


class _Tensor(ctypes.Structure):  # fmha_tensor
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("dims", ctypes.c_int64 * 4), ("strides", ctypes.c_int64 * 4)]


class _ForwardParams(ctypes.Structure):  # fmha_forward_params (0.2)
    _fields_ = [("struct_size", ctypes.c_uint32), ("mask_flags", ctypes.c_uint32),
                ("q", _Tensor), ("k", _Tensor), ("v", _Tensor), ("o", _Tensor),
                ("lse", ctypes.c_void_p), ("scale", ctypes.c_float), ("softcap", ctypes.c_float),
                ("window_left", ctypes.c_int32), ("window_right", ctypes.c_int32),
                ("kernel", ctypes.c_char_p), ("num_splits", ctypes.c_int32), ("reserved_", ctypes.c_int32),
                ("num_seqs", ctypes.c_int32), ("max_seqlen_q", ctypes.c_int32),
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
                ("seqused_k", ctypes.c_void_p), ("block_table", ctypes.c_void_p),
                ("block_table_stride", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int32),
                ("reserved2_", ctypes.c_int32)]


class _MergeParams(ctypes.Structure):  # fmha_merge_params
    _fields_ = [("struct_size", ctypes.c_uint32), ("num_parts", ctypes.c_int32),
                ("o_parts", ctypes.POINTER(_Tensor)), ("lse_parts", ctypes.POINTER(ctypes.c_void_p)),
                ("o", _Tensor), ("lse", ctypes.c_void_p)]


class CtypesOps:
    """fmha_forward and fmha_merge through ctypes, on torch tensors: for
    machines where the package is not built (it needs SWIG)."""

    name = "ctypes"
    _DTYPE = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3}
    _CAUSAL, _TOP_LEFT = 1, 2

    def __init__(self, device):
        path = os.environ.get("FMHA_LIBRARY") or ctypes.util.find_library("fmha") or "libfmha.so.0"
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise SystemExit(f"context_parallel.py: cannot load libfmha ({e}); set FMHA_LIBRARY to the "
                             "library, e.g. FMHA_LIBRARY=build/src/libfmha.so.0") from None
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for fn, res, args in [("fmha_status_string", ctypes.c_char_p, [ctypes.c_int]),
                              ("fmha_last_error_message", ctypes.c_char_p, []),
                              ("fmha_create", ctypes.c_int, [ctypes.POINTER(vp), ctypes.c_int, ctypes.c_int]),
                              ("fmha_destroy", None, [vp]),
                              ("fmha_set_stream", ctypes.c_int, [vp, vp]),
                              ("fmha_forward_params_init_sized", None, [vp, sz]),
                              ("fmha_forward_workspace_size", ctypes.c_int, [vp, vp, ctypes.POINTER(sz)]),
                              ("fmha_forward", ctypes.c_int, [vp, vp, vp, sz]),
                              ("fmha_merge_params_init", None, [vp]),
                              ("fmha_merge", ctypes.c_int, [vp, vp])]:
            f = getattr(lib, fn)
            f.restype, f.argtypes = res, args
        self.lib = lib
        self.cuda = device.type == "cuda"
        self.handle = vp()
        self._check(lib.fmha_create(ctypes.byref(self.handle), 1 if self.cuda else 0,
                                    (device.index or 0) if self.cuda else 0), "fmha_create")
        self.device = device
        self.workspace = torch.empty(0, dtype=torch.uint8, device=device)

    def _check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: {self.lib.fmha_status_string(status).decode()}: "
                               f"{self.lib.fmha_last_error_message().decode()}")

    def _tensor(self, t):
        d = _Tensor()
        d.data = t.data_ptr()
        d.dtype = self._DTYPE[t.dtype]
        d.dims[:] = list(t.shape)
        d.strides[:] = list(t.stride())
        return d

    def _stream(self):
        if self.cuda:
            self._check(self.lib.fmha_set_stream(self.handle, torch.cuda.current_stream().cuda_stream),
                        "fmha_set_stream")

    def forward(self, q, k, v, *, causal, alignment, out, out_lse):
        assert out_lse.is_contiguous() and out_lse.dtype == torch.float32
        p = _ForwardParams()
        self.lib.fmha_forward_params_init_sized(ctypes.byref(p), ctypes.sizeof(p))
        p.q, p.k, p.v, p.o = (self._tensor(t) for t in (q, k, v, out))
        p.lse = out_lse.data_ptr()
        if causal:
            p.mask_flags = self._CAUSAL | (self._TOP_LEFT if alignment == "top_left" else 0)
        self._stream()
        need = ctypes.c_size_t()
        self._check(self.lib.fmha_forward_workspace_size(self.handle, ctypes.byref(p), ctypes.byref(need)),
                    "fmha_forward_workspace_size")
        if self.workspace.numel() < need.value + 16:
            # Grown on the stream that uses it (the caching allocator orders
            # the old buffer's reuse after it).
            self.workspace = torch.empty(need.value + 16, dtype=torch.uint8, device=self.device)
        base = self.workspace.data_ptr()
        self._check(self.lib.fmha_forward(self.handle, ctypes.byref(p), base + (-base) % 16, need.value),
                    "fmha_forward")

    def merge(self, outs, lses, *, out, out_lse):
        p = _MergeParams()
        self.lib.fmha_merge_params_init(ctypes.byref(p))
        parts = (_Tensor * len(outs))(*(self._tensor(t) for t in outs))
        lse_ptrs = (ctypes.c_void_p * len(lses))(*(t.data_ptr() for t in lses))
        p.num_parts = len(outs)
        p.o_parts = parts
        p.lse_parts = lse_ptrs
        p.o = self._tensor(out)
        p.lse = out_lse.data_ptr()
        self._stream()
        self._check(self.lib.fmha_merge(self.handle, ctypes.byref(p)), "fmha_merge")

    def __del__(self):
        if getattr(self, "handle", None):
            self.lib.fmha_destroy(self.handle)


def load_ops(choice, device):
    if choice in ("auto", "package"):
        try:
            import fmha
            if not hasattr(fmha, "merge"):
                raise ImportError("this fmha package has no merge (fmha >= 0.2 needed)")
            return PackageOps(fmha)
        except ImportError as e:
            if choice == "package":
                raise SystemExit(f"context_parallel.py: --fmha package: {e}") from None
    return CtypesOps(device)


# ---- the zig-zag layout ------------------------------------------------------------
def chunk_bounds(seq, chunks):
    """[start, end) of each of `chunks` chunks: seq // chunks tokens each,
    one more for the first seq % chunks."""
    base, extra = divmod(seq, chunks)
    bounds, start = [], 0
    for c in range(chunks):
        end = start + base + (1 if c < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


class ZigZag:
    """Rank r of n holds chunks r and 2n-1-r of the sequence."""

    def __init__(self, seq, n):
        self.n = n
        self.bounds = chunk_bounds(seq, 2 * n)

    def chunks(self, r):
        return r, 2 * self.n - 1 - r

    def lengths(self, r):
        return tuple(self.bounds[c][1] - self.bounds[c][0] for c in self.chunks(r))

    def local(self, full, r):
        """The rows of rank r out of a [B, H, S, D] tensor: its two chunks, concatenated."""
        return torch.cat([full[:, :, slice(*self.bounds[c])] for c in self.chunks(r)], dim=2).contiguous()

    def max_local(self):
        return max(sum(self.lengths(r)) for r in range(self.n))


# ---- ring attention ----------------------------------------------------------------
class RingAttention:
    """Causal attention of this rank's zig-zag rows against the whole
    sequence. Buffers are allocated once; __call__ runs the ring.

    comm=False skips the transfers (each step computes on a buffer of the
    right shape holding stale data: the compute-only time); compute=False
    skips fmha (the transfers alone)."""

    def __init__(self, ops, zz, rank, batch, hq, hk, d, dtype, device):
        self.ops, self.zz, self.rank, self.n = ops, zz, rank, zz.n
        self.hq, self.device = hq, device
        self.cuda = device.type == "cuda"
        lmax = zz.max_local()
        self.kv_numel = batch * hk * d  # per token
        # Double-buffered receive: step s computes on one pair while the next
        # shard lands in the other.
        self.recv = [[torch.randn(lmax * self.kv_numel, device=device).to(dtype) for _ in range(2)]
                     for _ in range(2)]
        self.shape_kv = (batch, hk, d)
        # One partial at a time: o [B, Hq, rows, D] and its lse, contiguous.
        self.part_o = torch.empty(batch * hq * lmax * d, dtype=dtype, device=device)
        self.part_lse = torch.empty(batch * hq * lmax, dtype=torch.float32, device=device)
        self.shape_q = (batch, hq, d)
        self.comm_stream = torch.cuda.Stream(device) if self.cuda else None

    def _kv_view(self, flat, rows):
        b, h, d = self.shape_kv
        return flat[:b * h * rows * d].view(b, h, rows, d)

    def _partial(self, rows):
        b, h, d = self.shape_q
        return self.part_o[:b * h * rows * d].view(b, h, rows, d), self.part_lse[:b * h * rows].view(b, h, rows)

    def _accumulate(self, q, k, v, o, lse):
        """o, lse <- merge((o, lse), attention of q over k, v unmasked)."""
        if q.shape[2] == 0 or k.shape[2] == 0:
            return
        po, pl = self._partial(q.shape[2])
        self.ops.forward(q, k, v, causal=False, alignment="bottom_right", out=po, out_lse=pl)
        self.ops.merge([o, po], [lse, pl], out=o, out_lse=lse)

    def __call__(self, q, k, v, comm=True, compute=True):
        """q [B, Hq, L, D], k, v [B, Hk, L, D] contiguous (this rank's two
        chunks). Returns o [B, Hq, L, D] and the lse of each chunk's rows."""
        r, n = self.rank, self.n
        l0, l1 = self.zz.lengths(r)
        o = torch.empty_like(q)
        o0, o1 = o[:, :, :l0], o[:, :, l0:]
        q0, q1 = q[:, :, :l0], q[:, :, l0:]
        b, hq = q.shape[:2]
        lse0 = torch.empty(b, hq, l0, dtype=torch.float32, device=q.device)
        lse1 = torch.empty(b, hq, l1, dtype=torch.float32, device=q.device)
        if n == 1:  # the two chunks are the whole sequence in order: one forward
            lse = torch.empty(b, hq, l0 + l1, dtype=torch.float32, device=q.device)
            if compute:
                self.ops.forward(q, k, v, causal=True, alignment="bottom_right", out=o, out_lse=lse)
            return o, lse[:, :, :l0], lse[:, :, l0:]

        cur_k, cur_v = k, v
        nxt, prv = (r + 1) % n, (r - 1) % n
        for s in range(n):
            src = (r - s) % n
            reqs = []
            if comm and s + 1 < n:
                rows = sum(self.zz.lengths((r - s - 1) % n))
                nk, nv = (self._kv_view(buf, rows) for buf in self.recv[(s + 1) % 2])
                ops = [dist.P2POp(dist.isend, cur_k, nxt), dist.P2POp(dist.isend, cur_v, nxt),
                       dist.P2POp(dist.irecv, nk, prv), dist.P2POp(dist.irecv, nv, prv)]
                if self.cuda:
                    # The receive buffer was step s-1's shard: the transfer
                    # starts once the compute enqueued so far (step s-1's)
                    # is done with it.
                    self.comm_stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(self.comm_stream):
                        reqs = dist.batch_isend_irecv(ops)
                else:
                    reqs = dist.batch_isend_irecv(ops)
            elif s + 1 < n:  # compute only: the next step runs on a stale buffer of the right shape
                rows = sum(self.zz.lengths((r - s - 1) % n))
                nk, nv = (self._kv_view(buf, rows) for buf in self.recv[(s + 1) % 2])

            if compute:
                if s == 0:
                    # Own shard: the diagonal blocks. q chunk r vs k chunk r is
                    # square; q chunk 2n-1-r vs both k chunks ends on the last key
                    # (bottom-right: query i sees keys j <= i + l0).
                    if l0:
                        self.ops.forward(q0, k[:, :, :l0], v[:, :, :l0], causal=True,
                                         alignment="bottom_right", out=o0, out_lse=lse0)
                    if l1:
                        self.ops.forward(q1, k, v, causal=True, alignment="bottom_right", out=o1, out_lse=lse1)
                elif src < r:
                    # k chunk src precedes both q chunks; k chunk 2n-1-src follows both.
                    ls0 = self.zz.lengths(src)[0]
                    kc, vc = cur_k[:, :, :ls0], cur_v[:, :, :ls0]
                    self._accumulate(q0, kc, vc, o0, lse0)
                    self._accumulate(q1, kc, vc, o1, lse1)
                else:
                    # Both k chunks of src lie between q chunk r and q chunk 2n-1-r.
                    self._accumulate(q1, cur_k, cur_v, o1, lse1)
            for req in reqs:
                req.wait()  # on CUDA: the current stream waits for the transfer
            if s + 1 < n:
                cur_k, cur_v = nk, nv
        return o, lse0, lse1


# ---- check and bench -----------------------------------------------------------------
def setup():
    """(rank, world size, device) from torchrun's environment."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return rank, world


def gather_rows(zz, t, world):
    """Rank 0 gets the [B, H, S, ...] tensor from every rank's zig-zag rows
    (None on the others). Padded to the longest local length for all_gather."""
    lmax = zz.max_local()
    pad = torch.zeros(*t.shape[:2], lmax, *t.shape[3:], dtype=t.dtype, device=t.device)
    pad[:, :, :t.shape[2]] = t
    parts = [torch.empty_like(pad) for _ in range(world)]
    dist.all_gather(parts, pad)
    if dist.get_rank() != 0:
        return None
    seq = zz.bounds[-1][1]
    full = torch.empty(*t.shape[:2], seq, *t.shape[3:], dtype=t.dtype, device=t.device)
    for r, part in enumerate(parts):
        at = 0
        for c, length in zip(zz.chunks(r), zz.lengths(r)):
            full[:, :, zz.bounds[c][0]:zz.bounds[c][1]] = part[:, :, at:at + length]
            at += length
    return full


def check(args, ops, rank, world, device, seq, dtype):
    zz = ZigZag(seq, world)
    g = torch.Generator(device=device).manual_seed(1234 + seq)
    b, hq, hk, d = args.batch, args.heads, args.kv_heads, args.dim

    def rand(h):
        return torch.randn(b, h, seq, d, generator=g, device=device).to(dtype)

    q, k, v = rand(hq), rand(hk), rand(hk)  # the same on every rank (same seed)
    ring = RingAttention(ops, zz, rank, b, hq, hk, d, dtype, device)
    o, lse0, lse1 = ring(zz.local(q, rank), zz.local(k, rank), zz.local(v, rank))
    o_all = gather_rows(zz, o, world)
    lse_all = gather_rows(zz, torch.cat([lse0, lse1], dim=2).unsqueeze(-1), world)
    ok = torch.tensor([1], device=device)
    if rank == 0:
        ref_o = torch.empty_like(q)
        ref_lse = torch.empty(b, hq, seq, dtype=torch.float32, device=device)
        ops.forward(q, k, v, causal=True, alignment="bottom_right", out=ref_o, out_lse=ref_lse)
        got, ref = o_all.float(), ref_o.float()
        err = (got - ref).abs()
        rel_l2 = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        lse_err = (lse_all.squeeze(-1) - ref_lse).abs()
        bound_o = (err / (1 + ref.abs())).max().item()
        bound_lse = (lse_err / (1 + ref_lse.abs())).max().item()
        passed = bound_o <= TOL[dtype] and bound_lse <= LSE_TOL[dtype] and math.isfinite(rel_l2)
        ok[0] = int(passed)
        lens = sorted({length for r in range(world) for length in zz.lengths(r)})
        print(f"check N={world} S={seq} (chunks of {'/'.join(map(str, lens))}) B={b} Hq={hq} Hk={hk} "
              f"D={d} {str(dtype).replace('torch.', '')} via {ops.name}: o max abs err {err.max().item():.3e}, "
              f"rel-L2 {rel_l2:.3e}, max err/(1+|ref|) {bound_o:.2e} (tol {TOL[dtype]:.1e}); "
              f"lse max abs err {lse_err.max().item():.3e} (tol {LSE_TOL[dtype]:.1e}): "
              f"{'PASS' if passed else 'FAIL'}", flush=True)
    dist.broadcast(ok, 0)
    return bool(ok.item())


class Timer:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def __call__(self, fn, iters):
        fn()  # warm-up (and NCCL's lazy p2p communicator setup)
        if self.cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            dist.barrier()
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end) / iters
        else:
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            ms = (time.perf_counter() - t0) * 1e3 / iters
        t = torch.tensor([ms], dtype=torch.float64)
        if self.cuda:
            t = t.cuda()
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
        return t.item()


def bench(args, ops, rank, world, device, seq, dtype):
    zz = ZigZag(seq, world)
    b, hq, hk, d = args.batch, args.heads, args.kv_heads, args.dim
    length = sum(zz.lengths(rank))
    g = torch.Generator(device=device).manual_seed(rank)
    q, k, v = (torch.randn(b, h, length, d, generator=g, device=device).to(dtype) for h in (hq, hk, hk))
    ring = RingAttention(ops, zz, rank, b, hq, hk, d, dtype, device)
    timer = Timer(device)
    t_ring = timer(lambda: ring(q, k, v), args.iters)
    t_compute = timer(lambda: ring(q, k, v, comm=False), args.iters)
    t_comm = timer(lambda: ring(q, k, v, compute=False), args.iters) if world > 1 else 0.0
    # Causal: half of the S x S scores, 2 matmuls of 2 flops per MAC.
    flops = 4.0 * b * hq * d * seq * seq / 2
    if rank == 0:
        dt = str(dtype).replace("torch.", "")
        per = "GPU" if device.type == "cuda" else "process"
        line = (f"bench N={world} S={seq} B={b} Hq={hq} Hk={hk} D={d} {dt} causal via {ops.name}: "
                f"ring {t_ring:.2f} ms, {flops / world / (t_ring * 1e-3) / 1e12:.1f} TFLOP/s per {per}; "
                f"compute only {t_compute:.2f} ms")
        if world > 1:
            shard = 2 * zz.max_local() * ring.kv_numel * q.element_size()
            hidden = 1.0 - max(0.0, t_ring - t_compute) / t_comm if t_comm > 0 else 1.0
            line += (f"; comm only {t_comm:.2f} ms ({world - 1} transfers of {shard / 2 ** 20:.0f} MiB K+V); "
                     f"exposed comm {max(0.0, t_ring - t_compute):.2f} ms, hidden "
                     f"{100 * max(0.0, min(1.0, hidden)):.0f}%")
        print(line, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="compare with one forward over the whole sequence")
    mode.add_argument("--bench", action="store_true", help="time the ring, compute only and comm only")
    ap.add_argument("--seq", default=None, help="sequence length(s), comma-separated "
                    "(default: 4096,4099 for --check, 131072 for --bench)")
    ap.add_argument("--dtype", default="bf16", help="bf16, fp16, f32 (comma-separated list allowed)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=3, help="--bench: timed iterations after one warm-up")
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument("--fmha", choices=["auto", "package", "ctypes"], default="auto")
    args = ap.parse_args(argv)

    rank, world = setup()
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    ops = load_ops(args.fmha, device)
    seqs = [int(s) for s in (args.seq or ("4096,4099" if args.check else "131072")).split(",")]
    dtypes = [DTYPES[t] for t in args.dtype.split(",")]
    ok = True
    try:
        for seq in seqs:
            for dtype in dtypes:
                if args.check:
                    ok &= check(args, ops, rank, world, device, seq, dtype)
                else:
                    bench(args, ops, rank, world, device, seq, dtype)
    finally:
        dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
