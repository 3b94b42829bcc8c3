//! `mmkit experiments vmalloc-real`: `test_vmalloc`'s tests (see
//! [`super::vmalloc`]) on real mappings of [`mmkit_vm::Vm`], one byte
//! written into every page of every area. Old design: each `vfree` unmaps
//! at once (one system call each, `lazy_unmap: false`); new: lazy, batched
//! by purges. Beside them, the allocator-level figures at the same scale
//! (busy-list baseline vs augmented tree, addresses only).
//!
//! Scale: a real area is two kernel VMAs (its mapping and its guard), and
//! a process may hold `vm.max_map_count` (65530) of them, so the full-fit
//! and long-busy-list tests hold far fewer live areas than the kernel's.

use indicatif::ProgressBar;
use mmkit_vm::Vm;
use serde::Serialize;

use super::real::{touch, unmap_calls, vm};
use mmkit_vmalloc::test_vmalloc::TestVmalloc;

use super::vmalloc::{
    lazy_max, new_baseline, new_vmap, on_allocator, run_mode, Mode, ModeResult, Params, Vmalloc,
    TESTS,
};
use super::{Experiment, Options};
use crate::plot::{self, Axis, Chart};
use crate::render::{col, Col, Fmt, Report, Table};
use crate::run::{cpus, ms, progress, ratio, PAGE};
use crate::stats::Spread;

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "vmalloc-real",
    about: "seed 000 on real memory: test_vmalloc with page writes, eager unmap per vfree vs lazy batched purges",
    run,
};

/// Pairs of `full_fit_alloc_test` per thread (kernel: 8192 per CPU bit).
const FULL_FIT: usize = 1024;
/// Live areas of `long_busy_list_alloc_test` per thread (kernel: 15000).
const BUSY_LIST: usize = 2000;
/// "Physical memory" of each `Vm`.
const PHYS_LIMIT: u64 = 2 << 30;
/// Runs of each stress mode in a full run (median and range reported).
const STRESS_RUNS: usize = 3;

/// `test_vmalloc`'s vmalloc on a real `Vm`: every page is written once.
struct Real {
    vm: Vm,
}

impl TestVmalloc for Real {
    fn vmalloc(&self, pages: u64, align: u64) -> Option<u64> {
        let a = self.vm.vmalloc_aligned(pages * PAGE, align).ok()?;
        // SAFETY: `a` is a live area of `pages` pages just mapped read-write
        // for us; no reference points into it.
        unsafe { touch(a, pages * PAGE, PAGE) };
        Some(a)
    }

    fn vfree(&self, a: u64) {
        self.vm.vfree(a).expect("vfree of a live area");
    }
}

impl Vmalloc for Real {
    fn unmap_calls(&self) -> u64 {
        unmap_calls(&self.vm)
    }
}

/// One mode on a real `Vm`, purged at the end (the final purge's calls
/// count); returns the result and the unmapping calls in all.
fn on_real(lazy: bool, p: Params, mode: Mode, pb: &ProgressBar) -> (ModeResult, u64) {
    let real = Real {
        vm: vm(lazy, PHYS_LIMIT, lazy_max(cpus())),
    };
    let mut r = run_mode(&real, p, mode, pb);
    real.vm.purge();
    let check = real.vm.check().map_or_else(|e| e.to_string(), |()| "check() ok".into());
    r.after = format!("{check}, {} live areas", real.vm.stats().space.live_areas);
    (r, unmap_calls(&real.vm))
}

/// Everything one mode measured.
struct Measured {
    old: (ModeResult, u64),
    new: (ModeResult, u64),
    list: ModeResult,
    tree: ModeResult,
}

fn measure(p: Params, mode: Mode, pb: &ProgressBar) -> Measured {
    let n = cpus();
    Measured {
        old: on_real(false, p, mode, pb),
        new: on_real(true, p, mode, pb),
        list: on_allocator(new_baseline(), p, mode, n, pb),
        tree: on_allocator(new_vmap(), p, mode, n, pb),
    }
}

/// One test (or the wall total) of one mode, over its runs.
#[derive(Serialize)]
struct Row {
    mode: &'static str,
    test: &'static str,
    loops: Option<u64>,
    old_ms: Spread,
    new_ms: Spread,
    ratio: Spread,
    /// Unmapping calls (performance mode only; the total row includes the
    /// final purge's).
    old_unmaps: Option<u64>,
    new_unmaps: Option<u64>,
    alloc_list_ms: Spread,
    alloc_tree_ms: Spread,
    alloc_ratio: Spread,
}

const COLS: [Col; 10] = [
    col("test", "test", Fmt::Text),
    col("loops", "loops", Fmt::Text),
    col("old_ms.median", "old ms", Fmt::Dec(1)),
    col("new_ms.median", "new ms", Fmt::Dec(1)),
    col("ratio", "old/new", Fmt::Spread(2)),
    col("old_unmaps", "old unmaps", Fmt::Text),
    col("new_unmaps", "new unmaps", Fmt::Text),
    col("alloc_list_ms.median", "alloc busy-list ms", Fmt::Dec(1)),
    col("alloc_tree_ms.median", "alloc tree ms", Fmt::Dec(1)),
    col("alloc_ratio.median", "list/tree x", Fmt::Dec(2)),
];

