//! The augmented balanced tree of ranges: the shared core of [`crate::vmap`].
//!
//! A [`RangeTree`] holds non-overlapping half-open ranges `[start, end)`
//! sorted by `start`, as an AVL tree whose nodes also form a doubly linked
//! list in address order (O(1) prev/next, as the kernel pairs its rb-tree
//! with a list). Every node is augmented with `smax`, the largest range
//! length in its subtree (the kernel's `subtree_max_size`):
//!
//! ```text
//!                  [40,48) smax 16
//!                 /               \
//!     [0,4) smax 16              [60,62) smax 2
//!          \
//!           [10,26) smax 16        list: [0,4) <-> [10,26) <-> [40,48) <-> [60,62)
//! ```
//!
//! Each node stores the `smax` of its two children (`lmax`, `rmax`) rather
//! than its own, so a descent decides left or right without reading the
//! children it will not visit: at a million ranges that halves the cache
//! misses of a search. `smax` lets [`RangeTree::lowest_fit`] skip any
//! subtree whose largest range
//! is too short, so the descent to the lowest range that fits is
//! O(log n) (see its docs for the cost of alignment near-misses).
//!
//! Nodes live in a [`NodeArena`] shared by several trees (the range allocator
//! moves one node between its busy and free trees, as the kernel moves one
//! `vmap_area`), referenced by [`NodeId`]. Released nodes are kept on a free
//! list and reused, so a steady state of inserts and removals allocates no
//! heap memory (the kernel's preloaded `vmap_area` cache plays that role).
//!
//! Invariants (checked by [`RangeTree::check`]):
//! - in-order traversal is strictly increasing in `start`; ranges do not
//!   overlap and are non-empty;
//! - `height(n) = 1 + max(height(l), height(r))`, `|height(l) - height(r)| <= 1`;
//! - `lmax(n) = smax(l)`, `rmax(n) = smax(r)`, where
//!   `smax(n) = max(end - start, lmax(n), rmax(n))`;
//! - the list visits exactly the in-order sequence, `prev`/`next` mutual.

use alloc::vec::Vec;

use crate::ensure;
use crate::error::{CheckError, FreeError};

/// Index of a node in a [`NodeArena`].
pub type NodeId = u32;

/// "No node".
pub const NIL: NodeId = u32::MAX;

/// The height of a node in the arena's free cache: a node handed out has
/// height 1 or more, so a second release is recognised.
const RELEASED: u8 = 0;

/// Deepest possible AVL path for `u32` node ids (1.44 * 32 < 48), with room.
const MAX_DEPTH: usize = 64;

/// A range node: 56 bytes.
#[derive(Debug, Clone, Copy)]
pub struct Node {
    /// First address of the range.
    pub start: u64,
    /// One past the last address of the range.
    pub end: u64,
    /// Largest range length in the left subtree (0 if none).
    lmax: u64,
    /// Largest range length in the right subtree (0 if none).
    rmax: u64,
    left: NodeId,
    right: NodeId,
    prev: NodeId,
    next: NodeId,
    height: u8,
}

impl Node {
    fn detached(start: u64, end: u64) -> Node {
        Node {
            start,
            end,
            lmax: 0,
            rmax: 0,
            left: NIL,
            right: NIL,
            prev: NIL,
            next: NIL,
            height: 1,
        }
    }

    /// Length of the range.
    #[inline]
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether the range is empty (never true for a node in a tree).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// The next node in address order (in the tree it belongs to), or `NIL`.
    #[inline]
    pub fn next(&self) -> NodeId {
        self.next
    }

    /// The previous node in address order, or `NIL`.
    #[inline]
    pub fn prev(&self) -> NodeId {
        self.prev
    }
}

