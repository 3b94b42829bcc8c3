//! Seed 001 (Roman Pen, 2015): the three `vm_map_ram` scenarios that exhaust
//! the 2008 per-CPU block allocator, run with `Policy::Legacy` (before) and
//! `Policy::Current` (after) on one CPU queue with identical inputs.
//!
//! The workloads are generic over [`RamMapper`], so the real-memory
//! `vm_map_ram` can run them unchanged.

use mmkit::vblock::{monotonic_ns, Config, Counters, Policy, VblockAllocator};
use mmkit::vmap::VmapAllocator;
use mmkit::{AllocError, FreeError};
use rand_mt::Mt;

use serde::Serialize;

use super::{Experiment, Options};
use crate::plot::{self, Axis, Chart};
use crate::render::{col, Col, Fmt, Report, Table, Target};
use crate::run::{progress, VMALLOC_END, VMALLOC_START};

/// Registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "vm_map_ram",
    about: "seed 001: per-CPU vmap block exhaustion, new blocks at head (2008) vs tail (2015)",
    run,
};

/// What the seed 001 scenarios need: map and unmap pages on one CPU.
pub trait RamMapper {
    /// Maps `pages` pages; returns the start address.
    ///
    /// # Errors
    /// The mapper's own.
    fn map(&mut self, pages: u64) -> Result<u64, AllocError>;
    /// Unmaps what `map(pages)` returned.
    ///
    /// # Errors
    /// The mapper's own.
    fn unmap(&mut self, addr: u64, pages: u64) -> Result<(), FreeError>;
}

/// A [`VblockAllocator`] pinned to one CPU queue.
pub struct Pinned<'a, R> {
    /// The front end.
    pub vb: &'a mut VblockAllocator<R>,
    /// The CPU queue every map uses.
    pub cpu: usize,
}

impl<R: mmkit::range::RangeAllocator> RamMapper for Pinned<'_, R> {
    fn map(&mut self, pages: u64) -> Result<u64, AllocError> {
        self.vb.map(self.cpu, pages)
    }
    fn unmap(&mut self, addr: u64, pages: u64) -> Result<(), FreeError> {
        self.vb.unmap(addr, pages)
    }
}

/// Map then unmap `pages` pages.
fn pair<M: RamMapper>(m: &mut M, pages: u64) -> Result<(), String> {
    let a = m.map(pages).map_err(|e| format!("map({pages}): {e}"))?;
    m.unmap(a, pages)
        .map_err(|e| format!("unmap({a:#x}, {pages}): {e}"))
}

/// Scenario 1, the exhaustion loop: each iteration maps+unmaps 16 pages,
/// then 8 pages `(bits - 16) / 8 - 1` times, leaving an 8-page hole that a
/// 16-page request cannot use.
///
/// # Errors
/// The first failed map or unmap.
pub fn exhaustion_loop<M: RamMapper>(m: &mut M, cfg: &Config, iters: u64) -> Result<(), String> {
    for _ in 0..iters {
        pair(m, 16)?;
        for _ in 0..(cfg.bits - 16) / 8 - 1 {
            pair(m, 8)?;
        }
    }
    Ok(())
}

/// Scenario 2: `calls` map+unmap pairs of `1..=max_alloc` pages drawn from
/// MT19937 seeded with `seed` (the same sequence for every run).
///
/// # Errors
/// The first failed map or unmap.
pub fn random_sizes<M: RamMapper>(
    m: &mut M,
    cfg: &Config,
    calls: u64,
    seed: u32,
) -> Result<(), String> {
    let mut mt = Mt::new(seed);
    for _ in 0..calls {
        pair(m, 1 + u64::from(mt.next_u32()) % cfg.max_alloc)?;
    }
    Ok(())
}

