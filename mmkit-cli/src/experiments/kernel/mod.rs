//! `mmkit experiments kernel` and `mmkit kernel`: the seeds' system in a
//! real kernel. `mmkit-kernel` (a bare-metal x86_64 kernel whose memory
//! management is mmkit) is built for `x86_64-unknown-none`, booted by QEMU
//! at 1, 2, 4 and 8 vCPUs, and the `ROW` lines it prints on its serial
//! port become the tables below: seed 002's map/touch/unmap loop with real
//! page tables and TLB-shootdown IPIs, `test_vmalloc`'s seven tests on
//! real mappings, and buddy pages through the per-CPU lists.
//!
//! The accelerator is KVM where the CPU has hardware virtualization (`vmx`
//! or `svm` in /proc/cpuinfo) and multi-threaded TCG otherwise. Under TCG
//! the MMU and the APIC are emulated: counts (IPIs, flushes, lock
//! acquisitions) are exact, times show the shape, not silicon costs.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde::Serialize;

pub(crate) mod qemu;

use qemu::{boot, build, num, qemu_version, scale, Accel, Boot, NotBooted};

use super::{Experiment, Options};
use crate::render::{col, Col, Fmt, Report, Table, Target};
use crate::run::ratio;

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "kernel",
    about: "seed 002 and test_vmalloc in a kernel under QEMU: real PTEs, TLB IPIs",
    run,
};

/// Seed 002: ns per map+touch+unmap of 4 pages, 1 to 8 CPUs, before and
/// after (8-core Opteron, kernel).
const SEED002: [(usize, u64, u64); 4] = [
    (1, 14700, 2900),
    (2, 33600, 3000),
    (4, 49500, 2800),
    (8, 70631, 2900),
];

#[derive(Serialize)]
struct SeedRow {
    vcpus: usize,
    old_ns: f64,
    new_ns: f64,
    ratio: Option<f64>,
    /// The vmap nodes design (NaN when the boot has no such row).
    nodes_ns: f64,
    nodes_ratio: Option<f64>,
    old_ipis_per_1e6: f64,
    new_ipis_per_1e6: f64,
    nodes_ipis_per_1e6: f64,
    old_locks_per_op: f64,
    new_locks_per_op: f64,
    seed_old_ns: Option<u64>,
    seed_new_ns: Option<u64>,
}

#[derive(Serialize)]
struct ModeRow {
    vcpus: usize,
    perf_old_ms: f64,
    perf_lazy_ms: f64,
    perf_new_ms: f64,
    perf_ratio: Option<f64>,
    perf_lazy_ratio: Option<f64>,
    stress_old_ms: f64,
    stress_lazy_ms: f64,
    stress_new_ms: f64,
    stress_ratio: Option<f64>,
    stress_lazy_ratio: Option<f64>,
    stress_old_ipis: f64,
    stress_lazy_ipis: f64,
    stress_new_ipis: f64,
    /// The vmap nodes design and new with Linux's per-call work (new-ll);
    /// NaN when the boot has no such rows.
    perf_nodes_ms: f64,
    perf_new_ll_ms: f64,
    stress_nodes_ms: f64,
    stress_new_ll_ms: f64,
    stress_nodes_ipis: f64,
    stress_new_ll_ipis: f64,
}

#[derive(Serialize)]
struct TestRow {
    test: String,
    old_ms: f64,
    lazy_ms: f64,
    new_ms: f64,
    ratio: Option<f64>,
    lazy_ratio: Option<f64>,
    old_ipis: f64,
    lazy_ipis: f64,
    new_ipis: f64,
    nodes_ms: f64,
    new_ll_ms: f64,
}

#[derive(Serialize)]
struct BootRow {
    vcpus: usize,
    first_line_ms: f64,
    wall_s: f64,
    verdict: String,
    buddy_ns_per_pair: f64,
    stale_reads: String,
}

