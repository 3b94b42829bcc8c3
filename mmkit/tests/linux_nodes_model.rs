//! `LinuxNodes` (Linux 6.12's vmap node pools over its free tree)
//! against a brute-force model written from mm/vmalloc.c's rules: a sorted
//! list of free ranges scanned linearly, pools as lists with the newest
//! area first. Every answer, the free blocks and `check()` must agree
//! after every step. For an alignment above a page the free tree's answer
//! depends on its shape, which the model does not keep: there the answer
//! must be a free aligned fit in the window no higher than the model's
//! (the first block `size + align - 1` long), and the model takes it.

use mmkit::nodes::{LinuxNodes, PurgeStep};
use mmkit::range::RangeAllocator;
use proptest::prelude::*;

const PAGE: u64 = 4096;
const SPACE: (u64, u64) = (PAGE, 8 << 20);
const VMALLOC: (u64, u64) = (1 << 20, 6 << 20);

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        cpu: usize,
        pages: u64,
        align_shift: u32,
        vmalloc: bool,
    },
    FreeLazy(usize),
    Purge,
    PurgeFull,
    /// The first half of a purge (full or not); `Purge` ends it.
    PurgeBegin(bool),
    /// One node's share of the purge begun (modulo nodes + 1, so that an
    /// absent node is asked too).
    PurgeNode(usize),
    /// One step of a purge's decay and take (nodes modulo nodes + 1, pool
    /// sizes up to 257 pages, so that bad ones are asked too).
    Step(PurgeStep),
    /// A request given an address (`LinuxNodes::alloc_at`): the `pick`-th
    /// of the areas of its size in its pool, set aside by a decay, or
    /// starting a free block in its window; or, one past those, the first
    /// page that starts none of them (refused when it is not free).
    AllocAt {
        cpu: usize,
        pages: u64,
        vmalloc: bool,
        pick: usize,
    },
}

/// An area: start, end, the node it is tagged with.
type Area = (u64, u64, Option<usize>);

/// Linux's state: free ranges, live areas with their node, lazy areas,
/// pools (per node, per page count) newest first.
struct Model {
    nodes: usize,
    free: Vec<(u64, u64)>,
    live: Vec<(u64, u64, Option<usize>)>,
    lazy: Vec<(u64, u64, Option<usize>)>,
    pools: Vec<Vec<Vec<u64>>>,
    /// A purge begun: whether full, and the lazy areas it took.
    purging: Option<(bool, Vec<Area>)>,
    /// Whether a `PurgeNode` of the pending purge moved an area.
    moved: bool,
    /// (node, pool index) pools a step detached.
    detached: Vec<(usize, usize)>,
    /// Per node: the areas its decay set aside, not yet free.
    aside: Vec<Vec<(u64, u64)>>,
}

impl Model {
    fn give_back(&mut self, s: u64, e: u64) {
        self.free.push((s, e));
        self.free.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::new();
        for r in self.free.drain(..) {
            match out.last_mut() {
                Some(l) if l.1 == r.0 => l.1 = r.1,
                _ => out.push(r),
            }
        }
        self.free = out;
    }

    /// find_vmap_lowest_match without tree shape: blocks shorter than
    /// size + align - 1 skipped for align > page; the first block with an
    /// aligned fit decides.
    fn fit(&self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        let len = if align > PAGE && hi - lo != size {
            size + align - 1
        } else {
            size
        };
        let start = |s: u64| (s.max(lo) + align - 1) & !(align - 1);
        let &(s, _) = self
            .free
            .iter()
            .find(|&&(s, e)| e - s >= len && start(s) + size <= e)?;
        (start(s) + size <= hi).then_some(start(s))
    }

    fn take(&mut self, a: u64, size: u64) {
        let i = self
            .free
            .iter()
            .position(|&(s, e)| s <= a && a + size <= e)
            .unwrap();
        let (s, e) = self.free.remove(i);
        if a + size < e {
            self.free.insert(i, (a + size, e));
        }
        if s < a {
            self.free.insert(i, (s, a));
        }
    }

    /// `fit`, or for an alignment above a page the tree's answer `shaped`
    /// if it is a free aligned fit in the window no higher than `fit`'s.
    fn fit_or(
        &self,
        size: u64,
        align: u64,
        (lo, hi): (u64, u64),
        shaped: Option<u64>,
    ) -> Option<u64> {
        let own = self.fit(size, align, lo, hi);
        let valid = |a: u64| {
            a % align == 0
                && a >= lo
                && a + size <= hi
                && self.free.iter().any(|&(s, e)| s <= a && a + size <= e)
                && own.map_or(true, |o| a <= o)
        };
        match shaped {
            Some(a) if align > PAGE && valid(a) => Some(a),
            _ => own,
        }
    }

