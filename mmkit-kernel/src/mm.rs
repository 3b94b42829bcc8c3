//! The kernel's memory management, wired from the generic layer: the MMU
//! (page tables + shootdown), three vmalloc layers over parts of the
//! vmalloc area (mmkit's tree; the busy-list baseline the seeds replaced,
//! with eager flush and with lazy flush as Linux 4.20 had it), and per-CPU
//! `vm_map_ram` front ends keyed by the CPU id.
//!
//! Each layer has 16 GiB whose base is aligned to 16 GiB and no more, so
//! that every layer can satisfy the same alignments (`test_vmalloc`'s
//! `align_shift_alloc_test` asks for every power of two up to a failure).

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use mmkit::baseline::linear_vmap::LinearVmap;
use mmkit::vmap::VmapAllocator;
use spin::Once;

use crate::paging::{self, VMALLOC_START};
use crate::percpu::MAX_CPUS;
use crate::{arch, phys, tlb};
use mmkit_vmalloc::{
    BlockSource, Flush, MapFailed, MapRam, Mmu, Refused, VmError, Vmalloc, Where, PAGE,
};

/// A lock of the `lock_api` kind (what `BlockSource` needs).
pub type Lock<T> = spin::lock_api::Mutex<T>;

/// The machine: PTE writes in [`paging`], flushes through [`tlb`].
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelMmu;

impl Mmu for KernelMmu {
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
        for (i, &pfn) in pfns.iter().enumerate() {
            if !paging::map(va + i as u64 * PAGE, pfn) {
                // The layer clears what was mapped.
                let (err, mapped) = (VmError::NoMemory, i as u64);
                return Err(MapFailed { err, mapped });
            }
        }
        Ok(())
    }

    fn clear(&mut self, va: u64, pages: u64) {
        for i in 0..pages {
            paging::clear(va + i * PAGE);
        }
    }

    /// Never refuses: the IPIs are acknowledged before it returns.
    fn flush(&mut self, start: u64, end: u64) -> Refused {
        tlb::flush_range(start, end);
        Refused::new()
    }

    fn translate(&self, va: u64) -> Option<u64> {
        paging::translate(va)
    }
}

/// mmkit's vmap tree over [`TREE_RANGE`].
pub type TreeLayer = Vmalloc<VmapAllocator>;
/// The busy-list baseline.
pub type LinearLayer = Vmalloc<LinearVmap>;
/// A CPU's `vm_map_ram` front end, its blocks from the tree layer.
pub type CpuMapRam = MapRam<BlockSource<spin::Mutex<()>, VmapAllocator, KernelMmu>>;

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
const fn layer_range(k: u64) -> (u64, u64) {
    let size = 16 << 30;
    (VMALLOC_START + k * size, VMALLOC_START + (k + 1) * size)
}
static MAP_RAM: [Once<spin::Mutex<CpuMapRam>>; MAX_CPUS] = [const { Once::new() }; MAX_CPUS];

/// Acquisitions of a layer's (global) lock.
pub static GLOBAL_LOCKS: AtomicU64 = AtomicU64::new(0);

/// The kernel's `lazy_max_pages()`: 32 MiB times (log2(CPUs) + 1).
pub fn lazy_max(cpus: usize) -> u64 {
    let fls = usize::BITS - cpus.leading_zeros();
    u64::from(fls) * (32 << 20)
}

/// Builds the layers and one `vm_map_ram` front end per CPU.
pub fn init(cpus: usize) {
    let lazy = Flush::Lazy {
        max_bytes: lazy_max(cpus),
    };
    TREE.call_once(|| {
        let r = VmapAllocator::new(TREE_RANGE.0, TREE_RANGE.1).expect("tree range");
        Lock::new(Vmalloc::new(r, lazy))
    });
    LINEAR.call_once(|| {
        let r = LinearVmap::new(LINEAR_RANGE.0, LINEAR_RANGE.1).expect("list range");
        Lock::new(Vmalloc::new(r, Flush::Eager))
    });
    LINEAR_LAZY.call_once(|| {
        let r = LinearVmap::new(LINEAR_LAZY_RANGE.0, LINEAR_LAZY_RANGE.1).expect("list range");
        Lock::new(Vmalloc::new(r, lazy))
    });
    for slot in MAP_RAM.iter().take(cpus) {
        slot.call_once(|| {
            let src = BlockSource::new(tree(), KernelMmu);
            spin::Mutex::new(MapRam::new(src, 1, lazy).expect("one queue"))
        });
    }
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
pub fn locked<T>(l: &'static Lock<T>) -> lock_api::MutexGuard<'static, spin::Mutex<()>, T> {
    GLOBAL_LOCKS.fetch_add(1, Ordering::Relaxed);
    l.lock()
}

/// `cpu`'s `vm_map_ram` front end.
pub fn map_ram(cpu: usize) -> &'static spin::Mutex<CpuMapRam> {
    MAP_RAM[cpu].get().expect("mm::init ran for this CPU")
}

/// `vmalloc`: `pages` frames from this CPU's lists, mapped in `layer` at
/// `align`.
pub fn vmalloc<R: mmkit::range::RangeAllocator>(
    layer: &'static Lock<Vmalloc<R>>,
    pages: u64,
    align: u64,
) -> Result<u64, VmError> {
    let cpu = arch::cpu_id();
    let mut frames = Vec::with_capacity(pages as usize);
    for _ in 0..pages {
        match phys::alloc(cpu, 0, false) {
            Some(p) => frames.push(p),
            None => {
                for &p in &frames {
                    phys::free(cpu, p, 0);
                }
                return Err(VmError::NoMemory);
            }
        }
    }
    let r = locked(layer).vmap(&mut KernelMmu, frames.clone(), align);
    if r.is_err() {
        for &p in &frames {
            phys::free(cpu, p, 0);
        }
    }
    r
}

/// `vfree`: unmaps and returns the frames to this CPU's lists.
pub fn vfree<R: mmkit::range::RangeAllocator>(
    layer: &'static Lock<Vmalloc<R>>,
    va: u64,
) -> Result<(), VmError> {
    let frames = locked(layer).vunmap(&mut KernelMmu, va)?;
    let cpu = arch::cpu_id();
    for p in frames {
        phys::free(cpu, p, 0);
    }
    Ok(())
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
    } else {
        Some(Where::Free)
    }
}
