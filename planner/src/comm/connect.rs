//! Putting a communicator together from its hosts' searches (NCCL 2.30.7 `src/init.cc`
//! `initTransportsRank` after the searches, `src/graph/connect.cc` `ncclTopoPreset` /
//! `ncclTopoPostset`, `connectRings`, `connectTrees`): AllGather3 alignment, channel doubling
//! and clamps, NVLS channels and heads, P2P channels, the per-rank view.

use super::host::HostSearch;
use super::p2p::p2p_channels;
use super::trees::{dtree, log2i, DoubleTree};
use super::Member;
use crate::graph::{Pattern, TopoGraph};
use crate::plan::{
    ChannelRank, CommGraphs, CommPlan, NodeSearch, RankInfo, TreeLine, TreeLines, TreeLinesFill,
};
use crate::profile::Profile;
use crate::settings::PlannerSettings;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use topo::{NodeKind, PathType};

/// Up to `width` values per owner (a host of the communicator), appended in order: a list per
/// owner kept in one allocation (a communicator can span a hundred thousand hosts).
struct Rows {
    width: usize,
    len: Vec<u32>,
    data: Vec<i32>,
}

impl Rows {
    fn new(owners: usize, width: usize) -> Rows {
        Rows {
            width,
            len: vec![0; owners],
            data: vec![0; owners * width],
        }
    }
    fn push(&mut self, r: usize, v: i32) {
        let l = self.len[r] as usize;
        assert!(l < self.width, "at most one value per channel");
        self.data[r * self.width + l] = v;
        self.len[r] += 1;
    }
    fn row(&self, r: usize) -> &[i32] {
        &self.data[r * self.width..r * self.width + self.len[r] as usize]
    }
    fn row_mut(&mut self, r: usize) -> &mut [i32] {
        &mut self.data[r * self.width..r * self.width + self.len[r] as usize]
    }
}

/// Results of Preset (`struct ncclTopoRanks`, which NCCL fills per rank): per channel, the
/// ring entry and exit and the tree ends, and the NVLS heads. Every rank of a host appears once
/// in each ring and tree channel of its host's graphs (a search visits every GPU; a graph file
/// is checked for it), so these are the same for all ranks of a host and are kept once per host
/// (index in the communicator's host order). The ring neighbours inside a node go straight into
/// the channels ([`Comm::connect_rings`]).
pub(super) struct TopoRanks {
    cross_nic_ring: Vec<i32>,
    ring_recv: Rows,
    ring_send: Rows,
    tree_to_parent: Rows,
    tree_to_child0: Rows,
    tree_to_child1: Rows,
    nvls_heads: Vec<Vec<i32>>,
}

/// What every step of putting a communicator together reads.
struct Comm<'a> {
    members: &'a [Member],
    settings: &'a PlannerSettings,
    profile: Profile,
    /// `MAXCHANNELS` of the release.
    maxch: usize,
    host_ranks: &'a HashMap<usize, Vec<usize>>,
    host_search: &'a HashMap<usize, Arc<HostSearch>>,
    /// The hosts in order of first appearance.
    host_order: &'a [usize],
    /// Per rank: its host's index in `host_order`.
    host_idx: Vec<u32>,
    /// Per host index: the host's ranks, in rank order.
    ranks_of: Vec<&'a [usize]>,
    /// Per host index: its graphs, relabelled from local labels to communicator ranks (taken
    /// by [`Comm::node_searches`] at the end).
    graphs_of: Vec<Option<CommGraphs>>,
}

/// NCCL's nodes: ranks grouped by the entry rank of their ring 0 (`rankToNode`, `nodeRanks`).
struct Nodes {
    /// The first rank of each node's ring 0 (`ring_recv[0]`), by node.
    first_ranks: Vec<i32>,
    /// The node of each rank.
    rank_to_node: Vec<usize>,
    /// The ranks of each node, in rank order.
    node_ranks: Vec<Vec<usize>>,
    /// Each rank's index within its node.
    local_rank: Vec<usize>,
}

