//! Collectives of a communicator that spans hosts: each rank computes its own output from the
//! parts of every input it needs, same-host inputs read in place and remote ones received over
//! TCP (`net`).

use super::{barrier, copy, reduce_range, Arith, Desc};
use crate::clock::{Meeting, SimTime};
use crate::error::Result;
use crate::host::HostGroup;
use crate::ops::Coll;
use crate::shm::Waiter;
use crate::types::{Collective, Reduction};

/// Which part of rank `q`'s input rank `p`'s own output needs: (offset, bytes) in q's send
/// buffer, or None.
pub(super) fn needed(coll: &Coll, bytes: usize, q: usize, p: usize) -> Option<(usize, usize)> {
    let root = coll.root;
    let r = match coll.kind {
        Collective::AllReduce | Collective::AllGather => Some((0, bytes)),
        Collective::Reduce | Collective::Gather => (p == root).then_some((0, bytes)),
        Collective::ReduceScatter | Collective::AlltoAll => Some((p * bytes, bytes)),
        Collective::Broadcast => (q == root).then_some((0, bytes)),
        Collective::Scatter => (q == root).then_some((p * bytes, bytes)),
        Collective::SendRecv => None,
    };
    r.filter(|(_, len)| *len > 0)
}

/// Messages of one operation from the remote ranks, and the buffers they were received into
/// (which the messages point at: keep them while the messages are read).
pub(super) type Received = (Vec<crate::net::Incoming>, Vec<Vec<u64>>);

/// One message each way with every remote rank, empty where no data flows, so every rank
/// checks every other's call and a rank that disagrees cannot leave a peer waiting: this
/// rank sends the part of its input at `send` each remote rank needs, with its call and
/// `mine`'s sequence number, scalar and ready time, and receives the part of each remote
/// rank's input its own output needs.
pub(super) fn exchange_remote(
    host: &HostGroup,
    coll: &Coll,
    mine: &Desc,
    send: usize,
    waiter: &Waiter,
) -> Result<Received> {
    let me = host.rank;
    let bytes = coll.count * coll.dtype.size();
    let call = crate::net::Call::of(coll);
    let mut outgoing = Vec::new();
    let mut incoming = Vec::new();
    let mut staging: Vec<Vec<u64>> = Vec::new();
    for q in 0..host.nranks {
        if !host.links.is_remote(q) {
            continue;
        }
        let (off, len) = needed(coll, bytes, me, q).unwrap_or((0, 0));
        outgoing.push(crate::net::Outgoing {
            peer: q,
            seq: mine.seq,
            ready: mine.ready,
            scalar: mine.scalar,
            src: send + off,
            len,
            call,
        });
        let len = needed(coll, bytes, q, me).map_or(0, |(_, len)| len);
        let buf = vec![0u64; len.div_ceil(8)];
        incoming.push(crate::net::Incoming::new(
            q,
            mine.seq,
            len,
            buf.as_ptr() as usize,
            call,
        ));
        staging.push(buf);
    }
    crate::net::exchange(&host.links, &outgoing, &mut incoming, waiter)?;
    Ok((incoming, staging))
}

