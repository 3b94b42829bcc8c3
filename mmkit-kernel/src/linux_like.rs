//! The like-for-like call path: a design's `vmalloc` with what Linux's
//! `__vmalloc_node` does besides it on every call. Linux allocates a
//! `vm_struct` (`kmalloc`) and a zeroed page array (`kvmalloc`, one
//! pointer per page) for each area and frees both in `vfree`; and the
//! kernel's aligned tests ask for `__GFP_ZERO` pages. Here each call takes
//! an area record and a zeroed page array from the kernel heap, the layer
//! copies the frames it maps into the array (Linux's page allocator fills
//! its array as it hands the pages out), and the record's handle stays
//! with the layer's area (Linux's `vmap_area` points at its `vm_struct`),
//! so `vfree` finds it with the layer's own lookup; the frames are zeroed
//! when the test asks. The lean path (the designs alone) keeps the page
//! array the driver needs and no more.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use mmkit::range::RangeAllocator;
use mmkit_vmalloc::test_vmalloc::TestVmalloc;
use mmkit_vmalloc::{Vmalloc, PAGE};

use crate::mm::{self, Lock};
use crate::phys;

/// What Linux's `vm_struct` holds for these tests: the area's size and its
/// page array.
#[derive(Debug)]
struct AreaRecord {
    size: u64,
    pages: Vec<u64>,
}

/// A layer of [`mm`] with Linux's per-call records and zeroing.
pub struct LinuxLike<R: 'static>(pub &'static Lock<Vmalloc<R>>);

impl<R: RangeAllocator> LinuxLike<R> {
    fn alloc(&self, pages: u64, align: u64, zero: bool) -> Option<u64> {
        let mut record = Box::new(AreaRecord {
            size: pages * PAGE,
            pages: vec![0; pages as usize],
        });
        // The record's address: its handle, which the layer keeps with the
        // area (a box does not move when it is turned into a raw pointer).
        let tag = &*record as *const AreaRecord as u64;
        let va = mm::vmalloc_tagged(self.0, pages, align.max(PAGE), tag, &mut record.pages).ok()?;
        if zero {
            record
                .pages
                .iter()
                .for_each(|&pfn| phys::zero_frames(pfn, 1));
        }
        let raw = Box::into_raw(record);
        debug_assert_eq!(raw as u64, tag);
        Some(va)
    }
}

impl<R: RangeAllocator> TestVmalloc for LinuxLike<R> {
    fn vmalloc(&self, pages: u64, align: u64) -> Option<u64> {
        self.alloc(pages, align, false)
    }

    fn vmalloc_zeroed(&self, pages: u64, align: u64) -> Option<u64> {
        self.alloc(pages, align, true)
    }

    fn vfree(&self, va: u64) {
        // Only areas the tests allocated are freed.
        let Ok(tag) = mm::vfree_tagged(self.0, va) else {
            return;
        };
        if tag != 0 {
            // SAFETY: a nonzero tag is the address of a record `alloc`
            // leaked with `Box::into_raw` for this area, and the layer hands
            // it back once: the free that took the area out of its books.
            let r = unsafe { Box::from_raw(tag as *mut AreaRecord) };
            debug_assert_eq!(r.size, r.pages.len() as u64 * PAGE);
        }
    }

    fn touch(&self, va: u64) -> bool {
        crate::fault::touch(va, 1)
    }
}
