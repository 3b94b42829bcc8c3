//! The lazy list, the stuck list and the purge that empties them, with
//! the virtual layer's counters.

use std::sync::atomic::Ordering;

use super::Space;
use crate::phys::Block;
use crate::sync::{lock, AtomicU64};

/// A range freed but still mapped: lazily freed, or stuck (its unmapping
/// failed).
#[derive(Debug)]
pub(crate) struct Lazy {
    pub(crate) start: u64,
    pub(crate) span: u64,
    pub(crate) what: What,
    /// Set by a teardown whose unmapping of this range failed.
    failed: bool,
}

/// What a lazily freed range holds until it is unmapped.
#[derive(Debug)]
pub(crate) enum What {
    /// An area's range (or the part of one a failed map reached): the
    /// ranges of the vmap allocator to free, and the frames mapped in it,
    /// `maps` times each.
    Area {
        vmap: Vec<u64>,
        frames: Vec<Block>,
        maps: u64,
        runs: u64,
        free_frames: bool,
    },
    /// A per-CPU block released by the front end; its frames are in the
    /// block's record.
    Block,
}

impl Lazy {
    pub(crate) fn new(start: u64, span: u64, what: What) -> Self {
        Lazy {
            start,
            span,
            what,
            failed: false,
        }
    }
}

/// Counters of the virtual layer (system calls included).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) map_calls: AtomicU64,
    pub(crate) unmap_calls: AtomicU64,
    pub(crate) unmap_failures: AtomicU64,
    pub(crate) purges: AtomicU64,
    pub(crate) purged_areas: AtomicU64,
    pub(crate) realloc_in_place: AtomicU64,
    pub(crate) realloc_moved: AtomicU64,
    pub(crate) remapped_pages: AtomicU64,
    pub(crate) realloc_copied_bytes: AtomicU64,
}

/// Counters of the virtual layer, as [`Vm::stats`](crate::Vm::stats) reports
/// them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpaceStats {
    /// `mmap` calls that mapped frames (one per run of consecutive frames).
    pub map_calls: u64,
    /// Unmapping system calls (one per run of adjacent areas in a purge,
    /// one per area when unmapping eagerly), refused ones included.
    pub unmap_calls: u64,
    /// Unmapping calls the kernel refused (`ENOMEM` at the process's
    /// mapping limit). Their ranges stay mapped and reserved, their frames
    /// in use, until a retry succeeds.
    pub unmap_failures: u64,
    /// Ranges whose unmapping failed and that wait for a retry now: areas
    /// and blocks (retried by every purge) and stale `vm_map_ram` runs
    /// (retried by [`Vm::vm_unmap_aliases`](crate::Vm::vm_unmap_aliases)).
    pub stuck_ranges: u64,
    /// Mappings (VMAs) charged to the budget now: two per run mapped.
    pub maps_charged: u64,
    /// The mapping budget in VMAs (see
    /// [`VmConfig::max_maps`](crate::VmConfig::max_maps)).
    pub map_budget: u64,
    /// Purges that unmapped something (each is one batched TLB flush).
    pub purges: u64,
    /// Areas and blocks unmapped by those purges.
    pub purged_areas: u64,
    /// Live areas (vmalloc, vmap, mirror).
    pub live_areas: u64,
    /// Areas and blocks freed and waiting for a purge.
    pub lazy_areas: u64,
    /// Bytes of those.
    pub lazy_bytes: u64,
    /// `vrealloc` calls that grew the area in place.
    pub realloc_in_place: u64,
    /// `vrealloc` calls that moved the mappings to a new area.
    pub realloc_moved: u64,
    /// Pages whose mapping moved without a byte being copied.
    pub remapped_pages: u64,
    /// Bytes the moves of `vrealloc` copied: pages of the old area that the
    /// new one does not show from the same frame (counted on every move).
    pub realloc_copied_bytes: u64,
}

