//! The virtual space: one address-space reservation managed by
//! [`mmkit::vmap::VmapAllocator`], the areas mapped in it, and the lazy
//! list that batches their unmapping (seeds 000 and 002).
//!
//! ```text
//!  reservation [base ................................................ end)
//!  vmap        |area|g|   |block (vm_map_ram)|  |area|g|  |lazy area|g|
//!              g = guard page, never mapped: an overrun faults
//!  areas       start -> Area { frames, pages, pieces }       live
//!  lazy        Lazy { start, span, what }                    freed, mapped
//!  stuck       Lazy { start, span, what }                    unmapping refused
//! ```
//!
//! A freed area stays mapped and allocated in the vmap allocator until a
//! purge: the purge takes the whole lazy list, unmaps it with one system
//! call per run of adjacent areas, gives the frames back, and only then
//! frees the ranges for reuse. So an address is never reused while a stale
//! mapping (the kernel's stale TLB entry) could still reach old frames.
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

use crate::budget::{runs_of, MapBudget};
use crate::error::VmError;
use crate::map_ram::Records;
use crate::phys::{Block, Phys};
use crate::sync::{lock, AtomicU64, HashMap, Mutex};
use crate::sys::Reservation;

mod check;
mod purge;

pub use purge::SpaceStats;
use purge::{Counters, Lazy, What};

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
}

