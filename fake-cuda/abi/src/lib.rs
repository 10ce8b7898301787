//! What crosses the fake CUDA core's C boundary, and nothing with state: the vtable through
//! which front-ends reach the process's one core (declared once, [`core_api!`]), its C types,
//! the status codes and error of its entries ([`error`]), the layout of the arena header
//! that other processes read ([`shm`]), simulated time ([`time`]: [`SimTime`],
//! [`SimDuration`]) and the owned shared mapping the core and `nccl-shim` both map memory
//! descriptors with ([`map`]). The core, its loader (`fake-cuda-client`) and
//! `nccl-shim` all depend on this crate; it depends on none of them.
//!
//! `libncclsim_cuda.so` exports [`CORE_SYMBOL`], a function returning a pointer to a
//! static [`CoreApiV1`]. Every entry returns a [`Status`](error::Status) code (0 = success)
//! and writes results through out-pointers; the message of the calling thread's last failure can be read
//! with `last_error_message`. Only C types cross this boundary, so front-ends built separately
//! (even by another compiler version) agree on it. Within a [`CORE_ABI_VERSION`] entries are
//! only appended; `size` tells a front-end which entries a core provides.

pub mod describe;
pub mod device;
pub mod error;
pub mod map;
pub mod shm;
pub mod telemetry;
pub mod time;
pub mod version;

pub use device::{uuid_string, MemoryKind, GRANULARITY, HANDLE_TYPE_POSIX_FD};
pub use time::{SimDuration, SimTime};

/// The C and borrowed types the entries of [`core_api!`] name, so that a consumer's
/// `use fake_cuda_abi::*` brings every one of them into scope.
pub use std::ffi::{c_char, c_void, CStr};

/// The node the core and `nccl-shim` both assume when the environment names no topology.
pub const BUNDLED_NAME: &str = "dgx-a100";
/// Its XML (a copy of `topologies/dgx-a100.xml` compiled in).
pub const BUNDLED_XML: &str = include_str!("../../../topologies/dgx-a100.xml");

/// Name of the exported function `extern "C" fn() -> *const CoreApiV1`.
pub const CORE_SYMBOL: &str = "ncclsim_cuda_core_v1";
/// File name of the core shared object.
pub const CORE_LIBRARY: &str = "libncclsim_cuda.so";
/// Version of [`CoreApiV1`] this crate defines: entries are appended within a version; one
/// removed or changed makes the next version, which a front-end of another version refuses.
pub const CORE_ABI_VERSION: u32 = 2;

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

/// The device buffer a pointer points into, as the program made it (the core's `Core::buffer_extent`).
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
/// to fetch the owner's whole arena memfd once from the owner's descriptor broker (`fd_fetch`
/// with `owner_pid`, `key`, `secret`), map it and find the allocation in it.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CArenaLocation {
    /// Process that owns the arena.
    pub owner_pid: u32,
    /// Arena number within the owner (checked against the arena header).
    pub arena_id: u32,
    /// The arena memfd's offer key in the owner's descriptor broker.
    pub key: u32,
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
    /// The secret that fetches the arena memfd from the owner's descriptor broker.
    pub secret: u64,
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

/// The NVLink fabric spanning hosts a GPU is part of, in C form (what NVML's GPU fabric
/// information reports and the driver's fabric handles need).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CFabricInfo {
    /// The cluster UUID as the two 64-bit halves NCCL prints (`%lx.%lx`).
    pub cluster_uuid: [u64; 2],
    /// The clique id.
    pub clique_id: u32,
    /// The fabric state (NVML's `NVML_GPU_FABRIC_STATE_*`).
    pub state: u32,
    /// The health mask (NVML's `NVML_GPU_FABRIC_HEALTH_MASK_*` fields).
    pub health_mask: u32,
    /// Zero.
    pub reserved: u32,
}

