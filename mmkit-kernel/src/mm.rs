//! The kernel's memory management, wired from the generic layer: the two
//! traits it implements (the MMU: page tables + shootdown; the frame
//! source: the buddy's per-CPU lists), three vmalloc layers over parts of
//! the vmalloc area (mmkit's tree; the busy-list baseline the seeds
//! replaced, with eager flush and with lazy flush as Linux 4.20 had it;
//! the vmap nodes of [`crate::nodes`]), and one `vm_map_ram` front end for
//! every CPU over the tree and one over the nodes.
//!
//! Each layer has 16 GiB whose base is aligned to 16 GiB and no more, so
//! that every layer can satisfy the same alignments (`test_vmalloc`'s
//! `align_shift_alloc_test` asks for every power of two up to a failure).

use core::sync::atomic::{AtomicU64, Ordering};

use mmkit::baseline::linear_vmap::LinearVmap;
use mmkit::vmap::VmapAllocator;
use spin::Once;

use crate::paging::{self, VMALLOC_START};
use crate::percpu::MAX_CPUS;
use crate::profile::{timed, Phase, TimedSpin};
use crate::{arch, phys, tlb};
use mmkit_vmalloc::{
    Flush, FrameSource, MapFailed, MapRam, Mmu, Refused, VmError, Vmalloc, Where, PAGE,
};

/// A lock of the `lock_api` kind (what `MapRam` needs): a spin lock whose
/// contended waits [`crate::profile`] counts.
pub type Lock<T> = lock_api::Mutex<TimedSpin, T>;

/// The machine: PTE writes in [`paging`], flushes through [`tlb`].
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelMmu;

impl Mmu for KernelMmu {
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
        timed(Phase::Map, || map_pages(va, pfns))
    }

    fn clear(&mut self, va: u64, pages: u64) {
        timed(Phase::Clear, || paging::clear_run(va, pages))
    }

    /// Never refuses: the IPIs are acknowledged before it returns.
    fn flush(&mut self, start: u64, end: u64) -> Refused {
        timed(Phase::Flush, || tlb::flush_range(start, end));
        Refused::new()
    }

    fn translate(&self, va: u64) -> Option<u64> {
        paging::translate(va)
    }
}

/// Writes the PTEs of `pfns` from `va`.
fn map_pages(va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
    let mapped = paging::map_run(va, pfns);
    if mapped == pfns.len() as u64 {
        return Ok(());
    }
    // The layer clears what was mapped.
    let err = VmError::MapFailed {
        va: va.saturating_add(mapped.saturating_mul(PAGE)),
    };
    Err(MapFailed { err, mapped })
}

/// Frames from the running CPU's lists of the buddy allocator, one at a
/// time (what `vmalloc` maps), an area's worth in one batch. Never waits:
/// usable under a spin lock with interrupts off.
#[derive(Debug, Clone, Copy, Default)]
pub struct PhysFrames;

impl FrameSource for PhysFrames {
    fn alloc(&mut self, _max: u64) -> Option<(u64, u64)> {
        timed(Phase::Frames, || {
            phys::alloc(arch::cpu_id(), 0, false).map(|pfn| (pfn, 1))
        })
    }

    fn free(&mut self, pfn: u64, count: u64) {
        timed(Phase::Frames, || {
            let cpu = arch::cpu_id();
            for p in pfn..pfn + count {
                phys::free(cpu, p, 0);
            }
        })
    }

    fn zero(&mut self, pfn: u64, count: u64) {
        timed(Phase::Frames, || phys::zero_frames(pfn, count));
    }

    /// One CPU lookup and one timed span for the whole batch.
    fn alloc_frames(&mut self, out: &mut [u64]) -> usize {
        timed(Phase::Frames, || {
            let cpu = arch::cpu_id();
            for (i, slot) in out.iter_mut().enumerate() {
                match phys::alloc(cpu, 0, false) {
                    Some(pfn) => *slot = pfn,
                    None => return i,
                }
            }
            out.len()
        })
    }

    /// One CPU lookup and one timed span for the whole batch.
    fn free_frames(&mut self, frames: &[u64]) {
        timed(Phase::Frames, || {
            let cpu = arch::cpu_id();
            for &pfn in frames {
                phys::free(cpu, pfn, 0);
            }
        })
    }
}