impl Area {
    fn maps_per_frame(&self) -> u64 {
        1 + u64::from(self.mirror)
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

struct State {
    vmap: VmapAllocator,
    areas: HashMap<u64, Area>,
    lazy: Vec<Lazy>,
    lazy_bytes: u64,
    lazy_max: u64,
    /// Ranges whose unmapping failed, retried by every purge.
    stuck: Vec<Lazy>,
    /// Blocks the per-CPU front end holds: (count, bytes).
    blocks: (u64, u64),
}

/// The reservation, the physical memory, and everything mapped (see the
/// module docs).
pub(crate) struct Space {
    pub(crate) res: Reservation,
    pub(crate) phys: Phys,
    pub(crate) records: Records,
    pub(crate) budget: MapBudget,
    pub(crate) page: u64,
    lazy_unmap: bool,
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
            lazy_unmap: p.lazy_unmap,
            state: Mutex::new(State {
                vmap,
                areas: HashMap::default(),
                lazy: Vec::new(),
                lazy_bytes: 0,
                lazy_max: p.lazy_max,
                stuck: Vec::new(),
                blocks: (0, 0),
            }),
            purge_lock: Mutex::new(()),
            purges_done: AtomicU64::new(0),
            counters: Counters::default(),
        })
    }

    /// Pages for `len` bytes (at least one), and the span with a guard page.
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
            || lock(&self.state).vmap.alloc_in(size, align, lo, hi),
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
    /// and the ranges `vmap` freed, or all of it kept on the stuck list.
    fn undo(&self, start: u64, span: u64, mapped: Vec<Block>, runs: u64, vmap: Vec<u64>) {
        if runs == 0 {
            self.free_va(&vmap);
            return;
        }
        let what = What::Area {
            vmap,
            frames: mapped,
            maps: 1,
            runs,
            free_frames: false,
        };
        self.teardown(vec![Lazy::new(start, span, what)]);
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
            self.undo(addr, span, mapped, runs + p.runs, vec![addr]);
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
        };
        lock(&self.state).areas.insert(addr, area);
        Ok(addr)
    }

    fn free_va(&self, starts: &[u64]) {
        let mut st = lock(&self.state);
        for &a in starts {
            let freed = st.vmap.free(a);
            debug_assert!(freed.is_ok(), "freeing our own range {a:#x}");
        }
    }

    /// The requested length of the live area at `addr`.
    pub(crate) fn area_len(&self, addr: u64) -> Option<u64> {
        lock(&self.state).areas.get(&addr).map(|a| a.len)
    }

    /// Frees the area at `addr`: lazily (unmapped by a later purge) or, with
    /// `lazy_unmap` off, at once. `owns` says whether a vmalloc area
    /// (frames owned) or a vmap area (the caller's frames) is expected,
    /// `by_handle` that the caller is its handle.
    pub(crate) fn free_area(&self, addr: u64, owns: bool, by_handle: bool) -> Result<(), VmError> {
        let mut st = lock(&self.state);
        let area = match st.areas.get(&addr) {
            Some(a) if a.owns_frames != owns => return Err(VmError::NotAllocated { addr }),
            Some(a) if a.handle && !by_handle => return Err(VmError::OwnedByHandle { addr }),
            Some(_) => st.areas.remove(&addr),
            None => return Err(VmError::NotAllocated { addr }),
        };
        drop(st);
        if let Some(area) = area {
            self.retire(addr, area, owns);
        }
        Ok(())
    }

    /// Retires the mapping of `area` at `addr`: onto the lazy list or torn
    /// down now. `free_frames` gives its frames back afterwards.
    fn retire(&self, addr: u64, area: Area, free_frames: bool) {
        let mut vmap = vec![addr];
        vmap.extend_from_slice(&area.pieces);
        let what = What::Area {
            vmap,
            maps: area.maps_per_frame(),
            frames: area.frames,
            runs: area.runs,
            free_frames,
        };
        self.retire_lazy(Lazy::new(addr, area.span, what));
    }

    fn retire_lazy(&self, lazy: Lazy) {
        if !self.lazy_unmap {
            self.teardown(vec![lazy]);
            return;
        }
        let mut st = lock(&self.state);
        st.lazy_bytes += lazy.span;
        st.lazy.push(lazy);
        let over = st.lazy_bytes > st.lazy_max;
        drop(st);
        if over {
            self.purge();
        }
    }

    /// Grows or shrinks the area at `addr` to `len` bytes without copying:
    /// in place when the range after it is free, otherwise by mapping its
    /// frames into a new area. Returns the (possibly new) address. A
    /// refused mapping purges and retries.
    pub(crate) fn realloc(&self, addr: u64, len: u64, by_handle: bool) -> Result<u64, VmError> {
        self.with_purge_retry(is_map_refusal, || self.try_realloc(addr, len, by_handle))
    }

    fn try_realloc(&self, addr: u64, len: u64, by_handle: bool) -> Result<u64, VmError> {
        let (pages, _) = self.pages_for(len)?;
        let mut st = lock(&self.state);
        let mut area = match st.areas.get_mut(&addr) {
            None => return Err(VmError::NotAllocated { addr }),
            Some(a) if a.handle && !by_handle => return Err(VmError::OwnedByHandle { addr }),
            Some(a) if !a.owns_frames || a.mirror => {
                return Err(VmError::Invalid("only vmalloc areas can be resized"))
            }
            Some(a) if pages <= a.pages => {
                a.len = len;
                return Ok(addr);
            }
            Some(_) => match st.areas.remove(&addr) {
                Some(a) => a,
                None => return Err(VmError::NotAllocated { addr }),
            },
        };
        let extra = pages - area.pages;
        let grow = extra * self.page;
        let end = addr + area.span;
        let in_place = end
            .checked_add(grow)
            .and_then(|hi| st.vmap.alloc_in(grow, self.page, end, hi).ok());
        drop(st);
        let result = match in_place {
            Some(piece) => self.grow_in_place(addr, &mut area, piece, extra),
            None => self.move_area(addr, &mut area, pages),
        };
        let at = *result.as_ref().unwrap_or(&addr);
        if result.is_ok() {
            area.len = len;
        }
        lock(&self.state).areas.insert(at, area);
        result
    }

    /// Maps `extra` more pages after the area, in the range `piece` just
    /// allocated after its guard. When the map fails half way, the pages
    /// it did map join the area (which then has more pages than its length
    /// needs, as after a shrink): nothing is left to undo.
    fn grow_in_place(
        &self,
        addr: u64,
        area: &mut Area,
        piece: u64,
        extra: u64,
    ) -> Result<u64, VmError> {
        let mut more = Vec::new();
        if let Err(e) = self.alloc_frames(extra, &mut more) {
            self.free_va(&[piece]);
            return Err(e);
        }
        let (done, result) = match self.map_frames(addr + area.pages * self.page, &more) {
            Ok(runs) => (more.len(), Ok(runs)),
            Err(p) => (p.blocks, Err(p)),
        };
        let runs = match &result {
            Ok(r) => *r,
            Err(p) => p.runs,
        };
        if runs == 0 {
            self.phys.release(&more);
            self.free_va(&[piece]);
            return Err(result
                .err()
                .map_or(VmError::Invalid("empty growth"), |p| p.err));
        }
        self.phys.release(&more[done..]);
        more.truncate(done);
        area.pieces.push(piece);
        area.span += extra * self.page;
        area.pages += more.iter().map(|b| b.pages()).sum::<u64>();
        area.frames.extend(more);
        area.runs += runs;
        result.map_err(|p| p.err)?;
        self.counters
            .realloc_in_place
            .fetch_add(1, Ordering::Relaxed);
        Ok(addr)
    }

    fn move_area(&self, addr: u64, area: &mut Area, pages: u64) -> Result<u64, VmError> {
        let (_, span) = self.pages_for(pages * self.page)?;
        let to = self.alloc_span(span, self.page)?;
        let mut more = Vec::new();
        if let Err(e) = self.alloc_frames(pages - area.pages, &mut more) {
            self.free_va(&[to]);
            return Err(e);
        }
        let kept = match self.map_frames(to, &area.frames) {
            Ok(r) => r,
            Err(p) => {
                self.undo(to, span, area.frames[..p.blocks].to_vec(), p.runs, vec![to]);
                self.phys.release(&more);
                return Err(p.err);
            }
        };
        let added = match self.map_frames(to + area.pages * self.page, &more) {
            Ok(r) => r,
            Err(p) => {
                let mut mapped = area.frames.clone();
                mapped.extend_from_slice(&more[..p.blocks]);
                self.undo(to, span, mapped, kept + p.runs, vec![to]);
                self.phys.release(&more);
                return Err(p.err);
            }
        };
        // The old mapping is retired like a freed area, keeping its frames.
        let old = Area {
            len: area.len,
            pages: area.pages,
            span: area.span,
            pieces: std::mem::take(&mut area.pieces),
            frames: area.frames.clone(),
            owns_frames: false,
            handle: false,
            mirror: false,
            runs: area.runs,
        };
        area.span = span;
        area.pages = pages;
        area.frames.extend(more);
        area.runs = kept + added;
        let copied = self.moved_bytes(&old.frames, &area.frames);
        self.counters
            .realloc_copied_bytes
            .fetch_add(copied, Ordering::Relaxed);
        self.counters
            .remapped_pages
            .fetch_add(old.pages, Ordering::Relaxed);
        self.counters.realloc_moved.fetch_add(1, Ordering::Relaxed);
        self.retire(addr, old, false);
        Ok(to)
    }

    /// Bytes of the old area whose page is not in the same frame in the
    /// new one (both lists in address order): what a move had to copy.
    fn moved_bytes(&self, old: &[Block], new: &[Block]) -> u64 {
        let kept: u64 = old
            .iter()
            .zip(new)
            .take_while(|(a, b)| a == b)
            .map(|(a, _)| a.pages())
            .sum();
        let total: u64 = old.iter().map(|b| b.pages()).sum();
        (total - kept) * self.page
    }

    // -----------------------------------------------------------------
    // Blocks of the per-CPU front end
    // -----------------------------------------------------------------

    fn block_alloc(&self, size: u64, align: u64, lo: u64, hi: u64) -> Result<u64, AllocError> {
        let a = self.alloc_va(size, align, lo, hi)?;
        let mut st = lock(&self.state);
        st.blocks.0 += 1;
        st.blocks.1 += size;
        Ok(a)
    }

    fn block_free(&self, addr: u64, lazy: bool) -> Result<u64, FreeError> {
        let mut st = lock(&self.state);
        let listed = |l: &Lazy| l.start == addr;
        let is_area = st.areas.contains_key(&addr)
            || st.lazy.iter().any(listed)
            || st.stuck.iter().any(listed);
        let size = match st.vmap.area_size(addr) {
            Some(s) if !is_area => s,
            _ => return Err(FreeError::NotAllocated),
        };
        st.blocks.0 -= 1;
        st.blocks.1 -= size;
        drop(st);
        let block = Lazy::new(addr, size, What::Block);
        if lazy {
            self.retire_lazy(block);
        } else {
            self.teardown(vec![block]);
        }
        Ok(size)
    }

    pub(crate) fn set_lazy_max(&self, bytes: u64) {
        lock(&self.state).lazy_max = bytes;
    }

    pub(crate) fn vmap_stats(&self) -> RangeStats {
        lock(&self.state).vmap.stats()
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
        let st = lock(&self.0.state);
        RangeStats {
            live_areas: st.blocks.0,
            live_bytes: st.blocks.1,
            ..st.vmap.stats()
        }
    }

    fn check(&self) -> Result<(), CheckError> {
        lock(&self.0.state).vmap.check()
    }
}
