//! Passing memory file descriptors to the processes entitled to them.
//!
//! Device memory lives in memfds (see [`crate::arena`]). Another process reaches one only by
//! receiving its descriptor from the owner over a Unix socket (`SCM_RIGHTS`), never by opening
//! `/proc/<pid>/fd/<n>`: the memfds are `chmod 000`, so such an open is refused (and with
//! `NCCLSIM_HARDEN=1` the process is not dumpable, so `/proc/<pid>/fd`, `/proc/<pid>/mem` and
//! ptrace are closed to other processes of the user too).
//!
//! Each process that shares memory listens on the abstract Unix socket `ncclsim-fd-<pid>`
//! (one thread, started with the first offer; abstract names vanish with the process, so
//! nothing is left behind). An *offer* registers a descriptor under a small key with a random
//! 64-bit secret; the key and secret travel to the entitled processes inside IPC handles (the
//! program passes those to whom it chooses, as with CUDA) or through a communicator's
//! bootstrap. A requester connects, checks that the listener is the owner process of the same
//! user (`SO_PEERCRED`: a process that took the name first cannot collect secrets), sends
//! {key, secret} and receives the descriptor. The owner answers only a connection of its own
//! user that presents the secret of a live offer; anything else is closed without a
//! descriptor. Both sides bound every read and write by a timeout, so a stalled peer delays a
//! request but never hangs either process.
//!
//! Wire format (little-endian): request `{magic "NSFD" u32, version u32, key u32, reserved
//! u32, secret u64}` (24 bytes); reply `{status u32, reserved u32}` (8 bytes), with the
//! descriptor attached when `status` is 0.
//!
//! This module is the core's one piece of process-wide state: the socket name is the
//! process's, whatever the number of cores in it.

use crate::error::{CoreError, Result};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::net::{
    self, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::sync::Mutex;
use std::time::Duration;

const REQUEST_MAGIC: u32 = 0x4446_534e;
const PROTOCOL_VERSION: u32 = 1;
const REQUEST_BYTES: usize = 24;
const REPLY_BYTES: usize = 8;
const STATUS_OK: u32 = 0;
const STATUS_REFUSED: u32 = 1;
/// How long the owner waits on one requester before dropping it (requests are answered one
/// at a time).
const SERVE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a requester waits for the owner's answer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The environment variable that makes a process not dumpable when it first shares memory.
pub const HARDEN_ENV: &str = run_env::names::HARDEN;

/// A descriptor registered with this process's broker: its key and secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The offer's key in the owner.
    pub key: u32,
    /// The secret a requester must present.
    pub secret: u64,
}

#[derive(Default)]
struct Registry {
    offers: HashMap<u32, (OwnedFd, u64)>,
    next_key: u32,
    /// The process whose listener runs (a forked child starts its own).
    listening_pid: u32,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn registry() -> std::sync::MutexGuard<'static, Option<Registry>> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

fn os(call: &'static str, e: rustix::io::Errno) -> CoreError {
    CoreError::Os {
        call,
        errno: std::io::Error::from(e).to_string(),
    }
}

fn socket_name(pid: u32) -> String {
    format!("ncclsim-fd-{pid}")
}

fn random_secret() -> Result<u64> {
    let mut b = [0u8; 8];
    loop {
        rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty())
            .map_err(|e| os("getrandom", e))?;
        let s = u64::from_le_bytes(b);
        if s != 0 {
            return Ok(s);
        }
    }
}

/// Registers a copy of `fd` with this process's broker (starting it on first use) and gives
/// the key and secret that fetch it. The copy is held until [`withdraw`].
pub fn offer(fd: BorrowedFd<'_>) -> Result<Grant> {
    let copy = fd.try_clone_to_owned().map_err(|e| CoreError::Os {
        call: "dup",
        errno: e.to_string(),
    })?;
    let secret = random_secret()?;
    let mut reg = registry();
    let reg = reg.get_or_insert_with(Registry::default);
    let pid = std::process::id();
    if reg.listening_pid != pid {
        start_listener(pid)?;
        reg.listening_pid = pid;
    }
    reg.next_key = reg.next_key.wrapping_add(1).max(1);
    while reg.offers.contains_key(&reg.next_key) {
        reg.next_key = reg.next_key.wrapping_add(1).max(1);
    }
    let key = reg.next_key;
    reg.offers.insert(key, (copy, secret));
    Ok(Grant { key, secret })
}

