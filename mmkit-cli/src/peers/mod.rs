//! `mmkit bench`: mmkit's range allocator against the other Rust range
//! allocators on the same workloads.
//!
//! Each peer crate sits behind one small trait, [`PeerRange`], in a file of
//! its own; the peers' versions are pinned in `mmkit-cli/Cargo.toml` (the
//! library never depends on them). Every allocator replays the same
//! operation sequence, drawn from one fixed seed ([`workload`]), and is
//! both timed and judged ([`measure`]): for each answer, was it the exact
//! lowest fit? mmkit always gives it; the O(1) allocators trade it for
//! speed.
//!
//! ```text
//!  workload::ALL ──> Plan (ops from one seed) ──> measure::run::<P>() for each P
//!                                                    │
//!                              ns/pair, % lowest fit, failures, violations
//! ```

mod measure;
mod mmkit_vmap;
mod offset_allocator;
mod range_alloc;
mod vm_allocator;
pub mod workload;
mod xalloc;

#[cfg(test)]
mod tests;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;

use crate::experiments::{machine, ms, progress};
use crate::report::{ratio, Report, Table};
use measure::Outcome;
use workload::{Plan, Workload};

pub use mmkit_vmap::Mmkit;
pub use offset_allocator::OffsetAlloc;
pub use range_alloc::RangeAlloc;
pub use vm_allocator::VmAllocator;
pub use xalloc::XallocTlsf;

/// The page size: every request is a whole number of pages.
pub const PAGE: u64 = 4096;

/// The managed space `[0, SPACE)`: 1 TiB, within reach of a 32-bit count
/// of pages (offset-allocator) and far above what 10^5 live areas use.
pub const SPACE: u64 = 1 << 40;

/// The seed every operation sequence is drawn from.
pub const SEED: u64 = 0x6d6d_6b69_7400_0000;

/// One range allocator, as the bench drives it.
///
/// Requests are valid (`size > 0`, `align` a power of two) and every
/// handle given back to [`free`](PeerRange::free) came from this
/// allocator's own [`alloc`](PeerRange::alloc) and is freed once: adapters
/// keep the peer's own handle type so that no peer pays for a lookup the
/// bench could do for it.
pub trait PeerRange: Sized {
    /// What the allocator needs back to free an area.
    type Handle;
    /// Short name for the tables.
    fn name() -> &'static str;
    /// One line on its algorithm and cost.
    fn about() -> &'static str;
    /// An allocator over `[0, space_bytes)` sized for `max_areas` live ones.
    fn new(space_bytes: u64, max_areas: usize) -> Self;
    /// Allocates `size` bytes aligned to `align`: the address and a handle,
    /// or `None` if it could not.
    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, Self::Handle)>;
    /// Frees an area; `false` if the peer refused.
    fn free(&mut self, h: Self::Handle) -> bool;
    /// Whether every answer is the lowest fit (docs/design.md, "Range allocator").
    fn exact_lowest_fit() -> bool;
    /// Whether it honours alignments above one page.
    fn supports_align() -> bool;
    /// Allocates exactly `[addr, addr + size)`, for a fast set-up of exact
    /// allocators at addresses known to be their own answers.
    fn place(&mut self, _addr: u64, _size: u64) -> Option<Self::Handle> {
        None
    }
}

/// Whether a peer crate would accept the request without asserting.
pub fn sane(size: u64, align: u64) -> bool {
    size != 0 && size <= SPACE && align.is_power_of_two() && align <= SPACE
}

/// `mmkit bench` options.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BenchOptions {
    /// Workloads to run (see `--list`); none runs them all.
    pub workloads: Vec<String>,
    /// A tiny scale for CI: 10^3 live areas, a few thousand pairs.
    #[arg(long)]
    pub quick: bool,
    /// Live-area counts, comma separated, each 1 to 10^7 (default
    /// 1000,10000,100000).
    #[arg(long, value_delimiter = ',', value_parser = count(MAX_LIVE))]
    pub live: Vec<usize>,
    /// Timed free+alloc pairs per allocator, 1 to 10^7 (default 200000).
    #[arg(long, value_parser = count(MAX_PAIRS))]
    pub pairs: Option<usize>,
    /// Milliseconds one allocator may spend timed per workload and live
    /// count; slower allocators time fewer pairs (default 250).
    #[arg(long)]
    pub budget_ms: Option<u64>,
    /// Allocators to run, comma separated (see `--list`); mmkit always
    /// runs, as the ratios divide by it.
    #[arg(long, value_delimiter = ',')]
    pub allocators: Vec<String>,
    /// Write every row, with the machine, to this JSON file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// List the workloads and the allocators, then exit.
    #[arg(long)]
    pub list: bool,
}

