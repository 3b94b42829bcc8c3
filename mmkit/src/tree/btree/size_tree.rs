//! [`SizeTree`]: a plain B+tree of `(length, start)` pairs in ascending
//! order, the size index of the best-fit search (`by_size.rs`). Its nodes
//! come from the address tree's own pools, so it needs no heap of its own
//! and works on fixed storage.
//!
//! ```text
//!   leaf:   size[i], start[i]   entry i, sorted by (size, start)
//!   inner:  max[i], key[i]      child i's first entry, as (length, start)
//!           kid[i]              child i
//! ```
//!
//! The same `Leaf` and `Inner` types as the address tree, so the pools
//! hand out either; only the order differs (and an inner node's `max` is
//! its child's first length, not its longest: a size tree needs no
//! maxima).
//!
//! A tree *aligned* to `2^k` ([`SizeTree::aligned`]) also keeps, in each
//! inner entry's summary slot, an upper bound on the usable length at
//! `2^k` (`e - roundup(s, 2^k)`) of the blocks below that child, so
//! [`SizeTree::first_fit`] skips every subtree that cannot hold an
//! aligned request. A bound rises with every insert on its path and is
//! left as it is by a removal; a search that finds nothing in a subtree
//! lowers the subtree's bound to what it saw, so the next search of that
//! size does not go in again.
//!
//! ```text
//!   aligned inner:  max[i], key[i]   child i's first entry
//!                   sum[i]           >= the usable length of every entry below child i
//! ``` As in the address tree, every leaf is at the same depth, a
//! non-root leaf holds `LEAF_MIN..=LEAF_CAP` entries and a non-root inner
//! node `INNER_MIN..=FANOUT` children, and slots past a node's length are
//! empty (`u64::MAX` starts and keys, 0 lengths).

use super::node::{Inner, Leaf, Node, Pool, NONE};
use super::{FANOUT, INNER_MIN, LEAF_CAP, LEAF_MIN, MAX_HEIGHT};
use crate::ensure;
use crate::error::CheckError;
use crate::storage::Storage;
use crate::tree::summary::AlignSummary;

/// An entry of a size tree: `(length, start)`.
pub(super) type Key = (u64, u64);

/// A B+tree of [`Key`]s whose nodes live in the pools passed to each call
/// (see the [module docs](self)).
#[derive(Debug, Clone, Copy)]
pub(super) struct SizeTree {
    /// The root: a leaf when `height == 0`.
    root: u32,
    /// Inner levels above the leaves (with `align` and `root`, one word).
    levels: u16,
    /// `k` of an aligned tree, whose inner entries bound the usable
    /// lengths at `2^k` below them; 0 for a plain one.
    align: u16,
    /// Entries held.
    len: usize,
}

/// The usable length of `[s, e)` from its first start aligned to `2^k`,
/// if it holds one.
#[inline]
pub(super) fn usable(s: u64, e: u64, k: u32) -> Option<u64> {
    let mask = (1u64 << k) - 1;
    let a = s.checked_add(mask)? & !mask;
    (a < e).then(|| e - a)
}

/// An entry's usable length at `2^k` (0 for none).
#[inline]
fn usable_of(k: u32, (len, s): Key) -> u64 {
    usable(s, s.saturating_add(len), k).unwrap_or(0)
}

/// What [`SizeTree::first_fit`] found below a node.
enum Search {
    /// The first entry that holds the request.
    Found(Key),
    /// An entry at or past the bound: nothing before it holds the request.
    Stopped,
    /// None holds it: an upper bound on the usable lengths of the entries
    /// looked at (the whole subtree unless the search started inside it).
    Missed(u64),
}

/// The way from the root to a leaf: node and child slot per inner level.
struct Path {
    node: [u32; MAX_HEIGHT],
    slot: [usize; MAX_HEIGHT],
    leaf: u32,
}

/// A node of either kind as a list of entries, for the moves that splits,
/// borrows and merges make alike.
trait Entries: Node {
    /// An entry with whatever it points at.
    type E: Copy;
    const CAP: usize;
    fn count(&self) -> usize;
    fn set_count(&mut self, n: usize);
    fn get(&self, i: usize) -> Self::E;
    fn put(&mut self, i: usize, e: Self::E);
    /// Empties slot `i`.
    fn blank(&mut self, i: usize);
    /// The first entry's key (the node holds one).
    fn first(&self) -> Key;

