use super::*;
use alloc::vec::Vec;
use proptest::prelude::*;

/// Sorted, non-overlapping ranges from `(gap, len)` pairs laid out left
/// to right, both scaled by `2^shift`: a set of free blocks of any
/// granule.
fn layout(raw: &[(u64, u64)], shift: u32) -> Vec<(u64, u64)> {
    let mut at = 0u64;
    raw.iter()
        .map(|&(gap, len)| {
            let s = at + (gap << shift);
            at = s + (len << shift);
            (s, at)
        })
        .collect()
}

/// The true `M_k` of a set of ranges, by brute force (`None`: negative).
fn brute(ranges: &[(u64, u64)], k: u32) -> Option<u64> {
    ranges
        .iter()
        .filter_map(|&(s, e)| {
            let a = s.checked_add((1u64 << k) - 1)? & !((1u64 << k) - 1);
            e.checked_sub(a)
        })
        .max()
}

/// Builds the summary of `ranges` as a tree would: a chain where each
/// range's subtree holds it and all the ranges after it.
fn chain(ranges: &[(u64, u64)]) -> (u64, AlignSummary) {
    let mut below: Option<(u64, AlignSummary)> = None;
    for &(s, e) in ranges.iter().rev() {
        let smax = below.map_or(0, |b| b.0).max(e - s);
        let mut parts = Vec::from([Part::Range(s, e)]);
        parts.extend(below.map(|(m, sum)| Part::Subtree(m, sum)));
        below = Some((smax, AlignSummary::of_subtree(smax, &parts)));
    }
    below.unwrap()
}

proptest! {
    /// Exact for `k <= g + CLASSES`, an upper bound beyond.
    #[test]
    fn usable_matches_brute_force(
        shift in 0u32..14,
        raw in proptest::collection::vec((0u64..1 << 20, 1u64..1 << 12), 1..12),
    ) {
        let ranges: Vec<(u64, u64)> = raw
            .iter()
            .map(|&(s, l)| (s << shift, (s + l) << shift))
            .collect();
        let (smax, sum) = chain(&ranges);
        let g = sum.granule();
        prop_assert!(g >= shift.min(G_MAX));
        for k in 0..64 {
            let truth = brute(&ranges, k);
            let got = sum.usable(smax, k);
            if k <= g + CLASSES {
                prop_assert_eq!(got, truth, "k {}", k);
            } else {
                prop_assert!(got >= truth, "k {}: bound {:?} < {:?}", k, got, truth);
            }
        }
    }
}

/// Builds the summary of `ranges` (sorted) as a balanced tree would,
/// with the fast [`AlignSummary::combine`]: the middle range is the
/// root, each half a child.
fn balanced(ranges: &[(u64, u64)]) -> Option<(u64, AlignSummary)> {
    let (left, rest) = ranges.split_at(ranges.len().checked_sub(1)? / 2);
    let ((s, e), right) = (rest[0], &rest[1..]);
    let (left, right) = (balanced(left), balanced(right));
    let smax = [left, right]
        .iter()
        .flatten()
        .map(|k| k.0)
        .fold(e - s, u64::max);
    Some((smax, AlignSummary::combine(smax, s, e, left, right)))
}

/// A child for [`AlignSummary::combine`]: the longest range and the
/// summary of a few ranges, any granule, short or long.
fn child() -> impl Strategy<Value = Option<(u64, AlignSummary)>> {
    let ranges = proptest::collection::vec((0u64..1 << 12, 1u64..1 << 10), 1..4);
    proptest::option::of((0u32..50, ranges).prop_map(|(shift, raw)| {
        let r: Vec<(u64, u64)> = raw
            .iter()
            .map(|&(s, l)| (s << shift, (s + l) << shift))
            .collect();
        chain(&r)
    }))
}

