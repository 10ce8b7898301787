//! The body of each vtable entry: its inputs (pointer arguments already checked and
//! borrowed) to its outputs, on the process's core. The C entries around these bodies and the
//! static table are generated in `lib.rs` from the entry list
//! ([`fake_cuda_abi::core_api!`]), which each body's signature must match.

use crate::{core, write_report_now, SECTIONS};
use fake_cuda_abi::{
    CArenaLocation, CBufferExtent, CDeviceInfo, CDeviceTopology, CHandle, CMemHandleInfo, CNvLink,
    CPointerInfo, CStreamInfo, CWorkFn, SimTime, MAX_NVLINKS, MAX_PCI_ANCESTORS,
};
use fake_cuda_core::device::{common_ancestor, NvLinkPeer};
use fake_cuda_core::{CopyKind, Core, CoreError, DeviceDesc, PciBusId};
use std::ffi::{c_char, c_void, CStr};

type Result<T> = std::result::Result<T, CoreError>;

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

fn physical(index: i32) -> Result<(usize, &'static DeviceDesc)> {
    let i = usize::try_from(index).map_err(|_| CoreError::InvalidDevice {
        ordinal: index,
        visible: 0,
    })?;
    Ok((i, core()?.physical_device(i)?))
}

pub(crate) fn device_count() -> Result<i32> {
    Ok(core()?.device_count() as i32)
}

pub(crate) fn device_info(ordinal: i32) -> Result<CDeviceInfo> {
    let c = core()?;
    Ok(device_info_of(
        c.device(ordinal)?,
        c.physical_index(ordinal)?,
    ))
}

pub(crate) fn physical_device_count() -> Result<i32> {
    Ok(core()?.physical_device_count() as i32)
}

pub(crate) fn physical_device_info(index: i32) -> Result<CDeviceInfo> {
    let (i, d) = physical(index)?;
    Ok(device_info_of(d, i))
}

pub(crate) fn physical_device_topology(index: i32) -> Result<CDeviceTopology> {
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
        *dst = CNvLink {
            remote_pci: pci_words(l.remote),
            peer_kind,
            peer_gpu,
        };
    }
    for (dst, p) in t.pci_ancestors.iter_mut().zip(&d.pci_ancestors) {
        *dst = pci_words(*p);
    }
    Ok(t)
}

pub(crate) fn topology_common_ancestor(a: i32, b: i32) -> Result<u32> {
    let (_, da) = physical(a)?;
    let (_, db) = physical(b)?;
    Ok(common_ancestor(da, db) as u32)
}

/// # Safety
/// As `Core::launch_compute`, with `work(data)` and `release(data)`.
pub(crate) unsafe fn launch_compute(
    stream: u64,
    cost_in: fake_cuda_abi::CKernelCost,
    name: &CStr,
    detail: *const c_char,
    work: Option<CWorkFn>,
    data: *mut c_void,
    release: Option<CWorkFn>,
) -> Result<fake_cuda_abi::CLaunchTimes> {
    // `data` is the core's from here: freed once (by `release`) whatever happens, by the core
    // once it holds the work, here when nothing will run it.
    let free_here = || {
        if let Some(r) = release {
            // SAFETY: the caller's contract: `release(data)` is safe to call once.
            unsafe { r(data) };
        }
    };
    let (cost, core) = match compute_cost(&cost_in).and_then(|c| Ok((c, core()?))) {
        Ok(v) => v,
        Err(e) => {
            free_here();
            return Err(e);
        }
    };
    let detail = if detail.is_null() {
        None
    } else {
        // SAFETY: the caller's contract: a non-null `detail` is NUL-terminated.
        Some(unsafe { CStr::from_ptr(detail) }.to_string_lossy())
    };
    let work = work.map(|func| fake_cuda_core::ComputeWork {
        func,
        data: data as usize,
        release,
    });
    if work.is_none() {
        free_here();
    }
    if cost_in.flags & fake_cuda_abi::COST_HOST_OP != 0 {
        core.host_issued(fake_cuda_core::SimDuration::from_nanos(
            compute_model::calibration::HOST_OP_NS,
        ));
    }
    // SAFETY: the caller's contract is the core method's.
    let placed = unsafe {
        core.launch_compute(
            stream,
            cost,
            &name.to_string_lossy(),
            detail.as_deref(),
            work,
        )
    }?;
    let range = core.open_profiler_range();
    let (start, duration) = placed.map_or((0, 0), |(s, d)| (s.as_nanos(), d.as_nanos()));
    Ok(fake_cuda_abi::CLaunchTimes {
        placed: u32::from(placed.is_some()),
        in_range: u32::from(range.is_some()),
        range: range.unwrap_or(0),
        start_ns: start,
        duration_ns: duration,
    })
}

