//! `mmkit experiments percpu`: seed 003's workloads, the area-map
//! allocator (3.15-4.13) against the bitmap allocator with block hints.
//!
//! 1. 2^20 objects of 4, 16, 64, 256 and 1024 bytes: allocate all, then
//!    free them in order, alternating (every other, then the rest) and in
//!    reverse; alloc and free time for each size and order.
//! 2. The same in chunks whose second half is already filled with objects
//!    of the same size (set up untimed: fill chunks, free their first
//!    halves), freed in order.
//! 3. 4-byte objects at 8-byte alignment: every object leaves a 4-byte
//!    hole, the right size but the wrong alignment for the next one. The
//!    area map rescans every such chunk for every allocation (O(n^2), the
//!    seed's 52 minutes), so it runs at a smaller count, said in the table.
//!
//! Objects are allocated with 4-byte alignment except in case 3. Both
//! allocators manage offsets only; the kernel's page population and
//! zeroing of every CPU's unit are left out (the same cost for both).

use std::time::Instant;

use indicatif::ProgressBar;
use mmkit::baseline::area_map::AreaMapAllocator;
use mmkit::percpu::{PcpuPtr, PercpuAlloc, PercpuAllocator};
use serde_json::json;

use super::{ms, progress, Experiment, Options};
use crate::report::{ratio, Report, Table};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "percpu",
    about: "seed 003: 1M percpu objects freed in 3 orders, area map vs bitmap with block hints",
    run,
};

/// Bytes per unit of every chunk (the kernel's minimum unit is 32 KiB; a
/// unit holds 16 metadata blocks here).
pub const UNIT_SIZE: u64 = 64 << 10;
/// Objects per run by default: the seed's 2^20.
pub const DEFAULT_OBJECTS: u64 = 1 << 20;
/// Objects per run under `--quick`.
pub const QUICK_OBJECTS: u64 = 1 << 12;
/// The area map's object count in the alignment case (O(n^2)), default.
pub const ALIGN_BASELINE_OBJECTS: u64 = 1 << 16;
/// The same under `--quick`.
pub const QUICK_ALIGN_BASELINE_OBJECTS: u64 = 1 << 10;
/// Repetitions of each run in tables 1 and 2 (the fastest is reported:
/// this machine is shared, and a slow outlier is noise, not the design).
pub const REPS: u32 = 3;
/// Object sizes of the seed's tables.
pub const SIZES: [u64; 5] = [4, 16, 64, 256, 1024];

/// The seed's worst-case (alloc ms, free ms), first table.
const SEED_AREA: [(u64, u64); 5] = [
    (310, 4770),
    (557, 1325),
    (436, 273),
    (776, 131),
    (3280, 122),
];
const SEED_BITMAP: [(u64, u64); 5] = [(490, 70), (515, 75), (610, 80), (950, 100), (3520, 200)];
/// The seed's second table (second half filled, freed in order).
const SEED_AREA_HALF: [(u64, u64); 5] = [
    (4118, 4892),
    (1651, 1163),
    (598, 285),
    (771, 158),
    (3034, 160),
];
const SEED_BITMAP_HALF: [(u64, u64); 5] = [(481, 67), (506, 69), (636, 75), (892, 90), (3262, 147)];

/// A free order of the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Forward,
    Alternating,
    Reverse,
}

const ORDERS: [Order; 3] = [Order::Forward, Order::Alternating, Order::Reverse];

impl Order {
    fn name(self) -> &'static str {
        match self {
            Order::Forward => "in order",
            Order::Alternating => "alternating",
            Order::Reverse => "reverse",
        }
    }

    /// The pointers in this free order.
    fn arrange(self, ptrs: &[PcpuPtr]) -> Vec<PcpuPtr> {
        match self {
            Order::Forward => ptrs.to_vec(),
            Order::Alternating => ptrs
                .iter()
                .step_by(2)
                .chain(ptrs.iter().skip(1).step_by(2))
                .copied()
                .collect(),
            Order::Reverse => ptrs.iter().rev().copied().collect(),
        }
    }
}

/// Which allocator a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    AreaMap,
    Bitmap,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::AreaMap => "area map",
            Kind::Bitmap => "bitmap",
        }
    }
}

