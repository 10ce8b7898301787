//! The front-ends' side of the fake CUDA core's vtable: finds the process's one core and wraps
//! each entry in a safe method returning [`fake_cuda_core::Result`].
//!
//! The core is the `libncclsim_cuda.so` already loaded in the process (found by its SONAME
//! with `RTLD_NOLOAD`, whichever directory it came from); else the file named by
//! `NCCLSIM_CUDA_CORE`, else `libncclsim_cuda.so` from the directory of the library this code
//! is linked into (found with `dladdr`). So all front-ends share one core whichever is loaded
//! first, even from copies in different directories.
//!
//! This crate holds the `dlopen`/`dlsym` loading and the calls through the vtable's C function
//! pointers: every method checks its arguments' contract (out-pointers are locals, C strings are
//! borrowed `CStr`s) so that callers stay in safe Rust.

use fake_cuda_core::abi::{
    self, CDeviceInfo, CDeviceTopology, CHandle, CMemHandleInfo, CPointerInfo, CStreamInfo,
    CoreApiV1,
};
use fake_cuda_core::{CoreError, Result, Status};
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::OnceLock;

/// A loaded core.
pub struct Client {
    api: &'static CoreApiV1,
}

static CLIENT: OnceLock<std::result::Result<Client, String>> = OnceLock::new();

