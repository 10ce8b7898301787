//! The planner's acceptance checks: the worked examples of docs/worked-examples.md (derived from
//! NCCL 2.30.7's code), the 2-node TP=8/DP=2 job, NVLS availability, graph-file round trips,
//! determinism, and every real topology file planned on 1 and 2 nodes.

use planner::split::parse_dims;
use planner::{CommPlan, JobPlan, Member, Pattern, PlanError, Planner, PlannerSettings, SplitSpec};
use std::sync::Arc;
use topo::{Cluster, Completion, NodeKind, PathType};

fn lib(f: &str) -> String {
    format!("{}/../topologies/{f}", env!("CARGO_MANIFEST_DIR"))
}
fn vendor(f: &str) -> String {
    format!("{}/../topologies/vendor/{f}", env!("CARGO_MANIFEST_DIR"))
}

fn cluster(file: &str, nodes: usize, s: &PlannerSettings, gpu: Option<&str>) -> Cluster {
    let xml = Arc::new(topo::read_xml(file).unwrap());
    let hosts: Vec<_> = (0..nodes)
        .map(|_| (file.to_string(), xml.clone()))
        .collect();
    let completion = Completion {
        gpu: gpu.map(|g| topo::profiles::gpu_model(g).unwrap()),
        nic_speed_mbps: None,
    };
    Cluster::from_hosts(&hosts, &s.topo, completion).unwrap()
}

fn plan_world(c: &Cluster, s: &PlannerSettings) -> Result<CommPlan, PlanError> {
    Planner::new(c.clone(), s.clone()).plan_world()
}

fn plan_job(
    c: &Cluster,
    members: &[Member],
    s: &PlannerSettings,
    specs: &[SplitSpec],
) -> Result<JobPlan, PlanError> {
    Planner::new(c.clone(), s.clone()).plan_job(members, specs)
}

/// A communicator planned on its own (a planner with nothing cached).
fn plan_comm(
    c: &Cluster,
    members: &[Member],
    name: &str,
    s: &PlannerSettings,
    parent: Option<&CommPlan>,
) -> Result<CommPlan, PlanError> {
    Planner::new(c.clone(), s.clone()).plan(members, name, parent)
}

/// Every channel's ring from rank 0.
fn rings(p: &CommPlan) -> Vec<Vec<usize>> {
    (0..p.channels.len())
        .map(|c| p.ring_from_rank0(c).collect())
        .collect()
}

fn world(file: &str, nodes: usize) -> CommPlan {
    let s = PlannerSettings::default();
    plan_world(&cluster(file, nodes, &s, None), &s).unwrap()
}

