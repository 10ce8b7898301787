//! CUDA graphs: creation, instantiation, launch (replay of the captured work), inspection.
//! Graph and executable-graph handles are the core's ids.

use crate::errors::RuntimeError;
use crate::types::cudaStream_t;
use crate::{core, ffi_fn, stream_id, write_out};
use std::ffi::{c_char, c_uint, c_ulonglong, c_void, CStr};

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
            // Node handles: the graph id and the node's position (never null).
            let node = ((graph as usize) << 16 | (i + 1)) as *mut c_void;
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
