//! What the two front ends share: the work on one CPU queue, and the state
//! not tied to a CPU (range allocator, large maps, their counters).
//!
//! ```text
//!  VblockAllocator (&mut self)          ConcurrentVblock (&self)
//!  Owned { index, range }               Locked: shard locks, global lock
//!            \                              /
//!             +--> Env::map_in / unmap_in <--+   on one queue, which the
//!                  Env::purge_fragmented         caller owns (single) or
//!                  Env::take_aliases             holds locked (shared)
//!  Global { range, large, counters }: a field (single), behind the global lock (shared)
//! ```
//!
//! The front ends differ only in how they reach a queue and its
//! surroundings: [`VblockAllocator`](super::VblockAllocator) owns them,
//! [`ConcurrentVblock`](super::ConcurrentVblock) locks them. A [`Blocks`]
//! hides that difference from the queue logic here.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::queue::Queue;
use super::{now, since, Clock, Config, Counters, Policy, MAX_CPUS};
use crate::error::{AllocError, FreeError};
use crate::range::RangeAllocator;

/// Checks a front end's parameters: `cfg` valid (see
/// [`Config::validate`]) and `1 <= cpus <=` [`MAX_CPUS`].
pub(crate) fn check_params(cfg: &Config, cpus: usize) -> Result<(), AllocError> {
    cfg.validate()?;
    if !(1..=MAX_CPUS).contains(&cpus) {
        return Err(AllocError::Invalid);
    }
    Ok(())
}

/// Writes the accessors both front ends have (`set_clock`, `config`,
/// `policy`, `cpus`), with their docs; `$ty` names the front end in the
/// examples, and `$map` is a map of one page on CPU 0 by it.
macro_rules! front_accessors {
    ($ty:literal, $map:literal) => {
        /// Installs (or removes) the clock that times maps, unmaps, block
        /// creation and release in the counters.
        ///
        /// # Examples
        /// ```
        #[doc = concat!("use mmkit::vblock::{monotonic_ns, Config, Policy, ", $ty, "};")]
        /// use mmkit::vmap::VmapAllocator;
        /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
        #[doc = concat!("let mut vb = ", $ty, "::new(range, Config::KERNEL, Policy::Current, 1).unwrap();")]
        /// vb.set_clock(Some(monotonic_ns));
        #[doc = $map]
        /// assert!(vb.counters().map_ns > 0);
        /// ```
        pub fn set_clock(&mut self, clock: Option<Clock>) {
            self.clock = clock;
        }

        /// The geometry.
        ///
        /// # Examples
        /// ```
        #[doc = concat!("use mmkit::vblock::{Config, Policy, ", $ty, "};")]
        /// use mmkit::vmap::VmapAllocator;
        /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
        #[doc = concat!("let vb = ", $ty, "::new(range, Config::KERNEL, Policy::Current, 1).unwrap();")]
        /// assert_eq!(vb.config(), Config::KERNEL);
        /// ```
        pub fn config(&self) -> Config {
            self.cfg
        }

        /// The policy.
        ///
        /// # Examples
        /// ```
        #[doc = concat!("use mmkit::vblock::{Config, Policy, ", $ty, "};")]
        /// use mmkit::vmap::VmapAllocator;
        /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
        #[doc = concat!("let vb = ", $ty, "::new(range, Config::KERNEL, Policy::Legacy, 1).unwrap();")]
        /// assert_eq!(vb.policy(), Policy::Legacy);
        /// ```
        pub fn policy(&self) -> Policy {
            self.policy
        }

        /// Number of CPU queues.
        ///
        /// # Examples
        /// ```
        #[doc = concat!("use mmkit::vblock::{Config, Policy, ", $ty, "};")]
        /// use mmkit::vmap::VmapAllocator;
        /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
        #[doc = concat!("let vb = ", $ty, "::new(range, Config::KERNEL, Policy::Current, 3).unwrap();")]
        /// assert_eq!(vb.cpus(), 3);
        /// ```
        pub fn cpus(&self) -> usize {
            self.queues.len()
        }
    };
}
pub(crate) use front_accessors;

