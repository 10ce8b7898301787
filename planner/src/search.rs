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

use crate::graph::{Pattern, TopoGraph};
use crate::settings::PlannerSettings;
use petgraph::graph::NodeIndex;
use topo::consts::{cpu_arch, cpu_vendor};
use topo::path::{LinkType, PathType};
use topo::settings::NetDevsPolicy;
use topo::{NodeKind, Path, Topology};

mod dominance;
mod futile;

const MAXCHANNELS: usize = 64;
const NCCL_TOPO_MAX_NODES: usize = 576;
const NCCL_MAX_NVLS_ARITY: i32 = 32;
const NCCL_MAX_DIRECT_ARITY: i32 = 7;

const GLOBAL_TIMEOUT: i64 = 1 << 19;
const GLOBAL_TIMEOUT_2_18: i64 = 5 << 16;
const TIMEOUT: i32 = 1 << 14;
const TIMEOUT_TREE: i32 = 1 << 14;
const TIMEOUT_SAMECHANNELS: i32 = 1 << 8;

const FORCED_ORDER_PCI: i32 = 1;
const FORCED_ORDER_REPLAY: i32 = 2;

/// Per-SM speed arrays (GB/s per channel) for a version: (intra, inter).
pub fn speed_arrays(cc_min: i32, version: topo::NcclVersion) -> (Vec<f32>, Vec<f32>) {
    let v = |a: &[f32]| a.to_vec();
    // Blackwell arrays from 2.25; before, sm100 takes the sm90 ones.
    if cc_min >= 100 && version.at_least(2, 25) {
        let intra: Vec<f32> = if version.at_least(2, 29) {
            v(&[
                90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0,
            ])
        } else if version.at_least(2, 27) {
            v(&[
                90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0,
            ])
        } else {
            v(&[90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0])
        };
        let tail = [
            48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
            0.24, 0.12,
        ];
        let inter: Vec<f32> = if version.at_least(2, 30) {
            [96.0, 86.0, 80.0]
                .iter()
                .chain(tail.iter())
                .copied()
                .collect()
        } else if version.at_least(2, 29) {
            [96.0, 80.0].iter().chain(tail.iter()).copied().collect()
        } else if version.at_least(2, 28) {
            [96.0].iter().chain(tail.iter()).copied().collect()
        } else {
            let mut sm90 = speed_arrays(90, version).1;
            if version.at_least(2, 27) {
                sm90[0] = 47.9;
            }
            sm90
        };
        return (intra, inter);
    }
    if cc_min >= 90 {
        let intra = if version.at_least(2, 21) {
            v(&[
                60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0,
            ])
        } else if version.at_least(2, 19) {
            v(&[60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0])
        } else {
            v(&[60.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0])
        };
        let inter = v(&[
            48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
            0.24, 0.12,
        ]);
        return (intra, inter);
    }
    (
        v(&[
            40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
        ]),
        v(&[
            48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
            2.4, 1.2, 0.24, 0.12,
        ]),
    )
}

/// `SUB_ROUND`: subtract and round to 1e-3 in single precision.
fn sub_round(a: f32, b: f32) -> f32 {
    round_half_away((a - b) * 1000.0) / 1000.0
}

/// `roundf` (halfway cases away from zero) without the libm call it compiles to on baseline
/// x86-64; bit-identical to [`f32::round`].
#[inline]
fn round_half_away(x: f32) -> f32 {
    // From 2^23 on every f32 is an integer (and NaN/inf round to themselves).
    if x.is_nan() || x.abs() >= 8_388_608.0 {
        return x;
    }
    let t = x as i32 as f32; // truncation toward zero, exact in this range
    let f = x - t; // exact: the fraction of x
    let r = if f >= 0.5 {
        t + 1.0
    } else if f <= -0.5 {
        t - 1.0
    } else {
        t
    };
    // Keep the sign of zero as roundf does (e.g. -0.3 -> -0.0).
    if r == 0.0 {
        0.0f32.copysign(x)
    } else {
        r
    }
}

/// Node kinds an end of a path can be.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    None,
    Gpu(usize),
    Net(usize),
    Nvs(usize),
}

/// Memo of recursion subtrees that finished without improving the saved graph.
///
/// NCCL walks its search budget step by step, and on a multi-node DGX most of those steps
/// re-explore the same situation: on an NVSwitch a partial ring's link usage depends on which
/// GPUs it visited and where it stands, not in which order, so every permutation of the same
/// prefix leads into an identical subtree. A subtree's walk is a pure function of the search
/// state (residual link and NET bandwidths, the used-GPU flags, the recursion arguments, and the
/// few graph entries the recursion reads back), and while the saved graph is unchanged a subtree
/// that once finished without improving it will again finish without improving it and consume
/// the same number of steps. Such a subtree is answered from here: the budget is charged with
/// the steps NCCL would walk (or emptied, when it would run out inside), which gives the same
/// result as walking it. Any improvement of the saved graph clears the memo.
#[derive(Default)]
struct Memo {
    /// `sum(weight * (value - start value))` over the mutable arrays: a hash of the current
    /// residual bandwidths and used flags.
    state: u128,
    link_w: Vec<u128>,
    net_w: Vec<u128>,
    used_w: Vec<u128>,
    /// Subtree key -> (budget consumed, NCCL steps taken).
    table: rustc_hash::FxHashMap<u128, (i32, u64)>,
    /// Attempt key -> (budget left, NCCL steps taken), for attempts that did not improve.
    attempts: rustc_hash::FxHashMap<u128, (i32, u64)>,
    /// Attempts of the current `compute` that ran out of budget.
    exhausted: Vec<dominance::Exhausted>,
    /// Bumped whenever the saved graph improves.
    save_gen: u64,
    /// Answer from the memo (off only to check that it changes nothing).
    on: bool,
    /// `futile`'s static and per-state facts: whether a pattern's amounts at some speeds are
    /// exact, whether a state is, and the channel bound of a prospect from a state.
    amounts: rustc_hash::FxHashMap<(u8, u32, u32), Option<bool>>,
    exact: rustc_hash::FxHashMap<(u128, bool), bool>,
    bounds: rustc_hash::FxHashMap<BoundKey, i64>,
}

/// A channel bound's key: the state hash, the pattern, both speeds (bits) and maxChannels.
type BoundKey = (u128, u8, u32, u32, i32);

impl Memo {
    /// Account for an entry of weight `w` changing from `old` to `new` in the state hash.
    fn account(&mut self, w: u128, old: u64, new: u64) {
        let d = (new as u128).wrapping_sub(old as u128);
        self.state = self.state.wrapping_add(w.wrapping_mul(d));
    }
}

const TAG_LINK: u64 = 1;
const TAG_NET: u64 = 2;
const TAG_USED: u64 = 3;

