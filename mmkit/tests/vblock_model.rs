//! `vblock` against a brute-force model, step by step, for both policies;
//! a multi-threaded no-overlap stress test; unit tests for the dirty range
//! and block release.

use std::collections::BTreeMap;
use std::sync::Mutex;

use mmkit::error::{AllocError, FreeError};
use mmkit::range::RangeAllocator;
use mmkit::vblock::{ConcurrentVblock, Config, Policy, VblockAllocator};
use mmkit::vmap::VmapAllocator;
use proptest::prelude::*;

const START: u64 = 0x1000_0000;
const END: u64 = 0x10_0000_0000;

/// The range allocator under test, with automatic lazy purges off so the
/// model knows every lazily freed area until an alias flush.
fn range() -> VmapAllocator {
    let mut r = VmapAllocator::new(START, END).expect("valid space");
    r.set_lazy_max(u64::MAX);
    r
}

// ---------------------------------------------------------------------------
// The brute-force model: per-CPU lists of blocks with one state per page.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Page {
    Free,
    Live,
    Dirty,
}

struct MBlock {
    va: u64,
    pages: Vec<Page>,
    /// Pages unmapped since the last alias flush.
    unflushed: Vec<bool>,
}

impl MBlock {
    fn count(&self, p: Page) -> usize {
        self.pages.iter().filter(|&&x| x == p).count()
    }
    fn fragmented(&self, force: bool) -> bool {
        let (free, dirty) = (self.count(Page::Free), self.count(Page::Dirty));
        self.count(Page::Live) == 0
            && dirty != self.pages.len()
            && (force || free < self.pages.len() / 4)
    }
}

struct Model {
    cfg: Config,
    policy: Policy,
    /// Per CPU: blocks in list order (including full ones, skipped).
    cpus: Vec<Vec<MBlock>>,
    /// Live mappings: addr -> (pages asked, pages used).
    live: BTreeMap<u64, (u64, u64)>,
    /// Ranges freed lazily since the last alias flush.
    lazy: Vec<(u64, u64)>,
    created: u64,
    released: u64,
}

/// What the model expects of a map.
enum Expect {
    At(u64),
    /// A new block: Current at its start, Legacy at its lowest aligned run.
    NewBlock,
    Large,
}

impl Model {
    fn new(cfg: Config, policy: Policy, cpus: usize) -> Self {
        Model {
            cfg,
            policy,
            cpus: (0..cpus).map(|_| Vec::new()).collect(),
            live: BTreeMap::new(),
            lazy: Vec::new(),
            created: 0,
            released: 0,
        }
    }

    /// The lowest offset of `n` Free pages: aligned (Legacy) or at the bump.
    fn fit(&self, b: &MBlock, n: usize) -> Option<usize> {
        match self.policy {
            Policy::Current => {
                let used = b
                    .pages
                    .iter()
                    .rposition(|&p| p != Page::Free)
                    .map_or(0, |i| i + 1);
                (b.pages.len() - used >= n).then_some(used)
            }
            Policy::Legacy => (0..b.pages.len())
                .step_by(n)
                .find(|&o| b.pages[o..o + n].iter().all(|&p| p == Page::Free)),
        }
    }

    fn take(&mut self, cpu: usize, i: usize, off: usize, pages: u64, n: usize) -> u64 {
        let b = &mut self.cpus[cpu][i];
        b.pages[off..off + n].fill(Page::Live);
        let addr = b.va + off as u64 * self.cfg.page_size;
        self.live.insert(addr, (pages, n as u64));
        addr
    }

    fn release(&mut self, cpu: usize, i: usize) {
        let b = self.cpus[cpu].remove(i);
        self.lazy.push((b.va, b.va + self.cfg.block_size()));
        self.released += 1;
    }

    fn purge_fragmented(&mut self, cpu: usize, force: bool) {
        let mut i = 0;
        while i < self.cpus[cpu].len() {
            if self.cpus[cpu][i].count(Page::Free) > 0 && self.cpus[cpu][i].fragmented(force) {
                self.release(cpu, i);
            } else {
                i += 1;
            }
        }
    }

