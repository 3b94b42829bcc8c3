//! The virtual space: one address-space reservation driven by the shared
//! vmalloc driver ([`mmkit_vmalloc::Vmalloc`] over
//! [`mmkit::vmap::VmapAllocator`]). The driver owns every call sequence
//! and its failure paths (purge and retry, undo of a half-done map, the
//! lazy and stuck lists); this module is the machine under it and the
//! lock around it:
//!
//! - [`mmu::MemfdMmu`], the driver's `Mmu`: `mmap` of the memfd, its page
//!   table, the mapping budget, and a flush that unmaps;
//! - [`mmu::PhysFrames`], the driver's `FrameSource`: the memfd's buddy;
//! - what only user space has: mirror areas (a `vmap` of the frames twice),
//!   handles, the requested lengths (`Meta`).
//!
//! ```text
//!  reservation [base ................................................ end)
//!  driver      |area|g|   |block (vm_map_ram)|  |area|g|  |lazy area|g|
//!              g = guard page, never mapped: an overrun faults
//!  State       layer: the driver (areas, blocks, lazy and stuck lists)
//!              meta:  start -> requested length, handle, mirror
//!  table       every run mapped, live or cleared (the page table; its
//!              own lock, taken last)
//! ```
//!
//! The `vm_map_ram` front end is the driver's [`MapRamIn`], which reaches
//! the driver through an `Arc<Space>` ([`Lock`] for the space's lock) and
//! calls the MMU outside that lock.
//!
//! A freed area stays mapped, and its range and frames unused, until the
//! driver's flush: `clear` only records its range, and the flush unmaps
//! every recorded range with one system call per run of adjacent ones.
//! Frames go back after that flush ([`FramePolicy::AfterFlush`]), so an
//! address is never reused, nor a frame, while a stale mapping (the
//! kernel's stale TLB entry) could still reach it. Every call runs under
//! the space's one lock, as the driver asks, system calls included (the
//! kernel serialises them on the process's `mmap` lock anyway).
//!
//! With `lazy_unmap` off every free unmaps at once (the driver's eager
//! policy): the design before 2008, kept as the experiments' baseline.

use std::sync::atomic::Ordering;

use std::sync::Arc;

use mmkit::range::RangeStats;
use mmkit::vmap::VmapAllocator;
use mmkit_vmalloc::{
    frame_runs, Flush, FramePolicy, FrameSource, Lock, MapRamIn, Queue, VmError as LayerError,
    Vmalloc,
};

use crate::budget::MapBudget;
use crate::error::VmError;
use crate::phys::Phys;
use crate::sync::{lock, HashMap, Mutex, MutexGuard};
use crate::sys::Reservation;

mod check;
mod mmu;
mod stats;
#[cfg(test)]
mod tests;

use mmu::Table;
pub(crate) use mmu::{MemfdMmu, PhysFrames};
use stats::Counters;
pub use stats::SpaceStats;

/// What the driver's `Area` does not know of a live area.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    /// Bytes the caller asked for.
    pub(crate) len: u64,
    /// Freed by dropping a handle only.
    pub(crate) handle: bool,
    /// Its frames are mapped twice, back to back (a `vmap` of them).
    pub(crate) mirror: bool,
}

/// What an area is made of.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind<'a> {
    /// Frames from the buddy (`vmalloc`).
    Vmalloc,
    /// The caller's frames (`vmap`), pinned by the caller.
    Vmap(&'a [u64]),
    /// Frames from the buddy, mapped twice.
    Mirror,
}

/// A map that failed: why, and how far it got (pages mapped).
#[derive(Debug)]
pub(crate) struct Partial {
    pub(crate) err: VmError,
    pub(crate) pages: u64,
}

/// Whether `e` is a refused mapping: the budget, or the kernel's `ENOMEM`.
pub(crate) fn is_map_refusal(e: &VmError) -> bool {
    let enomem = rustix::io::Errno::NOMEM.raw_os_error();
    match e {
        VmError::MapLimit { .. } => true,
        VmError::Os { op, errno } => *op == "mmap" && *errno == enomem,
        _ => false,
    }
}

/// Everything the space's lock guards.
pub(crate) struct State {
    pub(crate) layer: Vmalloc<VmapAllocator>,
    pub(crate) meta: HashMap<u64, Meta>,
}

/// The driver under the space's lock, for the `vm_map_ram` front end.
pub(crate) struct LayerGuard<'a>(MutexGuard<'a, State>);

impl std::ops::Deref for LayerGuard<'_> {
    type Target = Vmalloc<VmapAllocator>;
    fn deref(&self) -> &Self::Target {
        &self.0.layer
    }
}

impl std::ops::DerefMut for LayerGuard<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0.layer
    }
}

impl Lock for Space {
    type Data = Vmalloc<VmapAllocator>;
    type Guard<'a> = LayerGuard<'a>;

