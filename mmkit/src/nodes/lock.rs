//! The nodes' lock: a [`lock_api::Mutex`] over the caller's raw lock, or
//! loom's mutex under `--cfg loom` (so `tests/loom.rs` model-checks the same
//! code, whatever raw lock the type names).

use core::ops::{Deref, DerefMut};

/// A value behind the raw lock `R`.
#[cfg(not(loom))]
pub(super) struct Lock<R: lock_api::RawMutex, T>(lock_api::Mutex<R, T>);

/// A value behind loom's mutex (`R` names the lock outside loom).
#[cfg(loom)]
pub(super) struct Lock<R, T>(loom::sync::Mutex<T>, core::marker::PhantomData<fn() -> R>);

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
        return Lock(lock_api::Mutex::new(value));
        #[cfg(loom)]
        return Lock(loom::sync::Mutex::new(value), core::marker::PhantomData);
    }

    #[inline]
    pub(super) fn lock(&self) -> Guard<'_, R, T> {
        #[cfg(not(loom))]
        return Guard(self.0.lock());
        #[cfg(loom)]
        return Guard(
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            core::marker::PhantomData,
        );
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
