//! Folded jobs (`ncclsim run --fold`): a job small enough to run all-real, run again with its
//! data-parallel dimension folded, gives every real rank the same bytes for every collective,
//! data type and reduction (`nccl-shim/tests/c/nccl_fold.c`: data uniform across replicas, a
//! virtual root, in-place calls, both data paths; sends and receives with virtual peers), and
//! the same predicted time for every call; a communicator the fold does not fit is refused by name.

mod common;

use common::{ncclsim_run, text};
use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};

fn program(dir: &Path) -> PathBuf {
    common::nccl_program(dir, "nccl_fold.c", &[], "nccl_fold")
}

/// Runs the program on `nodes` DGX A100 nodes of 8 ranks (`fold`: extra options), writing
/// each rank's results and report under `out`.
fn run(exe: &Path, out: &Path, nodes: usize, fold: &[&str]) -> String {
    let (ok, t) = run_status(exe, out, nodes, fold, &[]);
    assert!(ok, "{t}");
    t
}

fn run_status(
    exe: &Path,
    out: &Path,
    nodes: usize,
    fold: &[&str],
    more: &[&str],
) -> (bool, String) {
    std::fs::create_dir_all(out).unwrap();
    let id = out.join("id");
    let report = out.join("report-%p.json");
    let o = ncclsim_run()
        .args(["--topo", "topologies/dgx-a100.xml", "--nodes"])
        .arg(nodes.to_string())
        .args(["--procs-per-node", "8"])
        .args(fold)
        .arg("--report")
        .arg(&report)
        .arg("--")
        .arg(exe)
        .arg(&id)
        .arg(out)
        .args(more)
        .output()
        .expect("ncclsim run");
    (o.status.success(), text(&o))
}

fn results(dir: &Path, r: usize) -> Vec<u8> {
    std::fs::read(dir.join(format!("rank{r}.bin"))).unwrap()
}

/// Rank 0's calls per operation: (name, calls, bytes, predicted time), from its report (of a
/// `folded` run or not).
fn predicted(out: &Path, folded: bool, ranks: u64) -> Vec<(String, u64, u64, f64)> {
    let mut calls = Vec::new();
    for e in std::fs::read_dir(out).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        for c in v["nccl"]["communicators"].as_array().into_iter().flatten() {
            if c["rank"] != 0 {
                continue;
            }
            assert_eq!(c["nranks"].as_u64(), Some(ranks), "{c}");
            // The report says which ranks ran in a folded job, and is silent otherwise.
            let f = &v["nccl"]["fold"];
            if folded {
                assert_eq!(
                    (f["ranks"].as_u64(), f["real_ranks"].as_u64()),
                    (Some(ranks), Some(8))
                );
                assert_eq!(
                    (f["folded"].as_str(), f["stands_for"].as_u64()),
                    (Some("dp"), Some(ranks / 8))
                );
            } else {
                assert!(f.is_null(), "{f}");
            }
            for op in c["ops"].as_array().into_iter().flatten() {
                calls.push((
                    op["op"].as_str().unwrap().to_string(),
                    op["calls"].as_u64().unwrap(),
                    op["bytes"].as_u64().unwrap(),
                    op["predicted_us"].as_f64().unwrap(),
                ));
            }
        }
    }
    calls
}

/// Runs the program on `nodes` nodes all-real and with `--fold dp` (8 real ranks), in scratch
/// directory `name`, and checks that ranks 0-7 got the same results and rank 0 the same
/// predicted times, and that no virtual rank ran; gives the program and the all-real run's
/// directory.
fn folded_equals_all_real(name: &str, nodes: usize) -> (PathBuf, PathBuf) {
    let dir = support::scratch_dir(name);
    let exe = program(&dir);
    let (all, folded) = (dir.join("all"), dir.join("folded"));
    let ranks = nodes * 8;
    let t = run(&exe, &all, nodes, &[]);
    assert_eq!(t.matches("ok ").count(), ranks, "{t}");
    let t = run(&exe, &folded, nodes, &["--fold", "dp"]);
    assert_eq!(t.matches("ok ").count(), 8, "{t}");
    for r in 0..8 {
        let (a, f) = (results(&all, r), results(&folded, r));
        assert!(a.len() > 100_000, "rank {r}: {} bytes of results", a.len());
        assert!(
            a == f,
            "rank {r}: the folded run's results differ from the all-real run's"
        );
    }
    assert!(!folded.join("rank8.bin").exists(), "a virtual rank ran");
    let ranks = ranks as u64;
    let (pa, pf) = (
        predicted(&all, false, ranks),
        predicted(&folded, true, ranks),
    );
    assert!(!pa.is_empty());
    assert_eq!(pa, pf, "predicted times differ");
    (exe, all)
}

#[test]
fn every_collective_folded_equals_the_all_real_run() {
    let (exe, all) = folded_equals_all_real("fold-collectives", 2);
    // The comparison sees one flipped bit: rank 3 perturbs every result of its own (a test
    // switch of the debug build).
    let perturbed = all.with_file_name("perturbed");
    run(
        &exe,
        &perturbed,
        2,
        &["--fold", "dp", "--env", "NCCLSIM_TEST_PERTURB=3"],
    );
    assert!(results(&perturbed, 2) == results(&all, 2));
    assert!(results(&perturbed, 3) != results(&all, 3));
}

#[test]
fn a_32_rank_job_folded_to_8_equals_its_all_real_run() {
    folded_equals_all_real("fold-32", 4);
}

#[test]
fn a_communicator_the_fold_does_not_fit_is_refused_by_name() {
    let dir = support::scratch_dir("fold-refused");
    let exe = program(&dir);
    let (ok, t) = run_status(&exe, &dir.join("split"), 2, &["--fold", "dp"], &["split"]);
    assert!(!ok, "{t}");
    assert!(
        t.contains("ncclCommSplit of a communicator with virtual members"),
        "{t}"
    );
    // Unfolded, the same split works.
    let (ok, t) = run_status(&exe, &dir.join("plain"), 2, &[], &["split"]);
    assert!(ok, "{t}");
    assert_eq!(t.matches("split 0:").count(), 16, "{t}");
}

#[test]
fn under_compute_time_collectives_move_no_data() {
    // 1 GiB buffers under a 256 MiB host budget: writing them would fail, meeting does not.
    let dir = support::scratch_dir("fold-compute-time");
    let exe = program(&dir);
    let limit = ["--env", "NCCLSIM_HOST_MEMORY=256M"];
    let (ok, t) = run_status(&exe, &dir.join("run"), 1, &limit, &["big"]);
    assert!(
        !ok && t.contains("out of host memory backing device memory"),
        "{t}"
    );
    let time = [&limit[..], &["--compute", "time"]].concat();
    let (ok, t) = run_status(&exe, &dir.join("time"), 1, &time, &["big"]);
    assert!(ok, "{t}");
    assert_eq!(t.matches("big ok").count(), 8, "{t}");
    let folded = [&time[..], &["--fold", "dp"]].concat();
    let (ok, t) = run_status(&exe, &dir.join("folded"), 2, &folded, &["big"]);
    assert!(ok, "{t}");
    assert_eq!(t.matches("big ok").count(), 8, "{t}");
}