/// Storage for the nodes of one or more [`RangeTree`]s, with a free-node
/// cache so released nodes are reused before the arena grows.
///
/// # Examples
/// ```
/// use mmkit::tree::{NodeArena, RangeTree};
/// let mut arena = NodeArena::new();
/// let mut t = RangeTree::new();
/// let n = arena.alloc(10, 20);
/// t.insert(&mut arena, n);
/// assert_eq!(t.find(&arena, 10), Some(n));
/// t.remove(&mut arena, n);
/// arena.release(n).unwrap();
/// assert!(arena.release(n).is_err()); // already released
/// assert_eq!(arena.alloc(0, 5), n); // reused, no new heap memory
/// ```
#[derive(Debug, Clone, Default)]
pub struct NodeArena {
    nodes: Vec<Node>,
    /// Released nodes, chained through `next`.
    free_head: NodeId,
    in_use: usize,
}

impl NodeArena {
    /// An empty arena.
    pub fn new() -> Self {
        NodeArena {
            nodes: Vec::new(),
            free_head: NIL,
            in_use: 0,
        }
    }

    /// An arena with room for `n` nodes before it grows.
    pub fn with_capacity(n: usize) -> Self {
        NodeArena {
            nodes: Vec::with_capacity(n),
            free_head: NIL,
            in_use: 0,
        }
    }

    /// A fresh detached node for `[start, end)`, reusing a released one when
    /// there is one.
    ///
    /// # Complexity
    /// O(1) (amortized when the arena grows).
    pub fn alloc(&mut self, start: u64, end: u64) -> NodeId {
        let node = Node::detached(start, end);
        self.in_use += 1;
        if self.free_head != NIL {
            let id = self.free_head;
            self.free_head = self.nodes[id as usize].next;
            self.nodes[id as usize] = node;
            id
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as NodeId
        }
    }

    /// Makes room for `n` more nodes, so the next `n` allocations from an
    /// empty cache do not touch the heap.
    pub fn reserve(&mut self, n: usize) {
        self.nodes.reserve(n);
    }

    /// Returns a node (already removed from every tree) to the cache.
    ///
    /// # Errors
    /// [`FreeError::NotAllocated`] when `id` is not a node handed out by
    /// [`alloc`](Self::alloc) and not yet released; nothing changes.
    ///
    /// # Complexity
    /// O(1).
    pub fn release(&mut self, id: NodeId) -> Result<(), FreeError> {
        let node = self
            .nodes
            .get_mut(id as usize)
            .filter(|n| n.height != RELEASED)
            .ok_or(FreeError::NotAllocated)?;
        node.height = RELEASED;
        node.next = self.free_head;
        self.free_head = id;
        self.in_use -= 1;
        Ok(())
    }

    /// The node `id`.
    #[inline]
    pub fn get(&self, id: NodeId) -> &Node {
        &self.nodes[id as usize]
    }