    /// First fit over the CPU's list (blocks with free pages only).
    fn map(&mut self, cpu: usize, pages: u64) -> Expect {
        if pages > self.cfg.max_alloc {
            return Expect::Large;
        }
        let n = pages.next_power_of_two() as usize;
        let mut purge = false;
        let mut hit = None;
        for (i, b) in self.cpus[cpu].iter().enumerate() {
            if b.count(Page::Free) < n {
                continue;
            }
            match self.fit(b, n) {
                Some(off) => {
                    hit = Some((i, off));
                    break;
                }
                None => purge |= b.count(Page::Live) == 0,
            }
        }
        let addr = hit.map(|(i, off)| self.take(cpu, i, off, pages, n));
        if purge {
            self.purge_fragmented(cpu, true);
        }
        addr.map_or(Expect::NewBlock, Expect::At)
    }

    /// Records the block the allocator created at `va` and the map in it.
    fn new_block(&mut self, cpu: usize, va: u64, pages: u64) -> u64 {
        let b = MBlock {
            va,
            pages: vec![Page::Free; self.cfg.bits as usize],
            unflushed: vec![false; self.cfg.bits as usize],
        };
        let i = match self.policy {
            Policy::Current => {
                self.cpus[cpu].push(b);
                self.cpus[cpu].len() - 1
            }
            Policy::Legacy => {
                self.cpus[cpu].insert(0, b);
                0
            }
        };
        self.created += 1;
        let n = pages.next_power_of_two() as usize;
        let off = self.fit(&self.cpus[cpu][i], n).expect("a new block fits");
        self.take(cpu, i, off, pages, n)
    }

    fn find(&self, addr: u64) -> Option<(usize, usize)> {
        self.cpus.iter().enumerate().find_map(|(c, bs)| {
            let bs_size = self.cfg.block_size();
            bs.iter()
                .position(|b| b.va <= addr && addr < b.va + bs_size)
                .map(|i| (c, i))
        })
    }

    /// Unmaps a live mapping (the caller checked it is live).
    fn unmap(&mut self, addr: u64) {
        let (pages, n) = self.live.remove(&addr).expect("live");
        if pages > self.cfg.max_alloc {
            self.lazy.push((addr, addr + pages * self.cfg.page_size));
            return;
        }
        let (cpu, i) = self.find(addr).expect("mapping in a block");
        let b = &mut self.cpus[cpu][i];
        let off = ((addr - b.va) / self.cfg.page_size) as usize;
        b.pages[off..off + n as usize].fill(Page::Dirty);
        b.unflushed[off..off + n as usize].fill(true);
        if b.count(Page::Dirty) == b.pages.len() {
            self.release(cpu, i);
        }
    }

    /// The range one alias flush must cover, or None.
    fn aliases(&mut self) -> Option<(u64, u64)> {
        let page = self.cfg.page_size;
        for cpu in 0..self.cpus.len() {
            if self.policy == Policy::Current {
                self.purge_fragmented(cpu, false);
            }
        }
        let mut span: Vec<(u64, u64)> = std::mem::take(&mut self.lazy);
        for b in self.cpus.iter_mut().flatten() {
            let marks: Vec<usize> = match self.policy {
                Policy::Current => (0..b.pages.len()).filter(|&i| b.unflushed[i]).collect(),
                Policy::Legacy => (0..b.pages.len())
                    .filter(|&i| b.pages[i] == Page::Dirty)
                    .collect(),
            };
            if let (Some(&lo), Some(&hi)) = (marks.first(), marks.last()) {
                span.push((b.va + lo as u64 * page, b.va + (hi as u64 + 1) * page));
            }
            b.unflushed.fill(false);
        }
        let lo = span.iter().map(|s| s.0).min()?;
        Some((lo, span.iter().map(|s| s.1).max()?))
    }

    fn overlaps(&self, addr: u64, len: u64) -> bool {
        let page = self.cfg.page_size;
        self.live
            .range(..addr + len)
            .next_back()
            .is_some_and(|(&a, &(_, n))| a + n * page > addr)
    }
}

