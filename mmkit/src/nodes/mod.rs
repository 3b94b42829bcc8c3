//! [`VmapNodes`]: the range allocator as Linux runs it since 6.9 (Uladzislau
//! Rezki, "Mitigate a vmap lock contention"): one *vmap node* per CPU, each
//! with its own lock, in front of the exact allocator's free tree, which
//! has a lock of its own and is touched only on a pool miss, a pool
//! overflow and a purge.
//!
//! ```text
//!   node 0 (lock): busy {live areas it handed out}  lazy [..]  pools: 1 granule [..] .. 256 [..]
//!   node 1 (lock): busy {..}                        lazy [..]  pools: ...
//!   ...
//!   purge (lock):  the flush hook; serialises purges
//!   global (lock): VmapAllocator made without a busy index: the free
//!                  tree, lowest fit; pooled and lazy areas are live there
//! ```
//!
//! # What each call does
//! - `alloc(cpu, size, align)`: node `cpu % nodes`. A size of `k` granules
//!   (`1 <= k <= classes`) whose pool's newest area is aligned takes it (a
//!   *hit*: the node's lock only). Otherwise (a *miss*) the global free
//!   tree gives the exact lowest fit, under its lock. Either way the area
//!   enters the node's busy index. A miss that finds no space drains every
//!   node (lazy lists and pools, all of them) and asks once more, so
//!   `NoSpace` means nothing fits in the whole space.
//! - `free_lazy(cpu, addr)`: the area leaves its node's busy index for the
//!   node's lazy list (node `cpu % nodes` is looked at first, then the
//!   others, one lock at a time). When a node's lazy bytes pass `lazy_max`,
//!   every node is purged: node `cpu % nodes` settles its share at once,
//!   every other node owes its share (below).
//! - `purge()`: takes every node's lazy list and calls the flush hook once
//!   with the range covering them all; then each node *settles* its share:
//!   each pool loses its oldest areas, a quarter of the fewest it held
//!   since its last decay (`low / 4`: areas no allocation needed all
//!   along; the kernel's `decay_va_pool_node` takes `len / 4`), then the
//!   pools take every flushed area of a pooled size, however many: the
//!   decay alone bounds a pool, as in the kernel. What is not pooled goes
//!   back to the free tree under one global lock acquisition.
//! - A pool in use keeps what its allocations take back out: with the
//!   kernel's `len / 4`, a pool that a loop empties and refills between
//!   purges loses a quarter of its areas at each, and the loop's next
//!   allocations of that size miss (take the free tree's lock, shared by
//!   every node). The low-water mark decays only the surplus.
//! - A purge started by a lazy free leaves each other node's share *owed*:
//!   the node settles it under its own lock at its next allocation, so
//!   the thread that purges writes no other node's pools (the cache lines
//!   two threads would pass back and forth at every purge). A node that
//!   has not allocated by the next purge is settled by that purge.
//!   `purge()`, `drain()` and a failing allocation settle every node at
//!   once.
//! - The decay of a purge a lazy free started is *earned*: a node's pools
//!   lose their quarter only once the node's own lazy bytes flushed since
//!   their last decay pass `lazy_max`. Each node's lazy list starts a
//!   purge of every node, so with more threads freeing, purges come more
//!   often; a decay at each would empty the pools of a thread that ran
//!   less than the others (a preempted one, or one that waited for a
//!   lock) and send its next allocations to the free tree. Earned, the
//!   decay comes once per `lazy_max` of the node's own frees, as with one
//!   thread. `purge()` decays every node.
//! - `free(cpu, addr)`: as `free_lazy` then a purge of that area alone with
//!   no flush (the caller vouches that no stale translation remains): it
//!   goes to its node's pool, or back to the free tree.
//! - `free_sized` / `free_lazy_sized`: the same, the size checked against
//!   the node's busy index (a wrong one is `SizeMismatch`).
//!
//! # Exactness
//! With every pool empty and no lazy area, every answer is the exact lowest
//! fit of the free space. A hit is the newest pooled area of that size on
//! the caller's node, wherever it lies: not the lowest fit, and a pooled
//! area is not free to the other nodes (nor to other sizes) until a purge
//! decays it or a failing allocation drains it. [`drain`](VmapNodes::drain)
//! makes the free tree whole again.
//!
//! # Where it differs from the kernel
//! The kernel files a busy area on the node of its address (`(addr / 16
//! pages) % nodes`), so that a free on any CPU finds it under one lock;
//! here it stays on the node that handed it out, so a thread that frees
//! what it allocated touches only its own node's lock, and a free on
//! another node looks at each node in turn. A purge pools without a
//! limit, as the kernel's; `free` pools without a purge, so there
//! `pool_max` bounds a pool. The kernel's purging CPU settles every node
//! (or, for a large purge, a worker on each node's CPU does); here a
//! threshold purge leaves the other nodes' shares to them. The kernel
//! decays every node at every purge; here a threshold purge decays a
//! node once per `lazy_max` of its own frees, so a node that stops
//! freeing keeps its pools until `purge()`, `drain()` or a failing
//! allocation. The kernel's decay gives back a quarter of a pool's
//! areas, its newest; here a quarter of those it held unused since its
//! last decay, its oldest. A misaligned
//! newest area is a miss here; the kernel rotates it to the pool's tail.
//!
//! # Locks
//! Lock order: the purge lock, then one node, then the global lock. No
//! thread holds two nodes but [`check`](VmapNodes::check) (in index
//! order, under the purge lock). The flush hook runs under the purge lock:
//! it must not call back into the allocator.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use crate::error::{AllocError, FreeError};
use crate::lazy::{Batch, LazyList};
use crate::range::FlushHook;
use crate::request::{Policy, Request, RequestError};
use crate::vmap::busy::BusyIndex;
use crate::vmap::VmapAllocator;