    fn lock(&self) -> LayerGuard<'_> {
        LayerGuard(self.state())
    }
}

/// A lock of this crate's kind (loom's under `--cfg loom`) around one
/// CPU's `vm_map_ram` queue.
pub(crate) struct QueueLock<T>(Mutex<T>);

impl<T> From<T> for QueueLock<T> {
    fn from(t: T) -> Self {
        QueueLock(Mutex::new(t))
    }
}

impl<T> Lock for QueueLock<T> {
    type Data = T;
    type Guard<'a>
        = MutexGuard<'a, T>
    where
        T: 'a;

    fn lock(&self) -> MutexGuard<'_, T> {
        lock(&self.0)
    }
}

/// The driver's `vm_map_ram` front end over a space.
pub(crate) type MapRam =
    MapRamIn<VmapAllocator, Arc<Space>, QueueLock<Queue<VmapAllocator, Arc<Space>>>>;

/// The driver with this machine's two traits, borrowed under the lock.
pub(crate) struct Machine<'a> {
    pub(crate) layer: &'a mut Vmalloc<VmapAllocator>,
    pub(crate) meta: &'a mut HashMap<u64, Meta>,
    pub(crate) mmu: MemfdMmu<'a>,
    pub(crate) src: PhysFrames<'a>,
}

impl Machine<'_> {
    /// The crate's error for the driver's `e` at `addr`: the machine's own
    /// cause where the driver only says that the MMU or the frames failed.
    fn error(&mut self, e: LayerError, addr: u64) -> VmError {
        match e {
            LayerError::MapFailed { .. } => self.mmu.err.take().unwrap_or(VmError::Os {
                op: "mmap",
                errno: rustix::io::Errno::NOMEM.raw_os_error(),
            }),
            LayerError::NoFrames { .. } => self.src.err.take().unwrap_or(VmError::LimitReached {
                limit: self.src.phys.limit(),
            }),
            LayerError::NoSpace { bytes } => VmError::NoVirtualSpace { size: bytes },
            LayerError::Empty => VmError::Invalid("size 0"),
            LayerError::TooLarge { .. } => VmError::Invalid("size overflows"),
            LayerError::BadAlign { .. } => VmError::Invalid("alignment is not a power of two"),
            LayerError::PlacementRefused => {
                VmError::Invalid("request rejected by the range allocator")
            }
            _ => VmError::NotAllocated { addr },
        }
    }

    /// What is recorded of the live area at `addr`, if the caller may free
    /// or resize it (`by_handle`: the caller is its handle).
    fn meta_of(&self, addr: u64, by_handle: bool) -> Result<Meta, VmError> {
        match self.meta.get(&addr) {
            Some(a) if a.handle && !by_handle => Err(VmError::OwnedByHandle { addr }),
            Some(&a) => Ok(a),
            None => Err(VmError::NotAllocated { addr }),
        }
    }

    /// Purges (one flush for the lazy and stuck lists). Returns whether
    /// anything was flushed.
    fn purge(&mut self) -> bool {
        self.layer.purge(&mut self.mmu, &mut self.src)
    }
}

/// The reservation, the physical memory, and everything mapped (see the
/// module docs).
pub(crate) struct Space {
    pub(crate) res: Reservation,
    pub(crate) phys: Phys,
    pub(crate) budget: MapBudget,
    pub(crate) page: u64,
    state: Mutex<State>,
    pub(crate) table: Mutex<Table>,
    counters: Counters,
}

/// How a [`Space`] is set up.
pub(crate) struct SpaceParts {
    pub(crate) res: Reservation,
    pub(crate) phys: Phys,
    pub(crate) page: u64,
    pub(crate) lazy_max: u64,
    pub(crate) lazy_unmap: bool,
    pub(crate) max_maps: u64,
}

impl Space {
    pub(crate) fn new(p: SpaceParts) -> Result<Self, VmError> {
        let vmap = VmapAllocator::new(p.res.base(), p.res.base() + p.res.len())
            .map_err(|_| VmError::Invalid("empty virtual space"))?;
        let flush = policy(p.lazy_unmap, p.lazy_max);
        Ok(Space {
            res: p.res,
            phys: p.phys,
            budget: MapBudget::new(p.max_maps),
            page: p.page,
            state: Mutex::new(State {
                layer: Vmalloc::with_frames(vmap, flush, FramePolicy::AfterFlush),
                meta: HashMap::default(),
            }),
            table: Mutex::new(Table::default()),
            counters: Counters::default(),
        })
    }

