//! NCCL's graph search (NCCL 2.30.7 `src/graph/search.cc`, `ncclTopoCompute` and the recursion
//! under it), written from the semantics of that file.
//!
//! The search works on a copy of the link bandwidths and NET bandwidths of one node's topology:
//! following a path subtracts the graph's per-channel bandwidth from every link on it, and the
//! recursion undoes it when it backs out. NCCL bounds the search with step counters (not wall
//! clock), so the result is deterministic; this module counts the same steps.
//!
//! Behaviour kept on purpose because it changes results: bandwidths truncated to integers where
//! NCCL stores them in `int` (GPU sort scores, the NET bandwidth charge), `SUB_ROUND` to 1e-3, the
//! NET loop's early `continue` that skips restoring a NET's bandwidth when no GPU reaches it, and
//! `nHops` accumulated through a float-to-int conversion.
//!
//! Layout: this module holds the [`Searcher`] state and its path table; `round` NCCL's float
//! rounding (the speed arrays are in `crate::consts`, picked by `crate::profile`), `memo` the subtree/attempt memo, `charge` path following and
//! bandwidth charges, `nets` NET selection, `walk` the recursion over GPUs and NETs, `compute`
//! `ncclTopoCompute` itself; `dominance` and `futile` skip attempts that provably cannot change
//! the result.

use crate::graph::{Pattern, TopoGraph};
use crate::profile::Profile;
use crate::settings::PlannerSettings;
use petgraph::graph::NodeIndex;
use topo::consts::{cpu_arch, cpu_vendor};
use topo::path::{LinkType, PathType};
use topo::settings::NetDevsPolicy;
use topo::{NodeKind, Path, Topology};

mod charge;
mod compute;
mod dominance;
mod futile;
mod memo;
mod nets;
mod round;
mod walk;

use memo::{fold, weight, Memo, TAG_LINK, TAG_NET, TAG_USED};
use round::sub_round;

use crate::consts::{
    FORCED_ORDER_PCI, FORCED_ORDER_REPLAY, GLOBAL_TIMEOUT, MAXCHANNELS, NCCL_MAX_DIRECT_ARITY,
    NCCL_MAX_NVLS_ARITY, NCCL_TOPO_MAX_NODES, TIMEOUT, TIMEOUT_SAMECHANNELS, TIMEOUT_TREE,
};

/// Node kinds an end of a path can be.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    None,
    Gpu(usize),
    Net(usize),
    Nvs(usize),
}

/// Next-GPU candidates (a handful; no allocation in the hot loop).
type GpuList = smallvec::SmallVec<[usize; 8]>;

/// The search over one node's topology.
pub struct Searcher<'a> {
    topo: &'a Topology,
    ngpus: usize,
    gpus: Vec<NodeIndex>,
    nets: Vec<NodeIndex>,
    nvs: Vec<NodeIndex>,
    gpu_rank: Vec<i32>,
    /// Current bandwidth of every link (indexed by edge index).
    link_bw: Vec<f32>,
    /// `net.bw` of every NET (mutated by the NET charge).
    net_bw: Vec<f32>,
    net_asic: Vec<u64>,
    net_port: Vec<i32>,
    net_id: Vec<i64>,
    net_rail: Vec<i32>,
    net_plane: Vec<i32>,
    /// Per NET: `net->net.pciId`.
    net_pci: Vec<u64>,
    /// `system->nHosts > 1 && NCCL_MNNVL_SCATTER_NETS_ENABLE`: NETs preferred GPU by GPU.
    nets_gpu_first: bool,
    net_coll: Vec<bool>,
    net_latency: Vec<f32>,
    used: Vec<u64>,
    nets_cache: Vec<Option<std::rc::Rc<[usize]>>>,
    table: Vec<PInfo>,
    table_links: Vec<PLink>,
    nends: usize,
    gpu_pci: Vec<Option<(usize, usize)>>,
    cross_nic_param: i32,
    inter: bool,
    cpu: (i32, i32, i32),
    version: topo::NcclVersion,
    /// The release's search rules.
    profile: Profile,
    /// Recursion steps NCCL takes for the same search (what its budgets count).
    pub steps: u64,
    /// Recursion steps this search actually walked (the rest were answered by the memo).
    pub walked: u64,
    memo: Memo,
    /// Path types present among intra-node (GPU/NVSwitch) and NET paths, sorted.
    types_intra: Vec<PathType>,
    types_inter: Vec<PathType>,
    /// INFO lines the search printed (fallback notices).
    pub notes: Vec<String>,
    statics: dominance::Statics,
    /// The GPUs closest to each NET (`ncclTopoGetLocal`; static).
    net_locals: Vec<std::rc::Rc<[usize]>>,
    /// What the rest of the current pass can still find (see `futile`), while it is known.
    outlook: Option<futile::Outlook>,
    /// The current attempt was abandoned: nothing left in its pass can improve the graph.
    abandoned: bool,
    /// End passes that cannot change the graph any more (off only to check that it changes
    /// nothing).
    pub end_hopeless: bool,
}

