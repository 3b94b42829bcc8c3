//! The single-threaded front end: per-CPU queues driven with an explicit
//! CPU index, over a range allocator it owns.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::front::{check_params, front_accessors, Blocks, Env, Global};
use super::queue::Queue;
use super::{now, since, Clock, Config, Counters, Policy};
use crate::ensure;
use crate::error::{AllocError, CheckError, FreeError};
use crate::range::RangeAllocator;

/// `vm_map_ram` / `vm_unmap_ram` over per-CPU blocks, single-threaded: the
/// caller names the CPU of each map (see the [module docs](super)).
///
/// ```text
///  queues[cpu]  one Queue per CPU: blocks + list of blocks with free pages
///  index        block number -> (cpu, slot): the block an address is in
///  large        start -> pages of maps above max_alloc (range allocator)
///  range        the range allocator, owned: blocks and large maps only
/// ```
///
/// Invariants (checked by [`check`](Self::check)): each queue's; the index
/// holds exactly the blocks in use, under their block number; the range
/// allocator's live areas are exactly the blocks and the large maps.
///
/// ```
/// # use mmkit::error::FreeError;
/// use mmkit::vmap::VmapAllocator;
/// use mmkit::vblock::{Config, Policy, VblockAllocator};
///
/// let range = VmapAllocator::new(0xffff_c900_0000_0000, 0xffff_e900_0000_0000)?;
/// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 2)?;
/// let a = vb.map(0, 3)?; // 3 pages use 4, from CPU 0's first block
/// let b = vb.map(0, 1)?;
/// assert_eq!(b, a + 4 * 4096); // bump allocation
/// vb.unmap(a, 3)?;
/// assert_eq!(vb.unmap(a, 3), Err(FreeError::NotAllocated)); // double unmap
/// vb.check()?;
/// assert_eq!(vb.counters().blocks_created, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct VblockAllocator<R> {
    cfg: Config,
    policy: Policy,
    queues: Vec<Queue>,
    index: BTreeMap<u64, (u32, u32)>,
    /// The range allocator, large maps, and the counters of large maps
    /// and alias flushes (not tied to one CPU).
    global: Global<R>,
    clock: Option<Clock>,
}

/// The single front end's [`Blocks`]: its own index and range allocator.
struct Owned<'a, R> {
    index: &'a mut BTreeMap<u64, (u32, u32)>,
    range: &'a mut R,
}

impl<R: RangeAllocator> Blocks for Owned<'_, R> {
    fn take_block(&mut self, size: u64) -> Result<u64, AllocError> {
        self.range.alloc(size, size)
    }

    fn index(&mut self, no: u64, cpu: u32, slot: u32) {
        self.index.insert(no, (cpu, slot));
    }

    fn give_back(&mut self, no: u64, va: u64) {
        self.index.remove(&no);
        let freed = self.range.free_lazy(va);
        debug_assert!(freed.is_ok(), "a block's range is live");
    }
}

impl<R: RangeAllocator> VblockAllocator<R> {
    /// A front end with `cpus` queues over `range`, which it owns: every
    /// area `range` holds must come from this front end.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] for an invalid `cfg` (see
    /// [`Config::validate`]), `cpus == 0` or `cpus >` [`MAX_CPUS`](super::MAX_CPUS).
    ///
    /// # Complexity
    /// O(cpus).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 4).unwrap();
    /// assert_eq!((vb.cpus(), vb.blocks()), (4, 0));
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// assert!(VblockAllocator::new(range, Config::KERNEL, Policy::Current, 0).is_err());
    /// ```
    pub fn new(range: R, cfg: Config, policy: Policy, cpus: usize) -> Result<Self, AllocError> {
        check_params(&cfg, cpus)?;
        Ok(VblockAllocator {
            cfg,
            policy,
            queues: (0..cpus).map(|_| Queue::new(&cfg, policy)).collect(),
            index: BTreeMap::new(),
            global: Global::new(range),
            clock: None,
        })
    }

    front_accessors!("VblockAllocator", "vb.map(0, 1).unwrap();");

    /// The range allocator (read only: changing it behind the front end's
    /// back would break its invariants).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// vb.map(0, 1).unwrap();
    /// // One block of 4 MiB was taken from the range allocator.
    /// assert_eq!(vb.range().stats().live_bytes, Config::KERNEL.block_size());
    /// ```
    pub fn range(&self) -> &R {
        &self.global.range
    }