    fn try_alloc(
        &mut self,
        cpu: usize,
        size: u64,
        align: u64,
        (lo, hi): (u64, u64),
        shaped: Option<u64>,
    ) -> Option<u64> {
        let node = (self.nodes > 1 && (lo, hi) == VMALLOC).then_some(cpu % self.nodes);
        let class = (size / PAGE - 1) as usize;
        let attached = |n: &usize| size <= 256 * PAGE && !self.detached.contains(&(*n, class));
        if let Some(n) = node.filter(attached) {
            let pool = &mut self.pools[n][(size / PAGE - 1) as usize];
            if let Some(&newest) = pool.first() {
                pool.remove(0);
                if newest % align == 0 {
                    self.live.push((newest, newest + size, node));
                    return Some(newest);
                }
                pool.push(newest); // rotated to the tail
            }
        }
        let a = self.fit_or(size, align, (lo, hi), shaped)?;
        self.take(a, size);
        self.live.push((a, a + size, node));
        Some(a)
    }

    /// An allocation; `retried`: the first try failed on `LinuxNodes`
    /// (then the model's own fit must fail too before it purges).
    fn alloc(
        &mut self,
        cpu: usize,
        size: u64,
        align: u64,
        window: (u64, u64),
        shaped: Option<u64>,
        retried: bool,
    ) -> Option<u64> {
        let first = if retried { None } else { shaped };
        if let Some(a) = self.try_alloc(cpu, size, align, window, first) {
            return Some(a);
        }
        self.purge(true);
        self.try_alloc(cpu, size, align, window, shaped)
    }

    fn purge(&mut self, full: bool) -> bool {
        self.begin(full);
        self.end()
    }

    /// Where a request of `size` in `window` on `cpu` may be given an
    /// address: its pool's areas, the set-aside areas of its size, the
    /// starts of free blocks that hold it in the window.
    fn holders(&self, cpu: usize, size: u64, (lo, hi): (u64, u64)) -> Vec<u64> {
        let node = (self.nodes > 1 && (lo, hi) == VMALLOC).then_some(cpu % self.nodes);
        let class = (size / PAGE - 1) as usize;
        let pool = node.filter(|_| size <= 256 * PAGE);
        let mut out: Vec<u64> = pool.map_or(vec![], |n| self.pools[n][class].clone());
        let aside = self.aside.iter().flatten();
        out.extend(aside.filter(|&&(s, e)| e - s == size).map(|&(s, _)| s));
        let free = self.free.iter().map(|&(s, e)| (s.max(lo), e.min(hi)));
        out.extend(
            free.filter(|&(s, e)| s < e && e - s >= size)
                .map(|(s, _)| s),
        );
        out
    }

    /// `alloc_at`: the area leaves its pool, the set-aside areas or the
    /// free tree; `None` when it is in none of them.
    fn alloc_at(&mut self, cpu: usize, size: u64, window: (u64, u64), a: u64) -> Option<()> {
        let node = (self.nodes > 1 && window == VMALLOC).then_some(cpu % self.nodes);
        let class = (size / PAGE - 1) as usize;
        let pool = node
            .filter(|_| size <= 256 * PAGE)
            .map(|n| &mut self.pools[n][class]);
        if let Some(i) = pool.as_ref().and_then(|p| p.iter().position(|&p| p == a)) {
            pool.unwrap().remove(i);
        } else if let Some((n, i)) = (0..self.nodes).find_map(|n| {
            let i = self.aside[n].iter().position(|&r| r == (a, a + size))?;
            Some((n, i))
        }) {
            self.aside[n].remove(i);
        } else if self.free.iter().any(|&(s, e)| s <= a && a + size <= e) {
            self.take(a, size);
        } else {
            return None;
        }
        self.live.push((a, a + size, node));
        Some(())
    }

    /// Ends a pending purge; decays every pool and takes the lazy areas.
    fn begin(&mut self, full: bool) {
        self.end();
        for n in 0..self.nodes {
            self.reclaim(n);
        }
        self.detached.clear();
        for n in 0..self.nodes {
            for c in 0..self.pools[n].len() {
                let pool = std::mem::take(&mut self.pools[n][c]);
                let k = if full || pool.len() < 4 {
                    pool.len()
                } else {
                    pool.len() / 4
                };
                for &a in &pool[..k] {
                    self.give_back(a, a + (c as u64 + 1) * PAGE);
                }
                self.pools[n][c] = pool[k..].to_vec();
            }
        }
        self.purging = Some((full, std::mem::take(&mut self.lazy)));
    }

