//! `cargo bench -p mmkit-vmalloc`: the layer's own cost per operation pair
//! (vmalloc + vfree, vm_map_ram + vm_unmap_ram), over a machine whose page
//! table is a map and whose flush does nothing, so the layer's work shows.

use std::collections::BTreeMap;

use criterion::{criterion_group, criterion_main, Criterion};
use mmkit::vmap::VmapAllocator;
use mmkit_vmalloc::{Flush, FrameSource, MapFailed, MapRam, Mmu, Refused, Vmalloc, PAGE};

#[derive(Default)]
struct Table(BTreeMap<u64, u64>);

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
struct Stack(Vec<u64>);

impl FrameSource for Stack {
    fn alloc(&mut self, _max: u64) -> Option<(u64, u64)> {
        self.0.pop().map(|p| (p, 1))
    }
    fn free(&mut self, pfn: u64, count: u64) {
        self.0.extend(pfn..pfn + count);
    }
    fn zero(&mut self, _pfn: u64, _count: u64) {}
}

const START: u64 = 0x1000_0000_0000;
const END: u64 = START + (1 << 36);

fn lazy() -> Flush {
    Flush::Lazy {
        max_bytes: 32 << 20,
    }
}

fn vmalloc(c: &mut Criterion) {
    let mut g = c.benchmark_group("layer vmalloc + vfree");
    for pages in [1u64, 16] {
        let mut v = Vmalloc::new(VmapAllocator::new(START, END).unwrap(), lazy());
        let (mut mmu, mut src) = (Table::default(), Stack((0..4096).collect()));
        g.bench_function(format!("{pages} pages, lazy"), |b| {
            b.iter(|| {
                let va = v.vmalloc(&mut mmu, &mut src, pages * PAGE).unwrap();
                v.vfree(&mut mmu, &mut src, va).unwrap();
            })
        });
    }
    g.finish();
}

fn map_ram(c: &mut Criterion) {
    type Layer = lock_api::Mutex<spin::Mutex<()>, Vmalloc<VmapAllocator>>;
    let layer: &'static Layer = Box::leak(Box::new(lock_api::Mutex::new(Vmalloc::new(
        VmapAllocator::new(START, END).unwrap(),
        lazy(),
    ))));
    let ram = MapRam::new(layer, 2).unwrap();
    let (mut mmu, mut src) = (Table::default(), Stack(Vec::new()));
    let pfns = [1, 2, 3, 4];
    c.bench_function("layer vm_map_ram + vm_unmap_ram, 4 pages", |b| {
        b.iter(|| {
            let va = ram.map(&mut mmu, &mut src, 0, &pfns).unwrap();
            ram.unmap(&mut mmu, &mut src, 0, va, 4).unwrap();
        })
    });
}

criterion_group!(benches, vmalloc, map_ram);
criterion_main!(benches);