fn with_env(kv: &[(&str, &str)]) -> PlannerSettings {
    PlannerSettings::from_lookup(|k| kv.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
        .unwrap()
}

#[test]
fn dgx_a100_one_node() {
    let p = world(&lib("dgx-a100.xml"), 1);
    let r = &p.graphs.ring;
    assert_eq!(r.pattern, Pattern::Ring);
    assert_eq!((r.n_channels, r.bw_intra, r.bw_inter), (12, 20.0, 20.0));
    assert_eq!((r.type_intra, r.type_inter), (PathType::Nvl, PathType::Pix));
    assert_eq!(p.n_channels, 24);
    assert_eq!(rings(&p)[0], (0..8).collect::<Vec<_>>());
    let line = planner::format::ring_line(
        0,
        p.n_channels,
        p.n_ranks,
        p.ring_from_rank0(0),
        Default::default(),
    );
    assert_eq!(line, "Channel 00/24 : 0 1 2 3 4 5 6 7");
    assert_eq!((p.p2p_channels, p.p2p_channels_per_peer), (32, 32));
    assert!(!p.nvls_support, "A100 has no NVLS");
    assert_eq!(p.nvls_channels, 0);
    // 2 x the search's channels; every channel is a ring over all 8 ranks.
    for ring in &rings(&p) {
        let mut s = ring.clone();
        s.sort_unstable();
        assert_eq!(s, (0..8).collect::<Vec<_>>());
    }
}

#[test]
fn dgx_h100_one_node() {
    let p = world(&lib("dgx-h100.xml"), 1);
    assert_eq!(p.n_channels, 24);
    assert_eq!(p.graphs.ring.n_channels, 12);
    assert!(p.nvls_support);
    // NVLS search: one head per GPU, 8 channels (min = max = nGPUs on one node).
    assert_eq!(p.graphs.nvls.n_channels, 8);
    assert_eq!(p.nvls_channels, 16);
    let off = with_env(&[("NCCL_NVLS_ENABLE", "0")]);
    let q = plan_world(&cluster(&lib("dgx-h100.xml"), 1, &off, None), &off).unwrap();
    assert!(!q.nvls_support);
    assert_eq!(q.nvls_channels, 0);
    assert_eq!(q.graphs.nvls.n_channels, 0);
}

#[test]
fn dgx_a100_two_nodes_one_ring_per_nic() {
    let p = world(&lib("dgx-a100.xml"), 2);
    let r = &p.searches[0].graphs.ring;
    assert_eq!((r.n_channels, r.bw_intra, r.bw_inter), (8, 24.0, 24.0));
    assert_eq!(p.n_channels, 16);
    assert_eq!(p.n_nodes, 2);
    let mut entries: Vec<i64> = (0..8).map(|c| r.inter[2 * c]).collect();
    entries.sort_unstable();
    entries.dedup();
    assert_eq!(
        entries.len(),
        8,
        "each of the 8 NICs enters one ring channel"
    );
    // The ring crosses nodes exactly twice per channel.
    for ring in &rings(&p) {
        let crossings = (0..16)
            .filter(|&i| (ring[i] / 8) != (ring[(i + 1) % 16] / 8))
            .count();
        assert_eq!(crossings, 2);
    }
    // Double binary tree over 2 nodes: rank 0 is the root of tree 0 with node 1's head as child.
    assert_eq!(p.channels[0][0].tree_up, -1);
    assert!(p.channels[0][0].tree_down.contains(&8));
}

#[test]
fn tp8_dp2_job() {
    let s = PlannerSettings::default();
    let c = cluster(&lib("dgx-a100.xml"), 2, &s, None);
    let members = planner::world_members(&c);
    let job = plan_job(&c, &members, &s, &[parse_dims("tp=8,dp=2").unwrap()]).unwrap();
    assert_eq!(job.world.n_ranks, 16);
    let tp: Vec<_> = job
        .splits
        .iter()
        .filter(|c| c.name.starts_with("tp"))
        .collect();
    let dp: Vec<_> = job
        .splits
        .iter()
        .filter(|c| c.name.starts_with("dp"))
        .collect();
    assert_eq!((tp.len(), dp.len()), (2, 8));
    for t in &tp {
        assert_eq!((t.n_ranks, t.n_nodes), (8, 1));
        assert!(t.searches[0].graphs.ring.inter.iter().all(|&x| x == 0));
        assert_eq!(t.graphs.ring.type_intra, PathType::Nvl);
        assert_eq!(t.n_channels, 24);
    }
    for (i, d) in dp.iter().enumerate() {
        assert_eq!((d.n_ranks, d.n_nodes), (2, 2));
        // One GPU per node: the i-th GPU of each host, through its NIC.
        assert_eq!(d.ranks[0].world_rank, i);
        assert_eq!(d.ranks[1].world_rank, i + 8);
        assert_eq!(d.ranks[0].dev, i as i32);
        let g = &d.searches[0].graphs.ring;
        assert!(g.n_channels >= 1);
        assert!(g.type_inter <= PathType::Pxb);
        assert_ne!(g.type_inter, PathType::Dis);
    }
    // The job shares work between communicators (one topology for the world's and the TP
    // group's GPUs of a host, one checked XML per host, searches run ahead in parallel); every
    // communicator must come out exactly as when it is planned on its own.
    let alone = |name: &str, m: &[planner::Member], parent: Option<&CommPlan>| {
        serde_json::to_string(&plan_comm(&c, m, name, &s, parent).unwrap()).unwrap()
    };
    assert_eq!(
        serde_json::to_string(&job.world).unwrap(),
        alone("world", &members, None)
    );
    for split in &job.splits {
        let m: Vec<planner::Member> = split.ranks.iter().map(|r| members[r.world_rank]).collect();
        assert_eq!(
            serde_json::to_string(split).unwrap(),
            alone(&split.name, &m, Some(&job.world)),
            "{}",
            split.name
        );
    }
}

/// The job's plans do not depend on how many threads plan it (searches, shared topologies and
/// split communicators run in parallel, results are taken in order).
#[test]
fn job_is_the_same_on_one_thread_and_on_many() {
    let s = PlannerSettings::default();
    for (f, dims) in [("dgx-a100.xml", "tp=8,dp=2"), ("dgx-h100.xml", "tp=4,dp=4")] {
        let c = cluster(&lib(f), 2, &s, None);
        let members = planner::world_members(&c);
        let spec = [parse_dims(dims).unwrap()];
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let job = pool.install(|| plan_job(&c, &members, &s, &spec).unwrap());
            serde_json::to_string(&(&job.world, &job.splits)).unwrap()
        };
        let one = on(1);
        assert_eq!(one, on(2), "{f}");
        assert_eq!(one, on(5), "{f}");
    }
}

