//! Stream-ordered CUDA workspaces (the `cuda` feature): the few CUDA runtime
//! calls [`crate::Handle::forward`] needs to allocate device memory itself.
use std::ffi::{c_char, c_int, c_void, CStr};

use crate::error::{Error, Result, Status};

#[link(name = "cudart")]
extern "C" {
    fn cudaGetDevice(device: *mut c_int) -> c_int;
    fn cudaSetDevice(device: c_int) -> c_int;
    fn cudaMallocAsync(ptr: *mut *mut c_void, size: usize, stream: *mut c_void) -> c_int;
    fn cudaFreeAsync(ptr: *mut c_void, stream: *mut c_void) -> c_int;
    fn cudaGetErrorString(error: c_int) -> *const c_char;
}

fn cuda_check(code: c_int, what: &str) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let text = unsafe { CStr::from_ptr(cudaGetErrorString(code)) }.to_string_lossy();
    Err(Error::new(
        Status::Device,
        format!("{what}: CUDA error {code}: {text}"),
    ))
}

/// Device memory allocated and freed in the order of one stream, so it can
/// be dropped as soon as the work using it has been enqueued.
pub(crate) struct StreamBuffer {
    ptr: *mut c_void,
    stream: *mut c_void,
}

impl StreamBuffer {
    pub(crate) fn new(ordinal: i32, bytes: usize, stream: *mut c_void) -> Result<StreamBuffer> {
        let mut previous: c_int = 0;
        unsafe {
            cuda_check(cudaGetDevice(&mut previous), "cudaGetDevice")?;
            cuda_check(cudaSetDevice(ordinal), "cudaSetDevice")?;
            let mut ptr = std::ptr::null_mut();
            let result = cuda_check(cudaMallocAsync(&mut ptr, bytes, stream), "cudaMallocAsync");
            cudaSetDevice(previous);
            result.map(|()| StreamBuffer { ptr, stream })
        }
    }

    pub(crate) fn ptr(&self) -> *mut c_void {
        self.ptr
    }
}

impl Drop for StreamBuffer {
    fn drop(&mut self) {
        unsafe { cudaFreeAsync(self.ptr, self.stream) };
    }
}
