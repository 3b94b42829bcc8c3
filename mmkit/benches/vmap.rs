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
//!
//! And `locked_threads/<n>`: `n` threads share one `range::Locked`
//! allocator holding 10^4 live areas, each thread churning its own 64 areas
//! of test_vmalloc's random sizes (1..100 pages plus a guard page, lazy
//! frees, the kernel's 64 MiB threshold): free its oldest, allocate a new
//! one. The time is wall time per pair over all threads (the goal: 2
//! threads at most 1.3x of 1); a thread's own latency per pair is n times that.
//! `guarded_parking_lot/<n>` and `guarded_spin/<n>` run the same churn
//! through `lock::Guarded` over parking_lot's and spin's raw mutexes, and
//! `pooled/<n>` through `vmap::pooled::PooledVmap` (inexact: per-CPU
//! pools of freed areas in front of the one lock), each thread its own CPU.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use mmkit::error::{AllocError, FreeError};
use mmkit::lock::Guarded;
use mmkit::range::Locked;
use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
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

/// The calls the churn makes, on any shared wrapper; `cpu` is the calling
/// thread's index (only the pooled front end uses it).
trait Shared: Sync {
    fn alloc(&self, cpu: usize, size: u64, align: u64) -> Result<u64, AllocError>;
    fn free(&self, cpu: usize, addr: u64) -> Result<u64, FreeError>;
    fn free_lazy(&self, cpu: usize, addr: u64) -> Result<u64, FreeError>;
}

impl Shared for Locked<VmapAllocator> {
    fn alloc(&self, _: usize, size: u64, align: u64) -> Result<u64, AllocError> {
        Locked::alloc(self, size, align)
    }
    fn free(&self, _: usize, addr: u64) -> Result<u64, FreeError> {
        Locked::free(self, addr)
    }
    fn free_lazy(&self, _: usize, addr: u64) -> Result<u64, FreeError> {
        Locked::free_lazy(self, addr)
    }
}

impl<M: lock_api::RawMutex + Sync + Send> Shared for Guarded<M, VmapAllocator> {
    fn alloc(&self, _: usize, size: u64, align: u64) -> Result<u64, AllocError> {
        Guarded::alloc(self, size, align)
    }
    fn free(&self, _: usize, addr: u64) -> Result<u64, FreeError> {
        Guarded::free(self, addr)
    }
    fn free_lazy(&self, _: usize, addr: u64) -> Result<u64, FreeError> {
        Guarded::free_lazy(self, addr)
    }
}

impl Shared for PooledVmap {
    fn alloc(&self, cpu: usize, size: u64, align: u64) -> Result<u64, AllocError> {
        PooledVmap::alloc(self, cpu, size, align)
    }
    fn free(&self, cpu: usize, addr: u64) -> Result<u64, FreeError> {
        PooledVmap::free(self, cpu, addr)
    }
    fn free_lazy(&self, cpu: usize, addr: u64) -> Result<u64, FreeError> {
        PooledVmap::free_lazy(self, cpu, addr)
    }
}

/// [`churn_space`]'s live areas behind the pooled front end: the areas are
/// allocated through it (on CPU 0), so its busy maps know them.
fn pooled_churn_space(n: usize) -> PooledVmap {
    let cfg = PooledConfig {
        lazy_max: 32 << 20, // the 64 MiB threshold over 2 CPUs
        ..PooledConfig::default()
    };
    let va = VmapAllocator::new(0xffff_c900_0000_0000, 0xffff_e900_0000_0000).unwrap();
    let p = PooledVmap::new(va, cfg).unwrap();
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..n {
        p.alloc(0, (2 + next(&mut x) % 100) * PAGE, PAGE).unwrap();
    }
    p
}

/// An allocator with `n` live areas of test_vmalloc's sizes.
fn churn_space(n: usize) -> VmapAllocator {
    let mut va = VmapAllocator::new(0xffff_c900_0000_0000, 0xffff_e900_0000_0000).unwrap();
    va.set_lazy_max(64 << 20);
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..n {
        va.alloc((2 + next(&mut x) % 100) * PAGE, PAGE).unwrap();
    }
    va
}

/// Wall time of `n` threads doing `iters` pairs in all on `va` (see the
/// module docs), started together.
fn locked_pairs(va: &impl Shared, n: usize, iters: u64) -> Duration {
    let start = Barrier::new(n);
    let per_thread = iters.div_ceil(n as u64);
    let took = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n as u64)
            .map(|t| {
                let start = &start;
                s.spawn(move || {
                    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (t + 1);
                    let cpu = t as usize;
                    let mut own: std::collections::VecDeque<u64> = (0..64)
                        .map(|_| {
                            va.alloc(cpu, (2 + next(&mut x) % 100) * PAGE, PAGE)
                                .unwrap()
                        })
                        .collect();
                    start.wait();
                    let t0 = Instant::now();
                    for _ in 0..per_thread {
                        va.free_lazy(cpu, own.pop_front().unwrap()).unwrap();
                        let size = (2 + next(&mut x) % 100) * PAGE;
                        own.push_back(va.alloc(cpu, size, PAGE).unwrap());
                    }
                    let took = t0.elapsed();
                    for a in own {
                        va.free(cpu, a).unwrap();
                    }
                    took
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    });
    // Wall time for `iters` pairs in all.
    took.mul_f64(iters as f64 / (per_thread * n as u64) as f64)
}

fn locked_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("locked_threads");
    for n in [1usize, 2] {
        let va = Locked::new(churn_space(10_000));
        g.bench_function(format!("{n}"), |b| {
            b.iter_custom(|iters| locked_pairs(&va, n, iters))
        });
        let va: Guarded<parking_lot::RawMutex, _> = Guarded::new(churn_space(10_000));
        g.bench_function(format!("guarded_parking_lot/{n}"), |b| {
            b.iter_custom(|iters| locked_pairs(&va, n, iters))
        });
        let va: Guarded<spin::Mutex<()>, _> = Guarded::new(churn_space(10_000));
        g.bench_function(format!("guarded_spin/{n}"), |b| {
            b.iter_custom(|iters| locked_pairs(&va, n, iters))
        });
        let va = pooled_churn_space(10_000);
        g.bench_function(format!("pooled/{n}"), |b| {
            b.iter_custom(|iters| locked_pairs(&va, n, iters))
        });
    }
    g.finish();
}

criterion_group!(benches, alloc_free, aligned, locked_threads);
criterion_main!(benches);
