//! Flushed areas kept for reuse by size, as Linux 6.12's vmap nodes keep
//! theirs: a purge puts each released area of up to `max_pages` pages (its
//! guard page included) on the pool of its size, while it has room,
//! instead of giving its range back to the range allocator, where it stays
//! allocated; a request of that size takes the newest pooled area when it
//! is aligned as asked.
//! So a workload that frees and allocates areas of a few sizes in turn
//! (Linux's `full_fit_alloc_test`) reuses them without a free-tree merge
//! at the purge or a search and carve at the allocation.
//!
//! ```text
//!  purge: the released areas that fit a pool with room ──> pooled (the
//!         others: freed to the range allocator)
//!  alloc: pool of the span ──(newest aligned)──> the area's range, as it was
//!                          └─(misaligned: it changes places with the oldest)──> miss
//!  full purge (no space): every pool back to the range allocator
//! ```
//!
//! Linux also gives a quarter of every pool back at each purge; these
//! pools give theirs back only at a full purge (see
//! [`Vmalloc::set_pools`](crate::Vmalloc::set_pools)).
//!
//! Pooled ranges have been flushed: reusing one maps pages no TLB holds.

use alloc::vec::Vec;

use super::PAGE;

/// Pools of flushed ranges, one per size in pages (`1..=max_pages`).
#[derive(Debug, Default)]
pub(crate) struct Pools {
    /// `by_pages[k - 1]`: starts of ranges of `k` pages, newest last.
    by_pages: Vec<Vec<u64>>,
    /// Ranges pooled, over every size.
    len: usize,
    /// The most ranges one pool holds.
    max_len: usize,
}

impl Pools {
    /// Pools for ranges of 1 to `max_pages` pages (none: 0), each of at
    /// most `max_len` ranges.
    pub(crate) fn new(max_pages: usize, max_len: usize) -> Self {
        Pools {
            by_pages: (0..max_pages).map(|_| Vec::new()).collect(),
            len: 0,
            max_len,
        }
    }

    /// Ranges pooled.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Where the pool of ranges of `span` bytes is in `by_pages`, if
    /// there is one.
    fn index(&self, span: u64) -> Option<usize> {
        if span % PAGE != 0 {
            return None;
        }
        let i = usize::try_from(span / PAGE).ok()?.checked_sub(1)?;
        (i < self.by_pages.len()).then_some(i)
    }

    /// The pool of ranges of `span` bytes, if there is one.
    fn pool(&mut self, span: u64) -> Option<&mut Vec<u64>> {
        let i = self.index(span)?;
        Some(&mut self.by_pages[i])
    }

    /// Whether a range of `span` bytes would be pooled now (its size has
    /// a pool, and the pool has room).
    pub(crate) fn takes(&self, span: u64) -> bool {
        (self.index(span)).is_some_and(|i| self.by_pages[i].len() < self.max_len)
    }

    /// Pools the flushed range `[start, start + span)`; false when no pool
    /// takes its size or the pool is full.
    pub(crate) fn put(&mut self, start: u64, span: u64) -> bool {
        let max = self.max_len;
        let Some(p) = self.pool(span).filter(|p| p.len() < max) else {
            return false;
        };
        p.push(start);
        self.len += 1;
        true
    }

    /// The newest pooled range of `span` bytes when it starts at a
    /// multiple of `align`; a misaligned one changes places with the
    /// oldest (the next request of the size sees another).
    pub(crate) fn take(&mut self, span: u64, align: u64) -> Option<u64> {
        let p = self.pool(span)?;
        let &start = p.last()?;
        if start % align.max(1) != 0 {
            let newest = p.len() - 1;
            p.swap(0, newest);
            return None;
        }
        p.pop();
        self.len -= 1;
        Some(start)
    }

    /// Empties every pool; `back` gets each range's start.
    pub(crate) fn drain(&mut self, mut back: impl FnMut(u64)) {
        if self.len == 0 {
            return;
        }
        for p in &mut self.by_pages {
            p.drain(..).for_each(&mut back);
        }
        self.len = 0;
    }

    /// Every pooled range: `(start, span)`.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let spans = (1..).map(|k: u64| k * PAGE);
        (self.by_pages.iter().zip(spans)).flat_map(|(p, span)| p.iter().map(move |&s| (s, span)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_newest_aligned_and_swaps_a_misaligned_one_away() {
        let mut p = Pools::new(2, 8);
        assert!(!p.put(0x10000, 3 * PAGE), "no pool of 3 pages");
        assert!(p.put(0x10000, 2 * PAGE));
        assert!(p.put(0x13000, 2 * PAGE));
        assert_eq!(p.take(PAGE, PAGE), None, "another size");
        assert_eq!(p.take(2 * PAGE, 0x2000), None, "0x13000 is misaligned");
        assert_eq!(p.take(2 * PAGE, 0x2000), Some(0x10000));
        assert_eq!(p.take(2 * PAGE, PAGE), Some(0x13000));
        assert_eq!((p.len(), p.take(2 * PAGE, PAGE)), (0, None));
    }

    #[test]
    fn a_full_pool_refuses_and_drain_empties_every_pool() {
        let mut p = Pools::new(2, 2);
        assert!(p.put(0x10000, PAGE) && p.put(0x20000, PAGE));
        assert!(!p.takes(PAGE) && !p.put(0x30000, PAGE), "full");
        assert!(p.takes(2 * PAGE) && !p.takes(3 * PAGE) && !p.takes(PAGE + 1));
        assert!(p.put(0x40000, 2 * PAGE));
        assert_eq!(
            p.iter().collect::<Vec<_>>(),
            [(0x10000, PAGE), (0x20000, PAGE), (0x40000, 2 * PAGE)]
        );
        let mut back = Vec::new();
        p.drain(|s| back.push(s));
        assert_eq!(back, [0x10000, 0x20000, 0x40000]);
        assert_eq!(
            (p.len(), p.iter().count(), p.take(PAGE, PAGE)),
            (0, 0, None)
        );
    }
}
