//! The size index and the best-fit search: the tree's blocks, the
//! wilderness included, ordered by `(length, start)` beside the address
//! order of the nodes.
//!
//! ```text
//!   address order (nodes):  [0,4) [10,26) [40,48) [60,62) ... wild [200,4096)
//!   size index:             (2,60) (4,0) (8,40) (16,10) ... (3896,200)
//! ```
//!
//! While the length classes are on (`classes.rs`: from the index's first
//! use until a best fit they cannot answer), the index files only the
//! blocks longer than the classes reach, and the classes answer the
//! rest.
//!
//! The index is built the first time a best-fit search asks for it
//! ([`BTree::best_fit`]) and kept from then on: every public change to the
//! blocks (`update.rs`) replaces the entries of the blocks it removed,
//! shrank or grew. Moves between nodes (splits, borrows, merges of
//! siblings, the wilderness taken from the highest leaf) change no block
//! and touch no entry. A tree that is never asked for a best fit keeps no
//! index and pays one branch per change.
//!
//! An aligned request (above the granule floor, no window) searches the
//! same index by its *lanes* (`size_tree.rs`), kept from the first such
//! request on, in granules of the tree's floor (computed again when the
//! floor falls): each inner entry bounds, at ten alignments at once, the
//! usable lengths `e - align_up(s, 2^k)` below it. The best fit is the
//! first block from `(size, 0)` whose usable length is at least the size,
//! and the lanes let the search skip every subtree of blocks long enough
//! but wrongly aligned, where a plain walk would read each of them. A
//! block change costs the one index its remove and insert, whatever the
//! alignments in use.
//!
//! The index is a [`SizeTree`] (`size_tree.rs`) whose nodes come from
//! the address tree's own pools: a steady state of best fits allocates no
//! heap memory, and on fixed storage the index takes its nodes from the
//! same arrays as the tree (about as many as the tree's again). When they
//! have no room for it, a best fit scans the blocks.

use alloc::vec::Vec;

use super::classes::beyond_classes;
use super::size_tree::{SizeIter, SizeTree};
use super::{BTree, Pos, INNER_MIN, LEAF_MIN};
use crate::error::CheckError;
use crate::range::fit_in;
use crate::storage::Storage;

impl<S: Storage> BTree<S> {
    /// Whether the size index is kept.
    pub fn has_size_index(&self) -> bool {
        self.by_size.is_some()
    }

    /// Builds the size index from the blocks, if it is not kept yet and
    /// the storage has room for it; whether it is kept now. On fixed
    /// storage the index takes its nodes from the same arrays as the
    /// address tree, about as many as the tree holds.
    ///
    /// # Complexity
    /// O(n log n) the first time, O(1) after.
    #[inline]
    pub fn enable_size_index(&mut self) -> bool {
        if self.by_size.is_none() {
            self.build_size_index();
        }
        self.by_size.is_some()
    }

    /// [`enable_size_index`](Self::enable_size_index)'s first time.
    #[inline(never)]
    fn build_size_index(&mut self) {
        if self.has_room_for_index() {
            self.classes_on();
            let g = self.floor;
            let mut ix = SizeTree::new(&mut self.leaves);
            self.index_all(&mut ix, |s, e| {
                beyond_classes(e - s, g).then_some((e - s, s))
            });
            self.by_size = Some(ix);
        }
    }

    /// Files every block in `t` as `key` says (`None`: not at all), one
    /// lookup per block: an index being built takes nodes from the pools
    /// a walk would read, and a list of the blocks would need the heap.
    pub(super) fn index_all(
        &mut self,
        t: &mut SizeTree,
        key: impl Fn(u64, u64) -> Option<(u64, u64)>,
    ) {
        let mut at = 0;
        while let Some((s, e)) = self.iter_from(at).find(|&(s, _)| s >= at) {
            if let Some(k) = key(s, e) {
                t.insert(&mut self.leaves, &mut self.inners, k);
            }
            at = e;
        }
    }

    /// Whether the pools have room for one more index of every block, and
    /// the updates of the indexes kept then.
    fn has_room_for_index(&self) -> bool {
        // Every leaf but the root holds LEAF_MIN entries or more, and every
        // inner node but the root INNER_MIN children or more.
        let leaves = (self.len / LEAF_MIN).max(1);
        let (mut level, mut inners) = (leaves, 0);
        while level > 1 {
            level = (level / INNER_MIN).max(1);
            inners += level;
        }
        let (l, i) = self.index_room(1);
        self.leaves.has_room(leaves + l) && self.inners.has_room(inners + i)
    }

