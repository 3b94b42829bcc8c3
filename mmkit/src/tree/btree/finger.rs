//! A free's lookup of the free blocks around its key ([`Neighbours`]),
//! which keeps the path it found (the finger) for the next lookup: from a
//! current finger a lookup reads one leaf, and a key in the very gap found
//! last reads nothing.

use super::{BTree, Pos, NO_VERSION};
use crate::balance::Balance;
use crate::storage::Storage;

/// What a redescent that kept two levels or more earns, and what one that
/// did not loses (see [`BTree::redescend_below`]): while more than half
/// pay, it is tried at every free; otherwise about one free in seventeen
/// tries it again.
pub(super) const ROUTE_PAID: i32 = 16;

/// Where the block after a key is, for [`Neighbours`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    None,
    /// At `pos.at` in the same leaf.
    Here,
    /// First in the next leaf.
    Leaf,
    Wild,
}

/// The free blocks around a key, as [`BTree::neighbours`] finds them.
#[derive(Debug, Clone, Copy)]
pub struct Neighbours {
    /// The last block starting below the key.
    pub prev: Option<(u64, u64)>,
    /// The first block starting at or above the key.
    pub next: Option<(u64, u64)>,
    /// The leaf where a block at the key goes, `at` its index there.
    pub(super) pos: Pos,
    pub(super) prev_wild: bool,
    pub(super) next_at: Next,
    /// The tree's [`version`](BTree::version) when `pos` was found: while
    /// it holds, `pos`'s path is still the way to its leaf (a finger).
    pub(super) version: u64,
    /// Whether that leaf was found to be the last (while `version` holds).
    pub(super) last_leaf: bool,
    /// The tree's [`shape`](BTree::shape) when `pos` was found: while it
    /// holds, `pos` is still a path of the tree, whatever blocks changed.
    pub(super) shape: u64,
    /// Whether descending from that path has paid lately (see
    /// [`BTree::redescend_below`]).
    pub(super) route: Balance,
}

impl Neighbours {
    /// Nothing found yet (filled by [`BTree::neighbours_into`]).
    pub const fn new() -> Self {
        Neighbours {
            prev: None,
            next: None,
            pos: Pos::new(),
            prev_wild: false,
            next_at: Next::None,
            version: NO_VERSION,
            last_leaf: false,
            shape: NO_VERSION,
            route: Balance::new(),
        }
    }

    /// Whether `key` lies in the gap this answer was found for: above
    /// `prev`'s start and not above `next`'s. Every key there has the same
    /// neighbours, and the same place for a block at it, in the same tree.
    #[inline]
    pub(super) fn holds_gap(&self, key: u64) -> bool {
        self.prev.map_or(true, |p| p.0 < key) && self.next.map_or(true, |n| key <= n.0)
    }

    /// Whether either block found is the wilderness.
    #[inline]
    pub(crate) fn wild_beside(&self) -> bool {
        self.prev_wild || self.next_at == Next::Wild
    }
}

impl Default for Neighbours {
    fn default() -> Self {
        Neighbours::new()
    }
}

impl<S: Storage> BTree<S> {
    /// The last block starting below `key` and the first starting at or
    /// above it, in one descent.
    ///
    /// # Complexity
    /// O(log n).
    pub fn neighbours(&self, key: u64) -> Neighbours {
        let mut nb = Neighbours::new();
        self.neighbours_into(key, &mut nb);
        nb
    }

    /// [`neighbours`](Self::neighbours), written into `nb` (whatever it
    /// held is replaced): returned by value, the result is built aside and
    /// copied, and the copy reads the path just written field by field
    /// (see `descend_below_into`).
    #[inline]
    pub fn neighbours_into(&self, key: u64, nb: &mut Neighbours) {
        // Nothing of another tree's answer is used: not its finger, nor
        // its path, nor whether descending from its path paid.
        (nb.version, nb.shape, nb.route) = (NO_VERSION, NO_VERSION, Balance::new());
        self.find_neighbours(key, nb);
    }

    /// [`neighbours_into`](Self::neighbours_into), starting from the leaf
    /// `nb` last found in this tree if no block changed since and `key`
    /// belongs there too: a free beside one found before (the working set
    /// above `mmkit bench fix-size-holes`' holes, whose frees leave the
    /// tree alone) reads one leaf instead of descending; and a key in the
    /// very gap between blocks that `nb` was found for keeps `nb` as it is,
    /// reading no node at all (those frees all fall between the highest
    /// hole and the wilderness). `nb` must be one filled by this tree (or
    /// new): the version says whether the path is current, not whose it
    /// is. Crate-private for that reason.
    ///
    /// # Complexity
    /// O(1) in the same gap or from a current finger, O(log n) otherwise.
    #[inline(always)]
    pub(crate) fn neighbours_near(&self, key: u64, nb: &mut Neighbours) {
        if nb.version == self.version && nb.holds_gap(key) {
            // Same tree, same gap between blocks: the same answer.
            debug_assert!(self.answers_alike(key, nb));
            return;
        }
        self.find_neighbours(key, nb);
    }

