//! [`LinuxNodes`]: the vmap node pools exactly as Linux 6.12 keeps them,
//! single-threaded, so that a replay of a Linux trace predicts every
//! address Linux picks, pool hits included.
//!
//! ```text
//!   node i: lazy [areas freed, tagged with node i]   pools: 1 page [newest .. oldest] .. 256 pages [..]
//!   free tree: LinuxFreeTree (Linux's shape and search), beside a VmapAllocator
//!              that keeps the same free set and the live, lazy and pooled areas
//! ```
//!
//! # What each call does (mm/vmalloc.c, v6.12)
//! - An allocation whose window is the whole vmalloc window, with more
//!   than one node, is *tagged* with node `cpu % nodes` (`node_alloc`).
//!   If the size is a whole number `k <= 256` of pages, that node's pool of
//!   `k` pages is asked: its newest area is taken when aligned, else it
//!   moves to the pool's oldest end and the request misses. A miss (and
//!   every other request) takes Linux's own fit from the free tree
//!   ([`LinuxFreeTree`], whose shape is Linux's). When that fails: a full
//!   purge (below) and one more try.
//! - A lazy free puts the area on a node's lazy list: its tag's node, else
//!   the node of its address (`addr_to_node`: 16-page zones, round robin).
//! - A purge (`__purge_vmap_area_lazy`) first decays every node's pools:
//!   each pool gives its newest `len / 4` areas back, or all of them when
//!   it holds fewer than 4 (the kernel's countdown from 0 never reaches 0
//!   again); one node's decayed areas are merged among themselves and
//!   then go to the free tree in address order. Then, node by node and in
//!   address order, a tagged lazy area of at most 256 pages goes to the
//!   front of its node's pool; every other one goes back to the free tree,
//!   the highest first (Linux collects them at the head of a list).
//! - A *full* purge (the one a failing allocation starts,
//!   `reclaim_and_purge_vmap_areas`) empties every pool and pools nothing.
//!
//! A purge has two halves, and Linux runs other CPUs' requests between
//! them: it *begins* ([`purge_begin`](LinuxNodes::purge_begin)) with the
//! decay, whose areas are free at once, and takes each node's lazy list
//! as it is then; it *ends* ([`purge_end`](LinuxNodes::purge_end)), after
//! the TLB flush, by pooling or freeing those areas, node by node
//! ([`purge_node`](LinuxNodes::purge_node) settles one). Areas freed lazily in
//! between wait for the next purge. One purge runs at a time
//! (`vmap_purge_lock`).
//!
//! A capture with kprobe events on the purge's steps places each of them
//! ([`PurgeStep`]: a pool's detach and attach, a node's reclaim and take)
//! where Linux ran it ([`purge_step`](LinuxNodes::purge_step)).
//!
//! Linux runs the threshold purge (lazy pages above `lazy_max`) in a
//! worker, later; here it runs at once. A replay of a Linux trace sets the
//! threshold out of reach and purges where the trace did.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec;
use alloc::vec::Vec;

use crate::error::{AllocError, CheckError, FreeError, Invariant};
use crate::nodes::LinuxFreeTree;
use crate::range::{FlushHook, RangeAllocator, RangeStats};
use crate::request::{Request, RequestError};
use crate::vmap::VmapAllocator;

mod decay;
pub use decay::PurgeStep;

/// Linux's page size.
const PAGE: u64 = crate::request::LINUX_PAGE_SIZE;
/// Pooled sizes: 1 to 256 pages (`MAX_VA_SIZE_PAGES`).
const POOLED_PAGES: u64 = 256;
/// The bytes of one zone of `addr_to_node` (`vmap_zone_size`, more than
/// one node).
const ZONE: u64 = 16 * PAGE;

/// A live area: its end and the node it is tagged with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Area {
    end: u64,
    node: Option<usize>,
}

/// A lazily freed area on a node's lazy list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Lazy {
    start: u64,
    end: u64,
    /// Tagged with this node at allocation: it may be pooled.
    tagged: bool,
}

