//! Criterion bench: allocate and free 4-byte percpu objects, the bitmap
//! allocator against the area-map baseline (seed 003's smallest size).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use mmkit::baseline::area_map::AreaMapAllocator;
use mmkit::percpu::{PcpuPtr, PercpuAlloc, PercpuAllocator};

/// Objects per iteration: 16 chunks of 64 KiB units.
const N: usize = 1 << 18;
const UNIT: u64 = 64 << 10;

fn fill(a: &mut impl PercpuAlloc, align: u64) -> Vec<PcpuPtr> {
    (0..N).map(|_| a.alloc(4, align).unwrap()).collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("percpu_4B");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    g.bench_function("bitmap_alloc", |b| {
        b.iter_batched(
            || PercpuAllocator::new(UNIT).unwrap(),
            |mut a| (fill(&mut a, 4), a),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("area_map_alloc", |b| {
        b.iter_batched(
            || AreaMapAllocator::new(UNIT).unwrap(),
            |mut a| (fill(&mut a, 4), a),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("bitmap_free_in_order", |b| {
        b.iter_batched(
            || {
                let mut a = PercpuAllocator::new(UNIT).unwrap();
                let p = fill(&mut a, 4);
                (a, p)
            },
            |(mut a, p)| {
                p.iter().for_each(|&x| {
                    a.free(x).unwrap();
                });
                a
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("area_map_free_in_order", |b| {
        b.iter_batched(
            || {
                let mut a = AreaMapAllocator::new(UNIT).unwrap();
                let p = fill(&mut a, 4);
                (a, p)
            },
            |(mut a, p)| {
                p.iter().for_each(|&x| {
                    a.free(x).unwrap();
                });
                a
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
