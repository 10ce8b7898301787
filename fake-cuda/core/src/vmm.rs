//! Virtual memory management: the driver's `cuMem*` API (physical allocation handles, address
//! reservations, mappings, access rights and shareable handles), as CUDA 10.2+ defines it and
//! as PyTorch's expandable segments and NCCL's cuMem path use it.
//!
//! - A physical allocation (`cuMemCreate`) is its own `memfd` of the requested size (plus one
//!   header page naming it), sealed against resizing. It counts against its device's memory
//!   with the arena's allocations, so the two together can run out (`OutOfMemory`). Its own
//!   file, rather than a range of the device arena, is what makes exporting safe: a process that
//!   receives the descriptor can map exactly this allocation and nothing else of the owner.
//! - A reservation (`cuMemAddressReserve`) is an inaccessible, unbacked anonymous mapping
//!   aligned as asked (at least [`GRANULARITY`]).
//! - A mapping (`cuMemMap`) replaces part of a reservation with the allocation's file
//!   (`MAP_SHARED | MAP_FIXED`), still inaccessible; `cuMemSetAccess` makes it readable or
//!   read-write. Mapped, accessible ranges are device memory of the allocation's device for
//!   the rest of the core (copies, memsets, pointer attributes); a copy may run across
//!   adjacent mappings of one reservation, as it may on a GPU. `cuMemUnmap` puts the
//!   inaccessible reservation back, so a stale pointer is an error, never a fault or another
//!   allocation's memory.
//! - Freed reservations join the core's retired ranges (see [`crate::reserve`]).
//! - Exporting (`CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`) hands out a new descriptor of the
//!   allocation's file; importing checks that a descriptor is such a file (name, header, seals,
//!   size) before taking a handle on it. Memory a process never exported cannot be reached
//!   through these calls. An imported allocation counts against the owner's device only.
//!
//! - Multicast objects (`cuMulticastCreate`) are handles of the same kind, with memory bound
//!   to them (see [`multicast`]).
//!
//! A handle lives while it has references (creation, `cuMemRetainAllocationHandle`, minus
//! `cuMemRelease`) or mappings; its memory goes back to the device when both are gone.

use crate::error::{CoreError, Result};
use crate::Core;
use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub use fake_cuda_abi::{GRANULARITY, HANDLE_TYPE_POSIX_FD};
/// Prefix of allocation memfd names (`/proc/<pid>/fd/<n>` shows `/memfd:<name> (deleted)`).
pub const MEMFD_PREFIX: &str = "ncclsim-vmm-";
/// `CU_MEM_ACCESS_FLAGS_PROT_READ`.
pub const ACCESS_READ: u32 = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
pub const ACCESS_READWRITE: u32 = 3;
/// Bytes before the data in an allocation's memfd (one page: [`Header`]).
const HEADER_BYTES: u64 = 4096;
/// "NCSMVMM1".
const MAGIC: u64 = 0x4e43_534d_564d_4d31;
/// Seals every allocation file carries: its size never changes under a mapping.
const SEALS: i32 = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// The first bytes of an allocation's memfd.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Header {
    magic: u64,
    /// Physical device index.
    device: u32,
    /// Creating process.
    owner_pid: u32,
    /// Data bytes.
    size: u64,
}

/// A physical allocation this process holds (created or imported).
#[derive(Debug)]
struct Physical {
    fd: OwnedFd,
    device: usize,
    size: u64,
    handle_types: u32,
    /// Imported from another process: counts against the owner's device, not ours.
    imported: bool,
    /// Handle references (creation and retains, minus releases).
    refs: u32,
    /// Live mappings of (part of) the allocation.
    mappings: u32,
    /// Its pages were committed against the host's memory ([`Vmm::commit`]).
    committed: bool,
    /// A multicast object rather than device memory: its team.
    multicast: Option<Box<multicast::Team>>,
    /// Ranges of this allocation bound to multicast objects.
    bound: Vec<multicast::Overlay>,
}

/// What `cuMemMap` placed inside a reservation. Its pages are not owned like a
/// `fake_cuda_abi::map::Mapping`: they replace part of the reservation (`MAP_FIXED`) and go
/// back to it on `cuMemUnmap` (`reserve::reserve_in_place`), never to the kernel alone.
#[derive(Debug)]
struct MemMapRecord {
    size: usize,
    handle: u64,
    /// Offset in the allocation of the mapping's first byte.
    offset: u64,
    device: usize,
    /// Access flags per physical device (`cuMemSetAccess`).
    access: BTreeMap<usize, u32>,
}

