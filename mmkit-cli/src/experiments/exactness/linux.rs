//! The committed Linux captures as exactness streams: every request Linux
//! 6.12 saw (boot and test_vmalloc, 1 and 2 vCPUs;
//! `traces/linux/*.ftrace.xz`), placed by Linux itself (its recorded
//! addresses), by mmkit's exact lowest fit and best fit, and by
//! Linux's model: its free tree in Linux's shape behind its node pools
//! (`LinuxNodes`), each on its
//! own state. Each allocator frees what the trace frees, lazily, and
//! purges where Linux purged. Measured inside vmalloc's window, from the
//! live areas (a lazily freed or pooled area counts as free):
//! - **occupancy**: live bytes over the span in use (the window's start
//!   to the highest live end), averaged over every allocation;
//! - **largest / total free** below that top, and **span / live**, at the
//!   allocation where Linux's live bytes peak;
//! - **at Linux's address**: allocations placed where Linux placed them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use mmkit::nodes::{LinuxNodes, PurgeStep};
use mmkit::range::RangeAllocator;
use mmkit::request::{Policy, Request};
use mmkit::vmap::VmapAllocator;
use serde::Serialize;

use crate::render::{col, Col, Fmt, Table, Target};
use mmkit_cli::linux_trace::import;
use mmkit_cli::linux_trace::judge::answers;
use mmkit_cli::trace::{check_header, Cmd, Commands};

/// The committed captures: (name, what was traced).
pub const CAPTURES: [(&str, &str); 2] = [
    ("smp1", "Linux 6.12 boot + test_vmalloc, 1 vCPU"),
    (
        "smp2",
        "Linux 6.12 boot + test_vmalloc, 2 vCPUs (2 vmap nodes)",
    ),
];

/// The folder of the committed captures.
fn captures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/linux")
}

/// The ftrace text of capture `name`, decompressed by `xz -dc`.
///
/// # Errors
/// `xz` missing or failing, or the text not UTF-8.
pub fn capture_text(name: &str) -> Result<String, String> {
    let path = captures_dir().join(format!("{name}.ftrace.xz"));
    let out = Command::new("xz")
        .arg("-dc")
        .arg(&path)
        .output()
        .map_err(|e| format!("xz -dc {}: {e}", path.display()))?;
    if !out.status.success() {
        return Err(format!("xz -dc {}: {}", path.display(), out.status));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("{}: {e}", path.display()))
}

/// An allocator a trace drives: each call as the trace says it.
trait Placer {
    /// Places request `id`; `None`: it failed.
    fn alloc(
        &mut self,
        id: &str,
        size: u64,
        align: u64,
        window: (u64, u64),
        cpu: u32,
    ) -> Option<u64>;
    /// Frees the area at `addr` lazily.
    fn free_lazy(&mut self, addr: u64);
    /// A purge; `full` is Linux's purge after a failed attempt.
    fn purge(&mut self, full: bool);
    /// Where Linux began that purge (only Linux's node pools act on it).
    fn purge_begin(&mut self, _full: bool) {}
    /// Where Linux's purge had pooled or freed one node's lazy areas.
    fn purge_node(&mut self, _node: usize) {}
    /// A step of Linux's purge's decay and take.
    fn purge_step(&mut self, _step: PurgeStep) {}
}

/// Linux's own answers, as recorded.
struct Recorded(HashMap<String, Option<u64>>);

impl Placer for Recorded {
    fn alloc(&mut self, id: &str, _: u64, _: u64, _: (u64, u64), _: u32) -> Option<u64> {
        self.0.get(id).copied().flatten()
    }
    fn free_lazy(&mut self, _: u64) {}
    fn purge(&mut self, _: bool) {}
}

/// mmkit's exact allocator placing by one policy.
struct Exact(VmapAllocator, Policy);

impl Placer for Exact {
    fn alloc(
        &mut self,
        _: &str,
        size: u64,
        align: u64,
        (lo, hi): (u64, u64),
        _: u32,
    ) -> Option<u64> {
        let req = Request::bytes(size)?.align(align).within(lo..hi);
        self.0.allocate(req.policy(self.1)).ok()
    }
    fn free_lazy(&mut self, addr: u64) {
        let _ = self.0.free_lazy(addr);
    }
    fn purge(&mut self, _: bool) {
        self.0.purge(&mut |_, _| {});
    }
}

