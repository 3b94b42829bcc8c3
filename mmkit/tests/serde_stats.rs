//! The statistics round-trip through serde (feature `serde`):
//! `cargo test -p mmkit --features serde --test serde_stats`.

use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
use mmkit::range::RangeStats;
use mmkit::request::{Policy, Request, RequestError};
use mmkit::vmap::VmapAllocator;

#[test]
fn range_stats_round_trip_as_json() {
    let mut va = VmapAllocator::new(0, 100).unwrap();
    va.alloc(10, 1).unwrap();
    let s = va.stats();
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("\"live_bytes\":10"), "{json}");
    let back: RangeStats = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s);
}

#[test]
fn buddy_snapshot_requests_and_errors_serialize() {
    let mut b = BuddyAllocator::new(0, 16, BuddyConfig::default()).unwrap();
    b.add_free_range(0, 16).unwrap();
    b.alloc(0, MigrateType::Movable).unwrap();
    let blocks: Vec<_> = b.free_blocks().collect();
    let json = serde_json::to_string(&blocks).unwrap();
    assert!(json.contains("\"mt\":\"Movable\""), "{json}");
    let counts = serde_json::to_value(b.pagetype_counts()).unwrap();
    assert_eq!(counts["blocks"][1], 1); // one Movable pageblock
    let r = Request::bytes(8)
        .unwrap()
        .align(8)
        .policy(Policy::Exact(64));
    let back: Request = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(back, r);
    let e = RequestError::NotFree { start: 1, end: 2 };
    assert_eq!(
        serde_json::to_string(&e).unwrap(),
        r#"{"NotFree":{"start":1,"end":2}}"#
    );
}
