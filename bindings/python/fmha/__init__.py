"""fmha: exact scaled-dot-product attention forward.

    O = softmax(Q K^T * scale + mask) V

The Pythonic layer over fmha's C API (the raw API is ``fmha.capi``)::

    import numpy as np, fmha
    q = np.random.randn(1, 32, 256, 128).astype(np.float32)   # [B, Hq, N, D]
    k = np.random.randn(1, 8, 256, 128).astype(np.float32)    # [B, Hk, N, D]
    v = np.random.randn(1, 8, 256, 128).astype(np.float32)
    o, lse = fmha.forward(q, k, v, causal=True, return_lse=True)

Tensors are [batch, heads, seq, head_dim] like torch's
scaled_dot_product_attention, with any strides (transposed BNHD views and
slices of a packed QKV buffer work, nothing is copied). numpy arrays run on
the CPU backend; objects exposing DLPack or ``__cuda_array_interface__``
(torch, cupy, ...) run where they live, CUDA tensors on the CUDA backend.
float16, bfloat16 (torch.bfloat16, or ml_dtypes.bfloat16 for numpy) and
float32 are accepted, and for inference (fmha 0.3) FP8 keys and values
(torch.float8_e4m3fn / float8_e5m2, or ml_dtypes' types of those names for
numpy) with a float16/bfloat16 or FP8 q, per-head descale factors, an
additive bias (a float attention mask), ALiBi slopes and an output dtype of
its own (``out_dtype=``)::

    o = fmha.forward(q_bf16, k_fp8, v_fp8, k_descale=ks, v_descale=vs,
                     bias=mask, alibi_slopes=slopes, out_dtype="float32")

Every failure raises :class:`fmha.Error`, whose ``status`` is a
:class:`fmha.Status` and whose message is the library's, in the Python
argument names (``out``, ``out_lse``, ``window[0]``). Invalid arguments raise
:class:`fmha.InvalidArgumentError`, which is also a ``ValueError``; a dtype
fmha cannot take raises :class:`fmha.DTypeError`, also a ``TypeError``.
"""
from __future__ import annotations

import enum
import math
import re
import threading
from typing import Any, Dict, List, Optional, Tuple, Union

try:
    from . import capi
except ImportError:
    # No SWIG extension here (a machine without SWIG): the same API over
    # ctypes (_capi_ctypes.py, FMHA_LIBRARY). An extension that is there but
    # fails to load is an error, not a reason to fall back.
    import importlib.machinery
    import os
    if any(os.path.exists(os.path.join(os.path.dirname(__file__), "_capi" + suffix))
           for suffix in importlib.machinery.EXTENSION_SUFFIXES):
        raise
    from . import _capi_ctypes as capi
from ._arrays import (CPU, CUDA, DTYPE_NAMES, FP8, Array, ArrayError, describe, device_of, library_of,
                      numpy_dtype)

__all__ = [
    "Error", "InvalidArgumentError", "DTypeError", "Status", "Handle", "forward", "merge", "explain",
    "workspace_size", "kernels", "version", "__version__",
]


# ---- errors --------------------------------------------------------------------
class Status(enum.IntEnum):
    """fmha_status: the C library's status codes (values are pinned)."""

    SUCCESS = capi.FMHA_SUCCESS
    ERROR_INVALID_ARGUMENT = capi.FMHA_ERROR_INVALID_ARGUMENT
    ERROR_UNSUPPORTED = capi.FMHA_ERROR_UNSUPPORTED
    ERROR_WORKSPACE_TOO_SMALL = capi.FMHA_ERROR_WORKSPACE_TOO_SMALL
    ERROR_OUT_OF_MEMORY = capi.FMHA_ERROR_OUT_OF_MEMORY
    ERROR_DEVICE = capi.FMHA_ERROR_DEVICE
    ERROR_NOT_AVAILABLE = capi.FMHA_ERROR_NOT_AVAILABLE
    ERROR_INTERNAL = capi.FMHA_ERROR_INTERNAL


class Error(RuntimeError):
    """A failed fmha call.

    Attributes:
        status: the :class:`Status` (an int when the library returned a value
            this module does not know).
        message: the library's detail naming the field and value at fault
            (fmha_last_error_message()), or the Python layer's own for
            arguments it rejects before calling the library.
    """

    def __init__(self, status: int, message: str):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status: Union[Status, int] = status
        self.message: str = message
        text = capi.fmha_status_string(int(status))
        super().__init__(f"{text}: {message}" if message else text)


class InvalidArgumentError(Error, ValueError):
    """An fmha.Error with status ERROR_INVALID_ARGUMENT: a shape, stride,
    option or array fmha rejects. Also a ValueError."""


class DTypeError(InvalidArgumentError, TypeError):
    """An invalid argument whose dtype (or byte order) is at fault: one fmha
    does not take, or a combination it does not (e.g. FP8 q with float16 k).
    Also a TypeError."""


# The library's names for the fields the Python layer calls otherwise.
_PYTHON_NAMES = [
    (re.compile(r"(?<![\w.])o(?=[.=: ]|$)"), "out"),
    (re.compile(r"(?<![\w.])lse(?=[.=: ]|$)"), "out_lse"),
    (re.compile(r"\bwindow_left\b"), "window[0]"),
    (re.compile(r"\bwindow_right\b"), "window[1]"),
    (re.compile(r"\balibi_slopes_stride\b"), "alibi_slopes.strides[0]"),
]


def _python_names(message: str) -> str:
    for pattern, name in _PYTHON_NAMES:
        message = pattern.sub(name, message)
    return message