impl Space {
    /// Unmaps every lazily freed range and retries every stuck one, gives
    /// their frames back and makes their addresses reusable. Returns the
    /// range covering what was unmapped, or `None` when nothing was.
    pub(crate) fn purge(&self) -> Option<(u64, u64)> {
        let _one_at_a_time = lock(&self.purge_lock);
        let list = {
            let mut st = lock(&self.state);
            let lazy = std::mem::take(&mut st.lazy);
            let mut list = std::mem::take(&mut st.stuck);
            if list.is_empty() {
                list = lazy;
                st.lazy_bytes = 0;
            } else if list.try_reserve(lazy.len()).is_ok() {
                list.extend(lazy);
                st.lazy_bytes = 0;
            } else {
                // No room to join the lists: the stuck ones only, this time.
                st.lazy = lazy;
            }
            list
        };
        if list.is_empty() {
            return None;
        }
        self.counters.purges.fetch_add(1, Ordering::Relaxed);
        let covered = self.teardown(list);
        self.purges_done.fetch_add(1, Ordering::Release);
        covered
    }

    /// Unmaps `list` (one call per run of adjacent ranges), releases
    /// frames, frees the ranges; what the kernel refused to unmap goes to
    /// the stuck list whole. Needs no scratch memory (the list is sorted in
    /// place, and what failed is kept in it). Returns the range covering
    /// what was unmapped.
    pub(crate) fn teardown(&self, mut list: Vec<Lazy>) -> Option<(u64, u64)> {
        list.sort_unstable_by_key(|l| l.start);
        let mut i = 0;
        while i < list.len() {
            let (start, mut end) = (list[i].start, list[i].start + list[i].span);
            let mut j = i + 1;
            while j < list.len() && list[j].start == end {
                end += list[j].span;
                j += 1;
            }
            if !self.unmap_range(start, end - start) {
                list[i..j].iter_mut().for_each(|l| l.failed = true);
            }
            i = j;
        }
        let (mut lo, mut hi, mut runs, mut done) = (u64::MAX, 0, 0, 0);
        for l in list.iter().filter(|l| !l.failed) {
            (lo, hi, done) = (lo.min(l.start), hi.max(l.start + l.span), done + 1);
            match &l.what {
                What::Area {
                    frames,
                    maps,
                    runs: r,
                    free_frames,
                    ..
                } => {
                    for _ in 0..*maps {
                        self.phys.unmapped_blocks(frames);
                    }
                    if *free_frames {
                        self.phys.release(frames);
                    }
                    runs += r;
                }
                What::Block => runs += self.records.drop_block(l.start, &self.phys),
            }
        }
        self.budget.credit(runs);
        self.counters
            .purged_areas
            .fetch_add(done, Ordering::Relaxed);
        self.phys.retry_deferred();
        let mut st = lock(&self.state);
        for l in list.iter().filter(|l| !l.failed) {
            let one = [l.start];
            let starts = match &l.what {
                What::Area { vmap, .. } => &vmap[..],
                What::Block => &one[..],
            };
            for &a in starts {
                let freed = st.vmap.free(a);
                debug_assert!(freed.is_ok(), "freeing our own range {a:#x}");
            }
        }
        list.retain(|l| l.failed);
        if !list.is_empty() {
            list.iter_mut().for_each(|l| l.failed = false);
            if st.stuck.is_empty() {
                st.stuck = list;
            } else {
                st.stuck.extend(list);
            }
        }
        (done > 0).then_some((lo, hi))
    }

    pub(crate) fn stats(&self) -> SpaceStats {
        let st = lock(&self.state);
        let c = &self.counters;
        SpaceStats {
            map_calls: c.map_calls.load(Ordering::Relaxed),
            unmap_calls: c.unmap_calls.load(Ordering::Relaxed),
            unmap_failures: c.unmap_failures.load(Ordering::Relaxed),
            stuck_ranges: st.stuck.len() as u64 + self.records.stuck(),
            maps_charged: self.budget.used(),
            map_budget: self.budget.limit(),
            purges: c.purges.load(Ordering::Relaxed),
            purged_areas: c.purged_areas.load(Ordering::Relaxed),
            live_areas: st.areas.len() as u64,
            lazy_areas: st.lazy.len() as u64,
            lazy_bytes: st.lazy_bytes,
            realloc_in_place: c.realloc_in_place.load(Ordering::Relaxed),
            realloc_moved: c.realloc_moved.load(Ordering::Relaxed),
            remapped_pages: c.remapped_pages.load(Ordering::Relaxed),
            realloc_copied_bytes: c.realloc_copied_bytes.load(Ordering::Relaxed),
        }
    }
}
