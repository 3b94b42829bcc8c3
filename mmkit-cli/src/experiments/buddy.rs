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
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::{Experiment, Options};
use crate::plot::{self, Axis, Chart, Series};
use crate::render::{col, Col, Fmt, Report, Table};
use crate::run::{mean, ms, progress, ratio, sd, MeanSd};

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
    /// `None`: the kernel's -1 sentinel, an order-9 request would succeed
    /// (no fragmentation to measure); never averaged.
    frag9_final: Option<f64>,
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
    r.frag9_final = match b.fragmentation_index(9) {
        -1000 => None,
        f => Some(f64::from(f)),
    };
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

/// Mean and 95% interval half-width of paired differences (the half-width
/// is NaN for fewer than two: one seed has no interval).
fn paired(d: &[f64]) -> (f64, f64) {
    let half = t975(d.len().saturating_sub(1)) * sd(d) / (d.len() as f64).sqrt();
    (mean(d), half)
}

/// A 95% interval.
#[derive(Serialize)]
struct Interval {
    lo: f64,
    hi: f64,
}

/// One metric of a paired-difference table: Tail − Head over the seeds.
#[derive(Serialize)]
struct PairedRow {
    metric: &'static str,
    mean_diff: f64,
    /// `None` with fewer than two seeds.
    interval: Option<Interval>,
    tail_better: String,
}

fn paired_cols(digits: usize) -> [Col; 4] {
    [
        col("metric", "metric", Fmt::Text),
        col("mean_diff", "mean diff", Fmt::Signed(digits)),
        col("interval", "95% interval", Fmt::Interval(digits)),
        col("tail_better", "seeds tail better", Fmt::Text),
    ]
}

fn paired_row(metric: &'static str, d: &[f64], lower_better: bool) -> PairedRow {
    let (m, h) = paired(d);
    let better = d
        .iter()
        .filter(|&&x| if lower_better { x < 0.0 } else { x > 0.0 })
        .count();
    PairedRow {
        metric,
        mean_diff: m,
        interval: h.is_finite().then_some(Interval {
            lo: m - h,
            hi: m + h,
        }),
        tail_better: format!("{better}/{}", d.len()),
    }
}