def _error(status: int, message: str, dtype: bool = False) -> Error:
    """The Error for a status: InvalidArgumentError (DTypeError when dtype)
    for ERROR_INVALID_ARGUMENT, a plain Error otherwise."""
    if status == Status.ERROR_INVALID_ARGUMENT:
        return (DTypeError if dtype else InvalidArgumentError)(status, message)
    return Error(status, message)


def _check(status: int) -> None:
    if status != capi.FMHA_SUCCESS:
        message = capi.fmha_last_error_message()
        raise _error(status, _python_names(message), dtype=".dtype=" in message)


def _invalid(message: str, dtype: bool = False) -> Error:
    return _error(Status.ERROR_INVALID_ARGUMENT, message, dtype)


# ---- version and introspection -------------------------------------------------
def version() -> Tuple[int, int, int]:
    """(major, minor, patch) of the libfmha actually loaded."""
    v = capi.fmha_version()
    return v // 10000, v // 100 % 100, v % 100


__version__: str = "%d.%d.%d" % version()


def kernels() -> List[str]:
    """Names of the kernels registered in this build (CPU and, when built, CUDA)."""
    return [capi.fmha_kernel_name(i) for i in range(capi.fmha_kernel_count())]


# ---- handles -------------------------------------------------------------------
class Handle:
    """An fmha handle for one device (fmha_create / fmha_destroy).

    ``forward()`` keeps one handle per (device, thread) by itself; create one
    explicitly to choose the CPU thread count, or to pass ``handle=``. A
    handle may be used by one thread at a time.

    Args:
        device: "cpu" or "cuda".
        ordinal: the CUDA device ordinal (0 for the CPU).
        num_threads: CPU worker threads; None or 0 = one per hardware thread.
    """

    def __init__(self, device: str = CPU, ordinal: int = 0, *, num_threads: Optional[int] = None):
        kinds = {CPU: capi.FMHA_DEVICE_CPU, CUDA: capi.FMHA_DEVICE_CUDA}
        if device not in kinds:
            raise _invalid(f"device={device!r} must be 'cpu' or 'cuda'")
        self.device: str = device
        self.ordinal: int = int(ordinal)
        self._raw = None
        status, raw = capi.fmha_create(kinds[device], self.ordinal)
        _check(status)
        self._raw = raw
        self._stream: Optional[int] = None
        if num_threads:
            self.set_num_threads(num_threads)

    def set_num_threads(self, num_threads: int) -> None:
        """CPU worker threads for later forwards; 0 = one per hardware thread."""
        _check(capi.fmha_set_num_threads(self._handle(), int(num_threads)))

    def set_stream(self, stream: Optional[int]) -> None:
        """The cudaStream_t (as an int; None/0 = legacy default) later forwards use."""
        stream = int(stream or 0)
        if stream != self._stream:
            _check(capi.fmha_set_stream(self._handle(), stream or None))
            self._stream = stream

    def close(self) -> None:
        """Releases the handle now (also done when it is garbage collected)."""
        raw, self._raw = self._raw, None
        if raw is not None:
            capi.fmha_destroy(raw)

    def _handle(self):
        if self._raw is None:
            raise _invalid("the handle is closed")
        return self._raw

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        # capi may already be torn down at interpreter exit.
        if getattr(self, "_raw", None) is not None and capi is not None:
            self.close()

    def __repr__(self) -> str:
        where = self.device if self.device == CPU else f"{self.device}:{self.ordinal}"
        return f"<fmha.Handle {where}{'' if self._raw is not None else ' closed'}>"


_local = threading.local()


def _cached_handle(device: str, ordinal: int) -> Handle:
    cache: Dict[Tuple[str, int], Handle] = getattr(_local, "handles", None)
    if cache is None:
        cache = _local.handles = {}
    h = cache.get((device, ordinal))
    if h is None:
        h = cache[(device, ordinal)] = Handle(device, ordinal)
    return h


# ---- allocation through the producer's library ---------------------------------
def _stream_int(stream: Any) -> int:
    """A cudaStream_t from an int or a torch/cupy stream object."""
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    return int(stream)


def _default_stream(q: Any, library: Optional[str], ordinal: int) -> Optional[int]:
    """The stream a CUDA forward is ordered on when the caller names none:
    the producer library's current stream, else its __cuda_array_interface__
    stream, else None (the legacy default stream)."""
    if library == "torch":
        import torch
        return int(torch.cuda.current_stream(ordinal).cuda_stream)
    if library == "cupy":
        import cupy
        with cupy.cuda.Device(ordinal):
            return int(cupy.cuda.get_current_stream().ptr)
    iface = getattr(q, "__cuda_array_interface__", None) if not hasattr(q, "__dlpack__") else None
    if isinstance(iface, dict) and iface.get("stream"):
        return int(iface["stream"])
    return None


