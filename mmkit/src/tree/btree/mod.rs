//! [`BTree`]: the free blocks of a range allocator in an augmented B+tree,
//! which reads a few wide nodes per search where a binary tree reads one
//! node per level.
//!
//! ```text
//!   inner:  key[i]  lowest start below child i
//!           max[i]  longest block below child i
//!           sum[i]  AlignSummary below child i (kept once aligned requests need it)
//!           kid[i]  child index (an inner node or a leaf, by level)
//!           cls[i]  length classes below child i (kept while best fit uses them)
//!           code[i] a 7-bit code of max[i]
//!   leaf:   start[i], size[i]: up to LEAF_CAP free blocks sorted by start
//!           code[i] a 7-bit code of size[i]
//!   (past a node's length: starts and keys u64::MAX, sizes, maxima and codes 0)
//! ```
//!
//! Every leaf is at the same depth. A non-root leaf holds `LEAF_CAP / 2 ..=
//! LEAF_CAP` blocks and a non-root inner node `FANOUT / 2 ..= FANOUT`
//! children (a removal that underflows borrows from or merges with a
//! sibling), so a free block costs at most 280 / 8 bytes of leaf plus
//! 600 / 8 bytes of inner node per leaf: about 44 bytes, 26-30 at the
//! usual three-quarters occupancy.
//!
//! The highest block (the *wilderness*) is kept out of the tree:
//! allocations from the top of the used space touch no node.
//!
//! Searches return a [`Pos`], the path from the root (node and child slot
//! per level) to the block, and every update works bottom up along it,
//! recomputing each parent's entry for the child; a shrink stops at the
//! first entry that comes out unchanged, growth goes on to the root
//! (`entry.rs`). A `Pos` is valid until the
//! tree's next change.
//!
//! Keys and maxima are exact. A summary is an *upper bound*: at every
//! alignment it says at least the longest usable length below the child,
//! which is all that pruning needs (a child it lets through is searched,
//! and the leaves test every fit exactly, so the answer stays the exact
//! lowest fit). That lets updates skip most recomputation:
//! - a change that only shrank the blocks below a node (an allocation cut
//!   a block, a block was removed) keeps the node's summary while its
//!   longest block is unchanged: no usable length grew; above the leaves,
//!   when the longest block fell by at most `CAPPED_DROP` granules, the
//!   summary is capped at the new longest block instead of recomputed
//!   (a freed area that merged with its alignment padding into the longest
//!   block, taken back, drops the maximum by the padding at every level);
//! - one that only grew them merges the summaries of the old set and the
//!   new block;
//! - anything else, or a shrink that lowered the longest block, recomputes
//!   from the children's (or the leaf's blocks').
//!
//! A search that enters a child its summary let through and finds no fit
//! there recomputes that child's summary (`tighten`), so each stale
//! summary costs one wasted visit at most. [`BTree::check`] verifies the
//! bound against the true usable lengths, computed from the blocks at all
//! 64 alignments.
//!
//! Three memories spare the searches work they did before (`search.rs`,
//! `finger.rs`):
//! - an aligned search that found a fit leaves a bound below which no
//!   block holds one for its size and alignment (`Cleared`); every block
//!   gained below it that is long enough lowers it, and the next search of
//!   that shape starts there, past the near misses below. The bound keeps
//!   the path to its block's leaf: while no node has split, borrowed or
//!   merged since (the tree's `shape` count) and that leaf's first block
//!   starts at or below the bound, the next search starts in that leaf
//!   with no descent;
//! - a free's lookup of its neighbours keeps its path the same way
//!   ([`Neighbours`], the finger): while the shape count holds, the next
//!   lookup keeps that path from the root as far as its own key would go,
//!   checking two keys per level without waiting on a search, and descends
//!   only below (`BTree::redescend_below`); a balance turns it off for
//!   random keys;
//! - a search that found nothing is remembered until the blocks next
//!   change.
//!
//! A node's codes (`node::code`: four per doubling of the length, in
//! order with the lengths) are what the searches scan for a child or a
//! block long enough: sixteen bytes compared with the request's code in
//! two 64-bit words give every slot that may hold it, and the slot's own
//! length decides (a code equal to the request's may stand for a shorter
//! one). `check()` verifies every code.
//!
//! A request whose alignment every start already has (at most the granule
//! floor) is answered by the start of the first block long enough, where
//! that block lies in the window: the search then takes, at each level,
//! the first child whose longest block is long enough, with no key read,
//! no window test and no backing up (`BTree::plain_fit`); a block below
//! the window sends it to the general search.
//!
//! Best fit keeps a size index beside the tree (`by_size.rs`) and, for
//! blocks of up to 64 granules, exact length classes in the inner entries
//! (`classes.rs`): a short best fit is one bit scan and one descent.
//!
//! Leaves and inner nodes live in two pools of one kind each (`node.rs`);
//! released nodes are chained for reuse, so a steady state of inserts and
//! removals allocates no heap memory.

