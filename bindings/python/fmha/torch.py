"""fmha for PyTorch: the custom op ``torch.ops.fmha.forward`` and ``sdpa()``.

Importing this module registers the op (torch >= 2.4)::

    import torch, fmha.torch
    o = fmha.torch.sdpa(q, k, v, is_causal=True)       # F.scaled_dot_product_attention's names
    o, lse = torch.ops.fmha.forward(q, k, v, causal=True, return_lse=True)
    o = fmha.torch.sdpa(q, k, v, attn_mask=mask)       # a float (additive) or bool mask
    o, _ = torch.ops.fmha.forward(q16, k_fp8, v_fp8, k_descale=ks, v_descale=vs,
                                  out_dtype=torch.float32)   # FP8 KV cache (fmha 0.3)

The op has a fake (meta) implementation, so ``torch.compile`` (also with
``fullgraph=True``) traces through it without a graph break, on CPU and CUDA
tensors. At run time it calls ``fmha.forward``: CUDA work is enqueued on
torch's current stream of the tensors' device, the workspace comes from
torch's caching allocator, and one fmha handle is kept per (device,
thread). Outputs are new tensors; no input is written or aliased.

fmha computes the forward only: the op has no backward (calling backward
through it raises), and ``sdpa`` refuses inputs that require grad while
grad mode is on.
"""

import math
from typing import Optional, Tuple

import torch

import fmha

__all__ = ["forward", "sdpa"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))
_ALIGNMENTS = ("bottom_right", "top_left")


def _output_shapes(q: torch.Tensor, return_lse: bool):
    """(out shape, lse shape): lse is [B, Hq, Nq], or [0] when not asked for
    (a custom op returns a fixed number of tensors)."""
    return tuple(q.shape), (tuple(q.shape[:3]) if return_lse else (0,))


def _out_dtype(q: torch.Tensor, out_dtype: Optional[torch.dtype]) -> torch.dtype:
    """out's dtype: out_dtype, else q's, else (FP8 q) bfloat16, as fmha.forward."""
    if out_dtype is not None:
        return out_dtype
    return torch.bfloat16 if q.dtype in _FP8 else q.dtype


