//! Gathering ranks on a listener (the unique id's root, a communicator's hub at rank 0) and the
//! hub's allgather (NCCL 2.30.7 `src/bootstrap.cc`: `bootstrapRoot`, `bootstrapAllGather`).
//!
//! A listener never waits on one connection: accepted connections are read without blocking
//! until each has sent a complete hello, so a peer that sends nothing, sends garbage, or
//! claims a huge frame costs a socket for a few seconds and never delays the real ranks.
//! Every answer to a rank is a reply frame: a table, or the reason the gathering failed (ranks
//! missing at the deadline, a rank that disconnected, an exited process of this host, an
//! aborted communicator), so every rank that joined fails with that reason at once. A peer
//! that presents the communicator's magic but is refused (a rank already joined, a rank or
//! size that does not fit) is a rank of the job using it wrongly: it is told why, and fails
//! with `ncclInvalidUsage`. Peers without the magic are dropped without an answer.
//!
//! A root does not end when it has sent the tables while a rank of this process holds the
//! communicator it formed ([`RootMember`]): it keeps its listener and refuses every later
//! peer presenting the magic with "rank N has already joined" (a rank that joins late, after
//! the others have formed the communicator, or a second process started with a rank already
//! taken), so that peer fails at once with the reason instead of waiting for the timeout, and
//! the communicator is not disturbed. It ends when the last such communicator of this process
//! goes (or the init fails here); a root whose process has no rank ends with its tables, as
//! NCCL's `bootstrapRoot` does.

use super::{hello, parse_hello, recv_frame, send_frame, timeout, MAX_FRAME, MAX_HELLO};
use crate::error::{NcclError, Result};
use crate::shm::Waiter;
use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Largest communicator a hello may announce (bounds what a bad hello makes a root allocate).
const MAX_RANKS: usize = 1 << 20;
/// How long an accepted connection may take to send its hello.
const HELLO_WAIT: Duration = Duration::from_secs(5);
/// How often joined connections and watched processes are checked while gathering.
const WATCH_EVERY: Duration = Duration::from_millis(100);
/// How often a root that has sent its tables reads the peers it is refusing.
const LINGER_EVERY: Duration = Duration::from_millis(20);
/// How long a root that has sent its tables waits for a connection before it looks again
/// whether it is still wanted (the last member's departure also wakes it by connecting).
const LINGER_IDLE_MS: i64 = 1000;

const REPLY_TABLE: u8 = 0;
const REPLY_FAILED: u8 = 1;
const REPLY_REFUSED: u8 = 2;

/// Sends a table to a rank.
fn send_table(s: &mut TcpStream, table: &[u8]) -> Result<()> {
    let mut v = Vec::with_capacity(1 + table.len());
    v.push(REPLY_TABLE);
    v.extend_from_slice(table);
    send_frame(s, &v)
}

/// Tells a rank why the gathering failed (best effort: it may be gone).
fn send_failure(s: &mut TcpStream, why: &str) {
    send_reason(s, REPLY_FAILED, why);
}

/// Sends a failure or refusal reply (best effort: the peer may be gone).
fn send_reason(s: &mut TcpStream, kind: u8, why: &str) {
    let mut v = vec![kind];
    v.extend_from_slice(why.as_bytes());
    let _ = s.set_nonblocking(false);
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = send_frame(s, &v);
}

/// Reads a reply from `from` (named in errors): the table, or the failure it reports as
/// `ncclRemoteError`, or its refusal of this rank as `ncclInvalidUsage`.
pub(super) fn recv_reply(s: &mut TcpStream, w: &Waiter, from: &str) -> Result<Vec<u8>> {
    let mut f = recv_frame(s, w, MAX_FRAME)
        .map_err(|e| NcclError::new(e.code, format!("{from}: {}", e.message)))?;
    match f.first() {
        Some(&REPLY_TABLE) => {
            f.remove(0);
            Ok(f)
        }
        Some(&REPLY_FAILED) => Err(NcclError::remote(format!(
            "{from}: {}",
            String::from_utf8_lossy(&f[1..])
        ))),
        Some(&REPLY_REFUSED) => Err(NcclError::invalid_usage(format!(
            "{from} refused this rank: {}",
            String::from_utf8_lossy(&f[1..])
        ))),
        _ => Err(NcclError::remote(format!("{from}: malformed reply"))),
    }
}

