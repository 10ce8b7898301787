//! Ending a pass of the search once nothing left in it can change the graph.
//!
//! NCCL 2.30.7's `ncclTopoCompute` keeps searching until a step budget runs out, but what it
//! returns is only the saved graph. Most of the budget on a multi-node DGX goes to attempts that
//! cannot beat the graph already saved: once the first ring attempt at 24 GB/s found 8 channels
//! with the fewest hops a channel can have, every later attempt (other path types, crossNic 2,
//! lower speeds) is bounded by the 8 NIC ports to at most a tie, and a tie does not replace the
//! saved graph. Walking them only decides *when* the pass stops, and that does not matter here:
//!
//! - **Pass 1** ends in `done`, which resets the time to -1 and restarts from the saved graph
//!   alone (duplicated channels, speeds from its bandwidth). The global budget, the left-over
//!   time and the point where the relaxations stop all lead to the same place if no attempt
//!   before it changes the graph.
//! - **Pass 2** raises speeds while attempts keep improving; a ring attempt that does not
//!   improve stops it or leads to one at a higher speed, a tree attempt that does not improve
//!   stops it (its intra speed then differs from the graph's). If neither the current attempt
//!   nor any higher speed can improve the graph, the pass ends with the graph it has.
//!
//! So before each attempt, and whenever an attempt improves the saved graph, the search lists
//! every attempt the relaxation loop could still make ([`Prospect`]s: the current one, the other
//! patterns, every crossNic, every speed the loop may reach, including the 0.49 rule in pass 1)
//! and bounds the channels each can complete at once from the state the attempt starts from
//! ([`Searcher::channel_bound`]: NET ports, per-GPU cuts of the paths). If every one of them
//! loses to the saved graph ([`Searcher::bound_loses`]: fewer channels times speed, or a tie
//! that `ncclTopoCompareGraphs` does not take), the pass ends now. An attempt in progress is
//! abandoned by emptying its budget; nothing on the way back up the recursion touches the
//! saved graph.
//!
//! Like the dominance argument, the bounds need exact arithmetic (every capacity and amount on
//! the `SUB_ROUND` grid); anywhere else the search walks on. NVLS and CollNet Direct are left
//! out (their graphs compare differently). The NCCL step count ([`Searcher::steps`]) no longer
//! includes the steps of the attempts skipped this way.

use super::dominance::{Prospect, ANY_CROSS_NIC};
use super::Searcher;
use crate::graph::{Pattern, TopoGraph};

/// Attempts a pass may still make, each with the most channels it can complete at once.
pub(super) type Outlook = Vec<(Prospect, i64)>;

/// Where the relaxation loop of `ncclTopoCompute` stands.
pub(super) struct LoopState<'s> {
    pub(super) pass: i32,
    pub(super) speeds: &'s [f32],
    pub(super) speed_index: usize,
    pub(super) cc_min: i32,
}

impl Searcher<'_> {
    /// Every attempt the loop can still make from here (`tmp` is the next one), bounded from
    /// the current state; `None` where the bounds do not apply.
    pub(super) fn outlook(
        &mut self,
        tmp: &TopoGraph,
        graph: &TopoGraph,
        at: &LoopState,
    ) -> Option<Outlook> {
        let covered = |p: Pattern| {
            matches!(
                p,
                Pattern::Ring | Pattern::BalancedTree | Pattern::SplitTree | Pattern::Tree
            )
        };
        if !covered(tmp.pattern) || !covered(graph.pattern) {
            return None;
        }
        let mut out = vec![Prospect::of(tmp)];
        let (speeds, si) = (at.speeds, at.speed_index);
        if at.pass == 1 {
            let mut patterns = vec![tmp.pattern];
            if graph.pattern != tmp.pattern {
                patterns.push(graph.pattern);
            }
            if at.cc_min >= 90
                && graph.pattern == Pattern::BalancedTree
                && !patterns.contains(&Pattern::Tree)
            {
                patterns.push(Pattern::Tree);
            }
            // Lower speeds are tried while they stay above 0.49 of the saved graph's.
            let reach = |j: usize| graph.n_channels == 0 || speeds[j] / graph.bw_inter > 0.49;
            for (j, &s) in speeds.iter().enumerate().skip(si) {
                if j > si && !reach(j) {
                    break;
                }
                for &pattern in &patterns {
                    out.push(Prospect {
                        pattern,
                        cross_nic: ANY_CROSS_NIC,
                        bw_intra: s,
                        bw_inter: s,
                        ..Prospect::of(tmp)
                    });
                }
            }
        } else {
            // Pass 2 only raises speeds: both for rings, the intra one for trees.
            for &s in &speeds[..si] {
                let bw_inter = if tmp.pattern == Pattern::Ring {
                    s
                } else {
                    tmp.bw_inter
                };
                out.push(Prospect {
                    bw_intra: s,
                    bw_inter,
                    ..Prospect::of(tmp)
                });
            }
        }
        // Exactness of the amounts is static, that of a state and the bounds from it depend
        // on the state only: all remembered across attempts. A state exact on the grid alone
        // needs every amount on the grid; otherwise every amount must also be a multiple of 1/8
        // (checked first, so that a hopeless case is refused after one look-up).
        let state = self.memo.state;
        let grid_state = self.state_exact(state, false);
        for p in &out {
            let key = (
                p.pattern.number() as u8,
                p.bw_intra.to_bits(),
                p.bw_inter.to_bits(),
            );
            let exact = match self.memo.amounts.get(&key) {
                Some(&e) => e,
                None => {
                    let e = self.exact_amounts(p.pattern, p.bw_intra, p.bw_inter);
                    self.memo.amounts.insert(key, e);
                    e
                }
            };
            let dyadic = exact?;
            if !grid_state && !dyadic {
                return None;
            }
        }
        if !grid_state && !self.state_exact(state, true) {
            return None;
        }
        let mut bounded = Vec::with_capacity(out.len());
        for p in out {
            let key = (
                state,
                p.pattern.number() as u8,
                p.bw_intra.to_bits(),
                p.bw_inter.to_bits(),
                p.max_channels,
            );
            let k = match self.memo.bounds.get(&key) {
                Some(&k) => k,
                None => {
                    let k = self.channel_bound(&p);
                    self.memo.bounds.insert(key, k);
                    k
                }
            };
            bounded.push((p, k));
        }
        Some(bounded)
    }

    /// [`Searcher::exact_state`] of the state with hash `state`, remembered.
    fn state_exact(&mut self, state: u128, dyadic: bool) -> bool {
        if let Some(&e) = self.memo.exact.get(&(state, dyadic)) {
            return e;
        }
        let e = self.exact_state(dyadic);
        self.memo.exact.insert((state, dyadic), e);
        e
    }

    /// Whether no attempt of `outlook` can build a graph better than `save`.
    pub(super) fn hopeless(&self, outlook: &Outlook, save: &TopoGraph) -> bool {
        outlook.iter().all(|(p, k)| self.bound_loses(p, *k, save))
    }
}
