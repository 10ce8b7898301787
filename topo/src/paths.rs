//! NCCL's paths (NCCL 2.30.7 `paths.cc`; the 2.18-2.29 update rule behind the version profile):
//! a breadth-first search from every CPU, DEV, GPU, NET and NVSwitch keeping the bottleneck bandwidth
//! and the path type, then the P2P check (rerouting through the CPU), P2C, PXN and GPUDirect RDMA
//! rules, and `maxBw` / `totalBw` as `ncclTopoSearchInit` computes them.

use crate::consts::{cpu_arch, cpu_vendor, LOC_BW};
use crate::path::{LinkType, PathType};
use crate::settings::{NetDevsPolicy, TopoSettings};
use crate::system::{NodeKind, System};
use petgraph::graph::{EdgeIndex, NodeIndex};

/// One path: the links from a node towards a base node, the bottleneck bandwidth and the type.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    /// Links in order, starting at the node the path belongs to.
    pub links: PathLinks,
    /// Bottleneck bandwidth (GB/s).
    pub bw: f32,
    /// Path type.
    pub ty: PathType,
}

/// A path's links (paths inside a node are short: no allocation up to 12 hops).
pub type PathLinks = smallvec::SmallVec<[EdgeIndex; 12]>;

impl Path {
    fn dis() -> Path {
        Path {
            links: PathLinks::new(),
            bw: 0.0,
            ty: PathType::Dis,
        }
    }
    /// Number of links (`path->count`).
    pub fn count(&self) -> usize {
        self.links.len()
    }
}

/// GPUDirect RDMA mode (`ncclTopoGdrMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum GdrMode {
    /// No GPUDirect RDMA.
    Disabled,
    /// Default mapping.
    Default,
    /// Forced PCIe mapping (C2C platforms, NIC not behind C2C).
    Pci,
}

/// The NETs closest to a GPU and where its channels start in them (`ncclTopoGetLocalNet`).
struct LocalNets {
    nets: Locals,
    first: usize,
    per_gpu: usize,
}

impl LocalNets {
    /// The NET channel `channel` uses.
    fn on(&self, channel: i32) -> usize {
        let net = self.first + channel as usize % self.per_gpu;
        self.nets[net % self.nets.len()]
    }
}

/// The nodes `Topology::get_local` returns (a handful; no allocation).
pub type Locals = smallvec::SmallVec<[usize; 8]>;

/// Paths towards each base kind: `kinds[base kind] = (count of base nodes, paths)`, with the
/// path from node `n` to the `i`-th base node at `n * count + i`.
#[derive(Debug, Clone, Default)]
struct PathTable {
    kinds: [Option<(usize, Vec<Path>)>; 7],
}

impl PathTable {
    /// Paths from `node` to every node of kind `base`.
    fn from(&self, node: NodeIndex, base: NodeKind) -> Option<&[Path]> {
        let (nb, v) = self.kinds[base.idx()].as_ref()?;
        Some(&v[node.index() * nb..(node.index() + 1) * nb])
    }
}

/// What the breadth-first search reads of the graph, in flat arrays: each node's kind and each
/// node's links in NCCL's order (`System::adj`), one after the other, with their far end, type,
/// bandwidth and reverse link.
struct Flat {
    kind: Vec<NodeKind>,
    /// Node `n`'s links are `links[start[n]..start[n + 1]]`.
    start: Vec<usize>,
    links: Vec<FlatLink>,
}

#[derive(Clone, Copy)]
struct FlatLink {
    to: NodeIndex,
    to_kind: NodeKind,
    ty: LinkType,
    bw: f32,
    /// The first link back (`to` -> from, same type) in `to`'s link order (`findRevLink`).
    rev: Option<EdgeIndex>,
}

