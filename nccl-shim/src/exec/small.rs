//! Small collectives of a communicator whose ranks all share one host: one barrier instead of
//! two, and no mapping of peers' buffers.
//!
//! Each rank copies its input into its block of the segment, after its descriptor, and meets
//! the others in the barrier; then every rank checks the descriptors agree and computes its
//! own output from the copies, reducing in rank order as every other path does, so every rank
//! still gets the same bits. No rank reads a peer's buffer or writes anything but its own
//! output, so nothing has to wait for the others to finish reading: the closing barrier of
//! the general path is not needed, and the blocks are rewritten only two barriers later (see
//! `arrive`). For a message this small the time is the ranks' meeting, not the bytes: half the
//! meetings is about half the time, and each rank reducing all inputs costs less than one
//! more meeting.

use super::hosts::{needed, own_output};
use super::{agree, arrive, desc_at, own_scalar, seg, Desc, BLOCK, DESC};
use crate::comm::Comm;
use crate::error::Result;
use crate::ops::Coll;
use crate::types::Collective;
use std::sync::atomic::Ordering;

/// Most bytes of input a rank copies into its block; a collective whose largest input is
/// larger takes the general path.
pub(super) const INLINE: usize = 1024;

/// Whether `coll` takes this path. The answer depends only on what every rank's descriptor
/// states (kind, type, count, root) and on the communicator, so ranks that agree on the call
/// agree on the path; ranks that disagree meet in the same first barrier either way and fail
/// alike when they compare descriptors.
pub(super) fn eligible(comm: &Comm, coll: &Coll) -> bool {
    if comm.local.ranks.len() != comm.nranks || coll.kind == Collective::SendRecv {
        return false;
    }
    // The root has the largest input of a rooted collective.
    let (largest, _) = coll
        .kind
        .extents(coll.count, comm.nranks, coll.root, coll.root);
    largest
        .checked_mul(coll.dtype.size())
        .is_some_and(|b| b <= INLINE)
}

/// Runs an eligible collective as this rank, whose stream reached it at virtual time `ready`;
/// returns when it starts in virtual time (the latest participant's ready time).
pub(super) fn run(comm: &Comm, coll: &Coll, ready: u64) -> Result<u64> {
    let n = comm.nranks;
    let me = comm.rank;
    let esz = coll.dtype.size();
    let (send_elems, _) = coll.kind.extents(coll.count, n, me, coll.root);
    let seq = comm.op_seq.fetch_add(1, Ordering::Relaxed) + 1;
    let waiter = comm.waiter(format!(
        "the other ranks to call {} #{seq}",
        coll.kind.nccl_name()
    ));
    let desc = Desc {
        seq,
        kind: coll.kind as i32,
        dtype: coll.dtype as u32,
        op: coll.op,
        root: coll.root as u32,
        count: coll.count as u64,
        scalar: own_scalar(coll),
        rank: me as u32,
        ready,
        ..Desc::default()
    };
    let input: &[u8] = if send_elems == 0 {
        &[]
    } else {
        // SAFETY: this rank's send buffer holds its extent (checked at enqueue,
        // `api::device_buffer`) in this process and is not written while its operation runs.
        unsafe { std::slice::from_raw_parts(coll.send as *const u8, send_elems * esz) }
    };
    let set = arrive(comm, &desc, input, &waiter)?;
    let descs: Vec<Desc> = (0..n).map(|i| desc_at(comm, set, i)).collect();
    agree(&descs, &desc)?;
    let start = descs.iter().map(|d| d.ready).max().unwrap_or(ready);
    let bytes = coll.count * esz;
    let base = seg(comm).ptr() as usize;
    // On one host the local index of rank q is q.
    let parts: Vec<usize> = (0..n)
        .map(|q| {
            needed(coll, bytes, q, me).map_or(0, |(off, _)| {
                base + super::block_off(n, set, q) + DESC + off
            })
        })
        .collect();
    let scalars: Vec<u64> = descs.iter().map(|d| d.scalar).collect();
    // SAFETY: each part lies in rank q's block, which holds q's whole input (at most INLINE
    // bytes, `eligible`), written before the barrier and not written again before this rank's
    // next barrier; `coll.recv` is this rank's own receive buffer of its extent (checked at
    // enqueue), written by nothing else during the call and outside the segment.
    unsafe { own_output(coll, me, &parts, &scalars, coll.recv) };
    Ok(start)
}

const _: () = assert!(BLOCK % 64 == 0 && DESC % 64 == 0);
