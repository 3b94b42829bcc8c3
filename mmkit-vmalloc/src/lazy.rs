//! The lazy list, the stuck list and the purge: a freed range is cleared
//! at once and stays allocated until a flush has released it; a range the
//! flush refuses moves to the stuck list and every later purge tries it
//! again.
//!
//! ```text
//!  retire ──clear──> lazy ──purge: one flush over the span──> released (range freed,
//!     \ (eager: flush now)          |                         area handed back)
//!      \                            └── refused ranges ──> stuck ──next purge──┘
//! ```

use alloc::vec::Vec;

use mmkit::range::RangeAllocator;

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
    /// Set while a flush refused (part of) it.
    failed: bool,
}

impl<A> Retired<A> {
    pub(crate) fn new(start: u64, span: u64, what: Gone<A>) -> Self {
        Retired {
            start,
            span,
            what,
            failed: false,
        }
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

impl<R: RangeAllocator, A: AreaData> Vmalloc<R, A> {
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
        let r = Retired::new(start, span, what);
        let max = match (self.flush, when) {
            (_, When::Now) | (Flush::Eager, When::Policy) => None,
            (Flush::Lazy { max_bytes }, _) => Some(max_bytes),
            (Flush::Eager, When::Deferred) => Some(u64::MAX),
        };
        if let Some(max_bytes) = max {
            self.lazy.push(r);
            self.lazy_bytes += span;
            return Outcome {
                released: Vec::new(),
                purge_due: when != When::Deferred && self.lazy_bytes > max_bytes,
            };
        }
        if self.flush == Flush::Eager && !self.lazy.is_empty() {
            // Deferred frees wait: one flush takes them with this one.
            self.lazy.push(r);
            self.lazy_bytes += span;
            let purged = self.purge_through(&mut |s, e| mmu.flush(s, e));
            return Outcome {
                released: purged.released,
                purge_due: false,
            };
        }
        let mut list = alloc::vec![r];
        self.flush_list(&mut |s, e| mmu.flush(s, e), &mut list);
        Outcome {
            released: self.settle(list),
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
        let lazy = core::mem::take(&mut self.lazy);
        let mut list = core::mem::take(&mut self.stuck);
        if list.is_empty() {
            list = lazy;
            self.lazy_bytes = 0;
        } else if list.try_reserve(lazy.len()).is_ok() {
            list.extend(lazy);
            self.lazy_bytes = 0;
        } else {
            // No room to join the lists: the stuck ones only, this time.
            self.lazy = lazy;
        }
        if list.is_empty() {
            return Purged {
                flushed: None,
                released: list,
            };
        }
        self.stats.purges += 1;
        let flushed = self.flush_list(flush, &mut list);
        Purged {
            flushed: Some(flushed),
            released: self.settle(list),
        }
    }

    /// One flush over the span of `list`; marks the entries a refused range
    /// touches. Returns the span.
    fn flush_list(
        &mut self,
        flush: &mut dyn FnMut(u64, u64) -> Refused,
        list: &mut [Retired<A>],
    ) -> (u64, u64) {
        let lo = list.iter().map(|r| r.start).min().unwrap_or(0);
        let hi = list.iter().map(|r| r.start + r.span).max().unwrap_or(0);
        let refused = flush(lo, hi);
        self.stats.flushes += 1;
        self.stats.pages_flushed += (hi - lo) / PAGE;
        self.stats.refusals += refused.len() as u64;
        for (s, e) in refused {
            for r in list.iter_mut() {
                if r.start < e && s < r.start + r.span {
                    r.failed = true;
                }
            }
        }
        (lo, hi)
    }

    /// Frees the ranges of the entries the flush released and returns
    /// them; moves the others to the stuck list. Needs no scratch memory
    /// unless something failed.
    fn settle(&mut self, mut list: Vec<Retired<A>>) -> Vec<Released<A>> {
        let mut i = 0;
        while i < list.len() {
            if list[i].failed {
                let mut r = list.swap_remove(i);
                r.failed = false;
                self.stuck.push(r);
                continue;
            }
            let r = &list[i];
            let freed = self.range.free(r.start);
            debug_assert!(freed.is_ok(), "freeing our own range {:#x}", r.start);
            if let Gone::Area(a) = &r.what {
                for &p in a.pieces() {
                    let freed = self.range.free(p);
                    debug_assert!(freed.is_ok(), "freeing our own piece {p:#x}");
                }
            }
            self.history[self.next_hist] = (r.start, r.start + r.span);
            self.next_hist = (self.next_hist + 1) % HISTORY;
            i += 1;
        }
        self.stats.released += list.len() as u64;
        list
    }
}
