//! [`Vmalloc`]: areas of mapped frames over any range allocator, each with
//! a guard page, unmapped eagerly or lazily (the lists and the purge are in
//! `lazy.rs`, the checkers in `check.rs`).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use mmkit::range::RangeAllocator;
use mmkit::request::Policy;
use mmkit::AllocError;

use super::lazy::{Gone, Outcome, Retired};
use super::{Flush, Mmu, VmError, PAGE};

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
/// start, then one guard page. Its frames go back to the caller at
/// `vunmap`, before the flush (as the kernel frees them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Area {
    /// The frames mapped, in page order.
    pub frames: Vec<u64>,
}

impl AreaData for Area {
    fn span(&self) -> u64 {
        (self.frames.len() as u64 + 1) * PAGE
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
    pub(crate) areas: BTreeMap<u64, A>,
    pub(crate) blocks: BTreeMap<u64, u64>,
    /// Freed, cleared, waiting for the purge's flush (still allocated in R).
    pub(crate) lazy: Vec<Retired<A>>,
    pub(crate) lazy_bytes: u64,
    /// Freed, but their flush was refused: retried by every purge.
    pub(crate) stuck: Vec<Retired<A>>,
    /// Ranges released lately: `(start, end)`.
    pub(crate) history: [(u64, u64); HISTORY],
    pub(crate) next_hist: usize,
    pub(crate) stats: LayerStats,
    /// Where the range allocator places new ranges.
    pub(crate) place: Policy,
}

impl<R: RangeAllocator, A: AreaData> Vmalloc<R, A> {
    /// A layer over `range`. The layer keeps its own lazy list (a freed
    /// range stays allocated in `range` until its flush), so the range
    /// allocator's automatic purge is switched off.
    pub fn new(mut range: R, flush: Flush) -> Self {
        range.set_lazy_max(u64::MAX);
        Vmalloc {
            range,
            flush,
            areas: BTreeMap::new(),
            blocks: BTreeMap::new(),
            lazy: Vec::new(),
            lazy_bytes: 0,
            stuck: Vec::new(),
            history: [(0, 0); HISTORY],
            next_hist: 0,
            stats: LayerStats::default(),
            place: Policy::Lowest,
        }
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
        self.range.alloc_placed(size, align, window, self.place)
    }

    /// Gives back a range [`reserve`](Self::reserve) handed out and nothing
    /// was mapped in.
    ///
    /// # Errors
    /// [`VmError::Invalid`] when `va` does not start an allocated range.
    pub fn unreserve(&mut self, va: u64) -> Result<(), VmError> {
        self.range.free(va)?;
        Ok(())
    }

    /// Records the live area `a` at `va` (its range reserved, its pages
    /// mapped).
    pub fn insert(&mut self, va: u64, a: A) {
        self.areas.insert(va, a);
    }

    /// The live area at `va`.
    pub fn area(&self, va: u64) -> Option<&A> {
        self.areas.get(&va)
    }

    /// The live area at `va`, to change (grow, shrink).
    pub fn area_mut(&mut self, va: u64) -> Option<&mut A> {
        self.areas.get_mut(&va)
    }

    /// Takes the live area at `va` out of the books; its range stays
    /// allocated until it is [`retire`](Self::retire)d or put back.
    pub fn take(&mut self, va: u64) -> Option<A> {
        self.areas.remove(&va)
    }

    /// Live areas, by address.
    pub fn areas(&self) -> impl Iterator<Item = (u64, &A)> {
        self.areas.iter().map(|(&va, a)| (va, a))
    }

    /// Freed ranges not released yet: the lazy list, then the stuck list
    /// (`true`).
    pub fn retired(&self) -> impl Iterator<Item = (&Retired<A>, bool)> {
        let lazy = self.lazy.iter().map(|r| (r, false));
        lazy.chain(self.stuck.iter().map(|r| (r, true)))
    }

    /// Live areas.
    pub fn live_areas(&self) -> usize {
        self.areas.len()
    }

    /// Freed ranges on the lazy list, and their bytes.
    pub fn lazy(&self) -> (usize, u64) {
        (self.lazy.len(), self.lazy_bytes)
    }

    /// Freed ranges whose flush was refused, waiting for a retry.
    pub fn stuck(&self) -> usize {
        self.stuck.len()
    }

    /// Live raw ranges (`vm_map_ram` blocks): how many, and their bytes.
    pub fn blocks(&self) -> (u64, u64) {
        (self.blocks.len() as u64, self.blocks.values().sum())
    }

    /// The size of the raw range (`vm_map_ram` block) at `va`, if any.
    pub fn block_size(&self, va: u64) -> Option<u64> {
        self.blocks.get(&va).copied()
    }

    /// Reserves a raw range (a `vm_map_ram` block) without purging; its
    /// pages are mapped and cleared by its user.
    ///
    /// # Errors
    /// As the range allocator's `alloc_in`.
    pub fn reserve_block(
        &mut self,
        size: u64,
        align: u64,
        window: (u64, u64),
    ) -> Result<u64, AllocError> {
        self.stats.block_ops += 1;
        let va = self.reserve(size, align, window)?;
        self.blocks.insert(va, size);
        Ok(va)
    }

