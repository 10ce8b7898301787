//! Stream capture and graphs.
//!
//! While a stream captures, the work enqueued on it is recorded as [`Op`]s instead of run; a
//! graph is the recorded sequence, an executable graph a frozen copy of it, and launching one
//! replays its operations in order on a stream (copies copy again, kernels are counted again,
//! host functions are called again). Streams that wait on an event recorded in a capture join
//! that capture, as in CUDA's fork/join pattern; their work lands in the same sequence.

use crate::abi::{CMeetFn, CWorkFn};
use crate::error::{CoreError, Result};
use crate::timeline::StreamKey;
use crate::CopyKind;
use fnv::FnvHashMap as HashMap;
use std::sync::Arc;

/// `cudaGraphExecUpdateErrorTopologyChanged` (`cudaGraphExecUpdateResult`, CUDA 12).
pub const UPDATE_TOPOLOGY_CHANGED: u32 = 2;
/// `cudaGraphExecUpdateErrorNodeTypeChanged`.
pub const UPDATE_NODE_TYPE_CHANGED: u32 = 3;
/// `cudaGraphExecUpdateErrorParametersChanged`.
pub const UPDATE_PARAMETERS_CHANGED: u32 = 5;

/// Argument data of host work that the core owns: released (`release(data)`) when the last
/// operation holding it goes away, i.e. after it ran once, or when the graphs and executable
/// graphs it was captured into are destroyed.
pub struct OwnedData {
    data: usize,
    release: CWorkFn,
}

impl OwnedData {
    /// Takes ownership of `data`, to be released with `release`.
    ///
    /// # Safety
    /// `release(data)` must be safe to call once, from any thread, at any later time.
    pub unsafe fn new(data: usize, release: CWorkFn) -> Arc<OwnedData> {
        Arc::new(OwnedData { data, release })
    }
}

impl Drop for OwnedData {
    fn drop(&mut self) {
        // SAFETY: the contract of `OwnedData::new`; this is the one release of `data`.
        unsafe { (self.release)(self.data as *mut std::ffi::c_void) }
    }
}

impl std::fmt::Debug for OwnedData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OwnedData({:#x})", self.data)
    }
}

/// One piece of stream work, as recorded and replayed.
#[derive(Debug, Clone)]
pub enum Op {
    /// `height` rows of `width` bytes between pitched buffers (a 1D copy has one row).
    Copy {
        /// Destination.
        dst: usize,
        /// Destination pitch.
        dpitch: usize,
        /// Source.
        src: usize,
        /// Source pitch.
        spitch: usize,
        /// Bytes per row.
        width: usize,
        /// Rows.
        height: usize,
        /// Direction.
        kind: CopyKind,
    },
    /// `n` bytes of device memory set to `value`.
    Memset {
        /// Destination.
        dst: usize,
        /// Byte value.
        value: u8,
        /// Bytes.
        n: usize,
    },
    /// `count` elements of `elem` bytes of device memory set to the low bytes of `pattern`.
    Fill {
        /// Destination (aligned to `elem`).
        dst: usize,
        /// Element value (its low `elem` bytes, little-endian as on the GPU).
        pattern: u64,
        /// Element size: 1, 2, 4 or 8.
        elem: usize,
        /// Elements.
        count: usize,
    },
    /// A kernel launch (by host stub).
    Kernel {
        /// The kernel's host stub address.
        host_fun: usize,
    },
    /// A host function of the program (`cudaLaunchHostFunc`), or modelled work of a duration.
    Host {
        /// Called with `data`, if any.
        func: Option<CWorkFn>,
        /// Its argument.
        data: usize,
        /// Virtual duration.
        duration_ns: u64,
        /// Keeps `data` alive while this operation (or a graph holding it) exists.
        owned: Option<Arc<OwnedData>>,
    },
    /// Compute (`Core::launch_compute`): a launch of `name` that lasts its measured time from
    /// the kernel-time table, else the compute model's time for `cost` on the stream's GPU;
    /// `func(data)`, if any, computes it in stream order.
    Compute {
        /// What the kernel costs.
        cost: compute_model::KernelCost,
        /// The kernel's name (a torch op, a cuBLAS function).
        name: Arc<str>,
        /// What the caller adds to its trace event (a JSON object), if anything.
        detail: Option<Arc<str>>,
        /// Computes it, if anything does.
        func: Option<CWorkFn>,
        /// Its argument.
        data: usize,
        /// Keeps `data` alive while this operation (or a graph holding it) exists.
        owned: Option<Arc<OwnedData>>,
    },
    /// Work that starts when others are ready (`Core::enqueue_meeting`): `func` gets the time
    /// the stream reached it and gives its start; the stream then waits until the start and
    /// `duration_ns` more.
    Meeting {
        /// Called with `data`, the stream and the ready time.
        func: CMeetFn,
        /// Its argument.
        data: usize,
        /// Virtual duration after the start.
        duration_ns: u64,
        /// The CTAs (multiprocessors) the communication kernel holds while it runs.
        ctas: u32,
        /// Keeps `data` alive while this operation (or a graph holding it) exists.
        owned: Arc<OwnedData>,
    },
}

