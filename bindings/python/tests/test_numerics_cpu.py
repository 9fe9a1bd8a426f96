"""fmha.forward()'s inference-numerics keywords (fmha.h 0.3) on the CPU
backend with numpy arrays, against the float64 reference: FP8 K/V and FP8
inputs throughout (ml_dtypes' float8_e4m3fn / float8_e5m2; those cases skip
without ml_dtypes), an out dtype of its own, descale factors, additive bias
in every broadcast pattern (with -inf rows), ALiBi slopes [H] and [B, H],
and the errors the Python layer and the library give for them."""
import os
import subprocess
import sys

import numpy as np

try:
    import pytest
except ImportError:  # the GPU machine may lack pytest
    import minipytest as pytest

import fmha
from fmha_reference import assert_close, assert_lse_close, attention, ml_dtypes

RNG = np.random.default_rng(20261130)

# Input dtypes by name; the FP8 ones and bfloat16 come from ml_dtypes.
DTYPES = {"float32": np.float32, "float16": np.float16}
if ml_dtypes is not None:
    DTYPES.update(bfloat16=ml_dtypes.bfloat16, float8_e4m3fn=ml_dtypes.float8_e4m3fn,
                  float8_e5m2=ml_dtypes.float8_e5m2)
FP8 = [n for n in ("float8_e4m3fn", "float8_e5m2") if n in DTYPES]
OUT = [n for n in ("float16", "bfloat16", "float32") if n in DTYPES]

# (q, k/v) dtype pairs fmha.h 0.3 allows beyond one dtype for all: FP8 K/V
# under an F16/BF16 q (an FP8 KV cache) and FP8 throughout (either kind).
MIXED = ([(q, kv) for q in ("float16", "bfloat16") if q in DTYPES for kv in FP8] +
         [(q, kv) for q in FP8 for kv in FP8])
needs_ml_dtypes = pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes is not installed")


