"""fmha.forward() on the CUDA backend with torch tensors, against a float64
reference and torch's scaled_dot_product_attention at the same dtype.

Skips (with the reason) when torch, a CUDA GPU or fmha's CUDA backend is
absent. Run on a GPU machine from the repository root:

    PYTHONPATH=<build>/python python3 -m pytest bindings/python/tests -k cuda

The bound is FlashAttention's: fmha's largest error against the float64
reference may be at most twice that of a same-dtype PyTorch computation (the
larger of SDPA and an eager matmul/softmax/matmul) plus a small absolute term.
"""
import math

import pytest

import fmha
from fmha_reference import visible_keys

try:
    import torch
except ImportError:  # every test below is then reported skipped, not absent
    torch = None


def _skip_reason():
    if torch is None:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    try:
        fmha.Handle("cuda", 0).close()
    except fmha.Error as e:
        return f"fmha's CUDA backend is not available: {e}"
    return None


_SKIP = _skip_reason()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

DTYPES = [torch.float16, torch.bfloat16, torch.float32] if torch else [None] * 3
DTYPE_IDS = ["f16", "bf16", "f32"]
# Absolute slack on top of 2x the same-dtype PyTorch error.
ATOL = dict(zip(DTYPES, [1e-4, 1e-3, 1e-5]))
LSE_RTOL = 2e-4


def mask_of(nq, nk, device, **kw):
    return torch.from_numpy(visible_keys(nq, nk, **kw)).to(device)


def expand_kv(x, hq):
    return x.repeat_interleave(hq // x.shape[1], dim=1)


def reference64(q, k, v, *, causal=False, causal_alignment="bottom_right", window=(-1, -1),
                scale=None, softcap=0.0):
    """(o, lse) in float64; empty rows give o = 0 and lse = -inf."""
    hq, nq, d = q.shape[1], q.shape[2], q.shape[3]
    nk = k.shape[2]
    q, k, v = q.double(), expand_kv(k, hq).double(), expand_kv(v, hq).double()
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = q @ k.transpose(-1, -2) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    mask = mask_of(nq, nk, q.device, causal=causal, causal_alignment=causal_alignment,
                   window=window)
    s = s.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)[..., None])
    o = torch.nan_to_num(p) @ v
    return o, lse


def eager_same_dtype(q, k, v, *, causal=False, causal_alignment="bottom_right", window=(-1, -1),
                     scale=None, softcap=0.0):
    """What PyTorch eager code computes at the input dtype: QK^T and PV in
    the dtype, softmax in float32, P rounded to the dtype."""
    hq, nq, d = q.shape[1], q.shape[2], q.shape[3]
    nk = k.shape[2]
    k, v = expand_kv(k, hq), expand_kv(v, hq)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = (q @ k.transpose(-1, -2)).float() * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    mask = mask_of(nq, nk, q.device, causal=causal, causal_alignment=causal_alignment,
                   window=window)
    s = s.masked_fill(~mask, -math.inf)
    p = torch.nan_to_num(torch.softmax(s, dim=-1)).to(q.dtype)
    return p @ v


def sdpa_same_dtype(q, k, v, *, causal=False, causal_alignment="bottom_right", window=(-1, -1),
                    scale=None, softcap=0.0):
    """torch SDPA with the same mask, or None where SDPA cannot express the
    case (softcap) or would give NaN (a row that sees no key)."""
    if softcap:
        return None
    nq, nk = q.shape[2], k.shape[2]
    mask = mask_of(nq, nk, q.device, causal=causal, causal_alignment=causal_alignment,
                   window=window)
    if not bool(mask.any(dim=-1).all()):
        return None
    hq = q.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(
        q, expand_kv(k, hq), expand_kv(v, hq), attn_mask=mask, scale=scale)