impl Flat {
    fn new(sys: &System) -> Flat {
        let kind: Vec<NodeKind> = sys.graph.node_weights().map(|n| n.kind).collect();
        // The first link of each (from, to, type) in its node's link order.
        let mut first: std::collections::HashMap<(usize, usize, LinkType), EdgeIndex> =
            Default::default();
        for (n, adj) in sys.adj.iter().enumerate() {
            for &e in adj {
                let (_, to) = sys.graph.edge_endpoints(e).expect("edge of this graph");
                first.entry((n, to.index(), sys.graph[e].ty)).or_insert(e);
            }
        }
        let mut start = Vec::with_capacity(sys.adj.len() + 1);
        let mut links = Vec::new();
        for (n, adj) in sys.adj.iter().enumerate() {
            start.push(links.len());
            for &e in adj {
                let (_, to) = sys.graph.edge_endpoints(e).expect("edge of this graph");
                let ty = sys.graph[e].ty;
                links.push(FlatLink {
                    to,
                    to_kind: kind[to.index()],
                    ty,
                    bw: sys.graph[e].bw,
                    rev: first.get(&(to.index(), n, ty)).copied(),
                });
            }
        }
        start.push(links.len());
        Flat { kind, start, links }
    }

    /// Node `n`'s links in NCCL's order.
    fn links_of(&self, n: NodeIndex) -> &[FlatLink] {
        &self.links[self.start[n.index()]..self.start[n.index() + 1]]
    }
}

/// A system with its paths computed.
#[derive(Debug, Clone)]
pub struct Topology {
    /// The graph.
    pub system: System,
    /// The settings the paths were computed under.
    pub settings: TopoSettings,
    /// The paths, shared by the variants [`Self::with_inter`] makes.
    table: std::sync::Arc<PathTable>,
    /// `system->maxBw`.
    pub max_bw: f32,
    /// `system->totalBw`.
    pub total_bw: f32,
    /// `net.localGpu` per NET (GPU index), -1 when none.
    pub net_local_gpu: Vec<i32>,
}

const BASES: [NodeKind; 5] = [
    NodeKind::Cpu,
    NodeKind::Dev,
    NodeKind::Gpu,
    NodeKind::Net,
    NodeKind::Nvs,
];

impl Topology {
    /// Compute all paths of a system under the given settings (`ncclTopoComputePaths` followed by
    /// `ncclTopoSearchInit`).
    pub fn new(system: System, settings: &TopoSettings) -> Topology {
        let mut t = Topology {
            system,
            settings: settings.clone(),
            table: Default::default(),
            max_bw: 0.0,
            total_bw: 0.0,
            net_local_gpu: Vec::new(),
        };
        t.compute();
        t.search_init();
        t
    }

    /// This topology as a communicator that does (`inter`) or does not span hosts sees it: the
    /// paths are the same, only `system->inter` and what `ncclTopoSearchInit` derives from it
    /// change.
    pub fn with_inter(&self, inter: bool) -> Topology {
        let mut t = self.clone();
        t.system.inter = inter;
        t.search_init();
        t
    }

    /// The path from `node` to the `i`-th node of kind `base`.
    pub fn path(&self, node: NodeIndex, base: NodeKind, i: usize) -> &Path {
        &self
            .table
            .from(node, base)
            .expect("paths are computed for CPU, DEV, GPU, NET and NVS")[i]
    }
    fn path_mut(&mut self, node: NodeIndex, base: NodeKind, i: usize) -> &mut Path {
        let (nb, v) = std::sync::Arc::make_mut(&mut self.table).kinds[base.idx()]
            .as_mut()
            .expect("paths are computed for CPU, DEV, GPU, NET and NVS");
        &mut v[node.index() * *nb + i]
    }
    /// Whether paths towards a kind were computed.
    pub fn has_paths_to(&self, base: NodeKind) -> bool {
        self.table.kinds[base.idx()].is_some()
    }
    /// GPU `g` to GPU `p` (indices in NCCL GPU order).
    pub fn gpu_gpu(&self, g: usize, p: usize) -> &Path {
        self.path(self.system.nodes(NodeKind::Gpu)[g], NodeKind::Gpu, p)
    }
    /// GPU `g` to NET `n`.
    pub fn gpu_net(&self, g: usize, n: usize) -> &Path {
        self.path(self.system.nodes(NodeKind::Gpu)[g], NodeKind::Net, n)
    }
    /// NET `n` to GPU `g`.
    pub fn net_gpu(&self, n: usize, g: usize) -> &Path {
        self.path(self.system.nodes(NodeKind::Net)[n], NodeKind::Gpu, g)
    }