/// What a kernel costs, in C form: the compute model's inputs.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct CKernelCost {
    /// Floating-point operations (a multiply-add is two).
    pub flops: f64,
    /// Bytes read and written in device memory.
    pub bytes: f64,
    /// Where the arithmetic runs: [`UNIT_VECTOR`] or [`UNIT_TENSOR`].
    pub unit: i32,
    /// Its precision: one of the `PRECISION_*` codes.
    pub precision: i32,
    /// A matrix product's shape, `batch` products of `m x k` by `k x n` (priced by tiles and
    /// waves); all zero for other kernels.
    pub batch: u64,
    /// Rows of the product.
    pub m: u64,
    /// Columns of the product.
    pub n: u64,
    /// The product's inner dimension.
    pub k: u64,
    /// The fused attention kernel it is: [`ATTENTION_NONE`], [`ATTENTION_FLASH`],
    /// [`ATTENTION_MEM_EFFICIENT`] or [`ATTENTION_CUDNN`] (`compute_model::Attention::from_code`).
    pub attention: u32,
    /// [`COST_BACKWARD`], [`COST_CAUSAL`] (of an attention kernel) and [`COST_HOST_OP`].
    pub flags: u32,
}

/// [`CKernelCost::attention`]: not an attention kernel.
pub const ATTENTION_NONE: u32 = 0;
/// FlashAttention-2 (torch's flash backend).
pub const ATTENTION_FLASH: u32 = 1;
/// The memory-efficient CUTLASS kernel.
pub const ATTENTION_MEM_EFFICIENT: u32 = 2;
/// cuDNN's fused attention.
pub const ATTENTION_CUDNN: u32 = 3;
/// [`CKernelCost::flags`]: the attention kernel is a backward pass.
pub const COST_BACKWARD: u32 = 1;
/// The attention kernel masks causally.
pub const COST_CAUSAL: u32 = 2;
/// A framework issued the kernel eagerly from the host (a torch op): under the virtual clock
/// the calling thread's clock moves by the host's time per op (`compute_model::calibration::
/// HOST_OP_NS`) before the kernel is queued.
pub const COST_HOST_OP: u32 = 4;

/// [`CKernelCost::unit`]: the vector units.
pub const UNIT_VECTOR: i32 = 0;
/// [`CKernelCost::unit`]: the tensor cores.
pub const UNIT_TENSOR: i32 = 1;
/// [`CKernelCost::precision`] codes (`compute_model::Precision::from_code`).
pub const PRECISION_F64: i32 = 0;
/// 32-bit floats.
pub const PRECISION_F32: i32 = 1;
/// 32-bit floats multiplied in TF32.
pub const PRECISION_TF32: i32 = 2;
/// IEEE half precision.
pub const PRECISION_F16: i32 = 3;
/// bfloat16.
pub const PRECISION_BF16: i32 = 4;
/// 8-bit floats.
pub const PRECISION_F8: i32 = 5;

/// `run_settings`' compute mode: `NCCLSIM_COMPUTE` unset.
pub const RUN_COMPUTE_UNSET: u32 = 0;
/// `NCCLSIM_COMPUTE=run`.
pub const RUN_COMPUTE_RUN: u32 = 1;
/// `NCCLSIM_COMPUTE=time`.
pub const RUN_COMPUTE_TIME: u32 = 2;
/// `NCCLSIM_COMPUTE=off`.
pub const RUN_COMPUTE_OFF: u32 = 3;

/// An instant that may be absent, in C form (`Option<SimTime>`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CMaybeTime {
    /// 1 when there is an instant, 0 when there is none (`ns` is then 0).
    pub present: u32,
    /// Zero.
    pub reserved: u32,
    /// The instant, ns since the core started.
    pub ns: u64,
}

impl From<Option<SimTime>> for CMaybeTime {
    fn from(t: Option<SimTime>) -> CMaybeTime {
        CMaybeTime {
            present: u32::from(t.is_some()),
            reserved: 0,
            ns: t.map_or(0, SimTime::as_nanos),
        }
    }
}

impl CMaybeTime {
    /// The instant, if there is one.
    pub fn get(self) -> Option<SimTime> {
        (self.present != 0).then(|| SimTime::from_nanos(self.ns))
    }
}

/// Where compute was placed, in C form.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CLaunchTimes {
    /// 1 when it was placed now, 0 when it was captured into a graph (the rest is then 0).
    pub placed: u32,
    /// 1 when a `cudaProfilerStart` range is open (`range` is then its index).
    pub in_range: u32,
    /// The open profiler range's index.
    pub range: u64,
    /// Its virtual start, ns since the core started.
    pub start_ns: u64,
    /// Its virtual duration, ns.
    pub duration_ns: u64,
}

/// The board's facts NVML reports that CUDA's device properties do not carry, in C form.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CBoardInfo {
    /// Thermal design power, watts (the board's default power limit).
    pub tdp_watts: u32,
    /// Zero.
    pub reserved: u32,
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

