//! What the runtime asks of the fake CUDA core: the calling thread's device, device
//! descriptions, where a buffer lives, device allocations, and stream-ordered host work.
//!
//! The core is the process's one `libncclsim_cuda.so`, loaded from this library's directory
//! like every other front-end does (`fake_cuda_client`).

use crate::error::{NcclError, Result};
use fake_cuda_abi::{
    CArenaLocation, CPointerInfo, CWorkFn, SimDuration, SimTime, PROFILER_QUERY, STEP_QUERY,
};
use fake_cuda_client::{client, Client};

fn core() -> Result<&'static Client> {
    client().map_err(|e| NcclError::cuda("loading the fake CUDA core", e))
}

/// The calling thread's current device, or `fallback` if there is no core.
pub fn current_device_or(fallback: i32) -> i32 {
    core()
        .and_then(|c| {
            c.get_device()
                .map_err(|e| NcclError::cuda("cudaGetDevice", e))
        })
        .unwrap_or(fallback)
}

/// The calling thread's current device.
pub fn current_device() -> Result<i32> {
    core()?
        .get_device()
        .map_err(|e| NcclError::cuda("cudaGetDevice", e))
}

/// Makes `dev` the calling thread's current device.
pub fn set_device(dev: i32) -> Result<()> {
    core()?
        .set_device(dev)
        .map_err(|e| NcclError::cuda(&format!("cudaSetDevice({dev})"), e))
}

/// Number of visible devices.
pub fn device_count() -> Result<i32> {
    core()?
        .device_count()
        .map_err(|e| NcclError::cuda("cudaGetDeviceCount", e))
}

/// What the runtime records about a device: its physical index (NVML numbering) and PCI bus id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceIdentity {
    /// Physical index on the node (ignores `CUDA_VISIBLE_DEVICES`).
    pub physical: i32,
    /// PCI domain, bus, device, function.
    pub pci: [u32; 4],
}

impl DeviceIdentity {
    /// `0000:07:00.0`.
    pub fn bus_id(&self) -> String {
        format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.pci[0], self.pci[1], self.pci[2], self.pci[3]
        )
    }
    /// NCCL's numeric bus id (`busIdToInt64`): the hex digits of the bus id string.
    pub fn bus_id_int(&self) -> i64 {
        ((self.pci[0] as i64) << 20)
            | ((self.pci[1] as i64) << 12)
            | ((self.pci[2] as i64) << 4)
            | self.pci[3] as i64
    }
}

/// Physical index and PCI bus id of a visible device.
pub fn device_identity(dev: i32) -> Result<DeviceIdentity> {
    let info = core()?
        .device_info(dev)
        .map_err(|e| NcclError::invalid_argument(format!("CUDA device {dev}: {e}")))?;
    Ok(DeviceIdentity {
        physical: info.physical_index,
        pci: info.pci,
    })
}

/// What a pointer points into.
pub fn pointer_info(ptr: usize) -> Result<CPointerInfo> {
    core()?
        .pointer_info(ptr)
        .map_err(|e| NcclError::cuda("cudaPointerGetAttributes", e))
}

/// The device buffer a pointer points into, as the program made it (see
/// `fake_cuda_core::Core::buffer_extent`).
pub fn buffer_extent(ptr: usize) -> Result<fake_cuda_abi::CBufferExtent> {
    core()?
        .buffer_extent(ptr)
        .map_err(|e| NcclError::cuda("the buffer's allocation", e))
}

/// [`buffer_extent`], and when `[ptr, ptr + len)` lies inside that buffer, the range committed
/// against the host's memory (see `fake_cuda_core::backing`), in one call: a CUDA
/// out-of-memory error when the host cannot back it.
pub fn buffer_extent_commit(ptr: usize, len: usize) -> Result<fake_cuda_abi::CBufferExtent> {
    core()?
        .buffer_extent_commit(ptr, len)
        .map_err(|e| NcclError::cuda(&format!("device memory at {ptr:#x} (+{len} bytes)"), e))
}

/// Where a device allocation of this process lives (arena memfd and offsets).
pub fn arena_location(ptr: usize) -> Result<CArenaLocation> {
    core()?
        .pointer_arena(ptr)
        .map_err(|e| NcclError::invalid_argument(format!("buffer {ptr:#x}: {e}")))
}

/// Offers a copy of `fd` to the processes that present the returned (key, secret) to this
/// process's descriptor broker, until [`fd_withdraw`].
pub fn fd_offer(fd: std::os::fd::BorrowedFd<'_>) -> Result<(u32, u64)> {
    use std::os::fd::AsRawFd;
    core()?
        .fd_offer(fd.as_raw_fd())
        .map_err(|e| NcclError::cuda("offering a memory descriptor to the communicator", e))
}

