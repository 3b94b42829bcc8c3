//! The contract every range allocator in mmkit keeps: [`RangeAllocator`].
//!
//! The tree allocator ([`crate::vmap::VmapAllocator`]) and the design it
//! replaced (`crate::baseline::LinearVmap`) both implement it, so every
//! workload, test and experiment runs on either through the same calls.
//!
//! # The contract
//! A range allocator manages a half-open space `[start, end)` of `u64`
//! addresses (`end` may be `u64::MAX`).
//! - [`alloc_in(size, align, vstart, vend)`](RangeAllocator::alloc_in)
//!   returns the **lowest** address `a` with `a % align == 0`, `vstart <= a`,
//!   `a + size <= vend` and `[a, a + size)` wholly free. The answer is unique,
//!   so two allocators that keep the contract return identical addresses.
//! - `free(addr)` frees the live area starting at `addr`; freed space merges
//!   with its free neighbours at once.
//! - `free_lazy(addr)` releases the area, but its space is not reusable until
//!   a purge. A purge makes every lazily freed area free and calls the flush
//!   hook once with the range covering them all (the kernel's one TLB flush
//!   per batch). Purges run on [`purge`](RangeAllocator::purge), when the
//!   lazily freed bytes exceed `lazy_max`, and once before an allocation
//!   would fail with [`AllocError::NoSpace`] (the allocation is then retried).

use crate::error::{AllocError, CheckError, FreeError};

/// The kernel's default lazy purge threshold for one CPU:
/// `fls(1) * 32 MiB` (see `lazy_max_pages()` in mm/vmalloc.c).
pub const DEFAULT_LAZY_MAX: u64 = 32 << 20;

/// Counters and sizes reported by [`RangeAllocator::stats`].
///
/// # Examples
/// ```
/// use mmkit::range::RangeAllocator;
/// use mmkit::vmap::VmapAllocator;
/// let mut va = VmapAllocator::new(0, 100).unwrap();
/// va.alloc(10, 1).unwrap();
/// let s = va.stats();
/// assert_eq!((s.live_areas, s.live_bytes, s.free_bytes, s.free_blocks), (1, 10, 90, 1));
/// ```
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangeStats {
    /// Number of maximal free blocks (0 for allocators that keep no free
    /// structure; then it is derived from the gaps between busy areas).
    pub free_blocks: u64,
    /// Bytes free and immediately reusable.
    pub free_bytes: u64,
    /// Length of the largest free block.
    pub largest_free: u64,
    /// Live (allocated, not freed) areas.
    pub live_areas: u64,
    /// Bytes in live areas.
    pub live_bytes: u64,
    /// Areas freed lazily and waiting for a purge.
    pub lazy_areas: u64,
    /// Bytes freed lazily and waiting for a purge.
    pub lazy_bytes: u64,
    /// Areas [detached](RangeAllocator::detach): no longer live, not free
    /// until released (0 for allocators that keep them live until then).
    #[cfg_attr(feature = "serde", serde(default))]
    pub detached_areas: u64,
    /// Bytes in detached areas.
    #[cfg_attr(feature = "serde", serde(default))]
    pub detached_bytes: u64,
    /// Purges that released something (explicit, threshold and
    /// allocation-failure purges alike). A purge that finds nothing lazy
    /// returns `false` and is not counted.
    pub purges: u64,
    /// Flushes issued: one per counted purge (a purge with nothing lazy
    /// issues none).
    pub flushes: u64,
    /// Heap bytes of metadata the allocator holds (nodes, arenas, indexes).
    pub metadata_bytes: u64,
}

/// A flush hook: called once per purge with the half-open range `[start,
/// end)` that covers every area the purge released.
///
/// It is `Send` with or without the `std` feature, so an allocator holding
/// one is `Send` everywhere (it can sit in a kernel's static spin lock) and
/// turning `std` on elsewhere in a build never breaks a `no_std` user.
pub type FlushHook = alloc::boxed::Box<dyn FnMut(u64, u64) + Send>;

