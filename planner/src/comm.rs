//! Communicator planning: what every rank of a communicator computes in `initTransportsRank`
//! (NCCL 2.30.7 `src/init.cc`, `src/graph/connect.cc`, `trees.cc`, `rings.cc`, the P2P channel
//! part of `paths.cc`, `ncclNvlsInit`/`ncclNvlsTuning` in `transport/nvls.cc`).
//!
//! Each host of the communicator searches its graphs once (ranks on one host see the same
//! topology and find the same graphs); identical hosts with the same members share one search.
//! Then the per-rank results are combined as the AllGather3 step does (min channels and
//! bandwidths, max types), and Preset/Postset build the rings and trees.

use crate::graph::{graph_id, Pattern, TopoGraph};
use crate::graph_xml;
use crate::plan::{ChannelRank, CommGraphs, CommPlan, NodeSearch, RankInfo, TreeLine};
use crate::search::Searcher;
use crate::settings::PlannerSettings;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::Arc;
use topo::{BuildOptions, Cluster, HostXml, NodeKind, PathType, System, TopoError, Topology};

/// One GPU of a cluster: host index and CUDA/NVML device index on that host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Member {
    /// Host (cluster node) index.
    pub host: usize,
    /// `dev` of the GPU in the host's topology XML.
    pub dev: i32,
}

/// What a host search records about each GPU's NETs.
#[derive(Debug, Clone, Copy)]
pub struct GpuNets {
    /// The slowest of its NETs (`ncclTopoGetMinNetBw`'s per-rank part; 0 without NETs).
    pub min_bw: f32,
    /// `ncclTopoGetLocalNetCountByBw` (2.29+): NETs in channel order until their bandwidth
    /// reaches the GPU's bandwidth to its CPU, and their total bandwidth.
    pub count_by_bw: (usize, f32),
    /// `getLocalNetCountByBw` of 2.20-2.28: the closest NETs, in index order, while their total
    /// stays below the bandwidth of a link from the GPU straight to a CPU (none behind a switch).
    pub count_by_bw_2_20: usize,
}

/// A host's search: the topology its ranks see and the graphs found, in local rank labels
/// (0..k in the order of the comm's ranks on that host).
#[derive(Debug, Clone)]
pub struct HostSearch {
    /// The topology (only this comm's GPUs on the host).
    pub topo: Arc<Topology>,
    /// Ring, tree, CollNet chain, NVLS, CollNet direct.
    pub graphs: Vec<TopoGraph>,
    /// INFO lines printed by the search.
    pub notes: Vec<String>,
    /// Whether NVLS is supported on this host for this comm (`ncclNvlsInit`).
    pub nvls_support: bool,
    /// Search steps used.
    pub steps: u64,
    /// GPU index of each local rank label.
    pub labels: Vec<usize>,
    /// Per GPU: its NET facts.
    pub gpu_nets: Vec<GpuNets>,
}

type SearchKey = (usize, Vec<i32>, bool);

/// Reuses topologies and searches across communicators and hosts with identical inputs.
#[derive(Default)]
pub struct SearchCache {
    map: HashMap<SearchKey, Arc<HostSearch>>,
    /// Each host XML (by address) checked and NIC-fused.
    host_xml: HashMap<usize, Arc<HostXml>>,
    /// The NCCL_GRAPH_FILE, once read.
    graph_file: Option<Option<Arc<topo::XmlElement>>>,
}

impl SearchCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The graphs of the NCCL_GRAPH_FILE, read and parsed on first use (a failed read is not
    /// remembered, so every communicator reports it).
    fn graph_file(
        &mut self,
        settings: &PlannerSettings,
    ) -> topo::Result<Option<Arc<topo::XmlElement>>> {
        if self.graph_file.is_none() {
            let x = match &settings.graph_file {
                None => None,
                Some(f) => Some(Arc::new(topo::read_xml(f)?)),
            };
            self.graph_file = Some(x);
        }
        Ok(self.graph_file.clone().flatten())
    }
}

/// Search one host's graphs as `initTransportsRank` does.
fn search_host(
    topo: Arc<Topology>,
    settings: &PlannerSettings,
    graph_file: Option<&topo::XmlElement>,
    collnet: bool,
    file: &str,
) -> topo::Result<HostSearch> {
    let mut s = Searcher::new(&topo, settings);
    let ngpus = topo.system.count(NodeKind::Gpu);
    let loaded = |id: i32| -> topo::Result<Option<TopoGraph>> {
        match graph_file {
            None => Ok(None),
            Some(x) => graph_xml::graph_from_xml(x, &topo.system, id, file),
        }
    };
    let maxch = settings.topo.version.max_channels();
    let mut ring = TopoGraph::new(graph_id::RING, Pattern::Ring, 1, (maxch / 2) as i32);
    s.compute(&mut ring, loaded(graph_id::RING)?.as_ref());
    let mut tree = TopoGraph::new(
        graph_id::TREE,
        Pattern::BalancedTree,
        ring.n_channels,
        ring.n_channels,
    );
    s.compute(&mut tree, loaded(graph_id::TREE)?.as_ref());
    let mut chain = TopoGraph::new(
        graph_id::COLLNET_CHAIN,
        Pattern::Tree,
        ring.n_channels,
        ring.n_channels,
    );
    chain.coll_net = true;
    let mut direct = TopoGraph::new(
        graph_id::COLLNET_DIRECT,
        Pattern::CollnetDirect,
        1,
        maxch as i32,
    );
    direct.coll_net = true;
    if collnet {
        s.compute(&mut chain, loaded(graph_id::COLLNET_CHAIN)?.as_ref());
        s.compute(&mut direct, loaded(graph_id::COLLNET_DIRECT)?.as_ref());
    }
    let mut nvls = TopoGraph::new(graph_id::NVLS, Pattern::Nvls, 1, maxch as i32);
    let nvls_support = nvls_supported(&topo.system, settings, ngpus);
    if nvls_support {
        s.compute(&mut nvls, loaded(graph_id::NVLS)?.as_ref());
    }
    let gpu_nets = (0..ngpus)
        .map(|g| {
            let bw = topo
                .local_net_cycle(g)
                .iter()
                .map(|&n| topo.gpu_net(g, n).bw)
                .fold(f32::MAX, f32::min);
            GpuNets {
                min_bw: if bw < f32::MAX { bw } else { 0.0 },
                count_by_bw: local_net_count_by_bw(&topo, g),
                count_by_bw_2_20: local_net_count_by_bw_2_20(&topo, g),
            }
        })
        .collect();
    Ok(HostSearch {
        labels: local_gpu_of_label(&topo.system),
        gpu_nets,
        graphs: vec![ring, tree, chain, nvls, direct],
        notes: std::mem::take(&mut s.notes),
        steps: s.steps,
        nvls_support,
        topo: topo.clone(),
    })
}

