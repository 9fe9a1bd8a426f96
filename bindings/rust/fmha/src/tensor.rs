//! Tensor views: strided 4-D windows onto memory the caller owns, borrowed for
//! the lifetime `'a`.
//!
//! Logical order is `[batch, heads, seq, head_dim]`; strides are in elements
//! and may be anything non-negative, so `[B, N, H, D]` storage (what a
//! projection writes), slices of a fused QKV buffer and broadcast K/V are
//! views too, without copies. Views of host memory are built from slices and
//! bounds-checked; views of CUDA memory come from raw device pointers through
//! the `unsafe` constructors.
use std::marker::PhantomData;

use crate::element::Element;
use crate::error::{Error, Result};

/// Where a view's memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Memory {
    /// Host memory (the CPU backend).
    Host,
    /// Device memory of the CUDA device with this ordinal.
    Cuda(i32),
}

/// Dims and strides of a 4-D view, in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub dims: [usize; 4],
    pub strides: [usize; 4],
}

impl Layout {
    fn contiguous(dims: [usize; 4]) -> Layout {
        let mut strides = [1usize; 4];
        for d in (0..3).rev() {
            strides[d] = strides[d + 1].saturating_mul(dims[d + 1]);
        }
        Layout { dims, strides }
    }

    /// Elements from the first to one past the last addressed: 0 for an
    /// empty view, None on overflow.
    fn span(&self) -> Option<usize> {
        if self.dims.contains(&0) {
            return Some(0);
        }
        let mut last = 0usize;
        for d in 0..4 {
            last = last.checked_add((self.dims[d] - 1).checked_mul(self.strides[d])?)?;
        }
        last.checked_add(1)
    }

    /// The layout fits in `len` elements.
    fn check_fits(&self, len: usize, what: &str) -> Result<()> {
        match self.span() {
            Some(span) if span <= len => Ok(()),
            Some(span) => Err(Error::invalid(format!(
                "{what}: dims {:?} with strides {:?} reach element {} but the slice has {len}",
                self.dims,
                self.strides,
                span - 1
            ))),
            None => Err(Error::invalid(format!(
                "{what}: dims {:?} with strides {:?} overflow usize",
                self.dims, self.strides
            ))),
        }
    }

    fn permute(&self, order: [usize; 4]) -> Layout {
        let mut seen = [false; 4];
        for &o in &order {
            assert!(
                o < 4 && !seen[o],
                "permute({order:?}) is not a permutation of 0..4"
            );
            seen[o] = true;
        }
        Layout {
            dims: order.map(|o| self.dims[o]),
            strides: order.map(|o| self.strides[o]),
        }
    }

    /// The layout of dims[dim] restricted to start..start+len, and the
    /// element offset of its first element.
    fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<(Layout, usize)> {
        if dim >= 4
            || start
                .checked_add(len)
                .map_or(true, |end| end > self.dims[dim])
        {
            return Err(Error::invalid(format!(
                "narrow(dim={dim}, start={start}, len={len}) is outside dims {:?}",
                self.dims
            )));
        }
        let mut out = *self;
        out.dims[dim] = len;
        let offset = if len == 0 {
            0
        } else {
            start * self.strides[dim]
        };
        Ok((out, offset))
    }

    pub(crate) fn to_c(self, what: &str) -> Result<([i64; 4], [i64; 4])> {
        let conv = |x: usize| {
            i64::try_from(x)
                .map_err(|_| Error::invalid(format!("{what}: {x} does not fit in int64")))
        };
        let mut dims = [0i64; 4];
        let mut strides = [0i64; 4];
        for d in 0..4 {
            dims[d] = conv(self.dims[d])?;
            strides[d] = conv(self.strides[d])?;
        }
        Ok((dims, strides))
    }
}

/// A read-only view (q, k, v), borrowing its memory for `'a`.
#[derive(Debug)]
pub struct TensorView<'a, T: Element> {
    pub(crate) ptr: *const T,
    pub(crate) layout: Layout,
    pub(crate) memory: Memory,
    _borrow: PhantomData<&'a [T]>,
}

impl<T: Element> Clone for TensorView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Element> Copy for TensorView<'_, T> {}

// A view is a shared borrow of T values: as thread-safe as &[T].
unsafe impl<T: Element> Send for TensorView<'_, T> {}
unsafe impl<T: Element> Sync for TensorView<'_, T> {}

