//! NVML's view of a whole `ncclsim run` job: every process of the job publishes a telemetry
//! record (`fake_cuda_abi::telemetry`) in the job directory, and NVML in any process of it
//! (`nvidia-smi`, a monitor's pynvml, the training job itself) sums them per device: memory
//! used is each live process's allocations plus its context
//! ([`CONTEXT_BYTES`](telemetry::CONTEXT_BYTES)), utilization the sum of their recent busy
//! fractions (capped at 100), and the compute processes are the processes holding a context
//! there. Records of processes on another simulated node are skipped; links of processes that
//! have exited are removed.
//!
//! Outside a job (no `NCCLSIM_JOB_DIR` in the run environment) NVML reports this process only.

use fake_cuda_abi::telemetry::{self, DeviceSlot, RecordHeader, SlotSnapshot};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// What the job's processes hold on one device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DeviceUsage {
    /// Device memory in use, bytes (allocations and contexts).
    pub used: u64,
    /// Utilization, percent.
    pub percent: u32,
    /// (pid, bytes with its context) of each process with a context on the device.
    pub processes: Vec<(u32, u64)>,
    /// (pid, utilization percent) of the same processes.
    pub process_percent: Vec<(u32, u32)>,
}

/// The job directory and this process's node, when in a job.
fn job() -> Option<(PathBuf, u32)> {
    let env = fake_cuda_client::run_env().ok()?;
    Some((env.job_dir.clone()?, env.node_or_zero()))
}

/// `CLOCK_MONOTONIC`, ns.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Whether process `pid` still exists.
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks the process; EPERM still means it exists.
    let sent = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    sent || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Device `phys`'s slot of the record linked at `link` (named by its writer's pid), if the
/// record is a live ncclsim telemetry memfd of that process on `node`.
fn read_slot(link: &Path, pid: u32, node: u32, phys: usize) -> Option<SlotSnapshot> {
    let target = std::fs::read_link(link).ok()?;
    if !target.starts_with(format!("/proc/{pid}/fd/")) {
        return None;
    }
    // The descriptor must be the writer's record memfd, not whatever reused the number (checked
    // before opening it: opening some other descriptor, a pipe say, could block).
    let Ok(name) = std::fs::read_link(&target) else {
        if !alive(pid) {
            let _ = std::fs::remove_file(link);
        }
        return None;
    };
    if !name
        .to_string_lossy()
        .starts_with(&format!("/memfd:{}", telemetry::RECORD_MEMFD_NAME))
    {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(link)
        .ok()?;
    let len = file.metadata().ok()?.len() as usize;
    if len < telemetry::record_bytes(phys + 1) {
        return None;
    }
    // SAFETY: a read-only shared mapping of the whole file, unmapped below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the mapping holds a header and at least `phys + 1` slots (length checked);
    // the writer changes slots only through atomics.
    let snap = unsafe {
        let h = &*base.cast::<RecordHeader>();
        let ok = h.magic == telemetry::RECORD_MAGIC
            && h.version == telemetry::RECORD_VERSION
            && h.pid == pid
            && h.node == node
            && (h.devices as usize) > phys;
        let slot = &*base
            .cast::<u8>()
            .add(std::mem::size_of::<RecordHeader>())
            .cast::<DeviceSlot>()
            .add(phys);
        if ok {
            slot.snapshot()
        } else {
            None
        }
    };
    // SAFETY: our own mapping.
    unsafe { libc::munmap(base, len) };
    snap
}

/// The job's usage of physical device `phys`, or `None` outside a job.
pub(crate) fn device_usage(phys: usize) -> Option<DeviceUsage> {
    let (dir, node) = job()?;
    let now = monotonic_ns();
    let mut usage = DeviceUsage::default();
    let mut percent = 0u64;
    let mut entries: Vec<(u32, PathBuf)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((pid, e.path()))
        })
        .collect();
    entries.sort();
    for (pid, link) in entries {
        let Some(s) = read_slot(&link, pid, node, phys) else {
            continue;
        };
        if !s.active {
            continue;
        }
        let bytes = s.used.saturating_add(telemetry::CONTEXT_BYTES);
        usage.used = usage.used.saturating_add(bytes);
        usage.processes.push((pid, bytes));
        let p = s.percent_at(now);
        usage.process_percent.push((pid, p.min(100) as u32));
        percent += p;
    }
    usage.percent = percent.min(100) as u32;
    Some(usage)
}
