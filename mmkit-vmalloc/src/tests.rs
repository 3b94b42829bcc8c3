//! The layer against a model machine: PTEs in a map and a TLB that keeps
//! every translation it has been asked for until a flush covers it, so a
//! range mapped again while a TLB may still hold it is seen.

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec;
use alloc::vec::Vec;

use mmkit::baseline::linear_vmap::LinearVmap;
use mmkit::vmap::VmapAllocator;

use super::*;

const START: u64 = 0x1000_0000;
const END: u64 = 0x2000_0000;

#[derive(Default)]
pub(crate) struct Machine {
    ptes: BTreeMap<u64, u64>,
    tlb: BTreeMap<u64, u64>,
    flushes: Vec<(u64, u64)>,
    /// Pages mapped while the TLB still held a translation of them.
    pub(crate) stale_maps: u64,
}

impl Machine {
    /// A read through the TLB: a cached translation wins over the PTE.
    fn read(&mut self, va: u64) -> Option<u64> {
        if let Some(&pfn) = self.tlb.get(&va) {
            return Some(pfn);
        }
        let pfn = *self.ptes.get(&va)?;
        self.tlb.insert(va, pfn);
        Some(pfn)
    }
}

impl Mmu for Machine {
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
        for (i, &pfn) in pfns.iter().enumerate() {
            let at = va + i as u64 * PAGE;
            self.stale_maps += u64::from(self.tlb.contains_key(&at));
            self.ptes.insert(at, pfn);
        }
        Ok(())
    }

    fn clear(&mut self, va: u64, pages: u64) {
        for i in 0..pages {
            self.ptes.remove(&(va + i * PAGE));
        }
    }

    fn flush(&mut self, start: u64, end: u64) -> Refused {
        self.tlb.retain(|&va, _| !(start..end).contains(&va));
        self.flushes.push((start, end));
        Vec::new()
    }

    fn translate(&self, va: u64) -> Option<u64> {
        self.ptes.get(&va).copied()
    }
}

/// Frames 0 to `n`: runs of consecutive free frames, the lowest first; a
/// frame given back twice or never handed out fails the test.
pub(crate) struct Pool {
    pub(crate) free: BTreeSet<u64>,
    pub(crate) handed: BTreeSet<u64>,
}

impl Pool {
    pub(crate) fn new(n: u64) -> Self {
        Pool {
            free: (0..n).collect(),
            handed: BTreeSet::new(),
        }
    }
}

impl FrameSource for Pool {
    fn alloc(&mut self, max: u64) -> Option<(u64, u64)> {
        let first = *self.free.iter().next()?;
        let mut n = 0;
        while n < max && self.free.remove(&(first + n)) {
            self.handed.insert(first + n);
            n += 1;
        }
        Some((first, n))
    }

    fn free(&mut self, pfn: u64, count: u64) {
        for p in pfn..pfn + count {
            assert!(
                self.handed.remove(&p),
                "frame {p} given back but not handed out"
            );
            self.free.insert(p);
        }
    }

    fn zero(&mut self, _pfn: u64, _count: u64) {}
}

/// Frames handed out by nobody: `vmap` tests give their own.
pub(crate) fn no_frames() -> Pool {
    Pool::new(0)
}

fn tree(flush: Flush) -> Vmalloc<VmapAllocator> {
    Vmalloc::new(VmapAllocator::new(START, END).unwrap(), flush)
}

fn walk(m: &Machine) -> impl Iterator<Item = (u64, u64)> + '_ {
    m.ptes.iter().map(|(&va, &pfn)| (va, pfn))
}

#[test]
fn vmap_maps_the_frames_and_a_guard_page() {
    let mut m = Machine::default();
    let mut f = no_frames();
    let mut v = tree(Flush::Eager);
    let a = v.vmap(&mut m, &mut f, &[7, 8, 9], PAGE).unwrap();
    assert_eq!(
        (m.translate(a), m.translate(a + 2 * PAGE)),
        (Some(7), Some(9))
    );
    assert_eq!(v.lookup(a + PAGE), Where::Mapped { area: a, pfn: 8 });
    assert_eq!(v.lookup(a + 3 * PAGE), Where::Guard { area: a });
    assert_eq!(m.translate(a + 3 * PAGE), None);
    v.check(&m).unwrap();
    assert_eq!(v.check_walk(walk(&m)), Ok(0));
}

