//! `ncclsim run`: an unmodified C program on `libnccl.so.2` started as 2 simulated nodes x 8
//! processes (the TP=8/DP=2 job, every result checked by the program), failures passed on with
//! the failing rank named and the others stopped, every copy and its children ended when
//! `ncclsim run` itself is killed, and bad options refused.

mod common;

use common::{repo, text};
use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `ncclsim run` on the libraries cargo built for this test, with a clean simulation
/// environment (no node, topology or trace settings of the caller's).
fn run(args: &[&str]) -> Output {
    common::ncclsim_run()
        .args(args)
        .output()
        .expect("run ncclsim")
}

/// The C program compiled against the real names but linked to nothing of ours at run time
/// except through the loader path `ncclsim run` sets up.
fn program(dir: &Path) -> PathBuf {
    let c = repo().join("nccl-shim/tests/c");
    let exe = support::build_c(
        dir,
        &[
            ("libnccl.so", "libnccl.so.2"),
            ("libcudart12.so", "libcudart.so.12"),
        ],
        &c.join("nccl_check.c"),
        &[repo().join("nccl-shim/include")],
        &["libpthread.so.0"],
        "nccl_check",
        0,
    );
    // Leave only the program: its libraries must come from `ncclsim run`.
    for lib in ["libnccl.so.2", "libcudart.so.12"] {
        let _ = std::fs::remove_file(dir.join(lib));
    }
    exe
}