// ---------------------------------------------------------------------------
// The proptest.

#[derive(Debug, Clone)]
enum Op {
    Map {
        cpu: usize,
        pages: u64,
    },
    Unmap {
        pick: usize,
    },
    /// A bad unmap: 0 wrong page count, 1 interior address, 2 double unmap,
    /// 3 unknown address, 4 zero pages.
    Bad {
        kind: u8,
        pick: usize,
    },
    Aliases,
}

fn op(max: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2usize, 1..=max).prop_map(|(cpu, pages)| Op::Map { cpu, pages }),
        1 => (0..2usize, max + 1..=3 * max).prop_map(|(cpu, pages)| Op::Map { cpu, pages }),
        5 => any::<usize>().prop_map(|pick| Op::Unmap { pick }),
        1 => (0..5u8, any::<usize>()).prop_map(|(kind, pick)| Op::Bad { kind, pick }),
        1 => Just(Op::Aliases),
    ]
}

fn configs() -> impl Strategy<Value = Config> {
    prop_oneof![
        Just(Config {
            page_size: 4096,
            max_alloc: 8,
            bits: 16
        }),
        Just(Config {
            page_size: 4096,
            max_alloc: 8,
            bits: 32
        }),
        Just(Config {
            page_size: 4096,
            max_alloc: 16,
            bits: 128
        }),
        Just(Config {
            page_size: 4096,
            max_alloc: 5,
            bits: 64
        }),
    ]
}

struct Run {
    vb: VblockAllocator<VmapAllocator>,
    m: Model,
    unmapped: Vec<(u64, u64)>,
}

impl Run {
    fn map(&mut self, cpu: usize, pages: u64) -> Result<(), TestCaseError> {
        let expect = self.m.map(cpu, pages);
        let addr = self
            .vb
            .map(cpu, pages)
            .map_err(|e| TestCaseError::fail(format!("map: {e}")))?;
        let page = self.m.cfg.page_size;
        match expect {
            Expect::At(a) => prop_assert_eq!(addr, a, "map({}, {}) address", cpu, pages),
            Expect::Large => {
                prop_assert!(!self.m.overlaps(addr, pages * page) && addr % page == 0);
                self.m.live.insert(addr, (pages, pages));
            }
            Expect::NewBlock => {
                let bs = self.m.cfg.block_size();
                let va = addr & !(bs - 1);
                prop_assert!(
                    self.m.find(va).is_none() && !self.m.overlaps(va, bs),
                    "new block {:#x} overlaps",
                    va
                );
                prop_assert_eq!(self.m.new_block(cpu, va, pages), addr);
            }
        }
        Ok(())
    }