@torch.library.custom_op("fmha::forward", mutates_args=(), device_types=("cpu", "cuda"))
def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            causal: bool = False,
            causal_alignment: str = "bottom_right",
            window_left: int = -1,
            window_right: int = -1,
            scale: Optional[float] = None,
            softcap: float = 0.0,
            return_lse: bool = False,
            bias: Optional[torch.Tensor] = None,
            q_descale: Optional[torch.Tensor] = None,
            k_descale: Optional[torch.Tensor] = None,
            v_descale: Optional[torch.Tensor] = None,
            alibi_slopes: Optional[torch.Tensor] = None,
            out_dtype: Optional[torch.dtype] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """fmha.forward as a torch op: (out, lse).

    q: [B, Hq, Nq, D]; k, v: [B, Hk, Nk, D] with Hq % Hk == 0; float16,
    bfloat16 or float32, or FP8 k and v (torch.float8_e4m3fn /
    float8_e5m2) under a float16, bfloat16 or FP8 q; all on one device, any
    strides. The options are fmha.forward's (``window`` is split into
    window_left/window_right), the 0.3 ones too: bias (a float additive
    mask broadcastable to [B, Hq, Nq, Nk]), q/k/v_descale (float32
    [B, Hk]), alibi_slopes (float32 [Hq] or [B, Hq]) and out_dtype.
    out is a new contiguous [B, Hq, Nq, D] tensor of out_dtype (default
    q's dtype, bfloat16 for an FP8 q); lse a new float32 [B, Hq, Nq] tensor
    (natural log) when return_lse, else an empty float32 tensor of shape
    [0]. Raises fmha.Error (fmha.InvalidArgumentError is a ValueError) for
    what fmha rejects.
    """
    out_shape, lse_shape = _output_shapes(q, return_lse)
    out = torch.empty(out_shape, dtype=_out_dtype(q, out_dtype), device=q.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    # torch's current stream on the tensors' device; fmha.forward allocates
    # the workspace with torch.empty (the caching allocator) on that device.
    stream = torch.cuda.current_stream(q.device).cuda_stream if q.is_cuda else None
    # Inside the op the autograd layer is already passed: the inputs are
    # read as plain views (detach shares memory).
    def plain(t):
        return None if t is None else t.detach()
    fmha.forward(q.detach(), k.detach(), v.detach(), causal=causal,
                 causal_alignment=causal_alignment, window=(window_left, window_right),
                 scale=scale, softcap=softcap, out=out, out_lse=lse if return_lse else None,
                 stream=stream, bias=plain(bias), q_descale=plain(q_descale),
                 k_descale=plain(k_descale), v_descale=plain(v_descale),
                 alibi_slopes=plain(alibi_slopes))
    return out, lse


def _check_dtypes(q, k, v, bias, out_dtype):
    """fmha.h 0.3's dtype rules: one of float16/bfloat16/float32 for all, or
    FP8 k = v under a float16, bfloat16 or FP8 q; out and bias not FP8."""
    same = q.dtype in _DTYPES and k.dtype == q.dtype
    fp8_kv = k.dtype in _FP8 and (q.dtype in (torch.float16, torch.bfloat16) or q.dtype in _FP8)
    if not (same or fp8_kv) or v.dtype != k.dtype:
        raise TypeError(f"fmha::forward takes float16, bfloat16 or float32 tensors of one dtype, or "
                        f"FP8 k and v under a float16, bfloat16 or FP8 q; got q {q.dtype}, "
                        f"k {k.dtype}, v {v.dtype}")
    if out_dtype is not None and out_dtype not in _DTYPES:
        raise TypeError(f"fmha::forward: out_dtype={out_dtype} must be float16, bfloat16 or float32")
    if bias is not None and bias.dtype not in _DTYPES:
        raise TypeError(f"fmha::forward: bias.dtype={bias.dtype} must be float16, bfloat16 or "
                        "float32")


@forward.register_fake
def _forward_fake(q, k, v, causal=False, causal_alignment="bottom_right", window_left=-1,
                  window_right=-1, scale=None, softcap=0.0, return_lse=False, bias=None,
                  q_descale=None, k_descale=None, v_descale=None, alibi_slopes=None,
                  out_dtype=None):
    # What fmha would check before touching data, so a traced program
    # fails at trace time, not on its first run.
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"fmha::forward takes 4-D [batch, heads, seq, head_dim] tensors; got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    _check_dtypes(q, k, v, bias, out_dtype)
    for name, t in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale),
                    ("alibi_slopes", alibi_slopes)):
        if t is not None and t.dtype != torch.float32:
            raise TypeError(f"fmha::forward: {name}.dtype={t.dtype} must be float32")
    if causal_alignment not in _ALIGNMENTS:
        raise ValueError(f"causal_alignment={causal_alignment!r} must be 'bottom_right' or 'top_left'")
    out_shape, lse_shape = _output_shapes(q, return_lse)
    return (q.new_empty(out_shape, dtype=_out_dtype(q, out_dtype)),
            q.new_empty(lse_shape, dtype=torch.float32))


def _no_backward(ctx, grad_out, grad_lse):
    raise NotImplementedError("fmha::forward has no backward (fmha computes the attention forward "
                              "only); detach the inputs or use torch.no_grad()")


def _setup_context(ctx, inputs, output):
    pass


torch.library.register_autograd("fmha::forward", _no_backward, setup_context=_setup_context)


