//! The fake CUDA core: devices, memory arenas, streams, events, kernels and virtual clocks of
//! one process, in safe Rust except where it maps memory and copies.
//!
//! This crate holds no global state. [`Core`] is the whole state of a process; exactly one is
//! created per process, by `libncclsim_cuda.so` (crate `ncclsim-cuda`), and the ABI front-ends
//! (`libcudart.so.12`, later `.13`, `libcuda.so.1`, `libnvidia-ml.so.1`, `libnccl.so.2`) reach it
//! through the C vtable in [`abi`]. Front-ends link this crate only for the vtable's types (and
//! reach the core through crate `fake-cuda-client`), never to make a second `Core`.
//!
//! Module map: [`device`] (what a GPU looks like, `CUDA_VISIBLE_DEVICES`), [`arena`] (device
//! memory in memfds), [`ipc`] (handle codec and cross-process mapping), [`timeline`] (streams,
//! events, virtual time), [`timing`] (durations of copies), [`kernels`] (registry and launch
//! counts), [`version`] (the driver version every front-end reports), [`error`].

pub mod abi;
pub mod arena;
pub mod device;
pub mod error;
pub mod graph;
pub mod intervals;
pub mod ipc;
pub mod kernels;
pub mod reserve;
pub mod threads;
pub mod timeline;
pub mod timing;
pub mod topology;
pub mod version;
pub mod vmm;

pub use device::{DeviceDesc, PciBusId};
pub use error::{CoreError, Result, Status};

use abi::CWorkFn;
use arena::Arena;
use graph::Op;
use ipc::{EventHandle, ForeignMapping, MemHandle, HANDLE_BYTES};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use timeline::Timeline;
use timing::CopyPath;

thread_local! {
    /// The stream of the host function running on this thread (see [`Core::host_stream`]).
    static HOST_STREAM: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Behaviour switches read from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// `NCCLSIM_PACE=1`: queries and synchronisation follow the wall clock to virtual time.
    pub pace: bool,
    /// `NCCLSIM_STRICT_KERNELS=1`: kernel launches fail instead of being counted.
    pub strict_kernels: bool,
    /// `NCCLSIM_CACHE_LIMIT`: most bytes of freed device memory whose pages are kept committed
    /// for reuse, over all devices; past it, free ranges are trimmed.
    pub cache_limit: u64,
}

impl Default for Config {
    /// No pacing, kernels counted, no cache limit.
    fn default() -> Config {
        Config {
            pace: false,
            strict_kernels: false,
            cache_limit: u64::MAX,
        }
    }
}

impl Config {
    /// Reads `NCCLSIM_PACE`, `NCCLSIM_STRICT_KERNELS` and `NCCLSIM_CACHE_LIMIT` (bytes, with an
    /// optional K/M/G/T binary suffix; default a quarter of the machine's memory; an invalid
    /// value is reported on stderr and the default used).
    pub fn from_env() -> Config {
        let on = |k: &str| std::env::var(k).is_ok_and(|v| v == "1" || v == "true");
        let cache_limit = match std::env::var("NCCLSIM_CACHE_LIMIT") {
            Ok(v) => parse_bytes(&v).unwrap_or_else(|| {
                eprintln!(
                    "ncclsim: NCCLSIM_CACHE_LIMIT={v:?} is not a byte count (e.g. 8G); using the default"
                );
                default_cache_limit()
            }),
            Err(_) => default_cache_limit(),
        };
        Config {
            pace: on("NCCLSIM_PACE"),
            strict_kernels: on("NCCLSIM_STRICT_KERNELS"),
            cache_limit,
        }
    }
}

/// `1234`, `64K`, `8M`, `4G`, `1T` (binary multiples) as bytes.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 10),
        (i, 'm' | 'M') => (&t[..i], 20),
        (i, 'g' | 'G') => (&t[..i], 30),
        (i, 't' | 'T') => (&t[..i], 40),
        _ => (t, 0),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
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

/// What kind of memory a pointer points into (`cudaMemoryType` numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum MemoryKind {
    /// Memory the core does not know.
    Unregistered = 0,
    /// Pinned host memory (allocated or registered).
    Host = 1,
    /// Device memory (own or opened through IPC).
    Device = 2,
}

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
}

impl State {
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
    state: Mutex<State>,
    /// Each thread's current device (forgotten after the thread exits).
    current: Mutex<threads::PerThread<i32>>,
}

