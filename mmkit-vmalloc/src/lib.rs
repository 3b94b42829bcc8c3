//! One vmalloc for any machine: `vmalloc`/`vzalloc`/`vfree`/
//! `vfree_atomic`, `vmap`/`vunmap`, `vrealloc`, `vm_map_ram`/
//! `vm_unmap_ram`/`vm_unmap_aliases` and `purge`, with every failure path
//! (purge and retry, undo of a half-done map, ranges whose flush was
//! refused), written once over two traits the machine implements:
//!
//! - [`Mmu`]: write PTEs (`map`), clear them (`clear`), flush every CPU's
//!   TLB over a range (`flush`, the shootdown), read one back
//!   (`translate`, for checks);
//! - [`FrameSource`]: allocate and free runs of physical frames (an area's
//!   frames in one batch call each way; the defaults loop over the runs).
//!
//! No `unsafe` and no kernel dependency. Two machines drive it in this
//! repository: `mmkit-kernel` (real page tables, `invlpg` and shootdown
//! IPIs) and `mmkit-vm` (user space: a memfd as physical memory, `mmap`;
//! clearing only records the range and the flush unmaps it, and may be
//! refused). `examples/toy_kernel.rs` is a third, in host memory, and
//! `docs/adopting.md` in the repository walks through adopting the crate.
//!
//! ```text
//!  vmalloc/vfree, vmap/vunmap ──> Vmalloc<R, A>: areas (va -> A), guard page,
//!                                  Flush::Eager (clear + flush + free) or
//!                                  Flush::Lazy (clear, lazy list, purge past max)
//!                                  lazy / stuck: freed, still allocated in R
//!  vm_map_ram/vm_unmap_ram ─────> MapRam: a queue of mmkit::vblock blocks per
//!                                  CPU, blocks from the layer
//!  both ──> Mmu (map / clear / flush / translate) and FrameSource (frames)
//! ```
//!
//! # The safety contract
//! A freed range stays allocated in the range allocator `R` until the
//! flush that covers it has succeeded, so no address is mapped again while
//! any CPU may still cache an old translation of it; this holds on every
//! call sequence, eager or lazy, whatever the MMU refuses or fails. The
//! frames of a freed area go back at once (Linux's default) or only after
//! that flush ([`FramePolicy`]).
//!
//! # Which calls flush, and the locks
//! The caller wraps the layer in one lock (a spin lock in a kernel). Calls
//! that *may flush* (and so send IPIs and wait for every CPU to take them)
//! do it with that lock held: `vmalloc`, `vzalloc`, `vmap` (a purge when
//! space or frames run out), `vfree`, `vunmap`, `vrealloc` (eager: every
//! time; lazy: when the lazy list passes its threshold), `purge`, and
//! [`MapRam`]'s `map` (a purge when no block is left), `unmap` (eager, or
//! past the threshold) and `unmap_aliases`. Calls that *never flush*:
//! `vfree_atomic`, `lookup`, the checks, `reserve`/`unreserve`/`insert`/
//! `take`. A CPU that spins on the layer's lock (or a queue's) must keep
//! taking the shootdown IPI while it spins, or the flush it waits for never
//! finishes: spin with interrupts on, or poll the IPI in the spin loop.
//! Lock order: a `MapRam` queue's lock, then the layer's.
//!
//! # Example
//! ```
//! use mmkit::vmap::VmapAllocator;
//! use mmkit_vmalloc::{Flush, FrameSource, MapFailed, Mmu, Refused, Vmalloc, VmError, PAGE};
//! use std::collections::BTreeMap;
//!
//! #[derive(Default)]
//! struct Table(BTreeMap<u64, u64>); // va -> pfn; this machine's TLB is the table
//! impl Mmu for Table {
//!     fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
//!         for (i, &p) in pfns.iter().enumerate() {
//!             self.0.insert(va + i as u64 * PAGE, p);
//!         }
//!         Ok(())
//!     }
//!     fn clear(&mut self, va: u64, pages: u64) {
//!         (0..pages).for_each(|i| { self.0.remove(&(va + i * PAGE)); });
//!     }
//!     fn flush(&mut self, _start: u64, _end: u64) -> Refused { Refused::new() }
//!     fn translate(&self, va: u64) -> Option<u64> { self.0.get(&va).copied() }
//! }
//! struct Frames(Vec<u64>);
//! impl FrameSource for Frames {
//!     fn alloc(&mut self, _max: u64) -> Option<(u64, u64)> { self.0.pop().map(|p| (p, 1)) }
//!     fn free(&mut self, pfn: u64, n: u64) { self.0.extend(pfn..pfn + n) }
//!     fn zero(&mut self, _pfn: u64, _n: u64) {}
//! }
//!
//! let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
//! let mut layer = Vmalloc::new(range, Flush::Lazy { max_bytes: 1 << 20 });
//! let (mut mmu, mut src) = (Table::default(), Frames((0..64).collect()));
//! let va = layer.vmalloc(&mut mmu, &mut src, 3 * PAGE)?;
//! assert!(mmu.translate(va + 2 * PAGE).is_some());
//! assert_eq!(layer.vfree(&mut mmu, &mut src, va + PAGE), Err(VmError::Interior { va: va + PAGE, start: va }));
//! layer.vfree(&mut mmu, &mut src, va)?;
//! assert_eq!(layer.vfree(&mut mmu, &mut src, va), Err(VmError::DoubleFree { va }));
//! assert_eq!(src.0.len(), 64); // the frames went back at once
//! assert!(layer.purge(&mut mmu, &mut src)); // one flush for the lazy list
//! layer.check(&mmu).unwrap();
//! # Ok::<(), VmError>(())
//! ```
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod book;
mod check;
mod driver;
mod error;
mod frames;
mod lazy;
mod maps;
mod pool;
mod ram;
pub mod test_vmalloc;

