//! Per-CPU page lists (the kernel's `per_cpu_pages`, "pcp") in front of a
//! [`BuddyAllocator`].
//!
//! Most page allocations are order 0 and are freed soon; the kernel keeps a
//! small stack of free pages per CPU so that such a pair touches neither the
//! zone lock nor the buddy lists:
//!
//! ```text
//!   cpu 0: lists[order index][type]   count (pages)   high   batch
//!          o0: U [..] M [p p p p] R []
//!          o1: ...  o2: ...  o3: ...  o9 (pageblock): ...
//!   cpu 1: ...
//!            |  refill: `batch` pages from the zone, under the zone lock
//!            |  drain: the oldest pages back once count > high
//!   zone:  BuddyAllocator (the zone lock in ConcurrentZone)
//! ```
//!
//! - Lists exist for orders `0..=3` (`PAGE_ALLOC_COSTLY_ORDER`) and for
//!   `pageblock_order` (the 5.13+ high-order pcp lists), for the three
//!   ordinary migratetypes. Other orders and [`MigrateType::HighAtomic`] go
//!   straight to the zone.
//! - `alloc` pops the most recently freed page of its list (cache-hot). An
//!   empty list is refilled with `max(batch >> order, 2)` blocks taken from
//!   the zone in one go (`rmqueue_bulk`); when the zone has none, every CPU's
//!   lists are drained and the zone is asked once more.
//! - `free` pushes the page on its CPU's list; once the CPU holds more than
//!   `high` pages, the oldest are returned to the zone until at most
//!   `high - batch` remain (`free_pcppages_bulk`).
//! - Pages on a pcp list are *allocated* as far as the buddy allocator knows
//!   (as in the kernel, they are not `PageBuddy`), so they do not merge until
//!   drained. [`PcpZone::drain_all`] returns them all.
//!
//! One difference from the kernel: a freed page goes to the list of the type
//! it was *allocated* as (the kernel uses its pageblock's type at free time).
//! That keeps the buddy's record of which allocated blocks are Movable exact,
//! which is what compaction relies on.
//!
//! A per-frame *owner tag* records which blocks are in the caller's hands,
//! so a double free or a free of a page sitting on a pcp list is refused
//! without taking any lock. [`LockedZone`] (feature `lock_api`, `no_std`;
//! [`ConcurrentZone`] with `std`) keeps the same structure behind one lock
//! per CPU, uncontended when each thread uses its own CPU, and takes the
//! zone lock only to refill and drain.
//!
//! # Invariants (checked by [`PcpZone::check`])
//! - every block on a pcp list is an allocated block of the buddy allocator
//!   of the list's order and type, and carries no owner tag;
//! - no block is on two lists or twice on one;
//! - each CPU's `count` is the pages on its lists;
//! - every tagged frame is an allocated block of the tag's order and type;
//! - buddy free pages + pcp pages + tagged pages = present pages.

use alloc::vec;
use alloc::vec::Vec;

use super::{BuddyAllocator, Frame, MigrateType};
use crate::error::{AllocError, CheckError, FreeError};

/// Orders with a pcp list below the pageblock order
/// (`PAGE_ALLOC_COSTLY_ORDER`).
pub const PCP_MAX_SMALL_ORDER: u8 = 3;
/// Migratetypes with pcp lists (`MIGRATE_PCPTYPES`).
const PCP_TYPES: usize = 3;
/// Order slots: `0..=3` and the pageblock order.
const PCP_ORDERS: usize = PCP_MAX_SMALL_ORDER as usize + 2;
/// Lists per CPU (`NR_PCP_LISTS`).
const NR_LISTS: usize = PCP_ORDERS * PCP_TYPES;

/// Sizes of the per-CPU lists.
///
/// ```
/// use mmkit::buddy::pcp::PcpConfig;
/// let c = PcpConfig::default();
/// assert_eq!((c.cpus, c.batch, c.high), (2, 63, 378));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PcpConfig {
    /// Number of CPUs (sets of lists), at least 1.
    pub cpus: usize,
    /// Pages moved per refill or drain (`pcp->batch`; the kernel's
    /// `zone_batchsize` gives 63 on large zones), at least 1.
    pub batch: u32,
    /// Pages a CPU may hold before draining (`pcp->high`; 6 × batch was the
    /// kernel's rule before 5.14).
    pub high: u32,
}

impl Default for PcpConfig {
    fn default() -> Self {
        PcpConfig {
            cpus: 2,
            batch: 63,
            high: 6 * 63,
        }
    }
}

