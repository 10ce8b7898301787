//! The topology graph NCCL builds from the XML (NCCL 2.30.7 `ncclTopoGetSystemFromXml`, with the
//! 2.18-2.29 structure behind the version profile): nodes, links with NCCL's bandwidths, NCCL's link
//! order, BCM switch flattening and CPU interconnect.
//!
//! Construction follows NCCL's own order (CPUs and their PCI trees, NVLinks, C2C, pcilinks, flatten,
//! connect CPUs, sort) on a plain arena so that NCCL's ordering rules carry over exactly; the result
//! is handed out as a petgraph graph plus, per node, its links in NCCL's order.
//!
//! Layout: this module holds [`System`] and [`BuildOptions`]; `types` the nodes and links,
//! `host_xml` the per-host checked and fused XML and the per-communicator claim and trim,
//! `build` the construction arena.

mod build;
mod host_xml;
mod types;

use build::Builder;
use host_xml::{check_and_fuse, claim_and_trim, fuse_clique};
pub use host_xml::{CliqueRank, HostXml};
pub use types::{CpuInfo, GpuInfo, NetInfo, NodeData, NodeKind, TopoLink, TopoNode};

use crate::error::Result;
use crate::path::LinkType;
use crate::version::NcclVersion;
use crate::xml::XmlElement;
use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};

/// The topology of one host as NCCL models it.
#[derive(Debug, Clone)]
pub struct System {
    /// The graph: nodes with NCCL data, directed links with type and bandwidth.
    pub graph: DiGraph<TopoNode, TopoLink>,
    /// Each node's outgoing links in NCCL's order (bandwidth-sorted, then NVL / PCI down / PCI up / SYS).
    pub adj: Vec<Vec<EdgeIndex>>,
    /// Nodes of each kind in NCCL's order (`system->nodes[type]`), indexed by `NodeKind::idx`.
    pub by_kind: [Vec<NodeIndex>; 7],
    /// The NCCL release modelled.
    pub version: NcclVersion,
    /// `system->inter`: whether the communicator spans more than this host.
    pub inter: bool,
}

/// Options for turning XML into a `System`.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Version profile.
    pub version: NcclVersion,
    /// Keep only these NVML devices, giving them ranks `rank_base + i` in this order; `None` keeps
    /// every `<gpu>` that has a `rank` (the usual single-communicator view), ranks renumbered by `dev`
    /// order from `rank_base`.
    pub gpus: Option<Vec<i32>>,
    /// First rank on this host.
    pub rank_base: i32,
    /// Whether the communicator spans several hosts (sets `system->inter`).
    pub inter: bool,
    /// How NIC ports are fused into virtual NICs (2.30+).
    pub fusion: crate::settings::NicFusion,
    /// NIC identities across the hosts of a clique ([`System::from_clique`]).
    pub nic_guids: crate::mnnvl::NicGuids,
}

impl System {
    /// Build the system from a topology XML tree the way NCCL does at init.
    pub fn from_xml(root: &XmlElement, file: &str, opts: &BuildOptions) -> Result<System> {
        let (fused, devs) = check_and_fuse(root, file, &opts.fusion, opts.version)?;
        Self::from_claimable(fused.as_ref().unwrap_or(root), &devs, file, opts)
    }

    /// [`Self::from_xml`] on a host XML already checked and NIC-fused for `opts.version` and
    /// `opts.fusion` (made once, used by every communicator on that host).
    pub fn from_host_xml(host: &HostXml, file: &str, opts: &BuildOptions) -> Result<System> {
        if host.version != opts.version || host.fusion != opts.fusion {
            let again = HostXml::prepare(&host.root, file, &opts.fusion, opts.version)?;
            return Self::from_host_xml(&again, file, opts);
        }
        Self::from_claimable(&host.root, &host.devs, file, opts)
    }

    /// The topology of a multi-node NVLink clique: the ranks' hosts' XMLs trimmed to each
    /// rank's GPU and fused in clique-rank order ([`CliqueRank`]), built as one system (one
    /// NVSwitch node for every fabric NVLink, node ids keyed by host). `opts.gpus` and
    /// `opts.rank_base` are not used: rank labels are the clique ranks 0..k.
    pub fn from_clique(ranks: &[CliqueRank], opts: &BuildOptions) -> Result<System> {
        for r in ranks {
            if r.host.version != opts.version || r.host.fusion != opts.fusion {
                return Err(crate::error::TopoError::Model(format!(
                    "{}: host XML prepared for another NCCL release or NIC fusion",
                    r.file
                )));
            }
        }
        let xml = fuse_clique(ranks, opts.nic_guids)?;
        let file = ranks.first().map(|r| r.file).unwrap_or("");
        let mut b = Builder::new(file, opts.version);
        b.build(&xml)?;
        let sys = b.finish(opts.inter);
        // Each clique rank brings its one GPU; a host file whose trimmed part yields another
        // count (a GPU-class element NVLinks name that is not the rank's GPU) is inconsistent.
        let gpus = sys.count(NodeKind::Gpu);
        if gpus != ranks.len() {
            return Err(crate::error::TopoError::Model(format!(
                "{file}: the multi-node NVLink clique of {} ranks fuses to {gpus} GPUs (an \
                 <nvlink> or <pci> of GPU class that is not one of the ranks' GPUs)",
                ranks.len()
            )));
        }
        Ok(sys)
    }