/// The most live areas `--live` accepts: the plan and every allocator
/// hold them up front.
const MAX_LIVE: u64 = 10_000_000;

/// The most pairs `--pairs` accepts: the plan holds every operation up
/// front (about 50 bytes a pair), so timing never pays for generating them.
const MAX_PAIRS: u64 = 10_000_000;

/// Parses a count in `1..=max`; clap refuses anything else with exit 2.
fn count(max: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(1..=max)
}

/// The scale one run uses, from the options.
struct Scale {
    lives: Vec<usize>,
    warmup: usize,
    pairs: usize,
    judge: usize,
    budget: Duration,
    /// Live counts given with `--live` run on every workload; the default
    /// ones stop at each workload's `max_live`.
    explicit: bool,
}

impl Scale {
    fn new(o: &BenchOptions) -> Scale {
        let (lives, pairs, budget) = if o.quick {
            (vec![1_000], 5_000, 20)
        } else {
            (vec![1_000, 10_000, 100_000], 200_000, 250)
        };
        let pairs = o.pairs.unwrap_or(pairs);
        Scale {
            lives: if o.live.is_empty() {
                lives
            } else {
                o.live.clone()
            },
            warmup: pairs / 10,
            pairs,
            judge: pairs.min(20_000),
            budget: Duration::from_millis(o.budget_ms.unwrap_or(budget)),
            explicit: !o.live.is_empty(),
        }
    }
}

impl Scale {
    /// The live counts `w` runs at.
    fn lives_for<'a>(&'a self, w: &'a Workload) -> impl Iterator<Item = usize> + 'a {
        self.lives
            .iter()
            .copied()
            .filter(move |&n| self.explicit || n <= w.max_live)
    }
}

/// One allocator as the registry holds it: its facts and its run.
#[derive(Debug)]
pub struct Entry {
    /// [`PeerRange::name`].
    pub name: &'static str,
    /// [`PeerRange::about`].
    pub about: &'static str,
    /// [`PeerRange::exact_lowest_fit`].
    pub exact: bool,
    /// [`PeerRange::supports_align`].
    pub aligns: bool,
    run: fn(&Plan, Duration, usize) -> Outcome,
}

fn entry<P: PeerRange>() -> Entry {
    Entry {
        name: P::name(),
        about: P::about(),
        exact: P::exact_lowest_fit(),
        aligns: P::supports_align(),
        run: measure::run::<P>,
    }
}

/// Every allocator, mmkit first (the ratios divide by it).
pub fn allocators() -> Vec<Entry> {
    vec![
        entry::<Mmkit>(),
        entry::<VmAllocator>(),
        entry::<RangeAlloc>(),
        entry::<OffsetAlloc>(),
        entry::<XallocTlsf>(),
    ]
}

/// One row: one allocator on one workload at one live count.
struct Row {
    live: usize,
    name: &'static str,
    exact: bool,
    /// `None` when the allocator cannot run the workload.
    out: Option<Outcome>,
}