    fn bad(&mut self, kind: u8, pick: usize) -> Result<(), TestCaseError> {
        let before = self.vb.counters();
        let page = self.m.cfg.page_size;
        let live: Vec<(u64, u64)> = self.m.live.iter().map(|(&a, &(p, _))| (a, p)).collect();
        let (addr, pages) = match kind {
            0 if !live.is_empty() => {
                let (a, p) = live[pick % live.len()];
                (a, if p == 1 { 2 } else { p - 1 })
            }
            1 if !live.is_empty() => {
                let (a, p) = live[pick % live.len()];
                (a + page, p)
            }
            2 if !self.unmapped.is_empty() => self.unmapped[pick % self.unmapped.len()],
            4 => (START, 0),
            _ => (START + (pick as u64 % 4096) * page + 7, 1),
        };
        if self.m.live.get(&addr).is_some_and(|&(p, _)| p == pages) {
            return Ok(()); // an unmapped address that was mapped again: not bad
        }
        let r = self.vb.unmap(addr, pages);
        let want = if pages == 0 {
            FreeError::Invalid
        } else {
            FreeError::NotAllocated
        };
        prop_assert_eq!(
            r,
            Err(want),
            "bad unmap({:#x}, {}) kind {}",
            addr,
            pages,
            kind
        );
        prop_assert_eq!(
            self.vb.counters(),
            before,
            "a bad unmap changed the counters"
        );
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Map { cpu, pages } => self.map(cpu, pages)?,
            Op::Unmap { pick } if !self.m.live.is_empty() => {
                let (&addr, &(pages, _)) = self
                    .m
                    .live
                    .iter()
                    .nth(pick % self.m.live.len())
                    .expect("nonempty");
                self.m.unmap(addr);
                prop_assert_eq!(self.vb.unmap(addr, pages), Ok(()));
                self.unmapped.push((addr, pages));
            }
            Op::Unmap { .. } => {}
            Op::Bad { kind, pick } => self.bad(kind, pick)?,
            Op::Aliases => {
                let want = self.m.aliases();
                let mut got = Vec::new();
                let flushed = self.vb.unmap_aliases(&mut |s, e| got.push((s, e)));
                prop_assert_eq!(flushed, want.is_some());
                prop_assert_eq!(
                    got,
                    want.into_iter().collect::<Vec<_>>(),
                    "alias flush range"
                );
            }
        }
        let c = self.vb.counters();
        prop_assert_eq!(
            (c.blocks_created, c.blocks_released),
            (self.m.created, self.m.released)
        );
        // Pages asked for, not the 2^order slots blocks reserve for them.
        let live: u64 = self.m.live.values().map(|&(p, _)| p).sum();
        prop_assert_eq!(self.vb.live_pages(), live);
        self.vb
            .check()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        Ok(())
    }
}