/// A precomputed path between two search ends.
#[derive(Clone, Copy)]
struct PInfo {
    ty: PathType,
    bw: f32,
    first: u32,
    count: u32,
    /// PHB path through an Intel x86 CPU starting at a GPU: PCI links are charged 1.2x.
    intel_phb: bool,
}

/// One link of a precomputed path.
#[derive(Clone, Copy)]
struct PLink {
    e: u32,
    pci: bool,
    /// The link ends at a pre-sm80 GPU/DEV and the path does not start at a GPU: charge 1/8 back.
    eighth: bool,
    /// An NVLink into a POWER CPU: charge the full bandwidth back.
    power: bool,
    rev: u32,
}

impl<'a> Searcher<'a> {
    /// Prepare a search over `topo` (bandwidths start at the topology's values).
    pub fn new(topo: &'a Topology, settings: &PlannerSettings) -> Searcher<'a> {
        let mut s = Self::new_unprepared(topo, settings);
        s.build_table();
        s.memo.link_w = (0..s.link_bw.len()).map(|i| weight(TAG_LINK, i)).collect();
        s.memo.net_w = (0..s.net_bw.len()).map(|i| weight(TAG_NET, i)).collect();
        s.memo.used_w = (0..s.ngpus).map(|i| weight(TAG_USED, i)).collect();
        // Path types the recursion can test against typeIntra (GPU/NVSwitch ends only) and
        // typeInter (a NET at either end).
        let ends = s.ends();
        let (mut intra, mut inter) = (Vec::new(), Vec::new());
        for &a in &ends {
            for &b in &ends {
                let ty = s.pinfo(a, b).ty;
                if matches!(a, End::Net(_)) || matches!(b, End::Net(_)) {
                    inter.push(ty);
                } else {
                    intra.push(ty);
                }
            }
        }
        for v in [&mut intra, &mut inter] {
            v.sort();
            v.dedup();
        }
        (s.types_intra, s.types_inter) = (intra, inter);
        s.gpu_pci = (0..s.ngpus).map(|g| s.pci_edges(g)).collect();
        s.statics = s.dominance_statics();
        s
    }

    fn new_unprepared(topo: &'a Topology, settings: &PlannerSettings) -> Searcher<'a> {
        let sys = &topo.system;
        let gpus = sys.nodes(NodeKind::Gpu).to_vec();
        let nets = sys.nodes(NodeKind::Net).to_vec();
        let nvs = sys.nodes(NodeKind::Nvs).to_vec();
        let link_bw = sys.graph.edge_weights().map(|l| l.bw).collect();
        let nets_len = nets.len();
        let netinfo: Vec<&topo::system::NetInfo> = nets
            .iter()
            .map(|&n| sys.node(n).net().expect("NET nodes carry NET data"))
            .collect();
        Searcher {
            topo,
            ngpus: gpus.len(),
            gpu_rank: (0..gpus.len()).map(|g| sys.gpu(g).rank).collect(),
            gpus,
            net_bw: netinfo.iter().map(|n| n.bw).collect(),
            net_asic: netinfo.iter().map(|n| n.asic).collect(),
            net_port: netinfo.iter().map(|n| n.port).collect(),
            net_id: nets.iter().map(|&n| sys.node(n).id as i64).collect(),
            net_rail: netinfo.iter().map(|n| n.rail).collect(),
            net_plane: netinfo.iter().map(|n| n.plane).collect(),
            net_pci: netinfo.iter().map(|n| n.pci_id).collect(),
            nets_gpu_first: sys.n_hosts() > 1 && topo.settings.mnnvl.scatter_nets,
            net_coll: netinfo.iter().map(|n| n.coll).collect(),
            net_latency: netinfo.iter().map(|n| n.latency).collect(),
            nets,
            nvs,
            link_bw,
            used: vec![0; 0],
            nets_cache: Vec::new(),
            table: Vec::new(),
            table_links: Vec::new(),
            nends: 0,
            gpu_pci: Vec::new(),
            cross_nic_param: settings.cross_nic,
            inter: sys.inter,
            cpu: sys.cpu_type(),
            version: sys.version,
            profile: Profile::for_version(sys.version),
            steps: 0,
            walked: 0,
            memo: Memo {
                on: true,
                ..Memo::default()
            },
            types_intra: Vec::new(),
            types_inter: Vec::new(),
            notes: Vec::new(),
            statics: dominance::Statics::default(),
            net_locals: (0..nets_len)
                .map(|n| {
                    std::rc::Rc::from(topo.get_local(NodeKind::Net, n, NodeKind::Gpu).as_slice())
                })
                .collect(),
            outlook: None,
            abandoned: false,
            end_hopeless: true,
        }
    }

    fn node_of(&self, e: End) -> NodeIndex {
        match e {
            End::Gpu(i) => self.gpus[i],
            End::Net(i) => self.nets[i],
            End::Nvs(i) => self.nvs[i],
            End::None => unreachable!("no node for End::None"),
        }
    }
    fn path(&self, from: End, to: End) -> &'a Path {
        let (kind, i) = match to {
            End::Gpu(i) => (NodeKind::Gpu, i),
            End::Net(i) => (NodeKind::Net, i),
            End::Nvs(i) => (NodeKind::Nvs, i),
            End::None => unreachable!("paths go to a node"),
        };
        self.topo.path(self.node_of(from), kind, i)
    }

    fn dev_kind(&self) -> NodeKind {
        if self.version.has_dev_nodes() {
            NodeKind::Dev
        } else {
            NodeKind::Gpu
        }
    }

    /// `findRevLink`: the link back from `to` to `from` of the same type.
    fn rev_link(&self, from: NodeIndex, to: NodeIndex, ty: LinkType) -> Option<usize> {
        let sys = &self.topo.system;
        sys.links(to)
            .find(|(_, t, l)| *t == from && l.ty == ty)
            .map(|(e, _, _)| e.index())
    }

    fn end_index(&self, e: End) -> usize {
        match e {
            End::Gpu(i) => i,
            End::Net(i) => self.ngpus + i,
            End::Nvs(i) => self.ngpus + self.nets.len() + i,
            End::None => unreachable!("no index for End::None"),
        }
    }

    /// Every search end, in [`Self::end_index`] order: GPUs, NETs, NVSwitches.
    fn ends(&self) -> Vec<End> {
        (0..self.ngpus)
            .map(End::Gpu)
            .chain((0..self.nets.len()).map(End::Net))
            .chain((0..self.nvs.len()).map(End::Nvs))
            .collect()
    }

    /// Precompute, for every pair of search ends (GPUs, NETs, NVSwitch), what `followPath` needs:
    /// the links with their reverse-charge rules, so the hot loop never walks the graph.
    fn build_table(&mut self) {
        let topo = self.topo;
        let sys = &topo.system;
        let ends = self.ends();
        let n = ends.len();
        let dev_kind = self.dev_kind();
        self.table = Vec::with_capacity(n * n);
        self.table_links.clear();
        // What the loop below asks of a path's nodes, once per node: an Intel x86 CPU, a POWER
        // CPU, a pre-sm80 device.
        const INTEL: u8 = 1;
        const POWER: u8 = 2;
        const OLD_DEV: u8 = 4;
        let flags: Vec<u8> = sys
            .graph
            .node_weights()
            .map(|nd| {
                let mut f = 0;
                if let Some(c) = nd.cpu() {
                    if c.arch == cpu_arch::X86 && c.vendor == cpu_vendor::INTEL {
                        f |= INTEL;
                    }
                    if c.arch == cpu_arch::POWER {
                        f |= POWER;
                    }
                }
                if nd.kind == dev_kind && nd.sm().unwrap_or(0) < 80 {
                    f |= OLD_DEV;
                }
                f
            })
            .collect();
        for &from in &ends {
            for &to in &ends {
                let path = self.path(from, to);
                let start = self.node_of(from);
                let start_is_gpu = matches!(from, End::Gpu(_));
                let mut intel_phb = false;
                if path.ty == PathType::Phb && start_is_gpu {
                    for &e in &path.links {
                        let (_, rem) = sys.graph.edge_endpoints(e).expect("path edges exist");
                        intel_phb |= flags[rem.index()] & INTEL != 0;
                    }
                }
                let first = self.table_links.len() as u32;
                let mut node = start;
                for &e in &path.links {
                    let link = sys.graph[e];
                    let (_, rem) = sys.graph.edge_endpoints(e).expect("path edges exist");
                    let f = flags[rem.index()];
                    let eighth = f & OLD_DEV != 0 && !start_is_gpu;
                    let power = f & POWER != 0 && link.ty == LinkType::Nvl;
                    let rev = if eighth || power {
                        self.rev_link(node, rem, link.ty)
                            .map_or(u32::MAX, |r| r as u32)
                    } else {
                        u32::MAX
                    };
                    self.table_links.push(PLink {
                        e: e.index() as u32,
                        pci: link.ty == LinkType::Pci,
                        eighth,
                        power,
                        rev,
                    });
                    node = rem;
                }
                self.table.push(PInfo {
                    ty: path.ty,
                    bw: path.bw,
                    first,
                    count: path.count() as u32,
                    intel_phb,
                });
            }
        }
        self.nends = n;
    }

    /// The links of a precomputed path, in order.
    fn plinks(&self, p: PInfo) -> &[PLink] {
        &self.table_links[p.first as usize..(p.first + p.count) as usize]
    }

    fn pinfo(&self, from: End, to: End) -> PInfo {
        self.table[self.end_index(from) * self.nends + self.end_index(to)]
    }
}

/// `type += 1` over NCCL's path numbering.
fn next_type(t: PathType) -> PathType {
    let all = PathType::ALL;
    let i = all.iter().position(|&x| x == t).expect("listed");
    all[(i + 1).min(all.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(file: &str, nodes: usize) -> std::sync::Arc<Topology> {
        let path = format!("{}/../topologies/{file}", env!("CARGO_MANIFEST_DIR"));
        let s = PlannerSettings::default();
        let c = topo::Cluster::load(&path, nodes, &s.topo, None).unwrap();
        c.nodes[0].topo.clone()
    }

    /// The NVSwitch shortcut in `next_gpu_sort` gives what the full sort-then-filter gives, for
    /// every GPU, pattern and used-GPU set.
    #[test]
    fn nvswitch_next_gpu_order_is_the_sorted_one() {
        for (file, nodes) in [("dgx-h100.xml", 2), ("dgx-a100.xml", 1)] {
            let topo = topology(file, nodes);
            let mut s = Searcher::new(&topo, &PlannerSettings::default());
            assert!(!s.nvs.is_empty(), "{file} has NVSwitches");
            let n = s.ngpus;
            for pattern in [
                Pattern::Ring,
                Pattern::Tree,
                Pattern::SplitTree,
                Pattern::BalancedTree,
            ] {
                let mut gr = TopoGraph::new(0, pattern, 1, 32);
                gr.intra = vec![0; MAXCHANNELS * n];
                gr.inter = vec![s.net_id.first().copied().unwrap_or(0); MAXCHANNELS * 2];
                for mask in 0..(1u32 << n) {
                    s.used = (0..n).map(|g| ((mask >> g) & 1) as u64).collect();
                    for g in 0..n {
                        for sort_net in [-1, 0, 1] {
                            if sort_net != 0 && !s.inter {
                                continue;
                            }
                            let fast = s.next_gpu_sort(&gr, g, sort_net).to_vec();
                            let full = s.next_gpu_sort_nvs_reference(&gr, g, sort_net);
                            assert_eq!(fast, full, "{file} {pattern:?} g{g} used {mask:b}");
                        }
                    }
                }
            }
        }
    }

    /// The memo only saves work: with and without it every graph of a search that spends
    /// NCCL's whole budget (2-node DGX A100, H100) is the same, and so is the step count.
    #[test]
    fn memo_changes_no_graph() {
        // (file, nodes, NCCL_CROSS_NIC, whether the memo and dominance must cut the walk 4x,
        // whether ending hopeless passes must cut the steps of a host's ring and tree 4x)
        for (file, nodes, cross_nic, cut, ended) in [
            ("dgx-a100.xml", 2, 2, true, true),
            ("dgx-a100.xml", 2, 0, true, true),
            ("dgx-a100.xml", 2, 1, false, true),
            ("dgx-h100.xml", 2, 2, false, false),
            ("dgx-h100.xml", 1, 2, false, true),
            ("dgx1-v100.xml", 2, 2, false, false),
            ("pcie-4xa100.xml", 2, 2, false, false),
            ("pcie-8x4090.xml", 1, 2, false, false),
        ] {
            let topo = topology(file, nodes);
            let settings = PlannerSettings {
                cross_nic,
                ..PlannerSettings::default()
            };
            let run = |on: bool, end_hopeless: bool| {
                let mut s = Searcher::new(&topo, &settings);
                s.memo.on = on;
                s.end_hopeless = end_hopeless;
                let (mut out, mut host_steps) = (Vec::new(), 0);
                for pattern in [Pattern::Ring, Pattern::BalancedTree, Pattern::Nvls] {
                    let mut g = TopoGraph::new(0, pattern, 1, MAXCHANNELS as i32 / 2);
                    let s0 = s.steps;
                    s.compute(&mut g, None);
                    out.push(format!("{g:?}"));
                    // The tree as `search_host` asks for it: as many channels as the ring.
                    if pattern == Pattern::Ring {
                        let n = g.n_channels;
                        let mut t = TopoGraph::new(1, Pattern::BalancedTree, n, n);
                        s.compute(&mut t, None);
                        out.push(format!("{t:?}"));
                        host_steps = s.steps - s0;
                    }
                }
                (out, s.steps, s.walked, host_steps)
            };
            let (with, steps_with, walked_with, host_with) = run(true, false);
            let (without, steps_without, walked_without, _) = run(false, false);
            let (ended_early, steps_ended, walked_ended, host_ended) = run(true, true);
            let what = format!("{file} x{nodes} crossNic {cross_nic}");
            assert_eq!(with, without, "{what}");
            assert_eq!(ended_early, without, "{what}: ending hopeless passes");
            assert_eq!(steps_with, steps_without, "{what}");
            assert_eq!(walked_without, steps_without);
            assert!(steps_ended <= steps_with, "{what}");
            if cut {
                assert!(
                    walked_with * 4 < walked_without,
                    "{what}: {walked_with} vs {walked_without}"
                );
            }
            // The ring and tree a host search makes: their later attempts cannot beat what the
            // first ones find.
            if ended {
                assert!(
                    host_ended * 4 < host_with,
                    "{what}: {host_ended} vs {host_with}"
                );
            }
            eprintln!(
                "{what}: walked {walked_with} of {steps_with}; ending hopeless passes: \
                 walked {walked_ended} of {steps_ended}"
            );
        }
    }
}
