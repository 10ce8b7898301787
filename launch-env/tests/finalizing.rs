//! `pthread_exit` during Python's finalization (`tests/cxx/finalizing.cc`, built with the
//! system's C++ compiler): without `libncclsim_launch.so` the program aborts with "terminate
//! called without an active exception", as torch processes did at exit when a daemon thread
//! was inside an op; preloaded, the thread is parked and the program exits normally, and a
//! `pthread_exit` outside finalization still ends its thread with its value.

use std::path::PathBuf;
use std::process::Command;

/// The built `libncclsim_launch.so` (beside this test's executable, or one directory up).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let deps = exe.parent().expect("deps directory");
    [deps.to_path_buf(), deps.join("..")]
        .into_iter()
        .map(|d| d.join("libncclsim_launch.so"))
        .find(|p| p.exists())
        .expect("libncclsim_launch.so built beside the tests")
}

fn program() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("finalizing");
    let status = Command::new(std::env::var("CXX").unwrap_or_else(|_| "c++".into()))
        .args(["-O1", "-pthread", "-rdynamic", "-o"])
        .arg(&out)
        .arg(here.join("tests/cxx/finalizing.cc"))
        .status()
        .expect("run the C++ compiler");
    assert!(status.success(), "compiling finalizing.cc: {status}");
    out
}

#[test]
fn threads_ended_while_python_finalizes_are_parked_not_terminated() {
    let exe = program();
    let bare = Command::new(&exe).output().unwrap();
    let stderr = String::from_utf8_lossy(&bare.stderr);
    assert!(
        !bare.status.success() && stderr.contains("terminate called"),
        "without the interposer the program should abort: {} {stderr}",
        bare.status
    );
    let run = |mode: &str| {
        Command::new(&exe)
            .arg(mode)
            .env("LD_PRELOAD", library())
            .output()
            .unwrap()
    };
    let parked = run("finalizing");
    assert!(
        parked.status.success(),
        "{}: {}",
        parked.status,
        String::from_utf8_lossy(&parked.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&parked.stdout), "exit\n");
    let plain = run("plain");
    assert!(plain.status.success(), "{}", plain.status);
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "joined 42\n");
}