    fn insert_entry(&mut self, i: usize, e: Self::E) {
        let n = self.count();
        for j in (i..n).rev() {
            self.put(j + 1, self.get(j));
        }
        self.put(i, e);
        self.set_count(n + 1);
    }

    fn remove_entry(&mut self, i: usize) {
        let n = self.count();
        for j in i + 1..n {
            self.put(j - 1, self.get(j));
        }
        self.blank(n - 1);
        self.set_count(n - 1);
    }
}

impl Entries for Leaf {
    type E = Key;
    const CAP: usize = LEAF_CAP;

    fn count(&self) -> usize {
        self.len as usize
    }

    fn set_count(&mut self, n: usize) {
        self.len = n as u32;
    }

    #[inline]
    fn get(&self, i: usize) -> Key {
        (self.size[i], self.start[i])
    }

    #[inline]
    fn put(&mut self, i: usize, (len, s): Key) {
        self.size[i] = len;
        self.start[i] = s;
    }

    fn blank(&mut self, i: usize) {
        self.clear(i);
    }

    fn first(&self) -> Key {
        self.get(0)
    }
}

impl Entries for Inner {
    /// The child's first entry, the child, and its bound.
    type E = (Key, u32, u64);
    const CAP: usize = FANOUT;

    fn count(&self) -> usize {
        self.len as usize
    }

    fn set_count(&mut self, n: usize) {
        self.len = n as u32;
    }

    #[inline]
    fn get(&self, i: usize) -> (Key, u32, u64) {
        ((self.max[i], self.key[i]), self.kid[i], self.bound(i))
    }

    #[inline]
    fn put(&mut self, i: usize, ((len, s), kid, b): (Key, u32, u64)) {
        self.max[i] = len;
        self.key[i] = s;
        self.kid[i] = kid;
        self.set_bound(i, b);
    }

    fn blank(&mut self, i: usize) {
        self.max[i] = 0;
        self.key[i] = u64::MAX;
        self.kid[i] = NONE;
        self.sum[i] = AlignSummary::ZERO;
    }

    fn first(&self) -> Key {
        self.get(0).0
    }
}

impl Inner {
    /// Child `i`'s bound in an aligned size tree.
    #[inline]
    fn bound(&self, i: usize) -> u64 {
        self.sum[i].to_bits()
    }

    #[inline]
    fn set_bound(&mut self, i: usize, b: u64) {
        self.sum[i] = AlignSummary::from_bits(b);
    }
}

/// Splits node `id` of `pool` (full): the upper half moves to a new node,
/// whose id it returns.
fn split<N: Entries, S: Storage>(pool: &mut Pool<N, S>, id: u32) -> u32 {
    let r = pool.alloc();
    let mut left = pool[id as usize];
    let mut right = pool[r as usize];
    let half = N::CAP / 2;
    for j in half..N::CAP {
        right.put(j - half, left.get(j));
        left.blank(j);
    }
    right.set_count(N::CAP - half);
    left.set_count(half);
    pool[id as usize] = left;
    pool[r as usize] = right;
    r
}

/// Evens out the siblings `l` and `r` (`l` before `r`), one of which is
/// short: merges `r` into `l` when both fit in one node (returns `true`;
/// the caller drops `r`), otherwise moves entries across until their
/// counts differ by at most one.
fn rebalance<N: Entries, S: Storage>(pool: &mut Pool<N, S>, l: u32, r: u32) -> bool {
    let mut left = pool[l as usize];
    let mut right = pool[r as usize];
    let (nl, nr) = (left.count(), right.count());
    if nl + nr <= N::CAP {
        for j in 0..nr {
            left.insert_entry(nl + j, right.get(j));
        }
        pool[l as usize] = left;
        pool.release(r);
        return true;
    }
    let want = (nl + nr) / 2;
    while left.count() < want {
        left.insert_entry(left.count(), right.get(0));
        right.remove_entry(0);
    }
    while left.count() > want {
        let last = left.count() - 1;
        right.insert_entry(0, left.get(last));
        left.remove_entry(last);
    }
    pool[l as usize] = left;
    pool[r as usize] = right;
    false
}

