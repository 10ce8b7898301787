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
//! Send/receive: a ring of message slots per ordered pair of local ranks. A sender posts
//! {bytes, where its buffer lives}; the receiver copies straight from the sender's buffer and
//! marks the slot done; the sender then frees it. A rank runs all of a group's sends and
//! receives in one progress loop and sleeps on its futex doorbell when nothing can move, so
//! grouped send/receive patterns never deadlock and waiting costs no CPU.

use crate::comm::Comm;
use crate::error::{NcclError, Result};
use crate::ops::{Coll, CollKind, P2p, DEVICE_SCALAR_TAG};
use crate::reduce;
use crate::shm::{futex_wake, Mapping, Waiter};
use crate::types::{DataType, Reduction};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};

/// Message slots per ordered pair of local ranks.
pub const RING: usize = 16;
const HEADER: usize = 4096;
const OFF_MAGIC: usize = 0;
const OFF_NLOCAL: usize = 8;
const OFF_BAR_COUNT: usize = 64;
const OFF_BAR_GEN: usize = 128;
const SLOT: usize = 256;
const BELL: usize = 64;
const ENTRY: usize = 64;
/// Bytes reduced per step (fits in L2 with a few inputs in flight).
const BLOCK_BYTES: usize = 64 << 10;

fn slot_off(i: usize) -> usize {
    HEADER + i * SLOT
}
fn bell_off(n: usize, i: usize) -> usize {
    HEADER + n * SLOT + i * BELL
}
fn entry_off(n: usize, src: usize, dst: usize, k: usize) -> usize {
    HEADER + n * SLOT + n * BELL + ((src * n + dst) * RING + k) * ENTRY
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
struct BufRef {
    pid: u32,
    arena: u32,
    fd: i32,
    _pad: u32,
    file_len: u64,
    offset: u64,
    addr: u64,
}

const NO_ARENA: u32 = u32::MAX;

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
                r.fd = loc.fd;
                r.file_len = loc.file_len;
                r.offset = loc.offset;
            }
        }
        r
    }

    fn resolve(&self, comm: &Comm, rank: usize) -> Result<usize> {
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
        comm.peers
            .lock()
            .map_err(|_| NcclError::internal("peer map lock poisoned"))?
            .address(self.pid, self.arena, self.fd, self.file_len, self.offset)
    }
}

/// A rank's description of its call, as published in its slot.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct Desc {
    seq: u64,
    kind: u32,
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
    ready: u64,
}
const _: () = assert!(std::mem::size_of::<Desc>() <= SLOT);

fn seg(comm: &Comm) -> &Mapping {
    &comm.local.segment
}

fn barrier(comm: &Comm, waiter: &Waiter) -> Result<()> {
    let m = seg(comm);
    let n = comm.local.ranks.len() as u32;
    let count = m.atomic_u32(OFF_BAR_COUNT);
    let gen = m.atomic_u32(OFF_BAR_GEN);
    let g = gen.load(Ordering::Acquire);
    if count.fetch_add(1, Ordering::AcqRel) + 1 == n {
        count.store(0, Ordering::Relaxed);
        gen.fetch_add(1, Ordering::Release);
        futex_wake(gen);
        Ok(())
    } else {
        waiter.wait_until(gen, || gen.load(Ordering::Acquire) != g)
    }
}

/// The scalar this rank applies to its own input (PreMulSum / ncclAvg), as element bits.
fn own_scalar(coll: &Coll) -> u64 {
    match coll.red {
        Reduction::PreMulSum { scalar } if scalar & DEVICE_SCALAR_TAG != 0 => {
            let addr = (scalar & !DEVICE_SCALAR_TAG) as usize;
            let mut b = [0u8; 8];
            // SAFETY: a device scalar is one element in this process's device memory, which
            // is host memory here (checked when the op was created to be non-null).
            unsafe {
                std::ptr::copy_nonoverlapping(addr as *const u8, b.as_mut_ptr(), coll.dtype.size())
            };
            u64::from_le_bytes(b)
        }
        Reduction::PreMulSum { scalar } => scalar,
        _ => 0,
    }
}

