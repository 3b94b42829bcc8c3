//! [`MapRam`]: `vm_map_ram` / `vm_unmap_ram` through mmkit's per-CPU vmap
//! blocks, with blocks taken from a shared [`Vmalloc`] ([`BlockSource`]).
//! Its MMU must be one whose flush never refuses (the kernel's): a refused
//! `vm_map_ram` page has nowhere to wait.

use lock_api::{Mutex, RawMutex};
use mmkit::range::{FlushHook, RangeAllocator, RangeStats};
use mmkit::vblock::{Config, Policy, VblockAllocator};
use mmkit::{AllocError, CheckError, FreeError};

use super::{Flush, Mmu, VmError, Vmalloc, PAGE};

/// Most pages one `vm_map_ram` maps (the kernel's `VMAP_MAX_ALLOC`).
pub const MAX_PAGES: usize = 64;

/// `vm_map_ram` for the CPUs of one queue set, over the range allocator `R`.
pub struct MapRam<R: RangeAllocator> {
    vb: VblockAllocator<R>,
    flush: Flush,
}

impl<R: RangeAllocator> MapRam<R> {
    /// Blocks of the kernel's geometry (1024 pages) from `range`, `cpus`
    /// queues.
    ///
    /// # Errors
    /// [`VmError::Invalid`] for a CPU count the front end refuses.
    pub fn new(range: R, cpus: usize, flush: Flush) -> Result<Self, VmError> {
        let vb = VblockAllocator::new(range, Config::KERNEL, Policy::Current, cpus)?;
        Ok(MapRam { vb, flush })
    }

    /// The front end (counters, `check`).
    pub fn vblock(&self) -> &VblockAllocator<R> {
        &self.vb
    }

    /// `vm_map_ram`: maps `pfns` (1 to [`MAX_PAGES`]) on `cpu`'s queue.
    ///
    /// # Errors
    /// [`VmError::Invalid`] for 0 or more than [`MAX_PAGES`] pages;
    /// [`VmError::NoMemory`] when no block or page table can be had.
    pub fn map(&mut self, mmu: &mut impl Mmu, cpu: usize, pfns: &[u64]) -> Result<u64, VmError> {
        if pfns.is_empty() || pfns.len() > MAX_PAGES {
            return Err(VmError::Invalid);
        }
        let n = pfns.len() as u64;
        let va = self.vb.map(cpu, n)?;
        if let Err(f) = mmu.map(va, pfns) {
            // Never used yet: clearing what was mapped is enough. Just
            // mapped: the unmap succeeds.
            mmu.clear(va, f.mapped);
            let _ = self.vb.unmap(va, n);
            return Err(f.err);
        }
        Ok(va)
    }

    /// `vm_unmap_ram`: clears the PTEs, then frees the pages in their block
    /// (eager: flushed now; lazy: when the block is purged).
    ///
    /// # Errors
    /// [`VmError::Invalid`] when `[va, va + pages)` is not one live
    /// mapping; its PTEs are then as they were.
    pub fn unmap(&mut self, mmu: &mut impl Mmu, va: u64, pages: usize) -> Result<(), VmError> {
        if pages == 0 || pages > MAX_PAGES {
            return Err(VmError::Invalid);
        }
        let mut old = [0u64; MAX_PAGES];
        for (i, o) in old.iter_mut().take(pages).enumerate() {
            *o = mmu
                .translate(va + i as u64 * PAGE)
                .ok_or(VmError::Invalid)?;
        }
        mmu.clear(va, pages as u64);
        if let Err(e) = self.vb.unmap(va, pages as u64) {
            // Frames that were mapped there need no new page tables.
            let _ = mmu.map(va, &old[..pages]);
            return Err(e.into());
        }
        if self.flush == Flush::Eager {
            let refused = mmu.flush(va, va + pages as u64 * PAGE);
            debug_assert!(refused.is_empty(), "a vm_map_ram MMU never refuses");
        }
        Ok(())
    }

    /// `vm_unmap_aliases`: one flush over every dirty page and lazy area.
    pub fn unmap_aliases(&mut self, mmu: &mut impl Mmu) -> bool {
        self.vb.unmap_aliases(&mut |s, e| {
            let refused = mmu.flush(s, e);
            debug_assert!(refused.is_empty(), "a vm_map_ram MMU never refuses");
        })
    }

    /// The front end's invariants.
    ///
    /// # Errors
    /// The first violation.
    pub fn check(&self) -> Result<(), CheckError> {
        self.vb.check()
    }
}

/// A shared [`Vmalloc`] as the range allocator of `vm_map_ram` blocks:
/// each call takes the layer's lock; a block freed lazily joins the
/// layer's lazy list and purge. Its `stats` count the ranges this source
/// holds (so a front end's `check` compares its own blocks), the rest of
/// the layer's.
pub struct BlockSource<M: RawMutex + 'static, R: 'static, U> {
    layer: &'static Mutex<M, Vmalloc<R>>,
    mmu: U,
    live: u64,
    live_bytes: u64,
}

impl<M: RawMutex, R, U> BlockSource<M, R, U> {
    /// Blocks from `layer`, purged through `mmu`.
    pub fn new(layer: &'static Mutex<M, Vmalloc<R>>, mmu: U) -> Self {
        BlockSource {
            layer,
            mmu,
            live: 0,
            live_bytes: 0,
        }
    }
}

impl<M: RawMutex, R: RangeAllocator, U: Mmu> RangeAllocator for BlockSource<M, R, U> {
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
        let va = self
            .layer
            .lock()
            .alloc_block(&mut self.mmu, size, align, (vstart, vend))?;
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
        let mut layer = self.layer.lock();
        let (size, out) = layer
            .free_block(&mut self.mmu, addr, false)
            .map_err(|_| FreeError::NotAllocated)?;
        if out.purge_due {
            layer.purge(&mut self.mmu);
        }
        drop(layer);
        self.live -= 1;
        self.live_bytes -= size;
        Ok(size)
    }

    fn purge(&mut self, flush: &mut dyn FnMut(u64, u64)) -> bool {
        self.layer.lock().purge_with(flush)
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
