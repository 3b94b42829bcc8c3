//! External fragmentation indexes, computed exactly as `mm/vmstat.c` does,
//! and the kernel's text formats for them.
//!
//! Everything here is a function of the free-block counts per order
//! (`nr_free[o]`, the number of free blocks of `2^o` pages, summed over
//! migratetypes), so it can be checked on hand-made counts. For an order `k`
//! the kernel first sums (`fill_contig_page_info`):
//!
//! ```text
//!   free_pages    = sum over o of nr_free[o] << o
//!   blocks_total  = sum over o of nr_free[o]
//!   suitable      = sum over o >= k of nr_free[o] << (o - k)   (order-k blocks)
//! ```
//!
//! - the *unusable free space index* (Gorman): the fraction of free memory
//!   that cannot serve an order-`k` request, in thousandths: 0 = all usable,
//!   1000 = none (or no free memory at all);
//! - the *fragmentation index*: whether a failing order-`k` request fails for
//!   lack of memory (towards 0) or because free memory is fragmented (towards
//!   1000); -1000 when the request would succeed;
//! - `extfrag_for_order`: the unusable fraction in percent, 0 when nothing is
//!   free (the value the kernel's `extfrag` tracepoint and compaction use).
//!
//! All arithmetic is the kernel's integer arithmetic (truncating divisions in
//! the same order) on 128-bit integers, so it never overflows. Only the first
//! 32 orders of a count slice are read.

use alloc::format;
use alloc::string::String;

use super::migrate::{MigrateType, MIGRATE_TYPES};
use super::BuddyAllocator;

/// Orders beyond this are ignored, so sums times 1000 fit in 128 bits.
const MAX_ORDERS: usize = 32;

/// The sums `fill_contig_page_info` computes for one request order.
///
/// ```
/// use mmkit::buddy::ContigInfo;
/// // Two free order-0 pages and one free order-2 block, request order 1.
/// let info = ContigInfo::new(&[2, 0, 1], 1);
/// assert_eq!((info.free_pages, info.free_blocks_total, info.free_blocks_suitable), (6, 3, 2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContigInfo {
    /// Free pages in all orders.
    pub free_pages: u128,
    /// Free blocks of any order.
    pub free_blocks_total: u128,
    /// How many order-`k` blocks the free blocks of order >= `k` make.
    pub free_blocks_suitable: u128,
}

impl ContigInfo {
    /// Sums `nr_free` (free blocks per order) for request order `k`.
    ///
    /// # Complexity
    /// O(orders).
    pub fn new(nr_free: &[u64], k: u8) -> Self {
        let mut info = ContigInfo::default();
        for (o, &blocks) in nr_free.iter().enumerate().take(MAX_ORDERS) {
            let blocks = u128::from(blocks);
            info.free_blocks_total += blocks;
            info.free_pages += blocks << o;
            if o >= usize::from(k) {
                info.free_blocks_suitable += blocks << (o - usize::from(k));
            }
        }
        info
    }

    /// Free pages that are not part of any order-`k` block.
    fn unusable_pages(&self, k: u8) -> u128 {
        // suitable << k <= free_pages by construction, but stay total.
        let usable = if usize::from(k) < MAX_ORDERS {
            self.free_blocks_suitable << k
        } else {
            0
        };
        self.free_pages.saturating_sub(usable)
    }
}

/// The unusable free space index for order `k`, in thousandths (0..=1000):
/// `(free - (suitable << k)) * 1000 / free`, 1000 when nothing is free.
///
/// ```
/// use mmkit::buddy::unusable_free_index;
/// // 8 free order-0 pages and one free order-3 block: half the 16 free
/// // pages can serve an order-3 request.
/// assert_eq!(unusable_free_index(&[8, 0, 0, 1], 3), 500);
/// ```
///
/// # Complexity
/// O(orders).
pub fn unusable_free_index(nr_free: &[u64], k: u8) -> u32 {
    let info = ContigInfo::new(nr_free, k);
    if info.free_pages == 0 {
        return 1000;
    }
    (info.unusable_pages(k) * 1000 / info.free_pages) as u32
}

