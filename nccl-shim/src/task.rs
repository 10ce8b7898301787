//! Operations as stream work: each collective (and each group's send/receive batch) is host
//! work enqueued through the fake CUDA core on the caller's stream, so it runs in stream order
//! after the work before it, and is recorded, not run, while the stream captures a graph
//! (running again at every launch of the graph).
//!
//! With the simulation on, the operation also takes virtual time by `clock`'s rule: it starts
//! when the last participant's stream is ready (the ranks exchange their ready times in the
//! operation's own synchronisation) and lasts NCCL's predicted time for its communicator's
//! plan, so a rank that reaches a collective late makes the others wait in virtual time. A captured operation
//! does the same at each replay of its graph: every rank's replay runs the operation's
//! synchronisation, which carries the ready times, and the wait is added to the stream the
//! graph was launched on.

use crate::clock::{self, SimDuration, SimTime};
use crate::comm::Comm;
use crate::error::{NcclError, Result};
use crate::ops::{Coll, P2p};
use crate::trace;
use std::borrow::Cow;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// What a task does.
pub enum Work {
    /// One collective.
    Coll(Coll),
    /// A group's sends and receives.
    P2p(Vec<P2p>),
}

/// An operation's price: its name, NCCL's predicted time, its bytes (the collective's
/// nccl-tests size, or the bytes a send/receive batch sends) and its trace arguments (empty
/// when not tracing).
struct Priced {
    name: &'static str,
    predicted: SimDuration,
    bytes: u64,
    /// The plan's channels: the CTAs (multiprocessors) the kernel holds while it runs.
    channels: u32,
    args: trace::Args,
}

struct Task {
    comm: Arc<Comm>,
    work: Work,
    priced: Option<Priced>,
    result: Mutex<Option<Result<()>>>,
}

impl Task {
    /// Runs the operation on `stream`, which reached it at virtual time `ready`; gives when it
    /// starts (the last participant's ready time, `clock::Meeting`) and records it in the trace
    /// and the report. Without the simulation, or without a price, it starts when ready.
    fn run(&self, stream: u64, ready: SimTime) -> Result<SimTime> {
        let ready = if self.comm.sim.is_some() {
            ready
        } else {
            SimTime::ZERO
        };
        let group = &self.comm.group;
        let fold = self.comm.fold.as_deref();
        let start = match &self.work {
            // Under `--compute time` a large operation's ranks only meet (an empty collective
            // of the data path's ranks, or the same sends and receives of no bytes), so no
            // byte moves and no device memory is touched (`sim::moves_data`).
            Work::Coll(c)
                if !crate::sim::moves_data(crate::sim::largest_buffer(
                    c.kind,
                    c.count,
                    c.dtype,
                    self.comm.nranks,
                )) =>
            {
                crate::exec::run_collective(group, &meeting(), ready)?
            }
            Work::Coll(c) => match fold {
                None => crate::exec::run_collective(group, c, ready)?,
                Some(f) => crate::fold::run_collective(group, f, self.comm.rank, c, ready)?,
            },
            Work::P2p(ops) => {
                let mut ops: Cow<'_, [P2p]> = match fold {
                    Some(f) => Cow::Owned(crate::fold::inner_p2p(f, self.comm.rank, ops)?),
                    None => Cow::Borrowed(ops),
                };
                if ops.iter().any(|op| !crate::sim::moves_data(op.bytes)) {
                    for op in ops.to_mut().iter_mut() {
                        if !crate::sim::moves_data(op.bytes) {
                            (op.bytes, op.buf) = (0, 0);
                        }
                    }
                }
                crate::exec::run_p2p(group, &ops, ready)?
            }
        };
        let Some(p) = &self.priced else {
            return Ok(ready);
        };
        let waited = start - ready;
        crate::report::op_ran(
            self.comm.magic,
            self.comm.rank,
            p.name,
            p.bytes,
            p.predicted,
            waited,
        );
        if trace::enabled() {
            let mut args = p.args.clone();
            args.insert("waited_us".into(), waited.as_micros_f64().into());
            if let Some(step) = crate::cuda::profiler_range() {
                args.insert("step".into(), step.into());
            }
            match crate::cuda::step_marks() {
                0 => {}
                mark => {
                    args.insert("mark".into(), mark.into());
                }
            }
            trace::span(p.name, stream, start, p.predicted, &args);
        }
        Ok(start)
    }
}

/// An empty AllReduce: the ranks' meeting and nothing else.
fn meeting() -> Coll {
    Coll {
        kind: crate::types::Collective::AllReduce,
        dtype: crate::types::DataType::Uint8,
        red: crate::types::Reduction::SUM,
        op: 0,
        root: 0,
        count: 0,
        send: 0,
        recv: 0,
    }
}