    fn bfs(&mut self, base: NodeIndex, g: &Flat) {
        let sys = &self.system;
        let bk = sys.node(base).kind;
        let bi = sys.index_of(base);
        let nodes = sys.graph.node_count();
        let nbase = sys.count(bk);
        let (_, table) = std::sync::Arc::make_mut(&mut self.table).kinds[bk.idx()]
            .get_or_insert_with(|| (nbase, (0..nodes * nbase).map(|_| Path::dis()).collect()));
        let at = |n: usize| n * nbase + bi;
        // The search runs on this base's column copied out (contiguous, so large systems stay
        // in cache) and is written back at the end.
        let mut col: Vec<Path> = (0..nodes).map(|n| table[at(n)].clone()).collect();
        // Whether a node is already in the next level's list.
        let mut queued = vec![false; nodes];
        col[base.index()] = Path {
            links: PathLinks::new(),
            bw: LOC_BW,
            ty: PathType::Loc,
        };
        let v2_30 = sys.version.typed_path_update();
        let nvb_disable = self.settings.nvb_disable;
        let base_gpu = bk == NodeKind::Gpu;
        let path_max = if base_gpu { 2 } else { 1 };
        let base_dev = if base_gpu { sys.gpu_attach(base) } else { base };
        let mut list = vec![base];
        while !list.is_empty() {
            let mut next: Vec<NodeIndex> = Vec::new();
            for &node in &list {
                let path = &col[node.index()];
                let (p_bw, p_ty, p_count) = (path.bw, path.ty, path.count());
                let nk = g.kind[node.index()];
                for link in g.links_of(node) {
                    let rem = link.to;
                    let rk = link.to_kind;
                    let bw = p_bw.min(link.bw);
                    if v2_30 {
                        if node != base_dev
                            && nk == NodeKind::Dev
                            && !(link.ty == LinkType::Loc && rk == NodeKind::Gpu)
                            && (nvb_disable
                                || link.ty != LinkType::Nvl
                                || rk != NodeKind::Dev
                                || p_count > path_max)
                        {
                            continue;
                        }
                    } else if node != base
                        && nk == NodeKind::Gpu
                        && (nvb_disable
                            || link.ty != LinkType::Nvl
                            || rk != NodeKind::Gpu
                            || p_count > 1)
                    {
                        continue;
                    }
                    let mut ty = link.ty.as_path();
                    if nk == NodeKind::Pci && rk == NodeKind::Pci {
                        ty = PathType::Pxb;
                    }
                    if link.ty == LinkType::Pci && (nk == NodeKind::Cpu || rk == NodeKind::Cpu) {
                        ty = PathType::Phb;
                    }
                    let rem_path = &col[rem.index()];
                    let update = if v2_30 {
                        if nk == NodeKind::Dev
                            && p_ty == PathType::Nvl
                            && ty == PathType::Nvl
                            && p_count == path_max
                        {
                            ty = PathType::Nvb;
                        }
                        ty = ty.max(p_ty);
                        ty < rem_path.ty
                            || (ty == rem_path.ty && rem_path.bw < bw)
                            || (ty == rem_path.ty
                                && rem_path.bw == bw
                                && rem_path.count() > p_count + 1)
                    } else {
                        if nk == NodeKind::Gpu
                            && p_ty == PathType::Nvl
                            && ty == PathType::Nvl
                            && p_count + 1 > 1
                        {
                            ty = PathType::Nvb;
                        }
                        ty = ty.max(p_ty);
                        (rem_path.bw == 0.0 || rem_path.count() > p_count) && rem_path.bw < bw
                    };
                    if !update {
                        continue;
                    }
                    // The reverse link (rem -> node, same type) starts the new path.
                    let Some(rev) = link.rev else {
                        // NCCL fails init here ("Failed to find reverse path"); one-way links
                        // (asymmetric NVLinks, pcilinks) simply do not carry paths back.
                        continue;
                    };
                    // (A link back to its own node never improves that node's path.)
                    let (i, j) = (node.index(), rem.index());
                    let (src, dst) = match i.cmp(&j) {
                        std::cmp::Ordering::Less => {
                            let (a, b) = col.split_at_mut(j);
                            (&a[i], &mut b[0])
                        }
                        std::cmp::Ordering::Greater => {
                            let (a, b) = col.split_at_mut(i);
                            (&b[0], &mut a[j])
                        }
                        std::cmp::Ordering::Equal => continue,
                    };
                    dst.links.clear();
                    dst.links.push(rev);
                    dst.links.extend(src.links.iter().copied());
                    dst.bw = bw;
                    dst.ty = ty;
                    if !queued[rem.index()] {
                        queued[rem.index()] = true;
                        next.push(rem);
                    }
                }
            }
            for n in &next {
                queued[n.index()] = false;
            }
            list = next;
        }
        for (n, p) in col.into_iter().enumerate() {
            table[at(n)] = p;
        }
    }