    /// CPU `cpu`'s queue and the rest of the front end, borrowed apart.
    fn parts(&mut self, cpu: usize) -> (Env<'_>, &mut Queue, Owned<'_, R>) {
        let env = Env {
            cfg: &self.cfg,
            clock: self.clock,
        };
        let blocks = Owned {
            index: &mut self.index,
            range: &mut self.global.range,
        };
        (env, &mut self.queues[cpu], blocks)
    }

    /// Maps `pages` pages on CPU `cpu`: from its blocks up to `max_alloc`
    /// pages, from the range allocator above. Returns the start address.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] for 0 pages, a size that overflows, or
    /// `cpu >= cpus()`; [`AllocError::NoSpace`] when the range allocator
    /// has no room for a new block (after a fragmented-block purge, for
    /// Current) or the large request.
    ///
    /// # Complexity
    /// O(blocks on the CPU's list) plus, when a block is created or
    /// released, the range allocator's O(log n).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::AllocError;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 2).unwrap();
    /// let a = vb.map(0, 2).unwrap();
    /// let b = vb.map(1, 2).unwrap(); // another CPU, another block
    /// assert_ne!(a / Config::KERNEL.block_size(), b / Config::KERNEL.block_size());
    /// assert_eq!(vb.map(0, 0), Err(AllocError::Invalid));
    /// assert_eq!(vb.map(2, 1), Err(AllocError::Invalid)); // no CPU 2
    /// ```
    pub fn map(&mut self, cpu: usize, pages: u64) -> Result<u64, AllocError> {
        crate::debug_check!(self);
        if cpu >= self.queues.len() {
            return Err(AllocError::Invalid);
        }
        let Some(n) = self.cfg.small(pages) else {
            return self.map_large(pages);
        };
        let t0 = now(self.clock);
        let addr = self.map_small(cpu, n)?;
        let q = &mut self.queues[cpu].counters;
        q.map_calls += 1;
        q.map_ns += since(self.clock, t0);
        Ok(addr)
    }

    /// Maps on `cpu`'s queue; Current retries once after a fragmented
    /// purge of every CPU when no block can be created.
    fn map_small(&mut self, cpu: usize, n: u32) -> Result<u64, AllocError> {
        let mut purged = false;
        loop {
            let (env, q, mut b) = self.parts(cpu);
            match env.map_in(q, &mut b, cpu, n) {
                Err(AllocError::NoSpace) if self.policy == Policy::Current && !purged => {
                    purged = true;
                    self.purge_all_fragmented();
                }
                r => return r,
            }
        }
    }

    /// Forced fragmented purge on every CPU (the allocation-failure path).
    #[cold]
    fn purge_all_fragmented(&mut self) {
        for cpu in 0..self.queues.len() {
            let (env, q, mut b) = self.parts(cpu);
            env.purge_fragmented(q, &mut b);
        }
    }

    fn map_large(&mut self, pages: u64) -> Result<u64, AllocError> {
        let t0 = now(self.clock);
        self.global.map_large(&self.cfg, self.clock, t0, pages)
    }

    /// Unmaps the mapping of `pages` pages that `map` returned at `addr`
    /// (any CPU may unmap any CPU's mapping). The pages become dirty; a
    /// block whose pages are all dirty goes back to the range allocator
    /// lazily.
    ///
    /// # Errors
    /// [`FreeError::Invalid`] for 0 pages; [`FreeError::NotAllocated`] when
    /// no live mapping of that many pages starts at `addr` (unknown address,
    /// double unmap, wrong page count). Nothing changes.
    ///
    /// # Complexity
    /// O(log blocks) for the index, plus the range allocator's O(log n)
    /// when a block is released.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::FreeError;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// let a = vb.map(0, 4).unwrap();
    /// assert_eq!(vb.unmap(a, 2), Err(FreeError::NotAllocated)); // wrong page count
    /// assert_eq!(vb.unmap(a, 4), Ok(()));
    /// assert_eq!(vb.live_pages(), 0);
    /// ```
    pub fn unmap(&mut self, addr: u64, pages: u64) -> Result<(), FreeError> {
        self.unmap_clearing(addr, pages, || {})
    }

