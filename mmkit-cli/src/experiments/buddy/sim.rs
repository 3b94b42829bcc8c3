//! The simulated zone of the buddy experiment: the request stream (four
//! random draws a tick, whatever happens), kswapd and direct reclaim of
//! the page-cache LRU, direct compaction, and the huge-page tries; one
//! [`run_one`] per policy, mode and seed.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

use mmkit::buddy::{
    BuddyAllocator, BuddyConfig, CompactResult, CompactSuitable, MigrateType, Placement,
    EXTFRAG_THRESHOLD,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Scale, HUGE_ORDER, RECLAIM_ROUNDS, ZONE, ZONE_START};
use crate::run::ms;

/// What one run (one policy, one seed) measured.
#[derive(Debug, Clone, Default)]
pub(super) struct RunResult {
    /// Order-9 unusable index (thousandths) at each sample.
    pub(super) series9: Vec<f64>,
    /// Means over the steady part (after memory first filled).
    pub(super) unusable9_mean: f64,
    pub(super) unusable10_mean: f64,
    pub(super) unusable9_final: f64,
    pub(super) unusable10_final: f64,
    /// `None`: the kernel's -1 sentinel, an order-9 request would succeed
    /// (no fragmentation to measure); never averaged.
    pub(super) frag9_final: Option<f64>,
    pub(super) free_final: f64,
    pub(super) huge_attempts: u64,
    pub(super) huge_ok: u64,
    pub(super) huge_first_try: u64,
    pub(super) huge_latency_us: f64,
    pub(super) alloc_latency_ns: f64,
    pub(super) alloc_failures: u64,
    pub(super) extfrag_lines: [String; 3],
    /// Huge pages obtained so far, at each sample.
    pub(super) huge_series: Vec<f64>,
    /// Per successful huge page: pages moved plus pages reclaimed for it.
    pub(super) huge_work: Vec<f64>,
    pub(super) huge_moved: u64,
    pub(super) huge_reclaimed: u64,
    pub(super) compact_runs: u64,
    pub(super) compact_success: u64,
    pub(super) compact_skipped: u64,
    pub(super) migrate_scanned: u64,
    pub(super) free_scanned: u64,
}

/// One allocation request, drawn identically for both policies.
pub(super) struct Request {
    pub(super) order: u8,
    pub(super) mt: MigrateType,
    /// `None`: page cache, lives on the LRU until reclaimed.
    pub(super) lifetime: Option<u64>,
}

/// Exactly four draws per tick, whatever happens to the request. Mean
/// lifetimes scale with the zone size `n` so that, in steady state, the
/// timed classes fill about 45% of the zone (anonymous 20%, unmovable 11%,
/// larger movable 7%, reclaimable 7%) and page cache the rest:
///
/// ```text
///   share  class                     order      mean lifetime
///   70.0%  page cache, movable       0          until reclaimed (LRU)
///   15.0%  anonymous, movable        0          1.33 n
///    4.0%  movable                   1..3       0.35 n
///    4.9%  slab, unmovable, long     0..3       0.93 n
///    2.1%  slab, unmovable, short    0..3       0.05 n
///    4.0%  reclaimable               0..1       1.1 n
/// ```
pub(super) fn draw(rng: &mut StdRng, n: f64) -> Request {
    let class: u32 = rng.gen_range(0..1000);
    let pick: u32 = rng.gen_range(0..100);
    let u: f64 = rng.gen_range(f64::EPSILON..1.0);
    let long: bool = rng.gen_bool(0.7);
    let exp = |mean: f64| Some((-u.ln() * mean * n) as u64 + 1);
    let slab_order = |p: u32| match p {
        0..=59 => 0,
        60..=79 => 1,
        80..=89 => 2,
        _ => 3,
    };
    match class {
        0..=699 => Request {
            order: 0,
            mt: MigrateType::Movable,
            lifetime: None,
        },
        700..=849 => Request {
            order: 0,
            mt: MigrateType::Movable,
            lifetime: exp(1.33),
        },
        850..=889 => Request {
            order: 1 + (pick % 3) as u8,
            mt: MigrateType::Movable,
            lifetime: exp(0.35),
        },
        890..=959 => Request {
            order: slab_order(pick),
            mt: MigrateType::Unmovable,
            lifetime: if long { exp(0.93) } else { exp(0.05) },
        },
        _ => Request {
            order: (pick % 2) as u8,
            mt: MigrateType::Reclaimable,
            lifetime: exp(1.1),
        },
    }
}