mod check;
pub use check::NodesStats;
pub mod linux;
pub mod linux_rbtree;
pub use linux::{LinuxNodes, PurgeStep};
pub use linux_rbtree::LinuxFreeTree;
mod lock;
mod purge;
#[cfg(test)]
mod tests;

use lock::Lock;

/// The sizes of a [`VmapNodes`].
///
/// ```
/// use mmkit::nodes::NodesConfig;
/// let c = NodesConfig::default();
/// assert_eq!((c.nodes, c.granule, c.classes, c.pool_max), (2, 4096, 256, 64));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodesConfig {
    /// Nodes (the kernel: one per CPU, at most 128), 1 to 4096.
    pub nodes: usize,
    /// The pools' size unit in bytes, a power of two (4096: a page).
    pub granule: u64,
    /// Pooled sizes: 1 to `classes` granules (the kernel: 256 pages), 1 to
    /// 4096.
    pub classes: usize,
    /// Areas one node's pool of a size takes from eager frees
    /// ([`VmapNodes::free`]); more go back to the free tree. A purge pools
    /// every lazy area of a pooled size, and its decay bounds the pools.
    pub pool_max: usize,
    /// Lazily freed bytes one node holds before it purges every node.
    pub lazy_max: u64,
}

impl Default for NodesConfig {
    fn default() -> Self {
        NodesConfig {
            nodes: 2,
            granule: 4096,
            classes: 256,
            pool_max: 64,
            lazy_max: crate::range::DEFAULT_LAZY_MAX,
        }
    }
}

impl NodesConfig {
    fn valid(&self) -> bool {
        (1..=4096).contains(&self.nodes)
            && self.granule.is_power_of_two()
            && (1..=4096).contains(&self.classes)
    }
}

/// One node's counters.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NodeStats {
    /// Allocations served from a pool (no global lock).
    pub hits: u64,
    /// Allocations the free tree served.
    pub misses: u64,
    /// Live areas filed on this node.
    pub live: u64,
    /// Areas on its lazy list, and those a purge flushed that the node
    /// has not settled yet (see [`VmapNodes::purge`]).
    pub lazy: u64,
    /// Areas in its pools.
    pub pooled: u64,
}

