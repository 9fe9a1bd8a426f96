//! Handle::forward on the CPU backend against a float64 reference: dtypes,
//! GQA, both causal alignments, windows, softcap, lse, strided views, and the
//! errors (with their statuses).
use fmha::{
    Bf16, CausalAlignment, Device, Element, Handle, LseMut, Memory, Options, OutputElement, Status,
    TensorView, TensorViewMut, F16,
};

mod common;
use common::Rng;

#[derive(Clone, Copy, Debug)]
struct Case {
    b: usize,
    hq: usize,
    hk: usize,
    nq: usize,
    nk: usize,
    d: usize,
    causal: Option<CausalAlignment>,
    window: (Option<u32>, Option<u32>),
    scale: Option<f32>,
    softcap: f32,
}

const BASE: Case = Case {
    b: 2,
    hq: 4,
    hk: 4,
    nq: 23,
    nk: 23,
    d: 32,
    causal: None,
    window: (None, None),
    scale: None,
    softcap: 0.0,
};

impl Case {
    fn options(&self) -> Options<'static> {
        let mut o = Options::new()
            .window(self.window.0, self.window.1)
            .softcap(self.softcap);
        if let Some(a) = self.causal {
            o = o.causal(a);
        }
        if let Some(s) = self.scale {
            o = o.scale(s);
        }
        o
    }

    fn visible(&self, i: usize, j: usize) -> bool {
        let diag = match self.causal {
            Some(CausalAlignment::TopLeft) => i as i64,
            _ => i as i64 + self.nk as i64 - self.nq as i64,
        };
        let j = j as i64;
        let right = if self.causal.is_some() {
            Some(0)
        } else {
            self.window.1
        };
        self.window.0.map_or(true, |l| j >= diag - l as i64)
            && right.map_or(true, |r| j <= diag + r as i64)
    }
}

/// float64 (o, lse) for contiguous [B, H, N, D] inputs; empty rows: 0, -inf.
fn reference(c: &Case, q: &[f64], k: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let scale = c.scale.map_or(1.0 / (c.d as f64).sqrt(), |s| s as f64);
    let mut o = vec![0.0; c.b * c.hq * c.nq * c.d];
    let mut lse = vec![f64::NEG_INFINITY; c.b * c.hq * c.nq];
    for b in 0..c.b {
        for h in 0..c.hq {
            let kv = h / (c.hq / c.hk);
            for i in 0..c.nq {
                let qrow = &q[((b * c.hq + h) * c.nq + i) * c.d..][..c.d];
                let s: Vec<(usize, f64)> = (0..c.nk)
                    .filter(|&j| c.visible(i, j))
                    .map(|j| {
                        let krow = &k[((b * c.hk + kv) * c.nk + j) * c.d..][..c.d];
                        let mut x = scale * qrow.iter().zip(krow).map(|(a, b)| a * b).sum::<f64>();
                        if c.softcap != 0.0 {
                            x = c.softcap as f64 * (x / c.softcap as f64).tanh();
                        }
                        (j, x)
                    })
                    .collect();
                if s.is_empty() {
                    continue;
                }
                let m = s.iter().map(|&(_, x)| x).fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = s.iter().map(|&(_, x)| (x - m).exp()).sum();
                let row = (b * c.hq + h) * c.nq + i;
                lse[row] = m + sum.ln();
                for &(j, x) in &s {
                    let w = (x - m).exp() / sum;
                    let vrow = &v[((b * c.hk + kv) * c.nk + j) * c.d..][..c.d];
                    for d in 0..c.d {
                        o[row * c.d + d] += w * vrow[d];
                    }
                }
            }
        }
    }
    (o, lse)
}

/// Two units in the last place of the output type, relative.
fn tolerance<T: Element>() -> f64 {
    match T::DTYPE {
        fmha::DType::F32 => 2e-5,
        fmha::DType::F16 => 2.0 * 2f64.powi(-10),
        fmha::DType::Bf16 => 2.0 * 2f64.powi(-7),
        fmha::DType::F8E4M3 | fmha::DType::F8E5M2 => unreachable!("not an output type"),
    }
}

fn to64<T: Element>(x: &[T]) -> Vec<f64> {
    x.iter().map(|&e| e.to_f32() as f64).collect()
}

