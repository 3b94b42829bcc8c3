//! Changes to the blocks (set, split, remove, grow, merge, insert) and the
//! changes to the nodes they cause: leaf and inner splits, borrows from a
//! sibling and merges with one.

use super::entry::{Agg, Change};
use super::finger::{Neighbours, Next};
use super::node::{codes_closed, codes_opened, leaf_max, EMPTY_LEAF};
use super::{BTree, Pos, FANOUT, INNER_MIN, LEAF_CAP, LEAF_MIN};
use crate::storage::Storage;
use crate::tree::summary::AlignSummary;

/// The granule exponent of a range (as the summaries count it, uncapped).
#[inline]
pub(super) fn granule(s: u64, e: u64) -> u32 {
    s.trailing_zeros().min(e.trailing_zeros())
}

impl<S: Storage> BTree<S> {
    /// Changes the block at `pos` to `[start, end)` in place: it must keep
    /// its place in address order and overlap no other block.
    ///
    /// # Complexity
    /// O(log n); stops at the first ancestor left unchanged.
    pub fn set_range_at(&mut self, pos: &Pos, start: u64, end: u64) {
        self.reindex_at(pos, start, end);
        self.version += 1;
        self.lower_floor(start, end);
        self.gained_block(start, end, Some(pos));
        if pos.wild {
            self.wild = Some((start, end));
            return;
        }
        let l = &mut self.leaves[pos.leaf as usize];
        let (old_start, old_end) = l.block(pos.at);
        let old = old_end - old_start;
        l.set(pos.at, start, end);
        if self.height == 0 {
            return;
        }
        // The leaf's old aggregate is its entry in the parent.
        let h = self.height;
        let o = self.entry(pos.node[h - 1], pos.slot[h - 1] as usize);
        let len = end - start;
        let max = if len >= o.max {
            len
        } else if old < o.max {
            o.max
        } else {
            leaf_max(&self.leaves[pos.leaf as usize])
        };
        let how = if start <= old_start && end >= old_end {
            Change::Grew
        } else if start >= old_start && end <= old_end {
            Change::Shrank
        } else {
            Change::Other
        };
        let sum = if !self.summaries {
            AlignSummary::ZERO
        } else if how == Change::Shrank && max == o.max {
            // Still an upper bound: see `propagate`.
            o.sum
        } else if how == Change::Grew && granule(start, end) <= granule(old_start, old_end) {
            // Only grew: see `propagate`.
            AlignSummary::combine(max, start, end, Some((o.max, o.sum)), None)
        } else {
            self.leaf_sum(pos.leaf, max)
        };
        let key = if pos.at == 0 { start } else { o.key };
        let cls = self.leaf_classes_after(pos.leaf, o.cls, old, len);
        self.propagate(pos, h, Agg { key, max, sum, cls }, how);
    }

    /// Cuts the block at `pos` in two: it becomes `[start, end)`, and
    /// `[ls, le)`, which lies between the block before and `start`, is
    /// inserted before it (an allocation inside a free block).
    pub fn split_at(&mut self, pos: &Pos, (ls, le): (u64, u64), start: u64, end: u64) {
        self.reindex_at(pos, start, end);
        self.index_block(ls, le);
        self.version += 1;
        self.lower_floor(start, end);
        self.lower_floor(ls, le);
        self.len += 1;
        if pos.wild {
            self.wild = Some((start, end));
            return self.push_max(ls, le);
        }
        self.leaves[pos.leaf as usize].set(pos.at, start, end);
        self.leaf_insert(pos, pos.at, ls, le, false);
    }

    /// Removes the block at `pos`.
    pub fn remove_at(&mut self, pos: &Pos) {
        if self.by_size.is_some() {
            let (s, e) = self.get(pos);
            self.unindex_block(s, e);
        }
        self.version += 1;
        if pos.wild {
            self.wild = None;
            self.len -= 1;
            return self.refill_wild();
        }
        self.len -= 1;
        self.leaf_remove(pos, Change::Shrank);
    }

