//! # mmkit: the Linux kernel's memory allocators, as a Rust library
//!
//! mmkit rebuilds the allocators of the kernel's `mm/` over plain integer
//! ranges, so they can serve anything that hands out address space: an OS
//! kernel, a hypervisor, a GPU heap, a storage engine, a runtime reserving
//! virtual memory. The core is `no_std` + `alloc` and has no `unsafe`.
//!
//! ## Modules and what they use
//! Drawn from the `use` graph: an arrow means "calls into".
//!
//! ```text
//!  range allocators, all keeping the RangeAllocator contract of `range`:
//!    vblock ──> any R: RangeAllocator   per-CPU blocks for small ranges
//!                (VmapAllocator in practice; the kernel's vm_map_ram)  [001, 002]
//!    vmap ────> tree, range, request,   lowest/highest/exact fit over an augmented tree
//!               lazy                    of free blocks + lazy purge    [000, 002]
//!    baseline::linear_vmap ──> range,   the O(n) design vmap replaced  [000]
//!                              lazy
//!  lazy                                 one lazy list and purge: when a freed range
//!                                       may be reused (vmap, its pools, nodes, the
//!                                       baseline, a vmalloc layer)     [002]
//!  bitmap and page allocators, standalone:
//!    percpu                             bitmap chunks with block hints [003]
//!    baseline::area_map ──> percpu      the area map percpu replaced   [003]
//!                          (chunk slot lists, shared)
//!    buddy                              page frames, orders, migratetypes,
//!                                       fragmentation indexes          [004]
//!  shared by all: error (typed errors), debug (the debug-check feature);
//!  lock (feature lock_api) ──> range: any allocator behind any lock.
//! ```
//!
//! ## The kernel patches mmkit follows
//! Each module reimplements what one Linux patch introduced, and the
//! `mmkit` CLI reruns that patch's measurements. The docs cite them by
//! number (`[000]`, "seed 000"):
//!
//! | # | patch | author, year | what it contributed | what it measured |
//! |---|---|---|---|---|
//! | 000 | *mm/vmalloc.c: keep track of free blocks for vmap allocation* | Uladzislau Rezki, 2019 | free blocks in an augmented red-black tree searched for the lowest fit in O(log n), the four split types, merging on free ([`vmap`]) | `test_vmalloc` performance mode (one CPU, sequential): 6.5e11 vs 1.9e11 cycles on an i5-3320M; stress mode (all CPUs, shuffled): 101 min vs 57 s, against the O(n) busy-list search ([`baseline::linear_vmap`]) |
//! | 001 | *mm/vmalloc: fix possible exhaustion of vmalloc space caused by vm_map_ram allocator* | Roman Pen, 2015 | per-CPU vmap blocks: a new block goes to the list tail occupied by its request, dirty pages tracked by a min/max range ([`vblock`], `Policy::Current`) | three map/unmap scenarios (an exhaustion loop, random sizes, increasing orders) with their block counters; with random sizes (10,000 maps of 1 to 32 or 64 pages), 420 blocks created and 37 released before, 414 and 412 after |
//! | 002 | *mm: rewrite vmap layer* | Nick Piggin, 2008 | the tree-based vmap allocator, lazy TLB flushing (freed ranges not reused until one batched flush), the per-CPU `vm_map_ram` front end, `vm_unmap_aliases` ([`vmap`] purges, [`vblock`]) | map + touch + unmap of 4 pages by 1 to 8 threads: 14.7 µs to 70.6 µs per operation before, 2.8 to 3.0 µs after (25x at 8 cores) |
//! | 003 | *percpu: replace area map allocator with bitmap* | Dennis Zhou, 2017 | a bitmap chunk allocator with per-block metadata and hints bounding the scan ([`percpu`]) | 1M objects of 4 to 1024 bytes, freed in order, alternating and in reverse; chunks filled in their second half; 4-byte objects at 8-byte alignment (52 min for the area map, 16 s for the bitmap) |
//! | 004 | *page allocator: Reduce fragmentation in buddy allocator by adding buddies that are merging to the tail of the free lists* | Corrado Zoccolo and Mel Gorman, 2009 | freed blocks whose buddy of the next order is free go to the tail of their free list ([`buddy`], `Placement::TailIfMergeLikely`) | kernbench, netperf, sysbench, STREAM (no regression) and a huge-page stress test: the unusable free space index slightly lower through the run |
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
//!
//! ## Start here
//! - **Address space** (a kernel's vmalloc area, a hypervisor's MMIO and
//!   PCI BAR space, a GPU heap): [`vmap::VmapAllocator`]. Plain calls
//!   (`alloc`, `alloc_in`, `free`, `free_lazy`, `purge`) or a
//!   [`request::Request`] with a window and a [`request::Policy`] (lowest,
//!   highest, exact) and errors that say what failed
//!   ([`request::RequestError`]); `core::alloc::Layout` entry points;
//!   iterators over live areas and free blocks; `grow` and `shrink`.
//!   Examples: `mmio_allocator`, `gpu_heap`.
//! - **Physical page frames**: [`buddy::BuddyAllocator`] over the usable
//!   ranges of a memory map, with [`buddy::pcp::PcpZone`] per-CPU lists in
//!   front. Example: `frame_allocator`.
//! - **Many small objects per CPU**: [`percpu::PercpuAllocator`].
//! - **Small mappings per CPU** over any range allocator:
//!   [`vblock::VblockAllocator`].
//! - **Sharing one**: [`lock::Guarded`] puts any allocator behind any
//!   `lock_api` lock (a spin lock in `no_std`), and
//!   [`buddy::pcp::LockedZone`] gives each CPU's page lists their own such
//!   lock; with `std`, `range::Locked`,
//!   `vblock::ConcurrentVblock` and `buddy::pcp::ConcurrentZone`. Where
//!   many threads churn address space and the lowest fit does not matter,
//!   `vmap::pooled::PooledVmap` (`std`) keeps freed areas in per-CPU pools
//!   in front of one `VmapAllocator` (Linux 6.9's vmap nodes; not exact).
//! - `use mmkit::prelude::*` imports the common names.
//!
//! ## Features
//! `std` (default): `std::error::Error` impls and the `std` lock wrappers.
//! `lock_api` (default, `no_std`): [`lock::Guarded`]. `serde`: serialize the
//! statistics, free-block snapshots, requests and their errors.
//! `debug-check`: every operation first runs the allocator's `check()`.
//! `internals`: makes `tree`, the B+tree index of free blocks that
//! [`vmap`] runs on, public, for benchmarks of the index alone; unstable,
//! not covered by semver (any release may change or remove it).
//! Without `std`, every allocator is still `Send` (flush hooks are
//! `Send`), so turning `std` on elsewhere in a build changes nothing.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(missing_debug_implementations)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

