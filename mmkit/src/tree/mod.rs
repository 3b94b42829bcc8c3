//! Augmented indexes of free ranges for [`crate::vmap`]: [`btree::BTree`],
//! the B+tree the range allocator uses, and [`RangeTree`], the AVL tree it
//! used before (kept as the reference the B+tree is measured against; the
//! rest of this page describes it).
//!
//! A [`RangeTree`] holds non-overlapping half-open ranges `[start, end)`
//! sorted by `start`, as an AVL tree. Every node is augmented with two
//! things about its subtree:
//! - `smax`, the largest range length (the kernel's `subtree_max_size`),
//!   kept in the parent as the children's maxima `lmax` and `rmax`;
//! - an [`AlignSummary`]: the largest usable length at each alignment, so
//!   an aligned search prunes subtrees whose ranges are long enough but
//!   wrongly aligned (*near misses*).
//!
//! ```text
//!                  [40,48) smax 16
//!                 /               \
//!     [0,4) smax 16              [60,62) smax 2
//!          \
//!           [10,26) smax 16
//! ```
//!
//! Each node stores the `smax` of its two children (`lmax`, `rmax`) rather
//! than its own, so a descent decides left or right without reading the
//! children it will not visit: at a million ranges that halves the cache
//! misses of a search. `smax` and the summary let [`RangeTree::lowest_fit`]
//! skip any subtree that cannot hold the request, so the descent to the
//! lowest range that fits is O(log n).
//!
//! Searches can record the [`Path`] from the root to the node they find,
//! and every update then works along that path, bottom up, with no second
//! descent, stopping at the first ancestor whose values do not change:
//!
//! | the range allocator's step | after | tree call |
//! |---|---|---|
//! | alloc at a block's edge | [`lowest_fit_at`](RangeTree::lowest_fit_at) | [`set_range_at`](RangeTree::set_range_at) |
//! | alloc inside a block (split) | `lowest_fit_at` | [`split_at`](RangeTree::split_at) |
//! | alloc of a whole block | `lowest_fit_at` | [`remove_at_path`](RangeTree::remove_at_path) |
//! | free next to one free block | [`neighbours`](RangeTree::neighbours) | `set_range_at` |
//! | free between two free blocks | `neighbours` | [`merge_at`](RangeTree::merge_at) |
//! | free between two live areas | `neighbours` | [`insert_at_neighbours`](RangeTree::insert_at_neighbours) |
//!
//! So an alloc+free pair costs two descents (the search and the
//! neighbours), plus the busy index's two hash operations.
//!
//! The highest range, the *wilderness*, is kept out of the AVL tree: a
//! detached node the tree knows by id, with no ancestors (an empty path).
//! A range allocator spends most of its life cutting areas from the top of
//! the used space and giving them back (the kernel's `fix_align` and
//! `fix_size` patterns, the tail of a lazy purge), and there the longest
//! block changes at every step: in the tree, its every ancestor would see
//! a new `smax` and summary. Outside it, such a step touches one node.
//! Every search looks at the wilderness after the AVL tree (lowest fit) or
//! before it (highest fit); when it is used up, the highest range of the
//! AVL tree takes its place, and a range freed above it takes its place
//! and pushes it down into the tree.
//!
//! Once summaries are on, the bottom-up passes spend most of their time on
//! them, so each node on a path gets the cheapest exact recomputation that
//! what changed below it allows (see `Change`):
//! - only heights changed (or a child's root, by a rotation, with the same
//!   smax and summary): the stored summary holds, nothing to compute;
//! - the subtree gained one leaf and nothing else (a push onto the top of
//!   the tree, an insert beside its neighbours): the stored summary merged
//!   with the leaf's ([`AlignSummary::merge`]); a summary is a function of
//!   its set of ranges alone, so the union's is the merge of the two;
//! - a rotation: the demoted node is recomputed from its range and its new
//!   children, and the node rotated up keeps the old root's summary (the
//!   set is the same) or, if that one is stale, merges its own old subtree
//!   with the demoted node's new one, which together cover the subtree;
//! - anything else: [`AlignSummary::combine`] of the node's range and its
//!   children, computed on the packed words.
//!
//! Nodes live in a [`NodeArena`] shared by several trees, referenced by
//! [`NodeId`]. Released nodes are kept on a free list and reused, so a
//! steady state of inserts and removals allocates no heap memory (the
//! kernel's preloaded `vmap_area` cache plays that role).
//!
//! Invariants (checked by [`RangeTree::check`]):
//! - in-order traversal is strictly increasing in `start`; ranges do not
//!   overlap and are non-empty;
//! - a non-empty tree has a wilderness, with no links, above every range
//!   of the AVL tree (which the invariants below are about);
//! - `height(n) = 1 + max(height(l), height(r))`, `|height(l) - height(r)| <= 1`;
//! - `lmax(n) = smax(l)`, `rmax(n) = smax(r)`, where
//!   `smax(n) = max(end - start, lmax(n), rmax(n))`;
//! - `asum(n)` is [`AlignSummary::of_subtree`] of `n`'s range and its
//!   children's `(smax, asum)`.

use alloc::vec::Vec;

use crate::ensure;
use crate::error::{CheckError, FreeError};

pub mod btree;
mod summary;
mod top_down;
pub use summary::{AlignSummary, Part, CLASSES};

/// Index of a node in a [`NodeArena`].
pub type NodeId = u32;

/// "No node".
pub const NIL: NodeId = u32::MAX;

/// The height of a node in the arena's free cache: a node handed out has
/// height 1 or more, so a second release is recognised.
const RELEASED: u8 = 0;

/// Deepest possible AVL path for `u32` node ids (1.44 * 32 < 48), with room.
const MAX_DEPTH: usize = 64;

/// A range node: 56 bytes (checked at compile time), the metadata of one
/// free block of the range allocator.
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
    /// What this node's subtree holds at each alignment.
    asum: AlignSummary,
    left: NodeId,
    right: NodeId,
    height: u8,
}

const _: () = assert!(core::mem::size_of::<Node>() == 56);

