//! Hostile input for the buddy allocator: every bad argument returns a typed
//! error and changes nothing (`check()` passes, the free lists compare
//! equal).

use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType, ORDER_LIMIT};
use mmkit::{AllocError, FreeError};

type Snapshot = (Vec<(u64, u8)>, u64, Vec<u64>);

fn snap(b: &BuddyAllocator) -> Snapshot {
    let free = b.free_blocks().map(|f| (f.pfn, f.order)).collect();
    (free, b.free_pages(), b.nr_free_all())
}

#[test]
fn constructors_refuse_bad_configs() {
    let cfg = BuddyConfig::default();
    assert!(BuddyAllocator::new(0, 0, cfg).is_err(), "empty span");
    assert!(
        BuddyAllocator::new(u64::MAX, 2, cfg).is_err(),
        "span past u64::MAX"
    );
    // The top pfns: a zone whose last max-order block would end at 2^64.
    // The highest zone accepted ends one such block below it.
    let top = BuddyConfig {
        max_order: 4,
        pageblock_order: 2,
        ..cfg
    };
    assert_eq!(
        BuddyAllocator::new(u64::MAX - 16, 16, top).err(),
        Some(AllocError::Invalid),
        "last block past u64::MAX"
    );
    assert!(BuddyAllocator::new(u64::MAX - 31, 16, top).is_ok());
    let bad = BuddyConfig {
        max_order: ORDER_LIMIT + 1,
        ..cfg
    };
    assert!(
        BuddyAllocator::new(0, 1024, bad).is_err(),
        "order too large"
    );
}

#[test]
fn buddy_refuses_hostile_input() {
    // A span [100, 500) with [100, 300) present and a hole [300, 500).
    let mut b = BuddyAllocator::new(100, 400, BuddyConfig::default()).unwrap();
    b.add_free_range(100, 200).unwrap();
    let live = b.alloc(2, MigrateType::Movable).unwrap();
    let before = snap(&b);
    let refused = |b: &mut BuddyAllocator| {
        b.check().unwrap();
        assert_eq!(snap(b), before);
    };
    for order in [11, ORDER_LIMIT, u8::MAX] {
        assert_eq!(
            b.alloc(order, MigrateType::Movable),
            Err(AllocError::Invalid)
        );
        assert_eq!(b.free(live, order), Err(FreeError::Invalid));
        refused(&mut b);
    }
    for pfn in [0, 99, 500, u64::MAX] {
        assert_eq!(b.free(pfn, 0), Err(FreeError::Invalid), "pfn {pfn} outside");
        assert!(b
            .set_pageblock_migratetype(pfn, MigrateType::Movable)
            .is_err());
        refused(&mut b);
    }
    // A hole, an interior pfn, a wrong order, a free block.
    for (pfn, order) in [(350, 0), (live + 1, 0), (live, 1), (live, 3), (live + 4, 0)] {
        assert_eq!(
            b.free(pfn, order),
            Err(FreeError::NotAllocated),
            "{pfn} {order}"
        );
        refused(&mut b);
    }
    // Ranges already present, zero-length, outside or wrapping.
    for (pfn, n) in [
        (100, 10),
        (150, 0),
        (600, 10),
        (495, 10),
        (u64::MAX, 2),
        (0, u64::MAX),
    ] {
        assert!(
            b.add_free_range(pfn, n).is_err(),
            "add_free_range({pfn}, {n})"
        );
        refused(&mut b);
    }
    assert_eq!(b.free(live, 2), Ok(()));
    assert_eq!(b.free(live, 2), Err(FreeError::NotAllocated), "double free");
    b.check().unwrap();
}
