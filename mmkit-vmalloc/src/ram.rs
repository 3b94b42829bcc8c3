//! [`MapRam`]: `vm_map_ram` / `vm_unmap_ram` / `vm_unmap_aliases` for every
//! CPU through mmkit's per-CPU vmap blocks, one queue (and one lock) per
//! CPU, blocks taken from a shared [`Vmalloc`].
//!
//! ```text
//!  map(cpu)      queue[cpu] lock ──> VblockAllocator ──new block──> layer lock
//!  unmap(cpu)    clear PTEs ──> queue[cpu] (the block's owner: any CPU may
//!                unmap; another CPU's block is found through the layer)
//!  unmap_aliases every queue's dirty range, then ONE flush with the layer's
//!                purge under the layer lock
//! ```
//!
//! Lock order: a queue's lock, then the layer's. Flushes happen with no
//! queue lock held (the layer's lock is held for a purge). `map` maps
//! with no lock held and `unmap` clears under the owning queue's lock,
//! neither under the layer's: an MMU whose page table other calls share
//! locks it itself, last.
//!
//! The front end reaches the layer through a handle `H` (a `&'static`
//! lock in a kernel, an `Arc` in a process) and keeps its queues in locks
//! of type `Q`: any lock that implements [`Lock`]. [`MapRam`] is the
//! kernel's form, `lock_api` locks throughout.

use alloc::vec::Vec;
use core::cell::Cell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

use lock_api::{Mutex, MutexGuard, RawMutex};
use mmkit::range::{FlushHook, RangeAllocator, RangeStats};
use mmkit::vblock::{Config, Counters, Policy, VblockAllocator};
use mmkit::{AllocError, CheckError, FreeError};

use super::lazy::Gone;
use super::maps::{Area, Vmalloc};
use super::{Flush, FrameSource, Mmu, VmError, PAGE};

/// Most pages one `vm_map_ram` maps (the kernel's `VMAP_MAX_ALLOC`).
pub const MAX_PAGES: usize = Config::KERNEL.max_alloc as usize;

/// A lock the front end takes: the machine's kind of mutex.
///
/// ```
/// use mmkit_vmalloc::Lock;
/// let m: lock_api::Mutex<spin::Mutex<()>, u32> = lock_api::Mutex::new(1);
/// *Lock::lock(&m) += 1;
/// assert_eq!(*m.lock(), 2);
/// ```
pub trait Lock {
    /// What the lock guards.
    type Data;
    /// Its guard: the data, until the guard is dropped.
    type Guard<'a>: DerefMut<Target = Self::Data>
    where
        Self: 'a;
    /// Takes the lock, waiting for it.
    fn lock(&self) -> Self::Guard<'_>;
}

impl<M: RawMutex, T> Lock for Mutex<M, T> {
    type Data = T;
    type Guard<'a>
        = MutexGuard<'a, M, T>
    where
        Self: 'a;

    fn lock(&self) -> Self::Guard<'_> {
        Mutex::lock(self)
    }
}

/// The allocator of one CPU's queue.
pub type Queue<R, H> = VblockAllocator<BlockSource<R, H>>;

/// `vm_map_ram` for every CPU of a machine, over the shared layer that
/// `H` leads to (its flush policy decides whether `vm_unmap_ram` flushes at
/// once), each CPU's queue in a lock `Q`. Its MMU's flush should not refuse
/// dirty pages: a refused page waits for the flush of its whole block.
pub struct MapRamIn<R: 'static, H, Q> {
    layer: H,
    queues: Vec<Q>,
    /// The layer's policy is eager: every unmap flushes its pages.
    eager: bool,
    geometry: Config,
    range: PhantomData<fn() -> R>,
}

/// [`MapRamIn`] as a kernel has it: a `&'static` `lock_api` lock around
/// the layer, queues in the same kind of lock.
pub type MapRam<M, R> =
    MapRamIn<R, &'static Mutex<M, Vmalloc<R>>, Mutex<M, Queue<R, &'static Mutex<M, Vmalloc<R>>>>>;

