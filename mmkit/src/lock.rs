//! Any allocator behind any lock (feature `lock_api`): [`Guarded`].
//!
//! mmkit's allocators take `&mut self`; a system that shares one between
//! CPUs or threads puts it behind a lock. [`Guarded`] is generic over the
//! [`lock_api::RawMutex`] that does the locking, as talc's `Talck` is, so
//! the same code runs in a kernel behind a spin lock (the `spin` crate with
//! its `lock_api` feature) and in user space behind `parking_lot`. It needs
//! neither `std` nor `unsafe` here.
//!
//! ```
//! use mmkit::lock::Guarded;
//! use mmkit::vmap::VmapAllocator;
//!
//! // The raw lock of `spin::Mutex` (crate `spin`, feature `lock_api`).
//! type Spin = spin::Mutex<()>;
//! let va: Guarded<Spin, VmapAllocator> =
//!     Guarded::new(VmapAllocator::new(0x1000, 0x10_0000).unwrap());
//! let a = va.alloc(0x2000, 0x1000).unwrap();
//! assert_eq!(a, 0x1000);
//! assert_eq!(va.free(a), Ok(0x2000));
//! // Several operations under one acquisition:
//! let live = va.with(|v| v.stats().live_areas);
//! assert_eq!(live, 0);
//! ```

/// An allocator `A` behind a lock whose raw mutex is `M`.
///
/// Every method takes the lock once. `Guarded` is `Sync` when `A` is `Send`
/// (every mmkit allocator is, with or without `std`), so it can be a
/// `static` of a kernel:
///
/// ```
/// use mmkit::lock::Guarded;
/// use mmkit::vmap::VmapAllocator;
/// type Spin = spin::Mutex<()>;
///
/// // `const fn new`: set up at boot, once the memory map is known.
/// static VMALLOC: Guarded<Spin, Option<VmapAllocator>> = Guarded::new(None);
///
/// VMALLOC.with(|v| *v = Some(VmapAllocator::new(0x1000, 1 << 30).unwrap()));
/// let a = VMALLOC.with(|v| v.as_mut().unwrap().alloc(4096, 4096)).unwrap();
/// assert_eq!(a, 0x1000);
/// ```
pub struct Guarded<M: lock_api::RawMutex, A>(lock_api::Mutex<M, A>);

impl<M: lock_api::RawMutex, A> Guarded<M, A> {
    /// Wraps `inner`. `const`, so a `Guarded` can initialise a `static`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lock::Guarded;
    /// use mmkit::vmap::VmapAllocator;
    /// let g: Guarded<spin::Mutex<()>, _> = Guarded::new(VmapAllocator::new(0, 100).unwrap());
    /// assert_eq!(g.alloc(10, 1), Ok(0));
    /// ```
    pub const fn new(inner: A) -> Self {
        Guarded(lock_api::Mutex::new(inner))
    }

    /// Takes the lock for a sequence of operations.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lock::Guarded;
    /// use mmkit::vmap::VmapAllocator;
    /// let g: Guarded<spin::Mutex<()>, _> = Guarded::new(VmapAllocator::new(0, 100).unwrap());
    /// let mut va = g.lock(); // held until dropped
    /// let a = va.alloc(10, 1).unwrap();
    /// va.free(a).unwrap();
    /// ```
    pub fn lock(&self) -> lock_api::MutexGuard<'_, M, A> {
        self.0.lock()
    }

    /// Takes the lock if it is free, without waiting.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lock::Guarded;
    /// use mmkit::vmap::VmapAllocator;
    /// let g: Guarded<spin::Mutex<()>, _> = Guarded::new(VmapAllocator::new(0, 100).unwrap());
    /// let held = g.lock();
    /// assert!(g.try_lock().is_none());
    /// drop(held);
    /// assert!(g.try_lock().is_some());
    /// ```
    pub fn try_lock(&self) -> Option<lock_api::MutexGuard<'_, M, A>> {
        self.0.try_lock()
    }

    /// Runs `f` on the allocator under the lock and returns its result.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lock::Guarded;
    /// use mmkit::vmap::VmapAllocator;
    /// let g: Guarded<spin::Mutex<()>, _> = Guarded::new(VmapAllocator::new(0, 100).unwrap());
    /// let (a, b) = g.with(|va| (va.alloc(10, 1).unwrap(), va.alloc(10, 1).unwrap()));
    /// assert_eq!((a, b), (0, 10));
    /// ```
    pub fn with<T>(&self, f: impl FnOnce(&mut A) -> T) -> T {
        f(&mut self.0.lock())
    }

    /// The allocator, without locking: `&mut self` proves no one else holds it.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lock::Guarded;
    /// use mmkit::vmap::VmapAllocator;
    /// let mut g: Guarded<spin::Mutex<()>, _> = Guarded::new(VmapAllocator::new(0, 100).unwrap());
    /// g.get_mut().set_lazy_max(0); // exclusive access: no locking
    /// ```
    pub fn get_mut(&mut self) -> &mut A {
        self.0.get_mut()
    }

    /// Unwraps the allocator.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lock::Guarded;
    /// use mmkit::vmap::VmapAllocator;
    /// let g: Guarded<spin::Mutex<()>, _> = Guarded::new(VmapAllocator::new(0, 100).unwrap());
    /// g.alloc(10, 1).unwrap();
    /// assert_eq!(g.into_inner().stats().live_areas, 1);
    /// ```
    pub fn into_inner(self) -> A {
        self.0.into_inner()
    }
}

crate::range::locked_range_calls!(
    impl[M: lock_api::RawMutex,] Guarded<M, R>,
    "mmkit::lock::Guarded",
    "let va: Guarded<spin::Mutex<()>, _> = Guarded::new(VmapAllocator::new(0, 100).unwrap());"
);

impl<M: lock_api::RawMutex, A: core::fmt::Debug> core::fmt::Debug for Guarded<M, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0.try_lock() {
            Some(a) => f.debug_tuple("Guarded").field(&&*a).finish(),
            None => f.write_str("Guarded(<locked>)"),
        }
    }
}

impl<M: lock_api::RawMutex, A: Default> Default for Guarded<M, A> {
    fn default() -> Self {
        Guarded::new(A::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FreeError;
    use crate::vmap::VmapAllocator;

    type Spin = spin::Mutex<()>;

    fn assert_sync<T: Sync + Send>() {}

    #[test]
    fn guarded_allocators_are_sync_and_lock_once_per_call() {
        assert_sync::<Guarded<Spin, VmapAllocator>>();
        assert_sync::<Guarded<Spin, crate::buddy::BuddyAllocator>>();
        let g: Guarded<Spin, VmapAllocator> = Guarded::new(VmapAllocator::new(0, 100).unwrap());
        assert_eq!(g.alloc(10, 1), Ok(0));
        assert_eq!(g.alloc_in(10, 1, 50, 100), Ok(50));
        let held = g.lock();
        assert!(g.try_lock().is_none());
        drop(held);
        assert_eq!(g.free(0), Ok(10));
        assert_eq!(g.free(0), Err(FreeError::NotAllocated));
        assert_eq!(g.free_lazy(50), Ok(10));
        assert_eq!(g.into_inner().stats().lazy_areas, 1);
    }
}
