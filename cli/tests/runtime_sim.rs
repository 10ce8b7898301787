//! The runtime against the CLI: the 16-process TP=8/DP=2 job on 2 simulated DGX A100 nodes
//! (a C program on `libnccl.so.2`), run with `NCCL_DEBUG=INFO`, `NCCL_GRAPH_DUMP_FILE` and
//! `NCCLSIM_TRACE`, must print the INFO lines `ncclsim plan ... --split tp=8,dp=2 --rank R`
//! prints for each of its communicators, dump the graph `--format graph-xml` gives, and trace
//! AllReduces whose predicted times are `ncclsim predict`'s; rank 0's extra virtual work
//! before the world AllReduce shows up as the others waiting.

mod common;

use fake_cuda_test_support as support;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn program(dir: &Path) -> PathBuf {
    common::nccl_program(dir, "nccl_check.c", &["libpthread.so.0"], "nccl_check")
}

fn ncclsim(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ncclsim"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run ncclsim");
    assert!(
        out.status.success(),
        "ncclsim {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The CLI's INFO lines per communicator name, as world rank `r` prints them.
fn cli_info(r: usize) -> BTreeMap<String, Vec<String>> {
    let text = ncclsim(&[
        "plan",
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        "2",
        "--split",
        "tp=8,dp=2",
        "--rank",
        &r.to_string(),
    ]);
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut cur = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# comm ") {
            cur = rest.split(':').next().unwrap_or_default().to_string();
        } else if let Some(l) = line.strip_prefix("NCCL INFO ") {
            out.entry(cur.clone()).or_default().push(l.to_string());
        }
    }
    out
}

/// The line with the communicator pointer (`comm 0x... rank ...`) with the pointer masked: the
/// runtime shows the program's handle, the planner a placeholder.
fn without_comm_pointer(line: &str) -> String {
    match line
        .strip_prefix("comm 0x")
        .and_then(|rest| rest.split_once(' '))
    {
        Some((_, rest)) => format!("comm * {rest}"),
        None => line.to_string(),
    }
}