/// A live area taken out of its allocator's live areas by
/// [`RangeAllocator::detach`]: its space is neither live nor free until
/// [`RangeAllocator::release_detached`] returns it to free space. Only
/// `detach` makes one and it cannot be copied, so an area is released at
/// most once; release gives it back to the allocator that detached it.
///
/// # Examples
/// ```
/// use mmkit::range::RangeAllocator;
/// use mmkit::vmap::VmapAllocator;
/// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
/// let a = va.alloc(0x1000, 1).unwrap();
/// let d = va.detach(a, a + 0x1000).unwrap();
/// assert_eq!((d.start(), d.end(), d.size()), (a, a + 0x1000, 0x1000));
/// ```
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a detached area's space is not free until it is released"]
pub struct Detached {
    start: u64,
    end: u64,
}

impl Detached {
    /// The detached area `[start, end)`; `start < end`.
    pub(crate) fn new(start: u64, end: u64) -> Self {
        debug_assert!(start < end);
        Detached { start, end }
    }

    /// Where the area starts.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// One past its last byte.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Its bytes.
    pub fn size(&self) -> u64 {
        self.end - self.start
    }
}

/// The range allocator contract (see the [module docs](self)).
pub trait RangeAllocator {
    /// The managed space `[start, end)`.
    fn space(&self) -> (u64, u64);

    /// Allocates `size` bytes aligned to `align` at the lowest address in
    /// `[vstart, vend)`. Limits outside the space are clamped to it.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] for `size == 0`, `align` not a power of two, or
    /// `vstart >= vend`; [`AllocError::NoSpace`] when nothing fits, also after
    /// one purge of lazily freed areas.
    fn alloc_in(
        &mut self,
        size: u64,
        align: u64,
        vstart: u64,
        vend: u64,
    ) -> Result<u64, AllocError>;

    /// Allocates anywhere in the space: `alloc_in(size, align, start, end)`.
    ///
    /// # Errors
    /// As [`alloc_in`](RangeAllocator::alloc_in).
    fn alloc(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        let (start, end) = self.space();
        self.alloc_in(size, align, start, end)
    }

    /// Allocates in `[vstart, vend)` where `policy` places it (see
    /// [`Policy`](crate::request::Policy)). [`Policy::Lowest`] is
    /// [`alloc_in`](RangeAllocator::alloc_in); an allocator that places by
    /// other policies overrides this, and by default they are refused.
    ///
    /// # Errors
    /// As [`alloc_in`](RangeAllocator::alloc_in); [`AllocError::Invalid`]
    /// for a policy the allocator does not place by, and
    /// [`AllocError::NoSpace`] for an exact address that is not free.
    ///
    /// [`Policy::Lowest`]: crate::request::Policy::Lowest
    fn alloc_placed(
        &mut self,
        size: u64,
        align: u64,
        (vstart, vend): (u64, u64),
        policy: crate::request::Policy,
    ) -> Result<u64, AllocError> {
        match policy {
            crate::request::Policy::Lowest => self.alloc_in(size, align, vstart, vend),
            _ => Err(AllocError::Invalid),
        }
    }

    /// Frees the live area that starts at `addr` and returns its size.
    ///
    /// # Errors
    /// [`FreeError::NotAllocated`] if no live area starts at `addr`.
    fn free(&mut self, addr: u64) -> Result<u64, FreeError>;

    /// Frees the live areas `areas`, each `(start, end)`, in order, as
    /// [`free`](RangeAllocator::free) of each start would. An allocator
    /// may join areas that follow each other in the list and touch before
    /// they reach its free space (one merge per run, where a free each
    /// would merge every area): the purge of a lazy list frees thousands
    /// at once, most of them freed in address order. By default, one
    /// [`free`](RangeAllocator::free) each.
    ///
    /// # Errors
    /// `(i, error)` for the first area `i` that is not a live area
    /// ([`FreeError::NotAllocated`]) or, where the allocator knows its
    /// areas' ends, one whose end is not `areas[i].1`
    /// ([`FreeError::SizeMismatch`]): the areas before `i` are freed, that
    /// one and those after it are unchanged.
    ///
    /// # Examples
    /// ```
    /// use mmkit::range::RangeAllocator;
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::FreeError;
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// let a = va.alloc(0x1000, 1).unwrap();
    /// let b = va.alloc(0x1000, 1).unwrap();
    /// assert_eq!(va.free_batch(&[(b, b + 0x1000), (a, a + 0x1000)]), Ok(()));
    /// assert_eq!(va.stats().free_blocks, 1); // joined again
    /// assert_eq!(va.free_batch(&[(a, a + 0x1000)]), Err((0, FreeError::NotAllocated)));
    /// ```
    fn free_batch(&mut self, areas: &[(u64, u64)]) -> Result<(), (usize, FreeError)> {
        free_each(self, areas)
    }

