//! The data path between hosts: one TCP connection per pair of ranks on different hosts,
//! made at init, and an event loop (`poll`) that sends and receives every message of an
//! operation at once, so no order of peers can deadlock.
//!
//! A communicator that spans hosts computes each rank's own output on its host from every
//! input it depends on: inputs of ranks on the same host are read in place through shared
//! memory, inputs of remote ranks arrive over their connections (only the part this rank's
//! output needs). Each message starts with {sequence, bytes, PreMulSum scalar, ready time, the
//! sender's call (collective, type, reduction, root), count}, so a peer that is out of step or
//! called something else is detected instead of corrupting data. A message whose header does
//! not match is still read to its end (into a scratch buffer), so the connection stays in step
//! and the communicator stays usable after the error; the exchange reports it once every
//! message has gone.

use crate::bootstrap::{self, Dec, Enc, Hub};
use crate::clock::SimTime;
use crate::error::{NcclError, Result};
use rustix::event::{PollFd, PollFlags};
use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

/// Connections to the ranks on other hosts (None for ranks of this host).
pub struct Links {
    conns: Vec<Option<TcpStream>>,
}

const HEADER: usize = 48;

/// Largest payload a mismatched header may announce (read and discarded).
const MAX_DISCARD: u64 = 1 << 40;

impl Links {
    /// No remote ranks.
    pub fn none(nranks: usize) -> Links {
        Links {
            conns: (0..nranks).map(|_| None).collect(),
        }
    }

    /// Connects every pair of ranks on different hosts: each rank listens, the addresses are
    /// exchanged through the hub, lower ranks connect to higher ones.
    pub fn connect(hub: &mut Hub, magic: u64, rank: usize, remote: &[bool]) -> Result<Links> {
        let n = remote.len();
        let listener = bootstrap::listen(None)?;
        let a = bootstrap::local_addr(&listener)?;
        let mut e = Enc::default();
        e.u64(u32::from(*a.ip()) as u64).u64(a.port() as u64);
        let all = hub.allgather(&e.0)?;
        let mut addrs = Vec::with_capacity(n);
        for b in &all {
            let mut d = Dec::new(b);
            addrs.push(SocketAddrV4::new((d.u64()? as u32).into(), d.u64()? as u16));
        }
        let deadline = Instant::now() + bootstrap::timeout();
        let mut conns: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
        for q in (rank + 1)..n {
            if remote[q] {
                let mut s = TcpStream::connect_timeout(&addrs[q].into(), Duration::from_secs(30))
                    .map_err(|e| {
                    NcclError::remote(format!("connecting to rank {q} at {}: {e}", addrs[q]))
                })?;
                let _ = s.set_nodelay(true);
                let mut hello = Vec::new();
                hello.extend_from_slice(&magic.to_le_bytes());
                hello.extend_from_slice(&(rank as u64).to_le_bytes());
                s.write_all(&hello)
                    .map_err(|e| NcclError::remote(format!("rank {q}: {e}")))?;
                conns[q] = Some(s);
            }
        }
        let expected = (0..rank).filter(|&q| remote[q]).count();
        listener
            .set_nonblocking(true)
            .map_err(|e| NcclError::system("set_nonblocking", e))?;
        let mut got = 0;
        while got < expected {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false)
                        .map_err(|e| NcclError::system("set_nonblocking", e))?;
                    let _ = s.set_nodelay(true);
                    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                    let mut hello = [0u8; 16];
                    if s.read_exact(&mut hello).is_err() {
                        continue;
                    }
                    let _ = s.set_read_timeout(None);
                    let m = u64::from_le_bytes(hello[0..8].try_into().expect("invariant: 8 bytes"));
                    let q = u64::from_le_bytes(hello[8..16].try_into().expect("invariant: 8 bytes"))
                        as usize;
                    if m != magic || q >= rank || !remote[q] || conns[q].is_some() {
                        crate::error::warn("net: refused a connection (wrong magic or rank)");
                        continue;
                    }
                    conns[q] = Some(s);
                    got += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if hub.abort_flag().load(std::sync::atomic::Ordering::Relaxed) {
                        return Err(NcclError::invalid_usage(
                            "communicator aborted while waiting for remote ranks to connect",
                        ));
                    }
                    if Instant::now() > deadline {
                        return Err(NcclError::new(
                            crate::types::result::TIMEOUT,
                            "net: timed out waiting for remote ranks to connect",
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(NcclError::system("accept", e)),
            }
        }
        for s in conns.iter().flatten() {
            s.set_nonblocking(true)
                .map_err(|e| NcclError::system("set_nonblocking", e))?;
        }
        Ok(Links { conns })
    }

    /// Whether `rank` is reached over the network.
    pub fn is_remote(&self, rank: usize) -> bool {
        self.conns.get(rank).is_some_and(|c| c.is_some())
    }
}

/// What a rank called, as its messages carry it: every rank of a collective must send the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// `ncclFunc` of the collective (`Collective as i32`), or -1 for send/receive.
    pub kind: i32,
    /// `ncclDataType_t` (0 for send/receive).
    pub dtype: u32,
    /// `ncclRedOp_t`; every operation a communicator created (PreMulSum) counts as one.
    pub op: i32,
    /// Root rank (rooted collectives), else 0.
    pub root: u32,
    /// NCCL's count argument.
    pub count: u64,
}

