//! `ncclTopoCompute` (NCCL 2.30.7 `src/graph/search.cc`): the search attempts from the top
//! (`ncclTopoSearchRec`), the relaxation loop over speeds and path types, channel duplication
//! (`ncclTopoDupChannels`) and the fallbacks.

use super::{
    cpu_arch, cpu_vendor, dominance, fold, futile, next_type, End, NodeKind, PathType, Pattern,
    Searcher, TopoGraph, FORCED_ORDER_PCI, FORCED_ORDER_REPLAY, GLOBAL_TIMEOUT, MAXCHANNELS,
    NCCL_MAX_DIRECT_ARITY, NCCL_MAX_NVLS_ARITY, TIMEOUT, TIMEOUT_SAMECHANNELS, TIMEOUT_TREE,
};

impl Searcher<'_> {
    /// One search attempt: `ncclTopoSearchRec` from the top with a fresh budget `time`.
    ///
    /// Relaxing a path type that no path of this node has (say PXB on a box whose NICs are all
    /// PIX or PXN from the GPUs) does not change a single decision of the recursion, so NCCL
    /// walks the same tree again; such an attempt is answered from the memo of attempts that ran
    /// without improving `graph`, keyed by what the recursion can observe.
    pub(super) fn attempt(&mut self, tmp: &mut TopoGraph, graph: &mut TopoGraph, time: &mut i32) {
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
    pub(super) fn effective_type(&self, types: &[PathType], t: PathType) -> u64 {
        types
            .iter()
            .rev()
            .find(|&&x| x <= t)
            .map_or(u64::MAX, |&x| x as u64)
    }

    /// `ncclTopoSearchParams`.
    pub(super) fn params(&self, pattern: Pattern) -> (i32, i32) {
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
    pub(super) fn rec(&mut self, gr: &mut TopoGraph, save: &mut TopoGraph, time: &mut i32) {
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
    pub(super) fn split_nvlink(&self) -> bool {
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
    pub(super) fn dup_channels(gr: &mut TopoGraph, cc_min: i32, ngpus: usize) {
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

        let arrays = self.profile.speeds(cc_min);
        let speeds = if self.inter {
            arrays.inter
        } else {
            arrays.intra
        };
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
        let mut global_timeout = self.profile.global_timeout;

        let mut time;
        loop {
            // What this pass can still find: when nothing beats the saved graph, the pass ends
            // with it whatever the budgets say (see `futile`).
            self.outlook = if self.end_hopeless {
                let at = futile::LoopState {
                    pass,
                    speeds,
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
