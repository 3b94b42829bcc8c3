//! Descents from the root to the leaf of a key, steps from leaf to leaf,
//! and the reads built on them: the block at a position, the block
//! containing an address, the blocks in address order.

use super::node::{last_below, leaf_max};
use super::{BTree, Pos};
use crate::storage::{Heap, Storage};

/// The blocks of a [`BTree`] in address order.
#[derive(Debug, Clone)]
pub struct Iter<'a, S: Storage = Heap> {
    pub(super) t: &'a BTree<S>,
    pub(super) pos: Pos,
    pub(super) tree_done: bool,
    pub(super) wild: Option<(u64, u64)>,
}

impl<S: Storage> Iterator for Iter<'_, S> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        while !self.tree_done {
            let l = &self.t.leaves[self.pos.leaf as usize];
            if self.pos.at < l.len as usize {
                self.pos.at += 1;
                return Some(l.block(self.pos.at - 1));
            }
            self.tree_done = !self.t.next_leaf(&mut self.pos);
        }
        self.wild.take()
    }
}

impl<S: Storage> BTree<S> {
    /// The block at `pos`.
    #[inline]
    pub fn get(&self, pos: &Pos) -> (u64, u64) {
        if pos.wild {
            return self.wild.expect("the wilderness");
        }
        let l = &self.leaves[pos.leaf as usize];
        l.block(pos.at)
    }

    /// The lowest start of any block, the wilderness included (`u64::MAX`
    /// when there is none), read at the root.
    ///
    /// # Complexity
    /// O(1).
    #[inline]
    pub fn lowest_start(&self) -> u64 {
        self.nodes_lowest_start()
            .min(self.wild.map_or(u64::MAX, |w| w.0))
    }

    /// The lowest start in the nodes (`u64::MAX` when they hold none: an
    /// empty root leaf's first slot is empty).
    #[inline]
    pub(super) fn nodes_lowest_start(&self) -> u64 {
        if self.height == 0 {
            self.leaves[self.root as usize].start[0]
        } else {
            self.inners[self.root as usize].key[0]
        }
    }

    /// Whether a block starting below `b` may hold `size` bytes: read at
    /// the root and the wilderness, so false only when every block starts
    /// at or above `b` or every one that starts below is shorter.
    ///
    /// The root's longest block is kept from one call to the next while
    /// the tree is unchanged: an allocator whose allocations take back
    /// isolated blocks asks this of the same tree every time, and reading
    /// it is a scan of all the root's children.
    #[inline(always)]
    pub(crate) fn may_hold_below(&mut self, b: u64, size: u64) -> bool {
        if self.lowest_start() >= b {
            return false;
        }
        if self.wild.is_some_and(|(s, e)| s < b && e - s >= size) {
            return true;
        }
        if self.nodes_max.0 != self.version {
            self.nodes_max = (self.version, self.nodes_max_len());
        }
        debug_assert_eq!(self.nodes_max.1, self.nodes_max_len());
        self.nodes_max.1 >= size
    }

    /// The longest block (0 when empty).
    pub fn max_len(&self) -> u64 {
        let w = self.wild.map_or(0, |(s, e)| e - s);
        w.max(self.nodes_max_len())
    }

    /// The longest block in the nodes, the wilderness left out (0 when
    /// they hold none), read at the root.
    #[inline]
    pub(super) fn nodes_max_len(&self) -> u64 {
        if self.height == 0 {
            leaf_max(&self.leaves[self.root as usize])
        } else {
            self.inner_max(self.root)
        }
    }

    /// The path to the leaf holding the last block starting below `key`
    /// (the leftmost leaf if none), and the count of that leaf's blocks
    /// starting below `key`.
    #[inline]
    pub(super) fn descend_below(&self, key: u64) -> Pos {
        let mut pos = Pos::new();
        self.descend_below_into(key, &mut pos);
        pos
    }

    /// [`descend_below`](Self::descend_below), written into `pos` where
    /// the caller keeps it. A `Pos` filled field by field and then copied
    /// whole is read back with wide loads from narrow stores still in
    /// flight, which the processor cannot forward: filled in place, it is
    /// not copied.
    #[inline]
    pub(super) fn descend_below_into(&self, key: u64, pos: &mut Pos) {
        self.descend_from(self.root, 0, key, pos);
    }

    /// The rest of [`descend_below_into`](Self::descend_below_into) from
    /// node `at` at depth `d`, where `pos` already holds the path above.
    #[inline(always)]
    pub(super) fn descend_from(&self, mut at: u32, d: usize, key: u64, pos: &mut Pos) {
        pos.wild = false;
        for e in d..self.height {
            let n = &self.inners[at as usize];
            let c = last_below(&n.key, key);
            pos.node[e] = at;
            pos.slot[e] = c as u8;
            at = n.kid[c];
        }
        pos.leaf = at;
        self.place_in_leaf(key, pos);
    }

