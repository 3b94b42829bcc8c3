//! Seed 004 (Zoccolo and Gorman, 2009): adding buddies that are likely to
//! merge to the *tail* of the free lists, measured by external
//! fragmentation (the unusable free space index) and huge-page allocation.
//!
//! The workload is the seed's high-order stress test, rebuilt as a
//! simulation over one 1 GiB zone of 4 KiB frames:
//! - one allocation request per tick: mostly movable order-0 pages (page
//!   cache, kept on an LRU until reclaim; anonymous memory with short
//!   exponential lifetimes), some movable orders 1..3, unmovable orders 0..3
//!   (slab: mostly long-lived, some short), reclaimable orders 0..1;
//! - memory stays full: when free memory drops under 1/64 of the zone the
//!   oldest page cache is reclaimed until 1/32 is free (kswapd);
//! - every `huge_every` ticks an order-9 movable allocation (a huge page) is
//!   tried; on failure up to 4 rounds of direct reclaim (1/2048 of the zone)
//!   precede retries; its latency (reclaim included) is recorded when it
//!   succeeds, and the huge page is held for `huge_hold` ticks.
//!
//! Each policy also runs with *direct compaction* (issue 11): a failed
//! huge-page try first asks `compaction_suitable` (the fragmentation index
//! against `extfrag_threshold` 500) and, when it says compact, runs
//! `BuddyAllocator::compact`, whose callback relocates the simulated
//! owner of each moved page; reclaim follows only if that did not help.
//! The work to satisfy each huge page is counted in pages: pages moved by
//! compaction plus pages reclaimed by direct reclaim.
//!
//! A last table runs the same streams through per-CPU page lists
//! (`buddy::pcp::PcpZone`, 2 CPUs, lists sized by the kernel's
//! `zone_batchsize`): how many allocations the lists serve without the
//! zone lock, and what pages held on the lists cost in fragmentation and
//! huge pages.
//!
//! `Head` and `TailIfMergeLikely` run on identical request streams: the
//! random draws per tick are fixed in number and independent of outcomes, so
//! the same seed gives the same sequence of requests and lifetimes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

use mmkit::buddy::{
    BuddyAllocator, BuddyConfig, CompactResult, CompactSuitable, MigrateType, Placement, ZoneId,
    EXTFRAG_THRESHOLD,
};
use plotters::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{ms, progress, Experiment, Options};
use crate::report::{ratio, Report, Table};

/// The registered experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "buddy",
    about: "seed 004: merge-likely tail placement vs head; unusable index, huge pages",
    run,
};

/// First pfn of the zone (4 GiB, where ZONE_NORMAL starts on x86-64).
const ZONE_START: u64 = 0x10_0000;
const HUGE_ORDER: u8 = 9;
/// Direct reclaim rounds before giving up on a huge page; each frees
/// 1/2048 of the zone (128 pages in 1 GiB) of the oldest page cache. Kept
/// small: page cache comes in at 0.7 pages a request, and deeper reclaim
/// for every failed try would drain it and leave the zone half empty.
const RECLAIM_ROUNDS: u32 = 4;
const ZONE: ZoneId<'static> = ZoneId::new(0, "Normal");
const POLICIES: [Placement; 2] = [Placement::Head, Placement::TailIfMergeLikely];

#[derive(Debug, Clone, Copy)]
struct Scale {
    frames: u64,
    ticks: u64,
    seeds: u64,
    huge_every: u64,
    huge_hold: u64,
    samples: u64,
}

impl Scale {
    fn from(opts: &Options) -> Self {
        // Ten zone-sizes of requests: the long-lived classes turn over
        // several times. Huge pages: one try per 2000 requests, each held
        // for 0.1 n / 512 tries' worth, at most ~10% of the zone.
        let frames: u64 = if opts.quick { 16_384 } else { 262_144 };
        let huge_every = if opts.quick { 500 } else { 2_000 };
        let mut s = Scale {
            frames,
            ticks: 10 * frames,
            seeds: if opts.quick { 2 } else { 10 },
            huge_every,
            huge_hold: frames / 10 * huge_every / 512,
            samples: if opts.quick { 100 } else { 400 },
        };
        if let Some(n) = opts.seeds {
            s.seeds = n.max(1);
        }
        if let Some(l) = opts.loops {
            s.ticks = l.max(s.samples);
        }
        s
    }
}

/// What one run (one policy, one seed) measured.
#[derive(Debug, Clone, Default)]
struct RunResult {
    /// Order-9 unusable index (thousandths) at each sample.
    series9: Vec<f64>,
    /// Means over the steady part (after memory first filled).
    unusable9_mean: f64,
    unusable10_mean: f64,
    unusable9_final: f64,
    unusable10_final: f64,
    frag9_final: f64,
    free_final: f64,
    huge_attempts: u64,
    huge_ok: u64,
    huge_first_try: u64,
    huge_latency_us: f64,
    alloc_latency_ns: f64,
    alloc_failures: u64,
    extfrag_lines: [String; 3],
    /// Huge pages obtained so far, at each sample.
    huge_series: Vec<f64>,
    /// Per successful huge page: pages moved plus pages reclaimed for it.
    huge_work: Vec<f64>,
    huge_moved: u64,
    huge_reclaimed: u64,
    compact_runs: u64,
    compact_success: u64,
    compact_skipped: u64,
    migrate_scanned: u64,
    free_scanned: u64,
}

/// One allocation request, drawn identically for both policies.
struct Request {
    order: u8,
    mt: MigrateType,
    /// `None`: page cache, lives on the LRU until reclaimed.
    lifetime: Option<u64>,
}

