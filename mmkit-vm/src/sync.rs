//! The locks and atomics mmkit-vm shares between threads: std's, or loom's
//! under `--cfg loom`, so `tests/loom.rs` model-checks the purge and the
//! frame bookkeeping as they are (the way `mmkit::sync` does for the core
//! crate). The normal build is unchanged.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU64;
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU64;
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Locks, ignoring poisoning: every critical section leaves its structure
/// consistent before anything that can panic, so a poisoned lock is still
/// usable.
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The hash maps of areas and block records. Under loom their hasher is
/// fixed, so every run of a model visits entries in the same order (loom
/// replays each schedule and needs the same operations every time); in the
/// normal build it is std's randomly keyed one.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, MapHasher>;
#[cfg(loom)]
type MapHasher = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;
#[cfg(not(loom))]
type MapHasher = std::collections::hash_map::RandomState;
