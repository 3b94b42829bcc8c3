//! One lazy list and purge: when a freed range may be reused (seed 002).
//!
//! A range freed lazily is still mapped somewhere: some CPU may hold a
//! stale translation of it until a TLB flush covers it. So it waits on a
//! [`LazyList`] and is reused only after a purge, which flushes the span
//! covering the whole batch once (the kernel's one shootdown per batch)
//! and hands the items back to their owner to release.
//!
//! ```text
//!   push ──> lazy [a b c ..]  bytes, span [lo, hi)
//!              │  bytes > max (strictly): the push says a purge is due
//!              v
//!   take / purge: one flush over [lo, hi), then every item handed back
//!              │
//!              └── Retiring::purge: items a refused range touches ──> stuck
//!                                   (flushed again by the next purge)
//! ```
//!
//! The list decides *when* a range may be reused; what "released" means
//! stays with its owner, who gets the items back: the range allocator
//! merges them into its free space, the per-CPU pools pool them, a vmalloc
//! layer frees the area's frames. The item kept per range is generic: a
//! bare `(start, end)` pair, or whatever the owner needs back
//! ([`Extent`] says where it lies).
//!
//! A machine whose flush may refuse part of a range (a page table it
//! could not update, a CPU that did not answer) keeps a [`Retiring`]
//! list: the lazy list and a stuck list beside it. What a flush refused
//! stays allocated, on the stuck list, and every later purge flushes it
//! again with the lazy items, until a flush releases it.
//!
//! Invariants (checked by [`check`](LazyList::check)): `bytes` is the sum
//! of the lazy items' lengths; every lazy item is non-empty and lies
//! inside the span.

use alloc::vec::Vec;

use crate::ensure;
use crate::error::CheckError;

/// Where an item of a [`LazyList`] lies: the half-open range `[start, end)`
/// a flush must cover before the item may be reused.
///
/// # Examples
/// ```
/// use mmkit::lazy::Extent;
/// struct Area { start: u64, pages: u64 }
/// impl Extent for Area {
///     fn extent(&self) -> (u64, u64) {
///         (self.start, self.start + self.pages * 4096)
///     }
/// }
/// assert_eq!(Area { start: 0x1000, pages: 2 }.extent(), (0x1000, 0x3000));
/// assert_eq!((5, 9).extent(), (5, 9));
/// ```
pub trait Extent {
    /// The range `[start, end)`, `start < end`.
    fn extent(&self) -> (u64, u64);
}

impl Extent for (u64, u64) {
    #[inline]
    fn extent(&self) -> (u64, u64) {
        *self
    }
}

/// A batch taken off a [`LazyList`]: its items, in the order they were
/// pushed, and the span `[lo, hi)` that covers them all.
#[derive(Debug)]
pub struct Batch<T> {
    /// The items, oldest first.
    pub items: Vec<T>,
    /// The range the one flush of this batch covers.
    pub span: (u64, u64),
}

/// What [`Retiring::purge`] and [`Retiring::flush_now`] did.
#[derive(Debug)]
#[must_use]
pub struct Purged<T> {
    /// The span flushed (once).
    pub span: (u64, u64),
    /// The items the flush released: their ranges may be reused now.
    pub released: Vec<T>,
    /// The ranges the flush refused (each moved the items it touches to
    /// the stuck list).
    pub refused: u64,
}

/// Ranges freed lazily, waiting for one flush over their span: see the
/// [module docs](self).
///
/// # Examples
/// ```
/// use mmkit::lazy::LazyList;
///
/// let mut lazy: LazyList<(u64, u64)> = LazyList::new(0x2000);
/// assert!(!lazy.push((0x4000, 0x5000))); // 0x1000 bytes: not over
/// assert!(!lazy.push((0x1000, 0x2000))); // 0x2000: not over (strictly)
/// assert!(lazy.push((0x8000, 0x9000))); // 0x3000 > 0x2000: purge due
/// let mut flushes = Vec::new();
/// let mut freed = Vec::new();
/// assert!(lazy.purge(|lo, hi| flushes.push((lo, hi)), |r| freed.push(r)));
/// assert_eq!(flushes, [(0x1000, 0x9000)]); // once, over the whole batch
/// assert_eq!(freed, [(0x4000, 0x5000), (0x1000, 0x2000), (0x8000, 0x9000)]);
/// assert!(lazy.is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct LazyList<T> {
    /// The lazily freed items, oldest first.
    pub(crate) areas: Vec<T>,
    /// The sum of the lazy items' lengths.
    pub(crate) bytes: u64,
    /// The span covering the lazy items (meaningless while empty).
    pub(crate) lo: u64,
    pub(crate) hi: u64,
    /// A purge is due when `bytes` is strictly greater.
    max: u64,
}

