//! `fit_pairs`' free+alloc pairs (mmkit's `examples/fit_pairs`) on the
//! bench's O(1) peers, to count their instructions per pair beside
//! mmkit's.
//!
//! `peer_pairs offset-allocator|xalloc-tlsf WORKLOAD N PAIRS`, counted as
//! `fit_pairs` says (`--toggle-collect='*load::run*'`). offset-allocator
//! cannot align above a page: on random-align and align-holes it refuses
//! those requests, as in the bench.

#[path = "../../mmkit/examples/fit_pairs/load.rs"]
mod load;

use load::Pairs;
use offset_allocator::{Allocation, Allocator};
use xalloc::{SysTlsf, SysTlsfRegion};

const PAGE: u64 = 4096;
const SPACE: u64 = 1 << 40;

struct Offset(Allocator<u32>);

impl Pairs for Offset {
    type Handle = Allocation<u32>;

    fn alloc(&mut self, size: u64, align: u64) -> Option<Allocation<u32>> {
        if align > PAGE {
            return None;
        }
        self.0.allocate(u32::try_from(size / PAGE).ok()?)
    }

    fn free(&mut self, h: Allocation<u32>) {
        self.0.free(h);
    }
}

struct Tlsf(SysTlsf<u64>);

impl Pairs for Tlsf {
    type Handle = SysTlsfRegion;

    fn alloc(&mut self, size: u64, align: u64) -> Option<SysTlsfRegion> {
        self.0.alloc_aligned(size, align).map(|(r, _)| r)
    }

    fn free(&mut self, h: SysTlsfRegion) {
        self.0.dealloc(h).expect("a live region");
    }
}

fn count<P: Pairs>(mut a: P, name: &str, n: usize, pairs: u64) {
    let mut c = load::set_up(&mut a, name, n);
    load::run(&mut a, &mut c, pairs);
    println!("{} live areas", c.slots.iter().flatten().count());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: peer_pairs offset-allocator|xalloc-tlsf WORKLOAD N PAIRS";
    let [_, kind, name, n, pairs] = args.as_slice() else {
        panic!("{usage}");
    };
    let (n, pairs): (usize, u64) = (n.parse().expect(usage), pairs.parse().expect(usage));
    let areas = 2 * n + 2 * 64 + 16;
    match kind.as_str() {
        "offset-allocator" => {
            let nodes = u32::try_from(2 * areas).expect("a u32 count");
            let units = u32::try_from(SPACE / PAGE).expect("2^28 pages");
            count(
                Offset(Allocator::with_max_allocs(units, nodes)),
                name,
                n,
                pairs,
            );
        }
        "xalloc-tlsf" => count(Tlsf(SysTlsf::with_capacity(SPACE, areas)), name, n, pairs),
        _ => panic!("{usage}"),
    }
}
