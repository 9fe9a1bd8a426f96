//! Handle::merge and the serving options on the CPU backend: forwards over
//! key slices merged equal one float64 forward over all the keys; the
//! serving options fill the params (checked through the errors and, where
//! the library runs them, the numerics); errors name what is wrong.
use fmha::{
    Element, Handle, I32View, LseMut, LseView, Memory, Options, OutputElement, Status, TensorView, TensorViewMut,
    F16,
};

mod common;
use common::Rng;

/// float64 attention of contiguous q [b, h, nq, d] against k, v [b, h, nk, d]
/// (same heads), bottom-right causal when asked: (o, lse).
fn reference(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    (b, h, nq, nk, d): (usize, usize, usize, usize, usize),
    causal: bool,
) -> (Vec<f64>, Vec<f64>) {
    let mut o = vec![0.0; b * h * nq * d];
    let mut lse = vec![f64::NEG_INFINITY; b * h * nq];
    for bh in 0..b * h {
        for i in 0..nq {
            let qrow = &q[(bh * nq + i) * d..][..d];
            let keys: Vec<usize> = (0..nk)
                .filter(|&j| !causal || j as i64 <= i as i64 + nk as i64 - nq as i64)
                .collect();
            if keys.is_empty() {
                continue;
            }
            let s: Vec<f64> = keys
                .iter()
                .map(|&j| {
                    let krow = &k[(bh * nk + j) * d..][..d];
                    qrow.iter().zip(krow).map(|(a, b)| a * b).sum::<f64>() / (d as f64).sqrt()
                })
                .collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = s.iter().map(|x| (x - m).exp()).sum();
            let row = bh * nq + i;
            lse[row] = m + sum.ln();
            for (&j, &x) in keys.iter().zip(&s) {
                let w = (x - m).exp() / sum;
                for e in 0..d {
                    o[row * d + e] += w * v[(bh * nk + j) * d + e];
                }
            }
        }
    }
    (o, lse)
}

fn to64<T: Element>(x: &[T]) -> Vec<f64> {
    x.iter().map(|&e| e.to_f32() as f64).collect()
}

/// Forwards of q against the key slices `cuts`, merged into f32, against
/// the float64 forward over all the keys.
fn check_merge<T: OutputElement>(parts: usize, causal: bool, seed: u64, tol: f64) {
    let (b, h, nq, nk, d) = (2, 3, 9, 40, 16);
    let mut rng = Rng(seed);
    let q: Vec<T> = rng.vec(b * h * nq * d);
    let k: Vec<T> = rng.vec(b * h * nk * d);
    let v: Vec<T> = rng.vec(b * h * nk * d);
    let mut cuts: Vec<usize> = vec![0, nk];
    while cuts.len() < parts + 1 {
        let c = 1 + (rng.uniform() * (nk - 1) as f64) as usize;
        if !cuts.contains(&c) {
            cuts.push(c);
        }
    }
    cuts.sort();
    let mut handle = Handle::cpu().unwrap();
    let qv = TensorView::new(&q, [b, h, nq, d]).unwrap();
    let kv = TensorView::new(&k, [b, h, nk, d]).unwrap();
    let vv = TensorView::new(&v, [b, h, nk, d]).unwrap();
    let mut outs: Vec<Vec<T>> = Vec::new();
    let mut lses: Vec<Vec<f32>> = Vec::new();
    for w in cuts.windows(2) {
        let mut o = vec![T::from_f32(0.0); q.len()];
        let mut lse = vec![0f32; b * h * nq];
        // Key j of the slice is key w[0] + j: the causal diagonal of all the
        // keys is the slice's own plus a right window of nk - w[1].
        let opts = if causal {
            Options::new().window(None, Some((nk - w[1]) as u32))
        } else {
            Options::new()
        };
        handle
            .forward(
                &qv,
                &kv.narrow(2, w[0], w[1] - w[0]).unwrap(),
                &vv.narrow(2, w[0], w[1] - w[0]).unwrap(),
                &mut TensorViewMut::new(&mut o, [b, h, nq, d]).unwrap(),
                Some(&mut LseMut::new(&mut lse)),
                &opts,
            )
            .unwrap();
        outs.push(o);
        lses.push(lse);
    }
    let part_views: Vec<TensorView<'_, T>> = outs
        .iter()
        .map(|o| TensorView::new(o, [b, h, nq, d]).unwrap())
        .collect();
    let lse_views: Vec<LseView<'_>> = lses.iter().map(|l| LseView::new(l)).collect();
    let mut out = vec![f32::NAN; q.len()];
    let mut out_lse = vec![f32::NAN; b * h * nq];
    handle
        .merge(
            &part_views,
            &lse_views,
            &mut TensorViewMut::new(&mut out, [b, h, nq, d]).unwrap(),
            Some(&mut LseMut::new(&mut out_lse)),
        )
        .unwrap();
    let (ro, rl) = reference(&to64(&q), &to64(&k), &to64(&v), (b, h, nq, nk, d), causal);
    for (e, (&got, &want)) in out.iter().zip(&ro).enumerate() {
        assert!(
            (got as f64 - want).abs() <= tol * (1.0 + want.abs()),
            "parts={parts} o[{e}] = {got}, want {want}"
        );
    }
    for (r, (&got, &want)) in out_lse.iter().zip(&rl).enumerate() {
        if want == f64::NEG_INFINITY {
            assert_eq!(got, f32::NEG_INFINITY, "lse[{r}]");
        } else {
            assert!((got as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()), "lse[{r}] = {got}, want {want}");
        }
    }
}

