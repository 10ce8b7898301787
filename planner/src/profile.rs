//! The planner's release profile: every rule of the graph search, the channel setup and the
//! planner's output formats that differs between the NCCL releases modelled (2.18 .. 2.30.7), as
//! named switches tied to the release that introduced them (the planner's counterpart of
//! cost-model's `Profile`; topology-layer rules stay on [`topo::NcclVersion`]). Sources: NCCL
//! 2.30.7 `src/graph/search.cc`, `connect.cc`, `paths.cc`, `xml.cc`, `src/init.cc`,
//! `src/transport/nvls.cc`, and the same files of each older release.

use crate::consts::*;
use topo::NcclVersion;

/// The speed arrays `ncclTopoCompute` tries for one GPU generation (GB/s per channel).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Speeds {
    /// Within one node (`speedArrayIntra`).
    pub intra: &'static [f32],
    /// Across nodes (`speedArrayInter`).
    pub inter: &'static [f32],
}

/// The rules of one NCCL release, as the planner reads them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// The release.
    pub version: NcclVersion,

    // Graph search (`search.cc`).
    /// `ncclTopoCompute`'s starting global step budget: `1 << 19` from 2.19, `5 << 16` in 2.18.
    pub global_timeout: i64,
    /// Speed arrays for GPUs below sm90.
    pub speeds_sm80: Speeds,
    /// Speed arrays for sm90 (2.19 adds 50 GB/s, 2.21 adds 11 GB/s within a node).
    pub speeds_sm90: Speeds,
    /// Speed arrays for sm100 and newer (own arrays from 2.25, the sm90 ones before).
    pub speeds_sm100: Speeds,

    // Channels (`init.cc`, `connect.cc`, `nvls.cc`).
    /// NVLS channels of a Blackwell communicator within one node: 16 up to 2.24, 32 in 2.25-2.26,
    /// 24 from 2.27 (`NVLS_NCHANNELS_SM100`).
    pub nvls_channels_sm100_one_node: usize,
    /// NVLS channels of a Blackwell communicator across nodes: 16 up to 2.24, 32 from 2.25.
    pub nvls_channels_sm100_nodes: usize,
    /// `ncclNvlsTreeSm100Tuning` picks the channel count of a multi-node Blackwell communicator
    /// from the NET bandwidth (2.30+).
    pub nvls_tree_sm100_tuning: bool,
    /// Rings are doubled for every sm90+ multi-node communicator under 16 channels (2.20+);
    /// before, only for sm90 exactly and only when twice the channels fit in MAXCHANNELS.
    pub double_channels_sm90_plus: bool,

    // P2P channels (`paths.cc`).
    /// A peer reached through another GPU's NVLinks (NVB) counts as an NVLink peer (2.30+).
    pub p2p_nvb_is_nvlink: bool,
    /// Channels per peer from each rank's own GPU, then the min over ranks
    /// (`ncclTopoComputeP2pChannelsPerPeer`, 2.29+); before, rank 0's host decides alone.
    pub p2p_per_peer_over_ranks: bool,
    /// Unset `NCCL_NCHANNELS_PER_NET_PEER` halves 2 with the rank count and takes at least the
    /// NETs needed by bandwidth (2.20-2.28); 2.19 uses 2.
    pub net_peer_channels_by_ranks: bool,
    /// P2P channels are clamped to the largest power of two within MAXCHANNELS and the channels
    /// per peer to the P2P channels (2.22+).
    pub p2p_pow2_clamp: bool,
    /// `NCCL_MAX_P2P_PEERS` is read (2.30+); before, every rank is a peer of a round.
    pub max_p2p_peers_setting: bool,

    // Formats (`xml.cc` graph dump/load, `ncclTopoPrintGraph`, `init.cc` INFO lines).
    /// Graph files and `Pattern` lines name NETs and GPUs by hexadecimal topology id (2.21+);
    /// before, by `dev` in decimal.
    pub graph_hex_ids: bool,
    /// A graph dump lists NETs only when the communicator spans nodes (2.21+); before, whenever
    /// the node has NETs.
    pub graph_dump_nets_when_inter: bool,
    /// A graph dump's `<gpu>` carries the rank (2.30+).
    pub graph_dump_gpu_rank: bool,
    /// `Pattern` lines print NETs as `NET/<system>-<local>` (2.23+); 2.21-2.22 the raw id.
    pub graph_net_ids_split: bool,
    /// `Pattern` lines print GPUs as `GPU/<system>-<local>` (2.27.5+); before, the rank.
    pub graph_gpu_ids: bool,
    /// The NVLS graph's channel lines show only the head GPU (2.21+).
    pub nvls_graph_lines_head_only: bool,
    /// `Channel xx/yy :` lines use `dumpLine`'s 128-byte buffer and width of the largest rank
    /// (2.23+); before, `" %3d"` columns for at most 20 ranks.
    pub ring_line_buffer: bool,
    /// The `Tuning P2P operations with maxP2pPeers` line of multi-node communicators (2.30+).
    pub max_p2p_peers_line: bool,
    /// The channel-count line names the CollNet channels (2.20+).
    pub collnet_channels_line: bool,
}

