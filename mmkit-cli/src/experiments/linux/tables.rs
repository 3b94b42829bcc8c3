//! The tables and targets of `mmkit experiments linux`: medians of every
//! boot at one vCPU count, mmkit-kernel's designs beside Linux.

use serde::Serialize;

use super::{Measured, TESTS};
use crate::render::{col, Col, Fmt, Target};
use crate::run::ratio;
use crate::stats::Spread;

/// Every boot of one vCPU count, both systems.
#[derive(Debug, Default)]
pub(super) struct AtCpus {
    pub(super) vcpus: usize,
    pub(super) old: Vec<Measured>,
    pub(super) lazy: Vec<Measured>,
    pub(super) new: Vec<Measured>,
    pub(super) nodes: Vec<Measured>,
    /// The tree with Linux's per-call work (like for like).
    pub(super) new_ll: Vec<Measured>,
    pub(super) linux: Vec<Measured>,
    /// mmkit-kernel's shootdown timings of each boot, ns: [`IPI_CASES`]
    /// with the targets idle, then busy.
    pub(super) ipi: Vec<[f64; 8]>,
    pub(super) boots: Vec<BootRow>,
}

/// The `what=` of mmkit-kernel's `ROW ipi` lines, in a row's order.
pub(super) const IPI_CASES: [&str; 4] = [
    "round_trip_one",
    "round_trip_all",
    "flush_1_page",
    "flush_64_pages",
];

/// mmkit-kernel's shootdown: send to acknowledgement, and whole flushes.
#[derive(Serialize)]
pub(super) struct IpiRow {
    pub(super) vcpus: usize,
    pub(super) targets: &'static str,
    pub(super) round_trip_one_ns: Spread,
    pub(super) round_trip_all_ns: Spread,
    pub(super) flush_1_page_ns: Spread,
    pub(super) flush_64_pages_ns: Spread,
}

pub(super) const IPI_COLS: [Col; 6] = [
    col("vcpus", "vCPUs", Fmt::Text),
    col("targets", "targets", Fmt::Text),
    col(
        "round_trip_one_ns",
        "IPI round trip, one target ns",
        Fmt::Spread(0),
    ),
    col(
        "round_trip_all_ns",
        "IPI round trip, all targets ns",
        Fmt::Spread(0),
    ),
    col("flush_1_page_ns", "flush of 1 page ns", Fmt::Spread(0)),
    col("flush_64_pages_ns", "flush of 64 pages ns", Fmt::Spread(0)),
];

/// The idle and the busy row of `a` (none at one vCPU: no target).
pub(super) fn ipi_rows(a: &AtCpus) -> Vec<IpiRow> {
    if a.vcpus < 2 {
        return Vec::new();
    }
    [(0, "idle (hlt)"), (4, "busy (spinning)")]
        .into_iter()
        .map(|(at, targets)| {
            let s = |k: usize| {
                Spread::of(
                    &(a.ipi.iter())
                        .map(|b| b[at + k])
                        .filter(|x| x.is_finite())
                        .collect::<Vec<_>>(),
                )
            };
            IpiRow {
                vcpus: a.vcpus,
                targets,
                round_trip_one_ns: s(0),
                round_trip_all_ns: s(1),
                flush_1_page_ns: s(2),
                flush_64_pages_ns: s(3),
            }
        })
        .collect()
}

fn spread(runs: &[Measured], f: impl Fn(&Measured) -> f64) -> Spread {
    Spread::of(
        &runs
            .iter()
            .map(f)
            .filter(|x| x.is_finite())
            .collect::<Vec<_>>(),
    )
}

#[derive(Serialize)]
pub(super) struct ModeRow {
    pub(super) vcpus: usize,
    pub(super) old_ms: Spread,
    pub(super) lazy_ms: Spread,
    pub(super) new_ms: Spread,
    pub(super) nodes_ms: Spread,
    pub(super) new_ll_ms: Spread,
    pub(super) linux_ms: Spread,
    pub(super) linux_per_new: Option<f64>,
    pub(super) linux_per_nodes: Option<f64>,
    pub(super) linux_per_new_ll: Option<f64>,
    pub(super) new_ipis: Spread,
    pub(super) nodes_ipis: Spread,
    pub(super) linux_ipis: Spread,
}

