//! [`BTree`]: the free blocks of a range allocator in an augmented B+tree,
//! an alternative index to the AVL [`RangeTree`](super::RangeTree) that
//! reads a few wide nodes per search instead of one 56-byte node per level.
//!
//! ```text
//!   inner:  key[i]  lowest start below child i
//!           max[i]  longest block below child i
//!           sum[i]  AlignSummary below child i (kept once aligned requests need it)
//!           kid[i]  child index (an inner node or a leaf, by level)
//!   leaf:   start[i], size[i]: up to LEAF_CAP free blocks sorted by start
//!   (past a node's length: starts and keys u64::MAX, sizes and maxima 0)
//! ```
//!
//! Every leaf is at the same depth. A non-root leaf holds `LEAF_CAP / 2 ..=
//! LEAF_CAP` blocks and a non-root inner node `FANOUT / 2 ..= FANOUT`
//! children (a removal that underflows borrows from or merges with a
//! sibling), so a free block costs at most 264 / 8 bytes of leaf plus
//! 456 / 8 bytes of inner node per leaf: about 41 bytes, 24-28 at the
//! usual three-quarters occupancy, against the AVL tree's 56.
//!
//! As in the AVL tree, the highest block (the *wilderness*) is kept out of
//! the tree: allocations from the top of the used space touch no node.
//!
//! Searches return a [`Pos`], the path from the root (node and child slot
//! per level) to the block, and every update works bottom up along it,
//! recomputing each parent's entry for the child and stopping at the first
//! entry that comes out unchanged. A `Pos` is valid until the tree's next
//! change.
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
//!   summary is capped at the new longest block instead of recomputed;
//! - one that only grew them merges the summaries of the old set and the
//!   new block;
//! - anything else, or a shrink that lowered the longest block, recomputes
//!   from the children's (or the leaf's blocks').
//!
//! A search that enters a child its summary let through and finds no fit
//! there recomputes that child's summary (`tighten`), so each stale
//! summary costs one wasted visit at most. On `mmkit bench random-align`
//! at 10^4 live areas (callgrind) an allocation's search and update plus a
//! free's merge took about 5,200 instructions, against 7,200 with exact
//! summaries: the recomputations saved outweigh the searches sent into
//! stale subtrees. Capping a summary at a shrunken maximum instead of
//! recomputing it (also a valid bound) measured 5,400-5,800 when done at
//! every drop: looser bounds send more searches astray. Done only for
//! drops of at most two granules above the leaves, it costs random-align
//! 0.5-1.7% and saves `mmkit bench align-holes` 30% of its instructions
//! at 10^5 (a freed area merges with its alignment padding into the
//! longest block, and taking it back drops the maximum by the padding at
//! every level: 12,100 -> 8,450 instructions a pair); drops of 16 and 64
//! granules cost random-align more, 1 granule saves align-holes nothing.
//! [`BTree::check`] verifies the bound against the true usable lengths,
//! computed from the blocks at all 64 alignments.
//!
//! An aligned search that found a fit leaves a bound below which no block
//! holds one for its size and alignment (`Cleared`); every block gained
//! below it that is long enough lowers it, and the next search of that
//! shape starts there, at each level at the child holding the bound, so
//! it no longer checks the summaries of the near misses below one by one.
//! On `mmkit bench align-holes` at 10^5 holes that took a pair from 6,975
//! to 6,181 instructions. It is kept only while summaries are, but its
//! upkeep (a test per block gained, the scan's start found by key) costs
//! every search a little: random-size +1.4% at 10^3, random-align +1.0%
//! at 10^4 (instructions a pair).
//!
//! The bound also keeps the path to the leaf of its block (the search's
//! answer, or the block that lowered it). While no node has split,
//! borrowed or merged since (the tree's `shape` count) and that leaf's
//! first block starts at or below the bound, the next search starts in
//! that leaf and skips the descent: align-holes at 10^5, 5,963 -> 5,145
//! instructions a pair, for 96 bytes more per tree.
//!
//! A free's lookup of its neighbours keeps a path the same way
//! (`Neighbours`, the finger): while the shape count holds, the next
//! lookup keeps that path from the root as far as its own key would go,
//! checking two keys per level without waiting on a search, and descends
//! only below (`BTree::redescend_below`): align-holes at 10^5, 74 -> 52 ns a
//! pair, the working set sharing its lower levels; a balance turns it off
//! for random keys.
//!
//! A request whose alignment every start already has (at most the granule
//! floor) is answered by the start of the first block long enough, where
//! that block lies in the window: the search then takes, at each level,
//! the first child whose longest block is long enough, with no key read,
//! no window test and no backing up (`BTree::plain_fit`); a block below
//! the window sends it to the general search. Instructions a pair
//! (callgrind): `mmkit bench random-size` 1,987 -> 1,872 at 10^3 and
//! 2,701 -> 2,491 at 10^5, `fragmented` 1,999 -> 1,885 and 2,589 -> 2,360;
//! 5-15% faster in alternating runs.
//!
//! Nodes live in two vectors; released nodes are chained for reuse, so a
//! steady state of inserts and removals allocates no heap memory.

use alloc::vec::Vec;

use super::summary::{AlignSummary, Probe};
use crate::balance::Balance;
use crate::ensure;
use crate::error::CheckError;

/// Blocks per leaf, at most. 16 and 16 measured best (cachegrind: 8 or 32
/// per leaf, 8 or 32 per inner node all cost more instructions, misses or
/// mispredictions on the bench's workloads). Both powers of two, at most
/// 32: the searches use fixed-step binary searches and `u64` masks.
pub const LEAF_CAP: usize = 16;
/// Children per inner node, at most.
pub const FANOUT: usize = 16;
const _: () = assert!(LEAF_CAP.is_power_of_two() && LEAF_CAP <= 32);
const _: () = assert!(FANOUT.is_power_of_two() && FANOUT <= 32);
const LEAF_MIN: usize = LEAF_CAP / 2;
const INNER_MIN: usize = FANOUT / 2;
/// Inner levels, at most: `FANOUT / 2` children per node (2 at the root)
/// reach 2^32 leaves, every `u32` id, in 11 levels.
pub const MAX_HEIGHT: usize = 12;

/// "No node" in the free chains.
const NONE: u32 = u32::MAX;
/// The `len` of a released node.
const RELEASED: u32 = u32::MAX;
/// The largest drop of a node's longest block, in granules of its summary,
/// for which the summary is capped at the new longest block rather than
/// recomputed (see [`BTree::shrunk_sum`] and the module docs). Two: an
/// area taken back out of the block it had merged into with a one-granule
/// padding on each side (alignment to two granules).
const CAPPED_DROP: u64 = 2;

/// A [`Neighbours`] version no tree reaches.
const NO_VERSION: u64 = u64::MAX;

/// What a redescent that kept two levels or more earns, and what one that
/// did not loses (see [`BTree::redescend_below`]): while more than half
/// pay, it is tried at every free; otherwise about one free in seventeen
/// tries it again.
const ROUTE_PAID: i32 = 16;

/// A leaf: its blocks' starts in `start[..len]` and lengths in
/// `size[..len]` (lengths, not ends: a search and a leaf's longest block
/// read only the lengths, half the leaf). The slots past `len` are empty
/// (`start == u64::MAX`, `size == 0`), as an inner node's keys past its
/// `len` are `u64::MAX` and its maxima 0: lengths, maxima and key
/// searches then read whole arrays, with no mask per slot and no loop exit
/// to mispredict.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Leaf {
    /// Blocks held (`RELEASED` in the free chain, then `start[0]` links).
    /// First, in the cache line of the first starts.
    len: u32,
    start: [u64; LEAF_CAP],
    size: [u64; LEAF_CAP],
}

const EMPTY_LEAF: Leaf = Leaf {
    start: [u64::MAX; LEAF_CAP],
    size: [0; LEAF_CAP],
    len: 0,
};

impl Leaf {
    /// Block `i` as `(start, end)`.
    #[inline]
    fn block(&self, i: usize) -> (u64, u64) {
        (self.start[i], self.start[i] + self.size[i])
    }

    /// Makes block `i` `[s, e)`.
    #[inline]
    fn set(&mut self, i: usize, s: u64, e: u64) {
        self.start[i] = s;
        self.size[i] = e - s;
    }

    /// Empties slot `i`.
    #[inline]
    fn clear(&mut self, i: usize) {
        self.start[i] = u64::MAX;
        self.size[i] = 0;
    }
}

/// An inner node: entry `i < len` is child `kid[i]`'s lowest start, longest
/// block and summary; past `len`, `key` is `u64::MAX` and `max` 0 (see
/// `Leaf`).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Inner {
    /// Children held (`RELEASED` in the free chain, then `kid[0]` links).
    /// First, in the cache line of the first keys.
    len: u32,
    key: [u64; FANOUT],
    max: [u64; FANOUT],
    sum: [AlignSummary; FANOUT],
    kid: [u32; FANOUT],
}

const EMPTY_INNER: Inner = Inner {
    key: [u64::MAX; FANOUT],
    max: [0; FANOUT],
    sum: [AlignSummary::ZERO; FANOUT],
    kid: [NONE; FANOUT],
    len: 0,
};

/// What a parent keeps about a child: its lowest start, its longest block
/// and its alignment summary (the default while summaries are off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Agg {
    key: u64,
    max: u64,
    sum: AlignSummary,
}

/// How an update changed the blocks below a node, which decides how its
/// ancestors' summaries are refreshed (see [`BTree::propagate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Every block below is one that was there, or lies inside one that
    /// was (a block cut by an allocation, a block removed): no usable
    /// length grew.
    Shrank,
    /// Blocks were only added or extended (a free beside free space).
    Grew,
    /// Anything else (a merge that also removed a block, a split node).
    Other,
}

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

