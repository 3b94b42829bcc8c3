//! [`Vmalloc`]: areas of mapped frames over any range allocator, each with
//! a guard page, unmapped eagerly or lazily. This file keeps the books (the
//! reserved ranges, live areas, blocks) and answers `lookup`; the call
//! sequences are in `driver.rs`, when a freed range is flushed in
//! `lazy.rs` (its lists are `mmkit::lazy::Retiring`), the checkers in
//! `check.rs`.
//!
//! Every range the layer holds in its range allocator is in exactly one
//! state, and the public calls move it only along these arrows (anything
//! else is a typed error that changes nothing):
//!
//! ```text
//!  reserve ──> reserved ──insert──> live area ──take──> reserved
//!                 │  └──unreserve──> free                  │
//!                 └──retire──> lazy / stuck ──flush──> free (released)
//!  reserve_block ──> block ──free_block──> lazy / stuck
//! ```

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use mmkit::lazy::Retiring;
use mmkit::range::RangeAllocator;
use mmkit::request::Policy;
use mmkit::AllocError;

use super::book::{sorted_at_or_before, AreaBook};
use super::lazy::{lazy_max, Gone, Outcome, Retired, When};
use super::pool::Pools;
use super::{Flush, FramePolicy, Mmu, VmError, PAGE};

/// What an area holds, as the layer needs to know it: its extent, the
/// further ranges it grew by, and the frame behind each mapped page.
pub trait AreaData {
    /// Bytes reserved from the area's start, guard page included.
    fn span(&self) -> u64;
    /// Further ranges of the range allocator that continue the area (grown
    /// in place), freed with it.
    fn pieces(&self) -> &[u64] {
        &[]
    }
    /// The frame mapped at byte offset `off` of the area, if that page is
    /// mapped (for fault reports and checks).
    fn frame_at(&self, off: u64) -> Option<u64>;
    /// Pages mapped (for checks).
    fn mapped_pages(&self) -> u64;
}

/// A live area of the plain layer: `frames.len()` mapped pages from its
/// start, then one guard page. A `vmalloc` area owns its frames (they go
/// back to the frame source with it); a `vmap` area shows the caller's.
/// When the frames of a freed area go back is the layer's
/// [`FramePolicy`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Area {
    /// The frames mapped, in page order (empty once they went back, for an
    /// area waiting for its flush).
    pub frames: Vec<u64>,
    /// Whether the frames came from the frame source (`vmalloc`), not from
    /// the caller (`vmap`).
    pub owned: bool,
    /// The ranges after the area's first one that it grew into in place
    /// (`vrealloc`), each reserved in the range allocator and freed with
    /// it. The area's pages stay contiguous: its guard page is after the
    /// last frame.
    pub pieces: Pieces,
    /// The caller's word for the area, 0 when it gave none: a handle of
    /// its own record of the area, which
    /// [`vfree_tagged`](Vmalloc::vfree_tagged) hands back, as Linux's
    /// `vmap_area` points at its `vm_struct` (see
    /// [`vmalloc_tagged`](Vmalloc::vmalloc_tagged)).
    pub tag: u64,
}

/// The ranges an area grew into in place, in the order it grew: none for
/// nearly every area, so they take one word (no allocation) until the
/// first, and the book's entries stay small.
///
/// ```
/// let mut p = mmkit_vmalloc::Pieces::default();
/// assert!(p.is_empty());
/// p.push(0x5000);
/// p.push(0x9000);
/// assert_eq!(&p[..], [0x5000, 0x9000]);
/// ```
// A boxed vector: one word in the area (a `Vec` takes three, a boxed
// slice two), the extra allocation only for an area that grew.
#[allow(clippy::box_collection)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pieces(Option<Box<Vec<u64>>>);

impl Pieces {
    /// Adds `start` after the others.
    pub fn push(&mut self, start: u64) {
        self.0.get_or_insert_with(Box::default).push(start);
    }
}

impl core::ops::Deref for Pieces {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        self.0.as_deref().map_or(&[], |v| v)
    }
}

impl AreaData for Area {
    fn span(&self) -> u64 {
        (self.frames.len() as u64 + 1) * PAGE
    }

    fn pieces(&self) -> &[u64] {
        &self.pieces
    }

    fn frame_at(&self, off: u64) -> Option<u64> {
        self.frames.get((off / PAGE) as usize).copied()
    }

