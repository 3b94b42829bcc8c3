//! [`LinuxNodes`]: the vmap node pools exactly as Linux 6.12 keeps them,
//! single-threaded, so that a replay of a Linux trace predicts every
//! address Linux picks, pool hits included.
//!
//! ```text
//!   node i: lazy [areas freed, tagged with node i]   pools: 1 page [newest .. oldest] .. 256 pages [..]
//!   free tree: VmapAllocator, Policy::Linux; lazily freed and pooled areas are live there
//! ```
//!
//! # What each call does (mm/vmalloc.c, v6.12)
//! - An allocation whose window is the whole vmalloc window, with more
//!   than one node, is *tagged* with node `cpu % nodes` (`node_alloc`).
//!   If the size is a whole number `k <= 256` of pages, that node's pool of
//!   `k` pages is asked: its newest area is taken when aligned, else it
//!   moves to the pool's oldest end and the request misses. A miss (and
//!   every other request) takes [`Policy::Linux`]'s fit from the free tree.
//!   When that fails: a full purge (below) and one more try.
//! - A lazy free puts the area on a node's lazy list (its tag's node).
//! - A purge (`__purge_vmap_area_lazy`) first decays every node's pools:
//!   each pool gives its newest `len / 4` areas back to the free tree, or
//!   all of them when it holds fewer than 4 (the kernel's countdown from 0
//!   never reaches 0 again). Then, node by node and in address order, a
//!   tagged lazy area of at most 256 pages goes to the front of its node's
//!   pool; every other one goes back to the free tree.
//! - A *full* purge (the one a failing allocation starts,
//!   `reclaim_and_purge_vmap_areas`) empties every pool and pools nothing.
//!
//! A purge has two halves, and Linux runs other CPUs' requests between
//! them: it *begins* ([`purge_begin`](LinuxNodes::purge_begin)) with the
//! decay, whose areas are free at once, and takes each node's lazy list
//! as it is then; it *ends* ([`purge_end`](LinuxNodes::purge_end)), after
//! the TLB flush, by pooling or freeing those areas. Areas freed lazily in
//! between wait for the next purge. One purge runs at a time
//! (`vmap_purge_lock`).
//!
//! Linux runs the threshold purge (lazy pages above `lazy_max`) in a
//! worker, later; here it runs at once. A replay of a Linux trace sets the
//! threshold out of reach and purges where the trace did.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec;
use alloc::vec::Vec;

use crate::error::{AllocError, CheckError, FreeError, Invariant};
use crate::range::{FlushHook, RangeAllocator, RangeStats};
use crate::request::{Policy, Request, RequestError};
use crate::vmap::VmapAllocator;

/// Linux's page size.
const PAGE: u64 = crate::request::LINUX_PAGE_SIZE;
/// Pooled sizes: 1 to 256 pages (`MAX_VA_SIZE_PAGES`).
const POOLED_PAGES: u64 = 256;

/// A live area: its end and the node it is tagged with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Area {
    end: u64,
    node: Option<usize>,
}

/// A purge between its two halves: the lazy areas it took.
#[derive(Debug, Default)]
struct Purging {
    /// Pools nothing (`skip_populate`).
    full: bool,
    /// Per node: its lazy areas when the purge began.
    nodes: Vec<Vec<(u64, u64)>>,
    /// The untagged lazy areas when the purge began.
    global: Vec<(u64, u64)>,
}

impl Purging {
    fn areas(&self) -> impl Iterator<Item = &(u64, u64)> + Clone + '_ {
        self.nodes.iter().flatten().chain(&self.global)
    }
}

/// Linux 6.12's vmap nodes and their pools over one free tree: see the
/// [module docs](crate::nodes::linux).
///
/// # Examples
/// ```
/// use mmkit::nodes::LinuxNodes;
/// use mmkit::range::RangeAllocator;
///
/// let (vs, ve) = (0x10_0000, 0x100_0000);
/// let mut n = LinuxNodes::new(0x1000, 0x200_0000, 2, (vs, ve)).unwrap();
/// n.set_cpu(1);
/// let a = n.alloc_in(0x2000, 0x1000, vs, ve).unwrap();
/// assert_eq!(a, vs);
/// n.free_lazy(a).unwrap();
/// n.purge(&mut |_, _| {}); // into node 1's pool of 2 pages
/// n.set_cpu(0); // node 0: a miss, and the pooled area is not free
/// assert_eq!(n.alloc_in(0x2000, 0x1000, vs, ve), Ok(vs + 0x2000));
/// n.set_cpu(1); // node 1: a hit
/// assert_eq!(n.alloc_in(0x2000, 0x1000, vs, ve), Ok(vs));
/// assert_eq!(n.pool_hits(), 1);
/// n.check().unwrap();
/// ```
#[derive(Debug)]
pub struct LinuxNodes {
    tree: VmapAllocator,
    nodes: usize,
    vmalloc: (u64, u64),
    cpu: usize,
    live: BTreeMap<u64, Area>,
    /// Per node: lazily freed areas (start, end) tagged with it.
    lazy: Vec<Vec<(u64, u64)>>,
    /// Lazily freed areas with no tag.
    lazy_global: Vec<(u64, u64)>,
    /// The lazy areas of a purge begun and not ended.
    purging: Option<Purging>,
    lazy_bytes: u64,
    lazy_max: u64,
    /// Per node, per size in pages - 1: area starts, newest first.
    pools: Vec<Vec<VecDeque<u64>>>,
    hits: u64,
    last_hit: Option<u64>,
    inferred_shrinks: u64,
    purges: u64,
}

