//! The memfd machine as the driver's two traits.
//!
//! [`MemfdMmu`] is the [`Mmu`]: `map` is one `mmap` (`MAP_FIXED` of the
//! memfd) per run of consecutive frames, charged to the mapping budget
//! first; in user space clearing and flushing are one system call, so
//! `clear` only records the range (the mapping stays) and `flush` puts
//! reserved memory back over the recorded ranges inside its span, one call
//! per run of adjacent ranges. A call the kernel refuses leaves its run
//! recorded and is reported as refused: the driver keeps it stuck.
//!
//! [`Table`] is this machine's page table: every run it mapped, live or
//! cleared, with its frame. A run leaves it only when the kernel has
//! unmapped it; then its frames lose a map count and its mappings go back
//! to the budget. It has its own lock, taken inside each call and never
//! around another lock: `vm_map_ram` and `vm_unmap_ram` call the MMU
//! without the space's lock.
//!
//! ```text
//!  map    ──mmap per run──> live  {va: (pfn, pages)}
//!  clear  ──────────────────> stale {va: (pfn, pages)} + cleared [start, end)
//!  flush(lo, hi) ──one call per run of adjacent cleared ranges──> gone
//!                 refused runs stay cleared (still mapped)
//! ```
//!
//! [`PhysFrames`] is the [`FrameSource`]: runs of frames from the buddy of
//! the memory file.

use std::collections::BTreeMap;

use mmkit_vmalloc::{FrameSource, MapFailed, Mmu, Refused, VmError as LayerError, PAGE};

use super::Space;
use crate::error::VmError;
use crate::phys::Phys;
use crate::sync::lock;

/// What this machine has mapped (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Table {
    /// Runs mapped and not cleared: start -> (first frame, pages).
    pub(crate) live: BTreeMap<u64, (u64, u64)>,
    /// Runs cleared but still mapped until a flush unmaps them.
    pub(crate) stale: BTreeMap<u64, (u64, u64)>,
    /// The ranges cleared and not yet unmapped.
    pub(crate) cleared: Vec<(u64, u64)>,
    /// The ranges the latest flush over them could not unmap.
    pub(crate) refused: Vec<(u64, u64)>,
    /// The span the latest flush covered.
    pub(crate) flushed: Option<(u64, u64)>,
}

impl Table {
    /// The frame a live (not cleared) run maps at `va`: its PTE.
    pub(crate) fn frame(&self, va: u64) -> Option<u64> {
        let (&s, &(pfn, n)) = self.live.range(..=va).next_back()?;
        (va < s + n * PAGE).then(|| pfn + (va - s) / PAGE)
    }

    /// Every run mapped, live and cleared.
    pub(crate) fn runs(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.live
            .iter()
            .chain(&self.stale)
            .map(|(&va, &(pfn, n))| (va, pfn, n))
    }
}

/// The memfd machine and its page table (the space's).
pub(crate) struct MemfdMmu<'a> {
    pub(crate) space: &'a Space,
    /// Why the latest `map` failed (the driver reports only that it did).
    pub(crate) err: Option<VmError>,
}

/// A released entry of `cleared`.
const DONE: (u64, u64) = (0, 0);

impl<'a> MemfdMmu<'a> {
    pub(crate) fn new(space: &'a Space) -> Self {
        MemfdMmu { space, err: None }
    }

    /// After the kernel unmapped `[s, e)`: the runs in it leave the table,
    /// their frames lose a map count, the budget gets them back.
    fn unmapped(&self, table: &mut Table, s: u64, e: u64) {
        let space = self.space;
        let gone: Vec<u64> = table.stale.range(s..e).map(|(&va, _)| va).collect();
        let mut runs = 0;
        for va in gone {
            if let Some((pfn, n)) = table.stale.remove(&va) {
                space.phys.unmapped(pfn, n);
                runs += 1;
            }
        }
        space.budget.credit(runs);
    }

    /// Forgets what was cleared in `[s, e)` and not flushed yet, before a
    /// new mapping replaces it there (the undo of a refused `vm_unmap_ram`
    /// maps its frames back): `mmap` over it removes the old mapping.
    fn replace_cleared(&self, s: u64, e: u64) {
        let mut table = lock(&self.space.table);
        // A cleared range with nothing stale in it maps nothing: unmapping
        // it later is harmless.
        if table.stale.range(s..e).next().is_none() {
            return;
        }
        let mut kept = Vec::with_capacity(table.cleared.len() + 1);
        for &(a, b) in &table.cleared {
            if b <= s || a >= e {
                kept.push((a, b));
                continue;
            }
            if a < s {
                kept.push((a, s));
            }
            if b > e {
                kept.push((e, b));
            }
        }
        table.cleared = kept;
        self.unmapped(&mut table, s, e);
    }
}

