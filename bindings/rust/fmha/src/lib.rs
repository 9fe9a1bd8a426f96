//! fmha: exact scaled-dot-product attention forward,
//! `O = softmax(Q K^T * scale + mask) V`, computed the FlashAttention way, on
//! the CPU or a CUDA GPU. A safe wrapper over the C library (`fmha-sys`).
//!
//! - [`Handle`]: one device's context, released on drop.
//! - [`TensorView`] / [`TensorViewMut`]: strided `[batch, heads, seq,
//!   head_dim]` views borrowing the caller's memory; [`LseMut`] for the
//!   log-sum-exp. CUDA memory enters through `unsafe` raw-pointer constructors.
//! - [`Options`]: causal mask and its alignment, sliding window, scale,
//!   softcap, a forced kernel, and the serving layouts (ragged batches,
//!   KV-cache fill levels, paged K/V) over [`I32View`] metadata, and the
//!   inference numerics of fmha 0.3: descale factors and ALiBi slopes
//!   ([`F32View`]) and an additive bias (any broadcastable [`TensorView`]).
//! - Element types `f32`, [`F16`], [`Bf16`], and FP8 [`F8E4M3`] /
//!   [`F8E5M2`] for K/V (and q over FP8 K/V); o is any [`OutputElement`],
//!   whatever the inputs.
//! - [`Handle::merge`]: the merge of attention results over disjoint key
//!   sets (cascade / shared-prefix attention, KV shards) by their lse.
//! - Every call returns [`Result`]; [`Error`] carries the [`Status`] and the
//!   library's message naming the field at fault.
//!
//! ```
//! use fmha::{CausalAlignment, Handle, LseMut, Options, TensorView, TensorViewMut};
//!
//! # fn main() -> fmha::Result<()> {
//! // GQA: 4 query heads share 2 KV heads; 16 tokens; head_dim 8.
//! let (b, hq, hk, n, d) = (1, 4, 2, 16, 8);
//! let q = vec![0.5f32; b * hq * n * d];
//! let k = vec![0.25f32; b * hk * n * d];
//! let v = vec![1.0f32; b * hk * n * d];
//! let mut o = vec![0f32; q.len()];
//! let mut lse = vec![0f32; b * hq * n];
//!
//! let mut handle = Handle::cpu()?;
//! handle.forward(
//!     &TensorView::new(&q, [b, hq, n, d])?,
//!     &TensorView::new(&k, [b, hk, n, d])?,
//!     &TensorView::new(&v, [b, hk, n, d])?,
//!     &mut TensorViewMut::new(&mut o, [b, hq, n, d])?,
//!     Some(&mut LseMut::new(&mut lse)),
//!     &Options::new().causal(CausalAlignment::BottomRight),
//! )?;
//! assert!(o.iter().all(|&x| (x - 1.0).abs() < 1e-6)); // every v row is 1
//! # Ok(())
//! # }
//! ```
//!
//! Linking: `fmha-sys`'s build script finds libfmha through `FMHA_LIB_DIR`,
//! else pkg-config (`fmha.pc`), else the default search path.
#![warn(missing_debug_implementations)]

#[cfg(feature = "cuda")]
mod cuda;
mod element;
mod error;
mod handle;
mod tensor;

use std::ffi::CStr;

pub use element::{Bf16, DType, Element, OutputElement, F16, F8E4M3, F8E5M2};
pub use error::{Error, Result, Status};
pub use fmha_sys as sys;
pub use handle::{CausalAlignment, Device, Handle, Options, Tasks};
pub use tensor::{F32View, I32View, LseMut, LseView, Memory, TensorView, TensorViewMut};

/// `(major, minor, patch)` of the libfmha loaded at run time.
pub fn version() -> (u32, u32, u32) {
    let v = unsafe { sys::fmha_version() };
    (v / 10000, v / 100 % 100, v % 100)
}

/// Names of the kernels registered in the loaded libfmha (CPU and, when
/// built, CUDA); any of them can be forced with [`Options::kernel`].
pub fn kernels() -> Vec<String> {
    let n = unsafe { sys::fmha_kernel_count() };
    (0..n)
        .filter_map(|i| {
            let name = unsafe { sys::fmha_kernel_name(i) };
            (!name.is_null()).then(|| {
                unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned()
            })
        })
        .collect()
}
