//! Shared memory between the ranks of a communicator on one host: the communicator's segment
//! (a memfd the host's first rank creates and the others map), futex waits that never spin
//! long, and the mapping of peers' device arenas.
//!
//! A process that joins a communicator shares with the communicator's other processes on the
//! same host the device buffers it passes to the communicator's operations: for each
//! operation it publishes, in the segment, the arena memfd's broker grant (key and secret, see
//! `fake_cuda_core::broker`) and offset of its buffers, and peers fetch that arena's descriptor
//! from the owner once (over a Unix socket, `SCM_RIGHTS`), check it is an ncclsim arena of that
//! process, map it and read or write the buffers in place, as NCCL's P2P transport does with
//! CUDA IPC handles. Nothing is mapped from a process that has not published it, and no memfd
//! is opened through `/proc`: they are `chmod 000`, so only passed descriptors reach them.

use crate::error::{NcclError, Result};
use fake_cuda_abi::map::Access;
pub use fake_cuda_abi::map::Mapping;
use rustix::thread::futex;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Creates an anonymous memfd of `len` zero bytes named `name`, reached only through passed
/// descriptors (mode 000), and maps it.
pub fn create(name: &str, len: usize) -> Result<Mapping> {
    Mapping::memfd(name, len).map_err(|e| NcclError::system(&format!("memfd {name}"), e))
}

/// Maps the memfd offer `key` of process `pid` whole, fetched from it with `secret`, after
/// checking its length is `len` (when given); `name_prefix` must start the memfd's name.
pub fn open_peer(
    pid: u32,
    key: u32,
    secret: u64,
    len: Option<usize>,
    name_prefix: &str,
) -> Result<Mapping> {
    let file = std::fs::File::from(crate::cuda::fd_fetch(pid, key, secret)?);
    let what = format!("memory descriptor {key} of pid {pid}");
    // Our own descriptor table names the file (the link of a received descriptor).
    let target = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|e| NcclError::system(&format!("readlink of {what}"), e))?;
    let target = target.to_string_lossy();
    if !target.starts_with(&format!("/memfd:{name_prefix}")) {
        return Err(NcclError::remote(format!(
            "{what} is {target}, not a memfd {name_prefix}*"
        )));
    }
    let actual = file
        .metadata()
        .map_err(|e| NcclError::system(&format!("fstat of {what}"), e))?
        .len();
    let len = match len {
        Some(len) if actual != len as u64 => {
            return Err(NcclError::remote(format!(
                "{what}: {actual} bytes, expected {len}"
            )))
        }
        _ => usize::try_from(actual)
            .map_err(|_| NcclError::remote(format!("{what}: {actual} bytes")))?,
    };
    if len == 0 {
        return Err(NcclError::remote(format!("{what} is empty")));
    }
    Mapping::shared(&file, 0, len, Access::ReadWrite).map_err(|e| NcclError::system("mmap", e))
}

/// Waits while `word == value`, at most `timeout`, without spinning (futex; works across
/// processes on shared mappings).
pub fn futex_wait(word: &AtomicU32, value: u32, timeout: Duration) {
    let ts = futex::Timespec {
        tv_sec: timeout.as_secs() as futex::Secs,
        tv_nsec: timeout.subsec_nanos() as futex::Nsecs,
    };
    // Not private: the word may be shared with other processes. A wake, a changed word, a
    // signal or the timeout all end the wait; the caller looks at the word again.
    let _ = futex::wait(word, futex::Flags::empty(), value, Some(&ts));
}

/// Wakes every waiter on `word`.
pub fn futex_wake(word: &AtomicU32) {
    let _ = futex::wake(word, futex::Flags::empty(), i32::MAX as u32);
}

/// What a wait is for, as its error messages name it: a collective's is written out only
/// when a message needs it, not at every call.
#[derive(Clone, Debug)]
pub enum WaitFor {
    /// Said in words.
    Text(String),
    /// The other ranks' call of the communicator's collective number `seq`, named `name`.
    Call {
        /// NCCL's name of the collective.
        name: &'static str,
        /// Its number among the communicator's operations.
        seq: u64,
    },
}

impl std::fmt::Display for WaitFor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitFor::Text(t) => f.write_str(t),
            WaitFor::Call { name, seq } => write!(f, "the other ranks to call {name} #{seq}"),
        }
    }
}

