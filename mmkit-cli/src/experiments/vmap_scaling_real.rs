//! `mmkit experiments vmap_scaling_real`: seed 002 (see [`super::vmap_scaling`])
//! on real memory. Each thread allocates 4 frames once, then loops
//! {`vm_map_ram` of them, write one byte into each page, `vm_unmap_ram`}.
//! Old design (`lazy_unmap: false`): a whole area under the global lock and
//! one unmapping system call per `vm_unmap_ram`. New: per-CPU blocks (CPU
//! from `sched_getcpu`), a block unmapped once when fully dirty, in batches.

use mmkit_vm::Vm;
use serde::Serialize;

use super::real::{touch, unmap_calls, vm};
use super::vmap_scaling::{plot_threads, scaling_loop, SharedMapper};
use super::{Experiment, Options};
use crate::render::{col, Col, Fmt, Report, Table, Target};
use crate::run::{cpus, ms, progress, ratio};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "vmap_scaling_real",
    about: "seed 002 on real memory: vm_map_ram+touch+vm_unmap_ram of 4 frames per thread, eager unmap vs per-CPU blocks",
    run,
};

/// Pages per mapping, as in seed 002.
const PAGES: u64 = 4;
/// Thread counts, as in seed 002's table.
const THREADS: [usize; 4] = [1, 2, 4, 8];

/// A `Vm` and each thread's 4 frames (one order-2 block: one `mmap` per map).
struct RealMapper {
    vm: Vm,
    frames: Vec<Vec<u64>>,
}

impl RealMapper {
    fn new(lazy: bool, threads: usize) -> Self {
        let vm = vm(lazy, 64 << 20, mmkit::range::DEFAULT_LAZY_MAX);
        let frames = (0..threads)
            .map(|_| {
                let pfn = vm.alloc_pages(2).expect("4 frames");
                (pfn..pfn + PAGES).collect()
            })
            .collect();
        RealMapper { vm, frames }
    }
}

impl SharedMapper for RealMapper {
    fn map(&self, thread: usize, pages: u64) -> u64 {
        self.vm
            .vm_map_ram(&self.frames[thread][..pages as usize])
            .expect("vm_map_ram")
    }
    fn unmap(&self, addr: u64, pages: u64) {
        self.vm.vm_unmap_ram(addr, pages).expect("a live mapping");
    }
    fn touch(&self, addr: u64, pages: u64, _local: &mut [u8]) {
        let page = self.vm.page_size();
        // SAFETY: `map` just mapped `pages` pages read-write at `addr` for
        // this thread alone; no reference points into them.
        unsafe { touch(addr, pages * page, page) };
    }
}

/// Best ns per op per thread of `reps` runs; unmapping calls per 10^6 ops
/// (with the calls of the final `vm_unmap_aliases`).
fn measure(lazy: bool, threads: usize, iters: u64, reps: usize) -> (f64, f64) {
    let (mut best, mut calls) = (f64::INFINITY, 0);
    for _ in 0..reps {
        let m = RealMapper::new(lazy, threads);
        let d = scaling_loop(&m, threads, iters, PAGES);
        best = best.min(d.as_nanos() as f64 / iters as f64);
        m.vm.vm_unmap_aliases();
        calls += unmap_calls(&m.vm);
    }
    let ops = (reps * threads) as u64 * iters;
    (best, calls as f64 * 1e6 / ops as f64)
}

/// One thread count, both designs.
#[derive(Serialize)]
struct Row {
    threads: usize,
    oversubscribed: bool,
    old_ns: f64,
    new_ns: f64,
    ratio: Option<f64>,
    old_unmaps_per_1e6: f64,
    new_unmaps_per_1e6: f64,
    unmaps_ratio: Option<f64>,
}

const COLS: [Col; 8] = [
    col("threads", "threads", Fmt::Text),
    col("oversubscribed", "over CPUs", Fmt::Text),
    col("old_ns", "old ns", Fmt::Dec(0)),
    col("new_ns", "new ns", Fmt::Dec(0)),
    col("ratio", "old/new", Fmt::Ratio),
    col("old_unmaps_per_1e6", "old unmaps /1e6 ops", Fmt::Dec(0)),
    col("new_unmaps_per_1e6", "new unmaps /1e6 ops", Fmt::Dec(0)),
    col("unmaps_ratio", "old/new unmaps", Fmt::Ratio),
];

fn targets(rows: &[Row]) -> Vec<Target> {
    let worst = rows.iter().filter_map(|r| r.unmaps_ratio).fold(f64::INFINITY, f64::min);
    let flat = rows[1].new_ns / rows[0].new_ns;
    vec![
        Target::new("unmapping calls with per-CPU blocks >= 100x fewer than eager unmap (worst row)", format!("{worst:.0}x"), worst >= 100.0),
        Target::new("new design at 2 threads <= 1.5x the ns of 1 thread", format!("{flat:.2}x"), flat <= 1.5),
    ]
}

fn run(opts: &Options) -> Report {
    let iters = opts.loops.unwrap_or(opts.pick(2000, 5000, 10_000));
    let reps = opts.pick(1, 1, 3);
    let n = cpus();
    let pb = progress(2 * THREADS.len() as u64, "vmap_scaling_real");
    let t0 = std::time::Instant::now();
    let rows: Vec<Row> = THREADS
        .iter()
        .map(|&threads| {
            let (o, oc) = measure(false, threads, iters, reps);
            pb.inc(1);
            let (w, wc) = measure(true, threads, iters, reps);
            pb.inc(1);
            Row {
                threads,
                oversubscribed: threads > n,
                old_ns: o,
                new_ns: w,
                ratio: ratio(o, w),
                old_unmaps_per_1e6: oc,
                new_unmaps_per_1e6: wc,
                unmaps_ratio: ratio(oc, wc.max(f64::MIN_POSITIVE)),
            }
        })
        .collect();
    pb.finish_and_clear();
    let mut report = Report::new("vmap_scaling_real");
    let title = format!("ns per vm_map_ram + touch 4 pages + vm_unmap_ram, per thread ({n} CPUs here)");
    report.tables.push(Table::of(title, &COLS, &rows));
    report.targets = targets(&rows);
    let pts = |f: fn(&Row) -> f64| rows.iter().map(|r| (r.threads as f64, f(r))).collect();
    let svg = plot_threads(
        "vmap_scaling_real: vm_map_ram + touch + vm_unmap_ram of 4 pages (real memory)",
        [("old: eager unmap, one lock".into(), pts(|r| r.old_ns)), ("new: per-CPU blocks, batched unmap".into(), pts(|r| r.new_ns))],
    );
    report.plot("vmap_scaling_real.svg", format!("Nanoseconds per operation and thread on real mappings as threads are added ({n} CPUs here; more threads are oversubscribed), log scale: an unmapping system call per operation against per-CPU blocks unmapped in batches; the seed's kernel figures are dashed."), svg);
    report.notes.push(format!(
        "{iters} iterations per thread, best of {reps} runs ({:.0} ms in all); unmapping calls summed over \
         the runs, with the final vm_unmap_aliases; threads above {n} are oversubscribed on this machine; \
         each map is one mmap (MAP_POPULATE) of an order-2 block of the memfd in both designs",
        ms(t0.elapsed())
    ));
    report
}
