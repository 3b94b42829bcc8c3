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
//! Once the tree keeps *lanes* ([`SizeTree::keep_lanes`], granules of
//! `2^g`), each inner entry's summary slot holds, for every alignment
//! `2^(g+j)` with `1 <= j <= LANES` at once, an upper bound on the usable
//! lengths (`e - roundup(s, 2^(g+j))`) of the entries below that child:
//! lane `j`, a 6-bit code, exact up to 31 granules and within a quarter
//! above (`code`). [`SizeTree::first_fit`] skips each subtree that cannot
//! hold an aligned request, at any alignment, with one index; an
//! alignment above the last lane's is bounded by it. An insert raises the
//! lanes along its path, a removal leaves them; a search that finds
//! nothing in a subtree lowers the lane it read to what the subtree holds,
//! so the next search does not go in again. In a node, the search reads
//! its lane of every child in one pass into a mask of the children that
//! may hold the request and goes into those in order; in a leaf it stops
//! at the first entry that holds it.
//!
//! The granule follows the address tree's floor: when the floor falls
//! below it, the next aligned search computes the lanes again at the
//! floor. A coarser granule rounds each usable length up to whole
//! granules, and its bounds would send searches into subtrees that hold
//! nothing at the finer alignments.
//!
//! ```text
//!   inner with lanes:  max[i], key[i]   child i's first entry
//!                      sum[i]           lane j >= code(usable length at 2^(g+j)) of every entry below child i
//! ```
//!
//! As in the address tree, every leaf is at the same depth, a
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
    /// Inner levels above the leaves (with `lanes` and `root`, one word).
    levels: u16,
    /// `g + 1` once the inner entries keep lanes in granules of `2^g`
    /// (see the module docs); 0 before.
    lanes: u16,
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

/// Whether an entry holds `size > 0` bytes from its first start aligned
/// to `2^k`: `usable_of(k, key) >= size`, without branches, for the
/// searches' scans of a leaf.
#[inline(always)]
fn holds(k: u32, (len, s): Key, size: u64) -> bool {
    let mask = (1u64 << k) - 1;
    let a = s.wrapping_add(mask) & !mask;
    let e = s.saturating_add(len);
    // `a >= s`: no wrap past the top; `e >= a`: a start inside.
    (a >= s) & (e >= a) & (e.wrapping_sub(a) >= size)
}

/// Alignments a lane set covers: `2^(g+1)..=2^(g+LANES)`, each in its
/// lane, and any above through the last lane, which bounds them too.
const LANES: u32 = 10;

/// Bits of one lane.
const LANE_BITS: u32 = 6;

/// The lane code of "any length": past the codes' range.
const UNBOUNDED: u64 = (1 << LANE_BITS) - 1;

/// Codes below this are the length itself, in granules.
const EXACT: u64 = 32;

/// The length a lane code stands for, in granules: itself below
/// [`EXACT`], then four steps per doubling, (4..=7) << e. A search
/// compares codes, never lengths: only the tests read it.
#[cfg(test)]
fn value(c: u64) -> u64 {
    match c {
        c if c < EXACT => c,
        UNBOUNDED => u64::MAX,
        c => (4 + (c & 3)) << ((c - EXACT) / 4 + 3),
    }
}

/// The lowest lane code whose `value` is at least `u` granules.
#[inline]
fn code(u: u64) -> u64 {
    if u < EXACT {
        return u;
    }
    // u in [4 << e, 8 << e), rounded up to a step of 2^e (8 << e is
    // the next doubling's first code).
    let e = 61 - u.leading_zeros();
    let m = ((u - 1) >> e) + 1;
    (EXACT + u64::from(e - 3) * 4 + (m - 4)).min(UNBOUNDED)
}

/// `x` in granules of `2^g`, rounded up.
#[inline]
fn up(x: u64, g: u32) -> u64 {
    (x >> g) + u64::from(x & ((1 << g) - 1) != 0)
}

/// Lane `j` of `m` (`1..=LANES`).
#[inline]
fn lane(m: u64, j: u32) -> u64 {
    (m >> ((j - 1) * LANE_BITS)) & UNBOUNDED
}