fn run<T: OutputElement>(c: Case, seed: u64) {
    let mut rng = Rng(seed);
    let q: Vec<T> = rng.vec(c.b * c.hq * c.nq * c.d);
    let k: Vec<T> = rng.vec(c.b * c.hk * c.nk * c.d);
    let v: Vec<T> = rng.vec(c.b * c.hk * c.nk * c.d);
    let mut o = vec![T::from_f32(f32::NAN); q.len()]; // poisoned
    let mut lse = vec![f32::NAN; c.b * c.hq * c.nq];
    let mut handle = Handle::cpu().unwrap();
    handle
        .forward(
            &TensorView::new(&q, [c.b, c.hq, c.nq, c.d]).unwrap(),
            &TensorView::new(&k, [c.b, c.hk, c.nk, c.d]).unwrap(),
            &TensorView::new(&v, [c.b, c.hk, c.nk, c.d]).unwrap(),
            &mut TensorViewMut::new(&mut o, [c.b, c.hq, c.nq, c.d]).unwrap(),
            Some(&mut LseMut::new(&mut lse)),
            &c.options(),
        )
        .unwrap_or_else(|e| panic!("{c:?}: {e}"));
    let (ref_o, ref_lse) = reference(&c, &to64(&q), &to64(&k), &to64(&v));
    let tol = tolerance::<T>();
    for (i, (&got, &want)) in to64(&o).iter().zip(&ref_o).enumerate() {
        assert!(
            (got - want).abs() <= tol * (1.0 + want.abs()),
            "{c:?} o[{i}] = {got}, expected {want}"
        );
    }
    for (i, (&got, &want)) in lse.iter().zip(&ref_lse).enumerate() {
        let got = got as f64;
        let ok = if want == f64::NEG_INFINITY {
            got == want
        } else {
            (got - want).abs() <= 1e-4 * (1.0 + want.abs())
        };
        assert!(ok, "{c:?} lse[{i}] = {got}, expected {want}");
    }
}

#[test]
fn plain_every_dtype() {
    run::<f32>(BASE, 1);
    run::<F16>(BASE, 2);
    run::<Bf16>(BASE, 3);
}

#[test]
fn gqa_and_mqa() {
    run::<f32>(
        Case {
            hq: 8,
            hk: 2,
            ..BASE
        },
        4,
    );
    run::<Bf16>(
        Case {
            hq: 6,
            hk: 1,
            nq: 9,
            nk: 31,
            ..BASE
        },
        5,
    );
    run::<F16>(
        Case {
            b: 1,
            hq: 32,
            hk: 8,
            nq: 40,
            nk: 40,
            d: 128,
            causal: Some(CausalAlignment::BottomRight),
            ..BASE
        },
        6,
    );
}

#[test]
fn causal_both_alignments() {
    for alignment in [CausalAlignment::BottomRight, CausalAlignment::TopLeft] {
        for (nq, nk) in [(13, 29), (29, 13), (1, 40), (17, 17)] {
            run::<f32>(
                Case {
                    nq,
                    nk,
                    causal: Some(alignment),
                    ..BASE
                },
                7,
            );
        }
    }
}

#[test]
fn windows() {
    for window in [
        (Some(5), None),
        (None, Some(3)),
        (Some(4), Some(2)),
        (Some(0), Some(0)),
    ] {
        run::<f32>(
            Case {
                nq: 21,
                nk: 30,
                window,
                ..BASE
            },
            8,
        );
    }
    run::<f32>(
        Case {
            nq: 21,
            nk: 30,
            window: (Some(6), Some(0)),
            causal: Some(CausalAlignment::TopLeft),
            ..BASE
        },
        9,
    );
}

#[test]
fn softcap_and_scale() {
    run::<f32>(
        Case {
            scale: Some(1.0),
            softcap: 4.0,
            ..BASE
        },
        10,
    );
    run::<Bf16>(
        Case {
            scale: Some(0.05),
            ..BASE
        },
        11,
    );
}

