//! How the layer frees a range: it is cleared at once and stays allocated
//! until a flush has released it. The lists themselves, and the rule that
//! only what a flush released may be reused, are `mmkit::lazy::Retiring`
//! (the one lazy list every mmkit allocator uses); this file decides when
//! a freed range is flushed and frees what comes back released.
//!
//! ```text
//!  retire ──clear──> lazy ──purge: one flush over the span──> released (range freed,
//!     \ (eager: flush now)          |                         area handed back)
//!      \                            └── refused ranges ──> stuck ──next purge──┘
//! ```

use alloc::vec::Vec;

use mmkit::lazy::{self, Extent};
use mmkit::range::{Detached, RangeAllocator};

use super::maps::{AreaData, Vmalloc, HISTORY};
use super::{Flush, Mmu, Refused, VmError, PAGE};

/// What a freed range held.
#[derive(Debug, PartialEq, Eq)]
pub enum Gone<A> {
    /// An area (or the part of one a failed map reached).
    Area(A),
    /// A raw range (`vm_map_ram` block); its user knows what it mapped.
    Block,
}

impl<A: AreaData> Gone<A> {
    /// An area that never grew in place: one range, which a pool may take.
    fn single_area(&self) -> bool {
        matches!(self, Gone::Area(a) if a.pieces().is_empty())
    }
}

/// A freed range: on the lazy or stuck list, or handed back by a purge
/// once released.
#[derive(Debug)]
pub struct Retired<A> {
    /// Where it starts.
    pub start: u64,
    /// Its bytes (guard page included).
    pub span: u64,
    /// What it held.
    pub what: Gone<A>,
    /// The range, detached from the range allocator's live areas at the
    /// free (a range whole, not grown in place by pieces); released to it
    /// by the purge that flushes it.
    pub(crate) detached: Option<Detached>,
}

impl<A> Extent for Retired<A> {
    #[inline]
    fn extent(&self) -> (u64, u64) {
        (self.start, self.start + self.span)
    }
}

/// A freed range released: its flush succeeded and its range is free.
pub type Released<A> = Retired<A>;

/// What freeing a range did.
#[derive(Debug)]
#[must_use]
pub struct Outcome<A> {
    /// What was released (flushed and freed) by it: the range itself when
    /// flushed at once (eager, or on request), otherwise nothing.
    pub released: Vec<Released<A>>,
    /// The lazy list passed its threshold: the caller purges.
    pub purge_due: bool,
}

/// What a purge did.
#[derive(Debug)]
#[must_use]
pub struct Purged<A> {
    /// The span flushed, when there was anything to flush.
    pub flushed: Option<(u64, u64)>,
    /// What the flush released (its ranges are free now).
    pub released: Vec<Released<A>>,
}

/// When a retired range is flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum When {
    /// As the layer's [`Flush`] policy says.
    Policy,
    /// Now, whatever the policy.
    Now,
    /// At the next purge, whatever the policy; never flushes inline
    /// (`vfree_atomic`).
    Deferred,
}

/// The lazy list's threshold under `flush`: under the eager policy only
/// ranges that must not flush inline wait there, and none makes a purge
/// due.
pub(crate) fn lazy_max(flush: Flush) -> u64 {
    match flush {
        Flush::Lazy { max_bytes } => max_bytes,
        Flush::Eager => u64::MAX,
    }
}

impl<R: RangeAllocator, A: AreaData> Vmalloc<R, A> {
    /// The freed range `[start, start + span)` that held `what`, a range
    /// of ours out of the books: detached from the range allocator when
    /// it holds it whole, so that its purge only merges it (and the range
    /// allocator itself refuses a second free of it from now on); an area
    /// of a size the pools take stays allocated there, for its purge to
    /// pool.
    pub(crate) fn detach_retired(&mut self, start: u64, span: u64, what: Gone<A>) -> Retired<A> {
        let whole = !matches!(&what, Gone::Area(a) if !a.pieces().is_empty());
        let poolable = what.single_area() && self.pools.takes(span);
        let detached = if whole && !poolable {
            let d = self.range.detach(start, start + span);
            debug_assert!(d.is_ok(), "detaching our own range {start:#x}: {d:?}");
            d.ok()
        } else {
            None
        };
        Retired {
            start,
            span,
            what,
            detached,
        }
    }

    /// Frees the reserved range `[start, start + span)` that held `what`
    /// (an area [`take`](Self::take)n out of the books, or one a failed map
    /// reached): clears it, then flushes it now (eager policy, or `now`)
    /// or puts it on the lazy list. A flush that refuses it leaves it on
    /// the stuck list. May flush (see the crate docs: IPIs, waits).
    ///
    /// # Errors
    /// [`VmError::InUse`] when `start` is a live area, a block or already
    /// retired; [`VmError::NotReserved`] for any other address that is not
    /// a reserved range. Nothing changes then.
    pub fn retire(
        &mut self,
        mmu: &mut impl Mmu,
        start: u64,
        span: u64,
        what: Gone<A>,
        now: bool,
    ) -> Result<Outcome<A>, VmError> {
        if let Gone::Area(a) = &what {
            if let Some(&p) = a.pieces().iter().find(|p| !self.reserved.contains(p)) {
                return Err(VmError::NotReserved { va: p });
            }
        }
        self.claim(start)?;
        if let Gone::Area(a) = &what {
            for p in a.pieces() {
                self.reserved.remove(p);
            }
        }
        let when = if now { When::Now } else { When::Policy };
        Ok(self.retire_range(mmu, start, span, what, when))
    }

