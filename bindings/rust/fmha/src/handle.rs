//! [`Handle`]: one device's fmha context, and the forward call.
use std::ffi::{c_void, CStr, CString};
use std::ptr::{self, NonNull};

use fmha_sys as sys;

use crate::element::{Element, OutputElement};
use crate::error::{check, Error, Result, Status};
use crate::tensor::{
    BiasView, F32View, I32View, Layout, LseMut, LseView, Memory, TensorView, TensorViewMut,
};

/// The device a [`Handle`] runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    /// The CUDA device with this ordinal.
    Cuda(i32),
}

impl Device {
    fn memory(self) -> Memory {
        match self {
            Device::Cpu => Memory::Host,
            Device::Cuda(ordinal) => Memory::Cuda(ordinal),
        }
    }
}

/// Where the causal diagonal of query `i` (of `Nq`) sits among `Nk` keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CausalAlignment {
    /// Key `i + Nk - Nq` (FlashAttention >= 2.1): a query block at the end of
    /// a KV cache, as in decoding and chunked prefill.
    BottomRight,
    /// Key `i` (torch's `is_causal`).
    TopLeft,
}

/// Everything of a forward besides the tensors. Defaults: no mask, no
/// window, scale `1/sqrt(head_dim)`, no softcap, automatic kernel choice, a
/// dense batch.
///
/// ```
/// use fmha::{CausalAlignment, Options};
/// let opts = Options::new().causal(CausalAlignment::BottomRight).window(Some(4096), None);
/// ```
///
/// The serving layouts borrow their `i32` metadata ([`I32View`], on the
/// handle's device) for `'a`; the masks then apply per sequence, with each
/// sequence's own `Nq` and `Nk`:
///
/// ```
/// use fmha::{Handle, I32View, Options, TensorView, TensorViewMut};
/// # fn main() -> fmha::Result<()> {
/// // Two sequences packed along the seq axis: 3 and 5 queries, 4 and 6 keys.
/// let (cu_q, cu_k) = ([0, 3, 8], [0, 4, 10]);
/// let (q, k) = (vec![0.5f32; 2 * 8 * 16], vec![0.25f32; 2 * 10 * 16]);
/// let mut o = vec![0f32; q.len()];
/// let opts = Options::new().cu_seqlens_q(I32View::new(&cu_q)).cu_seqlens_k(I32View::new(&cu_k));
/// # let mut handle = Handle::cpu()?;
/// # let r = handle.forward(&TensorView::new(&q, [1, 2, 8, 16])?, &TensorView::new(&k, [1, 2, 10, 16])?,
/// #     &TensorView::new(&k, [1, 2, 10, 16])?, &mut TensorViewMut::new(&mut o, [1, 2, 8, 16])?, None, &opts);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options<'a> {
    causal: Option<CausalAlignment>,
    window_left: Option<u32>,
    window_right: Option<u32>,
    scale: Option<f32>,
    softcap: f32,
    kernel: Option<String>,
    num_splits: u32,
    cu_seqlens_q: Option<I32View<'a>>,
    cu_seqlens_k: Option<I32View<'a>>,
    max_seqlen_q: Option<u32>,
    max_seqlen_k: Option<u32>,
    seqused_k: Option<I32View<'a>>,
    block_table: Option<(I32View<'a>, usize)>,
    q_descale: Option<F32View<'a>>,
    k_descale: Option<F32View<'a>>,
    v_descale: Option<F32View<'a>>,
    bias: Option<BiasView<'a>>,
    alibi_slopes: Option<(F32View<'a>, usize)>,
}

impl<'a> Options<'a> {
    pub fn new() -> Options<'a> {
        Options::default()
    }

    /// Masks every key after the diagonal.
    pub fn causal(mut self, alignment: CausalAlignment) -> Options<'a> {
        self.causal = Some(alignment);
        self
    }

    /// Sliding window: key `j` is visible to query `i` iff
    /// `diag(i) - left <= j <= diag(i) + right`; `None` = unbounded. With
    /// [`Options::causal`], `right` must be `None` or `Some(0)`.
    pub fn window(mut self, left: Option<u32>, right: Option<u32>) -> Options<'a> {
        self.window_left = left;
        self.window_right = right;
        self
    }

    /// The logit scale (finite, > 0); default `1/sqrt(head_dim)`.
    pub fn scale(mut self, scale: f32) -> Options<'a> {
        self.scale = Some(scale);
        self
    }

    /// Logits `s -> softcap * tanh(s / softcap)`; 0 = off.
    pub fn softcap(mut self, softcap: f32) -> Options<'a> {
        self.softcap = softcap;
        self
    }

    /// Forces a registered kernel by name (see [`crate::kernels`]).
    pub fn kernel(mut self, name: &str) -> Options<'a> {
        self.kernel = Some(name.to_owned());
        self
    }

    /// CUDA: split the keys into at most n parts (0 = automatic, 1 = none).
    pub fn num_splits(mut self, n: u32) -> Options<'a> {
        self.num_splits = n;
        self
    }

    /// Packed queries: `[num_seqs + 1]` non-decreasing offsets from 0; q and
    /// o are `[1, Hq, total_q, D]`, sequence `s` owns rows
    /// `cu[s]..cu[s+1]`, and the lse is `1 * Hq * total_q` values.
    pub fn cu_seqlens_q(mut self, cu: I32View<'a>) -> Options<'a> {
        self.cu_seqlens_q = Some(cu);
        self
    }

    /// Packed keys likewise: k and v are `[1, Hk, total_k, D]`. Not with
    /// [`Options::block_table`].
    pub fn cu_seqlens_k(mut self, cu: I32View<'a>) -> Options<'a> {
        self.cu_seqlens_k = Some(cu);
        self
    }

    /// A host-known upper bound on every sequence's query count (sizes the
    /// launch; no device sync). Default with packed queries: exact from
    /// host offsets, else the packed length `q.dims[2]`.
    pub fn max_seqlen_q(mut self, n: u32) -> Options<'a> {
        self.max_seqlen_q = Some(n);
        self
    }

    /// The same bound for keys. Default with packed keys: exact from host
    /// offsets, else `k.dims[2]`; with a block table, pages x page size.
    pub fn max_seqlen_k(mut self, n: u32) -> Options<'a> {
        self.max_seqlen_k = Some(n);
        self
    }

    /// `[B]`: sequence `b` sees only its first `used[b]` keys (a KV cache's
    /// fill level).
    pub fn seqused_k(mut self, used: I32View<'a>) -> Options<'a> {
        self.seqused_k = Some(used);
        self
    }

    /// Paged K/V: k and v are `[num_pages, Hk, page_size, D]` views (see
    /// [`TensorView::permute`] for vLLM's `[pages, page_size, Hk, D]`
    /// storage); key `j` of sequence `b` is slot `j % page_size` of page
    /// `table[b * stride + j / page_size]`. Needs [`Options::seqused_k`].
    pub fn block_table(mut self, table: I32View<'a>, stride: usize) -> Options<'a> {
        self.block_table = Some((table, stride));
        self
    }

    // ---- fmha 0.3: inference numerics --------------------------------------
    // The logits are s = scale * q_descale * k_descale * (q . k), soft-capped,
    // then s += bias - slope * |diag(i) - j|, then masked; o = v_descale *
    // softmax(s) v, and the lse is that of the final s (before v_descale). A
    // row whose every visible logit is -inf gets o = 0 and lse = -inf.

    /// Per-(sequence, KV head) factor of q: `[B, Hk]` row-major, `B` the
    /// batch (the number of sequences of a ragged batch); it applies to the
    /// query heads of that KV head's group. Any dtype, not only FP8.
    pub fn q_descale(mut self, descale: F32View<'a>) -> Options<'a> {
        self.q_descale = Some(descale);
        self
    }

    /// The factor of k likewise (`[B, Hk]`).
    pub fn k_descale(mut self, descale: F32View<'a>) -> Options<'a> {
        self.k_descale = Some(descale);
        self
    }

    /// The factor of v likewise (`[B, Hk]`): it multiplies o, not the lse.
    pub fn v_descale(mut self, descale: F32View<'a>) -> Options<'a> {
        self.v_descale = Some(descale);
        self
    }

    /// An additive bias `[B, Hq, Nq, Nk]` (a float attention mask), `f32`,
    /// [`crate::F16`] or [`crate::Bf16`]: each dim is that size or 1 (it
    /// broadcasts), and a stride of 0 broadcasts too, so `[1, 1, Nq, Nk]` is
    /// a mask shared by the batch and `[B, 1, 1, Nk]` a key padding mask.
    /// `-inf` masks a key out. For serving layouts `Nq` and `Nk` are the
    /// sequence-length bounds, and each sequence reads the bias at its own
    /// positions (fmha.h).
    pub fn bias<B: OutputElement>(mut self, bias: TensorView<'a, B>) -> Options<'a> {
        self.bias = Some(BiasView::of(&bias));
        self
    }

    /// ALiBi: `s -= slope * |diag(i) - j|`. `row_stride` 0: `slopes` holds
    /// `Hq` slopes for every sequence; else `[B, Hq]` with row `b` at
    /// `b * row_stride` (`row_stride >= Hq`).
    pub fn alibi_slopes(mut self, slopes: F32View<'a>, row_stride: usize) -> Options<'a> {
        self.alibi_slopes = Some((slopes, row_stride));
        self
    }
}

/// 64-byte blocks: the host workspace buffer is aligned beyond the 16 bytes
/// fmha asks for.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Block([u8; 64]);

/// An fmha handle for one device (`fmha_create` / `fmha_destroy` on drop).
///
/// A handle is used by one thread at a time: it is `Send`, not `Sync`, and
/// every call takes `&mut self`. It keeps a host workspace buffer between
/// CPU forwards.
pub struct Handle {
    raw: NonNull<sys::fmha_context>,
    device: Device,
    stream: *mut c_void,
    host_workspace: Vec<Block>,
    /// The closure fmha_set_parallel_for was given (its `user` pointer).
    parallel_for: Option<Box<ParallelForFn>>,
}

type ParallelForFn = Box<dyn Fn(&Tasks) + Send + Sync>;

/// The work items of one parallel-for call fmha makes on a CPU handle with
/// [`Handle::set_parallel_for`]: run [`Tasks::run`] for every index in
/// `0..count()`, on any threads, in any order, and return when all are done.
/// `Tasks` is `Sync`: share `&Tasks` with your threads (e.g.
/// `std::thread::scope`); its borrow ends when your closure returns.
pub struct Tasks {
    task: unsafe extern "C" fn(*mut c_void, i64),
    ctx: *mut c_void,
    done: Vec<std::sync::atomic::AtomicBool>,
}

// fmha's tasks may run on any threads, concurrently (fmha.h).
unsafe impl Send for Tasks {}
unsafe impl Sync for Tasks {}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("count", &self.count())
            .finish_non_exhaustive()
    }
}

impl Tasks {
    /// How many tasks this call has.
    pub fn count(&self) -> usize {
        self.done.len()
    }

    /// Runs task `index`. Returns false, running nothing, for an index out
    /// of `0..count()` or one already run (each task runs at most once).
    pub fn run(&self, index: usize) -> bool {
        match self.done.get(index) {
            Some(flag) if !flag.swap(true, std::sync::atomic::Ordering::AcqRel) => {
                unsafe { (self.task)(self.ctx, index as i64) };
                true
            }
            _ => false,
        }
    }
}

/// fmha_parallel_for_fn: calls the closure stored in the handle.
unsafe extern "C" fn parallel_for_trampoline(
    user: *mut c_void,
    count: i64,
    task: Option<unsafe extern "C" fn(*mut c_void, i64)>,
    ctx: *mut c_void,
) {
    let (Some(task), false) = (task, user.is_null()) else {
        return;
    };
    let f = &*(user as *const ParallelForFn);
    let count = usize::try_from(count).unwrap_or(0);
    let tasks = Tasks {
        task,
        ctx,
        done: (0..count)
            .map(|_| std::sync::atomic::AtomicBool::new(false))
            .collect(),
    };
    // A panic must not unwind into C, nor return while tasks may still run.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&tasks))).is_err() {
        eprintln!("fmha: the closure given to Handle::set_parallel_for panicked; aborting");
        std::process::abort();
    }
}

// The C API allows a handle to move between threads; &mut self serializes use.
unsafe impl Send for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        unsafe { sys::fmha_destroy(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

/// fmha_forward_params for one call; `kernel` keeps params.kernel's string.
struct Params {
    raw: sys::fmha_forward_params,
    _kernel: Option<CString>,
}

fn c_tensor<T: Element>(ptr: *const T, layout: Layout, what: &str) -> Result<sys::fmha_tensor> {
    let (dims, strides) = layout.to_c(what)?;
    Ok(sys::fmha_tensor {
        data: ptr as *mut c_void,
        dtype: T::DTYPE.raw(),
        dims,
        strides,
    })
}

fn window_end(x: Option<u32>, what: &str) -> Result<i32> {
    match x {
        None => Ok(-1),
        Some(n) => i32::try_from(n).map_err(|_| Error::invalid(format!("{what}={n} exceeds i32"))),
    }
}

impl Handle {
    /// Creates a handle. CUDA: `Status::NotAvailable` when fmha was built
    /// without CUDA, no GPU is present or the ordinal names none.
    pub fn new(device: Device) -> Result<Handle> {
        let (kind, ordinal) = match device {
            Device::Cpu => (sys::FMHA_DEVICE_CPU, 0),
            Device::Cuda(ordinal) => (sys::FMHA_DEVICE_CUDA, ordinal),
        };
        let mut raw: sys::fmha_handle = ptr::null_mut();
        check(unsafe { sys::fmha_create(&mut raw, kind, ordinal) })?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::new(Status::Internal, "fmha_create gave NULL"))?;
        Ok(Handle {
            raw,
            device,
            stream: ptr::null_mut(),
            host_workspace: Vec::new(),
            parallel_for: None,
        })
    }

    /// A CPU handle.
    pub fn cpu() -> Result<Handle> {
        Handle::new(Device::Cpu)
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// CPU worker threads for later forwards (0 = one per hardware thread).
    pub fn set_num_threads(&mut self, num_threads: usize) -> Result<()> {
        let n = i32::try_from(num_threads)
            .map_err(|_| Error::invalid(format!("num_threads={num_threads} exceeds i32")))?;
        check(unsafe { sys::fmha_set_num_threads(self.raw.as_ptr(), n) })
    }

    /// CPU: later forwards run their work items through `f` (your job
    /// system) instead of fmha's worker threads; results are bitwise
    /// identical. `f` is called from the thread that calls
    /// [`Handle::forward`] and must run every task of the [`Tasks`] it gets
    /// before returning (a forward whose `f` left some out returns
    /// `Status::InvalidArgument`). A panic in `f` aborts the process.
    /// [`Handle::set_num_threads`] still caps how many tasks compute at once.
    /// CUDA handles ignore it.
    pub fn set_parallel_for<F>(&mut self, f: F) -> Result<()>
    where
        F: Fn(&Tasks) + Send + Sync + 'static,
    {
        let boxed: Box<ParallelForFn> = Box::new(Box::new(f));
        let user = &*boxed as *const ParallelForFn as *mut c_void;
        check(unsafe {
            sys::fmha_set_parallel_for(self.raw.as_ptr(), Some(parallel_for_trampoline), user)
        })?;
        self.parallel_for = Some(boxed);
        Ok(())
    }

    /// Restores fmha's own worker threads after [`Handle::set_parallel_for`].
    pub fn clear_parallel_for(&mut self) -> Result<()> {
        check(unsafe { sys::fmha_set_parallel_for(self.raw.as_ptr(), None, ptr::null_mut()) })?;
        self.parallel_for = None;
        Ok(())
    }

    /// CUDA: the `cudaStream_t` later forwards are enqueued on (null = the
    /// legacy default stream). Forwards are asynchronous on it.
    ///
    /// # Safety
    /// `stream` must be null or a live stream of this handle's device, and
    /// stay alive while work fmha enqueued on it may still run.
    pub unsafe fn set_stream(&mut self, stream: *mut c_void) -> Result<()> {
        check(sys::fmha_set_stream(self.raw.as_ptr(), stream))?;
        self.stream = stream;
        Ok(())
    }

    /// The raw handle, for calls into `fmha_sys`. Still owned by `self`.
    pub fn as_raw(&self) -> sys::fmha_handle {
        self.raw.as_ptr()
    }

    fn params<Q: Element, KV: Element, O: OutputElement>(
        &self,
        q: &TensorView<'_, Q>,
        k: &TensorView<'_, KV>,
        v: &TensorView<'_, KV>,
        o: &TensorViewMut<'_, O>,
        lse: Option<&LseMut<'_>>,
        options: &Options<'_>,
    ) -> Result<Params> {
        let want = self.device.memory();
        let places = [
            ("q", q.memory),
            ("k", k.memory),
            ("v", v.memory),
            ("o", o.memory),
        ];
        for (what, memory) in places.into_iter().chain(lse.map(|l| ("lse", l.memory))) {
            if memory != want {
                return Err(Error::invalid(format!(
                    "{what} is in {memory:?} memory but the handle is {:?}",
                    self.device
                )));
            }
        }
        let mut raw = unsafe {
            let mut p = std::mem::MaybeUninit::<sys::fmha_forward_params>::zeroed();
            sys::fmha_forward_params_init_sized(
                p.as_mut_ptr(),
                std::mem::size_of::<sys::fmha_forward_params>(),
            );
            p.assume_init()
        };
        raw.q = c_tensor(q.ptr, q.layout, "q")?;
        raw.k = c_tensor(k.ptr, k.layout, "k")?;
        raw.v = c_tensor(v.ptr, v.layout, "v")?;
        raw.o = c_tensor(o.ptr as *const O, o.layout, "o")?;
        if let Some(lse) = lse {
            let [b, h, n, _] = q.layout.dims;
            let rows = b.checked_mul(h).and_then(|x| x.checked_mul(n));
            if rows != Some(lse.len) {
                return Err(Error::invalid(format!(
                    "lse has {} elements; q needs batch*heads*seq = {b}*{h}*{n}",
                    lse.len
                )));
            }
            raw.lse = lse.ptr;
        }
        raw.mask_flags = match options.causal {
            None => sys::FMHA_MASK_NONE,
            Some(CausalAlignment::BottomRight) => sys::FMHA_MASK_CAUSAL,
            Some(CausalAlignment::TopLeft) => sys::FMHA_MASK_CAUSAL_TOP_LEFT,
        };
        raw.window_left = window_end(options.window_left, "window left")?;
        raw.window_right = window_end(options.window_right, "window right")?;
        raw.scale = options.scale.unwrap_or(0.0);
        if options.scale == Some(0.0) {
            return Err(Error::invalid(
                "scale=0 must be > 0 (leave it unset for 1/sqrt(head_dim))",
            ));
        }
        raw.softcap = options.softcap;
        raw.num_splits = i32::try_from(options.num_splits).map_err(|_| {
            Error::invalid(format!("num_splits={} exceeds i32", options.num_splits))
        })?;
        let kernel = match &options.kernel {
            None => None,
            Some(name) => Some(
                CString::new(name.as_str())
                    .map_err(|_| Error::invalid(format!("kernel name {name:?} contains NUL")))?,
            ),
        };
        raw.kernel = kernel.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        let batch = self.set_serving(&mut raw, q, k, options)?;
        self.set_numerics(&mut raw, batch, q.layout.dims[1], k.layout.dims[1], options)?;
        Ok(Params {
            raw,
            _kernel: kernel,
        })
    }

    /// The 0.3 fields of `raw` from `options`, after checking what the
    /// library cannot see (it reads the descales and slopes as bare
    /// pointers): where they live and how long they are. `batch`: the
    /// number of sequences.
    fn set_numerics(
        &self,
        raw: &mut sys::fmha_forward_params,
        batch: usize,
        heads_q: usize,
        heads_k: usize,
        options: &Options<'_>,
    ) -> Result<()> {
        let want = self.device.memory();
        let place = |what: &str, memory: Memory| {
            if memory == want {
                Ok(())
            } else {
                Err(Error::invalid(format!(
                    "{what} is in {memory:?} memory but the handle is {:?}",
                    self.device
                )))
            }
        };
        let factors = batch.saturating_mul(heads_k);
        let descales = [
            ("q_descale", options.q_descale, &mut raw.q_descale),
            ("k_descale", options.k_descale, &mut raw.k_descale),
            ("v_descale", options.v_descale, &mut raw.v_descale),
        ];
        for (what, view, field) in descales {
            if let Some(view) = view {
                place(what, view.memory)?;
                if view.len != factors {
                    return Err(Error::invalid(format!(
                        "{what} has {} factors; [batch, kv heads] = [{batch}, {heads_k}] needs {factors}",
                        view.len
                    )));
                }
                *field = view.ptr;
            }
        }
        if let Some((slopes, stride)) = options.alibi_slopes {
            place("alibi_slopes", slopes.memory)?;
            let need = if stride == 0 || batch == 0 {
                Some(heads_q)
            } else {
                (batch - 1).checked_mul(stride).and_then(|x| x.checked_add(heads_q))
            };
            if need.map_or(true, |n| slopes.len < n) {
                return Err(Error::invalid(format!(
                    "alibi_slopes has {} slopes; {} with row stride {stride} needs {}",
                    slopes.len,
                    if stride == 0 { format!("[{heads_q}]") } else { format!("[{batch}, {heads_q}]") },
                    need.map_or("more than usize holds".to_owned(), |n| n.to_string())
                )));
            }
            raw.alibi_slopes = slopes.ptr;
            raw.alibi_slopes_stride = i64::try_from(stride)
                .map_err(|_| Error::invalid(format!("alibi_slopes row stride {stride} exceeds i64")))?;
        }
        if let Some(bias) = options.bias {
            place("bias", bias.memory)?;
            let (dims, strides) = bias.layout.to_c("bias")?;
            raw.bias = sys::fmha_tensor {
                data: bias.ptr as *mut c_void,
                dtype: bias.dtype.raw(),
                dims,
                strides,
            };
        }
        Ok(())
    }

    /// The serving fields of `raw` from `options`, after checking what the
    /// library cannot see: where the metadata lives and how long it is.
    /// Returns the batch: the number of sequences.
    fn set_serving<Q: Element, KV: Element>(
        &self,
        raw: &mut sys::fmha_forward_params,
        q: &TensorView<'_, Q>,
        k: &TensorView<'_, KV>,
        options: &Options<'_>,
    ) -> Result<usize> {
        let arrays = [
            ("cu_seqlens_q", options.cu_seqlens_q),
            ("cu_seqlens_k", options.cu_seqlens_k),
            ("seqused_k", options.seqused_k),
            ("block_table", options.block_table.map(|(t, _)| t)),
        ];
        for (what, a) in arrays {
            if let Some(a) = a {
                if a.memory != self.device.memory() {
                    return Err(Error::invalid(format!(
                        "{what} is in {:?} memory but the handle is {:?}",
                        a.memory, self.device
                    )));
                }
            }
        }
        let i32_of = |x: usize, what: &str| {
            i32::try_from(x).map_err(|_| Error::invalid(format!("{what}={x} exceeds i32")))
        };
        let batch = match (options.cu_seqlens_q, options.cu_seqlens_k) {
            (None, None) => q.layout.dims[0],
            (a, b) => {
                let lens: Vec<usize> = [a, b].iter().flatten().map(|c| c.len).collect();
                if lens.iter().any(|&n| n != lens[0]) || lens[0] == 0 {
                    return Err(Error::invalid(format!(
                        "cu_seqlens_q/cu_seqlens_k must hold num_seqs + 1 >= 1 entries each                          (lengths {lens:?})"
                    )));
                }
                raw.num_seqs = i32_of(lens[0] - 1, "num_seqs")?;
                lens[0] - 1
            }
        };
        // The host-known bound on each sequence: given, else exact from host
        // offsets, else the packed length.
        let bound = |given: Option<u32>, cu: Option<I32View<'_>>, packed: usize, what: &str| {
            match (given, cu) {
                (Some(n), _) => i32_of(n as usize, what),
                (None, None) => Ok(0),
                (None, Some(cu)) => match cu.host {
                    Some(h) => Ok(h.windows(2).map(|w| w[1].saturating_sub(w[0])).max().unwrap_or(0).max(0)),
                    None => i32_of(packed, what),
                },
            }
        };
        raw.max_seqlen_q = bound(options.max_seqlen_q, options.cu_seqlens_q, q.layout.dims[2], "max_seqlen_q")?;
        raw.max_seqlen_k = bound(options.max_seqlen_k, options.cu_seqlens_k, k.layout.dims[2], "max_seqlen_k")?;
        raw.cu_seqlens_q = options.cu_seqlens_q.map_or(ptr::null(), |c| c.ptr);
        raw.cu_seqlens_k = options.cu_seqlens_k.map_or(ptr::null(), |c| c.ptr);
        if let Some(used) = options.seqused_k {
            if used.len != batch {
                return Err(Error::invalid(format!(
                    "seqused_k has {} entries; the batch has {batch} sequences",
                    used.len
                )));
            }
            raw.seqused_k = used.ptr;
        }
        if let Some((table, stride)) = options.block_table {
            if batch.checked_mul(stride).map_or(true, |need| table.len < need) {
                return Err(Error::invalid(format!(
                    "block_table has {} entries; {batch} sequences of stride {stride} need {}",
                    table.len,
                    batch.saturating_mul(stride)
                )));
            }
            raw.block_table = table.ptr;
            raw.block_table_stride = i64::try_from(stride)
                .map_err(|_| Error::invalid(format!("block_table stride {stride} exceeds i64")))?;
        }
        Ok(batch)
    }

    fn workspace_bytes(&self, params: &Params) -> Result<usize> {
        let mut bytes = 0usize;
        check(unsafe {
            sys::fmha_forward_workspace_size(self.raw.as_ptr(), &params.raw, &mut bytes)
        })?;
        Ok(bytes)
    }

    /// Bytes of workspace [`Handle::forward_with_workspace`] needs for these
    /// arguments (may be 0). Validates them as a forward would.
    pub fn workspace_size<Q: Element, KV: Element, O: OutputElement>(
        &self,
        q: &TensorView<'_, Q>,
        k: &TensorView<'_, KV>,
        v: &TensorView<'_, KV>,
        o: &TensorViewMut<'_, O>,
        lse: Option<&LseMut<'_>>,
        options: &Options<'_>,
    ) -> Result<usize> {
        self.workspace_bytes(&self.params(q, k, v, o, lse, options)?)
    }

    /// `o = softmax(q k^T * scale + mask) v`, and the row log-sum-exp into
    /// `lse` when given.
    ///
    /// q: `[B, Hq, Nq, D]`; k, v: `[B, Hk, Nk, D]` with `Hq % Hk == 0` (GQA:
    /// query head h reads KV head `h / (Hq / Hk)`); o: `[B, Hq, Nq, D]`; lse:
    /// `B * Hq * Nq` values. Every view must be on this handle's device.
    /// Element types: q, k, v of one type, or FP8 k and v ([`crate::F8E4M3`],
    /// [`crate::F8E5M2`]) under an `F16`, `Bf16` or FP8 q (else
    /// `Status::InvalidArgument`); o of any [`OutputElement`] whatever the
    /// inputs: its type is the output dtype.
    ///
    /// The workspace is handled here: a buffer kept in the handle for CPU
    /// forwards; for CUDA forwards, stream-ordered device memory when the
    /// crate's `cuda` feature is on (else a CUDA forward that needs a
    /// workspace fails: use [`Handle::forward_with_workspace`]). On CUDA the
    /// call is asynchronous on the handle's stream. On error nothing is
    /// written.
    pub fn forward<Q: Element, KV: Element, O: OutputElement>(
        &mut self,
        q: &TensorView<'_, Q>,
        k: &TensorView<'_, KV>,
        v: &TensorView<'_, KV>,
        o: &mut TensorViewMut<'_, O>,
        lse: Option<&mut LseMut<'_>>,
        options: &Options<'_>,
    ) -> Result<()> {
        let params = self.params(q, k, v, o, lse.as_deref(), options)?;
        let need = self.workspace_bytes(&params)?;
        match self.device {
            Device::Cpu => {
                let blocks = need.div_ceil(std::mem::size_of::<Block>());
                if self.host_workspace.len() < blocks {
                    self.host_workspace.resize(blocks, Block([0; 64]));
                }
                let ws = if need == 0 {
                    ptr::null_mut()
                } else {
                    self.host_workspace.as_mut_ptr() as *mut c_void
                };
                check(unsafe { sys::fmha_forward(self.raw.as_ptr(), &params.raw, ws, need) })
            }
            Device::Cuda(ordinal) => self.cuda_forward(&params, need, ordinal),
        }
    }

    #[cfg(feature = "cuda")]
    fn cuda_forward(&mut self, params: &Params, need: usize, ordinal: i32) -> Result<()> {
        if need == 0 {
            return check(unsafe {
                sys::fmha_forward(self.raw.as_ptr(), &params.raw, ptr::null_mut(), 0)
            });
        }
        let ws = crate::cuda::StreamBuffer::new(ordinal, need, self.stream)?;
        check(unsafe { sys::fmha_forward(self.raw.as_ptr(), &params.raw, ws.ptr(), need) })
        // ws is freed in stream order after the kernel that uses it.
    }

    #[cfg(not(feature = "cuda"))]
    fn cuda_forward(&mut self, params: &Params, need: usize, _ordinal: i32) -> Result<()> {
        if need > 0 {
            return Err(Error::invalid(format!(
                "this CUDA forward needs {need} bytes of device workspace: enable the fmha \
                 crate's `cuda` feature or call forward_with_workspace"
            )));
        }
        check(unsafe { sys::fmha_forward(self.raw.as_ptr(), &params.raw, ptr::null_mut(), 0) })
    }

    /// [`Handle::forward`] with a workspace the caller provides (e.g. for
    /// CUDA graph capture, or a caching allocator of the caller's).
    ///
    /// # Safety
    /// `workspace` must be memory of this handle's device, 16-byte aligned,
    /// `workspace_bytes` long, and unused by anything else until the forward
    /// has finished (on CUDA: until the stream passes it).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn forward_with_workspace<Q: Element, KV: Element, O: OutputElement>(
        &mut self,
        q: &TensorView<'_, Q>,
        k: &TensorView<'_, KV>,
        v: &TensorView<'_, KV>,
        o: &mut TensorViewMut<'_, O>,
        lse: Option<&mut LseMut<'_>>,
        options: &Options<'_>,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        let params = self.params(q, k, v, o, lse.as_deref(), options)?;
        check(sys::fmha_forward(
            self.raw.as_ptr(),
            &params.raw,
            workspace,
            workspace_bytes,
        ))
    }

    /// Which kernel a forward with these arguments would run and why each
    /// better-ranked one was passed over. Computes nothing. Returns the text
    /// also when no kernel supports the problem (it says why).
    pub fn explain<Q: Element, KV: Element, O: OutputElement>(
        &self,
        q: &TensorView<'_, Q>,
        k: &TensorView<'_, KV>,
        v: &TensorView<'_, KV>,
        o: &TensorViewMut<'_, O>,
        lse: Option<&LseMut<'_>>,
        options: &Options<'_>,
    ) -> Result<String> {
        let params = self.params(q, k, v, o, lse, options)?;
        let mut buf = vec![0u8; 1 << 14];
        let status = unsafe {
            sys::fmha_forward_explain(
                self.raw.as_ptr(),
                &params.raw,
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if status != sys::FMHA_ERROR_UNSUPPORTED {
            check(status)?;
        }
        let text = CStr::from_bytes_until_nul(&buf)
            .map_err(|_| Error::new(Status::Internal, "unterminated"))?;
        Ok(text.to_string_lossy().into_owned())
    }

    /// Merges attention results computed over disjoint key sets into the
    /// attention over all of them (`fmha_merge`):
    ///
    /// `lse = ln(sum_i exp(lse_i))`, `o = sum_i exp(lse_i - lse) * o_i`,
    ///
    /// in FP32 (FP64 on the CPU). A part whose lse is `-inf` (it saw no key
    /// of that row) contributes nothing; a row whose parts are all `-inf`
    /// gets `o = 0`, `lse = -inf`; a NaN lse makes the row NaN.
    ///
    /// `parts`: views of one shape `[B, H, N, D]` and element type, each with
    /// its `B * H * N` lse in `lses` (what [`Handle::forward`] wrote). `o`:
    /// the result, same shape, any element type; `lse`: optional. Every view
    /// on this handle's device. On CUDA the call is asynchronous on the
    /// handle's stream and needs no workspace. An in-place merge (`o` being
    /// `parts[0]`) is possible through the `unsafe` raw-parts constructors
    /// only, as Rust's borrows forbid it otherwise. On error nothing is
    /// written.
    pub fn merge<T: OutputElement, U: OutputElement>(
        &mut self,
        parts: &[TensorView<'_, T>],
        lses: &[LseView<'_>],
        o: &mut TensorViewMut<'_, U>,
        lse: Option<&mut LseMut<'_>>,
    ) -> Result<()> {
        if parts.len() != lses.len() {
            return Err(Error::invalid(format!(
                "lses has {} arrays but parts has {}",
                lses.len(),
                parts.len()
            )));
        }
        let num_parts = i32::try_from(parts.len())
            .map_err(|_| Error::invalid(format!("{} parts exceed i32", parts.len())))?;
        let want = self.device.memory();
        let rows = parts.first().map_or(0, |p| {
            let [b, h, n, _] = p.layout.dims;
            b.saturating_mul(h).saturating_mul(n)
        });
        let mut views = Vec::with_capacity(parts.len());
        let mut lse_ptrs = Vec::with_capacity(parts.len());
        for (i, (p, l)) in parts.iter().zip(lses).enumerate() {
            for (what, memory) in [("parts", p.memory), ("lses", l.memory)] {
                if memory != want {
                    return Err(Error::invalid(format!(
                        "{what}[{i}] is in {memory:?} memory but the handle is {:?}",
                        self.device
                    )));
                }
            }
            if l.len != rows {
                return Err(Error::invalid(format!(
                    "lses[{i}] has {} elements; parts[0] has batch*heads*seq = {rows} rows",
                    l.len
                )));
            }
            views.push(c_tensor(p.ptr, p.layout, "parts")?);
            lse_ptrs.push(l.ptr);
        }
        if o.memory != want {
            return Err(Error::invalid(format!(
                "o is in {:?} memory but the handle is {:?}",
                o.memory, self.device
            )));
        }
        let mut raw = unsafe {
            let mut m = std::mem::MaybeUninit::<sys::fmha_merge_params>::zeroed();
            sys::fmha_merge_params_init_sized(
                m.as_mut_ptr(),
                std::mem::size_of::<sys::fmha_merge_params>(),
            );
            m.assume_init()
        };
        raw.num_parts = num_parts;
        raw.o_parts = views.as_ptr();
        raw.lse_parts = lse_ptrs.as_ptr();
        raw.o = c_tensor(o.ptr as *const U, o.layout, "o")?;
        if let Some(lse) = lse {
            if lse.memory != want || lse.len != rows {
                return Err(Error::invalid(format!(
                    "lse must hold {rows} f32 in {want:?} memory (has {} in {:?})",
                    lse.len, lse.memory
                )));
            }
            raw.lse = lse.ptr;
        }
        check(unsafe { sys::fmha_merge(self.raw.as_ptr(), &raw) })
    }
}