/// Exactly four draws per tick, whatever happens to the request. Mean
/// lifetimes scale with the zone size `n` so that, in steady state, the
/// timed classes fill about 45% of the zone (anonymous 20%, unmovable 11%,
/// larger movable 7%, reclaimable 7%) and page cache the rest:
///
/// ```text
///   share  class                     order      mean lifetime
///   70.0%  page cache, movable       0          until reclaimed (LRU)
///   15.0%  anonymous, movable        0          1.33 n
///    4.0%  movable                   1..3       0.35 n
///    4.9%  slab, unmovable, long     0..3       0.93 n
///    2.1%  slab, unmovable, short    0..3       0.05 n
///    4.0%  reclaimable               0..1       1.1 n
/// ```
fn draw(rng: &mut StdRng, n: f64) -> Request {
    let class: u32 = rng.gen_range(0..1000);
    let pick: u32 = rng.gen_range(0..100);
    let u: f64 = rng.gen_range(f64::EPSILON..1.0);
    let long: bool = rng.gen_bool(0.7);
    let exp = |mean: f64| Some((-u.ln() * mean * n) as u64 + 1);
    let slab_order = |p: u32| match p {
        0..=59 => 0,
        60..=79 => 1,
        80..=89 => 2,
        _ => 3,
    };
    match class {
        0..=699 => Request {
            order: 0,
            mt: MigrateType::Movable,
            lifetime: None,
        },
        700..=849 => Request {
            order: 0,
            mt: MigrateType::Movable,
            lifetime: exp(1.33),
        },
        850..=889 => Request {
            order: 1 + (pick % 3) as u8,
            mt: MigrateType::Movable,
            lifetime: exp(0.35),
        },
        890..=959 => Request {
            order: slab_order(pick),
            mt: MigrateType::Unmovable,
            lifetime: if long { exp(0.93) } else { exp(0.05) },
        },
        _ => Request {
            order: (pick % 2) as u8,
            mt: MigrateType::Reclaimable,
            lifetime: exp(1.1),
        },
    }
}

/// The simulated system: the zone, live allocations, the page-cache LRU.
///
/// Live allocations are named by handles so that compaction can move them:
/// `pfn_of[h]` is where handle `h` lives, `handle_at[pfn - start]` names
/// the handle of the block starting there.
struct Sim {
    b: BuddyAllocator,
    expiry: BinaryHeap<Reverse<(u64, u32, u8)>>,
    lru: VecDeque<u32>,
    pfn_of: Vec<u64>,
    spare: Vec<u32>,
    handle_at: Vec<u32>,
    compaction: bool,
    low: u64,
    high: u64,
    batch: u64,
    filled: bool,
}

impl Sim {
    fn new(placement: Placement, frames: u64, compaction: bool) -> Self {
        let cfg = BuddyConfig {
            placement,
            ..BuddyConfig::default()
        };
        let mut b = BuddyAllocator::new(ZONE_START, frames, cfg).expect("valid zone");
        b.add_free_range(ZONE_START, frames).expect("fresh zone");
        Sim {
            b,
            expiry: BinaryHeap::new(),
            lru: VecDeque::new(),
            pfn_of: Vec::new(),
            spare: Vec::new(),
            handle_at: vec![u32::MAX; frames as usize],
            compaction,
            low: frames / 64,
            high: frames / 32,
            batch: frames / 2048,
            filled: false,
        }
    }

    fn expire(&mut self, now: u64) {
        while let Some(&Reverse((t, pfn, order))) = self.expiry.peek() {
            if t > now {
                break;
            }
            self.expiry.pop();
            let pfn = self.release(pfn);
            self.b.free(pfn, order).expect("live allocation");
        }
    }

    /// Reclaims the oldest page cache until `target` pages are free.
    fn reclaim_to(&mut self, target: u64) {
        while self.b.free_pages() < target {
            let Some(h) = self.lru.pop_front() else {
                break;
            };
            let pfn = self.release(h);
            self.b.free(pfn, 0).expect("cached page");
        }
    }

    fn kswapd(&mut self) {
        if self.b.free_pages() < self.low {
            self.filled = true;
            self.reclaim_to(self.high);
        }
    }

    /// A handle for the block at `pfn`.
    fn handle(&mut self, pfn: u64) -> u32 {
        let h = match self.spare.pop() {
            Some(h) => {
                self.pfn_of[h as usize] = pfn;
                h
            }
            None => {
                self.pfn_of.push(pfn);
                (self.pfn_of.len() - 1) as u32
            }
        };
        self.handle_at[(pfn - ZONE_START) as usize] = h;
        h
    }

    /// Retires handle `h`; returns where its block is.
    fn release(&mut self, h: u32) -> u64 {
        self.spare.push(h);
        self.pfn_of[h as usize]
    }

    fn keep(&mut self, now: u64, pfn: u64, req: &Request) {
        let h = self.handle(pfn);
        match req.lifetime {
            None => self.lru.push_back(h),
            Some(l) => self.expiry.push(Reverse((now + l, h, req.order))),
        }
    }