/// A communicator spanning hosts: each rank computes its own output from the parts of every
/// input it needs (same-host inputs in place, remote ones received into staging), into a
/// private buffer; after every local rank has read its inputs (barrier) the result is copied
/// to the output, so in-place operations never overwrite an input a peer still reads. The
/// remote ranks' ready times (each message carries its sender's) join `meeting`, the local
/// ranks' meeting, which is returned.
pub(super) fn work_across_hosts(
    host: &HostGroup,
    coll: &Coll,
    local: &[Desc],
    waiter: &Waiter,
    meeting: Meeting,
) -> Result<Meeting> {
    let n = host.nranks;
    let me = host.rank;
    let bytes = coll.count * coll.dtype.size();
    let mine = &local[host.index];
    let (incoming, _staging) = exchange_remote(host, coll, mine, coll.send, waiter)?;
    // The part of every rank's input this rank needs, and each rank's scalar.
    let mut parts = vec![0usize; n];
    let mut scalars = vec![0u64; n];
    for (li, &q) in host.ranks.iter().enumerate() {
        let src = local[li].send.resolve(host, q)?;
        scalars[q] = local[li].scalar;
        if let Some((off, _)) = needed(coll, bytes, q, me) {
            parts[q] = src + off;
        }
    }
    for m in incoming.iter().filter(|m| m.len > 0) {
        parts[m.peer] = m.dst;
        scalars[m.peer] = m.scalar;
    }
    let (_, recv_elems) = coll.kind.extents(coll.count, n, me, coll.root);
    let out_len = recv_elems * coll.dtype.size();
    let mut result = vec![0u64; out_len.div_ceil(8)];
    let out = result.as_mut_ptr() as usize;
    // SAFETY: the parts are peers' send buffers on this host (each holding its rank's extent,
    // checked at enqueue, mapped by `BufRef::resolve`) or the staging buffers received above,
    // each at least the length `needed` gives; no rank writes a send buffer before the closing
    // barrier. `out` is this rank's private `result`, sized for its output.
    unsafe { own_output(coll, me, &parts, &scalars, out) };
    barrier(host, waiter)?;
    // SAFETY: `result` holds `out_len` bytes; `coll.recv` is this rank's receive buffer, of
    // its extent (checked at enqueue), which only this rank writes, now that every local
    // rank has read the inputs it may alias (barrier above).
    unsafe { copy(out, coll.recv, out_len) };
    Ok(meeting.join_all(incoming.iter().map(|m| m.ready)))
}

/// Computes rank `me`'s output of `coll` at `out` from `parts[q]`, where the part of rank q's
/// input that `needed(coll, bytes, q, me)` names lies (unused for ranks it names none), and
/// each rank's PreMulSum scalar; reductions in rank order, so every rank computing an element
/// gets the same bits.
///
/// # Safety
/// Each named part must be readable for its length and `out` writable for this rank's
/// receive extent; no other thread may write those parts or touch `out` during the call, and
/// `out` must not overlap a part.
pub(super) unsafe fn own_output(
    coll: &Coll,
    me: usize,
    parts: &[usize],
    scalars: &[u64],
    out: usize,
) {
    let bytes = coll.count * coll.dtype.size();
    let scal: &[u64] = if matches!(coll.red, Reduction::PreMulSum { .. }) {
        scalars
    } else {
        &[]
    };
    let arith = Arith {
        dtype: coll.dtype,
        red: coll.red,
        scalars: scal,
    };
    // SAFETY: the ranges named by `needed` and the output, under this function's contract.
    unsafe {
        match coll.kind {
            Collective::AllReduce | Collective::ReduceScatter => {
                reduce_range(arith, parts, 0, &[out], 0, bytes)
            }
            Collective::Reduce if me == coll.root => {
                reduce_range(arith, parts, 0, &[out], 0, bytes)
            }
            Collective::Broadcast | Collective::Scatter => copy(parts[coll.root], out, bytes),
            Collective::AllGather | Collective::AlltoAll => {
                for (q, &p) in parts.iter().enumerate() {
                    copy(p, out + q * bytes, bytes);
                }
            }
            Collective::Gather if me == coll.root => {
                for (q, &p) in parts.iter().enumerate() {
                    copy(p, out + q * bytes, bytes);
                }
            }
            _ => {}
        }
    }
}

/// Tells every remote rank that this rank's operation #`seq` failed before its work (its host's
/// ranks disagree): an empty message with this rank's call each way, so remote ranks see the
/// disagreement too instead of waiting, and the connections stay in step.
pub(super) fn refuse_across_hosts(host: &HostGroup, coll: &Coll, seq: u64, waiter: &Waiter) {
    let mine = crate::net::Call::of(coll);
    let remote = (0..host.nranks).filter(|&q| host.links.is_remote(q));
    let outgoing: Vec<_> = remote
        .clone()
        .map(|q| crate::net::Outgoing {
            peer: q,
            seq,
            ready: SimTime::ZERO,
            scalar: 0,
            src: 0,
            len: 0,
            call: crate::net::Call::REFUSED,
        })
        .collect();
    let mut incoming: Vec<_> = remote
        .map(|q| crate::net::Incoming::new(q, seq, 0, 0, mine))
        .collect();
    // The operation fails with the local disagreement whatever the peers sent.
    let _ = crate::net::exchange(&host.links, &outgoing, &mut incoming, waiter);
}
