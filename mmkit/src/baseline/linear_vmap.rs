//! [`LinearVmap`]: the vmap area allocator seed 000 replaced (Linux up to
//! 5.1), kept so the experiments can run old against new.
//!
//! # The old design
//! Only **busy** areas are kept, in address order. Free space is implicit:
//! it is the holes between consecutive busy areas. An allocation walks the
//! busy areas one after the other until it meets a hole large enough, so it
//! costs O(N) in the number of areas: the cost seed 000 measured.
//!
//! ```text
//!  start                                                              end
//!  |--[A)----[B)--[C)-----------[D)----------------------------------|
//!        hole  hole    hole         hole (above the last area)
//!                 ^
//!                 free_vmap_cache: the walk resumes after this area
//! ```
//!
//! To avoid rescanning from the bottom every time, the kernel remembered the
//! area it allocated last (`free_vmap_cache`) and resumed the walk there.
//! The shortcut is only valid while no hole *below* the cache could serve
//! the request, so it kept three summaries of the walks since the cache was
//! last reset, and dropped the cache when a request was more permissive:
//! - `cached_hole_size`: the largest hole the walks stepped over;
//! - `cached_vstart`: the lower window limit of the last request;
//! - `cached_align`: the alignment of the last request.
//!
//! A free at or below the cache moves it back to the freed area's
//! predecessor, so the new hole lies above the cache and the next walk sees
//! it.
//!
//! # Where the kernel's rule is not exact, and what this model does
//! The kernel reset the cache when `size < cached_hole_size`. A hole of
//! exactly `size` bytes below the cache fits the request too, so the kernel
//! could return a higher address than the lowest fit (harmless for it; it
//! never promised the lowest). This model resets when
//! `size <= cached_hole_size`, and with that one change the walk returns the
//! exact lowest fit of the [contract](crate::range), which the tests check
//! against a brute-force model.
//!
//! # Lazy frees
//! As in the old kernel, a lazily freed area stays in the busy map, flagged,
//! until a purge: the walk treats it as busy, so its space is not reused.
//! The lazily freed areas are also listed (the kernel's purge list, a
//! [`LazyList`]) so a purge does not rescan the whole map.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::error::{AllocError, CheckError, FreeError};
use crate::lazy::LazyList;
use crate::range::{fit_in, FlushHook, RangeAllocator, RangeStats, DEFAULT_LAZY_MAX};

/// One busy area: live, or lazily freed and waiting for a purge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Area {
    /// Exclusive end; the start is the map key.
    end: u64,
    /// Freed lazily: not live, not reusable until the next purge.
    lazy: bool,
}

/// The pre-2019 kernel vmap allocator: busy areas in address order and a
/// linear walk from a cached position (see the [module docs](self)).
///
/// # Invariants
/// - every area `[s, e)` has `start <= s < e <= end`, and consecutive areas
///   do not overlap (`prev.end <= next.start`);
/// - `live_areas + lazy_areas == busy.len()`, and the byte counters equal the
///   sums over the flagged areas;
/// - `lazy` holds exactly the lazy areas, once each;
/// - `cache`, when set, is the start of an area in `busy`;
/// - every hole below the cache and at or above `cached_vstart` is smaller
///   than any request that uses the cache (`size > cached_hole_size`, for
///   alignments `>= cached_align`).
///
/// # Examples
/// ```
/// use mmkit::baseline::linear_vmap::LinearVmap;
/// use mmkit::range::RangeAllocator;
///
/// let mut v = LinearVmap::new(0x1000, 0x10000).unwrap();
/// let a = v.alloc(0x2000, 0x1000).unwrap();
/// let b = v.alloc(0x1000, 0x1000).unwrap();
/// assert_eq!((a, b), (0x1000, 0x3000));
/// v.free(a).unwrap();
/// // The lowest fit again, although the cache sits above the hole.
/// assert_eq!(v.alloc(0x1000, 0x1000), Ok(0x1000));
/// v.check().unwrap();
/// ```
pub struct LinearVmap {
    start: u64,
    end: u64,
    /// Busy areas (live and lazy) keyed by start address.
    busy: BTreeMap<u64, Area>,
    /// The lazily freed areas (the kernel's purge list) and `lazy_max`.
    lazy: LazyList<(u64, u64)>,
    /// `free_vmap_cache`: start of the area the next walk resumes after.
    cache: Option<u64>,
    cached_hole_size: u64,
    cached_vstart: u64,
    cached_align: u64,
    live_areas: u64,
    live_bytes: u64,
    purges: u64,
    flushes: u64,
    hook: Option<FlushHook>,
}