class _Allocator:
    """Allocates like the tensor `like` (numpy, torch or cupy), on its device."""

    def __init__(self, like: Array, stream: Optional[int], ordinal: int):
        self.like = like
        self.stream = stream
        self.ordinal = ordinal

    def empty(self, shape, what: str, float32: bool = False, dtype: Optional[int] = None):
        """An array of shape like `like`: float32 when asked, else of the
        fmha_dtype `dtype` (None = like's dtype)."""
        lib = self.like.library
        obj = self.like.obj
        dtype = capi.FMHA_DTYPE_F32 if float32 else dtype if dtype is not None else self.like.dtype
        name = DTYPE_NAMES[dtype]
        if lib == "torch":
            import torch
            t = torch.empty(shape, dtype=getattr(torch, name), device=obj.device)
            self._record_torch_stream(t)
            return t
        if lib == "cupy":
            import cupy
            if dtype not in (capi.FMHA_DTYPE_F16, capi.FMHA_DTYPE_F32):
                raise _invalid(f"cupy has no {name}: pass {what}= yourself", dtype=True)
            with cupy.cuda.Device(self.ordinal):
                return cupy.empty(shape, dtype=name)
        if self.like.device == CPU:
            # numpy arrays, and other producers' CPU memory (jax, a
            # DLPack-only type, ...): numpy allocates (a DLPack producer).
            import numpy as np
            np_dtype = numpy_dtype(dtype)
            if np_dtype is not None:
                return np.empty(shape, dtype=np_dtype)
            raise _invalid(f"cannot allocate a {name} {what} with numpy without ml_dtypes "
                           f"(pip install ml_dtypes); pass {what}= yourself", dtype=True)
        raise _invalid(f"cannot allocate {what} like a {type(obj).__module__}.{type(obj).__name__} "
                       f"on CUDA (fmha allocates CUDA memory with torch or cupy); "
                       f"pass {what}= yourself")

    def workspace(self, nbytes: int) -> Tuple[Any, int]:
        """A buffer of nbytes, 16-byte aligned: (owner, address)."""
        lib = self.like.library
        if self.like.device == CPU:
            import numpy as np
            buf = np.empty(nbytes + 16, dtype=np.uint8)
            addr = buf.__array_interface__["data"][0]
            return buf, addr + (-addr) % 16
        if lib == "torch":
            import torch
            t = torch.empty(nbytes, dtype=torch.uint8, device=self.like.obj.device)
            self._record_torch_stream(t)
            return t, t.data_ptr()
        if lib == "cupy":
            import cupy
            with cupy.cuda.Device(self.ordinal):
                buf = cupy.empty(nbytes, dtype=cupy.uint8)
            return buf, buf.data.ptr
        raise _invalid(f"a workspace of {nbytes} bytes is needed and fmha cannot allocate CUDA "
                       f"memory for {type(self.like.obj).__name__}; pass workspace=")

    def _record_torch_stream(self, t) -> None:
        # The caching allocator must not hand the block to another stream
        # while our kernel may still use it on self.stream.
        if t.is_cuda and self.stream:
            import torch
            if self.stream != torch.cuda.current_stream(t.device).cuda_stream:
                t.record_stream(torch.cuda.ExternalStream(self.stream, device=t.device))


# ---- the call ------------------------------------------------------------------
def _tensor(a: Array, what: str):
    if len(a.shape) != 4:
        raise _invalid(f"{what} has shape {a.shape}; expected 4 dims [batch, heads, seq, head_dim]")
    if a.dtype is None:
        raise _invalid(f"{what}.dtype={a.dtype_name} is not float16, bfloat16, float32, "
                       "float8_e4m3fn or float8_e5m2", dtype=True)
    t = capi.fmha_tensor()
    t.data = a.ptr or None
    t.dtype = a.dtype
    t.dims = a.shape
    t.strides = a.strides
    return t


