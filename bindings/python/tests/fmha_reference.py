"""The float64 attention reference the binding tests compare against, and
the tolerances: what each dtype can achieve, not a magic constant."""
import math

import numpy as np

try:
    import ml_dtypes
except ImportError:  # numpy has no bfloat16; ml_dtypes is optional
    ml_dtypes = None

# Largest error allowed, relative and absolute, per input dtype: two units in
# the last place of the output type (the output is rounded once from an FP32
# accumulator), and for float32 a few ulps of a length-N accumulation.
TOLERANCE = {"float32": 2e-5, "float16": 2 * 2.0**-10, "bfloat16": 2 * 2.0**-7}
LSE_TOLERANCE = 1e-4  # lse is FP32 for every input dtype


def visible_keys(nq, nk, *, causal=False, causal_alignment="bottom_right", window=(-1, -1)):
    """[nq, nk] bool: key j visible to query i (the header's mask contract)."""
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    diag = i + (0 if (causal and causal_alignment == "top_left") else nk - nq)
    left, right = window
    if causal:
        right = 0
    mask = np.ones((nq, nk), dtype=bool)
    if left >= 0:
        mask &= j >= diag - left
    if right >= 0:
        mask &= j <= diag + right
    return mask


def attention(q, k, v, *, causal=False, causal_alignment="bottom_right", window=(-1, -1),
              scale=None, softcap=0.0, q_descale=None, k_descale=None, v_descale=None, bias=None,
              alibi_slopes=None):
    """(o, lse) in float64; rows that see no key (or whose every visible
    logit is -inf) give o = 0, lse = -inf. The 0.3 numerics follow fmha.h:
    s = scale * qd * kd * (q . k), soft-capped, plus bias minus
    slope * |d(i) - j|, then masked; o = vd * softmax(s) v, lse before vd.
    Descales are [B, Hk]; bias broadcasts like numpy to [B, Hq, Nq, Nk];
    alibi_slopes are [Hq] or [B, Hq]."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, hq, nq, d = q.shape
    hk, nk = k.shape[1], k.shape[2]
    group = hq // hk
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)

    def per_head(descale):  # [B, Hk] -> [B, Hq, 1, 1]
        if descale is None:
            return 1.0
        return np.repeat(np.asarray(descale, dtype=np.float64), group, axis=1)[:, :, None, None]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = np.einsum("bhid,bhjd->bhij", q, k) * (scale * per_head(q_descale) * per_head(k_descale))
    if softcap:
        s = softcap * np.tanh(s / softcap)
    diag = np.arange(nq)[:, None] + (0 if (causal and causal_alignment == "top_left") else nk - nq)
    if bias is not None:
        s = s + np.asarray(bias, dtype=np.float64)
    if alibi_slopes is not None:
        slopes = np.asarray(alibi_slopes, dtype=np.float64)
        slopes = np.broadcast_to(slopes, (b, hq))[:, :, None, None]
        s = s - slopes * np.abs(diag - np.arange(nk)[None, :])
    mask = visible_keys(nq, nk, causal=causal, causal_alignment=causal_alignment, window=window)
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    seen = l > 0
    safe_l = np.where(seen, l, 1.0)
    o = np.where(seen, np.einsum("bhij,bhjd->bhid", p, v) / safe_l, 0.0) * per_head(v_descale)
    lse = np.where(seen[..., 0], m[..., 0] + np.log(safe_l[..., 0]), -np.inf)
    return o, lse


def dtype_name(dtype):
    return np.dtype(dtype).name


def assert_close(actual, expected, dtype, what="o"):
    """Elementwise |a - e| <= tol * (1 + |e|) with tol from TOLERANCE."""
    tol = TOLERANCE[dtype_name(dtype)]
    a = np.asarray(actual, dtype=np.float64)
    assert a.shape == expected.shape, f"{what}: shape {a.shape} != {expected.shape}"
    assert np.all(np.isfinite(a)), f"{what}: {np.count_nonzero(~np.isfinite(a))} non-finite values"
    err = np.abs(a - expected)
    bound = tol * (1.0 + np.abs(expected))
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (
        f"{what} ({dtype_name(dtype)}): max error {err.max():.3g}, at {worst} got {a[worst]!r} "
        f"expected {expected[worst]!r} (tolerance {tol:g} relative)")


def assert_lse_close(actual, expected):
    a = np.asarray(actual, dtype=np.float64)
    assert a.shape == expected.shape
    empty = np.isneginf(expected)
    assert np.array_equal(np.isneginf(a), empty), "lse: -inf rows differ"
    err = np.abs(a[~empty] - expected[~empty])
    assert err.size == 0 or err.max() <= LSE_TOLERANCE * (1 + np.abs(expected[~empty])).max(), (
        f"lse: max error {err.max():.3g}")
