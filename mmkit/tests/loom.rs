//! loom model checks of the thread-safe wrappers, `range::Locked` and
//! `vblock::ConcurrentVblock`, whose locks become loom's under `--cfg loom`:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test --release -p mmkit --test loom
//! ```
//!
//! loom runs each closure under every interleaving of the threads' lock
//! acquisitions and releases (DPOR, bounded by `LOOM_MAX_PREEMPTIONS`), so
//! the assertions hold for all of them, not only the schedules a stress
//! test happens to hit. Covered:
//! - `Locked`: two threads allocating at once (distinct, non-overlapping
//!   results in both orders); alloc racing a lazy free and a threshold purge;
//!   two threads churning, which passes its lock's turn back and forth
//!   (`sync::TurnMutex`, whose batch is 2 under loom);
//! - `ConcurrentVblock`: two threads mapping on the same CPU queue (one
//!   creates the block, the other finds it or creates another), on two
//!   queues (two block creations racing for the global lock), and a map
//!   racing an unmap that releases a whole block (index shard, queue and
//!   global lock in both orders); `check()` after every schedule;
//! - `vmap::pooled::PooledVmap`: two CPUs pooling and reusing areas while
//!   a drain returns the pools; an allocation that finds no space until it
//!   drains another CPU's pool, racing that CPU's own frees.
//!
//! - `nodes::VmapNodes`: a lazy free found on another node than the
//!   caller's while that node purges every node (one flush, pools fed and
//!   decayed); an allocation that finds no space until it drains another
//!   node's pool, racing that node's own free; a node settling the share
//!   another node's purge left it, racing that purge.
//!
//! Not covered: the slot assignment (`NEXT_SLOT`, a relaxed counter whose
//! every value is valid). `mmkit-vm`'s purge, over real mappings, has its
//! own loom test (`mmkit-vm/tests/loom.rs`).
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use mmkit::nodes::{NodesConfig, VmapNodes};
use mmkit::range::Locked;
use mmkit::vblock::{ConcurrentVblock, Config, Policy};
use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
use mmkit::vmap::VmapAllocator;

const CFG: Config = Config {
    page_size: 4096,
    max_alloc: 4,
    bits: 16,
};

#[test]
fn locked_concurrent_allocs_are_disjoint() {
    loom::model(|| {
        let va = Arc::new(Locked::new(VmapAllocator::new(0, 1 << 20).unwrap()));
        let t = {
            let va = va.clone();
            thread::spawn(move || va.alloc(4096, 4096).unwrap())
        };
        let a = va.alloc(8192, 4096).unwrap();
        let b = t.join().unwrap();
        assert!(a + 8192 <= b || b + 4096 <= a, "{a:#x} {b:#x} overlap");
        let g = va.lock();
        g.check().unwrap();
        assert_eq!(g.stats().live_areas, 2);
    });
}

#[test]
fn locked_alloc_races_a_lazy_free_and_purge() {
    loom::model(|| {
        let mut inner = VmapAllocator::new(0, 16384).unwrap();
        inner.set_lazy_max(0); // every lazy free purges at once
        let first = inner.alloc(16384, 1).unwrap();
        let va = Arc::new(Locked::new(inner));
        let t = {
            let va = va.clone();
            thread::spawn(move || va.free_lazy(first).unwrap())
        };
        // Either the space is still taken (NoSpace) or it was purged.
        let r = va.alloc(4096, 4096);
        t.join().unwrap();
        let g = va.lock();
        g.check().unwrap();
        assert_eq!(g.stats().live_areas, u64::from(r.is_ok()));
    });
}

#[test]
fn locked_hands_the_turn_over_between_churning_threads() {
    // Under loom the turn passes after 2 acquisitions in a row while the
    // other thread waits, so two pairs each reach the hand-over, the
    // out-of-turn take and the queueing on the mutex. The waiting loops
    // multiply the schedules: preemptions are bounded to 2.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let va = Arc::new(Locked::new(VmapAllocator::new(0, 1 << 20).unwrap()));
        let churn = |va: &Locked<VmapAllocator>| {
            for _ in 0..2 {
                let a = va.alloc(4096, 4096).unwrap();
                va.free(a).unwrap();
            }
        };
        let t = {
            let va = va.clone();
            thread::spawn(move || churn(&va))
        };
        churn(&va);
        t.join().unwrap();
        let g = va.lock();
        g.check().unwrap();
        assert_eq!(g.stats().live_areas, 0);
    });
}

