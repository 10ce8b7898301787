//! Unique ids and the TCP bootstrap (NCCL 2.30.7 `src/bootstrap.cc`, `src/misc/socket.cc`).
//!
//! `ncclGetUniqueId` picks the bootstrap interface's address, draws a random magic and starts a
//! root thread listening on an ephemeral port; the id carries the magic and the root's socket
//! address. Each rank connects to the root and presents {magic, rank, nranks, its peer info};
//! the root refuses connections with another magic, an out-of-range or already-taken rank or a
//! different rank count, and once every rank has arrived sends each the table of all ranks'
//! info. After that the root thread ends and the communicator's rank 0 serves as its hub:
//! every other rank keeps one connection to it, over which `allgather` runs (the split and
//! setup exchanges). Every wait has a deadline (`NCCLSIM_TIMEOUT`).

use crate::error::{NcclError, Result};
use crate::types::{UniqueId, UNIQUE_ID_BYTES};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// NCCL_MAGIC: the magic of ids built from `NCCL_COMM_ID`.
pub const NCCL_MAGIC: u64 = 0x0280_0280_0280_0280;
/// Largest frame accepted from a peer (bounds memory a bad peer can make us allocate).
const MAX_FRAME: u64 = 1 << 30;

/// The deadline of one bootstrap or operation wait.
pub fn timeout() -> Duration {
    let secs = std::env::var("NCCLSIM_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| *v > 0.0)
        .unwrap_or(600.0);
    Duration::from_secs_f64(secs)
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

/// Reads one length-prefixed frame before `deadline`.
pub fn recv_frame(s: &mut TcpStream, deadline: Instant) -> Result<Vec<u8>> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_read_timeout(Some(left))
        .map_err(|e| NcclError::system("set_read_timeout", e))?;
    let mut len = [0u8; 8];
    s.read_exact(&mut len)
        .map_err(|e| NcclError::remote(format!("bootstrap receive: {e}")))?;
    let len = u64::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(NcclError::remote(format!(
            "bootstrap frame of {len} bytes refused"
        )));
    }
    let mut buf = vec![0u8; len as usize];
    s.read_exact(&mut buf)
        .map_err(|e| NcclError::remote(format!("bootstrap receive: {e}")))?;
    Ok(buf)
}

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

/// Accepts one connection before `deadline` (polling so the deadline holds).
fn accept_before(l: &TcpListener, deadline: Instant) -> Result<TcpStream> {
    l.set_nonblocking(true)
        .map_err(|e| NcclError::system("set_nonblocking", e))?;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)
                    .map_err(|e| NcclError::system("set_nonblocking", e))?;
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(NcclError::new(
                        crate::types::result::TIMEOUT,
                        "bootstrap: timed out waiting for ranks to connect (NCCLSIM_TIMEOUT)",
                    ));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(NcclError::system("accept", e)),
        }
    }
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

/// Runs the root: collects every rank's hello on `listener`, then sends each rank the table.
/// Connections with another magic or a bad rank are logged and dropped.
pub fn spawn_root(listener: TcpListener, magic: u64) {
    let _ = std::thread::Builder::new()
        .name("NCCL BootstrapR".into())
        .spawn(move || {
            if let Err(e) = run_root(&listener, magic) {
                crate::error::warn(&format!("bootstrap root: {e}"));
            }
        });
}

fn run_root(listener: &TcpListener, magic: u64) -> Result<()> {
    let deadline = Instant::now() + timeout();
    let mut nranks: Option<usize> = None;
    let mut conns: Vec<Option<(TcpStream, Vec<u8>)>> = Vec::new();
    let mut arrived = 0;
    while nranks.is_none_or(|n| arrived < n) {
        let mut s = accept_before(listener, deadline)?;
        let frame = match recv_frame(
            &mut s,
            Instant::now() + Duration::from_secs(10).min(timeout()),
        ) {
            Ok(f) => f,
            Err(e) => {
                crate::error::warn(&format!("bootstrap root: dropped a connection: {e}"));
                continue;
            }
        };
        let Some((m, rank, n, payload)) = parse_hello(&frame) else {
            crate::error::warn("bootstrap root: dropped a connection with a malformed hello");
            continue;
        };
        if m != magic {
            crate::error::warn(&format!(
                "bootstrap root: refused a connection with magic {m:#x} (expected {magic:#x})"
            ));
            continue;
        }
        let expected = *nranks.get_or_insert(n);
        if n != expected || rank >= expected || n == 0 {
            crate::error::warn(&format!(
                "bootstrap root: refused rank {rank} of {n} (communicator has {expected} ranks)"
            ));
            continue;
        }
        if conns.is_empty() {
            conns.resize_with(expected, || None);
        }
        if conns[rank].is_some() {
            crate::error::warn(&format!("bootstrap root: refused a second rank {rank}"));
            continue;
        }
        conns[rank] = Some((s, payload.to_vec()));
        arrived += 1;
    }
    let table = encode_table(
        conns
            .iter()
            .map(|c| c.as_ref().map_or(&[][..], |(_, p)| p.as_slice())),
    );
    for (s, _) in conns.iter_mut().flatten() {
        send_frame(s, &table)?;
    }
    Ok(())
}

fn encode_table<'a>(entries: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut v = Vec::new();
    for e in entries {
        v.extend_from_slice(&(e.len() as u64).to_le_bytes());
        v.extend_from_slice(e);
    }
    v
}

