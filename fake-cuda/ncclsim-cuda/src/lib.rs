//! `libncclsim_cuda.so`: the one fake CUDA core of a process.
//!
//! This shared object owns the process's only [`Core`] and exports `ncclsim_cuda_core_v1`,
//! returning the static vtable of [`fake_cuda_core::abi`], and `ncclsim_compute_launch`, the
//! compute model's priced launch for callers without the vtable (ncclsim's Python package). Every
//! front-end (`libcudart.so.12`, later `.13`, `libcuda.so.1`, `libnvidia-ml.so.1`,
//! `libnccl.so.2`) `dlopen`s this file from its own directory, and the dynamic loader maps a
//! file once per process, so whichever library a program loads first, they all share this
//! state.
//!
//! Each vtable entry is written with `core_fn!` (the workspace's one C boundary,
//! `ffi_boundary::ffi_fn!`): it catches panics, checks out-pointers, records the calling
//! thread's last error message and returns a [`Status`] code.

use fake_cuda_core::abi::{
    CArenaLocation, CBufferExtent, CDeviceInfo, CDeviceTopology, CHandle, CMemHandleInfo, CNvLink,
    CPointerInfo, CStreamInfo, CWorkFn, CoreApiV1, CORE_ABI_VERSION, MAX_NVLINKS,
    MAX_PCI_ANCESTORS,
};
use fake_cuda_core::device::{common_ancestor, NvLinkPeer};
use fake_cuda_core::{CopyKind, Core, CoreError, DeviceDesc, PciBusId, Status};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;
use std::sync::OnceLock;

mod single;

static CORE: OnceLock<Result<Core, CoreError>> = OnceLock::new();

