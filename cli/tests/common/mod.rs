//! What the `ncclsim` integration tests share: the repository, the command with a clean
//! simulation environment, and a run's output as text.

// Each test crate uses its own part of this module.
#![allow(dead_code)]

use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's root (tests run there, so topology paths are relative to it).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `ncclsim` run from the repository with none of the caller's simulation settings: node,
/// topology, trace, pace and clock, launcher host names, NVLink domain, host id, preloads.
pub fn ncclsim() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ncclsim"));
    c.current_dir(repo());
    for var in [
        "CUDA_VISIBLE_DEVICES",
        "NCCLSIM_TOPO",
        "NCCL_TOPO_FILE",
        "NCCLSIM_NODE",
        "NCCLSIM_GPU",
        "NCCLSIM_TRACE",
        "NCCLSIM_PACE",
        "NCCLSIM_CLOCK",
        "NCCLSIM_CLOCK_EPOCH",
        "NCCLSIM_HOSTNAMES",
        "NCCLSIM_NVL_DOMAIN",
        "NCCL_MNNVL_ENABLE",
        "NCCL_HOSTID",
        "LD_PRELOAD",
    ] {
        c.env_remove(var);
    }
    c
}

/// `ncclsim run` on the libraries cargo built for this test (options and command follow).
pub fn ncclsim_run() -> Command {
    let mut c = ncclsim();
    c.arg("run").arg("--lib-dir").arg(support::deps_dir());
    c
}

/// A finished run's standard output and error, together.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
