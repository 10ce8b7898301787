//! The acceptance numbers of the topology model, checked on the vendor files in topologies/vendor and on
//! our own library in topologies/.

use std::path::PathBuf;
use topo::profiles::{self, gpu_model};
use topo::{
    Cluster, Completion, LinkType, NcclVersion, NodeKind, PathType, TopoSettings, Topology,
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}
fn vendor(rel: &str) -> String {
    root()
        .join("topologies/vendor")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}
fn lib(rel: &str) -> String {
    root()
        .join("topologies")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}
fn load(file: &str) -> std::sync::Arc<Topology> {
    Cluster::load(file, 1, &TopoSettings::default(), None)
        .unwrap()
        .nodes[0]
        .topo
        .clone()
}
fn load_with(file: &str, gpu: &str, nic: Option<&str>) -> std::sync::Arc<Topology> {
    let c = Completion {
        gpu: Some(gpu_model(gpu).unwrap()),
        nic_speed_mbps: nic.map(|n| profiles::parse_nic_speed(n).unwrap()),
    };
    Cluster::load(file, 1, &TopoSettings::default(), Some(c))
        .unwrap()
        .nodes[0]
        .topo
        .clone()
}

/// Bandwidth of the link(s) of a GPU's attach node of a given type.
fn gpu_links(t: &Topology, g: usize, ty: LinkType) -> Vec<f32> {
    let s = &t.system;
    let a = s.gpu_attach(s.nodes(NodeKind::Gpu)[g]);
    s.links(a)
        .filter(|(_, _, l)| l.ty == ty)
        .map(|(_, _, l)| l.bw)
        .collect()
}

fn all_real_files() -> Vec<String> {
    let mut v = Vec::new();
    for dir in ["alibaba", "aws", "azure", "oci", "pcie-rtx3090"] {
        for e in std::fs::read_dir(root().join("topologies/vendor").join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "xml") {
                v.push(p.to_string_lossy().into_owned());
            }
        }
    }
    v.sort();
    assert_eq!(v.len(), 17, "topologies/vendor should hold 17 files");
    v
}

#[test]
fn every_real_file_parses_and_full_dumps_report_real_counts() {
    // (file, GPUs, NVSwitch chips named by the NVLinks, NETs); None = skeleton. NETs as NCCL 2.30.7
    // sees them: the OCI files' 16 ports are 8 dual-port NICs, which NCCL fuses into 8 NETs.
    type Counts = Option<(usize, usize, usize)>;
    let expect: &[(&str, Counts)] = &[
        ("alibaba/topo_1A100_1CX6.xml", Some((1, 6, 2))),
        ("alibaba/topo_2A100_1CX6.xml", Some((2, 6, 2))),
        ("alibaba/topo_4A100_2CX6.xml", Some((4, 6, 3))),
        ("alibaba/topo_8A100_4CX6.xml", Some((8, 6, 5))),
        ("aws/g5.48xl-topo.xml", None),
        ("aws/p4d-24xl-topo.xml", None),
        ("aws/p4de-24xl-topo.xml", None),
        ("aws/p5.48xl-topo.xml", None),
        ("azure/ncv4-topo.xml", Some((4, 0, 1))),
        ("azure/ndv2-topo.xml", None),
        ("azure/ndv4-topo.xml", None),
        ("azure/ndv5-topo.xml", None),
        ("oci/H100-topology-kubernetes.xml", Some((8, 4, 8))),
        ("oci/H100-topology.xml", Some((8, 4, 8))),
        ("oci/topo-flattened-b4.xml", None),
        ("oci/topo-flattened.xml", None),
        ("pcie-rtx3090/topo.xml", Some((8, 0, 1))),
    ];
    assert_eq!(all_real_files().len(), expect.len());
    for (rel, want) in expect {
        let file = vendor(rel);
        let xml = topo::read_xml(&file).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let report = profiles::inspect(&xml);
        match want {
            None => {
                assert!(report.is_skeleton, "{rel} should be a skeleton");
                let err = Cluster::load(&file, 1, &TopoSettings::default(), None)
                    .unwrap_err()
                    .to_string();
                assert!(
                    err.contains("skeleton topology") && err.contains("--gpu"),
                    "{rel}: {err}"
                );
            }
            Some((gpus, nvs, nets)) => {
                assert!(!report.is_skeleton, "{rel}");
                let t = load(&file);
                assert_eq!(t.system.count(NodeKind::Gpu), *gpus, "{rel} GPUs");
                assert_eq!(profiles::nvswitch_targets(&xml), *nvs, "{rel} NVSwitches");
                assert_eq!(
                    t.system.count(NodeKind::Nvs),
                    usize::from(*nvs > 0),
                    "{rel}: NCCL folds NVSwitches into one node"
                );
                assert_eq!(t.system.count(NodeKind::Net), *nets, "{rel} NETs");
            }
        }
    }
}