/// The fragmentation index for order `k` (`__fragmentation_index`), in
/// thousandths: -1000 when an order-`k` block is free, 0 when nothing is
/// free or `k` is beyond the counts, else
/// `1000 - (1000 + free * 1000 / 2^k) / blocks_total`.
///
/// ```
/// use mmkit::buddy::fragmentation_index;
/// // 16 scattered free pages, an order-2 request: 1000 - (1000 + 4000) / 16.
/// assert_eq!(fragmentation_index(&[16, 0, 0], 2), 688);
/// assert_eq!(fragmentation_index(&[16, 0, 1], 2), -1000);
/// ```
///
/// # Complexity
/// O(orders).
pub fn fragmentation_index(nr_free: &[u64], k: u8) -> i32 {
    if usize::from(k) >= nr_free.len().min(MAX_ORDERS) {
        return 0;
    }
    let info = ContigInfo::new(nr_free, k);
    if info.free_blocks_total == 0 {
        return 0;
    }
    if info.free_blocks_suitable > 0 {
        return -1000;
    }
    let requested = 1u128 << k;
    let inner = (1000 + info.free_pages * 1000 / requested) / info.free_blocks_total;
    // No suitable block: every free block is below 2^k, so free < blocks *
    // 2^k and inner < 2000; the result lies in (-1000, 1000).
    1000 - inner as i32
}

/// The unusable fraction for order `k` in percent (`extfrag_for_order`,
/// 0..=100), 0 when nothing is free.
///
/// ```
/// use mmkit::buddy::extfrag_for_order;
/// assert_eq!(extfrag_for_order(&[8, 0, 0, 1], 3), 50);
/// assert_eq!(extfrag_for_order(&[0, 0, 0, 0], 3), 0);
/// ```
///
/// # Complexity
/// O(orders).
pub fn extfrag_for_order(nr_free: &[u64], k: u8) -> u32 {
    let info = ContigInfo::new(nr_free, k);
    if info.free_pages == 0 {
        return 0;
    }
    (info.unusable_pages(k) * 100 / info.free_pages) as u32
}

/// Which zone a text line describes: the kernel prints
/// `Node <node>, zone <name>` (name right-aligned in 8 columns).
///
/// ```
/// use mmkit::buddy::ZoneId;
/// assert_eq!(ZoneId::new(0, "Normal").prefix(), "Node 0, zone   Normal ");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneId<'a> {
    /// NUMA node number.
    pub node: u32,
    /// Zone name ("DMA32", "Normal", ...).
    pub name: &'a str,
}

impl<'a> ZoneId<'a> {
    /// A zone of `node` called `name`.
    pub const fn new(node: u32, name: &'a str) -> Self {
        ZoneId { node, name }
    }

    /// `"Node %d, zone %8s "`, the prefix of buddyinfo and extfrag lines.
    pub fn prefix(&self) -> String {
        format!("Node {}, zone {:>8} ", self.node, self.name)
    }
}

/// One `/proc/buddyinfo` line: the prefix, then `"%6lu "` per order.
///
/// ```
/// use mmkit::buddy::{buddyinfo_line, ZoneId};
/// assert_eq!(buddyinfo_line(ZoneId::new(0, "DMA"), &[1, 0, 12]),
///            "Node 0, zone      DMA      1      0     12 \n");
/// ```
///
/// # Complexity
/// O(orders).
pub fn buddyinfo_line(zone: ZoneId<'_>, nr_free: &[u64]) -> String {
    let mut s = zone.prefix();
    for n in nr_free {
        s.push_str(&format!("{n:6} "));
    }
    s.push('\n');
    s
}

/// A thousandths value as the kernel prints it: `v / 1000 "." v % 1000`
/// with C's truncating division and `%03d`, so -1000 is "-1.000" and the
/// rare -500 (lack of memory) is "0.-500", as in the kernel.
fn thousandths(v: i32, int_width: usize) -> String {
    format!("{:int_width$}.{:03} ", v / 1000, v % 1000)
}

/// One `/sys/kernel/debug/extfrag/unusable_index` line: the prefix, then
/// `"%d.%03d "` per order.
///
/// ```
/// use mmkit::buddy::{unusable_index_line, ZoneId};
/// assert_eq!(unusable_index_line(ZoneId::new(0, "Normal"), &[8, 0, 0, 1]),
///            "Node 0, zone   Normal 0.000 0.500 0.500 0.500 \n");
/// ```
///
/// # Complexity
/// O(orders²).
pub fn unusable_index_line(zone: ZoneId<'_>, nr_free: &[u64]) -> String {
    let mut s = zone.prefix();
    for k in 0..nr_free.len().min(MAX_ORDERS) {
        s.push_str(&thousandths(
            unusable_free_index(nr_free, k as u8) as i32,
            1,
        ));
    }
    s.push('\n');
    s
}

