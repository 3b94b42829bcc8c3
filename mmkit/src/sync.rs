//! The lock the thread-safe wrappers use: std's, or loom's under
//! `--cfg loom` so `tests/loom.rs` model-checks the same code (as
//! crossbeam does). The non-loom build is unchanged.

#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Locks, ignoring poisoning: every critical section leaves the structure
/// consistent before anything that could panic.
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