/// # Safety
/// As `Core::user_object_create`.
pub(crate) unsafe fn user_object_create(
    ptr: *mut c_void,
    destroy: CWorkFn,
    refs: u32,
) -> Result<u64> {
    // SAFETY: this function's contract is the core method's.
    unsafe { core()?.user_object_create(ptr as usize, destroy, refs) }
}

/// The job's groups of ranks recorded in this process (`job_group_add`), in recording order.
static JOB_GROUPS: std::sync::Mutex<Vec<Vec<u64>>> = std::sync::Mutex::new(Vec::new());

pub(crate) unsafe fn job_group_add(ranks: *const u64, n: usize) -> Result<()> {
    if ranks.is_null() || n == 0 {
        return Err(CoreError::InvalidValue(
            "a job group needs its ranks".into(),
        ));
    }
    // SAFETY: `ranks` points to `n` readable u64s (this function's contract).
    let group = unsafe { std::slice::from_raw_parts(ranks, n) }.to_vec();
    let mut groups = JOB_GROUPS
        .lock()
        .map_err(|_| CoreError::InvalidValue("the job's groups are poisoned".into()))?;
    if !groups.contains(&group) {
        groups.push(group);
    }
    Ok(())
}

pub(crate) unsafe fn job_group_get(index: usize, out: *mut u64, cap: usize) -> Result<usize> {
    let groups = JOB_GROUPS
        .lock()
        .map_err(|_| CoreError::InvalidValue("the job's groups are poisoned".into()))?;
    let Some(g) = groups.get(index) else {
        return Ok(0);
    };
    let k = g.len().min(cap);
    if k > 0 {
        // SAFETY: `out` holds `cap` >= k writable u64s (this function's contract); `g` is ours.
        unsafe { std::ptr::copy_nonoverlapping(g.as_ptr(), out, k) };
    }
    Ok(g.len())
}

pub(crate) fn user_object_retain(object: u64, count: u32) -> Result<()> {
    core()?.user_object_retain(object, count)
}

pub(crate) fn user_object_release(object: u64, count: u32) -> Result<()> {
    core()?.user_object_release(object, count)
}

pub(crate) fn graph_retain_user_object(
    graph: u64,
    object: u64,
    count: u32,
    moved: i32,
) -> Result<()> {
    core()?.graph_retain_user_object(graph, object, count, moved != 0)
}

pub(crate) fn graph_release_user_object(graph: u64, object: u64, count: u32) -> Result<()> {
    core()?.graph_release_user_object(graph, object, count)
}

pub(crate) fn host_wait(clock_ns: u64) -> Result<()> {
    core()?.host_wait_until(SimTime::from_nanos(clock_ns));
    Ok(())
}

/// A [`compute_model::KernelCost`] from its C form.
pub(crate) fn compute_cost(c: &fake_cuda_abi::CKernelCost) -> Result<compute_model::KernelCost> {
    let p = compute_model::Precision::from_code(c.precision)
        .ok_or_else(|| CoreError::InvalidValue(format!("precision code {}", c.precision)))?;
    let unit = match c.unit {
        fake_cuda_abi::UNIT_VECTOR => compute_model::Unit::Vector(p),
        fake_cuda_abi::UNIT_TENSOR => compute_model::Unit::Tensor(p),
        u => return Err(CoreError::InvalidValue(format!("unit code {u}"))),
    };
    let (batch, m, n, k) = (c.batch, c.m, c.n, c.k);
    let gemm =
        (batch > 0 && m > 0 && n > 0 && k > 0).then_some(compute_model::Gemm { batch, m, n, k });
    if !(c.flops.is_finite() && c.flops >= 0.0 && c.bytes.is_finite() && c.bytes >= 0.0) {
        return Err(CoreError::InvalidValue(format!(
            "kernel cost of {} flops and {} bytes",
            c.flops, c.bytes
        )));
    }
    let attention = compute_model::Attention::from_code(
        c.attention,
        c.flags & fake_cuda_abi::COST_BACKWARD != 0,
        c.flags & fake_cuda_abi::COST_CAUSAL != 0,
    )
    .ok_or_else(|| CoreError::InvalidValue(format!("attention code {}", c.attention)))?;
    Ok(compute_model::KernelCost {
        flops: c.flops,
        bytes: c.bytes,
        unit,
        gemm,
        attention,
    })
}