#[test]
fn merge_of_key_slices_equals_one_forward() {
    for parts in 1..=8 {
        check_merge::<f32>(parts, false, 100 + parts as u64, 2e-5);
        check_merge::<F16>(parts, parts % 2 == 0, 200 + parts as u64, 2.0 * 2f64.powi(-10));
    }
}

#[test]
fn merge_errors() {
    let (b, h, n, d) = (1, 2, 3, 4);
    let a = vec![1f32; b * h * n * d];
    let la = vec![0f32; b * h * n];
    let mut o = vec![0f32; a.len()];
    let mut handle = Handle::cpu().unwrap();
    let av = TensorView::new(&a, [b, h, n, d]).unwrap();
    let mut ov = TensorViewMut::new(&mut o, [b, h, n, d]).unwrap();
    let e = handle.merge(&[av, av], &[LseView::new(&la)], &mut ov, None).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("lses has 1 arrays but parts has 2"), "{e}");
    let short = vec![0f32; 2];
    let e = handle.merge(&[av], &[LseView::new(&short)], &mut ov, None).unwrap_err();
    assert!(e.message().contains("lses[0] has 2 elements"), "{e}");
    let e = handle.merge::<f32, f32>(&[], &[], &mut ov, None).unwrap_err();
    assert!(e.message().contains("num_parts=0 must be >= 1"), "{e}");
    let other = vec![1f32; b * h * 2 * d];
    let ov2 = TensorView::new(&other, [b, h, 2, d]).unwrap();
    let e = handle
        .merge(&[av, ov2], &[LseView::new(&la), LseView::new(&la)], &mut ov, None)
        .unwrap_err();
    assert!(e.message().contains("o_parts[1].dims[2]=2 differs from o_parts[0].dims[2]=3"), "{e}");
    let cuda_lse = unsafe { LseView::from_raw_parts(la.as_ptr(), la.len(), Memory::Cuda(0)) };
    let e = handle.merge(&[av], &[cuda_lse], &mut ov, None).unwrap_err();
    assert!(e.message().contains("lses[0] is in Cuda(0) memory"), "{e}");
    assert!(o.iter().all(|&x| x == 0.0)); // nothing written
}

#[test]
fn merge_in_place_through_raw_parts() {
    let (b, h, n, d) = (1, 1, 2, 3);
    let mut a = vec![1f32, 2., 3., 4., 5., 6.];
    let c = vec![7f32, 8., 9., 10., 11., 12.];
    let mut la = vec![0f32, f32::NEG_INFINITY];
    let lc = vec![0f32, 0.];
    let mut handle = Handle::cpu().unwrap();
    unsafe {
        let first = TensorView::from_raw_parts(a.as_ptr(), [b, h, n, d], [6, 6, 3, 1], Memory::Host);
        let mut out = TensorViewMut::from_raw_parts(a.as_mut_ptr(), [b, h, n, d], [6, 6, 3, 1], Memory::Host);
        let lse_first = LseView::from_raw_parts(la.as_ptr(), 2, Memory::Host);
        let mut lse_out = LseMut::from_raw_parts(la.as_mut_ptr(), 2, Memory::Host);
        handle
            .merge(
                &[first, TensorView::new(&c, [b, h, n, d]).unwrap()],
                &[lse_first, LseView::new(&lc)],
                &mut out,
                Some(&mut lse_out),
            )
            .unwrap();
    }
    assert_eq!(&a[..3], &[4., 5., 6.]); // equal weights: the mean
    assert_eq!(&a[3..], &[10., 11., 12.]); // part 0 saw no key: part 1 alone
    assert!((la[0] - 2f32.ln()).abs() < 1e-6 && la[1] == 0.0);
}