/// In a leaf, the index of the first entry at least `k` (its length if
/// none).
#[inline]
fn lower_bound(l: &Leaf, k: Key) -> usize {
    (0..l.len as usize).take_while(|&i| l.get(i) < k).count()
}

/// In an inner node, the child whose subtree `k` belongs in: the last one
/// whose first entry is at most `k`, or the first.
#[inline]
fn child_for(n: &Inner, k: Key) -> usize {
    (1..n.len as usize)
        .take_while(|&i| (n.max[i], n.key[i]) <= k)
        .count()
}

impl SizeTree {
    /// No tree: a slot for one in a store.
    pub(super) const NONE: SizeTree = SizeTree {
        root: NONE,
        levels: 0,
        align: 0,
        len: 0,
    };

    /// An empty tree, its root leaf taken from `leaves`.
    pub(super) fn new<S: Storage>(leaves: &mut Pool<Leaf, S>) -> Self {
        SizeTree {
            root: leaves.alloc(),
            levels: 0,
            align: 0,
            len: 0,
        }
    }

    /// An empty tree aligned to `2^k` (`1 <= k < 64`: see the module
    /// docs), its root leaf taken from `leaves`.
    pub(super) fn aligned<S: Storage>(leaves: &mut Pool<Leaf, S>, k: u32) -> Self {
        debug_assert!((1..64).contains(&k));
        SizeTree {
            align: k as u16,
            ..SizeTree::new(leaves)
        }
    }

    /// The usable length at this tree's alignment of `k` (0 in a plain
    /// tree, which keeps no bounds).
    #[inline]
    fn bound_of(&self, k: Key) -> u64 {
        match self.align {
            0 => 0,
            a => usable_of(u32::from(a), k),
        }
    }

    /// The exact bound of node `id` at depth `d`: the largest usable
    /// length of its entries, or of its children's bounds.
    fn node_bound<S: Storage>(
        &self,
        leaves: &Pool<Leaf, S>,
        inners: &Pool<Inner, S>,
        id: u32,
        d: usize,
    ) -> u64 {
        if d == self.height() {
            let l = &leaves[id as usize];
            (0..l.count())
                .map(|i| self.bound_of(l.get(i)))
                .max()
                .unwrap_or(0)
        } else {
            let n = &inners[id as usize];
            (0..n.count()).map(|i| n.bound(i)).max().unwrap_or(0)
        }
    }

    /// Entries held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Inner levels above the leaves.
    pub(super) fn height(&self) -> usize {
        self.levels as usize
    }

    /// The path to the leaf where `k` is or would go.
    fn descend<S: Storage>(&self, inners: &Pool<Inner, S>, k: Key) -> Path {
        let mut p = Path {
            node: [NONE; MAX_HEIGHT],
            slot: [0; MAX_HEIGHT],
            leaf: self.root,
        };
        let mut id = self.root;
        for d in 0..self.height() {
            let n = &inners[id as usize];
            let c = child_for(n, k);
            p.node[d] = id;
            p.slot[d] = c;
            id = n.kid[c];
        }
        p.leaf = id;
        p
    }

    /// Adds `k`, which the tree must not hold.
    ///
    /// # Complexity
    /// O(log n); takes a leaf and an inner node per level from the pools
    /// at most.
    pub(super) fn insert<S: Storage>(
        &mut self,
        leaves: &mut Pool<Leaf, S>,
        inners: &mut Pool<Inner, S>,
        k: Key,
    ) {
        let p = self.descend(inners, k);
        self.len += 1;
        if self.align != 0 {
            let b = self.bound_of(k);
            for d in 0..self.height() {
                let n = &mut inners[p.node[d] as usize];
                n.set_bound(p.slot[d], n.bound(p.slot[d]).max(b));
            }
        }
        let mut id = p.leaf;
        let mut i = lower_bound(&leaves[id as usize], k);
        debug_assert!(
            i == leaves[id as usize].count() || leaves[id as usize].get(i) != k,
            "{k:?} is in the size tree"
        );
        if leaves[id as usize].count() < LEAF_CAP {
            leaves[id as usize].insert_entry(i, k);
            if i == 0 {
                self.fix_first(inners, &p, self.height(), k);
            }
            return;
        }
        let r = split(leaves, id);
        if i > LEAF_CAP / 2 {
            id = r;
            i -= LEAF_CAP / 2;
        }
        leaves[id as usize].insert_entry(i, k);
        if id == p.leaf && i == 0 {
            self.fix_first(inners, &p, self.height(), k);
        }
        let first = leaves[r as usize].first();
        let left = leaves[p.leaf as usize].first();
        self.add_child(leaves, inners, &p, self.height(), left, (first, r));
    }