pub(crate) fn physical_device_fabric(index: i32) -> Result<fake_cuda_abi::CFabricInfo> {
    let (_, d) = physical(index)?;
    d.fabric.ok_or(CoreError::NotSupported(
        "this simulated node has no NVLink fabric spanning hosts",
    ))
}

pub(crate) fn physical_device_board(index: i32) -> Result<fake_cuda_abi::CBoardInfo> {
    let (_, d) = physical(index)?;
    Ok(fake_cuda_abi::CBoardInfo {
        tdp_watts: d.spec.tdp_watts,
        reserved: 0,
    })
}

pub(crate) fn run_settings() -> Result<(u32, u32, u32, u32)> {
    let env = run_env::RunEnv::current().map_err(|e| CoreError::Environment(e.to_string()))?;
    let compute = match env.compute {
        None => fake_cuda_abi::RUN_COMPUTE_UNSET,
        Some(run_env::Compute::Run) => fake_cuda_abi::RUN_COMPUTE_RUN,
        Some(run_env::Compute::Time) => fake_cuda_abi::RUN_COMPUTE_TIME,
        Some(run_env::Compute::Off) => fake_cuda_abi::RUN_COMPUTE_OFF,
    };
    let bit = |b: bool| u32::from(b);
    Ok((
        compute,
        bit(env.compute_priced),
        bit(env.trace.is_some()),
        bit(env.fold.is_some()),
    ))
}

pub(crate) unsafe fn run_environment(out: *mut u8, cap: usize) -> Result<usize> {
    let text = run_env::RunEnv::current_text();
    let k = text.len().min(cap);
    if k > 0 {
        // SAFETY: `out` holds `cap` >= k writable bytes (this function's contract).
        unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), out, k) };
    }
    Ok(text.len())
}

pub(crate) fn physical_device_busy(index: i32) -> Result<(u64, u64)> {
    let (i, _) = physical(index)?;
    let (busy, clock) = core()?.physical_device_busy(i);
    Ok((busy.as_nanos(), clock.as_nanos()))
}

pub(crate) fn get_device() -> Result<i32> {
    Ok(core()?.current_device())
}

pub(crate) fn set_device(ordinal: i32) -> Result<()> {
    core()?.set_device(ordinal)
}

pub(crate) fn malloc(ordinal: i32, size: usize) -> Result<usize> {
    core()?.malloc(ordinal, size)
}

pub(crate) fn free(ptr: usize) -> Result<()> {
    core()?.free(ptr)
}

pub(crate) fn mem_info(ordinal: i32) -> Result<(u64, u64)> {
    core()?.mem_info(ordinal)
}

pub(crate) fn host_alloc(size: usize) -> Result<usize> {
    core()?.host_alloc(size)
}

pub(crate) fn host_free(ptr: usize) -> Result<()> {
    core()?.host_free(ptr)
}

pub(crate) fn host_register(ptr: usize, size: usize) -> Result<()> {
    core()?.host_register(ptr, size)
}

pub(crate) fn host_unregister(ptr: usize) -> Result<()> {
    core()?.host_unregister(ptr)
}

pub(crate) fn pointer_info(ptr: usize) -> Result<CPointerInfo> {
    let i = core()?.pointer_info(ptr);
    Ok(CPointerInfo {
        kind: i.kind as i32,
        device: i.device,
        base: i.base,
        size: i.size,
    })
}

pub(crate) fn commit_memory(ptr: usize, len: usize) -> Result<()> {
    core()?.commit(ptr, len)
}

pub(crate) fn buffer_extent(ptr: usize) -> Result<CBufferExtent> {
    Ok(core()?.buffer_extent(ptr))
}

pub(crate) fn pointer_arena(ptr: usize) -> Result<CArenaLocation> {
    core()?.arena_location(ptr)
}

/// # Safety
/// As `Core::memcpy`.
pub(crate) unsafe fn memcpy(
    dst: usize,
    src: usize,
    n: usize,
    kind: i32,
    stream: u64,
) -> Result<()> {
    let kind = CopyKind::from_raw(kind)?;
    // SAFETY: this function's contract is the contract of the core method.
    unsafe { core()?.memcpy(dst, src, n, kind, stream) }
}