impl Nodes {
    /// The nodes, from the ranks' ring-0 entry ranks (a rank without rings is its own node).
    /// The entry rank is a rank of the host, so ranks with the same entry are the ranks of one
    /// host: nodes are numbered per host, in order of each host's first rank.
    fn of(topo_ranks: &TopoRanks, host_idx: &[u32]) -> Nodes {
        let nranks = host_idx.len();
        let mut first_ranks: Vec<i32> = Vec::new();
        let mut node_of_host: Vec<usize> = vec![usize::MAX; topo_ranks.cross_nic_ring.len()];
        let rank_to_node: Vec<usize> = (0..nranks)
            .map(|r| {
                let hi = host_idx[r] as usize;
                let Some(&fr) = topo_ranks.ring_recv.row(hi).first() else {
                    first_ranks.push(r as i32);
                    return first_ranks.len() - 1;
                };
                if node_of_host[hi] == usize::MAX {
                    first_ranks.push(fr);
                    node_of_host[hi] = first_ranks.len() - 1;
                }
                node_of_host[hi]
            })
            .collect();
        let mut node_ranks: Vec<Vec<usize>> = vec![Vec::new(); first_ranks.len()];
        let mut local_rank = vec![0usize; nranks];
        for r in 0..nranks {
            local_rank[r] = node_ranks[rank_to_node[r]].len();
            node_ranks[rank_to_node[r]].push(r);
        }
        Nodes {
            first_ranks,
            rank_to_node,
            node_ranks,
            local_rank,
        }
    }

    /// `nNodes`.
    fn count(&self) -> usize {
        self.first_ranks.len()
    }

    /// The first rank of node `n`.
    fn first(&self, n: usize) -> usize {
        self.first_ranks[n] as usize
    }

    /// The fewest and the most ranks on a node.
    fn local_range(&self) -> (usize, usize) {
        let len = |v: &Vec<usize>| v.len();
        (
            self.node_ranks.iter().map(len).min().unwrap_or(0),
            self.node_ranks.iter().map(len).max().unwrap_or(0),
        )
    }
}