/// Times (ms) of one run.
#[derive(Debug, Clone, Copy)]
struct Times {
    alloc: f64,
    free: f64,
}

/// Allocates `n` objects of `size` bytes aligned to `align`, timed.
fn alloc_all(a: &mut impl PercpuAlloc, n: u64, size: u64, align: u64) -> (Vec<PcpuPtr>, f64) {
    let mut ptrs = Vec::with_capacity(n as usize);
    let t = Instant::now();
    for _ in 0..n {
        ptrs.push(a.alloc(size, align).expect("valid request"));
    }
    (ptrs, ms(t.elapsed()))
}

/// Frees `ptrs` in that order, timed.
fn free_all(a: &mut impl PercpuAlloc, ptrs: &[PcpuPtr]) -> f64 {
    let t = Instant::now();
    for &p in ptrs {
        a.free(p).expect("live pointer");
    }
    ms(t.elapsed())
}

/// Table 1: allocate `n`, free in `order`.
fn plain_run(mut a: impl PercpuAlloc, n: u64, size: u64, order: Order) -> Times {
    let (ptrs, alloc) = alloc_all(&mut a, n, size, 4);
    let free = free_all(&mut a, &order.arrange(&ptrs));
    Times { alloc, free }
}

/// Table 2: chunks whose second half is full of `size`-byte objects, then
/// allocate `n` (they land in the first halves) and free them in order.
fn half_filled_run(mut a: impl PercpuAlloc, n: u64, size: u64) -> Times {
    let unit = a.unit_size();
    let per_chunk = unit / size.div_ceil(4).max(1) / 4;
    let chunks = n.div_ceil((per_chunk / 2).max(1));
    let (fill, _) = alloc_all(&mut a, chunks * per_chunk, size, 4);
    let first_halves: Vec<PcpuPtr> = fill
        .iter()
        .copied()
        .filter(|p| u64::from(p.offset) < unit / 2)
        .collect();
    free_all(&mut a, &first_halves);
    let (ptrs, alloc) = alloc_all(&mut a, n, size, 4);
    let free = free_all(&mut a, &ptrs);
    Times { alloc, free }
}

/// Runs `reps` times on fresh allocators; the fastest alloc and free.
fn make_run(
    kind: Kind,
    reps: u32,
    f: impl Fn(AreaMapAllocator) -> Times,
    g: impl Fn(PercpuAllocator) -> Times,
) -> Times {
    let mut best = Times {
        alloc: f64::INFINITY,
        free: f64::INFINITY,
    };
    for _ in 0..reps.max(1) {
        let t = match kind {
            Kind::AreaMap => f(AreaMapAllocator::new(UNIT_SIZE).expect("valid unit")),
            Kind::Bitmap => g(PercpuAllocator::new(UNIT_SIZE).expect("valid unit")),
        };
        best = Times {
            alloc: best.alloc.min(t.alloc),
            free: best.free.min(t.free),
        };
    }
    best
}

/// Runs table 1 for one allocator: per size, the three orders.
fn orders_table(
    kind: Kind,
    n: u64,
    reps: u32,
    pb: &ProgressBar,
    rows: &mut Vec<serde_json::Value>,
) -> Vec<[Times; 3]> {
    SIZES
        .iter()
        .map(|&size| {
            let t = ORDERS.map(|order| {
                pb.set_message(format!("{} {size}B {}", kind.name(), order.name()));
                let t = make_run(kind, reps, |a| plain_run(a, n, size, order), |a| plain_run(a, n, size, order));
                rows.push(json!({"table": "free orders", "allocator": kind.name(), "size": size, "reps": reps,
                    "order": order.name(), "objects": n, "unit_size": UNIT_SIZE,
                    "alloc_ms": t.alloc, "free_ms": t.free}));
                pb.inc(1);
                t
            });
            t
        })
        .collect()
}

fn worst(t: &[Times; 3]) -> (f64, f64, f64) {
    let alloc = t.iter().map(|x| x.alloc).fold(0.0, f64::max);
    let free_max = t.iter().map(|x| x.free).fold(0.0, f64::max);
    let free_min = t.iter().map(|x| x.free).fold(f64::INFINITY, f64::min);
    (alloc, free_max, free_min)
}

fn f0(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.0}")
    }
}

