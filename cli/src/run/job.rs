//! The job directory of an `ncclsim run`: where each process's fake CUDA core links its
//! telemetry record (`fake_cuda_abi::telemetry`), so that NVML in any process of the job
//! (`nvidia-smi`, a monitor) sees the memory and utilization of all of them.
//!
//! It lives on `/dev/shm` (else the temporary directory), readable by its owner only, and is
//! removed when the launcher ends, or by the watcher (`watch`) when the launcher was killed.
//! Should both be killed, the next `ncclsim run` removes directories whose launcher has exited.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

const PREFIX: &str = "ncclsim-job-";

/// A job directory, removed on drop.
pub struct JobDir {
    path: PathBuf,
}

fn base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks the process; EPERM still means it exists.
    let sent = unsafe { libc::kill(pid, 0) } == 0;
    sent || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Removes the job directories under `base` whose launcher (the pid in the name) has exited.
fn sweep(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid > 0 && !alive(pid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl JobDir {
    /// Makes a fresh job directory, first removing those of exited launchers.
    pub fn create() -> Result<JobDir, String> {
        let base = base();
        sweep(&base);
        let pid = std::process::id();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = base.join(format!("{PREFIX}{pid}-{nanos:09}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| format!("cannot make the job directory {}: {e}", path.display()))?;
        Ok(JobDir { path })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for JobDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_of_exited_launchers_are_swept_and_own_one_removed_on_drop() {
        let base = std::env::temp_dir().join(format!("ncclsim-sweep-test-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        // A pid that cannot exist (above the kernel's pid_max limit of 2^22).
        let stale = base.join(format!("{PREFIX}{}-1", (1 << 22) + 1));
        let live = base.join(format!("{PREFIX}{}-2", std::process::id()));
        let other = base.join("unrelated");
        for d in [&stale, &live, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::os::unix::fs::symlink("/proc/1/fd/999", stale.join("123")).unwrap();
        sweep(&base);
        assert!(!stale.exists() && live.is_dir() && other.is_dir());
        std::fs::remove_dir_all(&base).unwrap();
        let job = JobDir::create().unwrap();
        let p = job.path().to_path_buf();
        assert!(p.is_dir());
        drop(job);
        assert!(!p.exists());
    }
}
