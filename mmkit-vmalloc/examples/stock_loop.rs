//! One `test_vmalloc` test on the host layer at the sizes asked, for
//! instruction counts by function (what a kernel boot's phase counters
//! cannot split):
//!
//! ```text
//! cargo build --release -p mmkit-vmalloc --example stock_loop
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!     target/release/examples/stock_loop full_fit_alloc_test 8192 15000 20
//! callgrind_annotate --inclusive=yes cg.out
//! ```
//!
//! Arguments: the test's kernel name, full-fit pairs, busy-list areas and
//! loops (Linux's stock sizes at 1 CPU: 8192, 15000, 20).

// The layer's helpers this example does not use (the `vm_map_ram` ones).
#[allow(dead_code)]
mod host;

use core::cell::RefCell;

use host::{Stack, Table};
use mmkit::vmap::VmapAllocator;
use mmkit_vmalloc::test_vmalloc::{Params, Rng, TestCase, TestVmalloc, Workload};
use mmkit_vmalloc::{Vmalloc, PAGE};

/// The host layer with its table and frames.
struct Host(RefCell<(Vmalloc<VmapAllocator>, Table, Stack)>);

impl TestVmalloc for Host {
    fn vmalloc(&self, pages: u64, align: u64) -> Option<u64> {
        let (v, mmu, src) = &mut *self.0.borrow_mut();
        v.vmalloc_aligned(mmu, src, pages * PAGE, align.max(PAGE))
            .ok()
    }

    fn vfree(&self, va: u64) {
        let (v, mmu, src) = &mut *self.0.borrow_mut();
        // Only areas the test allocated are freed.
        let _ = v.vfree(mmu, src, va);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: stock_loop TEST FULL_FIT BUSY LOOPS";
    let test = args.get(1).and_then(|n| TestCase::by_name(n)).expect(usage);
    let num = |i: usize| -> u64 { args.get(i).and_then(|n| n.parse().ok()).expect(usage) };
    let p = Params {
        full_fit: num(2) as usize,
        busy_list: num(3) as usize,
        loops: num(4),
    };
    let frames = (p.full_fit * 2 + p.busy_list + 4096) as u64;
    let host = Host(RefCell::new((
        host::layer(),
        Table::default(),
        Stack((0..frames).collect()),
    )));
    let w = Workload { va: &host, p };
    assert!(
        w.run(test, &mut Rng::for_worker(0)),
        "{} failed",
        test.name()
    );
}
