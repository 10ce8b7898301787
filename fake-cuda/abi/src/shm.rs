//! The layout of an arena memfd's header, which other processes read: the core's IPC importers
//! validate handles against it, and `nccl-shim` checks an arena descriptor it received from
//! the owner is one (`ArenaHeader`, `ARENA_MAGIC`, `MEMFD_PREFIX`).

use std::sync::atomic::AtomicU64;

/// Bytes at the start of every arena memfd reserved for the header and the export slots.
pub const HEADER_BYTES: usize = 1 << 20;
/// Where the export slots start inside the header.
pub const SLOTS_OFFSET: usize = 4096;
/// Where the importer leases start inside the header (after the fixed fields).
pub const LEASES_OFFSET: usize = 1024;
/// Importer leases per arena: (importer pid, slot) pairs, so the owner can drop the counts of
/// importers that died without closing.
pub const LEASE_COUNT: usize = (SLOTS_OFFSET - LEASES_OFFSET) / 8;
/// Export slots per arena (simultaneously exported allocations).
pub const SLOT_COUNT: usize = (HEADER_BYTES - SLOTS_OFFSET) / std::mem::size_of::<ExportSlot>();
/// Allocation granularity and alignment. A page, so that importers can map any allocation.
pub const GRANULARITY: u64 = 4096;
/// "NCSMAREN": identifies an ncclsim arena header.
pub const ARENA_MAGIC: u64 = 0x4e43_534d_4152_454e;
/// Layout version of the header (3: export slots hold the size the program asked for).
pub const ARENA_VERSION: u32 = 3;
/// `offset` of an export slot that publishes an IPC event instead of an allocation (never a
/// valid, granule-aligned offset, so no memory handle can match it); `size` holds the event.
pub const EVENT_SLOT: u64 = u64::MAX;
/// Prefix of arena memfd names, as the link `/proc/<pid>/fd/<n>` shows them (`/memfd:<name> (deleted)`).
pub const MEMFD_PREFIX: &str = "ncclsim-arena-";

/// Fixed fields at offset 0 of an arena memfd.
#[repr(C)]
pub struct ArenaHeader {
    /// [`ARENA_MAGIC`].
    pub magic: u64,
    /// [`ARENA_VERSION`].
    pub version: u32,
    /// Process that created the arena.
    pub owner_pid: u32,
    /// Arena number, unique within the owner process.
    pub arena_id: u32,
    /// Physical device index the arena backs.
    pub device: u32,
    /// Data bytes after the header.
    pub capacity: u64,
}

/// One exported allocation. `serial == 0` means no allocation is published in the slot.
///
/// Writers store `offset` and `size` before `serial` (release); readers load `serial`
/// (acquire), the fields, then `serial` again, and trust the fields only if both loads agree.
///
/// `importers` counts other processes' mappings of the allocation. An importer increments it
/// *before* checking `serial` and decrements it when it unmaps (or when the check fails); the
/// owner clears `serial` *before* reading `importers` on free (both sequentially consistent),
/// so either the importer sees the allocation retracted or the owner sees the importer.
#[repr(C)]
pub struct ExportSlot {
    /// Allocation serial number, never 0 for a live slot.
    pub serial: AtomicU64,
    /// Offset of the allocation from the start of the data area.
    pub offset: AtomicU64,
    /// Size of the allocation in bytes.
    pub size: AtomicU64,
    /// Processes that currently have the allocation mapped.
    pub importers: AtomicU64,
    /// The size the program asked for (at most `size`): where the exported buffer ends, which
    /// importers check buffers against. Written and read like `offset` and `size`.
    pub requested: AtomicU64,
}