    /// `ncclTopoGetLocal`: the nodes of `result` with the best path from the `i`-th node of `kind`
    /// (highest bandwidth, then lowest type).
    pub fn get_local(&self, kind: NodeKind, i: usize, result: NodeKind) -> Locals {
        let node = self.system.nodes(kind)[i];
        let Some(paths) = self.table.from(node, result) else {
            return Locals::new();
        };
        let mut min_ty = PathType::Dis;
        let mut max_bw = 0.0f32;
        let mut out = Locals::new();
        for (j, p) in paths.iter().enumerate() {
            if p.bw > max_bw || (p.bw == max_bw && p.ty < min_ty) {
                max_bw = p.bw;
                min_ty = p.ty;
                out.clear();
            }
            if p.bw == max_bw && p.ty == min_ty {
                out.push(j);
            }
        }
        out
    }

    /// `ncclGetLocalCpu`: the closest CPU of GPU `g` (fewest hops among the best).
    pub fn local_cpu(&self, g: usize) -> Option<usize> {
        let locals = self.get_local(NodeKind::Gpu, g, NodeKind::Cpu);
        let gn = self.system.nodes(NodeKind::Gpu)[g];
        let mut best = *locals.first()?;
        for &c in &locals[1..] {
            if self.path(gn, NodeKind::Cpu, c).count() < self.path(gn, NodeKind::Cpu, best).count()
            {
                best = c;
            }
        }
        Some(best)
    }

    /// `ncclTopoGetLocalNet`: the NET (index) GPU `g` uses on `channel`.
    pub fn local_net(&self, g: usize, channel: i32) -> Option<usize> {
        self.local_nets(g).map(|l| l.on(channel))
    }

    /// The NETs GPU `g` uses on channels 0, 1, ... up to (not including) the first channel that
    /// comes back to channel 0's NET: how NCCL walks `ncclTopoGetLocalNet` to list a GPU's NETs.
    pub fn local_net_cycle(&self, g: usize) -> Locals {
        let mut out = Locals::new();
        if let Some(l) = self.local_nets(g) {
            for c in 0..self.system.version.max_channels() as i32 {
                let n = l.on(c);
                if out.first() == Some(&n) {
                    break;
                }
                out.push(n);
            }
        }
        out
    }