/// mmkit's vmap tree over [`TREE_RANGE`].
pub type TreeLayer = Vmalloc<VmapAllocator>;
/// The busy-list baseline.
pub type LinearLayer = Vmalloc<LinearVmap>;
/// The `vm_map_ram` front end of every CPU, its blocks from the tree layer.
pub type MapRamAll = MapRam<TimedSpin, VmapAllocator>;

static TREE: Once<Lock<TreeLayer>> = Once::new();
static LINEAR: Once<Lock<LinearLayer>> = Once::new();
static LINEAR_LAZY: Once<Lock<LinearLayer>> = Once::new();

/// The tree layer's range (the `vm_map_ram` blocks come from it too).
pub const TREE_RANGE: (u64, u64) = layer_range(1);
/// The eager busy-list layer's range.
pub const LINEAR_RANGE: (u64, u64) = layer_range(3);
/// The lazy busy-list layer's range.
pub const LINEAR_LAZY_RANGE: (u64, u64) = layer_range(5);

/// The `k`th 16 GiB of the vmalloc area (odd `k`: a base aligned to
/// exactly 16 GiB).
pub(crate) const fn layer_range(k: u64) -> (u64, u64) {
    let size = 16 << 30;
    (VMALLOC_START + k * size, VMALLOC_START + (k + 1) * size)
}
static MAP_RAM: Once<MapRamAll> = Once::new();
static MAP_RAM_NODES: Once<MapRamNodes> = Once::new();

/// The `vm_map_ram` front end of every CPU, its blocks from the nodes
/// design's layer for them.
pub type MapRamNodes = MapRam<TimedSpin, crate::nodes::NodeRange>;

/// The largest area, in pages with its guard page, the tree layer pools
/// (Linux's `MAX_VA_SIZE_PAGES`).
const POOL_PAGES: usize = 256;
/// The most areas of one size the tree layer pools.
const POOL_LEN: usize = usize::MAX;

/// Acquisitions of a layer's (global) lock.
pub static GLOBAL_LOCKS: AtomicU64 = AtomicU64::new(0);

/// The kernel's `lazy_max_pages()`: 32 MiB times (log2(CPUs) + 1).
pub fn lazy_max(cpus: usize) -> u64 {
    let fls = usize::BITS - cpus.leading_zeros();
    u64::from(fls) * (32 << 20)
}

/// Builds the layers and the `vm_map_ram` front end.
pub fn init(cpus: usize) {
    let lazy = Flush::Lazy {
        max_bytes: lazy_max(cpus),
    };
    // The tree leaves its alignment summaries off: its aligned requests
    // (the `vm_map_ram` blocks, a few tests) are rare, and keeping the
    // summaries costs every vmalloc and vfree (Linux's tree keeps none).
    // Its flushed areas of up to 256 pages are pooled for reuse by size,
    // as Linux 6.12's vmap nodes pool theirs.
    TREE.call_once(|| {
        let r = VmapAllocator::new(TREE_RANGE.0, TREE_RANGE.1)
            .expect("tree range")
            .without_align_summaries();
        let mut v = Vmalloc::new(r, lazy);
        v.set_pools(POOL_PAGES, POOL_LEN);
        Lock::new(v)
    });
    LINEAR.call_once(|| {
        let r = LinearVmap::new(LINEAR_RANGE.0, LINEAR_RANGE.1).expect("list range");
        Lock::new(Vmalloc::new(r, Flush::Eager))
    });
    LINEAR_LAZY.call_once(|| {
        let r = LinearVmap::new(LINEAR_LAZY_RANGE.0, LINEAR_LAZY_RANGE.1).expect("list range");
        Lock::new(Vmalloc::new(r, lazy))
    });
    MAP_RAM.call_once(|| MapRam::new(tree(), cpus.clamp(1, MAX_CPUS)).expect("CPU count"));
    crate::nodes::init(cpus, lazy);
    MAP_RAM_NODES.call_once(|| {
        MapRam::new(crate::nodes::ram_layer(), cpus.clamp(1, MAX_CPUS)).expect("CPU count")
    });
}

/// The tree layer (global lock).
pub fn tree() -> &'static Lock<TreeLayer> {
    TREE.get().expect("mm::init ran")
}

/// The baseline layer, eager flush (global lock).
pub fn linear() -> &'static Lock<LinearLayer> {
    LINEAR.get().expect("mm::init ran")
}