#[test]
fn skeletons_complete_into_models_with_nvlinks() {
    let cases = [
        ("azure/ndv4-topo.xml", "A100-SXM4", 240.0f32, 8usize),
        ("azure/ndv5-topo.xml", "H100-SXM5", 370.8, 8),
        ("oci/topo-flattened.xml", "A100-SXM4", 240.0, 8),
        ("oci/topo-flattened-b4.xml", "A100-SXM4", 240.0, 8),
        ("aws/p4d-24xl-topo.xml", "A100-SXM4", 240.0, 8),
        ("aws/p4de-24xl-topo.xml", "A100-SXM4", 240.0, 8),
        ("aws/p5.48xl-topo.xml", "H100-SXM5", 370.8, 8),
        ("azure/ndv2-topo.xml", "V100-SXM2", 120.0, 8),
    ];
    for (rel, gpu, nvl_total, n) in cases {
        let t = load_with(&vendor(rel), gpu, Some("200G"));
        assert_eq!(t.system.count(NodeKind::Gpu), n, "{rel}");
        for g in 0..n {
            let sum: f32 = gpu_links(&t, g, LinkType::Nvl).iter().sum();
            assert!(
                (sum - nvl_total).abs() < 1e-3,
                "{rel} GPU {g}: NVLink total {sum}"
            );
        }
        assert!(t.system.count(NodeKind::Net) > 0, "{rel}: NICs completed");
    }
    // g5: eight A10G on PCIe, no NVLink.
    let t = load_with(&vendor("aws/g5.48xl-topo.xml"), "A10G", None);
    assert_eq!(t.system.count(NodeKind::Gpu), 8);
    assert!(gpu_links(&t, 0, LinkType::Nvl).is_empty());
    // DGX-1 cube mesh: GPU pairs with 2 links and with 1 link, NVB between non-neighbours.
    let t = load_with(&vendor("azure/ndv2-topo.xml"), "V100-SXM2", None);
    let dev_idx = |d: i32| (0..8).find(|&g| t.system.gpu(g).dev == d).unwrap();
    let (g0, g3, g1, g5) = (dev_idx(0), dev_idx(3), dev_idx(1), dev_idx(5));
    assert_eq!(t.gpu_gpu(g0, g3).ty, PathType::Nvl);
    assert_eq!(t.gpu_gpu(g0, g3).bw, 40.0);
    assert_eq!(t.gpu_gpu(g0, g1).bw, 20.0);
    assert_eq!(t.gpu_gpu(g0, g5).ty, PathType::Nvb);
}

