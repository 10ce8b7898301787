//! IPC handles: the 64 bytes of `cudaIpcMemHandle_t` / `cudaIpcEventHandle_t`.
//!
//! A memory handle names an allocation by where it lives, not by what it contains:
//! {magic, version, kind, owner pid, arena id, export slot, physical device, offset, size,
//! allocation serial, the arena's broker grant (secret, key), checksum}. Another process maps
//! it by fetching the owner's arena memfd from the owner's descriptor broker with the grant
//! (see [`crate::broker`]; the owner hands it only to a holder of the secret) and checking the
//! arena header and export slot there (see [`crate::arena`]); the checksum only catches
//! accidental corruption early, the slot check is what makes stale or altered handles
//! harmless. The handle holds the allocation's whole granules; where the program's buffer
//! ends (the size it asked for) is read from the owner's export slot, which only the owner
//! writes, so buffers in the mapping are checked against the exporter's allocation exactly.

use crate::arena::{self, ArenaHeader, ARENA_MAGIC, ARENA_VERSION, HEADER_BYTES, SLOT_COUNT};
use crate::broker::{self, Grant};
use crate::error::{CoreError, Result};
use fake_cuda_abi::map::{Access, Mapping};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

/// Size of a CUDA IPC handle.
pub const HANDLE_BYTES: usize = 64;
/// "NSIM" little-endian: first four bytes of every ncclsim handle.
pub const HANDLE_MAGIC: u32 = 0x4d49_534e;
/// Layout version of handles (2: the arena is reached through the owner's broker grant).
pub const HANDLE_VERSION: u16 = 2;
const KIND_MEM: u16 = 1;
const KIND_EVENT: u16 = 2;

/// The decoded contents of a memory handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemHandle {
    /// Owner process id.
    pub owner_pid: u32,
    /// Arena number in the owner.
    pub arena_id: u32,
    /// Export slot in the arena header.
    pub slot: u32,
    /// Offset of the allocation in the arena's data area.
    pub offset: u64,
    /// Size of the allocation.
    pub size: u64,
    /// Allocation serial number.
    pub serial: u64,
    /// Physical device index.
    pub device: u32,
    /// The arena memfd's offer in the owner's broker.
    pub grant: Grant,
}

/// The decoded contents of an event handle. The owner publishes every exported event in an
/// export slot of the arena of `device` (offset [`arena::EVENT_SLOT`], size = the event), so
/// an event handle is validated like a memory handle: owner, arena, slot, serial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventHandle {
    /// Owner process id.
    pub owner_pid: u32,
    /// Event handle value in the owner.
    pub event: u64,
    /// Physical device index.
    pub device: u32,
    /// Arena number in the owner.
    pub arena_id: u32,
    /// Export slot in the arena header.
    pub slot: u32,
    /// Export serial number (never 0).
    pub serial: u64,
    /// The arena memfd's offer in the owner's broker.
    pub grant: Grant,
}

fn checksum(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

struct Writer([u8; HANDLE_BYTES], usize);

impl Writer {
    fn new(kind: u16) -> Writer {
        let mut w = Writer([0; HANDLE_BYTES], 0);
        w.put(&HANDLE_MAGIC.to_le_bytes());
        w.put(&HANDLE_VERSION.to_le_bytes());
        w.put(&kind.to_le_bytes());
        w
    }
    fn put(&mut self, b: &[u8]) {
        self.0[self.1..self.1 + b.len()].copy_from_slice(b);
        self.1 += b.len();
    }
    fn finish(mut self) -> [u8; HANDLE_BYTES] {
        let sum = checksum(&self.0[..60]);
        self.0[60..].copy_from_slice(&sum.to_le_bytes());
        self.0
    }
}

struct Reader<'a>(&'a [u8; HANDLE_BYTES], usize);

impl Reader<'_> {
    fn u32(&mut self) -> u32 {
        let v = u32::from_le_bytes(self.0[self.1..self.1 + 4].try_into().expect("4 bytes"));
        self.1 += 4;
        v
    }
    fn u64(&mut self) -> u64 {
        let v = u64::from_le_bytes(self.0[self.1..self.1 + 8].try_into().expect("8 bytes"));
        self.1 += 8;
        v
    }
    fn grant(&mut self) -> Grant {
        let secret = self.u64();
        Grant {
            secret,
            key: self.u32(),
        }
    }
}

