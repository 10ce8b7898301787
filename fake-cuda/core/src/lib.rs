//! The fake CUDA core: devices, memory arenas, streams, events, kernels and virtual clocks of
//! one process, in safe Rust except where it maps memory and copies.
//!
//! This crate holds no global state but the process's descriptor broker ([`broker`]). [`Core`] is the whole state of a process; exactly one is
//! created per process, by `libncclsim_cuda.so` (crate `ncclsim-cuda`), and the ABI front-ends
//! (`libcudart.so.12`, later `.13`, `libcuda.so.1`, `libnvidia-ml.so.1`, `libnccl.so.2`) reach it
//! through the C vtable in [`abi`]. Front-ends link this crate only for the vtable's types (and
//! reach the core through crate `fake-cuda-client`), never to make a second `Core`.
//!
//! Module map: [`device`] (what a GPU looks like, `CUDA_VISIBLE_DEVICES`), [`arena`] (device
//! memory in memfds), [`ipc`] (handle codec and cross-process mapping), [`timeline`] (streams,
//! events, virtual time), [`timing`] (durations of copies), [`kernels`] (registry and launch
//! counts), [`version`] (the driver version every front-end reports), [`error`].
//!
//! [`Core`]'s own calls are grouped by kind, one file each: `memory`, `copies` (with
//! `Core::submit`, through which all stream work goes), `streams`, `capture`, `ipc_calls`,
//! `kernel_calls`; this file holds the state, the devices and the clock.

pub use fake_cuda_abi as abi;
pub mod arena;
pub mod backing;
pub mod broker;
pub mod device;
pub use fake_cuda_abi::error;
pub mod graph;
pub mod intervals;
pub mod ipc;
pub mod kernels;
pub mod reserve;
pub mod threads;
pub mod timeline;
pub mod timing;
pub mod topology;
pub use fake_cuda_abi::version;
pub mod vmm;

mod capture;
mod compute_trace;
mod copies;
mod ipc_calls;
mod kernel_calls;
mod memory;
mod publish;
mod sharing;
mod streams;

pub use device::{DeviceDesc, PciBusId};
pub use error::{CoreError, Result, Status};
pub use fake_cuda_abi::{SimDuration, SimTime};
pub use kernel_calls::ComputeWork;

use abi::CWorkFn;
use arena::Arena;
use graph::Op;
use ipc::{EventHandle, ForeignMapping, MemHandle, HANDLE_BYTES};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use timeline::Timeline;
use timing::CopyPath;

thread_local! {
    /// The stream of the host function running on this thread (see [`Core::host_stream`]).
    static HOST_STREAM: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
    /// Under the virtual clock, (core id, the latest completion this thread polled for): a
    /// thread that spun on a query until some work completed is at least that far itself.
    static POLLED: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
    /// (core id, the thread's current device): a thread that never set one is on device 0.
    static CURRENT: std::cell::Cell<(u64, i32)> = const { std::cell::Cell::new((0, 0)) };
    /// Under the virtual clock, this thread's last unanswered query: (core id, the completion it
    /// asked about, the host time that poll cost, the thread's clock after it). See
    /// [`Core::poll_virtual`].
    static LAST_POLL: std::cell::Cell<(u64, u64, u64, u64)> =
        const { std::cell::Cell::new((0, 0, 0, 0)) };
}

/// The host time one query of unfinished work costs under the virtual clock, ns (a
/// `cudaEventQuery` or `cudaStreamQuery` returning "not ready" is a driver call of about a
/// microsecond).
pub const POLL_NS: u64 = 1_000;

/// Tells cores apart in [`POLLED`] and [`CURRENT`] (tests make several cores in one process).
static NEXT_CORE_ID: AtomicU64 = AtomicU64::new(1);