#[test]
fn nccl_bandwidth_numbers() {
    // DGX A100: GPU<->NVSwitch 12 x 20 = 240, PCIe Gen4 x16 = 24, HDR NIC 25; maxBw/totalBw 240/240.
    let t = load(&lib("dgx-a100.xml"));
    assert_eq!(gpu_links(&t, 0, LinkType::Nvl), vec![240.0]);
    assert_eq!(gpu_links(&t, 0, LinkType::Pci), vec![24.0]);
    let net = t
        .system
        .node(t.system.nodes(NodeKind::Net)[0])
        .net()
        .unwrap()
        .clone();
    assert_eq!(net.bw, 25.0);
    assert_eq!((t.max_bw, t.total_bw), (240.0, 240.0));
    // The same through a vendor dump (Alibaba HGX A100).
    let t = load(&vendor("alibaba/topo_8A100_4CX6.xml"));
    assert_eq!(gpu_links(&t, 0, LinkType::Nvl), vec![240.0]);
    assert_eq!((t.max_bw, t.total_bw), (240.0, 240.0));
    // H100: 18 x 20.6 = 370.8 (OCI dump, 5+5+4+4 links over 4 NVSwitches folded into one node).
    let t = load(&vendor("oci/H100-topology.xml"));
    assert!((gpu_links(&t, 0, LinkType::Nvl)[0] - 370.8).abs() < 1e-3);
    // NCCL 2.19 used 20.0 per sm90 link.
    let s = TopoSettings {
        version: "2.19".parse().unwrap(),
        ..TopoSettings::default()
    };
    let t19 = Cluster::load(&vendor("oci/H100-topology.xml"), 1, &s, None).unwrap();
    assert_eq!(gpu_links(&t19.nodes[0].topo, 0, LinkType::Nvl), vec![360.0]);
    // PCIe Gen3 x16 = 12 and EDR = 12.5 (DGX-1), Gen4 x16 = 24 (RTX 3090 box).
    let t = load(&lib("dgx1-v100.xml"));
    assert_eq!(gpu_links(&t, 0, LinkType::Pci), vec![12.0]);
    let edr = t
        .system
        .node(t.system.nodes(NodeKind::Net)[0])
        .net()
        .unwrap()
        .bw;
    assert_eq!(edr, 12.5);
    let t = load(&vendor("pcie-rtx3090/topo.xml"));
    assert_eq!(gpu_links(&t, 0, LinkType::Pci), vec![24.0]);
    // Inter-socket: Ice Lake (SKL class) 10, AMD 16.
    let cpu = t.system.nodes(NodeKind::Cpu)[0];
    let sys: Vec<f32> = t
        .system
        .links(cpu)
        .filter(|(_, _, l)| l.ty == LinkType::Sys)
        .map(|x| x.2.bw)
        .collect();
    assert_eq!(sys, vec![10.0]);
}

#[test]
fn path_types_on_pcie_boxes() {
    // RTX 3090 box: 4 GPUs per Gen4 switch per socket, NIC on socket 1. GeForce boards report no P2P
    // through NVML, so NCCL reroutes GPU<->GPU traffic through the CPU: PHB within a switch, SYS across
    // sockets. The raw distance (what P2P would use) is PIX within a switch.
    let t = load(&vendor("pcie-rtx3090/topo.xml"));
    assert_eq!(t.gpu_gpu(0, 1).ty, PathType::Phb);
    assert_eq!(t.gpu_gpu(0, 4).ty, PathType::Sys);
    assert_eq!(t.gpu_gpu(0, 4).bw, 10.0);
    assert!(!t.check_p2p(0, 1).0);
    let raw = TopoSettings {
        ignore_disabled_p2p: 2,
        ..TopoSettings::default()
    };
    let t2 = Cluster::load(&vendor("pcie-rtx3090/topo.xml"), 1, &raw, None)
        .unwrap()
        .nodes[0]
        .topo
        .clone();
    assert_eq!(t2.gpu_gpu(0, 1).ty, PathType::Pix);
    assert_eq!(t2.gpu_gpu(4, 7).ty, PathType::Pix);
    assert_eq!(t2.gpu_gpu(0, 4).ty, PathType::Sys);
    // GPUs without GDR reach the NIC through the CPU: PHB on the NIC's socket, SYS on the other.
    assert_eq!(t.gpu_net(4, 0).ty, PathType::Phb);
    assert_eq!(t.gpu_net(0, 0).ty, PathType::Sys);
    assert_eq!(t.gpu_net(4, 0).bw, 7.0);

    // 4x A100 PCIe, each GPU on its own root port, two per socket: PHB on a socket, SYS across.
    let t = load(&lib("pcie-4xa100.xml"));
    assert_eq!(t.gpu_gpu(0, 1).ty, PathType::Phb);
    assert_eq!(t.gpu_gpu(0, 2).ty, PathType::Sys);
    // Azure NCv4 (one A100 per AMD NUMA node): SYS between every pair; more than 2 GPUs, so P2P stays
    // at PXB and the pairs are routed through the CPU (still SYS).
    let t = load(&vendor("azure/ncv4-topo.xml"));
    for g in 1..4 {
        assert_eq!(t.gpu_gpu(0, g).ty, PathType::Sys);
    }
    // Alibaba HGX A100: NICs behind the GPUs' PCIe switches.
    let t = load(&vendor("alibaba/topo_8A100_4CX6.xml"));
    assert_eq!(t.gpu_gpu(0, 7).ty, PathType::Nvl);
    let near = (0..t.system.count(NodeKind::Net))
        .map(|n| t.gpu_net(1, n).ty)
        .min()
        .unwrap();
    assert!(near <= PathType::Pxb, "{near:?}");
}