pub(super) fn encode_table<'a>(entries: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut v = Vec::new();
    for e in entries {
        v.extend_from_slice(&(e.len() as u64).to_le_bytes());
        v.extend_from_slice(e);
    }
    v
}

/// The entries of a table (exactly `n` of them when given).
pub(super) fn decode_table(b: &[u8], n: Option<usize>) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < b.len() {
        let len = b
            .get(at..at + 8)
            .map(|x| u64::from_le_bytes(x.try_into().expect("invariant: 8 bytes")) as usize)
            .ok_or_else(|| NcclError::remote("bootstrap: truncated table"))?;
        at += 8;
        let e = b
            .get(at..at.saturating_add(len))
            .ok_or_else(|| NcclError::remote("bootstrap: truncated table"))?;
        out.push(e.to_vec());
        at += len;
    }
    if n.is_some_and(|n| n != out.len()) {
        return Err(NcclError::remote(format!(
            "bootstrap: table of {} entries, expected {}",
            out.len(),
            n.unwrap_or(0)
        )));
    }
    Ok(out)
}

/// A connection that has not finished its hello yet.
struct Newcomer {
    s: TcpStream,
    from: SocketAddr,
    buf: Vec<u8>,
    since: Instant,
}

/// Ranks that joined a listener: each rank's connection and hello payload.
type Joined = Vec<Option<(TcpStream, Vec<u8>)>>;

/// A refused peer that was told why. Its connection stays open (what it sends is read and
/// discarded) until it closes it or [`HELLO_WAIT`] passes: closing a socket with unread data
/// resets the connection, and the peer could lose the reason.
struct Told {
    s: TcpStream,
    since: Instant,
}

impl Told {
    /// Whether the connection is still worth keeping.
    fn linger(&mut self) -> bool {
        let mut b = [0u8; 4096];
        loop {
            match self.s.read(&mut b) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => return false,
            }
        }
        self.since.elapsed() < HELLO_WAIT
    }
}

/// What a listener gathers: ranks of `nranks` (learned from the first valid hello when None)
/// presenting `magic`, except `own` (the gathering rank itself).
struct Gathering<'a> {
    who: &'a str,
    magic: u64,
    nranks: Option<usize>,
    own: Option<usize>,
    joined: Joined,
    told: Vec<Told>,
    /// Every rank has joined and been sent the table: any rank a peer claims is taken.
    formed: bool,
}

