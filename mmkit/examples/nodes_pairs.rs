//! One thread's alloc+free pairs through the one-lock allocator
//! (`range::Locked` over `VmapAllocator`) and through `nodes::VmapNodes`,
//! in a form whose instructions can be counted on a busy machine.
//!
//! `nodes_pairs locked|nodes page|churn N` runs `N` pairs of one loop:
//! - `page`: allocate one page, free it lazily;
//! - `churn`: `benches/nodes.rs`'s one-thread loop: 10^4 live areas, then
//!   each pair frees the oldest of 64 own areas lazily and allocates one
//!   of 2..101 pages.
//!
//! The difference between two runs is the loop's own cost:
//!
//! ```text
//! ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!          --toggle-collect='nodes_pairs::run' target/release/examples/nodes_pairs $1 $2 $3 2>&1 \
//!          | grep -o 'Collected : [0-9]*' | grep -o '[0-9]*'; }
//! echo $(( ($(ir nodes churn 200000) - $(ir nodes churn 100000)) / 100000 ))   # per pair
//! ```

use std::collections::VecDeque;
use std::hint::black_box;

use mmkit::nodes::{NodesConfig, StdVmapNodes};
use mmkit::range::Locked;
use mmkit::vmap::VmapAllocator;

const PAGE: u64 = 4096;
const START: u64 = 0xffff_c900_0000_0000;
const END: u64 = 0xffff_e900_0000_0000;
const LAZY_MAX: u64 = 32 << 20;

trait Pairs {
    fn alloc(&self, size: u64) -> u64;
    fn free_lazy(&self, addr: u64);
}

impl Pairs for Locked<VmapAllocator> {
    fn alloc(&self, size: u64) -> u64 {
        Locked::alloc(self, size, PAGE).expect("space")
    }
    fn free_lazy(&self, addr: u64) {
        Locked::free_lazy(self, addr).expect("live");
    }
}

impl Pairs for StdVmapNodes {
    fn alloc(&self, size: u64) -> u64 {
        StdVmapNodes::alloc(self, 0, size, PAGE).expect("space")
    }
    fn free_lazy(&self, addr: u64) {
        StdVmapNodes::free_lazy(self, 0, addr).expect("live");
    }
}

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn size(x: &mut u64) -> u64 {
    (2 + next(x) % 100) * PAGE
}

/// The loop callgrind counts: `n` pairs of `churn` (or of one page).
#[inline(never)]
fn run(p: &dyn Pairs, churn: bool, n: u64) {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    if churn {
        let mut own: VecDeque<u64> = (0..64).map(|_| p.alloc(size(&mut x))).collect();
        for _ in 0..n {
            p.free_lazy(own.pop_front().expect("64 areas"));
            own.push_back(p.alloc(size(&mut x)));
        }
    } else {
        for _ in 0..n {
            let a = p.alloc(black_box(PAGE));
            p.free_lazy(a);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: nodes_pairs locked|nodes page|churn N";
    let (kind, load, n) = match args.as_slice() {
        [_, k, l, n] => (k.as_str(), l.as_str(), n.parse::<u64>().expect(usage)),
        _ => panic!("{usage}"),
    };
    let churn = match load {
        "churn" => true,
        "page" => false,
        _ => panic!("{usage}"),
    };
    let fill = |p: &dyn Pairs| {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..if churn { 10_000 } else { 0 } {
            p.alloc(size(&mut x));
        }
    };
    match kind {
        "locked" => {
            let mut va = VmapAllocator::new(START, END).expect("valid space");
            va.set_lazy_max(LAZY_MAX);
            let l = Locked::new(va);
            fill(&l);
            run(&l, churn, n);
        }
        "nodes" => {
            let cfg = NodesConfig {
                nodes: 8,
                lazy_max: LAZY_MAX,
                ..NodesConfig::default()
            };
            let v = StdVmapNodes::new(START, END, cfg).expect("valid space");
            fill(&v);
            run(&v, churn, n);
        }
        _ => panic!("{usage}"),
    }
}
