"""fmha.torch: the custom op fmha::forward and sdpa(), against torch's own
scaled_dot_product_attention in float64, under torch.compile(fullgraph=True)
and torch.library.opcheck; on the CPU, and on CUDA where torch sees a GPU
and fmha was built with CUDA (test ids name the device, so ctest's
``-k cuda`` / ``-k "not cuda"`` split them).

Skipped (with the reason) when torch (>= 2.4) is absent. Runs under pytest,
or without it as ``python3 test_torch.py`` (tests/minipytest.py).

The bound is FlashAttention's: fmha's largest error against the float64
reference may be at most twice that of torch's SDPA at the input dtype, plus
a small absolute term.
"""
import math
import sys

try:
    import pytest
except ImportError:  # the GPU machine may lack pytest
    import minipytest as pytest

import fmha

try:
    import torch
    import torch.nn.functional as F
    import fmha.torch as fmha_torch
    _SKIP = None
except ImportError as e:  # no torch, or one without torch.library.custom_op (< 2.4)
    torch = fmha_torch = None
    _SKIP = f"torch (>= 2.4) is not importable: {e}"

pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

DEVICES = ["cpu", "cuda"]
DTYPE_IDS = ["f32", "f16", "bf16"]
# Absolute slack on top of 2x torch's own error at the dtype.
ATOL = {"f32": 1e-5, "f16": 1e-4, "bf16": 1e-3}


def _cuda_skip_reason():
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    try:
        fmha.Handle("cuda", 0).close()
    except fmha.Error as e:
        return f"fmha's CUDA backend is not available: {e}"
    return None


_CUDA_SKIP = None if _SKIP else _cuda_skip_reason()


def _device(name):
    if name == "cuda" and _CUDA_SKIP:
        pytest.skip(_CUDA_SKIP)
    # With its index: a CUDA tensor's .device is cuda:0, and torch.device("cuda")
    # (no index) compares unequal to it.
    return torch.device("cuda", torch.cuda.current_device()) if name == "cuda" else torch.device(name)


def _dtype(name):
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[name]


def _randn(gen, *shape, dtype, device):
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype=dtype, device=device)


def _qkv(seed, b, hq, hk, nq, nk, d, dtype, device):
    gen = torch.Generator().manual_seed(seed)
    return (_randn(gen, b, hq, nq, d, dtype=dtype, device=device),
            _randn(gen, b, hk, nk, d, dtype=dtype, device=device),
            _randn(gen, b, hk, nk, d, dtype=dtype, device=device))


def _sdpa64(q, k, v, **kw):
    """torch's SDPA in float64 on the CPU: the reference."""
    return F.scaled_dot_product_attention(q.double().cpu(), k.double().cpu(), v.double().cpu(),
                                          **kw)


def _check_close(got, q, k, v, dtype_id, **kw):
    ref = _sdpa64(q, k, v, **kw)
    assert got.shape == ref.shape and got.dtype == q.dtype and got.device == q.device
    assert bool(torch.isfinite(got).all()), "non-finite values in fmha's output"
    same_dtype = F.scaled_dot_product_attention(q, k, v, **kw)
    baseline = (same_dtype.double().cpu() - ref).abs().max().item()
    err = (got.double().cpu() - ref).abs().max().item()
    bound = 2 * baseline + ATOL[dtype_id]
    assert err <= bound, f"max |fmha - sdpa64| = {err:.3g} > {bound:.3g} (2x torch's {baseline:.3g})"


# (b, hq, hk, nq, nk, d, is_causal, scale): Nq != Nk both ways with torch's
# top-left causal mask, GQA, a decode row, an explicit scale.
SDPA_CASES = {
    "square": (2, 4, 4, 33, 33, 64, False, None),
    "causal_square": (2, 4, 4, 40, 40, 64, True, None),
    "causal_nq_lt_nk": (1, 4, 4, 37, 70, 64, True, None),
    "causal_nq_gt_nk_gqa": (1, 8, 2, 70, 37, 128, True, 0.3),
    "decode_gqa": (3, 6, 3, 1, 50, 32, False, None),
    "causal_decode": (2, 4, 1, 1, 45, 64, True, None),
}


