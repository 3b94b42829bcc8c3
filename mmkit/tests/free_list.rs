#![allow(dead_code)]
//! A boot-time free list over mmkit: the shape of the frame lists Rust
//! kernels keep (ranges pushed from the firmware memory map, allocations
//! by size and alignment or at an exact address, frees by address and
//! size with no record of what was allocated), as a thin adapter over
//! `VmapAllocator`. Each scenario runs on the heap allocator (busy index
//! kept) and on one in fixed storage (no index, no heap), and every step
//! is checked against the memory-map model and `check()`.

include!("models/range.rs");
include!("models/memmap.rs");

use mmkit::request::{Policy, Request};
use mmkit::storage::Fixed;

/// The free-list interface: push, allocate, allocate_at, deallocate.
struct FreeList<S: Storage>
where
    VmapAllocator<S>: PerStorage,
{
    va: VmapAllocator<S>,
    model: MapModel,
}

impl<S: Storage> FreeList<S>
where
    VmapAllocator<S>: PerStorage,
{
    fn new(va: VmapAllocator<S>) -> Self {
        FreeList {
            va,
            model: MapModel::new(),
        }
    }

    fn agree(&self) {
        let indexed = !self.va.frees_need_size();
        if let Err(e) = same(&self.va, &self.model, indexed) {
            panic!("allocator and model disagree: {e}");
        }
    }

    /// The allocator's answer `got` to `what`, once it is the model's
    /// (`want`) and both agree on everything else.
    fn judged<T: PartialEq + core::fmt::Debug>(&self, got: T, want: T, what: &str) -> T {
        assert_eq!(got, want, "{what}");
        self.agree();
        got
    }

    /// Adds the free range `[start, end)`.
    fn push(&mut self, start: u64, end: u64) -> Result<(), AddFreeError> {
        let got = self.va.add_free(start, end);
        let want = self.model.add_free(start, end);
        self.judged(got, want, &format!("push {start:#x}..{end:#x}"))
    }

    /// The lowest `size` bytes aligned to `align`.
    fn allocate(&mut self, size: u64, align: u64) -> Option<u64> {
        let got = self.va.alloc(size, align).ok();
        let want = self.model.alloc_in(size, align, 0, u64::MAX).ok();
        self.judged(got, want, &format!("allocate {size:#x}"))
    }

    /// `[at, at + size)`, if it is wholly free.
    fn allocate_at(&mut self, at: u64, size: u64) -> Option<u64> {
        let req = Request::bytes(size)?.policy(Policy::Exact(at));
        let got = self.va.allocate(req).ok();
        let want = at
            .checked_add(size)
            .and_then(|end| self.model.alloc_in(size, 1, at, end).ok());
        self.judged(got, want, &format!("allocate_at {at:#x}"))
    }

    /// Frees `[at, at + size)`: any allocated range, whole or in part.
    fn deallocate(&mut self, at: u64, size: u64) -> Result<u64, FreeError> {
        let got = self.va.free_range(at, size);
        let want = self.model.free_range(at, size);
        self.judged(got, want, &format!("deallocate {at:#x}+{size:#x}"))
    }

    fn free(&self) -> Vec<(u64, u64)> {
        self.va.free_blocks().map(|r| (r.start, r.end)).collect()
    }
}

