//! The buddy page allocator (`mm/page_alloc.c`), with the merge-likely tail
//! placement of seed 004, migratetypes, and the fragmentation indexes of
//! `mm/vmstat.c`.
//!
//! A zone is a span of page frame numbers `[start_pfn, start_pfn + span)`;
//! frames become usable only when added with
//! [`add_free_range`](BuddyAllocator::add_free_range), so a zone may start
//! anywhere and have holes. Free memory is kept as blocks of `2^order`
//! frames, each aligned to its size (in absolute pfn), on one free list per
//! order and migratetype:
//!
//! ```text
//!  pfn    0       4   6 7 8              16
//!         [  free o2  ][a][f][   free order 3   ]   a = allocated order 1
//!                               ^ buddy of [0,4) is [4,8): not free, no merge
//!
//!  lists  order 0: Movable: 7
//!         order 2: Movable: 0
//!         order 3: Movable: 8
//! ```
//!
//! - `alloc(order, mt)` takes the head of the smallest non-empty list of its
//!   type at `order` or above, and splits it: the upper halves go back to the
//!   lower lists (the kernel's `expand`). When the type has nothing, the
//!   fallback rules of [`MigrateType::fallbacks`] claim or steal (module
//!   `migrate`).
//! - `free(pfn, order)` merges the block with its buddy (`pfn ^ 2^order`)
//!   while the buddy is a free block of the same order, up to `max_order`,
//!   and never at or above `pageblock_order` between a HighAtomic pageblock
//!   and another type. The merged block goes to the head of its list, or, with
//!   [`Placement::TailIfMergeLikely`], to the tail when the buddy of the
//!   next-higher block is free (seed 004): the block is then likely to merge
//!   twice soon, so allocations should take other blocks first.
//!
//! Per-frame state (the kernel's `PageBuddy`/`page_order` bits, here an
//! enum per frame) records the head of every block, free or allocated, so a
//! free of anything that is not an allocated block of that order is refused.
//!
//! # Invariants (checked by [`BuddyAllocator::check`])
//! - every present frame belongs to exactly one block, whose head records its
//!   order; blocks are aligned to their order and lie inside the span;
//! - every free block is on exactly the list of its order and type, and its
//!   type is the migratetype of every pageblock it covers;
//! - no free block has a free buddy of the same order below `max_order`,
//!   except across pageblocks where one side is HighAtomic and the other not;
//! - list lengths and the free page count equal what the frames say.

mod check;
mod compact;
mod freelist;
mod metrics;
mod migrate;
pub mod pcp;

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

pub use compact::{
    CompactOutcome, CompactResult, CompactStats, CompactSuitable, COSTLY_ORDER, EXTFRAG_THRESHOLD,
};
pub use metrics::{
    buddyinfo_line, extfrag_for_order, extfrag_index_line, fragmentation_index,
    unusable_free_index, unusable_index_line, ContigInfo, PageTypeCounts, ZoneId,
};
pub use migrate::{MigrateType, MIGRATE_TYPES};

use crate::error::{try_vec, AllocError, FreeError};
use freelist::{Links, List, NIL};

/// The kernel's default `MAX_PAGE_ORDER`: blocks of up to 1024 frames.
pub const DEFAULT_MAX_ORDER: u8 = 10;
/// The kernel's default `pageblock_order` on x86-64: 512 frames (2 MiB).
pub const DEFAULT_PAGEBLOCK_ORDER: u8 = 9;
/// The largest `max_order` this allocator accepts.
pub const ORDER_LIMIT: u8 = 15;

/// The largest zone span, in frames: 4 TiB of 4 KiB pages. The metadata
/// (about 9 bytes a frame) is allocated up front, so a larger span is
/// refused before anything is allocated rather than risk aborting on a
/// heap that cannot hold it. It also keeps frame indexes below `u32::MAX`.
pub const MAX_SPAN: u64 = 1 << 30;

/// Where a freed (merged) block goes on its free list.
///
/// ```
/// use mmkit::buddy::Placement;
/// assert_eq!(Placement::default(), Placement::TailIfMergeLikely);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Placement {
    /// Always the head (kernels before 2.6.33): the block freed last is
    /// allocated first.
    Head,
    /// The tail when the buddy of the next-higher-order block is free, else
    /// the head (2.6.33 on), with the 2.6.36 bound: blocks of order
    /// `max_order - 1` and above never probe, since their next-higher buddy
    /// could never merge.
    #[default]
    TailIfMergeLikely,
}