impl core::fmt::Debug for LinearVmap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LinearVmap")
            .field("space", &(self.start, self.end))
            .field("areas", &self.busy.len())
            .field("lazy_areas", &self.lazy.len())
            .field("cache", &self.cache)
            .finish()
    }
}

/// Rounds `x` up to a multiple of the power of two `align`; `None` on
/// overflow.
fn align_up(x: u64, align: u64) -> Option<u64> {
    Some(x.checked_add(align - 1)? & !(align - 1))
}

impl LinearVmap {
    /// An allocator of the space `[start, end)`, all free, with the kernel's
    /// default lazy threshold [`DEFAULT_LAZY_MAX`].
    ///
    /// # Errors
    /// [`AllocError::Invalid`] if `start >= end`.
    ///
    /// # Complexity
    /// O(1).
    pub fn new(start: u64, end: u64) -> Result<Self, AllocError> {
        if start >= end {
            return Err(AllocError::Invalid);
        }
        Ok(LinearVmap {
            start,
            end,
            busy: BTreeMap::new(),
            lazy: LazyList::new(DEFAULT_LAZY_MAX),
            cache: None,
            cached_hole_size: 0,
            cached_vstart: start,
            cached_align: 1,
            live_areas: 0,
            live_bytes: 0,
            purges: 0,
            flushes: 0,
            hook: None,
        })
    }

    /// Drops the cached position: the next walk starts at its `vstart`.
    fn reset_cache(&mut self) {
        self.cache = None;
        self.cached_hole_size = 0;
    }

    /// Where the walk starts: `(addr, first area key to look at)`.
    /// Uses the cache when the request is no more permissive than the walks
    /// that built it; otherwise starts from `lo`.
    fn walk_start(&mut self, size: u64, align: u64, lo: u64) -> Option<(u64, u64)> {
        // `<=`, not the kernel's `<`: a hole of exactly `size` fits too.
        if size <= self.cached_hole_size || lo < self.cached_vstart || align < self.cached_align {
            self.reset_cache();
        }
        self.cached_vstart = lo;
        self.cached_align = align;
        if let Some(c) = self.cache {
            let addr = align_up(self.busy[&c].end, align)?;
            if addr >= lo {
                // Areas after the cached one start at or after its end.
                return Some((addr, c.saturating_add(1)));
            }
            self.reset_cache();
        }
        let addr = align_up(lo, align)?;
        // The area holding `addr`, if any, must be stepped over first.
        let first = match self.busy.range(..=addr).next_back() {
            Some((&s, a)) if a.end > addr => s,
            _ => addr,
        };
        Some((addr, first))
    }

    /// The walk: the lowest aligned hole of `size` bytes in `[lo, hi)`.
    /// Records the holes it steps over in `cached_hole_size`.
    fn find(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        let (addr, from) = self.walk_start(size, align, lo)?;
        let (found, largest) = self.walk(addr, from, size, align, hi);
        self.cached_hole_size = self.cached_hole_size.max(largest);
        found
    }

    /// Steps over busy areas from key `from` with candidate `addr` until the
    /// hole below an area fits. Returns the fit and the largest hole passed.
    fn walk(&self, mut addr: u64, from: u64, size: u64, align: u64, hi: u64) -> (Option<u64>, u64) {
        let mut largest = 0;
        for (&s, a) in self.busy.range(from..) {
            match addr.checked_add(size) {
                Some(e) if e <= hi && e <= s => return (Some(addr), largest),
                Some(e) if e <= hi => {}
                _ => return (None, largest),
            }
            largest = largest.max(s.saturating_sub(addr));
            match align_up(a.end, align) {
                Some(next) => addr = next,
                None => return (None, largest),
            }
        }
        // Past the last area: the hole runs to the end of the window.
        (fit_in(addr, hi, size, 1), largest)
    }

    /// Allocation without the purge-and-retry.
    fn try_alloc(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        if lo >= hi {
            return None;
        }
        let addr = self.find(size, align, lo, hi)?;
        self.busy.insert(
            addr,
            Area {
                end: addr + size,
                lazy: false,
            },
        );
        self.cache = Some(addr);
        self.live_areas += 1;
        self.live_bytes += size;
        Some(addr)
    }

    /// Removes the area at `start` from the busy map and moves the cache as
    /// the kernel's `__free_vmap_area` did.
    fn release(&mut self, start: u64) -> Area {
        let area = self.busy.remove(&start).expect("caller checked the key");
        if let Some(c) = self.cache {
            if area.end < self.cached_vstart {
                self.reset_cache();
            } else if start <= c {
                // The new hole must lie above the cache: step back.
                self.cache = self.busy.range(..start).next_back().map(|(&s, _)| s);
            }
        }
        area
    }

