//! [`LockedZone`]: the per-CPU page lists shared by threads, each CPU's
//! lists behind their own lock and the zone behind another.

use alloc::boxed::Box;
use core::sync::atomic::{AtomicU8, Ordering};
use lock_api::{Mutex, MutexGuard, RawMutex};

use super::*;

/// One CPU's lists on their own cache lines.
#[repr(align(128))]
struct Padded<M: RawMutex>(Mutex<M, PcpLists>);

fn lock<M: RawMutex, T>(m: &Mutex<M, T>) -> MutexGuard<'_, M, T> {
    m.lock()
}

/// The owner tags of a shared zone, striped so that frames next to each
/// other have their tags on different cache lines.
///
/// A refill hands a CPU a run of neighbouring frames, and the next
/// refill of another CPU the run after it; with one byte per frame in
/// frame order, the two CPUs' tags would share the line at the seam and
/// bounce it between them on every pair (the kernel's 64-byte `struct
/// page` never shares a line). Here the tags are `64 × lines` bytes,
/// `lines` a power of two, and frame `i`'s tag is byte `i >> log2(lines)`
/// of 64-byte group `i mod lines`: frames share a line only when they
/// are a multiple of `lines` apart (16 MiB of frames in a 1 GiB zone).
struct Tags {
    tags: Box<[AtomicU8]>,
    /// `log2(lines)`.
    shift: u32,
}

impl Tags {
    fn new(span: usize) -> Self {
        let lines = span.div_ceil(64).next_power_of_two();
        Tags {
            tags: (0..lines * 64).map(|_| AtomicU8::new(0)).collect(),
            shift: lines.trailing_zeros(),
        }
    }

    /// The tag of frame index `i` (below the span).
    #[inline]
    fn at(&self, i: usize) -> &AtomicU8 {
        let lines = 1usize << self.shift;
        &self.tags[(i & (lines - 1)) << 6 | i >> self.shift]
    }
}

/// A zone shared by threads or CPUs: per-CPU lists behind one lock each
/// (the kernel's `pcp->lock`, uncontended when each caller uses its own
/// CPU) and the buddy allocator behind the zone lock, taken only to
/// refill, drain, and for requests without a pcp list. Lock order: a
/// CPU's lists, then the zone. The lock is any `lock_api` raw mutex (a
/// spin lock in a kernel, `no_std`); [`ConcurrentZone`](super::ConcurrentZone)
/// is this behind `parking_lot`'s (feature `std`).
///
/// ```
/// use mmkit::buddy::pcp::{ConcurrentZone, PcpConfig};
/// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
/// let mut b = BuddyAllocator::new(0, 4096, BuddyConfig::default()).unwrap();
/// b.add_free_range(0, 4096).unwrap();
/// let z = ConcurrentZone::new(b, PcpConfig::default()).unwrap();
/// std::thread::scope(|s| {
///     for cpu in 0..2 {
///         let z = &z;
///         s.spawn(move || {
///             let p = z.alloc(cpu, 0, MigrateType::Movable).unwrap();
///             z.free(cpu, p, 0).unwrap();
///         });
///     }
/// });
/// z.drain_all();
/// assert_eq!(z.with_zone(|b| b.free_pages()), 4096);
/// ```
pub struct LockedZone<M: RawMutex> {
    start: u64,
    max_order: u8,
    pageblock_order: u8,
    cfg: PcpConfig,
    zone: Mutex<M, BuddyAllocator>,
    cpus: Box<[Padded<M>]>,
    /// Frames in the span.
    span: usize,
    owner: Tags,
}

impl<M: RawMutex> core::fmt::Debug for LockedZone<M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LockedZone")
            .field("start_pfn", &self.start)
            .field("config", &self.cfg)
            .finish()
    }
}

impl<M: RawMutex> LockedZone<M> {
    /// Puts per-CPU lists in front of `zone` (see [`PcpZone::new`]).
    ///
    /// # Errors
    /// [`AllocError::Invalid`] for a bad [`PcpConfig`].
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{ConcurrentZone, PcpConfig};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let z = ConcurrentZone::new(zone, PcpConfig { cpus: 2, ..PcpConfig::default() }).unwrap();
    /// std::thread::scope(|s| {
    ///     for cpu in 0..2 {
    ///         let z = &z;
    ///         s.spawn(move || {
    ///             let p = z.alloc(cpu, 0, MigrateType::Movable).unwrap();
    ///             z.free(cpu, p, 0).unwrap();
    ///         });
    ///     }
    /// });
    /// z.into_pcp_zone().check().unwrap();
    /// ```
    pub fn new(zone: BuddyAllocator, cfg: PcpConfig) -> Result<Self, AllocError> {
        if !cfg.valid() {
            return Err(AllocError::Invalid);
        }
        let span = zone.frames.len();
        Ok(LockedZone {
            start: zone.start,
            max_order: zone.cfg.max_order,
            pageblock_order: zone.cfg.pageblock_order,
            cfg,
            zone: Mutex::new(zone),
            cpus: (0..cfg.cpus)
                .map(|_| Padded(Mutex::new(PcpLists::new())))
                .collect(),
            span,
            owner: Tags::new(span),
        })
    }

