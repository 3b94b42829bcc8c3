//! Frees that carry the area's size: [`VmapAllocator::free_sized`] and
//! [`VmapAllocator::free_lazy_sized`], and an allocator that keeps no busy
//! index at all, [`VmapAllocator::without_busy_index`].
//!
//! The kernel's callers often know the size they free (`vm_unmap_ram(addr,
//! count)`, `gen_pool_free(pool, addr, size)`), as offset-allocator's and
//! TLSF's handles do. The busy index exists to find it; a caller that
//! carries it lets the allocator skip it:
//!
//! | allocator made with            | `free_sized` checks the size against | `free(addr)` |
//! |--------------------------------|--------------------------------------|--------------|
//! | [`new`](VmapAllocator::new)    | the busy index, always               | works        |
//! | `without_busy_index`, debug build or feature `debug-check` | a shadow busy index | refused (`Invalid`) |
//! | `without_busy_index`, release  | nothing but the free space around it | refused (`Invalid`) |
//!
//! In the last row the caller's word is trusted. What can be told from the
//! free blocks beside the area (found by the descent the free makes
//! anyway) is still refused: a range outside the space, or one that
//! overlaps free space. A size that covers part of a live area, several
//! live areas, or a lazily freed area is not detected there: the free
//! space then ends up wrong (and [`check`](VmapAllocator::check) cannot
//! tell, having no record of the live areas), as a wrong handle corrupts
//! TLSF. Test with debug builds, where every such free is refused.

use super::{PerStorage, VmapAllocator};
use crate::error::{AllocError, FreeError};
use crate::range::SizedFree;

/// Whether an allocator made without a busy index keeps one anyway, to
/// check the sizes it is given.
const CHECKED: bool = cfg!(any(debug_assertions, feature = "debug-check"));

impl<S: crate::storage::Storage> VmapAllocator<S> {
    /// Whether the busy index holds every live area (so `live_areas`
    /// lists them).
    #[cfg(feature = "lock_api")]
    pub(crate) fn indexes_live(&self) -> bool {
        self.indexed
    }
}

impl VmapAllocator {
    /// An allocator managing `[start, end)`, as [`new`](Self::new), that
    /// keeps no busy index in release builds: every free carries its size
    /// ([`free_sized`](Self::free_sized)), and [`free`](Self::free) is
    /// refused. Debug builds (and the `debug-check` feature) keep a shadow
    /// index and check every size against it:
    ///
    /// | allocator made with | `free_sized` checks the size against | `free(addr)` |
    /// |---|---|---|
    /// | [`new`](Self::new) | the busy index, always | works |
    /// | `without_busy_index`, debug build or `debug-check` | a shadow busy index | refused (`Invalid`) |
    /// | `without_busy_index`, release build | only the free space around it | refused (`Invalid`) |
    ///
    /// In the last row the caller's word is trusted. What the free blocks
    /// beside the area tell (found by the descent the free makes anyway) is
    /// still refused: a range outside the space, or one that overlaps free
    /// space. A size that covers part of a live area, several live areas,
    /// or a lazily freed area is not detected there: the free space then
    /// ends up wrong, and [`check`](Self::check) cannot tell, having no
    /// record of the live areas (a wrong handle corrupts TLSF the same
    /// way). Test in debug builds, where every such free is refused.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] if `start >= end`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::FreeError;
    /// let mut va = VmapAllocator::without_busy_index(0, 1 << 20).unwrap();
    /// let a = va.alloc(0x3000, 0x1000).unwrap();
    /// assert_eq!(va.free(a), Err(FreeError::Invalid)); // the size is needed
    /// assert_eq!(va.free_sized(a, 0x3000), Ok(0x3000));
    /// assert_eq!(va.stats().live_areas, 0);
    /// ```
    pub fn without_busy_index(start: u64, end: u64) -> Result<Self, AllocError> {
        let mut va = Self::new(start, end)?;
        va.sized_only = true;
        va.indexed = CHECKED;
        Ok(va)
    }

    /// An allocator that manages nothing yet, as
    /// [`new_empty`](Self::new_empty), and keeps no busy index, as
    /// [`without_busy_index`](Self::without_busy_index).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::empty_without_busy_index();
    /// va.add_free(0x1000, 0x2000).unwrap();
    /// let a = va.alloc(0x100, 1).unwrap();
    /// assert_eq!(va.free_range(a, 0x100), Ok(0x100));
    /// ```
    pub fn empty_without_busy_index() -> Self {
        let mut va = Self::new_empty();
        va.sized_only = true;
        va.indexed = CHECKED;
        va
    }
}

