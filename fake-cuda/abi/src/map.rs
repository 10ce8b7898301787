//! Shared mappings of memory descriptors (a memfd, a device arena, a communicator's segment):
//! one owned `mmap` region, unmapped when dropped. The core maps its own and peers' arenas
//! with it and `nccl-shim` its communicators' segments.

use rustix::fs::{fchmod, ftruncate, memfd_create, MemfdFlags, Mode};
use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// What a mapping may do with its pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read only.
    Read,
    /// Read and write.
    ReadWrite,
}

/// A shared mapping of (part of) a descriptor's file, unmapped on drop. It keeps the
/// descriptor only when it created it ([`Mapping::memfd`]).
#[derive(Debug)]
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
    fd: Option<OwnedFd>,
}

// SAFETY: the mapping is plain shared memory owned by this value; what is stored in it is
// coordinated by its users (atomics in it, or their own locks), as for any shared memory.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` gives out only the address and atomics.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from byte `offset` (a multiple of the page size), shared:
    /// writes reach every other mapping of the file. `MAP_NORESERVE` is asked for, which for a
    /// shared mapping of a file changes nothing (its pages are accounted to the file).
    pub fn shared(fd: impl AsFd, offset: u64, len: usize, access: Access) -> io::Result<Mapping> {
        let prot = match access {
            Access::Read => ProtFlags::READ,
            Access::ReadWrite => ProtFlags::READ | ProtFlags::WRITE,
        };
        // SAFETY: a new shared mapping of a descriptor at an address the kernel picks; it
        // overlaps no existing memory.
        let p = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                prot,
                MapFlags::SHARED | MapFlags::NORESERVE,
                fd,
                offset,
            )
        }?;
        Ok(Mapping {
            ptr: p.cast(),
            len,
            fd: None,
        })
    }

    /// Creates a memfd named `name` of `len` zero bytes, mode 000 (only passed descriptors
    /// reach it, never a path under `/proc`), and maps it whole, read and write.
    pub fn memfd(name: &str, len: usize) -> io::Result<Mapping> {
        let cname = std::ffi::CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "memfd name with NUL"))?;
        let fd = memfd_create(&cname, MemfdFlags::CLOEXEC)?;
        fchmod(&fd, Mode::empty())?;
        ftruncate(&fd, len as u64)?;
        let mut m = Mapping::shared(&fd, 0, len, Access::ReadWrite)?;
        m.fd = Some(fd);
        Ok(m)
    }

    /// The descriptor of a mapping [`Mapping::memfd`] created.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// Start of the mapping.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Start of the mapping as an address.
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping has no bytes (never: `mmap` refuses empty mappings).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The atomic u32 at byte `offset`.
    ///
    /// # Panics
    /// When `offset` is not 4-byte aligned or the word does not lie inside the mapping.
    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: `AtomicU32` is a u32 word, valid for every bit pattern.
        unsafe { self.atomic_at(offset) }
    }

    /// The atomic u64 at byte `offset`.
    ///
    /// # Panics
    /// When `offset` is not 8-byte aligned or the word does not lie inside the mapping.
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `AtomicU64` is a u64 word, valid for every bit pattern.
        unsafe { self.atomic_at(offset) }
    }

    /// The `A` at byte `offset`, checked to be aligned and inside the mapping.
    ///
    /// # Safety
    /// `A` must be an atomic integer type (every bit pattern a valid value).
    unsafe fn atomic_at<A>(&self, offset: usize) -> &A {
        let size = std::mem::size_of::<A>();
        assert!(
            offset % size == 0 && offset.checked_add(size).is_some_and(|e| e <= self.len),
            "invariant: atomic inside the mapping"
        );
        // SAFETY: aligned (page-aligned start, offset checked against the atomic's size, which
        // is its alignment), inside the mapping, which lives as long as `&self`; shared memory
        // is only accessed atomically through this; any bit pattern is an `A` (the contract).
        unsafe { &*(self.ptr.add(offset) as *const A) }
    }

    /// Gives the pages up without unmapping them: returns (start, length), which the caller
    /// now owns (it replaced or will unmap them itself).
    pub fn into_raw(self) -> (usize, usize) {
        let m = std::mem::ManuallyDrop::new(self);
        // SAFETY: `m` is never dropped, so its descriptor is moved out exactly once.
        let fd = unsafe { std::ptr::read(&m.fd) };
        drop(fd);
        (m.ptr as usize, m.len)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `shared` mapped; no reference into it outlives `self`.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn two_mappings_of_one_memfd_share_their_pages() {
        let a = Mapping::memfd("ncclsim-map-test", 8192).unwrap();
        let fd = a.fd().unwrap().try_clone_to_owned().unwrap();
        let b = Mapping::shared(&fd, 4096, 4096, Access::ReadWrite).unwrap();
        a.atomic_u32(4096 + 8).store(0xfeed, Ordering::SeqCst);
        assert_eq!(b.atomic_u32(8).load(Ordering::SeqCst), 0xfeed);
        // A fresh memfd reads zero.
        assert_eq!(a.atomic_u32(0).load(Ordering::SeqCst), 0);
        assert_eq!((b.len(), b.fd().is_none()), (4096, true));
    }

    #[test]
    fn read_only_mappings_see_writes_and_empty_ones_are_refused() {
        let a = Mapping::memfd("ncclsim-map-test", 4096).unwrap();
        let fd = a.fd().unwrap().try_clone_to_owned().unwrap();
        let r = Mapping::shared(&fd, 0, 4096, Access::Read).unwrap();
        a.atomic_u32(12).store(3, Ordering::SeqCst);
        assert_eq!(r.atomic_u32(12).load(Ordering::SeqCst), 3);
        assert!(Mapping::shared(&fd, 0, 0, Access::Read).is_err());
    }

    #[test]
    #[should_panic(expected = "invariant: atomic inside the mapping")]
    fn an_atomic_past_the_end_is_refused() {
        let a = Mapping::memfd("ncclsim-map-test", 4096).unwrap();
        a.atomic_u32(4096);
    }

    #[test]
    fn into_raw_leaves_the_pages_mapped() {
        let a = Mapping::memfd("ncclsim-map-test", 4096).unwrap();
        a.atomic_u32(0).store(7, Ordering::SeqCst);
        let (addr, len) = a.into_raw();
        // SAFETY: the pages are still mapped (into_raw did not unmap them) and now ours.
        let v = unsafe { (*(addr as *const AtomicU32)).load(Ordering::SeqCst) };
        assert_eq!(v, 7);
        // SAFETY: unmapping the pages into_raw handed over.
        unsafe { munmap(addr as *mut _, len) }.unwrap();
    }
}
