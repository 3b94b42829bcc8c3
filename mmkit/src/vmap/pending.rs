//! The pending free: the last freed area whose free neighbours it has not
//! merged with yet, kept out of the tree beside them.
//!
//! A freed area next to free blocks of the tree merges with them: the
//! tree loses a block or grows one, and its maxima (and alignment
//! summaries) change up the path. When the next allocation takes the same
//! area back, as a churn of equal requests does, the tree cuts it out
//! again and undoes all of it. `mmkit bench align-holes` is that pair at
//! every step: each working area sits between two one-page alignment
//! paddings, so each free merged three blocks and each allocation split
//! them again.
//!
//! So the area waits here instead, and its neighbours (its *pads*) stay in
//! the tree as they were. Together they are one maximal free block, the
//! *extent* `[js, je)`: the pads are `[js, s)` and `[e, je)`, either may be
//! empty, not both.
//!
//! ```text
//!   tree:     ... |pad| ......... |pad| ...      the pads stay as they were
//!   pending:      |js  s|  area |e  je|          the extent, one free block
//! ```
//!
//! The answers stay the exact lowest fit: an allocation looks at the
//! whole extent, and a fit that the tree's search finds inside a pad lies
//! inside the extent too, at or above the extent's own lowest fit, so the
//! lower of the two answers is the same either way. The area is taken back
//! without touching the tree when the allocation is exactly the area; any
//! other use of the extent, and any other operation that could change a
//! pad (the next free, a purge, a grow or shrink of the space, a highest
//! fit), merges it into the tree first, as it would have been (`settle`).
//!
//! Like the isolated blocks, it is used only while it pays: a take-back
//! saves a merge and a split of tree blocks (about 3,700 instructions on
//! align-holes at 10^5), a settle that nothing took back costs a few
//! hundred more than merging at once (the lookup of the area's neighbours
//! again). This is mmkit's own; the kernel merges on every free.

use crate::balance::Balance;

/// What an area taken back earns and what one merged unused costs (see
/// [`Balance`]).
const EARNED: i32 = 256;
const WASTED: i32 = 64;

/// At most one freed area with its extent, and whether keeping one has
/// paid lately.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// The area `[s, e)` and its extent `[js, je)`, if one is pending.
    held: Option<Held>,
    /// [`EARNED`] per area taken back, less [`WASTED`] per area merged
    /// unused; an area is kept only while it is not negative, and one
    /// refused adds 1, so a workload that changes is noticed.
    balance: Balance,
}

/// A pending area and its extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    /// The freed area, out of the tree.
    pub(crate) area: (u64, u64),
    /// The maximal free block it lies in; the rest of it is the pads.
    pub(crate) extent: (u64, u64),
}

impl Held {
    /// The pads as `(start, end)`, empty ones left out.
    pub(crate) fn pads(&self) -> impl Iterator<Item = (u64, u64)> {
        let ((s, e), (js, je)) = (self.area, self.extent);
        [(js, s), (e, je)].into_iter().filter(|(a, b)| a < b)
    }
}

impl Pending {
    pub(crate) const fn new() -> Self {
        Pending {
            held: None,
            balance: Balance::new(),
        }
    }

    /// The pending area and its extent, if any.
    #[inline]
    pub(crate) fn held(&self) -> Option<Held> {
        self.held
    }

    /// The lowest `a` in `[lo, hi)`, a multiple of `align`, with
    /// `[a, a + size)` inside the extent.
    #[inline]
    pub(crate) fn lowest_fit(&self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        let (js, je) = self.held?.extent;
        crate::range::fit_in(js.max(lo), je.min(hi), size, align)
    }

    /// Keeps `area`, whose free neighbours make it the block `extent`,
    /// unless none may be kept (one is held, or keeping them has not paid
    /// lately): then false, and nothing changes.
    #[inline]
    pub(crate) fn hold(&mut self, area: (u64, u64), extent: (u64, u64)) -> bool {
        debug_assert!(extent.0 <= area.0 && area.1 <= extent.1 && extent != area);
        if self.held.is_some() {
            return false;
        }
        if !self.balance.admits() {
            return false;
        }
        self.held = Some(Held { area, extent });
        true
    }

    /// The area was taken back whole, by an allocation of exactly it.
    #[inline]
    pub(crate) fn taken_back(&mut self) {
        self.held = None;
        self.balance.earn(EARNED);
    }

    /// Gives up the held area, to be merged into the tree: it saved
    /// nothing (an allocation that takes only part of the extent, or none
    /// of it, finds it merged, as it would have been at the free).
    #[inline]
    pub(crate) fn release(&mut self) -> Option<Held> {
        let h = self.held.take()?;
        self.balance.lose(WASTED);
        Some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn holds_one_and_fits_in_its_extent() {
        let mut p = Pending::new();
        assert_eq!(p.lowest_fit(1, 1, 0, 100), None);
        assert!(p.hold((10, 20), (8, 22)));
        assert!(!p.hold((40, 50), (40, 52)), "one at a time");
        assert_eq!(p.lowest_fit(4, 1, 0, 100), Some(8));
        assert_eq!(p.lowest_fit(4, 4, 0, 100), Some(8));
        assert_eq!(p.lowest_fit(4, 16, 0, 100), Some(16));
        assert_eq!(p.lowest_fit(14, 1, 0, 100), Some(8));
        assert_eq!(p.lowest_fit(15, 1, 0, 100), None);
        assert_eq!(p.lowest_fit(4, 1, 9, 14), Some(9));
        assert_eq!(p.lowest_fit(4, 1, 9, 12), None);
        let h = p.held().unwrap();
        assert_eq!(h.pads().collect::<Vec<_>>(), [(8, 10), (20, 22)]);
        p.taken_back();
        assert_eq!(p.held(), None);
        assert!(p.hold((10, 20), (10, 22)));
        assert_eq!(p.held().unwrap().pads().collect::<Vec<_>>(), [(20, 22)]);
    }

    #[test]
    fn areas_merged_unused_stop_new_ones_for_a_while() {
        let mut p = Pending::new();
        assert!(p.hold((10, 20), (8, 20)));
        assert_eq!(p.release().map(|h| h.area), Some((10, 20)));
        assert_eq!(p.release(), None);
        for _ in 0..WASTED {
            assert!(!p.hold((10, 20), (8, 20)));
        }
        assert!(p.hold((10, 20), (8, 20)));
        // One taken back earns room for EARNED / WASTED merged unused.
        p.taken_back();
        for _ in 0..EARNED / WASTED {
            assert!(p.hold((10, 20), (8, 20)));
            assert!(p.release().is_some());
        }
        assert!(p.hold((10, 20), (8, 20)));
        assert!(p.release().is_some());
        assert!(!p.hold((10, 20), (8, 20)));
    }
}
