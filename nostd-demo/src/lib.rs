//! A `no_std` kernel-style user of mmkit, compiled by CI for a bare-metal
//! target (`cargo build -p mmkit-nostd-demo --target x86_64-unknown-none`):
//! the proof that mmkit's allocators work behind a kernel's static spin lock
//! with no `std` anywhere, and keep working when another crate of the same
//! build turns mmkit's `std` feature on (features are additive).
//!
//! The "kernel" has a vmalloc space managed by a [`VmapAllocator`] with lazy
//! TLB flushing (the flush hook counts flushes in an atomic, as a kernel
//! would send its IPI), and a zone of page frames managed by a
//! [`BuddyAllocator`]; both live in `static`s set up at boot. Before them,
//! [`EARLY`], an allocator of physical ranges in fixed storage, is a
//! `static` built at compile time: it takes the firmware's memory map and
//! hands out the ranges the kernel needs before it has a heap.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

use core::sync::atomic::{AtomicU64, Ordering};

use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
use mmkit::lock::Guarded;
use mmkit::storage::Fixed;
use mmkit::vmap::VmapAllocator;
use mmkit::{AddFreeError, AllocError, FreeError};

/// The kernel's lock: a spin lock, usable before any scheduler exists.
pub type Spin = spin::Mutex<()>;

/// Physical memory before the heap: no heap behind it, built by a `const fn`.
pub static EARLY: Guarded<Spin, VmapAllocator<Fixed<8>>> = Guarded::new(VmapAllocator::new_fixed());

/// Gives [`EARLY`] the firmware's usable RAM ranges `[start, end)` and
/// carves out a first heap of `heap_bytes`, 2 MiB aligned; returns its
/// address.
///
/// # Errors
/// [`EarlyError::Map`] for a range overlapping one added before;
/// [`EarlyError::Heap`] when no range holds the heap.
pub fn early_boot(map: &[(u64, u64)], heap_bytes: u64) -> Result<u64, EarlyError> {
    EARLY.with(|early| {
        for &(start, end) in map {
            early.add_free(start, end).map_err(EarlyError::Map)?;
        }
        early.alloc(heap_bytes, 2 << 20).map_err(EarlyError::Heap)
    })
}

/// Why [`early_boot`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EarlyError {
    /// A range of the map was refused.
    Map(AddFreeError),
    /// No range holds the first heap.
    Heap(AllocError),
}

/// The vmalloc space; `None` until [`boot`] knows the memory map.
pub static VMALLOC: Guarded<Spin, Option<VmapAllocator>> = Guarded::new(None);
/// The page frames of one zone.
pub static FRAMES: Guarded<Spin, Option<BuddyAllocator>> = Guarded::new(None);
/// TLB flushes the lazy purges asked for.
pub static TLB_FLUSHES: AtomicU64 = AtomicU64::new(0);

/// Page size of the toy kernel.
pub const PAGE: u64 = 4096;

/// Sets up both allocators: vmalloc over `[vstart, vend)`, frames over
/// `pages` page frames from `first_pfn`.
///
/// # Errors
/// What the constructors return for a bad range.
pub fn boot(vstart: u64, vend: u64, first_pfn: u64, pages: u64) -> Result<(), AllocError> {
    let mut va = VmapAllocator::new(vstart, vend)?;
    va.set_lazy_max(64 * PAGE);
    // The hook must be `Send` (it lives in a static shared by CPUs): with or
    // without mmkit's `std` feature, the same bound.
    va.set_flush_hook(Some(alloc::boxed::Box::new(|_start, _end| {
        TLB_FLUSHES.fetch_add(1, Ordering::Relaxed);
    })));
    let mut zone = BuddyAllocator::new(first_pfn, pages, BuddyConfig::default())?;
    // Every frame of the zone is RAM here; a real kernel adds each usable
    // range of its firmware's memory map.
    zone.add_free_range(first_pfn, pages)
        .map_err(|_| AllocError::Invalid)?;
    VMALLOC.with(|v| *v = Some(va));
    FRAMES.with(|f| *f = Some(zone));
    Ok(())
}

/// Maps `pages` pages of virtual space; returns its address.
///
/// # Errors
/// [`AllocError::NoSpace`] when the space is full (or before [`boot`]).
pub fn vmalloc(pages: u64) -> Result<u64, AllocError> {
    VMALLOC.with(|v| match v {
        Some(v) => v.alloc(pages * PAGE, PAGE),
        None => Err(AllocError::NoSpace),
    })
}

/// Unmaps what [`vmalloc`] returned; the TLB flush is deferred.
///
/// # Errors
/// [`FreeError::NotAllocated`] for an address [`vmalloc`] did not return.
pub fn vfree(addr: u64) -> Result<u64, FreeError> {
    VMALLOC.with(|v| match v {
        Some(v) => v.free_lazy(addr),
        None => Err(FreeError::NotAllocated),
    })
}

/// Takes `2^order` contiguous page frames; returns the first pfn.
///
/// # Errors
/// As [`BuddyAllocator::alloc`].
pub fn alloc_frames(order: u8) -> Result<u64, AllocError> {
    FRAMES.with(|f| match f {
        Some(f) => f.alloc(order, MigrateType::Movable),
        None => Err(AllocError::NoSpace),
    })
}

/// Returns frames taken by [`alloc_frames`].
///
/// # Errors
/// As [`BuddyAllocator::free`].
pub fn free_frames(pfn: u64, order: u8) -> Result<(), FreeError> {
    FRAMES.with(|f| match f {
        Some(f) => f.free(pfn, order),
        None => Err(FreeError::NotAllocated),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn early_boot_takes_the_map_and_carves_a_heap() {
        let map = [
            (0x1000, 0x9f000),
            (0x10_0000, 0xc000_0000),
            (0x1_0000_0000, 0x2_0000_0000),
        ];
        assert_eq!(early_boot(&map, 64 << 20), Ok(0x20_0000));
        assert_eq!(EARLY.free_range(0x20_0000, 0x1000), Ok(0x1000));
        let again = early_boot(&map[..1], 1);
        assert!(matches!(
            again,
            Err(EarlyError::Map(AddFreeError::Overlaps { .. }))
        ));
    }

    #[test]
    fn boot_map_unmap_flush() {
        assert_eq!(vmalloc(1), Err(AllocError::NoSpace)); // before boot
        boot(0xffff_c000_0000_0000, 0xffff_c000_1000_0000, 0x100, 1024).unwrap();
        let a = vmalloc(4).unwrap();
        assert_eq!(a, 0xffff_c000_0000_0000);
        assert_eq!(vfree(a), Ok(4 * PAGE));
        assert_eq!(vfree(a), Err(FreeError::NotAllocated));
        // 65 lazily freed pages pass the 64-page threshold: one flush.
        let b = vmalloc(65).unwrap();
        vfree(b).unwrap();
        assert_eq!(TLB_FLUSHES.load(Ordering::Relaxed), 1);
        let f = alloc_frames(3).unwrap();
        assert_eq!(f % 8, 0);
        assert_eq!(free_frames(f, 3), Ok(()));
        assert!(free_frames(f, 3).is_err());
    }
}
