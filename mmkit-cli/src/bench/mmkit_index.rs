//! mmkit's free-block index alone, [`BTree`], driven as the O(1) peers are:
//! the handle carries the area's size, so a free needs no live-area index
//! (`VmapAllocator`'s busy index) and trusts its caller, as offset-allocator
//! and TLSF trust theirs. No isolated blocks, pending area or fingers of
//! `VmapAllocator` either: a lowest-fit search and its update per
//! allocation, a neighbour lookup and a merge per free.
//!
//! The row measures the floor of the exact design, what the augmented
//! B+tree costs with every layer above it removed, so that the layers'
//! share and the index's own are read apart. It is exact (every answer the
//! lowest fit, judged as mmkit's is) but is not an allocator a user should
//! pick: a free of a wrong size or of an address never allocated corrupts
//! it, where `VmapAllocator` returns a typed error.

use mmkit::tree::btree::{BTree, Neighbours, Pos};

use super::{sane, PeerRange};

/// The bare index over `[0, space)`; the handle is `(address, size)`.
pub struct MmkitIndex {
    free: BTree,
    /// Reused by every free, so its fields are not built per call.
    nb: Neighbours,
}

impl PeerRange for MmkitIndex {
    type Handle = (u64, u64);

    fn name() -> &'static str {
        "mmkit-index"
    }

    fn about() -> &'static str {
        "mmkit's B+tree of free blocks alone, the size in the handle: the exact design's floor"
    }

    fn new(space_bytes: u64, max_areas: usize) -> Self {
        let mut free = BTree::new();
        // Free blocks never outnumber live areas by more than one.
        free.reserve(max_areas.saturating_mul(2).saturating_add(2));
        free.insert(0, space_bytes.max(super::PAGE));
        MmkitIndex {
            free,
            nb: Neighbours::new(),
        }
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, (u64, u64))> {
        if !sane(size, align) {
            return None;
        }
        let a = self.take(size, align, 0, u64::MAX)?;
        Some((a, (a, size)))
    }

    fn free(&mut self, (addr, size): (u64, u64)) -> bool {
        let t = &mut self.free;
        let end = addr + size;
        t.neighbours_into(addr, &mut self.nb);
        let nb = &self.nb;
        let joins_prev = nb.prev.is_some_and(|(_, e)| e == addr);
        let joins_next = nb.next.is_some_and(|(s, _)| s == end);
        match (joins_prev, joins_next) {
            (true, true) => t.merge(nb),
            (true, false) => t.grow_prev(nb, end),
            (false, true) => t.grow_next(nb, addr),
            (false, false) => t.insert_at(nb, addr, end),
        }
        true
    }

    fn exact_lowest_fit() -> bool {
        true
    }

    fn supports_align() -> bool {
        true
    }

    /// As for mmkit: the lowest fit inside exactly `[addr, addr + size)`.
    fn place(&mut self, addr: u64, size: u64) -> Option<(u64, u64)> {
        let end = addr.checked_add(size)?;
        self.take(size, 1, addr, end).map(|a| (a, size))
    }
}

impl MmkitIndex {
    /// Takes the lowest fit in `[lo, hi)` out of its free block: the
    /// block shrinks from either end, goes, or is cut in two.
    fn take(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        let t = &mut self.free;
        // Alignment summaries, as `VmapAllocator` keeps them: from the
        // first request that could use them on.
        t.enable_summaries(align);
        let mut pos = Pos::new();
        let a = t.lowest_fit(size, align, lo, hi, &mut pos)?;
        let (s, e) = t.get(&pos);
        let end = a + size;
        match (a == s, end == e) {
            (true, true) => t.remove_at(&pos),
            (true, false) => t.set_range_at(&pos, end, e),
            (false, true) => t.set_range_at(&pos, s, a),
            (false, false) => t.split_at(&pos, (s, a), end, e),
        }
        Some(a)
    }
}