    fn mapped_pages(&self) -> u64 {
        self.frames.len() as u64
    }
}

/// What the layer knows of an address (the page-fault report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    /// Inside a live area, mapping `pfn`.
    Mapped {
        /// The area's start.
        area: u64,
        /// The frame the page maps.
        pfn: u64,
    },
    /// Inside a live area's range but not mapped: its guard page.
    Guard {
        /// The area's start.
        area: u64,
    },
    /// Inside a range handed out raw (a `vm_map_ram` block).
    Block {
        /// The block's start.
        start: u64,
    },
    /// Inside a freed area whose flush has not happened (on the lazy list)
    /// or was refused (on the stuck list): its PTEs are cleared, TLBs (or
    /// user-space mappings) may still hold them.
    Lazy {
        /// The freed area's start.
        area: u64,
    },
    /// Inside a recently freed area whose flush is done: a use after free.
    Freed {
        /// The freed area's start.
        area: u64,
    },
    /// Nothing live or recently freed (never allocated, or freed long ago).
    Free,
}

/// The layer's traffic counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerStats {
    /// `vmap` calls that succeeded.
    pub maps: u64,
    /// `vunmap` calls that succeeded.
    pub unmaps: u64,
    /// TLB flushes requested (each covers every CPU).
    pub flushes: u64,
    /// Pages those flushes covered.
    pub pages_flushed: u64,
    /// Purges of the lazy and stuck lists that had something to flush.
    pub purges: u64,
    /// Raw-range operations (blocks handed out or freed, purges through a
    /// front end): each one lock acquisition of a shared layer.
    pub block_ops: u64,
    /// Areas and blocks whose flush succeeded and whose ranges were freed.
    pub released: u64,
    /// Ranges a flush refused to release (each kept on the stuck list).
    pub refusals: u64,
}

/// Freed areas remembered for fault reports.
pub(crate) const HISTORY: usize = 64;

/// Areas of mapped frames over the range allocator `R`; `A` is what an
/// area holds.
pub struct Vmalloc<R, A = Area> {
    pub(crate) range: R,
    pub(crate) flush: Flush,
    pub(crate) frames: FramePolicy,
    /// Ranges handed out by `reserve` (or taken out of the books) that are
    /// neither live areas nor retired.
    pub(crate) reserved: BTreeSet<u64>,
    pub(crate) areas: AreaBook<A>,
    pub(crate) blocks: BTreeMap<u64, u64>,
    /// The blocks of [`MapRam`](crate::MapRam) front ends (a subset of
    /// `blocks`), which only their front end frees.
    pub(crate) ram_blocks: BTreeMap<u64, usize>,
    /// Blocks of front ends an eager unmap's flush was refused in.
    pub(crate) ram_unflushed: BTreeSet<u64>,
    /// Frames a retired range still shows though a live area owns them (the
    /// old mapping of a `vrealloc` that moved): `(range start, frames)`,
    /// until that range is released.
    pub(crate) shadows: Vec<(u64, Vec<u64>)>,
    /// Frames freed while a shadow showed them: they go back when it is
    /// released ([`FramePolicy::AfterFlush`]).
    pub(crate) deferred: Vec<u64>,
    /// The span of `vm_map_ram` pages whose flush was refused: the next
    /// `vm_unmap_aliases` flushes it again.
    pub(crate) alias_pending: Option<(u64, u64)>,
    /// Freed and cleared, still allocated in R (live, or detached): the
    /// lazy list (waiting for the purge's flush, its threshold the
    /// policy's) and the stuck list (their flush was refused: retried by
    /// every purge).
    pub(crate) retiring: Retiring<Retired<A>>,
    /// Ranges released lately: `(start, end)`.
    pub(crate) history: [(u64, u64); HISTORY],
    pub(crate) next_hist: usize,
    pub(crate) stats: LayerStats,
    /// Where the range allocator places new ranges.
    pub(crate) place: Policy,
    /// Flushed areas kept allocated in R for reuse by size (none unless
    /// [`set_pools`](Vmalloc::set_pools) asks).
    pub(crate) pools: Pools,
}