@pytest.mark.parametrize("case", list(SDPA_CASES))
@pytest.mark.parametrize("dtype_id", DTYPE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_matches_torch(device, dtype_id, case):
    device = _device(device)
    b, hq, hk, nq, nk, d, is_causal, scale = SDPA_CASES[case]
    q, k, v = _qkv(11, b, hq, hk, nq, nk, d, _dtype(dtype_id), device)
    kw = dict(is_causal=is_causal, scale=scale, enable_gqa=hq != hk)
    got = fmha_torch.sdpa(q, k, v, **kw)
    _check_close(got, q, k, v, dtype_id, **kw)


@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_strided_and_3d(device):
    device = _device(device)
    # Transposed [B, N, H, D] storage, and the 3-D [H, N, D] form.
    gen = torch.Generator().manual_seed(5)
    x = _randn(gen, 2, 29, 3, 4, 32, dtype=torch.float32, device=device)  # [B, N, qkv, H, D]
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    _check_close(fmha_torch.sdpa(q, k, v, is_causal=True), q, k, v, "f32", is_causal=True)
    q3, k3, v3 = q[0], k[0], v[0]
    got = fmha_torch.sdpa(q3, k3, v3)
    assert got.shape == q3.shape
    _check_close(got, q3, k3, v3, "f32")


@pytest.mark.parametrize("device", DEVICES)
def test_op_lse_and_alignments(device):
    device = _device(device)
    q, k, v = _qkv(3, 2, 4, 2, 24, 40, 64, torch.float32, device)
    qe, ke, ve = (t.double().cpu() for t in (q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)))
    i = torch.arange(24)[:, None]
    j = torch.arange(40)[None, :]
    for alignment, visible in (("bottom_right", j <= i + 40 - 24), ("top_left", j <= i)):
        out, lse = torch.ops.fmha.forward(q, k, v, causal=True, causal_alignment=alignment,
                                          return_lse=True)
        s = (qe @ ke.transpose(-1, -2)) / math.sqrt(64)
        s = s.masked_fill(~visible, -math.inf)
        ref_lse = torch.logsumexp(s, dim=-1)
        ref = torch.softmax(s, dim=-1) @ ve
        assert lse.shape == (2, 4, 24) and lse.dtype == torch.float32 and lse.device == device
        assert (out.double().cpu() - ref).abs().max().item() < 1e-5, alignment
        assert (lse.double().cpu() - ref_lse).abs().max().item() < 1e-4, alignment
    out, lse = torch.ops.fmha.forward(q, k, v)
    assert lse.shape == (0,) and out.shape == q.shape


@pytest.mark.parametrize("device", DEVICES)
def test_fake_tensors(device):
    device = _device(device)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 8, 5, 64, dtype=torch.bfloat16, device=device)
        k = torch.empty(2, 2, 9, 64, dtype=torch.bfloat16, device=device)
        out, lse = torch.ops.fmha.forward(q, k, k, return_lse=True)
        assert out.shape == (2, 8, 5, 64) and out.dtype == torch.bfloat16
        assert out.device.type == device.type and out.is_contiguous()
        assert lse.shape == (2, 8, 5) and lse.dtype == torch.float32
        assert fmha_torch.sdpa(q, k, k, enable_gqa=True).shape == (2, 8, 5, 64)