use crate::storage::{Fixed, Heap, Storage};
use node::{Inner, Leaf, Pool, NONE};
use search::{Cleared, Shape};
use size_tree::SizeTree;

mod by_size;
mod check;
mod classes;
mod entry;
mod finger;
mod node;
mod search;
mod size_tree;
mod update;
mod walk;

#[cfg(test)]
mod classes_tests;
#[cfg(test)]
mod codes_tests;
#[cfg(test)]
mod tests;

pub use finger::Neighbours;
pub use walk::Iter;

/// Blocks per leaf, at most (with [`FANOUT`], the sizes that measured
/// best on the bench's workloads: docs/bench-history.md). Both powers of
/// two, at most 32: the searches use fixed-step binary searches and `u64`
/// masks.
pub const LEAF_CAP: usize = 16;
/// Children per inner node, at most.
pub const FANOUT: usize = 16;
const _: () = assert!(LEAF_CAP.is_power_of_two() && LEAF_CAP <= 32);
const _: () = assert!(FANOUT.is_power_of_two() && FANOUT <= 32);
// The length codes are compared eight bytes a word (`node::may_reach`).
const _: () = assert!(LEAF_CAP >= 8 && FANOUT >= 8);
const LEAF_MIN: usize = LEAF_CAP / 2;
const INNER_MIN: usize = FANOUT / 2;
/// Inner levels, at most: `FANOUT / 2` children per node (2 at the root)
/// reach 2^32 leaves, every `u32` id, in 11 levels.
pub const MAX_HEIGHT: usize = 12;

/// A [`Neighbours`] version no tree reaches.
const NO_VERSION: u64 = u64::MAX;

/// Where a block is: the path from the root (`node[d]`, `slot[d]` for each
/// inner level `d`), the leaf and the index in it; or the wilderness.
#[derive(Debug, Clone, Copy)]
pub struct Pos {
    node: [u32; MAX_HEIGHT],
    slot: [u8; MAX_HEIGHT],
    leaf: u32,
    at: usize,
    wild: bool,
}

impl Default for Pos {
    fn default() -> Self {
        Pos::new()
    }
}

impl Pos {
    /// A position nowhere (filled by a search).
    pub const fn new() -> Self {
        Pos {
            node: [NONE; MAX_HEIGHT],
            slot: [0; MAX_HEIGHT],
            leaf: NONE,
            at: 0,
            wild: false,
        }
    }

    const fn wild() -> Self {
        let mut p = Pos::new();
        p.wild = true;
        p
    }

    /// Points at index `i` of `leaf`, not the wilderness.
    #[inline]
    fn set_leaf(&mut self, leaf: u32, i: usize) {
        self.leaf = leaf;
        self.at = i;
        self.wild = false;
    }
}

/// The free blocks of a range allocator, in an augmented B+tree (see the
/// [module docs](self)).
///
/// # Examples
/// (Compiled where the tree is public: with the `internals` feature.)
#[cfg_attr(feature = "internals", doc = "```")]
#[cfg_attr(not(feature = "internals"), doc = "```ignore")]
/// use mmkit::tree::btree::{BTree, Pos};
/// let mut t = BTree::new();
/// for (s, e) in [(0, 4), (10, 26), (40, 48)] {
///     t.insert(s, e);
/// }
/// let mut pos = Pos::new();
/// let addr = t.lowest_fit(8, 8, 0, 100, &mut pos).unwrap();
/// assert_eq!((t.get(&pos), addr), ((10, 26), 16));
/// t.check(0, 100).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct BTree<S: Storage = Heap> {
    leaves: Pool<Leaf, S>,
    inners: Pool<Inner, S>,
    /// The root: a leaf when `height == 0`.
    root: u32,
    /// Inner levels above the leaves.
    height: usize,
    /// Blocks in all, the wilderness included.
    len: usize,
    /// The highest block (`None` only when the tree is empty).
    wild: Option<(u64, u64)>,
    summaries: bool,
    /// Every start and end ever stored is a multiple of `2^floor`.
    floor: u32,
    /// Counts the changes to the blocks (see [`neighbours_near`](Self::neighbours_near)).
    version: u64,
    /// The last lowest-fit search that found nothing, and the version it
    /// searched (see [`lowest_fit`](Self::lowest_fit)).
    missed: (u64, Shape),
    /// While summaries are kept: the last lowest-fit search that found
    /// one, and a bound below which no block holds a fit for it (see
    /// [`lowest_fit`](Self::lowest_fit)).
    cleared: Cleared,
    /// Counts the changes to the nodes themselves (a split, a borrow or a
    /// merge of siblings): while it holds, every path found is still the
    /// way to its leaf, whatever blocks changed inside the leaves.
    shape: u64,
    /// The longest block in the nodes and the version it was read at
    /// (see [`may_hold_below`](Self::may_hold_below)).
    nodes_max: (u64, u64),
    /// The length classes of the blocks in the nodes and the version they
    /// were read at (see `classes.rs`).
    nodes_classes: (u64, u64),
    /// Once a best fit is asked for: every block as `(length, start)`,
    /// in nodes from the same pools (see `by_size.rs`).
    by_size: Option<SizeTree>,
    /// While the size index is kept and files only the longer blocks:
    /// the granule exponent of the length classes (see `classes.rs`); a
    /// byte, so that the tree's size stays that of its other fields.
    classes: Option<u8>,
}

