//! Address ranges the core gave out as device memory and took back.
//!
//! When `cudaDeviceReset` drops an arena or `cudaIpcCloseMemHandle` drops an import, the core
//! does not unmap the addresses: it replaces the mapping with an inaccessible, unbacked
//! reservation ([`reserve_in_place`]) and remembers the range in [`Retired`]. A stale pointer
//! into it is then recognised (copies fail with an error naming why) instead of being taken
//! for host memory and faulting, and the kernel cannot give the addresses to another mapping
//! that a stale pointer would silently hit.
//!
//! Reservations cost only address space. Past [`RETIRED_LIMIT`] bytes the oldest are released.

use crate::error::{CoreError, Result};
use std::collections::{BTreeMap, VecDeque};

/// Most bytes of address space kept reserved for retired ranges (16 TiB of the 128 TiB user
/// address space of x86-64; a reset 80 GiB arena retires 80 GiB).
pub const RETIRED_LIMIT: usize = 16 << 40;

/// Replaces the pages at `[addr, addr + len)` with an inaccessible reservation (no memory, no
/// file). Returns false if the kernel refused (the old mapping then stays as it was).
///
/// # Safety
/// The range must be a mapping this process owns and no longer uses through any reference.
pub unsafe fn reserve_in_place(addr: usize, len: usize) -> bool {
    // SAFETY: MAP_FIXED over a range the caller owns; nothing else refers to its contents.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    p != libc::MAP_FAILED
}

/// Maps `len` inaccessible bytes at an address aligned to `align` (a power of two), at `hint`
/// if that is free and aligned: a `cuMemAddressReserve` range.
pub fn reserve_aligned(len: usize, align: usize, hint: usize) -> Result<usize> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    if hint != 0 && hint % align == 0 {
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
        let p = unsafe {
            libc::mmap(
                hint as *mut libc::c_void,
                len,
                libc::PROT_NONE,
                flags | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p as usize == hint {
            return Ok(hint);
        }
        if p != libc::MAP_FAILED {
            // An old kernel ignoring the flag placed it elsewhere.
            // SAFETY: the mapping just made, unused.
            unsafe { libc::munmap(p, len) };
        }
    }
    let total = len.checked_add(align).ok_or_else(|| {
        CoreError::InvalidValue(format!("reservation of {len:#x} bytes overflows"))
    })?;
    // SAFETY: a new anonymous mapping; the kernel picks the address.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), total, libc::PROT_NONE, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(CoreError::host_mapping_refused(len as u64));
    }
    let p = p as usize;
    let start = p.next_multiple_of(align);
    // SAFETY: trimming the unaligned head and the tail of the mapping just made.
    unsafe {
        if start > p {
            libc::munmap(p as *mut libc::c_void, start - p);
        }
        let tail = p + total - (start + len);
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
    }
    Ok(start)
}

/// The retired ranges of a process.
#[derive(Debug, Default)]
pub struct Retired {
    /// Start -> (length, what retired it).
    ranges: BTreeMap<usize, (usize, &'static str)>,
    /// Starts, oldest first.
    order: VecDeque<usize>,
    total: usize,
}

impl Retired {
    /// Records a range reserved with [`reserve_in_place`]; `why` says what retired it.
    pub fn add(&mut self, start: usize, len: usize, why: &'static str) {
        if self.ranges.insert(start, (len, why)).is_none() {
            self.order.push_back(start);
            self.total += len;
        }
        while self.total > RETIRED_LIMIT {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some((l, _)) = self.ranges.remove(&old) {
                self.total -= l;
                // SAFETY: the reservation is ours and holds nothing.
                unsafe { libc::munmap(old as *mut libc::c_void, l) };
            }
        }
    }

    /// Why `[ptr, ptr + len)` touches a retired range, if it does.
    pub fn overlapping(&self, ptr: usize, len: usize) -> Option<&'static str> {
        let end = ptr.saturating_add(len.max(1));
        // Ranges do not overlap each other, so only the last one starting before `end` can
        // reach `ptr`.
        let (&start, &(l, why)) = self.ranges.range(..end).next_back()?;
        (start + l > ptr).then_some(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ranges_are_found_and_inaccessible() {
        let len = 1 << 20;
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as usize;
        // SAFETY: ours, unused afterwards.
        assert!(unsafe { reserve_in_place(p, len) });
        let mut r = Retired::default();
        r.add(p, len, "test");
        assert_eq!(r.overlapping(p + 10, 4), Some("test"));
        assert_eq!(
            r.overlapping(p - 8, 16),
            Some("test"),
            "a range running into it"
        );
        assert_eq!(r.overlapping(p + len, 4), None);
        assert_eq!(r.overlapping(p - 8, 8), None);
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps
            .lines()
            .find(|l| l.starts_with(&format!("{p:x}-")))
            .expect("the reservation is still mapped");
        assert!(line.contains(" ---p "), "{line}");
        // SAFETY: our reservation.
        unsafe { libc::munmap(p as *mut libc::c_void, len) };
    }
}