class _Attention(torch.nn.Module if torch else object):
    """A Llama-style attention block: fused QKV projection, GQA, causal."""

    def __init__(self, dim, hq, hk, d, attention):
        super().__init__()
        self.hq, self.hk, self.d = hq, hk, d
        self.qkv = torch.nn.Linear(dim, (hq + 2 * hk) * d)
        self.proj = torch.nn.Linear(hq * d, dim)
        self.attention = attention

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).split([self.hq * self.d, self.hk * self.d, self.hk * self.d], -1)
        q = q.view(b, n, self.hq, self.d).transpose(1, 2)
        k = k.view(b, n, self.hk, self.d).transpose(1, 2)
        v = v.view(b, n, self.hk, self.d).transpose(1, 2)
        o = self.attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.proj(o.transpose(1, 2).reshape(b, n, self.hq * self.d))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device, backend):
    device = _device(device)
    if backend == "inductor" and device.type == "cuda":
        from torch.utils._triton import has_triton
        if not has_triton():
            pytest.skip("inductor on CUDA needs triton, which this torch lacks")
    torch.manual_seed(7)
    model = _Attention(96, 4, 2, 32, fmha_torch.sdpa).to(device).eval()
    reference = _Attention(96, 4, 2, 32, F.scaled_dot_product_attention).double().eval()
    reference.load_state_dict({n: p.double().cpu() for n, p in model.state_dict().items()})

    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        if backend == "inductor":
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, example_inputs)
        from torch._dynamo.backends.common import aot_autograd
        return aot_autograd(fw_compiler=lambda g, _: g)(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=recording, fullgraph=True, dynamic=True)
    with torch.no_grad():
        for n in (19, 33):  # two lengths: the fake kernel runs with symbolic shapes
            x = torch.randn(2, n, 96, device=device)
            got = compiled(x)
            want = reference(x.double().cpu())
            assert got.shape == want.shape and got.device == device
            err = (got.double().cpu() - want).abs().max().item()
            assert err < 1e-4, f"compiled module: max error {err:.3g} against float64 eager SDPA"
            if n == 19:
                # (dynamo may restart its analysis of the frame once: the
                # backend then sees the graph twice in one compile)
                compiled_graphs = len(graphs)
    assert len(graphs) == compiled_graphs, "the dynamic-shape graph was recompiled for N=33"
    targets = [node.target for node in graphs[-1].graph.nodes]
    assert torch.ops.fmha.forward.default in targets, targets


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    device = _device(device)
    q, k, v = _qkv(9, 1, 4, 2, 9, 13, 32, torch.float32, device)
    for kwargs in ({}, {"causal": True, "return_lse": True},
                   {"causal": True, "causal_alignment": "top_left", "scale": 0.5},
                   {"window_left": 3, "window_right": 2, "softcap": 5.0, "return_lse": True}):
        torch.library.opcheck(torch.ops.fmha.forward.default, (q, k, v), kwargs)


def test_cuda_current_stream():
    device = _device("cuda")
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(side):
        q, k, v = _qkv(21, 2, 8, 2, 300, 512, 128, torch.float16, device)
        torch.cuda._sleep(1_000_000)  # queue work ahead of fmha on the side stream
        q = q * 1  # produced on the side stream after the sleep
        got = fmha_torch.sdpa(q, k, v, is_causal=True, enable_gqa=True)
        handle = fmha._cached_handle("cuda", device.index or 0)
        assert handle._stream == side.cuda_stream, "fmha did not run on torch's current stream"
    side.synchronize()
    _check_close(got, q, k, v, "f16", is_causal=True, enable_gqa=True)


