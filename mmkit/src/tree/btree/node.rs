//! The two kinds of node, and the pool each kind lives in.
//!
//! Both kinds are fixed arrays whose slots past the node's length hold
//! neutral values (`u64::MAX` keys and starts, zero lengths and maxima),
//! so scans read whole arrays with no mask per slot and no loop exit to
//! mispredict; the helpers at the end of this file are those scans.

use alloc::vec::Vec;
use core::ops::{Index, IndexMut};

use super::classes::Classes;
use super::{FANOUT, LEAF_CAP};
use crate::storage::{Fixed, Heap, Inline, Storage, Store};
use crate::tree::summary::AlignSummary;

/// "No node" in the free chains.
pub(super) const NONE: u32 = u32::MAX;
/// The `len` of a released node.
pub(super) const RELEASED: u32 = u32::MAX;

/// A leaf: its blocks' starts in `start[..len]` and lengths in
/// `size[..len]` (lengths, not ends: a search and a leaf's longest block
/// read only the lengths, half the leaf). The slots past `len` are empty
/// (`start == u64::MAX`, `size == 0`), as an inner node's keys past its
/// `len` are `u64::MAX` and its maxima 0: lengths, maxima and key
/// searches then read whole arrays, with no mask per slot and no loop exit
/// to mispredict.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(super) struct Leaf {
    /// Blocks held (`RELEASED` in the free chain, then `start[0]` links).
    /// First, with the codes a search reads next, in the cache line of
    /// the first starts.
    pub(super) len: u32,
    /// `code(size[i])` for each slot, in the address tree (a size tree
    /// leaves them 0): the searches find their candidates in these 16
    /// bytes with a few word operations ([`may_reach`]).
    pub(super) code: [u8; LEAF_CAP],
    pub(super) start: [u64; LEAF_CAP],
    pub(super) size: [u64; LEAF_CAP],
}

pub(super) const EMPTY_LEAF: Leaf = Leaf {
    start: [u64::MAX; LEAF_CAP],
    size: [0; LEAF_CAP],
    code: [0; LEAF_CAP],
    len: 0,
};

impl Leaf {
    /// Block `i` as `(start, end)`.
    #[inline]
    pub(super) fn block(&self, i: usize) -> (u64, u64) {
        (self.start[i], self.start[i] + self.size[i])
    }

    /// Makes block `i` `[s, e)`.
    #[inline]
    pub(super) fn set(&mut self, i: usize, s: u64, e: u64) {
        self.start[i] = s;
        self.size[i] = e - s;
        self.code[i] = code(e - s);
    }

    /// Empties slot `i`.
    #[inline]
    pub(super) fn clear(&mut self, i: usize) {
        self.start[i] = u64::MAX;
        self.size[i] = 0;
        self.code[i] = 0;
    }

    /// Puts `[s, e)` at index `i` of the `n < LEAF_CAP` blocks, after
    /// moving those from `i` up one slot.
    #[inline]
    pub(super) fn insert(&mut self, i: usize, n: usize, s: u64, e: u64) {
        open_gap(&mut self.start, i, n);
        open_gap(&mut self.size, i, n);
        codes_opened(&mut self.code, i);
        self.set(i, s, e);
    }

    /// Takes block `i` out of the `n` blocks, moving the later ones down.
    #[inline]
    pub(super) fn take(&mut self, i: usize, n: usize) {
        close_gap(&mut self.start, i, n);
        close_gap(&mut self.size, i, n);
        codes_closed(&mut self.code, i);
        self.clear(n - 1);
    }

    /// Recomputes every slot's code from its length (after the lengths
    /// were copied in bulk).
    #[inline]
    pub(super) fn recode(&mut self) {
        for (c, &len) in self.code.iter_mut().zip(&self.size) {
            *c = code(len);
        }
    }
}

/// An inner node: entry `i < len` is child `kid[i]`'s lowest start, longest
/// block, summary and length classes; past `len`, `key` is `u64::MAX` and
/// `max` and `cls` 0 (see `Leaf`).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(super) struct Inner {
    /// Children held (`RELEASED` in the free chain, then `kid[0]` links).
    /// First, with the codes a search scans and the ids it follows: a
    /// descent's reads begin in one cache line.
    pub(super) len: u32,
    /// `code(max[i])` for each slot, in the address tree (see `Leaf`).
    pub(super) code: [u8; FANOUT],
    pub(super) kid: [u32; FANOUT],
    pub(super) key: [u64; FANOUT],
    pub(super) max: [u64; FANOUT],
    pub(super) sum: [AlignSummary; FANOUT],
    /// While the tree keeps length classes (`classes.rs`): the classes
    /// of the blocks below each child; 0 otherwise.
    pub(super) cls: [Classes; FANOUT],
}

pub(super) const EMPTY_INNER: Inner = Inner {
    key: [u64::MAX; FANOUT],
    max: [0; FANOUT],
    code: [0; FANOUT],
    sum: [AlignSummary::ZERO; FANOUT],
    kid: [NONE; FANOUT],
    cls: [0; FANOUT],
    len: 0,
};

