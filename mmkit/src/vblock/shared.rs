//! The thread-safe front end: one lock per CPU queue, the range allocator
//! behind one lock taken only to create or release a block (or for a large
//! request), and a sharded index.
//!
//! ```text
//!  thread --slot--> queues[slot % cpus]: Mutex<Queue>     map, unmap
//!                   index[blockno % shards]: Mutex<map>   blockno -> (cpu, slot)
//!                   global: Mutex<range + large maps>     block create/release
//! ```
//!
//! Lock order: a queue, then the global lock, then an index shard. No path
//! holds two queues or takes a queue while holding the global lock or a
//! shard, so there is no cycle. An unmap first looks in the calling
//! thread's own queue (one lock: the common case, unmapping on the mapping
//! CPU); otherwise it reads the index shard, drops it, then locks the
//! owner's queue, which re-validates the block (its start must match), so
//! a stale read is a clean `NotAllocated`.
//!
//! # Which CPU
//! The kernel uses the running CPU (preemption disabled). Asking Linux for
//! it (`sched_getcpu`) needs `unsafe`, which this crate forbids, so each
//! thread gets a *slot* on first use, round robin from a process-wide
//! counter ([`current_slot`]), and maps on queue `slot % cpus`. Threads up
//! to the queue count then never share a queue, which is what per-CPU
//! queues give the kernel. [`ConcurrentVblock::map_on`] takes an explicit
//! CPU instead (a caller with `sched_getcpu` can pass it).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::vec::Vec;

use super::front::{check_params, front_accessors, Blocks, Env, Global};
use super::queue::Queue;
use super::single::check_all;
use super::{now, since, Clock, Config, Counters, Policy};
use crate::error::{AllocError, CheckError, FreeError};
use crate::range::RangeAllocator;
use crate::sync::{lock, Mutex};

/// Keeps each lock on its own cache lines, so CPUs do not bounce them.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

std::thread_local! {
    static SLOT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// This thread's CPU slot: assigned round robin on the thread's first call,
/// then fixed (see the module docs for why not `sched_getcpu`).
///
/// ```
/// let a = mmkit::vblock::current_slot();
/// assert_eq!(a, mmkit::vblock::current_slot());
/// let b = std::thread::spawn(mmkit::vblock::current_slot).join().unwrap();
/// assert_ne!(a, b);
/// ```
#[inline]
pub fn current_slot() -> usize {
    SLOT.with(|s| {
        s.get().unwrap_or_else(|| {
            let n = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
            s.set(Some(n));
            n
        })
    })
}

/// One index shard: block number -> (CPU, slot).
type Index = BTreeMap<u64, (u32, u32)>;

/// Thread-safe `vm_map_ram` / `vm_unmap_ram`: per-CPU queues each behind
/// its own lock (see the [module docs](super) and the lock order above).
///
/// ```
/// # use mmkit::error::FreeError;
/// use mmkit::vmap::VmapAllocator;
/// use mmkit::vblock::{Config, ConcurrentVblock, Policy};
///
/// let range = VmapAllocator::new(0xffff_c900_0000_0000, 0xffff_e900_0000_0000)?;
/// let vb = ConcurrentVblock::new(range, Config::KERNEL, Policy::Current, 2)?;
/// std::thread::scope(|s| {
///     for _ in 0..2 {
///         s.spawn(|| {
///             let a = vb.map(4).unwrap();
///             vb.unmap(a, 4).unwrap();
///         });
///     }
/// });
/// vb.check()?;
/// assert_eq!(vb.counters().map_calls, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ConcurrentVblock<R> {
    cfg: Config,
    policy: Policy,
    queues: Vec<Padded<Mutex<Queue>>>,
    index: Vec<Padded<Mutex<Index>>>,
    global: Mutex<Global<R>>,
    clock: Option<Clock>,
}

