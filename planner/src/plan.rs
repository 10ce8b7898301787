//! What `ncclCommInitRank` ends up with for one communicator: the graphs after the ranks agreed
//! on them, the channels (rings and trees per channel and rank), NVLS heads and the channel counts
//! NCCL prints. This is the planner's output and the cost model's input. The JSON form
//! (`serde`) is documented in `docs/plan-json.md`.

use crate::graph::{Pattern, TopoGraph};
use serde::Serialize;

/// One rank of a communicator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankInfo {
    /// Rank in this communicator.
    pub rank: usize,
    /// Host (cluster node) index.
    pub host: usize,
    /// CUDA/NVML device index on the host (`dev` in the topology XML).
    pub dev: i32,
    /// PCI bus id of the GPU.
    pub busid: String,
    /// Compute capability (e.g. 80).
    pub sm: i32,
    /// Rank in the world communicator this one was split from (itself for the world).
    pub world_rank: usize,
    /// Communicator node index (`comm->rankToNode`).
    pub node: usize,
    /// Index among the ranks of its node (`comm->rankToLocalRank`).
    pub local_rank: usize,
}

/// The graphs one node found (what that node's ranks print as `Pattern ...` lines), before the
/// ranks align them.
#[derive(Debug, Clone, Serialize)]
pub struct NodeSearch {
    /// Communicator node index.
    pub node: usize,
    /// Host index.
    pub host: usize,
    /// Ranks on this node, in the node's GPU order.
    pub ranks: Vec<usize>,
    /// NCCL topology ids of those GPUs (`GPU/<system>-<local>` in the graph lines), same order.
    pub gpu_ids: Vec<(u64, u64)>,
    /// The node's graphs; those that were not searched (CollNet disabled, no NVLS) have zero
    /// channels. Serialized as a list in id order (ring, tree, CollNet chain, NVLS, CollNet
    /// direct: NCCL's compute order).
    #[serde(serialize_with = "graphs_in_id_order")]
    pub graphs: CommGraphs,
    /// INFO lines the search printed besides the graph lines (fallbacks, graph-file loads).
    pub notes: Vec<String>,
    /// The topology the node searched on (this communicator's GPUs of the host, local rank
    /// labels).
    #[serde(skip)]
    pub topo: Option<std::sync::Arc<topo::Topology>>,
}

/// The aligned graphs of a communicator (`comm->graphs`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommGraphs {
    /// Ring graph (id 0).
    pub ring: TopoGraph,
    /// Tree graph (id 1).
    pub tree: TopoGraph,
    /// CollNet chain graph (id 2).
    pub collnet_chain: TopoGraph,
    /// NVLS graph (id 3).
    pub nvls: TopoGraph,
    /// CollNet direct graph (id 4).
    pub collnet_direct: TopoGraph,
}

impl CommGraphs {
    /// The five graphs in id order (ring, tree, CollNet chain, NVLS, CollNet direct), which is
    /// also the order `initTransportsRank` computes them in.
    pub fn iter(&self) -> impl Iterator<Item = &TopoGraph> {
        [
            &self.ring,
            &self.tree,
            &self.collnet_chain,
            &self.nvls,
            &self.collnet_direct,
        ]
        .into_iter()
    }

    /// [`Self::iter`], mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut TopoGraph> {
        [
            &mut self.ring,
            &mut self.tree,
            &mut self.collnet_chain,
            &mut self.nvls,
            &mut self.collnet_direct,
        ]
        .into_iter()
    }

    /// Each graph through `f`.
    pub fn map(&self, mut f: impl FnMut(&TopoGraph) -> TopoGraph) -> CommGraphs {
        CommGraphs {
            ring: f(&self.ring),
            tree: f(&self.tree),
            collnet_chain: f(&self.collnet_chain),
            nvls: f(&self.nvls),
            collnet_direct: f(&self.collnet_direct),
        }
    }
}

/// Serialize the graphs as a list in id order (the layout of `searches[].graphs` in the JSON).
fn graphs_in_id_order<S: serde::Serializer>(g: &CommGraphs, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(g.iter())
}

