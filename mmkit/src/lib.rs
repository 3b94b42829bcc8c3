//! # mmkit: the Linux kernel's memory allocators, as a Rust library
//!
//! mmkit rebuilds the allocators of the kernel's `mm/` over plain integer
//! ranges, so they can serve anything that hands out address space: an OS
//! kernel, a hypervisor, a GPU heap, a storage engine, a runtime reserving
//! virtual memory. The core is `no_std` + `alloc` and has no `unsafe`.
//!
//! ## Layers
//! Each layer is a module with one job; arrows point down only.
//!
//! ```text
//!  percpu    bitmap chunk allocator with block hints      (seed 003)
//!  vblock    per-CPU block front end for small ranges     (seeds 001, 002)
//!    |  uses
//!  vmap      range allocator: lowest fit over an augmented
//!            tree + lazy purge                             (seeds 000, 002)
//!  buddy     page-frame allocator, orders, migratetypes,
//!            fragmentation indexes                         (seed 004)
//!    |  uses
//!  tree      the augmented balanced tree of free ranges (shared core)
//!  range     the contract every range allocator keeps
//!  baseline  the designs each seed replaced, kept for the experiments
//! ```
//!
//! ## Abbreviations
//! Used throughout, as the kernel uses them:
//! - `va`: a vmap area, a half-open range `[va_start, va_end)` of addresses;
//! - `vb`: a vmap block, a range carved into pages by the per-CPU front end;
//! - `pfn`: page frame number, an index of a page-sized frame;
//! - `order`: a power of two count of pages, `2^order`.
//!
//! ## Example
//! ```
//! use mmkit::range::RangeAllocator;
//! use mmkit::vmap::VmapAllocator;
//!
//! // Manage [0x1000, 0x10_0000) and hand out 4 KiB-aligned ranges.
//! let mut va = VmapAllocator::new(0x1000, 0x10_0000).unwrap();
//! let a = va.alloc(0x3000, 0x1000).unwrap();
//! let b = va.alloc(0x1000, 0x1000).unwrap();
//! assert_eq!((a, b), (0x1000, 0x4000)); // always the lowest fit
//! va.free(a).unwrap();
//! assert_eq!(va.alloc(0x2000, 0x2000).unwrap(), 0x2000);
//! va.check().unwrap();
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

#[doc(hidden)]
pub use alloc::format as __format;

pub mod baseline;
pub mod buddy;
pub mod debug;
pub mod error;
#[cfg(feature = "lock_api")]
pub mod lock;
pub mod percpu;
pub mod range;
#[cfg(feature = "std")]
mod sync;
pub mod tree;
pub mod vblock;
pub mod vmap;

pub use error::{AllocError, CheckError, FreeError};
