//! The buddy allocator against a brute-force model, step by step.
//!
//! The model is the set of present frames, the allocated blocks, and which
//! pageblocks are HighAtomic. With eager merging the free blocks of a buddy
//! allocator are a function of that state alone: the *canonical*
//! decomposition, where an aligned block is one free block exactly when both
//! halves are and they may merge (always below `pageblock_order`; above it,
//! unless exactly one side is HighAtomic). After every operation the
//! allocator's free blocks must equal the canonical ones, `check()` must
//! pass, and every result (success, `NoSpace`, `Invalid`, `NotAllocated`) must
//! be the one the model predicts.

include!("models/buddy.rs");

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn buddy_matches_model(s in setup(), ops in prop::collection::vec(op(), 1..250)) {
        let (mut b, mut m) = build(&s);
        compare(&b, &m)?;
        for op in &ops {
            step(&mut b, &mut m, &s, op)?;
            compare(&b, &m)?;
        }
        // Free everything: only maximal blocks remain.
        let live: Vec<(u64, u8)> = m.live.iter().map(|(&p, &o)| (p, o)).collect();
        for (pfn, order) in live {
            prop_assert_eq!(b.free(pfn, order), Ok(()));
            m.live.remove(&pfn);
            m.mark(pfn, order, false);
            m.kern.free(pfn, order).unwrap();
            compare(&b, &m)?;
        }
    }

    #[test]
    fn freeing_everything_restores_the_initial_lists(
        s in setup(),
        ops in prop::collection::vec((0u8..4, 0usize..3, any::<bool>(), any::<usize>()), 1..200),
    ) {
        let (mut b, m) = build(&s);
        let initial: BTreeSet<(u64, u8)> = b.free_blocks().map(|f| (f.pfn, f.order)).collect();
        let initial_counts = b.nr_free_all();
        let mut live = Vec::new();
        for &(order, mt, free, pick) in &ops {
            if free && !live.is_empty() {
                let (pfn, order) = live.swap_remove(pick % live.len());
                prop_assert_eq!(b.free(pfn, order), Ok(()));
            } else if let Ok(pfn) = b.alloc(order.min(s.max_order), mt_of(mt)) {
                live.push((pfn, order.min(s.max_order)));
            }
            b.check().map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        for (pfn, order) in live {
            prop_assert_eq!(b.free(pfn, order), Ok(()));
        }
        let after: BTreeSet<(u64, u8)> = b.free_blocks().map(|f| (f.pfn, f.order)).collect();
        prop_assert_eq!(&after, &initial);
        prop_assert_eq!(b.nr_free_all(), initial_counts);
        prop_assert_eq!(b.free_pages(), m.present.iter().filter(|&&p| p).count() as u64);
        b.check().map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
}

/// The kernel's default orders (max 10, pageblocks of 2^9) on 8,192 frames:
/// seven or more blocks of the top order and, after the first order-0
/// allocation, one block of every order below it.
fn big_setup() -> impl Strategy<Value = Setup> {
    (0u64..3000, prop::bool::ANY).prop_map(|(start, tail)| Setup {
        max_order: 10,
        pb: 9,
        start,
        segs: vec![(start, start + 8192, true)],
        placement: if tail {
            Placement::TailIfMergeLikely
        } else {
            Placement::Head
        },
    })
}

/// Steps over the whole big zone: orders up to the top, pageblock types
/// set anywhere in it.
fn big_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..4, 0usize..4).prop_map(|(order, mt)| Op::Alloc { order, mt }),
        2 => (4u8..11, 0usize..4).prop_map(|(order, mt)| Op::Alloc { order, mt }),
        5 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => (0u64..8200, 0u8..11).prop_map(|(off, order)| Op::FreeRaw { off, order }),
        2 => (0u64..8200, 0usize..4).prop_map(|(off, mt)| Op::SetType { off, mt }),
    ]
}

