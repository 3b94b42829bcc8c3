//! The range allocator contract (`mmkit::range`), checked against a
//! brute-force model on every implementation: the tree allocator
//! (`mmkit::vmap::VmapAllocator`) and the old busy-list design
//! (`mmkit::baseline::linear_vmap::LinearVmap`).
//!
//! The model keeps the free space as a sorted `Vec` of maximal free ranges
//! and finds the lowest fit by scanning it, so its answers are the contract's
//! by construction. The proptest drives an allocator and the model with the
//! same random operations and compares, after every step: the result
//! (address or error), every flush range, the counters of `stats()`, and
//! `check()`.

include!("models/range.rs");

use core::alloc::Layout;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn baseline_matches_model(space in space_strategy(), ops in prop::collection::vec(op_strategy(), 1..200)) {
        run_ops(linear, space, &ops)?;
    }

    #[test]
    fn vmap_matches_model(space in space_strategy(), ops in prop::collection::vec(op_strategy(), 1..200)) {
        run_ops(tree, space, &ops)?;
    }
}

// ---------------------------------------------------------------------------
// Contract unit tests, each run on both implementations
// ---------------------------------------------------------------------------

/// Declares `#[test] fn NAME_baseline` and `NAME_vmap` from one generic body.
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod on_baseline { $( #[test] fn $name() { super::$name(super::linear); } )* }
        mod on_vmap { $( #[test] fn $name() { super::$name(super::tree); } )* }
    };
}

both!(
    fit_types,
    merge_both_sides,
    lazy_max_is_strictly_greater,
    lowering_lazy_max_purges,
    purge_on_nospace_then_retry,
    no_purge_without_lazy_areas,
    flush_covers_exactly_the_lazy_areas,
    bad_frees_change_nothing,
    invalid_requests,
    window_is_clamped,
    edges_near_u64_max,
    align_two_to_the_63,
    panicking_hook_stays_installed,
);

fn ok<A: RangeAllocator>(a: &A) {
    a.check().unwrap();
}

/// FL, LE, RE and NE splits of a free block `[0x1000, 0x5000)`.
fn fit_types<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let block = |make: fn(u64, u64) -> A| {
        // Busy [0, 0x1000) and [0x5000, 0x6000) around the free block.
        let mut a = make(0, 0x6000);
        a.alloc(0x1000, 1).unwrap();
        let mid = a.alloc(0x4000, 1).unwrap();
        a.alloc(0x1000, 1).unwrap();
        a.free(mid).unwrap();
        assert_eq!(a.stats().free_blocks, 1);
        a
    };
    // FL: the request is the whole block.
    let mut a = block(make);
    assert_eq!(a.alloc(0x4000, 0x1000), Ok(0x1000));
    assert_eq!((a.stats().free_blocks, a.stats().free_bytes), (0, 0));
    ok(&a);
    // LE: the left edge fits; the block keeps its right part.
    let mut a = block(make);
    assert_eq!(a.alloc(0x1000, 0x1000), Ok(0x1000));
    assert_eq!((a.stats().free_blocks, a.stats().largest_free), (1, 0x3000));
    ok(&a);
    // RE: the window forces the right edge.
    let mut a = block(make);
    assert_eq!(a.alloc_in(0x1000, 1, 0x4000, 0x6000), Ok(0x4000));
    assert_eq!((a.stats().free_blocks, a.stats().largest_free), (1, 0x3000));
    ok(&a);
    // NE: the alignment lands in the middle; the block splits in two.
    let mut a = block(make);
    assert_eq!(a.alloc(0x1000, 0x2000), Ok(0x2000));
    let s = a.stats();
    assert_eq!(
        (s.free_blocks, s.free_bytes, s.largest_free),
        (2, 0x3000, 0x2000)
    );
    ok(&a);
}

fn merge_both_sides<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let mut a = make(0, 0x5000);
    let x: Vec<u64> = (0..5).map(|_| a.alloc(0x1000, 1).unwrap()).collect();
    a.free(x[1]).unwrap();
    a.free(x[3]).unwrap();
    assert_eq!(a.stats().free_blocks, 2);
    // Freeing x[2] joins [0x1000, 0x4000) into one block.
    a.free(x[2]).unwrap();
    let s = a.stats();
    assert_eq!((s.free_blocks, s.largest_free), (1, 0x3000));
    assert_eq!(a.alloc(0x3000, 1), Ok(0x1000));
    ok(&a);
}