    /// What [`Self::local_net`] needs for GPU `g`, for any channel.
    fn local_nets(&self, g: usize) -> Option<LocalNets> {
        let nets = self.get_local(NodeKind::Gpu, g, NodeKind::Net);
        if nets.is_empty() {
            return None;
        }
        let n_gpus = self
            .get_local(NodeKind::Net, nets[0], NodeKind::Gpu)
            .len()
            .max(1);
        let per_gpu = match self.settings.netdevs_policy {
            NetDevsPolicy::Auto => nets.len().div_ceil(n_gpus),
            NetDevsPolicy::All => nets.len(),
            NetDevsPolicy::Max(m) => (m as usize).min(nets.len()),
        }
        .max(1);
        let dev = self.system.gpu(g).dev.max(0) as usize;
        let mut first = if self.system.version.at_least(2, 30) {
            dev % n_gpus
        } else {
            dev
        };
        if nets.len().is_power_of_two() {
            first = mirror_bits(first, nets.len());
        }
        Some(LocalNets {
            nets,
            first,
            per_gpu,
        })
    }

    /// `ncclTopoGetLocalGpu`: the GPU (index) that uses NET `n` first. NCCL tries channel 0, 1, ...
    /// up to MAXCHANNELS (per version) and, on each, the NET's local GPUs in order; a GPU's NET repeats with the
    /// period of its NETs per GPU, so each GPU's first channel on `n` is within one period.
    pub fn local_gpu_of_net(&self, n: usize) -> Option<usize> {
        let gpus = self.get_local(NodeKind::Net, n, NodeKind::Gpu);
        let mut best: Option<(usize, usize)> = None;
        for &g in &gpus {
            let Some(l) = self.local_nets(g) else {
                continue;
            };
            let period = l.per_gpu.min(self.system.version.max_channels());
            if let Some(c) = (0..period).find(|&c| l.on(c as i32) == n) {
                if best.is_none_or(|(bc, _)| c < bc) {
                    best = Some((c, g));
                }
            }
        }
        best.map(|(_, g)| g)
    }

    /// The default P2P level for this system, or the user's.
    pub fn p2p_level(&self) -> PathType {
        if let Some(l) = self.settings.p2p_level {
            return l;
        }
        let (arch, vendor, _) = self.system.cpu_type();
        let devs = if self.system.version.has_dev_nodes() {
            self.system.count(NodeKind::Dev)
        } else {
            self.system.count(NodeKind::Gpu)
        };
        if arch == cpu_arch::X86 && vendor == cpu_vendor::AMD && devs <= 2 {
            PathType::Sys
        } else {
            PathType::Pxb
        }
    }

    /// `ncclTopoCheckP2p` between GPU indices `g1` and `g2` (same host): whether P2P is used, and
    /// whether P2P reads are.
    pub fn check_p2p(&self, g1: usize, g2: usize) -> (bool, bool) {
        let path = self.gpu_gpu(g1, g2);
        let mut p2p = path.ty <= self.p2p_level();
        let (a, b) = (self.system.gpu(g1), self.system.gpu(g2));
        let same_device = {
            let n1 = self.system.nodes(NodeKind::Gpu)[g1];
            let n2 = self.system.nodes(NodeKind::Gpu)[g2];
            self.system.gpu_attach(n1) == self.system.gpu_attach(n2)
        };
        if p2p && self.settings.ignore_disabled_p2p != 2 && !same_device {
            // NVML's pairwise P2P status: boards whose driver disables P2P (GeForce) report it as
            // unsupported with every peer.
            let mut ok = a.nvml_p2p && b.nvml_p2p;
            if let Some(mid) = self.intermediate_gpu(g1, g2) {
                ok &= self.system.gpu(mid).nvml_p2p;
            }
            if !ok {
                p2p = false;
            }
        }
        let read = path.ty == PathType::Nvl && a.sm == 80 && b.sm == 80;
        (p2p, read)
    }

