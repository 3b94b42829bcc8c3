use super::*;
use crate::error::AllocError;

type Spin = spin::Mutex<()>;

fn nodes(n: usize) -> VmapNodes<Spin> {
    let cfg = NodesConfig {
        nodes: n,
        ..NodesConfig::default()
    };
    VmapNodes::new(0, 1 << 30, cfg).unwrap()
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn nodes_are_send_and_sync_behind_any_raw_lock() {
    assert_send_sync::<VmapNodes<Spin>>();
    #[cfg(feature = "std")]
    assert_send_sync::<StdVmapNodes>();
}

#[test]
fn a_pooled_area_returns_to_its_own_node_only() {
    let v = nodes(2);
    let a = v.alloc(0, 4096, 4096).unwrap();
    v.free(1, a).unwrap(); // freed from node 1: pooled on node 0, its owner
    assert_eq!(v.node_stats(0).pooled, 1);
    assert_eq!(v.alloc(1, 4096, 4096), Ok(4096)); // node 1 misses
    assert_eq!(v.alloc(0, 4096, 4096), Ok(a)); // node 0 hits
    v.check().unwrap();
}

#[test]
fn a_misaligned_pooled_area_is_a_miss() {
    let v = nodes(1);
    v.alloc(0, 4096, 4096).unwrap();
    let a = v.alloc(0, 4096, 4096).unwrap(); // 0x1000
    v.free(0, a).unwrap();
    assert_eq!(v.alloc(0, 4096, 8192), Ok(0x2000));
    assert_eq!(v.node_stats(0).misses, 3);
    assert_eq!(v.node_stats(0).pooled, 1);
    v.check().unwrap();
}

#[test]
fn no_space_drains_every_node_then_answers_exactly() {
    let cfg = NodesConfig {
        nodes: 2,
        ..NodesConfig::default()
    };
    let v: VmapNodes<Spin> = VmapNodes::new(0, 4 * 4096, cfg).unwrap();
    let areas: Vec<u64> = (0..4).map(|i| v.alloc(i, 4096, 4096).unwrap()).collect();
    v.free(0, areas[0]).unwrap(); // node 0's pool
    v.free_lazy(1, areas[1]).unwrap(); // node 1's lazy list
                                       // Two pages fit only once both are back in the tree, merged.
    assert_eq!(v.alloc(1, 8192, 4096), Ok(0));
    assert_eq!(v.stats().pooled, 0);
    assert_eq!(v.alloc(0, 4096, 1), Err(AllocError::NoSpace));
    v.check().unwrap();
}

#[test]
fn bad_frees_change_nothing() {
    let v = nodes(3);
    let a = v.alloc(2, 8192, 4096).unwrap();
    let before = v.stats();
    assert_eq!(v.free(0, a + 1), Err(FreeError::NotAllocated));
    assert_eq!(v.free_sized(0, a, 4096), Err(FreeError::SizeMismatch));
    assert_eq!(v.free_lazy_sized(0, a, 0), Err(FreeError::Invalid));
    assert_eq!(v.stats(), before);
    assert_eq!(v.free_sized(1, a, 8192), Ok(8192));
    assert_eq!(v.free(1, a), Err(FreeError::NotAllocated));
    v.check().unwrap();
}

#[test]
fn a_lazy_list_past_its_limit_purges_every_node_with_one_flush() {
    let cfg = NodesConfig {
        nodes: 2,
        lazy_max: 2 * 4096,
        ..NodesConfig::default()
    };
    let v: VmapNodes<Spin> = VmapNodes::new(0, 1 << 20, cfg).unwrap();
    let flushes = alloc::sync::Arc::new(spin::Mutex::new(Vec::new()));
    let f = flushes.clone();
    v.set_flush_hook(Some(Box::new(move |s, e| f.lock().push((s, e)))));
    let a: Vec<u64> = (0..4)
        .map(|i| v.alloc(i % 2, 4096, 4096).unwrap())
        .collect();
    v.free_lazy(1, a[1]).unwrap();
    v.free_lazy(0, a[0]).unwrap();
    v.free_lazy(0, a[2]).unwrap();
    assert!(flushes.lock().is_empty());
    v.free_lazy(1, a[3]).unwrap(); // node 1 holds 2 pages: not past 2
    assert!(flushes.lock().is_empty());
    let b = v.alloc(1, 4096, 4096).unwrap();
    v.free_lazy(1, b).unwrap(); // 3 pages on node 1: every node purges
    assert_eq!(*flushes.lock(), [(0, 0x5000)]);
    assert_eq!(v.stats().purges, 1);
    // Node 1 started it and pooled its 3 areas; node 0's 2, flushed, wait
    // for node 0 to pool them at its next allocation.
    assert_eq!((v.node_stats(1).lazy, v.node_stats(1).pooled), (0, 3));
    assert_eq!((v.node_stats(0).lazy, v.node_stats(0).pooled), (2, 0));
    v.check().unwrap();
    assert_eq!(v.alloc(0, 4096, 4096), Ok(a[2])); // settled, then a hit
    assert_eq!((v.node_stats(0).lazy, v.node_stats(0).pooled), (0, 1));
    assert_eq!(flushes.lock().len(), 1);
    v.check().unwrap();
}

#[test]
fn a_node_decays_once_per_lazy_max_of_its_own_frees_whoever_purges() {
    let cfg = NodesConfig {
        nodes: 2,
        lazy_max: 4096,
        ..NodesConfig::default()
    };
    let v: VmapNodes<Spin> = VmapNodes::new(0, 1 << 20, cfg).unwrap();
    let idle: Vec<u64> = (0..8).map(|_| v.alloc(0, 4096, 4096).unwrap()).collect();
    for &a in &idle {
        v.free(0, a).unwrap(); // 8 pooled on node 0
    }
    let lazy = v.alloc(0, 8192, 4096).unwrap();
    // Past lazy_max: node 0 decays at once, nothing (its pools held their
    // 8 since no decay), and pools the 2 pages.
    v.free_lazy(0, lazy).unwrap();
    assert_eq!(v.node_stats(0).pooled, 8 + 1);
    let purge_from_1 = || {
        let b = v.alloc(1, 8192, 4096).unwrap();
        v.free_lazy(1, b).unwrap(); // past lazy_max on node 1
        v.node_stats(0).pooled
    };
    // Node 1 purges; node 0, which frees nothing, keeps its pools.
    let mut pooled: Vec<usize> = (0..3).map(|_| purge_from_1() as usize).collect();
    // Node 0 takes a page from its pool and frees it lazily, twice; a
    // purge of node 1's flushes it, the next settles it: the first 4096
    // bytes (not past lazy_max) pool their page, the second 4096 decay
    // the one-page pool first (7 held unused lose 1).
    for _ in 0..2 {
        let a = v.alloc(0, 4096, 4096).unwrap(); // a hit: 8 pooled
        v.free_lazy(0, a).unwrap();
        pooled.extend((0..2).map(|_| purge_from_1() as usize));
    }
    assert_eq!(pooled, [9, 9, 9, 8, 9, 8, 8]);
    assert_eq!(v.stats().purges, 8);
    // `purge` decays every node, whoever freed.
    let b = v.alloc(1, 4096, 4096).unwrap();
    v.free_lazy(1, b).unwrap();
    assert!(v.purge());
    assert_eq!(v.node_stats(0).pooled, 7);
    v.check().unwrap();
    v.drain();
    assert_eq!(v.stats().pooled + v.stats().lazy, 0);
    assert_eq!(v.with_allocator(|va| va.stats().free_blocks), 1);
}

#[cfg(feature = "std")]
#[test]
fn threads_churning_their_own_nodes_keep_every_invariant() {
    use std::sync::Arc;
    let v = Arc::new(nodes(4));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let v = Arc::clone(&v);
            std::thread::spawn(move || {
                let mut live = Vec::new();
                let mut x = t as u64 + 1;
                for i in 0..3000u64 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    if live.len() > 50 || (x >> 62) == 0 && !live.is_empty() {
                        let (a, size) = live.swap_remove((x >> 33) as usize % live.len());
                        // Some frees on another node than the allocation's.
                        let cpu = if i % 7 == 0 { t + 1 } else { t };
                        match i % 3 {
                            0 => assert_eq!(v.free_lazy_sized(cpu, a, size), Ok(size)),
                            1 => assert_eq!(v.free(cpu, a), Ok(size)),
                            _ => assert_eq!(v.free_lazy(cpu, a), Ok(size)),
                        }
                    } else {
                        let size = 4096 * (1 + (x >> 40) % 300);
                        live.push((v.alloc(t, size, 4096).unwrap(), size));
                    }
                    if i % 1000 == 0 {
                        v.check().unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    v.check().unwrap();
    v.drain();
    let s = v.stats();
    assert_eq!(s.tree.live_areas, s.live);
}

#[test]
fn a_purge_gives_back_adjacent_areas_as_one_block_counting_each() {
    // One pooled size, one page: the areas of two and three pages go back.
    let cfg = NodesConfig {
        nodes: 1,
        classes: 1,
        ..NodesConfig::default()
    };
    let v = VmapNodes::<Spin>::new(0, 1 << 30, cfg).unwrap();
    let up: Vec<u64> = (0..8).map(|_| v.alloc(0, 8192, 4096).unwrap()).collect();
    let kept = v.alloc(0, 4096, 4096).unwrap();
    let down: Vec<u64> = (0..8).map(|_| v.alloc(0, 12288, 4096).unwrap()).collect();
    // Ascending, then descending: both orders join into one run each.
    for &a in up.iter().chain(down.iter().rev()) {
        v.free_lazy(0, a).unwrap();
    }
    assert!(v.purge());
    v.check().unwrap();
    let tree = v.with_allocator(|va| va.stats());
    assert_eq!((tree.live_areas, tree.live_bytes), (1, 4096));
    // The free space around `kept`: below it, above it to the end.
    assert_eq!(tree.free_blocks, 2);
    assert_eq!(v.alloc(0, 16 * 4096, 4096), Ok(0));
    assert_eq!(v.alloc(0, 24 * 4096, 4096), Ok(kept + 4096));
    v.check().unwrap();
}

#[test]
fn a_purge_decays_a_quarter_of_what_each_pool_held_unused_then_pools_past_pool_max() {
    let cfg = NodesConfig {
        nodes: 1,
        pool_max: 4,
        ..NodesConfig::default()
    };
    let v = VmapNodes::<Spin>::new(0, 1 << 30, cfg).unwrap();
    let pages: Vec<u64> = (0..108).map(|_| v.alloc(0, 4096, 4096).unwrap()).collect();
    // Eager frees stop at `pool_max`: 4 pooled, the fifth to the tree.
    for &a in &pages[..5] {
        v.free(0, a).unwrap();
    }
    assert_eq!(v.node_stats(0).pooled, 4);
    for &a in &pages[5..105] {
        v.free_lazy(0, a).unwrap();
    }
    // No decay yet (the pool has held its 4 since no decay), then all 100
    // lazy areas are pooled.
    assert!(v.purge());
    assert_eq!(v.node_stats(0).pooled, 104);
    // The next: the 4 held since the last decay lose 1 (the 100 pooled
    // after it are spared), 3 pooled.
    for &a in &pages[105..] {
        v.free_lazy(0, a).unwrap();
    }
    assert!(v.purge());
    assert_eq!(v.node_stats(0).pooled, 106);
    v.check().unwrap();
    // A pool past `pool_max` takes no eager free; the newest pooled area
    // is the next hit.
    let hit = v.alloc(0, 4096, 4096).unwrap();
    assert_eq!(hit, pages[107]);
    v.free(0, hit).unwrap();
    assert_eq!(v.node_stats(0).pooled, 105);
    // In the tree: 108 areas less the 2 eager frees that found the pool
    // full and the 1 decayed.
    let s = v.stats();
    assert_eq!((s.hits, s.tree.live_areas), (1, 108 - 2 - 1));
    // Hits take the pool down to 4: the next decay takes 4 / 4 = 1, not a
    // quarter of the 103 it held at the last.
    let taken: Vec<u64> = (0..101).map(|_| v.alloc(0, 4096, 4096).unwrap()).collect();
    assert_eq!(v.node_stats(0).pooled, 4);
    v.free_lazy(0, taken[0]).unwrap();
    assert!(v.purge());
    assert_eq!(v.node_stats(0).pooled, 4 - 1 + 1);
    v.check().unwrap();
}

#[test]
fn a_size_has_a_class_only_in_whole_granules_up_to_the_last_class() {
    let cfg = NodesConfig {
        granule: 4096,
        classes: 3,
        ..NodesConfig::default()
    };
    let v: VmapNodes<Spin> = VmapNodes::new(0, 1 << 30, cfg).unwrap();
    let classes: Vec<Option<usize>> = [0, 1, 4095, 4096, 4097, 8192, 12288, 16384, u64::MAX]
        .iter()
        .map(|&s| v.class_of(s))
        .collect();
    let want = [
        None,
        None,
        None,
        Some(0),
        None,
        Some(1),
        Some(2),
        None,
        None,
    ];
    assert_eq!(classes, want);
}

#[test]
fn a_free_on_another_node_finds_the_owner_past_the_last_node() {
    let v = nodes(3);
    let a = v.alloc(2, 4096, 4096).unwrap(); // node 2's
    let b = v.alloc(5, 8192, 4096).unwrap(); // node 5 % 3 = 2
                                             // From node 1 the search goes 1, 2; from node 3 % 3 = 0 it goes 0, 1, 2.
    assert_eq!(v.free_sized(1, a, 8192), Err(FreeError::SizeMismatch));
    assert_eq!(v.free_sized(1, a, 4096), Ok(4096));
    assert_eq!(v.free(3, b), Ok(8192));
    assert_eq!(v.free(4, b), Err(FreeError::NotAllocated));
    assert_eq!(v.node_stats(2).pooled, 2);
    v.check().unwrap();
}

#[cfg(all(feature = "lock-stats", feature = "std"))]
#[test]
fn a_lock_counts_its_acquisitions_and_those_that_found_it_held() {
    let v = nodes(2);
    for cpu in 0..4 {
        let a = v.alloc(cpu, 4096, 4096).unwrap();
        v.free_lazy(cpu, a).unwrap();
    }
    v.purge();
    let s = v.stats();
    assert_eq!(
        (s.node_lock_waits, s.tree_lock_waits, s.purge_lock_waits),
        (0, 0, 0)
    );
    // Four misses took the free tree's lock; the purge pooled all four
    // areas and gave nothing back, and reading the counters counts none.
    assert_eq!((s.tree_locks, v.stats().tree_locks), (4, 4));
    let held = v.nodes[1].0.lock();
    std::thread::scope(|t| {
        let other = t.spawn(|| v.alloc(1, 4096, 4096));
        // The wait is counted before the waiter blocks: it shows while
        // the lock is still held.
        let t0 = std::time::Instant::now();
        while v.nodes[1].0.waits() == 0 {
            assert!(t0.elapsed().as_secs() < 60, "the waiter was never counted");
            std::thread::yield_now();
        }
        drop(held);
        other.join().unwrap().unwrap();
    });
    let s = v.stats();
    assert_eq!(
        (s.node_lock_waits, s.tree_lock_waits, s.purge_lock_waits),
        (1, 0, 0)
    );
    assert_eq!(s.tree_locks, 4, "a pool hit takes no tree lock");
    // A miss finds the free tree's lock held: counted, then it spins and
    // (held past its spins) waits in the raw lock until it is let go.
    let tree = v.global.0.lock_uncounted();
    std::thread::scope(|t| {
        let other = t.spawn(|| v.alloc(0, 8192, 4096));
        let t0 = std::time::Instant::now();
        while v.global.0.waits() == 0 {
            assert!(t0.elapsed().as_secs() < 60, "the waiter was never counted");
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!other.is_finished(), "it took a held lock");
        drop(tree);
        assert_eq!(other.join().unwrap(), Ok(4 * 4096));
    });
    let s = v.stats();
    assert_eq!(
        (s.node_lock_waits, s.tree_lock_waits, s.tree_locks),
        (1, 1, 5)
    );
    v.check().unwrap();
}
