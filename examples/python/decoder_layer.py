"""decoder_layer.py: one decoder layer's attention with fmha's Python binding.

Llama-style grouped-query attention (32 query heads share 8 KV heads,
head_dim 128), causal, float16, log-sum-exp returned. Q, K and V are views
into the fused QKV projection's output [B, N, Hq + 2*Hk, D]; the output is
written into a [B, N, Hq, D] buffer that the output projection reads as
[B, N, Hq * D]. fmha reads the strides of the views: nothing is copied.

    PYTHONPATH=<build>/python python3 examples/python/decoder_layer.py [N]

Needs numpy. Checks the result against a float64 numpy reference.
"""
import sys

import numpy as np

import fmha

B, HQ, HK, D = 1, 32, 8, 128


def reference(q, k, v):
    """Causal GQA attention in float64: (o, lse)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    k, v = (np.repeat(x, HQ // HK, axis=1) for x in (k, v))
    n = q.shape[2]
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
    s[..., np.triu(np.ones((n, n), dtype=bool), 1)] = -np.inf
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    return p @ v / p.sum(-1, keepdims=True), (m + np.log(p.sum(-1, keepdims=True)))[..., 0]


def main(n):
    rng = np.random.default_rng(7)
    hidden_qkv = rng.standard_normal((B, n, HQ + 2 * HK, D)).astype(np.float16)

    # [B, N, heads, D] -> [B, heads, N, D] views, as torch SDPA expects them.
    q = hidden_qkv[:, :, :HQ].transpose(0, 2, 1, 3)
    k = hidden_qkv[:, :, HQ:HQ + HK].transpose(0, 2, 1, 3)
    v = hidden_qkv[:, :, HQ + HK:].transpose(0, 2, 1, 3)
    attn_out = np.empty((B, n, HQ, D), dtype=np.float16)  # what o_proj consumes

    o, lse = fmha.forward(q, k, v, causal=True, return_lse=True,
                          out=attn_out.transpose(0, 2, 1, 3))
    o_proj_input = attn_out.reshape(B, n, HQ * D)  # no copy needed

    print(f"fmha {fmha.__version__}: B={B} Hq={HQ} Hk={HK} N={n} D={D} causal float16, "
          f"{fmha.explain(q, k, v, causal=True).splitlines()[0]}")
    ref_o, ref_lse = reference(q, k, v)
    err = np.abs(o.astype(np.float64) - ref_o).max()
    lse_err = np.abs(lse - ref_lse).max()
    print(f"o_proj input {o_proj_input.shape}; max |o - ref| = {err:.2e}, "
          f"max |lse - ref| = {lse_err:.2e}")
    return 0 if err < 4e-3 and lse_err < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 256))