impl Gathering<'_> {
    fn arrived(&self) -> usize {
        self.joined.iter().filter(|c| c.is_some()).count()
    }

    fn complete(&self) -> bool {
        self.nranks
            .is_some_and(|n| self.arrived() + usize::from(self.own.is_some()) == n)
    }

    fn missing(&self) -> String {
        let Some(n) = self.nranks else {
            return "every rank (none joined)".into();
        };
        let m: Vec<String> = (0..n)
            .filter(|r| Some(*r) != self.own && self.joined[*r].is_none())
            .map(|r| r.to_string())
            .collect();
        format!(
            "rank{} {} of {n}",
            if m.len() == 1 { "" } else { "s" },
            m.join(", ")
        )
    }

    /// Accepts or refuses a complete hello.
    fn admit(&mut self, s: TcpStream, from: SocketAddr, frame: &[u8]) {
        let log = |why: &str| {
            crate::error::warn(&format!(
                "bootstrap {}: refused a connection from {from}: {why}",
                self.who
            ));
        };
        let Some((m, rank, n, payload)) = parse_hello(frame) else {
            return log("malformed hello");
        };
        if m != self.magic {
            return log(&format!(
                "magic {m:#x} is not this communicator's ({:#x})",
                self.magic
            ));
        }
        // From here on the peer holds the communicator's id: it is told why it is refused.
        let why = if n == 0 || n > MAX_RANKS || rank >= n {
            format!("rank {rank} of {n}")
        } else {
            // The first valid hello sets the size (as NCCL's root does); it cannot be 0 or
            // absurd.
            let expected = *self.nranks.get_or_insert(n);
            if self.joined.is_empty() && !self.formed {
                self.joined.resize_with(expected, || None);
            }
            if n != expected || rank >= expected || Some(rank) == self.own {
                format!("rank {rank} of {n} (the communicator has {expected} ranks)")
            } else if self.formed || self.joined[rank].is_some() {
                format!("rank {rank} has already joined")
            } else {
                self.joined[rank] = Some((s, payload.to_vec()));
                return;
            }
        };
        log(&why);
        let mut s = s;
        send_reason(&mut s, REPLY_REFUSED, &why);
        if s.set_nonblocking(true).is_ok() {
            self.told.push(Told {
                s,
                since: Instant::now(),
            });
        }
    }

    /// Reads what a newcomer has sent, never past its hello (a hub's ranks send their first
    /// exchange right after it); Some(frame) once the hello is complete, Err when the
    /// connection is to be dropped.
    fn progress(&self, c: &mut Newcomer) -> std::result::Result<Option<Vec<u8>>, String> {
        loop {
            let need = if c.buf.len() < 8 {
                8
            } else {
                let len = u64::from_le_bytes(c.buf[..8].try_into().expect("invariant: 8 bytes"));
                if len > MAX_HELLO {
                    return Err(format!("hello of {len} bytes (at most {MAX_HELLO})"));
                }
                8 + len as usize
            };
            if c.buf.len() >= 8 && c.buf.len() == need {
                return Ok(Some(c.buf[8..].to_vec()));
            }
            let old = c.buf.len();
            c.buf.resize(need, 0);
            match c.s.read(&mut c.buf[old..]) {
                Ok(0) => return Err("closed before its hello".into()),
                Ok(k) => c.buf.truncate(old + k),
                Err(e) if e.kind() == ErrorKind::Interrupted => c.buf.truncate(old),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    c.buf.truncate(old);
                    break;
                }
                Err(e) => return Err(format!("receive: {e}")),
            }
        }
        if c.since.elapsed() > HELLO_WAIT {
            return Err(format!("no hello within {HELLO_WAIT:?}"));
        }
        Ok(None)
    }

    /// A rank that joined and has since closed its connection, if any.
    fn disconnected(&self) -> Option<(usize, String)> {
        self.joined.iter().enumerate().find_map(|(r, c)| {
            let (s, _) = c.as_ref()?;
            let mut b = [0u8; 1];
            match s.peek(&mut b) {
                Ok(0) => Some((r, s.peer_addr().map_or("?".into(), |a| a.to_string()))),
                Err(e) if e.kind() != ErrorKind::WouldBlock => Some((r, e.to_string())),
                _ => None,
            }
        })
    }

    /// Why the gathering must stop now, if it must.
    fn failure(&self, w: &Waiter, watch: bool) -> Option<NcclError> {
        if w.abort.load(Ordering::Relaxed) {
            return Some(NcclError::invalid_usage(format!(
                "{} stopped: init was aborted or failed in process {} on {} while waiting for {}",
                self.who,
                std::process::id(),
                crate::error::host_name(),
                self.missing()
            )));
        }
        if Instant::now() >= w.deadline {
            return Some(NcclError::remote(format!(
                "{} did not join within NCCLSIM_TIMEOUT ({:.0} s)",
                self.missing(),
                timeout().as_secs_f64()
            )));
        }
        if watch {
            if let Some((r, at)) = self.disconnected() {
                return Some(NcclError::remote(format!(
                    "rank {r} ({at}) disconnected from {} before every rank joined",
                    self.who
                )));
            }
            if let Err(e) = w.check_peers() {
                return Some(e);
            }
        }
        None
    }
}