    /// Nodes the index kept (and `extra` more) may take for one more
    /// block: each block change removes an entry and inserts up to two,
    /// and an insert splits a leaf and an inner node per level (a new
    /// root included, so one level more for the second) at most.
    pub(super) fn index_room(&self, extra: usize) -> (usize, usize) {
        let kept = usize::from(self.by_size.is_some()) + extra;
        let height = self.by_size.map_or(0, |t| t.height());
        (2 * kept, 2 * kept * (height + 2))
    }

    /// Whether the size index, when kept, files a block `len` long: every
    /// block, or while the length classes are on, those beyond them.
    #[inline]
    fn indexes(&self, len: u64) -> bool {
        self.class_granule()
            .map_or(true, |g| beyond_classes(len, g))
    }

    /// Files `[s, e)` in the size index, if kept and it files the block.
    #[inline]
    pub(super) fn index_block(&mut self, s: u64, e: u64) {
        let filed = self.indexes(e - s);
        if let Some(ix) = self.by_size.as_mut().filter(|_| filed) {
            ix.insert(&mut self.leaves, &mut self.inners, (e - s, s));
        }
    }

    /// Drops `[s, e)` from the size index, if kept and it files the block.
    #[inline]
    pub(super) fn unindex_block(&mut self, s: u64, e: u64) {
        let filed = self.indexes(e - s);
        if let Some(ix) = self.by_size.as_mut().filter(|_| filed) {
            let held = ix.remove(&mut self.leaves, &mut self.inners, (e - s, s));
            debug_assert!(held, "[{s:#x}, {e:#x}) is not in the size index");
        }
    }