fn lazy_max_is_strictly_greater<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let mut a = make(0, 0x10000);
    let log: Log = Arc::default();
    let sink = log.clone();
    a.set_flush_hook(Some(Box::new(move |s, e| {
        sink.lock().unwrap().push((s, e))
    })));
    a.set_lazy_max(0x2000);
    let x: Vec<u64> = (0..4).map(|_| a.alloc(0x1000, 1).unwrap()).collect();
    a.free_lazy(x[0]).unwrap();
    a.free_lazy(x[2]).unwrap();
    // Exactly lazy_max lazily freed bytes: no purge yet.
    assert_eq!(a.stats().lazy_bytes, 0x2000);
    assert!(log.lock().unwrap().is_empty());
    ok(&a);
    a.free_lazy(x[1]).unwrap();
    assert_eq!(*log.lock().unwrap(), vec![(0, 0x3000)]);
    let s = a.stats();
    assert_eq!(
        (s.lazy_bytes, s.lazy_areas, s.flushes, s.free_blocks),
        (0, 0, 1, 2)
    );
    assert_eq!(a.alloc(0x3000, 1), Ok(0));
    ok(&a);
}

fn lowering_lazy_max_purges<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let mut a = make(0, 0x10000);
    let log: Log = Arc::default();
    let sink = log.clone();
    a.set_flush_hook(Some(Box::new(move |s, e| {
        sink.lock().unwrap().push((s, e))
    })));
    let x = a.alloc(0x3000, 1).unwrap();
    a.free_lazy(x).unwrap();
    a.set_lazy_max(0x3000);
    assert!(log.lock().unwrap().is_empty());
    a.set_lazy_max(0x2fff);
    assert_eq!(*log.lock().unwrap(), vec![(0, 0x3000)]);
    assert_eq!(a.stats().lazy_bytes, 0);
    ok(&a);
}

fn purge_on_nospace_then_retry<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let mut a = make(0x1000, 0x5000);
    let log: Log = Arc::default();
    let sink = log.clone();
    a.set_flush_hook(Some(Box::new(move |s, e| {
        sink.lock().unwrap().push((s, e))
    })));
    let x = a.alloc(0x2000, 1).unwrap();
    let y = a.alloc(0x2000, 1).unwrap();
    a.free_lazy(y).unwrap();
    // The lazy area is not reusable; the allocation fails, purges, retries.
    assert_eq!(a.alloc(0x1000, 1), Ok(0x3000));
    assert_eq!(*log.lock().unwrap(), vec![(0x3000, 0x5000)]);
    assert_eq!(a.stats().lazy_bytes, 0);
    a.free(x).unwrap();
    ok(&a);
}

fn no_purge_without_lazy_areas<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let mut a = make(0, 0x1000);
    let log: Log = Arc::default();
    let sink = log.clone();
    a.set_flush_hook(Some(Box::new(move |s, e| {
        sink.lock().unwrap().push((s, e))
    })));
    a.alloc(0x1000, 1).unwrap();
    assert_eq!(a.alloc(1, 1), Err(AllocError::NoSpace));
    assert!(!a.purge(&mut |_, _| panic!("nothing to flush")));
    assert!(log.lock().unwrap().is_empty());
    assert_eq!(a.stats().flushes, 0);
    ok(&a);
}

fn flush_covers_exactly_the_lazy_areas<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let mut a = make(0, 0x20000);
    let x: Vec<u64> = (0..6)
        .map(|i| a.alloc(0x1000 * (i + 1), 1).unwrap())
        .collect();
    // Lazy: [0x1000, 0x3000) and [0xa000, 0xf000); x[3] in between stays live.
    a.free_lazy(x[1]).unwrap();
    a.free_lazy(x[4]).unwrap();
    let mut seen = Vec::new();
    assert!(a.purge(&mut |s, e| seen.push((s, e))));
    assert_eq!(seen, vec![(0x1000, 0xf000)]);
    // The live area inside the flush range is still live.
    assert_eq!(a.free(x[3]), Ok(0x4000));
    assert!(!a.purge(&mut |_, _| panic!("nothing left")));
    ok(&a);
}

fn bad_frees_change_nothing<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let mut a = make(0x1000, 0x9000);
    let x = a.alloc(0x2000, 1).unwrap();
    let y = a.alloc(0x2000, 1).unwrap();
    a.free(y).unwrap();
    let z = a.alloc(0x1000, 1).unwrap();
    a.free_lazy(z).unwrap();
    let before = a.stats();
    for addr in [
        y + 0x1000,
        x + 1,
        x + 0x1fff,
        0,
        0x9000,
        u64::MAX,
        z,
        0x8000,
    ] {
        assert_eq!(a.free(addr), Err(FreeError::NotAllocated), "free {addr:#x}");
        assert_eq!(
            a.free_lazy(addr),
            Err(FreeError::NotAllocated),
            "free_lazy {addr:#x}"
        );
        assert_eq!(a.stats(), before);
        ok(&a);
    }
    assert_eq!(a.free(x), Ok(0x2000));
    assert_eq!(a.free(x), Err(FreeError::NotAllocated));
    ok(&a);
}