/// Put a communicator together from its hosts' searches, as `initTransportsRank` does after
/// the searches: Preset per rank, AllGather3 alignment, Postset (rings and trees across nodes),
/// channel counts, NVLS heads, P2P channels, then the per-rank and per-node views.
pub(super) fn assemble(
    members: &[Member],
    name: &str,
    settings: &PlannerSettings,
    parent: Option<&CommPlan>,
    host_order: &[usize],
    host_ranks: &HashMap<usize, Vec<usize>>,
    host_search: &HashMap<usize, Arc<HostSearch>>,
) -> CommPlan {
    let version = settings.topo.version;
    let mut cx = Comm::new(members, settings, host_order, host_ranks, host_search);
    let nranks = members.len();

    let mut topo_ranks = cx.preset();
    let nodes = Nodes::of(&topo_ranks, &cx.host_idx);
    let n_nodes = nodes.count();
    let (min_local, max_local) = nodes.local_range();
    let (mut aligned, max_tree_pattern) = cx.align();

    let mut nvls_support = members.iter().all(|m| host_search[&m.host].nvls_support);
    let collnet_support = settings.collnet_enable
        && aligned.collnet_chain.n_channels > 0
        && n_nodes as i32 >= settings.collnet_node_threshold;
    if aligned.nvls.n_channels == 0 {
        nvls_support = false;
    }
    let sms: Vec<i32> = members.iter().map(|m| sm_of(host_search, m)).collect();
    let min_cc = sms.iter().copied().min().unwrap_or(0);
    let max_cc = sms.iter().copied().max().unwrap_or(0);
    let min_net_bw = min_net_bw_all(members, host_ranks, host_search);
    let mut nvls_channels = if nvls_support {
        cx.nvls_channels(sms[0], min_cc, n_nodes, min_local, min_net_bw)
    } else {
        0
    };
    let nch = aligned.ring.n_channels.min(aligned.tree.n_channels) as usize;
    aligned.ring.n_channels = nch as i32;
    aligned.tree.n_channels = nch as i32;

    let mut channels = cx.preset_channels(nch);
    let swapped = cx.cross_nic_swap(&mut topo_ranks, &nodes, nch);
    cx.connect_rings(&mut channels, &topo_ranks, &swapped, &nodes, nch);
    let tree_lines = cx.connect_trees(&mut channels, &topo_ranks, &nodes, nch);
    let depth = nranks / n_nodes - 1 + log2i(n_nodes);
    let n_channels = cx.channel_count(
        &mut channels,
        nch,
        &aligned,
        collnet_support,
        min_cc,
        n_nodes,
    );
    let nvls_heads = cx.nvls_heads(&topo_ranks, &nodes);
    if nvls_heads.is_empty() {
        nvls_channels = 0;
    }
    let (p2p_channels, p2p_per_peer, p2p_max_peers) = p2p_channels(
        members,
        host_ranks,
        host_search,
        settings,
        n_channels,
        n_nodes,
        &cx.profile,
    );

    let first = &host_search[&members[0].host];
    let cpu = first.topo.system.cpu_type();
    let nvs_count = first.topo.system.count(NodeKind::Nvs);
    let gpu_pci_bw = cx.rank0_gpu_pci_bw();
    let gpu_p2p = cx.rank0_gpu_p2p();
    let all_nvlink = host_order.iter().all(|h| {
        host_search[h].topo.gpu_path_range(NodeKind::Gpu).1 < PathType::Pix
            || host_search[h].topo.system.count(NodeKind::Gpu) < 2
    });
    drop(topo_ranks);
    let ranks = cx.rank_infos(&nodes, parent);
    let searches = cx.node_searches(&nodes);
    CommPlan {
        name: name.to_string(),
        nccl_version: version.to_string(),
        n_ranks: nranks,
        n_nodes,
        mnnvl: false,
        ranks,
        node_ranks: nodes.node_ranks,
        min_local_ranks: min_local,
        max_local_ranks: max_local,
        min_comp_cap: min_cc,
        max_comp_cap: max_cc,
        cpu_arch: cpu.0,
        cpu_vendor: cpu.1,
        cpu_model: cpu.2,
        searches,
        graphs: aligned,
        max_tree_pattern,
        n_channels,
        collnet_channels: n_channels,
        nvls_channels: if nvls_support { nvls_channels } else { 0 },
        nvls_support: nvls_support && nvls_channels > 0,
        collnet_support,
        nvls_heads,
        p2p_channels,
        p2p_channels_per_peer: p2p_per_peer,
        p2p_max_peers,
        tree_depth: depth,
        channels,
        tree_lines,
        all_nvlink,
        gpu_p2p,
        min_net_bw,
        nvs_count,
        gpu_pci_bw,
    }
}