/// One vmap node: the live areas it handed out, its lazy list, its pools.
#[derive(Debug)]
struct Node {
    busy: BusyIndex,
    /// Lazily freed areas; past the configuration's `lazy_max`, every
    /// node is purged.
    lazy: LazyList<(u64, u64)>,
    /// `pools[k]`: free areas of `k + 1` granules.
    pools: Vec<Pool>,
    /// The areas in `pools`: a purge skips the decay of a node that
    /// pools nothing (most nodes, on a machine of many CPUs and few
    /// threads) without reading its pools.
    pooled: usize,
    /// A threshold purge started on another node left this node its
    /// share: decay the pools, then pool `flushed`. The node settles it
    /// itself at its next allocation (or the next purge does), so the
    /// purging thread does not write this node's pools.
    owed: bool,
    /// This node's areas that purge flushed, not yet pooled or freed.
    flushed: Option<Batch<(u64, u64)>>,
    /// The bytes of `flushed`.
    flushed_bytes: u64,
    /// Bytes of this node's lazy areas flushed since its pools last
    /// decayed: a threshold purge decays them once this passes
    /// `lazy_max`, so they decay once per `lazy_max` of the node's own
    /// frees, however often other nodes purge.
    undecayed: u64,
    /// An emptied lazy vector, for the lazy list's next batch: the lists
    /// allocate nothing in steady state.
    spare: Vec<(u64, u64)>,
    /// The areas a settle gives back to the free tree, kept (empty)
    /// between settles.
    back: Vec<(u64, u64)>,
    hits: u64,
    misses: u64,
}

/// The free areas of one size a node keeps.
#[derive(Debug, Clone, Default)]
struct Pool {
    /// Their starts, oldest first.
    areas: Vec<u64>,
    /// The fewest areas the pool held since its last decay: that many sat
    /// unused all along, and the next decay takes a quarter of them.
    low: usize,
}

/// A lock on its own cache lines: nodes share none.
#[derive(Debug)]
#[repr(align(128))]
struct Padded<T>(T);

/// The purge lock's contents.
struct Purger {
    hook: Option<FlushHook>,
    purges: u64,
    /// The pools' decayed areas a purge gives back to the free tree, kept
    /// (empty) between purges so that a purge allocates nothing.
    back: Vec<(u64, u64)>,
}

/// Linux 6.9's vmap nodes over the exact allocator, `Send + Sync`, behind
/// any [`lock_api::RawMutex`] (a spin lock in a kernel, `parking_lot`'s in
/// user space): see the [module docs](self).
///
/// # Examples
/// ```
/// use mmkit::nodes::{NodesConfig, VmapNodes};
/// type Nodes = VmapNodes<parking_lot::RawMutex>;
/// let v = Nodes::new(0, 1 << 30, NodesConfig::default()).unwrap();
/// let a = v.alloc(0, 8192, 4096).unwrap(); // a miss: the lowest fit, 0
/// assert_eq!(a, 0);
/// v.free(0, a).unwrap(); // into node 0's pool of 2 pages
/// assert_eq!(v.alloc(1, 8192, 4096), Ok(8192)); // node 1: its pool is empty
/// assert_eq!(v.alloc(0, 8192, 4096), Ok(0)); // node 0: a hit
/// assert_eq!(v.node_stats(0).hits, 1);
/// v.check().unwrap();
/// ```
pub struct VmapNodes<R: lock_api::RawMutex> {
    cfg: NodesConfig,
    /// `log2(granule)`: a size's class is a shift away.
    granule_shift: u32,
    nodes: Box<[Padded<Lock<R, Node>>]>,
    /// Apart from the fields above, which every call reads: each purge
    /// writes it.
    purger: Padded<Lock<R, Purger>>,
    global: Padded<Lock<R, VmapAllocator>>,
}

/// [`VmapNodes`] behind `parking_lot`'s lock.
#[cfg(feature = "std")]
pub type StdVmapNodes = VmapNodes<parking_lot::RawMutex>;

