//! decoder_layer: one decoder layer's attention with the fmha crate, on the
//! CPU backend.
//!
//! Llama-style grouped-query attention (32 query heads share 8 KV heads,
//! head_dim 128), causal, bf16, log-sum-exp returned. Q, K and V are views
//! into the fused QKV projection's output `[B, N, Hq + 2*Hk, D]` (`narrow`
//! picks the heads, `permute` makes them `[B, H, N, D]`); the output is
//! written into `[B, N, Hq, D]`, which the output projection reads as
//! `[B, N, Hq * D]`. Nothing is copied.
//!
//!   decoder_layer [N]      (sequence length, default 256)
//!
//! Checks a few rows against a float64 reference; exits non-zero on failure.
use fmha::{Bf16, CausalAlignment, Element, Handle, LseMut, Options, TensorView, TensorViewMut};

const B: usize = 1;
const HQ: usize = 32;
const HK: usize = 8;
const D: usize = 128;

/// Max |o - reference| and |lse - reference| of query row i, head h.
fn row_error(
    q: &TensorView<'_, Bf16>,
    k: &TensorView<'_, Bf16>,
    v: &TensorView<'_, Bf16>,
    o: &TensorView<'_, Bf16>,
    lse: f32,
    h: usize,
    i: usize,
) -> (f64, f64) {
    let x =
        |t: &TensorView<'_, Bf16>, head, row, d| t.get([0, head, row, d]).unwrap().to_f32() as f64;
    let kv = h / (HQ / HK);
    let s: Vec<f64> =
        (0..=i) // causal, Nq == Nk: keys 0..=i
            .map(|j| {
                (0..D).map(|d| x(q, h, i, d) * x(k, kv, j, d)).sum::<f64>() / (D as f64).sqrt()
            })
            .collect();
    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = s.iter().map(|s| (s - m).exp()).sum();
    let err = (0..D)
        .map(|d| {
            let want: f64 = s
                .iter()
                .enumerate()
                .map(|(j, s)| (s - m).exp() * x(v, kv, j, d))
                .sum::<f64>()
                / sum;
            (want - x(o, h, i, d)).abs()
        })
        .fold(0.0, f64::max);
    (err, (m + sum.ln() - lse as f64).abs())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(256), |a| a.parse())?;

    // The fused projection output, with deterministic pseudo-random values.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let qkv: Vec<Bf16> = (0..B * n * (HQ + 2 * HK) * D)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            Bf16::from_f32((state >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        })
        .collect();
    let mut attn_out = vec![Bf16::default(); B * n * HQ * D];
    let mut lse = vec![0f32; B * HQ * n];

    let fused = TensorView::new(&qkv, [B, n, HQ + 2 * HK, D])?;
    let q = fused.narrow(2, 0, HQ)?.permute([0, 2, 1, 3]);
    let k = fused.narrow(2, HQ, HK)?.permute([0, 2, 1, 3]);
    let v = fused.narrow(2, HQ + HK, HK)?.permute([0, 2, 1, 3]);
    let mut o = TensorViewMut::new(&mut attn_out, [B, n, HQ, D])?.permute([0, 2, 1, 3]);
    let options = Options::new().causal(CausalAlignment::BottomRight);

    let mut handle = Handle::cpu()?;
    handle.forward(
        &q,
        &k,
        &v,
        &mut o,
        Some(&mut LseMut::new(&mut lse)),
        &options,
    )?;
    let chosen = handle.explain(&q, &k, &v, &o, None, &options)?;
    println!(
        "fmha {:?}: B={B} Hq={HQ} Hk={HK} N={n} D={D} causal bf16, {}",
        fmha::version(),
        chosen.lines().next().unwrap_or("")
    );

    let (mut err, mut lse_err) = (0f64, 0f64);
    for h in [0, 9, 31] {
        for i in [0, n / 2, n - 1] {
            let (e, l) = row_error(&q, &k, &v, &o.as_view(), lse[h * n + i], h, i);
            err = err.max(e);
            lse_err = lse_err.max(l);
        }
    }
    println!("max |o - ref| = {err:.2e}, max |lse - ref| = {lse_err:.2e}");
    if err < 1e-2 && lse_err < 1e-3 {
        Ok(())
    } else {
        Err("error above tolerance".into())
    }
}