impl Node {
    fn detached(start: u64, end: u64) -> Node {
        Node {
            start,
            end,
            lmax: 0,
            rmax: 0,
            asum: AlignSummary::default(),
            left: NIL,
            right: NIL,
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

    /// The largest range length in this node's subtree.
    #[inline]
    fn smax(&self) -> u64 {
        self.len().max(self.lmax).max(self.rmax)
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
    /// Released nodes, chained through `left`.
    free_head: NodeId,
    in_use: usize,
    /// Whether updates maintain the alignment summaries (see
    /// [`RangeTree::enable_summaries`]).
    summaries: bool,
    /// A lower bound on the granule of every range ever given to a node:
    /// requests aligned to at most `2^floor` never need the summaries.
    floor: u32,
}

impl NodeArena {
    /// An empty arena.
    pub fn new() -> Self {
        NodeArena::with_capacity(0)
    }

    /// An arena with room for `n` nodes before it grows.
    pub fn with_capacity(n: usize) -> Self {
        NodeArena {
            nodes: Vec::with_capacity(n),
            free_head: NIL,
            in_use: 0,
            summaries: false,
            floor: 63,
        }
    }

    /// A fresh detached node for `[start, end)`, reusing a released one when
    /// there is one. `start < end`.
    ///
    /// # Complexity
    /// O(1) (amortized when the arena grows).
    pub fn alloc(&mut self, start: u64, end: u64) -> NodeId {
        self.lower_floor(start, end);
        let node = Node::detached(start, end);
        self.in_use += 1;
        if self.free_head != NIL {
            let id = self.free_head;
            self.free_head = self.nodes[id as usize].left;
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
        node.left = self.free_head;
        self.free_head = id;
        self.in_use -= 1;
        Ok(())
    }

    /// The node `id`.
    #[inline]
    pub fn get(&self, id: NodeId) -> &Node {
        &self.nodes[id as usize]
    }

    /// The granule floor: every start and end ever given to a node is a
    /// multiple of `2^floor`.
    pub fn granule_floor(&self) -> u32 {
        self.floor
    }

    #[inline]
    fn lower_floor(&mut self, start: u64, end: u64) {
        self.floor = self
            .floor
            .min(start.trailing_zeros())
            .min(end.trailing_zeros());
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
            self.nodes[id as usize].smax()
        }
    }

    /// The alignment summary of `id`'s subtree (of nothing for `NIL`).
    #[inline]
    fn asum(&self, id: NodeId) -> AlignSummary {
        if id == NIL {
            AlignSummary::default()
        } else {
            self.nodes[id as usize].asum
        }
    }

    /// Recomputes the alignment summary of `id` from its range, its
    /// `lmax`/`rmax` and its children's summaries.
    #[inline]
    fn summarize(&self, id: NodeId) -> AlignSummary {
        let n = &self.nodes[id as usize];
        self.summary_of(n.start, n.end, n.left, n.lmax, n.right, n.rmax)
    }

    /// The alignment summary of a node with range `[start, end)` and
    /// children `l` and `r` whose longest ranges are `lm` and `rm`.
    #[inline]
    fn summary_of(
        &self,
        start: u64,
        end: u64,
        l: NodeId,
        lm: u64,
        r: NodeId,
        rm: u64,
    ) -> AlignSummary {
        if l == NIL && r == NIL {
            return AlignSummary::of_range(start, end);
        }
        let kid = |c: NodeId, m: u64| (c != NIL).then(|| (m, self.nodes[c as usize].asum));
        let smax = (end - start).max(lm).max(rm);
        AlignSummary::combine(smax, start, end, kid(l, lm), kid(r, rm))
    }

    /// Recomputes height, child maxima and summary of `id` from its children.
    #[inline]
    fn update(&mut self, id: NodeId) {
        let n = &self.nodes[id as usize];
        let (l, r) = (n.left, n.right);
        let h = 1 + self.height(l).max(self.height(r));
        self.refresh(id, l, r, h, Change::Values);
    }

    /// [`update`](Self::update) of `id`, whose children `l` and `r` and new
    /// height `h` the caller has just read, after `change` below it (not
    /// [`Change::Heights`]).
    #[inline]
    fn refresh(&mut self, id: NodeId, l: NodeId, r: NodeId, h: u8, change: Change) {
        let (lm, rm) = (self.smax(l), self.smax(r));
        let summaries = self.summaries;
        let n = self.n(id);
        let old = (n.smax(), n.asum);
        n.height = h;
        n.lmax = lm;
        n.rmax = rm;
        if summaries {
            let (s, e) = (n.start, n.end);
            let a = match change {
                Change::Gained(len, sum) => {
                    let smax = (e - s).max(lm).max(rm);
                    debug_assert_eq!(smax, old.0.max(len), "more than one range gained");
                    AlignSummary::merge(smax, old, (len, sum))
                }
                _ => self.summary_of(s, e, l, lm, r, rm),
            };
            self.n(id).asum = a;
        }
    }

    /// Recomputes height and child maxima of `id` from its children, not
    /// its summary.
    #[inline]
    fn update_links(&mut self, id: NodeId) {
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

    /// Rotates `id`'s left child up in its place and returns it, after
    /// `change` below `id`. Only `id`, demoted over a new set of ranges, is
    /// summarized again: the rotation keeps the subtree's set, so after
    /// [`Change::Heights`] the new root takes `id`'s stored summary as it
    /// is, and otherwise the summary of the union of its own old subtree
    /// and `id`'s new one, which together cover the subtree
    /// ([`AlignSummary::merge`]; both are up to date).
    fn rotate_right(&mut self, id: NodeId, change: Change) -> NodeId {
        let l = self.nodes[id as usize].left;
        self.n(id).left = self.nodes[l as usize].right;
        self.n(l).right = id;
        let kept = self.nodes[id as usize].asum;
        self.update(id);
        self.lift(l, id, kept, change);
        l
    }

    /// The mirror of [`rotate_right`](Self::rotate_right).
    fn rotate_left(&mut self, id: NodeId, change: Change) -> NodeId {
        let r = self.nodes[id as usize].right;
        self.n(id).right = self.nodes[r as usize].left;
        self.n(r).left = id;
        let kept = self.nodes[id as usize].asum;
        self.update(id);
        self.lift(r, id, kept, change);
        r
    }

    /// Updates `id`, just rotated up over the updated `down`, where the
    /// subtree's stored summary was `kept`.
    #[inline]
    fn lift(&mut self, id: NodeId, down: NodeId, kept: AlignSummary, change: Change) {
        let n = &self.nodes[id as usize];
        let old = (n.smax(), n.asum);
        self.update_links(id);
        if self.summaries {
            let a = if change == Change::Heights {
                kept
            } else {
                let d = &self.nodes[down as usize];
                AlignSummary::merge(self.nodes[id as usize].smax(), old, (d.smax(), d.asum))
            };
            self.n(id).asum = a;
        }
    }

    /// What a parent's augmented values depend on in a child subtree.
    #[inline]
    fn shape(&self, id: NodeId) -> (NodeId, u8, u64, AlignSummary) {
        (id, self.height(id), self.smax(id), self.asum(id))
    }

    /// After a child subtree of `id` changed from `before` to root `child`:
    /// if the child's root, height, smax and summary are all unchanged, so
    /// is `id` (no need to read the sibling, which saves a cache miss per
    /// level); otherwise update and rebalance `id`.
    #[inline]
    fn refit(
        &mut self,
        id: NodeId,
        child: NodeId,
        before: (NodeId, u8, u64, AlignSummary),
    ) -> NodeId {
        let now = self.shape(child);
        if now == before {
            id
        } else {
            // The same smax and summary (from the same root or a rotated
            // one): only the child's height or root changed, so id's
            // maxima and summary still hold.
            let values = (now.2, now.3) != (before.2, before.3);
            self.rebalance_as(
                id,
                if values {
                    Change::Values
                } else {
                    Change::Heights
                },
            )
        }
    }

    /// Updates `id` and restores the AVL balance at it; returns the subtree's
    /// new root.
    fn rebalance(&mut self, id: NodeId) -> NodeId {
        self.rebalance_as(id, Change::Values)
    }

    /// [`rebalance`](Self::rebalance) after `change` below `id`: with
    /// [`Change::Heights`] its stored maxima and summary still hold. A
    /// rotation updates the nodes it moves, so `id` is updated first only
    /// when it stays (one summary per node), and the node rotated up
    /// derives its summary from the one stored for the subtree it now
    /// roots whenever that one is known: always for the inner rotation of
    /// a double one (every node below `id` is up to date when this is
    /// called), and for the outer one unless `change` is
    /// [`Change::Values`].
    fn rebalance_as(&mut self, id: NodeId, change: Change) -> NodeId {
        let (l, r) = {
            let n = &self.nodes[id as usize];
            (n.left, n.right)
        };
        let (hl, hr) = (self.height(l), self.height(r));
        if hl > hr + 1 {
            let (ll, lr) = (self.nodes[l as usize].left, self.nodes[l as usize].right);
            if self.height(lr) > self.height(ll) {
                let nl = self.rotate_left(l, Change::Heights);
                self.n(id).left = nl;
            }
            self.rotate_right(id, change)
        } else if hr > hl + 1 {
            let (rl, rr) = (self.nodes[r as usize].left, self.nodes[r as usize].right);
            if self.height(rl) > self.height(rr) {
                let nr = self.rotate_right(r, Change::Heights);
                self.n(id).right = nr;
            }
            self.rotate_left(id, change)
        } else {
            let h = 1 + hl.max(hr);
            if change == Change::Heights {
                self.n(id).height = h;
            } else {
                self.refresh(id, l, r, h, change);
            }
            id
        }
    }
}

/// What changed in a node's subtree since its maxima and summary were
/// stored, as the bottom-up passes tell [`NodeArena::rebalance_as`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Only heights, or a child's root (a rotation): the stored values
    /// hold.
    Heights,
    /// The subtree gained one range, of this length and summary, and
    /// nothing else changed: the new summary is the stored one merged with
    /// the range's ([`AlignSummary::merge`]), cheaper than a recomputation
    /// from the children and the same value (a summary depends on its set
    /// of ranges alone). Values, not the node: a rotation may lift that
    /// node and overwrite its summary.
    Gained(u64, AlignSummary),
    /// Anything else: recompute from the children.
    Values,
}

/// The nodes a search passed through, root first: the ancestors of the
/// node it found, for [`RangeTree::set_range_at`]. Valid until the tree's
/// shape changes (an insert or a removal).
#[derive(Debug, Clone)]
pub struct Path {
    nodes: [NodeId; MAX_DEPTH],
    len: usize,
}

impl Default for Path {
    fn default() -> Self {
        Self::new()
    }
}

impl Path {
    /// An empty path.
    pub const fn new() -> Self {
        Path {
            nodes: [NIL; MAX_DEPTH],
            len: 0,
        }
    }

    /// The recorded nodes, root first.
    #[inline]
    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes[..self.len]
    }

    #[inline]
    fn push(&mut self, id: NodeId) {
        self.nodes[self.len] = id;
        self.len += 1;
    }

    /// The first `len` nodes: the ancestors of the node found at that depth.
    #[inline]
    fn prefix(&self, len: usize) -> &[NodeId] {
        &self.nodes[..len]
    }
}

/// The free ranges around a key, as [`RangeTree::neighbours`] finds them,
/// with the path to each.
#[derive(Debug, Clone, Default)]
pub struct Neighbours {
    /// The last range starting below the key, or `NIL`.
    pub prev: NodeId,
    /// The first range starting at or above the key, or `NIL`.
    pub next: NodeId,
    path: Path,
    prev_depth: usize,
    next_depth: usize,
}

impl Neighbours {
    /// The ancestors of [`prev`](Self::prev), root first.
    pub fn prev_path(&self) -> &[NodeId] {
        self.path.prefix(self.prev_depth)
    }

    /// The ancestors of [`next`](Self::next), root first.
    pub fn next_path(&self) -> &[NodeId] {
        self.path.prefix(self.next_depth)
    }
}

/// An AVL tree of non-overlapping ranges keyed by start, augmented with the
/// largest range and the alignment summary of each subtree.
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
    /// The AVL tree of every range but the highest.
    root: NodeId,
    /// The highest range, kept out of the AVL tree (the *wilderness*; NIL
    /// only when the tree is empty). See the module docs.
    wild: NodeId,
    /// Ranges in all, the wilderness included.
    len: usize,
    /// Whether this tree's summaries are exact and the search prunes by
    /// them (set by [`enable_summaries`](Self::enable_summaries)).
    summaries: bool,
}

impl Default for RangeTree {
    fn default() -> Self {
        Self::new()
    }
}

/// The lowest-fit search's next move at a node.
enum Step {
    /// The node's range holds the fit, at this address.
    Here(u64),
    /// Nothing here; the right subtree may hold it.
    Right,
    /// Nothing here or to the right.
    Fail,
}

/// A lowest-fit request: `size` bytes aligned to `2^k` in `[lo, hi)`.
#[derive(Clone, Copy)]
struct Request {
    /// Whether to prune by the alignment summaries.
    prune: bool,
    size: u64,
    align: u64,
    k: u32,
    lo: u64,
    hi: u64,
}

impl RangeTree {
    /// An empty tree.
    pub const fn new() -> Self {
        RangeTree {
            root: NIL,
            wild: NIL,
            len: 0,
            summaries: false,
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

    /// The ranges' nodes in address order.
    ///
    /// # Complexity
    /// O(n) in all, O(log n) per step at worst; no heap allocation.
    pub fn iter<'a>(&self, ar: &'a NodeArena) -> Iter<'a> {
        let mut it = Iter {
            ar,
            stack: [NIL; MAX_DEPTH],
            len: 0,
            wild: self.wild,
        };
        it.push_left(self.root);
        it
    }

