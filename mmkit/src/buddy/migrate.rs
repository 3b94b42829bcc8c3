//! Migratetypes and the fallback rules (the kernel's anti-fragmentation).
//!
//! Every pageblock (`2^pageblock_order` frames) carries a migratetype, and a
//! free block sits on the list of its pageblock's type. Allocations of one
//! type are served from their own lists first, so pages that cannot move
//! (slab, page tables) gather in few pageblocks instead of pinning every
//! huge-page-sized region. When a type runs dry the allocator falls back:
//!
//! ```text
//!   request       fallback order (first non-empty wins)
//!   Unmovable  -> Reclaimable, Movable
//!   Movable    -> Reclaimable, Unmovable
//!   Reclaimable-> Unmovable,   Movable
//!   HighAtomic -> (none: a reserve, never borrowed from or by)
//! ```
//!
//! A fallback either *claims* the whole pageblock (retags it, moves its free
//! blocks to the requester's lists) or merely *steals* the one block it needs
//! and leaves the pageblock's type alone. The rules are in this module; the
//! list surgery is in the allocator.

use super::{BuddyAllocator, Frame};
use crate::error::AllocError;

/// The mobility class of an allocation and of a pageblock.
///
/// The discriminants are the kernel's (`MIGRATE_UNMOVABLE` = 0, ...). CMA and
/// ISOLATE are not modelled.
///
/// ```
/// use mmkit::buddy::MigrateType;
/// assert_eq!(MigrateType::Movable.fallbacks(), &[MigrateType::Reclaimable, MigrateType::Unmovable]);
/// assert_eq!(MigrateType::Unmovable.name(), "Unmovable");
/// ```
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum MigrateType {
    /// Kernel memory that cannot move (slab, page tables).
    Unmovable = 0,
    /// User and page-cache memory that compaction could migrate.
    Movable = 1,
    /// Memory the kernel can drop under pressure (dentry and inode caches).
    Reclaimable = 2,
    /// A reserve of pageblocks for high-order atomic allocations; never a
    /// fallback target.
    HighAtomic = 3,
}

/// Number of migratetypes modelled (the free lists per order).
pub const MIGRATE_TYPES: usize = 4;

impl MigrateType {
    /// All types, in discriminant order.
    pub const ALL: [MigrateType; MIGRATE_TYPES] = [
        MigrateType::Unmovable,
        MigrateType::Movable,
        MigrateType::Reclaimable,
        MigrateType::HighAtomic,
    ];

    /// The type with discriminant `i`, if any.
    pub const fn from_index(i: usize) -> Option<MigrateType> {
        match i {
            0 => Some(MigrateType::Unmovable),
            1 => Some(MigrateType::Movable),
            2 => Some(MigrateType::Reclaimable),
            3 => Some(MigrateType::HighAtomic),
            _ => None,
        }
    }

    /// The discriminant, as an index into per-type arrays.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The name `/proc/pagetypeinfo` prints.
    pub const fn name(self) -> &'static str {
        match self {
            MigrateType::Unmovable => "Unmovable",
            MigrateType::Movable => "Movable",
            MigrateType::Reclaimable => "Reclaimable",
            MigrateType::HighAtomic => "HighAtomic",
        }
    }

    /// The types this one borrows from when its own lists are empty, in the
    /// order they are tried (the kernel's `fallbacks[]` table).
    pub const fn fallbacks(self) -> &'static [MigrateType] {
        match self {
            MigrateType::Unmovable => &[MigrateType::Reclaimable, MigrateType::Movable],
            MigrateType::Movable => &[MigrateType::Reclaimable, MigrateType::Unmovable],
            MigrateType::Reclaimable => &[MigrateType::Unmovable, MigrateType::Movable],
            MigrateType::HighAtomic => &[],
        }
    }

    /// Whether this is one of the three per-CPU-list types (the kernel's
    /// `migratetype < MIGRATE_PCPTYPES`). Free blocks at or above
    /// `pageblock_order` merge across pageblocks of different types only
    /// when both are such types.
    pub const fn is_pcp(self) -> bool {
        !matches!(self, MigrateType::HighAtomic)
    }
}

/// Whether a fallback from a free block of `current_order` may try to claim
/// the whole pageblock for a request of type `mt` (the kernel's
/// `should_try_claim_block`): always for blocks of a pageblock or more, for
/// blocks of at least half a pageblock's order, and for unmovable and
/// reclaimable requests (which should not scatter over many pageblocks).
pub(crate) fn should_try_claim(current_order: u8, pageblock_order: u8, mt: MigrateType) -> bool {
    current_order >= pageblock_order
        || current_order >= pageblock_order / 2
        || matches!(mt, MigrateType::Unmovable | MigrateType::Reclaimable)
}