#[test]
fn graph_file_round_trip() {
    for (f, n) in [
        ("dgx-a100.xml", 2),
        ("dgx-h100.xml", 1),
        ("dgx-a100.xml", 1),
    ] {
        let s = PlannerSettings::default();
        let c = cluster(&lib(f), n, &s, None);
        let p = plan_world(&c, &s).unwrap();
        let search = &p.searches[0];
        let sys = &search.topo.as_ref().unwrap().system;
        let xml = topo::xml::write(&planner::graph_xml::graphs_to_xml(search, sys));
        let dir =
            std::env::temp_dir().join(format!("ncclsim-graph-{}-{f}-{n}", std::process::id()));
        std::fs::write(&dir, &xml).unwrap();
        let s2 = PlannerSettings {
            graph_file: Some(dir.to_string_lossy().into_owned()),
            ..s.clone()
        };
        let p2 = plan_world(&c, &s2).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert!(p2.searches[0]
            .notes
            .iter()
            .any(|n| n.contains("loaded from XML graph")));
        // nHops is the search's tie-breaker and not part of the file; NCCL returns a loaded graph
        // before the NVLS search would narrow min/maxChannels, so those differ too.
        let strip = |p: &CommPlan| {
            let mut v = serde_json::to_value(&p.graphs).unwrap();
            for g in v.as_object_mut().unwrap().values_mut() {
                let g = g.as_object_mut().unwrap();
                for k in ["n_hops", "min_channels", "max_channels"] {
                    g.remove(k);
                }
            }
            v
        };
        assert_eq!(strip(&p), strip(&p2), "{f} x{n}");
        assert_eq!(p.channels, p2.channels, "{f} x{n}");
        assert_eq!(rings(&p), rings(&p2));
        assert_eq!(p.nvls_channels, p2.nvls_channels);
    }
}

