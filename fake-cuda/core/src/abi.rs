//! The C vtable through which front-ends reach the process's one [`crate::Core`].
//!
//! `libncclsim_cuda.so` exports [`CORE_SYMBOL`], a function returning a pointer to a
//! static [`CoreApiV1`]. Every entry returns a [`crate::Status`] code (0 = success) and writes
//! results through out-pointers; the message of the calling thread's last failure can be read
//! with `last_error_message`. Only C types cross this boundary, so front-ends built separately
//! (even by another compiler version) agree on it. Entries are only ever appended; `size` tells
//! a front-end which entries a core provides.

use std::ffi::{c_char, c_void};

/// Name of the exported function `extern "C" fn() -> *const CoreApiV1`.
pub const CORE_SYMBOL: &str = "ncclsim_cuda_core_v1";
/// File name of the core shared object.
pub const CORE_LIBRARY: &str = "libncclsim_cuda.so";
/// Version of [`CoreApiV1`] this crate defines.
pub const CORE_ABI_VERSION: u32 = 1;

/// A device description in C form.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CDeviceInfo {
    /// NUL-terminated name.
    pub name: [c_char; 256],
    /// UUID bytes.
    pub uuid: [u8; 16],
    /// PCI domain, bus, device, function.
    pub pci: [u32; 4],
    /// Compute capability major.
    pub sm_major: i32,
    /// Compute capability minor.
    pub sm_minor: i32,
    /// Memory in bytes.
    pub total_memory: u64,
    /// Multiprocessors.
    pub multiprocessor_count: i32,
    /// Boost clock in kHz.
    pub clock_khz: i32,
    /// Memory clock in kHz.
    pub memory_clock_khz: i32,
    /// Memory bus width in bits.
    pub memory_bus_width: i32,
    /// L2 cache bytes.
    pub l2_cache_bytes: i32,
    /// Shared memory per multiprocessor.
    pub shared_mem_per_multiprocessor: i32,
    /// Opt-in shared memory per block.
    pub shared_mem_per_block_optin: i32,
    /// Physical index of the device (before `CUDA_VISIBLE_DEVICES`).
    pub physical_index: i32,
}

impl Default for CDeviceInfo {
    /// All zeroes.
    fn default() -> Self {
        CDeviceInfo {
            name: [0; 256],
            uuid: [0; 16],
            pci: [0; 4],
            sm_major: 0,
            sm_minor: 0,
            total_memory: 0,
            multiprocessor_count: 0,
            clock_khz: 0,
            memory_clock_khz: 0,
            memory_bus_width: 0,
            l2_cache_bytes: 0,
            shared_mem_per_multiprocessor: 0,
            shared_mem_per_block_optin: 0,
            physical_index: 0,
        }
    }
}

/// Pointer attributes in C form (`kind` uses `cudaMemoryType` numbers).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CPointerInfo {
    /// 0 unregistered, 1 host, 2 device.
    pub kind: i32,
    /// Visible device ordinal or -1.
    pub device: i32,
    /// Start of the containing allocation.
    pub base: usize,
    /// Size of the containing allocation.
    pub size: usize,
}

/// [`CBufferExtent::kind`]: not device memory of this process.
pub const BUFFER_NONE: i32 = 0;
/// [`CBufferExtent::kind`]: a `cudaMalloc` allocation.
pub const BUFFER_ALLOCATION: i32 = 1;
/// [`CBufferExtent::kind`]: another process's allocation mapped through IPC.
pub const BUFFER_IMPORTED: i32 = 2;
/// [`CBufferExtent::kind`]: mappings made with `cuMemMap` in one reserved range.
pub const BUFFER_MAPPED: i32 = 3;

/// The device buffer a pointer points into, as the program made it (`Core::buffer_extent`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CBufferExtent {
    /// `BUFFER_*`.
    pub kind: i32,
    /// Visible device ordinal, or -1.
    pub device: i32,
    /// Start of the buffer.
    pub base: usize,
    /// End of the buffer (exclusive): of a `cudaMalloc` allocation, its start plus the size
    /// asked for.
    pub end: usize,
}

