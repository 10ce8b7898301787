//! Shared-memory arenas: where device memory lives.
//!
//! Each device of a process gets one arena on first allocation: a `memfd` as large as the
//! device's memory, mapped `MAP_SHARED | MAP_NORESERVE`, so an 80 GiB device costs nothing until
//! its pages are touched. Freed ranges keep their pages, as a caching allocator would, so a
//! buffer freed and allocated again is not cold (first touches of shared-memory pages cost
//! about 50 times a warm copy); [`Arena::trim`] gives them back (the core calls it on an explicit
//! trim or past its cache limit). A memfd has no name in `/dev/shm` and disappears with the last file
//! descriptor or mapping, so no shared-memory object outlives the processes using it, even after
//! `kill -9`.
//!
//! The first [`HEADER_BYTES`] of the memfd are a header other processes read to validate IPC
//! handles: fixed fields naming the owner, then one [`ExportSlot`] per allocation exported with
//! `cudaIpcGetMemHandle`. An importer maps only ranges that a live slot describes, so a forged
//! offset or size can never map memory outside the owner's allocation.
//!
//! Each slot also counts the processes that have the allocation mapped (`importers`). Freeing
//! an exported allocation retracts its slot at once (no new importer can open it), but while
//! importers still hold it the range and the slot stay reserved (a "zombie"); they return to
//! the free lists once the count drops to zero, so an importer's stale mapping can never alias
//! a later allocation of the owner. Importers also take a lease (their pid and the slot) in a
//! small table of the header; when the owner finds a lease of a process that no longer exists,
//! it drops that importer's count, so a killed importer does not hold ranges forever (if the
//! table is full an importer maps without a lease, and its count then lasts until the owner
//! exits).
//!
//! Other processes never open the memfd by path: it is `chmod 000` (an open of
//! `/proc/<pid>/fd/<n>` is refused) and offered to this process's descriptor broker
//! ([`crate::broker`]) at creation; IPC handles and communicator members carry the offer's key
//! and secret and receive the descriptor from the owner.

use crate::error::{CoreError, Result};
use crate::intervals::IntervalSet;
use fake_cuda_abi::map::Mapping;
use std::collections::BTreeMap;
use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};

pub use fake_cuda_abi::shm::*;

/// A live allocation inside an arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Offset from the data start.
    pub offset: u64,
    /// Rounded size.
    pub size: u64,
    /// The size the program asked for (at most `size`): where its buffer ends.
    pub requested: u64,
    /// Process-unique serial number.
    pub serial: u64,
    /// Export slot, once `cudaIpcGetMemHandle` was called on it.
    pub slot: Option<u32>,
}

/// A device's memory arena in the owning process.
pub struct Arena {
    id: u32,
    device: u32,
    /// The memfd (mode 000, its own descriptor) mapped whole: header, then data. Dropped
    /// with the arena unless [`Arena::retire`] replaced its pages with a reservation.
    map: ManuallyDrop<Mapping>,
    /// The memfd's offer to the broker, or why there is none (other processes cannot map it).
    grant: std::result::Result<crate::broker::Grant, String>,
    capacity: u64,
    used: u64,
    free: BTreeMap<u64, u64>,
    allocs: BTreeMap<u64, Allocation>,
    /// Freed allocations other processes still map: range and slot stay reserved.
    zombies: Vec<Allocation>,
    /// Free ranges whose pages may still be committed (freed, not trimmed since).
    cached: IntervalSet,
    /// Ranges whose pages were committed against the host's memory ([`Arena::commit`]) and not
    /// trimmed since.
    committed: IntervalSet,
    free_slots: Vec<u32>,
    next_slot: u32,
    /// The mapping was replaced by a reservation ([`Arena::retire`]): nothing to unmap.
    retired: bool,
}

/// Rounds a request up to the allocation granularity (0 bytes still takes one granule, so every
/// allocation has a distinct address).
pub fn round_size(size: u64) -> Option<u64> {
    size.max(1).checked_next_multiple_of(GRANULARITY)
}