impl<M: RawMutex + 'static, R: RangeAllocator + 'static> MapRam<M, R> {
    /// A front end of `cpus` queues, blocks of the kernel's geometry (1024
    /// pages) from `layer`. Whether an unmap flushes at once is the layer's
    /// flush policy now (eager or lazy; a later change of the lazy
    /// threshold is followed, a change between eager and lazy is not).
    ///
    /// # Errors
    /// [`VmError::BadCpu`] for 0 CPUs or more than the front end takes.
    pub fn new(layer: &'static Mutex<M, Vmalloc<R>>, cpus: usize) -> Result<Self, VmError> {
        Self::with_geometry(layer, cpus, Config::KERNEL)
    }
}

impl<R, H, L, Q> MapRamIn<R, H, Q>
where
    R: RangeAllocator + 'static,
    H: Deref<Target = L> + Clone,
    L: Lock<Data = Vmalloc<R>> + ?Sized,
    Q: Lock<Data = Queue<R, H>> + From<Queue<R, H>>,
{
    /// A front end of `cpus` queues, blocks of `geometry` (at most
    /// [`MAX_PAGES`] pages a mapping) from the layer `layer` leads to; as
    /// [`MapRam::new`] otherwise.
    ///
    /// # Errors
    /// [`VmError::BadCpu`] for 0 CPUs or more than the front end takes;
    /// [`VmError::TooManyPages`] for a geometry whose mappings may be
    /// longer than [`MAX_PAGES`]; [`VmError::BadAlign`] for a geometry
    /// the blocks refuse or pages other than [`PAGE`].
    pub fn with_geometry(layer: H, cpus: usize, geometry: Config) -> Result<Self, VmError> {
        let bad = VmError::BadCpu { cpu: cpus, cpus };
        if cpus == 0 || cpus > u16::MAX as usize {
            return Err(bad);
        }
        if geometry.max_alloc > MAX_PAGES as u64 {
            let (pages, max) = (geometry.max_alloc, MAX_PAGES as u64);
            return Err(VmError::TooManyPages { pages, max });
        }
        let bad_geometry = VmError::BadAlign {
            align: geometry.page_size,
        };
        if geometry.page_size != PAGE || geometry.validate().is_err() {
            return Err(bad_geometry);
        }
        let mut queues = Vec::with_capacity(cpus);
        for cpu in 0..cpus {
            let src = BlockSource::new(layer.clone(), cpu);
            let vb = VblockAllocator::new(src, geometry, Policy::Current, 1)
                .map_err(|_| VmError::BadAlign { align: PAGE })?;
            queues.push(Q::from(vb));
        }
        let eager = layer.lock().flush == Flush::Eager;
        Ok(MapRamIn {
            layer,
            queues,
            eager,
            geometry,
            range: PhantomData,
        })
    }

    /// CPUs served.
    pub fn cpus(&self) -> usize {
        self.queues.len()
    }

    fn queue(&self, cpu: usize) -> Result<&Q, VmError> {
        let cpus = self.queues.len();
        self.queues.get(cpu).ok_or(VmError::BadCpu { cpu, cpus })
    }

    /// `vm_map_ram`: maps `pfns` (1 to [`MAX_PAGES`]) in a block of `cpu`
    /// (the CPU that runs the call). When no block can be had, purges the
    /// layer (a flush, under the layer's lock) and retries once.
    ///
    /// # Errors
    /// [`VmError::Empty`], [`VmError::TooManyPages`], [`VmError::BadCpu`];
    /// [`VmError::NoSpace`] after the purge; the MMU's error (what was
    /// mapped is cleared). Nothing stays mapped then, but a CPU may still
    /// cache the pages the failed map wrote, as after
    /// [`unmap`](Self::unmap): their frames are unreachable after the next
    /// [`unmap_aliases`](Self::unmap_aliases).
    #[inline]
    pub fn map(
        &self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        cpu: usize,
        pfns: &[u64],
    ) -> Result<u64, VmError> {
        let n = pfns.len() as u64;
        self.check_pages(n)?;
        let queue = self.queue(cpu)?;
        // The queue's lock is released before the purge takes the layer's.
        let first = queue.lock().map(0, n);
        let va = match first {
            Err(AllocError::NoSpace) => {
                self.layer.lock().purge(mmu, src);
                queue.lock().map(0, n)
            }
            r => r,
        };
        let va = va.map_err(|_| VmError::NoSpace { bytes: n * PAGE })?;
        if let Err(f) = mmu.map(va, pfns) {
            // Never used yet: clearing what was mapped is enough.
            mmu.clear(va, f.mapped);
            let undone = queue.lock().unmap(va, n);
            debug_assert!(undone.is_ok(), "just mapped");
            return Err(f.err);
        }
        Ok(va)
    }

    /// `vm_unmap_ram`: clears the PTEs of the mapping of `pages` pages at
    /// `va` (made on any CPU; `cpu` is the one running the call, whose
    /// queue is tried first), then frees its pages in their block: flushed
    /// now under the eager policy, with the block otherwise (a purge may
    /// run here, under the layer's lock).
    ///
    /// # Errors
    /// [`VmError::Empty`], [`VmError::TooManyPages`], [`VmError::BadCpu`];
    /// [`VmError::NotMapped`] when `va` maps nothing;
    /// [`VmError::WrongPageCount`] when no mapping of `pages` pages starts
    /// there. Its PTEs are as they were then. The PTEs are cleared under
    /// the owning queue's lock (`clear` never flushes).
    #[inline]
    pub fn unmap(
        &self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        cpu: usize,
        va: u64,
        pages: usize,
    ) -> Result<(), VmError> {
        self.check_pages(pages as u64)?;
        let n = pages as u64;
        // Validated, cleared and freed under the owning queue's lock, in
        // one lookup: a refused call changes nothing, and no other call
        // frees the slot between the check and the clear.
        let mut q = self.queue(cpu)?.lock();
        if q.unmap_clearing(va, n, || mmu.clear(va, n)).is_err() {
            drop(q);
            let block = va & !(self.geometry.block_size() - 1);
            let owner = self.layer.lock().ram_blocks.get(&block).copied();
            let other = owner.filter(|&o| o != cpu).and_then(|o| self.queues.get(o));
            let mut o = other.map(Lock::lock);
            let freed = o
                .as_mut()
                .map(|o| o.unmap_clearing(va, n, || mmu.clear(va, n)));
            match (o, freed) {
                (Some(o), Some(Ok(()))) => q = o,
                _ => {
                    return Err(match mmu.translate(va) {
                        None => VmError::NotMapped { va },
                        Some(_) => VmError::WrongPageCount { va, pages: n },
                    })
                }
            }
        }
        let due = q.range().due.take();
        drop(q);
        if self.eager {
            let mut layer = self.layer.lock();
            let refused = mmu.flush(va, va + n * PAGE);
            layer.stats.flushes += 1;
            layer.stats.pages_flushed += n;
            layer.stats.refusals += refused.len() as u64;
            if !refused.is_empty() {
                // The block waits for a flush that succeeds when it is freed.
                let block = va & !(self.geometry.block_size() - 1);
                layer.ram_unflushed.insert(block);
                layer.alias_refused(va, va + n * PAGE);
            }
        } else if due {
            self.layer.lock().purge_lazy(mmu, src);
        }
        Ok(())
    }

    /// `vm_unmap_aliases`: one flush over every CPU's dirty pages, the pages
    /// whose flush was refused before, and the layer's lazy and stuck
    /// lists, under the layer's lock. Returns whether it flushed.
    pub fn unmap_aliases(&self, mmu: &mut impl Mmu, src: &mut impl FrameSource) -> bool {
        let (mut lo, mut hi) = (u64::MAX, 0);
        for q in &self.queues {
            q.lock().unmap_aliases(&mut |s, e| {
                lo = lo.min(s);
                hi = hi.max(e);
            });
        }
        self.layer.lock().purge_widened(mmu, src, lo, hi)
    }

    /// Pages mapped now, over every CPU.
    pub fn live_pages(&self) -> u64 {
        self.queues.iter().map(|q| q.lock().live_pages()).sum()
    }

    /// The front end's counters, summed over every CPU.
    pub fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for q in &self.queues {
            c += q.lock().counters();
        }
        c
    }

    /// Every queue's invariants.
    ///
    /// # Errors
    /// The first violation.
    pub fn check(&self) -> Result<(), CheckError> {
        self.queues.iter().try_for_each(|q| q.lock().check())
    }

    /// Refuses 0 pages and more than one mapping of the geometry holds.
    fn check_pages(&self, pages: u64) -> Result<(), VmError> {
        let max = self.geometry.max_alloc;
        match pages {
            0 => Err(VmError::Empty),
            p if p > max => Err(VmError::TooManyPages { pages, max }),
            _ => Ok(()),
        }
    }
}

