//! Small collectives: one barrier of the host's ranks instead of two or three, and no mapping
//! of peers' buffers.
//!
//! Each rank copies its input into its block of the segment, after its descriptor, and meets
//! the host's other ranks in the barrier; then every rank checks the descriptors agree,
//! exchanges with every rank of other hosts (if any) the same messages as the general path
//! does (so hosts that took different paths, because their calls differ, still stay in step
//! and see the disagreement), and computes its own output from the copies and the received
//! parts, reducing in rank order as every other path does, so every rank still gets the same
//! bits. No rank reads a peer's buffer or writes anything but its own output, so nothing has
//! to wait for the others to finish reading: the closing barrier of the general path is not
//! needed, and the blocks are rewritten only two barriers later (see `arrive`). For a message
//! this small the time is the ranks' meeting, not the bytes: fewer meetings is less time, and
//! each rank reducing all inputs costs less than one more meeting.

use super::hosts::{exchange_remote, needed, own_output, refuse_across_hosts};
use super::{agree, arrive, arrive_then, descs_at, seg, Desc, BLOCK, DESC, HEADER};
use crate::clock::{Meeting, SimTime};
use crate::error::Result;
use crate::host::HostGroup;
use crate::ops::Coll;
use crate::types::Collective;
use std::sync::atomic::Ordering;

/// Most bytes of input a rank copies into its block; a collective whose largest input is
/// larger takes the general path.
pub(super) const INLINE: usize = 1024;

/// Ranks whose parts and scalars a small collective keeps on the stack (more: on the heap).
const STACK_RANKS: usize = 16;

/// Each rank's part (the address of the input this rank needs from it) and scalar, zeroed: on
/// the stack for up to [`STACK_RANKS`] ranks, so a small call on one node allocates nothing.
struct PerRank {
    n: usize,
    stack: ([usize; STACK_RANKS], [u64; STACK_RANKS]),
    heap: (Vec<usize>, Vec<u64>),
}

impl PerRank {
    fn new(n: usize) -> PerRank {
        let heap = if n <= STACK_RANKS {
            Default::default()
        } else {
            (vec![0; n], vec![0; n])
        };
        PerRank {
            n,
            stack: ([0; STACK_RANKS], [0; STACK_RANKS]),
            heap,
        }
    }

    /// (parts, scalars), one of each per rank.
    fn slices(&mut self) -> (&mut [usize], &mut [u64]) {
        if self.n <= STACK_RANKS {
            (&mut self.stack.0[..self.n], &mut self.stack.1[..self.n])
        } else {
            (&mut self.heap.0, &mut self.heap.1)
        }
    }
}

/// Whether `coll` takes this path. The answer depends only on what every rank's descriptor
/// and message header state (kind, type, count, root) and on the communicator's size, so
/// ranks that agree on the call agree on the path; ranks that disagree meet in the same first
/// barrier and exchange the same messages with remote ranks either way, and fail alike when
/// they compare calls.
pub(super) fn eligible(host: &HostGroup, coll: &Coll) -> bool {
    if coll.kind == Collective::SendRecv {
        return false;
    }
    // The root has the largest input of a rooted collective.
    let (largest, _) = coll
        .kind
        .extents(coll.count, host.nranks, coll.root, coll.root);
    largest
        .checked_mul(coll.dtype.size())
        .is_some_and(|b| b <= INLINE)
}