fn run_ops(cfg: Config, policy: Policy, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut run = Run {
        vb: VblockAllocator::new(range(), cfg, policy, 2).expect("valid"),
        m: Model::new(cfg, policy, 2),
        unmapped: Vec::new(),
    };
    for op in ops {
        run.step(op)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn legacy_matches_model(cfg in configs(), ops in prop::collection::vec(op(16), 1..250)) {
        let ops: Vec<Op> = ops.into_iter().map(|o| clamp_op(o, cfg.max_alloc)).collect();
        run_ops(cfg, Policy::Legacy, &ops)?;
    }

    #[test]
    fn current_matches_model(cfg in configs(), ops in prop::collection::vec(op(16), 1..250)) {
        let ops: Vec<Op> = ops.into_iter().map(|o| clamp_op(o, cfg.max_alloc)).collect();
        run_ops(cfg, Policy::Current, &ops)?;
    }
}

/// Rescales map sizes drawn for max_alloc 16 to the config's max_alloc,
/// keeping small maps small and large ones large.
fn clamp_op(op: Op, max: u64) -> Op {
    match op {
        Op::Map { cpu, pages } if pages <= 16 => Op::Map {
            cpu,
            pages: 1 + (pages - 1) % max,
        },
        Op::Map { cpu, pages } => Op::Map {
            cpu,
            pages: max + 1 + pages % (2 * max),
        },
        o => o,
    }
}

// ---------------------------------------------------------------------------
// Unit tests.

const SMALL: Config = Config {
    page_size: 4096,
    max_alloc: 8,
    bits: 32,
};

#[test]
fn dirty_range_is_flushed_once_then_forgotten() {
    let mut vb = VblockAllocator::new(range(), SMALL, Policy::Current, 1).unwrap();
    let a = vb.map(0, 2).unwrap();
    let b = vb.map(0, 3).unwrap(); // uses 4 pages
    let c = vb.map(0, 1).unwrap();
    assert_eq!((b - a, c - b), (2 * 4096, 4 * 4096));
    vb.unmap(b, 3).unwrap();
    let mut got = Vec::new();
    assert!(vb.unmap_aliases(&mut |s, e| got.push((s, e))));
    assert_eq!(got, vec![(b, b + 4 * 4096)]);
    // Nothing dirty since: no flush at all.
    assert!(!vb.unmap_aliases(&mut |s, e| got.push((s, e))));
    vb.unmap(a, 2).unwrap();
    vb.unmap(c, 1).unwrap();
    assert!(vb.unmap_aliases(&mut |s, e| got.push((s, e))));
    assert_eq!(
        got[1],
        (a, c + 4096),
        "two unflushed unmaps: one covering range"
    );
    assert_eq!(vb.counters().flushes, 2);
    vb.check().unwrap();
}

#[test]
fn legacy_reflushes_its_dirty_bitmap() {
    let mut vb = VblockAllocator::new(range(), SMALL, Policy::Legacy, 1).unwrap();
    let a = vb.map(0, 1).unwrap();
    let b = vb.map(0, 2).unwrap();
    assert_eq!(b - a, 2 * 4096, "aligned order-1 run after page 0");
    let c = vb.map(0, 1).unwrap();
    assert_eq!(c - a, 4096, "the hole below is filled first");
    vb.unmap(a, 1).unwrap();
    let mut got = Vec::new();
    vb.unmap_aliases(&mut |s, e| got.push((s, e)));
    vb.unmap_aliases(&mut |s, e| got.push((s, e)));
    assert_eq!(
        got,
        vec![(a, a + 4096); 2],
        "2008 never cleared the dirty bitmap"
    );
    vb.check().unwrap();
}

#[test]
fn a_fully_dirty_block_is_released_lazily_and_flushed_with_aliases() {
    for policy in [Policy::Legacy, Policy::Current] {
        let mut vb = VblockAllocator::new(range(), SMALL, policy, 1).unwrap();
        let maps: Vec<u64> = (0..4).map(|_| vb.map(0, 8).unwrap()).collect();
        assert_eq!(vb.blocks(), 1);
        let va = maps[0];
        assert!(
            maps.iter().all(|&m| m & !(SMALL.block_size() - 1) == va),
            "one block"
        );
        for &m in &maps[..3] {
            vb.unmap(m, 8).unwrap();
        }
        assert_eq!(
            vb.counters().blocks_released,
            0,
            "{policy:?}: a live map pins the block"
        );
        vb.unmap(maps[3], 8).unwrap();
        let c = vb.counters();
        assert_eq!((c.blocks_created, c.blocks_released), (1, 1), "{policy:?}");
        assert_eq!(vb.blocks(), 0);
        let st = vb.range().stats();
        assert_eq!(
            (st.live_areas, st.lazy_bytes),
            (0, SMALL.block_size()),
            "released lazily"
        );
        let mut got = Vec::new();
        assert!(vb.unmap_aliases(&mut |s, e| got.push((s, e))));
        assert_eq!(got, vec![(va, va + SMALL.block_size())]);
        assert_eq!(vb.range().stats().lazy_bytes, 0);
        vb.check().unwrap();
    }
}

#[test]
fn current_purges_fragmented_blocks_when_space_runs_out() {
    // Room for exactly two blocks.
    let r = VmapAllocator::new(0, 2 * SMALL.block_size()).unwrap();
    let mut vb = VblockAllocator::new(r, SMALL, Policy::Current, 2).unwrap();
    // CPU 0: a block with 1 page left free, nothing live.
    for _ in 0..31 {
        let a = vb.map(0, 1).unwrap();
        vb.unmap(a, 1).unwrap();
    }
    let kept = vb.map(1, 8).unwrap(); // CPU 1's block: the second one
    for _ in 0..3 {
        vb.map(1, 8).unwrap(); // fills it
    }
    assert_eq!(vb.counters().blocks_created, 2);
    // CPU 1 needs a third block: only purging CPU 0's fragmented one helps.
    let third = vb.map(1, 8).unwrap();
    let c = vb.counters();
    assert_eq!(
        (c.blocks_created, c.fragmented_purges, c.blocks_released),
        (3, 1, 1)
    );
    assert_eq!(third, 0, "the purged block's space, reused");
    for _ in 0..3 {
        vb.map(1, 8).unwrap();
    }
    let before = vb.counters();
    assert_eq!(
        vb.map(1, 8),
        Err(AllocError::NoSpace),
        "nothing left to purge"
    );
    assert_eq!(vb.counters(), before);
    vb.check().unwrap();
    vb.unmap(kept, 8).unwrap();
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let mut vb = VblockAllocator::new(range(), SMALL, Policy::Current, 1).unwrap();
    assert_eq!(vb.map(0, 0), Err(AllocError::Invalid));
    assert_eq!(vb.map(1, 1), Err(AllocError::Invalid), "no CPU 1");
    assert_eq!(
        vb.map(0, u64::MAX),
        Err(AllocError::Invalid),
        "size overflows"
    );
    assert_eq!(vb.map(0, u64::MAX / 4096), Err(AllocError::NoSpace));
    let a = vb.map(0, 3).unwrap();
    let big = vb.map(0, 9).unwrap();
    let before = vb.counters();
    assert_eq!(
        vb.unmap(a, 4),
        Err(FreeError::NotAllocated),
        "wrong page count"
    );
    assert_eq!(vb.unmap(a, 0), Err(FreeError::Invalid));
    assert_eq!(vb.unmap(a + 1, 3), Err(FreeError::NotAllocated));
    assert_eq!(vb.unmap(big, 10), Err(FreeError::NotAllocated));
    assert_eq!(vb.unmap(u64::MAX, 1), Err(FreeError::NotAllocated));
    assert_eq!(vb.unmap(u64::MAX, u64::MAX), Err(FreeError::NotAllocated));
    assert_eq!(vb.counters(), before);
    vb.unmap(a, 3).unwrap();
    assert_eq!(vb.unmap(a, 3), Err(FreeError::NotAllocated), "double unmap");
    vb.unmap(big, 9).unwrap();
    assert!(VblockAllocator::new(range(), SMALL, Policy::Current, 0).is_err());
    let bad = Config { bits: 8, ..SMALL };
    assert_eq!(
        VblockAllocator::new(range(), bad, Policy::Current, 1).err(),
        Some(AllocError::Invalid)
    );
    vb.check().unwrap();
}

/// Seed 001 scenario 1 at small scale: Legacy never reuses, Current
/// releases about one block per iteration.
#[test]
fn exhaustion_loop_leaks_only_under_legacy() {
    let cfg = Config::KERNEL;
    let small = (cfg.bits - 16) / 8 - 1;
    for policy in [Policy::Legacy, Policy::Current] {
        let mut vb = VblockAllocator::new(range(), cfg, policy, 1).unwrap();
        for _ in 0..20 {
            let a = vb.map(0, 16).unwrap();
            vb.unmap(a, 16).unwrap();
            for _ in 0..small {
                let a = vb.map(0, 8).unwrap();
                vb.unmap(a, 8).unwrap();
            }
        }
        vb.check().unwrap();
        let c = vb.counters();
        match policy {
            Policy::Legacy => assert_eq!((c.blocks_created, c.blocks_released), (20, 0)),
            Policy::Current => assert!(
                c.blocks_created <= 21 && c.blocks_released + 1 >= c.blocks_created,
                "{c:?}"
            ),
        }
    }
}

// ---------------------------------------------------------------------------
// Multi-threaded stress: no two threads ever hold overlapping mappings.

#[test]
fn threads_never_hold_overlapping_mappings() {
    const THREADS: usize = 4;
    const OPS: usize = 40_000;
    for policy in [Policy::Legacy, Policy::Current] {
        let mut r = range();
        r.set_lazy_max(4 * SMALL.block_size());
        let vb = ConcurrentVblock::new(r, SMALL, policy, 2).unwrap();
        // Every live mapping: start -> (end, owner).
        let held: Mutex<BTreeMap<u64, (u64, usize)>> = Mutex::new(BTreeMap::new());
        // Mappings handed from one thread to another, to unmap there.
        let pool: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (vb, held, pool) = (&vb, &held, &pool);
                s.spawn(move || stress_thread(vb, held, pool, t, OPS));
            }
        });
        for (addr, pages) in pool.lock().unwrap().drain(..) {
            held.lock().unwrap().remove(&addr);
            vb.unmap(addr, pages).unwrap();
        }
        vb.check().unwrap();
        let c = vb.counters();
        assert_eq!(c.map_calls, c.unmap_calls, "{policy:?}: every map unmapped");
        assert!(held.lock().unwrap().is_empty());
        assert_eq!(
            c.blocks_created,
            c.blocks_released + vb.with_range(|r| r.stats().live_areas)
        );
    }
}

