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
use serde::Serialize;

use super::{Experiment, Options};
use crate::plot::{self, Axis, Chart, Series};
use crate::render::{col, Col, Fmt, Report, Table, Target};
use crate::run::{ms, progress, ratio};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "percpu",
    about: "seed 003: 1M percpu objects freed in 3 orders, area map vs bitmap with block hints",
    run,
};

/// Bytes per unit of every chunk (the kernel's minimum unit is 32 KiB; a
/// unit holds 16 metadata blocks here).
pub const UNIT_SIZE: u64 = 64 << 10;
/// Objects per run under `--full`: the seed's 2^20.
pub const FULL_OBJECTS: u64 = 1 << 20;
/// Objects per run under `--quick`.
pub const QUICK_OBJECTS: u64 = 1 << 12;
/// Objects per run of the main job (`mmkit experiments` without `--full`).
pub const DEFAULT_OBJECTS: u64 = 1 << 18;
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
#[derive(Debug, Clone, Copy, Serialize)]
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

/// Table 1, one allocator and object size: the three free orders.
#[derive(Serialize)]
struct OrdersRow {
    allocator: &'static str,
    size: u64,
    object_size: String,
    objects: u64,
    /// Each order's (fastest of `reps`) times: in order, alternating, reverse.
    runs: [Times; 3],
    alloc_ms: f64,
    free_worst_ms: f64,
    in_order_ms: f64,
    alternating_ms: f64,
    reverse_ms: f64,
    free_spread: Option<f64>,
    seed_alloc_ms: u64,
    seed_free_ms: u64,
}

const ORDERS_COLS: [Col; 9] = [
    col("object_size", "object size", Fmt::Text),
    col("alloc_ms", "alloc ms", Fmt::Auto),
    col("free_worst_ms", "free ms (worst)", Fmt::Auto),
    col("in_order_ms", "free in order ms", Fmt::Auto),
    col("alternating_ms", "free alternating ms", Fmt::Auto),
    col("reverse_ms", "free reverse ms", Fmt::Auto),
    col("free_spread", "free spread", Fmt::Ratio),
    col("seed_alloc_ms", "seed alloc ms", Fmt::Text),
    col("seed_free_ms", "seed free ms", Fmt::Text),
];

/// Table 2, one allocator and object size.
#[derive(Serialize)]
struct HalfRow {
    allocator: &'static str,
    size: u64,
    object_size: String,
    objects: u64,
    alloc_ms: f64,
    free_ms: f64,
    seed_alloc_ms: u64,
    seed_free_ms: u64,
}

const HALF_COLS: [Col; 5] = [
    col("object_size", "object size", Fmt::Text),
    col("alloc_ms", "alloc ms", Fmt::Auto),
    col("free_ms", "free ms", Fmt::Auto),
    col("seed_alloc_ms", "seed alloc ms", Fmt::Text),
    col("seed_free_ms", "seed free ms", Fmt::Text),
];

/// The alignment case at one object count.
#[derive(Serialize)]
struct AlignRow {
    objects: u64,
    area_map: Option<Times>,
    bitmap: Times,
    alloc_ratio: Option<f64>,
    seed: &'static str,
}

const ALIGN_COLS: [Col; 7] = [
    col("objects", "objects", Fmt::Text),
    col("area_map.alloc", "area map alloc ms", Fmt::Auto),
    col("bitmap.alloc", "bitmap alloc ms", Fmt::Auto),
    col("alloc_ratio", "area map/bitmap", Fmt::Ratio),
    col("area_map.free", "area map free ms", Fmt::Auto),
    col("bitmap.free", "bitmap free ms", Fmt::Auto),
    col("seed", "seed", Fmt::Text),
];

/// Runs table 1 for one allocator: per size, the three orders.
fn orders_rows(kind: Kind, n: u64, reps: u32, pb: &ProgressBar) -> Vec<OrdersRow> {
    let seed = if kind == Kind::AreaMap {
        &SEED_AREA
    } else {
        &SEED_BITMAP
    };
    SIZES
        .iter()
        .zip(seed)
        .map(|(&size, &(seed_alloc_ms, seed_free_ms))| {
            let runs = ORDERS.map(|order| {
                pb.set_message(format!("{} {size}B {}", kind.name(), order.name()));
                let t = make_run(
                    kind,
                    reps,
                    |a| plain_run(a, n, size, order),
                    |a| plain_run(a, n, size, order),
                );
                pb.inc(1);
                t
            });
            let (alloc_ms, free_worst_ms, free_min) = worst(&runs);
            OrdersRow {
                allocator: kind.name(),
                size,
                object_size: format!("{size}B"),
                objects: n,
                runs,
                alloc_ms,
                free_worst_ms,
                in_order_ms: runs[0].free,
                alternating_ms: runs[1].free,
                reverse_ms: runs[2].free,
                free_spread: ratio(free_worst_ms, free_min),
                seed_alloc_ms,
                seed_free_ms,
            }
        })
        .collect()
}

