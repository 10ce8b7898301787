//! The virtual memory management API from C (`c/vmm.c`), linked against `libcuda.so.1` and
//! `libcudart.so.12` by their real names: one process, then two sharing an allocation through
//! a file descriptor passed over a UNIX socket. Each scenario runs in its own process, so a
//! fault fails the test with its signal.

use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = support::scratch_dir("driver-vmm");
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        support::build_c(
            &dir,
            &[
                ("libcudart12.so", "libcudart.so.12"),
                ("libcuda_driver.so", "libcuda.so.1"),
            ],
            &here.join("tests/c/vmm.c"),
            &[here.join("../cudart/tests/c")],
            &[],
            "vmm",
            0,
        )
    })
}

/// Runs a scenario with the bundled DGX A100 (8 x A100-SXM4-40GB) and checks it passed.
fn run(scenario: &str, expect: &[&str]) {
    let mut c = Command::new(program());
    c.arg(scenario);
    for var in [
        "CUDA_VISIBLE_DEVICES",
        "NCCLSIM_TOPO",
        "NCCL_TOPO_FILE",
        "NCCLSIM_GPU",
        "NCCLSIM_NODE",
        "NCCLSIM_PACE",
        "NCCLSIM_CLOCK",
        "NCCLSIM_CUDA_CORE",
        "NCCLSIM_REPORT",
    ] {
        c.env_remove(var);
    }
    let out = c.output().expect("run the vmm program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && expect.iter().all(|e| stdout.contains(e)),
        "{scenario}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn create_reserve_map_copy_unmap_free_in_one_process() {
    run("local", &["PASS local"]);
}

#[test]
fn an_exported_allocation_is_shared_through_its_descriptor_and_nothing_else() {
    run("share", &["PASS import", "PASS share"]);
}