/// Sizes and policy of a [`BuddyAllocator`].
///
/// ```
/// use mmkit::buddy::{BuddyConfig, Placement};
/// let c = BuddyConfig { placement: Placement::Head, ..BuddyConfig::default() };
/// assert_eq!((c.max_order, c.pageblock_order), (10, 9));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BuddyConfig {
    /// Largest block order (inclusive), at most [`ORDER_LIMIT`].
    pub max_order: u8,
    /// Order of a pageblock, the unit that carries a migratetype; at most
    /// `max_order`.
    pub pageblock_order: u8,
    /// Head or merge-likely tail placement of freed blocks.
    pub placement: Placement,
}

impl Default for BuddyConfig {
    fn default() -> Self {
        BuddyConfig {
            max_order: DEFAULT_MAX_ORDER,
            pageblock_order: DEFAULT_PAGEBLOCK_ORDER,
            placement: Placement::default(),
        }
    }
}

/// A free block, as [`BuddyAllocator::free_blocks`] lists it.
///
/// ```
/// use mmkit::buddy::{BuddyAllocator, BuddyConfig, FreeBlock, MigrateType};
/// let mut b = BuddyAllocator::new(0, 4, BuddyConfig::default()).unwrap();
/// b.add_free_range(0, 4).unwrap();
/// let all: Vec<FreeBlock> = b.free_blocks().collect();
/// assert_eq!(all, [FreeBlock { pfn: 0, order: 2, mt: MigrateType::Movable }]);
/// ```
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FreeBlock {
    /// First frame.
    pub pfn: u64,
    /// The block is `2^order` frames.
    pub order: u8,
    /// The list it is on (its pageblocks' type).
    pub mt: MigrateType,
}

/// What one frame is. Only block heads carry an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// Never added: not memory.
    Hole,
    /// Present, inside a block whose head is an earlier frame.
    Tail,
    /// Head of a free block on list `(order, mt)`.
    Free { order: u8, mt: MigrateType },
    /// Head of an allocated block; `mt` is the type it was requested as.
    Alloc { order: u8, mt: MigrateType },
}

/// A [`Frame`] in one byte: `kind | order << 2 | type << 6`. One byte is
/// read and written whole, so an allocation's store forwards to the free
/// that follows (a multi-byte enum stored field by field does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PackedFrame(u8);

impl PackedFrame {
    const HOLE: PackedFrame = PackedFrame(0);

    #[inline]
    fn pack(f: Frame) -> Self {
        let (kind, order, mt) = match f {
            Frame::Hole => (0, 0, 0),
            Frame::Tail => (1, 0, 0),
            Frame::Free { order, mt } => (2, order, mt as u8),
            Frame::Alloc { order, mt } => (3, order, mt as u8),
        };
        PackedFrame(kind | order << 2 | mt << 6)
    }

    #[inline]
    fn unpack(self) -> Frame {
        let order = (self.0 >> 2) & 0xf;
        let mt = match self.0 >> 6 {
            0 => MigrateType::Unmovable,
            1 => MigrateType::Movable,
            2 => MigrateType::Reclaimable,
            _ => MigrateType::HighAtomic,
        };
        match self.0 & 3 {
            0 => Frame::Hole,
            1 => Frame::Tail,
            2 => Frame::Free { order, mt },
            _ => Frame::Alloc { order, mt },
        }
    }
}

