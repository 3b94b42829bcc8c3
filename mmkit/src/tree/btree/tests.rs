use super::finger::Next;
use super::search::top_fit;
use super::*;
use crate::error::CheckError;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::vec::Vec;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Insert a range at slot `i` of 64-byte slots, length `len`.
    Insert(u16, u8),
    Remove(u16),
    /// Shrink or grow the range in slot `i` within its slot.
    Resize(u16, u8),
    /// Lowest and highest fit: size, log2 align, window start, length.
    Fit(u8, u8, u16, u16),
}

fn op(slots: u16) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..slots, 1..=64u8).prop_map(|(i, l)| Op::Insert(i, l)),
        1 => (0..slots).prop_map(Op::Remove),
        1 => (0..slots, 1..=64u8).prop_map(|(i, l)| Op::Resize(i, l)),
        2 => (1..=80u8, 0..24u8, any::<u16>(), any::<u16>())
            .prop_map(|(s, a, lo, len)| Op::Fit(s, a, lo, len)),
    ]
}

fn lowest(t: &mut BTree, size: u64, align: u64, lo: u64, hi: u64) -> Option<(Pos, u64)> {
    let mut pos = Pos::new();
    t.lowest_fit(size, align, lo, hi, &mut pos)
        .map(|a| (pos, a))
}

fn highest(t: &BTree, size: u64, align: u64, lo: u64, hi: u64) -> Option<(Pos, u64)> {
    let mut pos = Pos::new();
    t.highest_fit(size, align, lo, hi, &mut pos)
        .map(|a| (pos, a))
}

fn fail(e: CheckError) -> TestCaseError {
    TestCaseError::fail(format!("{e}"))
}

