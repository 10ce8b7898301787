//! Ends the copies of `ncclsim run` when the launcher itself ends without stopping them
//! (SIGKILL, a crash, the OOM killer).
//!
//! Each copy leads its own process group (so a signal to one copy reaches the processes it
//! starts, such as torchrun's workers), and nothing in the kernel stops such a group when its
//! parent dies: the copies would run on, reparented to init. So before it starts any copy the
//! launcher forks a watcher. The watcher runs in a process group of its own (signals meant for
//! the launcher's group do not reach it), closes every descriptor but the read end of a pipe,
//! and reads process groups from that pipe. The write end is close-on-exec and held by the
//! launcher alone, except in a new copy between fork and exec: there the copy writes its own
//! process id (the id of the group it leads) to the pipe, so it is registered before the
//! program it runs can start anything. The launcher unregisters a copy once it has reaped it
//! (its group id may then be reused by an unrelated process).
//!
//! When the pipe closes, the launcher has ended, whatever the cause. The watcher then sends
//! SIGTERM to every group still registered, SIGKILL after the grace period to those still
//! there, removes the run's job directory (`job`: the launcher removes it too when it ends
//! normally) and exits. A launcher that ends normally has reaped and unregistered every copy,
//! so then nothing is signalled.
//!
//! The watcher is forked from a process with one thread and makes only async-signal-safe calls
//! (no allocation: its list of groups is allocated before the fork), as POSIX requires after a
//! fork.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

/// How often the watcher checks whether the signalled groups have ended.
const POLL: Duration = Duration::from_millis(20);

/// The launcher's side of the watcher: the pipe's write end and the watcher's pid.
pub struct Watcher {
    tx: Option<OwnedFd>,
    pid: libc::pid_t,
}

impl Watcher {
    /// Forks the watcher, able to hold `copies` groups, which stops them with `grace` between
    /// SIGTERM and SIGKILL and then removes `job_dir`.
    pub fn start(copies: usize, grace: Duration, job_dir: &Path) -> Result<Watcher, String> {
        use std::os::unix::ffi::OsStrExt;
        let job_dir = CString::new(job_dir.as_os_str().as_bytes())
            .map_err(|_| format!("{}: a path with a NUL byte", job_dir.display()))?;
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two new descriptors into `fds`.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(format!("watcher pipe: {}", io::Error::last_os_error()));
        }
        // SAFETY: pipe2 succeeded: both descriptors are new and owned here alone.
        let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let groups: Vec<libc::pid_t> = Vec::with_capacity(copies);
        // SAFETY: the launcher has one thread here (no copy or helper thread has started), and
        // the child runs only `watch`, which makes async-signal-safe calls and never returns.
        match unsafe { libc::fork() } {
            -1 => Err(format!(
                "cannot start the watcher of the copies: {}",
                io::Error::last_os_error()
            )),
            // SAFETY: in the child after fork (see above).
            0 => unsafe { watch(rx.as_raw_fd(), groups, grace, &job_dir) },
            pid => {
                drop(rx);
                Ok(Watcher { tx: Some(tx), pid })
            }
        }
    }

    /// The write end a new copy registers its process group on (see [`register_self`]).
    pub fn pipe(&self) -> RawFd {
        self.tx.as_ref().map_or(-1, |t| t.as_raw_fd())
    }

    /// Unregisters the group of a copy the launcher has reaped.
    pub fn forget(&self, pgid: u32) {
        let msg = (-(pgid as i32)).to_ne_bytes();
        // SAFETY: writes 4 bytes from `msg` to the pipe (atomic: below PIPE_BUF). A failure
        // only leaves the group registered, and the group is already gone.
        unsafe { libc::write(self.pipe(), msg.as_ptr().cast(), msg.len()) };
    }
}

impl Drop for Watcher {
    /// Closes the pipe (every copy has been reaped and unregistered, so the watcher signals
    /// nothing) and reaps the watcher.
    fn drop(&mut self) {
        drop(self.tx.take());
        let mut status = 0;
        // SAFETY: waits for our own child; the status is written to a local.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
    }
}

