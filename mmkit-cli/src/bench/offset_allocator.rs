//! `offset-allocator` (a port of Sebastian Aaltonen's OffsetAllocator):
//! TLSF-like bins over a 32-bit space, O(1) alloc and free, no alignment.
//! Sizes are `u32` units, so one unit is one 4 KiB page here: the space is
//! at most 2^32 pages (16 TiB), and every answer is page-aligned, which is
//! all the unaligned workloads ask for.

use offset_allocator::{Allocation, Allocator};

use super::{PeerRange, PAGE};

/// `Allocator<u32>` over `[0, space)` in pages; the handle is the
/// `Allocation` its `free` wants back.
pub struct OffsetAlloc(Allocator<u32>);

/// Bytes to whole pages, or `None` when the count does not fit a `u32`.
fn pages(bytes: u64) -> Option<u32> {
    u32::try_from(bytes.div_ceil(PAGE)).ok()
}

impl PeerRange for OffsetAlloc {
    type Handle = Allocation<u32>;

    fn name() -> &'static str {
        "offset-allocator"
    }

    fn about() -> &'static str {
        "TLSF-like bins, O(1), u32 units (1 unit = 4 KiB), no alignment"
    }

    fn new(space_bytes: u64, max_areas: usize) -> Self {
        let units = pages(space_bytes).unwrap_or(u32::MAX).max(1);
        // Its node pool holds live and free nodes; free nodes never exceed
        // live ones by more than one. The crate wants max < u32::MAX - 1.
        let nodes = max_areas.saturating_mul(2).saturating_add(16);
        let nodes = u32::try_from(nodes)
            .unwrap_or(u32::MAX - 2)
            .min(u32::MAX - 2);
        OffsetAlloc(Allocator::with_max_allocs(units, nodes))
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, Allocation<u32>)> {
        if !super::sane(size, align) {
            return None; // its unit conversion would overflow
        }
        if align > PAGE {
            return None; // it cannot honour an alignment above one unit
        }
        let a = self.0.allocate(pages(size)?)?;
        Some((u64::from(a.offset) * PAGE, a))
    }

    fn free(&mut self, h: Allocation<u32>) -> bool {
        self.0.free(h);
        true
    }

    fn exact_lowest_fit() -> bool {
        false
    }

    fn supports_align() -> bool {
        false
    }
}