/// Where the block after a key is, for [`Neighbours`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
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
    pos: Pos,
    prev_wild: bool,
    next_at: Next,
    /// The tree's [`version`](BTree::version) when `pos` was found: while
    /// it holds, `pos`'s path is still the way to its leaf (a finger).
    version: u64,
    /// Whether that leaf was found to be the last (while `version` holds).
    last_leaf: bool,
    /// The tree's [`shape`](BTree::shape) when `pos` was found: while it
    /// holds, `pos` is still a path of the tree, whatever blocks changed.
    shape: u64,
    /// Whether descending from that path has paid lately (see
    /// [`BTree::redescend_below`]).
    route: Balance,
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
    fn holds_gap(&self, key: u64) -> bool {
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

/// A fit request: `size` bytes aligned to `2^k` in `[lo, hi)`.
#[derive(Debug, Clone, Copy)]
struct Request {
    prune: bool,
    size: u64,
    align: u64,
    k: u32,
    lo: u64,
    hi: u64,
    /// Reads `M_k` from the summaries of the tree's finest granule.
    probe: Probe,
}

impl Request {
    /// Whether a child with longest block `max` and summary `sum` may hold
    /// the request.
    #[inline]
    fn may_hold(&self, max: u64, sum: AlignSummary) -> bool {
        max >= self.size
            && (!self.prune
                || matches!(sum.usable_by(&self.probe, max, self.k), Some(u) if u >= self.size))
    }
}

/// A past search's request, as the tree remembers it: `size` aligned to
/// `align` in `[lo, hi)`.
#[derive(Debug, Clone, Copy)]
struct Shape {
    size: u64,
    align: u64,
    lo: u64,
    hi: u64,
}

impl Shape {
    /// Matches no request (none is `size` 0 with `hi` 0).
    const NONE: Shape = Shape {
        size: 0,
        align: 0,
        lo: 0,
        hi: 0,
    };

    #[inline]
    fn of(q: &Request) -> Shape {
        Shape {
            size: q.size,
            align: q.align,
            lo: q.lo,
            hi: q.hi,
        }
    }

    /// Whether every fit for `q` would also be one for this request: the
    /// same size and alignment in a window inside this one.
    #[inline]
    fn covers(&self, q: &Request) -> bool {
        self.size == q.size && self.align == q.align && self.lo <= q.lo && q.hi <= self.hi
    }
}

/// What the last successful aligned search proved: no block holds a fit
/// for `asked` that starts below `bound`. The search's answer at first;
/// every block gained since (added, grown or joined) that is long enough
/// for the request and starts below lowers `bound` to its start, since a
/// fit in it starts there or above and every other block is as it was or
/// shrunk. A later search for the same size and alignment in a window
/// inside `[lo, hi)` starts at `bound`, past the near misses below. Kept
/// only while summaries are (aligned requests): an unaligned search finds
/// its way by the maxima alone.
#[derive(Debug, Clone, Copy)]
struct Cleared {
    asked: Shape,
    bound: u64,
    /// The path to the leaf that held the block at `bound` when it was set
    /// (`wild`: none), good while the tree's [`shape`](BTree::shape) is
    /// `shape`: the next search may start in that leaf instead of
    /// descending to it (see [`BTree::start_leaf`]).
    at: Pos,
    shape: u64,
}

impl Cleared {
    /// Proves nothing.
    const NONE: Cleared = Cleared {
        asked: Shape::NONE,
        bound: 0,
        at: Pos::wild(),
        shape: 0,
    };
}

/// What a leaf scan found.
enum Scan {
    Found(usize, u64),
    /// Nothing here; later (or, searching down, earlier) blocks may fit.
    Miss,
    /// Nothing here or anywhere further in the search's direction.
    Stop,
}

/// In the sorted `keys` of a node (at least one; the empty slots after
/// them hold `u64::MAX`, below no key), the index of the last key below
/// `key`, or 0 if none, without a branch: a direction that is a coin flip
/// for random keys, and a loop that stops at the node's length
/// mispredicts its exit. Four-way steps: three independent comparisons
/// narrow the range to a quarter, so 16 keys take two dependent steps
/// instead of a binary search's four (each waits for the load the last
/// one chose). No mask by the node's length either: it lies in another
/// cache line than the keys it would mask.
#[inline]
fn last_below<const N: usize>(keys: &[u64; N], key: u64) -> usize {
    let mut base = 0;
    let mut span = N;
    while span >= 4 {
        let step = span / 4;
        let mut below = 0;
        for j in 1..4 {
            let m = base + j * step;
            below += usize::from(keys[m] < key);
        }
        base += below * step;
        span = step;
    }
    if span == 2 {
        let m = base + 1;
        base += usize::from(keys[m] < key);
    }
    base
}

/// Moves `a[i..n]` up one slot (`n < a.len()`). Nothing to move is common
/// (an insert at the end of a leaf, the root leaf of a near-empty tree):
/// tested first, it saves a `memmove` call.
#[inline]
fn open_gap(a: &mut [u64; LEAF_CAP], i: usize, n: usize) {
    if i < n {
        a.copy_within(i..n, i + 1);
    }
}

/// Moves `a[i + 1..n]` down one slot, over `a[i]`.
#[inline]
fn close_gap(a: &mut [u64; LEAF_CAP], i: usize, n: usize) {
    if i + 1 < n {
        a.copy_within(i + 1..n, i);
    }
}

/// The granule exponent of a range (as the summaries count it, uncapped).
#[inline]
fn granule(s: u64, e: u64) -> u32 {
    s.trailing_zeros().min(e.trailing_zeros())
}

/// The longest block of a leaf: all LEAF_CAP slots, so there is no loop
/// exit to mispredict (those from `len` on are empty: see `Leaf`).
#[inline]
fn leaf_max(l: &Leaf) -> u64 {
    max_of(&l.size)
}

/// Where the blocks below child `c` of `n` end, at most: the next child's
/// key, or for the last child `end`, the bound of the node's own blocks.
/// Every key is below `end` and every empty slot's is `u64::MAX`, so the
/// smaller of the two is the answer, without reading the node's length.
#[inline]
fn child_end(n: &Inner, c: usize, end: u64) -> u64 {
    n.key.get(c + 1).map_or(end, |&k| k.min(end))
}

/// The largest of `x`, in four independent chains of comparisons (in one
/// chain each waits for the last).
#[inline]
fn max_of<const N: usize>(x: &[u64; N]) -> u64 {
    let mut m = [0u64; 4];
    for c in x.chunks_exact(4) {
        for j in 0..4 {
            m[j] = m[j].max(c[j]);
        }
    }
    m[0].max(m[1]).max(m[2].max(m[3]))
}

/// Bit `i` set for each `x[i] >= min`, without branches: over whole
/// arrays, whose slots past their node's `len` hold 0 (see `Leaf`), which
/// no `min` of at least 1 counts. (Every block and every subtree is at
/// least 1 long, so raising `min` to 1 changes no other bit.)
#[inline]
fn at_least<const N: usize>(x: &[u64; N], min: u64) -> u64 {
    let min = min.max(1);
    let mut mask = 0;
    for (i, &v) in x.iter().enumerate() {
        mask |= u64::from(v >= min) << i;
    }
    mask
}

/// The highest `a` with `a % align == 0`, `lo <= a` and `a + size <= hi`.
#[inline]
fn top_fit(lo: u64, hi: u64, size: u64, align: u64) -> Option<u64> {
    let a = hi.checked_sub(size)? & !(align - 1);
    (lo < hi && a >= lo).then_some(a)
}

/// The free blocks of a range allocator, in an augmented B+tree (see the
/// [module docs](self)).
///
/// # Examples
/// ```
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
pub struct BTree {
    leaves: Vec<Leaf>,
    inners: Vec<Inner>,
    free_leaf: u32,
    free_inner: u32,
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
    /// Leaves and inner nodes in the tree (the rest are released).
    leaves_used: usize,
    inners_used: usize,
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
}

impl Default for BTree {
    fn default() -> Self {
        Self::new()
    }
}

impl BTree {
    /// An empty tree.
    pub fn new() -> Self {
        BTree {
            leaves: Vec::from([EMPTY_LEAF]),
            inners: Vec::new(),
            free_leaf: NONE,
            free_inner: NONE,
            root: 0,
            height: 0,
            len: 0,
            wild: None,
            summaries: false,
            floor: 63,
            leaves_used: 1,
            inners_used: 0,
            version: 0,
            missed: (NO_VERSION, Shape::NONE),
            cleared: Cleared::NONE,
            shape: 0,
            nodes_max: (NO_VERSION, 0),
        }
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
        self.leaves.capacity() * core::mem::size_of::<Leaf>()
            + self.inners.capacity() * core::mem::size_of::<Inner>()
    }

    /// Bytes of the nodes in the tree (released ones and `Vec` slack
    /// excluded): the metadata its blocks need now.
    pub fn node_bytes(&self) -> usize {
        self.leaves_used * core::mem::size_of::<Leaf>()
            + self.inners_used * core::mem::size_of::<Inner>()
    }

    /// Makes room for `n` more blocks than the tree holds now: no heap
    /// allocation while it holds at most that many. Every leaf but the
    /// root holds `LEAF_MIN` blocks or more and every inner node but the
    /// root `INNER_MIN` children or more, and released nodes are reused,
    /// so that bounds the nodes ever in use.
    pub fn reserve(&mut self, n: usize) {
        let leaves = (self.len + n) / LEAF_MIN + 1;
        let inners = leaves / (INNER_MIN - 1) + MAX_HEIGHT;
        self.leaves
            .reserve(leaves.saturating_sub(self.leaves.len()));
        self.inners
            .reserve(inners.saturating_sub(self.inners.len()));
    }

    /// The granule floor (see [`NodeArena::granule_floor`](super::NodeArena::granule_floor)).
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

    // ----- node storage -----

    fn alloc_leaf(&mut self) -> u32 {
        self.leaves_used += 1;
        if self.free_leaf != NONE {
            let id = self.free_leaf;
            self.free_leaf = self.leaves[id as usize].start[0] as u32;
            self.leaves[id as usize] = EMPTY_LEAF;
            id
        } else {
            self.leaves.push(EMPTY_LEAF);
            (self.leaves.len() - 1) as u32
        }
    }

    fn release_leaf(&mut self, id: u32) {
        self.leaves_used -= 1;
        let l = &mut self.leaves[id as usize];
        l.len = RELEASED;
        l.start[0] = u64::from(self.free_leaf);
        self.free_leaf = id;
    }

    fn alloc_inner(&mut self) -> u32 {
        self.inners_used += 1;
        if self.free_inner != NONE {
            let id = self.free_inner;
            self.free_inner = self.inners[id as usize].kid[0];
            self.inners[id as usize] = EMPTY_INNER;
            id
        } else {
            self.inners.push(EMPTY_INNER);
            (self.inners.len() - 1) as u32
        }
    }

    fn release_inner(&mut self, id: u32) {
        self.inners_used -= 1;
        let n = &mut self.inners[id as usize];
        n.len = RELEASED;
        n.kid[0] = self.free_inner;
        self.free_inner = id;
    }

    // ----- aggregates -----

    fn leaf_agg(&self, id: u32) -> Agg {
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
        }
    }

    fn leaf_sum(&self, id: u32, max: u64) -> AlignSummary {
        let l = &self.leaves[id as usize];
        let n = l.len as usize;
        AlignSummary::of_ranges(max, &l.start[..n], &l.size[..n])
    }

    fn inner_agg(&self, id: u32) -> Agg {
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
        }
    }

    /// The summary of node `id` (a leaf if `leafy`) whose longest block is
    /// `max`, recomputed from its blocks or its children's entries.
    fn node_sum(&self, id: u32, leafy: bool, max: u64) -> AlignSummary {
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
    fn shrunk_sum(o: &Agg, max: u64) -> Option<AlignSummary> {
        if max == o.max {
            Some(o.sum)
        } else if (o.max - max) >> o.sum.granule() <= CAPPED_DROP {
            Some(o.sum.capped(o.max, max))
        } else {
            None
        }
    }

    #[inline]
    fn agg(&self, id: u32, leaf: bool) -> Agg {
        if leaf {
            self.leaf_agg(id)
        } else {
            self.inner_agg(id)
        }
    }

    #[inline]
    fn entry(&self, p: u32, c: usize) -> Agg {
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
        }
    }

    #[inline]
    fn set_entry(&mut self, p: u32, c: usize, a: Agg) {
        let n = &mut self.inners[p as usize];
        n.key[c] = a.key;
        n.max[c] = a.max;
        n.sum[c] = a.sum;
    }

    /// The node at depth `d` of `pos` (the leaf at `d == height`).
    #[inline]
    fn node_at(&self, pos: &Pos, d: usize) -> u32 {
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
    fn refresh_from(&mut self, pos: &Pos, d: usize, how: Change) {
        if d == 0 {
            return;
        }
        let id = self.node_at(pos, d);
        let leafy = d == self.height;
        let a = if how == Change::Shrank && self.summaries {
            let o = self.entry(pos.node[d - 1], pos.slot[d - 1] as usize);
            let (key, max) = if leafy {
                let l = &self.leaves[id as usize];
                (l.start[0], leaf_max(l))
            } else {
                (self.inners[id as usize].key[0], self.inner_max(id))
            };
            let sum = if max == o.max {
                o.sum
            } else {
                self.node_sum(id, leafy, max)
            };
            Agg { key, max, sum }
        } else {
            self.agg(id, leafy)
        };
        self.propagate(pos, d, a, how);
    }

    /// The node at depth `d` of `pos` now has aggregate `a`, and nothing
    /// else below its parent changed: stores it in the parent and goes up
    /// while entries change. Each parent's new aggregate is derived from
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
    fn propagate(&mut self, pos: &Pos, mut d: usize, mut a: Agg, how: Change) {
        while d > 0 {
            let (p, c) = (pos.node[d - 1], pos.slot[d - 1] as usize);
            let o = self.entry(p, c);
            if o == a {
                return;
            }
            self.set_entry(p, c, a);
            if d == 1 {
                return; // p is the root
            }
            let po = self.entry(pos.node[d - 2], pos.slot[d - 2] as usize);
            let key = if c == 0 { a.key } else { po.key };
            let max = if a.max >= po.max {
                a.max
            } else if o.max < po.max {
                po.max
            } else {
                self.inner_max(p)
            };
            let unchanged = a.sum == o.sum && a.max == o.max;
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
            a = Agg { key, max, sum };
            d -= 1;
        }
    }

    fn inner_max(&self, id: u32) -> u64 {
        // All FANOUT slots, those from `len` on 0 (see `Leaf`): no loop
        // exit to mispredict.
        max_of(&self.inners[id as usize].max)
    }

    fn inner_sum(&self, id: u32, max: u64) -> AlignSummary {
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

    fn rebuild(&mut self, id: u32, d: usize) -> Agg {
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

    // ----- reads -----

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
    fn nodes_lowest_start(&self) -> u64 {
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
    #[inline]
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
    fn nodes_max_len(&self) -> u64 {
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
    fn descend_below(&self, key: u64) -> Pos {
        let mut pos = Pos::new();
        self.descend_below_into(key, &mut pos);
        pos
    }

    /// [`descend_below`](Self::descend_below), written into `pos` where
    /// the caller keeps it. A `Pos` filled field by field and then copied
    /// whole is read back with wide loads from narrow stores still in
    /// flight, which the processor cannot forward: perf put most of
    /// `neighbours`' samples on that copy, and filling in place made
    /// steady-page pairs 2-3% faster.
    #[inline]
    fn descend_below_into(&self, key: u64, pos: &mut Pos) {
        self.descend_from(self.root, 0, key, pos);
    }

    /// The rest of [`descend_below_into`](Self::descend_below_into) from
    /// node `at` at depth `d`, where `pos` already holds the path above.
    #[inline(always)]
    fn descend_from(&self, mut at: u32, d: usize, key: u64, pos: &mut Pos) {
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
    fn assert_descends_to(&self, key: u64, pos: &Pos) {
        let mut full = Pos::new();
        self.descend_below_into(key, &mut full);
        assert_eq!((full.leaf, full.at), (pos.leaf, pos.at));
        assert_eq!(full.node[..self.height], pos.node[..self.height]);
        assert_eq!(full.slot[..self.height], pos.slot[..self.height]);
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
    /// go back to plain descents (random-size at 10^5 live areas was 12%
    /// slower without it, fragmented at 10^3 2.5% when one level paid).
    #[inline]
    fn redescend_below(&self, key: u64, pos: &mut Pos) -> usize {
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

    /// Sets `pos.at` to the count of blocks of `pos.leaf` starting below
    /// `key`.
    #[inline]
    fn place_in_leaf(&self, key: u64, pos: &mut Pos) {
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
    fn branch_to_next(&self, pos: &Pos) -> Option<(usize, u32)> {
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
    fn next_leaf(&self, pos: &mut Pos) -> bool {
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
    fn leaf_after(&self, pos: &Pos) -> Option<u32> {
        let (d, mut kid) = self.branch_to_next(pos)?;
        for _ in d + 1..self.height {
            kid = self.inners[kid as usize].kid[0];
        }
        Some(kid)
    }

    /// The path to the last block of the tree (the wilderness excluded),
    /// `at` one past it.
    fn rightmost(&self) -> Pos {
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
    /// (see [`descend_below_into`](Self::descend_below_into)).
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
    #[inline]
    pub(crate) fn neighbours_near(&self, key: u64, nb: &mut Neighbours) {
        if nb.version == self.version && nb.holds_gap(key) {
            // Same tree, same gap between blocks: the same answer.
            debug_assert!(self.answers_alike(key, nb));
            return;
        }
        self.find_neighbours(key, nb);
    }

    /// Whether a lookup of `key` from nothing finds what `nb` holds.
    fn answers_alike(&self, key: u64, nb: &Neighbours) -> bool {
        let mut fresh = Neighbours::new();
        self.find_neighbours(key, &mut fresh);
        (fresh.prev, fresh.next, fresh.prev_wild, fresh.next_at)
            == (nb.prev, nb.next, nb.prev_wild, nb.next_at)
            && (fresh.pos.leaf, fresh.pos.at) == (nb.pos.leaf, nb.pos.at)
    }

    /// [`neighbours_near`](Self::neighbours_near) without the shortcut for
    /// a key in the gap found last: from the finger's leaf, down from as
    /// much of its path as still leads to the key, or by a descent.
    #[inline]
    fn find_neighbours(&self, key: u64, nb: &mut Neighbours) {
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
    fn finger_holds(&self, nb: &mut Neighbours, key: u64) -> bool {
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

    /// The blocks in address order.
    pub fn iter(&self) -> Iter<'_> {
        let mut pos = self.descend_below(0);
        pos.at = 0;
        Iter {
            t: self,
            pos,
            tree_done: false,
            wild: self.wild,
        }
    }

    // ----- searches -----

    /// The lowest `a` in `[lo, hi)`, a multiple of `align` (a power of two),
    /// with `[a, a + size)` inside one block; that block's position and `a`.
    /// `size > 0`.
    ///
    /// Each inner node is scanned for the first child whose longest block
    /// (and, once enabled, alignment summary) can hold the request and whose
    /// key range meets the window; a child that fails sends the scan on to
    /// the next. The scan starts at the child holding the window's start:
    /// the children before it end below the window.
    ///
    /// While summaries are kept, the last search that found a fit leaves a
    /// bound (see `Cleared`): no fit for its size and alignment starts below
    /// it, until a block long enough is gained below, which lowers it. The
    /// same request in the same or a narrower window starts there, past the
    /// wrongly aligned blocks below. (`mmkit bench align-holes`: holes long
    /// enough for the request but never aligned for it, below the areas it
    /// churns.)
    ///
    /// A search that finds nothing is remembered until the blocks next
    /// change: the same request in the same or a narrower window then
    /// fails at once. (`VmapAllocator`'s search below an isolated block
    /// asks that again and again while the blocks below it are all too
    /// short: the holes under `mmkit bench fix-size-holes`' working set.)
    ///
    /// # Complexity
    /// O(log n), plus near misses as for [`RangeTree::lowest_fit`](super::RangeTree::lowest_fit),
    /// amortized: a child entered because its summary was stale costs a
    /// scan and a recomputation once, and each update leaves at most one
    /// stale summary per level. O(1) for a request a failed one covers; a
    /// request a successful one covers pays only for the near misses
    /// above the bound it left.
    pub fn lowest_fit(
        &mut self,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
        pos: &mut Pos,
    ) -> Option<u64> {
        if lo >= hi || hi - lo < size {
            return None;
        }
        let q = self.request(size, align, lo, hi);
        if self.missed.0 == self.version && self.missed.1.covers(&q) {
            debug_assert!(self.len > 4096 || self.lowest_fit_linear(size, align, lo, hi).is_none());
            return None;
        }
        // No fit starts below the bound a search covering this one left:
        // the search starts there (each level at the child holding it).
        let mut from = q;
        let mut start = None;
        if self.summaries && self.cleared.asked.covers(&q) && self.cleared.bound > lo {
            from.lo = self.cleared.bound;
            if from.lo >= hi || hi - from.lo < size {
                return None;
            }
            start = self.start_leaf();
        }
        // (A remembered bound, the only source of `start`, raises `from.lo`.)
        let plain = if from.lo == lo {
            self.plain_fit(q, pos)
        } else {
            None
        };
        let found = plain
            .unwrap_or_else(|| self.fit_up(from, start, pos))
            .or_else(|| {
                let (s, e) = self.wild?;
                pos.wild = true;
                crate::range::fit_in(s.max(from.lo), e.min(hi), size, align)
            });
        debug_assert!(
            from.lo == lo
                || self.len > 4096
                || found == self.lowest_fit_linear(size, align, lo, hi),
            "a remembered bound hid the lowest fit"
        );
        match found {
            Some(a) if self.summaries => {
                self.cleared = Cleared {
                    asked: Shape::of(&q),
                    bound: a,
                    at: *pos,
                    shape: self.shape,
                }
            }
            Some(_) => {}
            None => self.missed = (self.version, Shape::of(&q)),
        }
        found
    }

    /// The lowest fit by a plain descent, when the request can take the
    /// start of the first block long enough: every start is a multiple of
    /// its alignment (`k` at most the granule floor) and that block starts
    /// inside the window. Each level takes its first child whose longest
    /// block is long enough, with no key read and no backing up; `None`
    /// when the general search must answer (the block starts below `lo`).
    #[inline]
    fn plain_fit(&self, q: Request, pos: &mut Pos) -> Option<Option<u64>> {
        if q.k > self.floor || self.height == 0 {
            return None;
        }
        let mut id = self.root;
        for d in 0..self.height {
            let n = &self.inners[id as usize];
            let m = at_least(&n.max, q.size);
            if m == 0 {
                return Some(None);
            }
            let c = m.trailing_zeros() as usize;
            pos.node[d] = id;
            pos.slot[d] = c as u8;
            id = n.kid[c];
        }
        let l = &self.leaves[id as usize];
        let i = at_least(&l.size, q.size).trailing_zeros() as usize;
        debug_assert!(i < LEAF_CAP, "a child's maximum was long enough");
        let s = l.start[i];
        if s < q.lo {
            return None;
        }
        pos.set_leaf(id, i);
        Some((s < q.hi && q.hi - s >= q.size).then_some(s))
    }

    /// The request both searches make: pruned by the summaries while they
    /// are kept, read through a probe for the tree's finest granule.
    #[inline]
    fn request(&self, size: u64, align: u64, lo: u64, hi: u64) -> Request {
        let k = align.trailing_zeros();
        Request {
            prune: self.summaries,
            size,
            align,
            k,
            lo,
            hi,
            probe: Probe::new(self.floor, k),
        }
    }

    /// The path to a leaf where a search starting at the cleared bound may
    /// begin, if the one remembered with the bound still serves: no node
    /// split, borrowed or merged since (so the path still leads to its
    /// leaf), and the leaf's first block starts at or below the bound. Then
    /// every block in the leaves before it ends by that start, below the
    /// bound, where no fit starts; a descent to the bound would reach this
    /// leaf or a later one.
    #[inline]
    fn start_leaf(&self) -> Option<Pos> {
        let c = &self.cleared;
        let ok = !c.at.wild
            && c.shape == self.shape
            && self.height > 0
            && self.leaves[c.at.leaf as usize].start[0] <= c.bound;
        ok.then_some(c.at)
    }

    /// The first child of inner `id` with blocks that may end past `lo`:
    /// those before the last child whose key is at most `lo` end by that
    /// key. One comparison when `lo` is below every block of the node.
    #[inline]
    fn first_past(&self, id: u32, lo: u64) -> u8 {
        let n = &self.inners[id as usize];
        if lo <= n.key[0] {
            return 0;
        }
        // `lo < hi`, so `lo + 1` does not wrap.
        last_below(&n.key, lo + 1) as u8
    }

    /// Scans leaf `id` upwards for the first block holding `q`. (Inlined
    /// at both calls: out of line, the call cost random-size 1.8% more
    /// instructions.)
    #[inline(always)]
    fn leaf_up(&self, id: u32, q: Request) -> Scan {
        let l = &self.leaves[id as usize];
        // The blocks long enough, found without a branch per block; a
        // block too high to hold the request ends the whole search, but
        // is only noticed at a candidate (the next node's key catches it
        // otherwise).
        let mut cand = at_least(&l.size, q.size);
        while cand != 0 {
            let i = cand.trailing_zeros() as usize;
            cand &= cand - 1;
            let (s, e) = l.block(i);
            if s >= q.hi || q.hi - s < q.size {
                return Scan::Stop;
            }
            if let Some(a) = crate::range::fit_in(s.max(q.lo), e.min(q.hi), q.size, q.align) {
                return Scan::Found(i, a);
            }
        }
        Scan::Miss
    }

    fn fit_up(&mut self, q: Request, start: Option<Pos>, pos: &mut Pos) -> Option<u64> {
        if self.height == 0 {
            // Only the root leaf may hold few blocks: scanned directly.
            let l = &self.leaves[self.root as usize];
            for i in 0..l.len as usize {
                let (s, e) = l.block(i);
                if let Some(a) = crate::range::fit_in(s.max(q.lo), e.min(q.hi), q.size, q.align) {
                    pos.set_leaf(self.root, i);
                    return Some(a);
                }
            }
            return None;
        }
        // Depth-first, children in address order: `pos.slot[d]` is the next
        // child to try at depth `d`, `ub[d]` the end bound of that node's
        // blocks (its next sibling's key).
        let mut ub = [u64::MAX; MAX_HEIGHT + 1];
        let mut d = 0;
        if let Some(at) = start {
            // From the leaf of a remembered path: the depth-first state as
            // a descent to it would have left it, the leaf scanned first.
            let h = self.height;
            pos.node[..h].copy_from_slice(&at.node[..h]);
            pos.slot[..h].copy_from_slice(&at.slot[..h]);
            for k in 0..h - 1 {
                let n = &self.inners[at.node[k] as usize];
                ub[k + 1] = child_end(n, at.slot[k] as usize, ub[k]);
            }
            d = h - 1;
            debug_assert_eq!(
                self.inners[at.node[d] as usize].kid[at.slot[d] as usize],
                at.leaf
            );
            match self.leaf_up(at.leaf, q) {
                Scan::Found(i, a) => {
                    pos.set_leaf(at.leaf, i);
                    return Some(a);
                }
                Scan::Stop => return None,
                Scan::Miss => pos.slot[d] += 1,
            }
        } else {
            pos.node[0] = self.root;
            pos.slot[0] = self.first_past(self.root, q.lo);
        }
        loop {
            let n = &self.inners[pos.node[d] as usize];
            let mut c = pos.slot[d] as usize;
            let mut go = None;
            // The maxima first, without a branch per child: they rule out
            // most children, and the keys (another cache line) are read
            // only for a candidate.
            let mut cand = at_least(&n.max, q.size) >> c << c;
            while cand != 0 {
                c = cand.trailing_zeros() as usize;
                cand &= cand - 1;
                if !q.may_hold(n.max[c], n.sum[c]) {
                    continue;
                }
                let key = n.key[c];
                if key >= q.hi || q.hi - key < q.size {
                    // This and every later block start too high.
                    return None;
                }
                let upper = child_end(n, c, ub[d]);
                // Blocks below child c end by `upper`.
                if upper > q.lo && upper - q.lo >= q.size {
                    go = Some((n.kid[c], upper));
                    break;
                }
            }
            let Some((kid, upper)) = go else {
                // Back up to the parent's next child.
                if d == 0 {
                    return None;
                }
                self.tighten(q, pos.node[d - 1], pos.slot[d - 1] as usize, false);
                d -= 1;
                pos.slot[d] += 1;
                continue;
            };
            pos.slot[d] = c as u8;
            if d + 1 == self.height {
                match self.leaf_up(kid, q) {
                    Scan::Found(i, a) => {
                        pos.set_leaf(kid, i);
                        return Some(a);
                    }
                    Scan::Stop => return None,
                    Scan::Miss => {
                        self.tighten(q, pos.node[d], c, true);
                        pos.slot[d] += 1;
                    }
                }
            } else {
                d += 1;
                pos.node[d] = kid;
                pos.slot[d] = self.first_past(kid, q.lo);
                ub[d] = upper;
            }
        }
    }

    /// Child `c` of inner node `p` was searched for `q` and held no fit:
    /// if its summary let `q` through (a summary kept as an upper bound
    /// after its blocks shrank), it is recomputed from the child's blocks
    /// or entries, so that no later search is sent there in vain for the
    /// same reason. Each stale summary is paid for once, by the search
    /// that finds it.
    fn tighten(&mut self, q: Request, p: u32, c: usize, leafy: bool) {
        let e = self.entry(p, c);
        if !q.prune || q.k <= e.sum.granule() {
            return; // the maximum let it through, and it is exact
        }
        let kid = self.inners[p as usize].kid[c];
        self.inners[p as usize].sum[c] = self.node_sum(kid, leafy, e.max);
    }

    /// The highest `a` in `[lo, hi)`, a multiple of `align`, with
    /// `[a, a + size)` inside one block: the mirror of
    /// [`lowest_fit`](Self::lowest_fit).
    pub fn highest_fit(
        &self,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
        pos: &mut Pos,
    ) -> Option<u64> {
        if lo >= hi || hi - lo < size {
            return None;
        }
        if let Some((s, e)) = self.wild {
            if let Some(a) = top_fit(s.max(lo), e.min(hi), size, align) {
                pos.wild = true;
                return Some(a);
            }
        }
        let q = self.request(size, align, lo, hi);
        self.fit_down(q, pos)
    }

    #[inline]
    fn leaf_down(&self, id: u32, q: Request) -> Scan {
        let l = &self.leaves[id as usize];
        for i in (0..l.len as usize).rev() {
            let (s, e) = l.block(i);
            if e <= q.lo || e - q.lo < q.size {
                return Scan::Stop;
            }
            if e - s >= q.size {
                if let Some(a) = top_fit(s.max(q.lo), e.min(q.hi), q.size, q.align) {
                    return Scan::Found(i, a);
                }
            }
        }
        Scan::Miss
    }

    fn fit_down(&self, q: Request, pos: &mut Pos) -> Option<u64> {
        if self.height == 0 {
            return match self.leaf_down(self.root, q) {
                Scan::Found(i, a) => {
                    pos.set_leaf(self.root, i);
                    Some(a)
                }
                _ => None,
            };
        }
        // As fit_up, children from the last: `left[d]` is one past the next
        // child to try at depth `d`.
        let mut ub = [u64::MAX; MAX_HEIGHT + 1];
        let mut left = [0usize; MAX_HEIGHT];
        let mut d = 0;
        pos.node[0] = self.root;
        left[0] = self.inners[self.root as usize].len as usize;
        loop {
            let n = &self.inners[pos.node[d] as usize];
            let mut go = None;
            while left[d] > 0 {
                let c = left[d] - 1;
                let upper = child_end(n, c, ub[d]);
                if upper <= q.lo || upper - q.lo < q.size {
                    // This and every earlier block end too low.
                    return None;
                }
                let key = n.key[c];
                if key < q.hi && q.hi - key >= q.size && q.may_hold(n.max[c], n.sum[c]) {
                    go = Some((c, upper));
                    break;
                }
                left[d] -= 1;
            }
            let Some((c, upper)) = go else {
                if d == 0 {
                    return None;
                }
                d -= 1;
                left[d] -= 1;
                continue;
            };
            pos.slot[d] = c as u8;
            let kid = n.kid[c];
            if d + 1 == self.height {
                match self.leaf_down(kid, q) {
                    Scan::Found(i, a) => {
                        pos.set_leaf(kid, i);
                        return Some(a);
                    }
                    Scan::Stop => return None,
                    Scan::Miss => left[d] -= 1,
                }
            } else {
                d += 1;
                pos.node[d] = kid;
                left[d] = self.inners[kid as usize].len as usize;
                ub[d] = upper;
            }
        }
    }

    /// The slow reference for [`lowest_fit`](Self::lowest_fit): the first
    /// block in address order that holds the request.
    pub fn lowest_fit_linear(&self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        self.iter()
            .find_map(|(s, e)| crate::range::fit_in(s.max(lo), e.min(hi), size, align))
    }

    /// The slow reference for [`highest_fit`](Self::highest_fit).
    pub fn highest_fit_linear(&self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        let all: Vec<(u64, u64)> = self.iter().collect();
        all.into_iter()
            .rev()
            .find_map(|(s, e)| top_fit(s.max(lo), e.min(hi), size, align))
    }

    // ----- updates -----

    /// Changes the block at `pos` to `[start, end)` in place: it must keep
    /// its place in address order and overlap no other block.
    ///
    /// # Complexity
    /// O(log n); stops at the first ancestor left unchanged.
    pub fn set_range_at(&mut self, pos: &Pos, start: u64, end: u64) {
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
        self.propagate(pos, h, Agg { key, max, sum }, how);
    }

    /// Cuts the block at `pos` in two: it becomes `[start, end)`, and
    /// `[ls, le)`, which lies between the block before and `start`, is
    /// inserted before it (an allocation inside a free block).
    pub fn split_at(&mut self, pos: &Pos, (ls, le): (u64, u64), start: u64, end: u64) {
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
        let (ps, _) = nb.prev.expect("a block before the key");
        let (_, ne) = nb.next.expect("a block after the key");
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
                    // it at every alignment), and its blocks need no rescan.
                    self.gained(&prev, prev.at, ps, ne);
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
    fn push_max(&mut self, s: u64, e: u64) {
        self.lower_floor(s, e);
        let pos = self.rightmost();
        self.leaf_insert(&pos, pos.at, s, e, true);
    }

    /// The wilderness left: the tree's highest block takes its place.
    fn refill_wild(&mut self) {
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
    fn leaf_insert(&mut self, pos: &Pos, i: usize, s: u64, e: u64, only_gained: bool) {
        let id = pos.leaf;
        let l = &mut self.leaves[id as usize];
        let n = l.len as usize;
        if n < LEAF_CAP {
            open_gap(&mut l.start, i, n);
            open_gap(&mut l.size, i, n);
            l.set(i, s, e);
            l.len += 1;
            if only_gained {
                return self.gained(pos, i, s, e);
            }
            // A block split in two: both parts lie inside it.
            return self.refresh_from(pos, self.height, Change::Shrank);
        }
        // Full: the upper half moves to a new right sibling.
        let r = self.alloc_leaf();
        let half = LEAF_CAP / 2;
        let left = self.leaves[id as usize];
        let rl = &mut self.leaves[r as usize];
        rl.start[..LEAF_CAP - half].copy_from_slice(&left.start[half..]);
        rl.size[..LEAF_CAP - half].copy_from_slice(&left.size[half..]);
        rl.len = (LEAF_CAP - half) as u32;
        let ll = &mut self.leaves[id as usize];
        ll.len = half as u32;
        ll.start[half..].fill(u64::MAX);
        ll.size[half..].fill(0);
        let (target, j) = if i <= half { (id, i) } else { (r, i - half) };
        let t = &mut self.leaves[target as usize];
        let n = t.len as usize;
        open_gap(&mut t.start, j, n);
        open_gap(&mut t.size, j, n);
        t.set(j, s, e);
        t.len += 1;
        self.insert_child(pos, self.height, r);
    }

    /// The leaf at `pos` gained `[s, e)` at index `i` and nothing else
    /// changed: its new aggregate comes from its old one (its entry in its
    /// parent) and the new block, and so does every ancestor's, since each
    /// set of blocks only gained one (a summary is a function of its set
    /// alone, so the union's is the merge: [`AlignSummary::merge`]). No
    /// rescan of the leaf's blocks or of any node's children: an aligned
    /// workload's padding holes are all such inserts.
    fn gained(&mut self, pos: &Pos, i: usize, s: u64, e: u64) {
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
        self.propagate(pos, d, Agg { key, max, sum }, Change::Grew);
    }

    /// The node at depth `d` of `pos` split; `right` is its new right
    /// sibling, to enter the parent after it.
    fn insert_child(&mut self, pos: &Pos, d: usize, right: u32) {
        self.shape += 1;
        let leafy = d == self.height;
        let left = self.node_at(pos, d);
        let (la, ra) = (self.agg(left, leafy), self.agg(right, leafy));
        if d == 0 {
            // The root split: a new root above both.
            let root = self.alloc_inner();
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
        let q = self.alloc_inner();
        let half = FANOUT / 2;
        let from = self.inners[p as usize];
        let qn = &mut self.inners[q as usize];
        let m = FANOUT - half;
        qn.key[..m].copy_from_slice(&from.key[half..]);
        qn.max[..m].copy_from_slice(&from.max[half..]);
        qn.sum[..m].copy_from_slice(&from.sum[half..]);
        qn.kid[..m].copy_from_slice(&from.kid[half..]);
        qn.len = m as u32;
        let pn = &mut self.inners[p as usize];
        pn.len = half as u32;
        pn.key[half..].fill(u64::MAX);
        pn.max[half..].fill(0);
        if c < half {
            self.inner_put(p, c + 1, right, ra);
        } else {
            self.inner_put(q, c + 1 - half, right, ra);
        }
        self.insert_child(pos, d - 1, q);
    }

    /// Inserts child `kid` with aggregate `a` at index `i` of inner `p`
    /// (which has room).
    fn inner_put(&mut self, p: u32, i: usize, kid: u32, a: Agg) {
        let n = &mut self.inners[p as usize];
        let len = n.len as usize;
        n.key.copy_within(i..len, i + 1);
        n.max.copy_within(i..len, i + 1);
        n.sum.copy_within(i..len, i + 1);
        n.kid.copy_within(i..len, i + 1);
        n.kid[i] = kid;
        n.len += 1;
        self.set_entry(p, i, a);
    }

    /// Removes index `i` of inner `p`.
    fn inner_take(&mut self, p: u32, i: usize) {
        let n = &mut self.inners[p as usize];
        let len = n.len as usize;
        n.key.copy_within(i + 1..len, i);
        n.max.copy_within(i + 1..len, i);
        n.sum.copy_within(i + 1..len, i);
        n.kid.copy_within(i + 1..len, i);
        n.key[len - 1] = u64::MAX;
        n.max[len - 1] = 0;
        n.len -= 1;
    }

    /// Removes the block at `pos` from its leaf (the count `len` is the
    /// caller's), rebalancing an underflow; `how` is what the whole update
    /// did to the leaf's blocks.
    fn leaf_remove(&mut self, pos: &Pos, how: Change) {
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
    fn leaf_cut(&mut self, pos: &Pos) -> bool {
        let l = &mut self.leaves[pos.leaf as usize];
        let n = l.len as usize;
        close_gap(&mut l.start, pos.at, n);
        close_gap(&mut l.size, pos.at, n);
        l.clear(n - 1);
        l.len -= 1;
        self.height == 0 || l.len as usize >= LEAF_MIN
    }

    /// The node at depth `d >= 1` of `pos` holds too few entries: it
    /// borrows from a sibling or merges with one.
    fn underflow(&mut self, pos: &Pos, d: usize, how: Change) {
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
                self.release_leaf(b);
            } else {
                self.release_inner(b);
            }
            let plen = self.inners[p as usize].len as usize;
            if d == 1 {
                if plen == 1 {
                    // The root has one child left: it becomes the root.
                    self.root = a;
                    self.height -= 1;
                    self.release_inner(p);
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
    fn leaf_balance(&mut self, a: u32, b: u32) -> bool {
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
            l.len = (to - from) as u32;
        }
        keep == total
    }

    /// [`leaf_balance`](Self::leaf_balance) for inner nodes.
    fn inner_balance(&mut self, a: u32, b: u32) -> bool {
        let (x, y) = (self.inners[a as usize], self.inners[b as usize]);
        let (na, nb) = (x.len as usize, y.len as usize);
        let total = na + nb;
        let keep = if total <= FANOUT { total } else { total / 2 };
        let mut all = [(0u64, 0u64, AlignSummary::ZERO, 0u32); 2 * FANOUT];
        let mut k = 0;
        for (n, len) in [(&x, na), (&y, nb)] {
            for i in 0..len {
                all[k] = (n.key[i], n.max[i], n.sum[i], n.kid[i]);
                k += 1;
            }
        }
        for (node, range) in [(a, 0..keep), (b, keep..total)] {
            let n = &mut self.inners[node as usize];
            n.key = [u64::MAX; FANOUT];
            n.max = [0; FANOUT];
            n.len = range.len() as u32;
            for (j, i) in range.enumerate() {
                (n.key[j], n.max[j], n.sum[j], n.kid[j]) = all[i];
            }
        }
        keep == total
    }

    // ----- checks -----

    /// Verifies order, non-overlap, every block inside `[lo, hi)`, the
    /// occupancy bounds, the uniform depth, every stored key and maximum,
    /// and (when on) that every summary is an upper bound of the true
    /// usable lengths below it at every alignment.
    ///
    /// # Errors
    /// A [`CheckError`] naming the first violation.
    pub fn check(&self, lo: u64, hi: u64) -> Result<(), CheckError> {
        let mut count = 0;
        let mut prev_end = None;
        self.check_node(self.root, 0, lo, hi, &mut count, &mut prev_end)?;
        ensure!(
            self.wild.is_some() || count == 0,
            Structure,
            "no wilderness with {count} blocks in the tree"
        );
        if let Some((s, e)) = self.wild {
            ensure!(s < e, Layout @ s, "empty wilderness at {s:#x}");
            ensure!(lo <= s && e <= hi, Bounds @ s, "wilderness outside the space");
            ensure!(
                prev_end.map_or(true, |pe| pe <= s),
                Layout @ s,
                "wilderness at {s:#x} not above every block"
            );
            ensure!(
                s.trailing_zeros().min(e.trailing_zeros()) >= self.floor,
                Hint @ s,
                "wilderness finer than the granule floor"
            );
            count += 1;
        }
        ensure!(
            count == self.len,
            Accounting,
            "{count} blocks, len says {}",
            self.len
        );
        let (mut leaves, mut inners) = (0, 0);
        self.count_nodes(self.root, 0, &mut leaves, &mut inners);
        ensure!(
            (leaves, inners) == (self.leaves_used, self.inners_used),
            Accounting,
            "{leaves} leaves and {inners} inner nodes reachable, counted ({}, {})",
            self.leaves_used,
            self.inners_used
        );
        let (c, q) = (&self.cleared, &self.cleared.asked);
        if q.size > 0 {
            let first = self.lowest_fit_linear(q.size, q.align, q.lo, q.hi);
            ensure!(
                first.map_or(true, |a| a >= c.bound),
                Hint @ c.bound,
                "a fit for {:#x} aligned to {:#x} at {:#x}, below the cleared bound {:#x}",
                q.size,
                q.align,
                first.unwrap_or(0),
                c.bound
            );
        }
        Ok(())
    }

    fn count_nodes(&self, id: u32, d: usize, leaves: &mut usize, inners: &mut usize) {
        if d == self.height {
            *leaves += 1;
            return;
        }
        *inners += 1;
        let n = &self.inners[id as usize];
        for &kid in &n.kid[..n.len as usize] {
            self.count_nodes(kid, d + 1, leaves, inners);
        }
    }

    /// Checks the subtree of node `id` at depth `d`; returns its aggregate
    /// recomputed and its true usable lengths.
    fn check_node(
        &self,
        id: u32,
        d: usize,
        lo: u64,
        hi: u64,
        count: &mut usize,
        prev_end: &mut Option<u64>,
    ) -> Result<(Agg, Usable), CheckError> {
        let root = d == 0;
        if d == self.height {
            let l = &self.leaves[id as usize];
            let n = l.len as usize;
            ensure!(
                n <= LEAF_CAP && (root || n >= LEAF_MIN),
                Structure,
                "leaf {id} holds {n} blocks"
            );
            ensure!(
                (n..LEAF_CAP).all(|i| l.start[i] == u64::MAX && l.size[i] == 0),
                Structure,
                "leaf {id} has a slot past its {n} blocks that is not empty"
            );
            let mut truth = [0; 64];
            for i in 0..n {
                let (s, size) = (l.start[i], l.size[i]);
                ensure!(size > 0, Layout @ s, "empty block at {s:#x}");
                let e = s.checked_add(size);
                ensure!(e.is_some(), Bounds @ s, "block at {s:#x} ends past u64::MAX");
                let e = e.unwrap_or(u64::MAX);
                ensure!(lo <= s && e <= hi, Bounds @ s, "block [{s:#x}, {e:#x}) outside the space");
                ensure!(
                    prev_end.map_or(true, |pe| pe <= s),
                    Layout @ s,
                    "blocks overlap or out of order at {s:#x}"
                );
                ensure!(
                    s.trailing_zeros().min(e.trailing_zeros()) >= self.floor,
                    Hint @ s,
                    "block at {s:#x} finer than the granule floor"
                );
                *prev_end = Some(e);
                for (k, t) in truth.iter_mut().enumerate() {
                    *t = (*t).max(usable_in(s, e, k as u32));
                }
            }
            *count += n;
            return Ok((self.leaf_agg(id), truth));
        }
        let nd = &self.inners[id as usize];
        let n = nd.len as usize;
        ensure!(
            n <= FANOUT && n >= if root { 2 } else { INNER_MIN },
            Structure,
            "inner node {id} holds {n} children"
        );
        ensure!(
            (n..FANOUT).all(|i| nd.key[i] == u64::MAX && nd.max[i] == 0),
            Structure,
            "inner node {id} has a key or a maximum past its {n} children"
        );
        let mut truth = [0; 64];
        for c in 0..n {
            let (a, t) = self.check_node(nd.kid[c], d + 1, lo, hi, count, prev_end)?;
            let stored = self.entry(id, c);
            ensure!(
                stored.key == a.key && stored.max == a.max,
                Hint @ a.key,
                "entry {c} of node {id}: key/max ({:#x}, {:#x}), recomputed ({:#x}, {:#x})",
                stored.key,
                stored.max,
                a.key,
                a.max
            );
            if self.summaries {
                // An upper bound is all pruning needs (see `propagate`).
                let k = (0..64u32)
                    .find(|&k| stored.sum.usable(stored.max, k).unwrap_or(0) < t[k as usize]);
                ensure!(
                    k.is_none(),
                    Hint @ a.key,
                    "entry {c} of node {id}: summary {:?} says less than the {:#x} usable at \
                     alignment 2^{}",
                    stored.sum,
                    t[k.unwrap_or(0) as usize],
                    k.unwrap_or(0)
                );
            }
            for (x, y) in truth.iter_mut().zip(t) {
                *x = (*x).max(y);
            }
        }
        Ok((self.inner_agg(id), truth))
    }
}

/// The longest usable length of a subtree at each alignment `2^k`, `k <
/// 64` (0 where none holds an aligned address): what a stored summary
/// must not undercut. Computed from the blocks by [`BTree::check`].
type Usable = [u64; 64];

/// The usable length of `[s, e)` at alignment `2^k`: `e` less `s` rounded
/// up to it, 0 if that is not below `e`.
fn usable_in(s: u64, e: u64, k: u32) -> u64 {
    let mask = (1u64 << k) - 1;
    match s.checked_add(mask) {
        Some(x) if x & !mask < e => e - (x & !mask),
        _ => 0,
    }
}

/// The blocks of a [`BTree`] in address order.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    t: &'a BTree,
    pos: Pos,
    tree_done: bool,
    wild: Option<(u64, u64)>,
}

impl Iterator for Iter<'_> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use alloc::format;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert a range at slot `i` of 64-byte slots, length `len`.
        Insert(u16, u8),
        Remove(u16),
        /// Shrink or grow the range in slot `i` within its slot.
        Resize(u16, u8),
        /// Lowest and highest fit: size, log2 align, window start, length.
        Fit(u8, u8, u16, u16),
    }

    fn op(slots: u16) -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..slots, 1..=64u8).prop_map(|(i, l)| Op::Insert(i, l)),
            1 => (0..slots).prop_map(Op::Remove),
            1 => (0..slots, 1..=64u8).prop_map(|(i, l)| Op::Resize(i, l)),
            2 => (1..=80u8, 0..24u8, any::<u16>(), any::<u16>())
                .prop_map(|(s, a, lo, len)| Op::Fit(s, a, lo, len)),
        ]
    }

    fn lowest(t: &mut BTree, size: u64, align: u64, lo: u64, hi: u64) -> Option<(Pos, u64)> {
        let mut pos = Pos::new();
        t.lowest_fit(size, align, lo, hi, &mut pos)
            .map(|a| (pos, a))
    }

    fn highest(t: &BTree, size: u64, align: u64, lo: u64, hi: u64) -> Option<(Pos, u64)> {
        let mut pos = Pos::new();
        t.highest_fit(size, align, lo, hi, &mut pos)
            .map(|a| (pos, a))
    }

    fn fail(e: CheckError) -> TestCaseError {
        TestCaseError::fail(format!("{e}"))
    }

    /// Runs `ops` against a BTreeMap model with addresses `base + (x <<
    /// shift)`; every fit agrees with the model's scan.
    fn run_model(
        shift: u32,
        base: u64,
        ops: &[Op],
        check_every: usize,
    ) -> Result<(), TestCaseError> {
        let mut t = BTree::new();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let addr = |x: u64| base.saturating_add(x << shift);
        for (step, op) in ops.iter().enumerate() {
            match *op {
                Op::Insert(i, len) => {
                    let s = addr(u64::from(i) * 64);
                    let e = s + (u64::from(len) << shift);
                    if let alloc::collections::btree_map::Entry::Vacant(v) = model.entry(s) {
                        t.insert(s, e);
                        v.insert(e);
                    }
                }
                Op::Remove(i) => {
                    let s = addr(u64::from(i) * 64);
                    prop_assert_eq!(t.remove(s), model.remove(&s).is_some());
                }
                Op::Resize(i, len) => {
                    let s = addr(u64::from(i) * 64);
                    let e = s + (u64::from(len) << shift);
                    if let Some(v) = model.get_mut(&s) {
                        let pos = t.find(s).expect("in the tree");
                        prop_assert_eq!(t.get(&pos).0, s);
                        t.set_range_at(&pos, s, e);
                        *v = e;
                    }
                }
                Op::Fit(size, a, lo, len) => {
                    let (size, align) = (u64::from(size) << shift, 1u64 << a);
                    let lo = addr(u64::from(lo) * 32);
                    let hi = lo.saturating_add(u64::from(len) << (shift + 5));
                    let want = model.iter().find_map(|(&s, &e)| {
                        crate::range::fit_in(s.max(lo), e.min(hi), size, align)
                    });
                    let want_top = model
                        .iter()
                        .rev()
                        .find_map(|(&s, &e)| top_fit(s.max(lo), e.min(hi), size, align));
                    if a % 3 != 0 {
                        t.enable_summaries(align);
                    }
                    let got = lowest(&mut t, size, align, lo, hi);
                    prop_assert_eq!(got.map(|g| g.1), want);
                    if let Some((pos, a)) = got {
                        let (s, e) = t.get(&pos);
                        prop_assert!(s <= a && a + size <= e);
                    }
                    let got = highest(&t, size, align, lo, hi);
                    prop_assert_eq!(got.map(|g| g.1), want_top);
                    if let Some((pos, a)) = got {
                        let (s, e) = t.get(&pos);
                        prop_assert!(s <= a && a + size <= e);
                    }
                    prop_assert_eq!(t.lowest_fit_linear(size, align, lo, hi), want);
                }
            }
            if step % check_every == 0 || step + 1 == ops.len() {
                t.check(base, u64::MAX).map_err(fail)?;
                let first = t.iter().next().map_or(u64::MAX, |b| b.0);
                prop_assert_eq!(t.lowest_start(), first);
                prop_assert_eq!(t.len(), model.len());
                let got: Vec<(u64, u64)> = t.iter().collect();
                let want: Vec<(u64, u64)> = model.iter().map(|(&s, &e)| (s, e)).collect();
                prop_assert_eq!(got, want);
                prop_assert_eq!(
                    t.max_len(),
                    model.iter().map(|(s, e)| e - s).max().unwrap_or(0)
                );
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Small trees (a few leaves), checked after every step.
        #[test]
        fn small_tree_matches_model(shift in 0u32..14, ops in proptest::collection::vec(op(300), 1..400)) {
            run_model(shift, 0, &ops, 1)?;
        }

        /// Three levels and more: splits, borrows and merges of inner nodes.
        #[test]
        fn deep_tree_matches_model(shift in 0u32..12, ops in proptest::collection::vec(op(8000), 1..6000)) {
            run_model(shift, 0, &ops, 97)?;
        }

        /// Addresses just below `u64::MAX`: no overflow in any bound.
        #[test]
        fn top_of_the_space(shift in 0u32..4, ops in proptest::collection::vec(op(2000), 1..1500)) {
            let base = u64::MAX - (2000 * 64 + 200) * (1 << shift) - 4096;
            run_model(shift, base, &ops, 13)?;
        }
    }

    /// A range allocator over the tree, as `VmapAllocator` drives it (fits
    /// cut by position; frees merged through `neighbours`), against a
    /// sorted list of free ranges. Requests are 1 to `sizes` units long,
    /// aligned (when `aligned`) to one of the first `aligns` powers of two
    /// of the unit.
    #[allow(clippy::too_many_arguments)]
    fn churn(
        (lo, hi): (u64, u64),
        seed: u64,
        steps: usize,
        aligned: bool,
        (sizes, aligns): (u64, u64),
        shift: u32,
        check_every: usize,
    ) -> Result<usize, TestCaseError> {
        let mut rnd = crate::testkit::xorshift(seed | 1);
        let mut t = BTree::new();
        t.insert(lo, hi);
        let mut model: Vec<(u64, u64)> = Vec::from([(lo, hi)]);
        let mut live: Vec<(u64, u64)> = Vec::new();
        let span = hi - lo;
        let mut max_height = 0;
        for step in 0..steps {
            if rnd() % 5 < 3 || live.is_empty() {
                let size = (rnd() % sizes + 1) << shift;
                let align = if aligned {
                    1u64 << (shift + (rnd() % aligns) as u32)
                } else {
                    1 << shift
                };
                let (ws, we) = if rnd() % 4 == 0 {
                    let ws = (lo + rnd() % span) >> shift << shift;
                    (ws, ws.saturating_add(rnd() % span + 1).min(hi))
                } else {
                    (lo, hi)
                };
                let top = rnd() % 8 == 0;
                t.enable_summaries(align);
                let want = if top {
                    model
                        .iter()
                        .rev()
                        .find_map(|&(s, e)| top_fit(s.max(ws), e.min(we), size, align))
                } else {
                    model
                        .iter()
                        .find_map(|&(s, e)| crate::range::fit_in(s.max(ws), e.min(we), size, align))
                };
                let got = if top {
                    highest(&t, size, align, ws, we)
                } else {
                    lowest(&mut t, size, align, ws, we)
                };
                prop_assert_eq!(got.map(|g| g.1), want);
                if let Some((pos, a)) = got {
                    let (s, e) = t.get(&pos);
                    match (a == s, a + size == e) {
                        (true, true) => t.remove_at(&pos),
                        (true, false) => t.set_range_at(&pos, a + size, e),
                        (false, true) => t.set_range_at(&pos, s, a),
                        (false, false) => t.split_at(&pos, (s, a), a + size, e),
                    }
                    crate::testkit::model_take(&mut model, a, size);
                    live.push((a, a + size));
                }
            } else {
                let (s, e) = live.swap_remove((rnd() % live.len() as u64) as usize);
                let nb = t.neighbours(s);
                let joins_prev = nb.prev.is_some_and(|p| p.1 == s);
                let joins_next = nb.next.is_some_and(|n| n.0 == e);
                match (joins_prev, joins_next) {
                    (true, true) => t.merge(&nb),
                    (true, false) => t.grow_prev(&nb, e),
                    (false, true) => t.grow_next(&nb, s),
                    (false, false) => t.insert_at(&nb, s, e),
                }
                crate::testkit::model_free(&mut model, s, e);
            }
            if step % check_every == 0 || step + 1 == steps {
                t.check(lo, hi).map_err(fail)?;
                let got: Vec<(u64, u64)> = t.iter().collect();
                prop_assert_eq!(&got, &model);
                max_height = max_height.max(t.height);
            }
        }
        Ok(max_height)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn allocator_churn_matches_model(
            seed in any::<u64>(),
            aligned in any::<bool>(),
            top in any::<bool>(),
            shift in prop_oneof![Just(0u32), Just(4), Just(12)],
        ) {
            let space = 1u64 << (shift + 20);
            let (lo, hi) = if top { (u64::MAX - space, u64::MAX) } else { (0, space) };
            churn((lo, hi), seed, 4000, aligned, (16, 8), shift, 50)?;
        }

        /// Few request shapes, so that a search often repeats the last
        /// one's size and alignment and starts at the bound it left
        /// (`Cleared`); frees below that bound must lower it.
        #[test]
        fn repeated_aligned_requests_match_model(
            seed in any::<u64>(),
            sizes in 1u64..4,
            aligns in 2u64..4,
            shift in prop_oneof![Just(0u32), Just(12)],
        ) {
            churn((0, 1 << (shift + 16)), seed, 4000, true, (sizes, aligns), shift, 50)?;
        }
    }

    /// Each way a block can be gained below the bound a search left lowers
    /// it: an insert, a block grown, and joins in one leaf, across leaves
    /// and into the wilderness.
    #[test]
    fn gained_blocks_lower_the_cleared_bound() {
        // Blocks of 1 unit at 10, 20, ..: too short for 3 units aligned to
        // 2; the wilderness from 5000 holds the first fit, at 5000.
        let fresh = || {
            let mut t = BTree::new();
            for i in 1..400u64 {
                t.insert(i * 10, i * 10 + 1);
            }
            t.insert(5000, 10_000);
            t.enable_summaries(2);
            assert_eq!(lowest(&mut t, 3, 2, 0, 10_000).map(|g| g.1), Some(5000));
            t
        };
        let expect = |t: &mut BTree, want: u64| {
            assert_eq!(lowest(t, 3, 2, 0, 10_000).map(|g| g.1), Some(want));
            assert_eq!(t.lowest_fit_linear(3, 2, 0, 10_000), Some(want));
            t.check(0, 10_000).unwrap();
        };
        // An insert.
        let mut t = fresh();
        t.insert(1001, 1006);
        expect(&mut t, 1002);
        // A block grown in place.
        let mut t = fresh();
        let pos = t.find(1000).unwrap();
        t.set_range_at(&pos, 1000, 1003);
        expect(&mut t, 1000);
        // Two blocks joined, in one leaf and across leaves: every pair.
        let (mut here, mut across) = (0, 0);
        for k in (10..3990).step_by(10) {
            let mut t = fresh();
            let nb = t.neighbours(k + 1);
            assert_eq!(
                (nb.prev, nb.next),
                (Some((k, k + 1)), Some((k + 10, k + 11)))
            );
            match nb.next_at {
                Next::Here => here += 1,
                Next::Leaf => across += 1,
                _ => unreachable!(),
            }
            t.merge(&nb);
            expect(&mut t, k);
        }
        assert!(
            here > 0 && across > 0,
            "{here} joins in a leaf, {across} across"
        );
        // A block joined with the wilderness.
        let mut t = fresh();
        let nb = t.neighbours(3991);
        assert_eq!(nb.next, Some((5000, 10_000)));
        t.merge(&nb);
        expect(&mut t, 3990);
    }

    /// A search that starts at the cleared bound begins in the leaf of the
    /// bound's block while no node changed, but not once that leaf's first
    /// block starts above the bound: a fit at the bound then lives in the
    /// leaf before.
    #[test]
    fn a_remembered_leaf_serves_only_while_it_starts_by_the_bound() {
        // Blocks of 1 unit at 4i + 1: too short for 2 units aligned to 2.
        let mut t = BTree::new();
        for i in 0..64u64 {
            t.insert(4 * i + 1, 4 * i + 2);
        }
        t.insert(1000, 2000);
        t.enable_summaries(2);
        // Two neighbouring leaves, the second (`l`) given a ninth block so
        // that it can lose its first without underflowing.
        let start_of = |t: &BTree, leaf: u32| t.leaves[leaf as usize].start[0];
        let p = t
            .find(start_of(&t, t.find(1).unwrap().leaf) + 4 * 8)
            .unwrap()
            .leaf;
        let l = t.find(start_of(&t, p) + 4 * 8).unwrap().leaf;
        assert_ne!(p, l);
        let s0 = start_of(&t, l);
        t.insert(s0 + 4 * 3 + 2, s0 + 4 * 3 + 3);
        assert_eq!(t.leaves[l as usize].len as usize, LEAF_MIN + 1);
        // Its first block grows to hold the request at s0 + 1: the answer,
        // and the bound, with the path to `l`.
        let pos = t.find(s0).unwrap();
        t.set_range_at(&pos, s0, s0 + 3);
        let mut pos = Pos::new();
        assert_eq!(t.lowest_fit(2, 2, 0, 2000, &mut pos), Some(s0 + 1));
        assert_eq!((pos.leaf, t.cleared.bound), (l, s0 + 1));
        let shape = t.shape;
        // The same request again starts in `l`.
        assert_eq!(t.start_leaf().map(|at| at.leaf), Some(l));
        // That block goes; a fit at the bound comes back, in the leaf before
        // (`l` now starts above it), without lowering the bound.
        assert!(t.remove(s0));
        t.insert(s0 + 1, s0 + 3);
        assert_eq!(t.find(s0 + 1).unwrap().leaf, p);
        assert_eq!(
            (t.shape, t.cleared.bound, t.cleared.at.leaf),
            (shape, s0 + 1, l)
        );
        assert!(t.start_leaf().is_none());
        assert_eq!(t.lowest_fit(2, 2, 0, 2000, &mut pos), Some(s0 + 1));
        t.check(0, 2000).unwrap();
    }

    /// Three and more levels, aligned requests (summaries on) and windows.
    #[test]
    fn deep_allocator_churn() {
        let h = churn((0, 1 << 36), 7, 60_000, true, (16, 8), 12, 2_000).unwrap();
        assert!(h >= 3, "height {h}");
        let h = churn(
            (u64::MAX - (1 << 30), u64::MAX),
            11,
            60_000,
            false,
            (16, 8),
            4,
            2_000,
        )
        .unwrap();
        assert!(h >= 3, "height {h}");
    }

    #[test]
    fn containing_and_neighbours() {
        let mut t = BTree::new();
        for i in 0..1000u64 {
            t.insert(i * 100 + 10, i * 100 + 20);
        }
        t.check(0, u64::MAX).unwrap();
        assert_eq!(t.containing(19), Some((10, 20)));
        assert_eq!(t.containing(20), None);
        assert_eq!(t.containing(5), None);
        assert_eq!(t.containing(99_915), Some((99_910, 99_920)));
        let nb = t.neighbours(25);
        assert_eq!((nb.prev, nb.next), (Some((10, 20)), Some((110, 120))));
        let nb = t.neighbours(5);
        assert_eq!((nb.prev, nb.next), (None, Some((10, 20))));
        let nb = t.neighbours(1_000_000);
        assert_eq!((nb.prev, nb.next), (Some((99_910, 99_920)), None));
        // One `Neighbours` reused for every key: each lookup replaces all of it.
        let mut into = t.neighbours(1_000_000);
        for k in (0..100_000).step_by(7) {
            let nb = t.neighbours(k);
            let prev = t.iter().filter(|r| r.0 < k).last();
            let next = t.iter().find(|r| r.0 >= k);
            assert_eq!((nb.prev, nb.next), (prev, next), "key {k}");
            t.neighbours_into(k, &mut into);
            assert_eq!(format!("{into:?}"), format!("{nb:?}"), "key {k}");
        }
        // One found in another tree of the same shape count: nothing of
        // its path is used either.
        let mut other = BTree::new();
        for i in 0..1000u64 {
            other.insert(i * 10 + 5_000_000, i * 10 + 5_000_001);
        }
        assert_eq!(other.shape, t.shape);
        let mut foreign = other.neighbours(5_005_000);
        t.neighbours_into(55_515, &mut foreign);
        assert_eq!(
            format!("{foreign:?}"),
            format!("{:?}", t.neighbours(55_515))
        );
        for i in 0..1000u64 {
            assert!(t.remove(i * 100 + 10));
            if i % 37 == 0 {
                t.check(0, u64::MAX).unwrap();
            }
        }
        assert!(t.is_empty());
        t.check(0, u64::MAX).unwrap();
    }

    /// One-unit blocks at every 4th unit below 4000 (a tree of several
    /// levels) and the wilderness `[10_000, 20_000)`.
    fn units_below_4000_and_a_wilderness() -> BTree {
        let mut t = BTree::new();
        for i in 0..1000u64 {
            t.insert(i * 4, i * 4 + 1);
        }
        t.insert(10_000, 20_000);
        t
    }

    /// A failed search is remembered only for requests it covers (same
    /// size and alignment, a window inside its own) and only until the
    /// blocks change.
    #[test]
    fn a_failed_search_answers_only_what_it_covers() {
        // One-unit blocks at every 4th unit below 4000, a 3-unit one at
        // 5000, the wilderness from 10_000.
        let mut t = units_below_4000_and_a_wilderness();
        t.insert(5000, 5003);
        let mut pos = Pos::new();
        let mut fit =
            |t: &mut BTree, size, align, lo, hi| t.lowest_fit(size, align, lo, hi, &mut pos);
        assert_eq!(fit(&mut t, 3, 1, 0, 4000), None);
        assert_eq!(fit(&mut t, 3, 1, 0, 4000), None);
        assert_eq!(fit(&mut t, 3, 1, 100, 3000), None); // covered
        assert_eq!(fit(&mut t, 3, 1, 0, 6000), Some(5000)); // a wider window
        assert_eq!(fit(&mut t, 3, 1, 0, 4000), None);
        assert_eq!(fit(&mut t, 1, 1, 0, 4000), Some(0)); // another size
        assert_eq!(fit(&mut t, 3, 1, 0, 4000), None);
        assert_eq!(fit(&mut t, 1, 2, 1, 4000), Some(4)); // another alignment
        assert_eq!(fit(&mut t, 3, 1, 0, 4000), None);
        // A change: the block at 2000 grows to three units.
        let p = t.find(2000).unwrap();
        t.set_range_at(&p, 2000, 2003);
        assert_eq!(fit(&mut t, 3, 1, 0, 4000), Some(2000));
        t.check(0, u64::MAX).unwrap();
    }

    /// The root's longest block, kept between calls of `may_hold_below`,
    /// is read again after every kind of change: a block grown, split,
    /// removed, merged or inserted, the longest one included.
    #[test]
    fn may_hold_below_sees_every_change_to_the_longest_block() {
        // Several levels; the wilderness above every bound asked.
        let mut t = units_below_4000_and_a_wilderness();
        assert!(t.may_hold_below(5000, 1));
        assert!(!t.may_hold_below(5000, 2));
        // Asked again of the same tree: from the kept value.
        assert!(!t.may_hold_below(5000, 2));
        // Grown in place: three units at 2000.
        let p = t.find(2000).unwrap();
        t.set_range_at(&p, 2000, 2003);
        assert!(t.may_hold_below(5000, 3));
        assert!(!t.may_hold_below(5000, 4));
        // Split by an allocation of its middle unit: none of two.
        let p = t.find(2000).unwrap();
        t.split_at(&p, (2000, 2001), 2002, 2003);
        assert!(!t.may_hold_below(5000, 2));
        // That unit freed: merged with both sides into three units again.
        let nb = t.neighbours(2001);
        t.merge(&nb);
        assert!(t.may_hold_below(5000, 3));
        // Removed: none of two again; a new long block below the bound.
        assert!(t.remove(2000));
        assert!(!t.may_hold_below(5000, 2));
        t.insert(4500, 4600);
        assert!(t.may_hold_below(5000, 100));
        t.check(0, u64::MAX).unwrap();
    }

    /// A kept `Neighbours` (the finger) answers as a fresh descent does:
    /// runs of lookups near the last one, with no change between (read
    /// from the leaf), after blocks changed in unchanged nodes (down from
    /// the finger's path as far as it still leads), and after splits and
    /// merges (the shape sends them down from the root). Debug builds
    /// also compare every answer from a finger with a full descent.
    #[test]
    fn finger_answers_as_a_descent_does() {
        let mut rnd = crate::testkit::xorshift(0x9e37_79b9_7f4a_7c15);
        let mut t = BTree::new();
        let mut nb = Neighbours::new();
        let mut key = 0;
        let (mut hits, mut redescents, mut max_height) = (0, 0, 0);
        for step in 0..60_000u64 {
            let r = rnd();
            if step % 4 == 0 {
                // Changes: a block at a random free slot of 64, or one gone.
                let s = (r >> 8) % 20_000 * 64;
                if t.find(s).is_some() {
                    t.remove(s);
                } else if t.containing(s).is_none() {
                    t.insert(s, s + 32);
                }
            }
            // Near the last key mostly (the same leaf), anywhere or above
            // every block at times; keys on, between and beyond the
            // blocks, down to 0.
            key = match r % 8 {
                0 => r >> 44,
                // Above every block (frees above holes): the last leaf.
                1 | 2 => 1_300_000 + (r >> 50),
                _ => (key + (r >> 60) * 20).saturating_sub(150),
            };
            let current = nb.version == t.version && t.finger_holds(&mut nb.clone(), key);
            hits += usize::from(current);
            redescents += usize::from(!current && nb.shape == t.shape);
            t.neighbours_near(key, &mut nb);
            let fresh = t.neighbours(key);
            let found =
                |n: &Neighbours| format!("{:?}", (n.prev, n.next, n.pos, n.prev_wild, n.next_at));
            assert_eq!(found(&nb), found(&fresh), "key {key} step {step}");
            max_height = max_height.max(t.height);
        }
        t.check(0, u64::MAX).unwrap();
        assert!(max_height >= 3, "height {max_height}");
        assert!(hits > 10_000, "{hits} lookups from a current finger");
        assert!(
            redescents > 5_000,
            "{redescents} lookups with a path to keep"
        );
    }
}

#[cfg(test)]
mod deep {
    use super::*;
    use alloc::collections::BTreeMap;

    /// Grows to four inner levels and shrinks back to one leaf, through
    /// every split, borrow, merge and root change, against a model.
    #[test]
    fn grow_and_shrink_through_every_level() {
        let mut rnd = crate::testkit::xorshift(0x2545f4914f6cdd1du64);
        let mut t = BTree::new();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut max_height = 0;
        for phase in 0..2 {
            for step in 0..120_000u64 {
                let slot = rnd() % 200_000;
                let s = slot * 64;
                let insert = if phase == 0 {
                    rnd() % 4 != 0
                } else {
                    rnd() % 4 == 0
                };
                if insert {
                    if let alloc::collections::btree_map::Entry::Vacant(v) = model.entry(s) {
                        let e = s + 1 + rnd() % 63;
                        t.insert(s, e);
                        v.insert(e);
                    }
                } else if let Some((&k, _)) = model.range(s..).next() {
                    model.remove(&k);
                    assert!(t.remove(k));
                }
                max_height = max_height.max(t.height);
                if step % 20_000 == 0 {
                    t.check(0, u64::MAX).unwrap();
                    assert!(t.iter().eq(model.iter().map(|(&s, &e)| (s, e))));
                }
            }
        }
        t.check(0, u64::MAX).unwrap();
        assert!(t.iter().eq(model.iter().map(|(&s, &e)| (s, e))));
        assert!(max_height >= 4, "height {max_height}");
        for k in model.keys().copied().collect::<Vec<_>>() {
            assert!(t.remove(k));
        }
        t.check(0, u64::MAX).unwrap();
        assert_eq!((t.len(), t.height), (0, 0));
    }

    /// A shrink that keeps a leaf's longest block keeps its summary (now
    /// stale: it still promises an aligned fit that is gone), and the
    /// search it then sends there in vain recomputes it.
    #[test]
    fn stale_summary_is_kept_then_tightened_by_the_search() {
        let mut t = BTree::new();
        for i in 0..40u64 {
            let s = i * 0x1000;
            let e = match i {
                2 => s + 0xc00,         // aligned to 2^13: 0xc00 usable at 2^11
                4 => s + 0x100 + 0xc00, // as long, 0x500 usable at 2^11
                30 => s + 0x1000,       // the fit the search ends at
                _ => s + 0x100,
            };
            let s = if i == 4 { s + 0x100 } else { s };
            t.insert(s, e);
        }
        t.enable_summaries(0x800);
        assert!(t.height >= 1);
        let (root, first) = (t.root, t.inners[t.root as usize].kid[0]);
        let exact = |t: &BTree| t.leaf_sum(first, t.entry(root, 0).max);
        // Both holders of the leaf's maximum start in the first leaf.
        assert_eq!(t.entry(root, 0).max, 0xc00);
        // Block 2 loses its aligned start; block 4 keeps the maximum.
        let pos = t.find(0x2000).unwrap();
        t.set_range_at(&pos, 0x2100, 0x2c00);
        t.check(0, u64::MAX).unwrap();
        assert_ne!(t.entry(root, 0).sum, exact(&t), "kept, not recomputed");
        assert_eq!(t.entry(root, 0).sum.usable(0xc00, 11), Some(0xc00));
        // 0x600 at 2^11: the first leaf's summary lets the search in, no
        // block there holds it (0x400 and 0x500 usable), block 30 does.
        let mut pos = Pos::new();
        assert_eq!(
            t.lowest_fit(0x600, 0x800, 0, u64::MAX, &mut pos),
            Some(0x1e000)
        );
        assert_eq!(t.entry(root, 0).sum, exact(&t), "tightened by the search");
        assert_eq!(t.entry(root, 0).sum.usable(0xc00, 11), Some(0x500));
        t.check(0, u64::MAX).unwrap();
    }
}
