//! Several threads vmalloc, vm_map_ram, write, verify and free at once,
//! each tracking what it owns; nothing may overlap or lose a byte.
#![cfg(target_os = "linux")]

use mmkit_vm::{VBuf, Vm, VmConfig};

const PAGE: u64 = 4096;

fn fill(addr: u64, len: u64, tag: u8) {
    // SAFETY: `[addr, addr + len)` is a live area or mapping of this thread.
    unsafe { std::ptr::write_bytes(addr as *mut u8, tag, len as usize) };
}

fn holds(addr: u64, len: u64, tag: u8) -> bool {
    // SAFETY: as in `fill`.
    let s = unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) };
    s.iter().all(|&b| b == tag)
}

/// One thread's loop: a window of live vmalloc areas and vm_map_ram
/// mappings of its own frames, each filled with the thread's tag and
/// checked before it is freed.
fn worker(vm: &Vm, tag: u8, rounds: u64) {
    let mut areas = Vec::new();
    let mut maps = Vec::new();
    let pfn = vm.alloc_pages(3).unwrap(); // 8 frames of its own
    let pfns: Vec<u64> = (pfn..pfn + 8).collect();
    let all = vm.vm_map_ram(&pfns).unwrap();
    fill(all, 8 * PAGE, tag);
    vm.vm_unmap_ram(all, 8).unwrap();
    for r in 0..rounds {
        let pages = 1 + (r * 7 + u64::from(tag)) % 12;
        let a = vm.vmalloc(pages * PAGE).unwrap();
        fill(a, pages * PAGE, tag);
        areas.push((a, pages));
        let n = 1 + (r % 8) as usize;
        let m = vm.vm_map_ram(&pfns[..n]).unwrap();
        maps.push((m, n as u64));
        assert!(
            holds(m, n as u64 * PAGE, tag),
            "frames of thread {tag} overwritten"
        );
        if areas.len() > 8 {
            let (a, pages) = areas.remove((r % 8) as usize);
            assert!(holds(a, pages * PAGE, tag), "area {a:#x} was overwritten");
            vm.vfree(a).unwrap();
        }
        if maps.len() > 4 {
            let (m, n) = maps.remove(0);
            assert!(
                holds(m, n * PAGE, tag),
                "frames of thread {tag} overwritten"
            );
            vm.vm_unmap_ram(m, n).unwrap();
        }
        if r % 64 == 0 {
            let mut b = VBuf::new(vm, (r as usize % 5 + 1) * 10_000).unwrap();
            b.fill(tag);
            b.resize(b.len() * 3).unwrap();
            assert!(b[..10_000].iter().all(|&x| x == tag));
        }
    }
    for (a, pages) in areas {
        assert!(holds(a, pages * PAGE, tag));
        vm.vfree(a).unwrap();
    }
    for (m, n) in maps {
        vm.vm_unmap_ram(m, n).unwrap();
    }
    vm.free_pages(pfn, 3).unwrap();
}

#[test]
fn threads_never_overlap() {
    let vm = Vm::new(VmConfig {
        virt_size: 4 << 30,
        phys_limit: 256 << 20,
        lazy_max: 1 << 20,
        cpus: 2,
        vblock: mmkit::vblock::Config {
            page_size: PAGE,
            max_alloc: 8,
            bits: 64,
        },
        ..VmConfig::default()
    })
    .unwrap();
    std::thread::scope(|s| {
        for tag in 1..=4u8 {
            let vm = &vm;
            s.spawn(move || worker(vm, tag, 600));
        }
    });
    vm.vm_unmap_aliases();
    vm.check().unwrap();
    let st = vm.stats();
    assert_eq!(st.phys.free_pages * PAGE, st.phys.grown_bytes, "{st:?}");
    assert!(
        st.space.purges > 0 && st.vblock.blocks_released > 0,
        "{st:?}"
    );
}

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Vm>();
    send_sync::<VBuf>();
    send_sync::<mmkit_vm::MirrorRing>();
    // 1 GiB of address space: valgrind cannot reserve the default 64 GiB.
    let vm = Vm::new(VmConfig {
        virt_size: 1 << 30,
        ..VmConfig::default()
    })
    .unwrap();
    let mut buf = VBuf::zeroed(&vm, 100_000).unwrap();
    buf[99_999] = 5;
    let buf = std::thread::spawn(move || {
        assert_eq!(buf[99_999], 5);
        buf
    })
    .join()
    .unwrap();
    drop(buf); // freed from another thread than the one that made it
    vm.purge();
    vm.check().unwrap();
}

/// `vm_map_ram` (or `vmap`) of a frame racing `free_pages` of it ends as
/// one of the two orders on one thread: mapped then freed (the free waits
/// for the mapping to go), or freed then refused (`BadFrame`). Never a free
/// frame under a live mapping.
#[test]
fn map_and_free_of_one_frame_race() {
    use std::sync::Barrier;
    let vm = Vm::new(VmConfig {
        virt_size: 1 << 30,
        phys_limit: 64 << 20,
        cpus: 2,
        ..VmConfig::default()
    })
    .unwrap();
    let rounds = 2000;
    let go = Barrier::new(2);
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let (mapped, refused) = std::thread::scope(|s| {
        let freer = s.spawn(|| {
            for p in rx {
                go.wait();
                vm.free_pages(p, 0).unwrap();
                go.wait();
            }
        });
        let (mut mapped, mut refused) = (0, 0);
        for r in 0..rounds {
            let p = vm.alloc_pages(0).unwrap();
            tx.send(p).unwrap();
            go.wait();
            let m = if r % 2 == 0 {
                vm.vm_map_ram(&[p])
            } else {
                vm.vmap(&[p])
            };
            go.wait();
            match m {
                Ok(a) => {
                    mapped += 1;
                    // Mapped first: the free was deferred until the unmap.
                    assert_eq!(vm.stats().phys.deferred_blocks, 1);
                    if r % 2 == 0 {
                        vm.vm_unmap_ram(a, 1).unwrap();
                    } else {
                        vm.vunmap(a).unwrap();
                    }
                    vm.vm_unmap_aliases();
                }
                Err(e) => {
                    assert_eq!(e, mmkit_vm::VmError::BadFrame { pfn: p });
                    refused += 1;
                }
            }
            assert_eq!(vm.stats().phys.deferred_blocks, 0);
            if r % 100 == 0 {
                vm.check().unwrap();
            }
        }
        drop(tx);
        freer.join().unwrap();
        (mapped, refused)
    });
    vm.vm_unmap_aliases();
    vm.check().unwrap();
    let st = vm.stats();
    assert_eq!(st.phys.free_pages * PAGE, st.phys.grown_bytes, "{st:?}");
    eprintln!("{mapped} mapped first, {refused} freed first");
}
