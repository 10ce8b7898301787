//! Communicator handles and group semantics (NCCL 2.30.7 `src/group.cc`).
//!
//! `ncclComm_t` values are registry keys, never pointers to our memory, so a destroyed or
//! forged handle is an `ncclInvalidArgument` instead of a use after free. Between
//! `ncclGroupStart` and the outermost `ncclGroupEnd` a thread's inits and operations are queued;
//! at the end the inits run concurrently (one thread may create every rank of a communicator,
//! as `ncclCommInitAll` and nccl-tests `-g` do) and the end returns the first failed init's
//! error (in call order) without running the group's operations, as NCCL's `groupLaunch` does;
//! else each communicator's operations run,
//! concurrently across communicators, each enqueued on its stream through the fake CUDA core
//! (so stream order, capture and graph replay hold).
//!
//! An operation whose arguments are refused inside a group returns the error at the call (its
//! arguments are checked there, as NCCL's `ncclEnqueueCheck` does with `ArgsCheck`) and also
//! fails the group: NCCL keeps the error (`ncclGroupErrCheck`: the last one that is not
//! `ncclInProgress`), and the outermost `ncclGroupEnd` returns it without running anything
//! queued in the group (`ncclGroupEndInternal` goes to `groupCleanup`). The communicators the
//! group was to create are then not created: their handles fail with the group's error.

use crate::comm::Comm;
use crate::error::{NcclError, Result};
use crate::ops::{Op, P2p};
use crate::types::result;
use fnv::FnvHashMap as HashMap;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// A communicator handle's state.
pub enum SlotState {
    /// Being created (non-blocking init in the background, or deferred to a group's end).
    Pending,
    /// Ready.
    Ready(Arc<Comm>),
    /// Creation failed.
    Failed(NcclError),
}

/// What an `ncclComm_t` names.
pub struct Slot {
    /// Its state.
    pub state: Mutex<SlotState>,
    cv: Condvar,
    /// The communicator's abort flag, from the start of its creation (so `ncclCommAbort`
    /// ends an init in progress); the communicator keeps it.
    pub abort: Arc<AtomicBool>,
    /// The thread creating a non-blocking communicator (joined when the handle goes).
    pub thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Slot {
    /// Sets the outcome of creation.
    pub fn finish(&self, r: Result<Comm>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *s = match r {
            Ok(c) => SlotState::Ready(Arc::new(c)),
            Err(e) => SlotState::Failed(e),
        };
        self.cv.notify_all();
    }
}

fn registry() -> &'static Mutex<HashMap<usize, Arc<Slot>>> {
    static R: OnceLock<Mutex<HashMap<usize, Arc<Slot>>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// A new handle in the Pending state.
pub fn new_handle() -> (usize, Arc<Slot>) {
    static NEXT: AtomicUsize = AtomicUsize::new(0x5cc1_0000);
    let h = NEXT.fetch_add(0x40, Ordering::Relaxed);
    let slot = Arc::new(Slot {
        state: Mutex::new(SlotState::Pending),
        cv: Condvar::new(),
        abort: Arc::new(AtomicBool::new(false)),
        thread: Mutex::new(None),
    });
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(h, slot.clone());
    (h, slot)
}

/// The slot of a handle.
pub fn slot(handle: usize) -> Result<Arc<Slot>> {
    if handle == 0 {
        return Err(NcclError::invalid_argument("comm is NULL"));
    }
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&handle)
        .cloned()
        .ok_or_else(|| {
            NcclError::invalid_argument(format!(
                "comm {handle:#x} is not a live communicator (destroyed, or never created)"
            ))
        })
}

/// The communicator of a ready handle.
pub fn comm(handle: usize) -> Result<Arc<Comm>> {
    let s = slot(handle)?;
    let st = s.state.lock().unwrap_or_else(|e| e.into_inner());
    match &*st {
        SlotState::Ready(c) => Ok(c.clone()),
        SlotState::Pending => Err(NcclError::new(
            result::IN_PROGRESS,
            format!("comm {handle:#x} is still being initialized"),
        )),
        SlotState::Failed(e) => Err(NcclError::new(
            e.code,
            format!("comm {handle:#x} failed to initialize: {}", e.message),
        )),
    }
}