/// Accepts connections on `l` until every rank has joined (see [`Gathering`]); refused
/// connections are logged and dropped. On failure every rank that joined is told why.
fn gather(l: &TcpListener, g: &mut Gathering<'_>, w: &Waiter) -> Result<Joined> {
    l.set_nonblocking(true)
        .map_err(|e| NcclError::system("set_nonblocking", e))?;
    if let Some(n) = g.nranks {
        g.joined.resize_with(n, || None);
    }
    let mut newcomers: Vec<Newcomer> = Vec::new();
    let mut watched = Instant::now();
    while !g.complete() {
        let watch = watched.elapsed() >= WATCH_EVERY;
        if watch {
            watched = Instant::now();
        }
        if let Some(e) = g.failure(w, watch) {
            for (s, _) in g.joined.iter_mut().flatten() {
                send_failure(s, &e.message);
            }
            return Err(e);
        }
        poll(l, g, &mut newcomers)?;
        if !g.complete() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    for (s, _) in g.joined.iter().flatten() {
        s.set_nonblocking(false)
            .map_err(|e| NcclError::system("set_nonblocking", e))?;
    }
    Ok(std::mem::take(&mut g.joined))
}

/// One look at the listener without waiting: accepts new connections, reads what newcomers
/// sent and admits (or refuses) those whose hello is complete.
fn poll(l: &TcpListener, g: &mut Gathering<'_>, newcomers: &mut Vec<Newcomer>) -> Result<()> {
    loop {
        match l.accept() {
            Ok((s, from)) => {
                s.set_nonblocking(true)
                    .map_err(|e| NcclError::system("set_nonblocking", e))?;
                let _ = s.set_nodelay(true);
                newcomers.push(Newcomer {
                    s,
                    from,
                    buf: Vec::new(),
                    since: Instant::now(),
                });
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(NcclError::system("accept", e)),
        }
    }
    g.told.retain_mut(Told::linger);
    let mut i = 0;
    while i < newcomers.len() {
        match g.progress(&mut newcomers[i]) {
            Ok(None) => i += 1,
            Ok(Some(frame)) => {
                let c = newcomers.remove(i);
                g.admit(c.s, c.from, &frame);
            }
            Err(why) => {
                let c = newcomers.remove(i);
                crate::error::warn(&format!(
                    "bootstrap {}: dropped a connection from {}: {why}",
                    g.who, c.from
                ));
            }
        }
    }
    Ok(())
}

/// A connection that failed without a reply usually means its process died: names an exited
/// process of this host if there is one (its exit may lag the closing of its sockets by a
/// moment), else returns `otherwise()`.
fn exited_or(w: &Waiter, otherwise: impl FnOnce() -> NcclError) -> NcclError {
    if w.abort.load(Ordering::Relaxed) {
        return otherwise();
    }
    for _ in 0..5 {
        if let Err(e) = w.check_peers() {
            return e;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    otherwise()
}

/// A root this process runs: its stop flag and the ranks of this process that joined
/// through it and still hold their communicator.
struct Root {
    stop: Arc<AtomicBool>,
    members: usize,
    /// Where it listens (a connection wakes its idle wait).
    addr: Option<SocketAddrV4>,
    /// Its thread, joined when the last member goes.
    thread: Option<std::thread::JoinHandle<()>>,
    /// The process running the thread (a forked child inherits the entry, not the thread).
    pid: u32,
}

/// The roots this process runs, by magic.
fn roots() -> std::sync::MutexGuard<'static, HashMap<u64, Root>> {
    static R: OnceLock<Mutex<HashMap<u64, Root>>> = OnceLock::new();
    R.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Stops the root of `magic` if this process runs it (an init of its communicator failed or
/// was aborted here): the ranks that joined it are told, and its thread and socket end.
pub fn stop_root(magic: u64) {
    if let Some(r) = roots().get(&magic) {
        r.stop.store(true, Ordering::Relaxed);
    }
}

/// A rank of this process joining through a root this process runs, for as long as it holds
/// the communicator: while one exists, the root refuses late peers with the reason rather than
/// closing its listener (see the module's documentation).
pub struct RootMember(u64);

impl RootMember {
    /// Counts a rank joining the communicator of `magic` in, if this process runs its root.
    pub fn join(magic: u64) -> Option<RootMember> {
        let mut r = roots();
        r.get_mut(&magic)?.members += 1;
        Some(RootMember(magic))
    }
}

impl Drop for RootMember {
    /// The last member stops the root and waits for its thread, so its listener is closed
    /// (and an `NCCL_COMM_ID` address free again) when the communicator is gone.
    fn drop(&mut self) {
        let (thread, addr) = {
            let mut r = roots();
            let Some(root) = r.get_mut(&self.0) else {
                return;
            };
            root.members = root.members.saturating_sub(1);
            if root.members > 0 {
                return;
            }
            root.stop.store(true, Ordering::Relaxed);
            let thread = root.thread.take();
            if root.pid != std::process::id() {
                // Forked: the thread is the parent's; leave it alone.
                std::mem::forget(thread);
                return;
            }
            (thread, root.addr)
        };
        if let Some(t) = thread {
            if let Some(a) = addr {
                let _ = TcpStream::connect_timeout(&a.into(), Duration::from_millis(200));
            }
            let _ = t.join();
        }
    }
}

/// Whether the root of `magic` is to keep refusing late peers: not stopped, and a rank of
/// this process still holds the communicator.
fn lingers(magic: u64, stop: &AtomicBool) -> bool {
    !stop.load(Ordering::Relaxed) && roots().get(&magic).is_some_and(|r| r.members > 0)
}

/// Runs the root: collects every rank's hello on `listener`, then sends each rank the table.
/// Connections with another magic or a bad rank are logged and dropped.
pub fn spawn_root(listener: TcpListener, magic: u64) {
    let stop = Arc::new(AtomicBool::new(false));
    roots().insert(
        magic,
        Root {
            stop: stop.clone(),
            members: 0,
            addr: super::local_addr(&listener).ok(),
            thread: None,
            pid: std::process::id(),
        },
    );
    let mine = stop.clone();
    let spawned = std::thread::Builder::new()
        .name("NCCL BootstrapR".into())
        .spawn(move || {
            if let Err(e) = run_root(&listener, magic, &stop) {
                crate::error::warn(&format!("bootstrap root: {e}"));
            }
            let mut r = roots();
            if r.get(&magic).is_some_and(|x| Arc::ptr_eq(&x.stop, &stop)) {
                r.remove(&magic);
            }
        });
    match spawned {
        Ok(t) => {
            // Unless the thread has already ended (and taken the entry with it).
            if let Some(root) = roots()
                .get_mut(&magic)
                .filter(|r| Arc::ptr_eq(&r.stop, &mine))
            {
                root.thread = Some(t);
            }
        }
        Err(e) => crate::error::warn(&format!("bootstrap root: cannot start its thread: {e}")),
    }
}

fn run_root(listener: &TcpListener, magic: u64, stop: &Arc<AtomicBool>) -> Result<()> {
    let addr = super::local_addr(listener)?;
    let who = format!("the bootstrap root at {addr}");
    let w = Waiter::new("every rank to join", stop);
    let mut g = Gathering {
        who: &who,
        magic,
        nranks: None,
        own: None,
        joined: Vec::new(),
        told: Vec::new(),
        formed: false,
    };
    let mut joined = gather(listener, &mut g, &w)?;
    let table = encode_table(
        joined
            .iter()
            .map(|c| c.as_ref().map_or(&[][..], |(_, p)| p.as_slice())),
    );
    // Highest rank first: the process running the root is usually rank 0's, which may go
    // on (or die) as soon as it has its table; every other rank has its table by then.
    for (s, _) in joined.iter_mut().rev().flatten() {
        send_table(s, &table)?;
    }
    drop(joined);
    // Late peers: refused with the reason while this process holds the communicator.
    g.formed = true;
    let mut newcomers = Vec::new();
    while lingers(magic, stop) {
        poll(listener, &mut g, &mut newcomers)?;
        if newcomers.is_empty() && g.told.is_empty() {
            // Idle: sleep until a connection comes (or the last member's wake-up call).
            let mut fds = [rustix::event::PollFd::new(
                listener,
                rustix::event::PollFlags::IN,
            )];
            let idle = rustix::event::Timespec {
                tv_sec: LINGER_IDLE_MS / 1000,
                tv_nsec: (LINGER_IDLE_MS % 1000) * 1_000_000,
            };
            let _ = rustix::event::poll(&mut fds, Some(&idle));
        } else {
            std::thread::sleep(LINGER_EVERY);
        }
    }
    Ok(())
}

enum Links {
    /// Rank 0: one connection per other rank.
    Root(Vec<Option<TcpStream>>),
    /// Any other rank: its connection to rank 0.
    Leaf(TcpStream),
    /// A one-rank communicator.
    Alone,
}

/// The communicator's hub: rank 0 holds one connection per other rank, the others one to
/// rank 0. Its waits end when the communicator's abort flag is set.
pub struct Hub {
    links: Links,
    abort: Arc<AtomicBool>,
    /// Other processes of this host in the communicator: (rank, pid, host).
    local: Arc<Vec<(usize, u32, String)>>,
}

impl Hub {
    /// Forms the hub: rank 0 accepts `nranks - 1` hellos with `magic` on `listener`; the
    /// others connect to `root_addr`. Either fails at once when one of `local` (other
    /// processes of this host, as (rank, pid, host)) has exited.
    pub fn form(
        listener: Option<TcpListener>,
        root_addr: SocketAddrV4,
        magic: u64,
        (rank, nranks): (usize, usize),
        local: Vec<(usize, u32, String)>,
        abort: &Arc<AtomicBool>,
    ) -> Result<Hub> {
        let mut w = Waiter::new("every rank to join the communicator's hub", abort);
        w.peers = Arc::new(local);
        let links = if nranks == 1 {
            Links::Alone
        } else if rank == 0 {
            let l = listener.ok_or_else(|| NcclError::internal("hub root without a listener"))?;
            let who = format!("rank 0's hub at {root_addr}");
            let mut g = Gathering {
                who: &who,
                magic,
                nranks: Some(nranks),
                own: Some(0),
                joined: Vec::new(),
                told: Vec::new(),
                formed: false,
            };
            let joined = gather(&l, &mut g, &w)?;
            Links::Root(joined.into_iter().map(|c| c.map(|(s, _)| s)).collect())
        } else {
            let mut s = super::connect_before(root_addr, &w)
                .map_err(|e| NcclError::new(e.code, format!("rank 0's hub: {}", e.message)))?;
            send_frame(&mut s, &hello(magic, rank, nranks, &[]))?;
            Links::Leaf(s)
        };
        Ok(Hub {
            links,
            abort: abort.clone(),
            local: w.peers.clone(),
        })
    }

    /// The communicator's abort flag, for other waits of its setup.
    pub fn abort_flag(&self) -> &Arc<AtomicBool> {
        &self.abort
    }

    /// Every rank's `mine`, in rank order. A rank that fails or disconnects is named to every
    /// other rank.
    pub fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut w = Waiter::new("the communicator's bootstrap exchange", &self.abort);
        w.peers = self.local.clone();
        match &mut self.links {
            Links::Alone => Ok(vec![mine.to_vec()]),
            Links::Root(conns) => {
                let mut all = vec![mine.to_vec()];
                let mut failed = None;
                for (r, c) in conns.iter_mut().enumerate().skip(1) {
                    let s = c
                        .as_mut()
                        .ok_or_else(|| NcclError::internal("hub without rank connection"))?;
                    match recv_frame(s, &w, MAX_FRAME) {
                        Ok(f) => all.push(f),
                        Err(e) => {
                            failed = Some(exited_or(&w, || {
                                NcclError::new(
                                    e.code,
                                    format!("rank {r} in the bootstrap exchange: {}", e.message),
                                )
                            }));
                            break;
                        }
                    }
                }
                if let Some(e) = failed {
                    for s in conns.iter_mut().flatten() {
                        send_failure(s, &e.message);
                    }
                    return Err(e);
                }
                let table = encode_table(all.iter().map(|v| v.as_slice()));
                for (r, s) in conns.iter_mut().enumerate() {
                    if let Some(s) = s {
                        send_table(s, &table)
                            .map_err(|e| NcclError::remote(format!("rank {r}: {e}")))?;
                    }
                }
                Ok(all)
            }
            Links::Leaf(s) => {
                let t = send_frame(s, mine)
                    .map_err(|e| NcclError::remote(format!("rank 0 (the hub): {e}")))
                    .and_then(|_| recv_reply(s, &w, "rank 0 (the hub)"))
                    .map_err(|e| exited_or(&w, || e))?;
                decode_table(&t, None)
            }
        }
    }
}
