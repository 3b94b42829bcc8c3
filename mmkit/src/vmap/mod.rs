//! The range allocator: lowest fit over an augmented tree of free blocks,
//! with lazy reuse (seeds 000 and 002).
//!
//! [`VmapAllocator`] is the kernel's vmap area allocator (mm/vmalloc.c after
//! Uladzislau Rezki's 2019 rewrite) as a general allocator of `u64` ranges.
//! It keeps the [`RangeAllocator`] contract: the answer to every allocation
//! is the lowest fitting address, exactly.
//!
//! ```text
//!   space [start, end)
//!   |--busy--|  free  |-busy-|-lazy-|      free       |--busy--|
//!            `--------'             `-----------------'
//!   free tree: maximal free blocks, sorted by start, in a B+tree whose
//!              inner nodes know, per child, the lowest start, the largest
//!              free block below it and, once an aligned request needs it,
//!              what that child holds at each alignment
//!   busy index: live areas by start (a hash table of (start, end)), so a
//!              free finds its area in O(1) and rejects any other address
//!   isolated:  up to 8 free blocks kept out of the tree: freed areas that
//!              merged with nothing, taken back by the next requests that
//!              fit them lowest (see `isolated`)
//!   pending:   the last freed area that touched free blocks, kept out of
//!              the tree beside them (its pads, left as they were) until
//!              taken back whole or merged (see `pending`)
//!   lazy list: areas freed lazily; not reusable until the next purge
//! ```
//!
//! Metadata: a free block is 16 bytes in a leaf of the
//! [`BTree`] (8 to 16 blocks per 264-byte leaf)
//! plus its share of the inner nodes (8 to 16 children per 456-byte node):
//! at most about 41 bytes, 24-32 measured in the bench's workloads (the AVL
//! tree before it took 56); a live area is one 16-byte slot of the busy
//! index (17.9 to 35.9 bytes with the table's empty slots and counts); a
//! lazy area is 16 bytes in the lazy list; the isolated blocks are a fixed
//! 144 bytes inside the allocator and the pending area 48; with the last
//! free's neighbours and their path (the finger, with the tree's shape
//! count it was found at and whether descending from it has paid), the
//! tree's last failed search, the bound its last aligned search left with
//! the path to its leaf, the root's longest block and the busy slot last
//! emptied, the live-area count and the two flags of
//! [`without_busy_index`](VmapAllocator::without_busy_index), the
//! allocator itself is 896 bytes (`size_of::<VmapAllocator>()`
//! on 64-bit targets). Released nodes are reused and none of these shrink,
//! so steady-state operation allocates no heap memory.

use crate::ensure;
use crate::error::{AllocError, CheckError, FreeError};
use crate::range::{FlushHook, RangeAllocator, RangeStats, DEFAULT_LAZY_MAX};
use crate::tree::btree::{BTree, Neighbours, Pos};

mod api;
pub(crate) mod busy;
mod isolated;
mod pending;
#[cfg(feature = "std")]
pub mod pooled;
mod sized;
use alloc::vec::Vec;
use busy::{BusyIndex, Probe};
use isolated::Isolated;
use pending::Pending;

/// How an allocated `[a, a + size)` sits in the free block `[s, e)` it was
/// cut from: the kernel's four fit types.
///
/// # Examples
/// ```
/// use mmkit::vmap::FitType;
/// assert_eq!(FitType::classify(0, 10, 0, 10), FitType::Full);
/// assert_eq!(FitType::classify(0, 10, 0, 4), FitType::LeftEdge);
/// assert_eq!(FitType::classify(0, 10, 6, 4), FitType::RightEdge);
/// assert_eq!(FitType::classify(0, 10, 4, 2), FitType::NoEdge);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FitType {
    /// Full fit: the block is consumed whole and leaves the free tree.
    /// ```text
    ///   |<------- free ------->|
    ///   |<------ alloc ------->|
    /// ```
    Full,
    /// Left edge: the block's start moves up past the allocation.
    /// ```text
    ///   |<------- free ------->|
    ///   |<- alloc ->|<- free ->|
    /// ```
    LeftEdge,
    /// Right edge: the block's end moves down to the allocation.
    /// ```text
    ///   |<------- free ------->|
    ///   |<- free ->|<- alloc ->|
    /// ```
    RightEdge,
    /// No edge: the allocation splits the block in two; the left remainder
    /// becomes a new free block (the only case that needs a new node).
    /// ```text
    ///   |<---------- free ---------->|
    ///   |<- free ->|<- alloc ->|<- free ->|
    /// ```
    NoEdge,
}

impl FitType {
    /// Classifies `[a, a + size)` inside the block `[s, e)`.
    pub fn classify(s: u64, e: u64, a: u64, size: u64) -> FitType {
        match (a == s, a + size == e) {
            (true, true) => FitType::Full,
            (true, false) => FitType::LeftEdge,
            (false, true) => FitType::RightEdge,
            (false, false) => FitType::NoEdge,
        }
    }
}

/// The augmented-tree range allocator (seed 000) with lazy purge (seed 002).
///
/// Invariants (checked by [`check`](RangeAllocator::check)):
/// `free_bytes + live_bytes + lazy_bytes == end - start`; free blocks are
/// maximal (no two adjacent); free, busy and lazy ranges are disjoint; every
/// augmented value is exact.
///
/// # Examples
/// ```
/// use mmkit::vmap::VmapAllocator;
///
/// let mut va = VmapAllocator::new(0, 1 << 20).unwrap();
/// let a = va.alloc(4096, 4096).unwrap();
/// va.free_lazy(a).unwrap();
/// // Lazily freed space is not reused before a purge...
/// assert_eq!(va.alloc(4096, 4096).unwrap(), 4096);
/// // ...and one purge flushes the covering range once.
/// let mut flushed = Vec::new();
/// assert!(va.purge(&mut |s, e| flushed.push((s, e))));
/// assert_eq!(flushed, [(0, 4096)]);
/// assert_eq!(va.alloc(4096, 4096).unwrap(), 0);
/// ```
pub struct VmapAllocator {
    start: u64,
    end: u64,
    /// Maximal free blocks, augmented with the largest block per subtree.
    free: BTree,
    /// The tree's blocks around the last area freed, and the path to them:
    /// kept, so that the next free starts from that leaf while the tree is
    /// unchanged (see `BTree::neighbours_near`).
    nb: Neighbours,
    /// Live areas by start address.
    busy: BusyIndex,
    /// The last few freed areas that merged with nothing, kept out of
    /// `free` until reused, joined or pushed out (see `isolated`).
    isolated: Isolated,
    /// The last freed area that had free neighbours, kept out of `free`
    /// beside them until taken back or merged (see `pending`).
    pending: Pending,
    /// Lazily freed areas, waiting for a purge.
    lazy: LazyList,
    lazy_max: u64,
    flush_hook: Option<FlushHook>,
    free_bytes: u64,
    live_bytes: u64,
    /// Live areas (the busy index's length when it holds them all).
    live_count: u64,
    /// Made [`without_busy_index`](Self::without_busy_index): frees carry
    /// their size, and `free(addr)` is refused.
    sized_only: bool,
    /// Whether `busy` holds the live areas: always, but in release builds
    /// of a `sized_only` allocator (see `sized`).
    indexed: bool,
    purges: u64,
    flushes: u64,
}

