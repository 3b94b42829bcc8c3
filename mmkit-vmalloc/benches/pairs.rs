//! `cargo bench -p mmkit-vmalloc`: the layer's own cost per operation pair
//! (vmalloc + vfree, vm_map_ram + vm_unmap_ram), over a machine whose page
//! table is a map and whose flush does nothing, so the layer's work shows.

#[path = "../examples/host/mod.rs"]
mod host;

use criterion::{criterion_group, criterion_main, Criterion};
use host::{Stack, Table};
use mmkit_vmalloc::PAGE;

fn vmalloc(c: &mut Criterion) {
    let mut g = c.benchmark_group("layer vmalloc + vfree");
    for pages in [1u64, 16] {
        let mut v = host::layer();
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
    let ram = host::map_ram();
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