/// The layer's side of a [`MapRam`]'s blocks.
impl<R: RangeAllocator> Vmalloc<R, Area> {
    /// Reserves a block for `cpu`'s queue, without purging.
    fn reserve_ram_block(
        &mut self,
        cpu: usize,
        size: u64,
        align: u64,
        window: (u64, u64),
    ) -> Result<u64, AllocError> {
        let va = self.reserve_block(size, align, window)?;
        self.ram_blocks.insert(va, cpu);
        Ok(va)
    }

    /// Frees a block of a front end, every page of it cleared and (under
    /// the eager policy) flushed by its unmaps: freed at once (eager, when
    /// no unmap's flush was refused) or put on the lazy list. Never
    /// flushes. Returns its size and whether a
    /// purge is due.
    fn free_ram_block(&mut self, va: u64) -> Option<(u64, bool)> {
        self.ram_blocks.remove(&va)?;
        let size = self.blocks.remove(&va)?;
        self.stats.block_ops += 1;
        let unflushed = self.ram_unflushed.remove(&va);
        if self.flush == Flush::Eager && !unflushed {
            let freed = self.range.free(va);
            debug_assert!(freed.is_ok(), "our block");
            self.remember(va, va + size);
            self.stats.released += 1;
            return Some((size, false));
        }
        // Eager with an unflushed page: it waits, and never makes a purge
        // due (the eager threshold is none).
        let r = self.detach_retired(va, size, Gone::Block);
        let due = self.retiring.push(r);
        Some((size, due))
    }
}

