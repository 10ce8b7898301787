//! NCCL's tuning vocabulary (functions, algorithms, protocols, hardware classes) and the constant
//! tables of `src/graph/tuning.cc`, with the release in which each value changed.
//!
//! The values are NCCL 2.30.7's `ncclTunerConstantsDefaults` unless a [`Profile`] for an older
//! release says otherwise; every delta below was read from the release tags (v2.18.3 .. v2.30.7).

use serde::Serialize;
use topo::NcclVersion;

/// A collective function in NCCL's order (`ncclFunc_t`, the tuning table's row order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Func {
    /// `ncclFuncBroadcast` (0).
    Broadcast = 0,
    /// `ncclFuncReduce` (1).
    Reduce = 1,
    /// `ncclFuncAllGather` (2).
    AllGather = 2,
    /// `ncclFuncReduceScatter` (3).
    ReduceScatter = 3,
    /// `ncclFuncAllReduce` (4).
    AllReduce = 4,
}

impl Func {
    /// All tuned functions in NCCL's order.
    pub const ALL: [Func; 5] = [
        Func::Broadcast,
        Func::Reduce,
        Func::AllGather,
        Func::ReduceScatter,
        Func::AllReduce,
    ];
    /// `ncclFuncStr`.
    pub fn name(self) -> &'static str {
        [
            "Broadcast",
            "Reduce",
            "AllGather",
            "ReduceScatter",
            "AllReduce",
        ][self as usize]
    }
    /// Steps of the ring algorithm (`nsteps` in `ncclTopoTuneModel`).
    pub fn ring_steps(self, n_ranks: usize) -> usize {
        match self {
            Func::AllReduce => 2 * (n_ranks - 1),
            Func::AllGather | Func::ReduceScatter => n_ranks - 1,
            Func::Broadcast | Func::Reduce => n_ranks,
        }
    }
    /// `ncclFuncTrafficPerByte` (enqueue.cc): how NCCL weighs a task's count when grouping.
    pub fn traffic_per_byte(self, n_ranks: usize) -> usize {
        match self {
            Func::AllReduce => 2,
            Func::AllGather | Func::ReduceScatter => n_ranks,
            _ => 1,
        }
    }
}

/// An algorithm in NCCL's order (`NCCL_ALGO_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Algo {
    /// Tree (0).
    Tree = 0,
    /// Ring (1).
    Ring = 1,
    /// CollNet direct (2).
    CollNetDirect = 2,
    /// CollNet chain (3).
    CollNetChain = 3,
    /// NVLink SHARP (4).
    Nvls = 4,
    /// NVLS inside nodes, trees across (5).
    NvlsTree = 5,
    /// Parallel aggregated trees (6, 2.23+).
    Pat = 6,
}

impl Algo {
    /// All algorithms in NCCL's order.
    pub const ALL: [Algo; 7] = [
        Algo::Tree,
        Algo::Ring,
        Algo::CollNetDirect,
        Algo::CollNetChain,
        Algo::Nvls,
        Algo::NvlsTree,
        Algo::Pat,
    ];
    /// `ncclAlgoStr`.
    pub fn name(self) -> &'static str {
        [
            "Tree",
            "Ring",
            "CollNetDirect",
            "CollNetChain",
            "NVLS",
            "NVLSTree",
            "PAT",
        ][self as usize]
    }
    /// From an index.
    pub fn from_index(i: usize) -> Algo {
        Algo::ALL[i]
    }
}

/// A protocol in NCCL's order (`NCCL_PROTO_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Proto {
    /// Low latency, 8-byte stores with flags (0).
    Ll = 0,
    /// 128-byte lines with flags (1).
    Ll128 = 1,
    /// Plain copies with step synchronisation (2).
    Simple = 2,
}

impl Proto {
    /// All protocols in NCCL's order.
    pub const ALL: [Proto; 3] = [Proto::Ll, Proto::Ll128, Proto::Simple];
    /// `ncclProtoStr`.
    pub fn name(self) -> &'static str {
        ["LL", "LL128", "Simple"][self as usize]
    }
    /// From an index.
    pub fn from_index(i: usize) -> Proto {
        Proto::ALL[i]
    }
}

/// Number of functions, algorithms, protocols in the tables.
pub const N_FUNCS: usize = 5;
/// Number of algorithms (2.30; PAT exists from 2.23 but the table always has the slot here).
pub const N_ALGOS: usize = 7;
/// Number of protocols.
pub const N_PROTOS: usize = 3;