    /// [`unmap`](Self::unmap), running `clear` once the mapping is known
    /// to be live and before its pages are freed: a caller that clears its
    /// page tables before an unmap validates, clears and frees with one
    /// lookup. On an error `clear` is not run and nothing changes.
    ///
    /// # Errors
    /// As [`unmap`](Self::unmap).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// let a = vb.map(0, 4).unwrap();
    /// let mut cleared = 0;
    /// assert!(vb.unmap_clearing(a, 2, || cleared += 1).is_err()); // wrong page count
    /// assert_eq!(cleared, 0);
    /// vb.unmap_clearing(a, 4, || cleared += 1).unwrap();
    /// assert_eq!((cleared, vb.live_pages()), (1, 0));
    /// ```
    pub fn unmap_clearing(
        &mut self,
        addr: u64,
        pages: u64,
        clear: impl FnOnce(),
    ) -> Result<(), FreeError> {
        crate::debug_check!(self);
        if pages == 0 {
            return Err(FreeError::Invalid);
        }
        let Some(n) = self.cfg.small(pages) else {
            if self.global.large.get(&addr) == Some(&pages) {
                clear();
            }
            return self.unmap_large(addr, pages);
        };
        let t0 = now(self.clock);
        let &(cpu, slot) = self
            .index
            .get(&self.cfg.block_no(addr))
            .ok_or(FreeError::NotAllocated)?;
        let va = addr & !(self.cfg.block_size() - 1);
        let off = self
            .cfg
            .page_index(addr - va)
            .ok_or(FreeError::NotAllocated)?;
        if !self.queues[cpu as usize].is_live(slot, va, off, n) {
            return Err(FreeError::NotAllocated);
        }
        clear();
        let (env, q, mut b) = self.parts(cpu as usize);
        env.unmap_live(q, &mut b, slot, off, n, t0);
        Ok(())
    }

    /// Whether a block mapping of exactly `pages` pages (1 to
    /// `max_alloc`) starts at `addr`: what [`unmap`](Self::unmap) would
    /// accept, asked without changing anything (a caller that must clear
    /// the page tables before the unmap validates with it first).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// let a = vb.map(0, 3).unwrap();
    /// assert!(vb.is_mapped(a, 3));
    /// assert!(!vb.is_mapped(a, 2) && !vb.is_mapped(a + 4096, 2));
    /// vb.unmap(a, 3).unwrap();
    /// assert!(!vb.is_mapped(a, 3));
    /// ```
    pub fn is_mapped(&self, addr: u64, pages: u64) -> bool {
        let Some(n) = self.cfg.small(pages) else {
            return false;
        };
        let Some(&(cpu, slot)) = self.index.get(&self.cfg.block_no(addr)) else {
            return false;
        };
        let va = addr & !(self.cfg.block_size() - 1);
        let Some(off) = self.cfg.page_index(addr - va) else {
            return false;
        };
        self.queues[cpu as usize].is_live(slot, va, off, n)
    }

    fn unmap_large(&mut self, addr: u64, pages: u64) -> Result<(), FreeError> {
        let t0 = now(self.clock);
        self.global.unmap_large(self.clock, t0, addr, pages)
    }

    /// `vm_unmap_aliases`: flushes every block's unflushed dirty range and
    /// every lazily freed area with ONE call of `flush(start, end)` over the
    /// range covering them all. Current first releases fragmented blocks
    /// with less than a quarter free. Returns whether `flush` was called
    /// (not when nothing was dirty or lazy).
    ///
    /// # Complexity
    /// O(blocks) plus the range allocator's purge.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// let a = vb.map(0, 4).unwrap();
    /// vb.unmap(a, 4).unwrap(); // dirty, not flushed yet
    /// let mut flushes = Vec::new();
    /// assert!(vb.unmap_aliases(&mut |s, e| flushes.push((s, e))));
    /// assert_eq!(flushes, [(a, a + 4 * 4096)]);
    /// assert!(!vb.unmap_aliases(&mut |_, _| unreachable!())); // nothing dirty
    /// ```
    pub fn unmap_aliases(&mut self, flush: &mut dyn FnMut(u64, u64)) -> bool {
        crate::debug_check!(self);
        let (mut lo, mut hi) = (u64::MAX, 0);
        let policy = self.policy;
        for cpu in 0..self.queues.len() {
            let (env, q, mut b) = self.parts(cpu);
            env.take_aliases(q, &mut b, policy, &mut lo, &mut hi);
        }
        self.global.purge(lo, hi, flush)
    }

    /// Counters summed over every CPU (and the large path).
    ///
    /// # Complexity
    /// O(cpus).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 2).unwrap();
    /// vb.map(0, 1).unwrap();
    /// vb.map(1, 1).unwrap();
    /// let c = vb.counters();
    /// assert_eq!((c.map_calls, c.blocks_created), (2, 2));
    /// ```
    pub fn counters(&self) -> Counters {
        let mut c = self.global.counters;
        for q in &self.queues {
            c += q.counters;
        }
        c
    }

