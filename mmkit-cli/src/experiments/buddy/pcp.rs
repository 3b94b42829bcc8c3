//! The buddy experiment's request stream through per-CPU page lists
//! (`buddy::pcp::PcpZone`, sized as the kernel sizes a zone's lists), and
//! the table that sets them beside the bare zone.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use mmkit::buddy::pcp::{PcpConfig, PcpZone};
use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType, Placement};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::Serialize;

use super::sim::{draw, RunResult};
use super::{name, Scale, HUGE_ORDER, POLICIES, RECLAIM_ROUNDS, ZONE_START};
use crate::render::{col, Col, Fmt, Table};
use crate::stats::MeanSd;

/// CPUs of the pcp runs: the request of tick `t`, and the frees that fall
/// due at `t`, run on CPU `t % PCP_CPUS`.
const PCP_CPUS: usize = 2;

/// What one run through per-CPU lists measured.
#[derive(Debug, Clone, Default)]
pub(super) struct PcpRun {
    /// Allocations of an order and type that has a pcp list (0..=3 and 9).
    list_allocs: u64,
    /// Refills, drains and requests without a list: each takes the zone
    /// lock once.
    refills: u64,
    drains: u64,
    direct: u64,
    /// Requests in all.
    requests: u64,
    unusable9_mean: f64,
    /// Pages sitting on the lists, mean of the samples after memory filled.
    pcp_pages_mean: f64,
    huge_ok: u64,
}

/// The kernel's `zone_batchsize` for a zone of `pages` 4 KiB pages: a
/// quarter of a 1/1024 of the zone, at most 64, as `2^n - 1` (63 from
/// 1 GiB up, 3 for 64 MiB), at least 1 (`pageset_update`); `high` is
/// 6 x batch (before 5.14).
pub(super) fn zone_batchsize(pages: u64) -> u32 {
    let b = ((pages >> 10).min(256) / 4).max(1);
    let b = b + b / 2;
    ((1u32 << (63 - b.leading_zeros())) - 1).max(1)
}

/// The request stream of `run_one` (same seed, same draws) through a
/// `PcpZone` sized as the kernel sizes a zone's lists (`zone_batchsize`),
/// reclaim only (no compaction). Pages on the lists are allocated as far
/// as the buddy knows: they neither merge nor count as free (as
/// `NR_FREE_PAGES`), so kswapd's watermarks see the zone's free pages
/// only; direct reclaim frees a number of pages (as `nr_to_reclaim`), and
/// a failed allocation drains every CPU before it gives up.
pub(super) fn run_pcp(placement: Placement, seed: u64, s: &Scale) -> PcpRun {
    let cfg = BuddyConfig {
        placement,
        ..BuddyConfig::default()
    };
    let mut b = BuddyAllocator::new(ZONE_START, s.frames, cfg).expect("valid zone");
    b.add_free_range(ZONE_START, s.frames).expect("fresh zone");
    let batch = zone_batchsize(s.frames);
    let pcp = PcpConfig {
        cpus: PCP_CPUS,
        batch,
        high: 6 * batch,
    };
    let mut z = PcpZone::new(b, pcp).expect("valid pcp config");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut expiry: BinaryHeap<Reverse<(u64, u64, u8)>> = BinaryHeap::new();
    let mut lru: VecDeque<u64> = VecDeque::new();
    let (low, high, nr_to_reclaim) = (s.frames / 64, s.frames / 32, s.frames / 2048);
    let sample_every = (s.ticks / s.samples).max(1);
    let mut r = PcpRun::default();
    let (mut filled, mut steady) = (false, 0u64);
    // kswapd: frees the oldest page cache on `cpu` until the zone has
    // `target` free pages.
    let reclaim = |z: &mut PcpZone, lru: &mut VecDeque<u64>, cpu: usize, target: u64| {
        while z.zone().free_pages() < target {
            let Some(pfn) = lru.pop_front() else { break };
            z.free(cpu, pfn, 0).expect("cached page");
        }
    };
    // Direct reclaim: frees `n` pages of the oldest page cache on `cpu`.
    let reclaim_n = |z: &mut PcpZone, lru: &mut VecDeque<u64>, cpu: usize, n: u64| {
        for pfn in lru.drain(..(n as usize).min(lru.len())) {
            z.free(cpu, pfn, 0).expect("cached page");
        }
    };
    for now in 0..s.ticks {
        let cpu = (now % PCP_CPUS as u64) as usize;
        while let Some(&Reverse((t, pfn, order))) = expiry.peek() {
            if t > now {
                break;
            }
            expiry.pop();
            z.free(cpu, pfn, order).expect("live allocation");
        }
        let req = draw(&mut rng, s.frames as f64);
        r.requests += 1;
        let mut got = z.alloc(cpu, req.order, req.mt);
        if got.is_err() {
            reclaim(&mut z, &mut lru, cpu, high);
            got = z.alloc(cpu, req.order, req.mt);
        }
        if let Ok(pfn) = got {
            match req.lifetime {
                None => lru.push_back(pfn),
                Some(l) => expiry.push(Reverse((now + l, pfn, req.order))),
            }
        }
        if z.zone().free_pages() < low {
            filled = true;
            reclaim(&mut z, &mut lru, cpu, high);
        }
        if now % s.huge_every == s.huge_every - 1 {
            r.requests += 1;
            for _ in 0..=RECLAIM_ROUNDS {
                if let Ok(pfn) = z.alloc(cpu, HUGE_ORDER, MigrateType::Movable) {
                    r.huge_ok += 1;
                    expiry.push(Reverse((now + s.huge_hold, pfn, HUGE_ORDER)));
                    break;
                }
                reclaim_n(&mut z, &mut lru, cpu, nr_to_reclaim);
            }
        }
        if filled && now % sample_every == sample_every - 1 {
            steady += 1;
            r.unusable9_mean += f64::from(z.zone().unusable_free_index(HUGE_ORDER));
            r.pcp_pages_mean += (0..PCP_CPUS).map(|c| z.pcp_pages(c)).sum::<u64>() as f64;
        }
    }
    r.unusable9_mean /= steady.max(1) as f64;
    r.pcp_pages_mean /= steady.max(1) as f64;
    for c in 0..PCP_CPUS {
        let st = z.stats(c);
        r.refills += st.refills;
        r.drains += st.drains;
        r.direct += st.direct;
    }
    // Every request has a list here (orders 0..=3 and 9, ordinary types).
    r.list_allocs = r.requests - r.direct;
    debug_assert!(z.check().is_ok());
    r
}

