//! Running operations on the host: the shared segment of a communicator's ranks on one host,
//! its barrier, and the data movement of every collective and of send/receive.
//!
//! Collectives: each rank publishes a descriptor of its call (kind, type, count, reduction,
//! root, where its buffers live) in its slot of the segment and enters the barrier; then every
//! rank checks that all descriptors agree, maps the peers' buffers, and does its share of the
//! work reading and writing peers' buffers in place; a second barrier ends the operation.
//! Reductions are split by element range, rank r computing slice r of the result from all
//! inputs in rank order and writing it to every destination, so each input byte is read once
//! and each output byte written once, and every rank gets the same bits. Copies (broadcast,
//! gathers, all-to-all, scatter) are done by each rank into its own output.
//!
//! Small collectives of ranks that all share the host (`small`) copy their inputs into the
//! segment next to their descriptors instead and meet once: every rank then computes its own
//! output from the copies, in rank order, and no closing barrier is needed.
//!
//! Send/receive: a ring of message slots per ordered pair of local ranks. A sender posts
//! {bytes, where its buffer lives}; the receiver copies straight from the sender's buffer and
//! marks the slot done; the sender then frees it. A rank runs all of a group's sends and
//! receives in one progress loop and sleeps on its futex doorbell when nothing can move, so
//! grouped send/receive patterns never deadlock and waiting costs no CPU.

use crate::clock::{Meeting, SimTime};
use crate::error::{NcclError, Result};
use crate::host::HostGroup;
use crate::ops::Coll;
use crate::shm::{futex_wake, Mapping, Waiter};
use crate::types::{Collective, RedOp, Reduction};
use std::sync::atomic::{AtomicU32, Ordering};

mod hosts;
mod kernels;
mod p2p;
mod small;
mod staging;

use hosts::work_across_hosts;
pub(crate) use kernels::{copy, reduce_range, Arith};
pub use p2p::run_p2p;

/// Message slots per ordered pair of local ranks.
pub const RING: usize = 16;
const HEADER: usize = 4096;
const OFF_MAGIC: usize = 0;
const OFF_NLOCAL: usize = 8;
const OFF_BAR_COUNT: usize = 64;
const OFF_BAR_GEN: usize = 128;
/// Ranks asleep (or about to sleep) on the barrier's futex: the last arrival wakes them only
/// when there are any, so a barrier nobody slept in costs no system call.
const OFF_BAR_SLEEPERS: usize = 192;
/// A rank's descriptor followed by the inline copy of a small input (`small::INLINE` bytes).
const BLOCK: usize = DESC + small::INLINE;
const DESC: usize = 256;
const BELL: usize = 64;
const ENTRY: usize = 64;

/// Rank `i`'s block in block set `set`: a collective uses set 0 or 1 by the parity of the
/// barrier generation its ranks meet in, so the set it writes was last read before the
/// previous barrier, which every rank has passed (see `arrive`).
fn block_off(n: usize, set: usize, i: usize) -> usize {
    HEADER + (set * n + i) * BLOCK
}
pub(super) fn bell_off(n: usize, i: usize) -> usize {
    HEADER + 2 * n * BLOCK + i * BELL
}
pub(super) fn entry_off(n: usize, src: usize, dst: usize, k: usize) -> usize {
    HEADER + 2 * n * BLOCK + n * BELL + ((src * n + dst) * RING + k) * ENTRY
}

/// Bytes of the segment for `n` local ranks (page-rounded).
pub fn segment_len(n: usize) -> usize {
    entry_off(n, n, 0, 0).next_multiple_of(4096)
}

/// Writes the header of a new segment.
pub fn init_segment(m: &Mapping, magic: u64, n: usize) {
    // SAFETY: the header lies inside the mapping, which is private to us until published.
    unsafe {
        m.ptr().add(OFF_MAGIC).cast::<u64>().write_volatile(magic);
        m.ptr()
            .add(OFF_NLOCAL)
            .cast::<u64>()
            .write_volatile(n as u64);
    }
}

/// Checks a peer's segment is this communicator's.
pub fn check_segment(m: &Mapping, magic: u64, n: usize) -> Result<()> {
    // SAFETY: reading the header inside the mapping (its length was checked on open).
    let (mg, nl) = unsafe {
        (
            m.ptr().add(OFF_MAGIC).cast::<u64>().read_volatile(),
            m.ptr().add(OFF_NLOCAL).cast::<u64>().read_volatile(),
        )
    };
    if mg != magic || nl != n as u64 {
        return Err(NcclError::remote(
            "the host's communicator segment belongs to another communicator",
        ));
    }
    Ok(())
}

