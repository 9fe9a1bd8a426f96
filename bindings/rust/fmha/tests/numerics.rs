//! fmha 0.3's inference numerics through the safe crate on the CPU backend,
//! against a float64 reference of fmha.h's formula: FP8 K/V (and FP8 q), an
//! output type other than the inputs', descale factors, an additive bias in
//! broadcast layouts (with -inf rows), ALiBi slopes `[Hq]` and `[B, Hq]`, and
//! the errors.
use fmha::{
    Bf16, CausalAlignment, Element, F32View, Handle, LseMut, Options, OutputElement, Status,
    TensorView, TensorViewMut, F16, F8E4M3, F8E5M2,
};

mod common;
use common::Rng;

/// A problem and its 0.3 inputs, as host data the reference reads too.
struct Case {
    b: usize,
    hq: usize,
    hk: usize,
    nq: usize,
    nk: usize,
    d: usize,
    causal: Option<CausalAlignment>,
    /// [b, hk] each, or empty for none.
    descale: [Vec<f32>; 3],
    /// The bias as f64 values with its dims and strides (empty: none).
    bias: Option<(Vec<f64>, [usize; 4], [usize; 4])>,
    /// Slopes and row stride (0: [hq]).
    alibi: Option<(Vec<f32>, usize)>,
}

impl Case {
    fn new(b: usize, hq: usize, hk: usize, nq: usize, nk: usize, d: usize) -> Case {
        Case {
            b,
            hq,
            hk,
            nq,
            nk,
            d,
            causal: None,
            descale: [Vec::new(), Vec::new(), Vec::new()],
            bias: None,
            alibi: None,
        }
    }

    fn diag(&self, i: usize) -> i64 {
        match self.causal {
            Some(CausalAlignment::TopLeft) => i as i64,
            _ => i as i64 + self.nk as i64 - self.nq as i64,
        }
    }

    /// (o, lse) in f64 from fmha.h's formula.
    fn reference(&self, q: &[f64], k: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (b_, hq, hk, nq, nk, d) = (self.b, self.hq, self.hk, self.nq, self.nk, self.d);
        let scale = 1.0 / (d as f64).sqrt();
        let factor = |which: usize, b: usize, g: usize| {
            self.descale[which]
                .get(b * hk + g)
                .map_or(1.0, |&x| x as f64)
        };
        let mut o = vec![0.0; b_ * hq * nq * d];
        let mut lse = vec![f64::NEG_INFINITY; b_ * hq * nq];
        for b in 0..b_ {
            for h in 0..hq {
                let g = h / (hq / hk);
                let qk_scale = scale * factor(0, b, g) * factor(1, b, g);
                for i in 0..nq {
                    let diag = self.diag(i);
                    let mut s = vec![f64::NEG_INFINITY; nk];
                    for (j, sj) in s.iter_mut().enumerate() {
                        if self.causal.is_some() && j as i64 > diag {
                            continue;
                        }
                        let qrow = &q[((b * hq + h) * nq + i) * d..][..d];
                        let krow = &k[((b * hk + g) * nk + j) * d..][..d];
                        let mut x =
                            qk_scale * qrow.iter().zip(krow).map(|(a, c)| a * c).sum::<f64>();
                        if let Some((vals, dims, strides)) = &self.bias {
                            let idx = [b, h, i, j];
                            let off: usize = (0..4)
                                .map(|t| if dims[t] == 1 { 0 } else { idx[t] * strides[t] })
                                .sum();
                            x += vals[off];
                        }
                        if let Some((slopes, stride)) = &self.alibi {
                            x -= slopes[b * stride + h] as f64 * (diag - j as i64).abs() as f64;
                        }
                        *sj = x;
                    }
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    if m == f64::NEG_INFINITY {
                        continue; // no key with weight: o = 0, lse = -inf
                    }
                    let p: Vec<f64> = s.iter().map(|&x| (x - m).exp()).collect();
                    let l: f64 = p.iter().sum();
                    lse[(b * hq + h) * nq + i] = m + l.ln();
                    let vd = factor(2, b, g);
                    for e in 0..d {
                        let acc: f64 = (0..nk)
                            .map(|j| p[j] * v[((b * hk + g) * nk + j) * d + e])
                            .sum();
                        o[((b * hq + h) * nq + i) * d + e] = vd * acc / l;
                    }
                }
            }
        }
        (o, lse)
    }

