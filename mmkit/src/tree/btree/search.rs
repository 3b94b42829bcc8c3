//! The lowest- and highest-fit searches, what they remember between calls
//! (the last request that found nothing, the bound the last aligned one
//! left), and their linear-scan references.

use crate::storage::Storage;
use alloc::vec::Vec;

use super::node::{child_end, last_below, may_reach};
use super::{BTree, Pos, MAX_HEIGHT};
use crate::tree::summary::{AlignSummary, Probe};

/// A fit request: `size` bytes aligned to `2^k` in `[lo, hi)`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Request {
    pub(super) prune: bool,
    pub(super) size: u64,
    pub(super) align: u64,
    pub(super) k: u32,
    pub(super) lo: u64,
    pub(super) hi: u64,
    /// Reads `M_k` from the summaries of the tree's finest granule.
    pub(super) probe: Probe,
}

impl Request {
    /// Whether a child with longest block `max` and summary `sum` may hold
    /// the request.
    #[inline]
    pub(super) fn may_hold(&self, max: u64, sum: AlignSummary) -> bool {
        max >= self.size
            && (!self.prune
                || matches!(sum.usable_by(&self.probe, max, self.k), Some(u) if u >= self.size))
    }
}

/// A past search's request, as the tree remembers it: `size` aligned to
/// `align` in `[lo, hi)`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    pub(super) size: u64,
    pub(super) align: u64,
    pub(super) lo: u64,
    pub(super) hi: u64,
}

impl Shape {
    /// Matches no request (none is `size` 0 with `hi` 0).
    pub(super) const NONE: Shape = Shape {
        size: 0,
        align: 0,
        lo: 0,
        hi: 0,
    };

    #[inline]
    pub(super) fn of(q: &Request) -> Shape {
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
    pub(super) fn covers(&self, q: &Request) -> bool {
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
pub(super) struct Cleared {
    pub(super) asked: Shape,
    pub(super) bound: u64,
    /// The path to the leaf that held the block at `bound` when it was set
    /// (`wild`: none), good while the tree's [`shape`](BTree::shape) is
    /// `shape`: the next search may start in that leaf instead of
    /// descending to it (see [`BTree::start_leaf`]).
    pub(super) at: Pos,
    pub(super) shape: u64,
}

impl Cleared {
    /// Proves nothing.
    pub(super) const NONE: Cleared = Cleared {
        asked: Shape::NONE,
        bound: 0,
        at: Pos::wild(),
        shape: 0,
    };
}

/// What a leaf scan found.
pub(super) enum Scan {
    Found(usize, u64),
    /// Nothing here; later (or, searching down, earlier) blocks may fit.
    Miss,
    /// Nothing here or anywhere further in the search's direction.
    Stop,
}

/// The first slot among the candidates `cand` (from [`may_reach`]) whose
/// length in `len` is at least `min`.
#[inline]
fn first_at_least<const N: usize>(mut cand: u64, len: &[u64; N], min: u64) -> Option<usize> {
    while cand != 0 {
        let i = cand.trailing_zeros() as usize;
        if len[i] >= min {
            return Some(i);
        }
        cand &= cand - 1;
    }
    None
}

/// The highest `a` with `a % align == 0`, `lo <= a` and `a + size <= hi`.
#[inline]
pub(super) fn top_fit(lo: u64, hi: u64, size: u64, align: u64) -> Option<u64> {
    let a = hi.checked_sub(size)? & !(align - 1);
    (lo < hi && a >= lo).then_some(a)
}

impl<S: Storage> BTree<S> {
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
    /// O(log n) when `align <= 2^(g + CLASSES)` for the granule `g` of the
    /// blocks (every start and end a multiple of `2^g`: up to 4 MiB for
    /// 4 KiB pages). A larger alignment is pruned with the bound of
    /// `2^(g + CLASSES)`, so blocks that pass it but miss the larger
    /// alignment are examined one by one (O((k + 1) log n) for k such near
    /// misses). Amortized: a child entered because its summary was stale costs a
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
    /// when the general search must answer (the block starts below `lo`,
    /// or `k` is above the floor). The general search takes every `k`,
    /// the floor's own included.
    #[inline]
    pub(super) fn plain_fit(&self, q: Request, pos: &mut Pos) -> Option<Option<u64>> {
        if q.k > self.floor || self.height == 0 {
            return None;
        }
        let mut id = self.root;
        for d in 0..self.height {
            let n = &self.inners[id as usize];
            let Some(c) = first_at_least(may_reach(&n.code, q.size), &n.max, q.size) else {
                return Some(None);
            };
            pos.node[d] = id;
            pos.slot[d] = c as u8;
            id = n.kid[c];
        }
        let l = &self.leaves[id as usize];
        let i = first_at_least(may_reach(&l.code, q.size), &l.size, q.size);
        debug_assert!(i.is_some(), "a child's maximum was long enough");
        let i = i.unwrap_or(0);
        let s = l.start[i];
        debug_assert!(
            s & (q.align - 1) == 0,
            "a block start without the request's alignment"
        );
        if s < q.lo {
            return None;
        }
        pos.set_leaf(id, i);
        Some((s < q.hi && q.hi - s >= q.size).then_some(s))
    }

    /// The request both searches make: pruned by the summaries while they
    /// are kept, read through a probe for the tree's finest granule.
    #[inline]
    pub(super) fn request(&self, size: u64, align: u64, lo: u64, hi: u64) -> Request {
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
    pub(super) fn start_leaf(&self) -> Option<Pos> {
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
    pub(super) fn first_past(&self, id: u32, lo: u64) -> u8 {
        let n = &self.inners[id as usize];
        if lo <= n.key[0] {
            return 0;
        }
        // `lo < hi`, so `lo + 1` does not wrap.
        last_below(&n.key, lo + 1) as u8
    }

    /// Scans leaf `id` upwards for the first block holding `q`. (Inlined
    /// at both calls: it is on every search's path.)
    #[inline(always)]
    pub(super) fn leaf_up(&self, id: u32, q: Request) -> Scan {
        let l = &self.leaves[id as usize];
        // The blocks long enough, found without a branch per block; a
        // block too high to hold the request ends the whole search, but
        // is only noticed at a candidate (the next node's key catches it
        // otherwise).
        // (A candidate too short fails `fit_in`.)
        let mut cand = may_reach(&l.code, q.size);
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

    pub(super) fn fit_up(&mut self, q: Request, start: Option<Pos>, pos: &mut Pos) -> Option<u64> {
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
            // (A candidate too short fails `may_hold`.)
            let mut cand = may_reach(&n.code, q.size) >> c << c;
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
    pub(super) fn tighten(&mut self, q: Request, p: u32, c: usize, leafy: bool) {
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
    pub(super) fn leaf_down(&self, id: u32, q: Request) -> Scan {
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

    pub(super) fn fit_down(&self, q: Request, pos: &mut Pos) -> Option<u64> {
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
}