fn decode_table(b: &[u8], n: usize) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::with_capacity(n);
    let mut at = 0usize;
    for _ in 0..n {
        let len = b
            .get(at..at + 8)
            .map(|x| u64::from_le_bytes(x.try_into().expect("invariant: 8 bytes")) as usize)
            .ok_or_else(|| NcclError::remote("bootstrap: truncated table"))?;
        at += 8;
        let e = b
            .get(at..at + len)
            .ok_or_else(|| NcclError::remote("bootstrap: truncated table"))?;
        out.push(e.to_vec());
        at += len;
    }
    Ok(out)
}

/// Connects to `addr`, retrying until `deadline` (the root may not listen yet).
fn connect_before(addr: SocketAddrV4, deadline: Instant) -> Result<TcpStream> {
    loop {
        match TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5)) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => {
                if Instant::now() >= deadline {
                    return Err(NcclError::remote(format!(
                        "bootstrap: cannot connect to {addr}: {e}"
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Joins through the root at `root`: returns every rank's payload, in rank order.
pub fn exchange_with_root(
    root: SocketAddrV4,
    magic: u64,
    rank: usize,
    nranks: usize,
    payload: &[u8],
) -> Result<Vec<Vec<u8>>> {
    let deadline = Instant::now() + timeout();
    let mut s = connect_before(root, deadline)?;
    send_frame(&mut s, &hello(magic, rank, nranks, payload))?;
    let table = recv_frame(&mut s, deadline)?;
    decode_table(&table, nranks)
}

/// The communicator's hub: rank 0 holds one connection per other rank, the others one to
/// rank 0.
pub enum Hub {
    /// Rank 0.
    Root(Vec<Option<TcpStream>>),
    /// Any other rank.
    Leaf(TcpStream),
    /// A one-rank communicator.
    Alone,
}

impl Hub {
    /// Forms the hub: rank 0 accepts `nranks - 1` hellos with `magic` on `listener`; the
    /// others connect to `root_addr`.
    pub fn form(
        listener: Option<TcpListener>,
        root_addr: SocketAddrV4,
        magic: u64,
        rank: usize,
        nranks: usize,
    ) -> Result<Hub> {
        let deadline = Instant::now() + timeout();
        if nranks == 1 {
            return Ok(Hub::Alone);
        }
        if rank == 0 {
            let l = listener.ok_or_else(|| NcclError::internal("hub root without a listener"))?;
            let mut conns: Vec<Option<TcpStream>> = (0..nranks).map(|_| None).collect();
            let mut arrived = 1;
            while arrived < nranks {
                let mut s = accept_before(&l, deadline)?;
                let Ok(frame) = recv_frame(&mut s, Instant::now() + Duration::from_secs(10)) else {
                    continue;
                };
                match parse_hello(&frame) {
                    Some((m, r, n, _))
                        if m == magic
                            && n == nranks
                            && r > 0
                            && r < nranks
                            && conns[r].is_none() =>
                    {
                        conns[r] = Some(s);
                        arrived += 1;
                    }
                    _ => crate::error::warn(
                        "bootstrap hub: refused a connection (wrong magic, rank or size)",
                    ),
                }
            }
            Ok(Hub::Root(conns))
        } else {
            let mut s = connect_before(root_addr, deadline)?;
            send_frame(&mut s, &hello(magic, rank, nranks, &[]))?;
            Ok(Hub::Leaf(s))
        }
    }

    /// Every rank's `mine`, in rank order.
    pub fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let deadline = Instant::now() + timeout();
        match self {
            Hub::Alone => Ok(vec![mine.to_vec()]),
            Hub::Root(conns) => {
                let mut all = vec![mine.to_vec()];
                for (r, c) in conns.iter_mut().enumerate().skip(1) {
                    let s = c
                        .as_mut()
                        .ok_or_else(|| NcclError::internal("hub without rank connection"))?;
                    all.push(
                        recv_frame(s, deadline)
                            .map_err(|e| NcclError::remote(format!("rank {r}: {e}")))?,
                    );
                }
                let table = encode_table(all.iter().map(|v| v.as_slice()));
                for s in conns.iter_mut().flatten() {
                    send_frame(s, &table)?;
                }
                Ok(all)
            }
            Hub::Leaf(s) => {
                send_frame(s, mine)?;
                let t = recv_frame(s, deadline)?;
                decode_all(&t)
            }
        }
    }
}

fn decode_all(b: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let len = b
            .get(at..at + 8)
            .map(|x| u64::from_le_bytes(x.try_into().expect("invariant: 8 bytes")) as usize)
            .ok_or_else(|| NcclError::remote("bootstrap: truncated table"))?;
        at += 8;
        out.push(
            b.get(at..at + len)
                .ok_or_else(|| NcclError::remote("bootstrap: truncated table"))?
                .to_vec(),
        );
        at += len;
    }
    Ok(out)
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

    #[test]
    fn root_refuses_wrong_magic_and_serves_the_rest() {
        let l = listen(Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))).unwrap();
        let addr = local_addr(&l).unwrap();
        spawn_root(l, 77);
        // A stranger with another magic is refused; its read ends when the root drops it.
        let mut stranger = connect_before(addr, Instant::now() + Duration::from_secs(5)).unwrap();
        send_frame(&mut stranger, &hello(78, 0, 2, b"x")).unwrap();
        let t: Vec<_> = (0..2)
            .map(|r| {
                std::thread::spawn(move || {
                    exchange_with_root(addr, 77, r, 2, &[r as u8; 3]).unwrap()
                })
            })
            .collect();
        for h in t {
            assert_eq!(h.join().unwrap(), vec![vec![0u8; 3], vec![1u8; 3]]);
        }
        assert!(recv_frame(&mut stranger, Instant::now() + Duration::from_secs(2)).is_err());
    }
}