#[doc(hidden)]
pub use alloc::format as __format;

mod balance;
pub mod baseline;
pub mod buddy;
pub mod debug;
pub mod error;
pub mod lazy;
#[cfg(feature = "lock_api")]
pub mod lock;
#[cfg(feature = "lock_api")]
pub mod nodes;
pub mod percpu;
pub mod prelude;
pub mod range;
pub mod request;
pub mod storage;
#[cfg(feature = "std")]
mod sync;
// The B+tree under `vmap`: public only with the unstable `internals`
// feature. Without it, the parts of its interface that only outside users
// and the tests call are unused.
// The same file as the private `tree` below. cargo-mutants reads the
// `mutants::skip` inside without evaluating `cfg_attr` (the cfg `mutants` is
// never set), so it mutates the file once, not once per declaration.
#[cfg(feature = "internals")]
#[cfg_attr(mutants, mutants::skip)]
pub mod tree;
#[cfg(not(feature = "internals"))]
#[allow(dead_code, unused_imports)]
mod tree;
pub mod vblock;
pub mod vmap;

pub use error::{AddFreeError, AllocError, CheckError, FreeError};

#[cfg(test)]
mod testkit;

// Every allocator is `Send` with and without `std`, so a kernel's `static`
// spin lock (`lock::Guarded`) can hold one: checked at compile time in every
// build, `no_std` included.
const _: () = {
    const fn send<T: Send>() {}
    send::<vmap::VmapAllocator>();
    send::<vmap::VmapAllocator<storage::Fixed<4>>>();
    send::<baseline::linear_vmap::LinearVmap>();
    send::<baseline::area_map::AreaMapAllocator>();
    send::<percpu::PercpuAllocator>();
    send::<buddy::BuddyAllocator>();
    send::<buddy::pcp::PcpZone>();
    send::<vblock::VblockAllocator<vmap::VmapAllocator>>();
};