fn vblock() -> Arc<ConcurrentVblock<VmapAllocator>> {
    let range = VmapAllocator::new(0x10_0000, 0x1000_0000).unwrap();
    Arc::new(ConcurrentVblock::new(range, CFG, Policy::Current, 2).unwrap())
}

fn two_maps(cpu_a: usize, cpu_b: usize) {
    // Schedules explored (loom runs the model once per schedule); one
    // counter per call, since the test harness runs tests in parallel.
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&runs);
    loom::model(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let vb = vblock();
        let t = {
            let vb = vb.clone();
            thread::spawn(move || vb.map_on(cpu_b, 3).unwrap())
        };
        let a = vb.map_on(cpu_a, 2).unwrap();
        let b = t.join().unwrap();
        assert!(
            a + 2 * 4096 <= b || b + 3 * 4096 <= a,
            "{a:#x} {b:#x} overlap"
        );
        vb.check().unwrap();
        vb.unmap(a, 2).unwrap();
        vb.unmap(b, 3).unwrap();
        vb.check().unwrap();
    });
    let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("cpus {cpu_a}/{cpu_b}: {runs} schedules");
    assert!(runs > 1, "loom explored one schedule only");
}

#[test]
fn vblock_maps_on_one_queue() {
    two_maps(0, 0);
}

#[test]
fn vblock_maps_on_two_queues() {
    two_maps(0, 1);
}

#[test]
fn vblock_map_races_a_block_release() {
    loom::model(|| {
        let vb = vblock();
        // A whole block (16 pages) of 4-page maps: unmapping them all
        // releases the block.
        let held: Vec<u64> = (0..4).map(|_| vb.map_on(0, 4).unwrap()).collect();
        let t = {
            let vb = vb.clone();
            thread::spawn(move || {
                for a in held {
                    vb.unmap(a, 4).unwrap();
                }
            })
        };
        let x = vb.map_on(0, 1).unwrap();
        t.join().unwrap();
        vb.check().unwrap();
        vb.unmap(x, 1).unwrap();
        vb.check().unwrap();
    });
}

/// A pooled front end over `pages` pages where every lazy free purges at
/// once (so areas reach the pools inside the modelled window).
fn pooled(pages: u64) -> Arc<PooledVmap> {
    let cfg = PooledConfig {
        cpus: 2,
        granule: 4096,
        classes: 4,
        pool_max: 2,
        lazy_max: 0,
    };
    Arc::new(PooledVmap::new(VmapAllocator::new(0, pages * 4096).unwrap(), cfg).unwrap())
}

#[test]
fn pooled_cpus_reuse_while_a_drain_runs() {
    loom::model(|| {
        let p = pooled(4);
        let a = p.alloc(0, 4096, 4096).unwrap();
        let t = {
            let p = p.clone();
            thread::spawn(move || {
                let b = p.alloc(1, 4096, 4096).unwrap();
                p.free_lazy(1, b).unwrap();
                p.alloc(1, 4096, 4096).unwrap()
            })
        };
        p.free_lazy(0, a).unwrap();
        p.drain();
        let b = t.join().unwrap();
        p.check().unwrap();
        assert_eq!(
            p.with_allocator(|va| va.stats().live_areas),
            1 + p.stats(1).pooled
        );
        assert_eq!(p.free(0, b), Ok(4096));
        p.check().unwrap();
    });
}

#[test]
fn pooled_alloc_drains_another_cpus_pool() {
    loom::model(|| {
        // Two pages: CPU 0 pools one, so CPU 1's two-page request fits only
        // after it drains CPU 0's pool.
        let p = pooled(2);
        let a = p.alloc(0, 4096, 4096).unwrap();
        let t = {
            let p = p.clone();
            thread::spawn(move || p.alloc(1, 8192, 4096))
        };
        p.free_lazy(0, a).unwrap();
        let got = t.join().unwrap();
        // The request raced the free: before it, the page was live and
        // nothing fits; after it, the drain finds the page.
        if let Ok(b) = got {
            assert_eq!(b, 0);
            assert_eq!(p.free(1, b), Ok(8192));
        }
        p.drain();
        p.check().unwrap();
        assert_eq!(p.with_allocator(|va| va.stats().free_blocks), 1);
    });
}