/// The buddy allocator over one zone of page frames.
///
/// ```text
///  frames:  [Hole Hole | Free{2,M} Tail Tail Tail | Alloc{0,U} | Free{0,M} | ...]
///  links:   next/prev per frame   (free heads only)
///  lists:   [order][type] -> List { head, tail, len }
///  blocks:  migratetype per pageblock
/// ```
///
/// ```
/// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
/// let mut b = BuddyAllocator::new(0x1000, 2048, BuddyConfig::default()).unwrap();
/// b.add_free_range(0x1000, 2048).unwrap();
/// let pfn = b.alloc(3, MigrateType::Movable).unwrap();
/// assert_eq!(pfn % 8, 0);
/// assert_eq!(b.free_pages(), 2048 - 8);
/// b.free(pfn, 3).unwrap();
/// assert_eq!(b.nr_free(10), 2);
/// b.check().unwrap();
/// ```
#[derive(Clone)]
pub struct BuddyAllocator {
    cfg: BuddyConfig,
    start: u64,
    frames: Vec<PackedFrame>,
    links: Links,
    /// `lists[order * MIGRATE_TYPES + type]`.
    lists: Vec<List>,
    /// Migratetype of pageblock `(pfn >> pageblock_order) - (start >> pageblock_order)`.
    blocks: Vec<MigrateType>,
    free_pages: u64,
    present_pages: u64,
    /// Work done by [`compact`](BuddyAllocator::compact), cumulated.
    compact_stats: CompactStats,
}

impl fmt::Debug for BuddyAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuddyAllocator")
            .field("config", &self.cfg)
            .field("start_pfn", &self.start)
            .field("span", &self.frames.len())
            .field("present_pages", &self.present_pages)
            .field("free_pages", &self.free_pages)
            .finish()
    }
}

// ---------------------------------------------------------------------------
// Construction and queries
// ---------------------------------------------------------------------------

impl BuddyAllocator {
    /// An empty zone spanning `[start_pfn, start_pfn + span)`: every frame a
    /// hole until added, every pageblock Movable (as the kernel boots).
    ///
    /// # Errors
    /// [`AllocError::Invalid`] when `span` is 0 or above [`MAX_SPAN`], the
    /// span rounded up to a whole `max_order` block overflows `u64` (the
    /// scanners of [`compact`](Self::compact) walk whole pageblocks),
    /// `max_order` exceeds [`ORDER_LIMIT`], or `pageblock_order` exceeds
    /// `max_order`; [`AllocError::NoSpace`] when
    /// the heap refuses the metadata (about 9 bytes a frame).
    ///
    /// # Complexity
    /// O(span).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig};
    /// let zone = BuddyAllocator::new(0x100, 64, BuddyConfig::default()).unwrap();
    /// assert_eq!((zone.start_pfn(), zone.end_pfn()), (0x100, 0x140));
    /// assert_eq!(zone.present_pages(), 0); // all holes until added
    /// assert!(BuddyAllocator::new(0, 0, BuddyConfig::default()).is_err());
    /// ```
    pub fn new(start_pfn: u64, span: u64, cfg: BuddyConfig) -> Result<Self, AllocError> {
        let ok_cfg = cfg.max_order <= ORDER_LIMIT && cfg.pageblock_order <= cfg.max_order;
        let end = start_pfn.checked_add(span).ok_or(AllocError::Invalid)?;
        if !ok_cfg || span == 0 || span > MAX_SPAN {
            return Err(AllocError::Invalid);
        }
        // The last pfn of the max-order block holding the last frame.
        let top = (end - 1) | ((1u64 << cfg.max_order) - 1);
        if top == u64::MAX {
            return Err(AllocError::Invalid);
        }
        // span <= MAX_SPAN < u32::MAX: every count below fits in usize.
        let n = span as usize;
        let nblocks = ((end - 1) >> cfg.pageblock_order) - (start_pfn >> cfg.pageblock_order) + 1;
        Ok(BuddyAllocator {
            cfg,
            start: start_pfn,
            frames: try_vec(n, PackedFrame::HOLE)?,
            links: Links::new(n)?,
            lists: vec![List::EMPTY; (usize::from(cfg.max_order) + 1) * MIGRATE_TYPES],
            blocks: try_vec(nblocks as usize, MigrateType::Movable)?,
            free_pages: 0,
            present_pages: 0,
            compact_stats: CompactStats::default(),
        })
    }

    /// The configuration.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig};
    /// let zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// assert_eq!(zone.config(), BuddyConfig::default());
    /// ```
    pub fn config(&self) -> BuddyConfig {
        self.cfg
    }

    /// First pfn of the span.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig};
    /// let zone = BuddyAllocator::new(0x100, 64, BuddyConfig::default()).unwrap();
    /// assert_eq!(zone.start_pfn(), 0x100);
    /// ```
    pub fn start_pfn(&self) -> u64 {
        self.start
    }