/// One `/sys/kernel/debug/extfrag/extfrag_index` line: the prefix, then
/// `"%2d.%03d "` per order (-1.000 where the order would succeed).
///
/// ```
/// use mmkit::buddy::{extfrag_index_line, ZoneId};
/// assert_eq!(extfrag_index_line(ZoneId::new(0, "Normal"), &[16, 0, 0]),
///            "Node 0, zone   Normal -1.000  0.438  0.688 \n");
/// ```
///
/// # Complexity
/// O(orders²).
pub fn extfrag_index_line(zone: ZoneId<'_>, nr_free: &[u64]) -> String {
    let mut s = zone.prefix();
    for k in 0..nr_free.len().min(MAX_ORDERS) {
        s.push_str(&thousandths(fragmentation_index(nr_free, k as u8), 2));
    }
    s.push('\n');
    s
}

/// Free-list lengths per order and migratetype, and pageblocks per type:
/// what `/proc/pagetypeinfo` shows.
///
/// ```
/// use mmkit::buddy::{PageTypeCounts, ZoneId};
/// let counts = PageTypeCounts { free: vec![[0, 3, 0, 0], [1, 0, 0, 0]], blocks: [1, 3, 0, 0] };
/// let text = counts.pagetypeinfo(ZoneId::new(0, "Normal"), 1);
/// assert!(text.contains("Node    0, zone   Normal, type      Movable      3      0 \n"));
/// ```
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PageTypeCounts {
    /// `free[o][t]`: free blocks of order `o` on the list of type `t`.
    pub free: alloc::vec::Vec<[u64; MIGRATE_TYPES]>,
    /// Pageblocks of each type.
    pub blocks: [u64; MIGRATE_TYPES],
}

/// pagetypeinfo caps each count at this and prints ">" before it.
const PAGETYPEINFO_CAP: u64 = 100_000;

impl PageTypeCounts {
    /// The whole `/proc/pagetypeinfo` text for one zone (a kernel without
    /// CMA and memory isolation, so four types; no page_owner mixed counts).
    ///
    /// # Complexity
    /// O(orders × types).
    pub fn pagetypeinfo(&self, zone: ZoneId<'_>, pageblock_order: u8) -> String {
        let mut s = format!(
            "Page block order: {pageblock_order}\nPages per block:  {}\n\n",
            1u64 << pageblock_order.min(63)
        );
        s.push_str(&format!(
            "{:<43} ",
            "Free pages count per migrate type at order"
        ));
        for o in 0..self.free.len() {
            s.push_str(&format!("{o:6} "));
        }
        s.push('\n');
        for t in MigrateType::ALL {
            s.push_str(&format!(
                "Node {:4}, zone {:>8}, type {:>12} ",
                zone.node,
                zone.name,
                t.name()
            ));
            for per_type in &self.free {
                let n = per_type[t.index()];
                let over = if n >= PAGETYPEINFO_CAP { ">" } else { "" };
                s.push_str(&format!("{over}{:6} ", n.min(PAGETYPEINFO_CAP)));
            }
            s.push('\n');
        }
        s.push_str(&format!("\n{:<23}", "Number of blocks type "));
        for t in MigrateType::ALL {
            s.push_str(&format!("{:>12} ", t.name()));
        }
        s.push('\n');
        s.push_str(&zone.prefix());
        for b in self.blocks {
            s.push_str(&format!("{b:12} "));
        }
        s.push('\n');
        s
    }
}

// ---------------------------------------------------------------------------
// A zone's indexes and text formats
// ---------------------------------------------------------------------------

impl BuddyAllocator {
    /// The unusable free space index for order `k`, in thousandths (see
    /// [`unusable_free_index`]).
    ///
    /// # Complexity
    /// O(orders × types).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// assert_eq!(zone.unusable_free_index(6), 0); // all free memory is one block
    /// zone.alloc(0, MigrateType::Movable).unwrap();
    /// assert_eq!(zone.unusable_free_index(6), 1000); // none of it is usable at order 6
    /// ```
    pub fn unusable_free_index(&self, k: u8) -> u32 {
        unusable_free_index(&self.nr_free_all(), k)
    }

