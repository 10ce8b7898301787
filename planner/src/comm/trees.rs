//! Binary and double binary trees over nodes (NCCL 2.30.7 `src/graph/trees.cc`, `ncclGetBtree`,
//! `ncclGetDtree`) and small integer helpers.

/// `ncclGetBtree`: (up, down0, down1, parentChildType) of `rank` in a binary tree over `n`.
pub fn btree(n: i32, rank: i32) -> (i32, i32, i32, i32) {
    let mut bit = 1;
    while bit < n {
        if bit & rank != 0 {
            break;
        }
        bit <<= 1;
    }
    if rank == 0 {
        return (-1, -1, if n > 1 { bit >> 1 } else { -1 }, 0);
    }
    let mut up = (rank ^ bit) | (bit << 1);
    if up >= n {
        up = rank ^ bit;
    }
    let ctype = if rank < up { 0 } else { 1 };
    let mut lowbit = bit >> 1;
    let d0 = if lowbit == 0 { -1 } else { rank - lowbit };
    let mut d1 = if lowbit == 0 { -1 } else { rank + lowbit };
    while d1 >= n {
        d1 = if lowbit == 0 { -1 } else { rank + lowbit };
        lowbit >>= 1;
    }
    (up, d0, d1, ctype)
}

/// `ncclGetDtree`: the two trees, each as (up, down0, down1, parentChildType).
pub fn dtree(n: i32, rank: i32) -> ((i32, i32, i32, i32), (i32, i32, i32, i32)) {
    let t0 = btree(n, rank);
    let t1 = if n % 2 == 1 {
        let shift = (rank - 1 + n) % n;
        let (u, d0, d1, ct) = btree(n, shift);
        let f = |x: i32| if x == -1 { -1 } else { (x + 1) % n };
        (f(u), f(d0), f(d1), ct)
    } else {
        let (u, d0, d1, ct) = btree(n, n - 1 - rank);
        let f = |x: i32| if x == -1 { -1 } else { n - 1 - x };
        (f(u), f(d0), f(d1), ct)
    };
    (t0, t1)
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