/// The seed's table shape, one allocator: worst alloc and free per size,
/// each order's free time, the spread, and the seed's numbers beside.
fn seed_table(title: String, runs: &[[Times; 3]], seed: &[(u64, u64); 5]) -> Table {
    let mut t = Table::new(
        title,
        &[
            "object size",
            "alloc ms",
            "free ms (worst)",
            "in order",
            "alternating",
            "reverse",
            "free spread",
            "seed alloc ms",
            "seed free ms",
        ],
    );
    for ((size, r), s) in SIZES.iter().zip(runs).zip(seed) {
        let (alloc, fmax, fmin) = worst(r);
        t.row(vec![
            format!("{size}B"),
            f0(alloc),
            f0(fmax),
            f0(r[0].free),
            f0(r[1].free),
            f0(r[2].free),
            ratio(fmax, fmin),
            s.0.to_string(),
            s.1.to_string(),
        ]);
    }
    t
}

/// Runs the second table for both allocators.
fn half_tables(
    n: u64,
    reps: u32,
    pb: &ProgressBar,
    rows: &mut Vec<serde_json::Value>,
) -> Vec<Table> {
    let header = [
        "object size",
        "alloc ms",
        "free ms",
        "seed alloc ms",
        "seed free ms",
    ];
    let mut out = Vec::new();
    for (kind, seed) in [
        (Kind::AreaMap, &SEED_AREA_HALF),
        (Kind::Bitmap, &SEED_BITMAP_HALF),
    ] {
        let title = format!(
            "{}: {n} objects in chunks whose second half is filled, freed in order (unit_size {} KiB)",
            kind.name(),
            UNIT_SIZE >> 10
        );
        let mut t = Table::new(title, &header);
        for (&size, s) in SIZES.iter().zip(seed) {
            pb.set_message(format!("{} {size}B half filled", kind.name()));
            let r = make_run(
                kind,
                reps,
                |a| half_filled_run(a, n, size),
                |a| half_filled_run(a, n, size),
            );
            rows.push(json!({"table": "second half filled", "allocator": kind.name(), "size": size, "reps": reps,
                "order": "in order", "objects": n, "unit_size": UNIT_SIZE,
                "alloc_ms": r.alloc, "free_ms": r.free}));
            t.row(vec![
                format!("{size}B"),
                f0(r.alloc),
                f0(r.free),
                s.0.to_string(),
                s.1.to_string(),
            ]);
            pb.inc(1);
        }
        out.push(t);
    }
    out
}

/// Allocates `n` 4-byte objects at 8-byte alignment; (alloc ms, free ms).
fn align_run(mut a: impl PercpuAlloc, n: u64) -> Times {
    let (ptrs, alloc) = alloc_all(&mut a, n, 4, 8);
    let free = free_all(&mut a, &ptrs);
    Times { alloc, free }
}

/// The alignment case: both at the baseline's count, the bitmap also at
/// the full count.
fn align_table(
    n: u64,
    nb: u64,
    pb: &ProgressBar,
    rows: &mut Vec<serde_json::Value>,
) -> (Table, f64) {
    let mut t = Table::new(
        format!(
            "4-byte objects at 8-byte alignment, allocated then freed in order (unit_size {} KiB)",
            UNIT_SIZE >> 10
        ),
        &[
            "objects",
            "area map alloc ms",
            "bitmap alloc ms",
            "alloc ratio",
            "area map free ms",
            "bitmap free ms",
            "seed",
        ],
    );
    pb.set_message(format!("area map align x{nb}"));
    let base = align_run(AreaMapAllocator::new(UNIT_SIZE).expect("unit"), nb);
    pb.inc(1);
    pb.set_message(format!("bitmap align x{nb}"));
    let bm = align_run(PercpuAllocator::new(UNIT_SIZE).expect("unit"), nb);
    pb.inc(1);
    let scaled = if nb < n {
        format!("{nb} (scaled down from {n}: O(n^2) on the area map)")
    } else {
        nb.to_string()
    };
    t.row(vec![
        scaled,
        f0(base.alloc),
        f0(bm.alloc),
        ratio(base.alloc, bm.alloc),
        f0(base.free),
        f0(bm.free),
        "2^20: 52 min vs ~16 s (~195x)".into(),
    ]);
    for (kind, r) in [(Kind::AreaMap, base), (Kind::Bitmap, bm)] {
        rows.push(
            json!({"table": "alignment", "allocator": kind.name(), "size": 4, "align": 8,
            "objects": nb, "unit_size": UNIT_SIZE, "alloc_ms": r.alloc, "free_ms": r.free}),
        );
    }
    if nb < n {
        pb.set_message(format!("bitmap align x{n}"));
        let full = align_run(PercpuAllocator::new(UNIT_SIZE).expect("unit"), n);
        rows.push(
            json!({"table": "alignment", "allocator": "bitmap", "size": 4, "align": 8,
            "objects": n, "unit_size": UNIT_SIZE, "alloc_ms": full.alloc, "free_ms": full.free}),
        );
        t.row(vec![
            n.to_string(),
            "(not run)".into(),
            f0(full.alloc),
            "-".into(),
            "-".into(),
            f0(full.free),
            "bitmap ~16 s".into(),
        ]);
    }
    pb.inc(1);
    (t, base.alloc / bm.alloc.max(1e-9))
}

