//! The kernel's memory management, wired from the generic layer: the MMU
//! (page tables + shootdown), two vmalloc layers over halves of the
//! vmalloc area (mmkit's tree, and the busy-list baseline the seeds
//! replaced), and per-CPU `vm_map_ram` front ends keyed by the CPU id.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use mmkit::baseline::linear_vmap::LinearVmap;
use mmkit::vmap::VmapAllocator;
use spin::Once;

use crate::paging::{self, VMALLOC_SIZE, VMALLOC_START};
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

/// mmkit's vmap tree over the lower half of the vmalloc area.
pub type TreeLayer = Vmalloc<VmapAllocator>;
/// The busy-list baseline over the upper half.
pub type LinearLayer = Vmalloc<LinearVmap>;
/// A CPU's `vm_map_ram` front end, its blocks from the tree layer.
pub type CpuMapRam = MapRam<BlockSource<spin::Mutex<()>, VmapAllocator, KernelMmu>>;

static TREE: Once<Lock<TreeLayer>> = Once::new();
static LINEAR: Once<Lock<LinearLayer>> = Once::new();
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
    let half = VMALLOC_SIZE / 2;
    let lazy = Flush::Lazy {
        max_bytes: lazy_max(cpus),
    };
    TREE.call_once(|| {
        let r = VmapAllocator::new(VMALLOC_START, VMALLOC_START + half).expect("tree range");
        Lock::new(Vmalloc::new(r, lazy))
    });
    LINEAR.call_once(|| {
        let r = LinearVmap::new(VMALLOC_START + half, VMALLOC_START + VMALLOC_SIZE)
            .expect("list range");
        Lock::new(Vmalloc::new(r, Flush::Eager))
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

/// The baseline layer (global lock).
pub fn linear() -> &'static Lock<LinearLayer> {
    LINEAR.get().expect("mm::init ran")
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
    let half = VMALLOC_START + VMALLOC_SIZE / 2;
    if va < half {
        TREE.get()?.try_lock().map(|l| l.lookup(va))
    } else {
        LINEAR.get()?.try_lock().map(|l| l.lookup(va))
    }
}

/// Writes a byte at each page of `[va, va + pages)` (the loop's "touch").
/// Returns whether every write went through (no page fault).
pub fn touch(va: u64, pages: u64, v: u8) -> bool {
    (0..pages).all(|i| crate::fault::probe_write(va + i * PAGE, u64::from(v)))
}

/// Writes the first word of frame `pfn` through the identity map, if the
/// buddy allocator has the frame allocated (so it is not the kernel's or
/// the heap's). Returns whether it wrote.
pub fn write_frame(pfn: u64, v: u64) -> bool {
    if phys::allocated_order(pfn).is_none() {
        return false;
    }
    // SAFETY: the frame is an allocated buddy frame (never heap, kernel
    // image or page tables in use by Rust references); RAM is identity
    // mapped; the volatile write is one aligned word.
    unsafe { core::ptr::write_volatile((pfn * PAGE) as *mut u64, v) };
    true
}
