"""fmha.forward()'s serving keywords on the CPU backend with numpy arrays:
ragged batches (cu_seqlens_q/k), KV-cache fill levels (seqused_k) and paged
K/V (block_table), against the float64 reference of each sequence; how the
keywords fill fmha_forward_params; and the errors the Python layer and the
library give for them."""
import numpy as np
import pytest

import fmha
from fmha_reference import assert_close, assert_lse_close, attention

RNG = np.random.default_rng(20261201)


def randn(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def i32(values):
    return np.asarray(values, dtype=np.int32)


def _serving_skip_reason():
    """None when the library validates and runs serving layouts on the CPU."""
    q, k = randn((1, 1, 2, 8)), randn((1, 1, 4, 8))
    try:
        fmha.forward(q, k, k, block_table=i32([[0]]))  # block_table without seqused_k
    except fmha.InvalidArgumentError as e:
        if "seqused_k" not in e.message:
            return f"this libfmha does not validate serving layouts yet ({e.message})"
    else:
        return "this libfmha ignores the serving fields (validation of issue 9 not built in)"
    try:
        fmha.forward(q, k, k, cu_seqlens_q=i32([0, 1, 2]), cu_seqlens_k=i32([0, 2, 4]))
    except fmha.Error as e:
        return f"the CPU backend does not run ragged batches yet ({e.message})"
    return None


_SKIP = _serving_skip_reason()
needs_serving = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")


# ---- how the keywords fill the params (whatever the backend runs) ---------------
def params_of(q, k, v, **kw):
    call = fmha._Call(q, k, v, causal=False, causal_alignment="bottom_right", window=(-1, -1),
                      scale=None, softcap=0.0, return_lse=True, out=None, out_lse=None, kernel=None,
                      num_splits=0, stream=None, handle=None, serving=kw)
    return call.params, call


def test_params_ragged():
    q, k = randn((1, 4, 10, 8)), randn((1, 2, 17, 8))
    cu_q, cu_k = i32([0, 3, 3, 10]), i32([0, 5, 12, 17])
    p, call = params_of(q, k, k, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    assert (p.num_seqs, p.max_seqlen_q, p.max_seqlen_k) == (3, 7, 7)  # numpy offsets: exact bounds
    assert p.cu_seqlens_q == cu_q.ctypes.data and p.cu_seqlens_k == cu_k.ctypes.data
    assert (p.seqused_k, p.block_table, p.block_table_stride) == (0, 0, 0)
    assert call.lse.shape == (1, 4, 10)  # [1, Hq, total_q]
    p, _ = params_of(q, k, k, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=9, max_seqlen_k=11)
    assert (p.max_seqlen_q, p.max_seqlen_k) == (9, 11)


def test_params_paged():
    cache = randn((6, 16, 2, 8))  # vLLM storage [pages, page_size, Hk, D]
    kv = cache.transpose(0, 2, 1, 3)  # the [pages, Hk, page_size, D] view fmha reads
    table = np.zeros((3, 8), np.int32)[:, :4]  # rows strided by 8, entries contiguous
    used = i32([5, 0, 40])
    p, _ = params_of(randn((3, 4, 1, 8)), kv, kv, seqused_k=used, block_table=table)
    assert (p.num_seqs, p.max_seqlen_q, p.max_seqlen_k) == (0, 0, 0)
    assert p.block_table == table.ctypes.data and p.block_table_stride == 8
    assert p.seqused_k == used.ctypes.data


def test_errors_python_checks():
    q, k = randn((1, 2, 6, 8)), randn((1, 2, 9, 8))
    cases = [
        (dict(cu_seqlens_q=np.array([0, 6], np.int64)), "cu_seqlens_q.dtype=int64 must be int32", True),
        (dict(cu_seqlens_q=i32([[0, 6]])), "cu_seqlens_q has shape (1, 2); expected 1 dim", False),
        (dict(cu_seqlens_q=i32([0, 2, 4, 6])[::2]), "cu_seqlens_q must be contiguous", False),
        (dict(cu_seqlens_q=i32([0, 6]), cu_seqlens_k=i32([0, 4, 9])), "differ in length", False),
        (dict(cu_seqlens_q=i32([])), "num_seqs + 1 >= 1 entries", False),
        (dict(seqused_k=i32([1, 2])), "seqused_k has 2 entries; the batch has 1 sequences", False),
        (dict(seqused_k=i32([3]), block_table=i32([[0], [1]])), "block_table has 2 rows", False),
        (dict(seqused_k=i32([3]), block_table=np.zeros((1, 4), np.int32)[:, ::2]),
         "block_table must be contiguous", False),
        (dict(seqused_k=[3]), "exposes no array protocol", False),
    ]
    for kw, match, dtype in cases:
        with pytest.raises(fmha.InvalidArgumentError) as e:
            fmha.forward(q, k, k, **kw)
        assert match in e.value.message, (kw, e.value.message)
        assert isinstance(e.value, TypeError) == dtype, kw


def test_explain_and_workspace_size_take_the_keywords():
    q, k = randn((1, 2, 6, 8)), randn((1, 2, 9, 8))
    with pytest.raises(TypeError):
        fmha.explain(q, k, k, cu_seqlen_q=i32([0, 6]))  # misspelt
    with pytest.raises(fmha.InvalidArgumentError):
        fmha.workspace_size(q, k, k, seqused_k=i32([1, 2]))


# ---- numerics ----------------------------------------------------------------------
def per_sequence_reference(q, k, v, rows_q, rows_k, **mask):
    """(o, lse) of packed q [1, Hq, Tq, D] against per-sequence keys: rows_q[b]
    and rows_k[b] are the row slices of sequence b."""
    o = np.zeros(q.shape)
    lse = np.full(q.shape[:3], -np.inf)
    for sq, sk in zip(rows_q, rows_k):
        if sq.stop > sq.start:
            o[:, :, sq], lse[:, :, sq] = attention(q[:, :, sq], k[:, :, sk], v[:, :, sk], **mask)
    return o, lse


@needs_serving
@pytest.mark.parametrize("mask", [{}, {"causal": True}, {"causal": True, "causal_alignment": "top_left"},
                                  {"window": (3, 2)}], ids=["none", "causal", "causal-tl", "window"])
def test_ragged_batch(mask):
    lens_q, lens_k = [3, 0, 1, 9, 5], [7, 4, 1, 9, 2]  # an empty sequence, Nq > Nk in the last
    cu_q, cu_k = i32(np.cumsum([0] + lens_q)), i32(np.cumsum([0] + lens_k))
    q, k, v = randn((1, 4, cu_q[-1], 16)), randn((1, 2, cu_k[-1], 16)), randn((1, 2, cu_k[-1], 16))
    out = np.full(q.shape, np.nan, np.float32)
    got, lse = fmha.forward(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, out=out, return_lse=True, **mask)
    rows_q = [slice(a, b) for a, b in zip(cu_q[:-1], cu_q[1:])]
    rows_k = [slice(a, b) for a, b in zip(cu_k[:-1], cu_k[1:])]
    ref_o, ref_lse = per_sequence_reference(q, k, v, rows_q, rows_k, **mask)
    assert_close(got, ref_o, np.float32)
    assert_lse_close(lse, ref_lse)


@needs_serving
def test_seqused_k_on_a_dense_cache():
    q, k, v = randn((3, 4, 2, 16)), randn((3, 2, 20, 16)), randn((3, 2, 20, 16))
    used = i32([20, 0, 7])
    got, lse = fmha.forward(q, k, v, seqused_k=used, causal=True, return_lse=True)
    for b, n in enumerate(used):
        if n == 0:
            assert np.all(got[b] == 0) and np.all(np.isneginf(lse[b]))
            continue
        ref_o, ref_lse = attention(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], causal=True)
        assert_close(got[b:b + 1], ref_o, np.float32)
        assert_lse_close(lse[b:b + 1], ref_lse)


@needs_serving
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("layout", ["vllm", "flashinfer"])
def test_paged_decode(page_size, layout):
    b, hq, hk, d, max_pages = 4, 8, 2, 32, 6
    num_pages = b * max_pages + 3
    if layout == "vllm":  # [pages, page_size, Hk, D] storage
        kc, vc = randn((num_pages, page_size, hk, d)), randn((num_pages, page_size, hk, d))
        k, v = kc.transpose(0, 2, 1, 3), vc.transpose(0, 2, 1, 3)
    else:  # FlashInfer's [pages, Hk, page_size, D]
        k, v = randn((num_pages, hk, page_size, d)), randn((num_pages, hk, page_size, d))
    table = i32(RNG.permutation(num_pages)[:b * max_pages].reshape(b, max_pages))
    used = i32([1, 0, max_pages * page_size, 3 * page_size - 1])
    q = randn((b, hq, 1, d))
    got, lse = fmha.forward(q, k, v, seqused_k=used, block_table=table, return_lse=True)
    for s in range(b):
        n = int(used[s])
        if n == 0:
            assert np.all(got[s] == 0) and np.all(np.isneginf(lse[s]))
            continue
        slots = [(table[s, j // page_size], j % page_size) for j in range(n)]
        ks = np.stack([k[p, :, j] for p, j in slots], axis=1)[None]  # [1, Hk, n, D]
        vs = np.stack([v[p, :, j] for p, j in slots], axis=1)[None]
        ref_o, ref_lse = attention(q[s:s + 1], ks, vs)
        assert_close(got[s:s + 1], ref_o, np.float32)
        assert_lse_close(lse[s:s + 1], ref_lse)