fn invalid_requests<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let mut a = make(0, 0x1000);
    let before = a.stats();
    assert_eq!(a.alloc(0, 1), Err(AllocError::Invalid));
    for align in [0, 3, 0x1001, u64::MAX] {
        assert_eq!(a.alloc(1, align), Err(AllocError::Invalid));
    }
    assert_eq!(a.alloc_in(1, 1, 0x10, 0x10), Err(AllocError::Invalid));
    assert_eq!(a.alloc_in(1, 1, 0x20, 0x10), Err(AllocError::Invalid));
    assert_eq!(a.stats(), before);
    ok(&a);
}

fn window_is_clamped<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let mut a = make(0x1000, 0x3000);
    assert_eq!(a.alloc_in(0x1000, 1, 0, u64::MAX), Ok(0x1000));
    assert_eq!(a.alloc_in(0x800, 1, 0x2800, u64::MAX), Ok(0x2800));
    // A window wholly outside the space is valid but finds nothing.
    assert_eq!(a.alloc_in(1, 1, 0x3000, 0x4000), Err(AllocError::NoSpace));
    assert_eq!(
        a.alloc_in(0x801, 1, 0x2000, 0x2800),
        Err(AllocError::NoSpace)
    );
    assert_eq!(a.alloc_in(0x800, 1, 0x2000, 0x2800), Ok(0x2000));
    ok(&a);
}

fn edges_near_u64_max<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let top = u64::MAX;
    let mut a = make(top - 0x3000, top);
    assert_eq!(a.alloc(u64::MAX, 1), Err(AllocError::NoSpace));
    assert_eq!(a.alloc(0x1000, 1 << 62), Err(AllocError::NoSpace));
    assert_eq!(a.alloc_in(0x1000, 1, top - 0x1000, top), Ok(top - 0x1000));
    assert_eq!(a.alloc(0x2000, 1), Ok(top - 0x3000));
    assert_eq!(a.alloc(1, 1), Err(AllocError::NoSpace));
    assert_eq!(a.free(top - 0x1000), Ok(0x1000));
    // top - 0x1000 = 0x..efff is odd: only alignment 1 fits there.
    assert_eq!(a.alloc(0x1000, 0x1000), Err(AllocError::NoSpace));
    assert_eq!(a.alloc(0x1000, 1), Ok(top - 0x1000));
    assert_eq!(a.stats().free_bytes, 0);
    ok(&a);
    // The whole line but its last address.
    let mut a = make(0, top);
    assert_eq!(a.alloc(top, 1), Ok(0));
    assert_eq!(a.alloc(1, 1), Err(AllocError::NoSpace));
    assert_eq!(a.free(0), Ok(top));
    assert_eq!(a.alloc(top - 2, 2), Ok(0));
    // Free: [top - 2, top). No multiple of 4 in it; top - 1 is even.
    assert_eq!(a.alloc(1, 4), Err(AllocError::NoSpace));
    assert_eq!(a.alloc(1, 2), Ok(top - 1));
    assert_eq!(a.alloc(1, 1), Ok(top - 2));
    assert_eq!(a.alloc(1, 1), Err(AllocError::NoSpace));
    ok(&a);
}

fn align_two_to_the_63<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let mut a = make(1, u64::MAX);
    assert_eq!(a.alloc(1, 1 << 63), Ok(1 << 63));
    assert_eq!(a.alloc(1, 1 << 63), Err(AllocError::NoSpace));
    assert_eq!(a.alloc((1 << 63) - 1, 1), Ok(1));
    // [2^63 + 1, u64::MAX) holds 2^63 - 2 bytes, not 2^63 - 1.
    assert_eq!(a.alloc((1 << 63) - 1, 1), Err(AllocError::NoSpace));
    assert_eq!(a.alloc((1 << 63) - 2, 1), Ok((1 << 63) + 1));
    assert_eq!(a.alloc(1, 1), Err(AllocError::NoSpace));
    ok(&a);
}

/// A flush hook that panics once is still installed
/// afterwards, so later automatic purges call it and `lazy_max` holds.
fn panicking_hook_stays_installed<A: RangeAllocator>(make: fn(u64, u64) -> A) {
    let mut a = make(0, 0x10000);
    a.set_lazy_max(0);
    let log: Log = Arc::default();
    let sink = log.clone();
    let mut first = true;
    a.set_flush_hook(Some(Box::new(move |s, e| {
        if std::mem::take(&mut first) {
            panic!("flush hook fails once");
        }
        sink.lock().unwrap().push((s, e));
    })));
    let x = a.alloc(0x1000, 1).unwrap();
    let y = a.alloc(0x1000, 1).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.free_lazy(x)));
    assert!(r.is_err(), "the hook panicked through free_lazy");
    ok(&a); // consistent, lazy_max included, though the hook panicked
            // The next threshold purge goes through the same hook again.
    a.free_lazy(y).unwrap();
    assert_eq!(a.stats().lazy_bytes, 0);
    assert!(!log.lock().unwrap().is_empty(), "hook lost after a panic");
    ok(&a);
}