/// `m` with lane `j` set to `c`.
#[inline]
fn with_lane(m: u64, j: u32, c: u64) -> u64 {
    let at = (j - 1) * LANE_BITS;
    (m & !(UNBOUNDED << at)) | c << at
}

/// The odd lanes (1, 3, ..., 9), each with six spare bits above it.
const ODD_LANES: u64 = 0x03f_03f_03f_03f_03f;

/// The lowest spare bit above each odd lane.
const ODD_GUARDS: u64 = 0x040_040_040_040_040;

/// The higher of each lane of `a` and `b`: every other lane at a time,
/// so that each has a spare bit above it to show which is higher.
#[inline]
fn lane_max(a: u64, b: u64) -> u64 {
    if a == b {
        return a;
    }
    let half = |a: u64, b: u64| {
        let (a, b) = (a & ODD_LANES, b & ODD_LANES);
        // 64 + a - b per lane: bit 6 stays where a >= b.
        let a_wins = (((a | ODD_GUARDS) - b) & ODD_GUARDS) >> 6;
        let pick = a_wins * UNBOUNDED;
        (a & pick) | (b & !pick)
    };
    half(a, b) | half(a >> LANE_BITS, b >> LANE_BITS) << LANE_BITS
}

/// A request of [`SizeTree::first_fit`]: `size` bytes at `2^k`, below
/// `bound`; lane `j` bounds it in granules of `2^g` (0: no lane does),
/// a subtree whose lane is below `need` cannot hold it, and `own` says
/// whether the lane is its alignment's own.
struct Ask {
    size: u64,
    k: u32,
    j: u32,
    g: u32,
    need: u64,
    own: bool,
    bound: Key,
}

/// What [`SizeTree::first_fit`] found below a node.
enum Search {
    /// The first entry that holds the request.
    Found(Key),
    /// An entry at or past the bound: nothing before it holds the request.
    Stopped,
    /// None holds it: the code of the subtree's longest usable length at
    /// the request's alignment, when the lane is its own.
    Missed(Option<u64>),
}

/// The lowest `n` bits.
#[inline]
fn low_bits(n: usize) -> u32 {
    ((1u64 << n) - 1) as u32
}

/// One bit per slot of `nd` whose lane admits `ask` (every slot when no
/// lane bounds it), read in one pass with no branch per slot.
#[inline]
fn lanes_at_least(nd: &Inner, ask: &Ask) -> u32 {
    if ask.j == 0 {
        return !0;
    }
    let at = (ask.j - 1) * LANE_BITS;
    // Lanes and the need fit in 32 bits: compared at that width, the
    // slots' tests vectorize.
    debug_assert!(ask.need <= UNBOUNDED);
    let need = ask.need as u32;
    nd.sum.iter().enumerate().fold(0, |m, (c, b)| {
        let ok = ((b.to_bits() >> at) as u32) & UNBOUNDED as u32 >= need;
        m | u32::from(ok) << c
    })
}

/// [`SizeTree::first_fit`] in leaf `l`, from `from` or (`None`) its first
/// entry: only the first entry that holds the request is compared with
/// the bound.
#[inline]
fn leaf_search(l: &Leaf, from: Option<Key>, ask: &Ask) -> Search {
    let at = from.map_or(0, |f| lower_bound(l, f));
    for i in at..l.count() {
        let key = (l.size[i], l.start[i]);
        if holds(ask.k, key, ask.size) {
            return match key < ask.bound {
                true => Search::Found(key),
                false => Search::Stopped,
            };
        }
    }
    if !ask.own {
        return Search::Missed(None);
    }
    let most = (0..l.count()).fold(0, |m, i| m.max(usable_of(ask.k, l.get(i))));
    Search::Missed(Some(code(up(most, ask.g))))
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
    /// Child `i`'s lanes in a size tree that keeps them.
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
    let last = n.len as usize - 1;
    // The last child: a search for a length longer than most.
    if (n.max[last], n.key[last]) <= k {
        return last;
    }
    (1..last).take_while(|&i| (n.max[i], n.key[i]) <= k).count()
}

