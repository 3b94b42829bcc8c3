//! A map+unmap pair on the per-CPU block path against an alloc+free pair on
//! the range allocator behind its one Mutex (the only way threads can share
//! it), 4 pages each, in one group so the numbers are comparable.
//!
//! Both run over the same range allocator state: empty, and with 10^4
//! live one-page areas (every other one of 2 x 10^4 freed), the shape a
//! long-running vmalloc space has. The per-CPU path touches the range
//! allocator only once per 256 maps (a block of 1024 pages / 4).
//! `floor_two_lock_pairs` is what both pay for their two lock round trips.

use std::hint::black_box;
use std::sync::Mutex;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use mmkit::vblock::{ConcurrentVblock, Config, Policy};
use mmkit::vmap::VmapAllocator;

const PAGE: u64 = 4096;
const START: u64 = 0xffff_c900_0000_0000;
const END: u64 = 0xffff_e900_0000_0000;

/// A range allocator with `n` live one-page areas and `n` one-page holes.
fn populated(n: u64) -> VmapAllocator {
    let mut va = VmapAllocator::new(START, END).unwrap();
    let addrs: Vec<u64> = (0..2 * n).map(|_| va.alloc(PAGE, PAGE).unwrap()).collect();
    for a in addrs.iter().step_by(2) {
        va.free(*a).unwrap();
    }
    va
}

fn pair(c: &mut Criterion) {
    let mut g = c.benchmark_group("vblock_pair_4_pages");
    // The floor both paths share: two uncontended lock/unlock pairs.
    let m = Mutex::new(0u64);
    g.bench_function("floor_two_lock_pairs", |b| {
        b.iter(|| {
            *m.lock().unwrap() += 1;
            *m.lock().unwrap() += 1;
        })
    });
    for live in [0u64, 10_000] {
        let range = Mutex::new(populated(live));
        g.bench_with_input(
            BenchmarkId::new("range_mutex_alloc_free", live),
            &live,
            |b, _| {
                b.iter(|| {
                    let a = range.lock().unwrap().alloc(4 * PAGE, PAGE).unwrap();
                    range.lock().unwrap().free(black_box(a)).unwrap();
                })
            },
        );
        let vb =
            ConcurrentVblock::new(populated(live), Config::KERNEL, Policy::Current, 1).unwrap();
        g.bench_with_input(BenchmarkId::new("percpu_map_unmap", live), &live, |b, _| {
            b.iter(|| {
                let a = vb.map(4).unwrap();
                vb.unmap(black_box(a), 4).unwrap();
            })
        });
        let legacy =
            ConcurrentVblock::new(populated(live), Config::KERNEL, Policy::Legacy, 1).unwrap();
        g.bench_with_input(
            BenchmarkId::new("percpu_map_unmap_legacy", live),
            &live,
            |b, _| {
                b.iter(|| {
                    let a = legacy.map(4).unwrap();
                    legacy.unmap(black_box(a), 4).unwrap();
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, pair);
criterion_main!(benches);
