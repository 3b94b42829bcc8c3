//! The virtual layer's counters: the machine's system calls beside the
//! driver's own.

use std::sync::atomic::Ordering;

use super::Space;
use crate::sync::AtomicU64;

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
    /// Ranges of live `vm_map_ram` blocks that the latest flush over them
    /// could not unmap (those of retired blocks and areas are on the
    /// driver's stuck list).
    fn stuck_in_blocks(&self, layer: &mmkit_vmalloc::Vmalloc<mmkit::vmap::VmapAllocator>) -> u64 {
        let table = crate::sync::lock(&self.table);
        let areas: Vec<_> = layer.areas().collect();
        let live = |&&(s, _): &&(u64, u64)| {
            matches!(
                layer.lookup_in(&areas, s),
                mmkit_vmalloc::Where::Block { .. }
            )
        };
        table.refused.iter().filter(live).count() as u64
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
            stuck_ranges: st.layer.stuck() as u64 + self.stuck_in_blocks(&st.layer),
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
