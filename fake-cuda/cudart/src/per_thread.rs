//! The `_ptsz` / `_ptds` entry points programs built with `--default-stream per-thread` call:
//! the same functions, with the default stream (null) meaning the calling thread's own default
//! stream (`cudaStreamPerThread`) instead of the legacy one. Each delegates to its base entry.

use crate::errors::{self, RuntimeError};
use crate::ffi_fn;
use crate::types::{cudaError_t, cudaEvent_t, cudaStream_t, dim3};
use crate::{device::*, graphs::*, memory::*, modules::*, streams::*};
use crate::{per_thread, STREAM_PER_THREAD};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};

/// A base entry's return code as a result (its failure was already recorded and logged).
fn code(c: cudaError_t) -> errors::Result<()> {
    if c == errors::SUCCESS {
        Ok(())
    } else {
        Err(RuntimeError::Cuda {
            code: c,
            message: format!("{}", errors::name(c).to_string_lossy()),
        })
    }
}

/// `fn NAME(args) on STREAM => BASE;`: an entry that calls `BASE` with the argument `STREAM`
/// mapped to the per-thread default stream.
macro_rules! per_thread {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) on $s:ident => $base:ident;)*) => {$(
        ffi_fn!(fn $name($($arg: $ty),*) {
            let $s = per_thread($s);
            // SAFETY: the same arguments the caller gave, with a valid stream handle.
            code(unsafe { $base($($arg),*) })
        });
    )*};
}

per_thread! {
    fn cudaMemcpyAsync_ptsz(dst: *mut c_void, src: *const c_void, n: usize, kind: c_int, stream: cudaStream_t) on stream => cudaMemcpyAsync;
    fn cudaMemcpy2DAsync_ptsz(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int, stream: cudaStream_t) on stream => cudaMemcpy2DAsync;
    fn cudaMemsetAsync_ptsz(dst: *mut c_void, value: c_int, n: usize, stream: cudaStream_t) on stream => cudaMemsetAsync;
    fn cudaMemset2DAsync_ptsz(dst: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize, stream: cudaStream_t) on stream => cudaMemset2DAsync;
    fn cudaMallocAsync_ptsz(dev_ptr: *mut *mut c_void, size: usize, stream: cudaStream_t) on stream => cudaMallocAsync;
    fn cudaFreeAsync_ptsz(dev_ptr: *mut c_void, stream: cudaStream_t) on stream => cudaFreeAsync;
    fn cudaStreamQuery_ptsz(stream: cudaStream_t) on stream => cudaStreamQuery;
    fn cudaStreamSynchronize_ptsz(stream: cudaStream_t) on stream => cudaStreamSynchronize;
    fn cudaStreamWaitEvent_ptsz(stream: cudaStream_t, event: cudaEvent_t, flags: c_uint) on stream => cudaStreamWaitEvent;
    fn cudaStreamGetPriority_ptsz(stream: cudaStream_t, priority: *mut c_int) on stream => cudaStreamGetPriority;
    fn cudaStreamGetFlags_ptsz(stream: cudaStream_t, flags: *mut c_uint) on stream => cudaStreamGetFlags;
    fn cudaStreamGetDevice_ptsz(stream: cudaStream_t, device: *mut c_int) on stream => cudaStreamGetDevice;
    fn cudaStreamBeginCapture_ptsz(stream: cudaStream_t, mode: c_int) on stream => cudaStreamBeginCapture;
    fn cudaStreamEndCapture_ptsz(stream: cudaStream_t, graph: *mut *mut c_void) on stream => cudaStreamEndCapture;
    fn cudaStreamIsCapturing_ptsz(stream: cudaStream_t, status: *mut c_int) on stream => cudaStreamIsCapturing;
    fn cudaEventRecord_ptsz(event: cudaEvent_t, stream: cudaStream_t) on stream => cudaEventRecord;
    fn cudaEventRecordWithFlags_ptsz(event: cudaEvent_t, stream: cudaStream_t, flags: c_uint) on stream => cudaEventRecordWithFlags;
    fn cudaLaunchKernel_ptsz(func: *const c_void, grid: dim3, block: dim3, args: *mut *mut c_void, shared_mem: usize, stream: cudaStream_t) on stream => cudaLaunchKernel;
    fn cudaLaunchCooperativeKernel_ptsz(func: *const c_void, grid: dim3, block: dim3, args: *mut *mut c_void, shared_mem: usize, stream: cudaStream_t) on stream => cudaLaunchCooperativeKernel;
    fn cudaLaunchHostFunc_ptsz(stream: cudaStream_t, func: Option<unsafe extern "C" fn(*mut c_void)>, data: *mut c_void) on stream => cudaLaunchHostFunc;
    fn cudaGraphLaunch_ptsz(exec: *mut c_void, stream: cudaStream_t) on stream => cudaGraphLaunch;
}

// Entry points without a stream argument: the same function under the _ptsz name.

ffi_fn!(
    fn cudaGetDriverEntryPoint_ptsz(
        symbol: *const c_char,
        func: *mut *mut c_void,
        flags: c_ulonglong,
        status: *mut c_int,
    ) {
        // SAFETY: the caller's arguments, passed on.
        code(unsafe { cudaGetDriverEntryPoint(symbol, func, flags, status) })
    }
);

ffi_fn!(
    fn cudaGetDriverEntryPointByVersion_ptsz(
        symbol: *const c_char,
        func: *mut *mut c_void,
        version: c_uint,
        flags: c_ulonglong,
        status: *mut c_int,
    ) {
        // SAFETY: the caller's arguments, passed on.
        code(unsafe { cudaGetDriverEntryPointByVersion(symbol, func, version, flags, status) })
    }
);

// Synchronous copies and memsets (`_ptds`): issued on the per-thread stream, then waited for.

fn then_wait(c: cudaError_t) -> errors::Result<()> {
    code(c)?;
    // SAFETY: the per-thread stream handle is always valid.
    code(unsafe { cudaStreamSynchronize(STREAM_PER_THREAD) })
}

ffi_fn!(
    fn cudaMemcpy_ptds(dst: *mut c_void, src: *const c_void, n: usize, kind: c_int) {
        // SAFETY: the caller's arguments, passed on.
        then_wait(unsafe { cudaMemcpyAsync(dst, src, n, kind, STREAM_PER_THREAD) })
    }
);

ffi_fn!(
    fn cudaMemcpy2D_ptds(
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: c_int,
    ) {
        // SAFETY: the caller's arguments, passed on.
        then_wait(unsafe {
            cudaMemcpy2DAsync(
                dst,
                dpitch,
                src,
                spitch,
                width,
                height,
                kind,
                STREAM_PER_THREAD,
            )
        })
    }
);

ffi_fn!(
    fn cudaMemset_ptds(dst: *mut c_void, value: c_int, n: usize) {
        // SAFETY: the caller's arguments, passed on.
        then_wait(unsafe { cudaMemsetAsync(dst, value, n, STREAM_PER_THREAD) })
    }
);

ffi_fn!(
    fn cudaMemset2D_ptds(
        dst: *mut c_void,
        pitch: usize,
        value: c_int,
        width: usize,
        height: usize,
    ) {
        // SAFETY: the caller's arguments, passed on.
        then_wait(unsafe { cudaMemset2DAsync(dst, pitch, value, width, height, STREAM_PER_THREAD) })
    }
);