/// Element range of slice `i` of `count` split `n` ways (64-element aligned).
fn part(count: usize, n: usize, i: usize) -> std::ops::Range<usize> {
    let chunk = count.div_ceil(n).next_multiple_of(64);
    let lo = (i * chunk).min(count);
    lo..((i + 1) * chunk).min(count)
}

thread_local! {
    static SCRATCH: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// What a reduction computes: element type, reduction, and each input's PreMulSum scalar.
#[derive(Clone, Copy)]
struct Arith<'a> {
    dtype: DataType,
    red: Reduction,
    scalars: &'a [u64],
}

/// Reduces `len` bytes at `inputs[q] + in_off` (in rank order) and writes the result at each
/// of `outputs + out_off`.
fn reduce_range(
    a: Arith<'_>,
    inputs: &[usize],
    in_off: usize,
    outputs: &[usize],
    out_off: usize,
    len: usize,
) {
    let Arith {
        dtype,
        red,
        scalars,
    } = a;
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < BLOCK_BYTES / 8 {
            s.resize(BLOCK_BYTES / 8, 0);
        }
        let esz = dtype.size();
        let block = BLOCK_BYTES / esz * esz;
        let mut done = 0;
        while done < len {
            let b = block.min(len - done);
            // SAFETY: the scratch holds BLOCK_BYTES >= b bytes, aligned to 8.
            let tmp = unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<u8>(), b) };
            let ins: Vec<&[u8]> = inputs
                .iter()
                // SAFETY: each input buffer holds the operation's extent (checked by its owner
                // at the call), and this rank alone reads this range until the next barrier.
                .map(|&p| unsafe {
                    std::slice::from_raw_parts((p + in_off + done) as *const u8, b)
                })
                .collect();
            reduce::reduce(dtype, red, tmp, &ins, scalars);
            for &o in outputs {
                copy(tmp.as_ptr() as usize, o + out_off + done, b);
            }
            done += b;
        }
    });
}

/// Copies `len` bytes. Destinations are other ranks' buffers that this rank will not read
/// again, so large copies use streaming stores: they skip reading the destination's cache
/// lines first, which halves the memory traffic of writing (the data path is bound by it).
fn copy(src: usize, dst: usize, len: usize) {
    if len == 0 || src == dst {
        return;
    }
    let overlap = src < dst + len && dst < src + len;
    if overlap || len < 4096 {
        // SAFETY: both ranges lie in buffers of the operation's extent (checked by their
        // owners); the partition of the work gives each destination range to one rank.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        return;
    }
    // SAFETY: as above, and the ranges do not overlap.
    unsafe { stream_copy(src as *const u8, dst as *mut u8, len) };
}