impl Mmu for MemfdMmu<'_> {
    /// Maps `pfns` with one `mmap` per run of consecutive frames, charged
    /// to the mapping budget first.
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
        self.replace_cleared(va, va + pfns.len() as u64 * PAGE);
        let table = &self.space.table;
        let done = self.space.map_runs(va, pfns, |at, pfn, n| {
            lock(table).live.insert(at, (pfn, n));
        });
        done.map(drop).map_err(|p| {
            self.err = Some(p.err);
            let err = LayerError::MapFailed {
                va: va + p.pages * PAGE,
            };
            MapFailed {
                err,
                mapped: p.pages,
            }
        })
    }

    fn clear(&mut self, va: u64, pages: u64) {
        if pages == 0 {
            return;
        }
        let end = va + pages * PAGE;
        let mut table = lock(&self.space.table);
        let runs: Vec<u64> = table.live.range(va..end).map(|(&s, _)| s).collect();
        for s in runs {
            if let Some(run) = table.live.remove(&s) {
                table.stale.insert(s, run);
            }
        }
        table.cleared.push((va, end));
    }

    /// Unmaps under the table's lock: a range is in the table exactly
    /// while the kernel maps it.
    fn flush(&mut self, start: u64, end: u64) -> Refused {
        let mut table = lock(&self.space.table);
        let mut c = std::mem::take(&mut table.cleared);
        c.sort_unstable();
        let (lo, hi) = (
            c.partition_point(|r| r.0 < start),
            c.partition_point(|r| r.1 <= end),
        );
        let mut refused = Refused::new();
        let mut i = lo;
        while i < hi {
            let (s, mut e) = c[i];
            let mut j = i + 1;
            while j < hi && c[j].0 == e {
                e = c[j].1;
                j += 1;
            }
            if self.space.unmap_range(s, e - s) {
                self.unmapped(&mut table, s, e);
                c[i..j].fill(DONE);
            } else {
                refused.push((s, e));
            }
            i = j;
        }
        c.retain(|&r| r != DONE);
        table.cleared = c;
        table.flushed = Some((start, end));
        table.refused.retain(|&(s, e)| e <= start || end <= s);
        table.refused.extend_from_slice(&refused);
        drop(table);
        self.space.phys.retry_deferred();
        refused
    }

    fn translate(&self, va: u64) -> Option<u64> {
        lock(&self.space.table).frame(va)
    }
}

/// The buddy of the memory file as the driver's frame source.
pub(crate) struct PhysFrames<'a> {
    pub(crate) phys: &'a Phys,
    /// Why the latest allocation failed (the driver reports only that it
    /// did).
    pub(crate) err: Option<VmError>,
}

impl<'a> PhysFrames<'a> {
    pub(crate) fn new(phys: &'a Phys) -> Self {
        PhysFrames { phys, err: None }
    }
}

impl FrameSource for PhysFrames<'_> {
    fn alloc(&mut self, max: u64) -> Option<(u64, u64)> {
        match self.phys.alloc_run(max) {
            Ok(b) => Some((b.pfn, b.pages())),
            Err(e) => {
                self.err = Some(e);
                None
            }
        }
    }

    /// Takes the frames in as few buddy blocks as the buddy allows (the
    /// highest orders first) under one lock of the zone; all or none: a
    /// refusal is kept in `err`.
    fn alloc_frames(&mut self, out: &mut [u64]) -> usize {
        if out.is_empty() {
            return 0;
        }
        let mut blocks = Vec::new();
        if let Err(e) = self.phys.alloc_pages(out.len() as u64, &mut blocks) {
            self.err = Some(e);
            return 0;
        }
        // The blocks cover `out` exactly.
        let mut filled = 0;
        for b in blocks {
            let run = &mut out[filled..filled + b.pages() as usize];
            for (k, slot) in (0..).zip(run.iter_mut()) {
                *slot = b.pfn + k;
            }
            filled += run.len();
        }
        filled
    }

    /// [`free`](FrameSource::free) of each run, under one lock.
    fn free_frames(&mut self, frames: &[u64]) {
        self.phys.release_runs(frames);
    }

    /// Frees the area frames of the run; a frame still mapped somewhere
    /// waits for the flush that unmaps it. Frames the caller of
    /// `alloc_pages` holds (those of a `vmap` area, handed back after a
    /// flush) stay the caller's.
    fn free(&mut self, pfn: u64, count: u64) {
        self.phys.release_run(pfn, count);
    }

    /// Zeroes by punching a hole in the memory file (the driver's
    /// `vzalloc`; [`Vm::vzalloc`](crate::Vm::vzalloc) zeroes through the
    /// mapping instead, which cannot fail). A refusal is kept in `err`.
    fn zero(&mut self, pfn: u64, count: u64) {
        if let Err(e) = self.phys.zero(pfn, count) {
            self.err = Some(e);
        }
    }
}
