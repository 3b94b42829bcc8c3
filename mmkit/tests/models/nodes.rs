// The vmap nodes' model (`mmkit::nodes::VmapNodes`), driven one thread at a
// time: the documented policy written plainly over a sorted list of free
// ranges, compared answer by answer. Shared by `tests/nodes_model.rs` and the
// fuzz targets (`tests/fuzz/mod.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use mmkit::nodes::{NodesConfig, StdVmapNodes};
use mmkit::range::fit_in;
use mmkit::{AllocError, FreeError};

/// One node: live areas, lazy list, pools by size in granules (oldest first).
#[derive(Debug, Clone, Default)]
struct MNode {
    live: BTreeMap<u64, u64>,
    lazy: Vec<(u64, u64)>,
    pools: BTreeMap<u64, Vec<u64>>,
    /// By size: the fewest areas the pool held since its last decay (0
    /// for a pool never decayed, or absent).
    low: BTreeMap<u64, usize>,
    /// A threshold purge from another node left this node its share: a
    /// decay, then these areas to pool, at its next allocation.
    owed: Option<Vec<(u64, u64)>>,
    /// Bytes of this node's lazy areas flushed since its pools last
    /// decayed.
    undecayed: u64,
    hits: u64,
    misses: u64,
}

/// How a node's share of a purge decays its pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MDecay {
    /// All of every pool, and nothing pooled (a drain).
    Full,
    /// The oldest quarter of every pool (`purge()`).
    Quarter,
    /// The oldest quarter once the node's own flushed bytes since its last
    /// decay pass `lazy_max` (a purge a lazy free started).
    Earned,
}

#[derive(Debug, Clone)]
struct NodesModel {
    cfg: NodesConfig,
    /// Maximal free ranges of the tree, sorted.
    free: Vec<(u64, u64)>,
    nodes: Vec<MNode>,
    flushes: Vec<(u64, u64)>,
}

impl NodesModel {
    fn new(start: u64, end: u64, cfg: NodesConfig) -> Self {
        NodesModel {
            cfg,
            free: vec![(start, end)],
            nodes: vec![MNode::default(); cfg.nodes],
            flushes: Vec::new(),
        }
    }

    fn class(&self, size: u64) -> Option<u64> {
        let k = size / self.cfg.granule;
        (size % self.cfg.granule == 0 && k >= 1 && k <= self.cfg.classes as u64).then_some(k)
    }

    /// The lowest fit, or (`best`) the best: the lowest fit in the
    /// shortest block that holds one, the lowest such block.
    fn tree_alloc(&mut self, size: u64, align: u64, best: bool) -> Option<u64> {
        let fits = self.free.iter().filter_map(|&(s, e)| fit_in(s, e, size, align).map(|a| (e - s, a)));
        let a = if best { fits.min()?.1 } else { fits.map(|f| f.1).next()? };
        let i = self.free.iter().position(|&(s, e)| s <= a && a + size <= e).unwrap();
        let (s, e) = self.free.remove(i);
        if a + size < e {
            self.free.insert(i, (a + size, e));
        }
        if s < a {
            self.free.insert(i, (s, a));
        }
        Some(a)
    }

    fn tree_free(&mut self, a: u64, b: u64) {
        let i = self.free.partition_point(|&(s, _)| s < a);
        let (mut s, mut e) = (a, b);
        if i < self.free.len() && self.free[i].0 == b {
            e = self.free.remove(i).1;
        }
        if i > 0 && self.free[i - 1].1 == a {
            s = self.free.remove(i - 1).0;
            self.free.insert(i - 1, (s, e));
        } else {
            self.free.insert(i, (s, e));
        }
    }

    fn alloc(&mut self, cpu: usize, size: u64, align: u64, best: bool) -> Result<u64, AllocError> {
        if size == 0 || !align.is_power_of_two() {
            return Err(AllocError::Invalid);
        }
        let c = cpu % self.nodes.len();
        if let Some(owed) = self.nodes[c].owed.take() {
            self.settle(c, owed, MDecay::Earned);
        }
        if let Some(k) = self.class(size) {
            let n = &mut self.nodes[c];
            if let Some(&a) = n.pools.get(&k).and_then(|p| p.last()) {
                if a % align == 0 {
                    let p = n.pools.get_mut(&k).unwrap();
                    p.pop();
                    let len = p.len();
                    let low = n.low.entry(k).or_default();
                    *low = (*low).min(len);
                    n.hits += 1;
                    n.live.insert(a, a + size);
                    return Ok(a);
                }
            }
        }
        self.nodes[c].misses += 1;
        let a = match self.tree_alloc(size, align, best) {
            Some(a) => a,
            None => {
                self.purge(None, true);
                self.tree_alloc(size, align, best).ok_or(AllocError::NoSpace)?
            }
        };
        self.nodes[c].live.insert(a, a + size);
        Ok(a)
    }