    /// Direct compaction for a huge page when the fragmentation index says
    /// it can help; the callback moves the owner of each moved block.
    fn compact(&mut self, r: &mut RunResult) -> u64 {
        if self.b.compaction_suitable(HUGE_ORDER, EXTFRAG_THRESHOLD) != CompactSuitable::Continue {
            r.compact_skipped += 1;
            return 0;
        }
        let Sim {
            b,
            pfn_of,
            handle_at,
            ..
        } = self;
        let out = b
            .compact(HUGE_ORDER, MigrateType::Movable, |old, new, _order| {
                let h = handle_at[(old - ZONE_START) as usize];
                handle_at[(new - ZONE_START) as usize] = h;
                pfn_of[h as usize] = new;
                true
            })
            .expect("order 9 is valid");
        r.compact_runs += 1;
        r.compact_success += u64::from(out.result == CompactResult::Success);
        r.migrate_scanned += out.stats.migrate_scanned;
        r.free_scanned += out.stats.free_scanned;
        out.stats.moved_pages
    }

    /// A huge-page attempt with direct reclaim; returns (ok, first try).
    fn try_huge(&mut self, now: u64, hold: u64, r: &mut RunResult) {
        r.huge_attempts += 1;
        let t0 = Instant::now();
        let (mut moved, mut reclaimed) = (0u64, 0u64);
        for round in 0..=RECLAIM_ROUNDS {
            let mut got = self.b.alloc(HUGE_ORDER, MigrateType::Movable);
            if got.is_err() && self.compaction {
                moved += self.compact(r);
                got = self.b.alloc(HUGE_ORDER, MigrateType::Movable);
            }
            if let Ok(pfn) = got {
                r.huge_latency_us += ms(t0.elapsed()) * 1e3;
                r.huge_ok += 1;
                r.huge_first_try += u64::from(round == 0 && moved == 0);
                r.huge_work.push((moved + reclaimed) as f64);
                r.huge_moved += moved;
                r.huge_reclaimed += reclaimed;
                let h = self.handle(pfn);
                self.expiry.push(Reverse((now + hold, h, HUGE_ORDER)));
                return;
            }
            if self.lru.is_empty() {
                return;
            }
            let before = self.b.free_pages();
            self.reclaim_to(before + self.batch);
            reclaimed += self.b.free_pages() - before;
        }
    }
}

fn run_one(placement: Placement, compaction: bool, seed: u64, s: &Scale) -> RunResult {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sim = Sim::new(placement, s.frames, compaction);
    let mut r = RunResult::default();
    let sample_every = (s.ticks / s.samples).max(1);
    let (mut steady, mut sum9, mut sum10) = (0u64, 0f64, 0f64);
    let (mut alloc_ns, mut allocs) = (0f64, 0u64);
    for now in 0..s.ticks {
        sim.expire(now);
        let req = draw(&mut rng, s.frames as f64);
        let t0 = Instant::now();
        let mut got = sim.b.alloc(req.order, req.mt);
        alloc_ns += t0.elapsed().as_nanos() as f64;
        allocs += 1;
        if got.is_err() {
            sim.reclaim_to(sim.high);
            got = sim.b.alloc(req.order, req.mt);
        }
        match got {
            Ok(pfn) => sim.keep(now, pfn, &req),
            Err(_) => r.alloc_failures += 1,
        }
        sim.kswapd();
        if now % s.huge_every == s.huge_every - 1 {
            sim.try_huge(now, s.huge_hold, &mut r);
        }
        if now % sample_every == sample_every - 1 {
            let u9 = f64::from(sim.b.unusable_free_index(9));
            r.series9.push(u9);
            r.huge_series.push(r.huge_ok as f64);
            if sim.filled {
                steady += 1;
                sum9 += u9;
                sum10 += f64::from(sim.b.unusable_free_index(10));
            }
        }
    }
    let b = &sim.b;
    r.unusable9_mean = sum9 / steady.max(1) as f64;
    r.unusable10_mean = sum10 / steady.max(1) as f64;
    r.unusable9_final = f64::from(b.unusable_free_index(9));
    r.unusable10_final = f64::from(b.unusable_free_index(10));
    r.frag9_final = f64::from(b.fragmentation_index(9));
    r.free_final = b.free_pages() as f64;
    r.huge_latency_us /= r.huge_ok.max(1) as f64;
    r.alloc_latency_ns = alloc_ns / allocs.max(1) as f64;
    r.extfrag_lines = [
        b.buddyinfo(ZONE),
        b.unusable_index_line(ZONE),
        b.extfrag_index_line(ZONE),
    ];
    debug_assert!(b.check().is_ok());
    r
}

// ---------------------------------------------------------------------------
// Statistics
// ---------------------------------------------------------------------------

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Sample standard deviation (0 for fewer than two values).
fn sd(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// Two-sided 95% Student t quantile for `df` degrees of freedom.
fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => T[df - 1],
        _ => 1.96 + 2.4 / df as f64,
    }
}

/// Mean and 95% interval half-width of paired differences.
/// One row of a paired-difference table: the mean difference `d`, its 95%
/// interval with `digits` decimals, and how many seeds favour Tail.
fn paired_row(t: &mut Table, label: &str, d: &[f64], lower_better: bool, digits: usize) {
    let (m, h) = paired(d);
    let better = d
        .iter()
        .filter(|&&x| if lower_better { x < 0.0 } else { x > 0.0 })
        .count();
    t.row(vec![
        label.into(),
        format!("{m:+.digits$}"),
        format!("[{:+.digits$}, {:+.digits$}]", m - h, m + h),
        format!("{better}/{}", d.len()),
    ]);
}

fn paired(d: &[f64]) -> (f64, f64) {
    let half = t975(d.len().saturating_sub(1)) * sd(d) / (d.len() as f64).sqrt();
    (mean(d), half)
}

