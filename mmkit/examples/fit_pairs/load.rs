//! The bench's six workloads (`mmkit bench --list`) as free+alloc pairs
//! over any allocator, shared by `fit_pairs` (mmkit) and mmkit-cli's
//! `peer_pairs` (the O(1) peers), so both count the same operations.

const PAGE: u64 = 4096;
/// Churned areas above the holes of the holes workloads.
const WORKING: usize = 64;

/// An allocator as the pairs drive it.
pub trait Pairs {
    /// What a free needs back.
    type Handle;
    /// `size` bytes at a multiple of `align`, or `None`.
    fn alloc(&mut self, size: u64, align: u64) -> Option<Self::Handle>;
    /// Frees an area `alloc` gave.
    fn free(&mut self, h: Self::Handle);
}

/// A workload: sizes in pages, alignment shifts, and its set-up.
pub struct Load {
    pages: (u64, u64),
    shifts: (u32, u32),
    /// `None`: packed; `Some(0)`: 2N areas, every other freed;
    /// `Some(p)`: N holes of `p` pages below the working areas.
    holes: Option<u64>,
}

/// The workload named `name` (as `mmkit bench --list`).
pub fn load(name: &str) -> Load {
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

/// A workload set up on an allocator: the areas and the slots churned.
pub struct Churn<H> {
    load: Load,
    /// Every area, `None` where freed or refused.
    pub slots: Vec<Option<H>>,
    churned: Vec<usize>,
}

/// Sets `name` up with `n` live areas (or holes) on `a`.
pub fn set_up<P: Pairs>(a: &mut P, name: &str, n: usize) -> Churn<P::Handle> {
    let l = load(name);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let alloc = |a: &mut P, (size, align)| a.alloc(size, align);
    let (slots, churned): (Vec<_>, Vec<usize>) = match l.holes {
        None => {
            let slots = (0..n).map(|_| alloc(a, rng.request(&l))).collect();
            (slots, (0..n).collect())
        }
        Some(0) => {
            let mut slots: Vec<_> = (0..2 * n).map(|_| alloc(a, rng.request(&l))).collect();
            for s in slots.iter_mut().skip(1).step_by(2) {
                a.free(s.take().expect("set-up fits"));
            }
            (slots, (0..2 * n).step_by(2).collect())
        }
        Some(p) => {
            let mut slots: Vec<_> = (0..2 * n).map(|_| alloc(a, (p * PAGE, PAGE))).collect();
            for s in slots.iter_mut().skip(1).step_by(2) {
                a.free(s.take().expect("set-up fits"));
            }
            slots.extend((0..WORKING).map(|_| alloc(a, rng.request(&l))));
            (slots, (2 * n..2 * n + WORKING).collect())
        }
    };
    Churn {
        load: l,
        slots,
        churned,
    }
}

/// The loop callgrind counts (`--toggle-collect='*load::run*'`): `pairs`
/// pairs, each freeing a random churned slot and allocating into it.
#[inline(never)]
pub fn run<P: Pairs>(a: &mut P, c: &mut Churn<P::Handle>, pairs: u64) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..pairs {
        let s = c.churned[rng.below(c.churned.len() as u64) as usize];
        if let Some(area) = c.slots[s].take() {
            a.free(area);
        }
        let (size, align) = rng.request(&c.load);
        c.slots[s] = a.alloc(size, align);
    }
}