/// The lazily freed areas awaiting a purge, and the range covering them.
#[derive(Debug, Default)]
struct LazyList {
    areas: Vec<(u64, u64)>,
    bytes: u64,
    lo: u64,
    hi: u64,
}

impl core::fmt::Debug for VmapAllocator {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VmapAllocator")
            .field("space", &(self.start, self.end))
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl VmapAllocator {
    /// An allocator managing `[start, end)`, all free, with the kernel's
    /// one-CPU lazy threshold ([`DEFAULT_LAZY_MAX`]).
    ///
    /// # Errors
    /// [`AllocError::Invalid`] if `start >= end`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// assert!(VmapAllocator::new(0, u64::MAX).is_ok());
    /// assert!(VmapAllocator::new(5, 5).is_err());
    /// ```
    pub fn new(start: u64, end: u64) -> Result<Self, AllocError> {
        if start >= end {
            return Err(AllocError::Invalid);
        }
        let mut free = BTree::new();
        free.insert(start, end);
        Ok(VmapAllocator {
            start,
            end,
            free,
            nb: Neighbours::new(),
            busy: BusyIndex::new(),
            isolated: Isolated::new(),
            pending: Pending::new(),
            lazy: LazyList::default(),
            lazy_max: DEFAULT_LAZY_MAX,
            flush_hook: None,
            free_bytes: end - start,
            live_bytes: 0,
            live_count: 0,
            sized_only: false,
            indexed: true,
            purges: 0,
            flushes: 0,
        })
    }

    /// Reserves node storage for `n` more live areas or free blocks, so the
    /// next `n` operations allocate no heap memory (the kernel preloads its
    /// `vmap_area` cache before taking its lock, for the same reason).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 1 << 30).unwrap();
    /// va.reserve(1000); // the next 1000 allocations touch no heap for nodes
    /// let before = va.stats().metadata_bytes;
    /// va.alloc(4096, 4096).unwrap();
    /// assert_eq!(va.stats().metadata_bytes, before);
    /// ```
    pub fn reserve(&mut self, n: usize) {
        self.free.reserve(n);
    }

    /// The size of the live area that starts at `addr`, if there is one
    /// (always `None` in release builds of an allocator made
    /// [`without_busy_index`](Self::without_busy_index)).
    ///
    /// # Complexity
    /// O(1) expected.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// let a = va.alloc(0x300, 0x100).unwrap();
    /// assert_eq!(va.area_size(a), Some(0x300));
    /// assert_eq!(va.area_size(a + 1), None);
    /// ```
    pub fn area_size(&self, addr: u64) -> Option<u64> {
        self.busy.get(addr).map(|end| end - addr)
    }

    /// Cuts `[a, a + size)` out of the free block at `pos`, per its
    /// [`FitType`], as the search found it (no second descent).
    fn clip(&mut self, pos: &Pos, a: u64, size: u64) {
        let (s, e) = self.free.get(pos);
        match FitType::classify(s, e, a, size) {
            FitType::Full => self.free.remove_at(pos),
            FitType::LeftEdge => self.free.set_range_at(pos, a + size, e),
            FitType::RightEdge => self.free.set_range_at(pos, s, a),
            FitType::NoEdge => self.free.split_at(pos, (s, a), a + size, e),
        }
        self.free_bytes -= size;
    }

    /// Returns `[s, e)` to free space, merging with both neighbours at once:
    /// one descent finds both and the path to each, so a merge fixes the
    /// augmented values without a second descent. (Space returned by a
    /// purge or a grow; it is never held pending.)
    fn merge_or_add(&mut self, s: u64, e: u64) {
        self.settle_pending();
        self.free.neighbours_near(s, &mut self.nb);
        self.release(s, e, false);
    }

    /// [`merge_or_add`](Self::merge_or_add) with the tree's neighbours of
    /// `s` already found, in `self.nb`, and no area pending. The isolated
    /// blocks beside `[s, e)` join it first; a result that touches no
    /// block of the tree is isolated in turn and waits out of the tree.
    /// One that does, if nothing joined it and `may_hold`, waits as the
    /// pending area, its neighbours left in the tree as its pads.
    #[inline]
    fn release(&mut self, s: u64, e: u64, may_hold: bool) {
        debug_assert!(self.pending.held().is_none());
        let nb = &self.nb;
        self.free_bytes += e - s;
        // An isolated block joined here is no neighbour of the tree's
        // blocks, and none of them starts inside it: `nb`, found for `s`,
        // is as valid for the joined range.
        let (js, je) = self.isolated.take_adjacent(s, e);
        let joins_prev = nb.prev.is_some_and(|p| p.1 == js);
        let joins_next = nb.next.is_some_and(|n| n.0 == je);
        if !joins_prev && !joins_next {
            if !self.isolated.push(js, je) {
                self.free.insert_at(nb, js, je);
            }
        } else if !(may_hold && (js, je) == (s, e) && self.hold_pending(s, e)) {
            self.join_tree(js, je, joins_prev, joins_next);
        }
    }

    /// Keeps `[s, e)`, which touches a block found beside it (`self.nb`)
    /// and joined no isolated block, as the pending area, if it may be
    /// kept. Not when a block it touches is the wilderness, which changes
    /// with every allocation at the top.
    fn hold_pending(&mut self, s: u64, e: u64) -> bool {
        let nb = &self.nb;
        if nb.wild_beside() {
            return false;
        }
        let js = nb.prev.filter(|p| p.1 == s).map_or(s, |p| p.0);
        let je = nb.next.filter(|n| n.0 == e).map_or(e, |n| n.1);
        self.pending.hold((s, e), (js, je))
    }

    /// Adds `[s, e)` to the tree, merged with the blocks found beside it
    /// (`self.nb`) that it touches.
    #[inline]
    fn join_tree(&mut self, s: u64, e: u64, joins_prev: bool, joins_next: bool) {
        let nb = &self.nb;
        match (joins_prev, joins_next) {
            (true, true) => self.free.merge(nb),
            (true, false) => self.free.grow_prev(nb, e),
            (false, true) => self.free.grow_next(nb, s),
            (false, false) => self.free.insert_at(nb, s, e),
        }
    }

    /// Merges the pending area, if any, into the tree with its pads, as
    /// its free would have (before an operation that could change a pad,
    /// or that takes part of the extent).
    #[inline]
    fn settle_pending(&mut self) {
        if self.pending.held().is_some() {
            self.settle_held();
        }
    }

    /// [`settle_pending`](Self::settle_pending) with an area pending: out
    /// of line, so a free with none pending reads one word for it.
    #[inline(never)]
    fn settle_held(&mut self) {
        if let Some(h) = self.pending.release() {
            let ((s, e), (js, je)) = (h.area, h.extent);
            self.free.neighbours_near(s, &mut self.nb);
            debug_assert_eq!(
                self.nb.prev.filter(|p| p.1 == s),
                (js < s).then_some((js, s))
            );
            debug_assert_eq!(
                self.nb.next.filter(|n| n.0 == e),
                (e < je).then_some((e, je))
            );
            self.join_tree(s, e, js < s, e < je);
        }
    }

    /// Moves every isolated block, and the pending area, into the tree
    /// (before an operation that only looks there).
    fn settle_isolated(&mut self) {
        self.settle_pending();
        for (s, e) in self.isolated.take_all() {
            self.free.insert(s, e);
        }
    }

    /// The longest free block, in the tree, isolated or pending.
    fn largest_free(&self) -> u64 {
        let pending = self.pending.held().map_or(0, |h| h.extent.1 - h.extent.0);
        self.free
            .max_len()
            .max(self.isolated.largest())
            .max(pending)
    }

    /// The count of maximal free blocks: the pending area's extent is one,
    /// which its pads in the tree are part of.
    fn free_block_count(&self) -> usize {
        let (held, pads) = self
            .pending
            .held()
            .map_or((0, 0), |h| (1, h.pads().count()));
        self.free.len() + self.isolated.len() + held - pads
    }

    /// Detaches the live area at `addr` from the busy index, from `probe`,
    /// its home bucket read with no change to the index since.
    fn take_busy(&mut self, addr: u64, probe: Probe) -> Result<(u64, u64), FreeError> {
        if self.sized_only {
            return Err(FreeError::Invalid);
        }
        let e = self
            .busy
            .remove_probed(addr, probe)
            .ok_or(FreeError::NotAllocated)?;
        let s = addr;
        self.live_bytes -= e - s;
        self.live_count -= 1;
        Ok((s, e))
    }

    /// Puts `[s, e)`, no longer live, on the lazy list; purges when the
    /// list passes `lazy_max`.
    fn defer(&mut self, s: u64, e: u64) {
        let lz = &mut self.lazy;
        if lz.areas.is_empty() {
            (lz.lo, lz.hi) = (s, e);
        } else {
            (lz.lo, lz.hi) = (lz.lo.min(s), lz.hi.max(e));
        }
        lz.areas.push((s, e));
        lz.bytes += e - s;
        if self.lazy.bytes > self.lazy_max {
            self.purge_with_hook();
        }
    }

    /// Purge through the installed hook (threshold and failure purges).
    fn purge_with_hook(&mut self) -> bool {
        crate::range::purge_through_hook(self, |a| &mut a.flush_hook)
    }

    /// The exact lowest fit in `[lo, hi)`, in the tree, an isolated block
    /// or the pending extent, made a live area.
    fn try_alloc(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        self.free.enable_summaries(align);
        let mut pos = Pos::new();
        let (missed, at) = self.isolated.lowest_fit(size, align, lo, hi);
        let held = self.pending.lowest_fit(size, align, lo, hi);
        // The lower of the two: they lie in disjoint blocks.
        let below = match (at, held) {
            (Some(b), Some(p)) => Some(b.min(p)),
            (b, p) => b.or(p),
        };
        let found = match below {
            // A fit in the tree below `b` starts by `b - 1`, so it ends by
            // `b - 1 + size` (at most `hi`, as `b + size` is), in a block
            // starting below `b`: none when every block starts at or above,
            // or every one that does is too short (read at the root). A fit
            // inside a pad of the pending extent is no lower than the
            // extent's own, so none is found here.
            Some(b) if b > lo && self.free.may_hold_below(b, size) => {
                self.free
                    .lowest_fit(size, align, lo, b - 1 + size, &mut pos)
            }
            Some(_) => None,
            None => self.free.lowest_fit(size, align, lo, hi, &mut pos),
        };
        let a = match (found, below) {
            (Some(a), _) => {
                debug_assert!(self
                    .pending
                    .held()
                    .map_or(true, |h| h.pads().all(|pad| pad != self.free.get(&pos))));
                self.claim(&pos, a, size);
                a
            }
            (None, Some(p)) if held == Some(p) => {
                if self.pending.held().is_some_and(|h| h.area != (p, p + size)) {
                    return self.alloc_settled(size, align, lo, hi);
                }
                self.pending.taken_back();
                self.free_bytes -= size;
                self.mark_live(p, size);
                p
            }
            (None, Some(b)) => {
                if let Some((s, e)) = self.isolated.cut(missed, b, size) {
                    self.free.insert(s, e);
                }
                self.free_bytes -= size;
                self.mark_live(b, size);
                b
            }
            (None, None) => return None,
        };
        // The blocks this request looked at in vain go into the tree,
        // where the maxima rule them out without a look.
        if missed > 0 {
            for (s, e) in self.isolated.push_out(missed) {
                self.free.insert(s, e);
            }
        }
        Some(a)
    }

    /// An allocation that takes part of the pending extent: the area is
    /// merged first, and the fit found again, in the tree.
    #[cold]
    fn alloc_settled(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        self.settle_pending();
        self.try_alloc(size, align, lo, hi)
    }

    /// Makes `[a, a + size)`, found at `pos`, a live area. (Reading the
    /// busy index's home bucket before `clip`, as `free` does before its
    /// descent, measured no better twice: slower at 10^5-10^6 on
    /// random-size and fragmented, see docs/bench-history.md.)
    fn claim(&mut self, pos: &Pos, a: u64, size: u64) {
        self.clip(pos, a, size);
        self.mark_live(a, size);
    }

    /// Records `[a, a + size)`, already out of the free space, as live.
    fn mark_live(&mut self, a: u64, size: u64) {
        if self.indexed {
            self.busy.insert(a, a + size);
        }
        self.live_bytes += size;
        self.live_count += 1;
    }
}

impl RangeAllocator for VmapAllocator {
    fn space(&self) -> (u64, u64) {
        (self.start, self.end)
    }

