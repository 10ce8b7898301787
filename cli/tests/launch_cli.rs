//! `ncclsim run` with launchers that start every rank themselves: one `mpirun -np 16` (OpenMPI)
//! and one `srun -n 16` (a stand-in setting Slurm's task variables) become 2 simulated nodes
//! of 8 GPUs. The program finds its GPU as nccl-tests does (its index among the ranks with the
//! same host name), so it only runs when each simulated node shows its own host name; every
//! AllReduce result is checked by the program against the sum it computes itself.

mod common;

use common::{repo, text};
use fake_cuda_test_support as support;
use std::path::PathBuf;
use std::process::Output;

fn run(args: &[&str]) -> Output {
    common::ncclsim_run()
        .args(args)
        // OpenMPI refuses to run as root without both.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("run ncclsim")
}

/// The machine's short host name, as the kernel has it.
fn machine() -> String {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("kernel host name");
    h.trim().split('.').next().expect("a name").to_string()
}

const LIBS: &[(&str, &str)] = &[
    ("libnccl.so", "libnccl.so.2"),
    ("libcudart12.so", "libcudart.so.12"),
];

fn source() -> PathBuf {
    repo().join("cli/tests/c/launch_allreduce.c")
}

/// Every rank's line: rank r on node r / 8 (its host name) with GPU r % 8, sharing memory with
/// all 16 ranks (one machine, whatever the host names say); and NCCL's INFO line of a 16-rank
/// world on 2 nodes.
fn check_layout(log: &str) {
    let host = machine();
    for r in 0..16 {
        let line = format!(
            "ok rank {r} host {host}-node{} gpu {} shm 16\n",
            r / 8,
            r % 8
        );
        assert!(log.contains(&line), "missing {line:?}:\n{log}");
        let info = format!(
            "rank {r} nRanks 16 nNodes 2 localRanks 8 localRank {} MNNVL 0",
            r % 8
        );
        assert!(log.contains(&info), "missing {info:?}:\n{log}");
    }
}

#[test]
fn mpirun_16_ranks_are_two_simulated_nodes() {
    if !common::have_mpi() {
        return;
    }
    let dir = support::scratch_dir("launch-mpi");
    let exe = common::mpi_program(&dir, &source(), LIBS, "launch_allreduce_mpi");
    let out = run(&[
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        "2",
        "--env",
        "NCCL_DEBUG=INFO",
        "--env",
        "NCCLSIM_TIMEOUT=120",
        "--",
        "mpirun",
        "--oversubscribe",
        "--mca",
        "btl",
        "self,vader",
        "-np",
        "16",
        exe.to_str().expect("utf-8 path"),
    ]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    check_layout(&log);
}

#[test]
fn srun_16_tasks_are_two_simulated_nodes() {
    let dir = support::scratch_dir("launch-srun");
    let exe = support::build_c(
        &dir,
        LIBS,
        &source(),
        &[repo().join("nccl-shim/include")],
        &[],
        "launch_allreduce",
        0,
    );
    for (_, real) in LIBS {
        std::fs::remove_file(dir.join(real)).expect("remove a link");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let comm_id = format!("NCCL_COMM_ID=127.0.0.1:{port}");
    let srun = repo().join("cli/tests/launch/srun");
    let out = run(&[
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        "2",
        "--env",
        "NCCL_DEBUG=INFO",
        "--env",
        &comm_id,
        "--env",
        "NCCLSIM_TIMEOUT=120",
        "--",
        srun.to_str().expect("utf-8 path"),
        "-n",
        "16",
        exe.to_str().expect("utf-8 path"),
    ]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    check_layout(&log);
}

#[test]
fn each_copy_of_a_multi_node_run_has_its_own_host_name() {
    let out = run(&["--nodes", "2", "--", "uname", "-n"]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort();
    let host = machine();
    assert_eq!(
        lines,
        vec![format!("{host}-node0"), format!("{host}-node1")],
        "{log}"
    );
    // One node: the machine's own name.
    let out = run(&["--", "uname", "-n"]);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), kernel.trim());
}

#[test]
fn the_users_node_wins_or_is_refused() {
    // One node: --env NCCLSIM_NODE picks it.
    let out = run(&[
        "--env",
        "NCCLSIM_NODE=3",
        "--",
        "sh",
        "-c",
        "echo node=$NCCLSIM_NODE",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "node=3\n");
    // More nodes: the two disagree, and the run says so instead of choosing.
    for launcher in [
        &["sh", "-c", "true"][..],
        &["mpirun", "-np", "2", "true"][..],
    ] {
        let mut args = vec!["--nodes", "2", "--env", "NCCLSIM_NODE=1", "--"];
        args.extend_from_slice(launcher);
        let out = run(&args);
        let log = text(&out);
        assert!(!out.status.success(), "{log}");
        assert!(
            log.contains("--env NCCLSIM_NODE=1 would put every process on node 1"),
            "{log}"
        );
    }
}

#[test]
fn launcher_layouts_are_checked_before_starting() {
    let out = run(&["--nodes", "2", "--", "mpirun", "-np", "15", "true"]);
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("15 ranks do not divide over --nodes 2; give --ranks-per-node"),
        "{log}"
    );
    let out = run(&[
        "--nodes",
        "2",
        "--procs-per-node",
        "8",
        "--",
        "srun",
        "-n",
        "16",
        "a",
    ]);
    assert!(
        text(&out).contains("--procs-per-node: srun starts the ranks itself"),
        "{}",
        text(&out)
    );
    let out = run(&[
        "--nodes",
        "2",
        "--ranks-per-node",
        "8",
        "--",
        "sh",
        "-c",
        "true",
    ]);
    assert!(
        text(&out).contains("--ranks-per-node is for MPI and Slurm launchers"),
        "{}",
        text(&out)
    );
    // The launcher is started once, with what its ranks need to place themselves.
    let out = run(&[
        "--nodes",
        "2",
        "--dry-run",
        "--",
        "mpiexec",
        "-n",
        "16",
        "a",
    ]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    for want in [
        "NCCLSIM_LAUNCHER=mpi",
        "NCCLSIM_NODES=2",
        "NCCLSIM_HOSTNAMES=1",
    ] {
        assert!(log.contains(want), "missing {want}: {log}");
    }
    assert_eq!(log.matches("# node ").count(), 1, "{log}");
}

#[test]
fn a_rank_that_cannot_be_placed_stops_with_the_reason() {
    // srun's 3 tasks over 2 nodes (started through sh, so that `ncclsim run` does not read the
    // count from the command line): each task stops before its program runs.
    let srun = repo().join("cli/tests/launch/srun");
    let out = run(&[
        "--nodes",
        "2",
        "--launcher",
        "slurm",
        "--",
        "sh",
        srun.to_str().expect("utf-8 path"),
        "-n",
        "3",
        "/bin/true",
    ]);
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("cannot place this rank on a simulated node: SLURM_NTASKS=3 ranks do not divide over 2 simulated nodes"),
        "{log}"
    );
}