    /// Detaches the live area `[start, end)`: it stops being live (a
    /// [`free`](RangeAllocator::free), `free_lazy` or second `detach` of
    /// it is refused from now on), and its space is not reused until the
    /// returned handle goes to
    /// [`release_detached`](RangeAllocator::release_detached). A kernel's
    /// lazy `vfree` takes its area out of the busy index this way, and
    /// its purge, after the TLB flush, only merges.
    ///
    /// By default the area stays live inside the allocator until it is
    /// released (so its stats count it live and nothing refuses a second
    /// detach early), and the release frees it by its start: correct for
    /// every allocator, without the saving.
    ///
    /// # Errors
    /// [`FreeError::Invalid`] for `start >= end`;
    /// [`FreeError::NotAllocated`] if no live area starts at `start` and
    /// [`FreeError::SizeMismatch`] if it ends elsewhere, where the
    /// allocator keeps detached areas. Nothing changes then.
    ///
    /// # Examples
    /// ```
    /// use mmkit::range::RangeAllocator;
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::FreeError;
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// let a = va.alloc(0x1000, 1).unwrap();
    /// let d = va.detach(a, a + 0x1000).unwrap();
    /// assert_eq!(va.free(a), Err(FreeError::NotAllocated)); // not live
    /// assert_eq!(va.alloc(0x1000, 1), Ok(0x1000)); // nor free
    /// assert_eq!(va.release_detached([d]), Ok(()));
    /// assert_eq!(va.alloc(0x1000, 1), Ok(0));
    /// ```
    fn detach(&mut self, start: u64, end: u64) -> Result<Detached, FreeError> {
        if start >= end {
            return Err(FreeError::Invalid);
        }
        Ok(Detached::new(start, end))
    }

    /// Returns the detached `areas` to free space, in order. An allocator
    /// may join areas that follow each other and touch, as
    /// [`free_batch`](RangeAllocator::free_batch) does; it looks none up
    /// (the handles say they are detached).
    ///
    /// # Errors
    /// The first handle this allocator did not detach, as far as it can
    /// tell without a lookup (outside its space, or past the areas or
    /// bytes it holds detached), comes back with
    /// [`FreeError::NotAllocated`]; by default, the first whose free is
    /// refused, with that error. The areas before it are released, and
    /// those after it are not taken from `areas` (pass `&mut iter` to
    /// keep them).
    ///
    /// # Examples
    /// ```
    /// use mmkit::range::RangeAllocator;
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::FreeError;
    /// let mut va = VmapAllocator::new(0, 0x10000).unwrap();
    /// let mut other = VmapAllocator::new(0x10000, 0x20000).unwrap();
    /// let a = va.alloc(0x2000, 1).unwrap();
    /// let b = other.alloc(0x1000, 1).unwrap();
    /// let mut batch = vec![va.detach(a, a + 0x2000).unwrap(), other.detach(b, b + 0x1000).unwrap()];
    /// let (refused, why) = va.release_detached(batch.drain(..)).unwrap_err();
    /// assert_eq!((refused.start(), why), (b, FreeError::NotAllocated));
    /// assert_eq!(va.stats().free_bytes, 0x10000); // the first was released
    /// assert_eq!(other.release_detached([refused]), Ok(()));
    /// ```
    fn release_detached(
        &mut self,
        areas: impl IntoIterator<Item = Detached>,
    ) -> Result<(), (Detached, FreeError)> {
        release_each(self, areas, |a, d| a.free(d.start))
    }

    /// Releases the live area that starts at `addr` lazily and returns its
    /// size: the space becomes reusable at the next purge.
    ///
    /// # Errors
    /// [`FreeError::NotAllocated`] if no live area starts at `addr`.
    fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError>;

    /// Returns every lazily freed area to free space and calls `flush` once
    /// with the range covering them. Returns whether anything was purged
    /// (`flush` is not called when nothing was lazy). `flush` runs after
    /// the purge is complete, so a `flush` that panics leaves the allocator
    /// consistent.
    fn purge(&mut self, flush: &mut dyn FnMut(u64, u64)) -> bool;