/// Behaviour switches read from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// `NCCLSIM_PACE=1`: queries and synchronisation follow the wall clock to virtual time.
    pub pace: bool,
    /// `NCCLSIM_CLOCK=virtual`: the program's host clock is the host's virtual clock (read
    /// through `libncclsim_cuda.so`'s clock functions), and a query of work the calling
    /// thread's clock has not reached reports "not ready" once while it moves that thread's
    /// clock to the completion (the thread polled until then): the thread reads that time and
    /// the work it submits next starts no earlier; other threads are not moved (a watchdog
    /// polling from its own thread does not delay the program's work). Pacing is off under it.
    pub virtual_clock: bool,
    /// `NCCLSIM_STRICT_KERNELS=1`: kernel launches fail instead of being counted.
    pub strict_kernels: bool,
    /// `NCCLSIM_CACHE_LIMIT`: most bytes of freed device memory whose pages are kept committed
    /// for reuse, over all devices; past it, free ranges are trimmed.
    pub cache_limit: u64,
    /// `NCCLSIM_HOST_MEMORY`: the most host memory this process's device memory may commit.
    pub host_memory: Option<u64>,
    /// How long binding memory to a multicast object, or mapping it, waits for the rest of
    /// its team to be added ([`vmm::multicast::TEAM_WAIT`]).
    pub team_wait: std::time::Duration,
    /// `NCCLSIM_COMPUTE=time`: kernels compute nothing, so device memory mostly holds no
    /// defined values; device-to-device copies, memsets and fills larger than
    /// [`SHAPES_ONLY_MOVED`] take their time without touching (or committing) memory.
    pub shapes_only: bool,
}

/// The most bytes a device-only copy, memset or fill writes under `--compute time`
/// ([`Config::shapes_only`]): smaller ones still run, since they may carry values the host made
/// (copied in) that the program reads back.
pub const SHAPES_ONLY_MOVED: usize = 64 << 10;

impl Default for Config {
    /// No pacing, kernels counted, no cache limit.
    fn default() -> Config {
        Config {
            pace: false,
            virtual_clock: false,
            strict_kernels: false,
            cache_limit: u64::MAX,
            host_memory: None,
            team_wait: vmm::multicast::TEAM_WAIT,
            shapes_only: false,
        }
    }
}

impl Config {
    /// The switches of the run environment: `NCCLSIM_PACE`, `NCCLSIM_CLOCK`,
    /// `NCCLSIM_STRICT_KERNELS`, `NCCLSIM_HOST_MEMORY` and `NCCLSIM_CACHE_LIMIT` (default a
    /// quarter of the machine's memory).
    pub fn of(env: &run_env::RunEnv) -> Config {
        let virtual_clock = env.virtual_host_clock();
        Config {
            pace: env.pace && !virtual_clock,
            virtual_clock,
            strict_kernels: env.strict_kernels,
            cache_limit: env.cache_limit.unwrap_or_else(default_cache_limit),
            host_memory: env.host_memory,
            team_wait: vmm::multicast::TEAM_WAIT,
            shapes_only: env.compute == Some(run_env::Compute::Time),
        }
    }
}

/// A quarter of the machine's physical memory (1 GiB if unknown).
fn default_cache_limit() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && page > 0 {
        (pages as u64).saturating_mul(page as u64) / 4
    } else {
        1 << 30
    }
}

/// `cudaMemcpyKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyKind {
    /// `cudaMemcpyHostToHost`.
    HostToHost,
    /// `cudaMemcpyHostToDevice`.
    HostToDevice,
    /// `cudaMemcpyDeviceToHost`.
    DeviceToHost,
    /// `cudaMemcpyDeviceToDevice`.
    DeviceToDevice,
    /// `cudaMemcpyDefault`: inferred from the pointers.
    Default,
}

impl CopyKind {
    /// From the numeric `cudaMemcpyKind`.
    pub fn from_raw(kind: i32) -> Result<CopyKind> {
        Ok(match kind {
            0 => CopyKind::HostToHost,
            1 => CopyKind::HostToDevice,
            2 => CopyKind::DeviceToHost,
            3 => CopyKind::DeviceToDevice,
            4 => CopyKind::Default,
            k => return Err(CoreError::InvalidValue(format!("cudaMemcpyKind {k}"))),
        })
    }
}

pub use fake_cuda_abi::MemoryKind;

/// Answer of [`Core::pointer_info`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointerInfo {
    /// Kind of memory.
    pub kind: MemoryKind,
    /// Visible device ordinal, or -1 for host/unknown memory.
    pub device: i32,
    /// Start of the allocation containing the pointer (0 if unknown).
    pub base: usize,
    /// Size of that allocation (0 if unknown).
    pub size: usize,
}