    /// Whether a lookup of `key` from nothing finds what `nb` holds.
    pub(super) fn answers_alike(&self, key: u64, nb: &Neighbours) -> bool {
        let mut fresh = Neighbours::new();
        self.find_neighbours(key, &mut fresh);
        (fresh.prev, fresh.next, fresh.prev_wild, fresh.next_at)
            == (nb.prev, nb.next, nb.prev_wild, nb.next_at)
            && (fresh.pos.leaf, fresh.pos.at) == (nb.pos.leaf, nb.pos.at)
    }

    /// [`neighbours_near`](Self::neighbours_near) without the shortcut for
    /// a key in the gap found last: from the finger's leaf, down from as
    /// much of its path as still leads to the key, or by a descent.
    #[inline(never)]
    pub(super) fn find_neighbours(&self, key: u64, nb: &mut Neighbours) {
        (nb.prev, nb.next, nb.prev_wild, nb.next_at) = (None, None, false, Next::None);
        // From a finger, a key past the leaf's last block found the leaf to
        // be the last: no next leaf to look for.
        let from_finger = nb.version == self.version && self.finger_holds(nb, key);
        if from_finger {
            self.place_in_leaf(key, &mut nb.pos);
            #[cfg(debug_assertions)]
            self.assert_descends_to(key, &nb.pos);
        } else {
            if nb.shape == self.shape && nb.route.admits() {
                let kept = self.redescend_below(key, &mut nb.pos);
                if kept >= 2 {
                    nb.route.earn(ROUTE_PAID);
                } else {
                    nb.route.lose(ROUTE_PAID);
                }
            } else {
                self.descend_below_into(key, &mut nb.pos);
            }
            (nb.version, nb.last_leaf, nb.shape) = (self.version, false, self.shape);
        }
        let at = nb.pos.at;
        let l = &self.leaves[nb.pos.leaf as usize];
        if at > 0 {
            nb.prev = Some(l.block(at - 1));
        }
        if at < l.len as usize {
            nb.next = Some(l.block(at));
            nb.next_at = Next::Here;
        } else if from_finger {
            debug_assert!(self.leaf_after(&nb.pos).is_none());
        } else if let Some(next) = self.leaf_after(&nb.pos) {
            let nl = &self.leaves[next as usize];
            nb.next = Some(nl.block(0));
            nb.next_at = Next::Leaf;
        }
        if let Some(w) = self.wild {
            if w.0 < key {
                nb.prev = Some(w);
                nb.prev_wild = true;
            } else if nb.next.is_none() {
                nb.next = Some(w);
                nb.next_at = Next::Wild;
            }
        }
    }

    /// Whether a descent for `key` would reach the leaf of `nb`'s path, a
    /// path that is current: past the leaf's first start (or the leaf is
    /// the first) and not past its last (or the leaf is the last). Every
    /// key of an inner node is its child's lowest start, so the first
    /// bounds the keys that the descent takes at each level from above and
    /// the last those it leaves from below. (First and last are read off
    /// the path here, not noted by every descent: the finger is seldom
    /// current in random workloads, and descents are their hot path. The
    /// last is noted once found: frees above every block ask again.)
    #[inline]
    pub(super) fn finger_holds(&self, nb: &mut Neighbours, key: u64) -> bool {
        let l = &self.leaves[nb.pos.leaf as usize];
        let n = l.len as usize;
        let p = &nb.pos;
        let path =
            || (0..self.height).map(|d| (p.slot[d] as usize, &self.inners[p.node[d] as usize]));
        let first = || path().all(|(c, _)| c == 0);
        let last = || path().all(|(c, nd)| c + 1 == nd.len as usize);
        if !(l.start[0] < key || first()) {
            return false;
        }
        if (n > 0 && key <= l.start[n - 1]) || nb.last_leaf {
            return true;
        }
        nb.last_leaf = last();
        nb.last_leaf
    }

    /// [`descend_below_into`](Self::descend_below_into) for a `pos` that is
    /// a path of this tree (no node split, borrowed or merged since it was
    /// found): it is kept from the root down as far as a descent for `key`
    /// would take it, and descended afresh only from there. Whether a
    /// level is kept is two keys of a node already known, so those reads
    /// do not wait on one another, where a descent waits at each level for
    /// the search of the one above. Frees among a working set that shares
    /// its lower levels (the areas above `mmkit bench align-holes`' holes)
    /// descend one or two levels instead of the whole height. Returns the
    /// levels kept. A random key leaves the path near the root, but may
    /// first read a node of it that is no longer cached, and the level it
    /// leaves at is a branch the processor cannot predict: `Neighbours`
    /// keeps a [`Balance`] of the redescents that kept two levels or more
    /// (one kept saves less than the branch costs), and random frees soon
    /// go back to plain descents.
    #[inline]
    pub(super) fn redescend_below(&self, key: u64, pos: &mut Pos) -> usize {
        let h = self.height;
        let kept = pos.node[..h].iter().zip(&pos.slot[..h]);
        let d = kept
            .take_while(|&(&id, &c)| {
                let (n, c) = (&self.inners[id as usize], c as usize);
                // `last_below` gives `c` iff `c`'s key is below `key` (or
                // `c` is the first) and the next is not (keys past `len`
                // are `u64::MAX`, below no key).
                (c == 0 || n.key[c] < key) && n.key.get(c + 1).map_or(true, |&k| k >= key)
            })
            .count();
        self.descend_from(self.node_at(pos, d), d, key, pos);
        #[cfg(debug_assertions)]
        self.assert_descends_to(key, pos);
        d
    }
}