impl Placer for LinuxNodes {
    fn alloc(
        &mut self,
        _: &str,
        size: u64,
        align: u64,
        (lo, hi): (u64, u64),
        cpu: u32,
    ) -> Option<u64> {
        self.set_cpu(cpu as usize);
        // The trace carries the purge of a failed try: one try.
        self.alloc_once(size, align, lo, hi).ok()
    }
    fn free_lazy(&mut self, addr: u64) {
        let _ = RangeAllocator::free_lazy(self, addr);
    }
    /// Ends the purge that began, else runs a whole one.
    fn purge(&mut self, full: bool) {
        match self.purge_pending() {
            true => self.purge_end(),
            false => self.purge_nodes(full),
        };
    }
    fn purge_begin(&mut self, full: bool) {
        LinuxNodes::purge_begin(self, full);
    }
    fn purge_node(&mut self, node: usize) {
        LinuxNodes::purge_node(self, node);
    }
    fn purge_step(&mut self, step: PurgeStep) {
        LinuxNodes::purge_step(self, step);
    }
}

/// The live areas inside vmalloc's window and what is measured of them.
#[derive(Debug, Default)]
struct Measure {
    /// Live areas in the window: start to end.
    live: BTreeMap<u64, u64>,
    live_bytes: u64,
    /// Sum of live / span over the allocations, and their number.
    occupancy: (f64, u64),
    /// The gaps and the span at one allocation.
    snapshot: Option<Snapshot>,
}

/// The live areas in the window at one moment.
#[derive(Debug, Default, Clone, Copy)]
struct Snapshot {
    /// The largest gap between live areas (from the window's start).
    largest: u64,
    /// All gaps below the highest live end.
    total: u64,
    /// The window's start to the highest live end.
    span: u64,
    live: u64,
}

impl Measure {
    /// The highest live end in the window, or `vs`.
    fn top(&self, vs: u64) -> u64 {
        self.live.iter().next_back().map_or(vs, |(_, &e)| e)
    }

    fn sample(&mut self, vs: u64) {
        let span = self.top(vs) - vs;
        if span > 0 {
            self.occupancy.0 += self.live_bytes as f64 / span as f64;
            self.occupancy.1 += 1;
        }
    }

    /// Records the gaps between live areas below the top.
    fn snap(&mut self, vs: u64) {
        let (mut at, mut largest, mut total) = (vs, 0, 0);
        for (&a, &e) in &self.live {
            let gap = a.saturating_sub(at);
            (largest, total) = (largest.max(gap), total + gap);
            at = at.max(e);
        }
        self.snapshot = Some(Snapshot {
            largest,
            total,
            span: at - vs,
            live: self.live_bytes,
        });
    }
}

/// One allocator's run of one capture.
#[derive(Debug, Clone, Serialize)]
pub struct TraceRow {
    /// The capture's name.
    pub trace: &'static str,
    /// Who placed the requests.
    pub allocator: &'static str,
    /// Mean live / span over the allocations, in percent.
    pub occupancy_pct: f64,
    /// Largest over total free below the top at Linux's peak, in percent.
    pub largest_over_free_pct: f64,
    /// Span over live bytes at Linux's peak.
    pub span_over_live: f64,
    /// Allocations that failed where Linux's succeeded.
    pub failures: u64,
    /// Allocations placed at Linux's address, in percent.
    pub at_linux_pct: f64,
}

/// The table's columns.
pub const TRACE_COLS: [Col; 7] = [
    col("trace", "capture", Fmt::Text),
    col("allocator", "allocator", Fmt::Text),
    col("occupancy_pct", "occupancy (mean live / span)", Fmt::Pct(1)),
    col(
        "largest_over_free_pct",
        "largest / total free at peak",
        Fmt::Pct(1),
    ),
    col("span_over_live", "span / live at peak", Fmt::Dec(3)),
    col("failures", "failures Linux had not", Fmt::Text),
    col("at_linux_pct", "at Linux's address", Fmt::Pct(2)),
];

/// What a replay of a capture gives: the measure, the answers (ID to
/// address), and the command index where the live bytes peaked.
struct Run {
    m: Measure,
    answers: HashMap<String, Option<u64>>,
    peak_at: usize,
}