/// Drops an offer: its descriptor is no longer handed out (descriptors already passed stay
/// valid in their receivers).
pub fn withdraw(key: u32) {
    if let Some(reg) = registry().as_mut() {
        reg.offers.remove(&key);
    }
}

/// Makes the process not dumpable if [`HARDEN_ENV`] is `1`; says so on stderr if that fails.
fn harden_if_asked() {
    if run_env::RunEnv::current().is_ok_and(|e| e.harden) {
        if let Err(e) =
            rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        {
            eprintln!("ncclsim: {HARDEN_ENV}=1: cannot make the process non-dumpable: {e}");
        }
    }
}

fn start_listener(pid: u32) -> Result<()> {
    harden_if_asked();
    let sock = net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| os("socket", e))?;
    let name = socket_name(pid);
    let addr = SocketAddrUnix::new_abstract_name(name.as_bytes()).map_err(|e| os("socket", e))?;
    net::bind(&sock, &addr).map_err(|e| {
        CoreError::IpcMapFailed(format!(
            "cannot listen on the abstract socket {name:?} to share device memory with other \
         processes ({}); another process holds the name",
            std::io::Error::from(e)
        ))
    })?;
    net::listen(&sock, 64).map_err(|e| os("listen", e))?;
    std::thread::Builder::new()
        .name("ncclsim-fd".into())
        .stack_size(64 << 10)
        .spawn(move || serve(sock))
        .map_err(|e| CoreError::Os {
            call: "spawning the descriptor broker thread",
            errno: e.to_string(),
        })?;
    Ok(())
}

