//! Binary and double binary trees over nodes (NCCL 2.30.7 `src/graph/trees.cc`, `ncclGetBtree`,
//! `ncclGetDtree`) and small integer helpers.

/// One node's place in a binary tree over nodes (`ncclGetBtree`'s out-parameters); -1 where there
/// is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLinks {
    /// The parent (-1 for the root).
    pub up: i32,
    /// The first child.
    pub down0: i32,
    /// The second child.
    pub down1: i32,
    /// `parentChildType`: 0 when this node is its parent's first child (it is below the
    /// parent), 1 when it is the second.
    pub parent_child_type: i32,
}

/// `ncclGetDtree`'s two trees for one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoubleTree {
    /// Tree 0: `ncclGetBtree` itself.
    pub tree0: TreeLinks,
    /// Tree 1: tree 0 mirrored (even node counts) or shifted by one (odd).
    pub tree1: TreeLinks,
}

/// `ncclGetBtree`: the links of `rank` in a binary tree over `n` nodes.
pub fn btree(n: i32, rank: i32) -> TreeLinks {
    let mut bit = 1;
    while bit < n {
        if bit & rank != 0 {
            break;
        }
        bit <<= 1;
    }
    if rank == 0 {
        return TreeLinks {
            up: -1,
            down0: -1,
            down1: if n > 1 { bit >> 1 } else { -1 },
            parent_child_type: 0,
        };
    }
    let mut up = (rank ^ bit) | (bit << 1);
    if up >= n {
        up = rank ^ bit;
    }
    let parent_child_type = if rank < up { 0 } else { 1 };
    let mut lowbit = bit >> 1;
    let down0 = if lowbit == 0 { -1 } else { rank - lowbit };
    let mut down1 = if lowbit == 0 { -1 } else { rank + lowbit };
    while down1 >= n {
        down1 = if lowbit == 0 { -1 } else { rank + lowbit };
        lowbit >>= 1;
    }
    TreeLinks {
        up,
        down0,
        down1,
        parent_child_type,
    }
}

/// `ncclGetDtree`: the two trees of `rank` over `n` nodes.
pub fn dtree(n: i32, rank: i32) -> DoubleTree {
    let tree0 = btree(n, rank);
    let (t, f): (TreeLinks, &dyn Fn(i32) -> i32) = if n % 2 == 1 {
        (btree(n, (rank - 1 + n) % n), &|x| (x + 1) % n)
    } else {
        (btree(n, n - 1 - rank), &|x| n - 1 - x)
    };
    let map = |x: i32| if x == -1 { -1 } else { f(x) };
    DoubleTree {
        tree0,
        tree1: TreeLinks {
            up: map(t.up),
            down0: map(t.down0),
            down1: map(t.down1),
            parent_child_type: t.parent_child_type,
        },
    }
}

/// `log2i`: floor of log2 (0 for 0 and 1).
pub(super) fn log2i(n: usize) -> usize {
    let mut l = 0;
    let mut n = n;
    while n > 1 {
        n >>= 1;
        l += 1;
    }
    l
}

/// `pow2Up`: the smallest power of two >= `x` (1 for 0).
pub(super) fn pow2_up(x: usize) -> usize {
    x.max(1).next_power_of_two()
}

/// `pow2Down`: the largest power of two <= `x` (0 for 0).
pub(super) fn pow2_down(x: usize) -> usize {
    if x == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - x.leading_zeros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(up: i32, down0: i32, down1: i32, parent_child_type: i32) -> TreeLinks {
        TreeLinks {
            up,
            down0,
            down1,
            parent_child_type,
        }
    }

    /// The 16-node example drawn in NCCL's `trees.cc`: 0 -> 8 -> {4, 12} -> {2, 6, 10, 14} ->
    /// odd leaves.
    #[test]
    fn btree_is_the_one_drawn_in_trees_cc() {
        assert_eq!(btree(16, 0), links(-1, -1, 8, 0));
        assert_eq!(btree(16, 8), links(0, 4, 12, 1));
        assert_eq!(btree(16, 4), links(8, 2, 6, 0));
        assert_eq!(btree(16, 12), links(8, 10, 14, 1));
        assert_eq!(btree(16, 6), links(4, 5, 7, 1));
        assert_eq!(btree(16, 1), links(2, -1, -1, 0));
        assert_eq!(btree(16, 15), links(14, -1, -1, 1));
        assert_eq!(btree(1, 0), links(-1, -1, -1, 0));
        // Non-powers of two: a child beyond n is pulled in.
        assert_eq!(btree(6, 4), links(0, 2, 5, 1));
    }

    /// Every node but the root has a parent that lists it as the child its type names; every
    /// node is reached from the root.
    fn check_tree(n: i32, t: impl Fn(i32) -> TreeLinks) {
        let mut roots = 0;
        for r in 0..n {
            let l = t(r);
            if l.up == -1 {
                roots += 1;
                continue;
            }
            let p = t(l.up);
            assert!(
                p.down0 == r || p.down1 == r,
                "n={n} rank {r} parent {}",
                l.up
            );
            for d in [l.down0, l.down1] {
                if d != -1 {
                    assert_eq!(t(d).up, r, "n={n} rank {r} child {d}");
                }
            }
        }
        assert_eq!(roots, 1, "n={n}");
    }

    #[test]
    fn both_trees_are_trees_for_every_size() {
        for n in 1..=40 {
            check_tree(n, |r| btree(n, r));
            check_tree(n, |r| dtree(n, r).tree0);
            check_tree(n, |r| dtree(n, r).tree1);
        }
    }

    #[test]
    fn dtree_mirrors_even_and_shifts_odd() {
        // Even: tree 1 is tree 0 with rank r renamed n-1-r.
        let d = dtree(16, 15);
        assert_eq!(d.tree1, links(-1, -1, 7, 0));
        assert_eq!(dtree(16, 7).tree1, links(15, 11, 3, 1));
        // Even counts: a leaf of one tree is inside the other (the point of two trees).
        for r in 0..16 {
            let t = dtree(16, r);
            let leaf = |l: TreeLinks| l.down0 == -1 && l.down1 == -1;
            assert!(!(leaf(t.tree0) && leaf(t.tree1)), "rank {r}");
        }
        // Odd: tree 1 is tree 0 of rank r-1, renumbered +1.
        let t0 = btree(5, 2);
        let d = dtree(5, 3);
        let inc = |x: i32| if x == -1 { -1 } else { (x + 1) % 5 };
        assert_eq!(
            d.tree1,
            links(
                inc(t0.up),
                inc(t0.down0),
                inc(t0.down1),
                t0.parent_child_type
            )
        );
    }
}
