//! Purges: every node's lazy list flushed once, every pool decayed by a
//! quarter of what it held unused and then fed the node's flushed areas
//! ([`VmapNodes::purge`]),
//! or emptied ([`VmapNodes::drain`]); a threshold purge leaves the other
//! nodes their share to settle themselves.

use alloc::vec::Vec;

use super::{Node, VmapNodes};
use crate::lazy::Batch;

/// A node's lazy areas a purge took, and their bytes.
type Share = (Option<Batch<(u64, u64)>>, u64);

/// How a node's share of a purge decays its pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decay {
    /// Every pool emptied, nothing pooled: a drain.
    Full,
    /// A quarter of what every pool held unused: [`VmapNodes::purge`], on
    /// every node.
    Quarter,
    /// As `Quarter`, once the node's own flushed bytes
    /// since its last decay pass `lazy_max` ([`Node::undecayed`]): a purge
    /// a lazy free started, which other nodes' frees start as often as
    /// the node's own.
    Earned,
}

impl<R: lock_api::RawMutex> VmapNodes<R> {
    /// Takes every node's lazy list, calls the flush hook once with the
    /// range covering them all, then, node by node, decays every pool (the
    /// oldest quarter of the areas it held unused since its last decay
    /// back to the free tree) and pools the node's flushed areas, all of
    /// those of a pooled size, as the kernel's purge does. A node's share
    /// that an earlier threshold purge left it is settled first. Returns
    /// whether any area was lazy (no flush and no decay otherwise).
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
    /// assert!(v.purge()); // no decay before held them
    /// assert_eq!(v.node_stats(0).pooled, 8);
    /// assert_eq!(v.node_stats(1).pooled, 1); // decayed (none), then pooled
    /// v.alloc(0, 4096, 4096).unwrap(); // a hit: 7 pooled, all unused since
    /// v.free_lazy(1, v.alloc(1, 8192, 4096).unwrap()).unwrap();
    /// assert!(v.purge());
    /// assert_eq!(v.node_stats(0).pooled, 6); // 7 - 7 / 4
    /// ```
    pub fn purge(&self) -> bool {
        self.purge_with(None, false)
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
        self.purge_with(None, true);
    }

    /// The purge a lazy free past `lazy_max` starts on node `caller`:
    /// every node's lazy list taken and flushed at once, as
    /// [`purge`](Self::purge); the caller's node settles its share now,
    /// every other node at its next allocation (see [`Node::owed`]), or
    /// at the next purge if it has not allocated by then.
    pub(super) fn purge_from(&self, caller: usize) -> bool {
        self.purge_with(Some(caller), false)
    }

    /// A purge settled by the caller's node only (`caller`), or by every
    /// node; `full` decays every pool to empty and pools nothing, even
    /// with nothing lazy.
    fn purge_with(&self, caller: Option<usize>, full: bool) -> bool {
        let mut p = self.purger.0.lock();
        let batches: Vec<Share> = (self.nodes.iter())
            .map(|n| {
                let mut n = n.0.lock_spinning();
                let bytes = n.lazy.bytes();
                let b = n.lazy.take();
                let spare = core::mem::take(&mut n.spare);
                n.lazy.recycle(spare);
                (b, bytes)
            })
            .collect();
        // One flush covers every node's batch.
        let span = (batches.iter().filter_map(|b| b.0.as_ref()))
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
        // A node first settles what an earlier purge left it, then this
        // purge's share, or leaves that to its own thread. What the pools
        // do not keep goes back under one global lock.
        let (owed, now) = match (full, caller) {
            (true, _) => (Decay::Full, Decay::Full),
            (false, None) => (Decay::Earned, Decay::Quarter),
            (false, Some(_)) => (Decay::Earned, Decay::Earned),
        };
        let mut back = core::mem::take(&mut p.back);
        for (i, (n, (batch, bytes))) in self.nodes.iter().zip(batches).enumerate() {
            let mut n = n.0.lock_spinning();
            self.settle_owed_onto(&mut n, owed, &mut back);
            if caller.map_or(true, |c| c == i) {
                self.settle(&mut n, batch, bytes, now, &mut back);
            } else {
                n.owed = true;
                n.flushed = batch;
                n.flushed_bytes = bytes;
            }
        }
        self.give_back(core::iter::once(&back[..]));
        back.clear();
        p.back = back;
        any
    }

    /// Settles what a purge left node `n` ([`Node::owed`]), under its
    /// lock: its decay and its pooling, the rest back to the free tree.
    pub(super) fn settle_owed(&self, n: &mut Node) {
        let mut back = core::mem::take(&mut n.back);
        self.settle_owed_onto(n, Decay::Earned, &mut back);
        self.give_back(core::iter::once(&back[..]));
        back.clear();
        n.back = back;
    }

    /// Settles node `n`'s owed share, if it has one, decaying as `decay`
    /// says, with what does not stay pooled put on `back`.
    fn settle_owed_onto(&self, n: &mut Node, decay: Decay, back: &mut Vec<(u64, u64)>) {
        if n.owed {
            n.owed = false;
            let owed = n.flushed.take();
            let bytes = core::mem::take(&mut n.flushed_bytes);
            self.settle(n, owed, bytes, decay, back);
        }
    }

    /// One node's share of a purge, `bytes` of its lazy areas in `batch`:
    /// its pools decay as `decay` says, then take every area of `batch` of
    /// a pooled size, however many (none on a drain): the decay alone
    /// bounds a pool, so a loop that frees what it allocates finds its
    /// areas pooled. The decayed areas and the rest of `batch` go on
    /// `back`; the batch's vector is kept for the lazy list.
    fn settle(
        &self,
        n: &mut Node,
        batch: Option<Batch<(u64, u64)>>,
        bytes: u64,
        decay: Decay,
        back: &mut Vec<(u64, u64)>,
    ) {
        n.undecayed = n.undecayed.saturating_add(bytes);
        let full = decay == Decay::Full;
        if decay != Decay::Earned || n.undecayed > self.cfg.lazy_max {
            n.undecayed = 0;
            self.decay(n, full, back);
        }
        let Some(mut batch) = batch else { return };
        for &(s, e) in &batch.items {
            let rest = match full {
                true => Some((s, e)),
                false => self.pool(n, s, e, usize::MAX),
            };
            if let Some(area) = rest {
                back.push(area);
            }
        }
        batch.items.clear();
        if batch.items.capacity() > n.spare.capacity() {
            n.spare = batch.items;
        }
    }

    /// Moves the oldest quarter of the areas each of `n`'s pools held
    /// unused since the last decay ([`Pool::low`](super::Pool::low); all of the pool when
    /// `full`) onto `back`, and starts each pool's next count of unused
    /// areas at what it keeps (the areas pooled after the decay are new:
    /// they count from the next).
    fn decay(&self, n: &mut Node, full: bool, back: &mut Vec<(u64, u64)>) {
        if n.pooled == 0 {
            return;
        }
        let g = self.cfg.granule;
        for (k, pool) in n.pools.iter_mut().enumerate() {
            let d = if full { pool.areas.len() } else { pool.low / 4 };
            // Most of the pools lose nothing: a drain of none still costs
            // a purge tens of instructions per pool.
            if d != 0 {
                let size = (k as u64 + 1) * g;
                back.extend(pool.areas.drain(..d).map(|a| (a, a + size)));
                n.pooled -= d;
            }
            pool.low = pool.areas.len();
        }
    }
}