/// Runs the whole experiment.
fn run(opts: &Options) -> Report {
    let n = opts
        .loops
        .unwrap_or(if opts.quick {
            QUICK_OBJECTS
        } else {
            DEFAULT_OBJECTS
        })
        .max(2);
    let nb = if opts.quick {
        QUICK_ALIGN_BASELINE_OBJECTS
    } else {
        ALIGN_BASELINE_OBJECTS
    }
    .min(n);
    let steps = 2 * SIZES.len() as u64 * 3 + 2 * SIZES.len() as u64 + 3;
    let pb = progress(steps, "percpu");
    let mut rows = Vec::new();
    let reps = if opts.quick { 1 } else { REPS };
    let area = orders_table(Kind::AreaMap, n, reps, &pb, &mut rows);
    let bitmap = orders_table(Kind::Bitmap, n, reps, &pb, &mut rows);
    let mut tables = vec![
        seed_table(
            format!(
                "area map: {n} objects, alloc all then free (unit_size {} KiB)",
                UNIT_SIZE >> 10
            ),
            &area,
            &SEED_AREA,
        ),
        seed_table(
            format!(
                "bitmap: {n} objects, alloc all then free (unit_size {} KiB)",
                UNIT_SIZE >> 10
            ),
            &bitmap,
            &SEED_BITMAP,
        ),
    ];
    tables.extend(half_tables(n, reps, &pb, &mut rows));
    let (align, align_ratio) = align_table(n, nb, &pb, &mut rows);
    tables.push(align);
    pb.finish_and_clear();
    let notes = notes(n, reps, &area, &bitmap, align_ratio);
    Report {
        name: "percpu".into(),
        tables,
        notes,
        rows,
        plots: Vec::new(),
    }
}

/// The targets of the issue, as measured.
fn notes(
    n: u64,
    reps: u32,
    area: &[[Times; 3]],
    bitmap: &[[Times; 3]],
    align_ratio: f64,
) -> Vec<String> {
    let spread = |r: &[[Times; 3]]| -> Vec<String> {
        r.iter()
            .map(worst)
            .map(|(_, hi, lo)| ratio(hi, lo))
            .collect()
    };
    let ns4 = worst(&bitmap[0]).0 * 1e6 / n as f64;
    vec![
        format!("unit_size = {UNIT_SIZE} bytes ({} metadata blocks of 4 KiB); objects 4-byte aligned except the alignment case", UNIT_SIZE / 4096),
        format!("free spread (slowest order / fastest) per size {:?}: bitmap {} (target <= 2x), area map {}",
            SIZES, spread(bitmap).join(" "), spread(area).join(" ")),
        format!("alignment case: bitmap {align_ratio:.0}x faster than the area map at the same count (target >= 100x)"),
        format!("bitmap allocation of {n} 4-byte objects: {ns4:.0} ns per object, slowest order (target < 150 ns; seed: 490 ms / 2^20 = 467 ns in the kernel)"),
        format!("times in ms, each the fastest of {reps} runs on fresh allocators (tables 1-2; the alignment case runs once); alloc ms is the slowest of the three orders' allocations; the seed's numbers are its worst case over the three orders"),
    ]
}