/// # Safety
/// As `Core::memcpy_2d`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn memcpy_2d(
    dst: usize,
    dpitch: usize,
    src: usize,
    spitch: usize,
    width: usize,
    height: usize,
    kind: i32,
    stream: u64,
) -> Result<()> {
    let kind = CopyKind::from_raw(kind)?;
    // SAFETY: this function's contract is the contract of the core method.
    unsafe { core()?.memcpy_2d(dst, dpitch, src, spitch, width, height, kind, stream) }
}

pub(crate) fn memset(dst: usize, value: i32, n: usize, stream: u64) -> Result<()> {
    core()?.memset(dst, value as u8, n, stream)
}

pub(crate) fn stream_create(flags: u32, priority: i32) -> Result<u64> {
    core()?.stream_create(flags, priority)
}

pub(crate) fn stream_destroy(stream: u64) -> Result<()> {
    core()?.stream_destroy(stream)
}

pub(crate) fn stream_info(stream: u64) -> Result<CStreamInfo> {
    let i = core()?.stream_info(stream)?;
    Ok(CStreamInfo {
        device: i.device as i32,
        flags: i.flags,
        priority: i.priority,
    })
}

pub(crate) fn stream_query(stream: u64) -> Result<()> {
    core()?.stream_query(stream)
}

pub(crate) fn stream_synchronize(stream: u64) -> Result<()> {
    core()?.stream_synchronize(stream)
}

pub(crate) fn stream_wait_event(stream: u64, event: u64) -> Result<()> {
    core()?.stream_wait_event(stream, event)
}

pub(crate) fn stream_clock(stream: u64) -> Result<u64> {
    core()?.stream_clock(stream).map(SimTime::as_nanos)
}

/// # Safety
/// As `Core::enqueue_host`.
pub(crate) unsafe fn enqueue(
    stream: u64,
    duration_ns: u64,
    work: Option<CWorkFn>,
    data: *mut c_void,
) -> Result<()> {
    // SAFETY: this function's contract is the contract of the core method.
    unsafe { core()?.enqueue_host(stream, duration_ns, work, data as usize) }
}

/// # Safety
/// As `Core::enqueue_host_owned`.
pub(crate) unsafe fn enqueue_owned(
    stream: u64,
    duration_ns: u64,
    work: Option<CWorkFn>,
    data: *mut c_void,
    release: CWorkFn,
) -> Result<()> {
    // SAFETY: this function's contract is the contract of the core method.
    unsafe { core()?.enqueue_host_owned(stream, duration_ns, work, data as usize, release) }
}

/// # Safety
/// As `Core::enqueue_meeting`.
pub(crate) unsafe fn enqueue_meeting(
    stream: u64,
    duration_ns: u64,
    ctas: u32,
    work: fake_cuda_abi::CMeetFn,
    data: *mut c_void,
    release: CWorkFn,
) -> Result<fake_cuda_abi::CMaybeTime> {
    // SAFETY: this function's contract is the contract of the core method.
    let end = unsafe {
        core()?.enqueue_meeting(stream, duration_ns, ctas, work, data as usize, release)
    }?;
    Ok(end.into())
}

pub(crate) fn buffer_extent_commit(ptr: usize, commit_len: usize) -> Result<CBufferExtent> {
    core()?.buffer_extent_commit(ptr, commit_len)
}

pub(crate) fn device_synchronize() -> Result<()> {
    core()?.device_synchronize()
}

pub(crate) fn event_create(flags: u32) -> Result<u64> {
    Ok(core()?.event_create(flags))
}

pub(crate) fn event_destroy(event: u64) -> Result<()> {
    core()?.event_destroy(event)
}

pub(crate) fn event_record(event: u64, stream: u64) -> Result<()> {
    core()?.event_record(event, stream)
}

pub(crate) fn event_query(event: u64) -> Result<()> {
    core()?.event_query(event)
}

pub(crate) fn event_synchronize(event: u64) -> Result<()> {
    core()?.event_synchronize(event)
}

pub(crate) fn event_elapsed_ms(start: u64, end: u64) -> Result<f32> {
    core()?.event_elapsed_ms(start, end)
}

pub(crate) fn ipc_get_mem_handle(ptr: usize) -> Result<CHandle> {
    core()?.ipc_get_mem_handle(ptr)
}

pub(crate) fn ipc_open_mem_handle(handle: &CHandle) -> Result<usize> {
    core()?.ipc_open_mem_handle(handle)
}

