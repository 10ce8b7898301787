//! Communicator planning: what every rank of a communicator computes in `initTransportsRank`
//! (NCCL 2.30.7 `src/init.cc`, `src/graph/connect.cc`, `trees.cc`, `rings.cc`, the P2P channel
//! part of `paths.cc`, `ncclNvlsInit`/`ncclNvlsTuning` in `transport/nvls.cc`).
//!
//! Each host of the communicator searches its graphs once (ranks on one host see the same
//! topology and find the same graphs); identical hosts with the same members share one search.
//! Then the per-rank results are combined as the AllGather3 step does (min channels and
//! bandwidths, max types), and Preset/Postset build the rings and trees.

mod cache;
mod connect;
mod host;
mod nvls;
mod p2p;
mod trees;

use cache::search_key;
pub use cache::SearchCache;
use connect::assemble;
use host::{build_topology, search_topology};
pub use host::{GpuNets, HostSearch};
pub use trees::{btree, dtree};

use crate::plan::CommPlan;
use crate::settings::PlannerSettings;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::Arc;
use topo::{Cluster, NodeKind, TopoError};

/// One GPU of a cluster: host index and CUDA/NVML device index on that host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Member {
    /// Host (cluster node) index.
    pub host: usize,
    /// `dev` of the GPU in the host's topology XML.
    pub dev: i32,
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