/// A purge between its two halves: the lazy areas it took.
#[derive(Debug, Default)]
struct Purging {
    /// Pools nothing (`skip_populate`).
    full: bool,
    /// Per node: its lazy areas when the purge began, until
    /// [`purge_node`](LinuxNodes::purge_node) moves them.
    nodes: Vec<Vec<Lazy>>,
    /// Areas already moved by `purge_node`.
    done: usize,
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
    /// The free set with every live, lazy and pooled area, for accounting.
    tree: VmapAllocator,
    /// The same free set in Linux's tree shape: it decides addresses.
    shape: LinuxFreeTree,
    nodes: usize,
    vmalloc: (u64, u64),
    cpu: usize,
    live: BTreeMap<u64, Area>,
    /// Per node: its lazy list.
    lazy: Vec<Vec<Lazy>>,
    /// The lazy areas of a purge begun and not ended.
    purging: Option<Purging>,
    lazy_bytes: u64,
    lazy_max: u64,
    /// Per node, per size in pages - 1: area starts, newest first.
    pools: Vec<Vec<VecDeque<u64>>>,
    hits: u64,
    inferred_shrinks: u64,
    /// (node, pool index) pools a purge's decay holds detached: by a
    /// [`PurgeStep::Detach`] until its `Attach` or its node's `Reclaim`, or
    /// inferred by [`alloc_judged`](Self::alloc_judged) until the next
    /// purge.
    detached: Vec<(usize, usize)>,
    /// Per node: the areas its running decay set aside, not yet free.
    decaying: Vec<Vec<(u64, u64)>>,
    inferred_detaches: u64,
    purges: u64,
    retries: u64,
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
        let shape = LinuxFreeTree::new(start, end).map_err(|_| AllocError::Invalid)?;
        Ok(LinuxNodes {
            tree,
            shape,
            nodes,
            vmalloc,
            cpu: 0,
            live: BTreeMap::new(),
            lazy: vec![Vec::new(); nodes],
            purging: None,
            lazy_bytes: 0,
            lazy_max: crate::range::DEFAULT_LAZY_MAX,
            pools: vec![vec![VecDeque::new(); POOLED_PAGES as usize]; nodes],
            hits: 0,
            inferred_shrinks: 0,
            detached: Vec::new(),
            decaying: vec![Vec::new(); nodes],
            inferred_detaches: 0,
            purges: 0,
            retries: 0,
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

    /// One try, pool then free tree, without the purge and second try
    /// that [`alloc_in`](RangeAllocator::alloc_in) runs on a failure: Linux's
    /// retry after its purge, for a replay that carries that purge as
    /// lines of its own (an imported Linux trace writes a failed try as the
    /// retry, after the purge it ran).
    ///
    /// # Errors
    /// As [`alloc_in`](RangeAllocator::alloc_in); nothing is purged.
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::LinuxNodes;
    /// use mmkit::prelude::RangeAllocator;
    /// use mmkit::AllocError;
    /// let mut n = LinuxNodes::new(0, 1 << 20, 1, (0, 1 << 20)).unwrap();
    /// let a = n.alloc_once(1 << 20, 1, 0, 1 << 20).unwrap();
    /// n.free_lazy(a).unwrap();
    /// // The lazy area is not free yet, and a failing try does not purge it.
    /// assert_eq!(n.alloc_once(4096, 1, 0, 1 << 20), Err(AllocError::NoSpace));
    /// assert_eq!(n.alloc_in(4096, 1, 0, 1 << 20), Ok(0));
    /// ```
    pub fn alloc_once(
        &mut self,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
    ) -> Result<u64, AllocError> {
        self.try_alloc(size, align, lo, hi)
            .map_err(AllocError::from)
    }

    /// Allocations whose first try failed, so that they ran a full purge
    /// and tried once more (Linux traces the failed try).
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// Areas in node pools.
    pub fn pooled(&self) -> usize {
        self.pools.iter().flatten().map(VecDeque::len).sum()
    }

    /// The node whose lazy list an area joins when freed, as Linux 6.12
    /// picks it among `nodes`: the node of the CPU it was tagged with at
    /// allocation (`tag`, taken mod `nodes`; only requests in vmalloc's
    /// own window are tagged), else the node of its address
    /// (`addr_to_node`: 16-page zones in turn). With one node, node 0.
    ///
    /// ```
    /// use mmkit::nodes::LinuxNodes;
    /// assert_eq!(LinuxNodes::lazy_node(2, Some(3), 0), 1);
    /// assert_eq!(LinuxNodes::lazy_node(2, None, 16 * 4096), 1);
    /// assert_eq!(LinuxNodes::lazy_node(1, Some(3), 16 * 4096), 0);
    /// ```
    pub fn lazy_node(nodes: usize, tag: Option<usize>, addr: u64) -> usize {
        match tag {
            _ if nodes <= 1 => 0,
            Some(cpu) => cpu % nodes,
            None => ((addr / ZONE) % nodes as u64) as usize,
        }
    }

    /// The pool index of `size` bytes, if a pool holds that size.
    fn class(size: u64) -> Option<usize> {
        (size % PAGE == 0 && size / PAGE <= POOLED_PAGES).then(|| (size / PAGE - 1) as usize)
    }

    /// The newest area of `node`'s pool of `size` if aligned; a misaligned
    /// one moves to the oldest end.
    fn pool_take(&mut self, node: usize, size: u64, align: u64) -> Option<u64> {
        let c = Self::class(size)?;
        if self.detached.contains(&(node, c)) {
            return None;
        }
        let pool = &mut self.pools[node][c];
        let a = pool.pop_front()?;
        if a & (align - 1) == 0 {
            return Some(a);
        }
        pool.push_back(a);
        None
    }

    /// The node a request is tagged with: `cpu % nodes` for vmalloc's
    /// own window, with more than one node.
    fn node_of(&self, lo: u64, hi: u64) -> Option<usize> {
        (self.nodes > 1 && (lo, hi) == self.vmalloc).then(|| self.cpu % self.nodes)
    }

    /// One try's answer and whether a pool gave it (then it is off the
    /// pool); the free tree's answer is not taken yet.
    fn pick(
        &mut self,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
    ) -> Result<(u64, bool), RequestError> {
        let req = Request::bytes(size).ok_or(RequestError::ZeroSize)?;
        let (vs, ve) = req.align(align).within(lo..hi).clamp(self.tree.space())?;
        if let Some(a) = self
            .node_of(lo, hi)
            .and_then(|n| self.pool_take(n, size, align))
        {
            self.hits += 1;
            return Ok((a, true));
        }
        match self.shape.find(size, align, vs, ve) {
            Some(a) => Ok((a, false)),
            None => Err(RequestError::NoFit {
                size,
                align,
                window: (vs, ve),
                largest_free: self.shape.largest(),
            }),
        }
    }

    /// The address the next allocation of `size` bytes at `align` in
    /// `[lo, hi)` would get, without taking it: the request's pool's
    /// newest area when aligned, else the free tree's fit. `None` when
    /// neither holds it (the allocation would purge and try again) or the
    /// request is invalid.
    pub fn peek(&self, size: u64, align: u64, (lo, hi): (u64, u64)) -> Option<u64> {
        let req = Request::bytes(size)?;
        let (vs, ve) = req
            .align(align)
            .within(lo..hi)
            .clamp(self.tree.space())
            .ok()?;
        let pool = (self.node_of(lo, hi).zip(Self::class(size)))
            .filter(|nc| !self.detached.contains(nc))
            .and_then(|(n, c)| self.pools[n][c].front().copied());
        (pool.filter(|a| a & (align - 1) == 0)).or_else(|| self.shape.find(size, align, vs, ve))
    }

    /// Takes `[a, a + size)` out of the free tree.
    fn take_free(&mut self, a: u64, size: u64, align: u64) -> Result<(), RequestError> {
        let req = Request::bytes(size).ok_or(RequestError::ZeroSize)?;
        self.tree.allocate(req.align(align).at(a))?;
        self.shape.clip(a, size)
    }

    /// Gives the area at `a` back to the free tree.
    fn give_back(&mut self, a: u64) {
        let size = self.tree.free(a).expect("a lazy or pooled area is live");
        self.shape
            .free(a, a + size)
            .expect("a live area is not free");
    }

    /// The area `[a, a + size)` is live, tagged with `node`.
    fn hold(&mut self, a: u64, size: u64, node: Option<usize>) {
        self.live.insert(
            a,
            Area {
                end: a + size,
                node,
            },
        );
    }

    /// Takes the area at `a` out of pool `(node, class)`, if it is there.
    fn pool_remove(&mut self, (n, c): (usize, usize), a: u64) -> Option<u64> {
        let pool = &mut self.pools[n][c];
        let i = pool.iter().position(|&p| p == a)?;
        pool.remove(i)
    }

    /// One try: the pool, then the free tree.
    fn try_alloc(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Result<u64, RequestError> {
        let (a, pooled) = self.pick(size, align, lo, hi)?;
        if !pooled {
            self.take_free(a, size, align)?;
        }
        self.hold(a, size, self.node_of(lo, hi));
        Ok(a)
    }

    /// Judges one allocation on Linux's state: returns this model's answer
    /// (`None`: it would fail), then leaves the state as if the answer had
    /// been `linux`, Linux's own address (taken from the node's pool if it
    /// is there, else from the free tree).
    ///
    /// Two states Linux traces no event for are inferred, each counted: a
    /// shrinker run when Linux's address lies in a pool here
    /// ([`inferred_shrinks`](Self::inferred_shrinks)), and a pool detached
    /// when Linux went to the free tree while the request's pool held an
    /// aligned area ([`inferred_detaches`](Self::inferred_detaches)): a
    /// purge's decay holds each pool off its list while it walks it, and a
    /// walk can outlast many requests on another CPU. A detached pool
    /// serves nothing until Linux takes from it again or the next purge
    /// begins. A Linux address among the areas a decay step set aside
    /// ([`PurgeStep::Detach`]) was taken from the pool just before the
    /// detach: it leaves the set-aside areas.
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
        let ours = match self.pick(size, align, lo, hi) {
            Ok(a) => Some(a),
            Err(RequestError::NoFit { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let node = self.node_of(lo, hi);
        let class = node.zip(Self::class(size));
        if let (Some((a, true)), Some((n, c))) = (ours, class) {
            if a != linux {
                self.hits -= 1;
                self.pools[n][c].push_front(a);
            }
        }
        let pooled = match (ours, class) {
            (Some((a, true)), _) if a == linux => Some(a),
            (_, Some(nc)) => self.pool_remove(nc, linux),
            _ => None,
        };
        if let (Some(_), Some(nc)) = (pooled, class) {
            // Linux took from the pool: it is attached.
            self.detached.retain(|&d| d != nc);
        }
        let hit = matches!(ours, Some((a, true)) if a != linux);
        if pooled.is_none() && self.take_aside(linux, size) {
            // Linux took it from its pool just before a decay's detach:
            // the two CPUs' events are not in their lock order.
        } else if pooled.is_none() && hit && self.take_free(linux, size, align).is_ok() {
            // Linux passed over a pool that held an area: a purge's
            // decay, which leaves no event until the purge ends, holds
            // that pool detached while it walks it.
            if let Some(nc) = class {
                self.detached.push(nc);
                self.inferred_detaches += 1;
            }
        } else if pooled.is_none() && self.take_free(linux, size, align).is_err() {
            // Only the shrinker, which leaves no trace event, frees a
            // pooled area outside a purge.
            if !self.pooled_overlap(linux, linux.saturating_add(size)) {
                return Err(AllocError::NoSpace);
            }
            self.shrink();
            self.inferred_shrinks += 1;
            self.take_free(linux, size, align)?;
        }
        self.hold(linux, size, node);
        Ok(ours.map(|(a, _)| a))
    }

    /// Gives a request Linux's address `linux` where this state holds it:
    /// in the request's pool, among the areas a decay set aside, or in the
    /// free tree; nothing is inferred (see [`alloc_judged`](Self::alloc_judged)).
    /// For a request that ran at an earlier state than this one, where its
    /// answer was `linux`: another CPU's purge steps, traced before the
    /// request's event, ran after the request took its pool and the tree.
    ///
    /// # Errors
    /// `Invalid` for a request Linux would refuse or an address it could
    /// not answer (misaligned, outside the window); `NoSpace` when
    /// `[linux, linux + size)` is none of those. Nothing changes then.
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{LinuxNodes, PurgeStep};
    /// use mmkit::range::RangeAllocator;
    ///
    /// let (vs, ve) = (0x10_0000, 0x100_0000);
    /// let mut n = LinuxNodes::new(0x1000, 0x200_0000, 2, (vs, ve)).unwrap();
    /// let a = n.alloc_in(0x1000, 0x1000, vs, ve).unwrap();
    /// n.free_lazy(a).unwrap();
    /// n.purge(&mut |_, _| {}); // into node 0's pool of 1 page
    /// n.purge_step(PurgeStep::Start { full: true });
    /// n.purge_step(PurgeStep::Detach { node: 0, pages: 1 });
    /// // The pool's area is set aside: the request took it before the detach.
    /// n.alloc_at(0x1000, 0x1000, (vs, ve), a).unwrap();
    /// n.purge_step(PurgeStep::Reclaim { node: 0 });
    /// assert_eq!(n.alloc_in(0x1000, 0x1000, vs, ve), Ok(vs + 0x1000));
    /// n.check().unwrap();
    /// ```
    pub fn alloc_at(
        &mut self,
        size: u64,
        align: u64,
        (lo, hi): (u64, u64),
        linux: u64,
    ) -> Result<(), AllocError> {
        let req = Request::bytes(size).ok_or(AllocError::Invalid)?;
        let (vs, ve) = (req.align(align).within(lo..hi))
            .clamp(self.tree.space())
            .map_err(AllocError::from)?;
        let fits = linux.checked_add(size).is_some_and(|end| end <= ve);
        if linux < vs || !fits || linux & (align - 1) != 0 {
            return Err(AllocError::Invalid);
        }
        let node = self.node_of(lo, hi);
        let pooled = (node.zip(Self::class(size))).and_then(|nc| self.pool_remove(nc, linux));
        if pooled.is_some() || self.take_aside(linux, size) {
            self.hits += 1;
        } else {
            self.take_free(linux, size, align)?;
        }
        self.hold(linux, size, node);
        Ok(())
    }

    /// Whether a lazily freed area overlaps `[lo, hi)`.
    pub fn lazy_overlap(&self, lo: u64, hi: u64) -> bool {
        self.lazy_areas().any(|l| l.start < hi && l.end > lo)
    }

    /// Every lazily freed area, those a begun purge took included.
    fn lazy_areas(&self) -> impl Iterator<Item = &Lazy> + Clone + '_ {
        let purging = self.purging.iter().flat_map(|p| p.nodes.iter().flatten());
        self.lazy.iter().flatten().chain(purging)
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
        self.decay(true);
    }

    /// `decay_va_pool_node` on every node in turn: each pool gives its
    /// newest `len / 4` areas back, all of them when `full` or when it
    /// holds fewer than 4 ([`PurgeStep`]).
    fn decay(&mut self, full: bool) {
        for node in 0..self.nodes {
            self.decay_node(node, full);
        }
    }

    /// A run of areas already given back to `tree`, into `shape`.
    fn free_run(&mut self, run: Option<(u64, u64)>) {
        if let Some((s, e)) = run {
            self.shape.free(s, e).expect("a pooled run is not free");
        }
    }

    /// Pools [`alloc_judged`](Self::alloc_judged) inferred detached by a
    /// purge's decay: Linux went to the free tree while the request's pool
    /// held an area.
    pub fn inferred_detaches(&self) -> u64 {
        self.inferred_detaches
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
    /// Its steps run at once: [`PurgeStep::Start`], then for each node in
    /// turn its decay and `Take`.
    pub fn purge_begin(&mut self, full: bool) {
        self.purge_step(PurgeStep::Start { full });
        for node in 0..self.nodes {
            self.decay_node(node, full);
            self.purge_step(PurgeStep::Take { node });
        }
    }

    /// The second half of a purge: the lazy areas it took, node by node
    /// in address order, go to the front of their pool (tagged, at most 256
    /// pages, not a full purge) or back to the free tree. Whether there
    /// were any; `false` when no purge had begun.
    pub fn purge_end(&mut self) -> bool {
        let Some(nodes) = self.purging.as_ref().map(|p| p.nodes.len()) else {
            return false;
        };
        for n in 0..nodes {
            self.purge_node(n);
        }
        let freed = self.purging.take().is_some_and(|p| p.done > 0);
        self.purges += u64::from(freed);
        freed
    }

    /// `purge_vmap_node` for one node of the purge that began: the lazy
    /// areas it took for `node`, in address order, go to the front of
    /// their pool (tagged, at most 256 pages, not a full purge) or back to
    /// the free tree, the highest first. Linux walks the nodes one by one
    /// between the purge's start and its event, so another CPU can take
    /// from node 0's pools before node 1's areas are back. Whether any
    /// area moved; `false` when no purge had begun or `node` is out of
    /// range or already done.
    pub fn purge_node(&mut self, node: usize) -> bool {
        let Some(p) = self.purging.as_mut() else {
            return false;
        };
        let Some(lazy) = p.nodes.get_mut(node) else {
            return false;
        };
        let mut lazy = core::mem::take(lazy);
        let full = p.full;
        p.done += lazy.len();
        lazy.sort_unstable();
        let mut back = Vec::new();
        let moved = !lazy.is_empty();
        for l in lazy {
            match Self::class(l.end - l.start) {
                Some(c) if l.tagged && !full => self.pools[node][c].push_front(l.start),
                _ => back.push(l.start),
            }
        }
        for &s in back.iter().rev() {
            self.give_back(s);
        }
        self.lazy_bytes = self.lazy_areas().map(|l| l.end - l.start).sum();
        moved
    }
}

impl RangeAllocator for LinuxNodes {
    fn space(&self) -> (u64, u64) {
        self.tree.space()
    }

    fn alloc_in(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Result<u64, AllocError> {
        match self.try_alloc(size, align, lo, hi) {
            Err(RequestError::NoFit { .. }) => {
                self.retries += 1;
                self.purge_nodes(true);
                self.try_alloc(size, align, lo, hi)
                    .map_err(AllocError::from)
            }
            r => r.map_err(AllocError::from),
        }
    }

    fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
        let area = self.live.remove(&addr).ok_or(FreeError::NotAllocated)?;
        self.give_back(addr);
        Ok(area.end - addr)
    }

    fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
        let area = self.live.remove(&addr).ok_or(FreeError::NotAllocated)?;
        let n = Self::lazy_node(self.nodes, area.node, addr);
        self.lazy[n].push(Lazy {
            start: addr,
            end: area.end,
            tagged: area.node.is_some(),
        });
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
        let taken = self.purging.iter().flat_map(|p| p.nodes.iter().flatten());
        let span = taken.fold(None, |acc, l| {
            let (s, e) = (l.start, l.end);
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
        s.lazy_bytes = lazy.map(|l| l.end - l.start).sum();
        s.purges = self.purges;
        s.flushes = self.purges;
        s
    }

    /// The tree's own check, and: the tree's live areas are exactly the
    /// live, lazy and pooled areas here, each once; a pooled area has its
    /// pool's size.
    fn check(&self) -> Result<(), CheckError> {
        self.tree.check()?;
        self.shape.check()?;
        let bad = |at: u64, what: &str| {
            Err(CheckError::new(
                "linux-nodes",
                Invariant::Accounting,
                Some(at),
                what,
            ))
        };
        let mut held: Vec<(u64, u64)> = self.live.iter().map(|(&a, v)| (a, v.end)).collect();
        held.extend(self.lazy_areas().map(|l| (l.start, l.end)));
        held.extend(self.decaying.iter().flatten());
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
        if let Some(b) = (self.tree.free_blocks())
            .zip(self.shape.blocks())
            .find(|(a, b)| a != b)
        {
            return bad(b.0.start, "the shaped tree's free blocks differ");
        }
        if self.tree.free_blocks().count() != self.shape.blocks().count() {
            return bad(0, "the shaped tree's free blocks differ in number");
        }
        Ok(())
    }
}