proptest! {
    /// Bit for bit the reference [`AlignSummary::of_subtree`], for
    /// children of any granule and ranges of any alignment.
    #[test]
    fn combine_matches_of_subtree(
        shift in 0u32..40,
        start in any::<u64>(),
        len in prop_oneof![1u64..64, 1u64..1 << 20, any::<u64>()],
        left in child(),
        right in child(),
        twins in any::<bool>(),
    ) {
        let s = start << shift;
        let e = s.saturating_add(len << shift.min(len.leading_zeros()));
        prop_assume!(s < e);
        let right = if twins { left } else { right };
        let smax = [left, right].iter().flatten().map(|k| k.0).fold(e - s, u64::max);
        let mut parts = Vec::from([Part::Range(s, e)]);
        parts.extend([left, right].iter().flatten().map(|&(m, sum)| Part::Subtree(m, sum)));
        prop_assert_eq!(
            AlignSummary::combine(smax, s, e, left, right),
            AlignSummary::of_subtree(smax, &parts)
        );
    }

    /// Summaries built by [`AlignSummary::combine`] alone, over a
    /// balanced tree, give the true `M_k`.
    #[test]
    fn combine_matches_brute_force(
        shift in 0u32..14,
        raw in proptest::collection::btree_map(0u64..1 << 12, 1u64..1 << 9, 1..40),
    ) {
        // Non-overlapping: each range stops before the next start.
        let starts: Vec<u64> = raw.keys().copied().collect();
        let ranges: Vec<(u64, u64)> = raw
            .iter()
            .enumerate()
            .map(|(i, (&s, &l))| {
                let e = starts.get(i + 1).map_or(s + l, |&n| n.min(s + l));
                ((s << 8) << shift, (e << 8) << shift)
            })
            .collect();
        let (smax, sum) = balanced(&ranges).unwrap();
        for k in 0..64 {
            let truth = brute(&ranges, k);
            let got = sum.usable(smax, k);
            if k <= sum.granule() + CLASSES {
                prop_assert_eq!(got, truth, "k {}", k);
            } else {
                prop_assert!(got >= truth, "k {}: bound {:?} < {:?}", k, got, truth);
            }
        }
    }
}

proptest! {
    /// Through a probe of any granule, the same usable lengths.
    #[test]
    fn usable_by_is_usable(kid in child(), g in 0u32..64, k in 0u32..64) {
        if let Some((smax, sum)) = kid {
            let p = Probe::new(g, k);
            prop_assert_eq!(sum.usable_by(&p, smax, k), sum.usable(smax, k));
            let own = Probe::new(sum.granule(), k);
            prop_assert_eq!(sum.usable_by(&own, smax, k), sum.usable(smax, k));
        }
    }

    /// The fast capping is the field-by-field one.
    #[test]
    fn capped_saturates_each_field(kid in child(), drop in prop_oneof![0u64..1 << 16, any::<u64>()]) {
        if let Some((smax, sum)) = kid {
            let new = smax.saturating_sub(drop);
            let g = sum.granule();
            let d = smax - new;
            let cut = if d == 0 { 0 } else { ((d - 1) >> g) + 1 };
            let mut w = sum.0 & !CLASS_BITS;
            for i in 1..=CLASSES {
                let f = (sum.0 >> offset(i)) & ((1 << i) - 1);
                w |= f.saturating_sub(cut) << offset(i);
            }
            prop_assert_eq!(sum.capped(smax, new), AlignSummary(w));
        }
    }
}

proptest! {
    /// A capped summary bounds every usable length of the shrunk set:
    /// ranges cut down to any part of themselves, finer than the
    /// summary's granule too.
    #[test]
    fn capped_bounds_the_shrunk_set(
        shift in 0u32..40,
        raw in proptest::collection::vec((0u64..1 << 12, 1u64..1 << 10, any::<u64>()), 1..8),
    ) {
        let mut old: Vec<(u64, u64)> = Vec::new();
        let mut new: Vec<(u64, u64)> = Vec::new();
        let mut at = 0;
        for &(gap, len, cut) in &raw {
            let (s, e) = ((at + gap) << shift, (at + gap + len) << shift);
            at += gap + len + 1;
            old.push((s, e));
            // A part of it, at any byte (or none: the range went).
            let a = s + (cut % (e - s));
            let b = a + ((cut >> 32) % (e - a)) + 1;
            if cut & 1 == 0 {
                new.push((a, b));
            }
        }
        let (old_max, sum) = chain(&old);
        let new_max = new.iter().map(|r| r.1 - r.0).max().unwrap_or(0);
        let capped = sum.capped(old_max, new_max);
        for k in 0..64 {
            let truth = brute(&new, k);
            let got = capped.usable(new_max, k);
            prop_assert!(got >= truth, "k {}: bound {:?} < {:?}", k, got, truth);
        }
    }
}