#[test]
fn tp_dp_job_plans_traces_and_waits_match_the_cli() {
    let dir = support::scratch_dir("runtime-sim");
    let exe = program(&dir);
    let trace = dir.join("trace");
    let id = dir.join("id");
    let children: Vec<_> = (0..16)
        .map(|r| {
            Command::new(&exe)
                .args(["sim".to_string(), r.to_string(), id.display().to_string()])
                .env_remove("CUDA_VISIBLE_DEVICES")
                .env_remove("NCCLSIM_TOPO")
                .env_remove("NCCL_TOPO_FILE")
                .env_remove("NCCL_HOSTID")
                .env("NCCLSIM_NODE", (r / 8).to_string())
                .env("NCCL_DEBUG", "INFO")
                .env("NCCL_DEBUG_FILE", dir.join(format!("rank{r}.log")))
                .env("NCCL_GRAPH_DUMP_FILE", dir.join(format!("graph{r}.xml")))
                .env("NCCL_TOPO_DUMP_FILE", dir.join(format!("topo{r}.xml")))
                .env("NCCLSIM_TRACE", &trace)
                .env("NCCLSIM_TIMEOUT", "120")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn a rank")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(300);
    for c in children {
        let out = c.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(Instant::now() < deadline);

    // INFO lines: world, then the rank's TP group, then its DP group, as the CLI prints them.
    for r in 0..16 {
        let log = std::fs::read_to_string(dir.join(format!("rank{r}.log"))).expect("debug file");
        let got: Vec<&str> = log
            .lines()
            .filter_map(|l| l.split_once(" NCCL INFO ").map(|(_, m)| m))
            .filter(|m| !m.ends_with("Init COMPLETE"))
            .collect();
        // The end-of-run report follows the init lines: 3 communicators, one AllReduce each.
        let report: Vec<&str> = got
            .iter()
            .copied()
            .filter(|m| m.starts_with("NCCLSIM report:"))
            .collect();
        assert_eq!(report.len(), 1 + 3 * 2 + 1, "rank {r}: {report:#?}");
        assert_eq!(
            report
                .iter()
                .filter(|m| m.contains("AllReduce      calls      1"))
                .count(),
            3,
            "rank {r}: {report:#?}"
        );
        let got: Vec<String> = got
            .into_iter()
            .filter(|m| !m.starts_with("NCCLSIM report:"))
            .map(without_comm_pointer)
            .collect();
        let cli = cli_info(r);
        let want: Vec<String> = [
            "world".to_string(),
            format!("tp{}", r / 8),
            format!("dp{}", r % 8),
        ]
        .iter()
        .flat_map(|c| cli[c].iter().map(|l| without_comm_pointer(l)))
        .collect();
        assert!(got.len() > 50, "rank {r}: {} INFO lines", got.len());
        // The world's line counts the ranks of this rank's simulated node, not of the machine
        // all 16 processes run on; it and NCCL's Init COMPLETE line name the communicator the
        // program got.
        let world = format!(
            " rank {r} nRanks 16 nNodes 2 localRanks 8 localRank {} MNNVL 0",
            r % 8
        );
        let pointer = |line: &str| line.split_whitespace().nth(2).map(str::to_string);
        let world_comm = log
            .lines()
            .filter_map(|l| l.split_once(" NCCL INFO comm ").map(|(_, m)| m))
            .find(|m| m.ends_with(&world))
            .map(|m| m.split_whitespace().next().unwrap_or_default().to_string());
        let complete = log
            .lines()
            .filter_map(|l| l.split_once(" NCCL INFO ").map(|(_, m)| m))
            .find(|m| {
                m.starts_with("ncclCommInitRank comm ")
                    && m.contains(&format!(" rank {r} nranks 16 cudaDev "))
                    && m.ends_with(" - Init COMPLETE")
            });
        assert!(world_comm.is_some(), "rank {r}: no {world:?} in\n{log}");
        let complete = complete.unwrap_or_else(|| panic!("rank {r}: no Init COMPLETE in\n{log}"));
        assert_eq!(pointer(complete), world_comm, "rank {r}: {complete}");
        assert_ne!(world_comm.as_deref(), Some("0xc0ffee00"));
        if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
            panic!(
                "rank {r}: INFO line {i} differs:\n runtime: {:?}\n ncclsim: {:?}",
                got.get(i),
                want.get(i)
            );
        }
    }

    // The graph dump of rank 0 is that of its last communicator, dp0.
    let dumped = std::fs::read_to_string(dir.join("graph0.xml")).expect("graph dump");
    let cli_xml = ncclsim(&[
        "plan",
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        "2",
        "--split",
        "tp=8,dp=2",
        "--comm",
        "dp0",
        "--format",
        "graph-xml",
    ]);
    assert_eq!(dumped, cli_xml);

    // The topology dump of rank 0 is what `ncclsim topo dump` prints for the node.
    let topo_dump = std::fs::read_to_string(dir.join("topo0.xml")).expect("topology dump");
    assert_eq!(
        topo_dump,
        ncclsim(&["topo", "dump", "topologies/dgx-a100.xml", "--nodes", "2"])
    );
    // World rank 9 is rank 1 of world, tp1 and dp1: it is never a communicator's rank 0.
    assert!(
        !dir.join("topo9.xml").exists(),
        "only NCCL_TOPO_DUMP_FILE_RANK (0) writes"
    );

    // Traces: valid JSON; the world AllReduce (16 ranks, 4 MiB) priced as ncclsim predict prices it.
    let csv = ncclsim(&[
        "predict",
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        "2",
        "--op",
        "all_reduce",
        "-b",
        "4M",
        "-e",
        "4M",
        "--format",
        "csv",
    ]);
    let row: Vec<&str> = csv.lines().nth(1).expect("a row").split(',').collect();
    let want_us: f64 = row[5].parse().expect("time_us");
    let mut world_events = Vec::new();
    for f in std::fs::read_dir(&trace).expect("trace dir") {
        let text = std::fs::read_to_string(f.expect("entry").path()).expect("trace");
        let v: serde_json::Value = serde_json::from_str(&text).expect("trace is valid JSON");
        for e in v.as_array().expect("array") {
            if e["name"] == "AllReduce" && e["args"]["nranks"] == 16 {
                world_events.push(e.clone());
            }
        }
    }
    assert_eq!(world_events.len(), 16, "one world AllReduce per rank");
    for e in &world_events {
        let got = e["args"]["predicted_us"].as_f64().expect("predicted_us");
        assert!(
            (got - want_us).abs() <= 0.01 * want_us.max(1.0),
            "predicted {got} us, ncclsim predict {want_us} us"
        );
        assert_eq!(e["args"]["algo"].as_str(), Some(row[8]), "algorithm");
        let waited = e["args"]["waited_us"].as_f64().expect("waited_us");
        if e["args"]["rank"] == 0 {
            assert!(
                waited < 1.0,
                "rank 0 was last to arrive, waited {waited} us"
            );
        } else {
            assert!(
                waited > 1000.0,
                "rank {} waited only {waited} us for rank 0's 128 MiB copy",
                e["args"]["rank"]
            );
        }
    }

    // The traces summarized, and repriced on 2 DGX H100 nodes: 11 communicators (world, 2 TP,
    // 8 DP), one AllReduce each per rank; H100's NVLink makes every one faster.
    let summary = ncclsim(&[
        "trace",
        "summarize",
        &trace.display().to_string(),
        "--format",
        "csv",
    ]);
    let rows: Vec<&str> = summary.lines().skip(1).collect();
    assert_eq!(rows.len(), 11, "{summary}");
    assert!(
        rows.iter().all(|r| r.contains(",AllReduce,1.0,4194304,")),
        "{summary}"
    );
    let repriced = ncclsim(&[
        "trace",
        "reprice",
        &trace.display().to_string(),
        "--topo",
        "topologies/dgx-h100.xml",
        "--format",
        "csv",
    ]);
    let ratios: Vec<f64> = repriced
        .lines()
        .skip(1)
        .map(|l| {
            l.rsplit(',')
                .next()
                .expect("ratio")
                .parse()
                .expect("number")
        })
        .collect();
    assert_eq!(ratios.len(), 11, "{repriced}");
    assert!(ratios.iter().all(|&r| r > 0.2 && r < 1.0), "{repriced}");
}

/// Runs the `steps` scenario of the C program on 4 ranks (`marks` or `nomarks`) with
/// `NCCLSIM_TRACE`; returns the trace directory.
fn steps_run(dir: &Path, mode: &str) -> PathBuf {
    let exe = program(dir);
    let trace = dir.join(format!("trace-{mode}"));
    let _ = std::fs::remove_dir_all(&trace);
    let id = dir.join(format!("id-{mode}"));
    let _ = std::fs::remove_file(&id);
    let children: Vec<_> = (0..4)
        .map(|r| {
            Command::new(&exe)
                .args([
                    "steps".to_string(),
                    r.to_string(),
                    "4".into(),
                    id.display().to_string(),
                    mode.into(),
                ])
                .env_remove("CUDA_VISIBLE_DEVICES")
                .env_remove("NCCLSIM_TOPO")
                .env_remove("NCCL_TOPO_FILE")
                .env_remove("NCCL_HOSTID")
                .env_remove("NCCLSIM_NODE")
                .env("NCCLSIM_TRACE", &trace)
                .env("NCCLSIM_TIMEOUT", "120")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn a rank")
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    trace
}

fn steps_json(trace: &Path) -> serde_json::Value {
    let text = ncclsim(&[
        "trace",
        "summarize",
        &trace.display().to_string(),
        "--steps",
        "--format",
        "json",
    ]);
    serde_json::from_str(&text).expect("JSON")
}

/// Per-step summaries: three steps of an AllReduce (1 MiB) and an AllGather (4 x 1 MiB)
/// found from the program's cudaProfilerStart/Stop ranges, and found again from the call
/// pattern when the program does not mark them, with the same figures; the setup Broadcast
/// and (with marks) the replayed AllReduce are outside the steps. `reprice --plot` draws the
/// traced and repriced time of each step.
#[test]
fn steps_from_profiler_ranges_or_call_pattern_and_the_reprice_plot() {
    let dir = support::scratch_dir("runtime-steps");
    let marked = steps_json(&steps_run(&dir, "marks"));
    let found = steps_json(&steps_run(&dir, "nomarks"));
    assert_eq!(marked["source"], "profiler", "{marked}");
    assert_eq!(found["source"], "pattern", "{found}");
    assert_eq!(found["period"], 2, "{found}");
    for v in [&marked, &found] {
        assert_eq!(v["processes"], 4, "{v}");
        let rows = v["steps"].as_array().expect("steps");
        let steps: Vec<&serde_json::Value> = rows.iter().filter(|r| !r["step"].is_null()).collect();
        assert_eq!(steps.len(), 3, "{v}");
        for (k, s) in steps.iter().enumerate() {
            assert_eq!(s["step"], k as u64);
            assert_eq!(s["calls_per_process"], 2.0, "{v}");
            assert_eq!(s["bytes_per_process"], (5u64 << 20) as f64, "{v}");
            let us = s["predicted_us_per_process"].as_f64().unwrap();
            let first = steps[0]["predicted_us_per_process"].as_f64().unwrap();
            assert!(us > 0.0 && (us - first).abs() < 1e-6, "{v}");
            // The step spans at least its predicted time on the timeline.
            assert!(s["span_us"].as_f64().unwrap() >= us - 0.01, "{v}");
        }
    }
    // The same steps either way.
    let step_us = |v: &serde_json::Value| v["steps"][0]["predicted_us_per_process"].as_f64();
    assert_eq!(step_us(&marked), step_us(&found));
    let outside = |v: &serde_json::Value| -> serde_json::Value {
        v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["step"].is_null())
            .cloned()
            .expect("calls outside steps")
    };
    // Outside: the Broadcast (and with marks the replayed AllReduce, where ranks 1-3 waited
    // milliseconds for rank 0's copy).
    assert_eq!(outside(&found)["calls_per_process"], 1.0);
    assert_eq!(outside(&marked)["calls_per_process"], 2.0);
    assert!(outside(&marked)["waited_us_per_process"].as_f64().unwrap() > 1000.0);

    // Table and CSV carry the same rows.
    let trace = dir.join("trace-marks").display().to_string();
    let csv = ncclsim(&["trace", "summarize", &trace, "--steps", "--format", "csv"]);
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("step,calls_per_process,"), "{csv}");
    assert_eq!(lines.len(), 5, "{csv}");
    assert!(lines[1].starts_with("0,2.0,5242880,"), "{csv}");
    let table = ncclsim(&["trace", "summarize", &trace, "--steps"]);
    assert!(
        table.starts_with("# 3 step(s) by cudaProfilerStart/Stop ranges, 4 process(es)"),
        "{table}"
    );

    // The plot: one point per step for the traced and the repriced times.
    let svg = dir.join("steps.svg");
    let _ = std::fs::remove_file(&svg);
    let repriced = ncclsim(&[
        "trace",
        "reprice",
        &trace,
        "--topo",
        "topologies/dgx-h100.xml",
        "--plot",
        &svg.display().to_string(),
    ]);
    assert!(repriced.contains("total"), "{repriced}");
    let text = std::fs::read_to_string(&svg).expect("plot written");
    assert!(text.contains("<svg") && text.contains("traced") && text.contains("repriced"));
    assert_eq!(text.matches("<circle").count(), 6, "3 steps x 2 series");
}