/// Replays `trace` on `p`, snapshotting the gaps after command `snap_at`
/// (its index among the commands).
fn drive(trace: &str, p: &mut dyn Placer, snap_at: usize) -> Result<Run, String> {
    let h = check_header(trace.as_bytes()).map_err(|e| e.to_string())?;
    let (vs, ve) = h.vmalloc.unwrap_or(h.space);
    let mut m = Measure::default();
    let mut ids: HashMap<String, (u64, u64)> = HashMap::new();
    let mut answers = HashMap::new();
    let (mut peak, mut peak_at) = (0, 0);
    for (i, item) in Commands::new(trace.as_bytes()).enumerate() {
        let (_, cmd) = item.map_err(|e| e.to_string())?;
        match cmd {
            Cmd::Alloc {
                id,
                size,
                align,
                range,
                cpu,
            } => {
                let window = range.unwrap_or(h.space);
                let got = p.alloc(&id, size, align, window, cpu.unwrap_or(0));
                if let Some(a) = got {
                    if a >= vs && a.saturating_add(size) <= ve {
                        m.live.insert(a, a + size);
                        m.live_bytes += size;
                    }
                    ids.insert(id.clone(), (a, size));
                    m.sample(vs);
                }
                answers.insert(id, got);
            }
            Cmd::Lazy(id) | Cmd::Free(id) => {
                if let Some((a, size)) = ids.remove(&id) {
                    p.free_lazy(a);
                    if m.live.remove(&a).is_some() {
                        m.live_bytes -= size;
                    }
                }
            }
            Cmd::Purge => p.purge(false),
            Cmd::PurgeFull => p.purge(true),
            Cmd::PurgeBegin(full) => p.purge_begin(full),
            Cmd::PurgeNode(node) => p.purge_node(node),
            Cmd::PurgeStep(step) => p.purge_step(step),
            _ => {}
        }
        if m.live_bytes > peak {
            (peak, peak_at) = (m.live_bytes, i);
        }
        if i == snap_at {
            m.snap(vs);
        }
    }
    if m.snapshot.is_none() {
        m.snap(vs);
    }
    Ok(Run {
        m,
        answers,
        peak_at,
    })
}

/// Every allocator's row for one capture (Linux's recorded choices
/// first).
///
/// # Errors
/// The capture cannot be imported or replayed.
pub fn rows_of(name: &'static str, ftrace: &str) -> Result<Vec<TraceRow>, String> {
    let t = import(ftrace.as_bytes()).map_err(|e| e.to_string())?;
    let linux = answers(&t.expected)?;
    let trace = t.trace();
    let h = check_header(trace.as_bytes()).map_err(|e| e.to_string())?;
    let (s, e) = h.space;
    let vmalloc = h.vmalloc.unwrap_or(h.space);
    let recorded = drive(&trace, &mut Recorded(linux.clone()), usize::MAX)?;
    let at = recorded.peak_at;
    let exact = |policy| -> Result<Exact, String> {
        let mut v = VmapAllocator::new(s, e).map_err(|e| e.to_string())?;
        v.set_lazy_max(u64::MAX);
        Ok(Exact(v, policy))
    };
    let cpus = h.cpus.unwrap_or(1).min(128) as usize;
    let mut nodes = LinuxNodes::new(s, e, cpus, vmalloc).map_err(|e| e.to_string())?;
    nodes.set_lazy_max(u64::MAX);
    let runs = [
        (
            "linux (recorded)",
            drive(&trace, &mut Recorded(linux.clone()), at)?,
        ),
        ("mmkit", drive(&trace, &mut exact(Policy::Lowest)?, at)?),
        (
            "mmkit-best",
            drive(&trace, &mut exact(Policy::BestFit)?, at)?,
        ),
        ("Linux tree + pools", drive(&trace, &mut nodes, at)?),
    ];
    Ok(runs
        .into_iter()
        .map(|(who, r)| row(name, who, &r, &linux))
        .collect())
}

/// The row of one run.
fn row(
    trace: &'static str,
    allocator: &'static str,
    r: &Run,
    linux: &HashMap<String, Option<u64>>,
) -> TraceRow {
    let snap = r.m.snapshot.unwrap_or_default();
    let same = linux
        .iter()
        .filter(|(id, a)| r.answers.get(*id) == Some(a))
        .count();
    let failures = linux
        .iter()
        .filter(|(id, a)| a.is_some() && r.answers.get(*id) == Some(&None))
        .count();
    TraceRow {
        trace,
        allocator,
        occupancy_pct: 100.0 * r.m.occupancy.0 / r.m.occupancy.1.max(1) as f64,
        largest_over_free_pct: match snap.total {
            0 => 100.0,
            t => 100.0 * snap.largest as f64 / t as f64,
        },
        span_over_live: snap.span as f64 / snap.live.max(1) as f64,
        failures: failures as u64,
        at_linux_pct: 100.0 * same as f64 / linux.len().max(1) as f64,
    }
}