impl<T> Default for LazyList<T> {
    /// An empty list with the kernel's one-CPU threshold,
    /// [`DEFAULT_LAZY_MAX`](crate::range::DEFAULT_LAZY_MAX).
    fn default() -> Self {
        LazyList::new(crate::range::DEFAULT_LAZY_MAX)
    }
}

impl<T> LazyList<T> {
    /// An empty list that says a purge is due once its bytes are strictly
    /// greater than `max` (`u64::MAX`: never).
    ///
    /// # Examples
    /// ```
    /// use mmkit::lazy::LazyList;
    /// let lazy: LazyList<(u64, u64)> = LazyList::new(1 << 20);
    /// assert_eq!((lazy.len(), lazy.bytes(), lazy.max()), (0, 0, 1 << 20));
    /// ```
    pub const fn new(max: u64) -> Self {
        LazyList {
            areas: Vec::new(),
            bytes: 0,
            lo: 0,
            hi: 0,
            max,
        }
    }

    /// The threshold: a purge is due when the lazy bytes exceed it.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Sets the threshold; returns whether a purge is due now.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lazy::LazyList;
    /// let mut lazy = LazyList::new(100);
    /// lazy.push((0, 50));
    /// assert!(!lazy.set_max(50));
    /// assert!(lazy.set_max(49));
    /// ```
    pub fn set_max(&mut self, max: u64) -> bool {
        self.max = max;
        self.over()
    }

    /// Whether the lazy bytes exceed the threshold (strictly).
    #[inline]
    pub fn over(&self) -> bool {
        self.bytes > self.max
    }

    /// The lazy items.
    pub fn len(&self) -> usize {
        self.areas.len()
    }

    /// Whether nothing is lazy: a purge would do nothing.
    pub fn is_empty(&self) -> bool {
        self.areas.is_empty()
    }

    /// The lazy items' bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The span covering the lazy items, if any.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lazy::LazyList;
    /// let mut lazy = LazyList::new(u64::MAX);
    /// assert_eq!(lazy.span(), None);
    /// lazy.push((30, 40));
    /// lazy.push((10, 20));
    /// assert_eq!(lazy.span(), Some((10, 40)));
    /// ```
    pub fn span(&self) -> Option<(u64, u64)> {
        (!self.areas.is_empty()).then_some((self.lo, self.hi))
    }

    /// The lazy items, oldest first.
    pub fn iter(&self) -> core::slice::Iter<'_, T> {
        self.areas.iter()
    }

    /// Heap bytes the list holds (its capacity).
    pub fn heap_bytes(&self) -> usize {
        self.areas.capacity() * core::mem::size_of::<T>()
    }

    /// Takes every lazy item off the list with the span covering them;
    /// `None` when nothing is lazy. The caller flushes the span once, and
    /// releases the items after the flush, unless nothing can reach them
    /// before it returns (it holds the only reference, `&mut`). Hand the
    /// emptied vector back with [`recycle`](Self::recycle) to keep its
    /// capacity.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lazy::LazyList;
    /// let mut lazy = LazyList::new(u64::MAX);
    /// lazy.push((8, 12));
    /// lazy.push((0, 4));
    /// let mut b = lazy.take().unwrap();
    /// assert_eq!((b.span, &b.items[..]), ((0, 12), &[(8, 12), (0, 4)][..]));
    /// assert_eq!((lazy.len(), lazy.bytes()), (0, 0));
    /// b.items.clear();
    /// lazy.recycle(b.items); // the next batch allocates nothing
    /// assert!(lazy.take().is_none());
    /// ```
    pub fn take(&mut self) -> Option<Batch<T>> {
        if self.areas.is_empty() {
            return None;
        }
        self.bytes = 0;
        Some(Batch {
            items: core::mem::take(&mut self.areas),
            span: (self.lo, self.hi),
        })
    }

    /// Gives the list an emptied vector from [`take`](Self::take) back, so
    /// the next batch reuses its capacity. A vector that is not empty, or
    /// a list that filled again meanwhile, keeps what it has.
    pub fn recycle(&mut self, buf: Vec<T>) {
        if buf.is_empty() && self.areas.is_empty() && buf.capacity() > self.areas.capacity() {
            self.areas = buf;
        }
    }
}

impl<T: Extent> LazyList<T> {
    /// Puts `item` on the list; returns whether a purge is due (the lazy
    /// bytes exceed the threshold, strictly).
    ///
    /// # Complexity
    /// O(1) amortized.
    #[inline]
    pub fn push(&mut self, item: T) -> bool {
        let (s, e) = item.extent();
        debug_assert!(s < e, "an empty lazy range at {s:#x}");
        if self.areas.is_empty() {
            (self.lo, self.hi) = (s, e);
        } else {
            (self.lo, self.hi) = (self.lo.min(s), self.hi.max(e));
        }
        self.areas.push(item);
        self.bytes += e - s;
        self.over()
    }