#[derive(Serialize)]
struct StaleRow {
    vcpus: usize,
    cycles: u64,
    reads: u64,
    flushes: u64,
    stale: u64,
    seconds: f64,
    us_per_cycle: f64,
    caught: String,
    passed: bool,
}

const STALE_COLS: [Col; 8] = [
    col("vcpus", "vCPUs", Fmt::Text),
    col("cycles", "cycles", Fmt::Text),
    col("reads", "reads", Fmt::Text),
    col("flushes", "flushes", Fmt::Text),
    col("stale", "stale reads", Fmt::Text),
    col("seconds", "s", Fmt::Dec(1)),
    col("us_per_cycle", "us/cycle", Fmt::Dec(1)),
    col("caught", "caught with one flush skipped", Fmt::Text),
];

/// Cycles of the dedicated stale-TLB detector boots.
pub const STALE_CYCLES: u64 = 1_000_000;
/// The same at the quick scale.
pub const STALE_CYCLES_QUICK: u64 = 100_000;

fn stale_row(b: &Boot) -> Option<StaleRow> {
    let on = b.lines.iter().find(|l| l.starts_with("STALE flushing"))?;
    let skipped = b
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("STALE skipped_flush="));
    let n = |k: &str| field(on, k).and_then(|v| v.parse::<u64>().ok());
    let cycles = n("cycles")?;
    let ms = n("ms").unwrap_or(0) as f64;
    Some(StaleRow {
        vcpus: b.smp,
        cycles,
        reads: n("reads").unwrap_or(0),
        flushes: n("flushes").unwrap_or(0),
        stale: n("stale")?,
        seconds: ms / 1e3,
        us_per_cycle: ms * 1e3 / cycles.max(1) as f64,
        caught: skipped.map_or("-".into(), |k| {
            format!(
                "{} of {}",
                k.split_whitespace().next().unwrap_or_default(),
                field(k, "of").unwrap_or_default()
            )
        }),
        passed: b.passed,
    })
}

fn stale_targets(accel: Accel, rows: &[StaleRow], asked: u64) -> Vec<Target> {
    rows.iter()
        .map(|r| {
            Target::new(
                format!(
                    "stale-TLB detector: zero stale reads over {asked} cycles with flushing on, a skipped flush caught, at {} vCPUs ({})",
                    r.vcpus,
                    accel.name()
                ),
                format!(
                    "{} stale of {} cycles; {} caught",
                    r.stale, r.cycles, r.caught
                ),
                r.passed && r.stale == 0 && r.cycles >= asked,
            )
        })
        .collect()
}

const SEED_COLS: [Col; 13] = [
    col("vcpus", "vCPUs", Fmt::Text),
    col("old_ns", "old ns/op", Fmt::Auto),
    col("new_ns", "new ns/op", Fmt::Auto),
    col("ratio", "old/new", Fmt::Ratio),
    col("nodes_ns", "nodes ns/op", Fmt::Auto),
    col("nodes_ratio", "old/nodes", Fmt::Ratio),
    col("old_ipis_per_1e6", "old IPIs/10^6 unmaps", Fmt::Auto),
    col("new_ipis_per_1e6", "new IPIs/10^6 unmaps", Fmt::Auto),
    col("nodes_ipis_per_1e6", "nodes IPIs/10^6 unmaps", Fmt::Auto),
    col("old_locks_per_op", "old global locks/op", Fmt::Dec(3)),
    col("new_locks_per_op", "new global locks/op", Fmt::Dec(3)),
    col("seed_old_ns", "seed old ns", Fmt::Text),
    col("seed_new_ns", "seed new ns", Fmt::Text),
];