    /// The live area at `addr`, or `NotAllocated`.
    fn live(&self, addr: u64) -> Result<Area, FreeError> {
        match self.busy.get(&addr) {
            Some(a) if !a.lazy => Ok(*a),
            _ => Err(FreeError::NotAllocated),
        }
    }

    /// Purges through the installed hook (threshold and failure purges).
    fn purge_with_hook(&mut self) -> bool {
        crate::range::purge_through_hook(self, |a| &mut a.hook)
    }

    /// The holes between busy areas inside the space, in address order.
    fn holes(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut prev = self.start;
        let inner = self.busy.iter().map(move |(&s, a)| {
            let hole = (prev, s);
            prev = a.end;
            hole
        });
        let last = self.busy.values().next_back().map_or(self.start, |a| a.end);
        inner
            .chain(core::iter::once((last, self.end)))
            .filter(|(s, e)| s < e)
    }
}

impl RangeAllocator for LinearVmap {
    fn space(&self) -> (u64, u64) {
        (self.start, self.end)
    }

    /// Walks the busy areas from the cached position (or from `vstart`)
    /// until a hole fits.
    ///
    /// # Errors
    /// As [`RangeAllocator::alloc_in`].
    ///
    /// # Complexity
    /// O(N) in the number of busy areas (live and lazy), by design.
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