fn serve(listener: OwnedFd) {
    loop {
        match net::accept_with(&listener, SocketFlags::CLOEXEC) {
            Ok(conn) => {
                // A requester that misbehaves only loses its own request.
                let _ = answer(&conn);
            }
            Err(rustix::io::Errno::INTR | rustix::io::Errno::CONNABORTED) => {}
            // Out of descriptors or memory: let it pass rather than spin.
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn set_timeouts(sock: BorrowedFd<'_>, t: Duration) -> std::result::Result<(), rustix::io::Errno> {
    net::sockopt::set_socket_timeout(sock, net::sockopt::Timeout::Recv, Some(t))?;
    net::sockopt::set_socket_timeout(sock, net::sockopt::Timeout::Send, Some(t))
}

fn recv_exact(sock: BorrowedFd<'_>, buf: &mut [u8]) -> std::result::Result<(), rustix::io::Errno> {
    let mut got = 0;
    while got < buf.len() {
        match net::recv(sock, &mut buf[got..], RecvFlags::empty()) {
            Ok((0, _)) => return Err(rustix::io::Errno::CONNRESET),
            Ok((n, _)) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn answer(conn: &OwnedFd) -> std::result::Result<(), rustix::io::Errno> {
    set_timeouts(conn.as_fd(), SERVE_TIMEOUT)?;
    let cred = net::sockopt::socket_peercred(conn)?;
    if cred.uid != rustix::process::geteuid() {
        return Ok(());
    }
    let mut req = [0u8; REQUEST_BYTES];
    recv_exact(conn.as_fd(), &mut req)?;
    let word = |at: usize| u32::from_le_bytes(req[at..at + 4].try_into().expect("4 bytes"));
    let secret = u64::from_le_bytes(req[16..24].try_into().expect("8 bytes"));
    let found = (word(0) == REQUEST_MAGIC && word(4) == PROTOCOL_VERSION)
        .then(|| {
            let reg = registry();
            let (fd, want) = reg.as_ref()?.offers.get(&word(8))?;
            // Compared without an early exit, so timing tells nothing about the secret.
            ((want ^ secret) == 0)
                .then(|| fd.try_clone())
                .and_then(|r| r.ok())
        })
        .flatten();
    let status = if found.is_some() {
        STATUS_OK
    } else {
        STATUS_REFUSED
    };
    let mut reply = [0u8; REPLY_BYTES];
    reply[..4].copy_from_slice(&status.to_le_bytes());
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds;
    if let Some(fd) = &found {
        fds = [fd.as_fd()];
        control.push(SendAncillaryMessage::ScmRights(&fds));
    }
    net::sendmsg(
        conn,
        &[IoSlice::new(&reply)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// Fetches offer `grant` from process `owner_pid` of this host: connects to its broker,
/// checks the listener is that process and of this user, presents the secret and returns the
/// descriptor it passes. Fails (never hangs) if the owner is gone, refuses or stalls.
pub fn fetch(owner_pid: u32, grant: Grant) -> Result<OwnedFd> {
    let name = socket_name(owner_pid);
    let failed = |what: String| {
        CoreError::IpcMapFailed(format!("device memory of process {owner_pid}: {what}"))
    };
    let sys =
        |what: &str, e: rustix::io::Errno| failed(format!("{what}: {}", std::io::Error::from(e)));
    let sock = net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| sys("socket", e))?;
    set_timeouts(sock.as_fd(), FETCH_TIMEOUT).map_err(|e| sys("socket timeout", e))?;
    let addr =
        SocketAddrUnix::new_abstract_name(name.as_bytes()).map_err(|e| sys("socket name", e))?;
    net::connect(&sock, &addr).map_err(|e| {
        failed(format!(
            "no answer on its socket {name:?} ({}): the process is gone or shares no memory",
            std::io::Error::from(e)
        ))
    })?;
    let cred = net::sockopt::socket_peercred(&sock).map_err(|e| sys("SO_PEERCRED", e))?;
    let (pid, uid) = (cred.pid.as_raw_nonzero().get() as u32, cred.uid);
    if pid != owner_pid || uid != rustix::process::geteuid() {
        return Err(failed(format!(
            "its socket {name:?} is held by process {pid} (uid {}), not by it: secret withheld",
            uid.as_raw()
        )));
    }
    let mut req = [0u8; REQUEST_BYTES];
    req[0..4].copy_from_slice(&REQUEST_MAGIC.to_le_bytes());
    req[4..8].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    req[8..12].copy_from_slice(&grant.key.to_le_bytes());
    req[16..24].copy_from_slice(&grant.secret.to_le_bytes());
    let mut sent = 0;
    while sent < req.len() {
        match net::send(&sock, &req[sent..], SendFlags::NOSIGNAL) {
            Ok(n) => sent += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(sys("send", e)),
        }
    }
    let mut reply = [0u8; REPLY_BYTES];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match net::recvmsg(
            &sock,
            &mut [IoSliceMut::new(&mut reply)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(m) => break m.bytes,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(sys("receive", e)),
        }
    };
    let mut fd = None;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            // Every received descriptor is owned (and closed) here; the first is the answer.
            for f in fds {
                fd.get_or_insert(f);
            }
        }
    }
    let status = u32::from_le_bytes(reply[..4].try_into().expect("4 bytes"));
    match fd {
        Some(fd) if got == REPLY_BYTES && status == STATUS_OK => Ok(fd),
        _ if got == 0 => Err(failed("the connection closed without an answer".into())),
        _ => Err(CoreError::InvalidIpcHandle(format!(
            "process {owner_pid} refused offer {}: unknown or withdrawn, or the secret does \
             not match (forged or stale handle)",
            grant.key
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn memfd(bytes: &[u8]) -> OwnedFd {
        let fd = rustix::fs::memfd_create("ncclsim-broker-test", rustix::fs::MemfdFlags::CLOEXEC)
            .unwrap();
        rustix::io::write(&fd, bytes).unwrap();
        fd
    }

    #[test]
    fn an_offer_is_fetched_with_its_secret_only() {
        let fd = memfd(b"broker");
        let g = offer(fd.as_fd()).unwrap();
        let got = fetch(std::process::id(), g).unwrap();
        assert_ne!(got.as_raw_fd(), fd.as_raw_fd());
        let mut b = [0u8; 6];
        rustix::io::pread(&got, &mut b, 0).unwrap();
        assert_eq!(&b, b"broker", "the same file");
        for wrong in [
            Grant {
                secret: g.secret ^ 1,
                ..g
            },
            Grant {
                key: g.key + 1000,
                ..g
            },
        ] {
            assert!(
                matches!(
                    fetch(std::process::id(), wrong),
                    Err(CoreError::InvalidIpcHandle(_))
                ),
                "{wrong:?} was answered"
            );
        }
        withdraw(g.key);
        assert!(fetch(std::process::id(), g).is_err(), "withdrawn");
    }

    #[test]
    fn a_process_without_a_broker_is_named() {
        // Process 1 (init) never listens under our name.
        let e = fetch(1, Grant { key: 1, secret: 1 })
            .unwrap_err()
            .to_string();
        assert!(e.contains("process 1"), "{e}");
    }
}
