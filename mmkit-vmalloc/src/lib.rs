//! One vmalloc layer for any machine: the areas, the lazy list, the stuck
//! list, the purge, the `vm_map_ram` wiring and `check()`, written once
//! over a memory-management unit ([`Mmu`]) that writes and clears
//! page-table entries and flushes TLBs. No `unsafe` and no kernel
//! dependency. Two machines drive it:
//!
//! - `mmkit-kernel`: real page tables; `clear` writes the PTEs now, `flush`
//!   is `invlpg` plus a shootdown IPI to every CPU, and never fails;
//! - `mmkit-vm` (user space): a memfd as physical memory and `mmap` in a
//!   reserved range. Clearing and flushing are one system call there, so
//!   `clear` only records the range (the mapping stays, and the layer keeps
//!   its frames and addresses, until the flush), and `flush` unmaps the
//!   recorded ranges with one call per run of adjacent ones. The kernel may
//!   refuse an unmapping: `flush` reports the ranges it could not release,
//!   and the layer keeps them allocated on its *stuck* list, retried by
//!   every later purge.
//!
//! ```text
//!  vmalloc/vfree, vmap/vunmap ──> Vmalloc<R, A>: areas (va -> A), guard page,
//!                                  Flush::Eager (clear + flush + free) or
//!                                  Flush::Lazy (clear, lazy list, purge past max)
//!                                  lazy / stuck: freed, still allocated in R
//!  vm_map_ram/vm_unmap_ram ─────> MapRam<R>: mmkit::vblock per-CPU blocks, blocks from R
//!  both ──> Mmu: map (write PTEs) / clear (PTEs only) / flush (TLBs of every CPU,
//!                may refuse ranges) / translate (for checks)
//! ```
//!
//! A freed range stays allocated in the range allocator `R` until the flush
//! that covers it has succeeded, so no address is handed out again while a
//! TLB (or, in user space, a mapping) may still reach its old frames. What
//! an area holds is the caller's type `A` ([`AreaData`]): frames for the
//! kernel, frames with their map counts, growth pieces and mirror copies
//! for `mmkit-vm`. A purge hands back every area it released
//! ([`Released`]) so the caller frees what the area held.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

mod check;
mod lazy;
mod maps;
mod ram;
pub mod test_vmalloc;

pub use lazy::{Gone, Outcome, Purged, Released, Retired};
pub use maps::{Area, AreaData, LayerStats, Vmalloc, Where};
pub use ram::{BlockSource, MapRam, MAX_PAGES};

use alloc::vec::Vec;
use core::fmt;

/// Bytes per page.
pub const PAGE: u64 = 4096;

/// Ranges `[start, end)` a flush could not release: they are still mapped
/// (or cached) and must not be reused. Empty when the flush succeeded.
pub type Refused = Vec<(u64, u64)>;

/// A map that failed: why, and how many pages from its start it had mapped
/// (the layer takes those down through `clear` and `flush`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapFailed {
    /// Why.
    pub err: VmError,
    /// Pages mapped from the start before the failure.
    pub mapped: u64,
}

impl From<MapFailed> for VmError {
    fn from(f: MapFailed) -> Self {
        f.err
    }
}

/// The machine under the layer.
pub trait Mmu {
    /// Maps `pfns.len()` pages from `va`, one frame each (writes PTEs; no
    /// flush is needed: the pages were not mapped).
    ///
    /// # Errors
    /// [`MapFailed`] with [`VmError::NoMemory`] when a page-table page
    /// cannot be allocated, saying how many pages it mapped.
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed>;
    /// Clears the PTEs of `pages` pages from `va` (an area's whole range,
    /// guard page included; clearing a page that is not mapped does
    /// nothing); TLBs may still hold them until a flush covers them.
    fn clear(&mut self, va: u64, pages: u64);
    /// Removes every translation of what was cleared in `[start, end)` from
    /// every CPU's TLB. Returns the ranges it could not release (empty when
    /// it succeeded): those stay reachable, and the layer keeps them
    /// allocated until a later flush releases them.
    #[must_use]
    fn flush(&mut self, start: u64, end: u64) -> Refused;
    /// The frame `va` maps, if any (for `check` and fault reports).
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

/// Why a layer operation failed; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmError {
    /// Zero pages, too many, or an address that is not a live mapping.
    Invalid,
    /// No address space left (after a purge) or no page-table memory.
    NoMemory,
}

impl fmt::Display for VmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmError::Invalid => f.write_str("not a live mapping, or a malformed request"),
            VmError::NoMemory => f.write_str("out of address space or page-table memory"),
        }
    }
}

impl From<mmkit::AllocError> for VmError {
    fn from(e: mmkit::AllocError) -> Self {
        match e {
            mmkit::AllocError::Invalid => VmError::Invalid,
            _ => VmError::NoMemory,
        }
    }
}

impl From<mmkit::FreeError> for VmError {
    fn from(_: mmkit::FreeError) -> Self {
        VmError::Invalid
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod user_tests;
