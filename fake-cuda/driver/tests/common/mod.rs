//! Running the driver's C test programs (`c/*.c`): built once per test binary against
//! `libcuda.so.1` and `libcudart.so.12` by their real names, run one scenario per process (a
//! fault fails the test with its signal) with the simulation's environment cleared, then
//! on the topology the test names.

use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds `tests/c/<name>.c` into its own scratch directory.
pub fn build(name: &str) -> PathBuf {
    let dir = support::scratch_dir(&format!("driver-{name}-c"));
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    support::build_c(
        &dir,
        &[
            ("libcudart12.so", "libcudart.so.12"),
            ("libcuda_driver.so", "libcuda.so.1"),
        ],
        &here.join(format!("tests/c/{name}.c")),
        &[here.join("../cudart/tests/c")],
        &[],
        name,
        0,
    )
}

/// The path of `topologies/<file>` of the repository.
pub fn topology(file: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../topologies")
        .join(file);
    p.display().to_string()
}

/// Runs `exe scenario` on node 0 of `topo` (the bundled DGX A100 when `None`) and checks it
/// succeeded and printed every line of `expect`.
pub fn run(exe: &Path, scenario: &str, topo: Option<&str>, expect: &[&str]) {
    let mut c = Command::new(exe);
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
        c.env("NCCLSIM_TOPO", topology(t)).env("NCCLSIM_NODE", "0");
    }
    let out = c.output().expect("run the C test program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && expect.iter().all(|e| stdout.contains(e)),
        "{scenario}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
