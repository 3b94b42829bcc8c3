//! Unit tests: the tail rule, its top-order bound, fallback and claiming,
//! bad input, and the metrics on hand-computed free counts.

use alloc::vec::Vec;

use super::*;
use MigrateType::{HighAtomic, Movable, Reclaimable, Unmovable};

fn zone(start: u64, span: u64, max_order: u8, pb: u8, placement: Placement) -> BuddyAllocator {
    let cfg = BuddyConfig {
        max_order,
        pageblock_order: pb,
        placement,
    };
    let mut b = BuddyAllocator::new(start, span, cfg).unwrap();
    b.add_free_range(start, span).unwrap();
    b.check().unwrap();
    b
}

fn list(b: &BuddyAllocator, order: u8, mt: MigrateType) -> Vec<u64> {
    b.free_list(order, mt).collect()
}

/// Allocates the whole zone in order-`order` blocks.
fn fill(b: &mut BuddyAllocator, order: u8) {
    while b.alloc(order, Movable).is_ok() {}
    assert_eq!(b.free_pages(), 0);
}

const BOTH: [Placement; 2] = [Placement::Head, Placement::TailIfMergeLikely];

#[test]
fn tail_rule_picks_tail_when_the_higher_buddy_is_free() {
    for p in BOTH {
        let mut b = zone(0, 32, 5, 5, p);
        fill(&mut b, 0);
        // pfn 5: buddy 4 allocated, [4,6)'s buddy [6,8) allocated -> head.
        b.free(5, 0).unwrap();
        // [2,4) free as one order-1 block.
        b.free(2, 0).unwrap();
        b.free(3, 0).unwrap();
        assert_eq!(list(&b, 1, Movable), [2]);
        // pfn 0: buddy 1 allocated, but [0,2)'s buddy [2,4) is free: if 1 is
        // freed, 0..4 merges at once. Tail under the heuristic.
        b.free(0, 0).unwrap();
        b.check().unwrap();
        match p {
            Placement::Head => assert_eq!(list(&b, 0, Movable), [0, 5]),
            Placement::TailIfMergeLikely => assert_eq!(list(&b, 0, Movable), [5, 0]),
        }
        // Allocation takes the head: the heuristic keeps pfn 0 spare.
        let got = b.alloc(0, Movable).unwrap();
        assert_eq!(got, if p == Placement::Head { 0 } else { 5 });
    }
}

#[test]
fn tail_rule_picks_head_when_the_higher_buddy_is_not_free() {
    let mut b = zone(0, 32, 5, 5, Placement::TailIfMergeLikely);
    fill(&mut b, 0);
    b.free(5, 0).unwrap();
    // pfn 9: buddy 8 allocated, [8,10)'s buddy [10,12) allocated -> head.
    b.free(9, 0).unwrap();
    assert_eq!(list(&b, 0, Movable), [9, 5]);
    // A merged block is judged at its final order: freeing 12 and 13 makes
    // [12,14) whose order-2 parent's buddy [8,12) is not free -> head.
    b.free(12, 0).unwrap();
    b.free(13, 0).unwrap();
    b.free(16, 0).unwrap();
    b.free(17, 0).unwrap();
    assert_eq!(list(&b, 1, Movable), [16, 12]);
    b.check().unwrap();
}