impl MemMapRecord {
    /// The strongest access any device has.
    fn prot(&self) -> u32 {
        self.access.values().fold(0, |a, &f| a | f)
    }
}

#[derive(Debug)]
struct Reservation {
    size: usize,
    /// Start -> mapping.
    mappings: BTreeMap<usize, MemMapRecord>,
}

/// What a pointer into mapped memory reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappedRange {
    /// Physical device of the allocation mapped there.
    pub physical: usize,
    /// Start of the mapping containing the pointer.
    pub base: usize,
    /// Length of that mapping.
    pub size: usize,
    /// End of the readable memory that runs on from the pointer (adjacent readable mappings).
    pub read_end: usize,
    /// End of the writable memory that runs on from the pointer (`base` if not writable).
    pub write_end: usize,
}

/// The virtual memory state of a process.
#[derive(Debug, Default)]
pub struct Vmm {
    handles: HashMap<u64, Physical>,
    next_handle: u64,
    reservations: BTreeMap<usize, Reservation>,
    /// Bytes of created (not imported) allocations per physical device.
    used: BTreeMap<usize, u64>,
}

/// Properties of an allocation handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandleInfo {
    /// Physical device.
    pub physical: usize,
    /// Bytes.
    pub size: u64,
    /// Requested shareable handle types.
    pub handle_types: u32,
}

fn invalid(msg: String) -> CoreError {
    CoreError::InvalidValue(msg)
}

fn bad_handle(handle: u64) -> CoreError {
    CoreError::InvalidHandle {
        what: "memory allocation",
        handle,
    }
}

fn check_granular(what: &str, v: u64) -> Result<()> {
    if v % GRANULARITY != 0 {
        return Err(invalid(format!(
            "{what} {v:#x} is not a multiple of the allocation granularity ({GRANULARITY:#x})"
        )));
    }
    Ok(())
}

impl Vmm {
    /// Bytes of allocations created on physical device `phys` and not yet freed.
    pub fn used(&self, phys: usize) -> u64 {
        self.used.get(&phys).copied().unwrap_or(0)
    }

    fn handle(&self, handle: u64) -> Result<&Physical> {
        self.handles
            .get(&handle)
            .filter(|p| p.refs > 0)
            .ok_or_else(|| bad_handle(handle))
    }

    /// Frees an allocation nothing refers to any more.
    fn reap(&mut self, handle: u64) {
        let Some(p) = self.handles.get(&handle) else {
            return;
        };
        if p.refs == 0 && p.mappings == 0 && !self.bound_to(handle) {
            let p = self.handles.remove(&handle).expect("present");
            if !p.imported && p.multicast.is_none() {
                *self.used.entry(p.device).or_default() -= p.size;
            }
            // A multicast object released while memory was bound to it goes with the last
            // allocation bound to it.
            for o in p.bound {
                self.reap(o.mc);
            }
        }
    }

    fn insert(&mut self, p: Physical) -> u64 {
        self.next_handle += 1;
        self.handles.insert(self.next_handle, p);
        self.next_handle
    }

    /// The reservation containing `[ptr, ptr + len)` entirely.
    fn reservation_of(&self, ptr: usize, len: usize) -> Result<(usize, &Reservation)> {
        let end = ptr
            .checked_add(len)
            .ok_or_else(|| invalid("range overflows".into()))?;
        self.reservations
            .range(..=ptr)
            .next_back()
            .filter(|(&s, r)| end <= s + r.size)
            .map(|(&s, r)| (s, r))
            .ok_or(CoreError::InvalidPointer {
                ptr,
                len,
                why: "not inside one range reserved with cuMemAddressReserve",
            })
    }

    /// Starts of the mappings that exactly tile `[ptr, ptr + len)` (no holes, none cut).
    fn whole_mappings(&self, ptr: usize, len: usize) -> Result<Vec<usize>> {
        let (_, r) = self.reservation_of(ptr, len)?;
        let mut at = ptr;
        let mut starts = Vec::new();
        let end = ptr + len;
        for (&s, m) in r.mappings.range(ptr..end) {
            if s != at || s + m.size > end {
                break;
            }
            starts.push(s);
            at = s + m.size;
        }
        if at != end || len == 0 {
            return Err(CoreError::InvalidPointer {
                ptr,
                len,
                why: "not a run of whole mappings made by cuMemMap",
            });
        }
        Ok(starts)
    }