    /// Runs `f` on the buddy allocator under the zone lock.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{ConcurrentZone, PcpConfig};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig};
    /// let zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// let z = ConcurrentZone::new(zone, PcpConfig::default()).unwrap();
    /// z.with_zone(|b| b.add_free_range(0, 1024)).unwrap(); // memory hot-added later
    /// assert_eq!(z.with_zone(|b| b.free_pages()), 1024);
    /// ```
    pub fn with_zone<R>(&self, f: impl FnOnce(&mut BuddyAllocator) -> R) -> R {
        f(&mut lock(&self.zone))
    }

    /// Traffic counters of `cpu` (zero for an unknown CPU).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{ConcurrentZone, PcpConfig};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let z = ConcurrentZone::new(zone, PcpConfig::default()).unwrap();
    /// z.alloc(1, 0, MigrateType::Movable).unwrap();
    /// assert_eq!(z.stats(1).refills, 1);
    /// ```
    pub fn stats(&self, cpu: usize) -> PcpStats {
        self.cpus
            .get(cpu)
            .map_or_else(PcpStats::default, |c| lock(&c.0).stats)
    }

    #[inline]
    fn idx(&self, pfn: u64) -> Option<usize> {
        let i = pfn.checked_sub(self.start)?;
        (i < self.span as u64).then_some(i as usize)
    }

    /// [`PcpZone::alloc`] for a shared zone.
    ///
    /// # Errors
    /// As [`PcpZone::alloc`].
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{ConcurrentZone, PcpConfig};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let z = ConcurrentZone::new(zone, PcpConfig::default()).unwrap();
    /// let p = z.alloc(0, 2, MigrateType::Movable).unwrap();
    /// assert_eq!(p % 4, 0);
    /// ```
    #[inline]
    pub fn alloc(&self, cpu: usize, order: u8, mt: MigrateType) -> Result<u64, AllocError> {
        let c = self.cpus.get(cpu).ok_or(AllocError::Invalid)?;
        if order > self.max_order {
            return Err(AllocError::Invalid);
        }
        let li = pcp_index(order, mt, self.pageblock_order);
        let pfn = match li.and_then(|li| lock(&c.0).pop(li, order)) {
            Some(pfn) => pfn,
            None => self.alloc_slow(c, li, order, mt)?,
        };
        let owner = self.owner.at((pfn - self.start) as usize);
        owner.store(tag(order, mt), Ordering::Release);
        Ok(pfn)
    }

    /// An empty list is refilled under the zone lock; a request without
    /// a list goes to the zone; when the zone has nothing, every CPU is
    /// drained and the zone asked once more.
    #[cold]
    #[inline(never)]
    fn alloc_slow(
        &self,
        c: &Padded<M>,
        li: Option<usize>,
        order: u8,
        mt: MigrateType,
    ) -> Result<u64, AllocError> {
        match li {
            Some(li) => {
                let mut lists = lock(&c.0);
                // A free on this CPU may have come in since the pop.
                if let Some(pfn) = lists.pop(li, order) {
                    return Ok(pfn);
                }
                lists.refill(&mut lock(&self.zone), li, self.cfg.batch);
                if let Some(pfn) = lists.pop(li, order) {
                    return Ok(pfn);
                }
            }
            None => lock(&c.0).stats.direct += 1,
        }
        if let Ok(pfn) = lock(&self.zone).alloc(order, mt) {
            return Ok(pfn);
        }
        self.drain_all();
        lock(&self.zone).alloc(order, mt)
    }

    /// [`PcpZone::free`] for a shared zone; the ownership check is one
    /// atomic compare-exchange, so two threads freeing one block cannot
    /// both succeed.
    ///
    /// # Errors
    /// As [`PcpZone::free`].
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{ConcurrentZone, PcpConfig};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let z = ConcurrentZone::new(zone, PcpConfig::default()).unwrap();
    /// let p = z.alloc(0, 0, MigrateType::Movable).unwrap();
    /// assert!(z.free(1, p, 0).is_ok());
    /// assert!(z.free(1, p, 0).is_err()); // double free refused
    /// ```
    #[inline]
    pub fn free(&self, cpu: usize, pfn: u64, order: u8) -> Result<(), FreeError> {
        let c = self.cpus.get(cpu).ok_or(FreeError::Invalid)?;
        if order > self.max_order {
            return Err(FreeError::Invalid);
        }
        let i = self.idx(pfn).ok_or(FreeError::Invalid)?;
        let owner = self.owner.at(i);
        let t = owner.load(Ordering::Acquire);
        let mt = match untag(t) {
            Some((o, mt)) if o == order => mt,
            _ => return Err(FreeError::NotAllocated),
        };
        owner
            .compare_exchange(t, 0, Ordering::AcqRel, Ordering::Acquire)
            .map_err(|_| FreeError::NotAllocated)?;
        let Some(li) = pcp_index(order, mt, self.pageblock_order) else {
            return self.free_direct(c, pfn, order);
        };
        let mut lists = lock(&c.0);
        lists.push(li, order, pfn);
        if lists.count > u64::from(self.cfg.high) {
            self.free_drain(&mut lists, li);
        }
        Ok(())
    }