/// A kind of node a [`Pool`] holds: how an empty one looks, and where a
/// released one keeps its link in the free chain.
pub(super) trait Node: Copy + core::fmt::Debug + Send + 'static {
    /// A node with no entries.
    const EMPTY: Self;
    /// Marks this node released, `next` the next in the free chain.
    fn release(&mut self, next: u32);
    /// The next node in the free chain after this released one.
    fn next_released(&self) -> u32;
}

impl Node for Leaf {
    const EMPTY: Leaf = EMPTY_LEAF;

    #[inline]
    fn release(&mut self, next: u32) {
        self.len = RELEASED;
        self.start[0] = u64::from(next);
    }

    #[inline]
    fn next_released(&self) -> u32 {
        self.start[0] as u32
    }
}

impl Node for Inner {
    const EMPTY: Inner = EMPTY_INNER;

    #[inline]
    fn release(&mut self, next: u32) {
        self.len = RELEASED;
        self.kid[0] = next;
    }

    #[inline]
    fn next_released(&self) -> u32 {
        self.kid[0]
    }
}

/// The nodes of one kind, indexed by `u32` id: released nodes are chained
/// for reuse, so a steady state of inserts and removals allocates no heap
/// memory. The nodes live in `S`'s store (see [`crate::storage`]).
#[derive(Debug, Clone)]
pub(super) struct Pool<N: Node, S: Storage> {
    nodes: S::Store<N>,
    /// The first released node (`NONE`: none).
    free: u32,
    /// Nodes handed out and not released (fewer than 2^32: ids are `u32`).
    used: u32,
}

impl<N: Node> Pool<N, Heap> {
    /// No node.
    pub(super) fn new() -> Self {
        Pool {
            nodes: Vec::new(),
            free: NONE,
            used: 0,
        }
    }

    /// One empty node, id 0, handed out (a new tree's root leaf).
    pub(super) fn with_root() -> Self {
        Pool {
            nodes: Vec::from([N::EMPTY]),
            free: NONE,
            used: 1,
        }
    }
}

impl<N: Node, const K: usize> Pool<N, Fixed<K>> {
    /// `used` empty nodes handed out (0, or 1 for a root leaf), in an
    /// array of `K`.
    pub(super) const fn fixed(used: u32) -> Self {
        Pool {
            nodes: Inline::filled(N::EMPTY, used as usize),
            free: NONE,
            used,
        }
    }
}

impl<N: Node, S: Storage> Pool<N, S> {
    /// An empty node: the last released, or a new one.
    pub(super) fn alloc(&mut self) -> u32 {
        self.used += 1;
        if self.free != NONE {
            let id = self.free;
            let nodes = self.nodes.as_mut_slice();
            self.free = nodes[id as usize].next_released();
            nodes[id as usize] = N::EMPTY;
            id
        } else {
            self.nodes.push(N::EMPTY);
            (self.nodes.as_slice().len() - 1) as u32
        }
    }

    /// Takes back node `id`, to be handed out again.
    pub(super) fn release(&mut self, id: u32) {
        self.used -= 1;
        self.nodes.as_mut_slice()[id as usize].release(self.free);
        self.free = id;
    }

    /// Nodes handed out and not released.
    pub(super) fn used(&self) -> usize {
        self.used as usize
    }

    /// Whether `n` more nodes can be handed out within the store's room.
    #[inline]
    pub(super) fn has_room(&self, n: usize) -> bool {
        !S::FIXED || self.used() + n <= self.nodes.room()
    }

    /// Heap bytes held (capacity, used or not).
    pub(super) fn heap_bytes(&self) -> usize {
        self.nodes.heap_bytes()
    }

    /// Bytes of the nodes handed out.
    pub(super) fn node_bytes(&self) -> usize {
        self.used() * core::mem::size_of::<N>()
    }

    /// Makes room for `n` nodes in all, released ones included.
    pub(super) fn reserve_total(&mut self, n: usize) {
        self.nodes.reserve_total(n);
    }

    /// Lets the nodes move to the heap when their array is full.
    pub(super) fn allow_heap(&mut self) {
        self.nodes.allow_heap();
    }
}

impl<N: Node, S: Storage> Index<usize> for Pool<N, S> {
    type Output = N;

    #[inline]
    fn index(&self, id: usize) -> &N {
        &self.nodes.as_slice()[id]
    }
}