impl LinuxNodes {
    /// `nodes` vmap nodes (Linux: one per possible CPU, at most 128) over
    /// the space `[start, end)`; the pools serve requests whose window is
    /// exactly `vmalloc` (Linux's `[VMALLOC_START, VMALLOC_END)`). One node
    /// has no pools.
    ///
    /// # Errors
    /// `Invalid` for an empty space or `nodes == 0`.
    pub fn new(
        start: u64,
        end: u64,
        nodes: usize,
        vmalloc: (u64, u64),
    ) -> Result<Self, AllocError> {
        if nodes == 0 {
            return Err(AllocError::Invalid);
        }
        let mut tree = VmapAllocator::new(start, end)?;
        tree.set_lazy_max(u64::MAX);
        Ok(LinuxNodes {
            tree,
            nodes,
            vmalloc,
            cpu: 0,
            live: BTreeMap::new(),
            lazy: vec![Vec::new(); nodes],
            lazy_global: Vec::new(),
            purging: None,
            lazy_bytes: 0,
            lazy_max: crate::range::DEFAULT_LAZY_MAX,
            pools: vec![vec![VecDeque::new(); POOLED_PAGES as usize]; nodes],
            hits: 0,
            last_hit: None,
            inferred_shrinks: 0,
            purges: 0,
        })
    }

    /// The CPU that makes the next requests.
    pub fn set_cpu(&mut self, cpu: usize) {
        self.cpu = cpu;
    }

    /// Allocations a pool served.
    pub fn pool_hits(&self) -> u64 {
        self.hits
    }