/// Mean ± sd of `f` over the runs, divided by `scale`.
fn over<R>(rs: &[R], scale: f64, f: impl Fn(&R) -> f64) -> MeanSd {
    MeanSd::of(&rs.iter().map(|r| f(r) / scale).collect::<Vec<_>>())
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

/// Every run: results[policy][seed], without and with direct compaction,
/// and with per-CPU lists in front (reclaim only).
struct Runs {
    plain: [Vec<RunResult>; 2],
    compacted: [Vec<RunResult>; 2],
    pcp: [Vec<PcpRun>; 2],
}

fn measure(s: &Scale) -> Runs {
    let pb = progress(s.seeds * 6, "buddy");
    let mut r = Runs {
        plain: [Vec::new(), Vec::new()],
        compacted: [Vec::new(), Vec::new()],
        pcp: [Vec::new(), Vec::new()],
    };
    for i in 0..s.seeds {
        for (p, policy) in POLICIES.iter().enumerate() {
            r.plain[p].push(run_one(*policy, false, 1000 + i, s));
            r.compacted[p].push(run_one(*policy, true, 1000 + i, s));
            pb.inc(2);
        }
    }
    for (p, policy) in POLICIES.iter().enumerate() {
        for i in 0..s.seeds {
            r.pcp[p].push(run_pcp(*policy, 1000 + i, s));
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    r
}

fn run(opts: &Options) -> Report {
    let s = Scale::from(opts);
    let runs = measure(&s);
    let mut report = Report::new("buddy");
    report.tables = vec![
        fragmentation_table(&s, &runs.plain),
        huge_table(&runs.plain),
        paired_table(&runs.plain),
    ];
    report.tables.extend(compaction_tables(&runs));
    report.tables.push(paired_compaction_table(&runs.compacted));
    report.tables.push(pcp_table(&s, &runs.plain, &runs.pcp));
    report.raw = vec![per_seed_table(&runs)];
    notes(&mut report, &s, &runs.plain);
    report.notes.push(
        "seed 004 on huge pages: 'the latency was slightly lower and on X86 and PPC64, more huge \
         pages were allocated almost immediately from the free lists' (here: 'from free lists' = \
         first try, no reclaim or compaction; 'work' = pages moved + pages reclaimed for it)"
            .into(),
    );
    plots(&mut report, &s, &runs);
    report
}

fn name(p: Placement) -> &'static str {
    match p {
        Placement::Head => "Head (before 2.6.33)",
        Placement::TailIfMergeLikely => "TailIfMergeLikely",
    }
}

/// External fragmentation of one policy over the seeds.
#[derive(Serialize)]
struct FragRow {
    policy: &'static str,
    unusable9_mean: MeanSd,
    unusable9_final: MeanSd,
    unusable10_mean: MeanSd,
    unusable10_final: MeanSd,
    /// Over the seeds where an order-9 request would fail (the index is
    /// defined); the others are counted in `order9_would_succeed`.
    frag9_final: MeanSd,
    order9_would_succeed: usize,
    free_pages_final: MeanSd,
}

const FRAG_COLS: [Col; 8] = [
    col("policy", "policy", Fmt::Text),
    col("unusable9_mean", "order 9 mean", Fmt::MeanSd(3)),
    col("unusable9_final", "order 9 final", Fmt::MeanSd(3)),
    col("unusable10_mean", "order 10 mean", Fmt::MeanSd(3)),
    col("unusable10_final", "order 10 final", Fmt::MeanSd(3)),
    col("frag9_final", "frag index 9 final", Fmt::MeanSd(3)),
    col("order9_would_succeed", "seeds o9 would succeed", Fmt::Text),
    col("free_pages_final", "free pages final", Fmt::MeanSd(0)),
];

fn fragmentation_table(s: &Scale, results: &[Vec<RunResult>; 2]) -> Table {
    let rows: Vec<FragRow> = POLICIES
        .iter()
        .zip(results)
        .map(|(p, rs)| {
            let frag: Vec<f64> = rs
                .iter()
                .filter_map(|r| r.frag9_final)
                .map(|f| f / 1000.0)
                .collect();
            FragRow {
                policy: name(*p),
                unusable9_mean: over(rs, 1000.0, |r| r.unusable9_mean),
                unusable9_final: over(rs, 1000.0, |r| r.unusable9_final),
                unusable10_mean: over(rs, 1000.0, |r| r.unusable10_mean),
                unusable10_final: over(rs, 1000.0, |r| r.unusable10_final),
                order9_would_succeed: rs.len() - frag.len(),
                frag9_final: MeanSd::of(&frag),
                free_pages_final: over(rs, 1.0, |r| r.free_final),
            }
        })
        .collect();
    let title = format!(
        "Unusable free space index (0..1, lower is better), mean ± sd over {} seeds; {} frames, {} ticks; \
         the fragmentation index averages only the seeds where an order-9 request would fail",
        s.seeds, s.frames, s.ticks
    );
    Table::of(title, &FRAG_COLS, &rows)
}

/// Huge-page attempts and latency of one policy over the seeds.
#[derive(Serialize)]
struct HugeRow {
    policy: &'static str,
    attempts: MeanSd,
    successes: MeanSd,
    first_try: MeanSd,
    huge_latency_us: MeanSd,
    alloc_latency_ns: MeanSd,
    failed_allocs: MeanSd,
}

const HUGE_COLS: [Col; 7] = [
    col("policy", "policy", Fmt::Text),
    col("attempts", "attempts", Fmt::MeanSd(0)),
    col("successes", "successes", Fmt::MeanSd(1)),
    col("first_try", "first try", Fmt::MeanSd(1)),
    col("huge_latency_us", "order-9 latency µs", Fmt::MeanSd(2)),
    col("alloc_latency_ns", "alloc latency ns", Fmt::MeanSd(1)),
    col("failed_allocs", "failed allocs", Fmt::MeanSd(1)),
];

fn huge_table(results: &[Vec<RunResult>; 2]) -> Table {
    let rows: Vec<HugeRow> = POLICIES
        .iter()
        .zip(results)
        .map(|(p, rs)| HugeRow {
            policy: name(*p),
            attempts: over(rs, 1.0, |r| r.huge_attempts as f64),
            successes: over(rs, 1.0, |r| r.huge_ok as f64),
            first_try: over(rs, 1.0, |r| r.huge_first_try as f64),
            huge_latency_us: over(rs, 1.0, |r| r.huge_latency_us),
            alloc_latency_ns: over(rs, 1.0, |r| r.alloc_latency_ns),
            failed_allocs: over(rs, 1.0, |r| r.alloc_failures as f64),
        })
        .collect();
    let title = "Order-9 (huge page) attempts and allocation latency, mean ± sd over seeds";
    Table::of(title, &HUGE_COLS, &rows)
}

/// (label, divisor, lower is better, value of a run).
type PairedMetric = (&'static str, f64, bool, fn(&RunResult) -> f64);

fn paired_title(n: usize, what: &str) -> String {
    let why = if n < 2 { "; one seed: no interval" } else { "" };
    format!("{what}paired difference TailIfMergeLikely − Head over {n} seeds (95% t interval{why})")
}

fn paired_table(results: &[Vec<RunResult>; 2]) -> Table {
    let n = results[0].len();
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
    let rows: Vec<PairedRow> = metrics
        .iter()
        .map(|&(label, scale, lower_better, f)| {
            let d: Vec<f64> = (0..n)
                .map(|i| (f(&results[1][i]) - f(&results[0][i])) / scale)
                .collect();
            paired_row(label, &d, lower_better)
        })
        .collect();
    Table::of(paired_title(n, ""), &paired_cols(4), &rows)
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
    let avg = |i: usize, f: fn(&RunResult) -> f64| over(&results[i], 1.0, f).mean;
    let speedup = |f: fn(&RunResult) -> f64| {
        ratio(avg(0, f), avg(1, f)).map_or("-".into(), |x| format!("{x:.2}x"))
    };
    report.notes.push(format!(
        "speed-up of TailIfMergeLikely over Head (Head / Tail): order-9 latency {}, order 0..3 alloc latency {}",
        speedup(|r| r.huge_latency_us),
        speedup(|r| r.alloc_latency_ns)
    ));
    for (p, rs) in POLICIES.iter().zip(results) {
        let Some(r) = rs.first() else { continue };
        let files = [
            "/proc/buddyinfo",
            "extfrag/unusable_index",
            "extfrag/extfrag_index",
        ];
        for (file, line) in files.iter().zip(&r.extfrag_lines) {
            report.notes.push(format!(
                "{} seed 1000 final {file}: {}",
                name(*p),
                line.trim_end()
            ));
        }
    }
}

/// One run (policy, mode, seed): every figure, for `--json`.
#[derive(Serialize)]
struct SeedRow {
    policy: &'static str,
    mode: &'static str,
    seed: u64,
    unusable9_mean: f64,
    unusable9_final: f64,
    unusable10_mean: f64,
    unusable10_final: f64,
    /// `None`: an order-9 request would succeed (the kernel's -1).
    fragmentation_index9_final: Option<f64>,
    free_pages_final: f64,
    huge_attempts: u64,
    huge_successes: u64,
    huge_first_try: u64,
    huge_latency_us: f64,
    alloc_latency_ns: f64,
    alloc_failures: u64,
    huge: HugeFigures,
    huge_reclaimed: u64,
    compact_skipped: u64,
    migrate_scanned: u64,
    free_scanned: u64,
}

fn seed_row(p: Placement, mode: &'static str, i: usize, r: &RunResult) -> SeedRow {
    SeedRow {
        policy: name(p),
        mode,
        seed: 1000 + i as u64,
        unusable9_mean: r.unusable9_mean / 1000.0,
        unusable9_final: r.unusable9_final / 1000.0,
        unusable10_mean: r.unusable10_mean / 1000.0,
        unusable10_final: r.unusable10_final / 1000.0,
        fragmentation_index9_final: r.frag9_final.map(|f| f / 1000.0),
        free_pages_final: r.free_final,
        huge_attempts: r.huge_attempts,
        huge_successes: r.huge_ok,
        huge_first_try: r.huge_first_try,
        huge_latency_us: r.huge_latency_us,
        alloc_latency_ns: r.alloc_latency_ns,
        alloc_failures: r.alloc_failures,
        huge: huge_figures(r),
        huge_reclaimed: r.huge_reclaimed,
        compact_skipped: r.compact_skipped,
        migrate_scanned: r.migrate_scanned,
        free_scanned: r.free_scanned,
    }
}

fn per_seed_table(runs: &Runs) -> Table {
    let mut rows = Vec::new();
    for (mode, set) in [
        ("reclaim only", &runs.plain),
        ("compaction", &runs.compacted),
    ] {
        for (p, rs) in POLICIES.iter().zip(set) {
            rows.extend(rs.iter().enumerate().map(|(i, r)| seed_row(*p, mode, i, r)));
        }
    }
    Table::of("every run: policy, mode, seed", &[], &rows)
}

/// Per-run huge-page figures.
#[derive(Debug, Clone, Copy, Serialize)]
struct HugeFigures {
    successes: f64,
    /// Percent of successes at the first try, from the free lists.
    first_try_pct: f64,
    /// Pages moved plus pages reclaimed per huge page: mean and 90th
    /// percentile.
    work_mean_pages: f64,
    work_p90_pages: f64,
    moved_per_success: f64,
    compact_runs: f64,
    compact_success_pct: f64,
    scanned_per_run: f64,
}

fn huge_figures(r: &RunResult) -> HugeFigures {
    let ok = r.huge_ok.max(1) as f64;
    let mut w = r.huge_work.clone();
    w.sort_by(f64::total_cmp);
    let runs = r.compact_runs.max(1) as f64;
    HugeFigures {
        successes: r.huge_ok as f64,
        first_try_pct: 100.0 * r.huge_first_try as f64 / ok,
        work_mean_pages: if w.is_empty() { 0.0 } else { mean(&w) },
        work_p90_pages: w.get(w.len() * 9 / 10).copied().unwrap_or(0.0),
        moved_per_success: r.huge_moved as f64 / ok,
        compact_runs: r.compact_runs as f64,
        compact_success_pct: 100.0 * r.compact_success as f64 / runs,
        scanned_per_run: (r.migrate_scanned + r.free_scanned) as f64 / runs,
    }
}

/// One policy and mode: huge-page figures over the seeds.
#[derive(Serialize)]
struct CompactionRow {
    policy: &'static str,
    mode: &'static str,
    huge_pages: MeanSd,
    first_try_pct: MeanSd,
    work_mean_pages: MeanSd,
    work_p90_pages: MeanSd,
    moved_per_success: MeanSd,
    compact_runs: MeanSd,
    compact_success_pct: MeanSd,
    scanned_per_run: MeanSd,
}

const HUGE_WORK_COLS: [Col; 6] = [
    col("policy", "policy", Fmt::Text),
    col("mode", "mode", Fmt::Text),
    col("huge_pages", "huge pages", Fmt::MeanSd(1)),
    col("first_try_pct", "% from free lists", Fmt::MeanSd(1)),
    col("work_mean_pages", "work/huge page (pages)", Fmt::MeanSd(1)),
    col("work_p90_pages", "p90 work (pages)", Fmt::MeanSd(0)),
];

const COMPACTION_COLS: [Col; 6] = [
    col("policy", "policy", Fmt::Text),
    col("mode", "mode", Fmt::Text),
    col(
        "moved_per_success",
        "moved/huge page (pages)",
        Fmt::MeanSd(1),
    ),
    col("compact_runs", "compaction runs", Fmt::MeanSd(1)),
    col("compact_success_pct", "% runs succeeding", Fmt::MeanSd(1)),
    col("scanned_per_run", "pages scanned/run", Fmt::MeanSd(0)),
];

fn compaction_tables(runs: &Runs) -> [Table; 2] {
    let mut rows = Vec::new();
    for (mode, set) in [
        ("reclaim only", &runs.plain),
        ("compaction", &runs.compacted),
    ] {
        for (p, rs) in POLICIES.iter().zip(set) {
            let figs: Vec<HugeFigures> = rs.iter().map(huge_figures).collect();
            let c =
                |f: fn(&HugeFigures) -> f64| MeanSd::of(&figs.iter().map(f).collect::<Vec<_>>());
            rows.push(CompactionRow {
                policy: name(*p),
                mode,
                huge_pages: c(|f| f.successes),
                first_try_pct: c(|f| f.first_try_pct),
                work_mean_pages: c(|f| f.work_mean_pages),
                work_p90_pages: c(|f| f.work_p90_pages),
                moved_per_success: c(|f| f.moved_per_success),
                compact_runs: c(|f| f.compact_runs),
                compact_success_pct: c(|f| f.compact_success_pct),
                scanned_per_run: c(|f| f.scanned_per_run),
            });
        }
    }
    let what = "reclaim only vs direct compaction (fragmentation index > 500) then reclaim, mean ± sd over seeds";
    [
        Table::of(
            format!("Huge pages (order 9) and the work to get them: {what}"),
            &HUGE_WORK_COLS,
            &rows,
        ),
        Table::of(
            format!("Compaction work per huge page: {what}"),
            &COMPACTION_COLS,
            &rows,
        ),
    ]
}

/// (label, value of a run's figures, lower is better).
type HugeMetric = (&'static str, fn(&HugeFigures) -> f64, bool);

fn paired_compaction_table(compacted: &[Vec<RunResult>; 2]) -> Table {
    let n = compacted[0].len();
    let metrics: [HugeMetric; 5] = [
        ("huge pages", |f| f.successes, false),
        ("% from free lists", |f| f.first_try_pct, false),
        ("work per huge page (pages)", |f| f.work_mean_pages, true),
        ("pages moved per huge page", |f| f.moved_per_success, true),
        ("compaction runs", |f| f.compact_runs, true),
    ];
    let rows: Vec<PairedRow> = metrics
        .iter()
        .map(|&(label, f, lower_better)| {
            let d: Vec<f64> = (0..n)
                .map(|i| f(&huge_figures(&compacted[1][i])) - f(&huge_figures(&compacted[0][i])))
                .collect();
            paired_row(label, &d, lower_better)
        })
        .collect();
    Table::of(paired_title(n, "With compaction: "), &paired_cols(3), &rows)
}

/// Mean over seeds of `f` at each sample, on the x axis in millions of
/// requests.
fn mean_at(s: &Scale, rs: &[RunResult], f: fn(&RunResult) -> &Vec<f64>) -> Vec<(f64, f64)> {
    let step = s.ticks as f64 / s.samples as f64 / 1e6;
    let len = rs.iter().map(|r| f(r).len()).min().unwrap_or(0);
    (0..len)
        .map(|i| {
            (
                (i + 1) as f64 * step,
                mean(&rs.iter().map(|r| f(r)[i]).collect::<Vec<_>>()),
            )
        })
        .collect()
}

/// Per sample: mean and 95% half-width of the paired difference
/// Tail − Head of the order-9 unusable index (0..1 scale).
fn diff_series(s: &Scale, results: &[Vec<RunResult>; 2]) -> Vec<(f64, f64, f64)> {
    let step = s.ticks as f64 / s.samples as f64 / 1e6;
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
            (
                (i + 1) as f64 * step,
                m,
                if h.is_finite() { h } else { 0.0 },
            )
        })
        .collect()
}

fn requests() -> Axis {
    Axis::linear("allocation requests (millions)")
}

fn plots(report: &mut Report, s: &Scale, runs: &Runs) {
    let scaled = |pts: Vec<(f64, f64)>| pts.into_iter().map(|(x, y)| (x, y / 1000.0)).collect();
    let series: Vec<Series> = POLICIES
        .iter()
        .zip(&runs.plain)
        .map(|(p, rs)| Series::new(name(*p), scaled(mean_at(s, rs, |r| &r.series9))))
        .collect();
    let chart = Chart {
        title: format!(
            "Order-9 unusable free space index, mean of {} seeds",
            s.seeds
        ),
        x: requests(),
        y: Axis::linear("unusable index, order 9 (0..1, lower is better)"),
    };
    report.plot("buddy-unusable9.svg", "The order-9 unusable free space index over the run, each policy averaged over the seeds: the share of free memory that cannot serve a huge page (lower is better); seed 004 reports tail placement 'slightly lower throughout'.", plot::lines(&chart, &series));
    let d = diff_series(s, &runs.plain);
    let band = |sign: f64| d.iter().map(|&(x, m, h)| (x, m + sign * h)).collect();
    let chart = Chart {
        title: format!(
            "Order-9 unusable index: TailIfMergeLikely − Head, {} paired seeds",
            s.seeds
        ),
        x: requests(),
        y: Axis::linear("difference in unusable index (below 0: tail better)"),
    };
    let series = [
        Series::new(
            "mean difference",
            d.iter().map(|&(x, m, _)| (x, m)).collect(),
        ),
        Series::faint("95% t interval, upper", band(1.0)),
        Series::faint("95% t interval, lower", band(-1.0)),
    ];
    report.plot("buddy-unusable9-diff.svg", "The paired difference of the order-9 unusable index, tail minus head on the same request stream, with its 95% interval (thin lines): where the interval lies below zero the tail placement leaves less free memory unusable for huge pages, where it straddles zero the two cannot be told apart.", plot::lines(&chart, &series));
    plot_huge(report, s, runs);
}

fn plot_huge(report: &mut Report, s: &Scale, runs: &Runs) {
    let mut series = Vec::new();
    for (mode, set, dashed) in [
        ("reclaim only", &runs.plain, false),
        ("compaction", &runs.compacted, true),
    ] {
        for (p, rs) in POLICIES.iter().zip(set) {
            let mut l = Series::new(
                format!("{}, {mode}", name(*p)),
                mean_at(s, rs, |r| &r.huge_series),
            );
            l.dashed = dashed;
            series.push(l);
        }
    }
    let chart = Chart {
        title: format!("Huge pages obtained over time, mean of {} seeds", s.seeds),
        x: requests(),
        y: Axis::linear("order-9 allocations obtained (cumulative count)"),
    };
    report.plot("buddy-huge-pages.svg", "Huge pages obtained so far, by policy, with reclaim only (solid) and with direct compaction first (dashed): the gap between solid and dashed lines is what compaction adds, the gap between colours what the placement policy changes.", plot::lines(&chart, &series));
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

/// Per-CPU lists vs the bare zone of one policy on the same streams.
#[derive(Serialize)]
struct PcpRow {
    policy: &'static str,
    from_lists_pct: MeanSd,
    zone_locks_per_1000: MeanSd,
    pages_on_lists: MeanSd,
    unusable9_bare: MeanSd,
    unusable9_pcp: MeanSd,
    huge_bare: MeanSd,
    huge_pcp: MeanSd,
}

const PCP_COLS: [Col; 8] = [
    col("policy", "policy", Fmt::Text),
    col("from_lists_pct", "% allocs from the lists", Fmt::MeanSd(2)),
    col(
        "zone_locks_per_1000",
        "zone-lock takings/1000 requests",
        Fmt::MeanSd(1),
    ),
    col("pages_on_lists", "pages on the lists", Fmt::MeanSd(0)),
    col("unusable9_bare", "unusable o9 mean: bare", Fmt::MeanSd(3)),
    col("unusable9_pcp", "with pcp", Fmt::MeanSd(3)),
    col("huge_bare", "huge pages: bare", Fmt::MeanSd(1)),
    col("huge_pcp", "with pcp", Fmt::MeanSd(1)),
];

/// Per-CPU lists vs the bare zone on the same streams (reclaim only).
fn pcp_table(s: &Scale, plain: &[Vec<RunResult>; 2], pcp: &[Vec<PcpRun>; 2]) -> Table {
    let b = zone_batchsize(s.frames);
    let hit = |r: &PcpRun| 100.0 * (1.0 - r.refills as f64 / r.list_allocs.max(1) as f64);
    let lock = |r: &PcpRun| 1000.0 * (r.refills + r.drains + r.direct) as f64 / r.requests as f64;
    let rows: Vec<PcpRow> = POLICIES
        .iter()
        .zip(plain.iter().zip(pcp))
        .map(|(p, (bare, with))| PcpRow {
            policy: name(*p),
            from_lists_pct: over(with, 1.0, hit),
            zone_locks_per_1000: over(with, 1.0, lock),
            pages_on_lists: over(with, 1.0, |r| r.pcp_pages_mean),
            unusable9_bare: over(bare, 1000.0, |r| r.unusable9_mean),
            unusable9_pcp: over(with, 1000.0, |r| r.unusable9_mean),
            huge_bare: over(bare, 1.0, |r| r.huge_ok as f64),
            huge_pcp: over(with, 1.0, |r| r.huge_ok as f64),
        })
        .collect();
    let title = format!(
        "Per-CPU page lists in front ({PCP_CPUS} CPUs, batch {b}, high {}) vs the bare zone, \
         reclaim only, mean ± sd over {} seeds",
        6 * b,
        s.seeds
    );
    Table::of(&title, &PCP_COLS, &rows)
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