class _Call:
    """One prepared forward: arrays read, outputs allocated, params filled."""

    def __init__(self, q, k, v, *, causal, causal_alignment, window, scale, softcap,
                 return_lse, out, out_lse, kernel, num_splits, stream, handle, serving=None,
                 numerics=None):
        try:
            device, ordinal = device_of(q, "q")
            if handle is not None:
                ordinal = handle.ordinal if handle.device == CUDA else 0
            ordinal = ordinal or 0
            if device == CUDA:
                lib = library_of(q)
                self.stream = (_stream_int(stream) if stream is not None
                               else _default_stream(q, lib, ordinal))
            else:
                if stream is not None:
                    raise _invalid("stream= is only for CUDA tensors")
                self.stream = None
            arrays = {"q": describe(q, "q", self.stream), "k": describe(k, "k", self.stream),
                      "v": describe(v, "v", self.stream)}
            if out is not None:
                arrays["out"] = describe(out, "out", self.stream)
            if out_lse is not None:
                arrays["out_lse"] = describe(out_lse, "out_lse", self.stream)
            serving = {name: a for name, a in (serving or {}).items() if a is not None}
            numerics = {name: a for name, a in (numerics or {}).items() if a is not None}
            for name in _SERVING_ARRAYS:
                if name in serving:
                    arrays[name] = describe(serving[name], name, self.stream)
            for name in _NUMERICS_ARRAYS:
                if name in numerics:
                    arrays[name] = describe(numerics[name], name, self.stream)
        except ArrayError as e:
            raise _invalid(str(e), dtype=isinstance(e, TypeError)) from None

        def where(d, o):
            return d if d == CPU else f"{d}:{o}"
        for name, a in arrays.items():
            if a.device != device or (device == CUDA and a.ordinal not in (None, ordinal)):
                raise _invalid(f"{name} is on {where(a.device, a.ordinal)} but the call runs on "
                               f"{where(device, ordinal)}")
        if handle is not None and handle.device != device:
            raise _invalid(f"handle is for {handle.device} but the tensors are on {device}")
        self.device, self.ordinal = device, ordinal
        self.handle = handle if handle is not None else _cached_handle(device, ordinal)
        self.arrays = arrays  # keeps DLPack capsules alive until the call returns
        qa = arrays["q"]
        alloc = _Allocator(qa, self.stream, ordinal)
        self.alloc = alloc

        p = capi.fmha_forward_params()
        if causal:
            if causal_alignment == "bottom_right":
                p.mask_flags = capi.FMHA_MASK_CAUSAL
            elif causal_alignment == "top_left":
                p.mask_flags = capi.FMHA_MASK_CAUSAL_TOP_LEFT
            else:
                raise _invalid(f"causal_alignment={causal_alignment!r} must be 'bottom_right' "
                               "or 'top_left'")
        try:
            left, right = window
        except (TypeError, ValueError):
            raise _invalid(f"window={window!r} must be a pair (left, right); -1 = unbounded") from None
        p.window_left, p.window_right = _int32(left, "window[0]"), _int32(right, "window[1]")
        if scale is not None and (not math.isfinite(scale) or scale <= 0):
            raise _invalid(f"scale={scale!r} must be finite and > 0 (None = 1/sqrt(head_dim))")
        p.scale = 0.0 if scale is None else float(scale)
        p.softcap = float(softcap)
        p.num_splits = _int32(num_splits, "num_splits")
        if kernel is not None:
            p.kernel = str(kernel)
        p.q = _tensor(qa, "q")
        p.k = _tensor(arrays["k"], "k")
        p.v = _tensor(arrays["v"], "v")
        _set_serving(p, arrays, serving)
        _set_numerics(p, arrays)

        # Outputs: the caller's, else allocated like q (of out_dtype).
        o_dtype = _out_dtype(numerics.get("out_dtype"), qa)
        if out is None:
            self.out = alloc.empty(qa.shape, "out", dtype=o_dtype)
            arrays["out"] = describe(self.out, "out", self.stream)
        else:
            self.out = out
            if arrays["out"].readonly:
                raise _invalid("out is read-only")
            if "out_dtype" in numerics and arrays["out"].dtype != o_dtype:
                raise _invalid(f"out.dtype={arrays['out'].dtype_name} differs from "
                               f"out_dtype={DTYPE_NAMES[o_dtype]}", dtype=True)
        p.o = _tensor(arrays["out"], "out")
        self.lse = None
        if return_lse or out_lse is not None:
            rows = tuple(qa.shape[:3])
            if out_lse is None:
                self.lse = alloc.empty(rows, "out_lse", float32=True)
                arrays["out_lse"] = describe(self.lse, "out_lse", self.stream)
            else:
                self.lse = out_lse
                la = arrays["out_lse"]
                if la.dtype != capi.FMHA_DTYPE_F32 or la.shape != rows or not la.is_contiguous():
                    raise _invalid(f"out_lse must be a contiguous float32 array of shape {rows} "
                                   f"(got {la.dtype_name} {la.shape})",
                                   dtype=la.dtype != capi.FMHA_DTYPE_F32)
                if la.readonly:
                    raise _invalid("out_lse is read-only")
            p.lse = arrays["out_lse"].ptr
        self.params = p
        self.return_lse = return_lse or out_lse is not None

    def workspace_size(self) -> int:
        h = self.handle
        if self.device == CUDA:
            h.set_stream(self.stream)
        status, need = capi.fmha_forward_workspace_size(h._handle(), self.params)
        _check(status)
        return need

    def run(self, workspace) -> Any:
        h = self.handle
        need = self.workspace_size()
        ws_keep, ws_ptr, ws_bytes = None, None, 0
        if workspace is not None:
            try:
                wa = describe(workspace, "workspace", self.stream)
            except ArrayError as e:
                raise _invalid(str(e), dtype=isinstance(e, TypeError)) from None
            if not wa.is_contiguous():
                raise _invalid("workspace must be contiguous")
            ws_keep, ws_ptr, ws_bytes = wa, wa.ptr, wa.nbytes
        elif need > 0:
            ws_keep, ws_ptr = self.alloc.workspace(need)
            ws_bytes = need
        _check(capi.fmha_forward(h._handle(), self.params, ws_ptr, ws_bytes))
        del ws_keep
        return (self.out, self.lse) if self.return_lse else self.out

    def explain(self) -> str:
        h = self.handle
        if self.device == CUDA:
            h.set_stream(self.stream)
        status, text = capi.fmha_forward_explain(h._handle(), self.params, 1 << 16)
        if status not in (capi.FMHA_SUCCESS, capi.FMHA_ERROR_UNSUPPORTED):
            _check(status)
        return text


# The serving layouts' int32 arrays (fmha.h 0.2), in the order they are read.
_SERVING_ARRAYS = ("cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table")
# The inference numerics' arrays (fmha.h 0.3), likewise.
_NUMERICS_ARRAYS = ("q_descale", "k_descale", "v_descale", "bias", "alibi_slopes")
_OUT_DTYPES = {"float16": capi.FMHA_DTYPE_F16, "bfloat16": capi.FMHA_DTYPE_BF16,
               "float32": capi.FMHA_DTYPE_F32}


def _out_dtype(value: Any, q: Array) -> int:
    """The fmha_dtype of out: out_dtype= (a name, a numpy or ml_dtypes
    dtype, a torch dtype), else q's dtype, else (FP8 q) bfloat16."""
    if value is None:
        return capi.FMHA_DTYPE_BF16 if q.dtype in FP8 else q.dtype
    if isinstance(value, str):
        name = value
    elif type(value).__module__ == "torch":  # torch.float16 prints as "torch.float16"
        name = str(value).split(".", 1)[-1]
    else:
        try:
            import numpy as np
            name = np.dtype(value).name
        except (ImportError, TypeError):
            name = repr(value)
    if name not in _OUT_DTYPES:
        raise _invalid(f"out_dtype={value!r} must be float16, bfloat16 or float32 (fmha writes no "
                       "FP8 output)", dtype=True)
    return _OUT_DTYPES[name]