def check(q, k, v, out=None, **kw):
    """Runs fmha (poisoned outputs), and bounds its error by the baselines'."""
    if out is None:
        out = torch.full_like(q, float("nan"))
    else:
        out.fill_(float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device=q.device, dtype=torch.float32)
    got, got_lse = fmha.forward(q, k, v, out=out, out_lse=lse, **kw)
    assert got is out and got_lse is lse
    torch.cuda.synchronize()
    kw.pop("kernel", None)
    kw.pop("num_splits", None)
    ref_o, ref_lse = reference64(q, k, v, **kw)
    baseline = (eager_same_dtype(q, k, v, **kw).double() - ref_o).abs().max().item()
    sdpa = sdpa_same_dtype(q, k, v, **kw)
    if sdpa is not None:
        baseline = max(baseline, (sdpa.double() - ref_o).abs().max().item())
    assert torch.isfinite(out).all(), "fmha left non-finite values in out"
    err = (out.double() - ref_o).abs().max().item()
    bound = 2 * baseline + ATOL[q.dtype]
    assert err <= bound, f"max |fmha - ref64| = {err:.3g} > {bound:.3g} (2x PyTorch's {baseline:.3g})"
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), "lse: -inf rows differ"
    lse_err = (lse.double() - ref_lse)[~empty].abs()
    if lse_err.numel():
        limit = LSE_RTOL * (1 + ref_lse[~empty].abs().max().item())
        assert lse_err.max().item() <= limit, f"lse error {lse_err.max().item():.3g} > {limit:.3g}"
    return out


def randn(*shape, dtype=None, device="cuda"):
    dtype = dtype or torch.float16
    return torch.randn(*shape, dtype=dtype, device=device)


def qkv(b=2, hq=8, hk=None, nq=300, nk=None, d=64, dtype=None, device="cuda"):
    hk = hk or hq
    nk = nk or nq
    return (randn(b, hq, nq, d, dtype=dtype, device=device),
            randn(b, hk, nk, d, dtype=dtype, device=device),
            randn(b, hk, nk, d, dtype=dtype, device=device))


@pytest.fixture(autouse=True)
def _seed():
    if _SKIP is None:
        torch.manual_seed(1234)


CASES = {
    "plain": {},
    "causal_bottom_right": {"causal": True},
    "causal_top_left": {"causal": True, "causal_alignment": "top_left"},
    "causal_window": {"causal": True, "window": (64, 0)},
    "window": {"window": (40, 17)},
    "softcap": {"softcap": 10.0, "scale": 0.5},
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("d", [64, 128])
def test_cuda_cases(case, dtype, d):
    check(*qkv(hq=8, hk=2, nq=300, nk=333, d=d, dtype=dtype), **CASES[case])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cuda_llama_decoder_layer(dtype):
    check(*qkv(b=1, hq=32, hk=8, nq=1024, d=128, dtype=dtype), causal=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cuda_decode(dtype):
    check(*qkv(b=4, hq=32, hk=8, nq=1, nk=1500, d=128, dtype=dtype), causal=True)


@pytest.mark.parametrize("d", [32, 80, 96, 256])
def test_cuda_head_dims(d):
    check(*qkv(b=1, hq=4, nq=129, nk=200, d=d), causal=True)


def test_cuda_rows_without_keys():
    q, k, v = qkv(b=1, hq=4, nq=50, nk=20, d=64)
    out = check(q, k, v, causal=True)  # bottom-right: rows 0..29 see no key
    assert (out[:, :, :30] == 0).all()


def test_cuda_num_splits():
    q, k, v = qkv(b=1, hq=8, hk=2, nq=4, nk=4000, d=128, dtype=torch.bfloat16)
    for splits in (1, 4):
        check(q, k, v, causal=True, num_splits=splits)


def test_cuda_bnhd_views_and_out():
    b, n, hq, hk, d = 2, 257, 16, 4, 128
    q = randn(b, n, hq, d).transpose(1, 2)
    k = randn(b, n, hk, d).transpose(1, 2)
    v = randn(b, n, hk, d).transpose(1, 2)
    out = torch.empty(b, n, hq, d, dtype=q.dtype, device="cuda").transpose(1, 2)
    assert not q.is_contiguous() and not out.is_contiguous()
    check(q, k, v, out=out, causal=True)


def test_cuda_packed_qkv():
    b, n, hq, hk, d = 1, 200, 32, 8, 128
    fused = randn(b, n, hq + 2 * hk, d, dtype=torch.bfloat16)
    q, k, v = fused.transpose(1, 2).split([hq, hk, hk], dim=1)
    check(q, k, v, causal=True)


def test_cuda_default_outputs_are_torch_tensors():
    q, k, v = qkv(hq=8, hk=2, dtype=torch.bfloat16)
    o, lse = fmha.forward(q, k, v, causal=True, return_lse=True)
    assert isinstance(o, torch.Tensor) and o.device == q.device and o.dtype == q.dtype
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:3]
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, expand_kv(k, 8), expand_kv(v, 8), attn_mask=mask_of(300, 300, "cuda", causal=True))
    torch.testing.assert_close(o, ref, atol=2e-2, rtol=2e-2)