#[derive(Serialize)]
pub(super) struct MapRamRow {
    pub(super) vcpus: usize,
    pub(super) old_ns: Spread,
    pub(super) new_ns: Spread,
    pub(super) nodes_ns: Spread,
    pub(super) linux_ns: Spread,
    pub(super) linux_per_new: Option<f64>,
    pub(super) linux_per_nodes: Option<f64>,
    pub(super) new_ipis_per_1e6: Spread,
    pub(super) nodes_ipis_per_1e6: Spread,
    pub(super) linux_ipis_per_1e6: Spread,
}

#[derive(Serialize)]
pub(super) struct TestRow {
    pub(super) vcpus: usize,
    pub(super) test: &'static str,
    pub(super) new_ms: Spread,
    pub(super) nodes_ms: Spread,
    pub(super) new_ll_ms: Spread,
    pub(super) linux_ms: Spread,
    pub(super) linux_per_new: Option<f64>,
    pub(super) linux_per_nodes: Option<f64>,
    pub(super) linux_per_new_ll: Option<f64>,
}

#[derive(Serialize, Debug)]
pub(super) struct BootRow {
    pub(super) vcpus: usize,
    pub(super) system: &'static str,
    pub(super) boot: usize,
    pub(super) wall_s: f64,
    pub(super) verdict: String,
}

/// Linux / new, lean.
const PER_NEW: Col = col("linux_per_new", "Linux/new (lean)", Fmt::Ratio);
/// Linux / nodes, lean.
const PER_NODES: Col = col("linux_per_nodes", "Linux/nodes (lean)", Fmt::Ratio);
/// Linux / new-ll: like for like.
const PER_NEW_LL: Col = col(
    "linux_per_new_ll",
    "Linux/new-ll (like for like)",
    Fmt::Ratio,
);

/// Performance mode: total ms of the designs and Linux.
pub(super) const PERF_COLS: [Col; 10] = [
    col("vcpus", "vCPUs", Fmt::Text),
    col("old_ms", "mmkit old ms", Fmt::Spread(1)),
    col("lazy_ms", "mmkit old-lazy ms", Fmt::Spread(1)),
    col("new_ms", "mmkit new ms", Fmt::Spread(1)),
    col("nodes_ms", "mmkit nodes ms", Fmt::Spread(1)),
    col("new_ll_ms", "mmkit new-ll ms", Fmt::Spread(1)),
    col("linux_ms", "Linux ms", Fmt::Spread(1)),
    PER_NEW,
    PER_NODES,
    PER_NEW_LL,
];

/// Stress mode: the same with the TLB IPIs (whole ms: they run longer).
pub(super) const STRESS_COLS: [Col; 13] = [
    col("vcpus", "vCPUs", Fmt::Text),
    col("old_ms", "mmkit old ms", Fmt::Spread(0)),
    col("lazy_ms", "mmkit old-lazy ms", Fmt::Spread(0)),
    col("new_ms", "mmkit new ms", Fmt::Spread(0)),
    col("nodes_ms", "mmkit nodes ms", Fmt::Spread(0)),
    col("new_ll_ms", "mmkit new-ll ms", Fmt::Spread(0)),
    col("linux_ms", "Linux ms", Fmt::Spread(0)),
    PER_NEW,
    PER_NODES,
    PER_NEW_LL,
    col("new_ipis", "new IPIs", Fmt::Spread(0)),
    col("nodes_ipis", "nodes IPIs", Fmt::Spread(0)),
    col("linux_ipis", "Linux IPIs", Fmt::Spread(0)),
];

