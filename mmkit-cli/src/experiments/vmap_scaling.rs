//! Seed 002 (Nick Piggin, 2008), at the allocator level: threads looping
//! {map 4 pages, touch, unmap}. Old design: every call through the one-lock
//! range allocator, with an eager flush per unmap. New design: per-CPU
//! blocks, flushed lazily.
//!
//! The loop is generic over [`SharedMapper`], so `vmap_scaling_real` runs
//! it unchanged on the real mappings of `mmkit-vm`.

use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use mmkit::vblock::{ConcurrentVblock, Config, Policy};
use mmkit::vmap::VmapAllocator;

use serde::Serialize;

use super::{Experiment, Options};
use crate::plot::{self, Axis, Chart, Series};
use crate::render::{col, Col, Fmt, Report, Table, Target};
use crate::run::{cpus, ms, progress, ratio, PAGE, VMALLOC_END, VMALLOC_START};

/// Registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "vmap_scaling",
    about: "seed 002: map+touch+unmap 4 pages per thread, one lock + eager flush vs per-CPU blocks + lazy flush",
    run,
};

/// What the scaling loop needs: map and unmap from many threads, and a
/// way to touch the mapping.
pub trait SharedMapper: Sync {
    /// Maps `pages` pages for thread number `thread` (a real mapper maps
    /// that thread's frames); returns the start address. Panics on failure
    /// (the loop has no way to go on without a mapping).
    fn map(&self, thread: usize, pages: u64) -> u64;
    /// Unmaps what `map(pages)` returned.
    fn unmap(&self, addr: u64, pages: u64);
    /// Writes "into the mapping" of `pages` pages at `addr`. Address-only
    /// mappers write one byte into `local`, the calling thread's stand-in.
    fn touch(&self, addr: u64, _pages: u64, local: &mut [u8]) {
        let i = (addr / PAGE) as usize % local.len();
        local[i] = local[i].wrapping_add(1);
    }
}

/// The stand-in for a broadcast TLB flush: a global lock and a counter.
#[derive(Default)]
pub struct Flusher {
    count: Mutex<u64>,
}

impl Flusher {
    /// One flush.
    pub fn flush(&self) {
        *self.count.lock().expect("flusher lock") += 1;
    }
    /// Flushes so far.
    pub fn count(&self) -> u64 {
        *self.count.lock().expect("flusher lock")
    }
}

/// The 2008 "vanilla" design: one lock around the range allocator, and a
/// flush per unmap taken under that lock (as `__remove_vm_area` did).
pub struct OneLock {
    range: Mutex<VmapAllocator>,
    flusher: Arc<Flusher>,
    page: u64,
}

impl SharedMapper for OneLock {
    fn map(&self, _thread: usize, pages: u64) -> u64 {
        let mut r = self.range.lock().expect("range lock");
        r.alloc(pages * self.page, self.page)
            .expect("vmalloc space")
    }
    fn unmap(&self, addr: u64, _pages: u64) {
        let mut r = self.range.lock().expect("range lock");
        r.free(addr).expect("live area");
        self.flusher.flush();
    }
}

/// The rewritten design: per-CPU blocks; released blocks are freed lazily
/// and the range allocator flushes once per purge.
pub struct PerCpu {
    vb: ConcurrentVblock<VmapAllocator>,
}

impl SharedMapper for PerCpu {
    fn map(&self, _thread: usize, pages: u64) -> u64 {
        self.vb.map(pages).expect("vmalloc space")
    }
    fn unmap(&self, addr: u64, pages: u64) {
        self.vb.unmap(addr, pages).expect("live mapping");
    }
}

fn range(flusher: &Arc<Flusher>) -> VmapAllocator {
    let mut r = VmapAllocator::new(VMALLOC_START, VMALLOC_END).expect("valid window");
    let f = Arc::clone(flusher);
    r.set_flush_hook(Some(Box::new(move |_, _| f.flush())));
    r
}