def test_cuda_requires_grad_inputs():
    q, k, v = (x.requires_grad_() for x in qkv(b=1, hq=2, nq=64, d=64, dtype=torch.float32))
    with pytest.raises(fmha.InvalidArgumentError) as e:  # fmha has no backward
        fmha.forward(q, k, v)
    assert "q requires grad" in e.value.message
    with torch.no_grad():  # no graph recorded: the tensors are read as detached views
        o = fmha.forward(q, k, v)
    assert not o.requires_grad
    torch.testing.assert_close(o, torch.nn.functional.scaled_dot_product_attention(
        q.detach(), k.detach(), v.detach()), atol=1e-5, rtol=1e-5)


def test_cuda_runs_on_the_current_torch_stream():
    """Inputs written late on a side stream: a forward ordered on any other
    stream would read them before they are ready."""
    side = torch.cuda.Stream()
    q, k, v = qkv(b=1, hq=8, nq=512, d=128)
    q2 = torch.empty_like(q)
    side.wait_stream(torch.cuda.current_stream())  # q, k, v were made on the default stream
    with torch.cuda.stream(side):
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(50_000_000)  # ~tens of ms of GPU time
        q2.copy_(q)
        o = fmha.forward(q2, k, v, causal=True)
    side.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask_of(
        512, 512, "cuda", causal=True))
    torch.testing.assert_close(o, ref, atol=2e-3, rtol=2e-3)


def test_cuda_explicit_stream_and_workspace():
    q, k, v = qkv(b=1, hq=8, hk=2, nq=700, d=128, dtype=torch.bfloat16)
    need = fmha.workspace_size(q, k, v, causal=True)
    ws = torch.empty(max(need, 1), dtype=torch.uint8, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    out = torch.empty_like(q)
    fmha.forward(q, k, v, causal=True, out=out, workspace=ws, stream=s)
    s.synchronize()
    ref = reference64(q, k, v, causal=True)[0]
    assert (out.double() - ref).abs().max().item() < 3e-2
    if need > 0:
        with pytest.raises(fmha.Error) as e:
            fmha.forward(q, k, v, causal=True, workspace=ws[:need - 1])
        assert e.value.status == fmha.Status.ERROR_WORKSPACE_TOO_SMALL


def test_cuda_graph_capture():
    q, k, v = qkv(b=1, hq=8, hk=2, nq=256, d=64)
    out = torch.empty_like(q)
    need = fmha.workspace_size(q, k, v, causal=True)
    ws = torch.empty(max(need, 16), dtype=torch.uint8, device="cuda")
    fmha.forward(q, k, v, causal=True, out=out, workspace=ws)  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fmha.forward(q, k, v, causal=True, out=out, workspace=ws)
    q.copy_(torch.randn_like(q))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref = reference64(q, k, v, causal=True)[0]
    assert (out.double() - ref).abs().max().item() < 5e-3


def test_cuda_explain_and_kernels():
    q, k, v = qkv(b=1, hq=2, nq=64, d=64)
    text = fmha.explain(q, k, v, causal=True)
    assert "chosen: " in text
    assert any(name in text for name in fmha.kernels())


def test_cuda_errors():
    q, k, v = qkv(b=1, hq=4, nq=16, d=64)
    with pytest.raises(fmha.Error) as e:
        fmha.forward(q, k.cpu(), v)
    assert e.value.status == fmha.Status.ERROR_INVALID_ARGUMENT and "cpu" in e.value.message
    with pytest.raises(fmha.Error) as e:
        fmha.forward(q, k.float(), v)
    assert e.value.status == fmha.Status.ERROR_INVALID_ARGUMENT and "k.dtype" in e.value.message
    with pytest.raises(fmha.Error) as e:
        fmha.forward(q, k, v, out=q)
    assert e.value.status == fmha.Status.ERROR_INVALID_ARGUMENT


@pytest.mark.skipif(_SKIP is None and torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_cuda_second_device():
    check(*qkv(b=1, hq=8, hk=2, nq=130, d=64, device="cuda:1"), causal=True)


def test_cuda_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    q, k, v = (cupy.asarray(x) for x in qkv(b=1, hq=4, hk=2, nq=100, d=64))
    o = fmha.forward(q, k, v, causal=True)
    assert isinstance(o, cupy.ndarray) and o.dtype == cupy.float16
    qt, kt, vt = (torch.as_tensor(x, device="cuda") for x in (q, k, v))
    ref = reference64(qt, kt, vt, causal=True)[0]
    cupy.cuda.get_current_stream().synchronize()
    assert (torch.as_tensor(o, device="cuda").double() - ref).abs().max().item() < 3e-3
