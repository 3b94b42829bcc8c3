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

use super::{progress, Experiment, Options};
use crate::report::{Report, Table};

/// Registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "vm_map_ram",
    about: "seed 001: per-CPU vmap block exhaustion, new blocks at head (2008) vs tail (2015)",
    run,
};

/// The x86-64 vmalloc window (32 TiB), where the blocks come from.
pub const VMALLOC_START: u64 = 0xffff_c900_0000_0000;
/// End of the vmalloc window.
pub const VMALLOC_END: u64 = 0xffff_e900_0000_0000;

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

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}

fn avg(ns: u64, hits: u64) -> String {
    if hits == 0 {
        "-".into()
    } else {
        format!("{:.3}", ns as f64 / 1e3 / hits as f64)
    }
}

/// The seed-shaped profile table of one scenario and policy.
fn profile(title: String, c: &Counters, seed: &SeedRows) -> Table {
    let mut t = Table::new(
        title,
        &[
            "function",
            "hits",
            "time us",
            "avg us",
            "seed hits",
            "seed time us",
            "seed avg us",
        ],
    );
    let ours = [
        (c.map_calls, c.map_ns),
        (c.unmap_calls, c.unmap_ns),
        (c.blocks_created, c.create_ns),
        (c.blocks_released, c.release_ns),
    ];
    for ((hits, ns), (name, s_hits, s_us, s_avg)) in ours.iter().zip(seed) {
        let s_avg = if *s_hits == 0 {
            "-".into()
        } else {
            format!("{s_avg:.3}")
        };
        t.row(vec![
            name.to_string(),
            hits.to_string(),
            us(*ns),
            avg(*ns, *hits),
            s_hits.to_string(),
            format!("{s_us:.1}"),
            s_avg,
        ]);
    }
    t
}

const NAMES: [&str; 3] = [
    "1 exhaustion loop (16 + 125 x 8 pages)",
    "2 random sizes 1..=64 (MT19937)",
    "3 increasing orders 0..=6",
];

fn run(opts: &Options) -> Report {
    let base = opts.loops.unwrap_or(if opts.quick { 100 } else { 1000 });
    let scale = Scale {
        s1_iters: base,
        // The seed's 10,000 calls take milliseconds: quick keeps them.
        s2_calls: opts.loops.map_or(10_000, |l| l * 10),
        s3_iters: base,
    };
    let mut report = Report {
        name: "vm_map_ram".into(),
        ..Report::default()
    };
    let mut summary = Table::new(
        "blocks created and released (nothing is mapped at the end)",
        &[
            "scenario",
            "policy",
            "created",
            "released",
            "released %",
            "blocks kept",
            "seed created",
            "seed released",
        ],
    );
    let pb = progress(6, "vm_map_ram");
    // (created, released) per scenario: [legacy, current].
    let mut blocks = [[(0u64, 0u64); 2]; 3];
    for (which, name) in NAMES.iter().enumerate() {
        for (policy, label) in [(Policy::Legacy, "before"), (Policy::Current, "after")] {
            let out = run_one(which, policy, &scale);
            pb.inc(1);
            let seed = if policy == Policy::Legacy {
                &SEED[which].0
            } else {
                &SEED[which].1
            };
            let c = &out.counters;
            let title = format!(
                "scenario {name}: {label} ({}, new blocks at {})",
                policy.name(),
                head_or_tail(policy)
            );
            report.tables.push(profile(title, c, seed));
            blocks[which][usize::from(policy == Policy::Current)] =
                (c.blocks_created, c.blocks_released);
            summary.row(vec![
                name.to_string(),
                policy.name().into(),
                c.blocks_created.to_string(),
                c.blocks_released.to_string(),
                format!(
                    "{:.1}",
                    100.0 * c.blocks_released as f64 / c.blocks_created.max(1) as f64
                ),
                out.blocks_left.to_string(),
                seed[2].1.to_string(),
                seed[3].1.to_string(),
            ]);
            report.rows.push(serde_json::json!({
                "scenario": which + 1, "policy": policy.name(),
                "map_calls": c.map_calls, "unmap_calls": c.unmap_calls,
                "blocks_created": c.blocks_created, "blocks_released": c.blocks_released,
                "fragmented_purges": c.fragmented_purges, "blocks_kept": out.blocks_left,
                "map_ns": c.map_ns, "unmap_ns": c.unmap_ns,
                "create_ns": c.create_ns, "release_ns": c.release_ns,
            }));
        }
    }
    pb.finish_and_clear();
    report.tables.push(summary);
    report.notes.push(verdict(&blocks));
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

/// The targets, checked on the measured block counts.
fn verdict(b: &[[(u64, u64); 2]; 3]) -> String {
    let pct = |(c, r): (u64, u64)| 100.0 * r as f64 / c.max(1) as f64;
    let s2 = pct(b[1][1]) >= 99.0 && pct(b[1][0]) < 50.0;
    let s1 = b[0][0].1 == 0 && b[0][1].1 + 1 >= b[0][1].0;
    format!(
        "targets: scenario 2 current releases {:.1}% (>= 99%) and legacy {:.1}%: {}; \
         scenario 1 legacy releases {} of {} and current {} of {}: {}",
        pct(b[1][1]),
        pct(b[1][0]),
        if s2 { "met" } else { "NOT met" },
        b[0][0].1,
        b[0][0].0,
        b[0][1].1,
        b[0][1].0,
        if s1 { "met" } else { "NOT met" },
    )
}

fn head_or_tail(p: Policy) -> &'static str {
    match p {
        Policy::Legacy => "head",
        Policy::Current => "tail",
    }
}
