//! Clusters: N hosts, each described by a node topology file. Identical hosts share one computed
//! topology, so a 1024-node cluster of one node type costs one node's parse and paths.

use crate::error::{Result, TopoError};
use crate::mnnvl::{self, FabricInfo, HostShape, NicGuids, NvlDomains};
use crate::paths::Topology;
use crate::profiles::{self, GpuModel};
use crate::settings::TopoSettings;
use crate::system::{BuildOptions, CliqueRank, HostXml, NodeKind, System};
use crate::xml::XmlElement;
use std::sync::Arc;

/// How to complete skeleton files.
#[derive(Debug, Clone, Copy, Default)]
pub struct Completion {
    /// GPU model for skeletons (and the profile for GPUs the file lacks).
    pub gpu: Option<&'static GpuModel>,
    /// NIC speed in Mb/s for NIC slots without `<net>`.
    pub nic_speed_mbps: Option<u64>,
}

/// One host of a cluster.
#[derive(Debug, Clone)]
pub struct ClusterNode {
    /// Host index (NCCL's node number when ranks are laid out host by host).
    pub host: usize,
    /// Where the host's topology came from.
    pub source: String,
    /// The host's topology as one of its ranks sees it, with paths.
    pub topo: Arc<Topology>,
    /// The XML the topology was built from (after completion).
    pub xml: Arc<XmlElement>,
    /// Global rank of the host's first GPU.
    pub first_rank: usize,
    /// What NVML's GPU fabric information reports on this host's GPUs (`None`: no NVLink
    /// fabric spanning hosts), see [`crate::mnnvl`].
    pub fabric: Option<FabricInfo>,
}

/// A set of hosts.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Hosts in rank order.
    pub nodes: Vec<ClusterNode>,
    /// Notes about guesses made while completing skeletons.
    pub notes: Vec<String>,
    /// The identity of NICs of hosts built from one file when a clique's hosts are fused
    /// (default: each host's NICs its own, as on real hardware).
    pub nic_guids: NicGuids,
}

/// The most hosts a cluster may have (131,072 hosts of 8 GPUs are a million ranks; NCCL's rank
/// numbers are 32-bit).
pub const MAX_NODES: usize = 1 << 17;

impl Cluster {
    /// Build from (source name, parsed XML) per host, in host order. Hosts with identical XML share
    /// one topology.
    pub fn from_hosts(
        hosts: &[(String, Arc<XmlElement>)],
        settings: &TopoSettings,
        completion: Completion,
    ) -> Result<Cluster> {
        if hosts.is_empty() {
            return Err(TopoError::Model("a cluster needs at least one host".into()));
        }
        if hosts.len() > MAX_NODES {
            return Err(TopoError::Model(format!(
                "{} hosts: a cluster has at most {MAX_NODES}",
                hosts.len()
            )));
        }
        let inter = hosts.len() > 1;
        let mut built: Vec<(Arc<XmlElement>, Arc<XmlElement>, Arc<Topology>)> = Vec::new();
        let mut nodes = Vec::with_capacity(hosts.len());
        let mut notes = Vec::new();
        let mut rank = 0;
        for (host, (source, xml)) in hosts.iter().enumerate() {
            let found = built
                .iter()
                .find(|(orig, _, _)| Arc::ptr_eq(orig, xml) || **orig == **xml)
                .cloned();
            let (done_xml, topo) = match found {
                Some((_, x, t)) => (x, t),
                None => {
                    let (x, mut n) = prepare(xml, source, completion)?;
                    notes.append(&mut n);
                    let opts = BuildOptions {
                        version: settings.version,
                        gpus: None,
                        rank_base: 0,
                        inter,
                        fusion: settings.nic_fusion.clone(),
                        nic_guids: NicGuids::default(),
                    };
                    let sys = System::from_xml(&x, source, &opts)?;
                    if sys.count(NodeKind::Gpu) == 0 {
                        return Err(TopoError::Model(format!(
                            "{source}: no GPU with a rank in this topology"
                        )));
                    }
                    let t = Arc::new(Topology::new(sys, settings));
                    let x = Arc::new(x);
                    built.push((xml.clone(), x.clone(), t.clone()));
                    (x, t)
                }
            };
            let ngpus = topo.system.count(NodeKind::Gpu);
            nodes.push(ClusterNode {
                host,
                source: source.clone(),
                topo,
                xml: done_xml,
                first_rank: rank,
                fabric: None,
            });
            rank += ngpus;
        }
        let mut cluster = Cluster {
            nodes,
            notes,
            nic_guids: NicGuids::default(),
        };
        cluster.set_nvl_domains(NvlDomains::Auto)?;
        Ok(cluster)
    }

    /// Group the hosts into NVLink domains as `domains` says (replacing the grouping made when
    /// the cluster was built, which is [`NvlDomains::Auto`]).
    pub fn set_nvl_domains(&mut self, domains: NvlDomains) -> Result<()> {
        let mut seen: Vec<(*const XmlElement, bool, bool)> = Vec::new();
        let shapes: Vec<HostShape> = self
            .nodes
            .iter()
            .map(|n| {
                let p = Arc::as_ptr(&n.xml);
                let (attached, nvswitch) = match seen.iter().find(|s| s.0 == p) {
                    Some(s) => (s.1, s.2),
                    None => {
                        let a = (
                            mnnvl::fabric_attached(&n.xml),
                            mnnvl::has_nvswitch_links(&n.xml),
                        );
                        seen.push((p, a.0, a.1));
                        a
                    }
                };
                HostShape {
                    source: &n.source,
                    gpus: n.topo.system.count(NodeKind::Gpu),
                    attached,
                    nvswitch,
                }
            })
            .collect();
        let fabric = mnnvl::assign_domains(&shapes, domains)?;
        for (n, f) in self.nodes.iter_mut().zip(fabric) {
            n.fabric = f;
        }
        Ok(())
    }