const MODE_COLS: [Col; 20] = [
    col("vcpus", "vCPUs", Fmt::Text),
    col("perf_old_ms", "perf old ms", Fmt::Auto),
    col("perf_lazy_ms", "perf old-lazy ms", Fmt::Auto),
    col("perf_new_ms", "perf new ms", Fmt::Auto),
    col("perf_ratio", "perf old/new", Fmt::Ratio),
    col("perf_lazy_ratio", "perf old-lazy/new", Fmt::Ratio),
    col("stress_old_ms", "stress old ms", Fmt::Auto),
    col("stress_lazy_ms", "stress old-lazy ms", Fmt::Auto),
    col("stress_new_ms", "stress new ms", Fmt::Auto),
    col("stress_ratio", "stress old/new", Fmt::Ratio),
    col("stress_lazy_ratio", "stress old-lazy/new", Fmt::Ratio),
    col("stress_old_ipis", "stress old IPIs", Fmt::Auto),
    col("stress_lazy_ipis", "stress old-lazy IPIs", Fmt::Auto),
    col("stress_new_ipis", "stress new IPIs", Fmt::Auto),
    col("perf_nodes_ms", "perf nodes ms", Fmt::Auto),
    col("perf_new_ll_ms", "perf new-ll ms", Fmt::Auto),
    col("stress_nodes_ms", "stress nodes ms", Fmt::Auto),
    col("stress_new_ll_ms", "stress new-ll ms", Fmt::Auto),
    col("stress_nodes_ipis", "stress nodes IPIs", Fmt::Auto),
    col("stress_new_ll_ipis", "stress new-ll IPIs", Fmt::Auto),
];

const TEST_COLS: [Col; 11] = [
    col("test", "test", Fmt::Text),
    col("old_ms", "old ms", Fmt::Auto),
    col("lazy_ms", "old-lazy ms", Fmt::Auto),
    col("new_ms", "new ms", Fmt::Auto),
    col("ratio", "old/new", Fmt::Ratio),
    col("lazy_ratio", "old-lazy/new", Fmt::Ratio),
    col("old_ipis", "old IPIs", Fmt::Auto),
    col("lazy_ipis", "old-lazy IPIs", Fmt::Auto),
    col("new_ipis", "new IPIs", Fmt::Auto),
    col("nodes_ms", "nodes ms", Fmt::Auto),
    col("new_ll_ms", "new-ll ms", Fmt::Auto),
];

const BOOT_COLS: [Col; 6] = [
    col("vcpus", "vCPUs", Fmt::Text),
    col("first_line_ms", "first serial line ms", Fmt::Auto),
    col("wall_s", "boot+tests+experiments s", Fmt::Dec(1)),
    col("verdict", "in-kernel tests", Fmt::Text),
    col(
        "buddy_ns_per_pair",
        "buddy order-0 ns/pair, all CPUs",
        Fmt::Auto,
    ),
    col("stale_reads", "stale-TLB detector", Fmt::Text),
];

fn seed_row(b: &Boot) -> Option<SeedRow> {
    let o = b.find("seed002", &[("design", "old")])?;
    let n = b.find("seed002", &[("design", "new")])?;
    let nodes = b.find("seed002", &[("design", "nodes")]);
    let nodes = |k: &str| nodes.as_ref().map_or(f64::NAN, |r| num(r, k));
    let seed = SEED002.iter().find(|s| s.0 == b.smp);
    Some(SeedRow {
        vcpus: b.smp,
        old_ns: num(&o, "ns_per_op"),
        new_ns: num(&n, "ns_per_op"),
        ratio: ratio(num(&o, "ns_per_op"), num(&n, "ns_per_op")),
        nodes_ns: nodes("ns_per_op"),
        nodes_ratio: ratio(num(&o, "ns_per_op"), nodes("ns_per_op")),
        old_ipis_per_1e6: num(&o, "ipis_per_1e6_unmaps"),
        new_ipis_per_1e6: num(&n, "ipis_per_1e6_unmaps"),
        nodes_ipis_per_1e6: nodes("ipis_per_1e6_unmaps"),
        old_locks_per_op: num(&o, "locks_per_op_x1000") / 1000.0,
        new_locks_per_op: num(&n, "locks_per_op_x1000") / 1000.0,
        seed_old_ns: seed.map(|s| s.1),
        seed_new_ns: seed.map(|s| s.2),
    })
}

