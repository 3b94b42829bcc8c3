//! A parent's entry for each child (its lowest start, longest block and
//! alignment summary), and how an update refreshes the entries above the
//! node it changed: bottom up along the update's path, each derived from
//! the old entry and the one child that changed, stopping at the first
//! that comes out unchanged.

use super::classes::Classes;
use super::node::{code, leaf_max, max_of};
use super::{BTree, Pos};
use crate::storage::Storage;
use crate::tree::summary::AlignSummary;

/// The largest drop of a node's longest block, in granules of its summary,
/// for which the summary is capped at the new longest block rather than
/// recomputed (see [`BTree::shrunk_sum`] and the module docs). Two: an
/// area taken back out of the block it had merged into with a one-granule
/// padding on each side (alignment to two granules).
pub(super) const CAPPED_DROP: u64 = 2;

/// What a parent keeps about a child: its lowest start, its longest block,
/// its alignment summary (the default while summaries are off) and its
/// length classes (0 while classes are off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Agg {
    pub(super) key: u64,
    pub(super) max: u64,
    pub(super) sum: AlignSummary,
    pub(super) cls: Classes,
}

/// How an update changed the blocks below a node, which decides how its
/// ancestors' summaries are refreshed (see [`BTree::propagate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// Every block below is one that was there, or lies inside one that
    /// was (a block cut by an allocation, a block removed): no usable
    /// length grew.
    Shrank,
    /// Blocks were only added or extended (a free beside free space).
    Grew,
    /// Anything else (a merge that also removed a block, a split node).
    Other,
}

impl<S: Storage> BTree<S> {
    #[inline]
    pub(super) fn leaf_agg(&self, id: u32) -> Agg {
        let l = &self.leaves[id as usize];
        let max = leaf_max(l);
        let sum = if self.summaries {
            self.leaf_sum(id, max)
        } else {
            AlignSummary::ZERO
        };
        Agg {
            key: l.start[0],
            max,
            sum,
            cls: self.classes_of_leaf(id),
        }
    }

    pub(super) fn leaf_sum(&self, id: u32, max: u64) -> AlignSummary {
        let l = &self.leaves[id as usize];
        let n = l.len as usize;
        AlignSummary::of_ranges(max, &l.start[..n], &l.size[..n])
    }

    #[inline]
    pub(super) fn inner_agg(&self, id: u32) -> Agg {
        let max = self.inner_max(id);
        let sum = if self.summaries {
            self.inner_sum(id, max)
        } else {
            AlignSummary::ZERO
        };
        Agg {
            key: self.inners[id as usize].key[0],
            max,
            sum,
            cls: self.classes_of_inner(id),
        }
    }

    /// The summary of node `id` (a leaf if `leafy`) whose longest block is
    /// `max`, recomputed from its blocks or its children's entries.
    pub(super) fn node_sum(&self, id: u32, leafy: bool, max: u64) -> AlignSummary {
        if leafy {
            self.leaf_sum(id, max)
        } else {
            self.inner_sum(id, max)
        }
    }

    /// The summary of a node whose blocks only shrank, from its old entry
    /// `o`, while its longest block fell to `max`: the old one while
    /// `max` holds (still an upper bound); capped at `max` after a drop of
    /// at most [`CAPPED_DROP`] granules; none (recompute it) after a
    /// larger drop.
    #[inline]
    pub(super) fn shrunk_sum(o: &Agg, max: u64) -> Option<AlignSummary> {
        if max == o.max {
            Some(o.sum)
        } else if (o.max - max) >> o.sum.granule() <= CAPPED_DROP {
            Some(o.sum.capped(o.max, max))
        } else {
            None
        }
    }

    #[inline]
    pub(super) fn agg(&self, id: u32, leaf: bool) -> Agg {
        if leaf {
            self.leaf_agg(id)
        } else {
            self.inner_agg(id)
        }
    }

    #[inline]
    pub(super) fn entry(&self, p: u32, c: usize) -> Agg {
        match self.classes {
            Some(_) => self.entry_with::<true>(p, c),
            None => self.entry_with::<false>(p, c),
        }
    }

    /// [`entry`](Self::entry) where `CLS` says whether the classes are on.
    #[inline]
    fn entry_with<const CLS: bool>(&self, p: u32, c: usize) -> Agg {
        let n = &self.inners[p as usize];
        Agg {
            key: n.key[c],
            max: n.max[c],
            // Off, the summaries are all ZERO: not read (another line).
            sum: if self.summaries {
                n.sum[c]
            } else {
                AlignSummary::ZERO
            },
            cls: if CLS { n.cls[c] } else { 0 },
        }
    }

