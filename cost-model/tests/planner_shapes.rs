//! The cost model on the planner's real plans of the bundled topologies: the hand shapes of the
//! calibration set must agree with what the planner finds, and docs/worked-examples.md holds end to end.

use cost_model::calibration::System;
use cost_model::*;
use planner::PlannerSettings;

fn plan(file: &str, nodes: usize) -> planner::CommPlan {
    let s = PlannerSettings::default();
    let path = format!("{}/../topologies/{file}", env!("CARGO_MANIFEST_DIR"));
    let c = topo::Cluster::load(&path, nodes, &s.topo, None).unwrap();
    planner::Planner::new(c, s).plan_world().unwrap()
}

fn key(s: &CommShape) -> Vec<String> {
    [&s.ring, &s.tree, &s.nvls]
        .iter()
        .map(|g| {
            format!(
                "{:?} {}x{}/{} {:?}/{:?}",
                g.pattern, g.n_channels, g.bw_intra, g.bw_inter, g.type_intra, g.type_inter
            )
        })
        .chain([format!(
            "ranks {} nodes {} channels {} nvls {}",
            s.n_ranks, s.n_nodes, s.n_channels, s.nvls_channels
        )])
        .collect()
}

#[test]
fn calibration_shapes_match_the_planner() {
    for (file, sys, nodes, ppn, nvls) in [
        ("dgx-a100.xml", System::DgxA100, 1, 8, false),
        ("dgx-h100.xml", System::DgxH100, 1, 8, true),
        ("gb200-nvl72-tray.xml", System::Gb200Tray, 1, 4, true),
    ] {
        let p = plan(file, nodes);
        let from_plan = CommShape::from_plan(&p);
        let hand = sys.shape(nodes, ppn, nvls);
        // Compare the ring and NVLS graphs and the channel counts the model reads.
        let (a, b) = (key(&from_plan), key(&hand));
        assert_eq!(a[0], b[0], "{file} ring");
        if nvls {
            assert_eq!(a[2], b[2], "{file} nvls");
        }
        assert_eq!(a[3], b[3], "{file} counts");
    }
}

#[test]
fn worked_examples_from_the_planned_dgx_a100() {
    let p = plan("dgx-a100.xml", 1);
    let m = CostModel::from_plan(&p, &TunerSettings::default(), Mode::Nccl).unwrap();
    let ar = Func::AllReduce as usize;
    let ring = Algo::Ring as usize;
    assert!((m.nccl.bandwidths[ar][ring][2] * 14.0 / 8.0 - 240.0).abs() < 0.05);
    assert!((m.nccl.latencies[ar][ring][2] - 56.0).abs() < 0.05);
    let lines = m.nccl.tuning_table();
    assert!(lines[0].starts_with("  Algorithm   |"));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("    AllReduce |") && l.contains("    56.0/ 137.1 |")),
        "{lines:#?}"
    );
}