/// The rows of one mode measured `runs.len()` times.
fn rows(mode: &'static str, p: Params, runs: &[Measured]) -> Vec<Row> {
    let lines = TESTS.iter().enumerate().map(|(i, t)| (i, t.name(), Some(t.loops(p.loops))));
    let lines = lines.chain(std::iter::once((TESTS.len(), "total (wall, final purge)", None)));
    let t = |r: &ModeResult, i: usize| ms(r.per_test.get(i).copied().unwrap_or(r.wall));
    let of = |f: &dyn Fn(&Measured) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>());
    let perf = mode == "performance";
    let first = &runs[0];
    let calls = |r: &(ModeResult, u64), i: usize| perf.then(|| r.0.unmaps.get(i).copied().unwrap_or(r.1));
    lines
        .map(|(i, test, loops)| Row {
            mode,
            test,
            loops,
            old_ms: of(&|m| t(&m.old.0, i)),
            new_ms: of(&|m| t(&m.new.0, i)),
            ratio: of(&|m| ratio(t(&m.old.0, i), t(&m.new.0, i)).unwrap_or(f64::NAN)),
            old_unmaps: calls(&first.old, i),
            new_unmaps: calls(&first.new, i),
            alloc_list_ms: of(&|m| t(&m.list, i)),
            alloc_tree_ms: of(&|m| t(&m.tree, i)),
            alloc_ratio: of(&|m| ratio(t(&m.list, i), t(&m.tree, i)).unwrap_or(f64::NAN)),
        })
        .collect()
}

type ModeSpec = (&'static str, Mode, String);

fn modes(n: usize) -> [ModeSpec; 3] {
    [
        ("performance", Mode::Performance, "performance mode: 1 thread, tests in order, repeat 3".to_string()),
        ("stress", Mode::Stress(n), format!("stress mode: {n} threads (one per CPU), shuffled order; test rows sum the threads")),
        ("stress 2x", Mode::Stress(2 * n), format!("stress mode, 2x oversubscribed: {} threads on {n} CPUs", 2 * n)),
    ]
}

fn plot_modes(all: &[Row]) -> Result<String, Box<dyn std::error::Error>> {
    let totals: Vec<&Row> = all.iter().filter(|r| r.loops.is_none()).collect();
    let chart = Chart {
        title: "vmalloc-real: wall time of each mode on real memory".into(),
        x: Axis::linear("test_vmalloc mode"),
        y: Axis::linear("wall time, ms (median of runs)"),
    };
    let cases = totals.iter().map(|r| r.mode.to_string()).collect::<Vec<_>>();
    let bar = |f: fn(&Row) -> f64| totals.iter().map(|r| f(r)).collect();
    plot::bars(
        &chart,
        &cases,
        &[
            ("old: unmap at every vfree".into(), bar(|r| r.old_ms.median)),
            ("new: lazy, batched purges".into(), bar(|r| r.new_ms.median)),
        ],
    )
}

fn run(opts: &Options) -> Report {
    let loops = opts.loops.unwrap_or(opts.pick(100, 300, 3000));
    let p = Params { loops, full_fit: FULL_FIT, busy_list: BUSY_LIST };
    let n = cpus();
    let runs_of = |m: Mode| match m {
        Mode::Stress(_) if opts.full => STRESS_RUNS,
        _ => 1,
    };
    let per_mode = |m: Mode| TESTS.len() * runs_of(m) * match m { Mode::Performance => 1, Mode::Stress(t) => t };
    let total: usize = modes(n).iter().map(|m| 4 * per_mode(m.1)).sum();
    let pb = progress(total as u64, "vmalloc-real");
    let mut report = Report::new("vmalloc-real");
    let (mut failed, mut all) = (0, Vec::new());
    for (name, mode, title) in modes(n) {
        pb.set_message(name);
        let runs: Vec<Measured> = (0..runs_of(mode)).map(|_| measure(p, mode, &pb)).collect();
        failed += runs.iter().flat_map(|m| [&m.old.0, &m.new.0, &m.list, &m.tree]).flat_map(|r| &r.failed).sum::<u32>();
        let rows = rows(name, p, &runs);
        let title = format!("{title}; times: median of {} run(s), old/new: median (min-max)", runs.len());
        report.tables.push(Table::of(title, &COLS, &rows));
        let last = runs.last().expect("a run");
        report.notes.push(format!("after {name}: old {}; new {}", last.old.0.after, last.new.0.after));
        all.extend(rows);
    }
    pb.finish_and_clear();
    report.plot("vmalloc-real.svg", "Wall time of each test_vmalloc mode on real mappings, one unmapping system call per vfree (old) against lazy purges batched by lazy_max (new); lower is faster.", plot_modes(&all));
    report.notes.extend([
        format!("test_loop_count = {loops} (--loops N); full_fit {FULL_FIT} pairs and long_busy_list {BUSY_LIST} \
                 areas per thread (the kernel: 8192 per CPU bit and 15000; a real area costs two of the process's \
                 65530 VMAs); lazy_max = fls({n}) * 32 MiB; one byte written per page"),
        "old = Vm with lazy_unmap: false (one unmapping call per vfree), new = lazy_unmap: true (batched purges); \
         both on the augmented tree: the alloc columns are the allocator-level figures (busy list vs tree, no memory) \
         at the same scale; areas aligned as test_vmalloc asks (vmalloc_aligned); unmapping calls counted in \
         performance mode only (the threads' calls cannot be told apart)."
            .into(),
        format!("failed test runs: {failed}"),
    ]);
    report
}
