//! Bad input gets a typed error and changes nothing: the stats compare equal
//! and `check()` passes after every rejected call.
#![cfg(target_os = "linux")]

use mmkit_vm::{VBuf, Vm, VmConfig, VmError};

const PAGE: u64 = 4096;

fn vm(phys_limit: u64) -> Vm {
    Vm::new(VmConfig {
        virt_size: 1 << 30,
        phys_limit,
        ..VmConfig::default()
    })
    .unwrap()
}

/// The state, less the vmap allocator's count of purge attempts (a
/// request that finds no space tries a purge even when nothing is lazy).
fn state(vm: &Vm) -> mmkit_vm::VmStats {
    let mut s = vm.stats();
    s.vmap.purges = 0;
    s
}

/// Asserts that `f` fails with `want` and leaves `vm` as it was.
fn rejects<T: std::fmt::Debug>(vm: &Vm, want: VmError, f: impl FnOnce() -> Result<T, VmError>) {
    let before = state(vm);
    assert_eq!(f().unwrap_err(), want);
    assert_eq!(state(vm), before, "a rejected call changed the state");
    vm.check().unwrap();
}

#[test]
fn bad_sizes_and_addresses() {
    let vm = vm(64 << 20);
    let a = vm.vmalloc(3 * PAGE).unwrap();
    let (lo, hi) = vm.virt_range();
    rejects(&vm, VmError::Invalid("size 0"), || vm.vmalloc(0));
    rejects(&vm, VmError::Invalid("size overflows"), || {
        vm.vmalloc(u64::MAX)
    });
    rejects(&vm, VmError::Invalid("size overflows"), || {
        vm.vmalloc(u64::MAX - PAGE)
    });
    // Frames come before the address space (the driver's order): a request
    // larger than both finds the memory limit first (the memory file grew
    // to it, every frame is free again) ...
    let other = self::vm(64 << 20);
    let e = other.vmalloc(1 << 30).unwrap_err();
    assert_eq!(e, VmError::LimitReached { limit: 64 << 20 });
    let p = other.stats().phys;
    assert_eq!(p.free_pages * PAGE, p.grown_bytes);
    other.check().unwrap();
    // ... and one whose frames are at hand finds no space.
    let p = vm.alloc_pages(0).unwrap();
    rejects(
        &vm,
        VmError::NoVirtualSpace {
            size: (1 << 30) + PAGE,
        },
        || vm.vmap(&vec![p; 1 << 18]),
    );
    assert_eq!(a, lo, "the lowest fit");
    for bad in [0, 1, a + 1, a + PAGE, a + 4 * PAGE, hi, hi - 1, u64::MAX] {
        rejects(&vm, VmError::NotAllocated { addr: bad }, || vm.vfree(bad));
        rejects(&vm, VmError::NotAllocated { addr: bad }, || {
            vm.vrealloc(bad, PAGE)
        });
        rejects(&vm, VmError::NotAllocated { addr: bad }, || vm.vunmap(bad));
    }
    rejects(&vm, VmError::Invalid("size 0"), || vm.vrealloc(a, 0));
    rejects(&vm, VmError::Invalid("size overflows"), || {
        vm.vrealloc(a, u64::MAX)
    });
    // A vmalloc area is not a vmap area, and the other way round.
    rejects(&vm, VmError::NotAllocated { addr: a }, || vm.vunmap(a));
    rejects(&vm, VmError::NotAllocated { addr: a }, || {
        vm.vm_unmap_ram(a, 3)
    });
    vm.vfree(a).unwrap();
    rejects(&vm, VmError::NotAllocated { addr: a }, || vm.vfree(a));
    vm.free_pages(p, 0).unwrap();
}

#[test]
fn bad_frames() {
    let vm = vm(64 << 20);
    let pfn = vm.alloc_pages(1).unwrap();
    let area = vm.vmalloc(PAGE).unwrap();
    rejects(&vm, VmError::Invalid("empty frame list"), || {
        vm.vm_map_ram(&[])
    });
    rejects(&vm, VmError::Invalid("empty frame list"), || vm.vmap(&[]));
    // Frames that were never handed out, beyond the limit, or belong to an
    // area: none may be mapped by the caller.
    for bad in [pfn + 2, 1 << 40, u64::MAX] {
        rejects(&vm, VmError::BadFrame { pfn: bad }, || {
            vm.vm_map_ram(&[pfn, bad])
        });
        rejects(&vm, VmError::BadFrame { pfn: bad }, || vm.vmap(&[bad]));
    }
    rejects(
        &vm,
        VmError::Invalid("order above the buddy's max_order"),
        || vm.alloc_pages(11),
    );
    rejects(&vm, VmError::NotAllocated { addr: pfn }, || {
        vm.free_pages(pfn, 0)
    });
    rejects(&vm, VmError::NotAllocated { addr: pfn + 1 }, || {
        vm.free_pages(pfn + 1, 1)
    });
    rejects(&vm, VmError::NotAllocated { addr: u64::MAX }, || {
        vm.free_pages(u64::MAX, 0)
    });
    let m = vm.vm_map_ram(&[pfn, pfn + 1]).unwrap();
    for (addr, pages) in [(m, 1), (m, 3), (m + PAGE, 1), (m + 1, 2)] {
        rejects(&vm, VmError::NotAllocated { addr }, || {
            vm.vm_unmap_ram(addr, pages)
        });
    }
    rejects(&vm, VmError::Invalid("0 pages"), || vm.vm_unmap_ram(m, 0));
    rejects(&vm, VmError::NotAllocated { addr: m }, || {
        vm.vm_unmap_ram(m, u64::MAX)
    });
    vm.vm_unmap_ram(m, 2).unwrap();
    rejects(&vm, VmError::NotAllocated { addr: m }, || {
        vm.vm_unmap_ram(m, 2)
    });
    // Freed while a stale mapping shows them: deferred, then released.
    vm.free_pages(pfn, 1).unwrap();
    assert_eq!(vm.stats().phys.deferred_blocks, 1);
    rejects(&vm, VmError::NotAllocated { addr: pfn }, || {
        vm.free_pages(pfn, 1)
    });
    vm.vm_unmap_aliases();
    assert_eq!(vm.stats().phys.deferred_blocks, 0);
    vm.vfree(area).unwrap();
    vm.check().unwrap();
}