#[test]
fn tp_dp_c_program_on_two_simulated_nodes() {
    let dir = support::scratch_dir("run-tpdp");
    let exe = program(&dir);
    let trace = dir.join("trace");
    let id = dir.join("id");
    let t = Instant::now();
    let out = run(&[
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        "2",
        "--procs-per-node",
        "8",
        "--trace",
        trace.to_str().expect("utf-8 path"),
        "--env",
        "NCCL_DEBUG=INFO",
        "--env",
        "NCCLSIM_TIMEOUT=120",
        "--",
        exe.to_str().expect("utf-8 path"),
        "tpdp",
        "{rank}",
        id.to_str().expect("utf-8 path"),
    ]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    for r in 0..16 {
        assert!(
            log.contains(&format!("ok tpdp rank {r}\n")),
            "rank {r}: {log}"
        );
    }
    // The world spans the two simulated nodes; each process's node is its rank / 8.
    for r in 0..16 {
        let line = format!(
            "rank {r} nRanks 16 nNodes 2 localRanks 8 localRank {} MNNVL 0",
            r % 8
        );
        assert!(log.contains(&line), "missing {line:?}");
    }
    let traces = std::fs::read_dir(&trace).expect("trace directory").count();
    assert_eq!(traces, 16, "one trace per rank");
    eprintln!("16 ranks through ncclsim run: {:?}", t.elapsed());
}

/// Four GB200 trays in two NVLink domains of 8 GPUs (`--nvl-domain 8`): the 16-rank world is
/// two multi-node NVLink nodes of 8 ranks. The lines are NCCL 2.30.7's own for this system
/// (planner/tests/nccl-2.30.7/mnnvl, 2 domains of 2 trays, ranks 0 and 15); every collective's
/// result is checked by the program.
#[test]
fn nvl_domains_reach_the_simulated_nccl() {
    let dir = support::scratch_dir("run-nvl-domain");
    let exe = program(&dir);
    let id = dir.join("id");
    let _ = std::fs::remove_file(&id);
    let out = run(&[
        "--topo",
        "topologies/gb200-nvl72-tray.xml",
        "--nodes",
        "4",
        "--procs-per-node",
        "4",
        "--nvl-domain",
        "8",
        "--env",
        "NCCL_DEBUG=INFO",
        "--env",
        "NCCLSIM_TIMEOUT=120",
        "--",
        exe.to_str().expect("utf-8 path"),
        "rank",
        "{rank}",
        "16",
        id.to_str().expect("utf-8 path"),
    ]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert_eq!(log.matches("ok rank").count(), 16, "{log}");
    for line in [
        "rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 1",
        "MNNVL 1 cliqueId 7ffe cliqueSize 8 cliqueRank 0 nvlDomainSize 8",
        "rank 15 nRanks 16 nNodes 2 localRanks 8 localRank 7 MNNVL 1",
        "MNNVL 1 cliqueId 7ffe cliqueSize 8 cliqueRank 7 nvlDomainSize 8",
    ] {
        assert!(log.contains(line), "missing {line:?}:\n{log}");
    }
    let _ = std::fs::remove_file(&id);
}

#[test]
fn a_failing_rank_is_named_and_the_others_are_stopped() {
    let t = Instant::now();
    // Rank 2 fails at once; the others would sleep for ten minutes.
    let out = run(&[
        "--procs-per-node",
        "4",
        "--grace",
        "0.5",
        "--",
        "sh",
        "-c",
        "if [ {rank} = 2 ]; then exit 7; fi; sleep 600",
    ]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(7), "{log}");
    assert!(
        log.contains("node 0 rank 2 (sh) ended with exit status 7"),
        "{log}"
    );
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
}

#[test]
fn placeholders_and_launch_environment() {
    let out = run(&[
        "--nodes",
        "2",
        "--procs-per-node",
        "2",
        "--",
        "sh",
        "-c",
        "echo {node}/{nodes} {rank}/{nranks} {local_rank} $NCCLSIM_NODE $RANK $WORLD_SIZE $LOCAL_RANK $PET_NNODES $PET_NODE_RANK",
    ]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "0/2 0/4 0 0 0 4 0 2 0",
            "0/2 1/4 1 0 1 4 1 2 0",
            "1/2 2/4 0 1 2 4 0 2 1",
            "1/2 3/4 1 1 3 4 1 2 1",
        ]
    );
}

#[test]
fn the_host_clock_is_virtual_unless_asked_otherwise() {
    let clock = |args: &[&str], inherited: Option<&str>| {
        let mut c = common::ncclsim_run();
        if let Some(v) = inherited {
            c.env("NCCLSIM_CLOCK", v);
        }
        let out = c
            .args(args)
            .args(["--", "sh", "-c", "echo $NCCLSIM_CLOCK"])
            .output()
            .expect("run ncclsim");
        let log = text(&out);
        assert!(out.status.success(), "{args:?}: {log}");
        log.trim().to_string()
    };
    let interposed = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));
    let default = if interposed { "virtual" } else { "real" };
    assert_eq!(clock(&[], None), default);
    assert_eq!(clock(&["--clock", "real"], None), "real");
    assert_eq!(clock(&["--pace"], None), "real");
    assert_eq!(clock(&[], Some("real")), "real");
    assert_eq!(clock(&["--env", "NCCLSIM_CLOCK=real"], None), "real");
    if interposed {
        assert_eq!(clock(&["--clock", "virtual"], Some("real")), "virtual");
    }
}

