//! Unique ids and the TCP bootstrap (NCCL 2.30.7 `src/bootstrap.cc`, `src/misc/socket.cc`).
//!
//! `ncclGetUniqueId` picks the bootstrap interface's address, draws a random magic and starts a
//! root thread listening on an ephemeral port; the id carries the magic and the root's socket
//! address. Each rank connects to the root and presents {magic, rank, nranks, its peer info};
//! the root refuses connections with another magic, an out-of-range or already-taken rank or a
//! different rank count, and once every rank has arrived sends each the table of all ranks'
//! info. After that the root thread ends and the communicator's rank 0 serves as its hub:
//! every other rank keeps one connection to it, over which `allgather` runs (the split and
//! setup exchanges). Every wait has a deadline (`NCCLSIM_TIMEOUT`) and ends early when the
//! communicator is aborted; a root or hub that gives up tells every rank that joined it why
//! (which ranks are missing, which disconnected), so no rank waits for a job that has failed.

mod gather;

pub use gather::{spawn_root, stop_root, Hub, RootMember};

use crate::error::{NcclError, Result};
use crate::shm::Waiter;
use crate::types::{UniqueId, UNIQUE_ID_BYTES};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// NCCL_MAGIC: the magic of ids built from `NCCL_COMM_ID`.
pub const NCCL_MAGIC: u64 = 0x0280_0280_0280_0280;
/// Largest frame accepted from a member of the communicator (split and setup exchanges).
const MAX_FRAME: u64 = 1 << 30;
/// Largest hello accepted from a connection not yet known to be a rank (a rank's info is a
/// few hundred bytes).
const MAX_HELLO: u64 = 64 << 10;

/// The deadline of one bootstrap or operation wait (`NCCLSIM_TIMEOUT` seconds, default 600).
pub fn timeout() -> Duration {
    // Every operation's wait asks for it: read from the run environment once.
    static T: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *T.get_or_init(|| fake_cuda_client::run_env().map_or(run_env::DEFAULT_TIMEOUT, |e| e.timeout))
}

/// Random 64 bits from the kernel.
pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: writes at most 8 bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    if n != 8 {
        // Fall back on time and pid; uniqueness, not secrecy, is what the magic needs here.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        return t ^ ((std::process::id() as u64) << 32);
    }
    u64::from_le_bytes(b)
}

/// Encodes magic and root address into an `ncclUniqueId` (NCCL's `ncclBootstrapHandle`
/// layout: magic at 0, a `sockaddr_in` at 8).
pub fn encode_id(magic: u64, addr: SocketAddrV4) -> UniqueId {
    let mut b = [0u8; UNIQUE_ID_BYTES];
    b[0..8].copy_from_slice(&magic.to_le_bytes());
    b[8..10].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
    b[10..12].copy_from_slice(&addr.port().to_be_bytes());
    b[12..16].copy_from_slice(&addr.ip().octets());
    UniqueId { internal: b }
}

/// Magic and root address of an id.
pub fn decode_id(id: &UniqueId) -> Result<(u64, SocketAddrV4)> {
    let b = &id.internal;
    let magic = u64::from_le_bytes(b[0..8].try_into().expect("invariant: 8 bytes"));
    let family = u16::from_ne_bytes([b[8], b[9]]);
    if family != libc::AF_INET as u16 {
        return Err(NcclError::invalid_argument(format!(
            "unique id: address family {family} is not AF_INET (was the id made by ncclGetUniqueId?)"
        )));
    }
    let port = u16::from_be_bytes([b[10], b[11]]);
    let ip = Ipv4Addr::new(b[12], b[13], b[14], b[15]);
    Ok((magic, SocketAddrV4::new(ip, port)))
}

