//! `cargo bench -p mmkit-vm`: the real-memory paths, one operation pair per
//! iteration, lazy (the kernel since 2008) against eager unmapping (before).

use criterion::{criterion_group, criterion_main, Criterion};
#[cfg(target_os = "linux")]
use mmkit_vm::{Vm, VmConfig};

#[cfg(target_os = "linux")]
fn vm(lazy_unmap: bool) -> Vm {
    Vm::new(VmConfig {
        lazy_unmap,
        ..VmConfig::default()
    })
    .expect("vm")
}

#[cfg(target_os = "linux")]
fn touch(addr: u64, pages: u64) {
    for p in 0..pages {
        // SAFETY: `addr` starts a live mapping of `pages` pages.
        unsafe { ((addr + p * 4096) as *mut u8).write_volatile(1) };
    }
}

#[cfg(target_os = "linux")]
fn map_ram(c: &mut Criterion) {
    let mut g = c.benchmark_group("vm_map_ram 4 pages + touch + unmap");
    for (name, lazy) in [("per-CPU blocks, lazy", true), ("area, eager", false)] {
        let vm = vm(lazy);
        let pfn = vm.alloc_pages(2).expect("frames");
        let pfns: Vec<u64> = (pfn..pfn + 4).collect();
        g.bench_function(name, |b| {
            b.iter(|| {
                let a = vm.vm_map_ram(&pfns).expect("map");
                touch(a, 4);
                vm.vm_unmap_ram(a, 4).expect("unmap");
            })
        });
    }
    g.finish();
}

#[cfg(target_os = "linux")]
fn vmalloc(c: &mut Criterion) {
    let mut g = c.benchmark_group("vmalloc + touch + vfree");
    for pages in [16u64, 256] {
        for (name, lazy) in [("lazy", true), ("eager", false)] {
            let vm = vm(lazy);
            g.bench_function(format!("{pages} pages, {name}"), |b| {
                b.iter(|| {
                    let a = vm.vmalloc(pages * 4096).expect("vmalloc");
                    touch(a, pages);
                    vm.vfree(a).expect("vfree");
                })
            });
        }
    }
    g.finish();
}

#[cfg(target_os = "linux")]
criterion_group!(benches, map_ram, vmalloc);
#[cfg(not(target_os = "linux"))]
fn unsupported(_: &mut Criterion) {}
#[cfg(not(target_os = "linux"))]
criterion_group!(benches, unsupported);
criterion_main!(benches);
