"""fmha.merge() and the serving keywords on the CUDA backend with torch
tensors: key-slice forwards merged against one forward over all keys (the
float64 reference), in place, and a paged decode step against the dense
forward of the gathered pages. Skips (with the reason) without torch, a GPU
or fmha's CUDA backend."""
import pytest

import fmha
from test_forward_cuda import _SKIP, reference64

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")


def slice_forwards(q, k, v, cuts, causal):
    nk = k.shape[2]
    outs, lses = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        window = (-1, nk - b) if causal else (-1, -1)  # the causal diagonal of all the keys
        o, lse = fmha.forward(q, k[:, :, a:b], v[:, :, a:b], window=window, return_lse=True)
        outs.append(o)
        lses.append(lse)
    return outs, lses


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("parts", [1, 2, 5, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_merge_equals_one_forward(dtype, parts, causal):
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(parts * 10 + causal)
    q = torch.randn(2, 8, 33, 64, device="cuda", dtype=dt, generator=g)
    k = torch.randn(2, 2, 257, 64, device="cuda", dtype=dt, generator=g)
    v = torch.randn(2, 2, 257, 64, device="cuda", dtype=dt, generator=g)
    cuts = sorted(torch.randperm(256, generator=torch.Generator().manual_seed(parts))[:parts - 1].add(1).tolist())
    outs, lses = slice_forwards(q, k, v, [0, *cuts, 257], causal)
    got, lse = fmha.merge(outs, lses, out=torch.empty_like(q, dtype=torch.float32), return_lse=True)
    ref_o, ref_lse = reference64(q, k, v, causal=causal)
    tol = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-4}[dtype]
    assert (got.double() - ref_o).abs().max().item() <= tol * (1 + ref_o.abs().max().item())
    assert (lse.double() - ref_lse).abs().max().item() <= 1e-3


def test_cuda_merge_in_place_and_on_a_stream():
    q, k, v = (torch.randn(s, device="cuda", dtype=torch.float16) for s in [(1, 4, 9, 64), (1, 4, 90, 64),
                                                                           (1, 4, 90, 64)])
    outs, lses = slice_forwards(q, k, v, [0, 40, 90], False)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got, lse = fmha.merge(outs, lses, out=outs[0], out_lse=lses[0])
    torch.cuda.current_stream().wait_stream(s)
    assert got is outs[0] and lse is lses[0]
    ref_o, ref_lse = reference64(q, k, v)
    assert (outs[0].double() - ref_o).abs().max().item() <= 2e-3 * (1 + ref_o.abs().max().item())


def test_cuda_paged_decode_step():
    b, hq, hk, d, page, max_pages = 4, 8, 2, 128, 16, 8
    pages = b * max_pages
    kc = torch.randn(pages, page, hk, d, device="cuda", dtype=torch.bfloat16)  # vLLM storage
    vc = torch.randn(pages, page, hk, d, device="cuda", dtype=torch.bfloat16)
    table = torch.randperm(pages, device="cuda").to(torch.int32).reshape(b, max_pages)
    used = torch.tensor([1, 0, max_pages * page, 37], device="cuda", dtype=torch.int32)
    q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16)
    try:
        got, lse = fmha.forward(q, kc.transpose(1, 2), vc.transpose(1, 2), seqused_k=used, block_table=table,
                                return_lse=True)
    except fmha.Error as e:
        if e.status == fmha.Status.ERROR_UNSUPPORTED:
            pytest.skip(f"no CUDA kernel runs paged K/V in this build: {e.message}")
        raise
    for s in range(b):
        n = int(used[s])
        if n == 0:
            assert torch.all(got[s] == 0) and torch.all(torch.isneginf(lse[s]))
            continue
        idx = torch.arange(n, device="cuda")
        slots = table[s, idx // page].long() * page + idx % page
        ks = kc.reshape(pages * page, hk, d)[slots].transpose(0, 1)[None]
        vs = vc.reshape(pages * page, hk, d)[slots].transpose(0, 1)[None]
        ref_o, ref_lse = reference64(q[s:s + 1], ks, vs)
        assert (got[s:s + 1].double() - ref_o).abs().max().item() <= 2e-2 * (1 + ref_o.abs().max().item())
        assert (lse[s:s + 1].double() - ref_lse).abs().max().item() <= 1e-3
