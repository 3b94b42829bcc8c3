//! `vm-allocator` (rust-vmm): `AddressAllocator` with
//! `AllocPolicy::FirstMatch`. Its interval tree (an AVL tree of free and
//! allocated nodes) keeps no per-subtree maximum, so a first-match search
//! walks the nodes in address order until one fits: exact lowest fit, but
//! O(n) in the number of nodes below the answer.

use vm_allocator::{AddressAllocator, AllocPolicy, RangeInclusive};

use super::{PeerRange, PAGE};

/// `AddressAllocator` over `[0, space)`; the handle is the inclusive range
/// its `free` wants back.
pub struct VmAllocator(AddressAllocator);

impl PeerRange for VmAllocator {
    type Handle = RangeInclusive;

    fn name() -> &'static str {
        "vm-allocator"
    }

    fn about() -> &'static str {
        "first match, in-order walk of an AVL tree, O(n)"
    }

    fn new(space_bytes: u64, _max_areas: usize) -> Self {
        let a = AddressAllocator::new(0, space_bytes.max(PAGE))
            .expect("[0, space) with space > 0 is a valid range");
        VmAllocator(a)
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, RangeInclusive)> {
        if !super::sane(size, align) {
            return None; // it would return an error
        }
        let r = self.0.allocate(size, align, AllocPolicy::FirstMatch).ok()?;
        Some((r.start(), r))
    }

    fn free(&mut self, h: RangeInclusive) -> bool {
        self.0.free(&h).is_ok()
    }

    fn exact_lowest_fit() -> bool {
        true
    }

    fn supports_align() -> bool {
        true
    }

    /// `ExactMatch` finds the free node holding `addr` in O(log n), so the
    /// set-up of 10^5 areas need not pay 10^5 linear first-match walks.
    fn place(&mut self, addr: u64, size: u64) -> Option<RangeInclusive> {
        self.0.allocate(size, 1, AllocPolicy::ExactMatch(addr)).ok()
    }
}