    /// The owning node and end of the live area at `addr`, taken out.
    fn owner(&mut self, cpu: usize, addr: u64, size: Option<u64>) -> Result<(usize, u64), FreeError> {
        if size == Some(0) {
            return Err(FreeError::Invalid);
        }
        let k = self.nodes.len();
        let i = (0..k)
            .find(|i| self.nodes[*i].live.contains_key(&addr))
            .ok_or(FreeError::NotAllocated)?;
        let end = self.nodes[i].live[&addr];
        if size.is_some_and(|s| addr.checked_add(s) != Some(end)) {
            return Err(FreeError::SizeMismatch);
        }
        let _ = cpu;
        self.nodes[i].live.remove(&addr);
        Ok((i, end))
    }

    /// Pools `[s, e)` on node `i` while its pool of that size holds fewer
    /// than `max` areas, else frees it in the tree.
    fn pool(&mut self, i: usize, s: u64, e: u64, max: usize) {
        match self.class(e - s) {
            Some(k) if self.nodes[i].pools.get(&k).map_or(0, Vec::len) < max => {
                self.nodes[i].pools.entry(k).or_default().push(s)
            }
            _ => self.tree_free(s, e),
        }
    }

    fn free(&mut self, cpu: usize, addr: u64, size: Option<u64>) -> Result<u64, FreeError> {
        let (i, end) = self.owner(cpu, addr, size)?;
        self.pool(i, addr, end, self.cfg.pool_max);
        Ok(end - addr)
    }

    fn free_lazy(&mut self, cpu: usize, addr: u64, size: Option<u64>) -> Result<u64, FreeError> {
        let (i, end) = self.owner(cpu, addr, size)?;
        self.nodes[i].lazy.push((addr, end));
        let bytes: u64 = self.nodes[i].lazy.iter().map(|(s, e)| e - s).sum();
        if bytes > self.cfg.lazy_max {
            self.purge(Some(cpu % self.nodes.len()), false);
        }
        Ok(end - addr)
    }

    /// Every lazy list flushed at once; each node then settles what an
    /// earlier purge left it and this purge's share, but a threshold
    /// purge from node `caller` leaves the other nodes' share owed.
    fn purge(&mut self, caller: Option<usize>, full: bool) -> bool {
        let batches: Vec<Vec<(u64, u64)>> =
            self.nodes.iter_mut().map(|n| std::mem::take(&mut n.lazy)).collect();
        let all: Vec<(u64, u64)> = batches.iter().flatten().copied().collect();
        let any = !all.is_empty();
        if any {
            let lo = all.iter().map(|a| a.0).min().unwrap();
            let hi = all.iter().map(|a| a.1).max().unwrap();
            self.flushes.push((lo, hi));
        }
        if !any && !full {
            return false;
        }
        let (owed_decay, decay) = match (full, caller) {
            (true, _) => (MDecay::Full, MDecay::Full),
            (false, None) => (MDecay::Earned, MDecay::Quarter),
            (false, Some(_)) => (MDecay::Earned, MDecay::Earned),
        };
        for (i, batch) in batches.into_iter().enumerate() {
            if let Some(owed) = self.nodes[i].owed.take() {
                self.settle(i, owed, owed_decay);
            }
            match caller {
                Some(c) if c != i => self.nodes[i].owed = Some(batch),
                _ => self.settle(i, batch, decay),
            }
        }
        any
    }

    /// Node `i`'s share of a purge: each pool loses the oldest quarter of
    /// the fewest areas it held since its last decay (all on a drain; an
    /// earned decay only past `lazy_max` bytes flushed since the last),
    /// then the pools take every area of `batch` of a pooled size,
    /// however many (none on a drain).
    fn settle(&mut self, i: usize, batch: Vec<(u64, u64)>, decay: MDecay) {
        let g = self.cfg.granule;
        let full = decay == MDecay::Full;
        let n = &mut self.nodes[i];
        n.undecayed += batch.iter().map(|(s, e)| e - s).sum::<u64>();
        let decays = decay != MDecay::Earned || n.undecayed > self.cfg.lazy_max;
        if decays {
            n.undecayed = 0;
        }
        let pools = std::mem::take(&mut n.pools);
        let mut kept = BTreeMap::new();
        for (k, mut p) in pools {
            let low = self.nodes[i].low.get(&k).copied().unwrap_or(0);
            let d = match (decays, full) {
                (false, _) => 0,
                (true, true) => p.len(),
                (true, false) => low / 4,
            };
            for a in p.drain(..d) {
                self.tree_free(a, a + k * g);
            }
            if decays {
                self.nodes[i].low.insert(k, p.len());
            }
            kept.insert(k, p);
        }
        self.nodes[i].pools = kept;
        for (s, e) in batch {
            match full {
                true => self.tree_free(s, e),
                false => self.pool(i, s, e, usize::MAX),
            }
        }
    }
}

/// One step on both.
#[derive(Debug, Clone, arbitrary::Arbitrary)]
enum NodesOp {
    /// `best`: [`Policy::BestFit`](mmkit::request::Policy::BestFit)
    /// through `allocate`, else `alloc` (lowest fit).
    Alloc { cpu: u8, size: (u8, u8), align: u8, best: bool },
    Free { cpu: u8, pick: usize },
    FreeLazy { cpu: u8, pick: usize },
    FreeSized { cpu: u8, pick: usize, off: u8, lazy: bool },
    Purge,
    Drain,
}