/// The simulated system: the zone, live allocations, the page-cache LRU.
///
/// Live allocations are named by handles so that compaction can move them:
/// `pfn_of[h]` is where handle `h` lives, `handle_at[pfn - start]` names
/// the handle of the block starting there.
struct Sim {
    b: BuddyAllocator,
    expiry: BinaryHeap<Reverse<(u64, u32, u8)>>,
    lru: VecDeque<u32>,
    pfn_of: Vec<u64>,
    spare: Vec<u32>,
    handle_at: Vec<u32>,
    compaction: bool,
    low: u64,
    high: u64,
    batch: u64,
    filled: bool,
}

impl Sim {
    fn new(placement: Placement, frames: u64, compaction: bool) -> Self {
        let cfg = BuddyConfig {
            placement,
            ..BuddyConfig::default()
        };
        let mut b = BuddyAllocator::new(ZONE_START, frames, cfg).expect("valid zone");
        b.add_free_range(ZONE_START, frames).expect("fresh zone");
        Sim {
            b,
            expiry: BinaryHeap::new(),
            lru: VecDeque::new(),
            pfn_of: Vec::new(),
            spare: Vec::new(),
            handle_at: vec![u32::MAX; frames as usize],
            compaction,
            low: frames / 64,
            high: frames / 32,
            batch: frames / 2048,
            filled: false,
        }
    }

    fn expire(&mut self, now: u64) {
        while let Some(&Reverse((t, pfn, order))) = self.expiry.peek() {
            if t > now {
                break;
            }
            self.expiry.pop();
            let pfn = self.release(pfn);
            self.b.free(pfn, order).expect("live allocation");
        }
    }

    /// Reclaims the oldest page cache until `target` pages are free.
    fn reclaim_to(&mut self, target: u64) {
        while self.b.free_pages() < target {
            let Some(h) = self.lru.pop_front() else {
                break;
            };
            let pfn = self.release(h);
            self.b.free(pfn, 0).expect("cached page");
        }
    }

    fn kswapd(&mut self) {
        if self.b.free_pages() < self.low {
            self.filled = true;
            self.reclaim_to(self.high);
        }
    }

    /// A handle for the block at `pfn`.
    fn handle(&mut self, pfn: u64) -> u32 {
        let h = match self.spare.pop() {
            Some(h) => {
                self.pfn_of[h as usize] = pfn;
                h
            }
            None => {
                self.pfn_of.push(pfn);
                (self.pfn_of.len() - 1) as u32
            }
        };
        self.handle_at[(pfn - ZONE_START) as usize] = h;
        h
    }

    /// Retires handle `h`; returns where its block is.
    fn release(&mut self, h: u32) -> u64 {
        self.spare.push(h);
        self.pfn_of[h as usize]
    }

    fn keep(&mut self, now: u64, pfn: u64, req: &Request) {
        let h = self.handle(pfn);
        match req.lifetime {
            None => self.lru.push_back(h),
            Some(l) => self.expiry.push(Reverse((now + l, h, req.order))),
        }
    }

    /// Direct compaction for a huge page when the fragmentation index says
    /// it can help; the callback moves the owner of each moved block.
    fn compact(&mut self, r: &mut RunResult) -> u64 {
        if self.b.compaction_suitable(HUGE_ORDER, EXTFRAG_THRESHOLD) != CompactSuitable::Continue {
            r.compact_skipped += 1;
            return 0;
        }
        let Sim {
            b,
            pfn_of,
            handle_at,
            ..
        } = self;
        let out = b
            .compact(HUGE_ORDER, MigrateType::Movable, |old, new, _order| {
                let h = handle_at[(old - ZONE_START) as usize];
                handle_at[(new - ZONE_START) as usize] = h;
                pfn_of[h as usize] = new;
                true
            })
            .expect("order 9 is valid");
        r.compact_runs += 1;
        r.compact_success += u64::from(out.result == CompactResult::Success);
        r.migrate_scanned += out.stats.migrate_scanned;
        r.free_scanned += out.stats.free_scanned;
        out.stats.moved_pages
    }