impl<'a> Comm<'a> {
    /// The inputs, with each host's graphs relabelled to communicator ranks.
    fn new(
        members: &'a [Member],
        settings: &'a PlannerSettings,
        host_order: &'a [usize],
        host_ranks: &'a HashMap<usize, Vec<usize>>,
        host_search: &'a HashMap<usize, Arc<HostSearch>>,
    ) -> Comm<'a> {
        let to_comm = |h: usize, g: &TopoGraph| -> TopoGraph {
            let ranks = &host_ranks[&h];
            let mut g = g.clone();
            for x in g.intra.iter_mut() {
                *x = ranks[*x as usize] as i32;
            }
            g
        };
        let graphs_of = host_order
            .iter()
            .map(|&h| Some(host_search[&h].graphs.map(|g| to_comm(h, g))))
            .collect();
        let ranks_of: Vec<&[usize]> = host_order.iter().map(|h| &host_ranks[h][..]).collect();
        let mut host_idx = vec![0u32; members.len()];
        for (hi, ranks) in ranks_of.iter().enumerate() {
            for &r in ranks.iter() {
                host_idx[r] = hi as u32;
            }
        }
        let version = settings.topo.version;
        Comm {
            members,
            settings,
            profile: Profile::for_version(version),
            maxch: version.max_channels(),
            host_ranks,
            host_search,
            host_order,
            host_idx,
            ranks_of,
            graphs_of,
        }
    }

    /// The graphs of host index `hi`.
    fn graphs(&self, hi: usize) -> &CommGraphs {
        self.graphs_of[hi]
            .as_ref()
            .expect("graphs are taken only at the end")
    }

    /// `ncclTopoPreset`, once per host (every rank of a host computes the same values from the
    /// same graphs): each ring channel's entry and exit rank, each tree channel's ends, and the
    /// NVLS heads.
    fn preset(&self) -> TopoRanks {
        let hosts = self.ranks_of.len();
        let width = (0..hosts)
            .map(|hi| {
                let gs = self.graphs(hi);
                gs.ring.n_channels.min(gs.tree.n_channels).max(0) as usize
            })
            .max()
            .unwrap_or(0);
        let rows = || Rows::new(hosts, width);
        let mut t = TopoRanks {
            cross_nic_ring: vec![0; hosts],
            ring_recv: rows(),
            ring_send: rows(),
            tree_to_parent: rows(),
            tree_to_child0: rows(),
            tree_to_child1: rows(),
            nvls_heads: vec![Vec::new(); hosts],
        };
        for hi in 0..hosts {
            let gs = self.graphs(hi);
            let local = self.ranks_of[hi].len();
            let nch = gs.ring.n_channels.min(gs.tree.n_channels).max(0) as usize;
            t.cross_nic_ring[hi] = gs.ring.cross_nic;
            for c in 0..nch {
                let ring = gs.ring.channel(c, local);
                t.ring_recv.push(hi, ring[0]);
                t.ring_send.push(hi, ring[local - 1]);
                let tree = gs.tree.channel(c, local);
                let pat = gs.tree.pattern;
                t.tree_to_parent.push(hi, tree[0]);
                let child0 = if pat == Pattern::Tree {
                    0
                } else {
                    1.min(local - 1)
                };
                let child1 = if pat == Pattern::SplitTree {
                    1.min(local - 1)
                } else {
                    0
                };
                t.tree_to_child0.push(hi, tree[child0]);
                t.tree_to_child1.push(hi, tree[child1]);
            }
            let nv = &gs.nvls;
            let heads = &mut t.nvls_heads[hi];
            for c in 0..nv.n_channels as usize {
                let head = nv.intra[c * local];
                if !heads.contains(&head) {
                    heads.push(head);
                }
            }
        }
        t
    }

    /// AllGather3: every graph takes the min channels, same-channels and bandwidths and the
    /// max path types and crossNic over all ranks (the ranks of a host contribute the same
    /// values, so once per host); also the largest tree pattern.
    fn align(&self) -> (CommGraphs, Pattern) {
        let mut aligned: CommGraphs = self.graphs(0).clone();
        let mut max_tree_pattern = Pattern::BalancedTree;
        for hi in 0..self.ranks_of.len() {
            let gs = self.graphs(hi);
            for (t, g) in aligned.iter_mut().zip(gs.iter()) {
                t.n_channels = t.n_channels.min(g.n_channels);
                t.same_channels = t.same_channels.min(g.same_channels);
                t.bw_intra = t.bw_intra.min(g.bw_intra);
                t.bw_inter = t.bw_inter.min(g.bw_inter);
                t.type_intra = t.type_intra.max(g.type_intra);
                t.type_inter = t.type_inter.max(g.type_inter);
                t.cross_nic = t.cross_nic.max(g.cross_nic);
            }
            max_tree_pattern = max_tree_pattern.max(gs.tree.pattern);
        }
        (aligned, max_tree_pattern)
    }

    /// NVLS channels of a communicator with NVLS support (`ncclNvlsInit` /
    /// `ncclNvlsTreeSm100Tuning`), clamped by NCCL_NVLS_NCHANNELS and the CTA bounds.
    fn nvls_channels(
        &self,
        my_cc: i32,
        min_cc: i32,
        n_nodes: usize,
        min_local: usize,
        min_net_bw: f32,
    ) -> usize {
        let (profile, settings) = (&self.profile, self.settings);
        // NVLS_NCHANNELS: 16, and Blackwell's own counts where the release has them.
        let mut n = if my_cc >= 100 {
            if n_nodes > 1 {
                profile.nvls_channels_sm100_nodes
            } else {
                profile.nvls_channels_sm100_one_node
            }
        } else {
            16
        };
        if min_cc >= 100 && n_nodes > 1 && profile.nvls_tree_sm100_tuning {
            // ncclNvlsTreeSm100Tuning's channel count (its chunk sizes are not modelled).
            let ppn = min_local;
            if n_nodes == 2 && min_net_bw >= 48.0 {
                n = 32;
            } else if min_net_bw >= 96.0 {
                n = if ppn <= 8 { 24 } else { 32 };
            } else if min_net_bw >= 48.0 {
                n = 24;
            }
        }
        if let Some(c) = settings.nvls_ctas {
            n = c as usize;
        }
        (n as i32).min(settings.max_ctas).max(settings.min_ctas) as usize
    }

    /// The channel state Preset leaves per rank for `2 * nch` channels: no ring neighbours yet,
    /// the intra-node tree chain of the rank's own graph (copied to the second half).
    fn preset_channels(&self, nch: usize) -> Vec<Vec<ChannelRank>> {
        let none = ChannelRank {
            ring_prev: -1,
            ring_next: -1,
            tree_up: -1,
            tree_down: [-1; 3],
        };
        let mut channels: Vec<Vec<ChannelRank>> = (0..2 * nch)
            .map(|_| vec![none; self.members.len()])
            .collect();
        for hi in 0..self.ranks_of.len() {
            let gs = self.graphs(hi);
            let local = self.ranks_of[hi].len();
            for c in 0..nch {
                let tree = gs.tree.channel(c, local);
                for (i, &x) in tree.iter().enumerate() {
                    let ch = &mut channels[c][x as usize];
                    ch.tree_up = if i == 0 { -1 } else { tree[i - 1] };
                    ch.tree_down[0] = if i == local - 1 { -1 } else { tree[i + 1] };
                    let copy = *ch;
                    channels[c + nch][x as usize] = copy;
                }
            }
        }
        channels
    }

    /// The channel count after Postset: `2 * nch` within MAXCHANNELS, more for CollNet when
    /// intra-node bandwidth is higher, doubled for sm90+ multi-node rings, then clamped by
    /// NCCL_MAX_NCHANNELS / NCCL_MAX_CTAS and raised to NCCL_MIN_NCHANNELS / NCCL_MIN_CTAS
    /// (extra channels copy the first ones). `channels` is cut or extended to match.
    fn channel_count(
        &self,
        channels: &mut Vec<Vec<ChannelRank>>,
        nch: usize,
        aligned: &CommGraphs,
        collnet_support: bool,
        min_cc: i32,
        n_nodes: usize,
    ) -> usize {
        let (maxch, settings) = (self.maxch, self.settings);
        let nranks = self.members.len();
        let mut n_channels = maxch.min(nch * 2);
        channels.truncate(n_channels);
        let copy_channels =
            |channels: &mut Vec<Vec<ChannelRank>>, start: usize, end: usize| -> usize {
                let end = end.min(maxch);
                for c in start..end {
                    let src = channels[c - start].clone();
                    channels.push(src);
                }
                end.max(start)
            };
        // CollNet: more channels to saturate intra-node bandwidth.
        if collnet_support {
            let chain = &aligned.collnet_chain;
            if chain.bw_intra > chain.bw_inter && nranks > n_nodes {
                let target = maxch.min(n_channels + n_channels / 2);
                n_channels = copy_channels(channels, n_channels, target);
            }
        }
        let sm90_double = if self.profile.double_channels_sm90_plus {
            min_cc >= 90 && n_nodes > 1 && aligned.ring.bw_intra > 45.0 && n_channels < 16
        } else {
            min_cc == 90
                && n_nodes > 1
                && aligned.ring.bw_intra > 45.0
                && n_channels < 16
                && 2 * n_channels <= maxch
        };
        if sm90_double {
            n_channels = copy_channels(channels, n_channels, 2 * n_channels);
        }
        let max_c = (settings.max_channels() as usize).min(settings.max_ctas.max(1) as usize);
        n_channels = n_channels.min(max_c);
        channels.truncate(n_channels);
        let min_c = settings.min_channels().max(settings.min_ctas).max(0) as usize;
        n_channels = copy_channels(channels, n_channels, min_c);
        channels.truncate(n_channels);
        n_channels
    }

    /// The PCI bandwidth of rank 0's GPU (its widest PCI link).
    fn rank0_gpu_pci_bw(&self) -> f32 {
        let m0 = &self.members[0];
        let hs = &self.host_search[&m0.host];
        let sys = &hs.topo.system;
        let label = self.host_ranks[&m0.host]
            .iter()
            .position(|&x| x == 0)
            .unwrap_or(0);
        let g = sys.nodes(NodeKind::Gpu)[hs.labels[label]];
        sys.links(sys.gpu_attach(g))
            .filter(|(_, _, l)| l.ty == topo::LinkType::Pci)
            .map(|(_, _, l)| l.bw)
            .fold(0.0f32, f32::max)
    }

    /// Whether every pair of GPUs of rank 0's host uses peer-to-peer (`ncclTopoCheckP2p` both
    /// ways).
    fn rank0_gpu_p2p(&self) -> bool {
        let hs = &self.host_search[&self.members[0].host];
        // Rank 0's host is the first in host order.
        let gpus = &hs.labels[..self.ranks_of[0].len()];
        gpus.iter().enumerate().all(|(i, &a)| {
            gpus[i + 1..]
                .iter()
                .all(|&b| hs.topo.check_p2p(a, b).0 && hs.topo.check_p2p(b, a).0)
        })
    }

    /// Each rank's GPU, node and world rank.
    fn rank_infos(&self, nodes: &Nodes, parent: Option<&CommPlan>) -> Vec<RankInfo> {
        self.members
            .iter()
            .enumerate()
            .map(|(r, m)| {
                let hs = &self.host_search[&m.host];
                let sys = &hs.topo.system;
                let label = self.host_ranks[&m.host]
                    .iter()
                    .position(|&x| x == r)
                    .unwrap_or(0);
                let g = hs.labels[label];
                RankInfo {
                    rank: r,
                    host: m.host,
                    dev: m.dev,
                    busid: sys.gpu(g).busid.clone(),
                    sm: sys.gpu(g).sm,
                    world_rank: parent.map(|p| p.ranks_world(m)).unwrap_or(r),
                    node: nodes.rank_to_node[r],
                    local_rank: nodes.local_rank[r],
                    fabric: None,
                    mnnvl: None,
                }
            })
            .collect()
    }

    /// Each node's own search (its graphs in communicator ranks, notes, GPU ids).
    fn node_searches(&mut self, nodes: &Nodes) -> Vec<NodeSearch> {
        // Each host's relabelled graphs move into its (last) node rather than being copied.
        let mut uses = vec![0usize; self.ranks_of.len()];
        for n in 0..nodes.count() {
            uses[self.node_host(nodes, n)] += 1;
        }
        (0..nodes.count())
            .map(|n| {
                let hi = self.node_host(nodes, n);
                let h = self.host_order[hi];
                uses[hi] -= 1;
                let graphs = if uses[hi] == 0 {
                    self.graphs_of[hi].take().expect("every host has graphs")
                } else {
                    self.graphs(hi).clone()
                };
                let hs = &self.host_search[&h];
                let sys = &hs.topo.system;
                let ranks_h = &self.host_ranks[&h];
                let mut gpu_ids = vec![(0, 0); ranks_h.len()];
                for (label, &g) in hs.labels.iter().enumerate() {
                    let node = sys.node(sys.nodes(NodeKind::Gpu)[g]);
                    gpu_ids[label] = (node.system_id(), node.local_id());
                }
                NodeSearch {
                    node: n,
                    host: h,
                    ranks: ranks_h.clone(),
                    gpu_ids,
                    graphs,
                    notes: hs.notes.clone(),
                    topo: Some(hs.topo.clone()),
                }
            })
            .collect()
    }
}