impl<R: RangeAllocator> ConcurrentVblock<R> {
    /// A front end with `cpus` queues over `range`, which it owns.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] for an invalid `cfg`, `cpus == 0` or
    /// `cpus >` [`MAX_CPUS`](super::MAX_CPUS).
    ///
    /// # Complexity
    /// O(cpus).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, ConcurrentVblock, Policy};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let vb = ConcurrentVblock::new(range, Config::KERNEL, Policy::Current, 4).unwrap();
    /// assert_eq!(vb.cpus(), 4);
    /// ```
    pub fn new(range: R, cfg: Config, policy: Policy, cpus: usize) -> Result<Self, AllocError> {
        check_params(&cfg, cpus)?;
        let shards = (cpus * 4).next_power_of_two().max(16);
        Ok(ConcurrentVblock {
            cfg,
            policy,
            queues: (0..cpus)
                .map(|_| Padded(Mutex::new(Queue::new(&cfg, policy))))
                .collect(),
            index: (0..shards).map(|_| Padded::default()).collect(),
            global: Mutex::new(Global::new(range)),
            clock: None,
        })
    }

    front_accessors!("ConcurrentVblock", "vb.map_on(0, 1).unwrap();");

    /// Runs `f` on the range allocator under its lock (for stats; holding
    /// it stalls block creation and release on every CPU).
    ///
    /// # Complexity
    /// One lock, plus `f`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, ConcurrentVblock, Policy};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let vb = ConcurrentVblock::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// vb.map_on(0, 1).unwrap();
    /// assert_eq!(vb.with_range(|r| r.stats().live_areas), 1); // one block
    /// ```
    pub fn with_range<T>(&self, f: impl FnOnce(&R) -> T) -> T {
        f(&lock(&self.global).range)
    }

    /// This thread's queue: its slot modulo the queue count (a mask when
    /// that is a power of two: a division costs more than the rest of the
    /// slot lookup).
    #[inline]
    fn here(&self) -> usize {
        let (slot, n) = (current_slot(), self.queues.len());
        if n.is_power_of_two() {
            slot & (n - 1)
        } else {
            slot % n
        }
    }

    fn shard(&self, blockno: u64) -> &Mutex<Index> {
        // The shard count is a power of two.
        &self.index[(blockno & (self.index.len() as u64 - 1)) as usize].0
    }

