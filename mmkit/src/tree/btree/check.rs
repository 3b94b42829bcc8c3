//! [`BTree::check`]: every invariant of the tree, recomputed from the
//! blocks (summaries against the true usable lengths at all 64
//! alignments).

use super::entry::Agg;
use super::node::code;
use super::{BTree, FANOUT, INNER_MIN, LEAF_CAP, LEAF_MIN};
use crate::ensure;
use crate::error::CheckError;
use crate::storage::Storage;

/// The longest usable length of a subtree at each alignment `2^k`, `k <
/// 64` (0 where none holds an aligned address): what a stored summary
/// must not undercut. Computed from the blocks by [`BTree::check`].
pub(super) type Usable = [u64; 64];

/// The usable length of `[s, e)` at alignment `2^k`: `e` less `s` rounded
/// up to it, 0 if that is not below `e`.
pub(super) fn usable_in(s: u64, e: u64, k: u32) -> u64 {
    let mask = (1u64 << k) - 1;
    match s.checked_add(mask) {
        Some(x) if x & !mask < e => e - (x & !mask),
        _ => 0,
    }
}

impl<S: Storage> BTree<S> {
    /// Verifies order, non-overlap, every block inside `[lo, hi)`, the
    /// occupancy bounds, the uniform depth, every stored key and maximum,
    /// and (when on) that every summary is an upper bound of the true
    /// usable lengths below it at every alignment.
    ///
    /// # Errors
    /// A [`CheckError`] naming the first violation.
    pub fn check(&self, lo: u64, hi: u64) -> Result<(), CheckError> {
        let mut count = 0;
        let mut prev_end = None;
        self.check_node(self.root, 0, lo, hi, &mut count, &mut prev_end)?;
        ensure!(
            self.wild.is_some() || count == 0,
            Structure,
            "no wilderness with {count} blocks in the tree"
        );
        if let Some((s, e)) = self.wild {
            ensure!(s < e, Layout @ s, "empty wilderness at {s:#x}");
            ensure!(lo <= s && e <= hi, Bounds @ s, "wilderness outside the space");
            ensure!(
                prev_end.map_or(true, |pe| pe <= s),
                Layout @ s,
                "wilderness at {s:#x} not above every block"
            );
            ensure!(
                s.trailing_zeros().min(e.trailing_zeros()) >= self.floor,
                Hint @ s,
                "wilderness finer than the granule floor"
            );
            count += 1;
        }
        ensure!(
            count == self.len,
            Accounting,
            "{count} blocks, len says {}",
            self.len
        );
        let (mut leaves, mut inners) = self.check_size_index()?;
        self.count_nodes(self.root, 0, &mut leaves, &mut inners);
        ensure!(
            (leaves, inners) == (self.leaves.used(), self.inners.used()),
            Accounting,
            "{leaves} leaves and {inners} inner nodes reachable, counted ({}, {})",
            self.leaves.used(),
            self.inners.used()
        );
        let (c, q) = (&self.cleared, &self.cleared.asked);
        if q.size > 0 {
            let first = self.lowest_fit_linear(q.size, q.align, q.lo, q.hi);
            ensure!(
                first.map_or(true, |a| a >= c.bound),
                Hint @ c.bound,
                "a fit for {:#x} aligned to {:#x} at {:#x}, below the cleared bound {:#x}",
                q.size,
                q.align,
                first.unwrap_or(0),
                c.bound
            );
        }
        Ok(())
    }

    pub(super) fn count_nodes(&self, id: u32, d: usize, leaves: &mut usize, inners: &mut usize) {
        if d == self.height {
            *leaves += 1;
            return;
        }
        *inners += 1;
        let n = &self.inners[id as usize];
        for &kid in &n.kid[..n.len as usize] {
            self.count_nodes(kid, d + 1, leaves, inners);
        }
    }