    /// Files the new right sibling `(first, id)` of the node at depth `d`
    /// on `p` in its parent, splitting upwards as needed; `left` is the
    /// first entry of that node, for a new root. Both halves keep the
    /// bound of the node split (a new root's two are computed).
    fn add_child<S: Storage>(
        &mut self,
        leaves: &Pool<Leaf, S>,
        inners: &mut Pool<Inner, S>,
        p: &Path,
        d: usize,
        left: Key,
        (first, id): (Key, u32),
    ) {
        if d == 0 {
            let lb = self.node_bound(leaves, inners, self.root, 0);
            let rb = self.node_bound(leaves, inners, id, 0);
            let root = inners.alloc();
            let n = &mut inners[root as usize];
            n.insert_entry(0, (left, self.root, lb));
            n.insert_entry(1, (first, id, rb));
            self.root = root;
            self.levels += 1;
            return;
        }
        let (mut pid, mut at) = (p.node[d - 1], p.slot[d - 1] + 1);
        let b = inners[pid as usize].bound(at - 1);
        if inners[pid as usize].count() < FANOUT {
            return inners[pid as usize].insert_entry(at, (first, id, b));
        }
        let r = split(inners, pid);
        if at > FANOUT / 2 {
            pid = r;
            at -= FANOUT / 2;
        }
        inners[pid as usize].insert_entry(at, (first, id, b));
        let rfirst = inners[r as usize].first();
        let lfirst = inners[p.node[d - 1] as usize].first();
        self.add_child(leaves, inners, p, d - 1, lfirst, (rfirst, r));
    }

    /// The subtree at depth `d` on `p` now starts with `k`: its entry in
    /// each ancestor follows, up to the first one it is not the first
    /// child of.
    fn fix_first<S: Storage>(&self, inners: &mut Pool<Inner, S>, p: &Path, d: usize, k: Key) {
        for e in (0..d).rev() {
            let n = &mut inners[p.node[e] as usize];
            n.max[p.slot[e]] = k.0;
            n.key[p.slot[e]] = k.1;
            if p.slot[e] != 0 {
                break;
            }
        }
    }

    /// Drops `k`; whether the tree held it.
    ///
    /// # Complexity
    /// O(log n); gives merged nodes back to the pools.
    pub(super) fn remove<S: Storage>(
        &mut self,
        leaves: &mut Pool<Leaf, S>,
        inners: &mut Pool<Inner, S>,
        k: Key,
    ) -> bool {
        let p = self.descend(inners, k);
        let l = &mut leaves[p.leaf as usize];
        let i = lower_bound(l, k);
        if i == l.count() || l.get(i) != k {
            return false;
        }
        l.remove_entry(i);
        self.len -= 1;
        let n = l.count();
        if i == 0 && n > 0 {
            let first = l.first();
            self.fix_first(inners, &p, self.height(), first);
        }
        if self.height() > 0 && n < LEAF_MIN {
            self.underflow(leaves, inners, &p, self.height());
        }
        true
    }