impl PcpConfig {
    fn valid(&self) -> bool {
        self.cpus >= 1 && self.cpus <= 4096 && self.batch >= 1
    }
}

/// Counters of pcp traffic.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PcpStats {
    /// Refills from the zone (zone lock taken).
    pub refills: u64,
    /// Bulk frees to the zone (zone lock taken).
    pub drains: u64,
    /// Allocations and frees that bypassed the lists (other orders,
    /// HighAtomic).
    pub direct: u64,
}

/// The pcp list slot of `(order, mt)`, if it has one.
#[inline]
fn pcp_index(order: u8, mt: MigrateType, pageblock_order: u8) -> Option<usize> {
    pcp_index_raw(order, mt as usize, pageblock_order)
}

/// [`pcp_index`] from the type's discriminant.
#[inline]
fn pcp_index_raw(order: u8, t: usize, pageblock_order: u8) -> Option<usize> {
    let slot = if order <= PCP_MAX_SMALL_ORDER {
        usize::from(order)
    } else if order == pageblock_order {
        PCP_ORDERS - 1
    } else {
        return None;
    };
    (t < PCP_TYPES).then_some(slot * PCP_TYPES + t)
}

/// The order and type of list slot `li`.
fn slot_of(li: usize, pageblock_order: u8) -> (u8, MigrateType) {
    let slot = li / PCP_TYPES;
    let order = if slot == PCP_ORDERS - 1 {
        pageblock_order
    } else {
        slot as u8
    };
    let mt = MigrateType::from_index(li % PCP_TYPES).unwrap_or(MigrateType::Movable);
    (order, mt)
}

/// Owner tag of a block in the caller's hands: `1 | order << 1 | type << 5`;
/// 0 = not in the caller's hands.
#[inline]
fn tag(order: u8, mt: MigrateType) -> u8 {
    1 | order << 1 | (mt as u8) << 5
}

/// The order and type a nonzero tag encodes.
#[inline]
fn untag(t: u8) -> Option<(u8, MigrateType)> {
    let mt = MigrateType::from_index(usize::from(t >> 5))?;
    (t & 1 == 1).then_some(((t >> 1) & 0xf, mt))
}

/// One CPU's lists: stacks of pfns, the newest (hottest) last.
#[derive(Debug, Clone)]
struct PcpLists {
    lists: [Vec<u64>; NR_LISTS],
    /// Pages on all lists.
    count: u64,
    stats: PcpStats,
}

impl PcpLists {
    fn new() -> Self {
        PcpLists {
            lists: core::array::from_fn(|_| Vec::new()),
            count: 0,
            stats: PcpStats::default(),
        }
    }

    #[inline]
    fn pop(&mut self, li: usize, order: u8) -> Option<u64> {
        let pfn = self.lists[li].pop()?;
        self.count -= 1u64 << order;
        Some(pfn)
    }

    #[inline]
    fn push(&mut self, li: usize, order: u8, pfn: u64) {
        self.lists[li].push(pfn);
        self.count += 1u64 << order;
    }

    /// `rmqueue_bulk`: up to `max(batch >> order, 2)` blocks from the zone,
    /// the first taken to be popped first.
    fn refill(&mut self, zone: &mut BuddyAllocator, li: usize, batch: u32) {
        let (order, mt) = slot_of(li, zone.cfg.pageblock_order);
        let n = (batch >> order).max(2);
        let list = &mut self.lists[li];
        let at = list.len();
        for _ in 0..n {
            match zone.alloc(order, mt) {
                Ok(pfn) => list.push(pfn),
                Err(_) => break,
            }
        }
        list[at..].reverse();
        self.count += ((list.len() - at) as u64) << order;
        self.stats.refills += 1;
    }

    /// Everything back to the zone; an empty CPU is skipped (the kernel's
    /// `drain_pages_zone` checks `pcp->count` before taking the zone lock),
    /// so it counts no drain.
    fn drain(&mut self, zone: &mut BuddyAllocator) {
        if self.count > 0 {
            self.free_bulk(zone, 0, 0);
        }
    }