/// `ncclNvlsInit`: NVLS multicast is what an HGX/DGX with NVSwitches and Fabric Manager reports
/// for sm90+ GPUs; `NCCL_NVLS_ENABLE=1` forces it, 0 disables it.
fn nvls_supported(sys: &System, settings: &PlannerSettings, ngpus: usize) -> bool {
    if settings.nvls_enable == 0 || ngpus < 2 {
        return false;
    }
    if settings.nvls_enable == 2 {
        let sm = sys.comp_cap().map(|c| c.0).unwrap_or(0);
        return sm >= 90 && sys.count(NodeKind::Nvs) > 0;
    }
    true
}

/// `ncclGetBtree`: (up, down0, down1, parentChildType) of `rank` in a binary tree over `n`.
pub fn btree(n: i32, rank: i32) -> (i32, i32, i32, i32) {
    let mut bit = 1;
    while bit < n {
        if bit & rank != 0 {
            break;
        }
        bit <<= 1;
    }
    if rank == 0 {
        return (-1, -1, if n > 1 { bit >> 1 } else { -1 }, 0);
    }
    let mut up = (rank ^ bit) | (bit << 1);
    if up >= n {
        up = rank ^ bit;
    }
    let ctype = if rank < up { 0 } else { 1 };
    let mut lowbit = bit >> 1;
    let d0 = if lowbit == 0 { -1 } else { rank - lowbit };
    let mut d1 = if lowbit == 0 { -1 } else { rank + lowbit };
    while d1 >= n {
        d1 = if lowbit == 0 { -1 } else { rank + lowbit };
        lowbit >>= 1;
    }
    (up, d0, d1, ctype)
}

/// `ncclGetDtree`: the two trees, each as (up, down0, down1, parentChildType).
#[allow(clippy::type_complexity)]
pub fn dtree(n: i32, rank: i32) -> ((i32, i32, i32, i32), (i32, i32, i32, i32)) {
    let t0 = btree(n, rank);
    let t1 = if n % 2 == 1 {
        let shift = (rank - 1 + n) % n;
        let (u, d0, d1, ct) = btree(n, shift);
        let f = |x: i32| if x == -1 { -1 } else { (x + 1) % n };
        (f(u), f(d0), f(d1), ct)
    } else {
        let (u, d0, d1, ct) = btree(n, n - 1 - rank);
        let f = |x: i32| if x == -1 { -1 } else { n - 1 - x };
        (f(u), f(d0), f(d1), ct)
    };
    (t0, t1)
}

fn log2i(n: usize) -> usize {
    let mut l = 0;
    let mut n = n;
    while n > 1 {
        n >>= 1;
        l += 1;
    }
    l
}

fn pow2_up(x: usize) -> usize {
    x.max(1).next_power_of_two()
}
fn pow2_down(x: usize) -> usize {
    if x == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - x.leading_zeros())
    }
}

/// Per-rank results of Preset (`struct ncclTopoRanks`).
#[derive(Clone, Default)]
struct TopoRanks {
    cross_nic_ring: i32,
    ring_recv: Vec<i32>,
    ring_send: Vec<i32>,
    ring_prev: Vec<i32>,
    ring_next: Vec<i32>,
    tree_to_parent: Vec<i32>,
    tree_to_child0: Vec<i32>,
    tree_to_child1: Vec<i32>,
    nvls_heads: Vec<i32>,
}

/// The hosts of `members` in order of first appearance, and the comm ranks on each.
fn hosts_of(members: &[Member]) -> (Vec<usize>, HashMap<usize, Vec<usize>>) {
    let mut order: Vec<usize> = Vec::new();
    let mut ranks: HashMap<usize, Vec<usize>> = HashMap::default();
    for (r, m) in members.iter().enumerate() {
        ranks.entry(m.host).or_default().push(r);
        if !order.contains(&m.host) {
            order.push(m.host);
        }
    }
    (order, ranks)
}

/// What makes two host searches the same: the host's XML, the devs of the ranks on it (in
/// local-rank order) and whether the communicator spans hosts.
fn search_key(cluster: &Cluster, host: usize, devs: &[i32], inter: bool) -> SearchKey {
    (
        Arc::as_ptr(&cluster.nodes[host].xml) as usize,
        devs.to_vec(),
        inter,
    )
}

/// Build the topology of host `h` for the ranks on `devs` (the paths do not depend on whether
/// the communicator spans hosts; `inter` is set on the result).
fn build_topology(
    cluster: &Cluster,
    host_xml: &HostXml,
    h: usize,
    devs: &[i32],
    inter: bool,
    name: &str,
    settings: &PlannerSettings,
) -> topo::Result<Topology> {
    let node = &cluster.nodes[h];
    let opts = BuildOptions {
        version: settings.topo.version,
        gpus: Some(devs.to_vec()),
        rank_base: 0,
        inter,
        fusion: settings.topo.nic_fusion.clone(),
    };
    let sys = System::from_host_xml(host_xml, &node.source, &opts)?;
    if sys.count(NodeKind::Gpu) != devs.len() {
        return Err(TopoError::Model(format!(
            "communicator {name}: host {h} ({}) has no GPU with dev {:?}",
            node.source,
            devs.iter()
                .find(|d| !(0..sys.count(NodeKind::Gpu)).any(|g| sys.gpu(g).dev == **d))
                .unwrap_or(&-1)
        )));
    }
    Ok(Topology::new(sys, &settings.topo))
}