/// Runs `ops` against a BTreeMap model with addresses `base + (x <<
/// shift)`; every fit agrees with the model's scan.
fn run_model(shift: u32, base: u64, ops: &[Op], check_every: usize) -> Result<(), TestCaseError> {
    let mut t = BTree::new();
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    let addr = |x: u64| base.saturating_add(x << shift);
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Insert(i, len) => {
                let s = addr(u64::from(i) * 64);
                let e = s + (u64::from(len) << shift);
                if let alloc::collections::btree_map::Entry::Vacant(v) = model.entry(s) {
                    t.insert(s, e);
                    v.insert(e);
                }
            }
            Op::Remove(i) => {
                let s = addr(u64::from(i) * 64);
                prop_assert_eq!(t.remove(s), model.remove(&s).is_some());
            }
            Op::Resize(i, len) => {
                let s = addr(u64::from(i) * 64);
                let e = s + (u64::from(len) << shift);
                if let Some(v) = model.get_mut(&s) {
                    let pos = t.find(s).expect("in the tree");
                    prop_assert_eq!(t.get(&pos).0, s);
                    t.set_range_at(&pos, s, e);
                    *v = e;
                }
            }
            Op::Fit(size, a, lo, len) => {
                let (size, align) = (u64::from(size) << shift, 1u64 << a);
                let lo = addr(u64::from(lo) * 32);
                let hi = lo.saturating_add(u64::from(len) << (shift + 5));
                let want = model
                    .iter()
                    .find_map(|(&s, &e)| crate::range::fit_in(s.max(lo), e.min(hi), size, align));
                let want_top = model
                    .iter()
                    .rev()
                    .find_map(|(&s, &e)| top_fit(s.max(lo), e.min(hi), size, align));
                if a % 3 != 0 {
                    t.enable_summaries(align);
                }
                let got = lowest(&mut t, size, align, lo, hi);
                prop_assert_eq!(got.map(|g| g.1), want);
                if let Some((pos, a)) = got {
                    let (s, e) = t.get(&pos);
                    prop_assert!(s <= a && a + size <= e);
                }
                let got = highest(&t, size, align, lo, hi);
                prop_assert_eq!(got.map(|g| g.1), want_top);
                if let Some((pos, a)) = got {
                    let (s, e) = t.get(&pos);
                    prop_assert!(s <= a && a + size <= e);
                }
                prop_assert_eq!(t.lowest_fit_linear(size, align, lo, hi), want);
                let want_best = model
                    .iter()
                    .filter_map(|(&s, &e)| {
                        crate::range::fit_in(s.max(lo), e.min(hi), size, align)
                            .map(|a| (e - s, s, a))
                    })
                    .min();
                let mut pos = Pos::new();
                let got = t.best_fit(size, align, lo, hi, &mut pos);
                prop_assert_eq!(got, want_best.map(|b| b.2));
                if let Some((_, s, _)) = want_best {
                    prop_assert_eq!(t.get(&pos).0, s);
                }
            }
        }
        if step % check_every == 0 || step + 1 == ops.len() {
            t.check(base, u64::MAX).map_err(fail)?;
            let first = t.iter().next().map_or(u64::MAX, |b| b.0);
            prop_assert_eq!(t.lowest_start(), first);
            prop_assert_eq!(t.len(), model.len());
            let got: Vec<(u64, u64)> = t.iter().collect();
            let want: Vec<(u64, u64)> = model.iter().map(|(&s, &e)| (s, e)).collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(
                t.max_len(),
                model.iter().map(|(s, e)| e - s).max().unwrap_or(0)
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Small trees (a few leaves), checked after every step.
    #[test]
    fn small_tree_matches_model(shift in 0u32..14, ops in proptest::collection::vec(op(300), 1..400)) {
        run_model(shift, 0, &ops, 1)?;
    }

    /// Three levels and more: splits, borrows and merges of inner nodes.
    #[test]
    fn deep_tree_matches_model(shift in 0u32..12, ops in proptest::collection::vec(op(8000), 1..6000)) {
        run_model(shift, 0, &ops, 97)?;
    }

    /// Addresses just below `u64::MAX`: no overflow in any bound.
    #[test]
    fn top_of_the_space(shift in 0u32..4, ops in proptest::collection::vec(op(2000), 1..1500)) {
        let base = u64::MAX - (2000 * 64 + 200) * (1 << shift) - 4096;
        run_model(shift, base, &ops, 13)?;
    }
}

/// Checks the tree and that it holds the model's blocks; returns its
/// height.
pub(super) fn check_against(
    t: &BTree,
    (lo, hi): (u64, u64),
    model: &[(u64, u64)],
) -> Result<usize, TestCaseError> {
    t.check(lo, hi).map_err(fail)?;
    let got: Vec<(u64, u64)> = t.iter().collect();
    prop_assert_eq!(&got[..], model);
    Ok(t.height)
}

/// Frees `[s, e)` into the tree as `VmapAllocator` does (merged with the
/// free blocks beside it through `neighbours`) and into the model.
pub(super) fn free_range(t: &mut BTree, model: &mut Vec<(u64, u64)>, s: u64, e: u64) {
    let nb = t.neighbours(s);
    let joins_prev = nb.prev.is_some_and(|p| p.1 == s);
    let joins_next = nb.next.is_some_and(|n| n.0 == e);
    match (joins_prev, joins_next) {
        (true, true) => t.merge(&nb),
        (true, false) => t.grow_prev(&nb, e),
        (false, true) => t.grow_next(&nb, s),
        (false, false) => t.insert_at(&nb, s, e),
    }
    crate::testkit::model_free(model, s, e);
}

/// A range allocator over the tree, as `VmapAllocator` drives it (fits
/// cut by position; frees merged through `neighbours`), against a
/// sorted list of free ranges. Requests are 1 to `sizes` units long,
/// aligned (when `aligned`) to one of the first `aligns` powers of two
/// of the unit.
#[allow(clippy::too_many_arguments)]
fn churn(
    (lo, hi): (u64, u64),
    seed: u64,
    steps: usize,
    aligned: bool,
    (sizes, aligns): (u64, u64),
    shift: u32,
    check_every: usize,
) -> Result<usize, TestCaseError> {
    let mut rnd = crate::testkit::xorshift(seed | 1);
    let mut t = BTree::new();
    t.insert(lo, hi);
    let mut model: Vec<(u64, u64)> = Vec::from([(lo, hi)]);
    let mut live: Vec<(u64, u64)> = Vec::new();
    let span = hi - lo;
    let mut max_height = 0;
    for step in 0..steps {
        if rnd() % 5 < 3 || live.is_empty() {
            let size = (rnd() % sizes + 1) << shift;
            let align = if aligned {
                1u64 << (shift + (rnd() % aligns) as u32)
            } else {
                1 << shift
            };
            let (ws, we) = if rnd() % 4 == 0 {
                let ws = (lo + rnd() % span) >> shift << shift;
                (ws, ws.saturating_add(rnd() % span + 1).min(hi))
            } else {
                (lo, hi)
            };
            let top = rnd() % 8 == 0;
            let best = !top && rnd() % 3 == 0;
            t.enable_summaries(align);
            let want = if best {
                model
                    .iter()
                    .filter_map(|&(s, e)| {
                        crate::range::fit_in(s.max(ws), e.min(we), size, align)
                            .map(|a| (e - s, s, a))
                    })
                    .min()
                    .map(|b| b.2)
            } else if top {
                model
                    .iter()
                    .rev()
                    .find_map(|&(s, e)| top_fit(s.max(ws), e.min(we), size, align))
            } else {
                model
                    .iter()
                    .find_map(|&(s, e)| crate::range::fit_in(s.max(ws), e.min(we), size, align))
            };
            let got = if best {
                let mut pos = Pos::new();
                t.best_fit(size, align, ws, we, &mut pos).map(|a| (pos, a))
            } else if top {
                highest(&t, size, align, ws, we)
            } else {
                lowest(&mut t, size, align, ws, we)
            };
            prop_assert_eq!(got.map(|g| g.1), want);
            if let Some((pos, a)) = got {
                let (s, e) = t.get(&pos);
                match (a == s, a + size == e) {
                    (true, true) => t.remove_at(&pos),
                    (true, false) => t.set_range_at(&pos, a + size, e),
                    (false, true) => t.set_range_at(&pos, s, a),
                    (false, false) => t.split_at(&pos, (s, a), a + size, e),
                }
                crate::testkit::model_take(&mut model, a, size);
                live.push((a, a + size));
            }
        } else {
            let (s, e) = live.swap_remove((rnd() % live.len() as u64) as usize);
            free_range(&mut t, &mut model, s, e);
        }
        if step % check_every == 0 || step + 1 == steps {
            max_height = max_height.max(check_against(&t, (lo, hi), &model)?);
        }
    }
    Ok(max_height)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn allocator_churn_matches_model(
        seed in any::<u64>(),
        aligned in any::<bool>(),
        top in any::<bool>(),
        shift in prop_oneof![Just(0u32), Just(4), Just(12)],
    ) {
        let space = 1u64 << (shift + 20);
        let (lo, hi) = if top { (u64::MAX - space, u64::MAX) } else { (0, space) };
        churn((lo, hi), seed, 4000, aligned, (16, 8), shift, 50)?;
    }

    /// Few request shapes, so that a search often repeats the last
    /// one's size and alignment and starts at the bound it left
    /// (`Cleared`); frees below that bound must lower it.
    #[test]
    fn repeated_aligned_requests_match_model(
        seed in any::<u64>(),
        sizes in 1u64..4,
        aligns in 2u64..4,
        shift in prop_oneof![Just(0u32), Just(12)],
    ) {
        churn((0, 1 << (shift + 16)), seed, 4000, true, (sizes, aligns), shift, 50)?;
    }
}

/// Each way a block can be gained below the bound a search left lowers
/// it: an insert, a block grown, and joins in one leaf, across leaves
/// and into the wilderness.
/// One-unit blocks at `10 * i` for `1 <= i < n`: too short for any
/// request of 2 units or more.
fn units_every_10_below(n: u64) -> BTree {
    let mut t = BTree::new();
    for i in 1..n {
        t.insert(i * 10, i * 10 + 1);
    }
    t
}

#[test]
fn gained_blocks_lower_the_cleared_bound() {
    // Blocks of 1 unit at 10, 20, ..: too short for 3 units aligned to
    // 2; the wilderness from 5000 holds the first fit, at 5000.
    let fresh = || {
        let mut t = units_every_10_below(400);
        t.insert(5000, 10_000);
        t.enable_summaries(2);
        assert_eq!(lowest(&mut t, 3, 2, 0, 10_000).map(|g| g.1), Some(5000));
        t
    };
    let expect = |t: &mut BTree, want: u64| {
        assert_eq!(lowest(t, 3, 2, 0, 10_000).map(|g| g.1), Some(want));
        assert_eq!(t.lowest_fit_linear(3, 2, 0, 10_000), Some(want));
        t.check(0, 10_000).unwrap();
    };
    // An insert.
    let mut t = fresh();
    t.insert(1001, 1006);
    expect(&mut t, 1002);
    // A block grown in place.
    let mut t = fresh();
    let pos = t.find(1000).unwrap();
    t.set_range_at(&pos, 1000, 1003);
    expect(&mut t, 1000);
    // Two blocks joined, in one leaf and across leaves: every pair.
    let (mut here, mut across) = (0, 0);
    for k in (10..3990).step_by(10) {
        let mut t = fresh();
        let nb = t.neighbours(k + 1);
        assert_eq!(
            (nb.prev, nb.next),
            (Some((k, k + 1)), Some((k + 10, k + 11)))
        );
        match nb.next_at {
            Next::Here => here += 1,
            Next::Leaf => across += 1,
            _ => unreachable!(),
        }
        t.merge(&nb);
        expect(&mut t, k);
    }
    assert!(
        here > 0 && across > 0,
        "{here} joins in a leaf, {across} across"
    );
    // A block joined with the wilderness.
    let mut t = fresh();
    let nb = t.neighbours(3991);
    assert_eq!(nb.next, Some((5000, 10_000)));
    t.merge(&nb);
    expect(&mut t, 3990);
}

/// A search that starts at the cleared bound begins in the leaf of the
/// bound's block while no node changed, but not once that leaf's first
/// block starts above the bound: a fit at the bound then lives in the
/// leaf before.
#[test]
fn a_remembered_leaf_serves_only_while_it_starts_by_the_bound() {
    // Blocks of 1 unit at 4i + 1: too short for 2 units aligned to 2.
    let mut t = BTree::new();
    for i in 0..64u64 {
        t.insert(4 * i + 1, 4 * i + 2);
    }
    t.insert(1000, 2000);
    t.enable_summaries(2);
    // Two neighbouring leaves, the second (`l`) given a ninth block so
    // that it can lose its first without underflowing.
    let start_of = |t: &BTree, leaf: u32| t.leaves[leaf as usize].start[0];
    let p = t
        .find(start_of(&t, t.find(1).unwrap().leaf) + 4 * 8)
        .unwrap()
        .leaf;
    let l = t.find(start_of(&t, p) + 4 * 8).unwrap().leaf;
    assert_ne!(p, l);
    let s0 = start_of(&t, l);
    t.insert(s0 + 4 * 3 + 2, s0 + 4 * 3 + 3);
    assert_eq!(t.leaves[l as usize].len as usize, LEAF_MIN + 1);
    // Its first block grows to hold the request at s0 + 1: the answer,
    // and the bound, with the path to `l`.
    let pos = t.find(s0).unwrap();
    t.set_range_at(&pos, s0, s0 + 3);
    let mut pos = Pos::new();
    assert_eq!(t.lowest_fit(2, 2, 0, 2000, &mut pos), Some(s0 + 1));
    assert_eq!((pos.leaf, t.cleared.bound), (l, s0 + 1));
    let shape = t.shape;
    // The same request again starts in `l`.
    assert_eq!(t.start_leaf().map(|at| at.leaf), Some(l));
    // That block goes; a fit at the bound comes back, in the leaf before
    // (`l` now starts above it), without lowering the bound.
    assert!(t.remove(s0));
    t.insert(s0 + 1, s0 + 3);
    assert_eq!(t.find(s0 + 1).unwrap().leaf, p);
    assert_eq!(
        (t.shape, t.cleared.bound, t.cleared.at.leaf),
        (shape, s0 + 1, l)
    );
    assert!(t.start_leaf().is_none());
    assert_eq!(t.lowest_fit(2, 2, 0, 2000, &mut pos), Some(s0 + 1));
    t.check(0, 2000).unwrap();
}

/// Three and more levels, aligned requests (summaries on) and windows.
#[test]
fn deep_allocator_churn() {
    let h = churn((0, 1 << 36), 7, 60_000, true, (16, 8), 12, 2_000).unwrap();
    assert!(h >= 3, "height {h}");
    let h = churn(
        (u64::MAX - (1 << 30), u64::MAX),
        11,
        60_000,
        false,
        (16, 8),
        4,
        2_000,
    )
    .unwrap();
    assert!(h >= 3, "height {h}");
}

#[test]
fn containing_and_neighbours() {
    let mut t = BTree::new();
    for i in 0..1000u64 {
        t.insert(i * 100 + 10, i * 100 + 20);
    }
    t.check(0, u64::MAX).unwrap();
    assert_eq!(t.containing(19), Some((10, 20)));
    assert_eq!(t.containing(20), None);
    assert_eq!(t.containing(5), None);
    assert_eq!(t.containing(99_915), Some((99_910, 99_920)));
    // The highest block is the wilderness: its end is outside it too.
    assert_eq!(t.wild, Some((99_910, 99_920)));
    assert_eq!(t.containing(99_920), None);
    let nb = t.neighbours(25);
    assert_eq!((nb.prev, nb.next), (Some((10, 20)), Some((110, 120))));
    let nb = t.neighbours(5);
    assert_eq!((nb.prev, nb.next), (None, Some((10, 20))));
    let nb = t.neighbours(1_000_000);
    assert_eq!((nb.prev, nb.next), (Some((99_910, 99_920)), None));
    // One `Neighbours` reused for every key: each lookup replaces all of it.
    let mut into = t.neighbours(1_000_000);
    for k in (0..100_000).step_by(7) {
        let nb = t.neighbours(k);
        let prev = t.iter().filter(|r| r.0 < k).last();
        let next = t.iter().find(|r| r.0 >= k);
        assert_eq!((nb.prev, nb.next), (prev, next), "key {k}");
        t.neighbours_into(k, &mut into);
        assert_eq!(format!("{into:?}"), format!("{nb:?}"), "key {k}");
    }
    // One found in another tree of the same shape count: nothing of
    // its path is used either.
    let mut other = BTree::new();
    for i in 0..1000u64 {
        other.insert(i * 10 + 5_000_000, i * 10 + 5_000_001);
    }
    assert_eq!(other.shape, t.shape);
    let mut foreign = other.neighbours(5_005_000);
    t.neighbours_into(55_515, &mut foreign);
    assert_eq!(
        format!("{foreign:?}"),
        format!("{:?}", t.neighbours(55_515))
    );
    for i in 0..1000u64 {
        assert!(t.remove(i * 100 + 10));
        if i % 37 == 0 {
            t.check(0, u64::MAX).unwrap();
        }
    }
    assert!(t.is_empty());
    t.check(0, u64::MAX).unwrap();
}

/// One-unit blocks at every 4th unit below 4000 (a tree of several
/// levels) and the wilderness `[10_000, 20_000)`.
fn units_below_4000_and_a_wilderness() -> BTree {
    let mut t = BTree::new();
    for i in 0..1000u64 {
        t.insert(i * 4, i * 4 + 1);
    }
    t.insert(10_000, 20_000);
    t
}

/// A failed search is remembered only for requests it covers (same
/// size and alignment, a window inside its own) and only until the
/// blocks change.
#[test]
fn a_failed_search_answers_only_what_it_covers() {
    // One-unit blocks at every 4th unit below 4000, a 3-unit one at
    // 5000, the wilderness from 10_000.
    let mut t = units_below_4000_and_a_wilderness();
    t.insert(5000, 5003);
    let mut pos = Pos::new();
    let mut fit = |t: &mut BTree, size, align, lo, hi| t.lowest_fit(size, align, lo, hi, &mut pos);
    assert_eq!(fit(&mut t, 3, 1, 0, 4000), None);
    assert_eq!(fit(&mut t, 3, 1, 0, 4000), None);
    assert_eq!(fit(&mut t, 3, 1, 100, 3000), None); // covered
    assert_eq!(fit(&mut t, 3, 1, 0, 6000), Some(5000)); // a wider window
    assert_eq!(fit(&mut t, 3, 1, 0, 4000), None);
    assert_eq!(fit(&mut t, 1, 1, 0, 4000), Some(0)); // another size
    assert_eq!(fit(&mut t, 3, 1, 0, 4000), None);
    assert_eq!(fit(&mut t, 1, 2, 1, 4000), Some(4)); // another alignment
    assert_eq!(fit(&mut t, 3, 1, 0, 4000), None);
    // A change: the block at 2000 grows to three units.
    let p = t.find(2000).unwrap();
    t.set_range_at(&p, 2000, 2003);
    assert_eq!(fit(&mut t, 3, 1, 0, 4000), Some(2000));
    t.check(0, u64::MAX).unwrap();
}

/// The root's longest block, kept between calls of `may_hold_below`,
/// is read again after every kind of change: a block grown, split,
/// removed, merged or inserted, the longest one included.
#[test]
fn may_hold_below_sees_every_change_to_the_longest_block() {
    // Several levels; the wilderness above every bound asked.
    let mut t = units_below_4000_and_a_wilderness();
    assert!(t.may_hold_below(5000, 1));
    assert!(!t.may_hold_below(5000, 2));
    // Asked again of the same tree: from the kept value.
    assert!(!t.may_hold_below(5000, 2));
    // Grown in place: three units at 2000.
    let p = t.find(2000).unwrap();
    t.set_range_at(&p, 2000, 2003);
    assert!(t.may_hold_below(5000, 3));
    assert!(!t.may_hold_below(5000, 4));
    // Split by an allocation of its middle unit: none of two.
    let p = t.find(2000).unwrap();
    t.split_at(&p, (2000, 2001), 2002, 2003);
    assert!(!t.may_hold_below(5000, 2));
    // That unit freed: merged with both sides into three units again.
    let nb = t.neighbours(2001);
    t.merge(&nb);
    assert!(t.may_hold_below(5000, 3));
    // Removed: none of two again; a new long block below the bound.
    assert!(t.remove(2000));
    assert!(!t.may_hold_below(5000, 2));
    t.insert(4500, 4600);
    assert!(t.may_hold_below(5000, 100));
    t.check(0, u64::MAX).unwrap();
}

/// A kept `Neighbours` (the finger) answers as a fresh descent does:
/// runs of lookups near the last one, with no change between (read
/// from the leaf), after blocks changed in unchanged nodes (down from
/// the finger's path as far as it still leads), and after splits and
/// merges (the shape sends them down from the root). Debug builds
/// also compare every answer from a finger with a full descent.
#[test]
fn finger_answers_as_a_descent_does() {
    let mut rnd = crate::testkit::xorshift(0x9e37_79b9_7f4a_7c15);
    let mut t = BTree::new();
    let mut nb = Neighbours::new();
    let mut key = 0;
    let (mut hits, mut redescents, mut max_height) = (0, 0, 0);
    for step in 0..60_000u64 {
        let r = rnd();
        if step % 4 == 0 {
            // Changes: a block at a random free slot of 64, or one gone.
            let s = (r >> 8) % 20_000 * 64;
            if t.find(s).is_some() {
                t.remove(s);
            } else if t.containing(s).is_none() {
                t.insert(s, s + 32);
            }
        }
        // Near the last key mostly (the same leaf), anywhere or above
        // every block at times; keys on, between and beyond the
        // blocks, down to 0.
        key = match r % 8 {
            0 => r >> 44,
            // Above every block (frees above holes): the last leaf.
            1 | 2 => 1_300_000 + (r >> 50),
            _ => (key + (r >> 60) * 20).saturating_sub(150),
        };
        let current = nb.version == t.version && t.finger_holds(&mut nb.clone(), key);
        hits += usize::from(current);
        redescents += usize::from(!current && nb.shape == t.shape);
        t.neighbours_near(key, &mut nb);
        let fresh = t.neighbours(key);
        let found =
            |n: &Neighbours| format!("{:?}", (n.prev, n.next, n.pos, n.prev_wild, n.next_at));
        assert_eq!(found(&nb), found(&fresh), "key {key} step {step}");
        max_height = max_height.max(t.height);
    }
    t.check(0, u64::MAX).unwrap();
    assert!(max_height >= 3, "height {max_height}");
    assert!(hits > 10_000, "{hits} lookups from a current finger");
    assert!(
        redescents > 5_000,
        "{redescents} lookups with a path to keep"
    );
}

/// Highest fits at the very top of the space: no bound overflows, in the
/// wilderness or in the tree below it.
#[test]
fn highest_fit_near_u64_max() {
    let top = u64::MAX;
    let mut t = BTree::new();
    t.insert(top - 300, top - 200);
    t.insert(top - 100, top);
    let fit = |t: &BTree, size: u64, align: u64, hi: u64| {
        highest(t, size, align, 0, hi).map(|(p, a)| (t.get(&p), a))
    };
    assert_eq!(fit(&t, 10, 1, top), Some(((top - 100, top), top - 10)));
    assert_eq!(fit(&t, 10, 16, top).map(|r| r.1), Some((top - 10) & !15));
    assert_eq!(fit(&t, 101, 1, top), None);
    assert_eq!(fit(&t, 1, 1 << 63, top), None);
    assert_eq!(
        fit(&t, 10, 1, top - 150),
        Some(((top - 300, top - 200), top - 210))
    );
    t.check(0, top).unwrap();
}

mod deep {
    use super::*;
    use alloc::collections::BTreeMap;

    /// Grows to four inner levels and shrinks back to one leaf, through
    /// every split, borrow, merge and root change, against a model.
    #[test]
    fn grow_and_shrink_through_every_level() {
        let mut rnd = crate::testkit::xorshift(0x2545f4914f6cdd1du64);
        let mut t = BTree::new();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut max_height = 0;
        for phase in 0..2 {
            for step in 0..120_000u64 {
                let slot = rnd() % 200_000;
                let s = slot * 64;
                let insert = if phase == 0 {
                    rnd() % 4 != 0
                } else {
                    rnd() % 4 == 0
                };
                if insert {
                    if let alloc::collections::btree_map::Entry::Vacant(v) = model.entry(s) {
                        let e = s + 1 + rnd() % 63;
                        t.insert(s, e);
                        v.insert(e);
                    }
                } else if let Some((&k, _)) = model.range(s..).next() {
                    model.remove(&k);
                    assert!(t.remove(k));
                }
                max_height = max_height.max(t.height);
                if step % 20_000 == 0 {
                    t.check(0, u64::MAX).unwrap();
                    assert!(t.iter().eq(model.iter().map(|(&s, &e)| (s, e))));
                }
            }
        }
        t.check(0, u64::MAX).unwrap();
        assert!(t.iter().eq(model.iter().map(|(&s, &e)| (s, e))));
        assert!(max_height >= 4, "height {max_height}");
        for k in model.keys().copied().collect::<Vec<_>>() {
            assert!(t.remove(k));
        }
        t.check(0, u64::MAX).unwrap();
        assert_eq!((t.len(), t.height), (0, 0));
    }

    /// A shrink that keeps a leaf's longest block keeps its summary (now
    /// stale: it still promises an aligned fit that is gone), and the
    /// search it then sends there in vain recomputes it.
    #[test]
    fn stale_summary_is_kept_then_tightened_by_the_search() {
        let mut t = BTree::new();
        for i in 0..40u64 {
            let s = i * 0x1000;
            let e = match i {
                2 => s + 0xc00,         // aligned to 2^13: 0xc00 usable at 2^11
                4 => s + 0x100 + 0xc00, // as long, 0x500 usable at 2^11
                30 => s + 0x1000,       // the fit the search ends at
                _ => s + 0x100,
            };
            let s = if i == 4 { s + 0x100 } else { s };
            t.insert(s, e);
        }
        t.enable_summaries(0x800);
        assert!(t.height >= 1);
        let (root, first) = (t.root, t.inners[t.root as usize].kid[0]);
        let exact = |t: &BTree| t.leaf_sum(first, t.entry(root, 0).max);
        // Both holders of the leaf's maximum start in the first leaf.
        assert_eq!(t.entry(root, 0).max, 0xc00);
        // Block 2 loses its aligned start; block 4 keeps the maximum.
        let pos = t.find(0x2000).unwrap();
        t.set_range_at(&pos, 0x2100, 0x2c00);
        t.check(0, u64::MAX).unwrap();
        assert_ne!(t.entry(root, 0).sum, exact(&t), "kept, not recomputed");
        assert_eq!(t.entry(root, 0).sum.usable(0xc00, 11), Some(0xc00));
        // 0x600 at 2^11: the first leaf's summary lets the search in, no
        // block there holds it (0x400 and 0x500 usable), block 30 does.
        let mut pos = Pos::new();
        assert_eq!(
            t.lowest_fit(0x600, 0x800, 0, u64::MAX, &mut pos),
            Some(0x1e000)
        );
        assert_eq!(t.entry(root, 0).sum, exact(&t), "tightened by the search");
        assert_eq!(t.entry(root, 0).sum.usable(0xc00, 11), Some(0x500));
        t.check(0, u64::MAX).unwrap();
    }
}

/// A request aligned to the granule floor whose window starts inside the
/// first block long enough: the plain descent declines it and the general
/// search answers, at the floor's own alignment and below it, as the
/// linear scans do.
#[test]
fn floor_aligned_requests_with_a_window_inside_the_first_long_block() {
    let mut t = BTree::new();
    // Short blocks of one granule (16) below 32_000, then 96-byte ones:
    // a tree of several levels, every start and end a multiple of 16.
    for i in 0..500u64 {
        t.insert(i * 64, i * 64 + 16);
    }
    for j in 0..50u64 {
        t.insert(40_000 + j * 128, 40_000 + j * 128 + 96);
    }
    assert_eq!(t.granule_floor(), 4);
    for k in 0..=4u32 {
        let align = 1u64 << k;
        for size in [17u64, 32, 48, 80, 96] {
            for lo in (40_000 - 8..40_000 + 3 * 128).step_by(3) {
                for hi in [40_000 + 100, 40_000 + 300, u64::MAX] {
                    let want = t.lowest_fit_linear(size, align, lo, hi);
                    let got = lowest(&mut t, size, align, lo, hi).map(|(_, a)| a);
                    assert_eq!(got, want, "lowest {size} aligned {align} in [{lo}, {hi})");
                    let want = t.highest_fit_linear(size, align, lo, hi);
                    let got = highest(&t, size, align, lo, hi).map(|(_, a)| a);
                    assert_eq!(got, want, "highest {size} aligned {align} in [{lo}, {hi})");
                }
            }
        }
    }
    t.check(0, u64::MAX).unwrap();
}

/// `is_empty`, `granule_floor`, `node_bytes` and `heap_bytes` say what
/// the tree holds: nothing and every alignment at first; one block's
/// granule after it; the nodes in use (a root leaf, then leaves and inner
/// nodes) within the capacity held.
#[test]
fn accessors_report_the_blocks_and_the_nodes() {
    use core::mem::size_of;
    let mut t = BTree::new();
    assert!(t.is_empty());
    assert_eq!(t.granule_floor(), 63);
    assert_eq!(t.node_bytes(), size_of::<node::Leaf>());
    assert!(t.heap_bytes() >= t.node_bytes());
    t.insert(48, 80);
    assert!(!t.is_empty());
    assert_eq!(t.granule_floor(), 4);
    for i in 1..400u64 {
        t.insert(i * 256, i * 256 + 64);
    }
    assert_eq!(t.granule_floor(), 4);
    assert!(t.height >= 1);
    let (leaves, inners) = (t.leaves.used(), t.inners.used());
    assert!(leaves > 1 && inners >= 1);
    assert_eq!(
        t.node_bytes(),
        leaves * size_of::<node::Leaf>() + inners * size_of::<node::Inner>()
    );
    assert!(t.heap_bytes() >= t.node_bytes());
}

/// After `reserve(n)`, inserting up to `n` blocks allocates nothing, in
/// the order that leaves every node least full (ascending: each split
/// leaves `LEAF_MIN` blocks or `INNER_MIN` children behind); and the
/// room reserved is about what the nodes' bound needs, not a multiple.
#[test]
fn reserve_makes_room_for_n_blocks_and_no_more_than_needed() {
    for n in [1usize, 7, 40, 300, 5000, 20_000] {
        let mut t = BTree::new();
        t.reserve(n);
        let held = t.heap_bytes();
        // About 44 bytes a block at the least occupancy (module docs):
        // at most 48, plus a root leaf and a path of inner nodes.
        let bound = n * 48 + size_of_leaf() + MAX_HEIGHT * size_of_inner();
        assert!(held <= bound, "n {n}: {held} bytes held, bound {bound}");
        for i in 0..n as u64 {
            t.insert(i * 4, i * 4 + 1);
        }
        assert_eq!(t.len(), n);
        assert_eq!(t.heap_bytes(), held, "n {n}: reserved too little");
        t.check(0, n as u64 * 4).unwrap();
    }
}

fn size_of_leaf() -> usize {
    core::mem::size_of::<node::Leaf>()
}

fn size_of_inner() -> usize {
    core::mem::size_of::<node::Inner>()
}

/// A key equal to a block's start has that block next and the one
/// before as prev, also when the block is the first of its leaf (the
/// key of its parent's entry): a lookup from the finger of a key just
/// above then leaves that leaf and its path, down from the level whose
/// key the block's start is.
#[test]
fn finger_lookup_at_a_block_start_finds_the_block_before() {
    let mut t = units_every_10_below(600);
    t.insert(10_000, 20_000);
    assert!(t.height >= 2);
    let found = |n: &Neighbours| format!("{:?}", (n.prev, n.next, n.pos, n.prev_wild, n.next_at));
    let mut leaf_firsts = 0;
    for i in 2..600u64 {
        let s = i * 10;
        let mut nb = t.neighbours(s + 5);
        assert_eq!(nb.prev, Some((s, s + 1)));
        leaf_firsts += usize::from(nb.pos.at == 1);
        t.neighbours_near(s, &mut nb);
        assert_eq!(nb.prev, Some((s - 10, s - 9)), "key {s}");
        assert_eq!(nb.next, Some((s, s + 1)), "key {s}");
        assert_eq!(found(&nb), found(&t.neighbours(s)), "key {s}");
    }
    assert!(
        leaf_firsts > 20,
        "{leaf_firsts} keys at a leaf's first start"
    );
}

/// `wild_beside` says whether prev or next is the wilderness.
#[test]
fn wild_beside_names_the_wilderness_on_either_side() {
    let mut t = BTree::new();
    t.insert(100, 200);
    t.insert(300, 400);
    t.insert(1000, 5000);
    let wild = |key| t.neighbours(key).wild_beside();
    assert!(!wild(50));
    assert!(!wild(250));
    assert!(wild(600));
    assert!(wild(1000));
    assert!(wild(3000));
    assert!(t.neighbours(3000).prev_wild);
    assert_eq!(t.neighbours(600).next_at, Next::Wild);
}

/// A shrink that leaves a leaf's summary word as it was but lowers its
/// longest block still refreshes its parent's summary: kept as it was,
/// the parent's deficits would count from the lower maximum and hide a
/// fit in a sibling leaf. `A` at `4097` (one past a multiple of every
/// alignment) is the longest block of its leaf and of the parent, and
/// loses the same `2^k - 1` at every alignment however long; `B`,
/// aligned, in the next leaf, is the parent's best at `2^10`.
#[test]
fn a_shrink_with_an_unchanged_leaf_summary_refreshes_the_parent() {
    const A: u64 = 4097;
    const B: u64 = 8192;
    let mut t = BTree::new();
    // Unit blocks at odd starts: usable length 0 at every alignment.
    let fillers = (0..200u64).map(|i| 10 * i + 1);
    let between = (0..9u64).map(|i| 7101 + 10 * i);
    let after = (0..400u64).map(|i| 10_241 + 10 * i);
    for x in fillers.chain(between).chain(after) {
        t.insert(x, x + 1);
    }
    t.insert(A, A + 3000);
    t.insert(B, B + 1990);
    t.insert(1 << 20, 1 << 21);
    t.enable_summaries(1024);
    let (pa, pb) = (t.find(A).unwrap(), t.find(B).unwrap());
    let h = t.height;
    assert!(h >= 2, "height {h}");
    assert_ne!(pa.leaf, pb.leaf);
    assert_eq!(pa.node[h - 1], pb.node[h - 1], "A and B under one parent");
    let word = t.leaf_sum(pa.leaf, 3000);
    t.set_range_at(&pa, A, A + 2000);
    assert_eq!(t.leaf_sum(pa.leaf, 2000), word, "the leaf's word is kept");
    t.check(0, 1 << 21).unwrap();
    assert_eq!(lowest(&mut t, 1990, 1024, 0, 1 << 21).map(|g| g.1), Some(B));
}

/// Blocks longer than half the space shrink and are searched like any
/// other, below a parent that is not the root (no sum of two lengths
/// overflows on the way up).
#[test]
fn a_block_over_half_the_space_shrinks_under_an_inner_parent() {
    const A: u64 = 4097;
    let mut t = BTree::new();
    let before = (0..200u64).map(|i| 10 * i + 1);
    let after = (0..400u64).map(|i| 0xd000_0000_0000_0001 + 10 * i);
    for x in before.chain(after) {
        t.insert(x, x + 1);
    }
    t.insert(A, A + (3 << 62));
    t.insert(0xe000_0000_0000_0000, 0xf000_0000_0000_0000);
    t.enable_summaries(1024);
    let pa = t.find(A).unwrap();
    assert!(t.height >= 2, "height {}", t.height);
    t.set_range_at(&pa, A, A + (1 << 63));
    t.check(0, u64::MAX).unwrap();
    let want = Some(A + 1023);
    assert_eq!(
        lowest(&mut t, 1 << 62, 1024, 0, u64::MAX).map(|g| g.1),
        want
    );
}

/// `last_below` finds the last key below the one asked (the first slot
/// when none is) at every width the node sizes may take (powers of two
/// up to 32: spans of 4^j and of 2 * 4^j), with slots past a node's
/// length at `u64::MAX`.
#[test]
fn last_below_matches_a_scan_at_every_width() {
    fn at<const N: usize>() {
        for len in 1..=N {
            let mut keys = [u64::MAX; N];
            for (i, k) in keys.iter_mut().take(len).enumerate() {
                *k = 10 * i as u64 + 5;
            }
            for key in 0..10 * N as u64 + 10 {
                let below = keys.iter().filter(|&&k| k < key).count();
                let want = below.saturating_sub(1);
                assert_eq!(
                    node::last_below(&keys, key),
                    want,
                    "N {N} len {len} key {key}"
                );
            }
        }
    }
    at::<2>();
    at::<4>();
    at::<8>();
    at::<16>();
    at::<32>();
}

/// A search from the cleared bound still finds a fit that takes the whole
/// rest of its window (`hi - bound == size`): only a window shorter than
/// the request ends it at once.
#[test]
fn a_fit_that_fills_the_window_from_the_bound_is_found() {
    // One-unit blocks at 10i: too short for 3 units aligned to 2; the
    // first fit is at 5000.
    let mut t = units_every_10_below(400);
    t.insert(5000, 10_000);
    t.enable_summaries(2);
    assert_eq!(lowest(&mut t, 3, 2, 0, 10_000).map(|g| g.1), Some(5000));
    assert_eq!(t.cleared.bound, 5000);
    assert_eq!(lowest(&mut t, 3, 2, 0, 5003).map(|g| g.1), Some(5000));
    assert_eq!(lowest(&mut t, 3, 2, 0, 5002).map(|g| g.1), None);
}

/// A search resumed in the remembered leaf bounds each level by the path
/// to that leaf: the next child of the root starts where the leaf's
/// subtree ends, however close to the bound. Here it starts two units
/// above the bound and holds the fit.
#[test]
fn a_resumed_search_enters_the_next_subtree_just_above_the_bound() {
    let mut t = units_every_10_below(2000);
    t.enable_summaries(2);
    assert!(t.height >= 2, "height {}", t.height);
    // The root's second child starts at `k`; the block before it, at
    // `k - 10`, grows to hold 4 units aligned to 2: the lowest fit.
    let k = t.inners[t.root as usize].key[1];
    let before = t.find(k - 10).unwrap();
    t.set_range_at(&before, k - 10, k - 6);
    assert_eq!(lowest(&mut t, 4, 2, 0, u64::MAX).map(|g| g.1), Some(k - 10));
    assert_eq!(t.cleared.bound, k - 10);
    let shape = t.shape;
    // It shrinks back (the bound stays), and the block at `k` grows down
    // to `k - 8`, two units above the bound: the lowest fit is there.
    let before = t.find(k - 10).unwrap();
    t.set_range_at(&before, k - 10, k - 9);
    let first = t.find(k).unwrap();
    t.set_range_at(&first, k - 8, k + 1);
    assert_eq!(t.inners[t.root as usize].key[1], k - 8);
    assert_eq!((t.shape, t.cleared.bound), (shape, k - 10));
    assert!(t.start_leaf().is_some());
    assert_eq!(lowest(&mut t, 4, 2, 0, u64::MAX).map(|g| g.1), Some(k - 8));
    assert_eq!(t.lowest_fit_linear(4, 2, 0, u64::MAX), Some(k - 8));
    t.check(0, u64::MAX).unwrap();
}

/// A fit at a child's first block that takes the rest of the window
/// (`hi - key == size`) passes the lowest-fit search's key test, and one
/// that ends at the next child's key with the window's start `size` below
/// it (`upper - lo == size`) passes the highest-fit search's end test.
#[test]
fn a_fit_exactly_as_long_as_the_rest_of_the_window_at_a_child_edge() {
    // One-unit blocks at 4i below 4000 (three levels), the wilderness from
    // 10_000; the root's second child starts at `k`.
    let mut t = units_below_4000_and_a_wilderness();
    assert!(t.height >= 2, "height {}", t.height);
    let k = t.inners[t.root as usize].key[1];
    let first = t.find(k).unwrap();
    t.set_range_at(&first, k, k + 3);
    assert_eq!(lowest(&mut t, 3, 2, 0, k + 3).map(|g| g.1), Some(k));
    let before = t.find(k - 4).unwrap();
    t.set_range_at(&before, k - 4, k);
    assert_eq!(highest(&t, 3, 1, k - 3, k).map(|g| g.1), Some(k - 3));
    assert_eq!(t.highest_fit_linear(3, 1, k - 3, k), Some(k - 3));
}

/// A block moved down in place (both ends lower, as `set_range_at`
/// allows) is neither grown nor shrunk: its leaf's summary is recomputed,
/// so an alignment the block now meets is seen.
#[test]
fn a_block_moved_down_is_found_at_its_new_alignment() {
    // Blocks of 8 units at 16i + 1: one unit of each is aligned to 8.
    let mut t = BTree::new();
    for i in 0..300u64 {
        t.insert(16 * i + 1, 16 * i + 9);
    }
    t.insert(10_000, 20_000);
    t.enable_summaries(8);
    assert_eq!(lowest(&mut t, 8, 8, 0, 20_000).map(|g| g.1), Some(10_000));
    let p = t.find(1601).unwrap();
    t.set_range_at(&p, 1600, 1608);
    t.check(0, 20_000).unwrap();
    assert_eq!(lowest(&mut t, 8, 8, 0, 20_000).map(|g| g.1), Some(1600));
}
