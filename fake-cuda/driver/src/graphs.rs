//! The driver API's stream capture, CUDA graphs and user objects, over the same core objects as
//! the runtime's (`cudaStreamBeginCapture`, `cudaGraph*`, `cudaUserObject*`): a graph captured
//! through one API may be instantiated, launched, updated or destroyed through the other, and
//! graph, executable-graph, node and user-object handles are the core's ids in both.
//!
//! ABI versions (CUDA 12.9 `cuda.h`, whose macros map the plain names): `cuStreamBeginCapture`
//! is `cuStreamBeginCapture_v2` (with a capture mode) since CUDA 10.1; `cuGraphInstantiate` is
//! `cuGraphInstantiate_v2` (error node and log buffer) in CUDA 11 and
//! `cuGraphInstantiateWithFlags` since CUDA 12; `cuGraphExecUpdate` is `cuGraphExecUpdate_v2`
//! (a result-info structure) since CUDA 12; `cuStreamGetCaptureInfo` is `_v2` (graph and
//! dependencies) since 11.3 and `_v3` (edge data) since 12.3. Every form is exported, and
//! `cuGetProcAddress` resolves the plain names by version (`VERSIONED` in `lib.rs`).

use crate::{core, write_out, CUhandle, CUresult, DriverError, Result, INVALID_VALUE};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};

/// `CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE`.
pub(crate) const GRAPH_EXEC_UPDATE_FAILURE: CUresult = 910;
/// `CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`: the one flag `cuUserObjectCreate` takes.
const USER_OBJECT_NO_DESTRUCTOR_SYNC: c_uint = 1;
/// `CU_GRAPH_USER_OBJECT_MOVE`: the retained references are the caller's.
const GRAPH_USER_OBJECT_MOVE: c_uint = 1;

fn invalid() -> DriverError {
    DriverError::Code(INVALID_VALUE)
}

/// `CUstreamCaptureMode`: global, thread-local or relaxed.
fn check_mode(mode: c_int) -> Result<()> {
    if (0..=2).contains(&mode) {
        Ok(())
    } else {
        Err(invalid())
    }
}

drv_fn!(
    /// CUDA 10.0's form, without a mode (global capture).
    fn cuStreamBeginCapture(stream: CUhandle) {
        Ok(core()?.begin_capture(stream as u64)?)
    }
);
drv_fn!(
    fn cuStreamBeginCapture_v2(stream: CUhandle, mode: c_int) {
        check_mode(mode)?;
        Ok(core()?.begin_capture(stream as u64)?)
    }
);
drv_fn!(
    fn cuStreamEndCapture(stream: CUhandle, graph: *mut CUhandle) {
        if graph.is_null() {
            return Err(invalid());
        }
        let g = core()?.end_capture(stream as u64)?;
        write_out(graph, g as CUhandle)
    }
);
drv_fn!(
    fn cuStreamIsCapturing(stream: CUhandle, status: *mut c_int) {
        let (s, _, _) = core()?.capture_info(stream as u64)?;
        write_out(status, s as c_int)
    }
);