impl Arena {
    /// Creates the memfd for `device` with `capacity` data bytes and maps it.
    pub fn create(id: u32, device: u32, capacity: u64) -> Result<Arena> {
        let pid = std::process::id();
        let total = HEADER_BYTES as u64 + capacity;
        let len = usize::try_from(total).map_err(|_| {
            CoreError::InvalidValue(format!("arena of {capacity} bytes does not fit in memory"))
        })?;
        // Nobody opens it by path, not even its owner: members receive the descriptor itself.
        let map = Mapping::memfd(&format!("{MEMFD_PREFIX}{pid}-{id}"), len).map_err(|e| {
            CoreError::Os {
                call: "memfd arena",
                errno: e.to_string(),
            }
        })?;
        // SAFETY: the mapping is at least HEADER_BYTES long, page-aligned and zero-filled.
        unsafe {
            map.ptr().cast::<ArenaHeader>().write(ArenaHeader {
                magic: ARENA_MAGIC,
                version: ARENA_VERSION,
                owner_pid: pid,
                arena_id: id,
                device,
                capacity,
            });
        }
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        let fd = map
            .fd()
            .expect("invariant: a memfd mapping keeps its descriptor");
        let grant = crate::broker::offer(fd).map_err(|e| e.to_string());
        Ok(Arena {
            id,
            device,
            grant,
            map: ManuallyDrop::new(map),
            capacity,
            used: 0,
            free,
            allocs: BTreeMap::new(),
            zombies: Vec::new(),
            cached: IntervalSet::default(),
            committed: IntervalSet::default(),
            free_slots: Vec::new(),
            next_slot: 0,
            retired: false,
        })
    }

    /// Arena number within this process.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Physical device the arena backs.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// The memfd's descriptor number.
    pub fn raw_fd(&self) -> i32 {
        self.map
            .fd()
            .expect("invariant: a memfd mapping keeps its descriptor")
            .as_raw_fd()
    }