    /// Starts maintaining the alignment summaries, computing them for the
    /// whole tree once, if an alignment of `align` could use them (above
    /// `2^granule_floor`) and they are not on yet. Until then the tree
    /// costs nothing for alignments: unaligned users never pay for them.
    /// Every tree sharing `ar` must be enabled through this call before
    /// its search prunes by summaries (a tree not enabled never does).
    ///
    /// # Complexity
    /// O(n) the first time, O(1) after.
    pub fn enable_summaries(&mut self, ar: &mut NodeArena, align: u64) {
        if self.summaries || align.trailing_zeros() <= ar.floor {
            return;
        }
        ar.summaries = true;
        self.summaries = true;
        Self::rebuild(ar, self.root);
    }

    fn rebuild(ar: &mut NodeArena, at: NodeId) {
        if at == NIL {
            return;
        }
        let (l, r) = (ar.get(at).left, ar.get(at).right);
        Self::rebuild(ar, l);
        Self::rebuild(ar, r);
        ar.n(at).asum = ar.summarize(at);
    }

    /// The largest range length in the tree (0 when empty).
    pub fn max_len(&self, ar: &NodeArena) -> u64 {
        ar.smax(self.root).max(self.wild_len(ar))
    }

    /// The length of the wilderness (0 when the tree is empty).
    #[inline]
    fn wild_len(&self, ar: &NodeArena) -> u64 {
        if self.wild == NIL {
            0
        } else {
            ar.get(self.wild).len()
        }
    }

