//! Communicator planning: what every rank of a communicator computes in `initTransportsRank`
//! (NCCL 2.30.7 `src/init.cc`, `src/graph/connect.cc`, `trees.cc`, `rings.cc`, the P2P channel
//! part of `paths.cc`, `ncclNvlsInit`/`ncclNvlsTuning` in `transport/nvls.cc`).
//!
//! Each host of the communicator searches its graphs once (ranks on one host see the same
//! topology and find the same graphs); identical hosts with the same members share one search.
//! Then the per-rank results are combined as the AllGather3 step does (min channels and
//! bandwidths, max types), and Preset/Postset build the rings and trees.
//!
//! API boundary: [`Planner`] (one cluster, one set of settings, the search cache) plans any
//! communicator from its [`Member`]s.

mod cache;
mod clique;
mod connect;
mod host;
mod mnnvl;
mod nvls;
mod p2p;
mod trees;

use cache::{SearchCache, SearchKey};
use connect::assemble;
use host::{build_topology, search_topology};
pub use host::{GpuNets, HostSearch};
pub use mnnvl::MnnvlRank;
pub use trees::{btree, dtree, DoubleTree, TreeLinks};

use crate::error::{PlanError, Result};
use crate::plan::CommPlan;
use crate::settings::PlannerSettings;
use rustc_hash::FxHashMap as HashMap;
use std::sync::{Arc, RwLock};
use topo::{Cluster, NodeKind};

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
        let on_host = ranks.entry(m.host).or_default();
        if on_host.is_empty() {
            order.push(m.host);
        }
        on_host.push(r);
    }
    (order, ranks)
}

/// Plans communicators over one cluster with one set of settings, as the runtime does for every
/// communicator a program creates (`ncclCommInitRank`, `ncclCommSplit`).
///
/// Owns the cluster, the settings and the cache of host searches, so every communicator it plans
/// sees the same inputs and a search made for one communicator serves the next. `Send + Sync`:
/// communicators can be planned from several threads at once (the cache is behind a lock that
/// is not held while searching; two threads may search the same host at once and keep the same
/// result).
pub struct Planner {
    cluster: Cluster,
    settings: PlannerSettings,
    /// Per host: the index of its XML among the cluster's distinct host XMLs (hosts built from
    /// one file share one XML and so one set of searches).
    xml_of_host: Vec<usize>,
    cache: RwLock<SearchCache>,
}

// The runtime holds one planner for the whole process and plans from any thread.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Planner>();
};

impl Planner {
    /// A planner for `cluster`, which must have been built with `settings.topo` (the
    /// topology settings the searches assume).
    pub fn new(cluster: Cluster, settings: PlannerSettings) -> Planner {
        let mut distinct: HashMap<*const topo::XmlElement, usize> = HashMap::default();
        let xml_of_host = cluster
            .nodes
            .iter()
            .map(|n| {
                let next = distinct.len();
                *distinct.entry(Arc::as_ptr(&n.xml)).or_insert(next)
            })
            .collect();
        Planner {
            cluster,
            settings,
            xml_of_host,
            cache: RwLock::new(SearchCache::default()),
        }
    }

    /// A planner for the hosts `hosts` (source name and parsed XML per host, in host order),
    /// building the cluster with `settings.topo`, so the topology and the searches cannot
    /// disagree on settings. Skeleton files are completed as `completion` says.
    pub fn from_hosts(
        hosts: &[(String, Arc<topo::XmlElement>)],
        settings: PlannerSettings,
        completion: topo::Completion,
    ) -> Result<Planner> {
        let cluster = Cluster::from_hosts(hosts, &settings.topo, completion)?;
        Ok(Planner::new(cluster, settings))
    }

    /// The cluster this planner plans on.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The `dev` attributes of host 0's GPUs in `dev` order: position i is the GPU a program
    /// on that node sees as physical index i.
    pub fn host_devs(&self) -> Vec<i32> {
        self.world_members()
            .iter()
            .filter(|m| m.host == 0)
            .map(|m| m.dev)
            .collect()
    }

    /// The settings this planner plans with.
    pub fn settings(&self) -> &PlannerSettings {
        &self.settings
    }

    /// Give the cluster back (the searches are dropped).
    pub fn into_cluster(self) -> Cluster {
        self.cluster
    }