/// Search a host's graphs on `topo` (CollNet only when a NET of the host supports it).
fn search_topology(
    topo: Arc<Topology>,
    settings: &PlannerSettings,
    graph_file: Option<&topo::XmlElement>,
) -> topo::Result<HostSearch> {
    let collnet = settings.collnet_enable
        && topo.system.inter
        && (0..topo.system.count(NodeKind::Net)).any(|n| {
            topo.system
                .node(topo.system.nodes(NodeKind::Net)[n])
                .net()
                .is_some_and(|x| x.coll)
        });
    search_host(
        topo,
        settings,
        graph_file,
        collnet,
        settings.graph_file.as_deref().unwrap_or(""),
    )
}

impl SearchCache {
    /// The checked, NIC-fused XML of host `h` (made once per distinct XML).
    fn host_xml(
        &mut self,
        cluster: &Cluster,
        h: usize,
        settings: &PlannerSettings,
    ) -> topo::Result<Arc<HostXml>> {
        let node = &cluster.nodes[h];
        let key = Arc::as_ptr(&node.xml) as usize;
        if let Some(x) = self.host_xml.get(&key) {
            return Ok(x.clone());
        }
        let x = Arc::new(HostXml::prepare(
            &node.xml,
            &node.source,
            &settings.topo.nic_fusion,
            settings.topo.version,
        )?);
        self.host_xml.insert(key, x.clone());
        Ok(x)
    }

    /// Run, in parallel, every host search the communicators `comms` (member lists) will need
    /// and the cache does not hold yet. Searches on the same host GPUs share one topology (a
    /// communicator inside a host and one spanning hosts differ only in `inter`). Searches that
    /// fail are left out: planning the communicator then repeats them and reports the error in
    /// order.
    pub fn prefetch(
        &mut self,
        cluster: &Cluster,
        comms: &[Vec<Member>],
        settings: &PlannerSettings,
    ) {
        use rayon::prelude::*;
        let Ok(graph_file) = self.graph_file(settings) else {
            return;
        };
        // One group per (host XML, devs): the host to build it on and the `inter` values wanted.
        struct Group {
            host_xml: Arc<HostXml>,
            h: usize,
            devs: Vec<i32>,
            inters: Vec<bool>,
        }
        let mut groups: Vec<Group> = Vec::new();
        for members in comms {
            if members.iter().any(|m| m.host >= cluster.nodes.len()) {
                continue;
            }
            let (hosts, ranks) = hosts_of(members);
            let inter = hosts.len() > 1;
            for &h in &hosts {
                let devs: Vec<i32> = ranks[&h].iter().map(|&r| members[r].dev).collect();
                let key = search_key(cluster, h, &devs, inter);
                if self.map.contains_key(&key) {
                    continue;
                }
                let Ok(host_xml) = self.host_xml(cluster, h, settings) else {
                    continue;
                };
                match groups
                    .iter_mut()
                    .find(|g| Arc::ptr_eq(&g.host_xml, &host_xml) && g.devs == devs)
                {
                    Some(g) if !g.inters.contains(&inter) => g.inters.push(inter),
                    Some(_) => {}
                    None => groups.push(Group {
                        host_xml,
                        h,
                        devs,
                        inters: vec![inter],
                    }),
                }
            }
        }
        // Largest first, so that the two cores finish together.
        groups.sort_by_key(|g| std::cmp::Reverse(g.devs.len() * g.inters.len()));
        let done: Vec<(SearchKey, HostSearch)> = groups
            .into_par_iter()
            .flat_map(|g| {
                let built = build_topology(
                    cluster,
                    &g.host_xml,
                    g.h,
                    &g.devs,
                    g.inters[0],
                    "",
                    settings,
                );
                // The searches on one topology run in parallel too.
                let variants: Vec<(bool, Topology)> = match built {
                    Ok(topo) => {
                        let others: Vec<Topology> =
                            g.inters[1..].iter().map(|&i| topo.with_inter(i)).collect();
                        let all = std::iter::once(topo).chain(others);
                        g.inters.iter().copied().zip(all).collect()
                    }
                    Err(_) => Vec::new(),
                };
                let (h, devs, graph_file) = (g.h, g.devs, graph_file.as_deref());
                variants.into_par_iter().filter_map(move |(inter, t)| {
                    search_topology(Arc::new(t), settings, graph_file)
                        .ok()
                        .map(|hs| (search_key(cluster, h, &devs, inter), hs))
                })
            })
            .collect();
        for (key, hs) in done {
            self.map.insert(key, Arc::new(hs));
        }
    }
}

/// Plan a communicator over `members` (comm rank = index). `parent` is the communicator it was
/// split from, if any.
pub fn plan_comm(
    cluster: &Cluster,
    members: &[Member],
    name: &str,
    settings: &PlannerSettings,
    parent: Option<&CommPlan>,
) -> topo::Result<CommPlan> {
    plan_comm_cached(
        cluster,
        members,
        name,
        settings,
        parent,
        &mut SearchCache::new(),
    )
}

/// [`plan_comm`] reusing searches from `cache`.
pub fn plan_comm_cached(
    cluster: &Cluster,
    members: &[Member],
    name: &str,
    settings: &PlannerSettings,
    parent: Option<&CommPlan>,
    cache: &mut SearchCache,
) -> topo::Result<CommPlan> {
    check_members(cluster, members, name)?;
    let (host_order, host_ranks) = hosts_of(members);
    let inter = host_order.len() > 1;
    let graph_file = cache.graph_file(settings)?;
    // Search every host the cache does not hold yet.
    for &h in &host_order {
        let devs: Vec<i32> = host_ranks[&h].iter().map(|&r| members[r].dev).collect();
        let key = search_key(cluster, h, &devs, inter);
        if !cache.map.contains_key(&key) {
            let host_xml = cache.host_xml(cluster, h, settings)?;
            let topo = build_topology(cluster, &host_xml, h, &devs, inter, name, settings)?;
            let hs = search_topology(Arc::new(topo), settings, graph_file.as_deref())?;
            cache.map.insert(key, Arc::new(hs));
        }
    }
    Ok(assemble_from_cache(
        cluster,
        members,
        name,
        settings,
        parent,
        cache,
        &host_order,
        &host_ranks,
    )
    .expect("the cache holds every host search now"))
}

