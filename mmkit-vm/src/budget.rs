//! The mapping budget: the kernel lets a process hold at most
//! `/proc/sys/vm/max_map_count` mappings (VMAs, 65,530 by default), and an
//! `mmap` or an unmapping that would pass it fails with `ENOMEM`. The
//! budget is counted like frames and addresses: every run of consecutive
//! frames mapped is charged before its `mmap` and credited after the
//! unmapping that removes it, and a charge that would eat into the
//! headroom is refused with [`VmError::MapLimit`].
//!
//! ```text
//!  reservation  ---|run|---|run|run|---      --- reserved (PROT_NONE)
//!  VMAs         1   2   3   4   5   6        at most 2 per run + 1
//! ```
//!
//! A run is one VMA, and the reserved stretch after it may be another:
//! two per run bounds the reservation's VMAs (the kernel may merge
//! neighbours, never split a run unless part of it is unmapped, and every
//! unmapping here covers whole runs). The headroom is what an unmapping
//! needs on top: replacing the middle of a VMA splits it in two first,
//! and the kernel refuses that split at the limit.

use std::sync::atomic::Ordering;

use crate::error::VmError;
use crate::sync::AtomicU64;
use crate::sys;

/// VMAs charged for one run of consecutive frames.
pub(crate) const PER_RUN: u64 = 2;
/// VMAs never charged, so that unmappings in flight can split.
pub(crate) const HEADROOM: u64 = 64;
/// The kernel's default `max_map_count`, when the file is unreadable.
const KERNEL_DEFAULT: u64 = 65_530;

/// Mappings charged against a limit.
#[derive(Debug)]
pub(crate) struct MapBudget {
    limit: u64,
    used: AtomicU64,
}

impl MapBudget {
    /// A budget of `limit` VMAs.
    pub(crate) fn new(limit: u64) -> Self {
        MapBudget {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// The default budget: `max_map_count`, less the mappings the process
    /// holds now, less an eighth (at least 256) left to the rest of the
    /// process (its heap, its threads' stacks, other `Vm`s).
    pub(crate) fn default_limit() -> u64 {
        let limit = sys::max_map_count().unwrap_or(KERNEL_DEFAULT);
        let held = sys::mappings().map_or(0, |m| m.len() as u64);
        let reserve = (limit / 8).max(256);
        limit.saturating_sub(held).saturating_sub(reserve)
    }

    /// The limit in VMAs.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// VMAs charged now.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }

    /// Charges `runs` runs about to be mapped.
    ///
    /// # Errors
    /// [`VmError::MapLimit`] when they do not fit above the headroom;
    /// nothing is charged then.
    pub(crate) fn charge(&self, runs: u64) -> Result<(), VmError> {
        let cost = runs.saturating_mul(PER_RUN);
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                u.checked_add(cost)
                    .filter(|n| n.saturating_add(HEADROOM) <= self.limit)
            })
            .map(drop)
            .map_err(|_| VmError::MapLimit { limit: self.limit })
    }

    /// Credits `runs` runs unmapped (or never mapped after a charge).
    pub(crate) fn credit(&self, runs: u64) {
        let before = self.used.fetch_sub(runs * PER_RUN, Ordering::SeqCst);
        debug_assert!(before >= runs * PER_RUN, "mapping budget underflows");
    }
}