    /// The node at depth `d` on `p` (a leaf at `height`) is short: it
    /// borrows from or merges with a sibling, and a merge goes on up.
    fn underflow<S: Storage>(
        &mut self,
        leaves: &mut Pool<Leaf, S>,
        inners: &mut Pool<Inner, S>,
        p: &Path,
        d: usize,
    ) {
        let pid = p.node[d - 1];
        let c = p.slot[d - 1];
        let (lc, rc) = if c > 0 { (c - 1, c) } else { (0, 1) };
        let parent = inners[pid as usize];
        let (l, r) = (parent.kid[lc], parent.kid[rc]);
        let leaf_level = d == self.height();
        let merged = match leaf_level {
            true => rebalance(leaves, l, r),
            false => rebalance(inners, l, r),
        };
        // Entries moved between the two: each keeps a bound of both.
        let b = parent.bound(lc).max(parent.bound(rc));
        inners[pid as usize].set_bound(lc, b);
        if !merged {
            let f = match leaf_level {
                true => leaves[r as usize].first(),
                false => inners[r as usize].first(),
            };
            inners[pid as usize].put(rc, (f, r, b));
            return;
        }
        inners[pid as usize].remove_entry(rc);
        let left = inners[pid as usize].count();
        if d == 1 {
            if left == 1 {
                inners.release(self.root);
                self.root = l;
                self.levels -= 1;
            }
        } else if left < INNER_MIN {
            self.underflow(leaves, inners, p, d - 1);
        }
    }

    /// In a tree aligned to `2^k`, the first entry at least `from` and
    /// below `bound` whose usable length at `2^k` is at least `size`: in a
    /// tree of the blocks by `(length, start)`, from `(size, 0)`, the best
    /// fit at `2^k`. Subtrees whose bound is below `size` are skipped, and
    /// the bound of each subtree searched in vain is lowered to what the
    /// search saw (and below `from`'s length, which bounds the entries
    /// before it).
    ///
    /// # Complexity
    /// O(log n) nodes, and one node per level for each subtree whose bound
    /// is stale (each such visit lowers it).
    pub(super) fn first_fit<S: Storage>(
        &self,
        leaves: &Pool<Leaf, S>,
        inners: &mut Pool<Inner, S>,
        from: Key,
        size: u64,
        bound: Key,
    ) -> Option<Key> {
        debug_assert!(self.align != 0, "a plain size tree keeps no bounds");
        match self.search(leaves, inners, self.root, 0, Some(from), size, bound) {
            Search::Found(k) => Some(k),
            Search::Stopped | Search::Missed(_) => None,
        }
    }

    /// [`first_fit`](Self::first_fit) below node `id` at depth `d`, from
    /// `from` or (`None`) from its first entry.
    #[allow(clippy::too_many_arguments)]
    fn search<S: Storage>(
        &self,
        leaves: &Pool<Leaf, S>,
        inners: &mut Pool<Inner, S>,
        id: u32,
        d: usize,
        from: Option<Key>,
        size: u64,
        bound: Key,
    ) -> Search {
        if d == self.height() {
            let l = &leaves[id as usize];
            let mut seen = 0;
            for i in from.map_or(0, |f| lower_bound(l, f))..l.count() {
                let k = l.get(i);
                if k >= bound {
                    return Search::Stopped;
                }
                let u = self.bound_of(k);
                if u >= size {
                    return Search::Found(k);
                }
                seen = seen.max(u);
            }
            return Search::Missed(seen);
        }
        let c0 = from.map_or(0, |f| child_for(&inners[id as usize], f));
        let mut seen = 0;
        for c in c0..inners[id as usize].count() {
            let (first, kid, b) = inners[id as usize].get(c);
            if c > c0 && first >= bound {
                return Search::Stopped;
            }
            if b < size {
                seen = seen.max(b);
                continue;
            }
            let inside = if c == c0 { from } else { None };
            match self.search(leaves, inners, kid, d + 1, inside, size, bound) {
                Search::Missed(t) => {
                    // Its bound falls to what was seen, and the entries
                    // before `from` it was not looked at for are shorter
                    // (or as long, past a start of 0), as their usable
                    // lengths are.
                    let t = inside.map_or(t, |f| t.max(f.0.saturating_sub(u64::from(f.1 == 0))));
                    inners[id as usize].set_bound(c, t);
                    seen = seen.max(t);
                }
                found_or_stopped => return found_or_stopped,
            }
        }
        Search::Missed(seen)
    }