// ---------------------------------------------------------------------------
// A tree of three levels and more
// ---------------------------------------------------------------------------

/// The deep runs' size: areas cut before the random steps.
const DEEP_AREAS: u64 = 6000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10))]

    /// The tree allocator at about 3,000 free blocks (three levels: a root,
    /// inner nodes, leaves), where the lowest fit is a choice among many
    /// blocks of a leaf and many leaves.
    #[test]
    fn vmap_matches_model_on_a_deep_tree(seed in any::<u64>(), ops in prop::collection::vec(deep_op(), 1..200)) {
        run_deep(tree, DEEP_AREAS, seed, &ops).map_err(TestCaseError::fail)?;
    }
}

/// The deep runs reach what they claim: a shrunk set-up (fewer areas, a
/// larger leaf) fails here, not silently.
#[test]
fn deep_runs_reach_three_levels_and_thousands_of_blocks() {
    let (mut a, _) = instrumented(&tree, (0, 1 << 40));
    let mut m = Model::new(0, 1 << 40);
    fragment(&mut a, &mut m, DEEP_AREAS, 1);
    let blocks = a.stats().free_blocks;
    assert!(blocks >= 2900, "{blocks} free blocks");
    assert!(
        min_levels(blocks - 1) >= 3,
        "{blocks} free blocks fit in two levels"
    );
    // Every hole length is present, so a leaf's fitting blocks differ.
    let lens: std::collections::BTreeSet<u64> = m.free.iter().map(|(s, e)| e - s).collect();
    for pages in 1..=4 {
        assert!(lens.contains(&(pages * PAGE)), "no hole of {pages} pages");
    }
}

/// Requests of every size up to four pages, on a fragmented space: each
/// is the model's lowest fit (a seeded replay of the deep run, small enough
/// to read when it fails).
#[test]
fn deep_tree_fits_are_the_lowest() {
    let (mut a, log) = instrumented(&tree, (0, 1 << 40));
    let mut m = Model::new(0, 1 << 40);
    let mut live = fragment(&mut a, &mut m, DEEP_AREAS, 7);
    for k in 0..400u64 {
        let size = 1 + (k * 0x2e8f) % (4 * PAGE);
        let s = if k % 3 == 2 {
            Step::Free(live[(k * 7919) as usize % live.len()].0)
        } else {
            Step::Alloc(size, 1, 0, u64::MAX)
        };
        let got = step_with(&mut a, &mut m, &log, s, k % 50 == 0).unwrap();
        live.extend(got);
    }
}

/// A window that ends inside the lowest block long enough for the request:
/// nothing fits (every block below is too short, every one above starts
/// too late), though the plain descent reaches that block first.
#[test]
fn deep_tree_window_ending_inside_the_lowest_fit() {
    for size in [3, PAGE, PAGE + 5, 2 * PAGE, 3 * PAGE, 4 * PAGE] {
        let (mut a, log) = instrumented(&tree, (0, 1 << 40));
        let mut m = Model::new(0, 1 << 40);
        fragment(&mut a, &mut m, DEEP_AREAS, size);
        let s = m.lowest_fit(size, 1, 0, u64::MAX).unwrap();
        for hi in [s + 1, s + size - 1] {
            step(&mut a, &mut m, &log, Step::Alloc(size, 1, 0, hi)).unwrap();
        }
        // And one that ends exactly at the fit's end takes it.
        let got = step(&mut a, &mut m, &log, Step::Alloc(size, 1, 0, s + size)).unwrap();
        assert_eq!(got, Some((s, s + size)));
    }
}

/// `reserve` makes room for the free tree's nodes ahead, and `stats`
/// counts that room in the metadata: each block is a start and an end in
/// a leaf, so room for `n` more blocks is at least `16 * n` bytes.
#[test]
fn reserved_room_is_counted_in_the_metadata() {
    let mut a = tree(0, 1 << 40);
    let before = a.stats().metadata_bytes;
    a.reserve(4000);
    let after = a.stats().metadata_bytes;
    assert!(
        after >= before + 4000 * 16,
        "metadata {before} -> {after} bytes after reserving 4,000 blocks"
    );
    ok(&a);
}

