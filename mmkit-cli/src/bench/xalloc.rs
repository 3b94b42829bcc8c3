//! `xalloc`: its TLSF (`SysTlsf<u64>`), O(1) alloc and free with
//! alignment. TLSF takes the first block of a size class large enough, a
//! good fit, neither the lowest nor the best.

use xalloc::{SysTlsf, SysTlsfRegion};

use super::{PeerRange, PAGE};

/// `SysTlsf<u64>` over `[0, space)` in bytes; the handle is its region.
pub struct XallocTlsf(SysTlsf<u64>);

impl PeerRange for XallocTlsf {
    type Handle = SysTlsfRegion;

    fn name() -> &'static str {
        "xalloc-tlsf"
    }

    fn about() -> &'static str {
        "TLSF, O(1), with alignment"
    }

    fn new(space_bytes: u64, max_areas: usize) -> Self {
        let blocks = max_areas.saturating_mul(2).saturating_add(16);
        XallocTlsf(SysTlsf::with_capacity(space_bytes.max(PAGE), blocks))
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, SysTlsfRegion)> {
        if !super::sane(size, align) {
            return None; // the crate would assert
        }
        let (r, off) = self.0.alloc_aligned(size, align)?;
        Some((off, r))
    }

    fn free(&mut self, h: SysTlsfRegion) -> bool {
        self.0.dealloc(h).is_ok()
    }

    fn exact_lowest_fit() -> bool {
        false
    }

    fn supports_align() -> bool {
        true
    }
}
