//! [`PooledVmap`]: per-CPU pools of freed areas in front of one shared
//! [`VmapAllocator`], after Linux 6.9's *vmap nodes* (Uladzislau Rezki,
//! "mm: vmalloc: Add a per-CPU-zone infrastructure" and the series around
//! it), so that threads which free and allocate areas of the sizes they
//! just freed rarely take the allocator's one lock.
//!
//! **Not exact.** An allocation served from a pool gets a pooled area of
//! the right size, not the lowest fit; only a miss goes to the exact
//! allocator. Use [`VmapAllocator`] behind [`Locked`](crate::range::Locked)
//! where the lowest fit matters.
//!
//! ```text
//!   cpu 0: busy {..}  lazy [a b c]  pools: 1 granule [..] 2 granules [.. ..] ...
//!   cpu 1: busy {..}  lazy [d]      pools: ...          (each CPU: one lock)
//!   global: VmapAllocator (one lock): taken on a pool miss, a purge
//!           that overflows a pool, and drain
//! ```
//!
//! - `alloc(cpu, size, align)`: a size of `k` granules (`1 <= k <=
//!   classes`) pops `cpu`'s pool of that size if its newest area is
//!   aligned; otherwise the exact allocator serves it (one global lock).
//!   Either way the area enters `cpu`'s busy map: `cpu` owns it.
//! - `free_lazy(cpu, addr)`: the area leaves its owner's busy map and waits
//!   on the owner's lazy list. `cpu` is a hint: its own map is looked at
//!   first, then the other CPUs' one at a time (a free on another CPU than
//!   the allocation's costs a lock per CPU; the kernel's vmap nodes file an
//!   area by its address for the same reason). When the list passes
//!   `lazy_max` bytes, one flush covers it (the hook, as
//!   [`purge`](crate::range::RangeAllocator::purge)'s) and its areas go to
//!   the owner's pools; what does not fit (other sizes, full pools) goes
//!   back to the exact allocator under one lock acquisition (the kernel's
//!   `decay_va_pool_node` returns pool excess the same way).
//! - `free(cpu, addr)`: as `free_lazy`, but the area is pooled at once
//!   (the caller vouches that no stale translation of it remains).
//! - Every area a pool or lazy list holds is still *live* in the exact
//!   allocator; [`drain`](PooledVmap::drain) returns them all.
//!
//! A thread that frees what it allocated, on its own CPU, touches no cache
//! line another CPU writes but on a pool miss. An area moves between a
//! CPU's busy map, lazy list and pools under that CPU's lock only, so
//! [`check`](PooledVmap::check), which takes every lock, never sees it
//! half-moved. Lock order: a CPU, then the flush hook or the global lock;
//! never two CPUs but in index order (drain and check).

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use super::busy::BusyIndex;
use super::VmapAllocator;
use crate::ensure;
use crate::error::{AllocError, CheckError, FreeError};
use crate::lazy::LazyList;
use crate::range::FlushHook;
use crate::sync::{lock, Mutex, MutexGuard};

/// Sizes of a [`PooledVmap`]'s front end.
///
/// ```
/// use mmkit::vmap::pooled::PooledConfig;
/// let c = PooledConfig::default();
/// assert_eq!((c.cpus, c.granule, c.classes, c.pool_max), (2, 4096, 256, 64));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PooledConfig {
    /// CPUs (sets of busy maps, pools and lazy lists), 1 to 4096.
    pub cpus: usize,
    /// The pools' size unit in bytes, a power of two (4096: the kernel's
    /// page).
    pub granule: u64,
    /// Pooled sizes: 1 to `classes` granules (the kernel: 256 pages), at
    /// most 4096.
    pub classes: usize,
    /// Areas one CPU pools per size; the rest go back to the exact
    /// allocator at the next purge.
    pub pool_max: usize,
    /// Lazily freed bytes one CPU holds before it purges (the kernel's
    /// `lazy_max_pages` split over its nodes).
    pub lazy_max: u64,
}

impl Default for PooledConfig {
    fn default() -> Self {
        PooledConfig {
            cpus: 2,
            granule: 4096,
            classes: 256,
            pool_max: 64,
            lazy_max: 32 << 20,
        }
    }
}

