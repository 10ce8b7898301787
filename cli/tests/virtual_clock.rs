//! `ncclsim run --clock virtual`: a C program that times collectives as nccl-tests does (host
//! clock around its calls and a `cudaStreamQuery` spin, nccl-tests' bandwidth formulas;
//! `nccl-shim/tests/c/nccl_perf.c`) prints the times and bus bandwidths `ncclsim predict`
//! prints for the same communicator: 8 ranks driven by one thread (operands out of place and in
//! place), 8 processes, 16 processes on 2 simulated nodes, and 16 ranks of one `mpirun` (the
//! program built with MPI, as nccl-tests with `MPI=1`). The host work between calls takes no
//! virtual time, so the two agree to rounding (checked within 1%).

mod common;

use common::{repo, text};
use fake_cuda_test_support as support;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The C program compiled against the real names; at run time its libraries come from
/// `ncclsim run` only.
fn program(dir: &Path) -> PathBuf {
    let exe = support::build_c(
        dir,
        &[
            ("libnccl.so", "libnccl.so.2"),
            ("libcudart12.so", "libcudart.so.12"),
        ],
        &repo().join("nccl-shim/tests/c/nccl_perf.c"),
        &[repo().join("nccl-shim/include")],
        &[],
        "nccl_perf",
        0,
    );
    for lib in ["libnccl.so.2", "libcudart.so.12"] {
        let _ = std::fs::remove_file(dir.join(lib));
    }
    exe
}

fn ncclsim(args: &[&str]) -> Output {
    common::ncclsim().args(args).output().expect("run ncclsim")
}

/// (collective, size in bytes) -> (time in µs, busbw in GB/s) from `ncclsim predict --format json`.
type Table = BTreeMap<(String, u64), (f64, f64)>;

fn predicted(nodes: &str, sweep: &[&str]) -> Table {
    let mut args = vec![
        "predict",
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        nodes,
        "--op",
        "all",
        "--format",
        "json",
    ];
    args.extend_from_slice(sweep);
    let out = ncclsim(&args);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("predict's JSON");
    let mut table = Table::new();
    for coll in json.as_array().expect("one entry per collective") {
        let name = coll["collective"].as_str().expect("collective name");
        for row in coll["rows"].as_array().expect("rows") {
            let size = row["size"].as_u64().expect("size");
            let t = row["time_us"].as_f64().expect("time_us");
            let bw = row["busbw"].as_f64().expect("busbw");
            table.insert((name.to_string(), size), (t, bw));
        }
    }
    table
}

/// Checks every `perf` line of the program against the prediction, and that every rank's
/// clock ends at the same reading; returns how many lines there were.
fn check(log: &str, table: &Table, ranks: usize) -> usize {
    let lines = check_times(log, table, ranks);
    // One epoch and one timeline: after a last AllReduce, every rank's clock reads the same.
    let ends: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("clock rank "))
        .map(|l| l.rsplit(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(ends.len(), ranks, "{log}");
    assert!(
        ends.iter().all(|e| *e == ends[0]),
        "clocks after the last AllReduce: {ends:?}"
    );
    lines
}

/// Checks every `perf` line of the program against the prediction; returns how many there were.
fn check_times(log: &str, table: &Table, ranks: usize) -> usize {
    let close = |a: f64, b: f64| (a - b).abs() <= 0.01 * b.abs().max(1e-9);
    let mut lines = 0;
    let mut per_rank = vec![0usize; ranks];
    for line in log.lines().filter(|l| l.starts_with("perf ")) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let field = |name: &str| -> &str {
            let i = w.iter().position(|x| *x == name).unwrap_or_else(|| {
                panic!("no {name} in {line:?}");
            });
            w[i + 1]
        };
        let coll = w[1].to_string();
        let rank: usize = field("rank").parse().expect("rank");
        let size: u64 = field("size").parse().expect("size");
        let t: f64 = field("time_us").parse().expect("time_us");
        let bw: f64 = field("busbw").parse().expect("busbw");
        let &(pt, pbw) = table
            .get(&(coll.clone(), size))
            .unwrap_or_else(|| panic!("predict has no {coll} row of {size} B"));
        assert!(
            close(t, pt),
            "{coll} {size} B rank {rank}: {t} µs measured, {pt} µs predicted"
        );
        assert!(
            close(bw, pbw),
            "{coll} {size} B rank {rank}: busbw {bw} measured, {pbw} predicted"
        );
        per_rank[rank] += 1;
        lines += 1;
    }
    assert!(
        per_rank.iter().all(|&n| n == per_rank[0] && n > 0),
        "every rank reports every size: {per_rank:?}\n{log}"
    );
    lines
}

/// `ncclsim run --clock virtual` of the program with `layout` (`--nodes`, ...) and `argv`.
fn run(layout: &[&str], argv: &[&str]) -> String {
    let deps = support::deps_dir();
    let mut args = vec![
        "run",
        "--lib-dir",
        deps.to_str().expect("utf-8 path"),
        "--clock",
        "virtual",
        "--topo",
        "topologies/dgx-a100.xml",
        "--env",
        "NCCLSIM_TIMEOUT=120",
    ];
    args.extend_from_slice(layout);
    args.push("--");
    args.extend_from_slice(argv);
    let out = common::ncclsim()
        .args(&args)
        // OpenMPI refuses to run as root without both (other launches ignore them).
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("run ncclsim");
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    log
}