    /// Sets the automatic purge threshold: a purge runs when lazily freed
    /// bytes become strictly greater than `bytes`.
    fn set_lazy_max(&mut self, bytes: u64);

    /// Installs the hook that automatic purges (threshold, allocation
    /// failure) call with their flush range. Without one they still purge.
    fn set_flush_hook(&mut self, hook: Option<FlushHook>);

    /// Counters and sizes.
    fn stats(&self) -> RangeStats;

    /// Verifies every internal invariant. For tests and `mmkit replay --check`.
    ///
    /// # Errors
    /// A [`CheckError`] naming the first violated invariant.
    fn check(&self) -> Result<(), CheckError>;
}

/// Frees that carry the area's size, for range allocators that can check
/// it (or, made without an index, need it): the calls
/// [`Locked`] and `lock::Guarded` forward besides the [`RangeAllocator`]
/// ones.
///
/// # Examples
/// ```
/// use mmkit::range::{RangeAllocator, SizedFree};
/// use mmkit::vmap::VmapAllocator;
/// use mmkit::FreeError;
///
/// fn release<A: SizedFree>(a: &mut A, addr: u64, size: u64) -> Result<u64, FreeError> {
///     a.free_sized(addr, size)
/// }
/// let mut va = VmapAllocator::new(0, 100).unwrap();
/// let a = RangeAllocator::alloc(&mut va, 10, 1).unwrap();
/// assert_eq!(release(&mut va, a, 9), Err(FreeError::SizeMismatch));
/// assert_eq!(release(&mut va, a, 10), Ok(10));
/// ```
pub trait SizedFree: RangeAllocator {
    /// Frees the live area `[addr, addr + size)`; returns `size`.
    ///
    /// # Errors
    /// [`FreeError::Invalid`] for `size == 0` or a range outside the
    /// space, [`FreeError::NotAllocated`] if no live area starts at
    /// `addr`, [`FreeError::SizeMismatch`] if it has another size (where
    /// the allocator can tell). Nothing changes then.
    fn free_sized(&mut self, addr: u64, size: u64) -> Result<u64, FreeError>;

    /// Frees the live area `[addr, addr + size)` lazily (as
    /// [`RangeAllocator::free_lazy`]); returns `size`.
    ///
    /// # Errors
    /// As [`free_sized`](SizedFree::free_sized).
    fn free_lazy_sized(&mut self, addr: u64, size: u64) -> Result<u64, FreeError>;
}

#[doc(hidden)]
/// Validates and clamps an allocation request against the space
/// `[start, end)`. Returns the clamped window, or `Invalid`.
///
/// Shared by every implementation so they reject exactly the same inputs.
///
/// # Errors
/// [`AllocError::Invalid`] for `size == 0`, `align` not a power of two or
/// `vstart >= vend`.
pub fn clamp_request(
    space: (u64, u64),
    size: u64,
    align: u64,
    vstart: u64,
    vend: u64,
) -> Result<(u64, u64), AllocError> {
    if size == 0 || !align.is_power_of_two() || vstart >= vend {
        return Err(AllocError::Invalid);
    }
    Ok((vstart.max(space.0), vend.min(space.1)))
}

/// The allocation path every range allocator shares: validate and clamp,
/// try; on failure purge lazily freed areas once and try again (the kernel's
/// purge-and-retry before reporting failure).
pub(crate) fn alloc_with_purge_retry<A: RangeAllocator>(
    a: &mut A,
    request: (u64, u64, u64, u64),
    try_alloc: fn(&mut A, u64, u64, u64, u64) -> Option<u64>,
    purge: fn(&mut A) -> bool,
) -> Result<u64, AllocError> {
    let (size, align, vstart, vend) = request;
    let (lo, hi) = clamp_request(a.space(), size, align, vstart, vend)?;
    if let Some(addr) = try_alloc(a, size, align, lo, hi) {
        return Ok(addr);
    }
    if purge(a) {
        if let Some(addr) = try_alloc(a, size, align, lo, hi) {
            return Ok(addr);
        }
    }
    Err(AllocError::NoSpace)
}

