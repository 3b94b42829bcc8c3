//! The buddy experiment's plots: the order-9 unusable index over the run
//! (per policy, and the paired difference with its interval) and the huge
//! pages obtained over time.

use super::sim::RunResult;
use super::{name, Runs, Scale, POLICIES};
use crate::plot::{self, Axis, Chart, Series};
use crate::render::Report;
use crate::stats::{mean, paired};

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

pub(super) fn plots(report: &mut Report, s: &Scale, runs: &Runs) {
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
