//! Seed 002 (Nick Piggin, 2008), at the allocator level: threads looping
//! {map 4 pages, touch, unmap}. Old design: every call through the one-lock
//! range allocator, with an eager flush per unmap. New design: per-CPU
//! blocks, flushed lazily.
//!
//! The loop is generic over [`SharedMapper`], so the real-memory vmap can
//! run it unchanged.

use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use mmkit::vblock::{ConcurrentVblock, Config, Policy};
use mmkit::vmap::VmapAllocator;

use super::vm_map_ram::{VMALLOC_END, VMALLOC_START};
use super::{cpus, ms, progress, Experiment, Options};
use crate::report::{ratio, Report, Table};

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
        let i = (addr / 4096) as usize % local.len();
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
                    let mut local = vec![0u8; 4 * 4096];
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

fn run(opts: &Options) -> Report {
    let iters = opts
        .loops
        .unwrap_or(if opts.quick { 20_000 } else { 200_000 });
    let reps = if opts.quick { 1 } else { 5 };
    let ncpu = cpus();
    let counts = thread_counts();
    let old = || {
        let f = Arc::new(Flusher::default());
        let m = OneLock {
            range: Mutex::new(range(&f)),
            flusher: Arc::clone(&f),
            page: 4096,
        };
        (m, f)
    };
    let new = || {
        let f = Arc::new(Flusher::default());
        let vb = ConcurrentVblock::new(range(&f), Config::KERNEL, Policy::Current, ncpu)
            .expect("valid config");
        (PerCpu { vb }, f)
    };
    let mut t = Table::new(
        format!("ns per map+touch+unmap of 4 pages, per thread ({ncpu} CPUs here; seed: 8 cores)"),
        &[
            "threads",
            "old ns",
            "new ns",
            "old/new",
            "old flushes",
            "new flushes",
            "old /1e6 unmaps",
            "new /1e6 unmaps",
            "seed vanilla",
            "seed rewrite",
        ],
    );
    let mut report = Report {
        name: "vmap_scaling".into(),
        ..Report::default()
    };
    let pb = progress(counts.len() as u64 * 2, "vmap_scaling");
    let t_all = Instant::now();
    let mut new_ns = Vec::new();
    let mut flush_ratio = f64::INFINITY;
    for &n in &counts {
        let o = measure(old, n, iters, reps);
        pb.inc(1);
        let w = measure(new, n, iters, reps);
        pb.inc(1);
        let per_m = |p: &Point| p.flushes as f64 * 1e6 / p.unmaps as f64;
        flush_ratio = flush_ratio.min(per_m(&o) / per_m(&w).max(f64::MIN_POSITIVE));
        let seed = SEED.iter().find(|s| s.0 == n);
        t.row(vec![
            n.to_string(),
            format!("{:.0}", o.ns),
            format!("{:.0}", w.ns),
            ratio(o.ns, w.ns),
            o.flushes.to_string(),
            w.flushes.to_string(),
            format!("{:.0}", per_m(&o)),
            format!("{:.1}", per_m(&w)),
            seed.map_or("-".into(), |s| s.1.to_string()),
            seed.map_or("-".into(), |s| s.2.to_string()),
        ]);
        report.rows.push(serde_json::json!({
            "threads": n, "old_ns": o.ns, "new_ns": w.ns,
            "old_flushes": o.flushes, "new_flushes": w.flushes,
            "old_unmaps": o.unmaps, "new_unmaps": w.unmaps,
        }));
        new_ns.push(w.ns);
    }
    pb.finish_and_clear();
    report.tables.push(t);
    if new_ns.len() >= 2 {
        report.notes.push(format!(
            "new design at 2 threads / 1 thread: {:.2}x (target <= 1.10x on 2 cores); \
             old/new flushes per 10^6 unmaps, worst row: {flush_ratio:.0}x (target >= 100x)",
            new_ns[1] / new_ns[0]
        ));
    }
    report.notes.push(format!(
        "{iters} iterations per thread, best of {reps} runs ({:.0} ms in all; flush counts summed over the runs); {ncpu} CPU queues, thread slots \
         round robin, so above {ncpu} threads several share a queue (and its lock); flush = global lock + counter \
         (stand-in for the broadcast TLB flush); lazy_max 32 MiB",
        ms(t_all.elapsed())
    ));
    report
}
