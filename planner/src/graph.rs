//! `struct ncclTopoGraph` (NCCL 2.30.7 `src/include/graph.h`): one searched graph of a node.

use serde::Serialize;
use topo::PathType;

/// Search pattern (`NCCL_TOPO_PATTERN_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Pattern {
    /// 1: NET in and out at the first GPU, split between the first two GPUs.
    BalancedTree = 1,
    /// 2: NET in at GPU 0, out at GPU 1.
    SplitTree = 2,
    /// 3: a chain, NET in and out at the first GPU.
    Tree = 3,
    /// 4: a ring (NET in at the first GPU and out at the last when inter-node).
    Ring = 4,
    /// 5: NVLink SHARP (one head GPU per channel).
    Nvls = 5,
    /// 6: CollNet direct (all-to-all to the heads).
    CollnetDirect = 6,
}

impl Pattern {
    /// NCCL's integer.
    pub fn number(self) -> i32 {
        self as i32
    }
    /// From NCCL's integer.
    pub fn from_number(n: i32) -> Option<Pattern> {
        Some(match n {
            1 => Pattern::BalancedTree,
            2 => Pattern::SplitTree,
            3 => Pattern::Tree,
            4 => Pattern::Ring,
            5 => Pattern::Nvls,
            6 => Pattern::CollnetDirect,
            _ => return None,
        })
    }
    /// Whether this is one of the tree patterns (their reverse paths must also fit the type).
    pub fn is_tree(self) -> bool {
        matches!(
            self,
            Pattern::BalancedTree | Pattern::Tree | Pattern::SplitTree
        )
    }
}

/// Graph ids as NCCL numbers them in dumps (`graph->id`).
pub mod graph_id {
    /// Ring graph.
    pub const RING: i32 = 0;
    /// Tree graph.
    pub const TREE: i32 = 1;
    /// CollNet chain graph.
    pub const COLLNET_CHAIN: i32 = 2;
    /// NVLS graph.
    pub const NVLS: i32 = 3;
    /// CollNet direct graph.
    pub const COLLNET_DIRECT: i32 = 4;
}

/// One graph: inputs (id, pattern, channel bounds, collNet) and the search's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopoGraph {
    /// 0 ring, 1 tree, 2 collnet chain, 3 nvls, 4 collnet direct.
    pub id: i32,
    /// Pattern (may change during the search: BALANCED_TREE -> TREE on sm90, anything -> TREE with one GPU).
    pub pattern: Pattern,
    /// 0, 1, or 2 (crossNic alternating rails).
    pub cross_nic: i32,
    /// CollNet graph.
    pub coll_net: bool,
    /// Lower bound on channels.
    pub min_channels: i32,
    /// Upper bound on channels.
    pub max_channels: i32,
    /// Channels found.
    pub n_channels: i32,
    /// Per-channel bandwidth inside the node (GB/s).
    pub bw_intra: f32,
    /// Per-channel bandwidth to the network (GB/s).
    pub bw_inter: f32,
    /// Latency of the NET the channels use (µs).
    pub latency_inter: f32,
    /// Worst GPU-GPU path type used.
    pub type_intra: PathType,
    /// Worst GPU-NET path type used.
    pub type_inter: PathType,
    /// Whether all channels are the same.
    pub same_channels: i32,
    /// Sum of the path lengths (tie breaker).
    pub n_hops: i32,
    /// Ranks per channel, `n_channels * ngpus` entries (`intra`).
    pub intra: Vec<i32>,
    /// NET ids (entry, exit) per channel, `n_channels * 2` entries (`inter`).
    pub inter: Vec<i64>,
}

impl TopoGraph {
    /// A graph to search, as `initTransportsRank` sets it up.
    pub fn new(id: i32, pattern: Pattern, min_channels: i32, max_channels: i32) -> TopoGraph {
        TopoGraph {
            id,
            pattern,
            cross_nic: 0,
            coll_net: false,
            min_channels,
            max_channels,
            n_channels: 0,
            bw_intra: 0.0,
            bw_inter: 0.0,
            latency_inter: 0.0,
            type_intra: PathType::Loc,
            type_inter: PathType::Loc,
            same_channels: 0,
            n_hops: 0,
            intra: Vec::new(),
            inter: Vec::new(),
        }
    }
    /// The ranks of channel `c` (`ngpus` of them).
    pub fn channel(&self, c: usize, ngpus: usize) -> &[i32] {
        &self.intra[c * ngpus..(c + 1) * ngpus]
    }
}
