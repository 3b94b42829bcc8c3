//! The like-for-like call path: a design's `vmalloc` with what Linux's
//! `__vmalloc_node` does besides it on every call. Linux allocates a
//! `vm_struct` (`kmalloc`) and a zeroed page array (`kvmalloc`, one
//! pointer per page) for each area and frees both in `vfree`; and the
//! kernel's aligned tests ask for `__GFP_ZERO` pages. Here each call takes
//! an area record and a zeroed page array from the kernel heap, filed by
//! address in the CPU's own hash table (found again by `vfree` in one
//! probe, as Linux finds its `vm_struct` through the area the free looked
//! up anyway), and zeroes the frames when the test
//! asks. The lean path (the designs alone) keeps the page array the
//! driver needs and no more.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use mmkit_vmalloc::book::AreaBook;
use mmkit_vmalloc::test_vmalloc::TestVmalloc;
use mmkit_vmalloc::PAGE;

use crate::mm::Lock;
use crate::percpu::MAX_CPUS;
use crate::profile::TimedSpin;
use crate::{arch, paging, phys};

/// What Linux's `vm_struct` holds for these tests: the area's size, its
/// page array, and the CPU that made it.
#[derive(Debug)]
struct AreaRecord {
    size: u64,
    pages: Vec<u64>,
    cpu: usize,
}

/// The records of the areas each CPU allocated, by address.
type Records = Lock<AreaBook<Box<AreaRecord>>>;

/// Built at compile time: a call finds its CPU's table without a check.
static RECORDS: [Records; MAX_CPUS] =
    [const { Lock::const_new(<TimedSpin as lock_api::RawMutex>::INIT, AreaBook::new()) }; MAX_CPUS];

fn records() -> &'static [Records] {
    &RECORDS
}

/// `D` with Linux's per-call records and zeroing.
pub struct LinuxLike<D>(pub D);

impl<D: TestVmalloc> LinuxLike<D> {
    fn alloc(&self, pages: u64, align: u64, zero: bool) -> Option<u64> {
        let va = self.0.vmalloc(pages, align)?;
        let mut record = Box::new(AreaRecord {
            size: pages * PAGE,
            pages: vec![0; pages as usize],
            cpu: arch::cpu_id() % MAX_CPUS,
        });
        if !paging::translate_run(va, &mut record.pages) {
            // Not mapped as the design said: the call fails.
            self.0.vfree(va);
            return None;
        }
        if zero {
            record
                .pages
                .iter()
                .for_each(|&pfn| phys::zero_frames(pfn, 1));
        }
        records()[record.cpu].lock().insert(va, record);
        Some(va)
    }
}

impl<D: TestVmalloc> TestVmalloc for LinuxLike<D> {
    fn vmalloc(&self, pages: u64, align: u64) -> Option<u64> {
        self.alloc(pages, align, false)
    }

    fn vmalloc_zeroed(&self, pages: u64, align: u64) -> Option<u64> {
        self.alloc(pages, align, true)
    }

    fn vfree(&self, va: u64) {
        let me = arch::cpu_id() % MAX_CPUS;
        let all = records();
        let order = (0..MAX_CPUS).map(|j| (me + j) % MAX_CPUS);
        for i in order {
            if let Some(r) = all[i].lock().remove(va) {
                debug_assert_eq!(r.size, r.pages.len() as u64 * PAGE);
                break;
            }
        }
        self.0.vfree(va);
    }

    fn touch(&self, va: u64) -> bool {
        self.0.touch(va)
    }
}