impl<'a, T: Element> TensorView<'a, T> {
    /// A contiguous `[batch, heads, seq, head_dim]` tensor in `data`.
    pub fn new(data: &'a [T], dims: [usize; 4]) -> Result<Self> {
        Self::with_strides(data, dims, Layout::contiguous(dims).strides)
    }

    /// A strided view into `data`: element `[b, h, i, d]` is
    /// `data[b*strides[0] + h*strides[1] + i*strides[2] + d*strides[3]]`.
    /// Fails when that reaches past the end of `data`.
    pub fn with_strides(data: &'a [T], dims: [usize; 4], strides: [usize; 4]) -> Result<Self> {
        let layout = Layout { dims, strides };
        layout.check_fits(data.len(), "TensorView")?;
        Ok(TensorView {
            ptr: data.as_ptr(),
            layout,
            memory: Memory::Host,
            _borrow: PhantomData,
        })
    }

    /// A view of memory this crate cannot see, such as a CUDA device buffer.
    ///
    /// # Safety
    /// `ptr` must point at memory on `memory`, valid for reads at every
    /// element the dims and strides address, and not written by anyone else
    /// for `'a` (including work still pending on a CUDA stream).
    pub unsafe fn from_raw_parts(
        ptr: *const T,
        dims: [usize; 4],
        strides: [usize; 4],
        memory: Memory,
    ) -> Self {
        TensorView {
            ptr,
            layout: Layout { dims, strides },
            memory,
            _borrow: PhantomData,
        }
    }

    /// The same memory with the dims reordered: `view.permute([0, 2, 1, 3])`
    /// turns `[B, N, H, D]` storage into the `[B, H, N, D]` fmha reads.
    /// Panics when `order` is not a permutation of 0..4.
    pub fn permute(self, order: [usize; 4]) -> Self {
        TensorView {
            layout: self.layout.permute(order),
            ..self
        }
    }

    /// Only indices `start..start + len` of dimension `dim` (e.g. the K heads
    /// of a fused QKV buffer).
    pub fn narrow(self, dim: usize, start: usize, len: usize) -> Result<Self> {
        let (layout, offset) = self.layout.narrow(dim, start, len)?;
        // In bounds: the narrowed view addresses a subset of this one's.
        Ok(TensorView {
            ptr: self.ptr.wrapping_add(offset),
            layout,
            ..self
        })
    }

    pub fn dims(&self) -> [usize; 4] {
        self.layout.dims
    }

    pub fn strides(&self) -> [usize; 4] {
        self.layout.strides
    }

    pub fn memory(&self) -> Memory {
        self.memory
    }
}

/// A writable view (the output o), borrowing its memory exclusively for `'a`.
#[derive(Debug)]
pub struct TensorViewMut<'a, T: Element> {
    pub(crate) ptr: *mut T,
    pub(crate) layout: Layout,
    pub(crate) memory: Memory,
    _borrow: PhantomData<&'a mut [T]>,
}

// An exclusive borrow of T values: as thread-safe as &mut [T].
unsafe impl<T: Element> Send for TensorViewMut<'_, T> {}
unsafe impl<T: Element> Sync for TensorViewMut<'_, T> {}

impl<'a, T: Element> TensorViewMut<'a, T> {
    /// A contiguous `[batch, heads, seq, head_dim]` tensor in `data`.
    pub fn new(data: &'a mut [T], dims: [usize; 4]) -> Result<Self> {
        Self::with_strides(data, dims, Layout::contiguous(dims).strides)
    }

    /// A strided view into `data` (see [`TensorView::with_strides`]).
    pub fn with_strides(data: &'a mut [T], dims: [usize; 4], strides: [usize; 4]) -> Result<Self> {
        let layout = Layout { dims, strides };
        layout.check_fits(data.len(), "TensorViewMut")?;
        Ok(TensorViewMut {
            ptr: data.as_mut_ptr(),
            layout,
            memory: Memory::Host,
            _borrow: PhantomData,
        })
    }

    /// A writable view of memory this crate cannot see (a CUDA buffer).
    ///
    /// # Safety
    /// `ptr` must point at memory on `memory`, valid for reads and writes at
    /// every element the dims and strides address, and used by no one else
    /// for `'a`.
    pub unsafe fn from_raw_parts(
        ptr: *mut T,
        dims: [usize; 4],
        strides: [usize; 4],
        memory: Memory,
    ) -> Self {
        TensorViewMut {
            ptr,
            layout: Layout { dims, strides },
            memory,
            _borrow: PhantomData,
        }
    }