    /// # Complexity
    /// O(log n) in free blocks and live areas, amortized (an aligned search
    /// may enter a subtree whose alignment summary went stale in an earlier
    /// update, once: see `tree::btree`). Alignments above 2^10 times
    /// the granule of the ranges (4 MiB for 4 KiB pages) add O(log n) per
    /// free block that is long enough but wrongly aligned (a near miss)
    /// below the answer; a failing request purges
    /// lazily freed areas once (O(lazy · log n)) and retries.
    fn alloc_in(
        &mut self,
        size: u64,
        align: u64,
        vstart: u64,
        vend: u64,
    ) -> Result<u64, AllocError> {
        crate::debug_check!(self);
        crate::range::alloc_with_purge_retry(
            self,
            (size, align, vstart, vend),
            Self::try_alloc,
            Self::purge_with_hook,
        )
    }

    /// # Complexity
    /// O(log n).
    fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
        crate::debug_check!(self);
        // The busy index's home bucket is read first and used only after the
        // free-block descent, which needs the address alone: in a large
        // allocator both miss the cache, and the misses then overlap
        // (10^5-10^6 live areas: see docs/bench-history.md).
        let probe = self.busy.probe(addr);
        // The area freed may be next to a pad of the pending one.
        self.settle_pending();
        self.free.neighbours_near(addr, &mut self.nb);
        let (s, e) = self.take_busy(addr, probe)?;
        self.release(s, e, true);
        Ok(e - s)
    }