    /// Pools (tagged, not full, at most 256 pages, in address order to
    /// the front) or frees what the pending purge took.
    fn end(&mut self) -> bool {
        let Some((full, taken)) = self.purging.take() else {
            return false;
        };
        let moved = std::mem::take(&mut self.moved);
        self.settle(full, taken) || moved
    }

    /// The lazy list an area is on: its tag, else its 16-page zone's node
    /// round robin.
    fn list_of(&self, (s, _, node): Area) -> usize {
        node.unwrap_or((s / (16 * PAGE)) as usize % self.nodes)
    }

    /// Pools or frees the areas the pending purge took for node `n`.
    fn end_node(&mut self, n: usize) -> bool {
        let Some((full, taken)) = self.purging.take() else {
            return false;
        };
        let (mine, rest): (Vec<Area>, Vec<Area>) =
            taken.into_iter().partition(|&a| self.list_of(a) == n);
        self.purging = Some((full, rest));
        let moved = self.settle(full, mine);
        self.moved |= moved;
        moved
    }

    /// A purge step as mm/vmalloc.c runs it; whether it applied.
    fn step(&mut self, step: PurgeStep) -> bool {
        let ok = |node: usize, pages: u64| node < self.nodes && (1..=256).contains(&pages);
        match step {
            PurgeStep::Start { full } => {
                self.end();
                for n in 0..self.nodes {
                    self.reclaim(n);
                }
                self.detached.clear();
                self.purging = Some((full, Vec::new()));
            }
            PurgeStep::Detach { node, pages } if ok(node, pages) => {
                let c = pages as usize - 1;
                let full = self.purging.as_ref().is_some_and(|p| p.0);
                let pool = &mut self.pools[node][c];
                let k = if full || pool.len() < 4 {
                    pool.len()
                } else {
                    pool.len() / 4
                };
                let aside: Vec<u64> = pool.drain(..k).collect();
                (self.aside[node]).extend(aside.into_iter().map(|a| (a, a + pages * PAGE)));
                if !self.detached.contains(&(node, c)) {
                    self.detached.push((node, c));
                }
            }
            PurgeStep::Attach { node, pages } if ok(node, pages) => {
                self.detached.retain(|&d| d != (node, pages as usize - 1));
            }
            PurgeStep::Reclaim { node } if node < self.nodes => self.reclaim(node),
            PurgeStep::Take { node } if node < self.nodes && self.purging.is_some() => {
                let lazy = std::mem::take(&mut self.lazy);
                let (mine, rest): (Vec<Area>, Vec<Area>) =
                    lazy.into_iter().partition(|&a| self.list_of(a) == node);
                self.lazy = rest;
                self.purging.as_mut().unwrap().1.extend(mine);
            }
            _ => return false,
        }
        true
    }

    /// Node `n`'s set-aside areas are free; its pools attached.
    fn reclaim(&mut self, n: usize) {
        self.detached.retain(|&(node, _)| node != n);
        for (s, e) in std::mem::take(&mut self.aside[n]) {
            self.give_back(s, e);
        }
    }

    /// Pools or frees `taken`; whether it held any area.
    fn settle(&mut self, full: bool, mut taken: Vec<Area>) -> bool {
        taken.sort_unstable();
        for &(s, e, node) in &taken {
            match node {
                Some(n) if !full && e - s <= 256 * PAGE => {
                    self.pools[n][((e - s) / PAGE - 1) as usize].insert(0, s);
                }
                _ => self.give_back(s, e),
            }
        }
        !taken.is_empty()
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..4, prop_oneof![1u64..4, 1u64..300], 0u32..11, any::<bool>()).prop_map(|(cpu, pages, align_shift, vmalloc)| Op::Alloc {
            cpu, pages, align_shift, vmalloc
        }),
        4 => any::<usize>().prop_map(Op::FreeLazy),
        1 => Just(Op::Purge),
        1 => Just(Op::PurgeFull),
        1 => any::<bool>().prop_map(Op::PurgeBegin),
        1 => any::<usize>().prop_map(Op::PurgeNode),
        3 => step(),
        2 => (0usize..4, prop_oneof![1u64..4, 1u64..300], any::<bool>(), any::<usize>())
            .prop_map(|(cpu, pages, vmalloc, pick)| Op::AllocAt { cpu, pages, vmalloc, pick }),
    ]
}