    /// The `mmap` and unmapping calls made so far.
    #[cfg(test)]
    fn stats_calls(&self) -> (u64, u64) {
        let c = &self.counters;
        let load = |a: &crate::sync::AtomicU64| a.load(Ordering::Relaxed);
        (load(&c.map_calls), load(&c.unmap_calls))
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Runs `f` on the driver and this machine, under the lock.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut Machine<'_>) -> T) -> T {
        let mut st = self.state();
        let st = &mut *st;
        let mut m = Machine {
            layer: &mut st.layer,
            meta: &mut st.meta,
            mmu: MemfdMmu::new(self),
            src: PhysFrames::new(&self.phys),
        };
        f(&mut m)
    }

    pub(crate) fn pages_for(&self, len: u64) -> Result<u64, VmError> {
        if len == 0 {
            return Err(VmError::Invalid("size 0"));
        }
        Ok(len.div_ceil(self.page))
    }

    // -----------------------------------------------------------------
    // The machine's system calls
    // -----------------------------------------------------------------

    /// Maps `pfns` in order from `addr`, one `mmap` per run of consecutive
    /// frames, after charging the runs to the budget; `mapped(va, pfn, n)`
    /// hears of each run mapped. Returns the runs. On failure the runs not
    /// mapped are credited back; the caller takes down the ones that were.
    pub(crate) fn map_runs(
        &self,
        addr: u64,
        pfns: &[u64],
        mut mapped: impl FnMut(u64, u64, u64),
    ) -> Result<u64, Partial> {
        let total = frame_runs(pfns).count() as u64;
        if let Err(err) = self.budget.charge(total) {
            return Err(Partial { err, pages: 0 });
        }
        let (mut off, mut runs) = (0u64, 0);
        for (pfn, n) in frame_runs(pfns) {
            let at = addr + off * self.page;
            let r = self
                .res
                .map(at, n * self.page, &self.phys.mem, self.phys.offset(pfn));
            if let Err(e) = r {
                self.budget.credit(total - runs);
                let err = VmError::os("mmap", e);
                return Err(Partial { err, pages: off });
            }
            self.counters.map_calls.fetch_add(1, Ordering::Relaxed);
            self.phys.mapped(pfn, n);
            mapped(at, pfn, n);
            off += n;
            runs += 1;
        }
        Ok(total)
    }