/// The bytes from the first to the last byte of `height` rows of `width` bytes, `pitch`
/// apart (saturating).
fn pitched_span(pitch: usize, width: usize, height: usize) -> usize {
    pitch
        .saturating_mul(height.saturating_sub(1))
        .saturating_add(width)
}

impl Op {
    /// The destination range an operation writes, `(start, bytes)`, for copies and fills.
    pub fn device_write_extent(&self) -> Option<(usize, usize)> {
        match *self {
            Op::Copy {
                dst,
                dpitch,
                width,
                height,
                ..
            } => Some((dst, pitched_span(dpitch, width, height))),
            Op::Memset { dst, n, .. } => Some((dst, n)),
            Op::Fill {
                dst, elem, count, ..
            } => Some((dst, elem.saturating_mul(count))),
            Op::Kernel { .. } | Op::Host { .. } | Op::Compute { .. } | Op::Meeting { .. } => None,
        }
    }

    /// The source range a copy reads, `(start, bytes)`.
    pub fn copy_read_extent(&self) -> Option<(usize, usize)> {
        match *self {
            Op::Copy {
                src,
                spitch,
                width,
                height,
                ..
            } => Some((src, pitched_span(spitch, width, height))),
            _ => None,
        }
    }

    /// A short label for graph dumps.
    pub fn label(&self) -> String {
        match self {
            Op::Copy {
                width,
                height,
                kind,
                ..
            } => format!("memcpy {kind:?} {}x{} bytes", height, width),
            Op::Memset { n, value, .. } => format!("memset {n} bytes to {value:#04x}"),
            Op::Fill {
                count,
                elem,
                pattern,
                ..
            } => format!("fill {count} x {elem} bytes with {pattern:#x}"),
            Op::Kernel { host_fun } => format!("kernel {host_fun:#x}"),
            Op::Host { duration_ns, .. } => format!("host work {duration_ns} ns"),
            Op::Compute { name, .. } => format!("compute {name}"),
            Op::Meeting { duration_ns, .. } => format!("meeting, then {duration_ns} ns"),
        }
    }
}

/// `cudaStreamCaptureStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum CaptureStatus {
    /// Not capturing.
    None = 0,
    /// Capturing.
    Active = 1,
}

#[derive(Debug)]
struct Capture {
    graph: u64,
    origin: StreamKey,
}

/// Captures in progress, graphs and executable graphs of a process.
#[derive(Debug, Default)]
pub struct Graphs {
    /// Capturing stream -> capture id.
    streams: HashMap<StreamKey, u64>,
    captures: HashMap<u64, Capture>,
    /// Events recorded during a capture -> capture id.
    events: HashMap<u64, u64>,
    graphs: HashMap<u64, Vec<Op>>,
    execs: HashMap<u64, Vec<Op>>,
    /// User objects (`cudaUserObjectCreate`) by handle, with the references their creator
    /// holds; an object is destroyed (its `OwnedData` released) when the last reference, the
    /// creator's or a graph's, goes.
    objects: HashMap<u64, (Arc<OwnedData>, u32)>,
    /// The user object references each graph and executable graph holds.
    held: HashMap<u64, Vec<(u64, Arc<OwnedData>)>>,
    next: u64,
}

/// First graph/exec/capture id (distinct from stream and event handles).
const FIRST_ID: u64 = 0x6a90_0000;

impl Graphs {
    fn fresh(&mut self) -> u64 {
        self.next = self.next.max(FIRST_ID) + 0x10;
        self.next
    }

    /// Starts capturing stream `key` into a new graph.
    pub fn begin(&mut self, key: StreamKey) -> Result<()> {
        if self.streams.contains_key(&key) {
            return Err(CoreError::CaptureViolation(format!(
                "stream {key:#x} is already capturing"
            )));
        }
        let graph = self.create_graph();
        let id = self.fresh();
        self.captures.insert(id, Capture { graph, origin: key });
        self.streams.insert(key, id);
        Ok(())
    }