impl<R: RangeAllocator, A: AreaData> Vmalloc<R, A> {
    /// A layer over `range` whose freed frames go back at once
    /// ([`FramePolicy::AtOnce`], Linux's default). The layer keeps the lazy
    /// list (a freed range stays allocated in `range` until its flush), so
    /// the range allocator's automatic purge is switched off.
    pub fn new(range: R, flush: Flush) -> Self {
        Self::with_frames(range, flush, FramePolicy::AtOnce)
    }

    /// A layer over `range` with the frame policy `frames`.
    pub fn with_frames(mut range: R, flush: Flush, frames: FramePolicy) -> Self {
        range.set_lazy_max(u64::MAX);
        Vmalloc {
            range,
            flush,
            frames,
            reserved: BTreeSet::new(),
            areas: AreaBook::new(),
            blocks: BTreeMap::new(),
            ram_blocks: BTreeMap::new(),
            ram_unflushed: BTreeSet::new(),
            alias_pending: None,
            shadows: Vec::new(),
            deferred: Vec::new(),
            retiring: Retiring::new(lazy_max(flush)),
            history: [(0, 0); HISTORY],
            next_hist: 0,
            stats: LayerStats::default(),
            place: Policy::Lowest,
            pools: Pools::default(),
        }
    }

    /// Pools flushed areas of up to `max_pages` pages (guard page included)
    /// for reuse, at most `max_len` of each size, as Linux 6.12's vmap
    /// nodes do: the purge the lazy list's threshold runs pools the areas
    /// it released instead of freeing their ranges; an allocation of a
    /// pooled size takes the newest one when it is aligned as asked,
    /// without the range allocator. A purge that [`purge`](Vmalloc::purge)
    /// runs (the one a failed allocation runs too) gives every pool back.
    /// Unlike Linux, whose purges each give a quarter of every pool back,
    /// the pools do not decay otherwise: they hold address space, not
    /// frames, and a decayed area costs a free-tree merge at the purge
    /// that gives it back, whatever the caller is doing then.
    /// `max_pages` 0, the default, pools nothing; a change gives back what
    /// was pooled.
    pub fn set_pools(&mut self, max_pages: usize, max_len: usize) {
        self.drain_pools();
        self.pools = Pools::new(max_pages, max_len);
    }

    /// Areas pooled (see [`set_pools`](Self::set_pools)).
    pub fn pooled(&self) -> usize {
        self.pools.len()
    }

    /// Gives every pooled range back to the range allocator.
    pub(crate) fn drain_pools(&mut self) {
        let range = &mut self.range;
        self.pools.drain(|start| {
            let freed = range.free(start);
            debug_assert!(freed.is_ok(), "freeing our own pooled range {start:#x}");
        });
    }

    /// The range allocator.
    pub fn range(&self) -> &R {
        &self.range
    }

    /// Counters.
    pub fn stats(&self) -> LayerStats {
        self.stats
    }

    /// The flush policy.
    pub fn flush_policy(&self) -> Flush {
        self.flush
    }

    /// Sets the flush policy (a new lazy threshold, say).
    pub fn set_flush_policy(&mut self, flush: Flush) {
        self.flush = flush;
        let _ = self.retiring.lazy_mut().set_max(lazy_max(flush));
    }

    /// When freed frames go back.
    pub fn frame_policy(&self) -> FramePolicy {
        self.frames
    }

    /// Where new ranges go in their window: [`Policy::Lowest`] (the
    /// kernel's) unless set.
    pub fn placement(&self) -> Policy {
        self.place
    }

    /// Places every new range (areas and raw blocks) by `place`, passed to
    /// the range allocator's
    /// [`alloc_placed`](RangeAllocator::alloc_placed): lowest fit, best
    /// fit or top down. A range allocator that places only lowest refuses
    /// the others (`AllocError::Invalid`), and
    /// [`Policy::Exact`] asks for one address every time.
    pub fn set_placement(&mut self, place: Policy) {
        self.place = place;
    }

    /// Reserves `size` bytes at `align` in `window` from the range
    /// allocator, placed by [`placement`](Self::placement), without purging
    /// (the caller decides whether to purge and retry).
    ///
    /// # Errors
    /// As the range allocator's `alloc_placed`.
    pub fn reserve(
        &mut self,
        size: u64,
        align: u64,
        window: (u64, u64),
    ) -> Result<u64, AllocError> {
        let va = self.place_range(size, align, window)?;
        self.reserved.insert(va);
        Ok(va)
    }