/// Withdraws an offer of [`fd_offer`].
pub fn fd_withdraw(key: u32) {
    if let Ok(c) = core() {
        let _ = c.fd_withdraw(key);
    }
}

/// The descriptor process `pid` offered under `key` with `secret`, received from it.
pub fn fd_fetch(pid: u32, key: u32, secret: u64) -> Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let fd = core()?
        .fd_fetch(pid, key, secret)
        .map_err(|e| NcclError::remote(format!("memory of pid {pid}: {e}")))?;
    // SAFETY: the core passed us a fresh descriptor we own.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Device allocation on `dev` (`ncclMemAlloc`).
pub fn malloc(dev: i32, size: usize) -> Result<usize> {
    core()?
        .malloc(dev, size)
        .map_err(|e| NcclError::cuda(&format!("cudaMalloc({size})"), e))
}

/// Device free (`ncclMemFree`).
pub fn free(ptr: usize) -> Result<()> {
    core()?
        .free(ptr)
        .map_err(|e| NcclError::cuda(&format!("cudaFree({ptr:#x})"), e))
}

/// Enqueues `work` on `stream` as work that starts when others are ready: the core calls
/// `work(data, stream, ready)` (now, or at each launch of a graph capturing it) and the stream
/// then waits until the start it returns and `duration` more. Gives the end in virtual time
/// when it ran now.
///
/// # Safety
/// `data` must stay valid until the core calls `release(data)` (once, when no work needs it
/// any more); `release` must not call into the core.
pub unsafe fn enqueue_meeting(
    stream: u64,
    duration: SimDuration,
    ctas: u32,
    work: fake_cuda_abi::CMeetFn,
    data: *mut std::ffi::c_void,
    release: CWorkFn,
) -> Result<Option<SimTime>> {
    let c = core()?;
    // SAFETY: forwarded from this function's contract.
    let end = unsafe { c.enqueue_meeting(stream, duration.as_nanos(), ctas, work, data, release) }
        .map_err(|e| NcclError::cuda(&format!("enqueue on stream {stream:#x}"), e))?;
    Ok(end.get())
}

/// The groups of job ranks recorded in this process (`job_group_add`: the Python package
/// records every torch process group), in recording order.
pub fn job_groups() -> Result<Vec<Vec<usize>>> {
    let c = core()?;
    let mut out = Vec::new();
    let mut buf: Vec<u64> = vec![0; 64];
    loop {
        let get = |buf: &mut Vec<u64>| {
            // SAFETY: `buf` holds `buf.len()` writable u64s.
            unsafe { c.job_group_get(out.len(), buf.as_mut_ptr(), buf.len()) }
                .map_err(|e| NcclError::cuda("reading the job's groups", e))
        };
        let mut len = get(&mut buf)?;
        if len == 0 {
            return Ok(out);
        }
        if len > buf.len() {
            buf.resize(len, 0);
            len = get(&mut buf)?;
        }
        out.push(buf[..len].iter().map(|&r| r as usize).collect());
    }
}

/// The host waited until virtual time `t` (a blocking call that waits for operations).
pub fn host_wait(t: SimTime) -> Result<()> {
    core()?
        .host_wait(t.as_nanos())
        .map_err(|e| NcclError::cuda("waiting for the operations", e))
}

/// Bytes allocated now and at most so far on visible device `dev`.
pub fn memory_stats(dev: i32) -> Result<(u64, u64)> {
    core()?
        .memory_stats(dev)
        .map_err(|e| NcclError::cuda(&format!("memory of device {dev}"), e))
}

/// The profiler range the program is in (`cudaProfilerStart`/`Stop`): its index (0 for the
/// first) while one is open, else None.
pub fn profiler_range() -> Option<u64> {
    match core().ok()?.profiler(PROFILER_QUERY).ok()? {
        (n, active) if active != 0 => Some(n - 1),
        _ => None,
    }
}

/// The training steps the program's framework marked as ended so far (its optimizer's or
/// profiler's steps, told to the core by ncclsim's Python package); 0 when it marked none.
pub fn step_marks() -> u64 {
    core()
        .ok()
        .and_then(|c| c.step_mark(STEP_QUERY).ok())
        .unwrap_or(0)
}

/// Adds or replaces the named section (JSON text) of the core's end-of-run report; with
/// `write_now` the report file is written at once.
pub fn report_section(name: &str, json: &str, write_now: bool) -> Result<()> {
    let name = std::ffi::CString::new(name).map_err(|_| NcclError::internal("NUL in name"))?;
    let json = std::ffi::CString::new(json).map_err(|_| NcclError::internal("NUL in JSON"))?;
    core()?
        .report_section(&name, &json, write_now)
        .map_err(|e| NcclError::cuda("writing the report", e))
}
