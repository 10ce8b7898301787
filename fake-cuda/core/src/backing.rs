//! Host memory behind device memory: how much the host can still back, and committing pages
//! before they are touched.
//!
//! Device memory lives in memfds mapped `MAP_NORESERVE`, so an allocation costs nothing until
//! its pages are touched, and a touch the host cannot back is not an error the program sees:
//! the kernel's OOM killer ends the process (in a memory cgroup even `fallocate` on the memfd
//! invokes it rather than failing). So before the core lets pages be touched it commits them
//! here: it compares the bytes not yet committed with what the host has left — the lowest of
//! `memory.max - memory.current` over the process's cgroup v2 and its ancestors (cgroup v1:
//! `hierarchical_memory_limit - memory.usage_in_bytes`), `MemAvailable` of `/proc/meminfo` and
//! `NCCLSIM_HOST_MEMORY` (bytes this process's device memory may commit) — less a reserve
//! for the process itself, and refuses with [`CoreError::HostMemory`] (`cudaErrorMemoryAllocation`)
//! when they do not fit; otherwise it `fallocate`s them, so they count in the cgroup's usage and
//! the machine's `MemAvailable` at the next check.
//!
//! The check is not atomic with other processes' allocations: two processes committing at once
//! can each see the same free memory. It turns the usual case (a job asking for more than the
//! host has) into an error, not every race.

use crate::error::{CoreError, Result};

/// Kept free for the process's own growth (its heap, stacks, libraries) beyond committed
/// device memory.
pub const RESERVE: u64 = 64 << 20;

/// Bytes the host can still back and what limits them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Available {
    /// Bytes.
    pub bytes: u64,
    /// What sets the limit (a file or variable name).
    pub source: String,
}

impl Available {
    fn min(self, other: Available) -> Available {
        if other.bytes < self.bytes {
            other
        } else {
            self
        }
    }
}

/// What the host can still back now: the machine's `MemAvailable` and the limits of the
/// process's memory cgroups, the lowest of them.
pub fn host_available() -> Available {
    let mut best = Available {
        bytes: u64::MAX,
        source: "no limit found".into(),
    };
    if let Some(kib) = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| meminfo_field(&s, "MemAvailable:"))
    {
        best = best.min(Available {
            bytes: kib.saturating_mul(1024),
            source: "MemAvailable in /proc/meminfo".into(),
        });
    }
    if let Ok(cgroups) = std::fs::read_to_string("/proc/self/cgroup") {
        for a in cgroup_limits(&cgroups, std::path::Path::new("/sys/fs/cgroup")) {
            best = best.min(a);
        }
    }
    best
}

/// A `/proc/meminfo` field in KiB.
fn meminfo_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

fn read_u64(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The memory left under each cgroup limit of the process (`/proc/self/cgroup` text, cgroup
/// file systems under `root`): cgroup v2's `memory.max` of its group and every ancestor, cgroup
/// v1's hierarchical limit.
pub fn cgroup_limits(proc_cgroup: &str, root: &std::path::Path) -> Vec<Available> {
    let mut out = Vec::new();
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            // cgroup v2: walk from the group up to the root.
            let mut dir = root.join(rel);
            loop {
                let max = std::fs::read_to_string(dir.join("memory.max")).ok();
                let limit = max.and_then(|m| m.trim().parse::<u64>().ok());
                if let (Some(limit), Some(current)) = (limit, read_u64(&dir.join("memory.current")))
                {
                    out.push(Available {
                        bytes: limit.saturating_sub(current),
                        source: format!("{}/memory.max", dir.display()),
                    });
                }
                if dir == root || !dir.pop() || !dir.starts_with(root) {
                    break;
                }
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            let dir = root.join("memory").join(rel);
            let limit = std::fs::read_to_string(dir.join("memory.stat"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("hierarchical_memory_limit "))
                        .and_then(|v| v.trim().parse::<u64>().ok())
                })
                .or_else(|| read_u64(&dir.join("memory.limit_in_bytes")));
            // An unlimited v1 group reads as a page-rounded i64::MAX.
            if let (Some(limit), Some(usage)) =
                (limit, read_u64(&dir.join("memory.usage_in_bytes")))
            {
                if limit < (1 << 62) {
                    out.push(Available {
                        bytes: limit.saturating_sub(usage),
                        source: format!("{}/memory.limit_in_bytes", dir.display()),
                    });
                }
            }
        }
    }
    out
}