    /// The entries from the first at least `from`, in order.
    pub(super) fn iter_from<'a, S: Storage>(
        &self,
        leaves: &'a Pool<Leaf, S>,
        inners: &'a Pool<Inner, S>,
        from: Key,
    ) -> SizeIter<'a, S> {
        let p = self.descend(inners, from);
        SizeIter {
            leaves,
            inners,
            height: self.height(),
            at: lower_bound(&leaves[p.leaf as usize], from),
            path: p,
        }
    }

    /// Verifies the order, the occupancy bounds, the uniform depth, every
    /// stored first entry and the count, and returns the leaves and inner
    /// nodes it holds.
    pub(super) fn check<S: Storage>(
        &self,
        leaves: &Pool<Leaf, S>,
        inners: &Pool<Inner, S>,
    ) -> Result<(usize, usize), CheckError> {
        let mut nodes = (0, 0);
        let mut prev = None;
        let mut count = 0;
        self.check_node(
            leaves, inners, self.root, 0, &mut prev, &mut nodes, &mut count,
        )?;
        ensure!(
            count == self.len,
            Accounting,
            "size tree holds {count} entries, len says {}",
            self.len
        );
        Ok(nodes)
    }

    /// [`check`](Self::check) below node `id` at depth `d`: returns its
    /// first entry.
    #[allow(clippy::too_many_arguments)]
    fn check_node<S: Storage>(
        &self,
        leaves: &Pool<Leaf, S>,
        inners: &Pool<Inner, S>,
        id: u32,
        d: usize,
        prev: &mut Option<Key>,
        nodes: &mut (usize, usize),
        count: &mut usize,
    ) -> Result<Option<Key>, CheckError> {
        let root = d == 0;
        if self.align != 0 && d < self.height() {
            let nd = &inners[id as usize];
            for c in 0..nd.count() {
                let exact = self.exact_bound(leaves, inners, nd.kid[c], d + 1);
                ensure!(
                    exact <= nd.bound(c),
                    Structure,
                    "size inner node {id}'s bound {:#x} for child {c} is below its usable length {exact:#x}",
                    nd.bound(c)
                );
            }
        }
        if d == self.height() {
            nodes.0 += 1;
            let l = &leaves[id as usize];
            let n = l.count();
            ensure!(
                n <= LEAF_CAP && (root || n >= LEAF_MIN),
                Structure,
                "size leaf {id} holds {n} entries"
            );
            ensure!(
                (n..LEAF_CAP).all(|i| l.start[i] == u64::MAX && l.size[i] == 0),
                Structure,
                "size leaf {id} has a slot past its {n} entries that is not empty"
            );
            for i in 0..n {
                let k = l.get(i);
                ensure!(
                    prev.map_or(true, |p| p < k),
                    Structure @ k.1,
                    "size tree out of order at ({:#x}, {:#x})",
                    k.0,
                    k.1
                );
                *prev = Some(k);
            }
            *count += n;
            return Ok((n > 0).then(|| l.first()));
        }
        nodes.1 += 1;
        let nd = &inners[id as usize];
        let n = nd.count();
        ensure!(
            n <= FANOUT && n >= if root { 2 } else { INNER_MIN },
            Structure,
            "size inner node {id} holds {n} children"
        );
        ensure!(
            (n..FANOUT).all(|i| nd.key[i] == u64::MAX && nd.max[i] == 0 && nd.kid[i] == NONE),
            Structure,
            "size inner node {id} has an entry past its {n} children"
        );
        for c in 0..n {
            let (k, kid, _) = nd.get(c);
            let got = self.check_node(leaves, inners, kid, d + 1, prev, nodes, count)?;
            ensure!(
                got == Some(k),
                Structure @ k.1,
                "entry {c} of size inner node {id} says ({:#x}, {:#x}), its child starts {got:?}",
                k.0,
                k.1
            );
        }
        Ok(Some(nd.first()))
    }
}

impl SizeTree {
    /// The largest usable length of the entries below node `id` at depth
    /// `d`, by reading every one (for [`check`](Self::check)).
    fn exact_bound<S: Storage>(
        &self,
        leaves: &Pool<Leaf, S>,
        inners: &Pool<Inner, S>,
        id: u32,
        d: usize,
    ) -> u64 {
        if d == self.height() {
            return self.node_bound(leaves, inners, id, d);
        }
        let n = &inners[id as usize];
        (0..n.count())
            .map(|c| self.exact_bound(leaves, inners, n.kid[c], d + 1))
            .max()
            .unwrap_or(0)
    }
}

