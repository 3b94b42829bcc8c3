//! Isolated free blocks: the last few freed areas that had no free
//! neighbour, kept in a small sorted array instead of the free tree.
//!
//! A freed area between two live (or lazily freed) areas merges with
//! nothing, so it is already a maximal free block: it can wait here, out of
//! the tree, and an allocation that takes it back never touches the tree's
//! nodes. That is the common case of a churning workload (steady-page,
//! fix-size over holes): in the tree, each such pair would insert one block
//! and remove it again, and when that block is the only one long enough,
//! its length would go up and down every level of the tree.
//!
//! The answers stay the exact lowest fit: an allocation takes the lowest
//! isolated block that fits, at `b`, only after the tree's own search
//! finds nothing at an address below `b` (a search whose window ends at
//! `b - 1 + size`, which the maxima usually rule out at the root).
//!
//! Invariants (checked by the allocator's `check`): at most [`CAP`]
//! blocks, sorted by start, none empty; no free block (in the tree, the
//! wilderness or here) is adjacent to one of them. Every operation that
//! creates free space takes the isolated blocks it touches out of the array
//! first and merges them in, so the invariant holds after it. This is
//! mmkit's own; the kernel keeps every free block in its tree.

use crate::balance::Balance;

/// What a block taken back from the array earns and what one pushed out
/// unused costs (see [`Balance`]): a block taken back saves an
/// insertion into the tree and a removal from it (about 2,000
/// instructions on fix-size-holes at 10^5), one pushed out costs the
/// descent that finds its place in the tree (a few hundred), so the array
/// pays while more than one block in four comes back.
const EARNED: i32 = 192;
const WASTED: i32 = 64;

/// Isolated blocks kept, at most. Each allocation scans them in address
/// order, so a few: more only hold blocks at high addresses, which the
/// lowest fit rarely reaches.
pub(crate) const CAP: usize = 8;

/// Up to [`CAP`] free blocks, sorted by start, and whether keeping them has
/// paid lately.
#[derive(Debug, Clone)]
pub(crate) struct Isolated {
    start: [u64; CAP],
    end: [u64; CAP],
    len: usize,
    /// [`EARNED`] per block taken back, less [`WASTED`] per block pushed
    /// out unused; new blocks are kept only while it is not negative. A
    /// refused block adds 1, so a workload that changes is noticed: on
    /// random sizes most blocks are pushed out unused (random-size at
    /// 10^3: 15% taken back) and the array stays nearly idle.
    balance: Balance,
}

impl Isolated {
    pub(crate) const fn new() -> Self {
        Isolated {
            start: [0; CAP],
            end: [0; CAP],
            len: 0,
            balance: Balance::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The blocks in address order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.len).map(|i| (self.start[i], self.end[i]))
    }

    /// The longest block's length (0 when empty).
    pub(crate) fn largest(&self) -> u64 {
        self.iter().map(|(s, e)| e - s).max().unwrap_or(0)
    }

    /// The lowest `a` in `[lo, hi)`, a multiple of `align`, with
    /// `[a, a + size)` inside one block, and that block's index `i`; or
    /// none, and `i` the count of blocks starting below `hi`. Either way
    /// the first `i` blocks were looked at and cannot hold the request.
    #[inline(always)]
    pub(crate) fn lowest_fit(
        &self,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
    ) -> (usize, Option<u64>) {
        for i in 0..self.len {
            let (s, e) = (self.start[i], self.end[i]);
            if s >= hi {
                return (i, None); // this and every later block start too high
            }
            if let Some(a) = crate::range::fit_in(s.max(lo), e.min(hi), size, align) {
                return (i, Some(a));
            }
        }
        (self.len, None)
    }

