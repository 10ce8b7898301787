//! Stand-ins for the NVIDIA libraries a torch build links (cuDNN, cuFFT, cuSPARSE, ...), made
//! on first use for torch programs.
//!
//! A torch installed without NVIDIA's wheels (`pip install torch --no-deps`) cannot even be
//! imported: its shared objects name those libraries as DT_NEEDED. `ncclsim run` finds the
//! Python interpreter the command starts (`python ...`, `torchrun`, or either after a
//! launcher's options), asks it where torch's `lib/` is, and when that torch has CUDA
//! (`libtorch_cuda.so`) runs the Python package's generator (`ncclsim.stubs`) once per torch
//! build: the stand-ins go to `<cache>/ncclsim/torch-stubs-<hash>/` (the hash covers the
//! directory and `libtorch_cuda.so`'s size and modification time) and on the loader's path after
//! ncclsim's own libraries. torch's RPATH is searched first, so NVIDIA's libraries win where they
//! are installed. A failure to make them is reported and the run goes on without them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the user's cache of made files is.
fn cache_base() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("ncclsim")
}

/// `name` as the shell would find it (a path as is, else the first match on `PATH`).
fn which(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The interpreter of a `#!` script (`torchrun`'s first line).
fn shebang(script: &Path) -> Option<PathBuf> {
    let text = std::fs::read(script).ok()?;
    let first = text.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(first).ok()?.strip_prefix("#!")?;
    let mut words = line.split_whitespace();
    let prog = words.next()?;
    if prog.ends_with("/env") {
        return which(words.next()?);
    }
    Some(PathBuf::from(prog))
}

/// The Python interpreter the command runs, if it runs one: its first word that is a Python
/// interpreter or torchrun.
pub fn interpreter(command: &[String]) -> Option<PathBuf> {
    for word in command {
        let Some(base) = Path::new(word).file_name() else {
            continue;
        };
        let base = base.to_string_lossy();
        let is_python = base
            .strip_prefix("python")
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'));
        if is_python {
            return which(word);
        }
        if base == "torchrun" {
            return shebang(&which(word)?);
        }
    }
    None
}

const FIND_TORCH: &str = "import importlib.util as u, os\n\
s = u.find_spec('torch')\n\
print(os.path.join(os.path.dirname(s.origin), 'lib') if s and s.origin else '')";

/// The stand-ins for the torch `python` imports (made if missing), or `None` when it has no
/// torch with CUDA. `package` is the directory holding the Python package `ncclsim`.
pub fn for_python(python: &Path, package: &Path) -> Result<Option<PathBuf>, String> {
    let out = Command::new(python)
        .args(["-c", FIND_TORCH])
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let lib = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || lib.is_empty() {
        return Ok(None);
    }
    let lib = PathBuf::from(lib);
    let Ok(meta) = std::fs::metadata(lib.join("libtorch_cuda.so")) else {
        return Ok(None);
    };
    let key = {
        use std::os::unix::fs::MetadataExt;
        let path = lib.to_string_lossy();
        topo::hash::fnv1a_parts(
            topo::hash::FNV1A_BASIS,
            [
                path.as_bytes(),
                &meta.size().to_ne_bytes(),
                &meta.mtime().to_ne_bytes(),
                &meta.mtime_nsec().to_ne_bytes(),
            ],
        )
    };
    let base = cache_base();
    let dir = base.join(format!("torch-stubs-{key:016x}"));
    if dir.join(".complete").is_file() {
        return Ok(Some(dir));
    }
    std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    let tmp = base.join(format!(".torch-stubs-{}-{key:016x}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!(
        "ncclsim run: making stand-ins for the NVIDIA libraries torch links ({}; once per torch \
         build) in {}",
        lib.display(),
        dir.display()
    );
    let made = Command::new(python)
        .args(["-m", "ncclsim.stubs"])
        .arg(&lib)
        .arg(&tmp)
        .env("PYTHONPATH", package)
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    if !made.status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(format!(
            "making them failed ({}):\n{}",
            made.status,
            String::from_utf8_lossy(&made.stderr).trim()
        ));
    }
    let done =
        std::fs::write(tmp.join(".complete"), b"").and_then(|()| std::fs::rename(&tmp, &dir));
    if let Err(e) = done {
        let _ = std::fs::remove_dir_all(&tmp);
        // Another run may have renamed its copy into place first.
        if !dir.join(".complete").is_file() {
            return Err(format!("{}: {e}", dir.display()));
        }
    }
    Ok(Some(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreters_of_torch_commands() {
        let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(
            interpreter(&words("/usr/bin/python3.11 train.py")),
            Some(PathBuf::from("/usr/bin/python3.11"))
        );
        assert_eq!(interpreter(&words("./all_reduce_perf -g 8")), None);
        assert_eq!(interpreter(&words("python-config --libs")), None);
        let dir = std::env::temp_dir().join(format!("ncclsim-shebang-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("torchrun");
        std::fs::write(&script, "#!/opt/venv/bin/python3\nimport sys\n").unwrap();
        let cmd = vec![
            "mpirun".to_string(),
            "-np".into(),
            "2".into(),
            script.display().to_string(),
        ];
        assert_eq!(
            interpreter(&cmd),
            Some(PathBuf::from("/opt/venv/bin/python3"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