    /// One CPU's counters (block maps and unmaps that ran on its blocks).
    /// `None` for `cpu >= cpus()`.
    ///
    /// # Complexity
    /// O(1).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 2).unwrap();
    /// vb.map(1, 1).unwrap();
    /// assert_eq!(vb.cpu_counters(1).unwrap().map_calls, 1);
    /// assert_eq!(vb.cpu_counters(0).unwrap().map_calls, 0);
    /// assert!(vb.cpu_counters(2).is_none());
    /// ```
    pub fn cpu_counters(&self, cpu: usize) -> Option<Counters> {
        self.queues.get(cpu).map(|q| q.counters)
    }

    /// Blocks in use, over all CPUs.
    ///
    /// # Complexity
    /// O(1).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// vb.map(0, 1).unwrap();
    /// vb.map(0, 1).unwrap(); // same block
    /// assert_eq!(vb.blocks(), 1);
    /// ```
    pub fn blocks(&self) -> usize {
        self.index.len()
    }

    /// Blocks on a CPU's list (with free pages); `None` for a bad CPU.
    ///
    /// # Complexity
    /// O(1).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// vb.map(0, 1).unwrap();
    /// assert_eq!(vb.listed_blocks(0), Some(1)); // it still has free pages
    /// assert_eq!(vb.listed_blocks(1), None);
    /// ```
    pub fn listed_blocks(&self, cpu: usize) -> Option<usize> {
        self.queues.get(cpu).map(Queue::listed)
    }

    /// Pages in live mappings (block and large), as asked for: a map of 17
    /// pages counts 17, not the 32 its block reserves.
    ///
    /// # Complexity
    /// O(cpus + large maps).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// vb.map(0, 3).unwrap(); // mapped pages, not the 4 it reserves
    /// assert_eq!(vb.live_pages(), 3);
    /// ```
    pub fn live_pages(&self) -> u64 {
        let large = self.global.large.values().sum::<u64>();
        self.queues.iter().map(Queue::live_pages).sum::<u64>() + large
    }

    /// Verifies every invariant (see the type docs) and the range
    /// allocator's own.
    ///
    /// # Errors
    /// A [`CheckError`] naming the first violation.
    ///
    /// # Complexity
    /// O(blocks x bits) plus the range allocator's check.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::{Config, Policy, VblockAllocator};
    /// use mmkit::vmap::VmapAllocator;
    /// let range = VmapAllocator::new(0x1000_0000, 0x2000_0000).unwrap();
    /// let mut vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, 1).unwrap();
    /// vb.map(0, 3).unwrap();
    /// vb.check().unwrap();
    /// ```
    pub fn check(&self) -> Result<(), CheckError> {
        check_all(
            &self.cfg,
            self.queues.iter(),
            &self.index,
            &self.global.large,
            &self.global.range,
        )
    }
}

/// The shared checker: every queue, the index against the blocks, the range
/// allocator's live areas against blocks plus large maps.
pub(crate) fn check_all<'a, R: RangeAllocator>(
    cfg: &Config,
    queues: impl Iterator<Item = &'a Queue>,
    index: &BTreeMap<u64, (u32, u32)>,
    large: &BTreeMap<u64, u64>,
    range: &R,
) -> Result<(), CheckError> {
    let bs = cfg.block_size();
    let mut blocks = 0usize;
    for (cpu, q) in queues.enumerate() {
        q.check()?;
        for (slot, va) in q.blocks() {
            ensure!(va % bs == 0, Bounds @ va, "block {va:#x} not aligned to {bs:#x}");
            let want = (cpu as u32, slot);
            ensure!(
                index.get(&cfg.block_no(va)) == Some(&want),
                Structure @ va,
                "block {va:#x} (cpu {cpu}) not indexed"
            );
            blocks += 1;
        }
    }
    ensure!(
        index.len() == blocks,
        Accounting,
        "index holds {} blocks, queues {blocks}",
        index.len()
    );
    let mut prev_end = 0u64;
    for (&a, &p) in large {
        ensure!(a >= prev_end, Layout @ a, "large maps overlap at {a:#x}");
        prev_end = a + p * cfg.page_size;
    }
    let st = range.stats();
    let bytes = blocks as u64 * bs + large.values().map(|p| p * cfg.page_size).sum::<u64>();
    ensure!(
        st.live_areas == (blocks + large.len()) as u64 && st.live_bytes == bytes,
        Accounting,
        "range allocator holds {} live areas / {} bytes, front end {} / {bytes}",
        st.live_areas,
        st.live_bytes,
        blocks + large.len()
    );
    range.check()
}