    /// See [`TensorView::permute`].
    pub fn permute(self, order: [usize; 4]) -> Self {
        TensorViewMut {
            layout: self.layout.permute(order),
            ..self
        }
    }

    /// See [`TensorView::narrow`].
    pub fn narrow(self, dim: usize, start: usize, len: usize) -> Result<Self> {
        let (layout, offset) = self.layout.narrow(dim, start, len)?;
        Ok(TensorViewMut {
            ptr: self.ptr.wrapping_add(offset),
            layout,
            ..self
        })
    }

    /// A shorter-lived view of the same memory, leaving `self` usable after.
    pub fn reborrow(&mut self) -> TensorViewMut<'_, T> {
        TensorViewMut {
            ptr: self.ptr,
            layout: self.layout,
            memory: self.memory,
            _borrow: PhantomData,
        }
    }

    /// Reads through this view (e.g. to check o after a forward).
    pub fn as_view(&self) -> TensorView<'_, T> {
        TensorView {
            ptr: self.ptr,
            layout: self.layout,
            memory: self.memory,
            _borrow: PhantomData,
        }
    }

    pub fn dims(&self) -> [usize; 4] {
        self.layout.dims
    }

    pub fn strides(&self) -> [usize; 4] {
        self.layout.strides
    }

    pub fn memory(&self) -> Memory {
        self.memory
    }
}

impl<T: Element> TensorView<'_, T> {
    /// Element `[b, h, i, d]` of a host view; None when out of range or the
    /// view is not host memory.
    pub fn get(&self, index: [usize; 4]) -> Option<T> {
        if self.memory != Memory::Host || (0..4).any(|d| index[d] >= self.layout.dims[d]) {
            return None;
        }
        let offset: usize = (0..4).map(|d| index[d] * self.layout.strides[d]).sum();
        // In bounds: checked against the slice when the view was made.
        Some(unsafe { *self.ptr.add(offset) })
    }
}

/// Where the log-sum-exp goes: `[batch, heads_q, seq_q]` contiguous `f32`.
#[derive(Debug)]
pub struct LseMut<'a> {
    pub(crate) ptr: *mut f32,
    pub(crate) len: usize,
    pub(crate) memory: Memory,
    _borrow: PhantomData<&'a mut [f32]>,
}

unsafe impl Send for LseMut<'_> {}
unsafe impl Sync for LseMut<'_> {}

impl<'a> LseMut<'a> {
    /// Host memory; its length must be `batch * heads_q * seq_q`.
    pub fn new(data: &'a mut [f32]) -> Self {
        LseMut {
            ptr: data.as_mut_ptr(),
            len: data.len(),
            memory: Memory::Host,
            _borrow: PhantomData,
        }
    }

    /// # Safety
    /// `ptr` must point at `len` f32 on `memory`, 4-byte aligned, valid for
    /// writes and used by no one else for `'a`.
    pub unsafe fn from_raw_parts(ptr: *mut f32, len: usize, memory: Memory) -> Self {
        LseMut {
            ptr,
            len,
            memory,
            _borrow: PhantomData,
        }
    }

    /// A shorter-lived handle on the same memory.
    pub fn reborrow(&mut self) -> LseMut<'_> {
        LseMut {
            ptr: self.ptr,
            len: self.len,
            memory: self.memory,
            _borrow: PhantomData,
        }
    }
}

/// A read-only `f32` log-sum-exp array: one part's `[batch, heads, seq]`
/// contiguous lse, as a forward wrote it, for [`crate::Handle::merge`].
#[derive(Clone, Copy, Debug)]
pub struct LseView<'a> {
    pub(crate) ptr: *const f32,
    pub(crate) len: usize,
    pub(crate) memory: Memory,
    _borrow: PhantomData<&'a [f32]>,
}

unsafe impl Send for LseView<'_> {}
unsafe impl Sync for LseView<'_> {}

impl<'a> LseView<'a> {
    /// Host memory; its length must be `batch * heads * seq`.
    pub fn new(data: &'a [f32]) -> Self {
        LseView {
            ptr: data.as_ptr(),
            len: data.len(),
            memory: Memory::Host,
            _borrow: PhantomData,
        }
    }

    /// # Safety
    /// `ptr` must point at `len` f32 on `memory`, 4-byte aligned, valid for
    /// reads and written by no one else for `'a`.
    pub unsafe fn from_raw_parts(ptr: *const f32, len: usize, memory: Memory) -> Self {
        LseView {
            ptr,
            len,
            memory,
            _borrow: PhantomData,
        }
    }
}