    /// Checks the subtree of node `id` at depth `d`; returns its aggregate
    /// recomputed and its true usable lengths.
    pub(super) fn check_node(
        &self,
        id: u32,
        d: usize,
        lo: u64,
        hi: u64,
        count: &mut usize,
        prev_end: &mut Option<u64>,
    ) -> Result<(Agg, Usable), CheckError> {
        let root = d == 0;
        if d == self.height {
            let l = &self.leaves[id as usize];
            let n = l.len as usize;
            ensure!(
                n <= LEAF_CAP && (root || n >= LEAF_MIN),
                Structure,
                "leaf {id} holds {n} blocks"
            );
            ensure!(
                (n..LEAF_CAP).all(|i| l.start[i] == u64::MAX && l.size[i] == 0),
                Structure,
                "leaf {id} has a slot past its {n} blocks that is not empty"
            );
            ensure!(
                (0..LEAF_CAP).all(|i| l.code[i] == code(l.size[i])),
                Hint,
                "leaf {id} has a length code that is not its length's"
            );
            let mut truth = [0; 64];
            for i in 0..n {
                let (s, size) = (l.start[i], l.size[i]);
                ensure!(size > 0, Layout @ s, "empty block at {s:#x}");
                let e = s.checked_add(size);
                ensure!(e.is_some(), Bounds @ s, "block at {s:#x} ends past u64::MAX");
                let e = e.unwrap_or(u64::MAX);
                ensure!(lo <= s && e <= hi, Bounds @ s, "block [{s:#x}, {e:#x}) outside the space");
                ensure!(
                    prev_end.map_or(true, |pe| pe <= s),
                    Layout @ s,
                    "blocks overlap or out of order at {s:#x}"
                );
                ensure!(
                    s.trailing_zeros().min(e.trailing_zeros()) >= self.floor,
                    Hint @ s,
                    "block at {s:#x} finer than the granule floor"
                );
                *prev_end = Some(e);
                for (k, t) in truth.iter_mut().enumerate() {
                    *t = (*t).max(usable_in(s, e, k as u32));
                }
            }
            *count += n;
            return Ok((self.leaf_agg(id), truth));
        }
        let nd = &self.inners[id as usize];
        let n = nd.len as usize;
        ensure!(
            n <= FANOUT && n >= if root { 2 } else { INNER_MIN },
            Structure,
            "inner node {id} holds {n} children"
        );
        ensure!(
            (n..FANOUT).all(|i| nd.key[i] == u64::MAX && nd.max[i] == 0 && nd.cls[i] == 0),
            Structure,
            "inner node {id} has a key or a maximum past its {n} children"
        );
        ensure!(
            (0..FANOUT).all(|c| nd.code[c] == code(nd.max[c])),
            Hint,
            "inner node {id} has a maximum's code that is not its maximum's"
        );
        let mut truth = [0; 64];
        for c in 0..n {
            let (a, t) = self.check_node(nd.kid[c], d + 1, lo, hi, count, prev_end)?;
            let stored = self.entry(id, c);
            ensure!(
                stored.key == a.key && stored.max == a.max,
                Hint @ a.key,
                "entry {c} of node {id}: key/max ({:#x}, {:#x}), recomputed ({:#x}, {:#x})",
                stored.key,
                stored.max,
                a.key,
                a.max
            );
            ensure!(
                stored.cls == a.cls,
                Hint @ a.key,
                "entry {c} of node {id}: length classes {:#x}, recomputed {:#x}",
                stored.cls,
                a.cls
            );
            if self.summaries {
                // An upper bound is all pruning needs (see `propagate`).
                let k = (0..64u32)
                    .find(|&k| stored.sum.usable(stored.max, k).unwrap_or(0) < t[k as usize]);
                ensure!(
                    k.is_none(),
                    Hint @ a.key,
                    "entry {c} of node {id}: summary {:?} says less than the {:#x} usable at \
                     alignment 2^{}",
                    stored.sum,
                    t[k.unwrap_or(0) as usize],
                    k.unwrap_or(0)
                );
            }
            for (x, y) in truth.iter_mut().zip(t) {
                *x = (*x).max(y);
            }
        }
        Ok((self.inner_agg(id), truth))
    }
}