impl From<String> for WaitFor {
    fn from(t: String) -> WaitFor {
        WaitFor::Text(t)
    }
}

impl From<&str> for WaitFor {
    fn from(t: &str) -> WaitFor {
        WaitFor::Text(t.to_string())
    }
}

/// How long waits may last and how to stop them early.
#[derive(Clone)]
pub struct Waiter {
    /// When to give up.
    pub deadline: Instant,
    /// Set when the communicator is aborted.
    pub abort: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// What is being waited for, for the error message.
    pub what: WaitFor,
    /// Peer processes of this host that the wait depends on: (rank, pid, host name). A wait
    /// fails with `ncclRemoteError` as soon as one of them has exited.
    pub peers: std::sync::Arc<Vec<(usize, u32, String)>>,
}

/// Whether a process of this host is running: it exists and is not a zombie (a killed
/// process stays a zombie until its parent reaps it, which may be never).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may contain spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

impl Waiter {
    /// `ncclRemoteError` naming every watched peer whose process is gone, if any.
    pub fn check_peers(&self) -> Result<()> {
        let dead: Vec<String> = self
            .peers
            .iter()
            .filter(|(_, pid, _)| !process_alive(*pid))
            .map(|(rank, pid, host)| format!("rank {rank} (pid {pid} on {host})"))
            .collect();
        if dead.is_empty() {
            return Ok(());
        }
        Err(NcclError::remote(format!(
            "{} exited while this rank waited for {}",
            dead.join(", "),
            self.what
        )))
    }
}

impl Waiter {
    /// A waiter of `what` for one `NCCLSIM_TIMEOUT` from now, ended early by `abort`.
    pub fn new(
        what: impl Into<WaitFor>,
        abort: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Waiter {
        Waiter {
            deadline: Instant::now() + crate::bootstrap::timeout(),
            abort: abort.clone(),
            what: what.into(),
            peers: Default::default(),
        }
    }

    /// `Err` once the communicator is aborted or the deadline has passed.
    pub fn check(&self) -> Result<()> {
        self.check_at(Instant::now())
    }

    /// [`Waiter::check`] at time `now`.
    fn check_at(&self, now: Instant) -> Result<()> {
        if self.abort.load(Ordering::Relaxed) {
            return Err(NcclError::invalid_usage(format!(
                "communicator aborted while waiting for {}",
                self.what
            )));
        }
        if now >= self.deadline {
            return Err(NcclError::new(
                crate::types::result::TIMEOUT,
                format!(
                    "timed out waiting for {} (NCCLSIM_TIMEOUT, {:.0} s)",
                    self.what,
                    crate::bootstrap::timeout().as_secs_f64()
                ),
            ));
        }
        Ok(())
    }

    /// Waits until `done()` holds, sleeping on `word` between checks. `Err` on abort or timeout.
    pub fn wait_until(&self, word: &AtomicU32, done: impl FnMut() -> bool) -> Result<()> {
        self.wait(word, None, done)
    }

    /// [`Waiter::wait_until`] where whoever changes `word` wakes its sleepers only if
    /// `sleepers` (which this wait raises while it sleeps) is not zero; the waker must change
    /// `word` and then read `sleepers`, both sequentially consistent.
    pub fn wait_counted(
        &self,
        word: &AtomicU32,
        sleepers: &AtomicU32,
        done: impl FnMut() -> bool,
    ) -> Result<()> {
        self.wait(word, Some(sleepers), done)
    }

    fn wait(
        &self,
        word: &AtomicU32,
        sleepers: Option<&AtomicU32>,
        mut done: impl FnMut() -> bool,
    ) -> Result<()> {
        // Poll for a bounded time, yielding the core to the peers we wait for (`Spin`), then
        // sleep on the futex until the word changes: never a busy loop. One clock reading per
        // round serves the deadline and the polling phase.
        if done() {
            return Ok(());
        }
        let mut spin = Spin::new();
        loop {
            let seen = word.load(Ordering::Acquire);
            if done() {
                return Ok(());
            }
            let now = Instant::now();
            self.check_at(now)?;
            if spin.again_at(now) {
                continue;
            }
            let nap = (self.deadline - now).min(Duration::from_millis(100));
            match sleepers {
                Some(count) => {
                    count.fetch_add(1, Ordering::SeqCst);
                    // Read after counting ourselves: a change made before the waker read the
                    // count is seen here, any later one comes with a wake.
                    if word.load(Ordering::SeqCst) == seen {
                        futex_wait(word, seen, nap);
                    }
                    count.fetch_sub(1, Ordering::SeqCst);
                }
                None => futex_wait(word, seen, nap),
            }
            if word.load(Ordering::Acquire) == seen {
                self.check_peers()?;
            }
        }
    }
}

/// The polling phase of a wait: yields the core for up to `POLL` before the caller sleeps.
///
/// Ranks that share a core meet by handing it to each other: a yield runs a peer that has
/// still to arrive, and the change is seen as soon as the core comes back, with no sleep, no
/// wake and no system call on the waking side (the last rank to arrive wakes sleepers only if
/// there are any). Sleeping at once instead costs each waiting rank a futex sleep and the last
/// one a wake of every sleeper at every meeting, about 1.5x the time of a small collective on
/// 8 ranks sharing 2 cores. The phase is bounded in time, not in yields, so a rank never polls
/// for long: once `POLL` has passed (or a yield ran other work past it, as under foreign load)
/// it sleeps until woken, and an idle rank costs no CPU.
pub struct Spin {
    until: Instant,
}

impl Spin {
    /// A polling phase starting now.
    pub fn new() -> Spin {
        Spin {
            until: Instant::now() + POLL,
        }
    }