    /// The highest range left the tree: the highest of the AVL tree, if
    /// any, becomes the wilderness.
    #[cold]
    fn refill_wild(&mut self, ar: &mut NodeArena) {
        debug_assert!(self.wild == NIL);
        if self.root == NIL {
            return;
        }
        let mut path = Path::new();
        let mut at = self.root;
        while ar.get(at).right != NIL {
            path.push(at);
            at = ar.get(at).right;
        }
        self.remove_at_path(ar, path.nodes(), at);
        self.wild = at;
        self.len += 1;
    }

    /// Takes the wilderness `id` out of the tree, detached.
    fn remove_wild(&mut self, ar: &mut NodeArena, id: NodeId) {
        debug_assert!(id == self.wild);
        self.wild = NIL;
        self.len -= 1;
        self.refill_wild(ar);
        let (s, e) = (ar.get(id).start, ar.get(id).end);
        *ar.n(id) = Node::detached(s, e);
    }

    /// Links the detached node `id` into the tree. The caller guarantees its
    /// range overlaps no range in the tree.
    ///
    /// # Complexity
    /// O(log n).
    pub fn insert(&mut self, ar: &mut NodeArena, id: NodeId) {
        if self.wild == NIL {
            self.wild = id;
            self.len += 1;
            return;
        }
        if ar.get(id).start > ar.get(self.wild).start {
            // The new highest: the old wilderness joins the AVL tree.
            let old = core::mem::replace(&mut self.wild, id);
            self.avl_push_max(ar, old);
        } else {
            self.avl_insert(ar, id);
        }
    }

    /// Links the detached node `id`, whose range lies above every range of
    /// the AVL tree, as its new highest: at the end of the right spine, with
    /// one bottom-up pass (the wilderness's splits and swaps).
    fn avl_push_max(&mut self, ar: &mut NodeArena, id: NodeId) {
        let mut path = Path::new();
        let mut at = self.root;
        while at != NIL {
            path.push(at);
            at = ar.get(at).right;
        }
        if ar.summaries {
            ar.n(id).asum = ar.summarize(id);
        }
        self.len += 1;
        match path.nodes().last() {
            None => self.root = id,
            Some(&p) => ar.n(p).right = id,
        }
        self.fix_up(ar, path.nodes(), path.len, id);
    }

    /// [`insert`](Self::insert) into the AVL tree (below the wilderness).
    fn avl_insert(&mut self, ar: &mut NodeArena, id: NodeId) {
        let key = ar.get(id).start;
        if ar.summaries {
            // Detached: its subtree is its own range.
            ar.n(id).asum = ar.summarize(id);
        }
        self.root = Self::insert_at(ar, self.root, id, key);
        self.len += 1;
    }

    fn insert_at(ar: &mut NodeArena, at: NodeId, id: NodeId, key: u64) -> NodeId {
        if at == NIL {
            return id;
        }
        let go_left = key < ar.get(at).start;
        let child = if go_left {
            ar.get(at).left
        } else {
            ar.get(at).right
        };
        let before = ar.shape(child);
        let new = Self::insert_at(ar, child, id, key);
        if go_left {
            ar.n(at).left = new;
        } else {
            ar.n(at).right = new;
        }
        ar.refit(at, new, before)
    }