    /// Ends the capture `key` started; returns its graph. Streams that joined it stop too.
    pub fn end(&mut self, key: StreamKey) -> Result<u64> {
        let id = *self.streams.get(&key).ok_or_else(|| {
            CoreError::CaptureViolation(format!("stream {key:#x} is not capturing"))
        })?;
        if self.captures[&id].origin != key {
            return Err(CoreError::CaptureViolation(format!(
                "stream {key:#x} joined a capture; only the stream that began it can end it"
            )));
        }
        let c = self.captures.remove(&id).expect("present");
        self.streams.retain(|_, cid| *cid != id);
        self.events.retain(|_, cid| *cid != id);
        Ok(c.graph)
    }

    /// (status, capture id, graph) of stream `key`.
    pub fn info(&self, key: StreamKey) -> (CaptureStatus, u64, u64) {
        match self.streams.get(&key) {
            Some(&id) => (CaptureStatus::Active, id, self.captures[&id].graph),
            None => (CaptureStatus::None, 0, 0),
        }
    }

    /// Whether stream `key` is capturing.
    pub fn is_capturing(&self, key: StreamKey) -> bool {
        self.streams.contains_key(&key)
    }

    /// Whether any stream is capturing.
    pub fn any_capturing(&self) -> bool {
        !self.streams.is_empty()
    }

    /// Appends `op` to the capture of stream `key`; false if it is not capturing.
    pub fn record(&mut self, key: StreamKey, op: &Op) -> bool {
        let Some(id) = self.streams.get(&key) else {
            return false;
        };
        let graph = self.captures[id].graph;
        self.graphs
            .get_mut(&graph)
            .expect("capture graph")
            .push(op.clone());
        true
    }

    /// An event recorded on stream `key`: true if it was recorded into a capture.
    pub fn event_recorded(&mut self, event: u64, key: StreamKey) -> bool {
        match self.streams.get(&key) {
            Some(&id) => {
                self.events.insert(event, id);
                true
            }
            None => {
                self.events.remove(&event);
                false
            }
        }
    }

    /// Stream `key` waits for `event`: true if that joined it to the event's capture.
    pub fn event_waited(&mut self, key: StreamKey, event: u64) -> Result<bool> {
        let Some(&id) = self.events.get(&event) else {
            return Ok(false);
        };
        match self.streams.get(&key) {
            Some(&other) if other != id => Err(CoreError::CaptureViolation(
                "a stream cannot join a second capture".into(),
            )),
            _ => {
                self.streams.insert(key, id);
                Ok(true)
            }
        }
    }

    /// Forgets an event (destroyed).
    pub fn forget_event(&mut self, event: u64) {
        self.events.remove(&event);
    }

    /// A new empty graph.
    pub fn create_graph(&mut self) -> u64 {
        let g = self.fresh();
        self.graphs.insert(g, Vec::new());
        g
    }

    fn ops(&self, graph: u64) -> Result<&Vec<Op>> {
        self.graphs.get(&graph).ok_or(CoreError::InvalidHandle {
            what: "graph",
            handle: graph,
        })
    }

    /// The operations of a graph, in order.
    pub fn graph_ops(&self, graph: u64) -> Result<Vec<Op>> {
        self.ops(graph).cloned()
    }

    /// Destroys a graph (not one being captured into).
    pub fn destroy_graph(&mut self, graph: u64) -> Result<()> {
        self.ops(graph)?;
        if self.captures.values().any(|c| c.graph == graph) {
            return Err(CoreError::CaptureViolation(
                "graph is still being captured".into(),
            ));
        }
        self.graphs.remove(&graph);
        self.held.remove(&graph);
        Ok(())
    }

    /// Freezes a graph into an executable graph, which holds the graph's user objects too.
    pub fn instantiate(&mut self, graph: u64) -> Result<u64> {
        let ops = self.ops(graph)?.clone();
        let e = self.fresh();
        self.execs.insert(e, ops);
        if let Some(h) = self.held.get(&graph).cloned() {
            self.held.insert(e, h);
        }
        Ok(e)
    }