    /// Nodes handed out and not released.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// Heap bytes held by the arena (its capacity, used or not).
    pub fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * core::mem::size_of::<Node>()
    }

    #[inline]
    fn n(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id as usize]
    }

    #[inline]
    fn height(&self, id: NodeId) -> u8 {
        if id == NIL {
            0
        } else {
            self.nodes[id as usize].height
        }
    }

    /// The largest range length in the subtree rooted at `id`.
    #[inline]
    fn smax(&self, id: NodeId) -> u64 {
        if id == NIL {
            0
        } else {
            let n = &self.nodes[id as usize];
            n.len().max(n.lmax).max(n.rmax)
        }
    }

    /// Recomputes height and smax of `id` from its children.
    #[inline]
    fn update(&mut self, id: NodeId) {
        let (l, r) = {
            let n = &self.nodes[id as usize];
            (n.left, n.right)
        };
        let h = 1 + self.height(l).max(self.height(r));
        let (lm, rm) = (self.smax(l), self.smax(r));
        let n = self.n(id);
        n.height = h;
        n.lmax = lm;
        n.rmax = rm;
    }

    fn rotate_right(&mut self, id: NodeId) -> NodeId {
        let l = self.nodes[id as usize].left;
        self.n(id).left = self.nodes[l as usize].right;
        self.n(l).right = id;
        self.update(id);
        self.update(l);
        l
    }

    fn rotate_left(&mut self, id: NodeId) -> NodeId {
        let r = self.nodes[id as usize].right;
        self.n(id).right = self.nodes[r as usize].left;
        self.n(r).left = id;
        self.update(id);
        self.update(r);
        r
    }

    /// What a parent's height and smax depend on in a child subtree.
    #[inline]
    fn shape(&self, id: NodeId) -> (NodeId, u8, u64) {
        (id, self.height(id), self.smax(id))
    }

    /// After a child subtree of `id` changed from `before` to root `child`:
    /// if the child's root, height and smax are all unchanged, so is `id`
    /// (no need to read the sibling, which saves a cache miss per level);
    /// otherwise update and rebalance `id`.
    #[inline]
    fn refit(&mut self, id: NodeId, child: NodeId, before: (NodeId, u8, u64)) -> NodeId {
        if self.shape(child) == before {
            id
        } else {
            self.rebalance(id)
        }
    }

    /// Updates `id` and restores the AVL balance at it; returns the subtree's
    /// new root.
    fn rebalance(&mut self, id: NodeId) -> NodeId {
        self.update(id);
        let (l, r) = {
            let n = &self.nodes[id as usize];
            (n.left, n.right)
        };
        let (hl, hr) = (self.height(l), self.height(r));
        if hl > hr + 1 {
            let (ll, lr) = (self.nodes[l as usize].left, self.nodes[l as usize].right);
            if self.height(lr) > self.height(ll) {
                let nl = self.rotate_left(l);
                self.n(id).left = nl;
            }
            self.rotate_right(id)
        } else if hr > hl + 1 {
            let (rl, rr) = (self.nodes[r as usize].left, self.nodes[r as usize].right);
            if self.height(rl) > self.height(rr) {
                let nr = self.rotate_right(r);
                self.n(id).right = nr;
            }
            self.rotate_left(id)
        } else {
            id
        }
    }
}

/// An AVL tree of non-overlapping ranges keyed by start, augmented with the
/// largest range in each subtree, threaded by an address-ordered list.
///
/// See the [module docs](self) for the picture and the invariants.
///
/// # Examples
/// ```
/// use mmkit::tree::{NodeArena, RangeTree};
/// let mut arena = NodeArena::new();
/// let mut free = RangeTree::new();
/// for (s, e) in [(0, 4), (10, 26), (40, 48)] {
///     let n = arena.alloc(s, e);
///     free.insert(&mut arena, n);
/// }
/// // The lowest range holding 8 bytes aligned to 8 in [0, 100):
/// let (n, addr) = free.lowest_fit(&arena, 8, 8, 0, 100).unwrap();
/// assert_eq!((arena.get(n).start, addr), (10, 16));
/// free.check(&arena, 0, 100).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct RangeTree {
    root: NodeId,
    head: NodeId,
    tail: NodeId,
    len: usize,
}

impl Default for RangeTree {
    fn default() -> Self {
        Self::new()
    }
}