/// [`RangeAllocator::free_batch`] as one [`free`](RangeAllocator::free)
/// of each area's start: the default, and an allocator's own where it
/// cannot join runs.
pub(crate) fn free_each<A: RangeAllocator + ?Sized>(
    a: &mut A,
    areas: &[(u64, u64)],
) -> Result<(), (usize, FreeError)> {
    for (i, &(s, _)) in areas.iter().enumerate() {
        a.free(s).map_err(|e| (i, e))?;
    }
    Ok(())
}

/// [`RangeAllocator::release_detached`] for areas that stayed live in
/// their allocator: `free` frees each in turn, up to the first refusal.
pub(crate) fn release_each<A: RangeAllocator + ?Sized>(
    a: &mut A,
    areas: impl IntoIterator<Item = Detached>,
    mut free: impl FnMut(&mut A, &Detached) -> Result<u64, FreeError>,
) -> Result<(), (Detached, FreeError)> {
    for d in areas {
        if let Err(e) = free(a, &d) {
            return Err((d, e));
        }
    }
    Ok(())
}

/// Purges through the allocator's installed flush hook (`hook` names the
/// field), as the threshold and allocation-failure purges do.
pub(crate) fn purge_through_hook<A: RangeAllocator>(
    a: &mut A,
    hook: fn(&mut A) -> &mut Option<FlushHook>,
) -> bool {
    let mut out = HookOut {
        hook: hook(a).take(),
        a,
        field: hook,
    };
    let HookOut { a, hook, .. } = &mut out;
    match hook.as_mut() {
        Some(f) => a.purge(&mut |s, e| f(s, e)),
        None => a.purge(&mut |_, _| {}),
    }
}

/// A flush hook taken out of its allocator for one purge. Dropping it puts
/// the hook back, also when the hook panics: an unwind must not leave later
/// purges without it.
struct HookOut<'a, A> {
    a: &'a mut A,
    field: fn(&mut A) -> &mut Option<FlushHook>,
    hook: Option<FlushHook>,
}

impl<A> Drop for HookOut<'_, A> {
    fn drop(&mut self) {
        *(self.field)(self.a) = self.hook.take();
    }
}

#[doc(hidden)]
/// The lowest `a >= lo` with `a % align == 0` and `a + size <= hi`, if any.
/// Never overflows. `align` must be a power of two.
#[inline]
pub fn fit_in(lo: u64, hi: u64, size: u64, align: u64) -> Option<u64> {
    let mask = align - 1;
    let a = lo.checked_add(mask)? & !mask;
    let end = a.checked_add(size)?;
    (end <= hi).then_some(a)
}

