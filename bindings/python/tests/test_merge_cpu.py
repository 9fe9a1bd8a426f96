"""fmha.merge() on the CPU backend with numpy arrays: the merge of forwards
over key slices equals one float64 forward over all the keys (1 to 8 parts,
-inf rows, in place, mixed dtypes), and its errors, in Python names."""
import numpy as np
import pytest

import fmha
from fmha_reference import assert_close, assert_lse_close, attention, ml_dtypes

RNG = np.random.default_rng(20261130)
DTYPES = [np.float32, np.float16] + ([ml_dtypes.bfloat16] if ml_dtypes else [])
DTYPE_IDS = [np.dtype(t).name for t in DTYPES]


def randn(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def slices(nk, parts):
    """parts - 1 distinct random cuts of nk keys: every slice non-empty."""
    cuts = np.sort(RNG.choice(np.arange(1, nk), size=parts - 1, replace=False))
    return [0, *cuts.tolist(), nk]


def slice_forwards(q, k, v, cuts, causal=False):
    """forward() over each key slice, with the mask of all the keys: key j of
    slice [a, b) is key a + j, visible under the bottom-right causal mask iff
    it is on the slice's own diagonal plus a right window of nk - b."""
    nk = k.shape[2]
    outs, lses = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        window = (-1, nk - b) if causal else (-1, -1)
        o, lse = fmha.forward(q, k[:, :, a:b], v[:, :, a:b], window=window, return_lse=True)
        outs.append(o)
        lses.append(lse)
    return outs, lses


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("parts", range(1, 9))
def test_merge_equals_one_forward(dtype, parts):
    q = randn((2, 4, 7, 32), dtype)
    k, v = randn((2, 2, 45, 32), dtype), randn((2, 2, 45, 32), dtype)
    outs, lses = slice_forwards(q, k, v, slices(45, parts))
    out = np.full(q.shape, np.nan, dtype=dtype)
    got, lse = fmha.merge(outs, lses, out=out, return_lse=True)
    assert got is out
    ref_o, ref_lse = attention(q, k, v)
    assert_close(out, ref_o, dtype)
    assert_lse_close(lse, ref_lse)


@pytest.mark.parametrize("nq", [30, 12], ids=["rows-without-keys", "q<k"])
def test_causal_parts_and_rows_without_keys(nq):
    q, k, v = randn((1, 2, nq, 16)), randn((1, 2, 24, 16)), randn((1, 2, 24, 16))
    outs, lses = slice_forwards(q, k, v, [0, 5, 13, 24], causal=True)
    assert any(np.isneginf(lse).any() for lse in lses)  # some parts see no key of a row
    for o, lse in zip(outs, lses):  # whatever such a part's o holds, it contributes nothing
        o[np.isneginf(lse)] = np.nan
    got, lse = fmha.merge(outs, lses, return_lse=True)
    ref_o, ref_lse = attention(q, k, v, causal=True)
    assert_close(got, ref_o, np.float32)
    assert_lse_close(lse, ref_lse)
    if nq > 24:  # bottom-right: rows 0..5 see no key at all
        assert np.all(got[:, :, :6] == 0) and np.all(np.isneginf(lse[:, :, :6]))


def test_in_place():
    q, k, v = randn((2, 4, 9, 16)), randn((2, 4, 40, 16)), randn((2, 4, 40, 16))
    outs, lses = slice_forwards(q, k, v, [0, 11, 30, 40])
    got, lse = fmha.merge(outs, lses, out=outs[0], out_lse=lses[0])
    assert got is outs[0] and lse is lses[0]
    ref_o, ref_lse = attention(q, k, v)
    assert_close(outs[0], ref_o, np.float32)
    assert_lse_close(lses[0], ref_lse)


@pytest.mark.parametrize("out_dtype", [np.float32, np.float16])
def test_mixed_dtypes_and_strided_out(out_dtype):
    q, k, v = (randn(s, np.float16) for s in [(1, 4, 6, 16), (1, 4, 20, 16), (1, 4, 20, 16)])
    outs, lses = slice_forwards(q, k, v, [0, 8, 20])
    store = np.full((1, 6, 4, 16), np.nan, dtype=out_dtype)  # BNHD storage
    out = store.transpose(0, 2, 1, 3)
    got = fmha.merge(outs, lses, out=out)
    assert got is out
    assert_close(store.transpose(0, 2, 1, 3), attention(q, k, v)[0], np.float16)


def test_default_output_is_like_outs0():
    q, k, v = (randn(s, np.float16) for s in [(1, 2, 3, 8), (1, 2, 10, 8), (1, 2, 10, 8)])
    outs, lses = slice_forwards(q, k, v, [0, 4, 10])
    got = fmha.merge(outs, lses)
    assert isinstance(got, np.ndarray) and got.dtype == np.float16 and got.shape == q.shape


# ---- errors --------------------------------------------------------------------
INVALID = fmha.Status.ERROR_INVALID_ARGUMENT


def two_parts():
    q, k, v = randn((1, 2, 5, 8)), randn((1, 2, 12, 8)), randn((1, 2, 12, 8))
    return slice_forwards(q, k, v, [0, 6, 12])


def expect_merge_error(match, outs, lses, dtype=False, **kw):
    with pytest.raises(fmha.InvalidArgumentError) as e:
        fmha.merge(outs, lses, **kw)
    assert e.value.status == INVALID
    assert match in e.value.message, e.value.message
    assert isinstance(e.value, TypeError) == dtype
    return e.value


def test_error_empty_and_length_mismatch():
    outs, lses = two_parts()
    expect_merge_error("outs is empty", [], [])
    expect_merge_error("lses has 1 arrays but outs has 2", outs, lses[:1])


def test_error_lse_shape_and_dtype():
    outs, lses = two_parts()
    expect_merge_error("lses[1] must be a contiguous float32 array of shape (1, 2, 5)", outs,
                       [lses[0], lses[1][:, :, :4]])
    expect_merge_error("lses[0] must be a contiguous float32", outs,
                       [lses[0].astype(np.float64), lses[1]], dtype=True)
    expect_merge_error("out_lse must be a contiguous float32", outs, lses,
                       out_lse=np.empty((1, 2, 4), np.float32))


def test_error_parts_disagree_in_the_library_names():
    outs, lses = two_parts()
    e = expect_merge_error("outs[1].dtype=F16 differs from outs[0].dtype=F32", [outs[0], outs[1].astype(np.float16)],
                           lses, dtype=True)
    assert "o_parts" not in str(e)
    expect_merge_error("outs[1].dims[2]=4 differs from outs[0].dims[2]=5", [outs[0], outs[1][:, :, :4]], lses)
    expect_merge_error("out.dims[1]=1 differs from outs[0].dims[1]=2", outs, lses,
                       out=np.empty((1, 1, 5, 8), np.float32))


def test_error_overlaps_and_nothing_written():
    outs, lses = two_parts()
    keep = [o.copy() for o in outs], [l.copy() for l in lses]
    expect_merge_error("out overlaps outs[1]", outs, lses, out=outs[1])
    expect_merge_error("out_lse overlaps lses[1]", outs, lses, out_lse=lses[1])
    buf = np.full(2 * outs[0].size, np.nan, np.float32)
    out = buf[1:1 + outs[0].size].reshape(outs[0].shape)
    expect_merge_error("out_lse overlaps out", outs, lses, out=out, out_lse=buf[:10].reshape(1, 2, 5))
    assert np.isnan(buf).all()
    for a, b in zip(outs + lses, keep[0] + keep[1]):
        np.testing.assert_array_equal(a, b)


def test_capi_merge_params():
    p = fmha.capi.fmha_merge_params()
    assert p.struct_size == fmha.capi.FMHA_MERGE_PARAMS_SIZE_V1 == 112
    assert p.num_parts == 0 and p.lse == 0
    t = fmha.capi.fmha_tensor()
    p.set_parts([t, t, t], [None, 64, None])
    assert p.num_parts == 3
    with pytest.raises(TypeError):
        p.set_parts([t, "not a tensor"], [None, None])
    assert p.num_parts == 3  # unchanged on error
    status, h = fmha.capi.fmha_create(fmha.capi.FMHA_DEVICE_CPU, 0)
    assert fmha.capi.fmha_merge(h, p) == fmha.capi.FMHA_ERROR_INVALID_ARGUMENT
    assert "o_parts[0].dtype=0" in fmha.capi.fmha_last_error_message()
    fmha.capi.fmha_destroy(h)


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.randn(s, dtype=torch.bfloat16) for s in [(1, 2, 4, 16), (1, 2, 20, 16), (1, 2, 20, 16)])
    parts = [fmha.forward(q, k[:, :, a:b], v[:, :, a:b], return_lse=True) for a, b in [(0, 7), (7, 20)]]
    got, lse = fmha.merge([o for o, _ in parts], [l for _, l in parts], return_lse=True)
    full, full_lse = fmha.forward(q, k, v, return_lse=True)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    assert torch.allclose(got.float(), full.float(), atol=2e-2) and torch.allclose(lse, full_lse, atol=1e-4)
