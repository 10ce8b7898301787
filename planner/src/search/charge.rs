//! Following a path and charging its bandwidth (NCCL 2.30.7 `src/graph/search.cc`,
//! `followPath` / `ncclTopoFollowPath`), and the NET port charge of the NET loop.

use super::{sub_round, End, LinkType, PInfo, PathType, Searcher, TopoGraph};

impl Searcher<'_> {
    /// `followPath`: charge `bw` on the first `max_steps` links of a path; returns how many links
    /// it could charge.
    pub(super) fn follow_links(&mut self, p: PInfo, max_steps: usize, bw: f32) -> usize {
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

    pub(super) fn set_link_bw(&mut self, e: usize, v: f32) {
        let w = self.memo.link_w[e];
        self.memo
            .account(w, self.link_bw[e].to_bits() as u64, v.to_bits() as u64);
        self.link_bw[e] = v;
    }

    /// `ncclTopoFollowPath`: returns whether the destination was reached (bandwidth charged).
    pub(super) fn follow_path(
        &mut self,
        gr: &mut TopoGraph,
        from: End,
        to: End,
        mult: f32,
    ) -> bool {
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
    pub(super) fn pci_edges(&self, g: usize) -> Option<(usize, usize)> {
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
    pub(super) fn gpu_pci_bw(&self, g: usize) -> i32 {
        match self.gpu_pci[g] {
            Some((a, b)) => self.link_bw[a].min(self.link_bw[b]) as i32,
            None => -1,
        }
    }

    pub(super) fn net_index(&self, id: i64) -> usize {
        self.net_id
            .iter()
            .position(|&x| x == id)
            .expect("graph NET ids come from this system")
    }
    pub(super) fn gpu_index(&self, rank: i32) -> usize {
        self.gpu_rank
            .iter()
            .position(|&r| r == rank)
            .expect("graph ranks come from this system")
    }

    /// Charge the paths `ends(d)` for d = 0, 1, ... ngpus-1 with `mult(d)`, stopping at the
    /// first that does not fit; returns how many were charged and whether all were.
    pub(super) fn charge_each(
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
    pub(super) fn uncharge_each(
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

    /// Add `delta` to every NET on the same ASIC and port as NET `n`.
    pub(super) fn charge_port(&mut self, n: usize, delta: f32) {
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
}