    /// The block before the key grows to end at `end` (a free next to it).
    pub fn grow_prev(&mut self, nb: &Neighbours, end: u64) {
        let (s, _) = nb.prev.expect("a block before the key");
        if nb.prev_wild {
            return self.set_range_at(&Pos::wild(), s, end);
        }
        let mut pos = nb.pos;
        pos.at -= 1;
        self.set_range_at(&pos, s, end);
    }

    /// The block after the key grows down to start at `start`.
    pub fn grow_next(&mut self, nb: &Neighbours, start: u64) {
        let (_, e) = nb.next.expect("a block after the key");
        match nb.next_at {
            Next::Here => self.set_range_at(&nb.pos, start, e),
            Next::Leaf => {
                let mut p = nb.pos;
                self.next_leaf(&mut p);
                self.set_range_at(&p, start, e)
            }
            Next::Wild => self.set_range_at(&Pos::wild(), start, e),
            Next::None => unreachable!(),
        }
    }

    /// Joins the two blocks `nb` found, and the gap between, into one.
    pub fn merge(&mut self, nb: &Neighbours) {
        self.version += 1;
        let (ps, pe) = nb.prev.expect("a block before the key");
        let (ns, ne) = nb.next.expect("a block after the key");
        // The block after leaves; the one before becomes the joined block
        // (by `set_range_at` when the two lie in different leaves).
        self.unindex_block(ns, ne);
        if nb.next_at != Next::Leaf {
            self.unindex_block(ps, pe);
            self.index_block(ps, ne);
        }
        self.len -= 1;
        let mut prev = nb.pos;
        prev.at = prev.at.wrapping_sub(1);
        match nb.next_at {
            Next::Wild => {
                // The wilderness grows down over the block before.
                self.leaf_remove(&prev, Change::Shrank);
                self.wild = Some((ps, ne));
                self.gained_block(ps, ne, None);
            }
            Next::Here => {
                // One leaf: both changes go up in one pass. Both blocks
                // lie inside the joined one, so the leaf's usable lengths
                // only grew (to the joined block's).
                self.leaves[prev.leaf as usize].set(prev.at, ps, ne);
                self.gained_block(ps, ne, Some(&prev));
                if self.leaf_cut(&nb.pos) {
                    // No underflow: the leaf's set is its old one with two
                    // blocks replaced by one holding both, so its aggregate
                    // is the old one merged with the joined block's, as
                    // for a block gained (the two dropped are dominated by
                    // it at every alignment), and its blocks need no rescan
                    // but for their classes, which are exact.
                    self.gained(&prev, prev.at, ps, ne, true);
                } else {
                    self.underflow(&nb.pos, self.height, Change::Grew);
                }
            }
            Next::Leaf => {
                let mut p = nb.pos;
                self.next_leaf(&mut p);
                self.set_range_at(&prev, ps, ne);
                self.leaf_remove(&p, Change::Shrank);
            }
            Next::None => unreachable!(),
        }
    }

    /// Inserts `[start, end)` at the key `nb` was found for (`start`),
    /// overlapping no block.
    pub fn insert_at(&mut self, nb: &Neighbours, start: u64, end: u64) {
        self.index_block(start, end);
        self.version += 1;
        self.lower_floor(start, end);
        // The block goes into the leaf `nb` found, unless it becomes the
        // wilderness.
        let leafy = self.wild.is_some() && !nb.prev_wild;
        self.gained_block(start, end, leafy.then_some(&nb.pos));
        self.len += 1;
        match self.wild {
            None => self.wild = Some((start, end)),
            Some((ws, we)) if nb.prev_wild => {
                self.wild = Some((start, end));
                self.push_max(ws, we);
            }
            Some(_) => self.leaf_insert(&nb.pos, nb.pos.at, start, end, true),
        }
    }

    /// Inserts `[start, end)`, overlapping no block.
    pub fn insert(&mut self, start: u64, end: u64) {
        let nb = self.neighbours(start);
        self.insert_at(&nb, start, end);
    }

    /// Removes the block starting at `start`; false if there is none.
    pub fn remove(&mut self, start: u64) -> bool {
        match self.find(start) {
            Some(pos) => {
                self.remove_at(&pos);
                true
            }
            None => false,
        }
    }

