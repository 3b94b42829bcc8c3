//! One thread's alloc+free pairs through the one-lock allocator
//! (`range::Locked` over `VmapAllocator`) and through `nodes::VmapNodes`,
//! in a form whose instructions can be counted on a busy machine, and the
//! nodes' 2-thread time against their 1-thread time (`flat`).
//!
//! `nodes_pairs locked|alone|nodes|flat page|churn|mix N [THREADS]` runs
//! `N` pairs of one loop:
//! - `page`: allocate one page, free it lazily;
//! - `churn`: `benches/nodes.rs`'s one-thread loop: 10^4 live areas, then
//!   each pair frees the oldest of 64 own areas lazily and allocates one
//!   of 2..101 pages;
//! - `mix`: as `churn`, with test_vmalloc's sizes in turn: 1 page, 3
//!   pages, 2..101 pages, 1..10 pages aligned to 1..1024 pages.
//!
//! The difference between two runs is the loop's own cost:
//!
//! ```text
//! ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!          --toggle-collect='nodes_pairs::run' target/release/examples/nodes_pairs $1 $2 $3 2>&1 \
//!          | grep -o 'Collected : [0-9]*' | grep -o '[0-9]*'; }
//! echo $(( ($(ir nodes churn 40000) - $(ir nodes churn 20000)) / 20000 ))   # per pair
//! ```
//!
//! With `THREADS` (default 1), that many threads run the loop at once,
//! thread `t` on node `t` (all of them on the one lock for `locked`), and
//! each thread's nanoseconds per pair are printed, by the wall clock and
//! in CPU time. `alone` gives each thread an allocator of its own: the
//! control, what the machine gives threads that share nothing. `nodes`
//! also prints the acquisitions of each kind of lock that found it held
//! ([`mmkit::nodes::NodesStats`]): which lock the threads share, and the
//! pool misses, the free tree's lock per 10^6 allocations and the areas
//! pooled at the end.
//!
//! `turns LOAD N TURN` runs two threads' loops (nodes 0 and 1) on one OS
//! thread, each taking TURN pairs in turn, `N` pairs each, and prints what
//! `nodes` prints but the times: the interleavings of two threads without
//! a scheduler, the same counts on every run (with `--features lock-stats`,
//! the free tree's lock acquisitions too).
//!
//! `flat` runs 5 rounds of the nodes and the share-nothing control at 1
//! and then 2 threads and prints the nodes' 2-thread / 1-thread time in
//! the quietest round (the one whose control lost least at 2 threads):
//! `cargo run --release -p mmkit --example nodes_pairs -- flat churn 2000000`.

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

use mmkit::nodes::{NodesConfig, StdVmapNodes};
use mmkit::range::Locked;
use mmkit::vmap::VmapAllocator;

const PAGE: u64 = 4096;
const START: u64 = 0xffff_c900_0000_0000;
const END: u64 = 0xffff_e900_0000_0000;
const LAZY_MAX: u64 = 32 << 20;

trait Pairs: Sync {
    fn alloc(&self, t: usize, size: u64, align: u64) -> u64;
    fn free_lazy(&self, t: usize, addr: u64);
}

impl Pairs for Locked<VmapAllocator> {
    fn alloc(&self, _: usize, size: u64, align: u64) -> u64 {
        Locked::alloc(self, size, align).expect("space")
    }
    fn free_lazy(&self, _: usize, addr: u64) {
        Locked::free_lazy(self, addr).expect("live");
    }
}

impl Pairs for StdVmapNodes {
    fn alloc(&self, t: usize, size: u64, align: u64) -> u64 {
        StdVmapNodes::alloc(self, t, size, align).expect("space")
    }
    fn free_lazy(&self, t: usize, addr: u64) {
        StdVmapNodes::free_lazy(self, t, addr).expect("live");
    }
}

/// One allocator per thread, sharing nothing.
struct Alone(Vec<Locked<VmapAllocator>>);

