//! `VmapAllocator::allocate` with every policy (lowest, highest, exact),
//! lazy frees, purges, `grow` and `shrink`, against a brute-force model: a
//! sorted list of free ranges scanned linearly (`models/policy.rs`, shared
//! with the fuzz target `vmap_policy`). Results (addresses and every error
//! with its fields), the free blocks and the space must agree after every
//! operation, and `check()` must pass.

include!("models/policy.rs");

use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    let place = prop_oneof![
        Just(Place::Lowest),
        Just(Place::Highest),
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
