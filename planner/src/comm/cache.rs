//! The search cache: one host search per distinct (host XML, GPU subset, spans hosts), and each
//! host's checked, NIC-fused XML (no NCCL counterpart: every NCCL rank searches on its own; ranks
//! on one host find the same graphs).

use super::host::{build_topology, search_topology, HostSearch};
use super::{hosts_of, Member, Planner};
use crate::error::{PlanError, Result};
use rustc_hash::FxHashMap as HashMap;
use std::sync::{Arc, PoisonError, RwLockReadGuard, RwLockWriteGuard};
use topo::{HostXml, Topology, XmlElement};

/// What makes two host searches the same.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct SearchKey {
    /// The host's XML: the index of its distinct XML in the planner's cluster.
    pub(super) xml: usize,
    /// The devs of the communicator's ranks on the host, in local-rank order.
    pub(super) devs: Vec<i32>,
    /// Whether the communicator spans hosts.
    pub(super) inter: bool,
    /// For a topology fused across a multi-node NVLink clique: per rank (in `devs` order) the
    /// index of its host's distinct XML and of its host among the clique's hosts; empty for
    /// one host's search.
    pub(super) clique: Vec<(usize, usize)>,
}

/// The host searches and prepared host XMLs a [`Planner`] has made.
#[derive(Default)]
pub(super) struct SearchCache {
    /// Host searches.
    map: HashMap<SearchKey, Arc<HostSearch>>,
    /// Each distinct host XML (by index) checked and NIC-fused.
    host_xml: HashMap<usize, Arc<HostXml>>,
    /// The NCCL_GRAPH_FILE, once read.
    graph_file: Option<Option<Arc<XmlElement>>>,
}

impl Planner {
    /// The cache for reading. A panic while the lock was held cannot leave it half-written
    /// (every change is one map insert or one assignment), so a poisoned lock is used as is.
    fn read(&self) -> RwLockReadGuard<'_, SearchCache> {
        self.cache.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cache for writing (see [`Self::read`] on poisoning).
    fn write(&self) -> RwLockWriteGuard<'_, SearchCache> {
        self.cache.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The key of host `h`'s search for a communicator with ranks on `devs` there.
    pub(super) fn key(&self, h: usize, devs: Vec<i32>, inter: bool) -> SearchKey {
        SearchKey {
            xml: self.xml_of_host[h],
            devs,
            inter,
            clique: Vec::new(),
        }
    }

    /// The index of host `h`'s XML among the cluster's distinct host XMLs.
    pub(super) fn xml_of(&self, h: usize) -> usize {
        self.xml_of_host[h]
    }

    /// The search for `key`, if made.
    pub(super) fn cached(&self, key: &SearchKey) -> Option<Arc<HostSearch>> {
        self.read().map.get(key).cloned()
    }

    /// Keep a search; when another thread kept one for the same key meanwhile (the same
    /// graphs), that one is returned.
    pub(super) fn insert(&self, key: SearchKey, hs: HostSearch) -> Arc<HostSearch> {
        self.write()
            .map
            .entry(key)
            .or_insert_with(|| Arc::new(hs))
            .clone()
    }

    /// The graphs of the NCCL_GRAPH_FILE, read and parsed on first use (a failed read is not
    /// remembered, so every communicator reports it).
    pub(super) fn graph_file(&self) -> Result<Option<Arc<XmlElement>>> {
        let cached = self.read().graph_file.clone();
        if let Some(x) = cached {
            return Ok(x);
        }
        let x = match &self.settings.graph_file {
            None => None,
            Some(f) => Some(Arc::new(topo::read_xml(f).map_err(|e| match e {
                // Name the setting: the path alone does not say where it came from.
                topo::TopoError::Io { file, source } => {
                    PlanError::GraphFile(format!("NCCL_GRAPH_FILE={file}: {source}"))
                }
                e => e.into(),
            })?)),
        };
        Ok(self.write().graph_file.get_or_insert(x).clone())
    }

    /// The checked, NIC-fused XML of host `h` (made once per distinct XML).
    pub(super) fn host_xml(&self, h: usize) -> Result<Arc<HostXml>> {
        let key = self.xml_of_host[h];
        let cached = self.read().host_xml.get(&key).cloned();
        if let Some(x) = cached {
            return Ok(x);
        }
        let node = &self.cluster.nodes[h];
        let x = Arc::new(HostXml::prepare(
            &node.xml,
            &node.source,
            &self.settings.topo.nic_fusion,
            self.settings.topo.version,
        )?);
        Ok(self.write().host_xml.entry(key).or_insert(x).clone())
    }

    /// Run, in parallel, every host search the communicators `comms` (member lists) will need
    /// and the cache does not hold yet. Searches on the same host GPUs share one topology (a
    /// communicator inside a host and one spanning hosts differ only in `inter`). Searches that
    /// fail are left out: planning the communicator then repeats them and reports the error in
    /// order.
    pub fn prefetch(&self, comms: &[Vec<Member>]) {
        use rayon::prelude::*;
        let (cluster, settings) = (&self.cluster, &self.settings);
        let Ok(graph_file) = self.graph_file() else {
            return;
        };
        // One group per (host XML, devs): the host to build it on and the `inter` values wanted.
        struct Group {
            host_xml: Arc<HostXml>,
            xml: usize,
            h: usize,
            devs: Vec<i32>,
            inters: Vec<bool>,
        }
        let mut groups: Vec<Group> = Vec::new();
        for members in comms {
            if members.iter().any(|m| m.host >= cluster.nodes.len()) {
                continue;
            }
            // Communicators with multi-node NVLink search their cliques, not their hosts.
            let fabric = super::mnnvl::fabric_of(cluster, members, settings);
            if super::mnnvl::mnnvl_ranks(members, &fabric, settings)
                .iter()
                .any(Option::is_some)
            {
                continue;
            }
            let (hosts, ranks) = hosts_of(members);
            let inter = hosts.len() > 1;
            for &h in &hosts {
                let devs: Vec<i32> = ranks[&h].iter().map(|&r| members[r].dev).collect();
                let xml = self.xml_of_host[h];
                if self.cached(&self.key(h, devs.clone(), inter)).is_some() {
                    continue;
                }
                let Ok(host_xml) = self.host_xml(h) else {
                    continue;
                };
                match groups.iter_mut().find(|g| g.xml == xml && g.devs == devs) {
                    Some(g) if !g.inters.contains(&inter) => g.inters.push(inter),
                    Some(_) => {}
                    None => groups.push(Group {
                        host_xml,
                        xml,
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
                        .map(|hs| (self.key(h, devs.clone(), inter), hs))
                })
            })
            .collect();
        for (key, hs) in done {
            self.insert(key, hs);
        }
    }
}
