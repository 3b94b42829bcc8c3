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
//!              (a `crate::lazy::LazyList`, which decides when)
//!   detached:  areas out of the busy index whose holder releases them
//!              (counted only: see `detached`)
//! ```
//!
//! Metadata: a free block is 16 bytes in a leaf of the
//! `tree::btree::BTree` (8 to 16 blocks per 280-byte leaf)
//! plus its share of the inner nodes (8 to 16 children per 600-byte node):
//! at most about 44 bytes, 24-32 measured in the bench's workloads; a
//! live area is one 16-byte slot of the busy
//! index (17.9 to 35.9 bytes with the table's empty slots and counts); a
//! lazy area is 16 bytes in the lazy list; the isolated blocks are a fixed
//! 144 bytes inside the allocator and the pending area 48; with the last
//! free's neighbours and their path (the finger, with the tree's shape
//! count it was found at and whether descending from it has paid), the
//! tree's last failed search, the bound its last aligned search left with
//! the path to its leaf, the root's longest block and length classes, the
//! busy slot last emptied, the live-area count, the detached count and bytes, the two flags of
//! [`without_busy_index`](VmapAllocator::without_busy_index) and the list
//! of holes in a memory map (see `memmap`) and the tree's best-fit size
//! index (empty until a best fit is asked for), the allocator itself is
//! 968 bytes (`size_of::<VmapAllocator>()` on 64-bit targets). Released
//! nodes are reused and none of these shrink, so steady-state operation
//! allocates no heap memory (the best-fit index's nodes come from the
//! tree's pools too).

use crate::ensure;
use crate::error::{AllocError, CheckError, FreeError};
use crate::lazy::LazyList;
use crate::range::{FlushHook, RangeAllocator, RangeStats, DEFAULT_LAZY_MAX};
use crate::storage::{Heap, Storage};
use crate::tree::btree::{BTree, Neighbours, Pos};