fn mode_row(b: &Boot) -> Option<ModeRow> {
    let ms = |mode: &str, d: &str| {
        b.find(
            "test_vmalloc",
            &[("mode", mode), ("design", d), ("test", "total")],
        )
        .map(|r| (num(&r, "ns") / 1e6, num(&r, "ipis")))
    };
    let (po, _) = ms("performance", "old")?;
    let (pn, _) = ms("performance", "new")?;
    let (so, soi) = ms("stress", "old")?;
    let (sn, sni) = ms("stress", "new")?;
    let none = (f64::NAN, f64::NAN);
    let (pl, _) = ms("performance", "old_lazy").unwrap_or(none);
    let (sl, sli) = ms("stress", "old_lazy").unwrap_or(none);
    let (pnd, _) = ms("performance", "nodes").unwrap_or(none);
    let (pll, _) = ms("performance", "new_ll").unwrap_or(none);
    let (snd, sndi) = ms("stress", "nodes").unwrap_or(none);
    let (sll, slli) = ms("stress", "new_ll").unwrap_or(none);
    Some(ModeRow {
        vcpus: b.smp,
        perf_old_ms: po,
        perf_lazy_ms: pl,
        perf_new_ms: pn,
        perf_ratio: ratio(po, pn),
        perf_lazy_ratio: ratio(pl, pn),
        stress_old_ms: so,
        stress_lazy_ms: sl,
        stress_new_ms: sn,
        stress_ratio: ratio(so, sn),
        stress_lazy_ratio: ratio(sl, sn),
        stress_old_ipis: soi,
        stress_lazy_ipis: sli,
        stress_new_ipis: sni,
        perf_nodes_ms: pnd,
        perf_new_ll_ms: pll,
        stress_nodes_ms: snd,
        stress_new_ll_ms: sll,
        stress_nodes_ipis: sndi,
        stress_new_ll_ipis: slli,
    })
}

fn test_rows(b: &Boot) -> Vec<TestRow> {
    let rows = b.rows("test_vmalloc");
    let get = |d: &str, t: &str| {
        rows.iter().find(|r| {
            r.get("mode").map(String::as_str) == Some("performance")
                && r.get("design").map(String::as_str) == Some(d)
                && r.get("test").map(String::as_str) == Some(t)
        })
    };
    rows.iter()
        .filter(|r| {
            r.get("mode").map(String::as_str) == Some("performance")
                && r.get("design").map(String::as_str) == Some("old")
        })
        .filter_map(|r| r.get("test"))
        .filter(|t| *t != "total")
        .filter_map(|t| {
            let (o, n) = (get("old", t)?, get("new", t)?);
            let l = get("old_lazy", t);
            let lazy = |k: &str| l.map_or(f64::NAN, |l| num(l, k));
            let ms_of = |d: &str| get(d, t).map_or(f64::NAN, |r| num(r, "ns") / 1e6);
            Some(TestRow {
                test: t.clone(),
                old_ms: num(o, "ns") / 1e6,
                lazy_ms: lazy("ns") / 1e6,
                new_ms: num(n, "ns") / 1e6,
                ratio: ratio(num(o, "ns"), num(n, "ns")),
                lazy_ratio: ratio(lazy("ns"), num(n, "ns")),
                old_ipis: num(o, "ipis"),
                lazy_ipis: lazy("ipis"),
                new_ipis: num(n, "ipis"),
                nodes_ms: ms_of("nodes"),
                new_ll_ms: ms_of("new_ll"),
            })
        })
        .collect()
}

/// The value of word `k=value` in `line`.
fn field(line: &str, k: &str) -> Option<String> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
        .map(str::to_string)
}