    /// Appends `[s, e)` above every block of the tree (not the wilderness).
    pub(super) fn push_max(&mut self, s: u64, e: u64) {
        self.lower_floor(s, e);
        let pos = self.rightmost();
        self.leaf_insert(&pos, pos.at, s, e, true);
    }

    /// The wilderness left: the tree's highest block takes its place.
    pub(super) fn refill_wild(&mut self) {
        let mut pos = self.rightmost();
        if pos.at == 0 {
            return; // empty
        }
        pos.at -= 1;
        self.wild = Some(self.get(&pos));
        self.leaf_remove(&pos, Change::Shrank);
    }

    /// Inserts `[s, e)` at index `i` of the leaf at `pos` (the count `len`
    /// is the caller's), splitting the leaf when full. `only_gained`: the
    /// leaf's other blocks are as its parent last saw them (not a split,
    /// which also shrank one), so the aggregates can be merged upwards.
    pub(super) fn leaf_insert(&mut self, pos: &Pos, i: usize, s: u64, e: u64, only_gained: bool) {
        let id = pos.leaf;
        let l = &mut self.leaves[id as usize];
        let n = l.len as usize;
        if n < LEAF_CAP {
            l.insert(i, n, s, e);
            l.len += 1;
            if only_gained {
                return self.gained(pos, i, s, e, false);
            }
            // A block split in two: both parts lie inside it.
            return self.refresh_from(pos, self.height, Change::Shrank);
        }
        // Full: the upper half moves to a new right sibling.
        let r = self.leaves.alloc();
        let half = LEAF_CAP / 2;
        let left = self.leaves[id as usize];
        let rl = &mut self.leaves[r as usize];
        rl.start[..LEAF_CAP - half].copy_from_slice(&left.start[half..]);
        rl.size[..LEAF_CAP - half].copy_from_slice(&left.size[half..]);
        rl.code[..LEAF_CAP - half].copy_from_slice(&left.code[half..]);
        rl.len = (LEAF_CAP - half) as u32;
        let ll = &mut self.leaves[id as usize];
        ll.len = half as u32;
        ll.start[half..].fill(u64::MAX);
        ll.size[half..].fill(0);
        ll.code[half..].fill(0);
        let (target, j) = if i <= half { (id, i) } else { (r, i - half) };
        let t = &mut self.leaves[target as usize];
        let n = t.len as usize;
        t.insert(j, n, s, e);
        t.len += 1;
        self.insert_child(pos, self.height, r);
    }

    /// The leaf at `pos` gained `[s, e)` at index `i` and nothing else
    /// changed: its new aggregate comes from its old one (its entry in its
    /// parent) and the new block, and so does every ancestor's, since each
    /// set of blocks only gained one (a summary is a function of its set
    /// alone, so the union's is the merge: [`AlignSummary::merge`]). No
    /// rescan of the leaf's blocks or of any node's children: an aligned
    /// workload's padding holes are all such inserts. `joined`: the block
    /// replaced two the leaf held, whose length classes may be gone.
    pub(super) fn gained(&mut self, pos: &Pos, i: usize, s: u64, e: u64, joined: bool) {
        let d = self.height;
        if d == 0 {
            return; // the leaf is the root: no entry to refresh
        }
        let o = self.entry(pos.node[d - 1], pos.slot[d - 1] as usize);
        let max = o.max.max(e - s);
        let sum = if self.summaries {
            AlignSummary::combine(max, s, e, Some((o.max, o.sum)), None)
        } else {
            AlignSummary::ZERO
        };
        let key = if i == 0 { s } else { o.key };
        let cls = if joined {
            self.classes_of_leaf(pos.leaf)
        } else {
            o.cls | self.class_of(e - s)
        };
        self.propagate(pos, d, Agg { key, max, sum, cls }, Change::Grew);
    }

