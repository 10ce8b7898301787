//! Operations as stream work: each collective (and each group's send/receive batch) is host
//! work enqueued through the fake CUDA core on the caller's stream, so it runs in stream order
//! after the work before it, and is recorded, not run, while the stream captures a graph
//! (running again at every launch of the graph).
//!
//! With the simulation on, the operation also takes virtual time: it starts when the last
//! participant's stream is ready (the ranks exchange their ready times in the operation's own
//! synchronisation) and lasts NCCL's predicted time for its communicator's plan, so a rank
//! that reaches a collective late makes the others wait in virtual time.

use crate::comm::Comm;
use crate::error::{NcclError, Result};
use crate::ops::{Coll, P2p};
use crate::trace;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// What a task does.
pub enum Work {
    /// One collective.
    Coll(Coll),
    /// A group's sends and receives.
    P2p(Vec<P2p>),
}

/// When an operation could start on this rank and when it started on all.
#[derive(Clone, Copy)]
struct Times {
    ready: u64,
    start: u64,
}

struct Task {
    comm: Arc<Comm>,
    work: Work,
    stream: u64,
    result: Mutex<Option<Result<Times>>>,
}

impl Task {
    fn run(&self) -> Result<Times> {
        let ready = if self.comm.sim.is_some() {
            crate::cuda::stream_clock(self.stream).unwrap_or(0)
        } else {
            0
        };
        match &self.work {
            Work::Coll(c) => crate::exec::run_collective(&self.comm, c, ready)
                .map(|start| Times { ready, start }),
            Work::P2p(ops) => {
                crate::exec::run_p2p(&self.comm, ops, ready).map(|start| Times { ready, start })
            }
        }
    }
}

unsafe extern "C" fn run_task(data: *mut c_void) {
    // SAFETY: `data` is the `Task` `enqueue` handed to the core, alive until `release_task`.
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

/// NCCL's prediction for `work` on `comm`: (name, time in ns, trace arguments when tracing).
fn price(comm: &Comm, work: &Work) -> Option<(&'static str, u64, String)> {
    let sim = comm.sim.as_ref()?;
    let tracing = trace::enabled();
    match work {
        Work::Coll(c) => {
            let p = crate::sim::predict(sim, c.kind, c.count, c.dtype, c.op, comm.nranks)?;
            if !tracing {
                return Some((
                    c.kind.name(),
                    (p.time_us * 1e3).round() as u64,
                    String::new(),
                ));
            }
            let args = format!(
                "\"comm\":\"{:#x}\",\"rank\":{},\"nranks\":{},\"count\":{},\"bytes\":{},\"type\":{:?},\"op\":{},\"root\":{},\"algo\":{},\"proto\":{},\"channels\":{},\"predicted_us\":{:.3},\"busbw_GBs\":{:.3}",
                comm.magic, comm.rank, comm.nranks, c.count, p.bytes, format!("{:?}", c.dtype), c.op, c.root,
                trace::json_str(p.algo), trace::json_str(p.proto), p.channels, p.time_us, p.busbw
            );
            Some((c.kind.name(), (p.time_us * 1e3).round() as u64, args))
        }
        Work::P2p(ops) => {
            let sent: u64 = ops.iter().filter(|o| o.send).map(|o| o.bytes as u64).sum();
            let recv: u64 = ops.iter().filter(|o| !o.send).map(|o| o.bytes as u64).sum();
            let p = crate::sim::predict_p2p(sim, comm, ops);
            if !tracing {
                return Some(("SendRecv", (p.time_us * 1e3).round() as u64, String::new()));
            }
            let peers: Vec<String> = ops
                .iter()
                .map(|o| format!("{}{}", if o.send { "send:" } else { "recv:" }, o.peer))
                .collect();
            let args = format!(
                "\"comm\":\"{:#x}\",\"rank\":{},\"nranks\":{},\"sent_bytes\":{sent},\"received_bytes\":{recv},\"peers\":{},\"channels\":{},\"predicted_us\":{:.3}",
                comm.magic, comm.rank, comm.nranks, trace::json_str(&peers.join(",")), p.channels, p.time_us
            );
            Some(("SendRecv", (p.time_us * 1e3).round() as u64, args))
        }
    }
}

/// Enqueues `work` on `stream`; returns its result when it ran now. While the stream captures,
/// the core keeps the task until the graphs that recorded it are destroyed, and it runs at
/// each launch (errors then go to the communicator's asynchronous error).
pub fn enqueue(comm: &Arc<Comm>, stream: u64, work: Work) -> Result<()> {
    let priced = price(comm, &work);
    let task = Arc::new(Task {
        comm: comm.clone(),
        work,
        stream,
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
    let Some((name, predicted, args)) = priced else {
        return ran.map_or(Ok(()), |r| r.map(|_| ()));
    };
    match ran {
        // Captured: the graph replays the predicted time after the work.
        None => crate::cuda::advance(stream, predicted),
        Some(Err(e)) => Err(e),
        Some(Ok(t)) => {
            let waited = t.start.saturating_sub(t.ready);
            crate::cuda::advance(stream, waited + predicted)?;
            if trace::enabled() {
                trace::span(
                    name,
                    stream,
                    t.start,
                    predicted,
                    &format!("{args},\"waited_us\":{:.3}", waited as f64 / 1e3),
                );
            }
            Ok(())
        }
    }
}