/// The tree's released nodes are handed out again: a deep tree taken down
/// to one block (every area freed, its leaves and inner nodes released)
/// and built up again the same way is the model's, consistent, and needs
/// no more metadata than the first build (every node comes from the
/// released ones).
#[test]
fn a_deep_tree_rebuilt_after_collapsing_reuses_its_nodes() {
    let mut a = tree(0, 1 << 40);
    let mut m = Model::new(0, 1 << 40);
    let live = fragment(&mut a, &mut m, DEEP_AREAS, 3);
    let built = a.stats().metadata_bytes;
    for &(s, e) in live.iter().skip(1).step_by(2) {
        assert_eq!(a.free(s), Ok(e - s));
        m.free(s).unwrap();
    }
    a.check().unwrap();
    assert_eq!(a.stats().free_blocks, 1, "every area freed");
    fragment(&mut a, &mut m, DEEP_AREAS, 3);
    assert!(a.stats().free_blocks >= 2900);
    let rebuilt = a.stats().metadata_bytes;
    assert!(
        rebuilt <= built,
        "metadata {built} bytes built, {rebuilt} rebuilt on the released nodes"
    );
}

/// The lazy list's room is metadata too: 16 bytes an area at least.
#[test]
fn lazy_areas_are_counted_in_the_metadata() {
    let mut a = tree(0, 1 << 40);
    a.set_lazy_max(u64::MAX);
    let live: Vec<u64> = (0..1000).map(|_| a.alloc(PAGE, PAGE).unwrap()).collect();
    let before = a.stats().metadata_bytes;
    for &x in &live {
        a.free_lazy(x).unwrap();
    }
    let after = a.stats().metadata_bytes;
    // And not more than a few hundred bytes an area (a sum, not a product).
    assert!(
        after >= before + 1000 * 16 && after < 1 << 20,
        "metadata {before} -> {after} bytes with 1,000 lazy areas"
    );
}

/// The busy index is metadata: a start and an end, 16 bytes at least, for
/// each live area; and not more than a few times that.
#[test]
fn live_areas_are_counted_in_the_metadata() {
    let mut a = tree(0, 1 << 40);
    let empty = a.stats().metadata_bytes;
    for _ in 0..10_000 {
        a.alloc(PAGE, PAGE).unwrap();
    }
    let full = a.stats().metadata_bytes;
    assert!(
        full >= empty + 10_000 * 16 && full < empty + 10_000 * 256,
        "metadata {empty} -> {full} bytes with 10,000 live areas"
    );
}

/// `VmapAllocator`'s own methods (what a user calls) answer as the
/// `RangeAllocator` trait's, which the models drive; `area_size` reads a
/// live area's size back and nothing else.
#[test]
fn inherent_methods_answer_as_the_trait() {
    let (mut a, mut b) = (tree(0, 1 << 30), tree(0, 1 << 30));
    let mut live = Vec::new();
    for i in 1..200u64 {
        let (size, align) = (i * PAGE, PAGE << (i % 4));
        let (lo, hi) = (i * 3 * PAGE, 1 << 30);
        let x = a.alloc_in(size, align, lo, hi);
        assert_eq!(x, RangeAllocator::alloc_in(&mut b, size, align, lo, hi));
        let x = x.unwrap();
        assert_eq!(a.area_size(x), Some(size));
        assert_eq!(a.area_size(x + PAGE), None);
        live.push(x);
        if i % 3 == 0 {
            let y = live.swap_remove(i as usize % live.len());
            assert_eq!(a.free_lazy(y), RangeAllocator::free_lazy(&mut b, y));
            assert_eq!(a.area_size(y), None);
        }
        if i % 50 == 0 {
            // Down to no lazy bytes allowed: both purge now.
            a.set_lazy_max(0);
            RangeAllocator::set_lazy_max(&mut b, 0);
            assert_eq!(a.stats().lazy_bytes, 0);
            a.set_lazy_max(1 << 40);
            RangeAllocator::set_lazy_max(&mut b, 1 << 40);
        }
        assert_eq!(comparable(a.stats()), comparable(b.stats()));
    }
    // Only an allocator made without a busy index needs sizes to free.
    assert!(!a.frees_need_size());
    assert!(VmapAllocator::without_busy_index(0, 1 << 20)
        .unwrap()
        .frees_need_size());
    // A flush hook installed through the allocator's own method is called.
    let flushes = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let f = flushes.clone();
    a.set_flush_hook(Some(Box::new(move |_, _| {
        f.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    })));
    let y = live.pop().unwrap();
    a.free_lazy(y).unwrap();
    a.set_lazy_max(0);
    assert_eq!(flushes.load(std::sync::atomic::Ordering::Relaxed), 1);
    a.set_flush_hook(None);
    // A layout's size and alignment; freed only with its own size.
    let l = Layout::from_size_align(24, 8).unwrap();
    let x = a.alloc_layout(l).unwrap();
    assert_eq!(Ok(x), RangeAllocator::alloc(&mut b, 24, 8));
    assert_eq!(
        a.free_layout(x, Layout::new::<u8>()),
        Err(FreeError::NotAllocated)
    );
    assert_eq!(a.free_layout(x, l), Ok(()));
    assert_eq!(a.area_size(x), None);
    ok(&a);
}