/// Hardware class of a latency (`NCCL_HW_NVLINK`, `NCCL_HW_PCI`, `NCCL_HW_NET`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hw {
    /// NVLink (index 0).
    NvLink = 0,
    /// PCIe (1).
    Pci = 1,
    /// Network (2).
    Net = 2,
}

/// GPU generation index used by the per-channel caps (`NCCL_*_COMPCAP_IDX`, from minCompCap).
pub fn compcap_index(min_comp_cap: i32) -> usize {
    if min_comp_cap >= 100 {
        3
    } else if min_comp_cap >= 90 {
        2
    } else if min_comp_cap >= 80 {
        1
    } else {
        0
    }
}

/// `WARP_SIZE`.
pub const WARP_SIZE: i32 = 32;
/// `NCCL_MAX_NTHREADS` (device.h).
pub const MAX_NTHREADS: i32 = 640;
/// `NCCL_SIMPLE_MAX_NTHREADS`.
pub const SIMPLE_MAX_NTHREADS: i32 = 512;
/// `NCCL_LL_MAX_NTHREADS`.
pub const LL_MAX_NTHREADS: i32 = 512;
/// `NCCL_LL128_MAX_NTHREADS`.
pub const LL128_MAX_NTHREADS: i32 = 640;
/// `NCCL_LL_THREAD_THRESHOLD` (comm.h).
pub const LL_THREAD_THRESHOLD: i64 = 8;
/// `NCCL_LL128_THREAD_THRESHOLD`.
pub const LL128_THREAD_THRESHOLD: i64 = 8;
/// `NCCL_SIMPLE_THREAD_THRESHOLD`.
pub const SIMPLE_THREAD_THRESHOLD: i64 = 64;
/// `PCI_BW` (topo.h): the ring bandwidth at or below which Simple gets 256 threads.
pub const PCI_BW: f32 = 12.0;
/// `NCCL_MAX_DIRECT_ARITY` (device.h): CollNet needs at most this + 1 local ranks.
pub const MAX_DIRECT_ARITY: usize = 7;
/// `NCCL_MAX_NVLS_ARITY`: NVLS for non-AllReduce needs at most this many local ranks.
pub const MAX_NVLS_ARITY: usize = 32;
/// `NCCL_MAX_DEV_WORK_BATCH_COLLS` = 1024 B / sizeof(ncclDevWorkColl) (128 B in 2.30).
pub const MAX_DEV_WORK_BATCH_COLLS: usize = 8;
/// `NCCL_ALGO_PROTO_IGNORE` in a tuner cost table.
pub const ALGO_PROTO_IGNORE: f32 = -1.0;

/// `treeCorrectionFactor[proto][log2(nBytes/64)]` (tuning.cc), unchanged 2.18 .. 2.30.
pub const TREE_CORRECTION: [[f32; 24]; 3] = [
    [
        1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.0, 1.0, 1.0, 1.0,
    ],
    [
        1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9,
        0.9, 0.9, 0.9, 1.0, 1.0, 1.0,
    ],
    [
        0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8,
        0.7, 0.7, 0.8, 0.9, 0.9, 0.9,
    ],
];