fn pm(v: &[f64], scale: f64, digits: usize) -> String {
    format!("{:.digits$} ± {:.digits$}", mean(v) / scale, sd(v) / scale)
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

fn run(opts: &Options) -> Report {
    let s = Scale::from(opts);
    let pb = progress(s.seeds * 6, "buddy");
    // results[policy][seed], without and with direct compaction
    let mut results: [Vec<RunResult>; 2] = [Vec::new(), Vec::new()];
    let mut compacted: [Vec<RunResult>; 2] = [Vec::new(), Vec::new()];
    for i in 0..s.seeds {
        for (p, policy) in POLICIES.iter().enumerate() {
            results[p].push(run_one(*policy, false, 1000 + i, &s));
            compacted[p].push(run_one(*policy, true, 1000 + i, &s));
            pb.inc(2);
        }
    }
    let pcp: [Vec<PcpRun>; 2] = POLICIES.map(|p| {
        (0..s.seeds)
            .map(|i| {
                pb.inc(1);
                run_pcp(p, 1000 + i, &s)
            })
            .collect()
    });
    pb.finish_and_clear();
    let mut report = Report {
        name: "buddy".into(),
        ..Report::default()
    };
    report.tables.push(fragmentation_table(&s, &results));
    report.tables.push(huge_table(&results));
    report.tables.push(paired_table(&results));
    report.tables.push(compaction_table(&results, &compacted));
    report.tables.push(paired_compaction_table(&compacted));
    report.tables.push(pcp_table(&s, &results, &pcp));
    notes(&mut report, &s, &results);
    report.notes.push(
        "seed 004 on huge pages: 'the latency was slightly lower and on X86 and PPC64, more huge \
         pages were allocated almost immediately from the free lists' (here: 'from free lists' = \
         first try, no reclaim or compaction; 'work' = pages moved + pages reclaimed for it)"
            .into(),
    );
    rows(&mut report, &results);
    rows_compaction(&mut report, &compacted);
    if opts.out.is_some() {
        match plot(&s, &results) {
            Ok(svg) => report.plots.push(("buddy-unusable9.svg".into(), svg)),
            Err(e) => report.notes.push(format!("plot failed: {e}")),
        }
        match plot_huge(&s, &results, &compacted) {
            Ok(svg) => report.plots.push(("buddy-huge-pages.svg".into(), svg)),
            Err(e) => report.notes.push(format!("plot failed: {e}")),
        }
        match plot_diff(&s, &results) {
            Ok(svg) => report.plots.push(("buddy-unusable9-diff.svg".into(), svg)),
            Err(e) => report.notes.push(format!("plot failed: {e}")),
        }
    }
    report
}

fn name(p: Placement) -> &'static str {
    match p {
        Placement::Head => "Head (before 2.6.33)",
        Placement::TailIfMergeLikely => "TailIfMergeLikely",
    }
}

fn col(rs: &[RunResult], f: impl Fn(&RunResult) -> f64) -> Vec<f64> {
    rs.iter().map(f).collect()
}

fn fragmentation_table(s: &Scale, results: &[Vec<RunResult>; 2]) -> Table {
    let mut t = Table::new(
        format!(
            "Unusable free space index (0..1, lower is better), mean ± sd over {} seeds; {} frames, {} ticks",
            s.seeds, s.frames, s.ticks
        ),
        &["policy", "order 9 mean", "order 9 final", "order 10 mean", "order 10 final", "frag index 9 final", "free pages final"],
    );
    for (p, rs) in POLICIES.iter().zip(results) {
        t.row(vec![
            name(*p).into(),
            pm(&col(rs, |r| r.unusable9_mean), 1000.0, 3),
            pm(&col(rs, |r| r.unusable9_final), 1000.0, 3),
            pm(&col(rs, |r| r.unusable10_mean), 1000.0, 3),
            pm(&col(rs, |r| r.unusable10_final), 1000.0, 3),
            pm(&col(rs, |r| r.frag9_final), 1000.0, 3),
            pm(&col(rs, |r| r.free_final), 1.0, 0),
        ]);
    }
    t
}

fn huge_table(results: &[Vec<RunResult>; 2]) -> Table {
    let mut t = Table::new(
        "Order-9 (huge page) attempts and allocation latency, mean ± sd over seeds",
        &[
            "policy",
            "attempts",
            "successes",
            "first try",
            "order-9 latency µs",
            "alloc latency ns",
            "failed allocs",
        ],
    );
    for (p, rs) in POLICIES.iter().zip(results) {
        t.row(vec![
            name(*p).into(),
            pm(&col(rs, |r| r.huge_attempts as f64), 1.0, 0),
            pm(&col(rs, |r| r.huge_ok as f64), 1.0, 1),
            pm(&col(rs, |r| r.huge_first_try as f64), 1.0, 1),
            pm(&col(rs, |r| r.huge_latency_us), 1.0, 2),
            pm(&col(rs, |r| r.alloc_latency_ns), 1.0, 1),
            pm(&col(rs, |r| r.alloc_failures as f64), 1.0, 1),
        ]);
    }
    t
}

