//! mmkit with frees that carry the size, as the O(1) peers' handles do:
//! [`VmapAllocator::without_busy_index`] (no live-area index in release
//! builds: `free_sized` trusts the handle's size, so a free is the
//! free-block descent and the merge alone), and [`PooledVmap`] over it
//! (its per-CPU busy map still checks the size; the exact allocator behind
//! it keeps no index).

use mmkit::request::{Policy, Request};
use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
use mmkit::vmap::VmapAllocator;

use super::{PeerRange, PAGE};

/// A [`VmapAllocator`] without a busy index, the nodes of `max_areas` live
/// areas preloaded (as `mmkit_vmap::reserved`).
fn unindexed(space_bytes: u64, max_areas: usize) -> VmapAllocator {
    let mut va = VmapAllocator::without_busy_index(0, space_bytes.max(PAGE))
        .expect("a non-empty space is always valid");
    va.reserve(max_areas.saturating_mul(2).saturating_add(2));
    va
}

/// The exact allocator freed with `free_sized`; the handle is the area.
pub struct MmkitSized(VmapAllocator);

impl PeerRange for MmkitSized {
    type Handle = (u64, u64);

    fn name() -> &'static str {
        "mmkit-sized"
    }

    fn about() -> &'static str {
        "mmkit, no busy index: free_sized(addr, size), lowest fit, O(log n)"
    }

    fn new(space_bytes: u64, max_areas: usize) -> Self {
        MmkitSized(unindexed(space_bytes, max_areas))
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, (u64, u64))> {
        let a = self.0.alloc(size, align).ok()?;
        Some((a, (a, size)))
    }

    fn free(&mut self, (a, size): (u64, u64)) -> bool {
        self.0.free_sized(a, size).is_ok()
    }

    fn exact_lowest_fit() -> bool {
        true
    }

    fn supports_align() -> bool {
        true
    }

    fn place(&mut self, addr: u64, size: u64) -> Option<(u64, u64)> {
        let end = addr.checked_add(size)?;
        let a = self.0.alloc_in(size, 1, addr, end).ok()?;
        Some((a, size))
    }
}

/// The exact allocator placing by [`Policy::BestFit`], freed with
/// `free_sized`; the handle is the area.
pub struct MmkitBestSized(VmapAllocator);

impl PeerRange for MmkitBestSized {
    type Handle = (u64, u64);

    fn name() -> &'static str {
        "mmkit-best-sized"
    }

    fn about() -> &'static str {
        "mmkit-best, no busy index: free_sized(addr, size), exact best fit, O(log n)"
    }

    fn new(space_bytes: u64, max_areas: usize) -> Self {
        MmkitBestSized(unindexed(space_bytes, max_areas))
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, (u64, u64))> {
        let req = Request::bytes(size)?.align(align).policy(Policy::BestFit);
        let a = self.0.allocate(req).ok()?;
        Some((a, (a, size)))
    }

    fn free(&mut self, (a, size): (u64, u64)) -> bool {
        self.0.free_sized(a, size).is_ok()
    }

    fn exact_lowest_fit() -> bool {
        false
    }

    fn supports_align() -> bool {
        true
    }
}

/// [`PooledVmap`] (one CPU) over an allocator without a busy index, freed
/// with `free_sized`; the handle is the area.
pub struct MmkitPooledSized(PooledVmap);

impl PeerRange for MmkitPooledSized {
    type Handle = (u64, u64);

    fn name() -> &'static str {
        "mmkit-pooled-sized"
    }

    fn about() -> &'static str {
        "mmkit-pooled freed with free_sized, no busy index behind the pools"
    }

    fn new(space_bytes: u64, max_areas: usize) -> Self {
        let cfg = PooledConfig {
            cpus: 1,
            granule: PAGE,
            ..PooledConfig::default()
        };
        let va = unindexed(space_bytes, max_areas);
        MmkitPooledSized(PooledVmap::new(va, cfg).expect("one CPU, a page granule: valid"))
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, (u64, u64))> {
        let a = self.0.alloc(0, size, align).ok()?;
        Some((a, (a, size)))
    }

    fn free(&mut self, (a, size): (u64, u64)) -> bool {
        self.0.free_sized(0, a, size).is_ok()
    }

    fn exact_lowest_fit() -> bool {
        false
    }

    fn supports_align() -> bool {
        true
    }
}
