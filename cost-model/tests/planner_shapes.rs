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

/// One GB200 NVL72 rack with multi-node NVLink is one node of 72 ranks (NCCL 2.30.7 printed
/// `nNodes 1 localRanks 72` and the NVLS graph `Pattern 5, nChannels 32, bw 20/40`,
/// tests/nccl-2.30.7/mnnvl in the planner): the tuning takes the single-node rows, NVLSTree is
/// off, and NVLS AllReduce gets `ncclTopoTuneModel`'s bandwidth worked by hand from that graph
/// (`src/graph/tuning.cc`): per channel min(bwIntra x 0.74 (Blackwell NVLS efficiency) x 31/32
/// x 2, bwInter) = min(20 x 0.74 x 31/32 x 2, 40) = 28.675 GB/s, x 32 channels = 917.6 GB/s of
/// bus bandwidth, x nRanks / (2 (nRanks - 1)) = 72/142 for the algorithm bandwidth.
#[test]
fn an_nvl72_rack_is_tuned_as_one_node_with_nvls_over_the_rack() {
    let p = plan("gb200-nvl72-tray.xml", 18);
    assert_eq!((p.n_nodes, p.n_ranks), (1, 72));
    let m = CostModel::from_plan(&p, &TunerSettings::default(), Mode::Nccl).unwrap();
    let ar = Func::AllReduce as usize;
    let simple = 2;
    let nvls = m.nccl.bandwidths[ar][Algo::Nvls as usize][simple] as f64;
    let hand = 32.0 * (20.0f64 * 0.74 * 31.0 / 32.0 * 2.0).min(40.0) * 72.0 / 142.0;
    assert!((nvls - hand).abs() < 0.05, "{nvls} vs {hand}");
    assert_eq!(m.nccl.bandwidths[ar][Algo::NvlsTree as usize][simple], 0.0);
    let big = m
        .predict(
            Collective::AllReduce,
            8 << 30,
            DataType::Float32,
            RedOp::Sum,
        )
        .unwrap();
    assert_eq!(big.algo, "NVLS");
    // With multi-node NVLink off, the same 18 trays are 18 nodes joined by their NICs.
    let off = planner::PlannerSettings::from_lookup(|k| {
        (k == "NCCL_MNNVL_ENABLE").then(|| "0".to_string())
    })
    .unwrap();
    let path = format!(
        "{}/../topologies/gb200-nvl72-tray.xml",
        env!("CARGO_MANIFEST_DIR")
    );
    let c = topo::Cluster::load(&path, 18, &off.topo, None).unwrap();
    let p_off = planner::Planner::new(c, off).plan_world().unwrap();
    assert_eq!(p_off.n_nodes, 18);
}

/// The NVL72 shapes of the calibration set are the planner's: one rack of 18 GB200 trays (one
/// NVLink domain), three domains of two trays (NICs with GUIDs of their own per tray, as the
/// measured trays have: with the file's GUIDs shared the two trays' NICs count as one and the
/// ring gets 8x24 instead of 8x48), and two racks from copies of the tray file with its NIC
/// GUIDs shared (`NicGuids::AsFile`) or each tray's own: the cluster's default, and the same plan
/// as copies of the file whose GUIDs were edited per tray.
#[test]
fn nvl72_calibration_shapes_match_the_planner() {
    use planner::Planner;
    let path = format!(
        "{}/../topologies/gb200-nvl72-tray.xml",
        env!("CARGO_MANIFEST_DIR")
    );
    let s = PlannerSettings::default();
    let xml = topo::read_xml(&path).unwrap();
    // `edited`: each tray a copy of the file with GUIDs of its own; `guids`: the cluster's mode.
    let cluster = |trays: usize, edited: bool, guids: topo::NicGuids| {
        let hosts: Vec<(String, std::sync::Arc<topo::XmlElement>)> = (0..trays)
            .map(|h| {
                let mut x = xml.clone();
                if edited {
                    own_guids(&mut x, h);
                }
                (path.clone(), std::sync::Arc::new(x))
            })
            .collect();
        let mut c = topo::Cluster::from_hosts(&hosts, &s.topo, Default::default()).unwrap();
        c.nic_guids = guids;
        c
    };
    use topo::NicGuids::{AsFile, PerHost};
    let world =
        |c: topo::Cluster| CommShape::from_plan(&Planner::new(c, s.clone()).plan_world().unwrap());
    let rack = world(cluster(18, false, PerHost));
    assert!(rack.mnnvl && rack.n_nodes == 1 && rack.n_ranks == 72);
    assert_eq!(key(&rack), key(&System::Gb200Nvl.shape(1, 72, true)));
    let mut c = cluster(6, false, PerHost);
    c.set_nvl_domains(topo::NvlDomains::Gpus(8)).unwrap();
    let three = world(c);
    assert_eq!(key(&three), key(&System::Gb200Nvl.shape(3, 8, true)));
    let shared = world(cluster(36, false, AsFile));
    assert_eq!(
        key(&shared),
        key(&cost_model::calibration::racks_from_one_tray_file(2))
    );
    let edited = world(cluster(36, true, AsFile));
    assert_eq!(key(&edited), key(&System::Gb200Nvl.shape(2, 72, true)));
    let default = world(cluster(36, false, PerHost));
    assert_eq!(key(&default), key(&edited));
}

/// Give a host's NICs GUIDs of their own (the file's with the host number in the top bits).
fn own_guids(e: &mut topo::XmlElement, host: usize) {
    if e.name.as_str() == "net" {
        if let Some(g) = e.get("guid") {
            let v = u64::from_str_radix(g.trim_start_matches("0x"), 16).unwrap();
            e.set("guid", format!("0x{:x}", v ^ ((host as u64 + 1) << 48)));
        }
    }
    for c in e.children.iter_mut() {
        own_guids(c, host);
    }
}
