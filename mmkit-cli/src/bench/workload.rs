//! The bench's workloads: a registry of short names, each a fixed recipe
//! that turns (live areas, seed) into one operation sequence every
//! allocator replays identically.
//!
//! ```text
//!  set-up                      churn (timed after a warm-up)
//!  alloc slot 0..S             free slot s, alloc slot s, free slot t, ...
//!  [free every other slot]     s, t: random live slots, sizes from the recipe
//!  [holes: the working areas]  (holes: s, t among the working areas only)
//! ```
//!
//! Sizes are whole pages, so every allocator, also one counting in pages,
//! sees the same requests.

use mmkit::vmap::VmapAllocator;
use rand_mt::Mt64;

use super::{PAGE, SPACE};

/// One recipe of the registry.
#[derive(Debug)]
pub struct Workload {
    /// Short name used on the command line.
    pub name: &'static str,
    /// One line: what it stresses and where it comes from.
    pub about: &'static str,
    /// Sizes in pages, inclusive.
    pages: (u64, u64),
    /// Alignment is `PAGE << k` for `k` in this inclusive range.
    align_shift: (u32, u32),
    /// How the set-up lays out the space.
    layout: Layout,
    /// The largest live count of the default run (`--live` overrides it).
    pub max_live: usize,
}

/// A workload's set-up, for `N` (the `--live` count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `N` live areas of the recipe's sizes, one after another.
    Packed,
    /// `2N` areas of the recipe's sizes, every other one freed: `N` live
    /// areas and `N` holes, all churned.
    Fragmented,
    /// The near-miss set-up: `N` holes of `pages` pages between `N`
    /// pinned areas of the same size, below [`WORKING`] areas of the
    /// recipe's sizes, which alone are churned. The recipe's requests fit
    /// no hole (too large for one-page holes, or, for three-page holes at
    /// odd pages, never aligned to two pages with room left), so the `N`
    /// holes are blocks every search must rule out.
    Holes {
        /// Pages per hole (and per pinned area).
        pages: u64,
    },
}

/// Working areas above the holes of a [`Layout::Holes`] workload.
pub const WORKING: usize = 64;

impl Workload {
    /// Live areas after the set-up of `live` (the `--live` count).
    #[cfg(test)]
    pub fn live_after_setup(&self, live: usize) -> usize {
        match self.layout {
            Layout::Packed | Layout::Fragmented => live,
            Layout::Holes { .. } => live + WORKING,
        }
    }

    /// Whether some request asks for more than page alignment.
    pub fn aligned(&self) -> bool {
        self.align_shift.1 > 0
    }
}

/// Every workload, in the order the bench runs them.
pub const ALL: &[Workload] = &[
    Workload {
        name: "steady-page",
        about: "N live 1-page areas, free+alloc pairs: the fast path, one size",
        pages: (1, 1),
        align_shift: (0, 0),
        layout: Layout::Packed,
        max_live: usize::MAX,
    },
    Workload {
        name: "random-size",
        about: "N live areas of 1..100 pages (test_vmalloc random_size_alloc_test)",
        pages: (1, 100),
        align_shift: (0, 0),
        layout: Layout::Packed,
        max_live: usize::MAX,
    },
    Workload {
        name: "random-align",
        about: "1..10 pages aligned 4 KiB..4 MiB (test_vmalloc random_size_align_alloc_test)",
        pages: (1, 10),
        align_shift: (0, 10),
        layout: Layout::Packed,
        // Each large-alignment request leaves a padding hole; the tree's
        // alignment summaries prune those near misses, so the exact search
        // stays O(log n) and every live count runs.
        max_live: usize::MAX,
    },
    Workload {
        name: "fragmented",
        about: "2N areas of 1..16 pages, every other freed, then churn among the holes",
        pages: (1, 16),
        align_shift: (0, 0),
        layout: Layout::Fragmented,
        max_live: usize::MAX,
    },
    Workload {
        name: "fix-size-holes",
        about: "3-page areas above N one-page holes (test_vmalloc fix_size_alloc_test): near misses every search rules out",
        pages: (3, 3),
        align_shift: (0, 0),
        layout: Layout::Holes { pages: 1 },
        max_live: usize::MAX,
    },
    Workload {
        name: "align-holes",
        about: "3-page areas aligned 8 KiB above N 3-page holes at odd pages: each fits the size, none the alignment: near misses every search rules out",
        pages: (3, 3),
        align_shift: (1, 1),
        layout: Layout::Holes { pages: 3 },
        max_live: usize::MAX,
    },
];