/// Where a device allocation lives, in C form: enough for another process of a communicator
/// to map the owner's whole arena memfd once (`/proc/<owner_pid>/fd/<fd>`) and find the
/// allocation in it.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CArenaLocation {
    /// Process that owns the arena.
    pub owner_pid: u32,
    /// Arena number within the owner (checked against the arena header).
    pub arena_id: u32,
    /// The owner's descriptor of the arena memfd.
    pub fd: i32,
    /// Physical device the arena backs.
    pub device: i32,
    /// Length of the memfd (header and data).
    pub file_len: u64,
    /// Offset of the queried pointer from the start of the memfd.
    pub offset: u64,
    /// Start of the containing allocation, as an offset from the start of the memfd.
    pub alloc_offset: u64,
    /// Size of the containing allocation.
    pub alloc_size: u64,
}

/// Stream properties in C form.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CStreamInfo {
    /// Visible device ordinal.
    pub device: i32,
    /// Creation flags.
    pub flags: u32,
    /// Priority.
    pub priority: i32,
}

/// Most NVLinks [`CDeviceTopology`] reports (NVML's `NVML_NVLINK_MAX_LINKS` is 18).
pub const MAX_NVLINKS: usize = 32;
/// Most PCI ancestors [`CDeviceTopology`] reports.
pub const MAX_PCI_ANCESTORS: usize = 8;

/// One NVLink in C form.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CNvLink {
    /// PCI domain, bus, device, function of the remote end.
    pub remote_pci: [u32; 4],
    /// 0 GPU, 1 NVSwitch, 2 CPU.
    pub peer_kind: i32,
    /// Physical index of the remote GPU, or -1.
    pub peer_gpu: i32,
}

/// Where a device sits, in C form (NVML's view).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CDeviceTopology {
    /// PCI device id (vendor 0x10de).
    pub pci_device_id: u32,
    /// Subsystem device << 16 | subsystem vendor.
    pub pci_subsystem_id: u32,
    /// NUMA node, -1 if unknown.
    pub numa_node: i32,
    /// Valid entries of `nvlinks`.
    pub nvlink_count: u32,
    /// NVLinks in link-index order.
    pub nvlinks: [CNvLink; MAX_NVLINKS],
    /// Valid entries of `pci_ancestors`.
    pub pci_ancestor_count: u32,
    /// PCI bridges above the device, outermost first (domain, bus, device, function).
    pub pci_ancestors: [[u32; 4]; MAX_PCI_ANCESTORS],
}

/// Properties of a `cuMem*` allocation handle in C form.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CMemHandleInfo {
    /// Visible device ordinal, -1 if `CUDA_VISIBLE_DEVICES` hides the device.
    pub device: i32,
    /// Requested shareable handle types (`CUmemAllocationHandleType` bits).
    pub handle_types: u32,
    /// Bytes.
    pub size: u64,
}

/// A 64-byte IPC handle.
pub type CHandle = [u8; 64];

/// Host work for `enqueue`.
pub type CWorkFn = unsafe extern "C" fn(data: *mut c_void);

