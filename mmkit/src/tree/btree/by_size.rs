//! The size index and the best-fit search: the tree's blocks, the
//! wilderness included, ordered by `(length, start)` beside the address
//! order of the nodes.
//!
//! ```text
//!   address order (nodes):  [0,4) [10,26) [40,48) [60,62) ... wild [200,4096)
//!   size index:             (2,60) (4,0) (8,40) (16,10) ... (3896,200)
//! ```
//!
//! The index is built the first time a best-fit search asks for it
//! ([`BTree::best_fit`]) and kept from then on: every public change to the
//! blocks (`update.rs`) replaces the entries of the blocks it removed,
//! shrank or grew. Moves between nodes (splits, borrows, merges of
//! siblings, the wilderness taken from the highest leaf) change no block
//! and touch no entry. A tree that is never asked for a best fit keeps no
//! index and pays one branch per change.
//!
//! An aligned request (above the granule floor, no window) looks at a
//! second index instead, one per alignment `2^k` asked for: the blocks
//! that hold a start aligned to `2^k`, by their usable length from it,
//! `e - align_up(s, 2^k)`. A block holds the request when that length is
//! at least the size, and its length is at least its usable length, so a
//! walk from the first usable length long enough stops once the usable
//! lengths pass the shortest block found: it reads only blocks that hold
//! the request, where the size index would read every block long enough
//! but wrongly aligned.
//!
//! The indexes are `alloc` `BTreeSet`s: its own node splits and merges
//! allocate and free heap memory, so a best-fit allocator allocates now
//! and then in steady state where a lowest-fit one does not.

use alloc::collections::BTreeSet;

use super::{AlignedIndex, BTree, Pos};
use crate::error::CheckError;
use crate::range::fit_in;
use crate::storage::Storage;

impl<S: Storage> BTree<S> {
    /// Whether the size index is kept.
    pub fn has_size_index(&self) -> bool {
        self.by_size.is_some()
    }

    /// Builds the size index from the blocks, if it is not kept yet.
    ///
    /// # Complexity
    /// O(n log n) the first time, O(1) after.
    pub fn enable_size_index(&mut self) {
        if self.by_size.is_none() {
            self.by_size = Some(self.iter().map(|(s, e)| (e - s, s)).collect());
        }
    }

    /// Files `[s, e)` in the size index and the aligned ones, if kept.
    #[inline]
    pub(super) fn index_block(&mut self, s: u64, e: u64) {
        if let Some(ix) = &mut self.by_size {
            ix.insert((e - s, s));
            for (k, ax) in &mut self.by_usable {
                if let Some(u) = usable(s, e, *k) {
                    ax.insert((u, s, e));
                }
            }
        }
    }

    /// Drops `[s, e)` from the size index and the aligned ones, if kept.
    #[inline]
    pub(super) fn unindex_block(&mut self, s: u64, e: u64) {
        if let Some(ix) = &mut self.by_size {
            ix.remove(&(e - s, s));
            for (k, ax) in &mut self.by_usable {
                if let Some(u) = usable(s, e, *k) {
                    ax.remove(&(u, s, e));
                }
            }
        }
    }

    /// The aligned index for `2^k`, built from the blocks on first use.
    ///
    /// # Complexity
    /// O(n log n) the first time, O(1) after (at most 64 alignments).
    fn aligned_index(&mut self, k: u32) -> &AlignedIndex {
        let i = match self.by_usable.iter().position(|(j, _)| *j == k) {
            Some(i) => i,
            None => {
                let ax = self
                    .iter()
                    .filter_map(|(s, e)| usable(s, e, k).map(|u| (u, s, e)))
                    .collect();
                self.by_usable.push((k, ax));
                self.by_usable.len() - 1
            }
        };
        &self.by_usable[i].1
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
    /// above the granule floor reads the aligned index of its alignment
    /// instead (see the module docs).
    ///
    /// # Complexity
    /// Without a window: O(log n + j), `j` the blocks that hold the
    /// request and whose usable length at its alignment is at most the
    /// answer's length (0 when every block start is aligned); the first
    /// request at an alignment builds its index, O(n log n) once, and
    /// every change to the blocks then updates it, O(log n) per index
    /// kept. With a window: O(log n + min(k, m)), `k` the blocks at least
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
        if lo >= hi || hi - lo < size {
            return None;
        }
        self.enable_size_index();
        let whole = lo <= self.lowest_start() && self.wild.map_or(true, |w| w.1 <= hi);
        let found = if whole && align.trailing_zeros() > self.floor {
            let ax = self.aligned_index(align.trailing_zeros());
            best_aligned(ax, size)
        } else {
            self.best_fit_in_index(size, align, lo, hi)
        };
        let (s, a) = found?;
        *pos = self.find(s).expect("an indexed block is in the tree");
        Some(a)
    }

