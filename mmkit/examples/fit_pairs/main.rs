//! The bench's six workloads (`mmkit bench --list`) as free+alloc pairs on
//! one `VmapAllocator`, placed by lowest or best fit, in a form whose
//! instructions can be counted on a busy machine.
//!
//! `fit_pairs lowest|best|sized|best-sized WORKLOAD N PAIRS`: `sized` and
//! `best-sized` keep no busy index and free with `free_sized`, as the
//! bench's `mmkit-sized` row. Each allocates through the call its bench
//! row makes: `alloc(size, align)` for lowest fit, `allocate` with a
//! best-fit request for best fit. The set-up (N live areas, or N holes for the
//! holes workloads) is not counted; `run` is:
//!
//! ```text
//! ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!          --toggle-collect='*load::run*' target/release/examples/fit_pairs $1 $2 $3 $4 2>&1 \
//!          | grep -o 'Collected : [0-9]*' | grep -o '[0-9]*'; }
//! echo $(( ($(ir best steady-page 10000 60000) - $(ir best steady-page 10000 20000)) / 40000 ))
//! ```
//!
//! mmkit-cli's `peer_pairs` example runs the same pairs on the O(1) peers.

mod load;

use load::Pairs;
use mmkit::request::{Policy, Request};
use mmkit::vmap::VmapAllocator;

const SPACE: u64 = 1 << 40;

struct Alloc {
    va: VmapAllocator,
    best: bool,
    sized: bool,
}

impl Pairs for Alloc {
    type Handle = (u64, u64);

    /// As the bench's rows: lowest fit through `alloc`, best fit through
    /// `allocate` with a [`Policy::BestFit`] request.
    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, u64)> {
        let a = if self.best {
            let req = Request::bytes(size)?.align(align).policy(Policy::BestFit);
            self.va.allocate(req).ok()
        } else {
            self.va.alloc(size, align).ok()
        };
        a.map(|a| (a, size))
    }

    fn free(&mut self, (a, size): (u64, u64)) {
        let r = match self.sized {
            true => self.va.free_sized(a, size),
            false => self.va.free(a),
        };
        r.expect("a live area");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: fit_pairs lowest|best|sized|best-sized WORKLOAD N PAIRS";
    let [_, kind, name, n, pairs] = args.as_slice() else {
        panic!("{usage}");
    };
    let (n, pairs): (usize, u64) = (n.parse().expect(usage), pairs.parse().expect(usage));
    let (best, sized) = match kind.as_str() {
        "lowest" => (false, false),
        "best" => (true, false),
        "sized" => (false, true),
        "best-sized" => (true, true),
        _ => panic!("{usage}"),
    };
    let mut va = match sized {
        true => VmapAllocator::without_busy_index(0, SPACE),
        false => VmapAllocator::new(0, SPACE),
    }
    .expect("valid space");
    va.reserve(2 * n + 2 * 64 + 2);
    let mut a = Alloc { va, best, sized };
    let mut c = load::set_up(&mut a, name, n);
    load::run(&mut a, &mut c, pairs);
    let live = c.slots.iter().flatten().count();
    println!(
        "{live} live areas, {} free blocks",
        a.va.stats().free_blocks
    );
}
