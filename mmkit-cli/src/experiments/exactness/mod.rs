//! What exact placement buys: the same request streams on mmkit's exact
//! allocator placing by lowest fit and by best fit, its two pooled front
//! ends and the peer crates of `mmkit bench` (TLSF, offset-allocator's
//! two-level bins, range-alloc's best fit), measured not for speed but for
//! the space they leave usable:
//! - **occupancy at the first failure**: from an empty space sized for `N`
//!   average areas, two allocations for each free (of a random live area)
//!   until an allocation fails: the live bytes then, over the space, the
//!   mean over three seeds (`--seeds`);
//! - **largest free / total free** after a long churn: the space sized so
//!   `N` areas fill three quarters of it, `N` allocated, then `5N`
//!   free+alloc pairs: the largest gap between live areas over all gaps
//!   (1.0: the free space is one block);
//! - **span / live**: the highest address in use after the churn over the
//!   live bytes (1.0: packed at the bottom).
//!
//! Gaps are read from the live areas' addresses, so an area an allocator
//! holds in a pool (mmkit-pooled, vmap nodes) counts as free: what a drain
//! would give back.
//!
//! A second table runs the requests of real Linux traces ([`linux`]).

pub mod linux;

use std::time::Instant;

use mmkit::nodes::{NodesConfig, StdVmapNodes};
use rand_mt::Mt64;
use serde::Serialize;

use super::{Experiment, Options};
use crate::bench::{Mmkit, MmkitBest, MmkitPooled, OffsetAlloc, PeerRange, RangeAlloc, XallocTlsf};
use crate::plot::{self, Axis, Chart};
use crate::render::{col, Col, Fmt, Report, Table, Target};
use crate::run::{ms, progress, PAGE};

/// Registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "exactness",
    about: "what exact placement buys: occupancy at the first failure, largest/total free and span, mmkit's lowest and best fit vs TLSF, offset-allocator, range-alloc",
    run,
};

/// The seed of every stream (the churn's, and the first occupancy run's).
const SEED: u64 = 0x6578_6163_7400_0000;

/// The occupancy runs by default (`--seeds`): one per seed, `SEED + i`,
/// averaged.
const OCCUPANCY_SEEDS: u64 = 3;

/// One request stream.
#[derive(Debug, Clone, Copy)]
struct Stream {
    name: &'static str,
    about: &'static str,
    /// Draws a request: (pages, alignment in pages, long-lived).
    draw: fn(&mut Mt64) -> (u64, u64, bool),
    /// Mean pages a request asks for (sizes the spaces).
    mean_pages: f64,
    /// Whether some request asks for more than page alignment.
    aligned: bool,
}

const STREAMS: [Stream; 4] = [
    Stream {
        name: "random-size",
        about: "1..100 pages (test_vmalloc random_size_alloc_test)",
        draw: |r| (rng(r, 1, 100), 1, false),
        mean_pages: 50.5,
        aligned: false,
    },
    Stream {
        name: "random-align",
        about: "1..10 pages aligned 1..1024 pages (random_size_align_alloc_test)",
        draw: |r| (rng(r, 1, 10), 1 << rng(r, 0, 10), false),
        mean_pages: 5.5,
        aligned: true,
    },
    Stream {
        name: "vmalloc-mix",
        about: "test_vmalloc's tests in turn: 1 page, 3 pages, 1..100 pages + guard, 1..10 pages aligned",
        draw: |r| match rng(r, 0, 3) {
            0 => (1, 1, false),
            1 => (3, 1, false),
            2 => (1 + rng(r, 1, 100), 1, false),
            _ => (rng(r, 1, 10), 1 << rng(r, 0, 10), false),
        },
        mean_pages: (1.0 + 3.0 + 51.5 + 5.5) / 4.0,
        aligned: true,
    },
    Stream {
        name: "long-short",
        about: "1..64 pages; a fifth long-lived (freed 50x less often), the rest short-lived",
        draw: |r| (rng(r, 1, 64), 1, rng(r, 0, 4) == 0),
        mean_pages: 32.5,
        aligned: false,
    },
];