/// (label, divisor, lower is better, value of a run).
type PairedMetric = (&'static str, f64, bool, fn(&RunResult) -> f64);

fn paired_table(results: &[Vec<RunResult>; 2]) -> Table {
    let n = results[0].len();
    let mut t = Table::new(
        format!("Paired difference TailIfMergeLikely − Head over {n} seeds (95% t interval)"),
        &["metric", "mean diff", "95% interval", "seeds tail better"],
    );
    let metrics: [PairedMetric; 5] = [
        ("unusable index o9, run mean", 1000.0, true, |r| {
            r.unusable9_mean
        }),
        ("unusable index o9, final", 1000.0, true, |r| {
            r.unusable9_final
        }),
        ("unusable index o10, run mean", 1000.0, true, |r| {
            r.unusable10_mean
        }),
        ("order-9 successes", 1.0, false, |r| r.huge_ok as f64),
        ("order-9 first-try successes", 1.0, false, |r| {
            r.huge_first_try as f64
        }),
    ];
    for (label, scale, lower_better, f) in metrics {
        let d: Vec<f64> = (0..n)
            .map(|i| (f(&results[1][i]) - f(&results[0][i])) / scale)
            .collect();
        paired_row(&mut t, label, &d, lower_better, 4);
    }
    t
}

fn notes(report: &mut Report, s: &Scale, results: &[Vec<RunResult>; 2]) {
    report.notes.push(
        "seed 004 (2009, 3 GB machines): same number of huge pages with and without the patch; \
         the unusable free space index 'slightly lower throughout the lifetime of the system'; \
         huge-page latency slightly lower (no table published)"
            .into(),
    );
    report.notes.push(format!(
        "zone: {} frames of 4 KiB from pfn {ZONE_START:#x}, max_order 10, pageblock_order 9; \
         order-9 try every {} ticks, held {} ticks; 'mean' = mean of {} samples after memory first filled; \
         seeds 1000..{}; alloc latency includes the timer (~20-40 ns)",
        s.frames,
        s.huge_every,
        s.huge_hold,
        s.samples,
        1000 + s.seeds - 1
    ));
    let lat = |i: usize| mean(&col(&results[i], |r| r.huge_latency_us));
    let all = |i: usize| mean(&col(&results[i], |r| r.alloc_latency_ns));
    report.notes.push(format!(
        "speed-up of TailIfMergeLikely over Head (Head / Tail): order-9 latency {}, order 0..3 alloc latency {}",
        ratio(lat(0), lat(1)),
        ratio(all(0), all(1))
    ));
    for (p, rs) in POLICIES.iter().zip(results) {
        if let Some(r) = rs.first() {
            report.notes.push(format!(
                "{} seed 1000 final /proc/buddyinfo: {}",
                name(*p),
                r.extfrag_lines[0].trim_end()
            ));
            report.notes.push(format!(
                "{} seed 1000 final extfrag/unusable_index: {}",
                name(*p),
                r.extfrag_lines[1].trim_end()
            ));
            report.notes.push(format!(
                "{} seed 1000 final extfrag/extfrag_index: {}",
                name(*p),
                r.extfrag_lines[2].trim_end()
            ));
        }
    }
}

fn rows(report: &mut Report, results: &[Vec<RunResult>; 2]) {
    for (p, rs) in POLICIES.iter().zip(results) {
        for (i, r) in rs.iter().enumerate() {
            report.rows.push(serde_json::json!({
                "policy": format!("{p:?}"),
                "seed": 1000 + i,
                "unusable9_mean": r.unusable9_mean / 1000.0,
                "unusable9_final": r.unusable9_final / 1000.0,
                "unusable10_mean": r.unusable10_mean / 1000.0,
                "unusable10_final": r.unusable10_final / 1000.0,
                "fragmentation_index9_final": r.frag9_final / 1000.0,
                "free_pages_final": r.free_final,
                "huge_attempts": r.huge_attempts,
                "huge_successes": r.huge_ok,
                "huge_first_try": r.huge_first_try,
                "huge_latency_us": r.huge_latency_us,
                "alloc_latency_ns": r.alloc_latency_ns,
                "alloc_failures": r.alloc_failures,
            }));
        }
    }
}

/// Per-run huge-page figures: successes, share from the free lists, mean
/// and 90th percentile work per huge page, pages moved per huge page,
/// compaction runs, their success share, pages scanned per run.
fn huge_figures(r: &RunResult) -> [f64; 8] {
    let ok = r.huge_ok.max(1) as f64;
    let mut w = r.huge_work.clone();
    w.sort_by(f64::total_cmp);
    let p90 = w.get(w.len() * 9 / 10).copied().unwrap_or(0.0);
    let runs = r.compact_runs.max(1) as f64;
    [
        r.huge_ok as f64,
        100.0 * r.huge_first_try as f64 / ok,
        mean(&r.huge_work),
        p90,
        r.huge_moved as f64 / ok,
        r.compact_runs as f64,
        100.0 * r.compact_success as f64 / runs,
        (r.migrate_scanned + r.free_scanned) as f64 / runs,
    ]
}

fn compaction_table(plain: &[Vec<RunResult>; 2], compacted: &[Vec<RunResult>; 2]) -> Table {
    let mut t = Table::new(
        "Huge pages (order 9): reclaim only vs direct compaction (fragmentation index > 500) then reclaim, mean ± sd over seeds",
        &[
            "policy",
            "mode",
            "huge pages",
            "% from free lists",
            "work/huge page (pages)",
            "p90 work",
            "moved/huge page",
            "compaction runs",
            "% runs succeeding",
            "pages scanned/run",
        ],
    );
    for (mode, set) in [("reclaim only", plain), ("compaction", compacted)] {
        for (p, rs) in POLICIES.iter().zip(set) {
            let figs: Vec<[f64; 8]> = rs.iter().map(huge_figures).collect();
            let c = |k: usize, d: usize| pm(&figs.iter().map(|f| f[k]).collect::<Vec<_>>(), 1.0, d);
            t.row(vec![
                name(*p).into(),
                mode.into(),
                c(0, 1),
                c(1, 1),
                c(2, 1),
                c(3, 0),
                c(4, 1),
                c(5, 1),
                c(6, 1),
                c(7, 0),
            ]);
        }
    }
    t
}

fn paired_compaction_table(compacted: &[Vec<RunResult>; 2]) -> Table {
    let n = compacted[0].len();
    let mut t = Table::new(
        format!(
            "With compaction: paired difference TailIfMergeLikely − Head over {n} seeds (95% t interval)"
        ),
        &["metric", "mean diff", "95% interval", "seeds tail better"],
    );
    let metrics: [(&str, usize, bool); 5] = [
        ("huge pages", 0, false),
        ("% from free lists", 1, false),
        ("work per huge page (pages)", 2, true),
        ("pages moved per huge page", 4, true),
        ("compaction runs", 5, true),
    ];
    for (label, k, lower_better) in metrics {
        let d: Vec<f64> = (0..n)
            .map(|i| huge_figures(&compacted[1][i])[k] - huge_figures(&compacted[0][i])[k])
            .collect();
        paired_row(&mut t, label, &d, lower_better, 3);
    }
    t
}

fn rows_compaction(report: &mut Report, compacted: &[Vec<RunResult>; 2]) {
    for (p, rs) in POLICIES.iter().zip(compacted) {
        for (i, r) in rs.iter().enumerate() {
            let f = huge_figures(r);
            report.rows.push(serde_json::json!({
                "policy": format!("{p:?}"),
                "mode": "compaction",
                "seed": 1000 + i,
                "huge_attempts": r.huge_attempts,
                "huge_successes": r.huge_ok,
                "huge_first_try_pct": f[1],
                "huge_work_mean_pages": f[2],
                "huge_work_p90_pages": f[3],
                "huge_moved_per_success": f[4],
                "huge_reclaimed": r.huge_reclaimed,
                "compact_runs": r.compact_runs,
                "compact_success": r.compact_success,
                "compact_skipped": r.compact_skipped,
                "migrate_scanned": r.migrate_scanned,
                "free_scanned": r.free_scanned,
                "unusable9_mean": r.unusable9_mean / 1000.0,
            }));
        }
    }
}

/// Mean over seeds of huge pages obtained so far, at each sample.
fn mean_huge_series(rs: &[RunResult]) -> Vec<f64> {
    let len = rs.iter().map(|r| r.huge_series.len()).min().unwrap_or(0);
    (0..len)
        .map(|i| mean(&col(rs, |r| r.huge_series[i])))
        .collect()
}

fn plot_huge(
    s: &Scale,
    plain: &[Vec<RunResult>; 2],
    compacted: &[Vec<RunResult>; 2],
) -> Result<String, Box<dyn std::error::Error>> {
    let mut lines = Vec::new();
    for (mode, set, dashed) in [
        ("reclaim only", plain, false),
        ("compaction", compacted, true),
    ] {
        for (p, rs) in POLICIES.iter().zip(set) {
            lines.push((
                format!("{}, {mode}", name(*p)),
                mean_huge_series(rs),
                dashed,
            ));
        }
    }
    let step = s.ticks as f64 / s.samples as f64 / 1e6;
    let xmax = step * lines[0].1.len().max(1) as f64;
    let ymax = lines
        .iter()
        .flat_map(|l| l.1.iter())
        .fold(1.0f64, |a, &b| a.max(b))
        * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("Huge pages obtained over time, mean of {} seeds", s.seeds),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
        chart
            .configure_mesh()
            .x_desc("allocation requests (millions)")
            .y_desc("order-9 allocations obtained (cumulative)")
            .draw()?;
        let colors = [RED, BLUE, MAGENTA, CYAN];
        for ((label, pts, _), color) in lines.into_iter().zip(colors) {
            let line: Vec<(f64, f64)> = pts
                .iter()
                .enumerate()
                .map(|(i, &y)| ((i + 1) as f64 * step, y))
                .collect();
            chart
                .draw_series(LineSeries::new(line, color.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// Mean over seeds of the order-9 unusable index at each sample.
fn mean_series(rs: &[RunResult]) -> Vec<f64> {
    let len = rs.iter().map(|r| r.series9.len()).min().unwrap_or(0);
    (0..len)
        .map(|i| mean(&col(rs, |r| r.series9[i])) / 1000.0)
        .collect()
}

fn plot(s: &Scale, results: &[Vec<RunResult>; 2]) -> Result<String, Box<dyn std::error::Error>> {
    let series: Vec<Vec<f64>> = results.iter().map(|rs| mean_series(rs)).collect();
    let step = s.ticks as f64 / s.samples as f64 / 1e6;
    let xmax = step * series[0].len().max(1) as f64;
    let ymax = series
        .iter()
        .flatten()
        .fold(0.0f64, |a, &b| a.max(b))
        .max(0.01)
        * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Order-9 unusable free space index, mean of {} seeds",
                    s.seeds
                ),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax.min(1.0))?;
        chart
            .configure_mesh()
            .x_desc("allocation requests (millions)")
            .y_desc("unusable index, order 9 (lower is better)")
            .draw()?;
        let colors = [RED, BLUE];
        for ((p, pts), color) in POLICIES.iter().zip(&series).zip(colors) {
            let line = pts
                .iter()
                .enumerate()
                .map(|(i, &y)| ((i + 1) as f64 * step, y));
            chart
                .draw_series(LineSeries::new(line, color.stroke_width(2)))?
                .label(name(*p))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// Per sample: mean and 95% half-width of the paired difference
/// Tail − Head of the order-9 unusable index (0..1 scale).
fn diff_series(results: &[Vec<RunResult>; 2]) -> Vec<(f64, f64)> {
    let len = results
        .iter()
        .flatten()
        .map(|r| r.series9.len())
        .min()
        .unwrap_or(0);
    (0..len)
        .map(|i| {
            let d: Vec<f64> = results[0]
                .iter()
                .zip(&results[1])
                .map(|(h, t)| (t.series9[i] - h.series9[i]) / 1000.0)
                .collect();
            let (m, h) = paired(&d);
            (m, if h.is_finite() { h } else { 0.0 })
        })
        .collect()
}

fn plot_diff(
    s: &Scale,
    results: &[Vec<RunResult>; 2],
) -> Result<String, Box<dyn std::error::Error>> {
    let d = diff_series(results);
    let step = s.ticks as f64 / s.samples as f64 / 1e6;
    let xmax = step * d.len().max(1) as f64;
    let ylim = d.iter().fold(0.005f64, |a, &(m, h)| a.max(m.abs() + h)) * 1.1;
    let at = |i: usize| (i + 1) as f64 * step;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Order-9 unusable index: TailIfMergeLikely − Head, {} paired seeds",
                    s.seeds
                ),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..xmax, -ylim..ylim)?;
        chart
            .configure_mesh()
            .x_desc("allocation requests (millions)")
            .y_desc("difference (below 0: tail better)")
            .draw()?;
        let band = |sign: f64| {
            d.iter()
                .enumerate()
                .map(move |(i, &(m, h))| (at(i), m + sign * h))
        };
        for sign in [-1.0, 1.0] {
            chart.draw_series(LineSeries::new(band(sign), BLUE.mix(0.3)))?;
        }
        chart
            .draw_series(LineSeries::new(
                d.iter().enumerate().map(|(i, &(m, _))| (at(i), m)),
                BLUE.stroke_width(2),
            ))?
            .label("mean difference (band: 95% t interval)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        chart.draw_series(LineSeries::new([(0.0, 0.0), (xmax, 0.0)], BLACK))?;
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

// ---------------------------------------------------------------------------
// Per-CPU page lists in front of the zone (issue 11)
// ---------------------------------------------------------------------------

/// CPUs of the pcp runs: the request of tick `t`, and the frees that fall
/// due at `t`, run on CPU `t % PCP_CPUS`.
const PCP_CPUS: usize = 2;

/// What one run through per-CPU lists measured.
#[derive(Debug, Clone, Default)]
struct PcpRun {
    /// Allocations of an order and type that has a pcp list (0..=3 and 9).
    list_allocs: u64,
    /// Refills, drains and requests without a list: each takes the zone
    /// lock once.
    refills: u64,
    drains: u64,
    direct: u64,
    /// Requests in all.
    requests: u64,
    unusable9_mean: f64,
    /// Pages sitting on the lists, mean of the samples after memory filled.
    pcp_pages_mean: f64,
    huge_ok: u64,
}

/// The kernel's `zone_batchsize` for a zone of `pages` 4 KiB pages: a
/// quarter of a 1/1024 of the zone, at most 64, as `2^n - 1` (63 from
/// 1 GiB up, 3 for 64 MiB), at least 1 (`pageset_update`); `high` is
/// 6 x batch (before 5.14).
fn zone_batchsize(pages: u64) -> u32 {
    let b = ((pages >> 10).min(256) / 4).max(1);
    let b = b + b / 2;
    ((1u32 << (63 - b.leading_zeros())) - 1).max(1)
}

/// The request stream of `run_one` (same seed, same draws) through a
/// `PcpZone` sized as the kernel sizes a zone's lists (`zone_batchsize`),
/// reclaim only (no compaction). Pages on the lists are allocated as far
/// as the buddy knows: they neither merge nor count as free (as
/// `NR_FREE_PAGES`), so kswapd's watermarks see the zone's free pages
/// only; direct reclaim frees a number of pages (as `nr_to_reclaim`), and
/// a failed allocation drains every CPU before it gives up.
fn run_pcp(placement: Placement, seed: u64, s: &Scale) -> PcpRun {
    use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    let cfg = BuddyConfig {
        placement,
        ..BuddyConfig::default()
    };
    let mut b = BuddyAllocator::new(ZONE_START, s.frames, cfg).expect("valid zone");
    b.add_free_range(ZONE_START, s.frames).expect("fresh zone");
    let batch = zone_batchsize(s.frames);
    let pcp = PcpConfig {
        cpus: PCP_CPUS,
        batch,
        high: 6 * batch,
    };
    let mut z = PcpZone::new(b, pcp).expect("valid pcp config");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut expiry: BinaryHeap<Reverse<(u64, u64, u8)>> = BinaryHeap::new();
    let mut lru: VecDeque<u64> = VecDeque::new();
    let (low, high, nr_to_reclaim) = (s.frames / 64, s.frames / 32, s.frames / 2048);
    let sample_every = (s.ticks / s.samples).max(1);
    let mut r = PcpRun::default();
    let (mut filled, mut steady) = (false, 0u64);
    // kswapd: frees the oldest page cache on `cpu` until the zone has
    // `target` free pages.
    let reclaim = |z: &mut PcpZone, lru: &mut VecDeque<u64>, cpu: usize, target: u64| {
        while z.zone().free_pages() < target {
            let Some(pfn) = lru.pop_front() else { break };
            z.free(cpu, pfn, 0).expect("cached page");
        }
    };
    // Direct reclaim: frees `n` pages of the oldest page cache on `cpu`.
    let reclaim_n = |z: &mut PcpZone, lru: &mut VecDeque<u64>, cpu: usize, n: u64| {
        for pfn in lru.drain(..(n as usize).min(lru.len())) {
            z.free(cpu, pfn, 0).expect("cached page");
        }
    };
    for now in 0..s.ticks {
        let cpu = (now % PCP_CPUS as u64) as usize;
        while let Some(&Reverse((t, pfn, order))) = expiry.peek() {
            if t > now {
                break;
            }
            expiry.pop();
            z.free(cpu, pfn, order).expect("live allocation");
        }
        let req = draw(&mut rng, s.frames as f64);
        r.requests += 1;
        let mut got = z.alloc(cpu, req.order, req.mt);
        if got.is_err() {
            reclaim(&mut z, &mut lru, cpu, high);
            got = z.alloc(cpu, req.order, req.mt);
        }
        if let Ok(pfn) = got {
            match req.lifetime {
                None => lru.push_back(pfn),
                Some(l) => expiry.push(Reverse((now + l, pfn, req.order))),
            }
        }
        if z.zone().free_pages() < low {
            filled = true;
            reclaim(&mut z, &mut lru, cpu, high);
        }
        if now % s.huge_every == s.huge_every - 1 {
            r.requests += 1;
            for _ in 0..=RECLAIM_ROUNDS {
                if let Ok(pfn) = z.alloc(cpu, HUGE_ORDER, MigrateType::Movable) {
                    r.huge_ok += 1;
                    expiry.push(Reverse((now + s.huge_hold, pfn, HUGE_ORDER)));
                    break;
                }
                reclaim_n(&mut z, &mut lru, cpu, nr_to_reclaim);
            }
        }
        if filled && now % sample_every == sample_every - 1 {
            steady += 1;
            r.unusable9_mean += f64::from(z.zone().unusable_free_index(HUGE_ORDER));
            r.pcp_pages_mean += (0..PCP_CPUS).map(|c| z.pcp_pages(c)).sum::<u64>() as f64;
        }
    }
    r.unusable9_mean /= steady.max(1) as f64;
    r.pcp_pages_mean /= steady.max(1) as f64;
    for c in 0..PCP_CPUS {
        let st = z.stats(c);
        r.refills += st.refills;
        r.drains += st.drains;
        r.direct += st.direct;
    }
    // Every request has a list here (orders 0..=3 and 9, ordinary types).
    r.list_allocs = r.requests - r.direct;
    debug_assert!(z.check().is_ok());
    r
}

/// Per-CPU lists vs the bare zone on the same streams (reclaim only).
fn pcp_table(s: &Scale, plain: &[Vec<RunResult>; 2], pcp: &[Vec<PcpRun>; 2]) -> Table {
    let b = zone_batchsize(s.frames);
    let mut t = Table::new(
        format!(
            "Per-CPU page lists in front ({PCP_CPUS} CPUs, batch {b}, high {}) vs the bare zone, \
             reclaim only, mean ± sd over {} seeds",
            6 * b,
            s.seeds
        ),
        &[
            "policy",
            "% allocs from the lists",
            "zone-lock takings/1000 requests",
            "pages on the lists",
            "unusable o9 mean: bare",
            "with pcp",
            "huge pages: bare",
            "with pcp",
        ],
    );
    for (p, (bare, with)) in POLICIES.iter().zip(plain.iter().zip(pcp)) {
        let hit = |r: &PcpRun| 100.0 * (1.0 - r.refills as f64 / r.list_allocs.max(1) as f64);
        let lock =
            |r: &PcpRun| 1000.0 * (r.refills + r.drains + r.direct) as f64 / r.requests as f64;
        t.row(vec![
            name(*p).into(),
            pm(&with.iter().map(hit).collect::<Vec<_>>(), 1.0, 2),
            pm(&with.iter().map(lock).collect::<Vec<_>>(), 1.0, 1),
            pm(
                &with.iter().map(|r| r.pcp_pages_mean).collect::<Vec<_>>(),
                1.0,
                0,
            ),
            pm(&col(bare, |r| r.unusable9_mean), 1000.0, 3),
            pm(
                &with.iter().map(|r| r.unusable9_mean).collect::<Vec<_>>(),
                1000.0,
                3,
            ),
            pm(&col(bare, |r| r.huge_ok as f64), 1.0, 1),
            pm(
                &with.iter().map(|r| r.huge_ok as f64).collect::<Vec<_>>(),
                1.0,
                1,
            ),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_and_paired_interval() {
        assert_eq!(t975(9), 2.262);
        assert!((t975(100) - 1.984).abs() < 0.01);
        let (m, h) = paired(&[1.0, 2.0, 3.0]);
        assert_eq!(m, 2.0);
        // sd = 1, n = 3: 4.303 / sqrt(3).
        assert!((h - 4.303 / 3f64.sqrt()).abs() < 1e-9);
    }

    #[test]
    fn zone_batchsize_is_the_kernels() {
        assert_eq!(zone_batchsize(262_144), 63); // 1 GiB
        assert_eq!(zone_batchsize(1 << 24), 63); // capped at 1 MiB / 4
        assert_eq!(zone_batchsize(16_384), 3); // 64 MiB
        assert_eq!(zone_batchsize(1024), 1);
    }

    #[test]
    fn same_seed_gives_the_same_request_stream() {
        let mut a = StdRng::seed_from_u64(7);
        let mut b = StdRng::seed_from_u64(7);
        for _ in 0..1000 {
            let (x, y) = (draw(&mut a, 100.0), draw(&mut b, 100.0));
            assert_eq!((x.order, x.mt, x.lifetime), (y.order, y.mt, y.lifetime));
        }
    }
}