#[test]
fn eager_unmap_flushes_before_the_range_is_free() {
    let mut m = Machine::default();
    let mut f = no_frames();
    let mut v = tree(Flush::Eager);
    let a = v.vmap(&mut m, &mut f, &[1, 2], PAGE).unwrap();
    assert_eq!(m.read(a), Some(1));
    assert_eq!(v.vunmap(&mut m, &mut f, a), Ok(Some(vec![1, 2])));
    assert_eq!(m.flushes, [(a, a + 3 * PAGE)]);
    assert_eq!(v.lookup(a), Where::Freed { area: a });
    let b = v.vmap(&mut m, &mut f, &[3], PAGE).unwrap();
    assert_eq!(b, a); // the lowest fit: the same range, flushed
    assert_eq!((m.read(b), m.stale_maps), (Some(3), 0));
    assert_eq!(v.stats().flushes, 1);
}

#[test]
fn lazy_unmap_clears_now_and_flushes_at_the_purge() {
    let mut m = Machine::default();
    let mut f = no_frames();
    let mut v = tree(Flush::Lazy { max_bytes: 1 << 20 });
    let a = v.vmap(&mut m, &mut f, &[1], PAGE).unwrap();
    assert_eq!(m.read(a), Some(1));
    v.vunmap(&mut m, &mut f, a).unwrap();
    assert_eq!(m.translate(a), None); // PTE cleared at once
    assert!(m.flushes.is_empty()); // the TLB may still hold it
    assert_eq!(v.lookup(a), Where::Lazy { area: a });
    let b = v.vmap(&mut m, &mut f, &[2], PAGE).unwrap();
    assert_ne!(b, a, "a lazily freed range is not reused before its flush");
    assert!(v.purge(&mut m, &mut f));
    assert_eq!(m.flushes.len(), 1);
    assert_eq!(v.lookup(a), Where::Freed { area: a });
    assert_eq!(m.stale_maps, 0);
}

#[test]
fn past_lazy_max_one_flush_purges_everything() {
    let mut m = Machine::default();
    let mut f = no_frames();
    let mut v = tree(Flush::Lazy {
        max_bytes: 8 * PAGE,
    });
    for i in 0..4 {
        let a = v.vmap(&mut m, &mut f, &[i], PAGE).unwrap();
        v.vunmap(&mut m, &mut f, a).unwrap();
    }
    // 4 areas of 2 pages (guard included) = 8 pages: not above the maximum.
    assert!(m.flushes.is_empty());
    let a = v.vmap(&mut m, &mut f, &[9], PAGE).unwrap();
    v.vunmap(&mut m, &mut f, a).unwrap();
    assert_eq!(m.flushes.len(), 1);
    assert_eq!(v.stats().purges, 1);
}

#[test]
fn a_full_space_purges_and_retries() {
    let mut m = Machine::default();
    let mut f = no_frames();
    let mut v = Vmalloc::new(
        VmapAllocator::new(START, START + 4 * PAGE).unwrap(),
        Flush::Lazy {
            max_bytes: u64::MAX,
        },
    );
    let a = v.vmap(&mut m, &mut f, &[1, 2, 3], PAGE).unwrap();
    v.vunmap(&mut m, &mut f, a).unwrap();
    assert_eq!(v.vmap(&mut m, &mut f, &[4, 5, 6], PAGE), Ok(a));
    assert_eq!(m.flushes.len(), 1);
}