impl Comm<'_> {
    /// The host index of node `n` (the host of its first rank).
    fn node_host(&self, nodes: &Nodes, n: usize) -> usize {
        self.host_idx[nodes.first(n)] as usize
    }

    /// Postset's crossNic swap: with `crossNic == 2` and an even channel count, odd nodes swap
    /// each pair of ring channels. Swaps the hosts' ring ends and returns, per host index,
    /// whether its rings are swapped (its ranks' ring neighbours come from the paired channel).
    fn cross_nic_swap(&self, t: &mut TopoRanks, nodes: &Nodes, nch: usize) -> Vec<bool> {
        (0..self.ranks_of.len())
            .map(|hi| {
                let Some(&r) = self.ranks_of[hi].first() else {
                    return false;
                };
                let swap =
                    t.cross_nic_ring[hi] == 2 && nch % 2 == 0 && nodes.rank_to_node[r] % 2 == 1;
                if swap {
                    for c in (0..nch).step_by(2) {
                        t.ring_recv.row_mut(hi).swap(c, c ^ 1);
                        t.ring_send.row_mut(hi).swap(c, c ^ 1);
                    }
                }
                swap
            })
            .collect()
    }

    /// `connectRings`: inside a node each rank's ring neighbours come from its host's ring
    /// channel; each node's ring enters from the previous node's last rank and leaves to the
    /// next node's first. Both copies of each channel get the result.
    fn connect_rings(
        &self,
        channels: &mut [Vec<ChannelRank>],
        t: &TopoRanks,
        swapped: &[bool],
        nodes: &Nodes,
        nch: usize,
    ) {
        let n_nodes = nodes.count();
        for c in 0..nch {
            for (hi, &swap) in swapped.iter().enumerate() {
                let local = self.ranks_of[hi].len();
                let ring = self
                    .graphs(hi)
                    .ring
                    .channel(if swap { c ^ 1 } else { c }, local);
                for (i, &x) in ring.iter().enumerate() {
                    let prev = if i == 0 { -1 } else { ring[i - 1] };
                    let next = if i == local - 1 { -1 } else { ring[i + 1] };
                    for cc in [c, c + nch] {
                        channels[cc][x as usize].ring_prev = prev;
                        channels[cc][x as usize].ring_next = next;
                    }
                }
            }
            for n in 0..n_nodes {
                let (h, h_prev, h_next) = (
                    self.node_host(nodes, n),
                    self.node_host(nodes, (n + n_nodes - 1) % n_nodes),
                    self.node_host(nodes, (n + 1) % n_nodes),
                );
                let recv = t.ring_recv.row(h)[c] as usize;
                let prev_send = t.ring_send.row(h_prev)[c];
                let send = t.ring_send.row(h)[c] as usize;
                let next_recv = t.ring_recv.row(h_next)[c];
                for cc in [c, c + nch] {
                    channels[cc][recv].ring_prev = prev_send;
                    channels[cc][send].ring_next = next_recv;
                }
            }
        }
    }

    /// `connectTrees`: the double binary tree over nodes (`ncclGetDtree`) joined to each node's
    /// chain, tree 0 on channels `0..nch` and tree 1 on `nch..2*nch`; returns the `Tree` lines of
    /// every rank. Only the ranks at a node's tree ends (parent side, children sides) change.
    fn connect_trees(
        &self,
        channels: &mut [Vec<ChannelRank>],
        t: &TopoRanks,
        nodes: &Nodes,
        nch: usize,
    ) -> TreeLines {
        let n_nodes = nodes.count();
        // Two lines (channel c and c + nch) for each end rank of each channel: counted first,
        // so the lines of half a million ranks land in one list without a sort.
        let mut counts = vec![0u32; self.members.len()];
        for node in 0..n_nodes {
            for c in 0..nch {
                let ends = self.tree_ends(t, nodes, node, c);
                for (k, &ri) in ends.iter().enumerate() {
                    if is_end(&ends, k, nodes, node) {
                        counts[ri as usize] += 2;
                    }
                }
            }
        }
        let mut tree_lines = TreeLinesFill::with_counts(&counts);
        drop(counts);
        for node in 0..n_nodes {
            let DoubleTree {
                tree0: t0,
                tree1: t1,
            } = dtree(n_nodes as i32, node as i32);
            for c in 0..nch {
                // Node n's end: 0 towards the parent, 1 and 2 towards children 0 and 1.
                let end = |n: i32, k: usize| self.tree_ends(t, nodes, n as usize, c)[k];
                let pick = |ct: i32, n: i32| end(n, if ct == 0 { 1 } else { 2 });
                let set_down = |ch: &mut ChannelRank, d: i32| {
                    if d == -1 {
                        return;
                    }
                    if let Some(x) = ch.tree_down.iter_mut().find(|x| **x < 0) {
                        *x = end(d, 0);
                    }
                };
                let ends = self.tree_ends(t, nodes, node, c);
                for (k, &ri) in ends.iter().enumerate() {
                    if !is_end(&ends, k, nodes, node) {
                        continue;
                    }
                    let r = ri as usize;
                    if ri == ends[0] {
                        if t0.up != -1 {
                            channels[c][r].tree_up = pick(t0.parent_child_type, t0.up);
                        }
                        if t1.up != -1 {
                            channels[c + nch][r].tree_up = pick(t1.parent_child_type, t1.up);
                        }
                    }
                    if ri == ends[1] {
                        set_down(&mut channels[c][r], t0.down0);
                        set_down(&mut channels[c + nch][r], t1.down0);
                    }
                    if ri == ends[2] {
                        set_down(&mut channels[c][r], t0.down1);
                        set_down(&mut channels[c + nch][r], t1.down1);
                    }
                    for (cc, ch) in [(c, channels[c][r]), (c + nch, channels[c + nch][r])] {
                        let line = TreeLine {
                            channel: cc,
                            up: ch.tree_up,
                            down: ch.tree_down,
                        };
                        tree_lines.push(r, line);
                    }
                }
            }
        }
        tree_lines.finish()
    }

    /// Node `node`'s tree ends on channel `c`: the rank towards the parent, the ranks towards
    /// child 0 and child 1.
    fn tree_ends(&self, t: &TopoRanks, nodes: &Nodes, node: usize, c: usize) -> [i32; 3] {
        let h = self.node_host(nodes, node);
        [
            t.tree_to_parent.row(h)[c],
            t.tree_to_child0.row(h)[c],
            t.tree_to_child1.row(h)[c],
        ]
    }

    /// NVLS heads: for each head index every node has, that head's rank on each node (empty when
    /// a node has none).
    fn nvls_heads(&self, t: &TopoRanks, nodes: &Nodes) -> Vec<Vec<usize>> {
        let n_nodes = nodes.count();
        let heads = |n: usize| &t.nvls_heads[self.node_host(nodes, n)];
        let min_heads = (0..n_nodes).map(|n| heads(n).len()).min().unwrap_or(0);
        (0..min_heads)
            .map(|h| (0..n_nodes).map(|n| heads(n)[h] as usize).collect())
            .collect()
    }
}

