//! Free space from a memory map: [`VmapAllocator::new_empty`],
//! [`VmapAllocator::add_free`] and range frees,
//! [`VmapAllocator::free_range`].
//!
//! A kernel learns its free memory from the firmware as a list of disjoint
//! ranges (RAM below the 32-bit PCI hole, RAM above it, ...). The allocator
//! takes them one by one. What it manages is then the union of the ranges
//! added, kept as the **hull** `[start, end)` (what
//! [`space`](VmapAllocator::space) returns: the lowest start and highest
//! end added) less the **holes** inside it, the maximal gaps no range
//! covers:
//!
//! ```text
//!   hull  [start ------------------------------------------------ end)
//!          | managed  |  hole  |  managed  |   hole   |  managed   |
//!   holes:            `--------'           `----------'
//! ```
//!
//! A hole is never free, never live and never lazy: no search finds space
//! in it, a free or a range free touching it is refused, and only
//! [`add_free`](VmapAllocator::add_free) makes it (part of) the managed
//! space. "Outside the space" means outside the hull or inside a hole.
//! An allocation window is clamped to the hull; the holes in it are simply
//! not free. Holes are few (one per gap of the firmware map), kept sorted
//! in a list searched by bisection.

use core::ops::Range;

use super::VmapAllocator;
use crate::error::{AddFreeError, FreeError};
use crate::range::RangeAllocator;
use crate::storage::{Fixed, Heap, Inline, Storage, Store};

/// The maximal gaps inside the hull that no added range covers, sorted by
/// start; each is non-empty, lies strictly inside the hull, and no two
/// touch.
#[derive(Debug, Clone)]
pub(super) struct Holes<S: Storage>(pub(super) S::Store<(u64, u64)>);

impl Holes<Heap> {
    pub(super) const fn new() -> Self {
        Holes(alloc::vec::Vec::new())
    }
}

impl<const N: usize> Holes<Fixed<N>> {
    pub(super) const fn new_fixed() -> Self {
        Holes(Inline::filled((0, 0), 0))
    }
}

impl<S: Storage> Holes<S> {
    pub(super) fn list(&self) -> &[(u64, u64)] {
        self.0.as_slice()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.list().iter().copied()
    }

    /// The index of the first hole that ends after `addr`.
    fn after(&self, addr: u64) -> usize {
        self.list().partition_point(|h| h.1 <= addr)
    }

    /// Whether `[s, e)` overlaps a hole.
    pub(super) fn overlap(&self, s: u64, e: u64) -> bool {
        self.list().get(self.after(s)).is_some_and(|h| h.0 < e)
    }

    /// The hole that holds all of `[s, e)`, by index.
    fn holding(&self, s: u64, e: u64) -> Option<usize> {
        let i = self.after(s);
        self.list()
            .get(i)
            .filter(|h| h.0 <= s && e <= h.1)
            .map(|_| i)
    }

    /// The end of the last hole that ends at or below `addr`.
    fn end_below(&self, addr: u64) -> Option<u64> {
        self.after(addr).checked_sub(1).map(|i| self.list()[i].1)
    }

    /// Takes `[s, e)` out of hole `i`, which holds it.
    fn fill(&mut self, i: usize, s: u64, e: u64) {
        let (hs, he) = self.list()[i];
        let holes = &mut self.0;
        match (hs < s, e < he) {
            (false, false) => {
                holes.remove(i);
            }
            (true, false) => holes.as_mut_slice()[i].1 = s,
            (false, true) => holes.as_mut_slice()[i].0 = e,
            (true, true) => {
                holes.as_mut_slice()[i].1 = s;
                holes.insert(i + 1, (e, he));
            }
        }
    }

    /// Drops the holes outside `[lo, hi)` (neither bound lies in one).
    fn keep_within(&mut self, lo: u64, hi: u64) {
        self.0.retain(|h| lo < h.0 && h.1 < hi);
    }
}

impl VmapAllocator {
    /// An allocator that manages nothing yet: free space comes from
    /// [`add_free`](Self::add_free), range by range, as a kernel reads its
    /// firmware memory map. Its [`space`](Self::space) is `(0, 0)` until
    /// the first range is added.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new_empty();
    /// assert!(va.alloc(1, 1).is_err());
    /// va.add_free(0x1000, 0x9f000).unwrap();           // low RAM
    /// va.add_free(0x10_0000, 0xc000_0000).unwrap();    // RAM below the PCI hole
    /// va.add_free(0x1_0000_0000, 0x2_0000_0000).unwrap(); // RAM above 4 GiB
    /// assert_eq!(va.space(), (0x1000, 0x2_0000_0000));
    /// assert_eq!(va.alloc(0x10_0000, 0x10_0000), Ok(0x10_0000));
    /// va.check().unwrap();
    /// ```
    pub fn new_empty() -> Self {
        Self::with_space(0, 0)
    }
}

