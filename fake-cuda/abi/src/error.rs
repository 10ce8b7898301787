//! The one error type of the fake CUDA core.
//!
//! Every variant has a stable numeric [`Status`] so the error can cross the C vtable of
//! `libncclsim_cuda.so`; each front-end maps statuses to its own error codes (`cudaError_t`,
//! `CUresult`, `nvmlReturn_t`).

/// Errors of the fake CUDA core. Messages say what was wrong and with which value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// A device ordinal outside the visible devices.
    #[error("invalid device ordinal {ordinal}: {visible} device(s) visible")]
    InvalidDevice {
        /// The ordinal asked for.
        ordinal: i32,
        /// How many devices `CUDA_VISIBLE_DEVICES` leaves visible.
        visible: usize,
    },
    /// No device is visible at all.
    #[error("no device visible (CUDA_VISIBLE_DEVICES hides all of them)")]
    NoDevice,
    /// An allocation would exceed the device's memory.
    #[error(
        "out of memory on device {device}: {requested} bytes requested, {free} of {total} free"
    )]
    OutOfMemory {
        /// Visible ordinal of the device.
        device: i32,
        /// Bytes asked for (after rounding to the allocation granularity).
        requested: u64,
        /// Bytes still free on the device.
        free: u64,
        /// Capacity of the device.
        total: u64,
    },
    /// Device memory about to be touched that the host cannot back: committing it would
    /// exceed the memory the process's cgroup or the machine has left, and the kernel's OOM
    /// killer would end the process at the first touch instead.
    #[error(
        "out of host memory backing device memory: {requested} bytes of device memory to \
         commit, {available} bytes available ({limit})"
    )]
    HostMemory {
        /// Bytes that would be newly committed.
        requested: u64,
        /// Bytes the host can still back (less a reserve for the process itself).
        available: u64,
        /// Where the limit comes from (cgroup file, `MemAvailable`, `NCCLSIM_HOST_MEMORY`).
        limit: String,
    },
    /// An argument is invalid; the message names it.
    #[error("invalid value: {0}")]
    InvalidValue(String),
    /// A pointer that is not (or not entirely) inside memory the core knows.
    #[error("invalid device pointer {ptr:#x} (+{len} bytes): {why}")]
    InvalidPointer {
        /// The address.
        ptr: usize,
        /// Length of the range that was checked.
        len: usize,
        /// Why it was rejected.
        why: &'static str,
    },
    /// An unknown or destroyed stream or event handle.
    #[error("invalid {what} handle {handle:#x}")]
    InvalidHandle {
        /// "stream" or "event".
        what: &'static str,
        /// The handle value.
        handle: u64,
    },
    /// Work is still pending in virtual time (only with `NCCLSIM_PACE=1`).
    #[error("not ready")]
    NotReady,
    /// An IPC handle failed validation (forged, corrupt, stale or out of range).
    #[error("invalid IPC handle: {0}")]
    InvalidIpcHandle(String),
    /// A valid-looking IPC handle could not be mapped (owner gone, no permission).
    #[error("cannot map IPC handle: {0}")]
    IpcMapFailed(String),
    /// The operating system refused a request (memfd, mmap, ...).
    #[error("{call} failed: {errno}")]
    Os {
        /// The call that failed.
        call: &'static str,
        /// `errno` text.
        errno: String,
    },
    /// A kernel launch while `NCCLSIM_STRICT_KERNELS=1`.
    #[error("kernel {0} cannot run on the fake device (NCCLSIM_STRICT_KERNELS=1)")]
    KernelRefused(String),
    /// A recognised request the core does not implement.
    #[error("not supported: {0}")]
    NotSupported(&'static str),
    /// An error reported through the C vtable (front-end side): its status and message.
    #[error("{message}")]
    Reported {
        /// The status code the core returned.
        status: Status,
        /// The core's message for it.
        message: String,
    },
    /// A call not allowed while a stream captures (or a capture call out of order).
    #[error("stream capture: {0}")]
    CaptureViolation(String),
    /// The topology XML could not be read or describes no usable GPU.
    #[error("topology: {0}")]
    Topology(String),
    /// `libncclsim_cuda.so` could not be loaded.
    #[error("cannot load the fake CUDA core: {0}")]
    Load(String),
    /// A variable of the run environment has a value that cannot be used (the run-env crate's
    /// message: the variable, its value, what it must be); the devices cannot be built.
    #[error("environment: {0}")]
    Environment(String),
}

