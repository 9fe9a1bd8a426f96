#!/usr/bin/env python3
"""A numpy model of cuda_sm90_ws's online softmax per warp (16 query rows, key
tiles of 128), the old step (the tile max first, rescale when it grows by more
than 2^kRescaleLog2) against the speculative one (common/softmax.cuh's
step_speculative: exponentials against the running max, a vote on the lanes'
row sums, the rare rescale from p's maximum, the redo on an overflowed p), with
P rounded to e4m3 before P V as the FP8 prefill kernel does (--no-fp8p: P in
FP32). It prints rel-L2 and max error against a float64 softmax, and how often
each path ran, on the inference-numerics matrix's all-e4m3 rising-logits case
(tests/common/serving_case.cpp: k[j,0] = 32 (j / 128), q[i,0] in {4, 64, 2, -4}
by (i / 16) % 4, other elements +-1 / +-2; Nq 64, Nk 520, D 128, bottom-right
causal) and on N(0, 1) scores.

  python3 tools/sm90_softmax_model.py [--no-fp8p] [--trials 3]

Needs numpy and ml_dtypes (PyPI).
"""
import argparse

import ml_dtypes
import numpy as np

f32 = np.float32
RESCALE_LOG2 = 8.0
BOUND = f32(2.0 ** RESCALE_LOG2)


def ex2(x):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp2(x.astype(np.float64)).astype(f32)


def warp_softmax(S, V, c, speculative, fp8p, block_n=128):
    """O (float64) of one warp's rows S [16, N] (raw scores, -inf masked) over V."""
    rows = S.shape[0]
    q8 = (lambda x: x.astype(ml_dtypes.float8_e4m3fn).astype(f32)) if fp8p else (lambda x: x)
    m = np.full(rows, -np.inf, f32)
    l = np.zeros(rows, f32)
    o = np.zeros((rows, V.shape[1]))
    paths = {"plain": 0, "kept": 0, "moved": 0, "redo": 0}
    for t0 in range(0, S.shape[1], block_n):
        s = S[:, t0:t0 + block_n].astype(f32)
        v = V[t0:t0 + block_n]

        def plain():
            nonlocal m, l, o
            mx = np.maximum(m, s.max(1))
            with np.errstate(invalid="ignore"):
                grow = (mx - m) * c > RESCALE_LOG2
                a = ex2(m * c - np.where(mx == -np.inf, 0, mx * c))
            alpha = np.where(grow, a, f32(1))
            m = np.where(grow, mx, m)
            l = l * alpha
            base = np.where(m == -np.inf, 0, m * c).astype(f32)
            p = ex2(s * c - base[:, None])
            l = l + p.sum(1, dtype=f32)
            o = o * alpha[:, None] + q8(p).astype(np.float64) @ v

        if t0 == 0 or np.any(m == -np.inf) or not speculative:
            plain()
            paths["plain"] += 1
            continue
        base = (m * c).astype(f32)
        p = ex2(s * c - base[:, None])
        lane = (np.arange(s.shape[1]) % 8) // 2  # the quad lane holding each key of an n8 block
        lt = np.stack([p[:, lane == k].sum(1, dtype=f32) for k in range(4)], 1)
        if not (lt > BOUND).any():
            l = l + lt.sum(1, dtype=f32)
            o = o + q8(p).astype(np.float64) @ v
            paths["kept"] += 1
            continue
        pm = p.max(1)
        if np.isinf(pm).any():
            plain()
            paths["redo"] += 1
            continue
        paths["moved"] += 1
        f = np.ones(rows, f32)
        for r in range(rows):
            if pm[r] > 1:
                m[r] = f32((base[r] + f32(np.log2(pm[r]))) / c)
                f[r] = ex2(np.array(base[r] - f32(m[r] * c)))
        l = l * f + (lt * f[:, None]).sum(1, dtype=f32)
        o = o * f[:, None] + q8(p * f[:, None]).astype(np.float64) @ v
    return o / l[:, None], paths


def run(S, V, scale, speculative, fp8p):
    c = f32(scale * np.log2(np.e))
    outs, paths = [], {}
    for r0 in range(0, S.shape[0], 16):
        o, p = warp_softmax(S[r0:r0 + 16], V, c, speculative, fp8p)
        outs.append(o)
        for k, n in p.items():
            paths[k] = paths.get(k, 0) + n
    o = np.concatenate(outs)
    sd = S.astype(np.float64) * scale
    w = np.exp(sd - sd.max(1, keepdims=True))
    ref = (w @ V) / w.sum(1, keepdims=True)
    return np.linalg.norm(o - ref) / np.linalg.norm(ref), np.abs(o - ref).max() / np.abs(ref).max(), paths


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-fp8p", action="store_true", help="keep P in FP32 (the 16-bit kernels)")
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    fp8p = not args.no_fp8p
    rs = np.random.RandomState(0)
    d, nq, nk = 128, 64, 520
    scale = 1 / np.sqrt(d)
    e4m3 = lambda x: x.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    for trial in range(args.trials):
        q = rs.choice([-2, -1, 1, 2], (nq, d)).astype(f32)
        q[:, 0] = np.array([4, 64, 2, -4], f32)[(np.arange(nq) // 16) % 4]
        k = rs.choice([-2, -1, 1, 2], (nk, d)).astype(f32)
        k[:, 0] = 32 * (np.arange(nk) // 128)
        v = e4m3(rs.randn(nk, d).astype(f32))
        s = (q.astype(np.float64) @ k.T.astype(np.float64)).astype(f32)
        s = np.where(np.arange(nk)[None, :] > np.arange(nq)[:, None] + (nk - nq), -np.inf, s).astype(f32)
        for spec in (False, True):
            rel, mx, paths = run(s, v, scale, spec, fp8p)
            print(f"rising trial {trial} {'speculative' if spec else 'old step  '}: rel_l2 {rel:.4f}, "
                  f"max_abs / max|ref| {mx:.4f}, key tiles by path {paths}")
    s = rs.randn(64, 8192).astype(f32) * 10
    v = e4m3(rs.randn(8192, d).astype(f32))
    for spec in (False, True):
        rel, mx, paths = run(s, v, 1 / 11.3, spec, fp8p)
        print(f"N(0,1) logits {'speculative' if spec else 'old step  '}: rel_l2 {rel:.4f}, max {mx:.4f}, {paths}")


if __name__ == "__main__":
    main()
