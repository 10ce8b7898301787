//! One core per process: detecting a second copy of `libncclsim_cuda.so`.
//!
//! Front-ends find an already-loaded core by its SONAME first, so two cores only happen when a
//! program loads two different files by path (e.g. with `dlopen`). Each copy would hold its
//! own devices and allocations, and one's device pointers would be unknown to the other, so a
//! core that finds another copy mapped refuses to start.

use std::ffi::{c_void, CStr};
use std::os::unix::fs::MetadataExt;

/// File name of the core (and the start of its SONAME).
const CORE_FILE: &str = "libncclsim_cuda.so";

/// The file this code was loaded from, as `dladdr` names it.
fn own_file() -> Option<String> {
    // SAFETY: all-zero is a valid Dl_info to be filled in.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `own_file` is code of this object; `info` is a valid out-parameter.
    let found = unsafe { libc::dladdr(own_file as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    Some(
        // SAFETY: dladdr filled a NUL-terminated file name.
        unsafe { CStr::from_ptr(info.dli_fname) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Other files named `libncclsim_cuda.so` mapped into this process (by inode), as paths.
pub fn other_cores() -> Vec<String> {
    let Some(own) = own_file() else {
        return Vec::new();
    };
    let Ok(own_inode) = std::fs::metadata(&own).map(|m| m.ino()) else {
        return Vec::new();
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut others: Vec<String> = maps
        .lines()
        .filter_map(|line| {
            // address perms offset dev inode path
            let mut f = line.split_whitespace();
            let inode: u64 = f.nth(4)?.parse().ok()?;
            let path = f.next()?;
            let name = std::path::Path::new(path).file_name()?.to_str()?;
            (name == CORE_FILE && inode != own_inode).then(|| path.to_string())
        })
        .collect();
    others.sort();
    others.dedup();
    others
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_binary_maps_no_core_file() {
        // The unit tests link the core as an rlib, so no libncclsim_cuda.so is mapped.
        assert!(other_cores().is_empty());
    }
}