/// Numeric code of a [`CoreError`], stable across the C vtable. 0 is success.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// No error.
    Success = 0,
    /// [`CoreError::InvalidDevice`].
    InvalidDevice = 1,
    /// [`CoreError::NoDevice`].
    NoDevice = 2,
    /// [`CoreError::OutOfMemory`] and [`CoreError::HostMemory`].
    OutOfMemory = 3,
    /// [`CoreError::InvalidValue`].
    InvalidValue = 4,
    /// [`CoreError::InvalidPointer`].
    InvalidPointer = 5,
    /// [`CoreError::InvalidHandle`].
    InvalidHandle = 6,
    /// [`CoreError::NotReady`].
    NotReady = 7,
    /// [`CoreError::InvalidIpcHandle`].
    InvalidIpcHandle = 8,
    /// [`CoreError::IpcMapFailed`].
    IpcMapFailed = 9,
    /// [`CoreError::Os`].
    Os = 10,
    /// [`CoreError::KernelRefused`].
    KernelRefused = 11,
    /// [`CoreError::NotSupported`].
    NotSupported = 12,
    /// A panic was caught at the C boundary.
    Internal = 13,
    /// [`CoreError::CaptureViolation`].
    CaptureViolation = 14,
}

impl Status {
    /// The status for a raw code; unknown codes read as [`Status::Internal`].
    pub fn from_code(code: i32) -> Status {
        use Status::*;
        [
            Success,
            InvalidDevice,
            NoDevice,
            OutOfMemory,
            InvalidValue,
            InvalidPointer,
            InvalidHandle,
            NotReady,
            InvalidIpcHandle,
            IpcMapFailed,
            Os,
            KernelRefused,
            NotSupported,
            Internal,
            CaptureViolation,
        ]
        .into_iter()
        .find(|s| *s as i32 == code)
        .unwrap_or(Internal)
    }

    /// The CUDA error number of this status, the same in the runtime (`cudaError_t`) and the
    /// driver (`CUresult`) API: e.g. 1 is `cudaErrorInvalidValue` and
    /// `CUDA_ERROR_INVALID_VALUE`. A refused kernel is `cudaErrorInvalidDeviceFunction` (98), a
    /// code only the runtime has.
    pub fn cuda_code(self) -> i32 {
        use Status::*;
        match self {
            Success => 0,
            InvalidValue | InvalidPointer => 1,
            OutOfMemory | Os => 2,
            KernelRefused => 98,
            NoDevice => 100,
            InvalidDevice => 101,
            IpcMapFailed => 205,
            InvalidHandle | InvalidIpcHandle => 400,
            NotReady => 600,
            NotSupported => 801,
            CaptureViolation => 900,
            Internal => 999,
        }
    }
}

impl CoreError {
    /// Out of memory for `requested` bytes of host address space or host memory the kernel
    /// refused to map (no device involved).
    pub fn host_mapping_refused(requested: u64) -> CoreError {
        CoreError::OutOfMemory {
            device: -1,
            requested,
            free: 0,
            total: 0,
        }
    }

    /// The CUDA error number of this error ([`Status::cuda_code`]); a core that could not be
    /// loaded is 3 (`cudaErrorInitializationError`, `CUDA_ERROR_NOT_INITIALIZED`).
    pub fn cuda_code(&self) -> i32 {
        match self {
            CoreError::Load(_) => 3,
            e => e.status().cuda_code(),
        }
    }

    /// The stable numeric code of this error.
    pub fn status(&self) -> Status {
        match self {
            CoreError::InvalidDevice { .. } => Status::InvalidDevice,
            CoreError::NoDevice => Status::NoDevice,
            CoreError::OutOfMemory { .. } | CoreError::HostMemory { .. } => Status::OutOfMemory,
            CoreError::InvalidValue(_) => Status::InvalidValue,
            CoreError::InvalidPointer { .. } => Status::InvalidPointer,
            CoreError::InvalidHandle { .. } => Status::InvalidHandle,
            CoreError::NotReady => Status::NotReady,
            CoreError::InvalidIpcHandle(_) => Status::InvalidIpcHandle,
            CoreError::IpcMapFailed(_) => Status::IpcMapFailed,
            CoreError::Os { .. } => Status::Os,
            CoreError::KernelRefused(_) => Status::KernelRefused,
            CoreError::NotSupported(_) => Status::NotSupported,
            CoreError::Reported { status, .. } => *status,
            CoreError::Load(_) => Status::Internal,
            CoreError::Topology(_) | CoreError::Environment(_) => Status::NoDevice,
            CoreError::CaptureViolation(_) => Status::CaptureViolation,
        }
    }

    /// An [`CoreError::Os`] from the current `errno`.
    pub fn last_os(call: &'static str) -> CoreError {
        CoreError::Os {
            call,
            errno: std::io::Error::last_os_error().to_string(),
        }
    }
}

/// Result alias of the core.
pub type Result<T> = std::result::Result<T, CoreError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_round_trip() {
        for code in 0..=14 {
            assert_eq!(Status::from_code(code) as i32, code);
        }
        assert_eq!(Status::from_code(99), Status::Internal);
        assert_eq!(CoreError::NotReady.status(), Status::NotReady);
    }
}