/// Host work for `enqueue_meeting`, called with its argument, the stream it runs on (for a graph
/// replay, the stream the graph was launched on) and the virtual time at which that stream
/// reached it (ns); returns the virtual time at which the work starts, at least `ready_ns`
/// (it waits for others), or [`MEETING_FAILED`].
pub type CMeetFn = unsafe extern "C" fn(data: *mut c_void, stream: u64, ready_ns: u64) -> u64;

/// What a [`CMeetFn`] returns when its work failed: nothing is scheduled after it.
pub const MEETING_FAILED: u64 = u64::MAX;

/// `profiler`'s `op`: closes the open profiler range (`cudaProfilerStop`).
pub const PROFILER_STOP: i32 = 0;
/// `profiler`'s `op`: opens a profiler range unless one is open (`cudaProfilerStart`).
pub const PROFILER_START: i32 = 1;
/// `profiler`'s `op`: only reports the ranges.
pub const PROFILER_QUERY: i32 = -1;

/// `step_mark`'s `by`: only reports the steps marked so far.
pub const STEP_QUERY: i32 = -1;
/// `step_mark`'s `by`: a step ended at an optimizer's step (torch's optimizer step hooks).
pub const STEP_BY_OPTIMIZER: i32 = 1;
/// `step_mark`'s `by`: a step ended at a profiler's step (`torch.profiler.profile.step`).
pub const STEP_BY_PROFILER: i32 = 2;

/// Plain C data whose all-zero bytes are a valid value: what a caller sets an entry's output
/// to before the entry writes it.
///
/// # Safety
/// Implemented only for types for which all-zero bytes are a valid value.
pub unsafe trait Zeroed: Sized {
    /// The all-zero value.
    fn zeroed() -> Self {
        // SAFETY: all-zero bytes are a valid `Self` (the trait's contract).
        unsafe { std::mem::zeroed() }
    }
}

macro_rules! zeroed {
    ($($t:ty),*) => {
        $(
            // SAFETY: integers, floats and structs of them: all-zero bytes are a valid value.
            unsafe impl Zeroed for $t {}
        )*
    };
}
zeroed!(
    i32,
    u32,
    u64,
    usize,
    f32,
    CHandle,
    CDeviceInfo,
    CPointerInfo,
    CBufferExtent,
    CFabricInfo,
    CBoardInfo,
    CLaunchTimes,
    CMaybeTime
);
zeroed!(CArenaLocation, CStreamInfo, CDeviceTopology, CMemHandleInfo);

