//! [`Vmalloc`]: areas of mapped frames over any range allocator, each with
//! a guard page, unmapped eagerly or lazily.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use mmkit::range::RangeAllocator;
use mmkit::AllocError;

use super::{Flush, Mmu, VmError, PAGE};

/// A live area: `pages` mapped pages from its start, then one guard page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Area {
    /// The frames mapped, in page order.
    pub frames: Vec<u64>,
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
    /// The guard page after the live area at `area`.
    Guard {
        /// The area's start.
        area: u64,
    },
    /// Inside a range handed out raw (a `vm_map_ram` block).
    Block {
        /// The block's start.
        start: u64,
    },
    /// Inside a recently freed area that is still on the lazy list: its
    /// PTEs are cleared, TLBs may still hold them.
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
    /// Purges of the lazy list.
    pub purges: u64,
    /// Raw-range operations (blocks handed out or freed, purges through a
    /// front end): each one lock acquisition of a shared layer.
    pub block_ops: u64,
}

/// The span a range allocator purged by itself (its retry when an
/// allocation finds no space), to be flushed before the space is mapped.
#[derive(Debug)]
struct Pending {
    lo: AtomicU64,
    hi: AtomicU64,
}

/// Freed areas remembered for fault reports.
const HISTORY: usize = 64;

/// Areas of mapped frames over the range allocator `R`.
pub struct Vmalloc<R> {
    range: R,
    flush: Flush,
    areas: BTreeMap<u64, Area>,
    blocks: BTreeMap<u64, u64>,
    lazy_bytes: u64,
    /// Purges so far; a freed area with `gen == purge_gen` is still lazy.
    purge_gen: u64,
    history: [(u64, u64, u64); HISTORY],
    next_hist: usize,
    stats: LayerStats,
    pending: Arc<Pending>,
}

impl<R: RangeAllocator> Vmalloc<R> {
    /// A layer over `range` (its own automatic purge is switched off: the
    /// layer purges, through the [`Mmu`]).
    pub fn new(mut range: R, flush: Flush) -> Self {
        range.set_lazy_max(u64::MAX);
        let pending = Arc::new(Pending {
            lo: AtomicU64::new(u64::MAX),
            hi: AtomicU64::new(0),
        });
        let p = Arc::clone(&pending);
        range.set_flush_hook(Some(Box::new(move |s, e| {
            p.lo.fetch_min(s, Ordering::Relaxed);
            p.hi.fetch_max(e, Ordering::Relaxed);
        })));
        Vmalloc {
            range,
            flush,
            areas: BTreeMap::new(),
            blocks: BTreeMap::new(),
            lazy_bytes: 0,
            purge_gen: 0,
            history: [(0, 0, u64::MAX); HISTORY],
            next_hist: 0,
            stats: LayerStats::default(),
            pending,
        }
    }