fn worst(t: &[Times; 3]) -> (f64, f64, f64) {
    let alloc = t.iter().map(|x| x.alloc).fold(0.0, f64::max);
    let free_max = t.iter().map(|x| x.free).fold(0.0, f64::max);
    let free_min = t.iter().map(|x| x.free).fold(f64::INFINITY, f64::min);
    (alloc, free_max, free_min)
}

/// Runs the second table for one allocator.
fn half_rows(kind: Kind, n: u64, reps: u32, pb: &ProgressBar) -> Vec<HalfRow> {
    let seed = if kind == Kind::AreaMap {
        &SEED_AREA_HALF
    } else {
        &SEED_BITMAP_HALF
    };
    SIZES
        .iter()
        .zip(seed)
        .map(|(&size, &(seed_alloc_ms, seed_free_ms))| {
            pb.set_message(format!("{} {size}B half filled", kind.name()));
            let r = make_run(
                kind,
                reps,
                |a| half_filled_run(a, n, size),
                |a| half_filled_run(a, n, size),
            );
            pb.inc(1);
            HalfRow {
                allocator: kind.name(),
                size,
                object_size: format!("{size}B"),
                objects: n,
                alloc_ms: r.alloc,
                free_ms: r.free,
                seed_alloc_ms,
                seed_free_ms,
            }
        })
        .collect()
}

/// Allocates `n` 4-byte objects at 8-byte alignment; (alloc ms, free ms).
fn align_run(mut a: impl PercpuAlloc, n: u64) -> Times {
    let (ptrs, alloc) = alloc_all(&mut a, n, 4, 8);
    let free = free_all(&mut a, &ptrs);
    Times { alloc, free }
}

/// The alignment case: both at the baseline's count `nb`, the bitmap also
/// at the full count `n`.
fn align_rows(n: u64, nb: u64, pb: &ProgressBar) -> Vec<AlignRow> {
    pb.set_message(format!("area map align x{nb}"));
    let base = align_run(AreaMapAllocator::new(UNIT_SIZE).expect("unit"), nb);
    pb.inc(1);
    pb.set_message(format!("bitmap align x{nb}"));
    let bm = align_run(PercpuAllocator::new(UNIT_SIZE).expect("unit"), nb);
    pb.inc(1);
    let mut rows = vec![AlignRow {
        objects: nb,
        area_map: Some(base),
        bitmap: bm,
        alloc_ratio: ratio(base.alloc, bm.alloc),
        seed: "2^20: 52 min vs ~16 s, ~195x",
    }];
    if nb < n {
        pb.set_message(format!("bitmap align x{n}"));
        let full = align_run(PercpuAllocator::new(UNIT_SIZE).expect("unit"), n);
        rows.push(AlignRow {
            objects: n,
            area_map: None,
            bitmap: full,
            alloc_ratio: None,
            seed: "2^20: bitmap ~16 s",
        });
    }
    pb.inc(1);
    rows
}

fn tables(
    n: u64,
    area: &[OrdersRow],
    bitmap: &[OrdersRow],
    half: [&[HalfRow]; 2],
    align: &[AlignRow],
) -> Vec<Table> {
    let unit = UNIT_SIZE >> 10;
    let half_title = |k: Kind| {
        format!("{}: {n} objects in chunks whose second half is filled, freed in order (unit_size {unit} KiB)", k.name())
    };
    vec![
        Table::of(format!("area map: {n} objects, alloc all then free (unit_size {unit} KiB)"), &ORDERS_COLS, area),
        Table::of(format!("bitmap: {n} objects, alloc all then free (unit_size {unit} KiB)"), &ORDERS_COLS, bitmap),
        Table::of(half_title(Kind::AreaMap), &HALF_COLS, half[0]),
        Table::of(half_title(Kind::Bitmap), &HALF_COLS, half[1]),
        Table::of(format!("4-byte objects at 8-byte alignment, allocated then freed in order (unit_size {unit} KiB)"), &ALIGN_COLS, align),
    ]
}