    /// One past the last pfn of the span.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig};
    /// let zone = BuddyAllocator::new(0x100, 64, BuddyConfig::default()).unwrap();
    /// assert_eq!(zone.end_pfn(), 0x140);
    /// ```
    pub fn end_pfn(&self) -> u64 {
        self.start + self.frames.len() as u64
    }

    /// Frames added so far (the kernel's `present_pages`).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 48).unwrap(); // [48, 64) is a hole
    /// assert_eq!(zone.present_pages(), 48);
    /// ```
    pub fn present_pages(&self) -> u64 {
        self.present_pages
    }

    /// Free frames.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// zone.alloc(2, MigrateType::Movable).unwrap();
    /// assert_eq!(zone.free_pages(), 60);
    /// ```
    pub fn free_pages(&self) -> u64 {
        self.free_pages
    }

    /// Free blocks of `order` over all types (`free_area[order].nr_free`);
    /// 0 above `max_order`.
    ///
    /// # Complexity
    /// O(types).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// assert_eq!(zone.nr_free(6), 1); // one block of 64 pages
    /// zone.alloc(0, MigrateType::Movable).unwrap(); // splits it: 1+2+4+...+32 left
    /// assert_eq!((zone.nr_free(0), zone.nr_free(5), zone.nr_free(6)), (1, 1, 0));
    /// ```
    pub fn nr_free(&self, order: u8) -> u64 {
        if order > self.cfg.max_order {
            return 0;
        }
        MigrateType::ALL
            .iter()
            .map(|&t| self.list(order, t).len)
            .sum()
    }

    /// [`nr_free`](Self::nr_free) for every order `0..=max_order`.
    ///
    /// # Complexity
    /// O(orders × types).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// assert_eq!(zone.nr_free_all(), [0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
    /// ```
    pub fn nr_free_all(&self) -> Vec<u64> {
        (0..=self.cfg.max_order).map(|o| self.nr_free(o)).collect()
    }

    /// Free blocks on the list of `order` and `mt`; 0 above `max_order`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// assert_eq!(zone.free_count(6, MigrateType::Movable), 1);
    /// assert_eq!(zone.free_count(6, MigrateType::Unmovable), 0);
    /// ```
    pub fn free_count(&self, order: u8, mt: MigrateType) -> u64 {
        if order > self.cfg.max_order {
            return 0;
        }
        self.list(order, mt).len
    }

