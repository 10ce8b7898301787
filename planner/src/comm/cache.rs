//! The search cache: one host search per distinct (host XML, GPU subset, spans hosts), and each
//! host's checked, NIC-fused XML (no NCCL counterpart: every NCCL rank searches on its own; ranks
//! on one host find the same graphs).

use super::host::{build_topology, search_topology, HostSearch};
use super::{hosts_of, Member};
use crate::settings::PlannerSettings;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use topo::{Cluster, HostXml, Topology};

pub(super) type SearchKey = (usize, Vec<i32>, bool);

/// Reuses topologies and searches across communicators and hosts with identical inputs.
#[derive(Default)]
pub struct SearchCache {
    pub(super) map: HashMap<SearchKey, Arc<HostSearch>>,
    /// Each host XML (by address) checked and NIC-fused.
    pub(super) host_xml: HashMap<usize, Arc<HostXml>>,
    /// The NCCL_GRAPH_FILE, once read.
    pub(super) graph_file: Option<Option<Arc<topo::XmlElement>>>,
}

impl SearchCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The graphs of the NCCL_GRAPH_FILE, read and parsed on first use (a failed read is not
    /// remembered, so every communicator reports it).
    pub(super) fn graph_file(
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

/// What makes two host searches the same: the host's XML, the devs of the ranks on it (in
/// local-rank order) and whether the communicator spans hosts.
pub(super) fn search_key(cluster: &Cluster, host: usize, devs: &[i32], inter: bool) -> SearchKey {
    (
        Arc::as_ptr(&cluster.nodes[host].xml) as usize,
        devs.to_vec(),
        inter,
    )
}

impl SearchCache {
    /// The checked, NIC-fused XML of host `h` (made once per distinct XML).
    pub(super) fn host_xml(
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