const SWEEP: [&str; 6] = ["-b", "8", "-e", "4M", "-f", "8"];
const SIZES: [&str; 3] = ["8", "4194304", "8"];

/// `nccl_perf group 8` on one node, its operands out of place or in place (`--env`).
fn one_thread(name: &str, env: &[&str]) {
    let dir = support::scratch_dir(name);
    let exe = program(&dir);
    let mut argv = vec![exe.to_str().expect("utf-8 path"), "group", "8"];
    argv.extend_from_slice(&SIZES);
    argv.extend_from_slice(&["2", "3"]);
    let log = run(env, &argv);
    let n = check(&log, &predicted("1", &SWEEP), 8);
    assert_eq!(
        n,
        8 * 5 * 7,
        "8 ranks x 5 collectives x 7 sizes (8 B to 2 MiB)"
    );
}

#[test]
fn eight_ranks_of_one_thread_time_what_predict_says() {
    one_thread("vclock-group", &[]);
}

#[test]
fn eight_ranks_in_place_time_what_predict_says() {
    one_thread("vclock-in-place", &["--env", "NCCLSIM_PERF_IN_PLACE=1"]);
}

/// `nccl_perf rank` as every process runs it: `n` ranks, the sweep, `warmup` and `iters` calls;
/// the ranks on `nodes` simulated nodes of 8 processes each.
fn processes(name: &str, nodes: &str, n: usize, warmup: &str, iters: &str) {
    let dir = support::scratch_dir(name);
    let exe = program(&dir);
    let id = dir.join("id");
    let ranks = n.to_string();
    let mut argv = vec![
        exe.to_str().expect("utf-8 path"),
        "rank",
        "{rank}",
        &ranks,
        id.to_str().expect("utf-8 path"),
    ];
    argv.extend_from_slice(&SIZES);
    argv.extend_from_slice(&[warmup, iters]);
    let log = run(&["--nodes", nodes, "--procs-per-node", "8"], &argv);
    let lines = check(&log, &predicted(nodes, &SWEEP), n);
    assert_eq!(lines, n * 5 * 7, "{n} ranks x 5 collectives x 7 sizes");
}

#[test]
fn eight_processes_time_what_predict_says() {
    processes("vclock-procs", "1", 8, "2", "3");
}

/// Across 2 nodes, a rank's send/receive pair crossing the nodes takes longer than the others;
/// the ranks fall into its pace within as many calls as they are hops from it (4 here), so the
/// warm-up is 5 calls before the timed ones.
#[test]
fn sixteen_processes_on_two_nodes_time_what_predict_says() {
    processes("vclock-nodes", "2", 16, "5", "2");
}

/// `mpirun -np 16` over 2 simulated nodes, the program an MPI program as nccl-tests built with
/// `MPI=1` (`MPI_Init`, rank and size from MPI, the NCCL id broadcast over MPI): the launcher
/// and its daemons keep real time, the ranks read the virtual clock, and the table is
/// `predict`'s. The ranks' clocks need not end equal here: `MPI_Init` sleeps while it waits for
/// its peers, and a thread's sleeps move its clock by the time they last.
#[test]
fn mpirun_16_ranks_on_two_nodes_time_what_predict_says() {
    if !common::have_mpi() {
        return;
    }
    let dir = support::scratch_dir("vclock-mpirun");
    let exe = common::mpi_program(
        &dir,
        &repo().join("nccl-shim/tests/c/nccl_perf.c"),
        &[
            ("libnccl.so", "libnccl.so.2"),
            ("libcudart12.so", "libcudart.so.12"),
        ],
        "nccl_perf_mpi",
    );
    let mut argv = vec![
        "mpirun",
        "--oversubscribe",
        "--mca",
        "btl",
        "self,vader",
        "-np",
        "16",
        exe.to_str().expect("utf-8 path"),
        "mpi",
    ];
    argv.extend_from_slice(&SIZES);
    argv.extend_from_slice(&["5", "2"]);
    let log = run(&["--nodes", "2"], &argv);
    let lines = check_times(&log, &predicted("2", &SWEEP), 16);
    assert_eq!(lines, 16 * 5 * 7, "16 ranks x 5 collectives x 7 sizes");
}

/// ncclsim's own deadlines keep real time under the virtual clock (which does not move while
/// a rank waits for a peer that never comes): rank 0 of 2 started alone gives up after
/// `NCCLSIM_TIMEOUT` seconds, its init failing, instead of waiting forever.
#[test]
fn the_runtime_times_out_in_real_time_under_the_virtual_clock() {
    let dir = support::scratch_dir("vclock-timeout");
    let exe = program(&dir);
    let id = dir.join("id");
    let deps = support::deps_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ncclsim"))
        .args(["run", "--lib-dir"])
        .arg(&deps)
        .args(["--clock", "virtual", "--env", "NCCLSIM_TIMEOUT=3", "--"])
        .arg(&exe)
        .args(["rank", "0", "2"])
        .arg(&id)
        .args(["8", "8", "2", "1", "1"])
        .current_dir(repo())
        .env_remove("LD_PRELOAD")
        .env_remove("NCCLSIM_NODE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start ncclsim run");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(120) {
            let _ = child.kill();
            panic!("a lone rank still waits after 120 s with NCCLSIM_TIMEOUT=3");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let out = child.wait_with_output().expect("output");
    let log = text(&out);
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("FAIL") && log.contains("ncclCommInitRank"),
        "{log}"
    );
    eprintln!("lone rank gave up after {:?}: {log}", start.elapsed());
}