// ---- the serving options ---------------------------------------------------------

/// Whether the loaded libfmha runs serving layouts on the CPU (issue 9's
/// validation and CPU backend); None = yes, else why not.
fn serving_skip_reason() -> Option<String> {
    let q = vec![0.5f32; 2 * 8];
    let k = vec![0.5f32; 4 * 8];
    let mut o = vec![0f32; q.len()];
    let mut handle = Handle::cpu().unwrap();
    // A block table without seqused_k: invalid where serving layouts are
    // validated, ignored by a libfmha that predates them.
    let (table, one) = ([0], [1]);
    let probe = handle.forward(
        &TensorView::new(&q, [1, 1, 2, 8]).unwrap(),
        &TensorView::new(&k, [1, 1, 4, 8]).unwrap(),
        &TensorView::new(&k, [1, 1, 4, 8]).unwrap(),
        &mut TensorViewMut::new(&mut o, [1, 1, 2, 8]).unwrap(),
        None,
        &Options::new().block_table(I32View::new(&table), one.len()),
    );
    match probe {
        Err(e) if e.message().contains("seqused_k") => {}
        _ => return Some("this libfmha does not validate serving layouts (issue 9's validation)".into()),
    }
    let (cu_q, cu_k) = ([0, 1, 2], [0, 2, 4]);
    let r = handle.forward(
        &TensorView::new(&q, [1, 1, 2, 8]).unwrap(),
        &TensorView::new(&k, [1, 1, 4, 8]).unwrap(),
        &TensorView::new(&k, [1, 1, 4, 8]).unwrap(),
        &mut TensorViewMut::new(&mut o, [1, 1, 2, 8]).unwrap(),
        None,
        &Options::new().cu_seqlens_q(I32View::new(&cu_q)).cu_seqlens_k(I32View::new(&cu_k)),
    );
    match r {
        Err(e) => Some(format!("the CPU backend does not run ragged batches yet: {e}")),
        Ok(()) => None,
    }
}

#[test]
fn serving_option_errors() {
    let q = vec![0.5f32; 2 * 3 * 8];
    let k = vec![0.5f32; 2 * 5 * 8];
    let mut o = vec![0f32; q.len()];
    let mut handle = Handle::cpu().unwrap();
    let qv = TensorView::new(&q, [2, 1, 3, 8]).unwrap();
    let kv = TensorView::new(&k, [2, 1, 5, 8]).unwrap();
    let mut run = |opts: &Options<'_>| {
        handle
            .forward(&qv, &kv, &kv, &mut TensorViewMut::new(&mut o, [2, 1, 3, 8]).unwrap(), None, opts)
            .unwrap_err()
    };
    let used = [1, 2, 3];
    let e = run(&Options::new().seqused_k(I32View::new(&used)));
    assert!(e.message().contains("seqused_k has 3 entries; the batch has 2 sequences"), "{e}");
    let (cu_q, cu_k) = ([0, 3], [0, 2, 5]);
    let e = run(&Options::new().cu_seqlens_q(I32View::new(&cu_q)).cu_seqlens_k(I32View::new(&cu_k)));
    assert!(e.message().contains("lengths [2, 3]"), "{e}");
    let table = [0, 1, 2];
    let used2 = [1, 1];
    let e = run(&Options::new().seqused_k(I32View::new(&used2)).block_table(I32View::new(&table), 2));
    assert!(e.message().contains("block_table has 3 entries; 2 sequences of stride 2 need 4"), "{e}");
    let dev = unsafe { I32View::from_raw_parts(used2.as_ptr(), 2, Memory::Cuda(0)) };
    let e = run(&Options::new().seqused_k(dev));
    assert!(e.message().contains("seqused_k is in Cuda(0) memory"), "{e}");
    assert!(o.iter().all(|&x| x == 0.0));
}

