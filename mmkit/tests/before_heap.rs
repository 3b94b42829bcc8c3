//! No heap before the heap: an allocator in fixed storage
//! (`VmapAllocator<Fixed<N>>`), built by a `const fn` in a `static`, runs a
//! kernel's boot sequence (the firmware map into `add_free`, reservations
//! at exact addresses, the first heap carved out, frees by range) with no
//! heap allocation at all. A global allocator counts every allocation the
//! test's thread makes while the heap "does not exist yet", and a second
//! count shows the allocator moves to the heap once allowed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use mmkit::lock::Guarded;
use mmkit::request::{Policy, Request, RequestError};
use mmkit::storage::Fixed;
use mmkit::vmap::VmapAllocator;
use mmkit::{AddFreeError, AllocError, FreeError};

struct Counting;

thread_local! {
    /// Whether this thread is counting its allocations (the test harness's
    /// other threads are not counted).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn note_alloc() {
    // `try_with`: the allocator may run while the thread-locals are torn down.
    let _ = COUNTING.try_with(|c| {
        if c.get() {
            let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: forwards every call unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the counter has no effect on the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: same layout contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_alloc();
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds
        // the size contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations `f` makes on this thread.
fn allocations<T>(f: impl FnOnce() -> T) -> (T, usize) {
    ALLOCS.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    (out, ALLOCS.with(Cell::get))
}

type Spin = spin::Mutex<()>;

/// The boot-time frame allocator: built at compile time, no heap behind it.
static FRAMES: Guarded<Spin, VmapAllocator<Fixed<8>>> = Guarded::new(VmapAllocator::new_fixed());

const MIB: u64 = 1 << 20;

#[test]
fn a_boot_sequence_makes_no_heap_allocation() {
    let ((heap, reserved), n) = allocations(|| {
        FRAMES.with(|f| {
            // The firmware map: low RAM, RAM below the 32-bit hole, RAM above.
            f.add_free(0x1000, 0x9f000).unwrap();
            f.add_free(MIB, 3 << 30).unwrap();
            f.add_free(4 << 30, 6 << 30).unwrap();
            // The kernel image and an ACPI table, at their exact addresses.
            let at = |a: u64, len: u64| Request::bytes(len).unwrap().policy(Policy::Exact(a));
            let kernel = f.allocate(at(2 * MIB, 6 * MIB)).unwrap();
            let acpi = f.allocate(at(0x9_0000, 0x1000)).unwrap();
            // A range the map does not have cannot be reserved.
            assert!(matches!(
                f.allocate(at(3 << 30, 0x1000)),
                Err(RequestError::NotFree { .. })
            ));
            // The first heap: 64 MiB, 2 MiB aligned.
            let heap = f.alloc(64 * MIB, 2 * MIB).unwrap();
            // Frames handed out and given back by range.
            let a = f.alloc(0x4000, 0x1000).unwrap();
            assert_eq!(f.free_range(a + 0x1000, 0x2000), Ok(0x2000));
            assert_eq!(f.free_sized(a, 0x1000), Ok(0x1000));
            assert_eq!(f.free_range(a + 0x3000, 0x1000), Ok(0x1000));
            // Refusals change nothing and allocate nothing either.
            assert_eq!(f.free(kernel), Err(FreeError::Invalid));
            assert_eq!(f.free_range(kernel, 0), Err(FreeError::Invalid));
            assert_eq!(f.free_range(3 << 30, 0x1000), Err(FreeError::Invalid));
            assert_eq!(f.free_lazy_sized(acpi, 0x1000), Err(FreeError::StorageFull));
            // Best fit: the shortest free block that holds a page, the
            // rest of low RAM above the ACPI table, with no heap.
            let best = Request::bytes(0x1000).unwrap().policy(Policy::BestFit);
            assert_eq!(f.allocate(best), Ok(0x9_1000));
            assert_eq!(f.free_sized(0x9_1000, 0x1000), Ok(0x1000));
            assert_eq!(
                f.add_free(0x9e000, 0xa0000),
                Err(AddFreeError::Overlaps {
                    start: 0x9e000,
                    end: 0x9f000
                })
            );
            (heap, (kernel, acpi))
        })
    });
    assert_eq!(n, 0, "heap allocations before the heap");
    assert_eq!(heap, 8 * MIB);
    assert_eq!(reserved, (2 * MIB, 0x9_0000));
    FRAMES.with(|f| {
        f.check().unwrap();
        let managed: Vec<_> = f.managed().collect();
        assert_eq!(managed, [0x1000..0x9f000, MIB..3 << 30, 4 << 30..6 << 30]);
    });
}

/// Fills a fixed allocator's arrays: every operation that needs room it
/// lacks is refused with `StorageFull`, changes nothing and allocates
/// nothing; once allowed, the allocator moves to the heap and goes on.
#[test]
fn full_fixed_storage_refuses_then_grows_into_the_heap_once_allowed() {
    let mut va = VmapAllocator::<Fixed<2>>::new_fixed();
    let (counts, n) = allocations(|| {
        va.add_free(0, 1 << 20).unwrap();
        // Every other page: free blocks until the two leaves are full.
        let mut taken = 0;
        loop {
            match va.alloc_in(0x1000, 0x1000, 0x1000 * (2 * taken + 1), 1 << 20) {
                Ok(a) => {
                    assert_eq!(a, 0x1000 * (2 * taken + 1));
                    taken += 1;
                }
                Err(e) => {
                    assert_eq!(e, AllocError::StorageFull);
                    break;
                }
            }
        }
        let before = va.stats();
        // A free that would leave a new block is refused as well.
        assert_eq!(va.free_range(0x1000, 0x800), Err(FreeError::StorageFull));
        assert_eq!(va.stats(), before);
        (taken, before.free_blocks as usize)
    });
    assert_eq!(n, 0, "heap allocations before the heap");
    let (taken, blocks): (u64, usize) = counts;
    // Two leaves of 16 blocks, one spare kept for the next block.
    assert!((8..=32).contains(&blocks), "{blocks} blocks in two leaves");
    assert_eq!(taken + 1, blocks as u64);
    va.check().unwrap();
    va.allow_heap();
    let (_, n) = allocations(|| {
        for i in taken..taken + 64 {
            assert_eq!(
                va.alloc_in(0x1000, 0x1000, 0x1000 * (2 * i + 1), 1 << 20),
                Ok(0x1000 * (2 * i + 1))
            );
        }
    });
    assert!(n > 0, "grown into the heap");
    va.check().unwrap();
    assert!(va.stats().free_blocks > blocks as u64);
}

/// Best fit on fixed storage: its size index and aligned indexes take
/// their nodes from the same arrays as the tree, so it runs with no heap
/// and answers as the heap allocator does; once the arrays hold no room
/// for the next change, it is refused with `StorageFull` and changes
/// nothing.
#[test]
fn best_fit_on_fixed_storage_needs_no_heap_and_is_refused_when_full() {
    let mut fixed = VmapAllocator::<Fixed<16>>::new_fixed();
    let mut heap = VmapAllocator::new_empty();
    fixed.add_free(0, 1 << 30).unwrap();
    heap.add_free(0, 1 << 30).unwrap();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut fixed_allocs = 0;
    let mut refused = false;
    for _ in 0..4000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let r = rng;
        let before = fixed.stats();
        if r % 3 == 0 && !live.is_empty() {
            let (a, size) = live.swap_remove((r >> 8) as usize % live.len());
            assert_eq!(heap.free_sized(a, size), Ok(size));
            let (got, n) = allocations(|| fixed.free_sized(a, size));
            fixed_allocs += n;
            if got == Err(FreeError::StorageFull) {
                refused = true;
                assert_eq!(fixed.stats(), before);
                break;
            }
            assert_eq!(got, Ok(size));
            continue;
        }
        let size = 0x1000 * (r % 8 + 1);
        let align = [0x1000, 0x4000, 0x1_0000][(r >> 8) as usize % 3];
        let req = Request::bytes(size)
            .unwrap()
            .align(align)
            .policy(Policy::BestFit);
        let want = heap.allocate(req.clone()).unwrap();
        let (got, n) = allocations(|| fixed.allocate(req));
        fixed_allocs += n;
        if got == Err(RequestError::StorageFull) {
            refused = true;
            assert_eq!(fixed.stats(), before);
            break;
        }
        assert_eq!(got, Ok(want), "best fit of {size:#x} aligned {align:#x}");
        live.push((want, size));
    }
    assert!(refused, "the arrays never filled");
    assert_eq!(fixed_allocs, 0, "heap allocations before the heap");
    fixed.check().unwrap();
}