impl<R: lock_api::RawMutex> core::fmt::Debug for VmapNodes<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VmapNodes")
            .field("config", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl<R: lock_api::RawMutex> VmapNodes<R> {
    /// Nodes over the space `[start, end)`, all of it free.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] for `start >= end` or a configuration out
    /// of its limits.
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{NodesConfig, StdVmapNodes};
    /// use mmkit::AllocError;
    /// let bad = NodesConfig { nodes: 0, ..NodesConfig::default() };
    /// assert_eq!(StdVmapNodes::new(0, 1 << 20, bad).unwrap_err(), AllocError::Invalid);
    /// assert!(StdVmapNodes::new(5, 5, NodesConfig::default()).is_err());
    /// ```
    pub fn new(start: u64, end: u64, cfg: NodesConfig) -> Result<Self, AllocError> {
        if !cfg.valid() {
            return Err(AllocError::Invalid);
        }
        let va = VmapAllocator::without_busy_index(start, end)?;
        let node = || {
            Padded(Lock::new(Node {
                busy: BusyIndex::new(),
                lazy: LazyList::new(cfg.lazy_max),
                pools: vec![Pool::default(); cfg.classes],
                pooled: 0,
                owed: false,
                flushed: None,
                flushed_bytes: 0,
                undecayed: 0,
                spare: Vec::new(),
                back: Vec::new(),
                hits: 0,
                misses: 0,
            }))
        };
        Ok(VmapNodes {
            cfg,
            granule_shift: cfg.granule.trailing_zeros(),
            nodes: (0..cfg.nodes).map(|_| node()).collect(),
            purger: Padded(Lock::new(Purger {
                hook: None,
                purges: 0,
                back: Vec::new(),
            })),
            global: Padded(Lock::new(va)),
        })
    }

    /// The configuration.
    pub fn config(&self) -> NodesConfig {
        self.cfg
    }

    /// Installs the flush every purge calls once with the range covering
    /// its areas. It runs under the purge lock: it must not call back into
    /// this allocator.
    pub fn set_flush_hook(&self, hook: Option<FlushHook>) {
        self.purger.0.lock().hook = hook;
    }

    /// The pool index of a `size`-byte area, if that size is pooled: a
    /// shift and a mask (the granule is a power of two), as this runs on
    /// every allocation and every pooled free.
    #[inline]
    fn class_of(&self, size: u64) -> Option<usize> {
        let k = (size >> self.granule_shift).wrapping_sub(1);
        let whole = size & (self.cfg.granule - 1) == 0;
        // `k` wraps to u64::MAX for sizes under a granule.
        (whole && k < self.cfg.classes as u64).then_some(k as usize)
    }

    /// The index of node `cpu % nodes`, without a division when `cpu`
    /// names a node already (the common case: one CPU, one node).
    #[inline]
    fn node_of(&self, cpu: usize) -> usize {
        let k = self.nodes.len();
        if cpu < k {
            cpu
        } else {
            cpu % k
        }
    }

    /// Allocates `size` bytes aligned to `align` on node `cpu % nodes`:
    /// from its pool of that size when the newest pooled area is aligned,
    /// else the lowest fit of the free tree (see the [module docs](self)).
    ///
    /// # Errors
    /// [`AllocError::Invalid`] for `size == 0` or an alignment that is not
    /// a power of two; [`AllocError::NoSpace`] when nothing fits, also
    /// after every node was drained.
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{NodesConfig, StdVmapNodes};
    /// use mmkit::AllocError;
    /// let v = StdVmapNodes::new(0, 1 << 20, NodesConfig::default()).unwrap();
    /// assert_eq!(v.alloc(0, 4096, 4096), Ok(0));
    /// assert_eq!(v.alloc(7, 4096, 4096), Ok(4096)); // node 7 % 2 = 1
    /// assert_eq!(v.alloc(0, 0, 4096), Err(AllocError::Invalid));
    /// assert_eq!(v.alloc(0, 1 << 21, 1), Err(AllocError::NoSpace));
    /// ```
    pub fn alloc(&self, cpu: usize, size: u64, align: u64) -> Result<u64, AllocError> {
        if size == 0 || !align.is_power_of_two() {
            return Err(AllocError::Invalid);
        }
        self.take_or_ask(cpu, size, align, true, |va| {
            va.alloc(size, align)
                .map_err(|e| (e == AllocError::NoSpace, e))
        })
    }

    /// Allocates by a [`Request`] on node `cpu % nodes`: a request with
    /// no window, placed lowest or best, may take a pooled area as
    /// [`alloc`](Self::alloc) does (a pooled area of exactly the size is
    /// as good a fit as any); every other request, and a miss, is
    /// answered by the free tree with the request's policy, exactly.
    ///
    /// # Errors
    /// As [`VmapAllocator::allocate`]; a request that finds no space asks
    /// once more after every node was drained.
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{NodesConfig, StdVmapNodes};
    /// use mmkit::request::{Policy, Request};
    /// let v = StdVmapNodes::new(0, 1 << 20, NodesConfig::default()).unwrap();
    /// let top = Request::bytes(4096).unwrap().align(4096).policy(Policy::Highest);
    /// assert_eq!(v.allocate(0, &top), Ok((1 << 20) - 4096));
    /// let best = Request::bytes(4096).unwrap().policy(Policy::BestFit);
    /// assert_eq!(v.allocate(1, &best), Ok(0));
    /// ```
    pub fn allocate(&self, cpu: usize, req: &Request) -> Result<u64, RequestError> {
        let align = req.alignment();
        if !align.is_power_of_two() {
            return Err(RequestError::BadAlign { align });
        }
        let poolable =
            req.window().is_none() && matches!(req.placement(), Policy::Lowest | Policy::BestFit);
        self.take_or_ask(cpu, req.size(), align, poolable, |va| {
            va.allocate(req.clone()).map_err(|e| {
                let no_space =
                    matches!(e, RequestError::NoFit { .. } | RequestError::NotFree { .. });
                (no_space, e)
            })
        })
    }

    /// The pooled area of node `cpu % nodes` for `size` at `align` when
    /// `poolable` and there is one, else what `ask` gets from the free
    /// tree (its error paired with whether it means no space: then every
    /// node is drained and `ask` runs once more). The area enters the
    /// node's busy index.
    fn take_or_ask<E>(
        &self,
        cpu: usize,
        size: u64,
        align: u64,
        poolable: bool,
        ask: impl Fn(&mut VmapAllocator) -> Result<u64, (bool, E)>,
    ) -> Result<u64, E> {
        let at = &self.nodes[self.node_of(cpu)].0;
        let mut n = at.lock();
        if n.owed {
            self.settle_owed(&mut n);
        }
        if let Some(k) = self.class_of(size).filter(|_| poolable) {
            let p = &mut n.pools[k];
            if let Some(&a) = p.areas.last() {
                if a & (align - 1) == 0 {
                    p.areas.pop();
                    p.low = p.low.min(p.areas.len());
                    n.pooled -= 1;
                    n.hits += 1;
                    n.busy.insert(a, a + size);
                    return Ok(a);
                }
            }
        }
        n.misses += 1;
        let got = ask(&mut self.global.0.lock_spinning());
        let a = match got {
            Err((true, _)) => {
                // Pooled and lazy areas may hold the space: every node gives
                // them back (this one's lock released first: a drain takes
                // each node's), then the free tree is asked once more.
                drop(n);
                self.drain();
                n = at.lock();
                ask(&mut self.global.0.lock_spinning()).map_err(|e| e.1)?
            }
            r => r.map_err(|e| e.1)?,
        };
        n.busy.insert(a, a + size);
        Ok(a)
    }

    /// [`alloc`](Self::alloc) on this thread's node: threads are given
    /// nodes round robin on their first call ([`crate::vblock::current_slot`]),
    /// a stand-in for the CPU the thread runs on.
    ///
    /// # Errors
    /// As [`alloc`](Self::alloc).
    #[cfg(feature = "std")]
    pub fn alloc_here(&self, size: u64, align: u64) -> Result<u64, AllocError> {
        self.alloc(crate::vblock::current_slot(), size, align)
    }

    /// Frees the live area at `addr` lazily: it waits on its node's lazy
    /// list for a purge (one flush per batch), then goes to that node's
    /// pool of its size. Node `cpu % nodes` is looked at first. Returns the
    /// area's size.
    ///
    /// # Errors
    /// [`FreeError::NotAllocated`] when no live area starts at `addr`
    /// (double free included). Nothing changes then.
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{NodesConfig, StdVmapNodes};
    /// use mmkit::FreeError;
    /// let v = StdVmapNodes::new(0, 1 << 20, NodesConfig::default()).unwrap();
    /// let a = v.alloc(0, 4096, 4096).unwrap();
    /// assert_eq!(v.free_lazy(1, a), Ok(4096)); // any CPU may free it...
    /// assert_eq!(v.free_lazy(1, a), Err(FreeError::NotAllocated));
    /// assert_eq!(v.node_stats(0).lazy, 1); // ...on the node that owns it
    /// assert!(v.purge());
    /// assert_eq!(v.node_stats(0).pooled, 1);
    /// ```
    pub fn free_lazy(&self, cpu: usize, addr: u64) -> Result<u64, FreeError> {
        self.lazy_on_owner(cpu, addr, None)
    }

    /// [`free_lazy`](Self::free_lazy) with the area's size, checked
    /// against its node's busy index.
    ///
    /// # Errors
    /// As [`free_lazy`](Self::free_lazy); [`FreeError::SizeMismatch`] for a
    /// live area of another size, [`FreeError::Invalid`] for `size == 0`.
    pub fn free_lazy_sized(&self, cpu: usize, addr: u64, size: u64) -> Result<u64, FreeError> {
        self.lazy_on_owner(cpu, addr, Some(size))
    }

    /// Frees the live area at `addr` at once, into its node's pool of its
    /// size (or back to the free tree when it has no pool or the pool is
    /// full). Node `cpu % nodes` is looked at first. Returns its size.
    ///
    /// # Errors
    /// As [`free_lazy`](Self::free_lazy).
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{NodesConfig, StdVmapNodes};
    /// let v = StdVmapNodes::new(0, 1 << 30, NodesConfig::default()).unwrap();
    /// let a = v.alloc(0, 4096, 4096).unwrap();
    /// let big = v.alloc(0, 1 << 21, 4096).unwrap(); // 512 pages: never pooled
    /// assert_eq!(v.free(0, a), Ok(4096));
    /// assert_eq!(v.free(0, big), Ok(1 << 21));
    /// assert_eq!(v.node_stats(0).pooled, 1);
    /// ```
    pub fn free(&self, cpu: usize, addr: u64) -> Result<u64, FreeError> {
        self.pool_on_owner(cpu, addr, None)
    }

    /// [`free`](Self::free) with the area's size, checked against its
    /// node's busy index.
    ///
    /// # Errors
    /// As [`free_lazy_sized`](Self::free_lazy_sized).
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{NodesConfig, StdVmapNodes};
    /// use mmkit::FreeError;
    /// let v = StdVmapNodes::new(0, 1 << 20, NodesConfig::default()).unwrap();
    /// let a = v.alloc(0, 4096, 4096).unwrap();
    /// assert_eq!(v.free_sized(0, a, 8192), Err(FreeError::SizeMismatch));
    /// assert_eq!(v.free_sized(0, a, 4096), Ok(4096));
    /// ```
    pub fn free_sized(&self, cpu: usize, addr: u64, size: u64) -> Result<u64, FreeError> {
        self.pool_on_owner(cpu, addr, Some(size))
    }

    fn lazy_on_owner(&self, cpu: usize, addr: u64, size: Option<u64>) -> Result<u64, FreeError> {
        let (mut n, end) = self.owner(cpu, addr, size)?;
        let over = n.lazy.push((addr, end));
        drop(n);
        if over {
            self.purge_from(self.node_of(cpu));
        }
        Ok(end - addr)
    }

    fn pool_on_owner(&self, cpu: usize, addr: u64, size: Option<u64>) -> Result<u64, FreeError> {
        let (mut n, end) = self.owner(cpu, addr, size)?;
        if let Some(area) = self.pool(&mut n, addr, end, self.cfg.pool_max) {
            self.give_back(core::iter::once(&[area][..]));
        }
        Ok(end - addr)
    }

    /// The node that owns the live area at `addr`, locked, with the area
    /// taken out of its busy index, and the area's end: node `cpu % nodes`
    /// first, then the others, one lock at a time. With `size`, an area
    /// of another size stays and is refused.
    fn owner(
        &self,
        cpu: usize,
        addr: u64,
        size: Option<u64>,
    ) -> Result<(lock::Guard<'_, R, Node>, u64), FreeError> {
        if size == Some(0) {
            return Err(FreeError::Invalid);
        }
        let k = self.nodes.len();
        let first = self.node_of(cpu);
        let mut i = first;
        loop {
            let mut n = self.nodes[i].0.lock();
            let probe = n.busy.probe(addr);
            let fits = |end| size.map_or(true, |s| addr.checked_add(s) == Some(end));
            match n.busy.remove_probed_if(addr, probe, fits) {
                Some(Ok(end)) => return Ok((n, end)),
                Some(Err(_)) => return Err(FreeError::SizeMismatch),
                None => {}
            }
            drop(n);
            i = if i + 1 == k { 0 } else { i + 1 };
            if i == first {
                return Err(FreeError::NotAllocated);
            }
        }
    }

    /// Puts the free area `[s, e)` in `n`'s pool of its size while that
    /// pool holds fewer than `max` areas, or returns it for the free tree.
    #[inline]
    fn pool(&self, n: &mut Node, s: u64, e: u64, max: usize) -> Option<(u64, u64)> {
        match self.class_of(e - s) {
            Some(k) if n.pools[k].areas.len() < max => {
                n.pools[k].areas.push(s);
                n.pooled += 1;
                None
            }
            _ => Some((s, e)),
        }
    }

    /// Frees each list of `lists` in the free tree, all under one lock
    /// acquisition, each run of neighbours in a list that are adjacent in
    /// space (a purge's lazy areas mostly are, in either order) joined: one
    /// tree update per run.
    fn give_back<'a>(&self, lists: impl Iterator<Item = &'a [(u64, u64)]>) {
        let mut g = None;
        for areas in lists.filter(|l| !l.is_empty()) {
            let g = g.get_or_insert_with(|| self.global.0.lock_spinning());
            let mut i = 0;
            while let Some(&(mut lo, mut hi)) = areas.get(i) {
                let mut j = i + 1;
                while let Some(&(s, e)) = areas.get(j) {
                    match (s == hi, e == lo) {
                        (true, _) => hi = e,
                        (_, true) => lo = s,
                        _ => break,
                    }
                    j += 1;
                }
                // Cannot fail: pooled and lazy areas are live in the tree.
                let freed = g.free_run(&areas[i..j], lo, hi);
                debug_assert!(freed.is_ok(), "a pooled area is live");
                i = j;
            }
        }
    }

    /// Runs `f` on the exact allocator under its lock (pooled and lazy
    /// areas count as live there).
    ///
    /// # Examples
    /// ```
    /// use mmkit::nodes::{NodesConfig, StdVmapNodes};
    /// let v = StdVmapNodes::new(0, 1 << 20, NodesConfig::default()).unwrap();
    /// v.alloc(0, 4096, 4096).unwrap();
    /// assert_eq!(v.with_allocator(|va| va.stats().live_areas), 1);
    /// ```
    pub fn with_allocator<T>(&self, f: impl FnOnce(&mut VmapAllocator) -> T) -> T {
        f(&mut self.global.0.lock())
    }
}