/// The entries of a [`SizeTree`] in order from a key
/// ([`SizeTree::iter_from`]).
pub(super) struct SizeIter<'a, S: Storage> {
    leaves: &'a Pool<Leaf, S>,
    inners: &'a Pool<Inner, S>,
    height: usize,
    path: Path,
    /// The next entry's index in `path.leaf`.
    at: usize,
}

impl<S: Storage> Iterator for SizeIter<'_, S> {
    type Item = Key;

    #[inline]
    fn next(&mut self) -> Option<Key> {
        loop {
            let l = &self.leaves[self.path.leaf as usize];
            if self.at < l.count() {
                self.at += 1;
                return Some(l.get(self.at - 1));
            }
            self.next_leaf()?;
        }
    }
}

impl<S: Storage> SizeIter<'_, S> {
    /// Moves to the first entry of the next leaf, if any.
    fn next_leaf(&mut self) -> Option<()> {
        let p = &mut self.path;
        let d = (0..self.height)
            .rev()
            .find(|&d| p.slot[d] + 1 < self.inners[p.node[d] as usize].count())?;
        p.slot[d] += 1;
        let mut id = self.inners[p.node[d] as usize].kid[p.slot[d]];
        for e in d + 1..self.height {
            p.node[e] = id;
            p.slot[e] = 0;
            id = self.inners[id as usize].kid[0];
        }
        p.leaf = id;
        self.at = 0;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Heap;
    use alloc::collections::BTreeSet;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    /// Inserts and removes `ops` (`true`: insert) in a size tree and in a
    /// `BTreeSet`, checking the tree's shape as it goes and its walks
    /// from `probes` at the end; the pools hold no node but the tree's.
    fn run(ops: &[(bool, Key)], probes: &[Key]) -> Result<(), TestCaseError> {
        let mut leaves = Pool::<Leaf, Heap>::new();
        let mut inners = Pool::<Inner, Heap>::new();
        let mut t = SizeTree::new(&mut leaves);
        let mut model = BTreeSet::new();
        for (i, &(add, k)) in ops.iter().enumerate() {
            if add {
                if model.insert(k) {
                    t.insert(&mut leaves, &mut inners, k);
                }
            } else {
                prop_assert_eq!(t.remove(&mut leaves, &mut inners, k), model.remove(&k));
            }
            if i % 64 == 0 {
                let nodes = t
                    .check(&leaves, &inners)
                    .map_err(|e| TestCaseError::fail(alloc::format!("{e}")))?;
                prop_assert_eq!(nodes, (leaves.used(), inners.used()));
            }
        }
        let nodes = t
            .check(&leaves, &inners)
            .map_err(|e| TestCaseError::fail(alloc::format!("{e}")))?;
        prop_assert_eq!(nodes, (leaves.used(), inners.used()));
        prop_assert_eq!(t.len(), model.len());
        for &p in probes {
            let got: Vec<Key> = t.iter_from(&leaves, &inners, p).take(40).collect();
            let want: Vec<Key> = model.range(p..).take(40).copied().collect();
            prop_assert_eq!(got, want);
        }
        let all: Vec<Key> = t.iter_from(&leaves, &inners, (0, 0)).collect();
        prop_assert_eq!(all, model.into_iter().collect::<Vec<_>>());
        Ok(())
    }

    fn key(n: u64) -> impl Strategy<Value = Key> {
        (0..n, 0..4u64)
    }

    /// The aligned search against the set: blocks `(length, start)` with
    /// starts spread so that alignments up to `2^8` miss in many; after
    /// each batch of changes, `first_fit` from `(size, 0)` below a bound
    /// must be the set's first such entry that holds `size` at `2^k`, and
    /// `check` must find every bound at or above the usable lengths below
    /// it (searches lower them, inserts raise them, removals leave them).
    fn run_aligned(
        k: u32,
        ops: &[(bool, Key)],
        probes: &[(u64, Key)],
    ) -> Result<(), TestCaseError> {
        let mut leaves = Pool::<Leaf, Heap>::new();
        let mut inners = Pool::<Inner, Heap>::new();
        let mut t = SizeTree::aligned(&mut leaves, k);
        let mut model = BTreeSet::new();
        let fail = |e: CheckError| TestCaseError::fail(alloc::format!("{e}"));
        for (i, &(add, key)) in ops.iter().enumerate() {
            if add {
                if model.insert(key) {
                    t.insert(&mut leaves, &mut inners, key);
                }
            } else {
                prop_assert_eq!(t.remove(&mut leaves, &mut inners, key), model.remove(&key));
            }
            if i % 97 == 0 || i + 1 == ops.len() {
                for &(size, bound) in probes {
                    let got = t.first_fit(&leaves, &mut inners, (size, 0), size, bound);
                    let want = model
                        .range((size, 0)..)
                        .take_while(|&&e| e < bound)
                        .find(|&&e| usable_of(k, e) >= size)
                        .copied();
                    prop_assert_eq!(got, want, "size {:#x} below {:?}", size, bound);
                }
                let nodes = t.check(&leaves, &inners).map_err(fail)?;
                prop_assert_eq!(nodes, (leaves.used(), inners.used()));
            }
        }
        Ok(())
    }

    /// A block holds an aligned start only strictly before its end: one
    /// whose first aligned address is its end holds none, and is filed in
    /// no aligned index.
    #[test]
    fn usable_needs_an_aligned_start_inside_the_block() {
        assert_eq!(usable(0x1001, 0x2000, 12), None);
        assert_eq!(usable(0x1001, 0x2001, 12), Some(1));
        assert_eq!(usable(0x1000, 0x1800, 12), Some(0x800));
        assert_eq!(usable(u64::MAX - 1, u64::MAX, 12), None);
    }

    /// A block of 1..400 granules of 16 bytes at a start of any granule.
    fn block() -> impl Strategy<Value = Key> {
        (1..400u64, 0..4000u64).prop_map(|(l, s)| (l * 16, s * 16))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Up to three levels: inserts outnumber removals two to one,
        /// over a few thousand keys, then a drain.
        #[test]
        fn size_tree_matches_a_set(
            ops in proptest::collection::vec((prop::bool::weighted(0.67), key(1500)), 1..5000),
            probes in proptest::collection::vec(key(1600), 1..20),
        ) {
            let mut all = ops.clone();
            all.extend(ops.iter().map(|&(_, k)| (false, k)));
            run(&all, &probes)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Up to three levels of an aligned tree (2^5..2^9: up to 32
        /// granules), inserts outnumbering removals two to one, then a
        /// drain, searched as it changes.
        #[test]
        fn aligned_first_fit_matches_a_scan_of_the_set(
            k in 5..10u32,
            ops in proptest::collection::vec((prop::bool::weighted(0.67), block()), 1..3000),
            sizes in proptest::collection::vec(1..400u64, 1..8),
            bounds in proptest::collection::vec(prop::option::of(block()), 1..8),
        ) {
            let mut all = ops.clone();
            all.extend(ops.iter().map(|&(_, b)| (false, b)));
            let probes: Vec<(u64, Key)> = sizes
                .iter()
                .zip(bounds.iter().cycle())
                .map(|(&g, b)| (g * 16, b.unwrap_or((u64::MAX, u64::MAX))))
                .collect();
            run_aligned(k, &all, &probes)?;
        }
    }

    /// Removing every entry in ascending order collapses the tree to its
    /// root leaf, its nodes back in the pools.
    #[test]
    fn draining_gives_every_node_back() {
        let mut leaves = Pool::<Leaf, Heap>::new();
        let mut inners = Pool::<Inner, Heap>::new();
        let mut t = SizeTree::new(&mut leaves);
        for i in 0..3000 {
            t.insert(&mut leaves, &mut inners, (i % 97, i));
        }
        assert!(t.height() >= 2, "three levels at least");
        for i in 0..3000 {
            assert!(t.remove(&mut leaves, &mut inners, (i % 97, i)));
            assert!(!t.remove(&mut leaves, &mut inners, (i % 97, i)));
        }
        assert_eq!((t.len(), t.height()), (0, 0));
        assert_eq!((leaves.used(), inners.used()), (1, 0));
        t.check(&leaves, &inners).unwrap();
    }
}
