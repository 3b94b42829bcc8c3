//! A `no_std` kernel-style user of mmkit, compiled by CI for a bare-metal
//! target (`cargo build -p mmkit-nostd-demo --target x86_64-unknown-none`):
//! the proof that mmkit's allocators work behind a kernel's static spin lock
//! with no `std` anywhere, and keep working when another crate of the same
//! build turns mmkit's `std` feature on (features are additive).
//!
//! The "kernel" has a vmalloc space managed by a [`VmapAllocator`] with lazy
//! TLB flushing (the flush hook counts flushes in an atomic, as a kernel
//! would send its IPI), and a zone of page frames managed by a
//! [`BuddyAllocator`]; both live in `static`s set up at boot.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

use core::sync::atomic::{AtomicU64, Ordering};

use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
use mmkit::lock::Guarded;
use mmkit::vmap::VmapAllocator;
use mmkit::{AllocError, FreeError};

/// The kernel's lock: a spin lock, usable before any scheduler exists.
pub type Spin = spin::Mutex<()>;

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