    /// Flushes what the range allocator purged by itself, before anything
    /// is mapped in it.
    fn flush_pending(&mut self, mmu: &mut impl Mmu) {
        let lo = self.pending.lo.swap(u64::MAX, Ordering::Relaxed);
        let hi = self.pending.hi.swap(0, Ordering::Relaxed);
        if lo < hi {
            mmu.flush(lo, hi);
            self.stats.flushes += 1;
            self.stats.purges += 1;
            self.stats.pages_flushed += (hi - lo) / PAGE;
            self.lazy_bytes = 0;
            self.purge_gen += 1;
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

    /// Reserves `size` bytes at `align` from the range allocator, purging
    /// the lazy list once when it is full (the kernel's retry).
    fn reserve(
        &mut self,
        mmu: &mut impl Mmu,
        size: u64,
        align: u64,
        window: (u64, u64),
    ) -> Result<u64, AllocError> {
        let r = match self.range.alloc_in(size, align, window.0, window.1) {
            Err(AllocError::NoSpace) if self.lazy_bytes > 0 => {
                self.purge(mmu);
                self.range.alloc_in(size, align, window.0, window.1)
            }
            r => r,
        };
        self.flush_pending(mmu);
        r
    }

    /// `vmap`: maps `frames` at a new area aligned to `align` (a power of
    /// two, at least a page) followed by a guard page.
    ///
    /// # Errors
    /// [`VmError::Invalid`] for no frames or a bad alignment;
    /// [`VmError::NoMemory`] when no space is left after a purge or the MMU
    /// has no page-table memory.
    pub fn vmap(
        &mut self,
        mmu: &mut impl Mmu,
        frames: Vec<u64>,
        align: u64,
    ) -> Result<u64, VmError> {
        let n = frames.len() as u64;
        if n == 0 {
            return Err(VmError::Invalid);
        }
        let size = n
            .checked_add(1)
            .and_then(|p| p.checked_mul(PAGE))
            .ok_or(VmError::Invalid)?;
        if !align.is_power_of_two() || align < PAGE {
            return Err(VmError::Invalid);
        }
        let va = self.reserve(mmu, size, align, self.range.space())?;
        if let Err(e) = mmu.map(va, &frames) {
            // Just handed out: the free succeeds.
            let _ = self.range.free(va);
            return Err(e);
        }
        self.areas.insert(va, Area { frames });
        self.stats.maps += 1;
        Ok(va)
    }

    /// `vunmap`: clears the area's PTEs and frees its range, flushing now
    /// (eager) or at the next purge (lazy). Returns the frames.
    ///
    /// # Errors
    /// [`VmError::Invalid`] when `va` does not start a live area.
    pub fn vunmap(&mut self, mmu: &mut impl Mmu, va: u64) -> Result<Vec<u64>, VmError> {
        let area = self.areas.remove(&va).ok_or(VmError::Invalid)?;
        let pages = area.frames.len() as u64;
        mmu.clear(va, pages);
        self.release(mmu, va, (pages + 1) * PAGE)?;
        self.stats.unmaps += 1;
        Ok(area.frames)
    }

    /// Frees a range whose PTEs are clear: flushes it first (eager) or
    /// puts it on the lazy list (lazy).
    fn release(&mut self, mmu: &mut impl Mmu, va: u64, size: u64) -> Result<(), VmError> {
        match self.flush {
            Flush::Eager => {
                mmu.flush(va, va + size);
                self.stats.flushes += 1;
                self.stats.pages_flushed += size / PAGE;
                self.range.free(va)?;
                self.remember(va, size, self.purge_gen.wrapping_sub(1));
            }
            Flush::Lazy { max_bytes } => {
                self.range.free_lazy(va)?;
                self.lazy_bytes += size;
                self.remember(va, size, self.purge_gen);
                if self.lazy_bytes > max_bytes {
                    self.purge(mmu);
                }
            }
        }
        Ok(())
    }

    fn remember(&mut self, va: u64, size: u64, gen: u64) {
        self.history[self.next_hist] = (va, va + size, gen);
        self.next_hist = (self.next_hist + 1) % HISTORY;
    }

    /// Flushes the span of the lazy list on every CPU and makes it free.
    /// Returns whether anything was lazy.
    pub fn purge(&mut self, mmu: &mut impl Mmu) -> bool {
        self.purge_with(&mut |s, e| mmu.flush(s, e))
    }

    /// [`purge`](Self::purge) through the flush `flush` (a `vm_map_ram`
    /// front end's, which widens the range by its dirty pages).
    pub fn purge_with(&mut self, flush: &mut dyn FnMut(u64, u64)) -> bool {
        self.stats.block_ops += 1;
        let mut span = (0, 0);
        let purged = self.range.purge(&mut |s, e| {
            flush(s, e);
            span = (s, e);
        });
        if purged {
            self.stats.flushes += 1;
            self.stats.purges += 1;
            self.stats.pages_flushed += (span.1 - span.0) / PAGE;
        }
        self.lazy_bytes = 0;
        self.purge_gen += 1;
        purged
    }

    /// Hands out a raw range (a `vm_map_ram` block); its pages are mapped
    /// and cleared by its user.
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
        let va = self.reserve(mmu, size, align, window)?;
        self.blocks.insert(va, size);
        Ok(va)
    }

    /// Frees a raw range whose PTEs are clear, as an unmap does.
    ///
    /// # Errors
    /// [`VmError::Invalid`] when `va` does not start a raw range.
    pub fn free_block(&mut self, mmu: &mut impl Mmu, va: u64) -> Result<u64, VmError> {
        self.stats.block_ops += 1;
        let size = *self.blocks.get(&va).ok_or(VmError::Invalid)?;
        self.release(mmu, va, size)?;
        self.blocks.remove(&va);
        Ok(size)
    }

    /// What the layer knows of `va`.
    pub fn lookup(&self, va: u64) -> Where {
        if let Some((&s, a)) = self.areas.range(..=va).next_back() {
            let pages = a.frames.len() as u64;
            if va < s + pages * PAGE {
                let pfn = a.frames[((va - s) / PAGE) as usize];
                return Where::Mapped { area: s, pfn };
            }
            if va < s + (pages + 1) * PAGE {
                return Where::Guard { area: s };
            }
        }
        if let Some((&s, &size)) = self.blocks.range(..=va).next_back() {
            if va < s + size {
                return Where::Block { start: s };
            }
        }
        // The newest record first: a range reused and freed again.
        for k in 1..=HISTORY {
            let (s, e, gen) = self.history[(self.next_hist + HISTORY - k) % HISTORY];
            if (s..e).contains(&va) {
                return if gen == self.purge_gen {
                    Where::Lazy { area: s }
                } else {
                    Where::Freed { area: s }
                };
            }
        }
        Where::Free
    }

    /// Checks the range allocator, and that every live area maps exactly
    /// its frames with its guard page unmapped.
    ///
    /// # Errors
    /// A description of the first disagreement.
    pub fn check(&self, mmu: &impl Mmu) -> Result<(), String> {
        self.range
            .check()
            .map_err(|e| format!("range allocator: {e}"))?;
        let live = self.range.stats().live_areas;
        let ours = (self.areas.len() + self.blocks.len()) as u64;
        if live != ours {
            return Err(format!("{live} live ranges, the layer knows {ours}"));
        }
        for (&s, a) in &self.areas {
            for (i, &pfn) in a.frames.iter().enumerate() {
                let va = s + i as u64 * PAGE;
                if mmu.translate(va) != Some(pfn) {
                    return Err(format!(
                        "{va:#x} maps {:?}, not frame {pfn:#x}",
                        mmu.translate(va)
                    ));
                }
            }
            let guard = s + a.frames.len() as u64 * PAGE;
            if mmu.translate(guard).is_some() {
                return Err(format!("guard page {guard:#x} is mapped"));
            }
        }
        Ok(())
    }

    /// Checks a walk of the page tables against the layer: every present
    /// `(va, pfn)` is a page of a live area mapping that frame, or a page
    /// of a raw block (counted in the result: the caller compares it with
    /// the `vm_map_ram` mappings it knows).
    ///
    /// # Errors
    /// The first PTE no live area or block explains.
    pub fn check_walk(&self, present: impl Iterator<Item = (u64, u64)>) -> Result<u64, String> {
        let mut in_blocks = 0;
        let mut in_areas = 0;
        for (va, pfn) in present {
            match self.lookup(va) {
                Where::Mapped { pfn: p, .. } if p == pfn => in_areas += 1,
                Where::Block { .. } => in_blocks += 1,
                w => {
                    return Err(format!(
                        "PTE {va:#x} -> frame {pfn:#x} is mapped, but the layer says {w:?}"
                    ))
                }
            }
        }
        let want: u64 = self.areas.values().map(|a| a.frames.len() as u64).sum();
        if in_areas != want {
            return Err(format!("{in_areas} area pages mapped, {want} expected"));
        }
        Ok(in_blocks)
    }
}
