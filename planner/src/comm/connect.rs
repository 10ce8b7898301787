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

/// Per-rank results of Preset (`struct ncclTopoRanks`).
#[derive(Clone, Default)]
pub(super) struct TopoRanks {
    cross_nic_ring: i32,
    ring_recv: Vec<i32>,
    ring_send: Vec<i32>,
    ring_prev: Vec<i32>,
    ring_next: Vec<i32>,
    tree_to_parent: Vec<i32>,
    tree_to_child0: Vec<i32>,
    tree_to_child1: Vec<i32>,
    nvls_heads: Vec<i32>,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn assemble(
    members: &[Member],
    name: &str,
    settings: &PlannerSettings,
    parent: Option<&CommPlan>,
    host_order: &[usize],
    host_ranks: &HashMap<usize, Vec<usize>>,
    host_search: &HashMap<usize, Arc<HostSearch>>,
) -> CommPlan {
    let nranks = members.len();
    let version = settings.topo.version;
    let profile = Profile::for_version(version);
    let maxch = version.max_channels();
    // Translate a host's graphs from local labels to comm ranks.
    let to_comm = |h: usize, g: &TopoGraph| -> TopoGraph {
        let ranks = &host_ranks[&h];
        let mut g = g.clone();
        for x in g.intra.iter_mut() {
            *x = ranks[*x as usize] as i32;
        }
        g
    };
    let graphs_of: HashMap<usize, CommGraphs> = host_order
        .iter()
        .map(|&h| (h, host_search[&h].graphs.map(|g| to_comm(h, g))))
        .collect();

    // Preset, per rank, with the rank's own graphs.
    let mut topo_ranks: Vec<TopoRanks> = vec![TopoRanks::default(); nranks];
    let mut own_nch = vec![0usize; nranks];
    for (r, m) in members.iter().enumerate() {
        let gs = &graphs_of[&m.host];
        let local = host_ranks[&m.host].len();
        let nch = gs.ring.n_channels.min(gs.tree.n_channels) as usize;
        own_nch[r] = nch;
        let tr = &mut topo_ranks[r];
        tr.cross_nic_ring = gs.ring.cross_nic;
        for c in 0..nch {
            let ring = gs.ring.channel(c, local);
            let tree = gs.tree.channel(c, local);
            if let Some(i) = ring.iter().position(|&x| x as usize == r) {
                tr.ring_recv.push(ring[0]);
                tr.ring_send.push(ring[local - 1]);
                tr.ring_prev.push(if i == 0 { -1 } else { ring[i - 1] });
                tr.ring_next
                    .push(if i == local - 1 { -1 } else { ring[i + 1] });
            }
            if tree.contains(&(r as i32)) {
                let pat = gs.tree.pattern;
                tr.tree_to_parent.push(tree[0]);
                tr.tree_to_child0.push(
                    tree[if pat == Pattern::Tree {
                        0
                    } else {
                        1.min(local - 1)
                    }],
                );
                tr.tree_to_child1.push(
                    tree[if pat == Pattern::SplitTree {
                        1.min(local - 1)
                    } else {
                        0
                    }],
                );
            }
        }
        let nv = &gs.nvls;
        for c in 0..nv.n_channels as usize {
            let head = nv.intra[c * local];
            if !tr.nvls_heads.contains(&head) {
                tr.nvls_heads.push(head);
            }
        }
    }

    // nNodes and rankToNode from ring-0 entry ranks.
    let mut first_ranks: Vec<i32> = Vec::new();
    let mut node_tree_patterns: Vec<Pattern> = Vec::new();
    let mut rank_to_node = vec![0usize; nranks];
    for r in 0..nranks {
        let fr = topo_ranks[r].ring_recv.first().copied().unwrap_or(r as i32);
        let node = match first_ranks.iter().position(|&x| x == fr) {
            Some(n) => n,
            None => {
                first_ranks.push(fr);
                node_tree_patterns.push(graphs_of[&members[r].host].tree.pattern);
                first_ranks.len() - 1
            }
        };
        rank_to_node[r] = node;
    }
    let n_nodes = first_ranks.len();
    let mut node_ranks: Vec<Vec<usize>> = vec![Vec::new(); n_nodes];
    let mut local_rank = vec![0usize; nranks];
    for r in 0..nranks {
        local_rank[r] = node_ranks[rank_to_node[r]].len();
        node_ranks[rank_to_node[r]].push(r);
    }
    let min_local = node_ranks.iter().map(|v| v.len()).min().unwrap_or(0);
    let max_local = node_ranks.iter().map(|v| v.len()).max().unwrap_or(0);

    // Align graphs (AllGather3).
    let mut aligned: CommGraphs = graphs_of[&members[0].host].clone();
    let mut max_tree_pattern = Pattern::BalancedTree;
    for m in members {
        let gs = &graphs_of[&m.host];
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
    let mut nvls_support = members.iter().all(|m| host_search[&m.host].nvls_support);
    let collnet_graph = aligned.collnet_chain.n_channels > 0;
    let collnet_support = settings.collnet_enable
        && collnet_graph
        && n_nodes as i32 >= settings.collnet_node_threshold;
    if aligned.nvls.n_channels == 0 {
        nvls_support = false;
    }
    let sms: Vec<i32> = members.iter().map(|m| sm_of(host_search, m)).collect();
    let min_cc = sms.iter().copied().min().unwrap_or(0);
    let max_cc = sms.iter().copied().max().unwrap_or(0);
    let my_cc = sms[0];
    let min_net_bw = min_net_bw_all(members, host_ranks, host_search);
    let mut nvls_channels = 0usize;
    if nvls_support {
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
        nvls_channels = (n as i32).min(settings.max_ctas).max(settings.min_ctas) as usize;
    }
    let nch = aligned.ring.n_channels.min(aligned.tree.n_channels) as usize;
    aligned.ring.n_channels = nch as i32;
    aligned.tree.n_channels = nch as i32;

    // Preset channel state per rank: ring prev/next -1, intra-node tree chain.
    let mut channels: Vec<Vec<ChannelRank>> = vec![
        vec![
            ChannelRank {
                ring_prev: -1,
                ring_next: -1,
                tree_up: -1,
                tree_down: [-1; 3],
            };
            nranks
        ];
        2 * nch
    ];
    for (r, m) in members.iter().enumerate() {
        let gs = &graphs_of[&m.host];
        let local = host_ranks[&m.host].len();
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

    // Postset: crossNic swap.
    for r in 0..nranks {
        if topo_ranks[r].cross_nic_ring == 2 && nch % 2 == 0 && rank_to_node[r] % 2 == 1 {
            let tr = &mut topo_ranks[r];
            for c in (0..nch).step_by(2) {
                tr.ring_recv.swap(c, c ^ 1);
                tr.ring_send.swap(c, c ^ 1);
                tr.ring_prev.swap(c, c ^ 1);
                tr.ring_next.swap(c, c ^ 1);
            }
        }
    }
    let fr = |n: usize| first_ranks[n] as usize;
    let mut ring_prev = vec![vec![-1i32; nranks]; nch];
    let mut ring_next = vec![vec![-1i32; nranks]; nch];
    for c in 0..nch {
        for r in 0..nranks {
            ring_prev[c][r] = topo_ranks[r].ring_prev[c];
            ring_next[c][r] = topo_ranks[r].ring_next[c];
        }
        // connectRings
        for n in 0..n_nodes {
            let recv = topo_ranks[fr(n)].ring_recv[c];
            let prev_send = topo_ranks[fr((n + n_nodes - 1) % n_nodes)].ring_send[c];
            ring_prev[c][recv as usize] = prev_send;
            let send = topo_ranks[fr(n)].ring_send[c];
            let next_recv = topo_ranks[fr((n + 1) % n_nodes)].ring_recv[c];
            ring_next[c][send as usize] = next_recv;
        }
    }
    // connectTrees
    let mut tree_lines: Vec<Vec<TreeLine>> = vec![Vec::new(); nranks];
    let depth = nranks / n_nodes - 1 + log2i(n_nodes);
    for r in 0..nranks {
        let node = rank_to_node[r];
        let DoubleTree {
            tree0: t0,
            tree1: t1,
        } = dtree(n_nodes as i32, node as i32);
        for c in 0..nch {
            let ttp = |n: usize| topo_ranks[fr(n)].tree_to_parent[c];
            let ttc0 = |n: usize| topo_ranks[fr(n)].tree_to_child0[c];
            let ttc1 = |n: usize| topo_ranks[fr(n)].tree_to_child1[c];
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
    // Duplicate ring prev/next and set them on both channel copies.
    for c in 0..nch {
        for r in 0..nranks {
            for cc in [c, c + nch] {
                channels[cc][r].ring_prev = ring_prev[c][r];
                channels[cc][r].ring_next = ring_next[c][r];
            }
        }
    }
    let mut n_channels = maxch.min(nch * 2);
    channels.truncate(n_channels);
    let copy_channels = |channels: &mut Vec<Vec<ChannelRank>>, start: usize, end: usize| -> usize {
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
            n_channels = copy_channels(&mut channels, n_channels, target);
        }
    }
    let sm90_double = if profile.double_channels_sm90_plus {
        min_cc >= 90 && n_nodes > 1 && aligned.ring.bw_intra > 45.0 && n_channels < 16
    } else {
        min_cc == 90
            && n_nodes > 1
            && aligned.ring.bw_intra > 45.0
            && n_channels < 16
            && 2 * n_channels <= maxch
    };
    if sm90_double {
        n_channels = copy_channels(&mut channels, n_channels, 2 * n_channels);
    }
    let max_c = (settings.max_channels() as usize).min(settings.max_ctas.max(1) as usize);
    n_channels = n_channels.min(max_c);
    channels.truncate(n_channels);
    let min_c = settings.min_channels().max(settings.min_ctas).max(0) as usize;
    n_channels = copy_channels(&mut channels, n_channels, min_c);
    channels.truncate(n_channels);

    // NVLS heads per node.
    let min_heads = (0..n_nodes)
        .map(|n| topo_ranks[fr(n)].nvls_heads.len())
        .min()
        .unwrap_or(0);
    let nvls_heads: Vec<Vec<usize>> = (0..min_heads)
        .map(|h| {
            (0..n_nodes)
                .map(|n| topo_ranks[fr(n)].nvls_heads[h] as usize)
                .collect()
        })
        .collect();
    if min_heads == 0 {
        nvls_channels = 0;
    }

    // Rings from rank 0.
    let rings: Vec<Vec<usize>> = channels
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
        .collect();

    // P2P channels.
    let (p2p_channels, p2p_per_peer, p2p_max_peers) = p2p_channels(
        members,
        host_ranks,
        host_search,
        settings,
        n_channels,
        n_nodes,
        &profile,
    );

    let cpu = host_search[&members[0].host].topo.system.cpu_type();
    let nvs_count = host_search[&members[0].host]
        .topo
        .system
        .count(NodeKind::Nvs);
    let gpu_pci_bw = {
        let sys = &host_search[&members[0].host].topo.system;
        let label = host_ranks[&members[0].host]
            .iter()
            .position(|&x| x == 0)
            .unwrap_or(0);
        let g = sys.nodes(NodeKind::Gpu)[host_search[&members[0].host].labels[label]];
        sys.links(sys.gpu_attach(g))
            .filter(|(_, _, l)| l.ty == topo::LinkType::Pci)
            .map(|(_, _, l)| l.bw)
            .fold(0.0f32, f32::max)
    };
    let all_nvlink = host_order.iter().all(|h| {
        host_search[h].topo.gpu_path_range(NodeKind::Gpu).1 < PathType::Pix
            || host_search[h].topo.system.count(NodeKind::Gpu) < 2
    });
    let ranks: Vec<RankInfo> = members
        .iter()
        .enumerate()
        .map(|(r, m)| {
            let hs = &host_search[&m.host];
            let sys = &hs.topo.system;
            let label = host_ranks[&m.host]
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
                node: rank_to_node[r],
                local_rank: local_rank[r],
            }
        })
        .collect();
    let searches: Vec<NodeSearch> = (0..n_nodes)
        .map(|n| {
            let h = members[fr(n)].host;
            let hs = &host_search[&h];
            let sys = &hs.topo.system;
            let labels = &hs.labels;
            let ranks_h = &host_ranks[&h];
            let mut gpu_ids = vec![(0, 0); ranks_h.len()];
            for (label, &g) in labels.iter().enumerate() {
                let node = sys.node(sys.nodes(NodeKind::Gpu)[g]);
                gpu_ids[label] = (node.system_id(), node.local_id());
            }
            NodeSearch {
                node: n,
                host: h,
                ranks: ranks_h.clone(),
                gpu_ids,
                graphs: graphs_of[&h].clone(),
                notes: hs.notes.clone(),
                topo: Some(hs.topo.clone()),
            }
        })
        .collect();
    CommPlan {
        name: name.to_string(),
        nccl_version: version.to_string(),
        n_ranks: nranks,
        n_nodes,
        ranks,
        node_ranks,
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
