//! Multicast objects (`cuMulticastCreate`, CUDA 12.1+): the NVLS memory of NVSwitch systems,
//! where a store through a multicast mapping reaches the memory that every device of a team
//! bound to the object, and a load returns that value.
//!
//! The driver API's rules, as the CUDA Driver API reference states them ("Multicast Object
//! Management", CUDA 12.x and 13.x: `cuMulticastCreate`, `cuMulticastAddDevice`,
//! `cuMulticastBindMem`, `cuMulticastBindAddr`, `cuMulticastUnbind`):
//! an object is created for a team of `numDevices` devices and `size` bytes per device (a
//! multiple of the granularity); each device joins with `cuMulticastAddDevice`; binding memory
//! (`cuMulticastBindMem`, `cuMulticastBindAddr`) and mapping the object (`cuMemMap`) wait until
//! the whole team is added; offsets and sizes of a binding are multiples of the granularity and
//! stay inside both the allocation and the object; `cuMulticastUnbind` undoes a device's
//! bindings. The object is a generic allocation handle: it is mapped, given access, exported
//! and imported (POSIX descriptor, fabric handle) and released like an allocation.
//!
//! On a CPU one store cannot reach several pages, so the copies are one: the object is its own
//! memfd (a header page, then `size` bytes), and binding a range of an allocation replaces that
//! range, in every mapping of the allocation in this process (present and future), by the
//! object's pages at the bound offset. A store through the multicast mapping or through any
//! bound allocation is then seen by all of them, so every copy stays equal. That differs from
//! the hardware in two ways, both invisible to programs that use multicast memory as NVLS does
//! (bind fresh buffers, then write through the multicast mapping or reduce over it):
//! - a unicast store to one device's bound memory is seen by the other devices too (on a GPU it
//!   changes that device's copy only);
//! - a bound range shows the object's contents from the bind on (zero until written), not what
//!   the allocation held before; unbinding copies the object's bytes back into the allocation,
//!   so the device keeps what was last written through the object, as on the hardware.
//!
//! The team is shared between processes through the object's file: the header holds the team
//! size and an atomic count of the devices added by all processes, so a process that imported
//! the object waits for the others' `cuMulticastAddDevice` as CUDA does (bounded by
//! [`TEAM_WAIT`], never forever). Binding is per process: a process that imported an
//! allocation and mapped it before its owner bound it keeps seeing the allocation's own pages
//! in the bound range. A mapping of the object is device memory of the first device this
//! process added to the team (device 0 before that). The object's pages are committed against
//! the host's memory when bound (see [`crate::backing`]); the allocation's own pages under a
//! binding never are.

use super::{
    as_bytes, check_granular, invalid, sealed_memfd, MemMapRecord, Physical, Vmm, ACCESS_READ,
    GRANULARITY, HANDLE_TYPE_POSIX_FD, HEADER_BYTES, SEALS,
};
use crate::error::{CoreError, Result};
use crate::Core;
use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Prefix of multicast object memfd names.
pub const MEMFD_PREFIX: &str = "ncclsim-mcast-";
/// "NCSMMCS1".
const MAGIC: u64 = 0x4e43_534d_4d43_5331;
/// How long binding or mapping waits for the rest of the team to be added (the default of
/// `Config::team_wait`).
pub const TEAM_WAIT: Duration = Duration::from_secs(120);

/// The first bytes of a multicast object's memfd.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Header {
    magic: u64,
    /// Data bytes (per device).
    size: u64,
    /// Devices in the team.
    num_devices: u32,
    /// Creating process.
    owner_pid: u32,
    /// Devices added so far, by all processes (updated atomically in the shared page).
    added: u32,
    reserved: u32,
}

/// Offset of [`Header::added`].
const ADDED_AT: usize = std::mem::offset_of!(Header, added);

/// The header page of an object's file, mapped shared: the team's count lives there.
#[derive(Debug)]
struct SharedPage(std::ptr::NonNull<u8>);

// SAFETY: the page is only read and written through atomics.
unsafe impl Send for SharedPage {}
// SAFETY: as above.
unsafe impl Sync for SharedPage {}

