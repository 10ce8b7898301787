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

/// `nccl-shim/tests/c/<source>` built into `dir` as `exe`, linked against the built
/// `libnccl.so.2` and `libcudart.so.12` by their real names (and the `system` libraries).
pub fn nccl_program(dir: &Path, source: &str, system: &[&str], exe: &str) -> PathBuf {
    let c = repo().join("nccl-shim/tests/c");
    support::build_c(
        dir,
        &[
            ("libnccl.so", "libnccl.so.2"),
            ("libcudart12.so", "libcudart.so.12"),
        ],
        &c.join(source),
        &[repo().join("nccl-shim/include")],
        system,
        exe,
        0,
    )
}

/// A finished run's standard output and error, together.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether OpenMPI's `mpicc` is here; without it an MPI test skips, unless `NCCLSIM_REQUIRE_MPI`
/// is set (the suite's `scripts/test.sh` installs OpenMPI and sets it), when it fails.
pub fn have_mpi() -> bool {
    if Command::new("mpicc").arg("--version").output().is_ok() {
        return true;
    }
    assert!(
        std::env::var_os("NCCLSIM_REQUIRE_MPI").is_none(),
        "mpicc not found and NCCLSIM_REQUIRE_MPI is set"
    );
    eprintln!("skipped: OpenMPI's mpicc not found (benches/install-openmpi.sh installs it)");
    false
}

/// `source` built with `mpicc -DUSE_MPI` into `dir/exe`, against `libs` ((built file, real
/// name) pairs) by their real names, whose links are removed afterwards: at run time the
/// libraries must come from `ncclsim run`.
pub fn mpi_program(dir: &Path, source: &Path, libs: &[(&str, &str)], exe: &str) -> PathBuf {
    support::link_real_names(dir, libs);
    support::built("libncclsim_cuda.so");
    let out = dir.join(exe);
    let mut cc = Command::new("mpicc");
    cc.arg("-DUSE_MPI")
        .arg(source)
        .arg("-I")
        .arg(repo().join("nccl-shim/include"))
        .arg("-I")
        .arg(repo().join("fake-cuda/test-support/include"))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", dir.display()));
    for (_, real) in libs {
        cc.arg(format!("-l:{real}"));
    }
    support::run_ok(&mut cc);
    for (_, real) in libs {
        std::fs::remove_file(dir.join(real)).expect("remove a link");
    }
    out
}
