//! The buddy experiment's report: external fragmentation and huge pages
//! per policy (mean ± sd over the seeds), the paired differences
//! TailIfMergeLikely − Head with their 95% intervals, the compaction
//! tables, the notes, and every run's figures for `--json`.

use mmkit::buddy::Placement;
use serde::Serialize;

use super::sim::RunResult;
use super::{name, Runs, Scale, POLICIES, ZONE_START};
use crate::render::{col, Col, Fmt, Report, Table};
use crate::run::ratio;
use crate::stats::{mean, p90, paired, MeanSd};

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

pub(super) fn fragmentation_table(s: &Scale, results: &[Vec<RunResult>; 2]) -> Table {
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
                unusable9_mean: MeanSd::over(rs, 1000.0, |r| r.unusable9_mean),
                unusable9_final: MeanSd::over(rs, 1000.0, |r| r.unusable9_final),
                unusable10_mean: MeanSd::over(rs, 1000.0, |r| r.unusable10_mean),
                unusable10_final: MeanSd::over(rs, 1000.0, |r| r.unusable10_final),
                order9_would_succeed: rs.len() - frag.len(),
                frag9_final: MeanSd::of(&frag),
                free_pages_final: MeanSd::over(rs, 1.0, |r| r.free_final),
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

pub(super) fn huge_table(results: &[Vec<RunResult>; 2]) -> Table {
    let rows: Vec<HugeRow> = POLICIES
        .iter()
        .zip(results)
        .map(|(p, rs)| HugeRow {
            policy: name(*p),
            attempts: MeanSd::over(rs, 1.0, |r| r.huge_attempts as f64),
            successes: MeanSd::over(rs, 1.0, |r| r.huge_ok as f64),
            first_try: MeanSd::over(rs, 1.0, |r| r.huge_first_try as f64),
            huge_latency_us: MeanSd::over(rs, 1.0, |r| r.huge_latency_us),
            alloc_latency_ns: MeanSd::over(rs, 1.0, |r| r.alloc_latency_ns),
            failed_allocs: MeanSd::over(rs, 1.0, |r| r.alloc_failures as f64),
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

pub(super) fn paired_table(results: &[Vec<RunResult>; 2]) -> Table {
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

pub(super) fn notes(report: &mut Report, s: &Scale, results: &[Vec<RunResult>; 2]) {
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
    let avg = |i: usize, f: fn(&RunResult) -> f64| MeanSd::over(&results[i], 1.0, f).mean;
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

pub(super) fn per_seed_table(runs: &Runs) -> Table {
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
        work_p90_pages: p90(&w),
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

pub(super) fn compaction_tables(runs: &Runs) -> [Table; 2] {
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

pub(super) fn paired_compaction_table(compacted: &[Vec<RunResult>; 2]) -> Table {
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