#[cfg(target_arch = "x86_64")]
unsafe fn stream_copy(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let head = dst.align_offset(16).min(len);
    // SAFETY (whole function): callers pass non-overlapping ranges of `len` valid bytes; SSE2
    // is part of the x86_64 baseline; stores are to 16-byte aligned addresses.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut i = head;
        while i + 64 <= len {
            let a = _mm_loadu_si128(src.add(i).cast::<__m128i>());
            let b = _mm_loadu_si128(src.add(i + 16).cast::<__m128i>());
            let c = _mm_loadu_si128(src.add(i + 32).cast::<__m128i>());
            let d = _mm_loadu_si128(src.add(i + 48).cast::<__m128i>());
            _mm_stream_si128(dst.add(i).cast::<__m128i>(), a);
            _mm_stream_si128(dst.add(i + 16).cast::<__m128i>(), b);
            _mm_stream_si128(dst.add(i + 32).cast::<__m128i>(), c);
            _mm_stream_si128(dst.add(i + 48).cast::<__m128i>(), d);
            i += 64;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
        _mm_sfence();
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn stream_copy(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Runs one collective as this rank, whose stream reached it at virtual time `ready`; returns
/// when it starts in virtual time (the latest participant's ready time).
pub fn run_collective(comm: &Comm, coll: &Coll, ready: u64) -> Result<u64> {
    let n = comm.local.ranks.len();
    let me = comm.rank;
    let seq = comm.op_seq.fetch_add(1, Ordering::Relaxed) + 1;
    let waiter = comm.waiter(format!(
        "the other ranks to call {} #{seq}",
        coll.kind.name()
    ));
    let desc = Desc {
        seq,
        kind: coll.kind as u32,
        dtype: coll.dtype as u32,
        op: coll.op,
        root: coll.root as u32,
        count: coll.count as u64,
        scalar: own_scalar(coll),
        send: BufRef::of(coll.send),
        recv: BufRef::of(coll.recv),
        rank: me as u32,
        _pad: 0,
        ready,
    };
    let m = seg(comm);
    // SAFETY: our slot lies in the segment; others read it only after the barrier.
    unsafe {
        m.ptr()
            .add(slot_off(comm.local.index))
            .cast::<Desc>()
            .write_volatile(desc)
    };
    barrier(comm, &waiter)?;
    let descs: Vec<Desc> = (0..n)
        // SAFETY: every slot was written before the barrier and is not written again until
        // the closing barrier.
        .map(|i| unsafe { m.ptr().add(slot_off(i)).cast::<Desc>().read_volatile() })
        .collect();
    let local_start = descs.iter().map(|d| d.ready).max().unwrap_or(ready);
    let result = agree(&descs, &desc).and_then(|()| {
        if comm.local.ranks.len() == comm.nranks {
            work(comm, coll, &descs).map(|()| local_start)
        } else {
            work_across_hosts(comm, coll, &descs, &waiter).map(|remote| local_start.max(remote))
        }
    });
    // Everyone saw the same descriptors, so a disagreement fails every rank alike; work
    // errors (a peer buffer that cannot be mapped) still need the closing barrier.
    if let Err(e) = &result {
        if agree(&descs, &desc).is_err() {
            return Err(e.clone());
        }
    }
    barrier(comm, &waiter)?;
    result
}

fn agree(descs: &[Desc], mine: &Desc) -> Result<()> {
    for (r, d) in descs.iter().enumerate() {
        let same_op = d.op == mine.op
            || (d.op >= crate::types::redop::FIRST_DYNAMIC_OP
                && mine.op >= crate::types::redop::FIRST_DYNAMIC_OP);
        if d.seq != mine.seq
            || d.kind != mine.kind
            || d.dtype != mine.dtype
            || d.count != mine.count
            || d.root != mine.root
            || !same_op
        {
            let name = |k: u32| CollKind::from_raw(k).map_or("?", |k| k.name());
            return Err(NcclError::invalid_usage(format!(
                "ranks disagree on collective #{}: rank {} called {}(count {}, type {}, op {}, root {}) but rank {} called {}(count {}, type {}, op {}, root {}) as its collective #{}",
                mine.seq, mine.rank, name(mine.kind), mine.count, mine.dtype, mine.op, mine.root,
                r, name(d.kind), d.count, d.dtype, d.op, d.root, d.seq
            )));
        }
    }
    Ok(())
}

fn work(comm: &Comm, coll: &Coll, descs: &[Desc]) -> Result<()> {
    let n = comm.nranks;
    let me = comm.rank;
    let esz = coll.dtype.size();
    let count = coll.count;
    let bytes = count * esz;
    let root = coll.root;
    let sends = descs
        .iter()
        .enumerate()
        .map(|(r, d)| d.send.resolve(comm, r))
        .collect::<Result<Vec<_>>>()?;
    let recvs = descs
        .iter()
        .enumerate()
        .map(|(r, d)| d.recv.resolve(comm, r))
        .collect::<Result<Vec<_>>>()?;
    let scalars: Vec<u64> = descs.iter().map(|d| d.scalar).collect();
    let scalars: &[u64] = if matches!(coll.red, Reduction::PreMulSum { .. }) {
        &scalars
    } else {
        &[]
    };
    match coll.kind {
        CollKind::AllReduce | CollKind::Reduce => {
            let r = part(count, n, me);
            let outs: Vec<usize> = if coll.kind == CollKind::AllReduce {
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
        CollKind::ReduceScatter => {
            let a = Arith {
                dtype: coll.dtype,
                red: coll.red,
                scalars,
            };
            reduce_range(a, &sends, me * bytes, &[recvs[me]], 0, bytes);
        }
        CollKind::Broadcast => copy(sends[root], recvs[me], bytes),
        CollKind::AllGather => {
            for (q, &s) in sends.iter().enumerate() {
                copy(s, recvs[me] + q * bytes, bytes);
            }
        }
        CollKind::AlltoAll => {
            for (q, &s) in sends.iter().enumerate() {
                copy(s + me * bytes, recvs[me] + q * bytes, bytes);
            }
        }
        CollKind::Gather => copy(sends[me], recvs[root] + me * bytes, bytes),
        CollKind::Scatter => copy(sends[root] + me * bytes, recvs[me], bytes),
    }
    Ok(())
}

/// Which part of rank `q`'s input rank `p`'s own output needs: (offset, bytes) in q's send
/// buffer, or None.
fn needed(coll: &Coll, bytes: usize, q: usize, p: usize) -> Option<(usize, usize)> {
    let root = coll.root;
    let r = match coll.kind {
        CollKind::AllReduce | CollKind::AllGather => Some((0, bytes)),
        CollKind::Reduce | CollKind::Gather => (p == root).then_some((0, bytes)),
        CollKind::ReduceScatter | CollKind::AlltoAll => Some((p * bytes, bytes)),
        CollKind::Broadcast => (q == root).then_some((0, bytes)),
        CollKind::Scatter => (q == root).then_some((p * bytes, bytes)),
    };
    r.filter(|(_, len)| *len > 0)
}

/// A communicator spanning hosts: each rank computes its own output from the parts of every
/// input it needs (same-host inputs in place, remote ones received into staging), into a
/// private buffer; after every local rank has read its inputs (barrier) the result is copied
/// to the output, so in-place operations never overwrite an input a peer still reads.
fn work_across_hosts(comm: &Comm, coll: &Coll, local: &[Desc], waiter: &Waiter) -> Result<u64> {
    let n = comm.nranks;
    let me = comm.rank;
    let bytes = coll.count * coll.dtype.size();
    let seq = local[comm.local.index].seq;
    let my_scalar = local[comm.local.index].scalar;
    let my_ready = local[comm.local.index].ready;
    let mut outgoing = Vec::new();
    let mut incoming = Vec::new();
    let mut staging: Vec<Vec<u64>> = Vec::new();
    for q in 0..n {
        if !comm.links.is_remote(q) {
            continue;
        }
        if let Some((off, len)) = needed(coll, bytes, me, q) {
            outgoing.push(crate::net::Outgoing {
                peer: q,
                seq,
                ready: my_ready,
                scalar: my_scalar,
                src: coll.send + off,
                len,
            });
        }
        if let Some((_, len)) = needed(coll, bytes, q, me) {
            let buf = vec![0u64; len.div_ceil(8)];
            incoming.push(crate::net::Incoming {
                peer: q,
                seq,
                len,
                dst: buf.as_ptr() as usize,
                scalar: 0,
                ready: 0,
            });
            staging.push(buf);
        }
    }
    crate::net::exchange(&comm.links, &outgoing, &mut incoming, waiter)?;
    // The part of every rank's input this rank needs, and each rank's scalar.
    let mut parts = vec![0usize; n];
    let mut scalars = vec![0u64; n];
    for (li, &q) in comm.local.ranks.iter().enumerate() {
        let src = local[li].send.resolve(comm, q)?;
        scalars[q] = local[li].scalar;
        if let Some((off, _)) = needed(coll, bytes, q, me) {
            parts[q] = src + off;
        }
    }
    for m in &incoming {
        parts[m.peer] = m.dst;
        scalars[m.peer] = m.scalar;
    }
    let (_, recv_elems) = coll.kind.extents(coll.count, n, me, coll.root);
    let out_len = recv_elems * coll.dtype.size();
    let mut result = vec![0u64; out_len.div_ceil(8)];
    let out = result.as_mut_ptr() as usize;
    let scal: &[u64] = if matches!(coll.red, Reduction::PreMulSum { .. }) {
        &scalars
    } else {
        &[]
    };
    let arith = Arith {
        dtype: coll.dtype,
        red: coll.red,
        scalars: scal,
    };
    match coll.kind {
        CollKind::AllReduce | CollKind::ReduceScatter => {
            reduce_range(arith, &parts, 0, &[out], 0, bytes)
        }
        CollKind::Reduce if me == coll.root => reduce_range(arith, &parts, 0, &[out], 0, bytes),
        CollKind::Broadcast | CollKind::Scatter => copy(parts[coll.root], out, bytes),
        CollKind::AllGather | CollKind::AlltoAll => {
            for (q, &p) in parts.iter().enumerate() {
                copy(p, out + q * bytes, bytes);
            }
        }
        CollKind::Gather if me == coll.root => {
            for (q, &p) in parts.iter().enumerate() {
                copy(p, out + q * bytes, bytes);
            }
        }
        _ => {}
    }
    barrier(comm, waiter)?;
    copy(out, coll.recv, out_len);
    Ok(incoming.iter().map(|m| m.ready).max().unwrap_or(0))
}

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
/// ordering across peers).
pub fn run_p2p(comm: &Comm, ops: &[P2p]) -> Result<()> {
    let (remote, ops): (Vec<P2p>, Vec<P2p>) =
        ops.iter().partition(|o| comm.links.is_remote(o.peer));
    if !remote.is_empty() {
        run_remote_p2p(comm, &remote)?;
    }
    let ops = &ops[..];
    let m = seg(comm);
    let n = comm.local.ranks.len();
    let me = comm.local.index;
    let local_of = |rank: usize| {
        comm.local
            .ranks
            .iter()
            .position(|&r| r == rank)
            .expect("invariant: one host")
    };
    let mut counts = comm
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
    let waiter = comm.waiter("send/receive peers");
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
                        }
                        state.store(POSTED, Ordering::Release);
                        ring_bell(m, n, *p);
                        *st = St::Posted;
                        moved = true;
                    }
                }
                (St::Posted, true) => {
                    let (state, _) = entry(m, n, me, *p, slot);
                    match state.load(Ordering::Acquire) {
                        DONE => {
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
                                comm.rank, op.bytes, op.peer
                            )));
                        }
                        _ => {}
                    }
                }
                (St::Waiting, false) => {
                    let (state, raw) = entry(m, n, *p, me, slot);
                    if state.load(Ordering::Acquire) == POSTED {
                        // SAFETY: the sender wrote these fields before publishing POSTED.
                        let (bytes, r) = unsafe {
                            (
                                raw.add(8).cast::<u64>().read_volatile(),
                                raw.add(16).cast::<BufRef>().read_volatile(),
                            )
                        };
                        if bytes as usize != op.bytes {
                            state.store(MISMATCH, Ordering::Release);
                            error.get_or_insert(NcclError::invalid_usage(format!(
                                "rank {} posted a receive of {} bytes from rank {} which sent {bytes} bytes",
                                comm.rank, op.bytes, op.peer
                            )));
                        } else {
                            match r.resolve(comm, op.peer) {
                                Ok(src) => {
                                    copy(src, op.buf, op.bytes);
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
        None => Ok(()),
    }
}

/// Marks point-to-point message numbers on a connection (collectives use operation numbers).
const P2P_SEQ: u64 = 1 << 62;

fn run_remote_p2p(comm: &Comm, ops: &[P2p]) -> Result<()> {
    let mut outgoing = Vec::new();
    let mut incoming = Vec::new();
    {
        let mut counts = comm
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
                    ready: 0,
                    src: op.buf,
                    len: op.bytes,
                });
            } else {
                counts.1[op.peer] += 1;
                incoming.push(crate::net::Incoming {
                    peer: op.peer,
                    seq: P2P_SEQ | counts.1[op.peer],
                    len: op.bytes,
                    dst: op.buf,
                    scalar: 0,
                    ready: 0,
                });
            }
        }
    }
    crate::net::exchange(
        &comm.links,
        &outgoing,
        &mut incoming,
        &comm.waiter("send/receive across hosts"),
    )
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
