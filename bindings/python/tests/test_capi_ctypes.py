"""fmha._capi_ctypes, the ctypes stand-in for the SWIG fmha.capi, against
the SWIG module: the same constants and struct fields, and the same results
from the same library (the one the SWIG extension loaded).

Skipped (with the reason) when fmha.capi is itself the ctypes module (no
SWIG build to compare with), or when the loaded libfmha cannot be located
(not Linux, or a static libfmha linked into the extension).
"""
import importlib
import os

import numpy as np
import pytest

import fmha
from fmha_reference import attention


def _loaded_libfmha():
    """The path of the libfmha this process loaded (through the SWIG
    extension), from /proc/self/maps; None when not found."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if os.path.basename(path).startswith("libfmha.so"):
                    return path
    except OSError:
        pass
    return None


def _ctypes_capi():
    if fmha.capi.__name__ == "fmha._capi_ctypes":
        pytest.skip("fmha.capi is the ctypes stand-in already (no SWIG extension to compare with)")
    lib = _loaded_libfmha()
    if lib is None:
        pytest.skip("the loaded libfmha is not a shared library found in /proc/self/maps")
    saved = os.environ.get("FMHA_LIBRARY")
    os.environ["FMHA_LIBRARY"] = lib
    try:
        return importlib.import_module("fmha._capi_ctypes")
    finally:
        if saved is None:
            del os.environ["FMHA_LIBRARY"]
        else:
            os.environ["FMHA_LIBRARY"] = saved


def test_constants_match_swig():
    ct, swig = _ctypes_capi(), fmha.capi
    names = [n for n in dir(swig) if n.startswith("FMHA_") and not n.endswith("_")]
    assert "FMHA_MASK_CAUSAL_TOP_LEFT" in names and "FMHA_DTYPE_BF16" in names
    for name in names:
        value = getattr(swig, name)
        if isinstance(value, int):
            assert getattr(ct, name, None) == value, name


def test_structs_match_swig():
    ct, swig = _ctypes_capi(), fmha.capi
    for cls in ("fmha_tensor", "fmha_forward_params"):
        ours = [f[0] for f in getattr(ct, cls)._fields_]
        proxy = getattr(swig, cls)()
        for field in ours:
            assert hasattr(proxy, field), f"{cls}.{field} is not in the SWIG proxy"
    a, b = ct.fmha_forward_params(), swig.fmha_forward_params()
    for field in ("struct_size", "mask_flags", "lse", "scale", "softcap", "window_left",
                  "window_right", "kernel", "num_splits", "num_seqs", "cu_seqlens_q",
                  "block_table_stride", "max_seqlen_k"):
        # (a SWIG build without address typemaps for the serving pointers
        # gives None for NULL where the ctypes module, like capi.i, gives 0)
        assert (getattr(a, field) or 0) == (getattr(b, field) or 0), field
    a.kernel = b.kernel = "cpu_tiled"
    assert a.kernel == b.kernel == "cpu_tiled"
    a.q.dims = (1, 2, 3, 4)
    assert a.q.dims == (1, 2, 3, 4)


def test_forward_matches_swig():
    """One CPU forward through each module's raw calls: identical bits,
    close to the float64 reference; and the same error for a bad call."""
    ct, swig = _ctypes_capi(), fmha.capi
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 4, 33, 64)).astype(np.float32)
    k = rng.standard_normal((1, 2, 50, 64)).astype(np.float32)
    v = rng.standard_normal((1, 2, 50, 64)).astype(np.float32)
    outs = []
    for capi in (swig, ct):
        o = np.full_like(q, np.nan)
        lse = np.full(q.shape[:3], np.nan, dtype=np.float32)
        p = capi.fmha_forward_params()
        p.mask_flags = capi.FMHA_MASK_CAUSAL
        for name, arr in (("q", q), ("k", k), ("v", v), ("o", o)):
            t = capi.fmha_tensor()
            t.data = arr.ctypes.data
            t.dtype = capi.FMHA_DTYPE_F32
            t.dims = arr.shape
            t.strides = tuple(s // 4 for s in arr.strides)
            setattr(p, name, t)
        p.lse = lse.ctypes.data
        status, h = capi.fmha_create(capi.FMHA_DEVICE_CPU, 0)
        assert status == capi.FMHA_SUCCESS
        status, need = capi.fmha_forward_workspace_size(h, p)
        assert status == capi.FMHA_SUCCESS
        ws = np.empty(need + 16, dtype=np.uint8)
        assert capi.fmha_forward(h, p, ws.ctypes.data if need else None, need + 16 if need else 0) \
            == capi.FMHA_SUCCESS, capi.fmha_last_error_message()
        status, text = capi.fmha_forward_explain(h, p, 4096)
        assert status == capi.FMHA_SUCCESS and "cpu_tiled" in text
        p.v = capi.fmha_tensor()  # zeroed: no data, no dtype, no dims
        assert capi.fmha_forward(h, p, None, 0) == capi.FMHA_ERROR_INVALID_ARGUMENT
        message = capi.fmha_last_error_message()
        capi.fmha_destroy(h)
        outs.append((o, lse, message))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])
    assert outs[0][2] == outs[1][2] and outs[1][2].startswith("v."), outs[1][2]
    ref_o, ref_lse = attention(q, k, v, causal=True)
    assert np.abs(outs[1][0] - ref_o).max() < 1e-5
    assert np.abs(outs[1][1] - ref_lse).max() < 1e-4
    assert ct.fmha_version() == swig.fmha_version()
    assert [ct.fmha_kernel_name(i) for i in range(ct.fmha_kernel_count())] == fmha.kernels()
    assert ct.fmha_status_string(ct.FMHA_ERROR_UNSUPPORTED) == \
        swig.fmha_status_string(swig.FMHA_ERROR_UNSUPPORTED)
