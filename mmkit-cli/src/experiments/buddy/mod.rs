//! Seed 004 (Zoccolo and Gorman, 2009): adding buddies that are likely to
//! merge to the *tail* of the free lists, measured by external
//! fragmentation (the unusable free space index) and huge-page allocation.
//!
//! The workload is the seed's high-order stress test, rebuilt as a
//! simulation over one 1 GiB zone of 4 KiB frames:
//! - one allocation request per tick: mostly movable order-0 pages (page
//!   cache, kept on an LRU until reclaim; anonymous memory with short
//!   exponential lifetimes), some movable orders 1..3, unmovable orders 0..3
//!   (slab: mostly long-lived, some short), reclaimable orders 0..1;
//! - memory stays full: when free memory drops under 1/64 of the zone the
//!   oldest page cache is reclaimed until 1/32 is free (kswapd);
//! - every `huge_every` ticks an order-9 movable allocation (a huge page) is
//!   tried; on failure up to 4 rounds of direct reclaim (1/2048 of the zone)
//!   precede retries; its latency (reclaim included) is recorded when it
//!   succeeds, and the huge page is held for `huge_hold` ticks.
//!
//! Each policy also runs with *direct compaction*: a failed
//! huge-page try first asks `compaction_suitable` (the fragmentation index
//! against `extfrag_threshold` 500) and, when it says compact, runs
//! `BuddyAllocator::compact`, whose callback relocates the simulated
//! owner of each moved page; reclaim follows only if that did not help.
//! The work to satisfy each huge page is counted in pages: pages moved by
//! compaction plus pages reclaimed by direct reclaim.
//!
//! A last table runs the same streams through per-CPU page lists
//! (`buddy::pcp::PcpZone`, 2 CPUs, lists sized by the kernel's
//! `zone_batchsize`): how many allocations the lists serve without the
//! zone lock, and what pages held on the lists cost in fragmentation and
//! huge pages.
//!
//! `Head` and `TailIfMergeLikely` run on identical request streams: the
//! random draws per tick are fixed in number and independent of outcomes, so
//! the same seed gives the same sequence of requests and lifetimes.
//!
//! Where each part lives:
//! - `sim.rs`: the request stream and the simulated zone (reclaim,
//!   compaction, huge-page tries), one run per policy and seed;
//! - `pcp.rs`: the same stream through per-CPU page lists;
//! - `tables.rs`: the tables, notes and per-seed rows of the report;
//! - `plots.rs`: the plots over the run.

mod pcp;
mod plots;
mod sim;
mod tables;

#[cfg(test)]
mod tests;

use mmkit::buddy::{Placement, ZoneId};

use super::{Experiment, Options};
use crate::render::Report;
use crate::run::progress;
use pcp::{pcp_table, run_pcp, PcpRun};
use plots::plots;
use sim::{run_one, RunResult};
use tables::{
    compaction_tables, fragmentation_table, huge_table, notes, paired_compaction_table,
    paired_table, per_seed_table,
};

/// The registered experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "buddy",
    about: "seed 004: merge-likely tail placement vs head; unusable index, huge pages",
    run,
};

/// First pfn of the zone (4 GiB, where ZONE_NORMAL starts on x86-64).
const ZONE_START: u64 = 0x10_0000;
const HUGE_ORDER: u8 = 9;
/// Direct reclaim rounds before giving up on a huge page; each frees
/// 1/2048 of the zone (128 pages in 1 GiB) of the oldest page cache. Kept
/// small: page cache comes in at 0.7 pages a request, and deeper reclaim
/// for every failed try would drain it and leave the zone half empty.
const RECLAIM_ROUNDS: u32 = 4;
const ZONE: ZoneId<'static> = ZoneId::new(0, "Normal");
const POLICIES: [Placement; 2] = [Placement::Head, Placement::TailIfMergeLikely];

#[derive(Debug, Clone, Copy)]
struct Scale {
    frames: u64,
    ticks: u64,
    seeds: u64,
    huge_every: u64,
    huge_hold: u64,
    samples: u64,
}

impl Scale {
    fn from(opts: &Options) -> Self {
        // Ten zone-sizes of requests: the long-lived classes turn over
        // several times. Huge pages: one try per 2000 requests, each held
        // for 0.1 n / 512 tries' worth, at most ~10% of the zone.
        let frames: u64 = opts.pick(16_384, 32_768, 262_144);
        let huge_every = opts.pick(500, 2_000, 2_000);
        let mut s = Scale {
            frames,
            ticks: 10 * frames,
            seeds: opts.pick(2, 4, 10),
            huge_every,
            huge_hold: frames / 10 * huge_every / 512,
            samples: opts.pick(100, 200, 400),
        };
        if let Some(n) = opts.seeds {
            s.seeds = n.max(1);
        }
        if let Some(l) = opts.loops {
            s.ticks = l.max(s.samples);
        }
        s
    }
}

/// Every run: results[policy][seed], without and with direct compaction,
/// and with per-CPU lists in front (reclaim only).
struct Runs {
    plain: [Vec<RunResult>; 2],
    compacted: [Vec<RunResult>; 2],
    pcp: [Vec<PcpRun>; 2],
}

fn measure(s: &Scale) -> Runs {
    let pb = progress(s.seeds * 6, "buddy");
    let mut r = Runs {
        plain: [Vec::new(), Vec::new()],
        compacted: [Vec::new(), Vec::new()],
        pcp: [Vec::new(), Vec::new()],
    };
    for i in 0..s.seeds {
        for (p, policy) in POLICIES.iter().enumerate() {
            r.plain[p].push(run_one(*policy, false, 1000 + i, s));
            r.compacted[p].push(run_one(*policy, true, 1000 + i, s));
            pb.inc(2);
        }
    }
    for (p, policy) in POLICIES.iter().enumerate() {
        for i in 0..s.seeds {
            r.pcp[p].push(run_pcp(*policy, 1000 + i, s));
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    r
}

fn run(opts: &Options) -> Report {
    let s = Scale::from(opts);
    let runs = measure(&s);
    let mut report = Report::new("buddy");
    report.tables = vec![
        fragmentation_table(&s, &runs.plain),
        huge_table(&runs.plain),
        paired_table(&runs.plain),
    ];
    report.tables.extend(compaction_tables(&runs));
    report.tables.push(paired_compaction_table(&runs.compacted));
    report.tables.push(pcp_table(&s, &runs.plain, &runs.pcp));
    report.raw = vec![per_seed_table(&runs)];
    notes(&mut report, &s, &runs.plain);
    report.notes.push(
        "seed 004 on huge pages: 'the latency was slightly lower and on X86 and PPC64, more huge \
         pages were allocated almost immediately from the free lists' (here: 'from free lists' = \
         first try, no reclaim or compaction; 'work' = pages moved + pages reclaimed for it)"
            .into(),
    );
    plots(&mut report, &s, &runs);
    report
}

fn name(p: Placement) -> &'static str {
    match p {
        Placement::Head => "Head (before 2.6.33)",
        Placement::TailIfMergeLikely => "TailIfMergeLikely",
    }
}