/// Writes a trait's `impl` block (`impl Trait { .. }`) once for each
/// storage: for the heap as a block of non-generic methods,
/// which this crate compiles, inlining into one another its generic
/// helpers as it would inline non-generic ones (a generic method is
/// compiled in the crate that calls it, with that crate's inlining), and
/// for fixed storage.
macro_rules! per_storage {
    ($(#[$attr:meta])* impl $trait:path { $($body:tt)* }) => {
        $(#[$attr])*
        impl $trait for VmapAllocator<crate::storage::Heap> { $($body)* }
        $(#[$attr])*
        impl<const N: usize> $trait for VmapAllocator<crate::storage::Fixed<N>> { $($body)* }
    };
}

mod api;
pub(crate) mod busy;
mod detached;
mod fixed;
mod isolated;
mod memmap;
mod pending;
#[cfg(feature = "std")]
pub mod pooled;
mod sized;
use alloc::vec::Vec;
use busy::{BusyIndex, Probe};
use isolated::Isolated;
use memmap::Holes;
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
/// `free_bytes + live_bytes + lazy_bytes + detached_bytes == end - start -
/// holes` (the hull
/// less the unmanaged gaps inside it, see [`add_free`](Self::add_free));
/// free blocks are
/// maximal (no two adjacent); free, busy and lazy ranges are disjoint; every
/// augmented value of the tree holds (keys and maxima exact, alignment
/// summaries upper bounds of the true usable lengths).
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
pub struct VmapAllocator<S: Storage = Heap> {
    /// The hull of the managed space (`start == end`: nothing managed).
    start: u64,
    end: u64,
    /// The gaps inside the hull that are not managed (see `memmap`).
    holes: Holes<S>,
    /// Maximal free blocks, augmented with the largest block per subtree.
    free: BTree<S>,
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
    /// Lazily freed areas, waiting for a purge, and the threshold
    /// (`lazy_max`) past which they are purged.
    lazy: LazyList<(u64, u64)>,
    flush_hook: Option<FlushHook>,
    free_bytes: u64,
    live_bytes: u64,
    /// Live areas (the busy index's length when it holds them all).
    live_count: u64,
    /// Areas detached from the busy index and not yet released, and their
    /// bytes (see `detached`).
    detached_count: u64,
    detached_bytes: u64,
    /// Made [`without_busy_index`](Self::without_busy_index): frees carry
    /// their size, and `free(addr)` is refused.
    sized_only: bool,
    /// Whether `busy` holds the live areas: always, but in release builds
    /// of a `sized_only` allocator (see `sized`).
    indexed: bool,
    /// Whether an aligned request turns the free tree's alignment
    /// summaries on (see [`without_align_summaries`](Self::without_align_summaries)).
    align_summaries: bool,
    purges: u64,
    flushes: u64,
}

impl<S: Storage> core::fmt::Debug for VmapAllocator<S>
where
    Self: RangeAllocator,
{
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
        Ok(Self::with_space(start, end))
    }

    /// An allocator managing `[start, end)`, all free (nothing when
    /// `start == end`).
    fn with_space(start: u64, end: u64) -> Self {
        let mut free = BTree::new();
        if start < end {
            free.insert(start, end);
        }
        let mut va = Self::from_parts(free, Holes::new(), BusyIndex::new());
        (va.start, va.end, va.free_bytes) = (start, end, end - start);
        va
    }
}

impl<S: Storage> VmapAllocator<S>
where
    Self: RangeAllocator,
{
    /// An allocator over the empty `free` tree and `holes` and the busy
    /// index `busy`, managing nothing yet.
    const fn from_parts(free: BTree<S>, holes: Holes<S>, busy: BusyIndex) -> Self {
        VmapAllocator {
            start: 0,
            end: 0,
            holes,
            free,
            nb: Neighbours::new(),
            busy,
            isolated: Isolated::new(),
            pending: Pending::new(),
            lazy: LazyList::new(DEFAULT_LAZY_MAX),
            flush_hook: None,
            free_bytes: 0,
            live_bytes: 0,
            live_count: 0,
            detached_count: 0,
            detached_bytes: 0,
            sized_only: false,
            indexed: true,
            align_summaries: true,
            purges: 0,
            flushes: 0,
        }
    }

    /// This allocator with the free tree's alignment summaries left off:
    /// an aligned request no longer turns them on (once on, they stay).
    ///
    /// With them, a lowest fit at any alignment is O(log n), and every
    /// change to the tree keeps them up to date from the first aligned
    /// request on, for unaligned requests too (docs/bench-history.md has
    /// their cost in a kernel's vmalloc). Without them an aligned search enters
    /// every subtree with a block long enough and checks the alignment in
    /// its leaves: the same exact lowest fit, O(log n) while the long
    /// enough blocks take the alignment, up to O(n) when many of them
    /// miss it. For a user whose aligned requests are few (a kernel's
    /// vmalloc: `vm_map_ram` blocks, some stacks).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 1 << 30).unwrap().without_align_summaries();
    /// va.alloc(0x1000, 0x1000).unwrap();
    /// assert_eq!(va.alloc(0x1000, 0x10_0000), Ok(0x10_0000)); // still the lowest fit
    /// ```
    pub fn without_align_summaries(mut self) -> Self {
        self.align_summaries = false;
        self
    }

    /// Turns the free tree's summaries on for a request aligned to
    /// `align`, unless this allocator leaves them off.
    fn enable_summaries(&mut self, align: u64) {
        if self.align_summaries {
            self.free.enable_summaries(align);
        }
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
        if !self.indexed {
            return None;
        }
        self.busy.get(addr).map(|end| end - addr)
    }

    /// Cuts `[a, a + size)` out of the free block at `pos`, per its
    /// [`FitType`], as the search found it (no second descent).
    #[inline(always)]
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

    /// Whether [`free_batch`](RangeAllocator::free_batch) joins runs: with
    /// a busy index to take the areas from, and storage that may add more
    /// than one block in an operation.
    fn joins_batches(&self) -> bool {
        !S::FIXED && self.indexed && !self.sized_only
    }

    /// The body of [`free_batch`](RangeAllocator::free_batch) when it
    /// joins runs.
    fn free_joined(&mut self, areas: &[(u64, u64)]) -> Result<(), (usize, FreeError)> {
        let mut run: Option<(u64, u64)> = None;
        for (i, &(s, e)) in areas.iter().enumerate() {
            let taken = self
                .busy
                .remove_probed_if(s, self.busy.probe(s), |end| end == e);
            if !matches!(taken, Some(Ok(_))) {
                self.end_run(run);
                let err = match taken {
                    Some(_) => FreeError::SizeMismatch,
                    None => FreeError::NotAllocated,
                };
                return Err((i, err));
            }
            self.live_bytes -= e - s;
            self.live_count -= 1;
            self.join_run(&mut run, s, e);
        }
        self.end_run(run);
        Ok(())
    }

    /// Returns the run [`join_run`](Self::join_run) built, if any, to
    /// free space.
    #[inline]
    fn end_run(&mut self, run: Option<(u64, u64)>) {
        if let Some((rs, re)) = run {
            self.merge_or_add(rs, re);
        }
    }

    /// Adds `[s, e)` to `run` when it touches it (above or below);
    /// otherwise returns the run to free space and starts a new one.
    #[inline]
    fn join_run(&mut self, run: &mut Option<(u64, u64)>, s: u64, e: u64) {
        *run = match *run {
            Some((rs, re)) if re == s => Some((rs, e)),
            Some((rs, re)) if e == rs => Some((s, re)),
            Some((rs, re)) => {
                self.merge_or_add(rs, re);
                Some((s, e))
            }
            None => Some((s, e)),
        };
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
    #[inline(always)]
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
        // Once best fit is asked for, no area is held pending: its pads
        // would stand in the size index for the extent it belongs to.
        let may_hold = may_hold && !self.free.has_size_index();
        if !joins_prev && !joins_next {
            // Fixed storage holds no block aside: one operation adds at
            // most one block to the tree, the room checked before it.
            if S::FIXED || !self.isolated.push(js, je) {
                self.free.insert_at(nb, js, je);
            }
        } else if !(!S::FIXED && may_hold && (js, je) == (s, e) && self.hold_pending(s, e)) {
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
        if self.lazy.push((s, e)) {
            self.purge_with_hook();
        }
    }

    /// Whether `[s, e)` overlaps a lazily freed area.
    fn overlaps_lazy(&self, s: u64, e: u64) -> bool {
        self.lazy.iter().any(|&(ls, le)| ls < e && s < le)
    }

    /// The end of the lazily freed area that starts at `s`, if any.
    fn lazy_end(&self, s: u64) -> Option<u64> {
        self.lazy.iter().find(|a| a.0 == s).map(|a| a.1)
    }

    /// Purge through the installed hook (threshold and failure purges).
    fn purge_with_hook(&mut self) -> bool {
        crate::range::purge_through_hook(self, |a| &mut a.flush_hook)
    }

    /// The exact lowest fit in `[lo, hi)`, in the tree, an isolated block
    /// or the pending extent, made a live area.
    #[inline(always)]
    fn try_alloc(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        self.enable_summaries(align);
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

    /// Makes `[a, a + size)`, found at `pos`, a live area. (The busy
    /// index's home bucket is not read ahead here, as `free` reads it
    /// before its descent: see docs/bench-history.md.)
    #[inline(always)]
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

per_storage! {
impl RangeAllocator {
    #[inline]
    fn space(&self) -> (u64, u64) {
        (self.start, self.end)
    }

    /// # Complexity
    /// As [`alloc_in`](RangeAllocator::alloc_in).
    fn alloc(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        self.alloc_in(size, align, self.start, self.end)
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
        self.alloc_room()?;
        crate::range::alloc_with_purge_retry(
            self,
            (size, align, vstart, vend),
            Self::try_alloc,
            Self::purge_with_hook,
        )
    }

    /// Every [`Policy`](crate::request::Policy), through
    /// [`allocate`](Self::allocate).
    fn alloc_placed(
        &mut self,
        size: u64,
        align: u64,
        (vstart, vend): (u64, u64),
        policy: crate::request::Policy,
    ) -> Result<u64, AllocError> {
        let req = crate::request::Request::bytes(size).ok_or(AllocError::Invalid)?;
        self.allocate(req.align(align).within(vstart..vend).policy(policy))
            .map_err(AllocError::from)
    }

    /// # Complexity
    /// O(log n).
    fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
        crate::debug_check!(self);
        if self.sized_only {
            return Err(FreeError::Invalid);
        }
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

    /// Each area leaves the busy index (its end checked), and a run of
    /// areas that follow each other in the list, each adjacent to the run
    /// so far (above or below it), joins the free space with one merge.
    ///
    /// # Complexity
    /// O(k) index removals and O(r log n) for r runs.
    fn free_batch(&mut self, areas: &[(u64, u64)]) -> Result<(), (usize, FreeError)> {
        crate::debug_check!(self);
        if !self.joins_batches() {
            return crate::range::free_each(self, areas);
        }
        self.free_joined(areas)
    }

    /// Takes the area out of the busy index (its end checked).
    ///
    /// # Complexity
    /// O(1) expected.
    fn detach(&mut self, start: u64, end: u64) -> Result<crate::range::Detached, FreeError> {
        self.detach_body(start, end)
    }

    /// Checks each handle against the space and the detached counts and
    /// joins runs as [`free_batch`](RangeAllocator::free_batch) does,
    /// with no busy-index lookup.
    ///
    /// # Complexity
    /// O(k) for k areas, and O(r log n) for r runs.
    fn release_detached(
        &mut self,
        areas: impl IntoIterator<Item = crate::range::Detached>,
    ) -> Result<(), (crate::range::Detached, FreeError)> {
        self.release_body(areas)
    }

    /// # Complexity
    /// O(log n), plus a purge when the lazy bytes pass `lazy_max`.
    fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
        crate::debug_check!(self);
        if self.sized_only {
            return Err(FreeError::Invalid);
        }
        let (s, e) = self.take_busy(addr, self.busy.probe(addr))?;
        self.defer(s, e);
        Ok(e - s)
    }

    /// # Complexity
    /// O(k log n) for k lazy areas.
    fn purge(&mut self, flush: &mut dyn FnMut(u64, u64)) -> bool {
        let Some(batch) = self.lazy.take() else {
            return false; // nothing released: not counted as a purge
        };
        self.purges += 1;
        let (lo, hi) = batch.span;
        let mut areas = batch.items;
        // In address order, consecutive merges walk nearby tree paths (warm
        // in cache), and adjacent lazy areas join before touching the tree.
        // Downwards, so that a batch at the top of the used space grows the
        // wilderness (no path to fix) instead of a block in the tree whose
        // every ancestor sees its length change.
        areas.sort_unstable();
        let mut run: Option<(u64, u64)> = None;
        for &(s, e) in areas.iter().rev() {
            self.join_run(&mut run, s, e);
        }
        self.end_run(run);
        areas.clear();
        self.lazy.recycle(areas); // keep the capacity: no allocation next time
                                  // One flush covers the whole batch. It runs last: nothing can reuse
                                  // the batch before we return, and a flush that panics finds every
                                  // invariant (lazy_max included) already holding.
        self.flushes += 1;
        flush(lo, hi);
        true
    }

    fn set_lazy_max(&mut self, bytes: u64) {
        crate::debug_check!(self);
        if self.lazy.set_max(bytes) {
            self.purge_with_hook();
        }
    }

    fn set_flush_hook(&mut self, hook: Option<FlushHook>) {
        self.flush_hook = hook;
    }

    fn stats(&self) -> RangeStats {
        let metadata = self.free.heap_bytes()
            + self.busy.heap_bytes()
            + self.lazy.heap_bytes()
            + core::mem::size_of::<Self>();
        RangeStats {
            free_blocks: self.free_block_count() as u64,
            free_bytes: self.free_bytes,
            largest_free: self.largest_free(),
            live_areas: self.live_count,
            live_bytes: self.live_bytes,
            lazy_areas: self.lazy.len() as u64,
            lazy_bytes: self.lazy.bytes(),
            detached_areas: self.detached_count,
            detached_bytes: self.detached_bytes,
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
        let mut prev_hole = lo;
        for (s, e) in self.holes.iter() {
            ensure!(
                prev_hole < s && s < e && e < hi,
                Layout @ s,
                "hole {s:#x}..{e:#x} empty, out of order, touching another or outside the hull"
            );
            prev_hole = e;
            all.push((s, e, "hole"));
        }
        for &(s, e) in self.lazy.iter() {
            all.push((s, e, "lazy"));
        }
        all.sort_unstable();
        // Without an index, the gaps between free and lazy ranges are the
        // live areas; with one, they are the detached areas.
        let gap = if self.indexed { 3 } else { 1 };
        let mut sums = [0u64; 4];
        let mut expect = lo;
        for &(s, e, kind) in &all {
            if s > expect && (!self.indexed || self.detached_count > 0) {
                sums[gap] += s - expect;
                expect = s;
            }
            ensure!(s == expect, Layout @ s, "{kind} range at {s:#x}: expected one at {expect:#x}");
            expect = e;
            match kind {
                "free" => sums[0] += e - s,
                "busy" => sums[1] += e - s,
                "lazy" => sums[2] += e - s,
                _ => {}
            }
        }
        if expect < hi && (!self.indexed || self.detached_count > 0) {
            sums[gap] += hi - expect;
            expect = hi;
        }
        ensure!(expect == hi, Layout @ expect, "ranges end at {expect:#x}, space at {hi:#x}");
        let [free, live, lazy, detached] = sums;
        ensure!(
            detached == self.detached_bytes
                && (self.detached_count == 0) == (detached == 0)
                && self.detached_count <= detached,
            Accounting,
            "detached: {detached} bytes in gaps, counters {} areas, {} bytes",
            self.detached_count,
            self.detached_bytes
        );
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
            lazy == self.lazy.bytes(),
            Accounting,
            "lazy bytes {lazy} != counter {}",
            self.lazy.bytes()
        );
        // The list's own: each area inside the range its purge flushes.
        self.lazy.check()?;
        ensure!(
            !self.lazy.over(),
            Bounds,
            "lazy bytes above lazy_max after a free"
        );
        Ok(())
    }
}
}

/// The calls written once per storage (`per_storage`), so that the
/// heap's are compiled in this crate, reached from the methods of the same
/// name that code generic over the storage calls. Not meant to be used
/// directly.
#[doc(hidden)]
pub trait PerStorage: crate::range::SizedFree {
    /// [`VmapAllocator::allocate`].
    fn allocate_entry(
        &mut self,
        req: crate::request::Request,
    ) -> Result<u64, crate::request::RequestError>;
}

per_storage! {
    impl PerStorage {
        fn allocate_entry(
            &mut self,
            req: crate::request::Request,
        ) -> Result<u64, crate::request::RequestError> {
            self.allocate_body(req)
        }
    }
}

/// A [`VmapAllocator`] behind one lock, shareable between threads: the
/// kernel's single `vmap_area_lock` design.
#[cfg(feature = "std")]
pub type SharedVmap = crate::range::Locked<VmapAllocator>;

#[cfg(test)]
mod tests;