def _float32_array(a: Array, name: str, shape: Tuple[int, ...], meaning: str) -> None:
    """a must be a contiguous float32 array of this shape."""
    if a.dtype != capi.FMHA_DTYPE_F32:
        raise _invalid(f"{name}.dtype={a.dtype_name} must be float32", dtype=True)
    if tuple(a.shape) != shape:
        raise _invalid(f"{name} has shape {tuple(a.shape)}; expected {shape} ({meaning})")
    if not a.is_contiguous():
        raise _invalid(f"{name} must be contiguous (strides {a.strides} in elements)")


def _set_numerics(p, arrays: Dict[str, Array]) -> None:
    """Fills the 0.3 inference-numerics fields of p (descales, bias, ALiBi
    slopes) from forward()'s arrays, checking what the C library cannot
    see: their dtypes and shapes (it reads the descales and slopes as raw
    pointers). The bias dims against the problem are the library's check."""
    q, k = arrays["q"], arrays["k"]
    ragged = bool(p.cu_seqlens_q or p.cu_seqlens_k)
    batch = p.num_seqs if ragged else q.shape[0]
    heads_q, heads_k = q.shape[1], k.shape[1]
    for name in ("q_descale", "k_descale", "v_descale"):
        a = arrays.get(name)
        if a is not None:
            _float32_array(a, name, (batch, heads_k), "[batch, kv heads]")
            setattr(p, name, a.ptr or None)
    slopes = arrays.get("alibi_slopes")
    if slopes is not None:
        if len(slopes.shape) == 1:
            _float32_array(slopes, "alibi_slopes", (heads_q,), "[heads], or [batch, heads]")
            p.alibi_slopes_stride = 0
        else:
            if (slopes.dtype != capi.FMHA_DTYPE_F32 or len(slopes.shape) != 2 or
                    slopes.shape != (batch, heads_q) or (heads_q > 1 and slopes.strides[1] != 1)):
                # Rows may be strided; the slopes of a row not.
                _float32_array(slopes, "alibi_slopes", (batch, heads_q), "[heads], or [batch, heads]")
            p.alibi_slopes_stride = slopes.strides[0] if batch > 1 else heads_q
        p.alibi_slopes = slopes.ptr or None
    bias = arrays.get("bias")
    if bias is not None:
        ndim = len(bias.shape)
        if not 1 <= ndim <= 4:
            raise _invalid(f"bias has shape {tuple(bias.shape)}; expected up to 4 dims broadcastable "
                           "to [batch, heads, seq_q, seq_k]")
        if bias.dtype not in (capi.FMHA_DTYPE_F16, capi.FMHA_DTYPE_BF16, capi.FMHA_DTYPE_F32):
            raise _invalid(f"bias.dtype={bias.dtype_name} must be float16, bfloat16 or float32",
                           dtype=True)
        # numpy's broadcasting: missing leading dims are 1.
        t = capi.fmha_tensor()
        t.data = bias.ptr or None
        t.dtype = bias.dtype
        t.dims = (1,) * (4 - ndim) + tuple(bias.shape)
        t.strides = (0,) * (4 - ndim) + tuple(bias.strides)
        p.bias = t


def _int32_array(a: Array, name: str, ndim: int) -> None:
    """a must be a contiguous int32 array of ndim dims (block_table: rows may
    be strided, its entries not)."""
    if a.dtype_name != "int32":
        raise _invalid(f"{name}.dtype={a.dtype_name} must be int32", dtype=True)
    if len(a.shape) != ndim:
        raise _invalid(f"{name} has shape {a.shape}; expected {ndim} dim{'s' if ndim > 1 else ''}")
    if a.shape[-1] > 1 and a.strides[-1] != 1:
        raise _invalid(f"{name} must be contiguous (strides {a.strides} in elements)")


def _set_serving(p, arrays: Dict[str, Array], serving: Dict[str, Any]) -> None:
    """Fills the 0.2 serving fields of p from forward()'s keyword arguments,
    checking what the C library cannot see: that the metadata arrays are
    int32, on the tensors' device and as long as the batch needs."""
    if not serving:
        return
    q, k = arrays["q"], arrays["k"]
    cu_q, cu_k = arrays.get("cu_seqlens_q"), arrays.get("cu_seqlens_k")
    used, table = arrays.get("seqused_k"), arrays.get("block_table")
    for name, a, ndim in (("cu_seqlens_q", cu_q, 1), ("cu_seqlens_k", cu_k, 1), ("seqused_k", used, 1),
                          ("block_table", table, 2)):
        if a is not None:
            _int32_array(a, name, ndim)
    if cu_q is not None or cu_k is not None:
        lengths = {name: a.shape[0] for name, a in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k))
                   if a is not None}
        if len(set(lengths.values())) != 1:
            raise _invalid(f"cu_seqlens_q and cu_seqlens_k differ in length ({lengths})")
        num_seqs = next(iter(lengths.values())) - 1
        if num_seqs < 0:
            raise _invalid("cu_seqlens_q/cu_seqlens_k must hold num_seqs + 1 >= 1 entries")
        p.num_seqs = _int32(num_seqs, "num_seqs")
        batch = num_seqs
    else:
        batch = q.shape[0]
    if used is not None and used.shape[0] != batch:
        raise _invalid(f"seqused_k has {used.shape[0]} entries; the batch has {batch} sequences")
    if table is not None and table.shape[0] != batch:
        raise _invalid(f"block_table has {table.shape[0]} rows; the batch has {batch} sequences")

    def bound(value, name, cu, tensor):
        if value is not None:
            return _int32(value, name)
        if cu is None:
            return 0
        if cu.library == "numpy":  # host memory: the exact bound, read for free
            import numpy as np
            seqs = np.asarray(cu.obj, dtype=np.int64)
            return int(np.diff(seqs).max(initial=0)) if seqs.size > 1 else 0
        return tensor.shape[2]  # device memory: the packed length bounds every sequence
    p.max_seqlen_q = bound(serving.get("max_seqlen_q"), "max_seqlen_q", cu_q, q)
    p.max_seqlen_k = bound(serving.get("max_seqlen_k"), "max_seqlen_k", cu_k, k)
    for name, a in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k), ("seqused_k", used), ("block_table", table)):
        if a is not None:
            setattr(p, name, a.ptr or None)
    if table is not None:
        p.block_table_stride = table.strides[0] if table.shape[0] > 1 else table.shape[1]