    #[inline]
    pub(super) fn set_entry(&mut self, p: u32, c: usize, a: Agg) {
        self.set_entry_with::<true>(p, c, a);
    }

    /// [`set_entry`](Self::set_entry), the classes written only if `CLS`
    /// (while they are off, every entry's stay 0).
    #[inline]
    fn set_entry_with<const CLS: bool>(&mut self, p: u32, c: usize, a: Agg) {
        let n = &mut self.inners[p as usize];
        n.key[c] = a.key;
        // Most updates leave the maximum: its code is then left too.
        if n.max[c] != a.max {
            n.max[c] = a.max;
            n.code[c] = code(a.max);
        }
        n.sum[c] = a.sum;
        if CLS {
            n.cls[c] = a.cls;
        }
    }

    /// The node at depth `d` of `pos` (the leaf at `d == height`).
    #[inline]
    pub(super) fn node_at(&self, pos: &Pos, d: usize) -> u32 {
        if d == self.height {
            pos.leaf
        } else {
            pos.node[d]
        }
    }

    /// The node at depth `d` of `pos` changed as `how` says: refreshes its
    /// entry in its parent and so on up, stopping at the first entry left
    /// unchanged. A node that only [`Shrank`](Change::Shrank) and kept its
    /// longest block keeps its stored summary (still an upper bound).
    #[inline]
    pub(super) fn refresh_from(&mut self, pos: &Pos, d: usize, how: Change) {
        if d == 0 {
            return;
        }
        let id = self.node_at(pos, d);
        let leafy = d == self.height;
        let a = if how == Change::Shrank && self.summaries {
            let o = self.entry(pos.node[d - 1], pos.slot[d - 1] as usize);
            let (key, max, cls) = if leafy {
                let l = &self.leaves[id as usize];
                (l.start[0], leaf_max(l), self.classes_of_leaf(id))
            } else {
                let key = self.inners[id as usize].key[0];
                (key, self.inner_max(id), self.classes_of_inner(id))
            };
            let sum = if max == o.max {
                o.sum
            } else {
                self.node_sum(id, leafy, max)
            };
            Agg { key, max, sum, cls }
        } else {
            self.agg(id, leafy)
        };
        self.propagate(pos, d, a, how);
    }

    /// The node at depth `d` of `pos` now has aggregate `a`, and nothing
    /// else below its parent changed: stores it in the parent and goes up,
    /// after a shrink while entries change, otherwise to the root. Each parent's new aggregate is derived from
    /// its old one (its entry in the grandparent) and the one child that
    /// changed, so a node's children are rescanned only when the child
    /// that held its maximum shrank. The summary, by `how` the child's
    /// blocks changed:
    /// - [`Grew`](Change::Grew): every usable length of the parent is the
    ///   larger of its old one and the child's new one, and the summary
    ///   merges two parts, not every child;
    /// - [`Shrank`](Change::Shrank): no usable length grew, so the old
    ///   summary is still an upper bound while the parent's longest block
    ///   is unchanged, and is kept (a search that finds it stale tightens
    ///   it); after a small drop of the longest block it is capped at the
    ///   new one ([`BTree::shrunk_sum`]), and after a larger one
    ///   recomputed from the children;
    /// - [`Other`](Change::Other): recomputed from the children.
    #[inline]
    pub(super) fn propagate(&mut self, pos: &Pos, d: usize, a: Agg, how: Change) {
        match (self.summaries, self.classes) {
            (false, Some(_)) => self.propagate_plain::<true>(pos, d, a),
            (false, None) => self.propagate_plain::<false>(pos, d, a),
            (true, Some(_)) => self.propagate_with::<true>(pos, d, a, how),
            (true, None) => self.propagate_with::<false>(pos, d, a, how),
        }
    }

