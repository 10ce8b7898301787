//! The Python package `ncclsim` (`python/` at the repository root, embedded at build time),
//! written out for `ncclsim run` to put first on the program's `PYTHONPATH`.
//!
//! The package's `dist-info` declares an entry point in torch's `torch.backends` group, which
//! `import torch` loads once torch is imported: torch ops on CUDA tensors then compute on the
//! CPU over the simulated device memory (`NCCLSIM_COMPUTE`). Non-torch programs never load it.
//!
//! The files go to a directory named by a hash of their contents under the user's cache
//! (`$XDG_CACHE_HOME/ncclsim`, else `~/.cache/ncclsim`, else the temporary directory), written
//! once and renamed into place, so concurrent runs share it and nothing is left per run.

use std::path::{Path, PathBuf};

mod files {
    include!(concat!(env!("OUT_DIR"), "/python_files.rs"));
}

/// A 64-bit FNV-1a hash of every file's path and contents.
fn digest() -> u64 {
    let parts = files::FILES
        .iter()
        .flat_map(|(path, text)| [path.as_bytes(), &[0], text.as_bytes(), &[0]]);
    topo::hash::fnv1a_parts(topo::hash::FNV1A_BASIS, parts)
}

fn cache_base() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("ncclsim")
}

fn write_all(dir: &Path) -> std::io::Result<()> {
    for (path, text) in files::FILES {
        let p = dir.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, text)?;
    }
    Ok(())
}

/// The directory holding the package (made if missing).
pub fn package_dir() -> Result<PathBuf, String> {
    let base = cache_base();
    let dir = base.join(format!("python-{:016x}", digest()));
    if dir.join("ncclsim/__init__.py").is_file() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    let tmp = base.join(format!(".python-{}-{:016x}", std::process::id(), digest()));
    let _ = std::fs::remove_dir_all(&tmp);
    let made = write_all(&tmp).and_then(|()| std::fs::rename(&tmp, &dir));
    if let Err(e) = made {
        let _ = std::fs::remove_dir_all(&tmp);
        // Another run may have renamed its copy into place first.
        if !dir.join("ncclsim/__init__.py").is_file() {
            return Err(format!(
                "cannot write the Python package to {}: {e}",
                dir.display()
            ));
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    #[test]
    fn embeds_the_package_and_its_entry_point() {
        let names: Vec<&str> = super::files::FILES.iter().map(|(p, _)| *p).collect();
        assert!(names.contains(&"ncclsim/__init__.py"), "{names:?}");
        assert!(names.contains(&"ncclsim/compute/kernels.py"), "{names:?}");
        let entry = super::files::FILES
            .iter()
            .find(|(p, _)| p.ends_with("entry_points.txt"))
            .expect("a dist-info entry point");
        assert!(entry.1.contains("[torch.backends]") && entry.1.contains("ncclsim._autoload:load"));
    }
}