pub(crate) fn ipc_close_mem_handle(ptr: usize) -> Result<()> {
    core()?.ipc_close_mem_handle(ptr)
}

pub(crate) fn ipc_get_event_handle(event: u64) -> Result<CHandle> {
    core()?.ipc_get_event_handle(event)
}

pub(crate) fn ipc_open_event_handle(handle: &CHandle) -> Result<u64> {
    core()?.ipc_open_event_handle(handle)
}

pub(crate) fn register_function(host_fun: usize, name: &CStr) -> Result<()> {
    core()?.register_function(host_fun, &name.to_string_lossy());
    Ok(())
}

pub(crate) fn launch_kernel(host_fun: usize, stream: u64) -> Result<()> {
    core()?.launch_kernel(host_fun, stream)
}

pub(crate) fn begin_capture(stream: u64) -> Result<()> {
    core()?.begin_capture(stream)
}

pub(crate) fn end_capture(stream: u64) -> Result<u64> {
    core()?.end_capture(stream)
}

pub(crate) fn capture_info(stream: u64) -> Result<(u32, u64, u64)> {
    let (status, id, graph) = core()?.capture_info(stream)?;
    Ok((status as u32, id, graph))
}

pub(crate) fn graph_create() -> Result<u64> {
    Ok(core()?.graph_create())
}

pub(crate) fn graph_destroy(graph: u64) -> Result<()> {
    core()?.graph_destroy(graph)
}

pub(crate) fn graph_node_count(graph: u64) -> Result<usize> {
    Ok(core()?.graph_ops(graph)?.len())
}

pub(crate) fn graph_write_dot(graph: u64, path: &CStr) -> Result<()> {
    let path = path.to_string_lossy();
    let ops = core()?.graph_ops(graph)?;
    let mut dot = format!("digraph graph_{graph:x} {{\n");
    for (i, op) in ops.iter().enumerate() {
        dot += &format!("  n{i} [label=\"{}\"];\n", op.label());
        if i > 0 {
            dot += &format!("  n{} -> n{i};\n", i - 1);
        }
    }
    dot += "}\n";
    std::fs::write(&*path, dot).map_err(|e| CoreError::InvalidValue(format!("{path}: {e}")))
}

pub(crate) fn graph_instantiate(graph: u64) -> Result<u64> {
    core()?.graph_instantiate(graph)
}

pub(crate) fn graph_exec_update(exec: u64, graph: u64) -> Result<(u32, usize)> {
    core()?.graph_exec_update(exec, graph)
}

pub(crate) fn graph_exec_destroy(exec: u64) -> Result<()> {
    core()?.graph_exec_destroy(exec)
}

pub(crate) fn graph_launch(exec: u64, stream: u64) -> Result<()> {
    core()?.graph_launch(exec, stream)
}

pub(crate) fn device_reset(ordinal: i32) -> Result<()> {
    core()?.device_reset(ordinal)
}

pub(crate) fn trim_device(ordinal: i32) -> Result<u64> {
    core()?.trim(ordinal)
}

pub(crate) fn mem_create(ordinal: i32, size: u64, handle_types: u32) -> Result<u64> {
    core()?.mem_create(ordinal, size, handle_types)
}

pub(crate) fn mem_release(handle: u64) -> Result<()> {
    core()?.mem_release(handle)
}

pub(crate) fn mem_address_reserve(size: usize, alignment: usize, hint: usize) -> Result<usize> {
    core()?.mem_address_reserve(size, alignment, hint)
}

pub(crate) fn mem_address_free(ptr: usize, size: usize) -> Result<()> {
    core()?.mem_address_free(ptr, size)
}

pub(crate) fn mem_map(ptr: usize, size: usize, offset: u64, handle: u64) -> Result<()> {
    core()?.mem_map(ptr, size, offset, handle)
}

pub(crate) fn mem_unmap(ptr: usize, size: usize) -> Result<()> {
    core()?.mem_unmap(ptr, size)
}

pub(crate) fn mem_set_access(ptr: usize, size: usize, ordinal: i32, flags: u32) -> Result<()> {
    core()?.mem_set_access(ptr, size, ordinal, flags)
}

pub(crate) fn mem_get_access(ptr: usize, ordinal: i32) -> Result<u32> {
    core()?.mem_get_access(ptr, ordinal)
}

pub(crate) fn mem_export(handle: u64) -> Result<i32> {
    let fd = core()?.mem_export(handle)?;
    Ok(std::os::fd::IntoRawFd::into_raw_fd(fd))
}

