//! The virtual space: one address-space reservation managed by
//! [`mmkit::vmap::VmapAllocator`] through the shared vmalloc layer
//! ([`mmkit_vmalloc::Vmalloc`]), which keeps the areas, the lazy list, the
//! stuck list and the purge; this module is the machine under it (the
//! memfd, `mmap`, the mapping budget, frame ownership) and what only user
//! space has: mirror areas, in-place growth, handles (seeds 000 and 002).
//!
//! ```text
//!  reservation [base ................................................ end)
//!  vmap        |area|g|   |block (vm_map_ram)|  |area|g|  |lazy area|g|
//!              g = guard page, never mapped: an overrun faults
//!  layer       areas: start -> Area { frames, pages, pieces }   live
//!              lazy:  Retired { start, span, Gone::Area/Block } freed, mapped
//!              stuck: Retired { .. }                            unmapping refused
//!  MemfdMmu    cleared: the ranges of lazy and stuck, still mapped
//! ```
//!
//! A freed area stays mapped and allocated in the vmap allocator until a
//! purge: the layer's `clear` only records its range ([`mmu::MemfdMmu`]),
//! and the purge's one flush unmaps every recorded range with one system
//! call per run of adjacent ones; then, under the same lock, the layer frees
//! the ranges and this module gives the frames and mapping budget back. So
//! an address is never reused while a stale mapping (the kernel's stale TLB
//! entry) could still reach old frames. The purge holds the space's lock
//! through its system calls (the kernel serialises them on the process's
//! `mmap` lock anyway), so a free never races a flush that covers it.
//! Purges run when the lazily freed bytes exceed `lazy_max`, when an
//! allocation finds no space, no memory or no mapping budget (then the
//! allocation is retried once), and on request.
//!
//! With `lazy_unmap` off every free unmaps at once: the design before 2008,
//! kept as the experiments' baseline.
//!
//! No mapping is forgotten. A range whose unmapping the kernel refuses
//! (`ENOMEM` when it would have to split a mapping at the process's limit)
//! moves to the *stuck* list with everything it holds: its frames keep
//! their map counts (so they are not reused), its addresses stay allocated,
//! and every later purge tries it again. A map that fails half way is
//! undone the same way: what was mapped is unmapped, or kept as stuck.
//! Every run mapped is charged to the mapping budget (`crate::budget`)
//! before its `mmap`; a refused charge, like `ENOMEM` from `mmap`, purges
//! and retries once.

use std::sync::atomic::Ordering;

use mmkit::error::{AllocError, CheckError, FreeError};
use mmkit::range::{FlushHook, RangeAllocator, RangeStats};
use mmkit::vmap::VmapAllocator;
use mmkit_vmalloc::{AreaData, Flush, Gone, Mmu, Outcome, Vmalloc};

use crate::budget::{runs_of, MapBudget};
use crate::error::VmError;
use crate::map_ram::Records;
use crate::phys::{Block, Phys};
use crate::sync::{lock, AtomicU64, Mutex, MutexGuard};
use crate::sys::Reservation;

mod check;
mod mmu;
mod purge;
mod realloc;
#[cfg(test)]
mod tests;

use mmu::MemfdMmu;
use purge::Counters;
pub use purge::SpaceStats;

/// A live area: `[start, start + span)` in the vmap allocator, its first
/// `pages` pages mapped, then at least one guard page.
#[derive(Debug)]
pub(crate) struct Area {
    /// Bytes the caller asked for.
    pub(crate) len: u64,
    /// Pages mapped (once; twice over for a mirror).
    pub(crate) pages: u64,
    /// Bytes reserved, guard included, over every piece.
    pub(crate) span: u64,
    /// Further vmap areas that continue this one (in-place growth).
    pub(crate) pieces: Vec<u64>,
    /// The frames mapped, in address order.
    pub(crate) frames: Vec<Block>,
    /// Whether the frames go back to the buddy with the area (vmalloc,
    /// mirror) or belong to the caller (vmap).
    pub(crate) owns_frames: bool,
    /// Freed by dropping a handle only.
    pub(crate) handle: bool,
    /// The frames are mapped twice, back to back.
    pub(crate) mirror: bool,
    /// Runs of consecutive frames mapped (one `mmap` each), every copy.
    pub(crate) runs: u64,
    /// Bytes per page.
    pub(crate) page: u64,
}

