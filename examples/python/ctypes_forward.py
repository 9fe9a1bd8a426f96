"""ctypes_forward.py: fmha from Python with ctypes alone (no build step, no
SWIG, no numpy).

One decoder layer's attention on the CPU backend: Llama-style GQA (32 query
heads, 8 KV heads, head_dim 128), causal, float32, log-sum-exp returned. Q, K
and V are strided views into one fused QKV buffer [B, N, Hq + 2*Hk, D].

Then one decode step over a paged KV cache, as a serving engine runs it: the
cache is vLLM-style storage [pages, page_size, Hk, D] (read through the
[pages, Hk, page_size, D] view fmha takes), each request owns the pages its
block-table row lists (shuffled), and seqused_k holds each request's length.

    FMHA_LIBRARY=/path/to/libfmha.so.0 python3 examples/python/ctypes_forward.py [N]

Without FMHA_LIBRARY the library is looked up like any shared library
(ctypes.util.find_library, then the loader's path). The structs below mirror
include/fmha/fmha.h field by field; fmha_forward_params_init_sized() is
given this file's sizeof, and the library refusing that size (a size it
never shipped) catches a mismatch in their layout.
"""
import ctypes
import ctypes.util
import math
import os
import random
import sys

c_int32, c_int64, c_uint32, c_float = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_float

# ---- the C API, declared -------------------------------------------------------
FMHA_SUCCESS = 0
FMHA_DTYPE_F32 = 3
FMHA_DEVICE_CPU = 0
FMHA_MASK_CAUSAL = 1


class Tensor(ctypes.Structure):  # fmha_tensor
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("dims", c_int64 * 4), ("strides", c_int64 * 4)]


