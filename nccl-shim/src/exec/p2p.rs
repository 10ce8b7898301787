//! Send/receive: per ordered pair of local ranks a ring of message slots in the segment (the
//! receiver copies straight from the sender's buffer), and TCP for peers on other hosts; one
//! progress loop per group, sleeping on the rank's futex doorbell when nothing can move.

use super::{bell_off, copy, entry_off, seg, BufRef, RING};
use crate::clock::{Meeting, SimTime};
use crate::error::{NcclError, Result};
use crate::host::HostGroup;
use crate::ops::P2p;
use crate::shm::{futex_wake, Mapping};
use std::sync::atomic::{AtomicU32, Ordering};

const EMPTY: u32 = 0;
const POSTED: u32 = 1;
const DONE: u32 = 2;
const MISMATCH: u32 = 3;

fn entry(m: &Mapping, n: usize, src: usize, dst: usize, k: usize) -> (&AtomicU32, *mut u8) {
    let off = entry_off(n, src, dst, k);
    (m.atomic_u32(off), m.ptr().wrapping_add(off))
}

fn ring_bell(m: &Mapping, n: usize, i: usize) {
    let b = m.atomic_u32(bell_off(n, i));
    b.fetch_add(1, Ordering::Release);
    futex_wake(b);
}

/// Runs a group's sends and receives as this rank (one progress loop, never deadlocking on
/// ordering across peers), whose stream reached them at virtual time `ready`. Returns when the
/// batch starts in virtual time: the latest ready time among this rank and its peers (each
/// message carries its sender's ready time, each acknowledgement its receiver's; a remote
/// receiver's is not sent back).
pub fn run_p2p(host: &HostGroup, ops: &[P2p], ready: SimTime) -> Result<SimTime> {
    let (remote, ops): (Vec<P2p>, Vec<P2p>) =
        ops.iter().partition(|o| host.links.is_remote(o.peer));
    let mut meeting = Meeting::new(ready);
    if !remote.is_empty() {
        meeting = run_remote_p2p(host, &remote, ready)?;
    }
    // Sends from buffers peers on this host cannot map go out from arena copies (receivers
    // copy straight into their own buffers).
    let shared = host.shares_with_processes;
    let mut staged = Vec::new();
    let mut ops = ops;
    for op in ops.iter_mut().filter(|o| o.send) {
        match super::staging::stage(host.cuda_dev, op.buf, op.bytes, true, shared) {
            Ok(s) => {
                op.buf = s.addr();
                staged.push(s);
            }
            Err(e) => {
                staged.into_iter().for_each(|s| s.release(false));
                return Err(e);
            }
        }
    }
    let result = run_local_p2p(host, &ops, ready, meeting).map(Meeting::start);
    staged.into_iter().for_each(|s| s.release(false));
    result
}