    fn mapping_mut(&mut self, start: usize) -> &mut MemMapRecord {
        let (_, r) = self
            .reservations
            .range_mut(..=start)
            .next_back()
            .expect("invariant: mappings lie in reservations");
        r.mappings
            .get_mut(&start)
            .expect("invariant: start of a mapping")
    }

    /// The mapping containing `ptr` (whatever its access).
    fn mapping_at(&self, ptr: usize) -> Option<(usize, &Reservation, usize, &MemMapRecord)> {
        let (&rs, r) = self.reservations.range(..=ptr).next_back()?;
        if ptr >= rs + r.size {
            return None;
        }
        let (&ms, m) = r.mappings.range(..=ptr).next_back()?;
        (ptr < ms + m.size).then_some((rs, r, ms, m))
    }

    /// What an accessible mapped pointer reaches, or why it reaches nothing (`Err`), or
    /// `Ok(None)` if it is not in a reservation at all.
    pub fn lookup(&self, ptr: usize) -> std::result::Result<Option<MappedRange>, &'static str> {
        let Some((&rs, r)) = self.reservations.range(..=ptr).next_back() else {
            return Ok(None);
        };
        if ptr >= rs + r.size {
            return Ok(None);
        }
        let Some((_, _, ms, m)) = self.mapping_at(ptr) else {
            return Err("reserved with cuMemAddressReserve but not mapped (cuMemMap)");
        };
        if m.prot() == 0 {
            return Err("mapped without access rights (cuMemSetAccess)");
        }
        let reach = |need: u32| {
            let mut end = ms;
            for (&s, x) in r.mappings.range(ms..) {
                if s != end || x.prot() & need != need {
                    break;
                }
                end = s + x.size;
            }
            end
        };
        Ok(Some(MappedRange {
            physical: m.device,
            base: ms,
            size: m.size,
            read_end: reach(ACCESS_READ),
            write_end: reach(ACCESS_READWRITE),
        }))
    }

    /// The buffer an accessible mapped pointer is in, as (physical device, start, end): the
    /// run of side-by-side accessible mappings of the same device around it in its reserved
    /// range. A program builds one buffer out of several mappings only inside one
    /// reservation; a reservation that happens to follow is another buffer.
    pub fn extent(&self, ptr: usize) -> Option<(usize, usize, usize)> {
        let (_, r, ms, m) = self.mapping_at(ptr)?;
        if m.prot() == 0 {
            return None;
        }
        let same = |x: &MemMapRecord| x.device == m.device && x.prot() != 0;
        let mut start = ms;
        for (&s, x) in r.mappings.range(..ms).rev() {
            if s + x.size != start || !same(x) {
                break;
            }
            start = s;
        }
        let mut end = ms;
        for (&s, x) in r.mappings.range(ms..) {
            if s != end || !same(x) {
                break;
            }
            end = s + x.size;
        }
        Some((m.device, start, end))
    }

    /// Bytes of this process's own allocations committed against the host's memory.
    pub fn committed(&self) -> u64 {
        self.handles
            .values()
            .filter(|p| p.committed && !p.imported)
            .map(|p| p.size)
            .sum()
    }

    /// Commits, whole, each of this process's allocations mapped in `[ptr, ptr + len)` that is
    /// not committed yet, after `check(bytes)` accepted their total (see [`crate::backing`]).
    /// Imported allocations are the exporter's to commit.
    pub fn commit(
        &mut self,
        ptr: usize,
        len: usize,
        check: impl FnOnce(u64) -> Result<()>,
    ) -> Result<()> {
        let Some((&rs, r)) = self.reservations.range(..=ptr).next_back() else {
            return Ok(());
        };
        let end = ptr.saturating_add(len).min(rs + r.size);
        let start_map = r
            .mappings
            .range(..=ptr)
            .next_back()
            .map_or(ptr, |(&s, _)| s);
        let mut todo: Vec<u64> = r
            .mappings
            .range(start_map..end)
            .filter(|(&s, m)| s + m.size > ptr)
            .map(|(_, m)| m.handle)
            .filter(|h| {
                // Multicast objects are committed by each process that maps them.
                self.handles
                    .get(h)
                    .is_some_and(|p| !p.committed && (!p.imported || p.multicast.is_some()))
            })
            .collect();
        todo.sort_unstable();
        todo.dedup();
        check(todo.iter().map(|h| self.handles[h].size).sum())?;
        for h in todo {
            let p = self.handles.get_mut(&h).expect("listed above");
            // Bound ranges are the multicast objects' pages, committed when bound.
            for (start, len) in multicast::unbound(p) {
                crate::backing::fallocate(p.fd.as_raw_fd(), HEADER_BYTES + start, len)?;
            }
            p.committed = true;
        }
        Ok(())
    }

    /// Whether `[ptr, ptr + len)` touches a reservation.
    pub fn touches(&self, ptr: usize, len: usize) -> bool {
        let end = ptr.saturating_add(len.max(1));
        self.reservations
            .range(..end)
            .next_back()
            .is_some_and(|(&s, r)| s + r.size > ptr)
    }
}