def _int32(value, what: str) -> int:
    try:
        value = int(value)
    except (TypeError, ValueError):
        raise _invalid(f"{what}={value!r} must be an int") from None
    if not -(2**31) <= value < 2**31:
        raise _invalid(f"{what}={value} does not fit in int32")
    return value


TensorLike = Any
"""numpy.ndarray, or any object with DLPack or __cuda_array_interface__."""


def forward(q: TensorLike, k: TensorLike, v: TensorLike, *,
            causal: bool = False,
            causal_alignment: str = "bottom_right",
            window: Tuple[int, int] = (-1, -1),
            scale: Optional[float] = None,
            softcap: float = 0.0,
            return_lse: bool = False,
            out: Optional[TensorLike] = None,
            kernel: Optional[str] = None,
            out_lse: Optional[TensorLike] = None,
            workspace: Optional[TensorLike] = None,
            stream: Any = None,
            num_splits: int = 0,
            handle: Optional[Handle] = None,
            cu_seqlens_q: Optional[TensorLike] = None,
            cu_seqlens_k: Optional[TensorLike] = None,
            max_seqlen_q: Optional[int] = None,
            max_seqlen_k: Optional[int] = None,
            seqused_k: Optional[TensorLike] = None,
            block_table: Optional[TensorLike] = None,
            q_descale: Optional[TensorLike] = None,
            k_descale: Optional[TensorLike] = None,
            v_descale: Optional[TensorLike] = None,
            bias: Optional[TensorLike] = None,
            alibi_slopes: Optional[TensorLike] = None,
            out_dtype: Any = None) -> Any:
    """O = softmax(Q K^T * scale + mask) V, exactly.

    Args:
        q: [B, Hq, Nq, D]. k, v: [B, Hk, Nk, D] with Hq % Hk == 0 (GQA/MQA:
            query head h reads kv head h // (Hq // Hk)). One dtype (float16,
            bfloat16, float32), or FP8 k and v (float8_e4m3fn or
            float8_e5m2, one of them for both) with a float16, bfloat16 or
            FP8 q; one device for all; any strides.
        causal: mask keys after the diagonal.
        causal_alignment: "bottom_right" (query i's diagonal is key
            i + Nk - Nq; FlashAttention >= 2.1) or "top_left" (key i, like
            torch's is_causal).
        window: (left, right) sliding window around the diagonal; -1 =
            unbounded. With causal, right must be -1 or 0.
        scale: logit scale; None = 1/sqrt(D).
        softcap: 0 = off; else logits s -> softcap * tanh(s / softcap).
        return_lse: also return the [B, Hq, Nq] float32 natural-log
            log-sum-exp of each row's logits (-inf for a row seeing no key).
        out: where to write O ([B, Hq, Nq, D], float16, bfloat16 or
            float32 whatever q's dtype, on q's device, any non-overlapping
            strides); allocated like q, of out_dtype, when None.
        kernel: force a registered kernel by name (see kernels()).
        out_lse: where to write the lse (contiguous float32 [B, Hq, Nq]);
            implies return_lse.
        workspace: device memory of at least the needed size (16-byte
            aligned, contiguous); allocated like q when None and needed.
        stream: CUDA stream (int or torch/cupy stream) to run on; default:
            the current stream of q's library (torch, cupy), else the
            __cuda_array_interface__ stream of q, else the legacy default.
            The call is asynchronous on CUDA.
        num_splits: split of the key dimension on CUDA (0 = automatic).
        handle: a Handle to use instead of the per-thread cached one.

    Serving layouts (all int32 arrays on q's device; the masks apply per
    sequence, with each sequence's own Nq and Nk):
        cu_seqlens_q: [num_seqs + 1] offsets of packed queries: q and out
            are [1, Hq, total_q, D], sequence s owns rows cu_seqlens_q[s] ..
            cu_seqlens_q[s+1]-1, and the lse is [1, Hq, total_q].
        cu_seqlens_k: [num_seqs + 1] offsets of packed keys (k, v
            [1, Hk, total_k, D]); not with block_table.
        max_seqlen_q, max_seqlen_k: host-known upper bounds on the sequence
            lengths (they size the launch; no device sync). Default: read
            from numpy offsets, else the packed length (q.shape[2],
            k.shape[2]); with block_table, pages x page_size.
        seqused_k: [B] keys each sequence sees (a KV cache's fill level).
        block_table: [B, max_pages] page indices of a paged KV cache, with
            k and v [num_pages, Hk, page_size, D] views (vLLM's
            [pages, page_size, Hk, D] storage transposed, or FlashInfer's);
            needs seqused_k.
        numpy arrays for numpy input, tensors of q's library for torch and
        cupy, and numpy arrays for other producers' CPU memory.

    Inference numerics (fmha 0.3; arrays on q's device). The logits are
    ``s = scale * q_descale * k_descale * (q . k)``, soft-capped, then
    ``s += bias - slope * |d(i) - j|`` (d(i) the diagonal of query i, as
    for the masks), then the masks apply; ``out = v_descale * softmax(s) v``
    and the lse is that of the final s (before v_descale). A row whose
    every visible logit is -inf gets out = 0 and lse = -inf.
        q_descale, k_descale, v_descale: contiguous float32 [B, Hk] (B the
            batch, or the number of sequences of a ragged batch): one factor
            per sequence and KV head (q's applies to that head's query
            group). None = 1. Allowed with any dtype.
        bias: an additive float mask, float16, bfloat16 or float32,
            broadcastable to [B, Hq, Nq, Nk] (for serving layouts Nq and Nk
            are the sequence-length bounds, and a sequence reads the bias
            at its own local positions): each dim is that size or 1, and a
            stride of 0 broadcasts too (np.broadcast_to, torch's expand);
            fewer than 4 dims get leading 1s as in numpy ([Nq, Nk] is a
            mask shared by all heads). -inf entries mask keys out. The
            library's messages number the dims of the 4-D view.
        alibi_slopes: float32 ALiBi slopes, [Hq] (every sequence) or
            [B, Hq] (rows may be strided; a row contiguous).
        out_dtype: out's dtype when fmha allocates it: "float16",
            "bfloat16", "float32" or such a numpy/ml_dtypes/torch dtype.
            None = q's dtype, or bfloat16 for an FP8 q. With out given it
            must be out's dtype.

    Raises:
        InvalidArgumentError: (an Error and a ValueError; .status
            ERROR_INVALID_ARGUMENT) for bad shapes, strides or options,
            and for a tensor that requires grad (fmha has no backward);
            DTypeError (also a TypeError) when a dtype or byte order is at
            fault.
        Error: ERROR_UNSUPPORTED when no kernel runs the problem, and the
            library's other statuses. Nothing is written on error.
    """
    serving = dict(cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                   max_seqlen_k=max_seqlen_k, seqused_k=seqused_k, block_table=block_table)
    numerics = dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, bias=bias,
                    alibi_slopes=alibi_slopes, out_dtype=out_dtype)
    call = _Call(q, k, v, causal=causal, causal_alignment=causal_alignment, window=window,
                 scale=scale, softcap=softcap, return_lse=return_lse, out=out, out_lse=out_lse,
                 kernel=kernel, num_splits=num_splits, stream=stream, handle=handle,
                 serving=serving, numerics=numerics)
    return call.run(workspace)