/// Writes the calls a wrapper that puts a range allocator `R` behind a
/// lock forwards, each taking the lock once through the wrapper's
/// `lock()`, with their docs: the four [`RangeAllocator`] calls (`alloc`,
/// `alloc_in`, `free`, `free_lazy`) for any `R`, and the two
/// [`SizedFree`] ones for an `R` that has them. The wrappers
/// ([`Locked`], `lock::Guarded`) differ only in their lock. `impl[..]`
/// names the wrapper's generics other than `R`; the examples import
/// `$import` and declare the wrapper `va` with `$new`.
#[cfg(any(feature = "std", feature = "lock_api"))]
macro_rules! locked_range_calls {
    (impl[$($g:tt)*] $wrapper:ty, $import:literal, $new:literal) => {
    impl<$($g)* R: $crate::range::RangeAllocator> $wrapper {
        /// [`RangeAllocator::alloc`](crate::range::RangeAllocator::alloc) under the lock.
        ///
        /// # Errors
        /// As [`RangeAllocator::alloc_in`](crate::range::RangeAllocator::alloc_in).
        ///
        /// # Examples
        /// ```
        #[doc = concat!("use ", $import, ";")]
        /// use mmkit::vmap::VmapAllocator;
        #[doc = $new]
        /// assert_eq!(va.alloc(10, 8), Ok(0));
        /// assert_eq!(va.alloc(10, 8), Ok(16));
        /// ```
        pub fn alloc(&self, size: u64, align: u64) -> Result<u64, $crate::error::AllocError> {
            $crate::range::RangeAllocator::alloc(&mut *self.lock(), size, align)
        }

        /// [`RangeAllocator::alloc_in`](crate::range::RangeAllocator::alloc_in) under the lock.
        ///
        /// # Errors
        /// As [`RangeAllocator::alloc_in`](crate::range::RangeAllocator::alloc_in).
        ///
        /// # Examples
        /// ```
        #[doc = concat!("use ", $import, ";")]
        /// use mmkit::vmap::VmapAllocator;
        #[doc = $new]
        /// assert_eq!(va.alloc_in(10, 1, 50, 100), Ok(50));
        /// ```
        pub fn alloc_in(
            &self,
            size: u64,
            align: u64,
            vstart: u64,
            vend: u64,
        ) -> Result<u64, $crate::error::AllocError> {
            $crate::range::RangeAllocator::alloc_in(&mut *self.lock(), size, align, vstart, vend)
        }

        /// [`RangeAllocator::free`](crate::range::RangeAllocator::free) under the lock.
        ///
        /// # Errors
        /// As [`RangeAllocator::free`](crate::range::RangeAllocator::free).
        ///
        /// # Examples
        /// ```
        #[doc = concat!("use ", $import, ";")]
        /// use mmkit::vmap::VmapAllocator;
        #[doc = $new]
        /// let a = va.alloc(10, 1).unwrap();
        /// assert_eq!(va.free(a), Ok(10));
        /// assert!(va.free(a).is_err());
        /// ```
        pub fn free(&self, addr: u64) -> Result<u64, $crate::error::FreeError> {
            $crate::range::RangeAllocator::free(&mut *self.lock(), addr)
        }

        /// [`RangeAllocator::free_lazy`](crate::range::RangeAllocator::free_lazy) under the lock.
        ///
        /// # Errors
        /// As [`RangeAllocator::free_lazy`](crate::range::RangeAllocator::free_lazy).
        ///
        /// # Examples
        /// ```
        #[doc = concat!("use ", $import, ";")]
        /// use mmkit::vmap::VmapAllocator;
        #[doc = $new]
        /// let a = va.alloc(10, 1).unwrap();
        /// assert_eq!(va.free_lazy(a), Ok(10));
        /// assert_eq!(va.lock().stats().lazy_bytes, 10);
        /// ```
        pub fn free_lazy(&self, addr: u64) -> Result<u64, $crate::error::FreeError> {
            $crate::range::RangeAllocator::free_lazy(&mut *self.lock(), addr)
        }
    }

    /// Frees that carry the size.
    impl<$($g)* R: $crate::range::SizedFree> $wrapper {
        /// [`SizedFree::free_sized`](crate::range::SizedFree::free_sized)
        /// under the lock.
        ///
        /// # Errors
        /// As `free_sized`: a wrong size is [`FreeError::SizeMismatch`](crate::error::FreeError::SizeMismatch)
        /// where the allocator can tell.
        ///
        /// # Examples
        /// ```
        #[doc = concat!("use ", $import, ";")]
        /// use mmkit::vmap::VmapAllocator;
        /// use mmkit::FreeError;
        #[doc = $new]
        /// let a = va.alloc(10, 1).unwrap();
        /// assert_eq!(va.free_sized(a, 9), Err(FreeError::SizeMismatch));
        /// assert_eq!(va.free_sized(a, 10), Ok(10));
        /// ```
        pub fn free_sized(&self, addr: u64, size: u64) -> Result<u64, $crate::error::FreeError> {
            $crate::range::SizedFree::free_sized(&mut *self.lock(), addr, size)
        }

        /// [`SizedFree::free_lazy_sized`](crate::range::SizedFree::free_lazy_sized)
        /// under the lock.
        ///
        /// # Errors
        /// As `free_lazy_sized`.
        ///
        /// # Examples
        /// ```
        #[doc = concat!("use ", $import, ";")]
        /// use mmkit::vmap::VmapAllocator;
        #[doc = $new]
        /// let a = va.alloc(10, 1).unwrap();
        /// assert_eq!(va.free_lazy_sized(a, 10), Ok(10));
        /// assert_eq!(va.lock().stats().lazy_areas, 1);
        /// ```
        pub fn free_lazy_sized(&self, addr: u64, size: u64) -> Result<u64, $crate::error::FreeError> {
            $crate::range::SizedFree::free_lazy_sized(&mut *self.lock(), addr, size)
        }
    }
    };
}
#[cfg(any(feature = "std", feature = "lock_api"))]
pub(crate) use locked_range_calls;