impl SizeTree {
    /// An empty tree, its root leaf taken from `leaves`.
    pub(super) fn new<S: Storage>(leaves: &mut Pool<Leaf, S>) -> Self {
        SizeTree {
            root: leaves.alloc(),
            levels: 0,
            lanes: 0,
            len: 0,
        }
    }

    /// Keeps lanes in granules of `2^g` from now on (see the module
    /// docs), computing them for the entries held; a tree that keeps lanes
    /// in granules of `2^g` or finer is left as it is. Lanes kept in
    /// coarser granules are computed again at `2^g`: a coarse granule
    /// rounds each usable length up to a whole granule, and the bounds
    /// would admit subtrees that cannot hold a request at the finer
    /// alignments.
    ///
    /// # Complexity
    /// O(n) the first time and each time `g` falls (at most once a bit).
    pub(super) fn keep_lanes<S: Storage>(
        &mut self,
        leaves: &Pool<Leaf, S>,
        inners: &mut Pool<Inner, S>,
        g: u32,
    ) {
        if self.lanes == 0 || self.granule() > g {
            self.lanes = g as u16 + 1;
            self.relane(leaves, inners, self.root, 0);
        }
    }

    /// Whether the inner entries keep lanes.
    pub(super) fn keeps_lanes(&self) -> bool {
        self.lanes != 0
    }

    /// The granule shift of the lanes kept.
    #[inline]
    fn granule(&self) -> u32 {
        u32::from(self.lanes) - 1
    }

    /// Sets the lanes of every inner entry below node `id` at depth `d`
    /// exactly; returns the node's.
    fn relane<S: Storage>(
        &self,
        leaves: &Pool<Leaf, S>,
        inners: &mut Pool<Inner, S>,
        id: u32,
        d: usize,
    ) -> u64 {
        if d == self.height() {
            return self.node_lanes(leaves, inners, id, d);
        }
        let mut all = 0;
        for c in 0..inners[id as usize].count() {
            let m = self.relane(leaves, inners, inners[id as usize].kid[c], d + 1);
            inners[id as usize].set_bound(c, m);
            all = lane_max(all, m);
        }
        all
    }

    /// The lanes of an entry: each usable length in granules, rounded up,
    /// as its code. In granules, the end rounds up and the start to the
    /// granule at or above it, and the aligned start is the same.
    #[inline]
    fn lanes_of_entry(&self, (len, s): Key) -> u64 {
        let g = self.granule();
        let (q, end) = (up(s, g), up(s.saturating_add(len), g));
        let mut m = 0;
        for j in 1..=LANES {
            let mask = (1 << j) - 1;
            // No aligned start at or above `q` at all: none usable.
            let u = q
                .checked_add(mask)
                .map_or(0, |a| end.saturating_sub(a & !mask));
            if u == 0 {
                break; // coarser alignments hold no more
            }
            m |= code(u) << ((j - 1) * LANE_BITS);
        }
        m
    }