    /// The fragmentation index for order `k`, in thousandths (see
    /// [`fragmentation_index`]).
    ///
    /// # Complexity
    /// O(orders × types).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// assert_eq!(zone.fragmentation_index(6), -1000); // would succeed
    /// zone.alloc(0, MigrateType::Movable).unwrap();
    /// assert!(zone.fragmentation_index(6) > 0); // fails for fragmentation
    /// ```
    pub fn fragmentation_index(&self, k: u8) -> i32 {
        fragmentation_index(&self.nr_free_all(), k)
    }

    /// The unusable percentage for order `k` (see [`extfrag_for_order`]).
    ///
    /// # Complexity
    /// O(orders × types).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// zone.alloc(0, MigrateType::Movable).unwrap();
    /// assert_eq!(zone.extfrag_for_order(0), 0);
    /// assert_eq!(zone.extfrag_for_order(6), 100);
    /// ```
    pub fn extfrag_for_order(&self, k: u8) -> u32 {
        extfrag_for_order(&self.nr_free_all(), k)
    }

    /// This zone's `/proc/buddyinfo` line.
    ///
    /// # Complexity
    /// O(orders × types).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, ZoneId};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// let line = zone.buddyinfo(ZoneId::new(0, "Normal"));
    /// assert!(line.starts_with("Node 0, zone   Normal"), "{line}");
    /// ```
    pub fn buddyinfo(&self, zone: ZoneId<'_>) -> alloc::string::String {
        buddyinfo_line(zone, &self.nr_free_all())
    }

    /// This zone's `/sys/kernel/debug/extfrag/unusable_index` line.
    ///
    /// # Complexity
    /// O(orders² × types).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, ZoneId};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// let line = zone.unusable_index_line(ZoneId::new(0, "Normal"));
    /// assert!(line.contains("0.000"), "{line}");
    /// ```
    pub fn unusable_index_line(&self, zone: ZoneId<'_>) -> alloc::string::String {
        unusable_index_line(zone, &self.nr_free_all())
    }

    /// This zone's `/sys/kernel/debug/extfrag/extfrag_index` line.
    ///
    /// # Complexity
    /// O(orders² × types).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, ZoneId};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// let line = zone.extfrag_index_line(ZoneId::new(0, "Normal"));
    /// assert!(line.contains("-1.000"), "{line}"); // every order would succeed
    /// ```
    pub fn extfrag_index_line(&self, zone: ZoneId<'_>) -> alloc::string::String {
        extfrag_index_line(zone, &self.nr_free_all())
    }

    /// Free-list lengths per order and type, and pageblocks per type (every
    /// pageblock the span touches).
    ///
    /// # Complexity
    /// O(orders × types + pageblocks).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// let c = zone.pagetype_counts();
    /// assert_eq!(c.free[6][MigrateType::Movable.index()], 1);
    /// assert_eq!(c.blocks[MigrateType::Movable.index()], 1);
    /// ```
    pub fn pagetype_counts(&self) -> PageTypeCounts {
        let free = (0..=self.cfg.max_order)
            .map(|o| MigrateType::ALL.map(|t| self.list(o, t).len))
            .collect();
        let mut blocks = [0u64; MIGRATE_TYPES];
        for t in &self.blocks {
            blocks[t.index()] += 1;
        }
        PageTypeCounts { free, blocks }
    }