/// The header at the start of an allocation's file.
fn pread_header(fd: RawFd) -> Option<Header> {
    let mut h = Header::default();
    let len = std::mem::size_of::<Header>();
    // SAFETY: `h` is a plain `repr(C)` value of `len` bytes; any bytes are a valid Header.
    let n = unsafe { libc::pread(fd, (&mut h as *mut Header).cast(), len, 0) };
    (n == len as isize).then_some(h)
}

/// The bytes of a plain `repr(C)` value.
///
/// # Safety
/// `T` must have no padding bytes.
pub(crate) unsafe fn as_bytes<T>(v: &T) -> &[u8] {
    // SAFETY: `v` is `size_of::<T>()` readable bytes, all initialised by the caller's contract.
    unsafe { std::slice::from_raw_parts((v as *const T).cast(), std::mem::size_of::<T>()) }
}

/// A new memfd named `<prefix><pid>`: [`HEADER_BYTES`] starting with `header`, then `data`
/// bytes, sealed against resizing, and reachable only through descriptors the program passes,
/// never by path (see `crate::broker`).
fn sealed_memfd(prefix: &str, header: &[u8], data: u64) -> Result<OwnedFd> {
    let name = CString::new(format!("{prefix}{}", std::process::id())).expect("invariant: no NUL");
    // SAFETY: valid name; plain flags.
    let raw =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(CoreError::last_os("memfd_create"));
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    rustix::fs::fchmod(&fd, rustix::fs::Mode::empty()).map_err(|e| CoreError::Os {
        call: "fchmod",
        errno: std::io::Error::from(e).to_string(),
    })?;
    let total = HEADER_BYTES
        .checked_add(data)
        .ok_or_else(|| invalid(format!("{data:#x} bytes overflow")))?;
    // SAFETY: valid descriptor; `header` is `header.len()` readable bytes.
    let ok = unsafe {
        libc::ftruncate(raw, total as libc::off_t) == 0
            && libc::pwrite(raw, header.as_ptr().cast(), header.len(), 0) == header.len() as isize
            && libc::fcntl(raw, libc::F_ADD_SEALS, SEALS) == 0
    };
    if !ok {
        return Err(CoreError::last_os("memfd setup"));
    }
    Ok(fd)
}