    /// A new range of `size` bytes at `align` in `window`, placed by
    /// [`placement`](Self::placement). Lowest fit goes through `alloc_in`,
    /// which places that way in every range allocator and skips the
    /// request the other policies need.
    pub(crate) fn place_range(
        &mut self,
        size: u64,
        align: u64,
        window: (u64, u64),
    ) -> Result<u64, AllocError> {
        match self.place {
            Policy::Lowest => self.range.alloc_in(size, align, window.0, window.1),
            place => self.range.alloc_placed(size, align, window, place),
        }
    }

    /// Gives back a reserved range that nothing was mapped in (nothing is
    /// cleared or flushed).
    ///
    /// # Errors
    /// [`VmError::InUse`] when `va` is a live area, a block or a freed
    /// range waiting for its flush; [`VmError::NotReserved`] for any other
    /// address that is not a reserved range. Nothing changes then.
    pub fn unreserve(&mut self, va: u64) -> Result<(), VmError> {
        self.claim(va)?;
        let freed = self.range.free(va);
        debug_assert!(freed.is_ok(), "a reserved range is allocated");
        Ok(())
    }

    /// Takes `va` out of the reserved set, or says why it is not there.
    pub(crate) fn claim(&mut self, va: u64) -> Result<(), VmError> {
        if self.reserved.remove(&va) {
            return Ok(());
        }
        Err(match self.lookup(va) {
            Where::Free | Where::Freed { .. } => VmError::NotReserved { va },
            _ => VmError::InUse { va },
        })
    }

    /// Records the live area `a` at the reserved range `va`, its pages
    /// mapped (and its further pieces, reserved too, with it).
    ///
    /// # Errors
    /// [`VmError::InUse`] or [`VmError::NotReserved`] as
    /// [`unreserve`](Self::unreserve) (an area inserted over a live one
    /// would lose its frames); nothing changes then.
    pub fn insert(&mut self, va: u64, a: A) -> Result<(), VmError> {
        if let Some(&p) = a.pieces().iter().find(|p| !self.reserved.contains(p)) {
            return Err(VmError::NotReserved { va: p });
        }
        self.claim(va)?;
        for p in a.pieces() {
            self.reserved.remove(p);
        }
        self.areas.insert(va, a);
        Ok(())
    }

    /// The live area at `va`.
    pub fn area(&self, va: u64) -> Option<&A> {
        self.areas.get(va)
    }

    /// The live area at `va`, to change (grow, shrink).
    pub fn area_mut(&mut self, va: u64) -> Option<&mut A> {
        self.areas.get_mut(va)
    }

    /// Takes the live area at `va` out of the books; its range (and its
    /// pieces) stay allocated and reserved until it is
    /// [`retire`](Self::retire)d or [`insert`](Self::insert)ed again.
    /// Never clears or flushes.
    pub fn take(&mut self, va: u64) -> Option<A> {
        let a = self.areas.remove(va)?;
        self.reserved.insert(va);
        self.reserved.extend(a.pieces().iter().copied());
        Some(a)
    }

    /// Live areas, by address.
    ///
    /// # Complexity
    /// O(n log n): the areas are sorted for the call (the books keep them
    /// by hash).
    pub fn areas(&self) -> impl Iterator<Item = (u64, &A)> {
        self.areas.sorted().into_iter()
    }

    /// Freed ranges not released yet: the lazy list, then the stuck list
    /// (`true`).
    pub fn retired(&self) -> impl Iterator<Item = (&Retired<A>, bool)> {
        let lazy = self.retiring.lazy().iter().map(|r| (r, false));
        lazy.chain(self.retiring.stuck().iter().map(|r| (r, true)))
    }

    /// Live areas.
    pub fn live_areas(&self) -> usize {
        self.areas.len()
    }

    /// Freed ranges on the lazy list, and their bytes.
    pub fn lazy(&self) -> (usize, u64) {
        let lazy = self.retiring.lazy();
        (lazy.len(), lazy.bytes())
    }

    /// Freed ranges whose flush was refused, waiting for a retry.
    pub fn stuck(&self) -> usize {
        self.retiring.stuck().len()
    }

    /// Live raw ranges (`vm_map_ram` blocks): how many, and their bytes.
    pub fn blocks(&self) -> (u64, u64) {
        (self.blocks.len() as u64, self.blocks.values().sum())
    }