/// A request no address of the empty space could hold (the alignment
/// test's last steps) fails at once: a purge would flush for nothing.
#[test]
fn a_request_nothing_could_hold_fails_without_a_purge() {
    let mut m = Machine::default();
    let mut f = no_frames();
    let mut v = tree(Flush::Lazy {
        max_bytes: u64::MAX,
    });
    let a = v.vmap(&mut m, &mut f, &[1, 2], PAGE).unwrap();
    v.vunmap(&mut m, &mut f, a).unwrap();
    let wide = (END - START).next_power_of_two() * 2;
    for align in [wide, 1 << 63] {
        assert_eq!(
            v.vmap(&mut m, &mut f, &[3], align),
            Err(VmError::NoSpace { bytes: 2 * PAGE })
        );
    }
    assert_eq!(
        v.vmap(&mut m, &mut f, &[3; 0x1_0000], PAGE).err(),
        Some(VmError::NoSpace {
            bytes: 0x1_0001 * PAGE
        })
    );
    assert!(m.flushes.is_empty(), "{:?}", m.flushes);
    assert_eq!((v.stats().purges, v.lazy().0), (0, 1));
    // One the empty space holds, to its last byte, still purges and retries.
    let b = v.vmap(&mut m, &mut f, &[3; 0xffff], END - START).unwrap();
    assert_eq!((b, m.flushes.len(), v.stats().purges), (START, 1, 1));
    v.check(&m).unwrap();
}

/// Random maps and unmaps on both range allocators and both policies: no
/// range is mapped again while a TLB may hold it, and every check passes.
#[test]
fn no_range_is_reused_before_its_flush() {
    for flush in [
        Flush::Eager,
        Flush::Lazy {
            max_bytes: 64 * PAGE,
        },
    ] {
        let mut m = Machine::default();
        let mut f = no_frames();
        let mut t = tree(flush);
        let mut l = Vmalloc::new(LinearVmap::new(END, 2 * END - START).unwrap(), flush);
        let mut live: Vec<(bool, u64, usize)> = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..2000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 3 != 0 || live.is_empty() {
                let pages = (x >> 8) % 5 + 1;
                let frames: Vec<u64> = (0..pages).map(|p| step * 8 + p).collect();
                let on_tree = x & 1 == 0;
                let a = if on_tree {
                    t.vmap(&mut m, &mut f, &frames, PAGE)
                } else {
                    l.vmap(&mut m, &mut f, &frames, PAGE)
                }
                .unwrap();
                for p in 0..pages {
                    m.read(a + p * PAGE); // every CPU touches it: the TLB holds it
                }
                live.push((on_tree, a, pages as usize));
            } else {
                let (on_tree, a, pages) = live.swap_remove((x >> 16) as usize % live.len());
                let frames = if on_tree {
                    t.vunmap(&mut m, &mut f, a)
                } else {
                    l.vunmap(&mut m, &mut f, a)
                }
                .unwrap()
                .expect("AtOnce: the frames are the caller's again");
                assert_eq!(frames.len(), pages);
            }
        }
        assert_eq!(m.stale_maps, 0, "{flush:?}");
        t.check(&m).unwrap();
        l.check(&m).unwrap();
        let in_tree = walk(&m).filter(|&(va, _)| t.lookup(va) != Where::Free);
        assert_eq!(t.check_walk(in_tree), Ok(0));
    }
}

#[test]
fn bad_requests_change_nothing() {
    let mut m = Machine::default();
    let mut f = no_frames();
    let mut v = tree(Flush::Eager);
    assert_eq!(v.vmap(&mut m, &mut f, &[], PAGE), Err(VmError::Empty));
    let align = 3 * PAGE;
    assert_eq!(
        v.vmap(&mut m, &mut f, &[1], align),
        Err(VmError::BadAlign { align })
    );
    assert_eq!(
        v.vmap(&mut m, &mut f, &[1], 1),
        Err(VmError::BadAlign { align: 1 })
    );
    let a = v.vmap(&mut m, &mut f, &[1, 2], PAGE).unwrap();
    let (va, start) = (a + PAGE, a);
    assert_eq!(
        v.vunmap(&mut m, &mut f, va),
        Err(VmError::Interior { va, start })
    );
    assert_eq!(
        v.vfree(&mut m, &mut f, a),
        Err(VmError::NotVmalloc { va: a })
    );
    assert!(matches!(
        v.free_block(&mut m, a, false),
        Err(VmError::InUse { .. })
    ));
    assert_eq!(m.ptes.len(), 2);
    assert!(m.flushes.is_empty());
    v.check(&m).unwrap();
}

