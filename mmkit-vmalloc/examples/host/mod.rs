//! The host machine of the layer's benchmarks: a page table that is a map,
//! a flush that does nothing and a stack of frames, so the layer's own work
//! shows. Shared by `benches/pairs.rs` and `examples/pair_loop.rs`.

use std::collections::BTreeMap;

use mmkit::vmap::VmapAllocator;
use mmkit_vmalloc::{Flush, FrameSource, MapFailed, MapRam, Mmu, Refused, Vmalloc, PAGE};

/// Page table and TLB in one: `va -> pfn`.
#[derive(Default)]
pub struct Table(BTreeMap<u64, u64>);

impl Mmu for Table {
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
        for (i, &p) in pfns.iter().enumerate() {
            self.0.insert(va + i as u64 * PAGE, p);
        }
        Ok(())
    }
    fn clear(&mut self, va: u64, pages: u64) {
        for i in 0..pages {
            self.0.remove(&(va + i * PAGE));
        }
    }
    fn flush(&mut self, _start: u64, _end: u64) -> Refused {
        Refused::new()
    }
    fn translate(&self, va: u64) -> Option<u64> {
        self.0.get(&va).copied()
    }
}

/// A stack of frames, one at a time (as a kernel's per-CPU lists).
pub struct Stack(pub Vec<u64>);

impl FrameSource for Stack {
    fn alloc(&mut self, _max: u64) -> Option<(u64, u64)> {
        self.0.pop().map(|p| (p, 1))
    }
    fn free(&mut self, pfn: u64, count: u64) {
        self.0.extend(pfn..pfn + count);
    }
    fn zero(&mut self, _pfn: u64, _count: u64) {}
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
