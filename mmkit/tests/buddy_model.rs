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