/// [`plan_comm_cached`] when `cache` already holds every search the communicator needs (`None`
/// when it does not); needs no exclusive access, so communicators can be put together in
/// parallel.
pub fn plan_comm_from_cache(
    cluster: &Cluster,
    members: &[Member],
    name: &str,
    settings: &PlannerSettings,
    parent: Option<&CommPlan>,
    cache: &SearchCache,
) -> Option<topo::Result<CommPlan>> {
    if let Err(e) = check_members(cluster, members, name) {
        return Some(Err(e));
    }
    let (host_order, host_ranks) = hosts_of(members);
    assemble_from_cache(
        cluster,
        members,
        name,
        settings,
        parent,
        cache,
        &host_order,
        &host_ranks,
    )
    .map(Ok)
}

/// Put a checked communicator together from the searches in `cache` (`None` when one is
/// missing).
#[allow(clippy::too_many_arguments)]
fn assemble_from_cache(
    cluster: &Cluster,
    members: &[Member],
    name: &str,
    settings: &PlannerSettings,
    parent: Option<&CommPlan>,
    cache: &SearchCache,
    host_order: &[usize],
    host_ranks: &HashMap<usize, Vec<usize>>,
) -> Option<CommPlan> {
    let inter = host_order.len() > 1;
    let mut host_search: HashMap<usize, Arc<HostSearch>> = HashMap::default();
    for &h in host_order {
        let devs: Vec<i32> = host_ranks[&h].iter().map(|&r| members[r].dev).collect();
        let hs = cache.map.get(&search_key(cluster, h, &devs, inter))?;
        host_search.insert(h, hs.clone());
    }
    Some(assemble(
        members,
        name,
        settings,
        parent,
        host_order,
        host_ranks,
        &host_search,
    ))
}

/// The errors a member list can have before anything is built: none, a host outside the
/// cluster, or a GPU used twice.
fn check_members(cluster: &Cluster, members: &[Member], name: &str) -> topo::Result<()> {
    let nranks = members.len();
    if nranks == 0 {
        return Err(TopoError::Model(format!("communicator {name}: no ranks")));
    }
    let mut seen: HashSet<Member> = HashSet::default();
    for (r, m) in members.iter().enumerate() {
        if m.host >= cluster.nodes.len() {
            return Err(TopoError::Model(format!(
                "communicator {name}: rank {r} is on host {} but the cluster has {} host(s)",
                m.host,
                cluster.nodes.len()
            )));
        }
        if !seen.insert(*m) {
            return Err(TopoError::Model(format!(
                "communicator {name}: rank {r} uses host {} GPU dev {} like an earlier rank (NCCL needs one rank per GPU)",
                m.host, m.dev
            )));
        }
    }
    Ok(())
}