/// One allocator's run of one stream at one scale.
#[derive(Debug, Clone, Serialize)]
struct Row {
    stream: &'static str,
    live: usize,
    allocator: &'static str,
    exact: bool,
    /// `None`: the allocator cannot honour the stream's alignments.
    occupancy_pct: Option<f64>,
    largest_over_free_pct: Option<f64>,
    span_over_live: Option<f64>,
    churn_failures: Option<usize>,
}

const COLS: [Col; 7] = [
    col("stream", "stream", Fmt::Text),
    col("live", "N", Fmt::Text),
    col("allocator", "allocator", Fmt::Text),
    col("occupancy_pct", "occupancy at 1st failure", Fmt::Pct(1)),
    col("largest_over_free_pct", "largest / total free", Fmt::Pct(1)),
    col("span_over_live", "span / live", Fmt::Dec(3)),
    col("churn_failures", "churn failures", Fmt::Text),
];

/// vmap nodes (one thread, node 0) driven as the kernel frees: lazily,
/// with the kernel's 32 MiB threshold, each purge pooling and decaying.
struct Nodes(StdVmapNodes);

impl PeerRange for Nodes {
    type Handle = (u64, u64);

    fn name() -> &'static str {
        "vmap-nodes"
    }

    fn about() -> &'static str {
        "mmkit's vmap nodes: per-node exact-size pools decayed at each purge, then lowest fit"
    }

    fn new(space_bytes: u64, _max_areas: usize) -> Self {
        let cfg = NodesConfig {
            granule: PAGE,
            ..NodesConfig::default()
        };
        Nodes(StdVmapNodes::new(0, space_bytes.max(PAGE), cfg).expect("a valid config"))
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, (u64, u64))> {
        let a = self.0.alloc(0, size, align).ok()?;
        Some((a, (a, size)))
    }

    fn free(&mut self, (a, size): (u64, u64)) -> bool {
        self.0.free_lazy_sized(0, a, size).is_ok()
    }

    fn exact_lowest_fit() -> bool {
        false
    }

    fn supports_align() -> bool {
        true
    }
}

/// A number in `lo..=hi`.
fn rng(r: &mut Mt64, lo: u64, hi: u64) -> u64 {
    lo + r.next_u64() % (hi - lo + 1)
}

/// The live areas the driver tracks, short-lived and long-lived apart:
/// (address, bytes, handle).
struct Live<H>([Vec<(u64, u64, H)>; 2]);

impl<H> Live<H> {
    fn new() -> Self {
        Live([Vec::new(), Vec::new()])
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(Vec::is_empty)
    }

    fn push(&mut self, long: bool, a: u64, bytes: u64, h: H) {
        self.0[usize::from(long)].push((a, bytes, h));
    }

    /// Every live area as `(start, end)`.
    fn ranges(&self) -> Vec<(u64, u64)> {
        self.0.iter().flatten().map(|l| (l.0, l.0 + l.1)).collect()
    }
}

/// Frees a random live area on `p` (a long-lived one 1 time in 50, or
/// when only those are left): whether it was long-lived, and its bytes.
fn free_one<P: PeerRange>(p: &mut P, live: &mut Live<P::Handle>, r: &mut Mt64) -> (bool, u64) {
    let [short, long] = &live.0;
    let pick_long = !long.is_empty() && (short.is_empty() || rng(r, 0, 49) == 0);
    let class = &mut live.0[usize::from(pick_long)];
    let i = rng(r, 0, class.len() as u64 - 1) as usize;
    let (_, bytes, h) = class.swap_remove(i);
    assert!(p.free(h), "{} refused a free of its own area", P::name());
    (pick_long, bytes)
}

/// Occupancy at the first failure, in a space of `n` mean areas, the
/// mean over `seeds` runs.
fn occupancy<P: PeerRange>(s: &Stream, n: usize, seeds: u64) -> f64 {
    let runs = (0..seeds).map(|i| occupancy_with::<P>(s, n, SEED + i));
    runs.sum::<f64>() / seeds as f64
}

