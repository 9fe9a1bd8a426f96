//! Handle::set_parallel_for: a caller's job system (here scoped std threads)
//! runs the CPU work items; the output is bitwise that of fmha's own pool.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use fmha::{CausalAlignment, Handle, Options, Status, Tasks, TensorView, TensorViewMut};

const B: usize = 2;
const H: usize = 4;
const N: usize = 77;
const D: usize = 64;

fn inputs() -> Vec<f32> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..B * H * N * D)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            ((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32) / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

fn forward(handle: &mut Handle, q: &[f32], k: &[f32], v: &[f32]) -> fmha::Result<Vec<f32>> {
    let dims = [B, H, N, D];
    let mut out = vec![0f32; q.len()];
    handle.forward(
        &TensorView::new(q, dims)?,
        &TensorView::new(k, dims)?,
        &TensorView::new(v, dims)?,
        &mut TensorViewMut::new(&mut out, dims)?,
        None,
        &Options::new().causal(CausalAlignment::BottomRight),
    )?;
    Ok(out)
}

/// Runs the tasks on three scoped threads, in a scrambled order.
fn three_threads(tasks: &Tasks) {
    std::thread::scope(|s| {
        for t in 0..3 {
            s.spawn(move || {
                for i in (0..tasks.count()).rev().filter(|i| i % 3 == t) {
                    assert!(tasks.run(i));
                }
            });
        }
    });
}

#[test]
fn callers_threads_match_fmhas_pool_bitwise() {
    let (q, k, v) = (
        inputs(),
        inputs().into_iter().rev().collect::<Vec<_>>(),
        inputs(),
    );
    let mut handle = Handle::cpu().unwrap();
    let own = forward(&mut handle, &q, &k, &v).unwrap();

    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    handle
        .set_parallel_for(move |tasks: &Tasks| {
            seen.fetch_add(1, Ordering::Relaxed);
            three_threads(tasks);
            // Already run, or out of range: nothing runs again.
            assert!(!tasks.run(0) || tasks.count() == 0);
            assert!(!tasks.run(tasks.count()));
        })
        .unwrap();
    let theirs = forward(&mut handle, &q, &k, &v).unwrap();
    assert!(
        calls.load(Ordering::Relaxed) > 0,
        "the job system was never called"
    );
    assert!(own
        .iter()
        .zip(&theirs)
        .all(|(a, b)| a.to_bits() == b.to_bits()));

    handle.clear_parallel_for().unwrap();
    let before = calls.load(Ordering::Relaxed);
    let again = forward(&mut handle, &q, &k, &v).unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), before);
    assert!(own
        .iter()
        .zip(&again)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn skipped_tasks_fail_the_forward() {
    let q = inputs();
    let mut handle = Handle::cpu().unwrap();
    handle
        .set_parallel_for(|tasks: &Tasks| {
            for i in 1..tasks.count() {
                tasks.run(i);
            }
        })
        .unwrap();
    let err = forward(&mut handle, &q, &q, &q).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
}