fn boot_row(b: &Boot) -> BootRow {
    let skipped = b
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("STALE skipped_flush="));
    let on = b.lines.iter().find(|l| l.starts_with("STALE flushing"));
    let stale = match (skipped, on) {
        (Some(k), Some(l)) => format!(
            "{} of {} caught with a flush skipped; {} stale of {} cycles with flushing",
            k.split_whitespace().next().unwrap_or_default(),
            field(k, "of").unwrap_or_default(),
            field(l, "stale").unwrap_or_default(),
            field(l, "cycles").unwrap_or_default()
        ),
        _ => "-".into(),
    };
    BootRow {
        vcpus: b.smp,
        first_line_ms: b.first_line.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
        wall_s: b.wall.as_secs_f64(),
        verdict: match &b.failure {
            None => "pass".into(),
            Some(f) => format!("FAIL: {f}"),
        },
        buddy_ns_per_pair: b
            .rows("buddy_pcp")
            .first()
            .map_or(f64::NAN, |r| num(r, "ns_per_pair")),
        stale_reads: stale,
    }
}

fn targets(
    accel: Accel,
    boots: &[Boot],
    seeds: &[SeedRow],
    modes: &[ModeRow],
    ci_total: Option<Duration>,
) -> Vec<Target> {
    let a = accel.name();
    let mut t = Vec::new();
    t.push(Target::new(
        format!("every boot passes its in-kernel tests ({a})"),
        boots
            .iter()
            .map(|b| format!("{}: {}", b.smp, if b.passed { "pass" } else { "FAIL" }))
            .collect::<Vec<_>>()
            .join(", "),
        boots.iter().all(|b| b.passed),
    ));
    for s in seeds.iter().filter(|s| s.vcpus >= 2) {
        let r = s.old_ipis_per_1e6 / s.new_ipis_per_1e6.max(1.0);
        t.push(Target::new(
            format!("TLB-flush IPIs per 10^6 unmaps >= 100x fewer lazy than eager at {} vCPUs (counted; {a})", s.vcpus),
            format!("{:.0} vs {:.0} ({r:.0}x)", s.old_ipis_per_1e6, s.new_ipis_per_1e6),
            s.old_ipis_per_1e6 >= 100.0 * s.new_ipis_per_1e6 && s.old_ipis_per_1e6 > 0.0,
        ));
    }
    for s in seeds {
        t.push(Target::new(
            format!(
                "global-lock acquisitions per op: new <= 1/100 of old at {} vCPUs (counted; {a})",
                s.vcpus
            ),
            format!("{:.3} vs {:.3}", s.new_locks_per_op, s.old_locks_per_op),
            s.new_locks_per_op * 100.0 <= s.old_locks_per_op,
        ));
    }
    let at = |n: usize| seeds.iter().find(|s| s.vcpus == n);
    match (at(1), at(2)) {
        (Some(one), Some(two)) => {
            let flat = two.new_ns / one.new_ns;
            t.push(Target::new(
                format!("new design at 2 vCPUs <= 1.2x its ns at 1 ({a})"),
                format!("{flat:.2}x"),
                flat <= 1.2,
            ));
            let r = two.old_ns / two.new_ns;
            t.push(Target::new(
                format!("old design at 2 vCPUs >= 5x slower than the new (seed: 11x; {a})"),
                format!("{r:.1}x"),
                r >= 5.0,
            ));
        }
        _ => t.push(Target::skipped(
            "seed 002's shape at 1 and 2 vCPUs",
            "a boot is missing",
        )),
    }
    for m in modes {
        // Against the busy list with eager flush, and against seed 000's
        // own "before" (the busy list with lazy flush, Linux 4.20).
        let against = [
            ("old", m.perf_ratio, m.stress_ratio),
            ("old-lazy", m.perf_lazy_ratio, m.stress_lazy_ratio),
        ];
        for (old, perf, stress) in against {
            t.push(Target::new(
                format!(
                    "test_vmalloc performance mode new vs {old} >= 3.35x at {} vCPUs (seed 000; {a})",
                    m.vcpus
                ),
                format!("{:.2}x", perf.unwrap_or(f64::NAN)),
                perf.is_some_and(|r| r >= 3.35),
            ));
            if m.vcpus < 2 {
                // Stress mode is every CPU at once: one vCPU has no contention.
                continue;
            }
            t.push(Target::new(
                format!(
                    "test_vmalloc stress mode new vs {old} >= 100x at {} vCPUs (seed 000: 107x; {a})",
                    m.vcpus
                ),
                format!("{:.1}x", stress.unwrap_or(f64::NAN)),
                stress.is_some_and(|r| r >= 100.0),
            ));
        }
    }
    let first = boots.iter().filter_map(|b| b.first_line).max();
    t.push(Target::new(
        format!("boot to the first serial line < 1 s, slowest boot ({a}; from starting QEMU)"),
        first.map_or("-".into(), |d| format!("{:.0} ms", d.as_secs_f64() * 1e3)),
        first.is_some_and(|d| d < Duration::from_secs(1)),
    ));
    let ci = format!(
        "CI's in-kernel suite (--quick --tests-only at {} vCPUs) < 3 minutes ({a})",
        CI_SMP.map(|n| n.to_string()).join(" and ")
    );
    t.push(match ci_total {
        Some(d) => Target::new(
            ci,
            format!("{:.0} s", d.as_secs_f64()),
            d < Duration::from_secs(180),
        ),
        None => Target::skipped(ci, "CI's boots run with --quick or --full"),
    });
    t
}

