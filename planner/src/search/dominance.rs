//! Attempts answered without walking them: a relaxed attempt that cannot improve the graph and
//! contains the tree of an attempt that ran out of budget runs out of budget too.
//!
//! The argument, for the recursion of NCCL 2.30.7's `search.cc` as [`Searcher`] reproduces it:
//!
//! 1. **Containment.** Take two attempts with the same pattern, `sameChannels`, `crossNic`,
//!    collNet flag, `maxChannels` and starting state, where the second admits at least the path
//!    types of the first and runs at no higher speeds. Every decision of the recursion is either
//!    static (the candidate GPUs behind an NVSwitch or the unused ones elsewhere, the NET checks,
//!    the replayed order) or a test that only gets easier when types are relaxed (a path type
//!    under the threshold, a longer NET list) or speeds lowered (`bw <= residual` on every link,
//!    NET and reverse link). Candidate *order* may differ (the PCI score sort reads residual
//!    bandwidths), but not the candidate *set*. So, as long as the residual state at a node is a
//!    function of the charges on the recursion stack, every node of the first attempt's
//!    unbounded tree is a node of the second's, where every residual is at least as large.
//! 2. **Exact arithmetic.** The residual is such a function when `SUB_ROUND`'s charge and refund
//!    are exact inverses. They are when every capacity and every amount is a multiple of 1e-3
//!    held as the nearest `f32` and at most 1000: the subtraction then stays within 0.25 of an
//!    integer number of thousandths and the rounding lands back on the grid (tested exhaustively
//!    in this module). NET bandwidths move by integers and stay exact in `f32`. Both are checked
//!    on the live values before an attempt is answered; anything off the grid walks.
//! 3. **No improvement.** An upper bound on the channels the attempt can complete (every ring
//!    channel charges one path out of every GPU and one NET port charge per channel), times its
//!    speed, that stays below the saved graph (or ties with a different pattern or `crossNic`,
//!    or ties with no fewer hops than the saved graph can have) means `ncclTopoCompareGraphs`
//!    never prefers what the attempt finds, and the attempt never reaches the "optimal" exit.
//!
//! An attempt that ran out of its budget visited that many nodes; one that contains its tree
//! has at least as many, so with a budget no larger it runs out as well, finding nothing: the
//! result is a budget of 0, the saved graph unchanged, and NCCL's step count advanced by the
//! whole budget. NVLS and CollNet Direct are left out: their NET loop stops at the first head
//! found, which a relaxation can move. A NET whose GPUs are unreachable leaks its bandwidth in
//! NCCL's loop (see `rec_net`), which breaks (1); such systems walk every attempt.

use super::{sub_round, End, Searcher};
use crate::graph::{Pattern, TopoGraph};
use topo::path::PathType;

/// An attempt that ran out of its budget.
#[derive(Clone, Copy, Debug)]
pub(super) struct Exhausted {
    pattern: Pattern,
    same_channels: i32,
    cross_nic: i32,
    coll_net: bool,
    max_channels: i32,
    type_intra: PathType,
    type_inter: PathType,
    bw_intra: f32,
    bw_inter: f32,
    budget: i32,
    /// The state hash at the start of the attempt.
    start: u128,
}

impl Exhausted {
    pub(super) fn new(gr: &TopoGraph, budget: i32, start: u128) -> Exhausted {
        Exhausted {
            pattern: gr.pattern,
            same_channels: gr.same_channels,
            cross_nic: gr.cross_nic,
            coll_net: gr.coll_net,
            max_channels: gr.max_channels,
            type_intra: gr.type_intra,
            type_inter: gr.type_inter,
            bw_intra: gr.bw_intra,
            bw_inter: gr.bw_inter,
            budget,
            start,
        }
    }

    /// Whether an attempt `gr` with budget `budget` from state `start` contains this one's tree.
    fn contained_in(&self, gr: &TopoGraph, budget: i32, start: u128) -> bool {
        self.pattern == gr.pattern
            && self.same_channels == gr.same_channels
            && self.cross_nic == gr.cross_nic
            && self.coll_net == gr.coll_net
            && self.max_channels == gr.max_channels
            && self.start == start
            && budget <= self.budget
            && gr.type_intra >= self.type_intra
            && gr.type_inter >= self.type_inter
            && gr.bw_intra <= self.bw_intra
            && gr.bw_inter <= self.bw_inter
    }
}