/// One occupancy run, its requests drawn from `seed`.
fn occupancy_with<P: PeerRange>(s: &Stream, n: usize, seed: u64) -> f64 {
    let space = ((n as f64 * s.mean_pages).ceil() as u64).max(1) * PAGE;
    let mut p = P::new(space, 2 * n + 16);
    let mut r = Mt64::new(seed);
    let mut live: Live<P::Handle> = Live::new();
    let mut bytes = 0;
    for _ in 0..40 * n {
        if !live.is_empty() && rng(&mut r, 0, 2) == 0 {
            bytes -= free_one(&mut p, &mut live, &mut r).1;
            continue;
        }
        let (pages, align, long) = (s.draw)(&mut r);
        match p.alloc(pages * PAGE, align * PAGE) {
            Some((a, h)) => {
                live.push(long, a, pages * PAGE, h);
                bytes += pages * PAGE;
            }
            None => break,
        }
    }
    bytes as f64 / space as f64
}

/// Largest/total free and span/live after a churn at `n` live areas in a
/// space they fill three quarters of; and the allocations that failed.
fn churned<P: PeerRange>(s: &Stream, n: usize) -> (f64, f64, usize) {
    let space = ((n as f64 * s.mean_pages / 0.75).ceil() as u64).max(1) * PAGE;
    let mut p = P::new(space, 2 * n + 16);
    let mut r = Mt64::new(SEED ^ 1);
    let mut live: Live<P::Handle> = Live::new();
    let mut failed = 0;
    // A new area takes the class of the one it replaces, so the share of
    // long-lived areas stays as the set-up drew it.
    let mut alloc = |p: &mut P, live: &mut Live<P::Handle>, r: &mut Mt64, long: Option<bool>| {
        let (pages, align, l) = (s.draw)(r);
        match p.alloc(pages * PAGE, align * PAGE) {
            Some((a, h)) => live.push(long.unwrap_or(l), a, pages * PAGE, h),
            None => failed += 1,
        }
    };
    for _ in 0..n {
        alloc(&mut p, &mut live, &mut r, None);
    }
    for _ in 0..5 * n {
        let long = (!live.is_empty()).then(|| free_one(&mut p, &mut live, &mut r).0);
        alloc(&mut p, &mut live, &mut r, long);
    }
    let mut areas = live.ranges();
    areas.sort_unstable();
    let (mut at, mut largest, mut total) = (0, 0, 0);
    for &(a, e) in areas.iter().chain([(space, space)].iter()) {
        let gap = a.saturating_sub(at);
        (largest, total) = (largest.max(gap), total + gap);
        at = at.max(e);
    }
    let live_bytes: u64 = areas.iter().map(|(a, e)| e - a).sum();
    let top = areas.iter().map(|a| a.1).max().unwrap_or(0);
    (
        largest as f64 / total.max(1) as f64,
        top as f64 / live_bytes.max(1) as f64,
        failed,
    )
}

fn measure<P: PeerRange>(s: &Stream, n: usize, seeds: u64) -> Row {
    let runs = !s.aligned || P::supports_align();
    let churn = runs.then(|| churned::<P>(s, n));
    Row {
        stream: s.name,
        live: n,
        allocator: P::name(),
        exact: P::exact_lowest_fit(),
        occupancy_pct: runs.then(|| 100.0 * occupancy::<P>(s, n, seeds)),
        largest_over_free_pct: churn.map(|c| 100.0 * c.0),
        span_over_live: churn.map(|c| c.1),
        churn_failures: churn.map(|c| c.2),
    }
}

/// Every allocator, mmkit's exact one first, then its best fit.
const ALLOCATORS: [fn(&Stream, usize, u64) -> Row; 7] = [
    measure::<Mmkit>,
    measure::<MmkitBest>,
    measure::<MmkitPooled>,
    measure::<Nodes>,
    measure::<XallocTlsf>,
    measure::<OffsetAlloc>,
    measure::<RangeAlloc>,
];

/// Whether an allocator is a peer crate, not one of mmkit's.
fn is_peer(name: &str) -> bool {
    ![
        Mmkit::name(),
        MmkitBest::name(),
        MmkitPooled::name(),
        Nodes::name(),
    ]
    .contains(&name)
}

/// What [`wins`] compares: `who` against every allocator `rival` names.
struct Contest {
    who: &'static str,
    rival: fn(&str) -> bool,
}

/// mmkit's lowest fit against everything but mmkit's best fit.
const LOWEST: Contest = Contest {
    who: "mmkit",
    rival: |a| a != MmkitBest::name(),
};

/// mmkit's best fit against the peer crates.
const BEST: Contest = Contest {
    who: "mmkit-best",
    rival: is_peer,
};