    /// Yields the core once and returns true while the polling phase lasts; false once it is
    /// over (then the caller sleeps until woken).
    pub fn again(&mut self) -> bool {
        self.again_at(Instant::now())
    }

    /// [`Spin::again`] at time `now`.
    pub fn again_at(&mut self, now: Instant) -> bool {
        if now >= self.until {
            return false;
        }
        std::thread::yield_now();
        true
    }
}

impl Default for Spin {
    fn default() -> Spin {
        Spin::new()
    }
}

/// How long a wait polls (yielding) before it sleeps.
const POLL: Duration = Duration::from_micros(200);

use fake_cuda_abi::shm::{ArenaHeader, ARENA_MAGIC, MEMFD_PREFIX as ARENA_PREFIX};

/// Peers' device arenas mapped by this process, shared by its communicators: by (pid, arena),
/// with the secret of the offer they were fetched with (a new process that reuses the pid has
/// other secrets, so its arenas are fetched anew).
#[derive(Default)]
pub struct PeerArenas {
    maps: HashMap<(u32, u32), (u64, Mapping)>,
}

impl PeerArenas {
    /// The local address of `offset` bytes into arena `arena_id` of process `pid` (offered
    /// by it under `key` with `secret`), fetching and mapping the arena whole on first use.
    pub fn address(
        &mut self,
        pid: u32,
        arena_id: u32,
        (key, secret): (u32, u64),
        offset: u64,
    ) -> Result<usize> {
        let outside = || {
            NcclError::remote(format!(
                "offset {offset} outside arena {arena_id} of pid {pid}"
            ))
        };
        if let Some((s, m)) = self.maps.get(&(pid, arena_id)) {
            if *s == secret {
                return (offset < m.len() as u64)
                    .then(|| m.ptr() as usize + offset as usize)
                    .ok_or_else(outside);
            }
        }
        let m = open_peer(pid, key, secret, None, ARENA_PREFIX)?;
        // The header names its owner and number: refuse anything else.
        if m.len() < std::mem::size_of::<ArenaHeader>() {
            return Err(NcclError::remote(format!(
                "arena {arena_id} of pid {pid} is too short"
            )));
        }
        // SAFETY: the mapping is page-aligned and holds at least one header.
        let h = unsafe { &*(m.ptr() as *const ArenaHeader) };
        let (magic, owner, id) = (h.magic, h.owner_pid, h.arena_id);
        if magic != ARENA_MAGIC || owner != pid || id != arena_id {
            return Err(NcclError::remote(format!(
                "memory descriptor {key} of pid {pid} is not its arena {arena_id}"
            )));
        }
        if offset >= m.len() as u64 {
            return Err(outside());
        }
        let addr = m.ptr() as usize + offset as usize;
        self.maps.insert((pid, arena_id), (secret, m));
        Ok(addr)
    }
}