impl SharedPage {
    fn map(fd: RawFd) -> Result<SharedPage> {
        // SAFETY: a new shared mapping of the header page of an object's file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                HEADER_BYTES as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(CoreError::last_os("mmap"));
        }
        Ok(SharedPage(
            std::ptr::NonNull::new(p.cast()).expect("mmap succeeded"),
        ))
    }

    /// Devices added so far.
    fn added(&self) -> &AtomicU32 {
        // SAFETY: the field lies in the mapped page, aligned (offset 24 of a page), and is
        // only accessed atomically, by every process mapping it.
        unsafe { AtomicU32::from_ptr(self.0.as_ptr().add(ADDED_AT).cast()) }
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, used by nothing else.
        unsafe { libc::munmap(self.0.as_ptr().cast(), HEADER_BYTES as usize) };
    }
}

/// What this process knows of a multicast object's team.
#[derive(Debug)]
pub(super) struct Team {
    shared: Arc<SharedPage>,
    num_devices: u32,
    /// Physical devices this process added.
    local: BTreeSet<usize>,
}

/// A range of an allocation bound to a multicast object.
#[derive(Debug)]
pub(super) struct Overlay {
    /// The object's handle in this process.
    pub(super) mc: u64,
    /// The allocation's physical device.
    device: usize,
    mem_offset: u64,
    mc_offset: u64,
    size: u64,
    /// The object's file, kept open while bound.
    file: OwnedFd,
}

/// `mmap` protection of `CUmemAccess_flags`.
pub(super) fn prot_bits(access: u32) -> i32 {
    match access {
        0 => libc::PROT_NONE,
        ACCESS_READ => libc::PROT_READ,
        _ => libc::PROT_READ | libc::PROT_WRITE,
    }
}

/// Maps `len` bytes of `fd` from file offset `at` over `[ptr, ptr + len)`.
///
/// # Safety
/// `[ptr, ptr + len)` must be a mapping of this process that the core owns.
unsafe fn map_over(ptr: usize, len: u64, prot: i32, fd: RawFd, at: u64) -> Result<()> {
    // SAFETY: by the caller's contract the range is the core's own mapping.
    let m = unsafe {
        libc::mmap(
            ptr as *mut libc::c_void,
            len as usize,
            prot,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            at as libc::off_t,
        )
    };
    if m == libc::MAP_FAILED {
        return Err(CoreError::last_os("mmap"));
    }
    Ok(())
}

/// The part of `[a, a + alen)` inside `[b, b + blen)`, if any.
fn overlap(a: u64, alen: u64, b: u64, blen: u64) -> Option<(u64, u64)> {
    let (lo, hi) = (a.max(b), (a + alen).min(b + blen));
    (lo < hi).then_some((lo, hi))
}

/// The ranges of `p` (offset, length) no binding covers, in order.
pub(super) fn unbound(p: &Physical) -> Vec<(u64, u64)> {
    let mut bound: Vec<(u64, u64)> = p.bound.iter().map(|o| (o.mem_offset, o.size)).collect();
    bound.sort_unstable();
    let mut gaps = Vec::new();
    let mut at = 0;
    for (start, len) in bound {
        if start > at {
            gaps.push((at, start - at));
        }
        at = at.max(start + len);
    }
    if at < p.size {
        gaps.push((at, p.size - at));
    }
    gaps
}

/// Maps `fd` (file offset `at` for the binding's first byte) over the part of `[ptr, ptr + len)`,
/// a mapping of an allocation from `offset`, that binding `o` covers.
fn remap_part(
    ptr: usize,
    len: usize,
    offset: u64,
    o: &Overlay,
    prot: i32,
    fd: RawFd,
    at: u64,
) -> Result<()> {
    if let Some((lo, hi)) = overlap(offset, len as u64, o.mem_offset, o.size) {
        let start = ptr + (lo - offset) as usize;
        // SAFETY: part of a mapping of the allocation that the core made and keeps.
        unsafe { map_over(start, hi - lo, prot, fd, at + (lo - o.mem_offset))? };
    }
    Ok(())
}