    /// Unlinks node `id` (which must be in this tree) from the tree. The
    /// node stays allocated in the arena, detached.
    ///
    /// # Complexity
    /// O(log n).
    pub fn remove(&mut self, ar: &mut NodeArena, id: NodeId) {
        if id == self.wild {
            return self.remove_wild(ar, id);
        }
        let key = ar.get(id).start;
        self.root = Self::remove_at(ar, self.root, key);
        let (s, e) = (ar.get(id).start, ar.get(id).end);
        *ar.n(id) = Node::detached(s, e);
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
            // move: callers hold node ids, so no value copy).
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

    /// [`insert`](Self::insert) after [`neighbours`](Self::neighbours) of
    /// the node's start, with the tree unchanged since: the node hangs below
    /// the last node of that descent, and only its path is fixed, bottom
    /// up, stopping where nothing changes. No second descent.
    ///
    /// # Complexity
    /// O(log n).
    pub fn insert_at_neighbours(&mut self, ar: &mut NodeArena, id: NodeId, nb: &Neighbours) {
        if self.wild == NIL || nb.prev == self.wild {
            // Empty, or above the wilderness: `insert` swaps them.
            return self.insert(ar, id);
        }
        if ar.summaries {
            ar.n(id).asum = ar.summarize(id);
        }
        self.len += 1;
        let path = nb.path.nodes();
        let Some(&parent) = path.last() else {
            debug_assert!(self.root == NIL, "neighbours of another tree");
            self.root = id;
            return;
        };
        let key = ar.get(id).start;
        let p = ar.n(parent);
        if key < p.start {
            debug_assert!(p.left == NIL, "neighbours out of date");
            p.left = id;
        } else {
            debug_assert!(p.right == NIL, "neighbours out of date");
            p.right = id;
        }
        self.fix_up(ar, path, path.len(), id);
    }

    /// [`remove`](Self::remove) of a node whose ancestors, root first, a
    /// search has just recorded (as [`lowest_fit_at`](Self::lowest_fit_at)
    /// and [`neighbours`](Self::neighbours) do): no descent to it.
    ///
    /// # Complexity
    /// O(log n).
    pub fn remove_at_path(&mut self, ar: &mut NodeArena, ancestors: &[NodeId], id: NodeId) {
        if id == self.wild {
            return self.remove_wild(ar, id);
        }
        let (l, r) = (ar.get(id).left, ar.get(id).right);
        if l == NIL || r == NIL {
            self.relink(ar, ancestors, id, if l == NIL { r } else { l });
            self.fix_up(ar, ancestors, ancestors.len(), NIL);
        } else {
            // The successor m (the minimum on the right) takes id's place;
            // m and the nodes between it and id's right child all change.
            let mut path = Path::new();
            for &a in ancestors {
                path.push(a);
            }
            let mut m = r;
            let below = path.len + 1;
            while ar.get(m).left != NIL {
                path.push(m);
                m = ar.get(m).left;
            }
            if path.len >= below {
                let pm = path.nodes[path.len - 1];
                ar.n(pm).left = ar.get(m).right;
                ar.n(m).right = r;
            }
            ar.n(m).left = l;
            // m goes between the ancestors and the chain above it.
            path.nodes.copy_within(below - 1..path.len, below);
            path.nodes[below - 1] = m;
            path.len += 1;
            self.relink(ar, ancestors, id, m);
            self.fix_up(ar, path.nodes(), ancestors.len(), NIL);
        }
        let (s, e) = (ar.get(id).start, ar.get(id).end);
        *ar.n(id) = Node::detached(s, e);
        self.len -= 1;
    }

    /// Puts `sub` where `id` hangs below the last of `ancestors` (or at
    /// the root).
    #[inline]
    fn relink(&mut self, ar: &mut NodeArena, ancestors: &[NodeId], id: NodeId, sub: NodeId) {
        match ancestors.last() {
            None => self.root = sub,
            Some(&up) => {
                let u = ar.n(up);
                if u.left == id {
                    u.left = sub;
                } else {
                    u.right = sub;
                }
            }
        }
    }

    /// Splits a range in one pass: node `id` (below `ancestors`, root
    /// first, as a search recorded them) takes the range `[start, end)`,
    /// and the detached node `left`, whose range lies below `start` and
    /// above the range before `id`, becomes `id`'s in-order predecessor.
    /// Both changes are fixed bottom up along one path: what
    /// [`set_range_at`](Self::set_range_at) then [`insert`](Self::insert)
    /// do with two passes and a second descent (the range allocator's
    /// allocation inside a free block).
    ///
    /// # Complexity
    /// O(log n).
    pub fn split_at(
        &mut self,
        ar: &mut NodeArena,
        ancestors: &[NodeId],
        id: NodeId,
        left: NodeId,
        start: u64,
        end: u64,
    ) {
        ar.lower_floor(start, end);
        let n = ar.n(id);
        (n.start, n.end) = (start, end);
        debug_assert!(ar.get(left).end <= start, "left not below the range");
        if id == self.wild {
            // The left part is the AVL tree's new highest.
            return self.avl_push_max(ar, left);
        }
        if ar.summaries {
            ar.n(left).asum = ar.summarize(left);
        }
        self.len += 1;
        let mut path = Path::new();
        for &a in ancestors {
            path.push(a);
        }
        path.push(id);
        // The predecessor's place: id's empty left slot, or the empty right
        // slot at the end of its left subtree's right spine.
        let mut at = ar.get(id).left;
        if at == NIL {
            ar.n(id).left = left;
        } else {
            while ar.get(at).right != NIL {
                path.push(at);
                at = ar.get(at).right;
            }
            path.push(at);
            ar.n(at).right = left;
        }
        // id's range changed, so the pass must reach it: its stored values
        // no longer show what its parent saw (only a strict ancestor's do).
        self.fix_up(ar, path.nodes(), ancestors.len(), NIL);
    }

    /// Joins the two ranges [`neighbours`](Self::neighbours) just found
    /// (both present, the tree unchanged since) into one that covers them
    /// and the gap between: the range allocator's free between two free
    /// blocks. Of the two nodes, the deeper has at most one child (it is
    /// the other's in-order neighbour): it leaves the tree, the other takes
    /// the joined range, and one bottom-up pass fixes both changes. Returns
    /// the node that left (detached, still allocated in the arena).
    ///
    /// # Complexity
    /// O(log n).
    pub fn merge_at(&mut self, ar: &mut NodeArena, nb: &Neighbours) -> NodeId {
        let (start, end) = (ar.get(nb.prev).start, ar.get(nb.next).end);
        if nb.next == self.wild {
            // The wilderness grows down over the gap and the range below.
            self.remove_at_path(ar, nb.prev_path(), nb.prev);
            ar.n(self.wild).start = start;
            return nb.prev;
        }
        let (keep, gone, keep_depth, gone_depth) = if nb.prev_depth < nb.next_depth {
            (nb.prev, nb.next, nb.prev_depth, nb.next_depth)
        } else {
            (nb.next, nb.prev, nb.next_depth, nb.prev_depth)
        };
        let k = ar.n(keep);
        (k.start, k.end) = (start, end);
        let (l, r) = (ar.get(gone).left, ar.get(gone).right);
        debug_assert!(l == NIL || r == NIL, "neighbours out of date");
        let ancestors = nb.path.prefix(gone_depth);
        self.relink(ar, ancestors, gone, if l == NIL { r } else { l });
        // `keep` is an ancestor of `gone`, at index keep_depth; its range
        // changed, so only its own ancestors may stop the pass early.
        self.fix_up(ar, ancestors, keep_depth, NIL);
        let (s, e) = (ar.get(gone).start, ar.get(gone).end);
        *ar.n(gone) = Node::detached(s, e);
        self.len -= 1;
        gone
    }

    /// Updates and rebalances the nodes of `path` (root first, each the
    /// parent of the next), bottom up, after the subtree below its last
    /// node changed and, if `changed < path.len()`, the node at index
    /// `changed` changed its own range or children too. A node whose root,
    /// height, smax and summary come out unchanged ends the pass above
    /// `changed` (its ancestors' values still hold) and, below it, lets the
    /// pass jump to `changed` (the nodes between saw nothing change).
    /// `gained`, if not `NIL`, says the change below is that node, just
    /// linked as a leaf, and nothing else (then `changed` is `path.len()`):
    /// each ancestor's summary is its stored one merged with the leaf's.
    fn fix_up(&mut self, ar: &mut NodeArena, path: &[NodeId], changed: usize, gained: NodeId) {
        debug_assert!(gained == NIL || changed == path.len());
        let grew = if gained == NIL {
            Change::Values
        } else {
            let n = ar.get(gained);
            Change::Gained(n.len(), n.asum)
        };
        let mut i = path.len();
        // Whether the subtree below `at` changed its smax or summary (not
        // only its height or root): then `at` needs new maxima and summary.
        let mut values = true;
        while i > 0 {
            i -= 1;
            let at = path[i];
            let n = ar.get(at);
            let (h0, m0, a0) = (n.height, n.smax(), n.asum);
            let change = if i == changed {
                Change::Values
            } else if values {
                grew
            } else {
                Change::Heights
            };
            let new = ar.rebalance_as(at, change);
            let n = ar.get(new);
            let same = n.smax() == m0 && n.asum == a0;
            if new == at && n.height == h0 && same && i != changed {
                if i < changed {
                    return;
                }
                i = changed + 1;
                continue;
            }
            // `before` of the node at `changed` already shows its new
            // range, not what its parent saw: the parent must update.
            // A new root (a rotation) with the same smax and summary leaves
            // the parent's maxima and summary as they were: it only relinks.
            values = i == changed || !same;
            if new != at {
                match i.checked_sub(1) {
                    None => self.root = new,
                    Some(j) => {
                        let u = ar.n(path[j]);
                        if u.left == at {
                            u.left = new;
                        } else {
                            u.right = new;
                        }
                    }
                }
            }
        }
    }

    /// Changes the range of node `id` (in this tree) in place and fixes the
    /// augmented values on its path. The new range must keep the node's
    /// place in address order and overlap no other range (shrinking, or
    /// growing into a gap, as splits and merges do).
    ///
    /// # Complexity
    /// O(log n); stops early once an ancestor's values are unchanged.
    pub fn set_range(&mut self, ar: &mut NodeArena, id: NodeId, start: u64, end: u64) {
        if id == self.wild {
            return self.set_range_at(ar, &[], id, start, end);
        }
        let old = ar.get(id).start;
        let mut path = Path::new();
        let mut at = self.root;
        while at != id {
            path.push(at);
            at = if old < ar.get(at).start {
                ar.get(at).left
            } else {
                ar.get(at).right
            };
        }
        self.set_range_at(ar, path.nodes(), id, start, end);
    }

    /// [`set_range`](Self::set_range) for a node whose ancestors, root
    /// first, a search has just recorded: no descent.
    ///
    /// # Complexity
    /// O(length of `ancestors`); stops early once an ancestor's values are
    /// unchanged.
    pub fn set_range_at(
        &mut self,
        ar: &mut NodeArena,
        ancestors: &[NodeId],
        id: NodeId,
        start: u64,
        end: u64,
    ) {
        ar.lower_floor(start, end);
        let n = ar.n(id);
        (n.start, n.end) = (start, end);
        if id == self.wild {
            // Outside the AVL tree: nothing above it to fix.
            return;
        }
        let mut summary_changed = false;
        if ar.summaries {
            let old = ar.get(id).asum;
            let new = ar.summarize(id);
            ar.n(id).asum = new;
            summary_changed = old != new;
        }
        // Propagate toward the root; unchanged values end it (the kernel's
        // augment propagation does the same).
        let mut child = id;
        for &p in ancestors.iter().rev() {
            let s = ar.smax(child);
            let n = ar.n(p);
            debug_assert!(n.left == child || n.right == child, "not a path");
            let slot = if n.left == child {
                &mut n.lmax
            } else {
                &mut n.rmax
            };
            if *slot == s && !summary_changed {
                break;
            }
            *slot = s;
            if ar.summaries {
                let old = ar.get(p).asum;
                let new = ar.summarize(p);
                ar.n(p).asum = new;
                summary_changed = old != new;
            }
            child = p;
        }
    }

    /// The node whose range starts exactly at `start`.
    ///
    /// # Complexity
    /// O(log n).
    pub fn find(&self, ar: &NodeArena, start: u64) -> Option<NodeId> {
        if self.wild != NIL && ar.get(self.wild).start <= start {
            return (ar.get(self.wild).start == start).then_some(self.wild);
        }
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

    /// The last range starting below `key` and the first starting at or
    /// above it, found in one descent that records the path to both (one
    /// is always an ancestor of the other).
    ///
    /// # Complexity
    /// O(log n).
    pub fn neighbours(&self, ar: &NodeArena, key: u64) -> Neighbours {
        let mut nb = Neighbours {
            prev: NIL,
            next: NIL,
            ..Neighbours::default()
        };
        let mut at = self.root;
        // The direction at each level is a coin flip for random keys, so
        // the loop body has no branch on it: the last node on each side
        // and the child to visit are picked by indexing with the
        // direction. A mispredicted branch per level cost more than the
        // rest of the descent.
        let mut last = [NIL; 2];
        let mut depth = [0; 2];
        while at != NIL {
            let n = ar.get(at);
            let right = usize::from(n.start < key);
            last[right] = at;
            depth[right] = nb.path.len;
            nb.path.push(at);
            at = [n.left, n.right][right];
        }
        [nb.next, nb.prev] = last;
        [nb.next_depth, nb.prev_depth] = depth;
        // The wilderness is above every range of the AVL tree, with no
        // ancestors (an empty path).
        if self.wild != NIL {
            if ar.get(self.wild).start < key {
                (nb.prev, nb.prev_depth) = (self.wild, 0);
            } else if nb.next == NIL {
                (nb.next, nb.next_depth) = (self.wild, 0);
            }
        }
        nb
    }

    /// The lowest node whose start is `>= key`, or `NIL`.
    ///
    /// # Complexity
    /// O(log n).
    pub fn lower_bound(&self, ar: &NodeArena, key: u64) -> NodeId {
        self.neighbours(ar, key).next
    }

    /// The node whose range contains `addr`, if any.
    ///
    /// # Complexity
    /// O(log n).
    pub fn containing(&self, ar: &NodeArena, addr: u64) -> Option<NodeId> {
        if self.wild != NIL && ar.get(self.wild).start <= addr {
            return (addr < ar.get(self.wild).end).then_some(self.wild);
        }
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
    /// The descent skips every subtree whose `smax < size`, every subtree
    /// whose [`AlignSummary`] shows no range with `size` usable bytes at
    /// `align`, subtrees wholly below `lo` and subtrees wholly above
    /// `hi - size`.
    ///
    /// # Complexity
    /// O(log n) when `align <= 2^(g + CLASSES)` for the granule `g` of the
    /// ranges (every start and end a multiple of `2^g`: up to 4 MiB for
    /// 4 KiB pages); the window limits add at most two boundary paths. A
    /// larger alignment is pruned with the bound of `2^(g + CLASSES)`, so
    /// ranges that pass it but miss the larger alignment are examined one
    /// by one (O((k + 1) log n) for k such near misses). The answer is exact
    /// either way; the kernel instead searches for `size + align - 1`, which
    /// can miss the lowest fit.
    pub fn lowest_fit(
        &self,
        ar: &NodeArena,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
    ) -> Option<(NodeId, u64)> {
        self.lowest_fit_at(ar, size, align, lo, hi, &mut Path::new())
    }

    /// [`lowest_fit`](Self::lowest_fit), also recording in `path` the
    /// ancestors of the node found, for [`set_range_at`](Self::set_range_at).
    pub fn lowest_fit_at(
        &self,
        ar: &NodeArena,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
        path: &mut Path,
    ) -> Option<(NodeId, u64)> {
        path.len = 0;
        if lo >= hi || hi - lo < size {
            return None;
        }
        if ar.smax(self.root) >= size {
            let k = align.trailing_zeros();
            let req = Request {
                prune: self.summaries,
                size,
                align,
                k,
                lo,
                hi,
            };
            if let Some(found) = Self::fit_at(ar, self.root, req, path) {
                return Some(found);
            }
        }
        // Every range of the AVL tree lies below the wilderness.
        path.len = 0;
        self.fit_in_wild(ar, size, align, lo, hi, crate::range::fit_in)
    }

    /// The fit `place(lo, hi, size, align)` finds in the wilderness clipped
    /// to `[lo, hi)`, if any.
    #[inline]
    fn fit_in_wild(
        &self,
        ar: &NodeArena,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
        place: fn(u64, u64, u64, u64) -> Option<u64>,
    ) -> Option<(NodeId, u64)> {
        if self.wild == NIL {
            return None;
        }
        let w = ar.get(self.wild);
        place(w.start.max(lo), w.end.min(hi), size, align).map(|a| (self.wild, a))
    }

    /// The lowest fit in the subtree at `root`, whose largest range the
    /// caller saw hold `size`. A loop, not a recursion: `path` holds the
    /// ancestors of `at`, and bit `d` of `lefts` says the descent went left
    /// at depth `d`, so a failed left subtree resumes at that ancestor.
    fn fit_at(ar: &NodeArena, root: NodeId, q: Request, path: &mut Path) -> Option<(NodeId, u64)> {
        let mut at = root;
        let mut lefts = 0u64;
        'descend: loop {
            // Each node keeps its children's maxima, so deciding where to go
            // reads only the nodes on the path (no sibling cache misses).
            let n = ar.get(at);
            // Near misses: no range below holds `size` bytes at this alignment.
            let pruned = q.prune && !matches!(n.asum.usable(n.smax(), q.k), Some(u) if u >= q.size);
            if !pruned {
                // Left ranges all end at or before n.start: useless unless
                // n.start > lo.
                if n.start > q.lo && n.lmax >= q.size {
                    lefts |= 1 << path.len;
                    path.push(at);
                    at = n.left;
                    continue;
                }
                match Self::here_or_right(n, q) {
                    Step::Here(a) => return Some((at, a)),
                    Step::Right => {
                        path.push(at);
                        at = n.right;
                        continue;
                    }
                    Step::Fail => {}
                }
            }
            // Back up to the nearest ancestor whose left subtree failed.
            while path.len > 0 {
                path.len -= 1;
                let (up, bit) = (path.nodes[path.len], 1u64 << path.len);
                if lefts & bit == 0 {
                    continue;
                }
                lefts &= !bit;
                let n = ar.get(up);
                match Self::here_or_right(n, q) {
                    Step::Here(a) => return Some((up, a)),
                    Step::Right => {
                        path.push(up);
                        at = n.right;
                        continue 'descend;
                    }
                    Step::Fail => {}
                }
            }
            return None;
        }
    }

    /// What the search does at node `n` once nothing on its left fits.
    #[inline]
    fn here_or_right(n: &Node, q: Request) -> Step {
        // This and every range to the right start at or after n.start.
        if n.start >= q.hi || q.hi - n.start < q.size {
            return Step::Fail;
        }
        if n.len() >= q.size {
            let (lo, hi) = (n.start.max(q.lo), n.end.min(q.hi));
            if let Some(a) = crate::range::fit_in(lo, hi, q.size, q.align) {
                return Step::Here(a);
            }
        }
        if n.rmax < q.size {
            Step::Fail
        } else {
            Step::Right
        }
    }

    /// The slow reference for [`lowest_fit`](Self::lowest_fit): walks the
    /// ranges in address order and returns the first that holds the
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
        self.iter(ar).find_map(|id| {
            let n = ar.get(id);
            crate::range::fit_in(n.start.max(lo), n.end.min(hi), size, align).map(|a| (id, a))
        })
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
        ensure!(
            !self.summaries || ar.summaries,
            Hint,
            "summaries on in the tree, off in its arena"
        );
        let summaries = self.summaries;
        Self::check_at(ar, self.root, summaries, &mut count, &mut prev_end, lo, hi)?;
        ensure!(
            (self.wild == NIL) == (self.root == NIL && self.len == 0),
            Structure,
            "no wilderness in a non-empty tree, or one in an empty tree"
        );
        if self.wild != NIL {
            let w = *ar.get(self.wild);
            ensure!(
                w.left == NIL && w.right == NIL && w.height == 1,
                Structure @ w.start,
                "the wilderness at {:#x} has links",
                w.start
            );
            ensure!(w.start < w.end, Layout @ w.start, "empty wilderness at {:#x}", w.start);
            ensure!(
                lo <= w.start && w.end <= hi,
                Bounds @ w.start,
                "wilderness [{:#x}, {:#x}) outside [{lo:#x}, {hi:#x})",
                w.start,
                w.end
            );
            ensure!(
                prev_end.map_or(true, |pe| pe <= w.start),
                Layout @ w.start,
                "the wilderness at {:#x} is not above every other range",
                w.start
            );
            ensure!(
                w.start.trailing_zeros().min(w.end.trailing_zeros()) >= ar.floor,
                Hint @ w.start,
                "wilderness finer than the granule floor"
            );
            count += 1;
        }
        ensure!(
            count == self.len,
            Accounting,
            "tree holds {count} nodes, len says {}",
            self.len
        );
        ensure!(
            self.iter(ar).count() == self.len,
            Structure,
            "in-order walk disagrees with len"
        );
        Ok(())
    }

    /// Checks the subtree at `at`; returns its recomputed height, smax and
    /// summary.
    fn check_at(
        ar: &NodeArena,
        at: NodeId,
        summaries: bool,
        count: &mut usize,
        prev_end: &mut Option<u64>,
        lo: u64,
        hi: u64,
    ) -> Result<(u8, u64, AlignSummary), CheckError> {
        if at == NIL {
            return Ok((0, 0, AlignSummary::default()));
        }
        let n = *ar.get(at);
        let (hl, lm, la) = Self::check_at(ar, n.left, summaries, count, prev_end, lo, hi)?;
        ensure!(n.start < n.end, Layout @ n.start, "empty range [{:#x}, {:#x})", n.start, n.end);
        ensure!(
            lo <= n.start && n.end <= hi,
            Bounds @ n.start,
            "range [{:#x}, {:#x}) outside [{lo:#x}, {hi:#x})",
            n.start,
            n.end
        );
        if let Some(pe) = *prev_end {
            ensure!(
                pe <= n.start,
                Layout @ n.start,
                "ranges overlap or are out of order at {:#x}",
                n.start
            );
        }
        *prev_end = Some(n.end);
        *count += 1;
        ensure!(
            n.start.trailing_zeros().min(n.end.trailing_zeros()) >= ar.floor,
            Hint @ n.start,
            "range [{:#x}, {:#x}) finer than the granule floor",
            n.start,
            n.end
        );
        let (hr, rm, ra) = Self::check_at(ar, n.right, summaries, count, prev_end, lo, hi)?;
        ensure!(hl.abs_diff(hr) <= 1, Structure @ n.start, "AVL balance broken at {:#x}", n.start);
        ensure!(n.height == 1 + hl.max(hr), Structure @ n.start, "height wrong at {:#x}", n.start);
        ensure!(
            n.lmax == lm && n.rmax == rm,
            Hint @ n.start,
            "child maxima at {:#x} are ({:#x}, {:#x}), recomputed ({lm:#x}, {rm:#x})",
            n.start,
            n.lmax,
            n.rmax
        );
        let smax = n.len().max(lm).max(rm);
        let mut parts = Vec::from([Part::Range(n.start, n.end)]);
        if n.left != NIL {
            parts.push(Part::Subtree(lm, la));
        }
        if n.right != NIL {
            parts.push(Part::Subtree(rm, ra));
        }
        let asum = AlignSummary::of_subtree(smax, &parts);
        ensure!(
            !summaries || n.asum == asum,
            Hint @ n.start,
            "alignment summary at {:#x} is {:?}, recomputed {asum:?}",
            n.start,
            n.asum
        );
        Ok((n.height, smax, asum))
    }
}

/// The nodes of a [`RangeTree`] in address order (see [`RangeTree::iter`]).
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    ar: &'a NodeArena,
    stack: [NodeId; MAX_DEPTH],
    len: usize,
    /// The wilderness, yielded last (NIL once yielded).
    wild: NodeId,
}

impl Iter<'_> {
    fn push_left(&mut self, mut at: NodeId) {
        while at != NIL {
            self.stack[self.len] = at;
            self.len += 1;
            at = self.ar.get(at).left;
        }
    }
}

