//! loom model checks of mmkit-vm's purge and frame bookkeeping. Under
//! `--cfg loom` the crate's locks and atomics are loom's (`src/sync.rs`),
//! so the real code runs, real mappings included, under every interleaving
//! loom explores (bounded by `LOOM_MAX_PREEMPTIONS`):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release -p mmkit-vm --test loom
//! ```
//!
//! Covered:
//! - an allocation that finds no space while another thread's purge is in
//!   flight: its own purge-and-retry must see the space that purge frees;
//! - two lazy frees racing, each able to start the threshold purge, against
//!   an explicit purge: every area is unmapped once, nothing is left lazy;
//! - `vm_map_ram`/`vm_unmap_ram` racing `vm_unmap_aliases`: no slot is
//!   unmapped twice, the block records and map counts agree afterwards;
//! - a frame freed while a lazily unmapped mapping still shows it, racing
//!   the purge that drops that mapping: the frame reaches the buddy exactly
//!   once, after its map count falls to 0;
//! - `vm_map_ram` and `vmap` of a frame racing `free_pages` of it: either
//!   the mapping is made and the free deferred until it goes, or the free
//!   comes first and the mapping is refused; never a free frame mapped.
//!
//! `Vm::check` runs after every schedule, and the final stats are compared.
#![cfg(all(loom, target_os = "linux"))]

use loom::thread;
use mmkit_vm::{Vm, VmConfig};

const PAGE: u64 = 4096;

/// loom's defaults, with room for `Vm::check`, which reads every frame's
/// map count and owner (two atomics per frame, each a loom branch), and a
/// preemption bound (`LOOM_MAX_PREEMPTIONS` overrides it) that keeps the
/// run to seconds.
/// Fails unless loom explored more than one schedule (one would mean the
/// threads never met at a lock or an atomic).
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let mut b = loom::model::Builder::new();
    b.max_branches = 200_000;
    b.preemption_bound = b.preemption_bound.or(Some(8));
    // Per call, not a static: the tests run in parallel.
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    b.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f();
    });
    let runs = runs.load(Ordering::Relaxed);
    eprintln!("{name}: {runs} schedules");
    assert!(runs > 1, "{name}: loom explored one schedule only");
}

/// A small Vm: `blocks` 64 KiB blocks of space (16 pages each, so one
/// 15-page area plus its guard fills one), one pageblock of memory, one
/// CPU queue.
fn tiny_vm(blocks: u64, lazy_max: u64) -> Vm {
    Vm::new(VmConfig {
        virt_size: blocks * 16 * PAGE,
        phys_limit: 2 << 20,
        lazy_max,
        lazy_unmap: true,
        cpus: 1,
        vblock: mmkit::vblock::Config {
            page_size: PAGE,
            max_alloc: 4,
            bits: 16,
        },
        max_maps: 1 << 20,
    })
    .unwrap()
}

/// Nothing live, nothing lazy, every grown frame back in the buddy.
fn assert_empty(vm: &Vm) {
    vm.check().unwrap();
    let s = vm.stats();
    assert_eq!(s.space.live_areas + s.space.lazy_areas, 0);
    assert_eq!(s.phys.deferred_blocks, 0);
    assert_eq!(s.phys.free_pages * PAGE, s.phys.grown_bytes);
}

#[test]
fn alloc_retry_sees_the_space_a_purge_in_flight_frees() {
    model("alloc_retry_sees_the_space_a_purge_in_flight_frees", || {
        let vm = tiny_vm(1, u64::MAX);
        let a = vm.vmalloc(15 * PAGE).unwrap();
        vm.vfree(a).unwrap(); // lazy: the space is full until a purge
        let t = {
            let vm = vm.clone();
            thread::spawn(move || vm.purge())
        };
        // Whether this finds the space free, starts the purge itself, or
        // waits for the other thread's, it must succeed.
        let b = vm.vmalloc(15 * PAGE).unwrap();
        t.join().unwrap();
        vm.vfree(b).unwrap();
        vm.purge();
        assert_empty(&vm);
    });
}

