//! mmkit's own range allocator, [`VmapAllocator`]: the lowest fit over an
//! augmented B+tree of free blocks. It is also the oracle the bench asks
//! for the exact lowest fit of every peer's request.

use mmkit::request::{Policy, Request};
use mmkit::vmap::VmapAllocator;

use super::{PeerRange, PAGE};

/// A [`VmapAllocator`] over `[0, space_bytes)` (at least a page) with the
/// nodes of `max_areas` live areas preloaded: free blocks never outnumber
/// live areas by more than one, so a run allocates no node while timed.
pub(super) fn reserved(space_bytes: u64, max_areas: usize) -> VmapAllocator {
    let mut va =
        VmapAllocator::new(0, space_bytes.max(PAGE)).expect("a non-empty space is always valid");
    va.reserve(max_areas.saturating_mul(2).saturating_add(2));
    va
}

/// [`VmapAllocator`] over `[0, space)`; the handle is the start address.
pub struct Mmkit(VmapAllocator);

impl PeerRange for Mmkit {
    type Handle = u64;

    fn name() -> &'static str {
        "mmkit"
    }

    fn about() -> &'static str {
        "lowest fit, augmented B+tree, O(log n)"
    }

    fn new(space_bytes: u64, max_areas: usize) -> Self {
        Mmkit(reserved(space_bytes, max_areas))
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, u64)> {
        let a = self.0.alloc(size, align).ok()?;
        Some((a, a))
    }

    fn free(&mut self, addr: u64) -> bool {
        self.0.free(addr).is_ok()
    }

    fn exact_lowest_fit() -> bool {
        true
    }

    fn supports_align() -> bool {
        true
    }

    /// The lowest fit inside exactly `[addr, addr + size)` is `addr` when
    /// that range is free: one O(log n) search, no near misses to visit.
    fn place(&mut self, addr: u64, size: u64) -> Option<u64> {
        let end = addr.checked_add(size)?;
        self.0.alloc_in(size, 1, addr, end).ok()
    }
}

/// [`VmapAllocator`] placing every request by [`Policy::BestFit`]: the
/// shortest free block that holds it; the handle is the start address.
pub struct MmkitBest(VmapAllocator);

impl PeerRange for MmkitBest {
    type Handle = u64;

    fn name() -> &'static str {
        "mmkit-best"
    }

    fn about() -> &'static str {
        "exact best fit, a size index beside the B+tree, O(log n)"
    }

    fn new(space_bytes: u64, max_areas: usize) -> Self {
        MmkitBest(reserved(space_bytes, max_areas))
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, u64)> {
        let req = Request::bytes(size)?.align(align).policy(Policy::BestFit);
        let a = self.0.allocate(req).ok()?;
        Some((a, a))
    }

    fn free(&mut self, addr: u64) -> bool {
        self.0.free(addr).is_ok()
    }

    fn exact_lowest_fit() -> bool {
        false
    }

    fn supports_align() -> bool {
        true
    }
}