/// One rank's view of one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChannelRank {
    /// Previous rank in the ring.
    pub ring_prev: i32,
    /// Next rank in the ring.
    pub ring_next: i32,
    /// Tree parent (-1 for the root).
    pub tree_up: i32,
    /// Tree children (-1 when unused).
    pub tree_down: [i32; 3],
}

/// What one `Tree %d : up -> rank -> down0/down1/down2` line of `connectTrees` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLine {
    /// Channel.
    pub channel: usize,
    /// Parent rank (-1 for none).
    pub up: i32,
    /// Children (-1 for none).
    pub down: [i32; 3],
}

/// A planned communicator.
#[derive(Debug, Clone, Serialize)]
pub struct CommPlan {
    /// Name ("world", "tp0", "dp3", ...).
    pub name: String,
    /// NCCL version reproduced, e.g. "2.30.7".
    pub nccl_version: String,
    /// Number of ranks.
    pub n_ranks: usize,
    /// Number of nodes (distinct ring-0 entry ranks, as NCCL counts them).
    pub n_nodes: usize,
    /// Ranks.
    pub ranks: Vec<RankInfo>,
    /// `comm->nodeRanks[n].localRankToRank`.
    pub node_ranks: Vec<Vec<usize>>,
    /// Smallest number of ranks on a node.
    pub min_local_ranks: usize,
    /// Largest number of ranks on a node.
    pub max_local_ranks: usize,
    /// Smallest compute capability.
    pub min_comp_cap: i32,
    /// Largest compute capability.
    pub max_comp_cap: i32,
    /// `comm->cpuArch` (topo::consts::cpu_arch).
    pub cpu_arch: i32,
    /// `comm->cpuVendor`.
    pub cpu_vendor: i32,
    /// CPU model.
    pub cpu_model: i32,
    /// What each node's search found.
    pub searches: Vec<NodeSearch>,
    /// Graphs after alignment across ranks.
    pub graphs: CommGraphs,
    /// `comm->maxTreePattern`.
    pub max_tree_pattern: Pattern,
    /// Collective channels (`comm->nChannels` after Postset).
    pub n_channels: usize,
    /// CollNet channels NCCL prints (it prints `comm->nChannels` again).
    pub collnet_channels: usize,
    /// NVLS channels (`comm->nvlsChannels`), 0 without NVLS.
    pub nvls_channels: usize,
    /// Whether NVLS is used.
    pub nvls_support: bool,
    /// Whether CollNet is used.
    pub collnet_support: bool,
    /// NVLS heads: `nvls_heads[h][node]` = rank.
    pub nvls_heads: Vec<Vec<usize>>,
    /// P2P channels.
    pub p2p_channels: usize,
    /// P2P channels per peer.
    pub p2p_channels_per_peer: usize,
    /// `comm->p2pMaxPeers`.
    pub p2p_max_peers: usize,
    /// Tree depth NCCL records (`nRanks/nNodes - 1 + log2i(nNodes)`).
    pub tree_depth: usize,
    /// `channels[c][rank]`, for c < n_channels.
    pub channels: Vec<Vec<ChannelRank>>,
    /// Ring order per channel starting at rank 0 (what `Channel xx/yy :` prints).
    pub rings: Vec<Vec<usize>>,
    /// `Tree %d : up -> rank -> down` INFO lines each rank prints in `connectTrees` (only the
    /// ranks that connect their node to other nodes print them).
    #[serde(skip)]
    pub tree_lines: Vec<Vec<TreeLine>>,
    /// Whether every GPU pair on every node is connected by NVLink (`ncclTopoPathAllNVLink`).
    pub all_nvlink: bool,
    /// Slowest NET bandwidth any rank sees (`comm->minNetBw`, GB/s; 0 without NETs).
    pub min_net_bw: f32,
    /// NVSwitches in rank 0's node topology (`ncclTopoGetNvsCount`; NCCL's tuning turns
    /// CollNet direct off without one).
    pub nvs_count: usize,
    /// Bandwidth of rank 0's GPU link to its PCIe parent (GB/s, NCCL's width x generation
    /// value; 0 when unknown). With the NICs' bandwidth it says how loaded a GPU's PCIe link is
    /// by network traffic, which the calibrated cost model reads.
    pub gpu_pci_bw: f32,
}