    /// The best fit among the blocks: in the shortest block that holds
    /// `size` bytes at a multiple of `align` inside `[lo, hi)`, the lowest
    /// such address, the lowest block among equals; as `(index, length,
    /// start, address)`. Also the blocks that cannot hold the request, as
    /// a mask of their indexes (for [`take_misses`](Self::take_misses)).
    #[inline]
    pub(crate) fn best_fit(
        &self,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
    ) -> (Option<(usize, u64, u64, u64)>, u32) {
        let mut best: Option<(usize, u64, u64, u64)> = None;
        let mut misses = 0;
        for i in 0..self.len {
            let (s, e) = (self.start[i], self.end[i]);
            match crate::range::fit_in(s.max(lo), e.min(hi), size, align) {
                // In address order: an equal length is no better.
                Some(a) if best.map_or(true, |b| e - s < b.1) => best = Some((i, e - s, s, a)),
                Some(_) => {}
                None => misses |= 1 << i,
            }
        }
        (best, misses)
    }

    /// Takes out the blocks of `mask` ([`best_fit`](Self::best_fit)'s
    /// misses), returning them in address order: they would only be
    /// looked at again, and would keep blocks that may come back out of
    /// the array.
    pub(crate) fn take_misses(&mut self, mask: u32) -> impl Iterator<Item = (u64, u64)> {
        let mut out = [(0, 0); CAP];
        let (mut n, mut kept) = (0, 0);
        for i in 0..self.len {
            let (s, e) = (self.start[i], self.end[i]);
            if mask & (1 << i) == 0 {
                self.start[kept] = s;
                self.end[kept] = e;
                kept += 1;
            } else {
                out[n] = (s, e);
                n += 1;
            }
        }
        self.len = kept;
        // n <= CAP: no overflow.
        self.balance.lose(WASTED * n as i32);
        out.into_iter().take(n)
    }

    /// Takes out the blocks adjacent to `[s, e)` (one ending at `s`, one
    /// starting at `e`) and returns `[s, e)` joined with them.
    #[inline]
    pub(crate) fn take_adjacent(&mut self, s: u64, e: u64) -> (u64, u64) {
        if self.len == 0 {
            return (s, e); // the common case while the array does not pay
        }
        let (mut js, mut je) = (s, e);
        // Sorted and disjoint from [s, e): the block ending at `s`, if any,
        // is the last one starting below `s`, and the next one is the only
        // one that can start at `e`.
        let i = self.start[..self.len].partition_point(|&x| x < s);
        if i < self.len && self.start[i] == e {
            je = self.end[i];
            self.remove(i);
        }
        if i > 0 && self.end[i - 1] == s {
            js = self.start[i - 1];
            self.remove(i - 1);
        }
        (js, je)
    }

    /// Inserts `[s, e)` in address order; false (and the blocks are
    /// unchanged) when the array is full or has not paid lately. A
    /// newcomer does not push an older block out: that block would cost a
    /// descent of the tree to go in, where the newcomer's place is
    /// already known.
    #[inline]
    pub(crate) fn push(&mut self, s: u64, e: u64) -> bool {
        if !self.balance.admits() {
            return false;
        }
        if self.len == CAP {
            return false;
        }
        let i = self.start[..self.len].partition_point(|&x| x < s);
        self.insert(i, s, e);
        true
    }

    /// Takes out the first `n` blocks, returning them in address order:
    /// blocks an allocation looked at and could not use, which would only
    /// be looked at again (in the tree, the maxima rule them out).
    pub(crate) fn push_out(&mut self, n: usize) -> impl Iterator<Item = (u64, u64)> {
        // n <= CAP: no overflow.
        self.balance.lose(WASTED * n as i32);
        self.take_first(n)
    }

    fn take_first(&mut self, n: usize) -> impl Iterator<Item = (u64, u64)> {
        let (start, end) = (self.start, self.end);
        for _ in 0..n {
            self.remove(0);
        }
        (0..n).map(move |i| (start[i], end[i]))
    }

