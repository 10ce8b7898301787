//! The process's telemetry record for the other processes of an `ncclsim run` job (layout and
//! protocol in [`abi::telemetry`]): created on the first allocation or work on a device when
//! the job directory is set, updated at each allocation, free and piece of scheduled work
//! (stores into a mapped page and a `CLOCK_MONOTONIC` read, no system call), and its link
//! removed at exit.
//!
//! A forked child inherits the parent's mapping; it stops publishing (it is not the record's
//! writer, and CUDA does not work in a forked child anyway).

use super::*;
use abi::telemetry::{self, DeviceSlot, RecordHeader};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Where this process publishes: the job directory and its simulated node.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub dir: PathBuf,
    pub node: u32,
}

/// The record's state in [`State`].
#[derive(Default)]
pub(crate) enum Publisher {
    /// Not in a job, or the record could not be made (reported once), or a forked child.
    #[default]
    Off,
    /// In a job; the record is made on first use.
    Pending(Job),
    /// Published.
    On(Record),
}

/// Set in a forked child: the inherited record is the parent's.
static FORKED: AtomicBool = AtomicBool::new(false);
/// The link to remove at exit, with the pid that made it.
static LINK: OnceLock<(u32, CString)> = OnceLock::new();

extern "C" fn forked_child() {
    FORKED.store(true, Ordering::Relaxed);
}

extern "C" fn remove_link() {
    if let Some((pid, path)) = LINK.get() {
        if *pid == std::process::id() {
            // SAFETY: a NUL-terminated path; a missing file is fine.
            unsafe { libc::unlink(path.as_ptr()) };
        }
    }
}

/// A mapped, sealed record memfd and its link in the job directory.
pub(crate) struct Record {
    base: *mut u8,
    len: usize,
    devices: usize,
    _fd: OwnedFd,
}

// SAFETY: the mapping is only written through atomics ([`DeviceSlot`]), under the core's lock.
unsafe impl Send for Record {}