#[test]
fn version_profiles_change_structure_not_paths() {
    let file = lib("dgx-a100.xml");
    let new = load(&file);
    let s = TopoSettings {
        version: NcclVersion::new(2, 29, 7),
        ..TopoSettings::default()
    };
    let old = Cluster::load(&file, 1, &s, None).unwrap().nodes[0]
        .topo
        .clone();
    assert_eq!(new.system.count(NodeKind::Dev), 8);
    assert_eq!(old.system.count(NodeKind::Dev), 0);
    for g in 0..8 {
        for p in 0..8 {
            assert_eq!(new.gpu_gpu(g, p).ty, old.gpu_gpu(g, p).ty);
            assert_eq!(new.gpu_gpu(g, p).bw, old.gpu_gpu(g, p).bw);
        }
        for n in 0..8 {
            assert_eq!(
                new.gpu_net(g, n).ty,
                old.gpu_net(g, n).ty,
                "gpu {g} net {n}"
            );
        }
    }
    assert_eq!((old.max_bw, old.total_bw), (240.0, 240.0));
    let lines = topo::print::system(&old);
    assert!(
        lines
            .iter()
            .any(|l| l.trim_start().contains("GPU/0-7000 (0)")),
        "2.29 prints GPU lines with ranks"
    );
}

#[test]
fn multi_node_clusters_share_one_topology() {
    let c = Cluster::load(&lib("dgx-a100.xml"), 1024, &TopoSettings::default(), None).unwrap();
    assert_eq!(c.nodes.len(), 1024);
    assert_eq!(c.n_gpus(), 8192);
    assert_eq!(c.distinct_topologies(), 1);
    assert_eq!(c.nodes[1023].first_rank, 8184);
    // inter-node view: maxBw is the GPU->NIC bandwidth (PCIe Gen4 24 < HDR 25).
    assert_eq!(c.nodes[0].topo.max_bw, 24.0);
    assert!(c.nodes[0].topo.system.inter);
    // Hosts from different files.
    let a = std::sync::Arc::new(topo::read_xml(&lib("dgx-a100.xml")).unwrap());
    let h = std::sync::Arc::new(topo::read_xml(&lib("dgx-h100.xml")).unwrap());
    let hosts = vec![
        ("a".to_string(), a.clone()),
        ("h".to_string(), h),
        ("a".to_string(), a),
    ];
    let c = Cluster::from_hosts(&hosts, &TopoSettings::default(), Completion::default()).unwrap();
    assert_eq!(c.distinct_topologies(), 2);
    assert_eq!(c.nodes[2].first_rank, 16);
}

