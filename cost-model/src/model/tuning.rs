//! `ncclTopoTuneModel`'s per-communicator facts and its bandwidth and latency formulas per
//! function, algorithm and protocol (NCCL 2.30.7 `src/graph/tuning.cc`, with the release
//! differences of [`Profile`]).

use super::*;

impl NcclModel {
    /// `ncclTopoTuneModel`'s bandwidth and latency tables: for every function, algorithm and
    /// protocol NCCL models, [`Tuning::bus_bandwidth`] and [`Tuning::latency`] from the
    /// per-communicator facts [`Tuning::new`] gathers once; combinations NCCL does not model
    /// keep 0.
    pub(super) fn tune(&mut self, st: &TunerSettings) {
        let pat_on = self.profile.has_pat && self.pat_enabled(st);
        let net_overhead = self.net_overhead(st);
        let t = Tuning::new(&self.shape, &self.profile, pat_on, net_overhead);
        let (mut bandwidths, mut latencies) = (self.bandwidths, self.latencies);
        for f in Func::ALL {
            let nsteps = f.ring_steps(t.n_ranks);
            for a in Algo::ALL {
                if !t.algo_modelled(f, a) {
                    continue;
                }
                let g = t.graphs[a as usize];
                for pr in Proto::ALL {
                    if !t.proto_modelled(a, pr) {
                        continue;
                    }
                    let Some(bus) = t.bus_bandwidth(f, a, pr, g, nsteps) else {
                        continue;
                    };
                    let (fi, ai, pi) = (f as usize, a as usize, pr as usize);
                    bandwidths[fi][ai][pi] = bus;
                    latencies[fi][ai][pi] = t.latency(f, a, pr, g, nsteps);
                }
            }
        }
        self.bandwidths = bandwidths;
        self.latencies = latencies;
    }
}

/// What `ncclTopoTuneModel` computes once per communicator before its loops over functions,
/// algorithms and protocols.
struct Tuning<'a> {
    s: &'a CommShape,
    p: &'a Profile,
    n_nodes: usize,
    n_ranks: usize,
    /// Compute capability index of the tables (`compCapIndex`).
    cc: usize,
    /// `llMaxBws[index1][index2]`.
    ll_max_bw: f64,
    /// `perChMaxTreeBws[cc][index2]`.
    per_ch_max_tree_bw: f64,
    /// `perChMaxRingLL128Bws[cc][index2]`.
    per_ch_max_ring_ll128: f64,
    /// `perChMaxTreeLL128Bws[cc][index2]`.
    per_ch_max_tree_ll128: f64,
    /// `perChMaxNVLSTreeBws[cc][index2]` (2.28+).
    per_ch_max_nvls_tree: Option<f64>,
    /// `hwLat`, with POWER's PCI Tree Simple latency taken from Ring.
    hw_lat: [[[f32; 3]; 7]; 3],
    /// Ranks per node.
    ppn: f32,
    /// Each algorithm's graph.
    graphs: [&'a GraphShape; N_ALGOS],
    /// Each algorithm's intra-node hardware (NVLink when its graph is NVLink, else PCI).
    intra_hw: [usize; N_ALGOS],
    /// Each algorithm's hardware: intra-node within one node, NET across nodes.
    hw: [usize; N_ALGOS],
    /// PAT is available and enabled.
    pat_on: bool,
    /// NET overhead per step (µs).
    net_overhead: f32,
    /// The tree is a chain (`NCCL_TOPO_PATTERN_TREE`): Tree bandwidth takes 0.85.
    tree_pattern_is_chain: bool,
}