pub(crate) fn fd_offer(fd: i32) -> Result<(u32, u64)> {
    if fd < 0 {
        return Err(CoreError::InvalidValue(format!("descriptor {fd}")));
    }
    // SAFETY: the caller's descriptor, borrowed for this call only; `offer` duplicates it.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let g = fake_cuda_core::broker::offer(fd)?;
    Ok((g.key, g.secret))
}

pub(crate) fn fd_withdraw(key: u32) -> Result<()> {
    fake_cuda_core::broker::withdraw(key);
    Ok(())
}

pub(crate) fn fd_fetch(owner_pid: u32, key: u32, secret: u64) -> Result<i32> {
    let fd =
        fake_cuda_core::broker::fetch(owner_pid, fake_cuda_core::broker::Grant { key, secret })?;
    Ok(std::os::fd::IntoRawFd::into_raw_fd(fd))
}

pub(crate) fn mem_import(fd: i32) -> Result<u64> {
    core()?.mem_import(fd)
}

pub(crate) fn mcast_create(num_devices: u32, size: u64, handle_types: u32) -> Result<u64> {
    core()?.mcast_create(num_devices, size, handle_types)
}

pub(crate) fn mcast_add_device(handle: u64, ordinal: i32) -> Result<()> {
    core()?.mcast_add_device(handle, ordinal)
}

pub(crate) fn mcast_bind_mem(
    handle: u64,
    mc_offset: u64,
    mem: u64,
    mem_offset: u64,
    size: u64,
) -> Result<()> {
    core()?.mcast_bind_mem(handle, mc_offset, mem, mem_offset, size)
}

pub(crate) fn mcast_bind_addr(handle: u64, mc_offset: u64, ptr: usize, size: u64) -> Result<()> {
    core()?.mcast_bind_addr(handle, mc_offset, ptr, size)
}

pub(crate) fn mcast_unbind(handle: u64, ordinal: i32, mc_offset: u64, size: u64) -> Result<()> {
    core()?.mcast_unbind(handle, ordinal, mc_offset, size)
}

pub(crate) fn mem_retain(ptr: usize) -> Result<u64> {
    core()?.mem_retain(ptr)
}

pub(crate) fn mem_handle_info(handle: u64) -> Result<CMemHandleInfo> {
    let c = core()?;
    let i = c.mem_handle_info(handle)?;
    Ok(CMemHandleInfo {
        device: c.ordinal_of_physical(i.physical),
        handle_types: i.handle_types,
        size: i.size,
    })
}

pub(crate) fn memset_pattern(
    dst: usize,
    pattern: u64,
    elem_size: u32,
    count: usize,
    stream: u64,
) -> Result<()> {
    core()?.memset_pattern(dst, pattern, elem_size as usize, count, stream)
}

pub(crate) fn host_stream() -> Result<u64> {
    Core::host_stream()
        .ok_or_else(|| CoreError::InvalidValue("no host work is running on this thread".into()))
}

pub(crate) fn memory_stats(ordinal: i32) -> Result<(u64, u64)> {
    let stats = core()?.memory_stats();
    let m = usize::try_from(ordinal)
        .ok()
        .and_then(|o| stats.get(o).copied())
        .ok_or(CoreError::InvalidDevice {
            ordinal,
            visible: stats.len(),
        })?;
    Ok((m.current, m.peak))
}

pub(crate) fn profiler(op: i32) -> Result<(u64, i32)> {
    let (ranges, active) = core()?.profiler(op);
    Ok((ranges, i32::from(active)))
}

pub(crate) fn step_mark(by: i32) -> Result<u64> {
    core()?.step_mark(by)
}

pub(crate) fn report_section(name: &CStr, json: &CStr, write_now: bool) -> Result<()> {
    let name = name.to_string_lossy().into_owned();
    const CORE_KEYS: [&str; 6] = [
        "devices",
        "calls",
        "kernel_launches",
        "streams",
        "profiler_ranges",
        "step_marks",
    ];
    if name.is_empty() || CORE_KEYS.contains(&name.as_str()) {
        return Err(CoreError::InvalidValue(format!(
            "report section name {name:?} is taken"
        )));
    }
    let value: serde_json::Value = serde_json::from_str(&json.to_string_lossy())
        .map_err(|e| CoreError::InvalidValue(format!("report section {name}: not JSON: {e}")))?;
    SECTIONS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name, value);
    if write_now {
        write_report_now();
    }
    Ok(())
}