def test_cpu_rejects():
    q, k, v = _qkv(1, 1, 4, 2, 8, 8, 32, torch.float32, "cpu")
    with pytest.raises(TypeError, match="attn_mask"):
        fmha_torch.sdpa(q, k, v, attn_mask=torch.ones(8, 8, dtype=torch.int32), enable_gqa=True)
    with pytest.raises(ValueError, match="bias.dims"):  # fmha's message: not broadcastable
        fmha_torch.sdpa(q, k, v, attn_mask=torch.zeros(3, 8), enable_gqa=True)
    with pytest.raises(NotImplementedError, match="dropout_p"):
        fmha_torch.sdpa(q, k, v, dropout_p=0.1, enable_gqa=True)
    with pytest.raises(ValueError, match="enable_gqa"):
        fmha_torch.sdpa(q, k, v)
    with pytest.raises(ValueError, match="multiple"):
        fmha_torch.sdpa(q[:, :3], k, v, enable_gqa=True)
    with pytest.raises(ValueError, match="head dim"):
        fmha_torch.sdpa(q, k, v[..., :16], enable_gqa=True)
    with pytest.raises(ValueError, match="scale"):
        fmha_torch.sdpa(q, k, v, scale=-1.0, enable_gqa=True)
    with pytest.raises(ValueError, match="4-D"):
        fmha_torch.sdpa(q[0, 0], k[0, 0], v[0, 0])
    with pytest.raises(TypeError, match="float64"):
        fmha_torch.sdpa(q.double(), k.double(), v.double(), enable_gqa=True)
    with pytest.raises(ValueError, match="requires grad"):
        fmha_torch.sdpa(q.requires_grad_(), k, v, enable_gqa=True)
    # The op itself: fmha's own validation (fmha.InvalidArgumentError is a
    # ValueError), and no backward.
    with pytest.raises(ValueError, match="causal_alignment"):
        torch.ops.fmha.forward(q.detach(), k, v, causal=True, causal_alignment="middle")
    out, _ = torch.ops.fmha.forward(q, k, v)
    with pytest.raises(NotImplementedError, match="no backward"):
        out.sum().backward()


# ---- fmha 0.3: masks, FP8, descales, ALiBi ----------------------------------------
def _unsupported_on(device, call):
    """call(); on CUDA a kernel that does not run the 0.3 feature yet
    (ERROR_UNSUPPORTED) skips the case, naming it; the CPU must run it."""
    try:
        return call()
    except fmha.Error as e:
        if device.type == "cuda" and e.status == fmha.Status.ERROR_UNSUPPORTED:
            pytest.skip(f"no CUDA kernel runs this 0.3 feature in this build: {e.message}")
        raise


