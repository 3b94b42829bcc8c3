//! Length classes: the best fit of short requests by one bit scan and one
//! descent of the address tree, with the short blocks kept out of the
//! size index.
//!
//! ```text
//!   class c (0..CLASSES):  blocks exactly (c + 1) granules of 2^g long
//!   leaf:                  its classes, computed from its block lengths
//!   inner:                 cls[i] = the classes of the blocks below child i
//!   the tree's classes:    OR of the root's, plus the wilderness (kept apart)
//! ```
//!
//! Every block of a class has the same length, so the best fit of an
//! unaligned request of `n` granules is the lowest block of the first
//! class at or above `n - 1` that some block has: the first set bit of the
//! tree's classes from there, then at each level the first child whose
//! classes hold that bit, then the first block of that length in the leaf.
//! The path found is the `Pos` the update needs, and nothing else is read.
//!
//! The same words rule a bound out at a glance (`classes_rule_out`, the
//! tree's `may_beat`): when no class from the request's to the bound's
//! length has a block, no block of the tree holds the request and comes
//! before the bound. The vmap layer's usual bound is an isolated block of
//! exactly the request's length, which then needs no search. The OR of
//! the root's words is kept with the tree's version, so a tree that has
//! not changed since (the isolated blocks come and go outside it) is asked
//! with one load.
//!
//! Blocks longer than `CLASSES` granules stay in the size index
//! (`by_size.rs`), which then holds only them: an update of a short block
//! costs the address tree's path, whose class words change with its
//! maxima, and no index update. A class word is exact: a removal that
//! clears a child's class bit recomputes its parent's word from its
//! children (16 words, or a leaf's lengths). While the classes are off,
//! every class word is 0 and the updates read and write none.
//!
//! The classes are kept from the size index's first use (a best fit) until
//! a best fit they cannot answer (aligned above the granule floor, or
//! inside a window): that one files the short blocks in the size index and
//! turns the classes off for good. When the granule floor falls below
//! their granule, the next best fit moves them to the new granule (the
//! blocks now longer than `CLASSES` granules go into the index): O(n), at
//! most once per bit of the floor.

use super::node::Leaf;
use super::{BTree, Pos};
use crate::storage::Storage;

/// A set of length classes, bit `c` for blocks of `c + 1` granules.
pub(super) type Classes = u64;

/// Classes kept: blocks of 1 to `CLASSES` granules.
pub(super) const CLASSES: u64 = Classes::BITS as u64;

/// The class bit of a block `len` long in granules of `2^g` (none for a
/// block longer than `CLASSES` granules).
#[inline]
pub(super) fn class_bit(len: u64, g: u32) -> Classes {
    let c = (len >> g).wrapping_sub(1);
    Classes::from(c < CLASSES) << (c & (CLASSES - 1))
}

/// Whether a block `len` long is in no class, for granules of `2^g`: the
/// size index files it.
#[inline]
pub(super) fn beyond_classes(len: u64, g: u32) -> bool {
    len >> g > CLASSES
}

/// The classes of a leaf's blocks.
#[inline]
pub(super) fn leaf_classes(l: &Leaf, g: u32) -> Classes {
    let n = (l.len as usize).min(l.size.len());
    l.size[..n].iter().fold(0, |m, &len| m | class_bit(len, g))
}

impl<S: Storage> BTree<S> {
    /// The classes' granule exponent, while they are on.
    #[inline]
    pub(super) fn class_granule(&self) -> Option<u32> {
        self.classes.map(u32::from)
    }

    /// The classes of leaf `id`, 0 while the classes are off.
    #[inline]
    pub(super) fn classes_of_leaf(&self, id: u32) -> Classes {
        match self.class_granule() {
            Some(g) => leaf_classes(&self.leaves[id as usize], g),
            None => 0,
        }
    }

    /// The class bit of a block `len` long, 0 while the classes are off.
    #[inline]
    pub(super) fn class_of(&self, len: u64) -> Classes {
        self.class_granule().map_or(0, |g| class_bit(len, g))
    }