/// Runs an eligible collective as this rank, whose stream reached it at virtual time `ready`;
/// returns when it starts in virtual time (the latest participant's ready time).
pub(super) fn run(host: &HostGroup, coll: &Coll, ready: SimTime) -> Result<SimTime> {
    let n = host.nranks;
    let me = host.rank;
    let esz = coll.dtype.size();
    let (send_elems, _) = coll.kind.extents(coll.count, n, me, coll.root);
    let seq = host.op_seq.fetch_add(1, Ordering::Relaxed) + 1;
    let waiter = host.waiter(crate::shm::WaitFor::Call {
        name: coll.kind.nccl_name(),
        seq,
    });
    let desc = Desc::call(seq, coll, me, ready);
    let input: &[u8] = if send_elems == 0 {
        &[]
    } else {
        // SAFETY: this rank's send buffer holds its extent (checked at enqueue,
        // `api::device_buffer`) in this process and is not written while its operation runs.
        unsafe { std::slice::from_raw_parts(coll.send as *const u8, send_elems * esz) }
    };
    if host.is_whole() && shared_output(coll, n) {
        return run_shared(host, coll, &desc, input, &waiter);
    }
    let set = arrive(host, &desc, input, &waiter)?;
    let nl = host.ranks.len();
    let descs = descs_at(host, set);
    if let Err(e) = agree(descs.iter(), &desc) {
        // As the general path does, so remote ranks on either path see the refusal.
        if !host.is_whole() {
            refuse_across_hosts(host, coll, seq, &waiter);
        }
        return Err(e);
    }
    let mut meeting = Meeting::new(ready).join_all(descs.iter().map(|d| d.ready));
    let bytes = coll.count * esz;
    let base = seg(host).ptr() as usize;
    // The part of every rank's input this rank needs (local ones in their blocks, remote ones
    // received), and each rank's scalar.
    let mut per_rank = PerRank::new(n);
    let (parts, scalars) = per_rank.slices();
    for (li, &q) in host.ranks.iter().enumerate() {
        scalars[q] = descs.get(li).scalar;
        if let Some((off, _)) = needed(coll, bytes, q, me) {
            parts[q] = base + super::block_off(nl, set, li) + DESC + off;
        }
    }
    let (incoming, _staging) = if !host.is_whole() {
        exchange_remote(host, coll, &desc, coll.send, &waiter)?
    } else {
        Default::default()
    };
    for m in &incoming {
        meeting.join(m.ready);
        scalars[m.peer] = m.scalar;
        if m.len > 0 {
            parts[m.peer] = m.dst;
        }
    }
    // SAFETY: each local part lies in rank q's block, which holds q's whole input (at most
    // INLINE bytes, `eligible`), written before the barrier and not written again before this
    // rank's next barrier; each remote part is a staging buffer of `_staging` holding what
    // `needed` names; `coll.recv` is this rank's own receive buffer of its extent (checked at
    // enqueue), written by nothing else during the call and outside the segment and staging.
    unsafe { own_output(coll, me, parts, scalars, coll.recv) };
    Ok(meeting.start())
}

/// The shared results of the two block sets lie in the segment's header from here (`result_at`).
const OFF_RESULT: usize = 1024;
const RESULT_SET: usize = 64 + INLINE;
const VERDICT_PENDING: u64 = 0;
const VERDICT_OK: u64 = 1;
const VERDICT_DISAGREE: u64 = 2;

const _: () = assert!(BLOCK % 64 == 0 && DESC % 64 == 0);
const _: () = assert!(OFF_RESULT >= 256 && OFF_RESULT + 2 * RESULT_SET <= HEADER);

/// Where the shared result of block set `set` lies in the segment: a verdict word
/// (`VERDICT_PENDING` until the output is complete, then `VERDICT_OK` or `VERDICT_DISAGREE`),
/// the operation's start in virtual time at +8, and the output at +64.
fn result_at(set: usize) -> usize {
    OFF_RESULT + set * RESULT_SET
}

/// Whether every rank of `coll` gets the same output, of at most `INLINE` bytes: then the last
/// rank to arrive computes it once for all (`run_shared`).
fn shared_output(coll: &Coll, n: usize) -> bool {
    let bytes = coll.count * coll.dtype.size();
    match coll.kind {
        Collective::AllReduce | Collective::Broadcast => bytes <= INLINE,
        Collective::AllGather => bytes.checked_mul(n).is_some_and(|b| b <= INLINE),
        _ => false,
    }
}