#[test]
fn fused_qkv_views_and_bnhd_output() {
    // One fused projection output [B, N, Hq + 2*Hk, D]; output [B, N, Hq, D].
    let (b, n, hq, hk, d) = (2, 19, 8, 2, 16);
    let mut rng = Rng(12);
    let fused: Vec<f32> = rng.vec(b * n * (hq + 2 * hk) * d);
    let mut out = vec![f32::NAN; b * n * hq * d];
    let all = TensorView::new(&fused, [b, n, hq + 2 * hk, d]).unwrap();
    let q = all.narrow(2, 0, hq).unwrap().permute([0, 2, 1, 3]);
    let k = all.narrow(2, hq, hk).unwrap().permute([0, 2, 1, 3]);
    let v = all.narrow(2, hq + hk, hk).unwrap().permute([0, 2, 1, 3]);
    let mut o = TensorViewMut::new(&mut out, [b, n, hq, d])
        .unwrap()
        .permute([0, 2, 1, 3]);
    let opts = Options::new().causal(CausalAlignment::BottomRight);
    Handle::cpu()
        .unwrap()
        .forward(&q, &k, &v, &mut o, None, &opts)
        .unwrap();

    // Same problem from contiguous copies.
    let gather = |view: &TensorView<'_, f32>| -> Vec<f32> {
        let [d0, d1, d2, d3] = view.dims();
        let mut x = Vec::new();
        for i0 in 0..d0 {
            for i1 in 0..d1 {
                for i2 in 0..d2 {
                    for i3 in 0..d3 {
                        x.push(view.get([i0, i1, i2, i3]).unwrap());
                    }
                }
            }
        }
        x
    };
    let c = Case {
        b,
        hq,
        hk,
        nq: n,
        nk: n,
        d,
        causal: Some(CausalAlignment::BottomRight),
        ..BASE
    };
    let (want, _) = reference(
        &c,
        &to64(&gather(&q)),
        &to64(&gather(&k)),
        &to64(&gather(&v)),
    );
    let got = gather(&o.as_view());
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (*g as f64 - w).abs() <= 2e-5 * (1.0 + w.abs()),
            "{g} vs {w}"
        );
    }
}

#[test]
fn workspace_size_and_explicit_workspace() {
    let q = vec![0.5f32; 2 * 8 * 16];
    let mut o = vec![0f32; q.len()];
    let qv = TensorView::new(&q, [1, 2, 8, 16]).unwrap();
    let mut handle = Handle::cpu().unwrap();
    let opts = Options::new();
    let need = {
        let ov = TensorViewMut::new(&mut o, [1, 2, 8, 16]).unwrap();
        handle
            .workspace_size(&qv, &qv, &qv, &ov, None, &opts)
            .unwrap()
    };
    let mut ws = vec![0u128; need / 16 + 1]; // 16-byte aligned
    let mut ov = TensorViewMut::new(&mut o, [1, 2, 8, 16]).unwrap();
    unsafe {
        handle.forward_with_workspace(
            &qv,
            &qv,
            &qv,
            &mut ov,
            None,
            &opts,
            ws.as_mut_ptr().cast(),
            need,
        )
    }
    .unwrap();
    assert!(o.iter().all(|&x| (x - 0.5).abs() < 1e-6));
    if need > 0 {
        let mut ov = TensorViewMut::new(&mut o, [1, 2, 8, 16]).unwrap();
        let err = unsafe {
            handle.forward_with_workspace(
                &qv,
                &qv,
                &qv,
                &mut ov,
                None,
                &opts,
                ws.as_mut_ptr().cast(),
                need - 1,
            )
        }
        .unwrap_err();
        assert_eq!(err.status(), Status::WorkspaceTooSmall);
    }
}

#[test]
fn explain_kernels_version() {
    let names = fmha::kernels();
    assert!(names.iter().any(|n| n == "cpu_tiled"), "{names:?}");
    let (major, minor, patch) = fmha::version();
    assert_eq!(
        major * 10000 + minor * 100 + patch,
        fmha::sys::FMHA_VERSION_NUMBER
    );

    let q = vec![0.1f32; 4 * 16];
    let mut o = vec![0f32; q.len()];
    let qv = TensorView::new(&q, [1, 1, 4, 16]).unwrap();
    let ov = TensorViewMut::new(&mut o, [1, 1, 4, 16]).unwrap();
    let handle = Handle::cpu().unwrap();
    let text = handle
        .explain(&qv, &qv, &qv, &ov, None, &Options::new())
        .unwrap();
    assert!(text.contains("chosen: "), "{text}");
    let forced = handle
        .explain(
            &qv,
            &qv,
            &qv,
            &ov,
            None,
            &Options::new().kernel("cpu_tiled"),
        )
        .unwrap();
    assert!(forced.contains("forced"), "{forced}");
}

#[test]
fn handle_moves_between_threads() {
    let mut handle = Handle::cpu().unwrap();
    handle.set_num_threads(2).unwrap();
    let handle = std::thread::spawn(move || {
        let q = vec![1.0f32; 3 * 8];
        let mut o = vec![0f32; q.len()];
        let qv = TensorView::new(&q, [1, 1, 3, 8]).unwrap();
        let mut h = handle;
        h.forward(
            &qv,
            &qv,
            &qv,
            &mut TensorViewMut::new(&mut o, [1, 1, 3, 8]).unwrap(),
            None,
            &Options::new(),
        )
        .unwrap();
        h
    })
    .join()
    .unwrap();
    assert_eq!(handle.device(), Device::Cpu);
}