/// The capture state of a stream; optional out-pointers may be null. Captured work forms a
/// chain, so the dependency set reported is empty.
fn capture_info(
    stream: CUhandle,
    status: *mut c_int,
    id: *mut c_ulonglong,
    graph: *mut CUhandle,
    deps: *mut *const c_void,
    edge_data: *mut *const c_void,
    num_deps: *mut usize,
) -> Result<()> {
    let (s, i, g) = core()?.capture_info(stream as u64)?;
    write_out(status, s as c_int)?;
    if !id.is_null() {
        write_out(id, i)?;
    }
    if !graph.is_null() {
        write_out(graph, g as CUhandle)?;
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

drv_fn!(
    fn cuStreamGetCaptureInfo(stream: CUhandle, status: *mut c_int, id: *mut c_ulonglong) {
        let none = std::ptr::null_mut();
        capture_info(
            stream,
            status,
            id,
            none,
            none.cast(),
            none.cast(),
            none.cast(),
        )
    }
);
drv_fn!(
    fn cuStreamGetCaptureInfo_v2(
        stream: CUhandle,
        status: *mut c_int,
        id: *mut c_ulonglong,
        graph: *mut CUhandle,
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
drv_fn!(
    fn cuStreamGetCaptureInfo_v3(
        stream: CUhandle,
        status: *mut c_int,
        id: *mut c_ulonglong,
        graph: *mut CUhandle,
        deps: *mut *const c_void,
        edge_data: *mut *const c_void,
        num_deps: *mut usize,
    ) {
        capture_info(stream, status, id, graph, deps, edge_data, num_deps)
    }
);

drv_fn!(
    fn cuGraphCreate(graph: *mut CUhandle, flags: c_uint) {
        if graph.is_null() || flags != 0 {
            return Err(invalid());
        }
        write_out(graph, core()?.graph_create()? as CUhandle)
    }
);
drv_fn!(
    fn cuGraphDestroy(graph: CUhandle) {
        Ok(core()?.graph_destroy(graph as u64)?)
    }
);

fn instantiate(exec: *mut CUhandle, graph: CUhandle) -> Result<()> {
    if exec.is_null() {
        return Err(invalid());
    }
    let e = core()?.graph_instantiate(graph as u64)?;
    write_out(exec, e as CUhandle)
}

/// The CUDA 10/11 form: on failure the error node and a log; the log is left empty (an empty
/// string when there is room) and no node is named.
fn instantiate_with_log(
    exec: *mut CUhandle,
    graph: CUhandle,
    error_node: *mut CUhandle,
    log: *mut c_char,
    log_size: usize,
) -> Result<()> {
    if !error_node.is_null() {
        write_out(error_node, std::ptr::null_mut())?;
    }
    if !log.is_null() && log_size > 0 {
        write_out(log, 0)?;
    }
    instantiate(exec, graph)
}

drv_fn!(
    fn cuGraphInstantiate(
        exec: *mut CUhandle,
        graph: CUhandle,
        error_node: *mut CUhandle,
        log: *mut c_char,
        log_size: usize,
    ) {
        instantiate_with_log(exec, graph, error_node, log, log_size)
    }
);
drv_fn!(
    fn cuGraphInstantiate_v2(
        exec: *mut CUhandle,
        graph: CUhandle,
        error_node: *mut CUhandle,
        log: *mut c_char,
        log_size: usize,
    ) {
        instantiate_with_log(exec, graph, error_node, log, log_size)
    }
);
drv_fn!(
    fn cuGraphInstantiateWithFlags(exec: *mut CUhandle, graph: CUhandle, _flags: c_ulonglong) {
        instantiate(exec, graph)
    }
);
drv_fn!(
    fn cuGraphLaunch(exec: CUhandle, stream: CUhandle) {
        Ok(core()?.graph_launch(exec as u64, stream as u64)?)
    }
);
drv_fn!(
    fn cuGraphExecDestroy(exec: CUhandle) {
        Ok(core()?.graph_exec_destroy(exec as u64)?)
    }
);

/// `cuGraphExecUpdate` on the core: the `CUgraphExecUpdateResult` and the refusing node's
/// handle (null when the update is accepted or no node is to blame).
fn exec_update(exec: CUhandle, graph: CUhandle) -> Result<(c_int, CUhandle)> {
    let (result, node) = core()?.graph_exec_update(exec as u64, graph as u64)?;
    let node = if node == 0 {
        std::ptr::null_mut()
    } else {
        fake_cuda_client::graph_node_handle(graph as u64, node) as CUhandle
    };
    Ok((result as c_int, node))
}

fn update_result(result: c_int) -> Result<()> {
    if result == 0 {
        Ok(())
    } else {
        Err(DriverError::Code(GRAPH_EXEC_UPDATE_FAILURE))
    }
}

drv_fn!(
    /// The CUDA 11 form: the refusing node and the result through two out-parameters.
    fn cuGraphExecUpdate(
        exec: CUhandle,
        graph: CUhandle,
        error_node: *mut CUhandle,
        result_out: *mut c_int,
    ) {
        if error_node.is_null() || result_out.is_null() {
            return Err(invalid());
        }
        let (result, node) = exec_update(exec, graph)?;
        write_out(error_node, node)?;
        write_out(result_out, result)?;
        update_result(result)
    }
);

/// `CUgraphExecUpdateResultInfo`: the result, the graph's node that refused the update and the
/// executable graph's node it would have replaced (executable graphs' nodes have no handles
/// here, so that one is null).
#[repr(C)]
pub struct CUgraphExecUpdateResultInfo {
    result: c_int,
    error_node: CUhandle,
    error_from_node: CUhandle,
}

drv_fn!(
    fn cuGraphExecUpdate_v2(
        exec: CUhandle,
        graph: CUhandle,
        info: *mut CUgraphExecUpdateResultInfo,
    ) {
        if info.is_null() {
            return Err(invalid());
        }
        let (result, error_node) = exec_update(exec, graph)?;
        let out = CUgraphExecUpdateResultInfo {
            result,
            error_node,
            error_from_node: std::ptr::null_mut(),
        };
        write_out(info, out)?;
        update_result(result)
    }
);

drv_fn!(
    fn cuGraphGetNodes(graph: CUhandle, nodes: *mut CUhandle, count: *mut usize) {
        if count.is_null() {
            return Err(invalid());
        }
        let n = core()?.graph_node_count(graph as u64)?;
        if nodes.is_null() {
            return write_out(count, n);
        }
        // SAFETY: in/out parameter: the caller's capacity of `nodes`.
        let room = unsafe { *count }.min(n);
        for i in 0..room {
            let node = fake_cuda_client::graph_node_handle(graph as u64, i + 1) as CUhandle;
            // SAFETY: `nodes` has room for `*count` >= `room` entries by contract.
            unsafe { nodes.add(i).write(node) };
        }
        write_out(count, room)
    }
);
drv_fn!(
    fn cuGraphDebugDotPrint(graph: CUhandle, path: *const c_char, _flags: c_uint) {
        if path.is_null() {
            return Err(invalid());
        }
        // SAFETY: non-null C string by the API contract.
        let path = unsafe { CStr::from_ptr(path) };
        Ok(core()?.graph_write_dot(graph as u64, path)?)
    }
);

drv_fn!(
    fn cuUserObjectCreate(
        object: *mut CUhandle,
        ptr: *mut c_void,
        destroy: Option<unsafe extern "C" fn(*mut c_void)>,
        initial_refcount: c_uint,
        flags: c_uint,
    ) {
        let Some(destroy) = destroy else {
            return Err(invalid());
        };
        if object.is_null() || flags != USER_OBJECT_NO_DESTRUCTOR_SYNC || initial_refcount == 0 {
            return Err(invalid());
        }
        // SAFETY: CUDA's contract for the destructor: callable once, later, on any thread,
        // without calling CUDA.
        let h = unsafe { core()?.user_object_create(ptr, destroy, initial_refcount) }?;
        write_out(object, h as CUhandle)
    }
);
drv_fn!(
    fn cuUserObjectRetain(object: CUhandle, count: c_uint) {
        Ok(core()?.user_object_retain(object as u64, count)?)
    }
);
drv_fn!(
    fn cuUserObjectRelease(object: CUhandle, count: c_uint) {
        Ok(core()?.user_object_release(object as u64, count)?)
    }
);
drv_fn!(
    fn cuGraphRetainUserObject(graph: CUhandle, object: CUhandle, count: c_uint, flags: c_uint) {
        if flags & !GRAPH_USER_OBJECT_MOVE != 0 {
            return Err(invalid());
        }
        let moved = i32::from(flags & GRAPH_USER_OBJECT_MOVE != 0);
        Ok(core()?.graph_retain_user_object(graph as u64, object as u64, count, moved)?)
    }
);
drv_fn!(
    fn cuGraphReleaseUserObject(graph: CUhandle, object: CUhandle, count: c_uint) {
        Ok(core()?.graph_release_user_object(graph as u64, object as u64, count)?)
    }
);