/// The baseline layer with lazy flush, seed 000's "before" (global lock).
pub fn linear_lazy() -> &'static Lock<LinearLayer> {
    LINEAR_LAZY.get().expect("mm::init ran")
}

/// Takes a layer's lock, counting the acquisition.
pub fn locked<T>(l: &'static Lock<T>) -> lock_api::MutexGuard<'static, TimedSpin, T> {
    GLOBAL_LOCKS.fetch_add(1, Ordering::Relaxed);
    l.lock()
}

/// The `vm_map_ram` front end (any CPU may unmap what another mapped).
pub fn map_ram() -> &'static MapRamAll {
    MAP_RAM.get().expect("mm::init ran")
}

/// The `vm_map_ram` front end of the nodes design.
pub fn map_ram_nodes() -> &'static MapRamNodes {
    MAP_RAM_NODES.get().expect("mm::init ran")
}

/// `vmalloc`: `pages` frames from this CPU's lists, mapped in `layer` at
/// `align`.
pub fn vmalloc<R: mmkit::range::RangeAllocator>(
    layer: &'static Lock<Vmalloc<R>>,
    pages: u64,
    align: u64,
) -> Result<u64, VmError> {
    let size = pages
        .checked_mul(PAGE)
        .ok_or(VmError::TooLarge { bytes: pages })?;
    timed(Phase::Calls, || {
        locked(layer).vmalloc_aligned(&mut KernelMmu, &mut PhysFrames, size, align)
    })
}

/// [`vmalloc`] with the caller's record of the area: `tag` stays with the
/// area until [`vfree_tagged`] hands it back, and `out` gets its frames
/// ([`Vmalloc::vmalloc_tagged`]).
pub fn vmalloc_tagged<R: mmkit::range::RangeAllocator>(
    layer: &'static Lock<Vmalloc<R>>,
    pages: u64,
    align: u64,
    tag: u64,
    out: &mut [u64],
) -> Result<u64, VmError> {
    let size = pages
        .checked_mul(PAGE)
        .ok_or(VmError::TooLarge { bytes: pages })?;
    timed(Phase::Calls, || {
        locked(layer).vmalloc_tagged(&mut KernelMmu, &mut PhysFrames, size, align, tag, out)
    })
}

/// [`vfree`] that hands back the area's tag (0 when it has none).
pub fn vfree_tagged<R: mmkit::range::RangeAllocator>(
    layer: &'static Lock<Vmalloc<R>>,
    va: u64,
) -> Result<u64, VmError> {
    timed(Phase::Calls, || {
        locked(layer).vfree_tagged(&mut KernelMmu, &mut PhysFrames, va)
    })
}

/// `vfree`: unmaps and returns the frames to this CPU's lists.
pub fn vfree<R: mmkit::range::RangeAllocator>(
    layer: &'static Lock<Vmalloc<R>>,
    va: u64,
) -> Result<(), VmError> {
    timed(Phase::Calls, || {
        locked(layer).vfree(&mut KernelMmu, &mut PhysFrames, va)
    })
}

/// `vfree_atomic`: as [`vfree`], but never flushes (no IPI, no wait): for
/// contexts with interrupts off or under a spin lock. The area waits on the
/// lazy list for the next flush.
pub fn vfree_atomic<R: mmkit::range::RangeAllocator>(
    layer: &'static Lock<Vmalloc<R>>,
    va: u64,
) -> Result<(), VmError> {
    locked(layer).vfree_atomic(&mut KernelMmu, &mut PhysFrames, va)
}

/// What the allocators know of `va`, without waiting for a lock (the
/// page-fault path): `None` when a layer is busy.
pub fn whereabouts(va: u64) -> Option<Where> {
    let within = |r: (u64, u64)| (r.0..r.1).contains(&va);
    if within(TREE_RANGE) {
        TREE.get()?.try_lock().map(|l| l.lookup(va))
    } else if within(LINEAR_RANGE) {
        LINEAR.get()?.try_lock().map(|l| l.lookup(va))
    } else if within(LINEAR_LAZY_RANGE) {
        LINEAR_LAZY.get()?.try_lock().map(|l| l.lookup(va))
    } else if within(crate::nodes::RANGE) {
        crate::nodes::whereabouts(va)
    } else {
        Some(Where::Free)
    }
}
