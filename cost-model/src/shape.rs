//! What the tuning model reads from a communicator: the part of `planner::CommPlan` NCCL's
//! `ncclTopoTuneModel` and `topoGetAlgoInfo` look at. Keeping it a small value type lets tests and
//! the calibration set describe systems directly, and keeps the model independent of how the plan
//! was made.

use crate::consts::{Algo, N_ALGOS};
use planner::{CommPlan, Pattern, TopoGraph};
use serde::Serialize;
use topo::PathType;

/// `NCCL_TOPO_CPU_VENDOR_MIXED` (topo.h).
pub const CPU_VENDOR_MIXED: i32 = 4;

/// The fields of one `ncclTopoGraph` the model reads.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GraphShape {
    /// Search pattern.
    pub pattern: Pattern,
    /// Search channels (before Postset doubling).
    pub n_channels: i32,
    /// Per-channel bandwidth inside a node (GB/s).
    pub bw_intra: f32,
    /// Per-channel bandwidth to the network (GB/s).
    pub bw_inter: f32,
    /// Network latency (µs).
    pub latency_inter: f32,
    /// Worst GPU-GPU path.
    pub type_intra: PathType,
    /// Worst GPU-NET path.
    pub type_inter: PathType,
    /// All channels identical.
    pub same_channels: bool,
}

impl GraphShape {
    /// A graph that was not searched (0 channels).
    pub fn none(pattern: Pattern) -> GraphShape {
        GraphShape {
            pattern,
            n_channels: 0,
            bw_intra: 0.0,
            bw_inter: 0.0,
            latency_inter: 0.0,
            type_intra: PathType::Loc,
            type_inter: PathType::Pix,
            same_channels: false,
        }
    }
    /// A searched graph.
    pub fn new(
        pattern: Pattern,
        n_channels: i32,
        bw_intra: f32,
        bw_inter: f32,
        type_intra: PathType,
        type_inter: PathType,
    ) -> GraphShape {
        GraphShape {
            pattern,
            n_channels,
            bw_intra,
            bw_inter,
            latency_inter: 0.0,
            type_intra,
            type_inter,
            same_channels: true,
        }
    }
    /// From a planner graph.
    pub fn from_graph(g: &TopoGraph) -> GraphShape {
        GraphShape {
            pattern: g.pattern,
            n_channels: g.n_channels,
            bw_intra: g.bw_intra,
            bw_inter: g.bw_inter,
            latency_inter: g.latency_inter,
            type_intra: g.type_intra,
            type_inter: g.type_inter,
            same_channels: g.same_channels != 0,
        }
    }
}

/// Everything the model needs to know about a communicator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommShape {
    /// Ranks.
    pub n_ranks: usize,
    /// Nodes.
    pub n_nodes: usize,
    /// Ranks per node, per node.
    pub local_ranks: Vec<usize>,
    /// Smallest compute capability.
    pub min_comp_cap: i32,
    /// Largest compute capability.
    pub max_comp_cap: i32,
    /// `comm->cpuArch`.
    pub cpu_arch: i32,
    /// `comm->cpuVendor`.
    pub cpu_vendor: i32,
    /// Ring, tree, CollNet chain, NVLS, CollNet direct.
    pub ring: GraphShape,
    /// Tree graph.
    pub tree: GraphShape,
    /// CollNet chain graph.
    pub collnet_chain: GraphShape,
    /// NVLS graph.
    pub nvls: GraphShape,
    /// CollNet direct graph.
    pub collnet_direct: GraphShape,
    /// `comm->maxTreePattern`.
    pub max_tree_pattern: Pattern,
    /// `comm->nChannels` (after Postset).
    pub n_channels: usize,
    /// `comm->nvlsChannels`.
    pub nvls_channels: usize,
    /// `comm->nvlsSupport`.
    pub nvls_support: bool,
    /// CollNet in use (`config.collnetEnable` and a CollNet plugin).
    pub collnet_support: bool,
    /// P2P channels.
    pub p2p_channels: usize,
    /// P2P channels per peer.
    pub p2p_channels_per_peer: usize,
    /// All GPU pairs NVLink-connected.
    pub all_nvlink: bool,
    /// Slowest NET bandwidth (GB/s).
    pub min_net_bw: f32,
    /// Whether the nodes have an NVSwitch (`ncclTopoGetNvsCount` > 0; CollNet direct needs one).
    pub has_nvswitch: bool,
    /// Bandwidth of a GPU's PCIe link (GB/s; 0 when unknown): with the ring's network bandwidth
    /// per GPU it gives the PCIe load network traffic puts on each GPU (calibrated mode).
    pub gpu_pci_bw: f32,
    /// Whether the GPUs of a node reach each other peer-to-peer (PCIe or NVLink DMA); `false`
    /// when NCCL stages the data through host memory (its SHM transport: boards whose driver
    /// disables P2P, such as GeForce cards, or `NCCL_P2P_DISABLE`), as the plan says for rank
    /// 0's node.
    pub gpu_p2p: bool,
    /// Multi-node NVLink (`comm->MNNVL`): each node is an NVLink domain fused across several
    /// hosts (the trays of an NVL72 rack).
    pub mnnvl: bool,
}

