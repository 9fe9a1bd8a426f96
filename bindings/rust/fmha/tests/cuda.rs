//! The CUDA path of the safe wrapper (feature `cuda`): raw device-pointer
//! views, the workspace allocated for the caller, and a caller's workspace.
//! The CPU backend is the reference. Without a CUDA device (or a libfmha
//! built without CUDA) each test prints "SKIPPED: ..." and returns.
//!
//!   FMHA_LIB_DIR=<build>/src LD_LIBRARY_PATH=<build>/src:<cuda>/lib64 \
//!     cargo test --offline --features fmha/cuda --test cuda -- --nocapture
#![cfg(feature = "cuda")]

use std::ffi::{c_int, c_void};

use fmha::{
    CausalAlignment, Device, Handle, LseMut, Memory, Options, Status, TensorView, TensorViewMut,
    F16,
};

#[link(name = "cudart")]
extern "C" {
    fn cudaMalloc(ptr: *mut *mut c_void, size: usize) -> c_int;
    fn cudaFree(ptr: *mut c_void) -> c_int;
    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, count: usize, kind: c_int) -> c_int;
    fn cudaDeviceSynchronize() -> c_int;
}
const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;

/// A device copy of a host slice, freed on drop.
struct DeviceBuffer<T> {
    ptr: *mut T,
    len: usize,
}

impl<T: Copy> DeviceBuffer<T> {
    fn from_host(host: &[T]) -> DeviceBuffer<T> {
        let bytes = std::mem::size_of_val(host);
        let mut ptr = std::ptr::null_mut();
        unsafe {
            assert_eq!(cudaMalloc(&mut ptr, bytes.max(1)), 0, "cudaMalloc");
            assert_eq!(
                cudaMemcpy(ptr, host.as_ptr().cast(), bytes, HOST_TO_DEVICE),
                0,
                "cudaMemcpy"
            );
        }
        DeviceBuffer {
            ptr: ptr.cast(),
            len: host.len(),
        }
    }

    fn to_host(&self, host: &mut [T]) {
        assert_eq!(host.len(), self.len);
        unsafe {
            assert_eq!(cudaDeviceSynchronize(), 0, "cudaDeviceSynchronize");
            let bytes = std::mem::size_of_val(host);
            assert_eq!(
                cudaMemcpy(
                    host.as_mut_ptr().cast(),
                    self.ptr.cast(),
                    bytes,
                    DEVICE_TO_HOST
                ),
                0
            );
        }
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        unsafe { cudaFree(self.ptr.cast()) };
    }
}