    /// [`best_fit`](Self::best_fit)'s two walks: the block's start and the
    /// address.
    fn best_fit_in_index(&self, size: u64, align: u64, lo: u64, hi: u64) -> Option<(u64, u64)> {
        let ix = self.by_size.as_ref()?;
        let fit = |(s, e): (u64, u64)| fit_in(s.max(lo), e.min(hi), size, align);
        let mut by_size = ix.range((size, 0)..);
        // Started at the first miss: most searches end at the first block.
        let mut by_addr = None;
        // The best block the address walk has seen: (length, start, address).
        let mut seen: Option<(u64, u64, u64)> = None;
        loop {
            let &(len, s) = by_size.next()?;
            if let Some(a) = fit((s, s + len)) {
                return Some((s, a));
            }
            match by_addr.get_or_insert_with(|| self.iter_from(lo)).next() {
                Some((s, e)) if s < hi => {
                    if e - s >= size {
                        if let Some(a) = fit((s, e)) {
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
        self.iter()
            .filter_map(|(s, e)| fit_in(s.max(lo), e.min(hi), size, align).map(|a| (e - s, s, a)))
            .min()
            .map(|(_, _, a)| a)
    }

    /// Verifies that the size index, when kept, holds exactly the blocks,
    /// and each aligned index exactly those with an aligned start.
    pub(super) fn check_size_index(&self) -> Result<(), CheckError> {
        let Some(ix) = &self.by_size else {
            return Ok(());
        };
        for (k, ax) in &self.by_usable {
            let want: BTreeSet<(u64, u64, u64)> = self
                .iter()
                .filter_map(|(s, e)| usable(s, e, *k).map(|u| (u, s, e)))
                .collect();
            crate::ensure!(
                *ax == want,
                Structure,
                "aligned index at 2^{k} holds {} blocks, {} hold an aligned start",
                ax.len(),
                want.len()
            );
        }
        let want: BTreeSet<(u64, u64)> = self.iter().map(|(s, e)| (e - s, s)).collect();
        if let Some(&(len, s)) = want.symmetric_difference(ix).next() {
            let held = if ix.contains(&(len, s)) {
                "holds"
            } else {
                "misses"
            };
            crate::ensure!(false, Structure @ s, "size index {held} ({len:#x}, {s:#x})");
        }
        Ok(())
    }
}

/// The usable length of `[s, e)` from its first start aligned to `2^k`,
/// if it holds one.
#[inline]
fn usable(s: u64, e: u64, k: u32) -> Option<u64> {
    let mask = (1u64 << k) - 1;
    let a = s.checked_add(mask)? & !mask;
    (a < e).then(|| e - a)
}

/// The best fit for `size` in the aligned index `ax` (every block with an
/// aligned start, by usable length): of the blocks whose usable length is
/// at least `size`, the shortest, the lowest of those; its start and the
/// aligned start in it. A block's length is at least its usable length,
/// so the walk stops once the usable lengths pass the best length found.
fn best_aligned(ax: &AlignedIndex, size: u64) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64, u64)> = None;
    for &(u, s, e) in ax.range((size, 0, 0)..) {
        if best.is_some_and(|b| u > b.0) {
            break;
        }
        let c = (e - s, s, e - u);
        best = Some(best.map_or(c, |b| b.min(c)));
    }
    best.map(|(_, s, a)| (s, a))
}