impl PooledConfig {
    fn valid(&self) -> bool {
        (1..=4096).contains(&self.cpus)
            && self.granule.is_power_of_two()
            && (1..=4096).contains(&self.classes)
    }
}

/// One CPU's counters.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PoolStats {
    /// Allocations served from a pool (no global lock).
    pub hits: u64,
    /// Allocations that went to the exact allocator.
    pub misses: u64,
    /// Purges of this CPU's lazy list (one flush each).
    pub purges: u64,
    /// Areas held in this CPU's pools now.
    pub pooled: u64,
    /// Areas on this CPU's lazy list now.
    pub lazy: u64,
}

/// One CPU's live areas, lazy list and pools.
#[derive(Debug)]
struct Cpu {
    /// The live areas this CPU allocated, by start.
    busy: BusyIndex,
    /// Lazily freed areas, purged past the configuration's `lazy_max`.
    lazy: LazyList<(u64, u64)>,
    /// `pools[k]`: starts of free areas of `k + 1` granules, newest last.
    pools: Vec<Vec<u64>>,
    stats: PoolStats,
}

/// A lock on its own cache lines: CPUs do not share lines.
#[derive(Debug)]
#[repr(align(128))]
struct Padded<T>(T);

/// A [`VmapAllocator`] shared by threads, with per-CPU pools of freed
/// areas in front (Linux 6.9's vmap nodes): see the [module docs](self).
///
/// # Examples
/// ```
/// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
/// use mmkit::vmap::VmapAllocator;
/// let va = VmapAllocator::new(0, 1 << 30).unwrap();
/// let p = PooledVmap::new(va, PooledConfig::default()).unwrap();
/// let a = p.alloc(0, 8192, 4096).unwrap(); // a miss: the exact allocator
/// p.free(0, a).unwrap(); // pooled on CPU 0
/// assert_eq!(p.alloc(0, 8192, 4096), Ok(a)); // a hit: no global lock
/// assert_eq!(p.stats(0).hits, 1);
/// p.check().unwrap();
/// ```
pub struct PooledVmap {
    cfg: PooledConfig,
    cpus: Box<[Padded<Mutex<Cpu>>]>,
    flush: Mutex<Option<FlushHook>>,
    global: Mutex<VmapAllocator>,
}

