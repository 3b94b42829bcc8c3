//! Each adapter on a short random sequence: it allocates, frees, and never
//! hands out overlapping, misaligned or out-of-space ranges; the exact ones
//! give the lowest fit every time. The judging code of the bench is tested
//! here too, on an allocator that is wrong on purpose.

use std::collections::BTreeMap;

use rand_mt::Mt64;

use super::measure;
use super::workload::{self, Op, Plan};
use super::*;

/// A small space, so that the sequence also meets a full space.
const SMALL: u64 = 256 * PAGE;

/// Live areas by start address; panics on the first overlap.
#[derive(Default)]
struct Shadow(BTreeMap<u64, u64>);

impl Shadow {
    fn insert(&mut self, who: &str, addr: u64, size: u64) {
        let end = addr + size;
        assert!(
            end <= SMALL,
            "{who}: [{addr:#x}, {end:#x}) leaves the space"
        );
        if let Some((&s, &len)) = self.0.range(..end).next_back() {
            assert!(
                s + len <= addr,
                "{who}: [{addr:#x}, {end:#x}) overlaps [{s:#x}, +{len:#x})"
            );
        }
        self.0.insert(addr, size);
    }

    /// The lowest `align`-aligned gap of `size` bytes, by brute force.
    fn lowest_fit(&self, size: u64, align: u64) -> Option<u64> {
        let mut lo = 0u64;
        for (&s, &len) in self.0.iter().chain([(&SMALL, &0)]) {
            let a = lo.next_multiple_of(align);
            if a + size <= s {
                return Some(a);
            }
            lo = lo.max(s + len);
        }
        None
    }
}

/// Runs 3000 random allocs and frees on `P` over [`SMALL`].
fn exercise<P: PeerRange>() {
    let who = P::name();
    let mut a = P::new(SMALL, 64);
    let mut rng = Mt64::new(7);
    let mut shadow = Shadow::default();
    let mut live: Vec<(u64, u64, P::Handle)> = Vec::new();
    let (mut allocs, mut frees) = (0, 0);
    for _ in 0..3000 {
        if rng.next_u64() % 2 == 0 && !live.is_empty() {
            let (addr, _, h) = live.swap_remove((rng.next_u64() % live.len() as u64) as usize);
            assert!(a.free(h), "{who}: free of {addr:#x} refused");
            shadow.0.remove(&addr);
            frees += 1;
            continue;
        }
        let size = (1 + rng.next_u64() % 8) * PAGE;
        let max_shift = if P::supports_align() { 5 } else { 0 };
        let align = PAGE << (rng.next_u64() % (max_shift + 1));
        let lowest = shadow.lowest_fit(size, align);
        let Some((addr, h)) = a.alloc(size, align) else {
            assert!(
                !P::exact_lowest_fit() || lowest.is_none(),
                "{who}: failed with room"
            );
            continue;
        };
        assert_eq!(addr % align, 0, "{who}: {addr:#x} not {align:#x}-aligned");
        if P::exact_lowest_fit() {
            assert_eq!(Some(addr), lowest, "{who}: not the lowest fit");
        }
        shadow.insert(who, addr, size);
        live.push((addr, size, h));
        allocs += 1;
    }
    assert!(
        allocs > 500 && frees > 500,
        "{who}: {allocs} allocs, {frees} frees"
    );
    // Everything freed, the whole space is one free range again.
    for (_, _, h) in live {
        assert!(a.free(h), "{who}: final free refused");
    }
    let (addr, _) = a
        .alloc(SMALL, PAGE)
        .expect("the whole space after freeing all");
    assert_eq!(addr, 0, "{who}");
}

#[test]
fn mmkit_adapter() {
    exercise::<Mmkit>();
}

#[test]
fn mmkit_pooled_adapter() {
    exercise::<MmkitPooled>();
}

#[test]
fn mmkit_index_adapter() {
    exercise::<MmkitIndex>();
}

#[test]
fn vm_allocator_adapter() {
    exercise::<VmAllocator>();
}

#[test]
fn range_alloc_adapter() {
    exercise::<RangeAlloc>();
}

#[test]
fn offset_allocator_adapter() {
    exercise::<OffsetAlloc>();
}

#[test]
fn xalloc_adapter() {
    exercise::<XallocTlsf>();
}

