//! The nodes' lock: a [`lock_api::Mutex`] over the caller's raw lock, or
//! loom's mutex under `--cfg loom` (so `tests/loom.rs` model-checks the same
//! code, whatever raw lock the type names). With the `lock-stats`
//! feature each lock counts its acquisitions and those that found it held:
//! which lock threads share, and how often, shows in
//! [`NodesStats`](super::NodesStats) without a profiler (a load, a branch
//! and an atomic add per acquisition, so off by default).

use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU64, Ordering};

/// Reads of a held lock before a waiter falls back to the raw lock's own
/// wait: tens of microseconds of `spin_loop` hints, longer than the nodes
/// hold a lock.
#[cfg(not(loom))]
const SPINS: u32 = 1 << 10;

/// A value behind the raw lock `R`, and its counts.
#[cfg(not(loom))]
pub(super) struct Lock<R: lock_api::RawMutex, T>(lock_api::Mutex<R, T>, Counts);

/// A value behind loom's mutex (`R` names the lock outside loom).
#[cfg(loom)]
pub(super) struct Lock<R, T>(
    loom::sync::Mutex<T>,
    Counts,
    core::marker::PhantomData<fn() -> R>,
);

/// A lock's acquisitions, and those that found it held (both 0 without
/// `lock-stats`).
#[derive(Default)]
pub(super) struct Counts {
    taken: AtomicU64,
    waits: AtomicU64,
}

/// A held [`Lock`].
#[cfg(not(loom))]
pub(super) struct Guard<'a, R: lock_api::RawMutex, T>(lock_api::MutexGuard<'a, R, T>);

/// A held [`Lock`].
#[cfg(loom)]
pub(super) struct Guard<'a, R, T>(
    loom::sync::MutexGuard<'a, T>,
    core::marker::PhantomData<fn() -> R>,
);

impl<R: lock_api::RawMutex, T> Lock<R, T> {
    pub(super) fn new(value: T) -> Self {
        #[cfg(not(loom))]
        return Lock(lock_api::Mutex::new(value), Counts::default());
        #[cfg(loom)]
        return Lock(
            loom::sync::Mutex::new(value),
            Counts::default(),
            core::marker::PhantomData,
        );
    }

    /// The lock; with `lock-stats`, counted, and counted as a wait when
    /// it is held as the caller comes to it.
    #[inline]
    pub(super) fn lock(&self) -> Guard<'_, R, T> {
        #[cfg(feature = "lock-stats")]
        self.1.taken.fetch_add(1, Ordering::Relaxed);
        self.lock_uncounted()
    }

    /// The lock, not counted as taken (for the counters' readers), but
    /// counted as a wait when it is held.
    #[inline]
    pub(super) fn lock_uncounted(&self) -> Guard<'_, R, T> {
        #[cfg(not(loom))]
        {
            #[cfg(feature = "lock-stats")]
            if self.0.is_locked() {
                self.1.waits.fetch_add(1, Ordering::Relaxed);
            }
            Guard(self.0.lock())
        }
        #[cfg(loom)]
        {
            #[cfg(feature = "lock-stats")]
            if self.0.try_lock().is_err() {
                self.1.waits.fetch_add(1, Ordering::Relaxed);
            }
            Guard(
                self.0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                core::marker::PhantomData,
            )
        }
    }

    /// [`lock`](Self::lock) for a lock that other threads hold often and
    /// briefly (the free tree's, another node's): one attempt, then, when
    /// held, a wait on this CPU ([`SPINS`]) before `R`'s own. The try
    /// costs a few instructions over `R`'s lock, so a node's own
    /// acquisitions, which seldom wait, use [`lock`](Self::lock).
    #[inline]
    pub(super) fn lock_spinning(&self) -> Guard<'_, R, T> {
        #[cfg(not(loom))]
        {
            #[cfg(feature = "lock-stats")]
            self.1.taken.fetch_add(1, Ordering::Relaxed);
            if let Some(g) = self.0.try_lock() {
                return Guard(g);
            }
            #[cfg(feature = "lock-stats")]
            self.1.waits.fetch_add(1, Ordering::Relaxed);
            self.lock_held()
        }
        #[cfg(loom)]
        self.lock()
    }

    /// The lock, found held: read on this CPU until it is free, up to
    /// [`SPINS`] times, then `R`'s own wait. The nodes hold a lock for a
    /// free-tree search or a purge's give-back, a microsecond or so,
    /// less than a sleep and a wake-up take; `parking_lot`'s lock spins
    /// far shorter before it yields the CPU and sleeps, and two threads
    /// on two cores then take turns sleeping.
    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn lock_held(&self) -> Guard<'_, R, T> {
        for _ in 0..SPINS {
            core::hint::spin_loop();
            // Read-only while held: the waiter does not take the holder's
            // cache line away from it.
            if !self.0.is_locked() {
                if let Some(g) = self.0.try_lock() {
                    return Guard(g);
                }
            }
        }
        Guard(self.0.lock())
    }

    /// The acquisitions that found the lock held (0 without `lock-stats`).
    pub(super) fn waits(&self) -> u64 {
        self.1.waits.load(Ordering::Relaxed)
    }

    /// The acquisitions (0 without `lock-stats`).
    pub(super) fn taken(&self) -> u64 {
        self.1.taken.load(Ordering::Relaxed)
    }
}

impl<R: lock_api::RawMutex, T> Deref for Guard<'_, R, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<R: lock_api::RawMutex, T> DerefMut for Guard<'_, R, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<R: lock_api::RawMutex, T> core::fmt::Debug for Lock<R, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Lock")
    }
}