    /// # Complexity
    /// O(log n), plus a purge when the lazy bytes pass `lazy_max`.
    fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
        crate::debug_check!(self);
        let (s, e) = self.take_busy(addr, self.busy.probe(addr))?;
        self.defer(s, e);
        Ok(e - s)
    }

    /// # Complexity
    /// O(k log n) for k lazy areas.
    fn purge(&mut self, flush: &mut dyn FnMut(u64, u64)) -> bool {
        if self.lazy.areas.is_empty() {
            return false; // nothing released: not counted as a purge
        }
        self.purges += 1;
        let (lo, hi) = (self.lazy.lo, self.lazy.hi);
        let mut areas = core::mem::take(&mut self.lazy.areas);
        // In address order, consecutive merges walk nearby tree paths (warm
        // in cache), and adjacent lazy areas join before touching the tree.
        // Downwards, so that a batch at the top of the used space grows the
        // wilderness (no path to fix) instead of a block in the tree whose
        // every ancestor sees its length change.
        areas.sort_unstable();
        let mut run: Option<(u64, u64)> = None;
        for &(s, e) in areas.iter().rev() {
            run = match run {
                Some((rs, re)) if e == rs => Some((s, re)),
                Some((rs, re)) => {
                    self.merge_or_add(rs, re);
                    Some((s, e))
                }
                None => Some((s, e)),
            };
        }
        if let Some((rs, re)) = run {
            self.merge_or_add(rs, re);
        }
        areas.clear();
        self.lazy.areas = areas; // keep the capacity: no allocation next time
        self.lazy.bytes = 0;
        // One flush covers the whole batch. It runs last: nothing can reuse
        // the batch before we return, and a flush that panics finds every
        // invariant (lazy_max included) already holding.
        self.flushes += 1;
        flush(lo, hi);
        true
    }

    fn set_lazy_max(&mut self, bytes: u64) {
        crate::debug_check!(self);
        self.lazy_max = bytes;
        if self.lazy.bytes > self.lazy_max {
            self.purge_with_hook();
        }
    }

    fn set_flush_hook(&mut self, hook: Option<FlushHook>) {
        self.flush_hook = hook;
    }

    fn stats(&self) -> RangeStats {
        let metadata = self.free.heap_bytes()
            + self.busy.heap_bytes()
            + self.lazy.areas.capacity() * core::mem::size_of::<(u64, u64)>()
            + core::mem::size_of::<Self>();
        RangeStats {
            free_blocks: self.free_block_count() as u64,
            free_bytes: self.free_bytes,
            largest_free: self.largest_free(),
            live_areas: self.live_count,
            live_bytes: self.live_bytes,
            lazy_areas: self.lazy.areas.len() as u64,
            lazy_bytes: self.lazy.bytes,
            purges: self.purges,
            flushes: self.flushes,
            metadata_bytes: metadata as u64,
        }
    }

    /// # Complexity
    /// O(n log n).
    fn check(&self) -> Result<(), CheckError> {
        let (lo, hi) = (self.start, self.end);
        self.free.check(lo, hi)?;
        ensure!(
            self.busy.consistent(),
            Structure,
            "busy index: a key is unreachable"
        );
        let mut prev_end = None;
        for (s, e) in self.isolated.iter() {
            ensure!(s < e, Layout @ s, "empty isolated block at {s:#x}");
            if let Some(end) = prev_end {
                ensure!(end < s, Layout @ s, "isolated blocks out of order at {s:#x}");
            }
            prev_end = Some(e);
        }
        // The pending area's pads are the tree's blocks beside it.
        if let Some(h) = self.pending.held() {
            let ((s, e), (js, je)) = (h.area, h.extent);
            ensure!(s < e && js <= s && e <= je, Layout @ s, "pending area {s:#x} outside its extent");
            ensure!(h.pads().count() > 0, Layout @ s, "pending area {s:#x} with no pad");
            for (ps, pe) in h.pads() {
                ensure!(
                    self.free.containing(ps) == Some((ps, pe)),
                    Layout @ ps,
                    "pad {ps:#x}..{pe:#x} of the pending area is not a free block"
                );
            }
        }
        // Free blocks, in the tree, isolated or pending, are maximal: the
        // only ones that touch are the pending area and its pads.
        let mut prev_end = None;
        for (s, e) in self.held_free_blocks() {
            if let Some(end) = prev_end {
                let pad_edge = self
                    .pending
                    .held()
                    .is_some_and(|h| end == s && (s == h.area.0 || s == h.area.1));
                ensure!(
                    end < s || pad_edge,
                    Layout @ end,
                    "adjacent free blocks at {end:#x}"
                );
            }
            prev_end = Some(e);
        }
        // Free, busy and lazy ranges partition the space exactly.
        let mut all = Vec::with_capacity(self.free.len() + self.busy.len());
        for r in self.free_blocks() {
            all.push((r.start, r.end, "free"));
        }
        for (s, e) in self.busy.iter() {
            ensure!(s < e, Layout @ s, "empty busy area at {s:#x}");
            all.push((s, e, "busy"));
        }
        ensure!(
            !self.indexed || self.busy.len() as u64 == self.live_count,
            Accounting,
            "busy index holds {} areas, counter {}",
            self.busy.len(),
            self.live_count
        );
        for &(s, e) in &self.lazy.areas {
            ensure!(s < e, Layout @ s, "empty lazy area at {s:#x}");
            ensure!(
                self.lazy.lo <= s && e <= self.lazy.hi,
                Bounds @ s,
                "lazy area {s:#x} outside the flush range"
            );
            all.push((s, e, "lazy"));
        }
        all.sort_unstable();
        let mut sums = [0u64; 3];
        let mut expect = lo;
        for &(s, e, kind) in &all {
            // Without an index, the gaps between free and lazy ranges are
            // the live areas.
            if !self.indexed && s > expect {
                sums[1] += s - expect;
                expect = s;
            }
            ensure!(s == expect, Layout @ s, "{kind} range at {s:#x}: expected one at {expect:#x}");
            expect = e;
            sums[match kind {
                "free" => 0,
                "busy" => 1,
                _ => 2,
            }] += e - s;
        }
        if !self.indexed && expect < hi {
            sums[1] += hi - expect;
            expect = hi;
        }
        ensure!(expect == hi, Layout @ expect, "ranges end at {expect:#x}, space at {hi:#x}");
        let [free, live, lazy] = sums;
        ensure!(
            free == self.free_bytes,
            Accounting,
            "free bytes {free} != counter {}",
            self.free_bytes
        );
        ensure!(
            live == self.live_bytes,
            Accounting,
            "live bytes {live} != counter {}",
            self.live_bytes
        );
        ensure!(
            lazy == self.lazy.bytes,
            Accounting,
            "lazy bytes {lazy} != counter {}",
            self.lazy.bytes
        );
        ensure!(
            self.lazy.bytes <= self.lazy_max,
            Bounds,
            "lazy bytes above lazy_max after a free"
        );
        Ok(())
    }
}