fn stress_thread(
    vb: &ConcurrentVblock<VmapAllocator>,
    held: &Mutex<BTreeMap<u64, (u64, usize)>>,
    pool: &Mutex<Vec<(u64, u64)>>,
    t: usize,
    ops: usize,
) {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ ((t as u64 + 1) * 0x1234_5678);
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut mine: Vec<(u64, u64)> = Vec::new();
    for i in 0..ops {
        let r = next();
        if mine.len() < 24 && (r % 3 != 0 || mine.is_empty()) {
            let pages = if r % 29 == 0 {
                9 + r % 7
            } else {
                1 + (r >> 8) % 8
            };
            let addr = if t % 2 == 0 {
                vb.map(pages)
            } else {
                vb.map_on((r >> 20) as usize % 2, pages)
            }
            .unwrap();
            let end = addr + pages * 4096;
            let mut h = held.lock().unwrap();
            if let Some((&a, &(e, owner))) = h.range(..end).next_back() {
                assert!(
                    e <= addr,
                    "thread {t}: [{addr:#x}, {end:#x}) overlaps [{a:#x}, {e:#x}) of thread {owner}"
                );
            }
            h.insert(addr, (end, t));
            mine.push((addr, pages));
        } else if !mine.is_empty() {
            let (addr, pages) = mine.swap_remove((r >> 16) as usize % mine.len());
            if r % 5 == 0 {
                pool.lock().unwrap().push((addr, pages)); // another thread unmaps it
                continue;
            }
            held.lock().unwrap().remove(&addr);
            vb.unmap(addr, pages).unwrap();
            let handed = pool.lock().unwrap().pop();
            if let Some((addr, pages)) = handed {
                held.lock().unwrap().remove(&addr);
                vb.unmap(addr, pages).unwrap();
            }
        }
        if i % 997 == 0 {
            vb.unmap_aliases(&mut |s, e| assert!(s < e));
        }
    }
    for (addr, pages) in mine {
        held.lock().unwrap().remove(&addr);
        vb.unmap(addr, pages).unwrap();
    }
}