    /// The number of hosts the system was fused from (`system->nHosts`: distinct `host_hash`
    /// values of its CPUs).
    pub fn n_hosts(&self) -> usize {
        let mut ids: Vec<u64> = self
            .nodes(NodeKind::Cpu)
            .iter()
            .map(|&c| self.graph[c].id >> 56)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len().max(1)
    }

    /// Claim and trim a checked, NIC-fused host XML whose claimable GPU devs are `devs`, then
    /// build the graph.
    fn from_claimable(
        root: &XmlElement,
        devs: &[i32],
        file: &str,
        opts: &BuildOptions,
    ) -> Result<System> {
        let xml = claim_and_trim(root, devs, file, opts)?;
        let mut b = Builder::new(file, opts.version);
        b.build(&xml)?;
        Ok(b.finish(opts.inter))
    }

    /// Node data.
    pub fn node(&self, n: NodeIndex) -> &TopoNode {
        &self.graph[n]
    }
    /// Links of a node in NCCL order, as (edge, target, link).
    pub fn links(
        &self,
        n: NodeIndex,
    ) -> impl Iterator<Item = (EdgeIndex, NodeIndex, TopoLink)> + '_ {
        self.adj[n.index()].iter().map(move |&e| {
            let (_, t) = self
                .graph
                .edge_endpoints(e)
                .expect("adjacency lists only hold edges of this graph");
            (e, t, self.graph[e])
        })
    }
    /// Nodes of a kind, in NCCL's order.
    pub fn nodes(&self, k: NodeKind) -> &[NodeIndex] {
        &self.by_kind[k.idx()]
    }
    /// Number of nodes of a kind.
    pub fn count(&self, k: NodeKind) -> usize {
        self.by_kind[k.idx()].len()
    }
    /// GPU data of the i-th GPU.
    pub fn gpu(&self, i: usize) -> &GpuInfo {
        self.graph[self.by_kind[0][i]]
            .gpu()
            .expect("by_kind[GPU] only holds GPU nodes")
    }
    /// The node a GPU's PCI/NVLink/C2C links attach to: its DEV in 2.30, the GPU itself before.
    pub fn gpu_attach(&self, gpu: NodeIndex) -> NodeIndex {
        if !self.version.has_dev_nodes() {
            return gpu;
        }
        self.links(gpu)
            .find(|(_, t, l)| l.ty == LinkType::Loc && self.graph[*t].kind == NodeKind::Dev)
            .map(|x| x.1)
            .unwrap_or(gpu)
    }
    /// Index of a node among the nodes of its kind.
    pub fn index_of(&self, n: NodeIndex) -> usize {
        let k = self.graph[n].kind;
        self.by_kind[k.idx()]
            .iter()
            .position(|&m| m == n)
            .expect("every node is listed under its kind")
    }
    /// Minimum and maximum GPU compute capability.
    pub fn comp_cap(&self) -> Option<(i32, i32)> {
        let sms: Vec<i32> = self
            .nodes(NodeKind::Gpu)
            .iter()
            .filter_map(|&g| self.graph[g].sm())
            .collect();
        Some((*sms.iter().min()?, *sms.iter().max()?))
    }
    /// The first CPU's (arch, vendor, model), as `ncclTopoCpuType` reports it.
    pub fn cpu_type(&self) -> (i32, i32, i32) {
        self.nodes(NodeKind::Cpu)
            .first()
            .and_then(|&c| self.graph[c].cpu())
            .map(|c| (c.arch, c.vendor, c.model))
            .unwrap_or((0, -1, -1))
    }
}

/// `busIdToInt64`: the hex digits of a bus id concatenated ("0000:07:00.0" -> 0x7000).
pub fn busid_to_int(s: &str) -> u64 {
    let mut v: u64 = 0;
    for c in s.chars().take(17) {
        if c == '.' || c == ':' {
            continue;
        }
        match c.to_digit(16) {
            Some(d) => v = v.wrapping_mul(16).wrapping_add(d as u64),
            None => break,
        }
    }
    v
}

const LOCAL_MASK: u64 = 0x00ff_ffff_ffff_ffff;

fn topo_id(system_id: u64, local: u64) -> u64 {
    (system_id << 56) + (local & LOCAL_MASK)
}

/// `ncclTopoGetIntDevice`: vendor/device/subsystem ids packed into 64 bits.
pub fn pci_device(x: &XmlElement) -> u64 {
    let f = |k: &str| {
        x.get(k)
            .and_then(crate::settings::parse_c_int)
            .map(|v| v as u64 & 0xffff)
            .unwrap_or(0)
    };
    (f("vendor") << 48)
        + (f("device") << 32)
        + (f("subsystem_vendor") << 16)
        + f("subsystem_device")
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn busids() {
        assert_eq!(busid_to_int("0000:07:00.0"), 0x7000);
        assert_eq!(busid_to_int("0001:00:00.0"), 0x10_0000);
        assert_eq!(busid_to_int("ffff:ff:01.0"), 0xf_ffff_f010);
    }
}