/// Local GPU index (in the host system) of each local rank label.
fn local_gpu_of_label(sys: &System) -> Vec<usize> {
    let n = sys.count(NodeKind::Gpu);
    let mut v = vec![0; n];
    for g in 0..n {
        v[sys.gpu(g).rank as usize] = g;
    }
    v
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    members: &[Member],
    name: &str,
    settings: &PlannerSettings,
    parent: Option<&CommPlan>,
    host_order: &[usize],
    host_ranks: &HashMap<usize, Vec<usize>>,
    host_search: &HashMap<usize, Arc<HostSearch>>,
) -> CommPlan {
    let nranks = members.len();
    let version = settings.topo.version;
    let maxch = version.max_channels();
    // Translate a host's graphs from local labels to comm ranks.
    let to_comm = |h: usize, g: &TopoGraph| -> TopoGraph {
        let ranks = &host_ranks[&h];
        let mut g = g.clone();
        for x in g.intra.iter_mut() {
            *x = ranks[*x as usize] as i32;
        }
        g
    };
    let graphs_of: HashMap<usize, Vec<TopoGraph>> = host_order
        .iter()
        .map(|&h| {
            (
                h,
                host_search[&h]
                    .graphs
                    .iter()
                    .map(|g| to_comm(h, g))
                    .collect(),
            )
        })
        .collect();
    let (g_ring, g_tree, g_chain, g_nvls) = (0, 1, 2, 3);

    // Preset, per rank, with the rank's own graphs.
    let mut topo_ranks: Vec<TopoRanks> = vec![TopoRanks::default(); nranks];
    let mut own_nch = vec![0usize; nranks];
    for (r, m) in members.iter().enumerate() {
        let gs = &graphs_of[&m.host];
        let local = host_ranks[&m.host].len();
        let nch = gs[g_ring].n_channels.min(gs[g_tree].n_channels) as usize;
        own_nch[r] = nch;
        let tr = &mut topo_ranks[r];
        tr.cross_nic_ring = gs[g_ring].cross_nic;
        for c in 0..nch {
            let ring = gs[g_ring].channel(c, local);
            let tree = gs[g_tree].channel(c, local);
            if let Some(i) = ring.iter().position(|&x| x as usize == r) {
                tr.ring_recv.push(ring[0]);
                tr.ring_send.push(ring[local - 1]);
                tr.ring_prev.push(if i == 0 { -1 } else { ring[i - 1] });
                tr.ring_next
                    .push(if i == local - 1 { -1 } else { ring[i + 1] });
            }
            if tree.contains(&(r as i32)) {
                let pat = gs[g_tree].pattern;
                tr.tree_to_parent.push(tree[0]);
                tr.tree_to_child0.push(
                    tree[if pat == Pattern::Tree {
                        0
                    } else {
                        1.min(local - 1)
                    }],
                );
                tr.tree_to_child1.push(
                    tree[if pat == Pattern::SplitTree {
                        1.min(local - 1)
                    } else {
                        0
                    }],
                );
            }
        }
        let nv = &gs[g_nvls];
        for c in 0..nv.n_channels as usize {
            let head = nv.intra[c * local];
            if !tr.nvls_heads.contains(&head) {
                tr.nvls_heads.push(head);
            }
        }
    }

    // nNodes and rankToNode from ring-0 entry ranks.
    let mut first_ranks: Vec<i32> = Vec::new();
    let mut node_tree_patterns: Vec<Pattern> = Vec::new();
    let mut rank_to_node = vec![0usize; nranks];
    for r in 0..nranks {
        let fr = topo_ranks[r].ring_recv.first().copied().unwrap_or(r as i32);
        let node = match first_ranks.iter().position(|&x| x == fr) {
            Some(n) => n,
            None => {
                first_ranks.push(fr);
                node_tree_patterns.push(graphs_of[&members[r].host][g_tree].pattern);
                first_ranks.len() - 1
            }
        };
        rank_to_node[r] = node;
    }
    let n_nodes = first_ranks.len();
    let mut node_ranks: Vec<Vec<usize>> = vec![Vec::new(); n_nodes];
    let mut local_rank = vec![0usize; nranks];
    for r in 0..nranks {
        local_rank[r] = node_ranks[rank_to_node[r]].len();
        node_ranks[rank_to_node[r]].push(r);
    }
    let min_local = node_ranks.iter().map(|v| v.len()).min().unwrap_or(0);
    let max_local = node_ranks.iter().map(|v| v.len()).max().unwrap_or(0);

    // Align graphs (AllGather3).
    let mut aligned: Vec<TopoGraph> = graphs_of[&members[0].host].clone();
    let mut max_tree_pattern = Pattern::BalancedTree;
    for m in members {
        let gs = &graphs_of[&m.host];
        for (a, g) in gs.iter().enumerate() {
            let t = &mut aligned[a];
            t.n_channels = t.n_channels.min(g.n_channels);
            t.same_channels = t.same_channels.min(g.same_channels);
            t.bw_intra = t.bw_intra.min(g.bw_intra);
            t.bw_inter = t.bw_inter.min(g.bw_inter);
            t.type_intra = t.type_intra.max(g.type_intra);
            t.type_inter = t.type_inter.max(g.type_inter);
            t.cross_nic = t.cross_nic.max(g.cross_nic);
        }
        max_tree_pattern = max_tree_pattern.max(gs[g_tree].pattern);
    }
    let mut nvls_support = members.iter().all(|m| host_search[&m.host].nvls_support);
    let collnet_graph = aligned[g_chain].n_channels > 0;
    let collnet_support = settings.collnet_enable
        && collnet_graph
        && n_nodes as i32 >= settings.collnet_node_threshold;
    if aligned[g_nvls].n_channels == 0 {
        nvls_support = false;
    }
    let sms: Vec<i32> = members.iter().map(|m| sm_of(host_search, m)).collect();
    let min_cc = sms.iter().copied().min().unwrap_or(0);
    let max_cc = sms.iter().copied().max().unwrap_or(0);
    let my_cc = sms[0];
    let min_net_bw = min_net_bw_all(members, host_ranks, host_search);
    let mut nvls_channels = 0usize;
    if nvls_support {
        // NVLS_NCHANNELS: 16 up to 2.24; Blackwell 32 from 2.25, 24 within one node from 2.27.
        let mut n = if my_cc >= 100 && version.at_least(2, 27) {
            if n_nodes > 1 {
                32
            } else {
                24
            }
        } else if my_cc >= 100 && version.at_least(2, 25) {
            32
        } else {
            16
        };
        if min_cc >= 100 && n_nodes > 1 && version.at_least(2, 30) {
            // ncclNvlsTreeSm100Tuning's channel count (its chunk sizes are not modelled).
            let ppn = min_local;
            if n_nodes == 2 && min_net_bw >= 48.0 {
                n = 32;
            } else if min_net_bw >= 96.0 {
                n = if ppn <= 8 { 24 } else { 32 };
            } else if min_net_bw >= 48.0 {
                n = 24;
            }
        }
        if let Some(c) = settings.nvls_ctas {
            n = c as usize;
        }
        nvls_channels = (n as i32).min(settings.max_ctas).max(settings.min_ctas) as usize;
    }
    let nch = aligned[g_ring].n_channels.min(aligned[g_tree].n_channels) as usize;
    aligned[g_ring].n_channels = nch as i32;
    aligned[g_tree].n_channels = nch as i32;

    // Preset channel state per rank: ring prev/next -1, intra-node tree chain.
    let mut channels: Vec<Vec<ChannelRank>> = vec![
        vec![
            ChannelRank {
                ring_prev: -1,
                ring_next: -1,
                tree_up: -1,
                tree_down: [-1; 3],
            };
            nranks
        ];
        2 * nch
    ];
    for (r, m) in members.iter().enumerate() {
        let gs = &graphs_of[&m.host];
        let local = host_ranks[&m.host].len();
        for c in 0..nch {
            let tree = gs[g_tree].channel(c, local);
            if let Some(i) = tree.iter().position(|&x| x as usize == r) {
                let ch = &mut channels[c][r];
                ch.tree_up = if i == 0 { -1 } else { tree[i - 1] };
                ch.tree_down[0] = if i == local - 1 { -1 } else { tree[i + 1] };
            }
            channels[c + nch][r] = channels[c][r];
        }
    }

    // Postset: crossNic swap.
    for r in 0..nranks {
        if topo_ranks[r].cross_nic_ring == 2 && nch % 2 == 0 && rank_to_node[r] % 2 == 1 {
            let tr = &mut topo_ranks[r];
            for c in (0..nch).step_by(2) {
                tr.ring_recv.swap(c, c ^ 1);
                tr.ring_send.swap(c, c ^ 1);
                tr.ring_prev.swap(c, c ^ 1);
                tr.ring_next.swap(c, c ^ 1);
            }
        }
    }
    let fr = |n: usize| first_ranks[n] as usize;
    let mut ring_prev = vec![vec![-1i32; nranks]; nch];
    let mut ring_next = vec![vec![-1i32; nranks]; nch];
    for c in 0..nch {
        for r in 0..nranks {
            ring_prev[c][r] = topo_ranks[r].ring_prev[c];
            ring_next[c][r] = topo_ranks[r].ring_next[c];
        }
        // connectRings
        for n in 0..n_nodes {
            let recv = topo_ranks[fr(n)].ring_recv[c];
            let prev_send = topo_ranks[fr((n + n_nodes - 1) % n_nodes)].ring_send[c];
            ring_prev[c][recv as usize] = prev_send;
            let send = topo_ranks[fr(n)].ring_send[c];
            let next_recv = topo_ranks[fr((n + 1) % n_nodes)].ring_recv[c];
            ring_next[c][send as usize] = next_recv;
        }
    }
    // connectTrees
    let mut tree_lines: Vec<Vec<TreeLine>> = vec![Vec::new(); nranks];
    let depth = nranks / n_nodes - 1 + log2i(n_nodes);
    for r in 0..nranks {
        let node = rank_to_node[r];
        let ((t0u, t0d0, t0d1, t0ct), (t1u, t1d0, t1d1, t1ct)) = dtree(n_nodes as i32, node as i32);
        for c in 0..nch {
            let ttp = |n: usize| topo_ranks[fr(n)].tree_to_parent[c];
            let ttc0 = |n: usize| topo_ranks[fr(n)].tree_to_child0[c];
            let ttc1 = |n: usize| topo_ranks[fr(n)].tree_to_child1[c];
            let ri = r as i32;
            let pick = |ct: i32, n: i32| {
                if ct == 0 {
                    ttc0(n as usize)
                } else {
                    ttc1(n as usize)
                }
            };
            let set_down = |ch: &mut ChannelRank, d: i32| {
                if d == -1 {
                    return;
                }
                if let Some(x) = ch.tree_down.iter_mut().find(|x| **x < 0) {
                    *x = ttp(d as usize);
                }
            };
            if ri == ttp(node) {
                if t0u != -1 {
                    channels[c][r].tree_up = pick(t0ct, t0u);
                }
                if t1u != -1 {
                    channels[c + nch][r].tree_up = pick(t1ct, t1u);
                }
            }
            if ri == ttc0(node) {
                set_down(&mut channels[c][r], t0d0);
                set_down(&mut channels[c + nch][r], t1d0);
            }
            if ri == ttc1(node) {
                set_down(&mut channels[c][r], t0d1);
                set_down(&mut channels[c + nch][r], t1d1);
            }
            if ri == ttp(node) || ri == ttc0(node) || ri == ttc1(node) {
                for (cc, ch) in [(c, channels[c][r]), (c + nch, channels[c + nch][r])] {
                    tree_lines[r].push(TreeLine {
                        channel: cc,
                        up: ch.tree_up,
                        down: ch.tree_down,
                    });
                }
            }
        }
    }
    // Duplicate ring prev/next and set them on both channel copies.
    for c in 0..nch {
        for r in 0..nranks {
            for cc in [c, c + nch] {
                channels[cc][r].ring_prev = ring_prev[c][r];
                channels[cc][r].ring_next = ring_next[c][r];
            }
        }
    }
    let mut n_channels = maxch.min(nch * 2);
    channels.truncate(n_channels);
    let copy_channels = |channels: &mut Vec<Vec<ChannelRank>>, start: usize, end: usize| -> usize {
        let end = end.min(maxch);
        for c in start..end {
            let src = channels[c - start].clone();
            channels.push(src);
        }
        end.max(start)
    };
    // CollNet: more channels to saturate intra-node bandwidth.
    if collnet_support {
        let chain = &aligned[g_chain];
        if chain.bw_intra > chain.bw_inter && nranks > n_nodes {
            let target = maxch.min(n_channels + n_channels / 2);
            n_channels = copy_channels(&mut channels, n_channels, target);
        }
    }
    let sm90_double = if version.at_least(2, 20) {
        min_cc >= 90 && n_nodes > 1 && aligned[g_ring].bw_intra > 45.0 && n_channels < 16
    } else {
        min_cc == 90
            && n_nodes > 1
            && aligned[g_ring].bw_intra > 45.0
            && n_channels < 16
            && 2 * n_channels <= maxch
    };
    if sm90_double {
        n_channels = copy_channels(&mut channels, n_channels, 2 * n_channels);
    }
    let max_c = (settings.max_channels() as usize).min(settings.max_ctas.max(1) as usize);
    n_channels = n_channels.min(max_c);
    channels.truncate(n_channels);
    let min_c = settings.min_channels().max(settings.min_ctas).max(0) as usize;
    n_channels = copy_channels(&mut channels, n_channels, min_c);
    channels.truncate(n_channels);

    // NVLS heads per node.
    let min_heads = (0..n_nodes)
        .map(|n| topo_ranks[fr(n)].nvls_heads.len())
        .min()
        .unwrap_or(0);
    let nvls_heads: Vec<Vec<usize>> = (0..min_heads)
        .map(|h| {
            (0..n_nodes)
                .map(|n| topo_ranks[fr(n)].nvls_heads[h] as usize)
                .collect()
        })
        .collect();
    if min_heads == 0 {
        nvls_channels = 0;
    }

    // Rings from rank 0.
    let rings: Vec<Vec<usize>> = channels
        .iter()
        .map(|ch| {
            let mut v = Vec::with_capacity(nranks);
            let mut cur = 0usize;
            for _ in 0..nranks {
                v.push(cur);
                cur = ch[cur].ring_next.max(0) as usize;
            }
            v
        })
        .collect();

    // P2P channels.
    let (p2p_channels, p2p_per_peer, p2p_max_peers) = p2p_channels(
        members,
        host_ranks,
        host_search,
        settings,
        n_channels,
        n_nodes,
        version,
    );

    let cpu = host_search[&members[0].host].topo.system.cpu_type();
    let nvs_count = host_search[&members[0].host]
        .topo
        .system
        .count(NodeKind::Nvs);
    let gpu_pci_bw = {
        let sys = &host_search[&members[0].host].topo.system;
        let label = host_ranks[&members[0].host]
            .iter()
            .position(|&x| x == 0)
            .unwrap_or(0);
        let g = sys.nodes(NodeKind::Gpu)[host_search[&members[0].host].labels[label]];
        sys.links(sys.gpu_attach(g))
            .filter(|(_, _, l)| l.ty == topo::LinkType::Pci)
            .map(|(_, _, l)| l.bw)
            .fold(0.0f32, f32::max)
    };
    let all_nvlink = host_order.iter().all(|h| {
        host_search[h].topo.gpu_path_range(NodeKind::Gpu).1 < PathType::Pix
            || host_search[h].topo.system.count(NodeKind::Gpu) < 2
    });
    let ranks: Vec<RankInfo> = members
        .iter()
        .enumerate()
        .map(|(r, m)| {
            let hs = &host_search[&m.host];
            let sys = &hs.topo.system;
            let label = host_ranks[&m.host]
                .iter()
                .position(|&x| x == r)
                .unwrap_or(0);
            let g = hs.labels[label];
            RankInfo {
                rank: r,
                host: m.host,
                dev: m.dev,
                busid: sys.gpu(g).busid.clone(),
                sm: sys.gpu(g).sm,
                world_rank: parent.map(|p| p.ranks_world(m)).unwrap_or(r),
                node: rank_to_node[r],
                local_rank: local_rank[r],
            }
        })
        .collect();
    let searches: Vec<NodeSearch> = (0..n_nodes)
        .map(|n| {
            let h = members[fr(n)].host;
            let hs = &host_search[&h];
            let sys = &hs.topo.system;
            let labels = &hs.labels;
            let ranks_h = &host_ranks[&h];
            let mut gpu_ids = vec![(0, 0); ranks_h.len()];
            for (label, &g) in labels.iter().enumerate() {
                let node = sys.node(sys.nodes(NodeKind::Gpu)[g]);
                gpu_ids[label] = (node.system_id(), node.local_id());
            }
            NodeSearch {
                node: n,
                host: h,
                ranks: ranks_h.clone(),
                gpu_ids,
                graphs: graphs_of[&h].clone(),
                notes: hs.notes.clone(),
                topo: Some(hs.topo.clone()),
            }
        })
        .collect();
    let mut gr = aligned.into_iter();
    let ring = gr.next().expect("5 graphs");
    let tree = gr.next().expect("5 graphs");
    let collnet_chain = gr.next().expect("5 graphs");
    let nvls = gr.next().expect("5 graphs");
    let collnet_direct = gr.next().expect("5 graphs");
    CommPlan {
        name: name.to_string(),
        nccl_version: version.to_string(),
        n_ranks: nranks,
        n_nodes,
        ranks,
        node_ranks,
        min_local_ranks: min_local,
        max_local_ranks: max_local,
        min_comp_cap: min_cc,
        max_comp_cap: max_cc,
        cpu_arch: cpu.0,
        cpu_vendor: cpu.1,
        cpu_model: cpu.2,
        searches,
        graphs: CommGraphs {
            ring,
            tree,
            collnet_chain,
            nvls,
            collnet_direct,
        },
        max_tree_pattern,
        n_channels,
        collnet_channels: n_channels,
        nvls_channels: if nvls_support { nvls_channels } else { 0 },
        nvls_support: nvls_support && nvls_channels > 0,
        collnet_support,
        nvls_heads,
        p2p_channels,
        p2p_channels_per_peer: p2p_per_peer,
        p2p_max_peers,
        tree_depth: depth,
        channels,
        rings,
        tree_lines,
        all_nvlink,
        min_net_bw,
        nvs_count,
        gpu_pci_bw,
    }
}