    /// `cudaGraphExecUpdate`: gives executable graph `exec` the operations of `graph` when
    /// their shapes match, so the next launch replays `graph`'s work with its own arguments
    /// (addresses, sizes, host functions and their data, kernels: CUDA 11.2 and later let a
    /// kernel node change its function). Refused, with the executable graph unchanged, as
    /// CUDA refuses (CUDA 12 runtime API, `cudaGraphExecUpdate`):
    /// [`UPDATE_TOPOLOGY_CHANGED`] when the node count differs (a graph here is the sequence
    /// its stream captured, so its topology is its length), [`UPDATE_NODE_TYPE_CHANGED`] when
    /// a node's type differs, [`UPDATE_PARAMETERS_CHANGED`] when a copy changes direction
    /// between host and device memory. Gives 0 or that result, and the position in `graph`
    /// (from 1) of the node refused, 0 for none. The user objects `exec` holds stay as they
    /// were.
    pub fn update_exec(&mut self, exec: u64, graph: u64) -> Result<(u32, usize)> {
        let new = self.ops(graph)?;
        let old = self.execs.get(&exec).ok_or(CoreError::InvalidHandle {
            what: "graph exec",
            handle: exec,
        })?;
        if old.len() != new.len() {
            return Ok((UPDATE_TOPOLOGY_CHANGED, 0));
        }
        for (i, (a, b)) in old.iter().zip(new).enumerate() {
            let refused = match (a, b) {
                (Op::Copy { kind: ka, .. }, Op::Copy { kind: kb, .. }) if ka != kb => {
                    UPDATE_PARAMETERS_CHANGED
                }
                _ if std::mem::discriminant(a) != std::mem::discriminant(b) => {
                    UPDATE_NODE_TYPE_CHANGED
                }
                _ => continue,
            };
            return Ok((refused, i + 1));
        }
        let new = new.clone();
        self.execs.insert(exec, new);
        Ok((0, 0))
    }

    /// `cudaUserObjectCreate`: an object whose creator holds `refs` references.
    pub fn create_user_object(&mut self, owned: Arc<OwnedData>, refs: u32) -> Result<u64> {
        if refs == 0 {
            return Err(CoreError::InvalidValue(
                "a user object needs at least one reference".into(),
            ));
        }
        let h = self.fresh();
        self.objects.insert(h, (owned, refs));
        Ok(h)
    }

    fn object(&mut self, object: u64) -> Result<&mut (Arc<OwnedData>, u32)> {
        self.objects
            .get_mut(&object)
            .ok_or(CoreError::InvalidHandle {
                what: "user object",
                handle: object,
            })
    }

    /// `cudaUserObjectRetain`: `count` more references of the creator's.
    pub fn retain_user_object(&mut self, object: u64, count: u32) -> Result<()> {
        let o = self.object(object)?;
        o.1 = o
            .1
            .checked_add(count)
            .ok_or_else(|| CoreError::InvalidValue("a user object's references overflow".into()))?;
        Ok(())
    }

    /// `cudaUserObjectRelease`: `count` of the creator's references go (the object with
    /// them, if no graph holds it).
    pub fn release_user_object(&mut self, object: u64, count: u32) -> Result<()> {
        let o = self.object(object)?;
        if count > o.1 {
            return Err(CoreError::InvalidValue(format!(
                "{count} references released of a user object that has {}",
                o.1
            )));
        }
        o.1 -= count;
        if o.1 == 0 {
            self.objects.remove(&object);
        }
        Ok(())
    }

    /// `cudaGraphRetainUserObject`: graph `graph` (made or being captured into) holds `count`
    /// references to `object`, new ones or, with `moved`, the creator's.
    pub fn graph_retain_user_object(
        &mut self,
        graph: u64,
        object: u64,
        count: u32,
        moved: bool,
    ) -> Result<()> {
        self.ops(graph)?;
        let owned = self.object(object)?.0.clone();
        if moved {
            self.release_user_object(object, count)?;
        }
        let held = self.held.entry(graph).or_default();
        held.extend((0..count).map(|_| (object, owned.clone())));
        Ok(())
    }

    /// `cudaGraphReleaseUserObject`: `count` of the references graph `graph` holds to `object`
    /// go.
    pub fn graph_release_user_object(&mut self, graph: u64, object: u64, count: u32) -> Result<()> {
        self.ops(graph)?;
        let held = self.held.entry(graph).or_default();
        let have = held.iter().filter(|(o, _)| *o == object).count();
        if (count as usize) > have {
            return Err(CoreError::InvalidValue(format!(
                "{count} references released of a user object the graph holds {have} of"
            )));
        }
        let mut left = count;
        held.retain(|(o, _)| {
            let drop = *o == object && left > 0;
            left -= u32::from(drop);
            !drop
        });
        Ok(())
    }

    /// The operations an executable graph replays.
    pub fn exec_ops(&self, exec: u64) -> Result<Vec<Op>> {
        self.execs
            .get(&exec)
            .cloned()
            .ok_or(CoreError::InvalidHandle {
                what: "graph exec",
                handle: exec,
            })
    }