/// Pages of a pageblock that count as "alike" a request of type `want` when
/// deciding a claim (the kernel's rule): for a movable request the movable
/// pages in use; for another request from a movable pageblock the pages in
/// use that are not movable; otherwise none.
pub(crate) fn alike_pages(
    want: MigrateType,
    block_type: MigrateType,
    block_pages: u64,
    free: u64,
    movable: u64,
) -> u64 {
    if want == MigrateType::Movable {
        movable
    } else if block_type == MigrateType::Movable {
        block_pages.saturating_sub(free + movable)
    } else {
        0
    }
}

// ---------------------------------------------------------------------------
// The fallback: claiming or stealing from another type
// ---------------------------------------------------------------------------

impl BuddyAllocator {
    /// The first fallback type of `mt` with a free block of `order`.
    fn fallback_with_block(&self, order: u8, mt: MigrateType) -> Option<MigrateType> {
        mt.fallbacks()
            .iter()
            .copied()
            .find(|&f| !self.list(order, f).is_empty())
    }

    /// Claim: from the largest order down, while the request may claim.
    /// Cold, as the kernel's `__rmqueue_fallback`: only when the type's
    /// own lists are empty.
    #[cold]
    pub(super) fn rmqueue_claim(&mut self, order: u8, mt: MigrateType) -> Option<u64> {
        let pb = self.cfg.pageblock_order;
        for o in (order..=self.cfg.max_order).rev() {
            if !should_try_claim(o, pb, mt) {
                break;
            }
            let Some(ft) = self.fallback_with_block(o, mt) else {
                continue;
            };
            let pfn = self.start + u64::from(self.list(o, ft).head);
            if let Some(got) = self.try_claim(pfn, o, order, mt, ft) {
                return Some(got);
            }
        }
        None
    }

    /// Claims the pageblock(s) of the free block `(pfn, o)` of type `ft` for
    /// `mt` if the rule allows, and allocates `order` from them.
    fn try_claim(
        &mut self,
        pfn: u64,
        o: u8,
        order: u8,
        mt: MigrateType,
        ft: MigrateType,
    ) -> Option<u64> {
        let pb = self.cfg.pageblock_order;
        if o >= pb {
            // Whole pageblocks: take them all.
            self.unlink(pfn, o, ft);
            self.set_block_range(pfn, o, mt);
            self.expand(pfn, order, o, mt);
            return Some(pfn);
        }
        let block_start = pfn & !((1u64 << pb) - 1);
        let (free, movable) = self.pageblock_usage(block_start)?;
        let pages = 1u64 << pb;
        if free + alike_pages(mt, ft, pages, free, movable) < pages / 2 {
            return None;
        }
        self.move_pageblock(block_start, mt);
        self.rmqueue_smallest(order, mt)
    }

    /// Free pages and pages of movable allocations in the pageblock at
    /// `block_start`, or `None` when the pageblock is not wholly inside the
    /// span (the kernel refuses to move blocks across the zone edge).
    fn pageblock_usage(&self, block_start: u64) -> Option<(u64, u64)> {
        let first = self.idx(block_start)?;
        let pages = 1usize << self.cfg.pageblock_order;
        if first + pages > self.frames.len() {
            return None;
        }
        let (mut free, mut movable, mut i) = (0u64, 0u64, first);
        while i < first + pages {
            match self.frame(i) {
                Frame::Free { order, .. } => {
                    free += 1u64 << order;
                    i += 1 << order;
                }
                Frame::Alloc { order, mt } => {
                    if mt == MigrateType::Movable {
                        movable += 1u64 << order;
                    }
                    i += 1 << order;
                }
                Frame::Hole | Frame::Tail => i += 1,
            }
        }
        Some((free, movable))
    }

    /// Retags the pageblock at `block_start` (wholly in the span, holding no
    /// free block larger than itself) and moves its free blocks to the tails
    /// of the `mt` lists.
    fn move_pageblock(&mut self, block_start: u64, mt: MigrateType) {
        let bi = self.block_index(block_start);
        self.blocks[bi] = mt;
        let lo = block_start.max(self.start);
        let hi = (block_start + (1u64 << self.cfg.pageblock_order)).min(self.end_pfn());
        let mut p = lo;
        while p < hi {
            let step = match self.frame((p - self.start) as usize) {
                Frame::Free { order, mt: old } => {
                    self.unlink(p, order, old);
                    self.link(p, order, mt, true);
                    1u64 << order
                }
                Frame::Alloc { order, .. } => 1u64 << order,
                Frame::Hole | Frame::Tail => 1,
            };
            p += step;
        }
    }