#[test]
fn top_orders_never_probe_a_buddy_that_cannot_merge() {
    // max_order 5: blocks [0,32), [32,64), [64,96).
    let mut b = zone(0, 96, 5, 5, Placement::TailIfMergeLikely);
    fill(&mut b, 4);
    b.free(64, 4).unwrap(); // order-4 list: [64]
    b.free(32, 4).unwrap();
    b.free(48, 4).unwrap(); // [32,64) merged to order 5
    assert_eq!(list(&b, 5, Movable), [32]);
    // Freeing [0,16) (order 4 = max_order - 1): its buddy [16,32) is
    // allocated; the "higher buddy" of [0,32) is [32,64), free at order 5.
    // The unbounded 2.6.33 rule would put it at the tail, but [0,32) and
    // [32,64) can never merge (order 6 > max_order): the bound says head.
    assert!(b.free_head(32, 5).is_some());
    b.free(0, 4).unwrap();
    assert_eq!(list(&b, 4, Movable), [0, 64]);
    b.check().unwrap();

    // One order lower (max_order - 2) the rule still applies.
    let mut b = zone(0, 64, 5, 5, Placement::TailIfMergeLikely);
    fill(&mut b, 3);
    b.free(16, 3).unwrap();
    b.free(24, 3).unwrap(); // [16,32) free at order 4
    b.free(40, 3).unwrap(); // head: [32,48)'s buddy [48,64) allocated
    b.free(0, 3).unwrap(); // [0,16)'s buddy [16,32) free: tail
    assert_eq!(list(&b, 3, Movable), [40, 0]);
    b.check().unwrap();
}

#[test]
fn unmovable_claims_a_whole_free_pageblock_range() {
    // pageblock_order 3: [0,64) is two order-5 blocks over 8 pageblocks.
    let mut b = zone(0, 64, 5, 3, Placement::Head);
    let pfn = b.alloc(0, Unmovable).unwrap();
    b.check().unwrap();
    // Largest order first: a whole order-5 block claimed and retagged.
    let claimed = pfn & !31;
    for p in (claimed..claimed + 32).step_by(8) {
        assert_eq!(b.pageblock_migratetype(p), Some(Unmovable));
    }
    let other = claimed ^ 32;
    assert_eq!(b.pageblock_migratetype(other), Some(Movable));
    for o in 0..5 {
        assert_eq!(b.free_count(o, Unmovable), 1, "order {o}");
    }
    assert_eq!(list(&b, 5, Movable), [other]);
}

#[test]
fn claim_below_pageblock_order_needs_half_the_block() {
    // pageblock_order 3, max_order 4: one order-4 block, two pageblocks.
    let mut b = zone(0, 16, 4, 3, Placement::Head);
    fill(&mut b, 0);
    for p in 0..4 {
        b.free(p, 0).unwrap(); // [0,4) free: half of pageblock [0,8)
    }
    b.free(8, 0).unwrap();
    b.free(9, 0).unwrap(); // [8,10) free: a quarter of [8,16)
                           // The fallback searches the largest order first: [0,4) (order 2). Half
                           // the block is free: claim. The block moves to Unmovable and is split.
    let got = b.alloc(0, Unmovable).unwrap();
    assert_eq!(got, 0);
    assert_eq!(b.pageblock_migratetype(0), Some(Unmovable));
    assert_eq!(b.free_count(1, Unmovable), 1);
    assert_eq!(b.free_count(0, Unmovable), 1);
    b.check().unwrap();
    // Next unmovable order-1 request: its own lists have [2,4). Then an
    // order-1 request with Unmovable empty at order >= 1: [8,10) in a block
    // with 2 free and 6 movable pages in use: alike = 8 - 2 - 6 = 0, so no
    // claim: steal, the pageblock stays Movable.
    assert_eq!(b.alloc(1, Unmovable).unwrap(), 2);
    assert_eq!(b.alloc(1, Unmovable).unwrap(), 8);
    assert_eq!(b.pageblock_migratetype(8), Some(Movable));
    b.check().unwrap();
}