proptest! {
    /// The summary of a union of sets is the merge of theirs, bit for
    /// bit: what a subtree that gained a range relies on.
    #[test]
    fn merge_is_the_union(
        shifts in (0u32..50, 0u32..50),
        a in proptest::collection::vec((0u64..1 << 12, 1u64..1 << 10), 1..5),
        b in proptest::collection::vec((0u64..1 << 12, 1u64..1 << 10), 1..5),
    ) {
        let scale = |v: &[(u64, u64)], k: u32| -> Vec<(u64, u64)> {
            v.iter().map(|&(s, l)| (s << k, (s + l) << k)).collect()
        };
        let (a, b) = (scale(&a, shifts.0), scale(&b, shifts.1));
        let both: Vec<(u64, u64)> = a.iter().chain(&b).copied().collect();
        let (sa, sb, sab) = (chain(&a), chain(&b), chain(&both));
        prop_assert_eq!(AlignSummary::merge(sab.0, sa, sb), sab.1);
        prop_assert_eq!(AlignSummary::merge(sab.0, sb, sa), sab.1);
    }

    /// The same for sets of equally long ranges, the merge's shortcut
    /// when the granules agree too.
    #[test]
    fn merge_of_equal_lengths(
        shift in 0u32..50,
        len in 1u64..1 << 6,
        a in proptest::collection::vec(0u64..1 << 12, 1..5),
        b in proptest::collection::vec(0u64..1 << 12, 1..5),
    ) {
        let scale = |v: &[u64]| -> Vec<(u64, u64)> {
            v.iter().map(|&s| (s << shift, (s + len) << shift)).collect()
        };
        let (a, b) = (scale(&a), scale(&b));
        let both: Vec<(u64, u64)> = a.iter().chain(&b).copied().collect();
        let (sa, sb, sab) = (chain(&a), chain(&b), chain(&both));
        prop_assert_eq!(AlignSummary::merge(sab.0, sa, sb), sab.1);
    }
}

proptest! {
    /// Bit for bit the reference, for a leaf's ranges of any granule
    /// (long ones that lose at every class included).
    #[test]
    fn of_ranges_matches_of_subtree(
        shift in 0u32..44,
        raw in proptest::collection::vec((0u64..1 << 12, 1u64..1 << 12), 0..17),
    ) {
        let r = layout(&raw, shift);
        let starts: Vec<u64> = r.iter().map(|x| x.0).collect();
        let lens: Vec<u64> = r.iter().map(|x| x.1 - x.0).collect();
        let smax = lens.iter().copied().max().unwrap_or(0);
        let parts: Vec<Part> = r.iter().map(|&(s, e)| Part::Range(s, e)).collect();
        prop_assert_eq!(
            AlignSummary::of_ranges(smax, &starts, &lens),
            AlignSummary::of_subtree(smax, &parts)
        );
    }

    /// Bit for bit the reference, for an inner node's children of any
    /// granule.
    #[test]
    fn of_children_matches_of_subtree(
        kids in proptest::collection::vec(child(), 0..17),
    ) {
        let kids: Vec<(u64, AlignSummary)> = kids.into_iter().flatten().collect();
        let smax = kids.iter().map(|k| k.0).max().unwrap_or(0);
        let maxes: Vec<u64> = kids.iter().map(|k| k.0).collect();
        let sums: Vec<AlignSummary> = kids.iter().map(|k| k.1).collect();
        let parts: Vec<Part> = kids.iter().map(|&(m, s)| Part::Subtree(m, s)).collect();
        prop_assert_eq!(
            AlignSummary::of_children(smax, &maxes, &sums),
            AlignSummary::of_subtree(smax, &parts)
        );
    }

    /// The multiplications place every class field in its lane, whatever
    /// the other fields and the bits outside them hold.
    #[test]
    fn class_lanes_are_the_fields(w in any::<u64>()) {
        let mut want = [0u16; LANES];
        for (lane, field) in want.iter_mut().zip(AlignSummary(w).unpack()) {
            *lane = field as u16;
        }
        prop_assert_eq!(class_lanes(w), want);
    }
}