/// `NCCL_COMM_ID` (`ip:port` or `host:port`), if set.
pub fn comm_id_env() -> Result<Option<SocketAddrV4>> {
    let Ok(v) = std::env::var("NCCL_COMM_ID") else {
        return Ok(None);
    };
    use std::net::ToSocketAddrs;
    let addrs = v
        .to_socket_addrs()
        .map_err(|e| NcclError::invalid_argument(format!("NCCL_COMM_ID={v}: {e}")))?;
    for a in addrs {
        if let SocketAddr::V4(a) = a {
            return Ok(Some(a));
        }
    }
    Err(NcclError::invalid_argument(format!(
        "NCCL_COMM_ID={v}: no IPv4 address"
    )))
}

/// The bootstrap interface address: the first IPv4 interface matching `NCCL_SOCKET_IFNAME`
/// (prefixes, `^` to exclude, `=` for exact names), else the first up non-loopback one not
/// named docker*/virbr*, else loopback.
pub fn interface_addr() -> Ipv4Addr {
    let spec = std::env::var("NCCL_SOCKET_IFNAME").ok();
    let mut found: Vec<(String, Ipv4Addr)> = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut ifap) } == 0 {
        let mut p = ifap;
        while !p.is_null() {
            // SAFETY: p walks the list getifaddrs returned.
            let ifa = unsafe { &*p };
            p = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
                continue;
            }
            // SAFETY: ifa_addr is a valid sockaddr.
            if unsafe { (*ifa.ifa_addr).sa_family } as i32 != libc::AF_INET {
                continue;
            }
            // SAFETY: an AF_INET sockaddr is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            // SAFETY: ifa_name is a NUL-terminated string.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
                .to_string_lossy()
                .into_owned();
            found.push((name, ip));
        }
        // SAFETY: freeing the list getifaddrs returned.
        unsafe { libc::freeifaddrs(ifap) };
    }
    let pick = match spec {
        Some(spec) => {
            let (exclude, rest) = spec
                .strip_prefix('^')
                .map_or((false, spec.as_str()), |r| (true, r));
            let (exact, rest) = rest.strip_prefix('=').map_or((false, rest), |r| (true, r));
            let pats: Vec<&str> = rest.split(',').filter(|s| !s.is_empty()).collect();
            let matches = |n: &str| {
                pats.iter()
                    .any(|p| if exact { n == *p } else { n.starts_with(p) })
            };
            found
                .iter()
                .find(|(n, _)| matches(n) != exclude)
                .map(|(_, ip)| *ip)
        }
        None => found
            .iter()
            .find(|(n, ip)| {
                !ip.is_loopback() && !n.starts_with("docker") && !n.starts_with("virbr")
            })
            .map(|(_, ip)| *ip),
    };
    pick.unwrap_or(Ipv4Addr::LOCALHOST)
}

/// Writes one length-prefixed frame.
pub fn send_frame(s: &mut TcpStream, bytes: &[u8]) -> Result<()> {
    let mut buf = Vec::with_capacity(8 + bytes.len());
    buf.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    buf.extend_from_slice(bytes);
    s.write_all(&buf)
        .map_err(|e| NcclError::remote(format!("bootstrap send: {e}")))
}

/// Fills `buf` from `s`, checking `w` (abort, deadline) between short reads.
fn read_full(s: &mut TcpStream, buf: &mut [u8], w: &Waiter) -> Result<()> {
    let mut at = 0;
    while at < buf.len() {
        w.check()?;
        let slice = w
            .deadline
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), POLL_SLICE);
        s.set_read_timeout(Some(slice))
            .map_err(|e| NcclError::system("set_read_timeout", e))?;
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(NcclError::remote("connection closed by the peer")),
            Ok(n) => at += n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(NcclError::remote(format!("receive: {e}"))),
        }
    }
    Ok(())
}

/// Reads one length-prefixed frame of at most `max` bytes; ends early on `w`'s abort or
/// deadline. The buffer grows with the bytes that arrive, not with the length a peer claims.
pub fn recv_frame(s: &mut TcpStream, w: &Waiter, max: u64) -> Result<Vec<u8>> {
    let mut len = [0u8; 8];
    read_full(s, &mut len, w)?;
    let len = u64::from_le_bytes(len);
    if len > max {
        return Err(NcclError::remote(format!(
            "frame of {len} bytes refused (at most {max})"
        )));
    }
    let mut buf = Vec::new();
    while (buf.len() as u64) < len {
        let old = buf.len();
        let step = (len - old as u64).min(1 << 20) as usize;
        buf.resize(old + step, 0);
        read_full(s, &mut buf[old..], w)?;
    }
    Ok(buf)
}

