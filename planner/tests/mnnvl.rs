//! Multi-node NVLink communicators on GB200 NVL72 trays, checked against NCCL 2.30.7's rules
//! (`src/init.cc` `initTransportsRank`, `src/mnnvl.cc` `ncclMnnvlCheck`, `src/graph/topo.cc`
//! `ncclTopoGetSystem`, `src/transport/nvls.cc` `ncclNvlsTuning`) and, with multi-node NVLink
//! off, against what NCCL 2.30.7 printed for two trays (tests/nccl-2.30.7).

use planner::split::parse_dims;
use planner::{CommPlan, Planner, PlannerSettings};
use std::sync::Arc;
use topo::{Cluster, Completion, NvlDomains};

fn tray_file() -> String {
    format!(
        "{}/../topologies/gb200-nvl72-tray.xml",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn planner(trays: usize, domain: Option<usize>, env: &[(&str, &str)]) -> Planner {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let s =
        PlannerSettings::from_lookup(|k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
            .unwrap();
    let file = tray_file();
    let xml = Arc::new(topo::read_xml(&file).unwrap());
    let hosts: Vec<_> = (0..trays).map(|_| (file.clone(), xml.clone())).collect();
    let mut c = Cluster::from_hosts(&hosts, &s.topo, Completion::default()).unwrap();
    if let Some(g) = domain {
        c.set_nvl_domains(NvlDomains::Gpus(g)).unwrap();
    }
    Planner::new(c, s)
}

fn world(trays: usize, domain: Option<usize>, env: &[(&str, &str)]) -> CommPlan {
    planner(trays, domain, env).plan_world().unwrap()
}

fn lines(p: &CommPlan, rank: usize) -> Vec<String> {
    planner::format::info_lines(p, rank)
}

fn line<'a>(ls: &'a [String], start: &str) -> &'a str {
    ls.iter()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting with {start:?} in {ls:#?}"))
}

/// The comm line without NCCL's `comm %p`.
fn comm_line(ls: &[String]) -> &str {
    let l = line(ls, "comm ");
    &l[l.find(" rank ").unwrap() + 1..]
}

#[test]
fn a_rack_of_18_trays_is_one_node_of_72_local_ranks() {
    let p = world(18, None, &[]);
    let ls = lines(&p, 0);
    assert_eq!(
        comm_line(&ls),
        "rank 0 nRanks 72 nNodes 1 localRanks 72 localRank 0 MNNVL 1"
    );
    assert_eq!(
        line(&ls, "MNNVL 1"),
        "MNNVL 1 cliqueId 7ffe cliqueSize 72 cliqueRank 0 nvlDomainSize 72"
    );
    // GPU 0 of a tray is 0008:01:00.0; the fabric line carries its bus id as NCCL packs it.
    assert!(line(&ls, "MNNVL busId").starts_with("MNNVL busId 0x801000 fabric UUID "));
    let l41 = lines(&p, 41);
    assert_eq!(
        comm_line(&l41),
        "rank 41 nRanks 72 nNodes 1 localRanks 72 localRank 41 MNNVL 1"
    );
    assert_eq!(
        line(&l41, "MNNVL 1"),
        "MNNVL 1 cliqueId 7ffe cliqueSize 72 cliqueRank 41 nvlDomainSize 72"
    );
    // One node: every ring visits the 72 ranks over NVLink, no NET in any graph.
    assert_eq!(
        (p.n_nodes, p.max_local_ranks, p.min_local_ranks),
        (1, 72, 72)
    );
    assert!(p.graphs.ring.type_inter.to_string() != "NET");
    for c in 0..p.channels.len() {
        let mut ring: Vec<usize> = p.ring_from_rank0(c).collect();
        ring.sort_unstable();
        assert_eq!(ring, (0..72).collect::<Vec<_>>(), "channel {c}");
    }
    // NVLS over the rack: one node of sm100 GPUs takes NVLS_NCHANNELS_SM100_NVL = 24 channels.
    assert!(p.nvls_support);
    assert_eq!(p.nvls_channels, 24);
    assert!(p.nvls_heads.is_empty() || p.n_nodes == 1);
    // The tree is a chain through the node: depth nRanks/nNodes - 1 + log2(nNodes).
    assert_eq!(p.tree_depth, 71);
    // Every GPU reaches every other over NVLink: P2P to all 71 peers.
    assert!(p.all_nvlink);
}

#[test]
fn with_mnnvl_off_two_trays_plan_as_nccl_printed() {
    // NCCL_MNNVL_ENABLE=0 skips the fabric check: the plan is the one NCCL 2.30.7 printed for
    // two trays without fabric information (tests/nccl-2.30.7/gb200-nvl72-tray-2node.txt).
    let dir = format!("{}/tests/nccl-2.30.7", env!("CARGO_MANIFEST_DIR"));
    let p = world(2, None, &[("NCCL_MNNVL_ENABLE", "0")]);
    let graph_channel = |l: &String| {
        l.trim_start()
            .split_once(" : ")
            .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
    };
    let kept = |l: &String| {
        [
            "Pattern ",
            "Tree ",
            "Channel ",
            "Ring ",
            "Trees",
            "NVLS Head",
            "NVLS Trees",
            "Tuning P2P",
        ]
        .iter()
        .any(|k| l.starts_with(k))
            || l.contains(" coll channels, ")
            || graph_channel(l)
    };
    for (file, rank) in [
        ("gb200-nvl72-tray-2node.txt", 0),
        ("ranks/gb200-nvl72-tray-2node@1.txt", 1),
        ("ranks/gb200-nvl72-tray-2node@7.txt", 7),
    ] {
        let expected: Vec<String> = std::fs::read_to_string(format!("{dir}/{file}"))
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        // Rank files hold the rank's own lines, not its host's search.
        let ours: Vec<String> = lines(&p, rank)
            .into_iter()
            .filter(kept)
            .filter(|l| rank == 0 || !(l.starts_with("Pattern ") || graph_channel(l)))
            .collect();
        assert_eq!(ours, expected, "{file}");
    }
    let ls = lines(&p, 0);
    assert!(comm_line(&ls).ends_with("nNodes 2 localRanks 4 localRank 0 MNNVL 0"));
    assert!(!ls.iter().any(|l| l.starts_with("MNNVL 1")));
    // The automatic mode fuses the same two trays into one node.
    let on = world(2, None, &[]);
    assert_eq!(
        comm_line(&lines(&on, 0)),
        "rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 1"
    );
}

#[test]
fn mnnvl_needs_hosts_and_p2p_unless_forced() {
    // One tray: the automatic mode does not check the fabric (nNodes 1 in AllGather1).
    let one = world(1, None, &[]);
    assert!(comm_line(&lines(&one, 0)).ends_with("MNNVL 0"));
    // NCCL_MNNVL_ENABLE=1 checks it anyway: a clique of the tray's 4 GPUs.
    let forced = world(1, None, &[("NCCL_MNNVL_ENABLE", "1")]);
    let ls = lines(&forced, 0);
    assert!(comm_line(&ls).ends_with("nNodes 1 localRanks 4 localRank 0 MNNVL 1"));
    assert_eq!(
        line(&ls, "MNNVL 1"),
        "MNNVL 1 cliqueId 7ffe cliqueSize 4 cliqueRank 0 nvlDomainSize 4"
    );
    // P2P disabled: no check under the automatic mode.
    let nop2p = world(2, None, &[("NCCL_P2P_DISABLE", "1")]);
    assert!(comm_line(&lines(&nop2p, 0)).ends_with("nNodes 2 localRanks 4 localRank 0 MNNVL 0"));
    // NCCL_MNNVL_UUID gives every GPU one cluster UUID: two domains become one clique.
    let merged = world(4, Some(8), &[("NCCL_MNNVL_UUID", "7")]);
    assert!(comm_line(&lines(&merged, 0)).contains("nNodes 1 localRanks 16"));
    assert!(line(&lines(&merged, 0), "MNNVL busId").contains("fabric UUID 7.7 "));
    // NCCL_MNNVL_CLIQUE_ID=-2: the clique id is a hash of the rack, the same on both trays.
    let rack = world(2, None, &[("NCCL_MNNVL_CLIQUE_ID", "-2")]);
    let clique = line(&lines(&rack, 0), "MNNVL 1").to_string();
    assert!(
        clique.ends_with("cliqueSize 8 cliqueRank 0 nvlDomainSize 8"),
        "{clique}"
    );
    assert!(!clique.contains("cliqueId 7ffe "), "{clique}");
}

#[test]
fn two_domains_are_two_nodes_joined_by_the_network() {
    let p = world(4, Some(8), &[]);
    let ls = lines(&p, 0);
    assert_eq!(
        comm_line(&ls),
        "rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 1"
    );
    assert_eq!(
        line(&ls, "MNNVL 1"),
        "MNNVL 1 cliqueId 7ffe cliqueSize 8 cliqueRank 0 nvlDomainSize 8"
    );
    assert_eq!(
        p.node_ranks,
        vec![(0..8).collect::<Vec<_>>(), (8..16).collect()]
    );
    // The rings leave each domain through a NET; both domains' searches see the NICs of both of
    // their trays (NET/0-x and NET/1-x).
    assert_eq!(p.graphs.ring.type_inter.to_string(), "P2C");
    let search = &p.searches[0];
    let nets: Vec<i64> = search
        .graphs
        .tree
        .inter
        .iter()
        .take(2 * search.graphs.tree.n_channels as usize)
        .copied()
        .collect();
    assert!(nets.iter().any(|&n| n >> 56 == 0) && nets.iter().any(|&n| n >> 56 == 1));
    // Two nodes of sm100 GPUs with 50 GB/s NICs: NVLSTree takes 32 channels.
    assert!(p.nvls_support);
    assert_eq!(p.nvls_channels, 32);
    assert!(line(&ls, "Tuning P2P").ends_with("maxP2pPeers = 16"));
}

#[test]
fn tensor_parallel_inside_a_domain_data_parallel_across() {
    let pl = planner(4, Some(8), &[]);
    let job = pl
        .plan_job(&pl.world_members(), &[parse_dims("tp=8,dp=2").unwrap()])
        .unwrap();
    let tp = job.splits.iter().find(|c| c.name == "tp1").unwrap();
    assert_eq!(
        comm_line(&lines(tp, 0)),
        "rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 1"
    );
    assert_eq!(tp.ranks[0].world_rank, 8);
    assert_eq!((tp.ranks[0].host, tp.ranks[7].host), (2, 3));
    // A DP pair spans the two domains: different cluster UUIDs, so each rank is alone in its
    // clique and its domain, and MNNVL stays off.
    let dp = job.splits.iter().find(|c| c.name == "dp5").unwrap();
    assert_eq!(
        comm_line(&lines(dp, 1)),
        "rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0"
    );
    assert_eq!(dp.ranks[1].world_rank, 13);
}

#[test]
fn twenty_racks_are_twenty_nodes() {
    let p = world(360, None, &[]);
    let ls = lines(&p, 0);
    assert_eq!(
        comm_line(&ls),
        "rank 0 nRanks 1440 nNodes 20 localRanks 72 localRank 0 MNNVL 1"
    );
    assert_eq!(p.searches.len(), 20);
    let last = lines(&p, 1439);
    assert_eq!(
        line(&last, "MNNVL 1"),
        "MNNVL 1 cliqueId 7ffe cliqueSize 72 cliqueRank 71 nvlDomainSize 72"
    );
}