    /// Destroys an executable graph (and its references to user objects).
    pub fn destroy_exec(&mut self, exec: u64) -> Result<()> {
        self.execs.remove(&exec).ok_or(CoreError::InvalidHandle {
            what: "graph exec",
            handle: exec,
        })?;
        self.held.remove(&exec);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Op = Op::Kernel { host_fun: 0x10 };

    fn k(n: u64) -> StreamKey {
        StreamKey::for_tests(n)
    }

    #[test]
    fn capture_records_and_ends() {
        let mut g = Graphs::default();
        assert!(!g.record(k(7), &K));
        g.begin(k(7)).unwrap();
        assert!(g.begin(k(7)).is_err());
        assert!(g.record(k(7), &K));
        let (status, id, graph) = g.info(k(7));
        assert_eq!(status, CaptureStatus::Active);
        assert!(id != 0 && graph != 0);
        assert!(g.destroy_graph(graph).is_err(), "still capturing");
        assert_eq!(g.end(k(7)).unwrap(), graph);
        assert_eq!(g.info(k(7)).0, CaptureStatus::None);
        assert_eq!(g.graph_ops(graph).unwrap().len(), 1);
        let e = g.instantiate(graph).unwrap();
        g.destroy_graph(graph).unwrap();
        assert_eq!(g.exec_ops(e).unwrap().len(), 1, "exec outlives its graph");
        g.destroy_exec(e).unwrap();
        assert!(g.exec_ops(e).is_err());
    }

    static DESTROYED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    unsafe extern "C" fn destroyed(_: *mut std::ffi::c_void) {
        DESTROYED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    #[test]
    fn user_objects_live_while_a_reference_does() {
        let gone = || DESTROYED.load(std::sync::atomic::Ordering::SeqCst);
        let mut g = Graphs::default();
        let owned = |g: &mut Graphs, refs| {
            // SAFETY: the destructor only counts.
            let o = unsafe { OwnedData::new(0, destroyed) };
            g.create_user_object(o, refs).unwrap()
        };
        // The creator's references only.
        let a = owned(&mut g, 2);
        g.retain_user_object(a, 1).unwrap();
        g.release_user_object(a, 2).unwrap();
        assert_eq!(gone(), 0);
        assert!(g.release_user_object(a, 2).is_err(), "one is left");
        g.release_user_object(a, 1).unwrap();
        assert_eq!(gone(), 1);
        assert!(
            g.retain_user_object(a, 1).is_err(),
            "gone with its last reference"
        );
        // A graph takes the creator's reference (moved); its executable graph holds it too.
        g.begin(k(5)).unwrap();
        let (_, _, graph) = g.info(k(5));
        let b = owned(&mut g, 1);
        g.graph_retain_user_object(graph, b, 1, true).unwrap();
        assert!(g.release_user_object(b, 1).is_err(), "moved to the graph");
        let graph = g.end(k(5)).unwrap();
        let exec = g.instantiate(graph).unwrap();
        g.destroy_graph(graph).unwrap();
        assert_eq!(gone(), 1, "the executable graph still holds it");
        g.destroy_exec(exec).unwrap();
        assert_eq!(gone(), 2);
        // A graph's own references, released again.
        let graph = g.create_graph();
        let c = owned(&mut g, 1);
        g.graph_retain_user_object(graph, c, 2, false).unwrap();
        g.graph_release_user_object(graph, c, 1).unwrap();
        assert!(g.graph_release_user_object(graph, c, 2).is_err());
        g.release_user_object(c, 1).unwrap();
        assert_eq!(gone(), 2, "the graph holds one");
        g.graph_release_user_object(graph, c, 1).unwrap();
        assert_eq!(gone(), 3);
        // SAFETY: the destructor only counts.
        let never = unsafe { OwnedData::new(0, destroyed) };
        assert!(g.create_user_object(never, 0).is_err());
    }

    #[test]
    fn fork_join_through_events() {
        let mut g = Graphs::default();
        g.begin(k(1)).unwrap();
        assert!(g.event_recorded(100, k(1)));
        assert!(g.event_waited(k(2), 100).unwrap());
        assert!(g.record(k(2), &K));
        assert!(g.end(k(2)).is_err(), "only the origin ends a capture");
        let graph = g.end(k(1)).unwrap();
        assert!(!g.is_capturing(k(2)));
        assert_eq!(g.graph_ops(graph).unwrap().len(), 1);
        assert!(!g.event_waited(k(3), 100).unwrap(), "capture events expire");
    }
}
