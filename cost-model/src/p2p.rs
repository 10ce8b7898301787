//! Point-to-point patterns (nccl-tests `sendrecv`, `alltoall`, `gather`, `scatter`): NCCL does not
//! tune these, so the time comes from the p2p channels and the path bandwidths the planner found.
//!
//! Model (documented in ARCHITECTURE.md): a peer on the same node is reached at the node's ring
//! bandwidth per GPU (`ring.n_channels * ring.bw_intra`), limited by the p2p channels per peer at
//! the ring's per-channel bandwidth; a peer on another node at the GPU's share of the node's NIC
//! bandwidth (`ring.n_channels * ring.bw_inter / ppn`). Intra- and inter-node transfers of one
//! rank overlap. Each grouped operation costs one Simple-protocol step of latency per round of
//! NCCL's p2p schedule (peers are paired in `nRanks` rounds), NET steps adding the graph's network
//! latency as in `ncclTopoTuneModel`.

use crate::consts::{Algo, Hw, Profile, Proto};
use crate::shape::CommShape;
use crate::types::Collective;
use topo::PathType;

/// Bandwidth (GB/s) and per-message latency (µs) of one rank's traffic to peers inside and outside
/// its node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct P2pPaths {
    /// GB/s to a peer on the same node.
    pub intra_bw: f64,
    /// GB/s to peers on other nodes (the GPU's share of its node's NICs).
    pub inter_bw: f64,
    /// µs per message inside the node.
    pub intra_lat: f64,
    /// µs per message across nodes.
    pub inter_lat: f64,
}

impl P2pPaths {
    /// From a communicator shape.
    pub fn new(s: &CommShape, profile: &Profile) -> P2pPaths {
        let r = &s.ring;
        let ppn = (s.n_ranks as f64 / s.n_nodes as f64).max(1.0);
        let node_bw = (r.n_channels as f64 * r.bw_intra as f64).max(1e-3);
        let per_peer_ch = s.p2p_channels_per_peer.max(1) as f64;
        let intra_bw = node_bw.min(per_peer_ch * r.bw_intra.max(1e-3) as f64);
        let inter_bw = if s.n_nodes > 1 {
            (r.n_channels as f64 * r.bw_inter as f64 / ppn)
                .max(s.min_net_bw as f64 / ppn)
                .max(1e-3)
        } else {
            intra_bw
        };
        let hw = if r.type_intra == PathType::Nvl {
            Hw::NvLink
        } else {
            Hw::Pci
        } as usize;
        let (ring, simple) = (Algo::Ring as usize, Proto::Simple as usize);
        let base = profile.base_lat[ring][simple] as f64;
        let intra_lat = base + profile.hw_lat[hw][ring][simple] as f64;
        let inter_lat = base
            + profile.hw_lat[Hw::Net as usize][ring][simple] as f64
            + 2.0 * r.latency_inter as f64;
        P2pPaths {
            intra_bw,
            inter_bw,
            intra_lat,
            inter_lat,
        }
    }

    /// Time (µs) of one rank's grouped sends and receives: `intra` bytes to or from peers on its
    /// own node and `inter` bytes to or from peers on other nodes (each the larger of what it
    /// sends and receives on that side, as the two directions use separate channels). The two
    /// sides overlap; each pays its own latency.
    pub fn pair_time_us(&self, intra: u64, inter: u64) -> f64 {
        let side = |bytes: u64, lat: f64, bw: f64| {
            if bytes == 0 {
                0.0
            } else {
                lat + bytes as f64 / (1000.0 * bw)
            }
        };
        side(intra, self.intra_lat, self.intra_bw).max(side(inter, self.inter_lat, self.inter_bw))
    }

    /// Time (µs) of one p2p pattern moving `bytes` (the nccl-tests size column) on `s`.
    pub fn time_us(&self, s: &CommShape, coll: Collective, bytes: u64) -> f64 {
        let n = s.n_ranks.max(1) as f64;
        let ppn = (s.n_ranks as f64 / s.n_nodes as f64).max(1.0);
        let b = bytes as f64;
        let gbps = |bytes: f64, bw: f64| bytes / (1000.0 * bw);
        match coll {
            Collective::SendRecv => {
                // Ring neighbours: the last rank of each node talks to the next node.
                if s.n_ranks == 1 {
                    return gbps(b, self.intra_bw * 10.0);
                }
                if s.n_nodes > 1 {
                    self.inter_lat + gbps(b, self.inter_bw.min(self.intra_bw))
                } else {
                    self.intra_lat + gbps(b, self.intra_bw)
                }
            }
            Collective::AlltoAll | Collective::Gather | Collective::Scatter => {
                if s.n_ranks == 1 {
                    return 0.0;
                }
                // Per peer share of the buffer; the root of gather/scatter (or every rank in
                // alltoall) exchanges (ppn-1) shares inside the node and (n-ppn) outside.
                let share = b / n;
                let intra = gbps(share * (ppn - 1.0), self.intra_bw);
                let inter = if s.n_nodes > 1 {
                    gbps(share * (n - ppn), self.inter_bw)
                } else {
                    0.0
                };
                let lat = if s.n_nodes > 1 {
                    self.inter_lat
                } else {
                    self.intra_lat
                };
                // NCCL schedules grouped p2p in rounds of 8 peers per work batch.
                let rounds = ((n - 1.0) / 8.0).ceil().max(1.0);
                lat * rounds + intra.max(inter)
            }
            _ => f64::NAN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::P2pPaths;

    #[test]
    fn pair_time_prices_each_side_on_its_own_path() {
        let p = P2pPaths {
            intra_bw: 200.0,
            inter_bw: 20.0,
            intra_lat: 5.0,
            inter_lat: 10.0,
        };
        let mb64 = 64u64 << 20;
        // 64 MiB: 335.5 µs over NVLink at 200 GB/s, 3355 µs over the network at 20 GB/s.
        let nvl = p.pair_time_us(mb64, 0);
        let net = p.pair_time_us(0, mb64);
        assert!((nvl - (5.0 + mb64 as f64 / 200e3)).abs() < 1e-9, "{nvl}");
        assert!((net - (10.0 + mb64 as f64 / 20e3)).abs() < 1e-9, "{net}");
        // Both sides at once overlap: the slower one sets the time.
        assert_eq!(p.pair_time_us(mb64, mb64), net);
        assert_eq!(p.pair_time_us(0, 0), 0.0);
    }
}