def explain(q: TensorLike, k: TensorLike, v: TensorLike, *,
            causal: bool = False,
            causal_alignment: str = "bottom_right",
            window: Tuple[int, int] = (-1, -1),
            scale: Optional[float] = None,
            softcap: float = 0.0,
            return_lse: bool = False,
            out: Optional[TensorLike] = None,
            kernel: Optional[str] = None,
            num_splits: int = 0,
            handle: Optional[Handle] = None,
            **options: Any) -> str:
    """Which kernel forward() would run with these arguments, and why each
    better-ranked kernel was passed over (fmha_forward_explain). Computes
    nothing. Returns the text also when no kernel supports the problem (it
    says why); raises Error for invalid arguments. Takes forward()'s serving
    keywords (cu_seqlens_q, ..., block_table) and inference-numerics
    keywords (q_descale, ..., out_dtype)."""
    serving, numerics = _option_kwargs(options)
    call = _Call(q, k, v, causal=causal, causal_alignment=causal_alignment, window=window,
                 scale=scale, softcap=softcap, return_lse=return_lse, out=out, out_lse=None,
                 kernel=kernel, num_splits=num_splits, stream=None, handle=handle,
                 serving=serving, numerics=numerics)
    return call.explain()


def workspace_size(q: TensorLike, k: TensorLike, v: TensorLike, *,
                   causal: bool = False,
                   causal_alignment: str = "bottom_right",
                   window: Tuple[int, int] = (-1, -1),
                   scale: Optional[float] = None,
                   softcap: float = 0.0,
                   return_lse: bool = False,
                   out: Optional[TensorLike] = None,
                   kernel: Optional[str] = None,
                   num_splits: int = 0,
                   handle: Optional[Handle] = None,
                   **options: Any) -> int:
    """Bytes of workspace forward() needs with these arguments (may be 0),
    for callers that pass workspace= themselves (e.g. under CUDA graph
    capture). Validates exactly as forward() does, and takes its serving
    keywords (cu_seqlens_q, ..., block_table) and inference-numerics
    keywords (q_descale, ..., out_dtype)."""
    serving, numerics = _option_kwargs(options)
    call = _Call(q, k, v, causal=causal, causal_alignment=causal_alignment, window=window,
                 scale=scale, softcap=softcap, return_lse=return_lse, out=out, out_lse=None,
                 kernel=kernel, num_splits=num_splits, stream=None, handle=handle,
                 serving=serving, numerics=numerics)
    return call.workspace_size()


_SERVING_KEYWORDS = ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "seqused_k",
                     "block_table")
_NUMERICS_KEYWORDS = _NUMERICS_ARRAYS + ("out_dtype",)


def _option_kwargs(kwargs: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """explain()'s and workspace_size()'s keywords: (serving, numerics)."""
    unknown = sorted(set(kwargs) - set(_SERVING_KEYWORDS) - set(_NUMERICS_KEYWORDS))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}")
    return ({k: v for k, v in kwargs.items() if k in _SERVING_KEYWORDS},
            {k: v for k, v in kwargs.items() if k in _NUMERICS_KEYWORDS})


