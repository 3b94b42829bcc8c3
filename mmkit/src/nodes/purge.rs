//! Purges: every node's lazy list flushed once and pooled, every pool
//! decayed by a quarter ([`VmapNodes::purge`]) or emptied
//! ([`VmapNodes::drain`]).

use alloc::vec::Vec;

use super::{Node, VmapNodes};
use crate::lazy::Batch;

impl<R: lock_api::RawMutex> VmapNodes<R> {
    /// Takes every node's lazy list, calls the flush hook once with the
    /// range covering them all, then pools their areas on their nodes and
    /// decays every pool by a quarter (its oldest `len / 4` areas back to
    /// the free tree), as the kernel's purge does. Returns whether any
    /// area was lazy (no flush and no decay otherwise).
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{NodesConfig, StdVmapNodes};
    /// let v = StdVmapNodes::new(0, 1 << 30, NodesConfig::default()).unwrap();
    /// let areas: Vec<u64> = (0..8).map(|_| v.alloc(0, 4096, 4096).unwrap()).collect();
    /// for &a in &areas {
    ///     v.free(0, a).unwrap(); // 8 areas in node 0's pool of one page
    /// }
    /// assert!(!v.purge()); // nothing lazy: nothing to do
    /// let b = v.alloc(1, 4096, 4096).unwrap();
    /// v.free_lazy(1, b).unwrap();
    /// assert!(v.purge());
    /// assert_eq!(v.node_stats(0).pooled, 6); // 8 - 8 / 4
    /// assert_eq!(v.node_stats(1).pooled, 1); // 1 - 1 / 4
    /// ```
    pub fn purge(&self) -> bool {
        self.purge_with(false)
    }

    /// Purges every lazy list and returns every pooled area to the free
    /// tree, which is then the whole free space: the next allocations are
    /// exact until areas are pooled again.
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{NodesConfig, StdVmapNodes};
    /// let v = StdVmapNodes::new(0, 1 << 20, NodesConfig::default()).unwrap();
    /// let a = v.alloc(0, 4096, 4096).unwrap();
    /// let b = v.alloc(0, 4096, 4096).unwrap();
    /// v.free(0, a).unwrap();
    /// v.free_lazy(0, b).unwrap();
    /// v.drain();
    /// assert_eq!(v.stats().pooled, 0);
    /// assert_eq!(v.with_allocator(|va| va.stats().free_blocks), 1);
    /// ```
    pub fn drain(&self) {
        self.purge_with(true);
    }

    /// A purge; `full` decays every pool to empty, even with nothing lazy.
    fn purge_with(&self, full: bool) -> bool {
        let mut p = self.purger.lock();
        let batches: Vec<Option<Batch<(u64, u64)>>> = (self.nodes.iter())
            .map(|n| n.0.lock().lazy.take())
            .collect();
        // One flush covers every node's batch.
        let span = (batches.iter().flatten())
            .map(|b| b.span)
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
        let any = span.is_some();
        if let Some((lo, hi)) = span {
            p.purges += 1;
            if let Some(f) = p.hook.as_mut() {
                f(lo, hi);
            }
        }
        if !any && !full {
            return false;
        }
        // Each pool decays by a quarter of what it held before this purge,
        // then takes every lazy area of its size: the decay alone bounds a
        // pool, so a loop that frees what it allocates finds its areas
        // pooled. Each batch keeps, in place, the areas its node does not
        // pool (all of them on a drain); the decays go on `back`. All of
        // them then go back under one global lock.
        let mut back = core::mem::take(&mut p.back);
        let mut batches = batches;
        for (n, batch) in self.nodes.iter().zip(&mut batches) {
            let mut n = n.0.lock();
            self.decay(&mut n, full, &mut back);
            if let Some(batch) = batch.as_mut().filter(|_| !full) {
                (batch.items).retain(|&(s, e)| self.pool(&mut n, s, e, usize::MAX).is_some());
            }
        }
        let items = batches.iter().flatten().map(|b| &b.items[..]);
        self.give_back(items.chain(core::iter::once(&back[..])));
        for (n, batch) in self.nodes.iter().zip(batches) {
            if let Some(mut batch) = batch {
                batch.items.clear();
                n.0.lock().lazy.recycle(batch.items);
            }
        }
        back.clear();
        p.back = back;
        any
    }

    /// Moves the oldest quarter of each of `n`'s pools (all of it when
    /// `full`) onto `back`.
    fn decay(&self, n: &mut Node, full: bool, back: &mut Vec<(u64, u64)>) {
        let g = self.cfg.granule;
        for (k, pool) in n.pools.iter_mut().enumerate() {
            let d = if full { pool.len() } else { pool.len() / 4 };
            // Most of the pools lose nothing: a drain of none still costs
            // a purge tens of instructions per pool.
            if d == 0 {
                continue;
            }
            let size = (k as u64 + 1) * g;
            back.extend(pool.drain(..d).map(|a| (a, a + size)));
        }
    }
}