impl Pairs for Alone {
    fn alloc(&self, t: usize, size: u64, align: u64) -> u64 {
        Pairs::alloc(&self.0[t], t, size, align)
    }
    fn free_lazy(&self, t: usize, addr: u64) {
        Pairs::free_lazy(&self.0[t], t, addr);
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

/// The loop a run repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// One page, freed lazily.
    Page,
    /// Free the oldest of 64 own areas lazily, allocate 2..101 pages.
    Churn,
    /// As `Churn`, the sizes of test_vmalloc's tests in turn: 1 page, 3
    /// pages, 2..101 pages, 1..10 pages aligned to 1..1024 pages.
    Mix,
}

impl Load {
    /// One allocation of this load's sizes from thread `t`.
    fn alloc(self, p: &dyn Pairs, t: usize, x: &mut u64) -> u64 {
        let (size, align) = match self {
            Load::Mix => match next(x) % 4 {
                0 => (PAGE, PAGE),
                1 => (3 * PAGE, PAGE),
                2 => (size(x), PAGE),
                _ => ((1 + next(x) % 10) * PAGE, PAGE << (next(x) % 11)),
            },
            _ => (size(x), PAGE),
        };
        p.alloc(t, size, align)
    }
}

/// One thread's loop state: its random sizes and its own areas.
struct Looper {
    t: usize,
    load: Load,
    x: u64,
    own: VecDeque<u64>,
}

impl Looper {
    /// Thread `t`'s loop on `p`, its first 64 areas taken (none for `page`).
    fn new(p: &dyn Pairs, t: usize, load: Load) -> Self {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ t as u64;
        let own = match load {
            Load::Page => VecDeque::new(),
            _ => (0..64).map(|_| load.alloc(p, t, &mut x)).collect(),
        };
        Looper { t, load, x, own }
    }

    /// One pair.
    #[inline]
    fn step(&mut self, p: &dyn Pairs) {
        let t = self.t;
        if self.load == Load::Page {
            let a = p.alloc(t, black_box(PAGE), PAGE);
            p.free_lazy(t, a);
        } else {
            p.free_lazy(t, self.own.pop_front().expect("64 areas"));
            self.own.push_back(self.load.alloc(p, t, &mut self.x));
        }
    }
}

/// The loop callgrind counts: `n` pairs of `load` from thread `t`.
#[inline(never)]
fn run(p: &dyn Pairs, t: usize, load: Load, n: u64) {
    let mut l = Looper::new(p, t, load);
    for _ in 0..n {
        l.step(p);
    }
}

/// Two threads' loops on one OS thread, taking turns of `turn` pairs
/// each (`n` pairs each in all): how two threads interleave, without a
/// scheduler. Turns of one pair stand for two threads running at once
/// at the same speed, long turns for a loaded machine's time slices.
fn run_turns(p: &dyn Pairs, load: Load, n: u64, turn: u64) {
    let mut ls = [Looper::new(p, 0, load), Looper::new(p, 1, load)];
    let mut done = 0;
    while done < n {
        let k = turn.min(n - done);
        for l in &mut ls {
            for _ in 0..k {
                l.step(p);
            }
        }
        done += k;
    }
}

/// [`run`] on `threads` threads started together: each one's wall and
/// CPU nanoseconds per pair (CPU time leaves out the time a thread waited
/// for a core, which a loaded machine adds to the wall time).
fn run_threads(p: &dyn Pairs, threads: usize, load: Load, n: u64) -> Vec<(f64, f64)> {
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let (t0, c0) = (Instant::now(), cpu_ns());
                    run(p, t, load, n);
                    let wall = t0.elapsed().as_nanos() as f64;
                    let cpu = cpu_ns().zip(c0).map_or(f64::NAN, |(c, c0)| (c - c0) as f64);
                    (wall / n as f64, cpu / n as f64)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a thread"))
            .collect()
    })
}