fn sm_of(hs: &HashMap<usize, Arc<HostSearch>>, m: &Member) -> i32 {
    let sys = &hs[&m.host].topo.system;
    (0..sys.count(NodeKind::Gpu))
        .find(|&g| sys.gpu(g).dev == m.dev)
        .map(|g| sys.gpu(g).sm)
        .unwrap_or(0)
}

/// `ncclTopoGetMinNetBw` over all ranks (min).
fn min_net_bw_all(
    members: &[Member],
    host_ranks: &HashMap<usize, Vec<usize>>,
    hs: &HashMap<usize, Arc<HostSearch>>,
) -> f32 {
    let mut min = f32::MAX;
    for (r, m) in members.iter().enumerate() {
        let h = &hs[&m.host];
        let label = host_ranks[&m.host]
            .iter()
            .position(|&x| x == r)
            .unwrap_or(0);
        min = min.min(h.gpu_nets[h.labels[label]].min_bw);
    }
    if min == f32::MAX {
        0.0
    } else {
        min
    }
}

/// `ncclTopoGetLocalNetCountByBw`: (count, bw).
fn local_net_count_by_bw(topo: &Topology, g: usize) -> (usize, f32) {
    let gpu_bw = topo
        .local_cpu(g)
        .map(|c| {
            topo.path(topo.system.nodes(NodeKind::Gpu)[g], NodeKind::Cpu, c)
                .bw
        })
        .unwrap_or(0.0);
    let mut count = 0;
    let mut total = 0.0f32;
    for n in topo.local_net_cycle(g) {
        total += topo.gpu_net(g, n).bw;
        count += 1;
        if total >= gpu_bw {
            break;
        }
    }
    (count, total)
}

