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
//! ```
//!
//! A freed area stays mapped and allocated in the vmap allocator until a
//! purge: the purge takes the whole lazy list, unmaps it with one system
//! call per run of adjacent areas, gives the frames back, and only then
//! frees the ranges for reuse. So an address is never reused while a stale
//! mapping (the kernel's stale TLB entry) could still reach old frames.
//! Purges run when the lazily freed bytes exceed `lazy_max`, when an
//! allocation finds no space or no memory (then the allocation is retried
//! once), and on request.
//!
//! With `lazy_unmap` off every free unmaps at once: the design before 2008,
//! kept as the experiments' baseline.

use std::sync::atomic::Ordering;

use mmkit::error::{AllocError, CheckError, FreeError};
use mmkit::range::{FlushHook, RangeAllocator, RangeStats};
use mmkit::vmap::VmapAllocator;

use crate::error::VmError;
use crate::map_ram::Records;
use crate::phys::{Block, Phys};
use crate::sync::{lock, AtomicU64, HashMap, Mutex};
use crate::sys::Reservation;

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
}

impl Area {
    fn maps_per_frame(&self) -> u64 {
        1 + u64::from(self.mirror)
    }
}

/// What a lazily freed range holds until the purge.
#[derive(Debug)]
enum Lazy {
    /// An area's range and the frames still mapped in it.
    Area {
        start: u64,
        span: u64,
        vmap: Vec<u64>,
        frames: Vec<Block>,
        maps: u64,
        free_frames: bool,
    },
    /// A per-CPU block released by the front end; its frames are in the
    /// block's record.
    Block { start: u64, span: u64 },
}

impl Lazy {
    fn range(&self) -> (u64, u64) {
        match *self {
            Lazy::Area { start, span, .. } | Lazy::Block { start, span } => (start, span),
        }
    }
}

struct State {
    vmap: VmapAllocator,
    areas: HashMap<u64, Area>,
    lazy: Vec<Lazy>,
    lazy_bytes: u64,
    lazy_max: u64,
    /// Blocks the per-CPU front end holds: (count, bytes).
    blocks: (u64, u64),
}

/// Counters of the virtual layer (system calls included).
#[derive(Debug, Default)]
struct Counters {
    map_calls: AtomicU64,
    unmap_calls: AtomicU64,
    purges: AtomicU64,
    purged_areas: AtomicU64,
    realloc_in_place: AtomicU64,
    realloc_moved: AtomicU64,
    remapped_pages: AtomicU64,
}

/// Counters of the virtual layer, as [`Vm::stats`](crate::Vm::stats) reports
/// them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpaceStats {
    /// `mmap` calls that mapped frames (one per run of consecutive frames).
    pub map_calls: u64,
    /// Unmapping system calls (one per run of adjacent areas in a purge,
    /// one per area when unmapping eagerly).
    pub unmap_calls: u64,
    /// Purges that unmapped something (each is one batched TLB flush).
    pub purges: u64,
    /// Areas and blocks unmapped by those purges.
    pub purged_areas: u64,
    /// Live areas (vmalloc, vmap, mirror).
    pub live_areas: u64,
    /// Areas and blocks freed and waiting for a purge.
    pub lazy_areas: u64,
    /// Bytes of those.
    pub lazy_bytes: u64,
    /// `vrealloc` calls that grew the area in place.
    pub realloc_in_place: u64,
    /// `vrealloc` calls that moved the mappings to a new area.
    pub realloc_moved: u64,
    /// Pages whose mapping moved without a byte being copied.
    pub remapped_pages: u64,
}

