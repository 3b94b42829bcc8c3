//! Cost of one alloc+free pair on the range allocator as the number of live
//! areas grows (10^3 .. 10^6): it should grow logarithmically.
//!
//! Setup: 2N one-page areas, every other one freed, so there are N live
//! areas and N one-page free holes. Each iteration allocates a page (the
//! lowest hole: a full fit that removes a free block) and frees it again
//! (no neighbour is free: a fresh free block is inserted).
//!
//! Two aligned patterns too, where the tree's alignment summaries are on
//! and keeping them exact is most of the cost:
//! - `random_align`: N live areas of 1..10 pages aligned to 1..1024 pages
//!   (test_vmalloc's random_size_align_alloc_test, as `mmkit bench
//!   random-align` churns them): free a random one, allocate another;
//! - `fix_align`: test_vmalloc's fix_align_alloc_test, 6 pages aligned to
//!   32 KiB then a lazy free, with the kernel's 64 MiB lazy threshold: every
//!   allocation splits the last free block and every 2700th purges.

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

/// xorshift64: the same requests every run.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn random_align_request(x: &mut u64) -> (u64, u64) {
    ((1 + next(x) % 10) * PAGE, PAGE << (next(x) % 11))
}

fn aligned(c: &mut Criterion) {
    let mut g = c.benchmark_group("vmap_aligned_pair");
    for n in [1_000usize, 10_000, 100_000] {
        let mut va = VmapAllocator::new(0, 1 << 46).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut live: Vec<u64> = (0..n)
            .map(|_| {
                let (size, align) = random_align_request(&mut x);
                va.alloc(size, align).unwrap()
            })
            .collect();
        g.bench_with_input(BenchmarkId::new("random_align", n), &n, |b, _| {
            b.iter(|| {
                let slot = (next(&mut x) % n as u64) as usize;
                va.free(live[slot]).unwrap();
                let (size, align) = random_align_request(&mut x);
                live[slot] = va.alloc(size, align).unwrap();
            })
        });
    }
    let mut va = VmapAllocator::new(0xffff_c900_0000_0000, 0xffff_e900_0000_0000).unwrap();
    va.set_lazy_max(64 << 20);
    g.bench_function("fix_align", |b| {
        b.iter(|| {
            let a = va.alloc(6 * PAGE, 32 << 10).unwrap();
            va.free_lazy(a).unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, alloc_free, aligned);
criterion_main!(benches);
