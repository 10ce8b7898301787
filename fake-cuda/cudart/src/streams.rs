//! Streams, events, host callbacks and (not yet supported) stream capture.

use crate::errors::{self, RuntimeError};
use crate::types::{cudaError_t, cudaEvent_t, cudaStream_t};
use crate::{core, ffi_fn, stream_id, write_out};
use std::cell::Cell;
use std::ffi::{c_int, c_uint, c_ulonglong, c_void};

/// `cudaStreamNonBlocking`.
const NON_BLOCKING: c_uint = 1;

ffi_fn!(
    fn cudaStreamCreate(stream: *mut cudaStream_t) {
        if stream.is_null() {
            return Err(RuntimeError::invalid("null pStream"));
        }
        write_out(stream, core()?.stream_create(0, 0)? as cudaStream_t)
    }
);

ffi_fn!(
    fn cudaStreamCreateWithFlags(stream: *mut cudaStream_t, flags: c_uint) {
        if stream.is_null() || flags & !NON_BLOCKING != 0 {
            return Err(RuntimeError::invalid(format!(
                "null pStream or flags {flags:#x}"
            )));
        }
        write_out(stream, core()?.stream_create(flags, 0)? as cudaStream_t)
    }
);

ffi_fn!(
    fn cudaStreamCreateWithPriority(stream: *mut cudaStream_t, flags: c_uint, priority: c_int) {
        if stream.is_null() || flags & !NON_BLOCKING != 0 {
            return Err(RuntimeError::invalid(format!(
                "null pStream or flags {flags:#x}"
            )));
        }
        // Priorities outside [-5, 0] are clamped, as the real runtime does.
        write_out(
            stream,
            core()?.stream_create(flags, priority.clamp(-5, 0))? as cudaStream_t,
        )
    }
);

ffi_fn!(
    fn cudaStreamDestroy(stream: cudaStream_t) {
        Ok(core()?.stream_destroy(stream_id(stream))?)
    }
);

ffi_fn!(
    fn cudaStreamQuery(stream: cudaStream_t) {
        Ok(core()?.stream_query(stream_id(stream))?)
    }
);

ffi_fn!(
    fn cudaStreamSynchronize(stream: cudaStream_t) {
        Ok(core()?.stream_synchronize(stream_id(stream))?)
    }
);

ffi_fn!(
    fn cudaStreamWaitEvent(stream: cudaStream_t, event: cudaEvent_t, _flags: c_uint) {
        Ok(core()?.stream_wait_event(stream_id(stream), event as u64)?)
    }
);

ffi_fn!(
    fn cudaStreamGetPriority(stream: cudaStream_t, priority: *mut c_int) {
        write_out(priority, core()?.stream_info(stream_id(stream))?.priority)
    }
);

ffi_fn!(
    fn cudaStreamGetFlags(stream: cudaStream_t, flags: *mut c_uint) {
        write_out(flags, core()?.stream_info(stream_id(stream))?.flags)
    }
);

ffi_fn!(
    fn cudaStreamGetDevice(stream: cudaStream_t, device: *mut c_int) {
        write_out(device, core()?.stream_info(stream_id(stream))?.device)
    }
);

ffi_fn!(
    fn cudaLaunchHostFunc(
        stream: cudaStream_t,
        func: Option<unsafe extern "C" fn(*mut c_void)>,
        data: *mut c_void,
    ) {
        let func = func.ok_or_else(|| RuntimeError::invalid("null host function"))?;
        // SAFETY: the program hands us a callback to run once in stream order.
        Ok(unsafe { core()?.enqueue(stream_id(stream), 0, Some(func), data) }?)
    }
);

type StreamCallback = unsafe extern "C" fn(cudaStream_t, cudaError_t, *mut c_void);

struct CallbackCall {
    callback: StreamCallback,
    stream: cudaStream_t,
    data: *mut c_void,
}