    fn env(&self) -> Env<'_> {
        Env {
            cfg: &self.cfg,
            clock: self.clock,
        }
    }

    /// Maps `pages` pages on this thread's queue ([`current_slot`] modulo
    /// `cpus()`).
    ///
    /// # Errors
    /// As [`map_on`](Self::map_on).
    ///
    /// # Complexity
    /// As [`map_on`](Self::map_on).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, ConcurrentVblock, Policy};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let vb = ConcurrentVblock::new(range, Config::KERNEL, Policy::Current, 2).unwrap();
    /// let a = vb.map(2).unwrap(); // on the calling thread's queue
    /// vb.unmap(a, 2).unwrap();
    /// ```
    pub fn map(&self, pages: u64) -> Result<u64, AllocError> {
        self.map_on(self.here(), pages)
    }

    /// Maps `pages` pages on CPU queue `cpu`.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] for 0 pages, an overflowing size or
    /// `cpu >= cpus()`; [`AllocError::NoSpace`] when no block or large
    /// area fits.
    ///
    /// # Complexity
    /// O(blocks on the CPU's list) under the CPU's lock; block creation
    /// adds the range allocator's O(log n) under the global lock.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, ConcurrentVblock, Policy};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let vb = ConcurrentVblock::new(range, Config::KERNEL, Policy::Current, 2).unwrap();
    /// let a = vb.map_on(1, 1).unwrap();
    /// assert_eq!(vb.cpu_counters(1).unwrap().map_calls, 1);
    /// assert!(vb.map_on(2, 1).is_err()); // no CPU 2
    /// vb.unmap(a, 1).unwrap();
    /// ```
    pub fn map_on(&self, cpu: usize, pages: u64) -> Result<u64, AllocError> {
        crate::debug_check!(self);
        if cpu >= self.queues.len() {
            return Err(AllocError::Invalid);
        }
        let Some(n) = self.cfg.small(pages) else {
            return self.map_large(pages);
        };
        let t0 = now(self.clock);
        let mut purged = false;
        loop {
            let mut q = lock(&self.queues[cpu].0);
            match self.env().map_in(&mut q, &mut Locked(self), cpu, n) {
                Ok(addr) => {
                    q.counters.map_calls += 1;
                    q.counters.map_ns += since(self.clock, t0);
                    return Ok(addr);
                }
                Err(AllocError::NoSpace) if self.policy == Policy::Current && !purged => {
                    // Other queues are locked one by one: drop ours first.
                    drop(q);
                    purged = true;
                    self.purge_all_fragmented();
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Forced fragmented purge on every CPU, one queue lock at a time.
    #[cold]
    fn purge_all_fragmented(&self) {
        for cell in &self.queues {
            self.env()
                .purge_fragmented(&mut lock(&cell.0), &mut Locked(self));
        }
    }

    fn map_large(&self, pages: u64) -> Result<u64, AllocError> {
        let t0 = now(self.clock);
        lock(&self.global).map_large(&self.cfg, self.clock, t0, pages)
    }

    /// Unmaps the mapping of `pages` pages at `addr`, from any thread.
    ///
    /// # Errors
    /// [`FreeError::Invalid`] for 0 pages; [`FreeError::NotAllocated`] when
    /// no live mapping of that many pages starts at `addr`. Nothing changes.
    ///
    /// # Complexity
    /// O(log blocks) under the calling thread's queue lock; from another
    /// CPU, O(log blocks) under an index shard, then O(1) under the owner's
    /// queue lock. A release adds the range allocator's O(log n).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, ConcurrentVblock, Policy};
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::FreeError;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let vb = ConcurrentVblock::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// let a = vb.map_on(0, 4).unwrap();
    /// assert_eq!(vb.unmap(a, 4), Ok(()));
    /// assert_eq!(vb.unmap(a, 4), Err(FreeError::NotAllocated));
    /// ```
    pub fn unmap(&self, addr: u64, pages: u64) -> Result<(), FreeError> {
        crate::debug_check!(self);
        if pages == 0 {
            return Err(FreeError::Invalid);
        }
        let Some(n) = self.cfg.small(pages) else {
            return self.unmap_large(addr, pages);
        };
        let t0 = now(self.clock);
        let bs = self.cfg.block_size();
        let va = addr & !(bs - 1);
        // Fast path: the mapping CPU's own queue knows its blocks.
        let here = self.here();
        let mut q = lock(&self.queues[here].0);
        if let Some(slot) = q.find(va) {
            return self
                .env()
                .unmap_in(&mut q, &mut Locked(self), slot, addr, n, t0);
        }
        drop(q);
        let no = self.cfg.block_no(addr);
        let found = lock(self.shard(no)).get(&no).copied();
        let (cpu, slot) = found.ok_or(FreeError::NotAllocated)?;
        let mut q = lock(&self.queues[cpu as usize].0);
        self.env()
            .unmap_in(&mut q, &mut Locked(self), slot, addr, n, t0)
    }

    fn unmap_large(&self, addr: u64, pages: u64) -> Result<(), FreeError> {
        let t0 = now(self.clock);
        lock(&self.global).unmap_large(self.clock, t0, addr, pages)
    }

    /// `vm_unmap_aliases`: one `flush(start, end)` covering every block's
    /// unflushed dirty range and every lazily freed area (see
    /// [`VblockAllocator::unmap_aliases`](super::VblockAllocator::unmap_aliases)).
    /// Returns whether `flush` was called. Queues are visited one at a time;
    /// pages unmapped concurrently on a visited queue wait for the next call.
    ///
    /// # Complexity
    /// O(blocks) plus the range allocator's purge.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, ConcurrentVblock, Policy};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let vb = ConcurrentVblock::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// let a = vb.map_on(0, 1).unwrap();
    /// vb.unmap(a, 1).unwrap();
    /// let mut n = 0;
    /// assert!(vb.unmap_aliases(&mut |_, _| n += 1));
    /// assert_eq!(n, 1);
    /// ```
    pub fn unmap_aliases(&self, flush: &mut dyn FnMut(u64, u64)) -> bool {
        crate::debug_check!(self);
        let (mut lo, mut hi) = (u64::MAX, 0);
        for cell in &self.queues {
            let mut q = lock(&cell.0);
            self.env()
                .take_aliases(&mut q, &mut Locked(self), self.policy, &mut lo, &mut hi);
        }
        lock(&self.global).purge(lo, hi, flush)
    }

    /// Counters summed over every CPU and the large path.
    ///
    /// # Complexity
    /// O(cpus), taking each lock in turn.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, ConcurrentVblock, Policy};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let vb = ConcurrentVblock::new(range, Config::KERNEL, Policy::Current, 2).unwrap();
    /// vb.map_on(0, 1).unwrap();
    /// vb.map_on(1, 1).unwrap();
    /// assert_eq!(vb.counters().map_calls, 2);
    /// ```
    pub fn counters(&self) -> Counters {
        let mut c = lock(&self.global).counters;
        for cell in &self.queues {
            c += lock(&cell.0).counters;
        }
        c
    }

    /// One CPU's counters; `None` for `cpu >= cpus()`.
    ///
    /// # Complexity
    /// O(1), taking that CPU's lock.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, ConcurrentVblock, Policy};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let vb = ConcurrentVblock::new(range, Config::KERNEL, Policy::Current, 2).unwrap();
    /// vb.map_on(0, 1).unwrap();
    /// assert_eq!(vb.cpu_counters(0).unwrap().blocks_created, 1);
    /// assert!(vb.cpu_counters(5).is_none());
    /// ```
    pub fn cpu_counters(&self, cpu: usize) -> Option<Counters> {
        self.queues.get(cpu).map(|cell| lock(&cell.0).counters)
    }

    /// Verifies every invariant, as [`VblockAllocator::check`](super::VblockAllocator::check),
    /// with every lock held (queues in order, then global, then shards).
    ///
    /// # Errors
    /// A [`CheckError`] naming the first violation.
    ///
    /// # Complexity
    /// O(blocks x bits) plus the range allocator's check.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, ConcurrentVblock, Policy};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let vb = ConcurrentVblock::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// vb.map_on(0, 1).unwrap();
    /// vb.check().unwrap();
    /// ```
    pub fn check(&self) -> Result<(), CheckError> {
        let queues: Vec<_> = self.queues.iter().map(|c| lock(&c.0)).collect();
        let g = lock(&self.global);
        let mut index = BTreeMap::new();
        for shard in &self.index {
            index.extend(lock(&shard.0).iter().map(|(&k, &v)| (k, v)));
        }
        check_all(
            &self.cfg,
            queues.iter().map(|q| &**q),
            &index,
            &g.large,
            &g.range,
        )
    }
}

/// The shared front end's [`Blocks`]: the range allocator under the global
/// lock, the index under its shards (taken after a queue's lock).
struct Locked<'a, R>(&'a ConcurrentVblock<R>);

impl<R: RangeAllocator> Blocks for Locked<'_, R> {
    fn take_block(&mut self, size: u64) -> Result<u64, AllocError> {
        lock(&self.0.global).range.alloc(size, size)
    }

    fn index(&mut self, no: u64, cpu: u32, slot: u32) {
        lock(self.0.shard(no)).insert(no, (cpu, slot));
    }

    fn give_back(&mut self, no: u64, va: u64) {
        lock(self.0.shard(no)).remove(&no);
        let freed = lock(&self.0.global).range.free_lazy(va);
        debug_assert!(freed.is_ok(), "a block's range is live");
    }
}