/// Vmap nodes over `pages` pages where every lazy free purges at once.
fn nodes(pages: u64) -> Arc<VmapNodes<parking_lot::RawMutex>> {
    let cfg = NodesConfig {
        nodes: 2,
        granule: 4096,
        classes: 4,
        pool_max: 2,
        lazy_max: 0,
    };
    Arc::new(VmapNodes::new(0, pages * 4096, cfg).unwrap())
}

#[test]
fn nodes_free_lazily_and_reuse_while_another_node_purges() {
    loom::model(|| {
        let v = nodes(4);
        let a = v.alloc(0, 4096, 4096).unwrap();
        let t = {
            let v = v.clone();
            thread::spawn(move || {
                let b = v.alloc(1, 4096, 4096).unwrap();
                v.free_lazy(1, b).unwrap(); // purges every node
                v.alloc(1, 4096, 4096).unwrap()
            })
        };
        // Freed from node 1's side: found on node 0, its owner.
        v.free_lazy_sized(1, a, 4096).unwrap();
        let b = t.join().unwrap();
        v.check().unwrap();
        let s = v.stats();
        assert_eq!(s.tree.live_areas, s.live + s.lazy + s.pooled);
        assert_eq!(s.live, 1);
        assert_eq!(v.free(0, b), Ok(4096));
        v.drain();
        v.check().unwrap();
        assert_eq!(v.with_allocator(|va| va.stats().free_blocks), 1);
    });
}

#[test]
fn a_node_settles_what_another_nodes_purge_left_it_while_that_node_purges() {
    loom::model(|| {
        // One lazy page stays lazy; two pages start a purge.
        let cfg = NodesConfig {
            nodes: 2,
            granule: 4096,
            classes: 4,
            pool_max: 2,
            lazy_max: 4096,
        };
        let v = Arc::new(VmapNodes::<parking_lot::RawMutex>::new(0, 8 * 4096, cfg).unwrap());
        let a = v.alloc(0, 4096, 4096).unwrap();
        v.free_lazy(0, a).unwrap();
        let t = {
            let v = v.clone();
            thread::spawn(move || {
                let b = v.alloc(1, 8192, 4096).unwrap();
                v.free_lazy(1, b).unwrap(); // purges: node 0's page is owed
                let c = v.alloc(1, 8192, 4096).unwrap();
                assert_eq!(c, b, "node 1 settled its own share: a hit");
                c
            })
        };
        // Before the purge: a miss; after it: node 0 settles, then a hit.
        let got = v.alloc(0, 4096, 4096).unwrap();
        let c = t.join().unwrap();
        v.check().unwrap();
        let s = v.stats();
        assert_eq!(s.tree.live_areas, s.live + s.lazy + s.pooled);
        assert_eq!(s.live, 2);
        assert!(got == a || s.lazy + s.pooled == 1, "{got:#x}: {s:?}");
        assert_eq!(v.free(0, got), Ok(4096));
        assert_eq!(v.free(1, c), Ok(8192));
        v.drain();
        v.check().unwrap();
        assert_eq!(v.with_allocator(|va| va.stats().free_blocks), 1);
    });
}

#[test]
fn nodes_alloc_drains_another_nodes_pool() {
    loom::model(|| {
        // Node 0 pools its page; node 1's two-page request fits only after
        // it drains node 0.
        let v = nodes(2);
        let a = v.alloc(0, 4096, 4096).unwrap();
        let t = {
            let v = v.clone();
            thread::spawn(move || v.alloc(1, 8192, 4096))
        };
        v.free(0, a).unwrap();
        if let Ok(b) = t.join().unwrap() {
            assert_eq!(b, 0);
            assert_eq!(v.free_sized(1, b, 8192), Ok(8192));
        }
        v.drain();
        v.check().unwrap();
        assert_eq!(v.with_allocator(|va| va.stats().free_blocks), 1);
    });
}