#[test]
fn check_walk_finds_a_stray_pte() {
    let mut m = Machine::default();
    let mut f = no_frames();
    let mut v = tree(Flush::Eager);
    let a = v.vmap(&mut m, &mut f, &[1], PAGE).unwrap();
    m.ptes.insert(a + PAGE, 5); // the guard page mapped behind the layer
    assert!(v.check(&m).is_err());
    assert!(v.check_walk(walk(&m)).is_err());
}

type Spin = spin::Mutex<()>;

fn shared(flush: Flush) -> &'static lock_api::Mutex<Spin, Vmalloc<VmapAllocator>> {
    Box::leak(Box::new(lock_api::Mutex::new(tree(flush))))
}

#[test]
fn map_ram_serves_every_cpu_from_one_front_end() {
    let layer = shared(Flush::Lazy { max_bytes: 1 << 30 });
    let mut m = Machine::default();
    let mut f = no_frames();
    let ram = MapRam::new(layer, 2).unwrap();
    let a = ram.map(&mut m, &mut f, 0, &[1, 2, 3]).unwrap();
    let b = ram.map(&mut m, &mut f, 1, &[4]).unwrap();
    assert_eq!(layer.lock().lookup(a), Where::Block { start: a });
    assert_ne!(
        a & !((4u64 << 20) - 1),
        b & !((4u64 << 20) - 1),
        "one block per CPU"
    );
    assert_eq!(layer.lock().check_walk(walk(&m)), Ok(4));
    // A wrong page count is refused and leaves the PTEs as they were.
    let (va, pages) = (a, 2);
    assert_eq!(
        ram.unmap(&mut m, &mut f, 0, a, 2),
        Err(VmError::WrongPageCount { va, pages })
    );
    assert_eq!(
        (m.translate(a), m.translate(a + 2 * PAGE)),
        (Some(1), Some(3))
    );
    // CPU 1 unmaps what CPU 0 mapped.
    ram.unmap(&mut m, &mut f, 1, a, 3).unwrap();
    assert_eq!(m.translate(a), None);
    assert!(m.flushes.is_empty(), "lazy: flushed with the block");
    assert_eq!(
        ram.unmap(&mut m, &mut f, 1, a, 3),
        Err(VmError::NotMapped { va: a })
    );
    ram.unmap(&mut m, &mut f, 0, b, 1).unwrap();
    assert!(ram.unmap_aliases(&mut m, &mut f));
    assert_eq!(m.flushes.len(), 1, "one flush for both CPUs' aliases");
    ram.check().unwrap();
    assert_eq!(ram.live_pages(), 0);
    assert_eq!(ram.map(&mut m, &mut f, 0, &[]), Err(VmError::Empty));
    let (pages, max) = (MAX_PAGES as u64 + 1, MAX_PAGES as u64);
    assert_eq!(
        ram.map(&mut m, &mut f, 0, &[0; MAX_PAGES + 1]),
        Err(VmError::TooManyPages { pages, max })
    );
    assert_eq!(
        ram.map(&mut m, &mut f, 2, &[1]),
        Err(VmError::BadCpu { cpu: 2, cpus: 2 })
    );
}

type Shared = lock_api::Mutex<Spin, Vmalloc<VmapAllocator>>;
type ArcQueue = lock_api::Mutex<Spin, Queue<VmapAllocator, alloc::sync::Arc<Shared>>>;

