//! The inherent API of [`VmapAllocator`]: the [`RangeAllocator`] calls
//! without importing the trait, [`Request`]s with placement policies,
//! `Layout` entry points, iterators, and growing or shrinking the space.

use core::alloc::Layout;
use core::ops::Range;

use super::{PerStorage, VmapAllocator};
use crate::error::{AllocError, CheckError, FreeError};
use crate::range::{FlushHook, RangeAllocator, RangeStats};
use crate::request::{Policy, Request, RequestError};
use crate::storage::Storage;
use crate::tree::btree::Pos;

/// The [`RangeAllocator`] methods, callable without importing the trait.
impl<S: Storage> VmapAllocator<S>
where
    Self: PerStorage,
{
    /// The managed space `[start, end)`: with ranges added by
    /// [`add_free`](Self::add_free), their hull (the lowest start and the
    /// highest end added; `(0, 0)` before the first), of which
    /// [`managed`](Self::managed) lists the parts that are managed.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let va = VmapAllocator::new(0x1000, 0x9000).unwrap();
    /// assert_eq!(va.space(), (0x1000, 0x9000));
    /// ```
    #[inline]
    pub fn space(&self) -> (u64, u64) {
        (self.start, self.end)
    }

    /// Allocates `size` bytes aligned to `align` at the lowest fitting
    /// address ([`RangeAllocator::alloc`]).
    ///
    /// # Errors
    /// [`AllocError::Invalid`] for `size == 0` or `align` not a power of
    /// two; [`AllocError::NoSpace`] when nothing fits, also after one purge.
    /// [`allocate`](Self::allocate) says more.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// assert_eq!(va.alloc(0x100, 1), Ok(0));
    /// assert_eq!(va.alloc(0x100, 0x1000), Ok(0x1000));
    /// ```
    #[inline]
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        <Self as RangeAllocator>::alloc(self, size, align)
    }

    /// Allocates at the lowest fitting address in `[vstart, vend)`
    /// ([`RangeAllocator::alloc_in`]).
    ///
    /// # Errors
    /// As [`alloc`](Self::alloc), and [`AllocError::Invalid`] for
    /// `vstart >= vend`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// assert_eq!(va.alloc_in(0x100, 0x100, 0x8000, 0x9000), Ok(0x8000));
    /// ```
    #[inline]
    pub fn alloc_in(
        &mut self,
        size: u64,
        align: u64,
        vstart: u64,
        vend: u64,
    ) -> Result<u64, AllocError> {
        <Self as RangeAllocator>::alloc_in(self, size, align, vstart, vend)
    }

    /// Frees the live area that starts at `addr`; returns its size.
    ///
    /// # Errors
    /// [`FreeError::NotAllocated`] if no live area starts at `addr`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// let a = va.alloc(0x100, 1).unwrap();
    /// assert_eq!(va.free(a), Ok(0x100));
    /// assert!(va.free(a).is_err()); // a double free is refused
    /// ```
    #[inline]
    pub fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
        <Self as RangeAllocator>::free(self, addr)
    }

    /// Frees the live area at `addr` lazily: its space is reused only after
    /// the next purge (and its flush). Returns its size.
    ///
    /// # Errors
    /// [`FreeError::NotAllocated`] if no live area starts at `addr`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// let a = va.alloc(0x100, 1).unwrap();
    /// assert_eq!(va.free_lazy(a), Ok(0x100));
    /// assert_eq!(va.alloc(0x100, 1), Ok(0x100)); // not reused yet
    /// ```
    #[inline]
    pub fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
        <Self as RangeAllocator>::free_lazy(self, addr)
    }

    /// Makes every lazily freed area free and calls `flush` once with the
    /// range covering them. Returns whether anything was purged.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// let a = va.alloc(0x100, 1).unwrap();
    /// va.free_lazy(a).unwrap();
    /// let mut flushed = None;
    /// assert!(va.purge(&mut |s, e| flushed = Some((s, e))));
    /// assert_eq!(flushed, Some((0, 0x100)));
    /// assert!(!va.purge(&mut |_, _| unreachable!())); // nothing left
    /// ```
    #[inline]
    pub fn purge(&mut self, flush: &mut dyn FnMut(u64, u64)) -> bool {
        <Self as RangeAllocator>::purge(self, flush)
    }

    /// Sets the automatic purge threshold in lazily freed bytes (purges at
    /// once if already above it).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// va.set_lazy_max(0x100);
    /// let a = va.alloc(0x200, 1).unwrap();
    /// va.free_lazy(a).unwrap(); // 0x200 > 0x100: purged at once
    /// assert_eq!(va.stats().lazy_bytes, 0);
    /// ```
    #[inline]
    pub fn set_lazy_max(&mut self, bytes: u64) {
        <Self as RangeAllocator>::set_lazy_max(self, bytes)
    }

    /// Installs the hook automatic purges call with their flush range.
    ///
    /// # Examples
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use mmkit::vmap::VmapAllocator;
    /// let flushes = Arc::new(AtomicU64::new(0));
    /// let mut va = VmapAllocator::new(0, 0x1000).unwrap();
    /// let f = Arc::clone(&flushes);
    /// va.set_flush_hook(Some(Box::new(move |_, _| {
    ///     f.fetch_add(1, Ordering::Relaxed);
    /// })));
    /// let a = va.alloc(0x1000, 1).unwrap();
    /// va.free_lazy(a).unwrap();
    /// va.alloc(0x1000, 1).unwrap(); // full: purges through the hook, retries
    /// assert_eq!(flushes.load(Ordering::Relaxed), 1);
    /// ```
    #[inline]
    pub fn set_flush_hook(&mut self, hook: Option<FlushHook>) {
        <Self as RangeAllocator>::set_flush_hook(self, hook)
    }

    /// Counters and sizes.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 100).unwrap();
    /// va.alloc(10, 1).unwrap();
    /// let s = va.stats();
    /// assert_eq!((s.live_areas, s.live_bytes, s.free_bytes), (1, 10, 90));
    /// ```
    #[inline]
    pub fn stats(&self) -> RangeStats {
        <Self as RangeAllocator>::stats(self)
    }

    /// Verifies every internal invariant (O(n log n); for tests).
    ///
    /// # Errors
    /// A [`CheckError`] naming the first broken invariant and where.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 100).unwrap();
    /// va.alloc(10, 1).unwrap();
    /// va.check().unwrap();
    /// ```
    #[inline]
    pub fn check(&self) -> Result<(), CheckError> {
        <Self as RangeAllocator>::check(self)
    }
}

