//! [`Handle`]: one device's fmha context, and the forward call.
use std::ffi::{c_void, CStr, CString};
use std::ptr::{self, NonNull};

use fmha_sys as sys;

use crate::element::Element;
use crate::error::{check, Error, Result, Status};
use crate::tensor::{Layout, LseMut, Memory, TensorView, TensorViewMut};

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
/// window, scale `1/sqrt(head_dim)`, no softcap, automatic kernel choice.
///
/// ```
/// use fmha::{CausalAlignment, Options};
/// let opts = Options::new().causal(CausalAlignment::BottomRight).window(Some(4096), None);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    causal: Option<CausalAlignment>,
    window_left: Option<u32>,
    window_right: Option<u32>,
    scale: Option<f32>,
    softcap: f32,
    kernel: Option<String>,
    num_splits: u32,
}

impl Options {
    pub fn new() -> Options {
        Options::default()
    }

    /// Masks every key after the diagonal.
    pub fn causal(mut self, alignment: CausalAlignment) -> Options {
        self.causal = Some(alignment);
        self
    }

    /// Sliding window: key `j` is visible to query `i` iff
    /// `diag(i) - left <= j <= diag(i) + right`; `None` = unbounded. With
    /// [`Options::causal`], `right` must be `None` or `Some(0)`.
    pub fn window(mut self, left: Option<u32>, right: Option<u32>) -> Options {
        self.window_left = left;
        self.window_right = right;
        self
    }

    /// The logit scale (finite, > 0); default `1/sqrt(head_dim)`.
    pub fn scale(mut self, scale: f32) -> Options {
        self.scale = Some(scale);
        self
    }

    /// Logits `s -> softcap * tanh(s / softcap)`; 0 = off.
    pub fn softcap(mut self, softcap: f32) -> Options {
        self.softcap = softcap;
        self
    }

    /// Forces a registered kernel by name (see [`crate::kernels`]).
    pub fn kernel(mut self, name: &str) -> Options {
        self.kernel = Some(name.to_owned());
        self
    }

    /// CUDA: split the keys into at most n parts (0 = automatic, 1 = none).
    pub fn num_splits(mut self, n: u32) -> Options {
        self.num_splits = n;
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

    fn params<T: Element>(
        &self,
        q: &TensorView<'_, T>,
        k: &TensorView<'_, T>,
        v: &TensorView<'_, T>,
        o: &TensorViewMut<'_, T>,
        lse: Option<&LseMut<'_>>,
        options: &Options,
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
            sys::fmha_forward_params_init(p.as_mut_ptr());
            p.assume_init()
        };
        raw.q = c_tensor(q.ptr, q.layout, "q")?;
        raw.k = c_tensor(k.ptr, k.layout, "k")?;
        raw.v = c_tensor(v.ptr, v.layout, "v")?;
        raw.o = c_tensor(o.ptr as *const T, o.layout, "o")?;
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
        Ok(Params {
            raw,
            _kernel: kernel,
        })
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
    pub fn workspace_size<T: Element>(
        &self,
        q: &TensorView<'_, T>,
        k: &TensorView<'_, T>,
        v: &TensorView<'_, T>,
        o: &TensorViewMut<'_, T>,
        lse: Option<&LseMut<'_>>,
        options: &Options,
    ) -> Result<usize> {
        self.workspace_bytes(&self.params(q, k, v, o, lse, options)?)
    }

    /// `o = softmax(q k^T * scale + mask) v`, and the row log-sum-exp into
    /// `lse` when given.
    ///
    /// q: `[B, Hq, Nq, D]`; k, v: `[B, Hk, Nk, D]` with `Hq % Hk == 0` (GQA:
    /// query head h reads KV head `h / (Hq / Hk)`); o: `[B, Hq, Nq, D]`; lse:
    /// `B * Hq * Nq` values. Every view must be on this handle's device.
    ///
    /// The workspace is handled here: a buffer kept in the handle for CPU
    /// forwards; for CUDA forwards, stream-ordered device memory when the
    /// crate's `cuda` feature is on (else a CUDA forward that needs a
    /// workspace fails: use [`Handle::forward_with_workspace`]). On CUDA the
    /// call is asynchronous on the handle's stream. On error nothing is
    /// written.
    pub fn forward<T: Element>(
        &mut self,
        q: &TensorView<'_, T>,
        k: &TensorView<'_, T>,
        v: &TensorView<'_, T>,
        o: &mut TensorViewMut<'_, T>,
        lse: Option<&mut LseMut<'_>>,
        options: &Options,
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
    pub unsafe fn forward_with_workspace<T: Element>(
        &mut self,
        q: &TensorView<'_, T>,
        k: &TensorView<'_, T>,
        v: &TensorView<'_, T>,
        o: &mut TensorViewMut<'_, T>,
        lse: Option<&mut LseMut<'_>>,
        options: &Options,
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
    pub fn explain<T: Element>(
        &self,
        q: &TensorView<'_, T>,
        k: &TensorView<'_, T>,
        v: &TensorView<'_, T>,
        o: &TensorViewMut<'_, T>,
        lse: Option<&LseMut<'_>>,
        options: &Options,
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
}