#[test]
fn serving_ragged_and_paged_numerics() {
    if let Some(why) = serving_skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let (h, d) = (2, 16);
    let mut rng = Rng(77);
    let mut handle = Handle::cpu().unwrap();
    // Ragged: three sequences (one empty) packed along the seq axis.
    let (lq, lk) = ([4usize, 0, 3], [6usize, 2, 9]);
    let cu = |l: &[usize]| -> Vec<i32> {
        std::iter::once(0).chain(l.iter().scan(0, |s, &x| {
            *s += x as i32;
            Some(*s)
        })).collect()
    };
    let (cu_q, cu_k) = (cu(&lq), cu(&lk));
    let (tq, tk) = (cu_q[3] as usize, cu_k[3] as usize);
    let q: Vec<f32> = rng.vec(h * tq * d);
    let k: Vec<f32> = rng.vec(h * tk * d);
    let v: Vec<f32> = rng.vec(h * tk * d);
    let mut o = vec![f32::NAN; q.len()];
    let mut lse = vec![f32::NAN; h * tq];
    handle
        .forward(
            &TensorView::new(&q, [1, h, tq, d]).unwrap(),
            &TensorView::new(&k, [1, h, tk, d]).unwrap(),
            &TensorView::new(&v, [1, h, tk, d]).unwrap(),
            &mut TensorViewMut::new(&mut o, [1, h, tq, d]).unwrap(),
            Some(&mut LseMut::new(&mut lse)),
            &Options::new()
                .causal(fmha::CausalAlignment::BottomRight)
                .cu_seqlens_q(I32View::new(&cu_q))
                .cu_seqlens_k(I32View::new(&cu_k)),
        )
        .unwrap();
    for s in 0..3 {
        let (q0, k0, nq, nk) = (cu_q[s] as usize, cu_k[s] as usize, lq[s], lk[s]);
        if nq == 0 {
            continue;
        }
        let gather = |x: &[f32], start: usize, n: usize, total: usize| -> Vec<f64> {
            (0..h).flat_map(|hh| x[(hh * total + start) * d..(hh * total + start + n) * d].to_vec()).map(|e| e as f64).collect()
        };
        let (ro, rl) = reference(
            &gather(&q, q0, nq, tq),
            &gather(&k, k0, nk, tk),
            &gather(&v, k0, nk, tk),
            (1, h, nq, nk, d),
            true,
        );
        for hh in 0..h {
            for i in 0..nq {
                let r = hh * tq + q0 + i;
                assert!((lse[r] as f64 - rl[hh * nq + i]).abs() < 1e-4, "seq {s} lse");
                for e in 0..d {
                    let want = ro[(hh * nq + i) * d + e];
                    assert!((o[r * d + e] as f64 - want).abs() <= 2e-5 * (1.0 + want.abs()), "seq {s}");
                }
            }
        }
    }
    // Paged decode: vLLM storage [pages, page_size, H, D] seen as [pages, H, page_size, D].
    let (batch, page, max_pages) = (3, 4, 3);
    let pages = batch * max_pages;
    let kc: Vec<f32> = rng.vec(pages * page * h * d);
    let vc: Vec<f32> = rng.vec(pages * page * h * d);
    let table: Vec<i32> = vec![5, 0, 7, 2, 8, 1, 4, 6, 3];
    let used = [9, 1, 12];
    let qd: Vec<f32> = rng.vec(batch * h * d);
    let mut od = vec![f32::NAN; qd.len()];
    let kview = TensorView::new(&kc, [pages, page, h, d]).unwrap().permute([0, 2, 1, 3]);
    let vview = TensorView::new(&vc, [pages, page, h, d]).unwrap().permute([0, 2, 1, 3]);
    handle
        .forward(
            &TensorView::new(&qd, [batch, h, 1, d]).unwrap(),
            &kview,
            &vview,
            &mut TensorViewMut::new(&mut od, [batch, h, 1, d]).unwrap(),
            None,
            &Options::new().seqused_k(I32View::new(&used)).block_table(I32View::new(&table), max_pages),
        )
        .unwrap();
    for s in 0..batch {
        let n = used[s] as usize;
        let row = |x: &[f32], j: usize, hh: usize| -> Vec<f64> {
            let p = table[s * max_pages + j / page] as usize;
            x[((p * page + j % page) * h + hh) * d..][..d].iter().map(|&e| e as f64).collect()
        };
        let (kr, vr) = (&kc, &vc);
        let ks: Vec<f64> = (0..h).flat_map(|hh| (0..n).flat_map(move |j| row(kr, j, hh))).collect();
        let vs: Vec<f64> = (0..h).flat_map(|hh| (0..n).flat_map(move |j| row(vr, j, hh))).collect();
        let qs: Vec<f64> = qd[s * h * d..(s + 1) * h * d].iter().map(|&e| e as f64).collect();
        let (ro, _) = reference(&qs, &ks, &vs, (1, h, 1, n, d), false);
        for (e, want) in ro.iter().enumerate() {
            assert!((od[s * h * d + e] as f64 - want).abs() <= 2e-5 * (1.0 + want.abs()), "paged seq {s}");
        }
    }
}