/// Whether `ends[k]` is an end rank of `node` to connect, each rank once (the parent side and
/// a child side can be one rank).
fn is_end(ends: &[i32; 3], k: usize, nodes: &Nodes, node: usize) -> bool {
    let ri = ends[k];
    ri >= 0 && !ends[..k].contains(&ri) && nodes.rank_to_node[ri as usize] == node
}

pub(super) fn sm_of(hs: &HashMap<usize, Arc<HostSearch>>, m: &Member) -> i32 {
    let sys = &hs[&m.host].topo.system;
    (0..sys.count(NodeKind::Gpu))
        .find(|&g| sys.gpu(g).dev == m.dev)
        .map(|g| sys.gpu(g).sm)
        .unwrap_or(0)
}

/// `ncclTopoGetMinNetBw` over all ranks (min).
pub(super) fn min_net_bw_all(
    members: &[Member],
    host_ranks: &HashMap<usize, Vec<usize>>,
    hs: &HashMap<usize, Arc<HostSearch>>,
) -> f32 {
    let mut min = f32::MAX;
    for (r, m) in members.iter().enumerate() {
        let h = &hs[&m.host];
        let label = host_ranks[&m.host]
            .iter()
            .position(|&x| x == r)
            .unwrap_or(0);
        min = min.min(h.gpu_nets[h.labels[label]].min_bw);
    }
    if min == f32::MAX {
        0.0
    } else {
        min
    }
}