    /// The classes of leaf `id`, whose classes were `old` before one of
    /// its blocks changed from `was` to `now` long: the old ones with the
    /// new block's, unless the old block's class may have gone.
    #[inline]
    pub(super) fn leaf_classes_after(&self, id: u32, old: Classes, was: u64, now: u64) -> Classes {
        let Some(g) = self.class_granule() else {
            return 0;
        };
        let (gone, new) = (class_bit(was, g), class_bit(now, g));
        if gone == 0 || gone == new {
            old | new
        } else {
            leaf_classes(&self.leaves[id as usize], g)
        }
    }

    /// The classes of inner node `id`: its children's together (0 while
    /// the classes are off).
    #[inline]
    pub(super) fn classes_of_inner(&self, id: u32) -> Classes {
        match self.class_granule() {
            Some(_) => self.inners[id as usize].cls.iter().fold(0, |m, &c| m | c),
            None => 0,
        }
    }

    /// Whether the classes show that no block is `size` to `longest`
    /// bytes long (both within the classes): then no block holds a request
    /// of `size` bytes and is shorter than a bound `longest` long, or as
    /// long and lower, so a best fit below that bound has no answer. False
    /// when they cannot tell. Every block of a length in the range has its
    /// class among the range's (the classes' granule is the floor or
    /// coarser), so a clear range is proof.
    #[inline]
    pub(super) fn classes_rule_out(&mut self, size: u64, longest: u64) -> bool {
        let Some(g) = self.class_granule() else {
            return false;
        };
        // Classes `a - 1 ..= b - 1`, when both are classes.
        let (a, b) = (size >> g, longest >> g);
        if a == 0 || a > b || b > CLASSES {
            return false;
        }
        if self
            .wild
            .is_some_and(|(s, e)| (a..=b).contains(&((e - s) >> g)))
        {
            return false;
        }
        if self.nodes_classes.0 != self.version {
            self.nodes_classes = (self.version, self.classes_of_nodes(g));
        }
        debug_assert_eq!(self.nodes_classes.1, self.classes_of_nodes(g));
        let range = (Classes::MAX << (a - 1)) & (Classes::MAX >> (CLASSES - b));
        self.nodes_classes.1 & range == 0
    }

    /// The classes of the blocks in the nodes (the wilderness left out),
    /// read at the root. Kept from one call to the next while the tree is
    /// unchanged: a best fit that takes back an isolated block of exactly
    /// its size asks this of the same tree every time.
    #[inline]
    fn classes_of_nodes(&self, g: u32) -> Classes {
        match self.height {
            0 => leaf_classes(&self.leaves[self.root as usize], g),
            _ => self.classes_of_inner(self.root),
        }
    }

    /// Turns the classes on in granules of the floor, for a new size
    /// index (which then files only the blocks beyond them).
    pub(super) fn classes_on(&mut self) {
        self.classes = Some(self.floor as u8);
        self.rebuild_entries();
    }

    /// Turns the classes off for good: the size index files every block.
    pub(super) fn classes_off(&mut self) {
        let Some(g) = self.classes.take().map(u32::from) else {
            return;
        };
        if let Some(mut ix) = self.by_size.take() {
            self.index_all(&mut ix, |s, e| {
                (!beyond_classes(e - s, g)).then_some((e - s, s))
            });
            self.by_size = Some(ix);
        }
        self.rebuild_entries();
    }

    /// Moves the classes to the granule floor, if it fell below theirs:
    /// the blocks no longer in a class go into the size index.
    fn regranulate(&mut self) {
        let Some(g) = self.class_granule() else {
            return;
        };
        if self.floor >= g {
            return;
        }
        let f = self.floor;
        if let Some(mut ix) = self.by_size.take() {
            let moved = |s: u64, e: u64| {
                let len = e - s;
                (!beyond_classes(len, g) && beyond_classes(len, f)).then_some((len, s))
            };
            self.index_all(&mut ix, moved);
            self.by_size = Some(ix);
        }
        self.classes = Some(f as u8);
        self.rebuild_entries();
    }

    /// Recomputes every inner entry from the blocks (after the classes
    /// changed meaning).
    fn rebuild_entries(&mut self) {
        self.nodes_classes.0 = super::NO_VERSION;
        if self.height > 0 {
            self.rebuild(self.root, 0);
        }
    }

