"""Reading arrays from the protocols fmha accepts, without copying them.

An array is described by where its first element is, its shape, its strides
in elements, its dtype and its device. Four sources are understood, tried in
this order:

1. numpy.ndarray (CPU), through ``__array_interface__``;
2. DLPack (``__dlpack__`` / ``__dlpack_device__``): torch, cupy, jax, ...;
   the only route for torch.bfloat16 (torch's float8 tensors are read from
   their attributes: not every torch exports them through DLPack);
3. ``__cuda_array_interface__`` (numba, cupy, torch, ...);
4. any other object with ``__array_interface__`` (CPU).

DLPack capsules are read in place and never consumed: the capsule stays
referenced by the returned ``Array`` (so the producer keeps the memory) and
its own destructor releases the export when it is dropped.
"""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from . import capi

CPU = "cpu"
CUDA = "cuda"

# fmha_dtype by (kind, bytes); bfloat16 is matched by name.
_NUMPY_FLOAT = {2: capi.FMHA_DTYPE_F16, 4: capi.FMHA_DTYPE_F32}
DTYPE_NAMES = {
    capi.FMHA_DTYPE_F16: "float16",
    capi.FMHA_DTYPE_BF16: "bfloat16",
    capi.FMHA_DTYPE_F32: "float32",
    capi.FMHA_DTYPE_F8E4M3: "float8_e4m3fn",
    capi.FMHA_DTYPE_F8E5M2: "float8_e5m2",
}
# The dtypes whose numpy type comes from ml_dtypes (matched by name, so
# ml_dtypes is never imported to read an array): OCP FP8 E4M3 is
# ml_dtypes' and torch's float8_e4m3fn (no inf), E5M2 their float8_e5m2.
# ml_dtypes' other 8-bit floats (float8_e4m3, *_fnuz, ...) are other
# encodings and are refused.
_BY_NAME = {"bfloat16": capi.FMHA_DTYPE_BF16, "float8_e4m3fn": capi.FMHA_DTYPE_F8E4M3,
            "float8_e5m2": capi.FMHA_DTYPE_F8E5M2}
FP8 = (capi.FMHA_DTYPE_F8E4M3, capi.FMHA_DTYPE_F8E5M2)


class ArrayError(ValueError):
    """An object fmha cannot read as an array; fmha turns it into fmha.Error."""


class ArrayDTypeError(ArrayError, TypeError):
    """An array whose dtype or byte order fmha cannot read."""


@dataclass
class Array:
    obj: Any                  # what the caller passed
    ptr: int                  # address of element [0, 0, ...]
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  # in elements
    itemsize: int
    dtype: Optional[int]      # fmha_dtype, None when not one fmha takes
    dtype_name: str
    device: str               # CPU or CUDA
    ordinal: Optional[int]    # CUDA device ordinal; 0 for CPU, None when unknown
    readonly: bool
    library: Optional[str]    # "numpy", "torch", "cupy": who can allocate alike
    stream: Optional[int] = None  # __cuda_array_interface__ v3 "stream"
    keepalive: Any = None     # a DLPack capsule to hold until the call returns

    def is_contiguous(self) -> bool:
        expect = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and s != expect:
                return False
            expect *= n
        return True

    @property
    def nbytes(self) -> int:
        n = self.itemsize
        for d in self.shape:
            n *= d
        return n