/// Scenario 3, increasing orders: for each order up to log2(max_alloc), fill
/// a block but for one hole of that order; then map each order once to
/// occupy the holes. Repeated `iters` times.
///
/// # Errors
/// The first failed map or unmap.
pub fn increasing_orders<M: RamMapper>(m: &mut M, cfg: &Config, iters: u64) -> Result<(), String> {
    let top = cfg.max_alloc.ilog2();
    for _ in 0..iters {
        for order in 0..=top {
            for _ in 0..cfg.bits / (1 << order) - 1 {
                pair(m, 1 << order)?;
            }
        }
        for order in 0..=top {
            pair(m, 1 << order)?;
        }
    }
    Ok(())
}

/// The seed's profile rows: (function, hits, total us, avg us as printed).
type SeedRows = [(&'static str, u64, f64, f64); 4];

/// Seed 001's published tables, scenario by scenario (before, after).
const SEED: [(SeedRows, SeedRows); 3] = [
    (
        [
            ("vm_map_ram", 126000, 30683.30, 0.243),
            ("vm_unmap_ram", 126000, 22003.24, 0.174),
            ("alloc_vmap_area", 1000, 4132.065, 4.132),
            ("free_vmap_block", 0, 0.0, 0.0),
        ],
        [
            ("vm_map_ram", 126000, 28713.13, 0.227),
            ("vm_unmap_ram", 126000, 20403.96, 0.161),
            ("alloc_vmap_area", 993, 3916.795, 3.944),
            ("free_vmap_block", 992, 654.157, 0.659),
        ],
    ),
    (
        [
            ("vm_map_ram", 10000, 10170.01, 1.017),
            ("vm_unmap_ram", 10000, 5321.823, 0.532),
            ("alloc_vmap_area", 420, 2150.239, 5.119),
            ("free_vmap_block", 37, 159.587, 4.313),
        ],
        [
            ("vm_map_ram", 10000, 7745.637, 0.774),
            ("vm_unmap_ram", 10000, 5460.573, 0.546),
            ("alloc_vmap_area", 414, 2201.650, 5.317),
            ("free_vmap_block", 412, 574.421, 1.394),
        ],
    ),
    (
        [
            ("vm_map_ram", 2032000, 399545.2, 0.196),
            ("vm_unmap_ram", 2032000, 363225.7, 0.178),
            ("alloc_vmap_area", 7001, 30627.76, 4.374),
            ("free_vmap_block", 6993, 7011.685, 1.002),
        ],
        [
            ("vm_map_ram", 2032000, 394259.7, 0.194),
            ("vm_unmap_ram", 2032000, 292500.7, 0.143),
            ("alloc_vmap_area", 7000, 31103.11, 4.443),
            ("free_vmap_block", 7000, 6750.844, 0.964),
        ],
    ),
];

/// The fixed MT19937 seed of scenario 2 (MT19937's reference default).
const MT_SEED: u32 = 5489;

/// One scenario's result for one policy.
struct Outcome {
    counters: Counters,
    /// Blocks still held at the end (nothing is mapped then).
    blocks_left: usize,
}

/// Runs scenario `which` (0..3) with `policy` on a fresh allocator.
fn run_one(which: usize, policy: Policy, scale: &Scale) -> Outcome {
    let cfg = Config::KERNEL;
    let range = VmapAllocator::new(VMALLOC_START, VMALLOC_END).expect("valid window");
    let mut vb = VblockAllocator::new(range, cfg, policy, 1).expect("valid config");
    vb.set_clock(Some(monotonic_ns));
    let mut m = Pinned {
        vb: &mut vb,
        cpu: 0,
    };
    let r = match which {
        0 => exhaustion_loop(&mut m, &cfg, scale.s1_iters),
        1 => random_sizes(&mut m, &cfg, scale.s2_calls, MT_SEED),
        _ => increasing_orders(&mut m, &cfg, scale.s3_iters),
    };
    if let Err(e) = r {
        panic!("vm_map_ram scenario {} ({policy:?}) failed: {e}", which + 1);
    }
    debug_assert!(vb.check().is_ok());
    Outcome {
        counters: vb.counters(),
        blocks_left: vb.blocks(),
    }
}

struct Scale {
    s1_iters: u64,
    s2_calls: u64,
    s3_iters: u64,
}

/// One line of a seed-shaped profile: a kernel function, its hits and
/// time here, and the seed's.
#[derive(Serialize)]
struct ProfileRow {
    function: &'static str,
    hits: u64,
    time_us: f64,
    avg_us: Option<f64>,
    seed_hits: u64,
    seed_time_us: f64,
    seed_avg_us: Option<f64>,
}

const PROFILE_COLS: [Col; 7] = [
    col("function", "function", Fmt::Text),
    col("hits", "hits", Fmt::Text),
    col("time_us", "time us", Fmt::Dec(1)),
    col("avg_us", "avg us", Fmt::Dec(3)),
    col("seed_hits", "seed hits", Fmt::Text),
    col("seed_time_us", "seed time us", Fmt::Dec(1)),
    col("seed_avg_us", "seed avg us", Fmt::Dec(3)),
];

/// Blocks created and released by one scenario under one policy.
#[derive(Serialize)]
struct BlocksRow {
    scenario: &'static str,
    policy: &'static str,
    map_calls: u64,
    unmap_calls: u64,
    created: u64,
    released: u64,
    released_pct: f64,
    fragmented_purges: u64,
    blocks_kept: usize,
    seed_created: u64,
    seed_released: u64,
    map_ns: u64,
    unmap_ns: u64,
    create_ns: u64,
    release_ns: u64,
}

const BLOCKS_COLS: [Col; 8] = [
    col("scenario", "scenario", Fmt::Text),
    col("policy", "policy", Fmt::Text),
    col("created", "created", Fmt::Text),
    col("released", "released", Fmt::Text),
    col("released_pct", "released", Fmt::Pct(1)),
    col("blocks_kept", "blocks kept", Fmt::Text),
    col("seed_created", "seed created", Fmt::Text),
    col("seed_released", "seed released", Fmt::Text),
];

/// The seed-shaped profile of one scenario and policy.
fn profile(c: &Counters, seed: &SeedRows) -> Vec<ProfileRow> {
    let ours = [
        (c.map_calls, c.map_ns),
        (c.unmap_calls, c.unmap_ns),
        (c.blocks_created, c.create_ns),
        (c.blocks_released, c.release_ns),
    ];
    let avg = |us: f64, hits: u64| (hits > 0).then(|| us / hits as f64);
    ours.iter()
        .zip(seed)
        .map(
            |(&(hits, ns), &(function, seed_hits, seed_time_us, s_avg))| ProfileRow {
                function,
                hits,
                time_us: ns as f64 / 1e3,
                avg_us: avg(ns as f64 / 1e3, hits),
                seed_hits,
                seed_time_us,
                seed_avg_us: (seed_hits > 0).then_some(s_avg),
            },
        )
        .collect()
}

fn blocks_row(which: usize, policy: Policy, out: &Outcome, seed: &SeedRows) -> BlocksRow {
    let c = &out.counters;
    BlocksRow {
        scenario: NAMES[which],
        policy: policy.name(),
        map_calls: c.map_calls,
        unmap_calls: c.unmap_calls,
        created: c.blocks_created,
        released: c.blocks_released,
        released_pct: 100.0 * c.blocks_released as f64 / c.blocks_created.max(1) as f64,
        fragmented_purges: c.fragmented_purges,
        blocks_kept: out.blocks_left,
        seed_created: seed[2].1,
        seed_released: seed[3].1,
        map_ns: c.map_ns,
        unmap_ns: c.unmap_ns,
        create_ns: c.create_ns,
        release_ns: c.release_ns,
    }
}

const NAMES: [&str; 3] = [
    "1 exhaustion loop (16 + 125 x 8 pages)",
    "2 random sizes 1..=64 (MT19937)",
    "3 increasing orders 0..=6",
];

fn scale(opts: &Options) -> Scale {
    let base = opts.loops.unwrap_or(opts.pick(100, 1000, 1000));
    Scale {
        s1_iters: base,
        // The seed's 10,000 calls take milliseconds: quick keeps them.
        s2_calls: opts.loops.map_or(10_000, |l| l * 10),
        s3_iters: base,
    }
}

fn run(opts: &Options) -> Report {
    let scale = scale(opts);
    let mut report = Report::new("vm_map_ram");
    let mut summary = Vec::new();
    let pb = progress(6, "vm_map_ram");
    for which in 0..NAMES.len() {
        for (policy, label) in [(Policy::Legacy, "before"), (Policy::Current, "after")] {
            let out = run_one(which, policy, &scale);
            pb.inc(1);
            let seed = if policy == Policy::Legacy {
                &SEED[which].0
            } else {
                &SEED[which].1
            };
            let title = format!(
                "scenario {}: {label} ({}, new blocks at {})",
                NAMES[which],
                policy.name(),
                head_or_tail(policy)
            );
            report.tables.push(Table::of(
                title,
                &PROFILE_COLS,
                &profile(&out.counters, seed),
            ));
            summary.push(blocks_row(which, policy, &out, seed));
        }
    }
    pb.finish_and_clear();
    report.tables.push(Table::of(
        "blocks created and released (nothing is mapped at the end)",
        &BLOCKS_COLS,
        &summary,
    ));
    report.targets = targets(&summary);
    report.plot("vm_map_ram-blocks.svg", "Blocks released as a share of blocks created, per scenario and policy (the counts are deterministic): a low bar means blocks stranded with free space nobody can use, which is what seed 001 fixed.", plot_blocks(&summary));
    report.notes.push(format!(
        "scale: scenario 1 {} iterations, scenario 2 {} calls (MT19937 seed {MT_SEED}), scenario 3 {} iterations; \
         one CPU queue, VMAP_BBMAP_BITS 1024, VMAP_MAX_ALLOC 64, range allocator mmkit::vmap",
        scale.s1_iters, scale.s2_calls, scale.s3_iters
    ));
    report.notes.push(
        "times: userspace Instant around each call (the seed: ftrace function profile in the kernel); \
         alloc_vmap_area = block creation, free_vmap_block = block release (lazy)"
            .into(),
    );
    report
}

/// The experiment's targets, checked on the measured block counts (rows in
/// scenario order, legacy then current).
fn targets(b: &[BlocksRow]) -> Vec<Target> {
    let (s1_old, s1_new, s2_old, s2_new) = (&b[0], &b[1], &b[2], &b[3]);
    vec![
        Target::new(
            "scenario 2: current releases >= 99% of its blocks, legacy < 50%",
            format!(
                "current {:.1}%, legacy {:.1}%",
                s2_new.released_pct, s2_old.released_pct
            ),
            s2_new.released_pct >= 99.0 && s2_old.released_pct < 50.0,
        ),
        Target::new(
            "scenario 1: legacy releases no block, current all but at most one",
            format!(
                "legacy {} of {}, current {} of {}",
                s1_old.released, s1_old.created, s1_new.released, s1_new.created
            ),
            s1_old.released == 0 && s1_new.released + 1 >= s1_new.created,
        ),
    ]
}

fn plot_blocks(rows: &[BlocksRow]) -> Result<String, Box<dyn std::error::Error>> {
    let chart = Chart {
        title: "vm_map_ram: blocks released / blocks created".into(),
        x: Axis::linear("scenario"),
        y: Axis::linear("blocks released, % of created"),
    };
    let cases: Vec<String> = NAMES
        .iter()
        .map(|n| n.split(" (").next().unwrap_or(n).to_string())
        .collect();
    let pct = |policy: Policy| {
        rows.iter()
            .filter(|r| r.policy == policy.name())
            .map(|r| r.released_pct)
            .collect()
    };
    plot::bars(
        &chart,
        &cases,
        &[
            (
                "Legacy (2008: new block at head)".into(),
                pct(Policy::Legacy),
            ),
            (
                "Current (2015: new block at tail)".into(),
                pct(Policy::Current),
            ),
        ],
    )
}

fn head_or_tail(p: Policy) -> &'static str {
    match p {
        Policy::Legacy => "head",
        Policy::Current => "tail",
    }
}