/// How long a rank waits for the root past its own deadline.
const ROOT_GRACE: Duration = Duration::from_secs(2);

/// How long one blocking read or accept waits before checking for abort again.
const POLL_SLICE: Duration = Duration::from_millis(50);

/// A hello: who is connecting. Layout: magic u64, rank u32, nranks u32, payload.
fn hello(magic: u64, rank: usize, nranks: usize, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + payload.len());
    v.extend_from_slice(&magic.to_le_bytes());
    v.extend_from_slice(&(rank as u32).to_le_bytes());
    v.extend_from_slice(&(nranks as u32).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

fn parse_hello(b: &[u8]) -> Option<(u64, usize, usize, &[u8])> {
    if b.len() < 16 {
        return None;
    }
    let magic = u64::from_le_bytes(b[0..8].try_into().ok()?);
    let rank = u32::from_le_bytes(b[8..12].try_into().ok()?) as usize;
    let nranks = u32::from_le_bytes(b[12..16].try_into().ok()?) as usize;
    Some((magic, rank, nranks, &b[16..]))
}

/// Binds a listener on the bootstrap interface, ephemeral port (or `at`).
pub fn listen(at: Option<SocketAddrV4>) -> Result<TcpListener> {
    let addr = at.unwrap_or_else(|| SocketAddrV4::new(interface_addr(), 0));
    TcpListener::bind(addr).map_err(|e| NcclError::system(&format!("bind {addr}"), e))
}

/// The address peers reach a listener at.
pub fn local_addr(l: &TcpListener) -> Result<SocketAddrV4> {
    match l
        .local_addr()
        .map_err(|e| NcclError::system("getsockname", e))?
    {
        SocketAddr::V4(a) => Ok(a),
        SocketAddr::V6(a) => Err(NcclError::internal(format!("listener on IPv6 {a}"))),
    }
}

/// Connects to `addr`, retrying until `w`'s deadline (the listener may not exist yet) or until
/// a process `w` watches has exited.
fn connect_before(addr: SocketAddrV4, w: &Waiter) -> Result<TcpStream> {
    loop {
        let last = match TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5)) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => e,
        };
        if let Err(e) = w.check().and_then(|_| w.check_peers()) {
            return Err(NcclError::new(
                e.code,
                format!("{e} (cannot connect to {addr}: {last})"),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Joins through the root at `root`: returns every rank's payload, in rank order. Ends early
/// when `abort` is set.
pub fn exchange_with_root(
    root: SocketAddrV4,
    magic: u64,
    rank: usize,
    nranks: usize,
    payload: &[u8],
    abort: &Arc<AtomicBool>,
) -> Result<Vec<Vec<u8>>> {
    let mut w = Waiter::new("every rank to join", abort);
    // The root started its deadline first and names the missing ranks when it passes: wait a
    // little longer to hear that instead of a bare timeout.
    w.deadline += ROOT_GRACE;
    let mut s = connect_before(root, &w)
        .map_err(|e| NcclError::new(e.code, format!("bootstrap root at {root}: {}", e.message)))?;
    send_frame(&mut s, &hello(magic, rank, nranks, payload))?;
    let table = gather::recv_reply(&mut s, &w, &format!("bootstrap root at {root}"))?;
    gather::decode_table(&table, Some(nranks))
}

/// Little-endian encoder for bootstrap payloads.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);
impl Enc {
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends an i64.
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.u64(v as u64)
    }
    /// Appends a length-prefixed string.
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
}

/// Decoder matching [`Enc`]; every read is bounds-checked.
pub struct Dec<'a> {
    b: &'a [u8],
    at: usize,
}
impl<'a> Dec<'a> {
    /// Reads from `b`.
    pub fn new(b: &'a [u8]) -> Dec<'a> {
        Dec { b, at: 0 }
    }
    /// A u64.
    pub fn u64(&mut self) -> Result<u64> {
        let x = self
            .b
            .get(self.at..self.at + 8)
            .ok_or_else(|| NcclError::remote("bootstrap: short peer info"))?;
        self.at += 8;
        Ok(u64::from_le_bytes(
            x.try_into().expect("invariant: 8 bytes"),
        ))
    }
    /// An i64.
    pub fn i64(&mut self) -> Result<i64> {
        Ok(self.u64()? as i64)
    }
    /// A string.
    pub fn str(&mut self) -> Result<String> {
        let n = self.u64()? as usize;
        let x = self
            .b
            .get(self.at..self.at + n)
            .ok_or_else(|| NcclError::remote("bootstrap: short peer info"))?;
        self.at += n;
        Ok(String::from_utf8_lossy(x).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_round_trip() {
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 4567);
        let id = encode_id(0x1234, a);
        assert_eq!(decode_id(&id).unwrap(), (0x1234, a));
        let mut bad = id;
        bad.internal[8] = 99;
        assert!(decode_id(&bad).is_err());
    }

    fn flag() -> Arc<AtomicBool> {
        Arc::new(AtomicBool::new(false))
    }

    #[test]
    fn root_refuses_strangers_and_serves_the_rest() {
        let l = listen(Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))).unwrap();
        let addr = local_addr(&l).unwrap();
        spawn_root(l, 77);
        let w = Waiter::new("test", &flag());
        // Another magic, an out-of-range rank, garbage and a silent connection are refused
        // (their reads end when the root drops them) and do not delay the real ranks.
        let mut strangers: Vec<TcpStream> = Vec::new();
        // Sizes of 0 and 2^32-1 come first: neither may become the communicator's size.
        for frame in [
            hello(77, 0, 0, b"x"),
            hello(77, 0, u32::MAX as usize, b"x"),
            hello(78, 0, 2, b"x"),
            hello(77, 5, 2, b"x"),
        ] {
            let mut s = connect_before(addr, &w).unwrap();
            send_frame(&mut s, &frame).unwrap();
            strangers.push(s);
        }
        let mut garbage = connect_before(addr, &w).unwrap();
        garbage.write_all(&[0xff; 64]).unwrap();
        strangers.push(garbage);
        let silent = connect_before(addr, &w).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let t: Vec<_> = (0..2)
            .map(|r| {
                std::thread::spawn(move || {
                    exchange_with_root(addr, 77, r, 2, &[r as u8; 3], &flag()).unwrap()
                })
            })
            .collect();
        for h in t {
            assert_eq!(h.join().unwrap(), vec![vec![0u8; 3], vec![1u8; 3]]);
        }
        // Those with the magic (0, 1, 3) are told why they were refused; the others get nothing.
        for (i, mut s) in strangers.into_iter().enumerate() {
            let w = Waiter::new("test", &flag());
            if [0, 1, 3].contains(&i) {
                let e = gather::recv_reply(&mut s, &w, "root").unwrap_err();
                assert_eq!(e.code, crate::types::result::INVALID_USAGE, "{i}: {e}");
                assert!(e.message.contains("refused this rank: rank "), "{e}");
            } else {
                assert!(recv_frame(&mut s, &w, MAX_FRAME).is_err());
            }
        }
        drop(silent);
    }

    #[test]
    fn a_stopped_root_names_the_missing_ranks_to_those_that_joined() {
        let l = listen(Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))).unwrap();
        let addr = local_addr(&l).unwrap();
        spawn_root(l, 9);
        let joiner = std::thread::spawn(move || exchange_with_root(addr, 9, 1, 3, b"p", &flag()));
        std::thread::sleep(Duration::from_millis(300));
        stop_root(9);
        let e = joiner.join().unwrap().unwrap_err();
        assert_eq!(e.code, crate::types::result::REMOTE_ERROR);
        assert!(e.message.contains("ranks 0, 2 of 3"), "{}", e.message);
    }

    #[test]
    fn a_rank_that_leaves_the_root_early_is_named_to_the_others() {
        let l = listen(Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))).unwrap();
        let addr = local_addr(&l).unwrap();
        spawn_root(l, 11);
        let w = Waiter::new("test", &flag());
        let mut leaver = connect_before(addr, &w).unwrap();
        send_frame(&mut leaver, &hello(11, 1, 3, b"p")).unwrap();
        let joiner = std::thread::spawn(move || exchange_with_root(addr, 11, 0, 3, b"p", &flag()));
        std::thread::sleep(Duration::from_millis(200));
        drop(leaver);
        let e = joiner.join().unwrap().unwrap_err();
        assert_eq!(e.code, crate::types::result::REMOTE_ERROR);
        assert!(
            e.message.contains("rank 1") && e.message.contains("disconnected"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_rank_already_joined_refuses_its_duplicate_with_the_reason() {
        let l = listen(Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))).unwrap();
        let addr = local_addr(&l).unwrap();
        spawn_root(l, 13);
        // Two joiners claim rank 1 of 2: the second to arrive is refused while the root still
        // waits for rank 0, and returns first.
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..2 {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _ = tx.send(exchange_with_root(addr, 13, 1, 2, b"d", &flag()));
            });
        }
        let first = rx.recv().unwrap().unwrap_err();
        assert_eq!(first.code, crate::types::result::INVALID_USAGE, "{first}");
        assert!(
            first.message.contains("rank 1 has already joined"),
            "{}",
            first.message
        );
        let zero = std::thread::spawn(move || exchange_with_root(addr, 13, 0, 2, b"z", &flag()));
        let table = vec![b"z".to_vec(), b"d".to_vec()];
        assert_eq!(zero.join().unwrap().unwrap(), table);
        assert_eq!(rx.recv().unwrap().unwrap(), table);
    }

    #[test]
    fn a_formed_root_refuses_late_ranks_while_its_process_holds_the_communicator() {
        let l = listen(Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))).unwrap();
        let addr = local_addr(&l).unwrap();
        spawn_root(l, 15);
        let member = RootMember::join(15).expect("this process runs the root");
        let t: Vec<_> = (0..2)
            .map(|r| std::thread::spawn(move || exchange_with_root(addr, 15, r, 2, b"m", &flag())))
            .collect();
        for h in t {
            h.join().unwrap().unwrap();
        }
        // The communicator has formed: a late rank 1, and one that claims another size, are
        // refused at once with the reason.
        for (rank, n, why) in [
            (1, 2, "rank 1 has already joined"),
            (0, 2, "rank 0 has already joined"),
            (1, 3, "rank 1 of 3 (the communicator has 2 ranks)"),
        ] {
            let e = exchange_with_root(addr, 15, rank, n, b"late", &flag()).unwrap_err();
            assert_eq!(e.code, crate::types::result::INVALID_USAGE, "{e}");
            assert!(e.message.contains(why), "{}", e.message);
        }
        // The last communicator of this process going ends the root: its listener is closed
        // by the time the member is dropped (an NCCL_COMM_ID address is free again).
        let t = std::time::Instant::now();
        drop(member);
        assert!(TcpStream::connect(addr).is_err(), "the root still listens");
        eprintln!("the root ended {:?} after its last member", t.elapsed());
    }

    #[test]
    fn an_aborted_join_ends_promptly() {
        let l = listen(Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))).unwrap();
        let addr = local_addr(&l).unwrap();
        spawn_root(l, 10);
        let abort = flag();
        let a2 = abort.clone();
        let joiner = std::thread::spawn(move || exchange_with_root(addr, 10, 0, 2, b"p", &a2));
        std::thread::sleep(Duration::from_millis(100));
        abort.store(true, std::sync::atomic::Ordering::Relaxed);
        let e = joiner.join().unwrap().unwrap_err();
        assert!(e.message.contains("aborted"), "{}", e.message);
        stop_root(10);
    }
}
