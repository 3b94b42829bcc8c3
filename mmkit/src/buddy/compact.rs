//! Compaction (`mm/compaction.c`): move movable allocations out of the way
//! so that a high-order free block appears.
//!
//! Two scanners walk the zone a pageblock at a time towards each other:
//!
//! ```text
//!   start                                                        end
//!   | migrate scanner -->                     <-- free scanner   |
//!   [ M a M . M M ][ a M . . M a ] ... [ . M . . ][ M . . . ]
//!     sources: Movable allocated      targets: free blocks of
//!     blocks below the request order  Movable pageblocks, isolated
//! ```
//!
//! - the *migration scanner* starts at the zone's first pageblock and picks
//!   every allocated block that was requested as [`MigrateType::Movable`]
//!   and is smaller than the requested order;
//! - the *free scanner* starts at the last pageblock and *isolates* the free
//!   blocks of Movable pageblocks (takes them off the free lists), never a
//!   free block of `pageblock_order` or more (the kernel's
//!   `suitable_migration_target`: that is what compaction tries to make);
//! - each source is moved to an isolated target of its order by the caller's
//!   callback `migrate(old_pfn, new_pfn, order) -> bool` (a caller that maps
//!   the frames copies and remaps them there; `false` means "could not move":
//!   the block stays and the target returns to the isolated set);
//! - the freed source merges with its free buddies, so the bottom of the zone
//!   fills with free blocks while the top fills with moved pages;
//! - it stops with [`CompactResult::Success`] once a free block of the
//!   requested order and type exists (checked after each pageblock, like
//!   `compact_finished`), or with [`CompactResult::Complete`] when the
//!   scanners meet. The isolated free blocks that were not used go back to
//!   the free lists.
//!
//! [`BuddyAllocator::compaction_suitable`] decides whether compacting is
//! worth it at all, from the watermark and the fragmentation index with the
//! kernel's `sysctl_extfrag_threshold` (500): an index at or below it means
//! the request fails for lack of memory, not fragmentation, so reclaim
//! should serve it instead.
//!
//! The allocator is never inconsistent between calls: isolated free blocks
//! are held as allocated Movable blocks for the duration of
//! [`BuddyAllocator::compact`] and released before it returns.

use alloc::vec::Vec;

use super::{BuddyAllocator, Frame, MigrateType};
use crate::error::AllocError;

/// The kernel's default `vm.extfrag_threshold` (`sysctl_extfrag_threshold`).
pub const EXTFRAG_THRESHOLD: i32 = 500;

/// The kernel's `PAGE_ALLOC_COSTLY_ORDER`: the fragmentation index is
/// consulted only above it.
pub const COSTLY_ORDER: u8 = 3;

/// What [`BuddyAllocator::compaction_suitable`] advises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompactSuitable {
    /// A block of the order is already free: allocate, do not compact.
    Success,
    /// Too little free memory to compact into (below `2 << order` free
    /// pages, the kernel's `compact_gap`): reclaim first.
    Skipped,
    /// The fragmentation index is in `0..=threshold`: the failure is due to
    /// low memory, not fragmentation, so reclaim should serve it.
    NotSuitable,
    /// Fragmentation is to blame: compaction should help.
    Continue,
}

/// How a [`BuddyAllocator::compact`] run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompactResult {
    /// A free block of the requested order and type now exists.
    Success,
    /// The scanners met without making one.
    Complete,
}

/// Counters of compaction work, per run and cumulated per zone (the
/// kernel's `compact_*` lines of `/proc/vmstat`).
///
/// Invariant: `moved_pages <= migrate_scanned` and
/// `success + fail == runs`.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CompactStats {
    /// Runs of [`BuddyAllocator::compact`] (`compact_stall`).
    pub runs: u64,
    /// Runs that ended in [`CompactResult::Success`] (`compact_success`).
    pub success: u64,
    /// Runs that ended in [`CompactResult::Complete`] (`compact_fail`).
    pub fail: u64,
    /// Pages the migration scanner walked (`compact_migrate_scanned`).
    /// Each pageblock scanned adds its own pages that the scanner passed:
    /// a block running past the pageblock's end counts up to that end, a
    /// pageblock inside a larger block is skipped and adds nothing.
    pub migrate_scanned: u64,
    /// Pages the free scanner walked (`compact_free_scanned`), counted as
    /// `migrate_scanned` is.
    pub free_scanned: u64,
    /// Free pages isolated as targets (`compact_isolated`, free side).
    pub isolated_free: u64,
    /// Pages moved by the callback (`pgmigrate_success`).
    pub moved_pages: u64,
    /// Blocks moved by the callback.
    pub moved_blocks: u64,
    /// Blocks the callback refused to move (`pgmigrate_fail`).
    pub failed_blocks: u64,
}