unsafe extern "C" fn run_stream_callback(call: *mut c_void) {
    // SAFETY: `call` is the Box cudaStreamAddCallback handed to the core, alive until the core
    // releases it (after the last run, also of graphs it was captured into).
    let call = unsafe { &*call.cast::<CallbackCall>() };
    // SAFETY: the program's callback with the arguments it asked for.
    unsafe { (call.callback)(call.stream, errors::SUCCESS, call.data) };
}

unsafe extern "C" fn release_stream_callback(call: *mut c_void) {
    // SAFETY: the core releases the Box from cudaStreamAddCallback exactly once.
    drop(unsafe { Box::from_raw(call.cast::<CallbackCall>()) });
}

ffi_fn!(
    fn cudaStreamAddCallback(
        stream: cudaStream_t,
        callback: Option<StreamCallback>,
        data: *mut c_void,
        flags: c_uint,
    ) {
        let callback = callback.ok_or_else(|| RuntimeError::invalid("null callback"))?;
        if flags != 0 {
            return Err(RuntimeError::invalid(format!("flags {flags} (must be 0)")));
        }
        let call = Box::into_raw(Box::new(CallbackCall {
            callback,
            stream,
            data,
        }));
        let core = match core() {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: not handed to the core; reclaim it.
                drop(unsafe { Box::from_raw(call) });
                return Err(e);
            }
        };
        // SAFETY: the core owns `call` from here on and releases it exactly once with
        // release_stream_callback, after the callback (and any graph replaying it) is done.
        Ok(unsafe {
            core.enqueue_owned(
                stream_id(stream),
                0,
                Some(run_stream_callback),
                call.cast(),
                release_stream_callback,
            )
        }?)
    }
);

ffi_fn!(
    fn cudaEventCreate(event: *mut cudaEvent_t) {
        if event.is_null() {
            return Err(RuntimeError::invalid("null event"));
        }
        write_out(event, core()?.event_create(0)? as cudaEvent_t)
    }
);

ffi_fn!(
    fn cudaEventCreateWithFlags(event: *mut cudaEvent_t, flags: c_uint) {
        if event.is_null() || flags & !0x7 != 0 {
            return Err(RuntimeError::invalid(format!(
                "null event or flags {flags:#x}"
            )));
        }
        write_out(event, core()?.event_create(flags)? as cudaEvent_t)
    }
);

ffi_fn!(
    fn cudaEventRecord(event: cudaEvent_t, stream: cudaStream_t) {
        Ok(core()?.event_record(event as u64, stream_id(stream))?)
    }
);

ffi_fn!(
    fn cudaEventRecordWithFlags(event: cudaEvent_t, stream: cudaStream_t, _flags: c_uint) {
        Ok(core()?.event_record(event as u64, stream_id(stream))?)
    }
);

ffi_fn!(
    fn cudaEventQuery(event: cudaEvent_t) {
        Ok(core()?.event_query(event as u64)?)
    }
);

ffi_fn!(
    fn cudaEventSynchronize(event: cudaEvent_t) {
        Ok(core()?.event_synchronize(event as u64)?)
    }
);

ffi_fn!(
    fn cudaEventDestroy(event: cudaEvent_t) {
        Ok(core()?.event_destroy(event as u64)?)
    }
);

ffi_fn!(
    fn cudaEventElapsedTime(ms: *mut f32, start: cudaEvent_t, end: cudaEvent_t) {
        if ms.is_null() {
            return Err(RuntimeError::invalid("null ms"));
        }
        write_out(ms, core()?.event_elapsed_ms(start as u64, end as u64)?)
    }
);

ffi_fn!(
    #[cfg(not(cuda13))]
    fn cudaEventElapsedTime_v2(ms: *mut f32, start: cudaEvent_t, end: cudaEvent_t) {
        if ms.is_null() {
            return Err(RuntimeError::invalid("null ms"));
        }
        write_out(ms, core()?.event_elapsed_ms(start as u64, end as u64)?)
    }
);