    /// Debug builds: `pos` is where a descent for `key` from the root goes.
    #[cfg(debug_assertions)]
    pub(super) fn assert_descends_to(&self, key: u64, pos: &Pos) {
        let mut full = Pos::new();
        self.descend_below_into(key, &mut full);
        assert_eq!((full.leaf, full.at), (pos.leaf, pos.at));
        assert_eq!(full.node[..self.height], pos.node[..self.height]);
        assert_eq!(full.slot[..self.height], pos.slot[..self.height]);
    }

    /// Sets `pos.at` to the count of blocks of `pos.leaf` starting below
    /// `key`.
    #[inline]
    pub(super) fn place_in_leaf(&self, key: u64, pos: &mut Pos) {
        // An empty leaf's first start is `u64::MAX`: no key is above it.
        let l = &self.leaves[pos.leaf as usize];
        pos.at = if l.start[0] >= key {
            0
        } else {
            last_below(&l.start, key) + 1
        };
    }

    /// The deepest inner level `d` of `pos` whose node has a child after
    /// `slot[d]`, and that child: where the path to the next leaf branches
    /// off. `None` at the last leaf.
    #[inline]
    pub(super) fn branch_to_next(&self, pos: &Pos) -> Option<(usize, u32)> {
        let mut d = self.height;
        while d > 0 {
            d -= 1;
            let n = &self.inners[pos.node[d] as usize];
            let c = pos.slot[d] as usize + 1;
            if c < n.len as usize {
                return Some((d, n.kid[c]));
            }
        }
        None
    }

    /// Moves `pos` to the first block of the next leaf; false at the last.
    pub(super) fn next_leaf(&self, pos: &mut Pos) -> bool {
        let Some((d, _)) = self.branch_to_next(pos) else {
            return false;
        };
        pos.slot[d] += 1;
        for e in d + 1..=self.height {
            let kid = self.inners[pos.node[e - 1] as usize].kid[pos.slot[e - 1] as usize];
            if e == self.height {
                pos.leaf = kid;
            } else {
                pos.node[e] = kid;
                pos.slot[e] = 0;
            }
        }
        pos.at = 0;
        true
    }

    /// The leaf after the one at `pos`, if any: [`next_leaf`](Self::next_leaf)
    /// without moving `pos` (no copy of it either).
    #[inline]
    pub(super) fn leaf_after(&self, pos: &Pos) -> Option<u32> {
        let (d, mut kid) = self.branch_to_next(pos)?;
        for _ in d + 1..self.height {
            kid = self.inners[kid as usize].kid[0];
        }
        Some(kid)
    }

    /// The path to the last block of the tree (the wilderness excluded),
    /// `at` one past it.
    pub(super) fn rightmost(&self) -> Pos {
        let mut pos = Pos::new();
        let mut at = self.root;
        for d in 0..self.height {
            let n = &self.inners[at as usize];
            pos.node[d] = at;
            pos.slot[d] = (n.len - 1) as u8;
            at = n.kid[n.len as usize - 1];
        }
        pos.leaf = at;
        pos.at = self.leaves[at as usize].len as usize;
        pos
    }

    /// The block containing `addr`, if any.
    ///
    /// # Complexity
    /// O(log n).
    pub fn containing(&self, addr: u64) -> Option<(u64, u64)> {
        if let Some(w) = self.wild {
            if w.0 <= addr {
                return (addr < w.1).then_some(w);
            }
        }
        let pos = self.descend_below(addr.checked_add(1)?);
        let l = &self.leaves[pos.leaf as usize];
        let i = pos.at.checked_sub(1)?;
        let (s, e) = l.block(i);
        (addr < e).then_some((s, e))
    }

    /// The position of the block starting exactly at `start`.
    pub fn find(&self, start: u64) -> Option<Pos> {
        if let Some(w) = self.wild {
            if w.0 <= start {
                return (w.0 == start).then(Pos::wild);
            }
        }
        let mut pos = self.descend_below(start.checked_add(1)?);
        pos.at = pos.at.checked_sub(1)?;
        (self.leaves[pos.leaf as usize].start[pos.at] == start).then_some(pos)
    }

    /// The blocks in address order from the one holding `addr` (or the
    /// first above it), the block before it included when it ends at or
    /// below `addr`.
    ///
    /// # Complexity
    /// O(log n) to start, O(1) amortized per block.
    pub fn iter_from(&self, addr: u64) -> Iter<'_, S> {
        let mut pos = self.descend_below(addr);
        pos.at = pos.at.saturating_sub(1);
        Iter {
            t: self,
            pos,
            tree_done: false,
            wild: self.wild,
        }
    }

    /// The blocks in address order.
    pub fn iter(&self) -> Iter<'_, S> {
        let mut pos = self.descend_below(0);
        pos.at = 0;
        Iter {
            t: self,
            pos,
            tree_done: false,
            wild: self.wild,
        }
    }
}
