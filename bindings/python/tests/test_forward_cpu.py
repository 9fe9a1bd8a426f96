"""fmha.forward() on the CPU backend with numpy arrays, against the float64
reference: dtypes, GQA/MQA, both causal alignments, windows, softcap, lse,
strided views, caller-provided outputs, the array protocols, and errors."""
import threading

import numpy as np
import pytest

import fmha
from fmha_reference import assert_close, assert_lse_close, attention, ml_dtypes

RNG = np.random.default_rng(20261129)
DTYPES = [np.float32, np.float16] + ([ml_dtypes.bfloat16] if ml_dtypes else [])
DTYPE_IDS = [np.dtype(t).name for t in DTYPES]


def randn(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def qkv(b=2, hq=4, hk=None, nq=33, nk=None, d=64, dtype=np.float32):
    hk = hk or hq
    nk = nk or nq
    return randn((b, hq, nq, d), dtype), randn((b, hk, nk, d), dtype), randn((b, hk, nk, d), dtype)


def poisoned(shape, dtype):
    return np.full(shape, np.nan, dtype=dtype)


def check(q, k, v, dtype=None, **kw):
    """Runs forward with a poisoned out and lse; compares both."""
    dtype = dtype or q.dtype
    out = poisoned(q.shape, dtype)
    lse = poisoned(q.shape[:3], np.float32)
    got, got_lse = fmha.forward(q, k, v, out=out, out_lse=lse, **kw)
    assert got is out and got_lse is lse
    kw.pop("kernel", None)
    ref_o, ref_lse = attention(q, k, v, **kw)
    assert_close(out, ref_o, dtype)
    assert_lse_close(lse, ref_lse)


# ---- numerics ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_plain_attention(dtype):
    check(*qkv(dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("hq,hk", [(8, 2), (6, 1), (32, 8)], ids=["gqa4", "mqa", "llama"])
def test_gqa(dtype, hq, hk):
    check(*qkv(b=1, hq=hq, hk=hk, nq=19, nk=27, d=32, dtype=dtype), causal=True)


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
@pytest.mark.parametrize("nq,nk", [(17, 40), (40, 17), (29, 29), (1, 50)],
                         ids=["q<k", "q>k", "square", "decode"])
def test_causal(alignment, nq, nk):
    check(*qkv(nq=nq, nk=nk, d=40), causal=True, causal_alignment=alignment)


def test_causal_rows_without_keys_give_zero_and_minus_inf():
    q, k, v = qkv(b=1, hq=2, nq=12, nk=5, d=16)
    o, lse = fmha.forward(q, k, v, causal=True, return_lse=True)
    # bottom-right: row i sees keys j <= i + 5 - 12, so rows 0..6 see none.
    assert np.all(o[:, :, :7] == 0)
    assert np.all(np.isneginf(lse[:, :, :7]))
    assert np.all(np.isfinite(lse[:, :, 7:]))


@pytest.mark.parametrize("window", [(8, -1), (-1, 4), (5, 3), (0, 0), (50, 50)])
def test_window(window):
    check(*qkv(nq=31, nk=37, d=24), window=window)


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
@pytest.mark.parametrize("window", [(7, -1), (7, 0), (0, -1)])
def test_causal_window(alignment, window):
    check(*qkv(nq=30, nk=45, d=16), causal=True, causal_alignment=alignment, window=window)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_softcap_and_scale(dtype):
    check(*qkv(d=32, dtype=dtype), scale=1.0, softcap=5.0)
    check(*qkv(d=32, dtype=dtype), scale=0.05)
    check(*qkv(d=32, dtype=dtype), causal=True, softcap=2.0)


@pytest.mark.parametrize("d", [1, 8, 80, 128, 256])
def test_head_dims(d):
    check(*qkv(b=1, hq=2, nq=9, nk=14, d=d))


def test_llama_decoder_layer_shape():
    # The examples' case: GQA 32/8, causal, lse, N=256, D=128.
    check(*qkv(b=1, hq=32, hk=8, nq=256, d=128, dtype=np.float16), causal=True)


def test_default_outputs():
    q, k, v = qkv(hq=8, hk=2)
    o = fmha.forward(q, k, v)
    assert isinstance(o, np.ndarray) and o.shape == q.shape and o.dtype == q.dtype
    assert o.flags.c_contiguous
    o2, lse = fmha.forward(q, k, v, return_lse=True)
    assert lse.dtype == np.float32 and lse.shape == q.shape[:3]
    ref_o, ref_lse = attention(q, k, v)
    assert_close(o, ref_o, q.dtype)
    assert_close(o2, ref_o, q.dtype)
    assert_lse_close(lse, ref_lse)


# ---- layouts -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_bnhd_views(dtype):
    """[B, N, H, D] storage (what a projection writes) viewed as [B, H, N, D]."""
    b, n, hq, hk, d = 2, 21, 8, 2, 32
    q = randn((b, n, hq, d), dtype).transpose(0, 2, 1, 3)
    k = randn((b, n, hk, d), dtype).transpose(0, 2, 1, 3)
    v = randn((b, n, hk, d), dtype).transpose(0, 2, 1, 3)
    out_storage = poisoned((b, n, hq, d), dtype)
    out = out_storage.transpose(0, 2, 1, 3)
    assert not q.flags.c_contiguous and not out.flags.c_contiguous
    got = fmha.forward(q, k, v, out=out, causal=True)
    assert got is out
    assert_close(out_storage.transpose(0, 2, 1, 3), attention(q, k, v, causal=True)[0], dtype)


def test_packed_qkv_slices():
    """q, k, v as slices of one fused projection [B, N, Hq + 2 Hk, D]."""
    b, n, hq, hk, d = 1, 40, 8, 2, 16
    qkv_buf = randn((b, n, hq + 2 * hk, d))
    q = qkv_buf[:, :, :hq].transpose(0, 2, 1, 3)
    k = qkv_buf[:, :, hq:hq + hk].transpose(0, 2, 1, 3)
    v = qkv_buf[:, :, hq + hk:].transpose(0, 2, 1, 3)
    check(q, k, v, causal=True, window=(16, 0))


def test_strided_head_dim_and_broadcast():
    """head_dim stride 2, and a K/V shared across the batch with stride 0."""
    q = randn((2, 4, 10, 64))[..., ::2]
    k = np.broadcast_to(randn((1, 4, 12, 32)), (2, 4, 12, 32))
    v = randn((2, 4, 12, 32))
    assert q.strides[3] == 8 and k.strides[0] == 0
    check(q, k, v)


def test_out_views_write_nothing_else():
    q, k, v = qkv(b=1, hq=2, nq=8, d=16)
    storage = np.full((1, 2, 8, 32), 7.0, dtype=np.float32)
    out = storage[..., ::2]
    fmha.forward(q, k, v, out=out)
    assert np.all(storage[..., 1::2] == 7.0)
    assert_close(out, attention(q, k, v)[0], np.float32)


class DLPackOnly:
    """Exposes an array only through DLPack (like a foreign tensor type)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class ArrayInterfaceOnly:
    def __init__(self, a):
        self.a = a
        self.__array_interface__ = a.__array_interface__


@pytest.mark.skipif(not hasattr(np.ndarray, "__dlpack__"), reason="numpy < 1.22 has no DLPack")
def test_dlpack_inputs_and_out():
    q, k, v = qkv(b=1, hq=4, hk=2, nq=10, d=16)
    storage = poisoned((1, 10, 4, 16), np.float32)
    out = storage.transpose(0, 2, 1, 3)
    got = fmha.forward(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), out=DLPackOnly(out))
    assert isinstance(got, DLPackOnly)
    assert_close(out, attention(q, k, v)[0], np.float32)


@pytest.mark.skipif(not hasattr(np.ndarray, "__dlpack__"), reason="numpy < 1.22 has no DLPack")
def test_dlpack_producer_fmha_cannot_allocate_like_gets_numpy():
    """A CPU producer that is not numpy, torch or cupy: out and lse are numpy."""
    q, k, v = qkv(b=1, hq=4, hk=2, nq=10, d=16, dtype=np.float16)
    o, lse = fmha.forward(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), causal=True,
                          return_lse=True)
    assert isinstance(o, np.ndarray) and o.dtype == np.float16 and o.shape == q.shape
    assert isinstance(lse, np.ndarray) and lse.dtype == np.float32 and lse.shape == q.shape[:3]
    ref_o, ref_lse = attention(q, k, v, causal=True)
    assert_close(o, ref_o, np.float16)
    assert_lse_close(lse, ref_lse)


class VersionedDLPack:
    """A DLPack 1.x producer written with ctypes: a "dltensor_versioned"
    capsule over a numpy array, optionally flagged read-only."""

    def __init__(self, a, readonly=False):
        import ctypes
        from fmha import _arrays as dl
        self.a = a
        self.shape = (ctypes.c_int64 * a.ndim)(*a.shape)
        self.strides = (ctypes.c_int64 * a.ndim)(*(s // a.itemsize for s in a.strides))
        m = self.managed = dl._DLManagedTensorVersioned()
        m.version.major, m.version.minor = 1, 0
        m.flags = 1 if readonly else 0
        t = m.dl_tensor
        t.data = a.__array_interface__["data"][0] - 64
        t.byte_offset = 64  # exercised: the first element is data + byte_offset
        t.device.device_type, t.device.device_id = 1, 0
        t.ndim = a.ndim
        t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, a.itemsize * 8, 1
        t.shape, t.strides = self.shape, self.strides
        self.name = b"dltensor_versioned"
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        self._new = lambda: new(ctypes.addressof(m), self.name, None)
        self.max_versions = []

    def __dlpack__(self, *, stream=None, max_version=None):
        self.max_versions.append(max_version)
        return self._new()

    def __dlpack_device__(self):
        return (1, 0)


def test_versioned_dlpack():
    q, k, v = qkv(b=1, hq=2, nq=7, d=8)
    out_storage = poisoned((1, 7, 2, 8), np.float32)
    out = VersionedDLPack(out_storage.transpose(0, 2, 1, 3))
    fmha.forward(VersionedDLPack(q), VersionedDLPack(k), VersionedDLPack(v), out=out)
    assert out.max_versions == [(1, 0)]
    assert_close(out_storage.transpose(0, 2, 1, 3), attention(q, k, v)[0], np.float32)
    expect_error(INVALID, "read-only", q, k, v,
                 out=VersionedDLPack(np.empty_like(q), readonly=True))


def test_array_interface_inputs():
    q, k, v = qkv(b=1, hq=2, nq=6, d=8)
    q_view = q.transpose(0, 2, 1, 3).copy().transpose(0, 2, 1, 3)
    out = poisoned(q.shape, np.float32)
    fmha.forward(ArrayInterfaceOnly(q_view), ArrayInterfaceOnly(k), ArrayInterfaceOnly(v),
                 out=ArrayInterfaceOnly(out))
    assert_close(out, attention(q, k, v)[0], np.float32)


@pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes not installed (numpy has no bfloat16)")
def test_bfloat16_default_output_keeps_dtype():
    q, k, v = qkv(b=1, hq=2, nq=5, d=8, dtype=ml_dtypes.bfloat16)
    assert fmha.forward(q, k, v).dtype == ml_dtypes.bfloat16


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 9, 16, generator=g, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 9, 16, generator=g, dtype=torch.bfloat16)
    v = torch.randn(1, 2, 9, 16, generator=g, dtype=torch.bfloat16)
    o, lse = fmha.forward(q, k, v, causal=True, return_lse=True)
    assert isinstance(o, torch.Tensor) and o.dtype == torch.bfloat16
    ref_o, ref_lse = attention(q.float().numpy(), k.float().numpy(), v.float().numpy(), causal=True)
    np.testing.assert_allclose(o.float().numpy(), ref_o, atol=2e-2, rtol=2e-2)
    assert_lse_close(lse.numpy(), ref_lse)


# ---- handles, threads, introspection -------------------------------------------
@pytest.mark.parametrize("threads", [1, 3])
def test_explicit_handle_and_thread_count(threads):
    q, k, v = qkv(b=3, hq=4, hk=2, nq=25, d=16)
    with fmha.Handle("cpu", num_threads=threads) as h:
        o = fmha.forward(q, k, v, handle=h, causal=True)
    assert_close(o, attention(q, k, v, causal=True)[0], np.float32)
    with pytest.raises(fmha.Error):
        h.set_num_threads(2)  # closed


def test_concurrent_threads():
    cases = [qkv(b=1, hq=4, nq=40, d=32) for _ in range(4)]
    results, errors = [None] * 4, []

    def work(i):
        try:
            for _ in range(3):
                results[i] = fmha.forward(*cases[i], causal=True)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for (q, k, v), o in zip(cases, results):
        assert_close(o, attention(q, k, v, causal=True)[0], np.float32)


def test_forced_kernel_and_explain():
    names = fmha.kernels()
    assert "cpu_tiled" in names and all(isinstance(n, str) for n in names)
    q, k, v = qkv(b=1, hq=2, nq=8, d=16)
    text = fmha.explain(q, k, v, causal=True)
    assert "chosen: " in text and any(n in text for n in names)
    assert "forced" in fmha.explain(q, k, v, kernel="cpu_tiled")
    check(q, k, v, kernel="cpu_tiled")


def test_workspace():
    q, k, v = qkv(b=1, hq=2, nq=8, d=16)
    need = fmha.workspace_size(q, k, v)
    assert isinstance(need, int) and need >= 0
    buf = np.empty(need + 64, dtype=np.uint8)
    start = (-buf.__array_interface__["data"][0]) % 16
    out = fmha.forward(q, k, v, workspace=buf[start:start + need])
    assert_close(out, attention(q, k, v)[0], np.float32)
    if need > 0:
        with pytest.raises(fmha.Error) as e:
            fmha.forward(q, k, v, workspace=buf[start:start + need - 1])
        assert e.value.status == fmha.Status.ERROR_WORKSPACE_TOO_SMALL


def test_version():
    assert fmha.__version__ == "%d.%d.%d" % fmha.version()
    assert fmha.version()[:2] == (0, 3)
    assert fmha.version() == (fmha.capi.FMHA_VERSION_MAJOR, fmha.capi.FMHA_VERSION_MINOR,
                              fmha.capi.FMHA_VERSION_PATCH)


# ---- errors --------------------------------------------------------------------
def expect_error(status, match, *args, **kw):
    with pytest.raises(fmha.Error) as e:
        fmha.forward(*args, **kw)
    err = e.value
    assert isinstance(err, RuntimeError)
    assert err.status == status and isinstance(err.status, fmha.Status)
    # Invalid arguments are ValueErrors (InvalidArgumentError); others are not.
    assert isinstance(err, ValueError) == (status == INVALID)
    assert isinstance(err, fmha.InvalidArgumentError) == (status == INVALID)
    assert match in err.message, err.message
    assert fmha.capi.fmha_status_string(int(status)) in str(err)
    return err


INVALID = fmha.Status.ERROR_INVALID_ARGUMENT


def expect_dtype_error(match, *args, **kw):
    err = expect_error(INVALID, match, *args, **kw)
    assert isinstance(err, fmha.DTypeError) and isinstance(err, TypeError)
    return err


def test_error_dtype_mismatch():
    q, k, v = qkv()
    expect_dtype_error("k.dtype", q, k.astype(np.float16), v)
    # (out may have another dtype than q since 0.3: test_numerics_cpu.py.)
    expect_dtype_error("out.dtype", q, k, v, out=np.empty(q.shape, np.float16), out_dtype="float32")


def test_error_unsupported_dtype():
    q, k, v = qkv()
    expect_dtype_error("float64", q.astype(np.float64), k, v)
    expect_dtype_error("int32", q, k.astype(np.int32), v)
    expect_dtype_error("float32", q, k, v, out_lse=np.empty(q.shape[:3], np.float16))


def test_error_shape_is_not_a_dtype_error():
    err = expect_error(INVALID, "does not divide", *qkv(hq=8, hk=3))
    assert not isinstance(err, TypeError)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_error_big_endian(dtype):
    q, k, v = qkv(dtype=dtype)
    swapped = k.astype(np.dtype(dtype).newbyteorder(">"))
    err = expect_dtype_error("big-endian arrays are not supported", q, swapped, v)
    assert err.message.startswith("k:"), err.message
    expect_dtype_error("big-endian arrays are not supported", q, k, v,
                       out=np.empty(q.shape, np.dtype(dtype).newbyteorder(">")))
    expect_dtype_error("big-endian arrays are not supported", ArrayInterfaceOnly(q.byteswap().view(
        q.dtype.newbyteorder(">"))), k, v)


class RequiresGrad(DLPackOnly):
    """A DLPack producer flagged like a torch tensor in an autograd graph."""
    requires_grad = True


@pytest.mark.skipif(not hasattr(np.ndarray, "__dlpack__"), reason="numpy < 1.22 has no DLPack")
def test_error_requires_grad():
    q, k, v = qkv(b=1, hq=2, nq=6, d=8)
    err = expect_error(INVALID, "v requires grad", q, k, RequiresGrad(v))
    assert "no backward" in err.message and "v.detach()" in err.message


def test_error_requires_grad_torch():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.randn(1, 2, 6, 8) for _ in range(3))
    q.requires_grad_(True)
    err = expect_error(INVALID, "q requires grad", q, k, v)
    assert "no backward" in err.message
    out = fmha.forward(q.detach(), k, v)  # detached: fine
    with torch.no_grad():  # no graph is recorded: read as q.detach()
        torch.testing.assert_close(fmha.forward(q, k, v), out)


def test_error_rank():
    q, k, v = qkv()
    expect_error(INVALID, "4 dims", q[0], k[0], v[0])


def test_error_heads_do_not_divide():
    q, k, v = qkv(hq=8, hk=3)
    expect_error(INVALID, "does not divide", q, k, v)


def test_error_head_dim_mismatch():
    q, k, v = qkv()
    expect_error(INVALID, "head_dim", q, k[..., :32], v[..., :32])


def test_error_causal_window_right():
    expect_error(INVALID, "window[1]=2", *qkv(), causal=True, window=(-1, 2))


def test_error_bad_options():
    q, k, v = qkv()
    expect_error(INVALID, "causal_alignment", q, k, v, causal=True, causal_alignment="diagonal")
    expect_error(INVALID, "window", q, k, v, window=4)
    expect_error(INVALID, "scale", q, k, v, scale=-1.0)
    expect_error(INVALID, "softcap", q, k, v, softcap=float("nan"))
    expect_error(INVALID, "window[0]=-3", q, k, v, window=(-3, -1))


def test_error_unknown_kernel():
    expect_error(INVALID, "not a registered kernel", *qkv(), kernel="no_such_kernel")


def test_error_unsupported_problem():
    q, k, v = qkv(b=1, hq=1, nq=2, d=1024)
    err = expect_error(fmha.Status.ERROR_UNSUPPORTED, "head_dim", q, k, v)
    assert err.status == 2
    # explain() says why instead of raising.
    assert "no registered kernel" in fmha.explain(q, k, v)


def test_error_out_aliases_input():
    q, k, v = qkv()
    expect_error(INVALID, "overlaps", q, k, v, out=q)


def test_error_out_shape_and_readonly():
    q, k, v = qkv()
    err = expect_error(INVALID, "out.dims[3]=32", q, k, v, out=np.empty((2, 4, 33, 32), np.float32))
    assert "o.dims" not in err.message
    ro = np.empty(q.shape, np.float32)
    ro.flags.writeable = False
    expect_error(INVALID, "read-only", q, k, v, out=ro)
    expect_error(INVALID, "out_lse", q, k, v, out_lse=np.empty((2, 4, 32), np.float32))


def test_error_negative_strides():
    q, k, v = qkv()
    expect_error(INVALID, "strides", q[:, :, ::-1], k, v)


def test_error_leaves_outputs_untouched():
    q, k, v = qkv()
    out = poisoned(q.shape, np.float32)
    lse = poisoned(q.shape[:3], np.float32)
    expect_error(INVALID, "window[1]", q, k, v, causal=True, window=(-1, 1), out=out,
                 out_lse=lse)
    assert np.all(np.isnan(out)) and np.all(np.isnan(lse))


def test_error_not_an_array():
    expect_error(INVALID, "array protocol", [[1.0]], *qkv()[1:])


def test_error_handles():
    with pytest.raises(ValueError) as e:
        fmha.Handle("tpu")
    assert isinstance(e.value, fmha.Error) and e.value.status == INVALID
    try:
        fmha.Handle("cuda", 0).close()
    except fmha.Error as err:  # built without CUDA, or no GPU here
        assert err.status == fmha.Status.ERROR_NOT_AVAILABLE
    with pytest.raises(fmha.Error) as e:
        fmha.Handle("cpu", 1)
    assert e.value.status == INVALID and "device_ordinal" in e.value.message
    q, k, v = qkv()
    with pytest.raises(fmha.Error):
        fmha.forward(q, k, v, stream=5)  # streams are for CUDA tensors


def test_capi_is_the_c_header():
    p = fmha.capi.fmha_forward_params()
    assert p.struct_size == fmha.capi.FMHA_FORWARD_PARAMS_SIZE_V3 == 544
    assert fmha.capi.FMHA_FORWARD_PARAMS_SIZE_V1 == 368  # 0.1's size, still accepted
    assert fmha.capi.FMHA_FORWARD_PARAMS_SIZE_V2 == 424  # 0.2's size, still accepted
    assert not any((p.q_descale, p.k_descale, p.v_descale, p.alibi_slopes, p.bias.data))
    assert p.alibi_slopes_stride == 0
    assert (p.num_seqs, p.max_seqlen_q, p.max_seqlen_k, p.block_table_stride) == (0, 0, 0, 0)
    assert (p.cu_seqlens_q, p.cu_seqlens_k, p.seqused_k, p.block_table) == (0, 0, 0, 0)
    assert (p.window_left, p.window_right, p.kernel, p.lse) == (-1, -1, None, 0)
    p.kernel = "cpu_tiled"
    assert p.kernel == "cpu_tiled"
    assert fmha.capi.fmha_status_string(99) == "unknown status"
    assert fmha.capi.fmha_kernel_name(-1) is None
    status, h = fmha.capi.fmha_create(fmha.capi.FMHA_DEVICE_CPU, 0)
    assert status == fmha.capi.FMHA_SUCCESS
    assert fmha.capi.fmha_forward(h, p, None, 0) == fmha.capi.FMHA_ERROR_INVALID_ARGUMENT
    assert "q.dtype=0 is not an fmha_dtype" in fmha.capi.fmha_last_error_message()
    fmha.capi.fmha_destroy(h)
    fmha.capi.fmha_destroy(None)