// ---------------------------------------------------------------------------
// Batches of frees
// ---------------------------------------------------------------------------

/// What a batch does to a set-up: the areas it names (live ones, in a
/// shuffled order) and one bad entry, maybe.
#[derive(Debug, Clone)]
struct Batch {
    /// Area sizes in pages, allocated back to back.
    pages: Vec<u8>,
    /// Per area: 0 stays live, 1 freed first, 2 lazily freed first, 3 and
    /// above in the batch.
    fate: Vec<u8>,
    /// The batch's order: a rotation and whether it is reversed.
    turn: (usize, bool),
    /// A bad entry put at this position: another end, a freed area, an
    /// interior address.
    bad: Option<(usize, u8)>,
}

fn batch_strategy() -> impl Strategy<Value = Batch> {
    (1usize..48).prop_flat_map(|n| {
        (
            prop::collection::vec(1u8..5, n),
            prop::collection::vec(0u8..8, n),
            (any::<usize>(), any::<bool>()),
            proptest::option::of((any::<usize>(), 0u8..3)),
        )
            .prop_map(|(pages, fate, turn, bad)| Batch {
                pages,
                fate,
                turn,
                bad,
            })
    })
}

/// Runs `b` on `a` and the model: the batch's result against the model's
/// frees one at a time (stopping at the first bad entry), then the state,
/// and the allocations that follow, against the model.
fn run_batch<A: RangeAllocator>(mut a: A, b: &Batch, ends_known: bool) -> Result<(), String> {
    const P: u64 = 0x1000;
    let mut m = Model::new(0, 1 << 24);
    let mut areas = Vec::new();
    for &p in &b.pages {
        let size = u64::from(p) * P;
        let got = a.alloc(size, P);
        if got != m.alloc(size, P, 0, u64::MAX) {
            return Err(format!("set-up alloc {got:?}"));
        }
        let s = got.map_err(|e| format!("{e:?}"))?;
        areas.push((s, s + size));
    }
    let mut list = Vec::new();
    for (&(s, e), &f) in areas.iter().zip(&b.fate) {
        match f {
            0 => {}
            1 => {
                a.free(s).map_err(|e| format!("{e:?}"))?;
                m.free(s).unwrap();
            }
            2 => {
                a.free_lazy(s).map_err(|e| format!("{e:?}"))?;
                m.free_lazy(s).unwrap();
            }
            _ => list.push((s, e)),
        }
    }
    let k = list.len().max(1);
    list.rotate_left(b.turn.0 % k);
    if b.turn.1 {
        list.reverse();
    }
    if let Some((at, kind)) = b.bad {
        let (s, e) = areas[at % areas.len()];
        let entry = match kind {
            0 => (s, e + P),
            1 => (s + P / 2, e),
            _ => (s, e),
        };
        list.insert(at % (list.len() + 1), entry);
    }
    let mut want = Ok(());
    for (i, &(s, e)) in list.iter().enumerate() {
        let err = match m.live.get(&s) {
            None => Some(FreeError::NotAllocated),
            Some(&end) if ends_known && end != e => Some(FreeError::SizeMismatch),
            Some(_) => None,
        };
        if let Some(err) = err {
            want = Err((i, err));
            break;
        }
        m.free(s).unwrap();
    }
    let got = a.free_batch(&list);
    if got != want {
        return Err(format!("free_batch {got:?}, model {want:?}"));
    }
    a.check().map_err(|e| e.to_string())?;
    if comparable(a.stats()) != m.stats() {
        return Err(format!("stats {:?}, model {:?}", a.stats(), m.stats()));
    }
    for &p in &b.pages {
        let size = u64::from(p) * P;
        let (got, want) = (a.alloc(size, P), m.alloc(size, P, 0, u64::MAX));
        if got != want {
            return Err(format!("alloc after: {got:?}, model {want:?}"));
        }
    }
    a.check().map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The tree joins runs of adjacent areas (in either direction); the
    /// busy list frees one at a time (the default): both as the model's
    /// frees one at a time.
    #[test]
    fn free_batch_matches_model(b in batch_strategy()) {
        run_batch(tree(0, 1 << 24), &b, true).map_err(TestCaseError::fail)?;
        run_batch(linear(0, 1 << 24), &b, false).map_err(TestCaseError::fail)?;
    }
}