/// In how many (stream, N) cells mmkit's lowest fit is at least as good
/// as every other allocator that ran but its best fit, by `metric`
/// (higher better when `higher`), within `slack`.
fn wins(rows: &[Row], metric: fn(&Row) -> Option<f64>, higher: bool, slack: f64) -> (usize, usize) {
    wins_of(&LOWEST, rows, metric, higher, slack)
}

/// [`wins`] for any [`Contest`].
fn wins_of(
    c: &Contest,
    rows: &[Row],
    metric: fn(&Row) -> Option<f64>,
    higher: bool,
    slack: f64,
) -> (usize, usize) {
    let mut cells: Vec<(&str, usize)> = rows.iter().map(|r| (r.stream, r.live)).collect();
    cells.dedup();
    let won = cells
        .iter()
        .filter(|&&(s, n)| {
            let cell = || rows.iter().filter(move |r| r.stream == s && r.live == n);
            let Some(m) = cell().find(|r| r.allocator == c.who).and_then(metric) else {
                return false;
            };
            let rivals = cell().filter(|r| r.allocator != c.who && (c.rival)(r.allocator));
            rivals.filter_map(metric).all(|o| match higher {
                true => m >= o - slack,
                false => m <= o + slack,
            })
        })
        .count();
    (won, cells.len())
}

fn verdict(rows: &[Row], seeds: u64) -> Vec<String> {
    let (o, c) = wins(rows, |r| r.occupancy_pct, true, 0.5);
    let (f, _) = wins(rows, |r| r.largest_over_free_pct, true, 0.5);
    let (s, _) = wins(rows, |r| r.span_over_live, false, 0.005);
    let (bo, _) = wins_of(&BEST, rows, |r| r.occupancy_pct, true, 0.0);
    let (bf, _) = wins_of(&BEST, rows, |r| r.largest_over_free_pct, true, 0.5);
    vec![
        format!(
            "measured: mmkit's exact lowest fit reached the highest occupancy before its first failure \
             (within 0.5 points) in {o} of {c} cells, the highest largest/total free after the churn in \
             {f} of {c}, and the lowest span in {s} of {c} (against every allocator but mmkit's best fit)"
        ),
        format!(
            "measured: mmkit's exact best fit reached an occupancy at the first failure at least the \
             best peer crate's (mean over {seeds} seeds) in {bo} of {c} cells, and the \
             highest largest/total free among them (within 0.5 points) in {bf} of {c}"
        ),
    ]
}

/// The best-fit target: in every (stream, N) cell, best fit's occupancy
/// at the first failure (mean over seeds) is at least every peer crate's.
fn best_fit_target(rows: &[Row]) -> Target {
    let (won, cells) = wins_of(&BEST, rows, |r| r.occupancy_pct, true, 0.0);
    Target::new(
        "mmkit's best fit: occupancy at the first failure >= the best peer crate's in every cell",
        format!("{won} of {cells} cells"),
        won == cells,
    )
}