/// Free blocks per order.
fn orders_populated(b: &BuddyAllocator, max_order: u8) -> Vec<u64> {
    (0..=max_order).map(|o| b.nr_free(o)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The kernel's choices with every order populated: which order is
    /// split, which block, where the halves and merged blocks go, the
    /// fallbacks between types.
    #[test]
    fn buddy_matches_the_kernel_with_every_order_populated(s in big_setup(), ops in prop::collection::vec(big_op(), 1..300)) {
        let (mut b, mut m) = build(&s);
        do_alloc(&mut b, &mut m, 0, MigrateType::Movable)?;
        let counts = orders_populated(&b, 10);
        prop_assert!(counts.iter().all(|&n| n > 0), "orders {:?}", counts);
        compare(&b, &m)?;
        for op in &ops {
            step(&mut b, &mut m, &s, op)?;
            compare(&b, &m)?;
        }
    }
}

/// The big runs reach what they claim: every order holds a free block
/// after the first allocation (a shrunk zone fails here).
#[test]
fn big_zone_populates_every_order() {
    let s = Setup {
        max_order: 10,
        pb: 9,
        start: 1234,
        segs: vec![(1234, 1234 + 8192, true)],
        placement: Placement::TailIfMergeLikely,
    };
    let (mut b, mut m) = build(&s);
    do_alloc(&mut b, &mut m, 0, MigrateType::Movable).unwrap();
    let counts = orders_populated(&b, 10);
    assert!(counts.iter().all(|&n| n > 0), "orders {counts:?}");
    assert!(counts[10] >= 6, "orders {counts:?}");
}

/// A reversed order loop (the largest block split first) is a different
/// block from the smallest: the kernel takes the order-0 block left by the
/// first split, not a piece of a fresh order-10 block.
#[test]
fn the_smallest_order_is_split_first() {
    let s = Setup {
        max_order: 10,
        pb: 9,
        start: 0,
        segs: vec![(0, 4096, true)],
        placement: Placement::Head,
    };
    let (mut b, mut m) = build(&s);
    let first = b.alloc(0, MigrateType::Movable).unwrap();
    m.kern.alloc(0, MigrateType::Movable).unwrap();
    // The first split left one free block of each order 0..=9 beside it.
    assert_eq!(b.alloc(0, MigrateType::Movable), Ok(first ^ 1));
    assert_eq!(b.alloc(1, MigrateType::Movable), Ok((first & !3) ^ 2));
}

/// A Movable request that finds only order-0 blocks of an Unmovable
/// pageblock steals one and leaves the pageblock Unmovable: the kernel's
/// `should_try_claim_block` refuses a claim below half a pageblock's order
/// (here 0 < 2 / 2) for a Movable request, however free the pageblock.
#[test]
fn a_movable_request_below_half_a_pageblock_does_not_claim() {
    let cfg = BuddyConfig {
        max_order: 2,
        pageblock_order: 2,
        placement: Placement::Head,
    };
    let mut b = BuddyAllocator::new(0, 4, cfg).unwrap();
    b.add_free_range(0, 4).unwrap();
    b.set_pageblock_migratetype(0, MigrateType::Unmovable)
        .unwrap();
    let pages: Vec<u64> = (0..4)
        .map(|_| b.alloc(0, MigrateType::Unmovable).unwrap())
        .collect();
    assert_eq!(pages, [0, 1, 2, 3]);
    // Pages 0 and 3 free: half the pageblock, no two buddies.
    b.free(0, 0).unwrap();
    b.free(3, 0).unwrap();
    let p = b.alloc(0, MigrateType::Movable).unwrap();
    assert!(p == 0 || p == 3, "{p}");
    assert_eq!(b.pageblock_migratetype(0), Some(MigrateType::Unmovable));
    assert_eq!(b.free_count(0, MigrateType::Unmovable), 1);
    assert_eq!(b.free_count(0, MigrateType::Movable), 0);
    b.check().unwrap();
}

/// A zone of `span` pages from pfn 0 (head placement, orders up to 4,
/// pageblocks of `2^pageblock_order`), every page handed out as Movable
/// blocks of `2^order` pages (checked to tile the zone).
fn full_movable_zone(span: u64, pageblock_order: u8, order: u8) -> BuddyAllocator {
    full_movable_zone_at(0, span, 4, pageblock_order, order)
}

/// [`full_movable_zone`] from pfn `start`, with orders up to `max_order`.
fn full_movable_zone_at(
    start: u64,
    span: u64,
    max_order: u8,
    pageblock_order: u8,
    order: u8,
) -> BuddyAllocator {
    let cfg = BuddyConfig {
        max_order,
        pageblock_order,
        placement: Placement::Head,
    };
    let mut b = BuddyAllocator::new(start, span, cfg).unwrap();
    b.add_free_range(start, span).unwrap();
    let mut got: Vec<u64> = (0..span >> order)
        .map(|_| b.alloc(order, MigrateType::Movable).unwrap())
        .collect();
    got.sort_unstable();
    let tiles: Vec<u64> = (start..start + span).step_by(1 << order).collect();
    assert_eq!(got, tiles);
    b
}

/// Compacts for `order` (Movable), every move accepted: the moves made, as
/// (old pfn, new pfn, order), and the outcome.
fn compact_all(
    b: &mut BuddyAllocator,
    order: u8,
) -> (Vec<(u64, u64, u8)>, mmkit::buddy::CompactOutcome) {
    let mut moves = Vec::new();
    let out = b
        .compact(order, MigrateType::Movable, |old, new, o| {
            moves.push((old, new, o));
            true
        })
        .unwrap();
    (moves, out)
}

/// Compaction on a hand-made zone of four 4-page pageblocks: the migration
/// scanner takes the Movable pages of the bottom pageblock in address
/// order, the free scanner isolates the free pages of the top pageblock
/// (lowest first), and the run stops as soon as an order-2 block is free.
#[test]
fn compaction_moves_the_bottom_pages_to_the_top_free_pages() {
    let mut b = full_movable_zone(16, 2, 0);
    for p in [1, 3, 13, 15] {
        b.free(p, 0).unwrap();
    }
    // 4 free pages in 4 blocks, none of order 2: index 1000 - (1000 + 4000/4) / 4.
    assert_eq!(b.fragmentation_index(2), 500);
    // Fewer free pages than the kernel's compact_gap (2 << order): it
    // would reclaim first; compacting anyway is still the caller's choice.
    assert_eq!(b.compaction_suitable(2, 500), CompactSuitable::Skipped);
    let (moves, out) = compact_all(&mut b, 2);
    assert_eq!(moves, [(0, 13, 0), (2, 15, 0)]);
    assert_eq!(out.result, mmkit::buddy::CompactResult::Success);
    let free: Vec<(u64, u8)> = b.free_blocks().map(|f| (f.pfn, f.order)).collect();
    assert_eq!(free, [(0, 2)]);
    let st = out.stats;
    assert_eq!((st.runs, st.success, st.fail), (1, 1, 0));
    // One pageblock walked by each scanner, its two free pages isolated.
    assert_eq!(
        (st.migrate_scanned, st.free_scanned, st.isolated_free),
        (4, 4, 2)
    );
    assert_eq!(
        (st.moved_pages, st.moved_blocks, st.failed_blocks),
        (2, 2, 0)
    );
    assert_eq!(b.compaction_stats(), st);
    b.check().unwrap();
}

/// A Movable allocation of a whole pageblock is not a migration source:
/// the migration scanner passes over it and moves the pages of the next
/// pageblock (a scanner that took it would find no isolated target of its
/// order, since the free scanner never isolates a pageblock-sized block,
/// and stop there with nothing moved).
#[test]
fn compaction_passes_over_a_pageblock_sized_allocation() {
    let mut b = full_movable_zone(32, 2, 0);
    for p in 0..4 {
        b.free(p, 0).unwrap();
    }
    assert_eq!(b.alloc(2, MigrateType::Movable), Ok(0));
    for p in [5, 7, 29, 31] {
        b.free(p, 0).unwrap();
    }
    let (moves, out) = compact_all(&mut b, 3);
    assert_eq!(moves, [(4, 29, 0), (6, 31, 0)]);
    assert_eq!(out.result, mmkit::buddy::CompactResult::Complete);
    assert_eq!(b.allocated_order(0), Some(2));
    assert_eq!(b.free_count(2, MigrateType::Movable), 1);
    b.check().unwrap();
}

/// The free scanner takes its targets only from Movable pageblocks that are
/// not wholly free (the kernel's `suitable_migration_target`): from the
/// top it passes over an Unmovable pageblock with free pages and a wholly
/// free one, and isolates the free pages of the next.
#[test]
fn compaction_targets_only_movable_pageblocks_in_use() {
    let mut b = full_movable_zone(24, 2, 0);
    for p in [1, 3, 13, 15, 16, 17, 18, 19, 21, 23] {
        b.free(p, 0).unwrap();
    }
    b.set_pageblock_migratetype(20, MigrateType::Unmovable)
        .unwrap();
    let (moves, out) = compact_all(&mut b, 3);
    assert_eq!(moves, [(0, 13, 0), (2, 15, 0)]);
    assert_eq!(out.result, mmkit::buddy::CompactResult::Complete);
    assert_eq!(b.free_count(2, MigrateType::Movable), 2);
    b.check().unwrap();
}

/// A Movable request that falls back to an Unmovable pageblock claims the
/// whole pageblock when its free pages and the Movable pages in use there
/// reach half of it (the kernel's `try_to_claim_block`): 2 free and 6
/// Movable pages in use (three order-1 blocks) of 8.
#[test]
fn a_fallback_claims_a_pageblock_full_of_movable_pages() {
    let mut b = full_movable_zone(16, 3, 1);
    b.free(8, 1).unwrap();
    b.set_pageblock_migratetype(8, MigrateType::Unmovable)
        .unwrap();
    assert_eq!(b.free_count(1, MigrateType::Unmovable), 1);
    let p = b.alloc(0, MigrateType::Movable).unwrap();
    assert!((8..10).contains(&p), "{p}");
    assert_eq!(
        b.pageblock_migratetype(8),
        Some(MigrateType::Movable),
        "the pageblock was not claimed"
    );
    b.check().unwrap();
}

/// The migration scanner counts a block that runs past its pageblock's end
/// only up to that end, and skips the pageblocks inside it: two Movable
/// order-3 blocks in pageblocks of 4 pages (`pageblock_order` below
/// `max_order`, as the config allows) are 4 pages scanned each, the second
/// one starting at pfn 8. The kernel's free scanner counts so
/// (`isolate_freepages_block` skips a compound page whole only when it ends
/// inside the pageblock, else walks on page by page to the pageblock's
/// end); its migration scanner differs (it skips a pageblock that starts in
/// a compound page of `pageblock_order` or more, and counts a free block
/// whole at its head), and this model keeps the free scanner's rule for
/// both.
#[test]
fn the_migration_scanner_counts_a_large_block_to_its_pageblock_end() {
    let mut b = full_movable_zone(16, 2, 3);
    let (moves, out) = compact_all(&mut b, 4);
    assert_eq!(moves, []);
    assert_eq!(out.result, mmkit::buddy::CompactResult::Complete);
    let st = out.stats;
    assert_eq!((st.migrate_scanned, st.free_scanned), (8, 0));
    b.check().unwrap();
}

/// The free scanner counts a block that runs past its pageblock's end only
/// up to that end (the kernel's `isolate_freepages_block`, see above): from
/// the top it walks two pageblocks of single pages (4 + 4), passes over the
/// upper half of an order-3 Movable block (a pageblock inside a larger
/// block: 0), counts the pageblock holding that block's head at pfn 16 as
/// 4 pages, and isolates the two free pages of the next one (4).
#[test]
fn the_free_scanner_counts_a_large_block_to_its_pageblock_end() {
    let mut b = full_movable_zone(32, 2, 0);
    for p in 16..24 {
        b.free(p, 0).unwrap();
    }
    assert_eq!(b.alloc(3, MigrateType::Movable), Ok(16));
    for p in [1, 3, 13, 15] {
        b.free(p, 0).unwrap();
    }
    let (moves, out) = compact_all(&mut b, 2);
    assert_eq!(moves, [(0, 13, 0), (2, 15, 0)]);
    assert_eq!(out.result, mmkit::buddy::CompactResult::Success);
    let st = out.stats;
    assert_eq!(
        (st.migrate_scanned, st.free_scanned, st.isolated_free),
        (4, 16, 2)
    );
    b.check().unwrap();
}

/// The migration scanner takes only Movable blocks smaller than the
/// requested order (the kernel's `skip_isolation_on_order`: a folio of the
/// target order or more is not isolated, since a free block of that order
/// would already have ended the run). A HighAtomic request uses only its
/// own lists, so a free order-1 block of a Movable pageblock does not end
/// its run: the order-1 blocks of the bottom pageblock stay, though that
/// free block could take one of them.
#[test]
fn the_migration_scanner_leaves_blocks_of_the_requested_order() {
    let mut b = full_movable_zone(8, 2, 1);
    b.free(6, 1).unwrap();
    let mut moves = Vec::new();
    let out = b
        .compact(1, MigrateType::HighAtomic, |old, new, o| {
            moves.push((old, new, o));
            true
        })
        .unwrap();
    assert_eq!(moves, []);
    assert_eq!(out.result, mmkit::buddy::CompactResult::Complete);
    assert_eq!((out.stats.migrate_scanned, out.stats.free_scanned), (8, 0));
    assert_eq!(b.free_count(1, MigrateType::Movable), 1);
    b.check().unwrap();
}

/// Compaction at the top of the pfn range gives the same answers as at 0:
/// the zone of `compaction_moves_the_bottom_pages_to_the_top_free_pages`
/// placed at the highest start accepted, with pageblocks as large as the
/// largest block (its last pageblock ends at 2^64 - 4). The free scanner
/// starts at the end of the zone's last pageblock (the kernel's
/// `compact_zone` starts it in the pageblock holding the zone's last pfn),
/// computed without overflow.
#[test]
fn compaction_at_the_top_of_the_pfn_range() {
    let s = u64::MAX - 19;
    let mut b = full_movable_zone_at(s, 16, 2, 2, 0);
    for p in [1, 3, 13, 15] {
        b.free(s + p, 0).unwrap();
    }
    let (moves, out) = compact_all(&mut b, 2);
    assert_eq!(moves, [(s, s + 13, 0), (s + 2, s + 15, 0)]);
    assert_eq!(out.result, mmkit::buddy::CompactResult::Success);
    let st = out.stats;
    assert_eq!(
        (st.migrate_scanned, st.free_scanned, st.isolated_free),
        (4, 4, 2)
    );
    b.check().unwrap();
}