#[test]
fn libraries_are_preloaded_and_found_by_soname() {
    let out = run(&["--", "sh", "-c", "echo $LD_PRELOAD; echo $LD_LIBRARY_PATH"]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let mut lines = log.lines();
    let preload = lines.next().unwrap_or_default();
    for soname in [
        "libnccl.so.2",
        "libcudart.so.13",
        "libcudart.so.12",
        "libcuda.so.1",
        "libnvidia-ml.so.1",
    ] {
        let p = preload
            .split(':')
            .find(|p| p.ends_with(soname))
            .unwrap_or_else(|| panic!("{soname} not preloaded: {preload}"));
        assert!(Path::new(p).exists(), "{p}");
    }
    let first = lines
        .next()
        .unwrap_or_default()
        .split(':')
        .next()
        .unwrap_or_default();
    assert!(
        Path::new(first).join("libncclsim_cuda.so").exists(),
        "{log}"
    );
}

#[test]
fn bad_options_are_refused() {
    let scratch = support::scratch_dir("run-cli-bad-options");
    let bad_times = scratch.join("kt.csv");
    std::fs::write(&bad_times, "Name,Duration (ns)\nhold(),-3\n").unwrap();
    let bad_times = bad_times.to_str().unwrap();
    let bad_times_line = format!(
        "--kernel-times: {bad_times}:2: column 2 (\"Duration (ns)\"): \"-3\" is not a duration"
    );
    for (args, want) in [
        (
            vec!["--kernel-times", "/nonexistent/kt.csv", "--", "true"],
            "--kernel-times: /nonexistent/kt.csv: ",
        ),
        (
            vec!["--kernel-times", bad_times, "--", "true"],
            bad_times_line.as_str(),
        ),
        (
            vec!["--kernel-times-match", "order", "--", "true"],
            "--kernel-times <FILE>",
        ),
        (
            vec![
                "--kernel-times",
                bad_times,
                "--kernel-times-match",
                "names",
                "--",
                "true",
            ],
            "names",
        ),
        (vec!["--nodes", "0", "--", "true"], "--nodes 0"),
        (vec!["--nodes", "-1", "--", "true"], "--nodes -1"),
        (vec!["--env", "NOEQUALS", "--", "true"], "NAME=VALUE"),
        (
            vec!["--topo", "/nonexistent.xml", "--", "true"],
            "/nonexistent.xml",
        ),
        (vec!["--grace", "NaN", "--", "true"], "--grace"),
        (vec!["--nvl-domain", "0", "--", "true"], "--nvl-domain 0"),
        (
            vec![
                "--topo",
                "topologies/gb200-nvl72-tray.xml",
                "--nvl-domain",
                "2",
                "--",
                "true",
            ],
            "--nvl-domain 2: topologies/gb200-nvl72-tray.xml has 4 GPUs",
        ),
        (vec!["--clock", "wall", "--", "true"], "--clock"),
        (
            vec!["--clock", "virtual", "--pace", "--", "true"],
            "cannot be used with",
        ),
        (
            vec!["--", "/nonexistent/program"],
            "cannot start /nonexistent/program",
        ),
        // The run environment's own values, given by hand: refused as every copy would.
        (
            vec!["--env", "NCCLSIM_CLOCK=virt", "--", "true"],
            "the run environment: NCCLSIM_CLOCK=\"virt\": expected real or virtual",
        ),
        (
            vec!["--env", "NCCLSIM_HOST_MEMORY=8Q", "--", "true"],
            "NCCLSIM_HOST_MEMORY=\"8Q\": expected a byte count",
        ),
        (
            vec!["--env", "NCCLSIM_TIMEOUT=-1", "--", "true"],
            "NCCLSIM_TIMEOUT=\"-1\": expected a positive number of seconds",
        ),
    ] {
        let out = run(&args);
        let log = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {log}");
        assert!(log.contains(want), "{args:?}: {log}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ncclsim"))
        .args(["run", "--lib-dir", "/nonexistent", "--", "true"])
        .output()
        .expect("run ncclsim");
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(
        log.contains("missing libncclsim_launch.so, libncclsim_cuda.so")
            && log.contains("cargo build --release"),
        "{log}"
    );
}

#[test]
fn kernel_times_reach_the_command_as_absolute_paths() {
    let out = run(&[
        "--dry-run",
        "--kernel-times",
        "fake-cuda/kernel-times/tests/data/orion.csv",
        "--kernel-times-match",
        "order",
        "--",
        "true",
    ]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let abs = repo()
        .join("fake-cuda/kernel-times/tests/data/orion.csv")
        .canonicalize()
        .unwrap();
    assert!(
        log.contains(&format!("NCCLSIM_KERNEL_TIMES={}\n", abs.display())),
        "{log}"
    );
    assert!(log.contains("NCCLSIM_KERNEL_TIMES_MATCH=order\n"), "{log}");
}

/// Every process of the machine as (pid, parent pid, process group, state), from
/// `/proc/<pid>/stat` (read after the command's closing parenthesis: the command may hold
/// spaces and parentheses).
fn processes() -> Vec<(i32, i32, i32, char)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if let (Some(state), Some(ppid), Some(pgrp)) = (f.first(), f.get(1), f.get(2)) {
            out.push((
                pid,
                ppid.parse().unwrap_or(0),
                pgrp.parse().unwrap_or(0),
                state.chars().next().unwrap_or('?'),
            ));
        }
    }
    out
}