/// [`Prospect::cross_nic`] standing for attempts with every crossNic value.
pub(super) const ANY_CROSS_NIC: i32 = -1;

/// The parameters of an attempt that bound what it can find.
#[derive(Clone, Copy, Debug)]
pub(super) struct Prospect {
    pub(super) pattern: Pattern,
    /// Or [`ANY_CROSS_NIC`]: a tie then counts as a possible improvement.
    pub(super) cross_nic: i32,
    pub(super) bw_intra: f32,
    pub(super) bw_inter: f32,
    pub(super) min_channels: i32,
    pub(super) max_channels: i32,
}

impl Prospect {
    pub(super) fn of(gr: &TopoGraph) -> Prospect {
        Prospect {
            pattern: gr.pattern,
            cross_nic: gr.cross_nic,
            bw_intra: gr.bw_intra,
            bw_inter: gr.bw_inter,
            min_channels: gr.min_channels,
            max_channels: gr.max_channels,
        }
    }
}

/// Largest capacity or amount (GB/s) for which `SUB_ROUND` is exact integer arithmetic on
/// thousandths.
const GRID_MAX: f32 = 1000.0;

/// `v` as an exact number of thousandths, if it is one (nearest `f32`, within `0..=GRID_MAX`).
fn grid_units(v: f32) -> Option<i64> {
    if (0.0..=GRID_MAX).contains(&v) && sub_round(v, 0.0) == v {
        Some((v as f64 * 1000.0).round() as i64)
    } else {
        None
    }
}

/// `v` in thousandths if it is a multiple of 1/8 up to 8000: `f32` holds every such value and
/// every sum, difference and thousandfold of two of them exactly, so `SUB_ROUND` on them is exact.
fn dyadic_units(v: f32) -> Option<i64> {
    ((0.0..=8000.0).contains(&v) && (v * 8.0).fract() == 0.0).then_some((v * 1000.0) as i64)
}

/// `v` in thousandths when `SUB_ROUND` stays exact on it: on the grid up to [`GRID_MAX`], or
/// (when every amount is a multiple of 1/8) a multiple of 1/8 up to 8000.
fn exact_units(v: f32, dyadic_amounts: bool) -> Option<i64> {
    grid_units(v).or_else(|| dyadic_units(v).filter(|_| dyadic_amounts))
}

/// NET bandwidths change by whole GB/s (`charge_port`); exact in `f32` for these values.
fn net_exact(v: f32) -> bool {
    (0.0..4096.0).contains(&v) && (v * 1024.0).fract() == 0.0
}

/// Static facts the argument needs about one node, computed once per [`Searcher`].
#[derive(Default)]
pub(super) struct Statics {
    /// Whether containment holds at all here (no NET leaks its bandwidth).
    pub(super) sound: bool,
    /// Per GPU, cuts of its paths to GPUs and NETs: for each hop i, the links at hop i.
    cuts: Vec<Vec<Vec<usize>>>,
    /// The same for its paths to other GPUs only.
    cuts_intra: Vec<Vec<Vec<usize>>>,
    /// Every link some path charges (forward or reverse).
    links: Vec<usize>,
    /// Fewest hops a ring channel can have (inter-node: NET in, GPU hops, NET out).
    min_ring_hops: i64,
    any_intel_phb: bool,
    any_eighth: bool,
    any_power: bool,
}