    /// `free_pcppages_bulk`: the oldest pages back to the zone, starting with
    /// list `first`, until at most `target` pages remain.
    fn free_bulk(&mut self, zone: &mut BuddyAllocator, first: usize, target: u64) {
        let pb = zone.cfg.pageblock_order;
        for k in 0..NR_LISTS {
            if self.count <= target {
                break;
            }
            let li = (first + k) % NR_LISTS;
            let (order, _) = slot_of(li, pb);
            let excess = (self.count - target).div_ceil(1u64 << order);
            let take = (excess as usize).min(self.lists[li].len());
            for pfn in self.lists[li].drain(..take) {
                // Cannot fail: pcp blocks are allocated blocks of `order`.
                let _ = zone.free(pfn, order);
            }
            self.count -= (take as u64) << order;
        }
        self.stats.drains += 1;
    }
}

// ---------------------------------------------------------------------------
// Single-threaded zone
// ---------------------------------------------------------------------------

/// A [`BuddyAllocator`] with per-CPU page lists in front, for one thread
/// (the caller says which CPU it runs on).
///
/// ```
/// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
/// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
/// let mut b = BuddyAllocator::new(0, 4096, BuddyConfig::default()).unwrap();
/// b.add_free_range(0, 4096).unwrap();
/// let mut z = PcpZone::new(b, PcpConfig::default()).unwrap();
/// let p = z.alloc(0, 0, MigrateType::Movable).unwrap();
/// assert_eq!(z.pcp_pages(0), 62); // a batch of 63 came in, one went out
/// z.free(1, p, 0).unwrap(); // freed on another CPU
/// z.drain_all();
/// assert_eq!(z.zone().free_pages(), 4096);
/// z.check().unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct PcpZone {
    zone: BuddyAllocator,
    cfg: PcpConfig,
    cpus: Vec<PcpLists>,
    /// Owner tag per frame of the span.
    owner: Vec<u8>,
}

impl PcpZone {
    /// Puts per-CPU lists in front of `zone`. Blocks already allocated from
    /// `zone` are not the zone's to free: free them through `zone` first.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] when `cpus` is 0 or above 4096, or `batch` is 0.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let pcp = PcpZone::new(zone, PcpConfig { cpus: 4, ..PcpConfig::default() }).unwrap();
    /// assert_eq!(pcp.config().cpus, 4);
    /// ```
    pub fn new(zone: BuddyAllocator, cfg: PcpConfig) -> Result<Self, AllocError> {
        if !cfg.valid() {
            return Err(AllocError::Invalid);
        }
        let span = zone.frames.len();
        Ok(PcpZone {
            zone,
            cfg,
            cpus: vec![PcpLists::new(); cfg.cpus],
            owner: vec![0; span],
        })
    }

    /// The buddy allocator behind the lists.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let pcp = PcpZone::new(zone, PcpConfig::default()).unwrap();
    /// assert_eq!(pcp.zone().free_pages(), 1024);
    /// ```
    pub fn zone(&self) -> &BuddyAllocator {
        &self.zone
    }

    /// The list sizes.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig};
    /// let zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// let pcp = PcpZone::new(zone, PcpConfig::default()).unwrap();
    /// assert_eq!(pcp.config(), PcpConfig::default());
    /// ```
    pub fn config(&self) -> PcpConfig {
        self.cfg
    }

    /// Pages on `cpu`'s lists (0 for an unknown CPU).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let cfg = PcpConfig { cpus: 2, batch: 8, high: 48 };
    /// let mut pcp = PcpZone::new(zone, cfg).unwrap();
    /// pcp.alloc(0, 0, MigrateType::Movable).unwrap(); // refills 8, hands out 1
    /// assert_eq!((pcp.pcp_pages(0), pcp.pcp_pages(1)), (7, 0));
    /// ```
    pub fn pcp_pages(&self, cpu: usize) -> u64 {
        self.cpus.get(cpu).map_or(0, |c| c.count)
    }

    /// The pfns on `cpu`'s list of `(order, mt)`, next to be allocated
    /// first; empty when there is no such list.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let mut pcp = PcpZone::new(zone, PcpConfig::default()).unwrap();
    /// let p = pcp.alloc(1, 0, MigrateType::Movable).unwrap();
    /// pcp.free(1, p, 0).unwrap();
    /// // The page just freed is the next one handed out (cache-hot).
    /// assert_eq!(pcp.pcp_list(1, 0, MigrateType::Movable)[0], p);
    /// ```
    pub fn pcp_list(&self, cpu: usize, order: u8, mt: MigrateType) -> Vec<u64> {
        let li = pcp_index(order, mt, self.zone.cfg.pageblock_order);
        match (self.cpus.get(cpu), li) {
            (Some(c), Some(li)) => c.lists[li].iter().rev().copied().collect(),
            _ => Vec::new(),
        }
    }