/// Version 1 of the core vtable. See the module documentation for conventions.
#[repr(C)]
pub struct CoreApiV1 {
    /// `size_of::<CoreApiV1>()` of the core that filled it.
    pub size: usize,
    /// [`CORE_ABI_VERSION`] of the core.
    pub version: u32,
    /// Copies the calling thread's last error message (NUL-terminated, truncated to `len`);
    /// returns its full length.
    pub last_error_message: unsafe extern "C" fn(buf: *mut c_char, len: usize) -> usize,
    /// Visible device count.
    pub device_count: unsafe extern "C" fn(out: *mut i32) -> i32,
    /// Description of a visible device.
    pub device_info: unsafe extern "C" fn(ordinal: i32, out: *mut CDeviceInfo) -> i32,
    /// The calling thread's current device.
    pub get_device: unsafe extern "C" fn(out: *mut i32) -> i32,
    /// Sets the calling thread's current device.
    pub set_device: unsafe extern "C" fn(ordinal: i32) -> i32,
    /// Device allocation.
    pub malloc: unsafe extern "C" fn(ordinal: i32, size: usize, out: *mut usize) -> i32,
    /// Device free.
    pub free: unsafe extern "C" fn(ptr: usize) -> i32,
    /// Free and total bytes of a device.
    pub mem_info: unsafe extern "C" fn(ordinal: i32, free: *mut u64, total: *mut u64) -> i32,
    /// Pinned host allocation.
    pub host_alloc: unsafe extern "C" fn(size: usize, out: *mut usize) -> i32,
    /// Pinned host free.
    pub host_free: unsafe extern "C" fn(ptr: usize) -> i32,
    /// Register user host memory.
    pub host_register: unsafe extern "C" fn(ptr: usize, size: usize) -> i32,
    /// Unregister user host memory.
    pub host_unregister: unsafe extern "C" fn(ptr: usize) -> i32,
    /// What a pointer points into.
    pub pointer_info: unsafe extern "C" fn(ptr: usize, out: *mut CPointerInfo) -> i32,
    /// Stream-ordered copy (`kind` is `cudaMemcpyKind`).
    pub memcpy:
        unsafe extern "C" fn(dst: usize, src: usize, n: usize, kind: i32, stream: u64) -> i32,
    /// Stream-ordered pitched copy.
    pub memcpy_2d: unsafe extern "C" fn(
        dst: usize,
        dpitch: usize,
        src: usize,
        spitch: usize,
        width: usize,
        height: usize,
        kind: i32,
        stream: u64,
    ) -> i32,
    /// Stream-ordered byte fill.
    pub memset: unsafe extern "C" fn(dst: usize, value: i32, n: usize, stream: u64) -> i32,
    /// Creates a stream on the current device.
    pub stream_create: unsafe extern "C" fn(flags: u32, priority: i32, out: *mut u64) -> i32,
    /// Destroys a stream.
    pub stream_destroy: unsafe extern "C" fn(stream: u64) -> i32,
    /// Stream properties.
    pub stream_info: unsafe extern "C" fn(stream: u64, out: *mut CStreamInfo) -> i32,
    /// 0 if complete, NotReady otherwise.
    pub stream_query: unsafe extern "C" fn(stream: u64) -> i32,
    /// Waits for a stream.
    pub stream_synchronize: unsafe extern "C" fn(stream: u64) -> i32,
    /// Makes a stream wait for an event.
    pub stream_wait_event: unsafe extern "C" fn(stream: u64, event: u64) -> i32,
    /// Virtual completion time of a stream's work (ns).
    pub stream_clock: unsafe extern "C" fn(stream: u64, out: *mut u64) -> i32,
    /// Enqueues host work of a virtual duration; `work` (may be null) runs before returning.
    pub enqueue: unsafe extern "C" fn(
        stream: u64,
        duration_ns: u64,
        work: Option<CWorkFn>,
        data: *mut c_void,
    ) -> i32,
    /// Waits for the current device.
    pub device_synchronize: unsafe extern "C" fn() -> i32,
    /// Creates an event.
    pub event_create: unsafe extern "C" fn(flags: u32, out: *mut u64) -> i32,
    /// Destroys an event.
    pub event_destroy: unsafe extern "C" fn(event: u64) -> i32,
    /// Records an event on a stream.
    pub event_record: unsafe extern "C" fn(event: u64, stream: u64) -> i32,
    /// 0 if complete, NotReady otherwise.
    pub event_query: unsafe extern "C" fn(event: u64) -> i32,
    /// Waits for an event.
    pub event_synchronize: unsafe extern "C" fn(event: u64) -> i32,
    /// Virtual milliseconds between two events.
    pub event_elapsed_ms: unsafe extern "C" fn(start: u64, end: u64, out: *mut f32) -> i32,
    /// IPC handle of the allocation containing `ptr`.
    pub ipc_get_mem_handle: unsafe extern "C" fn(ptr: usize, out: *mut CHandle) -> i32,
    /// Maps an IPC memory handle.
    pub ipc_open_mem_handle: unsafe extern "C" fn(handle: *const CHandle, out: *mut usize) -> i32,
    /// Unmaps a pointer from `ipc_open_mem_handle`.
    pub ipc_close_mem_handle: unsafe extern "C" fn(ptr: usize) -> i32,
    /// IPC handle of an event.
    pub ipc_get_event_handle: unsafe extern "C" fn(event: u64, out: *mut CHandle) -> i32,
    /// Opens an IPC event handle.
    pub ipc_open_event_handle: unsafe extern "C" fn(handle: *const CHandle, out: *mut u64) -> i32,
    /// Registers a kernel's host stub and device name.
    pub register_function: unsafe extern "C" fn(host_fun: usize, name: *const c_char) -> i32,
    /// Counts a kernel launch.
    pub launch_kernel: unsafe extern "C" fn(host_fun: usize, stream: u64) -> i32,
    /// Number of devices of the node, ignoring `CUDA_VISIBLE_DEVICES` (NVML's numbering).
    pub physical_device_count: unsafe extern "C" fn(out: *mut i32) -> i32,
    /// Description of a physical device (`physical_index` is its own index).
    pub physical_device_info: unsafe extern "C" fn(index: i32, out: *mut CDeviceInfo) -> i32,
    /// PCI ids, NUMA node, NVLinks and PCI ancestors of a physical device.
    pub physical_device_topology:
        unsafe extern "C" fn(index: i32, out: *mut CDeviceTopology) -> i32,
    /// NVML topology level (`nvmlGpuTopologyLevel_t`) between two physical devices.
    pub topology_common_ancestor: unsafe extern "C" fn(a: i32, b: i32, out: *mut u32) -> i32,
    /// Starts capturing a stream into a new graph.
    pub begin_capture: unsafe extern "C" fn(stream: u64) -> i32,
    /// Ends a capture; writes its graph.
    pub end_capture: unsafe extern "C" fn(stream: u64, graph: *mut u64) -> i32,
    /// Capture status (0 none, 1 active), capture id and graph of a stream.
    pub capture_info:
        unsafe extern "C" fn(stream: u64, status: *mut u32, id: *mut u64, graph: *mut u64) -> i32,
    /// Creates an empty graph.
    pub graph_create: unsafe extern "C" fn(out: *mut u64) -> i32,
    /// Destroys a graph.
    pub graph_destroy: unsafe extern "C" fn(graph: u64) -> i32,
    /// Number of operations (nodes) in a graph.
    pub graph_node_count: unsafe extern "C" fn(graph: u64, out: *mut usize) -> i32,
    /// Writes a Graphviz description of a graph to the file `path`.
    pub graph_write_dot: unsafe extern "C" fn(graph: u64, path: *const c_char) -> i32,
    /// Instantiates a graph.
    pub graph_instantiate: unsafe extern "C" fn(graph: u64, out: *mut u64) -> i32,
    /// Destroys an executable graph.
    pub graph_exec_destroy: unsafe extern "C" fn(exec: u64) -> i32,
    /// Replays an executable graph on a stream.
    pub graph_launch: unsafe extern "C" fn(exec: u64, stream: u64) -> i32,
    /// Frees every allocation of a visible device (`cudaDeviceReset`).
    pub device_reset: unsafe extern "C" fn(ordinal: i32) -> i32,
    /// Where the device allocation containing `ptr` lives (this process's arenas only).
    pub pointer_arena: unsafe extern "C" fn(ptr: usize, out: *mut CArenaLocation) -> i32,
    /// Like `enqueue`, but the core owns `data` and calls `release(data)` exactly once when
    /// no work needs it any more: after `work` ran, when the call fails, or — if the stream
    /// was capturing — when the graph and its executable graphs are destroyed. `release`
    /// must not call into the core.
    pub enqueue_owned: unsafe extern "C" fn(
        stream: u64,
        duration_ns: u64,
        work: Option<CWorkFn>,
        data: *mut c_void,
        release: CWorkFn,
    ) -> i32,
    /// Gives the pages of a visible device's freed memory back to the system (freed memory
    /// otherwise keeps them for reuse); writes the bytes trimmed.
    pub trim_device: unsafe extern "C" fn(ordinal: i32, trimmed: *mut u64) -> i32,
    /// `cuMemCreate`: a physical allocation of `size` bytes on a visible device, exportable
    /// as `handle_types`; writes its handle.
    pub mem_create:
        unsafe extern "C" fn(ordinal: i32, size: u64, handle_types: u32, out: *mut u64) -> i32,
    /// `cuMemRelease`.
    pub mem_release: unsafe extern "C" fn(handle: u64) -> i32,
    /// `cuMemAddressReserve`: writes the start of the reserved range.
    pub mem_address_reserve:
        unsafe extern "C" fn(size: usize, alignment: usize, hint: usize, out: *mut usize) -> i32,
    /// `cuMemAddressFree`.
    pub mem_address_free: unsafe extern "C" fn(ptr: usize, size: usize) -> i32,
    /// `cuMemMap`.
    pub mem_map: unsafe extern "C" fn(ptr: usize, size: usize, offset: u64, handle: u64) -> i32,
    /// `cuMemUnmap`.
    pub mem_unmap: unsafe extern "C" fn(ptr: usize, size: usize) -> i32,
    /// `cuMemSetAccess` for one device (`CUmemAccess_flags`).
    pub mem_set_access:
        unsafe extern "C" fn(ptr: usize, size: usize, ordinal: i32, flags: u32) -> i32,
    /// `cuMemGetAccess` for one device.
    pub mem_get_access: unsafe extern "C" fn(ptr: usize, ordinal: i32, out: *mut u32) -> i32,
    /// `cuMemExportToShareableHandle` (POSIX file descriptor, owned by the caller).
    pub mem_export: unsafe extern "C" fn(handle: u64, out_fd: *mut i32) -> i32,
    /// `cuMemImportFromShareableHandle` (POSIX file descriptor, kept by the caller).
    pub mem_import: unsafe extern "C" fn(fd: i32, out: *mut u64) -> i32,
    /// `cuMemRetainAllocationHandle`.
    pub mem_retain: unsafe extern "C" fn(ptr: usize, out: *mut u64) -> i32,
    /// `cuMemGetAllocationPropertiesFromHandle`.
    pub mem_handle_info: unsafe extern "C" fn(handle: u64, out: *mut CMemHandleInfo) -> i32,
    /// Stream-ordered fill of `count` elements of `elem_size` (1, 2, 4, 8) bytes with the low
    /// bytes of `pattern` (`cuMemsetD16/D32`, `cuStreamWriteValue32/64`).
    pub memset_pattern: unsafe extern "C" fn(
        dst: usize,
        pattern: u64,
        elem_size: u32,
        count: usize,
        stream: u64,
    ) -> i32,
    /// The stream whose host work (an `enqueue`/`enqueue_owned` work function, also when a
    /// graph replays it) is running on the calling thread, as that work was submitted: for a
    /// replay, the stream the graph was launched on. Fails outside host work.
    pub host_stream: unsafe extern "C" fn(out: *mut u64) -> i32,
    /// Bytes allocated now and at most so far on a visible device.
    pub memory_stats: unsafe extern "C" fn(ordinal: i32, current: *mut u64, peak: *mut u64) -> i32,
    /// The profiler range (`cudaProfilerStart` with `op` 1, `cudaProfilerStop` with 0, a
    /// query with -1): writes how many ranges were started so far and whether one is open.
    pub profiler: unsafe extern "C" fn(op: i32, ranges: *mut u64, active: *mut i32) -> i32,
    /// Adds or replaces a named section (JSON text) of the end-of-run report
    /// (`NCCLSIM_REPORT`); with `write_now` non-zero the report file is written at once.
    pub report_section:
        unsafe extern "C" fn(name: *const c_char, json: *const c_char, write_now: i32) -> i32,
    /// The device buffer `ptr` points into, as the program made it (kind `BUFFER_NONE` when it
    /// is not device memory of this process).
    pub buffer_extent: unsafe extern "C" fn(ptr: usize, out: *mut CBufferExtent) -> i32,
    /// Virtual time on physical device `index`: the summed durations of the work scheduled on
    /// its streams (`busy`) and when all of it completes (`clock`), nanoseconds.
    pub physical_device_busy:
        unsafe extern "C" fn(index: i32, busy: *mut u64, clock: *mut u64) -> i32,
}