MASKS = ["float_2d", "float_4d_minus_inf", "bool_key_padding", "bool_causal_like"]


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("dtype_id", DTYPE_IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_attn_mask(device, dtype_id, mask):
    device = _device(device)
    dtype = _dtype(dtype_id)
    b, hq, hk, nq, nk, d = 2, 4, 2, 19, 27, 64
    q, k, v = _qkv(13, b, hq, hk, nq, nk, d, dtype, device)
    gen = torch.Generator().manual_seed(17)
    if mask == "float_2d":
        m = _randn(gen, nq, nk, dtype=dtype, device=device)
    elif mask == "float_4d_minus_inf":
        m = _randn(gen, b, hq, nq, nk, dtype=dtype, device=device)
        m[0, 1, :, 20:] = -math.inf
        m[1, :, 5, 1:] = -math.inf  # key 0 stays: no row fully masked (torch gives NaN)
    elif mask == "bool_key_padding":
        m = torch.ones(b, 1, 1, nk, dtype=torch.bool, device=device)
        m[0, ..., 22:] = False
        m[1, ..., 3:9] = False
    else:
        m = torch.ones(nq, nk, dtype=torch.bool).tril(nk - nq).to(device)
    kw = dict(attn_mask=m, enable_gqa=True)
    got = _unsupported_on(device, lambda: fmha_torch.sdpa(q, k, v, **kw))
    ref = F.scaled_dot_product_attention(q.double().cpu(), k.double().cpu(), v.double().cpu(),
                                         attn_mask=m.cpu() if m.dtype == torch.bool else m.double().cpu(),
                                         enable_gqa=True)
    baseline = (F.scaled_dot_product_attention(q, k, v, **kw).double().cpu() - ref).abs().max().item()
    assert got.dtype == dtype and got.shape == ref.shape
    err = (got.double().cpu() - ref).abs().max().item()
    assert err <= 2 * baseline + ATOL[dtype_id], f"max error {err:.3g} (torch's {baseline:.3g})"


def _fp8_or_skip(name):
    if not hasattr(torch, name):
        pytest.skip(f"this torch has no torch.{name}")
    return getattr(torch, name)


@pytest.mark.parametrize("fp8", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("q_id", ["f16", "bf16", "fp8"])
@pytest.mark.parametrize("device", DEVICES)
def test_op_fp8_descales_alibi(device, q_id, fp8):
    device = _device(device)
    f8 = _fp8_or_skip(fp8)
    b, hq, hk, nq, nk, d = 2, 4, 2, 9, 21, 64
    q, k, v = _qkv(23, b, hq, hk, nq, nk, d, torch.float32, device)
    q = q.to(f8 if q_id == "fp8" else _dtype(q_id))
    k, v = k.to(f8), v.to(f8)
    gen = torch.Generator().manual_seed(29)
    descale = [(torch.rand(b, hk, generator=gen) * 2 + 0.25).to(device) for _ in range(3)]
    slopes = torch.rand(hq, generator=gen).to(device)
    out, lse = _unsupported_on(device, lambda: torch.ops.fmha.forward(
        q, k, v, causal=True, return_lse=True, q_descale=descale[0], k_descale=descale[1],
        v_descale=descale[2], alibi_slopes=slopes, out_dtype=torch.float32))
    assert out.dtype == torch.float32 and lse.dtype == torch.float32
    # float64 reference from the header's formula.
    qe = q.cpu().double()
    ke, ve = (t.cpu().double().repeat_interleave(hq // hk, 1) for t in (k, v))
    qd, kd, vd = (x.cpu().double().repeat_interleave(hq // hk, 1)[:, :, None, None] for x in descale)
    i = torch.arange(nq)[:, None] + nk - nq
    j = torch.arange(nk)[None, :]
    s = (qe @ ke.transpose(-1, -2)) * (qd * kd / math.sqrt(d))
    s = s - slopes.cpu().double()[None, :, None, None] * (i - j).abs()
    s = s.masked_fill(j > i, -math.inf)
    ref = (torch.softmax(s, -1) @ ve) * vd
    assert (out.double().cpu() - ref).abs().max().item() < 1e-4
    assert (lse.double().cpu() - torch.logsumexp(s, -1)).abs().max().item() < 1e-4


@pytest.mark.parametrize("device", DEVICES)
def test_fake_tensors_out_dtype(device):
    device = _device(device)
    f8 = _fp8_or_skip("float8_e4m3fn")
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q16 = torch.empty(2, 8, 5, 64, dtype=torch.float16, device=device)
        q8 = torch.empty(2, 8, 5, 64, dtype=f8, device=device)
        k8 = torch.empty(2, 2, 9, 64, dtype=f8, device=device)
        out, _ = torch.ops.fmha.forward(q16, k8, k8, out_dtype=torch.float32)
        assert out.dtype == torch.float32 and out.shape == (2, 8, 5, 64)
        assert torch.ops.fmha.forward(q8, k8, k8)[0].dtype == torch.bfloat16
        assert torch.ops.fmha.forward(q16, k8, k8)[0].dtype == torch.float16
        bias = torch.empty(5, 9, device=device)
        assert torch.ops.fmha.forward(q16, k8, k8, bias=bias)[0].shape == (2, 8, 5, 64)
        with pytest.raises(TypeError, match="out_dtype"):
            torch.ops.fmha.forward(q16, k8, k8, out_dtype=f8)
        with pytest.raises(TypeError, match="FP8"):
            torch.ops.fmha.forward(q8, q16, q16)


def test_opcheck_numerics():
    q, k, v = _qkv(31, 2, 4, 2, 9, 13, 32, torch.float32, "cpu")
    gen = torch.Generator().manual_seed(37)
    bias = torch.randn(2, 1, 9, 13, generator=gen)
    ds = torch.rand(2, 2, generator=gen) + 0.5
    for kwargs in ({"bias": bias, "return_lse": True},
                   {"q_descale": ds, "k_descale": ds, "v_descale": ds, "out_dtype": torch.float16},
                   {"alibi_slopes": torch.rand(4, generator=gen), "causal": True}):
        torch.library.opcheck(torch.ops.fmha.forward.default, (q, k, v), kwargs)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-rs"]))