#[test]
fn movable_small_orders_steal_without_claiming() {
    // pageblock_order 4: movable may claim only from order 2 (4 / 2) up.
    let mut b = zone(0, 32, 5, 4, Placement::Head);
    fill(&mut b, 0);
    // Make pageblock [0,16) Unmovable the way the kernel does: an unmovable
    // request claims it when half of it is free.
    for p in 0..8 {
        b.free(p, 0).unwrap();
    }
    assert_eq!(b.alloc(0, Unmovable).unwrap(), 0);
    assert_eq!(b.pageblock_migratetype(0), Some(Unmovable));
    assert_eq!(b.pageblock_migratetype(16), Some(Movable));
    for _ in 0..7 {
        b.alloc(0, Unmovable).unwrap();
    }
    assert_eq!(b.free_pages(), 0);
    b.free(3, 0).unwrap();
    // Movable order 0 from an order-0 Unmovable page: steal, no retag.
    assert_eq!(b.alloc(0, Movable).unwrap(), 3);
    assert_eq!(b.pageblock_migratetype(0), Some(Unmovable));
    b.check().unwrap();
}

#[test]
fn fallback_order_prefers_reclaimable_for_unmovable() {
    let mut b = zone(0, 64, 5, 3, Placement::Head);
    fill(&mut b, 0);
    // A reclaimable request claims pageblock [0,8) once it is all free.
    for p in 0..8 {
        b.free(p, 0).unwrap();
    }
    assert_eq!(b.alloc(0, Reclaimable).unwrap(), 0);
    assert_eq!(b.pageblock_migratetype(0), Some(Reclaimable));
    for _ in 0..7 {
        b.alloc(0, Reclaimable).unwrap();
    }
    b.free(1, 0).unwrap(); // a page of the Reclaimable pageblock
    b.free(40, 0).unwrap(); // a page of a Movable pageblock
                            // Unmovable, order 0: no claim (too little of either block is free or
                            // alike), so steal, trying Reclaimable before Movable.
    assert_eq!(b.alloc(0, Unmovable).unwrap(), 1);
    assert_eq!(b.alloc(0, Unmovable).unwrap(), 40);
    assert_eq!(b.pageblock_migratetype(0), Some(Reclaimable));
    assert_eq!(b.pageblock_migratetype(40), Some(Movable));
    b.check().unwrap();
}

#[test]
fn retagging_a_pageblock_inside_a_free_block_follows_the_merge_rules() {
    // Between ordinary types, the re-merge retags the neighbour as a free
    // would: the whole free block takes the new type.
    let mut b = zone(0, 32, 5, 3, Placement::Head);
    b.set_pageblock_migratetype(8, Reclaimable).unwrap();
    assert_eq!(list(&b, 5, Reclaimable), [0]);
    for p in (0..32).step_by(8) {
        assert_eq!(b.pageblock_migratetype(p), Some(Reclaimable));
    }
    b.check().unwrap();
}

#[test]
fn highatomic_is_never_a_fallback_and_keeps_its_own_lists() {
    let mut b = zone(0, 16, 4, 3, Placement::Head);
    b.set_pageblock_migratetype(8, HighAtomic).unwrap();
    b.check().unwrap();
    // The order-4 block split at the incompatible pageblock boundary.
    assert_eq!(list(&b, 3, Movable), [0]);
    assert_eq!(list(&b, 3, HighAtomic), [8]);
    assert_eq!(b.alloc(4, Movable), Err(AllocError::NoSpace));
    for _ in 0..8 {
        b.alloc(0, Movable).unwrap();
    }
    // Only HighAtomic memory left: ordinary requests fail.
    assert_eq!(b.alloc(0, Movable), Err(AllocError::NoSpace));
    assert_eq!(b.alloc(0, Unmovable), Err(AllocError::NoSpace));
    let h = b.alloc(2, HighAtomic).unwrap();
    assert!((8..16).contains(&h));
    b.free(h, 2).unwrap();
    // Back to Movable: the pageblock re-merges? Its buddy [0,8) is in use,
    // so it stays an order-3 block, now on the Movable list.
    b.set_pageblock_migratetype(8, Movable).unwrap();
    assert_eq!(list(&b, 3, Movable), [8]);
    b.check().unwrap();
    // A HighAtomic request with no HighAtomic memory fails.
    assert_eq!(b.alloc(0, HighAtomic), Err(AllocError::NoSpace));
}

