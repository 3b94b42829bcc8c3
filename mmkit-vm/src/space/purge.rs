//! The purge (the shared layer's, through the memfd machine) and what
//! follows it here: the frames, budget and block records of every range it
//! released. With the virtual layer's counters.

use std::sync::atomic::Ordering;

use mmkit_vmalloc::{Gone, Released};

use super::{Area, Space};
use crate::sync::{lock, AtomicU64};

/// Counters of the virtual layer (system calls included).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) map_calls: AtomicU64,
    pub(crate) unmap_calls: AtomicU64,
    pub(crate) unmap_failures: AtomicU64,
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
    /// Purges that had something to unmap (each is one batched TLB flush).
    pub purges: u64,
    /// Areas and blocks unmapped and freed: by purges, or one at a time
    /// when unmapping eagerly.
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
        let mut st = self.state();
        let (layer, mut mmu) = st.split(self);
        let purged = layer.purge_released(&mut mmu);
        purged.flushed?;
        // Under the lock: a block's records go before its range is reused.
        let covered = self.dispose(purged.released);
        drop(st);
        self.purges_done.fetch_add(1, Ordering::Release);
        covered
    }

    /// Gives back what the ranges in `released` held now that they are
    /// unmapped and free: one map count fewer for each frame they showed,
    /// the frames of the areas that own theirs, the runs to the budget, the
    /// block records. Runs under the state lock, so that nothing is handed
    /// out in those ranges before their records are gone. Returns the range
    /// covering them.
    pub(crate) fn dispose(&self, released: Vec<Released<Area>>) -> Option<(u64, u64)> {
        if released.is_empty() {
            return None;
        }
        let (mut lo, mut hi, mut runs) = (u64::MAX, 0, 0);
        for r in &released {
            (lo, hi) = (lo.min(r.start), hi.max(r.start + r.span));
            match &r.what {
                Gone::Area(a) => {
                    for _ in 0..a.maps_per_frame() {
                        self.phys.unmapped_blocks(&a.frames);
                    }
                    if a.owns_frames {
                        self.phys.release(&a.frames);
                    }
                    runs += a.runs;
                }
                Gone::Block => runs += self.records.drop_block(r.start, &self.phys),
            }
        }
        self.budget.credit(runs);
        self.phys.retry_deferred();
        Some((lo, hi))
    }

    pub(crate) fn stats(&self) -> SpaceStats {
        let st = self.state();
        let c = &self.counters;
        let layer = st.layer.stats();
        let (lazy_areas, lazy_bytes) = st.layer.lazy();
        SpaceStats {
            map_calls: c.map_calls.load(Ordering::Relaxed),
            unmap_calls: c.unmap_calls.load(Ordering::Relaxed),
            unmap_failures: c.unmap_failures.load(Ordering::Relaxed),
            stuck_ranges: st.layer.stuck() as u64 + self.records.stuck(),
            maps_charged: self.budget.used(),
            map_budget: self.budget.limit(),
            purges: layer.purges,
            purged_areas: layer.released,
            live_areas: st.layer.live_areas() as u64,
            lazy_areas: lazy_areas as u64,
            lazy_bytes,
            realloc_in_place: c.realloc_in_place.load(Ordering::Relaxed),
            realloc_moved: c.realloc_moved.load(Ordering::Relaxed),
            remapped_pages: c.remapped_pages.load(Ordering::Relaxed),
            realloc_copied_bytes: c.realloc_copied_bytes.load(Ordering::Relaxed),
        }
    }
}