    /// The node at depth `d` of `pos` split; `right` is its new right
    /// sibling, to enter the parent after it.
    pub(super) fn insert_child(&mut self, pos: &Pos, d: usize, right: u32) {
        self.shape += 1;
        let leafy = d == self.height;
        let left = self.node_at(pos, d);
        let (la, ra) = (self.agg(left, leafy), self.agg(right, leafy));
        if d == 0 {
            // The root split: a new root above both.
            let root = self.inners.alloc();
            let n = &mut self.inners[root as usize];
            n.len = 2;
            n.kid[0] = left;
            n.kid[1] = right;
            self.set_entry(root, 0, la);
            self.set_entry(root, 1, ra);
            self.root = root;
            self.height += 1;
            return;
        }
        let (p, c) = (pos.node[d - 1], pos.slot[d - 1] as usize);
        self.set_entry(p, c, la);
        let n = self.inners[p as usize].len as usize;
        if n < FANOUT {
            self.inner_put(p, c + 1, right, ra);
            return self.refresh_from(pos, d - 1, Change::Other);
        }
        let q = self.inners.alloc();
        let half = FANOUT / 2;
        let from = self.inners[p as usize];
        let qn = &mut self.inners[q as usize];
        let m = FANOUT - half;
        qn.key[..m].copy_from_slice(&from.key[half..]);
        qn.max[..m].copy_from_slice(&from.max[half..]);
        qn.sum[..m].copy_from_slice(&from.sum[half..]);
        qn.kid[..m].copy_from_slice(&from.kid[half..]);
        qn.cls[..m].copy_from_slice(&from.cls[half..]);
        qn.code[..m].copy_from_slice(&from.code[half..]);
        qn.len = m as u32;
        let pn = &mut self.inners[p as usize];
        pn.len = half as u32;
        pn.key[half..].fill(u64::MAX);
        pn.max[half..].fill(0);
        pn.cls[half..].fill(0);
        pn.code[half..].fill(0);
        if c < half {
            self.inner_put(p, c + 1, right, ra);
        } else {
            self.inner_put(q, c + 1 - half, right, ra);
        }
        self.insert_child(pos, d - 1, q);
    }

    /// Inserts child `kid` with aggregate `a` at index `i` of inner `p`
    /// (which has room).
    pub(super) fn inner_put(&mut self, p: u32, i: usize, kid: u32, a: Agg) {
        let n = &mut self.inners[p as usize];
        let len = n.len as usize;
        n.key.copy_within(i..len, i + 1);
        n.max.copy_within(i..len, i + 1);
        n.sum.copy_within(i..len, i + 1);
        n.kid.copy_within(i..len, i + 1);
        n.cls.copy_within(i..len, i + 1);
        codes_opened(&mut n.code, i);
        n.kid[i] = kid;
        n.len += 1;
        self.set_entry(p, i, a);
    }

    /// Removes index `i` of inner `p`.
    pub(super) fn inner_take(&mut self, p: u32, i: usize) {
        let n = &mut self.inners[p as usize];
        let len = n.len as usize;
        n.key.copy_within(i + 1..len, i);
        n.max.copy_within(i + 1..len, i);
        n.sum.copy_within(i + 1..len, i);
        n.kid.copy_within(i + 1..len, i);
        n.cls.copy_within(i + 1..len, i);
        codes_closed(&mut n.code, i);
        n.key[len - 1] = u64::MAX;
        n.max[len - 1] = 0;
        n.cls[len - 1] = 0;
        n.len -= 1;
    }

    /// Removes the block at `pos` from its leaf (the count `len` is the
    /// caller's), rebalancing an underflow; `how` is what the whole update
    /// did to the leaf's blocks.
    pub(super) fn leaf_remove(&mut self, pos: &Pos, how: Change) {
        if self.leaf_cut(pos) {
            self.refresh_from(pos, self.height, how);
        } else {
            self.underflow(pos, self.height, how);
        }
    }

    /// Takes the block at `pos` out of its leaf, nothing above it updated;
    /// false if the leaf now underflows (too few blocks for a non-root
    /// leaf).
    #[inline]
    pub(super) fn leaf_cut(&mut self, pos: &Pos) -> bool {
        let l = &mut self.leaves[pos.leaf as usize];
        let n = l.len as usize;
        l.take(pos.at, n);
        l.len -= 1;
        self.height == 0 || l.len as usize >= LEAF_MIN
    }