/// Runs the body on the heap allocator and on one in fixed storage, with
/// `$fl` the free list.
macro_rules! both {
    (|$fl:ident| $body:block) => {{
        let $fl = &mut FreeList::new(VmapAllocator::new_empty());
        $body
        let $fl = &mut FreeList::new(VmapAllocator::<Fixed<16>>::new_fixed());
        $body
    }};
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[test]
fn ram_map_with_the_32_bit_gap() {
    both!(|fl| {
        // Conventional memory, RAM up to the PCI hole at 3 GiB, RAM above 4 GiB.
        fl.push(4 * KIB, 636 * KIB).unwrap();
        fl.push(MIB, 3 * GIB).unwrap();
        fl.push(4 * GIB, 10 * GIB).unwrap();
        assert_eq!(fl.allocate(4 * KIB, 4 * KIB), Some(4 * KIB));
        // Larger than the low range: the first fit is at 1 MiB.
        assert_eq!(fl.allocate(MIB, 4 * KIB), Some(MIB));
        // 1 GiB aligned to 1 GiB: [1 GiB, 2 GiB) below the gap.
        assert_eq!(fl.allocate(GIB, GIB), Some(GIB));
        // 2 GiB at once only fits above the gap.
        assert_eq!(fl.allocate(2 * GIB, 2 * MIB), Some(4 * GIB));
        // Nothing spans the gap: [2 GiB, 3 GiB) and [6 GiB, 10 GiB) are apart.
        assert_eq!(fl.allocate(5 * GIB, 4 * KIB), None);
        assert_eq!(fl.allocate_at(3 * GIB - 4 * KIB, 8 * KIB), None);
        assert_eq!(
            fl.allocate_at(3 * GIB - 4 * KIB, 4 * KIB),
            Some(3 * GIB - 4 * KIB)
        );
        // The gap itself is not the allocator's to free.
        assert_eq!(fl.deallocate(3 * GIB, 4 * KIB), Err(FreeError::Invalid));
    });
}

#[test]
fn partial_frees_trim_and_split_an_allocation() {
    both!(|fl| {
        fl.push(0x10_0000, 0x20_0000).unwrap();
        let a = fl.allocate(0x8000, 0x1000).unwrap();
        let b = fl.allocate(0x1000, 0x1000).unwrap();
        // The middle, then the tail, then the head of `a`.
        assert_eq!(fl.deallocate(a + 0x2000, 0x2000), Ok(0x2000));
        assert_eq!(fl.deallocate(a + 0x6000, 0x2000), Ok(0x2000));
        assert_eq!(fl.deallocate(a, 0x1000), Ok(0x1000));
        // What is left of `a`: [a+0x1000, a+0x2000) and [a+0x4000, a+0x6000).
        assert_eq!(
            fl.deallocate(a + 0x1800, 0x1000),
            Err(FreeError::NotAllocated)
        );
        assert_eq!(fl.allocate(0x2000, 0x1000), Some(a + 0x2000));
        assert_eq!(fl.allocate(0x1000, 0x1000), Some(a));
        assert_eq!(fl.allocate(0x2000, 0x1000), Some(a + 0x6000));
        let _ = b;
    });
}

#[test]
fn a_free_may_span_two_allocations() {
    both!(|fl| {
        fl.push(0, 0x10000).unwrap();
        let a = fl.allocate(0x3000, 1).unwrap();
        let b = fl.allocate(0x3000, 1).unwrap();
        assert_eq!(b, a + 0x3000);
        // The tail of `a` and the head of `b` in one call.
        assert_eq!(fl.deallocate(a + 0x2000, 0x2000), Ok(0x2000));
        assert_eq!(fl.free(), [(a + 0x2000, a + 0x4000), (b + 0x3000, 0x10000)]);
        // Again, overlapping what is now free: refused, nothing changes.
        assert_eq!(
            fl.deallocate(a + 0x1000, 0x2000),
            Err(FreeError::NotAllocated)
        );
        // The rest of both, joining everything into one block.
        assert_eq!(fl.deallocate(a, 0x2000), Ok(0x2000));
        assert_eq!(fl.deallocate(b + 0x1000, 0x2000), Ok(0x2000));
        assert_eq!(fl.free(), [(0, 0x10000)]);
    });
}

#[test]
fn allocate_at_across_separate_ranges() {
    both!(|fl| {
        fl.push(0x1000, 0x5000).unwrap();
        fl.push(0x9000, 0xd000).unwrap();
        assert_eq!(fl.allocate_at(0x2000, 0x1000), Some(0x2000));
        assert_eq!(fl.allocate_at(0x9000, 0x4000), Some(0x9000));
        // Across the gap between the ranges, inside the gap, past the end.
        assert_eq!(fl.allocate_at(0x4000, 0x6000), None);
        assert_eq!(fl.allocate_at(0x6000, 0x1000), None);
        assert_eq!(fl.allocate_at(0xd000, 0x1000), None);
        assert_eq!(fl.allocate_at(u64::MAX, 1), None);
        // Taken already.
        assert_eq!(fl.allocate_at(0x2800, 0x100), None);
        assert_eq!(fl.allocate_at(0x1000, 0x1000), Some(0x1000));
        assert_eq!(fl.free(), [(0x3000, 0x5000)]);
        // A range pushed into the gap joins both sides.
        fl.push(0x5000, 0x9000).unwrap();
        assert_eq!(fl.free(), [(0x3000, 0x9000)]);
        assert_eq!(fl.allocate_at(0x4000, 0x5000), Some(0x4000));
    });
}

#[test]
fn seventeen_ranges_in_scrambled_order() {
    both!(|fl| {
        // Range i is [i MiB, i MiB + (i + 1) * 16 KiB), pushed out of order.
        let range = |i: u64| (i * MIB, i * MIB + (i + 1) * 16 * KIB);
        for i in (0..17).map(|k| (k * 7) % 17) {
            let (s, e) = range(i);
            fl.push(s, e).unwrap();
        }
        // 100 KiB fits first in range 6 (112 KiB).
        assert_eq!(fl.allocate(100 * KIB, 4 * KIB), Some(6 * MIB));
        // 272 KiB only in range 16.
        assert_eq!(fl.allocate(272 * KIB, 4 * KIB), Some(16 * MIB));
        assert_eq!(fl.allocate(273 * KIB, 1), None);
        // Each of the first five ranges whole, lowest first.
        for i in 0..5 {
            assert_eq!(fl.allocate((i + 1) * 16 * KIB, 16 * KIB), Some(range(i).0));
        }
        // A push that overlaps a range is refused, naming the overlap.
        let (s, e) = range(3);
        assert_eq!(
            fl.push(s - 4 * KIB, s + 4 * KIB),
            Err(AddFreeError::Overlaps {
                start: s,
                end: s + 4 * KIB
            })
        );
        assert_eq!(fl.push(e, e + 4 * KIB), Ok(()));
        // Everything back: the free blocks are the ranges again.
        for i in 0..5 {
            let (s, e) = range(i);
            assert_eq!(fl.deallocate(s, e - s), Ok(e - s));
        }
        assert_eq!(fl.deallocate(16 * MIB, 272 * KIB), Ok(272 * KIB));
        assert_eq!(fl.deallocate(6 * MIB, 100 * KIB), Ok(100 * KIB));
        let mut want: Vec<(u64, u64)> = (0..17).map(range).collect();
        want[3].1 += 4 * KIB;
        assert_eq!(fl.free(), want);
    });
}

#[test]
fn alignment_and_bounds_at_the_top_of_u64() {
    both!(|fl| {
        let top = u64::MAX;
        fl.push(top - 0x10000, top).unwrap();
        fl.push(0, 0x1000).unwrap();
        assert_eq!(fl.allocate(0x1000, 0x8000), Some(0));
        assert_eq!(
            fl.allocate(0x1000, 0x8000),
            Some((top - 0x10000 + 0x7fff) & !0x7fff)
        );
        assert_eq!(fl.allocate_at(top - 0x100, 0x100), Some(top - 0x100));
        assert_eq!(fl.allocate_at(top - 0x80, 0x100), None);
        assert_eq!(fl.deallocate(top - 0x100, 0x100), Ok(0x100));
        assert_eq!(fl.deallocate(top - 0x100, 0x200), Err(FreeError::Invalid));
        assert_eq!(fl.deallocate(0x800, 0), Err(FreeError::Invalid));
        assert_eq!(
            fl.push(top - 1, top),
            Err(AddFreeError::Overlaps {
                start: top - 1,
                end: top
            })
        );
        assert_eq!(fl.push(5, 5), Err(AddFreeError::Empty { start: 5, end: 5 }));
    });
}
