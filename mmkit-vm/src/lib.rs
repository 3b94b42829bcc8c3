//! # mmkit-vm: the kernel's vmalloc layer over real memory, in user space
//!
//! mmkit's allocators manage integer ranges. This crate puts them to work
//! the way the kernel does, on Linux, over real mappings:
//!
//! ```text
//!  Vm            vmalloc / vzalloc / vfree / vrealloc, vmap / vunmap,
//!   |            vm_map_ram / vm_unmap_ram / vm_unmap_aliases, purge
//!   |            VBuf (owning handle), MirrorRing (double-mapped ring)
//!   +-- space    one lock around mmkit_vmalloc's driver (over
//!   |            mmkit::vmap::VmapAllocator), which runs every call
//!   |            sequence; this crate implements its two traits:
//!   |            Mmu = space::mmu (mmap per run, its page table, a flush
//!   |            that unmaps), FrameSource = the memfd's buddy
//!   |            vm_map_ram = the driver's MapRam front end: per-CPU blocks
//!   |            for small requests, CPU from sched_getcpu     (seeds 001, 002)
//!   +-- phys     a memfd = physical memory, frames managed by
//!   |            mmkit::buddy::BuddyAllocator, grown a pageblock at a time
//!   +-- sys      the system calls (rustix): memfd, mmap, the only unsafe
//! ```
//!
//! The vmalloc driver is the one `mmkit-kernel` runs over real page
//! tables: this crate is a trait implementation of it (its user-space
//! machine, where clearing and flushing a range are one unmapping call),
//! plus what only user space has (the mapping budget, mirror areas,
//! handles). `vm_map_ram` is the driver's per-CPU front end, reached
//! through an `Arc` of the space.
//!
//! The "seeds" are the kernel patches mmkit follows (see the `mmkit`
//! crate's docs): 000 is Uladzislau Rezki's augmented free-block tree for
//! vmap areas (2019), 001 Roman Pen's fix of the per-CPU vmap blocks
//! (2015), 002 Nick Piggin's rewrite of the vmap layer with lazy TLB
//! flushing and per-CPU blocks (2008).
//!
//! ## Lazy unmapping
//! The kernel does not flush the TLB when it frees a vmalloc area: the
//! area waits on a list and a purge flushes everything at once. Here a
//! "flush" is the system call that unmaps: a freed area stays mapped (and
//! its range and frames unused) until a purge unmaps every lazily freed
//! area with one call per run of adjacent areas. A purge runs when more
//! than `lazy_max` bytes are waiting, when an allocation finds no space,
//! memory or mapping budget (then it is retried), and on [`Vm::purge`].
//! A per-CPU block joins the same lazy list when all its pages are
//! freed; adjacent cleared ranges are unmapped by one call.
//!
//! ## No mapping is forgotten
//! Every system call's result is handled. A range whose unmapping the
//! kernel refuses (`ENOMEM` when it would split a mapping at the process's
//! mapping limit) stays mapped *and recorded*: its addresses stay
//! allocated, its frames counted as mapped (a frame freed meanwhile waits),
//! and every later purge tries again ([`SpaceStats::unmap_failures`],
//! [`SpaceStats::stuck_ranges`]). A map that fails half way is undone, or
//! recorded the same way. [`Vm::check_mappings`] (run by [`Vm::check`] in
//! debug builds) compares `/proc/self/maps` with the page table.
//!
//! ## The mapping budget
//! The kernel allows a process `/proc/sys/vm/max_map_count` mappings
//! (VMAs, 65,530 by default). Each run of consecutive frames mapped costs
//! up to two, and is charged before its `mmap`; 64 more are kept free so
//! that an unmapping can always split one. A request that would pass the
//! budget ([`VmConfig::max_maps`]; by default the kernel's limit less what
//! the process holds less an eighth) purges, retries, then fails with
//! [`VmError::MapLimit`]; `ENOMEM` from `mmap` purges and retries too. At
//! the default budget about 28,600 live areas fit when frames are
//! unfragmented, but only about 28,600 *pages* in all when every other
//! frame is free (each page its own run). The repository's
//! `docs/mmkit-vm.md` has the numbers and each refusal's outcome.
//!
//! ## Safety
//! This is the only mmkit crate with `unsafe`: the system calls in `sys`,
//! and the slices that [`VBuf`] and [`MirrorRing`] make of their areas.
//! Every block states why it is sound. Addresses handed out by [`Vm`] are
//! plain `u64`s: dereferencing one needs the caller's own `unsafe`, and an
//! area that a handle owns cannot be freed by address.
//!
//! ## Example
//! ```
//! use mmkit_vm::{VBuf, Vm, VmConfig};
//!
//! let vm = Vm::new(VmConfig { phys_limit: 256 << 20, ..VmConfig::default() })?;
//! let mut buf = VBuf::new(&vm, 1 << 20)?;     // 1 MiB, virtually contiguous
//! buf.fill(1);
//! buf.resize(8 << 20)?;                       // grows without copying
//! assert_eq!(buf[0], 1);
//! drop(buf);                                  // lazily unmapped
//! vm.purge();                                 // one batched unmap
//! vm.check()?;
//! vm.check_mappings()?;                       // the kernel agrees
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Platforms
//! Linux only (memfd, `MAP_FIXED` over a reservation, `sched_getcpu`).
//! Elsewhere the crate builds empty and [`SUPPORTED`] is `false`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

/// Whether this platform is supported (Linux).
pub const SUPPORTED: bool = cfg!(target_os = "linux");

#[cfg(target_os = "linux")]
mod budget;
#[cfg(target_os = "linux")]
mod error;
#[cfg(target_os = "linux")]
#[cfg(target_os = "linux")]
mod phys;
#[cfg(target_os = "linux")]
mod ring;
#[cfg(target_os = "linux")]
mod space;
#[cfg(target_os = "linux")]
mod sync;
#[cfg(target_os = "linux")]
mod sys;
#[cfg(target_os = "linux")]
mod vbuf;
#[cfg(target_os = "linux")]
mod vm;

#[cfg(target_os = "linux")]
pub use error::VmError;
#[cfg(target_os = "linux")]
pub use phys::PhysStats;
#[cfg(target_os = "linux")]
pub use ring::MirrorRing;
#[cfg(target_os = "linux")]
pub use space::SpaceStats;
#[cfg(target_os = "linux")]
pub use vbuf::VBuf;
#[cfg(target_os = "linux")]
pub use vm::{Vm, VmConfig, VmStats};
