//! The seven allocator tests of the kernel's `lib/test_vmalloc.c` that
//! seed 000 ran, written once for every machine: the host experiment runs
//! them on range allocators and on mmkit-vm's real mappings, mmkit-kernel
//! on its page tables. A machine supplies [`TestVmalloc`]; the tests supply
//! the sizes, alignments and order of the calls.
//!
//! ```
//! use core::cell::RefCell;
//! use mmkit::range::RangeAllocator;
//! use mmkit::vmap::VmapAllocator;
//! use mmkit_vmalloc::test_vmalloc::{Params, Rng, TestVmalloc, Workload, TESTS};
//!
//! struct Ranges(RefCell<VmapAllocator>);
//! impl TestVmalloc for Ranges {
//!     fn vmalloc(&self, pages: u64, align: u64) -> Option<u64> {
//!         self.0.borrow_mut().alloc((pages + 1) * 4096, align).ok()
//!     }
//!     fn vfree(&self, va: u64) {
//!         let _ = self.0.borrow_mut().free(va);
//!     }
//! }
//!
//! let va = Ranges(RefCell::new(VmapAllocator::new(1 << 40, 1 << 44).unwrap()));
//! let w = Workload { va: &va, p: Params { loops: 10, full_fit: 8, busy_list: 16 } };
//! let mut rng = Rng::for_worker(0);
//! assert!(TESTS.iter().all(|&t| w.run(t, &mut rng)));
//! ```

use alloc::vec::Vec;

use crate::PAGE;

/// One of the seven tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestCase {
    /// 1: `loops` x vmalloc(1 page), a byte written, vfree.
    FixSize,
    /// 2: J pairs of 1-page areas, one of each freed (J holes), then
    /// `loops` x 1-page vmalloc/vfree; J = fls(cpus) * 32 MiB / PAGE.
    FullFit,
    /// 4: 15000 live 1-page areas, then `loops` x {100 pages, 1 page}.
    LongBusyList,
    /// 8: `loops` x vmalloc(uniform 1..=100 pages).
    RandomSize,
    /// 16: `loops` x 5 pages aligned to `THREAD_ALIGN << 1` (32 KiB).
    FixAlign,
    /// 32: `loops` x {r random: (r % 10 + 1) pages aligned to 1 << (r % 23)}.
    RandomSizeAlign,
    /// 64: 1 page aligned to 1 << i for i = 0..64, up to the first failure.
    AlignShift,
}

/// Every test, in `test_vmalloc`'s order (its `run_test_mask` bits).
pub const TESTS: [TestCase; 7] = [
    TestCase::FixSize,
    TestCase::FullFit,
    TestCase::LongBusyList,
    TestCase::RandomSize,
    TestCase::FixAlign,
    TestCase::RandomSizeAlign,
    TestCase::AlignShift,
];

/// `align_shift_alloc_test` fails where no alignment this large or smaller
/// was satisfied: any vmalloc space of a few MiB can satisfy them.
pub const ALIGN_SHIFT_MUST_REACH: u32 = 20;

impl TestCase {
    /// The kernel's name for it.
    pub fn name(self) -> &'static str {
        match self {
            TestCase::FixSize => "fix_size_alloc_test",
            TestCase::FullFit => "full_fit_alloc_test",
            TestCase::LongBusyList => "long_busy_list_alloc_test",
            TestCase::RandomSize => "random_size_alloc_test",
            TestCase::FixAlign => "fix_align_alloc_test",
            TestCase::RandomSizeAlign => "random_size_align_alloc_test",
            TestCase::AlignShift => "align_shift_alloc_test",
        }
    }

    /// The test of that name.
    pub fn by_name(name: &str) -> Option<TestCase> {
        TESTS.iter().copied().find(|t| t.name() == name)
    }

    /// Its loop count: `loops`, but the align-shift test makes 64 attempts.
    pub fn loops(self, loops: u64) -> u64 {
        match self {
            TestCase::AlignShift => 64,
            _ => loops,
        }
    }
}

/// What the tests call: a machine's vmalloc.
pub trait TestVmalloc {
    /// `vmalloc`: `pages` pages (plus the guard page), aligned to `align`;
    /// `None` when it fails.
    fn vmalloc(&self, pages: u64, align: u64) -> Option<u64>;
    /// [`vmalloc`](Self::vmalloc) of zeroed memory: what the kernel's
    /// aligned tests ask for (`__vmalloc_node` with `__GFP_ZERO` in
    /// `fix_align`, `random_size_align` and `align_shift`). By default the
    /// same as `vmalloc`: machines that zero nothing, or only when asked
    /// for a like-for-like comparison, override it.
    fn vmalloc_zeroed(&self, pages: u64, align: u64) -> Option<u64> {
        self.vmalloc(pages, align)
    }
    /// `vfree` of an area these tests allocated.
    fn vfree(&self, va: u64);
    /// Writes the first page of `va` where the kernel's tests write a byte;
    /// false when the write did not reach the area's memory. Machines
    /// without memory behind their areas leave it as is.
    fn touch(&self, _va: u64) -> bool {
        true
    }
}