    fn options<'a>(&'a self, bias: Option<Options<'a>>) -> Options<'a> {
        let mut opts = bias.unwrap_or_default();
        if let Some(a) = self.causal {
            opts = opts.causal(a);
        }
        let views: Vec<Option<F32View<'a>>> = self
            .descale
            .iter()
            .map(|x| (!x.is_empty()).then(|| F32View::new(x)))
            .collect();
        if let Some(x) = views[0] {
            opts = opts.q_descale(x);
        }
        if let Some(x) = views[1] {
            opts = opts.k_descale(x);
        }
        if let Some(x) = views[2] {
            opts = opts.v_descale(x);
        }
        if let Some((slopes, stride)) = &self.alibi {
            opts = opts.alibi_slopes(F32View::new(slopes), *stride);
        }
        opts
    }
}

fn f64s<T: Element>(x: &[T]) -> Vec<f64> {
    x.iter().map(|&y| y.to_f32() as f64).collect()
}

/// Two units in the last place of the output type, relative.
fn tolerance<O: Element>() -> f64 {
    match O::DTYPE {
        fmha::DType::F32 => 2e-5,
        fmha::DType::F16 => 2.0 * 2f64.powi(-10),
        _ => 2.0 * 2f64.powi(-7),
    }
}

/// Runs the case with q of Q, k/v of KV, o of O (poisoned first) and a bias
/// of B built from `bias`; compares o and lse with the reference.
fn run<Q: Element, KV: Element, O: OutputElement, B: OutputElement>(case: &Case, seed: u64) {
    let mut rng = Rng(seed);
    let (b, hq, hk, nq, nk, d) = (case.b, case.hq, case.hk, case.nq, case.nk, case.d);
    let q: Vec<Q> = rng.vec(b * hq * nq * d);
    let k: Vec<KV> = rng.vec(b * hk * nk * d);
    let v: Vec<KV> = rng.vec(b * hk * nk * d);
    let bias_data: Option<Vec<B>> = case
        .bias
        .as_ref()
        .map(|(vals, _, _)| vals.iter().map(|&x| B::from_f32(x as f32)).collect());
    // The reference reads the bias as stored (rounded to B).
    let mut case_ref = Case {
        bias: None,
        descale: case.descale.clone(),
        alibi: case.alibi.clone(),
        ..*case
    };
    if let (Some((_, dims, strides)), Some(data)) = (&case.bias, &bias_data) {
        case_ref.bias = Some((f64s(data), *dims, *strides));
    }
    let bias_opts = match (&case.bias, &bias_data) {
        (Some((_, dims, strides)), Some(data)) => {
            Some(Options::new().bias(TensorView::with_strides(data, *dims, *strides).unwrap()))
        }
        _ => None,
    };
    let opts = case.options(bias_opts);
    let mut o = vec![O::from_f32(f32::NAN); b * hq * nq * d];
    let mut lse = vec![f32::NAN; b * hq * nq];
    let mut handle = Handle::cpu().unwrap();
    handle
        .forward(
            &TensorView::new(&q, [b, hq, nq, d]).unwrap(),
            &TensorView::new(&k, [b, hk, nk, d]).unwrap(),
            &TensorView::new(&v, [b, hk, nk, d]).unwrap(),
            &mut TensorViewMut::new(&mut o, [b, hq, nq, d]).unwrap(),
            Some(&mut LseMut::new(&mut lse)),
            &opts,
        )
        .unwrap();
    let (ref_o, ref_lse) = case_ref.reference(&f64s(&q), &f64s(&k), &f64s(&v));
    let tol = tolerance::<O>();
    for (x, (got, want)) in o.iter().zip(&ref_o).enumerate() {
        let got = got.to_f32() as f64;
        assert!(
            (got - want).abs() <= tol * (1.0 + want.abs()),
            "o[{x}] = {got}, reference {want}"
        );
    }
    for (x, (got, want)) in lse.iter().zip(&ref_lse).enumerate() {
        let got = *got as f64;
        if want.is_infinite() {
            assert_eq!(got, *want, "lse[{x}]");
        } else {
            assert!(
                (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "lse[{x}] = {got}, reference {want}"
            );
        }
    }
}

#[test]
fn fp8_kv_under_16bit_q_with_each_output_type() {
    let case = Case {
        causal: Some(CausalAlignment::BottomRight),
        ..Case::new(2, 4, 2, 9, 17, 32)
    };
    run::<F16, F8E4M3, f32, f32>(&case, 1);
    run::<Bf16, F8E4M3, F16, f32>(&case, 2);
    run::<F16, F8E5M2, Bf16, f32>(&case, 3);
    run::<Bf16, F8E5M2, f32, f32>(&case, 4);
}

#[test]
fn fp8_throughout() {
    let case = Case::new(1, 4, 1, 12, 20, 64);
    run::<F8E4M3, F8E4M3, Bf16, f32>(&case, 5);
    run::<F8E5M2, F8E4M3, f32, f32>(&case, 6);
    run::<F8E5M2, F8E5M2, F16, f32>(&case, 7);
}

#[test]
fn output_type_other_than_the_inputs() {
    let case = Case::new(2, 2, 2, 11, 13, 16);
    run::<F16, F16, f32, f32>(&case, 8);
    run::<f32, f32, Bf16, f32>(&case, 9);
}

#[test]
fn descales() {
    let mut rng = Rng(10);
    let mut case = Case::new(3, 6, 2, 8, 15, 32);
    case.descale = [rng.factors(6), rng.factors(6), rng.factors(6)];
    run::<f32, f32, f32, f32>(&case, 11);
    run::<F16, F8E4M3, f32, f32>(&case, 12);
    case.descale[0].clear();
    case.descale[2].clear();
    run::<Bf16, Bf16, f32, f32>(&case, 13);
}

#[test]
fn bias_layouts() {
    let (b, hq, nq, nk) = (2, 4, 7, 19);
    let mut rng = Rng(14);
    let mut normal = |n: usize| (0..n).map(|_| rng.normal()).collect::<Vec<f64>>();
    // [B, Hq, Nq, Nk] dense; [1, 1, Nq, Nk] shared; [B, 1, 1, Nk] key padding
    // with -inf; a stride-0 broadcast of [1, Hq, 1, Nk]; a transposed buffer;
    // whole rows of -inf.
    let mut padding = vec![0.0; b * nk];
    padding[12..nk]
        .iter_mut()
        .for_each(|x| *x = f64::NEG_INFINITY);
    padding[nk..nk + 3]
        .iter_mut()
        .for_each(|x| *x = f64::NEG_INFINITY);
    let mut rows = normal(b * hq * nq * nk);
    rows[(hq + 1) * nq * nk + 3 * nk..][..nk]
        .iter_mut()
        .for_each(|x| *x = f64::NEG_INFINITY);
    let layouts: Vec<(Vec<f64>, [usize; 4], [usize; 4])> = vec![
        (
            normal(b * hq * nq * nk),
            [b, hq, nq, nk],
            [hq * nq * nk, nq * nk, nk, 1],
        ),
        (normal(nq * nk), [1, 1, nq, nk], [0, 0, nk, 1]),
        (padding, [b, 1, 1, nk], [nk, 0, 0, 1]),
        (normal(hq * nk), [b, hq, nq, nk], [0, nk, 0, 1]),
        (
            normal(b * hq * nq * nk),
            [b, hq, nq, nk],
            [hq * nq * nk, nq * nk, 1, nq],
        ),
        (rows, [b, hq, nq, nk], [hq * nq * nk, nq * nk, nk, 1]),
    ];
    for (x, bias) in layouts.into_iter().enumerate() {
        let case = Case {
            bias: Some(bias),
            ..Case::new(b, hq, 2, nq, nk, 16)
        };
        run::<f32, f32, f32, f32>(&case, 20 + x as u64);
        run::<F16, F16, F16, F16>(&case, 30 + x as u64);
        run::<Bf16, F8E4M3, f32, Bf16>(&case, 40 + x as u64);
    }
}

#[test]
fn alibi_per_head_and_per_sequence() {
    let hq = 8;
    let geometric: Vec<f32> = (1..=hq)
        .map(|i| 2f32.powf(-8.0 * i as f32 / hq as f32))
        .collect();
    for causal in [
        None,
        Some(CausalAlignment::BottomRight),
        Some(CausalAlignment::TopLeft),
    ] {
        let case = Case {
            causal,
            alibi: Some((geometric.clone(), 0)),
            ..Case::new(2, hq, 2, 10, 23, 16)
        };
        run::<f32, f32, f32, f32>(&case, 50);
    }
    // [B, Hq] with rows 10 apart; negative slopes are applied too.
    let mut rng = Rng(51);
    let per_seq: Vec<f32> = (0..3 * 10).map(|_| (rng.uniform() - 0.5) as f32).collect();
    let case = Case {
        alibi: Some((per_seq, 10)),
        ..Case::new(3, 4, 1, 6, 9, 8)
    };
    run::<F16, F16, f32, f32>(&case, 52);
}

#[test]
fn errors_name_the_field() {
    let (q, k) = (vec![0.5f32; 2 * 4 * 3 * 8], vec![0.25f32; 2 * 2 * 5 * 8]);
    let qv = TensorView::new(&q, [2, 4, 3, 8]).unwrap();
    let kv = TensorView::new(&k, [2, 2, 5, 8]).unwrap();
    let mut o = vec![f32::NAN; q.len()];
    let mut handle = Handle::cpu().unwrap();
    let mut attempt = |opts: &Options<'_>| {
        let err = handle
            .forward(
                &qv,
                &kv,
                &kv,
                &mut TensorViewMut::new(&mut o, [2, 4, 3, 8]).unwrap(),
                None,
                opts,
            )
            .unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument, "{err}");
        err.message().to_owned()
    };
    let three = [1f32; 3];
    assert!(attempt(&Options::new().k_descale(F32View::new(&three)))
        .contains("k_descale has 3 factors"));
    assert!(
        attempt(&Options::new().alibi_slopes(F32View::new(&three), 0))
            .contains("alibi_slopes has 3")
    );
    let eight = [1f32; 8];
    let m = attempt(&Options::new().alibi_slopes(F32View::new(&eight), 2));
    assert!(m.contains("alibi_slopes_stride=2"), "{m}"); // the library: a stride below Hq
    let bias = vec![0f32; 3 * 4];
    let m = attempt(&Options::new().bias(TensorView::new(&bias, [1, 1, 3, 4]).unwrap()));
    assert!(m.contains("bias.dims[3]=4"), "{m}");
    // Nothing was written.
    assert!(o.iter().all(|x| x.is_nan()));
    // FP8 q over 16-bit K/V: the library's dtype rule.
    let q8: Vec<F8E4M3> = q.iter().map(|&x| F8E4M3::from_f32(x)).collect();
    let err = handle
        .forward(
            &TensorView::new(&q8, [2, 4, 3, 8]).unwrap(),
            &kv,
            &kv,
            &mut TensorViewMut::new(&mut o, [2, 4, 3, 8]).unwrap(),
            None,
            &Options::new(),
        )
        .unwrap_err();
    assert!(err.message().contains("k.dtype"), "{err}");
}