/// Runs `threads` threads, each looping `iters` times {map `pages`, touch,
/// unmap}; returns the wall time from the first thread's start to the last
/// one's finish (each thread reads the clock itself: the spawning thread
/// may not be scheduled while they run).
pub fn scaling_loop<M: SharedMapper>(m: &M, threads: usize, iters: u64, pages: u64) -> Duration {
    let start = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let start = &start;
                s.spawn(move || {
                    let mut local = vec![0u8; 4 * PAGE as usize];
                    start.wait();
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        let a = m.map(thread, pages);
                        m.touch(a, pages, &mut local);
                        m.unmap(a, pages);
                    }
                    std::hint::black_box(&local);
                    (t0, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect()
    });
    let first = spans.iter().map(|s| s.0).min().expect("a thread");
    let last = spans.iter().map(|s| s.1).max().expect("a thread");
    last - first
}

/// One measurement: the best (lowest) ns per op of `reps` runs, and the
/// flushes and unmaps of all runs. The best run is the one least disturbed
/// by other processes on a shared machine.
struct Point {
    ns: f64,
    flushes: u64,
    unmaps: u64,
}

fn measure<M: SharedMapper>(
    make: impl Fn() -> (M, Arc<Flusher>),
    threads: usize,
    iters: u64,
    reps: usize,
) -> Point {
    let mut ns = Vec::new();
    let (mut flushes, mut unmaps) = (0, 0);
    for _ in 0..reps {
        let (m, flusher) = make();
        let d = scaling_loop(&m, threads, iters, 4);
        ns.push(d.as_nanos() as f64 / iters as f64);
        flushes += flusher.count();
        unmaps += threads as u64 * iters;
    }
    Point {
        ns: ns.iter().copied().fold(f64::INFINITY, f64::min),
        flushes,
        unmaps,
    }
}

/// Seed 002's table: threads, vanilla ns, rewritten ns.
const SEED: [(usize, u64, u64); 4] = [
    (1, 14700, 2900),
    (2, 33600, 3000),
    (4, 49500, 2800),
    (8, 70631, 2900),
];

fn thread_counts() -> Vec<usize> {
    let mut v = vec![1];
    while *v.last().expect("nonempty") < (2 * cpus()).max(8) {
        v.push(v.last().expect("nonempty") * 2);
    }
    v
}

/// One thread count: old and new design, and the seed's figures.
#[derive(Serialize)]
struct Row {
    threads: usize,
    old_ns: f64,
    new_ns: f64,
    ratio: Option<f64>,
    old_flushes: u64,
    new_flushes: u64,
    old_unmaps: u64,
    new_unmaps: u64,
    old_flushes_per_1e6: f64,
    new_flushes_per_1e6: f64,
    seed_vanilla_ns: Option<u64>,
    seed_rewrite_ns: Option<u64>,
}

const COLS: [Col; 8] = [
    col("threads", "threads", Fmt::Text),
    col("old_ns", "old ns", Fmt::Dec(0)),
    col("new_ns", "new ns", Fmt::Dec(0)),
    col("ratio", "old/new", Fmt::Ratio),
    col(
        "old_flushes_per_1e6",
        "old flushes /1e6 unmaps",
        Fmt::Dec(0),
    ),
    col(
        "new_flushes_per_1e6",
        "new flushes /1e6 unmaps",
        Fmt::Dec(1),
    ),
    col("seed_vanilla_ns", "seed vanilla ns", Fmt::Text),
    col("seed_rewrite_ns", "seed rewrite ns", Fmt::Text),
];

fn row(threads: usize, o: &Point, w: &Point) -> Row {
    let per_m = |p: &Point| p.flushes as f64 * 1e6 / p.unmaps.max(1) as f64;
    let seed = SEED.iter().find(|s| s.0 == threads);
    Row {
        threads,
        old_ns: o.ns,
        new_ns: w.ns,
        ratio: ratio(o.ns, w.ns),
        old_flushes: o.flushes,
        new_flushes: w.flushes,
        old_unmaps: o.unmaps,
        new_unmaps: w.unmaps,
        old_flushes_per_1e6: per_m(o),
        new_flushes_per_1e6: per_m(w),
        seed_vanilla_ns: seed.map(|s| s.1),
        seed_rewrite_ns: seed.map(|s| s.2),
    }
}

fn one_lock() -> (OneLock, Arc<Flusher>) {
    let f = Arc::new(Flusher::default());
    let m = OneLock {
        range: Mutex::new(range(&f)),
        flusher: Arc::clone(&f),
        page: PAGE,
    };
    (m, f)
}