impl Core {
    /// `cuMemCreate`: a physical allocation of `size` bytes (a multiple of [`GRANULARITY`]) on
    /// visible device `ordinal`, exportable as `handle_types` (0 or
    /// [`HANDLE_TYPE_POSIX_FD`]); returns its handle.
    pub fn mem_create(&self, ordinal: i32, size: u64, handle_types: u32) -> Result<u64> {
        let phys = self.physical(ordinal)?;
        if size == 0 {
            return Err(invalid("cuMemCreate of 0 bytes".into()));
        }
        check_granular("cuMemCreate size", size)?;
        if handle_types & !HANDLE_TYPE_POSIX_FD != 0 {
            return Err(CoreError::NotSupported(
                "shareable handle types other than POSIX file descriptors",
            ));
        }
        let cap = self.devices[phys].memory_bytes;
        let mut st = self.lock();
        let used = st.arenas[phys].as_ref().map_or(0, |a| a.used()) + st.vmm.used(phys);
        if used.saturating_add(size) > cap {
            return Err(CoreError::OutOfMemory {
                device: ordinal,
                requested: size,
                free: cap - used,
                total: cap,
            });
        }
        let header = Header {
            magic: MAGIC,
            device: phys as u32,
            owner_pid: std::process::id(),
            size,
        };
        // SAFETY: `Header` is plain `repr(C)` data without padding.
        let fd = sealed_memfd(MEMFD_PREFIX, unsafe { as_bytes(&header) }, size)?;
        *st.vmm.used.entry(phys).or_default() += size;
        let now = used + size;
        st.peak[phys] = st.peak[phys].max(now);
        self.publish_memory(&mut st, phys);
        Ok(st.vmm.insert(Physical {
            fd,
            device: phys,
            size,
            handle_types,
            imported: false,
            refs: 1,
            mappings: 0,
            committed: false,
            multicast: None,
            bound: Vec::new(),
        }))
    }

    /// `cuMemRelease`: drops a handle reference; the memory goes when no mapping holds it.
    pub fn mem_release(&self, handle: u64) -> Result<()> {
        let mut st = self.lock();
        st.vmm.handle(handle)?;
        st.vmm.handles.get_mut(&handle).expect("checked").refs -= 1;
        st.vmm.reap(handle);
        self.publish_all_memory(&mut st);
        Ok(())
    }

    /// `cuMemRetainAllocationHandle`: a new reference to the allocation mapped at `ptr`.
    pub fn mem_retain(&self, ptr: usize) -> Result<u64> {
        let mut st = self.lock();
        let handle = st.vmm.mapping_at(ptr).map(|(_, _, _, m)| m.handle).ok_or(
            CoreError::InvalidPointer {
                ptr,
                len: 0,
                why: "not inside a mapping made by cuMemMap",
            },
        )?;
        st.vmm.handles.get_mut(&handle).expect("mapped").refs += 1;
        Ok(handle)
    }

    /// `cuMemGetAllocationPropertiesFromHandle`.
    pub fn mem_handle_info(&self, handle: u64) -> Result<HandleInfo> {
        let st = self.lock();
        let p = st.vmm.handle(handle)?;
        Ok(HandleInfo {
            physical: p.device,
            size: p.size,
            handle_types: p.handle_types,
        })
    }

    /// Visible ordinal of physical device `phys`, -1 if `CUDA_VISIBLE_DEVICES` hides it.
    pub fn ordinal_of_physical(&self, phys: usize) -> i32 {
        self.ordinal_of(phys).unwrap_or(-1)
    }

    /// `cuMemAddressReserve`: `size` bytes (a multiple of [`GRANULARITY`]) of inaccessible
    /// address space aligned to `alignment` (0 or a power of two; at least the granularity),
    /// at `hint` if that range is free.
    pub fn mem_address_reserve(&self, size: usize, alignment: usize, hint: usize) -> Result<usize> {
        if size == 0 {
            return Err(invalid("cuMemAddressReserve of 0 bytes".into()));
        }
        check_granular("cuMemAddressReserve size", size as u64)?;
        if alignment != 0 && !alignment.is_power_of_two() {
            return Err(invalid(format!(
                "cuMemAddressReserve alignment {alignment:#x} is not a power of two"
            )));
        }
        let align = alignment.max(GRANULARITY as usize);
        let start = crate::reserve::reserve_aligned(size, align, hint)?;
        self.lock().vmm.reservations.insert(
            start,
            Reservation {
                size,
                mappings: BTreeMap::new(),
            },
        );
        Ok(start)
    }

    /// `cuMemAddressFree`: gives back a whole reservation with nothing mapped in it. The
    /// addresses stay reserved and inaccessible (retired), so stale pointers are errors.
    pub fn mem_address_free(&self, ptr: usize, size: usize) -> Result<()> {
        let mut st = self.lock();
        match st.vmm.reservations.get(&ptr) {
            Some(r) if r.size == size && r.mappings.is_empty() => {}
            Some(r) if r.size == size => {
                return Err(invalid(format!(
                    "cuMemAddressFree of {ptr:#x}: {} mapping(s) still in it (cuMemUnmap first)",
                    r.mappings.len()
                )))
            }
            _ => {
                return Err(CoreError::InvalidPointer {
                    ptr,
                    len: size,
                    why: "not a whole range from cuMemAddressReserve",
                })
            }
        }
        st.vmm.reservations.remove(&ptr);
        st.retired
            .add(ptr, size, "an address range freed with cuMemAddressFree");
        Ok(())
    }