impl CommShape {
    /// The graph NCCL uses for an algorithm (`graphs[a]` in `ncclTopoTuneModel`): NVLS and
    /// NVLSTree share the NVLS graph, PAT uses the tree graph.
    pub fn graph(&self, a: Algo) -> &GraphShape {
        match a {
            Algo::Tree | Algo::Pat => &self.tree,
            Algo::Ring => &self.ring,
            Algo::CollNetDirect => &self.collnet_direct,
            Algo::CollNetChain => &self.collnet_chain,
            Algo::Nvls | Algo::NvlsTree => &self.nvls,
        }
    }
    /// All graphs indexed by algorithm.
    pub fn graphs(&self) -> [&GraphShape; N_ALGOS] {
        Algo::ALL.map(|a| self.graph(a))
    }
    /// `comm->localRanks` as rank 0 sees it (ranks on the first node).
    pub fn local_ranks0(&self) -> usize {
        self.local_ranks.first().copied().unwrap_or(self.n_ranks)
    }
    /// The communicator's first node alone, with the same graphs: for a multi-node NVLink
    /// communicator, one of its NVLink domains.
    pub fn first_node(&self) -> CommShape {
        let n = self.local_ranks0();
        CommShape {
            n_ranks: n,
            n_nodes: 1,
            local_ranks: vec![n],
            ..self.clone()
        }
    }

    /// Largest number of ranks on a node.
    pub fn max_local_ranks(&self) -> usize {
        self.local_ranks
            .iter()
            .copied()
            .max()
            .unwrap_or(self.n_ranks)
    }

    /// From a planned communicator.
    pub fn from_plan(p: &CommPlan) -> CommShape {
        CommShape {
            n_ranks: p.n_ranks,
            n_nodes: p.n_nodes.max(1),
            local_ranks: p.node_ranks.iter().map(|r| r.len()).collect(),
            min_comp_cap: p.min_comp_cap,
            max_comp_cap: p.max_comp_cap,
            cpu_arch: p.cpu_arch,
            cpu_vendor: p.cpu_vendor,
            ring: GraphShape::from_graph(&p.graphs.ring),
            tree: GraphShape::from_graph(&p.graphs.tree),
            collnet_chain: GraphShape::from_graph(&p.graphs.collnet_chain),
            nvls: GraphShape::from_graph(&p.graphs.nvls),
            collnet_direct: GraphShape::from_graph(&p.graphs.collnet_direct),
            max_tree_pattern: p.max_tree_pattern,
            n_channels: p.n_channels,
            nvls_channels: p.nvls_channels,
            nvls_support: p.nvls_support,
            collnet_support: p.collnet_support,
            p2p_channels: p.p2p_channels,
            p2p_channels_per_peer: p.p2p_channels_per_peer,
            all_nvlink: p.all_nvlink,
            min_net_bw: p.min_net_bw,
            has_nvswitch: p.nvs_count > 0,
            gpu_pci_bw: p.gpu_pci_bw,
            gpu_p2p: p.gpu_p2p,
            mnnvl: p.mnnvl,
        }
    }

    /// A synthetic communicator of `n_nodes` identical nodes with `ppn` ranks each: the form the
    /// unit tests and the calibration set use to describe systems with the planner's numbers.
    pub fn uniform(
        n_nodes: usize,
        ppn: usize,
        sm: i32,
        ring: GraphShape,
        tree: GraphShape,
    ) -> Self {
        CommShape {
            n_ranks: n_nodes * ppn,
            n_nodes,
            local_ranks: vec![ppn; n_nodes],
            min_comp_cap: sm,
            max_comp_cap: sm,
            cpu_arch: topo::consts::cpu_arch::X86,
            cpu_vendor: topo::consts::cpu_vendor::INTEL,
            ring,
            tree,
            collnet_chain: GraphShape::none(Pattern::Tree),
            nvls: GraphShape::none(Pattern::Nvls),
            collnet_direct: GraphShape::none(Pattern::CollnetDirect),
            max_tree_pattern: tree.pattern,
            n_channels: 2 * ring.n_channels.min(tree.n_channels.max(1)).max(1) as usize,
            nvls_channels: 0,
            nvls_support: false,
            collnet_support: false,
            p2p_channels: 0,
            p2p_channels_per_peer: 0,
            all_nvlink: ring.type_intra <= PathType::Nvl,
            min_net_bw: if n_nodes > 1 { ring.bw_inter } else { 0.0 },
            // NVLink to every peer of a node with more than two GPUs means NVSwitches.
            has_nvswitch: ring.type_intra <= PathType::Nvl && ppn > 2,
            gpu_pci_bw: 0.0,
            gpu_p2p: true,
            mnnvl: false,
        }
    }
    /// Add an NVLS graph (`nvls_channels` launched).
    pub fn with_nvls(mut self, nvls: GraphShape, nvls_channels: usize) -> Self {
        self.nvls = nvls;
        self.nvls_channels = nvls_channels;
        self.nvls_support = nvls.n_channels > 0;
        self
    }
    /// Set p2p channels (total, per peer).
    pub fn with_p2p(mut self, channels: usize, per_peer: usize) -> Self {
        self.p2p_channels = channels;
        self.p2p_channels_per_peer = per_peer;
        self
    }
}
