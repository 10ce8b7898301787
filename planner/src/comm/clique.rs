//! Planning a communicator whose ranks fuse their topologies across multi-node NVLink cliques
//! (NCCL 2.30.7 `src/graph/topo.cc` `ncclTopoGetSystem` with `comm->MNNVL`; the rest of
//! `initTransportsRank` is unchanged and runs on the fused topologies).
//!
//! Each fusion group ([`super::mnnvl::fusion_groups`]: a clique, or the ranks of one host when
//! MNNVL is off for them) is searched once, as one host is otherwise: its topology is built from
//! the XMLs of all its hosts (one NVSwitch node, each host's CPUs, PCI trees and NICs keyed by
//! host), its graphs are searched in clique-rank labels, and the communicator is assembled with
//! one "host" per group. NCCL counts nodes by ring grouping, so a clique whose rings span it is one
//! node: an NVL72 rack is `nNodes 1` with 72 local ranks.

use super::cache::SearchKey;
use super::connect::assemble;
use super::host::{search_topology, HostSearch};
use super::mnnvl::{fusion_groups, MnnvlRank};
use super::{hosts_of, Member, Planner};
use crate::error::Result;
use crate::plan::CommPlan;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use topo::{BuildOptions, CliqueRank, System, Topology};

impl Planner {
    /// [`Planner::plan`] when some ranks have MNNVL on (`mn[r]`: rank r's state and clique).
    pub(super) fn plan_mnnvl(
        &self,
        members: &[Member],
        name: &str,
        parent: Option<&CommPlan>,
        mn: &[Option<(MnnvlRank, Vec<usize>)>],
    ) -> Result<CommPlan> {
        let (group_of, groups) = fusion_groups(members, mn);
        let inter = groups.len() > 1;
        // The groups stand for hosts in the assembly: member r is on "host" group_of[r].
        let grouped: Vec<Member> = members
            .iter()
            .zip(&group_of)
            .map(|(m, &g)| Member {
                host: g,
                dev: m.dev,
            })
            .collect();
        let (order, ranks) = hosts_of(&grouped);
        let mut search: HashMap<usize, Arc<HostSearch>> = HashMap::default();
        let graph_file = self.graph_file()?;
        for (g, group) in groups.iter().enumerate() {
            let key = self.group_key(members, group, inter);
            let hs = match self.cached(&key) {
                Some(hs) => hs,
                None => {
                    let topo = if key.clique.is_empty() {
                        let h = members[group[0]].host;
                        super::host::build_topology(
                            &self.cluster,
                            &*self.host_xml(h)?,
                            h,
                            &key.devs,
                            inter,
                            name,
                            &self.settings,
                        )?
                    } else {
                        self.clique_topology(members, group, inter)?
                    };
                    let hs =
                        search_topology(Arc::new(topo), &self.settings, graph_file.as_deref())?;
                    self.insert(key, hs)
                }
            };
            search.insert(g, hs);
        }
        let mut plan = assemble(
            &grouped,
            name,
            &self.settings,
            None,
            &order,
            &ranks,
            &search,
        );
        // Back from groups to hosts.
        for (r, info) in plan.ranks.iter_mut().enumerate() {
            info.host = members[r].host;
            info.world_rank = parent.map(|p| p.ranks_world(&members[r])).unwrap_or(r);
        }
        for s in plan.searches.iter_mut() {
            if let Some(&r) = s.ranks.first() {
                s.host = members[r].host;
            }
        }
        Ok(plan)
    }

    /// The search key of a fusion group: one host's key when the group lies on one host (its
    /// fused topology is the host's), else the clique's hosts and devs.
    fn group_key(&self, members: &[Member], group: &[usize], inter: bool) -> SearchKey {
        let devs: Vec<i32> = group.iter().map(|&r| members[r].dev).collect();
        let first = members[group[0]].host;
        if group.iter().all(|&r| members[r].host == first) {
            return self.key(first, devs, inter);
        }
        let mut hosts: Vec<usize> = Vec::new();
        let clique = group
            .iter()
            .map(|&r| {
                let h = members[r].host;
                let at = hosts.iter().position(|&x| x == h).unwrap_or_else(|| {
                    hosts.push(h);
                    hosts.len() - 1
                });
                (self.xml_of(h), at)
            })
            .collect();
        let mut key = self.key(first, devs, inter);
        key.clique = clique;
        key
    }

    /// The topology of a clique spanning hosts, fused from its hosts' XMLs in clique-rank order.
    fn clique_topology(
        &self,
        members: &[Member],
        group: &[usize],
        inter: bool,
    ) -> Result<Topology> {
        let host_xmls: Vec<Arc<topo::HostXml>> = group
            .iter()
            .map(|&r| self.host_xml(members[r].host))
            .collect::<Result<_>>()?;
        let parts: Vec<CliqueRank> = group
            .iter()
            .zip(&host_xmls)
            .map(|(&r, host)| {
                let h = members[r].host;
                CliqueRank {
                    host,
                    file: &self.cluster.nodes[h].source,
                    dev: members[r].dev,
                    // Any value unique to the host: NCCL only compares host hashes.
                    host_hash: 0x6e63_636c_0000_0000 | h as u64,
                }
            })
            .collect();
        let opts = BuildOptions {
            version: self.settings.topo.version,
            gpus: None,
            rank_base: 0,
            inter,
            fusion: self.settings.topo.nic_fusion.clone(),
            nic_guids: self.cluster.nic_guids,
        };
        // `from_clique` refuses a fused topology without exactly one GPU per part.
        let sys = System::from_clique(&parts, &opts)?;
        Ok(Topology::new(sys, &self.settings.topo))
    }
}
