//! `VmapAllocator::allocate` with every policy (lowest, highest, best fit,
//! exact), lazy frees, purges, `grow` and `shrink`, against a brute-force
//! model: a sorted list of free ranges scanned linearly (`models/policy.rs`, shared
//! with the fuzz target `vmap_policy`). Results (addresses and every error
//! with its fields), the free blocks and the space must agree after every
//! operation, and `check()` must pass.

include!("models/policy.rs");

use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    let place = prop_oneof![
        Just(Place::Lowest),
        Just(Place::Highest),
        Just(Place::BestFit),
        (0u64..5000).prop_map(Place::Exact),
    ];
    let align = prop_oneof![4 => (0u32..9).prop_map(|k| 1u64 << k), 1 => Just(3u64)];
    let window = proptest::option::of((0u64..5000, 0u64..5000));
    prop_oneof![
        6 => (1u64..300, align, window, place).prop_map(|(size, align, window, place)| Op::Alloc {
            size, align, window, place
        }),
        3 => any::<usize>().prop_map(Op::Free),
        2 => any::<usize>().prop_map(Op::FreeLazy),
        1 => Just(Op::Purge),
        1 => (0u64..512, 0u64..512).prop_map(|(a, b)| Op::Grow(a, b)),
        1 => (0u64..64, 0u64..64).prop_map(|(a, b)| Op::Shrink(a, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn policies_grow_and_shrink_match_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        run_policy_ops((1000, 4000), &ops).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn shrinking_onto_a_live_area_is_refused_and_grow_past_the_top_saturates() {
    let ops = [
        Op::Alloc {
            size: 10,
            align: 1,
            window: None,
            place: Place::Highest,
        },
        Op::Shrink(0, 5),
        Op::Grow(u64::MAX, u64::MAX),
        Op::Alloc {
            size: 1,
            align: 1 << 63,
            window: None,
            place: Place::Highest,
        },
        Op::Shrink(1, 1),
    ];
    run_policy_ops((1000, 4000), &ops).unwrap();
}

/// `space` cut into `areas` areas of 1 to 4 units of 16 (a seeded
/// sequence), every other one freed, on both: about `areas / 2` free
/// blocks.
fn fragmented(space: (u64, u64), areas: u64, seed: u64) -> (VmapAllocator, Model) {
    let (mut v, mut m) = fresh(space).unwrap();
    let mut x = seed | 1;
    let mut starts = Vec::new();
    for _ in 0..areas {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let size = 16 * (1 + x % 4);
        let a = v.alloc(size, 16).unwrap();
        assert_eq!(Ok(a), m.allocate(size, 16, None, Policy::Lowest));
        starts.push(a);
    }
    for &a in starts.iter().step_by(2) {
        let end = m.live.remove(&a).unwrap();
        m.add_free(a, end);
        assert_eq!(v.free(a), Ok(end - a));
    }
    v.check().unwrap();
    (v, m)
}

/// Steps inside the fragmented part of the deep run's space.
fn deep_op() -> impl Strategy<Value = Op> {
    let place = prop_oneof![
        1 => Just(Place::Lowest),
        1 => Just(Place::Highest),
        2 => Just(Place::BestFit),
        1 => (0u64..60_000).prop_map(|a| Place::Exact(a & !15)),
    ];
    let align = (0u32..7).prop_map(|k| 1u64 << k);
    let window = proptest::option::of((0u64..60_000, 0u64..60_000));
    prop_oneof![
        6 => (1u64..80, align, window, place).prop_map(|(size, align, window, place)| Op::Alloc {
            size, align, window, place
        }),
        3 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::FreeLazy),
        1 => Just(Op::Purge),
    ]
}

/// Free blocks of the deep policy runs: over 256 in the tree (a leaf and an
/// inner node hold 16 each), so three levels.
const DEEP_POLICY_AREAS: u64 = 1200;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Lowest, highest, best-fit and exact placement on a tree of three
    /// levels.
    #[test]
    fn policies_match_the_model_on_a_deep_tree(seed in any::<u64>(), ops in proptest::collection::vec(deep_op(), 1..100)) {
        let (v, m) = fragmented((0, 1 << 20), DEEP_POLICY_AREAS, seed);
        prop_assert!(m.free.len() > 16 * 16 + 1, "{} free blocks", m.free.len());
        run_policy_ops_from(v, m, &ops).map_err(TestCaseError::fail)?;
    }
}

/// Best fit alone on a tree of three levels, at several alignments, with
/// and without a window, frees between: every answer is the model's, and
/// many differ from the lowest fit (so a best fit that answered the
/// lowest fit would fail here).
#[test]
fn best_fit_on_a_deep_tree_is_the_models_and_not_the_lowest_fit() {
    let (mut v, mut m) = fragmented((0, 1 << 20), DEEP_POLICY_AREAS, 11);
    let mut differ = 0;
    for i in 0..600u64 {
        let size = 8 * (1 + i % 9);
        let align = [1, 16, 64][(i % 3) as usize];
        let window = (i % 4 == 3).then(|| (i * 997 % 40_000, i * 997 % 40_000 + 9000));
        let (lo, hi) = window.unwrap_or(m.space);
        let lowest = m.find(size, align, lo, hi, Policy::Lowest);
        let best = m.find(size, align, lo, hi, Policy::BestFit);
        differ += usize::from(lowest != best);
        let ops = [
            Op::Alloc {
                size,
                align,
                window,
                place: Place::BestFit,
            },
            Op::Free(i as usize * 13),
        ];
        let ops = if i % 3 == 0 { &ops[..] } else { &ops[..1] };
        for op in ops {
            step(&mut v, &mut m, op).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        }
    }
    assert!(
        differ > 200,
        "{differ} best fits differ from the lowest fit"
    );
    v.check().unwrap();
}

/// Requests aligned to the granule every block start has (16 here), with
/// a window that starts inside the first free block long enough: the
/// tree's plain descent declines them (that block starts below the
/// window) and its general search answers, at every policy, as the model
/// does. Frees between the requests keep the holes changing.
#[test]
fn floor_aligned_requests_with_a_window_inside_the_first_long_block() {
    let (mut v, mut m) = fragmented((0, 1 << 20), DEEP_POLICY_AREAS, 7);
    let mut cut = 0;
    for i in 0..400u64 {
        let size = 16 * (1 + i % 4);
        let Some(&(s, e)) = m.free.iter().find(|&&(s, e)| e - s >= size) else {
            break;
        };
        // Into the block by 1 to 47 bytes, never past its end.
        let lo = (s + 1 + (i * 7) % 47).min(e - 1);
        let hi = if i % 3 == 0 { 1 << 20 } else { e + 4096 };
        let place = match i % 3 {
            0 => Place::Lowest,
            1 => Place::Highest,
            _ => Place::Exact((lo + 15) & !15),
        };
        let align = if i % 5 == 0 { 4 } else { 16 };
        cut += usize::from(s < lo && lo < e && matches!(place, Place::Lowest));
        let ops = [
            Op::Alloc {
                size,
                align,
                window: Some((lo, hi)),
                place,
            },
            Op::Free(i as usize * 31),
        ];
        let ops = if i % 2 == 0 { &ops[..] } else { &ops[..1] };
        for op in ops {
            step(&mut v, &mut m, op).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        }
    }
    assert!(
        cut > 100,
        "{cut} lowest requests cut into the first long block"
    );
    v.check().unwrap();
}

/// A deep tree's alignment summaries after an exact fit at a large
/// alignment: the case a random run found (`check()` failed on an entry's
/// summary).
#[test]
fn deep_tree_summary_after_exact_and_aligned_fits() {
    let (v, m) = fragmented((0, 1 << 20), DEEP_POLICY_AREAS, 8799678223101874308);
    let ops = [
        Op::Alloc {
            size: 71,
            align: 2,
            window: None,
            place: Place::Exact(18272),
        },
        Op::Alloc {
            size: 57,
            align: 32,
            window: None,
            place: Place::Exact(4576),
        },
        Op::Alloc {
            size: 59,
            align: 8,
            window: None,
            place: Place::Lowest,
        },
    ];
    run_policy_ops_from(v, m, &ops).unwrap();
}

/// The edges of a request and a space, exactly: an exact placement filling
/// its window from end to end, and a shrink that keeps one side (its empty
/// part is not checked for being free, though a live area starts there).
#[test]
fn exact_fits_and_shrinks_at_the_edges() {
    let at = |size, window, place| Op::Alloc {
        size,
        align: 1,
        window,
        place,
    };
    let ops = [
        at(16, Some((2000, 2016)), Place::Exact(2000)),
        at(10, None, Place::Lowest),
        at(10, None, Place::Highest),
        Op::Shrink(0, 0),
        Op::Free(2),
        Op::Shrink(0, 5),
        Op::Free(0),
        Op::Shrink(5, 0),
        // Grown on one side only, with live areas at both ends.
        at(10, None, Place::Lowest),
        at(10, None, Place::Highest),
        Op::Grow(5, 0),
        Op::Grow(0, 5),
    ];
    run_policy_ops((1000, 4000), &ops).unwrap();
}

/// Page-granular steps with alignments from a page to 4 MiB, every policy:
/// the alignments where `Policy::Linux` searches for `size + align - 1`.
fn page_op() -> impl Strategy<Value = Op> {
    const PAGE: u64 = 4096;
    let place = prop_oneof![
        4 => Just(Place::Linux),
        1 => Just(Place::Lowest),
        1 => (0u64..4096).prop_map(|p| Place::Exact(p * PAGE)),
    ];
    let align = (0u32..11).prop_map(|k| PAGE << k);
    let window =
        proptest::option::of((0u64..4096, 0u64..4096).prop_map(|(a, b)| (a * PAGE, b * PAGE)));
    prop_oneof![
        6 => (1u64..600, align, window, place).prop_map(|(pages, align, window, place)| Op::Alloc {
            size: pages * PAGE, align, window, place
        }),
        3 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::FreeLazy),
        1 => Just(Op::Purge),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Linux's choice (short blocks passed over for large alignments) as
    /// the model states it, on 16 MiB of pages.
    #[test]
    fn linux_policy_matches_the_model(ops in proptest::collection::vec(page_op(), 1..150)) {
        run_policy_ops((0, 16 << 20), &ops).map_err(TestCaseError::fail)?;
    }
}

/// A 9-page request at 2 MiB alignment and a hole of 512 + 64 KiB at
/// 1.5 MiB: the hole holds an aligned fit (the exact lowest fit takes 2
/// MiB), but is shorter than 9 pages + 2 MiB - 1, so Linux takes 4 MiB,
/// in the free space above the live area that ends the hole; with a window
/// ending at 4 MiB it fails, as Linux's first long enough block decides.
#[test]
fn linux_passes_over_a_short_block_that_holds_an_aligned_fit() {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    let (mut v, mut m) = fresh((0, 64 * MIB)).unwrap();
    let alloc = |size, align, window, place| Op::Alloc {
        size,
        align,
        window,
        place,
    };
    let ops = [
        alloc(1536 * KIB, 4096, None, Place::Lowest), // [0, 1.5 MiB)
        alloc(576 * KIB, 4096, None, Place::Lowest),  // the hole, freed below
        alloc(960 * KIB, 4096, None, Place::Lowest),  // up to 3 MiB
        Op::Free(1),
        alloc(9 * 4096, 2 * MIB, Some((0, 4 * MIB)), Place::Linux),
    ];
    for op in &ops {
        step(&mut v, &mut m, op).unwrap();
    }
    assert_eq!(m.live.len(), 2, "the windowed request failed");
    let nine = Request::bytes(9 * 4096).unwrap().align(2 * MIB);
    assert_eq!(v.allocate(nine.clone()), Ok(2 * MIB));
    assert_eq!(v.free(2 * MIB), Ok(9 * 4096));
    assert_eq!(v.allocate(nine.policy(Policy::Linux)), Ok(4 * MIB));
    v.check().unwrap();
}
