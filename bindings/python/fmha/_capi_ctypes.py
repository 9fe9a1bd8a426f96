"""fmha.capi over ctypes: the C API of libfmha without the SWIG extension.

The package imports this module as ``fmha.capi`` when the SWIG-built
extension is absent (a machine without SWIG or Python headers: the
package's .py files and libfmha are then enough). It exposes the names of
include/fmha/fmha.h the package uses, with the SWIG module's conventions
(capi.i):

  - every pointer the caller supplies (tensor data, lse, workspace, CUDA
    stream, the 0.2 int32 arrays, the 0.3 descales and ALiBi slopes) is a
    Python int or None for NULL; reading
    such a field gives an int (0 for NULL);
  - dims and strides are sequences of 4 ints (read back as tuples);
  - fmha_create(kind, ordinal) returns [status, handle];
  - fmha_forward_workspace_size(handle, params) returns [status, bytes];
  - fmha_forward_explain(handle, params, maxlen) returns [status, text].

  - fmha_merge_params owns its o_parts and lse_parts arrays: set them with
    params.set_parts([fmha_tensor, ...], [lse address or None, ...]), which
    copies both and sets num_parts (fmha_merge is declared when the loaded
    library exports it).

ctypes releases the GIL while a C function runs, as SWIG's -threads does.

The library: $FMHA_LIBRARY (a path) when set, else a libfmha shared library
next to this file (a wheel's copy), else the loader's search by name. The
structs mirror fmha.h field by field; their sizes are checked against the
header's FMHA_FORWARD_PARAMS_SIZE_V1/V2/V3 on 64-bit platforms, and the
loaded library's version must be 0.3 or later with the same major.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os

_c_int32, _c_int64, _c_uint32, _c_float = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_float
_c_void_p, _c_size_t, _c_char_p = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p

# ---- constants (fmha.h) --------------------------------------------------------
FMHA_VERSION_MAJOR = 0
FMHA_VERSION_MINOR = 3
FMHA_VERSION_PATCH = 0
FMHA_VERSION_NUMBER = FMHA_VERSION_MAJOR * 10000 + FMHA_VERSION_MINOR * 100 + FMHA_VERSION_PATCH

FMHA_SUCCESS = 0
FMHA_ERROR_INVALID_ARGUMENT = 1
FMHA_ERROR_UNSUPPORTED = 2
FMHA_ERROR_WORKSPACE_TOO_SMALL = 3
FMHA_ERROR_OUT_OF_MEMORY = 4
FMHA_ERROR_DEVICE = 5
FMHA_ERROR_NOT_AVAILABLE = 6
FMHA_ERROR_INTERNAL = 7
FMHA_STATUS_COUNT_ = 8

FMHA_DTYPE_F16 = 1
FMHA_DTYPE_BF16 = 2
FMHA_DTYPE_F32 = 3
FMHA_DTYPE_F8E4M3 = 4
FMHA_DTYPE_F8E5M2 = 5

FMHA_DEVICE_CPU = 0
FMHA_DEVICE_CUDA = 1

FMHA_MAX_DIM = 1 << 62

FMHA_MASK_NONE = 0
FMHA_MASK_CAUSAL = 1
FMHA_MASK_CAUSAL_TOP_LEFT = 2


# ---- structs -------------------------------------------------------------------
_Dims = _c_int64 * 4


class _Struct(ctypes.Structure):
    """A struct whose int64_t[4] members take and give tuples and whose
    const char* members take str, like the SWIG proxies."""

    _tuples = ()    # int64_t[4] members
    _strings = ()   # const char* members
    _pointers = ()  # void* members: NULL reads as 0

    def __setattr__(self, name, value):
        if name in self._tuples:
            value = _Dims(*value)
        elif name in self._strings and isinstance(value, str):
            value = value.encode()
        super().__setattr__(name, value)

    def __getattribute__(self, name):
        value = super().__getattribute__(name)
        cls = type(self)
        if name in cls._tuples:
            return tuple(value)
        if name in cls._strings:
            return None if value is None else value.decode()
        if name in cls._pointers:
            return value or 0
        return value


class fmha_tensor(_Struct):
    _fields_ = [("data", _c_void_p), ("dtype", ctypes.c_int),
                ("dims", _Dims), ("strides", _Dims)]
    _tuples = ("dims", "strides")
    _pointers = ("data",)


class fmha_forward_params(_Struct):
    """fmha_forward_params; a fresh one holds fmha_forward_params_init()'s
    defaults (as the SWIG proxy's constructor does)."""

    _fields_ = [("struct_size", _c_uint32), ("mask_flags", _c_uint32),
                ("q", fmha_tensor), ("k", fmha_tensor), ("v", fmha_tensor), ("o", fmha_tensor),
                ("lse", _c_void_p),
                ("scale", _c_float), ("softcap", _c_float),
                ("window_left", _c_int32), ("window_right", _c_int32),
                ("kernel", _c_char_p),
                ("num_splits", _c_int32), ("reserved_", _c_int32),
                # 0.2: serving layouts
                ("num_seqs", _c_int32), ("max_seqlen_q", _c_int32),
                ("cu_seqlens_q", _c_void_p), ("cu_seqlens_k", _c_void_p),
                ("seqused_k", _c_void_p), ("block_table", _c_void_p),
                ("block_table_stride", _c_int64),
                ("max_seqlen_k", _c_int32), ("reserved2_", _c_int32),
                # 0.3: inference numerics
                ("q_descale", _c_void_p), ("k_descale", _c_void_p), ("v_descale", _c_void_p),
                ("bias", fmha_tensor),
                ("alibi_slopes", _c_void_p), ("alibi_slopes_stride", _c_int64)]
    _strings = ("kernel",)
    _pointers = ("lse", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table",
                 "q_descale", "k_descale", "v_descale", "alibi_slopes")

    def __init__(self):
        super().__init__()
        _lib.fmha_forward_params_init_sized(ctypes.byref(self), ctypes.sizeof(self))


FMHA_FORWARD_PARAMS_SIZE_V1 = fmha_forward_params.num_seqs.offset
FMHA_FORWARD_PARAMS_SIZE_V2 = fmha_forward_params.q_descale.offset
FMHA_FORWARD_PARAMS_SIZE_V3 = ctypes.sizeof(fmha_forward_params)
_SIZES = (FMHA_FORWARD_PARAMS_SIZE_V1, FMHA_FORWARD_PARAMS_SIZE_V2, FMHA_FORWARD_PARAMS_SIZE_V3)
if ctypes.sizeof(_c_void_p) == 8 and _SIZES != (368, 424, 544):
    raise ImportError(f"fmha._capi_ctypes: fmha_forward_params is laid out as {_SIZES} bytes, "
                      "fmha.h says (368, 424, 544): this file and the header disagree")


class fmha_merge_params(_Struct):
    """fmha_merge_params; a fresh one holds fmha_merge_params_init()'s
    defaults. The parts are set with set_parts (the raw pointer members
    are kept by the proxy)."""

    _fields_ = [("struct_size", _c_uint32), ("num_parts", _c_int32),
                ("o_parts", ctypes.POINTER(fmha_tensor)), ("lse_parts", ctypes.POINTER(_c_void_p)),
                ("o", fmha_tensor), ("lse", _c_void_p)]
    _pointers = ("lse",)

    def __init__(self):
        super().__init__()
        _lib.fmha_merge_params_init(ctypes.byref(self))

    def set_parts(self, tensors, lses) -> None:
        tensors, lses = list(tensors), list(lses)
        if len(tensors) != len(lses):
            raise ValueError("set_parts: tensors and lses differ in length")
        parts = (fmha_tensor * max(1, len(tensors)))(*tensors)
        lse = (_c_void_p * max(1, len(lses)))(*lses)
        self.o_parts = ctypes.cast(parts, ctypes.POINTER(fmha_tensor))
        self.lse_parts = ctypes.cast(lse, ctypes.POINTER(_c_void_p))
        self.num_parts = len(tensors)
        self._parts_keepalive = (parts, lse)


FMHA_MERGE_PARAMS_SIZE_V1 = ctypes.sizeof(fmha_merge_params)


# ---- the library -----------------------------------------------------------------
def _load():
    explicit = os.environ.get("FMHA_LIBRARY")
    if explicit:
        candidates = [explicit]
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        candidates = sorted(glob.glob(os.path.join(here, "libfmha.so*")) +
                            glob.glob(os.path.join(here, "libfmha*.dylib")) +
                            glob.glob(os.path.join(here, "fmha.dll")))
        candidates.append(ctypes.util.find_library("fmha") or "libfmha.so.0")
    errors = []
    for path in candidates:
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
    if explicit:
        hint = f"FMHA_LIBRARY={explicit} could not be loaded ({errors[-1]})"
    else:
        hint = (f"libfmha was not found ({errors[-1]}); set FMHA_LIBRARY to the library file, "
                "e.g. FMHA_LIBRARY=build/src/libfmha.so.0 after a CMake build")
    raise ImportError("fmha: the SWIG extension fmha.capi is not importable and the ctypes "
                      f"fallback cannot load libfmha: {hint}")


_lib = _load()
_H = _c_void_p
_P = ctypes.POINTER(fmha_forward_params)
for _name, _res, _args in [
        ("fmha_status_string", _c_char_p, [ctypes.c_int]),
        ("fmha_last_error_message", _c_char_p, []),
        ("fmha_forward_params_init_sized", None, [_P, _c_size_t]),
        ("fmha_create", ctypes.c_int, [ctypes.POINTER(_H), ctypes.c_int, ctypes.c_int]),
        ("fmha_destroy", None, [_H]),
        ("fmha_set_stream", ctypes.c_int, [_H, _c_void_p]),
        ("fmha_set_num_threads", ctypes.c_int, [_H, ctypes.c_int]),
        ("fmha_forward_workspace_size", ctypes.c_int, [_H, _P, ctypes.POINTER(_c_size_t)]),
        ("fmha_forward", ctypes.c_int, [_H, _P, _c_void_p, _c_size_t]),
        ("fmha_kernel_count", ctypes.c_int, []),
        ("fmha_kernel_name", _c_char_p, [ctypes.c_int]),
        ("fmha_forward_explain", ctypes.c_int, [_H, _P, _c_char_p, _c_size_t]),
        ("fmha_version", _c_uint32, [])]:
    _fn = getattr(_lib, _name)
    _fn.restype, _fn.argtypes = _res, _args

_M = ctypes.POINTER(fmha_merge_params)
if hasattr(_lib, "fmha_merge"):  # 0.2's merge (absent from builds that predate it)
    _lib.fmha_merge_params_init.restype, _lib.fmha_merge_params_init.argtypes = None, [_M]
    _lib.fmha_merge.restype, _lib.fmha_merge.argtypes = ctypes.c_int, [_H, _M]

    def fmha_merge(handle, params: fmha_merge_params) -> int:
        return _lib.fmha_merge(handle, ctypes.byref(params))

_loaded = _lib.fmha_version()
if _loaded // 10000 != FMHA_VERSION_MAJOR or _loaded < FMHA_VERSION_NUMBER:
    raise ImportError(f"fmha: the loaded libfmha is version {_loaded // 10000}.{_loaded // 100 % 100}"
                      f".{_loaded % 100}; this package needs {FMHA_VERSION_MAJOR}."
                      f"{FMHA_VERSION_MINOR} or a later {FMHA_VERSION_MAJOR}.x")


# ---- functions -----------------------------------------------------------------
def _text(raw) -> str:
    return raw.decode(errors="replace") if raw is not None else ""


def fmha_status_string(status: int) -> str:
    return _text(_lib.fmha_status_string(int(status)))


def fmha_last_error_message() -> str:
    return _text(_lib.fmha_last_error_message())


def fmha_create(kind: int, ordinal: int):
    handle = _H()
    status = _lib.fmha_create(ctypes.byref(handle), int(kind), int(ordinal))
    return [status, handle.value]


def fmha_destroy(handle) -> None:
    _lib.fmha_destroy(handle)


def fmha_set_stream(handle, cuda_stream) -> int:
    return _lib.fmha_set_stream(handle, cuda_stream or None)


def fmha_set_num_threads(handle, num_threads: int) -> int:
    return _lib.fmha_set_num_threads(handle, int(num_threads))


def fmha_forward_workspace_size(handle, params: fmha_forward_params):
    nbytes = _c_size_t(0)
    status = _lib.fmha_forward_workspace_size(handle, ctypes.byref(params), ctypes.byref(nbytes))
    return [status, nbytes.value]


def fmha_forward(handle, params: fmha_forward_params, workspace, workspace_bytes: int) -> int:
    return _lib.fmha_forward(handle, ctypes.byref(params), workspace or None, int(workspace_bytes))


def fmha_forward_explain(handle, params: fmha_forward_params, maxlen: int):
    buf = ctypes.create_string_buffer(int(maxlen))
    status = _lib.fmha_forward_explain(handle, ctypes.byref(params), buf, int(maxlen))
    return [status, _text(buf.value)]


def fmha_kernel_count() -> int:
    return _lib.fmha_kernel_count()


def fmha_kernel_name(index: int):
    raw = _lib.fmha_kernel_name(int(index))
    return None if raw is None else raw.decode()


def fmha_version() -> int:
    return _lib.fmha_version()