/// The process's core, created from the environment on first use. With `NCCLSIM_REPORT=file`
/// a JSON report is written to `file` when the process exits. If the environment names a
/// topology that cannot be used, or if another copy of this library is loaded in the process,
/// every call fails with that error (printed once).
pub fn core() -> Result<&'static Core, CoreError> {
    CORE.get_or_init(|| {
        let others = single::other_cores();
        if !others.is_empty() {
            let e = CoreError::Load(format!(
                "another copy of libncclsim_cuda.so is loaded in this process ({}); two cores \
                 would not know each other's devices and memory, so this one refuses to start \
                 (keep the fake CUDA libraries in one directory)",
                others.join(", ")
            ));
            eprintln!("ncclsim: {e}");
            return Err(e);
        }
        let core = Core::from_env();
        match &core {
            Ok(_) if std::env::var_os("NCCLSIM_REPORT").is_some() => {
                // SAFETY: registering a plain extern "C" function; this library is never
                // unloaded (front-ends open it with RTLD_NODELETE).
                unsafe { libc::atexit(write_report) };
            }
            Ok(_) => {}
            Err(e) => eprintln!("ncclsim: no fake CUDA devices: {e}"),
        }
        core
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// API calls by vtable entry name.
static CALLS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

fn count_call(name: &'static str) {
    *CALLS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(name)
        .or_default() += 1;
}

/// Named sections other libraries added to the report (`report_section`), by name.
static SECTIONS: Mutex<BTreeMap<String, serde_json::Value>> = Mutex::new(BTreeMap::new());

/// Profiler ranges started so far (`cudaProfilerStart`) and whether one is open.
static PROFILER: Mutex<(u64, bool)> = Mutex::new((0, false));

/// `NCCLSIM_REPORT`'s file name with `%h` (short host name) and `%p` (process id) replaced, as
/// NCCL does for `NCCL_DEBUG_FILE`.
fn report_path(template: &str) -> String {
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` has room for `len` bytes; gethostname NUL-terminates on success.
    let host = if unsafe { libc::gethostname(buf.as_mut_ptr(), buf.len() - 1) } == 0 {
        // SAFETY: NUL-terminated within the buffer (its last byte stays 0).
        let name = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
        // NCCL's host name: up to the first dot.
        name.split('.').next().unwrap_or("localhost").to_string()
    } else {
        "localhost".into()
    };
    template
        .replace("%h", &host)
        .replace("%p", &std::process::id().to_string())
}

/// The report as JSON: the core's figures, the profiler ranges and every added section.
fn report_json() -> Result<serde_json::Value, CoreError> {
    let calls = CALLS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    let report = core()?.report(calls);
    let mut v = serde_json::to_value(&report)
        .map_err(|e| CoreError::InvalidValue(format!("report: {e}")))?;
    if let Some(o) = v.as_object_mut() {
        let ranges = PROFILER.lock().unwrap_or_else(|p| p.into_inner()).0;
        o.insert("profiler_ranges".into(), ranges.into());
        // The core's own figures keep their names whatever a section is called.
        for (name, section) in SECTIONS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            o.entry(name.clone()).or_insert_with(|| section.clone());
        }
    }
    Ok(v)
}

/// Writes the report to `NCCLSIM_REPORT` (if set). Also the body of the `atexit` handler, so a
/// panic ends here (the report is then not written).
fn write_report_now() {
    let Some(template) = std::env::var_os("NCCLSIM_REPORT") else {
        return;
    };
    let path = report_path(&template.to_string_lossy());
    ffi_boundary::callback::<VtableError, ()>(
        "write_report",
        || (),
        || {
            let Ok(v) = report_json() else { return };
            let text = serde_json::to_string_pretty(&v).expect("report serialises");
            // Written whole to a temporary name and renamed, so a reader never sees half a report.
            let tmp = format!("{path}.{}.tmp", std::process::id());
            let written =
                std::fs::write(&tmp, text + "\n").and_then(|_| std::fs::rename(&tmp, &path));
            if let Err(e) = written {
                let _ = std::fs::remove_file(&tmp);
                eprintln!("ncclsim: cannot write NCCLSIM_REPORT {path}: {e}");
            }
        },
    );
}

extern "C" fn write_report() {
    write_report_now();
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A core error at the vtable's C boundary: its [`Status`] is the code, its text the calling
/// thread's last error message (`last_error_message`).
struct VtableError(CoreError);

impl std::fmt::Display for VtableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl ffi_boundary::FfiError for VtableError {
    /// The front-ends print what the core returns them.
    const LIBRARY: ffi_boundary::Library =
        ffi_boundary::Library::new("libncclsim_cuda", Status::Internal as i32).silent();

    fn code(&self) -> i32 {
        self.0.status() as i32
    }

    /// Failures and panics set the thread's last error message; successes keep it.
    fn record(_function: &'static str, outcome: ffi_boundary::Outcome<'_, Self>) {
        let message = match outcome {
            ffi_boundary::Outcome::Success => return,
            ffi_boundary::Outcome::Failure(e) => e.to_string(),
            ffi_boundary::Outcome::Panic(what) => format!("internal error (panic): {what}"),
        };
        LAST_ERROR.with(|m| *m.borrow_mut() = message);
    }
}

/// Writes through an out-pointer, failing with `InvalidValue` if it is null.
fn put<T>(out: *mut T, value: T) -> Result<(), CoreError> {
    // The caller promises a non-null `out` points to a writable `T`.
    ffi_boundary::non_null!(*out = value; else CoreError::InvalidValue("null output pointer".into()));
    Ok(())
}

/// Defines a vtable entry inside the C boundary ([`ffi_boundary::ffi_fn!`] with
/// `VtableError`): `unsafe extern "C"`, panic-safe, counted, returning a [`Status`] code.
macro_rules! core_fn {
    ($name:ident ( $($arg:ident : $ty:ty),* ) $body:block) => {
        ffi_boundary::ffi_fn!(VtableError; fn $name($($arg: $ty),*) {
            count_call(stringify!($name));
            (move || -> Result<(), CoreError> { $body })().map_err(VtableError)
        });
    };
}

ffi_boundary::ffi_fn!(VtableError; fn last_error_message(buf: *mut c_char, len: usize) -> usize {
    LAST_ERROR.with(|m| {
        let m = m.borrow();
        if !buf.is_null() && len > 0 {
            let n = m.len().min(len - 1);
            // SAFETY: `buf` has room for `len` bytes by contract; we write n + 1 <= len.
            unsafe {
                std::ptr::copy_nonoverlapping(m.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        m.len()
    })
});

core_fn!(device_count(out: *mut i32) { put(out, core()?.device_count() as i32) });

/// The C form of a device description.
fn device_info_of(d: &DeviceDesc, physical_index: usize) -> CDeviceInfo {
    let mut c = CDeviceInfo::default();
    for (dst, src) in c.name.iter_mut().zip(d.name.bytes().take(255)) {
        *dst = src as c_char;
    }
    c.uuid = d.uuid;
    c.pci = pci_words(d.pci);
    c.sm_major = d.sm_major() as i32;
    c.sm_minor = d.sm_minor() as i32;
    c.total_memory = d.memory_bytes;
    c.multiprocessor_count = d.multiprocessor_count as i32;
    c.clock_khz = d.clock_khz as i32;
    c.memory_clock_khz = d.memory_clock_khz as i32;
    c.memory_bus_width = d.memory_bus_width_bits as i32;
    c.l2_cache_bytes = d.l2_cache_bytes as i32;
    c.shared_mem_per_multiprocessor = d.shared_mem_per_multiprocessor as i32;
    c.shared_mem_per_block_optin = d.shared_mem_per_block_optin as i32;
    c.physical_index = physical_index as i32;
    c
}

fn pci_words(p: PciBusId) -> [u32; 4] {
    [p.domain, p.bus, p.device, p.function]
}

fn physical(index: i32) -> Result<(usize, &'static DeviceDesc), CoreError> {
    let i = usize::try_from(index).map_err(|_| CoreError::InvalidDevice {
        ordinal: index,
        visible: 0,
    })?;
    Ok((i, core()?.physical_device(i)?))
}

core_fn!(device_info(ordinal: i32, out: *mut CDeviceInfo) {
    let c = core()?;
    put(out, device_info_of(c.device(ordinal)?, c.physical_index(ordinal)?))
});

core_fn!(physical_device_count(out: *mut i32) {
    put(out, core()?.physical_device_count() as i32)
});

core_fn!(physical_device_info(index: i32, out: *mut CDeviceInfo) {
    let (i, d) = physical(index)?;
    put(out, device_info_of(d, i))
});

core_fn!(physical_device_topology(index: i32, out: *mut CDeviceTopology) {
    let (_, d) = physical(index)?;
    let mut t = CDeviceTopology {
        pci_device_id: d.pci_device_id,
        pci_subsystem_id: d.pci_subsystem_id,
        numa_node: d.numa_node,
        nvlink_count: d.nvlinks.len().min(MAX_NVLINKS) as u32,
        pci_ancestor_count: d.pci_ancestors.len().min(MAX_PCI_ANCESTORS) as u32,
        ..CDeviceTopology::default()
    };
    for (dst, l) in t.nvlinks.iter_mut().zip(&d.nvlinks) {
        let (peer_kind, peer_gpu) = match l.peer {
            NvLinkPeer::Gpu(g) => (0, g as i32),
            NvLinkPeer::Switch => (1, -1),
            NvLinkPeer::Cpu => (2, -1),
        };
        *dst = CNvLink { remote_pci: pci_words(l.remote), peer_kind, peer_gpu };
    }
    for (dst, p) in t.pci_ancestors.iter_mut().zip(&d.pci_ancestors) {
        *dst = pci_words(*p);
    }
    put(out, t)
});

core_fn!(topology_common_ancestor(a: i32, b: i32, out: *mut u32) {
    let (_, da) = physical(a)?;
    let (_, db) = physical(b)?;
    put(out, common_ancestor(da, db) as u32)
});

core_fn!(physical_device_busy(index: i32, busy: *mut u64, clock: *mut u64) {
    let (i, _) = physical(index)?;
    let (b, c) = core()?.physical_device_busy(i);
    put(busy, b)?;
    put(clock, c)
});

core_fn!(get_device(out: *mut i32) { put(out, core()?.current_device()) });
core_fn!(set_device(ordinal: i32) { core()?.set_device(ordinal) });

core_fn!(malloc(ordinal: i32, size: usize, out: *mut usize) {
    if out.is_null() {
        return Err(CoreError::InvalidValue("null output pointer".into()));
    }
    put(out, core()?.malloc(ordinal, size)?)
});
core_fn!(free(ptr: usize) { core()?.free(ptr) });
core_fn!(mem_info(ordinal: i32, free: *mut u64, total: *mut u64) {
    let (f, t) = core()?.mem_info(ordinal)?;
    put(free, f)?;
    put(total, t)
});
core_fn!(host_alloc(size: usize, out: *mut usize) {
    if out.is_null() {
        return Err(CoreError::InvalidValue("null output pointer".into()));
    }
    put(out, core()?.host_alloc(size)?)
});
core_fn!(host_free(ptr: usize) { core()?.host_free(ptr) });
core_fn!(host_register(ptr: usize, size: usize) { core()?.host_register(ptr, size) });
core_fn!(host_unregister(ptr: usize) { core()?.host_unregister(ptr) });
core_fn!(pointer_info(ptr: usize, out: *mut CPointerInfo) {
    let i = core()?.pointer_info(ptr);
    put(out, CPointerInfo { kind: i.kind as i32, device: i.device, base: i.base, size: i.size })
});

core_fn!(buffer_extent(ptr: usize, out: *mut CBufferExtent) {
    put(out, core()?.buffer_extent(ptr))
});

core_fn!(pointer_arena(ptr: usize, out: *mut CArenaLocation) {
    put(out, core()?.arena_location(ptr)?)
});

core_fn!(memcpy(dst: usize, src: usize, n: usize, kind: i32, stream: u64) {
    let kind = CopyKind::from_raw(kind)?;
    // SAFETY: the vtable contract of `memcpy` is the contract of the core method.
    unsafe { core()?.memcpy(dst, src, n, kind, stream) }
});
core_fn!(memcpy_2d(dst: usize, dpitch: usize, src: usize, spitch: usize, width: usize,
                   height: usize, kind: i32, stream: u64) {
    let kind = CopyKind::from_raw(kind)?;
    // SAFETY: the vtable contract of `memcpy_2d` is the contract of the core method.
    unsafe { core()?.memcpy_2d(dst, dpitch, src, spitch, width, height, kind, stream) }
});
core_fn!(memset(dst: usize, value: i32, n: usize, stream: u64) {
    core()?.memset(dst, value as u8, n, stream)
});

core_fn!(stream_create(flags: u32, priority: i32, out: *mut u64) {
    if out.is_null() {
        return Err(CoreError::InvalidValue("null output pointer".into()));
    }
    put(out, core()?.stream_create(flags, priority)?)
});
core_fn!(stream_destroy(stream: u64) { core()?.stream_destroy(stream) });
core_fn!(stream_info(stream: u64, out: *mut CStreamInfo) {
    let i = core()?.stream_info(stream)?;
    put(out, CStreamInfo { device: i.device as i32, flags: i.flags, priority: i.priority })
});
core_fn!(stream_query(stream: u64) { core()?.stream_query(stream) });
core_fn!(stream_synchronize(stream: u64) { core()?.stream_synchronize(stream) });
core_fn!(stream_wait_event(stream: u64, event: u64) { core()?.stream_wait_event(stream, event) });
core_fn!(stream_clock(stream: u64, out: *mut u64) { put(out, core()?.stream_clock(stream)?) });
core_fn!(enqueue(stream: u64, duration_ns: u64, work: Option<CWorkFn>, data: *mut c_void) {
    // SAFETY: the vtable contract of `enqueue` is the contract of the core method.
    unsafe { core()?.enqueue_host(stream, duration_ns, work, data as usize) }
});
core_fn!(enqueue_owned(stream: u64, duration_ns: u64, work: Option<CWorkFn>, data: *mut c_void,
                       release: CWorkFn) {
    // SAFETY: the vtable contract of `enqueue_owned` is the contract of the core method.
    unsafe { core()?.enqueue_host_owned(stream, duration_ns, work, data as usize, release) }
});
core_fn!(device_synchronize() { core()?.device_synchronize() });

core_fn!(event_create(flags: u32, out: *mut u64) { put(out, core()?.event_create(flags)) });
core_fn!(event_destroy(event: u64) { core()?.event_destroy(event) });
core_fn!(event_record(event: u64, stream: u64) { core()?.event_record(event, stream) });
core_fn!(event_query(event: u64) { core()?.event_query(event) });
core_fn!(event_synchronize(event: u64) { core()?.event_synchronize(event) });
core_fn!(event_elapsed_ms(start: u64, end: u64, out: *mut f32) {
    if out.is_null() {
        return Err(CoreError::InvalidValue("null output pointer".into()));
    }
    put(out, core()?.event_elapsed_ms(start, end)?)
});

core_fn!(ipc_get_mem_handle(ptr: usize, out: *mut CHandle) {
    if out.is_null() {
        return Err(CoreError::InvalidValue("null output pointer".into()));
    }
    put(out, core()?.ipc_get_mem_handle(ptr)?)
});
core_fn!(ipc_open_mem_handle(handle: *const CHandle, out: *mut usize) {
    if handle.is_null() || out.is_null() {
        return Err(CoreError::InvalidValue("null handle or output pointer".into()));
    }
    // SAFETY: non-null; points to 64 readable bytes by contract.
    let h = unsafe { *handle };
    put(out, core()?.ipc_open_mem_handle(&h)?)
});
core_fn!(ipc_close_mem_handle(ptr: usize) { core()?.ipc_close_mem_handle(ptr) });
core_fn!(ipc_get_event_handle(event: u64, out: *mut CHandle) {
    if out.is_null() {
        return Err(CoreError::InvalidValue("null output pointer".into()));
    }
    put(out, core()?.ipc_get_event_handle(event)?)
});
core_fn!(ipc_open_event_handle(handle: *const CHandle, out: *mut u64) {
    if handle.is_null() || out.is_null() {
        return Err(CoreError::InvalidValue("null handle or output pointer".into()));
    }
    // SAFETY: non-null; points to 64 readable bytes by contract.
    let h = unsafe { *handle };
    put(out, core()?.ipc_open_event_handle(&h)?)
});

core_fn!(register_function(host_fun: usize, name: *const c_char) {
    let name = if name.is_null() {
        format!("<unnamed kernel at {host_fun:#x}>")
    } else {
        // SAFETY: non-null C string by contract.
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    };
    core()?.register_function(host_fun, &name);
    Ok(())
});
core_fn!(launch_kernel(host_fun: usize, stream: u64) { core()?.launch_kernel(host_fun, stream) });

core_fn!(begin_capture(stream: u64) { core()?.begin_capture(stream) });
core_fn!(end_capture(stream: u64, graph: *mut u64) { put(graph, core()?.end_capture(stream)?) });
core_fn!(capture_info(stream: u64, status: *mut u32, id: *mut u64, graph: *mut u64) {
    let (s, i, g) = core()?.capture_info(stream)?;
    put(status, s as u32)?;
    put(id, i)?;
    put(graph, g)
});
core_fn!(graph_create(out: *mut u64) { put(out, core()?.graph_create()) });
core_fn!(graph_destroy(graph: u64) { core()?.graph_destroy(graph) });
core_fn!(graph_node_count(graph: u64, out: *mut usize) {
    put(out, core()?.graph_ops(graph)?.len())
});
core_fn!(graph_write_dot(graph: u64, path: *const c_char) {
    if path.is_null() {
        return Err(CoreError::InvalidValue("null path".into()));
    }
    // SAFETY: non-null C string by contract.
    let path = unsafe { CStr::from_ptr(path) }.to_string_lossy().into_owned();
    let ops = core()?.graph_ops(graph)?;
    let mut dot = format!("digraph graph_{graph:x} {{\n");
    for (i, op) in ops.iter().enumerate() {
        dot += &format!("  n{i} [label=\"{}\"];\n", op.label());
        if i > 0 {
            dot += &format!("  n{} -> n{i};\n", i - 1);
        }
    }
    dot += "}\n";
    std::fs::write(&path, dot).map_err(|e| CoreError::InvalidValue(format!("{path}: {e}")))
});
core_fn!(graph_instantiate(graph: u64, out: *mut u64) {
    put(out, core()?.graph_instantiate(graph)?)
});
core_fn!(graph_exec_destroy(exec: u64) { core()?.graph_exec_destroy(exec) });
core_fn!(graph_launch(exec: u64, stream: u64) { core()?.graph_launch(exec, stream) });
core_fn!(device_reset(ordinal: i32) { core()?.device_reset(ordinal) });
core_fn!(trim_device(ordinal: i32, trimmed: *mut u64) { put(trimmed, core()?.trim(ordinal)?) });
core_fn!(mem_create(ordinal: i32, size: u64, handle_types: u32, out: *mut u64) {
    put(out, core()?.mem_create(ordinal, size, handle_types)?)
});
core_fn!(mem_release(handle: u64) { core()?.mem_release(handle) });
core_fn!(mem_address_reserve(size: usize, alignment: usize, hint: usize, out: *mut usize) {
    put(out, core()?.mem_address_reserve(size, alignment, hint)?)
});
core_fn!(mem_address_free(ptr: usize, size: usize) { core()?.mem_address_free(ptr, size) });
core_fn!(mem_map(ptr: usize, size: usize, offset: u64, handle: u64) {
    core()?.mem_map(ptr, size, offset, handle)
});
core_fn!(mem_unmap(ptr: usize, size: usize) { core()?.mem_unmap(ptr, size) });
core_fn!(mem_set_access(ptr: usize, size: usize, ordinal: i32, flags: u32) {
    core()?.mem_set_access(ptr, size, ordinal, flags)
});
core_fn!(mem_get_access(ptr: usize, ordinal: i32, out: *mut u32) {
    put(out, core()?.mem_get_access(ptr, ordinal)?)
});
core_fn!(mem_export(handle: u64, out_fd: *mut i32) {
    if out_fd.is_null() {
        return Err(CoreError::InvalidValue("null output pointer".into()));
    }
    let fd = core()?.mem_export(handle)?;
    put(out_fd, std::os::fd::IntoRawFd::into_raw_fd(fd))
});
core_fn!(mem_import(fd: i32, out: *mut u64) { put(out, core()?.mem_import(fd)?) });
core_fn!(mem_retain(ptr: usize, out: *mut u64) { put(out, core()?.mem_retain(ptr)?) });
core_fn!(mem_handle_info(handle: u64, out: *mut CMemHandleInfo) {
    let c = core()?;
    let i = c.mem_handle_info(handle)?;
    put(out, CMemHandleInfo {
        device: c.ordinal_of_physical(i.physical),
        handle_types: i.handle_types,
        size: i.size,
    })
});
core_fn!(memset_pattern(dst: usize, pattern: u64, elem_size: u32, count: usize, stream: u64) {
    core()?.memset_pattern(dst, pattern, elem_size as usize, count, stream)
});
core_fn!(host_stream(out: *mut u64) {
    let s = Core::host_stream()
        .ok_or_else(|| CoreError::InvalidValue("no host work is running on this thread".into()))?;
    put(out, s)
});
core_fn!(memory_stats(ordinal: i32, current: *mut u64, peak: *mut u64) {
    let stats = core()?.memory_stats();
    let m = usize::try_from(ordinal)
        .ok()
        .and_then(|o| stats.get(o).copied())
        .ok_or(CoreError::InvalidDevice { ordinal, visible: stats.len() })?;
    put(current, m.current)?;
    put(peak, m.peak)
});
core_fn!(profiler(op: i32, ranges: *mut u64, active: *mut i32) {
    let (n, on) = {
        let mut p = PROFILER.lock().unwrap_or_else(|p| p.into_inner());
        match op {
            1 if !p.1 => *p = (p.0 + 1, true),
            0 => p.1 = false,
            _ => {}
        }
        *p
    };
    put(ranges, n)?;
    put(active, i32::from(on))
});
core_fn!(report_section(name: *const c_char, json: *const c_char, write_now: i32) {
    let text = |p: *const c_char, what: &str| -> Result<String, CoreError> {
        if p.is_null() {
            return Err(CoreError::InvalidValue(format!("report section {what} is NULL")));
        }
        // SAFETY: a non-null NUL-terminated string by the vtable contract.
        Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let name = text(name, "name")?;
    const CORE_KEYS: [&str; 5] = ["devices", "calls", "kernel_launches", "streams", "profiler_ranges"];
    if name.is_empty() || CORE_KEYS.contains(&name.as_str()) {
        return Err(CoreError::InvalidValue(format!("report section name {name:?} is taken")));
    }
    let value: serde_json::Value = serde_json::from_str(&text(json, "text")?)
        .map_err(|e| CoreError::InvalidValue(format!("report section {name}: not JSON: {e}")))?;
    SECTIONS.lock().unwrap_or_else(|p| p.into_inner()).insert(name, value);
    if write_now != 0 {
        write_report_now();
    }
    Ok(())
});

static API: CoreApiV1 = CoreApiV1 {
    size: std::mem::size_of::<CoreApiV1>(),
    version: CORE_ABI_VERSION,
    last_error_message,
    device_count,
    device_info,
    get_device,
    set_device,
    malloc,
    free,
    mem_info,
    host_alloc,
    host_free,
    host_register,
    host_unregister,
    pointer_info,
    memcpy,
    memcpy_2d,
    memset,
    stream_create,
    stream_destroy,
    stream_info,
    stream_query,
    stream_synchronize,
    stream_wait_event,
    stream_clock,
    enqueue,
    device_synchronize,
    event_create,
    event_destroy,
    event_record,
    event_query,
    event_synchronize,
    event_elapsed_ms,
    ipc_get_mem_handle,
    ipc_open_mem_handle,
    ipc_close_mem_handle,
    ipc_get_event_handle,
    ipc_open_event_handle,
    register_function,
    launch_kernel,
    physical_device_count,
    physical_device_info,
    physical_device_topology,
    topology_common_ancestor,
    begin_capture,
    end_capture,
    capture_info,
    graph_create,
    graph_destroy,
    graph_node_count,
    graph_write_dot,
    graph_instantiate,
    graph_exec_destroy,
    graph_launch,
    device_reset,
    pointer_arena,
    enqueue_owned,
    trim_device,
    mem_create,
    mem_release,
    mem_address_reserve,
    mem_address_free,
    mem_map,
    mem_unmap,
    mem_set_access,
    mem_get_access,
    mem_export,
    mem_import,
    mem_retain,
    mem_handle_info,
    memset_pattern,
    host_stream,
    memory_stats,
    profiler,
    report_section,
    buffer_extent,
    physical_device_busy,
};

ffi_boundary::ffi_fn!(VtableError; export
    /// The core's vtable.
    fn ncclsim_cuda_core_v1() -> *const CoreApiV1 {
        &API
    }
);

ffi_boundary::ffi_fn!(VtableError; export
    /// Compute priced by the compute model, for programs without the vtable (ncclsim's Python
    /// package calls it through ctypes): `flops` of arithmetic on the units of `unit` (0 vector,
    /// 1 tensor) in `precision` (`compute_model::Precision::from_code`) and `bytes` of memory
    /// traffic occupy `stream` of the current device for their modelled time and count one
    /// launch of `name` (NUL-terminated); writes the virtual start and duration (ns) and the
    /// open `cudaProfilerStart` range's index (-1 outside one).
    fn ncclsim_compute_launch(
        stream: u64,
        flops: f64,
        bytes: f64,
        unit: i32,
        precision: i32,
        name: *const c_char,
        out_start_ns: *mut u64,
        out_ns: *mut u64,
        out_range: *mut i64,
    ) {
        count_call("compute_launch");
        let p = compute_model::Precision::from_code(precision)
            .ok_or_else(|| VtableError(CoreError::InvalidValue(format!("precision code {precision}"))))?;
        let unit = match unit {
            0 => compute_model::Unit::Vector(p),
            1 => compute_model::Unit::Tensor(p),
            u => return Err(VtableError(CoreError::InvalidValue(format!("unit code {u}")))),
        };
        if name.is_null() {
            return Err(VtableError(CoreError::InvalidValue("null kernel name".into())));
        }
        // SAFETY: the caller passes a NUL-terminated string, checked non-null above.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let cost = compute_model::KernelCost { flops, bytes, unit };
        let (start, end) = core()
            .and_then(|c| c.launch_priced(stream, &cost, &name))
            .map_err(VtableError)?;
        let (ranges, active) = *PROFILER.lock().unwrap_or_else(|p| p.into_inner());
        let range = if active { ranges as i64 - 1 } else { -1 };
        put(out_start_ns, start)
            .and_then(|()| put(out_ns, end - start))
            .and_then(|()| put(out_range, range))
            .map_err(VtableError)
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vtable_reports_errors_with_messages() {
        // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
        let api = unsafe { &*ncclsim_cuda_core_v1() };
        let mut n = 0;
        // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
        assert_eq!(unsafe { (api.device_count)(&mut n) }, 0);
        assert!(n >= 0);
        assert_eq!(
            // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
            unsafe { (api.set_device)(1000) },
            Status::InvalidDevice as i32
        );
        let mut buf = [0 as c_char; 128];
        // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
        let len = unsafe { (api.last_error_message)(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
        let msg = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
        assert!(msg.contains("1000"), "{msg}");
        assert_eq!(len, msg.len());
        assert_eq!(
            // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
            unsafe { (api.device_count)(std::ptr::null_mut()) },
            Status::InvalidValue as i32
        );
    }
    #[test]
    fn report_sections_join_the_report_and_profiler_ranges_are_counted() {
        // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
        let api = unsafe { &*ncclsim_cuda_core_v1() };
        let section = |name: &CStr, json: &CStr| {
            // SAFETY: valid NUL-terminated strings; no file is written (write_now 0).
            unsafe { (api.report_section)(name.as_ptr(), json.as_ptr(), 0) }
        };
        assert_eq!(section(c"extra", c"{\"n\": 3}"), 0);
        assert_eq!(
            section(c"devices", c"{}"),
            Status::InvalidValue as i32,
            "core key"
        );
        assert_eq!(section(c"bad", c"{not json"), Status::InvalidValue as i32);
        // SAFETY: a null name is refused, not read.
        let null = unsafe { (api.report_section)(std::ptr::null(), c"1".as_ptr(), 0) };
        assert_eq!(null, Status::InvalidValue as i32);
        let (mut ranges, mut active) = (0u64, 0i32);
        for op in [1, 1, 0, 1, -1] {
            // SAFETY: valid out-pointers.
            assert_eq!(unsafe { (api.profiler)(op, &mut ranges, &mut active) }, 0);
        }
        // A start inside an open range does not open another one.
        assert_eq!((ranges, active), (2, 1));
        let v = report_json().expect("report");
        assert_eq!(v["extra"]["n"], 3);
        assert_eq!(v["profiler_ranges"], 2);
        assert!(v["devices"].is_array() && v.get("bad").is_none());
        let mut s = 0;
        // SAFETY: valid out-pointer; no host work runs on this thread.
        let outside = unsafe { (api.host_stream)(&mut s) };
        assert_eq!(outside, Status::InvalidValue as i32);
    }
}