/// The vtable's entries after `size`, `version` and `last_error_message`, in table order, each
/// declared once: `core_api!(callback)` expands to `callback! { entries }`, and every side of
/// the vtable is generated from that one list ([`CoreApiV1`] here, the core's C entries and
/// static table in `ncclsim-cuda`, the safe calls in `fake-cuda-client`).
///
/// An entry reads `fn name(args) -> (outputs);`, optionally `unsafe fn` (its contract then in
/// a `# Safety` section):
/// - `arg: CType` is passed as is; `arg: CType as RustType` is a pointer or flag that the
///   caller passes as `RustType` (`&CStr`, `&CHandle`, `bool`) and the core's body receives
///   as `RustType` (null pointers are refused before the body runs).
/// - each output `out: T` becomes a trailing `*mut T` argument of the C entry; the caller gets
///   the outputs back (none: `()`, one: `T`, more: a tuple) and the core's body returns them.
///
/// A callback's pattern for one entry is
/// `$(#[$doc:meta])* [$($unsafe:ident)?] fn $name:ident($($arg:ident: $cty:ty $(as $rty:ty)?),*)
/// -> ($($out:ident: $oty:ty),*);` (the `[unsafe]` or `[]` marker added by this macro).
/// Every C entry returns a [`Status`](error::Status) code. Types are named as in this crate's
/// root; a consumer brings them into scope with `use fake_cuda_abi::*`. Entries are only ever
/// appended.
#[macro_export]
macro_rules! core_api {
    // Hands the entries to `$callback` with `[unsafe]` or `[]` before each `fn`, a marker a
    // callback's pattern can capture (an optional `unsafe` before `fn` cannot be). One
    // expansion per entry: the list stays within the compiler's default recursion limit (128)
    // up to about 120 entries.
    (@mark $callback:ident [$($marked:tt)*]) => {
        $callback! { $($marked)* }
    };
    (@mark $callback:ident [$($marked:tt)*]
        $(#[$doc:meta])* unsafe fn $name:ident $args:tt -> $outs:tt; $($rest:tt)*) => {
        $crate::core_api! { @mark $callback [$($marked)* $(#[$doc])* [unsafe] fn $name $args -> $outs;]
            $($rest)* }
    };
    (@mark $callback:ident [$($marked:tt)*]
        $(#[$doc:meta])* fn $name:ident $args:tt -> $outs:tt; $($rest:tt)*) => {
        $crate::core_api! { @mark $callback [$($marked)* $(#[$doc])* [] fn $name $args -> $outs;]
            $($rest)* }
    };
    ($callback:ident) => {
        $crate::core_api! { @mark $callback []
            /// Visible device count.
            fn device_count() -> (count: i32);
            /// Description of visible device `ordinal`.
            fn device_info(ordinal: i32) -> (info: CDeviceInfo);
            /// The calling thread's current device.
            fn get_device() -> (ordinal: i32);
            /// Sets the calling thread's current device.
            fn set_device(ordinal: i32) -> ();
            /// Device allocation.
            fn malloc(ordinal: i32, size: usize) -> (ptr: usize);
            /// Device free.
            fn free(ptr: usize) -> ();
            /// Free and total bytes of a device.
            fn mem_info(ordinal: i32) -> (free: u64, total: u64);
            /// Pinned host allocation.
            fn host_alloc(size: usize) -> (ptr: usize);
            /// Pinned host free.
            fn host_free(ptr: usize) -> ();
            /// Registers user host memory.
            fn host_register(ptr: usize, size: usize) -> ();
            /// Unregisters user host memory.
            fn host_unregister(ptr: usize) -> ();
            /// What a pointer points into.
            fn pointer_info(ptr: usize) -> (info: CPointerInfo);
            /// Stream-ordered copy (`kind` is `cudaMemcpyKind`).
            ///
            /// # Safety
            /// As `Core::memcpy`: host sides must be valid for the copy during this call (if
            /// the stream is capturing, at every launch of a graph made from the capture).
            unsafe fn memcpy(dst: usize, src: usize, n: usize, kind: i32, stream: u64) -> ();
            /// Stream-ordered pitched copy.
            ///
            /// # Safety
            /// As `Core::memcpy_2d`: host sides must be valid for every row of the copy during
            /// this call (if the stream is capturing, at every launch of a graph made from the
            /// capture).
            unsafe fn memcpy_2d(
                dst: usize,
                dpitch: usize,
                src: usize,
                spitch: usize,
                width: usize,
                height: usize,
                kind: i32,
                stream: u64
            ) -> ();
            /// Stream-ordered byte fill.
            fn memset(dst: usize, value: i32, n: usize, stream: u64) -> ();
            /// Creates a stream on the current device.
            fn stream_create(flags: u32, priority: i32) -> (stream: u64);
            /// Destroys a stream.
            fn stream_destroy(stream: u64) -> ();
            /// Stream properties.
            fn stream_info(stream: u64) -> (info: CStreamInfo);
            /// Succeeds if the stream's work is complete, fails with `NotReady` otherwise.
            fn stream_query(stream: u64) -> ();
            /// Waits for a stream.
            fn stream_synchronize(stream: u64) -> ();
            /// Makes a stream wait for an event.
            fn stream_wait_event(stream: u64, event: u64) -> ();
            /// Virtual completion time of a stream's work (ns).
            fn stream_clock(stream: u64) -> (ns: u64);
            /// Enqueues host work of a virtual duration; `work` (may be null) runs before
            /// returning.
            ///
            /// # Safety
            /// `work(data)` must be safe to call once from this thread.
            unsafe fn enqueue(
                stream: u64,
                duration_ns: u64,
                work: Option<CWorkFn>,
                data: *mut c_void
            ) -> ();
            /// Waits for the current device.
            fn device_synchronize() -> ();
            /// Creates an event.
            fn event_create(flags: u32) -> (event: u64);
            /// Destroys an event.
            fn event_destroy(event: u64) -> ();
            /// Records an event on a stream.
            fn event_record(event: u64, stream: u64) -> ();
            /// Succeeds if the event completed, fails with `NotReady` otherwise.
            fn event_query(event: u64) -> ();
            /// Waits for an event.
            fn event_synchronize(event: u64) -> ();
            /// Virtual milliseconds between two events.
            fn event_elapsed_ms(start: u64, end: u64) -> (ms: f32);
            /// IPC handle of the allocation containing `ptr`.
            fn ipc_get_mem_handle(ptr: usize) -> (handle: CHandle);
            /// Maps an IPC memory handle.
            fn ipc_open_mem_handle(handle: *const CHandle as &CHandle) -> (ptr: usize);
            /// Unmaps a pointer from `ipc_open_mem_handle`.
            fn ipc_close_mem_handle(ptr: usize) -> ();
            /// IPC handle of an event.
            fn ipc_get_event_handle(event: u64) -> (handle: CHandle);
            /// Opens an IPC event handle.
            fn ipc_open_event_handle(handle: *const CHandle as &CHandle) -> (event: u64);
            /// Registers a kernel's host stub and device name.
            fn register_function(host_fun: usize, name: *const c_char as &CStr) -> ();
            /// Counts a kernel launch.
            fn launch_kernel(host_fun: usize, stream: u64) -> ();
            /// Number of devices of the node, ignoring `CUDA_VISIBLE_DEVICES` (NVML's numbering).
            fn physical_device_count() -> (count: i32);
            /// Description of a physical device (`physical_index` is its own index).
            fn physical_device_info(index: i32) -> (info: CDeviceInfo);
            /// PCI ids, NUMA node, NVLinks and PCI ancestors of a physical device.
            fn physical_device_topology(index: i32) -> (topology: CDeviceTopology);
            /// NVML topology level (`nvmlGpuTopologyLevel_t`) between two physical devices.
            fn topology_common_ancestor(a: i32, b: i32) -> (level: u32);
            /// Starts capturing a stream into a new graph.
            fn begin_capture(stream: u64) -> ();
            /// Ends a capture; gives its graph.
            fn end_capture(stream: u64) -> (graph: u64);
            /// Capture status (0 none, 1 active), capture id and graph of a stream.
            fn capture_info(stream: u64) -> (status: u32, id: u64, graph: u64);
            /// Creates an empty graph.
            fn graph_create() -> (graph: u64);
            /// Destroys a graph.
            fn graph_destroy(graph: u64) -> ();
            /// Number of operations (nodes) in a graph.
            fn graph_node_count(graph: u64) -> (count: usize);
            /// Writes a Graphviz description of a graph to the file `path`.
            fn graph_write_dot(graph: u64, path: *const c_char as &CStr) -> ();
            /// Instantiates a graph.
            fn graph_instantiate(graph: u64) -> (exec: u64);
            /// Destroys an executable graph.
            fn graph_exec_destroy(exec: u64) -> ();
            /// Replays an executable graph on a stream.
            fn graph_launch(exec: u64, stream: u64) -> ();
            /// Frees every allocation of a visible device (`cudaDeviceReset`).
            fn device_reset(ordinal: i32) -> ();
            /// Where the device allocation containing `ptr` lives (this process's arenas only).
            fn pointer_arena(ptr: usize) -> (location: CArenaLocation);
            /// Like `enqueue`, but the core owns `data` and calls `release(data)` exactly once
            /// when no work needs it any more: after `work` ran, when the call fails, or — if
            /// the stream was capturing — when the graph and its executable graphs are
            /// destroyed.
            ///
            /// # Safety
            /// `work(data)` must be safe to call until `release(data)`, which must be safe to
            /// call once from any thread and must not call into the core.
            unsafe fn enqueue_owned(
                stream: u64,
                duration_ns: u64,
                work: Option<CWorkFn>,
                data: *mut c_void,
                release: CWorkFn
            ) -> ();
            /// Gives the pages of a visible device's freed memory back to the system (freed
            /// memory otherwise keeps them for reuse); gives the bytes trimmed.
            fn trim_device(ordinal: i32) -> (trimmed: u64);
            /// `cuMemCreate`: a physical allocation of `size` bytes on a visible device,
            /// exportable as `handle_types`; gives its handle.
            fn mem_create(ordinal: i32, size: u64, handle_types: u32) -> (handle: u64);
            /// `cuMemRelease`.
            fn mem_release(handle: u64) -> ();
            /// `cuMemAddressReserve`: gives the start of the reserved range.
            fn mem_address_reserve(size: usize, alignment: usize, hint: usize) -> (ptr: usize);
            /// `cuMemAddressFree`.
            fn mem_address_free(ptr: usize, size: usize) -> ();
            /// `cuMemMap`.
            fn mem_map(ptr: usize, size: usize, offset: u64, handle: u64) -> ();
            /// `cuMemUnmap`.
            fn mem_unmap(ptr: usize, size: usize) -> ();
            /// `cuMemSetAccess` for one device (`CUmemAccess_flags`).
            fn mem_set_access(ptr: usize, size: usize, ordinal: i32, flags: u32) -> ();
            /// `cuMemGetAccess` for one device.
            fn mem_get_access(ptr: usize, ordinal: i32) -> (flags: u32);
            /// `cuMemExportToShareableHandle`: a POSIX file descriptor the caller owns.
            fn mem_export(handle: u64) -> (fd: i32);
            /// `cuMemImportFromShareableHandle` of a POSIX file descriptor (kept by the caller).
            fn mem_import(fd: i32) -> (handle: u64);
            /// `cuMemRetainAllocationHandle`.
            fn mem_retain(ptr: usize) -> (handle: u64);
            /// `cuMemGetAllocationPropertiesFromHandle`.
            fn mem_handle_info(handle: u64) -> (info: CMemHandleInfo);
            /// Stream-ordered fill of `count` elements of `elem_size` (1, 2, 4, 8) bytes with the
            /// low bytes of `pattern` (`cuMemsetD16/D32`, `cuStreamWriteValue32/64`).
            fn memset_pattern(
                dst: usize,
                pattern: u64,
                elem_size: u32,
                count: usize,
                stream: u64
            ) -> ();
            /// The stream whose host work (an `enqueue`/`enqueue_owned` work function, also
            /// when a graph replays it) is running on the calling thread, as that work was
            /// submitted: for a replay, the stream the graph was launched on. Fails outside
            /// host work.
            fn host_stream() -> (stream: u64);
            /// Bytes allocated now and at most so far on a visible device.
            fn memory_stats(ordinal: i32) -> (current: u64, peak: u64);
            /// The profiler range (`op`: `PROFILER_START`, `PROFILER_STOP`,
            /// `PROFILER_QUERY`): gives how many ranges were started so far and whether one is
            /// open (non-zero).
            fn profiler(op: i32) -> (ranges: u64, active: i32);
            /// Adds or replaces a named section (JSON text) of the end-of-run report
            /// (`NCCLSIM_REPORT`); with `write_now` the report file is written at once.
            fn report_section(
                name: *const c_char as &CStr,
                json: *const c_char as &CStr,
                write_now: i32 as bool
            ) -> ();
            /// The device buffer `ptr` points into, as the program made it (kind
            /// `BUFFER_NONE` when it is not device memory of this process).
            fn buffer_extent(ptr: usize) -> (extent: CBufferExtent);
            /// Virtual time on physical device `index`: the summed durations of the work
            /// scheduled on its streams (`busy`) and when all of it completes (`clock`), ns.
            fn physical_device_busy(index: i32) -> (busy: u64, clock: u64);
            /// The host waited until virtual time `clock_ns` (ns since the core started): later
            /// work starts no earlier, and the virtual host clock reads at least it.
            fn host_wait(clock_ns: u64) -> ();
            /// Offers a copy of descriptor `fd` (the caller keeps its own) to other processes
            /// through this process's descriptor broker until `fd_withdraw(key)`: a process of
            /// this user that presents `key` and `secret` to `fd_fetch` receives it.
            fn fd_offer(fd: i32) -> (key: u32, secret: u64);
            /// Withdraws an offer of `fd_offer` (descriptors already passed stay valid).
            fn fd_withdraw(key: u32) -> ();
            /// Fetches offer `key` from the descriptor broker of process `owner_pid` of this
            /// host with its `secret`; gives a new descriptor the caller owns. Fails, never
            /// hangs, if the owner is gone, refuses or stalls.
            fn fd_fetch(owner_pid: u32, key: u32, secret: u64) -> (fd: i32);
            /// Commits `[ptr, ptr + len)` of device memory against the host's memory before a
            /// caller writes it directly (collectives into their receive buffers): fails with
            /// `Status::OutOfMemory` when the host cannot back it. Memory outside the core's
            /// allocation arenas is left as it is.
            fn commit_memory(ptr: usize, len: usize) -> ();
            /// `cuMulticastCreate`: a multicast object for a team of `num_devices` devices and
            /// `size` bytes per device, exportable as `handle_types`; gives its handle.
            fn mcast_create(num_devices: u32, size: u64, handle_types: u32) -> (handle: u64);
            /// `cuMulticastAddDevice`.
            fn mcast_add_device(handle: u64, ordinal: i32) -> ();
            /// `cuMulticastBindMem` (waits, bounded, for the whole team to be added).
            fn mcast_bind_mem(
                handle: u64,
                mc_offset: u64,
                mem: u64,
                mem_offset: u64,
                size: u64
            ) -> ();
            /// `cuMulticastBindAddr` (waits, bounded, for the whole team to be added).
            fn mcast_bind_addr(handle: u64, mc_offset: u64, ptr: usize, size: u64) -> ();
            /// `cuMulticastUnbind`.
            fn mcast_unbind(handle: u64, ordinal: i32, mc_offset: u64, size: u64) -> ();
            /// Like `enqueue_owned`, for work that starts when others are ready (a collective):
            /// the core calls `work(data, stream, ready)` with the time the stream reached it,
            /// and the stream then waits until the start `work` returns and `duration_ns` more.
            /// Gives the virtual time at which that ends, none when nothing ran now (the stream
            /// was capturing, or `work` returned [`MEETING_FAILED`]).
            ///
            /// # Safety
            /// As `enqueue_owned`, with `work(data, ..)`.
            unsafe fn enqueue_meeting(
                stream: u64,
                duration_ns: u64,
                ctas: u32,
                work: CMeetFn,
                data: *mut c_void,
                release: CWorkFn
            ) -> (end: CMaybeTime);
            /// `buffer_extent`, and when `[ptr, ptr + commit_len)` lies inside that buffer, that
            /// range committed as `commit_memory` does, in one call (a collective checking the
            /// receive buffer it is about to write).
            fn buffer_extent_commit(ptr: usize, commit_len: usize) -> (extent: CBufferExtent);
            /// The NVLink fabric spanning hosts that physical device `index` is part of: its
            /// simulated node's NVLink domain as the core grouped the job's nodes from the
            /// run environment (`NCCLSIM_NVL_DOMAIN`, else the hardware's); not supported
            /// when the node is in none.
            fn physical_device_fabric(index: i32) -> (fabric: CFabricInfo);
            /// The board facts of physical device `index` (its model's datasheet figures).
            fn physical_device_board(index: i32) -> (board: CBoardInfo);
            /// Compute on `stream`, the one door for priced kernels (torch ops, cuBLAS and
            /// cuBLASLt GEMMs): one launch of `name` costing `cost`, which occupies the stream
            /// for the time `NCCLSIM_KERNEL_TIMES` measured for this launch of `name`, else the
            /// compute model's time for `cost` on the stream's GPU, placed, counted and
            /// captured as the core's other stream work. `work(data)`, when given, computes it
            /// in stream order (now, or at each replay of a graph the stream captures into),
            /// and `release(data)`, when given, frees `data` once nothing needs it; compute
            /// without `work` (its caller computes the values) is refused while the stream
            /// captures. `detail`, when not null, is a JSON object added to the launch's trace
            /// event (`NCCLSIM_TRACE`). Gives where it was placed (`placed` 0 when it was
            /// captured).
            ///
            /// # Safety
            /// `name` and a non-null `detail` are NUL-terminated strings; `work(data)` must be
            /// safe to call until
            /// `release(data)`, which must be safe to call once from any thread and must not
            /// call into the core.
            unsafe fn launch_compute(
                stream: u64,
                cost: CKernelCost,
                name: *const c_char as &CStr,
                detail: *const c_char,
                work: Option<CWorkFn>,
                data: *mut c_void,
                release: Option<CWorkFn>
            ) -> (times: CLaunchTimes);
            /// `cudaUserObjectCreate`: an object whose creator holds `refs` references;
            /// `destroy(ptr)` runs once no reference is left (the creator's or a graph's).
            ///
            /// # Safety
            /// `destroy(ptr)` must be safe to call once, from any thread, at any later time,
            /// and must not call into the core.
            unsafe fn user_object_create(ptr: *mut c_void, destroy: CWorkFn, refs: u32)
                -> (object: u64);
            /// `cudaUserObjectRetain`: `count` more of the creator's references.
            fn user_object_retain(object: u64, count: u32) -> ();
            /// `cudaUserObjectRelease`: `count` of the creator's references go.
            fn user_object_release(object: u64, count: u32) -> ();
            /// `cudaGraphRetainUserObject`: `graph` (made, or being captured into) holds
            /// `count` references to `object`; with `moved` 1 they are the creator's.
            fn graph_retain_user_object(graph: u64, object: u64, count: u32, moved: i32) -> ();
            /// `cudaGraphReleaseUserObject`: `count` of `graph`'s references to `object` go.
            fn graph_release_user_object(graph: u64, object: u64, count: u32) -> ();
            /// Records a group of the job's ranks (a process group a framework made, its
            /// members' job ranks in the group's order, `ranks[0..n]`) for the libraries of
            /// this process that need a group's members by rank (a folded job's communicators).
            /// A group recorded twice is kept once.
            ///
            /// # Safety
            /// `ranks` points to `n` readable `u64`s.
            unsafe fn job_group_add(ranks: *const u64, n: usize) -> ();
            /// The `index`-th group recorded (from 0): copies up to `cap` of its ranks to `out`
            /// and gives its length, 0 when there is no such group.
            ///
            /// # Safety
            /// `out` points to `cap` writable `u64`s.
            unsafe fn job_group_get(index: usize, out: *mut u64, cap: usize) -> (len: usize);
            /// The run environment's settings for code outside the Rust libraries (the Python
            /// package), parsed by the one parser: the compute mode (`RUN_COMPUTE_*`), whether
            /// ops take modelled time (`NCCLSIM_COMPUTE_TIME`), whether a trace directory is set
            /// and whether the job is folded, each 0 or 1. Fails, naming the variable, when the
            /// environment has a bad value. Needs no device.
            fn run_settings() -> (compute: u32, priced: u32, trace: u32, folded: u32);
            /// The run environment the core started with: the variables its parse read, as
            /// `run_env::RunEnv::current_text` gives them (`NAME=VALUE`, each ended by a NUL
            /// byte). Copies up to `cap` bytes of it to `out` and gives its whole length. The
            /// process's other libraries parse this text instead of the environment, so each
            /// sees the job as the core does (once per process, whatever the program set in
            /// its environment since). Needs no device.
            ///
            /// # Safety
            /// `out` points to `cap` writable bytes.
            unsafe fn run_environment(out: *mut u8, cap: usize) -> (len: usize);
            /// A training step of the program ended where its framework marks steps (`by`:
            /// `STEP_BY_OPTIMIZER`, `STEP_BY_PROFILER`), or with `STEP_QUERY` nothing ended:
            /// gives the steps marked so far. Each mark is a `step_end` event of the compute
            /// trace (`NCCLSIM_TRACE`), and the work traced after the k-th mark says `mark: k`.
            fn step_mark(by: i32) -> (marks: u64);
            /// `cudaGraphExecUpdate`: gives an executable graph the operations of `graph` when
            /// their shapes match; `result` 0, or the `cudaGraphExecUpdateResult` that refused
            /// it (the executable graph then unchanged) and `node`, the refused node's
            /// position in `graph` from 1 (0 for none).
            fn graph_exec_update(exec: u64, graph: u64) -> (result: u32, node: usize);
        }
    };
}

/// Writes [`CoreApiV1`] from the entries of [`core_api!`](crate::core_api).
macro_rules! vtable_struct {
    ($(
        $(#[$doc:meta])*
        [$($unsafe:ident)?] fn $name:ident($($arg:ident: $cty:ty $(as $rty:ty)?),* $(,)?)
            -> ($($out:ident: $oty:ty),*);
    )*) => {
        /// Version 1 of the core vtable. See the module documentation for conventions.
        #[repr(C)]
        pub struct CoreApiV1 {
            /// `size_of::<CoreApiV1>()` of the core that filled it.
            pub size: usize,
            /// [`CORE_ABI_VERSION`] of the core.
            pub version: u32,
            /// Copies the calling thread's last error message (NUL-terminated, truncated to
            /// `len`); returns its full length.
            pub last_error_message: unsafe extern "C" fn(buf: *mut c_char, len: usize) -> usize,
            $(
                $(#[$doc])*
                pub $name: unsafe extern "C" fn($($arg: $cty,)* $($out: *mut $oty,)*) -> i32,
            )*
        }
    };
}

core_api!(vtable_struct);