def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
         attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
         is_causal: bool = False, scale: Optional[float] = None,
         enable_gqa: bool = False) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention through fmha, for the
    subset fmha computes.

    Args:
        query: [B, Hq, L, E] (or [Hq, L, E]). key, value: [B, Hk, S, E]
            (or [Hk, S, E]), with the same batch size as query.
        attn_mask: SDPA's mask, broadcastable to [B, Hq, L, S] (or
            [Hq, L, S]): a float mask (float16, bfloat16, float32) is added
            to the scaled logits; a bool mask keeps the keys where it is
            True (it becomes 0 / -inf). A row it masks out entirely gives
            0 (torch gives NaN). May be combined with is_causal.
        dropout_p: must be 0.0 (fmha has no dropout).
        is_causal: torch's causal mask, aligned to the top left: query i
            sees keys 0..i, also when L != S (fmha's
            FMHA_MASK_CAUSAL_TOP_LEFT).
        scale: logit scale, > 0; None = 1/sqrt(E).
        enable_gqa: allow Hq != Hk (Hq a multiple of Hk; query head h
            reads key/value head h // (Hq // Hk), as torch does).

    Returns:
        A new tensor [B, Hq, L, E] (or [Hq, L, E]) of query's dtype.

    Raises:
        NotImplementedError: dropout_p != 0.
        ValueError: shapes fmha (or torch) does not take: not 3-D or 4-D,
            value's head dim != query's, batch sizes that differ (fmha does
            not broadcast), Hq != Hk without enable_gqa, Hq not a multiple
            of Hk, scale <= 0; inputs that require grad while grad mode is
            on (fmha has no backward).
        TypeError: a dtype other than float16, bfloat16 and float32, or
            different dtypes; an attn_mask neither bool nor of those dtypes.
    """
    if dropout_p != 0.0:
        raise NotImplementedError(f"fmha.torch.sdpa: dropout_p={dropout_p} is not supported "
                                  "(fmha has no dropout); pass 0.0")
    ndim = query.dim()
    if ndim not in (3, 4) or key.dim() != ndim or value.dim() != ndim:
        raise ValueError(f"fmha.torch.sdpa takes 4-D [batch, heads, seq, head_dim] (or 3-D "
                         f"[heads, seq, head_dim]) tensors; got query {tuple(query.shape)}, "
                         f"key {tuple(key.shape)}, value {tuple(value.shape)}")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dtype not in _DTYPES:
            raise TypeError(f"fmha.torch.sdpa: {name}.dtype={t.dtype} is not float16, bfloat16 "
                            "or float32")
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise TypeError(f"fmha.torch.sdpa: query, key and value must have one dtype; got "
                        f"{query.dtype}, {key.dtype}, {value.dtype}")
    if value.shape[-1] != query.shape[-1] or key.shape[-1] != query.shape[-1]:
        raise ValueError(f"fmha.torch.sdpa: query, key and value must have one head dim (fmha has "
                         f"no separate value head dim); got {query.shape[-1]}, {key.shape[-1]}, "
                         f"{value.shape[-1]}")
    if key.shape[:-1] != value.shape[:-1]:
        raise ValueError(f"fmha.torch.sdpa: key {tuple(key.shape)} and value {tuple(value.shape)} "
                         "must agree but for the head dim")
    if ndim == 4 and key.shape[0] != query.shape[0]:
        raise ValueError(f"fmha.torch.sdpa: batch sizes differ (query {query.shape[0]}, key "
                         f"{key.shape[0]}); fmha does not broadcast them")
    hq, hk = query.shape[-3], key.shape[-3]
    if hq != hk:
        if not enable_gqa:
            raise ValueError(f"fmha.torch.sdpa: query has {hq} heads and key/value {hk}; "
                             "pass enable_gqa=True for grouped-query attention")
        if hq % hk != 0:
            raise ValueError(f"fmha.torch.sdpa: {hq} query heads are not a multiple of "
                             f"{hk} key/value heads")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"fmha.torch.sdpa: scale={scale} must be finite and > 0 "
                         "(None = 1/sqrt(head_dim))")
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad
                                    or value.requires_grad):
        raise ValueError("fmha.torch.sdpa: an input requires grad, but fmha has no backward "
                         "(forward only): detach the inputs, or call under torch.no_grad() / "
                         "torch.inference_mode()")
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            # SDPA: True takes part in attention.
            bias = torch.zeros(attn_mask.shape, dtype=query.dtype, device=attn_mask.device)
            bias = bias.masked_fill(attn_mask.logical_not(), float("-inf"))
        elif attn_mask.dtype in _DTYPES:
            bias = attn_mask
        else:
            raise TypeError(f"fmha.torch.sdpa: attn_mask.dtype={attn_mask.dtype} is neither bool nor "
                            "float16, bfloat16 or float32")
        if bias.dim() > ndim:
            raise ValueError(f"fmha.torch.sdpa: attn_mask {tuple(attn_mask.shape)} has more dims "
                             f"than query {tuple(query.shape)}")
        # numpy/torch broadcasting: leading dims of 1 up to 4-D.
        bias = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))
    if ndim == 3:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    out, _ = forward(query, key, value, causal=is_causal, causal_alignment="top_left",
                     scale=None if scale is None else float(scale), bias=bias)
    return out.squeeze(0) if ndim == 3 else out