/// Where a buffer lives, as another process of the host can find it.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct BufRef {
    pid: u32,
    arena: u32,
    /// The arena's offer in the owner's descriptor broker: key and secret.
    key: u32,
    _pad: u32,
    secret: u64,
    offset: u64,
    addr: u64,
}

const NO_ARENA: u32 = u32::MAX;

// A send/receive entry holds one in 40 bytes (`p2p`).
const _: () = assert!(std::mem::size_of::<BufRef>() == 40);

impl BufRef {
    fn of(ptr: usize) -> BufRef {
        let mut r = BufRef {
            pid: std::process::id(),
            arena: NO_ARENA,
            addr: ptr as u64,
            ..Default::default()
        };
        if ptr != 0 {
            if let Ok(loc) = crate::cuda::arena_location(ptr) {
                r.arena = loc.arena_id;
                r.key = loc.key;
                r.secret = loc.secret;
                r.offset = loc.offset;
            }
        }
        r
    }

    fn resolve(&self, host: &HostGroup, rank: usize) -> Result<usize> {
        if self.addr == 0 {
            return Ok(0);
        }
        if self.pid == std::process::id() {
            return Ok(self.addr as usize);
        }
        if self.arena == NO_ARENA {
            return Err(NcclError::invalid_argument(format!(
                "rank {rank}'s buffer {:#x} is not device memory of its process (pid {}), so other processes cannot reach it",
                self.addr, self.pid
            )));
        }
        host.peers
            .lock()
            .map_err(|_| NcclError::internal("peer map lock poisoned"))?
            .address(self.pid, self.arena, (self.key, self.secret), self.offset)
    }
}

/// A rank's description of its call, as published in its slot.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct Desc {
    seq: u64,
    kind: i32,
    dtype: u32,
    op: i32,
    root: u32,
    count: u64,
    scalar: u64,
    send: BufRef,
    recv: BufRef,
    rank: u32,
    _pad: u32,
    /// Virtual time at which this rank's stream reached the operation.
    ready: SimTime,
}
const _: () = assert!(std::mem::size_of::<Desc>() <= DESC);

impl Desc {
    /// Rank `rank`'s description of its collective #`seq`, `coll`, reached at `ready`; its
    /// buffers are not named (a rank whose peers read them sets `send` and `recv`).
    fn call(seq: u64, coll: &Coll, rank: usize, ready: SimTime) -> Desc {
        Desc {
            seq,
            kind: coll.kind as i32,
            dtype: coll.dtype as u32,
            op: coll.op,
            root: coll.root as u32,
            count: coll.count as u64,
            scalar: own_scalar(coll),
            rank: rank as u32,
            ready,
            ..Desc::default()
        }
    }
}

pub(super) fn seg(host: &HostGroup) -> &Mapping {
    &host.segment
}

pub(super) fn barrier(host: &HostGroup, waiter: &Waiter) -> Result<()> {
    let g = seg(host).atomic_u32(OFF_BAR_GEN).load(Ordering::Acquire);
    barrier_at(host, g, waiter)
}

/// The barrier of generation `g` (the generation when this rank arrives: it cannot change
/// before every local rank, this one included, has arrived).
fn barrier_at(host: &HostGroup, g: u32, waiter: &Waiter) -> Result<()> {
    barrier_then(host, g, waiter, || ())
}

/// The last rank's release of a barrier generation, done when dropped: after `last` returns,
/// or while a panic in it unwinds to the C boundary (which reports it to this rank's caller).
struct Release<'a> {
    count: &'a AtomicU32,
    gen: &'a AtomicU32,
    sleepers: &'a AtomicU32,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.count.store(0, Ordering::Relaxed);
        // Sequentially consistent with the sleepers' count: either a sleeper counted itself
        // before this read (and is woken), or it reads the new generation before sleeping.
        self.gen.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            futex_wake(self.gen);
        }
    }
}

/// [`barrier_at`], where the last rank to arrive runs `last` before it lets the others go:
/// whatever `last` writes is seen by every rank once it has passed the barrier. The others are
/// let go even if `last` panics (its writes must tell them it did not finish).
fn barrier_then(host: &HostGroup, g: u32, waiter: &Waiter, last: impl FnOnce()) -> Result<()> {
    let m = seg(host);
    let n = host.ranks.len() as u32;
    let count = m.atomic_u32(OFF_BAR_COUNT);
    let gen = m.atomic_u32(OFF_BAR_GEN);
    let sleepers = m.atomic_u32(OFF_BAR_SLEEPERS);
    if count.fetch_add(1, Ordering::AcqRel) + 1 == n {
        let _release = Release {
            count,
            gen,
            sleepers,
        };
        last();
        Ok(())
    } else {
        waiter.wait_counted(gen, sleepers, || gen.load(Ordering::Acquire) != g)
    }
}

