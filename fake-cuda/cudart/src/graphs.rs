//! CUDA graphs: creation, instantiation, launch (replay of the captured work), inspection.
//! Graph and executable-graph handles are the core's ids.

use crate::errors::RuntimeError;
use crate::types::cudaStream_t;
use crate::{core, ffi_fn, stream_id, write_out};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};

fn instantiate(exec: *mut *mut c_void, graph: *mut c_void) -> crate::errors::Result<()> {
    if exec.is_null() {
        return Err(RuntimeError::invalid("null pGraphExec"));
    }
    let e = core()?.graph_instantiate(graph as u64)?;
    write_out(exec, e as *mut c_void)
}

ffi_fn!(
    fn cudaGraphCreate(graph: *mut *mut c_void, flags: c_uint) {
        if graph.is_null() || flags != 0 {
            return Err(RuntimeError::invalid(format!(
                "null pGraph or flags {flags} (must be 0)"
            )));
        }
        write_out(graph, core()?.graph_create()? as *mut c_void)
    }
);

ffi_fn!(
    fn cudaGraphDestroy(graph: *mut c_void) {
        Ok(core()?.graph_destroy(graph as u64)?)
    }
);

ffi_fn!(
    fn cudaGraphInstantiate(exec: *mut *mut c_void, graph: *mut c_void, _flags: c_ulonglong) {
        instantiate(exec, graph)
    }
);

ffi_fn!(
    fn cudaGraphInstantiateWithFlags(
        exec: *mut *mut c_void,
        graph: *mut c_void,
        _flags: c_ulonglong,
    ) {
        instantiate(exec, graph)
    }
);

ffi_fn!(
    fn cudaGraphLaunch(exec: *mut c_void, stream: cudaStream_t) {
        Ok(core()?.graph_launch(exec as u64, stream_id(stream))?)
    }
);

/// `cudaGraphExecUpdateResultInfo` (CUDA 12): the result and the node of the graph that
/// refused the update, and the executable graph's node it would have replaced.
#[repr(C)]
pub struct cudaGraphExecUpdateResultInfo {
    result: c_int,
    error_node: *mut c_void,
    error_from_node: *mut c_void,
}

ffi_fn!(
    fn cudaGraphExecUpdate(
        exec: *mut c_void,
        graph: *mut c_void,
        info: *mut cudaGraphExecUpdateResultInfo,
    ) {
        if info.is_null() {
            return Err(RuntimeError::invalid("null resultInfo"));
        }
        let (result, node) = core()?.graph_exec_update(exec as u64, graph as u64)?;
        // The node handle as `cudaGraphGetNodes` gives it; an executable graph's nodes have
        // no handles here.
        let error_node = if node == 0 {
            std::ptr::null_mut()
        } else {
            fake_cuda_client::graph_node_handle(graph as u64, node) as *mut c_void
        };
        let out = cudaGraphExecUpdateResultInfo {
            result: result as c_int,
            error_node,
            error_from_node: std::ptr::null_mut(),
        };
        write_out(info, out)?;
        if result != 0 {
            return Err(RuntimeError::Cuda {
                code: crate::errors::GRAPH_EXEC_UPDATE_FAILURE,
                message: format!(
                    "the graph does not match the executable graph (cudaGraphExecUpdateResult \
                     {result}{})",
                    if node == 0 {
                        String::new()
                    } else {
                        format!(", at node {node}")
                    }
                ),
            });
        }
        Ok(())
    }
);

ffi_fn!(
    fn cudaGraphExecDestroy(exec: *mut c_void) {
        Ok(core()?.graph_exec_destroy(exec as u64)?)
    }
);

ffi_fn!(
    fn cudaGraphGetNodes(graph: *mut c_void, nodes: *mut *mut c_void, count: *mut usize) {
        if count.is_null() {
            return Err(RuntimeError::invalid("null numNodes"));
        }
        let n = core()?.graph_node_count(graph as u64)?;
        if nodes.is_null() {
            return write_out(count, n);
        }
        // SAFETY: in/out parameter: the caller's capacity of `nodes`.
        let room = unsafe { *count }.min(n);
        for i in 0..room {
            let node = fake_cuda_client::graph_node_handle(graph as u64, i + 1) as *mut c_void;
            // SAFETY: `nodes` has room for `*count` >= `room` entries by contract.
            unsafe { nodes.add(i).write(node) };
        }
        write_out(count, room)
    }
);

ffi_fn!(
    fn cudaGraphDebugDotPrint(graph: *mut c_void, path: *const c_char, _flags: c_uint) {
        if path.is_null() {
            return Err(RuntimeError::invalid("null path"));
        }
        // SAFETY: non-null C string by the API contract.
        let path = unsafe { CStr::from_ptr(path) };
        Ok(core()?.graph_write_dot(graph as u64, path)?)
    }
);

/// `cudaUserObjectNoDestructorSync`: the one flag `cudaUserObjectCreate` takes (destructors may
/// run later, on any thread, without the launching stream waiting).
const USER_OBJECT_NO_DESTRUCTOR_SYNC: c_uint = 1;
/// `cudaGraphUserObjectMove`: the retained references are the caller's.
const GRAPH_USER_OBJECT_MOVE: c_uint = 1;

ffi_fn!(
    fn cudaUserObjectCreate(
        object: *mut *mut c_void,
        ptr: *mut c_void,
        destroy: Option<unsafe extern "C" fn(*mut c_void)>,
        initial_refcount: c_uint,
        flags: c_uint,
    ) {
        let Some(destroy) = destroy else {
            return Err(RuntimeError::invalid("null destroy function"));
        };
        if object.is_null() || flags != USER_OBJECT_NO_DESTRUCTOR_SYNC || initial_refcount == 0 {
            return Err(RuntimeError::invalid(format!(
                "null object_out, flags {flags} (must be cudaUserObjectNoDestructorSync) or \
                 initialRefcount {initial_refcount}"
            )));
        }
        // SAFETY: CUDA's contract for the destructor: callable once, later, on any thread,
        // without calling CUDA.
        let h = unsafe { core()?.user_object_create(ptr, destroy, initial_refcount) }?;
        write_out(object, h as *mut c_void)
    }
);

ffi_fn!(
    fn cudaUserObjectRetain(object: *mut c_void, count: c_uint) {
        Ok(core()?.user_object_retain(object as u64, count)?)
    }
);

ffi_fn!(
    fn cudaUserObjectRelease(object: *mut c_void, count: c_uint) {
        Ok(core()?.user_object_release(object as u64, count)?)
    }
);

ffi_fn!(
    fn cudaGraphRetainUserObject(
        graph: *mut c_void,
        object: *mut c_void,
        count: c_uint,
        flags: c_uint,
    ) {
        if flags & !GRAPH_USER_OBJECT_MOVE != 0 {
            return Err(RuntimeError::invalid(format!("flags {flags}")));
        }
        let moved = i32::from(flags & GRAPH_USER_OBJECT_MOVE != 0);
        Ok(core()?.graph_retain_user_object(graph as u64, object as u64, count, moved)?)
    }
);

ffi_fn!(
    fn cudaGraphReleaseUserObject(graph: *mut c_void, object: *mut c_void, count: c_uint) {
        Ok(core()?.graph_release_user_object(graph as u64, object as u64, count)?)
    }
);