def library_of(obj: Any) -> Optional[str]:
    module = type(obj).__module__ or ""
    root = module.split(".", 1)[0]
    return root if root in ("numpy", "torch", "cupy") else None


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _byte_strides_to_elements(byte_strides, itemsize, what):
    out = []
    for s in byte_strides:
        if s % itemsize != 0:
            raise ArrayError(f"{what}: byte stride {s} is not a multiple of the item size {itemsize}")
        out.append(s // itemsize)
    return tuple(out)


_FOREIGN_ORDER = ">" if sys.byteorder == "little" else "<"
_FOREIGN_NAME = "big-endian" if sys.byteorder == "little" else "little-endian"


def _foreign_order(what, typestr):
    return ArrayDTypeError(f"{what}: {_FOREIGN_NAME} arrays are not supported (dtype {typestr!r}); "
                           f"convert with .astype({('=' + typestr[1:])!r})")


def _typestr_dtype(typestr: str, what: str):
    """fmha_dtype and a name for an array-interface typestr ('<f2', ...)."""
    if typestr[:1] == _FOREIGN_ORDER and typestr[2:] != "1":
        raise _foreign_order(what, typestr)
    if len(typestr) >= 3 and typestr[0] in "<>|=" and typestr[1] == "f":
        size = int(typestr[2:])
        if size in _NUMPY_FLOAT:
            return _NUMPY_FLOAT[size], "float16" if size == 2 else "float32"
    if typestr[1:] == "i4":  # the int32 metadata of the serving layouts
        return None, "int32"
    return None, typestr


def _numpy_dtype(dt, what):
    if not dt.isnative:
        raise _foreign_order(what, dt.str)
    if dt.name in _BY_NAME and dt.itemsize == (2 if dt.name == "bfloat16" else 1):  # ml_dtypes'
        return _BY_NAME[dt.name], dt.name
    if dt.kind == "f" and dt.itemsize in _NUMPY_FLOAT:
        return _NUMPY_FLOAT[dt.itemsize], dt.name
    return None, dt.name


def numpy_dtype(dtype: Optional[int]):
    """The numpy dtype of an fmha_dtype; bfloat16 and the FP8 types are
    ml_dtypes' (None when ml_dtypes is not installed)."""
    import numpy as np
    if dtype in (capi.FMHA_DTYPE_F16, capi.FMHA_DTYPE_F32):
        return np.dtype({capi.FMHA_DTYPE_F16: np.float16, capi.FMHA_DTYPE_F32: np.float32}[dtype])
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(getattr(ml_dtypes, DTYPE_NAMES[dtype]))


def _check_no_grad(obj, what):
    """A tensor that requires grad is refused: fmha has no backward, so its
    result would silently drop out of the autograd graph. Read from the
    attribute (torch is not imported for it); under torch.no_grad() no graph
    is recorded, and the tensor is read as its detached view."""
    if getattr(obj, "requires_grad", False) is not True:
        return obj
    torch = sys.modules.get("torch")
    if torch is not None and not torch.is_grad_enabled() and hasattr(obj, "detach"):
        return obj.detach()  # shares memory
    raise ArrayError(f"{what} requires grad, but fmha has no backward (forward only): pass "
                     f"{what}.detach(), or call under torch.no_grad() / torch.inference_mode()")


# ---- DLPack ------------------------------------------------------------------
# The C structs of the DLPack specification (dlpack.h, ABI-stable).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_INT, _DL_FLOAT, _DL_BFLOAT = 0, 2, 4
# DLPack 1.1's 8-bit float codes (kDLFloat8_e4m3fn, kDLFloat8_e5m2).
_DL_FLOAT8 = {10: capi.FMHA_DTYPE_F8E4M3, 12: capi.FMHA_DTYPE_F8E5M2}
_DL_FLAG_READ_ONLY = 1

_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def dlpack_device(obj) -> Tuple[str, int]:
    dev_type, dev_id = obj.__dlpack_device__()
    dev_type = int(dev_type)
    if dev_type in (_DL_CPU, _DL_CUDA_HOST):
        return CPU, 0
    if dev_type in (_DL_CUDA, _DL_CUDA_MANAGED):
        return CUDA, int(dev_id)
    raise ArrayError(f"DLPack device type {dev_type} is neither CPU nor CUDA")


def _from_dlpack(obj, what, stream):
    device, ordinal = dlpack_device(obj)
    # The consumer's stream: the producer orders its pending work before it.
    # DLPack spells the legacy default stream 1 (0 is not allowed).
    kwargs = {"stream": (stream or 1) if device == CUDA else None}
    try:
        capsule = obj.__dlpack__(max_version=(1, 0), **kwargs)
    except TypeError:  # a producer older than DLPack 1.0
        capsule = obj.__dlpack__(**kwargs)
    readonly = False
    if _capsule_is_valid(capsule, b"dltensor_versioned"):
        managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, b"dltensor_versioned"))
        readonly = bool(managed.flags & _DL_FLAG_READ_ONLY)
    elif _capsule_is_valid(capsule, b"dltensor"):
        managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    else:
        raise ArrayError(f"{what}: __dlpack__() did not return an unconsumed DLPack capsule")
    t = managed.dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
    else:
        strides = _contiguous_strides(shape)
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    dtype, name = None, f"DLPack(code={code}, bits={bits}, lanes={lanes})"
    if lanes == 1 and code == _DL_FLOAT and bits in (16, 32):
        dtype, name = _NUMPY_FLOAT[bits // 8], "float16" if bits == 16 else "float32"
    elif lanes == 1 and code == _DL_BFLOAT and bits == 16:
        dtype, name = capi.FMHA_DTYPE_BF16, "bfloat16"
    elif lanes == 1 and code in _DL_FLOAT8 and bits == 8:
        dtype = _DL_FLOAT8[code]
        name = DTYPE_NAMES[dtype]
    elif lanes == 1 and code == _DL_INT and bits == 32:
        name = "int32"  # the serving layouts' metadata (dtype stays None: not a tensor dtype)
    return Array(obj=obj, ptr=(t.data or 0) + t.byte_offset, shape=shape, strides=strides,
                 itemsize=max(1, bits * lanes // 8), dtype=dtype, dtype_name=name,
                 device=device, ordinal=ordinal, readonly=readonly,
                 library=library_of(obj), keepalive=capsule)


# ---- torch's FP8 tensors -------------------------------------------------------
# torch exports float8 through DLPack only in recent releases (and no array
# interface carries it): its FP8 tensors are read from their own attributes.
_TORCH_FP8 = {"torch.float8_e4m3fn": capi.FMHA_DTYPE_F8E4M3, "torch.float8_e5m2": capi.FMHA_DTYPE_F8E5M2}


def _from_torch_fp8(t, what):
    dtype = _TORCH_FP8[str(t.dtype)]
    if t.device.type == "cpu":
        device, ordinal = CPU, 0
    elif t.device.type == "cuda":
        device, ordinal = CUDA, t.device.index if t.device.index is not None else 0
    else:
        raise ArrayError(f"{what}: a torch tensor on {t.device} is neither on the CPU nor on CUDA")
    return Array(obj=t, ptr=int(t.data_ptr()), shape=tuple(t.shape), strides=tuple(t.stride()),
                 itemsize=1, dtype=dtype, dtype_name=DTYPE_NAMES[dtype], device=device,
                 ordinal=ordinal, readonly=False, library="torch")


# ---- array interfaces --------------------------------------------------------
def _from_interface(obj, iface, what, device, ordinal, library):
    if iface.get("mask") is not None:
        raise ArrayError(f"{what}: masked arrays are not supported")
    shape = tuple(int(n) for n in iface["shape"])
    dtype, name = _typestr_dtype(iface["typestr"], what)
    itemsize = int(iface["typestr"][2:] or 1)
    ptr, readonly = iface["data"]
    if iface.get("strides") is None:
        strides = _contiguous_strides(shape)
    else:
        strides = _byte_strides_to_elements(iface["strides"], itemsize, what)
    return Array(obj=obj, ptr=int(ptr or 0), shape=shape, strides=strides, itemsize=itemsize,
                 dtype=dtype, dtype_name=name, device=device, ordinal=ordinal,
                 readonly=bool(readonly), library=library, stream=iface.get("stream"))


def _cuda_ordinal(obj) -> Optional[int]:
    """The GPU of a __cuda_array_interface__ object where its type says
    (the interface itself does not); None when unknown."""
    dev = getattr(obj, "device", None)
    for attr in ("index", "id"):  # torch.device.index, cupy.cuda.Device.id
        value = getattr(dev, attr, None)
        if isinstance(value, int):
            return value
    return None


def _is_ndarray(obj) -> bool:
    return type(obj).__module__ == "numpy" and type(obj).__name__ in ("ndarray", "memmap")


def device_of(obj, what) -> Tuple[str, Optional[int]]:
    """(CPU or CUDA, ordinal or None when unknown) of obj, without exporting it."""
    if _is_ndarray(obj):
        return CPU, 0
    if hasattr(obj, "__dlpack_device__"):
        return dlpack_device(obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return CUDA, _cuda_ordinal(obj)
    if hasattr(obj, "__array_interface__"):
        return CPU, 0
    raise ArrayError(f"{what}: {type(obj).__name__} exposes no array protocol "
                     "(numpy array, DLPack or __cuda_array_interface__)")


def describe(obj, what: str, stream: Optional[int] = None) -> Array:
    """Reads obj's memory layout (see the module docstring)."""
    if _is_ndarray(obj):
        dtype, name = _numpy_dtype(obj.dtype, what)
        iface = obj.__array_interface__
        ptr, readonly = iface["data"]
        return Array(obj=obj, ptr=int(ptr or 0), shape=tuple(obj.shape),
                     strides=_byte_strides_to_elements(obj.strides, obj.itemsize, what),
                     itemsize=obj.itemsize, dtype=dtype, dtype_name=name, device=CPU, ordinal=0,
                     readonly=bool(readonly), library="numpy")
    obj = _check_no_grad(obj, what)
    if library_of(obj) == "torch" and str(getattr(obj, "dtype", "")) in _TORCH_FP8:
        return _from_torch_fp8(obj, what)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(obj, what, stream)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_interface(obj, obj.__cuda_array_interface__, what, CUDA, _cuda_ordinal(obj),
                               library_of(obj))
    if hasattr(obj, "__array_interface__"):
        return _from_interface(obj, obj.__array_interface__, what, CPU, 0, library_of(obj))
    device_of(obj, what)  # raises the "no array protocol" error
    raise AssertionError("unreachable")