#[test]
fn offset_allocator_refuses_alignment() {
    let mut a = OffsetAlloc::new(SMALL, 8);
    assert!(a.alloc(PAGE, 2 * PAGE).is_none());
    assert!(a.alloc(PAGE, PAGE).is_some());
}

#[test]
fn bad_requests_are_refused_not_panics() {
    fn refuse<P: PeerRange>() {
        let mut a = P::new(SMALL, 8);
        assert!(a.alloc(0, PAGE).is_none(), "{}: size 0", P::name());
        assert!(
            a.alloc(PAGE, 3 * PAGE).is_none(),
            "{}: align 3 pages",
            P::name()
        );
        assert!(
            a.alloc(u64::MAX, PAGE).is_none(),
            "{}: size u64::MAX",
            P::name()
        );
    }
    refuse::<Mmkit>();
    refuse::<MmkitPooled>();
    refuse::<MmkitIndex>();
    refuse::<VmAllocator>();
    refuse::<RangeAlloc>();
    refuse::<OffsetAlloc>();
    refuse::<XallocTlsf>();
}

#[test]
fn vm_allocator_placement_is_its_own_answer() {
    let mut a = VmAllocator::new(SMALL, 8);
    let h = a.place(3 * PAGE, PAGE).expect("free range");
    assert_eq!(h.start(), 3 * PAGE);
    assert!(a.place(3 * PAGE, PAGE).is_none(), "placed twice");
    assert_eq!(a.alloc(3 * PAGE, PAGE).map(|(addr, _)| addr), Some(0));
    assert_eq!(a.alloc(PAGE, PAGE).map(|(addr, _)| addr), Some(4 * PAGE));
}

#[test]
fn plans_are_deterministic_and_keep_the_live_count() {
    for w in workload::ALL {
        let p = Plan::new(w, 50, 10, 100, SEED);
        let q = Plan::new(w, 50, 10, 100, SEED);
        assert_eq!(p.churn, q.churn, "{}", w.name);
        assert_eq!(p.churn.len(), 2 * 110);
        let allocs = p
            .setup
            .iter()
            .filter(|o| matches!(o, Op::Alloc { .. }))
            .count();
        assert_eq!(allocs, p.setup_addrs.len());
        let frees = p.setup.len() - allocs;
        assert_eq!(
            allocs - frees,
            w.live_after_setup(50),
            "{}: live areas after set-up",
            w.name
        );
        for pair in p.churn.chunks(2) {
            let (Op::Free { slot: f }, Op::Alloc { slot: a, align, .. }) = (pair[0], pair[1])
            else {
                panic!("{}: a pair is a free then an alloc", w.name);
            };
            assert_eq!(f, a);
            assert!(w.aligned() || align == PAGE);
        }
    }
}

/// The holes workloads' holes are near misses: long enough for no request
/// (fix-size-holes) or for its size but not its alignment (align-holes),
/// so the lowest fit never lands in one and every search must rule them
/// all out.
#[test]
fn holes_are_near_misses_never_fits() {
    use mmkit::vmap::VmapAllocator;
    for (name, hole_pages) in [("fix-size-holes", 1), ("align-holes", 3)] {
        let w = workload::ALL.iter().find(|w| w.name == name).unwrap();
        let live = 300;
        let plan = Plan::new(w, live, 0, 2000, SEED);
        // The last hole borders the working areas and merges with the
        // ones freed next to it: the others are the near misses.
        let holes_end = (2 * live as u64 - 1) * hole_pages * PAGE;
        let mut va = VmapAllocator::new(0, SPACE).unwrap();
        let mut at = vec![None; plan.slots];
        let mut holes = 0;
        for (i, op) in plan.setup.iter().chain(&plan.churn).enumerate() {
            match *op {
                Op::Alloc { slot, size, align } => {
                    let a = va.alloc(size, align).unwrap();
                    if i >= plan.setup.len() {
                        assert!(a >= holes_end, "{name}: churn alloc at {a:#x} in the holes");
                        // The near miss: the size would fit a hole; the
                        // alignment is what rules it out.
                        assert_eq!(w.aligned(), size <= hole_pages * PAGE, "{name}");
                    }
                    at[slot as usize] = Some(a);
                }
                Op::Free { slot } => {
                    let a = at[slot as usize].take().unwrap();
                    if a < holes_end {
                        holes += 1;
                    }
                    va.free(a).unwrap();
                }
            }
        }
        assert_eq!(holes, live - 1, "{name}: one hole per pinned area");
        let below = va.free_blocks().filter(|b| b.end <= holes_end).count();
        assert_eq!(below, live - 1, "{name}: the holes stay");
    }
}