#[test]
fn same_input_same_plan() {
    let a = serde_json::to_string(&world(&lib("dgx-a100.xml"), 2)).unwrap();
    let b = serde_json::to_string(&world(&lib("dgx-a100.xml"), 2)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn settings_change_plans() {
    let s = with_env(&[("NCCL_MAX_NCHANNELS", "4")]);
    let p = plan_world(&cluster(&lib("dgx-a100.xml"), 1, &s, None), &s).unwrap();
    assert_eq!(p.n_channels, 4);
    let s = with_env(&[("NCCL_MIN_NCHANNELS", "32")]);
    let p = plan_world(&cluster(&lib("dgx-a100.xml"), 1, &s, None), &s).unwrap();
    assert_eq!(p.n_channels, 32);
    assert_eq!(rings(&p)[31], rings(&p)[7]);
    let s = with_env(&[("NCCL_CROSS_NIC", "0")]);
    let p = plan_world(&cluster(&lib("dgx-h100.xml"), 2, &s, None), &s).unwrap();
    assert_eq!(p.graphs.ring.cross_nic, 0);
}

/// Skeletons and the GPU model they need.
const REAL: &[(&str, Option<&str>)] = &[
    ("alibaba/topo_1A100_1CX6.xml", None),
    ("alibaba/topo_2A100_1CX6.xml", None),
    ("alibaba/topo_4A100_2CX6.xml", None),
    ("alibaba/topo_8A100_4CX6.xml", None),
    ("aws/g5.48xl-topo.xml", Some("A10G")),
    ("aws/p4d-24xl-topo.xml", Some("A100-SXM4")),
    ("aws/p4de-24xl-topo.xml", Some("A100-SXM4")),
    ("aws/p5.48xl-topo.xml", Some("H100-SXM5")),
    ("azure/ncv4-topo.xml", None),
    ("azure/ndv2-topo.xml", Some("V100-SXM2")),
    ("azure/ndv4-topo.xml", Some("A100-SXM4")),
    ("azure/ndv5-topo.xml", Some("H100-SXM5")),
    ("oci/H100-topology-kubernetes.xml", None),
    ("oci/H100-topology.xml", None),
    ("oci/topo-flattened-b4.xml", Some("A100-SXM4")),
    ("oci/topo-flattened.xml", Some("A100-SXM4")),
    ("pcie-rtx3090/topo.xml", None),
];

#[test]
fn every_real_topology_plans_on_one_and_two_nodes() {
    let s = PlannerSettings::default();
    for (f, gpu) in REAL {
        for n in [1, 2] {
            let c = cluster(&vendor(f), n, &s, *gpu);
            let p = plan_world(&c, &s).unwrap_or_else(|e| panic!("{f} x{n}: {e}"));
            let ngpus = c.nodes[0].topo.system.count(NodeKind::Gpu);
            assert_eq!(p.n_ranks, ngpus * n, "{f} x{n}");
            assert!(p.n_channels >= 1 && p.n_channels <= 64, "{f} x{n}");
            // Every ring visits every rank once.
            for (ch, ring) in rings(&p).iter().enumerate() {
                let mut r = ring.clone();
                r.sort_unstable();
                r.dedup();
                assert_eq!(r.len(), p.n_ranks, "{f} x{n} channel {ch}");
            }
            let again = plan_world(&c, &s).unwrap();
            assert_eq!(
                serde_json::to_string(&p).unwrap(),
                serde_json::to_string(&again).unwrap(),
                "{f} x{n} is not deterministic"
            );
        }
    }
}

#[test]
fn split_errors_are_clear() {
    let s = PlannerSettings::default();
    let c = cluster(&lib("dgx-a100.xml"), 2, &s, None);
    let m = planner::world_members(&c);
    let e = plan_job(&c, &m, &s, &[parse_dims("tp=8,dp=4").unwrap()]).unwrap_err();
    assert!(
        e.to_string()
            .contains("multiply to 32 but the world has 16"),
        "{e}"
    );
    let bad = [planner::Member { host: 5, dev: 0 }];
    let e = plan_comm(&c, &bad, "x", &s, None).unwrap_err();
    assert!(e.to_string().contains("host 5"), "{e}");
    let dup = [m[0], m[0]];
    let e = plan_comm(&c, &dup, "x", &s, None).unwrap_err();
    assert!(e.to_string().contains("one rank per GPU"), "{e}");
}

/// One planner shared by threads (as the runtime holds it) plans every communicator as a fresh
/// planner does, whichever thread searches a host first.
#[test]
fn shared_planner_plans_like_fresh_ones_from_many_threads() {
    let s = PlannerSettings::default();
    let c = cluster(&lib("dgx-h100.xml"), 2, &s, None);
    let members = planner::world_members(&c);
    let comms: Vec<(String, Vec<Member>)> = (0..4)
        .map(|i| (format!("tp{i}"), members[i * 4..i * 4 + 4].to_vec()))
        .chain(std::iter::once(("world".to_string(), members.clone())))
        .collect();
    let shared = Planner::new(c.clone(), s.clone());
    let got: Vec<String> = std::thread::scope(|sc| {
        let hs: Vec<_> = comms
            .iter()
            .map(|(n, m)| {
                let p = &shared;
                sc.spawn(move || serde_json::to_string(&p.plan(m, n, None).unwrap()).unwrap())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((n, m), g) in comms.iter().zip(got) {
        let alone = serde_json::to_string(&plan_comm(&c, m, n, &s, None).unwrap()).unwrap();
        assert_eq!(g, alone, "{n}");
    }
}

/// A graph file is input: every way it can disagree with the topology is an error naming the
/// file, line, column and element, never a panic or a huge allocation.
#[test]
fn bad_graph_files_are_errors() {
    let s = PlannerSettings::default();
    let c = cluster(&lib("dgx-a100.xml"), 2, &s, None);
    let p = plan_world(&c, &s).unwrap();
    let search = &p.searches[0];
    let sys = &search.topo.as_ref().unwrap().system;
    let good = topo::xml::write(&planner::graph_xml::graphs_to_xml(search, sys));
    let first_channel = {
        let i = good.find("    <channel>").unwrap();
        let j = good[i..].find("</channel>\n").unwrap() + i + "</channel>\n".len();
        good[i..j].to_string()
    };
    let many = |n: usize| {
        let g = good.replacen("nchannels=\"8\"", &format!("nchannels=\"{n}\""), 1);
        let k = g.find("</graph>").unwrap();
        format!("{}{}{}", &g[..k], first_channel.repeat(n - 8), &g[k..])
    };
    let cases: Vec<(String, &str)> = vec![
        (
            good.replacen("nchannels=\"8\"", "nchannels=\"-1\"", 1),
            "nchannels",
        ),
        (
            good.replacen("nchannels=\"8\"", "nchannels=\"-2147483648\"", 1),
            "nchannels",
        ),
        (
            good.replacen("nchannels=\"8\"", "nchannels=\"2000000000\"", 1),
            "nchannels",
        ),
        (
            good.replacen("nchannels=\"8\"", "nchannels=\"7\"", 1),
            "<channel> element",
        ),
        (many(100), "nchannels"),
        (many(1000), "nchannels"),
        (
            good.replacen(
                "<gpu dev=\"0x7\" rank=\"7\"/>",
                "<gpu dev=\"0\" rank=\"0\"/>",
                1,
            ),
            "twice",
        ),
        (
            good.replacen("<gpu dev=\"0x7\" rank=\"7\"/>", "", 1),
            "GPU(s)",
        ),
        (
            good.replacen("<gpu dev=\"0x7\" rank=\"7\"/>", "<gpu dev=\"0x9\"/>", 1),
            "not found",
        ),
        (
            good.replacen("<net dev=\"0\"/>", "<net dev=\"0x63\"/>", 1),
            "no such NET",
        ),
        (good.replacen("<net dev=\"0\"/>", "", 1), "<net>"),
        (
            good.replacen("speedintra=\"24\"", "speedintra=\"NaN\"", 1),
            "speedintra",
        ),
        (
            good.replacen("speedinter=\"24\"", "speedinter=\"-1\"", 1),
            "speedinter",
        ),
        (
            good.replacen("pattern=\"4\"", "pattern=\"1\"", 1),
            "pattern",
        ),
        (good.replacen("id=\"0\"", "id=\"4294967296\"", 1), "id"),
        (
            good.replacen("<channel>", "<chanel/><channel>", 1),
            "not a <channel>",
        ),
    ];
    for (i, (text, what)) in cases.iter().enumerate() {
        let path =
            std::env::temp_dir().join(format!("ncclsim-badgraph-{}-{i}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let s2 = PlannerSettings {
            graph_file: Some(path.to_string_lossy().into_owned()),
            ..s.clone()
        };
        // Shown with the test's output if planning this case panics.
        eprintln!("case {i}: {what}");
        let r = plan_world(&c, &s2);
        std::fs::remove_file(&path).unwrap();
        let err = r.expect_err(&format!("case {i} accepted")).to_string();
        let name = path.to_string_lossy().into_owned();
        assert!(err.starts_with(&format!("{name}:")), "case {i}: {err}");
        assert!(err.contains(what), "case {i}: {err}");
    }
}

/// A node of `n` GPUs with an NVLink between every two of them (the deepest search recursion).
fn all_to_all_nvlink(n: usize) -> String {
    let bus = |i: usize| format!("0000:{:02x}:{:02x}.0", 1 + i / 32, i % 32);
    let mut s = String::from("<system version=\"1\"><cpu numaid=\"0\" affinity=\"ff\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"85\">");
    for i in 0..n {
        s += &format!("<pci busid=\"{}\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"><gpu dev=\"{i}\" sm=\"80\" rank=\"{i}\" gdr=\"1\">", bus(i));
        for j in (0..n).filter(|&j| j != i) {
            s += &format!(
                "<nvlink target=\"{}\" count=\"1\" tclass=\"0x030200\"/>",
                bus(j)
            );
        }
        s += "</gpu></pci>";
    }
    s + "</cpu></system>"
}

#[test]
fn a_large_node_searches_on_a_stack_of_its_own() {
    // The search recurses once per GPU per channel: 200 GPUs with all-to-all NVLinks go thousands
    // of levels deep, more than a test thread's 2 MiB stack holds in a debug build.
    let s = PlannerSettings::default();
    let xml = Arc::new(topo::xml::parse(&all_to_all_nvlink(200), "a2a.xml").unwrap());
    let hosts = vec![("a2a.xml".to_string(), xml)];
    let c = Cluster::from_hosts(&hosts, &s.topo, Completion::default()).unwrap();
    let p = plan_world(&c, &s).unwrap();
    assert_eq!(p.n_ranks, 200);
    assert!(p.graphs.ring.n_channels >= 1);
}

#[test]
fn hosts_with_the_same_search_share_it_without_a_prefetch() {
    // plan_world searches each distinct host once, whether or not a job prefetched the searches.
    let s = PlannerSettings::default();
    let c = cluster(&lib("dgx-a100.xml"), 4, &s, None);
    let p = plan_world(&c, &s).unwrap();
    let topo0 = p.searches[0].topo.as_ref().unwrap();
    for n in &p.searches[1..] {
        assert!(Arc::ptr_eq(topo0, n.topo.as_ref().unwrap()));
    }
}

#[test]
fn a_gpu_used_twice_names_both_ranks_and_the_file() {
    let s = PlannerSettings::default();
    let c = cluster(&lib("dgx-a100.xml"), 2, &s, None);
    let m = |host, dev| Member { host, dev };
    let err = Planner::new(c, s)
        .plan(&[m(0, 0), m(1, 3), m(1, 3)], "x", None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rank 2 and rank 1 both use <gpu dev=\"3\"> of host 1 ("),
        "{err}"
    );
    assert!(err.contains("dgx-a100.xml)"), "{err}");
}

#[test]
fn channel_limits_nccl_clamps_are_warned_about() {
    let get = |k: &'static str, v: &'static str| move |n: &str| (n == k).then(|| v.to_string());
    for (k, v, want) in [
        (
            "NCCL_MAX_NCHANNELS",
            "0",
            "NCCL_MAX_NCHANNELS=0: NCCL uses at least 1 channel",
        ),
        (
            "NCCL_MAX_NCHANNELS",
            "-5",
            "NCCL_MAX_NCHANNELS=-5: NCCL uses at least 1 channel",
        ),
        (
            "NCCL_MAX_NRINGS",
            "99",
            "NCCL_MAX_NRINGS=99: NCCL 2.30.7 has at most 64 channels",
        ),
        (
            "NCCL_MIN_NCHANNELS",
            "-1",
            "NCCL_MIN_NCHANNELS=-1: a negative minimum",
        ),
    ] {
        let s = PlannerSettings::from_lookup(get(k, v)).unwrap();
        let w = s.warnings(get(k, v));
        assert!(w.len() == 1 && w[0].starts_with(want), "{k}={v}: {w:?}");
    }
    let s = PlannerSettings::from_lookup(get("NCCL_MAX_NCHANNELS", "8")).unwrap();
    assert!(s.warnings(get("NCCL_MAX_NCHANNELS", "8")).is_empty());
}