/// Publishes this rank's descriptor (and, for a small collective, `inline`: the bytes of its
/// input) in its block and meets the other local ranks in the barrier; returns the block set
/// every rank of this collective wrote, which stays as written until this rank's next barrier.
///
/// Block sets alternate with the barrier generation: the set written here was last written
/// for the barrier two generations back and read before the barrier one generation back,
/// which every rank had to reach before this one could get here.
fn arrive(host: &HostGroup, desc: &Desc, inline: &[u8], waiter: &Waiter) -> Result<usize> {
    arrive_then(host, desc, inline, waiter, |_| ())
}

/// [`arrive`], where the last rank to arrive runs `last` with the block set, every rank's
/// block written, before the others pass the barrier.
fn arrive_then(
    host: &HostGroup,
    desc: &Desc,
    inline: &[u8],
    waiter: &Waiter,
    last: impl FnOnce(usize),
) -> Result<usize> {
    let m = seg(host);
    let n = host.ranks.len();
    let g = m.atomic_u32(OFF_BAR_GEN).load(Ordering::Acquire);
    let set = (g & 1) as usize;
    assert!(
        inline.len() <= small::INLINE,
        "invariant: inline input fits its block"
    );
    let at = block_off(n, set, host.index);
    // SAFETY: this rank's block lies in the segment and no rank reads it until the barrier
    // (see above); the inline copy fits after the descriptor (asserted).
    unsafe {
        m.ptr().add(at).cast::<Desc>().write_volatile(*desc);
        std::ptr::copy_nonoverlapping(inline.as_ptr(), m.ptr().add(at + DESC), inline.len());
    }
    barrier_then(host, g, waiter, || last(set))?;
    Ok(set)
}

/// Every local rank's descriptor in block set `set`, in local order (written before the
/// barrier `arrive` met), read from the segment where used: a small collective reads each a
/// few times, so they are not copied out first.
fn descs_at(host: &HostGroup, set: usize) -> Descs<'_> {
    Descs { host, set }
}

/// The local ranks' descriptors of one block set (see [`descs_at`]).
#[derive(Clone, Copy)]
struct Descs<'a> {
    host: &'a HostGroup,
    set: usize,
}

impl<'a> Descs<'a> {
    /// Local rank `i`'s descriptor.
    fn get(&self, i: usize) -> &'a Desc {
        let n = self.host.ranks.len();
        assert!(i < n, "descriptor {i} of {n} local ranks");
        let off = block_off(n, self.set, i);
        // SAFETY: the block lies in the segment, aligned for a `Desc`; it was written before
        // the barrier this rank passed (whose acquire orders these reads after the writes) and
        // is not written again until this rank's next barrier (see `arrive`), which it does
        // not reach while the reference lives (the borrow of `self.host`).
        unsafe { &*seg(self.host).ptr().add(off).cast::<Desc>() }
    }

    /// The descriptors in local order.
    fn iter(self) -> impl Iterator<Item = &'a Desc> {
        (0..self.host.ranks.len()).map(move |i| self.get(i))
    }

    fn to_vec(self) -> Vec<Desc> {
        self.iter().copied().collect()
    }
}

/// The scalar this rank applies to its own input (PreMulSum / ncclAvg), as element bits.
pub(crate) fn own_scalar(coll: &Coll) -> u64 {
    match coll.red {
        Reduction::PreMulSum {
            scalar,
            on_device: true,
        } => {
            let addr = scalar as usize;
            let mut b = [0u8; 8];
            // SAFETY: a device scalar is one element in this process's device memory, which
            // is host memory here (checked when the op was created to be non-null).
            unsafe {
                std::ptr::copy_nonoverlapping(addr as *const u8, b.as_mut_ptr(), coll.dtype.size())
            };
            u64::from_le_bytes(b)
        }
        Reduction::PreMulSum { scalar, .. } => scalar,
        _ => 0,
    }
}

/// Element range of slice `i` of `count` split `n` ways (64-element aligned).
fn part(count: usize, n: usize, i: usize) -> std::ops::Range<usize> {
    let chunk = count.div_ceil(n).next_multiple_of(64);
    let lo = (i * chunk).min(count);
    lo..((i + 1) * chunk).min(count)
}