#[derive(Debug)]
struct HostBlock {
    len: usize,
    /// Allocated by us (unmapped on free) rather than registered user memory.
    owned: bool,
}

#[derive(Debug)]
struct Import {
    mapping: ForeignMapping,
    device: u32,
    key: (u32, u32, u64),
    refs: u32,
}

#[derive(Debug, Clone, Copy)]
struct DeviceRange {
    physical: usize,
    base: usize,
    size: usize,
    /// End of the memory readable from the pointer on (past `base + size` only across
    /// adjacent mappings of a reservation).
    read_end: usize,
    /// End of the memory writable from the pointer on.
    write_end: usize,
}

impl DeviceRange {
    /// A plain allocation: readable and writable to its end.
    fn whole(physical: usize, base: usize, size: usize) -> DeviceRange {
        DeviceRange {
            physical,
            base,
            size,
            read_end: base + size,
            write_end: base + size,
        }
    }
}

/// Per-device memory statistics for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes currently allocated.
    pub current: u64,
    /// Highest `current` seen.
    pub peak: u64,
}

#[derive(Default)]
struct State {
    arenas: Vec<Option<Arena>>,
    next_arena_id: u32,
    next_serial: u64,
    peak: Vec<u64>,
    host: BTreeMap<usize, HostBlock>,
    imports: BTreeMap<usize, Import>,
    timeline: Timeline,
    kernels: kernels::Kernels,
    graphs: graph::Graphs,
    /// Events exported with `cudaIpcGetEventHandle`: event -> (physical device, slot, serial).
    event_exports: HashMap<u64, (usize, u32, u64)>,
    /// Device addresses taken back by `cudaDeviceReset` / `cudaIpcCloseMemHandle` /
    /// `cuMemAddressFree`.
    retired: reserve::Retired,
    /// Allocation handles, reservations and mappings of the `cuMem*` API.
    vmm: vmm::Vmm,
    /// Measured kernel durations that override the compute model (`NCCLSIM_KERNEL_TIMES`).
    kernel_times: Option<kernel_times::KernelTimes>,
    /// This process's telemetry record for the other processes of its job.
    publisher: publish::Publisher,
    /// Where compute is traced (`NCCLSIM_TRACE`), if anywhere.
    compute_trace: Option<compute_trace::Trace>,
    /// `cudaProfilerStart` ranges opened so far, and whether one is open.
    profiler: (u64, bool),
    /// Training steps the program's framework marked as ended so far (`step_mark`).
    step_marks: u64,
    /// The multiprocessors communication kernels hold, per device and time (`sharing`).
    comm_load: sharing::CommLoad,
}

impl State {
    /// The index of the `cudaProfilerStart` range open now, if one is.
    fn open_profiler_range(&self) -> Option<u64> {
        let (ranges, open) = self.profiler;
        open.then(|| ranges.saturating_sub(1))
    }

    /// The arena holding `ptr` in its data area and the live allocation there containing it;
    /// `Ok(None)` when no arena of this process holds `ptr`.
    fn live_allocation(&mut self, ptr: usize) -> Result<Option<(&mut Arena, arena::Allocation)>> {
        let Some(a) = self.arenas.iter_mut().flatten().find(|a| a.contains(ptr)) else {
            return Ok(None);
        };
        let alloc = a.allocation_at(ptr).ok_or(CoreError::InvalidPointer {
            ptr,
            len: 0,
            why: "not inside a live device allocation",
        })?;
        Ok(Some((a, alloc)))
    }

    fn device_range(&self, ptr: usize) -> Option<DeviceRange> {
        for a in self.arenas.iter().flatten() {
            if a.contains(ptr) {
                let alloc = a.allocation_at(ptr)?;
                return Some(DeviceRange::whole(
                    a.device() as usize,
                    a.data_base() + alloc.offset as usize,
                    alloc.size as usize,
                ));
            }
        }
        if let Some((&base, imp)) = self.imports.range(..=ptr).next_back() {
            if ptr < base + imp.mapping.len() {
                return Some(DeviceRange::whole(
                    imp.device as usize,
                    base,
                    imp.mapping.len(),
                ));
            }
        }
        let m = self.vmm.lookup(ptr).ok().flatten()?;
        Some(DeviceRange {
            physical: m.physical,
            base: m.base,
            size: m.size,
            read_end: m.read_end,
            write_end: m.write_end,
        })
    }