/// After `[ptr, ptr + len)` was mapped to allocation `p` from `offset`: maps the object's
/// pages over the parts of it bound to multicast objects.
pub(super) fn map_bound(
    p: &Physical,
    ptr: usize,
    len: usize,
    offset: u64,
    prot: i32,
) -> Result<()> {
    for o in &p.bound {
        let at = HEADER_BYTES + o.mc_offset;
        remap_part(ptr, len, offset, o, prot, o.file.as_raw_fd(), at)?;
    }
    Ok(())
}

impl Vmm {
    /// Whether memory of this process is bound to multicast object `mc`.
    pub(super) fn bound_to(&self, mc: u64) -> bool {
        self.handles
            .values()
            .any(|p| p.bound.iter().any(|o| o.mc == mc))
    }

    fn team(&self, mc: u64) -> Result<(&Physical, &Team)> {
        let p = self.handle(mc)?;
        let t = p.multicast.as_deref().ok_or_else(|| {
            invalid(format!(
                "handle {mc} is a memory allocation, not a multicast object"
            ))
        })?;
        Ok((p, t))
    }

    /// The mappings of allocation `h`: (start, size, offset in the allocation, protection).
    fn mappings_of(&self, h: u64) -> Vec<(usize, usize, u64, i32)> {
        let of = |(&s, m): (&usize, &MemMapRecord)| (s, m.size, m.offset, prot_bits(m.prot()));
        self.reservations
            .values()
            .flat_map(|r| r.mappings.iter().filter(|(_, m)| m.handle == h).map(of))
            .collect()
    }
}

/// What a binding needs, checked.
struct BindPlan {
    device: usize,
    mc_fd: RawFd,
}

impl Core {
    /// `cuMulticastCreate`: an object for a team of `num_devices` devices and `size` bytes
    /// per device (a multiple of [`GRANULARITY`]), exportable as `handle_types` (0 or
    /// [`HANDLE_TYPE_POSIX_FD`]); returns its handle.
    pub fn mcast_create(&self, num_devices: u32, size: u64, handle_types: u32) -> Result<u64> {
        if num_devices == 0 {
            return Err(invalid("cuMulticastCreate with numDevices 0".into()));
        }
        if size == 0 {
            return Err(invalid("cuMulticastCreate of 0 bytes".into()));
        }
        check_granular("cuMulticastCreate size", size)?;
        if handle_types & !HANDLE_TYPE_POSIX_FD != 0 {
            return Err(CoreError::NotSupported(
                "shareable handle types other than POSIX file descriptors",
            ));
        }
        let header = Header {
            magic: MAGIC,
            size,
            num_devices,
            owner_pid: std::process::id(),
            ..Header::default()
        };
        // SAFETY: `Header` is plain `repr(C)` data without padding.
        let fd = sealed_memfd(MEMFD_PREFIX, unsafe { as_bytes(&header) }, size)?;
        self.insert_team(fd, size, num_devices, handle_types, false)
    }

    fn insert_team(
        &self,
        fd: OwnedFd,
        size: u64,
        num_devices: u32,
        handle_types: u32,
        imported: bool,
    ) -> Result<u64> {
        let shared = Arc::new(SharedPage::map(fd.as_raw_fd())?);
        Ok(self.lock().vmm.insert(Physical {
            fd,
            // Until a device of this process joins (the device its mappings count on).
            device: 0,
            size,
            handle_types,
            imported,
            refs: 1,
            mappings: 0,
            committed: false,
            multicast: Some(Box::new(Team {
                shared,
                num_devices,
                local: BTreeSet::new(),
            })),
            bound: Vec::new(),
        }))
    }