/// Runs one collective as this rank, whose stream reached it at virtual time `ready`; returns
/// when it starts in virtual time (the latest participant's ready time, `clock::Meeting`).
pub fn run_collective(host: &HostGroup, user: &Coll, ready: SimTime) -> Result<SimTime> {
    let result = if small::eligible(host, user) {
        small::run(host, user, ready)
    } else {
        run_general(host, user, ready)
    };
    #[cfg(any(feature = "fault-injection", debug_assertions))]
    if result.is_ok() {
        perturb_for_tests(host, user);
    }
    result
}

/// A collective of any size: buffers used in place by every rank of the host, two barriers.
fn run_general(host: &HostGroup, user: &Coll, ready: SimTime) -> Result<SimTime> {
    // Buffers peers on this host cannot map take part through arena copies.
    let es = user.dtype.size();
    let (se, re) = user
        .kind
        .extents(user.count, host.nranks, host.rank, user.root);
    let (send, recv) = staging::stage_pair(
        host.cuda_dev,
        (user.send, se * es),
        (user.recv, re * es),
        host.shares_with_processes,
    )?;
    let coll = &Coll {
        send: send.addr(),
        recv: recv.as_ref().map_or(send.addr(), staging::Staged::addr),
        ..*user
    };
    let result = run_staged(host, coll, ready);
    let ok = result.is_ok();
    match recv {
        Some(r) => {
            send.release(false);
            r.release(ok);
        }
        None => send.release(ok),
    }
    result
}

fn run_staged(host: &HostGroup, coll: &Coll, ready: SimTime) -> Result<SimTime> {
    let me = host.rank;
    let seq = host.op_seq.fetch_add(1, Ordering::Relaxed) + 1;
    let waiter = host.waiter(crate::shm::WaitFor::Call {
        name: coll.kind.nccl_name(),
        seq,
    });
    let desc = Desc {
        send: BufRef::of(coll.send),
        recv: BufRef::of(coll.recv),
        ..Desc::call(seq, coll, me, ready)
    };
    let set = arrive(host, &desc, &[], &waiter)?;
    let descs = descs_at(host, set).to_vec();
    let local = Meeting::new(ready).join_all(descs.iter().map(|d| d.ready));
    // Everyone saw the same descriptors, so a disagreement fails every rank alike, before any
    // work and without the closing barrier; work errors (a peer buffer that cannot be mapped)
    // still need the closing barrier.
    if let Err(e) = agree(descs.iter(), &desc) {
        if !host.is_whole() {
            hosts::refuse_across_hosts(host, coll, seq, &waiter);
        }
        return Err(e);
    }
    let result = if host.is_whole() {
        work(host, coll, &descs).map(|()| local.start())
    } else {
        work_across_hosts(host, coll, &descs, &waiter, local).map(Meeting::start)
    };
    barrier(host, &waiter)?;
    result
}

/// `NCCLSIM_TEST_PERTURB=R` (tests only: cargo feature `fault-injection`, and debug builds, see
/// `Cargo.toml`): after every collective, the rank numbered R in its communicator flips the
/// lowest bit of the first byte of its result, so a program that checks its results must fail.
/// End-to-end suites use it to prove their checks check. Ranks without a result (Reduce and
/// Gather off the root) and empty calls are left alone.
#[cfg(any(feature = "fault-injection", debug_assertions))]
fn perturb_for_tests(host: &HostGroup, coll: &Coll) {
    static RANK: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let target = *RANK.get_or_init(|| {
        let v = std::env::var("NCCLSIM_TEST_PERTURB").ok()?;
        let r = v.trim().parse().ok();
        if r.is_none() {
            eprintln!("ncclsim: NCCLSIM_TEST_PERTURB={v:?} is not a rank; ignored");
        }
        r
    });
    // `recv` is 0 where the call has no result on this rank (Reduce and Gather off the root,
    // empty calls).
    if target != Some(host.rank) || coll.recv == 0 {
        return;
    }
    let first = coll.recv as *mut u8;
    // SAFETY: `recv` is non-zero only when the call has a result on this rank, and then it is
    // this rank's own device buffer, checked at enqueue (`api::device_buffer`) to hold that
    // non-empty result and mapped in this process; the collective that wrote it has finished
    // (closing barrier passed) and nothing else writes it now.
    unsafe { first.write_volatile(first.read_volatile() ^ 1) };
}

