//! The bench's six workloads (`mmkit bench --list`) as free+alloc pairs on
//! one `VmapAllocator`, placed by lowest or best fit, in a form whose
//! instructions can be counted on a busy machine.
//!
//! `fit_pairs lowest|best|sized|best-sized WORKLOAD N PAIRS`: `sized` and
//! `best-sized` keep no busy index and free with `free_sized`, as the
//! bench's `mmkit-sized` row. The set-up (N live areas, or N holes for the
//! holes workloads) is not counted; `run` is:
//!
//! ```text
//! ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!          --toggle-collect='fit_pairs::run' target/release/examples/fit_pairs $1 $2 $3 $4 2>&1 \
//!          | grep -o 'Collected : [0-9]*' | grep -o '[0-9]*'; }
//! echo $(( ($(ir best steady-page 10000 60000) - $(ir best steady-page 10000 20000)) / 40000 ))
//! ```

use mmkit::request::{Policy, Request};
use mmkit::vmap::VmapAllocator;

const PAGE: u64 = 4096;
const SPACE: u64 = 1 << 40;
/// Churned areas above the holes of the holes workloads.
const WORKING: usize = 64;

/// A workload: sizes in pages, alignment shifts, and its set-up.
struct Load {
    pages: (u64, u64),
    shifts: (u32, u32),
    /// `None`: packed; `Some(0)`: 2N areas, every other freed;
    /// `Some(p)`: N holes of `p` pages below the working areas.
    holes: Option<u64>,
}

fn load(name: &str) -> Load {
    let (pages, shifts, holes) = match name {
        "steady-page" => ((1, 1), (0, 0), None),
        "random-size" => ((1, 100), (0, 0), None),
        "random-align" => ((1, 10), (0, 10), None),
        "fragmented" => ((1, 16), (0, 0), Some(0)),
        "fix-size-holes" => ((3, 3), (0, 0), Some(1)),
        "align-holes" => ((3, 3), (1, 1), Some(3)),
        _ => panic!("unknown workload {name}"),
    };
    Load {
        pages,
        shifts,
        holes,
    }
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn request(&mut self, l: &Load) -> (u64, u64) {
        let pages = l.pages.0 + self.below(l.pages.1 - l.pages.0 + 1);
        let shift = l.shifts.0 + self.below(u64::from(l.shifts.1 - l.shifts.0) + 1) as u32;
        (pages * PAGE, PAGE << shift)
    }
}

struct Alloc {
    va: VmapAllocator,
    best: bool,
    sized: bool,
}

impl Alloc {
    fn alloc(&mut self, (size, align): (u64, u64)) -> Option<(u64, u64)> {
        let policy = if self.best {
            Policy::BestFit
        } else {
            Policy::Lowest
        };
        let req = Request::bytes(size)?.align(align).policy(policy);
        self.va.allocate(req).ok().map(|a| (a, size))
    }

    fn free(&mut self, (a, size): (u64, u64)) {
        let r = match self.sized {
            true => self.va.free_sized(a, size),
            false => self.va.free(a),
        };
        r.expect("a live area");
    }
}

/// The loop callgrind counts: `pairs` pairs, each freeing a random slot of
/// `churned` and allocating into it.
#[inline(never)]
fn run(a: &mut Alloc, l: &Load, slots: &mut [Option<(u64, u64)>], churned: &[usize], pairs: u64) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..pairs {
        let s = churned[rng.below(churned.len() as u64) as usize];
        if let Some(area) = slots[s].take() {
            a.free(area);
        }
        slots[s] = a.alloc(rng.request(l));
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
    va.reserve(2 * n + 2 * WORKING + 2);
    let mut a = Alloc { va, best, sized };
    let l = load(name);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut slots, churned): (Vec<_>, Vec<usize>) = match l.holes {
        None => {
            let slots = (0..n).map(|_| a.alloc(rng.request(&l))).collect();
            (slots, (0..n).collect())
        }
        Some(0) => {
            let mut slots: Vec<_> = (0..2 * n).map(|_| a.alloc(rng.request(&l))).collect();
            for s in slots.iter_mut().skip(1).step_by(2) {
                a.free(s.take().expect("set-up fits"));
            }
            (slots, (0..2 * n).step_by(2).collect())
        }
        Some(p) => {
            let mut slots: Vec<_> = (0..2 * n).map(|_| a.alloc((p * PAGE, PAGE))).collect();
            for s in slots.iter_mut().skip(1).step_by(2) {
                a.free(s.take().expect("set-up fits"));
            }
            slots.extend((0..WORKING).map(|_| a.alloc(rng.request(&l))));
            (slots, (2 * n..2 * n + WORKING).collect())
        }
    };
    run(&mut a, &l, &mut slots, &churned, pairs);
    let live = slots.iter().flatten().count();
    println!(
        "{live} live areas, {} free blocks",
        a.va.stats().free_blocks
    );
}