/// The constant tables and the rule switches of one NCCL release.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Profile {
    /// Release reproduced.
    pub version: String,
    /// `baseLatencies[algo][proto]` (µs).
    pub base_lat: [[f32; 3]; 7],
    /// `hwLatencies[hw][algo][proto]` (µs).
    pub hw_lat: [[[f32; 3]; 7]; 3],
    /// `llMaxBws[index1][index2]` (GB/s).
    pub ll_max_bw: [[f64; 3]; 4],
    /// `perChMaxRingLL128Bws[cc][index2]`.
    pub per_ch_max_ring_ll128_bw: [[f64; 3]; 4],
    /// `perChMaxTreeLL128Bws[cc][index2]`.
    pub per_ch_max_tree_ll128_bw: [[f64; 3]; 4],
    /// `perChMaxTreeBws[cc][index2]`.
    pub per_ch_max_tree_bw: [[f64; 3]; 4],
    /// `perChMaxNVLSTreeBws[cc][index2]` (2.28+; earlier releases have no such cap).
    pub per_ch_max_nvls_tree_bw: Option<[[f64; 3]; 4]>,
    /// `nvlsEfficiency[cc]` (2.28+): NVLS bandwidth model with efficiency and (nCh-1)/nCh;
    /// `None` is the older `min(bwIntra, bwInter)` with the 5/6 conversion.
    pub nvls_efficiency: Option<[f32; 4]>,
    /// Ring LL bus bandwidth factor is 0.5 (2.21+); older: 1/4, or 1/3 for single-node AG/RS/Bcast.
    pub ring_ll_half: bool,
    /// Ring LL128 uses 0.7 when ppn < 2 (<= 2.22).
    pub ring_ll128_ppn_penalty: bool,
    /// Tree .92 cap only for AllReduce (2.23+); before it applied to every function.
    pub tree_cap_allreduce_only: bool,
    /// The Tree 0.85 factor tests `comm->maxTreePattern` (2.26+) rather than the tree graph's pattern.
    pub tree_pattern_from_comm: bool,
    /// Inter-node ring steps are 2(nNodes-1) for AllReduce (2.23+); older: 2*nNodes.
    pub inter_steps_fixed: bool,
    /// PAT exists (2.23+).
    pub has_pat: bool,
    /// NCCL_ALGO / NCCL_PROTO accept `func:` prefixes (2.24+).
    pub func_prefixes: bool,
    /// With ppn == 1 the inter latency is the Tree one (2.23+).
    pub ppn1_tree_net_lat: bool,
    /// Non-ring AllGather/ReduceScatter keep their bus bandwidth (2.20+).
    pub agrs_no_conversion: bool,
    /// NVLSTree's AllReduce gets the Tree correction on sm100 x86 (2.28+).
    pub nvls_tree_correction: bool,
}

