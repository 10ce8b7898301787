//! ncclsim's INFO lines against what NCCL 2.30.7 itself printed for the same topologies (rank 0,
//! and rank 1 and the last rank of each case; see tests/nccl-2.30.7/README.md for where the
//! expected lines come from).

mod support {
    pub mod nccl_cases;
}
use support::nccl_cases::{case_names, expected_lines, plan_case, plan_case_as};

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
    KEEP.iter().any(|k| line.starts_with(k))
        || line.contains(" coll channels, ")
        || graph_channel_line(line)
}

/// Lines some recordings hold and others do not (the multi-node NVLink cases keep the
/// communicator line and the clique line `MNNVL 1 cliqueId ...`): compared only where the
/// recording has them. The communicator line is compared from ` rank ` on (NCCL prints its own
/// `comm %p`). The per-GPU `MNNVL busId ... fabric UUID` line is not compared: the UUIDs are the
/// recording NVML's.
const OPTIONAL: &[&str] = &["comm ", "MNNVL 1 "];

/// Our lines of rank `rank` that the recording `expected` can be compared with.
fn comparable(plan: &planner::CommPlan, rank: usize, expected: &[String]) -> Vec<String> {
    let has = |k: &str| expected.iter().any(|l| l.starts_with(k));
    planner::format::info_lines(plan, rank)
        .into_iter()
        .filter(|l| kept(l) || OPTIONAL.iter().any(|k| l.starts_with(k) && has(k)))
        .map(|l| without_comm_pointer(&l))
        .collect()
}

/// `comm 0x... rank ...` without the pointer.
fn without_comm_pointer(line: &str) -> String {
    match (line.strip_prefix("comm "), line.find(" rank ")) {
        (Some(_), Some(at)) => format!("comm{}", &line[at..]),
        _ => line.to_string(),
    }
}

/// Rank 0's lines of every case in `dir` (at least `min` cases) against ours: the failures.
fn rank0_failures(dir: &str, min: usize) -> (usize, Vec<String>) {
    let cases = case_names(dir, min);
    let mut failures = Vec::new();
    for case in &cases {
        let expected: Vec<String> = expected_lines(dir, case)
            .iter()
            .filter(|l| !l.starts_with("MNNVL busId"))
            .map(|l| without_comm_pointer(l))
            .collect();
        let plan = plan_case(case);
        let ours = comparable(&plan, 0, &expected);
        failures.extend(first_difference(case, &expected, &ours));
    }
    (cases.len(), failures)
}

/// The lines of the ranks recorded in `dir` (`<case>@<rank>.txt`, at least `min` files) against
/// ours: the failures.
fn other_ranks_failures(dir: &str, min: usize) -> (usize, Vec<String>) {
    let files = case_names(dir, min);
    let mut failures = Vec::new();
    let mut planned: Option<(String, planner::CommPlan)> = None;
    for file in &files {
        let (case, rank) = file.split_once('@').expect("<case>@<rank>");
        let rank: usize = rank.parse().expect("rank number");
        let expected: Vec<String> = expected_lines(dir, file)
            .iter()
            .filter(|l| !l.starts_with("MNNVL busId"))
            .map(|l| without_comm_pointer(l))
            .collect();
        if planned.as_ref().is_none_or(|(c, _)| c != case) {
            planned = Some((case.to_string(), plan_case(case)));
        }
        let plan = &planned.as_ref().expect("planned above").1;
        let ours: Vec<String> = comparable(plan, rank, &expected)
            .into_iter()
            .filter(|l| !l.starts_with("Pattern ") && !graph_channel_line(l))
            .collect();
        failures.extend(first_difference(file, &expected, &ours));
    }
    (files.len(), failures)
}