/// This thread's time on a CPU in ns, the first field of
/// `/proc/thread-self/schedstat` (the scheduler's own count, to the
/// nanosecond); `None` where there is no such file.
fn cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// The exact allocator behind one lock, its lazy list as the nodes'.
fn exact() -> Locked<VmapAllocator> {
    let mut va = VmapAllocator::new(START, END).expect("valid space");
    va.set_lazy_max(LAZY_MAX);
    Locked::new(va)
}

/// Prints each thread's wall and CPU ns per pair and their means.
fn report(ns: &[(f64, f64)]) {
    let (wall, cpu) = means(ns);
    let each: Vec<String> = (ns.iter())
        .map(|x| format!("{:.0}/{:.0}", x.0, x.1))
        .collect();
    println!(
        "ns per pair, wall/cpu: mean {wall:.0}/{cpu:.0} (threads: {})",
        each.join(", ")
    );
}

/// Nodes for `threads` threads (8 at least, as the benchmark's).
fn nodes(threads: usize) -> StdVmapNodes {
    let cfg = NodesConfig {
        nodes: threads.max(8),
        lazy_max: LAZY_MAX,
        ..NodesConfig::default()
    };
    StdVmapNodes::new(START, END, cfg).expect("valid space")
}

/// Rounds of [`flat`].
const ROUNDS: usize = 5;

/// The threads' mean wall and CPU ns per pair.
fn means(ns: &[(f64, f64)]) -> (f64, f64) {
    let k = ns.len() as f64;
    (ns.iter()).fold((0.0, 0.0), |a, x| (a.0 + x.0 / k, a.1 + x.1 / k))
}

/// The threads' mean wall and CPU ns per pair of one run on `p`.
fn mean(p: &dyn Pairs, threads: usize, load: Load, n: u64) -> (f64, f64) {
    means(&run_threads(p, threads, load, n))
}

/// One round of [`flat`]: the nodes' wall and CPU ns per pair at 1 and
/// at 2 threads, and the control's 2-thread / 1-thread wall time.
struct Round {
    one: (f64, f64),
    two: (f64, f64),
    control: f64,
}

/// Whether the nodes are flat at two threads: [`ROUNDS`] rounds, each the
/// nodes and the share-nothing control at 1 and then 2 threads, each on
/// a fresh allocator. The quietest round is the one whose control lost
/// the least at 2 threads (the control shares nothing, so what it loses
/// is the machine's); its nodes' 2-thread / 1-thread time is the figure
/// judged, beside the best of every round's and its ratio over the
/// control's (what the nodes lose beyond what the machine takes).
fn flat(load: Load, n: u64, fill: impl Fn(&dyn Pairs)) {
    println!("round  nodes ns 1 thr / 2 thr  ratio (cpu)  control ns 1 thr / 2 thr  ratio (cpu)");
    let mut rounds = Vec::new();
    for r in 0..ROUNDS {
        let one = |threads| {
            let v = nodes(threads);
            fill(&v);
            let got = mean(&v, threads, load, n);
            let a = Alone((0..threads).map(|_| exact()).collect());
            a.0.iter().for_each(|l| fill(l));
            (got, mean(&a, threads, load, n))
        };
        let ((n1, c1), (n2, c2)) = (one(1), one(2));
        println!(
            "{r:5}  {:10.0} / {:5.0}  {:5.2}x ({:4.2}x)  {:12.0} / {:5.0}  {:5.2}x ({:4.2}x)",
            n1.0,
            n2.0,
            n2.0 / n1.0,
            n2.1 / n1.1,
            c1.0,
            c2.0,
            c2.0 / c1.0,
            c2.1 / c1.1
        );
        rounds.push(Round {
            one: n1,
            two: n2,
            control: c2.0 / c1.0,
        });
    }
    let q = (rounds.iter())
        .min_by(|a, b| a.control.total_cmp(&b.control))
        .expect("rounds");
    println!(
        "quietest round (control {:.2}x): nodes 1 thread {:.0} ns, 2 threads {:.0} ns per pair: \
         {:.2}x by the wall clock, {:.2}x in CPU time (target <= 1.10x); over the control's \
         ratio: {:.2}x",
        q.control,
        q.one.0,
        q.two.0,
        q.two.0 / q.one.0,
        q.two.1 / q.one.1,
        q.two.0 / q.one.0 / q.control
    );
    let best = |f: fn(&Round) -> f64| rounds.iter().map(f).fold(f64::INFINITY, f64::min);
    let (b1, b2) = (best(|r| r.one.0), best(|r| r.two.0));
    println!(
        "best of {ROUNDS}: nodes 1 thread {b1:.0} ns, 2 threads {b2:.0} ns per pair: {:.2}x",
        b2 / b1
    );
}

