// The brute-force model, operations and step driver of `tests/vblock_model.rs`,
// shared (by `include!`, never copied) with the seeded fuzz driver
// (`tests/fuzz_driver.rs`) and the cargo-fuzz targets (`fuzz/`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use mmkit::error::{AllocError, FreeError};
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

#[derive(Debug, Clone, arbitrary::Arbitrary)]
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
        // A block stays on its CPU's list while it has free pages.
        for (cpu, blocks) in self.m.cpus.iter().enumerate() {
            let listed = blocks.iter().filter(|b| b.count(Page::Free) > 0).count();
            prop_assert_eq!(self.vb.listed_blocks(cpu), Some(listed), "CPU {} list", cpu);
        }
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
