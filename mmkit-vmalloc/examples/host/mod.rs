//! The host machine of the layer's benchmarks: a flat page table, a flush
//! that does nothing and a stack of frames, so the layer's own work shows. Shared by `benches/pairs.rs` and `examples/pair_loop.rs`.

use mmkit::vmap::VmapAllocator;
use mmkit_vmalloc::{Flush, FrameSource, MapFailed, MapRam, Mmu, Refused, Vmalloc, PAGE};

/// Pages the table covers from `START`: the benchmarks' areas and blocks
/// stay in the first 256 MiB (the lazy list is purged past 32 MiB, and the
/// lowest fit reuses the space from `START`).
const PAGES: usize = 1 << 16;

/// Page table and TLB in one, flat as a page table's level: `pfn + 1` per
/// page from `START`, 0 when unmapped. Its code is small and the same in
/// every build compared, so instruction counts show the layer.
pub struct Table(Vec<u64>);

impl Default for Table {
    fn default() -> Self {
        Table(vec![0; PAGES])
    }
}

/// The slot of `va` (a page the benchmarks use: panics beyond the table).
fn slot(va: u64) -> usize {
    ((va - START) / PAGE) as usize
}

impl Mmu for Table {
    #[inline(never)]
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
        let at = slot(va);
        for (pte, &p) in self.0[at..at + pfns.len()].iter_mut().zip(pfns) {
            *pte = p + 1;
        }
        Ok(())
    }
    #[inline(never)]
    fn clear(&mut self, va: u64, pages: u64) {
        let at = slot(va);
        self.0[at..at + pages as usize].fill(0);
    }
    #[inline(never)]
    fn flush(&mut self, _start: u64, _end: u64) -> Refused {
        Refused::new()
    }
    #[inline(never)]
    fn translate(&self, va: u64) -> Option<u64> {
        let pte = *self.0.get(slot(va))?;
        pte.checked_sub(1)
    }
}

/// A stack of frames (as a kernel's per-CPU lists): one frame per `alloc`,
/// or as many as asked from its top in one batch.
pub struct Stack(pub Vec<u64>);

impl FrameSource for Stack {
    #[inline(never)]
    fn alloc(&mut self, _max: u64) -> Option<(u64, u64)> {
        self.0.pop().map(|p| (p, 1))
    }
    #[inline(never)]
    fn free(&mut self, pfn: u64, count: u64) {
        self.0.extend(pfn..pfn + count);
    }
    #[inline(never)]
    fn zero(&mut self, _pfn: u64, _count: u64) {}
    #[inline(never)]
    fn alloc_frames(&mut self, out: &mut [u64]) -> usize {
        let n = out.len().min(self.0.len());
        let top = self.0.len() - n;
        out[..n].copy_from_slice(&self.0[top..]);
        self.0.truncate(top);
        n
    }
    #[inline(never)]
    fn free_frames(&mut self, frames: &[u64]) {
        self.0.extend_from_slice(frames);
    }
}

/// The virtual range the layers place areas in.
const START: u64 = 0x1000_0000_0000;
/// Its end (64 GiB above `START`).
const END: u64 = START + (1 << 36);

/// Lazy flushing with a 32 MiB threshold.
fn lazy() -> Flush {
    Flush::Lazy {
        max_bytes: 32 << 20,
    }
}

/// A plain layer over `[START, END)`, lazy.
pub fn layer() -> Vmalloc<VmapAllocator> {
    Vmalloc::new(VmapAllocator::new(START, END).unwrap(), lazy())
}

/// A layer behind a spin lock, shared for ever.
pub type Shared = lock_api::Mutex<spin::Mutex<()>, Vmalloc<VmapAllocator>>;

/// A `vm_map_ram` front end for 2 CPUs over a new shared layer.
pub fn map_ram() -> MapRam<spin::Mutex<()>, VmapAllocator> {
    let layer: &'static Shared = Box::leak(Box::new(lock_api::Mutex::new(layer())));
    MapRam::new(layer, 2).unwrap()
}