fn agree<'d>(descs: impl Iterator<Item = &'d Desc>, mine: &Desc) -> Result<()> {
    for (r, d) in descs.enumerate() {
        let same_op = d.op == mine.op || (RedOp::is_dynamic(d.op) && RedOp::is_dynamic(mine.op));
        if d.seq != mine.seq
            || d.kind != mine.kind
            || d.dtype != mine.dtype
            || d.count != mine.count
            || d.root != mine.root
            || !same_op
        {
            let name = |k: i32| Collective::try_from(k).map_or("?", Collective::nccl_name);
            return Err(NcclError::invalid_usage(format!(
                "ranks disagree on collective #{}: rank {} called {}(count {}, type {}, op {}, root {}) but rank {} called {}(count {}, type {}, op {}, root {}) as its collective #{}",
                mine.seq, mine.rank, name(mine.kind), mine.count, mine.dtype, mine.op, mine.root,
                r, name(d.kind), d.count, d.dtype, d.op, d.root, d.seq
            )));
        }
    }
    Ok(())
}

fn work(host: &HostGroup, coll: &Coll, descs: &[Desc]) -> Result<()> {
    let n = host.nranks;
    let me = host.rank;
    let esz = coll.dtype.size();
    let count = coll.count;
    let bytes = count * esz;
    let root = coll.root;
    let sends = descs
        .iter()
        .enumerate()
        .map(|(r, d)| d.send.resolve(host, r))
        .collect::<Result<Vec<_>>>()?;
    let recvs = descs
        .iter()
        .enumerate()
        .map(|(r, d)| d.recv.resolve(host, r))
        .collect::<Result<Vec<_>>>()?;
    let scalars: Vec<u64> = descs.iter().map(|d| d.scalar).collect();
    let scalars: &[u64] = if matches!(coll.red, Reduction::PreMulSum { .. }) {
        &scalars
    } else {
        &[]
    };
    // SAFETY: every rank's buffers hold that rank's extent of the operation (checked by its
    // owner at enqueue, `api::device_buffer`) and are mapped here (`BufRef::resolve`); between
    // the two barriers inputs are only read, and each output range is written by one rank
    // alone (slice `me` of a reduction, else this rank's own output or its block of the
    // root's).
    unsafe {
        match coll.kind {
            Collective::AllReduce | Collective::Reduce => {
                let r = part(count, n, me);
                let outs: Vec<usize> = if coll.kind == Collective::AllReduce {
                    recvs.clone()
                } else {
                    vec![recvs[root]]
                };
                let a = Arith {
                    dtype: coll.dtype,
                    red: coll.red,
                    scalars,
                };
                reduce_range(
                    a,
                    &sends,
                    r.start * esz,
                    &outs,
                    r.start * esz,
                    r.len() * esz,
                );
            }
            Collective::ReduceScatter => {
                let a = Arith {
                    dtype: coll.dtype,
                    red: coll.red,
                    scalars,
                };
                reduce_range(a, &sends, me * bytes, &[recvs[me]], 0, bytes);
            }
            Collective::Broadcast => copy(sends[root], recvs[me], bytes),
            Collective::AllGather => {
                for (q, &s) in sends.iter().enumerate() {
                    copy(s, recvs[me] + q * bytes, bytes);
                }
            }
            Collective::AlltoAll => {
                for (q, &s) in sends.iter().enumerate() {
                    copy(s + me * bytes, recvs[me] + q * bytes, bytes);
                }
            }
            Collective::Gather => copy(sends[me], recvs[root] + me * bytes, bytes),
            Collective::Scatter => copy(sends[root] + me * bytes, recvs[me], bytes),
            Collective::SendRecv => {
                return Err(NcclError::internal(
                    "SendRecv is a group of sends and receives, not a collective call",
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_range_once() {
        for count in [0usize, 1, 63, 64, 65, 1000, 4097] {
            for n in 1..=9 {
                let mut covered = 0;
                let mut next = 0;
                for i in 0..n {
                    let r = part(count, n, i);
                    assert!(r.start == next || r.is_empty());
                    covered += r.len();
                    if !r.is_empty() {
                        next = r.end;
                    }
                }
                assert_eq!(covered, count);
            }
        }
    }

    #[test]
    fn segment_layout_fits() {
        for n in 1..=16 {
            assert!(entry_off(n, n - 1, n - 1, RING - 1) + ENTRY <= segment_len(n));
            assert!(bell_off(n, n - 1) + BELL <= entry_off(n, 0, 0, 0));
        }
    }
}