#[test]
fn merging_above_pageblock_order_respects_highatomic() {
    let mut b = zone(0, 16, 4, 3, Placement::Head);
    b.set_pageblock_migratetype(0, HighAtomic).unwrap();
    let a = b.alloc(3, HighAtomic).unwrap();
    let m = b.alloc(3, Movable).unwrap();
    assert_eq!((a, m), (0, 8));
    b.free(a, 3).unwrap();
    b.free(m, 3).unwrap();
    // Buddies at order 3, but one side is HighAtomic: no merge.
    assert_eq!(b.nr_free_all(), [0, 0, 0, 2, 0]);
    b.check().unwrap();
    // Retagging to an ordinary type merges them.
    b.set_pageblock_migratetype(0, Unmovable).unwrap();
    assert_eq!(b.nr_free_all(), [0, 0, 0, 0, 1]);
    assert_eq!(list(&b, 4, Unmovable), [0]);
    b.check().unwrap();
}

#[test]
fn zone_may_start_anywhere_and_have_holes() {
    let cfg = BuddyConfig {
        max_order: 4,
        pageblock_order: 2,
        placement: Placement::TailIfMergeLikely,
    };
    let mut b = BuddyAllocator::new(13, 40, cfg).unwrap();
    b.add_free_range(13, 10).unwrap(); // 13..23
    b.add_free_range(30, 23).unwrap(); // 30..53
    b.check().unwrap();
    assert_eq!(b.free_pages(), 33);
    let blocks: Vec<(u64, u8)> = b.free_blocks().map(|f| (f.pfn, f.order)).collect();
    assert_eq!(
        blocks,
        [
            (13, 0),
            (14, 1),
            (16, 2),
            (20, 1),
            (22, 0),
            (30, 1),
            (32, 4),
            (48, 2),
            (52, 0)
        ]
    );
    // Frames never added are never handed out.
    let mut got = Vec::new();
    while let Ok(p) = b.alloc(0, Movable) {
        got.push(p);
    }
    got.sort_unstable();
    let want: Vec<u64> = (13..23).chain(30..53).collect();
    assert_eq!(got, want);
    assert_eq!(b.free(25, 0), Err(FreeError::NotAllocated)); // a hole
    assert_eq!(b.add_free_range(20, 5), Err(FreeError::Invalid)); // overlaps
    for p in got {
        b.free(p, 0).unwrap();
    }
    let again: Vec<(u64, u8)> = b.free_blocks().map(|f| (f.pfn, f.order)).collect();
    assert_eq!(again, blocks);
    b.check().unwrap();
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let mut b = zone(64, 64, 4, 2, Placement::TailIfMergeLikely);
    let a = b.alloc(2, Movable).unwrap();
    let c = b.alloc(0, Unmovable).unwrap();
    let snapshot = |b: &BuddyAllocator| {
        let blocks: Vec<FreeBlock> = b.free_blocks().collect();
        let lists: Vec<Vec<u64>> = (0..=4)
            .flat_map(|o| MigrateType::ALL.map(|t| b.free_list(o, t).collect()))
            .collect();
        (blocks, lists, b.free_pages())
    };
    let before = snapshot(&b);
    assert_eq!(b.free(a, 1), Err(FreeError::NotAllocated)); // wrong order
    assert_eq!(b.free(a + 1, 0), Err(FreeError::NotAllocated)); // interior
    assert_eq!(b.free(a, 5), Err(FreeError::Invalid)); // order > max
    assert_eq!(b.free(0, 0), Err(FreeError::Invalid)); // below the span
    assert_eq!(b.free(128, 0), Err(FreeError::Invalid)); // past the span
    assert_eq!(b.free(u64::MAX, 0), Err(FreeError::Invalid));
    assert_eq!(b.alloc(5, Movable), Err(AllocError::Invalid));
    assert_eq!(b.add_free_range(64, 1), Err(FreeError::Invalid));
    assert_eq!(b.add_free_range(120, 10), Err(FreeError::Invalid));
    assert_eq!(b.add_free_range(u64::MAX, 2), Err(FreeError::Invalid));
    assert_eq!(
        b.set_pageblock_migratetype(7, HighAtomic),
        Err(AllocError::Invalid)
    );
    assert_eq!(snapshot(&b), before);
    b.free(c, 0).unwrap();
    assert_eq!(b.free(c, 0), Err(FreeError::NotAllocated)); // double free
    b.free(a, 2).unwrap();
    assert_eq!(b.nr_free_all(), [0, 0, 0, 0, 4]);
    b.check().unwrap();

    let bad = |max_order, pageblock_order| BuddyConfig {
        max_order,
        pageblock_order,
        placement: Placement::Head,
    };
    assert!(BuddyAllocator::new(0, 8, bad(16, 9)).is_err());
    assert!(BuddyAllocator::new(0, 8, bad(4, 5)).is_err());
    assert!(BuddyAllocator::new(0, 0, BuddyConfig::default()).is_err());
    assert!(BuddyAllocator::new(u64::MAX - 2, 8, BuddyConfig::default()).is_err());
    assert!(BuddyAllocator::new(0, u64::from(u32::MAX), BuddyConfig::default()).is_err());
}

