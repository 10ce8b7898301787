//! NCCL's INFO lines for a planned communicator, from one rank's perspective (NCCL 2.30.7
//! formats: `ncclTopoPrintGraph`, `connectTrees`, `ncclBuildRings`/`dumpLine`, `connectNvls`,
//! the `Ring`/`Trees` and channel-count lines of `initTransportsRank`).

use crate::graph::TopoGraph;
use crate::plan::{CommPlan, NodeSearch};
use crate::profile::Profile;

/// `ncclTopoPrintGraph` for one graph of a node.
pub fn graph_lines(
    search: &NodeSearch,
    g: &TopoGraph,
    inter: bool,
    v: topo::NcclVersion,
) -> Vec<String> {
    let mut out = vec![format!(
        "Pattern {}, crossNic {}, nChannels {}, bw {:.6}/{:.6}, type {}/{}, sameChannels {}",
        g.pattern.number(),
        g.cross_nic,
        g.n_channels,
        g.bw_intra,
        g.bw_inter,
        g.type_intra.name(),
        g.type_inter.name(),
        g.same_channels
    )];
    let profile = Profile::for_version(v);
    let ngpus = search.ranks.len();
    let net = |id: i64| -> String {
        let u = id as u64;
        if profile.graph_net_ids_split {
            format!(" NET/{:x}-{:x}", u >> 56, u & 0x00ff_ffff_ffff_ffff)
        } else if profile.graph_hex_ids {
            format!(" NET/{:x}", u)
        } else {
            format!(" NET/{}", id)
        }
    };
    for c in 0..g.n_channels as usize {
        let mut line = format!("{c:2} :");
        if inter {
            line.push_str(&net(g.inter[2 * c]));
        }
        for k in 0..ngpus {
            let rank = g.intra[c * ngpus + k];
            if profile.graph_gpu_ids {
                let label = search
                    .ranks
                    .iter()
                    .position(|&r| r as i32 == rank)
                    .unwrap_or(0);
                let (s, l) = search.gpu_ids[label];
                line.push_str(&format!(" GPU/{s:x}-{l:x}"));
            } else {
                line.push_str(&format!(" GPU/{rank}"));
            }
            if g.id == 3 && profile.nvls_graph_lines_head_only {
                break;
            }
        }
        if inter {
            line.push_str(&net(g.inter[2 * c + 1]));
        }
        out.push(line);
    }
    out
}

/// `dumpLine`: the `Channel xx/yy :` line with NCCL's 128-byte buffer (2.23+), or the older
/// fixed `" %3d"` columns for at most 20 ranks. `ring` is the channel's order over `nranks`
/// ranks; only what fits the line is read.
pub fn ring_line(
    c: usize,
    nrings: usize,
    nranks: usize,
    ring: impl IntoIterator<Item = usize>,
    v: topo::NcclVersion,
) -> String {
    if !Profile::for_version(v).ring_line_buffer {
        let mut line = format!("Channel {c:02}/{nrings:02} : ");
        for r in ring.into_iter().take(20) {
            line.push_str(&format!(" {r:>3}"));
        }
        return line;
    }
    // NCCL writes each " %*d" into the rest of its 128-byte buffer (127 characters): an entry
    // that does not fit is cut by snprintf, and only a visibly cut entry turns the line's end
    // into "..."; an entry that would start at the very end leaves the full line as it is.
    let mut line = format!("Channel {c:02}/{nrings:02} :");
    let width = format!("{}", nranks.saturating_sub(1)).len();
    for r in ring {
        let entry = format!(" {r:>width$}");
        if line.len() + entry.len() <= 127 {
            line.push_str(&entry);
            continue;
        }
        if line.len() < 127 {
            line.truncate(124);
            line.push_str("...");
        }
        break;
    }
    line
}

/// Every INFO line of the plan as rank `rank` prints it (rank 0 also prints the rings).
pub fn info_lines(plan: &CommPlan, rank: usize) -> Vec<String> {
    info_lines_with(plan, rank, PLANNER_COMM, &[])
}

/// The communicator pointer the planner's lines show (`comm %p`): a plan has no communicator
/// object; the runtime shows its `ncclComm_t` instead.
pub const PLANNER_COMM: u64 = 0xc0ffee00;