/// A batch of adjacent areas, freed downwards, leaves one free block; a
/// bad entry in the middle frees the areas before it alone.
#[test]
fn free_batch_joins_runs_and_stops_at_a_bad_entry() {
    let mut a = tree(0, 1 << 20);
    let x: Vec<u64> = (0..8).map(|_| a.alloc(0x1000, 0x1000).unwrap()).collect();
    let mut list: Vec<(u64, u64)> = x.iter().rev().map(|&s| (s, s + 0x1000)).collect();
    list[3].1 += 0x1000; // x[4]'s end is wrong
    assert_eq!(a.free_batch(&list), Err((3, FreeError::SizeMismatch)));
    assert_eq!((a.stats().live_areas, a.stats().free_blocks), (5, 1));
    assert_eq!(a.free(x[4]), Ok(0x1000));
    assert_eq!(a.free_batch(&list[4..]), Ok(()));
    assert_eq!((a.stats().live_areas, a.stats().free_blocks), (0, 1));
    a.check().unwrap();
}

// ---------------------------------------------------------------------------
// Detached areas
// ---------------------------------------------------------------------------

/// One step on detached areas; indexes pick among the areas allocated so
/// far and the handles held.
#[derive(Debug, Clone)]
enum DetachOp {
    /// Detach area `.0` by its extent (0), with another end (1) or by an
    /// interior address (2).
    Detach(usize, u8),
    Free(usize),
    Lazy(usize),
    /// Release every handle held, rotated by `.0`, reversed if `.1`, with
    /// a handle of another allocator put at `.2` if any.
    Release(usize, bool, Option<usize>),
    /// Allocate this many pages.
    Alloc(u8),
    Purge,
}

fn detach_op() -> impl Strategy<Value = DetachOp> {
    prop_oneof![
        6 => (any::<usize>(), prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)])
            .prop_map(|(i, k)| DetachOp::Detach(i, k)),
        2 => any::<usize>().prop_map(DetachOp::Free),
        1 => any::<usize>().prop_map(DetachOp::Lazy),
        2 => (any::<usize>(), any::<bool>(), proptest::option::of(any::<usize>()))
            .prop_map(|(r, v, f)| DetachOp::Release(r, v, f)),
        3 => (1u8..5).prop_map(DetachOp::Alloc),
        1 => Just(DetachOp::Purge),
    ]
}