#[test]
fn class_lanes_at_full_fields() {
    // Every field at its largest: the copies' sums are at their largest.
    let w = CLASS_BITS | 0x3f;
    let want: Vec<u16> = (1..=CLASSES).map(|i| (1 << i) - 1).collect();
    assert_eq!(class_lanes(w)[..CLASSES as usize], want[..]);
    assert_eq!(class_lanes(w)[CLASSES as usize..], [0; 6]);
    assert_eq!(class_lanes(u64::MAX), class_lanes(w));
}

#[test]
fn edges_of_the_space() {
    let top = u64::MAX;
    let (smax, sum) = chain(&[(0, 1 << 63), (top - 4096, top)]);
    assert_eq!(sum.granule(), 0);
    for k in 0..=CLASSES {
        assert_eq!(sum.usable(smax, k), Some(1 << 63));
    }
    let (smax, sum) = chain(&[(1 << 62, 1 << 63)]);
    assert_eq!(sum.granule(), G_MAX);
    assert_eq!(sum.usable(smax, 62), Some(1 << 62));
    assert_eq!(sum.usable(smax, 63), Some(0));
}

proptest! {
    /// [`AlignSummary::of_range`] is the summary of its lone range, bit
    /// for bit: the reference, and the combine with no children.
    #[test]
    fn of_range_matches_of_subtree(
        shift in 0u32..56,
        start in prop_oneof![Just(0u64), 0u64..1 << 12, any::<u64>()],
        // Up to 2^11 granules too: "no fit" in every field's range.
        len in prop_oneof![1u64..64, 1u64..1 << 11, 1u64..1 << 20, any::<u64>()],
    ) {
        let s = start << shift;
        let e = s.saturating_add(len << shift.min(len.leading_zeros()));
        prop_assume!(s < e);
        let sum = AlignSummary::of_range(s, e);
        prop_assert_eq!(sum, AlignSummary::of_subtree(e - s, &[Part::Range(s, e)]));
        prop_assert_eq!(sum, AlignSummary::combine(e - s, s, e, None, None));
    }
}

/// A child of a coarser granule than the subtree's, in a subtree whose
/// "no fit" is `CAP` granules (1023 and one): above every field, so the
/// child's rescaled fields are left unclamped.
#[test]
fn coarse_child_beside_the_widest_no_fit() {
    // Granule 0, 1023 bytes long: "no fit" is 1024 granules.
    let (s, e) = (1, 1024);
    let long = chain(&[(s, e)]);
    // Granule 1, well shorter: its base is 1021 granules.
    let short = chain(&[(2048, 2050)]);
    assert_eq!(short.1.granule(), 1);
    let parts = [Part::Range(s, e), Part::Subtree(short.0, short.1)];
    let want = AlignSummary::of_subtree(long.0, &parts);
    assert_eq!(want.granule(), 0);
    assert_eq!(AlignSummary::combine(long.0, s, e, Some(short), None), want);
    assert_eq!(AlignSummary::merge(long.0, long, short), want);
    assert_eq!(AlignSummary::merge(long.0, short, long), want);
}

/// A range's fields clamped at "no fit" `c`, for every rounding `t` and
/// every `c` a combine passes: each field the low bits of `t`, or `c`
/// where they exceed it.
#[test]
fn spread_capped_clamps_each_field() {
    for t in 0..u64::from(CAP) {
        for c in 1..=CAP + 1 {
            let mut want = 0;
            for i in 1..=CLASSES {
                want |= (t & ((1 << i) - 1)).min(u64::from(c)) << offset(i);
            }
            assert_eq!(spread_capped(t, c), want, "t {t} c {c}");
        }
    }
}