    /// `cuMemImportFromShareableHandle` of a multicast object's descriptor `fd` (its name
    /// already checked): a handle on it, once its header, seals and size match.
    pub(super) fn mcast_import(&self, fd: RawFd) -> Result<u64> {
        let refuse = |why: &str| {
            CoreError::InvalidIpcHandle(format!(
                "descriptor {fd} is not a multicast object exported with \
                 cuMemExportToShareableHandle: {why}"
            ))
        };
        let mut h = Header::default();
        let hlen = std::mem::size_of::<Header>();
        // SAFETY: `h` is a plain `repr(C)` value of `hlen` bytes; any bytes are a valid Header.
        let n = unsafe { libc::pread(fd, (&mut h as *mut Header).cast(), hlen, 0) };
        // SAFETY: F_GET_SEALS on a descriptor of the caller; no memory is passed.
        let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
        // SAFETY: `libc::stat` is plain C data; all zeroes is a valid value.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-pointer.
        let len = (unsafe { libc::fstat(fd, &mut stat) } == 0)
            .then(|| u64::try_from(stat.st_size).ok())
            .flatten();
        if n != hlen as isize
            || h.magic != MAGIC
            || seals & SEALS != SEALS
            || h.size == 0
            || h.size % GRANULARITY != 0
            || h.num_devices == 0
            || len != h.size.checked_add(HEADER_BYTES)
        {
            return Err(refuse("header, size or seals do not match"));
        }
        // SAFETY: duplicating a descriptor the caller holds; the copy is ours.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(CoreError::last_os("fcntl(F_DUPFD_CLOEXEC)"));
        }
        // SAFETY: a fresh descriptor we own.
        let own = unsafe { OwnedFd::from_raw_fd(dup) };
        self.insert_team(own, h.size, h.num_devices, HANDLE_TYPE_POSIX_FD, true)
    }

    /// `cuMulticastAddDevice`: visible device `ordinal` joins the team of object `mc`. Refused
    /// when the device joined already (from this process) or the team is complete (memory may
    /// be bound by then).
    pub fn mcast_add_device(&self, mc: u64, ordinal: i32) -> Result<()> {
        let phys = self.physical(ordinal)?;
        let mut st = self.lock();
        let (_, team) = st.vmm.team(mc)?;
        if team.local.contains(&phys) {
            return Err(invalid(format!(
                "device {ordinal} was already added to multicast object {mc}"
            )));
        }
        let n = team.num_devices;
        team.shared
            .added()
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| {
                (a < n).then_some(a + 1)
            })
            .map_err(|_| {
                invalid(format!(
                    "multicast object {mc}: all {n} devices of its team were added already \
                     (numDevices); memory may be bound to it"
                ))
            })?;
        let p = st.vmm.handles.get_mut(&mc).expect("checked");
        let team = p.multicast.as_mut().expect("checked");
        if team.local.is_empty() {
            p.device = phys;
        }
        team.local.insert(phys);
        Ok(())
    }

    /// Waits until every device of `handle`'s team was added, if it is a multicast object
    /// (bounded by `Config::team_wait`, [`TEAM_WAIT`] unless a test sets it).
    pub(super) fn wait_for_team(&self, handle: u64) -> Result<()> {
        let (shared, n) = {
            let st = self.lock();
            match st
                .vmm
                .handles
                .get(&handle)
                .and_then(|p| p.multicast.as_deref())
            {
                Some(t) => (t.shared.clone(), t.num_devices),
                None => return Ok(()),
            }
        };
        let start = Instant::now();
        let mut pause = Duration::from_micros(100);
        loop {
            let added = shared.added().load(Ordering::Acquire);
            if added >= n {
                return Ok(());
            }
            if start.elapsed() > self.config.team_wait {
                return Err(invalid(format!(
                    "multicast object {handle}: {added} of its {n} devices were added after \
                     {:.1}s of waiting (cuMulticastAddDevice missing in a process of the team)",
                    self.config.team_wait.as_secs_f64()
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// Checks a binding of `size` bytes of allocation `mem` from `mem_offset` to object `mc`
    /// at `mc_offset`.
    fn bind_plan(
        st: &crate::State,
        mc: u64,
        mc_offset: u64,
        mem: u64,
        mem_offset: u64,
        size: u64,
    ) -> Result<BindPlan> {
        let (m, team) = st.vmm.team(mc)?;
        let p = st.vmm.handle(mem)?;
        if p.multicast.is_some() {
            return Err(invalid(format!(
                "handle {mem} is a multicast object, not memory to bind"
            )));
        }
        if size == 0 {
            return Err(invalid("cuMulticastBindMem of 0 bytes".into()));
        }
        for (what, v) in [
            ("size", size),
            ("memOffset", mem_offset),
            ("mcOffset", mc_offset),
        ] {
            check_granular(&format!("cuMulticastBindMem {what}"), v)?;
        }
        let (mem_end, mc_end) = (mem_offset.checked_add(size), mc_offset.checked_add(size));
        if mem_end.is_none_or(|e| e > p.size) || mc_end.is_none_or(|e| e > m.size) {
            return Err(invalid(format!(
                "cuMulticastBindMem of {size:#x} bytes at memOffset {mem_offset:#x} of a \
                 {:#x}-byte allocation, mcOffset {mc_offset:#x} of a {:#x}-byte multicast \
                 object: beyond one of them",
                p.size, m.size
            )));
        }
        if !team.local.contains(&p.device) {
            return Err(invalid(format!(
                "the allocation is on physical device {}, which this process did not add to \
                 multicast object {mc} (cuMulticastAddDevice)",
                p.device
            )));
        }
        if p.bound
            .iter()
            .any(|o| overlap(mem_offset, size, o.mem_offset, o.size).is_some())
        {
            return Err(invalid(format!(
                "part of allocation {mem} from {mem_offset:#x} is bound already"
            )));
        }
        let taken = st.vmm.handles.values().flat_map(|q| &q.bound).any(|o| {
            o.mc == mc
                && o.device == p.device
                && overlap(mc_offset, size, o.mc_offset, o.size).is_some()
        });
        if taken {
            return Err(invalid(format!(
                "multicast object {mc} has memory of physical device {} bound in \
                 [{mc_offset:#x}, +{size:#x}) already",
                p.device
            )));
        }
        Ok(BindPlan {
            device: p.device,
            mc_fd: m.fd.as_raw_fd(),
        })
    }

    /// `cuMulticastBindMem`: binds `size` bytes of allocation `mem` from `mem_offset` to
    /// object `mc` at `mc_offset`, once the team is complete. From then on the bound range of
    /// every mapping of `mem` in this process shows the object's pages.
    pub fn mcast_bind_mem(
        &self,
        mc: u64,
        mc_offset: u64,
        mem: u64,
        mem_offset: u64,
        size: u64,
    ) -> Result<()> {
        // Checked before waiting, so misuse fails at once, and again after.
        Self::bind_plan(&self.lock(), mc, mc_offset, mem, mem_offset, size)?;
        self.wait_for_team(mc)?;
        let mut st = self.lock();
        let plan = Self::bind_plan(&st, mc, mc_offset, mem, mem_offset, size)?;
        let committed = self.committed_bytes(&st);
        crate::backing::check(size, committed, self.config.host_memory)?;
        crate::backing::fallocate(plan.mc_fd, HEADER_BYTES + mc_offset, size)?;
        // SAFETY: duplicating the object's descriptor; the copy is the overlay's.
        let dup = unsafe { libc::fcntl(plan.mc_fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(CoreError::last_os("fcntl(F_DUPFD_CLOEXEC)"));
        }
        let overlay = Overlay {
            mc,
            device: plan.device,
            mem_offset,
            mc_offset,
            size,
            // SAFETY: a fresh descriptor we own.
            file: unsafe { OwnedFd::from_raw_fd(dup) },
        };
        let maps = st.vmm.mappings_of(mem);
        let p = st.vmm.handles.get_mut(&mem).expect("checked");
        p.bound.push(overlay);
        let p = &*p;
        for (start, len, offset, prot) in maps {
            map_bound(p, start, len, offset, prot)?;
        }
        Ok(())
    }

    /// `cuMulticastBindAddr`: [`Core::mcast_bind_mem`] of the allocation mapped at `ptr`.
    pub fn mcast_bind_addr(&self, mc: u64, mc_offset: u64, ptr: usize, size: u64) -> Result<()> {
        check_granular("cuMulticastBindAddr address", ptr as u64)?;
        let (mem, mem_offset) = {
            let st = self.lock();
            let (_, _, ms, m) = st.vmm.mapping_at(ptr).ok_or(CoreError::InvalidPointer {
                ptr,
                len: size as usize,
                why: "not inside a mapping made by cuMemMap",
            })?;
            if ((ptr - ms) as u64)
                .checked_add(size)
                .is_none_or(|end| end > m.size as u64)
            {
                return Err(CoreError::InvalidPointer {
                    ptr,
                    len: size as usize,
                    why: "runs past the mapping made by cuMemMap",
                });
            }
            (m.handle, m.offset + (ptr - ms) as u64)
        };
        self.mcast_bind_mem(mc, mc_offset, mem, mem_offset, size)
    }

    /// `cuMulticastUnbind`: unbinds the memory of visible device `ordinal` bound to object
    /// `mc` in `[mc_offset, mc_offset + size)` (whole bindings). The allocations keep the
    /// bytes last written through the object and show their own pages again.
    pub fn mcast_unbind(&self, mc: u64, ordinal: i32, mc_offset: u64, size: u64) -> Result<()> {
        let phys = self.physical(ordinal)?;
        check_granular("cuMulticastUnbind size", size)?;
        check_granular("cuMulticastUnbind mcOffset", mc_offset)?;
        let mut st = self.lock();
        let (m, _) = st.vmm.team(mc)?;
        if size == 0 || mc_offset.checked_add(size).is_none_or(|e| e > m.size) {
            return Err(invalid(format!(
                "cuMulticastUnbind of {size:#x} bytes at {mc_offset:#x} of a {:#x}-byte \
                 multicast object",
                m.size
            )));
        }
        let hit = |o: &Overlay| o.mc == mc && o.device == phys;
        let mut undo = Vec::new();
        for (&h, p) in &st.vmm.handles {
            for (i, o) in p.bound.iter().enumerate().filter(|(_, o)| hit(o)) {
                match overlap(mc_offset, size, o.mc_offset, o.size) {
                    Some((lo, hi)) if lo == o.mc_offset && hi == o.mc_offset + o.size => {
                        undo.push((h, i))
                    }
                    Some(_) => {
                        return Err(invalid(format!(
                            "cuMulticastUnbind of [{mc_offset:#x}, +{size:#x}) cuts the \
                             binding at [{:#x}, +{:#x})",
                            o.mc_offset, o.size
                        )))
                    }
                    None => {}
                }
            }
        }
        // Last first, so the indices stay valid.
        undo.sort_unstable_by(|a, b| b.cmp(a));
        for (h, i) in undo {
            let maps = st.vmm.mappings_of(h);
            let p = st.vmm.handles.get_mut(&h).expect("listed");
            let o = p.bound.remove(i);
            copy_back(&o, p.fd.as_raw_fd())?;
            for (start, len, offset, prot) in maps {
                let at = HEADER_BYTES + o.mem_offset;
                remap_part(start, len, offset, &o, prot, p.fd.as_raw_fd(), at)?;
            }
            st.vmm.reap(mc);
        }
        Ok(())
    }
}

/// Copies the bytes of a binding from the object's file into the allocation's file `to`.
fn copy_back(o: &Overlay, to: RawFd) -> Result<()> {
    let mut from_at = (HEADER_BYTES + o.mc_offset) as libc::loff_t;
    let mut to_at = (HEADER_BYTES + o.mem_offset) as libc::loff_t;
    let mut left = o.size as usize;
    while left > 0 {
        // SAFETY: two descriptors this process owns and in-out offsets of its own.
        let n = unsafe {
            libc::copy_file_range(o.file.as_raw_fd(), &mut from_at, to, &mut to_at, left, 0)
        };
        if n <= 0 {
            return Err(CoreError::last_os("copy_file_range"));
        }
        left -= n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