    /// The node at depth `d >= 1` of `pos` holds too few entries: it
    /// borrows from a sibling or merges with one.
    pub(super) fn underflow(&mut self, pos: &Pos, d: usize, how: Change) {
        self.shape += 1;
        let leafy = d == self.height;
        let (p, c) = (pos.node[d - 1], pos.slot[d - 1] as usize);
        let (li, ri) = if c > 0 { (c - 1, c) } else { (c, c + 1) };
        let (a, b) = {
            let n = &self.inners[p as usize];
            (n.kid[li], n.kid[ri])
        };
        let merged = if leafy {
            self.leaf_balance(a, b)
        } else {
            self.inner_balance(a, b)
        };
        let la = self.agg(a, leafy);
        self.set_entry(p, li, la);
        if merged {
            self.inner_take(p, ri);
            if leafy {
                self.leaves.release(b);
            } else {
                self.inners.release(b);
            }
            let plen = self.inners[p as usize].len as usize;
            if d == 1 {
                if plen == 1 {
                    // The root has one child left: it becomes the root.
                    self.root = a;
                    self.height -= 1;
                    self.inners.release(p);
                }
                return;
            }
            if plen < INNER_MIN {
                return self.underflow(pos, d - 1, how);
            }
        } else {
            let rb = self.agg(b, leafy);
            self.set_entry(p, ri, rb);
        }
        // The parent's blocks are those of its children before, changed
        // as `how` says: moving blocks between siblings changes no set.
        self.refresh_from(pos, d - 1, how);
    }

    /// Evens out adjacent leaves `a` and `b`, or moves all of `b` into `a`
    /// when they fit in one (returns true then).
    pub(super) fn leaf_balance(&mut self, a: u32, b: u32) -> bool {
        let (la, lb) = (self.leaves[a as usize], self.leaves[b as usize]);
        let (na, nb) = (la.len as usize, lb.len as usize);
        let total = na + nb;
        let keep = if total <= LEAF_CAP { total } else { total / 2 };
        let mut start = [0u64; 2 * LEAF_CAP];
        let mut size = [0u64; 2 * LEAF_CAP];
        start[..na].copy_from_slice(&la.start[..na]);
        start[na..total].copy_from_slice(&lb.start[..nb]);
        size[..na].copy_from_slice(&la.size[..na]);
        size[na..total].copy_from_slice(&lb.size[..nb]);
        for (id, from, to) in [(a, 0, keep), (b, keep, total)] {
            let l = &mut self.leaves[id as usize];
            *l = EMPTY_LEAF;
            l.start[..to - from].copy_from_slice(&start[from..to]);
            l.size[..to - from].copy_from_slice(&size[from..to]);
            l.recode();
            l.len = (to - from) as u32;
        }
        keep == total
    }

    /// [`leaf_balance`](Self::leaf_balance) for inner nodes.
    pub(super) fn inner_balance(&mut self, a: u32, b: u32) -> bool {
        let (x, y) = (self.inners[a as usize], self.inners[b as usize]);
        let (na, nb) = (x.len as usize, y.len as usize);
        let total = na + nb;
        let keep = if total <= FANOUT { total } else { total / 2 };
        let mut all = [(0u64, 0u64, AlignSummary::ZERO, 0u32, 0, 0u8); 2 * FANOUT];
        let mut k = 0;
        for (n, len) in [(&x, na), (&y, nb)] {
            for i in 0..len {
                all[k] = (n.key[i], n.max[i], n.sum[i], n.kid[i], n.cls[i], n.code[i]);
                k += 1;
            }
        }
        for (node, range) in [(a, 0..keep), (b, keep..total)] {
            let n = &mut self.inners[node as usize];
            n.key = [u64::MAX; FANOUT];
            n.max = [0; FANOUT];
            n.cls = [0; FANOUT];
            n.code = [0; FANOUT];
            n.len = range.len() as u32;
            for (j, i) in range.enumerate() {
                (n.key[j], n.max[j], n.sum[j], n.kid[j], n.cls[j], n.code[j]) = all[i];
            }
        }
        keep == total
    }
}
