//! One vmalloc layer for any machine: the areas, the lazy list, the purge,
//! the `vm_map_ram` wiring and `check()`, written once over a
//! memory-management unit ([`Mmu`]) that writes and clears page-table
//! entries and flushes TLBs. No `unsafe` and no kernel dependency: the
//! kernel's page tables and shootdown IPIs are one [`Mmu`]; a user-space
//! one (memfd + `mmap`, where clearing and flushing are one `munmap`) would
//! be another.
//!
//! ```text
//!  vmalloc/vfree, vmap/vunmap ──> Vmalloc<R>: areas (va -> frames), guard page,
//!                                  Flush::Eager (clear + flush + free) or
//!                                  Flush::Lazy (clear, free_lazy, purge past lazy_max)
//!  vm_map_ram/vm_unmap_ram ─────> MapRam<R>: mmkit::vblock per-CPU blocks, blocks from R
//!  both ──> Mmu: map (write PTEs) / clear (PTEs only) / flush (TLBs of every CPU)
//! ```
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

mod maps;
mod ram;

pub use maps::{Area, LayerStats, Vmalloc, Where};
pub use ram::{BlockSource, MapRam, MAX_PAGES};

use core::fmt;

/// Bytes per page.
pub const PAGE: u64 = 4096;

/// The machine under the layer.
pub trait Mmu {
    /// Maps `pfns.len()` pages from `va`, one frame each (writes PTEs; no
    /// flush is needed: the pages were not mapped).
    ///
    /// # Errors
    /// [`VmError::NoMemory`] when a page-table page cannot be allocated;
    /// nothing stays mapped then.
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), VmError>;
    /// Clears the PTEs of `pages` pages from `va`; TLBs may still hold them.
    fn clear(&mut self, va: u64, pages: u64);
    /// Removes every translation of `[start, end)` from every CPU's TLB.
    fn flush(&mut self, start: u64, end: u64);
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
