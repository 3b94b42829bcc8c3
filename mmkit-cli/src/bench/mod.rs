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
mod mmkit_index;
mod mmkit_pooled;
mod mmkit_sized;
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

use serde::Serialize;

use crate::render::{col, wrap, Col, Fmt, Table, MAX_WIDTH};
use crate::report::Outputs;
use crate::run::{lookup, ms, progress, ratio, Machine, PAGE};
use measure::Outcome;
use workload::{Plan, Workload};

pub use mmkit_index::MmkitIndex;
pub use mmkit_pooled::MmkitPooled;
pub use mmkit_sized::{MmkitBestSized, MmkitPooledSized, MmkitSized};
pub use mmkit_vmap::{Mmkit, MmkitBest};
pub use offset_allocator::OffsetAlloc;
pub use range_alloc::RangeAlloc;
pub use vm_allocator::VmAllocator;
pub use xalloc::XallocTlsf;

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
        entry::<MmkitBest>(),
        entry::<MmkitPooled>(),
        entry::<MmkitIndex>(),
        entry::<MmkitSized>(),
        entry::<MmkitBestSized>(),
        entry::<MmkitPooledSized>(),
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

/// Runs `mmkit bench`, printing to `out`. Exit status: 2 for a bad name
/// or a `--json` path that cannot be written (before anything runs), 1
/// when mmkit broke its contract or writing the JSON failed.
///
/// # Errors
/// Writing to `out` failed.
pub fn main(o: &BenchOptions, out: &mut dyn Write) -> io::Result<ExitCode> {
    if o.list {
        list(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let opened = choose(&o.workloads)
        .and_then(|c| Ok((c, pick(&o.allocators)?)))
        .and_then(|(c, p)| Ok((c, p, Outputs::open(o.json.as_deref(), None)?)));
    let (chosen, peers, mut outputs) = match opened {
        Ok(x) => x,
        Err(e) => {
            eprintln!("mmkit bench: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let scale = Scale::new(o);
    let machine = Machine::here();
    header(&machine, &scale, out)?;
    let runs: usize = chosen.iter().map(|w| scale.lives_for(w).count()).sum();
    let bar = progress((runs * peers.len()) as u64, "bench");
    let (mut tables, mut summary, mut broke) = (Vec::new(), Vec::new(), false);
    for w in chosen {
        let rows = bench_rows(w, &run_workload(w, &scale, &peers, &bar), scale.pairs);
        broke |= rows.iter().any(BenchRow::mmkit_broke_contract);
        summary.extend(summarize(w, &rows));
        tables.push(workload_table(w, rows));
    }
    bar.finish_and_clear();
    let sized = speed_targets(&summary);
    let summary = Table::of("mmkit against the fastest peer", &SUMMARY_COLS, &summary);
    print(&tables, &summary, out)?;
    for line in &sized {
        writeln!(out, "  * {line}")?;
    }
    let reports: Vec<&Table> = tables.iter().map(|t| &t.0).collect();
    let doc = serde_json::json!({ "machine": machine, "reports": reports, "summary": summary });
    if let Err(e) = outputs.write_json(&doc) {
        eprintln!("mmkit bench: {e}");
        return Ok(ExitCode::from(1));
    }
    if broke {
        eprintln!("mmkit bench: mmkit broke its contract (see the notes above)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn header(machine: &Machine, scale: &Scale, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "# machine: {machine}")?;
    let setup = format!(
        "space [0, 2^40), 4 KiB pages, seed {SEED:#x}; {} warm-up pairs, {} timed pairs in {} \
         segments (at most {} ms), ns/pair of the best segment; {} pairs judged",
        scale.warmup,
        scale.pairs,
        measure::SEGMENTS,
        scale.budget.as_millis(),
        scale.judge
    );
    for line in wrap(&setup, MAX_WIDTH - 2) {
        writeln!(out, "# {line}")?;
    }
    Ok(())
}

/// Prints every workload's table with its notes, then the summary.
fn print(tables: &[(Table, Vec<String>)], summary: &Table, out: &mut dyn Write) -> io::Result<()> {
    for (t, notes) in tables {
        writeln!(out, "\n{t}")?;
        for n in notes {
            writeln!(out, "  * {n}")?;
        }
    }
    writeln!(out, "\n{summary}")
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
    for n in names {
        lookup("allocator", n, &all, |e| e.name)?;
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
        .map(|n| lookup("workload", n, workload::ALL, |w| w.name))
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

/// One allocator on one workload at one live count, as printed and
/// written to `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    workload: &'static str,
    live: usize,
    allocator: &'static str,
    exact_by_design: bool,
    skipped: bool,
    ns_per_pair: Option<f64>,
    mean_ns_per_pair: Option<f64>,
    vs_mmkit: Option<f64>,
    timed_pairs: Option<usize>,
    warm_pairs: Option<usize>,
    judged: Option<usize>,
    lowest_fit_pct: Option<f64>,
    failed_with_room: Option<usize>,
    failed_full: Option<usize>,
    violation: Option<String>,
    wall_ms: Option<f64>,
    notes: String,
}

const BENCH_COLS: [Col; 7] = [
    col("live", "live", Fmt::Text),
    col("allocator", "allocator", Fmt::Text),
    col("ns_per_pair", "ns/pair", Fmt::Dec(0)),
    col("vs_mmkit", "vs mmkit", Fmt::Ratio),
    col("lowest_fit_pct", "lowest fit", Fmt::Pct(1)),
    col("timed_pairs", "timed pairs", Fmt::Text),
    col("notes", "notes", Fmt::Text),
];

/// mmkit's ns/pair at the same live count.
fn mmkit_ns(rows: &[Row], live: usize) -> Option<f64> {
    rows.iter()
        .find(|r| r.live == live && r.name == Mmkit::name())
        .and_then(|r| r.out.as_ref())
        .map(Outcome::ns_per_pair)
}

fn bench_rows(w: &Workload, rows: &[Row], planned: usize) -> Vec<BenchRow> {
    rows.iter()
        .map(|row| {
            let o = row.out.as_ref();
            let base = mmkit_ns(rows, row.live);
            BenchRow {
                workload: w.name,
                live: row.live,
                allocator: row.name,
                exact_by_design: row.exact,
                skipped: o.is_none(),
                ns_per_pair: o.map(Outcome::ns_per_pair),
                mean_ns_per_pair: o.map(Outcome::mean_ns_per_pair),
                vs_mmkit: o.and_then(|o| ratio(o.ns_per_pair(), base?)),
                timed_pairs: o.map(|o| o.pairs),
                warm_pairs: o.map(|o| o.warm_pairs),
                judged: o.map(|o| o.judged),
                lowest_fit_pct: o.map(Outcome::lowest_pct),
                failed_with_room: o.map(|o| o.failed_with_room),
                failed_full: o.map(|o| o.failed_full),
                violation: o.and_then(|o| o.violation.clone()),
                wall_ms: o.map(|o| ms(o.wall)),
                notes: o.map_or("skipped: no alignment above one page".into(), |o| {
                    notes(row, o, planned)
                }),
            }
        })
        .collect()
}

/// A workload's table, and a note per broken promise.
fn workload_table(w: &Workload, rows: Vec<BenchRow>) -> (Table, Vec<String>) {
    let notes = rows
        .iter()
        .filter_map(|r| {
            Some(format!(
                "{} at {} live: {}",
                r.allocator,
                r.live,
                r.violation.as_ref()?
            ))
        })
        .collect();
    (
        Table::of(format!("{}: {}", w.name, w.about), &BENCH_COLS, &rows),
        notes,
    )
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

/// mmkit against the fastest peer at one live count.
#[derive(Debug, Clone, Serialize)]
struct SummaryRow {
    workload: &'static str,
    live: usize,
    mmkit_ns: f64,
    fastest_peer: &'static str,
    its_ns: f64,
    mmkit_vs_fastest: Option<f64>,
    its_lowest_fit_pct: f64,
    exact_peer: Option<&'static str>,
    exact_peer_vs_mmkit: Option<f64>,
    /// mmkit's inexact mode (`mmkit-pooled`), when it ran, over the
    /// fastest peer.
    pooled_vs_fastest: Option<f64>,
    /// mmkit's free-block index alone (`mmkit-index`), when it ran, over
    /// the fastest peer: the floor of the exact design.
    index_vs_fastest: Option<f64>,
    /// mmkit freed with the size and no busy index (`mmkit-sized`), when
    /// it ran, over the fastest peer.
    sized_vs_fastest: Option<f64>,
    /// mmkit placing by best fit (`mmkit-best`), when it ran, over the
    /// fastest peer.
    best_vs_fastest: Option<f64>,
    /// Best fit freed with the size and no busy index
    /// (`mmkit-best-sized`), when it ran, over the fastest peer.
    best_sized_vs_fastest: Option<f64>,
}

const SUMMARY_COLS: [Col; 14] = [
    col("workload", "workload", Fmt::Text),
    col("live", "live", Fmt::Text),
    col("mmkit_ns", "mmkit ns", Fmt::Dec(0)),
    col("fastest_peer", "fastest peer", Fmt::Text),
    col("its_ns", "its ns", Fmt::Dec(0)),
    col("mmkit_vs_fastest", "mmkit / fastest", Fmt::Ratio),
    col("its_lowest_fit_pct", "its lowest fit", Fmt::Pct(1)),
    col("exact_peer", "exact peer", Fmt::Text),
    col("exact_peer_vs_mmkit", "it/mmkit", Fmt::Ratio),
    col("pooled_vs_fastest", "pooled / fastest", Fmt::Ratio),
    col("index_vs_fastest", "index / fastest", Fmt::Ratio),
    col("sized_vs_fastest", "sized / fastest", Fmt::Ratio),
    col("best_vs_fastest", "best / fastest", Fmt::Ratio),
    col("best_sized_vs_fastest", "best-sized / fastest", Fmt::Ratio),
];

/// Whether a row is one of mmkit's own allocators, not a peer.
fn is_mmkit(name: &str) -> bool {
    [
        Mmkit::name(),
        MmkitBest::name(),
        MmkitPooled::name(),
        MmkitIndex::name(),
        MmkitSized::name(),
        MmkitBestSized::name(),
        MmkitPooledSized::name(),
    ]
    .contains(&name)
}

/// One summary line per live count: mmkit against the fastest peer.
fn summarize(w: &Workload, rows: &[BenchRow]) -> Vec<SummaryRow> {
    let mut lives: Vec<usize> = rows.iter().map(|r| r.live).collect();
    lives.dedup();
    let fastest = |it: &mut dyn Iterator<Item = &BenchRow>| {
        it.filter(|r| r.ns_per_pair.is_some())
            .min_by(|a, b| {
                a.ns_per_pair
                    .unwrap_or(f64::INFINITY)
                    .total_cmp(&b.ns_per_pair.unwrap_or(f64::INFINITY))
            })
            .cloned()
    };
    lives
        .into_iter()
        .filter_map(|live| {
            let m = rows
                .iter()
                .find(|r| r.live == live && r.allocator == Mmkit::name())?
                .ns_per_pair?;
            // mmkit's own inexact mode and its bare index are not peers:
            // each gets a column of its own, against the same fastest peer.
            let peers = || {
                rows.iter()
                    .filter(move |r| r.live == live && !is_mmkit(r.allocator))
            };
            let any = fastest(&mut peers())?;
            let exact = fastest(&mut peers().filter(|r| r.exact_by_design));
            let its = any.ns_per_pair?;
            let own = |name: &str| {
                rows.iter()
                    .find(|r| r.live == live && r.allocator == name)
                    .and_then(|r| r.ns_per_pair)
            };
            Some(SummaryRow {
                workload: w.name,
                live,
                mmkit_ns: m,
                fastest_peer: any.allocator,
                its_ns: its,
                mmkit_vs_fastest: ratio(m, its),
                its_lowest_fit_pct: any.lowest_fit_pct.unwrap_or(f64::NAN),
                exact_peer: exact.as_ref().map(|e| e.allocator),
                exact_peer_vs_mmkit: exact.and_then(|e| ratio(e.ns_per_pair?, m)),
                pooled_vs_fastest: own(MmkitPooled::name()).and_then(|p| ratio(p, its)),
                index_vs_fastest: own(MmkitIndex::name()).and_then(|p| ratio(p, its)),
                sized_vs_fastest: own(MmkitSized::name()).and_then(|p| ratio(p, its)),
                best_vs_fastest: own(MmkitBest::name()).and_then(|p| ratio(p, its)),
                best_sized_vs_fastest: own(MmkitBestSized::name()).and_then(|p| ratio(p, its)),
            })
        })
        .collect()
}

/// The speed targets, counted from the summary: mmkit's lowest fit, its
/// best fit and their sized rows (`mmkit-sized`, `mmkit-best-sized`, which
/// take the size back in the handle as the O(1) peers do) each within
/// 1.5x of the fastest peer in at least 20 of 24 cells, at most 2x in
/// every cell (judged only on a run of all 24 cells).
fn speed_targets(rows: &[SummaryRow]) -> Vec<String> {
    let mut lines = near_targets(rows, Mmkit::name(), |r| r.mmkit_vs_fastest);
    lines.extend(near_targets(rows, MmkitBest::name(), |r| r.best_vs_fastest));
    lines.extend(near_targets(rows, MmkitSized::name(), |r| {
        r.sized_vs_fastest
    }));
    lines.extend(near_targets(rows, MmkitBestSized::name(), |r| {
        r.best_sized_vs_fastest
    }));
    lines
}

/// [`speed_targets`]' two lines for `who`, whose ratio to the fastest
/// peer `of` reads.
fn near_targets(rows: &[SummaryRow], who: &str, of: fn(&SummaryRow) -> Option<f64>) -> Vec<String> {
    let r: Vec<f64> = rows.iter().filter_map(of).collect();
    let Some(worst) = r.iter().copied().reduce(f64::max) else {
        return Vec::new();
    };
    let near = r.iter().filter(|&&x| x <= 1.5).count();
    let verdict = |met: bool| match (r.len() == 24, met) {
        (false, _) => "not evaluated (not all 24 cells ran)",
        (true, true) => "met",
        (true, false) => "NOT met",
    };
    vec![
        format!(
            "target: {who} within 1.5x of the fastest peer in >= 20 of 24 cells: {near} of {}: {}",
            r.len(),
            verdict(near >= 20)
        ),
        format!(
            "target: {who} at most 2x the fastest peer in every cell: worst {worst:.2}x: {}",
            verdict(worst <= 2.0)
        ),
    ]
}

impl BenchRow {
    /// Whether this is mmkit's row and mmkit broke a promise: a violation,
    /// or an answer that was not the lowest fit.
    pub fn mmkit_broke_contract(&self) -> bool {
        (self.allocator == Mmkit::name() || self.allocator == MmkitSized::name())
            && (self.violation.is_some() || self.lowest_fit_pct.is_some_and(|p| p != 100.0))
    }
}