/// The core's call of a task: runs it on `stream` (for a graph replay, the stream the graph was
/// launched on), reached at `ready_ns`; gives its start, or `MEETING_FAILED`.
unsafe extern "C" fn run_task(data: *mut c_void, stream: u64, ready_ns: u64) -> u64 {
    // SAFETY: `data` is the `Task` `enqueue` handed to the core, alive until `release_task`.
    let task = unsafe { &*(data as *const Task) };
    let r = ffi_boundary::callback::<NcclError, _>(
        "run_task",
        || Err(NcclError::internal("panic while running an operation")),
        || task.run(stream, SimTime::from_nanos(ready_ns)),
    );
    let start = match &r {
        Ok(start) => start.as_nanos().max(ready_ns),
        Err(e) => {
            crate::error::record("operation", e);
            let _ = task.comm.async_error.compare_exchange(
                0,
                e.code,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            );
            fake_cuda_abi::MEETING_FAILED
        }
    };
    if let Ok(mut slot) = task.result.lock() {
        *slot = Some(r.map(|_| ()));
    }
    start
}

unsafe extern "C" fn release_task(data: *mut c_void) {
    // SAFETY: `data` is the reference `enqueue` leaked with `Arc::into_raw`; the core releases
    // it exactly once.
    drop(unsafe { Arc::from_raw(data as *const Task) });
}

/// NCCL's prediction for `work` on `comm`.
fn price(comm: &Comm, work: &Work) -> Option<Priced> {
    let sim = comm.sim.as_ref()?;
    let tracing = trace::enabled();
    match work {
        Work::Coll(c) => {
            let p = match crate::sim::predict_repeated(
                sim,
                c.kind,
                c.count,
                c.dtype,
                c.op,
                comm.nranks,
            ) {
                Ok(p) => p,
                Err(e) => {
                    comm.prediction_failed(c.kind, &e);
                    return None;
                }
            };
            let args = if tracing {
                trace::args(serde_json::json!({
                    "comm": format!("{:#x}", comm.magic),
                    "rank": comm.rank,
                    "nranks": comm.nranks,
                    "count": c.count,
                    "bytes": p.bytes,
                    "type": format!("{:?}", c.dtype),
                    "op": c.op,
                    "root": c.root,
                    "algo": p.algo,
                    "proto": p.proto,
                    "channels": p.channels,
                    "predicted_us": trace::round3(p.time_us),
                    "busbw_GBs": trace::round3(p.busbw),
                }))
            } else {
                trace::Args::new()
            };
            Some(Priced {
                name: c.kind.nccl_name(),
                predicted: clock::predicted(p.time_us),
                bytes: p.bytes,
                channels: p.channels as u32,
                args,
            })
        }
        Work::P2p(ops) => {
            let sent: u64 = ops.iter().filter(|o| o.send).map(|o| o.bytes as u64).sum();
            let recv: u64 = ops.iter().filter(|o| !o.send).map(|o| o.bytes as u64).sum();
            let sides = crate::sim::p2p_sides(&comm.members, comm.rank, ops);
            let p = crate::sim::predict_p2p(sim, sides);
            let args = if tracing {
                let peers: Vec<String> = ops
                    .iter()
                    .map(|o| format!("{}{}", if o.send { "send:" } else { "recv:" }, o.peer))
                    .collect();
                trace::args(serde_json::json!({
                    "comm": format!("{:#x}", comm.magic),
                    "rank": comm.rank,
                    "nranks": comm.nranks,
                    "sent_bytes": sent,
                    "received_bytes": recv,
                    "peers": peers.join(","),
                    "node_bytes": sides.0,
                    "network_bytes": sides.1,
                    "channels": p.channels,
                    "predicted_us": trace::round3(p.time_us),
                }))
            } else {
                trace::Args::new()
            };
            Some(Priced {
                name: "SendRecv",
                predicted: clock::predicted(p.time_us),
                bytes: sent,
                channels: p.channels as u32,
                args,
            })
        }
    }
}

/// Enqueues `work` on `stream`; returns its result when it ran now. While the stream captures,
/// the core keeps the task until the graphs that recorded it are destroyed, and it runs at
/// each launch (errors then go to the communicator's asynchronous error).
pub fn enqueue(comm: &Arc<Comm>, stream: u64, work: Work) -> Result<()> {
    let priced = price(comm, &work);
    let predicted = priced.as_ref().map_or(SimDuration::ZERO, |p| p.predicted);
    // One CTA per channel, each on a multiprocessor of its own while the kernel runs.
    let ctas = priced.as_ref().map_or(0, |p| p.channels);
    let timed = priced.is_some();
    let task = Arc::new(Task {
        comm: comm.clone(),
        work,
        priced,
        result: Mutex::new(None),
    });
    let data = Arc::into_raw(task.clone()) as *mut c_void;
    // SAFETY: `data` is a leaked Arc the core releases once with `release_task`.
    let end = unsafe {
        crate::cuda::enqueue_meeting(stream, predicted, ctas, run_task, data, release_task)
    }?;
    let ran = task
        .result
        .lock()
        .map_err(|_| NcclError::internal("task lock poisoned"))?
        .take();
    match ran {
        Some(Err(e)) => Err(e),
        // Ran now, or captured (each launch of the graph runs it, predicted time included).
        _ => {
            if let (Some(end), true) = (end, timed) {
                comm.done.record(end);
            }
            Ok(())
        }
    }
}