// ---------------------------------------------------------------------------
// The thread-safe front end, driven from one thread with explicit CPUs,
// answers exactly as the single-threaded one (same addresses, flushes,
// counters, errors), for both policies.

fn compare_fronts(cfg: Config, policy: Policy, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut single = VblockAllocator::new(range(), cfg, policy, 2).expect("valid");
    let shared = ConcurrentVblock::new(range(), cfg, policy, 2).expect("valid");
    let mut live: Vec<(u64, u64)> = Vec::new();
    for op in ops {
        match *op {
            Op::Map { cpu, pages } => {
                let a = single.map(cpu, pages);
                prop_assert_eq!(a, shared.map_on(cpu, pages));
                if let Ok(a) = a {
                    live.push((a, pages));
                }
            }
            Op::Unmap { pick } if !live.is_empty() => {
                let (a, p) = live.swap_remove(pick % live.len());
                prop_assert_eq!(single.unmap(a, p), Ok(()));
                prop_assert_eq!(shared.unmap(a, p), Ok(()));
            }
            Op::Unmap { .. } => {}
            Op::Bad { kind, pick } => {
                let (a, p) = live
                    .get(pick % live.len().max(1))
                    .copied()
                    .unwrap_or((START, 1));
                let (a, p) = if kind % 2 == 0 {
                    (a, p + 1)
                } else {
                    (a + 4096, p)
                };
                if live.contains(&(a, p)) {
                    continue; // a live mapping: not a bad unmap
                }
                prop_assert_eq!(single.unmap(a, p), shared.unmap(a, p));
            }
            Op::Aliases => {
                let (mut x, mut y) = (Vec::new(), Vec::new());
                single.unmap_aliases(&mut |s, e| x.push((s, e)));
                shared.unmap_aliases(&mut |s, e| y.push((s, e)));
                prop_assert_eq!(x, y);
            }
        }
        prop_assert_eq!(single.counters(), shared.counters());
        shared
            .check()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn concurrent_front_end_matches_single(
        cfg in configs(),
        legacy in any::<bool>(),
        ops in prop::collection::vec(op(16), 1..200),
    ) {
        let ops: Vec<Op> = ops.into_iter().map(|o| clamp_op(o, cfg.max_alloc)).collect();
        let policy = if legacy { Policy::Legacy } else { Policy::Current };
        compare_fronts(cfg, policy, &ops)?;
    }
}

/// Issue 12, defect 1: `max_alloc` above 2^63 made `next_power_of_two` wrap
/// to 0 (release builds), so validate accepted it and `map` handed out the
/// same pages twice; `pages as u32` truncated 2^32 + 1 to 1.
#[test]
fn huge_max_alloc_is_refused_never_overlapping() {
    for max_alloc in [u64::MAX, (1 << 63) + 1, 1 << 32, 1 << 20] {
        let cfg = Config {
            page_size: 4096,
            max_alloc,
            bits: 1024,
        };
        assert_eq!(cfg.validate(), Err(AllocError::Invalid), "{max_alloc:#x}");
        assert_eq!(cfg.order_of(u64::MAX), None, "no order above max_alloc");
        for policy in [Policy::Legacy, Policy::Current] {
            let range = VmapAllocator::new(0, 64 << 20).unwrap();
            assert_eq!(
                VblockAllocator::new(range, cfg, policy, 1).err(),
                Some(AllocError::Invalid)
            );
            let range = VmapAllocator::new(0, 64 << 20).unwrap();
            assert_eq!(
                ConcurrentVblock::new(range, cfg, policy, 1).err(),
                Some(AllocError::Invalid)
            );
        }
    }
}

/// Issue 12, defect 1: a request of 2^32 + 1 pages is large (range
/// allocator), never truncated to one page from a block.
#[test]
fn page_counts_never_truncate() {
    let mut vb = VblockAllocator::new(range(), SMALL, Policy::Current, 1).unwrap();
    let pages = (1 << 32) + 1;
    assert_eq!(vb.map(0, pages), Err(AllocError::NoSpace));
    assert_eq!(vb.unmap(START, pages), Err(FreeError::NotAllocated));
    assert_eq!(vb.blocks(), 0);
    vb.check().unwrap();
}

/// Issue 12, defect 5: `live_pages` counts the pages asked for, not the
/// power-of-two slot a block reserves for them.
#[test]
fn live_pages_counts_requested_pages() {
    for policy in [Policy::Legacy, Policy::Current] {
        let mut vb = VblockAllocator::new(range(), Config::KERNEL, policy, 1).unwrap();
        let a = vb.map(0, 17).unwrap();
        assert_eq!(vb.live_pages(), 17, "{policy:?}");
        let b = vb.map(0, 100).unwrap(); // large
        assert_eq!(vb.live_pages(), 117);
        vb.unmap(a, 17).unwrap();
        assert_eq!(vb.live_pages(), 100);
        vb.unmap(b, 100).unwrap();
        assert_eq!(vb.live_pages(), 0);
    }
}

/// Issue 12: `cpus = u32::MAX` aborted allocating the queues; a CPU count
/// above `MAX_CPUS` is refused before anything is allocated.
#[test]
fn absurd_cpu_counts_are_refused_before_allocating() {
    for cpus in [u32::MAX as usize, 1 << 20] {
        let r = VblockAllocator::new(range(), Config::KERNEL, Policy::Current, cpus);
        assert_eq!(r.err(), Some(AllocError::Invalid), "{cpus} cpus");
        let r = ConcurrentVblock::new(range(), Config::KERNEL, Policy::Current, cpus);
        assert_eq!(r.err(), Some(AllocError::Invalid), "{cpus} cpus");
    }
}