    /// `cuMemMap`: maps `size` bytes of allocation `handle` from `offset` at `ptr`, inside a
    /// reservation, over nothing already mapped. The range is inaccessible until
    /// [`Core::mem_set_access`].
    pub fn mem_map(&self, ptr: usize, size: usize, offset: u64, handle: u64) -> Result<()> {
        check_granular("cuMemMap address", ptr as u64)?;
        check_granular("cuMemMap size", size as u64)?;
        check_granular("cuMemMap offset", offset)?;
        // A multicast object maps once its whole team is added, as in CUDA.
        self.wait_for_team(handle)?;
        let mut st = self.lock();
        let p = st.vmm.handle(handle)?;
        if size == 0 || offset.checked_add(size as u64).is_none_or(|e| e > p.size) {
            return Err(invalid(format!(
                "cuMemMap of {size:#x} bytes at offset {offset:#x} of a {:#x}-byte allocation",
                p.size
            )));
        }
        let (fd, device) = (p.fd.as_raw_fd(), p.device);
        let (rs, r) = st.vmm.reservation_of(ptr, size)?;
        if let Some((&s, m)) = r.mappings.range(..ptr + size).next_back() {
            if s + m.size > ptr {
                return Err(CoreError::InvalidPointer {
                    ptr,
                    len: size,
                    why: "overlaps a mapping already made by cuMemMap",
                });
            }
        }
        // SAFETY: replaces part of our own inaccessible reservation (checked above to hold no
        // mapping) with the allocation's file; nothing refers to those addresses.
        let m = unsafe {
            libc::mmap(
                ptr as *mut libc::c_void,
                size,
                libc::PROT_NONE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                (HEADER_BYTES + offset) as libc::off_t,
            )
        };
        if m == libc::MAP_FAILED {
            return Err(CoreError::last_os("mmap"));
        }
        // Bound ranges show the multicast objects' pages.
        let p = st.vmm.handle(handle)?;
        multicast::map_bound(p, ptr, size, offset, libc::PROT_NONE)?;
        st.vmm
            .reservations
            .get_mut(&rs)
            .expect("found above")
            .mappings
            .insert(
                ptr,
                MemMapRecord {
                    size,
                    handle,
                    offset,
                    device,
                    access: BTreeMap::new(),
                },
            );
        st.vmm.handles.get_mut(&handle).expect("checked").mappings += 1;
        Ok(())
    }

    /// `cuMemUnmap`: unmaps whole mappings tiling `[ptr, ptr + size)`; the addresses become
    /// an inaccessible reservation again.
    pub fn mem_unmap(&self, ptr: usize, size: usize) -> Result<()> {
        let mut st = self.lock();
        let starts = st.vmm.whole_mappings(ptr, size)?;
        let (rs, _) = st.vmm.reservation_of(ptr, size)?;
        // SAFETY: the range is our mappings, which the program gives up by unmapping them.
        if !unsafe { crate::reserve::reserve_in_place(ptr, size) } {
            return Err(CoreError::last_os("mmap"));
        }
        for s in starts {
            let r = st.vmm.reservations.get_mut(&rs).expect("found above");
            let m = r.mappings.remove(&s).expect("listed");
            st.vmm.handles.get_mut(&m.handle).expect("mapped").mappings -= 1;
            st.vmm.reap(m.handle);
        }
        self.publish_all_memory(&mut st);
        Ok(())
    }