/// A range allocator behind one lock, shareable between threads (the
/// kernel's single `vmap_area_lock`). Every method takes the lock once.
///
/// The lock is taken in turns: the thread that took it last may take it
/// again, up to 512 times in a row, while another thread waits, so the
/// allocator's cache lines change cores once per batch rather than at
/// almost every call (2 threads churning one allocator: 1.17-1.25x one
/// thread's time per pair, against 1.52-1.66x for a lock they alternate
/// on; `cargo bench -p mmkit --bench vmap -- locked_threads`). A waiter may
/// therefore wait for a busy holder's next 512 calls; one that finds the
/// lock free, or the holder idle, takes it at once. For latency-critical
/// callers, `lock::Guarded` (feature `lock_api`) takes any `lock_api`
/// lock instead.
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use mmkit::range::{Locked, RangeAllocator};
/// use mmkit::vmap::VmapAllocator;
///
/// let va = Arc::new(Locked::new(VmapAllocator::new(0, 1 << 30).unwrap()));
/// let t = {
///     let va = Arc::clone(&va);
///     std::thread::spawn(move || va.alloc(4096, 4096).unwrap())
/// };
/// let a = va.alloc(4096, 4096).unwrap();
/// let b = t.join().unwrap();
/// assert_ne!(a, b);
/// assert_eq!(va.lock().stats().live_areas, 2);
/// ```
#[cfg(feature = "std")]
#[derive(Debug, Default)]
pub struct Locked<R>(crate::sync::TurnMutex<R>);

#[cfg(feature = "std")]
impl<R: RangeAllocator> Locked<R> {
    /// Wraps `inner`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::range::Locked;
    /// use mmkit::vmap::VmapAllocator;
    /// let va = Locked::new(VmapAllocator::new(0, 100).unwrap());
    /// assert_eq!(va.alloc(10, 1), Ok(0));
    /// ```
    pub fn new(inner: R) -> Self {
        Locked(crate::sync::TurnMutex::new(inner))
    }

    /// Takes the lock for a sequence of operations. A panic while the lock
    /// was held does not poison it for others: every operation leaves the
    /// allocator consistent before it can panic.
    ///
    /// # Examples
    /// ```
    /// use mmkit::range::Locked;
    /// use mmkit::vmap::VmapAllocator;
    /// let va = Locked::new(VmapAllocator::new(0, 100).unwrap());
    /// let mut g = va.lock(); // several operations under one acquisition
    /// let a = g.alloc(10, 1).unwrap();
    /// g.free(a).unwrap();
    /// ```
    pub fn lock(&self) -> impl core::ops::DerefMut<Target = R> + '_ {
        self.0.lock()
    }

    /// Unwraps the allocator.
    ///
    /// # Examples
    /// ```
    /// use mmkit::range::Locked;
    /// use mmkit::vmap::VmapAllocator;
    /// let va = Locked::new(VmapAllocator::new(0, 100).unwrap());
    /// va.alloc(10, 1).unwrap();
    /// assert_eq!(va.into_inner().stats().live_areas, 1);
    /// ```
    pub fn into_inner(self) -> R {
        self.0.into_inner()
    }
}

#[cfg(feature = "std")]
locked_range_calls!(
    impl[] Locked<R>,
    "mmkit::range::Locked",
    "let va = Locked::new(VmapAllocator::new(0, 100).unwrap());"
);

/// Requests with any placement policy, on the exact allocator.
#[cfg(feature = "std")]
impl Locked<crate::vmap::VmapAllocator> {
    /// [`VmapAllocator::allocate`](crate::vmap::VmapAllocator::allocate)
    /// under the lock: any [`Policy`](crate::request::Policy).
    ///
    /// # Errors
    /// As `allocate`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::range::Locked;
    /// use mmkit::request::{Policy, Request};
    /// use mmkit::vmap::VmapAllocator;
    /// let va = Locked::new(VmapAllocator::new(0, 100).unwrap());
    /// let a = va.alloc(10, 1).unwrap();
    /// va.alloc(60, 1).unwrap();
    /// va.free(a).unwrap(); // free: [0, 10) and [70, 100)
    /// let best = Request::bytes(8).unwrap().policy(Policy::BestFit);
    /// assert_eq!(va.allocate(best), Ok(0));
    /// ```
    pub fn allocate(
        &self,
        req: crate::request::Request,
    ) -> Result<u64, crate::request::RequestError> {
        self.lock().allocate(req)
    }
}