#[test]
fn write_then_parse_gives_the_same_model() {
    for file in all_real_files().into_iter().chain(
        [
            "dgx1-v100.xml",
            "dgx-a100.xml",
            "dgx-h100.xml",
            "hgx-h200.xml",
            "gb200-nvl72-tray.xml",
            "gb300-nvl72-tray.xml",
            "hgx-b200.xml",
            "pcie-8x4090.xml",
            "pcie-4xa100.xml",
        ]
        .iter()
        .map(|f| lib(f)),
    ) {
        let xml = topo::read_xml(&file).unwrap();
        let again = topo::xml::parse(&topo::xml::write(&xml), "again").unwrap();
        assert_eq!(topo::xml::write(&again), topo::xml::write(&xml), "{file}");
        if profiles::inspect(&xml).is_skeleton {
            continue;
        }
        let a = load(&file);
        let dir = std::env::temp_dir().join(format!("ncclsim-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("t.xml");
        std::fs::write(&out, topo::xml::write(&xml)).unwrap();
        let b = load(out.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(topo::print::system(&a), topo::print::system(&b), "{file}");
    }
}

#[test]
fn lint_flags_what_nccl_drops() {
    let text = "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"85\">\n    <pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"16 GT/s\" link_width=\"16\">\n      <gpu dev=\"0\" sm=\"80\" gdr=\"1\">\n        <nvlink target=\"0000:02:00.0\" count=\"2\" tclass=\"0x030200\"/>\n      </gpu>\n    </pci>\n    <pci busid=\"0000:01:00.0\" class=\"0x020000\" link_speed=\"16 GT/s\" link_width=\"16\"/>\n    <nic><net name=\"x\"/></nic>\n  </cpu>\n</system>\n";
    let root = topo::xml::parse(text, "l.xml").unwrap();
    let f: Vec<String> = topo::lint::check(text, &root, "l.xml")
        .iter()
        .map(|f| f.to_string())
        .collect();
    let has = |s: &str| f.iter().any(|x| x.contains(s));
    assert!(has("without rank"), "{f:?}");
    assert!(has("already used"), "{f:?}");
    assert!(has("not a GPU of this file"), "{f:?}");
    assert!(has("without dev"), "{f:?}");
    assert!(has("without <nic>"), "{f:?}");
    assert!(f.iter().any(|x| x.starts_with("l.xml:8:5: error")), "{f:?}");
    // A clean file of ours has nothing at warning level.
    let text = std::fs::read_to_string(lib("dgx-a100.xml")).unwrap();
    let root = topo::xml::parse(&text, "a").unwrap();
    let bad: Vec<_> = topo::lint::check(&text, &root, "a")
        .into_iter()
        .filter(|f| f.severity >= topo::lint::Severity::Warning)
        .collect();
    assert!(bad.is_empty(), "{bad:?}");
    // Azure NCv4's NVLink to itself is reported.
    let text = std::fs::read_to_string(vendor("azure/ncv4-topo.xml")).unwrap();
    let root = topo::xml::parse(&text, "n").unwrap();
    assert!(topo::lint::check(&text, &root, "n")
        .iter()
        .any(|f| f.msg.contains("to itself")));
}

#[test]
fn semantic_errors_name_file_line_and_column() {
    let cases = [
        ("<system version=\"2\"/>", "t.xml:1:1: <system> has version 2"),
        (
            "<system version=\"1\">\n  <cpu numaid=\"0\">\n   <pci busid=\"0000:01:00.0\" class=\"0x0302\" link_speed=\"\" link_width=\"16\"><gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"0\"/></pci>\n  </cpu>\n</system>",
            "t.xml:2:3: <cpu> has no arch attribute",
        ),
        (
            "<system version=\"1\">\n <cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\">\n  <pci busid=\"0000:01:00.0\" link_speed=\"\" link_width=\"16\"><gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"0\"/></pci>\n </cpu>\n</system>",
            "t.xml:3:3: <pci> has no class attribute",
        ),
        (
            "<system version=\"1\">\n <cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\">\n  <pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"\" link_width=\"16\"><gpu dev=\"x\" sm=\"80\" rank=\"0\" gdr=\"0\"/></pci>\n </cpu>\n</system>",
            "t.xml:3:76: <gpu> dev=\"x\" is not a device index (an integer)",
        ),
        (
            "<system version=\"1\">\n <cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\">\n  <pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"\" link_width=\"16\"><gpu dev=\"3\" sm=\"80\" rank=\"0\" gdr=\"0\"/></pci>\n  <pci busid=\"0000:02:00.0\" class=\"0x030200\" link_speed=\"\" link_width=\"16\"><gpu dev=\"3\" sm=\"80\" rank=\"1\" gdr=\"0\"/></pci>\n </cpu>\n</system>",
            "t.xml:4:76: <gpu> dev=\"3\" is already the device of the <gpu> on line 3; each GPU of a host has its own device index",
        ),
    ];
    // More GPUs than NCCL keeps in a system.
    let many = format!(
        "<system version=\"1\">\n<cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\">\n{}</cpu>\n</system>",
        (0..600)
            .map(|i| format!("<pci busid=\"0000:{:02x}:{:02x}.0\" class=\"0x030200\" link_speed=\"\" link_width=\"16\"><gpu dev=\"{i}\" sm=\"80\" rank=\"{i}\" gdr=\"0\"/></pci>\n", 1 + i / 32, i % 32))
            .collect::<String>()
    );
    // More NETs than NCCL keeps (a NIC fusion over them would take quadratic time).
    let many_nets = format!(
        "<system version=\"1\">\n<cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\">\n<pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"\" link_width=\"16\"><gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"0\"/></pci>\n<pci busid=\"0000:02:00.0\" class=\"0x020000\" link_speed=\"\" link_width=\"16\"><nic>\n{}</nic></pci>\n</cpu>\n</system>",
        (0..20000)
            .map(|i| format!("<net name=\"mlx5_{i}\" dev=\"{i}\" speed=\"200000\" port=\"1\" guid=\"0x{i:x}\" maxconn=\"131072\" gdr=\"1\"/>\n"))
            .collect::<String>()
    );
    let cases: Vec<(&str, &str)> = cases
        .into_iter()
        .chain([
            (
                many.as_str(),
                "t.xml:579:74: <gpu> is GPU 577 of 600; NCCL keeps at most 576 GPUs",
            ),
            (
                many_nets.as_str(),
                "t.xml:581:1: <net> is NET 577 of 20000; NCCL keeps at most 576 NETs",
            ),
        ])
        .collect();
    for (text, want) in cases {
        let root = topo::xml::parse(text, "t.xml").unwrap();
        let err = topo::System::from_xml(&root, "t.xml", &topo::BuildOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(want), "{err}");
    }
}

#[test]
fn oci_dual_port_nics_are_fused_as_nccl_prints_them() {
    // NCCL 2.30.7's own system print for these files on 2 nodes (rank 0): each dual-port NIC is
    // one NET numbered after the 16 ports, at the summed speed (2 x 180 Gb/s = 45 GB/s, 2 x 200 Gb/s
    // = 50 GB/s), with the first port's guid and port.
    let cases = [
        (
            "oci/H100-topology.xml",
            "=== System : maxBw 45.0 totalBw 370.8 ===",
            "+ NET[45.0] - NET/0-10 (0/9a70500003ae6d94/1/45.000000)",
            "+ NET[45.0] - NET/0-17",
        ),
        (
            "oci/H100-topology-kubernetes.xml",
            "=== System : maxBw 48.0 totalBw 370.8 ===",
            "+ NET[50.0] - NET/0-10 (0/9a70500003ae6d94/1/50.000000)",
            "+ NET[50.0] - NET/0-17 (0/8011e0003ae6d96/1/50.000000)",
        ),
    ];
    for (rel, header, first, last) in cases {
        let c = Cluster::load(&vendor(rel), 2, &TopoSettings::default(), None).unwrap();
        let lines = topo::print::system(&c.nodes[0].topo);
        assert_eq!(lines[0], header, "{rel}");
        let nets: Vec<&str> = lines
            .iter()
            .map(|l| l.trim_start())
            .filter(|l| l.starts_with("+ NET["))
            .collect();
        assert_eq!(nets.len(), 8, "{rel}: {nets:#?}");
        assert_eq!(nets[0], first, "{rel}");
        assert!(nets[7].starts_with(last), "{rel}: {}", nets[7]);
        // Each NET still hangs off its NIC's own PCI device (no PCI device added at PORT level).
        let nics: Vec<&str> = lines
            .iter()
            .map(|l| l.trim_start())
            .filter(|l| l.contains(" - NIC/"))
            .collect();
        assert_eq!(nics.len(), 8, "{rel}");
        assert_eq!(nics[0], "+ PCI[48.0] - NIC/0-c000", "{rel}");
        // Without fusion (NCCL_NET_MERGE_LEVEL=LOC) the 16 ports come back at their own speed.
        let loc =
            TopoSettings::from_lookup(|k| (k == "NCCL_NET_MERGE_LEVEL").then(|| "LOC".into()))
                .unwrap();
        let c = Cluster::load(&vendor(rel), 2, &loc, None).unwrap();
        assert_eq!(c.nodes[0].topo.system.count(NodeKind::Net), 16, "{rel}");
    }
}

#[test]
fn net_path_lines_leave_out_kinds_nccl_never_reached() {
    // NCCL 2.30.7's path print on one DGX A100 (rank 0): a GPU line lists the NVSwitch, a NET
    // line does not (the search from the NVSwitch never reaches a NET, so NCCL has no paths
    // there to print), nor any other kind it has no paths to.
    let t = load(&lib("dgx-a100.xml"));
    let lines = topo::print::path_lines(&t);
    let gpu = lines
        .iter()
        .find(|l| l.starts_with("GPU/0-7000 :"))
        .unwrap();
    assert!(gpu.contains(" NVS/0-0 (2/240.0/NVL) "), "{gpu}");
    let net = lines.iter().find(|l| l.starts_with("NET/0-0 :")).unwrap();
    assert_eq!(
        net.trim_end(),
        "NET/0-0 :GPU/0-7000 (4/24.0/PIX) GPU/0-f000 (4/24.0/PIX) GPU/0-47000 (7/16.0/SYS) \
         GPU/0-4e000 (7/16.0/SYS) GPU/0-87000 (7/16.0/SYS) GPU/0-90000 (7/16.0/SYS) \
         GPU/0-b7000 (7/16.0/SYS) GPU/0-bd000 (7/16.0/SYS) CPU/0-3 (3/24.0/PHB) \
         CPU/0-1 (4/16.0/SYS) CPU/0-7 (4/16.0/SYS) CPU/0-5 (4/16.0/SYS) \
         NET/0-0 (0/5000.0/LOC) NET/0-1 (4/24.0/PIX) NET/0-2 (7/16.0/SYS) NET/0-3 (7/16.0/SYS) \
         NET/0-4 (7/16.0/SYS) NET/0-5 (7/16.0/SYS) NET/0-6 (7/16.0/SYS) NET/0-7 (7/16.0/SYS) \
         DEV/0-7000 (3/24.0/PIX) DEV/0-f000 (3/24.0/PIX) DEV/0-47000 (6/16.0/SYS) \
         DEV/0-4e000 (6/16.0/SYS) DEV/0-87000 (6/16.0/SYS) DEV/0-90000 (6/16.0/SYS) \
         DEV/0-b7000 (6/16.0/SYS) DEV/0-bd000 (6/16.0/SYS)"
    );
}

/// `local_gpu_of_net` answers in one period of each GPU's NET cycle what NCCL's
/// `ncclTopoGetLocalGpu` finds by trying channel 0..MAXCHANNELS on every local GPU in turn.
#[test]
fn local_gpu_of_net_is_nccls_channel_walk() {
    let mut files: Vec<(String, Option<&str>)> = std::fs::read_dir(root().join("topologies"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .map(|p| (p.to_string_lossy().into_owned(), None))
        .collect();
    for rel in [
        "alibaba/topo_8A100_4CX6.xml",
        "alibaba/topo_4A100_2CX6.xml",
        "oci/H100-topology.xml",
        "pcie-rtx3090/topo.xml",
    ] {
        files.push((vendor(rel), None));
    }
    for (rel, gpu) in [
        ("aws/p4d-24xl-topo.xml", "a100"),
        ("aws/p5.48xl-topo.xml", "h100"),
        ("azure/ndv4-topo.xml", "a100"),
        ("azure/ndv2-topo.xml", "v100"),
    ] {
        files.push((vendor(rel), Some(gpu)));
    }
    let mut checked = 0;
    for (file, gpu) in &files {
        for policy in [
            topo::settings::NetDevsPolicy::Auto,
            topo::settings::NetDevsPolicy::All,
            topo::settings::NetDevsPolicy::Max(1),
            topo::settings::NetDevsPolicy::Max(3),
        ] {
            let settings = TopoSettings {
                netdevs_policy: policy,
                ..TopoSettings::default()
            };
            let completion = gpu.map(|g| Completion {
                gpu: Some(gpu_model(g).unwrap()),
                nic_speed_mbps: None,
            });
            let c = Cluster::load(file, 2, &settings, completion).unwrap();
            let t = &c.nodes[0].topo;
            for n in 0..t.system.count(NodeKind::Net) {
                let gpus = t.get_local(NodeKind::Net, n, NodeKind::Gpu);
                let walk = (0..64)
                    .find_map(|c| gpus.iter().copied().find(|&g| t.local_net(g, c) == Some(n)));
                assert_eq!(t.local_gpu_of_net(n), walk, "{file} {policy:?} NET {n}");
                assert_eq!(t.net_local_gpu[n], walk.map_or(-1, |g| g as i32));
                checked += 1;
            }
        }
    }
    assert!(checked > 200, "{checked}");
}