    /// Why `[ptr, ptr + len)` is not device memory the core can reach.
    fn unreachable_why(&self, ptr: usize, len: usize) -> &'static str {
        self.retired
            .overlapping(ptr, len)
            .or_else(|| self.vmm.lookup(ptr).err())
            .unwrap_or("not inside a live device allocation")
    }

    /// Whether `[ptr, ptr + len)` touches memory the core maps or mapped as device memory
    /// (arenas with their headers, imports, retired ranges): such a range is never host
    /// memory, so it must be checked as device memory.
    fn touches_device_space(&self, ptr: usize, len: usize) -> bool {
        let end = ptr.saturating_add(len.max(1));
        let overlaps = |start: usize, l: usize| start < end && ptr < start + l;
        self.arenas.iter().flatten().any(|a| {
            let (s, l) = a.mapping();
            overlaps(s, l)
        }) || self
            .imports
            .range(..end)
            .next_back()
            .is_some_and(|(&s, imp)| overlaps(s, imp.mapping.len()))
            || self.retired.overlapping(ptr, len).is_some()
            || self.vmm.touches(ptr, len)
    }
}

/// The whole fake CUDA state of one process. Thread-safe.
pub struct Core {
    devices: Vec<DeviceDesc>,
    visible: Vec<usize>,
    config: Config,
    epoch: Instant,
    /// This core's key in the per-thread polled times.
    id: u64,
    /// The host's virtual clock, as the timeline holds it, readable without the state's lock
    /// (the virtual host clock reads it on every clock read of the program).
    host_ns: AtomicU64,
    state: Mutex<State>,
}

impl Core {
    /// A core over `devices` (physical order) with `visible` the physical indices a program
    /// sees, in ordinal order.
    pub fn new(devices: Vec<DeviceDesc>, visible: Vec<usize>, config: Config) -> Core {
        assert!(
            visible.iter().all(|&v| v < devices.len()),
            "invariant: visible devices index the device list"
        );
        let state = State {
            arenas: (0..devices.len()).map(|_| None).collect(),
            peak: vec![0; devices.len()],
            ..State::default()
        };
        Core {
            devices,
            visible,
            config,
            epoch: Instant::now(),
            id: NEXT_CORE_ID.fetch_add(1, Ordering::Relaxed),
            host_ns: AtomicU64::new(0),
            state: Mutex::new(state),
        }
    }

    /// The process core as the run environment ([`run_env::RunEnv::current`]) describes it:
    /// a value it cannot use is [`CoreError::Environment`]; see [`Core::of_env`].
    pub fn from_env() -> Result<Core> {
        let env = run_env::RunEnv::current().map_err(|e| CoreError::Environment(e.to_string()))?;
        Core::of_env(env, std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref())
    }

    /// The core of run environment `env`: the devices of its topology node
    /// ([`topology::TopologyChoice`]: `NCCLSIM_TOPO`/`NCCL_TOPO_FILE`, `NCCLSIM_NODE`, else
    /// the bundled DGX A100) of which `cuda_visible_devices` leaves some visible, its switches
    /// ([`Config::of`]), the measured kernel times of `NCCLSIM_KERNEL_TIMES` matched by
    /// `NCCLSIM_KERNEL_TIMES_MATCH` (a file that cannot be read or parsed is an error), and
    /// the job directory `NCCLSIM_JOB_DIR` where it publishes its telemetry record.
    pub fn of_env(env: &run_env::RunEnv, cuda_visible_devices: Option<&str>) -> Result<Core> {
        let devices = topology::TopologyChoice::of(env).devices()?;
        let visible = device::visible_devices(&devices, cuda_visible_devices);
        let times = kernel_times::KernelTimes::from_settings(
            env.kernel_times
                .as_ref()
                .map(|p| p.to_string_lossy())
                .as_deref(),
            env.kernel_times_match.as_deref(),
        )
        .map_err(|e| CoreError::InvalidValue(format!("NCCLSIM_KERNEL_TIMES: {e}")))?;
        let core = Core::new(devices, visible, Config::of(env));
        core.set_kernel_times(times);
        if let Some(dir) = &env.job_dir {
            core.publish_to(dir, env.node_or_zero());
        }
        if let Some(dir) = &env.trace {
            core.trace_compute_to(dir)?;
        }
        Ok(core)
    }