fn cuda_handle() -> Option<Handle> {
    match Handle::new(Device::Cuda(0)) {
        Ok(h) => Some(h),
        Err(e) if e.status() == Status::NotAvailable => {
            println!("SKIPPED: no CUDA device for fmha: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn contiguous(dims: [usize; 4]) -> [usize; 4] {
    [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1]
}

#[test]
fn cuda_forward_matches_cpu() {
    let Some(mut gpu) = cuda_handle() else { return };
    let (b, hq, hk, n, d) = (2, 8, 2, 300, 128);
    let mut state = 42u64;
    let mut rand = |len: usize| -> Vec<F16> {
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                fmha::Element::from_f32((state >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
            })
            .collect()
    };
    let (q, k, v) = (
        rand(b * hq * n * d),
        rand(b * hk * n * d),
        rand(b * hk * n * d),
    );
    let (qd, kd, vd) = ([b, hq, n, d], [b, hk, n, d], [b, hk, n, d]);
    let opts = Options::new().causal(CausalAlignment::BottomRight);

    // The CPU backend's answer.
    let mut o_cpu = vec![F16::default(); q.len()];
    let mut lse_cpu = vec![0f32; b * hq * n];
    Handle::cpu()
        .unwrap()
        .forward(
            &TensorView::new(&q, qd).unwrap(),
            &TensorView::new(&k, kd).unwrap(),
            &TensorView::new(&v, vd).unwrap(),
            &mut TensorViewMut::new(&mut o_cpu, qd).unwrap(),
            Some(&mut LseMut::new(&mut lse_cpu)),
            &opts,
        )
        .unwrap();

    // The same on the GPU, workspace allocated by the wrapper.
    let (q_dev, k_dev, v_dev) = (
        DeviceBuffer::from_host(&q),
        DeviceBuffer::from_host(&k),
        DeviceBuffer::from_host(&v),
    );
    let o_dev = DeviceBuffer::from_host(&vec![F16(0x7e00); q.len()]); // poisoned with NaN
    let lse_dev = DeviceBuffer::from_host(&vec![f32::NAN; b * hq * n]);
    let mem = Memory::Cuda(0);
    unsafe {
        let qv = TensorView::from_raw_parts(q_dev.ptr, qd, contiguous(qd), mem);
        let kv = TensorView::from_raw_parts(k_dev.ptr, kd, contiguous(kd), mem);
        let vv = TensorView::from_raw_parts(v_dev.ptr, vd, contiguous(vd), mem);
        let mut ov = TensorViewMut::from_raw_parts(o_dev.ptr, qd, contiguous(qd), mem);
        let mut lse = LseMut::from_raw_parts(lse_dev.ptr, lse_dev.len, mem);
        gpu.forward(&qv, &kv, &vv, &mut ov, Some(&mut lse), &opts)
            .unwrap();

        // A host view on a CUDA handle is refused before anything runs.
        let host_q = TensorView::new(&q, qd).unwrap();
        let e = gpu
            .forward(&host_q, &kv, &vv, &mut ov, None, &opts)
            .unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument);
    }
    let mut o_gpu = vec![F16::default(); q.len()];
    let mut lse_gpu = vec![0f32; b * hq * n];
    o_dev.to_host(&mut o_gpu);
    lse_dev.to_host(&mut lse_gpu);
    for (i, (g, c)) in o_gpu.iter().zip(&o_cpu).enumerate() {
        let (g, c) = (fmha::Element::to_f32(*g), fmha::Element::to_f32(*c));
        assert!(
            (g - c).abs() <= 4e-3 * (1.0 + c.abs()),
            "o[{i}]: gpu {g} cpu {c}"
        );
    }
    for (i, (g, c)) in lse_gpu.iter().zip(&lse_cpu).enumerate() {
        assert!(
            (g - c).abs() <= 1e-3 * (1.0 + c.abs()),
            "lse[{i}]: gpu {g} cpu {c}"
        );
    }
}

#[test]
fn cuda_forward_with_callers_workspace() {
    let Some(mut gpu) = cuda_handle() else { return };
    let dims = [1, 4, 64, 64];
    let ones = vec![F16(0x3c00); 4 * 64 * 64]; // 1.0: o must be all ones
    let (q_dev, o_dev) = (
        DeviceBuffer::from_host(&ones),
        DeviceBuffer::from_host(&vec![F16(0); ones.len()]),
    );
    let mem = Memory::Cuda(0);
    unsafe {
        let qv = TensorView::from_raw_parts(q_dev.ptr, dims, contiguous(dims), mem);
        let mut ov = TensorViewMut::from_raw_parts(o_dev.ptr, dims, contiguous(dims), mem);
        let need = gpu
            .workspace_size(&qv, &qv, &qv, &ov, None, &Options::new())
            .unwrap();
        let ws = DeviceBuffer::<u8>::from_host(&vec![0u8; need.max(16)]);
        gpu.forward_with_workspace(
            &qv,
            &qv,
            &qv,
            &mut ov,
            None,
            &Options::new(),
            ws.ptr.cast(),
            need,
        )
        .unwrap();
        let mut out = vec![F16(0); ones.len()];
        o_dev.to_host(&mut out);
        assert!(out.iter().all(|&x| x == F16(0x3c00)));
    }
}