/// The tests' random numbers (the kernel's `get_random_bytes`): xorshift64,
/// one stream per worker.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The stream of worker `id` (performance mode is worker 0).
    pub fn for_worker(id: u64) -> Rng {
        // Never 0: xorshift would stay at 0.
        Rng(0x5eed_0000_u64.wrapping_add(id.wrapping_mul(7919)) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform enough below `n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// The seven tests in a shuffled order (the kernel's `shuffle_array`,
    /// Fisher-Yates).
    pub fn shuffled(&mut self) -> [TestCase; 7] {
        let mut order = TESTS;
        for i in (1..order.len()).rev() {
            order.swap(i, self.below(i as u64 + 1) as usize);
        }
        order
    }
}

/// The tests' sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// `test_loop_count`.
    pub loops: u64,
    /// Pairs of 1-page areas of `full_fit_alloc_test` (the kernel:
    /// `lazy_max(cpus) / PAGE`).
    pub full_fit: usize,
    /// Live areas of `long_busy_list_alloc_test` (the kernel: 15000).
    pub busy_list: usize,
}

/// A run of the tests: the machine's vmalloc and the sizes.
pub struct Workload<'a, V: ?Sized> {
    /// The vmalloc every worker shares.
    pub va: &'a V,
    /// Loop counts and sizes.
    pub p: Params,
}

impl<V: TestVmalloc + ?Sized> Workload<'_, V> {
    /// `vmalloc` of an array of `n` pointers (the tests' bookkeeping).
    fn vmalloc_array(&self, n: usize) -> Option<u64> {
        self.va.vmalloc((n as u64 * 8).div_ceil(PAGE), PAGE)
    }

    /// Runs one test once. Returns whether it passed: every allocation
    /// succeeded and every touch reached memory; the align-shift test
    /// stops at its first failure, which must come past
    /// [`ALIGN_SHIFT_MUST_REACH`], and every address it got must be
    /// aligned as asked.
    pub fn run(&self, test: TestCase, rng: &mut Rng) -> bool {
        match test {
            TestCase::FixSize => self.repeat(true, || (1, PAGE)),
            TestCase::FullFit => self.full_fit(),
            TestCase::LongBusyList => self.long_busy_list(),
            TestCase::RandomSize => self.repeat(true, || (rng.below(100) + 1, PAGE)),
            TestCase::FixAlign => self.repeat(false, || (5, 32 << 10)),
            TestCase::RandomSizeAlign => self.repeat(false, || {
                let r = rng.next_u64() as u8;
                (u64::from(r % 10) + 1, 1 << (r % 23))
            }),
            TestCase::AlignShift => self.align_shift(),
        }
    }

    /// `loops` x {vmalloc(pages, align) from `next`, a touch when `touch`,
    /// vfree}; the aligned tests (no touch) ask for zeroed memory, as the
    /// kernel's do.
    fn repeat(&self, touch: bool, mut next: impl FnMut() -> (u64, u64)) -> bool {
        for _ in 0..self.p.loops {
            let (pages, align) = next();
            let got = if touch {
                self.va.vmalloc(pages, align)
            } else {
                self.va.vmalloc_zeroed(pages, align)
            };
            let Some(a) = got else {
                return false;
            };
            let ok = !touch || self.va.touch(a);
            self.va.vfree(a);
            if !ok {
                return false;
            }
        }
        true
    }

    fn full_fit(&self) -> bool {
        let j = self.p.full_fit;
        let (Some(arr), Some(junk_arr)) = (self.vmalloc_array(j), self.vmalloc_array(j)) else {
            return false;
        };
        let mut kept = Vec::with_capacity(j);
        let mut junk = Vec::with_capacity(j);
        for _ in 0..j {
            kept.extend(self.va.vmalloc(1, PAGE));
            junk.extend(self.va.vmalloc(1, PAGE));
        }
        let mut ok = kept.len() == j && junk.len() == j;
        junk.into_iter().for_each(|a| self.va.vfree(a));
        ok = ok && self.repeat(true, || (1, PAGE));
        kept.into_iter().for_each(|a| self.va.vfree(a));
        self.va.vfree(arr);
        self.va.vfree(junk_arr);
        ok
    }

    fn long_busy_list(&self) -> bool {
        let n = self.p.busy_list;
        let Some(arr) = self.vmalloc_array(n) else {
            return false;
        };
        let held: Vec<u64> = (0..n).filter_map(|_| self.va.vmalloc(1, PAGE)).collect();
        let mut ok = held.len() == n;
        for _ in 0..self.p.loops {
            let (Some(a), Some(b)) = (self.va.vmalloc(100, PAGE), self.va.vmalloc(1, PAGE)) else {
                ok = false;
                break;
            };
            ok &= self.va.touch(a) && self.va.touch(b);
            self.va.vfree(a);
            self.va.vfree(b);
        }
        held.into_iter().for_each(|a| self.va.vfree(a));
        self.va.vfree(arr);
        ok
    }

    fn align_shift(&self) -> bool {
        for i in 0..64 {
            let align = 1u64 << i;
            match self.va.vmalloc_zeroed(1, align) {
                Some(a) => {
                    self.va.vfree(a);
                    if a % align != 0 {
                        return false;
                    }
                }
                None => return i > ALIGN_SHIFT_MUST_REACH,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::{Cell, RefCell};
    use mmkit::vmap::VmapAllocator;

    /// A range allocator, with faults to plant.
    struct Ranges {
        r: RefCell<VmapAllocator>,
        /// Misalign every address by a page when asked for more than this.
        misalign_above: u64,
        /// Refuse every alignment above this.
        refuse_above: u64,
        touches: Cell<u64>,
        zeroed: Cell<u64>,
        touch_fails: bool,
    }

    impl Ranges {
        fn new() -> Self {
            Ranges {
                r: RefCell::new(VmapAllocator::new(1 << 40, 1 << 44).expect("a space")),
                misalign_above: u64::MAX,
                refuse_above: u64::MAX,
                touches: Cell::new(0),
                zeroed: Cell::new(0),
                touch_fails: false,
            }
        }
    }

    impl TestVmalloc for Ranges {
        fn vmalloc(&self, pages: u64, align: u64) -> Option<u64> {
            if align > self.refuse_above {
                return None;
            }
            let a = self.r.borrow_mut().alloc((pages + 1) * PAGE, align).ok()?;
            Some(if align > self.misalign_above {
                a + PAGE
            } else {
                a
            })
        }
        fn vmalloc_zeroed(&self, pages: u64, align: u64) -> Option<u64> {
            self.zeroed.set(self.zeroed.get() + 1);
            self.vmalloc(pages, align)
        }
        fn vfree(&self, va: u64) {
            let va = va & !(PAGE - 1);
            let freed = self.r.borrow_mut().free(va);
            let freed = freed.or_else(|_| self.r.borrow_mut().free(va - PAGE));
            assert!(freed.is_ok(), "freeing {va:#x}");
        }
        fn touch(&self, _va: u64) -> bool {
            self.touches.set(self.touches.get() + 1);
            !self.touch_fails
        }
    }

    const P: Params = Params {
        loops: 20,
        full_fit: 16,
        busy_list: 32,
    };

    #[test]
    fn every_test_passes_on_a_sound_allocator_and_frees_what_it_took() {
        let va = Ranges::new();
        let w = Workload { va: &va, p: P };
        let mut rng = Rng::for_worker(0);
        for t in TESTS {
            assert!(w.run(t, &mut rng), "{}", t.name());
        }
        assert_eq!(va.r.borrow().stats().live_areas, 0);
        // Fix size, full fit and random size touch once a loop; long busy
        // list twice.
        assert_eq!(va.touches.get(), 3 * P.loops + 2 * P.loops);
    }

    #[test]
    fn align_shift_fails_on_a_misaligned_or_a_refused_alignment() {
        let w = |va| Workload { va, p: P }.run(TestCase::AlignShift, &mut Rng::for_worker(0));
        let mut misaligned = Ranges::new();
        misaligned.misalign_above = 1 << 16;
        assert!(!w(&misaligned));
        let mut refused = Ranges::new();
        refused.refuse_above = 1 << 16;
        assert!(!w(&refused));
        let mut far = Ranges::new();
        far.refuse_above = 1 << 30;
        assert!(w(&far));
    }

    #[test]
    fn a_touch_that_misses_fails_the_tests_that_write() {
        let mut va = Ranges::new();
        va.touch_fails = true;
        let w = Workload { va: &va, p: P };
        for t in TESTS {
            let writes = matches!(
                t,
                TestCase::FixSize
                    | TestCase::FullFit
                    | TestCase::LongBusyList
                    | TestCase::RandomSize
            );
            assert_eq!(w.run(t, &mut Rng::for_worker(1)), !writes, "{}", t.name());
        }
    }

    #[test]
    fn only_the_aligned_tests_ask_for_zeroed_memory() {
        for t in TESTS {
            let va = Ranges::new();
            assert!(Workload { va: &va, p: P }.run(t, &mut Rng::for_worker(2)));
            let want = match t {
                TestCase::FixAlign | TestCase::RandomSizeAlign => P.loops,
                // Every power of two until the 16 TiB space refuses 2^44.
                TestCase::AlignShift => 45,
                _ => 0,
            };
            assert_eq!(va.zeroed.get(), want, "{}", t.name());
        }
    }

    #[test]
    fn names_round_trip_and_shuffles_keep_every_test() {
        for t in TESTS {
            assert_eq!(TestCase::by_name(t.name()), Some(t));
        }
        assert_eq!(TestCase::by_name("vmalloc"), None);
        let mut order = Rng::for_worker(3).shuffled();
        order.sort_by_key(|t| t.name());
        let mut all = TESTS;
        all.sort_by_key(|t| t.name());
        assert_eq!(order, all);
    }
}