    /// The intermediate GPU of an NVB path.
    pub fn intermediate_gpu(&self, g1: usize, g2: usize) -> Option<usize> {
        let path = self.gpu_gpu(g1, g2);
        if path.ty != PathType::Nvb {
            return None;
        }
        let start = self.system.nodes(NodeKind::Gpu)[g1];
        let own = self.system.gpu_attach(start);
        for &e in &path.links {
            let (_, t) = self.system.graph.edge_endpoints(e)?;
            if t == start || t == own {
                continue;
            }
            match self.system.node(t).kind {
                NodeKind::Gpu => return Some(self.system.index_of(t)),
                NodeKind::Dev => {
                    let gpu = self
                        .system
                        .links(t)
                        .find(|(_, r, _)| self.system.node(*r).kind == NodeKind::Gpu)
                        .map(|x| x.1)?;
                    return Some(self.system.index_of(gpu));
                }
                _ => {}
            }
        }
        None
    }

    /// `ncclTopoGetIntermediateRank` for a GPU->NET path: the GPU (index) that relays PXN traffic.
    pub fn pxn_relay(&self, g: usize, n: usize) -> usize {
        let path = self.gpu_net(g, n);
        if path.ty != PathType::Pxn {
            return g;
        }
        let start = self.system.nodes(NodeKind::Gpu)[g];
        let own = self.system.gpu_attach(start);
        for &e in &path.links {
            let Some((_, t)) = self.system.graph.edge_endpoints(e) else {
                break;
            };
            if t == start || t == own {
                continue;
            }
            match self.system.node(t).kind {
                NodeKind::Gpu => return self.system.index_of(t),
                NodeKind::Dev => {
                    if let Some((_, r, _)) = self
                        .system
                        .links(t)
                        .find(|(_, r, _)| self.system.node(*r).kind == NodeKind::Gpu)
                    {
                        return self.system.index_of(r);
                    }
                }
                NodeKind::Nvs => continue,
                _ => break,
            }
        }
        g
    }

    /// `ncclTopoCheckGdr`: GPUDirect RDMA between GPU `g` and NET `n` (`read` = send side).
    pub fn check_gdr(&self, g: usize, n: usize, read: bool) -> GdrMode {
        let net = self
            .system
            .node(self.system.nodes(NodeKind::Net)[n])
            .net()
            .expect("NET node");
        let gpu = self.system.gpu(g);
        if !net.gdr || !gpu.gdr {
            return GdrMode::Disabled;
        }
        if read {
            let param = self.settings.net_gdr_read;
            if param == 0 {
                return GdrMode::Disabled;
            }
            if param < 0 && gpu.sm < 80 {
                let ngpus = self.system.count(NodeKind::Gpu);
                let nvlink = ngpus == 1
                    || (0..ngpus).any(|i| i != g && self.gpu_gpu(g, i).ty == PathType::Nvl);
                if !nvlink {
                    return GdrMode::Disabled;
                }
            }
        }
        let level = self
            .settings
            .net_gdr_level
            .unwrap_or(if self.settings.net_gdr_c2c {
                PathType::P2c
            } else {
                PathType::Pxb
            });
        let mut gg = g;
        let mut distance = self.gpu_net(g, n).ty;
        if distance == PathType::Pxn {
            gg = self.pxn_relay(g, n);
            distance = self.gpu_net(gg, n).ty;
        }
        if distance > level {
            return GdrMode::Disabled;
        }
        let gn = self.system.nodes(NodeKind::Gpu)[gg];
        match self.local_cpu(gg) {
            Some(c)
                if self.path(gn, NodeKind::Cpu, c).ty == PathType::C2c
                    && distance != PathType::P2c =>
            {
                GdrMode::Pci
            }
            _ => GdrMode::Default,
        }
    }

    /// `addInterStep`: route the path from the `i1`-th `t1` to the `i2`-th `t2` through the `ix`-th `tx`.
    fn add_inter_step(
        &mut self,
        tx: NodeKind,
        ix: usize,
        t1: NodeKind,
        i1: usize,
        t2: NodeKind,
        i2: usize,
    ) {
        let mid = self.system.nodes(tx)[ix];
        let src = self.system.nodes(t1)[i1];
        let first = self.path(src, tx, ix).clone();
        let second = self.path(mid, t2, i2).clone();
        let mut ty = PathType::merge(first.ty, second.ty);
        if tx == NodeKind::Gpu {
            ty = PathType::Pxn;
        }
        let mut links = first.links;
        links.extend_from_slice(&second.links);
        *self.path_mut(src, t2, i2) = Path {
            links,
            bw: first.bw.min(second.bw),
            ty,
        };
    }