impl<S: Storage> VmapAllocator<S>
where
    Self: RangeAllocator,
{
    /// Adds `[start, end)` to the free space: anywhere in `u64` (`end` may
    /// be `u64::MAX`) outside what the allocator manages, below, above or
    /// between the ranges it has. It merges with the free blocks it
    /// touches, so free blocks stay maximal.
    ///
    /// # Errors
    /// [`AddFreeError::Empty`] when `start >= end`;
    /// [`AddFreeError::Overlaps`], naming the first managed part inside the
    /// range, when any byte of it is managed already (free, live or lazily
    /// freed). Nothing changes.
    ///
    /// # Complexity
    /// O(log n + h) for h holes (O(log n) when the range extends the hull).
    ///
    /// # Examples
    /// ```
    /// use mmkit::AddFreeError;
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 0x1000).unwrap();
    /// va.add_free(0x4000, 0x5000).unwrap();
    /// va.add_free(0x1000, 0x2000).unwrap(); // touches [0, 0x1000): merged
    /// assert_eq!(va.free_blocks().collect::<Vec<_>>(), [0..0x2000, 0x4000..0x5000]);
    /// assert_eq!(
    ///     va.add_free(0x1800, 0x4800),
    ///     Err(AddFreeError::Overlaps { start: 0x1800, end: 0x2000 })
    /// );
    /// ```
    pub fn add_free(&mut self, start: u64, end: u64) -> Result<(), AddFreeError> {
        crate::debug_check!(self);
        if start >= end {
            return Err(AddFreeError::Empty { start, end });
        }
        // A hole appears beside a range added past the hull, or when one
        // fills the middle of a hole (at most one either way).
        if !self.has_room(1, usize::from(self.adds_hole(start, end))) {
            return Err(AddFreeError::StorageFull);
        }
        if self.start == self.end {
            (self.start, self.end) = (start, end);
        } else if end <= self.start {
            if end < self.start {
                self.holes.0.insert(0, (end, self.start));
            }
            self.start = start;
        } else if start >= self.end {
            if self.end < start {
                self.holes.0.push((self.end, start));
            }
            self.end = end;
        } else {
            let i = self
                .holes
                .holding(start, end)
                .ok_or_else(|| self.first_managed(start, end))?;
            self.holes.fill(i, start, end);
        }
        self.merge_or_add(start, end);
        Ok(())
    }

    /// Whether adding `[s, e)` would add a hole.
    fn adds_hole(&self, s: u64, e: u64) -> bool {
        if self.start == self.end {
            return false;
        }
        if e <= self.start || s >= self.end {
            return e < self.start || s > self.end;
        }
        self.holes
            .holding(s, e)
            .is_some_and(|i| self.holes.list()[i].0 < s && e < self.holes.list()[i].1)
    }

    /// The first managed part of `[s, e)`, which overlaps the hull.
    fn first_managed(&self, s: u64, e: u64) -> AddFreeError {
        let i = self.holes.after(s);
        let (lo, next) = match self.holes.list().get(i) {
            Some(&(hs, he)) if hs <= s => (he, i + 1),
            _ => (s.max(self.start), i),
        };
        let hi = self.holes.list().get(next).map_or(self.end, |h| h.0);
        AddFreeError::Overlaps {
            start: lo,
            end: hi.min(e),
        }
    }

    /// The managed space as maximal ranges in address order: the hull
    /// ([`space`](Self::space)) less its holes, the gaps inside it that no
    /// range added covers. A hole is never free, live or lazy: no search
    /// finds space there, and a free touching one is refused.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new_empty();
    /// va.add_free(10, 20).unwrap();
    /// va.add_free(30, 40).unwrap();
    /// va.add_free(20, 25).unwrap();
    /// assert_eq!(va.managed().collect::<Vec<_>>(), [10..25, 30..40]);
    /// ```
    pub fn managed(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        let mut at = self.start;
        let mut holes = self.holes.iter();
        let mut done = self.start == self.end;
        core::iter::from_fn(move || {
            if done {
                return None;
            }
            match holes.next() {
                Some((hs, he)) => {
                    let r = at..hs;
                    at = he;
                    Some(r)
                }
                None => {
                    done = true;
                    Some(at..self.end)
                }
            }
        })
    }

    /// Whether `[s, e)` lies outside the space: past the hull, or touching
    /// a hole.
    pub(super) fn outside(&self, s: u64, e: u64) -> bool {
        s < self.start || e > self.end || self.holes.overlap(s, e)
    }

    /// Frees `[start, start + len)`, any part of what is allocated: a whole
    /// area, its head, its tail or its middle (the rest of the area stays
    /// live, trimmed or split in two), or a range spanning several areas.
    /// The freed space merges with its free neighbours. Returns `len`.
    ///
    /// With a busy index the areas it cuts are found in it and the parts
    /// left are put back. Without one (an allocator made
    /// [`without_busy_index`](Self::without_busy_index) in a release
    /// build), every byte that is not free, lazy or a hole is live, so the
    /// check is the same; only the count of live areas is not kept exact
    /// (it drops to 0 with the live bytes).
    ///
    /// # Errors
    /// [`FreeError::Invalid`] for `len == 0`, an overflowing range, or one
    /// outside the space (past the hull or touching a hole);
    /// [`FreeError::NotAllocated`] when any byte of it is free or lazily
    /// freed. Nothing changes.
    ///
    /// # Complexity
    /// O(log n + k + m · l): k isolated blocks and lazy areas, and, with a
    /// busy index, m live areas from the free block below `start` to the
    /// range's end, each looked up in O(1) (or, where one is not live, among
    /// the l lazy areas). The busy index finds areas by their start only.
    ///
    /// # Examples
    /// ```
    /// use mmkit::FreeError;
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// let a = va.alloc(0x4000, 1).unwrap();
    /// let b = va.alloc(0x4000, 1).unwrap();
    /// assert_eq!(va.free_range(0x1000, 0x1000), Ok(0x1000)); // a's middle
    /// assert_eq!(va.free_range(0x3000, 0x2000), Ok(0x2000)); // a's tail, b's head
    /// assert_eq!(va.free_range(0x3000, 0x1000), Err(FreeError::NotAllocated));
    /// let mut live: Vec<_> = va.live_areas().collect();
    /// live.sort_by_key(|r| r.start);
    /// assert_eq!(live, [0..0x1000, 0x2000..0x3000, 0x5000..0x8000]);
    /// assert_eq!(va.free_blocks().collect::<Vec<_>>(), [0x1000..0x2000, 0x3000..0x5000, 0x8000..0x10000]);
    /// # let _ = (a, b);
    /// ```
    pub fn free_range(&mut self, start: u64, len: u64) -> Result<u64, FreeError> {
        crate::debug_check!(self);
        let end = start
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or(FreeError::Invalid)?;
        if self.outside(start, end) {
            return Err(FreeError::Invalid);
        }
        self.free_room()?;
        // Moving the isolated blocks and the pending area into the tree
        // changes no free block; then the tree's neighbours say it all.
        self.settle_isolated();
        self.free.neighbours_near(start, &mut self.nb);
        let nb = &self.nb;
        let touches_free =
            nb.prev.is_some_and(|p| p.1 > start) || nb.next.is_some_and(|n| n.0 < end);
        if touches_free || self.overlaps_lazy(start, end) {
            return Err(FreeError::NotAllocated);
        }
        if self.indexed {
            let below = nb.prev.map_or(self.start, |p| p.1);
            let gap = self.holes.end_below(start).map_or(below, |h| h.max(below));
            let first = self.first_live(gap, start, end)?;
            self.cut_live(first, start, end);
        } else if len > self.live_bytes {
            return Err(FreeError::NotAllocated);
        }
        self.live_bytes -= len;
        if self.live_bytes == 0 {
            self.live_count = 0;
        }
        self.release(start, end, true);
        Ok(len)
    }

    /// The start of the live area holding `start`, walking the areas from
    /// `gap`, where the run of non-free bytes holding `[start, end)`
    /// begins; checks that live areas cover `[start, end)`.
    fn first_live(&self, gap: u64, start: u64, end: u64) -> Result<u64, FreeError> {
        let mut at = gap;
        let mut first = None;
        while at < end {
            let next = match self.busy.get(at) {
                Some(e) => e,
                None => match self.lazy_end(at) {
                    Some(e) if e <= start => e,
                    _ => return Err(FreeError::NotAllocated),
                },
            };
            if first.is_none() && start < next {
                first = Some(at);
            }
            at = next;
        }
        first.ok_or(FreeError::NotAllocated)
    }

    /// Takes `[start, end)` out of the live areas from `first` on, which
    /// cover it: the parts of them outside it stay live.
    fn cut_live(&mut self, first: u64, start: u64, end: u64) {
        let mut at = first;
        while at < end {
            let p = self.busy.probe(at);
            let e = self
                .busy
                .remove_probed(at, p)
                .unwrap_or_else(|| unreachable!("checked by first_live"));
            self.live_count -= 1;
            if at < start {
                self.busy.insert(at, start);
                self.live_count += 1;
            }
            if end < e {
                self.busy.insert(end, e);
                self.live_count += 1;
            }
            at = e;
        }
    }

    /// Whether shrinking the hull to `[lo, hi)` keeps both bounds managed.
    pub(super) fn bounds_managed(&self, lo: u64, hi: u64) -> bool {
        !self.holes.overlap(lo, lo + 1) && !self.holes.overlap(hi - 1, hi)
    }

    /// The managed parts of `[s, e)`.
    pub(super) fn managed_in(&self, s: u64, e: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.managed()
            .map(move |r| (r.start.max(s), r.end.min(e)))
            .filter(|(a, b)| a < b)
    }

    /// Drops the holes outside the new hull `[lo, hi)`.
    pub(super) fn drop_holes_outside(&mut self, lo: u64, hi: u64) {
        self.holes.keep_within(lo, hi);
    }
}

