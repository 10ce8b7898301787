//! Operations as stream work: each collective (and each group's send/receive batch) is host
//! work enqueued through the fake CUDA core on the caller's stream, so it runs in stream order
//! after the work before it, and is recorded, not run, while the stream captures a graph
//! (running again at every launch of the graph).

use crate::comm::Comm;
use crate::error::{NcclError, Result};
use crate::ops::{Coll, P2p};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// What a task does.
pub enum Work {
    /// One collective.
    Coll(Coll),
    /// A group's sends and receives.
    P2p(Vec<P2p>),
}

struct Task {
    comm: Arc<Comm>,
    work: Work,
    result: Mutex<Option<Result<()>>>,
}

impl Task {
    fn run(&self) -> Result<()> {
        match &self.work {
            Work::Coll(c) => crate::exec::run_collective(&self.comm, c),
            Work::P2p(ops) => crate::exec::run_p2p(&self.comm, ops),
        }
    }
}

unsafe extern "C" fn run_task(data: *mut c_void) {
    // SAFETY: `data` is the `Task` `enqueue` handed to the core, alive for every call.
    let task = unsafe { &*(data as *const Task) };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.run()))
        .unwrap_or_else(|_| Err(NcclError::internal("panic while running an operation")));
    if let Err(e) = &r {
        crate::error::record("operation", e);
        let _ = task.comm.async_error.compare_exchange(
            0,
            e.code,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    if let Ok(mut slot) = task.result.lock() {
        *slot = Some(r);
    }
}

unsafe extern "C" fn release_task(data: *mut c_void) {
    // SAFETY: `data` is the reference `enqueue` leaked with `Arc::into_raw`; the core releases
    // it exactly once.
    drop(unsafe { Arc::from_raw(data as *const Task) });
}

/// Enqueues `work` on `stream`; returns its result when it ran now. While the stream captures,
/// the core keeps the task until the graphs that recorded it are destroyed, and it runs at
/// each launch (errors then go to the communicator's asynchronous error).
pub fn enqueue(comm: &Arc<Comm>, stream: u64, work: Work) -> Result<()> {
    let task = Arc::new(Task {
        comm: comm.clone(),
        work,
        result: Mutex::new(None),
    });
    let data = Arc::into_raw(task.clone()) as *mut c_void;
    // SAFETY: `data` is a leaked Arc the core releases once with `release_task`.
    unsafe { crate::cuda::enqueue_owned(stream, 0, run_task, data, release_task) }?;
    let ran = task
        .result
        .lock()
        .map_err(|_| NcclError::internal("task lock poisoned"))?
        .take();
    ran.unwrap_or(Ok(()))
}