/// Per-CPU lists vs the bare zone of one policy on the same streams.
#[derive(Serialize)]
struct PcpRow {
    policy: &'static str,
    from_lists_pct: MeanSd,
    zone_locks_per_1000: MeanSd,
    pages_on_lists: MeanSd,
    unusable9_bare: MeanSd,
    unusable9_pcp: MeanSd,
    huge_bare: MeanSd,
    huge_pcp: MeanSd,
}

const PCP_COLS: [Col; 8] = [
    col("policy", "policy", Fmt::Text),
    col("from_lists_pct", "% allocs from the lists", Fmt::MeanSd(2)),
    col(
        "zone_locks_per_1000",
        "zone-lock takings/1000 requests",
        Fmt::MeanSd(1),
    ),
    col("pages_on_lists", "pages on the lists", Fmt::MeanSd(0)),
    col("unusable9_bare", "unusable o9 mean: bare", Fmt::MeanSd(3)),
    col("unusable9_pcp", "with pcp", Fmt::MeanSd(3)),
    col("huge_bare", "huge pages: bare", Fmt::MeanSd(1)),
    col("huge_pcp", "with pcp", Fmt::MeanSd(1)),
];

/// Per-CPU lists vs the bare zone on the same streams (reclaim only).
pub(super) fn pcp_table(s: &Scale, plain: &[Vec<RunResult>; 2], pcp: &[Vec<PcpRun>; 2]) -> Table {
    let b = zone_batchsize(s.frames);
    let hit = |r: &PcpRun| 100.0 * (1.0 - r.refills as f64 / r.list_allocs.max(1) as f64);
    let lock = |r: &PcpRun| 1000.0 * (r.refills + r.drains + r.direct) as f64 / r.requests as f64;
    let rows: Vec<PcpRow> = POLICIES
        .iter()
        .zip(plain.iter().zip(pcp))
        .map(|(p, (bare, with))| PcpRow {
            policy: name(*p),
            from_lists_pct: MeanSd::over(with, 1.0, hit),
            zone_locks_per_1000: MeanSd::over(with, 1.0, lock),
            pages_on_lists: MeanSd::over(with, 1.0, |r| r.pcp_pages_mean),
            unusable9_bare: MeanSd::over(bare, 1000.0, |r| r.unusable9_mean),
            unusable9_pcp: MeanSd::over(with, 1000.0, |r| r.unusable9_mean),
            huge_bare: MeanSd::over(bare, 1.0, |r| r.huge_ok as f64),
            huge_pcp: MeanSd::over(with, 1.0, |r| r.huge_ok as f64),
        })
        .collect();
    let title = format!(
        "Per-CPU page lists in front ({PCP_CPUS} CPUs, batch {b}, high {}) vs the bare zone, \
         reclaim only, mean ± sd over {} seeds",
        6 * b,
        s.seeds
    );
    Table::of(&title, &PCP_COLS, &rows)
}