    /// Traffic counters of `cpu` (zero for an unknown CPU).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let mut pcp = PcpZone::new(zone, PcpConfig::default()).unwrap();
    /// pcp.alloc(0, 0, MigrateType::Movable).unwrap();
    /// pcp.alloc(0, 5, MigrateType::Movable).unwrap(); // order 5 has no list
    /// let s = pcp.stats(0);
    /// assert_eq!((s.refills, s.direct), (1, 1));
    /// ```
    pub fn stats(&self, cpu: usize) -> PcpStats {
        self.cpus
            .get(cpu)
            .map_or_else(PcpStats::default, |c| c.stats)
    }

    /// Allocates `2^order` frames of type `mt` on `cpu`; see the module
    /// docs for the path taken.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] for an unknown CPU or `order > max_order`;
    /// [`AllocError::NoSpace`] when the zone has no block even after
    /// draining every CPU.
    ///
    /// # Complexity
    /// O(1) from a list; a refill costs `batch` buddy allocations.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// use mmkit::AllocError;
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let mut pcp = PcpZone::new(zone, PcpConfig::default()).unwrap();
    /// let a = pcp.alloc(0, 0, MigrateType::Movable).unwrap();
    /// let b = pcp.alloc(0, 0, MigrateType::Movable).unwrap();
    /// assert_ne!(a, b);
    /// assert_eq!(pcp.alloc(9, 0, MigrateType::Movable), Err(AllocError::Invalid)); // no CPU 9
    /// ```
    #[inline]
    pub fn alloc(&mut self, cpu: usize, order: u8, mt: MigrateType) -> Result<u64, AllocError> {
        let li = pcp_index(order, mt, self.zone.cfg.pageblock_order);
        if let (Some(lists), Some(li)) = (self.cpus.get_mut(cpu), li) {
            if let Some(pfn) = lists.pop(li, order) {
                // A page on a list is in the span: wrapping_sub cannot wrap.
                self.owner[pfn.wrapping_sub(self.zone.start) as usize] = tag(order, mt);
                return Ok(pfn);
            }
        }
        self.alloc_slow(cpu, li, order, mt)
    }

    /// An empty list is refilled from the zone (`li` is its slot); a
    /// request without a list goes straight to the zone. Either way, when
    /// the zone has nothing every CPU is drained and the zone asked once more.
    #[cold]
    #[inline(never)]
    fn alloc_slow(
        &mut self,
        cpu: usize,
        li: Option<usize>,
        order: u8,
        mt: MigrateType,
    ) -> Result<u64, AllocError> {
        if order > self.zone.cfg.max_order {
            return Err(AllocError::Invalid);
        }
        let lists = self.cpus.get_mut(cpu).ok_or(AllocError::Invalid)?;
        let got = match li {
            Some(li) => {
                lists.refill(&mut self.zone, li, self.cfg.batch);
                lists.pop(li, order)
            }
            None => {
                lists.stats.direct += 1;
                self.zone.alloc(order, mt).ok()
            }
        };
        let pfn = match got {
            Some(pfn) => pfn,
            None => {
                self.drain_all();
                self.zone.alloc(order, mt)?
            }
        };
        self.owner[(pfn - self.zone.start) as usize] = tag(order, mt);
        Ok(pfn)
    }