/// Requests, iterators and resizing.
impl<S: Storage> VmapAllocator<S>
where
    Self: PerStorage,
{
    /// Allocates by a [`Request`]: size, alignment, window and
    /// [`Policy`] (lowest, highest, best fit or exact). A failing request purges the
    /// lazily freed areas once and retries, as [`alloc`](Self::alloc) does.
    ///
    /// # Errors
    /// A [`RequestError`] that says what was asked and why it failed:
    /// `BadAlign`, `EmptyWindow`, `Misaligned` (exact address), `NoFit`
    /// (with the window searched and the largest free block) or `NotFree`
    /// (exact address). Nothing changes.
    ///
    /// # Complexity
    /// O(log n) for lowest, highest and exact (plus the near misses
    /// documented at [`alloc_in`](Self::alloc_in)). Best fit: O(log n +
    /// min(k, m)), where `k` free blocks at least as long as the request
    /// come before the answer in length order but cannot hold it (the
    /// alignment misses in them, or they lie outside the window) and `m`
    /// free blocks meet the window; `k` is 0 without a window when every
    /// block's start and length are multiples of the alignment. The first
    /// best-fit request builds the size index (O(n log n), once), and the
    /// isolated blocks and the pending area go into the tree before each.
    ///
    /// # Examples
    /// ```
    /// use mmkit::request::{Policy, Request, RequestError};
    /// use mmkit::vmap::VmapAllocator;
    ///
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// let page = Request::bytes(0x1000).unwrap().align(0x1000);
    /// assert_eq!(va.allocate(page.clone()), Ok(0));
    /// assert_eq!(va.allocate(page.clone().policy(Policy::Highest)), Ok(0xf000));
    /// assert_eq!(va.allocate(page.clone().at(0x8000)), Ok(0x8000));
    /// let too_big = Request::bytes(0x10000).unwrap();
    /// assert!(matches!(
    ///     va.allocate(too_big),
    ///     Err(RequestError::NoFit { size: 0x10000, largest_free: 0x7000, .. })
    /// ));
    /// ```
    #[inline]
    pub fn allocate(&mut self, req: Request) -> Result<u64, RequestError> {
        PerStorage::allocate_entry(self, req)
    }

    /// The body of [`allocate`](Self::allocate).
    pub(super) fn allocate_body(&mut self, req: Request) -> Result<u64, RequestError> {
        crate::debug_check!(self);
        let (lo, hi) = req.clamp(self.space())?;
        // Best fit's size index takes its nodes from the tree's storage.
        if !self.has_room(1, 0)
            || (req.placement() == Policy::BestFit && !self.free.enable_size_index())
        {
            return Err(RequestError::StorageFull);
        }
        if let Some(a) = self.place(&req, lo, hi) {
            return Ok(a);
        }
        if self.purge_with_hook() {
            if let Some(a) = self.place(&req, lo, hi) {
                return Ok(a);
            }
        }
        let (size, align) = (req.size(), req.alignment());
        Err(match req.placement() {
            Policy::Exact(start) => RequestError::NotFree {
                start,
                end: start.saturating_add(size),
            },
            _ => RequestError::NoFit {
                size,
                align,
                window: if lo < hi { (lo, hi) } else { (lo, lo) },
                largest_free: self.largest_free(),
            },
        })
    }

    /// Allocates for a [`Layout`]: its size and alignment, lowest fit.
    ///
    /// # Errors
    /// [`RequestError::ZeroSize`] for a zero-sized layout, otherwise as
    /// [`allocate`](Self::allocate).
    ///
    /// # Examples
    /// ```
    /// use core::alloc::Layout;
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(1, 0x1000).unwrap();
    /// let a = va.alloc_layout(Layout::new::<u64>()).unwrap();
    /// assert_eq!(a, 8);
    /// ```
    pub fn alloc_layout(&mut self, layout: Layout) -> Result<u64, RequestError> {
        self.allocate(Request::from_layout(layout)?)
    }

    /// Frees an area allocated for `layout` at `addr`, checking that the
    /// area has the layout's size.
    ///
    /// # Errors
    /// [`FreeError::NotAllocated`] if no live area of `layout.size()` bytes
    /// starts at `addr`; nothing changes.
    ///
    /// # Examples
    /// ```
    /// use core::alloc::Layout;
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 0x1000).unwrap();
    /// let l = Layout::from_size_align(24, 8).unwrap();
    /// let a = va.alloc_layout(l).unwrap();
    /// assert!(va.free_layout(a, Layout::new::<u8>()).is_err()); // wrong size
    /// assert_eq!(va.free_layout(a, l), Ok(()));
    /// ```
    pub fn free_layout(&mut self, addr: u64, layout: Layout) -> Result<(), FreeError> {
        if self.area_size(addr) != Some(layout.size() as u64) {
            return Err(FreeError::NotAllocated);
        }
        self.free(addr).map(|_| ())
    }

    /// Tries `req` in the clamped window `[lo, hi)` once, without purging:
    /// a best fit straight to its own path, which then inlines into the
    /// caller's.
    #[inline(always)]
    fn place(&mut self, req: &Request, lo: u64, hi: u64) -> Option<u64> {
        match req.placement() {
            Policy::BestFit => self.try_best_fit(req.size(), req.alignment(), lo, hi),
            _ => self.try_place(req, lo, hi),
        }
    }

    /// Tries `req` in the clamped window `[lo, hi)` once, without purging.
    fn try_place(&mut self, req: &Request, lo: u64, hi: u64) -> Option<u64> {
        let (size, align) = (req.size(), req.alignment());
        let (lo, hi, highest) = match req.placement() {
            // Without the extra length Linux's search is the exact one.
            Policy::Linux
                if lo < hi && Policy::linux_search_len(size, align, hi - lo) != Some(size) =>
            {
                let a = self.linux_fit(size, align, lo, hi)?;
                (a, a + size, false)
            }
            Policy::Lowest | Policy::Linux => (lo, hi, false),
            Policy::Highest => (lo, hi, true),
            Policy::BestFit => return self.try_best_fit(size, align, lo, hi),
            Policy::Exact(a) => {
                let end = a.checked_add(size)?;
                if a < lo || end > hi {
                    return None;
                }
                (a, end, false)
            }
        };
        if lo >= hi {
            return None;
        }
        if !highest {
            return self.try_alloc(size, align, lo, hi);
        }
        // The highest fit searches the tree alone.
        self.settle_isolated();
        self.enable_summaries(align);
        let mut pos = Pos::new();
        let a = self.free.highest_fit(size, align, lo, hi, &mut pos)?;
        self.claim(&pos, a, size);
        Some(a)
    }

    /// The best fit in `[lo, hi)` (see [`Policy::BestFit`]), made a live
    /// area. The pending area goes into the tree first; the isolated
    /// blocks stay out of it: the best of them bounds the tree's search,
    /// and one that no block of the tree beats is taken back without
    /// touching the tree, as a lowest fit takes it. When that block is
    /// exactly the request's length and the tree's length classes show no
    /// block of the tree as short, the search is not made at all.
    fn try_best_fit(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        if lo >= hi {
            return None;
        }
        self.settle_pending();
        let (mut kept, misses) = self.isolated.best_fit(size, align, lo, hi);
        // The blocks that cannot hold the request go into the tree, where
        // the search rules them out without a look.
        if misses != 0 {
            if let Some(k) = &mut kept {
                k.0 -= (misses & ((1 << k.0) - 1)).count_ones() as usize;
            }
            for (s, e) in self.isolated.take_misses(misses) {
                self.free.insert(s, e);
            }
        }
        let bound = kept.map_or((u64::MAX, u64::MAX), |(_, len, s, _)| (len, s));
        let mut pos = Pos::new();
        // An isolated block of exactly the size is the usual bound of a
        // one-size workload, and the tree can rarely beat it: the classes,
        // asked first, spare the search. A longer one rarely rules the
        // tree out, and asking would only add to the search.
        let exact = kept.is_some_and(|k| k.1 == size);
        let found = match !exact || self.free.may_beat(size, bound) {
            true => self
                .free
                .best_fit_below(size, align, lo, hi, bound, &mut pos),
            false => None,
        };
        debug_assert!(
            self.free.len() > 4096
                || found.or(kept.map(|k| k.3)) == self.best_fit_linear(size, align, lo, hi),
            "the best fit differs from a scan of every block"
        );
        match (found, kept) {
            (Some(a), _) => self.claim(&pos, a, size),
            (None, Some((i, _, _, a))) => {
                if let Some((s, e)) = self.isolated.cut(i, a, size) {
                    self.free.insert(s, e);
                }
                self.free_bytes -= size;
                self.mark_live(a, size);
            }
            (None, None) => return None,
        }
        found.or(kept.map(|k| k.3))
    }

    /// The best fit over the tree's blocks and the isolated ones by a scan
    /// of each (the reference the debug builds check the search against).
    fn best_fit_linear(&self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        let tree = self.free.best_fit_scan(size, align, lo, hi);
        let kept = self
            .isolated
            .best_fit(size, align, lo, hi)
            .0
            .map(|(_, l, s, a)| (l, s, a));
        let best = match (tree, kept) {
            (Some(t), Some(k)) => Some(t.min(k)),
            (t, k) => t.or(k),
        };
        best.map(|(_, _, a)| a)
    }

    /// [`Policy::Linux`]'s address in `[lo, hi)` (`lo < hi`): the lowest
    /// aligned fit above `lo` in the first free block at least
    /// [`Policy::linux_search_len`] long that holds one, if it ends by
    /// `hi`. Found with two searches of the settled tree: the block that
    /// holds `lo`, then the lowest stretch of that length above `lo`.
    fn linux_fit(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        let len = Policy::linux_search_len(size, align, hi - lo)?;
        let in_window = |a: u64| (a.checked_add(size)? <= hi).then_some(a);
        self.settle_isolated();
        if let Some((s, e)) = self.free.containing(lo) {
            if e - s >= len {
                if let Some(a) = crate::range::fit_in(lo, e, size, align) {
                    return in_window(a);
                }
            }
        }
        // A stretch of `len` free bytes from `x` holds an aligned fit at
        // `x` rounded up, whether `x` is a block's start or `lo`.
        let x = self
            .free
            .lowest_fit(len, 1, lo, self.end, &mut Pos::new())?;
        in_window(crate::range::fit_in(x, x + len, size, align)?)
    }

    /// The live areas as `start..end`, in **no particular order** (they are
    /// kept in a hash table); sort them for address order.
    ///
    /// # Complexity
    /// O(capacity of the index), no heap allocation.
    ///
    /// Empty in release builds of an allocator made
    /// [`without_busy_index`](Self::without_busy_index), which keeps none.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 100).unwrap();
    /// va.alloc(10, 1).unwrap();
    /// va.alloc(5, 1).unwrap();
    /// let mut live: Vec<_> = va.live_areas().collect();
    /// live.sort_by_key(|r| r.start);
    /// assert_eq!(live, [0..10, 10..15]);
    /// ```
    pub fn live_areas(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.busy.iter().map(|(s, e)| s..e)
    }

    /// The maximal free blocks as `start..end`, in address order (lazily
    /// freed areas are not free until purged).
    ///
    /// # Complexity
    /// O(n) in all, no heap allocation.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 100).unwrap();
    /// va.alloc_in(10, 1, 40, 50).unwrap();
    /// assert_eq!(va.free_blocks().collect::<Vec<_>>(), [0..40, 50..100]);
    /// ```
    pub fn free_blocks(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        // Only the pending area and its pads touch: joined here.
        let mut held = self.held_free_blocks().peekable();
        core::iter::from_fn(move || {
            let (s, mut e) = held.next()?;
            while let Some((_, ne)) = held.next_if(|&(ns, _)| ns == e) {
                e = ne;
            }
            Some(s..e)
        })
    }

    /// The free blocks as they are held, in address order: the tree's,
    /// the isolated ones and the pending area (beside its pads).
    pub(super) fn held_free_blocks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let pending = self.pending.held().map(|h| h.area);
        let aside = by_start(self.isolated.iter(), pending.into_iter());
        by_start(self.free.iter(), aside)
    }

    /// The lazily freed areas waiting for a purge, in the order they were
    /// freed.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 100).unwrap();
    /// let a = va.alloc(10, 1).unwrap();
    /// va.free_lazy(a).unwrap();
    /// assert_eq!(va.lazy_areas().collect::<Vec<_>>(), [0..10]);
    /// ```
    pub fn lazy_areas(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.lazy.iter().map(|&(s, e)| s..e)
    }

    /// Grows the managed space to `new`, which must contain the current one
    /// (it may extend either end). The added ranges are free and merge with
    /// the free blocks at the old edges (range-alloc's `grow_to`).
    ///
    /// # Errors
    /// [`RequestError::BadSpace`] when `new` is empty or does not contain
    /// the current space; nothing changes.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0x1000, 0x2000).unwrap();
    /// va.grow(0..0x4000).unwrap();
    /// assert_eq!(va.space(), (0, 0x4000));
    /// assert_eq!(va.free_blocks().collect::<Vec<_>>(), [0..0x4000]);
    /// assert!(va.grow(0x1000..0x2000).is_err()); // that would shrink
    /// ```
    pub fn grow(&mut self, new: Range<u64>) -> Result<(), RequestError> {
        crate::debug_check!(self);
        if !self.has_room(2, 0) {
            return Err(RequestError::StorageFull);
        }
        if self.start == self.end && new.start < new.end {
            // Nothing managed yet: the new space is the first range.
            (self.start, self.end) = (new.start, new.end);
            self.merge_or_add(new.start, new.end);
            return Ok(());
        }
        if new.start > self.start || new.end < self.end {
            return Err(RequestError::BadSpace {
                space: self.space(),
                asked: (new.start, new.end),
            });
        }
        if new.start < self.start {
            self.merge_or_add(new.start, self.start);
            self.start = new.start;
        }
        if new.end > self.end {
            self.merge_or_add(self.end, new.end);
            self.end = new.end;
        }
        Ok(())
    }

    /// Shrinks the managed space to `new`, which must be non-empty and lie
    /// inside the current one, its bounds in managed ranges (not in a hole
    /// between ranges added by [`add_free`](Self::add_free)); what it
    /// drops at either end must be free (not live, not waiting for a
    /// purge) or unmanaged.
    ///
    /// # Errors
    /// [`RequestError::BadSpace`] when `new` is empty, not inside the
    /// current space, or starts or ends in a hole; [`RequestError::InUse`] naming a dropped part that is
    /// in use. Nothing changes.
    ///
    /// # Examples
    /// ```
    /// use mmkit::request::RequestError;
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 0x4000).unwrap();
    /// let a = va.alloc_in(0x1000, 1, 0x3000, 0x4000).unwrap();
    /// assert_eq!(va.shrink(0..0x2000), Err(RequestError::InUse { start: 0x2000, end: 0x4000 }));
    /// va.free(a).unwrap();
    /// va.shrink(0x1000..0x2000).unwrap();
    /// assert_eq!(va.space(), (0x1000, 0x2000));
    /// ```
    pub fn shrink(&mut self, new: Range<u64>) -> Result<(), RequestError> {
        crate::debug_check!(self);
        if new.start >= new.end
            || new.start < self.start
            || new.end > self.end
            || !self.bounds_managed(new.start, new.end)
        {
            return Err(RequestError::BadSpace {
                space: self.space(),
                asked: (new.start, new.end),
            });
        }
        // Both dropped parts must lie in free blocks of the tree: check
        // both first, so a refusal changes nothing (the isolated blocks
        // moving into the tree changes no free block).
        self.settle_isolated();
        let dropped = [(self.start, new.start), (new.end, self.end)];
        for (s, e) in dropped {
            if s < e && self.managed_in(s, e).any(|(a, b)| !self.is_free(a, b)) {
                return Err(RequestError::InUse { start: s, end: e });
            }
        }
        for (s, e) in dropped {
            // The managed parts, one at a time: each cut changes no other.
            loop {
                let part = self.managed_in(s, e).find(|&(a, b)| self.is_free(a, b));
                let Some((a, b)) = part else { break };
                self.cut_free(a, b);
            }
        }
        self.drop_holes_outside(new.start, new.end);
        (self.start, self.end) = (new.start, new.end);
        Ok(())
    }

    /// Whether `[s, e)` lies inside one free block.
    fn is_free(&self, s: u64, e: u64) -> bool {
        self.free.containing(s).is_some_and(|(_, end)| end >= e)
    }

    /// Removes `[s, e)`, which lies in one free block, from free space.
    fn cut_free(&mut self, s: u64, e: u64) {
        let mut pos = Pos::new();
        if let Some(a) = self.free.lowest_fit(e - s, 1, s, e, &mut pos) {
            debug_assert_eq!(a, s);
            self.clip(&pos, a, e - s);
        }
    }
}

