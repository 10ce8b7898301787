//! ncclsim's INFO lines against what NCCL 2.30.7 itself printed for the same topologies (rank 0;
//! see tests/nccl-2.30.7/README.md for where the expected lines come from).

use planner::{plan_world, PlannerSettings};
use std::sync::Arc;
use topo::{Cluster, Completion};

const KEEP: &[&str] = &[
    "Pattern ",
    "Tree ",
    "Channel ",
    "Ring ",
    "Trees",
    "NVLS Head",
    "NVLS Trees",
    "Tuning P2P",
];

fn kept(line: &str) -> bool {
    KEEP.iter().any(|k| line.starts_with(k)) || line.contains(" coll channels, ") || {
        // per-channel graph lines: "%2d :"
        let t = line.trim_start();
        let digits = t.chars().take_while(|c| c.is_ascii_digit()).count();
        digits > 0 && t[digits..].starts_with(" :")
    }
}

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

#[test]
fn rank0_lines_match_nccl() {
    let dir = format!("{}/tests/nccl-2.30.7", env!("CARGO_MANIFEST_DIR"));
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".txt"))
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 33,
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
        let ours: Vec<String> = planner::format::info_lines(&plan, 0)
            .into_iter()
            .filter(|l| kept(l))
            .collect();
        if ours != expected {
            let at = ours
                .iter()
                .zip(&expected)
                .position(|(a, b)| a != b)
                .unwrap_or(ours.len().min(expected.len()));
            failures.push(format!(
                "{case}: line {at}\n  nccl: {:?}\n  ours: {:?}",
                expected.get(at),
                ours.get(at)
            ));
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