impl Searcher<'_> {
    pub(super) fn dominance_statics(&self) -> Statics {
        let ngpus = self.ngpus;
        let mut st = Statics {
            sound: true,
            ..Statics::default()
        };
        if self.inter {
            for n in 0..self.nets.len() {
                let ty = self.net_locals[n]
                    .first()
                    .map(|&g| self.path(End::Net(n), End::Gpu(g)).ty)
                    .unwrap_or(PathType::Dis);
                if ty == PathType::Dis {
                    st.sound = false;
                }
            }
        }
        let ends = self.ends();
        let mut charged = vec![false; self.link_bw.len()];
        for &a in &ends {
            for &b in &ends {
                let p = self.pinfo(a, b);
                st.any_intel_phb |= p.intel_phb;
                for l in self.plinks(p) {
                    charged[l.e as usize] = true;
                    if l.rev != u32::MAX {
                        charged[l.rev as usize] = true;
                    }
                    st.any_eighth |= l.eighth;
                    st.any_power |= l.power;
                }
            }
        }
        st.links = (0..charged.len()).filter(|&l| charged[l]).collect();
        // Cuts of each GPU's out-paths: the links at hop i of every path (every path has more
        // than i hops), for each i.
        let cuts = |g: usize, to_nets: bool| {
            let paths: Vec<super::PInfo> = ends
                .iter()
                .filter(|&&e| match e {
                    End::Gpu(p) => p != g,
                    End::Net(_) => to_nets,
                    _ => false,
                })
                .map(|&e| self.pinfo(End::Gpu(g), e))
                .filter(|p| p.count > 0 && p.ty < PathType::Dis)
                .collect();
            let hops = paths.iter().map(|p| p.count).min().unwrap_or(0);
            (0..hops)
                .map(|i| {
                    let mut v: Vec<usize> = paths
                        .iter()
                        .map(|p| self.plinks(*p)[i as usize].e as usize)
                        .collect();
                    v.sort_unstable();
                    v.dedup();
                    v
                })
                .collect::<Vec<_>>()
        };
        st.cuts = (0..ngpus).map(|g| cuts(g, true)).collect();
        st.cuts_intra = (0..ngpus).map(|g| cuts(g, false)).collect();
        let min_count = |pairs: &mut dyn Iterator<Item = (End, End)>| {
            pairs
                .map(|(a, b)| self.pinfo(a, b))
                .filter(|p| p.count > 0 && p.ty < PathType::Dis)
                .map(|p| p.count as i64)
                .min()
        };
        let gpus = || (0..ngpus).map(End::Gpu);
        let nets = || (0..self.nets.len()).map(End::Net);
        let intra = min_count(
            &mut gpus().flat_map(|a| gpus().filter(move |&b| b != a).map(move |b| (a, b))),
        );
        st.min_ring_hops = if self.inter {
            let entry = min_count(&mut nets().flat_map(|a| gpus().map(move |b| (a, b))));
            let exit = min_count(&mut gpus().flat_map(|a| nets().map(move |b| (a, b))));
            entry.unwrap_or(0) + (ngpus as i64 - 1) * intra.unwrap_or(0) + exit.unwrap_or(0)
        } else {
            ngpus as i64 * intra.unwrap_or(0)
        };
        st
    }

    /// Whether attempt `gr` (budget `budget`) is contained in an attempt that ran out of budget
    /// and provably cannot improve `save`: then it runs out of budget too, finding nothing.
    pub(super) fn dominated(&self, gr: &TopoGraph, save: &TopoGraph, budget: i32) -> bool {
        if !self.statics.sound
            || !matches!(
                gr.pattern,
                Pattern::Ring | Pattern::BalancedTree | Pattern::SplitTree | Pattern::Tree
            )
        {
            return false;
        }
        let start = self.memo.state;
        let Some(first) = self
            .memo
            .exhausted
            .iter()
            .find(|e| e.contained_in(gr, budget, start))
        else {
            return false;
        };
        let (Some(d1), Some(d2)) = (
            self.exact_amounts(gr.pattern, gr.bw_intra, gr.bw_inter),
            self.exact_amounts(first.pattern, first.bw_intra, first.bw_inter),
        ) else {
            return false;
        };
        self.exact_state(d1 && d2) && self.cannot_improve(gr, save)
    }

    /// Every link capacity exact (see [`exact_units`]), every NET bandwidth exact.
    pub(super) fn exact_state(&self, dyadic_amounts: bool) -> bool {
        self.statics
            .links
            .iter()
            .all(|&e| exact_units(self.link_bw[e], dyadic_amounts).is_some())
            && self.net_bw.iter().all(|&v| net_exact(v))
    }

    /// Whether every amount `follow_links` can charge at these speeds is on the grid (`None`
    /// if not), and whether they are all multiples of 1/8 as well.
    pub(super) fn exact_amounts(
        &self,
        pattern: Pattern,
        bw_intra: f32,
        bw_inter: f32,
    ) -> Option<bool> {
        let mut bws = vec![bw_intra, bw_inter];
        if pattern == Pattern::BalancedTree {
            bws.push(bw_inter / 2.0);
        }
        let st = &self.statics;
        let mut dyadic = true;
        let all = bws.into_iter().all(|bw| {
            let mut fws = vec![bw];
            if st.any_intel_phb {
                fws.push(bw * 6.0 / 5.0);
            }
            fws.into_iter().all(|fw| {
                let mut amounts = vec![fw];
                if st.any_eighth {
                    amounts.push(0.0 + fw / 8.0);
                }
                if st.any_power {
                    amounts.push(0.0 + fw);
                }
                if st.any_eighth && st.any_power {
                    amounts.push(0.0 + fw / 8.0 + fw);
                }
                amounts.into_iter().all(|a| {
                    let ok = grid_units(a).is_some();
                    dyadic &= dyadic_units(a).is_some();
                    ok
                })
            })
        });
        all.then_some(dyadic)
    }

    /// How many channels of `gr` can be complete at once, at most.
    pub(super) fn channel_bound(&self, gr: &Prospect) -> i64 {
        let mut k = gr.max_channels as i64;
        if self.inter {
            k = k.min(self.port_bound(gr.bw_inter as i32 as f32));
        }
        if gr.pattern == Pattern::Ring && (self.inter || self.ngpus >= 2) {
            // Every GPU sends one path per ring channel (to the next GPU or the NET), charging
            // at least the smaller speed on every hop of it. Inside one node a ring never goes
            // through a NET: only the GPU-to-GPU paths count.
            let a = grid_units(gr.bw_intra.min(gr.bw_inter)).unwrap_or(0);
            let cuts = if self.inter {
                &self.statics.cuts
            } else {
                &self.statics.cuts_intra
            };
            for fits in self.sends_fit(cuts, a) {
                k = k.min(fits);
            }
        }
        let tree = matches!(
            gr.pattern,
            Pattern::BalancedTree | Pattern::SplitTree | Pattern::Tree
        );
        if tree && self.ngpus >= 2 {
            // A tree channel chains all GPUs: ngpus - 1 GPU-to-GPU sends at the intra speed,
            // each GPU sending at most once.
            let fits = self.sends_fit(
                &self.statics.cuts_intra,
                grid_units(gr.bw_intra).unwrap_or(0),
            );
            let sends = (self.ngpus - 1) as i64;
            let mut most = 0;
            while most < k {
                let next = most + 1;
                let room: i64 = fits.iter().map(|&f| f.min(next)).sum();
                if next * sends > room {
                    break;
                }
                most = next;
            }
            k = most;
        }
        k
    }

    /// Per GPU, how many paths charging `a` thousandths each fit through the tightest of its
    /// cuts (unbounded when `a` is 0).
    fn sends_fit(&self, cuts: &[Vec<Vec<usize>>], a: i64) -> Vec<i64> {
        const UNBOUNDED: i64 = i64::MAX / 128;
        cuts.iter()
            .map(|gpu_cuts| {
                if a <= 0 {
                    return UNBOUNDED;
                }
                gpu_cuts
                    .iter()
                    .map(|cut| {
                        cut.iter()
                            .map(|&e| exact_units(self.link_bw[e], true).unwrap_or(UNBOUNDED) / a)
                            .fold(0i64, i64::saturating_add)
                    })
                    .min()
                    .unwrap_or(UNBOUNDED)
            })
            .collect()
    }

    /// Channels the NET ports can start at `bwf` each: every channel holds one charge on the
    /// port of its first NET, which lowers every NET of that port.
    fn port_bound(&self, bwf: f32) -> i64 {
        if bwf <= 0.0 {
            return i64::MAX;
        }
        let mut ports: Vec<(u64, i32, i64)> = Vec::new();
        for n in 0..self.nets.len() {
            let (mut v, mut fits) = (self.net_bw[n], 0i64);
            while v >= bwf && fits <= 64 {
                v += -bwf;
                fits += 1;
            }
            let key = (self.net_asic[n], self.net_port[n]);
            match ports.iter_mut().find(|p| (p.0, p.1) == key) {
                Some(p) => p.2 = p.2.max(fits),
                None => ports.push((key.0, key.1, fits)),
            }
        }
        ports.iter().map(|p| p.2).sum()
    }

    /// Whether no graph the attempt `gr` can build is better than `save`.
    fn cannot_improve(&self, gr: &TopoGraph, save: &TopoGraph) -> bool {
        let p = Prospect::of(gr);
        self.bound_loses(&p, self.channel_bound(&p), save)
    }

    /// Whether an attempt `p` that completes at most `k` channels at once can build nothing
    /// better than `save` (`ncclTopoCompareGraphs`).
    pub(super) fn bound_loses(&self, p: &Prospect, k: i64, save: &TopoGraph) -> bool {
        if k < p.min_channels as i64 {
            return true;
        }
        let k = k.min(i32::MAX as i64) as i32;
        let best = k as f32 * p.bw_intra;
        let saved = save.n_channels as f32 * save.bw_intra;
        if best < saved {
            return true;
        }
        if best > saved {
            return false;
        }
        // A tie at `k` channels is broken by fewer hops, with the same pattern and crossNic.
        if p.pattern != save.pattern
            || (p.cross_nic != ANY_CROSS_NIC && p.cross_nic != save.cross_nic)
        {
            return true;
        }
        p.pattern == Pattern::Ring && k as i64 * self.statics.min_ring_hops >= save.n_hops as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `SUB_ROUND` charge and refund on the grid, checked against integer thousandths.
    fn exact(r: i64, a: i64) -> bool {
        let g = |k: i64| k as f32 / 1000.0;
        let after = sub_round(g(r), g(a));
        after == g(r - a) && sub_round(after, -g(a)) == g(r)
    }

    #[test]
    fn sub_round_is_exact_on_the_grid_for_every_speed() {
        // Every per-channel speed of every release, the PHB 1.2x, the 1/8 reverse charge and
        // the balanced tree's half, against every residual from 0 to 1000 GB/s.
        let mut amounts: Vec<i64> = Vec::new();
        for v in [
            topo::NcclVersion::DEFAULT,
            topo::NcclVersion::new(2, 19, 4),
            topo::NcclVersion::OLDEST,
        ] {
            for cc in [70, 80, 90, 100] {
                let sp = crate::profile::Profile::for_version(v).speeds(cc);
                for s in sp.intra.iter().chain(sp.inter).copied() {
                    for x in [s, s / 2.0] {
                        for y in [x, x * 6.0 / 5.0] {
                            for z in [y, y / 8.0, y / 8.0 + y] {
                                if let Some(u) = grid_units(z) {
                                    amounts.push(u);
                                }
                            }
                        }
                    }
                }
            }
        }
        amounts.sort_unstable();
        amounts.dedup();
        assert!(amounts.len() > 40, "{amounts:?}");
        for &a in &amounts {
            for r in a..=1_000_000 {
                assert!(exact(r, a), "{r} - {a} thousandths");
            }
        }
    }

    proptest! {
        #[test]
        fn sub_round_is_exact_on_the_grid(a in 0i64..=1_000_000, r in 0i64..=1_000_000) {
            prop_assume!(a <= r);
            prop_assert!(exact(r, a));
        }

        #[test]
        fn sub_round_is_exact_on_eighths(a in 0i64..=64_000, r in 0i64..=64_000) {
            prop_assume!(a <= r);
            let e = |k: i64| k as f32 / 8.0;
            let after = sub_round(e(r), e(a));
            prop_assert_eq!(after, e(r - a));
            prop_assert_eq!(sub_round(after, -e(a)), e(r));
        }

        #[test]
        fn grid_units_round_trip(k in 0i64..=1_000_000) {
            prop_assert_eq!(grid_units(k as f32 / 1000.0), Some(k));
        }
    }

    #[test]
    fn off_grid_values_are_refused() {
        assert_eq!(grid_units(0.0001), None);
        assert_eq!(grid_units(1000.5), None);
        assert_eq!(grid_units(-1.0), None);
        assert_eq!(grid_units(24.0), Some(24_000));
        assert!(net_exact(12.5) && !net_exact(0.1));
        assert_eq!(dyadic_units(5000.0), Some(5_000_000));
        assert_eq!(dyadic_units(0.12), None);
        assert_eq!(exact_units(5000.0, false), None);
        assert_eq!(exact_units(5000.0, true), Some(5_000_000));
    }
}
