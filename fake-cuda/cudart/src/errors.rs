//! `cudaError_t` codes, their names and descriptions, the mapping from core statuses, and the
//! thread's last error.

use crate::types::cudaError_t;
use fake_cuda_abi::error::CoreError;
use std::cell::Cell;
use std::ffi::CStr;

/// One error of the runtime front-end: a core error, or a CUDA code with a message.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// Reported by the core.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Decided by the front-end (argument checks, unsupported calls).
    #[error("{message}")]
    Cuda {
        /// The `cudaError_t` to return.
        code: cudaError_t,
        /// What was wrong.
        message: String,
    },
}

impl RuntimeError {
    /// An invalid-argument error.
    pub fn invalid(message: impl Into<String>) -> RuntimeError {
        RuntimeError::Cuda {
            code: INVALID_VALUE,
            message: message.into(),
        }
    }

    /// The `cudaError_t` for this error.
    pub fn code(&self) -> cudaError_t {
        match self {
            RuntimeError::Cuda { code, .. } => *code,
            RuntimeError::Core(e) => e.cuda_code(),
        }
    }
}

impl ffi_boundary::FfiError for RuntimeError {
    /// `cudaErrorNotReady` is an answer, not a failure.
    const LIBRARY: ffi_boundary::Library =
        ffi_boundary::Library::new("libcudart", UNKNOWN).answering(&[NOT_READY]);

    fn code(&self) -> i32 {
        RuntimeError::code(self)
    }

    /// `<cudaError name>: <message>`.
    fn debug_text(&self) -> String {
        format!("{}: {self}", name(self.code()).to_string_lossy())
    }

    /// Every call's code becomes the thread's last error ([`set_last`]).
    fn record(_function: &'static str, outcome: ffi_boundary::Outcome<'_, Self>) {
        set_last(match outcome {
            ffi_boundary::Outcome::Success => SUCCESS,
            ffi_boundary::Outcome::Failure(e) => e.code(),
            ffi_boundary::Outcome::Panic(_) => UNKNOWN,
        });
    }
}

/// Result of the runtime front-end.
pub type Result<T> = std::result::Result<T, RuntimeError>;

pub const SUCCESS: cudaError_t = 0;
pub const INVALID_VALUE: cudaError_t = 1;
pub const MEMORY_ALLOCATION: cudaError_t = 2;
pub const INITIALIZATION_ERROR: cudaError_t = 3;
pub const INVALID_MEMCPY_DIRECTION: cudaError_t = 21;
pub const INVALID_DEVICE_FUNCTION: cudaError_t = 98;
pub const NO_DEVICE: cudaError_t = 100;
pub const INVALID_DEVICE: cudaError_t = 101;
pub const MAP_BUFFER_OBJECT_FAILED: cudaError_t = 205;
pub const INVALID_RESOURCE_HANDLE: cudaError_t = 400;
pub const SYMBOL_NOT_FOUND: cudaError_t = 500;
pub const NOT_READY: cudaError_t = 600;
pub const NOT_SUPPORTED: cudaError_t = 801;
pub const STREAM_CAPTURE_UNSUPPORTED: cudaError_t = 900;
pub const GRAPH_EXEC_UPDATE_FAILURE: cudaError_t = 910;
pub const UNKNOWN: cudaError_t = 999;