#[cfg(feature = "std")]
/// Free space from a memory map and range frees, under the lock.
impl crate::range::Locked<VmapAllocator> {
    /// [`VmapAllocator::add_free`](crate::vmap::VmapAllocator::add_free)
    /// under the lock.
    ///
    /// # Errors
    /// As `add_free`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::range::Locked;
    /// use mmkit::vmap::VmapAllocator;
    /// let va = Locked::new(VmapAllocator::new_empty());
    /// va.add_free(0x1000, 0x2000).unwrap();
    /// va.add_free(0x8000, 0x9000).unwrap();
    /// assert_eq!(va.alloc(0x1000, 1), Ok(0x1000));
    /// assert_eq!(va.alloc(0x1000, 1), Ok(0x8000));
    /// ```
    pub fn add_free(&self, start: u64, end: u64) -> Result<(), AddFreeError> {
        self.lock().add_free(start, end)
    }

    /// [`VmapAllocator::free_range`](crate::vmap::VmapAllocator::free_range)
    /// under the lock.
    ///
    /// # Errors
    /// As `free_range`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::range::Locked;
    /// use mmkit::vmap::VmapAllocator;
    /// let va = Locked::new(VmapAllocator::new(0, 100).unwrap());
    /// let a = va.alloc(40, 1).unwrap();
    /// assert_eq!(va.free_range(a + 30, 10), Ok(10));
    /// assert_eq!(va.lock().area_size(a), Some(30));
    /// ```
    pub fn free_range(&self, start: u64, len: u64) -> Result<u64, FreeError> {
        self.lock().free_range(start, len)
    }
}

