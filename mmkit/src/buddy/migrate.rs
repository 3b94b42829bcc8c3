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
