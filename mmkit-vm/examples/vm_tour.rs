//! A tour of mmkit-vm, the way a kernel-style user drives it: frames from
//! the buddy, aliases through vm_map_ram, vmalloc areas, lazy unmapping,
//! growth without copying, and a ring buffer that never wraps.
//!
//! Run: `cargo run --release -p mmkit-vm --example vm_tour`

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use mmkit_vm::{MirrorRing, VBuf, Vm, VmConfig};

    let vm = Vm::new(VmConfig {
        phys_limit: 512 << 20,
        ..VmConfig::default()
    })?;
    let (lo, hi) = vm.virt_range();
    println!("reserved {} GiB at {lo:#x}..{hi:#x}", (hi - lo) >> 30);

    // Kernel style: allocate frames, map them twice (two aliases).
    let pfn = vm.alloc_pages(2)?;
    let pfns: Vec<u64> = (pfn..pfn + 4).collect();
    let a = vm.vm_map_ram(&pfns)?;
    let b = vm.vm_map_ram(&pfns)?;
    // SAFETY: both mappings are live and 4 pages long.
    let seen = unsafe {
        (a as *mut u64).write(0x5eed);
        (b as *const u64).read()
    };
    println!("wrote through {a:#x}, read {seen:#x} through {b:#x}");
    vm.vm_unmap_ram(a, 4)?;
    vm.vm_unmap_ram(b, 4)?;
    vm.free_pages(pfn, 2)?; // still shown by stale mappings: deferred
    println!("deferred frame blocks: {}", vm.stats().phys.deferred_blocks);
    vm.vm_unmap_aliases(); // one pass unmaps the stale pages
    println!(
        "after vm_unmap_aliases: {}",
        vm.stats().phys.deferred_blocks
    );

    // vmalloc and lazy vfree: 100 areas, unmapped by purges in batches.
    let areas: Vec<u64> = (0..100)
        .map(|i| vm.vmalloc((i % 7 + 1) * 4096))
        .collect::<Result<_, _>>()?;
    for a in areas {
        vm.vfree(a)?;
    }
    vm.purge();
    let s = vm.stats().space;
    println!(
        "100 vfrees: {} unmapping calls in {} purges",
        s.unmap_calls, s.purges
    );

    // A buffer grown from 4 KiB to 64 MiB: mappings move, bytes do not.
    let mut buf = VBuf::new(&vm, 4096)?;
    buf[0] = 1;
    while buf.len() < 64 << 20 {
        buf.resize(buf.len() * 2)?;
    }
    let s = vm.stats().space;
    println!(
        "grown to {} MiB, first byte {}: {} in place, {} moved, {} pages remapped, {} bytes copied",
        buf.len() >> 20,
        buf[0],
        s.realloc_in_place,
        s.realloc_moved,
        s.remapped_pages,
        s.realloc_copied_bytes
    );
    drop(buf);

    // A ring whose frames are mapped twice: every run is one slice.
    let mut ring = MirrorRing::new(&vm, 4096)?;
    ring.push(&[7; 3000]);
    ring.consume(3000);
    ring.push(&[8; 2000]); // crosses the end of the ring
    println!("ring holds {} contiguous bytes", ring.readable().len());
    drop(ring);

    // The mapping budget: one-page areas until it refuses (each is one
    // run of frames, charged two mappings), then all freed.
    let mut live = Vec::new();
    let refused = loop {
        match vm.vmalloc(4096) {
            Ok(a) => live.push(a),
            Err(e) => break e,
        }
    };
    let s = vm.stats().space;
    println!(
        "mapping budget {}: {} live one-page areas fit, then \"{refused}\"",
        s.map_budget,
        live.len()
    );
    for a in live {
        vm.vfree(a)?;
    }

    vm.purge();
    vm.check()?;
    vm.check_mappings()?;
    println!("check passed: {:?}", vm.stats().phys);
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("mmkit-vm supports Linux only");
}
