//! NET selection and checks of the search (NCCL 2.30.7 `src/graph/search.cc`,
//! `ncclTopoSelectNets` and the NET checks of `ncclTopoSearchRecNet`).

use super::{End, NetDevsPolicy, Pattern, Searcher, TopoGraph, NCCL_TOPO_MAX_NODES};

impl Searcher<'_> {
    /// [`Self::select_nets_uncached`], memoized: the answer only depends on the static topology.
    pub(super) fn select_nets(
        &mut self,
        type_inter: i32,
        gpu: Option<usize>,
    ) -> std::rc::Rc<[usize]> {
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

    /// `ncclTopoSelectNets`: the preferred NETs (`ncclTopoPrefNetsChannelFirst`, or on a
    /// topology fused from several hosts `ncclTopoPrefNetsGpuFirst`), then the others by path
    /// type.
    pub(super) fn select_nets_uncached(&self, type_inter: i32, gpu: Option<usize>) -> Vec<usize> {
        let mut nets: Vec<usize> = Vec::new();
        let push = |nets: &mut Vec<usize>, n: usize| {
            if !nets.contains(&n) {
                nets.push(n);
            }
        };
        let gpus: Vec<usize> = (0..self.ngpus)
            .filter(|&g| gpu.is_none_or(|x| x == g))
            .collect();
        if self.nets_gpu_first {
            // Channel by channel, each GPU's NET for that channel, until every GPU's NETs
            // come round again.
            let cycles: Vec<_> = gpus.iter().map(|&g| self.topo.local_net_cycle(g)).collect();
            let longest = cycles.iter().map(|c| c.len()).max().unwrap_or(0);
            for c in 0..longest {
                for cycle in &cycles {
                    if let Some(&n) = cycle.get(c) {
                        push(&mut nets, n);
                    }
                }
            }
        } else {
            for &g in &gpus {
                for n in self.topo.local_net_cycle(g) {
                    push(&mut nets, n);
                }
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
    pub(super) fn check_net(&self, gr: &TopoGraph, start: usize, n: usize, step: i32) -> bool {
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
            } else if self.topo.settings.mnnvl.rail_per_host
                && self.net_id[n] >> 56 != self.net_id[start] >> 56
            {
                // NETs of different hosts of an NVLink domain: one rail per PCI slot and port.
                if self.net_pci[n] != self.net_pci[start]
                    || self.net_port[n] != self.net_port[start]
                {
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
}