/// Waits for a pending handle to finish (blocking users of non-blocking comms, destroy).
pub fn wait_ready(handle: usize) -> Result<Arc<Comm>> {
    let s = slot(handle)?;
    let mut st = s.state.lock().unwrap_or_else(|e| e.into_inner());
    while matches!(*st, SlotState::Pending) {
        st = s.cv.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    drop(st);
    comm(handle)
}

/// Forgets a handle (destroy/abort), first joining the thread creating it, if any.
pub fn remove(handle: usize) -> Result<Arc<Slot>> {
    let slot = registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&handle)
        .ok_or_else(|| {
            NcclError::invalid_argument(format!("comm {handle:#x} is not a live communicator"))
        })?;
    let thread = slot.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(t) = thread {
        let _ = t.join();
    }
    Ok(slot)
}

/// A deferred init: creates the communicator, sets its handle's state and returns its error.
type InitJob = Box<dyn FnOnce() -> Result<()> + Send>;
/// A deferred init with the handle it settles.
type QueuedInit = (Arc<Slot>, InitJob);
/// An operation queued in a group: its communicator, stream and call.
type QueuedOp = (Arc<Comm>, u64, Op);
/// A communicator's queued operations with their streams.
type CommOps = (Arc<Comm>, Vec<(u64, Op)>);

#[derive(Default)]
struct Group {
    depth: u32,
    inits: Vec<QueuedInit>,
    ops: Vec<QueuedOp>,
    /// The group's error: the last call inside it that failed.
    error: Option<NcclError>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// `ncclGroupStart`.
pub fn start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// Whether the calling thread is inside a group.
pub fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// Queues an init job (settling `slot`) for the group's end, or runs it now outside a group
/// (and returns its result).
pub fn init_job(slot: Arc<Slot>, job: InitJob) -> Result<()> {
    if in_group() {
        GROUP.with(|g| g.borrow_mut().inits.push((slot, job)));
        Ok(())
    } else {
        job()
    }
}

/// Queues an operation, or runs it now (an implicit group of one) outside a group.
pub fn op(comm: Arc<Comm>, stream: u64, op: Op) -> Result<()> {
    if in_group() {
        GROUP.with(|g| g.borrow_mut().ops.push((comm, stream, op)));
        Ok(())
    } else {
        // One operation of one communicator: what `run_ops` would do with it.
        run_comm(&comm, &[(stream, op)], false)
    }
}

/// Passes on the result of an operation's call; inside a group, a failure other than
/// `ncclInProgress` also becomes the group's error (NCCL's `ncclGroupErrCheck`).
pub fn error_check(r: Result<()>) -> Result<()> {
    if let Err(e) = &r {
        if e.code != result::IN_PROGRESS {
            GROUP.with(|g| {
                let mut g = g.borrow_mut();
                if g.depth > 0 {
                    g.error = Some(e.clone());
                }
            });
        }
    }
    r
}

/// Leaves one group level; at the outermost end, takes the queued inits and operations. A
/// group that failed at one of its calls is abandoned instead: its inits' handles fail, its
/// operations are dropped, and its error is returned.
fn pop(what: &str) -> Result<(Vec<QueuedInit>, Vec<QueuedOp>)> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(NcclError::invalid_usage(format!(
                "{what} without ncclGroupStart"
            )));
        }
        g.depth -= 1;
        if g.depth > 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let (inits, ops) = (std::mem::take(&mut g.inits), std::mem::take(&mut g.ops));
        let Some(e) = g.error.take() else {
            return Ok((inits, ops));
        };
        let e = NcclError::new(
            e.code,
            format!(
                "a call inside the group failed, so nothing queued in it ran ({} operations, {} inits): {}",
                ops.len(),
                inits.len(),
                e.message
            ),
        );
        for (slot, _) in inits {
            slot.finish(Err(NcclError::new(
                e.code,
                format!("not created: {}", e.message),
            )));
        }
        Err(e)
    })
}

