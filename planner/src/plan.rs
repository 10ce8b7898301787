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
    /// The GPU's NVLink fabric information after NCCL's overrides (`None`: not reported).
    pub fabric: Option<topo::FabricInfo>,
    /// Multi-node NVLink state of this rank (`comm->MNNVL`, its clique and NVLink domain);
    /// `None` when off.
    pub mnnvl: Option<crate::comm::MnnvlRank>,
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeLine {
    /// Channel.
    pub channel: usize,
    /// Parent rank (-1 for none).
    pub up: i32,
    /// Children (-1 for none).
    pub down: [i32; 3],
}

/// The `Tree` lines of every rank, kept in one list ordered by rank (a communicator can have
/// half a million ranks, few of which print any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeLines {
    /// Where each rank's lines start in `lines` (one more entry than ranks).
    start: Vec<u32>,
    /// The lines, rank by rank, each rank's in channel order.
    lines: Vec<TreeLine>,
}

impl TreeLines {
    /// The lines `rank` prints.
    pub fn of(&self, rank: usize) -> &[TreeLine] {
        match (self.start.get(rank), self.start.get(rank + 1)) {
            (Some(&a), Some(&b)) => self.lines.get(a as usize..b as usize).unwrap_or(&[]),
            _ => &[],
        }
    }
}

/// Fills [`TreeLines`] whose count per rank is known: each rank's next line goes to its next
/// free place, ranks in any order.
pub struct TreeLinesFill {
    lines: TreeLines,
    next: Vec<u32>,
}

impl TreeLinesFill {
    /// Room for `counts[r]` lines of each rank r.
    pub fn with_counts(counts: &[u32]) -> TreeLinesFill {
        let mut start = Vec::with_capacity(counts.len() + 1);
        let mut at = 0u32;
        start.push(0);
        for &n in counts {
            at += n;
            start.push(at);
        }
        let next = start[..counts.len()].to_vec();
        let lines = vec![TreeLine::default(); at as usize];
        TreeLinesFill {
            lines: TreeLines { start, lines },
            next,
        }
    }

    /// Add `rank`'s next line (beyond its count, the line is dropped).
    pub fn push(&mut self, rank: usize, line: TreeLine) {
        let at = self.next[rank];
        if at < self.lines.start[rank + 1] {
            self.lines.lines[at as usize] = line;
            self.next[rank] += 1;
        }
    }

    /// The filled lines.
    pub fn finish(self) -> TreeLines {
        self.lines
    }
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
    /// Whether multi-node NVLink is on (for rank 0; `comm->MNNVL`): the topology of each of its
    /// nodes is fused across an NVLink clique of several hosts.
    pub mnnvl: bool,
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
    /// `channels[c][rank]`, for c < n_channels. The ring order of a channel from rank 0 (what
    /// `Channel xx/yy :` prints) is [`CommPlan::ring_from_rank0`]; the JSON form carries it as
    /// `rings` ([`CommPlan::to_json`]).
    pub channels: Vec<Vec<ChannelRank>>,
    /// `Tree %d : up -> rank -> down` INFO lines the ranks print in `connectTrees` (only the
    /// ranks that connect their node to other nodes print them); [`TreeLines::of`] gives a
    /// rank's.
    #[serde(skip)]
    pub tree_lines: TreeLines,
    /// Whether every GPU pair on every node is connected by NVLink (`ncclTopoPathAllNVLink`).
    pub all_nvlink: bool,
    /// Whether the GPUs of rank 0's node reach each other peer-to-peer (`ncclTopoCheckP2p`
    /// for every pair: path type within the P2P level, and NVML reporting P2P, which boards
    /// such as GeForce cards do not); `false` means NCCL stages their traffic through host
    /// memory (its SHM transport).
    pub gpu_p2p: bool,
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

impl CommPlan {
    /// Channel `c`'s ring as rank 0 walks it, following each rank's next rank (what NCCL's
    /// `Channel xx/yy :` line prints): `n_ranks` ranks starting at 0.
    pub fn ring_from_rank0(&self, c: usize) -> impl Iterator<Item = usize> + '_ {
        let ch = &self.channels[c];
        std::iter::successors(
            Some(0usize),
            move |&r| Some(ch[r].ring_next.max(0) as usize),
        )
        .take(self.n_ranks)
    }

    /// The JSON form (`docs/plan-json.md`): the fields, and `rings[c]`, each channel's ring
    /// from rank 0.
    pub fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        let mut v = serde_json::to_value(self)?;
        let rings: Vec<Vec<usize>> = (0..self.channels.len())
            .map(|c| self.ring_from_rank0(c).collect())
            .collect();
        if let serde_json::Value::Object(m) = &mut v {
            m.insert("rings".into(), serde_json::to_value(rings)?);
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::{TreeLine, TreeLinesFill};

    #[test]
    fn tree_lines_keep_each_ranks_order_whatever_the_rank_order() {
        let line = |channel| TreeLine {
            channel,
            up: -1,
            down: [-1; 3],
        };
        let pairs = [
            (5, line(0)),
            (2, line(0)),
            (5, line(8)),
            (2, line(8)),
            (5, line(1)),
        ];
        let mut counts = [0u32; 7];
        for &(r, _) in &pairs {
            counts[r] += 1;
        }
        let mut fill = TreeLinesFill::with_counts(&counts);
        for (r, l) in pairs {
            fill.push(r, l);
        }
        let t = fill.finish();
        let channels = |r| t.of(r).iter().map(|l| l.channel).collect::<Vec<_>>();
        assert_eq!(channels(5), [0, 8, 1]);
        assert_eq!(channels(2), [0, 8]);
        assert!(t.of(0).is_empty() && t.of(6).is_empty() && t.of(3).is_empty());
    }
}