/// Where a queue's blocks come from and how they are found by address: the
/// range allocator and the block index (`vmap_blocks`).
pub(crate) trait Blocks {
    /// A block-aligned block of `size` bytes from the range allocator.
    fn take_block(&mut self, size: u64) -> Result<u64, AllocError>;
    /// Records that block number `no` is at `(cpu, slot)`.
    fn index(&mut self, no: u64, cpu: u32, slot: u32);
    /// Unindexes block number `no` and frees its range `va` lazily.
    fn give_back(&mut self, no: u64, va: u64);
}

/// The range allocator, the maps above `max_alloc` (start -> pages), and
/// the counters of work not done on a CPU queue.
pub(crate) struct Global<R> {
    pub(crate) range: R,
    pub(crate) large: BTreeMap<u64, u64>,
    pub(crate) counters: Counters,
}

impl<R: RangeAllocator> Global<R> {
    pub(crate) fn new(range: R) -> Self {
        Global {
            range,
            large: BTreeMap::new(),
            counters: Counters::default(),
        }
    }

    /// A map above `max_alloc`, straight from the range allocator; `t0` is
    /// when the call started.
    pub(crate) fn map_large(
        &mut self,
        cfg: &Config,
        clock: Option<Clock>,
        t0: u64,
        pages: u64,
    ) -> Result<u64, AllocError> {
        let size = pages
            .checked_mul(cfg.page_size)
            .ok_or(AllocError::Invalid)?;
        let addr = self.range.alloc(size, cfg.page_size)?;
        self.large.insert(addr, pages);
        self.counters.map_calls += 1;
        self.counters.large_maps += 1;
        self.counters.map_ns += since(clock, t0);
        Ok(addr)
    }

    /// Unmaps a large map of exactly `pages` pages at `addr`.
    pub(crate) fn unmap_large(
        &mut self,
        clock: Option<Clock>,
        t0: u64,
        addr: u64,
        pages: u64,
    ) -> Result<(), FreeError> {
        if self.large.get(&addr) != Some(&pages) {
            return Err(FreeError::NotAllocated);
        }
        self.large.remove(&addr);
        let freed = self.range.free_lazy(addr);
        debug_assert!(freed.is_ok(), "a large map's range is live");
        self.counters.unmap_calls += 1;
        self.counters.large_unmaps += 1;
        self.counters.unmap_ns += since(clock, t0);
        Ok(())
    }

    /// The end of `vm_unmap_aliases`: purges the lazy areas and flushes
    /// them with `[lo, hi)` in one call; counts it.
    pub(crate) fn purge(&mut self, lo: u64, hi: u64, flush: &mut dyn FnMut(u64, u64)) -> bool {
        let flushed = purge_widened(&mut self.range, lo, hi, flush);
        self.counters.flushes += u64::from(flushed);
        flushed
    }
}

/// Purges the range allocator's lazy areas and calls `flush` once with the
/// range covering them and `[lo, hi)` (empty when `lo >= hi`). Returns
/// whether `flush` ran.
fn purge_widened<R: RangeAllocator>(
    range: &mut R,
    lo: u64,
    hi: u64,
    flush: &mut dyn FnMut(u64, u64),
) -> bool {
    let mut called = false;
    range.purge(&mut |s, e| {
        flush(s.min(lo), e.max(hi));
        called = true;
    });
    if !called && lo < hi {
        flush(lo, hi);
        called = true;
    }
    called
}

/// The per-queue state a front end hands to the functions below.
pub(crate) struct Env<'a> {
    pub(crate) cfg: &'a Config,
    pub(crate) clock: Option<Clock>,
}