    fn compute(&mut self) {
        let flat = Flat::new(&self.system);
        for k in BASES {
            let n = self.system.graph.node_count();
            let nb = self.system.count(k);
            std::sync::Arc::make_mut(&mut self.table).kinds[k.idx()] =
                Some((nb, (0..n * nb).map(|_| Path::dis()).collect()));
            for b in self.system.nodes(k).to_vec() {
                self.bfs(b, &flat);
            }
        }
        let ngpus = self.system.count(NodeKind::Gpu);
        let nnets = self.system.count(NodeKind::Net);
        // P2P: pairs that cannot (or should not) use P2P go through the CPU local to the destination.
        for g in 0..ngpus {
            for p in 0..ngpus {
                let (p2p, _) = self.check_p2p(p, g);
                if !p2p {
                    if let Some(cpu) = self.local_cpu(g) {
                        self.add_inter_step(NodeKind::Cpu, cpu, NodeKind::Gpu, p, NodeKind::Gpu, g);
                    }
                }
            }
        }
        // P2C: a NIC reached through the CPU that the GPU reaches over C2C.
        if self.system.version.at_least(2, 27) && nnets > 0 {
            for g in 0..ngpus {
                let Some(c) = self.local_cpu(g) else { continue };
                let gn = self.system.nodes(NodeKind::Gpu)[g];
                for n in self.get_local(NodeKind::Gpu, g, NodeKind::Net) {
                    let nn = self.system.nodes(NodeKind::Net)[n];
                    if PathType::merge(
                        self.path(gn, NodeKind::Cpu, c).ty,
                        self.path(nn, NodeKind::Cpu, c).ty,
                    ) == PathType::P2c
                    {
                        let p = self.path_mut(gn, NodeKind::Net, n);
                        p.ty = p.ty.min(PathType::P2c);
                        let q = self.path_mut(nn, NodeKind::Gpu, g);
                        q.ty = q.ty.min(PathType::P2c);
                    }
                }
            }
        }
        // PXN and GPUDirect RDMA. NCCL asks for the NET's local GPU (and that GPU's GDR mode) for
        // every GPU; they are kept until a path they read changes: a PXN step for GPU g changes
        // only g's path to the NET, which matters only when g is one of the NET's local GPUs; a
        // step through the CPU changes the NET's paths too.
        for n in 0..nnets {
            let mut peer_of_net: Option<(Locals, Option<(usize, GdrMode)>)> = None;
            for g in 0..ngpus {
                if !self.settings.pxn_disable {
                    let (net_gpus, peer) = peer_of_net.get_or_insert_with(|| {
                        (
                            self.get_local(NodeKind::Net, n, NodeKind::Gpu),
                            self.local_gpu_of_net(n)
                                .map(|peer| (peer, self.check_gdr(peer, n, true))),
                        )
                    });
                    let g_is_local = net_gpus.contains(&g);
                    if let Some((peer, gdr)) = peer.filter(|p| p.0 != g) {
                        let pxn_ty = if self.settings.pxn_c2c {
                            PathType::P2c
                        } else {
                            PathType::Pxb
                        };
                        let peer_net = self.gpu_net(peer, n);
                        let mine = self.gpu_net(g, n);
                        let sys = &self.system;
                        let same_sys = sys.node(sys.nodes(NodeKind::Gpu)[peer]).system_id()
                            == sys.node(sys.nodes(NodeKind::Gpu)[g]).system_id();
                        if peer_net.ty <= pxn_ty
                            && gdr != GdrMode::Disabled
                            && self.gpu_gpu(peer, g).ty <= PathType::Nvl
                            && same_sys
                            && (peer_net.bw > mine.bw || mine.ty > PathType::Pxn)
                        {
                            self.add_inter_step(
                                NodeKind::Gpu,
                                peer,
                                NodeKind::Gpu,
                                g,
                                NodeKind::Net,
                                n,
                            );
                            if g_is_local {
                                peer_of_net = None;
                            }
                        }
                    }
                }
                if self.gpu_net(g, n).ty < PathType::Phb
                    && self.check_gdr(g, n, false) == GdrMode::Disabled
                {
                    if let Some(c) = self.local_cpu(g) {
                        self.add_inter_step(NodeKind::Cpu, c, NodeKind::Net, n, NodeKind::Gpu, g);
                        self.add_inter_step(NodeKind::Cpu, c, NodeKind::Gpu, g, NodeKind::Net, n);
                        peer_of_net = None;
                    }
                }
            }
        }
        self.net_local_gpu = (0..nnets)
            .map(|n| self.local_gpu_of_net(n).map(|g| g as i32).unwrap_or(-1))
            .collect();
    }