/// A random odd 128-bit multiplier for one array entry. The state hash is
/// `sum(weight(entry) * value)` mod 2^128 (a universal hash of the value vector: two different
/// vectors collide with probability below 2^-96), updated with one multiplication per change.
fn weight(tag: u64, index: usize) -> u128 {
    let k = mix64((tag << 48) ^ index as u64);
    let a = mix64(k ^ 0x243f_6a88_85a3_08d3);
    let b = mix64(k.wrapping_add(0x1319_8a2e_0370_7344));
    (((a as u128) << 64) | b as u128) | 1
}

/// splitmix64's finalizer.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fold one more value into a 128-bit key.
fn fold(k: u128, x: u64) -> u128 {
    const M: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835;
    let k = (k ^ x as u128).wrapping_mul(M);
    k ^ (k >> 71)
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
    /// Recursion steps NCCL takes for the same search (what its budgets count).
    pub steps: u64,
    /// Recursion steps this search actually walked (the rest were answered by [`Memo`]).
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

    /// `followPath`: charge `bw` on the first `max_steps` links of a path; returns how many links
    /// it could charge.
    fn follow_links(&mut self, p: PInfo, max_steps: usize, bw: f32) -> usize {
        let pci_bw = if p.intel_phb { bw * 6.0 / 5.0 } else { bw };
        let first = p.first as usize;
        for step in 0..max_steps {
            let l = self.table_links[first + step];
            let fw = if l.pci { pci_bw } else { bw };
            let mut rev_bw = 0.0f32;
            if l.eighth {
                rev_bw += fw / 8.0;
            }
            if l.power {
                rev_bw += fw;
            }
            let e = l.e as usize;
            let rev_short =
                rev_bw != 0.0 && (l.rev == u32::MAX || self.link_bw[l.rev as usize] < rev_bw);
            if self.link_bw[e] < fw || rev_short {
                return step;
            }
            self.set_link_bw(e, sub_round(self.link_bw[e], fw));
            if rev_bw != 0.0 {
                let r = l.rev as usize;
                self.set_link_bw(r, sub_round(self.link_bw[r], rev_bw));
            }
        }
        max_steps
    }

    fn set_link_bw(&mut self, e: usize, v: f32) {
        let w = self.memo.link_w[e];
        self.memo
            .account(w, self.link_bw[e].to_bits() as u64, v.to_bits() as u64);
        self.link_bw[e] = v;
    }

    /// `ncclTopoFollowPath`: returns whether the destination was reached (bandwidth charged).
    fn follow_path(&mut self, gr: &mut TopoGraph, from: End, to: End, mult: f32) -> bool {
        if from == End::None {
            return true;
        }
        let path = self.pinfo(from, to);
        let is_intra = |e: End| matches!(e, End::Gpu(_) | End::Nvs(_));
        let intra = is_intra(from) && is_intra(to);
        let bw = if intra { gr.bw_intra } else { gr.bw_inter };
        let ty = if intra { gr.type_intra } else { gr.type_inter };
        if path.ty >= PathType::Dis {
            return false;
        }
        if mult == 1.0 && path.ty > ty {
            return false;
        }
        if mult == 1.0 && gr.pattern.is_tree() && self.pinfo(to, from).ty > ty {
            return false;
        }
        let bw = bw * mult;
        let count = path.count as usize;
        let step = self.follow_links(path, count, bw);
        if step < count {
            self.follow_links(path, step, -bw);
            return false;
        }
        gr.n_hops = (gr.n_hops as f32 + mult * count as f32) as i32;
        true
    }

    /// The GPU's PCIe up and down links (for `gpuPciBw`).
    fn pci_edges(&self, g: usize) -> Option<(usize, usize)> {
        let sys = &self.topo.system;
        let dev = sys.gpu_attach(self.gpus[g]);
        for (e, pci, l) in sys.links(dev) {
            if l.ty != LinkType::Pci {
                continue;
            }
            for (e2, back, _) in sys.links(pci) {
                if back == dev {
                    return Some((e.index(), e2.index()));
                }
            }
        }
        None
    }

    /// `gpuPciBw`: the GPU's current PCIe link bandwidth, as an int.
    fn gpu_pci_bw(&self, g: usize) -> i32 {
        match self.gpu_pci[g] {
            Some((a, b)) => self.link_bw[a].min(self.link_bw[b]) as i32,
            None => -1,
        }
    }

    fn net_index(&self, id: i64) -> usize {
        self.net_id
            .iter()
            .position(|&x| x == id)
            .expect("graph NET ids come from this system")
    }
    fn gpu_index(&self, rank: i32) -> usize {
        self.gpu_rank
            .iter()
            .position(|&r| r == rank)
            .expect("graph ranks come from this system")
    }

    /// `ncclTopoSearchNextGpuSort`.
    fn next_gpu_sort(&self, gr: &TopoGraph, g: usize, sort_net: i32) -> GpuList {
        let flag = 1u64 << gr.n_channels;
        let ngpus = self.ngpus;
        if !self.nvs.is_empty() {
            // Behind an NVSwitch only the ring neighbours are kept (in the pattern's order), so
            // the score sort cannot change the answer: only whether each neighbour is a candidate.
            let candidate = |p: usize| {
                p != g
                    && self.pinfo(End::Gpu(g), End::Gpu(p)).count != 0
                    && self.used[p] & flag == 0
            };
            let prev_gpu = (g + ngpus - 1) % ngpus;
            let next_gpu = (g + 1) % ngpus;
            // Moving each to the front in turn leaves the last one first.
            let order: &[usize] = match gr.pattern {
                Pattern::Ring => &[prev_gpu, next_gpu],
                Pattern::SplitTree | Pattern::BalancedTree => &[next_gpu, prev_gpu],
                _ => &[next_gpu],
            };
            let mut out = GpuList::new();
            for &p in order {
                if candidate(p) && !out.contains(&p) {
                    out.push(p);
                }
            }
            return out;
        }
        self.next_gpu_sort_scored(gr, g, sort_net)
    }

    /// `ncclTopoSearchNextGpuSort` without NVSwitch: candidates sorted by their scores.
    fn next_gpu_sort_scored(&self, gr: &TopoGraph, g: usize, sort_net: i32) -> GpuList {
        #[derive(Clone, Copy)]
        struct Score {
            g: usize,
            start_index: i32,
            intra_nhops: i32,
            intra_bw: i32,
            inter_nhops: i32,
            inter_pci_bw: i32,
            inter_bw: i32,
        }
        let flag = 1u64 << gr.n_channels;
        let ngpus = self.ngpus;
        let net = if sort_net != 0 {
            Some(self.net_index(gr.inter[gr.n_channels as usize * 2]))
        } else {
            None
        };
        let mut scores: smallvec::SmallVec<[Score; 16]> = smallvec::SmallVec::new();
        for i in 1..ngpus {
            let p = (g + i) % ngpus;
            let path = self.pinfo(End::Gpu(g), End::Gpu(p));
            if path.count == 0 || self.used[p] & flag != 0 {
                continue;
            }
            let mut s = Score {
                g: p,
                start_index: i as i32,
                intra_nhops: path.count as i32,
                intra_bw: path.bw as i32,
                inter_nhops: 0,
                inter_pci_bw: 0,
                inter_bw: 0,
            };
            if let Some(n) = net {
                let np = self.pinfo(End::Net(n), End::Gpu(p));
                s.inter_nhops = np.count as i32;
                s.inter_pci_bw = self.gpu_pci_bw(p);
                s.inter_bw = np.bw as i32;
            }
            scores.push(s);
        }
        scores.sort_by(|a, b| {
            b.inter_bw
                .cmp(&a.inter_bw)
                .then(b.inter_pci_bw.cmp(&a.inter_pci_bw))
                .then(a.inter_nhops.cmp(&b.inter_nhops))
                .then(b.intra_bw.cmp(&a.intra_bw))
                .then(a.intra_nhops.cmp(&b.intra_nhops))
                .then(a.start_index.cmp(&b.start_index))
        });
        let same_intra = scores
            .iter()
            .all(|s| s.intra_bw == scores[0].intra_bw && s.intra_nhops == scores[0].intra_nhops);
        let next: GpuList = if sort_net == -1 && same_intra {
            scores.iter().rev().map(|s| s.g).collect()
        } else {
            scores.iter().map(|s| s.g).collect()
        };
        next
    }

    #[cfg(test)]
    fn next_gpu_sort_nvs_reference(&self, gr: &TopoGraph, g: usize, sort_net: i32) -> Vec<usize> {
        let mut next: Vec<usize> = self.next_gpu_sort_scored(gr, g, sort_net).to_vec();
        let ngpus = self.ngpus;
        {
            let prev_gpu = (g + ngpus - 1) % ngpus;
            let next_gpu = (g + 1) % ngpus;
            let mut first: Vec<usize> = match gr.pattern {
                Pattern::Ring => vec![next_gpu, prev_gpu],
                Pattern::SplitTree | Pattern::BalancedTree => vec![prev_gpu, next_gpu],
                _ => vec![next_gpu],
            };
            if next_gpu == prev_gpu && first.len() == 2 {
                first.truncate(1);
            }
            let mut real = 0;
            for f in first {
                if let Some(i) = next.iter().position(|&x| x == f) {
                    next.remove(i);
                    next.insert(0, f);
                    real += 1;
                }
            }
            next.truncate(real);
        }
        next
    }

    /// `ncclTopoReplayGetGpu`.
    fn replay_get_gpu(&self, gr: &TopoGraph, step: i32) -> usize {
        let ngpus = self.ngpus;
        let idx = (gr.n_channels as usize - 1) * ngpus + (step + 1) as usize;
        self.gpu_index(gr.intra[idx])
    }

    #[allow(clippy::too_many_arguments)]
    fn try_gpu(
        &mut self,
        gr: &mut TopoGraph,
        save: &mut TopoGraph,
        step: i32,
        back_to_net: i32,
        back_to_first_rank: i32,
        forced: i32,
        time: &mut i32,
        from: End,
        g: usize,
    ) {
        let flag = 1u64 << gr.n_channels;
        if self.follow_path(gr, from, End::Gpu(g), 1.0) {
            self.toggle_used(g, flag);
            self.rec_gpu(
                gr,
                save,
                Some(g),
                step,
                back_to_net,
                back_to_first_rank,
                forced,
                time,
            );
            self.toggle_used(g, flag);
            self.follow_path(gr, from, End::Gpu(g), -1.0);
        }
    }

    fn toggle_used(&mut self, g: usize, flag: u64) {
        let (old, v) = (self.used[g], self.used[g] ^ flag);
        let w = self.memo.used_w[g];
        self.memo.account(w, old, v);
        self.used[g] = v;
    }

    /// The key of a recursion subtree: the hashed residual state plus every argument and graph
    /// entry the subtree reads. The order of the current channel's GPUs is only read back when a
    /// later channel can replay it (intra-node searches always try a replay first; inter-node
    /// ones when `sameChannels` is set); the previous channel's order while replaying it; the
    /// channel heads by the NVLS/CollNet duplicate checks; the NETs of this and the previous
    /// channel by the NET checks.
    #[allow(clippy::too_many_arguments)]
    fn memo_key(
        &self,
        gr: &TopoGraph,
        gpu: Option<usize>,
        step: i32,
        back_to_net: i32,
        back_to_first_rank: i32,
        forced: i32,
    ) -> u128 {
        let ngpus = self.ngpus;
        let c = gr.n_channels as usize;
        let mut k = self.memo.state;
        k = fold(k, gpu.map_or(u64::MAX, |g| g as u64));
        k = fold(k, step as u32 as u64 | (back_to_net as u32 as u64) << 32);
        k = fold(
            k,
            back_to_first_rank as u32 as u64 | (forced as u32 as u64) << 32,
        );
        k = fold(k, c as u64 | (gr.n_hops as u32 as u64) << 32);
        k = fold(
            k,
            gr.bw_inter.to_bits() as u64 | (gr.bw_intra.to_bits() as u64) << 32,
        );
        if self.inter {
            // The entry NET is set before step 0; the exit NET once the channel went back to the
            // network (until then the slot holds a stale value that is never read).
            k = fold(k, gr.inter[2 * c] as u64);
            if back_to_net != self.params(gr.pattern).0 {
                k = fold(k, gr.inter[2 * c + 1] as u64);
            }
            // crossNic=2 rings pair each odd channel with the NETs of the channel before.
            if c > 0 && gr.cross_nic == 2 {
                k = fold(k, gr.inter[2 * c - 2] as u64);
                k = fold(k, gr.inter[2 * c - 1] as u64);
            }
        }
        let base = c * ngpus;
        let written = (step.max(0) as usize).min(ngpus);
        let replay = !self.inter || gr.same_channels == 1;
        let upto = if replay { written } else { written.min(1) };
        for i in 0..upto {
            k = fold(k, gr.intra[base + i] as u32 as u64);
        }
        if forced == FORCED_ORDER_REPLAY && c > 0 {
            for i in 0..ngpus {
                k = fold(k, gr.intra[base - ngpus + i] as u32 as u64);
            }
        }
        if matches!(gr.pattern, Pattern::Nvls | Pattern::CollnetDirect) {
            for ch in 0..c {
                k = fold(k, gr.intra[ch * ngpus] as u32 as u64);
            }
        }
        k
    }

    /// Charge the paths `ends(d)` for d = 0, 1, ... ngpus-1 with `mult(d)`, stopping at the
    /// first that does not fit; returns how many were charged and whether all were.
    fn charge_each(
        &mut self,
        gr: &mut TopoGraph,
        ends: impl Fn(usize) -> (End, End),
        mult: impl Fn(usize) -> f32,
    ) -> (usize, bool) {
        for d in 0..self.ngpus {
            let (a, b) = ends(d);
            if !self.follow_path(gr, a, b, mult(d)) {
                return (d, false);
            }
        }
        (self.ngpus, true)
    }

    /// Undo the first `n` charges of [`Self::charge_each`], last first.
    fn uncharge_each(
        &mut self,
        gr: &mut TopoGraph,
        n: usize,
        ends: impl Fn(usize) -> (End, End),
        mult: impl Fn(usize) -> f32,
    ) {
        for d in (0..n).rev() {
            let (a, b) = ends(d);
            self.follow_path(gr, a, b, -mult(d));
        }
    }

    /// `ncclTopoSearchTryCollnetDirect`: head `g` all-to-all with every GPU at bw/(nGPUs-1).
    fn try_collnet_direct(
        &mut self,
        gr: &mut TopoGraph,
        save: &mut TopoGraph,
        g: usize,
        time: &mut i32,
    ) {
        let ngpus = self.ngpus;
        let mul = 1.0 / (ngpus as f32 - 1.0);
        let fwd = |d: usize| (End::Gpu(g), End::Gpu(d));
        let bwd = |d: usize| (End::Gpu(d), End::Gpu(g));
        let (nf, ok) = self.charge_each(gr, fwd, |_| mul);
        if ok {
            let (nb, ok) = self.charge_each(gr, bwd, |_| mul);
            if ok {
                let mut step = 1;
                for index in 0..ngpus {
                    if index != g {
                        gr.intra[gr.n_channels as usize * ngpus + step] = self.gpu_rank[index];
                        step += 1;
                    }
                }
                self.rec_gpu(gr, save, None, ngpus as i32, -1, -1, 0, time);
            }
            self.uncharge_each(gr, nb, bwd, |_| mul);
        }
        self.uncharge_each(gr, nf, fwd, |_| mul);
    }

    /// `ncclTopoSearchTryNvls`: NVSwitch to every GPU and back, twice the bandwidth for head `g`.
    fn try_nvls(&mut self, gr: &mut TopoGraph, save: &mut TopoGraph, g: usize, time: &mut i32) {
        let ngpus = self.ngpus;
        let mult = |d: usize| if d == g { 2.0 } else { 1.0 };
        let down = |d: usize| (End::Nvs(0), End::Gpu(d));
        let up = |d: usize| (End::Gpu(d), End::Nvs(0));
        let (n0, ok) = self.charge_each(gr, down, mult);
        if ok {
            let (n1, ok) = self.charge_each(gr, up, mult);
            if ok {
                self.rec_gpu(gr, save, None, ngpus as i32, -1, -1, 0, time);
            }
            self.uncharge_each(gr, n1, up, mult);
        }
        self.uncharge_each(gr, n0, down, mult);
    }

    /// `ncclTopoCompareGraphs`: whether `gr` should replace `refg`.
    fn better(&self, gr: &TopoGraph, refg: &TopoGraph) -> bool {
        if gr.n_channels < gr.min_channels {
            return false;
        }
        if gr.pattern == Pattern::Nvls {
            let more = gr.n_channels > refg.n_channels && gr.n_channels as usize <= self.ngpus;
            let faster =
                gr.n_channels as f32 * gr.bw_inter > refg.n_channels as f32 * refg.bw_inter;
            return more || faster;
        }
        let a = gr.n_channels as f32 * gr.bw_intra;
        let b = refg.n_channels as f32 * refg.bw_intra;
        if a > b {
            return true;
        }
        if a < b {
            return false;
        }
        gr.pattern == refg.pattern && gr.cross_nic == refg.cross_nic && gr.n_hops < refg.n_hops
    }

    /// [`Self::select_nets_uncached`], memoized: the answer only depends on the static topology.
    fn select_nets(&mut self, type_inter: i32, gpu: Option<usize>) -> std::rc::Rc<[usize]> {
        let key = ((type_inter + 1) as usize) * (self.ngpus + 1) + gpu.map_or(0, |g| g + 1);
        if key >= self.nets_cache.len() {
            self.nets_cache.resize(key + 1, None);
        }
        if let Some(v) = &self.nets_cache[key] {
            return v.clone();
        }
        let v: std::rc::Rc<[usize]> = self.select_nets_uncached(type_inter, gpu).into();
        self.nets_cache[key] = Some(v.clone());
        v
    }

    /// `ncclTopoPrefNetsChannelFirst` + `ncclTopoSelectNets`.
    fn select_nets_uncached(&self, type_inter: i32, gpu: Option<usize>) -> Vec<usize> {
        let mut nets: Vec<usize> = Vec::new();
        let push = |nets: &mut Vec<usize>, n: usize| {
            if !nets.contains(&n) {
                nets.push(n);
            }
        };
        for g in 0..self.ngpus {
            if gpu.is_some_and(|x| x != g) {
                continue;
            }
            for n in self.topo.local_net_cycle(g) {
                push(&mut nets, n);
            }
        }
        let mut max_dev = match self.topo.settings.netdevs_policy {
            NetDevsPolicy::Max(m) => m as usize,
            _ => NCCL_TOPO_MAX_NODES,
        };
        if gpu.is_none() {
            if let NetDevsPolicy::Max(_) = self.topo.settings.netdevs_policy {
                max_dev *= self.ngpus;
            }
        }
        if nets.len() >= max_dev {
            return nets;
        }
        for t in 0..=type_inter {
            for g in 0..self.ngpus {
                if gpu.is_some_and(|x| x != g) {
                    continue;
                }
                for n in 0..self.nets.len().min(self.version.max_channels()) {
                    if self.path(End::Gpu(g), End::Net(n)).ty as i32 == t {
                        push(&mut nets, n);
                        if nets.len() >= max_dev {
                            return nets;
                        }
                    }
                }
            }
        }
        nets
    }

    /// `ncclTopoSearchCheckNet`.
    fn check_net(&self, gr: &TopoGraph, start: usize, n: usize, step: i32) -> bool {
        const UNDEF: i32 = -1;
        let (p, ps) = (self.net_plane[n], self.net_plane[start]);
        if p != UNDEF && ps != UNDEF && p != ps {
            return false;
        }
        if gr.pattern == Pattern::Tree && self.net_id[n] != self.net_id[start] {
            return false;
        }
        if gr.pattern == Pattern::Ring && gr.cross_nic == 2 {
            if gr.n_channels & 1 == 1
                && self.net_id[n] != gr.inter[(gr.n_channels as usize - 1) * 2]
            {
                return false;
            }
        } else if gr.cross_nic == 0 {
            let (r, rs) = (self.net_rail[n], self.net_rail[start]);
            if r != UNDEF && rs != UNDEF {
                if r != rs {
                    return false;
                }
            } else if self.net_asic[n] != self.net_asic[start]
                || self.net_port[n] != self.net_port[start]
            {
                return false;
            }
        }
        if gr.pattern == Pattern::BalancedTree
            && step != 0
            && self.net_id[n] != gr.inter[gr.n_channels as usize * 2 + 1]
        {
            return false;
        }
        true
    }

    /// `ncclTopoSearchRecGpu`, answered from the [`Memo`] when this subtree was walked before.
    #[allow(clippy::too_many_arguments)]
    fn rec_gpu(
        &mut self,
        gr: &mut TopoGraph,
        save: &mut TopoGraph,
        gpu: Option<usize>,
        step: i32,
        back_to_net: i32,
        back_to_first_rank: i32,
        forced: i32,
        time: &mut i32,
    ) {
        if *time <= 0 {
            return;
        }
        let key = self.memo_key(gr, gpu, step, back_to_net, back_to_first_rank, forced);
        if let Some(&(consumed, steps)) = self.memo.table.get(&key).filter(|_| self.memo.on) {
            if *time > consumed {
                *time -= consumed;
                self.steps += steps;
            } else {
                // The walk would run out of budget inside this subtree, finding nothing.
                self.steps += *time as u64;
                *time = 0;
            }
            return;
        }
        let (time0, steps0, gen0) = (*time, self.steps, self.memo.save_gen);
        self.walk_gpu(
            gr,
            save,
            gpu,
            step,
            back_to_net,
            back_to_first_rank,
            forced,
            time,
        );
        // Only a subtree that finished inside its budget without improving `save` is reusable.
        if *time > 0 && self.memo.save_gen == gen0 {
            self.memo
                .table
                .insert(key, (time0 - *time, self.steps - steps0));
        }
    }

    /// The body of `ncclTopoSearchRecGpu`: one recursion step.
    #[allow(clippy::too_many_arguments)]
    fn walk_gpu(
        &mut self,
        gr: &mut TopoGraph,
        save: &mut TopoGraph,
        gpu: Option<usize>,
        step: i32,
        back_to_net: i32,
        back_to_first_rank: i32,
        forced: i32,
        time: &mut i32,
    ) {
        *time -= 1;
        self.steps += 1;
        self.walked += 1;
        let ngpus = self.ngpus;
        if step as usize == ngpus {
            gr.n_channels += 1;
            if self.better(gr, save) {
                *save = gr.clone();
                self.memo.save_gen += 1;
                self.memo.table.clear();
                if gr.n_channels == gr.max_channels {
                    *time = -1;
                } else if self
                    .outlook
                    .as_ref()
                    .is_some_and(|o| self.hopeless(o, save))
                {
                    // Nothing the rest of this pass can find beats it: stop here.
                    self.abandoned = true;
                    *time = 0;
                }
            }
            if gr.n_channels < gr.max_channels {
                self.rec(gr, save, time);
            }
            gr.n_channels -= 1;
            return;
        }
        let g = gpu.expect("a GPU is given below the last step");
        gr.intra[gr.n_channels as usize * ngpus + step as usize] = self.gpu_rank[g];
        if step == back_to_net {
            if self.inter {
                let start = self.net_index(gr.inter[gr.n_channels as usize * 2]);
                let nets = self.select_nets(gr.type_inter as i32, Some(g));
                for &n in nets.iter() {
                    if !self.check_net(gr, start, n, step) {
                        continue;
                    }
                    let mut next_back_to_net = -1;
                    let save_bw = gr.bw_inter;
                    if gr.pattern == Pattern::BalancedTree {
                        if step == 0 {
                            next_back_to_net = 1;
                        }
                        gr.bw_inter /= 2.0;
                    }
                    let ok = self.follow_path(gr, End::Gpu(g), End::Net(n), 1.0);
                    gr.bw_inter = save_bw;
                    if ok {
                        gr.inter[gr.n_channels as usize * 2 + 1] = self.net_id[n];
                        self.rec_gpu(
                            gr,
                            save,
                            Some(g),
                            step,
                            next_back_to_net,
                            back_to_first_rank,
                            forced,
                            time,
                        );
                        if gr.pattern == Pattern::BalancedTree {
                            gr.bw_inter /= 2.0;
                        }
                        self.follow_path(gr, End::Gpu(g), End::Net(n), -1.0);
                        gr.bw_inter = save_bw;
                    }
                }
            }
        } else if gr.pattern == Pattern::Nvls {
            self.try_nvls(gr, save, g, time);
        } else if gr.pattern == Pattern::CollnetDirect {
            self.try_collnet_direct(gr, save, g, time);
        } else if (step as usize) < ngpus - 1 {
            let next: GpuList = if forced == FORCED_ORDER_PCI {
                smallvec::smallvec![step as usize + 1]
            } else if forced == FORCED_ORDER_REPLAY {
                smallvec::smallvec![self.replay_get_gpu(gr, step)]
            } else {
                let sort_net = if back_to_net == -1 {
                    0
                } else if back_to_net == step + 1 {
                    1
                } else {
                    -1
                };
                self.next_gpu_sort(gr, g, sort_net)
            };
            for &p in next.iter() {
                self.try_gpu(
                    gr,
                    save,
                    step + 1,
                    back_to_net,
                    back_to_first_rank,
                    forced,
                    time,
                    End::Gpu(g),
                    p,
                );
            }
        } else if step == back_to_first_rank {
            let p = self.gpu_index(gr.intra[gr.n_channels as usize * ngpus]);
            if self.follow_path(gr, End::Gpu(g), End::Gpu(p), 1.0) {
                self.rec_gpu(gr, save, Some(p), step + 1, back_to_net, -1, forced, time);
                self.follow_path(gr, End::Gpu(g), End::Gpu(p), -1.0);
            }
        } else {
            self.rec_gpu(gr, save, Some(g), ngpus as i32, -1, -1, forced, time);
        }
    }

    fn rec_net(
        &mut self,
        gr: &mut TopoGraph,
        save: &mut TopoGraph,
        back_to_net: i32,
        back_to_first_rank: i32,
        time: &mut i32,
    ) {
        let bw = gr.bw_inter as i32;
        let bwf = bw as f32;
        let nets = self.select_nets(gr.type_inter as i32, None);
        let count = nets.len();
        let mut found = false;
        for i in 0..count {
            if matches!(gr.pattern, Pattern::Nvls | Pattern::CollnetDirect) && found {
                break;
            }
            let n = nets[(gr.n_channels as usize + i) % count];
            if gr.coll_net && !self.net_coll[n] {
                continue;
            }
            if self.net_bw[n] < bwf {
                continue;
            }
            if gr.pattern == Pattern::Ring
                && gr.cross_nic == 2
                && gr.n_channels & 1 == 1
                && self.net_id[n] != gr.inter[(gr.n_channels as usize - 1) * 2 + 1]
            {
                continue;
            }
            gr.inter[gr.n_channels as usize * 2] = self.net_id[n];
            gr.latency_inter = self.net_latency[n];
            self.charge_port(n, -bwf);

            if matches!(gr.pattern, Pattern::Nvls | Pattern::CollnetDirect) {
                if (gr.n_channels as usize) < count {
                    let local = self.topo.net_local_gpu.get(n).copied().unwrap_or(-1);
                    if local != -1 {
                        let head = self.gpu_rank[local as usize];
                        let dup =
                            (0..gr.n_channels as usize).any(|c| gr.intra[c * self.ngpus] == head);
                        if !dup {
                            self.try_gpu(
                                gr,
                                save,
                                0,
                                back_to_net,
                                back_to_first_rank,
                                0,
                                time,
                                End::Net(n),
                                local as usize,
                            );
                            found = true;
                        }
                    }
                }
            } else if gr.n_channels > 0 && gr.same_channels == 1 {
                let g = self.replay_get_gpu(gr, -1);
                self.try_gpu(
                    gr,
                    save,
                    0,
                    back_to_net,
                    back_to_first_rank,
                    FORCED_ORDER_REPLAY,
                    time,
                    End::Net(n),
                    g,
                );
            } else {
                if gr.n_channels == 0 && self.nvs.is_empty() && !self.abandoned {
                    let mut t = 1 << 10;
                    self.try_gpu(
                        gr,
                        save,
                        0,
                        back_to_net,
                        back_to_first_rank,
                        FORCED_ORDER_PCI,
                        &mut t,
                        End::Net(n),
                        0,
                    );
                    if t == -1 {
                        *time = -1;
                    }
                }
                let local = self.topo.net_local_gpu.get(n).copied().unwrap_or(-1);
                if local != -1 {
                    self.try_gpu(
                        gr,
                        save,
                        0,
                        back_to_net,
                        back_to_first_rank,
                        0,
                        time,
                        End::Net(n),
                        local as usize,
                    );
                }
                let locals = self.net_locals[n].clone();
                let path_ty = locals
                    .first()
                    .map(|&g| self.path(End::Net(n), End::Gpu(g)).ty)
                    .unwrap_or(PathType::Dis);
                if path_ty == PathType::Dis {
                    // NCCL `continue`s here without giving the port its bandwidth back.
                    continue;
                }
                for &g in locals.iter() {
                    if g as i32 == local {
                        continue;
                    }
                    self.try_gpu(
                        gr,
                        save,
                        0,
                        back_to_net,
                        back_to_first_rank,
                        0,
                        time,
                        End::Net(n),
                        g,
                    );
                }
            }
            self.charge_port(n, bwf);
        }
    }

    /// Add `delta` to every NET on the same ASIC and port as NET `n`.
    fn charge_port(&mut self, n: usize, delta: f32) {
        let (asic, port) = (self.net_asic[n], self.net_port[n]);
        for i in 0..self.nets.len() {
            if self.net_asic[i] == asic && self.net_port[i] == port {
                let v = self.net_bw[i] + delta;
                let w = self.memo.net_w[i];
                self.memo
                    .account(w, self.net_bw[i].to_bits() as u64, v.to_bits() as u64);
                self.net_bw[i] = v;
            }
        }
    }

    /// One search attempt: `ncclTopoSearchRec` from the top with a fresh budget `time`.
    ///
    /// Relaxing a path type that no path of this node has (say PXB on a box whose NICs are all
    /// PIX or PXN from the GPUs) does not change a single decision of the recursion, so NCCL
    /// walks the same tree again; such an attempt is answered from the memo of attempts that ran
    /// without improving `graph`, keyed by what the recursion can observe.
    fn attempt(&mut self, tmp: &mut TopoGraph, graph: &mut TopoGraph, time: &mut i32) {
        let mut k = self.memo.state;
        for x in [
            tmp.pattern.number() as u64,
            tmp.same_channels as u32 as u64,
            tmp.cross_nic as u32 as u64,
            tmp.coll_net as u64,
            self.effective_type(&self.types_intra, tmp.type_intra),
            self.effective_type(&self.types_inter, tmp.type_inter),
            tmp.bw_intra.to_bits() as u64 | (tmp.bw_inter.to_bits() as u64) << 32,
            tmp.min_channels as u32 as u64 | (tmp.max_channels as u32 as u64) << 32,
            tmp.n_hops as u32 as u64 | (*time as u32 as u64) << 32,
            self.memo.save_gen,
        ] {
            k = fold(k, x);
        }
        let (start, budget) = (self.memo.state, *time);
        if let Some(&(t, steps)) = self.memo.attempts.get(&k).filter(|_| self.memo.on) {
            *time = t;
            self.steps += steps;
        } else if self.memo.on && self.dominated(tmp, graph, *time) {
            // Contains the tree of an attempt that ran out of budget and cannot improve
            // `graph` (see `dominance`): it runs out of budget too, finding nothing. Without an
            // NVSwitch the first channel also tries each NET's PCI order on a budget of its own,
            // which NCCL walks whatever is left of the attempt's: walk those alone (a budget of
            // 0 skips everything else) for NCCL's step count.
            self.steps += *time as u64;
            *time = 0;
            if self.inter && self.nvs.is_empty() {
                self.memo.table.clear();
                let mut none = 0;
                self.rec(tmp, graph, &mut none);
            }
        } else {
            self.memo.table.clear();
            let (gen0, steps0) = (self.memo.save_gen, self.steps);
            self.rec(tmp, graph, time);
            if self.memo.save_gen == gen0 && *time != -1 {
                self.memo.attempts.insert(k, (*time, self.steps - steps0));
            }
        }
        if *time == 0 && !self.abandoned {
            let e = dominance::Exhausted::new(tmp, budget, start);
            self.memo.exhausted.push(e);
        }
    }

    /// The largest path type in `types` (sorted) that a threshold `t` admits: thresholds with
    /// the same answer admit exactly the same paths.
    fn effective_type(&self, types: &[PathType], t: PathType) -> u64 {
        types
            .iter()
            .rev()
            .find(|&&x| x <= t)
            .map_or(u64::MAX, |&x| x as u64)
    }

    /// `ncclTopoSearchParams`.
    fn params(&self, pattern: Pattern) -> (i32, i32) {
        let n = self.ngpus as i32;
        if self.inter {
            let btn = match pattern {
                Pattern::Ring => n - 1,
                Pattern::SplitTree => 1,
                _ => 0,
            };
            (btn, -1)
        } else {
            (-1, if pattern == Pattern::Ring { n - 1 } else { -1 })
        }
    }

    /// `ncclTopoSearchRec`.
    fn rec(&mut self, gr: &mut TopoGraph, save: &mut TopoGraph, time: &mut i32) {
        let (btn, btfr) = self.params(gr.pattern);
        if self.inter {
            self.rec_net(gr, save, btn, btfr, time);
            return;
        }
        if gr.pattern == Pattern::Nvls {
            let g = gr.n_channels as usize;
            self.try_gpu(gr, save, 0, btn, btfr, 0, time, End::None, g);
            return;
        }
        if gr.n_channels == 0 {
            self.try_gpu(gr, save, 0, btn, btfr, FORCED_ORDER_PCI, time, End::None, 0);
        } else {
            let g = self.replay_get_gpu(gr, -1);
            self.try_gpu(
                gr,
                save,
                0,
                btn,
                btfr,
                FORCED_ORDER_REPLAY,
                time,
                End::None,
                g,
            );
        }
        if gr.same_channels == 0 || gr.n_channels == 0 {
            for g in 0..self.ngpus {
                self.try_gpu(gr, save, 0, btn, btfr, 0, time, End::None, g);
            }
        }
    }

    /// `ncclTopoSplitNvLink`: two NVLink domains.
    fn split_nvlink(&self) -> bool {
        let n = self.ngpus;
        let mut dom: Vec<usize> = (0..n).collect();
        for g in 0..n {
            let d = dom[g];
            for (p, dp) in dom.iter_mut().enumerate().skip(g + 1) {
                if self.path(End::Gpu(g), End::Gpu(p)).ty == PathType::Nvl {
                    *dp = d;
                }
            }
        }
        let mut cnt = vec![0; n];
        for &d in &dom {
            cnt[d] += 1;
        }
        cnt.iter().filter(|&&c| c > 1).count() == 2
    }

    /// `ncclTopoDupChannels`.
    fn dup_channels(gr: &mut TopoGraph, cc_min: i32, ngpus: usize) {
        if gr.n_channels == 0 || gr.pattern == Pattern::Nvls || gr.bw_intra < 25.0 {
            return;
        }
        if cc_min > 80 && gr.bw_intra < 50.0 && gr.n_channels > 4 {
            return;
        }
        let n = gr.n_channels as usize;
        let dup = (2 * gr.n_channels).min(gr.max_channels) as usize;
        for i in 0..(dup - n) * ngpus {
            gr.intra[n * ngpus + i] = gr.intra[i];
        }
        for i in 0..(dup - n) * 2 {
            gr.inter[n * 2 + i] = gr.inter[i];
        }
        let div = dup.div_ceil(n) as f32;
        gr.bw_intra /= div;
        gr.bw_inter /= div;
        gr.n_channels = dup as i32;
    }

    /// `ncclTopoCompute`: search `graph` (its id, pattern, min/max channels and collNet set by
    /// the caller). `loaded` is the graph from `NCCL_GRAPH_FILE` for this id, if any.
    pub fn compute(&mut self, graph: &mut TopoGraph, loaded: Option<&TopoGraph>) {
        // A new graph to improve: nothing remembered applies to it.
        self.memo.save_gen += 1;
        self.memo.attempts.clear();
        self.memo.exhausted.clear();
        let ngpus = self.ngpus;
        let topo = self.topo;
        let sys = &topo.system;
        let cc_min = sys.comp_cap().map(|c| c.0).unwrap_or(0);
        let ndevs = if self.version.has_dev_nodes() {
            sys.count(NodeKind::Dev)
        } else {
            ngpus
        };
        let nnets = self.nets.len();
        let cross_nic = if nnets > 1
            && matches!(
                graph.pattern,
                Pattern::Ring | Pattern::BalancedTree | Pattern::SplitTree
            ) {
            self.cross_nic_param
        } else {
            0
        };
        graph.cross_nic = if cross_nic == 1 { 1 } else { 0 };
        graph.bw_intra = 0.0;
        graph.bw_inter = 0.0;
        graph.latency_inter = 0.0;
        let (mut min_intra, mut max_intra) = (PathType::Loc, PathType::Sys);
        let (mut min_inter, mut max_inter) = (PathType::Pix, PathType::Sys);
        if ngpus > 1 {
            (min_intra, max_intra) = self.topo.gpu_path_range(NodeKind::Gpu);
        }
        if self.inter {
            (min_inter, max_inter) = self.topo.gpu_path_range(NodeKind::Net);
            max_intra = max_inter;
        }
        if cc_min < 90 {
            max_inter = PathType::Sys;
        }
        graph.type_intra = min_intra;
        graph.type_inter = min_inter;
        graph.n_channels = 0;
        let try_same = if graph.pattern == Pattern::Nvls { 0 } else { 1 };
        graph.same_channels = try_same;
        let (cpu_arch_v, cpu_vendor_v, _) = self.cpu;

        if let Some(l) = loaded {
            if !(self.cross_nic_param == 0 && l.cross_nic == 1) {
                *graph = TopoGraph {
                    id: graph.id,
                    min_channels: graph.min_channels,
                    max_channels: graph.max_channels,
                    coll_net: graph.coll_net,
                    ..l.clone()
                };
            }
            self.notes.push(format!(
                "Search {} : {} channels loaded from XML graph",
                graph.id, l.n_channels
            ));
            if graph.n_channels > 0 {
                return;
            }
        }

        if graph.pattern == Pattern::Nvls && (self.nvs.is_empty() || cc_min < 90) {
            return;
        }
        if graph.pattern == Pattern::Nvls {
            graph.max_channels = NCCL_MAX_NVLS_ARITY.min(ngpus as i32);
        }
        if graph.pattern == Pattern::CollnetDirect {
            graph.max_channels = (NCCL_MAX_DIRECT_ARITY + 1).min(ngpus as i32);
        }
        if ngpus == 1 && graph.pattern != Pattern::Ring {
            graph.pattern = Pattern::Tree;
        }
        if !self.inter && graph.pattern == Pattern::Nvls {
            graph.min_channels = graph.max_channels;
        }
        if graph.pattern == Pattern::Ring
            && self.split_nvlink()
            && graph.max_channels >= 2
            && graph.min_channels == 1
        {
            graph.min_channels = 2;
        }

        // Full-size working arrays, as NCCL's fixed arrays.
        graph.intra = vec![0; MAXCHANNELS * ngpus.max(1)];
        graph.inter = vec![0; MAXCHANNELS * 2];
        self.used = vec![0; ngpus];
        let mut tmp = graph.clone();

        let (intra_arr, inter_arr) = speed_arrays(cc_min, self.version);
        let speeds = if self.inter { inter_arr } else { intra_arr };
        let nspeeds = speeds.len();
        let mut pass = 1;
        let mut speed_index = 0;
        let max_bw = self.topo.max_bw;
        let mut total_bw = self.topo.total_bw;
        if ndevs > 1 && graph.pattern != Pattern::Ring {
            total_bw *= ndevs as f32 / (ndevs as f32 - 1.0);
        }
        while (speeds[speed_index] > max_bw
            || speeds[speed_index] * graph.min_channels as f32 > total_bw)
            && speed_index < nspeeds - 1
        {
            speed_index += 1;
        }
        tmp.bw_intra = speeds[speed_index];
        tmp.bw_inter = speeds[speed_index];
        let mut global_timeout = if self.version.at_least(2, 19) {
            GLOBAL_TIMEOUT
        } else {
            GLOBAL_TIMEOUT_2_18
        };

        let mut time;
        loop {
            // What this pass can still find: when nothing beats the saved graph, the pass ends
            // with it whatever the budgets say (see `futile`).
            self.outlook = if self.end_hopeless {
                let at = futile::LoopState {
                    pass,
                    speeds: &speeds,
                    speed_index,
                    cc_min,
                };
                self.outlook(&tmp, graph, &at)
            } else {
                None
            };
            let hopeless = self
                .outlook
                .as_ref()
                .is_some_and(|o| self.hopeless(o, graph));
            let (mut done, mut abandoned) = (hopeless, false);
            time = -1;
            if !hopeless {
                // search:
                time = if tmp.same_channels != 0 {
                    TIMEOUT_SAMECHANNELS
                } else if tmp.pattern == Pattern::Tree {
                    TIMEOUT_TREE
                } else {
                    TIMEOUT
                };
                tmp.n_channels = 0;
                global_timeout -= time as i64;
                self.attempt(&mut tmp, graph, &mut time);
                abandoned = std::mem::take(&mut self.abandoned);
                done = abandoned
                    || time == -1
                    || graph.n_channels as f32 * graph.bw_inter >= self.topo.total_bw;
            }
            self.outlook = None;
            if pass == 2 && (hopeless || abandoned) {
                break;
            }
            if !done && pass == 1 {
                if tmp.same_channels == 1
                    && !(cpu_arch_v == cpu_arch::X86
                        && cpu_vendor_v == cpu_vendor::AMD
                        && tmp.type_intra == PathType::Sys)
                {
                    tmp.same_channels = 0;
                    continue;
                }
                tmp.same_channels = try_same;
                if time != -1 {
                    global_timeout += time as i64;
                } else {
                    global_timeout = GLOBAL_TIMEOUT;
                }
                // Out of global budget with a solution: go to done. Otherwise relax one constraint.
                if !(global_timeout < 0 && graph.n_channels > 0) {
                    if cc_min >= 90 && tmp.pattern == Pattern::BalancedTree {
                        tmp.pattern = Pattern::Tree;
                        continue;
                    }
                    tmp.pattern = graph.pattern;
                    let max_i = if self.inter {
                        tmp.type_inter
                    } else {
                        max_intra
                    };
                    if tmp.type_intra < max_i
                        && (graph.n_channels == 0 || tmp.type_intra < graph.type_intra)
                    {
                        tmp.type_intra = next_type(tmp.type_intra);
                        if tmp.type_intra < PathType::Dis {
                            continue;
                        }
                    }
                    tmp.type_intra = min_intra;
                    if self.inter
                        && tmp.type_inter < max_inter
                        && (graph.n_channels == 0
                            || tmp.type_inter < graph.type_inter
                            || tmp.type_inter < PathType::Pxn)
                    {
                        tmp.type_inter = next_type(tmp.type_inter);
                        if tmp.type_inter < PathType::Dis {
                            continue;
                        }
                    }
                    tmp.type_inter = min_inter;
                    if cross_nic == 2
                        && tmp.cross_nic == 0
                        && matches!(graph.pattern, Pattern::Ring | Pattern::BalancedTree)
                    {
                        tmp.cross_nic = 2;
                        continue;
                    }
                    tmp.cross_nic = if cross_nic == 1 { 1 } else { 0 };
                    if speed_index < nspeeds - 1
                        && (graph.n_channels == 0
                            || speeds[speed_index + 1] / graph.bw_inter > 0.49)
                    {
                        speed_index += 1;
                        tmp.bw_inter = speeds[speed_index];
                        tmp.bw_intra = speeds[speed_index];
                        continue;
                    }
                    speed_index = 0;
                    while speeds[speed_index] > max_bw && speed_index < nspeeds - 1 {
                        speed_index += 1;
                    }
                    tmp.bw_intra = speeds[speed_index];
                    tmp.bw_inter = speeds[speed_index];
                }
            }
            // done:
            if pass == 1 {
                time = -1;
                Self::dup_channels(graph, cc_min, ngpus);
                tmp = graph.clone();
                speed_index = 0;
                while speeds[speed_index] > graph.bw_inter && speed_index < nspeeds - 1 {
                    speed_index += 1;
                }
                tmp.bw_intra = speeds[speed_index];
                tmp.bw_inter = speeds[speed_index];
                tmp.min_channels = graph.n_channels;
                pass = 2;
            }
            #[allow(clippy::collapsible_if)] // NCCL's nesting, kept for comparison
            if pass == 2 {
                if time != 0 && speed_index > 0 {
                    if graph.pattern == Pattern::Ring {
                        speed_index -= 1;
                        tmp.bw_intra = speeds[speed_index];
                        tmp.bw_inter = speeds[speed_index];
                        continue;
                    } else if graph.pattern == Pattern::Nvls
                        && tmp.bw_inter == graph.bw_inter
                        && tmp.bw_inter < tmp.bw_intra * 2.0
                    {
                        tmp.min_channels = graph.n_channels;
                        tmp.max_channels = graph.n_channels;
                        speed_index -= 1;
                        tmp.bw_inter = speeds[speed_index];
                        continue;
                    } else if tmp.bw_intra == graph.bw_intra && tmp.bw_intra < tmp.bw_inter * 2.0 {
                        speed_index -= 1;
                        tmp.bw_intra = speeds[speed_index];
                        continue;
                    }
                }
            }
            break;
        }

        if graph.n_channels == 0 && !graph.coll_net && graph.pattern != Pattern::Nvls {
            self.notes.push(format!(
                "Could not find a path for pattern {}, falling back to simple order",
                graph.pattern.number()
            ));
            for i in 0..ngpus {
                graph.intra[i] = self.gpu_rank[i];
            }
            graph.bw_intra = 0.1;
            graph.type_intra = PathType::Sys;
            let first = self.select_nets(-1, Some(0));
            let last = self.select_nets(-1, Some(ngpus - 1));
            let a = first.first().map(|&n| self.net_id[n]).unwrap_or(-1);
            let b = last.first().map(|&n| self.net_id[n]).unwrap_or(-1);
            if a != -1 && b != -1 {
                graph.inter[0] = a;
                graph.inter[1] = b;
                graph.bw_inter = 0.1;
                graph.type_inter = PathType::Sys;
            } else {
                graph.inter[0] = -1;
                graph.inter[1] = -1;
                graph.bw_inter = 0.0;
                graph.type_inter = PathType::Dis;
            }
            graph.n_channels = 1;
        }
        graph.intra.truncate(graph.n_channels as usize * ngpus);
        graph.inter.truncate(graph.n_channels as usize * 2);
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
    use proptest::prelude::*;

    #[test]
    fn round_half_away_matches_roundf_on_edges() {
        for x in [
            0.0f32,
            -0.0,
            0.3,
            -0.3,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            0.499_999_97,
            -0.499_999_97,
            8_388_607.5,
            -8_388_607.5,
            8_388_608.0,
            1e20,
            -1e20,
            f32::INFINITY,
            f32::NEG_INFINITY,
            239_999.5,
        ] {
            assert_eq!(round_half_away(x).to_bits(), x.round().to_bits(), "{x}");
        }
        assert!(round_half_away(f32::NAN).is_nan());
    }

    proptest! {
        #[test]
        fn round_half_away_matches_roundf(bits in any::<u32>()) {
            let x = f32::from_bits(bits);
            prop_assume!(!x.is_nan());
            prop_assert_eq!(round_half_away(x).to_bits(), x.round().to_bits());
        }

        #[test]
        fn round_half_away_matches_roundf_on_bandwidths(a in 0.0f32..5000.0, b in 0.0f32..500.0) {
            let x = (a - b) * 1000.0;
            prop_assert_eq!(round_half_away(x).to_bits(), x.round().to_bits());
        }
    }

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