/// Checks that `bytes` more can be committed, given `committed` bytes this process's device
/// memory already holds and the process's own limit (`NCCLSIM_HOST_MEMORY`), if any.
pub fn check(bytes: u64, committed: u64, process_limit: Option<u64>) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let mut avail = host_available();
    if let Some(limit) = process_limit {
        avail = avail.min(Available {
            bytes: limit.saturating_sub(committed).saturating_add(RESERVE),
            source: format!("NCCLSIM_HOST_MEMORY={limit}, {committed} bytes committed"),
        });
    }
    let usable = avail.bytes.saturating_sub(RESERVE);
    if bytes > usable {
        return Err(CoreError::HostMemory {
            requested: bytes,
            available: usable,
            limit: avail.source,
        });
    }
    Ok(())
}

/// Allocates the pages of `[offset, offset + len)` of memfd `fd` (already checked with
/// [`check`]).
pub fn fallocate(fd: i32, offset: u64, len: u64) -> Result<()> {
    // SAFETY: plain integer arguments on a descriptor the caller owns.
    let r = unsafe { libc::fallocate(fd, 0, offset as libc::off_t, len as libc::off_t) };
    if r != 0 {
        return Err(CoreError::last_os("fallocate"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_is_read_in_kib() {
        let text = "MemTotal:       24684084 kB\nMemAvailable:   22804716 kB\n";
        assert_eq!(meminfo_field(text, "MemAvailable:"), Some(22804716));
        assert_eq!(meminfo_field(text, "Shmem:"), None);
    }

    #[test]
    fn cgroup_v2_limits_walk_to_the_root_and_v1_reads_the_hierarchy() {
        let dir = std::env::temp_dir().join(format!("ncclsim-backing-{}", std::process::id()));
        let job = dir.join("user.slice/job");
        std::fs::create_dir_all(&job).unwrap();
        std::fs::write(job.join("memory.max"), "max\n").unwrap();
        std::fs::write(job.join("memory.current"), "100\n").unwrap();
        std::fs::write(dir.join("user.slice/memory.max"), "1000\n").unwrap();
        std::fs::write(dir.join("user.slice/memory.current"), "400\n").unwrap();
        let v1 = dir.join("memory/box");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(
            v1.join("memory.stat"),
            "cache 0\nhierarchical_memory_limit 5000\n",
        )
        .unwrap();
        std::fs::write(v1.join("memory.usage_in_bytes"), "1500\n").unwrap();
        let got = cgroup_limits("0::/user.slice/job\n4:memory:/box\n1:cpu:/x\n", &dir);
        let bytes: Vec<u64> = got.iter().map(|a| a.bytes).collect();
        assert_eq!(bytes, vec![600, 3500], "{got:?}");
        assert!(got[0].source.ends_with("user.slice/memory.max"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn more_than_the_host_has_is_refused() {
        let e = check(u64::MAX / 2, 0, None).unwrap_err();
        assert!(matches!(e, CoreError::HostMemory { .. }), "{e}");
        assert_eq!(e.cuda_code(), 2, "cudaErrorMemoryAllocation");
        check(1 << 20, 0, None).unwrap();
        check(1 << 20, 0, Some(2 << 20)).unwrap();
        check(1 << 20, 3 << 20, Some(4 << 20)).unwrap();
        let e = check(2 << 20, 3 << 20, Some(4 << 20)).unwrap_err();
        assert!(e.to_string().contains("NCCLSIM_HOST_MEMORY"), "{e}");
    }
}
