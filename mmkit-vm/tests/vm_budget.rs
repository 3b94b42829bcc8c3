//! The mapping budget: requests that would need more mappings (VMAs) than
//! the `Vm` may hold are refused with `MapLimit` before any `mmap`, purge
//! and retry first, and nothing stays mapped that the records do not
//! explain (`check_mappings` reads `/proc/self/maps`).
#![cfg(target_os = "linux")]

use mmkit_vm::{VBuf, Vm, VmConfig, VmError};

const PAGE: u64 = 4096;

fn vm(cfg: VmConfig) -> Vm {
    Vm::new(cfg).unwrap()
}

/// Both checkers: the records among themselves and against the kernel.
fn checked(vm: &Vm) {
    vm.check().unwrap();
    vm.check_mappings().unwrap();
}

/// Nothing mapped, lazy, stuck or charged; every frame back in the buddy.
fn assert_empty(vm: &Vm) {
    checked(vm);
    let s = vm.stats();
    assert_eq!(
        (s.space.live_areas, s.space.lazy_areas, s.space.stuck_ranges),
        (0, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.space.maps_charged, 0, "{s:?}");
    assert_eq!(s.phys.free_pages * PAGE, s.phys.grown_bytes, "{s:?}");
}

/// One frame mapped 100,000 times is 100,000 runs: refused before the
/// first `mmap`, and the frame is free to reuse.
#[test]
fn vmap_of_one_frame_many_times_is_refused_before_any_mmap() {
    let vm = vm(VmConfig {
        virt_size: 4 << 30,
        phys_limit: 16 << 20,
        ..VmConfig::default()
    });
    let p = vm.alloc_pages(0).unwrap();
    let budget = vm.stats().space.map_budget;
    assert!(
        budget < 200_000,
        "the default budget is below the kernel's limit"
    );
    let err = vm.vmap(&vec![p; 100_000]).unwrap_err();
    assert_eq!(err, VmError::MapLimit { limit: budget });
    let s = vm.stats().space;
    assert_eq!((s.map_calls, s.maps_charged, s.live_areas), (0, 0, 0));
    checked(&vm);
    vm.free_pages(p, 0).unwrap();
    // The frame goes to a new buffer and shows nowhere else.
    let mut buf = VBuf::new(&vm, 4096).unwrap();
    buf.fill(0x5a);
    checked(&vm);
    drop(buf);
    vm.purge();
    assert_empty(&vm);
}

/// A small budget: 400 runs fit (800 mappings + the headroom), 500 do not.
#[test]
fn a_lowered_budget_counts_runs() {
    let vm = vm(VmConfig {
        virt_size: 1 << 30,
        phys_limit: 16 << 20,
        max_maps: 1000,
        ..VmConfig::default()
    });
    let p = vm.alloc_pages(1).unwrap();
    // Two consecutive frames are one run, whatever their count.
    let a = vm.vmap(&[p, p + 1]).unwrap();
    assert_eq!(vm.stats().space.maps_charged, 2);
    vm.vunmap(a).unwrap();
    let b = vm.vmap(&vec![p; 400]).unwrap();
    assert_eq!(vm.stats().space.maps_charged, 800 + 2, "b and the lazy a");
    checked(&vm);
    assert_eq!(
        vm.vmap(&vec![p + 1; 100]).unwrap_err(),
        VmError::MapLimit { limit: 1000 }
    );
    assert_eq!(vm.stats().space.lazy_areas, 0, "the refusal purged");
    vm.vunmap(b).unwrap();
    let c = vm.vmap(&vec![p + 1; 450]).unwrap(); // purges b, then fits
    vm.vunmap(c).unwrap();
    vm.free_pages(p, 1).unwrap();
    vm.purge();
    assert_empty(&vm);
    assert!(matches!(
        Vm::new(VmConfig {
            max_maps: 10,
            ..VmConfig::default()
        }),
        Err(VmError::Invalid(_))
    ));
}

/// Fragmented frames: every other one of 150,000 frames is free, so a
/// 300 MiB vmalloc would need one `mmap` per frame, more than the budget.
/// Refused whole, frames and addresses given back.
#[test]
fn a_vmalloc_over_fragmented_frames_is_refused_whole() {
    let vm = vm(VmConfig {
        virt_size: 4 << 30,
        phys_limit: 640 << 20,
        ..VmConfig::default()
    });
    let frames: Vec<u64> = (0..150_000).map(|_| vm.alloc_pages(0).unwrap()).collect();
    for &p in frames.iter().step_by(2) {
        vm.free_pages(p, 0).unwrap();
    }
    let before = vm.stats();
    let err = vm.vmalloc(300 << 20).unwrap_err();
    assert!(matches!(err, VmError::MapLimit { .. }), "{err:?}");
    let after = vm.stats();
    assert_eq!(after.space.map_calls, 0);
    let in_use = |s: &mmkit_vm::VmStats| s.phys.grown_bytes / PAGE - s.phys.free_pages;
    assert_eq!(in_use(&after), in_use(&before), "the frames went back");
    checked(&vm);
    // Unfragmented, the same request is a few runs.
    for &p in frames.iter().skip(1).step_by(2) {
        vm.free_pages(p, 0).unwrap();
    }
    let a = vm.vmalloc(300 << 20).unwrap();
    assert!(vm.stats().space.map_calls < 400, "{:?}", vm.stats().space);
    checked(&vm);
    vm.vfree(a).unwrap();
    vm.purge();
    assert_empty(&vm);
}

/// Lazily freed areas hold their mappings: with a huge `lazy_max` the
/// budget, not the byte threshold, triggers the purge, and vmalloc never
/// fails with nothing live. The purge needs no memory of its own.
fn churn_under_the_budget(max_maps: u64, rounds: u64) {
    let vm = vm(VmConfig {
        virt_size: 4 << 30,
        phys_limit: 256 << 20,
        lazy_max: 1 << 30,
        max_maps,
        ..VmConfig::default()
    });
    for _ in 0..rounds {
        let a = vm.vmalloc(4096).unwrap();
        vm.vfree(a).unwrap();
    }
    let s = vm.stats().space;
    assert!(s.purges > 0, "{s:?}");
    assert!(s.maps_charged + 64 <= s.map_budget, "{s:?}");
    checked(&vm);
    vm.purge();
    assert_empty(&vm);
}

#[test]
fn lazy_areas_purge_at_a_lowered_budget() {
    churn_under_the_budget(2000, 5000);
}

/// The same at the default budget (from `max_map_count`): more lazy areas
/// than fit.
#[test]
fn lazy_areas_purge_at_the_default_budget() {
    let cfg = VmConfig {
        virt_size: 1 << 30, // valgrind cannot reserve the default 64 GiB
        ..VmConfig::default()
    };
    let budget = Vm::new(cfg).unwrap().stats().space.map_budget;
    churn_under_the_budget(0, budget / 2 + 1000);
}

/// Live one-page areas fill the budget; freeing a few makes room at once
/// (the refusal purges and retries), no explicit purge needed.
#[test]
fn freeing_a_few_areas_makes_room_at_the_budget() {
    let vm = vm(VmConfig {
        virt_size: 1 << 30,
        phys_limit: 64 << 20,
        lazy_max: 1 << 30,
        max_maps: 300,
        ..VmConfig::default()
    });
    let mut live = Vec::new();
    let err = loop {
        match vm.vmalloc(PAGE) {
            Ok(a) => live.push(a),
            Err(e) => break e,
        }
    };
    assert_eq!(err, VmError::MapLimit { limit: 300 });
    assert_eq!(live.len() as u64, (300 - 64) / 2);
    checked(&vm);
    let freed = live.len() * 3 / 100 + 1;
    for a in live.drain(..freed) {
        vm.vfree(a).unwrap();
    }
    for _ in 0..freed {
        live.push(vm.vmalloc(PAGE).unwrap());
    }
    assert!(vm.vmalloc(PAGE).is_err());
    checked(&vm);
    for a in live {
        vm.vfree(a).unwrap();
    }
    vm.purge();
    assert_empty(&vm);
}

/// vm_map_ram charges its runs too, and a refusal flushes the stale
/// mappings of the blocks (`vm_unmap_aliases`) before it retries.
#[test]
fn vm_map_ram_is_budgeted() {
    let vm = vm(VmConfig {
        virt_size: 1 << 30,
        phys_limit: 64 << 20,
        cpus: 1,
        max_maps: 64 + 14 + 1,
        ..VmConfig::default()
    });
    let p = vm.alloc_pages(3).unwrap();
    // p, p + 5, p + 2: three runs.
    let a = vm.vm_map_ram(&[p, p + 5, p + 2]).unwrap();
    assert_eq!(vm.stats().space.maps_charged, 6);
    let b = vm.vm_map_ram(&[p + 1, p + 3, p + 5, p + 7]).unwrap();
    checked(&vm);
    assert_eq!(
        vm.vm_map_ram(&[p]).unwrap_err(),
        VmError::MapLimit { limit: 79 }
    );
    vm.vm_unmap_ram(b, 4).unwrap(); // stale: still mapped and charged
    assert_eq!(vm.stats().space.maps_charged, 14);
    let c = vm.vm_map_ram(&[p]).unwrap(); // flushes b, then fits
    assert_eq!(vm.stats().space.maps_charged, 8);
    checked(&vm);
    vm.vm_unmap_ram(a, 3).unwrap();
    vm.vm_unmap_ram(c, 1).unwrap();
    vm.vm_unmap_aliases();
    vm.free_pages(p, 3).unwrap();
    vm.purge();
    assert_empty(&vm);
}

/// Growing in place and moving are budgeted; a move's copied bytes are
/// counted (none: the frames are mapped again, not copied).
#[test]
fn vrealloc_is_budgeted_and_copies_nothing() {
    let vm = vm(VmConfig {
        virt_size: 1 << 30,
        phys_limit: 64 << 20,
        ..VmConfig::default()
    });
    let a = vm.vmalloc(PAGE).unwrap();
    let wall = vm.vmalloc(PAGE).unwrap(); // a cannot grow in place
                                          // SAFETY: `a` is a live one-page area of this test.
    unsafe { (a as *mut u8).write(7) };
    let b = vm.vrealloc(a, 1 << 20).unwrap();
    assert_ne!(a, b);
    // SAFETY: `b` is the live, moved area, 1 MiB long.
    assert_eq!(unsafe { (b as *const u8).read() }, 7);
    let s = vm.stats().space;
    assert_eq!((s.realloc_moved, s.realloc_copied_bytes), (1, 0));
    assert_eq!(s.remapped_pages, 1);
    checked(&vm);
    vm.vfree(b).unwrap();
    vm.vfree(wall).unwrap();
    vm.purge();
    assert_empty(&vm);
}