    /// `cuMemSetAccess` for one device: sets visible device `ordinal`'s access (0 none,
    /// [`ACCESS_READ`], [`ACCESS_READWRITE`]) to the whole mappings tiling `[ptr, ptr + size)`.
    pub fn mem_set_access(&self, ptr: usize, size: usize, ordinal: i32, flags: u32) -> Result<()> {
        let phys = self.physical(ordinal)?;
        if ![0, ACCESS_READ, ACCESS_READWRITE].contains(&flags) {
            return Err(invalid(format!("CUmemAccess_flags {flags}")));
        }
        let mut st = self.lock();
        for s in st.vmm.whole_mappings(ptr, size)? {
            let m = st.vmm.mapping_mut(s);
            if flags == 0 {
                m.access.remove(&phys);
            } else {
                m.access.insert(phys, flags);
            }
            let prot = multicast::prot_bits(m.prot());
            // SAFETY: changes the protection of one of our own mappings.
            if unsafe { libc::mprotect(s as *mut libc::c_void, m.size, prot) } != 0 {
                return Err(CoreError::last_os("mprotect"));
            }
        }
        Ok(())
    }

    /// `cuMemGetAccess`: visible device `ordinal`'s access to the mapping containing `ptr`.
    pub fn mem_get_access(&self, ptr: usize, ordinal: i32) -> Result<u32> {
        let phys = self.physical(ordinal)?;
        let st = self.lock();
        let (_, _, _, m) = st.vmm.mapping_at(ptr).ok_or(CoreError::InvalidPointer {
            ptr,
            len: 0,
            why: "not inside a mapping made by cuMemMap",
        })?;
        Ok(m.access.get(&phys).copied().unwrap_or(0))
    }

    /// `cuMemExportToShareableHandle` (POSIX file descriptor): a new descriptor of the
    /// allocation's file, owned by the caller. Only allocations created with
    /// [`HANDLE_TYPE_POSIX_FD`] can be exported.
    pub fn mem_export(&self, handle: u64) -> Result<OwnedFd> {
        let st = self.lock();
        let p = st.vmm.handle(handle)?;
        if p.handle_types & HANDLE_TYPE_POSIX_FD == 0 {
            return Err(invalid(format!(
                "allocation {handle} was not created exportable as a POSIX file descriptor \
                 (requestedHandleTypes)"
            )));
        }
        p.fd.try_clone().map_err(|e| CoreError::Os {
            call: "dup",
            errno: e.to_string(),
        })
    }

    /// `cuMemImportFromShareableHandle` (POSIX file descriptor): a handle on the allocation
    /// another process exported as `fd` (the caller keeps `fd`). Anything but such a file is
    /// refused.
    pub fn mem_import(&self, fd: RawFd) -> Result<u64> {
        let refuse = |why: &str| {
            CoreError::InvalidIpcHandle(format!(
                "descriptor {fd} is not an allocation exported with \
                 cuMemExportToShareableHandle: {why}"
            ))
        };
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map_err(|e| refuse(&format!("no such descriptor ({e})")))?;
        let link = link.to_string_lossy();
        if link.starts_with(&format!("/memfd:{}", multicast::MEMFD_PREFIX)) {
            return self.mcast_import(fd);
        }
        if !link.starts_with(&format!("/memfd:{MEMFD_PREFIX}")) {
            return Err(refuse(&format!("it is {link}")));
        }
        // SAFETY: F_GET_SEALS on a descriptor of the caller; no memory is passed.
        let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
        let h = pread_header(fd).ok_or_else(|| refuse("no header"))?;
        // SAFETY: `libc::stat` is plain C data; all zeroes is a valid value.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-pointer.
        let len_ok = unsafe { libc::fstat(fd, &mut stat) } == 0
            && u64::try_from(stat.st_size).ok() == h.size.checked_add(HEADER_BYTES);
        if seals & SEALS != SEALS
            || h.magic != MAGIC
            || !len_ok
            || h.size == 0
            || h.size % GRANULARITY != 0
        {
            return Err(refuse("header, size or seals do not match"));
        }
        let device = h.device as usize;
        if device >= self.devices.len() {
            return Err(refuse(&format!("device {device} is not on this node")));
        }
        // SAFETY: duplicating a descriptor the caller holds; the copy is ours.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(CoreError::last_os("fcntl(F_DUPFD_CLOEXEC)"));
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(dup) };
        Ok(self.lock().vmm.insert(Physical {
            fd,
            device,
            size: h.size,
            handle_types: HANDLE_TYPE_POSIX_FD,
            // Counted once, by the process that created it (also when it imports its own).
            imported: true,
            refs: 1,
            mappings: 0,
            committed: false,
            multicast: None,
            bound: Vec::new(),
        }))
    }
}

pub mod multicast;
#[cfg(test)]
mod tests;