/// A [`VmapAllocator`] behind one lock, shareable between threads: the
/// kernel's single `vmap_area_lock` design.
#[cfg(feature = "std")]
pub type SharedVmap = crate::range::Locked<VmapAllocator>;

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn va(start: u64, end: u64) -> VmapAllocator {
        VmapAllocator::new(start, end).unwrap()
    }

    fn free_blocks(v: &VmapAllocator) -> Vec<(u64, u64)> {
        v.free_blocks().map(|r| (r.start, r.end)).collect()
    }

    /// The size the module docs give (a field added changes it there too).
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn the_allocator_is_the_size_its_docs_say() {
        assert_eq!(core::mem::size_of::<VmapAllocator>(), 896);
        assert_eq!(core::mem::size_of::<Pending>(), 48);
    }

    #[test]
    fn fit_types_split_as_drawn() {
        let mut v = va(0, 100);
        // LE: the block's start moves up.
        assert_eq!(v.alloc(10, 1), Ok(0));
        assert_eq!(free_blocks(&v), [(10, 100)]);
        // NE: aligned inside, leaving a left remainder.
        assert_eq!(v.alloc(10, 32), Ok(32));
        assert_eq!(free_blocks(&v), [(10, 32), (42, 100)]);
        // RE: a window that ends at the block's end.
        assert_eq!(v.alloc_in(8, 1, 92, 100), Ok(92));
        assert_eq!(free_blocks(&v), [(10, 32), (42, 92)]);
        // FL: the whole block.
        assert_eq!(v.alloc(22, 1), Ok(10));
        assert_eq!(free_blocks(&v), [(42, 92)]);
        v.check().unwrap();
    }

    #[test]
    fn free_merges_both_sides_at_once() {
        let mut v = va(0, 30);
        let a = v.alloc(10, 1).unwrap();
        let b = v.alloc(10, 1).unwrap();
        let c = v.alloc(10, 1).unwrap();
        v.free(a).unwrap();
        v.free(c).unwrap();
        assert_eq!(free_blocks(&v), [(0, 10), (20, 30)]);
        v.free(b).unwrap();
        assert_eq!(free_blocks(&v), [(0, 30)]);
        assert_eq!(v.stats().free_blocks, 1);
        v.check().unwrap();
    }

    #[test]
    fn bad_frees_change_nothing() {
        let mut v = va(0, 100);
        let a = v.alloc(10, 1).unwrap();
        let before = free_blocks(&v);
        assert_eq!(v.free(a + 1), Err(FreeError::NotAllocated));
        assert_eq!(v.free(50), Err(FreeError::NotAllocated));
        assert_eq!(v.free(a), Ok(10));
        assert_eq!(v.free(a), Err(FreeError::NotAllocated));
        assert_eq!(v.free_lazy(a), Err(FreeError::NotAllocated));
        assert_ne!(before, free_blocks(&v));
        v.check().unwrap();
    }

    #[test]
    fn invalid_requests() {
        let mut v = va(0, 100);
        assert_eq!(v.alloc(0, 1), Err(AllocError::Invalid));
        assert_eq!(v.alloc(1, 3), Err(AllocError::Invalid));
        assert_eq!(v.alloc(1, 0), Err(AllocError::Invalid));
        assert_eq!(v.alloc_in(1, 1, 5, 5), Err(AllocError::Invalid));
        assert_eq!(v.alloc_in(1, 1, 200, 300), Err(AllocError::NoSpace));
        assert_eq!(v.alloc(101, 1), Err(AllocError::NoSpace));
        assert_eq!(v.stats().live_areas, 0);
        v.check().unwrap();
    }

    #[test]
    fn edges_near_u64_max_never_overflow() {
        let top = u64::MAX;
        let mut v = va(top - 100, top);
        assert_eq!(v.alloc(u64::MAX, 1), Err(AllocError::NoSpace));
        assert_eq!(v.alloc(1, 1 << 63), Err(AllocError::NoSpace));
        assert_eq!(v.alloc(100, 1), Ok(top - 100));
        assert_eq!(v.alloc(1, 1), Err(AllocError::NoSpace));
        v.free(top - 100).unwrap();
        assert_eq!(v.alloc_in(10, 1, top - 10, top), Ok(top - 10));
        v.check().unwrap();

        let mut w = va(0, u64::MAX);
        assert_eq!(w.alloc(1, 1 << 63), Ok(0));
        assert_eq!(w.alloc(1, 1 << 63), Ok(1 << 63));
        assert_eq!(w.alloc(1, 1 << 63), Err(AllocError::NoSpace));
        // Free: [1, 2^63) and [2^63 + 1, MAX).
        assert_eq!(w.alloc((1 << 63) - 1, 1), Ok(1));
        assert_eq!(w.alloc((1 << 63) - 1, 1), Err(AllocError::NoSpace));
        assert_eq!(w.alloc((1 << 63) - 2, 1), Ok((1 << 63) + 1));
        w.check().unwrap();
        // No area starts at u64::MAX (the busy index's empty-slot key).
        assert_eq!(w.free(u64::MAX), Err(FreeError::NotAllocated));
        assert_eq!(w.free_lazy(u64::MAX), Err(FreeError::NotAllocated));
        w.check().unwrap();
    }

    #[test]
    fn exact_lowest_fit_past_near_misses() {
        // Free blocks that are long enough but wrongly aligned must be
        // examined one by one and rejected, without missing a later fit.
        let mut v = va(0, 64);
        let mut busy = vec![];
        for i in 0..16u64 {
            busy.push(v.alloc(4, 1).unwrap());
            assert_eq!(busy[i as usize], 4 * i);
        }
        // Free [4k+1..] style holes: free the 4-byte areas 1, 5, 9 -> free
        // blocks [4,8), [20,24), [36,40), all 4-aligned and of length 4.
        for i in [1, 5, 9] {
            v.free(busy[i]).unwrap();
        }
        // Size 4 align 8: [4,8) and [20,24) are near misses; [36,40)? 36%8=4,
        // also a miss -> NoSpace after checking all three.
        assert_eq!(v.alloc(4, 8), Err(AllocError::NoSpace));
        // Size 2 align 8: no block holds a multiple of 8.
        assert_eq!(v.alloc(2, 8), Err(AllocError::NoSpace));
        // Free [40, 44) too: it merges with [36, 40) into [36, 44), whose
        // only multiple of 8 (40) has room; the kernel's search for
        // size + align - 1 = 11 bytes would find nothing at all.
        v.free(busy[10]).unwrap();
        assert_eq!(v.alloc(4, 8), Ok(40));
        // Size 2 align 2: lowest is 4.
        assert_eq!(v.alloc(2, 2), Ok(4));
        v.check().unwrap();
    }

    #[test]
    fn lazy_is_not_reused_until_purge_and_flushes_once() {
        let mut v = va(0, 40);
        let a = v.alloc(10, 1).unwrap();
        let b = v.alloc(10, 1).unwrap();
        let _c = v.alloc(10, 1).unwrap();
        v.free_lazy(a).unwrap();
        v.free_lazy(b).unwrap();
        assert_eq!(v.alloc(10, 1), Ok(30));
        let mut flushes = vec![];
        assert!(v.purge(&mut |s, e| flushes.push((s, e))));
        assert_eq!(flushes, [(0, 20)]);
        assert!(!v.purge(&mut |s, e| flushes.push((s, e))));
        assert_eq!(flushes.len(), 1);
        assert_eq!(free_blocks(&v), [(0, 20)]);
        v.check().unwrap();
    }

    #[test]
    fn nospace_purges_once_and_retries() {
        let mut v = va(0, 20);
        let a = v.alloc(20, 1).unwrap();
        v.free_lazy(a).unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
        let s2 = seen.clone();
        v.set_flush_hook(Some(alloc::boxed::Box::new(move |s, e| {
            s2.lock().unwrap().push((s, e))
        })));
        assert_eq!(v.alloc(5, 1), Ok(0));
        assert_eq!(*seen.lock().unwrap(), [(0, 20)]);
        assert_eq!(v.stats().flushes, 1);
        v.check().unwrap();
    }

    #[test]
    fn lazy_max_is_strictly_greater() {
        let mut v = va(0, 100);
        v.set_lazy_max(20);
        let a = v.alloc(10, 1).unwrap();
        let b = v.alloc(10, 1).unwrap();
        let c = v.alloc(10, 1).unwrap();
        v.free_lazy(a).unwrap();
        v.free_lazy(b).unwrap();
        assert_eq!(v.stats().lazy_bytes, 20); // equal: no purge yet
        v.free_lazy(c).unwrap();
        assert_eq!(v.stats().lazy_bytes, 0); // 30 > 20: purged
        assert_eq!(v.stats().flushes, 1);
        assert_eq!(free_blocks(&v), [(0, 100)]);
        v.check().unwrap();
    }

    #[test]
    fn purges_count_only_purges_that_released_something() {
        let mut v = va(0, 100);
        assert!(!v.purge(&mut |_, _| {}));
        assert_eq!((v.stats().purges, v.stats().flushes), (0, 0));
        let a = v.alloc(10, 1).unwrap();
        v.free_lazy(a).unwrap();
        assert!(v.purge(&mut |_, _| {}));
        assert!(!v.purge(&mut |_, _| {}));
        assert_eq!((v.stats().purges, v.stats().flushes), (1, 1));
    }

    #[test]
    fn check_errors_name_the_invariant_and_the_place() {
        use crate::error::Invariant;
        let mut v = va(0, 100);
        v.alloc(10, 1).unwrap();
        v.free_bytes += 1;
        let e = v.check().unwrap_err();
        assert_eq!(
            (e.component(), e.invariant()),
            ("mmkit::vmap", Invariant::Accounting)
        );
        v.free_bytes -= 1;
        v.check().unwrap();
        // A lazy area overlapping a free block: the partition breaks there.
        v.lazy.areas.push((40, 50));
        (v.lazy.lo, v.lazy.hi) = (40, 50);
        let e = v.check().unwrap_err();
        assert_eq!((e.invariant(), e.at()), (Invariant::Layout, Some(40)));
        assert!(
            alloc::format!("{e}").starts_with("mmkit::vmap: layout invariant violated at 0x28: ")
        );
    }

    // The brute-force model of the tests below: a sorted list of free
    // ranges, linear lowest fit (`crate::testkit`).
    use crate::testkit::{model_free, model_take};

    /// The model's lowest fit in `[ws, we)`, taken out of its free blocks.
    fn model_alloc(
        model: &mut Vec<(u64, u64)>,
        size: u64,
        align: u64,
        ws: u64,
        we: u64,
    ) -> Option<u64> {
        let a = model
            .iter()
            .find_map(|&(s, e)| crate::range::fit_in(s.max(ws), e.min(we), size, align))?;
        model_take(model, a, size);
        Some(a)
    }

    /// [`model_alloc`], with the allocator's purge and retry when it finds
    /// nothing and areas wait in `lazy`.
    fn model_alloc_purging(
        model: &mut Vec<(u64, u64)>,
        lazy: &mut Vec<(u64, u64)>,
        size: u64,
        align: u64,
        ws: u64,
        we: u64,
    ) -> Option<u64> {
        if let Some(a) = model_alloc(model, size, align, ws, we) {
            return Some(a);
        }
        if lazy.is_empty() {
            return None;
        }
        model_purge(model, lazy);
        model_alloc(model, size, align, ws, we)
    }

    /// The model's purge: every lazily freed area returns to free space.
    fn model_purge(model: &mut Vec<(u64, u64)>, lazy: &mut Vec<(u64, u64)>) {
        for (s, e) in lazy.drain(..) {
            model_free(model, s, e);
        }
    }

    #[test]
    fn random_ops_match_linear_scan() {
        let mut rnd = crate::testkit::xorshift(0x9e3779b97f4a7c15u64);
        for round in 0..20 {
            let (lo, hi) = if round % 2 == 0 {
                (0, 4096)
            } else {
                (u64::MAX - 4096, u64::MAX)
            };
            let mut v = va(lo, hi);
            let mut model: Vec<(u64, u64)> = vec![(lo, hi)];
            let mut live: Vec<(u64, u64)> = vec![];
            for _ in 0..400 {
                if rnd() % 3 != 0 || live.is_empty() {
                    let size = rnd() % 64 + 1;
                    let align = 1u64 << (rnd() % 8);
                    let ws = lo + rnd() % 4096;
                    let we = ws.saturating_add(rnd() % 4096 + 1);
                    let want = model_alloc(&mut model, size, align, ws, we);
                    assert_eq!(v.alloc_in(size, align, ws, we).ok(), want);
                    if let Some(a) = want {
                        live.push((a, a + size));
                    }
                } else {
                    let (s, e) = live.swap_remove((rnd() % live.len() as u64) as usize);
                    assert_eq!(v.free(s), Ok(e - s));
                    model_free(&mut model, s, e);
                }
                v.check().unwrap();
                assert_eq!(free_blocks(&v), model);
            }
        }
    }

    /// The wilderness can lie below an isolated block: a lower fit in it
    /// is found before the isolated block is taken.
    #[test]
    fn a_wilderness_below_an_isolated_block_is_searched_first() {
        let p = 0x1000;
        let mut v = va(0, 100 * p);
        for (a, size) in [(0, 1), (1, 1), (2, 2), (4, 1), (5, 95)] {
            assert_eq!(v.alloc(size * p, p), Ok(a * p));
        }
        // Both freed areas merge with nothing: isolated [0, 1) and [2, 4).
        v.free(0).unwrap();
        v.free(2 * p).unwrap();
        // Two pages: [0, 1) is looked at in vain and pushed into the tree,
        // where, the only block, it is the wilderness.
        assert_eq!(v.alloc(2 * p, p), Ok(2 * p));
        assert_eq!(v.isolated.len(), 0);
        v.free(2 * p).unwrap(); // isolated [2, 4) again
        assert_eq!(v.isolated.len(), 1);
        assert_eq!(v.alloc(p, p), Ok(0));
        assert_eq!(v.alloc(p, p), Ok(2 * p));
        v.check().unwrap();
    }

    /// A freed area between two free blocks waits as the pending area,
    /// the blocks left in the tree as its pads: taken back whole without a
    /// change to the tree, found exactly when a request takes part of the
    /// extent or a pad, and merged before a free beside a pad.
    #[test]
    fn a_pending_area_is_exact_in_every_use() {
        let p = 0x1000;
        let blocks = |v: &VmapAllocator| -> Vec<(u64, u64)> {
            free_blocks(v)
                .iter()
                .map(|&(s, e)| (s / p, e / p))
                .collect()
        };
        // One-page areas at pages 0..5, pages 5..95 live, the wilderness
        // [95, 100) above; pages 1 and 3 freed and moved into the tree (the
        // pads to be: a pad is never the wilderness).
        let mut v = va(0, 100 * p);
        for a in 0..5 {
            assert_eq!(v.alloc(p, p), Ok(a * p));
        }
        assert_eq!(v.alloc(90 * p, p), Ok(5 * p));
        v.free(p).unwrap();
        v.free(3 * p).unwrap();
        v.settle_isolated();
        assert_eq!((v.free.len(), v.isolated.len()), (3, 0));
        // Page 2 freed: pending, [1, 4) one free block, the tree as it was.
        v.free(2 * p).unwrap();
        let h = v.pending.held().unwrap();
        assert_eq!((h.area, h.extent), ((2 * p, 3 * p), (p, 4 * p)));
        assert_eq!(v.free.len(), 3);
        assert_eq!(blocks(&v), [(1, 4), (95, 100)]);
        assert_eq!(v.stats().free_blocks, 2);
        assert_eq!(v.stats().largest_free, 5 * p);
        v.check().unwrap();
        // Two-page aligned: exactly the area, taken back.
        assert_eq!(v.alloc(p, 2 * p), Ok(2 * p));
        assert!(v.pending.held().is_none());
        assert_eq!(
            (v.free.len(), blocks(&v)),
            (3, vec![(1, 2), (3, 4), (95, 100)])
        );
        // Again pending; one page: the lowest is the pad at 1, in the tree.
        v.free(2 * p).unwrap();
        assert!(v.pending.held().is_some());
        assert_eq!(v.alloc(p, p), Ok(p));
        assert!(v.pending.held().is_none());
        assert_eq!(blocks(&v), [(2, 4), (95, 100)]);
        v.check().unwrap();
        // Pending with one pad, [2, 3) beside [3, 4); two pages: the extent.
        v.free(p).unwrap();
        v.alloc(p, p).unwrap(); // back to [2, 4) in the tree
        assert_eq!(v.alloc(p, 2 * p), Ok(2 * p));
        v.free(2 * p).unwrap();
        assert_eq!(v.pending.held().unwrap().extent, (2 * p, 4 * p));
        assert_eq!(v.alloc(2 * p, p), Ok(2 * p));
        assert_eq!(blocks(&v), [(95, 100)]);
        v.check().unwrap();
        // Pending again, then a free beside its pad: merged into one.
        v.free(2 * p).unwrap(); // nothing beside: isolated
        v.settle_isolated();
        assert_eq!(v.alloc(p, p), Ok(2 * p)); // [3, 4) stays in the tree
        v.free(2 * p).unwrap();
        assert_eq!(v.pending.held().unwrap().extent, (2 * p, 4 * p));
        v.free(4 * p).unwrap();
        assert!(v.pending.held().is_none());
        assert_eq!(blocks(&v), [(2, 5), (95, 100)]);
        assert_eq!(v.stats().free_blocks, 2);
        v.check().unwrap();
    }

    /// Churn that keeps isolated blocks and the pending area in use (areas
    /// freed between live ones or beside free blocks, and taken back),
    /// mixed with everything that must see them: frees beside them, lazy
    /// frees and purges, windows, alignments, growing, shrinking and the
    /// highest fit. Every answer and every free block is checked against
    /// the model.
    #[test]
    fn isolated_and_pending_blocks_stay_exact_through_every_operation() {
        let mut rnd = crate::testkit::xorshift(0x2545_f491_4f6c_dd1du64);
        let (lo, hi) = (0x1000, 0x1000 + 64 * 256);
        let mut v = va(lo, hi);
        let mut model = vec![(lo, hi)];
        let mut live: Vec<(u64, u64)> = vec![];
        let mut lazy: Vec<(u64, u64)> = vec![];
        let (mut kept, mut taken_back) = (0, 0);
        let (mut held, mut held_back) = (0, 0);
        // Packed areas of 1..4 units of 64.
        for _ in 0..48 {
            let size = 64 * (1 + rnd() % 4);
            let a = model_alloc(&mut model, size, 64, lo, hi).unwrap();
            assert_eq!(v.alloc(size, 64), Ok(a));
            live.push((a, a + size));
        }
        for step in 0..4000 {
            let kept_before = v.isolated.len();
            match rnd() % 16 {
                // Free an area and ask for its size back: the common case.
                0..=9 if !live.is_empty() => {
                    let (s, e) = live.swap_remove((rnd() % live.len() as u64) as usize);
                    assert_eq!(v.free(s), Ok(e - s));
                    model_free(&mut model, s, e);
                    kept += usize::from(v.isolated.len() > kept_before);
                    let pending = v.pending.held().map(|h| h.area);
                    held += usize::from(pending.is_some());
                    let size = if rnd() % 4 == 0 {
                        64 * (1 + rnd() % 4)
                    } else {
                        e - s
                    };
                    let align = 64 << (rnd() % 3);
                    let want = model_alloc_purging(&mut model, &mut lazy, size, align, lo, hi);
                    let before = v.isolated.len();
                    assert_eq!(v.alloc(size, align).ok(), want, "step {step}");
                    taken_back += usize::from(v.isolated.len() < before);
                    held_back +=
                        usize::from(pending.is_some() && pending == want.map(|a| (a, a + size)));
                    if let Some(a) = want {
                        live.push((a, a + size));
                    }
                }
                10 if !live.is_empty() => {
                    let (s, e) = live.swap_remove((rnd() % live.len() as u64) as usize);
                    assert_eq!(v.free_lazy(s), Ok(e - s));
                    lazy.push((s, e));
                }
                11 => {
                    if v.purge(&mut |_, _| {}) {
                        model_purge(&mut model, &mut lazy);
                    }
                    assert!(lazy.is_empty());
                }
                12 => {
                    let (size, ws) = (64 * (1 + rnd() % 3), lo + 64 * (rnd() % 256));
                    let want = model_alloc_purging(&mut model, &mut lazy, size, 64, ws, ws + 1024);
                    assert_eq!(v.alloc_in(size, 64, ws, ws + 1024).ok(), want);
                    if let Some(a) = want {
                        live.push((a, a + size));
                    }
                }
                13 => {
                    // The highest fit, from the model's last block that holds it.
                    let size = 64;
                    let highest = |m: &[(u64, u64)]| {
                        m.iter()
                            .rev()
                            .find(|&&(s, e)| e - s >= size)
                            .map(|&(_, e)| e - size)
                    };
                    let mut want = highest(&model);
                    if want.is_none() && !lazy.is_empty() {
                        // A failing request purges once and retries.
                        model_purge(&mut model, &mut lazy);
                        want = highest(&model);
                    }
                    let req = crate::request::Request::bytes(size)
                        .unwrap()
                        .policy(crate::request::Policy::Highest);
                    assert_eq!(v.allocate(req).ok(), want);
                    if let Some(a) = want {
                        model_alloc(&mut model, size, 1, a, a + size).unwrap();
                        live.push((a, a + size));
                    }
                }
                14 => {
                    // Grow by a unit at the top, then shrink it away if free.
                    let (s, e) = v.space();
                    v.grow(s..e + 64).unwrap();
                    model_free(&mut model, e, e + 64);
                    if v.shrink(s..e).is_ok() {
                        model_alloc(&mut model, 64, 1, e, e + 64).unwrap();
                    }
                }
                _ => {}
            }
            v.check().unwrap();
            assert_eq!(free_blocks(&v), model, "step {step}");
        }
        // The churn used the array and the pending area: blocks went in
        // and came back out.
        assert!(
            kept > 100 && taken_back > 100 && held > 300 && held_back > 100,
            "kept {kept}, taken back {taken_back}, held {held}, held back {held_back}"
        );
    }
}
