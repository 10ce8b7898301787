//! ncclsim's INFO lines against what NCCL 2.30.7 itself printed for the same topologies (rank 0;
//! see tests/nccl-2.30.7/README.md for where the expected lines come from).

mod support {
    pub mod nccl_cases;
}
use support::nccl_cases::{case_names, expected_lines, plan_case};

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

#[test]
fn rank0_lines_match_nccl() {
    let dir = format!("{}/tests/nccl-2.30.7", env!("CARGO_MANIFEST_DIR"));
    let cases = case_names(&dir, 33);
    let mut failures = Vec::new();
    for case in &cases {
        let expected = expected_lines(&dir, case);
        let plan = plan_case(case);
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