impl core::fmt::Debug for PooledVmap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PooledVmap")
            .field("config", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl PooledVmap {
    /// Puts pools in front of `va`, which must have no live or lazily freed
    /// area (the busy maps must know every live area).
    ///
    /// # Errors
    /// [`AllocError::Invalid`] for a configuration out of its limits or a
    /// `va` already in use.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::AllocError;
    /// let va = VmapAllocator::new(0, 1 << 20).unwrap();
    /// let bad = PooledConfig { cpus: 0, ..PooledConfig::default() };
    /// assert_eq!(PooledVmap::new(va, bad).unwrap_err(), AllocError::Invalid);
    /// ```
    pub fn new(va: VmapAllocator, cfg: PooledConfig) -> Result<Self, AllocError> {
        let s = va.stats();
        if !cfg.valid() || s.live_areas != 0 || s.lazy_areas != 0 {
            return Err(AllocError::Invalid);
        }
        let cpu = || {
            Padded(Mutex::new(Cpu {
                busy: BusyIndex::new(),
                lazy: LazyList::new(cfg.lazy_max),
                pools: vec![Vec::new(); cfg.classes],
                stats: PoolStats::default(),
            }))
        };
        Ok(PooledVmap {
            cfg,
            cpus: (0..cfg.cpus).map(|_| cpu()).collect(),
            flush: Mutex::new(None),
            global: Mutex::new(va),
        })
    }

    /// The configuration.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
    /// use mmkit::vmap::VmapAllocator;
    /// let p = PooledVmap::new(VmapAllocator::new(0, 1 << 20).unwrap(), PooledConfig::default()).unwrap();
    /// assert_eq!(p.config(), PooledConfig::default());
    /// ```
    pub fn config(&self) -> PooledConfig {
        self.cfg
    }

    /// Installs the flush every purge calls once with the range covering
    /// its areas (as [`set_flush_hook`](crate::range::RangeAllocator::set_flush_hook)).
    ///
    /// # Examples
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
    /// use mmkit::vmap::VmapAllocator;
    /// let p = PooledVmap::new(VmapAllocator::new(0, 1 << 20).unwrap(), PooledConfig::default()).unwrap();
    /// let flushes = Arc::new(AtomicU64::new(0));
    /// let f = flushes.clone();
    /// p.set_flush_hook(Some(Box::new(move |_, _| { f.fetch_add(1, Ordering::Relaxed); })));
    /// let a = p.alloc(1, 4096, 4096).unwrap();
    /// p.free_lazy(1, a).unwrap();
    /// p.drain();
    /// assert_eq!(flushes.load(Ordering::Relaxed), 1);
    /// ```
    pub fn set_flush_hook(&self, hook: Option<FlushHook>) {
        *lock(&self.flush) = hook;
    }

    /// The pool index of a `size`-byte area, if that size is pooled.
    fn class_of(&self, size: u64) -> Option<usize> {
        let g = self.cfg.granule;
        let k = size / g;
        (size % g == 0 && k >= 1 && k <= self.cfg.classes as u64).then(|| k as usize - 1)
    }

    fn cpu(&self, cpu: usize) -> Option<MutexGuard<'_, Cpu>> {
        self.cpus.get(cpu).map(|c| lock(&c.0))
    }

    /// Allocates `size` bytes aligned to `align` for `cpu`: from its pool
    /// of that size when the newest pooled area is aligned, else the lowest
    /// fit of the exact allocator (see the [module docs](self)).
    ///
    /// # Errors
    /// [`AllocError::Invalid`] for an unknown CPU, `size == 0` or an
    /// alignment that is not a power of two; [`AllocError::NoSpace`] when
    /// nothing fits, also after [`drain`](Self::drain).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::AllocError;
    /// let p = PooledVmap::new(VmapAllocator::new(0, 1 << 20).unwrap(), PooledConfig::default()).unwrap();
    /// assert_eq!(p.alloc(0, 4096, 4096), Ok(0));
    /// assert_eq!(p.alloc(7, 4096, 4096), Err(AllocError::Invalid)); // no CPU 7
    /// assert_eq!(p.alloc(0, 0, 4096), Err(AllocError::Invalid));
    /// ```
    pub fn alloc(&self, cpu: usize, size: u64, align: u64) -> Result<u64, AllocError> {
        if size == 0 || !align.is_power_of_two() {
            return Err(AllocError::Invalid);
        }
        let mut c = self.cpu(cpu).ok_or(AllocError::Invalid)?;
        if let Some(k) = self.class_of(size) {
            if let Some(&a) = c.pools[k].last() {
                if a % align == 0 {
                    c.pools[k].pop();
                    c.stats.hits += 1;
                    c.busy.insert(a, a + size);
                    return Ok(a);
                }
            }
        }
        c.stats.misses += 1;
        let got = lock(&self.global).alloc(size, align);
        let a = match got {
            Ok(a) => a,
            Err(AllocError::NoSpace) => {
                // Pooled and lazy areas may hold the space: give them all
                // back (our lock released first: drain takes every CPU's in
                // order) and ask once more.
                drop(c);
                self.drain();
                c = self.cpu(cpu).ok_or(AllocError::Invalid)?;
                lock(&self.global).alloc(size, align)?
            }
            Err(e) => return Err(e),
        };
        c.busy.insert(a, a + size);
        Ok(a)
    }

    /// Frees the live area at `addr` lazily: it waits on the lazy list of
    /// the CPU that allocated it for a purge (one flush per batch), then
    /// goes to that CPU's pool of its size. `cpu`, the caller's, is looked
    /// at first (see the [module docs](self)). Returns its size.
    ///
    /// # Errors
    /// [`FreeError::Invalid`] for an unknown CPU; [`FreeError::NotAllocated`]
    /// when no live area starts at `addr` (double free included). Nothing
    /// changes then.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::FreeError;
    /// let p = PooledVmap::new(VmapAllocator::new(0, 1 << 20).unwrap(), PooledConfig::default()).unwrap();
    /// let a = p.alloc(0, 4096, 4096).unwrap();
    /// assert_eq!(p.free_lazy(1, a), Ok(4096)); // any CPU may free it...
    /// assert_eq!(p.free_lazy(1, a), Err(FreeError::NotAllocated));
    /// assert_eq!(p.stats(0).lazy, 1); // ...back to its owner, CPU 0
    /// ```
    pub fn free_lazy(&self, cpu: usize, addr: u64) -> Result<u64, FreeError> {
        let (mut c, end) = self.owner(cpu, addr, None)?;
        self.defer(&mut c, addr, end);
        Ok(end - addr)
    }

    /// [`free_lazy`](Self::free_lazy) with the area's size, checked
    /// against the owner's busy map (every CPU keeps one).
    ///
    /// # Errors
    /// As [`free_lazy`](Self::free_lazy), and [`FreeError::SizeMismatch`]
    /// when the live area at `addr` has another size.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::FreeError;
    /// let p = PooledVmap::new(VmapAllocator::new(0, 1 << 20).unwrap(), PooledConfig::default()).unwrap();
    /// let a = p.alloc(0, 4096, 4096).unwrap();
    /// assert_eq!(p.free_lazy_sized(0, a, 8192), Err(FreeError::SizeMismatch));
    /// assert_eq!(p.free_lazy_sized(0, a, 4096), Ok(4096));
    /// ```
    pub fn free_lazy_sized(&self, cpu: usize, addr: u64, size: u64) -> Result<u64, FreeError> {
        let (mut c, end) = self.owner(cpu, addr, Some(size))?;
        self.defer(&mut c, addr, end);
        Ok(size)
    }

    /// Puts `[addr, end)` on `c`'s lazy list, purging it past `lazy_max`.
    fn defer(&self, c: &mut Cpu, addr: u64, end: u64) {
        if c.lazy.push((addr, end)) {
            self.purge(c);
        }
    }

    /// Frees the live area at `addr` at once, into the pool of its size of
    /// the CPU that allocated it (or back to the exact allocator when it
    /// has no pool or the pool is full); `cpu` is looked at first. Returns
    /// its size.
    ///
    /// # Errors
    /// As [`free_lazy`](Self::free_lazy).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
    /// use mmkit::vmap::VmapAllocator;
    /// let p = PooledVmap::new(VmapAllocator::new(0, 1 << 20).unwrap(), PooledConfig::default()).unwrap();
    /// let a = p.alloc(0, 4096, 4096).unwrap();
    /// assert_eq!(p.free(0, a), Ok(4096));
    /// assert_eq!(p.stats(0).pooled, 1);
    /// ```
    pub fn free(&self, cpu: usize, addr: u64) -> Result<u64, FreeError> {
        let (mut c, end) = self.owner(cpu, addr, None)?;
        self.pool_now(&mut c, addr, end);
        Ok(end - addr)
    }

    /// [`free`](Self::free) with the area's size, checked against the
    /// owner's busy map.
    ///
    /// # Errors
    /// As [`free_lazy_sized`](Self::free_lazy_sized).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::FreeError;
    /// let p = PooledVmap::new(VmapAllocator::new(0, 1 << 20).unwrap(), PooledConfig::default()).unwrap();
    /// let a = p.alloc(0, 4096, 4096).unwrap();
    /// assert_eq!(p.free_sized(0, a, 1), Err(FreeError::SizeMismatch));
    /// assert_eq!(p.free_sized(0, a, 4096), Ok(4096));
    /// assert_eq!(p.stats(0).pooled, 1);
    /// ```
    pub fn free_sized(&self, cpu: usize, addr: u64, size: u64) -> Result<u64, FreeError> {
        let (mut c, end) = self.owner(cpu, addr, Some(size))?;
        self.pool_now(&mut c, addr, end);
        Ok(size)
    }

    /// Pools `[addr, end)` on `c`, or gives it back when it has no pool.
    fn pool_now(&self, c: &mut Cpu, addr: u64, end: u64) {
        let mut back = Vec::new();
        self.pool(&mut c.pools, addr, end, &mut back);
        if !back.is_empty() {
            self.give_back(&back);
        }
    }

    /// The CPU that owns the live area at `addr`, locked, with the area
    /// taken out of its busy map, and the area's end: `cpu`'s own map is
    /// looked at first, then the others', one lock at a time. With `size`,
    /// an area of another size stays and is refused.
    fn owner(
        &self,
        cpu: usize,
        addr: u64,
        size: Option<u64>,
    ) -> Result<(MutexGuard<'_, Cpu>, u64), FreeError> {
        if cpu >= self.cpus.len() || size == Some(0) {
            return Err(FreeError::Invalid);
        }
        let n = self.cpus.len();
        for c in (0..n).map(|k| (cpu + k) % n) {
            let mut g = lock(&self.cpus[c].0);
            if let Some(end) = g.busy.get(addr) {
                if size.is_some_and(|s| addr.checked_add(s) != Some(end)) {
                    return Err(FreeError::SizeMismatch);
                }
                g.busy.remove(addr);
                return Ok((g, end));
            }
        }
        Err(FreeError::NotAllocated)
    }

    /// Puts the free area `[s, e)` in its pool of `pools` (a CPU's), or on
    /// `back` for the exact allocator.
    fn pool(&self, pools: &mut [Vec<u64>], s: u64, e: u64, back: &mut Vec<(u64, u64)>) {
        match self.class_of(e - s) {
            Some(k) if pools[k].len() < self.cfg.pool_max => {
                pools[k].push(s);
            }
            _ => back.push((s, e)),
        }
    }

    /// Frees `areas` in the exact allocator under one lock acquisition,
    /// with their sizes (so an allocator without a busy index serves too).
    fn give_back(&self, areas: &[(u64, u64)]) {
        let mut g = lock(&self.global);
        for &(s, e) in areas {
            // Cannot fail: pooled and lazy areas are live in `g`.
            let freed = g.free_sized(s, e - s);
            debug_assert!(freed.is_ok(), "a pooled area is live");
        }
    }

    /// One flush for `c`'s lazy list, then its areas to the pools.
    fn purge(&self, c: &mut Cpu) {
        let mut back = Vec::new();
        let Cpu {
            lazy, pools, stats, ..
        } = c;
        let flush = |lo, hi| {
            if let Some(f) = lock(&self.flush).as_mut() {
                f(lo, hi);
            }
            stats.purges += 1;
        };
        lazy.purge(flush, |(s, e)| self.pool(pools, s, e, &mut back));
        if !back.is_empty() {
            self.give_back(&back);
        }
    }

    /// Purges every CPU's lazy list and returns every pooled area to the
    /// exact allocator, so its free space is whole again.
    ///
    /// # Examples
    /// ```
    /// use mmkit::range::RangeAllocator;
    /// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
    /// use mmkit::vmap::VmapAllocator;
    /// let p = PooledVmap::new(VmapAllocator::new(0, 1 << 20).unwrap(), PooledConfig::default()).unwrap();
    /// let a = p.alloc(0, 4096, 4096).unwrap();
    /// p.free(0, a).unwrap();
    /// p.drain();
    /// assert_eq!(p.stats(0).pooled, 0);
    /// assert_eq!(p.with_allocator(|va| va.stats().free_blocks), 1);
    /// ```
    pub fn drain(&self) {
        for c in self.cpus.iter() {
            let mut c = lock(&c.0);
            self.purge(&mut c);
            let g = self.cfg.granule;
            let back: Vec<(u64, u64)> = (c.pools.iter_mut().enumerate())
                .flat_map(|(k, p)| p.drain(..).map(move |a| (a, a + (k as u64 + 1) * g)))
                .collect();
            self.give_back(&back);
        }
    }

    /// `cpu`'s counters (zero for an unknown CPU).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
    /// use mmkit::vmap::VmapAllocator;
    /// let p = PooledVmap::new(VmapAllocator::new(0, 1 << 20).unwrap(), PooledConfig::default()).unwrap();
    /// p.alloc(0, 4096, 4096).unwrap();
    /// assert_eq!(p.stats(0).misses, 1);
    /// assert_eq!(p.stats(9).misses, 0);
    /// ```
    pub fn stats(&self, cpu: usize) -> PoolStats {
        self.cpu(cpu).map_or_else(PoolStats::default, |c| {
            // The two sizes are read off the lists, not counted.
            let mut s = c.stats;
            s.lazy = c.lazy.len() as u64;
            s.pooled = c.pools.iter().map(|p| p.len() as u64).sum();
            s
        })
    }

    /// Runs `f` on the exact allocator under its lock (its pooled and lazy
    /// areas count as live there).
    ///
    /// # Examples
    /// ```
    /// use mmkit::range::RangeAllocator;
    /// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
    /// use mmkit::vmap::VmapAllocator;
    /// let p = PooledVmap::new(VmapAllocator::new(0, 1 << 20).unwrap(), PooledConfig::default()).unwrap();
    /// p.alloc(0, 4096, 4096).unwrap();
    /// assert_eq!(p.with_allocator(|va| va.stats().live_areas), 1);
    /// ```
    pub fn with_allocator<T>(&self, f: impl FnOnce(&mut VmapAllocator) -> T) -> T {
        f(&mut lock(&self.global))
    }

    /// Verifies the exact allocator's invariants and that the busy maps,
    /// the lazy lists and the pools hold exactly its live areas, each once,
    /// each where it belongs. Takes every lock.
    ///
    /// # Errors
    /// A [`CheckError`] naming the first violation.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
    /// use mmkit::vmap::VmapAllocator;
    /// let p = PooledVmap::new(VmapAllocator::new(0, 1 << 20).unwrap(), PooledConfig::default()).unwrap();
    /// let a = p.alloc(0, 4096, 4096).unwrap();
    /// p.free_lazy(0, a).unwrap();
    /// p.check().unwrap();
    /// ```
    pub fn check(&self) -> Result<(), CheckError> {
        let cpus: Vec<_> = self.cpus.iter().map(|c| lock(&c.0)).collect();
        let g = lock(&self.global);
        g.check()?;
        // (start, end) of every area the front end holds.
        let mut held: Vec<(u64, u64)> = Vec::new();
        for (i, c) in cpus.iter().enumerate() {
            ensure!(c.busy.consistent(), Structure @ i, "cpu {i}: busy map key unreachable");
            held.extend(c.busy.iter());
            let bytes: u64 = c.lazy.iter().map(|&(s, e)| e - s).sum();
            ensure!(
                bytes == c.lazy.bytes() && bytes <= self.cfg.lazy_max,
                Accounting @ i,
                "cpu {i}: lazy bytes {} (counter {}, max {})",
                bytes,
                c.lazy.bytes(),
                self.cfg.lazy_max
            );
            c.lazy.check()?;
            held.extend(c.lazy.iter().copied());
            for (k, p) in c.pools.iter().enumerate() {
                ensure!(p.len() <= self.cfg.pool_max, Bounds @ i, "cpu {i}: pool {k} over pool_max");
                let size = (k as u64 + 1) * self.cfg.granule;
                held.extend(p.iter().map(|&a| (a, a + size)));
            }
        }
        held.sort_unstable();
        if !g.indexed {
            // An allocator without a busy index knows only the totals.
            let (n, bytes) = (
                held.len() as u64,
                held.iter().map(|h| h.1 - h.0).sum::<u64>(),
            );
            let st = g.stats();
            ensure!(
                n == st.live_areas && bytes == st.live_bytes,
                Accounting,
                "front end holds {n} areas of {bytes} bytes, the allocator {} of {}",
                st.live_areas,
                st.live_bytes
            );
            return Ok(());
        }
        let mut live: Vec<(u64, u64)> = g.live_areas().map(|r| (r.start, r.end)).collect();
        live.sort_unstable();
        ensure!(
            held.len() == live.len(),
            Accounting,
            "front end holds {} areas, the allocator {} live",
            held.len(),
            live.len()
        );
        for (h, l) in held.iter().zip(&live) {
            ensure!(h == l, Layout @ h.0, "area {:#x}..{:#x} held, live {:#x}..{:#x}", h.0, h.1, l.0, l.1);
        }
        Ok(())
    }
}