/// The process's core, loaded on first use.
pub fn client() -> Result<&'static Client> {
    CLIENT
        .get_or_init(load)
        .as_ref()
        .map_err(|e| CoreError::Load(e.clone()))
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns null or a valid C string owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null, NUL-terminated.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Directory of the shared object (or executable) containing this function.
fn own_directory() -> Option<std::path::PathBuf> {
    // SAFETY: `Dl_info` is plain C data (pointers and integers); all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `own_directory` is code in this object; `info` is a valid out-parameter.
    let found = unsafe { libc::dladdr(own_directory as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr filled a NUL-terminated file name.
    let file = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    let path = std::fs::canonicalize(&file).unwrap_or_else(|_| file.into());
    path.parent().map(|p| p.to_path_buf())
}

/// The vtable of the core at `path`, opened with `dlopen(path, flags)`.
fn open_core(path: &str, flags: i32) -> std::result::Result<&'static CoreApiV1, String> {
    let c = CString::new(path).map_err(|_| format!("{path:?} contains NUL"))?;
    // SAFETY: valid C string; the core has no load-time side effects beyond its own statics.
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() {
        return Err(dlerror_text());
    }
    let sym = CString::new(abi::CORE_SYMBOL).expect("invariant: symbol has no NUL");
    // SAFETY: valid handle and name.
    let f = unsafe { libc::dlsym(h, sym.as_ptr()) };
    if f.is_null() {
        return Err(format!("{path}: no symbol {}", abi::CORE_SYMBOL));
    }
    // SAFETY: the symbol has this type by the contract in `abi`.
    let get: extern "C" fn() -> *const CoreApiV1 = unsafe { std::mem::transmute(f) };
    let api = get();
    if api.is_null() {
        return Err(format!("{path}: {} returned null", abi::CORE_SYMBOL));
    }
    // SAFETY: the core returns a pointer to a static table.
    let api: &'static CoreApiV1 = unsafe { &*api };
    if api.version != abi::CORE_ABI_VERSION || api.size < std::mem::size_of::<CoreApiV1>() {
        return Err(format!(
            "{path}: core ABI version {} size {}, this front-end needs {} / {}",
            api.version,
            api.size,
            abi::CORE_ABI_VERSION,
            std::mem::size_of::<CoreApiV1>()
        ));
    }
    Ok(api)
}

fn load() -> std::result::Result<Client, String> {
    // A core already in the process (found by its SONAME, whichever directory it came from)
    // is the one: a second copy would be a second, disconnected core.
    if let Ok(api) = open_core(
        abi::CORE_LIBRARY,
        libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
    ) {
        return Ok(Client { api });
    }
    let candidates: Vec<String> = match std::env::var("NCCLSIM_CUDA_CORE") {
        Ok(p) => vec![p],
        Err(_) => own_directory()
            .map(|d| d.join(abi::CORE_LIBRARY).to_string_lossy().into_owned())
            .into_iter()
            .chain([abi::CORE_LIBRARY.to_string()])
            .collect(),
    };
    let mut errors = Vec::new();
    for path in &candidates {
        match open_core(path, libc::RTLD_NOW | libc::RTLD_NODELETE) {
            Ok(api) => return Ok(Client { api }),
            Err(e) => errors.push(e),
        }
    }
    Err(errors.join("; "))
}

impl Client {
    fn check(&self, code: i32) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        let mut buf = [0 as c_char; 512];
        // SAFETY: buffer and length match.
        unsafe { (self.api.last_error_message)(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: the core NUL-terminates within `len`.
        let message = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Err(CoreError::Reported {
            status: Status::from_code(code),
            message,
        })
    }

    /// Visible device count.
    pub fn device_count(&self) -> Result<i32> {
        let mut n = 0;
        // SAFETY: valid out-pointer (same for every call below).
        self.check(unsafe { (self.api.device_count)(&mut n) })?;
        Ok(n)
    }

    /// Description of visible device `ordinal`.
    pub fn device_info(&self, ordinal: i32) -> Result<CDeviceInfo> {
        let mut d = CDeviceInfo::default();
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.device_info)(ordinal, &mut d) })?;
        Ok(d)
    }

    /// Current device of the calling thread.
    pub fn get_device(&self) -> Result<i32> {
        let mut d = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.get_device)(&mut d) })?;
        Ok(d)
    }

    /// Sets the calling thread's current device.
    pub fn set_device(&self, ordinal: i32) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.set_device)(ordinal) })
    }

    /// Device allocation.
    pub fn malloc(&self, ordinal: i32, size: usize) -> Result<usize> {
        let mut p = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.malloc)(ordinal, size, &mut p) })?;
        Ok(p)
    }

    /// Device free.
    pub fn free(&self, ptr: usize) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.free)(ptr) })
    }

    /// `(free, total)` of a device.
    pub fn mem_info(&self, ordinal: i32) -> Result<(u64, u64)> {
        let (mut f, mut t) = (0, 0);
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_info)(ordinal, &mut f, &mut t) })?;
        Ok((f, t))
    }

    /// Pinned host allocation.
    pub fn host_alloc(&self, size: usize) -> Result<usize> {
        let mut p = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.host_alloc)(size, &mut p) })?;
        Ok(p)
    }

    /// Pinned host free.
    pub fn host_free(&self, ptr: usize) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.host_free)(ptr) })
    }

    /// Registers host memory.
    pub fn host_register(&self, ptr: usize, size: usize) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.host_register)(ptr, size) })
    }

    /// Unregisters host memory.
    pub fn host_unregister(&self, ptr: usize) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.host_unregister)(ptr) })
    }

    /// What a pointer points into.
    pub fn pointer_info(&self, ptr: usize) -> Result<CPointerInfo> {
        let mut i = CPointerInfo::default();
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.pointer_info)(ptr, &mut i) })?;
        Ok(i)
    }

    /// The device buffer `ptr` points into, as the program made it.
    pub fn buffer_extent(&self, ptr: usize) -> Result<abi::CBufferExtent> {
        let mut out = abi::CBufferExtent::default();
        // SAFETY: the loader checked the table's size; `out` is a valid out-pointer.
        self.check(unsafe { (self.api.buffer_extent)(ptr, &mut out) })?;
        Ok(out)
    }

    /// Where a device allocation of this process lives (its arena memfd and offsets).
    pub fn pointer_arena(&self, ptr: usize) -> Result<abi::CArenaLocation> {
        let mut out = abi::CArenaLocation::default();
        // SAFETY: the loader checked the table's size; `out` is a valid out-pointer.
        self.check(unsafe { (self.api.pointer_arena)(ptr, &mut out) })?;
        Ok(out)
    }

    /// Stream-ordered copy.
    ///
    /// # Safety
    /// As `Core::memcpy`: host sides must be valid for the copy during this call (if the stream
    /// is capturing, at every launch of a graph made from the capture).
    pub unsafe fn memcpy(
        &self,
        dst: usize,
        src: usize,
        n: usize,
        kind: i32,
        stream: u64,
    ) -> Result<()> {
        // SAFETY: the loader checked the table's size; the host sides are this function's
        // contract.
        self.check(unsafe { (self.api.memcpy)(dst, src, n, kind, stream) })
    }

    /// Stream-ordered pitched copy.
    ///
    /// # Safety
    /// As `Core::memcpy_2d`: host sides must be valid for every row of the copy during this
    /// call (if the stream is capturing, at every launch of a graph made from the capture).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn memcpy_2d(
        &self,
        dst: usize,
        dpitch: usize,
        src: usize,
        spitch: usize,
        width: usize,
        height: usize,
        kind: i32,
        stream: u64,
    ) -> Result<()> {
        // SAFETY: the loader checked the table's size; the host sides are this function's
        // contract.
        self.check(unsafe {
            (self.api.memcpy_2d)(dst, dpitch, src, spitch, width, height, kind, stream)
        })
    }

    /// Stream-ordered fill.
    pub fn memset(&self, dst: usize, value: i32, n: usize, stream: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.memset)(dst, value, n, stream) })
    }

    /// Creates a stream.
    pub fn stream_create(&self, flags: u32, priority: i32) -> Result<u64> {
        let mut s = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.stream_create)(flags, priority, &mut s) })?;
        Ok(s)
    }

    /// Destroys a stream.
    pub fn stream_destroy(&self, stream: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.stream_destroy)(stream) })
    }

    /// Stream properties.
    pub fn stream_info(&self, stream: u64) -> Result<CStreamInfo> {
        let mut i = CStreamInfo::default();
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.stream_info)(stream, &mut i) })?;
        Ok(i)
    }

    /// Queries a stream.
    pub fn stream_query(&self, stream: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.stream_query)(stream) })
    }

    /// Waits for a stream.
    pub fn stream_synchronize(&self, stream: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.stream_synchronize)(stream) })
    }

    /// Makes a stream wait for an event.
    pub fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.stream_wait_event)(stream, event) })
    }

    /// Virtual completion time of a stream (ns).
    pub fn stream_clock(&self, stream: u64) -> Result<u64> {
        let mut c = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.stream_clock)(stream, &mut c) })?;
        Ok(c)
    }

    /// Enqueues host work (C callback) of a virtual duration.
    ///
    /// # Safety
    /// `work(data)` must be safe to call once from this thread.
    pub unsafe fn enqueue_raw(
        &self,
        stream: u64,
        duration_ns: u64,
        work: Option<abi::CWorkFn>,
        data: *mut c_void,
    ) -> Result<()> {
        // SAFETY: `work(data)` may be called once from this thread (this function's contract).
        self.check(unsafe { (self.api.enqueue)(stream, duration_ns, work, data) })
    }

    /// Enqueues host work whose argument the core owns: `release(data)` is called once when
    /// no work (and no captured graph) needs `data` any more.
    ///
    /// # Safety
    /// `work(data)` must be safe to call until `release(data)`, which must be safe to call
    /// once from any thread and must not call into the core.
    pub unsafe fn enqueue_owned(
        &self,
        stream: u64,
        duration_ns: u64,
        work: Option<abi::CWorkFn>,
        data: *mut c_void,
        release: abi::CWorkFn,
    ) -> Result<()> {
        // SAFETY: `work` and `release` keep the core's contract (this function's contract).
        self.check(unsafe { (self.api.enqueue_owned)(stream, duration_ns, work, data, release) })
    }

    /// Waits for the current device.
    pub fn device_synchronize(&self) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.device_synchronize)() })
    }

    /// Creates an event.
    pub fn event_create(&self, flags: u32) -> Result<u64> {
        let mut e = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.event_create)(flags, &mut e) })?;
        Ok(e)
    }

    /// Destroys an event.
    pub fn event_destroy(&self, event: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.event_destroy)(event) })
    }

    /// Records an event.
    pub fn event_record(&self, event: u64, stream: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.event_record)(event, stream) })
    }

    /// Queries an event.
    pub fn event_query(&self, event: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.event_query)(event) })
    }

    /// Waits for an event.
    pub fn event_synchronize(&self, event: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.event_synchronize)(event) })
    }

    /// Virtual milliseconds between events.
    pub fn event_elapsed_ms(&self, start: u64, end: u64) -> Result<f32> {
        let mut ms = 0.0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.event_elapsed_ms)(start, end, &mut ms) })?;
        Ok(ms)
    }

    /// IPC handle of an allocation.
    pub fn ipc_get_mem_handle(&self, ptr: usize) -> Result<CHandle> {
        let mut h = [0; 64];
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.ipc_get_mem_handle)(ptr, &mut h) })?;
        Ok(h)
    }

    /// Opens an IPC memory handle.
    pub fn ipc_open_mem_handle(&self, handle: &CHandle) -> Result<usize> {
        let mut p = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.ipc_open_mem_handle)(handle, &mut p) })?;
        Ok(p)
    }

    /// Closes an opened IPC pointer.
    pub fn ipc_close_mem_handle(&self, ptr: usize) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.ipc_close_mem_handle)(ptr) })
    }

    /// IPC handle of an event.
    pub fn ipc_get_event_handle(&self, event: u64) -> Result<CHandle> {
        let mut h = [0; 64];
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.ipc_get_event_handle)(event, &mut h) })?;
        Ok(h)
    }

    /// Opens an IPC event handle.
    pub fn ipc_open_event_handle(&self, handle: &CHandle) -> Result<u64> {
        let mut e = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.ipc_open_event_handle)(handle, &mut e) })?;
        Ok(e)
    }

    /// Registers a kernel name.
    pub fn register_function(&self, host_fun: usize, name: &CStr) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.register_function)(host_fun, name.as_ptr()) })
    }

    /// Counts a kernel launch.
    pub fn launch_kernel(&self, host_fun: usize, stream: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.launch_kernel)(host_fun, stream) })
    }

    /// Number of devices of the node (NVML's view, ignoring `CUDA_VISIBLE_DEVICES`).
    pub fn physical_device_count(&self) -> Result<i32> {
        let mut n = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.physical_device_count)(&mut n) })?;
        Ok(n)
    }

    /// Description of physical device `index`.
    pub fn physical_device_info(&self, index: i32) -> Result<CDeviceInfo> {
        let mut d = CDeviceInfo::default();
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.physical_device_info)(index, &mut d) })?;
        Ok(d)
    }

    /// PCI ids, NUMA node, NVLinks and PCI ancestors of physical device `index`.
    pub fn physical_device_topology(&self, index: i32) -> Result<CDeviceTopology> {
        let mut t = CDeviceTopology::default();
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.physical_device_topology)(index, &mut t) })?;
        Ok(t)
    }

    /// (Busy, clock) nanoseconds of virtual time on a physical device.
    pub fn physical_device_busy(&self, index: i32) -> Result<(u64, u64)> {
        let (mut busy, mut clock) = (0, 0);
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.physical_device_busy)(index, &mut busy, &mut clock) })?;
        Ok((busy, clock))
    }

    /// NVML topology level between two physical devices.
    pub fn topology_common_ancestor(&self, a: i32, b: i32) -> Result<u32> {
        let mut level = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.topology_common_ancestor)(a, b, &mut level) })?;
        Ok(level)
    }

    /// Starts capturing a stream.
    pub fn begin_capture(&self, stream: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.begin_capture)(stream) })
    }

    /// Ends a capture; returns its graph.
    pub fn end_capture(&self, stream: u64) -> Result<u64> {
        let mut g = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.end_capture)(stream, &mut g) })?;
        Ok(g)
    }

    /// (status 0/1, capture id, graph) of a stream.
    pub fn capture_info(&self, stream: u64) -> Result<(u32, u64, u64)> {
        let (mut s, mut i, mut g) = (0, 0, 0);
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.capture_info)(stream, &mut s, &mut i, &mut g) })?;
        Ok((s, i, g))
    }

    /// Creates an empty graph.
    pub fn graph_create(&self) -> Result<u64> {
        let mut g = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.graph_create)(&mut g) })?;
        Ok(g)
    }

    /// Destroys a graph.
    pub fn graph_destroy(&self, graph: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.graph_destroy)(graph) })
    }

    /// Number of nodes of a graph.
    pub fn graph_node_count(&self, graph: u64) -> Result<usize> {
        let mut n = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.graph_node_count)(graph, &mut n) })?;
        Ok(n)
    }

    /// Writes a graph as Graphviz DOT to `path`.
    pub fn graph_write_dot(&self, graph: u64, path: &CStr) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.graph_write_dot)(graph, path.as_ptr()) })
    }

    /// Instantiates a graph.
    pub fn graph_instantiate(&self, graph: u64) -> Result<u64> {
        let mut e = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.graph_instantiate)(graph, &mut e) })?;
        Ok(e)
    }

    /// Destroys an executable graph.
    pub fn graph_exec_destroy(&self, exec: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.graph_exec_destroy)(exec) })
    }

    /// Replays an executable graph on a stream.
    pub fn graph_launch(&self, exec: u64, stream: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.graph_launch)(exec, stream) })
    }

    /// Frees every allocation of a visible device.
    pub fn device_reset(&self, ordinal: i32) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.device_reset)(ordinal) })
    }

    /// Gives the pages of a device's freed memory back; returns the bytes trimmed.
    pub fn trim_device(&self, ordinal: i32) -> Result<u64> {
        let mut n = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.trim_device)(ordinal, &mut n) })?;
        Ok(n)
    }

    /// `cuMemCreate` on visible device `ordinal`; returns the allocation handle.
    pub fn mem_create(&self, ordinal: i32, size: u64, handle_types: u32) -> Result<u64> {
        let mut h = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_create)(ordinal, size, handle_types, &mut h) })?;
        Ok(h)
    }

    /// `cuMemRelease`.
    pub fn mem_release(&self, handle: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_release)(handle) })
    }

    /// `cuMemAddressReserve`; returns the start of the range.
    pub fn mem_address_reserve(&self, size: usize, alignment: usize, hint: usize) -> Result<usize> {
        let mut p = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_address_reserve)(size, alignment, hint, &mut p) })?;
        Ok(p)
    }

    /// `cuMemAddressFree`.
    pub fn mem_address_free(&self, ptr: usize, size: usize) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_address_free)(ptr, size) })
    }

    /// `cuMemMap`.
    pub fn mem_map(&self, ptr: usize, size: usize, offset: u64, handle: u64) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_map)(ptr, size, offset, handle) })
    }

    /// `cuMemUnmap`.
    pub fn mem_unmap(&self, ptr: usize, size: usize) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_unmap)(ptr, size) })
    }

    /// `cuMemSetAccess` for one device.
    pub fn mem_set_access(&self, ptr: usize, size: usize, ordinal: i32, flags: u32) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_set_access)(ptr, size, ordinal, flags) })
    }

    /// `cuMemGetAccess` for one device.
    pub fn mem_get_access(&self, ptr: usize, ordinal: i32) -> Result<u32> {
        let mut f = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_get_access)(ptr, ordinal, &mut f) })?;
        Ok(f)
    }

    /// `cuMemExportToShareableHandle`: a file descriptor the caller owns.
    pub fn mem_export(&self, handle: u64) -> Result<i32> {
        let mut fd = -1;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_export)(handle, &mut fd) })?;
        Ok(fd)
    }

    /// `cuMemImportFromShareableHandle` of a file descriptor (kept by the caller).
    pub fn mem_import(&self, fd: i32) -> Result<u64> {
        let mut h = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_import)(fd, &mut h) })?;
        Ok(h)
    }

    /// `cuMemRetainAllocationHandle`.
    pub fn mem_retain(&self, ptr: usize) -> Result<u64> {
        let mut h = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_retain)(ptr, &mut h) })?;
        Ok(h)
    }

    /// `cuMemGetAllocationPropertiesFromHandle`.
    pub fn mem_handle_info(&self, handle: u64) -> Result<CMemHandleInfo> {
        let mut i = CMemHandleInfo::default();
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.mem_handle_info)(handle, &mut i) })?;
        Ok(i)
    }

    /// Stream-ordered fill of `count` elements of `elem_size` bytes with `pattern`.
    pub fn memset_pattern(
        &self,
        dst: usize,
        pattern: u64,
        elem_size: u32,
        count: usize,
        stream: u64,
    ) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.memset_pattern)(dst, pattern, elem_size, count, stream) })
    }

    /// The stream whose host work is running on this thread (the launch stream for a replay).
    pub fn host_stream(&self) -> Result<u64> {
        let mut s = 0;
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.host_stream)(&mut s) })?;
        Ok(s)
    }

    /// Bytes allocated now and at most so far on a visible device.
    pub fn memory_stats(&self, ordinal: i32) -> Result<(u64, u64)> {
        let (mut current, mut peak) = (0, 0);
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.memory_stats)(ordinal, &mut current, &mut peak) })?;
        Ok((current, peak))
    }

    /// Opens (`Some(true)`), closes (`Some(false)`) or queries (`None`) the profiler range;
    /// returns the ranges started so far and whether one is open.
    pub fn profiler(&self, op: Option<bool>) -> Result<(u64, bool)> {
        let (mut ranges, mut active) = (0, 0);
        let op = op.map_or(-1, i32::from);
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe { (self.api.profiler)(op, &mut ranges, &mut active) })?;
        Ok((ranges, active != 0))
    }

    /// Adds or replaces a named section (JSON text) of the end-of-run report; with
    /// `write_now` the report file is written at once.
    pub fn report_section(&self, name: &CStr, json: &CStr, write_now: bool) -> Result<()> {
        // SAFETY: a core entry, given live locals or borrowed arguments as its pointers.
        self.check(unsafe {
            (self.api.report_section)(name.as_ptr(), json.as_ptr(), i32::from(write_now))
        })
    }
}