    /// The exact lanes of node `id` at depth `d`: of its entries, or the
    /// highest of its children's.
    fn node_lanes<S: Storage>(
        &self,
        leaves: &Pool<Leaf, S>,
        inners: &Pool<Inner, S>,
        id: u32,
        d: usize,
    ) -> u64 {
        if d == self.height() {
            let l = &leaves[id as usize];
            (0..l.count()).fold(0, |m, i| lane_max(m, self.lanes_of_entry(l.get(i))))
        } else {
            let n = &inners[id as usize];
            (0..n.count()).fold(0, |m, i| lane_max(m, n.bound(i)))
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
        if self.keeps_lanes() {
            // Bottom up: an ancestor's lanes are at least its child's.
            let m = self.lanes_of_entry(k);
            for d in (0..self.height()).rev() {
                let n = &mut inners[p.node[d] as usize];
                let (old, new) = (n.bound(p.slot[d]), lane_max(n.bound(p.slot[d]), m));
                if old == new {
                    break;
                }
                n.set_bound(p.slot[d], new);
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
    /// lanes of the node split (a new root's two are computed).
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
            let (lb, rb) = match self.keeps_lanes() {
                true => (
                    self.node_lanes(leaves, inners, self.root, 0),
                    self.node_lanes(leaves, inners, id, 0),
                ),
                false => (0, 0),
            };
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
        // Entries moved between the two: each keeps the lanes of both.
        let b = match self.keeps_lanes() {
            true => lane_max(parent.bound(lc), parent.bound(rc)),
            false => 0,
        };
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

    /// In a tree that keeps lanes, the first entry at least `from` and
    /// below `bound` whose usable length at `2^k` is at least `size`: in a
    /// tree of the blocks by `(length, start)`, from `(size, 0)`, the best
    /// fit at `2^k`. Subtrees whose lanes rule the request out are
    /// skipped, and the lane of each subtree searched in vain is lowered
    /// to what it holds.
    ///
    /// # Complexity
    /// O(log n) nodes, and one node per level for each subtree whose lane
    /// is stale (each such visit makes it exact).
    pub(super) fn first_fit<S: Storage>(
        &self,
        leaves: &Pool<Leaf, S>,
        inners: &mut Pool<Inner, S>,
        from: Key,
        (size, k): (u64, u32),
        bound: Key,
    ) -> Option<Key> {
        debug_assert!(self.keeps_lanes(), "a size tree without lanes");
        let g = self.granule();
        let j = k.saturating_sub(g).min(LANES);
        let ask = Ask {
            size,
            k,
            j,
            g,
            // The lowest code whose length in bytes is at least `size`.
            need: if j == 0 { 0 } else { code(up(size, g)) },
            own: k > g && k - g <= LANES,
            bound,
        };
        match self.search(leaves, inners, self.root, 0, Some(from), u64::MAX, &ask) {
            Search::Found(e) => Some(e),
            Search::Stopped | Search::Missed(_) => None,
        }
    }

    /// [`first_fit`](Self::first_fit) below node `id` at depth `d`, whose
    /// entries are at most `top` long, from `from` or (`None`) from its
    /// first entry.
    #[allow(clippy::too_many_arguments)]
    fn search<S: Storage>(
        &self,
        leaves: &Pool<Leaf, S>,
        inners: &mut Pool<Inner, S>,
        id: u32,
        d: usize,
        from: Option<Key>,
        top: u64,
        ask: &Ask,
    ) -> Search {
        if d == self.height() {
            return leaf_search(&leaves[id as usize], from, ask);
        }
        let n = inners[id as usize].count();
        let c0 = from.map_or(0, |f| child_for(&inners[id as usize], f));
        // Every child from `c0` whose lane admits the request, one bit
        // each: the loop below visits only these.
        let mut cand = lanes_at_least(&inners[id as usize], ask) & (!0u32 << c0) & low_bits(n);
        while cand != 0 {
            let c = cand.trailing_zeros() as usize;
            cand &= cand - 1;
            let (first, kid, m) = inners[id as usize].get(c);
            if c > c0 && first >= ask.bound {
                return Search::Stopped;
            }
            // No entry below is longer than the next child's first.
            let longest = match c + 1 < n {
                true => inners[id as usize].max[c + 1],
                false => top,
            };
            if longest < ask.size {
                continue;
            }
            let inside = if c == c0 { from } else { None };
            match self.search(leaves, inners, kid, d + 1, inside, longest, ask) {
                Search::Missed(Some(t)) => {
                    inners[id as usize].set_bound(c, with_lane(m, ask.j, t));
                }
                Search::Missed(None) => {}
                found_or_stopped => return found_or_stopped,
            }
        }
        let nd = &inners[id as usize];
        Search::Missed(
            ask.own
                .then(|| (0..n).map(|c| lane(nd.bound(c), ask.j)).max().unwrap_or(0)),
        )
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
        if self.keeps_lanes() && d < self.height() {
            let nd = &inners[id as usize];
            for c in 0..nd.count() {
                let exact = self.exact_lanes(leaves, inners, nd.kid[c], d + 1);
                ensure!(
                    lane_max(exact, nd.bound(c)) == nd.bound(c),
                    Structure,
                    "size inner node {id}'s lanes {:#x} for child {c} are below its entries' {exact:#x}",
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
    /// The exact lanes of the entries below node `id` at depth `d`, by
    /// reading every one (for [`check`](Self::check)).
    fn exact_lanes<S: Storage>(
        &self,
        leaves: &Pool<Leaf, S>,
        inners: &Pool<Inner, S>,
        id: u32,
        d: usize,
    ) -> u64 {
        if d == self.height() {
            return self.node_lanes(leaves, inners, id, d);
        }
        let n = &inners[id as usize];
        (0..n.count()).fold(0, |m, c| {
            lane_max(m, self.exact_lanes(leaves, inners, n.kid[c], d + 1))
        })
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
    /// starts spread so that alignments up to `2^12` miss in many, one
    /// tree searched at every alignment; the lanes are kept from the
    /// `lanes_from`th change on (computed then for the entries held).
    /// After each batch of changes, `first_fit` from `(size, 0)` below a
    /// bound must be the set's first such entry that holds `size` at
    /// `2^k`, and `check` must find every lane at or above its entries'
    /// (inserts raise them, removals leave them, searches lower them).
    fn run_aligned(
        lanes_from: usize,
        ops: &[(bool, Key)],
        probes: &[(u64, u32, Key)],
    ) -> Result<(), TestCaseError> {
        let mut leaves = Pool::<Leaf, Heap>::new();
        let mut inners = Pool::<Inner, Heap>::new();
        let mut t = SizeTree::new(&mut leaves);
        let mut model = BTreeSet::new();
        let fail = |e: CheckError| TestCaseError::fail(alloc::format!("{e}"));
        for (i, &(add, key)) in ops.iter().enumerate() {
            if i == lanes_from {
                t.keep_lanes(&leaves, &mut inners, 4);
                t.check(&leaves, &inners).map_err(fail)?;
            }
            if add {
                if model.insert(key) {
                    t.insert(&mut leaves, &mut inners, key);
                }
            } else {
                prop_assert_eq!(t.remove(&mut leaves, &mut inners, key), model.remove(&key));
            }
            if t.keeps_lanes() && (i % 97 == 0 || i + 1 == ops.len()) {
                for &(size, k, bound) in probes {
                    let got = t.first_fit(&leaves, &mut inners, (size, 0), (size, k), bound);
                    let want = model
                        .range((size, 0)..)
                        .take_while(|&&e| e < bound)
                        .find(|&&e| usable_of(k, e) >= size)
                        .copied();
                    prop_assert_eq!(got, want, "size {:#x} at 2^{} below {:?}", size, k, bound);
                }
                let nodes = t.check(&leaves, &inners).map_err(fail)?;
                prop_assert_eq!(nodes, (leaves.used(), inners.used()));
            }
        }
        Ok(())
    }

    /// A code stands for the least value at or above its length, exactly
    /// below 32 granules, within a quarter above, and unbounded past the
    /// range; codes rise with the lengths.
    #[test]
    fn a_lane_code_is_the_least_value_at_or_above() {
        let mut last = 0;
        for u in (0..20_000u64).chain([1 << 40, u64::MAX]) {
            let c = code(u);
            assert!(value(c) >= u, "{u}: code {c} stands for {}", value(c));
            assert!(c == 0 || value(c - 1) < u, "{u}: code {c} is not the least");
            assert!(c >= last, "codes fall at {u}");
            assert!(u >= EXACT || value(c) == u);
            assert!(c == UNBOUNDED || value(c) - u <= u / 4, "{u}: {}", value(c));
            last = c;
        }
        assert_eq!(code(u64::MAX), UNBOUNDED);
        let m = with_lane(with_lane(0, 3, 9), LANES, UNBOUNDED);
        assert_eq!((lane(m, 3), lane(m, LANES), lane(m, 1)), (9, UNBOUNDED, 0));
        let both = lane_max(m, with_lane(0, 3, 11));
        assert_eq!((lane(both, 3), lane(both, LANES)), (11, UNBOUNDED));
    }

    /// A block holds an aligned start only strictly before its end: one
    /// whose first aligned address is its end holds none, and no usable
    /// length at that alignment.
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

        /// Up to three levels, inserts outnumbering removals two to one,
        /// then a drain, searched at alignments from the granule to past
        /// the last lane (2^4..2^16 bytes, granules of 16) as it changes.
        #[test]
        fn aligned_first_fit_matches_a_scan_of_the_set(
            lanes_from in 0..2000usize,
            ops in proptest::collection::vec((prop::bool::weighted(0.67), block()), 1..3000),
            sizes in proptest::collection::vec((1..400u64, 4..17u32), 1..12),
            bounds in proptest::collection::vec(prop::option::of(block()), 1..8),
        ) {
            let mut all = ops.clone();
            all.extend(ops.iter().map(|&(_, b)| (false, b)));
            let probes: Vec<(u64, u32, Key)> = sizes
                .iter()
                .zip(bounds.iter().cycle())
                .map(|(&(g, k), b)| (g * 16, k, b.unwrap_or((u64::MAX, u64::MAX))))
                .collect();
            run_aligned(lanes_from.min(all.len() - 1), &all, &probes)?;
        }
    }

    /// A size tree of `keys` (distinct), with inner nodes, and its pools.
    fn tree_of(keys: impl Iterator<Item = Key>) -> (SizeTree, Pool<Leaf, Heap>, Pool<Inner, Heap>) {
        let mut leaves = Pool::<Leaf, Heap>::new();
        let mut inners = Pool::<Inner, Heap>::new();
        let mut t = SizeTree::new(&mut leaves);
        for k in keys {
            t.insert(&mut leaves, &mut inners, k);
        }
        assert!(t.height() >= 1);
        (t, leaves, inners)
    }

    /// Lanes kept at a coarse granule are computed again at a finer one,
    /// and come out exact there: in granules of 2^14, `[0x1000, 0x9000)`
    /// ends in the granule after the one at 0x8000 and seems to hold a
    /// whole one aligned to 2^15; in granules of 2^12 it holds 0x1000
    /// there. A granule the tree keeps already, or a coarser one, changes
    /// nothing.
    #[test]
    fn lanes_follow_a_falling_granule() {
        let (mut t, leaves, mut inners) =
            tree_of((0..400u64).map(|i| (0x8000, 0x1000 + (i << 16))));
        t.keep_lanes(&leaves, &mut inners, 14);
        let root_lanes = |t: &SizeTree, inners: &Pool<Inner, Heap>| {
            let n = &inners[t.root as usize];
            (0..n.count()).fold(0, |m, c| lane_max(m, n.bound(c)))
        };
        assert_eq!(lane(root_lanes(&t, &inners), 1), 1, "rounded up at 2^14");
        t.keep_lanes(&leaves, &mut inners, 12);
        assert_eq!(t.granule(), 12);
        // In granules of 2^12: 7 of them from 0x2000 and 1 from 0x8000.
        let m = root_lanes(&t, &inners);
        assert_eq!((lane(m, 1), lane(m, 3)), (7, 1));
        t.keep_lanes(&leaves, &mut inners, 13);
        assert_eq!(t.granule(), 12);
        t.check(&leaves, &inners).unwrap();
        assert_eq!(
            t.first_fit(
                &leaves,
                &mut inners,
                (0x2000, 0),
                (0x2000, 15),
                (u64::MAX, u64::MAX)
            ),
            None
        );
    }

    /// The bound is exclusive: an entry that holds the request but equals
    /// the bound is not found, the one below it is, in a leaf and through
    /// inner nodes.
    #[test]
    fn an_entry_at_the_bound_is_not_below_it() {
        let (mut t, mut leaves, mut inners) = tree_of((0..300u64).map(|i| (0x4000, i << 16)));
        t.keep_lanes(&leaves, &mut inners, 12);
        let fit = |t: &SizeTree, leaves: &Pool<Leaf, Heap>, inners: &mut Pool<Inner, Heap>, b| {
            t.first_fit(leaves, inners, (0x4000, 0), (0x4000, 16), b)
        };
        assert_eq!(fit(&t, &leaves, &mut inners, (0x4000, 0)), None);
        assert_eq!(
            fit(&t, &leaves, &mut inners, (0x4000, 1)),
            Some((0x4000, 0))
        );
        t.remove(&mut leaves, &mut inners, (0x4000, 0));
        let next = (0x4000, 1 << 16);
        assert_eq!(fit(&t, &leaves, &mut inners, next), None);
        assert_eq!(
            fit(&t, &leaves, &mut inners, (0x4000, next.1 + 1)),
            Some(next)
        );
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