/// A small collective whose ranks all share this host and all get the same output: the last
/// rank to arrive checks the calls agree, computes the start in virtual time and the output
/// (in rank order) once into the block set's result, before it lets the others pass the
/// barrier; every rank then copies the result to its receive buffer. Each rank reads one
/// result instead of every rank's block, so the cache lines that cross cores per operation
/// grow with the number of ranks, not with its square.
fn run_shared(
    host: &HostGroup,
    coll: &Coll,
    desc: &Desc,
    input: &[u8],
    waiter: &crate::shm::Waiter,
) -> Result<SimTime> {
    let n = host.nranks;
    let m = seg(host);
    // The verdict and the start: words of the result, written by the last rank to arrive
    // before the barrier lets the others read them (the barrier's generation orders them), and
    // not written again before every rank has passed its next barrier (see `arrive`).
    let verdict = |set: usize| m.atomic_u64(result_at(set));
    let start_word = |set: usize| m.atomic_u64(result_at(set) + 8);
    let set = arrive_then(host, desc, input, waiter, |set| {
        // Pending until this closure completes: the barrier lets the others go even if it
        // does not.
        verdict(set).store(VERDICT_PENDING, Ordering::Relaxed);
        #[cfg(any(feature = "fault-injection", debug_assertions))]
        panic_for_tests(desc.seq);
        let descs = descs_at(host, set);
        if agree(descs.iter(), desc).is_err() {
            verdict(set).store(VERDICT_DISAGREE, Ordering::Relaxed);
            return;
        }
        let start = Meeting::new(desc.ready).join_all(descs.iter().map(|d| d.ready));
        let base = m.ptr() as usize;
        let mut per_rank = PerRank::new(n);
        let (parts, scalars) = per_rank.slices();
        for (q, d) in descs.iter().enumerate() {
            parts[q] = base + super::block_off(n, set, q) + DESC;
            scalars[q] = d.scalar;
        }
        // SAFETY: rank q's input (at most INLINE bytes, `eligible`) is in its block, written
        // before the barrier; the output, at most INLINE bytes (`shared_output`), goes to the
        // result of `set` after its verdict line, inside the segment's header (asserted above),
        // which overlaps no block and which no rank reads before the barrier.
        unsafe { own_output(coll, 0, parts, scalars, base + result_at(set) + 64) };
        start_word(set).store(start.start().as_nanos(), Ordering::Relaxed);
        verdict(set).store(VERDICT_OK, Ordering::Relaxed);
    })?;
    match verdict(set).load(Ordering::Relaxed) {
        VERDICT_OK => {}
        VERDICT_PENDING => {
            return Err(crate::error::NcclError::internal(
                "the rank that arrived last did not finish computing the result",
            ))
        }
        _ => {
            agree(descs_at(host, set).iter(), desc)?;
            return Err(crate::error::NcclError::internal(
                "the ranks' calls were found to disagree, but agree here",
            ));
        }
    }
    let (_, recv_elems) = coll.kind.extents(coll.count, n, host.rank, coll.root);
    // SAFETY: the result holds the output, `recv_elems` elements (`shared_output`), written
    // before the barrier this rank passed and not written again before its next one, and
    // `coll.recv` is this rank's receive buffer of that extent (checked at enqueue), outside
    // the segment.
    unsafe {
        super::copy(
            m.ptr() as usize + result_at(set) + 64,
            coll.recv,
            recv_elems * coll.dtype.size(),
        )
    };
    Ok(SimTime::from_nanos(start_word(set).load(Ordering::Relaxed)))
}

/// `NCCLSIM_TEST_PANIC_SHARED=S` (tests only: cargo feature `fault-injection`, and debug
/// builds, see `Cargo.toml`): the last rank to arrive at a communicator's operation #S of the
/// shared-result path panics while computing the result, so tests can show the other ranks
/// are let go and every rank fails the call.
#[cfg(any(feature = "fault-injection", debug_assertions))]
fn panic_for_tests(seq: u64) {
    static SEQ: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let at = SEQ.get_or_init(|| {
        let v = std::env::var("NCCLSIM_TEST_PANIC_SHARED").ok()?;
        v.trim().parse().ok()
    });
    if *at == Some(seq) {
        panic!("NCCLSIM_TEST_PANIC_SHARED: panicking while computing operation #{seq}'s result");
    }
}