impl CompactStats {
    fn add(&mut self, o: &CompactStats) {
        self.runs += o.runs;
        self.success += o.success;
        self.fail += o.fail;
        self.migrate_scanned += o.migrate_scanned;
        self.free_scanned += o.free_scanned;
        self.isolated_free += o.isolated_free;
        self.moved_pages += o.moved_pages;
        self.moved_blocks += o.moved_blocks;
        self.failed_blocks += o.failed_blocks;
    }
}

/// The result and counters of one compaction run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CompactOutcome {
    /// How it ended.
    pub result: CompactResult,
    /// The work it did (`runs` is 1).
    pub stats: CompactStats,
}

/// The scanners' positions, both pageblock-aligned pfns: the migration
/// scanner's next pageblock is `[migrate, migrate + pb)`, the free scanner
/// has taken every pageblock from `free_low` up.
struct Scanners {
    migrate: u64,
    free_low: u64,
    /// Isolated free blocks `(pfn, order)`, held as allocated.
    isolated: Vec<(u64, u8)>,
}

impl BuddyAllocator {
    /// Whether compacting for an order-`order` request is worthwhile
    /// (`compaction_suitable`): [`CompactSuitable::Success`] when a block
    /// is free, `Skipped` below `2 << order` free pages, `NotSuitable` when
    /// `order` > [`COSTLY_ORDER`] and the fragmentation index is in
    /// `0..=extfrag_threshold` (pass [`EXTFRAG_THRESHOLD`] for the kernel's
    /// default), else `Continue`. Orders above `max_order` are `Skipped`.
    ///
    /// # Complexity
    /// O(orders × types).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, CompactSuitable, MigrateType, EXTFRAG_THRESHOLD};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// assert_eq!(zone.compaction_suitable(5, EXTFRAG_THRESHOLD), CompactSuitable::Success);
    /// zone.alloc(5, MigrateType::Movable).unwrap();
    /// assert_eq!(zone.compaction_suitable(6, EXTFRAG_THRESHOLD), CompactSuitable::Skipped);
    /// ```
    pub fn compaction_suitable(&self, order: u8, extfrag_threshold: i32) -> CompactSuitable {
        if order > self.cfg.max_order {
            return CompactSuitable::Skipped;
        }
        let fi = self.fragmentation_index(order);
        if fi == -1000 {
            return CompactSuitable::Success;
        }
        if self.free_pages < 2u64 << order {
            return CompactSuitable::Skipped;
        }
        if order > COSTLY_ORDER && (0..=extfrag_threshold).contains(&fi) {
            return CompactSuitable::NotSuitable;
        }
        CompactSuitable::Continue
    }

    /// The compaction counters cumulated over every run on this zone.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// zone.compact(3, MigrateType::Movable, |_, _, _| true).unwrap();
    /// let s = zone.compaction_stats();
    /// assert_eq!((s.runs, s.moved_pages), (1, 0)); // nothing needed moving
    /// ```
    pub fn compaction_stats(&self) -> CompactStats {
        self.compact_stats
    }