/// The vm_map_ram loop (the old design's figure is in the JSON and in
/// `mmkit experiments kernel`: 10^3-10^4 times slower, it would not fit).
pub(super) const MAP_RAM_COLS: [Col; 9] = [
    col("vcpus", "vCPUs", Fmt::Text),
    col("new_ns", "mmkit new ns/op", Fmt::Spread(0)),
    col("nodes_ns", "mmkit nodes ns/op", Fmt::Spread(0)),
    col("linux_ns", "Linux ns/op", Fmt::Spread(0)),
    col("linux_per_new", "Linux/new", Fmt::Ratio),
    col("linux_per_nodes", "Linux/nodes", Fmt::Ratio),
    col("new_ipis_per_1e6", "new IPIs/10^6 unmaps", Fmt::Spread(0)),
    col(
        "nodes_ipis_per_1e6",
        "nodes IPIs/10^6 unmaps",
        Fmt::Spread(0),
    ),
    col(
        "linux_ipis_per_1e6",
        "Linux IPIs/10^6 unmaps",
        Fmt::Spread(0),
    ),
];

pub(super) const TEST_COLS: [Col; 9] = [
    col("vcpus", "vCPUs", Fmt::Text),
    col("test", "test", Fmt::Text),
    col("new_ms", "mmkit new ms", Fmt::Spread(2)),
    col("nodes_ms", "mmkit nodes ms", Fmt::Spread(2)),
    col("new_ll_ms", "mmkit new-ll ms", Fmt::Spread(2)),
    col("linux_ms", "Linux ms", Fmt::Spread(2)),
    PER_NEW,
    PER_NODES,
    PER_NEW_LL,
];

pub(super) const BOOT_COLS: [Col; 5] = [
    col("vcpus", "vCPUs", Fmt::Text),
    col("system", "system", Fmt::Text),
    col("boot", "boot", Fmt::Text),
    col("wall_s", "s", Fmt::Dec(1)),
    col("verdict", "verdict", Fmt::Text),
];

/// Linux / mmkit new of two medians.
fn per(linux: &Spread, new: &Spread) -> Option<f64> {
    ratio(linux.median, new.median)
}

pub(super) fn mode_row(
    a: &AtCpus,
    ms: fn(&Measured) -> f64,
    ipis: fn(&Measured) -> f64,
) -> ModeRow {
    let (new_ms, nodes_ms) = (spread(&a.new, ms), spread(&a.nodes, ms));
    let (new_ll_ms, linux_ms) = (spread(&a.new_ll, ms), spread(&a.linux, ms));
    ModeRow {
        vcpus: a.vcpus,
        old_ms: spread(&a.old, ms),
        lazy_ms: spread(&a.lazy, ms),
        linux_per_new: per(&linux_ms, &new_ms),
        linux_per_nodes: per(&linux_ms, &nodes_ms),
        linux_per_new_ll: per(&linux_ms, &new_ll_ms),
        new_ms,
        nodes_ms,
        new_ll_ms,
        linux_ms,
        new_ipis: spread(&a.new, ipis),
        nodes_ipis: spread(&a.nodes, ipis),
        linux_ipis: spread(&a.linux, ipis),
    }
}

pub(super) fn map_ram_row(a: &AtCpus) -> MapRamRow {
    let ns = |m: &Measured| m.map_ram_ns;
    let ipis = |m: &Measured| m.map_ram_ipis_per_1e6;
    let (new_ns, nodes_ns) = (spread(&a.new, ns), spread(&a.nodes, ns));
    let linux_ns = spread(&a.linux, ns);
    MapRamRow {
        vcpus: a.vcpus,
        old_ns: spread(&a.old, ns),
        linux_per_new: per(&linux_ns, &new_ns),
        linux_per_nodes: per(&linux_ns, &nodes_ns),
        new_ns,
        nodes_ns,
        linux_ns,
        new_ipis_per_1e6: spread(&a.new, ipis),
        nodes_ipis_per_1e6: spread(&a.nodes, ipis),
        linux_ipis_per_1e6: spread(&a.linux, ipis),
    }
}