    /// A free without a pcp list: straight to the zone.
    #[cold]
    #[inline(never)]
    fn free_direct(&self, c: &Padded<M>, pfn: u64, order: u8) -> Result<(), FreeError> {
        lock(&c.0).stats.direct += 1;
        lock(&self.zone).free(pfn, order)
    }

    /// The CPU holds more than `high` pages: the oldest go back to the
    /// zone (lock order: the CPU's lists, then the zone).
    #[cold]
    #[inline(never)]
    fn free_drain(&self, lists: &mut PcpLists, li: usize) {
        let target = u64::from(self.cfg.high.saturating_sub(self.cfg.batch));
        lists.free_bulk(&mut lock(&self.zone), li, target);
    }

    /// Returns every page on every CPU's lists to the zone.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{ConcurrentZone, PcpConfig};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let z = ConcurrentZone::new(zone, PcpConfig::default()).unwrap();
    /// let p = z.alloc(0, 0, MigrateType::Movable).unwrap();
    /// z.free(0, p, 0).unwrap();
    /// z.drain_all();
    /// assert_eq!(z.with_zone(|b| b.free_pages()), 1024);
    /// ```
    pub fn drain_all(&self) {
        for c in self.cpus.iter() {
            let mut lists = lock(&c.0);
            if lists.count > 0 {
                lists.free_bulk(&mut lock(&self.zone), 0, 0);
            }
        }
    }

    /// The invariants of [`PcpZone::check`], under every CPU's lock and
    /// the zone lock. The owner tags change outside the locks, so call
    /// it with no `alloc` or `free` in flight (a quiescent zone).
    ///
    /// # Errors
    /// The first broken invariant.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{ConcurrentZone, PcpConfig};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let z = ConcurrentZone::new(zone, PcpConfig::default()).unwrap();
    /// let p = z.alloc(1, 0, MigrateType::Movable).unwrap();
    /// z.check().unwrap();
    /// z.free(0, p, 0).unwrap();
    /// z.check().unwrap();
    /// ```
    pub fn check(&self) -> Result<(), CheckError> {
        let guards: Vec<_> = self.cpus.iter().map(|c| lock(&c.0)).collect();
        let lists: Vec<&PcpLists> = guards.iter().map(|g| &**g).collect();
        let zone = lock(&self.zone);
        check_parts(
            &zone,
            &lists,
            |i| self.owner.at(i).load(Ordering::Acquire),
            self.span,
        )
    }

    /// Pages on `cpu`'s lists (0 for an unknown CPU).
    pub fn pcp_pages(&self, cpu: usize) -> u64 {
        self.cpus.get(cpu).map_or(0, |c| lock(&c.0).count)
    }

    /// Drains the lists and takes the state out as a [`PcpZone`]
    /// (whose `check` then covers it).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{ConcurrentZone, PcpConfig};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig};
    /// let zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// let z = ConcurrentZone::new(zone, PcpConfig::default()).unwrap();
    /// let pcp = z.into_pcp_zone();
    /// pcp.check().unwrap();
    /// ```
    pub fn into_pcp_zone(self) -> PcpZone {
        self.drain_all();
        let cpus = self
            .cpus
            .into_vec()
            .into_iter()
            .map(|c| c.0.into_inner())
            .collect();
        PcpZone {
            zone: self.zone.into_inner(),
            cfg: self.cfg,
            cpus,
            owner: (0..self.span)
                .map(|i| self.owner.at(i).load(Ordering::Acquire))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Tags;

    #[test]
    fn tags_are_one_per_frame_and_neighbours_never_share_a_line() {
        for span in [1usize, 63, 64, 65, 1000, 4096, 262_144 + 5] {
            let t = Tags::new(span);
            let base = t.tags.as_ptr() as usize;
            let addr = |i: usize| t.at(i) as *const _ as usize - base;
            let mut seen = std::vec![false; t.tags.len()];
            for i in 0..span {
                assert!(!core::mem::replace(&mut seen[addr(i)], true), "{span}: {i}");
                if i > 0 && span > 128 {
                    assert!(addr(i).abs_diff(addr(i - 1)) >= 64, "{span}: {i}");
                }
            }
        }
    }
}
