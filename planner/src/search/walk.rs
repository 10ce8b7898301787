//! The search recursion (NCCL 2.30.7 `src/graph/search.cc`: `ncclTopoSearchNextGpuSort`,
//! `ncclTopoSearchTryGpu`, `ncclTopoSearchTryCollnetDirect`, `ncclTopoSearchTryNvls`,
//! `ncclTopoCompareGraphs`, `ncclTopoSearchRecGpu`, `ncclTopoSearchRecNet`).

use super::{
    End, GpuList, PathType, Pattern, Searcher, TopoGraph, FORCED_ORDER_PCI, FORCED_ORDER_REPLAY,
};

impl Searcher<'_> {
    /// `ncclTopoSearchNextGpuSort`.
    pub(super) fn next_gpu_sort(&self, gr: &TopoGraph, g: usize, sort_net: i32) -> GpuList {
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
    pub(super) fn next_gpu_sort_scored(&self, gr: &TopoGraph, g: usize, sort_net: i32) -> GpuList {
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
    pub(super) fn next_gpu_sort_nvs_reference(
        &self,
        gr: &TopoGraph,
        g: usize,
        sort_net: i32,
    ) -> Vec<usize> {
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
    pub(super) fn replay_get_gpu(&self, gr: &TopoGraph, step: i32) -> usize {
        let ngpus = self.ngpus;
        let idx = (gr.n_channels as usize - 1) * ngpus + (step + 1) as usize;
        self.gpu_index(gr.intra[idx])
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn try_gpu(
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

    /// `ncclTopoSearchTryCollnetDirect`: head `g` all-to-all with every GPU at bw/(nGPUs-1).
    pub(super) fn try_collnet_direct(
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
    pub(super) fn try_nvls(
        &mut self,
        gr: &mut TopoGraph,
        save: &mut TopoGraph,
        g: usize,
        time: &mut i32,
    ) {
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
    pub(super) fn better(&self, gr: &TopoGraph, refg: &TopoGraph) -> bool {
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

    /// `ncclTopoSearchRecGpu`, answered from the [`Memo`] when this subtree was walked before.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rec_gpu(
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
    pub(super) fn walk_gpu(
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

    pub(super) fn rec_net(
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
}