/// [`info_lines`] with the lines of NCCL's tuning step (`ncclTopoTuneModel`: the TUNING table,
/// `threadThresholds`, ...) put where NCCL prints them: after the P2P tuning line, right before
/// the channel-count line. The planner does not price anything; the caller (the CLI, with the
/// cost model) supplies `tuning`.
/// `comm` is the communicator pointer to show ([`PLANNER_COMM`] without one).
pub fn info_lines_with(plan: &CommPlan, rank: usize, comm: u64, tuning: &[String]) -> Vec<String> {
    let v: topo::NcclVersion = plan.nccl_version.parse().unwrap_or_default();
    let profile = Profile::for_version(v);
    let me = &plan.ranks[rank];
    let search = &plan.searches[me.node];
    let inter = plan.n_nodes > 1;
    let mut out = Vec::new();
    // `src/init.cc` `fillInfo` and `src/mnnvl.cc` `ncclMnnvlCheck`.
    if let Some(f) = &me.fabric {
        out.push(format!(
            "MNNVL busId 0x{:x} fabric UUID {:x}.{:x} cliqueId 0x{:x} state {} healthMask 0x{:x}",
            topo::system::busid_to_int(&me.busid),
            f.cluster_uuid[0],
            f.cluster_uuid[1],
            f.clique_id,
            f.state,
            f.health_mask
        ));
    }
    if let Some(m) = &me.mnnvl {
        out.push(format!(
            "MNNVL 1 cliqueId {:x} cliqueSize {} cliqueRank {} nvlDomainSize {}",
            m.clique_id, m.clique_size, m.clique_rank, m.nvl_domain_size
        ));
    }
    if plan.min_comp_cap >= 90 || plan.nvls_support {
        out.push(format!(
            "NVLS multicast support is {}available on dev {}",
            if plan.nvls_support { "" } else { "not " },
            me.dev
        ));
    }
    for g in search.graphs.iter() {
        let searched = g.id <= 1
            || (g.id == 3 && plan.nvls_support)
            || ((g.id == 2 || g.id == 4) && plan.collnet_support);
        if searched {
            out.extend(graph_lines(search, g, inter, v));
        }
    }
    out.extend(search.notes.iter().cloned());
    out.push(format!(
        "comm 0x{:x} rank {} nRanks {} nNodes {} localRanks {} localRank {} MNNVL {}",
        comm,
        rank,
        plan.n_ranks,
        plan.n_nodes,
        plan.node_ranks[me.node].len(),
        me.local_rank,
        u8::from(me.mnnvl.is_some())
    ));
    if let Some(m) = me.mnnvl.filter(|m| m.cross_clique) {
        out.push(format!(
            "Cross-clique P2P enabled: nvlDomainSize={} cliqueSize={}",
            m.nvl_domain_size, m.clique_size
        ));
    }
    out.extend(plan.tree_lines.of(rank).iter().map(|t| {
        format!(
            "Tree {} : {} -> {} -> {}/{}/{}",
            t.channel, t.up, rank, t.down[0], t.down[1], t.down[2]
        )
    }));
    if plan.nvls_support && plan.n_nodes > 1 && me.node == 0 {
        for (h, heads) in plan.nvls_heads.iter().enumerate() {
            let mut line = format!("NVLS Head {h:2}:");
            for r in heads.iter().take(20) {
                line.push_str(&format!(" {r:2}"));
            }
            out.push(line);
        }
    }
    if let Some(l) = nvls_trees_line(plan, rank) {
        out.push(l);
    }
    if rank == 0 {
        for c in 0..plan.channels.len() {
            out.push(ring_line(
                c,
                plan.n_channels,
                plan.n_ranks,
                plan.ring_from_rank0(c),
                v,
            ));
        }
    }
    let mut trees = String::new();
    for (c, ch) in plan.channels.iter().enumerate() {
        let t = &ch[rank];
        out.push(format!(
            "Ring {c:02} : {} -> {rank} -> {}",
            t.ring_prev, t.ring_next
        ));
        let piece = format!(
            " [{c}] {}/{}/{}->{rank}->{}",
            t.tree_down[0], t.tree_down[1], t.tree_down[2], t.tree_up
        );
        if trees.len() + piece.len() <= 1022 {
            trees.push_str(&piece);
        } else {
            let room = 1022 - trees.len();
            trees.push_str(&piece[..room]);
        }
    }
    out.push(format!("Trees{trees}"));
    if plan.n_nodes > 1 && profile.max_p2p_peers_line {
        out.push(format!(
            "Tuning P2P operations with maxP2pPeers = {}",
            plan.p2p_max_peers
        ));
    }
    out.extend(tuning.iter().cloned());
    if profile.collnet_channels_line {
        out.push(format!(
            "{} coll channels, {} collnet channels, {} nvls channels, {} p2p channels, {} p2p channels per peer",
            plan.n_channels, plan.collnet_channels, plan.nvls_channels, plan.p2p_channels, plan.p2p_channels_per_peer
        ));
    } else {
        out.push(format!(
            "{} coll channels, {} nvls channels, {} p2p channels, {} p2p channels per peer",
            plan.n_channels, plan.nvls_channels, plan.p2p_channels, plan.p2p_channels_per_peer
        ));
    }
    out
}

/// `connectNvls`'s `NVLS Trees : ...` line (multi-node NVLS only): the NVLS down link and the
/// double binary tree over the nodes' heads, for channels 0 and 1.
pub fn nvls_trees_line(plan: &CommPlan, rank: usize) -> Option<String> {
    if !plan.nvls_support || plan.n_nodes < 2 || plan.nvls_heads.is_empty() {
        return None;
    }
    let node = plan.ranks[rank].node;
    let n = plan.n_nodes as i32;
    let head_rank = plan
        .nvls_heads
        .iter()
        .position(|h| h[node] == rank)
        .map_or(-1, |h| h as i32);
    let down = plan.n_ranks as i32 + 1 + head_rank;
    let dt = crate::comm::dtree(n, node as i32);
    let mut up = [-1i32; 2];
    let mut d0 = [-1i32; 2];
    let mut d1 = [-1i32; 2];
    if head_rank >= 0 {
        let heads = &plan.nvls_heads[head_rank as usize];
        let at = |x: i32| {
            if x == -1 {
                -1
            } else {
                heads[x as usize] as i32
            }
        };
        for (k, t) in [dt.tree0, dt.tree1].into_iter().enumerate() {
            up[k] = at(t.up);
            d0[k] = at(t.down0);
            d1[k] = at(t.down1);
        }
    }
    let chan = |k: usize| {
        let mut td = [down, -1, -1];
        let mut ix = 1;
        if d0[k] != -1 {
            td[ix] = d0[k];
            ix += 1;
        }
        if d1[k] != -1 {
            td[ix] = d1[k];
        }
        format!("{}/{}/{}->{rank}->{}", td[0], td[1], td[2], up[k])
    };
    Some(format!("NVLS Trees : {} {}", chan(0), chan(1)))
}