impl Area {
    fn maps_per_frame(&self) -> u64 {
        1 + u64::from(self.mirror)
    }

    /// The frames of a half-done map (`frames`, mapped once in `runs`
    /// runs), kept only to be taken down: they go back to nobody.
    fn partial(span: u64, frames: Vec<Block>, runs: u64, page: u64) -> Self {
        let pages = frames.iter().map(|b| b.pages()).sum();
        Area {
            len: pages * page,
            pages,
            span,
            pieces: Vec::new(),
            frames,
            owns_frames: false,
            handle: false,
            mirror: false,
            runs,
            page,
        }
    }
}

impl AreaData for Area {
    fn span(&self) -> u64 {
        self.span
    }

    fn pieces(&self) -> &[u64] {
        &self.pieces
    }

    fn frame_at(&self, off: u64) -> Option<u64> {
        let page = off / self.page;
        if page >= self.pages * self.maps_per_frame() {
            return None;
        }
        let mut left = page % self.pages;
        for b in &self.frames {
            if left < b.pages() {
                return Some(b.pfn + left);
            }
            left -= b.pages();
        }
        None
    }

    fn mapped_pages(&self) -> u64 {
        self.pages * self.maps_per_frame() * (self.page / mmkit_vmalloc::PAGE)
    }
}

/// A map that failed: the error, and how far it got (the first `blocks`
/// blocks are mapped, in `runs` runs, and charged).
#[derive(Debug)]
pub(crate) struct Partial {
    pub(crate) err: VmError,
    pub(crate) blocks: usize,
    pub(crate) runs: u64,
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

/// The shared layer (areas, blocks, lazy and stuck lists over the vmap
/// allocator), and the ranges its MMU has been asked to clear.
struct State {
    layer: Vmalloc<VmapAllocator, Area>,
    cleared: Vec<(u64, u64)>,
}

impl State {
    /// The layer with its MMU.
    fn split<'a>(
        &'a mut self,
        space: &'a Space,
    ) -> (&'a mut Vmalloc<VmapAllocator, Area>, MemfdMmu<'a>) {
        let mmu = MemfdMmu {
            space,
            cleared: &mut self.cleared,
        };
        (&mut self.layer, mmu)
    }
}

/// The reservation, the physical memory, and everything mapped (see the
/// module docs).
pub(crate) struct Space {
    pub(crate) res: Reservation,
    pub(crate) phys: Phys,
    pub(crate) records: Records,
    pub(crate) budget: MapBudget,
    pub(crate) page: u64,
    state: Mutex<State>,
    /// Serialises purges, so a purge-and-retry waits for a purge in flight.
    purge_lock: Mutex<()>,
    /// Purges finished (bumped under `purge_lock`): an allocation that
    /// failed retries when one finished after its attempt, even if its own
    /// purge found the lazy list already taken.
    purges_done: AtomicU64,
    counters: Counters,
}

/// How a [`Space`] is set up.
pub(crate) struct SpaceParts {
    pub(crate) res: Reservation,
    pub(crate) phys: Phys,
    pub(crate) records: Records,
    pub(crate) page: u64,
    pub(crate) lazy_max: u64,
    pub(crate) lazy_unmap: bool,
    pub(crate) max_maps: u64,
}

impl Space {
    pub(crate) fn new(p: SpaceParts) -> Result<Self, VmError> {
        let vmap = VmapAllocator::new(p.res.base(), p.res.base() + p.res.len())
            .map_err(|_| VmError::Invalid("empty virtual space"))?;
        Ok(Space {
            res: p.res,
            phys: p.phys,
            records: p.records,
            budget: MapBudget::new(p.max_maps),
            page: p.page,
            state: Mutex::new(State {
                layer: Vmalloc::new(vmap, policy(p.lazy_unmap, p.lazy_max)),
                cleared: Vec::new(),
            }),
            purge_lock: Mutex::new(()),
            purges_done: AtomicU64::new(0),
            counters: Counters::default(),
        })
    }