    /// # Errors
    /// [`FreeError::NotAllocated`] if no live area starts at `addr`.
    ///
    /// # Complexity
    /// O(log N).
    fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
        crate::debug_check!(self);
        let area = self.live(addr)?;
        self.release(addr);
        self.live_areas -= 1;
        self.live_bytes -= area.end - addr;
        Ok(area.end - addr)
    }

    /// Flags the area lazy (it stays in the busy map) and purges when the
    /// lazily freed bytes exceed `lazy_max`.
    ///
    /// # Errors
    /// [`FreeError::NotAllocated`] if no live area starts at `addr`.
    ///
    /// # Complexity
    /// O(log N), plus a purge when the threshold is crossed.
    fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
        crate::debug_check!(self);
        let area = self.live(addr)?;
        let size = area.end - addr;
        self.busy.insert(
            addr,
            Area {
                end: area.end,
                lazy: true,
            },
        );
        let due = self.lazy.push((addr, area.end));
        self.live_areas -= 1;
        self.live_bytes -= size;
        if due {
            self.purge_with_hook();
        }
        Ok(size)
    }

    /// # Complexity
    /// O(L log N) for L lazily freed areas.
    fn purge(&mut self, flush: &mut dyn FnMut(u64, u64)) -> bool {
        let Some(mut batch) = self.lazy.take() else {
            return false; // nothing released: not counted as a purge
        };
        self.purges += 1;
        for &(s, _) in &batch.items {
            self.release(s);
        }
        // Keep the list's buffer for the next batch.
        batch.items.clear();
        self.lazy.recycle(batch.items);
        self.flushes += 1;
        flush(batch.span.0, batch.span.1);
        true
    }

    /// Lowering the threshold below the bytes already lazy purges at once,
    /// so `lazy_bytes <= lazy_max` holds between calls.
    fn set_lazy_max(&mut self, bytes: u64) {
        crate::debug_check!(self);
        if self.lazy.set_max(bytes) {
            self.purge_with_hook();
        }
    }

    fn set_flush_hook(&mut self, hook: Option<FlushHook>) {
        self.hook = hook;
    }

    /// # Complexity
    /// O(N): the free blocks are the holes between busy areas.
    fn stats(&self) -> RangeStats {
        let (mut blocks, mut bytes, mut largest) = (0, 0, 0);
        for (s, e) in self.holes() {
            blocks += 1;
            bytes += e - s;
            largest = largest.max(e - s);
        }
        // A BTreeMap entry: key + value, plus about a third for node headers
        // and spare slots.
        let entry = (core::mem::size_of::<u64>() + core::mem::size_of::<Area>()) as u64;
        RangeStats {
            free_blocks: blocks,
            free_bytes: bytes,
            largest_free: largest,
            live_areas: self.live_areas,
            live_bytes: self.live_bytes,
            lazy_areas: self.lazy.len() as u64,
            lazy_bytes: self.lazy.bytes(),
            detached_areas: 0,
            detached_bytes: 0,
            purges: self.purges,
            flushes: self.flushes,
            metadata_bytes: self.busy.len() as u64 * entry * 4 / 3 + self.lazy.heap_bytes() as u64,
        }
    }

    /// # Errors
    /// A [`CheckError`] naming the first violated invariant.
    ///
    /// # Complexity
    /// O(N log N).
    fn check(&self) -> Result<(), CheckError> {
        let mut prev_end = self.start;
        let (mut live, mut live_bytes, mut lazy, mut lazy_bytes) = (0u64, 0u64, 0u64, 0u64);
        for (&s, a) in &self.busy {
            crate::ensure!(
                s < a.end,
                Layout @ s,
                "area {s:#x} is empty or inverted (end {:#x})",
                a.end
            );
            crate::ensure!(
                s >= prev_end,
                Layout @ s,
                "area {s:#x} overlaps the one before (end {prev_end:#x})"
            );
            crate::ensure!(a.end <= self.end, Bounds @ s, "area {s:#x} ends past the space");
            prev_end = a.end;
            if a.lazy {
                lazy += 1;
                lazy_bytes += a.end - s;
            } else {
                live += 1;
                live_bytes += a.end - s;
            }
        }
        crate::ensure!(
            live == self.live_areas,
            Accounting,
            "live areas {live} != counter {}",
            self.live_areas
        );
        crate::ensure!(
            live_bytes == self.live_bytes,
            Accounting,
            "live bytes {live_bytes} != counter"
        );
        crate::ensure!(
            lazy_bytes == self.lazy.bytes(),
            Accounting,
            "lazy bytes {lazy_bytes} != counter"
        );
        crate::ensure!(
            lazy == self.lazy.len() as u64,
            Accounting,
            "lazy list length != lazy areas {lazy}"
        );
        self.lazy.check()?;
        let mut listed: Vec<(u64, u64)> = self.lazy.iter().copied().collect();
        listed.sort_unstable();
        listed.dedup_by_key(|r| r.0);
        crate::ensure!(
            listed.len() == self.lazy.len(),
            Structure,
            "lazy list has duplicates"
        );
        for &(s, e) in &listed {
            crate::ensure!(
                self.busy.get(&s).is_some_and(|a| a.lazy && a.end == e),
                Structure @ s,
                "lazy list names {s:#x}, not a lazy area"
            );
        }
        if let Some(c) = self.cache {
            crate::ensure!(self.busy.contains_key(&c), Hint @ c, "cache {c:#x} is not a busy area");
        }
        crate::ensure!(
            !self.lazy.over(),
            Bounds,
            "lazy bytes {} above lazy_max {}",
            self.lazy.bytes(),
            self.lazy.max()
        );
        crate::ensure!(
            self.cached_align.is_power_of_two(),
            Hint,
            "cached_align not a power of two"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_rejects_empty_space() {
        assert_eq!(LinearVmap::new(5, 5).unwrap_err(), AllocError::Invalid);
        assert_eq!(LinearVmap::new(6, 5).unwrap_err(), AllocError::Invalid);
    }

    /// The kernel's `size < cached_hole_size` would walk on from the cache
    /// here and answer 0x5000; the exact-size hole at 0x1000 is lower.
    #[test]
    fn exact_size_hole_below_cache_is_found() {
        let mut v = LinearVmap::new(0, 0x10000).unwrap();
        let a = v.alloc(0x1000, 1).unwrap(); // [0, 0x1000)
        let b = v.alloc(0x1000, 1).unwrap(); // [0x1000, 0x2000)
        v.alloc(0x1000, 1).unwrap(); // [0x2000, 0x3000)
        v.free(b).unwrap(); // hole [0x1000, 0x2000), cache steps back to a
        assert_eq!(v.cache, Some(a));
        // A larger request walks over the hole and records its size.
        assert_eq!(v.alloc(0x2000, 1), Ok(0x3000));
        assert_eq!(v.cached_hole_size, 0x1000);
        assert_eq!(v.alloc(0x1000, 1), Ok(0x1000));
        v.check().unwrap();
    }

    #[test]
    fn lazy_area_stays_busy_until_purge() {
        let mut v = LinearVmap::new(0, 0x4000).unwrap();
        let a = v.alloc(0x2000, 1).unwrap();
        v.free_lazy(a).unwrap();
        assert_eq!(v.busy.len(), 1);
        assert_eq!(v.alloc(0x2000, 1), Ok(0x2000));
        let mut seen = None;
        assert!(v.purge(&mut |s, e| seen = Some((s, e))));
        assert_eq!(seen, Some((0, 0x2000)));
        assert_eq!(v.alloc(0x1000, 1), Ok(0));
        v.check().unwrap();
    }
}