impl Writer {
    fn grant(&mut self, g: Grant) {
        self.put(&g.secret.to_le_bytes());
        self.put(&g.key.to_le_bytes());
    }
}

fn open_header(bytes: &[u8; HANDLE_BYTES], kind: u16) -> Result<Reader<'_>> {
    let mut r = Reader(bytes, 0);
    if r.u32() != HANDLE_MAGIC {
        return Err(CoreError::InvalidIpcHandle(
            "not an ncclsim handle (bad magic)".into(),
        ));
    }
    let version_kind = r.u32();
    let (version, got_kind) = (version_kind as u16, (version_kind >> 16) as u16);
    if version != HANDLE_VERSION {
        return Err(CoreError::InvalidIpcHandle(format!(
            "handle version {version}, this library reads {HANDLE_VERSION}"
        )));
    }
    if got_kind != kind {
        return Err(CoreError::InvalidIpcHandle(format!(
            "handle kind {got_kind}, expected {kind}"
        )));
    }
    let want = u32::from_le_bytes(bytes[60..].try_into().expect("4 bytes"));
    if checksum(&bytes[..60]) != want {
        return Err(CoreError::InvalidIpcHandle(
            "checksum mismatch (corrupt or forged)".into(),
        ));
    }
    Ok(r)
}

impl MemHandle {
    /// The 64 handle bytes.
    pub fn encode(&self) -> [u8; HANDLE_BYTES] {
        let mut w = Writer::new(KIND_MEM);
        w.put(&self.owner_pid.to_le_bytes());
        w.put(&self.arena_id.to_le_bytes());
        w.put(&self.slot.to_le_bytes());
        w.put(&self.device.to_le_bytes());
        w.put(&self.offset.to_le_bytes());
        w.put(&self.size.to_le_bytes());
        w.put(&self.serial.to_le_bytes());
        w.grant(self.grant);
        w.finish()
    }

    /// Decodes and checks the handle's own consistency (not yet whether the owner agrees).
    pub fn decode(bytes: &[u8; HANDLE_BYTES]) -> Result<MemHandle> {
        let mut r = open_header(bytes, KIND_MEM)?;
        let h = MemHandle {
            owner_pid: r.u32(),
            arena_id: r.u32(),
            slot: r.u32(),
            device: r.u32(),
            offset: r.u64(),
            size: r.u64(),
            serial: r.u64(),
            grant: r.grant(),
        };
        if h.serial == 0 || h.size == 0 || h.slot as usize >= SLOT_COUNT {
            return Err(CoreError::InvalidIpcHandle(format!(
                "impossible fields (serial {}, size {}, slot {})",
                h.serial, h.size, h.slot
            )));
        }
        if (h.offset | h.size) & (arena::GRANULARITY - 1) != 0 {
            return Err(CoreError::InvalidIpcHandle(format!(
                "offset {:#x} / size {:#x} not on the allocation granularity",
                h.offset, h.size
            )));
        }
        Ok(h)
    }
}

impl EventHandle {
    /// The 64 handle bytes.
    pub fn encode(&self) -> [u8; HANDLE_BYTES] {
        let mut w = Writer::new(KIND_EVENT);
        w.put(&self.owner_pid.to_le_bytes());
        w.put(&self.device.to_le_bytes());
        w.put(&self.event.to_le_bytes());
        w.put(&self.arena_id.to_le_bytes());
        w.put(&self.slot.to_le_bytes());
        w.put(&self.serial.to_le_bytes());
        w.grant(self.grant);
        w.finish()
    }

    /// Decodes an event handle and checks its own consistency (not yet whether the owner
    /// agrees: see [`EventHandle::check_foreign`]).
    pub fn decode(bytes: &[u8; HANDLE_BYTES]) -> Result<EventHandle> {
        let mut r = open_header(bytes, KIND_EVENT)?;
        let h = EventHandle {
            owner_pid: r.u32(),
            device: r.u32(),
            event: r.u64(),
            arena_id: r.u32(),
            slot: r.u32(),
            serial: r.u64(),
            grant: r.grant(),
        };
        if h.serial == 0 || h.slot as usize >= SLOT_COUNT {
            return Err(CoreError::InvalidIpcHandle(format!(
                "impossible event handle fields (serial {}, slot {})",
                h.serial, h.slot
            )));
        }
        Ok(h)
    }