    /// Steal: the smallest fallback block at `order` or above, split; its
    /// remainder stays on the fallback type and the pageblock keeps its type.
    #[cold]
    pub(super) fn rmqueue_steal(&mut self, order: u8, mt: MigrateType) -> Option<u64> {
        for o in order..=self.cfg.max_order {
            let Some(ft) = self.fallback_with_block(o, mt) else {
                continue;
            };
            let li = self.list_index(o, ft);
            let i = self.links.pop_head(&mut self.lists[li])?;
            let pfn = self.start + u64::from(i);
            self.expand(pfn, order, o, ft);
            return Some(pfn);
        }
        None
    }

    /// Sets the migratetype of the pageblock holding `pfn`, moving its free
    /// memory to the new type's lists (how the kernel reserves HighAtomic
    /// pageblocks and how tests build mixed zones).
    ///
    /// When the pageblock lies inside a larger free block, that block is
    /// split down to the pageblock first; the pageblock is then re-merged
    /// with its neighbours under the usual rules (so between two ordinary
    /// types the whole merged block takes the new type, as a merge would).
    ///
    /// # Errors
    /// [`AllocError::Invalid`] when `pfn` is outside the span.
    ///
    /// # Complexity
    /// O(2^pageblock_order + max_order).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let cfg = BuddyConfig { max_order: 4, pageblock_order: 2, ..BuddyConfig::default() };
    /// let mut zone = BuddyAllocator::new(0, 16, cfg).unwrap();
    /// zone.add_free_range(0, 16).unwrap();
    /// zone.set_pageblock_migratetype(4, MigrateType::Unmovable).unwrap();
    /// assert_eq!(zone.pageblock_migratetype(5), Some(MigrateType::Unmovable));
    /// // Its free memory moved to the Unmovable lists; re-merged with its
    /// // free buddies, the whole block takes the new type.
    /// assert_eq!(zone.free_count(4, MigrateType::Unmovable), 1);
    /// zone.check().unwrap();
    /// ```
    pub fn set_pageblock_migratetype(
        &mut self,
        pfn: u64,
        mt: MigrateType,
    ) -> Result<(), AllocError> {
        crate::debug_check!(self);
        self.idx(pfn).ok_or(AllocError::Invalid)?;
        let pb = self.cfg.pageblock_order;
        let block_start = pfn & !((1u64 << pb) - 1);
        match self.covering_free_block(pfn) {
            Some((head, order, old)) => {
                self.unlink(head, order, old);
                let cur = self.split_towards(head, order, pfn, old);
                self.set_block_range(cur, pb, mt);
                self.free_one(cur, pb, mt);
            }
            None => self.move_pageblock(block_start, mt),
        }
        Ok(())
    }

    /// The free block of order >= `pageblock_order` that contains `pfn`.
    fn covering_free_block(&self, pfn: u64) -> Option<(u64, u8, MigrateType)> {
        (self.cfg.pageblock_order..=self.cfg.max_order).find_map(|o| {
            let head = pfn & !((1u64 << o) - 1);
            self.free_head(head, o).map(|mt| (head, o, mt))
        })
    }

    /// Splits the unlinked free block `(head, order)` of type `mt` down to
    /// the pageblock holding `pfn`, relinking the other halves; returns the
    /// pageblock's first pfn (left unlinked).
    fn split_towards(&mut self, mut head: u64, mut order: u8, pfn: u64, mt: MigrateType) -> u64 {
        while order > self.cfg.pageblock_order {
            order -= 1;
            let upper = head + (1u64 << order);
            if pfn >= upper {
                self.link(head, order, mt, false);
                head = upper;
            } else {
                self.link(upper, order, mt, false);
            }
        }
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_table_is_the_kernels() {
        use MigrateType::*;
        assert_eq!(Unmovable.fallbacks(), &[Reclaimable, Movable]);
        assert_eq!(Movable.fallbacks(), &[Reclaimable, Unmovable]);
        assert_eq!(Reclaimable.fallbacks(), &[Unmovable, Movable]);
        assert!(HighAtomic.fallbacks().is_empty());
        for t in MigrateType::ALL {
            assert!(!t.fallbacks().contains(&HighAtomic));
            assert_eq!(MigrateType::from_index(t.index()), Some(t));
        }
        assert_eq!(MigrateType::from_index(4), None);
    }

    #[test]
    fn claim_rules() {
        use MigrateType::*;
        // pageblock_order 9: movable claims from order 4 (9 / 2) up.
        assert!(!should_try_claim(3, 9, Movable));
        assert!(should_try_claim(4, 9, Movable));
        assert!(should_try_claim(0, 9, Unmovable));
        assert!(should_try_claim(0, 9, Reclaimable));
        assert!(should_try_claim(9, 9, Movable));
        assert_eq!(alike_pages(Movable, Unmovable, 512, 100, 40), 40);
        assert_eq!(alike_pages(Unmovable, Movable, 512, 100, 40), 372);
        assert_eq!(alike_pages(Unmovable, Reclaimable, 512, 100, 40), 0);
    }
}