    /// The pfns on the free list of `order` and `mt`, head first (the next
    /// allocation from that list takes the first). Empty above `max_order`.
    ///
    /// # Complexity
    /// O(1) per item.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// zone.alloc(4, MigrateType::Movable).unwrap(); // [0, 16); [16, 32) stays free
    /// assert_eq!(zone.free_list(4, MigrateType::Movable).collect::<Vec<_>>(), [16]);
    /// ```
    pub fn free_list(&self, order: u8, mt: MigrateType) -> impl Iterator<Item = u64> + '_ {
        let mut cur = if order > self.cfg.max_order {
            None
        } else {
            let h = self.list(order, mt).head;
            (h != NIL).then_some(h)
        };
        core::iter::from_fn(move || {
            let i = cur?;
            cur = self.links.next(i);
            Some(self.start + u64::from(i))
        })
    }

    /// Every free block in pfn order.
    ///
    /// # Complexity
    /// O(span) for the whole walk.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, FreeBlock, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 8, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 8).unwrap();
    /// zone.alloc(0, MigrateType::Movable).unwrap();
    /// let blocks: Vec<_> = zone.free_blocks().map(|b| (b.pfn, b.order)).collect();
    /// assert_eq!(blocks, [(1, 0), (2, 1), (4, 2)]);
    /// ```
    pub fn free_blocks(&self) -> impl Iterator<Item = FreeBlock> + '_ {
        let mut i = 0usize;
        core::iter::from_fn(move || {
            while i < self.frames.len() {
                let at = i;
                match self.frame(at) {
                    Frame::Free { order, mt } => {
                        i += 1 << order;
                        let pfn = self.start + at as u64;
                        return Some(FreeBlock { pfn, order, mt });
                    }
                    Frame::Alloc { order, .. } => i += 1 << order,
                    Frame::Hole | Frame::Tail => i += 1,
                }
            }
            None
        })
    }

    /// The order of the allocated block that starts at `pfn`, if one does.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// let pfn = zone.alloc(2, MigrateType::Movable).unwrap();
    /// assert_eq!(zone.allocated_order(pfn), Some(2));
    /// assert_eq!(zone.allocated_order(pfn + 1), None); // interior frame
    /// ```
    pub fn allocated_order(&self, pfn: u64) -> Option<u8> {
        match self.frame(self.idx(pfn)?) {
            Frame::Alloc { order, .. } => Some(order),
            _ => None,
        }
    }

    /// The migratetype of the pageblock holding `pfn`, if `pfn` is in the span.
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// assert_eq!(zone.pageblock_migratetype(0), Some(MigrateType::Movable));
    /// assert_eq!(zone.pageblock_migratetype(64), None); // outside the span
    /// ```
    pub fn pageblock_migratetype(&self, pfn: u64) -> Option<MigrateType> {
        self.idx(pfn).map(|_| self.block_type(pfn))
    }

    #[inline]
    fn idx(&self, pfn: u64) -> Option<usize> {
        let i = pfn.checked_sub(self.start)?;
        (i < self.frames.len() as u64).then_some(i as usize)
    }

    #[inline]
    fn frame(&self, i: usize) -> Frame {
        self.frames[i].unpack()
    }

    #[inline]
    fn set_frame(&mut self, i: usize, f: Frame) {
        self.frames[i] = PackedFrame::pack(f);
    }

    #[inline]
    fn list_index(&self, order: u8, mt: MigrateType) -> usize {
        usize::from(order) * MIGRATE_TYPES + mt.index()
    }

    #[inline]
    fn list(&self, order: u8, mt: MigrateType) -> &List {
        &self.lists[self.list_index(order, mt)]
    }

    #[inline]
    fn block_index(&self, pfn: u64) -> usize {
        let pb = self.cfg.pageblock_order;
        ((pfn >> pb) - (self.start >> pb)) as usize
    }

    /// Type of the pageblock of `pfn` (which must be in the span).
    #[inline]
    fn block_type(&self, pfn: u64) -> MigrateType {
        self.blocks[self.block_index(pfn)]
    }

    /// Retags every pageblock that `[pfn, pfn + 2^order)` touches.
    fn set_block_range(&mut self, pfn: u64, order: u8, mt: MigrateType) {
        let first = self.block_index(pfn);
        let last = self.block_index(pfn + (1u64 << order) - 1);
        for t in &mut self.blocks[first..=last] {
            *t = mt;
        }
    }

    /// The type of the free block of exactly `order` starting at `pfn`.
    #[inline]
    fn free_head(&self, pfn: u64, order: u8) -> Option<MigrateType> {
        match self.frame(self.idx(pfn)?) {
            Frame::Free { order: o, mt } if o == order => Some(mt),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------
// List surgery
// ---------------------------------------------------------------------------

impl BuddyAllocator {
    /// Marks `pfn` a free head of `(order, mt)` and links it at the head or
    /// the tail of that list.
    #[inline]
    fn link(&mut self, pfn: u64, order: u8, mt: MigrateType, tail: bool) {
        let i = (pfn - self.start) as usize;
        self.set_frame(i, Frame::Free { order, mt });
        let li = self.list_index(order, mt);
        if tail {
            self.links.push_tail(&mut self.lists[li], i as u32);
        } else {
            self.links.push_head(&mut self.lists[li], i as u32);
        }
    }

    /// Unlinks the free head `pfn` of `(order, mt)` and marks it interior;
    /// the caller gives it its next state.
    #[inline]
    fn unlink(&mut self, pfn: u64, order: u8, mt: MigrateType) {
        let i = (pfn - self.start) as usize;
        let li = self.list_index(order, mt);
        self.links.remove(&mut self.lists[li], i as u32);
        self.set_frame(i, Frame::Tail);
    }

    /// Splits the block `[pfn, pfn + 2^high)` down to `2^low`, putting the
    /// upper halves at the heads of the `mt` lists (the kernel's `expand`).
    #[inline]
    fn expand(&mut self, pfn: u64, low: u8, mut high: u8, mt: MigrateType) {
        while high > low {
            high -= 1;
            self.link(pfn + (1u64 << high), high, mt, false);
        }
    }

    /// Whether the freed block `[pfn, pfn + 2^order)`, whose buddy is not
    /// free, would merge twice if that buddy were freed: the buddy of their
    /// combined block is a free block of `order + 1`. The top orders never
    /// probe (2.6.36 fix): at `max_order - 1` the combined block is already
    /// `max_order` and cannot merge again.
    #[inline]
    fn merge_likely(&self, pfn: u64, order: u8) -> bool {
        if order + 1 >= self.cfg.max_order {
            return false;
        }
        let combined = pfn & !(1u64 << order);
        let higher_buddy = combined ^ (1u64 << (order + 1));
        self.free_head(higher_buddy, order + 1).is_some()
    }

    /// Frees the block at `pfn` (any previous head state is overwritten)
    /// with merging and placement; counters are the caller's.
    #[inline]
    fn free_one(&mut self, mut pfn: u64, mut order: u8, mt: MigrateType) {
        while order < self.cfg.max_order {
            let buddy = pfn ^ (1u64 << order);
            let Some(bmt) = self.free_head(buddy, order) else {
                break;
            };
            if bmt != mt && !(bmt.is_pcp() && mt.is_pcp()) {
                break; // only possible at >= pageblock_order
            }
            self.unlink(buddy, order, bmt);
            if bmt != mt {
                // Different pageblocks (order >= pageblock_order): the
                // merged block takes our type, so retag the buddy's blocks.
                self.set_block_range(buddy, order, mt);
            }
            let i = (pfn - self.start) as usize;
            self.set_frame(i, Frame::Tail);
            pfn &= buddy;
            order += 1;
        }
        let tail =
            self.cfg.placement == Placement::TailIfMergeLikely && self.merge_likely(pfn, order);
        self.link(pfn, order, mt, tail);
    }
}

// ---------------------------------------------------------------------------
// Adding memory, allocation, free
// ---------------------------------------------------------------------------

impl BuddyAllocator {
    /// Adds the frames `[pfn, pfn + count)` as free memory, merging with free
    /// neighbours (the kernel's boot-time `__free_pages_core`).
    ///
    /// # Errors
    /// [`FreeError::Invalid`] when `count` is 0, the range leaves the span,
    /// or any of its frames was already added. Nothing changes then.
    ///
    /// # Complexity
    /// O(count / 2^pageblock_order × max_order + count).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// // A memory map with a hole at [16, 32):
    /// zone.add_free_range(0, 16).unwrap();
    /// zone.add_free_range(32, 32).unwrap();
    /// assert_eq!(zone.free_pages(), 48);
    /// assert!(zone.add_free_range(8, 16).is_err()); // [8, 16) was already added
    /// ```
    pub fn add_free_range(&mut self, pfn: u64, count: u64) -> Result<(), FreeError> {
        crate::debug_check!(self);
        let end = pfn.checked_add(count).ok_or(FreeError::Invalid)?;
        let first = self.idx(pfn).ok_or(FreeError::Invalid)?;
        if count == 0 || end > self.end_pfn() {
            return Err(FreeError::Invalid);
        }
        let range = first..first + count as usize;
        if self.frames[range.clone()]
            .iter()
            .any(|f| *f != PackedFrame::HOLE)
        {
            return Err(FreeError::Invalid);
        }
        for f in &mut self.frames[range] {
            *f = PackedFrame::pack(Frame::Tail);
        }
        self.present_pages += count;
        self.free_pages += count;
        // Free in aligned chunks of at most a pageblock (each inside one
        // pageblock, so of one type); merging joins them up.
        let mut p = pfn;
        while p < end {
            let align = p.trailing_zeros().min(u32::from(self.cfg.pageblock_order));
            let fit = 63 - (end - p).leading_zeros();
            let order = align.min(fit) as u8;
            let mt = self.block_type(p);
            self.free_one(p, order, mt);
            p += 1u64 << order;
        }
        Ok(())
    }

    /// Allocates `2^order` contiguous frames for an allocation of type `mt`
    /// and returns the first pfn (aligned to `2^order`).
    ///
    /// The smallest block of type `mt` at `order` or above is split. When
    /// there is none, the fallback types are tried: first a *claim* from the
    /// largest order down (take over the whole pageblock when the request may
    /// claim and at least half the pageblock is free or alike), then a
    /// *steal* from the smallest order up (one block, pageblock untouched).
    /// HighAtomic requests use only HighAtomic lists.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] when `order > max_order`;
    /// [`AllocError::NoSpace`] when no usable free block of `order` or above
    /// exists. Nothing changes then.
    ///
    /// # Complexity
    /// O(max_order) list probes; a claim below `pageblock_order` also scans
    /// the pageblock, O(2^pageblock_order).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// use mmkit::AllocError;
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// assert_eq!(zone.alloc(3, MigrateType::Movable), Ok(0)); // 8 frames at pfn 0
    /// assert_eq!(zone.alloc(3, MigrateType::Movable), Ok(8));
    /// assert_eq!(zone.alloc(11, MigrateType::Movable), Err(AllocError::Invalid));
    /// assert_eq!(zone.alloc(6, MigrateType::Movable), Err(AllocError::NoSpace));
    /// ```
    #[inline]
    pub fn alloc(&mut self, order: u8, mt: MigrateType) -> Result<u64, AllocError> {
        crate::debug_check!(self);
        if order > self.cfg.max_order {
            return Err(AllocError::Invalid);
        }
        let pfn = self.rmqueue(order, mt).ok_or(AllocError::NoSpace)?;
        let i = (pfn - self.start) as usize;
        self.set_frame(i, Frame::Alloc { order, mt });
        self.free_pages -= 1u64 << order;
        Ok(pfn)
    }

    /// Frees the block of `2^order` frames at `pfn` that `alloc` returned,
    /// merging it with free buddies and placing it per the [`Placement`].
    ///
    /// # Errors
    /// [`FreeError::Invalid`] when `order > max_order` or `pfn` is outside the
    /// span; [`FreeError::NotAllocated`] when `pfn` is not the start of an
    /// allocated block of exactly `order` (double free, interior pfn, hole,
    /// wrong order). Nothing changes then.
    ///
    /// # Complexity
    /// O(max_order).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// use mmkit::FreeError;
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// let pfn = zone.alloc(3, MigrateType::Movable).unwrap();
    /// assert_eq!(zone.free(pfn, 2), Err(FreeError::NotAllocated)); // wrong order
    /// assert_eq!(zone.free(pfn, 3), Ok(()));
    /// assert_eq!(zone.nr_free(6), 1); // merged back into one block
    /// assert_eq!(zone.free(pfn, 3), Err(FreeError::NotAllocated)); // double free
    /// ```
    #[inline]
    pub fn free(&mut self, pfn: u64, order: u8) -> Result<(), FreeError> {
        crate::debug_check!(self);
        if order > self.cfg.max_order {
            return Err(FreeError::Invalid);
        }
        let i = self.idx(pfn).ok_or(FreeError::Invalid)?;
        match self.frame(i) {
            Frame::Alloc { order: o, .. } if o == order => {}
            _ => return Err(FreeError::NotAllocated),
        }
        // A block larger than a pageblock may span pageblocks retagged while
        // it was allocated: free it a pageblock at a time, each chunk with
        // its own type, and let merging rejoin them (the kernel's
        // `split_large_buddy`). Smaller blocks take one pass.
        let chunk = order.min(self.cfg.pageblock_order);
        let end = pfn + (1u64 << order);
        let mut p = pfn;
        while p < end {
            let mt = self.block_type(p);
            self.free_one(p, chunk, mt);
            p += 1u64 << chunk;
        }
        self.free_pages += 1u64 << order;
        Ok(())
    }

    #[inline]
    fn rmqueue(&mut self, order: u8, mt: MigrateType) -> Option<u64> {
        if let Some(pfn) = self.rmqueue_smallest(order, mt) {
            return Some(pfn);
        }
        if !mt.is_pcp() {
            return None;
        }
        self.rmqueue_claim(order, mt)
            .or_else(|| self.rmqueue_steal(order, mt))
    }

    /// Head of the smallest non-empty `mt` list at `order` or above, split.
    #[inline]
    fn rmqueue_smallest(&mut self, order: u8, mt: MigrateType) -> Option<u64> {
        for o in order..=self.cfg.max_order {
            let li = self.list_index(o, mt);
            if let Some(i) = self.links.pop_head(&mut self.lists[li]) {
                let pfn = self.start + u64::from(i);
                self.expand(pfn, order, o, mt);
                return Some(pfn);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