impl Call {
    /// Sends and receives: their sequence numbers and sizes are what must match.
    pub const P2P: Call = Call {
        kind: -1,
        dtype: 0,
        op: 0,
        root: 0,
        count: 0,
    };

    /// What a rank sends instead of its call when its host's ranks disagree on the operation
    /// (no data follows).
    pub const REFUSED: Call = Call {
        kind: -2,
        dtype: 0,
        op: 0,
        root: 0,
        count: 0,
    };

    /// The call of a collective.
    pub fn of(coll: &crate::ops::Coll) -> Call {
        let op = if crate::types::RedOp::is_dynamic(coll.op) {
            crate::types::RedOp::FIRST_DYNAMIC
        } else {
            coll.op
        };
        Call {
            kind: coll.kind as i32,
            dtype: coll.dtype as u32,
            op,
            root: coll.root as u32,
            count: coll.count as u64,
        }
    }

    fn pack(self) -> (u64, u64) {
        let sig = (self.kind as u8 as u64)
            | (self.dtype as u8 as u64) << 8
            | (self.op as u16 as u64) << 16
            | (self.root as u64) << 32;
        (sig, self.count)
    }

    fn unpack(sig: u64, count: u64) -> Call {
        Call {
            kind: sig as u8 as i8 as i32,
            dtype: (sig >> 8) as u8 as u32,
            op: (sig >> 16) as u16 as i32,
            root: (sig >> 32) as u32,
            count,
        }
    }

    fn describe(&self) -> String {
        if *self == Call::P2P {
            return "send/receive".into();
        }
        let name = crate::types::Collective::try_from(self.kind)
            .map_or("an unknown collective", |c| c.nccl_name());
        let op = if crate::types::RedOp::is_dynamic(self.op) {
            "a PreMulSum op".to_string()
        } else {
            self.op.to_string()
        };
        format!(
            "{name}(count {}, type {}, op {op}, root {})",
            self.count, self.dtype, self.root
        )
    }
}

/// One outgoing message.
pub struct Outgoing {
    /// Destination rank.
    pub peer: usize,
    /// Sequence number the receiver expects.
    pub seq: u64,
    /// PreMulSum scalar of the sender.
    pub scalar: u64,
    /// Virtual time at which the sender's stream reached the operation.
    pub ready: SimTime,
    /// Source address and length.
    pub src: usize,
    /// Bytes.
    pub len: usize,
    /// What the sender called.
    pub call: Call,
}

/// One expected message.
pub struct Incoming {
    /// Source rank.
    pub peer: usize,
    /// Expected sequence number.
    pub seq: u64,
    /// Expected bytes.
    pub len: usize,
    /// Where to put them.
    pub dst: usize,
    /// The sender's scalar, once received.
    pub scalar: u64,
    /// The sender's ready time, once received.
    pub ready: SimTime,
    /// What this rank called (the sender must have called the same).
    pub call: Call,
    /// Why the message does not belong to this operation, once its header is read.
    pub mismatch: Option<String>,
    /// Where a mismatched message's payload is read to (and dropped).
    discard: Vec<u8>,
}

impl Incoming {
    /// A message this rank expects from `peer`: `len` bytes into `dst`.
    pub fn new(peer: usize, seq: u64, len: usize, dst: usize, call: Call) -> Incoming {
        Incoming {
            peer,
            seq,
            len,
            dst,
            scalar: 0,
            ready: SimTime::ZERO,
            call,
            mismatch: None,
            discard: Vec::new(),
        }
    }