pub(super) fn test_rows(a: &AtCpus) -> Vec<TestRow> {
    TESTS
        .iter()
        .enumerate()
        .map(|(i, &test)| {
            let ms = |m: &Measured| m.perf_tests.get(i).copied().unwrap_or(f64::NAN);
            let (new_ms, nodes_ms) = (spread(&a.new, ms), spread(&a.nodes, ms));
            let (new_ll_ms, linux_ms) = (spread(&a.new_ll, ms), spread(&a.linux, ms));
            TestRow {
                vcpus: a.vcpus,
                test,
                linux_per_new: per(&linux_ms, &new_ms),
                linux_per_nodes: per(&linux_ms, &nodes_ms),
                linux_per_new_ll: per(&linux_ms, &new_ll_ms),
                new_ms,
                nodes_ms,
                new_ll_ms,
                linux_ms,
            }
        })
        .collect()
}

/// The targets: mmkit new >= 1.2x Linux like for like (new-ll:
/// the tree with Linux's per-call work) on every test in both modes, and
/// on the vm_map_ram loop (lean on both sides), with no more TLB IPIs.
pub(super) fn targets(
    a: &str,
    tests: &[TestRow],
    perf: &[ModeRow],
    stress: &[ModeRow],
    maps: &[MapRamRow],
) -> Vec<Target> {
    let mut t = Vec::new();
    let at_least = |r: Option<f64>| r.is_some_and(|r| r >= 1.2);
    let x = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.2}x"));
    for p in perf {
        let rows: Vec<&TestRow> = tests.iter().filter(|r| r.vcpus == p.vcpus).collect();
        let worst = rows.iter().min_by(|l, r| {
            l.linux_per_new_ll
                .unwrap_or(0.0)
                .total_cmp(&r.linux_per_new_ll.unwrap_or(0.0))
        });
        t.push(Target::new(
            format!(
                "test_vmalloc performance mode: mmkit new >= 1.2x Linux on every test at {} vCPUs (like for like: new-ll; {a})",
                p.vcpus
            ),
            worst.map_or("-".into(), |w| {
                format!(
                    "slowest {} at {}; total {} (lean {})",
                    w.test,
                    x(w.linux_per_new_ll),
                    x(p.linux_per_new_ll),
                    x(p.linux_per_new)
                )
            }),
            !rows.is_empty() && rows.iter().all(|r| at_least(r.linux_per_new_ll)),
        ));
    }
    for s in stress {
        t.push(Target::new(
            format!("test_vmalloc stress mode: mmkit new >= 1.2x Linux at {} vCPUs (like for like: new-ll; {a})", s.vcpus),
            format!("{} (lean {})", x(s.linux_per_new_ll), x(s.linux_per_new)),
            at_least(s.linux_per_new_ll),
        ));
        if s.vcpus > 1 {
            t.push(Target::new(
                format!(
                    "test_vmalloc stress mode: mmkit new's TLB IPIs <= Linux's at {} vCPUs ({a})",
                    s.vcpus
                ),
                format!("{:.0} vs {:.0}", s.new_ipis.median, s.linux_ipis.median),
                s.new_ipis.median <= s.linux_ipis.median,
            ));
        }
    }
    for m in maps {
        t.push(Target::new(
            format!(
                "vm_map_ram loop: mmkit new >= 1.2x Linux at {} vCPUs ({a})",
                m.vcpus
            ),
            x(m.linux_per_new),
            at_least(m.linux_per_new),
        ));
        if m.vcpus > 1 {
            t.push(Target::new(
                format!("vm_map_ram loop: TLB IPIs per 10^6 unmaps, mmkit new <= Linux at {} vCPUs ({a})", m.vcpus),
                format!("{:.0} vs {:.0}", m.new_ipis_per_1e6.median, m.linux_ipis_per_1e6.median),
                m.new_ipis_per_1e6.median <= m.linux_ipis_per_1e6.median,
            ));
        }
    }
    t
}