    /// The entries of `t` from `from` on.
    fn walk(&self, t: &SizeTree, from: (u64, u64)) -> SizeIter<'_, S> {
        t.iter_from(&self.leaves, &self.inners, from)
    }

    /// Replaces the index entry of the block at `pos` with `[s, e)`.
    #[inline]
    pub(super) fn reindex_at(&mut self, pos: &Pos, s: u64, e: u64) {
        if self.by_size.is_some() {
            let (os, oe) = self.get(pos);
            self.unindex_block(os, oe);
            self.index_block(s, e);
        }
    }

    /// The best fit: in the shortest block that holds `size` bytes at a
    /// multiple of `align` (a power of two) inside `[lo, hi)`, the lowest
    /// such address; among blocks of that length, the lowest block. Sets
    /// `pos` to the block. `size > 0`. Builds the size index on first use.
    ///
    /// Two walks take turns: the size index from the first block of at
    /// least `size` bytes, whose first block that holds the request is the
    /// answer, and the blocks meeting the window in address order, which
    /// knows the answer once it has seen them all. The first to know
    /// answers.
    ///
    /// Without a window (one that holds every block), a request aligned
    /// above the granule floor searches the index by its lanes instead
    /// (see the module docs).
    ///
    /// # Complexity
    /// Without a window: O(log n) nodes, and one node per level for each
    /// subtree whose lane the blocks' changes left stale (the search
    /// lowers it); the first aligned request computes the lanes, O(n),
    /// and so does the first after the granule floor falls (once a bit at
    /// most). With a window: O(log n + min(k, m)), `k` the blocks at least
    /// `size` long that come before the answer in size order but cannot
    /// hold the request (the alignment misses in them, or they lie outside
    /// the window), `m` the blocks that meet the window.
    pub fn best_fit(
        &mut self,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
        pos: &mut Pos,
    ) -> Option<u64> {
        self.best_fit_below(size, align, lo, hi, (u64::MAX, u64::MAX), pos)
    }

    /// Whether the tree may hold a best fit of `size` bytes below `bound`
    /// (see [`best_fit_below`](Self::best_fit_below)); false only when it
    /// holds none, told at a glance (by the length classes, while they are
    /// on). A search ruled out this way costs no descent.
    #[inline]
    pub fn may_beat(&mut self, size: u64, bound: (u64, u64)) -> bool {
        !self.classes_rule_out(size, bound.0)
    }

    /// [`best_fit`](Self::best_fit) among the blocks whose `(length,
    /// start)` is below `bound` (a better block found elsewhere): none when
    /// the tree has no better one. The walks stop at the bound, so a
    /// bound the tree cannot beat costs one descent of the size index.
    pub fn best_fit_below(
        &mut self,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
        bound: (u64, u64),
        pos: &mut Pos,
    ) -> Option<u64> {
        if lo >= hi || hi - lo < size {
            return None;
        }
        if !self.enable_size_index() {
            // No room for the index in fixed storage: the scan answers.
            let (_, s, a) = self
                .best_fit_scan(size, align, lo, hi)
                .filter(|&(len, s, _)| (len, s) < bound)?;
            *pos = self.find(s).expect("a scanned block is in the tree");
            return Some(a);
        }
        let whole = lo <= self.lowest_start() && self.wild.map_or(true, |w| w.1 <= hi);
        let k = align.trailing_zeros();
        if self.classes_answer(k, whole) {
            return self.class_fit(size, bound, pos);
        }
        let found = match (whole && k > self.floor, &mut self.by_size) {
            (true, Some(ix)) => {
                ix.keep_lanes(&self.leaves, &mut self.inners, self.floor);
                ix.first_fit(&self.leaves, &mut self.inners, (size, 0), (size, k), bound)
                    .map(|(_, s)| (s, fit_in(s, u64::MAX, size, align).expect("a fit")))
            }
            _ => self.best_fit_in_index(size, align, lo, hi, bound),
        };
        let (s, a) = found?;
        *pos = self.find(s).expect("an indexed block is in the tree");
        Some(a)
    }

    /// [`best_fit`](Self::best_fit)'s two walks: the block's start and the
    /// address.
    fn best_fit_in_index(
        &self,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
        bound: (u64, u64),
    ) -> Option<(u64, u64)> {
        let ix = self.by_size.as_ref()?;
        let fit = |(s, e): (u64, u64)| fit_in(s.max(lo), e.min(hi), size, align);
        let mut by_size = self.walk(ix, (size, 0));
        // Started at the first miss: most searches end at the first block.
        let mut by_addr = None;
        // The best block the address walk has seen: (length, start, address).
        let mut seen: Option<(u64, u64, u64)> = None;
        loop {
            let (len, s) = by_size.next().filter(|&k| k < bound)?;
            if let Some(a) = fit((s, s + len)) {
                return Some((s, a));
            }
            match by_addr.get_or_insert_with(|| self.iter_from(lo)).next() {
                Some((s, e)) if s < hi => {
                    if e - s >= size {
                        if let Some(a) = fit((s, e)).filter(|_| (e - s, s) < bound) {
                            let c = (e - s, s, a);
                            seen = Some(seen.map_or(c, |b| b.min(c)));
                        }
                    }
                }
                _ => return seen.map(|(_, s, a)| (s, a)),
            }
        }
    }

    /// The slow reference for [`best_fit`](Self::best_fit): every block in
    /// address order.
    pub fn best_fit_linear(&self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        self.best_fit_scan(size, align, lo, hi).map(|(_, _, a)| a)
    }

    /// [`best_fit_linear`](Self::best_fit_linear)'s block length, block
    /// start and address.
    pub(crate) fn best_fit_scan(
        &self,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
    ) -> Option<(u64, u64, u64)> {
        self.iter()
            .filter_map(|(s, e)| fit_in(s.max(lo), e.min(hi), size, align).map(|a| (e - s, s, a)))
            .min()
    }

    /// Verifies that the size index, when kept, holds exactly the blocks,
    /// a well-formed size tree with its lanes; returns the leaves and
    /// inner nodes it holds.
    pub(super) fn check_size_index(&self) -> Result<(usize, usize), CheckError> {
        let Some(ix) = &self.by_size else {
            return Ok((0, 0));
        };
        let nodes = ix.check(&self.leaves, &self.inners)?;
        let got: Vec<(u64, u64)> = self.walk(ix, (0, 0)).collect();
        let mut want: Vec<(u64, u64)> = self
            .iter()
            .map(|(s, e)| (e - s, s))
            .filter(|&(len, _)| self.indexes(len))
            .collect();
        want.sort_unstable();
        let first = got.iter().zip(&want).position(|(g, w)| g != w);
        crate::ensure!(
            got.len() == want.len() && first.is_none(),
            Structure,
            "the size index holds {} entries, {} blocks belong; first difference at entry {first:?}",
            got.len(),
            want.len()
        );
        Ok(nodes)
    }
}