#[test]
fn the_bench_judges_exact_and_inexact_answers() {
    let w = &workload::ALL[1]; // random-size
    let plan = Plan::new(w, 200, 100, 2000, SEED);
    let judge = |o: &Outcome| (o.judged, o.violation.clone());
    let m = measure::run::<Mmkit>(&plan, std::time::Duration::from_secs(60), 2000);
    assert_eq!(judge(&m), (2000, None));
    assert_eq!(m.lowest, 2000, "mmkit is the lowest fit");
    let v = measure::run::<VmAllocator>(&plan, std::time::Duration::from_secs(60), 2000);
    assert_eq!(
        (v.lowest, v.violation),
        (2000, None),
        "first match is exact"
    );
    let x = measure::run::<XallocTlsf>(&plan, std::time::Duration::from_secs(60), 2000);
    assert_eq!(judge(&x), (2000, None));
    assert!(x.lowest < 2000, "TLSF is not always the lowest fit");
}

/// Gives every area twice: the bench must call that a violation.
struct Overlapping(u64);

impl PeerRange for Overlapping {
    type Handle = ();
    fn name() -> &'static str {
        "overlapping"
    }
    fn about() -> &'static str {
        "wrong on purpose"
    }
    fn new(_: u64, _: usize) -> Self {
        Overlapping(0)
    }
    fn alloc(&mut self, _size: u64, _align: u64) -> Option<(u64, ())> {
        self.0 += 1;
        Some(((self.0 / 2) * 64 * PAGE, ()))
    }
    fn free(&mut self, _: ()) -> bool {
        true
    }
    fn exact_lowest_fit() -> bool {
        false
    }
    fn supports_align() -> bool {
        true
    }
}

#[test]
fn the_bench_catches_overlaps() {
    let plan = Plan::new(&workload::ALL[0], 10, 0, 100, SEED);
    let o = measure::run::<Overlapping>(&plan, std::time::Duration::from_secs(60), 100);
    let v = o.violation.expect("overlap found");
    assert!(v.contains("overlaps"), "{v}");
}

#[test]
fn names_on_the_command_line() {
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(choose(&[]).unwrap().len(), workload::ALL.len());
    assert!(choose(&names(&["nope"]))
        .unwrap_err()
        .contains("steady-page"));
    let only: Vec<_> = pick(&names(&["xalloc-tlsf"]))
        .unwrap()
        .iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(only, ["mmkit", "xalloc-tlsf"], "mmkit always runs first");
    assert!(pick(&names(&["nope"]))
        .unwrap_err()
        .contains("offset-allocator"));
}

/// A bench row that ran, `ns` a pair, `pct` of its answers the lowest fit.
fn row_of(allocator: &'static str, ns: f64, pct: f64) -> BenchRow {
    BenchRow {
        workload: "w",
        live: 1,
        allocator,
        exact_by_design: allocator == Mmkit::name(),
        skipped: false,
        ns_per_pair: Some(ns),
        mean_ns_per_pair: Some(ns),
        vs_mmkit: None,
        timed_pairs: Some(1),
        warm_pairs: Some(1),
        judged: Some(1),
        lowest_fit_pct: Some(pct),
        failed_with_room: Some(0),
        failed_full: Some(0),
        violation: None,
        wall_ms: Some(1.0),
        notes: String::new(),
    }
}

#[test]
fn the_pooled_mode_is_not_a_peer() {
    let rows = [
        row_of("mmkit", 100.0, 100.0),
        row_of("mmkit-pooled", 10.0, 1.0),
        row_of("xalloc-tlsf", 50.0, 1.0),
    ];
    let s = summarize(&workload::ALL[0], &rows);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].fastest_peer, "xalloc-tlsf");
    assert_eq!(s[0].mmkit_vs_fastest, Some(2.0));
    assert_eq!(s[0].pooled_vs_fastest, Some(0.2));
    // Without it, no column.
    let s = summarize(&workload::ALL[0], &[rows[0].clone(), rows[2].clone()]);
    assert_eq!(s[0].pooled_vs_fastest, None);
    // The bare index is not a peer either, and gets a column of its own.
    let rows = [
        rows[0].clone(),
        row_of("mmkit-index", 5.0, 100.0),
        rows[2].clone(),
    ];
    let s = summarize(&workload::ALL[0], &rows);
    assert_eq!(s[0].fastest_peer, "xalloc-tlsf");
    assert_eq!(s[0].index_vs_fastest, Some(0.1));
    assert_eq!(s[0].pooled_vs_fastest, None);
    assert!(
        !rows[1].mmkit_broke_contract(),
        "the pooled mode is inexact by design"
    );
}

