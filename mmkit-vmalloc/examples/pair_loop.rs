//! The layer's pairs in a plain loop, for instruction counts (callgrind
//! counts what criterion cannot on a loaded machine):
//!
//! ```text
//! cargo build --release -p mmkit-vmalloc --example pair_loop
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/pair_loop v1|v16|ram N
//! ```
//!
//! `v1`/`v16`: `vmalloc` and `vfree` of 1 or 16 pages; `ram`: `vm_map_ram`
//! and `vm_unmap_ram` of 4 pages. Two runs at N and 2N give the count of
//! one pair as their difference over N.

mod host;

use host::{Stack, Table};
use mmkit_vmalloc::PAGE;

#[inline(never)]
fn vmalloc_pairs(pages: u64, n: u64) {
    let mut v = host::layer();
    let (mut mmu, mut src) = (Table::default(), Stack((0..4096).collect()));
    for _ in 0..n {
        let va = v.vmalloc(&mut mmu, &mut src, pages * PAGE).unwrap();
        v.vfree(&mut mmu, &mut src, va).unwrap();
        std::hint::black_box(va);
    }
}

#[inline(never)]
fn ram_pairs(n: u64) {
    let ram = host::map_ram();
    let (mut mmu, mut src) = (Table::default(), Stack(Vec::new()));
    let pfns = [1, 2, 3, 4];
    for _ in 0..n {
        let va = ram.map(&mut mmu, &mut src, 0, &pfns).unwrap();
        ram.unmap(&mut mmu, &mut src, 0, va, 4).unwrap();
        std::hint::black_box(va);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: pair_loop v1|v16|ram N";
    let n: u64 = args.get(2).and_then(|n| n.parse().ok()).expect(usage);
    match args.get(1).map(String::as_str) {
        Some("v1") => vmalloc_pairs(1, n),
        Some("v16") => vmalloc_pairs(16, n),
        Some("ram") => ram_pairs(n),
        _ => panic!("{usage}"),
    }
}