impl Profile {
    /// The rules of release `v`.
    pub fn for_version(v: NcclVersion) -> Profile {
        let at = |minor: u32| v.at_least(2, minor);
        let speeds_sm90 = Speeds {
            intra: if at(21) {
                SM90_SPEED_INTRA
            } else if at(19) {
                SM90_SPEED_INTRA_2_19
            } else {
                SM90_SPEED_INTRA_2_18
            },
            inter: SM90_SPEED_INTER,
        };
        let speeds_sm100 = if at(25) {
            Speeds {
                intra: if at(29) {
                    SM100_SPEED_INTRA
                } else if at(27) {
                    SM100_SPEED_INTRA_2_27
                } else {
                    SM100_SPEED_INTRA_2_25
                },
                inter: if at(30) {
                    SM100_SPEED_INTER
                } else if at(29) {
                    SM100_SPEED_INTER_2_29
                } else if at(28) {
                    SM100_SPEED_INTER_2_28
                } else if at(27) {
                    SM100_SPEED_INTER_2_27
                } else {
                    SM100_SPEED_INTER_2_25
                },
            }
        } else {
            speeds_sm90
        };
        Profile {
            version: v,
            global_timeout: if at(19) {
                GLOBAL_TIMEOUT
            } else {
                GLOBAL_TIMEOUT_2_18
            },
            speeds_sm80: Speeds {
                intra: SPEED_INTRA,
                inter: SPEED_INTER,
            },
            speeds_sm90,
            speeds_sm100,
            nvls_channels_sm100_one_node: if at(27) {
                24
            } else if at(25) {
                32
            } else {
                16
            },
            nvls_channels_sm100_nodes: if at(25) { 32 } else { 16 },
            nvls_tree_sm100_tuning: at(30),
            double_channels_sm90_plus: at(20),
            p2p_nvb_is_nvlink: at(30),
            p2p_per_peer_over_ranks: at(29),
            net_peer_channels_by_ranks: at(20),
            p2p_pow2_clamp: at(22),
            max_p2p_peers_setting: at(30),
            graph_hex_ids: at(21),
            graph_dump_nets_when_inter: at(21),
            graph_dump_gpu_rank: at(30),
            graph_net_ids_split: at(23),
            graph_gpu_ids: v.code() >= NcclVersion::new(2, 27, 5).code(),
            nvls_graph_lines_head_only: at(21),
            ring_line_buffer: at(23),
            max_p2p_peers_line: at(30),
            collnet_channels_line: at(20),
        }
    }

    /// The speed arrays for a node whose smallest compute capability is `cc_min` (90 for
    /// sm90).
    pub fn speeds(&self, cc_min: i32) -> Speeds {
        if cc_min >= 100 {
            self.speeds_sm100
        } else if cc_min >= 90 {
            self.speeds_sm90
        } else {
            self.speeds_sm80
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minor: u32) -> Profile {
        Profile::for_version(NcclVersion::new(2, minor, 0))
    }

    #[test]
    fn switches_turn_on_at_their_release() {
        assert_eq!(at(18).global_timeout, GLOBAL_TIMEOUT_2_18);
        assert_eq!(at(19).global_timeout, GLOBAL_TIMEOUT);
        assert!(!at(20).graph_hex_ids && at(21).graph_hex_ids);
        assert!(!at(22).ring_line_buffer && at(23).ring_line_buffer);
        assert!(!at(28).p2p_per_peer_over_ranks && at(29).p2p_per_peer_over_ranks);
        assert!(!at(29).p2p_nvb_is_nvlink && at(30).p2p_nvb_is_nvlink);
        // 2.27.5 changed a format within the 2.27 series.
        assert!(!Profile::for_version(NcclVersion::new(2, 27, 3)).graph_gpu_ids);
        assert!(Profile::for_version(NcclVersion::new(2, 27, 5)).graph_gpu_ids);
        assert_eq!(
            Profile::for_version(NcclVersion::DEFAULT),
            Profile::for_version(NcclVersion::new(2, 30, 7))
        );
    }

    #[test]
    fn speed_arrays_per_generation() {
        // Before 2.25 Blackwell has no arrays of its own.
        assert_eq!(at(24).speeds(100), at(24).speeds(90));
        assert_eq!(at(30).speeds(100).intra[0], 90.0);
        assert_eq!(at(30).speeds(100).inter[..3], [96.0, 86.0, 80.0]);
        assert_eq!(at(27).speeds(100).inter[0], 47.9);
        assert_eq!(at(30).speeds(80).intra, SPEED_INTRA);
        // Every array is in decreasing order (the search walks it from fast to slow).
        for minor in 18..=30 {
            for cc in [70, 80, 90, 100] {
                let s = at(minor).speeds(cc);
                for a in [s.intra, s.inter] {
                    assert!(a.windows(2).all(|w| w[0] > w[1]), "2.{minor} sm{cc}");
                }
            }
        }
    }
}