impl Profile {
    /// The profile of an NCCL release (anything from 2.18 to 2.30).
    pub fn for_version(v: NcclVersion) -> Profile {
        let at = |minor: u32| v.at_least(2, minor);
        // 2.30.7 values.
        let mut base_lat = [
            [6.8, 14.0, 8.4],
            [6.6, 14.0, 8.4],
            [0.0; 3],
            [0.0; 3],
            [0.0; 3],
            [0.0; 3],
            [8.0, 8.0, 8.0],
        ];
        let mut hw_lat = [
            [
                [0.6, 1.25, 4.0],
                [0.6, 1.9, 3.4],
                [0.0, 0.0, 3.7],
                [0.0, 0.0, 2.8],
                [0.0, 0.0, 25.0],
                [0.0, 0.0, 25.0],
                [0.0, 0.0, 4.0],
            ],
            [
                [1.0, 1.9, 4.0],
                [1.0, 2.5, 5.7],
                [0.0, 0.0, 3.7],
                [0.0, 0.0, 2.8],
                [0.0, 0.0, 0.0],
                [0.0, 0.0, 0.0],
                [0.0, 0.0, 4.0],
            ],
            [
                [5.0, 8.5, 14.0],
                [2.7, 4.0, 14.0],
                [0.0, 0.0, 31.0],
                [0.0, 0.0, 30.0],
                [0.0, 0.0, 18.0],
                [0.0, 0.0, 20.9],
                [0.0, 0.0, 14.0],
            ],
        ];
        let mut ll_max_bw = [
            [39.0, 39.0, 20.4],
            [87.7, 22.5, 19.0],
            [141.0, 45.0, 35.0],
            [282.0, 90.0, 70.0],
        ];
        let mut ring_ll128 = [
            [20.0, 20.0, 20.0],
            [20.0, 20.0, 20.0],
            [36.7, 36.7, 36.7],
            [40.0, 40.0, 40.0],
        ];
        let mut tree_ll128 = [
            [20.0, 20.0, 20.0],
            [20.0, 20.0, 20.0],
            [36.7, 36.7, 29.0],
            [55.6, 31.67, 20.0],
        ];
        let mut tree_bw = [
            [26.5, 18.5, 10.0],
            [24.0, 23.6, 17.8],
            [38.7, 41.4, 36.0],
            [70.0, 42.8, 24.0],
        ];
        let mut nvls_tree = Some([
            [26.5, 18.5, 10.0],
            [24.0, 23.6, 17.8],
            [0.0, 57.7, 45.5],
            [0.0, 96.0, 80.0],
        ]);
        if !at(30) {
            if let Some(t) = nvls_tree.as_mut() {
                t[3][2] = 43.8; // 2.28.9 / 2.29.7
            }
        }
        if !at(29) {
            ring_ll128[3] = [2.0 * 36.7, 34.6, 2.0 * 36.7]; // 2.28
            hw_lat[2][5][2] = 14.0; // NET NVLSTree Simple
        }
        if !at(28) {
            nvls_tree = None;
            ring_ll128[3] = [2.0 * 36.7; 3];
            tree_ll128[3] = [2.0 * 36.7, 2.0 * 36.7, 2.0 * 29.0];
            tree_bw[3] = [2.0 * 38.7, 2.0 * 41.4, 2.0 * 36.0];
        }
        if !at(23) {
            // Tree Simple had no base latency and 28 µs per hop on every kind of link.
            base_lat[0][2] = 0.0;
            for row in hw_lat.iter_mut() {
                row[0][2] = 28.0;
            }
            base_lat[6] = [0.0; 3];
            for row in hw_lat.iter_mut() {
                row[6] = [0.0; 3];
            }
        }
        if !at(21) {
            ll_max_bw[2] = [87.7, 22.5, 19.0];
            hw_lat[0][4][2] = 23.0;
            hw_lat[0][5][2] = 23.0;
        }
        if !at(19) {
            hw_lat[0][4][2] = 0.0;
            hw_lat[0][5][2] = 0.0;
            hw_lat[2][5][2] = 19.0;
        }
        Profile {
            version: v.to_string(),
            base_lat,
            hw_lat,
            ll_max_bw,
            per_ch_max_ring_ll128_bw: ring_ll128,
            per_ch_max_tree_ll128_bw: tree_ll128,
            per_ch_max_tree_bw: tree_bw,
            per_ch_max_nvls_tree_bw: nvls_tree,
            nvls_efficiency: if at(28) {
                Some([0.0, 0.0, 0.85, 0.74])
            } else {
                None
            },
            ring_ll_half: at(21),
            ring_ll128_ppn_penalty: !at(23),
            tree_cap_allreduce_only: at(23),
            tree_pattern_from_comm: at(26),
            inter_steps_fixed: at(23),
            has_pat: at(23),
            func_prefixes: at(24),
            ppn1_tree_net_lat: at(23),
            agrs_no_conversion: at(20),
            nvls_tree_correction: at(28),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_2_30_matches_reference_tables() {
        let p = Profile::for_version(NcclVersion::DEFAULT);
        assert_eq!(p.base_lat[Algo::Ring as usize], [6.6, 14.0, 8.4]);
        assert_eq!(p.hw_lat[Hw::Net as usize][Algo::NvlsTree as usize][2], 20.9);
        assert_eq!(p.hw_lat[Hw::NvLink as usize][Algo::Nvls as usize][2], 25.0);
        assert_eq!(p.ll_max_bw[1][0], 87.7);
        assert_eq!(p.nvls_efficiency.unwrap()[2], 0.85);
        assert!(p.has_pat && p.func_prefixes && p.tree_cap_allreduce_only);
    }

    #[test]
    fn older_profiles_carry_the_deltas() {
        let v = |s: &str| s.parse::<NcclVersion>().unwrap();
        let p19 = Profile::for_version(v("2.19"));
        assert_eq!(p19.hw_lat[0][Algo::Tree as usize][2], 28.0);
        assert_eq!(p19.base_lat[Algo::Tree as usize][2], 0.0);
        assert_eq!(p19.ll_max_bw[2][0], 87.7);
        assert_eq!(p19.hw_lat[0][Algo::Nvls as usize][2], 23.0);
        assert!(!p19.ring_ll_half && !p19.has_pat && p19.nvls_efficiency.is_none());
        let p28 = Profile::for_version(v("2.28"));
        assert_eq!(p28.hw_lat[2][Algo::NvlsTree as usize][2], 14.0);
        assert!(p28.nvls_efficiency.is_some());
        let p27 = Profile::for_version(v("2.27"));
        assert!(p27.per_ch_max_nvls_tree_bw.is_none());
        assert!(p27.tree_pattern_from_comm);
        assert!(!Profile::for_version(v("2.25")).tree_pattern_from_comm);
    }

    #[test]
    fn ring_steps_per_function() {
        // NCCL 2.30.7 src/graph/tuning.cc ncclTopoTuneModel, nsteps: AllReduce 2(n-1), AG/RS n-1,
        // Bcast/Reduce n.
        assert_eq!(Func::AllReduce.ring_steps(8), 14);
        assert_eq!(Func::AllGather.ring_steps(8), 7);
        assert_eq!(Func::ReduceScatter.ring_steps(16), 15);
        assert_eq!(Func::Broadcast.ring_steps(8), 8);
        assert_eq!(Func::Reduce.ring_steps(3), 3);
    }
}