impl Iterator for Iter<'_> {
    type Item = NodeId;

    fn next(&mut self) -> Option<NodeId> {
        if self.len == 0 {
            let w = core::mem::replace(&mut self.wild, NIL);
            return (w != NIL).then_some(w);
        }
        self.len -= 1;
        let id = self.stack[self.len];
        self.push_left(self.ar.get(id).right);
        Some(id)
    }
}

/// Sorted, non-overlapping ranges from `(gap, len)` pairs laid out left to
/// right, both scaled by `2^shift`: the tests' way to build a set of free
/// blocks of any granule.
#[cfg(test)]
pub(crate) fn layout(raw: &[(u64, u64)], shift: u32) -> Vec<(u64, u64)> {
    let mut at = 0u64;
    raw.iter()
        .map(|&(gap, len)| {
            let s = at + (gap << shift);
            at = s + (len << shift);
            (s, at)
        })
        .collect()
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
            (1..=80u8, 0..24u8, any::<u16>(), any::<u16>())
                .prop_map(|(s, a, lo, hi)| Op::Fit(s, a, lo, hi)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Random inserts, removes and in-place resizes against a BTreeMap;
        /// every lowest-fit query agrees with the linear scan.
        #[test]
        fn tree_matches_model(shift in 0u32..14, ops in proptest::collection::vec(op(), 1..200)) {
            let mut ar = NodeArena::new();
            let mut t = RangeTree::new();
            let mut model: BTreeMap<u64, (u64, NodeId)> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(i, len) => {
                        let s = (i as u64 * 64) << shift;
                        let e = s + ((len as u64) << shift);
                        if let alloc::collections::btree_map::Entry::Vacant(v) = model.entry(s) {
                            let id = ar.alloc(s, e);
                            t.insert(&mut ar, id);
                            v.insert((e, id));
                        }
                    }
                    Op::Remove(i) => {
                        if let Some((_, id)) = model.remove(&((i as u64 * 64) << shift)) {
                            t.remove(&mut ar, id);
                            ar.release(id).unwrap();
                        }
                    }
                    Op::Resize(i, len) => {
                        let s = (i as u64 * 64) << shift;
                        let e = s + ((len as u64) << shift);
                        if let Some(v) = model.get_mut(&s) {
                            t.set_range(&mut ar, v.1, s, e);
                            v.0 = e;
                        }
                    }
                    Op::Fit(size, a, lo, hi) => {
                        let (size, align) = ((size as u64) << shift, 1u64 << a);
                        let (lo, hi) = ((lo as u64) << shift, (hi as u64) << shift);
                        let want = model.iter().find_map(|(&s, &(e, id))| {
                            crate::range::fit_in(s.max(lo), e.min(hi), size, align).map(|x| (id, x))
                        });
                        if a % 3 != 0 {
                            t.enable_summaries(&mut ar, align);
                        }
                        prop_assert_eq!(t.lowest_fit(&ar, size, align, lo, hi), want);
                        prop_assert_eq!(t.lowest_fit_linear(&ar, size, align, lo, hi), want);
                    }
                }
                t.check(&ar, 0, 1 << 34).map_err(|e| TestCaseError::fail(alloc::format!("{e}")))?;
                prop_assert_eq!(t.len(), model.len());
                prop_assert_eq!(ar.in_use(), model.len());
                let found: Vec<u64> = model.keys().filter_map(|&k| t.find(&ar, k)).map(|id| ar.get(id).start).collect();
                prop_assert_eq!(found, model.keys().copied().collect::<Vec<_>>());
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// The path-based insert, removal, split and join (no second
        /// descent) keep every invariant and agree with a BTreeMap, mixed
        /// with the plain insert and removal.
        #[test]
        fn path_ops_match_model(
            ops in proptest::collection::vec((any::<u8>(), 1..=64u8, any::<bool>(), any::<u8>()), 1..300),
            summaries_from in 0..600usize,
        ) {
            let mut ar = NodeArena::new();
            let mut t = RangeTree::new();
            let mut model: BTreeMap<u64, NodeId> = BTreeMap::new();
            for (step, (i, len, by_path, cut)) in ops.into_iter().enumerate() {
                if step == summaries_from {
                    t.enable_summaries(&mut ar, 1 << 7);
                }
                // Slot i of 64 bytes holds at most two ranges.
                let s = i as u64 * 64;
                let first = model.range(s..s + 64).next().map(|(&k, &id)| (k, id));
                match first {
                    Some((k, id)) if cut % 3 == 0 && ar.get(id).end - k >= 3 => {
                        // Split it: [k, k + a) and [k + b, end), a < b.
                        let (cut, e) = (u64::from(cut), ar.get(id).end);
                        let a = 1 + cut / 3 % (e - k - 2);
                        let b = a + 1 + (cut >> 4) % (e - k - a - 1);
                        let nb = t.neighbours(&ar, k);
                        prop_assert_eq!(nb.next, id);
                        let left = ar.alloc(k, k + a);
                        t.split_at(&mut ar, nb.next_path(), id, left, k + b, e);
                        model.insert(k, left);
                        model.insert(k + b, id);
                    }
                    Some((k, id)) if cut % 3 == 1 && model.range(k + 1..).next().is_some() => {
                        // Join it with the next range, over the gap.
                        let (&k2, &id2) = model.range(k + 1..).next().unwrap();
                        let nb = t.neighbours(&ar, k + 1);
                        prop_assert_eq!((nb.prev, nb.next), (id, id2));
                        let gone = t.merge_at(&mut ar, &nb);
                        let keep = if gone == id { id2 } else { id };
                        prop_assert_eq!((ar.get(keep).start, ar.get(keep).end), (k, ar.get(id2).end));
                        model.remove(&k2);
                        model.insert(k, keep);
                        ar.release(gone).unwrap();
                    }
                    Some((k, id)) => {
                        model.remove(&k);
                        if by_path {
                            let nb = t.neighbours(&ar, k);
                            prop_assert_eq!(nb.next, id);
                            t.remove_at_path(&mut ar, nb.next_path(), id);
                        } else {
                            t.remove(&mut ar, id);
                        }
                        ar.release(id).unwrap();
                    }
                    None if model.range(..s).next_back().is_some_and(|(_, &p)| ar.get(p).end > s) => {
                        // A joined range reaches into this slot.
                    }
                    None => {
                        let id = ar.alloc(s, s + len as u64);
                        if by_path {
                            let nb = t.neighbours(&ar, s);
                            t.insert_at_neighbours(&mut ar, id, &nb);
                        } else {
                            t.insert(&mut ar, id);
                        }
                        model.insert(s, id);
                    }
                }
                t.check(&ar, 0, 1 << 20).map_err(|e| TestCaseError::fail(alloc::format!("{e}")))?;
                let got: Vec<NodeId> = t.iter(&ar).collect();
                prop_assert_eq!(got, model.values().copied().collect::<Vec<_>>());
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
        let nb = t.neighbours(&ar, 25);
        assert_eq!((start(nb.prev), start(nb.next)), (Some(10), Some(30)));
        let nb = t.neighbours(&ar, 5);
        assert_eq!((start(nb.prev), start(nb.next)), (None, Some(10)));
        let order: Vec<u64> = t.iter(&ar).map(|id| ar.get(id).start).collect();
        assert_eq!(order, [10, 30]);
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