def randn(shape, dtype="float32", scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(DTYPES[dtype] if isinstance(dtype, str) else dtype)


def qkv(b=2, hq=4, hk=2, nq=13, nk=21, d=32, q_dtype="float32", kv_dtype=None):
    kv_dtype = kv_dtype or q_dtype
    return (randn((b, hq, nq, d), q_dtype), randn((b, hk, nk, d), kv_dtype),
            randn((b, hk, nk, d), kv_dtype))


def descales(b, hk):
    """Factors far from 1 (0.25 .. 4), different per sequence and head."""
    return np.exp2(RNG.uniform(-2, 2, size=(b, hk))).astype(np.float32)


def check(q, k, v, out_dtype=None, **kw):
    """Runs forward into a poisoned out and lse of out_dtype (q's when
    None); compares both with the float64 reference."""
    out_dtype = DTYPES[out_dtype] if isinstance(out_dtype, str) else out_dtype or q.dtype
    out = np.full(q.shape, np.nan, dtype=out_dtype)
    lse = np.full(q.shape[:3], np.nan, dtype=np.float32)
    got, got_lse = fmha.forward(q, k, v, out=out, out_lse=lse, **kw)
    assert got is out and got_lse is lse
    ref_o, ref_lse = attention(q, k, v, **kw)
    assert_close(out, ref_o, out_dtype)
    assert_lse_close(lse, ref_lse)
    return ref_o, ref_lse


# ---- dtypes ----------------------------------------------------------------------
@needs_ml_dtypes
@pytest.mark.parametrize("out_dtype", OUT)
@pytest.mark.parametrize("q_dtype,kv_dtype", MIXED, ids=[f"{q}-{kv}" for q, kv in MIXED])
def test_fp8_and_mixed_dtypes(q_dtype, kv_dtype, out_dtype):
    q, k, v = qkv(q_dtype=q_dtype, kv_dtype=kv_dtype)
    check(q, k, v, out_dtype=out_dtype, causal=True)


@pytest.mark.parametrize("out_dtype", OUT)
@pytest.mark.parametrize("dtype", [n for n in ("float32", "float16", "bfloat16") if n in DTYPES])
def test_out_dtype_other_than_the_inputs(dtype, out_dtype):
    check(*qkv(q_dtype=dtype), out_dtype=out_dtype, window=(6, 2))


@pytest.mark.parametrize("spelling", ["name", "numpy", "ml_dtypes"])
def test_out_dtype_allocates_that_dtype(spelling):
    q, k, v = qkv(q_dtype="float16")
    if spelling == "ml_dtypes":
        if ml_dtypes is None:
            pytest.skip("ml_dtypes is not installed")
        want, arg = np.dtype(ml_dtypes.bfloat16), ml_dtypes.bfloat16
    else:
        want = np.dtype(np.float32)
        arg = "float32" if spelling == "name" else np.float32
    o, lse = fmha.forward(q, k, v, out_dtype=arg, return_lse=True)
    assert o.dtype == want and o.shape == q.shape
    ref_o, ref_lse = attention(q, k, v)
    assert_close(o, ref_o, want)
    assert_lse_close(lse, ref_lse)


@needs_ml_dtypes
@pytest.mark.parametrize("kv_dtype", FP8)
def test_fp8_default_output_is_bfloat16(kv_dtype):
    q, k, v = qkv(q_dtype=kv_dtype, kv_dtype=kv_dtype)
    o = fmha.forward(q, k, v)
    assert o.dtype == np.dtype(ml_dtypes.bfloat16)
    assert_close(o, attention(q, k, v)[0], o.dtype)
    # An F16 q keeps its dtype over FP8 K/V.
    q16 = randn(q.shape, "float16")
    assert fmha.forward(q16, k, v).dtype == np.float16


@needs_ml_dtypes
def test_fp8_special_values_decode_exactly():
    # The extremes of each format: E4M3's largest finite 448 and smallest
    # subnormal 2^-9, E5M2's 57344 and 2^-16, scaled down by the descale so
    # the softmax stays finite.
    for name, big, tiny in (("float8_e4m3fn", 448.0, 2.0**-9), ("float8_e5m2", 57344.0, 2.0**-16)):
        q, k, v = qkv(b=1, hq=2, hk=1, nq=4, nk=6, d=16, q_dtype="float16", kv_dtype=name)
        k[0, 0, 0, :4] = np.array([big, -big, tiny, -tiny]).astype(k.dtype)
        v[0, 0, 1, :4] = np.array([big, -big, tiny, -tiny]).astype(v.dtype)
        check(q, k, v, out_dtype="float32", k_descale=np.full((1, 1), 1 / big, np.float32))


@needs_ml_dtypes
@pytest.mark.parametrize("kv_dtype,code", [("float8_e4m3fn", 10), ("float8_e5m2", 12)])
def test_fp8_through_dlpack(kv_dtype, code):
    # DLPack 1.1's kDLFloat8_e4m3fn / kDLFloat8_e5m2 (a ctypes producer).
    try:
        from test_forward_cpu import VersionedDLPack
    except ImportError as e:  # that module needs pytest itself
        pytest.skip(f"test_forward_cpu is not importable: {e}")
    q, k, v = qkv(b=1, hq=2, hk=1, nq=5, nk=9, d=16, q_dtype="float16", kv_dtype=kv_dtype)
    kd, vd = VersionedDLPack(k), VersionedDLPack(v)
    for t in (kd, vd):
        t.managed.dl_tensor.dtype.code = code
    out = np.full(q.shape, np.nan, np.float32)
    fmha.forward(VersionedDLPack(q), kd, vd, out=VersionedDLPack(out))
    assert_close(out, attention(q, k, v)[0], np.float32)


# ---- descales --------------------------------------------------------------------
@pytest.mark.parametrize("which", ["q", "k", "v", "all"])
@pytest.mark.parametrize("dtype", [n for n in ("float32", "float16") + tuple(FP8[:1])])
def test_descales(dtype, which):
    kv = dtype
    q_dtype = "float16" if dtype in FP8 else dtype
    q, k, v = qkv(b=3, hq=6, hk=2, q_dtype=q_dtype, kv_dtype=kv)
    names = ["q", "k", "v"] if which == "all" else [which]
    kw = {f"{n}_descale": descales(3, 2) for n in names}
    check(q, k, v, out_dtype="float32", **kw)


def test_descales_leave_lse_before_v_descale():
    q, k, v = qkv(b=1, hq=2, hk=1, nq=5, nk=9)
    vd = np.full((1, 1), 3.0, np.float32)
    o1, lse1 = fmha.forward(q, k, v, return_lse=True)
    o3, lse3 = fmha.forward(q, k, v, v_descale=vd, return_lse=True)
    np.testing.assert_array_equal(lse1, lse3)
    assert_close(o3, 3.0 * o1.astype(np.float64), np.float32)


# ---- bias ------------------------------------------------------------------------
B, HQ, HK, NQ, NK = 2, 4, 2, 11, 17


def _bias_case(pattern, dtype):
    """A bias array of the named broadcast pattern, with its [B, HQ, NQ, NK]
    expansion for the reference."""
    full = (B, HQ, NQ, NK)
    if pattern == "full":
        bias = randn(full, dtype)
    elif pattern == "shared_2d":  # [Nq, Nk]: numpy broadcasting adds [1, 1]
        bias = randn((NQ, NK), dtype)
    elif pattern == "per_head":  # [1, H, Nq, Nk]
        bias = randn((1, HQ, NQ, NK), dtype)
    elif pattern == "key_padding":  # [B, 1, 1, Nk] with -inf keys
        bias = np.zeros((B, 1, 1, NK), dtype=DTYPES[dtype])
        bias[0, ..., 12:] = -np.inf
        bias[1, ..., :3] = -np.inf
    elif pattern == "stride0":  # np.broadcast_to: the full dims, stride 0
        bias = np.broadcast_to(randn((1, HQ, 1, NK), dtype), full)
    elif pattern == "transposed":  # a [B, H, Nk, Nq] buffer read transposed
        bias = randn((B, HQ, NK, NQ), dtype).transpose(0, 1, 3, 2)
    elif pattern == "row_minus_inf":  # whole rows masked out by the bias
        bias = randn(full, dtype)
        bias[0, 1, 3, :] = -np.inf
        bias[1, :, 7, :] = -np.inf
    else:
        raise AssertionError(pattern)
    return bias


PATTERNS = ["full", "shared_2d", "per_head", "key_padding", "stride0", "transposed", "row_minus_inf"]


@pytest.mark.parametrize("bias_dtype", [n for n in ("float32", "float16", "bfloat16") if n in DTYPES])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_bias_broadcast_patterns(pattern, bias_dtype):
    bias = _bias_case(pattern, bias_dtype)
    check(*qkv(b=B, hq=HQ, hk=HK, nq=NQ, nk=NK), bias=bias)


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
def test_bias_with_causal_mask(alignment):
    # The mask wins over the bias: a large bias on masked keys changes nothing.
    q, k, v = qkv(b=B, hq=HQ, hk=HK, nq=NQ, nk=NK)
    bias = randn((B, HQ, NQ, NK))
    check(q, k, v, bias=bias, causal=True, causal_alignment=alignment)
    masked = bias.copy()
    diag = np.arange(NQ)[:, None] + (0 if alignment == "top_left" else NK - NQ)
    masked[..., np.arange(NK)[None, :] > diag] = 1e4
    np.testing.assert_array_equal(
        fmha.forward(q, k, v, bias=bias, causal=True, causal_alignment=alignment),
        fmha.forward(q, k, v, bias=masked, causal=True, causal_alignment=alignment))


def test_bias_minus_inf_rows_give_zero_and_minus_inf():
    q, k, v = qkv(b=1, hq=2, hk=1, nq=6, nk=8)
    bias = np.zeros((6, 8), np.float32)
    bias[2] = -np.inf
    bias[4, :5] = -np.inf  # the rest of row 4 stays visible
    o, lse = fmha.forward(q, k, v, bias=bias, return_lse=True)
    assert np.all(o[:, :, 2] == 0) and np.all(np.isneginf(lse[:, :, 2]))
    assert np.all(np.isfinite(lse[:, :, [0, 1, 3, 4, 5]]))
    check(q, k, v, bias=bias)


def test_bias_of_a_16bit_dtype_under_float32_inputs():
    q, k, v = qkv()
    check(q, k, v, bias=randn((2, 1, 13, 21), "float16"), out_dtype="float16")


# ---- ALiBi -----------------------------------------------------------------------
def alibi(h):
    """The ALiBi paper's geometric slopes 2^(-8 i / h)."""
    return np.exp2(-8.0 * np.arange(1, h + 1) / h).astype(np.float32)


@pytest.mark.parametrize("causal,alignment", [(False, "bottom_right"), (True, "bottom_right"),
                                              (True, "top_left")], ids=["none", "causal", "top_left"])
@pytest.mark.parametrize("nq,nk", [(9, 23), (23, 9), (1, 40)], ids=["q<k", "q>k", "decode"])
def test_alibi_per_head(causal, alignment, nq, nk):
    check(*qkv(hq=8, hk=2, nq=nq, nk=nk), alibi_slopes=alibi(8), causal=causal,
          causal_alignment=alignment)


def test_alibi_per_sequence_with_strided_rows():
    slopes = np.zeros((3, 10), np.float32)
    slopes[:, :4] = RNG.uniform(-0.5, 0.5, size=(3, 4))  # negative slopes are applied too
    check(*qkv(b=3, hq=4, hk=1), alibi_slopes=slopes[:, :4], window=(5, 5))


def test_everything_at_once():
    q_dtype, kv_dtype = ("bfloat16", FP8[0]) if FP8 else ("float16", "float16")
    q, k, v = qkv(b=2, hq=6, hk=3, nq=10, nk=19, q_dtype=q_dtype, kv_dtype=kv_dtype)
    bias = np.zeros((2, 1, 10, 19), np.float16)
    bias[1, 0, :, 15:] = -np.inf
    check(q, k, v, out_dtype="float32", q_descale=descales(2, 3), k_descale=descales(2, 3),
          v_descale=descales(2, 3), bias=bias, alibi_slopes=alibi(6), causal=True, softcap=20.0,
          scale=0.2)


def test_ragged_batch_reads_descales_and_bias_per_sequence():
    # Two sequences packed along the seq axis: descales are [num_seqs, Hk]
    # and the bias [num_seqs, Hq, max_q, max_k], read at each sequence's own
    # positions (fmha.h).
    hq, hk, d = 4, 2, 16
    lens_q, lens_k = [3, 6], [7, 5]
    cu_q = np.array([0, 3, 9], np.int32)
    cu_k = np.array([0, 7, 12], np.int32)
    q, k, v = randn((1, hq, 9, d)), randn((1, hk, 12, d)), randn((1, hk, 12, d))
    ks, vs = descales(2, hk), descales(2, hk)
    bias = randn((2, hq, max(lens_q), max(lens_k)))
    bias[1, :, :, 4] = -np.inf
    out = np.full(q.shape, np.nan, np.float32)
    fmha.forward(q, k, v, out=out, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                 k_descale=ks, v_descale=vs, bias=bias)
    for b in range(2):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        ref, _ = attention(q[:, :, rows], k[:, :, keys], v[:, :, keys], causal=True,
                           k_descale=ks[b:b + 1], v_descale=vs[b:b + 1],
                           bias=bias[b:b + 1, :, :lens_q[b], :lens_k[b]])
        assert_close(out[:, :, rows], ref, np.float32, what=f"sequence {b}")


def test_explain_and_workspace_size_take_the_keywords():
    q, k, v = qkv()
    kw = dict(bias=randn((13, 21)), alibi_slopes=alibi(4), k_descale=descales(2, 2),
              out_dtype="float32")
    assert "cpu_tiled" in fmha.explain(q, k, v, **kw)
    assert fmha.workspace_size(q, k, v, **kw) >= 0
    with pytest.raises(TypeError):
        fmha.explain(q, k, v, biass=kw["bias"])


# ---- errors ----------------------------------------------------------------------
def _raises(kind, match, q, k, v, **kw):
    """forward raises kind matching `match` and writes nothing."""
    out = np.full(q.shape, np.nan, dtype=kw.pop("out_alloc", np.float32))
    with pytest.raises(kind, match=match) as e:
        fmha.forward(q, k, v, out=out, **kw)
    assert np.all(np.isnan(out))
    return e.value


def test_error_descale_shape_dtype_layout():
    q, k, v = qkv()
    _raises(fmha.InvalidArgumentError, r"k_descale has shape \(2,\); expected \(2, 2\)", q, k, v,
            k_descale=np.ones(2, np.float32))
    _raises(fmha.DTypeError, r"v_descale.dtype=float64 must be float32", q, k, v,
            v_descale=np.ones((2, 2)))
    _raises(fmha.InvalidArgumentError, r"q_descale must be contiguous", q, k, v,
            q_descale=np.ones((2, 4), np.float32)[:, ::2])


def test_error_alibi_shape():
    q, k, v = qkv()
    _raises(fmha.InvalidArgumentError, r"alibi_slopes has shape \(3,\)", q, k, v,
            alibi_slopes=np.ones(3, np.float32))
    _raises(fmha.InvalidArgumentError, r"alibi_slopes has shape \(1, 4\)", q, k, v,
            alibi_slopes=np.ones((1, 4), np.float32))
    _raises(fmha.DTypeError, r"alibi_slopes.dtype=float16", q, k, v,
            alibi_slopes=np.ones(4, np.float16))
    # Rows closer than Hq apart: the library's check, in the Python name.
    rows = np.lib.stride_tricks.as_strided(np.ones(8, np.float32), shape=(2, 4), strides=(8, 4))
    _raises(fmha.InvalidArgumentError, r"alibi_slopes\.strides\[0\]=2 must be 0", q, k, v,
            alibi_slopes=rows)


def test_error_bias():
    q, k, v = qkv()
    e = _raises(fmha.InvalidArgumentError, r"bias.dims\[3\]=20 must be 21", q, k, v,
                bias=np.zeros((13, 20), np.float32))
    assert e.status == fmha.Status.ERROR_INVALID_ARGUMENT
    _raises(fmha.InvalidArgumentError, r"bias has shape \(1, 2, 4, 13, 21\)", q, k, v,
            bias=np.zeros((1, 2, 4, 13, 21), np.float32))
    _raises(fmha.DTypeError, r"bias.dtype=float64 must be float16, bfloat16 or float32", q, k, v,
            bias=np.zeros((13, 21)))
    _raises(fmha.DTypeError, r"bias.dtype=bool", q, k, v, bias=np.zeros((13, 21), bool))
    if FP8:
        _raises(fmha.DTypeError, r"bias.dtype=float8", q, k, v,
                bias=np.zeros((13, 21), DTYPES[FP8[0]]))


def test_error_bias_overlaps_out():
    q, k, v = qkv(b=1, hq=1, hk=1, nq=4, nk=4, d=4)
    out = np.full(q.shape, np.nan, np.float32)
    with pytest.raises(fmha.InvalidArgumentError, match="bias"):
        fmha.forward(q, k, v, out=out, bias=out[0, 0])


def test_error_out_dtype():
    q, k, v = qkv(q_dtype="float16")
    _raises(fmha.DTypeError, r"out_dtype='int8' must be float16, bfloat16 or float32", q, k, v,
            out_dtype="int8")
    _raises(fmha.DTypeError, r"out.dtype=float32 differs from out_dtype=float16", q, k, v,
            out_dtype="float16")
    if FP8:
        with pytest.raises(fmha.DTypeError, match="out_dtype"):
            fmha.forward(q, k, v, out_dtype=DTYPES[FP8[0]])
        # An FP8 out passed in: the library refuses it, in Python's name.
        with pytest.raises(fmha.DTypeError, match=r"\bout\.dtype"):
            fmha.forward(q, k, v, out=np.zeros(q.shape, DTYPES[FP8[0]]))


@needs_ml_dtypes
def test_error_dtype_combinations():
    f16, fp8 = randn((1, 2, 4, 8), "float16"), randn((1, 2, 4, 8), FP8[0])
    # FP8 q needs FP8 K/V; an F32 q takes no FP8 K/V; k and v share a dtype.
    _raises(fmha.DTypeError, r"k\.dtype", fp8, f16, f16)
    _raises(fmha.DTypeError, r"dtype", randn((1, 2, 4, 8)), fp8, fp8)
    _raises(fmha.DTypeError, r"dtype", f16, fp8, f16)
    # Other 8-bit floats of ml_dtypes are other encodings: refused by name.
    other = randn((1, 2, 4, 8), ml_dtypes.float8_e4m3fnuz)
    _raises(fmha.DTypeError, r"k\.dtype=float8_e4m3fnuz is not", f16, other, other)


def test_error_numerics_array_on_another_device_kind():
    class NoProtocol:
        pass
    q, k, v = qkv()
    _raises(fmha.InvalidArgumentError, r"bias: NoProtocol exposes no array protocol", q, k, v,
            bias=NoProtocol())


def test_imports_and_runs_without_ml_dtypes():
    # ml_dtypes is optional: with it unimportable fmha still imports and
    # runs float16/float32 with the 0.3 keywords.
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "import numpy as np, fmha\n"
            "q = np.ones((1, 1, 2, 8), np.float16)\n"
            "o = fmha.forward(q, q, q, out_dtype='float32', bias=np.zeros((2, 2), np.float32))\n"
            "assert o.dtype == np.float32 and np.allclose(o, 1)\n"
            "try:\n"
            "    fmha.forward(q, q, q, out_dtype='bfloat16')\n"
            "except fmha.DTypeError as e:\n"
            "    assert 'ml_dtypes' in str(e), e\n"
            "else:\n"
            "    raise AssertionError('bfloat16 allocated without ml_dtypes')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