/// `getLocalNetCountByBw` as 2.20-2.28 count: the GPU's bandwidth is that of its link to a CPU
/// (the last one; 0 when it sits behind a PCI switch), and the closest NETs are taken in index
/// order while their total stays below it.
fn local_net_count_by_bw_2_20(topo: &Topology, g: usize) -> usize {
    let sys = &topo.system;
    let gpu_bw = sys
        .links(sys.nodes(NodeKind::Gpu)[g])
        .filter(|(_, r, _)| sys.node(*r).kind == NodeKind::Cpu)
        .map(|(_, _, l)| l.bw)
        .last()
        .unwrap_or(0.0);
    let mut total = 0.0f32;
    let mut count = 0;
    for n in topo.get_local(NodeKind::Gpu, g, NodeKind::Net) {
        if total >= gpu_bw {
            break;
        }
        total += topo.gpu_net(g, n).bw;
        count += 1;
    }
    count
}

/// `ncclTopoGetNchannels`' answer for a peer on the same host: NVLink paths get
/// `2*max(1, bw/nvlBw)` (2.30 counts NVB paths as NVLink too), others 2.
fn p2p_local_channels(topo: &Topology, p: usize, g: usize, version: topo::NcclVersion) -> usize {
    let path = topo.gpu_gpu(p, g);
    let nvlink = path.ty == PathType::Nvl || (version.at_least(2, 30) && path.ty == PathType::Nvb);
    if nvlink {
        let nvl = topo::consts::nvlink_bw(topo.system.gpu(g).sm, version);
        2 * 1.max((path.bw / nvl) as i32) as usize
    } else {
        2
    }
}