    /// Bytes of the payload being read: the expected ones, or the mismatched message's.
    fn payload(&self) -> usize {
        if self.mismatch.is_some() {
            self.discard.len()
        } else {
            self.len
        }
    }
}

/// How far one message has gone: its 32-byte header, then its payload.
struct Progress {
    header: [u8; HEADER],
    done: usize,
}

impl Progress {
    /// An outgoing message's header: {sequence, bytes, PreMulSum scalar, ready time, call,
    /// count}.
    fn outgoing(o: &Outgoing) -> Progress {
        let mut header = [0u8; HEADER];
        let (sig, count) = o.call.pack();
        for (k, v) in [
            o.seq,
            o.len as u64,
            o.scalar,
            o.ready.as_nanos(),
            sig,
            count,
        ]
        .into_iter()
        .enumerate()
        {
            header[8 * k..8 * k + 8].copy_from_slice(&v.to_le_bytes());
        }
        Progress { header, done: 0 }
    }

    /// An incoming message, nothing received yet.
    fn incoming() -> Progress {
        Progress {
            header: [0; HEADER],
            done: 0,
        }
    }

    /// Header field `k` (0 sequence, 1 bytes, 2 scalar, 3 ready time, 4 call, 5 count).
    fn field(&self, k: usize) -> u64 {
        u64::from_le_bytes(
            self.header[8 * k..8 * k + 8]
                .try_into()
                .expect("invariant: 8 bytes"),
        )
    }
}

/// One polled connection: whether it sends, and the index of its message.
type Polled = (bool, usize);

/// Sends and receives every message at once; messages on one connection go in list order.
pub fn exchange(
    links: &Links,
    out: &[Outgoing],
    inc: &mut [Incoming],
    waiter: &crate::shm::Waiter,
) -> Result<()> {
    let mut sp: Vec<Progress> = out.iter().map(Progress::outgoing).collect();
    let mut rp: Vec<Progress> = inc.iter().map(|_| Progress::incoming()).collect();
    let mut spin = crate::shm::Spin::new();
    loop {
        let mut fds: Vec<PollFd<'_>> = Vec::new();
        let mut what: Vec<Polled> = Vec::new();
        let sends = out.iter().map(|o| (o.peer, HEADER + o.len));
        let recvs = inc.iter().map(|m| (m.peer, HEADER + m.payload()));
        for (i, fd) in first_per_peer(links, sends, &sp, PollFlags::OUT)? {
            fds.push(fd);
            what.push((true, i));
        }
        for (i, fd) in first_per_peer(links, recvs, &rp, PollFlags::IN)? {
            fds.push(fd);
            what.push((false, i));
        }
        if fds.is_empty() {
            return match inc.iter().find_map(|m| m.mismatch.clone()) {
                Some(why) => Err(NcclError::invalid_usage(why)),
                None => Ok(()),
            };
        }
        if Instant::now() > waiter.deadline
            || waiter.abort.load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err(NcclError::new(
                crate::types::result::TIMEOUT,
                format!("network transfer for {} did not finish", waiter.what),
            ));
        }
        if !poll(&mut fds, &mut spin)? {
            continue;
        }
        for (fd, &(sending, i)) in fds.iter().zip(&what) {
            if fd.revents().is_empty() {
                continue;
            }
            if sending {
                send_some(links, &out[i], &mut sp[i])?;
            } else {
                recv_some(links, &mut inc[i], &mut rp[i])?;
            }
        }
    }
}

/// The first unfinished message per connection in one direction, with the pollfd that waits
/// for its connection to be ready for `events`. `msgs` gives each message's peer and total
/// bytes (header included).
fn first_per_peer<'a>(
    links: &'a Links,
    msgs: impl Iterator<Item = (usize, usize)>,
    progress: &[Progress],
    events: PollFlags,
) -> Result<Vec<(usize, PollFd<'a>)>> {
    let mut seen: Vec<usize> = Vec::new();
    let mut polled = Vec::new();
    for (i, (peer, total)) in msgs.enumerate() {
        if progress[i].done >= total || seen.contains(&peer) {
            continue;
        }
        seen.push(peer);
        let s = links.conns[peer]
            .as_ref()
            .ok_or_else(|| NcclError::internal(format!("no connection to rank {peer}")))?;
        polled.push((i, PollFd::new(s, events)));
    }
    Ok(polled)
}