#[test]
fn metrics_on_hand_computed_counts() {
    // 16 frames, max_order 4: one order-4 block. Allocating one page splits
    // it: nr_free = [1, 1, 1, 1, 0], 15 pages in 4 blocks.
    let mut b = zone(0, 16, 4, 4, Placement::Head);
    assert_eq!(b.unusable_free_index(4), 0);
    assert_eq!(b.fragmentation_index(4), -1000);
    b.alloc(0, Movable).unwrap();
    assert_eq!(b.nr_free_all(), [1, 1, 1, 1, 0]);
    // order 3: one block of 8 usable, 7 unusable: 7000 / 15 = 466.
    assert_eq!(b.unusable_free_index(3), 466);
    assert_eq!(b.extfrag_for_order(3), 46);
    // order 4: nothing usable.
    assert_eq!(b.unusable_free_index(4), 1000);
    assert_eq!(b.extfrag_for_order(4), 100);
    // 1000 - (1000 + 15 * 1000 / 16) / 4 = 1000 - 1937 / 4 = 516.
    assert_eq!(b.fragmentation_index(4), 516);
    assert_eq!(b.fragmentation_index(3), -1000);
    let z = ZoneId::new(0, "Normal");
    assert_eq!(
        b.buddyinfo(z),
        "Node 0, zone   Normal      1      1      1      1      0 \n"
    );
    assert_eq!(
        b.unusable_index_line(z),
        "Node 0, zone   Normal 0.000 0.066 0.200 0.466 1.000 \n"
    );
    assert_eq!(
        b.extfrag_index_line(z),
        "Node 0, zone   Normal -1.000 -1.000 -1.000 -1.000  0.516 \n"
    );
    let info = b.pagetypeinfo(z);
    assert!(info.contains(
        "Node    0, zone   Normal, type      Movable      1      1      1      1      0 \n"
    ));
    assert!(info
        .ends_with("Node 0, zone   Normal            0            1            0            0 \n"));
}

/// A span near `u32::MAX` would need 36 GiB of metadata up front: spans
/// above `MAX_SPAN` are refused before anything is allocated.
#[test]
fn absurd_spans_are_refused_before_allocating() {
    for span in [u64::from(u32::MAX) - 2, (1 << 31) + 1] {
        let r = BuddyAllocator::new(0, span, BuddyConfig::default());
        assert_eq!(r.err(), Some(AllocError::Invalid), "span {span:#x}");
    }
}