impl RangeTree {
    /// An empty tree.
    pub const fn new() -> Self {
        RangeTree {
            root: NIL,
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tree holds no range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The lowest range, or `NIL`.
    pub fn first(&self) -> NodeId {
        self.head
    }

    /// The highest range, or `NIL`.
    pub fn last(&self) -> NodeId {
        self.tail
    }

    /// The largest range length in the tree (0 when empty).
    pub fn max_len(&self, ar: &NodeArena) -> u64 {
        ar.smax(self.root)
    }

    /// Links the detached node `id` into the tree and the list. The caller
    /// guarantees its range overlaps no range in the tree.
    ///
    /// # Complexity
    /// O(log n).
    pub fn insert(&mut self, ar: &mut NodeArena, id: NodeId) {
        let key = ar.get(id).start;
        let (mut pred, mut succ) = (NIL, NIL);
        self.root = Self::insert_at(ar, self.root, id, key, &mut pred, &mut succ);
        // Thread into the list between in-order neighbours found on the way.
        self.join(ar, pred, id);
        self.join(ar, id, succ);
        self.len += 1;
    }

    /// Makes `b` follow `a` in the list; `NIL` on either side stands for the
    /// list's head or tail.
    fn join(&mut self, ar: &mut NodeArena, a: NodeId, b: NodeId) {
        if a == NIL {
            self.head = b;
        } else {
            ar.n(a).next = b;
        }
        if b == NIL {
            self.tail = a;
        } else {
            ar.n(b).prev = a;
        }
    }

    fn insert_at(
        ar: &mut NodeArena,
        at: NodeId,
        id: NodeId,
        key: u64,
        pred: &mut NodeId,
        succ: &mut NodeId,
    ) -> NodeId {
        if at == NIL {
            return id;
        }
        let go_left = key < ar.get(at).start;
        if go_left {
            *succ = at;
        } else {
            *pred = at;
        }
        let child = if go_left {
            ar.get(at).left
        } else {
            ar.get(at).right
        };
        let before = ar.shape(child);
        let new = Self::insert_at(ar, child, id, key, pred, succ);
        if go_left {
            ar.n(at).left = new;
        } else {
            ar.n(at).right = new;
        }
        ar.refit(at, new, before)
    }

    /// Unlinks node `id` (which must be in this tree) from the tree and the
    /// list. The node stays allocated in the arena.
    ///
    /// # Complexity
    /// O(log n).
    pub fn remove(&mut self, ar: &mut NodeArena, id: NodeId) {
        let key = ar.get(id).start;
        self.root = Self::remove_at(ar, self.root, key);
        let (p, nx) = (ar.get(id).prev, ar.get(id).next);
        self.join(ar, p, nx);
        let n = ar.n(id);
        (n.left, n.right, n.prev, n.next, n.height) = (NIL, NIL, NIL, NIL, 1);
        self.len -= 1;
    }

    fn remove_at(ar: &mut NodeArena, at: NodeId, key: u64) -> NodeId {
        debug_assert!(at != NIL, "remove of a key not in the tree");
        let s = ar.get(at).start;
        if key == s {
            let (l, r) = (ar.get(at).left, ar.get(at).right);
            if l == NIL {
                return r;
            }
            if r == NIL {
                return l;
            }
            // Replace `at` by the minimum of its right subtree (a structural
            // move: list links are tied to node identity, so no value copy).
            let mut m = NIL;
            let r2 = Self::take_min(ar, r, &mut m);
            ar.n(m).left = l;
            ar.n(m).right = r2;
            return ar.rebalance(m);
        }
        let child = if key < s {
            ar.get(at).left
        } else {
            ar.get(at).right
        };
        let before = ar.shape(child);
        let new = Self::remove_at(ar, child, key);
        if key < s {
            ar.n(at).left = new;
        } else {
            ar.n(at).right = new;
        }
        ar.refit(at, new, before)
    }

    fn take_min(ar: &mut NodeArena, at: NodeId, min: &mut NodeId) -> NodeId {
        let l = ar.get(at).left;
        if l == NIL {
            *min = at;
            return ar.get(at).right;
        }
        let before = ar.shape(l);
        let nl = Self::take_min(ar, l, min);
        ar.n(at).left = nl;
        ar.refit(at, nl, before)
    }

    /// Changes the range of node `id` (in this tree) in place and fixes the
    /// augmented values on its path. The new range must keep the node's
    /// place in address order and overlap no other range (shrinking, or
    /// growing into a gap, as splits and merges do).
    ///
    /// # Complexity
    /// O(log n); stops early once an ancestor's value is unchanged.
    pub fn set_range(&mut self, ar: &mut NodeArena, id: NodeId, start: u64, end: u64) {
        let old = ar.get(id).start;
        let mut path = [NIL; MAX_DEPTH];
        let mut depth = 0;
        let mut at = self.root;
        while at != id {
            path[depth] = at;
            depth += 1;
            at = if old < ar.get(at).start {
                ar.get(at).left
            } else {
                ar.get(at).right
            };
        }
        ar.n(id).start = start;
        ar.n(id).end = end;
        // Propagate toward the root; an unchanged value ends it (the kernel's
        // augment propagation does the same).
        let mut child = id;
        for &p in path[..depth].iter().rev() {
            let s = ar.smax(child);
            let n = ar.n(p);
            let slot = if n.left == child {
                &mut n.lmax
            } else {
                &mut n.rmax
            };
            if *slot == s {
                break;
            }
            *slot = s;
            child = p;
        }
    }

    /// The node whose range starts exactly at `start`.
    ///
    /// # Complexity
    /// O(log n).
    pub fn find(&self, ar: &NodeArena, start: u64) -> Option<NodeId> {
        let mut at = self.root;
        while at != NIL {
            let n = ar.get(at);
            if start < n.start {
                at = n.left;
            } else if start > n.start {
                at = n.right;
            } else {
                return Some(at);
            }
        }
        None
    }

    /// The lowest node whose start is `>= key`, or `NIL`.
    ///
    /// # Complexity
    /// O(log n).
    pub fn lower_bound(&self, ar: &NodeArena, key: u64) -> NodeId {
        let mut at = self.root;
        let mut best = NIL;
        while at != NIL {
            let n = ar.get(at);
            if n.start >= key {
                best = at;
                at = n.left;
            } else {
                at = n.right;
            }
        }
        best
    }

    /// The node whose range contains `addr`, if any.
    ///
    /// # Complexity
    /// O(log n).
    pub fn containing(&self, ar: &NodeArena, addr: u64) -> Option<NodeId> {
        let mut at = self.root;
        let mut best = NIL;
        while at != NIL {
            let n = ar.get(at);
            if n.start <= addr {
                best = at;
                at = n.right;
            } else {
                at = n.left;
            }
        }
        (best != NIL && addr < ar.get(best).end).then_some(best)
    }

    /// The lowest address `a` in `[lo, hi)` with `a % align == 0` such that
    /// `[a, a + size)` lies inside one range of the tree; returns that range's
    /// node and `a`. `align` must be a power of two, `size > 0`.
    ///
    /// The descent skips every subtree whose `smax < size`, subtrees wholly
    /// below `lo` and subtrees wholly above `hi - size`.
    ///
    /// # Complexity
    /// O(log n) when the first range that is long enough also fits.
    /// A range of length at least `size + align - 1` always holds an aligned
    /// `size`; a shorter one (a *near-miss*) may not, and the kernel skips
    /// such ranges by searching for `size + align - 1` instead, which can miss
    /// the true lowest fit. mmkit examines them, so its answer is exact: the
    /// cost is O((k + 1) log n) where `k` is the number of near-miss ranges
    /// (long enough, wrongly aligned) below the answer inside the window.
    pub fn lowest_fit(
        &self,
        ar: &NodeArena,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
    ) -> Option<(NodeId, u64)> {
        if lo >= hi || hi - lo < size {
            return None;
        }
        if ar.smax(self.root) < size {
            return None;
        }
        Self::fit_at(ar, self.root, size, align, lo, hi)
    }

    fn fit_at(
        ar: &NodeArena,
        at: NodeId,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
    ) -> Option<(NodeId, u64)> {
        // The caller saw this subtree's largest range hold `size`; each node
        // keeps its children's maxima, so deciding where to go reads only
        // the nodes on the path (no sibling cache misses).
        let n = ar.get(at);
        // Left ranges all end at or before n.start: useless unless n.start > lo.
        if n.start > lo && n.lmax >= size {
            if let Some(r) = Self::fit_at(ar, n.left, size, align, lo, hi) {
                return Some(r);
            }
        }
        // This and every range to the right start at or after n.start.
        if n.start >= hi || hi - n.start < size {
            return None;
        }
        if n.len() >= size {
            if let Some(a) = crate::range::fit_in(n.start.max(lo), n.end.min(hi), size, align) {
                return Some((at, a));
            }
        }
        if n.rmax < size {
            return None;
        }
        Self::fit_at(ar, n.right, size, align, lo, hi)
    }

    /// The slow reference for [`lowest_fit`](Self::lowest_fit): walks the
    /// address-ordered list and returns the first range that holds the
    /// request. Same answer, O(n); the tests cross-check the two (as the
    /// kernel's debug switch compares its tree search with a list scan).
    pub fn lowest_fit_linear(
        &self,
        ar: &NodeArena,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
    ) -> Option<(NodeId, u64)> {
        let mut at = self.head;
        while at != NIL {
            let n = ar.get(at);
            if let Some(a) = crate::range::fit_in(n.start.max(lo), n.end.min(hi), size, align) {
                return Some((at, a));
            }
            at = n.next;
        }
        None
    }

    /// Verifies every invariant listed in the [module docs](self), and that
    /// each range lies in `[lo, hi)`.
    ///
    /// # Errors
    /// A [`CheckError`] naming the first violation.
    ///
    /// # Complexity
    /// O(n).
    pub fn check(&self, ar: &NodeArena, lo: u64, hi: u64) -> Result<(), CheckError> {
        let mut count = 0;
        let mut prev_end: Option<u64> = None;
        Self::check_at(ar, self.root, &mut count, &mut prev_end, lo, hi)?;
        ensure!(
            count == self.len,
            "tree holds {count} nodes, len says {}",
            self.len
        );
        // The list must be the in-order sequence.
        let mut at = self.head;
        let mut prev = NIL;
        let mut listed = 0;
        while at != NIL {
            ensure!(
                ar.get(at).prev == prev,
                "list prev link broken at node {at}"
            );
            if prev != NIL {
                ensure!(
                    ar.get(prev).start < ar.get(at).start,
                    "list out of order at node {at}"
                );
            }
            listed += 1;
            ensure!(listed <= self.len, "list longer than the tree (cycle?)");
            prev = at;
            at = ar.get(at).next;
        }
        ensure!(prev == self.tail, "list tail is not the last node");
        ensure!(
            listed == self.len,
            "list has {listed} nodes, tree {}",
            self.len
        );
        Ok(())
    }

    fn check_at(
        ar: &NodeArena,
        at: NodeId,
        count: &mut usize,
        prev_end: &mut Option<u64>,
        lo: u64,
        hi: u64,
    ) -> Result<u8, CheckError> {
        if at == NIL {
            return Ok(0);
        }
        let n = *ar.get(at);
        let hl = Self::check_at(ar, n.left, count, prev_end, lo, hi)?;
        ensure!(
            n.start < n.end,
            "empty range [{:#x}, {:#x})",
            n.start,
            n.end
        );
        ensure!(
            lo <= n.start && n.end <= hi,
            "range [{:#x}, {:#x}) outside [{lo:#x}, {hi:#x})",
            n.start,
            n.end
        );
        if let Some(pe) = *prev_end {
            ensure!(
                pe <= n.start,
                "ranges overlap or are out of order at {:#x}",
                n.start
            );
        }
        *prev_end = Some(n.end);
        *count += 1;
        let hr = Self::check_at(ar, n.right, count, prev_end, lo, hi)?;
        ensure!(hl.abs_diff(hr) <= 1, "AVL balance broken at {:#x}", n.start);
        ensure!(n.height == 1 + hl.max(hr), "height wrong at {:#x}", n.start);
        let (lm, rm) = (ar.smax(n.left), ar.smax(n.right));
        ensure!(
            n.lmax == lm && n.rmax == rm,
            "child maxima at {:#x} are ({:#x}, {:#x}), recomputed ({lm:#x}, {rm:#x})",
            n.start,
            n.lmax,
            n.rmax
        );
        Ok(n.height)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert a range at slot `i` of 256 slots of 64 bytes, length `len`.
        Insert(u8, u8),
        /// Remove the range in slot `i`, if any.
        Remove(u8),
        /// Shrink or grow the range in slot `i` within its slot.
        Resize(u8, u8),
        /// Query the lowest fit.
        Fit(u8, u8, u16, u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<u8>(), 1..=64u8).prop_map(|(i, l)| Op::Insert(i, l)),
            any::<u8>().prop_map(Op::Remove),
            (any::<u8>(), 1..=64u8).prop_map(|(i, l)| Op::Resize(i, l)),
            (1..=80u8, 0..8u8, any::<u16>(), any::<u16>())
                .prop_map(|(s, a, lo, hi)| Op::Fit(s, a, lo, hi)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Random inserts, removes and in-place resizes against a BTreeMap;
        /// every lowest-fit query agrees with the linear scan.
        #[test]
        fn tree_matches_model(ops in proptest::collection::vec(op(), 1..200)) {
            let mut ar = NodeArena::new();
            let mut t = RangeTree::new();
            let mut model: BTreeMap<u64, (u64, NodeId)> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(i, len) => {
                        let s = i as u64 * 64;
                        if let alloc::collections::btree_map::Entry::Vacant(v) = model.entry(s) {
                            let id = ar.alloc(s, s + len as u64);
                            t.insert(&mut ar, id);
                            v.insert((s + len as u64, id));
                        }
                    }
                    Op::Remove(i) => {
                        if let Some((_, id)) = model.remove(&(i as u64 * 64)) {
                            t.remove(&mut ar, id);
                            ar.release(id).unwrap();
                        }
                    }
                    Op::Resize(i, len) => {
                        let s = i as u64 * 64;
                        if let Some(v) = model.get_mut(&s) {
                            t.set_range(&mut ar, v.1, s, s + len as u64);
                            v.0 = s + len as u64;
                        }
                    }
                    Op::Fit(size, a, lo, hi) => {
                        let (size, align) = (size as u64, 1u64 << a);
                        let (lo, hi) = (lo as u64, hi as u64);
                        let want = model.iter().find_map(|(&s, &(e, id))| {
                            crate::range::fit_in(s.max(lo), e.min(hi), size, align).map(|x| (id, x))
                        });
                        prop_assert_eq!(t.lowest_fit(&ar, size, align, lo, hi), want);
                        prop_assert_eq!(t.lowest_fit_linear(&ar, size, align, lo, hi), want);
                    }
                }
                t.check(&ar, 0, 1 << 20).map_err(|e| TestCaseError::fail(e.0))?;
                prop_assert_eq!(t.len(), model.len());
                prop_assert_eq!(ar.in_use(), model.len());
                let found: Vec<u64> = model.keys().filter_map(|&k| t.find(&ar, k)).map(|id| ar.get(id).start).collect();
                prop_assert_eq!(found, model.keys().copied().collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn lower_bound_and_containing() {
        let mut ar = NodeArena::new();
        let mut t = RangeTree::new();
        for (s, e) in [(10, 20), (30, 40)] {
            let n = ar.alloc(s, e);
            t.insert(&mut ar, n);
        }
        let start = |id: NodeId| (id != NIL).then(|| ar.get(id).start);
        assert_eq!(start(t.lower_bound(&ar, 0)), Some(10));
        assert_eq!(start(t.lower_bound(&ar, 11)), Some(30));
        assert_eq!(start(t.lower_bound(&ar, 31)), None);
        assert_eq!(t.containing(&ar, 19).map(|id| ar.get(id).start), Some(10));
        assert_eq!(t.containing(&ar, 20), None);
        assert_eq!(t.containing(&ar, 5), None);
    }

    /// Issue 12, defect 8: releasing a node twice (or one never handed
    /// out) is refused, so the free cache never holds a node twice.
    #[test]
    fn double_release_is_refused() {
        let mut ar = NodeArena::new();
        let n = ar.alloc(0, 10);
        assert_eq!(ar.release(n), Ok(()));
        assert_eq!(ar.release(n), Err(FreeError::NotAllocated));
        assert_eq!(ar.release(7), Err(FreeError::NotAllocated));
        assert_eq!(ar.release(NIL), Err(FreeError::NotAllocated));
        assert_eq!(ar.in_use(), 0);
        let (x, y) = (ar.alloc(0, 1), ar.alloc(1, 2));
        assert_ne!(x, y, "one node handed out twice");
        assert_eq!(ar.in_use(), 2);
    }
}
