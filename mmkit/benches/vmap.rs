//! Cost of one alloc+free pair on the range allocator as the number of live
//! areas grows (10^3 .. 10^6): it should grow logarithmically.
//!
//! Setup: 2N one-page areas, every other one freed, so there are N live
//! areas and N one-page free holes. Each iteration allocates a page (the
//! lowest hole: a full fit that removes a free block) and frees it again
//! (no neighbour is free: a fresh free block is inserted).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use mmkit::vmap::VmapAllocator;

const PAGE: u64 = 4096;

fn fragmented(n: u64) -> VmapAllocator {
    let mut va = VmapAllocator::new(0, 1 << 46).unwrap();
    let addrs: Vec<u64> = (0..2 * n).map(|_| va.alloc(PAGE, PAGE).unwrap()).collect();
    for a in addrs.iter().step_by(2) {
        va.free(*a).unwrap();
    }
    va
}

fn alloc_free(c: &mut Criterion) {
    let mut g = c.benchmark_group("vmap_alloc_free_pair");
    for n in [1_000u64, 10_000, 100_000, 1_000_000] {
        let mut va = fragmented(n);
        // A large request at an unaligned window position, too: the descent
        // must pass over every one-page hole by its augmented value.
        g.bench_with_input(BenchmarkId::new("page", n), &n, |b, _| {
            b.iter(|| {
                let a = va.alloc(PAGE, PAGE).unwrap();
                va.free(a).unwrap();
            })
        });
        g.bench_with_input(BenchmarkId::new("16_pages", n), &n, |b, _| {
            b.iter(|| {
                let a = va.alloc(16 * PAGE, PAGE).unwrap();
                va.free(a).unwrap();
            })
        });
    }
    g.finish();
}

criterion_group!(benches, alloc_free);
criterion_main!(benches);