/// A read-only `i32` array: the metadata of the serving layouts
/// (`cu_seqlens_q`, `cu_seqlens_k`, `seqused_k`, `block_table`; see
/// [`crate::Options`]). It lives where the tensors do: host memory for a CPU
/// handle, device memory for a CUDA one, read by the kernels only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct I32View<'a> {
    pub(crate) ptr: *const i32,
    pub(crate) len: usize,
    pub(crate) memory: Memory,
    pub(crate) host: Option<&'a [i32]>,
}

unsafe impl Send for I32View<'_> {}
unsafe impl Sync for I32View<'_> {}

impl<'a> I32View<'a> {
    /// Host memory.
    pub fn new(data: &'a [i32]) -> Self {
        I32View {
            ptr: data.as_ptr(),
            len: data.len(),
            memory: Memory::Host,
            host: Some(data),
        }
    }

    /// # Safety
    /// `ptr` must point at `len` i32 on `memory`, 4-byte aligned, valid for
    /// reads and written by no one else for `'a`.
    pub unsafe fn from_raw_parts(ptr: *const i32, len: usize, memory: Memory) -> Self {
        I32View {
            ptr,
            len,
            memory,
            host: None,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A read-only `f32` array of fmha 0.3's inference numerics: the descale
/// factors (`[B, Hk]`) and the ALiBi slopes (`[Hq]` or `[B, Hq]`; see
/// [`crate::Options`]). Like [`I32View`], it lives where the tensors do and
/// is read by the kernels only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct F32View<'a> {
    pub(crate) ptr: *const f32,
    pub(crate) len: usize,
    pub(crate) memory: Memory,
    _borrow: PhantomData<&'a [f32]>,
}

unsafe impl Send for F32View<'_> {}
unsafe impl Sync for F32View<'_> {}

impl<'a> F32View<'a> {
    /// Host memory.
    pub fn new(data: &'a [f32]) -> Self {
        F32View {
            ptr: data.as_ptr(),
            len: data.len(),
            memory: Memory::Host,
            _borrow: PhantomData,
        }
    }

    /// # Safety
    /// `ptr` must point at `len` f32 on `memory`, 4-byte aligned, valid for
    /// reads and written by no one else for `'a`.
    pub unsafe fn from_raw_parts(ptr: *const f32, len: usize, memory: Memory) -> Self {
        F32View {
            ptr,
            len,
            memory,
            _borrow: PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A bias view with its element type erased (what [`crate::Options::bias`]
/// keeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BiasView<'a> {
    pub ptr: *const std::ffi::c_void,
    pub dtype: crate::element::DType,
    pub layout: Layout,
    pub memory: Memory,
    _borrow: PhantomData<&'a ()>,
}

impl<'a> BiasView<'a> {
    pub(crate) fn of<T: Element>(view: &TensorView<'a, T>) -> Self {
        BiasView {
            ptr: view.ptr.cast(),
            dtype: T::DTYPE,
            layout: view.layout,
            memory: view.memory,
            _borrow: PhantomData,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked() {
        let data = vec![0f32; 2 * 3 * 4 * 5];
        assert!(TensorView::new(&data, [2, 3, 4, 5]).is_ok());
        let err = TensorView::new(&data, [2, 3, 4, 6]).unwrap_err();
        assert!(err.message().contains("reach element"), "{err}");
        assert!(TensorView::with_strides(&data, [2, 3, 4, 5], [0, 0, 0, 1]).is_ok());
        assert!(TensorView::with_strides(&data, [1, 1, 1, 2], [0, 0, 0, usize::MAX]).is_err());
    }

    #[test]
    fn permute_and_narrow() {
        // [B=1, N=2, heads=3, D=2] storage, values = flat index.
        let data: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let bnhd = TensorView::new(&data, [1, 2, 3, 2]).unwrap();
        let k = bnhd.narrow(2, 1, 1).unwrap().permute([0, 2, 1, 3]);
        assert_eq!(k.dims(), [1, 1, 2, 2]);
        assert_eq!(k.strides(), [12, 2, 6, 1]);
        assert_eq!(k.get([0, 0, 1, 1]), Some(9.0)); // token 1, head 1, d 1
        assert_eq!(k.get([0, 1, 0, 0]), None);
        assert!(bnhd.narrow(2, 2, 2).is_err());
    }
}