#[test]
fn killing_the_launcher_ends_every_copy_and_its_children() {
    let scratch = support::scratch_dir("run-killed");
    // Each copy is a shell (its process group's leader) with two sleeping children. The
    // watcher ends after the grace period at the latest, also where init is slow to reap the
    // copies (a group of zombies still exists).
    let mut launcher = Command::new(env!("CARGO_BIN_EXE_ncclsim"))
        .arg("run")
        .arg("--lib-dir")
        .arg(support::deps_dir())
        .args([
            "--nodes",
            "2",
            "--grace",
            "2",
            "--",
            "sh",
            "-c",
            "echo \"$NCCLSIM_JOB_DIR\" > \"$0/job{node}\"; touch \"$NCCLSIM_JOB_DIR/{node}\"; \
             sleep 300 & sleep 300; wait",
        ])
        .arg(&scratch)
        .current_dir(repo())
        .env_remove("NCCLSIM_NODE")
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ncclsim run");
    let lp = launcher.id() as i32;
    // SAFETY: getpgrp has no preconditions.
    let own_group = unsafe { libc::getpgrp() };
    // Everything the launcher started: its children, and every member of their process groups
    // (not this test's group, which the launcher shares).
    let started = || -> (Vec<i32>, Vec<i32>) {
        let ps = processes();
        let groups: Vec<i32> = ps
            .iter()
            .filter(|p| p.1 == lp && p.2 != own_group)
            .map(|p| p.2)
            .collect();
        let pids = ps
            .iter()
            .filter(|p| p.3 != 'Z' && (p.1 == lp || groups.contains(&p.2)))
            .map(|p| p.0)
            .collect();
        (groups, pids)
    };
    let cleanup = |pids: &[i32], groups: &[i32]| {
        for &g in groups {
            // SAFETY: killpg only sends a signal.
            unsafe { libc::killpg(g, libc::SIGKILL) };
        }
        for &p in pids {
            // SAFETY: kill only sends a signal.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
    };
    // Bounded wait for the two shells and their four sleeps to be running.
    let t = Instant::now();
    let (groups, pids) = loop {
        let (groups, pids) = started();
        let sleeps = processes()
            .iter()
            .filter(|p| p.3 != 'Z' && groups.contains(&p.2) && p.1 != lp)
            .count();
        if sleeps >= 4 {
            break (groups, pids);
        }
        if t.elapsed() > Duration::from_secs(30) {
            cleanup(&pids, &groups);
            let _ = launcher.kill();
            let _ = launcher.wait();
            panic!("the copies did not start within 30 s: {pids:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    launcher.kill().expect("SIGKILL the launcher");
    launcher.wait().expect("reap the launcher");
    // Bounded wait (liveness): every process the launcher started must end.
    let alive = |pids: &[i32]| -> Vec<i32> {
        let ps = processes();
        pids.iter()
            .copied()
            .filter(|pid| ps.iter().any(|p| p.0 == *pid && p.3 != 'Z'))
            .collect()
    };
    let t = Instant::now();
    let mut left = alive(&pids);
    while !left.is_empty() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
        left = alive(&pids);
    }
    cleanup(&left, &groups);
    assert!(
        left.is_empty(),
        "still running 10 s after `ncclsim run` was killed: {left:?} of {pids:?}"
    );
    // The watcher removed the run's job directory (with the entries the copies made there).
    let job = std::fs::read_to_string(scratch.join("job0")).expect("the copy wrote its job dir");
    let job = Path::new(job.trim());
    assert!(job.to_string_lossy().contains("ncclsim-job-"), "{job:?}");
    let t = Instant::now();
    while job.exists() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!job.exists(), "{job:?} left after the launcher was killed");
    eprintln!(
        "{} processes ended {:?} after the launcher was killed",
        pids.len(),
        t.elapsed()
    );
}
