//! Multicast objects (NVLS) from C (`c/multicast.c`), linked against `libcuda.so.1` and
//! `libcudart.so.12` by their real names: in one process on a GB200 tray and on a DGX H100
//! (GPUs on NVSwitches report `CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`), refused on the
//! bundled DGX A100, and between simulated trays of one rack through a fabric handle (refused
//! to a tray of the next rack). Each scenario runs in its own process, so a fault fails the
//! test with its signal.

use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = support::scratch_dir("driver-multicast");
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        support::build_c(
            &dir,
            &[
                ("libcudart12.so", "libcudart.so.12"),
                ("libcuda_driver.so", "libcuda.so.1"),
            ],
            &here.join("tests/c/multicast.c"),
            &[here.join("../cudart/tests/c")],
            &[],
            "multicast",
            0,
        )
    })
}

fn topology(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../topologies")
        .join(name);
    p.display().to_string()
}

/// Runs a scenario on `topo` (the bundled DGX A100 when `None`) and checks it printed `expect`.
fn run(scenario: &str, topo: Option<String>, expect: &[&str]) {
    let mut c = Command::new(program());
    c.arg(scenario);
    for var in [
        "CUDA_VISIBLE_DEVICES",
        "NCCLSIM_TOPO",
        "NCCL_TOPO_FILE",
        "NCCLSIM_GPU",
        "NCCLSIM_NODE",
        "NCCLSIM_NVL_DOMAIN",
        "NCCLSIM_PACE",
        "NCCLSIM_CLOCK",
        "NCCLSIM_CUDA_CORE",
        "NCCLSIM_REPORT",
    ] {
        c.env_remove(var);
    }
    if let Some(t) = topo {
        c.env("NCCLSIM_TOPO", t).env("NCCLSIM_NODE", "0");
    }
    let out = c.output().expect("run the multicast program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && expect.iter().all(|e| stdout.contains(e)),
        "{scenario}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_store_through_the_object_reaches_every_bound_device_of_a_gb200_tray() {
    run(
        "local",
        Some(topology("gb200-nvl72-tray.xml")),
        &["PASS local"],
    );
}

#[test]
fn h100s_on_nvswitches_support_multicast() {
    run("local", Some(topology("dgx-h100.xml")), &["PASS local"]);
}

#[test]
fn a100s_do_not_support_multicast() {
    run("unsupported", None, &["PASS unsupported"]);
}

/// Node 0 of a rack of GB200 trays creates an object with a fabric handle; node 1 (same rack)
/// imports it from the 64 bytes alone, joins and binds its memory; each sees the other's store
/// through the object in its own memory; node 18 (the next rack) is refused.
#[test]
fn a_team_spans_two_trays_of_one_nvlink_domain() {
    run(
        "team",
        Some(topology("gb200-nvl72-tray.xml")),
        &["PASS team", "PASS member", "PASS refused"],
    );
}