    /// The free blocks of the tree in address order (pooled and lazily
    /// freed areas are not free).
    pub fn free_blocks(&self) -> impl Iterator<Item = core::ops::Range<u64>> + '_ {
        self.tree.free_blocks()
    }

    /// Areas in node pools.
    pub fn pooled(&self) -> usize {
        self.pools.iter().flatten().map(VecDeque::len).sum()
    }

    /// The pool index of `size` bytes, if a pool holds that size.
    fn class(size: u64) -> Option<usize> {
        (size % PAGE == 0 && size / PAGE <= POOLED_PAGES).then(|| (size / PAGE - 1) as usize)
    }

    /// The newest area of `node`'s pool of `size` if aligned; a misaligned
    /// one moves to the oldest end.
    fn pool_take(&mut self, node: usize, size: u64, align: u64) -> Option<u64> {
        let pool = &mut self.pools[node][Self::class(size)?];
        let a = pool.pop_front()?;
        if a & (align - 1) == 0 {
            return Some(a);
        }
        pool.push_back(a);
        None
    }

    /// One try: the pool, then the free tree.
    fn try_alloc(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Result<u64, RequestError> {
        let node = (self.nodes > 1 && (lo, hi) == self.vmalloc).then(|| self.cpu % self.nodes);
        let pooled = match node {
            Some(n) if size > 0 && align.is_power_of_two() => self.pool_take(n, size, align),
            _ => None,
        };
        let a = match pooled {
            Some(a) => {
                self.hits += 1;
                self.last_hit = Some(a);
                a
            }
            None => {
                self.last_hit = None;
                let req = Request::bytes(size).ok_or(RequestError::ZeroSize)?;
                self.tree
                    .allocate(req.align(align).within(lo..hi).policy(Policy::Linux))?
            }
        };
        self.live.insert(
            a,
            Area {
                end: a + size,
                node,
            },
        );
        Ok(a)
    }

    /// Judges one allocation on Linux's state: returns this model's answer
    /// (`None`: it would fail), then leaves the state as if the answer had
    /// been `linux`, Linux's own address (taken from the node's pool if it
    /// is there, else from the free tree).
    ///
    /// # Errors
    /// `NoSpace` if `[linux, linux + size)` is neither pooled on the
    /// request's node nor free here: the two states differ. `Invalid` for
    /// a request Linux would refuse. The model's answer is undone either
    /// way.
    pub fn alloc_judged(
        &mut self,
        size: u64,
        align: u64,
        (lo, hi): (u64, u64),
        linux: u64,
    ) -> Result<Option<u64>, AllocError> {
        let ours = match self.try_alloc(size, align, lo, hi) {
            Ok(a) => Some(a),
            Err(RequestError::NoFit { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        if ours == Some(linux) {
            return Ok(ours);
        }
        let node = (self.nodes > 1 && (lo, hi) == self.vmalloc).then(|| self.cpu % self.nodes);
        if let Some(a) = ours {
            self.live.remove(&a);
            match (node, Self::class(size)) {
                (Some(n), Some(c)) if self.last_hit == Some(a) => {
                    self.hits -= 1;
                    self.pools[n][c].push_front(a);
                }
                _ => {
                    self.tree.free(a).expect("just allocated");
                }
            }
        }
        let pooled = node.zip(Self::class(size)).and_then(|(n, c)| {
            let pool = &mut self.pools[n][c];
            let i = pool.iter().position(|&p| p == linux)?;
            pool.remove(i)
        });
        if pooled.is_none() {
            let req = Request::bytes(size).ok_or(AllocError::Invalid)?;
            let req = req.align(align).at(linux);
            if self.tree.allocate(req.clone()).is_err() {
                // Only the shrinker, which leaves no trace event, frees a
                // pooled area outside a purge.
                if !self.pooled_overlap(linux, linux + size) {
                    return Err(AllocError::NoSpace);
                }
                self.shrink();
                self.inferred_shrinks += 1;
                self.tree.allocate(req)?;
            }
        }
        self.live.insert(
            linux,
            Area {
                end: linux + size,
                node,
            },
        );
        Ok(ours)
    }

    /// Whether a lazily freed area overlaps `[lo, hi)`.
    pub fn lazy_overlap(&self, lo: u64, hi: u64) -> bool {
        self.lazy_areas().any(|&(a, e)| a < hi && e > lo)
    }

    /// Every lazily freed area, those a begun purge took included.
    fn lazy_areas(&self) -> impl Iterator<Item = &(u64, u64)> + Clone + '_ {
        let purging = self.purging.iter().flat_map(Purging::areas);
        self.lazy
            .iter()
            .flatten()
            .chain(&self.lazy_global)
            .chain(purging)
    }

    /// Whether a purge has begun and not ended.
    pub fn purge_pending(&self) -> bool {
        self.purging.is_some()
    }

    /// Whether a pooled area overlaps `[lo, hi)`.
    fn pooled_overlap(&self, lo: u64, hi: u64) -> bool {
        self.pools.iter().any(|p| {
            p.iter().enumerate().any(|(c, q)| {
                let len = (c as u64 + 1) * PAGE;
                q.iter().any(|&a| a < hi && a + len > lo)
            })
        })
    }

    /// The shrinker's decay (`vmap_node_shrink_scan`): every pool of every
    /// node back to the free tree. Linux runs it under memory pressure and
    /// traces no event for it.
    pub fn shrink(&mut self) {
        for pool in self.pools.iter_mut().flatten() {
            for a in pool.drain(..) {
                self.tree
                    .free(a)
                    .expect("a pooled area is live in the tree");
            }
        }
    }

    /// Shrinker runs [`alloc_judged`](Self::alloc_judged) inferred: Linux
    /// took an address that lies in a pool here.
    pub fn inferred_shrinks(&self) -> u64 {
        self.inferred_shrinks
    }

    /// A whole purge: [`purge_begin`](Self::purge_begin) then
    /// [`purge_end`](Self::purge_end). Whether any lazy area went back to
    /// the free tree or a pool.
    pub fn purge_nodes(&mut self, full: bool) -> bool {
        self.purge_begin(full);
        self.purge_end()
    }

    /// The first half of a purge (a purge still pending ends first): every
    /// pool decays to the free tree, all of it when `full`; each node's
    /// lazy areas are taken for [`purge_end`](Self::purge_end), and later
    /// lazy frees wait for the next purge.
    pub fn purge_begin(&mut self, full: bool) {
        self.purge_end();
        for pool in self.pools.iter_mut().flatten() {
            let take = match pool.len() >> 2 {
                k if k > 0 && !full => k,
                _ => pool.len(),
            };
            for a in pool.drain(..take) {
                self.tree
                    .free(a)
                    .expect("a pooled area is live in the tree");
            }
        }
        let nodes = self.lazy.iter_mut().map(core::mem::take).collect();
        let global = core::mem::take(&mut self.lazy_global);
        self.purging = Some(Purging {
            full,
            nodes,
            global,
        });
    }

    /// The second half of a purge: the lazy areas it took, node by node
    /// in address order, go to the front of their pool (tagged, at most 256
    /// pages, not a full purge) or back to the free tree. Whether there
    /// were any; `false` when no purge had begun.
    pub fn purge_end(&mut self) -> bool {
        let Some(p) = self.purging.take() else {
            return false;
        };
        let mut freed = 0u64;
        for (n, mut lazy) in p.nodes.into_iter().enumerate() {
            lazy.sort_unstable();
            for (s, e) in lazy {
                freed += 1;
                match Self::class(e - s) {
                    Some(c) if !p.full => self.pools[n][c].push_front(s),
                    _ => {
                        self.tree.free(s).expect("a lazy area is live in the tree");
                    }
                }
            }
        }
        for (s, _) in p.global {
            freed += 1;
            self.tree.free(s).expect("a lazy area is live in the tree");
        }
        self.lazy_bytes = self.lazy_areas().map(|(s, e)| e - s).sum();
        self.purges += u64::from(freed > 0);
        freed > 0
    }
}

impl RangeAllocator for LinuxNodes {
    fn space(&self) -> (u64, u64) {
        self.tree.space()
    }

    fn alloc_in(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Result<u64, AllocError> {
        match self.try_alloc(size, align, lo, hi) {
            Err(RequestError::NoFit { .. }) => {
                self.purge_nodes(true);
                self.try_alloc(size, align, lo, hi)
                    .map_err(AllocError::from)
            }
            r => r.map_err(AllocError::from),
        }
    }

    fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
        self.live.remove(&addr).ok_or(FreeError::NotAllocated)?;
        self.tree.free(addr)
    }

    fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
        let area = self.live.remove(&addr).ok_or(FreeError::NotAllocated)?;
        match area.node {
            Some(n) => self.lazy[n].push((addr, area.end)),
            None => self.lazy_global.push((addr, area.end)),
        }
        self.lazy_bytes += area.end - addr;
        if self.lazy_bytes > self.lazy_max {
            self.purge_nodes(false);
        }
        Ok(area.end - addr)
    }

    /// Ends the purge that began, else runs a whole one: the lazily freed
    /// areas it takes are flushed once.
    fn purge(&mut self, flush: &mut dyn FnMut(u64, u64)) -> bool {
        if !self.purge_pending() {
            self.purge_begin(false);
        }
        let taken = self.purging.iter().flat_map(Purging::areas);
        let span = taken.fold(None, |acc, &(s, e)| {
            Some(acc.map_or((s, e), |(a, b): (u64, u64)| (a.min(s), b.max(e))))
        });
        if let Some((s, e)) = span {
            flush(s, e);
        }
        self.purge_end()
    }

    fn set_lazy_max(&mut self, bytes: u64) {
        self.lazy_max = bytes;
    }

    fn set_flush_hook(&mut self, hook: Option<FlushHook>) {
        self.tree.set_flush_hook(hook);
    }

    fn stats(&self) -> RangeStats {
        let mut s = self.tree.stats();
        let lazy = self.lazy_areas();
        s.live_areas = self.live.len() as u64;
        s.live_bytes = self.live.iter().map(|(a, v)| v.end - a).sum();
        s.lazy_areas = lazy.clone().count() as u64;
        s.lazy_bytes = lazy.map(|(a, b)| b - a).sum();
        s.purges = self.purges;
        s.flushes = self.purges;
        s
    }

    /// The tree's own check, and: the tree's live areas are exactly the
    /// live, lazy and pooled areas here, each once; a pooled area has its
    /// pool's size.
    fn check(&self) -> Result<(), CheckError> {
        self.tree.check()?;
        let bad = |at: u64, what: &str| {
            Err(CheckError::new(
                "linux-nodes",
                Invariant::Accounting,
                Some(at),
                what,
            ))
        };
        let mut held: Vec<(u64, u64)> = self.live.iter().map(|(&a, v)| (a, v.end)).collect();
        held.extend(self.lazy_areas());
        for pools in &self.pools {
            for (c, pool) in pools.iter().enumerate() {
                for &a in pool {
                    let size = (c as u64 + 1) * PAGE;
                    if self.tree.area_size(a) != Some(size) {
                        return bad(a, "a pooled area is not a live area of its pool's size");
                    }
                    held.push((a, a + size));
                }
            }
        }
        held.sort_unstable();
        let mut tree: Vec<(u64, u64)> = self.tree.live_areas().map(|r| (r.start, r.end)).collect();
        tree.sort_unstable();
        if held != tree {
            let at = held
                .iter()
                .zip(&tree)
                .find(|(a, b)| a != b)
                .map_or(0, |(a, _)| a.0);
            return bad(
                at,
                "live, lazy and pooled areas differ from the tree's live areas",
            );
        }
        Ok(())
    }
}