/// Two iterators of disjoint ranges sorted by start, merged in order.
fn by_start(
    a: impl Iterator<Item = (u64, u64)>,
    b: impl Iterator<Item = (u64, u64)>,
) -> impl Iterator<Item = (u64, u64)> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    core::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if y.0 < x.0 => b.next(),
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn req(size: u64) -> Request {
        Request::bytes(size).unwrap()
    }

    #[test]
    fn bad_requests_change_nothing_and_say_why() {
        let mut v = VmapAllocator::new(0, 100).unwrap();
        let a = v.alloc(10, 1).unwrap();
        let before: Vec<_> = v.free_blocks().collect();
        assert_eq!(
            v.allocate(req(1).align(3)),
            Err(RequestError::BadAlign { align: 3 })
        );
        assert_eq!(
            v.allocate(req(1).within(50..50)),
            Err(RequestError::EmptyWindow { start: 50, end: 50 })
        );
        assert_eq!(
            v.allocate(req(4).align(4).at(6)),
            Err(RequestError::Misaligned { addr: 6, align: 4 })
        );
        assert_eq!(
            v.allocate(req(4).at(8)),
            Err(RequestError::NotFree { start: 8, end: 12 })
        );
        assert_eq!(
            v.allocate(req(4).at(u64::MAX - 1)),
            Err(RequestError::NotFree {
                start: u64::MAX - 1,
                end: u64::MAX
            })
        );
        assert_eq!(
            v.allocate(req(91)),
            Err(RequestError::NoFit {
                size: 91,
                align: 1,
                window: (0, 100),
                largest_free: 90
            })
        );
        assert_eq!(
            v.allocate(req(1).within(200..300)),
            Err(RequestError::NoFit {
                size: 1,
                align: 1,
                window: (200, 200),
                largest_free: 90
            })
        );
        assert_eq!(v.free_blocks().collect::<Vec<_>>(), before);
        assert_eq!(v.area_size(a), Some(10));
        v.check().unwrap();
    }

    #[test]
    fn highest_and_exact_purge_once_before_failing() {
        let mut v = VmapAllocator::new(0, 100).unwrap();
        let a = v.allocate(req(100).policy(Policy::Highest)).unwrap();
        assert_eq!(a, 0);
        v.free_lazy(a).unwrap();
        assert_eq!(v.allocate(req(10).at(30)), Ok(30)); // after a purge
        assert_eq!(v.stats().purges, 1);
        assert_eq!(v.allocate(req(10).policy(Policy::Highest)), Ok(90));
        assert_eq!(
            v.allocate(req(10).align(16).policy(Policy::Highest).within(0..85)),
            Ok(64)
        );
        v.check().unwrap();
    }

    #[test]
    fn policies_and_resizing_at_the_top_of_u64() {
        let top = u64::MAX;
        let mut v = VmapAllocator::new(top - 100, top).unwrap();
        assert_eq!(v.allocate(req(10).policy(Policy::Highest)), Ok(top - 10));
        assert_eq!(
            v.allocate(req(16).align(16).policy(Policy::Highest)),
            Ok(((top - 10) & !15) - 16)
        );
        assert_eq!(
            v.allocate(req(10).at(top - 5)),
            Err(RequestError::NotFree {
                start: top - 5,
                end: top
            })
        );
        assert_eq!(
            v.allocate(req(1).align(1 << 63)),
            Err(RequestError::NoFit {
                size: 1,
                align: 1 << 63,
                window: (top - 100, top),
                largest_free: v.free_blocks().map(|r| r.end - r.start).max().unwrap(),
            })
        );
        v.grow(0..top).unwrap();
        assert_eq!(v.allocate(req(1).align(1 << 63)), Ok(0));
        assert_eq!(
            v.allocate(req(1).align(1 << 63).policy(Policy::Highest)),
            Ok(1 << 63)
        );
        v.check().unwrap();
        assert_eq!(
            v.shrink(0..top - 200),
            Err(RequestError::InUse {
                start: top - 200,
                end: top
            })
        );
        v.check().unwrap();
    }

    #[test]
    fn grow_and_shrink_keep_every_invariant() {
        let mut v = VmapAllocator::new(100, 200).unwrap();
        let a = v.alloc_in(10, 1, 150, 160).unwrap();
        assert_eq!(
            v.grow(101..300),
            Err(RequestError::BadSpace {
                space: (100, 200),
                asked: (101, 300)
            })
        );
        v.grow(3..301).unwrap();
        v.check().unwrap();
        assert_eq!(v.free_blocks().collect::<Vec<_>>(), [3..150, 160..301]);
        assert_eq!(v.stats().free_bytes, 298 - 10);
        let b = v.alloc_in(1, 1, 300, 301).unwrap();
        v.free_lazy(b).unwrap();
        assert_eq!(
            v.shrink(3..300),
            Err(RequestError::InUse {
                start: 300,
                end: 301
            })
        );
        v.purge(&mut |_, _| {});
        assert_eq!(
            v.shrink(151..200),
            Err(RequestError::InUse { start: 3, end: 151 })
        );
        assert_eq!(
            v.shrink(5..5),
            Err(RequestError::BadSpace {
                space: (3, 301),
                asked: (5, 5)
            })
        );
        v.check().unwrap();
        v.shrink(7..299).unwrap();
        v.check().unwrap();
        assert_eq!(v.free_blocks().collect::<Vec<_>>(), [7..150, 160..299]);
        v.free(a).unwrap();
        v.shrink(8..9).unwrap();
        assert_eq!(v.free_blocks().collect::<Vec<_>>(), vec![8..9]);
        assert_eq!(v.alloc(1, 1), Ok(8));
        v.check().unwrap();
    }
}
