//! The TUNING table and the `threadThresholds` line against what NCCL 2.30.7's own
//! `ncclTopoTuneModel` printed (rank 0) for the planner's ground-truth cases: the same topologies
//! as `planner/tests/nccl-2.30.7` (see its README for the case names), planned by ncclsim, then
//! tuned by this crate. Expected lines are in `tests/nccl-2.30.7/<case>.txt` (the text after
//! `NCCL INFO `; an empty file means NCCL printed nothing: a one-rank communicator).

use cost_model::{CostModel, Mode, TunerSettings};
use planner::{plan_world, PlannerSettings};
use std::sync::Arc;
use topo::{Cluster, Completion};

fn topo_file(case: &str) -> (String, usize) {
    let root = env!("CARGO_MANIFEST_DIR");
    let (base, n) = case.rsplit_once('-').expect("case-<n>node");
    let n: usize = n.trim_end_matches("node").parse().expect("node count");
    let base = base.trim_end_matches("-p2pdisabled");
    if let Some(rest) = base.strip_prefix("real-") {
        let (vendor, file) = if let Some(f) = rest.strip_prefix("pcie-rtx3090-") {
            ("pcie-rtx3090", f)
        } else {
            rest.split_once('-').expect("vendor-file")
        };
        (
            format!("{root}/../../shared/topologies-real/{vendor}/{file}.xml"),
            n,
        )
    } else {
        (format!("{root}/../topologies/{base}.xml"), n)
    }
}

/// Our rank-0 lines for a case: the table, then `threadThresholds`.
fn ours(case: &str) -> Vec<String> {
    let geforce =
        (case.contains("4090") || case.contains("rtx3090")) && !case.contains("p2pdisabled");
    let s = PlannerSettings::from_lookup(|k| {
        (geforce && k == "NCCL_IGNORE_DISABLED_P2P").then(|| "2".to_string())
    })
    .unwrap();
    let (file, n) = topo_file(case);
    let xml = Arc::new(topo::read_xml(&file).unwrap());
    let hosts: Vec<_> = (0..n).map(|_| (file.clone(), xml.clone())).collect();
    let c = Cluster::from_hosts(&hosts, &s.topo, Completion::default()).unwrap();
    let plan = plan_world(&c, &s).unwrap();
    let m = CostModel::from_plan(&plan, &TunerSettings::default(), Mode::Nccl).unwrap();
    m.nccl.init_lines(&TunerSettings::default(), 0)
}

#[test]
fn tuning_tables_match_nccl() {
    let dir = format!("{}/tests/nccl-2.30.7", env!("CARGO_MANIFEST_DIR"));
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".txt"))
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 30,
        "expected the recorded cases, found {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for f in &cases {
        let case = f.trim_end_matches(".txt");
        let expected: Vec<String> = std::fs::read_to_string(format!("{dir}/{f}"))
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        let ours = ours(case);
        if ours != expected {
            let mut diff = format!("{case}:");
            for i in 0..ours.len().max(expected.len()) {
                let (a, b) = (expected.get(i), ours.get(i));
                if a != b {
                    diff += &format!("\n  nccl: {a:?}\n  ours: {b:?}");
                }
            }
            failures.push(diff);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
