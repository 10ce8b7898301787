//! `libcudart.so.12` and `libcudart.so.13`: the CUDA runtime API as a thin front-end over the
//! fake CUDA core.
//!
//! The same sources build both libraries: package `fake-cudart` (`libcudart.so.12`) and
//! package `fake-cudart13` (`libcudart.so.13`, compiled with `--cfg cuda13`, which selects the
//! CUDA 13 struct layouts, signatures and version). See build.rs.
//!
//! Every exported function is written with [`ffi_fn!`] (the workspace's one C boundary,
//! `ffi_boundary::ffi_fn!`, with [`errors::RuntimeError`]), which catches panics, maps errors to
//! `cudaError_t`, records the thread's last error and (with `NCCLSIM_DEBUG=1`) logs failures.
//! Bodies only check arguments, convert C types and call the process's core through
//! [`fake_cuda_client`]; the state lives in `libncclsim_cuda.so`, loaded from this
//! library's directory, so this library can be loaded next to `libcuda.so.1`,
//! `libnvidia-ml.so.1` and `libnccl.so.2` front-ends without duplicating anything.

pub mod errors;
pub mod types;

mod device;
mod graphs;
mod memory;
mod modules;
mod per_thread;
mod streams;

/// `cudaErrorNotSupported` stubs for the remaining names of the real library (see build.rs).
mod stubs {
    use crate::ffi_fn;
    include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
}

use errors::{Result, RuntimeError};
use fake_cuda_client::{client, Client};

/// The CUDA version of this runtime (`cudaRuntimeGetVersion`; `cudaDriverGetVersion` reports
/// the driver's, `fake_cuda_abi::version::DRIVER_CUDA_VERSION`, which is at least this).
#[cfg(not(cuda13))]
pub const CUDA_VERSION: i32 = 12090;
/// The CUDA version of this runtime (`cudaRuntimeGetVersion`; `cudaDriverGetVersion` reports
/// the driver's, `fake_cuda_abi::version::DRIVER_CUDA_VERSION`, which is at least this).
#[cfg(cuda13)]
pub const CUDA_VERSION: i32 = 13050;

const _: () = assert!(fake_cuda_abi::version::DRIVER_CUDA_VERSION >= CUDA_VERSION);

/// Writes an exported C function inside [`ffi_boundary::ffi_fn!`] with [`RuntimeError`]: no
/// panic crosses the boundary and every error becomes a `cudaError_t`.
///
/// `fn name(args) body` returns `cudaError_t`; `body` yields `Result<()>`.
/// `fn name(args) -> T, panic = v; body` returns `T` as `body` does, or `v` after a panic.
#[macro_export]
macro_rules! ffi_fn {
    ($($function:tt)*) => {
        ffi_boundary::ffi_fn!($crate::errors::RuntimeError; export $($function)*);
    };
}

/// The process's core.
pub(crate) fn core() -> Result<&'static Client> {
    Ok(client()?)
}

/// Writes `value` through a C out-pointer after checking it is not null.
///
/// The C caller guarantees a non-null `out` points to writable memory for a `T`; that is the
/// contract of every CUDA out-parameter.
pub(crate) fn write_out<T>(out: *mut T, value: T) -> Result<()> {
    ffi_boundary::non_null!(*out = value; else RuntimeError::invalid("null output pointer"));
    Ok(())
}

/// A stream handle as the core's `u64`.
pub(crate) fn stream_id(s: types::cudaStream_t) -> u64 {
    s as u64
}

/// `cudaStreamPerThread`.
pub(crate) const STREAM_PER_THREAD: types::cudaStream_t = 2 as types::cudaStream_t;

/// The stream a `_ptsz` entry point means: the default stream (null) is the per-thread one.
pub(crate) fn per_thread(s: types::cudaStream_t) -> types::cudaStream_t {
    if s.is_null() {
        STREAM_PER_THREAD
    } else {
        s
    }
}