#[test]
fn rank0_lines_match_nccl() {
    let dir = format!("{}/tests/nccl-2.30.7", env!("CARGO_MANIFEST_DIR"));
    let (n, failures) = rank0_failures(&dir, 34);
    assert!(
        failures.is_empty(),
        "{} of {n} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Rank 1 and the last rank of each case (`ranks/<case>@<rank>.txt`): their own `Tree`, `NVLS`,
/// `Ring` and `Trees` lines (the GRAPH lines are their host's search, as in rank 0's file). On
/// 2-node cases the last rank sits on the odd node, where crossNic=2 rings are exchanged.
#[test]
fn other_ranks_lines_match_nccl() {
    let dir = format!("{}/tests/nccl-2.30.7/ranks", env!("CARGO_MANIFEST_DIR"));
    let (n, failures) = other_ranks_failures(&dir, 64);
    assert!(
        failures.is_empty(),
        "{} of {n} rank files differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// GB200 NVL72 trays as one multi-node NVLink domain (tests/nccl-2.30.7/mnnvl: 2, 4, 9 and 18
/// trays in one rack, two racks of 2, 4 and 18 trays, two trays with `NCCL_MNNVL_ENABLE=0`), with the
/// comm line and the `MNNVL 1 cliqueId ...` line: rank 0, rank 1 and the last rank.
#[test]
fn mnnvl_lines_match_nccl() {
    let dir = format!("{}/tests/nccl-2.30.7/mnnvl", env!("CARGO_MANIFEST_DIR"));
    let (n0, mut failures) = rank0_failures(&dir, 11);
    let (n1, more) = other_ranks_failures(&format!("{dir}/ranks"), 22);
    failures.extend(more);
    assert!(
        failures.is_empty(),
        "{} of {} files differ:\n{}",
        failures.len(),
        n0 + n1,
        failures.join("\n")
    );
}

/// Cases where the 2.19 profile does not print what NCCL 2.19.4 printed yet (see
/// tests/nccl-2.19.4/README.md). The test fails when one of them starts to match, so that the
/// list only ever shrinks.
const DIFFERENT_IN_2_19: &[&str] = &[
    "dgx-h100-2node",
    "gb200-nvl72-tray-2node",
    "hgx-h200-2node",
    "real-oci-H100-topology-2node",
    "real-oci-H100-topology-kubernetes-2node",
];

/// Rank 0's lines under the 2.19 profile against what NCCL 2.19.4 printed.
#[test]
fn rank0_lines_match_nccl_2_19() {
    let dir = format!("{}/tests/nccl-2.19.4", env!("CARGO_MANIFEST_DIR"));
    let cases = case_names(&dir, 34);
    let mut failures = Vec::new();
    let mut now_matching = Vec::new();
    for case in &cases {
        let expected = expected_lines(&dir, case);
        let plan = plan_case_as(case, Some("2.19.4"));
        let ours: Vec<String> = planner::format::info_lines(&plan, 0)
            .into_iter()
            .filter(|l| kept(l))
            .collect();
        let known = DIFFERENT_IN_2_19.contains(&case.as_str());
        match (ours == expected, known) {
            (true, true) => now_matching.push(case.clone()),
            (false, false) => failures.extend(first_difference(case, &expected, &ours)),
            _ => {}
        }
    }
    assert!(
        failures.is_empty() && now_matching.is_empty(),
        "differ: {}\nnow match (take them off DIFFERENT_IN_2_19): {now_matching:?}",
        failures.join("\n")
    );
}

/// The first line where `ours` departs from what NCCL printed, if it does.
fn first_difference(name: &str, expected: &[String], ours: &[String]) -> Option<String> {
    if ours == expected {
        return None;
    }
    let at = ours
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(expected.len()));
    Some(format!(
        "{name}: line {at}\n  nccl: {:?}\n  ours: {:?}",
        expected.get(at),
        ours.get(at)
    ))
}

/// A GRAPH per-channel line (`%2d : ...`).
fn graph_channel_line(line: &str) -> bool {
    let t = line.trim_start();
    let digits = t.chars().take_while(|c| c.is_ascii_digit()).count();
    digits > 0 && t[digits..].starts_with(" :")
}