#[test]
fn map_ram_over_an_arc_refuses_a_bad_unmap_before_touching_a_pte() {
    use alloc::sync::Arc;
    let lazy = Flush::Lazy { max_bytes: 1 << 30 };
    let layer = Arc::new(Shared::new(tree(lazy)));
    let small = mmkit::vblock::Config {
        page_size: PAGE,
        max_alloc: 4,
        bits: 16,
    };
    let ram = MapRamIn::<_, _, ArcQueue>::with_geometry(Arc::clone(&layer), 2, small).unwrap();
    let mut m = Machine::default();
    let mut f = no_frames();
    let a = ram.map(&mut m, &mut f, 0, &[1, 2, 3]).unwrap();
    let v = layer.lock().vmap(&mut m, &mut f, &[7], PAGE).unwrap();
    // Every CPU may cache these translations now.
    for va in [a, a + PAGE, a + 2 * PAGE, v] {
        m.read(va);
    }
    let (va, pages) = (a, 2);
    let e = ram.unmap(&mut m, &mut f, 1, a, 2);
    assert_eq!(e, Err(VmError::WrongPageCount { va, pages }));
    let (va, pages) = (v, 1);
    let e = ram.unmap(&mut m, &mut f, 0, v, 1);
    assert_eq!(e, Err(VmError::WrongPageCount { va, pages }), "a vmap area");
    assert_eq!(m.stale_maps, 0, "no PTE cleared and written again");
    assert_eq!(m.translate(v), Some(7));
    let (pages, max) = (5, 4);
    let e = ram.map(&mut m, &mut f, 0, &[1; 5]);
    assert_eq!(e, Err(VmError::TooManyPages { pages, max }));
    ram.unmap(&mut m, &mut f, 1, a, 3).unwrap();
    assert!(ram.unmap_aliases(&mut m, &mut f));
    ram.check().unwrap();
    assert_eq!(ram.live_pages(), 0);
    let big = mmkit::vblock::Config {
        max_alloc: MAX_PAGES as u64 + 1,
        bits: 1024,
        ..small
    };
    let (pages, max) = (MAX_PAGES as u64 + 1, MAX_PAGES as u64);
    let e = MapRamIn::<_, _, ArcQueue>::with_geometry(layer, 1, big).err();
    assert_eq!(e, Some(VmError::TooManyPages { pages, max }));
}

#[test]
fn a_map_ram_block_cannot_be_freed_behind_its_front_end() {
    let layer = shared(Flush::Lazy { max_bytes: 1 << 30 });
    let mut m = Machine::default();
    let mut f = no_frames();
    let ram = MapRam::new(layer, 1).unwrap();
    let a = ram.map(&mut m, &mut f, 0, &[1]).unwrap();
    let block = a & !((4u64 << 20) - 1);
    let freed = layer.lock().free_block(&mut m, block, true).map(|_| ());
    assert_eq!(freed, Err(VmError::InUse { va: block }));
    assert_eq!(
        layer.lock().unreserve(block),
        Err(VmError::InUse { va: block })
    );
    assert_eq!(m.translate(a), Some(1));
    layer.lock().check(&m).unwrap();
}

#[test]
fn eager_map_ram_flushes_every_unmap() {
    let layer = shared(Flush::Eager);
    let mut m = Machine::default();
    let mut f = no_frames();
    let r = MapRam::new(layer, 1).unwrap();
    let a = r.map(&mut m, &mut f, 0, &[1, 2]).unwrap();
    r.unmap(&mut m, &mut f, 0, a, 2).unwrap();
    assert_eq!(m.flushes, [(a, a + 2 * PAGE)]);
}

#[test]
fn map_ram_purges_the_layer_when_no_block_is_left() {
    let range = VmapAllocator::new(START, START + (8 << 20)).unwrap();
    let lazy = Flush::Lazy { max_bytes: 1 << 30 };
    let layer = Box::leak(Box::new(lock_api::Mutex::<Spin, _>::new(Vmalloc::new(
        range, lazy,
    ))));
    let mut m = Machine::default();
    let mut f = no_frames();
    let ram = MapRam::new(layer, 3).unwrap();
    // Two CPUs fill a block each and unmap it all: both blocks wait on
    // the lazy list, unflushed.
    for cpu in 0..2 {
        let maps: Vec<u64> = (0..16)
            .map(|_| ram.map(&mut m, &mut f, cpu, &[cpu as u64; 64]).unwrap())
            .collect();
        for va in maps {
            ram.unmap(&mut m, &mut f, cpu, va, 64).unwrap();
        }
    }
    assert_eq!(layer.lock().lazy().0, 2);
    assert!(m.flushes.is_empty());
    // CPU 2 needs a block: the layer is purged (one flush) and it retries.
    let va = ram.map(&mut m, &mut f, 2, &[9]).unwrap();
    assert_eq!(m.flushes.len(), 1);
    assert_eq!(m.translate(va), Some(9));
    assert_eq!(layer.lock().lazy().0, 0);
    ram.check().unwrap();
}