/// Runs `mmkit bench`, printing to `out`.
///
/// # Errors
/// Writing to `out` failed.
pub fn main(o: &BenchOptions, out: &mut dyn Write) -> io::Result<ExitCode> {
    if o.list {
        list(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (chosen, peers) = match choose(&o.workloads).and_then(|c| Ok((c, pick(&o.allocators)?))) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("mmkit bench: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let scale = Scale::new(o);
    header(&scale, out)?;
    let runs: usize = chosen.iter().map(|w| scale.lives_for(w).count()).sum();
    let bar = progress((runs * peers.len()) as u64, "bench");
    let mut summary = Table::new(
        "mmkit against the fastest peer",
        &[
            "workload",
            "live",
            "mmkit ns",
            "fastest peer",
            "its ns",
            "mmkit/fastest",
            "its lowest fit",
            "exact peer",
            "it/mmkit",
        ],
    );
    let mut reports = Vec::new();
    for w in chosen {
        let rows = run_workload(w, &scale, &peers, &bar);
        summarize(w, &rows, &mut summary);
        reports.push(report(w, &rows, scale.pairs));
    }
    bar.finish_and_clear();
    finish(o, &reports, &summary, out)
}

fn header(scale: &Scale, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "# machine: {}", machine())?;
    writeln!(
        out,
        "# space [0, 2^40), 4 KiB pages, seed {SEED:#x}; {} warm-up pairs, {} timed pairs in {} \
         segments (at most {} ms), ns/pair of the best segment; {} pairs judged",
        scale.warmup,
        scale.pairs,
        measure::SEGMENTS,
        scale.budget.as_millis(),
        scale.judge
    )
}

/// Prints the tables, writes the JSON, and fails if mmkit broke a promise.
fn finish(
    o: &BenchOptions,
    reports: &[Report],
    summary: &Table,
    out: &mut dyn Write,
) -> io::Result<ExitCode> {
    for r in reports {
        writeln!(out, "\n{}", r.tables[0])?;
        for n in &r.notes {
            writeln!(out, "  * {n}")?;
        }
    }
    writeln!(out, "\n{summary}")?;
    if let Err(e) = write_json(o, reports, summary) {
        eprintln!("mmkit bench: {e}");
        return Ok(ExitCode::from(1));
    }
    if broken(reports) {
        eprintln!("mmkit bench: mmkit broke its contract (see the notes above)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn list(out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "workloads:")?;
    for w in workload::ALL {
        writeln!(out, "  {:<14} {}", w.name, w.about)?;
    }
    writeln!(out, "allocators:")?;
    for e in allocators() {
        writeln!(out, "  {:<18} {}", e.name, e.about)?;
    }
    Ok(())
}

/// The allocators named (mmkit first, always), or all.
fn pick(names: &[String]) -> Result<Vec<Entry>, String> {
    let all = allocators();
    if let Some(n) = names.iter().find(|n| !all.iter().any(|e| e.name == *n)) {
        let known: Vec<_> = all.iter().map(|e| e.name).collect();
        return Err(format!(
            "unknown allocator {n:?}; known: {}",
            known.join(", ")
        ));
    }
    Ok(all
        .into_iter()
        .enumerate()
        .filter(|(i, e)| *i == 0 || names.is_empty() || names.iter().any(|n| n == e.name))
        .map(|(_, e)| e)
        .collect())
}

fn choose(names: &[String]) -> Result<Vec<&'static Workload>, String> {
    if names.is_empty() {
        return Ok(workload::ALL.iter().collect());
    }
    names
        .iter()
        .map(|n| {
            workload::ALL.iter().find(|w| w.name == n).ok_or_else(|| {
                let known: Vec<_> = workload::ALL.iter().map(|w| w.name).collect();
                format!("unknown workload {n:?}; known: {}", known.join(", "))
            })
        })
        .collect()
}

fn run_workload(
    w: &Workload,
    s: &Scale,
    peers: &[Entry],
    bar: &indicatif::ProgressBar,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for live in s.lives_for(w) {
        let plan = Plan::new(w, live, s.warmup, s.pairs, SEED);
        for p in peers {
            bar.set_message(format!("{} {} {}", w.name, live, p.name));
            let runs = p.aligns || !w.aligned();
            let out = runs.then(|| (p.run)(&plan, s.budget, s.judge));
            rows.push(Row {
                live,
                name: p.name,
                exact: p.exact,
                out,
            });
            bar.inc(1);
        }
    }
    rows
}

/// mmkit's row at the same live count (the first row of each group).
fn mmkit_ns(rows: &[Row], live: usize) -> Option<f64> {
    rows.iter()
        .find(|r| r.live == live && r.name == Mmkit::name())
        .and_then(|r| r.out.as_ref())
        .map(Outcome::ns_per_pair)
}

fn report(w: &Workload, rows: &[Row], planned: usize) -> Report {
    let mut t = Table::new(
        format!("{}: {}", w.name, w.about),
        &[
            "live",
            "allocator",
            "ns/pair",
            "vs mmkit",
            "lowest fit",
            "timed pairs",
            "notes",
        ],
    );
    let mut r = Report {
        name: w.name.into(),
        ..Report::default()
    };
    for row in rows {
        let base = mmkit_ns(rows, row.live);
        t.row(cells(row, base, planned));
        r.rows.push(json_row(w, row, base));
        if let Some(v) = row.out.as_ref().and_then(|o| o.violation.as_ref()) {
            r.notes
                .push(format!("{} at {} live: {v}", row.name, row.live));
        }
    }
    r.tables.push(t);
    r
}

fn cells(row: &Row, base: Option<f64>, planned: usize) -> Vec<String> {
    let Some(o) = &row.out else {
        let note = "skipped: no alignment above one page".to_string();
        let dash = || "-".to_string();
        return vec![
            row.live.to_string(),
            row.name.into(),
            dash(),
            dash(),
            dash(),
            dash(),
            note,
        ];
    };
    let ns = o.ns_per_pair();
    vec![
        row.live.to_string(),
        row.name.into(),
        format!("{ns:.0}"),
        base.map_or("-".into(), |b| ratio(ns, b)),
        format!("{:.1}%", o.lowest_pct()),
        o.pairs.to_string(),
        notes(row, o, planned),
    ]
}

fn notes(row: &Row, o: &Outcome, planned: usize) -> String {
    let mut n = Vec::new();
    if row.exact {
        n.push("exact".to_string());
    }
    if o.pairs < planned {
        n.push("slow: budget cut the timed pairs".into());
    }
    if o.failed_with_room > 0 {
        n.push(format!("{} failed with room", o.failed_with_room));
    }
    if o.failed_full > 0 {
        n.push(format!("{} failed, full", o.failed_full));
    }
    if o.violation.is_some() {
        n.push("VIOLATION".into());
    }
    n.join(", ")
}

fn json_row(w: &Workload, row: &Row, base: Option<f64>) -> serde_json::Value {
    let o = row.out.as_ref();
    json!({
        "workload": w.name,
        "live": row.live,
        "allocator": row.name,
        "exact_by_design": row.exact,
        "skipped": o.is_none(),
        "ns_per_pair": o.map(Outcome::ns_per_pair),
        "mean_ns_per_pair": o.map(Outcome::mean_ns_per_pair),
        "vs_mmkit": o.and_then(|o| base.map(|b| o.ns_per_pair() / b)),
        "timed_pairs": o.map(|o| o.pairs),
        "warm_pairs": o.map(|o| o.warm_pairs),
        "judged": o.map(|o| o.judged),
        "lowest_fit_pct": o.map(Outcome::lowest_pct),
        "failed_with_room": o.map(|o| o.failed_with_room),
        "failed_full": o.map(|o| o.failed_full),
        "violation": o.and_then(|o| o.violation.clone()),
        "wall_ms": o.map(|o| ms(o.wall)),
    })
}

/// The row with the fewest ns/pair.
fn fastest<'a>(
    rows: impl Iterator<Item = (&'a Row, &'a Outcome)>,
) -> Option<(&'a Row, &'a Outcome)> {
    rows.min_by(|a, b| a.1.ns_per_pair().total_cmp(&b.1.ns_per_pair()))
}

/// Adds one summary line per live count: mmkit against the fastest peer.
fn summarize(w: &Workload, rows: &[Row], t: &mut Table) {
    let mut lives: Vec<usize> = rows.iter().map(|r| r.live).collect();
    lives.dedup();
    for live in lives {
        let Some(m) = mmkit_ns(rows, live) else {
            continue;
        };
        let peers = || {
            rows.iter()
                .filter(move |r| r.live == live && r.name != Mmkit::name())
                .filter_map(|r| r.out.as_ref().map(|o| (r, o)))
        };
        let Some((any, o)) = fastest(peers()) else {
            continue;
        };
        let exact = fastest(peers().filter(|(r, _)| r.exact));
        t.row(vec![
            w.name.into(),
            live.to_string(),
            format!("{m:.0}"),
            any.name.into(),
            format!("{:.0}", o.ns_per_pair()),
            ratio(m, o.ns_per_pair()),
            format!("{:.1}%", o.lowest_pct()),
            exact.map_or("-".into(), |(r, _)| r.name.to_string()),
            exact.map_or("-".into(), |(_, e)| ratio(e.ns_per_pair(), m)),
        ]);
    }
}

/// Whether mmkit itself broke a promise: a violation, or an answer that
/// was not the lowest fit.
fn broken(reports: &[Report]) -> bool {
    reports.iter().flat_map(|r| &r.rows).any(|row| {
        row["allocator"] == Mmkit::name()
            && (!row["violation"].is_null() || row["lowest_fit_pct"].as_f64() != Some(100.0))
    })
}

fn write_json(o: &BenchOptions, reports: &[Report], summary: &Table) -> std::io::Result<()> {
    let Some(path) = &o.json else { return Ok(()) };
    let doc = json!({ "machine": machine(), "reports": reports, "summary": summary });
    std::fs::write(path, serde_json::to_string_pretty(&doc)?)
}