    /// Compacts the zone until a free block of `order` usable by a request
    /// of type `mt` exists or the scanners meet (see the module docs of
    /// `compact`). `migrate(old_pfn, new_pfn, order)` is called for each
    /// block before it moves; it returns whether the move happened. After a
    /// successful move the block is allocated at `new_pfn` (as Movable, of
    /// the same order) and `old_pfn` is freed.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] when `order > max_order`. Nothing changes then.
    ///
    /// # Complexity
    /// O(span) frames walked, plus O(max_order) per move.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let cfg = BuddyConfig { max_order: 3, pageblock_order: 3, ..BuddyConfig::default() };
    /// let mut zone = BuddyAllocator::new(0, 16, cfg).unwrap();
    /// zone.add_free_range(0, 16).unwrap();
    /// // Fill the zone with single pages, then free every other one: 8 pages
    /// // free, but no two adjacent.
    /// let pages: Vec<u64> = (0..16).map(|_| zone.alloc(0, MigrateType::Movable).unwrap()).collect();
    /// for &p in pages.iter().step_by(2) {
    ///     zone.free(p, 0).unwrap();
    /// }
    /// assert_eq!(zone.nr_free(1), 0);
    /// // Move the movable pages together (the callback would copy the data).
    /// let mut moves = Vec::new();
    /// zone.compact(3, MigrateType::Movable, |old, new, _| { moves.push((old, new)); true }).unwrap();
    /// assert!(zone.nr_free(3) >= 1, "{moves:?}");
    /// zone.check().unwrap();
    /// ```
    pub fn compact<F>(
        &mut self,
        order: u8,
        mt: MigrateType,
        mut migrate: F,
    ) -> Result<CompactOutcome, AllocError>
    where
        F: FnMut(u64, u64, u8) -> bool,
    {
        if order > self.cfg.max_order {
            return Err(AllocError::Invalid);
        }
        let pb = 1u64 << self.cfg.pageblock_order;
        let mut sc = Scanners {
            migrate: self.start & !(pb - 1),
            // The end of the last pageblock; `new` keeps it below 2^64.
            free_low: ((self.end_pfn() - 1) | (pb - 1)) + 1,
            isolated: Vec::new(),
        };
        let mut st = CompactStats {
            runs: 1,
            ..CompactStats::default()
        };
        let result = loop {
            if self.compact_finished(order, mt) {
                break CompactResult::Success;
            }
            if sc.migrate >= sc.free_low
                || !self.compact_one_block(order, &mut sc, &mut st, &mut migrate)
            {
                break CompactResult::Complete;
            }
            sc.migrate += pb;
        };
        for (pfn, o) in sc.isolated.drain(..) {
            self.release_isolated(pfn, o);
        }
        match result {
            CompactResult::Success => st.success = 1,
            CompactResult::Complete => st.fail = 1,
        }
        self.compact_stats.add(&st);
        Ok(CompactOutcome { result, stats: st })
    }

    /// Whether an order-`order` request of `mt` would now find a block
    /// (`__compact_finished`): its own lists, or any ordinary type's lists
    /// at `pageblock_order` and above (a whole pageblock can be claimed).
    fn compact_finished(&self, order: u8, mt: MigrateType) -> bool {
        (order..=self.cfg.max_order).any(|o| {
            !self.list(o, mt).is_empty()
                || (o >= self.cfg.pageblock_order
                    && mt.is_pcp()
                    && MigrateType::ALL
                        .iter()
                        .any(|&t| t.is_pcp() && !self.list(o, t).is_empty()))
        })
    }

    /// Migrates the sources of the migration scanner's pageblock; `false`
    /// when the free scanner ran into it first (the scanners met).
    fn compact_one_block<F>(
        &mut self,
        order: u8,
        sc: &mut Scanners,
        st: &mut CompactStats,
        migrate: &mut F,
    ) -> bool
    where
        F: FnMut(u64, u64, u8) -> bool,
    {
        for (src, o) in self.migrate_sources(sc.migrate, order, st) {
            let Some(dst) = self.take_target(o, sc, st) else {
                return false;
            };
            if migrate(src, dst, o) {
                self.commit_move(src, o);
                st.moved_blocks += 1;
                st.moved_pages += 1u64 << o;
            } else {
                self.set_frame(
                    self.ix(dst),
                    Frame::Alloc {
                        order: o,
                        mt: MigrateType::Movable,
                    },
                );
                sc.isolated.push((dst, o));
                st.failed_blocks += 1;
            }
        }
        true
    }

    #[inline]
    fn ix(&self, pfn: u64) -> usize {
        (pfn - self.start) as usize
    }