#[test]
fn best_fit_placement_passes_through_to_the_range_allocator() {
    let mut m = Machine::default();
    let mut f = no_frames();
    let mut v = tree(Flush::Eager);
    v.set_placement(mmkit::request::Policy::BestFit);
    // Areas of 4 and 1 pages, each with its guard page and a live area
    // after it: freeing the two leaves holes of 5 and 2 pages.
    let big = v.vmap(&mut m, &mut f, &[1; 4], PAGE).unwrap();
    v.vmap(&mut m, &mut f, &[3], PAGE).unwrap();
    let small = v.vmap(&mut m, &mut f, &[2], PAGE).unwrap();
    v.vmap(&mut m, &mut f, &[3], PAGE).unwrap();
    v.vunmap(&mut m, &mut f, big).unwrap();
    v.vunmap(&mut m, &mut f, small).unwrap();
    // One page and its guard: the 2-page hole, not the lowest (5 pages).
    assert_eq!(v.vmap(&mut m, &mut f, &[4], PAGE), Ok(small));
    assert_eq!(v.placement(), mmkit::request::Policy::BestFit);
    // A range allocator that places only lowest refuses best fit.
    let mut lin = Vmalloc::<LinearVmap>::new(LinearVmap::new(START, END).unwrap(), Flush::Eager);
    lin.set_placement(mmkit::request::Policy::BestFit);
    assert_eq!(
        lin.vmap(&mut m, &mut f, &[5], PAGE),
        Err(VmError::PlacementRefused)
    );
    v.check(&m).unwrap();
}

#[test]
fn vrealloc_grows_in_place_over_its_guard_page_then_moves() {
    let mut m = Machine::default();
    let mut f = Pool::new(64);
    let mut v = tree(Flush::Lazy { max_bytes: 1 << 30 });
    let a = v.vmalloc(&mut m, &mut f, PAGE).unwrap();
    assert_eq!(v.vrealloc(&mut m, &mut f, a, 3 * PAGE), Ok(a), "in place");
    assert!((0..3).all(|p| m.translate(a + p * PAGE).is_some()));
    assert_eq!(v.lookup(a + 3 * PAGE), Where::Guard { area: a });
    assert_eq!(m.flushes, [], "nothing was unmapped");
    v.check(&m).unwrap();
    // An area right after it: the next growth moves.
    let b = v.vmalloc(&mut m, &mut f, PAGE).unwrap();
    assert_eq!(b, a + 4 * PAGE);
    let to = v.vrealloc(&mut m, &mut f, a, 5 * PAGE).unwrap();
    assert_ne!(to, a);
    v.check(&m).unwrap();
    // The grown area frees its piece with it: the space is whole again.
    v.vfree(&mut m, &mut f, to).unwrap();
    v.vfree(&mut m, &mut f, b).unwrap();
    assert!(v.purge(&mut m, &mut f));
    v.check(&m).unwrap();
    assert_eq!(v.range().stats().live_areas, 0);
    assert_eq!(f.handed.len(), 0, "every frame back");
}

/// Frames go back one call per run of consecutive frames, whichever way
/// the run was handed out, and a frame at `u64::MAX` ends a run.
#[test]
fn frames_go_back_in_runs_either_way() {
    #[derive(Default)]
    struct Calls(Vec<(u64, u64)>);
    impl FrameSource for Calls {
        fn alloc(&mut self, _max: u64) -> Option<(u64, u64)> {
            None
        }
        fn free(&mut self, pfn: u64, count: u64) {
            self.0.push((pfn, count));
        }
        fn zero(&mut self, _pfn: u64, _count: u64) {}
    }
    let mut c = Calls::default();
    c.free_frames(&[7, 6, 5, 9, 10, 3, 4, 2, u64::MAX, 0]);
    assert_eq!(c.0, [(5, 3), (9, 2), (2, 3), (u64::MAX, 1), (0, 1)]);
    c.free_frames(&[]);
    assert_eq!(c.0.len(), 5);
}

/// The pool, whose batches stop half way while `short` is set.
struct Halves {
    pool: Pool,
    short: bool,
}

impl FrameSource for Halves {
    fn alloc(&mut self, max: u64) -> Option<(u64, u64)> {
        self.pool.alloc(max)
    }
    fn free(&mut self, pfn: u64, count: u64) {
        self.pool.free(pfn, count);
    }
    fn zero(&mut self, _pfn: u64, _count: u64) {}
    fn alloc_frames(&mut self, out: &mut [u64]) -> usize {
        let n = if self.short { out.len() / 2 } else { out.len() };
        self.pool.alloc_frames(&mut out[..n])
    }
}

