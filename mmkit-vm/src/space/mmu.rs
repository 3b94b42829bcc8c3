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
//! to the budget.
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

/// What this machine has mapped (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Table {
    /// Runs mapped and not cleared: start -> (first frame, pages).
    pub(crate) live: BTreeMap<u64, (u64, u64)>,
    /// Runs cleared but still mapped until a flush unmaps them.
    pub(crate) stale: BTreeMap<u64, (u64, u64)>,
    /// The ranges cleared and not yet unmapped; `true` for a `vm_map_ram`
    /// block (its pages are in the block records, not in `stale`).
    pub(crate) cleared: Vec<(u64, u64, bool)>,
    /// The span the latest flush covered.
    pub(crate) flushed: Option<(u64, u64)>,
}

impl Table {
    /// The frame mapped at `va`, live or cleared, if this table maps it.
    pub(crate) fn frame(&self, va: u64) -> Option<u64> {
        [&self.live, &self.stale].into_iter().find_map(|runs| {
            let (&s, &(pfn, n)) = runs.range(..=va).next_back()?;
            (va < s + n * PAGE).then(|| pfn + (va - s) / PAGE)
        })
    }

    /// Every run mapped, live and cleared.
    pub(crate) fn runs(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.live
            .iter()
            .chain(&self.stale)
            .map(|(&va, &(pfn, n))| (va, pfn, n))
    }
}

/// The memfd machine with its page table, borrowed from the space's lock.
pub(crate) struct MemfdMmu<'a> {
    pub(crate) space: &'a Space,
    pub(crate) table: &'a mut Table,
    /// Why the latest `map` failed (the driver reports only that it did).
    pub(crate) err: Option<VmError>,
}

/// A released entry of `cleared`.
const DONE: (u64, u64, bool) = (0, 0, false);

impl<'a> MemfdMmu<'a> {
    pub(crate) fn new(space: &'a Space, table: &'a mut Table) -> Self {
        MemfdMmu {
            space,
            table,
            err: None,
        }
    }

    /// Records the block `[va, va + size)` of the `vm_map_ram` front end as
    /// cleared: its pages (live or stale in the block records) go with the
    /// flush that covers it.
    pub(crate) fn clear_block(&mut self, va: u64, size: u64) {
        self.table.cleared.push((va, va + size, true));
    }

    /// After the kernel unmapped `[s, e)`: the runs and blocks in it leave
    /// the books, their frames lose a map count, the budget gets them back.
    fn unmapped(&mut self, s: u64, e: u64, entries: &[(u64, u64, bool)]) {
        let space = self.space;
        let gone: Vec<u64> = self.table.stale.range(s..e).map(|(&va, _)| va).collect();
        let mut runs = 0;
        for va in gone {
            if let Some((pfn, n)) = self.table.stale.remove(&va) {
                space.phys.unmapped(pfn, n);
                runs += 1;
            }
        }
        for &(start, _, block) in entries {
            if block {
                runs += space.records.drop_block(start, &space.phys);
            }
        }
        space.budget.credit(runs);
    }
}

impl Mmu for MemfdMmu<'_> {
    /// Maps `pfns` with one `mmap` per run of consecutive frames, charged
    /// to the mapping budget first.
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
        let table = &mut *self.table;
        let done = self.space.map_runs(va, pfns, |at, pfn, n| {
            table.live.insert(at, (pfn, n));
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
        let end = va + pages * PAGE;
        let runs: Vec<u64> = self.table.live.range(va..end).map(|(&s, _)| s).collect();
        for s in runs {
            if let Some(run) = self.table.live.remove(&s) {
                self.table.stale.insert(s, run);
            }
        }
        self.table.cleared.push((va, end, false));
    }

    fn flush(&mut self, start: u64, end: u64) -> Refused {
        let mut c = std::mem::take(&mut self.table.cleared);
        c.sort_unstable();
        let (lo, hi) = (
            c.partition_point(|r| r.0 < start),
            c.partition_point(|r| r.1 <= end),
        );
        let mut refused = Refused::new();
        let mut i = lo;
        while i < hi {
            let (s, mut e, _) = c[i];
            let mut j = i + 1;
            while j < hi && c[j].0 == e {
                e = c[j].1;
                j += 1;
            }
            if self.space.unmap_range(s, e - s) {
                self.unmapped(s, e, &c[i..j]);
                c[i..j].fill(DONE);
            } else {
                refused.push((s, e));
            }
            i = j;
        }
        c.retain(|&r| r != DONE);
        self.table.cleared = c;
        self.table.flushed = Some((start, end));
        self.space.phys.retry_deferred();
        refused
    }

    fn translate(&self, va: u64) -> Option<u64> {
        self.table.frame(va)
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