    /// While the classes are on: whether they answer a best fit of `size`
    /// bytes aligned to `2^k` (`whole`: the window holds every block);
    /// turns them off when they cannot.
    pub(super) fn classes_answer(&mut self, k: u32, whole: bool) -> bool {
        if self.classes.is_none() {
            return false;
        }
        if !whole || k > self.floor {
            self.classes_off();
            return false;
        }
        self.regranulate();
        true
    }

    /// The best fit of `size > 0` bytes at any start (every start is
    /// aligned enough), among the blocks whose `(length, start)` is below
    /// `bound`, while the classes are on and at the floor's granule: its
    /// start, and `pos` set to it.
    pub(super) fn class_fit(&mut self, size: u64, bound: (u64, u64), pos: &mut Pos) -> Option<u64> {
        let g = self.class_granule()?;
        if self.height == 0 {
            return self.leaf_fit(size, bound, pos);
        }
        let need = ((size - 1) >> g) + 1;
        if need <= CLASSES {
            let from = Classes::MAX << (need - 1);
            let wild = self
                .wild
                .map(|(s, e)| (e - s, s))
                .filter(|&(len, _)| len >= size && !beyond_classes(len, g));
            let cls = self.classes_of_inner(self.root) & from;
            let nodes = (cls != 0).then(|| {
                let c = cls.trailing_zeros();
                ((u64::from(c) + 1) << g, c)
            });
            let best = match (nodes, wild) {
                (Some((len, c)), w) if w.map_or(true, |w| len <= w.0) => {
                    let s = self.descend_to_class(c, len, pos);
                    (len, s)
                }
                (_, Some(w)) => {
                    *pos = Pos::wild();
                    w
                }
                _ => return self.index_fit(size, bound, pos),
            };
            return (best < bound).then_some(best.1);
        }
        self.index_fit(size, bound, pos)
    }

    /// [`class_fit`](Self::class_fit) when the root is a leaf: the
    /// shortest block at least `size` long there or the wilderness, by a
    /// scan (the size index holds the longer ones of the same blocks).
    fn leaf_fit(&self, size: u64, bound: (u64, u64), pos: &mut Pos) -> Option<u64> {
        let l = &self.leaves[self.root as usize];
        let mut best = (bound, None);
        for i in 0..l.len as usize {
            let k = (l.size[i], l.start[i]);
            if k.0 >= size && k < best.0 {
                best = (k, Some(i));
            }
        }
        let wild = self.wild.map(|(s, e)| (e - s, s));
        match (best, wild) {
            ((b, _), Some(w)) if w.0 >= size && w < b => *pos = Pos::wild(),
            ((_, Some(i)), _) => pos.set_leaf(self.root, i),
            _ => return None,
        }
        Some(self.get(pos).0)
    }

    /// The first block of the size index from `size` on, below `bound`
    /// (while the classes are on, every indexed block is longer than any
    /// class, so the first is the best fit).
    fn index_fit(&self, size: u64, bound: (u64, u64), pos: &mut Pos) -> Option<u64> {
        let g = self.class_granule()?;
        if !beyond_classes(bound.0, g) {
            return None; // a bound in the classes is shorter than every entry
        }
        let ix = self.by_size.as_ref()?;
        let (_, s) = ix
            .iter_from(&self.leaves, &self.inners, (size, 0))
            .next()
            .filter(|&k| k < bound)?;
        *pos = self.find(s).expect("an indexed block is in the tree");
        Some(s)
    }

    /// The lowest block of class `c` (`len` long), which the nodes hold:
    /// its start, and `pos` set to it.
    fn descend_to_class(&self, c: u32, len: u64, pos: &mut Pos) -> u64 {
        let bit: Classes = 1 << c;
        let mut id = self.root;
        for d in 0..self.height {
            let n = &self.inners[id as usize];
            let i = n.cls.iter().position(|&m| m & bit != 0);
            let i = i.expect("a child's classes hold what its parent's do");
            pos.node[d] = id;
            pos.slot[d] = i as u8;
            id = n.kid[i];
        }
        let l = &self.leaves[id as usize];
        let i = l.size.iter().position(|&x| x == len);
        let i = i.expect("a leaf's classes are its blocks'");
        pos.set_leaf(id, i);
        l.start[i]
    }
}