/// A batch that comes out short is given back whole (after the purge and
/// the second try), the call fails with `NoFrames`, and nothing else
/// changes: no range reserved, no PTE, a growing area as it was.
#[test]
fn a_short_batch_goes_back_whole() {
    for flush in [Flush::Eager, Flush::Lazy { max_bytes: PAGE }] {
        let mut m = Machine::default();
        let mut f = Halves {
            pool: Pool::new(64),
            short: true,
        };
        let mut v = tree(flush);
        let nine = Err(VmError::NoFrames { pages: 9 });
        assert_eq!(v.vmalloc(&mut m, &mut f, 9 * PAGE), nine);
        assert_eq!(v.vzalloc(&mut m, &mut f, 9 * PAGE), nine);
        assert_eq!(f.pool.handed.len(), 0, "the half batches went back");
        assert!(m.ptes.is_empty());
        assert_eq!(v.range().stats().live_areas, 0);
        f.short = false;
        let a = v.vmalloc(&mut m, &mut f, 2 * PAGE).unwrap();
        let before = m.ptes.clone();
        f.short = true;
        let six = Err(VmError::NoFrames { pages: 6 });
        assert_eq!(v.vrealloc(&mut m, &mut f, a, 8 * PAGE), six);
        assert_eq!(f.pool.handed.len(), 2, "only the area's frames out");
        assert_eq!(m.ptes, before);
        assert_eq!(v.lookup(a + 2 * PAGE), Where::Guard { area: a });
        v.check(&m).unwrap();
        v.vfree(&mut m, &mut f, a).unwrap();
        v.purge(&mut m, &mut f);
        assert_eq!(f.pool.handed.len(), 0, "every frame back");
        assert_eq!(v.range().stats().live_areas, 0);
    }
}

/// The default batch keeps nothing of a run that breaks `alloc`'s
/// contract (longer than asked, or reaching `u64::MAX`), gives it back,
/// and stops there; the layer then gives back the rest.
#[test]
fn the_default_batch_refuses_a_run_that_breaks_the_contract() {
    struct Liar {
        runs: Vec<(u64, u64)>,
        freed: Vec<(u64, u64)>,
    }
    impl FrameSource for Liar {
        fn alloc(&mut self, _max: u64) -> Option<(u64, u64)> {
            self.runs.pop()
        }
        fn free(&mut self, pfn: u64, count: u64) {
            self.freed.push((pfn, count));
        }
        fn zero(&mut self, _pfn: u64, _count: u64) {}
    }
    for bad in [(100, 5), (u64::MAX, 1), (7, 0)] {
        let mut src = Liar {
            runs: vec![bad, (10, 2)],
            freed: Vec::new(),
        };
        let mut out = [0; 4];
        assert_eq!(src.alloc_frames(&mut out), 2);
        assert_eq!(out[..2], [10, 11]);
        let kept = (bad.0, bad.1.min(u64::MAX - bad.0));
        assert_eq!(src.freed, [kept]);
    }
    let mut src = Liar {
        runs: vec![(100, 5), (10, 2)],
        freed: Vec::new(),
    };
    let mut m = Machine::default();
    let mut v = tree(Flush::Eager);
    let r = v.vmalloc(&mut m, &mut src, 4 * PAGE);
    assert_eq!(r, Err(VmError::NoFrames { pages: 4 }));
    assert_eq!(src.freed, [(100, 5), (10, 2)]);
    assert!(m.ptes.is_empty());
}

