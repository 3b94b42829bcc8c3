//! `benches/vm.rs`'s pairs in a plain loop, for instruction counts
//! (callgrind counts the user-space work that criterion's times, on a
//! loaded machine, cannot separate from the system calls and faults):
//!
//! ```text
//! cargo build --release -p mmkit-vm --example vm_pairs
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/vm_pairs ram|v16|v256 lazy|eager N
//! ```
//!
//! `ram`: `vm_map_ram` of 4 pages, a write to each, `vm_unmap_ram`;
//! `v16`/`v256`: `vmalloc` of 16 or 256 pages, a write to each, `vfree`.
//! Two runs at N and 2N give one pair's count as their difference over N.
//! The space is 4 GiB: valgrind cannot reserve the default 64 GiB.

#[cfg(target_os = "linux")]
fn main() {
    use mmkit_vm::{Vm, VmConfig};
    let usage = "usage: vm_pairs ram|v16|v256 lazy|eager N";
    let args: Vec<String> = std::env::args().collect();
    let lazy_unmap = match args.get(2).map(String::as_str) {
        Some("lazy") => true,
        Some("eager") => false,
        _ => panic!("{usage}"),
    };
    let n: u64 = args.get(3).and_then(|n| n.parse().ok()).expect(usage);
    let vm = Vm::new(VmConfig {
        lazy_unmap,
        virt_size: 1 << 32,
        ..VmConfig::default()
    })
    .expect("vm");
    let touch = |addr: u64, pages: u64| {
        for p in 0..pages {
            // SAFETY: `addr` starts a live mapping of `pages` pages.
            unsafe { ((addr + p * 4096) as *mut u8).write_volatile(1) };
        }
    };
    let pfn = vm.alloc_pages(2).expect("frames");
    let pfns: Vec<u64> = (pfn..pfn + 4).collect();
    let pages = match args.get(1).map(String::as_str) {
        Some("ram") => 0,
        Some("v16") => 16,
        Some("v256") => 256,
        _ => panic!("{usage}"),
    };
    for _ in 0..n {
        if pages == 0 {
            let a = vm.vm_map_ram(&pfns).expect("map");
            touch(a, 4);
            vm.vm_unmap_ram(a, 4).expect("unmap");
        } else {
            let a = vm.vmalloc(pages * 4096).expect("vmalloc");
            touch(a, pages);
            vm.vfree(a).expect("vfree");
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {}