    /// The plain purge: takes the batch, calls `flush` once with its span,
    /// then hands every item to `release`, oldest first. Returns whether
    /// anything was lazy (nothing is called otherwise).
    ///
    /// # Examples
    /// ```
    /// use mmkit::lazy::LazyList;
    /// let mut lazy = LazyList::new(u64::MAX);
    /// assert!(!lazy.purge(|_, _| unreachable!(), |_: (u64, u64)| unreachable!()));
    /// lazy.push((0, 8));
    /// let mut n = 0;
    /// assert!(lazy.purge(|lo, hi| assert_eq!((lo, hi), (0, 8)), |_| n += 1));
    /// assert_eq!(n, 1);
    /// ```
    pub fn purge(&mut self, flush: impl FnOnce(u64, u64), mut release: impl FnMut(T)) -> bool {
        let Some(mut batch) = self.take() else {
            return false;
        };
        flush(batch.span.0, batch.span.1);
        for item in batch.items.drain(..) {
            release(item);
        }
        self.recycle(batch.items);
        true
    }

    /// Verifies the invariants of the [module docs](self).
    ///
    /// # Errors
    /// A [`CheckError`] naming the first broken one.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lazy::LazyList;
    /// let mut lazy = LazyList::new(10);
    /// lazy.push((0, 4));
    /// lazy.check().unwrap();
    /// ```
    pub fn check(&self) -> Result<(), CheckError> {
        let mut sum = 0u64;
        for r in &self.areas {
            let (s, e) = r.extent();
            ensure!(s < e, Layout @ s, "empty lazy area at {s:#x}");
            ensure!(
                self.lo <= s && e <= self.hi,
                Bounds @ s,
                "lazy area {s:#x} outside the flush range"
            );
            sum = sum.saturating_add(e - s);
        }
        ensure!(
            sum == self.bytes,
            Accounting,
            "lazy bytes {sum} != counter {}",
            self.bytes
        );
        Ok(())
    }
}

/// A [`LazyList`] and a stuck list beside it, for a machine whose flush
/// may refuse part of its range: see the [module docs](self).
///
/// # Examples
/// ```
/// use mmkit::lazy::Retiring;
/// let mut r = Retiring::new(0x1000);
/// assert!(!r.push((0x2000, 0x3000)));
/// // An eager free whose flush is refused: stuck, not released.
/// let p = r.flush_now((0x8000, 0x9000), |_, _| [(0x8000, 0x9000)]);
/// assert!(p.released.is_empty());
/// // The next purge flushes both once, over the span of both.
/// let p = r.purge(|lo, hi| { assert_eq!((lo, hi), (0x2000, 0x9000)); [] }).unwrap();
/// assert_eq!(p.released, [(0x8000, 0x9000), (0x2000, 0x3000)]);
/// ```
#[derive(Debug, Clone)]
pub struct Retiring<T> {
    lazy: LazyList<T>,
    /// Items a flush refused, retried with the next purge.
    stuck: Vec<T>,
}

impl<T> Retiring<T> {
    /// Empty lists; a purge is due past `max` lazy bytes, as
    /// [`LazyList::new`].
    pub const fn new(max: u64) -> Self {
        Retiring {
            lazy: LazyList::new(max),
            stuck: Vec::new(),
        }
    }

    /// The lazy list (its threshold, bytes, items).
    pub fn lazy(&self) -> &LazyList<T> {
        &self.lazy
    }

    /// The lazy list, to change its threshold or take its items.
    pub fn lazy_mut(&mut self) -> &mut LazyList<T> {
        &mut self.lazy
    }

    /// The items a flush refused, waiting for the next purge.
    pub fn stuck(&self) -> &[T] {
        &self.stuck
    }

    /// Whether nothing is lazy or stuck: a purge would do nothing.
    pub fn is_empty(&self) -> bool {
        self.lazy.is_empty() && self.stuck.is_empty()
    }

    /// Gives an emptied vector of released items back (from
    /// [`purge`](Self::purge)), so the lazy list's next batch reuses its
    /// capacity ([`LazyList::recycle`]).
    pub fn recycle(&mut self, buf: Vec<T>) {
        self.lazy.recycle(buf);
    }
}

impl<T: Extent> Retiring<T> {
    /// [`LazyList::push`]: returns whether a purge is due.
    #[inline]
    pub fn push(&mut self, item: T) -> bool {
        self.lazy.push(item)
    }