    /// Pages for `len` bytes (at least one), and the span with a guard page.
    /// The `mmap` and unmapping calls made so far.
    #[cfg(test)]
    fn stats_calls(&self) -> (u64, u64) {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        (load(&c.map_calls), load(&c.unmap_calls))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    pub(crate) fn pages_for(&self, len: u64) -> Result<(u64, u64), VmError> {
        if len == 0 {
            return Err(VmError::Invalid("size 0"));
        }
        let pages = len.div_ceil(self.page);
        let span = pages
            .checked_add(1)
            .and_then(|p| p.checked_mul(self.page))
            .ok_or(VmError::Invalid("size overflows"))?;
        Ok((pages, span))
    }

    // -----------------------------------------------------------------
    // Address space
    // -----------------------------------------------------------------

    /// Allocates `[a, a + size)` in the window, purging once and retrying
    /// when nothing fits.
    pub(crate) fn alloc_va(
        &self,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
    ) -> Result<u64, AllocError> {
        self.with_purge_retry(
            |e| *e == AllocError::NoSpace,
            || self.state().layer.reserve(size, align, (lo, hi)),
        )
    }

    /// Runs `attempt`; when it fails with an error `retry_on` accepts,
    /// purges and tries once more if any purge finished since the attempt
    /// began. Counting finished purges, rather than asking whether this
    /// thread's purge found anything, matters when another thread's purge
    /// is in flight: it took the lazy list, so ours finds it empty, but the
    /// space it frees is there once ours has waited for it.
    pub(crate) fn with_purge_retry<T, E>(
        &self,
        retry_on: impl Fn(&E) -> bool,
        mut attempt: impl FnMut() -> Result<T, E>,
    ) -> Result<T, E> {
        let before = self.purges_done.load(Ordering::Acquire);
        match attempt() {
            Err(e) if retry_on(&e) => {
                self.purge();
                if self.purges_done.load(Ordering::Acquire) == before {
                    return Err(e);
                }
                attempt()
            }
            r => r,
        }
    }

    /// [`alloc_va`](Self::alloc_va) anywhere, aligned to `align` (a power
    /// of two, at least a page), as a `VmError`.
    fn alloc_span(&self, span: u64, align: u64) -> Result<u64, VmError> {
        let (lo, hi) = (self.res.base(), self.res.base() + self.res.len());
        self.alloc_va(span, align.max(self.page), lo, hi)
            .map_err(|_| VmError::NoVirtualSpace { size: span })
    }

    /// Frames for `pages` pages, purging once and retrying when the memory
    /// limit is reached (lazily freed areas hold frames).
    fn alloc_frames(&self, pages: u64, out: &mut Vec<Block>) -> Result<(), VmError> {
        self.with_purge_retry(
            |e| matches!(e, VmError::LimitReached { .. }),
            || self.phys.alloc_pages(pages, out),
        )
    }

    /// Maps `frames` in order from `addr`, one `mmap` per run of
    /// consecutive frames, after charging the runs to the budget. Returns
    /// the runs. On failure the runs not mapped are credited back and the
    /// caller undoes the ones that were ([`Partial`]).
    pub(crate) fn map_frames(&self, addr: u64, frames: &[Block]) -> Result<u64, Partial> {
        let total = runs_of(frames.iter().map(|b| (b.pfn, b.pages())));
        if let Err(err) = self.budget.charge(total) {
            let (blocks, runs) = (0, 0);
            return Err(Partial { err, blocks, runs });
        }
        let (mut off, mut i, mut runs) = (0, 0, 0);
        while i < frames.len() {
            let first = i;
            let (pfn, mut n) = (frames[i].pfn, frames[i].pages());
            i += 1;
            while i < frames.len() && frames[i].pfn == pfn + n {
                n += frames[i].pages();
                i += 1;
            }
            let at = addr + off * self.page;
            let r = self
                .res
                .map(at, n * self.page, &self.phys.mem, self.phys.offset(pfn));
            if let Err(e) = r {
                self.budget.credit(total - runs);
                let err = VmError::os("mmap", e);
                return Err(Partial {
                    err,
                    blocks: first,
                    runs,
                });
            }
            self.counters.map_calls.fetch_add(1, Ordering::Relaxed);
            self.phys.mapped(pfn, n);
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

    /// Undoes a map that failed half way: `mapped` (the frames mapped from
    /// `start` on, in `runs` runs) is unmapped with `[start, start + span)`
    /// and the range freed, or all of it kept on the stuck list.
    fn undo(&self, start: u64, span: u64, mapped: Vec<Block>, runs: u64) {
        if runs == 0 {
            self.free_va(&[start]);
            return;
        }
        self.retire(start, Area::partial(span, mapped, runs, self.page), true);
    }

    /// Retires `area` at `start` through the layer (see
    /// [`Vmalloc::retire`]): lazily, or at once with `now`; then frees what
    /// that released and purges when the lazy list is full.
    fn retire(&self, start: u64, area: Area, now: bool) {
        let span = area.span;
        let mut st = self.state();
        let (layer, mut mmu) = st.split(self);
        match layer.retire(&mut mmu, start, span, Gone::Area(area), now) {
            Ok(out) => self.settled(st, out),
            Err(e) => debug_assert!(false, "retiring our own range {start:#x}: {e}"),
        }
    }

    /// Frees what a retirement released, before the lock `st` lets its
    /// ranges be handed out again (a block's records must be gone first);
    /// then purges when the lazy list is full.
    fn settled(&self, st: MutexGuard<'_, State>, out: Outcome<Area>) {
        self.dispose(out.released);
        drop(st);
        if out.purge_due {
            self.purge();
        }
    }

    // -----------------------------------------------------------------
    // Areas: vmalloc, vmap, mirror
    // -----------------------------------------------------------------

    /// Reserves a span aligned to `align` for `len` bytes (twice over for a
    /// mirror), takes frames (or maps the caller's `user` frames), maps
    /// them and records the area. A refused mapping purges and retries.
    pub(crate) fn create_area(
        &self,
        len: u64,
        align: u64,
        user: Option<&[Block]>,
        mirror: bool,
        handle: bool,
    ) -> Result<u64, VmError> {
        self.with_purge_retry(is_map_refusal, || {
            self.try_create_area(len, align, user, mirror, handle)
        })
    }

    fn try_create_area(
        &self,
        len: u64,
        align: u64,
        user: Option<&[Block]>,
        mirror: bool,
        handle: bool,
    ) -> Result<u64, VmError> {
        let (pages, _) = self.pages_for(len)?;
        let mapped = if mirror {
            pages.checked_mul(2)
        } else {
            Some(pages)
        };
        let (_, span) = self.pages_for(
            mapped
                .and_then(|p| p.checked_mul(self.page))
                .ok_or(VmError::Invalid("size overflows"))?,
        )?;
        let addr = self.alloc_span(span, align)?;
        let owns_frames = user.is_none();
        let frames = match user {
            Some(f) => f.to_vec(),
            None => {
                let mut f = Vec::new();
                if let Err(e) = self.alloc_frames(pages, &mut f) {
                    self.free_va(&[addr]);
                    return Err(e);
                }
                f
            }
        };
        let mut runs = 0;
        let mut failed = None;
        for copy in 0..1 + u64::from(mirror) {
            match self.map_frames(addr + copy * pages * self.page, &frames) {
                Ok(r) => runs += r,
                Err(p) => {
                    failed = Some((copy, p));
                    break;
                }
            }
        }
        if let Some((copy, p)) = failed {
            let mut mapped = Vec::new();
            for _ in 0..copy {
                mapped.extend_from_slice(&frames);
            }
            mapped.extend_from_slice(&frames[..p.blocks]);
            self.undo(addr, span, mapped, runs + p.runs);
            if owns_frames {
                self.phys.release(&frames);
            }
            return Err(p.err);
        }
        let area = Area {
            len,
            pages,
            span,
            pieces: Vec::new(),
            frames,
            owns_frames,
            handle,
            mirror,
            runs,
            page: self.page,
        };
        let recorded = self.state().layer.insert(addr, area);
        debug_assert!(recorded.is_ok(), "our reserved range {addr:#x}");
        Ok(addr)
    }

    fn free_va(&self, starts: &[u64]) {
        let mut st = self.state();
        for &a in starts {
            let freed = st.layer.unreserve(a);
            debug_assert!(freed.is_ok(), "freeing our own range {a:#x}");
        }
    }

    /// The requested length of the live area at `addr`.
    pub(crate) fn area_len(&self, addr: u64) -> Option<u64> {
        self.state().layer.area(addr).map(|a| a.len)
    }

    /// Frees the area at `addr`: lazily (unmapped by a later purge) or, with
    /// `lazy_unmap` off, at once. `owns` says whether a vmalloc area
    /// (frames owned) or a vmap area (the caller's frames) is expected,
    /// `by_handle` that the caller is its handle.
    pub(crate) fn free_area(&self, addr: u64, owns: bool, by_handle: bool) -> Result<(), VmError> {
        let mut st = self.state();
        match st.layer.area(addr) {
            Some(a) if a.owns_frames != owns => return Err(VmError::NotAllocated { addr }),
            Some(a) if a.handle && !by_handle => return Err(VmError::OwnedByHandle { addr }),
            Some(_) => {}
            None => return Err(VmError::NotAllocated { addr }),
        }
        let (layer, mut mmu) = st.split(self);
        if let Some(area) = layer.take(addr) {
            let span = area.span;
            match layer.retire(&mut mmu, addr, span, Gone::Area(area), false) {
                Ok(out) => self.settled(st, out),
                Err(e) => debug_assert!(false, "retiring our own area {addr:#x}: {e}"),
            }
        }
        Ok(())
    }

    // -----------------------------------------------------------------
    // Blocks of the per-CPU front end
    // -----------------------------------------------------------------

    fn block_alloc(&self, size: u64, align: u64, lo: u64, hi: u64) -> Result<u64, AllocError> {
        self.with_purge_retry(
            |e| *e == AllocError::NoSpace,
            || self.state().layer.reserve_block(size, align, (lo, hi)),
        )
    }

    /// Frees a block of the front end: its whole range is cleared (its
    /// live and stale `vm_map_ram` pages go with the flush), then freed
    /// through the layer.
    fn block_free(&self, addr: u64, lazy: bool) -> Result<u64, FreeError> {
        let mut st = self.state();
        let (layer, mut mmu) = st.split(self);
        let size = layer.block_size(addr).ok_or(FreeError::NotAllocated)?;
        mmu.clear(addr, size / mmkit_vmalloc::PAGE);
        let (size, out) = layer
            .free_block(&mut mmu, addr, !lazy)
            .map_err(|_| FreeError::NotAllocated)?;
        self.settled(st, out);
        Ok(size)
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

/// The layer's flush policy: lazy below `lazy_max` bytes, or eager.
fn policy(lazy_unmap: bool, lazy_max: u64) -> Flush {
    if lazy_unmap {
        Flush::Lazy {
            max_bytes: lazy_max,
        }
    } else {
        Flush::Eager
    }
}

/// The space as a [`RangeAllocator`] for the per-CPU front end
/// ([`mmkit::vblock::ConcurrentVblock`]): a block is a range of the same
/// vmap allocator that vmalloc uses, and a released block joins the same
/// lazy list, so one purge unmaps both.
pub(crate) struct SpaceRange(pub(crate) std::sync::Arc<Space>);

impl RangeAllocator for SpaceRange {
    fn space(&self) -> (u64, u64) {
        let r = &self.0.res;
        (r.base(), r.base() + r.len())
    }

    fn alloc_in(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Result<u64, AllocError> {
        self.0.block_alloc(size, align, lo, hi)
    }

    fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
        self.0.block_free(addr, false)
    }

    fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
        self.0.block_free(addr, true)
    }

    fn purge(&mut self, flush: &mut dyn FnMut(u64, u64)) -> bool {
        self.0.purge().map(|(lo, hi)| flush(lo, hi)).is_some()
    }

    fn set_lazy_max(&mut self, bytes: u64) {
        self.0.set_lazy_max(bytes);
    }

    /// Ignored: a purge of the space unmaps for real, no hook is needed.
    fn set_flush_hook(&mut self, _hook: Option<FlushHook>) {}

    /// The vmap allocator's stats, with only the blocks counted as live.
    fn stats(&self) -> RangeStats {
        let st = self.0.state();
        let (live_areas, live_bytes) = st.layer.blocks();
        RangeStats {
            live_areas,
            live_bytes,
            ..st.layer.range().stats()
        }
    }

    fn check(&self) -> Result<(), CheckError> {
        self.0.state().layer.range().check()
    }
}