mod tagged {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// `vmalloc_tagged` of 1 to 4 pages.
        Alloc(u64),
        /// `vfree_tagged` of the `n`th live area (modulo their count).
        Free(usize),
        /// `vrealloc` of the `n`th live area to 1 to 6 pages.
        Grow(usize, u64),
        /// Plain `vfree` of the `n`th live area (its tag is dropped).
        PlainFree(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1u64..5).prop_map(Op::Alloc),
            2 => any::<usize>().prop_map(Op::Free),
            1 => (any::<usize>(), 1u64..7).prop_map(|(n, p)| Op::Grow(n, p)),
            1 => any::<usize>().prop_map(Op::PlainFree),
        ]
    }

    proptest! {
        /// Every tag comes back from the free of its own area (after any
        /// `vrealloc` that moved it), the page array gets the frames the
        /// MMU maps, and a free of an address that starts no live area
        /// hands back no tag.
        #[test]
        fn each_free_hands_back_its_areas_tag(ops in proptest::collection::vec(op(), 1..120)) {
            let mut m = Machine::default();
            let mut f = Pool::new(4096);
            let mut v = tree(Flush::Lazy { max_bytes: 64 * PAGE });
            // Live areas: address, tag.
            let mut live: Vec<(u64, u64)> = Vec::new();
            let mut next_tag = 1;
            for op in ops {
                match op {
                    Op::Alloc(pages) => {
                        let mut out = vec![0; pages as usize];
                        let va = v.vmalloc_tagged(&mut m, &mut f, pages * PAGE, PAGE, next_tag, &mut out).unwrap();
                        let mapped: Vec<u64> = (0..pages).map(|i| m.translate(va + i * PAGE).unwrap()).collect();
                        prop_assert_eq!(out, mapped);
                        live.push((va, next_tag));
                        next_tag += 1;
                    }
                    Op::Free(_) | Op::Grow(..) | Op::PlainFree(_) if live.is_empty() => {
                        prop_assert!(v.vfree_tagged(&mut m, &mut f, START).is_err());
                    }
                    Op::Free(n) => {
                        let (va, tag) = live.swap_remove(n % live.len());
                        prop_assert_eq!(v.vfree_tagged(&mut m, &mut f, va), Ok(tag));
                        prop_assert!(v.vfree_tagged(&mut m, &mut f, va).is_err());
                    }
                    Op::Grow(n, pages) => {
                        let i = n % live.len();
                        live[i].0 = v.vrealloc(&mut m, &mut f, live[i].0, pages * PAGE).unwrap();
                    }
                    Op::PlainFree(n) => {
                        let (va, _) = live.swap_remove(n % live.len());
                        v.vfree(&mut m, &mut f, va).unwrap();
                    }
                }
                v.check(&m).unwrap();
            }
        }
    }
}

/// A purge pools the areas it released, a vmalloc of their size reuses the
/// newest, and `purge` gives every pool back.
#[test]
fn purged_areas_are_pooled_and_reused_by_size() {
    let mut m = Machine::default();
    let mut f = Pool::new(64);
    let mut v = tree(Flush::Lazy {
        max_bytes: 3 * PAGE,
    });
    v.set_pools(2, 8);
    let a: Vec<u64> = (0..3)
        .map(|_| v.vmalloc(&mut m, &mut f, PAGE).unwrap())
        .collect();
    let big = v.vmalloc(&mut m, &mut f, 2 * PAGE).unwrap();
    // Two 2-page spans pass the threshold: the purge pools both.
    v.vfree(&mut m, &mut f, a[0]).unwrap();
    v.vfree(&mut m, &mut f, a[1]).unwrap();
    assert_eq!((v.pooled(), v.lazy().0), (2, 0));
    v.check(&m).unwrap();
    // The newest first, without the range allocator: its live count stays.
    let live = v.range().stats().live_areas;
    assert_eq!(v.vmalloc(&mut m, &mut f, PAGE), Ok(a[1]));
    assert_eq!(v.range().stats().live_areas, live);
    // A 3-page span has no pool: it goes back to the range allocator.
    v.vfree(&mut m, &mut f, big).unwrap();
    v.vfree(&mut m, &mut f, a[2]).unwrap();
    assert_eq!(v.pooled(), 2);
    assert_eq!(v.vmalloc(&mut m, &mut f, PAGE), Ok(a[2]));
    v.vfree(&mut m, &mut f, a[1]).unwrap();
    v.vfree(&mut m, &mut f, a[2]).unwrap();
    assert_eq!(v.pooled(), 3);
    v.purge(&mut m, &mut f);
    assert_eq!((v.pooled(), v.range().stats().live_areas), (0, 0));
    v.check(&m).unwrap();
}