    /// Frees the block of `2^order` frames at `pfn` on `cpu`: onto its
    /// list, draining the oldest pages when the CPU holds more than `high`.
    ///
    /// # Errors
    /// [`FreeError::Invalid`] for an unknown CPU, `order > max_order` or a
    /// pfn outside the span; [`FreeError::NotAllocated`] when `pfn` is not a
    /// block of `order` this zone handed out (double free, a page on a pcp
    /// list, wrong order). Nothing changes then.
    ///
    /// # Complexity
    /// O(1); a drain costs `batch` buddy frees.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// use mmkit::FreeError;
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let mut pcp = PcpZone::new(zone, PcpConfig::default()).unwrap();
    /// let p = pcp.alloc(0, 0, MigrateType::Movable).unwrap();
    /// assert_eq!(pcp.free(1, p, 0), Ok(())); // any CPU may free it
    /// assert_eq!(pcp.free(0, p, 0), Err(FreeError::NotAllocated)); // double free
    /// ```
    #[inline(always)]
    pub fn free(&mut self, cpu: usize, pfn: u64, order: u8) -> Result<(), FreeError> {
        if order > self.zone.cfg.max_order {
            return Err(FreeError::Invalid);
        }
        // The list set and the tag are looked up before anything is
        // stored: a byte store may alias any heap word as far as the
        // compiler knows, so lookups after it would be loaded again.
        let lists = self.cpus.get_mut(cpu).ok_or(FreeError::Invalid)?;
        // One bounds check: the owner tags span the zone.
        let owner = usize::try_from(pfn.wrapping_sub(self.zone.start))
            .ok()
            .and_then(|i| self.owner.get_mut(i))
            .ok_or(FreeError::Invalid)?;
        // One compare both validates the tag (allocated, this order) and
        // picks the list of the most common type, Movable, whose address
        // is then a constant: it does not wait for the tag's load (the
        // list computed from the tag would: `examples/pcp_pairs.rs`
        // measures the pair). `free` is always inlined so that a
        // constant `order` folds the tag too.
        if *owner != tag(order, MigrateType::Movable) {
            return self.free_other_type(cpu, pfn, order);
        }
        *owner = 0;
        let Some(li) = pcp_index(order, MigrateType::Movable, self.zone.cfg.pageblock_order) else {
            return self.free_direct(cpu, pfn, order);
        };
        lists.push(li, order, pfn);
        if lists.count > u64::from(self.cfg.high) {
            self.free_drain(cpu, li);
        }
        Ok(())
    }

    /// [`free`](Self::free) of a block whose tag is not Movable of
    /// `order`: another type, or not allocated (`cpu` and `pfn` are valid).
    #[inline(never)]
    fn free_other_type(&mut self, cpu: usize, pfn: u64, order: u8) -> Result<(), FreeError> {
        let i = (pfn - self.zone.start) as usize;
        let mt = [
            MigrateType::Unmovable,
            MigrateType::Reclaimable,
            MigrateType::HighAtomic,
        ]
        .into_iter()
        .find(|&mt| self.owner[i] == tag(order, mt))
        .ok_or(FreeError::NotAllocated)?;
        self.owner[i] = 0;
        let Some(li) = pcp_index(order, mt, self.zone.cfg.pageblock_order) else {
            return self.free_direct(cpu, pfn, order);
        };
        let lists = &mut self.cpus[cpu];
        lists.push(li, order, pfn);
        if lists.count > u64::from(self.cfg.high) {
            self.free_drain(cpu, li);
        }
        Ok(())
    }

    /// A free without a pcp list: straight to the zone.
    #[cold]
    #[inline(never)]
    fn free_direct(&mut self, cpu: usize, pfn: u64, order: u8) -> Result<(), FreeError> {
        self.cpus[cpu].stats.direct += 1;
        self.zone.free(pfn, order)
    }

    /// `cpu` holds more than `high` pages: the oldest go back to the zone,
    /// starting with list `li`.
    #[cold]
    #[inline(never)]
    fn free_drain(&mut self, cpu: usize, li: usize) {
        let target = u64::from(self.cfg.high.saturating_sub(self.cfg.batch));
        self.cpus[cpu].free_bulk(&mut self.zone, li, target);
    }

    /// Returns every page on `cpu`'s lists to the zone (`drain_local_pages`).
    ///
    /// # Errors
    /// [`FreeError::Invalid`] for an unknown CPU.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let mut pcp = PcpZone::new(zone, PcpConfig::default()).unwrap();
    /// let p = pcp.alloc(0, 0, MigrateType::Movable).unwrap();
    /// pcp.free(0, p, 0).unwrap();
    /// pcp.drain(0).unwrap();
    /// assert_eq!(pcp.pcp_pages(0), 0);
    /// assert_eq!(pcp.zone().free_pages(), 1024);
    /// ```
    pub fn drain(&mut self, cpu: usize) -> Result<(), FreeError> {
        let lists = self.cpus.get_mut(cpu).ok_or(FreeError::Invalid)?;
        lists.drain(&mut self.zone);
        Ok(())
    }

    /// Returns every page on every CPU's lists to the zone
    /// (`drain_all_pages`).
    ///
    /// # Complexity
    /// O(pages on the lists × max_order).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let mut pcp = PcpZone::new(zone, PcpConfig::default()).unwrap();
    /// for cpu in 0..2 {
    ///     let p = pcp.alloc(cpu, 0, MigrateType::Movable).unwrap();
    ///     pcp.free(cpu, p, 0).unwrap();
    /// }
    /// pcp.drain_all();
    /// assert_eq!(pcp.zone().nr_free(10), 1); // everything merged again
    /// ```
    pub fn drain_all(&mut self) {
        for lists in &mut self.cpus {
            lists.drain(&mut self.zone);
        }
    }