    /// Makes launches take the measured durations of `times` where it has them (None: the
    /// compute model's times, raw kernels none).
    pub fn set_kernel_times(&self, times: Option<kernel_times::KernelTimes>) {
        self.lock().kernel_times = times;
    }

    /// Publishes this process's telemetry record in job directory `dir` as a process of
    /// simulated node `node` (see [`abi::telemetry`]), from the next allocation or work on.
    pub fn publish_to(&self, dir: impl Into<std::path::PathBuf>, node: u32) {
        self.lock().publisher = publish::Publisher::Pending(publish::Job {
            dir: dir.into(),
            node,
        });
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock was caught at the C boundary; the state it left is
        // still structurally valid (every mutation completes before it can panic), so go on.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The environment switches in force.
    pub fn config(&self) -> Config {
        self.config
    }

    /// The calling thread's virtual host clock: ns of virtual time since the core started that
    /// the host has waited for (synchronisations on any thread), or that this thread polled
    /// for under the virtual clock, whichever is later. Lock-free.
    pub fn host_clock(&self) -> SimTime {
        SimTime::from_nanos(self.host_ns.load(Ordering::Acquire)).max(self.polled())
    }

    /// What the calling thread polled for on this core (0 if nothing).
    fn polled(&self) -> SimTime {
        let (id, t) = POLLED.get();
        if id == self.id {
            SimTime::from_nanos(t)
        } else {
            SimTime::ZERO
        }
    }

    /// The earliest time work the calling thread submits may start besides its stream's and
    /// the host's clocks: the wall clock when pacing, what the thread polled for otherwise.
    fn start_floor(&self) -> Option<SimTime> {
        let polled = self.polled();
        match self.pace_now() {
            Some(wall) => Some(wall.max(polled)),
            None => (polled > SimTime::ZERO).then_some(polled),
        }
    }

    /// The host waited for virtual time `t` (never moves the host clock back).
    fn host_wait(&self, st: &mut State, t: SimTime) {
        st.timeline.host_waited(t);
        self.host_ns
            .fetch_max(st.timeline.host_clock().as_nanos(), Ordering::AcqRel);
    }

    /// The host waited until virtual time `t` (a blocking call of another library that
    /// waits for work it enqueued, such as `ncclCommFinalize`).
    pub fn host_wait_until(&self, t: SimTime) {
        let mut st = self.lock();
        self.host_wait(&mut st, t);
    }

    /// Under the virtual clock, the calling thread slept `d` of host time: its clock moves on
    /// by `d` as if it had polled until then, so what it reads and the work it submits next
    /// are that much later; other threads are not moved.
    pub fn host_thread_slept(&self, d: SimDuration) {
        POLLED.set((self.id, (self.host_clock() + d).as_nanos()));
    }

    /// The calling thread spent `d` of host time issuing work (a framework's per-op CPU
    /// path): under the virtual clock its clock moves on by `d` (`host_thread_slept`); under
    /// the wall clock the host's own time is what passes, so nothing moves.
    pub fn host_issued(&self, d: SimDuration) {
        if self.config.virtual_clock {
            self.host_thread_slept(d);
        }
    }

    /// Under the virtual clock, the answer of a query of work completing at virtual time
    /// `done`: done if the calling thread's clock has reached it; otherwise "not ready", and
    /// the thread's clock moves on by the time the query cost the host ([`POLL_NS`]), never
    /// past `done`. A thread that polls the same work again with nothing between (a spin loop)
    /// pays twice the last poll each time, so a spin over any wait reaches the completion in
    /// a few dozen polls and reads it exactly; a thread that queries and goes on with its work
    /// (a caching allocator looking at its pending frees, between the ops it launches) pays
    /// one query's time, and its work is not held back to the completion.
    fn poll_virtual(&self, done: SimTime) -> Result<()> {
        let now = self.host_clock();
        if now >= done {
            return Ok(());
        }
        let (id, asked, cost, after) = LAST_POLL.get();
        let spinning = id == self.id && asked == done.as_nanos() && after == now.as_nanos();
        let cost = if spinning {
            cost.saturating_mul(2)
        } else {
            POLL_NS
        };
        let next = (now + SimDuration::from_nanos(cost)).min(done);
        POLLED.set((self.id, next.as_nanos()));
        LAST_POLL.set((self.id, done.as_nanos(), cost, next.as_nanos()));
        Err(CoreError::NotReady)
    }

    /// The wall clock since the core started, as an instant of the virtual clocks (pacing).
    fn wall(&self) -> SimTime {
        SimTime::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn pace_now(&self) -> Option<SimTime> {
        self.config.pace.then(|| self.wall())
    }

    fn pace_until(&self, clock: SimTime) {
        if self.config.pace {
            let ahead = clock - self.wall();
            if !ahead.is_zero() {
                std::thread::sleep(Duration::from_nanos(ahead.as_nanos()));
            }
        }
    }

    // ---- devices -------------------------------------------------------------------------

    /// Number of visible devices.
    pub fn device_count(&self) -> usize {
        self.visible.len()
    }

    fn physical(&self, ordinal: i32) -> Result<usize> {
        usize::try_from(ordinal)
            .ok()
            .and_then(|o| self.visible.get(o).copied())
            .ok_or(CoreError::InvalidDevice {
                ordinal,
                visible: self.visible.len(),
            })
    }

    fn ordinal_of(&self, physical: usize) -> Option<i32> {
        self.visible
            .iter()
            .position(|&p| p == physical)
            .map(|o| o as i32)
    }

    /// Description of visible device `ordinal`.
    pub fn device(&self, ordinal: i32) -> Result<&DeviceDesc> {
        Ok(&self.devices[self.physical(ordinal)?])
    }

    /// Virtual time on physical device `index`: the summed durations of the work this process
    /// scheduled there, and when all of it completes.
    pub fn physical_device_busy(&self, index: usize) -> (SimDuration, SimTime) {
        self.lock().timeline.device_busy(index)
    }

    /// Number of devices of the node, whatever `CUDA_VISIBLE_DEVICES` hides (NVML's view).
    pub fn physical_device_count(&self) -> usize {
        self.devices.len()
    }

    /// Description of physical device `index` (NVML's numbering: the node's order).
    pub fn physical_device(&self, index: usize) -> Result<&DeviceDesc> {
        self.devices.get(index).ok_or(CoreError::InvalidDevice {
            ordinal: index as i32,
            visible: self.devices.len(),
        })
    }

    /// Physical index of visible device `ordinal`.
    pub fn physical_index(&self, ordinal: i32) -> Result<usize> {
        self.physical(ordinal)
    }

    /// The calling thread's current device (0 until set).
    pub fn current_device(&self) -> i32 {
        match CURRENT.get() {
            (id, ordinal) if id == self.id => ordinal,
            _ => 0,
        }
    }

    /// Sets the calling thread's current device.
    pub fn set_device(&self, ordinal: i32) -> Result<()> {
        self.physical(ordinal)?;
        CURRENT.set((self.id, ordinal));
        Ok(())
    }

    fn current_checked(&self) -> Result<(i32, usize)> {
        if self.visible.is_empty() {
            return Err(CoreError::NoDevice);
        }
        let o = self.current_device();
        Ok((o, self.physical(o)?))
    }
}

/// One device in a [`Report`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeviceReport {
    /// Visible ordinal.
    pub ordinal: usize,
    /// PCI address.
    pub pci_bus_id: String,
    /// Device name.
    pub name: String,
    /// Bytes allocated at the time of the report.
    pub current_bytes: u64,
    /// Most bytes allocated at once.
    pub peak_bytes: u64,
    /// Device memory.
    pub capacity_bytes: u64,
}

/// What a process did with the fake CUDA: written as JSON at exit when `NCCLSIM_REPORT` names
/// a file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Report {
    /// Memory per visible device.
    pub devices: Vec<DeviceReport>,
    /// Core API calls by name.
    pub calls: BTreeMap<String, u64>,
    /// Kernel launches by kernel name.
    pub kernel_launches: BTreeMap<String, u64>,
    /// Streams that exist at the time of the report (per-thread default streams of exited
    /// threads are dropped along the way).
    pub streams: usize,
}

#[cfg(test)]
mod tests;