fn plot_free(
    area: &[OrdersRow],
    bitmap: &[OrdersRow],
) -> Result<String, Box<dyn std::error::Error>> {
    let chart = Chart {
        title: format!(
            "percpu: free {} objects, slowest of the three orders",
            area[0].objects
        ),
        x: Axis::log("object size, bytes (log scale)"),
        y: Axis::log("free time, ms (log scale)"),
    };
    let pts = |rows: &[OrdersRow], f: fn(&OrdersRow) -> f64| {
        rows.iter().map(|r| (r.size as f64, f(r))).collect()
    };
    plot::lines(
        &chart,
        &[
            Series::new("area map (3.15-4.13), here", pts(area, |r| r.free_worst_ms)),
            Series::new(
                "bitmap with block hints, here",
                pts(bitmap, |r| r.free_worst_ms),
            ),
            Series::reference(
                "seed 003: area map (kernel, 2^20)",
                pts(area, |r| r.seed_free_ms as f64),
            ),
            Series::reference(
                "seed 003: bitmap (kernel, 2^20)",
                pts(bitmap, |r| r.seed_free_ms as f64),
            ),
        ],
    )
}

/// Runs the whole experiment.
fn run(opts: &Options) -> Report {
    let n = opts
        .loops
        .unwrap_or(opts.pick(QUICK_OBJECTS, DEFAULT_OBJECTS, FULL_OBJECTS))
        .max(2);
    let nb = if opts.quick {
        QUICK_ALIGN_BASELINE_OBJECTS
    } else {
        ALIGN_BASELINE_OBJECTS
    }
    .min(n);
    let steps = 2 * SIZES.len() as u64 * 3 + 2 * SIZES.len() as u64 + 3;
    let pb = progress(steps, "percpu");
    let reps = opts.pick(1, 1, REPS);
    let area = orders_rows(Kind::AreaMap, n, reps, &pb);
    let bitmap = orders_rows(Kind::Bitmap, n, reps, &pb);
    let half = [
        half_rows(Kind::AreaMap, n, reps, &pb),
        half_rows(Kind::Bitmap, n, reps, &pb),
    ];
    let align = align_rows(n, nb, &pb);
    pb.finish_and_clear();
    let mut r = Report::new("percpu");
    r.tables = tables(n, &area, &bitmap, [&half[0], &half[1]], &align);
    r.targets = targets(n, &area, &bitmap, &align[0]);
    r.plot("percpu-free.svg", "Time to free every object, slowest of the three free orders, by object size (log-log), here (solid) and in the seed's kernel run (dashed): a flat line means the free cost does not depend on how objects pack into a chunk.", plot_free(&area, &bitmap));
    r.notes = vec![
        format!("unit_size = {UNIT_SIZE} bytes ({} metadata blocks of 4 KiB); objects 4-byte aligned except the alignment case", UNIT_SIZE / 4096),
        format!("alignment case: the area map runs at most {nb} objects (O(n^2): the seed's 52 minutes at 2^20), the bitmap also at {n}"),
        format!("times in ms, each the fastest of {reps} runs on fresh allocators (tables 1-2; the alignment case runs once); alloc ms is the slowest of the three orders' allocations; the seed's numbers are its worst case over the three orders"),
    ];
    r
}

/// The experiment's targets, checked on what it measured.
fn targets(n: u64, area: &[OrdersRow], bitmap: &[OrdersRow], align: &AlignRow) -> Vec<Target> {
    let spreads = |rows: &[OrdersRow]| {
        rows.iter()
            .map(|r| format!("{}B {:.2}x", r.size, r.free_spread.unwrap_or(f64::NAN)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let worst_spread = bitmap
        .iter()
        .filter_map(|r| r.free_spread)
        .fold(0.0, f64::max);
    let align_ratio = align.alloc_ratio.unwrap_or(f64::NAN);
    let ns4 = bitmap[0].alloc_ms * 1e6 / n as f64;
    vec![
        Target::new(
            "bitmap free spread (slowest order / fastest) <= 2x at every size",
            format!("bitmap {}; area map {}", spreads(bitmap), spreads(area)),
            worst_spread <= 2.0,
        ),
        Target::new("alignment case: bitmap >= 100x faster than the area map at the same count", format!("{align_ratio:.0}x"), align_ratio >= 100.0),
        Target::new(
            format!("bitmap allocation of {n} 4-byte objects < 150 ns per object, slowest order (seed: 490 ms / 2^20 = 467 ns in the kernel)"),
            format!("{ns4:.0} ns"),
            ns4 < 150.0,
        ),
    ]
}