/// (code, name, description) of the codes this runtime returns or programs commonly test for.
const TABLE: &[(cudaError_t, &CStr, &CStr)] = &[
    (SUCCESS, c"cudaSuccess", c"no error"),
    (INVALID_VALUE, c"cudaErrorInvalidValue", c"invalid argument"),
    (
        MEMORY_ALLOCATION,
        c"cudaErrorMemoryAllocation",
        c"out of memory",
    ),
    (
        INITIALIZATION_ERROR,
        c"cudaErrorInitializationError",
        c"initialization error (the ncclsim fake CUDA core could not be loaded)",
    ),
    (4, c"cudaErrorCudartUnloading", c"driver shutting down"),
    (
        9,
        c"cudaErrorInvalidConfiguration",
        c"invalid configuration argument",
    ),
    (12, c"cudaErrorInvalidPitchValue", c"invalid pitch argument"),
    (13, c"cudaErrorInvalidSymbol", c"invalid device symbol"),
    (
        17,
        c"cudaErrorInvalidDevicePointer",
        c"invalid device pointer",
    ),
    (
        INVALID_MEMCPY_DIRECTION,
        c"cudaErrorInvalidMemcpyDirection",
        c"invalid copy direction for memcpy",
    ),
    (
        35,
        c"cudaErrorInsufficientDriver",
        c"CUDA driver version is insufficient for CUDA runtime version",
    ),
    (
        INVALID_DEVICE_FUNCTION,
        c"cudaErrorInvalidDeviceFunction",
        c"invalid device function (kernels do not run on the ncclsim fake device)",
    ),
    (
        NO_DEVICE,
        c"cudaErrorNoDevice",
        c"no CUDA-capable device is detected",
    ),
    (
        INVALID_DEVICE,
        c"cudaErrorInvalidDevice",
        c"invalid device ordinal",
    ),
    (
        MAP_BUFFER_OBJECT_FAILED,
        c"cudaErrorMapBufferObjectFailed",
        c"mapping of buffer object failed",
    ),
    (
        INVALID_RESOURCE_HANDLE,
        c"cudaErrorInvalidResourceHandle",
        c"invalid resource handle",
    ),
    (
        SYMBOL_NOT_FOUND,
        c"cudaErrorSymbolNotFound",
        c"named symbol not found",
    ),
    (NOT_READY, c"cudaErrorNotReady", c"device not ready"),
    (
        700,
        c"cudaErrorIllegalAddress",
        c"an illegal memory access was encountered",
    ),
    (
        704,
        c"cudaErrorPeerAccessAlreadyEnabled",
        c"peer access is already enabled",
    ),
    (
        705,
        c"cudaErrorPeerAccessNotEnabled",
        c"peer access has not been enabled",
    ),
    (
        712,
        c"cudaErrorHostMemoryAlreadyRegistered",
        c"part or all of the requested memory range is already mapped",
    ),
    (
        713,
        c"cudaErrorHostMemoryNotRegistered",
        c"pointer does not correspond to a registered memory region",
    ),
    (
        719,
        c"cudaErrorLaunchFailure",
        c"unspecified launch failure",
    ),
    (800, c"cudaErrorNotPermitted", c"operation not permitted"),
    (
        NOT_SUPPORTED,
        c"cudaErrorNotSupported",
        c"operation not supported",
    ),
    (
        STREAM_CAPTURE_UNSUPPORTED,
        c"cudaErrorStreamCaptureUnsupported",
        c"operation not permitted when stream is capturing",
    ),
    (
        GRAPH_EXEC_UPDATE_FAILURE,
        c"cudaErrorGraphExecUpdateFailure",
        c"the graph update was not performed because it included changes which violated constraints specific to instantiated graph update",
    ),
    (UNKNOWN, c"cudaErrorUnknown", c"unknown error"),
];

/// `cudaGetErrorName`.
pub fn name(code: cudaError_t) -> &'static CStr {
    TABLE
        .iter()
        .find(|e| e.0 == code)
        .map_or(c"cudaErrorUnknown", |e| e.1)
}

/// `cudaGetErrorString`.
pub fn description(code: cudaError_t) -> &'static CStr {
    TABLE
        .iter()
        .find(|e| e.0 == code)
        .map_or(c"unrecognized error code", |e| e.2)
}

/// The error of a function this runtime only stubs; logs the name once per process.
pub fn not_supported(function: &'static str) -> RuntimeError {
    static LOGGED: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut logged = LOGGED.lock().unwrap_or_else(|p| p.into_inner());
    if !logged.contains(&function) {
        logged.push(function);
        eprintln!("ncclsim libcudart: {function} is not implemented (cudaErrorNotSupported)");
    }
    RuntimeError::Cuda {
        code: NOT_SUPPORTED,
        message: format!("{function} is not implemented"),
    }
}

thread_local! {
    static LAST: Cell<cudaError_t> = const { Cell::new(SUCCESS) };
}

/// Remembers a failure for `cudaGetLastError` (not-ready is not an error there).
pub fn set_last(code: cudaError_t) {
    if code != SUCCESS && code != NOT_READY {
        LAST.with(|l| l.set(code));
    }
}

/// `cudaPeekAtLastError`.
pub fn peek_last() -> cudaError_t {
    LAST.with(Cell::get)
}

/// `cudaGetLastError`.
pub fn take_last() -> cudaError_t {
    LAST.with(|l| l.replace(SUCCESS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_mapping() {
        assert_eq!(name(2).to_str().unwrap(), "cudaErrorMemoryAllocation");
        assert_eq!(name(12345).to_str().unwrap(), "cudaErrorUnknown");
        let e = RuntimeError::from(CoreError::NotReady);
        assert_eq!(e.code(), NOT_READY);
        let e = RuntimeError::from(CoreError::Load("x".into()));
        assert_eq!(e.code(), INITIALIZATION_ERROR);
        set_last(NOT_READY);
        assert_eq!(peek_last(), SUCCESS);
        set_last(INVALID_VALUE);
        assert_eq!(take_last(), INVALID_VALUE);
        assert_eq!(take_last(), SUCCESS);
    }
}
