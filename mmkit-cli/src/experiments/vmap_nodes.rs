//! Linux 6.9's vmap nodes (Uladzislau Rezki, "Mitigate a vmap lock
//! contention"), at the allocator level: test_vmalloc's random sizes (1 to
//! 100 pages plus a guard page) churned from 1, 2, 4 and 8 threads, each
//! thread freeing its oldest of 64 areas lazily and allocating a new one,
//! on three allocators:
//! - one shared `range::Locked<VmapAllocator>`: the exact allocator behind
//!   one lock (the kernel before 6.9);
//! - one shared `nodes::VmapNodes`, thread `t` on node `t`: per-node locks
//!   and exact-size pools in front of the free tree (6.9);
//! - the control: one `range::Locked<VmapAllocator>` per thread, sharing
//!   nothing (the same code as the first, never contended): what the
//!   machine gives n threads that do not share an allocator.
//!
//! The figure is each thread's own time per pair (as test_vmalloc's
//! per-job figures), averaged over the threads, best of the runs. Above
//! the machine's CPU count the threads take turns on the cores: those
//! rows are reported, not judged.

use std::collections::VecDeque;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use mmkit::nodes::{NodesConfig, StdVmapNodes};
use mmkit::range::Locked;
use mmkit::vmap::VmapAllocator;
use serde::Serialize;

use super::{Experiment, Options};
use crate::plot::{self, Axis, Chart, Series};
use crate::render::{col, Col, Fmt, Report, Table, Target};
use crate::run::{cpus, ms, progress, PAGE, VMALLOC_END, VMALLOC_START};

/// Registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "vmap_nodes",
    about: "Linux 6.9 vmap nodes: test_vmalloc's sizes churned from 1-8 threads, one lock vs per-CPU nodes vs share-nothing",
    run,
};

/// Thread counts measured.
const THREADS: [usize; 4] = [1, 2, 4, 8];
/// Live areas in the shared allocator before the churn (split over the
/// control's allocators).
const LIVE: usize = 10_000;
/// Areas each thread churns.
const OWN: usize = 64;
/// Lazily freed bytes one lazy list holds before a purge (the kernel's
/// one-CPU threshold), for every allocator alike.
const LAZY_MAX: u64 = 32 << 20;

/// The published test_vmalloc figures of the 6.9 series (µs per
/// vmalloc/vfree pair per job, before and after), for the table.
const KERNEL: [(usize, f64, f64); 2] = [(1, 0.576, 0.556), (8, 10.46, 2.16)];

/// The calls the churn makes, from thread `t`.
trait Churn: Sync {
    fn alloc(&self, t: usize, size: u64) -> u64;
    fn free_lazy(&self, t: usize, addr: u64);
}

impl Churn for Locked<VmapAllocator> {
    fn alloc(&self, _: usize, size: u64) -> u64 {
        Locked::alloc(self, size, PAGE).expect("vmalloc space")
    }
    fn free_lazy(&self, _: usize, addr: u64) {
        Locked::free_lazy(self, addr).expect("a live area");
    }
}

impl Churn for StdVmapNodes {
    fn alloc(&self, t: usize, size: u64) -> u64 {
        StdVmapNodes::alloc(self, t, size, PAGE).expect("vmalloc space")
    }
    fn free_lazy(&self, t: usize, addr: u64) {
        StdVmapNodes::free_lazy(self, t, addr).expect("a live area");
    }
}

/// One allocator per thread: thread `t` uses the `t`-th.
struct Alone(Vec<Locked<VmapAllocator>>);

impl Churn for Alone {
    fn alloc(&self, t: usize, size: u64) -> u64 {
        Churn::alloc(&self.0[t], t, size)
    }
    fn free_lazy(&self, t: usize, addr: u64) {
        Churn::free_lazy(&self.0[t], t, addr);
    }
}

/// xorshift64: the same requests every run.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// test_vmalloc's random size: 1 to 100 pages, plus the guard page.
fn size(x: &mut u64) -> u64 {
    (2 + next(x) % 100) * PAGE
}

fn exact() -> VmapAllocator {
    let mut va = VmapAllocator::new(VMALLOC_START, VMALLOC_END).expect("the vmalloc window");
    va.set_lazy_max(LAZY_MAX);
    va
}

/// `n` live areas allocated through `c` from thread `t`.
fn fill(c: &impl Churn, t: usize, n: usize) {
    let mut x = 0x2545_f491_4f6c_dd1d_u64 ^ t as u64;
    for _ in 0..n {
        c.alloc(t, size(&mut x));
    }
}

fn shared_locked(_: usize) -> Locked<VmapAllocator> {
    let l = Locked::new(exact());
    fill(&l, 0, LIVE);
    l
}

