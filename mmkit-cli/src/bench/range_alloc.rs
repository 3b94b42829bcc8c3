//! `range-alloc` (gfx-rs/wgpu): a sorted `Vec` of free ranges, best fit by
//! a linear scan, free by a linear search for the insertion point and a
//! `Vec` insert. O(free ranges) per operation; its answer is the smallest
//! fitting range, not the lowest.

use std::ops::Range;

use range_alloc::RangeAllocator;

use super::{PeerRange, PAGE};

/// `RangeAllocator<u64>` over `[0, space)`; the handle is the range.
pub struct RangeAlloc(RangeAllocator<u64>);

impl PeerRange for RangeAlloc {
    type Handle = Range<u64>;

    fn name() -> &'static str {
        "range-alloc"
    }

    fn about() -> &'static str {
        "best fit, linear scan of a sorted Vec, O(n)"
    }

    fn new(space_bytes: u64, _max_areas: usize) -> Self {
        RangeAlloc(RangeAllocator::new(0..space_bytes.max(PAGE)))
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, Range<u64>)> {
        if !super::sane(size, align) {
            return None; // the crate would assert
        }
        // Both asserts of the crate (`length + length != length`, the same
        // for the alignment) hold for the non-zero sizes the bench sends.
        let r = self.0.allocate_range_aligned(size, align).ok()?;
        Some((r.start, r))
    }

    fn free(&mut self, h: Range<u64>) -> bool {
        self.0.free_range(h);
        true
    }

    fn exact_lowest_fit() -> bool {
        false
    }

    fn supports_align() -> bool {
        true
    }
}