    /// Cuts `[a, a + size)` out of block `i`, which holds it. A cut in the
    /// middle leaves two blocks: if the array is full, the upper one is
    /// returned instead of kept.
    #[inline]
    pub(crate) fn cut(&mut self, i: usize, a: u64, size: u64) -> Option<(u64, u64)> {
        self.balance.earn(EARNED);
        let (s, e) = (self.start[i], self.end[i]);
        let top = a + size;
        match (a == s, top == e) {
            (true, true) => {
                // The last block (the usual one: an array of one) is
                // dropped in place, with no call.
                match i + 1 == self.len {
                    true => self.len -= 1,
                    false => self.remove(i),
                }
                None
            }
            (true, false) => {
                self.start[i] = top;
                None
            }
            (false, true) => {
                self.end[i] = a;
                None
            }
            (false, false) => {
                self.end[i] = a;
                (!self.push(top, e)).then_some((top, e))
            }
        }
    }

    /// Empties the array, returning its blocks in address order.
    pub(crate) fn take_all(&mut self) -> impl Iterator<Item = (u64, u64)> {
        self.take_first(self.len)
    }

    // The shifts are tested for nothing to move first: the usual case (an
    // array of one block), where a `memmove` call would cost more.
    #[inline(always)]
    fn insert(&mut self, i: usize, s: u64, e: u64) {
        let n = self.len;
        if i < n {
            self.start.copy_within(i..n, i + 1);
            self.end.copy_within(i..n, i + 1);
        }
        self.start[i] = s;
        self.end[i] = e;
        self.len += 1;
    }

