//! Steady-state operation of the range allocator allocates no heap memory:
//! a counting global allocator proves it (a count, not a timing).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use mmkit::vmap::VmapAllocator;

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the counter has no effect on the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same layout contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds
        // the size contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One round of a balanced mixed workload: allocations of varied sizes and
/// alignments, eager and lazy frees, purges.
fn churn(va: &mut VmapAllocator, live: &mut Vec<u64>, seed: &mut u64) {
    for i in 0..2000u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = *seed >> 33;
        // Hover around 1000 live areas: a steady state, not a growing one.
        if live.len() < 1000 && (r % 2 == 0 || live.is_empty()) {
            let size = (r % 16 + 1) * 4096;
            let align = 4096 << (r % 4);
            if let Ok(a) = va.alloc(size, align) {
                live.push(a);
            }
        } else {
            let a = live.swap_remove((r as usize / 2) % live.len());
            if i % 2 == 0 {
                va.free(a).unwrap();
            } else {
                va.free_lazy(a).unwrap();
            }
        }
    }
    va.purge(&mut |_, _| {});
}

// check() allocates, so the debug-check hook would count.
#[cfg_attr(feature = "debug-check", ignore)]
#[test]
fn steady_state_allocates_nothing() {
    let mut va = VmapAllocator::new(0, 1 << 40).unwrap();
    va.set_lazy_max(1 << 20);
    let mut live = Vec::with_capacity(100_000);
    let mut seed = 42;
    // Warm up: the arena and lazy list reach their working size.
    for _ in 0..20 {
        churn(&mut va, &mut live, &mut seed);
    }
    // Free everything and start again: the node cache holds the nodes.
    while let Some(a) = live.pop() {
        va.free(a).unwrap();
    }
    for _ in 0..5 {
        churn(&mut va, &mut live, &mut seed);
    }
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        churn(&mut va, &mut live, &mut seed);
    }
    COUNTING.store(false, Ordering::SeqCst);
    va.check().unwrap();
    assert!(!live.is_empty());
    assert_eq!(
        ALLOCS.load(Ordering::SeqCst),
        0,
        "heap allocations in steady state"
    );
}