#[test]
fn lazy_frees_race_the_threshold_and_an_explicit_purge() {
    model(
        "lazy_frees_race_the_threshold_and_an_explicit_purge",
        || {
            // Each free alone crosses the threshold: either thread may purge.
            let vm = tiny_vm(1, PAGE);
            let a = vm.vmalloc(2 * PAGE).unwrap();
            let b = vm.vmalloc(2 * PAGE).unwrap();
            let t = {
                let vm = vm.clone();
                thread::spawn(move || vm.vfree(a).unwrap())
            };
            vm.vfree(b).unwrap();
            vm.purge();
            t.join().unwrap();
            vm.purge();
            assert_empty(&vm);
            let s = vm.stats().space;
            assert_eq!(s.purged_areas, 2, "each area unmapped exactly once");
        },
    );
}

#[test]
fn map_ram_races_unmap_aliases() {
    model("map_ram_races_unmap_aliases", || {
        // Two blocks of space: when unmap_aliases releases the first block
        // (nothing live in it) while the other thread maps, that thread
        // needs room for a new block before the released one is purged.
        let vm = tiny_vm(2, u64::MAX);
        let pfn = vm.alloc_pages(1).unwrap();
        let held = vm.vm_map_ram(&[pfn]).unwrap();
        let t = {
            let vm = vm.clone();
            thread::spawn(move || {
                let a = vm.vm_map_ram(&[pfn + 1]).unwrap();
                vm.vm_unmap_ram(a, 1).unwrap();
            })
        };
        vm.vm_unmap_ram(held, 1).unwrap();
        vm.vm_unmap_aliases();
        t.join().unwrap();
        vm.check().unwrap();
        vm.vm_unmap_aliases();
        vm.free_pages(pfn, 1).unwrap();
        vm.purge();
        assert_empty(&vm);
    });
}

#[test]
fn a_frame_freed_under_a_stale_mapping_reaches_the_buddy_once() {
    model(
        "a_frame_freed_under_a_stale_mapping_reaches_the_buddy_once",
        || {
            let vm = tiny_vm(1, u64::MAX);
            let pfn = vm.alloc_pages(0).unwrap();
            let a = vm.vmap(&[pfn]).unwrap();
            vm.vunmap(a).unwrap(); // lazy: the frame is still mapped at `a`
            let t = {
                let vm = vm.clone();
                thread::spawn(move || vm.free_pages(pfn, 0).unwrap())
            };
            vm.purge();
            t.join().unwrap();
            vm.purge();
            assert!(vm.free_pages(pfn, 0).is_err(), "freed twice");
            assert_empty(&vm);
        },
    );
}

/// `map` of the frame `p` racing `free_pages(p, 0)`; `vmap` says which
/// call unmaps.
fn map_races_free(name: &str, map: fn(&Vm, u64) -> Result<u64, mmkit_vm::VmError>, vmap: bool) {
    model(name, move || {
        let vm = tiny_vm(2, u64::MAX);
        let p = vm.alloc_pages(0).unwrap();
        let t = {
            let vm = vm.clone();
            thread::spawn(move || vm.free_pages(p, 0).unwrap())
        };
        let mapped = map(&vm, p);
        t.join().unwrap();
        vm.check().unwrap();
        match mapped {
            Ok(a) => {
                assert_eq!(vm.stats().phys.deferred_blocks, 1, "freed under the map");
                match vmap {
                    true => vm.vunmap(a).unwrap(),
                    false => vm.vm_unmap_ram(a, 1).unwrap(),
                }
            }
            Err(e) => assert_eq!(e, mmkit_vm::VmError::BadFrame { pfn: p }),
        }
        vm.vm_unmap_aliases();
        assert_empty(&vm);
    });
}

#[test]
fn vm_map_ram_races_free_pages() {
    map_races_free(
        "vm_map_ram_races_free_pages",
        |vm, p| vm.vm_map_ram(&[p]),
        false,
    );
}

#[test]
fn vmap_races_free_pages() {
    map_races_free("vmap_races_free_pages", |vm, p| vm.vmap(&[p]), true);
}