#[test]
fn handles_own_their_areas() {
    let vm = vm(64 << 20);
    let buf = VBuf::new(&vm, 5000).unwrap();
    let a = buf.addr();
    rejects(&vm, VmError::OwnedByHandle { addr: a }, || vm.vfree(a));
    rejects(&vm, VmError::OwnedByHandle { addr: a }, || {
        vm.vrealloc(a, 1 << 20)
    });
    drop(buf);
    rejects(&vm, VmError::NotAllocated { addr: a }, || vm.vfree(a));
}

#[test]
fn bad_configurations() {
    let bad = |cfg: VmConfig| Vm::new(cfg).unwrap_err();
    let d = VmConfig::default();
    assert!(matches!(
        bad(VmConfig { virt_size: 0, ..d }),
        VmError::Invalid(_)
    ));
    assert!(matches!(
        bad(VmConfig {
            virt_size: 12345,
            ..d
        }),
        VmError::Invalid(_)
    ));
    assert!(matches!(
        bad(VmConfig {
            phys_limit: PAGE,
            ..d
        }),
        VmError::Invalid(_)
    ));
    assert!(matches!(
        bad(VmConfig {
            phys_limit: u64::MAX,
            ..d
        }),
        VmError::Invalid(_)
    ));
    assert!(matches!(
        bad(VmConfig {
            cpus: usize::MAX,
            ..d
        }),
        VmError::Invalid(_)
    ));
    let vb = mmkit::vblock::Config {
        page_size: 8192,
        ..d.vblock
    };
    assert!(matches!(
        bad(VmConfig { vblock: vb, ..d }),
        VmError::Invalid(_)
    ));
    let vb = mmkit::vblock::Config {
        max_alloc: u64::MAX,
        ..d.vblock
    };
    assert!(matches!(
        bad(VmConfig { vblock: vb, ..d }),
        VmError::Invalid(_)
    ));
    // An address space larger than the machine can reserve.
    assert!(matches!(
        bad(VmConfig {
            virt_size: 1 << 62,
            ..d
        }),
        VmError::Os { .. }
    ));
}

#[test]
fn the_limit_is_reached_then_a_purge_frees_it() {
    let vm = vm(4 << 20); // two pageblocks
    let a = vm.vmalloc(3 << 20).unwrap();
    rejects(&vm, VmError::LimitReached { limit: 4 << 20 }, || {
        vm.vmalloc(2 << 20)
    });
    vm.vfree(a).unwrap(); // lazy: frames still held
    assert_eq!(vm.stats().space.lazy_areas, 1);
    // The failing allocation purges and retries, and then succeeds.
    let b = vm.vmalloc(4 << 20).unwrap();
    let s = vm.stats();
    assert_eq!((s.space.lazy_areas, s.space.purges), (0, 1));
    vm.vfree(b).unwrap();
    vm.check().unwrap();
}

#[test]
fn lazy_max_batches_unmapping() {
    let vm = vm(64 << 20);
    vm.set_lazy_max(64 * PAGE);
    let areas: Vec<u64> = (0..40).map(|_| vm.vmalloc(PAGE).unwrap()).collect();
    for &a in &areas {
        vm.vfree(a).unwrap();
    }
    let s = vm.stats().space;
    // 40 areas of 2 pages (guard included) = 80 pages: one purge when the
    // lazy bytes passed 64 pages, adjacent areas unmapped in one call.
    assert_eq!((s.purges, s.unmap_calls), (1, 1), "{s:?}");
    assert_eq!(s.lazy_areas, 40 - s.purged_areas);
    assert!(vm.purge());
    assert!(!vm.purge(), "nothing left to purge");
    vm.check().unwrap();
}

/// The purge's one flush over the lazy list's span unmaps the freed areas,
/// one call per run of adjacent ones, and leaves a live area inside the
/// span mapped and readable.
#[test]
fn a_purge_unmaps_runs_of_freed_areas_around_a_live_one() {
    let vm = vm(64 << 20);
    let a: Vec<u64> = (0..5).map(|_| vm.vmalloc(PAGE).unwrap()).collect();
    assert!(a.windows(2).all(|w| w[1] == w[0] + 2 * PAGE), "{a:x?}");
    // SAFETY: the area is live and a page long.
    unsafe { (a[2] as *mut u8).write(9) };
    for i in [0, 1, 3, 4] {
        vm.vfree(a[i]).unwrap();
    }
    assert!(vm.purge());
    let s = vm.stats().space;
    assert_eq!(
        (s.purges, s.unmap_calls, s.purged_areas),
        (1, 2, 4),
        "{s:?}"
    );
    // SAFETY: still live.
    assert_eq!(unsafe { (a[2] as *const u8).read() }, 9);
    vm.check().unwrap();
    vm.check_mappings().unwrap();
}