fn per_cpu(ncpu: usize) -> (PerCpu, Arc<Flusher>) {
    let f = Arc::new(Flusher::default());
    let vb = ConcurrentVblock::new(range(&f), Config::KERNEL, Policy::Current, ncpu)
        .expect("valid config");
    (PerCpu { vb }, f)
}

/// The targets: the new design flat from 1 to 2 threads, and far fewer
/// flushes.
fn targets(rows: &[Row]) -> Vec<Target> {
    let worst = rows
        .iter()
        .map(|r| r.old_flushes_per_1e6 / r.new_flushes_per_1e6.max(f64::MIN_POSITIVE))
        .fold(f64::INFINITY, f64::min);
    let mut t = vec![Target::new(
        "old/new flushes per 10^6 unmaps >= 100x (worst row)",
        format!("{worst:.0}x"),
        worst >= 100.0,
    )];
    if let [one, two, ..] = rows {
        let flat = two.new_ns / one.new_ns;
        t.push(Target::new(
            "new design at 2 threads <= 1.10x its ns at 1 thread",
            format!("{flat:.2}x"),
            flat <= 1.10,
        ));
    }
    t
}

/// ns per operation against threads: both designs here, the seed's dashed.
pub fn plot_threads(
    title: &str,
    points: [(String, Vec<(f64, f64)>); 2],
) -> Result<String, Box<dyn std::error::Error>> {
    let chart = Chart {
        title: title.into(),
        x: Axis::linear("threads"),
        y: Axis::log("ns per map + touch + unmap, per thread (log scale)"),
    };
    let seed =
        |f: fn(&(usize, u64, u64)) -> u64| SEED.iter().map(|s| (s.0 as f64, f(s) as f64)).collect();
    let [old, new] = points;
    plot::lines(
        &chart,
        &[
            Series::new(old.0, old.1),
            Series::new(new.0, new.1),
            Series::reference("seed 002: vanilla (8-core Opteron, kernel)", seed(|s| s.1)),
            Series::reference("seed 002: rewrite (8-core Opteron, kernel)", seed(|s| s.2)),
        ],
    )
}

fn run(opts: &Options) -> Report {
    let iters = opts.loops.unwrap_or(opts.pick(20_000, 50_000, 200_000));
    let reps = opts.pick(1, 1, 5);
    let ncpu = cpus();
    let counts = thread_counts();
    let pb = progress(counts.len() as u64 * 2, "vmap_scaling");
    let t_all = Instant::now();
    let rows: Vec<Row> = counts
        .iter()
        .map(|&n| {
            let o = measure(one_lock, n, iters, reps);
            pb.inc(1);
            let w = measure(|| per_cpu(ncpu), n, iters, reps);
            pb.inc(1);
            row(n, &o, &w)
        })
        .collect();
    pb.finish_and_clear();
    let mut report = Report::new("vmap_scaling");
    let title =
        format!("ns per map+touch+unmap of 4 pages, per thread ({ncpu} CPUs here; seed: 8 cores)");
    report.tables.push(Table::of(title, &COLS, &rows));
    report.targets = targets(&rows);
    let pts = |f: fn(&Row) -> f64| rows.iter().map(|r| (r.threads as f64, f(r))).collect();
    let svg = plot_threads(
        "vmap_scaling: map + touch + unmap of 4 pages (allocator level)",
        [
            ("old: one lock + eager flush".into(), pts(|r| r.old_ns)),
            ("new: per-CPU blocks + lazy flush".into(), pts(|r| r.new_ns)),
        ],
    );
    report.plot("vmap_scaling.svg", format!("Nanoseconds per operation and thread as threads are added ({ncpu} CPUs here), log scale: a flat line scales, a rising one serialises; the seed's kernel figures on an 8-core machine are dashed."), svg);
    report.notes.push(format!(
        "{iters} iterations per thread, best of {reps} runs ({:.0} ms in all; flush counts summed over the runs); {ncpu} CPU queues, thread slots \
         round robin, so above {ncpu} threads several share a queue (and its lock); flush = global lock + counter \
         (stand-in for the broadcast TLB flush); lazy_max 32 MiB",
        ms(t_all.elapsed())
    ));
    report
}