class ForwardParams(ctypes.Structure):  # fmha_forward_params (0.2)
    _fields_ = [("struct_size", c_uint32), ("mask_flags", c_uint32),
                ("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor),
                ("lse", ctypes.POINTER(c_float)),
                ("scale", c_float), ("softcap", c_float),
                ("window_left", c_int32), ("window_right", c_int32),
                ("kernel", ctypes.c_char_p), ("num_splits", c_int32), ("reserved_", c_int32),
                # 0.2: the serving layouts (all 0/NULL = dense)
                ("num_seqs", c_int32), ("max_seqlen_q", c_int32),
                ("cu_seqlens_q", ctypes.POINTER(c_int32)), ("cu_seqlens_k", ctypes.POINTER(c_int32)),
                ("seqused_k", ctypes.POINTER(c_int32)), ("block_table", ctypes.POINTER(c_int32)),
                ("block_table_stride", c_int64), ("max_seqlen_k", c_int32), ("reserved2_", c_int32)]


def load_library():
    """libfmha from FMHA_LIBRARY, else by name; says which variable to set
    when neither finds it."""
    explicit = os.environ.get("FMHA_LIBRARY")
    path = explicit or ctypes.util.find_library("fmha") or "libfmha.so.0"
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        if explicit:
            hint = f"FMHA_LIBRARY={explicit} could not be loaded ({e})"
        else:
            hint = (f"libfmha was not found by name ({e}); set FMHA_LIBRARY to the library "
                    "file, e.g. FMHA_LIBRARY=build/src/libfmha.so.0 after a CMake build, "
                    "or <prefix>/lib/libfmha.so.0 after cmake --install")
        raise SystemExit(f"ctypes_forward.py: {hint}") from None
    handle_p = ctypes.POINTER(ctypes.c_void_p)
    params_p = ctypes.POINTER(ForwardParams)
    signatures = {
        "fmha_status_string": (ctypes.c_char_p, [ctypes.c_int]),
        "fmha_last_error_message": (ctypes.c_char_p, []),
        "fmha_version": (c_uint32, []),
        "fmha_forward_params_init_sized": (None, [params_p, ctypes.c_size_t]),
        "fmha_create": (ctypes.c_int, [handle_p, ctypes.c_int, ctypes.c_int]),
        "fmha_destroy": (None, [ctypes.c_void_p]),
        "fmha_forward_workspace_size": (ctypes.c_int, [ctypes.c_void_p, params_p,
                                                       ctypes.POINTER(ctypes.c_size_t)]),
        "fmha_forward": (ctypes.c_int, [ctypes.c_void_p, params_p, ctypes.c_void_p,
                                        ctypes.c_size_t]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


class FmhaError(RuntimeError):
    pass


def check(lib, status, what):
    if status != FMHA_SUCCESS:
        raise FmhaError(f"{what}: {lib.fmha_status_string(status).decode()} "
                        f"({lib.fmha_last_error_message().decode()})")


# ---- the decoder layer -----------------------------------------------------------
B, HQ, HK, D = 1, 32, 8, 128
HEADS = HQ + 2 * HK  # heads in one row of the fused projection


def fused_view(buf, first_head, heads, n, row_heads):
    """[B, heads, n, D] view of a [B, n, row_heads, D] float32 buffer."""
    t = Tensor()
    t.data = ctypes.addressof(buf) + first_head * D * ctypes.sizeof(c_float)
    t.dtype = FMHA_DTYPE_F32
    t.dims[:] = [B, heads, n, D]
    t.strides[:] = [n * row_heads * D, D, row_heads * D, 1]
    return t


def reference_row(qkv, n, h, i):
    """float64 (o row, lse) of query i, head h: causal, keys 0..i."""
    kv = h // (HQ // HK)

    def vec(head, token):
        base = (token * HEADS + head) * D
        return qkv[base:base + D]

    q = vec(h, i)
    s = [sum(a * b for a, b in zip(q, vec(HQ + kv, j))) / math.sqrt(D) for j in range(i + 1)]
    m = max(s)
    w = [math.exp(x - m) for x in s]
    total = sum(w)
    o = [sum(w[j] * vec(HQ + HK + kv, j)[d] for j in range(i + 1)) / total for d in range(D)]
    return o, m + math.log(total)


def run_forward(lib, handle, params, what):
    need = ctypes.c_size_t()
    check(lib, lib.fmha_forward_workspace_size(handle, ctypes.byref(params), ctypes.byref(need)),
          f"{what}: fmha_forward_workspace_size")
    # 16-byte aligned: over-allocate and round the address up.
    raw = ctypes.create_string_buffer(need.value + 16)
    workspace = ctypes.addressof(raw) + (-ctypes.addressof(raw)) % 16
    check(lib, lib.fmha_forward(handle, ctypes.byref(params), workspace, need.value), what)


def paged_decode_step(lib, handle, rng):
    """One decode token for each of a few requests of different lengths, over
    a paged cache; returns the largest error against float64."""
    page_size, max_pages = 16, 4
    lengths = [37, 1, 64, 20]  # keys each request has cached, new token included
    batch = len(lengths)
    pages = batch * max_pages
    # vLLM storage: cache[page][slot][kv head][d].
    k_cache = (c_float * (pages * page_size * HK * D))(*(rng.uniform(-1, 1) for _ in range(pages * page_size * HK * D)))
    v_cache = (c_float * (pages * page_size * HK * D))(*(rng.uniform(-1, 1) for _ in range(pages * page_size * HK * D)))
    order = list(range(pages))
    rng.shuffle(order)  # any page may belong to any request
    table = (c_int32 * (batch * max_pages))(*order)
    used = (c_int32 * batch)(*lengths)
    q = (c_float * (batch * HQ * D))(*(rng.uniform(-1, 1) for _ in range(batch * HQ * D)))
    out = (c_float * (batch * HQ * D))()

    def cache_view(buf):  # [pages, Hk, page_size, D] over [pages, page_size, Hk, D] storage
        t = Tensor()
        t.data = ctypes.addressof(buf)
        t.dtype = FMHA_DTYPE_F32
        t.dims[:] = [pages, HK, page_size, D]
        t.strides[:] = [page_size * HK * D, D, HK * D, 1]
        return t

    def dense(buf):  # [batch, Hq, 1, D]
        t = Tensor()
        t.data = ctypes.addressof(buf)
        t.dtype = FMHA_DTYPE_F32
        t.dims[:] = [batch, HQ, 1, D]
        t.strides[:] = [HQ * D, D, D, 1]
        return t

    params = ForwardParams()
    lib.fmha_forward_params_init_sized(ctypes.byref(params), ctypes.sizeof(params))
    params.q, params.o = dense(q), dense(out)
    params.k, params.v = cache_view(k_cache), cache_view(v_cache)
    params.seqused_k = used
    params.block_table = table
    params.block_table_stride = max_pages
    run_forward(lib, handle, params, "paged decode")

    def cached(buf, b, j, kv):  # key j of request b, kv head kv
        page, slot = table[b * max_pages + j // page_size], j % page_size
        base = ((page * page_size + slot) * HK + kv) * D
        return buf[base:base + D]

    worst = 0.0
    for b, n in enumerate(lengths):
        for h in (0, 13, HQ - 1):
            kv = h // (HQ // HK)
            qv = q[(b * HQ + h) * D:(b * HQ + h + 1) * D]
            s = [sum(x * y for x, y in zip(qv, cached(k_cache, b, j, kv))) / math.sqrt(D) for j in range(n)]
            m = max(s)
            w = [math.exp(x - m) for x in s]
            ref = [sum(w[j] * cached(v_cache, b, j, kv)[d] for j in range(n)) / sum(w) for d in range(D)]
            got = out[(b * HQ + h) * D:(b * HQ + h + 1) * D]
            worst = max(worst, max(abs(x - y) for x, y in zip(got, ref)))
    return worst


def main(n):
    lib = load_library()
    rng = random.Random(7)
    qkv = (c_float * (B * n * HEADS * D))(*(rng.uniform(-1, 1) for _ in range(B * n * HEADS * D)))
    out = (c_float * (B * n * HQ * D))()
    lse = (c_float * (B * HQ * n))()

    params = ForwardParams()
    lib.fmha_forward_params_init_sized(ctypes.byref(params), ctypes.sizeof(params))
    if params.struct_size != ctypes.sizeof(ForwardParams):
        raise FmhaError(f"struct layout mismatch: library says {params.struct_size} bytes, "
                        f"this file declares {ctypes.sizeof(ForwardParams)}")
    params.q = fused_view(qkv, 0, HQ, n, HEADS)
    params.k = fused_view(qkv, HQ, HK, n, HEADS)
    params.v = fused_view(qkv, HQ + HK, HK, n, HEADS)
    params.o = fused_view(out, 0, HQ, n, HQ)  # [B, N, Hq, D]
    params.mask_flags = FMHA_MASK_CAUSAL
    params.lse = lse

    handle = ctypes.c_void_p()
    check(lib, lib.fmha_create(ctypes.byref(handle), FMHA_DEVICE_CPU, 0), "fmha_create")
    try:
        run_forward(lib, handle, params, "fmha_forward")
        decode_worst = paged_decode_step(lib, handle, rng)
    finally:
        lib.fmha_destroy(handle)

    worst = 0.0
    for h, i in [(0, 0), (5, n // 2), (31, n - 1)]:
        ref_o, ref_lse = reference_row(qkv, n, h, i)
        got = out[(i * HQ + h) * D:(i * HQ + h + 1) * D]
        worst = max(worst, max(abs(a - b) for a, b in zip(got, ref_o)), abs(lse[h * n + i] - ref_lse))
    v = lib.fmha_version()
    print(f"libfmha {v // 10000}.{v // 100 % 100}.{v % 100} via ctypes: B={B} Hq={HQ} Hk={HK} "
          f"N={n} D={D} causal float32, max error vs float64 = {worst:.2e}")
    print(f"paged decode step: 4 requests of 37, 1, 64 and 20 keys in shuffled 16-key pages, "
          f"max error vs float64 = {decode_worst:.2e}")
    return 0 if max(worst, decode_worst) < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 256))