/// The table of every capture, and the target: the Linux model
/// places every allocation where Linux did, free-running. A capture that
/// cannot be read is a note instead.
pub fn table(notes: &mut Vec<String>) -> (Table, Target) {
    let mut rows = Vec::new();
    notes.push(
        "Linux's traces: each allocator places the capture's requests on its own state, frees lazily \
         where Linux freed and purges where Linux purged; measured inside vmalloc's window from the live \
         areas (lazily freed and pooled areas count as free): occupancy is live bytes over the span from \
         the window's start to the highest live end, the mean over every allocation; the gaps and the \
         span are taken at the allocation where Linux's live bytes peak"
            .to_string(),
    );
    for (name, about) in CAPTURES {
        match capture_text(name).and_then(|t| rows_of(name, &t)) {
            Ok(r) => {
                rows.extend(r);
                notes.push(format!("{name}: {about}"));
            }
            Err(e) => notes.push(format!("{name}: not measured: {e}")),
        }
    }
    let model: Vec<&TraceRow> = rows
        .iter()
        .filter(|r| r.allocator == "Linux tree + pools")
        .collect();
    let measured = model
        .iter()
        .map(|r| format!("{} {:.2}%", r.trace, r.at_linux_pct))
        .collect::<Vec<_>>()
        .join(", ");
    let target = match model.len() {
        0 => Target::skipped(LINUX_TARGET, "no capture could be read"),
        _ => Target::new(
            LINUX_TARGET,
            measured,
            model.len() == CAPTURES.len() && model.iter().all(|r| r.at_linux_pct >= 100.0),
        ),
    };
    let title =
        "Linux's own traces: the space each placement leaves usable inside vmalloc's window";
    (Table::of(title, &TRACE_COLS, &rows), target)
}

/// The target the Linux model answers to.
const LINUX_TARGET: &str =
    "Linux's free tree and node pools (LinuxNodes) place every allocation of the captures at Linux's address (free-running)";

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-made ftrace text in Linux 6.12's format.
    const TEXT: &str = "\
# tracer: nop
#
# entries-in-buffer/entries-written: 5/5   #P:1
#
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
 swapper/0-1       [000] .....     0.100000: alloc_vmap_area: va_start: 18446683600570023936 size=8192 align=4096 vstart=0xffffc90000000000 vend=0xffffe8ffffffffff failed=0
 swapper/0-1       [000] .....     0.100001: alloc_vmap_area: va_start: 18446683600570032128 size=8192 align=4096 vstart=0xffffc90000000000 vend=0xffffe8ffffffffff failed=0
 swapper/0-1       [000] .....     0.100002: free_vmap_area_noflush: va_start=0xffffc90000000000 nr_lazy=2 nr_lazy_max=32768
 swapper/0-1       [000] .....     0.100003: purge_vmap_area_lazy: start=0xffffc90000000000 end=0xffffc90000002000 num_purged=1
 swapper/0-1       [000] .....     0.100004: alloc_vmap_area: va_start: 18446683600570040320 size=4096 align=4096 vstart=0xffffc90000000000 vend=0xffffe8ffffffffff failed=0
";

    #[test]
    fn a_hand_made_trace_measures_each_placement() {
        let rows = rows_of("hand", TEXT).unwrap();
        let who: Vec<&str> = rows.iter().map(|r| r.allocator).collect();
        assert_eq!(
            who,
            [
                "linux (recorded)",
                "mmkit",
                "mmkit-best",
                "Linux tree + pools"
            ]
        );
        // Linux put the third area above the second; the exact policies
        // reuse the freed hole at the window's start (the answers here are
        // made up: the recorded ones are taken as they are).
        let linux = &rows[0];
        assert_eq!(linux.at_linux_pct, 100.0);
        // Peak: two 2-page areas, packed.
        assert_eq!(linux.span_over_live, 1.0);
        assert_eq!(linux.largest_over_free_pct, 100.0);
        let lowest = &rows[1];
        assert!(
            (lowest.at_linux_pct - 200.0 / 3.0).abs() < 1e-9,
            "{lowest:?}"
        );
        assert_eq!(lowest.failures, 0);
        // Occupancy samples: 1, 1, then 3 live pages over a span of 4
        // (lowest fit) or 5 (Linux).
        assert!((lowest.occupancy_pct - 100.0 * (2.0 + 0.75) / 3.0).abs() < 1e-9);
        assert!((linux.occupancy_pct - 100.0 * (2.0 + 0.6) / 3.0).abs() < 1e-9);
    }
}