    /// The purge of a machine whose flush may refuse part of its range:
    /// the stuck items and the lazy ones are flushed together, once, over
    /// the span covering them all; `flush` returns the ranges it refused.
    /// Every item a refused range touches goes to the stuck list; the
    /// others come back, released. `None` when nothing is lazy or stuck
    /// (`flush` is not called).
    ///
    /// Joining the two lists needs room for both: when that room cannot
    /// be had, this purge takes the stuck items only (the lazy ones wait
    /// for the next).
    ///
    /// # Examples
    /// ```
    /// use mmkit::lazy::Retiring;
    /// let mut r = Retiring::new(u64::MAX);
    /// r.push((0, 4));
    /// r.push((8, 12));
    /// // The machine refuses [8, 9): the second item stays, stuck.
    /// let p = r.purge(|lo, hi| {
    ///     assert_eq!((lo, hi), (0, 12));
    ///     vec![(8, 9)]
    /// }).unwrap();
    /// assert_eq!((p.released, p.refused), (vec![(0, 4)], 1));
    /// assert_eq!(r.stuck(), &[(8, 12)]);
    /// // The next purge retries it, alone.
    /// let p = r.purge(|lo, hi| { assert_eq!((lo, hi), (8, 12)); vec![] }).unwrap();
    /// assert_eq!(p.released, vec![(8, 12)]);
    /// assert!(r.is_empty());
    /// ```
    pub fn purge<I>(&mut self, flush: impl FnOnce(u64, u64) -> I) -> Option<Purged<T>>
    where
        I: IntoIterator<Item = (u64, u64)>,
    {
        let mut list = core::mem::take(&mut self.stuck);
        if list.is_empty() {
            list = self.lazy.take().map_or_else(Vec::new, |b| b.items);
        } else if list.try_reserve(self.lazy.len()).is_ok() {
            if let Some(mut b) = self.lazy.take() {
                list.append(&mut b.items);
                self.lazy.recycle(b.items);
            }
        }
        if list.is_empty() {
            return None;
        }
        Some(self.flush_refusable(list, flush))
    }

    /// Flushes `item` at once, alone (an eager free): it comes back
    /// released, or goes to the stuck list when the flush refuses part of
    /// it.
    ///
    /// # Examples
    /// ```
    /// use mmkit::lazy::Retiring;
    /// let mut r = Retiring::new(u64::MAX);
    /// let p = r.flush_now((4, 8), |_, _| [(4, 5)]);
    /// assert!(p.released.is_empty());
    /// assert_eq!(r.stuck(), &[(4, 8)]);
    /// ```
    pub fn flush_now<I>(&mut self, item: T, flush: impl FnOnce(u64, u64) -> I) -> Purged<T>
    where
        I: IntoIterator<Item = (u64, u64)>,
    {
        self.flush_refusable(alloc::vec![item], flush)
    }

    /// One flush over the span of `list`, which is not empty; the items a
    /// refused range touches go to the stuck list, the rest come back.
    fn flush_refusable<I>(
        &mut self,
        mut list: Vec<T>,
        flush: impl FnOnce(u64, u64) -> I,
    ) -> Purged<T>
    where
        I: IntoIterator<Item = (u64, u64)>,
    {
        // One pass (a purge's list holds thousands); `list` is not empty.
        let (lo, hi) = list.iter().fold((u64::MAX, 0), |(lo, hi), r| {
            let (s, e) = r.extent();
            (lo.min(s), hi.max(e))
        });
        let mut refused = 0;
        // Which items a refused range touches: no scratch memory unless
        // something was refused.
        let mut failed: Vec<bool> = Vec::new();
        for (s, e) in flush(lo, hi) {
            refused += 1;
            if failed.is_empty() {
                failed.resize(list.len(), false);
            }
            for (f, r) in failed.iter_mut().zip(&list) {
                let (rs, re) = r.extent();
                *f |= rs < e && s < re;
            }
        }
        if failed.contains(&true) {
            let mut released = Vec::with_capacity(list.len());
            for (item, f) in list.into_iter().zip(failed) {
                if f {
                    self.stuck.push(item);
                } else {
                    released.push(item);
                }
            }
            list = released;
        }
        Purged {
            span: (lo, hi),
            released: list,
            refused,
        }
    }

    /// Verifies the lazy list's invariants and that no stuck item is
    /// empty.
    ///
    /// # Errors
    /// A [`CheckError`] naming the first broken one.
    pub fn check(&self) -> Result<(), CheckError> {
        self.lazy.check()?;
        for r in &self.stuck {
            let (s, e) = r.extent();
            ensure!(s < e, Layout @ s, "empty stuck area at {s:#x}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