/// Runs the nodes and prints, with the times, what the threads shared:
/// the pool misses (each takes the free tree's lock), the purges, and
/// the acquisitions of each kind of lock that found it held.
fn run_nodes(threads: usize, fill: impl Fn(&dyn Pairs), go: impl FnOnce(&StdVmapNodes)) {
    let v = nodes(threads);
    fill(&v);
    let b = v.stats();
    go(&v);
    let s = v.stats();
    let allocs = (s.hits + s.misses) - (b.hits + b.misses);
    let per_m = |x: u64| x as f64 * 1e6 / allocs as f64;
    println!(
        "pool misses {} of {allocs} allocations ({:.2}%), purges {}, pooled at the end {}; the \
         free tree's lock taken \
         {} times ({:.0} per 10^6 allocations; with lock-stats); acquisitions that found the \
         lock held: nodes' {}, the free tree's {} ({:.0} per 10^6 allocations), the purge \
         lock's {}",
        s.misses - b.misses,
        per_m(s.misses - b.misses) / 1e4,
        s.purges - b.purges,
        s.pooled,
        s.tree_locks - b.tree_locks,
        per_m(s.tree_locks - b.tree_locks),
        s.node_lock_waits - b.node_lock_waits,
        s.tree_lock_waits - b.tree_lock_waits,
        per_m(s.tree_lock_waits - b.tree_lock_waits),
        s.purge_lock_waits - b.purge_lock_waits,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: nodes_pairs locked|alone|nodes|flat page|churn|mix N [THREADS], \
                 nodes_pairs turns page|churn|mix N TURN";
    let (kind, load, n, threads) = match args.as_slice() {
        [_, k, l, n] => (k.as_str(), l.as_str(), n.as_str(), "1"),
        [_, k, l, n, t] => (k.as_str(), l.as_str(), n.as_str(), t.as_str()),
        _ => panic!("{usage}"),
    };
    let n = n.parse::<u64>().expect(usage);
    let threads = threads.parse::<usize>().expect(usage).max(1);
    let load = match load {
        "page" => Load::Page,
        "churn" => Load::Churn,
        "mix" => Load::Mix,
        _ => panic!("{usage}"),
    };
    let fill = |p: &dyn Pairs| {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..if load == Load::Page { 0 } else { 10_000 } {
            load.alloc(p, 0, &mut x);
        }
    };
    match kind {
        "locked" => {
            let l = exact();
            fill(&l);
            report(&run_threads(&l, threads, load, n));
        }
        "alone" => {
            let a = Alone((0..threads).map(|_| exact()).collect());
            for l in &a.0 {
                fill(l);
            }
            report(&run_threads(&a, threads, load, n));
        }
        "nodes" => run_nodes(threads, fill, |v| {
            report(&run_threads(v, threads, load, n));
        }),
        "turns" => run_nodes(2, fill, |v| run_turns(v, load, n, threads as u64)),
        "flat" => flat(load, n, fill),
        _ => panic!("{usage}"),
    }
}