impl Env<'_> {
    /// Maps `n` pages on queue `q` of CPU `cpu`: search its blocks, else
    /// create a block (Legacy puts it at the head: search again).
    ///
    /// # Errors
    /// [`AllocError::NoSpace`] when the range allocator has no room for a
    /// block.
    pub(crate) fn map_in(
        &self,
        q: &mut Queue,
        b: &mut impl Blocks,
        cpu: usize,
        n: u32,
    ) -> Result<u64, AllocError> {
        let mut released = Vec::new();
        loop {
            let hit = q.alloc(n, self.cfg.page_size, &mut released);
            if !released.is_empty() {
                self.release_all(q, b, &mut released);
            }
            if let Some(addr) = hit {
                return Ok(addr);
            }
            if let Some(addr) = self.new_block(q, b, cpu, n)? {
                return Ok(addr);
            }
        }
    }

    /// `new_vmap_block`: a block from the range allocator, added to `q` and
    /// indexed; the address of its first `n` pages unless Legacy.
    #[cold]
    fn new_block(
        &self,
        q: &mut Queue,
        b: &mut impl Blocks,
        cpu: usize,
        n: u32,
    ) -> Result<Option<u64>, AllocError> {
        let t0 = now(self.clock);
        let bs = self.cfg.block_size();
        let va = b.take_block(bs)?;
        let (slot, addr) = q.add_block(va, n);
        b.index(self.cfg.block_no(va), cpu as u32, slot);
        q.counters.create_ns += since(self.clock, t0);
        Ok(addr)
    }

    /// Gives released blocks back (`free_vmap_block`), lazily.
    pub(crate) fn release_all(&self, q: &mut Queue, b: &mut impl Blocks, released: &mut Vec<u64>) {
        for va in released.drain(..) {
            let t0 = now(self.clock);
            b.give_back(self.cfg.block_no(va), va);
            q.counters.release_ns += since(self.clock, t0);
        }
    }

    /// Unmaps `n` pages at `addr` in the block at `slot` of `q`; `t0` is
    /// when the call started.
    ///
    /// # Errors
    /// [`FreeError::NotAllocated`] when no such live mapping is there;
    /// nothing changes. (The locked front end's unmap; the single one
    /// validates before it clears, then calls [`Self::unmap_live`].)
    #[cfg(feature = "std")]
    pub(crate) fn unmap_in(
        &self,
        q: &mut Queue,
        b: &mut impl Blocks,
        slot: u32,
        addr: u64,
        n: u32,
        t0: u64,
    ) -> Result<(), FreeError> {
        let va = addr & !(self.cfg.block_size() - 1);
        let off = self
            .cfg
            .page_index(addr - va)
            .ok_or(FreeError::NotAllocated)?;
        if !q.is_live(slot, va, off, n) {
            return Err(FreeError::NotAllocated);
        }
        self.unmap_live(q, b, slot, off, n, t0);
        Ok(())
    }

    /// Unmaps the mapping of `n` pages at page `off` of the block at `slot`
    /// of `q`, which the caller found live (`Queue::is_live`); `t0` is
    /// when the call started.
    #[inline]
    pub(crate) fn unmap_live(
        &self,
        q: &mut Queue,
        b: &mut impl Blocks,
        slot: u32,
        off: u32,
        n: u32,
        t0: u64,
    ) {
        if let Some(va) = q.free_live(slot, off, n) {
            self.release_all(q, b, &mut alloc::vec![va]);
        }
        q.counters.unmap_calls += 1;
        q.counters.unmap_ns += since(self.clock, t0);
    }

    /// The forced fragmented purge of one queue (the allocation-failure
    /// path of Current).
    #[cold]
    pub(crate) fn purge_fragmented(&self, q: &mut Queue, b: &mut impl Blocks) {
        let mut released = Vec::new();
        q.purge_fragmented(true, &mut released);
        self.release_all(q, b, &mut released);
    }

    /// `vm_unmap_aliases` on one queue: Current first releases fragmented
    /// blocks with less than a quarter free; then the queue's unflushed
    /// dirty range is added to `[lo, hi)`.
    pub(crate) fn take_aliases(
        &self,
        q: &mut Queue,
        b: &mut impl Blocks,
        policy: Policy,
        lo: &mut u64,
        hi: &mut u64,
    ) {
        let mut released = Vec::new();
        if policy == Policy::Current {
            q.purge_fragmented(false, &mut released);
        }
        q.take_dirty(self.cfg.page_size, lo, hi);
        self.release_all(q, b, &mut released);
    }
}