    fn remove(&mut self, i: usize) {
        let n = self.len;
        if i + 1 < n {
            self.start.copy_within(i + 1..n, i);
            self.end.copy_within(i + 1..n, i);
        }
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn blocks(x: &Isolated) -> Vec<(u64, u64)> {
        x.iter().collect()
    }

    #[test]
    fn push_keeps_order_and_refuses_when_full() {
        let mut x = Isolated::new();
        for k in (0..CAP as u64).rev() {
            assert!(x.push(10 * k + 20, 10 * k + 25));
        }
        assert_eq!(x.len(), CAP);
        assert!(blocks(&x).windows(2).all(|w| w[0].1 < w[1].0));
        let before = blocks(&x);
        assert!(!x.push(0, 5));
        assert_eq!(blocks(&x), before);
        assert_eq!(x.push_out(2).collect::<Vec<_>>(), before[..2]);
        assert_eq!(blocks(&x), before[2..]);
    }

    #[test]
    fn blocks_pushed_out_unused_stop_new_ones_for_a_while() {
        let mut x = Isolated::new();
        assert!(x.push(0, 10));
        assert_eq!(x.push_out(1).count(), 1);
        // WASTED refusals, then kept again.
        for _ in 0..WASTED {
            assert!(!x.push(0, 10));
        }
        assert!(x.is_empty());
        assert!(x.push(0, 10));
        // A block taken back earns room for EARNED / WASTED unused ones.
        assert_eq!(x.cut(0, 0, 10), None);
        for _ in 0..EARNED / WASTED {
            assert!(x.push(0, 10));
            assert_eq!(x.push_out(1).count(), 1);
        }
        // The balance is spent: the next block is kept, and pushed out
        // unused it stops new ones again.
        assert!(x.push(0, 10));
        assert_eq!(x.push_out(1).count(), 1);
        assert!(!x.push(0, 10));
    }

    #[test]
    fn lowest_fit_is_the_first_block_that_fits() {
        let mut x = Isolated::new();
        x.push(100, 103);
        x.push(10, 12);
        x.push(200, 300);
        assert_eq!(x.lowest_fit(2, 1, 0, u64::MAX), (0, Some(10)));
        assert_eq!(x.lowest_fit(3, 1, 0, u64::MAX), (1, Some(100)));
        assert_eq!(x.lowest_fit(2, 4, 0, u64::MAX), (1, Some(100)));
        assert_eq!(x.lowest_fit(3, 64, 0, u64::MAX), (2, Some(256)));
        assert_eq!(x.lowest_fit(3, 1, 0, 250), (1, Some(100)));
        assert_eq!(x.lowest_fit(3, 1, 101, 250), (2, Some(200)));
        assert_eq!(x.lowest_fit(3, 1, 0, 102), (2, None));
        assert_eq!(x.lowest_fit(101, 1, 0, u64::MAX), (3, None));
    }

    #[test]
    fn best_fit_is_the_shortest_block_that_fits_the_lowest_among_equals() {
        let mut x = Isolated::new();
        x.push(100, 110);
        x.push(10, 13);
        x.push(200, 203);
        x.push(300, 350);
        let best = |size, align, lo, hi| x.best_fit(size, align, lo, hi).0;
        assert_eq!(best(2, 1, 0, u64::MAX), Some((0, 3, 10, 10)));
        assert_eq!(best(3, 1, 0, u64::MAX), Some((0, 3, 10, 10)));
        assert_eq!(best(3, 1, 11, u64::MAX), Some((2, 3, 200, 200)));
        assert_eq!(best(2, 4, 0, u64::MAX), Some((2, 3, 200, 200)));
        assert_eq!(best(5, 4, 0, u64::MAX), Some((1, 10, 100, 100)));
        assert_eq!(best(3, 64, 0, u64::MAX), Some((3, 50, 300, 320)));
        assert_eq!(best(4, 1, 0, 120), Some((1, 10, 100, 100)));
        assert_eq!(best(51, 1, 0, u64::MAX), None);
        assert_eq!(x.best_fit(4, 1, 0, u64::MAX).1, 0b0101);
        assert_eq!(x.best_fit(3, 64, 0, u64::MAX).1, 0b0111);
    }

    #[test]
    fn take_misses_keeps_the_blocks_that_hold_the_request() {
        let mut x = Isolated::new();
        x.push(0, 1);
        x.push(10, 13);
        x.push(20, 21);
        x.push(32, 35);
        let (_, misses) = x.best_fit(3, 1, 0, u64::MAX);
        let out: Vec<_> = x.take_misses(misses).collect();
        assert_eq!(out, [(0, 1), (20, 21)]);
        assert_eq!(blocks(&x), [(10, 13), (32, 35)]);
        let (_, misses) = x.best_fit(2, 16, 0, u64::MAX);
        let out: Vec<_> = x.take_misses(misses).collect();
        assert_eq!(out, [(10, 13)]);
        assert_eq!(blocks(&x), [(32, 35)]);
        // Three blocks given up unused: new ones are refused for a while.
        assert!(!x.push(40, 41));
    }

    #[test]
    fn take_adjacent_joins_both_sides() {
        let mut x = Isolated::new();
        x.push(0, 10);
        x.push(20, 30);
        x.push(40, 50);
        assert_eq!(x.take_adjacent(10, 20), (0, 30));
        assert_eq!(blocks(&x), [(40, 50)]);
        assert_eq!(x.take_adjacent(30, 40), (30, 50));
        assert!(x.is_empty());
        x.push(0, 10);
        assert_eq!(x.take_adjacent(11, 12), (11, 12));
        assert_eq!(x.len(), 1);
    }

    #[test]
    fn cut_leaves_the_remainders() {
        let mut x = Isolated::new();
        x.push(0, 100);
        assert_eq!(x.cut(0, 0, 10), None);
        assert_eq!(blocks(&x), [(10, 100)]);
        assert_eq!(x.cut(0, 90, 10), None);
        assert_eq!(blocks(&x), [(10, 90)]);
        assert_eq!(x.cut(0, 40, 10), None);
        assert_eq!(blocks(&x), [(10, 40), (50, 90)]);
        assert_eq!(x.cut(1, 50, 40), None);
        assert_eq!(blocks(&x), [(10, 40)]);
        // A middle cut of a full array hands the upper part back.
        let mut x = Isolated::new();
        for k in 0..CAP as u64 {
            x.push(100 * k, 100 * k + 50);
        }
        assert_eq!(x.cut(0, 10, 10), Some((20, 50)));
        assert_eq!(blocks(&x)[..2], [(0, 10), (100, 150)]);
        assert_eq!(x.take_all().count(), CAP);
        assert!(x.is_empty());
    }
}