    /// Drains every CPU, then compacts the zone (see
    /// [`BuddyAllocator::compact`]); `migrate(old, new, order)` moves the
    /// caller's blocks, whose ownership moves with them.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] when `order > max_order`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let mut pcp = PcpZone::new(zone, PcpConfig::default()).unwrap();
    /// let out = pcp.compact(3, MigrateType::Movable, |_, _, _| true).unwrap();
    /// assert_eq!(out.stats.moved_pages, 0); // an order-3 block was already free
    /// ```
    pub fn compact<F>(
        &mut self,
        order: u8,
        mt: MigrateType,
        mut migrate: F,
    ) -> Result<super::CompactOutcome, AllocError>
    where
        F: FnMut(u64, u64, u8) -> bool,
    {
        if order > self.zone.cfg.max_order {
            return Err(AllocError::Invalid);
        }
        self.drain_all();
        let start = self.zone.start;
        let owner = &mut self.owner;
        self.zone.compact(order, mt, |old, new, o| {
            let moved = migrate(old, new, o);
            if moved {
                owner[(new - start) as usize] = owner[(old - start) as usize];
                owner[(old - start) as usize] = 0;
            }
            moved
        })
    }

    /// Checks the invariants in the module docs, and the zone's.
    ///
    /// # Errors
    /// A [`CheckError`] naming the first violation (a bug in mmkit).
    ///
    /// # Complexity
    /// O(span + pages on the lists).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::pcp::{PcpConfig, PcpZone};
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 1024).unwrap();
    /// let mut pcp = PcpZone::new(zone, PcpConfig::default()).unwrap();
    /// pcp.alloc(0, 0, MigrateType::Movable).unwrap();
    /// pcp.check().unwrap();
    /// ```
    pub fn check(&self) -> Result<(), CheckError> {
        let cpus: Vec<&PcpLists> = self.cpus.iter().collect();
        check_parts(&self.zone, &cpus, |i| self.owner[i], self.owner.len())
    }
}

/// The invariants of [`PcpZone::check`] over a zone, its CPUs' lists and
/// the owner tags of its `span` frames.
fn check_parts(
    z: &BuddyAllocator,
    cpus: &[&PcpLists],
    owner: impl Fn(usize) -> u8,
    span: usize,
) -> Result<(), CheckError> {
    z.check()?;
    let pb = z.cfg.pageblock_order;
    let mut seen = vec![false; span];
    let mut pcp = 0u64;
    for (cpu, lists) in cpus.iter().enumerate() {
        let mut count = 0u64;
        for (li, list) in lists.lists.iter().enumerate() {
            let (order, mt) = slot_of(li, pb);
            for &pfn in list {
                let i = z.idx(pfn);
                let ok = i.is_some_and(|i| {
                    owner(i) == 0
                        && z.frame(i) == Frame::Alloc { order, mt }
                        && !core::mem::replace(&mut seen[i], true)
                });
                crate::ensure!(
                    ok,
                    Structure @ pfn,
                    "cpu {cpu}: pcp page {pfn:#x} ({order}, {mt:?}) not an idle allocated block or listed twice"
                );
                count += 1u64 << order;
            }
        }
        crate::ensure!(
            count == lists.count,
            Accounting @ cpu,
            "cpu {cpu}: count {} but lists hold {count}",
            lists.count
        );
        pcp += count;
    }
    let mut user = 0u64;
    for i in 0..span {
        let t = owner(i);
        if t == 0 {
            continue;
        }
        let ok = untag(t).is_some_and(|(order, mt)| {
            user += 1u64 << order;
            z.frame(i) == Frame::Alloc { order, mt }
        });
        crate::ensure!(
            ok,
            Structure @ i,
            "frame index {i}: owner tag {t:#x} does not match the zone"
        );
    }
    crate::ensure!(
        z.free_pages() + pcp + user == z.present_pages(),
        Accounting,
        "free {} + pcp {pcp} + user {user} != present {}",
        z.free_pages(),
        z.present_pages()
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Concurrent zone
// ---------------------------------------------------------------------------

#[cfg(feature = "lock_api")]
pub use concurrent::LockedZone;

/// [`LockedZone`] behind `parking_lot`'s mutex: the zone for threads.
#[cfg(feature = "std")]
pub type ConcurrentZone = LockedZone<parking_lot::RawMutex>;

#[cfg(feature = "lock_api")]
mod concurrent;