impl Drop for Record {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn os(what: &str) -> std::io::Error {
    let e = std::io::Error::last_os_error();
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl Record {
    /// Makes the memfd, writes the header, seals it against other writers and links it as
    /// `<dir>/<pid>`.
    fn create(job: &Job, devices: usize) -> std::io::Result<Record> {
        let name = CString::new(telemetry::RECORD_MEMFD_NAME).expect("no NUL");
        // SAFETY: a NUL-terminated name.
        let raw = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if raw < 0 {
            return Err(os("memfd_create"));
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let len = telemetry::record_bytes(devices);
        // SAFETY: valid descriptor.
        if unsafe { libc::ftruncate(raw, len as libc::off_t) } != 0 {
            return Err(os("ftruncate"));
        }
        // SAFETY: a new shared mapping of the whole file; the kernel picks the address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(os("mmap"));
        }
        let rec = Record {
            base: base.cast(),
            len,
            devices,
            _fd: fd,
        };
        let pid = std::process::id();
        // SAFETY: the mapping starts with room for the header, page-aligned, zero-filled.
        unsafe {
            rec.base.cast::<RecordHeader>().write(RecordHeader {
                magic: telemetry::RECORD_MAGIC,
                version: telemetry::RECORD_VERSION,
                pid,
                node: job.node,
                devices: devices as u32,
                reserved: 0,
            })
        };
        // Existing (this) mapping stays writable; nobody can map or write it for writing now.
        let seals =
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SEAL;
        // SAFETY: valid descriptor.
        if unsafe { libc::fcntl(raw, libc::F_ADD_SEALS, seals) } != 0 {
            return Err(os("seal"));
        }
        let link = job.dir.join(pid.to_string());
        let tmp = job.dir.join(format!(".{pid}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(format!("/proc/{pid}/fd/{}", rec._fd.as_raw_fd()), &tmp)
            .and_then(|()| std::fs::rename(&tmp, &link))
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", link.display())))?;
        register_exit(pid, &link);
        Ok(rec)
    }

    fn slot(&self, phys: usize) -> Option<&DeviceSlot> {
        (phys < self.devices).then(|| {
            // SAFETY: slot `phys` lies inside the mapping, 8-byte aligned after the header;
            // it is only accessed through atomics.
            unsafe {
                &*self
                    .base
                    .add(std::mem::size_of::<RecordHeader>())
                    .cast::<DeviceSlot>()
                    .add(phys)
            }
        })
    }
}

fn register_exit(pid: u32, link: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = CString::new(link.as_os_str().as_bytes()) else {
        return;
    };
    if LINK.set((pid, path)).is_ok() {
        // SAFETY: plain C callbacks without arguments.
        unsafe {
            libc::pthread_atfork(None, None, Some(forked_child));
            libc::atexit(remove_link);
        }
    }
}

/// `CLOCK_MONOTONIC`, ns (read through the vDSO, no system call).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Publisher {
    /// The slot of physical device `phys`, making the record on first use.
    fn slot(&mut self, devices: usize, phys: usize) -> Option<&DeviceSlot> {
        if FORKED.load(Ordering::Relaxed) {
            *self = Publisher::Off;
        }
        if let Publisher::Pending(job) = self {
            *self = match Record::create(job, devices) {
                Ok(r) => Publisher::On(r),
                Err(e) => {
                    eprintln!(
                        "ncclsim: cannot publish this process's GPU telemetry in {} ({e}); \
                         nvidia-smi in other processes will not see it",
                        job.dir.display()
                    );
                    Publisher::Off
                }
            };
        }
        match self {
            Publisher::On(r) => r.slot(phys),
            _ => None,
        }
    }
}

impl Core {
    /// Publishes the memory this process holds on physical device `phys`.
    pub(crate) fn publish_memory(&self, st: &mut State, phys: usize) {
        if matches!(st.publisher, Publisher::Off) {
            return;
        }
        let used = st.arenas[phys].as_ref().map_or(0, Arena::used) + st.vmm.used(phys);
        if let Some(slot) = st.publisher.slot(self.devices.len(), phys) {
            slot.set_used(used);
        }
    }

    /// Publishes the memory of every device (after a release whose device is not at hand).
    pub(crate) fn publish_all_memory(&self, st: &mut State) {
        for phys in 0..self.devices.len() {
            let active = match &st.publisher {
                Publisher::On(r) => r
                    .slot(phys)
                    .is_some_and(|s| s.active.load(Ordering::Relaxed) != 0),
                _ => false,
            };
            if active {
                self.publish_memory(st, phys);
            }
        }
    }

    /// Publishes the busy time and clock of physical device `phys` after scheduling work.
    pub(crate) fn publish_work(&self, st: &mut State, phys: usize) {
        if matches!(st.publisher, Publisher::Off) {
            return;
        }
        let (busy, clock) = st.timeline.device_busy(phys);
        if let Some(slot) = st.publisher.slot(self.devices.len(), phys) {
            slot.scheduled(busy.as_nanos(), clock.as_nanos(), monotonic_ns());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn the_record_is_linked_readable_and_sealed_against_other_writers() {
        let dir = std::env::temp_dir().join(format!("ncclsim-publish-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let job = Job {
            dir: dir.clone(),
            node: 3,
        };
        let rec = Record::create(&job, 4).unwrap();
        rec.slot(2).unwrap().set_used(5 << 20);
        assert!(rec.slot(4).is_none());
        // Another process's view: the file behind the link.
        let link = dir.join(std::process::id().to_string());
        let bytes = std::fs::read(&link).unwrap();
        assert_eq!(bytes.len(), 32 + 4 * 80);
        assert_eq!(u64_at(&bytes, 0), telemetry::RECORD_MAGIC);
        assert_eq!(
            u64_at(&bytes, 8) >> 32,
            u64::from(std::process::id()),
            "pid"
        );
        assert_eq!(u64_at(&bytes, 16), 3 | (4 << 32), "node and device count");
        let slot2 = 32 + 2 * 80;
        assert_eq!(u64_at(&bytes, slot2), 2, "sequence");
        assert_eq!(u64_at(&bytes, slot2 + 8), 1, "active");
        assert_eq!(u64_at(&bytes, slot2 + 16), 5 << 20, "used");
        // Nobody else can write it, whether opened writable or not.
        let wrote = std::fs::OpenOptions::new()
            .write(true)
            .open(&link)
            .and_then(|mut f| f.write_all(b"forged"));
        assert!(wrote.is_err(), "{wrote:?}");
        drop(rec);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