    /// Checks that process `owner_pid` is alive and publishes this event in the named slot
    /// of its arena (header and slot agree with every field of the handle).
    pub fn check_foreign(&self) -> Result<()> {
        let fd = broker::fetch(self.owner_pid, self.grant)?;
        let header = map(fd.as_fd(), 0, HEADER_BYTES, Access::Read)?;
        // SAFETY: the header mapping is HEADER_BYTES long and page-aligned.
        let head = unsafe { &*(header.ptr() as *const ArenaHeader) };
        if head.magic != ARENA_MAGIC
            || head.version != ARENA_VERSION
            || head.owner_pid != self.owner_pid
            || head.arena_id != self.arena_id
            || head.device != self.device
        {
            return Err(CoreError::InvalidIpcHandle(format!(
                "arena header of process {} does not match the event handle",
                self.owner_pid
            )));
        }
        // SAFETY: slot index checked in decode; the slot lies in the mapped header.
        let slot = unsafe { &*arena::slot_ptr(header.ptr(), self.slot) };
        let serial = slot.serial.load(Ordering::SeqCst);
        let (off, event) = (
            slot.offset.load(Ordering::Relaxed),
            slot.size.load(Ordering::Relaxed),
        );
        if serial != self.serial
            || slot.serial.load(Ordering::SeqCst) != serial
            || off != arena::EVENT_SLOT
            || event != self.event
        {
            return Err(CoreError::InvalidIpcHandle(format!(
                "event {:#x} is not exported by process {} (destroyed, stale or forged)",
                self.event, self.owner_pid
            )));
        }
        Ok(())
    }
}

/// A foreign allocation mapped into this process. While it exists it is counted as an
/// importer in the owner's export slot, so the owner does not reuse the range.
#[derive(Debug)]
pub struct ForeignMapping {
    /// Where the allocation starts in this process.
    pub ptr: usize,
    /// Length of the data mapping.
    len: usize,
    /// The size the exporter asked for (at most `len`): where its buffer ends.
    requested: usize,
    /// The allocation's pages; `None` once replaced by a reservation
    /// ([`ForeignMapping::retire`]), which then owns the addresses.
    data: Option<Mapping>,
    /// The owner's arena header, kept mapped to drop the importer count on unmap.
    header: Mapping,
    /// Export slot counted in.
    slot: u32,
    /// Our lease in the owner's header, if one was free (see [`crate::arena`]).
    lease: Option<usize>,
}