/// Runs `ops` on `a` and the model, comparing every result, the handles
/// left after a release, `check()` and the stats after each step. The
/// model's detached areas are neither live nor free; an allocator that
/// keeps them (`keeps`: the tree) reports them as detached, and one that
/// takes the trait's default keeps them live until their release, so
/// only good detaches, and no frees of detached areas, are run on it.
fn run_detach<A: RangeAllocator>(mut a: A, ops: &[DetachOp], keeps: bool) -> Result<(), String> {
    const P: u64 = 0x1000;
    let mut m = Model::new(0, 1 << 24);
    let mut detached: BTreeMap<u64, u64> = BTreeMap::new();
    let mut other = VmapAllocator::new(1 << 30, 1 << 31).unwrap();
    let mut areas: Vec<(u64, u64)> = Vec::new();
    let mut held: Vec<mmkit::range::Detached> = Vec::new();
    for op in ops {
        let pick = |i: usize| areas.get(i % areas.len().max(1)).copied();
        match *op {
            DetachOp::Alloc(p) => {
                let size = u64::from(p) * P;
                let (got, want) = (a.alloc(size, P), m.alloc(size, P, 0, u64::MAX));
                if got != want {
                    return Err(format!("alloc {got:?}, model {want:?}"));
                }
                if let Ok(s) = got {
                    areas.push((s, s + size));
                }
            }
            DetachOp::Detach(i, kind) => {
                let Some((s, e)) = pick(i) else { continue };
                let (s, e) = match kind {
                    0 => (s, e),
                    1 => (s, e + P),
                    _ => (s + P / 2, e),
                };
                let want = match m.live.get(&s) {
                    Some(&end) if end == e => Ok((s, e)),
                    Some(_) => Err(FreeError::SizeMismatch),
                    None => Err(FreeError::NotAllocated),
                };
                if !keeps && (want.is_err() || detached.contains_key(&s)) {
                    continue; // the default checks nothing at the detach
                }
                let got = a.detach(s, e);
                if got.as_ref().map(|d| (d.start(), d.end())).map_err(|e| *e) != want {
                    return Err(format!("detach {s:#x}..{e:#x}: {got:?}, model {want:?}"));
                }
                if let Ok(d) = got {
                    if keeps {
                        m.live.remove(&s);
                    }
                    detached.insert(s, e);
                    held.push(d);
                }
            }
            DetachOp::Free(i) | DetachOp::Lazy(i) => {
                let Some((s, _)) = pick(i) else { continue };
                if !keeps && detached.contains_key(&s) {
                    continue;
                }
                let lazy = matches!(op, DetachOp::Lazy(_));
                let (got, want) = if lazy {
                    (a.free_lazy(s), m.free_lazy(s))
                } else {
                    (a.free(s), m.free(s))
                };
                if got != want {
                    return Err(format!(
                        "free {s:#x} (lazy {lazy}): {got:?}, model {want:?}"
                    ));
                }
            }
            DetachOp::Release(turn, rev, foreign) => {
                let n = held.len().max(1);
                held.rotate_left(turn % n);
                if rev {
                    held.reverse();
                }
                let mut bad = None;
                if let (Some(at), true) = (foreign, keeps) {
                    let x = other.alloc(P, P).unwrap();
                    let at = at % (held.len() + 1);
                    held.insert(at, other.detach(x, x + P).unwrap());
                    bad = Some(at);
                }
                let ends: Vec<(u64, u64)> = held.iter().map(|d| (d.start(), d.end())).collect();
                let done = bad.unwrap_or(ends.len());
                let want = if bad.is_some() {
                    Err(FreeError::NotAllocated)
                } else {
                    Ok(())
                };
                let mut it = std::mem::take(&mut held).into_iter();
                let got = a.release_detached(&mut it);
                if got.as_ref().map(|_| ()).map_err(|e| e.1) != want {
                    return Err(format!("release {ends:x?}: {got:?}, model {want:?}"));
                }
                held = got.err().map(|e| e.0).into_iter().chain(it).collect();
                let left: Vec<(u64, u64)> = held.iter().map(|d| (d.start(), d.end())).collect();
                if left != ends[done..] {
                    return Err(format!("release {ends:x?} left {left:x?}"));
                }
                for &(s, e) in &ends[..done] {
                    detached.remove(&s);
                    if keeps {
                        m.give(s, e);
                    } else {
                        m.free(s).unwrap();
                    }
                }
                if bad.is_some() {
                    let d = held.remove(0);
                    other.release_detached([d]).unwrap();
                }
            }
            DetachOp::Purge => {
                let (got, want) = (a.purge(&mut |_, _| {}), m.purge());
                if got != want {
                    return Err(format!("purge {got}, model {want}"));
                }
            }
        }
        a.check().map_err(|e| format!("after {op:?}: {e}"))?;
        let mut want = m.stats();
        if keeps {
            want.detached_areas = detached.len() as u64;
            want.detached_bytes = detached.iter().map(|(s, e)| e - s).sum();
        }
        if comparable(a.stats()) != want {
            return Err(format!(
                "after {op:?}: stats {:?}, model {want:?}",
                a.stats()
            ));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The tree takes detached areas out of its live ones (refusing a
    /// second detach or free at once) and releases a batch in any order
    /// as the model's merges, stopping at a handle of another allocator;
    /// the busy list, on the trait's default, keeps them live until then.
    #[test]
    fn detach_matches_model(ops in prop::collection::vec(detach_op(), 1..120)) {
        run_detach(tree(0, 1 << 24), &ops, true).map_err(TestCaseError::fail)?;
        run_detach(linear(0, 1 << 24), &ops, false).map_err(TestCaseError::fail)?;
    }
}

/// Areas detached side by side come back as one free block; a handle of
/// another allocator stops the release there, changing nothing after it.
#[test]
fn release_joins_runs_and_stops_at_a_foreign_handle() {
    let mut a = tree(0, 1 << 20);
    let mut b = tree(1 << 20, 1 << 21);
    let x: Vec<u64> = (0..8).map(|_| a.alloc(0x1000, 0x1000).unwrap()).collect();
    let y = b.alloc(0x1000, 0x1000).unwrap();
    let mut held: Vec<_> = x
        .iter()
        .rev()
        .map(|&s| a.detach(s, s + 0x1000).unwrap())
        .collect();
    assert_eq!(a.detach(x[0], x[0] + 0x1000), Err(FreeError::NotAllocated));
    assert_eq!(a.free(x[0]), Err(FreeError::NotAllocated));
    let s = a.stats();
    assert_eq!(
        (s.live_areas, s.detached_areas, s.detached_bytes),
        (0, 8, 0x8000)
    );
    held.insert(4, b.detach(y, y + 0x1000).unwrap());
    let mut it = held.into_iter();
    let (foreign, why) = a.release_detached(&mut it).unwrap_err();
    assert_eq!((foreign.start(), why), (y, FreeError::NotAllocated));
    assert_eq!(it.len(), 4);
    assert_eq!((a.stats().detached_areas, a.stats().free_blocks), (4, 1));
    b.release_detached([foreign]).unwrap();
    assert_eq!(a.release_detached(it), Ok(()));
    let s = a.stats();
    assert_eq!(
        (s.detached_areas, s.free_blocks, s.free_bytes),
        (0, 1, 1 << 20)
    );
    a.check().unwrap();
    b.check().unwrap();
}