// ---------------------------------------------------------------------------
// Compaction
// ---------------------------------------------------------------------------

/// A 4096-frame zone with every other order-0 page allocated Movable.
fn checkerboard() -> (BuddyAllocator, alloc::collections::BTreeSet<u64>) {
    let mut b = BuddyAllocator::new(0, 4096, BuddyConfig::default()).unwrap();
    b.add_free_range(0, 4096).unwrap();
    let mut live = alloc::collections::BTreeSet::new();
    while let Ok(p) = b.alloc(0, MigrateType::Movable) {
        live.insert(p);
    }
    for p in (0..4096).step_by(2) {
        b.free(p, 0).unwrap();
        live.remove(&p);
    }
    (b, live)
}

#[test]
fn compaction_makes_a_huge_page_and_moves_through_the_callback() {
    let (mut b, mut live) = checkerboard();
    assert_eq!(b.nr_free(9), 0);
    assert_eq!(
        b.compaction_suitable(9, EXTFRAG_THRESHOLD),
        CompactSuitable::Continue
    );
    let out = b
        .compact(9, MigrateType::Movable, |old, new, o| {
            assert_eq!(o, 0);
            assert!(live.remove(&old) && live.insert(new));
            true
        })
        .unwrap();
    assert_eq!(out.result, CompactResult::Success);
    assert_eq!(out.stats.moved_pages, out.stats.moved_blocks);
    assert!(out.stats.moved_pages >= 256 && out.stats.migrate_scanned >= 512);
    b.check().unwrap();
    for &p in &live {
        assert_eq!(b.allocated_order(p), Some(0));
    }
    assert_eq!(b.free_pages(), 4096 - live.len() as u64);
    assert!(b.alloc(9, MigrateType::Movable).is_ok());
    assert_eq!(b.compaction_stats().success, 1);
}

#[test]
fn compaction_with_a_refusing_callback_changes_nothing_but_counters() {
    let (mut b, live) = checkerboard();
    let before: Vec<FreeBlock> = b.free_blocks().collect();
    let out = b.compact(9, MigrateType::Movable, |_, _, _| false).unwrap();
    assert_eq!(out.result, CompactResult::Complete);
    assert_eq!(out.stats.moved_pages, 0);
    assert!(out.stats.failed_blocks > 0);
    b.check().unwrap();
    let mut after: Vec<FreeBlock> = b.free_blocks().collect();
    after.sort();
    let mut before = before;
    before.sort();
    assert_eq!(before, after);
    assert_eq!(b.free_pages(), 4096 - live.len() as u64);
    assert_eq!(
        b.compact(11, MigrateType::Movable, |_, _, _| true),
        Err(AllocError::Invalid)
    );
}

#[test]
fn compaction_suitable_follows_the_extfrag_threshold() {
    let mut b = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
    b.add_free_range(0, 1024).unwrap();
    assert_eq!(
        b.compaction_suitable(9, EXTFRAG_THRESHOLD),
        CompactSuitable::Success
    );
    // Everything allocated but 64 scattered pages: too little for order 9.
    let all: Vec<u64> = core::iter::from_fn(|| b.alloc(0, MigrateType::Movable).ok()).collect();
    for &p in all.iter().step_by(16) {
        b.free(p, 0).unwrap();
    }
    assert_eq!(
        b.compaction_suitable(9, EXTFRAG_THRESHOLD),
        CompactSuitable::Skipped
    );
    // Order 4 with 64 free order-0 pages: index 1000 - (1000 + 4000) / 64 = 922 > 500.
    assert_eq!(b.fragmentation_index(4), 922);
    assert_eq!(
        b.compaction_suitable(4, EXTFRAG_THRESHOLD),
        CompactSuitable::Continue
    );
    assert_eq!(b.compaction_suitable(4, 950), CompactSuitable::NotSuitable);
    assert_eq!(b.compaction_suitable(3, 950), CompactSuitable::Continue);
}