/// `ncclGroupEnd`.
pub fn end() -> Result<()> {
    let (inits, ops) = pop("ncclGroupEnd")?;
    run_inits(inits)?;
    run_ops(ops)
}

/// Ends the group without running its operations and returns them (`ncclGroupSimulateEnd`);
/// queued inits still run, and the first failed one's error is returned.
pub fn end_simulated() -> Result<Vec<(Arc<Comm>, Op)>> {
    let (inits, ops) = pop("ncclGroupSimulateEnd")?;
    run_inits(inits)?;
    Ok(ops.into_iter().map(|(c, _, o)| (c, o)).collect())
}

/// Runs the group's inits concurrently (the ranks of one communicator wait for each other);
/// the first failure in call order is the group's error.
fn run_inits(inits: Vec<QueuedInit>) -> Result<()> {
    if inits.len() <= 1 {
        return inits.into_iter().try_for_each(|(_, j)| j());
    }
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = inits.into_iter().map(|(_, j)| s.spawn(j)).collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(NcclError::internal("init thread panicked")))
            })
            .collect()
    });
    results.into_iter().collect()
}

/// Runs queued operations: per communicator in call order (collectives one by one, the
/// communicator's sends/receives as one batch after them), communicators concurrently.
fn run_ops(ops: Vec<(Arc<Comm>, u64, Op)>) -> Result<()> {
    let mut per_comm: Vec<CommOps> = Vec::new();
    for (c, s, o) in ops {
        match per_comm.iter_mut().find(|(k, _)| Arc::ptr_eq(k, &c)) {
            Some((_, v)) => v.push((s, o)),
            None => per_comm.push((c, vec![(s, o)])),
        }
    }
    if per_comm.len() <= 1 {
        return per_comm
            .into_iter()
            .try_for_each(|(c, v)| run_comm(&c, &v, false));
    }
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = per_comm
            .iter()
            .map(|(c, v)| s.spawn(move || run_comm(c, v, true)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(NcclError::internal("operation thread panicked")))
            })
            .collect()
    });
    results.into_iter().collect()
}

fn run_comm(comm: &Arc<Comm>, ops: &[(u64, Op)], worker: bool) -> Result<()> {
    let previous = crate::cuda::current_device().ok();
    if worker || previous != Some(comm.cuda_dev) {
        crate::cuda::set_device(comm.cuda_dev)?;
    }
    let mut result = Ok(());
    let p2p: Vec<P2p> = ops
        .iter()
        .filter_map(|(_, o)| if let Op::P2p(p) = o { Some(*p) } else { None })
        .collect();
    let colls = ops.iter().filter_map(|(s, o)| match o {
        Op::Coll(c) => Some((*s, *c)),
        Op::P2p(_) => None,
    });
    // Every call is enqueued; the first failure is the result.
    let mut enqueue = |stream: u64, c: crate::ops::Coll| {
        let r = crate::task::enqueue(comm, stream, crate::task::Work::Coll(c));
        if result.is_ok() {
            result = r;
        }
    };
    match &comm.fold {
        // A folded group's calls are seen together first (a virtual root's sends).
        Some(f) => {
            let (streams, mut colls): (Vec<u64>, Vec<crate::ops::Coll>) = colls.unzip();
            crate::fold::virtual_roots_send(f, comm.rank, &mut colls);
            for (stream, c) in streams.into_iter().zip(colls) {
                enqueue(stream, c);
            }
        }
        None => {
            for (stream, c) in colls {
                enqueue(stream, c);
            }
        }
    }
    if let Some((stream, _)) = ops.iter().find(|(_, o)| matches!(o, Op::P2p(_))) {
        result = result.and(crate::task::enqueue(
            comm,
            *stream,
            crate::task::Work::P2p(p2p),
        ));
    }
    if !worker {
        if let Some(d) = previous.filter(|d| *d != comm.cuda_dev) {
            let _ = crate::cuda::set_device(d);
        }
    }
    result
}