    /// The topology the ranks of host `h` see when a communicator over every GPU of the cluster
    /// has multi-node NVLink on: the hosts of `h`'s clique (same cluster UUID and clique id after
    /// `NCCL_MNNVL_UUID` / `NCCL_MNNVL_CLIQUE_ID`), fused in host and `dev` order. `None` when `h`
    /// has no fabric information, its clique is `h` alone, or `NCCL_MNNVL_ENABLE=0`.
    pub fn clique_topology(&self, h: usize, settings: &TopoSettings) -> Result<Option<Topology>> {
        if settings.mnnvl.enable == crate::settings::MnnvlEnable::Off {
            return Ok(None);
        }
        let key = |n: &ClusterNode| {
            n.fabric
                .map(|f| f.with_overrides(&settings.mnnvl))
                .map(|f| (f.cluster_uuid, f.clique_id))
        };
        let Some(mine) = self.nodes.get(h).and_then(key) else {
            return Ok(None);
        };
        let hosts: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| key(&self.nodes[i]) == Some(mine))
            .collect();
        if hosts.len() < 2 {
            return Ok(None);
        }
        let mut prepared: Vec<(usize, HostXml)> = Vec::new();
        for &i in &hosts {
            let n = &self.nodes[i];
            if !prepared
                .iter()
                .any(|(j, _)| Arc::ptr_eq(&self.nodes[*j].xml, &n.xml))
            {
                prepared.push((
                    i,
                    HostXml::prepare(&n.xml, &n.source, &settings.nic_fusion, settings.version)?,
                ));
            }
        }
        let mut ranks = Vec::new();
        for &i in &hosts {
            let n = &self.nodes[i];
            let host = &prepared
                .iter()
                .find(|(j, _)| Arc::ptr_eq(&self.nodes[*j].xml, &n.xml))
                .expect("every host's XML was prepared")
                .1;
            for &dev in host.devs() {
                ranks.push(CliqueRank {
                    host,
                    file: &n.source,
                    dev,
                    host_hash: i as u64 + 1,
                });
            }
        }
        let opts = BuildOptions {
            version: settings.version,
            gpus: None,
            rank_base: 0,
            inter: ranks.len() < self.n_gpus(),
            fusion: settings.nic_fusion.clone(),
            nic_guids: self.nic_guids,
        };
        let sys = System::from_clique(&ranks, &opts)?;
        Ok(Some(Topology::new(sys, settings)))
    }

    /// The number of distinct NVLink domains (cluster UUIDs) among the hosts.
    pub fn nvl_domains(&self) -> usize {
        let mut uuids: Vec<[u64; 2]> = self
            .nodes
            .iter()
            .filter_map(|n| n.fabric.map(|f| f.cluster_uuid))
            .collect();
        uuids.sort_unstable();
        uuids.dedup();
        uuids.len()
    }

    /// `n` identical hosts of one file.
    pub fn load(
        file: &str,
        n: usize,
        settings: &TopoSettings,
        completion: Option<Completion>,
    ) -> Result<Cluster> {
        let xml = Arc::new(crate::read_xml(file)?);
        let hosts: Vec<(String, Arc<XmlElement>)> = (0..n.max(1))
            .map(|_| (file.to_string(), xml.clone()))
            .collect();
        Self::from_hosts(&hosts, settings, completion.unwrap_or_default())
    }

    /// Total GPUs.
    pub fn n_gpus(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| n.topo.system.count(NodeKind::Gpu))
            .sum()
    }
    /// Number of distinct node topologies actually computed.
    pub fn distinct_topologies(&self) -> usize {
        let mut seen: Vec<*const Topology> = Vec::new();
        for n in &self.nodes {
            let p = Arc::as_ptr(&n.topo);
            if !seen.contains(&p) {
                seen.push(p);
            }
        }
        seen.len()
    }
}

/// Complete a skeleton when asked to (or fail with a clear message when it is one and no model was
/// given); return the XML to build from and notes.
pub fn prepare(
    xml: &XmlElement,
    source: &str,
    completion: Completion,
) -> Result<(XmlElement, Vec<String>)> {
    let report = profiles::inspect(xml);
    let needs = report.is_skeleton
        || report.gpu_slots > 0
        || report.cpus_without_arch > 0
        || report.classless_pci > 0;
    match (needs, completion.gpu) {
        (false, _) => Ok((xml.clone(), Vec::new())),
        (true, Some(model)) => {
            let (x, notes) = profiles::complete(xml, model, completion.nic_speed_mbps);
            Ok((
                x,
                notes
                    .into_iter()
                    .map(|n| format!("{source}: {n}"))
                    .collect(),
            ))
        }
        (true, None) if report.is_skeleton => {
            Err(TopoError::Model(format!("{source}: {}", report.summary())))
        }
        (true, None) => Ok((xml.clone(), Vec::new())),
    }
}