/// One operation on a numbered slot that holds at most one live area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Allocate `size` bytes aligned to `align` into the (empty) slot.
    Alloc {
        /// Slot index.
        slot: u32,
        /// Bytes, a whole number of pages.
        size: u64,
        /// A power of two, at least one page.
        align: u64,
    },
    /// Free the slot's area; nothing if the slot is empty (a failed alloc).
    Free {
        /// Slot index.
        slot: u32,
    },
}

/// The operation sequence of one workload at one live count.
pub struct Plan {
    /// Slots the sequence uses (live areas plus the holes' slots).
    pub slots: usize,
    /// Set-up operations (not timed).
    pub setup: Vec<Op>,
    /// The lowest-fit address of each set-up `Alloc`, in order, computed by
    /// [`VmapAllocator`]; exact allocators may be placed there directly.
    pub setup_addrs: Vec<u64>,
    /// Churn: free+alloc pairs, `warmup` pairs first.
    pub churn: Vec<Op>,
    /// Pairs at the start of `churn` that warm up and are not timed.
    pub warmup: usize,
}

impl Plan {
    /// Builds the sequence of `w` with `live` areas: `warmup` untimed pairs
    /// then `pairs` timed ones, all drawn from `seed`.
    pub fn new(w: &Workload, live: usize, warmup: usize, pairs: usize, seed: u64) -> Plan {
        let mut rng = Mt64::new(seed ^ name_hash(w.name) ^ live as u64);
        let (slots, setup, live_slots): (usize, Vec<Op>, Vec<u32>) = match w.layout {
            Layout::Packed => {
                let setup = (0..live).map(|s| request(w, &mut rng, s)).collect();
                (live, setup, (0..live as u32).collect())
            }
            Layout::Fragmented => {
                let slots = 2 * live;
                let mut setup: Vec<Op> = (0..slots).map(|s| request(w, &mut rng, s)).collect();
                setup.extend(free_odd_slots(slots));
                (slots, setup, (0..slots as u32).step_by(2).collect())
            }
            Layout::Holes { pages } => {
                let pins = 2 * live;
                let pin = |s: usize| Op::Alloc {
                    slot: s as u32,
                    size: pages * PAGE,
                    align: PAGE,
                };
                let mut setup: Vec<Op> = (0..pins).map(pin).collect();
                setup.extend(free_odd_slots(pins));
                let slots = pins + WORKING;
                setup.extend((pins..slots).map(|s| request(w, &mut rng, s)));
                (slots, setup, (pins as u32..slots as u32).collect())
            }
        };
        let mut churn = Vec::with_capacity(2 * (warmup + pairs));
        for _ in 0..warmup + pairs {
            let slot = live_slots[below(&mut rng, live_slots.len() as u64) as usize];
            churn.push(Op::Free { slot });
            churn.push(request(w, &mut rng, slot as usize));
        }
        let setup_addrs = lowest_fits(&setup, slots);
        Plan {
            slots,
            setup,
            setup_addrs,
            churn,
            warmup,
        }
    }
}

/// Frees every other slot of `0..n` (the odd ones): the holes of the
/// fragmented and holes layouts.
fn free_odd_slots(n: usize) -> impl Iterator<Item = Op> {
    (1..n).step_by(2).map(|s| Op::Free { slot: s as u32 })
}

/// One `Alloc` of the recipe into `slot`.
fn request(w: &Workload, rng: &mut Mt64, slot: usize) -> Op {
    let pages = w.pages.0 + below(rng, w.pages.1 - w.pages.0 + 1);
    let shift =
        w.align_shift.0 + below(rng, u64::from(w.align_shift.1 - w.align_shift.0) + 1) as u32;
    Op::Alloc {
        slot: slot as u32,
        size: pages * PAGE,
        align: PAGE << shift,
    }
}

/// A number in `[0, n)`; the modulo bias is below 2^-40 for these `n`.
fn below(rng: &mut Mt64, n: u64) -> u64 {
    rng.next_u64() % n
}

/// FNV-1a, so each workload draws its own sequence from the one seed.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Replays the set-up on [`VmapAllocator`] and returns each allocation's
/// address (`u64::MAX` where nothing fit).
fn lowest_fits(setup: &[Op], slots: usize) -> Vec<u64> {
    let mut va = VmapAllocator::new(0, SPACE).expect("SPACE is non-empty");
    let mut at = vec![None; slots];
    let mut addrs = Vec::new();
    for op in setup {
        match *op {
            Op::Alloc { slot, size, align } => {
                let a = va.alloc(size, align).ok();
                at[slot as usize] = a;
                addrs.push(a.unwrap_or(u64::MAX));
            }
            Op::Free { slot } => {
                if let Some(a) = at[slot as usize].take() {
                    let _ = va.free(a);
                }
            }
        }
    }
    addrs
}