/// The local sends and receives of [`run_p2p`]; the ready times they carry join `meeting`.
fn run_local_p2p(
    host: &HostGroup,
    ops: &[P2p],
    ready: SimTime,
    mut meeting: Meeting,
) -> Result<Meeting> {
    let m = seg(host);
    let n = host.ranks.len();
    let me = host.index;
    let local_of = |rank: usize| {
        host.ranks
            .iter()
            .position(|&r| r == rank)
            .expect("invariant: one host")
    };
    let mut counts = host
        .p2p_counts
        .lock()
        .map_err(|_| NcclError::internal("p2p lock poisoned"))?;
    // Each op's slot index, assigned in call order per peer.
    #[derive(Clone, Copy, PartialEq)]
    enum St {
        Waiting,
        Posted,
        Finished,
    }
    let mut plan: Vec<(P2p, usize, usize, St)> = Vec::with_capacity(ops.len());
    for op in ops {
        let p = local_of(op.peer);
        let k = if op.send {
            counts.0[op.peer] += 1;
            counts.0[op.peer] - 1
        } else {
            counts.1[op.peer] += 1;
            counts.1[op.peer] - 1
        };
        plan.push((*op, p, k as usize, St::Waiting));
    }
    drop(counts);
    let bell = m.atomic_u32(bell_off(n, me));
    let waiter = host.waiter("send/receive peers");
    let mut error: Option<NcclError> = None;
    // A sender may only use slot k after the receiver freed its use of slot k - RING, which
    // the in-order processing per peer guarantees: wait until the slot is EMPTY.
    let mut step = |plan: &mut Vec<(P2p, usize, usize, St)>| -> Result<bool> {
        let mut moved = false;
        for (op, p, k, st) in plan.iter_mut() {
            let slot = *k % RING;
            match (*st, op.send) {
                (St::Waiting, true) => {
                    let (state, raw) = entry(m, n, me, *p, slot);
                    if state.load(Ordering::Acquire) == EMPTY {
                        let r = BufRef::of(op.buf);
                        // SAFETY: the entry lies in the segment and is ours while EMPTY.
                        unsafe {
                            raw.add(8).cast::<u64>().write_volatile(op.bytes as u64);
                            raw.add(16).cast::<BufRef>().write_volatile(r);
                            raw.add(READY).cast::<SimTime>().write_volatile(ready);
                        }
                        state.store(POSTED, Ordering::Release);
                        ring_bell(m, n, *p);
                        *st = St::Posted;
                        moved = true;
                    }
                }
                (St::Posted, true) => {
                    let (state, raw) = entry(m, n, me, *p, slot);
                    match state.load(Ordering::Acquire) {
                        DONE => {
                            // SAFETY: the receiver wrote its ready time before publishing DONE.
                            meeting
                                .join(unsafe { raw.add(READY).cast::<SimTime>().read_volatile() });
                            state.store(EMPTY, Ordering::Release);
                            ring_bell(m, n, *p);
                            *st = St::Finished;
                            moved = true;
                        }
                        MISMATCH => {
                            state.store(EMPTY, Ordering::Release);
                            ring_bell(m, n, *p);
                            *st = St::Finished;
                            moved = true;
                            error.get_or_insert(NcclError::invalid_usage(format!(
                                "rank {} sent {} bytes to rank {} which posted a receive of another size",
                                host.rank, op.bytes, op.peer
                            )));
                        }
                        _ => {}
                    }
                }
                (St::Waiting, false) => {
                    let (state, raw) = entry(m, n, *p, me, slot);
                    if state.load(Ordering::Acquire) == POSTED {
                        // SAFETY: the sender wrote these fields before publishing POSTED.
                        let (bytes, r, theirs) = unsafe {
                            (
                                raw.add(8).cast::<u64>().read_volatile(),
                                raw.add(16).cast::<BufRef>().read_volatile(),
                                raw.add(READY).cast::<SimTime>().read_volatile(),
                            )
                        };
                        meeting.join(theirs);
                        if bytes as usize != op.bytes {
                            state.store(MISMATCH, Ordering::Release);
                            error.get_or_insert(NcclError::invalid_usage(format!(
                                "rank {} posted a receive of {} bytes from rank {} which sent {bytes} bytes",
                                host.rank, op.bytes, op.peer
                            )));
                        } else {
                            match r.resolve(host, op.peer) {
                                Ok(src) => {
                                    // SAFETY: the sender posted `op.bytes` bytes (sizes
                                    // matched above) at `src`, which it leaves alone until we
                                    // publish DONE; `op.buf` is this rank's receive buffer
                                    // of that size (checked at enqueue).
                                    unsafe { copy(src, op.buf, op.bytes) };
                                    // SAFETY: the entry is ours until we publish DONE.
                                    unsafe {
                                        raw.add(READY).cast::<SimTime>().write_volatile(ready)
                                    };
                                    state.store(DONE, Ordering::Release);
                                }
                                Err(e) => {
                                    state.store(MISMATCH, Ordering::Release);
                                    error.get_or_insert(e);
                                }
                            }
                        }
                        ring_bell(m, n, *p);
                        *st = St::Finished;
                        moved = true;
                    }
                }
                _ => {}
            }
        }
        Ok(moved)
    };
    loop {
        let seen = bell.load(Ordering::Acquire);
        let moved = step(&mut plan)?;
        if plan.iter().all(|x| x.3 == St::Finished) {
            break;
        }
        if !moved {
            waiter.wait_until(bell, || bell.load(Ordering::Acquire) != seen)?;
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok(meeting),
    }
}

/// Where a message slot holds the sender's (then the receiver's) ready time.
const READY: usize = 56;

/// Marks point-to-point message numbers on a connection (collectives use operation numbers).
const P2P_SEQ: u64 = 1 << 62;

/// Sends and receives with ranks on other hosts, this rank ready at `ready`; returns the
/// meeting of this rank and the senders (a remote receiver's ready time is not sent back).
fn run_remote_p2p(host: &HostGroup, ops: &[P2p], ready: SimTime) -> Result<Meeting> {
    let mut outgoing = Vec::new();
    let mut incoming = Vec::new();
    {
        let mut counts = host
            .p2p_counts
            .lock()
            .map_err(|_| NcclError::internal("p2p lock poisoned"))?;
        for op in ops {
            if op.send {
                counts.0[op.peer] += 1;
                outgoing.push(crate::net::Outgoing {
                    peer: op.peer,
                    seq: P2P_SEQ | counts.0[op.peer],
                    scalar: 0,
                    ready,
                    src: op.buf,
                    len: op.bytes,
                    call: crate::net::Call::P2P,
                });
            } else {
                counts.1[op.peer] += 1;
                incoming.push(crate::net::Incoming::new(
                    op.peer,
                    P2P_SEQ | counts.1[op.peer],
                    op.bytes,
                    op.buf,
                    crate::net::Call::P2P,
                ));
            }
        }
    }
    crate::net::exchange(
        &host.links,
        &outgoing,
        &mut incoming,
        &host.waiter("send/receive across hosts"),
    )?;
    Ok(Meeting::new(ready).join_all(incoming.iter().map(|m| m.ready)))
}
