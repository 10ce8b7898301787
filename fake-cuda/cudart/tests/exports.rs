//! The built library exports exactly the names of the real CUDA 12.9 runtime and loads by its
//! real name from Python's `ctypes`.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;

fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().expect("deps directory").join("libcudart12.so")
}

fn listed_names() -> Vec<String> {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("symbols/cudart-12.9.txt");
    std::fs::read_to_string(list)
        .expect("read symbols/cudart-12.9.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

#[test]
fn every_listed_name_resolves() {
    let names = listed_names();
    assert_eq!(names.len(), 435, "the 12.9 list has 435 functions");
    let path = CString::new(built_library().to_string_lossy().as_bytes()).unwrap();
    // SAFETY: loading our own library; its initialisers do nothing.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {}", built_library().display());
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| {
            let c = CString::new(n.as_str()).unwrap();
            // SAFETY: valid handle and name.
            unsafe { libc::dlsym(h, c.as_ptr()) }.is_null()
        })
        .collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
}

#[test]
fn nothing_beyond_the_list_is_exported() {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(built_library())
        .output()
        .expect("run nm");
    assert!(out.status.success());
    let listed = listed_names();
    let extra: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .filter(|n| n != "libcudart.so.12" && !listed.contains(n))
        .collect();
    assert!(extra.is_empty(), "exported but not in the list: {extra:?}");
}

#[test]
fn python_ctypes_loads_it_by_its_real_name() {
    let dir = std::env::temp_dir().join(format!("ncclsim-ctypes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("libcudart.so.12");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(built_library(), &link).unwrap();
    let script = "import ctypes, sys\n\
                  lib = ctypes.CDLL('libcudart.so.12')\n\
                  n = ctypes.c_int(-1)\n\
                  rc = lib.cudaGetDeviceCount(ctypes.byref(n))\n\
                  print(rc, n.value)\n";
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .env("LD_LIBRARY_PATH", &dir)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .output()
        .expect("run python3");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.trim(), "0 8");
    let _ = std::fs::remove_dir_all(&dir);
}