    /// `ncclTopoSearchInit`.
    fn search_init(&mut self) {
        let sys = &self.system;
        let inter = sys.inter;
        if !inter && sys.count(NodeKind::Gpu) == 1 {
            self.max_bw = LOC_BW;
            self.total_bw = LOC_BW;
            return;
        }
        let devs: Vec<NodeIndex> = if sys.version.has_dev_nodes() {
            sys.nodes(NodeKind::Dev).to_vec()
        } else {
            sys.nodes(NodeKind::Gpu).to_vec()
        };
        let peer_kind = if sys.version.has_dev_nodes() {
            NodeKind::Dev
        } else {
            NodeKind::Gpu
        };
        let target = if inter { NodeKind::Net } else { peer_kind };
        let (mut max_bw, mut total_bw) = (0.0f32, 0.0f32);
        for d in devs {
            if let Some(tab) = self.table.from(d, target) {
                for p in tab {
                    if p.count() == 0 {
                        continue;
                    }
                    max_bw = max_bw.max(p.bw);
                }
            }
            let (mut nvl, mut pci) = (0.0f32, 0.0f32);
            for (_, _, l) in sys.links(d) {
                match l.ty {
                    LinkType::Nvl => nvl += l.bw,
                    LinkType::Pci => pci = l.bw,
                    _ => {}
                }
            }
            total_bw = total_bw.max(nvl.max(pci));
        }
        self.max_bw = max_bw;
        self.total_bw = total_bw;
    }

    /// `ncclTopoGetGpuMinPath` / `MaxPath` over GPU->`kind` paths (excluding self).
    pub fn gpu_path_range(&self, kind: NodeKind) -> (PathType, PathType) {
        let mut lo = PathType::Sys;
        let mut hi = PathType::Loc;
        let ngpus = self.system.count(NodeKind::Gpu);
        if !self.has_paths_to(kind) {
            return (lo, hi);
        }
        for g in 0..ngpus {
            for j in 0..self.system.count(kind) {
                if kind == NodeKind::Gpu && g == j {
                    continue;
                }
                let t = self.path(self.system.nodes(NodeKind::Gpu)[g], kind, j).ty;
                lo = lo.min(t);
                hi = hi.max(t);
            }
        }
        (lo, hi)
    }
}

/// NCCL's `mirrorBits`: reverse the low log2(pow2) bits.
pub fn mirror_bits(val: usize, pow2: usize) -> usize {
    let mut mirror = 0;
    let mut b = 1;
    let mut mb = pow2 >> 1;
    while b < pow2 {
        if val & b != 0 {
            mirror |= mb;
        }
        b <<= 1;
        mb >>= 1;
    }
    mirror
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn mirror() {
        assert_eq!(mirror_bits(1, 8), 4);
        assert_eq!(mirror_bits(3, 8), 6);
        assert_eq!(mirror_bits(1, 2), 1);
        assert_eq!(mirror_bits(0, 1), 0);
    }
}
