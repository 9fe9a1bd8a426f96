//! `fmha::Error`: a status and the library's message naming what is wrong.
use std::ffi::CStr;
use std::fmt;

use fmha_sys as sys;

/// The failure statuses of the C API (`fmha_status` without `FMHA_SUCCESS`).
/// Values are pinned by the header; [`Status::Other`] keeps one this crate
/// does not know yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// A parameter is invalid; the message names it and its value.
    InvalidArgument,
    /// No kernel supports this problem (see [`crate::Handle::explain`]).
    Unsupported,
    /// The workspace given is smaller than the forward needs.
    WorkspaceTooSmall,
    OutOfMemory,
    /// A CUDA runtime call failed.
    Device,
    /// The backend was not built, or there is no such device.
    NotAvailable,
    Internal,
    /// A status value newer than this crate.
    Other(u32),
}

impl Status {
    /// The status for a raw `fmha_status`; `None` for `FMHA_SUCCESS`.
    pub fn from_raw(raw: sys::fmha_status) -> Option<Status> {
        Some(match raw {
            sys::FMHA_SUCCESS => return None,
            sys::FMHA_ERROR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::FMHA_ERROR_UNSUPPORTED => Status::Unsupported,
            sys::FMHA_ERROR_WORKSPACE_TOO_SMALL => Status::WorkspaceTooSmall,
            sys::FMHA_ERROR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::FMHA_ERROR_DEVICE => Status::Device,
            sys::FMHA_ERROR_NOT_AVAILABLE => Status::NotAvailable,
            sys::FMHA_ERROR_INTERNAL => Status::Internal,
            other => Status::Other(other),
        })
    }

    /// The raw `fmha_status` value.
    pub fn raw(self) -> sys::fmha_status {
        match self {
            Status::InvalidArgument => sys::FMHA_ERROR_INVALID_ARGUMENT,
            Status::Unsupported => sys::FMHA_ERROR_UNSUPPORTED,
            Status::WorkspaceTooSmall => sys::FMHA_ERROR_WORKSPACE_TOO_SMALL,
            Status::OutOfMemory => sys::FMHA_ERROR_OUT_OF_MEMORY,
            Status::Device => sys::FMHA_ERROR_DEVICE,
            Status::NotAvailable => sys::FMHA_ERROR_NOT_AVAILABLE,
            Status::Internal => sys::FMHA_ERROR_INTERNAL,
            Status::Other(raw) => raw,
        }
    }

    /// The library's static description (`fmha_status_string`).
    pub fn description(self) -> &'static str {
        // Never NULL; points at a static string literal.
        unsafe { CStr::from_ptr(sys::fmha_status_string(self.raw())) }
            .to_str()
            .unwrap_or("unknown status")
    }
}

/// A failed fmha call: its [`Status`] and the detail the library recorded
/// (`fmha_last_error_message`), or this crate's own detail for arguments it
/// rejects before calling the library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    pub fn status(&self) -> Status {
        self.status
    }

    /// E.g. `"k.dims[1]=6 does not divide q.dims[1]=32"`.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::new(Status::InvalidArgument, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            f.write_str(self.status.description())
        } else {
            write!(f, "{}: {}", self.status.description(), self.message)
        }
    }
}

impl std::error::Error for Error {}

/// `Result<T, fmha::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

/// `Ok(())` for `FMHA_SUCCESS`, else the error with this thread's message.
/// Call right after the failing C call: the message is per thread and is
/// replaced by the thread's next fmha call.
pub(crate) fn check(raw: sys::fmha_status) -> Result<()> {
    match Status::from_raw(raw) {
        None => Ok(()),
        Some(status) => {
            let message = unsafe { CStr::from_ptr(sys::fmha_last_error_message()) };
            Err(Error::new(status, message.to_string_lossy().into_owned()))
        }
    }
}
