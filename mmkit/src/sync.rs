//! The lock the thread-safe wrappers use: parking_lot's, or loom's under
//! `--cfg loom` so `tests/loom.rs` model-checks the same code (as
//! crossbeam does).
//!
//! parking_lot's rather than std's: under contention it spins before it
//! parks, and a thread that releases it may take it again at once, so a
//! shared allocator changes cores less often. With 2 threads churning one
//! `range::Locked` (`cargo bench -p mmkit --bench vmap -- locked_threads`),
//! the time per pair over both threads was 1.95-2.70x that of one thread
//! with std's mutex and 1.67-1.94x with parking_lot's, three runs of each
//! (see the README).

#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard};

/// Locks, ignoring poisoning (loom's lock poisons, parking_lot's does
/// not): every critical section leaves the structure consistent before
/// anything that could panic.
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(loom)]
    return m.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    #[cfg(not(loom))]
    m.lock()
}

/// The value out of its lock, ignoring poisoning as [`lock`] does.
#[inline]
pub(crate) fn into_inner<T>(m: Mutex<T>) -> T {
    #[cfg(loom)]
    return m
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    #[cfg(not(loom))]
    m.into_inner()
}