    /// [`propagate`](Self::propagate) while no summaries are kept: keys,
    /// maxima and (if `CLS`) classes are exact, so every change stops at
    /// the first entry it leaves unchanged, and no summary is read,
    /// compared or written.
    fn propagate_plain<const CLS: bool>(&mut self, pos: &Pos, mut d: usize, mut a: Agg) {
        while d > 0 {
            let (p, c) = (pos.node[d - 1], pos.slot[d - 1] as usize);
            let n = &mut self.inners[p as usize];
            let (key, max) = (n.key[c], n.max[c]);
            let cls = if CLS { n.cls[c] } else { 0 };
            if key == a.key && max == a.max && cls == a.cls {
                return;
            }
            n.key[c] = a.key;
            if max != a.max {
                n.max[c] = a.max;
                n.code[c] = code(a.max);
            }
            if CLS {
                n.cls[c] = a.cls;
            }
            if d == 1 {
                return; // p is the root
            }
            let g = &self.inners[pos.node[d - 2] as usize];
            let gc = pos.slot[d - 2] as usize;
            let (pkey, pmax) = (g.key[gc], g.max[gc]);
            let pcls = if CLS { g.cls[gc] } else { 0 };
            a = Agg {
                key: if c == 0 { a.key } else { pkey },
                max: if a.max >= pmax {
                    a.max
                } else if max < pmax {
                    pmax
                } else {
                    self.inner_max(p)
                },
                // As in `propagate_with`.
                cls: if !CLS {
                    0
                } else if cls & !a.cls == 0 {
                    pcls | a.cls
                } else {
                    self.classes_of_inner(p)
                },
                sum: AlignSummary::ZERO,
            };
            d -= 1;
        }
    }

    /// [`propagate`](Self::propagate) where `CLS` says whether the classes
    /// are on: off, no class word is read or written.
    fn propagate_with<const CLS: bool>(
        &mut self,
        pos: &Pos,
        mut d: usize,
        mut a: Agg,
        how: Change,
    ) {
        // A stored summary bounds the blocks below it, not the summaries
        // below it: one kept after a shrink can say less than a child's
        // (recomputed at a finer granule, so looser at high alignments).
        // So a child whose blocks grew, or changed otherwise, updates every
        // ancestor even when its own entry comes out unchanged; only a
        // shrink may stop early.
        let stop_early = how == Change::Shrank || !self.summaries;
        while d > 0 {
            let (p, c) = (pos.node[d - 1], pos.slot[d - 1] as usize);
            let o = self.entry_with::<CLS>(p, c);
            if o == a && stop_early {
                return;
            }
            self.set_entry_with::<CLS>(p, c, a);
            if d == 1 {
                return; // p is the root
            }
            let po = self.entry_with::<CLS>(pos.node[d - 2], pos.slot[d - 2] as usize);
            let key = if c == 0 { a.key } else { po.key };
            let max = if a.max >= po.max {
                a.max
            } else if o.max < po.max {
                po.max
            } else {
                self.inner_max(p)
            };
            // Exact classes: the old set and the child's new one, unless
            // the child lost a class another child may still have.
            let cls = if !CLS {
                0
            } else if o.cls & !a.cls == 0 {
                po.cls | a.cls
            } else {
                self.classes_of_inner(p)
            };
            let unchanged = a.sum == o.sum && a.max == o.max && stop_early;
            let shrunk = if how == Change::Shrank && self.summaries {
                Self::shrunk_sum(&po, max)
            } else {
                None
            };
            let sum = if !self.summaries || unchanged {
                po.sum
            } else if let Some(sum) = shrunk {
                sum
            } else if how == Change::Grew && a.sum.granule() <= o.sum.granule() {
                // The granule test keeps the result canonical: the
                // parent's granule is then the min of its old one and
                // the child's new one.
                AlignSummary::merge(max, (po.max, po.sum), (a.max, a.sum))
            } else {
                self.inner_sum(p, max)
            };
            a = Agg { key, max, sum, cls };
            d -= 1;
        }
    }

    pub(super) fn inner_max(&self, id: u32) -> u64 {
        // All FANOUT slots, those from `len` on 0 (see `Leaf`): no loop
        // exit to mispredict.
        max_of(&self.inners[id as usize].max)
    }

    pub(super) fn inner_sum(&self, id: u32, max: u64) -> AlignSummary {
        let nd = &self.inners[id as usize];
        let n = nd.len as usize;
        AlignSummary::of_children(max, &nd.max[..n], &nd.sum[..n])
    }

    /// Starts maintaining the alignment summaries if `align` could use them
    /// (above `2^granule_floor`), computing them once for the whole tree.
    ///
    /// # Complexity
    /// O(n) the first time, O(1) after.
    pub fn enable_summaries(&mut self, align: u64) {
        if self.summaries || align.trailing_zeros() <= self.floor {
            return;
        }
        self.summaries = true;
        if self.height > 0 {
            self.rebuild(self.root, 0);
        }
    }

    pub(super) fn rebuild(&mut self, id: u32, d: usize) -> Agg {
        let n = self.inners[id as usize].len as usize;
        for c in 0..n {
            let kid = self.inners[id as usize].kid[c];
            let a = if d + 1 == self.height {
                self.leaf_agg(kid)
            } else {
                self.rebuild(kid, d + 1)
            };
            self.set_entry(id, c, a);
        }
        self.inner_agg(id)
    }
}