/// Registers the calling process's group (its own pid: a copy leads its group) with the
/// watcher. Runs in a new copy between fork and exec.
///
/// # Safety
/// Only async-signal-safe calls: safe to run in a child between fork and exec.
pub unsafe fn register_self(pipe: RawFd) -> io::Result<()> {
    // SAFETY: getpid has no preconditions.
    let msg = unsafe { libc::getpid() }.to_ne_bytes();
    // SAFETY: writes 4 bytes from `msg`; atomic on a pipe (below PIPE_BUF).
    if unsafe { libc::write(pipe, msg.as_ptr().cast(), msg.len()) } != msg.len() as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The watcher process: reads group registrations (a positive pid) and removals (a negative
/// one) until the pipe closes, then stops the groups still registered and exits.
///
/// # Safety
/// Runs in the child after fork: only async-signal-safe calls, no allocation (`groups` grows
/// within its capacity).
unsafe fn watch(rx: RawFd, mut groups: Vec<libc::pid_t>, grace: Duration, job_dir: &CStr) -> ! {
    // SAFETY: plain system calls on descriptors and ids of this process.
    unsafe {
        libc::setpgid(0, 0);
        // Keep only the pipe open, as descriptor 0: the launcher's terminal and its caller's
        // pipes must not stay open because of the watcher.
        if rx != 0 {
            libc::dup2(rx, 0);
        }
        if libc::syscall(libc::SYS_close_range, 1u32, u32::MAX, 0u32) != 0 {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                lim.rlim_cur.min(1 << 20) as RawFd
            } else {
                1024
            };
            for fd in 1..top {
                libc::close(fd);
            }
        }
    }
    loop {
        let mut msg = [0u8; 4];
        let mut got = 0;
        while got < msg.len() {
            // SAFETY: reads into the unfilled tail of `msg`.
            let n = unsafe { libc::read(0, msg[got..].as_mut_ptr().cast(), msg.len() - got) };
            if n > 0 {
                got += n as usize;
            } else if n < 0 && errno() == libc::EINTR {
                continue;
            } else {
                break;
            }
        }
        if got < msg.len() {
            break;
        }
        let g = libc::pid_t::from_ne_bytes(msg);
        if g > 0 && groups.len() < groups.capacity() {
            groups.push(g);
        } else if let Some(i) = groups.iter().position(|&x| g < 0 && x == -g) {
            groups.swap_remove(i);
        }
    }
    let signal_all = |sig| {
        for &g in &groups {
            // SAFETY: killpg only sends a signal; a group that has ended gives ESRCH.
            unsafe { libc::killpg(g, sig) };
        }
    };
    signal_all(libc::SIGTERM);
    let alive = || {
        groups
            .iter()
            // SAFETY: signal 0 only checks that the group exists.
            .any(|&g| unsafe { libc::killpg(g, 0) } == 0 || errno() != libc::ESRCH)
    };
    let mut waited = Duration::ZERO;
    while waited < grace && alive() {
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: POLL.as_nanos() as libc::c_long,
        };
        // SAFETY: sleeps; `ts` is a valid duration and the remainder is not wanted.
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
        waited += POLL;
    }
    signal_all(libc::SIGKILL);
    // SAFETY: system calls on a path and a descriptor of this process, a buffer on the stack.
    unsafe { remove_dir(job_dir) };
    // SAFETY: ends the watcher without running the launcher's exit handlers or destructors.
    unsafe { libc::_exit(0) }
}

/// Removes directory `dir` with the entries in it (the job directory holds only links), with
/// system calls alone: `getdents64` into a buffer on the stack, `unlinkat`, `rmdir`.
///
/// # Safety
/// Async-signal-safe: no allocation.
unsafe fn remove_dir(dir: &CStr) {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(dir.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    if fd < 0 {
        return;
    }
    // 8-byte aligned, as the kernel lays out `linux_dirent64` records.
    let mut buf = [0u64; 512];
    // Entries removed while listing may make the listing skip some: list until a pass removes
    // nothing (a few passes at most).
    for _ in 0..8 {
        let mut removed = 0;
        // SAFETY: rewinds our own descriptor.
        unsafe { libc::lseek(fd, 0, libc::SEEK_SET) };
        loop {
            // SAFETY: the kernel writes at most `size_of_val(&buf)` bytes into `buf`.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    fd,
                    buf.as_mut_ptr(),
                    std::mem::size_of_val(&buf),
                )
            };
            if n <= 0 {
                break;
            }
            let base = buf.as_ptr().cast::<u8>();
            let mut off = 0usize;
            while off < n as usize {
                // SAFETY: `linux_dirent64` records the kernel wrote: d_reclen (u16) at 16, the
                // NUL-terminated d_name at 19, each record inside the `n` bytes written.
                unsafe {
                    let rec = base.add(off);
                    let reclen = rec.add(16).cast::<u16>().read_unaligned() as usize;
                    let name = CStr::from_ptr(rec.add(19).cast());
                    let bytes = name.to_bytes();
                    if bytes != b"." && bytes != b".." && libc::unlinkat(fd, name.as_ptr(), 0) == 0
                    {
                        removed += 1;
                    }
                    off += reclen.max(1);
                }
            }
        }
        if removed == 0 {
            break;
        }
    }
    // SAFETY: our own descriptor; a NUL-terminated path.
    unsafe {
        libc::close(fd);
        libc::rmdir(dir.as_ptr());
    }
}
