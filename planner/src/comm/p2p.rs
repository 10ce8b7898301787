//! P2P channel counts (NCCL 2.30.7 `src/graph/paths.cc`, `ncclTopoComputeP2pChannels`,
//! `ncclTopoComputeP2pChannelsPerPeer`, `ncclTopoGetNchannels`) with the older releases' rules.

use super::host::HostSearch;
use super::trees::{pow2_down, pow2_up};
use super::Member;
use crate::profile::Profile;
use crate::settings::PlannerSettings;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::Arc;
use topo::{NodeKind, PathType, Topology};

/// `ncclTopoGetNchannels`' answer for a peer on the same host: NVLink paths get
/// `2*max(1, bw/nvlBw)` (2.30 counts NVB paths as NVLink too), others 2.
pub(super) fn p2p_local_channels(topo: &Topology, p: usize, g: usize, profile: &Profile) -> usize {
    let path = topo.gpu_gpu(p, g);
    let nvlink =
        path.ty == PathType::Nvl || (profile.p2p_nvb_is_nvlink && path.ty == PathType::Nvb);
    if nvlink {
        let nvl = topo::consts::nvlink_bw(topo.system.gpu(g).sm, profile.version);
        2 * 1.max((path.bw / nvl) as i32) as usize
    } else {
        2
    }
}