    /// One unmapping system call over `[addr, addr + len)`. Returns whether
    /// the kernel did it; a refusal is counted, and the caller keeps the
    /// range (see the module docs).
    pub(crate) fn unmap_range(&self, addr: u64, len: u64) -> bool {
        self.counters.unmap_calls.fetch_add(1, Ordering::Relaxed);
        let ok = self.res.unmap(addr, len).is_ok();
        if !ok {
            self.counters.unmap_failures.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    // -----------------------------------------------------------------
    // Areas: vmalloc, vmap, mirror
    // -----------------------------------------------------------------

    /// Makes an area of `len` bytes aligned to `align` (0: a page) through
    /// the driver, which purges and retries when space, frames or the
    /// mapping budget run out, and takes down a map that failed half way.
    pub(crate) fn create_area(
        &self,
        len: u64,
        align: u64,
        kind: Kind<'_>,
        handle: bool,
    ) -> Result<u64, VmError> {
        let pages = self.pages_for(len)?;
        let align = align.max(mmkit_vmalloc::PAGE);
        self.with(|m| {
            let made = match kind {
                Kind::Vmalloc => m.layer.vmalloc_aligned(&mut m.mmu, &mut m.src, len, align),
                Kind::Vmap(pfns) => m.layer.vmap(&mut m.mmu, &mut m.src, pfns, align),
                Kind::Mirror => self.mirror(m, pages),
            };
            let va = made.map_err(|e| m.error(e, 0))?;
            let mirror = matches!(kind, Kind::Mirror);
            m.meta.insert(
                va,
                Meta {
                    len,
                    handle,
                    mirror,
                },
            );
            Ok(va)
        })
    }

    /// A mirror: `pages` frames from the buddy (a purge and a retry when
    /// there are none), mapped twice by one `vmap`.
    fn mirror(&self, m: &mut Machine<'_>, pages: u64) -> Result<u64, LayerError> {
        let mut blocks = Vec::new();
        if let Err(e) = self.phys.alloc_pages(pages, &mut blocks) {
            m.src.err = Some(e);
            if !m.purge() {
                return Err(LayerError::NoFrames { pages });
            }
            if let Err(e) = self.phys.alloc_pages(pages, &mut blocks) {
                m.src.err = Some(e);
                return Err(LayerError::NoFrames { pages });
            }
        }
        let once = blocks.iter().flat_map(|b| b.pfn..b.pfn + b.pages());
        let twice: Vec<u64> = once.clone().chain(once).collect();
        let made = m
            .layer
            .vmap(&mut m.mmu, &mut m.src, &twice, mmkit_vmalloc::PAGE);
        if made.is_err() {
            self.phys.release(&blocks);
        }
        made
    }

    /// The requested length of the live area at `addr`.
    pub(crate) fn area_len(&self, addr: u64) -> Option<u64> {
        self.state().meta.get(&addr).map(|a| a.len)
    }

    /// Frees the area at `addr` through the driver: lazily (unmapped by a
    /// later purge) or, with `lazy_unmap` off, at once. `owns` says whether
    /// a vmalloc area (frames from the buddy) or a vmap area (the caller's
    /// frames) is expected, `by_handle` that the caller is its handle.
    pub(crate) fn free_area(&self, addr: u64, owns: bool, by_handle: bool) -> Result<(), VmError> {
        self.with(|m| {
            let meta = m.meta_of(addr, by_handle)?;
            let freed = if meta.mirror {
                let frames = m.layer.vunmap(&mut m.mmu, &mut m.src, addr);
                frames.map(|f| give_back(&mut m.src, f.as_deref().unwrap_or_default()))
            } else if owns {
                m.layer.vfree(&mut m.mmu, &mut m.src, addr)
            } else {
                // The frames stay the caller's: nothing to give back.
                m.layer.vunmap(&mut m.mmu, &mut m.src, addr).map(drop)
            };
            freed.map_err(|e| m.error(e, addr))?;
            m.meta.remove(&addr);
            Ok(())
        })
    }

    /// Resizes the vmalloc area at `addr` to `len` bytes without copying
    /// (the driver's `vrealloc`: a size its pages hold keeps the area, a
    /// larger one grows it in place when the range after it is free, and
    /// otherwise maps its frames and new ones at a new area and retires the
    /// old mapping). Returns the (possibly new) address.
    pub(crate) fn realloc(&self, addr: u64, len: u64, by_handle: bool) -> Result<u64, VmError> {
        self.pages_for(len)?;
        self.with(|m| {
            let meta = m.meta_of(addr, by_handle)?;
            let old = match m.layer.area(addr) {
                Some(a) if a.owned && !meta.mirror => a.frames.clone(),
                _ => return Err(VmError::Invalid("only vmalloc areas can be resized")),
            };
            let to = m
                .layer
                .vrealloc(&mut m.mmu, &mut m.src, addr, len)
                .map_err(|e| m.error(e, addr))?;
            if let Some(mut meta) = m.meta.remove(&addr) {
                meta.len = len;
                m.meta.insert(to, meta);
            }
            let grew = m.layer.area(to).map_or(0, |a| a.frames.len());
            if to == addr && grew > old.len() {
                let c = &self.counters.realloc_in_place;
                c.fetch_add(1, Ordering::Relaxed);
            } else if to != addr {
                let new = m.layer.area(to).map_or(&[][..], |a| &a.frames[..]);
                let kept = old.iter().zip(new).take_while(|(a, b)| a == b).count();
                let c = &self.counters;
                let copied = (old.len() - kept) as u64 * self.page;
                c.realloc_copied_bytes.fetch_add(copied, Ordering::Relaxed);
                c.remapped_pages
                    .fetch_add(old.len() as u64, Ordering::Relaxed);
                c.realloc_moved.fetch_add(1, Ordering::Relaxed);
            }
            Ok(to)
        })
    }

    /// Unmaps every lazily freed range and retries every stuck one, gives
    /// their frames back and makes their addresses reusable. Returns the
    /// span flushed, or `None` when nothing was.
    pub(crate) fn purge(&self) -> Option<(u64, u64)> {
        self.with(|m| {
            lock(&self.table).flushed = None;
            m.purge();
            lock(&self.table).flushed.take()
        })
    }

    /// Frames for the caller (`alloc_pages`), purging once and retrying
    /// when the memory limit is reached (lazily freed areas hold frames).
    pub(crate) fn alloc_user(&self, order: u8) -> Result<u64, VmError> {
        match self.phys.alloc(order, crate::phys::owner::USER) {
            Err(VmError::LimitReached { .. }) => {
                self.purge();
                self.phys.alloc(order, crate::phys::owner::USER)
            }
            r => r,
        }
    }

    pub(crate) fn set_lazy_max(&self, bytes: u64) {
        let mut st = self.state();
        let lazy = st.layer.flush_policy() != Flush::Eager;
        st.layer.set_flush_policy(policy(lazy, bytes));
    }

    pub(crate) fn vmap_stats(&self) -> RangeStats {
        self.state().layer.range().stats()
    }
}

/// Gives `frames` to the frame source, one call per run.
fn give_back(src: &mut PhysFrames<'_>, frames: &[u64]) {
    for (pfn, n) in frame_runs(frames) {
        src.free(pfn, n);
    }
}

/// The driver's flush policy: lazy below `lazy_max` bytes, or eager.
fn policy(lazy_unmap: bool, lazy_max: u64) -> Flush {
    if lazy_unmap {
        Flush::Lazy {
            max_bytes: lazy_max,
        }
    } else {
        Flush::Eager
    }
}