fn shared_nodes(_: usize) -> StdVmapNodes {
    let cfg = NodesConfig {
        nodes: *THREADS.last().expect("thread counts"),
        granule: PAGE,
        lazy_max: LAZY_MAX,
        ..NodesConfig::default()
    };
    let v = StdVmapNodes::new(VMALLOC_START, VMALLOC_END, cfg).expect("a valid config");
    fill(&v, 0, LIVE);
    v
}

fn alone(threads: usize) -> Alone {
    let a = Alone((0..threads).map(|_| Locked::new(exact())).collect());
    for t in 0..threads {
        fill(&a, t, LIVE / threads);
    }
    a
}

/// Each thread's ns per pair, averaged over `threads` threads doing
/// `pairs` pairs each on `c`, started together.
fn churn(c: &impl Churn, threads: usize, pairs: usize) -> f64 {
    let start = Barrier::new(threads);
    let took: Vec<Duration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let start = &start;
                s.spawn(move || {
                    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (t as u64 + 1);
                    let mut own: VecDeque<u64> =
                        (0..OWN).map(|_| c.alloc(t, size(&mut x))).collect();
                    start.wait();
                    let t0 = Instant::now();
                    for _ in 0..pairs {
                        c.free_lazy(t, own.pop_front().expect("64 areas"));
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
        handles
            .into_iter()
            .map(|h| h.join().expect("a churn thread panicked"))
            .collect()
    });
    let total: f64 = took.iter().map(|d| d.as_nanos() as f64).sum();
    total / (threads * pairs) as f64
}

/// The best of `reps` runs of each allocator, each on a fresh one; the
/// allocators take turns run by run, so a noisy moment of the machine
/// falls on all three alike.
/// Also the share of the nodes' allocations, churn and fill alike, that a
/// pool served, in the last run.
fn best_of(threads: usize, pairs: usize, reps: usize) -> ((f64, f64, f64), f64) {
    let mut b = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    let mut hits = 0.0;
    for _ in 0..reps {
        b.0 = b.0.min(churn(&shared_locked(threads), threads, pairs));
        let v = shared_nodes(threads);
        b.1 = b.1.min(churn(&v, threads, pairs));
        let s = v.stats();
        hits = s.hits as f64 / (s.hits + s.misses).max(1) as f64;
        b.2 = b.2.min(churn(&alone(threads), threads, pairs));
    }
    (b, hits)
}

/// One thread count.
#[derive(Debug, Clone, Serialize)]
struct Row {
    threads: usize,
    oversubscribed: bool,
    locked_ns: f64,
    nodes_ns: f64,
    alone_ns: f64,
    locked_vs_1: f64,
    nodes_vs_1: f64,
    alone_vs_1: f64,
    nodes_vs_alone: f64,
    kernel_before_us: Option<f64>,
    kernel_after_us: Option<f64>,
}

const COLS: [Col; 9] = [
    col("threads", "threads", Fmt::Text),
    col("locked_ns", "one lock ns", Fmt::Dec(0)),
    col("nodes_ns", "nodes ns", Fmt::Dec(0)),
    col("alone_ns", "share-nothing ns", Fmt::Dec(0)),
    col("locked_vs_1", "one lock / 1 thr", Fmt::Ratio),
    col("nodes_vs_1", "nodes / 1 thr", Fmt::Ratio),
    col("nodes_vs_alone", "nodes / share-nothing", Fmt::Ratio),
    col("kernel_before_us", "kernel 6.8 µs", Fmt::Text),
    col("kernel_after_us", "kernel 6.9 µs", Fmt::Text),
];

fn rows(points: &[(usize, f64, f64, f64)], ncpu: usize) -> Vec<Row> {
    let one = points.first().copied().unwrap_or((1, 1.0, 1.0, 1.0));
    points
        .iter()
        .map(|&(threads, locked_ns, nodes_ns, alone_ns)| {
            let kernel = KERNEL.iter().find(|k| k.0 == threads);
            Row {
                threads,
                oversubscribed: threads > ncpu,
                locked_ns,
                nodes_ns,
                alone_ns,
                locked_vs_1: locked_ns / one.1,
                nodes_vs_1: nodes_ns / one.2,
                alone_vs_1: alone_ns / one.3,
                nodes_vs_alone: nodes_ns / alone_ns,
                kernel_before_us: kernel.map(|k| k.1),
                kernel_after_us: kernel.map(|k| k.2),
            }
        })
        .collect()
}

/// The targets, on the 2-thread row (judged only where 2 threads have 2
/// CPUs).
fn targets(rows: &[Row]) -> Vec<Target> {
    let Some(two) = rows.iter().find(|r| r.threads == 2) else {
        return Vec::new();
    };
    let (a, b) = (
        "vmap nodes at 2 threads <= 1.10x their ns per pair at 1 thread",
        "vmap nodes at 2 threads <= 1.20x the share-nothing control",
    );
    if two.oversubscribed {
        let why = "fewer than 2 CPUs here";
        return vec![Target::skipped(a, why), Target::skipped(b, why)];
    }
    vec![
        Target::new(a, format!("{:.2}x", two.nodes_vs_1), two.nodes_vs_1 <= 1.10),
        Target::new(
            b,
            format!("{:.2}x", two.nodes_vs_alone),
            two.nodes_vs_alone <= 1.20,
        ),
    ]
}

fn run(opts: &Options) -> Report {
    let pairs = opts
        .loops
        .map_or(opts.pick(20_000, 50_000, 200_000), |l| l as usize);
    let reps = opts.pick(1, 1, 5);
    let ncpu = cpus();
    let pb = progress(THREADS.len() as u64, "vmap_nodes");
    let t_all = Instant::now();
    let mut hits = Vec::new();
    let points: Vec<(usize, f64, f64, f64)> = THREADS
        .iter()
        .map(|&n| {
            let ((l, v, a), h) = best_of(n, pairs, reps);
            hits.push(format!("{:.0}%", 100.0 * h));
            pb.inc(1);
            (n, l, v, a)
        })
        .collect();
    pb.finish_and_clear();
    let rows = rows(&points, ncpu);
    let mut report = Report::new("vmap_nodes");
    report.tables.push(Table::of(
        format!("ns per lazy free + alloc pair, per thread ({ncpu} CPUs here)"),
        &COLS,
        &rows,
    ));
    report.targets = targets(&rows);
    report.notes.push(format!(
        "allocations a node's pool served (the rest took the free tree's lock), at {} threads: {}",
        THREADS.map(|t| t.to_string()).join(", "),
        hits.join(", ")
    ));
    let pts = |f: fn(&Row) -> f64| rows.iter().map(|r| (r.threads as f64, f(r))).collect();
    let chart = Chart {
        title: "vmap_nodes: test_vmalloc's sizes, lazy free + alloc per thread".into(),
        x: Axis::linear("threads"),
        y: Axis::log("ns per pair, per thread (log scale)"),
    };
    let svg = plot::lines(
        &chart,
        &[
            Series::new("one lock (range::Locked)", pts(|r| r.locked_ns)),
            Series::new("vmap nodes", pts(|r| r.nodes_ns)),
            Series::new("share-nothing control", pts(|r| r.alone_ns)),
        ],
    );
    report.plot(
        "vmap_nodes.svg",
        format!("Each thread's nanoseconds per lazy free + allocation as threads are added ({ncpu} CPUs here), log scale: a flat line scales; the control shares nothing."),
        svg,
    );
    report.notes.push(format!(
        "{pairs} pairs per thread, best of {reps} runs, the three allocators in turn ({:.0} ms in all); {LIVE} live areas before the churn \
         (split over the control's allocators), {OWN} areas churned per thread, sizes 1-100 pages + a guard \
         page, page alignment, lazy frees with a {} MiB threshold per lazy list; {} nodes, thread t on node t; \
         rows above {ncpu} threads share the cores and are not judged; the kernel's columns are the 6.9 \
         series' published test_vmalloc figures (µs per pair per job), not measured here",
        ms(t_all.elapsed()),
        LAZY_MAX >> 20,
        THREADS.last().expect("thread counts"),
    ));
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_allocator_churns_and_the_targets_come_from_the_rows() {
        for n in [1, 2] {
            assert!(churn(&shared_locked(n), n, 200) > 0.0);
            assert!(churn(&shared_nodes(n), n, 200) > 0.0);
            assert!(churn(&alone(n), n, 200) > 0.0);
        }
        let r = rows(&[(1, 100.0, 100.0, 100.0), (2, 300.0, 105.0, 100.0)], 2);
        let t = targets(&r);
        assert_eq!(
            t.iter().map(|t| t.met).collect::<Vec<_>>(),
            [Some(true), Some(true)]
        );
        let r = rows(&[(1, 100.0, 100.0, 100.0), (2, 300.0, 130.0, 100.0)], 2);
        let t = targets(&r);
        assert_eq!(
            t.iter().map(|t| t.met).collect::<Vec<_>>(),
            [Some(false), Some(false)]
        );
        assert!(targets(&rows(&[(1, 1.0, 1.0, 1.0), (2, 1.0, 1.0, 1.0)], 1))
            .iter()
            .all(|t| t.met.is_none()));
    }
}