// ---- errors ----------------------------------------------------------------

fn forward_err(hq: usize, hk: usize, d_k: usize, opts: Options) -> fmha::Error {
    let q = vec![0f32; 2 * hq * 5 * 8];
    let k = vec![0f32; 2 * hk * 5 * d_k];
    let mut o = vec![f32::NAN; q.len()];
    let res = Handle::cpu().unwrap().forward(
        &TensorView::new(&q, [2, hq, 5, 8]).unwrap(),
        &TensorView::new(&k, [2, hk, 5, d_k]).unwrap(),
        &TensorView::new(&k, [2, hk, 5, d_k]).unwrap(),
        &mut TensorViewMut::new(&mut o, [2, hq, 5, 8]).unwrap(),
        None,
        &opts,
    );
    assert!(o.iter().all(|x| x.is_nan()), "o was written on error");
    res.unwrap_err()
}

#[test]
fn errors_carry_status_and_message() {
    let e = forward_err(8, 3, 8, Options::new());
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("does not divide"), "{e}");
    assert!(e.to_string().starts_with("invalid argument: "), "{e}");

    let e = forward_err(4, 4, 16, Options::new());
    assert!(e.message().contains("head_dim"), "{e}");

    let e = forward_err(
        4,
        2,
        8,
        Options::new()
            .causal(CausalAlignment::BottomRight)
            .window(None, Some(3)),
    );
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("window_right"), "{e}");

    let e = forward_err(4, 2, 8, Options::new().kernel("no_such_kernel"));
    assert!(e.message().contains("not a registered kernel"), "{e}");

    let e = forward_err(4, 2, 8, Options::new().scale(-1.0));
    assert!(e.message().contains("scale"), "{e}");
    assert_eq!(
        forward_err(4, 2, 8, Options::new().scale(0.0)).status(),
        Status::InvalidArgument
    );
}

#[test]
fn unsupported_problem() {
    let q = vec![0f32; 1024];
    let mut o = vec![0f32; 1024];
    let qv = TensorView::new(&q, [1, 1, 1, 1024]).unwrap();
    let mut handle = Handle::cpu().unwrap();
    let mut ov = TensorViewMut::new(&mut o, [1, 1, 1, 1024]).unwrap();
    let e = handle
        .forward(&qv, &qv, &qv, &mut ov, None, &Options::new())
        .unwrap_err();
    assert_eq!(e.status(), Status::Unsupported, "{e}");
    assert_eq!(e.status().raw(), fmha::sys::FMHA_ERROR_UNSUPPORTED);
    let why = handle
        .explain(&qv, &qv, &qv, &ov, None, &Options::new())
        .unwrap();
    assert!(why.contains("no registered kernel"), "{why}");
}

#[test]
fn views_on_the_wrong_device_and_bad_lse() {
    let q = vec![0f32; 2 * 4 * 8];
    let mut o = vec![0f32; q.len()];
    let mut lse = vec![0f32; 7];
    let qv = TensorView::new(&q, [1, 2, 4, 8]).unwrap();
    // A (pretend) device buffer: never dereferenced, the handle rejects it.
    let dev = unsafe {
        TensorView::from_raw_parts(q.as_ptr(), [1, 2, 4, 8], [64, 32, 8, 1], Memory::Cuda(0))
    };
    let mut handle = Handle::cpu().unwrap();
    let mut ov = TensorViewMut::new(&mut o, [1, 2, 4, 8]).unwrap();
    let e = handle
        .forward(&qv, &dev, &qv, &mut ov, None, &Options::new())
        .unwrap_err();
    assert!(e.message().contains("k is in Cuda(0) memory"), "{e}");
    let e = handle
        .forward(
            &qv,
            &qv,
            &qv,
            &mut ov,
            Some(&mut LseMut::new(&mut lse)),
            &Options::new(),
        )
        .unwrap_err();
    assert!(e.message().contains("lse has 7 elements"), "{e}");
}

#[test]
fn cuda_handle_without_gpu_or_backend() {
    match Handle::new(Device::Cuda(0)) {
        Ok(h) => assert_eq!(h.device(), Device::Cuda(0)), // a GPU build on a GPU machine
        Err(e) => assert_eq!(e.status(), Status::NotAvailable, "{e}"),
    }
    let e = Handle::new(Device::Cuda(-1)).unwrap_err();
    assert!(
        matches!(e.status(), Status::NotAvailable | Status::InvalidArgument),
        "{e}"
    );
}