    /// This zone's `/proc/pagetypeinfo` text.
    ///
    /// # Complexity
    /// O(orders × types + pageblocks).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, ZoneId};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// let text = zone.pagetypeinfo(ZoneId::new(0, "Normal"));
    /// assert!(text.contains("Movable"), "{text}");
    /// ```
    pub fn pagetypeinfo(&self, zone: ZoneId<'_>) -> alloc::string::String {
        self.pagetype_counts()
            .pagetypeinfo(zone, self.cfg.pageblock_order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Hand-computed: nr_free = [3, 2, 0, 1] (orders 0..3):
    // free = 3 + 4 + 0 + 8 = 15 pages, blocks = 6.
    const COUNTS: [u64; 4] = [3, 2, 0, 1];

    #[test]
    fn unusable_index_by_hand() {
        // k=0: every page usable.
        assert_eq!(unusable_free_index(&COUNTS, 0), 0);
        // k=1: suitable = 2 + 0 + 4 = 6 order-1 blocks = 12 pages; 3 unusable.
        // 3 * 1000 / 15 = 200.
        assert_eq!(unusable_free_index(&COUNTS, 1), 200);
        // k=2: suitable = 0 + 2 = 2 blocks = 8 pages; 7 unusable: 466.
        assert_eq!(unusable_free_index(&COUNTS, 2), 466);
        // k=3: one block of 8; same 466.
        assert_eq!(unusable_free_index(&COUNTS, 3), 466);
        // k=4 beyond the counts: nothing usable.
        assert_eq!(unusable_free_index(&COUNTS, 4), 1000);
        assert_eq!(unusable_free_index(&[0, 0], 1), 1000);
    }

    #[test]
    fn extfrag_for_order_by_hand() {
        assert_eq!(extfrag_for_order(&COUNTS, 1), 20); // 3 * 100 / 15
        assert_eq!(extfrag_for_order(&COUNTS, 2), 46); // 7 * 100 / 15
        assert_eq!(extfrag_for_order(&[0, 0], 1), 0);
    }

    #[test]
    fn fragmentation_index_by_hand() {
        // An order-3 block exists: success.
        assert_eq!(fragmentation_index(&COUNTS, 3), -1000);
        // Counts without the order-3 block: [3, 2, 0, 0]: free 7, blocks 5.
        // k=2: 1000 - (1000 + 7000 / 4) / 5 = 1000 - (1000 + 1750) / 5 = 450.
        assert_eq!(fragmentation_index(&[3, 2, 0, 0], 2), 450);
        // k=3: 1000 - (1000 + 7000 / 8) / 5 = 1000 - 1875 / 5 = 625.
        assert_eq!(fragmentation_index(&[3, 2, 0, 0], 3), 625);
        // Nothing free, or an order beyond the counts: 0.
        assert_eq!(fragmentation_index(&[0, 0, 0], 2), 0);
        assert_eq!(fragmentation_index(&COUNTS, 9), 0);
        // Lack of memory: one free page, order-1 request:
        // 1000 - (1000 + 500) / 1 = -500.
        assert_eq!(fragmentation_index(&[1, 0], 1), -500);
    }

    #[test]
    fn huge_counts_do_not_overflow() {
        let big = [u64::MAX; 70];
        assert_eq!(unusable_free_index(&big, 0), 0);
        assert!(unusable_free_index(&big, 63) <= 1000);
        assert_eq!(fragmentation_index(&big, 5), -1000);
        assert!(extfrag_for_order(&big, 200) <= 100);
    }

    #[test]
    fn text_formats() {
        let z = ZoneId::new(0, "Normal");
        assert_eq!(
            buddyinfo_line(z, &COUNTS),
            "Node 0, zone   Normal      3      2      0      1 \n"
        );
        assert_eq!(
            unusable_index_line(z, &COUNTS),
            "Node 0, zone   Normal 0.000 0.200 0.466 0.466 \n"
        );
        assert_eq!(
            extfrag_index_line(z, &[3, 2, 0, 0]),
            "Node 0, zone   Normal -1.000 -1.000  0.450  0.625 \n"
        );
        let counts = PageTypeCounts {
            free: alloc::vec![[1, 2, 0, 0], [0, 200_000, 0, 0]],
            blocks: [2, 6, 0, 1],
        };
        let text = counts.pagetypeinfo(z, 9);
        let expect = "Page block order: 9\nPages per block:  512\n\n\
Free pages count per migrate type at order       0      1 \n\
Node    0, zone   Normal, type    Unmovable      1      0 \n\
Node    0, zone   Normal, type      Movable      2 >100000 \n\
Node    0, zone   Normal, type  Reclaimable      0      0 \n\
Node    0, zone   Normal, type   HighAtomic      0      0 \n\
\nNumber of blocks type     Unmovable      Movable  Reclaimable   HighAtomic \n\
Node 0, zone   Normal            2            6            0            1 \n";
        assert_eq!(text, expect);
    }
}