    /// The size of the raw range (`vm_map_ram` block) at `va`, if any.
    pub fn block_size(&self, va: u64) -> Option<u64> {
        self.blocks.get(&va).copied()
    }

    /// Reserves a raw range (a `vm_map_ram` block of a front end the
    /// machine runs itself) without purging; its pages are mapped and
    /// cleared by its user. Never flushes.
    ///
    /// # Errors
    /// As the range allocator's `alloc_placed`.
    pub fn reserve_block(
        &mut self,
        size: u64,
        align: u64,
        window: (u64, u64),
    ) -> Result<u64, AllocError> {
        self.stats.block_ops += 1;
        let va = self.place_range(size, align, window)?;
        self.blocks.insert(va, size);
        Ok(va)
    }

    /// Frees a raw range from [`reserve_block`](Self::reserve_block) whose
    /// pages its user has cleared, as an unmap does (see
    /// [`retire`](Self::retire)): flushed now with `now` (or the eager
    /// policy), else lazily. Returns its size and what that released.
    ///
    /// # Errors
    /// [`VmError::InUse`] for a block of a [`MapRam`](crate::MapRam) (it
    /// frees its own blocks when nothing is mapped in them), and as
    /// [`vunmap`](Self::vunmap) when `va` does not start a block. Nothing
    /// changes then.
    pub fn free_block(
        &mut self,
        mmu: &mut impl Mmu,
        va: u64,
        now: bool,
    ) -> Result<(u64, Outcome<A>), VmError> {
        if self.ram_blocks.contains_key(&va) {
            return Err(VmError::InUse { va });
        }
        let Some(size) = self.blocks.remove(&va) else {
            return Err(self.not_an_area(va));
        };
        self.stats.block_ops += 1;
        let when = if now { When::Now } else { When::Policy };
        Ok((size, self.retire_range(mmu, va, size, Gone::Block, when)))
    }

    /// Why `va` does not start a live area (or block).
    pub(crate) fn not_an_area(&self, va: u64) -> VmError {
        match self.lookup(va) {
            Where::Mapped { area, .. } | Where::Guard { area } if area != va => {
                VmError::Interior { va, start: area }
            }
            Where::Mapped { .. } | Where::Guard { .. } | Where::Block { .. } => {
                VmError::InUse { va }
            }
            Where::Lazy { area } | Where::Freed { area } if area == va => {
                VmError::DoubleFree { va }
            }
            _ => VmError::NotMapped { va },
        }
    }

    /// What the layer knows of `va`.
    ///
    /// # Complexity
    /// O(n) in the live areas (a scan of the books: fault reports and
    /// errors ask it), plus the lazy and stuck lists. A check of many
    /// addresses sorts the areas once: [`lookup_in`](Self::lookup_in).
    pub fn lookup(&self, va: u64) -> Where {
        self.lookup_from(self.areas.at_or_before(va), va)
    }

    /// [`lookup`](Self::lookup) in `sorted`, the live areas by address
    /// (from [`areas`](Self::areas), collected): O(log n) in them.
    pub fn lookup_in(&self, sorted: &[(u64, &A)], va: u64) -> Where {
        self.lookup_from(sorted_at_or_before(sorted, va), va)
    }

    /// What the layer knows of `va`, given the live area with the highest
    /// start at or below it.
    fn lookup_from(&self, before: Option<(u64, &A)>, va: u64) -> Where {
        if let Some((s, a)) = before {
            if va < s + a.span() {
                return match a.frame_at(va - s) {
                    Some(pfn) => Where::Mapped { area: s, pfn },
                    None => Where::Guard { area: s },
                };
            }
        }
        if let Some((&s, &size)) = self.blocks.range(..=va).next_back() {
            if va < s + size {
                return Where::Block { start: s };
            }
        }
        if let Some((r, _)) = self
            .retired()
            .find(|(r, _)| (r.start..r.start + r.span).contains(&va))
        {
            return Where::Lazy { area: r.start };
        }
        // The newest record first: a range reused and freed again.
        for k in 1..=HISTORY {
            let (s, e) = self.history[(self.next_hist + HISTORY - k) % HISTORY];
            if (s..e).contains(&va) {
                return Where::Freed { area: s };
            }
        }
        Where::Free
    }
}