pub use error::VmError;
pub use frames::{frame_runs, FramePolicy, FrameSource};
pub use lazy::{Gone, Outcome, Purged, Released, Retired};
pub use maps::{Area, AreaData, LayerStats, Pieces, Vmalloc, Where};
pub use ram::{BlockSource, Lock, MapRam, MapRamIn, Queue, MAX_PAGES};

use alloc::vec::Vec;

/// Bytes per page.
pub const PAGE: u64 = 4096;

/// Ranges `[start, end)` a flush could not release: they are still mapped
/// (or cached) and must not be reused. Empty when the flush succeeded.
pub type Refused = Vec<(u64, u64)>;

/// A map that failed: why, and how many pages from its start it had mapped
/// (the layer takes those down through `clear` and `flush`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapFailed {
    /// Why ([`VmError::MapFailed`] with the page it could not map).
    pub err: VmError,
    /// Pages mapped from the start before the failure.
    pub mapped: u64,
}

/// The machine's page tables and TLBs, as the layer drives them. The layer
/// calls it with its lock held.
pub trait Mmu {
    /// Maps `pfns.len()` pages from `va`, one frame each (writes PTEs; no
    /// flush is needed: the pages were not mapped, and no CPU caches them).
    ///
    /// # Errors
    /// [`MapFailed`] (say with [`VmError::MapFailed`]) when a page-table
    /// page cannot be allocated, saying how many pages it mapped; the layer
    /// takes those down.
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed>;
    /// Clears the PTEs of `pages` pages from `va` (an area's whole range,
    /// guard page included; clearing a page that is not mapped does
    /// nothing). Never waits: TLBs may still hold the translations until a
    /// flush covers them.
    fn clear(&mut self, va: u64, pages: u64);
    /// Removes every translation of what was cleared in `[start, end)` from
    /// every CPU's TLB (the shootdown: IPIs, and a wait for every CPU).
    /// Returns the ranges it could not release (empty when it succeeded):
    /// those stay reachable, and the layer keeps them allocated (and, under
    /// [`FramePolicy::AfterFlush`], their frames) until a later flush
    /// releases them.
    #[must_use]
    fn flush(&mut self, start: u64, end: u64) -> Refused;
    /// The frame `va` maps, if any (for `check`, `vm_unmap_ram`'s
    /// validation and fault reports).
    fn translate(&self, va: u64) -> Option<u64>;
}

/// When unmapped translations leave the TLBs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Every unmap flushes its range on every CPU before the range is free.
    Eager,
    /// An unmap clears its PTEs and puts the range on the lazy list; one
    /// flush over the lazy list's span purges it once it holds more than
    /// `max_bytes`, when an allocation fails, and on `vm_unmap_aliases`.
    Lazy {
        /// The purge threshold (the kernel's `lazy_max_pages()` in bytes).
        max_bytes: u64,
    },
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tlb_model;
#[cfg(test)]
mod user_tests;
