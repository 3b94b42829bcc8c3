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
