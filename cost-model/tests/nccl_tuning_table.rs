//! The TUNING table and the `threadThresholds` line against what NCCL 2.30.7's own
//! `ncclTopoTuneModel` printed (rank 0) for the planner's ground-truth cases: the same topologies
//! as `planner/tests/nccl-2.30.7` (see its README for the case names), planned by ncclsim, then
//! tuned by this crate. Expected lines are in `tests/nccl-2.30.7/<case>.txt` (the text after
//! `NCCL INFO `; an empty file means NCCL printed nothing: a one-rank communicator).

use cost_model::{CostModel, Mode, TunerSettings};

#[path = "../../planner/tests/support/nccl_cases.rs"]
mod nccl_cases;
use nccl_cases::{case_names, expected_lines, plan_case};

/// Our rank-0 lines for a case: the table, then `threadThresholds`.
fn ours(case: &str) -> Vec<String> {
    let plan = plan_case(case);
    let m = CostModel::from_plan(&plan, &TunerSettings::default(), Mode::Nccl).unwrap();
    m.nccl.init_lines(&TunerSettings::default(), 0)
}

#[test]
fn tuning_tables_match_nccl() {
    let dir = format!("{}/tests/nccl-2.30.7", env!("CARGO_MANIFEST_DIR"));
    let cases = case_names(&dir, 30);
    let mut failures = Vec::new();
    for case in &cases {
        let expected = expected_lines(&dir, case);
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