    /// [`retire`](Self::retire) of a range known to be ours and out of the
    /// books.
    pub(crate) fn retire_range(
        &mut self,
        mmu: &mut impl Mmu,
        start: u64,
        span: u64,
        what: Gone<A>,
        when: When,
    ) -> Outcome<A> {
        if matches!(what, Gone::Area(_)) {
            mmu.clear(start, span / PAGE);
        }
        let r = self.detach_retired(start, span, what);
        let eager = self.flush == Flush::Eager;
        if when == When::Deferred || (when == When::Policy && !eager) {
            let due = self.retiring.push(r);
            return Outcome {
                released: Vec::new(),
                purge_due: due && when != When::Deferred,
            };
        }
        if eager && !self.retiring.lazy().is_empty() {
            // Deferred frees wait: one flush takes them with this one.
            self.retiring.push(r);
            let purged = self.purge_through(&mut |s, e| mmu.flush(s, e));
            return Outcome {
                released: purged.released,
                purge_due: false,
            };
        }
        let p = self.retiring.flush_now(r, |s, e| mmu.flush(s, e));
        Outcome {
            released: self.settle(p),
            purge_due: false,
        }
    }

    /// Flushes the lazy and stuck lists (one flush over their span) and
    /// frees what the flush released; refused ranges stay stuck. Returns
    /// what was released, for the caller to free what the areas held.
    pub fn purge_released(&mut self, mmu: &mut impl Mmu) -> Purged<A> {
        self.purge_through(&mut |s, e| mmu.flush(s, e))
    }

    pub(crate) fn purge_through(
        &mut self,
        flush: &mut dyn FnMut(u64, u64) -> Refused,
    ) -> Purged<A> {
        let Some(p) = self.retiring.purge(flush) else {
            return Purged {
                flushed: None,
                released: Vec::new(),
            };
        };
        self.stats.purges += 1;
        let flushed = Some(p.span);
        Purged {
            flushed,
            released: self.settle(p),
        }
    }

    /// Counts the flush `p` reports and frees the ranges it released (and
    /// their pieces), or pools them; returns them. The detached ranges go
    /// back to the range allocator in one pass, in the order they were
    /// freed, so that ranges freed one after another, side by side, join
    /// before they reach its free space.
    fn settle(&mut self, mut p: lazy::Purged<Retired<A>>) -> Vec<Released<A>> {
        let (lo, hi) = p.span;
        self.stats.flushes += 1;
        self.stats.pages_flushed += (hi - lo) / PAGE;
        self.stats.refusals += p.refused;
        // Ranges still live in the range allocator that no pool takes
        // (grown in place, each piece an area of its own), by their place
        // in the list; the pools take theirs in the same pass.
        let mut live: Vec<usize> = Vec::new();
        let pools = &mut self.pools;
        let mut handles = p.released.iter_mut().enumerate().filter_map(|(i, r)| {
            let d = r.detached.take();
            if d.is_none() && !(r.what.single_area() && pools.put(r.start, r.span)) {
                live.push(i);
            }
            d
        });
        release_all(&mut self.range, &mut handles);
        for &i in &live {
            let r = &p.released[i];
            let freed = self.range.free(r.start);
            debug_assert!(freed.is_ok(), "freeing our own range {:#x}", r.start);
            if let Gone::Area(a) = &r.what {
                for &piece in a.pieces() {
                    let freed = self.range.free(piece);
                    debug_assert!(freed.is_ok(), "freeing our own piece {piece:#x}");
                }
            }
        }
        // The history keeps the last HISTORY: older ones would be overwritten.
        let skip = p.released.len().saturating_sub(HISTORY);
        for r in &p.released[skip..] {
            self.remember(r.start, r.start + r.span);
        }
        self.stats.released += p.released.len() as u64;
        p.released
    }

    /// Records `[start, end)` as released lately, for fault reports.
    pub(crate) fn remember(&mut self, start: u64, end: u64) {
        self.history[self.next_hist] = (start, end);
        self.next_hist = (self.next_hist + 1) % HISTORY;
    }
}

/// Releases the detached ranges of `handles` to `range` in one pass (a
/// refused one is freed by its start: a bug, asserted).
fn release_all<R: RangeAllocator>(range: &mut R, mut handles: impl Iterator<Item = Detached>) {
    while let Err((d, e)) = range.release_detached(&mut handles) {
        debug_assert!(false, "releasing our own range {:#x}: {e:?}", d.start());
        let _ = range.free(d.start());
    }
}