    /// The pageblock `[block, block + pb)` clipped to the span.
    fn block_span(&self, block: u64) -> (u64, u64) {
        let pb = 1u64 << self.cfg.pageblock_order;
        (block.max(self.start), (block + pb).min(self.end_pfn()))
    }

    /// Movable allocated blocks below `order` (and below a pageblock) in the
    /// pageblock at `block`; a pageblock inside a larger block is skipped.
    fn migrate_sources(&self, block: u64, order: u8, st: &mut CompactStats) -> Vec<(u64, u8)> {
        let (lo, hi) = self.block_span(block);
        let mut out = Vec::new();
        let mut p = lo;
        while p < hi {
            let step = match self.frame(self.ix(p)) {
                Frame::Tail => return out, // inside a block larger than the pageblock
                Frame::Hole => 1,
                Frame::Free { order: o, .. } => 1u64 << o,
                Frame::Alloc { order: o, mt } => {
                    if mt == MigrateType::Movable && o < order && o < self.cfg.pageblock_order {
                        out.push((p, o));
                    }
                    1u64 << o
                }
            };
            st.migrate_scanned += step.min(hi - p);
            p += step;
        }
        out
    }

    /// An isolated free block of exactly `o`, split from a larger one if
    /// needed, marked allocated Movable; the free scanner isolates another
    /// pageblock when none is big enough. `None` when the scanners meet.
    fn take_target(&mut self, o: u8, sc: &mut Scanners, st: &mut CompactStats) -> Option<u64> {
        let pb = 1u64 << self.cfg.pageblock_order;
        loop {
            if let Some(k) = sc.isolated.iter().position(|&(_, ko)| ko >= o) {
                let (pfn, mut ko) = sc.isolated.swap_remove(k);
                while ko > o {
                    ko -= 1;
                    let upper = pfn + (1u64 << ko);
                    self.set_frame(
                        self.ix(upper),
                        Frame::Alloc {
                            order: ko,
                            mt: MigrateType::Movable,
                        },
                    );
                    sc.isolated.push((upper, ko));
                }
                self.set_frame(
                    self.ix(pfn),
                    Frame::Alloc {
                        order: o,
                        mt: MigrateType::Movable,
                    },
                );
                return Some(pfn);
            }
            if sc.free_low < pb || sc.free_low - pb <= sc.migrate {
                return None;
            }
            sc.free_low -= pb;
            self.isolate_free_block(sc.free_low, &mut sc.isolated, st);
        }
    }

    /// The free scanner on one pageblock: isolates its free blocks when it is
    /// a Movable pageblock not wholly free.
    fn isolate_free_block(&mut self, block: u64, out: &mut Vec<(u64, u8)>, st: &mut CompactStats) {
        let (lo, hi) = self.block_span(block);
        if lo >= hi || self.block_type(lo) != MigrateType::Movable {
            return;
        }
        let mut p = lo;
        while p < hi {
            let step = match self.frame(self.ix(p)) {
                Frame::Tail => return, // inside a larger (free or allocated) block
                Frame::Hole => 1,
                Frame::Alloc { order, .. } => 1u64 << order,
                Frame::Free { order, .. } if order >= self.cfg.pageblock_order => return,
                Frame::Free { order, mt } => {
                    self.unlink(p, order, mt);
                    self.set_frame(
                        self.ix(p),
                        Frame::Alloc {
                            order,
                            mt: MigrateType::Movable,
                        },
                    );
                    self.free_pages -= 1u64 << order;
                    st.isolated_free += 1u64 << order;
                    out.push((p, order));
                    1u64 << order
                }
            };
            st.free_scanned += step.min(hi - p);
            p += step;
        }
    }

    /// The block moved away: free its old place (merging).
    fn commit_move(&mut self, src: u64, o: u8) {
        let mt = self.block_type(src);
        self.free_one(src, o, mt);
        self.free_pages += 1u64 << o;
    }

    /// An unused isolated free block goes back to the free lists.
    fn release_isolated(&mut self, pfn: u64, o: u8) {
        let mt = self.block_type(pfn);
        self.free_one(pfn, o, mt);
        self.free_pages += 1u64 << o;
    }
}