// Stream capture: while a stream captures, its work is recorded into a graph by the core.

thread_local! {
    static CAPTURE_MODE: Cell<c_int> = const { Cell::new(0) };
}

/// `cudaStreamCaptureModeGlobal`, `...ThreadLocal`, `...Relaxed`.
fn capture_mode(mode: c_int) -> crate::errors::Result<c_int> {
    if (0..=2).contains(&mode) {
        Ok(mode)
    } else {
        Err(RuntimeError::invalid(format!("stream capture mode {mode}")))
    }
}

ffi_fn!(
    fn cudaStreamBeginCapture(stream: cudaStream_t, mode: c_int) {
        capture_mode(mode)?;
        Ok(core()?.begin_capture(stream_id(stream))?)
    }
);

ffi_fn!(
    fn cudaStreamEndCapture(stream: cudaStream_t, graph: *mut *mut c_void) {
        if graph.is_null() {
            return Err(RuntimeError::invalid("null pGraph"));
        }
        let g = core()?.end_capture(stream_id(stream))?;
        write_out(graph, g as *mut c_void)
    }
);

ffi_fn!(
    fn cudaStreamIsCapturing(stream: cudaStream_t, status: *mut c_int) {
        let (s, _, _) = core()?.capture_info(stream_id(stream))?;
        write_out(status, s as c_int)
    }
);

ffi_fn!(
    #[cfg(not(cuda13))]
    fn cudaStreamGetCaptureInfo(stream: cudaStream_t, status: *mut c_int, id: *mut c_ulonglong) {
        capture_info(
            stream,
            status,
            id,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    }
);

ffi_fn!(
    #[cfg(not(cuda13))]
    fn cudaStreamGetCaptureInfo_v2(
        stream: cudaStream_t,
        status: *mut c_int,
        id: *mut c_ulonglong,
        graph: *mut *mut c_void,
        deps: *mut *const c_void,
        num_deps: *mut usize,
    ) {
        capture_info(
            stream,
            status,
            id,
            graph,
            deps,
            std::ptr::null_mut(),
            num_deps,
        )
    }
);

ffi_fn!(
    /// CUDA 13 signature: adds the edge data of the dependencies.
    #[cfg(cuda13)]
    fn cudaStreamGetCaptureInfo(
        stream: cudaStream_t,
        status: *mut c_int,
        id: *mut c_ulonglong,
        graph: *mut *mut c_void,
        deps: *mut *const c_void,
        edge_data: *mut *const c_void,
        num_deps: *mut usize,
    ) {
        capture_info(stream, status, id, graph, deps, edge_data, num_deps)
    }
);

/// The capture state of a stream; optional out-pointers may be null. Captured work forms a
/// chain, so the dependency set the API reports is empty.
fn capture_info(
    stream: cudaStream_t,
    status: *mut c_int,
    id: *mut c_ulonglong,
    graph: *mut *mut c_void,
    deps: *mut *const c_void,
    edge_data: *mut *const c_void,
    num_deps: *mut usize,
) -> crate::errors::Result<()> {
    let (s, i, g) = core()?.capture_info(stream_id(stream))?;
    write_out(status, s as c_int)?;
    if !id.is_null() {
        write_out(id, i)?;
    }
    if !graph.is_null() {
        write_out(graph, g as *mut c_void)?;
    }
    for out in [deps, edge_data] {
        if !out.is_null() {
            write_out(out, std::ptr::null())?;
        }
    }
    if !num_deps.is_null() {
        write_out(num_deps, 0)?;
    }
    Ok(())
}

ffi_fn!(
    fn cudaThreadExchangeStreamCaptureMode(mode: *mut c_int) {
        if mode.is_null() {
            return Err(RuntimeError::invalid("null mode"));
        }
        // SAFETY: non-null in/out parameter by the API contract.
        let new = capture_mode(unsafe { *mode })?;
        write_out(mode, CAPTURE_MODE.with(|m| m.replace(new)))
    }
);