/// Waits up to 100 ms for any of `fds`, first polling without blocking while `spin` lasts;
/// false when a signal interrupted the wait.
fn poll(fds: &mut [PollFd<'_>], spin: &mut crate::shm::Spin) -> Result<bool> {
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let timeout = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 100_000_000,
    };
    let mut t = &zero;
    loop {
        match rustix::event::poll(fds, Some(t)) {
            Ok(0) if std::ptr::eq(t, &zero) => {
                if !spin.again() {
                    t = &timeout;
                }
            }
            Ok(_) => return Ok(true),
            Err(rustix::io::Errno::INTR) => return Ok(false),
            Err(e) => return Err(NcclError::system("poll", e.into())),
        }
    }
}

/// Writes as much of an outgoing message as its connection takes without blocking.
fn send_some(links: &Links, o: &Outgoing, p: &mut Progress) -> Result<()> {
    let mut s = links.conns[o.peer]
        .as_ref()
        .expect("invariant: polled connection exists");
    while p.done < HEADER + o.len {
        let buf: &[u8] = if p.done < HEADER {
            &p.header[p.done..]
        } else {
            // SAFETY: the source range is the sender's own input for this op.
            unsafe {
                std::slice::from_raw_parts(
                    (o.src + p.done - HEADER) as *const u8,
                    o.len - (p.done - HEADER),
                )
            }
        };
        match s.write(buf) {
            Ok(0) => {
                return Err(NcclError::remote(format!(
                    "rank {} closed its connection",
                    o.peer
                )))
            }
            Ok(n) => p.done += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(NcclError::remote(format!(
                    "sending to rank {}: {e}",
                    o.peer
                )))
            }
        }
    }
    Ok(())
}

/// Reads as much of an incoming message as its connection has; checks the header once it is
/// complete.
fn recv_some(links: &Links, m: &mut Incoming, p: &mut Progress) -> Result<()> {
    let mut s = links.conns[m.peer]
        .as_ref()
        .expect("invariant: polled connection exists");
    while p.done < HEADER + m.payload() {
        let r = if p.done < HEADER {
            s.read(&mut p.header[p.done..])
        } else if m.mismatch.is_some() {
            let at = p.done - HEADER;
            s.read(&mut m.discard[at..])
        } else {
            // SAFETY: the destination is this rank's staging or output for the op.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(
                    (m.dst + p.done - HEADER) as *mut u8,
                    m.len - (p.done - HEADER),
                )
            };
            s.read(dst)
        };
        match r {
            Ok(0) => {
                return Err(NcclError::remote(format!(
                    "rank {} closed its connection (did it exit?)",
                    m.peer
                )))
            }
            Ok(n) => {
                p.done += n;
                if p.done == HEADER {
                    check_header(m, p)?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(NcclError::remote(format!(
                    "receiving from rank {}: {e}",
                    m.peer
                )))
            }
        }
    }
    Ok(())
}

/// Takes the sender's scalar and ready time from a complete header. A message whose sequence
/// number, size or call is not the one this rank expects is marked as a mismatch and its
/// payload read to its end into a scratch buffer (a payload beyond `MAX_DISCARD` cannot be
/// from a rank of this job and ends the exchange).
fn check_header(m: &mut Incoming, p: &Progress) -> Result<()> {
    let (seq, len) = (p.field(0), p.field(1));
    m.scalar = p.field(2);
    m.ready = SimTime::from_nanos(p.field(3));
    let call = Call::unpack(p.field(4), p.field(5));
    if seq == m.seq && len == m.len as u64 && call == m.call {
        return Ok(());
    }
    if len > MAX_DISCARD {
        return Err(NcclError::remote(format!(
            "rank {} sent a message of {len} bytes where {} were expected",
            m.peer, m.len
        )));
    }
    m.mismatch = Some(if call == Call::REFUSED {
        format!(
            "ranks disagree on operation #{seq}: rank {} found that the ranks of its host called different operations",
            m.peer
        )
    } else if seq != m.seq {
        format!(
            "rank {} sent operation #{seq} where operation #{} was expected (ranks called different numbers of operations)",
            m.peer, m.seq
        )
    } else {
        format!(
            "ranks disagree on operation #{seq}: rank {} called {} ({len} bytes for this rank) but this rank called {} ({} bytes expected)",
            m.peer,
            call.describe(),
            m.call.describe(),
            m.len
        )
    });
    m.discard = vec![0; len as usize];
    Ok(())
}