/// A small configuration from two numbers, so pools fill, overflow and
/// decay, lazy lists pass their limit, and the space runs out.
fn nodes_cfg(nodes: u8, limits: u8) -> NodesConfig {
    NodesConfig {
        nodes: 1 + usize::from(nodes % 4),
        granule: 16,
        classes: 1 + usize::from(limits % 4),
        pool_max: usize::from(limits / 4 % 6),
        lazy_max: 16 * u64::from(limits / 24 % 8),
    }
}

const NODES_SPACE: (u64, u64) = (0x100, 0x100 + 16 * 64);

/// Runs `ops` on a fresh `VmapNodes` of `cfg` and on the model; `check()`
/// and the counters after every step. The first difference, as text.
fn run_nodes(cfg: NodesConfig, ops: &[NodesOp]) -> Result<(), String> {
    let v = StdVmapNodes::new(NODES_SPACE.0, NODES_SPACE.1, cfg).map_err(|e| e.to_string())?;
    let log: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let sink = log.clone();
    v.set_flush_hook(Some(Box::new(move |s, e| sink.lock().unwrap().push((s, e)))));
    let mut m = NodesModel::new(NODES_SPACE.0, NODES_SPACE.1, cfg);
    let mut returned: Vec<(u64, u64)> = Vec::new();
    let g = cfg.granule;
    for (i, op) in ops.iter().enumerate() {
        let pick = |p: usize| returned.get(p % returned.len().max(1)).copied().unwrap_or((0, 1));
        let (got, want) = match *op {
            NodesOp::Alloc { cpu, size, align, best } => {
                let size = match size.0 % 4 {
                    0 => 1 + u64::from(size.1 % 9),
                    _ => g * (1 + u64::from(size.1 % 6)),
                };
                let align = 1u64 << (align % 7);
                let cpu = usize::from(cpu);
                let got = if best {
                    let req = mmkit::request::Request::bytes(size).unwrap().align(align);
                    v.allocate(cpu, &req.policy(mmkit::request::Policy::BestFit)).map_err(AllocError::from)
                } else {
                    v.alloc(cpu, size, align)
                };
                let want = m.alloc(cpu, size, align, best);
                if let Ok(a) = got {
                    returned.push((a, a + size));
                }
                (format!("{got:?}"), format!("{want:?}"))
            }
            NodesOp::Free { cpu, pick: p } => {
                let a = pick(p).0;
                let c = usize::from(cpu);
                (format!("{:?}", v.free(c, a)), format!("{:?}", m.free(c, a, None)))
            }
            NodesOp::FreeLazy { cpu, pick: p } => {
                let a = pick(p).0;
                let c = usize::from(cpu);
                (format!("{:?}", v.free_lazy(c, a)), format!("{:?}", m.free_lazy(c, a, None)))
            }
            NodesOp::FreeSized { cpu, pick: p, off, lazy } => {
                let (a, e) = pick(p);
                let size = match off % 4 {
                    0 | 1 => e - a,
                    2 => e - a + 1,
                    _ => e - a - 1,
                };
                let c = usize::from(cpu);
                if lazy {
                    (
                        format!("{:?}", v.free_lazy_sized(c, a, size)),
                        format!("{:?}", m.free_lazy(c, a, Some(size))),
                    )
                } else {
                    (
                        format!("{:?}", v.free_sized(c, a, size)),
                        format!("{:?}", m.free(c, a, Some(size))),
                    )
                }
            }
            NodesOp::Purge => (format!("{}", v.purge()), format!("{}", m.purge(None, false))),
            NodesOp::Drain => {
                v.drain();
                m.purge(None, true);
                (String::new(), String::new())
            }
        };
        let fail = |e: String| format!("step {i} {op:?}: {e}");
        if got != want {
            return Err(fail(format!("result {got}, model {want}")));
        }
        let flushes = log.lock().unwrap().clone();
        if flushes != m.flushes {
            return Err(fail(format!("flushes {flushes:x?}, model {:x?}", m.flushes)));
        }
        v.check().map_err(|e| fail(e.to_string()))?;
        for (k, n) in m.nodes.iter().enumerate() {
            let s = v.node_stats(k);
            let pooled: u64 = n.pools.values().map(|p| p.len() as u64).sum();
            let lazy = n.lazy.len() + n.owed.as_ref().map_or(0, Vec::len);
            let want = (n.hits, n.misses, n.live.len() as u64, lazy as u64, pooled);
            let got = (s.hits, s.misses, s.live, s.lazy, s.pooled);
            if got != want {
                return Err(fail(format!("node {k} stats {got:?}, model {want:?}")));
            }
        }
        let free: Vec<(u64, u64)> = v.with_allocator(|va| va.free_blocks().map(|r| (r.start, r.end)).collect());
        if free != m.free {
            return Err(fail(format!("free {free:x?}, model {:x?}", m.free)));
        }
    }
    Ok(())
}