    /// Every GPU of every host, host by host in `dev` order (see [`world_members`]).
    pub fn world_members(&self) -> Vec<Member> {
        world_members(&self.cluster)
    }

    /// The world communicator over every GPU of the cluster, named `world`.
    pub fn plan_world(&self) -> Result<CommPlan> {
        self.plan(&self.world_members(), "world", None)
    }

    /// Plan a communicator over `members` (comm rank = index) named `name`; `parent` is the
    /// communicator it was split from, if any. Host searches already made are reused; new ones
    /// are kept for later communicators.
    pub fn plan(
        &self,
        members: &[Member],
        name: &str,
        parent: Option<&CommPlan>,
    ) -> Result<CommPlan> {
        check_members(&self.cluster, members, name)?;
        let fabric = mnnvl::fabric_of(&self.cluster, members, &self.settings);
        let mn = mnnvl::mnnvl_ranks(members, &fabric, &self.settings);
        let mut plan = if mn.iter().all(Option::is_none) {
            self.plan_by_host(members, name, parent)?
        } else {
            self.plan_mnnvl(members, name, parent, &mn)?
        };
        for (r, info) in plan.ranks.iter_mut().enumerate() {
            info.fabric = fabric[r];
            info.mnnvl = mn[r].as_ref().map(|x| x.0);
        }
        plan.mnnvl = plan.ranks.first().is_some_and(|r| r.mnnvl.is_some());
        Ok(plan)
    }

    /// [`Self::plan`] when every rank fuses its topology with the ranks of its own host.
    fn plan_by_host(
        &self,
        members: &[Member],
        name: &str,
        parent: Option<&CommPlan>,
    ) -> Result<CommPlan> {
        let (host_order, host_ranks) = hosts_of(members);
        let inter = host_order.len() > 1;
        let keys: Vec<SearchKey> = host_order
            .iter()
            .map(|&h| {
                let devs: Vec<i32> = host_ranks[&h].iter().map(|&r| members[r].dev).collect();
                self.key(h, devs, inter)
            })
            .collect();
        let mut host_search: HashMap<usize, Arc<HostSearch>> = HashMap::default();
        for (&h, key) in host_order.iter().zip(&keys) {
            if let Some(hs) = self.cached(key) {
                host_search.insert(h, hs);
            }
        }
        if host_search.len() < host_order.len() {
            // Search every host the cache does not hold yet, in order (so that the first
            // failing host reports its error).
            let graph_file = self.graph_file()?;
            for (&h, key) in host_order.iter().zip(keys) {
                if host_search.contains_key(&h) {
                    continue;
                }
                // An earlier host of this communicator may have made this search already.
                if let Some(hs) = self.cached(&key) {
                    host_search.insert(h, hs);
                    continue;
                }
                let host_xml = self.host_xml(h)?;
                let topo = build_topology(
                    &self.cluster,
                    &host_xml,
                    h,
                    &key.devs,
                    inter,
                    name,
                    &self.settings,
                )?;
                let hs = search_topology(Arc::new(topo), &self.settings, graph_file.as_deref())?;
                host_search.insert(h, self.insert(key, hs));
            }
        }
        Ok(assemble(
            members,
            name,
            &self.settings,
            parent,
            &host_order,
            &host_ranks,
            &host_search,
        ))
    }
}

/// The errors a member list can have before anything is built: none, a host outside the
/// cluster, or a GPU used twice.
fn check_members(cluster: &Cluster, members: &[Member], name: &str) -> Result<()> {
    if members.is_empty() {
        return Err(PlanError::NoRanks {
            comm: name.to_string(),
        });
    }
    let mut seen: HashMap<Member, usize> = HashMap::default();
    for (r, m) in members.iter().enumerate() {
        if m.host >= cluster.nodes.len() {
            return Err(PlanError::NoSuchHost {
                comm: name.to_string(),
                rank: r,
                host: m.host,
                hosts: cluster.nodes.len(),
            });
        }
        if let Some(&earlier) = seen.get(m) {
            return Err(PlanError::DuplicateGpu {
                comm: name.to_string(),
                rank: r,
                earlier,
                file: cluster.nodes[m.host].source.clone(),
                host: m.host,
                dev: m.dev,
            });
        }
        seen.insert(*m, r);
    }
    Ok(())
}

impl CommPlan {
    /// World rank of a member of this communicator's parent (used when splitting).
    pub(super) fn ranks_world(&self, m: &Member) -> usize {
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