fn run(opts: &Options) -> Report {
    let lives: &[usize] = opts.pick(&[1_000], &[1_000, 10_000], &[1_000, 10_000, 100_000]);
    let seeds = opts.seeds.unwrap_or(OCCUPANCY_SEEDS);
    let pb = progress(
        (lives.len() * STREAMS.len() * ALLOCATORS.len()) as u64,
        "exactness",
    );
    let t0 = Instant::now();
    let mut rows = Vec::new();
    for s in &STREAMS {
        for &n in lives {
            for m in ALLOCATORS {
                rows.push(m(s, n, seeds));
                pb.inc(1);
            }
        }
    }
    pb.finish_and_clear();
    let mut report = Report::new("exactness");
    report.tables.push(Table::of(
        "what exactness buys: the space each allocator leaves usable",
        &COLS,
        &rows,
    ));
    let missing = rows
        .iter()
        .filter(|r| r.occupancy_pct.is_none() && r.allocator != OffsetAlloc::name())
        .count();
    report.targets.push(Target::new(
        "the table has every allocator on every stream it can run",
        format!("{} rows, {missing} missing", rows.len()),
        missing == 0,
    ));
    report.targets.push(best_fit_target(&rows));
    report.notes.extend(verdict(&rows, seeds));
    let (traces, linux_target) = linux::table(&mut report.notes);
    report.tables.push(traces);
    report.targets.push(linux_target);
    let n = opts.pick(1_000, 10_000, 10_000);
    let cases: Vec<String> = STREAMS.iter().map(|s| s.name.to_string()).collect();
    let groups: Vec<(String, Vec<f64>)> = (ALLOCATORS.iter().enumerate())
        .map(|(i, _)| {
            let of = |s: &Stream| {
                rows.iter()
                    .filter(|r| r.stream == s.name && r.live == n)
                    .nth(i)
                    .and_then(|r| r.occupancy_pct)
                    .unwrap_or(0.0)
            };
            let name = rows.get(i).map_or("?", |r| r.allocator).to_string();
            (name, STREAMS.iter().map(of).collect())
        })
        .collect();
    let chart = Chart {
        title: format!("Occupancy reached before the first failed allocation, N = {n}"),
        x: Axis::linear("request stream"),
        y: Axis::linear("live bytes / space at the first failure (%)"),
    };
    report.plot(
        "exactness.svg",
        format!("Occupancy of the space when the first allocation fails, per request stream and allocator, N = {n} (higher: more of the space usable; 0: the allocator cannot honour the stream's alignments)."),
        plot::bars(&chart, &cases, &groups),
    );
    for s in &STREAMS {
        report.notes.push(format!("{}: {}", s.name, s.about));
    }
    report.notes.push(format!(
        "seed {SEED:#x}; occupancy: a space of N mean-size areas, two allocations per free until the first \
         failure, the mean over seeds {SEED:#x} to +{}; churn: a space N areas fill to 3/4, N allocated, then 5N free+alloc pairs; offset-allocator \
         cannot align above one page (no row on aligned streams); on the aligned streams one request in 11 \
         wants 1024-page alignment, and a space of N mean-size areas has about N/190 such starts, so every \
         allocator fails at a few percent: compare the allocators there, not the streams; vmap nodes free lazily (32 MiB threshold), \
         mmkit-pooled at once ({:.0} ms in all)",
        seeds - 1,
        ms(t0.elapsed())
    ));
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_allocator_fills_and_churns_a_small_space() {
        for s in &STREAMS {
            for m in ALLOCATORS {
                let r = m(s, 200, 1);
                if let Some(o) = r.occupancy_pct {
                    // Aligned streams: a few percent at most (see the notes).
                    let least = if s.aligned { 1.0 } else { 50.0 };
                    assert!(o > least && o <= 100.0, "{r:?}");
                    let f = r.largest_over_free_pct.expect("churned");
                    assert!(f > 0.0 && f <= 100.0, "{r:?}");
                    assert!(r.span_over_live.expect("churned") >= 1.0, "{r:?}");
                }
            }
        }
    }

    #[test]
    fn the_verdict_counts_cells_from_the_rows() {
        let row = |a: &'static str, o: f64| Row {
            stream: "s",
            live: 1,
            allocator: a,
            exact: false,
            occupancy_pct: Some(o),
            largest_over_free_pct: Some(o),
            span_over_live: Some(100.0 / o),
            churn_failures: Some(0),
        };
        let rows = [row("mmkit", 90.0), row("other", 80.0)];
        assert_eq!(wins(&rows, |r| r.occupancy_pct, true, 0.5), (1, 1));
        let rows = [row("mmkit", 70.0), row("other", 80.0)];
        assert_eq!(wins(&rows, |r| r.occupancy_pct, true, 0.5), (0, 1));
        assert_eq!(wins(&rows, |r| r.span_over_live, false, 0.0), (0, 1));
        // Best fit is judged against the peer crates alone, and lowest
        // fit against all but best fit.
        let rows = [
            row("mmkit", 70.0),
            row("mmkit-best", 85.0),
            row("other", 80.0),
        ];
        assert_eq!(
            wins_of(&BEST, &rows, |r| r.occupancy_pct, true, 0.0),
            (1, 1)
        );
        assert_eq!(wins(&rows, |r| r.occupancy_pct, true, 0.5), (0, 1));
        assert_eq!(best_fit_target(&rows).met, Some(true));
        let rows = [row("mmkit-best", 79.0), row("other", 80.0)];
        assert_eq!(best_fit_target(&rows).met, Some(false));
    }
}