impl Default for BTree {
    fn default() -> Self {
        Self::new()
    }
}

impl BTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::with_pools(Pool::with_root(), Pool::new())
    }
}

impl<const K: usize> BTree<Fixed<K>> {
    /// An empty tree whose nodes live in arrays of `K` of each kind (see
    /// [`crate::storage`]).
    pub const fn new_fixed() -> Self {
        Self::with_pools(Pool::fixed(1), Pool::fixed(0))
    }
}

impl<S: Storage> BTree<S> {
    /// An empty tree over `leaves`, which holds its root leaf (id 0), and
    /// `inners`.
    const fn with_pools(leaves: Pool<Leaf, S>, inners: Pool<Inner, S>) -> Self {
        BTree {
            leaves,
            inners,
            root: 0,
            height: 0,
            len: 0,
            wild: None,
            summaries: false,
            floor: 63,
            version: 0,
            missed: (NO_VERSION, Shape::NONE),
            cleared: Cleared::NONE,
            shape: 0,
            nodes_max: (NO_VERSION, 0),
            nodes_classes: (NO_VERSION, 0),
            by_size: None,
            classes: None,
        }
    }

    /// Whether `n` more blocks can go in with no node the storage lacks:
    /// for each, a leaf, and an inner node per level and a new root, for
    /// the splits; and what the best-fit indexes kept may take.
    #[inline]
    pub fn has_room_for_blocks(&self, n: usize) -> bool {
        let (l, i) = match self.by_size {
            None => (0, 0),
            Some(_) => self.index_room(0),
        };
        self.leaves.has_room(n * (1 + l)) && self.inners.has_room(n * (self.height + 1 + i))
    }

    /// Lets the nodes move to the heap when their arrays are full.
    pub fn allow_heap(&mut self) {
        self.leaves.allow_heap();
        self.inners.allow_heap();
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tree holds no block.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Heap bytes held (capacity, used or not).
    pub fn heap_bytes(&self) -> usize {
        self.leaves.heap_bytes() + self.inners.heap_bytes()
    }

    /// Bytes of the nodes in the tree (released ones and `Vec` slack
    /// excluded): the metadata its blocks need now.
    pub fn node_bytes(&self) -> usize {
        self.leaves.node_bytes() + self.inners.node_bytes()
    }

    /// Makes room for `n` more blocks than the tree holds now: no heap
    /// allocation while it holds at most that many. Every leaf but the
    /// root holds `LEAF_MIN` blocks or more and every inner node but the
    /// root `INNER_MIN` children or more, and released nodes are reused,
    /// so that bounds the nodes ever in use. Each best-fit index kept
    /// needs as many again.
    pub fn reserve(&mut self, n: usize) {
        let trees = 1 + usize::from(self.by_size.is_some());
        let leaves = (self.len + n) / LEAF_MIN + 1;
        let inners = leaves / (INNER_MIN - 1) + MAX_HEIGHT;
        self.leaves.reserve_total(trees * leaves);
        self.inners.reserve_total(trees * inners);
    }

    /// The granule floor: every start and end ever stored is a multiple of
    /// `2^floor`.
    pub fn granule_floor(&self) -> u32 {
        self.floor
    }

    /// `[s, e)` was added or grew, in the leaf `at` leads to (`None`: the
    /// wilderness): a fit for the remembered request may now start there.
    /// (Shrunk and moved blocks create no fit.)
    #[inline]
    fn gained_block(&mut self, s: u64, e: u64, at: Option<&Pos>) {
        let c = &mut self.cleared;
        if s < c.bound && e - s >= c.asked.size {
            c.bound = s;
            c.at = at.copied().unwrap_or(Pos::wild());
            c.shape = self.shape;
        }
    }

    #[inline]
    fn lower_floor(&mut self, s: u64, e: u64) {
        self.floor = self.floor.min(s.trailing_zeros()).min(e.trailing_zeros());
    }
}
