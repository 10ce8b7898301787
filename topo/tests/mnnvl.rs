//! A GB200 NVL72 rack fused across its trays as NCCL 2.30.7 fuses a multi-node NVLink clique
//! (`ncclTopoGetSystem`, `ncclTopoAddNvLinks`, `ncclTopoConnectCpus`): the counts and
//! bandwidths follow from NCCL's rules applied by hand to the tray file.

use std::sync::Arc;
use topo::{BuildOptions, CliqueRank, HostXml, NodeKind, PathType, System, TopoSettings, Topology};

fn tray() -> (Arc<topo::XmlElement>, String) {
    let file = format!(
        "{}/../topologies/gb200-nvl72-tray.xml",
        env!("CARGO_MANIFEST_DIR")
    );
    (Arc::new(topo::read_xml(&file).unwrap()), file)
}

fn rack(trays: usize) -> Topology {
    rack_with(trays, topo::NicGuids::PerHost)
}

fn rack_with(trays: usize, nic_guids: topo::NicGuids) -> Topology {
    let (xml, file) = tray();
    let s = TopoSettings::default();
    let host = HostXml::prepare(&xml, &file, &s.nic_fusion, s.version).unwrap();
    let ranks: Vec<CliqueRank> = (0..trays)
        .flat_map(|t| {
            let host = &host;
            let file = file.as_str();
            (0..4).map(move |dev| CliqueRank {
                host,
                file,
                dev,
                host_hash: 0x1000 + t as u64,
            })
        })
        .collect();
    let opts = BuildOptions {
        version: s.version,
        fusion: s.nic_fusion.clone(),
        nic_guids,
        ..Default::default()
    };
    let sys = System::from_clique(&ranks, &opts).unwrap();
    Topology::new(sys, &s)
}

#[test]
fn a_rack_fuses_into_one_system_with_one_nvswitch() {
    let t = rack(18);
    let sys = &t.system;
    assert_eq!(sys.count(NodeKind::Gpu), 72);
    assert_eq!(
        sys.count(NodeKind::Nvs),
        1,
        "one NVS node for the whole fabric"
    );
    assert_eq!(
        sys.count(NodeKind::Cpu),
        36,
        "each tray keeps its two Grace CPUs"
    );
    assert_eq!(
        sys.count(NodeKind::Net),
        72,
        "each tray keeps its four NICs"
    );
    assert_eq!(sys.n_hosts(), 18);
    // GPUs are keyed by host: tray t's GPUs carry system id t, in clique-rank order.
    for g in 0..72 {
        let n = sys.node(sys.nodes(NodeKind::Gpu)[g]);
        assert_eq!(n.id >> 56, (g / 4) as u64, "GPU {g}");
        assert_eq!(sys.gpu(g).rank as usize, g);
    }
    // Every GPU pair is one NVLink hop through the NVSwitch: 18 links x 40.1 GB/s (sm 100).
    let gpus = sys.nodes(NodeKind::Gpu);
    for &(a, b) in &[(0, 1), (0, 4), (3, 71), (70, 5)] {
        let p = t.path(gpus[a], NodeKind::Gpu, b);
        assert_eq!(p.ty, PathType::Nvl, "GPU {a} -> GPU {b}");
        assert!((p.bw - 18.0 * 40.1).abs() < 0.01, "{}", p.bw);
    }
    // CPUs of different trays are not linked (ncclTopoConnectCpus joins one host's CPUs).
    let cpus = sys.nodes(NodeKind::Cpu);
    let sys_links = sys
        .links(cpus[0])
        .filter(|(_, r, _)| sys.node(*r).kind == NodeKind::Cpu)
        .count();
    assert_eq!(sys_links, 1);
}

#[test]
fn two_trays_keep_their_nics_apart() {
    let t = rack_with(2, topo::NicGuids::AsFile);
    let sys = &t.system;
    assert_eq!(
        (
            sys.count(NodeKind::Gpu),
            sys.count(NodeKind::Net),
            sys.n_hosts()
        ),
        (8, 8, 2)
    );
    let nets = sys.nodes(NodeKind::Net);
    let ids: Vec<u64> = nets.iter().map(|&n| sys.node(n).id >> 56).collect();
    assert_eq!(ids, [0, 0, 0, 0, 1, 1, 1, 1]);
    // Both trays come from one file whose GUIDs are kept (`NicGuids::AsFile`), so NCCL sees
    // port k of each tray as one ASIC.
    let asic = |i: usize| sys.node(nets[i]).net().unwrap().asic;
    assert_eq!(asic(0), 0x1330_f000_03ae_6d94);
    assert_eq!(
        (0..4).map(asic).collect::<Vec<_>>(),
        (4..8).map(asic).collect::<Vec<_>>()
    );
}

/// The tray file gives its four NICs four GUIDs. Fused from copies of it, the trays' NICs are
/// distinct ASICs by default (each tray keeps four, and no GUID is on two trays), and with
/// `NicGuids::AsFile` NIC k of every tray is one ASIC (four GUIDs over twelve NETs).
#[test]
fn each_tray_has_nics_of_its_own_unless_the_file_guids_are_kept() {
    let asics = |t: &Topology| -> Vec<(u64, u64)> {
        let sys = &t.system;
        sys.nodes(NodeKind::Net)
            .iter()
            .map(|&n| (sys.node(n).id >> 56, sys.node(n).net().unwrap().asic))
            .collect()
    };
    let distinct = |v: &[(u64, u64)]| {
        let mut a: Vec<u64> = v.iter().map(|x| x.1).collect();
        a.sort_unstable();
        a.dedup();
        a.len()
    };
    let own = asics(&rack_with(3, topo::NicGuids::PerHost));
    assert_eq!((own.len(), distinct(&own)), (12, 12));
    let file = asics(&rack_with(3, topo::NicGuids::AsFile));
    assert_eq!((file.len(), distinct(&file)), (12, 4));
    // The first tray keeps the file's GUIDs either way.
    let first = |v: &[(u64, u64)]| -> Vec<u64> {
        let h = v[0].0;
        let mut a: Vec<u64> = v.iter().filter(|x| x.0 == h).map(|x| x.1).collect();
        a.sort_unstable();
        a
    };
    assert_eq!(first(&own), first(&file));
}