    /// The key and secret with which another process fetches the memfd from this process's
    /// broker (see [`crate::broker`]).
    pub fn grant(&self) -> Result<crate::broker::Grant> {
        self.grant.clone().map_err(|why| {
            CoreError::IpcMapFailed(format!(
                "arena {} cannot be shared with other processes: {why}",
                self.id
            ))
        })
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes in live allocations.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Address of data offset 0.
    pub fn data_base(&self) -> usize {
        self.map.addr() + HEADER_BYTES
    }

    /// The whole mapping (header and data): start and length.
    pub fn mapping(&self) -> (usize, usize) {
        (self.map.addr(), self.map.len())
    }

    /// Drops the arena but keeps its addresses reserved and inaccessible (see
    /// [`crate::reserve`]); returns the reserved range. The memfd goes away with the last
    /// mapping of it (other processes' imports keep theirs).
    pub fn retire(mut self) -> (usize, usize) {
        let (addr, len) = self.mapping();
        // SAFETY: our mapping; the arena is consumed, so nothing refers to it any more.
        self.retired = unsafe { crate::reserve::reserve_in_place(addr, len) };
        (addr, len)
    }

    /// Whether `addr` falls in this arena's data area.
    pub fn contains(&self, addr: usize) -> bool {
        addr >= self.data_base() && ((addr - self.data_base()) as u64) < self.capacity
    }

    /// The live allocation containing `addr`, if any.
    pub fn allocation_at(&self, addr: usize) -> Option<Allocation> {
        if !self.contains(addr) {
            return None;
        }
        let off = (addr - self.data_base()) as u64;
        let (_, a) = self.allocs.range(..=off).next_back()?;
        (off < a.offset + a.size).then_some(*a)
    }

    /// Allocates `size` bytes (already rounded) first-fit; `None` when nothing fits.
    pub fn alloc(&mut self, size: u64, serial: u64) -> Option<Allocation> {
        self.alloc_for(size, size, serial)
    }

    /// [`Arena::alloc`] for a request of `requested` bytes (at most `size`): where the
    /// program's buffer ends.
    pub fn alloc_for(&mut self, size: u64, requested: u64, serial: u64) -> Option<Allocation> {
        self.reap();
        let (&start, &len) = self.free.iter().find(|(_, &len)| len >= size)?;
        self.free.remove(&start);
        if len > size {
            self.free.insert(start + size, len - size);
        }
        self.cached.remove(start, size);
        let a = Allocation {
            offset: start,
            size,
            requested: requested.min(size),
            serial,
            slot: None,
        };
        self.allocs.insert(start, a);
        self.used += size;
        Some(a)
    }

    /// Frees the allocation starting exactly at `offset`; returns it, or `None` if there is none.
    ///
    /// An exported allocation is retracted from its slot at once; if other processes still
    /// map it, its range and slot stay reserved until they have all unmapped it.
    pub fn free(&mut self, offset: u64) -> Option<Allocation> {
        let a = self.allocs.remove(&offset)?;
        self.used -= a.size;
        if let Some(slot) = a.slot {
            let s = self.slot(slot);
            s.serial.store(0, Ordering::SeqCst);
            if s.importers.load(Ordering::SeqCst) > 0 {
                self.zombies.push(a);
                return Some(a);
            }
            self.free_slots.push(slot);
        }
        self.release_range(a.offset, a.size);
        self.reap();
        Some(a)
    }

    /// Returns zombies no process maps any more to the free lists.
    fn reap(&mut self) {
        if self.zombies.is_empty() {
            return;
        }
        self.drop_dead_importers();
        let (done, held): (Vec<Allocation>, Vec<Allocation>) = std::mem::take(&mut self.zombies)
            .into_iter()
            .partition(|z| {
                let slot = z.slot.expect("invariant: zombies were exported");
                self.slot(slot).importers.load(Ordering::SeqCst) == 0
            });
        self.zombies = held;
        for z in done {
            self.free_slots
                .push(z.slot.expect("invariant: zombies were exported"));
            self.release_range(z.offset, z.size);
        }
    }

    /// Drops the importer counts of leases held by processes that no longer exist.
    fn drop_dead_importers(&self) {
        for i in 0..LEASE_COUNT {
            // SAFETY: lease `i` lies in the mapped header and is only accessed atomically.
            let lease = unsafe { &*lease_ptr(self.map.ptr(), i) };
            let v = lease.load(Ordering::SeqCst);
            let Some((pid, slot)) = lease_parts(v) else {
                continue;
            };
            if (slot as usize) < SLOT_COUNT
                && !process_exists(pid)
                && lease
                    .compare_exchange(v, 0, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                self.slot(slot).importers.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Bytes of free ranges whose pages may still be committed (freed and not trimmed).
    pub fn cached(&self) -> u64 {
        self.cached.total()
    }

    /// Gives the pages of every free range back to the system (`MADV_REMOVE` punches holes in
    /// the memfd); returns the bytes trimmed. The next touch of those pages is a first touch.
    pub fn trim(&mut self) -> u64 {
        let mut bytes = 0;
        for (offset, len) in self.cached.take() {
            bytes += len;
            self.committed.remove(offset, len);
            // A failure only costs memory, so it is ignored.
            // SAFETY: the range lies inside our mapping and belongs to no live allocation.
            unsafe {
                libc::madvise(
                    (self.data_base() + offset as usize) as *mut libc::c_void,
                    len as usize,
                    libc::MADV_REMOVE,
                );
            }
        }
        bytes
    }

    /// Bytes committed against the host's memory (see [`crate::backing`]).
    pub fn committed(&self) -> u64 {
        self.committed.total()
    }

    /// Commits the pages of data range `[offset, offset + len)` not committed yet, after
    /// `check(bytes)` accepted their byte count (see [`crate::backing`]).
    pub fn commit(
        &mut self,
        offset: u64,
        len: u64,
        check: impl FnOnce(u64) -> Result<()>,
    ) -> Result<()> {
        let page = 4096;
        let start = offset / page * page;
        let end = offset
            .saturating_add(len)
            .min(self.capacity)
            .next_multiple_of(page);
        if end <= start {
            return Ok(());
        }
        let gaps = self.committed.gaps(start, end - start);
        check(gaps.iter().map(|g| g.1).sum())?;
        for (s, l) in gaps {
            crate::backing::fallocate(self.raw_fd(), HEADER_BYTES as u64 + s, l)?;
            self.committed.insert(s, l);
        }
        Ok(())
    }

    /// Bytes of freed allocations still reserved because other processes map them.
    pub fn held_by_importers(&self) -> u64 {
        self.zombies.iter().map(|z| z.size).sum()
    }

    /// Puts a range back on the free list, coalescing with its neighbours.
    fn release_range(&mut self, offset: u64, size: u64) {
        self.cached.insert(offset, size);
        let mut start = offset;
        let mut len = size;
        if let Some((&prev, &plen)) = self.free.range(..start).next_back() {
            if prev + plen == start {
                self.free.remove(&prev);
                start = prev;
                len += plen;
            }
        }
        if let Some(nlen) = self.free.remove(&(offset + size)) {
            len += nlen;
        }
        self.free.insert(start, len);
    }

    /// Publishes the allocation at `offset` in an export slot (idempotent) and returns it.
    pub fn export(&mut self, offset: u64) -> Result<Allocation> {
        let mut a = *self.allocs.get(&offset).ok_or_else(|| {
            CoreError::InvalidValue(format!("no allocation starts at arena offset {offset:#x}"))
        })?;
        if a.slot.is_some() {
            return Ok(a);
        }
        let slot = self.take_slot()?;
        let s = self.slot(slot);
        // A reused slot's count only holds transient increments of importers that will see
        // the serial change and back out.
        s.offset.store(a.offset, Ordering::Relaxed);
        s.size.store(a.size, Ordering::Relaxed);
        s.requested.store(a.requested, Ordering::Relaxed);
        s.serial.store(a.serial, Ordering::Release);
        a.slot = Some(slot);
        self.allocs.insert(offset, a);
        Ok(a)
    }

    fn take_slot(&mut self) -> Result<u32> {
        match self.free_slots.pop() {
            Some(s) => Ok(s),
            None if (self.next_slot as usize) < SLOT_COUNT => {
                self.next_slot += 1;
                Ok(self.next_slot - 1)
            }
            None => Err(CoreError::InvalidValue(format!(
                "more than {SLOT_COUNT} allocations and events exported from one device"
            ))),
        }
    }

    /// Publishes IPC event `event` (of serial `serial`) in a free slot; returns the slot.
    pub fn export_event(&mut self, event: u64, serial: u64) -> Result<u32> {
        let slot = self.take_slot()?;
        let s = self.slot(slot);
        s.offset.store(EVENT_SLOT, Ordering::Relaxed);
        s.size.store(event, Ordering::Relaxed);
        s.requested.store(0, Ordering::Relaxed);
        s.serial.store(serial, Ordering::Release);
        Ok(slot)
    }

    /// Retracts an event published with [`Arena::export_event`].
    pub fn retract_event(&mut self, slot: u32) {
        self.slot(slot).serial.store(0, Ordering::SeqCst);
        self.free_slots.push(slot);
    }

    fn slot(&self, index: u32) -> &ExportSlot {
        assert!(
            (index as usize) < SLOT_COUNT,
            "invariant: slot index in range"
        );
        // SAFETY: slots lie inside the header part of our live mapping; they are only accessed
        // atomically.
        unsafe { &*slot_ptr(self.map.ptr(), index) }
    }
}

/// Address of importer lease `index` (< [`LEASE_COUNT`]) in a header mapped at `map`. A lease
/// is 0 (free) or [`lease_value`] of an importer.
pub fn lease_ptr(map: *const u8, index: usize) -> *const AtomicU64 {
    map.wrapping_add(LEASES_OFFSET + index * 8).cast()
}

/// The lease of process `pid` on export slot `slot` (never 0).
pub fn lease_value(pid: u32, slot: u32) -> u64 {
    (u64::from(pid) << 32) | (u64::from(slot) + 1)
}

/// (pid, slot) of a lease, `None` for a free one.
fn lease_parts(v: u64) -> Option<(u32, u32)> {
    (v != 0 && v as u32 != 0).then(|| ((v >> 32) as u32, (v as u32) - 1))
}

/// Whether process `pid` exists (a zombie not yet waited for still does).
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Address of export slot `index` in a header mapped at `map`.
pub fn slot_ptr(map: *const u8, index: u32) -> *const ExportSlot {
    map.wrapping_add(SLOTS_OFFSET + index as usize * std::mem::size_of::<ExportSlot>())
        .cast()
}

impl Drop for Arena {
    fn drop(&mut self) {
        if let Ok(g) = &self.grant {
            crate::broker::withdraw(g.key);
        }
        // SAFETY: taken once, here; the arena is not used after its drop.
        let map = unsafe { ManuallyDrop::take(&mut self.map) };
        if self.retired {
            // The pages are a reservation now ([`Arena::retire`]): close the descriptor only.
            map.into_raw();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_coalesces_and_accounts() {
        let mut a = Arena::create(0, 0, 64 * GRANULARITY).unwrap();
        let x = a.alloc(GRANULARITY, 1).unwrap();
        let y = a.alloc(2 * GRANULARITY, 2).unwrap();
        let z = a.alloc(GRANULARITY, 3).unwrap();
        assert_eq!(a.used(), 4 * GRANULARITY);
        assert_eq!(
            (x.offset, y.offset, z.offset),
            (0, GRANULARITY, 3 * GRANULARITY)
        );
        assert_eq!(
            a.allocation_at(a.data_base() + GRANULARITY as usize + 5),
            Some(y)
        );
        a.free(y.offset).unwrap();
        a.free(x.offset).unwrap();
        assert_eq!(a.allocation_at(a.data_base()), None);
        // x and y coalesced into one 3-granule hole.
        let w = a.alloc(3 * GRANULARITY, 4).unwrap();
        assert_eq!(w.offset, 0);
        assert!(a.free(12345).is_none());
        assert!(a.alloc(61 * GRANULARITY, 5).is_none());
        assert!(a.alloc(60 * GRANULARITY, 5).is_some());
    }

    #[test]
    fn memory_is_shared_and_writable() {
        let mut a = Arena::create(1, 0, 1 << 30).unwrap();
        let x = a.alloc(1 << 20, 1).unwrap();
        let p = (a.data_base() + x.offset as usize) as *mut u8;
        // SAFETY: inside the allocation just made.
        unsafe {
            p.write_bytes(0xab, 1 << 20);
            assert_eq!(*p.add((1 << 20) - 1), 0xab);
        }
    }

    #[test]
    fn export_publishes_and_free_retracts_slot() {
        let mut a = Arena::create(2, 3, 16 * GRANULARITY).unwrap();
        let x = a.alloc(GRANULARITY, 77).unwrap();
        let e = a.export(x.offset).unwrap();
        assert_eq!(a.export(x.offset).unwrap().slot, e.slot);
        let slot = a.slot(e.slot.unwrap());
        assert_eq!(slot.serial.load(Ordering::Acquire), 77);
        assert_eq!(slot.size.load(Ordering::Relaxed), GRANULARITY);
        a.free(x.offset);
        assert_eq!(a.slot(e.slot.unwrap()).serial.load(Ordering::Acquire), 0);
        assert!(a.export(x.offset).is_err());
    }

    /// Resident pages of `len` bytes at `addr` (mincore).
    fn resident(addr: usize, len: usize) -> usize {
        let page = 4096;
        let mut v = vec![0u8; len.div_ceil(page)];
        // SAFETY: a mapped range of ours and a vector of one byte per page.
        let r = unsafe { libc::mincore(addr as *mut libc::c_void, len, v.as_mut_ptr()) };
        assert_eq!(r, 0);
        v.iter().filter(|&&b| b & 1 == 1).count() * page
    }

    #[test]
    fn freed_pages_stay_committed_until_trimmed() {
        let mut a = Arena::create(3, 0, 1 << 26).unwrap();
        let x = a.alloc(1 << 22, 1).unwrap();
        let p = a.data_base() + x.offset as usize;
        // SAFETY: inside the allocation.
        unsafe { (p as *mut u8).write_bytes(1, 1 << 22) };
        a.free(x.offset).unwrap();
        assert_eq!(a.cached(), 1 << 22);
        assert_eq!(resident(p, 1 << 22), 1 << 22, "kept for reuse");
        let y = a.alloc(1 << 21, 2).unwrap();
        assert_eq!(y.offset, x.offset);
        assert_eq!(a.cached(), 1 << 21, "the reused half is live again");
        a.free(y.offset).unwrap();
        assert_eq!(a.trim(), 1 << 22);
        assert_eq!(a.cached(), 0);
        assert_eq!(resident(p, 1 << 22), 0, "given back");
    }

    #[test]
    fn rounding() {
        assert_eq!(round_size(0), Some(GRANULARITY));
        assert_eq!(round_size(1), Some(GRANULARITY));
        assert_eq!(round_size(GRANULARITY + 1), Some(2 * GRANULARITY));
        assert_eq!(round_size(u64::MAX), None);
    }
}