impl ForeignMapping {
    /// Maps the allocation a handle from another process names, after checking the owner's
    /// arena header and export slot agree with every field of the handle, and counts this
    /// process as an importer of it.
    pub fn open(h: &MemHandle) -> Result<ForeignMapping> {
        let fd = broker::fetch(h.owner_pid, h.grant)?;
        let header = map(fd.as_fd(), 0, HEADER_BYTES, Access::ReadWrite)?;
        // SAFETY: the header mapping is HEADER_BYTES long and page-aligned.
        let head = unsafe { &*(header.ptr() as *const ArenaHeader) };
        if head.magic != ARENA_MAGIC
            || head.version != ARENA_VERSION
            || head.owner_pid != h.owner_pid
            || head.arena_id != h.arena_id
            || head.device != h.device
        {
            return Err(CoreError::InvalidIpcHandle(format!(
                "arena header of process {} does not match the handle",
                h.owner_pid
            )));
        }
        let end = h.offset.checked_add(h.size);
        if end.is_none_or(|e| e > head.capacity) {
            return Err(CoreError::InvalidIpcHandle(format!(
                "range {:#x}+{:#x} outside the arena's {:#x} bytes",
                h.offset, h.size, head.capacity
            )));
        }
        // SAFETY: slot index checked in decode; the slot lies in the mapped header.
        let slot = unsafe { &*arena::slot_ptr(header.ptr(), h.slot) };
        // Count in first, then check (see `arena::ExportSlot`): if the owner frees the
        // allocation concurrently, either we see it retracted or it sees us.
        slot.importers.fetch_add(1, Ordering::SeqCst);
        let serial = slot.serial.load(Ordering::SeqCst);
        let (off, size, requested) = (
            slot.offset.load(Ordering::Relaxed),
            slot.size.load(Ordering::Relaxed),
            slot.requested.load(Ordering::Relaxed),
        );
        if serial != h.serial
            || slot.serial.load(Ordering::SeqCst) != serial
            || off != h.offset
            || size != h.size
            || requested > size
        {
            slot.importers.fetch_sub(1, Ordering::SeqCst);
            return Err(CoreError::InvalidIpcHandle(format!(
                "allocation {} is not exported by process {} (freed, stale or forged)",
                h.serial, h.owner_pid
            )));
        }
        let data = match map(
            fd.as_fd(),
            HEADER_BYTES as u64 + h.offset,
            h.size as usize,
            Access::ReadWrite,
        ) {
            Ok(d) => d,
            Err(e) => {
                slot.importers.fetch_sub(1, Ordering::SeqCst);
                return Err(e);
            }
        };
        let lease = take_lease(header.ptr(), h.slot);
        Ok(ForeignMapping {
            ptr: data.addr(),
            len: data.len(),
            requested: requested as usize,
            data: Some(data),
            header,
            slot: h.slot,
            lease,
        })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The size the exporter asked for: where the exported buffer ends in the mapping.
    pub fn requested(&self) -> usize {
        self.requested
    }

    /// Unmaps the allocation but keeps its addresses reserved and inaccessible (see
    /// [`crate::reserve`]); returns the reserved range.
    pub fn retire(mut self) -> (usize, usize) {
        // SAFETY: our data mapping; `self` is consumed, so nothing refers to it any more.
        if unsafe { crate::reserve::reserve_in_place(self.ptr, self.len) } {
            // The reservation now owns the addresses: they must not be unmapped on drop.
            if let Some(data) = self.data.take() {
                data.into_raw();
            }
        }
        (self.ptr, self.len)
    }

    /// Whether the mapping is empty (never, handles carry a size > 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for ForeignMapping {
    fn drop(&mut self) {
        drop(self.data.take());
        // Give the lease back first: if the owner took it (it believed us dead), it also
        // dropped our count, so we must not drop it again.
        let counted = self.lease.is_none_or(|i| {
            // SAFETY: the header stays mapped until below; `i` < LEASE_COUNT.
            let lease = unsafe { &*arena::lease_ptr(self.header.ptr(), i) };
            let mine = arena::lease_value(std::process::id(), self.slot);
            lease
                .compare_exchange(mine, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        });
        if counted {
            // SAFETY: the header stays mapped until below; the slot index was checked on open.
            let slot = unsafe { &*arena::slot_ptr(self.header.ptr(), self.slot) };
            slot.importers.fetch_sub(1, Ordering::SeqCst);
        }
        // The header is unmapped after this, with the other fields.
    }
}

/// Takes a free importer lease for `slot` in the header mapped at `header`; `None` if all are
/// taken.
fn take_lease(header: *const u8, slot: u32) -> Option<usize> {
    let mine = arena::lease_value(std::process::id(), slot);
    (0..arena::LEASE_COUNT).find(|&i| {
        // SAFETY: lease `i` lies in the mapped header and is only accessed atomically.
        let lease = unsafe { &*arena::lease_ptr(header, i) };
        lease
            .compare_exchange(0, mine, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    })
}

/// Maps `len` bytes of a peer's arena from `offset`.
fn map(
    fd: std::os::fd::BorrowedFd<'_>,
    offset: u64,
    len: usize,
    access: Access,
) -> Result<Mapping> {
    Mapping::shared(fd, offset, len, access)
        .map_err(|e| CoreError::IpcMapFailed(format!("mmap: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> MemHandle {
        MemHandle {
            owner_pid: 1234,
            arena_id: 2,
            slot: 5,
            offset: 0x10000,
            size: 0x2000,
            serial: 99,
            device: 3,
            grant: Grant {
                key: 7,
                secret: 0x0123_4567_89ab_cdef,
            },
        }
    }

    #[test]
    fn mem_handle_round_trip() {
        let h = sample();
        let bytes = h.encode();
        assert_eq!(&bytes[..4], b"NSIM");
        assert_eq!(MemHandle::decode(&bytes).unwrap(), h);
    }

    #[test]
    fn corrupt_handles_rejected() {
        let bytes = sample().encode();
        for i in 0..HANDLE_BYTES {
            let mut b = bytes;
            b[i] ^= 0x10;
            assert!(
                MemHandle::decode(&b).is_err(),
                "flipping byte {i} went unnoticed"
            );
        }
        assert!(MemHandle::decode(&[0; HANDLE_BYTES]).is_err());
        let ev = EventHandle {
            owner_pid: 1,
            event: 2,
            device: 0,
            arena_id: 4,
            slot: 5,
            serial: 6,
            grant: Grant { key: 3, secret: 8 },
        }
        .encode();
        assert!(MemHandle::decode(&ev).is_err());
        assert_eq!(EventHandle::decode(&ev).unwrap().event, 2);
    }

    /// Exports allocation `x` of `a` and gives its handle.
    fn export(a: &mut arena::Arena, x: arena::Allocation) -> MemHandle {
        let e = a.export(x.offset).unwrap();
        MemHandle {
            owner_pid: std::process::id(),
            arena_id: a.id(),
            slot: e.slot.unwrap(),
            offset: x.offset,
            size: x.size,
            serial: x.serial,
            device: a.device(),
            grant: a.grant().unwrap(),
        }
    }

    #[test]
    fn maps_a_live_export_and_rejects_forgeries() {
        // The same process can map its own arena as another process would: through its broker.
        let mut a = arena::Arena::create(40, 1, 1 << 24).unwrap();
        let x = a.alloc(8192, 4242).unwrap();
        let base = a.data_base() + x.offset as usize;
        // SAFETY: inside the allocation.
        unsafe { (base as *mut u32).write(0xfeed_beef) };
        let h = export(&mut a, x);
        let m = ForeignMapping::open(&h).unwrap();
        // SAFETY: mapping of 8192 bytes.
        assert_eq!(unsafe { (m.ptr as *const u32).read() }, 0xfeed_beef);
        assert_ne!(m.ptr, base);
        drop(m);
        let forged = [
            MemHandle {
                size: 3 * 8192,
                ..h
            },
            MemHandle { offset: 4096, ..h },
            MemHandle { serial: 1, ..h },
            MemHandle { arena_id: 41, ..h },
            MemHandle {
                grant: Grant {
                    secret: h.grant.secret ^ 1,
                    ..h.grant
                },
                ..h
            },
            MemHandle {
                owner_pid: u32::MAX - 1,
                ..h
            },
            MemHandle {
                offset: 1 << 40,
                ..h
            },
        ];
        for f in forged {
            assert!(ForeignMapping::open(&f).is_err(), "{f:?} was mapped");
        }
        a.free(x.offset);
        assert!(
            matches!(
                ForeignMapping::open(&h),
                Err(CoreError::InvalidIpcHandle(_))
            ),
            "a freed allocation must not map"
        );
    }

    #[test]
    fn an_importer_learns_the_size_the_exporter_asked_for() {
        let mut a = arena::Arena::create(43, 0, 1 << 24).unwrap();
        // 5,000 bytes asked for: two granules mapped, the buffer ends at 5,000.
        let x = a.alloc_for(8192, 5000, 11).unwrap();
        let h = export(&mut a, x);
        let m = ForeignMapping::open(&h).unwrap();
        assert_eq!((m.len(), m.requested()), (8192, 5000));
    }

    #[test]
    fn a_freed_allocation_stays_reserved_while_imported() {
        let mut a = arena::Arena::create(42, 0, 1 << 24).unwrap();
        let x = a.alloc(1 << 20, 7).unwrap();
        let h = export(&mut a, x);
        let m = ForeignMapping::open(&h).unwrap();
        a.free(x.offset).unwrap();
        assert_eq!(a.held_by_importers(), 1 << 20);
        assert!(ForeignMapping::open(&h).is_err(), "retracted at free");
        let y = a.alloc(1 << 20, 8).unwrap();
        assert_ne!(y.offset, x.offset, "an imported range is not reused");
        // SAFETY: the importer's mapping is still 1 MiB long.
        unsafe { (m.ptr as *mut u8).write_bytes(0x5a, 1 << 20) };
        // SAFETY: y is a live allocation of 1 MiB.
        let yb = unsafe {
            std::slice::from_raw_parts((a.data_base() + y.offset as usize) as *const u8, 1 << 20)
        };
        assert!(
            yb.iter().all(|&b| b == 0),
            "the importer's writes stay in the old range"
        );
        drop(m);
        a.free(y.offset).unwrap();
        assert_eq!(a.held_by_importers(), 0);
        assert_eq!(
            a.alloc(1 << 20, 9).unwrap().offset,
            x.offset,
            "reusable once closed"
        );
    }
}