# ---- merge of partial results ---------------------------------------------------
# The library's names for merge's arguments, then forward's (o -> out, ...).
_MERGE_NAMES = [
    (re.compile(r"\bo_parts\["), "outs["),
    (re.compile(r"\blse_parts\["), "lses["),
    (re.compile(r"\bo_parts\b"), "outs"),
    (re.compile(r"\blse_parts\b"), "lses"),
    (re.compile(r"\bnum_parts\b"), "len(outs)"),
]


def _check_merge(status: int) -> None:
    if status != capi.FMHA_SUCCESS:
        message = capi.fmha_last_error_message()
        for pattern, name in _MERGE_NAMES:
            message = pattern.sub(name, message)
        raise _error(status, _python_names(message), dtype=".dtype=" in message)


def merge(outs, lses, *,
          out: Optional[TensorLike] = None,
          return_lse: bool = False,
          out_lse: Optional[TensorLike] = None,
          stream: Any = None,
          handle: Optional[Handle] = None) -> Any:
    """Merges attention results computed over disjoint sets of keys (a
    shared prefix and per-request suffixes, KV shards, ...) into the
    attention over all of them (fmha_merge):

        lse = log(sum_i exp(lses[i])),   out = sum_i exp(lses[i] - lse) * outs[i]

    computed in FP32 (FP64 on the CPU). A part whose lse is -inf (it saw no
    key) contributes nothing; a row whose parts are all -inf gets out = 0 and
    lse = -inf; a NaN lse makes the row NaN.

    Args:
        outs: a sequence of [B, H, N, D] arrays of one dtype (float16,
            bfloat16 or float32) and device, any strides: forward()'s
            outputs, each with its return_lse=True lse.
        lses: the matching [B, H, N] contiguous float32 lse arrays.
        out: where to write the result ([B, H, N, D], any of the three
            dtypes); allocated like outs[0] when None. It may be outs[0]
            itself (an in-place merge) but share no other memory.
        return_lse: also return the merged [B, H, N] float32 lse.
        out_lse: where to write that lse (contiguous float32 [B, H, N]; may be
            lses[0] itself); implies return_lse.
        stream, handle: as for forward(). The call is asynchronous on CUDA.

    Returns:
        out, or (out, lse) with return_lse (or out_lse).

    Raises:
        InvalidArgumentError (DTypeError for a dtype at fault) and Error, as
        forward() does; nothing is written on error.
    """
    outs, lses = list(outs), list(lses)
    if not outs:
        raise _invalid("outs is empty: merge needs at least one part")
    if len(lses) != len(outs):
        raise _invalid(f"lses has {len(lses)} arrays but outs has {len(outs)}")
    try:
        device, ordinal = device_of(outs[0], "outs[0]")
        if handle is not None:
            ordinal = handle.ordinal if handle.device == CUDA else 0
        ordinal = ordinal or 0
        if device == CUDA:
            st = _stream_int(stream) if stream is not None else _default_stream(
                outs[0], library_of(outs[0]), ordinal)
        else:
            if stream is not None:
                raise _invalid("stream= is only for CUDA tensors")
            st = None
        arrays = {}
        for i, (o, l) in enumerate(zip(outs, lses)):
            arrays[f"outs[{i}]"] = describe(o, f"outs[{i}]", st)
            arrays[f"lses[{i}]"] = describe(l, f"lses[{i}]", st)
        if out is not None:
            arrays["out"] = describe(out, "out", st)
        if out_lse is not None:
            arrays["out_lse"] = describe(out_lse, "out_lse", st)
    except ArrayError as e:
        raise _invalid(str(e), dtype=isinstance(e, TypeError)) from None
    for name, a in arrays.items():
        if a.device != device or (device == CUDA and a.ordinal not in (None, ordinal)):
            raise _invalid(f"{name} is on {a.device} but outs[0] is on {device}")
    if handle is not None and handle.device != device:
        raise _invalid(f"handle is for {handle.device} but the tensors are on {device}")
    first = arrays["outs[0]"]
    parts = [_tensor(arrays[f"outs[{i}]"], f"outs[{i}]") for i in range(len(outs))]
    rows = tuple(first.shape[:3])

    def check_lse(a: Array, name: str) -> None:
        if a.dtype != capi.FMHA_DTYPE_F32 or a.shape != rows or not a.is_contiguous():
            raise _invalid(f"{name} must be a contiguous float32 array of shape {rows} "
                           f"(got {a.dtype_name} {a.shape})", dtype=a.dtype != capi.FMHA_DTYPE_F32)
    for i in range(len(lses)):
        check_lse(arrays[f"lses[{i}]"], f"lses[{i}]")

    alloc = _Allocator(first, st, ordinal)
    p = capi.fmha_merge_params()
    p.set_parts(parts, [arrays[f"lses[{i}]"].ptr or None for i in range(len(lses))])
    if out is None:
        out = alloc.empty(first.shape, "out")
        arrays["out"] = describe(out, "out", st)
    elif arrays["out"].readonly:
        raise _invalid("out is read-only")
    p.o = _tensor(arrays["out"], "out")
    lse = None
    if return_lse or out_lse is not None:
        if out_lse is None:
            lse = alloc.empty(rows, "out_lse", float32=True)
            arrays["out_lse"] = describe(lse, "out_lse", st)
        else:
            lse = out_lse
            check_lse(arrays["out_lse"], "out_lse")
            if arrays["out_lse"].readonly:
                raise _invalid("out_lse is read-only")
        p.lse = arrays["out_lse"].ptr or None
    h = handle if handle is not None else _cached_handle(device, ordinal)
    if device == CUDA:
        h.set_stream(st)
    _check_merge(capi.fmha_merge(h._handle(), p))
    del arrays  # the DLPack capsules lived until the call returned
    return (out, lse) if lse is not None else out
