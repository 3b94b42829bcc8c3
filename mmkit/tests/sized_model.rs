#![allow(dead_code)]
//! Frees that carry the size, against the brute-force range model: on
//! `VmapAllocator::new` (sizes checked against the busy index) and on
//! `VmapAllocator::without_busy_index` (checked in debug builds, trusted
//! in release, where only frees the model accepts are given).

include!("models/range.rs");
include!("models/sized.rs");

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn indexed_matches_model(space in space_strategy(), ops in prop::collection::vec(sized_op_strategy(), 1..200)) {
        run_sized(tree, space, &ops, false).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn without_index_matches_model(space in space_strategy(), ops in prop::collection::vec(sized_op_strategy(), 1..200)) {
        run_sized(untracked, space, &ops, true).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn a_wrong_size_changes_nothing() {
    for make in [tree, untracked] {
        let mut a = make(0, 0x10000);
        let x = a.alloc(0x3000, 0x1000).unwrap();
        let y = a.alloc(0x1000, 0x1000).unwrap();
        let before = (a.stats(), a.free_blocks().collect::<Vec<_>>());
        let checked = SIZES_CHECKED || !a.frees_need_size();
        if checked {
            assert_eq!(a.free_sized(x, 0x2000), Err(FreeError::SizeMismatch));
            assert_eq!(a.free_lazy_sized(x, 0x4000), Err(FreeError::SizeMismatch));
            assert_eq!(
                a.free_sized(x + 0x1000, 0x1000),
                Err(FreeError::NotAllocated)
            );
        }
        // Told from the free space alone, with or without an index.
        assert_eq!(a.free_sized(0x8000, 0x1000), Err(FreeError::NotAllocated));
        let over_free_space = match checked {
            true => FreeError::SizeMismatch,
            false => FreeError::NotAllocated,
        };
        assert_eq!(a.free_sized(y, 0x2000), Err(over_free_space));
        assert_eq!(a.free_sized(x, 0), Err(FreeError::Invalid));
        assert_eq!(a.free_sized(0xf000, 0x2000), Err(FreeError::Invalid));
        assert_eq!(a.free_sized(u64::MAX, 2), Err(FreeError::Invalid));
        assert_eq!(before, (a.stats(), a.free_blocks().collect::<Vec<_>>()));
        a.check().unwrap();
        assert_eq!(a.free_sized(x, 0x3000), Ok(0x3000));
        assert_eq!(a.free_lazy_sized(y, 0x1000), Ok(0x1000));
        a.check().unwrap();
    }
}

#[test]
fn frees_with_and_without_size_agree_on_every_answer() {
    // The same churn freed by address and by size leaves the same space.
    let mut by_addr = tree(0, 1 << 30);
    let mut by_size = untracked(0, 1 << 30);
    let mut live = Vec::new();
    let mut x = 7u64;
    for i in 0..4000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if live.len() > 200 || (x >> 60) < 6 && !live.is_empty() {
            let (a, size) = live.swap_remove((x >> 20) as usize % live.len());
            if i % 3 == 0 {
                assert_eq!(by_addr.free_lazy(a), Ok(size));
                assert_eq!(by_size.free_lazy_sized(a, size), Ok(size));
            } else {
                assert_eq!(by_addr.free(a), Ok(size));
                assert_eq!(by_size.free_sized(a, size), Ok(size));
            }
        } else {
            let size = 0x1000 * (1 + (x >> 40) % 16);
            let align = 0x1000 << ((x >> 36) % 4);
            let a = by_addr.alloc(size, align).unwrap();
            assert_eq!(by_size.alloc(size, align), Ok(a));
            live.push((a, size));
        }
    }
    by_size.check().unwrap();
    assert_eq!(comparable(by_addr.stats()), comparable(by_size.stats()));
}