impl<'a> Tuning<'a> {
    /// The per-communicator facts of the tuning model.
    fn new(s: &'a CommShape, p: &'a Profile, pat_on: bool, net_overhead: f32) -> Tuning<'a> {
        let n_nodes = s.n_nodes;
        let n_ranks = s.n_ranks;
        let cc = compcap_index(s.min_comp_cap);
        let index2 = if n_nodes <= 2 { n_nodes - 1 } else { 2 };
        let index1 = if n_nodes == 1 {
            cc
        } else if s.cpu_vendor == cpu_vendor::AMD || s.cpu_vendor == CPU_VENDOR_MIXED {
            1
        } else {
            0
        };
        let ll_max_bw = p.ll_max_bw[index1][index2];
        let per_ch_max_tree_bw = p.per_ch_max_tree_bw[cc][index2];
        let per_ch_max_ring_ll128 = p.per_ch_max_ring_ll128_bw[cc][index2];
        let per_ch_max_tree_ll128 = p.per_ch_max_tree_ll128_bw[cc][index2];
        let per_ch_max_nvls_tree = p.per_ch_max_nvls_tree_bw.map(|t| t[cc][index2]);
        let mut hw_lat = p.hw_lat;
        if s.cpu_arch == cpu_arch::POWER {
            hw_lat[Hw::Pci as usize][Algo::Tree as usize][2] =
                hw_lat[Hw::Pci as usize][Algo::Ring as usize][2];
        }
        let ppn = n_ranks as f32 / n_nodes as f32;
        let graphs = s.graphs();
        let intra_hw: [usize; N_ALGOS] = std::array::from_fn(|a| {
            if graphs[a].type_intra == PathType::Nvl {
                Hw::NvLink as usize
            } else {
                Hw::Pci as usize
            }
        });
        let hw: [usize; N_ALGOS] = std::array::from_fn(|a| {
            if n_nodes == 1 {
                intra_hw[a]
            } else {
                Hw::Net as usize
            }
        });
        let tree_pattern_is_chain = if p.tree_pattern_from_comm {
            s.max_tree_pattern == Pattern::Tree
        } else {
            s.tree.pattern == Pattern::Tree
        };
        Tuning {
            s,
            p,
            n_nodes,
            n_ranks,
            cc,
            ll_max_bw,
            per_ch_max_tree_bw,
            per_ch_max_ring_ll128,
            per_ch_max_tree_ll128,
            per_ch_max_nvls_tree,
            hw_lat,
            ppn,
            graphs,
            intra_hw,
            hw,
            pat_on,
            net_overhead,
            tree_pattern_is_chain,
        }
    }

    /// Whether NCCL models algorithm `a` for function `f` (Broadcast and Reduce: Ring only;
    /// AllGather and ReduceScatter: PAT, Ring, NVLS, CollNet direct; no PAT AllReduce; no PAT
    /// before the release has it).
    fn algo_modelled(&self, f: Func, a: Algo) -> bool {
        !((a == Algo::Pat && !self.p.has_pat)
            || (matches!(f, Func::Broadcast | Func::Reduce) && a != Algo::Ring)
            || (matches!(f, Func::AllGather | Func::ReduceScatter)
                && !matches!(a, Algo::Pat | Algo::Ring | Algo::Nvls | Algo::CollNetDirect))
            || (f == Func::AllReduce && a == Algo::Pat))
    }

    /// Whether NCCL models protocol `pr` for algorithm `a` (NVLS and PAT: Simple only; PAT only
    /// when enabled).
    fn proto_modelled(&self, a: Algo, pr: Proto) -> bool {
        !((matches!(a, Algo::Nvls | Algo::NvlsTree) && pr != Proto::Simple)
            || (a == Algo::Pat && (pr != Proto::Simple || !self.pat_on)))
    }

    /// The bus bandwidth of (f, a, pr) over graph `g` (`bw * nChannels` with NCCL's
    /// per-algorithm and per-protocol factors and caps, converted to algorithm bandwidth where
    /// NCCL does); `None` where NCCL skips the combination (NVLS with fewer than 2 channels,
    /// 2.28+).
    fn bus_bandwidth(
        &self,
        f: Func,
        a: Algo,
        pr: Proto,
        g: &GraphShape,
        nsteps: usize,
    ) -> Option<f32> {
        let (s, p, cc, ppn) = (self.s, self.p, self.cc, self.ppn);
        let (n_nodes, n_ranks) = (self.n_nodes, self.n_ranks);
        let (ll_max_bw, per_ch_max_tree_bw) = (self.ll_max_bw, self.per_ch_max_tree_bw);
        let (per_ch_max_ring_ll128, per_ch_max_tree_ll128) =
            (self.per_ch_max_ring_ll128, self.per_ch_max_tree_ll128);
        let per_ch_max_nvls_tree = self.per_ch_max_nvls_tree;
        let tree_pattern_is_chain = self.tree_pattern_is_chain;
        let collnet = matches!(a, Algo::CollNetDirect | Algo::CollNetChain);
        let mut bw: f32 = if n_nodes <= 2 || collnet {
            g.bw_intra
        } else {
            g.bw_inter
        };
        if matches!(a, Algo::Nvls | Algo::NvlsTree) {
            match p.nvls_efficiency {
                Some(eff) => {
                    if g.n_channels < 2 {
                        return None;
                    }
                    let nch = g.n_channels as f32;
                    let mut intra = g.bw_intra * eff[cc] * (nch - 1.0) / nch;
                    if f == Func::AllReduce {
                        intra *= 2.0;
                    } else {
                        intra *= (ppn - 1.0) / ppn;
                    }
                    let inter = g.bw_inter
                        * if n_nodes <= 2 && a == Algo::NvlsTree {
                            2.0
                        } else {
                            1.0
                        };
                    let cap = if a == Algo::NvlsTree {
                        per_ch_max_nvls_tree.unwrap_or(f64::MAX) as f32
                    } else {
                        f32::MAX
                    };
                    bw = intra.min(inter).min(cap);
                }
                None => {
                    bw = if a == Algo::Nvls || n_nodes <= 2 {
                        g.bw_intra.min(g.bw_inter)
                    } else {
                        g.bw_intra.min(g.bw_inter / 2.0)
                    };
                }
            }
        }
        let mut bus: f32 = g.n_channels as f32 * bw;
        let nch = g.n_channels as f64;
        if a == Algo::Ring && pr == Proto::Ll {
            let factor = if p.ring_ll_half {
                0.5
            } else if n_nodes > 1 || matches!(f, Func::AllReduce | Func::Reduce) {
                0.25
            } else {
                1.0 / 3.0
            };
            bus = ll_max_bw.min(bus as f64 * factor) as f32;
        }
        if a == Algo::Ring && pr == Proto::Ll128 {
            let factor = if p.ring_ll128_ppn_penalty && ppn < 2.0 {
                0.7
            } else {
                0.92
            };
            bus = (bus as f64 * factor).min(nch * per_ch_max_ring_ll128) as f32;
        }
        if a == Algo::Tree && (f == Func::AllReduce || !p.tree_cap_allreduce_only) {
            bus = (bus as f64 * 0.92).min(nch * per_ch_max_tree_bw) as f32;
        }
        if a == Algo::Tree && pr == Proto::Ll {
            bus = (bus as f64 * 1.0 / 3.8).min(ll_max_bw) as f32;
        }
        if a == Algo::Tree && pr == Proto::Ll128 {
            let factor = if n_nodes == 1 {
                7.0 / 9.0
            } else {
                120.0 / 128.0
            };
            bus = (bus as f64 * factor).min(nch * per_ch_max_tree_ll128) as f32;
        }
        if a == Algo::Tree && tree_pattern_is_chain {
            bus *= 0.85;
        }
        if a == Algo::Pat {
            bus *= 0.75;
        }
        if collnet && pr != Proto::Simple {
            bus = 0.0;
        }
        if a == Algo::CollNetDirect && pr == Proto::Simple {
            if matches!(f, Func::AllGather | Func::ReduceScatter) {
                bus = ppn * g.bw_intra.min(g.bw_inter * 0.9);
            } else {
                let mut factor = ppn as f64 / g.n_channels.max(1) as f64;
                factor -= (factor - 1.0) / 2.0;
                bus = (bus as f64 / factor) as f32;
                if s.min_comp_cap >= 90 {
                    bus *= 0.85;
                }
            }
        }
        if matches!(a, Algo::Nvls | Algo::CollNetDirect)
            && pr == Proto::Simple
            && matches!(f, Func::AllGather | Func::ReduceScatter)
            && n_nodes > 1
        {
            // Needs a CollNet plugin with iallgather/ireducescatter and no more local
            // ranks than CollNet heads; we model no CollNet plugin.
            bus = 0.0;
        }
        let convert = if p.agrs_no_conversion {
            !(a != Algo::Ring && matches!(f, Func::AllGather | Func::ReduceScatter))
        } else {
            true
        };
        if convert {
            let ratio: f32 = if a == Algo::Ring
                || (p.nvls_efficiency.is_some() && matches!(a, Algo::Nvls | Algo::NvlsTree))
            {
                (n_ranks as f64 / nsteps as f64) as f32
            } else if matches!(a, Algo::Nvls | Algo::NvlsTree) {
                5.0 / 6.0
            } else {
                0.5
            };
            bus *= ratio;
        }
        Some(bus)
    }

    /// The latency of (f, a, pr) over graph `g` (µs): the base latency plus NCCL's intra- and
    /// inter-node step latencies for the algorithm's shape.
    fn latency(&self, f: Func, a: Algo, pr: Proto, g: &GraphShape, nsteps: usize) -> f32 {
        let (p, hw_lat, hw, ppn) = (self.p, &self.hw_lat, &self.hw, self.ppn);
        let (n_nodes, n_ranks, net_overhead) = (self.n_nodes, self.n_ranks, self.net_overhead);
        let intra_hw = &self.intra_hw;
        let (ai, pi) = (a as usize, pr as usize);
        let mut lat = p.base_lat[ai][pi];
        let mut intra_lat = hw_lat[intra_hw[ai]][ai][pi];
        let mut inter_lat = if ppn == 1.0 && p.ppn1_tree_net_lat {
            hw_lat[Hw::Net as usize][Algo::Tree as usize][pi]
        } else {
            hw_lat[Hw::Net as usize][ai][pi]
        };
        inter_lat += g.latency_inter;
        if pr == Proto::Simple {
            inter_lat += g.latency_inter;
        }
        let log_nodes = log2i(n_nodes as u64) as f32;
        let lr = (n_ranks / n_nodes) as f32;
        match a {
            Algo::Ring => {
                let mut l = hw_lat[hw[ai]][ai][pi];
                if matches!(f, Func::Reduce | Func::Broadcast) {
                    if g.same_channels {
                        lat += l;
                    } else {
                        if pr == Proto::Simple {
                            l = hw_lat[hw[ai]][Algo::Tree as usize][pi];
                        }
                        lat += nsteps as f32 * l;
                    }
                } else {
                    let mut ovh = 0.0;
                    if n_nodes > 1 {
                        ovh = net_overhead;
                        if pr == Proto::Simple {
                            ovh *= 3.0;
                        }
                    }
                    intra_lat = intra_lat.max(ovh);
                    let inter_steps = if p.inter_steps_fixed {
                        if n_nodes == 1 {
                            0
                        } else if f == Func::AllReduce {
                            2 * (n_nodes - 1)
                        } else {
                            n_nodes - 1
                        }
                    } else if f == Func::AllReduce {
                        if n_nodes > 1 {
                            2 * n_nodes
                        } else {
                            0
                        }
                    } else {
                        n_nodes - 1
                    };
                    lat += (nsteps as f32 - inter_steps as f32) * intra_lat
                        + inter_steps as f32 * inter_lat;
                }
            }
            Algo::Tree => {
                if f == Func::AllReduce {
                    lat += 2.0 * ((lr - 1.0) * intra_lat + log_nodes * inter_lat);
                }
            }
            Algo::CollNetDirect => {
                lat += 2.0 * ((lr - 1.0).min(1.0) * intra_lat + (lr - 1.0) * 0.4) + inter_lat;
            }
            Algo::CollNetChain => {
                lat += 2.0 * (lr - 1.0) * intra_lat + inter_lat;
            }
            Algo::Nvls => {
                lat = intra_lat;
                if n_nodes > 1 {
                    lat += inter_lat;
                }
            }
            Algo::NvlsTree => {
                lat += intra_lat + 2.0 * log_nodes * inter_lat;
            }
            Algo::Pat => {
                if matches!(f, Func::AllGather | Func::ReduceScatter) {
                    lat += log_nodes * (inter_lat / 3.5) + n_ranks as f32 * 2.8;
                }
            }
        }
        lat
    }
}
