//! A set of disjoint `u64` ranges with byte accounting (the arena's freed-but-committed pages).

use std::collections::BTreeMap;

/// Disjoint, coalesced ranges `[start, start + len)`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IntervalSet {
    /// start -> len.
    ranges: BTreeMap<u64, u64>,
    total: u64,
}

impl IntervalSet {
    /// Bytes covered.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Adds `[start, start + len)`, merging with what it touches or overlaps.
    pub fn insert(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        self.remove(start, len);
        let (mut s, mut e) = (start, start + len);
        if let Some((&ps, &pl)) = self.ranges.range(..s).next_back() {
            if ps + pl == s {
                self.ranges.remove(&ps);
                s = ps;
            }
        }
        if let Some(nl) = self.ranges.remove(&e) {
            e += nl;
        }
        self.ranges.insert(s, e - s);
        self.total += len;
    }

    /// Removes `[start, start + len)`; returns the bytes that were covered.
    pub fn remove(&mut self, start: u64, len: u64) -> u64 {
        let end = start + len;
        let hit: Vec<(u64, u64)> = self
            .ranges
            .range(..end)
            .rev()
            .take_while(|(&s, &l)| s + l > start)
            .map(|(&s, &l)| (s, l))
            .collect();
        let mut removed = 0;
        for (s, l) in hit {
            self.ranges.remove(&s);
            let e = s + l;
            if s < start {
                self.ranges.insert(s, start - s);
            }
            if e > end {
                self.ranges.insert(end, e - end);
            }
            removed += e.min(end) - s.max(start);
        }
        self.total -= removed;
        removed
    }

    /// The parts of `[start, start + len)` the set does not cover, in order, as (start, len).
    pub fn gaps(&self, start: u64, len: u64) -> Vec<(u64, u64)> {
        let end = start.saturating_add(len);
        let mut out = Vec::new();
        let mut at = start;
        // The range starting before `start` that may reach into it, then those inside.
        let before = self.ranges.range(..start).next_back();
        for (&s, &l) in before.into_iter().chain(self.ranges.range(start..end)) {
            if s > at {
                out.push((at, s.min(end) - at));
            }
            at = at.max(s + l);
            if at >= end {
                return out;
            }
        }
        if at < end {
            out.push((at, end - at));
        }
        out
    }

    /// Empties the set, returning its ranges as (start, len).
    pub fn take(&mut self) -> Vec<(u64, u64)> {
        self.total = 0;
        std::mem::take(&mut self.ranges).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_coalesces_and_remove_splits() {
        let mut s = IntervalSet::default();
        s.insert(0, 10);
        s.insert(10, 5);
        s.insert(20, 5);
        assert_eq!(s.total(), 20);
        assert_eq!(s.remove(5, 17), 12); // 5..15 and 20..22
        assert_eq!(s.total(), 8);
        assert_eq!(s.take(), vec![(0, 5), (22, 3)]);
        assert_eq!(s.total(), 0);
        s.insert(0, 10);
        s.insert(5, 10); // overlapping insert counts the new bytes once
        assert_eq!(s.total(), 15);
        assert_eq!(s.remove(100, 5), 0);
        assert_eq!(s.take(), vec![(0, 15)]);
    }

    #[test]
    fn gaps_are_the_uncovered_parts() {
        let mut s = IntervalSet::default();
        assert_eq!(s.gaps(5, 10), vec![(5, 10)]);
        s.insert(0, 10);
        s.insert(20, 5);
        s.insert(30, 5);
        assert_eq!(s.gaps(0, 10), vec![]);
        assert_eq!(s.gaps(5, 30), vec![(10, 10), (25, 5)]);
        assert_eq!(s.gaps(22, 20), vec![(25, 5), (35, 7)]);
        assert_eq!(s.gaps(12, 3), vec![(12, 3)]);
    }
}