fn step() -> impl Strategy<Value = Op> {
    let at = (0usize..5, 1u64..4);
    prop_oneof![
        any::<bool>().prop_map(|full| PurgeStep::Start { full }),
        at.clone()
            .prop_map(|(node, pages)| PurgeStep::Detach { node, pages }),
        (0usize..5, 255u64..258).prop_map(|(node, pages)| PurgeStep::Detach { node, pages }),
        at.prop_map(|(node, pages)| PurgeStep::Attach { node, pages }),
        (0usize..5).prop_map(|node| PurgeStep::Reclaim { node }),
        (0usize..5).prop_map(|node| PurgeStep::Take { node }),
    ]
    .prop_map(Op::Step)
}

fn run(nodes: usize, ops: &[Op]) -> Result<(), String> {
    let mut n = LinuxNodes::new(SPACE.0, SPACE.1, nodes, VMALLOC).unwrap();
    n.set_lazy_max(u64::MAX);
    let mut m = Model {
        nodes,
        free: vec![SPACE],
        live: vec![],
        lazy: vec![],
        pools: vec![vec![Vec::new(); 256]; nodes],
        purging: None,
        moved: false,
        detached: vec![],
        aside: vec![vec![]; nodes],
    };
    for op in ops {
        match *op {
            Op::Alloc {
                cpu,
                pages,
                align_shift,
                vmalloc,
            } => {
                let (size, align) = (pages * PAGE, PAGE << align_shift);
                let (lo, hi) = if vmalloc { VMALLOC } else { (PAGE, 7 << 20) };
                n.set_cpu(cpu);
                let retries = n.retries();
                let peeked = n.peek(size, align, (lo, hi));
                let got = n.alloc_in(size, align, lo, hi).ok();
                let retried = n.retries() > retries;
                // `peek` is the first try's answer.
                if !retried && peeked != got {
                    return Err(format!("{op:?}: peek {peeked:x?}, alloc {got:x?}"));
                }
                if retried && peeked.is_some() {
                    return Err(format!("{op:?}: peek {peeked:x?}, but alloc retried"));
                }
                let want = m.alloc(cpu, size, align, (lo, hi), got, retried);
                if got != want {
                    return Err(format!("{op:?}: got {got:x?}, model {want:x?}"));
                }
            }
            Op::FreeLazy(i) if !m.live.is_empty() => {
                let area = m.live.remove(i % m.live.len());
                m.lazy.push(area);
                n.free_lazy(area.0).map_err(|e| format!("{op:?}: {e}"))?;
            }
            Op::FreeLazy(_) => {}
            Op::Purge => {
                let want = match m.purging.is_some() {
                    true => m.end(),
                    false => m.purge(false),
                };
                let got = n.purge(&mut |_, _| {});
                if got != want {
                    return Err(format!("purge: got {got}, model {want}"));
                }
            }
            Op::PurgeBegin(full) => {
                n.purge_begin(full);
                m.begin(full);
            }
            Op::PurgeNode(k) => {
                let k = k % (nodes + 1);
                let (got, want) = (n.purge_node(k), m.end_node(k));
                if got != want {
                    return Err(format!("purge node {k}: got {got}, model {want}"));
                }
            }
            Op::Step(step) => {
                let (got, want) = (n.purge_step(step), m.step(step));
                if got != want {
                    return Err(format!("{step:?}: got {got}, model {want}"));
                }
            }
            Op::AllocAt {
                cpu,
                pages,
                vmalloc,
                pick,
            } => {
                let size = pages * PAGE;
                let window = if vmalloc { VMALLOC } else { (PAGE, 7 << 20) };
                let holders = m.holders(cpu, size, window);
                // One past the holders: a page that starts none of them.
                let a = holders
                    .get(pick % (holders.len() + 1))
                    .copied()
                    .unwrap_or_else(|| {
                        (window.0..window.1 - size)
                            .step_by(PAGE as usize)
                            .find(|a| !holders.contains(a))
                            .unwrap_or(window.0)
                    });
                n.set_cpu(cpu);
                let got = n.alloc_at(size, PAGE, window, a).ok();
                let want = m.alloc_at(cpu, size, window, a);
                if got != want {
                    return Err(format!("{op:?} at {a:#x}: got {got:?}, model {want:?}"));
                }
            }
            Op::PurgeFull => {
                let (got, want) = (n.purge_nodes(true), m.purge(true));
                if got != want {
                    return Err(format!("full purge: got {got}, model {want}"));
                }
            }
        }
        n.check().map_err(|e| format!("after {op:?}: {e}"))?;
        let free: Vec<_> = n.free_blocks().map(|r| (r.start, r.end)).collect();
        if free != m.free {
            return Err(format!("after {op:?}: free {free:x?}, model {:x?}", m.free));
        }
        let pooled: usize = m.pools.iter().flatten().map(Vec::len).sum();
        if n.pooled() != pooled {
            return Err(format!(
                "after {op:?}: {} pooled, model {pooled}",
                n.pooled()
            ));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn linux_nodes_match_the_model(nodes in 1usize..4, ops in proptest::collection::vec(op(), 1..200)) {
        run(nodes, &ops).map_err(TestCaseError::fail)?;
    }
}

/// A pool of five areas decays by one (its newest), a pool of three by
/// all three: the kernel's countdown from `len / 4 == 0` runs through the
/// whole list.
#[test]
fn pools_decay_by_a_quarter_or_wholly_below_four() {
    let mut ops = vec![];
    for _ in 0..5 {
        ops.push(Op::Alloc {
            cpu: 1,
            pages: 1,
            align_shift: 0,
            vmalloc: true,
        });
        ops.push(Op::Alloc {
            cpu: 1,
            pages: 2,
            align_shift: 0,
            vmalloc: true,
        });
    }
    for i in 0..5 {
        ops.push(Op::FreeLazy(i));
    }
    ops.push(Op::Purge);
    ops.push(Op::Purge);
    // Pool hits after the decay.
    for pages in [2, 2, 1] {
        ops.push(Op::Alloc {
            cpu: 1,
            pages,
            align_shift: 0,
            vmalloc: true,
        });
    }
    run(2, &ops).unwrap();
}

/// Judged: Linux going to the free tree while the request's pool holds an
/// aligned area marks that pool detached (a purge's decay walks it); the
/// model then answers from the free tree too, until Linux takes from the
/// pool again.
#[test]
fn a_pool_linux_passes_over_is_detached_until_linux_takes_from_it() {
    let mut n = LinuxNodes::new(SPACE.0, SPACE.1, 2, VMALLOC).unwrap();
    let (size, align) = (2 * PAGE, PAGE);
    let a = n.alloc_in(size, align, VMALLOC.0, VMALLOC.1).unwrap();
    let b = n.alloc_in(size, align, VMALLOC.0, VMALLOC.1).unwrap();
    n.free_lazy(a).unwrap();
    n.free_lazy(b).unwrap();
    n.purge(&mut |_, _| {}); // node 0's pool of 2 pages: b, a
    let low = VMALLOC.0 + 2 * size; // the free tree's lowest fit
    assert_eq!(n.peek(size, align, VMALLOC), Some(b));
    assert_eq!(n.alloc_judged(size, align, VMALLOC, low), Ok(Some(b)));
    assert_eq!(n.inferred_detaches(), 1);
    assert_eq!(n.pooled(), 2);
    // Detached: the model's answer is the free tree's.
    let next = low + size;
    assert_eq!(n.peek(size, align, VMALLOC), Some(next));
    assert_eq!(n.alloc_judged(size, align, VMALLOC, b), Ok(Some(next)));
    // Linux took b from the pool: attached again.
    assert_eq!(n.alloc_judged(size, align, VMALLOC, a), Ok(Some(a)));
    assert_eq!(n.pooled(), 0);
    n.check().unwrap();
}

/// Step by step: a detached pool serves nothing, its set-aside quarter
/// is neither pooled nor free until the reclaim, and the rest serves
/// again once attached.
#[test]
fn a_detached_pool_serves_again_once_attached() {
    let (size, align) = (PAGE, PAGE);
    let one_page = |cpu| Op::Alloc {
        cpu,
        pages: 1,
        align_shift: 0,
        vmalloc: true,
    };
    let mut ops: Vec<Op> = (0..8).map(|_| one_page(1)).collect();
    ops.extend((0..8).map(Op::FreeLazy));
    ops.push(Op::Purge); // 8 areas in node 1's pool of one page
    let steps = [
        PurgeStep::Start { full: false },
        PurgeStep::Detach { node: 1, pages: 1 },
    ];
    ops.extend(steps.map(Op::Step));
    ops.push(one_page(1)); // from the free tree
    ops.push(Op::Step(PurgeStep::Attach { node: 1, pages: 1 }));
    ops.push(one_page(1)); // from the pool
    ops.push(Op::Step(PurgeStep::Reclaim { node: 1 }));
    run(2, &ops).unwrap();

    let mut n = LinuxNodes::new(SPACE.0, SPACE.1, 2, VMALLOC).unwrap();
    n.set_cpu(1);
    let areas: Vec<u64> = (0..8)
        .map(|_| n.alloc_in(size, align, VMALLOC.0, VMALLOC.1).unwrap())
        .collect();
    for &a in &areas {
        n.free_lazy(a).unwrap();
    }
    n.purge(&mut |_, _| {});
    assert!(n.purge_step(PurgeStep::Start { full: false }));
    assert!(n.purge_step(PurgeStep::Detach { node: 1, pages: 1 }));
    assert_eq!(n.pooled(), 6); // the newest two set aside
    let top = VMALLOC.0 + 8 * PAGE;
    assert_eq!(n.alloc_in(size, align, VMALLOC.0, VMALLOC.1), Ok(top));
    assert!(n.purge_step(PurgeStep::Attach { node: 1, pages: 1 }));
    // Pooled in address order to the front: the newest is the highest.
    assert_eq!(n.alloc_in(size, align, VMALLOC.0, VMALLOC.1), Ok(areas[5]));
    assert!(n.purge_step(PurgeStep::Reclaim { node: 1 }));
    // Outside the pools' window: the lowest free page is a reclaimed one.
    assert_eq!(
        n.alloc_in(size, align, VMALLOC.0, VMALLOC.1 - PAGE),
        Ok(areas[6])
    );
    assert!(!n.purge_step(PurgeStep::Take { node: 2 }));
    assert!(!n.purge_step(PurgeStep::Detach {
        node: 1,
        pages: 257
    }));
    n.check().unwrap();
}

/// A request given Linux's address takes it where it lies: from its
/// pool, from the areas a decay set aside (then the reclaim does not free
/// it), or from the free tree; an address that is live, misaligned or
/// outside the window is refused and nothing changes.
#[test]
fn a_request_given_an_address_takes_it_where_it_lies() {
    let (size, align) = (PAGE, PAGE);
    let mut n = LinuxNodes::new(SPACE.0, SPACE.1, 2, VMALLOC).unwrap();
    n.set_cpu(1);
    let areas: Vec<u64> = (0..8)
        .map(|_| n.alloc_in(size, align, VMALLOC.0, VMALLOC.1).unwrap())
        .collect();
    for &a in &areas[..7] {
        n.free_lazy(a).unwrap();
    }
    n.purge(&mut |_, _| {}); // node 1's pool of one page, the newest first
    assert!(n.purge_step(PurgeStep::Start { full: false }));
    assert!(n.purge_step(PurgeStep::Detach { node: 1, pages: 1 }));
    // areas[6] was set aside (the newest quarter of 7, one area).
    n.alloc_at(size, align, VMALLOC, areas[6]).unwrap();
    assert!(n.purge_step(PurgeStep::Attach { node: 1, pages: 1 }));
    assert!(n.purge_step(PurgeStep::Reclaim { node: 1 }));
    n.check().unwrap();
    let free: Vec<_> = n.free_blocks().collect();
    assert!(free.iter().all(|r| !r.contains(&areas[6])));
    // From the pool (not its newest), then from the free tree.
    n.alloc_at(size, align, VMALLOC, areas[2]).unwrap();
    assert_eq!(n.pooled(), 5);
    let top = VMALLOC.0 + 8 * PAGE;
    n.alloc_at(size, align, VMALLOC, top + PAGE).unwrap();
    n.check().unwrap();
    // Refused: live, misaligned, outside the window, past u64::MAX.
    let before: Vec<_> = n.free_blocks().collect();
    let pooled = n.pooled();
    for (a, window) in [
        (areas[7], VMALLOC),
        (top + 1, VMALLOC),
        (VMALLOC.1, VMALLOC),
        (u64::MAX - 1, (VMALLOC.0, u64::MAX)),
    ] {
        assert!(n.alloc_at(size, align, window, a).is_err(), "{a:#x}");
    }
    assert!(n.alloc_at(size, 3, VMALLOC, top).is_err());
    assert_eq!(n.free_blocks().collect::<Vec<_>>(), before);
    assert_eq!(n.pooled(), pooled);
    n.check().unwrap();
}
