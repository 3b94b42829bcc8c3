//! The locks and atomics mmkit-vm shares between threads: std's, or loom's
//! under `--cfg loom`, so `tests/loom.rs` model-checks the purge and the
//! frame bookkeeping as they are (the way `mmkit::sync` does for the core
//! crate). The normal build is unchanged.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Locks, ignoring poisoning: every critical section leaves its structure
/// consistent before anything that can panic, so a poisoned lock is still
/// usable.
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