impl<S: crate::storage::Storage> VmapAllocator<S>
where
    Self: PerStorage,
{
    /// Whether the allocator was made
    /// [`without_busy_index`](Self::without_busy_index): frees must carry
    /// their size.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// assert!(!VmapAllocator::new(0, 100).unwrap().frees_need_size());
    /// assert!(VmapAllocator::without_busy_index(0, 100).unwrap().frees_need_size());
    /// ```
    pub fn frees_need_size(&self) -> bool {
        self.sized_only
    }

    /// Frees the live area `[addr, addr + size)`; returns `size`. As
    /// [`free`](Self::free), but the caller says the size: checked against
    /// the busy index where there is one, trusted where there is none (see
    /// [`without_busy_index`](Self::without_busy_index)).
    ///
    /// # Errors
    /// [`FreeError::Invalid`] for `size == 0` or a range outside the space;
    /// [`FreeError::NotAllocated`] if no live area starts at `addr` (or,
    /// without an index, the range overlaps free space);
    /// [`FreeError::SizeMismatch`] if the live area at `addr` has another
    /// size. Nothing changes then.
    ///
    /// # Complexity
    /// O(log n), as [`free`](Self::free).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::FreeError;
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// let a = va.alloc(0x2000, 0x1000).unwrap();
    /// assert_eq!(va.free_sized(a, 0x1000), Err(FreeError::SizeMismatch));
    /// assert_eq!(va.free_sized(a, 0x2000), Ok(0x2000));
    /// assert_eq!(va.free_sized(a, 0x2000), Err(FreeError::NotAllocated));
    /// ```
    #[inline]
    pub fn free_sized(&mut self, addr: u64, size: u64) -> Result<u64, FreeError> {
        SizedFree::free_sized(self, addr, size)
    }

    /// The body of [`free_sized`](Self::free_sized).
    pub(super) fn free_sized_body(&mut self, addr: u64, size: u64) -> Result<u64, FreeError> {
        crate::debug_check!(self);
        let end = self.sized_end(addr, size)?;
        self.free_room()?;
        self.take_sized(addr, end, true)?;
        self.release(addr, end, true);
        Ok(size)
    }

    /// Frees `areas`, live and adjacent, joined in list order, which cover
    /// `[lo, hi)`: one tree update for the run instead of one per area.
    /// With a busy index (a debug build's checks) each area is freed and
    /// checked alone.
    #[cfg(feature = "lock_api")]
    pub(crate) fn free_run(
        &mut self,
        areas: &[(u64, u64)],
        lo: u64,
        hi: u64,
    ) -> Result<(), FreeError> {
        if self.indexed {
            for &(s, e) in areas {
                self.free_sized_body(s, e.wrapping_sub(s))?;
            }
            return Ok(());
        }
        self.free_sized_body(lo, hi.wrapping_sub(lo))?;
        let more = (areas.len() as u64).saturating_sub(1);
        self.live_count = self.live_count.saturating_sub(more);
        Ok(())
    }

    /// Frees the live area `[addr, addr + size)` lazily, as
    /// [`free_lazy`](Self::free_lazy), the size checked as
    /// [`free_sized`](Self::free_sized) checks it. Returns `size`.
    ///
    /// # Errors
    /// As [`free_sized`](Self::free_sized).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::VmapAllocator;
    /// let mut va = VmapAllocator::without_busy_index(0, 0x10000).unwrap();
    /// let a = va.alloc(0x100, 1).unwrap();
    /// assert_eq!(va.free_lazy_sized(a, 0x100), Ok(0x100));
    /// assert_eq!(va.alloc(0x100, 1), Ok(0x100)); // not reused before a purge
    /// ```
    #[inline]
    pub fn free_lazy_sized(&mut self, addr: u64, size: u64) -> Result<u64, FreeError> {
        SizedFree::free_lazy_sized(self, addr, size)
    }

    /// The body of [`free_lazy_sized`](Self::free_lazy_sized).
    pub(super) fn free_lazy_sized_body(&mut self, addr: u64, size: u64) -> Result<u64, FreeError> {
        crate::debug_check!(self);
        let end = self.sized_end(addr, size)?;
        if !self.lazy_allowed() {
            return Err(FreeError::StorageFull);
        }
        self.take_sized(addr, end, false)?;
        self.defer(addr, end);
        Ok(size)
    }

    /// Takes the live area `[addr, end)` out of the books: out of the busy
    /// index when there is one (its size checked), else checked against the
    /// free blocks around it. `descend` finds the neighbours for an eager
    /// release (the home bucket read first, as `free` reads it); without a
    /// busy index the check needs them anyway.
    #[inline(always)]
    fn take_sized(&mut self, addr: u64, end: u64, descend: bool) -> Result<(), FreeError> {
        if self.indexed {
            let probe = self.busy.probe(addr);
            if descend {
                self.settle_pending();
                self.free.neighbours_near(addr, &mut self.nb);
            }
            match self.busy.remove_probed_if(addr, probe, |e| e == end) {
                None => return Err(FreeError::NotAllocated),
                Some(Err(_)) => return Err(FreeError::SizeMismatch),
                Some(Ok(_)) => {}
            }
        } else {
            self.settle_pending();
            self.free.neighbours_near(addr, &mut self.nb);
            self.trusted(addr, end)?;
        }
        self.live_bytes -= end - addr;
        // Without an index, a range free may have left the count behind.
        self.live_count = self.live_count.saturating_sub(1);
        Ok(())
    }

    /// The end of `[addr, addr + size)`, a range inside the space.
    fn sized_end(&self, addr: u64, size: u64) -> Result<u64, FreeError> {
        let end = addr.checked_add(size).ok_or(FreeError::Invalid)?;
        if size == 0 || self.outside(addr, end) {
            return Err(FreeError::Invalid);
        }
        Ok(end)
    }

    /// What an allocator without an index can tell of `[addr, end)`: it
    /// must not overlap a free block (the tree's beside it, `self.nb`,
    /// found for `addr` with nothing pending, or an isolated one) nor
    /// exceed the live bytes.
    #[inline(always)]
    fn trusted(&self, addr: u64, end: u64) -> Result<(), FreeError> {
        let nb = &self.nb;
        let overlaps = nb.prev.is_some_and(|p| p.1 > addr)
            || nb.next.is_some_and(|n| n.0 < end)
            || self.isolated.iter().any(|(s, e)| s < end && addr < e);
        if overlaps || end - addr > self.live_bytes {
            return Err(FreeError::NotAllocated);
        }
        Ok(())
    }
}

per_storage! {
impl SizedFree {
    fn free_sized(&mut self, addr: u64, size: u64) -> Result<u64, FreeError> {
        self.free_sized_body(addr, size)
    }

    fn free_lazy_sized(&mut self, addr: u64, size: u64) -> Result<u64, FreeError> {
        self.free_lazy_sized_body(addr, size)
    }
}
}