/// Free space from a memory map and range frees, on the exact allocator
/// in either storage.
#[cfg(feature = "lock_api")]
impl<M: lock_api::RawMutex, S: Storage> crate::lock::Guarded<M, VmapAllocator<S>>
where
    VmapAllocator<S>: RangeAllocator,
{
    /// [`VmapAllocator::add_free`](crate::vmap::VmapAllocator::add_free)
    /// under the lock.
    ///
    /// # Errors
    /// As `add_free`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lock::Guarded;
    /// use mmkit::storage::Fixed;
    /// use mmkit::vmap::VmapAllocator;
    /// static VA: Guarded<spin::Mutex<()>, VmapAllocator<Fixed<4>>> =
    ///     Guarded::new(VmapAllocator::new_fixed());
    /// VA.add_free(0x1000, 0x2000).unwrap();
    /// assert_eq!(VA.alloc(0x100, 0x100), Ok(0x1000));
    /// ```
    pub fn add_free(&self, start: u64, end: u64) -> Result<(), AddFreeError> {
        self.lock().add_free(start, end)
    }

    /// [`VmapAllocator::free_range`](crate::vmap::VmapAllocator::free_range)
    /// under the lock.
    ///
    /// # Errors
    /// As `free_range`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lock::Guarded;
    /// use mmkit::vmap::VmapAllocator;
    /// let va: Guarded<spin::Mutex<()>, _> = Guarded::new(VmapAllocator::new(0, 100).unwrap());
    /// let a = va.alloc(40, 1).unwrap();
    /// assert_eq!(va.free_range(a + 10, 20), Ok(20));
    /// ```
    pub fn free_range(&self, start: u64, len: u64) -> Result<u64, FreeError> {
        self.lock().free_range(start, len)
    }
}
