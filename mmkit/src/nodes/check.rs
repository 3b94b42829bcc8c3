//! Counters and the invariant checker of [`VmapNodes`].

use alloc::vec::Vec;

use super::{NodeStats, VmapNodes};
use crate::ensure;
use crate::error::CheckError;
use crate::range::RangeStats;

/// The counters of every node together, with the free tree's.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodesStats {
    /// Allocations served from a pool.
    pub hits: u64,
    /// Allocations the free tree served.
    pub misses: u64,
    /// Purges that released lazy areas (one flush each).
    pub purges: u64,
    /// Live areas, on every node.
    pub live: u64,
    /// Lazily freed areas waiting for a purge, or flushed and waiting for
    /// their node to settle them.
    pub lazy: u64,
    /// Areas in the pools.
    pub pooled: u64,
    /// The free tree's stats (pooled and lazy areas are live there).
    pub tree: RangeStats,
    /// Acquisitions of the nodes' locks that found one held (another
    /// thread on the same node, a purge, a free from another node);
    /// counted with the `lock-stats` feature, else 0, as the two below.
    pub node_lock_waits: u64,
    /// Acquisitions of the free tree's lock that found it held: the lock
    /// every pool miss, overflow and purge takes, shared by all nodes.
    pub tree_lock_waits: u64,
    /// Purges that found another purge running.
    pub purge_lock_waits: u64,
    /// Acquisitions of the free tree's lock (with `lock-stats`, else 0):
    /// what the nodes share, per allocation.
    pub tree_locks: u64,
}

impl<R: lock_api::RawMutex> VmapNodes<R> {
    /// Node `i`'s counters (`i % nodes`).
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{NodesConfig, StdVmapNodes};
    /// let v = StdVmapNodes::new(0, 1 << 20, NodesConfig::default()).unwrap();
    /// v.alloc(1, 4096, 4096).unwrap();
    /// assert_eq!((v.node_stats(1).misses, v.node_stats(1).live), (1, 1));
    /// ```
    pub fn node_stats(&self, i: usize) -> NodeStats {
        let n = self.nodes[i % self.nodes.len()].0.lock();
        NodeStats {
            hits: n.hits,
            misses: n.misses,
            live: n.busy.len() as u64,
            lazy: (n.lazy.len() + n.flushed.as_ref().map_or(0, |b| b.items.len())) as u64,
            pooled: n.pooled as u64,
        }
    }

    /// Every node's counters summed, the purges and the free tree's stats
    /// (each node read under its own lock, one at a time).
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{NodesConfig, StdVmapNodes};
    /// let v = StdVmapNodes::new(0, 1 << 20, NodesConfig::default()).unwrap();
    /// let a = v.alloc(0, 4096, 4096).unwrap();
    /// v.alloc(1, 4096, 4096).unwrap();
    /// v.free_lazy(0, a).unwrap();
    /// let s = v.stats();
    /// assert_eq!((s.live, s.lazy, s.tree.live_areas), (1, 1, 2));
    /// ```
    pub fn stats(&self) -> NodesStats {
        let mut s = NodesStats::default();
        for i in 0..self.nodes.len() {
            let n = self.node_stats(i);
            s.hits += n.hits;
            s.misses += n.misses;
            s.live += n.live;
            s.lazy += n.lazy;
            s.pooled += n.pooled;
        }
        s.purges = self.purger.0.lock().purges;
        s.tree = self.global.0.lock_uncounted().stats();
        s.node_lock_waits = self.nodes.iter().map(|n| n.0.waits()).sum();
        s.tree_lock_waits = self.global.0.waits();
        s.purge_lock_waits = self.purger.0.waits();
        s.tree_locks = self.global.0.taken();
        s
    }

    /// Verifies the free tree's invariants, and that the nodes' busy
    /// indexes, lazy lists and pools hold exactly its live areas, each
    /// once, within their limits. Takes the purge lock, every node's and
    /// the global one.
    ///
    /// # Errors
    /// A [`CheckError`] naming the first violation.
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{NodesConfig, StdVmapNodes};
    /// let v = StdVmapNodes::new(0, 1 << 20, NodesConfig::default()).unwrap();
    /// let a = v.alloc(0, 4096, 4096).unwrap();
    /// v.free_lazy(1, a).unwrap();
    /// v.check().unwrap();
    /// ```
    pub fn check(&self) -> Result<(), CheckError> {
        let _p = self.purger.0.lock();
        let nodes: Vec<_> = self.nodes.iter().map(|n| n.0.lock()).collect();
        let g = self.global.0.lock();
        g.check()?;
        let mut held: Vec<(u64, u64)> = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            ensure!(n.busy.consistent(), Structure @ i, "node {i}: busy index key unreachable");
            held.extend(n.busy.iter());
            let bytes: u64 = n.lazy.iter().map(|&(s, e)| e - s).sum();
            // Not bounded by `lazy_max`: the free that passes it releases
            // the node's lock before the purge it starts takes them all.
            ensure!(
                bytes == n.lazy.bytes(),
                Accounting @ i,
                "node {i}: lazy bytes {bytes} (counter {})",
                n.lazy.bytes()
            );
            held.extend(n.lazy.iter().copied());
            ensure!(n.owed || n.flushed.is_none(), Structure @ i, "node {i}: flushed areas owed to no one");
            held.extend(n.flushed.iter().flat_map(|b| b.items.iter().copied()));
            let pooled: usize = n.pools.iter().map(|p| p.areas.len()).sum();
            ensure!(pooled == n.pooled, Accounting @ i, "node {i}: {pooled} areas pooled, counted {}", n.pooled);
            for (k, p) in n.pools.iter().enumerate() {
                ensure!(p.low <= p.areas.len(), Accounting @ i, "node {i}: pool {k} low {} over its {} areas", p.low, p.areas.len());
                let size = (k as u64 + 1) * self.cfg.granule;
                held.extend(p.areas.iter().map(|&a| (a, a + size)));
            }
        }
        held.sort_unstable();
        for w in held.windows(2) {
            ensure!(w[0].1 <= w[1].0, Layout @ w[1].0, "areas {:#x} and {:#x} overlap", w[0].0, w[1].0);
        }
        let st = g.stats();
        let bytes: u64 = held.iter().map(|h| h.1 - h.0).sum();
        ensure!(
            held.len() as u64 == st.live_areas && bytes == st.live_bytes,
            Accounting,
            "nodes hold {} areas of {bytes} bytes, the tree {} of {}",
            held.len(),
            st.live_areas,
            st.live_bytes
        );
        if g.indexes_live() {
            let mut live: Vec<(u64, u64)> = g.live_areas().map(|r| (r.start, r.end)).collect();
            live.sort_unstable();
            for (h, l) in held.iter().zip(&live) {
                ensure!(h == l, Layout @ h.0, "area {:#x}..{:#x} held, live {:#x}..{:#x}", h.0, h.1, l.0, l.1);
            }
        } else {
            // Without the tree's index: every held area lies in its live
            // space (outside every free block).
            let free: Vec<_> = g.free_blocks().collect();
            for &(s, e) in &held {
                let i = free.partition_point(|f| f.end <= s);
                ensure!(
                    free.get(i).map_or(true, |f| e <= f.start),
                    Layout @ s,
                    "area {s:#x}..{e:#x} held but free in the tree"
                );
            }
        }
        Ok(())
    }
}