/// P2P channels and channels per peer, as each release computes them (`ncclTopoComputeP2pChannels`,
/// and from 2.29 `ncclTopoComputeP2pChannelsPerPeer` with the min over ranks):
/// - up to 2.28 each rank takes the min over every GPU of its host and every peer, starting
///   from the P2P channel count; a remote peer counts `NCCL_NCHANNELS_PER_NET_PEER` (2.19: default
///   2; 2.20-2.28: unset means 2 halved while `2*nRanks > 4*p2pnChannels`, at least the NETs
///   needed by bandwidth). Releases before 2.29 do not share the result between ranks: this is
///   rank 0's host's value.
/// - 2.29+ each rank takes the min over its own GPU's peers, remote ones by NET count and
///   bandwidth, then the min over ranks; with several nodes the result is halved to fit
///   `maxP2pPeers` (2.29: nRanks) peers per round.
pub(super) fn p2p_channels(
    members: &[Member],
    host_ranks: &HashMap<usize, Vec<usize>>,
    hs: &HashMap<usize, Arc<HostSearch>>,
    settings: &PlannerSettings,
    n_channels: usize,
    n_nodes: usize,
    profile: &Profile,
) -> (usize, usize, usize) {
    let version = profile.version;
    let nranks = members.len();
    let mut p2p = n_channels.min(settings.max_p2p_nchannels.max(1) as usize);
    p2p = p2p.max(settings.min_p2p_nchannels.max(1) as usize);
    if !profile.p2p_per_peer_over_ranks {
        let h = &hs[&members[0].host];
        let topo = &h.topo;
        let mine = &host_ranks[&members[0].host];
        let mut min_ch = p2p;
        for g in 0..topo.system.count(NodeKind::Gpu) {
            for r in 0..nranks {
                let n = match mine.iter().position(|&x| x == r) {
                    Some(label) if h.labels[label] == g => continue,
                    Some(label) => p2p_local_channels(topo, h.labels[label], g, profile),
                    None => match settings.nchannels_per_net_peer {
                        Some(v) => v.max(0) as usize,
                        None if !profile.net_peer_channels_by_ranks => 2,
                        None => {
                            let mut most = 2;
                            while most * nranks > p2p * 4 && most > 1 {
                                most /= 2;
                            }
                            most.max(h.gpu_nets[g].count_by_bw_2_20)
                        }
                    },
                };
                min_ch = min_ch.min(n);
            }
        }
        let mut per_peer = pow2_up(min_ch);
        p2p = pow2_up(p2p);
        if profile.p2p_pow2_clamp {
            p2p = p2p.min(pow2_down(version.max_channels()));
            per_peer = per_peer.min(p2p);
        }
        return (p2p, per_peer, nranks);
    }
    // Each rank's bound depends only on its host's search and its place in it, so hosts that
    // share a search (identical hosts with the same members) are looked at once.
    let mut per_peer = usize::MAX;
    let mut seen: HashSet<*const HostSearch> = HashSet::default();
    for (host, mine) in host_ranks {
        let search = &hs[host];
        if !seen.insert(Arc::as_ptr(search)) {
            continue;
        }
        let (topo, labels) = (&search.topo, &search.labels);
        let remote = nranks > mine.len();
        for label in 0..mine.len() {
            let g = labels[label];
            let mut min_ch = version.max_channels();
            for (pl, &peer) in labels.iter().take(mine.len()).enumerate() {
                if pl == label {
                    continue;
                }
                min_ch = min_ch.min(p2p_local_channels(topo, peer, g, profile));
            }
            if remote {
                let n = match settings.nchannels_per_net_peer {
                    Some(v) => v.max(0) as usize,
                    None => {
                        let (count, bw) = search.gpu_nets[g].count_by_bw;
                        if count > 0 {
                            count.max(
                                (bw as usize)
                                    .div_ceil(settings.p2p_per_channel_net_bw.max(1) as usize),
                            )
                        } else {
                            2
                        }
                    }
                };
                min_ch = min_ch.min(n);
            }
            per_peer = per_peer.min(min_ch);
        }
    }
    let max_peers = match settings.max_p2p_peers {
        Some(m) if profile.max_p2p_peers_setting => (m.max(1) as usize).min(nranks),
        _ => nranks,
    };
    let mut per_peer = pow2_up(per_peer);
    p2p = pow2_up(p2p).min(pow2_down(version.max_channels()));
    if n_nodes > 1 && settings.nchannels_per_net_peer.is_none() {
        while per_peer * max_peers.div_ceil(8) > p2p && per_peer > 1 {
            per_peer /= 2;
        }
    } else {
        per_peer = per_peer.min(p2p);
    }
    (p2p, per_peer, max_peers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use topo::NcclVersion;

    fn topology(file: &str, version: NcclVersion) -> Arc<Topology> {
        let path = format!("{}/../topologies/{file}", env!("CARGO_MANIFEST_DIR"));
        let mut s = PlannerSettings::default();
        s.topo.version = version;
        let c = topo::Cluster::load(&path, 1, &s.topo, None).unwrap();
        c.nodes[0].topo.clone()
    }

    fn matrix(file: &str, version: NcclVersion) -> Vec<Vec<usize>> {
        let t = topology(file, version);
        let n = t.system.count(NodeKind::Gpu);
        (0..n)
            .map(|p| {
                (0..n)
                    .map(|g| p2p_local_channels(&t, p, g, &Profile::for_version(version)))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn p2p_channels_per_local_peer() {
        let v230 = NcclVersion::new(2, 30, 7);
        // A100 through NVSwitch: 12 NVLinks of 20 GB/s -> 2 * 12.
        let peers = |m: &[Vec<usize>]| -> Vec<usize> {
            let n = m.len();
            (0..n * n)
                .filter(|i| i / n != i % n)
                .map(|i| m[i / n][i % n])
                .collect()
        };
        let a100 = matrix("dgx-a100.xml", v230);
        assert!(peers(&a100).iter().all(|&c| c == 24), "{a100:?}");
        // PCIe only: 2 per peer.
        let pcie = matrix("pcie-4xa100.xml", v230);
        assert!(peers(&pcie).iter().all(|&c| c == 2), "{pcie:?}");
        // DGX-1 hybrid cube mesh: 2 * links for direct NVLink peers; peers two NVLink hops
        // away (NVB) count as NVLink from 2.30 only.
        let v100 = matrix("dgx1-v100.xml", v230);
        let v100_229 = matrix("dgx1-v100.xml", NcclVersion::new(2, 29, 7));
        let t = topology("dgx1-v100.xml", v230);
        for p in 0..8 {
            for g in (0..8).filter(|&g| g != p) {
                let ty = t.gpu_gpu(p, g).ty;
                let (now, before) = (v100[p][g], v100_229[p][g]);
                match ty {
                    PathType::Nvl => {
                        assert!(now >= 2 && now % 2 == 0, "{p}->{g}");
                        assert_eq!(now, before, "{p}->{g}");
                    }
                    PathType::Nvb => assert_eq!(before, 2, "{p}->{g}"),
                    _ => assert_eq!((now, before), (2, 2), "{p}->{g} {ty:?}"),
                }
            }
        }
        // At least one pair with two NVLinks (4 channels) on a DGX-1.
        assert!(v100.iter().flatten().any(|&c| c == 4), "{v100:?}");
    }
}