/// The reservation, the physical memory, and everything mapped (see the
/// module docs).
pub(crate) struct Space {
    pub(crate) res: Reservation,
    pub(crate) phys: Phys,
    pub(crate) records: Records,
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

impl Space {
    pub(crate) fn new(
        res: Reservation,
        phys: Phys,
        records: Records,
        page: u64,
        lazy_max: u64,
        lazy_unmap: bool,
    ) -> Result<Self, VmError> {
        let vmap = VmapAllocator::new(res.base(), res.base() + res.len())
            .map_err(|_| VmError::Invalid("empty virtual space"))?;
        Ok(Space {
            res,
            phys,
            records,
            page,
            lazy_unmap,
            state: Mutex::new(State {
                vmap,
                areas: HashMap::default(),
                lazy: Vec::new(),
                lazy_bytes: 0,
                lazy_max,
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
    /// consecutive frames. On failure nothing stays mapped.
    pub(crate) fn map_frames(&self, addr: u64, frames: &[Block]) -> Result<(), VmError> {
        let (mut off, mut i) = (0, 0);
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
                if off > 0 {
                    self.unmap_range(addr, off * self.page);
                }
                self.phys.unmapped_blocks(&frames[..first]);
                return Err(VmError::os("mmap", e));
            }
            self.counters.map_calls.fetch_add(1, Ordering::Relaxed);
            self.phys.mapped(pfn, n);
            off += n;
        }
        Ok(())
    }

    /// One unmapping system call over `[addr, addr + len)`.
    pub(crate) fn unmap_range(&self, addr: u64, len: u64) {
        let r = self.res.unmap(addr, len);
        // Replacing our own reserved pages only fails when the kernel is out
        // of memory for its own bookkeeping; the range stays mapped and
        // allocated then, which is safe.
        debug_assert!(r.is_ok(), "unmap of {addr:#x}+{len:#x}: {r:?}");
        self.counters.unmap_calls.fetch_add(1, Ordering::Relaxed);
    }

    // -----------------------------------------------------------------
    // Areas: vmalloc, vmap, mirror
    // -----------------------------------------------------------------

    /// Reserves a span aligned to `align` for `len` bytes (twice over for a
    /// mirror), takes frames (or uses the caller's), maps them and records
    /// the area.
    pub(crate) fn create_area(
        &self,
        len: u64,
        align: u64,
        frames: Option<Vec<Block>>,
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
        let owns_frames = frames.is_none();
        let frames = match frames {
            Some(f) => f,
            None => {
                let mut f = Vec::new();
                if let Err(e) = self.alloc_frames(pages, &mut f) {
                    self.free_va(&[addr]);
                    return Err(e);
                }
                f
            }
        };
        let mut mapped = self.map_frames(addr, &frames);
        if mirror && mapped.is_ok() {
            mapped = self.map_frames(addr + pages * self.page, &frames);
            if mapped.is_err() {
                self.unmap_range(addr, pages * self.page);
                self.phys.unmapped_blocks(&frames);
            }
        }
        if let Err(e) = mapped {
            if owns_frames {
                self.phys.release(&frames);
            }
            self.free_va(&[addr]);
            return Err(e);
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
        match st.areas.get(&addr) {
            Some(a) if a.owns_frames != owns => return Err(VmError::NotAllocated { addr }),
            Some(a) if a.handle && !by_handle => return Err(VmError::OwnedByHandle { addr }),
            Some(_) => {}
            None => return Err(VmError::NotAllocated { addr }),
        }
        let area = st.areas.remove(&addr).expect("checked above");
        drop(st);
        self.retire(addr, area, owns);
        Ok(())
    }

    /// Retires the mapping of `area` at `addr`: onto the lazy list or torn
    /// down now. `free_frames` gives its frames back afterwards.
    fn retire(&self, addr: u64, area: Area, free_frames: bool) {
        let mut vmap = vec![addr];
        vmap.extend_from_slice(&area.pieces);
        let lazy = Lazy::Area {
            start: addr,
            span: area.span,
            vmap,
            maps: area.maps_per_frame(),
            frames: area.frames,
            free_frames,
        };
        self.retire_lazy(lazy);
    }

    fn retire_lazy(&self, lazy: Lazy) {
        if !self.lazy_unmap {
            self.teardown(vec![lazy]);
            return;
        }
        let mut st = lock(&self.state);
        st.lazy_bytes += lazy.range().1;
        st.lazy.push(lazy);
        let over = st.lazy_bytes > st.lazy_max;
        drop(st);
        if over {
            self.purge();
        }
    }

    /// Grows or shrinks the area at `addr` to `len` bytes without copying:
    /// in place when the range after it is free, otherwise by mapping its
    /// frames into a new area. Returns the (possibly new) address.
    pub(crate) fn realloc(&self, addr: u64, len: u64, by_handle: bool) -> Result<u64, VmError> {
        let (pages, _) = self.pages_for(len)?;
        let mut st = lock(&self.state);
        match st.areas.get_mut(&addr) {
            None => return Err(VmError::NotAllocated { addr }),
            Some(a) if a.handle && !by_handle => return Err(VmError::OwnedByHandle { addr }),
            Some(a) if !a.owns_frames || a.mirror => {
                return Err(VmError::Invalid("only vmalloc areas can be resized"))
            }
            Some(a) if pages <= a.pages => {
                a.len = len;
                return Ok(addr);
            }
            Some(_) => {}
        }
        let mut area = st.areas.remove(&addr).expect("checked above");
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

    fn grow_in_place(
        &self,
        addr: u64,
        area: &mut Area,
        piece: u64,
        extra: u64,
    ) -> Result<u64, VmError> {
        let mut more = Vec::new();
        let mapped = self
            .alloc_frames(extra, &mut more)
            .and_then(|()| self.map_frames(addr + area.pages * self.page, &more));
        if let Err(e) = mapped {
            self.phys.release(&more);
            self.free_va(&[piece]);
            return Err(e);
        }
        area.pieces.push(piece);
        area.span += extra * self.page;
        area.pages += extra;
        area.frames.extend(more);
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
        if let Err(e) = self.map_frames(to, &area.frames) {
            self.phys.release(&more);
            self.free_va(&[to]);
            return Err(e);
        }
        if let Err(e) = self.map_frames(to + area.pages * self.page, &more) {
            self.unmap_range(to, area.pages * self.page);
            self.phys.unmapped_blocks(&area.frames);
            self.phys.release(&more);
            self.free_va(&[to]);
            return Err(e);
        }
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
        };
        self.counters
            .remapped_pages
            .fetch_add(area.pages, Ordering::Relaxed);
        self.counters.realloc_moved.fetch_add(1, Ordering::Relaxed);
        area.span = span;
        area.pages = pages;
        area.frames.extend(more);
        self.retire(addr, old, false);
        Ok(to)
    }

    // -----------------------------------------------------------------
    // Purge
    // -----------------------------------------------------------------

    /// Unmaps every lazily freed range, gives their frames back and makes
    /// their addresses reusable. Returns the range covering them, or `None`
    /// when nothing was lazy.
    pub(crate) fn purge(&self) -> Option<(u64, u64)> {
        let _one_at_a_time = lock(&self.purge_lock);
        let list = {
            let mut st = lock(&self.state);
            st.lazy_bytes = 0;
            std::mem::take(&mut st.lazy)
        };
        if list.is_empty() {
            return None;
        }
        self.counters.purges.fetch_add(1, Ordering::Relaxed);
        let covered = self.teardown(list);
        self.purges_done.fetch_add(1, Ordering::Release);
        Some(covered)
    }

    /// Unmaps `list` (one call per run of adjacent ranges), releases frames,
    /// frees the ranges. Returns the covering range.
    fn teardown(&self, mut list: Vec<Lazy>) -> (u64, u64) {
        // A stable sort: the list is mostly in address order already.
        list.sort_by_key(|l| l.range().0);
        let lo = list[0].range().0;
        let mut run = list[0].range();
        for l in &list[1..] {
            let (s, n) = l.range();
            if s == run.0 + run.1 {
                run.1 += n;
            } else {
                self.unmap_range(run.0, run.1);
                run = (s, n);
            }
        }
        self.unmap_range(run.0, run.1);
        let hi = run.0 + run.1;
        self.counters
            .purged_areas
            .fetch_add(list.len() as u64, Ordering::Relaxed);
        let mut starts = Vec::with_capacity(list.len());
        for l in list {
            match l {
                Lazy::Area {
                    vmap,
                    frames,
                    maps,
                    free_frames,
                    ..
                } => {
                    for _ in 0..maps {
                        self.phys.unmapped_blocks(&frames);
                    }
                    if free_frames {
                        self.phys.release(&frames);
                    }
                    starts.extend(vmap);
                }
                Lazy::Block { start, .. } => {
                    self.records.drop_block(start, &self.phys);
                    starts.push(start);
                }
            }
        }
        self.phys.retry_deferred();
        self.free_va(&starts);
        (lo, hi)
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
        let is_area = st.areas.contains_key(&addr) || st.lazy.iter().any(|l| l.range().0 == addr);
        let size = match st.vmap.area_size(addr) {
            Some(s) if !is_area => s,
            _ => return Err(FreeError::NotAllocated),
        };
        st.blocks.0 -= 1;
        st.blocks.1 -= size;
        drop(st);
        let block = Lazy::Block {
            start: addr,
            span: size,
        };
        if lazy {
            self.retire_lazy(block);
        } else {
            self.teardown(vec![block]);
        }
        Ok(size)
    }

    // -----------------------------------------------------------------
    // Stats and check
    // -----------------------------------------------------------------

    pub(crate) fn set_lazy_max(&self, bytes: u64) {
        lock(&self.state).lazy_max = bytes;
    }

    pub(crate) fn stats(&self) -> SpaceStats {
        let st = lock(&self.state);
        let c = &self.counters;
        SpaceStats {
            map_calls: c.map_calls.load(Ordering::Relaxed),
            unmap_calls: c.unmap_calls.load(Ordering::Relaxed),
            purges: c.purges.load(Ordering::Relaxed),
            purged_areas: c.purged_areas.load(Ordering::Relaxed),
            live_areas: st.areas.len() as u64,
            lazy_areas: st.lazy.len() as u64,
            lazy_bytes: st.lazy_bytes,
            realloc_in_place: c.realloc_in_place.load(Ordering::Relaxed),
            realloc_moved: c.realloc_moved.load(Ordering::Relaxed),
            remapped_pages: c.remapped_pages.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn vmap_stats(&self) -> RangeStats {
        lock(&self.state).vmap.stats()
    }

    /// Checks that the vmap allocator, the areas, the lazy list, the
    /// blocks and the frames' map counts agree. `record_maps` is the
    /// mappings the block records hold.
    pub(crate) fn check(&self, record_maps: u64) -> Result<(), String> {
        let _no_purge = lock(&self.purge_lock);
        let st = lock(&self.state);
        st.vmap.check().map_err(|e| format!("vmap: {e}"))?;
        let mut ranges = 0u64;
        let mut maps = record_maps;
        for (&a, area) in &st.areas {
            if st.vmap.area_size(a).is_none() {
                return Err(format!("area {a:#x} not allocated in vmap"));
            }
            let frames: u64 = area.frames.iter().map(|b| b.pages()).sum();
            if frames != area.pages {
                return Err(format!(
                    "area {a:#x}: {frames} frames for {} pages",
                    area.pages
                ));
            }
            ranges += 1 + area.pieces.len() as u64;
            maps += area.pages * area.maps_per_frame();
        }
        for l in &st.lazy {
            match l {
                Lazy::Area {
                    vmap,
                    frames,
                    maps: m,
                    ..
                } => {
                    ranges += vmap.len() as u64;
                    maps += m * frames.iter().map(|b| b.pages()).sum::<u64>();
                }
                Lazy::Block { .. } => ranges += 1,
            }
        }
        let live = st.vmap.stats().live_areas;
        if live != ranges + st.blocks.0 {
            return Err(format!(
                "vmap holds {live} areas; areas, lazy and blocks make {}",
                ranges + st.blocks.0
            ));
        }
        let counted = self.phys.total_mapcount();
        if counted != maps {
            return Err(format!(
                "frames are mapped {counted} times, the areas say {maps}"
            ));
        }
        self.phys.check()
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