    /// Frees a raw range whose pages its user has cleared, as an unmap
    /// does (see [`retire`](Self::retire)), flushing it at once with `now`.
    /// Returns its size and what that released.
    ///
    /// # Errors
    /// [`VmError::Invalid`] when `va` does not start a raw range.
    pub fn free_block(
        &mut self,
        mmu: &mut impl Mmu,
        va: u64,
        now: bool,
    ) -> Result<(u64, Outcome<A>), VmError> {
        self.stats.block_ops += 1;
        let size = self.blocks.remove(&va).ok_or(VmError::Invalid)?;
        Ok((size, self.retire(mmu, va, size, Gone::Block, now)))
    }

    /// What the layer knows of `va`.
    pub fn lookup(&self, va: u64) -> Where {
        if let Some((&s, a)) = self.areas.range(..=va).next_back() {
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

/// The plain layer: areas of frames the caller owns again at `vunmap`.
impl<R: RangeAllocator> Vmalloc<R, Area> {
    /// Reserves `size` bytes at `align`, purging the lazy and stuck lists
    /// once when nothing fits (the kernel's retry).
    fn reserve_or_purge(
        &mut self,
        mmu: &mut impl Mmu,
        size: u64,
        align: u64,
        window: (u64, u64),
    ) -> Result<u64, AllocError> {
        match self.reserve(size, align, window) {
            Err(AllocError::NoSpace) if !self.lazy.is_empty() || !self.stuck.is_empty() => {
                self.purge(mmu);
                self.reserve(size, align, window)
            }
            r => r,
        }
    }

    /// `vmap`: maps `frames` at a new area aligned to `align` (a power of
    /// two, at least a page) followed by a guard page.
    ///
    /// # Errors
    /// [`VmError::Invalid`] for no frames or a bad alignment;
    /// [`VmError::NoMemory`] when no space is left after a purge or the MMU
    /// has no page-table memory (what it mapped is taken down again).
    pub fn vmap(
        &mut self,
        mmu: &mut impl Mmu,
        frames: Vec<u64>,
        align: u64,
    ) -> Result<u64, VmError> {
        let n = frames.len() as u64;
        if n == 0 || !align.is_power_of_two() || align < PAGE {
            return Err(VmError::Invalid);
        }
        let size = n
            .checked_add(1)
            .and_then(|p| p.checked_mul(PAGE))
            .ok_or(VmError::Invalid)?;
        let va = self.reserve_or_purge(mmu, size, align, self.range.space())?;
        if let Err(f) = mmu.map(va, &frames) {
            if f.mapped == 0 {
                // Just handed out: the free succeeds.
                let _ = self.range.free(va);
            } else {
                // Nothing to give back: the frames stay the caller's.
                let _ = self.retire(mmu, va, size, Gone::Area(Area::default()), true);
            }
            return Err(f.err);
        }
        self.insert(va, Area { frames });
        self.stats.maps += 1;
        Ok(va)
    }

    /// `vunmap`: clears the area's PTEs and frees its range, flushing now
    /// (eager) or at the next purge (lazy). Returns the frames.
    ///
    /// # Errors
    /// [`VmError::Invalid`] when `va` does not start a live area.
    pub fn vunmap(&mut self, mmu: &mut impl Mmu, va: u64) -> Result<Vec<u64>, VmError> {
        let area = self.take(va).ok_or(VmError::Invalid)?;
        let span = area.span();
        let out = self.retire(mmu, va, span, Gone::Area(Area::default()), false);
        if out.purge_due {
            self.purge(mmu);
        }
        self.stats.unmaps += 1;
        Ok(area.frames)
    }

    /// Flushes the span of the lazy and stuck lists on every CPU and frees
    /// what the flush released. Returns whether anything was flushed.
    pub fn purge(&mut self, mmu: &mut impl Mmu) -> bool {
        self.purge_released(mmu).flushed.is_some()
    }

    /// [`purge`](Self::purge) through the flush `flush`, which cannot
    /// refuse (a `vm_map_ram` front end's, which widens the range by its
    /// dirty pages).
    pub fn purge_with(&mut self, flush: &mut dyn FnMut(u64, u64)) -> bool {
        self.stats.block_ops += 1;
        let mut flush = |s, e| {
            flush(s, e);
            Vec::new()
        };
        self.purge_through(&mut flush).flushed.is_some()
    }

    /// Hands out a raw range (a `vm_map_ram` block), purging once when
    /// nothing fits; its pages are mapped and cleared by its user.
    ///
    /// # Errors
    /// As the range allocator's `alloc_in`, after one purge.
    pub fn alloc_block(
        &mut self,
        mmu: &mut impl Mmu,
        size: u64,
        align: u64,
        window: (u64, u64),
    ) -> Result<u64, AllocError> {
        self.stats.block_ops += 1;
        let va = self.reserve_or_purge(mmu, size, align, window)?;
        self.blocks.insert(va, size);
        Ok(va)
    }
}