/// P2P channels and channels per peer, as each release computes them (`ncclTopoComputeP2pChannels`,
/// and from 2.29 `ncclTopoComputeP2pChannelsPerPeer` with the min over ranks):
/// - up to 2.28 each rank takes the min over every GPU of its host and every peer, starting
///   from the P2P channel count; a remote peer counts `NCCL_NCHANNELS_PER_NET_PEER` (2.19: default
///   2; 2.20-2.28: unset means 2 halved while `2*nRanks > 4*p2pnChannels`, at least the NETs
///   needed by bandwidth). Releases before 2.29 do not share the result between ranks: this is
///   rank 0's host's value.
/// - 2.29+ each rank takes the min over its own GPU's peers, remote ones by NET count and
///   bandwidth, then the min over ranks; with several nodes the result is halved to fit
///   `maxP2pPeers` (2.29: nRanks) peers per round.
fn p2p_channels(
    members: &[Member],
    host_ranks: &HashMap<usize, Vec<usize>>,
    hs: &HashMap<usize, Arc<HostSearch>>,
    settings: &PlannerSettings,
    n_channels: usize,
    n_nodes: usize,
    version: topo::NcclVersion,
) -> (usize, usize, usize) {
    let nranks = members.len();
    let mut p2p = n_channels.min(settings.max_p2p_nchannels.max(1) as usize);
    p2p = p2p.max(settings.min_p2p_nchannels.max(1) as usize);
    if !version.at_least(2, 29) {
        let h = &hs[&members[0].host];
        let topo = &h.topo;
        let mine = &host_ranks[&members[0].host];
        let mut min_ch = p2p;
        for g in 0..topo.system.count(NodeKind::Gpu) {
            for r in 0..nranks {
                let n = match mine.iter().position(|&x| x == r) {
                    Some(label) if h.labels[label] == g => continue,
                    Some(label) => p2p_local_channels(topo, h.labels[label], g, version),
                    None => match settings.nchannels_per_net_peer {
                        Some(v) => v.max(0) as usize,
                        None if !version.at_least(2, 20) => 2,
                        None => {
                            let mut most = 2;
                            while most * nranks > p2p * 4 && most > 1 {
                                most /= 2;
                            }
                            most.max(h.gpu_nets[g].count_by_bw_2_20)
                        }
                    },
                };
                min_ch = min_ch.min(n);
            }
        }
        let mut per_peer = pow2_up(min_ch);
        p2p = pow2_up(p2p);
        if version.at_least(2, 22) {
            p2p = p2p.min(pow2_down(version.max_channels()));
            per_peer = per_peer.min(p2p);
        }
        return (p2p, per_peer, nranks);
    }
    let mut per_peer = usize::MAX;
    for (r, m) in members.iter().enumerate() {
        let topo = &hs[&m.host].topo;
        let labels = &hs[&m.host].labels;
        let mine = &host_ranks[&m.host];
        let label = mine.iter().position(|&x| x == r).unwrap_or(0);
        let g = labels[label];
        let mut min_ch = version.max_channels();
        let remote = nranks > mine.len();
        for (pl, &pr) in mine.iter().enumerate() {
            if pr == r {
                continue;
            }
            min_ch = min_ch.min(p2p_local_channels(topo, labels[pl], g, version));
        }
        if remote {
            let n = match settings.nchannels_per_net_peer {
                Some(v) => v.max(0) as usize,
                None => {
                    let (count, bw) = hs[&m.host].gpu_nets[g].count_by_bw;
                    if count > 0 {
                        count.max(
                            (bw as usize).div_ceil(settings.p2p_per_channel_net_bw.max(1) as usize),
                        )
                    } else {
                        2
                    }
                }
            };
            min_ch = min_ch.min(n);
        }
        per_peer = per_peer.min(min_ch);
    }
    let max_peers = match settings.max_p2p_peers {
        Some(m) if version.at_least(2, 30) => (m.max(1) as usize).min(nranks),
        _ => nranks,
    };
    let mut per_peer = pow2_up(per_peer);
    p2p = pow2_up(p2p).min(pow2_down(version.max_channels()));
    if n_nodes > 1 && settings.nchannels_per_net_peer.is_none() {
        while per_peer * max_peers.div_ceil(8) > p2p && per_peer > 1 {
            per_peer /= 2;
        }
    } else {
        per_peer = per_peer.min(p2p);
    }
    (p2p, per_peer, max_peers)
}

impl CommPlan {
    /// World rank of a member of this communicator's parent (used when splitting).
    fn ranks_world(&self, m: &Member) -> usize {
        self.ranks
            .iter()
            .find(|r| r.host == m.host && r.dev == m.dev)
            .map(|r| r.world_rank)
            .unwrap_or(0)
    }
    /// The members of this communicator, in rank order.
    pub fn members(&self) -> Vec<Member> {
        self.ranks
            .iter()
            .map(|r| Member {
                host: r.host,
                dev: r.dev,
            })
            .collect()
    }
}

/// Every GPU of every host, host by host in `dev` order (how `torchrun`/`mpirun` lay out ranks).
pub fn world_members(cluster: &Cluster) -> Vec<Member> {
    let mut v = Vec::new();
    for (h, n) in cluster.nodes.iter().enumerate() {
        let sys = &n.topo.system;
        let mut devs: Vec<i32> = (0..sys.count(NodeKind::Gpu))
            .map(|g| sys.gpu(g).dev)
            .collect();
        devs.sort_unstable();
        v.extend(devs.into_iter().map(|dev| Member { host: h, dev }));
    }
    v
}

/// The world communicator over every GPU of the cluster.
pub fn plan_world(cluster: &Cluster, settings: &PlannerSettings) -> topo::Result<CommPlan> {
    plan_comm(cluster, &world_members(cluster), "world", settings, None)
}