impl<N: Node, S: Storage> IndexMut<usize> for Pool<N, S> {
    #[inline]
    fn index_mut(&mut self, id: usize) -> &mut N {
        &mut self.nodes.as_mut_slice()[id]
    }
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
pub(super) fn last_below<const N: usize>(keys: &[u64; N], key: u64) -> usize {
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

/// The longest block of a leaf: all LEAF_CAP slots, so there is no loop
/// exit to mispredict (those from `len` on are empty: see `Leaf`).
#[inline]
pub(super) fn leaf_max(l: &Leaf) -> u64 {
    max_of(&l.size)
}

/// Where the blocks below child `c` of `n` end, at most: the next child's
/// key, or for the last child `end`, the bound of the node's own blocks.
/// Every key is below `end` and every empty slot's is `u64::MAX`, so the
/// smaller of the two is the answer, without reading the node's length.
#[inline]
pub(super) fn child_end(n: &Inner, c: usize, end: u64) -> u64 {
    n.key.get(c + 1).map_or(end, |&k| k.min(end))
}

/// The largest of `x`, in four independent chains of comparisons (in one
/// chain each waits for the last).
#[inline]
pub(super) fn max_of<const N: usize>(x: &[u64; N]) -> u64 {
    let mut m = [0u64; 4];
    for c in x.chunks_exact(4) {
        for j in 0..4 {
            m[j] = m[j].max(c[j]);
        }
    }
    m[0].max(m[1]).max(m[2].max(m[3]))
}

/// A byte that orders lengths as they are ordered, coarsely: 0 for 0,
/// else `4(e + 1) + m` for a length of `2^e` to `2^(e+1)` whose two bits
/// below the top are `m`, at most 127 (every length from `2^31` on is
/// 127). Monotone: `a <= b` gives `code(a) <= code(b)`, so a length whose
/// code is below a request's is too short, and one whose code is at or
/// above it may hold it (a length compare decides). Seven bits leave each
/// byte's top bit free for [`may_reach`]'s compare.
#[inline]
pub(super) fn code(len: u64) -> u8 {
    // `e + 1` is 64 - lz (0 for 0, with m 0: no branch for it).
    let lz = len.leading_zeros();
    // The two bits below the top, rotated to bits 0-1 (for e < 2 the
    // rotation is to the left and brings in zeros below).
    let m = len.rotate_right(61u32.wrapping_sub(lz) % 64) & 3;
    (4 * u64::from(64 - lz) + m).min(127) as u8
}

/// Bit `i` set for each slot whose code (`codes[i]`, see [`code`]) is at
/// least `min`'s: every slot whose length or maximum is at least `min`
/// (`min` at least 1), and some a little shorter, which the caller
/// rules out by the length itself. Sixteen byte compares in two words
/// (each byte is below 128, so `(b | 0x80) - c` keeps its top bit exactly
/// when `b >= c` and borrows from no other byte), the top bits then
/// gathered by one multiply per word. Empty slots' code 0 is below every
/// request's.
#[inline]
pub(super) fn may_reach<const N: usize>(codes: &[u8; N], min: u64) -> u64 {
    const TOP: u64 = 0x8080_8080_8080_8080;
    const ONES: u64 = 0x0101_0101_0101_0101;
    // Bit 8i moves to bit 56 + i; no two partial products share a bit.
    const GATHER: u64 = 0x0102_0408_1020_4080;
    let c = ONES * u64::from(code(min.max(1)));
    let mut mask = 0;
    for (h, word) in codes.chunks_exact(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(word);
        let top = ((u64::from_le_bytes(b) | TOP) - c) & TOP;
        mask |= ((top >> 7).wrapping_mul(GATHER) >> 56) << (8 * h);
    }
    mask
}

/// Moves `codes[i..]` up one slot (the last drops off; slot `i` keeps its
/// code, as `copy_within` leaves it).
#[inline]
pub(super) fn codes_opened<const N: usize>(codes: &mut [u8; N], i: usize) {
    shift_codes(codes, i, true);
}

/// Moves `codes[i + 1..]` down one slot, over slot `i` (the last becomes
/// 0).
#[inline]
pub(super) fn codes_closed<const N: usize>(codes: &mut [u8; N], i: usize) {
    shift_codes(codes, i, false);
}

/// [`codes_opened`] (`up`) or [`codes_closed`]: for 16 slots one 128-bit
/// shift rather than a byte copy.
#[inline]
fn shift_codes<const N: usize>(codes: &mut [u8; N], i: usize, up: bool) {
    let Ok(b) = <[u8; 16]>::try_from(&codes[..]) else {
        if up {
            codes.copy_within(i..N - 1, i + 1);
        } else {
            codes.copy_within(i + 1..N, i);
            codes[N - 1] = 0;
        }
        return;
    };
    let w = u128::from_le_bytes(b);
    let low = (1u128 << (8 * i)) - 1;
    let w = if up {
        (w & low) | ((w & !low) << 8) | (w & (0xff << (8 * i)))
    } else {
        (w & low) | ((w >> 8) & !low)
    };
    codes.copy_from_slice(&w.to_le_bytes());
}

/// Bit `i` set for each `x[i] >= min` (`min` raised to 1): the exact
/// answer [`may_reach`] must contain.
#[cfg(test)]
pub(super) fn at_least<const N: usize>(x: &[u64; N], min: u64) -> u64 {
    let min = min.max(1);
    let mut mask = 0;
    for (i, &v) in x.iter().enumerate() {
        mask |= u64::from(v >= min) << i;
    }
    mask
}
