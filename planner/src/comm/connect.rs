//! Putting a communicator together from its hosts' searches (NCCL 2.30.7 `src/init.cc`
//! `initTransportsRank` after the searches, `src/graph/connect.cc` `ncclTopoPreset` /
//! `ncclTopoPostset`, `connectRings`, `connectTrees`): AllGather3 alignment, channel doubling
//! and clamps, NVLS channels and heads, P2P channels, the per-rank view.

use super::host::HostSearch;
use super::p2p::p2p_channels;
use super::trees::{dtree, log2i, DoubleTree};
use super::Member;
use crate::graph::{Pattern, TopoGraph};
use crate::plan::{ChannelRank, CommGraphs, CommPlan, NodeSearch, RankInfo, TreeLine};
use crate::profile::Profile;
use crate::settings::PlannerSettings;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use topo::{NodeKind, PathType};

/// Up to `width` values per rank, appended in order: a list per rank kept in one allocation
/// (a communicator can have half a million ranks).
struct Rows {
    width: usize,
    len: Vec<u32>,
    data: Vec<i32>,
}

impl Rows {
    fn new(ranks: usize, width: usize) -> Rows {
        Rows {
            width,
            len: vec![0; ranks],
            data: vec![0; ranks * width],
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

/// Results of Preset for every rank (`struct ncclTopoRanks`, one per rank): per channel, the
/// rank's ring entry and exit, ring neighbours and tree ends, and its NVLS heads.
pub(super) struct TopoRanks {
    cross_nic_ring: Vec<i32>,
    ring_recv: Rows,
    ring_send: Rows,
    ring_prev: Rows,
    ring_next: Rows,
    tree_to_parent: Rows,
    tree_to_child0: Rows,
    tree_to_child1: Rows,
    nvls_heads: Vec<Vec<i32>>,
}

impl TopoRanks {
    fn len(&self) -> usize {
        self.cross_nic_ring.len()
    }
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
    /// Each host's graphs, relabelled from local labels to communicator ranks.
    graphs_of: HashMap<usize, CommGraphs>,
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
    fn of(topo_ranks: &TopoRanks) -> Nodes {
        let nranks = topo_ranks.len();
        let mut first_ranks: Vec<i32> = Vec::new();
        let mut node_of_first: HashMap<i32, usize> = HashMap::default();
        let rank_to_node: Vec<usize> = (0..nranks)
            .map(|r| {
                let fr = topo_ranks
                    .ring_recv
                    .row(r)
                    .first()
                    .copied()
                    .unwrap_or(r as i32);
                *node_of_first.entry(fr).or_insert_with(|| {
                    first_ranks.push(fr);
                    first_ranks.len() - 1
                })
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
    let nodes = Nodes::of(&topo_ranks);
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
    cross_nic_swap(&mut topo_ranks, &nodes, nch);
    connect_rings(&mut channels, &topo_ranks, &nodes, nch);
    let tree_lines = connect_trees(&mut channels, &topo_ranks, &nodes, nch);
    let depth = nranks / n_nodes - 1 + log2i(n_nodes);
    let n_channels = cx.channel_count(
        &mut channels,
        nch,
        &aligned,
        collnet_support,
        min_cc,
        n_nodes,
    );
    let nvls_heads = nvls_heads(&topo_ranks, &nodes);
    if nvls_heads.is_empty() {
        nvls_channels = 0;
    }
    let rings = rings_from_rank0(&channels, nranks);
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
        rings,
        tree_lines,
        all_nvlink,
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
            .map(|&h| (h, host_search[&h].graphs.map(|g| to_comm(h, g))))
            .collect();
        let version = settings.topo.version;
        Comm {
            members,
            settings,
            profile: Profile::for_version(version),
            maxch: version.max_channels(),
            host_ranks,
            host_search,
            graphs_of,
        }
    }

    /// `ncclTopoPreset` per rank, with the rank's own host's graphs: its place in each ring
    /// and tree channel of its node, and the NVLS heads.
    fn preset(&self) -> TopoRanks {
        let nranks = self.members.len();
        let width = self
            .graphs_of
            .values()
            .map(|gs| gs.ring.n_channels.min(gs.tree.n_channels).max(0) as usize)
            .max()
            .unwrap_or(0);
        let rows = || Rows::new(nranks, width);
        let mut t = TopoRanks {
            cross_nic_ring: vec![0; nranks],
            ring_recv: rows(),
            ring_send: rows(),
            ring_prev: rows(),
            ring_next: rows(),
            tree_to_parent: rows(),
            tree_to_child0: rows(),
            tree_to_child1: rows(),
            nvls_heads: vec![Vec::new(); nranks],
        };
        for (r, m) in self.members.iter().enumerate() {
            let gs = &self.graphs_of[&m.host];
            let local = self.host_ranks[&m.host].len();
            let nch = gs.ring.n_channels.min(gs.tree.n_channels).max(0) as usize;
            t.cross_nic_ring[r] = gs.ring.cross_nic;
            for c in 0..nch {
                let ring = gs.ring.channel(c, local);
                let tree = gs.tree.channel(c, local);
                if let Some(i) = ring.iter().position(|&x| x as usize == r) {
                    t.ring_recv.push(r, ring[0]);
                    t.ring_send.push(r, ring[local - 1]);
                    t.ring_prev.push(r, if i == 0 { -1 } else { ring[i - 1] });
                    t.ring_next
                        .push(r, if i == local - 1 { -1 } else { ring[i + 1] });
                }
                if tree.contains(&(r as i32)) {
                    let pat = gs.tree.pattern;
                    t.tree_to_parent.push(r, tree[0]);
                    t.tree_to_child0.push(
                        r,
                        tree[if pat == Pattern::Tree {
                            0
                        } else {
                            1.min(local - 1)
                        }],
                    );
                    t.tree_to_child1.push(
                        r,
                        tree[if pat == Pattern::SplitTree {
                            1.min(local - 1)
                        } else {
                            0
                        }],
                    );
                }
            }
            let nv = &gs.nvls;
            let heads = &mut t.nvls_heads[r];
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
    /// max path types and crossNic over all ranks; also the largest tree pattern.
    fn align(&self) -> (CommGraphs, Pattern) {
        let mut aligned: CommGraphs = self.graphs_of[&self.members[0].host].clone();
        let mut max_tree_pattern = Pattern::BalancedTree;
        for m in self.members {
            let gs = &self.graphs_of[&m.host];
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
        let mut channels = vec![vec![none; self.members.len()]; 2 * nch];
        for (r, m) in self.members.iter().enumerate() {
            let gs = &self.graphs_of[&m.host];
            let local = self.host_ranks[&m.host].len();
            for c in 0..nch {
                let tree = gs.tree.channel(c, local);
                if let Some(i) = tree.iter().position(|&x| x as usize == r) {
                    let ch = &mut channels[c][r];
                    ch.tree_up = if i == 0 { -1 } else { tree[i - 1] };
                    ch.tree_down[0] = if i == local - 1 { -1 } else { tree[i + 1] };
                }
                channels[c + nch][r] = channels[c][r];
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
                }
            })
            .collect()
    }

    /// Each node's own search (its graphs in communicator ranks, notes, GPU ids).
    fn node_searches(&mut self, nodes: &Nodes) -> Vec<NodeSearch> {
        // Each host's relabelled graphs move into its (last) node rather than being copied.
        let mut uses: HashMap<usize, usize> = HashMap::default();
        for n in 0..nodes.count() {
            *uses.entry(self.members[nodes.first(n)].host).or_default() += 1;
        }
        (0..nodes.count())
            .map(|n| {
                let h = self.members[nodes.first(n)].host;
                let left = uses.get_mut(&h).expect("counted above");
                *left -= 1;
                let graphs = if *left == 0 {
                    self.graphs_of.remove(&h).expect("every host has graphs")
                } else {
                    self.graphs_of[&h].clone()
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

/// Postset's crossNic swap: with `crossNic == 2` and an even channel count, odd nodes swap
/// each pair of ring channels.
fn cross_nic_swap(t: &mut TopoRanks, nodes: &Nodes, nch: usize) {
    for r in 0..t.len() {
        if t.cross_nic_ring[r] == 2 && nch % 2 == 0 && nodes.rank_to_node[r] % 2 == 1 {
            for c in (0..nch).step_by(2) {
                t.ring_recv.row_mut(r).swap(c, c ^ 1);
                t.ring_send.row_mut(r).swap(c, c ^ 1);
                t.ring_prev.row_mut(r).swap(c, c ^ 1);
                t.ring_next.row_mut(r).swap(c, c ^ 1);
            }
        }
    }
}

/// `connectRings`: each node's ring enters from the previous node's last rank and leaves to
/// the next node's first; both copies of each channel get the result.
fn connect_rings(
    channels: &mut [Vec<ChannelRank>],
    topo_ranks: &TopoRanks,
    nodes: &Nodes,
    nch: usize,
) {
    let (nranks, n_nodes) = (topo_ranks.len(), nodes.count());
    let fr = |n: usize| nodes.first(n);
    for c in 0..nch {
        let t = topo_ranks;
        let mut ring_prev: Vec<i32> = (0..nranks).map(|r| t.ring_prev.row(r)[c]).collect();
        let mut ring_next: Vec<i32> = (0..nranks).map(|r| t.ring_next.row(r)[c]).collect();
        for n in 0..n_nodes {
            let recv = t.ring_recv.row(fr(n))[c];
            let prev_send = t.ring_send.row(fr((n + n_nodes - 1) % n_nodes))[c];
            ring_prev[recv as usize] = prev_send;
            let send = t.ring_send.row(fr(n))[c];
            let next_recv = t.ring_recv.row(fr((n + 1) % n_nodes))[c];
            ring_next[send as usize] = next_recv;
        }
        for r in 0..nranks {
            for cc in [c, c + nch] {
                channels[cc][r].ring_prev = ring_prev[r];
                channels[cc][r].ring_next = ring_next[r];
            }
        }
    }
}

/// `connectTrees`: the double binary tree over nodes (`ncclGetDtree`) joined to each node's
/// chain, tree 0 on channels `0..nch` and tree 1 on `nch..2*nch`; returns the `Tree` lines of
/// every rank.
fn connect_trees(
    channels: &mut [Vec<ChannelRank>],
    topo_ranks: &TopoRanks,
    nodes: &Nodes,
    nch: usize,
) -> Vec<Vec<TreeLine>> {
    let (nranks, n_nodes) = (topo_ranks.len(), nodes.count());
    let fr = |n: usize| nodes.first(n);
    let mut tree_lines: Vec<Vec<TreeLine>> = vec![Vec::new(); nranks];
    for r in 0..nranks {
        let node = nodes.rank_to_node[r];
        let DoubleTree {
            tree0: t0,
            tree1: t1,
        } = dtree(n_nodes as i32, node as i32);
        for c in 0..nch {
            let ttp = |n: usize| topo_ranks.tree_to_parent.row(fr(n))[c];
            let ttc0 = |n: usize| topo_ranks.tree_to_child0.row(fr(n))[c];
            let ttc1 = |n: usize| topo_ranks.tree_to_child1.row(fr(n))[c];
            let ri = r as i32;
            let pick = |ct: i32, n: i32| {
                if ct == 0 {
                    ttc0(n as usize)
                } else {
                    ttc1(n as usize)
                }
            };
            let set_down = |ch: &mut ChannelRank, d: i32| {
                if d == -1 {
                    return;
                }
                if let Some(x) = ch.tree_down.iter_mut().find(|x| **x < 0) {
                    *x = ttp(d as usize);
                }
            };
            if ri == ttp(node) {
                if t0.up != -1 {
                    channels[c][r].tree_up = pick(t0.parent_child_type, t0.up);
                }
                if t1.up != -1 {
                    channels[c + nch][r].tree_up = pick(t1.parent_child_type, t1.up);
                }
            }
            if ri == ttc0(node) {
                set_down(&mut channels[c][r], t0.down0);
                set_down(&mut channels[c + nch][r], t1.down0);
            }
            if ri == ttc1(node) {
                set_down(&mut channels[c][r], t0.down1);
                set_down(&mut channels[c + nch][r], t1.down1);
            }
            if ri == ttp(node) || ri == ttc0(node) || ri == ttc1(node) {
                for (cc, ch) in [(c, channels[c][r]), (c + nch, channels[c + nch][r])] {
                    tree_lines[r].push(TreeLine {
                        channel: cc,
                        up: ch.tree_up,
                        down: ch.tree_down,
                    });
                }
            }
        }
    }
    tree_lines
}

/// NVLS heads: for each head index every node has, that head's rank on each node (empty when
/// a node has none).
fn nvls_heads(topo_ranks: &TopoRanks, nodes: &Nodes) -> Vec<Vec<usize>> {
    let n_nodes = nodes.count();
    let min_heads = (0..n_nodes)
        .map(|n| topo_ranks.nvls_heads[nodes.first(n)].len())
        .min()
        .unwrap_or(0);
    (0..min_heads)
        .map(|h| {
            (0..n_nodes)
                .map(|n| topo_ranks.nvls_heads[nodes.first(n)][h] as usize)
                .collect()
        })
        .collect()
}

/// Every channel's ring as rank 0 walks it.
fn rings_from_rank0(channels: &[Vec<ChannelRank>], nranks: usize) -> Vec<Vec<usize>> {
    channels
        .iter()
        .map(|ch| {
            let mut v = Vec::with_capacity(nranks);
            let mut cur = 0usize;
            for _ in 0..nranks {
                v.push(cur);
                cur = ch[cur].ring_next.max(0) as usize;
            }
            v
        })
        .collect()
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
