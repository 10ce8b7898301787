//! The search memo: answers recursion subtrees and whole attempts that provably walk the same
//! as before without improving the saved graph (no NCCL counterpart; NCCL walks them, this
//! charges NCCL's step budget with the same steps). Invariant: graphs are identical with it on
//! or off.

use super::{dominance, Pattern, Searcher, TopoGraph, FORCED_ORDER_REPLAY};

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
pub(super) struct Memo {
    /// `sum(weight * (value - start value))` over the mutable arrays: a hash of the current
    /// residual bandwidths and used flags.
    pub(super) state: u128,
    pub(super) link_w: Vec<u128>,
    pub(super) net_w: Vec<u128>,
    pub(super) used_w: Vec<u128>,
    /// Subtree key -> (budget consumed, NCCL steps taken).
    pub(super) table: rustc_hash::FxHashMap<u128, (i32, u64)>,
    /// Attempt key -> (budget left, NCCL steps taken), for attempts that did not improve.
    pub(super) attempts: rustc_hash::FxHashMap<u128, (i32, u64)>,
    /// Attempts of the current `compute` that ran out of budget.
    pub(super) exhausted: Vec<dominance::Exhausted>,
    /// Bumped whenever the saved graph improves.
    pub(super) save_gen: u64,
    /// Answer from the memo (off only to check that it changes nothing).
    pub(super) on: bool,
    /// `futile`'s static and per-state facts: whether a pattern's amounts at some speeds are
    /// exact, whether a state is, and the channel bound of a prospect from a state.
    pub(super) amounts: rustc_hash::FxHashMap<(u8, u32, u32), Option<bool>>,
    pub(super) exact: rustc_hash::FxHashMap<(u128, bool), bool>,
    pub(super) bounds: rustc_hash::FxHashMap<BoundKey, i64>,
}

/// A channel bound's key: the state hash, the pattern, both speeds (bits) and maxChannels.
pub(super) type BoundKey = (u128, u8, u32, u32, i32);

impl Memo {
    /// Account for an entry of weight `w` changing from `old` to `new` in the state hash.
    pub(super) fn account(&mut self, w: u128, old: u64, new: u64) {
        let d = (new as u128).wrapping_sub(old as u128);
        self.state = self.state.wrapping_add(w.wrapping_mul(d));
    }
}

pub(super) const TAG_LINK: u64 = 1;
pub(super) const TAG_NET: u64 = 2;
pub(super) const TAG_USED: u64 = 3;

/// A random odd 128-bit multiplier for one array entry. The state hash is
/// `sum(weight(entry) * value)` mod 2^128 (a universal hash of the value vector: two different
/// vectors collide with probability below 2^-96), updated with one multiplication per change.
pub(super) fn weight(tag: u64, index: usize) -> u128 {
    let k = mix64((tag << 48) ^ index as u64);
    let a = mix64(k ^ 0x243f_6a88_85a3_08d3);
    let b = mix64(k.wrapping_add(0x1319_8a2e_0370_7344));
    (((a as u128) << 64) | b as u128) | 1
}

/// splitmix64's finalizer.
pub(super) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fold one more value into a 128-bit key.
pub(super) fn fold(k: u128, x: u64) -> u128 {
    const M: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835;
    let k = (k ^ x as u128).wrapping_mul(M);
    k ^ (k >> 71)
}

impl Searcher<'_> {
    pub(super) fn toggle_used(&mut self, g: usize, flag: u64) {
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
    pub(super) fn memo_key(
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
}
