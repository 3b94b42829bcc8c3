//! `nodes_threads/<allocator>/<n>`: `n` threads churn test_vmalloc's random
//! sizes (1..100 pages plus a guard page, lazy frees, 32 MiB per lazy
//! list), each its own 64 areas (free its oldest, allocate a new one), on
//! one shared `range::Locked` allocator holding 10^4 live areas (`locked`),
//! on one `nodes::VmapNodes` (thread t on node t: `nodes`), and on one
//! `range::Locked` per thread sharing nothing (`alone`, the control). The
//! time is each thread's own time per pair, averaged over the threads (as
//! test_vmalloc's per-job figures): a flat line over `n` scales. The same
//! churn, with 4 and 8 threads too, is `mmkit experiments vmap_nodes`.

use std::collections::VecDeque;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use mmkit::nodes::{NodesConfig, StdVmapNodes};
use mmkit::range::Locked;
use mmkit::vmap::VmapAllocator;

const PAGE: u64 = 4096;
const START: u64 = 0xffff_c900_0000_0000;
const END: u64 = 0xffff_e900_0000_0000;
const LAZY_MAX: u64 = 32 << 20;

trait Churn: Sync {
    fn alloc(&self, t: usize, size: u64) -> u64;
    fn free_lazy(&self, t: usize, addr: u64);
}

impl Churn for Locked<VmapAllocator> {
    fn alloc(&self, _: usize, size: u64) -> u64 {
        Locked::alloc(self, size, PAGE).unwrap()
    }
    fn free_lazy(&self, _: usize, addr: u64) {
        Locked::free_lazy(self, addr).unwrap();
    }
}

impl Churn for StdVmapNodes {
    fn alloc(&self, t: usize, size: u64) -> u64 {
        StdVmapNodes::alloc(self, t, size, PAGE).unwrap()
    }
    fn free_lazy(&self, t: usize, addr: u64) {
        StdVmapNodes::free_lazy(self, t, addr).unwrap();
    }
}

struct Alone(Vec<Locked<VmapAllocator>>);

impl Churn for Alone {
    fn alloc(&self, t: usize, size: u64) -> u64 {
        Churn::alloc(&self.0[t], t, size)
    }
    fn free_lazy(&self, t: usize, addr: u64) {
        Churn::free_lazy(&self.0[t], t, addr);
    }
}

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn size(x: &mut u64) -> u64 {
    (2 + next(x) % 100) * PAGE
}

fn exact() -> VmapAllocator {
    let mut va = VmapAllocator::new(START, END).unwrap();
    va.set_lazy_max(LAZY_MAX);
    va
}

fn fill(c: &impl Churn, t: usize, n: usize) {
    let mut x = 0x2545_f491_4f6c_dd1d_u64 ^ t as u64;
    for _ in 0..n {
        c.alloc(t, size(&mut x));
    }
}

/// Each thread's time for `iters` pairs, averaged over `n` threads.
fn pairs(c: &impl Churn, n: usize, iters: u64) -> Duration {
    let start = Barrier::new(n);
    let took: Vec<Duration> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|t| {
                let start = &start;
                s.spawn(move || {
                    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (t as u64 + 1);
                    let mut own: VecDeque<u64> =
                        (0..64).map(|_| c.alloc(t, size(&mut x))).collect();
                    start.wait();
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        c.free_lazy(t, own.pop_front().unwrap());
                        own.push_back(c.alloc(t, size(&mut x)));
                    }
                    let took = t0.elapsed();
                    for a in own {
                        c.free_lazy(t, a);
                    }
                    took
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    took.iter().sum::<Duration>() / n as u32
}

fn nodes_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("nodes_threads");
    for n in [1usize, 2] {
        let l = Locked::new(exact());
        fill(&l, 0, 10_000);
        g.bench_function(format!("locked/{n}"), |b| {
            b.iter_custom(|i| pairs(&l, n, i))
        });
        let cfg = NodesConfig {
            nodes: 8,
            lazy_max: LAZY_MAX,
            ..NodesConfig::default()
        };
        let v = StdVmapNodes::new(START, END, cfg).unwrap();
        fill(&v, 0, 10_000);
        g.bench_function(format!("nodes/{n}"), |b| b.iter_custom(|i| pairs(&v, n, i)));
        let a = Alone((0..n).map(|_| Locked::new(exact())).collect());
        for t in 0..n {
            fill(&a, t, 10_000 / n);
        }
        g.bench_function(format!("alone/{n}"), |b| b.iter_custom(|i| pairs(&a, n, i)));
    }
    g.finish();
}

criterion_group!(benches, nodes_threads);
criterion_main!(benches);