/// Work enqueued on a stream, run after the core's lock is released.
type Work<'a> = Box<dyn FnOnce() + 'a>;

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
            state: Mutex::new(state),
            current: Mutex::new(threads::PerThread::default()),
        }
    }

    /// The process core as the environment describes it: the devices of the topology node
    /// ([`topology::TopologyChoice`]: `NCCLSIM_TOPO`/`NCCL_TOPO_FILE`, `NCCLSIM_NODE`, else the
    /// bundled DGX A100), `CUDA_VISIBLE_DEVICES`, `NCCLSIM_PACE`, `NCCLSIM_STRICT_KERNELS`.
    pub fn from_env() -> Result<Core> {
        let choice = topology::TopologyChoice::from_lookup(|k| std::env::var(k).ok())?;
        let devices = choice.devices()?;
        let cvd = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let visible = device::visible_devices(&devices, cvd.as_deref());
        Ok(Core::new(devices, visible, Config::from_env()))
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

    fn wall_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn pace_now(&self) -> Option<u64> {
        self.config.pace.then(|| self.wall_ns())
    }

    fn pace_until(&self, clock_ns: u64) {
        if self.config.pace {
            let now = self.wall_ns();
            if clock_ns > now {
                std::thread::sleep(Duration::from_nanos(clock_ns - now));
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
        let cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        cur.get().copied().unwrap_or(0)
    }

    /// Sets the calling thread's current device.
    pub fn set_device(&self, ordinal: i32) -> Result<()> {
        self.physical(ordinal)?;
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        *cur.get_or_insert_with(|| ordinal, |_| {}) = ordinal;
        Ok(())
    }

    fn current_checked(&self) -> Result<(i32, usize)> {
        if self.visible.is_empty() {
            return Err(CoreError::NoDevice);
        }
        let o = self.current_device();
        Ok((o, self.physical(o)?))
    }

    // ---- memory --------------------------------------------------------------------------

    /// Allocates `size` bytes of device memory on visible device `ordinal`.
    pub fn malloc(&self, ordinal: i32, size: usize) -> Result<usize> {
        let phys = self.physical(ordinal)?;
        let cap = self.devices[phys].memory_bytes;
        let oom = |used: u64, requested: u64| CoreError::OutOfMemory {
            device: ordinal,
            requested,
            free: cap - used,
            total: cap,
        };
        let rounded = arena::round_size(size as u64).ok_or_else(|| oom(0, u64::MAX))?;
        let mut st = self.lock();
        self.arena(&mut st, phys)?;
        st.next_serial += 1;
        let serial = st.next_serial;
        // Allocations of the cuMem* API share the device's memory.
        let others = st.vmm.used(phys);
        let a = st.arenas[phys].as_mut().expect("created above");
        if a.used() + others + rounded > cap {
            return Err(oom(a.used() + others, rounded));
        }
        let alloc = a
            .alloc(rounded, serial)
            .ok_or_else(|| oom(a.used() + others, rounded))?;
        let (ptr, used) = (a.data_base() + alloc.offset as usize, a.used() + others);
        st.peak[phys] = st.peak[phys].max(used);
        Ok(ptr)
    }

    /// The arena of physical device `phys`, created on first use.
    fn arena<'s>(&self, st: &'s mut State, phys: usize) -> Result<&'s mut Arena> {
        if st.arenas[phys].is_none() {
            st.next_arena_id += 1;
            let id = st.next_arena_id;
            let cap = self.devices[phys].memory_bytes;
            st.arenas[phys] = Some(Arena::create(id, phys as u32, cap)?);
        }
        Ok(st.arenas[phys].as_mut().expect("created above"))
    }

    /// Frees device memory from [`Core::malloc`]. Freeing 0 is a no-op.
    pub fn free(&self, ptr: usize) -> Result<()> {
        if ptr == 0 {
            return Ok(());
        }
        let mut st = self.lock();
        for a in st.arenas.iter_mut().flatten() {
            if a.contains(ptr) {
                let off = (ptr - a.data_base()) as u64;
                a.free(off).ok_or(CoreError::InvalidPointer {
                    ptr,
                    len: 0,
                    why: "not the start of a live allocation",
                })?;
                let cached: u64 = st.arenas.iter().flatten().map(Arena::cached).sum();
                if cached > self.config.cache_limit {
                    for a in st.arenas.iter_mut().flatten() {
                        a.trim();
                    }
                }
                return Ok(());
            }
        }
        Err(CoreError::InvalidPointer {
            ptr,
            len: 0,
            why: "not device memory of this process",
        })
    }

    /// Gives the pages of freed memory of visible device `ordinal` back to the system (freed
    /// memory otherwise keeps its pages for reuse); returns the bytes trimmed.
    pub fn trim(&self, ordinal: i32) -> Result<u64> {
        let phys = self.physical(ordinal)?;
        Ok(self.lock().arenas[phys].as_mut().map_or(0, Arena::trim))
    }

    /// Bytes of freed memory of visible device `ordinal` whose pages are kept for reuse.
    pub fn cached_bytes(&self, ordinal: i32) -> Result<u64> {
        let phys = self.physical(ordinal)?;
        Ok(self.lock().arenas[phys].as_ref().map_or(0, Arena::cached))
    }

    /// `(free, total)` bytes of visible device `ordinal` (logical: freed memory whose pages
    /// are kept for reuse counts as free).
    pub fn mem_info(&self, ordinal: i32) -> Result<(u64, u64)> {
        let phys = self.physical(ordinal)?;
        let total = self.devices[phys].memory_bytes;
        let st = self.lock();
        let used = st.arenas[phys].as_ref().map_or(0, Arena::used) + st.vmm.used(phys);
        Ok((total - used, total))
    }

    /// Current and peak allocated bytes per visible device.
    pub fn memory_stats(&self) -> Vec<MemoryStats> {
        let st = self.lock();
        self.visible
            .iter()
            .map(|&p| MemoryStats {
                current: st.arenas[p].as_ref().map_or(0, Arena::used) + st.vmm.used(p),
                peak: st.peak[p],
            })
            .collect()
    }

    /// Allocates pinned host memory (page-aligned, zero-filled).
    pub fn host_alloc(&self, size: usize) -> Result<usize> {
        let len = size.max(1);
        // SAFETY: anonymous private mapping; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(CoreError::OutOfMemory {
                device: -1,
                requested: size as u64,
                free: 0,
                total: 0,
            });
        }
        self.lock()
            .host
            .insert(p as usize, HostBlock { len, owned: true });
        Ok(p as usize)
    }

    /// Frees memory from [`Core::host_alloc`]. Freeing 0 is a no-op.
    pub fn host_free(&self, ptr: usize) -> Result<()> {
        if ptr == 0 {
            return Ok(());
        }
        let mut st = self.lock();
        match st.host.get(&ptr) {
            Some(b) if b.owned => {
                let b = st.host.remove(&ptr).expect("present");
                // SAFETY: unmapping exactly what host_alloc mapped.
                unsafe { libc::munmap(ptr as *mut libc::c_void, b.len) };
                Ok(())
            }
            _ => Err(CoreError::InvalidPointer {
                ptr,
                len: 0,
                why: "not memory from cudaHostAlloc/cudaMallocHost",
            }),
        }
    }

    /// Registers user memory as pinned host memory.
    pub fn host_register(&self, ptr: usize, size: usize) -> Result<()> {
        if ptr == 0 || size == 0 {
            return Err(CoreError::InvalidValue(
                "cudaHostRegister of a null or empty range".into(),
            ));
        }
        let mut st = self.lock();
        if st.host.contains_key(&ptr) {
            return Err(CoreError::InvalidValue(format!(
                "{ptr:#x} is already registered host memory"
            )));
        }
        st.host.insert(
            ptr,
            HostBlock {
                len: size,
                owned: false,
            },
        );
        Ok(())
    }

    /// Undoes [`Core::host_register`].
    pub fn host_unregister(&self, ptr: usize) -> Result<()> {
        let mut st = self.lock();
        match st.host.get(&ptr) {
            Some(b) if !b.owned => {
                st.host.remove(&ptr);
                Ok(())
            }
            _ => Err(CoreError::InvalidPointer {
                ptr,
                len: 0,
                why: "not registered host memory",
            }),
        }
    }

    /// What `ptr` points into.
    pub fn pointer_info(&self, ptr: usize) -> PointerInfo {
        let st = self.lock();
        if let Some(r) = st.device_range(ptr) {
            return PointerInfo {
                kind: MemoryKind::Device,
                device: self.ordinal_of(r.physical).unwrap_or(-1),
                base: r.base,
                size: r.size,
            };
        }
        if let Some((&base, b)) = st.host.range(..=ptr).next_back() {
            if ptr < base + b.len {
                return PointerInfo {
                    kind: MemoryKind::Host,
                    device: -1,
                    base,
                    size: b.len,
                };
            }
        }
        PointerInfo {
            kind: MemoryKind::Unregistered,
            device: -1,
            base: 0,
            size: 0,
        }
    }

    /// Where the live device allocation containing `ptr` lives in one of this process's
    /// arenas, for peers of a communicator that map the arena whole.
    pub fn arena_location(&self, ptr: usize) -> Result<abi::CArenaLocation> {
        let st = self.lock();
        for a in st.arenas.iter().flatten() {
            if !a.contains(ptr) {
                continue;
            }
            let alloc = a.allocation_at(ptr).ok_or(CoreError::InvalidPointer {
                ptr,
                len: 0,
                why: "not inside a live device allocation",
            })?;
            let header = arena::HEADER_BYTES as u64;
            return Ok(abi::CArenaLocation {
                owner_pid: std::process::id(),
                arena_id: a.id(),
                fd: a.raw_fd(),
                device: a.device() as i32,
                file_len: header + a.capacity(),
                offset: header + (ptr - a.data_base()) as u64,
                alloc_offset: header + alloc.offset,
                alloc_size: alloc.size,
            });
        }
        Err(CoreError::InvalidPointer {
            ptr,
            len: 0,
            why: "not inside a device allocation of this process",
        })
    }

    /// Checks that `[ptr, ptr + len)` is device memory the core can read (and write, if
    /// `write`).
    fn check_device(st: &State, ptr: usize, len: usize, write: bool) -> Result<DeviceRange> {
        let r = st
            .device_range(ptr)
            .ok_or_else(|| CoreError::InvalidPointer {
                ptr,
                len,
                why: st.unreachable_why(ptr, len),
            })?;
        let end = ptr.checked_add(len);
        if end.is_none_or(|end| end > r.read_end) {
            return Err(CoreError::InvalidPointer {
                ptr,
                len,
                why: "range runs past the end of its allocation",
            });
        }
        if write && end.is_none_or(|end| end > r.write_end) {
            return Err(CoreError::InvalidPointer {
                ptr,
                len,
                why: "memory mapped read-only (cuMemSetAccess)",
            });
        }
        Ok(r)
    }

    /// Checks one side of a copy: device sides must lie in one allocation; `Ok(None)` for host.
    fn check_side(
        st: &State,
        ptr: usize,
        len: usize,
        must_be_device: bool,
        write: bool,
    ) -> Result<Option<DeviceRange>> {
        if must_be_device || st.touches_device_space(ptr, len) {
            Self::check_device(st, ptr, len, write).map(Some)
        } else if ptr == 0 && len > 0 {
            Err(CoreError::InvalidValue("null host pointer".into()))
        } else {
            Ok(None)
        }
    }

    /// Checks the memory an operation touches and returns its modelled duration.
    fn price(&self, st: &State, op: &Op, stream_device: usize) -> Result<u64> {
        let extent = |pitch: usize, width: usize, height: usize| {
            pitch
                .checked_mul(height - 1)
                .and_then(|x| x.checked_add(width))
                .ok_or_else(|| CoreError::InvalidValue("copy extent overflows".into()))
        };
        let (spans, path, bytes) = match *op {
            Op::Copy {
                dst,
                dpitch,
                src,
                spitch,
                width,
                height,
                kind,
            } => {
                let (dst_dev, src_dev) = match kind {
                    CopyKind::HostToHost | CopyKind::Default => (false, false),
                    CopyKind::HostToDevice => (true, false),
                    CopyKind::DeviceToHost => (false, true),
                    CopyKind::DeviceToDevice => (true, true),
                };
                let d = Self::check_side(st, dst, extent(dpitch, width, height)?, dst_dev, true)?;
                let s = Self::check_side(st, src, extent(spitch, width, height)?, src_dev, false)?;
                let path = match (d.is_some(), s.is_some()) {
                    (false, false) => CopyPath::HostToHost,
                    (true, true) => CopyPath::DeviceToDevice,
                    _ => CopyPath::HostLink,
                };
                (vec![d, s], path, (width * height) as u64)
            }
            Op::Memset { dst, n, .. } => (
                vec![Self::check_side(st, dst, n, true, true)?],
                CopyPath::Memset,
                n as u64,
            ),
            Op::Fill {
                dst, elem, count, ..
            } => {
                let n = elem * count;
                (
                    vec![Self::check_side(st, dst, n, true, true)?],
                    CopyPath::Memset,
                    n as u64,
                )
            }
            Op::Kernel { .. } => return Ok(0),
            Op::Host { duration_ns, .. } => return Ok(duration_ns),
        };
        if let [Some(d), Some(s)] = spans[..] {
            if d.physical != s.physical {
                let (src, dst) = (&self.devices[s.physical], &self.devices[d.physical]);
                return Ok(timing::peer_copy_ns(src, dst, d.physical, bytes));
            }
        }
        let dev = spans
            .iter()
            .flatten()
            .next()
            .map_or(stream_device, |r| r.physical);
        Ok(timing::copy_ns(&self.devices[dev], path, bytes))
    }

    /// The stream whose host work is running on the calling thread, as it was submitted (for
    /// a graph replay, the stream the graph was launched on); None outside host work.
    pub fn host_stream() -> Option<u64> {
        HOST_STREAM.get()
    }

    /// Submits one operation to a stream: recorded if the stream is capturing, otherwise
    /// checked, placed on the stream's virtual timeline and run now (after the lock is
    /// released, so host functions may call back into the core).
    fn submit(&self, stream: u64, op: Op) -> Result<()> {
        {
            let mut st = self.lock();
            let key = self.resolve(&mut st, stream)?;
            let stream_device = st.timeline.stream_info(key).device;
            let ns = self.price(&st, &op, stream_device)?;
            if let Op::Kernel { host_fun } = op {
                if self.config.strict_kernels {
                    return Err(CoreError::KernelRefused(st.kernels.name_of(host_fun)));
                }
            }
            if st.graphs.record(key, &op) {
                return Ok(());
            }
            if let Op::Kernel { host_fun } = op {
                st.kernels.launch(host_fun);
            }
            let wall = self.pace_now();
            st.timeline.schedule(key, ns, wall);
        }
        // SAFETY (all arms): device ranges were checked to lie inside live allocations; host
        // ranges are the caller's promise, as with the real runtime; host functions are the
        // program's, called with the argument it gave.
        match op {
            Op::Copy {
                dst,
                dpitch,
                src,
                spitch,
                width,
                height,
                ..
            } => {
                for row in 0..height {
                    // SAFETY: device rows lie inside live allocations (checked when priced),
                    // host rows are the caller's promise; `copy` allows overlap.
                    unsafe {
                        std::ptr::copy(
                            (src + row * spitch) as *const u8,
                            (dst + row * dpitch) as *mut u8,
                            width,
                        )
                    }
                }
            }
            // SAFETY: the `n` bytes at `dst` were checked to lie inside a live allocation.
            Op::Memset { dst, value, n } => unsafe {
                std::ptr::write_bytes(dst as *mut u8, value, n)
            },
            Op::Fill {
                dst,
                pattern,
                elem,
                count,
            } => {
                let bytes = &pattern.to_le_bytes()[..elem];
                // SAFETY: the `elem * count` bytes at `dst` were checked to lie inside a live
                // allocation; the first element is written, then doubled in place.
                unsafe {
                    let p = dst as *mut u8;
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, elem);
                    let total = elem * count;
                    let mut done = elem;
                    while done < total {
                        let n = done.min(total - done);
                        std::ptr::copy_nonoverlapping(p, p.add(done), n);
                        done += n;
                    }
                }
            }
            Op::Kernel { .. } => {}
            Op::Host { func, data, .. } => {
                if let Some(f) = func {
                    let outer = HOST_STREAM.replace(Some(stream));
                    // SAFETY: the program's host function, called with the argument it gave.
                    unsafe { f(data as *mut std::ffi::c_void) }
                    HOST_STREAM.set(outer);
                }
                // Dropping `op` here releases owned data that no graph holds.
            }
        }
        Ok(())
    }

    /// `cudaMemcpyAsync`: copies `n` bytes in stream order.
    pub fn memcpy(
        &self,
        dst: usize,
        src: usize,
        n: usize,
        kind: CopyKind,
        stream: u64,
    ) -> Result<()> {
        self.memcpy_2d(dst, n, src, n, n, 1, kind, stream)
    }

    /// `cudaMemcpy2DAsync`: `height` rows of `width` bytes between pitched buffers.
    #[allow(clippy::too_many_arguments)]
    pub fn memcpy_2d(
        &self,
        dst: usize,
        dpitch: usize,
        src: usize,
        spitch: usize,
        width: usize,
        height: usize,
        kind: CopyKind,
        stream: u64,
    ) -> Result<()> {
        if width == 0 || height == 0 {
            return Ok(());
        }
        if width > dpitch || width > spitch {
            return Err(CoreError::InvalidValue(format!(
                "2D copy width {width} exceeds a pitch ({dpitch}, {spitch})"
            )));
        }
        self.submit(
            stream,
            Op::Copy {
                dst,
                dpitch,
                src,
                spitch,
                width,
                height,
                kind,
            },
        )
    }

    /// `cudaMemsetAsync`: fills `n` bytes of device memory with `value`.
    pub fn memset(&self, dst: usize, value: u8, n: usize, stream: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.submit(stream, Op::Memset { dst, value, n })
    }

    /// `cuMemsetD16/D32Async`, `cuStreamWriteValue32/64`: fills `count` elements of `elem`
    /// bytes (1, 2, 4 or 8; `dst` aligned to it) with the low bytes of `pattern`.
    pub fn memset_pattern(
        &self,
        dst: usize,
        pattern: u64,
        elem: usize,
        count: usize,
        stream: u64,
    ) -> Result<()> {
        if ![1, 2, 4, 8].contains(&elem) {
            return Err(CoreError::InvalidValue(format!(
                "fill element of {elem} bytes (1, 2, 4 or 8)"
            )));
        }
        if dst % elem != 0 {
            return Err(CoreError::InvalidValue(format!(
                "fill destination {dst:#x} is not aligned to its {elem}-byte elements"
            )));
        }
        if count == 0 {
            return Ok(());
        }
        if elem.checked_mul(count).is_none() {
            return Err(CoreError::InvalidValue("fill size overflows".into()));
        }
        self.submit(
            stream,
            Op::Fill {
                dst,
                pattern,
                elem,
                count,
            },
        )
    }

    /// Host work of the program (`cudaLaunchHostFunc`, the vtable's `enqueue`): `func(data)`
    /// runs in stream order after `duration_ns` of virtual time; captured and replayed like
    /// any other work.
    pub fn enqueue_host(
        &self,
        stream: u64,
        duration_ns: u64,
        func: Option<CWorkFn>,
        data: usize,
    ) -> Result<()> {
        self.submit(
            stream,
            Op::Host {
                func,
                data,
                duration_ns,
                owned: None,
            },
        )
    }

    /// Like [`Core::enqueue_host`], but the core owns `data`: `release(data)` is called once
    /// when no operation needs it any more — right after `func` ran (or the enqueue failed),
    /// or, if the stream was capturing, when the graph and every executable graph made from
    /// it are destroyed. `release` may run while the core's lock is held, so it must not call
    /// into the core.
    ///
    /// # Safety
    /// `release(data)` must be safe to call once, from any thread, at any later time, and
    /// `func(data)` must be safe to call until then.
    pub unsafe fn enqueue_host_owned(
        &self,
        stream: u64,
        duration_ns: u64,
        func: Option<CWorkFn>,
        data: usize,
        release: CWorkFn,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        let owned = unsafe { graph::OwnedData::new(data, release) };
        self.submit(
            stream,
            Op::Host {
                func,
                data,
                duration_ns,
                owned: Some(owned),
            },
        )
    }

    // ---- streams and events ------------------------------------------------------------

    /// Creates a stream on the current device.
    pub fn stream_create(&self, flags: u32, priority: i32) -> Result<u64> {
        let (_, phys) = self.current_checked()?;
        Ok(self.lock().timeline.create_stream(phys, flags, priority))
    }

    /// Destroys a stream.
    pub fn stream_destroy(&self, stream: u64) -> Result<()> {
        self.lock().timeline.destroy_stream(stream)
    }

    fn resolve(&self, st: &mut State, stream: u64) -> Result<u64> {
        let (_, phys) = self.current_checked()?;
        st.timeline.resolve(stream, phys)
    }

    /// Flags, priority and device ordinal of a stream.
    pub fn stream_info(&self, stream: u64) -> Result<timeline::StreamInfo> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        let mut info = st.timeline.stream_info(key);
        info.device = self.ordinal_of(info.device).unwrap_or(-1) as usize;
        Ok(info)
    }

    /// Virtual time at which a stream's enqueued work completes (ns since the core started).
    pub fn stream_clock(&self, stream: u64) -> Result<u64> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        Ok(st.timeline.stream_clock(key))
    }

    /// Enqueues work of a given virtual duration (the NCCL shim's entry point): `work` runs
    /// now, on the calling thread, after the lock is released. Returns the (start, end)
    /// virtual times.
    pub fn enqueue(&self, stream: u64, duration_ns: u64, work: Work<'_>) -> Result<(u64, u64)> {
        let times = {
            let mut st = self.lock();
            let key = self.resolve(&mut st, stream)?;
            if st.graphs.is_capturing(key) {
                return Err(CoreError::CaptureViolation(
                    "Rust closures cannot be captured into a graph (use enqueue_host)".into(),
                ));
            }
            let wall = self.pace_now();
            st.timeline.schedule(key, duration_ns, wall)
        };
        work();
        Ok(times)
    }

    /// Refuses synchronising with a capturing stream (CUDA invalidates the capture).
    fn not_capturing(&self, st: &State, key: u64, what: &str) -> Result<()> {
        if st.graphs.is_capturing(key) {
            return Err(CoreError::CaptureViolation(format!(
                "{what} on stream {key:#x} while it is capturing"
            )));
        }
        Ok(())
    }

    /// The virtual completion time of a stream that is not capturing; with `host_waits` the
    /// host clock moves to it (the host synchronised with the stream).
    fn settled_clock(&self, stream: u64, what: &str, host_waits: bool) -> Result<u64> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        self.not_capturing(&st, key, what)?;
        let clock = st.timeline.stream_clock(key);
        if host_waits {
            st.timeline.host_waited(clock);
        }
        Ok(clock)
    }

    /// `cudaStreamQuery`: `Err(NotReady)` while pacing holds the stream's work back.
    pub fn stream_query(&self, stream: u64) -> Result<()> {
        let clock = self.settled_clock(stream, "query", false)?;
        if self.config.pace && self.wall_ns() < clock {
            return Err(CoreError::NotReady);
        }
        Ok(())
    }

    /// `cudaStreamSynchronize`.
    pub fn stream_synchronize(&self, stream: u64) -> Result<()> {
        let clock = self.settled_clock(stream, "synchronize", true)?;
        self.pace_until(clock);
        Ok(())
    }

    /// `cudaDeviceSynchronize` for the current device.
    pub fn device_synchronize(&self) -> Result<()> {
        let (_, phys) = self.current_checked()?;
        let clock = {
            let mut st = self.lock();
            if st.graphs.any_capturing() {
                return Err(CoreError::CaptureViolation(
                    "device synchronize while a stream is capturing".into(),
                ));
            }
            let c = st.timeline.device_clock(phys);
            st.timeline.host_waited(c);
            c
        };
        self.pace_until(clock);
        Ok(())
    }

    /// `cudaStreamWaitEvent`.
    pub fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        if st.graphs.event_waited(key, event)? {
            return Ok(());
        }
        st.timeline.wait_event(key, event)
    }

    /// `cudaEventCreateWithFlags`.
    pub fn event_create(&self, flags: u32) -> u64 {
        self.lock().timeline.create_event(flags)
    }

    /// `cudaEventDestroy`.
    pub fn event_destroy(&self, event: u64) -> Result<()> {
        let mut st = self.lock();
        st.graphs.forget_event(event);
        st.timeline.destroy_event(event)?;
        if let Some((phys, slot, _)) = st.event_exports.remove(&event) {
            if let Some(a) = st.arenas[phys].as_mut() {
                a.retract_event(slot);
            }
        }
        Ok(())
    }

    /// `cudaEventRecord`.
    pub fn event_record(&self, event: u64, stream: u64) -> Result<()> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        st.timeline.event_flags(event)?;
        if st.graphs.event_recorded(event, key) {
            return Ok(());
        }
        let wall = self.pace_now();
        st.timeline.record(event, key, wall)
    }

    /// `cudaEventQuery`.
    pub fn event_query(&self, event: u64) -> Result<()> {
        let t = self.lock().timeline.event_time(event)?;
        match t {
            Some(t) if self.config.pace && self.wall_ns() < t => Err(CoreError::NotReady),
            _ => Ok(()),
        }
    }

    /// `cudaEventSynchronize`.
    pub fn event_synchronize(&self, event: u64) -> Result<()> {
        let t = {
            let mut st = self.lock();
            let t = st.timeline.event_time(event)?.unwrap_or(0);
            st.timeline.host_waited(t);
            t
        };
        self.pace_until(t);
        Ok(())
    }

    /// `cudaEventElapsedTime` in virtual milliseconds.
    pub fn event_elapsed_ms(&self, start: u64, end: u64) -> Result<f32> {
        self.lock().timeline.elapsed_ms(start, end)
    }

    // ---- stream capture and graphs -----------------------------------------------------

    /// `cudaStreamBeginCapture`. The legacy default stream cannot capture.
    pub fn begin_capture(&self, stream: u64) -> Result<()> {
        if stream == 0 || stream == timeline::STREAM_LEGACY {
            return Err(CoreError::CaptureViolation(
                "the legacy default stream cannot capture".into(),
            ));
        }
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        st.graphs.begin(key)
    }

    /// `cudaStreamEndCapture`: the graph of the capture `stream` began.
    pub fn end_capture(&self, stream: u64) -> Result<u64> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        st.graphs.end(key)
    }

    /// `cudaStreamGetCaptureInfo`: (status, capture id, graph being captured into).
    pub fn capture_info(&self, stream: u64) -> Result<(graph::CaptureStatus, u64, u64)> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        Ok(st.graphs.info(key))
    }

    /// `cudaGraphCreate`: an empty graph.
    pub fn graph_create(&self) -> u64 {
        self.lock().graphs.create_graph()
    }

    /// `cudaGraphDestroy`.
    pub fn graph_destroy(&self, graph: u64) -> Result<()> {
        self.lock().graphs.destroy_graph(graph)
    }

    /// The operations of a graph, in order (`cudaGraphGetNodes`, `cudaGraphDebugDotPrint`).
    pub fn graph_ops(&self, graph: u64) -> Result<Vec<Op>> {
        self.lock().graphs.graph_ops(graph)
    }

    /// `cudaGraphInstantiate`.
    pub fn graph_instantiate(&self, graph: u64) -> Result<u64> {
        self.lock().graphs.instantiate(graph)
    }

    /// `cudaGraphExecDestroy`.
    pub fn graph_exec_destroy(&self, exec: u64) -> Result<()> {
        self.lock().graphs.destroy_exec(exec)
    }

    /// `cudaGraphLaunch`: replays the graph's operations in order on `stream` (recorded
    /// again if `stream` is itself capturing).
    pub fn graph_launch(&self, exec: u64, stream: u64) -> Result<()> {
        let ops = self.lock().graphs.exec_ops(exec)?;
        for op in ops {
            self.submit(stream, op)?;
        }
        Ok(())
    }

    /// `cudaDeviceReset`: waits for the device, then frees every allocation on it (the
    /// arena and its memfd go away, its addresses stay reserved so stale pointers are errors;
    /// mappings other processes opened stay valid until they
    /// close them).
    pub fn device_reset(&self, ordinal: i32) -> Result<()> {
        let phys = self.physical(ordinal)?;
        let mut st = self.lock();
        if st.graphs.any_capturing() {
            return Err(CoreError::CaptureViolation(
                "device reset while a stream is capturing".into(),
            ));
        }
        let clock = st.timeline.device_clock(phys);
        st.timeline.host_waited(clock);
        if let Some(a) = st.arenas[phys].take() {
            let (start, len) = a.retire();
            st.retired
                .add(start, len, "memory of a device that cudaDeviceReset freed");
        }
        // Event exports lived in that arena's header: their handles are stale now.
        st.event_exports.retain(|_, (p, _, _)| *p != phys);
        Ok(())
    }

    // ---- IPC ---------------------------------------------------------------------------

    /// `cudaIpcGetMemHandle`: the handle of the allocation containing `ptr`.
    pub fn ipc_get_mem_handle(&self, ptr: usize) -> Result<[u8; HANDLE_BYTES]> {
        let mut st = self.lock();
        for a in st.arenas.iter_mut().flatten() {
            if !a.contains(ptr) {
                continue;
            }
            let alloc = a.allocation_at(ptr).ok_or(CoreError::InvalidPointer {
                ptr,
                len: 0,
                why: "not inside a live device allocation",
            })?;
            let e = a.export(alloc.offset)?;
            let h = MemHandle {
                owner_pid: std::process::id(),
                arena_fd: a.raw_fd() as u32,
                arena_id: a.id(),
                slot: e.slot.expect("export assigns a slot"),
                offset: e.offset,
                size: e.size,
                device_address: (a.data_base() + e.offset as usize) as u64,
                serial: e.serial,
                device: a.device(),
            };
            return Ok(h.encode());
        }
        Err(CoreError::InvalidPointer {
            ptr,
            len: 0,
            why: "not device memory allocated by this process",
        })
    }

    /// `cudaIpcOpenMemHandle`: maps another process's allocation (or returns the original
    /// pointer for a handle of this process).
    pub fn ipc_open_mem_handle(&self, bytes: &[u8; HANDLE_BYTES]) -> Result<usize> {
        let h = MemHandle::decode(bytes)?;
        let mut st = self.lock();
        if h.owner_pid == std::process::id() {
            let a = st
                .arenas
                .iter()
                .flatten()
                .find(|a| a.id() == h.arena_id)
                .ok_or_else(|| CoreError::InvalidIpcHandle(format!("no arena {}", h.arena_id)))?;
            let ok = a.allocation_at(h.device_address as usize).is_some_and(|x| {
                x.serial == h.serial
                    && x.offset == h.offset
                    && x.size == h.size
                    && a.data_base() + x.offset as usize == h.device_address as usize
            });
            return if ok {
                Ok(h.device_address as usize)
            } else {
                Err(CoreError::InvalidIpcHandle(format!(
                    "allocation {} of this process is not live (freed, stale or forged)",
                    h.serial
                )))
            };
        }
        let key = (h.owner_pid, h.arena_id, h.serial);
        if let Some(imp) = st.imports.values_mut().find(|i| i.key == key) {
            imp.refs += 1;
            return Ok(imp.mapping.ptr);
        }
        let mapping = ForeignMapping::open(&h)?;
        let ptr = mapping.ptr;
        st.imports.insert(
            ptr,
            Import {
                mapping,
                device: h.device,
                key,
                refs: 1,
            },
        );
        Ok(ptr)
    }

    /// `cudaIpcCloseMemHandle`.
    pub fn ipc_close_mem_handle(&self, ptr: usize) -> Result<()> {
        let mut st = self.lock();
        if let Some(imp) = st.imports.get_mut(&ptr) {
            imp.refs -= 1;
            if imp.refs == 0 {
                let imp = st.imports.remove(&ptr).expect("present");
                let (start, len) = imp.mapping.retire();
                st.retired.add(
                    start,
                    len,
                    "an IPC mapping that cudaIpcCloseMemHandle closed",
                );
            }
            return Ok(());
        }
        if st
            .arenas
            .iter()
            .flatten()
            .any(|a| a.allocation_at(ptr).is_some())
        {
            // Opened in its own process: the original pointer was handed out, nothing to undo.
            return Ok(());
        }
        Err(CoreError::InvalidPointer {
            ptr,
            len: 0,
            why: "not a pointer from cudaIpcOpenMemHandle",
        })
    }

    /// `cudaIpcGetEventHandle`: publishes the event in an export slot of the current
    /// device's arena (once per event) and returns a handle naming that slot.
    pub fn ipc_get_event_handle(&self, event: u64) -> Result<[u8; HANDLE_BYTES]> {
        let (_, phys) = self.current_checked()?;
        let mut st = self.lock();
        st.timeline.event_flags(event)?;
        let (phys, slot, serial) = match st.event_exports.get(&event) {
            Some(&e) => e,
            None => {
                st.next_serial += 1;
                let serial = st.next_serial;
                let slot = self.arena(&mut st, phys)?.export_event(event, serial)?;
                st.event_exports.insert(event, (phys, slot, serial));
                (phys, slot, serial)
            }
        };
        let a = st.arenas[phys]
            .as_ref()
            .expect("invariant: exported events live in an existing arena");
        Ok(EventHandle {
            owner_pid: std::process::id(),
            event,
            device: phys as u32,
            arena_fd: a.raw_fd() as u32,
            arena_id: a.id(),
            slot,
            serial,
        }
        .encode())
    }

    /// `cudaIpcOpenEventHandle`. The handle is checked against the owner's export slot like a
    /// memory handle (forged, corrupt and stale handles are `InvalidValue`). In the owner
    /// process this is the same event; elsewhere the owner's virtual clock is not visible, so
    /// the event opens as already complete.
    pub fn ipc_open_event_handle(&self, bytes: &[u8; HANDLE_BYTES]) -> Result<u64> {
        let invalid = |e: CoreError| match e {
            CoreError::InvalidIpcHandle(m) | CoreError::IpcMapFailed(m) => {
                CoreError::InvalidValue(format!("IPC event handle: {m}"))
            }
            e => e,
        };
        let h = EventHandle::decode(bytes).map_err(invalid)?;
        if h.owner_pid == std::process::id() {
            let st = self.lock();
            let ok = st
                .event_exports
                .get(&h.event)
                .is_some_and(|&(p, slot, serial)| {
                    st.arenas[p].as_ref().is_some_and(|a| a.id() == h.arena_id)
                        && p as u32 == h.device
                        && slot == h.slot
                        && serial == h.serial
                });
            return if ok {
                Ok(h.event)
            } else {
                Err(CoreError::InvalidValue(format!(
                    "IPC event handle: event {:#x} is not exported by this process (destroyed, stale or forged)",
                    h.event
                )))
            };
        }
        h.check_foreign().map_err(invalid)?;
        let mut st = self.lock();
        let now = st.timeline.host_clock();
        Ok(st
            .timeline
            .create_completed_event(timeline::EVENT_DISABLE_TIMING, now))
    }

    // ---- kernels -----------------------------------------------------------------------

    /// `__cudaRegisterFunction`.
    pub fn register_function(&self, host_fun: usize, name: &str) {
        self.lock().kernels.register(host_fun, name);
    }

    /// A kernel launch: counted by name, or refused with `NCCLSIM_STRICT_KERNELS=1`.
    pub fn launch_kernel(&self, host_fun: usize, stream: u64) -> Result<()> {
        self.submit(stream, Op::Kernel { host_fun })
    }

    /// Kernel launch counts by name.
    pub fn kernel_launch_counts(&self) -> BTreeMap<String, u64> {
        self.lock().kernels.launch_counts().clone()
    }

    /// The end-of-run report (`NCCLSIM_REPORT`); `calls` are the API call counts the caller
    /// kept.
    pub fn report(&self, calls: BTreeMap<String, u64>) -> Report {
        let stats = self.memory_stats();
        Report {
            devices: self
                .visible
                .iter()
                .zip(stats)
                .enumerate()
                .map(|(ordinal, (&p, m))| DeviceReport {
                    ordinal,
                    pci_bus_id: self.devices[p].pci.to_string(),
                    name: self.devices[p].name.clone(),
                    current_bytes: m.current,
                    peak_bytes: m.peak,
                    capacity_bytes: self.devices[p].memory_bytes,
                })
                .collect(),
            calls,
            kernel_launches: self.kernel_launch_counts(),
            streams: self.lock().timeline.stream_count(),
        }
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
mod tests {
    use super::*;

    fn core_with(visible: &[usize], cap: u64) -> Core {
        let mut devs = device::dgx_a100();
        for d in &mut devs {
            d.memory_bytes = cap;
        }
        Core::new(devs, visible.to_vec(), Config::default())
    }

    #[test]
    fn malloc_copy_memset_round_trip() {
        let core = core_with(&[0, 1], 1 << 30);
        let d = core.malloc(0, 1000).unwrap();
        let src: Vec<u8> = (0..1000).map(|i| i as u8).collect();
        let mut back = vec![0u8; 1000];
        core.memcpy(d, src.as_ptr() as usize, 1000, CopyKind::HostToDevice, 0)
            .unwrap();
        core.memcpy(back.as_mut_ptr() as usize, d, 1000, CopyKind::Default, 0)
            .unwrap();
        assert_eq!(src, back);
        core.memset(d + 10, 0xee, 20, 0).unwrap();
        core.memcpy(
            back.as_mut_ptr() as usize,
            d,
            1000,
            CopyKind::DeviceToHost,
            0,
        )
        .unwrap();
        assert!(back[10..30].iter().all(|&b| b == 0xee));
        assert_eq!(back[30], 30);
        let info = core.pointer_info(d + 5);
        assert_eq!(
            (info.kind, info.device, info.base),
            (MemoryKind::Device, 0, d)
        );
        core.free(d).unwrap();
        assert!(core.free(d).is_err());
        assert_eq!(core.pointer_info(d).kind, MemoryKind::Unregistered);
    }

    #[test]
    fn copies_past_an_allocation_are_rejected() {
        let core = core_with(&[0], 1 << 30);
        let d = core.malloc(0, 4096).unwrap();
        let buf = vec![0u8; 8192];
        let e = core
            .memcpy(d, buf.as_ptr() as usize, 8192, CopyKind::HostToDevice, 0)
            .unwrap_err();
        assert_eq!(e.status(), Status::InvalidPointer);
        let e = core.memset(buf.as_ptr() as usize, 0, 10, 0).unwrap_err();
        assert_eq!(e.status(), Status::InvalidPointer);
        assert!(core
            .memcpy(0, buf.as_ptr() as usize, 1, CopyKind::HostToHost, 0)
            .is_err());
    }

    #[test]
    fn accounting_and_out_of_memory() {
        let core = core_with(&[0, 1], 1 << 20);
        assert_eq!(core.mem_info(0).unwrap(), (1 << 20, 1 << 20));
        let a = core.malloc(0, 600 << 10).unwrap();
        assert_eq!(core.mem_info(0).unwrap().0, (1 << 20) - (600 << 10));
        let e = core.malloc(0, 600 << 10).unwrap_err();
        assert!(matches!(e, CoreError::OutOfMemory { device: 0, .. }), "{e}");
        // Device 1 has its own capacity.
        core.malloc(1, 600 << 10).unwrap();
        core.free(a).unwrap();
        core.malloc(0, 600 << 10).unwrap();
        assert_eq!(core.memory_stats()[0].peak, 600 << 10);
        assert!(core.malloc(0, usize::MAX).is_err());
        assert!(matches!(
            core.malloc(2, 1),
            Err(CoreError::InvalidDevice { ordinal: 2, .. })
        ));
    }

    #[test]
    fn visible_devices_renumber_ordinals() {
        let core = core_with(&[5, 2], 1 << 30);
        assert_eq!(core.device_count(), 2);
        assert_eq!(core.device(0).unwrap().pci.bus, 0x90);
        assert_eq!(core.device(1).unwrap().pci.bus, 0x47);
        assert!(core.set_device(2).is_err());
        core.set_device(1).unwrap();
        assert_eq!(core.current_device(), 1);
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(core.current_device(), 0, "current device is per thread"));
        });
        let p = core.malloc(1, 10).unwrap();
        assert_eq!(core.pointer_info(p).device, 1);
    }

    #[test]
    fn host_memory() {
        let core = core_with(&[0], 1 << 30);
        let h = core.host_alloc(100).unwrap();
        assert_eq!(core.pointer_info(h + 99).kind, MemoryKind::Host);
        core.host_free(h).unwrap();
        assert!(core.host_free(h).is_err());
        let v = [0u8; 64];
        core.host_register(v.as_ptr() as usize, 64).unwrap();
        assert_eq!(
            core.pointer_info(v.as_ptr() as usize).kind,
            MemoryKind::Host
        );
        assert!(core.host_free(v.as_ptr() as usize).is_err());
        core.host_unregister(v.as_ptr() as usize).unwrap();
        assert_eq!(
            core.pointer_info(v.as_ptr() as usize).kind,
            MemoryKind::Unregistered
        );
    }

    #[test]
    fn ipc_in_the_same_process_returns_the_original_pointer() {
        let core = core_with(&[0], 1 << 30);
        let d = core.malloc(0, 5000).unwrap();
        let h = core.ipc_get_mem_handle(d + 100).unwrap();
        assert_eq!(core.ipc_open_mem_handle(&h).unwrap(), d);
        core.ipc_close_mem_handle(d).unwrap();
        core.free(d).unwrap();
        assert_eq!(
            core.ipc_open_mem_handle(&h).unwrap_err().status(),
            Status::InvalidIpcHandle
        );
        let mut forged = h;
        forged[20] ^= 1;
        assert!(core.ipc_open_mem_handle(&forged).is_err());
    }

    #[test]
    fn streams_events_and_elapsed_virtual_time() {
        let core = core_with(&[0], 1 << 30);
        let s = core
            .stream_create(timeline::STREAM_NON_BLOCKING, 0)
            .unwrap();
        let (e0, e1) = (core.event_create(0), core.event_create(0));
        core.event_record(e0, s).unwrap();
        core.enqueue(s, 3_000_000, Box::new(|| {})).unwrap();
        core.event_record(e1, s).unwrap();
        assert_eq!(core.event_elapsed_ms(e0, e1).unwrap(), 3.0);
        core.stream_query(s).unwrap();
        core.stream_synchronize(s).unwrap();
        let d = core.malloc(0, 1 << 20).unwrap();
        let host = vec![1u8; 1 << 20];
        core.event_record(e0, s).unwrap();
        core.memcpy(
            d,
            host.as_ptr() as usize,
            1 << 20,
            CopyKind::HostToDevice,
            s,
        )
        .unwrap();
        core.event_record(e1, s).unwrap();
        let ms = core.event_elapsed_ms(e0, e1).unwrap();
        let want = timing::copy_ns(core.device(0).unwrap(), CopyPath::HostLink, 1 << 20);
        assert!((ms - want as f32 / 1e6).abs() < 1e-6, "{ms} ms");
        core.stream_destroy(s).unwrap();
        assert!(core.event_record(e0, s).is_err());
    }

    #[test]
    fn pacing_holds_queries_back() {
        let mut devs = device::dgx_a100();
        devs.truncate(1);
        let core = Core::new(
            devs,
            vec![0],
            Config {
                pace: true,
                ..Config::default()
            },
        );
        let s = core.stream_create(0, 0).unwrap();
        core.enqueue(s, 50_000_000, Box::new(|| {})).unwrap();
        assert_eq!(core.stream_query(s).unwrap_err(), CoreError::NotReady);
        let t = Instant::now();
        core.stream_synchronize(s).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(30));
        core.stream_query(s).unwrap();
    }

    #[test]
    fn capture_records_and_launch_replays() {
        let core = core_with(&[0], 1 << 30);
        let s = core
            .stream_create(timeline::STREAM_NON_BLOCKING, 0)
            .unwrap();
        let d = core.malloc(0, 64).unwrap();
        let src = [7u8; 64];
        core.register_function(0x42, "step");
        assert!(core.begin_capture(0).is_err(), "legacy stream");
        core.begin_capture(s).unwrap();
        core.memcpy(d, src.as_ptr() as usize, 64, CopyKind::HostToDevice, s)
            .unwrap();
        core.launch_kernel(0x42, s).unwrap();
        assert_eq!(
            core.stream_synchronize(s).unwrap_err().status(),
            Status::CaptureViolation
        );
        assert!(core.enqueue(s, 1, Box::new(|| {})).is_err());
        let g = core.end_capture(s).unwrap();
        let mut back = [0u8; 64];
        core.memcpy(back.as_mut_ptr() as usize, d, 64, CopyKind::DeviceToHost, 0)
            .unwrap();
        assert_eq!(back, [0; 64], "captured work does not run");
        assert!(core.kernel_launch_counts().is_empty());
        assert_eq!(core.graph_ops(g).unwrap().len(), 2);
        let e = core.graph_instantiate(g).unwrap();
        core.graph_launch(e, s).unwrap();
        core.graph_launch(e, s).unwrap();
        core.memcpy(back.as_mut_ptr() as usize, d, 64, CopyKind::DeviceToHost, 0)
            .unwrap();
        assert_eq!(back, [7; 64]);
        assert_eq!(core.kernel_launch_counts()["step"], 2);
    }

    #[test]
    fn host_work_sees_the_stream_it_runs_on_replays_the_launch_stream() {
        use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
        static SEEN: AtomicU64 = AtomicU64::new(u64::MAX);
        unsafe extern "C" fn look(_: *mut std::ffi::c_void) {
            SEEN.store(Core::host_stream().unwrap_or(u64::MAX - 1), SeqCst);
        }
        let core = core_with(&[0], 1 << 30);
        let flags = timeline::STREAM_NON_BLOCKING;
        let (a, b) = (
            core.stream_create(flags, 0).unwrap(),
            core.stream_create(flags, 0).unwrap(),
        );
        assert_eq!(Core::host_stream(), None);
        core.enqueue_host(a, 0, Some(look), 0).unwrap();
        assert_eq!(SEEN.load(SeqCst), a);
        core.begin_capture(a).unwrap();
        core.enqueue_host(a, 0, Some(look), 0).unwrap();
        let g = core.end_capture(a).unwrap();
        let e = core.graph_instantiate(g).unwrap();
        core.graph_launch(e, b).unwrap();
        assert_eq!(SEEN.load(SeqCst), b, "a replay runs on the launch stream");
        assert_eq!(Core::host_stream(), None);
    }

    #[test]
    fn owned_host_data_lives_as_long_as_its_graphs() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        static RELEASES: AtomicUsize = AtomicUsize::new(0);
        unsafe extern "C" fn run(_: *mut std::ffi::c_void) {
            RUNS.fetch_add(1, SeqCst);
        }
        unsafe extern "C" fn release(_: *mut std::ffi::c_void) {
            RELEASES.fetch_add(1, SeqCst);
        }
        let core = core_with(&[0], 1 << 30);
        let s = core
            .stream_create(timeline::STREAM_NON_BLOCKING, 0)
            .unwrap();
        // SAFETY: the functions only count.
        unsafe { core.enqueue_host_owned(s, 0, Some(run), 1, release) }.unwrap();
        assert_eq!((RUNS.load(SeqCst), RELEASES.load(SeqCst)), (1, 1));
        core.begin_capture(s).unwrap();
        // SAFETY: as above.
        unsafe { core.enqueue_host_owned(s, 0, Some(run), 2, release) }.unwrap();
        let g = core.end_capture(s).unwrap();
        let e = core.graph_instantiate(g).unwrap();
        core.graph_destroy(g).unwrap();
        core.graph_launch(e, s).unwrap();
        core.graph_launch(e, s).unwrap();
        assert_eq!((RUNS.load(SeqCst), RELEASES.load(SeqCst)), (3, 1));
        core.graph_exec_destroy(e).unwrap();
        assert_eq!(RELEASES.load(SeqCst), 2, "released with the last graph");
        // A failed enqueue releases at once.
        // SAFETY: as above.
        assert!(unsafe { core.enqueue_host_owned(0xbad, 0, Some(run), 3, release) }.is_err());
        assert_eq!((RUNS.load(SeqCst), RELEASES.load(SeqCst)), (3, 3));
    }

    #[test]
    fn freed_memory_is_cached_up_to_the_limit() {
        let mut devs = device::dgx_a100();
        devs.truncate(2);
        let config = Config {
            cache_limit: 3 << 20,
            ..Config::default()
        };
        let core = Core::new(devs, vec![0, 1], config);
        let a = core.malloc(0, 2 << 20).unwrap();
        core.free(a).unwrap();
        assert_eq!(core.cached_bytes(0).unwrap(), 2 << 20);
        assert_eq!(core.mem_info(0).unwrap().0, 40 << 30, "logically free");
        let b = core.malloc(0, 2 << 20).unwrap();
        assert_eq!((b, core.cached_bytes(0).unwrap()), (a, 0), "reused");
        let c = core.malloc(1, 2 << 20).unwrap();
        core.free(b).unwrap();
        core.free(c).unwrap(); // 4 MiB cached over both devices > 3 MiB: trimmed
        assert_eq!(
            core.cached_bytes(0).unwrap() + core.cached_bytes(1).unwrap(),
            0
        );
        let d = core.malloc(0, 1 << 20).unwrap();
        core.free(d).unwrap();
        assert_eq!(core.trim(0).unwrap(), 1 << 20);
        assert_eq!(core.cached_bytes(0).unwrap(), 0);
        assert_eq!(parse_bytes("64K"), Some(64 << 10));
        assert_eq!(parse_bytes(" 8g"), Some(8 << 30));
        assert_eq!(parse_bytes("12"), Some(12));
        assert_eq!(parse_bytes("x"), None);
    }

    #[test]
    fn device_reset_frees_everything_on_the_device() {
        let core = core_with(&[0, 1], 1 << 30);
        let a = core.malloc(0, 1 << 20).unwrap();
        let b = core.malloc(1, 1 << 20).unwrap();
        core.device_reset(0).unwrap();
        assert_eq!(core.mem_info(0).unwrap(), (1 << 30, 1 << 30));
        assert!(core.free(a).is_err());
        let mut buf = [0u8; 8];
        let e = core
            .memcpy(buf.as_mut_ptr() as usize, a, 8, CopyKind::Default, 0)
            .unwrap_err();
        assert!(e.to_string().contains("cudaDeviceReset"), "{e}");
        core.free(b).unwrap();
        core.malloc(0, 10).unwrap();
    }

    #[test]
    fn kernels_counted_or_refused() {
        let core = core_with(&[0], 1 << 30);
        core.register_function(0x42, "fill");
        core.launch_kernel(0x42, 0).unwrap();
        core.launch_kernel(0x42, 0).unwrap();
        assert_eq!(core.kernel_launch_counts()["fill"], 2);
        let strict = Core::new(
            device::dgx_a100(),
            vec![0],
            Config {
                strict_kernels: true,
                ..Config::default()
            },
        );
        strict.register_function(0x42, "fill");
        assert_eq!(
            strict.launch_kernel(0x42, 0).unwrap_err(),
            CoreError::KernelRefused("fill".into())
        );
    }
}