#[test]
fn only_mmkit_problems_fail_the_run() {
    let row = |allocator: &'static str, pct: f64| row_of(allocator, 1.0, pct);
    assert!(!row("mmkit", 100.0).mmkit_broke_contract());
    assert!(!row("xalloc-tlsf", 3.0).mmkit_broke_contract());
    assert!(row("mmkit", 99.9).mmkit_broke_contract());
    let mut v = row("mmkit", 100.0);
    v.violation = Some("overlap".into());
    assert!(v.mmkit_broke_contract());
}

/// The judge's oracle against a plain scan of a sorted list, through
/// bucket splits (thousands of free ranges), every layout of merges and
/// alignments up to 2^24 pages (past the summaries): the same answer every
/// time.
#[test]
fn the_oracle_is_the_lowest_fit() {
    let space = 1u64 << 36;
    let mut oracle = measure::Oracle::new(space);
    let mut free: Vec<(u64, u64)> = vec![(0, space)];
    let plain = |free: &[(u64, u64)], size: u64, align: u64| {
        free.iter().find_map(|&(s, e)| {
            let a = s.checked_add(align - 1)? & !(align - 1);
            (a < e && e - a >= size).then_some(a)
        })
    };
    let mut rng = Mt64::new(3);
    let mut live: Vec<(u64, u64)> = Vec::new();
    for i in 0..12_000u32 {
        // Mostly allocations first (thousands of ranges), then churn.
        let alloc = live.is_empty() || rng.next_u64() % 100 < if i < 6000 { 80 } else { 45 };
        if alloc {
            let size = PAGE * (1 + rng.next_u64() % 6);
            let align = PAGE << [0, 0, 1, 3, 10, 25][(rng.next_u64() % 6) as usize];
            let want = plain(&free, size, align);
            assert_eq!(
                oracle.alloc(size, align),
                want,
                "step {i}: alloc({size:#x}, {align:#x})"
            );
            if let Some(a) = want {
                let at = free
                    .iter()
                    .position(|&(s, e)| s <= a && a + size <= e)
                    .unwrap();
                let (s, e) = free.remove(at);
                let parts = [(s, a), (a + size, e)];
                free.splice(at..at, parts.into_iter().filter(|r| r.0 < r.1));
                live.push((a, size));
            }
        } else {
            let (a, size) = live.swap_remove((rng.next_u64() % live.len() as u64) as usize);
            oracle.free(a, size);
            let at = free.partition_point(|r| r.0 < a);
            free.insert(at, (a, a + size));
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(free.len());
            for r in free.drain(..) {
                match merged.last_mut() {
                    Some(last) if last.1 == r.0 => last.1 = r.1,
                    _ => merged.push(r),
                }
            }
            free = merged;
        }
        if i == 6000 {
            assert!(
                free.len() > 600,
                "{} free ranges: too few to split a bucket",
                free.len()
            );
        }
    }
    // An oracle built around the live areas answers as the one that took
    // them in turn, and one built around overlapping areas is refused.
    for (size, align) in [(PAGE, PAGE), (3 * PAGE, PAGE << 3), (PAGE, PAGE << 25)] {
        let mut around = measure::Oracle::around(space, live.clone()).unwrap();
        assert_eq!(around.alloc(size, align), plain(&free, size, align));
    }
    let mut overlapping = live.clone();
    overlapping.push((live[0].0 + PAGE / 2, PAGE));
    assert!(measure::Oracle::around(space, overlapping).is_err());
    assert!(measure::Oracle::around(space, vec![(space - PAGE, 2 * PAGE)]).is_err());
    // Exact placement: free ranges are taken, anything else refused.
    let (s, e) = free[free.len() / 2];
    assert!(oracle.take(s, e - s));
    assert!(!oracle.take(s, 1));
    assert!(!oracle.take(live[0].0, PAGE));
}