/// The vCPU counts of CI's boots (`.ci/run`).
const CI_SMP: [usize; 2] = [2, 4];

/// What a run boots: the kernel's scale by name, the vCPU counts of the
/// boots with experiments, whether CI's boots are timed, and the dedicated
/// stale-TLB detector boots (vCPU counts, cycles).
struct Plan {
    scale: &'static str,
    smp: &'static [usize],
    ci_boots: bool,
    stale: Option<(&'static [usize], u64)>,
}

impl Plan {
    /// `--quick`: CI's smoke run; the default: the main job's minutes;
    /// `--full`: every vCPU count and the dedicated boots.
    fn of(opts: &Options) -> Plan {
        if opts.quick {
            Plan {
                scale: "quick",
                smp: &[1, 2],
                ci_boots: true,
                stale: Some((&[2], STALE_CYCLES_QUICK)),
            }
        } else if opts.full {
            Plan {
                scale: "full",
                smp: &[1, 2, 4, 8],
                ci_boots: true,
                stale: Some((&[2, 4], STALE_CYCLES)),
            }
        } else {
            Plan {
                scale: "default",
                smp: &[1, 2],
                ci_boots: false,
                stale: None,
            }
        }
    }
}

fn run(opts: &Options) -> Report {
    let mut report = Report::new("kernel");
    // Missing tools are a skip; anything else that stops a boot is a failure.
    let stop = |report: &mut Report, why: NotBooted| {
        report
            .notes
            .push(format!("kernel: not booted: {}", why.message()));
        report.targets.push(match why {
            NotBooted::Missing(m) => Target::skipped("the kernel boots and its experiments run", m),
            NotBooted::Failed(m) => {
                Target::new("the kernel boots and its experiments run", m, false)
            }
        });
    };
    let fail = |report: &mut Report, why: String| stop(report, NotBooted::Failed(why));
    let (qemu, elf) = match qemu_version().and_then(|v| build().map(|elf| (v, elf))) {
        Ok(x) => x,
        Err(e) => {
            stop(&mut report, e);
            return report;
        }
    };
    let accel = Accel::here();
    let plan = Plan::of(opts);
    let append = scale(plan.scale, opts.loops);
    let t0 = Instant::now();
    let mut boots = Vec::new();
    for &smp in plan.smp {
        match boot(&elf, smp, &append, Duration::from_secs(600), accel, None) {
            Ok(b) => boots.push(b),
            Err(e) => {
                fail(&mut report, e);
                return report;
            }
        }
    }
    let total = t0.elapsed();
    let t_ci = Instant::now();
    let ci_cmd = format!("{} tests-only", scale("quick", None));
    let ci_smp: &[usize] = if plan.ci_boots { &CI_SMP } else { &[] };
    for &smp in ci_smp {
        match boot(&elf, smp, &ci_cmd, Duration::from_secs(600), accel, None) {
            Ok(b) if b.passed => {}
            Ok(b) => {
                fail(
                    &mut report,
                    format!(
                        "CI's boot at {smp} vCPUs failed: {}",
                        b.failure.unwrap_or_default()
                    ),
                );
                return report;
            }
            Err(e) => {
                fail(&mut report, e);
                return report;
            }
        }
    }
    let ci_total = plan.ci_boots.then(|| t_ci.elapsed());
    let (stale_smp, asked) = plan.stale.unwrap_or((&[], 0));
    let mut stale_boots = Vec::new();
    for &smp in stale_smp {
        let cmd = format!("{append} tests-only stale_cycles={asked}");
        match boot(&elf, smp, &cmd, Duration::from_secs(600), accel, None) {
            Ok(b) => stale_boots.push(b),
            Err(e) => {
                fail(&mut report, e);
                return report;
            }
        }
    }
    let stale_rows: Vec<StaleRow> = stale_boots.iter().filter_map(stale_row).collect();
    let a = accel.name();
    let seeds: Vec<SeedRow> = boots.iter().filter_map(seed_row).collect();
    let modes: Vec<ModeRow> = boots.iter().filter_map(mode_row).collect();
    report.tables.push(Table::of(
        format!(
            "seed 002: ns per map+touch+unmap of 4 pages per CPU, real PTEs; nodes: the vmap nodes' vm_map_ram \
             ({a}; seed: 8-core Opteron)"
        ),
        &SEED_COLS,
        &seeds,
    ));
    report.tables.push(Table::of(
        format!(
            "test_vmalloc on real mappings: busy list + eager flush (old), busy list + lazy flush (old-lazy, seed 000's \
             before), tree + lazy flush (new), the vmap nodes (nodes) and new with Linux's per-call work (new-ll), \
             total ms ({a})"
        ),
        &MODE_COLS,
        &modes,
    ));
    if let Some(b) = boots.iter().find(|b| b.smp == 2).or(boots.first()) {
        report.tables.push(Table::of(
            format!(
                "test_vmalloc performance mode per test at {} vCPUs, 3 timed runs each after an untimed one ({a})",
                b.smp
            ),
            &TEST_COLS,
            &test_rows(b),
        ));
    }
    report.tables.push(Table::of(
        format!("boots ({a})"),
        &BOOT_COLS,
        &boots.iter().map(boot_row).collect::<Vec<_>>(),
    ));
    if plan.stale.is_some() {
        report.tables.push(Table::of(
        format!(
            "stale-TLB detector, dedicated boots (tests only, stale_cycles={asked}): a cycle is one page unmapped, \
             flushed, remapped to a new frame and read by every CPU ({a})"
        ),
        &STALE_COLS,
        &stale_rows,
    ));
    }
    report.targets = targets(accel, &boots, &seeds, &modes, ci_total);
    report
        .targets
        .extend(stale_targets(accel, &stale_rows, asked));
    if stale_rows.len() < stale_boots.len() {
        report.targets.push(Target::new(
            format!("stale-TLB detector boots report their run ({a})"),
            format!("{} of {}", stale_rows.len(), stale_boots.len()),
            false,
        ));
    }
    report.notes.push(format!(
        "accelerator: {a} ({qemu}); kernel command line (the scale): {append}; sizes are per CPU at 2 vCPUs; above 2, stress-mode \
         sizes scale by (2/vCPUs)^2, the old design's seed 002 iterations and the stale-TLB cycles by 2/vCPUs; \
         {:.0} s for every boot of the suite (the dedicated stale-TLB detector boots not counted)",
        total.as_secs_f64()
    ));
    if accel == Accel::Tcg {
        report.notes.push(
            "TCG emulates the MMU and the APIC in software and runs one host thread per vCPU: counts (IPIs, flushes, lock \
             acquisitions) are exact, times show the shape, not silicon costs. An eager flush waits for every other vCPU's \
             acknowledgement, so it costs a host scheduling delay whenever vCPUs outnumber free host cores (4 and 8 vCPUs \
             here are oversubscribed). On a machine with hardware virtualization the same command uses KVM."
                .into(),
        );
    }
    for b in boots.iter().chain(&stale_boots).filter(|b| !b.passed) {
        report.notes.push(format!(
            "{} vCPUs: {}; last lines: {}",
            b.smp,
            b.failure.as_deref().unwrap_or("failed"),
            b.lines
                .iter()
                .rev()
                .take(3)
                .rev()
                .cloned()
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    report
}

/// `mmkit kernel` options.
#[derive(clap::Args, Debug, Clone)]
pub struct BootOptions {
    /// vCPUs, 1 to 64.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub smp: u16,
    /// The CI scale (seconds).
    #[arg(long)]
    pub quick: bool,
    /// Run the in-kernel tests only, no experiments.
    #[arg(long)]
    pub tests_only: bool,
    /// Run the stale-TLB detector with flushing on for this many cycles
    /// (one page unmapped, flushed, remapped to a new frame and read by
    /// every CPU), at any vCPU count; 0 keeps the scale's count.
    #[arg(long, default_value_t = 0)]
    pub stale_cycles: u64,
    /// Kill QEMU after this many seconds.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
}

/// `mmkit kernel`'s exit status when QEMU or the target is missing (the
/// kernel was not built: a skip, in the automake convention).
pub const EXIT_MISSING: u8 = 77;

/// `mmkit kernel`: builds the kernel and boots it once, printing its
/// serial output. Exit status 0 when its tests pass; 1 when it does not
/// build, its tests fail or QEMU does not run it to the end;
/// [`EXIT_MISSING`] when QEMU or the target is missing.
///
/// # Errors
/// Writing to `out` failed.
pub fn main(opts: &BootOptions, out: &mut dyn Write) -> std::io::Result<ExitCode> {
    let ready = qemu_version().and_then(|v| build().map(|elf| (v, elf)));
    let (qemu, elf) = match ready {
        Ok(x) => x,
        Err(NotBooted::Missing(m)) => {
            eprintln!("mmkit: kernel not booted: {m}");
            return Ok(ExitCode::from(EXIT_MISSING));
        }
        Err(NotBooted::Failed(m)) => {
            eprintln!("mmkit: {m}");
            return Ok(ExitCode::from(1));
        }
    };
    let accel = Accel::here();
    let mut append = scale(if opts.quick { "quick" } else { "default" }, None);
    if opts.tests_only {
        append.push_str(" tests-only");
    }
    if opts.stale_cycles > 0 {
        append.push_str(&format!(" stale_cycles={}", opts.stale_cycles));
    }
    writeln!(
        out,
        "# {} vCPUs, {} ({qemu}), kernel command line: {append}",
        opts.smp,
        accel.name()
    )?;
    let b = match boot(
        &elf,
        usize::from(opts.smp),
        &append,
        Duration::from_secs(opts.timeout),
        accel,
        Some(out),
    ) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("mmkit: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    match &b.failure {
        None => {
            writeln!(out, "# pass ({:.1} s)", b.wall.as_secs_f64())?;
            Ok(ExitCode::SUCCESS)
        }
        Some(f) => {
            writeln!(out, "# FAIL: {f}")?;
            Ok(ExitCode::from(1))
        }
    }
}

#[cfg(test)]
mod tests;