/// A shared [`Vmalloc`] (the one `H` leads to) as the range allocator of
/// one CPU's `vm_map_ram` blocks: each call takes the layer's lock. Its
/// `stats` count the ranges this source holds (so a front end's `check`
/// compares its own blocks), the rest of the layer's.
pub struct BlockSource<R: 'static, H> {
    layer: H,
    cpu: usize,
    live: u64,
    live_bytes: u64,
    /// A freed block took the lazy list past its threshold.
    due: Cell<bool>,
    range: PhantomData<fn() -> R>,
}

impl<R, H> BlockSource<R, H> {
    fn new(layer: H, cpu: usize) -> Self {
        BlockSource {
            layer,
            cpu,
            live: 0,
            live_bytes: 0,
            due: Cell::new(false),
            range: PhantomData,
        }
    }
}

impl<R, H, L> RangeAllocator for BlockSource<R, H>
where
    R: RangeAllocator + 'static,
    H: Deref<Target = L>,
    L: Lock<Data = Vmalloc<R>> + ?Sized,
{
    fn space(&self) -> (u64, u64) {
        self.layer.lock().range().space()
    }

    fn alloc_in(
        &mut self,
        size: u64,
        align: u64,
        vstart: u64,
        vend: u64,
    ) -> Result<u64, AllocError> {
        let window = (vstart, vend);
        let va = self
            .layer
            .lock()
            .reserve_ram_block(self.cpu, size, align, window)?;
        self.live += 1;
        self.live_bytes += size;
        Ok(va)
    }

    fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
        // A block's PTEs are clear but may be cached: always through the
        // layer's flush policy.
        self.free_lazy(addr)
    }

    fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
        let freed = self.layer.lock().free_ram_block(addr);
        let (size, due) = freed.ok_or(FreeError::NotAllocated)?;
        self.due.set(self.due.get() || due);
        self.live -= 1;
        self.live_bytes -= size;
        Ok(size)
    }

    /// Nothing: the front end purges the layer itself, with its MMU, after
    /// collecting every queue's dirty range.
    fn purge(&mut self, _flush: &mut dyn FnMut(u64, u64)) -> bool {
        false
    }

    fn set_lazy_max(&mut self, _bytes: u64) {
        // The layer's policy decides.
    }

    fn set_flush_hook(&mut self, _hook: Option<FlushHook>) {
        // The layer flushes through its MMU.
    }

    fn stats(&self) -> RangeStats {
        let mut st = self.layer.lock().range().stats();
        st.live_areas = self.live;
        st.live_bytes = self.live_bytes;
        st
    }

    fn check(&self) -> Result<(), CheckError> {
        self.layer.lock().range().check()
    }
}