    /// A huge-page attempt with direct reclaim; returns (ok, first try).
    fn try_huge(&mut self, now: u64, hold: u64, r: &mut RunResult) {
        r.huge_attempts += 1;
        let t0 = Instant::now();
        let (mut moved, mut reclaimed) = (0u64, 0u64);
        for round in 0..=RECLAIM_ROUNDS {
            let mut got = self.b.alloc(HUGE_ORDER, MigrateType::Movable);
            if got.is_err() && self.compaction {
                moved += self.compact(r);
                got = self.b.alloc(HUGE_ORDER, MigrateType::Movable);
            }
            if let Ok(pfn) = got {
                r.huge_latency_us += ms(t0.elapsed()) * 1e3;
                r.huge_ok += 1;
                r.huge_first_try += u64::from(round == 0 && moved == 0);
                r.huge_work.push((moved + reclaimed) as f64);
                r.huge_moved += moved;
                r.huge_reclaimed += reclaimed;
                let h = self.handle(pfn);
                self.expiry.push(Reverse((now + hold, h, HUGE_ORDER)));
                return;
            }
            if self.lru.is_empty() {
                return;
            }
            let before = self.b.free_pages();
            self.reclaim_to(before + self.batch);
            reclaimed += self.b.free_pages() - before;
        }
    }
}

pub(super) fn run_one(placement: Placement, compaction: bool, seed: u64, s: &Scale) -> RunResult {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sim = Sim::new(placement, s.frames, compaction);
    let mut r = RunResult::default();
    let sample_every = (s.ticks / s.samples).max(1);
    let (mut steady, mut sum9, mut sum10) = (0u64, 0f64, 0f64);
    let (mut alloc_ns, mut allocs) = (0f64, 0u64);
    for now in 0..s.ticks {
        sim.expire(now);
        let req = draw(&mut rng, s.frames as f64);
        let t0 = Instant::now();
        let mut got = sim.b.alloc(req.order, req.mt);
        alloc_ns += t0.elapsed().as_nanos() as f64;
        allocs += 1;
        if got.is_err() {
            sim.reclaim_to(sim.high);
            got = sim.b.alloc(req.order, req.mt);
        }
        match got {
            Ok(pfn) => sim.keep(now, pfn, &req),
            Err(_) => r.alloc_failures += 1,
        }
        sim.kswapd();
        if now % s.huge_every == s.huge_every - 1 {
            sim.try_huge(now, s.huge_hold, &mut r);
        }
        if now % sample_every == sample_every - 1 {
            let u9 = f64::from(sim.b.unusable_free_index(9));
            r.series9.push(u9);
            r.huge_series.push(r.huge_ok as f64);
            if sim.filled {
                steady += 1;
                sum9 += u9;
                sum10 += f64::from(sim.b.unusable_free_index(10));
            }
        }
    }
    let b = &sim.b;
    r.unusable9_mean = sum9 / steady.max(1) as f64;
    r.unusable10_mean = sum10 / steady.max(1) as f64;
    r.unusable9_final = f64::from(b.unusable_free_index(9));
    r.unusable10_final = f64::from(b.unusable_free_index(10));
    r.frag9_final = match b.fragmentation_index(9) {
        -1000 => None,
        f => Some(f64::from(f)),
    };
    r.free_final = b.free_pages() as f64;
    r.huge_latency_us /= r.huge_ok.max(1) as f64;
    r.alloc_latency_ns = alloc_ns / allocs.max(1) as f64;
    r.extfrag_lines = [
        b.buddyinfo(ZONE),
        b.unusable_index_line(ZONE),
        b.extfrag_index_line(ZONE),
    ];
    debug_assert!(b.check().is_ok());
    r
}
