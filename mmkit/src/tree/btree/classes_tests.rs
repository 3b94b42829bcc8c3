//! The length classes against a list of free ranges: plain best fits
//! (no window, no alignment above the unit) on trees of every height,
//! with lengths in and beyond the classes, through a fall of the granule
//! floor; `check()` verifies every class word.

use super::classes::CLASSES;
use super::tests::{check_against, free_range};
use super::*;
use alloc::vec::Vec;
use proptest::prelude::*;

/// A range allocator over the tree taking plain best fits of 1 to
/// `sizes` units, `2^shift` bytes each until half-way and `2^(shift -
/// 3)` after (the granule floor falls then). Returns the greatest height seen.
fn best_fit_churn(seed: u64, steps: usize, sizes: u64, shift: u32) -> Result<usize, TestCaseError> {
    let mut rnd = crate::testkit::xorshift(seed | 1);
    let (lo, hi) = (0, 1u64 << (shift + 24));
    let mut t = BTree::new();
    t.insert(lo, hi);
    let mut model: Vec<(u64, u64)> = Vec::from([(lo, hi)]);
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut max_height = 0;
    for step in 0..steps {
        let unit = if step < steps / 2 { shift } else { shift - 3 };
        if rnd() % 5 < 3 || live.is_empty() {
            let size = (rnd() % sizes + 1) << unit;
            let want = model
                .iter()
                .filter(|&&(s, e)| e - s >= size)
                .map(|&(s, e)| (e - s, s))
                .min();
            may_beat_matches(&mut t, &model, size, rnd(), unit)?;
            let mut pos = Pos::new();
            let got = t.best_fit(size, 1 << unit, lo, hi, &mut pos);
            prop_assert!(
                t.classes.is_some(),
                "a plain best fit turned the classes off"
            );
            prop_assert_eq!(got, want.map(|w| w.1));
            if let Some(a) = got {
                let (s, e) = t.get(&pos);
                prop_assert_eq!(s, a);
                match e - s == size {
                    true => t.remove_at(&pos),
                    false => t.set_range_at(&pos, a + size, e),
                }
                crate::testkit::model_take(&mut model, a, size);
                live.push((a, a + size));
            }
        } else {
            let (s, e) = live.swap_remove((rnd() % live.len() as u64) as usize);
            free_range(&mut t, &mut model, s, e);
        }
        if step % 97 == 0 || step + 1 == steps {
            max_height = max_height.max(check_against(&t, (lo, hi), &model)?);
        }
    }
    Ok(max_height)
}

/// `may_beat(size, bound)` against the free list, for a bound drawn from
/// `r`: false only when no block holds `size` bytes and comes before the
/// bound; with the classes at the unit's granule and a bound of whole
/// units within the classes, exactly when no block is `size` to the
/// bound's length long (nothing else is in the classes' reach).
fn may_beat_matches(
    t: &mut BTree,
    model: &[(u64, u64)],
    size: u64,
    r: u64,
    unit: u32,
) -> Result<(), TestCaseError> {
    let len = match r % 4 {
        0 => size,
        1 => size + (r >> 8) % (4 << unit),
        _ => ((r >> 8) % (CLASSES + 8) + 1) << unit,
    };
    let bound = (len, (r >> 16) % (1 << (unit + 24)));
    let beats = model
        .iter()
        .any(|&(s, e)| e - s >= size && (e - s, s) < bound);
    let in_range = model.iter().any(|&(s, e)| (size..=len).contains(&(e - s)));
    let got = t.may_beat(size, bound);
    prop_assert!(
        got || !beats,
        "ruled out {size} below {bound:?}, which a block beats"
    );
    let exact = len % (1 << unit) == 0 && len >> unit <= CLASSES && len >= size;
    if exact && t.class_granule() == Some(unit) {
        prop_assert_eq!(got, in_range, "size {} bound {:?}", size, bound);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    /// Requests up to twice the classes' reach, so the size index answers
    /// the longer ones and keeps the blocks beyond the classes.
    #[test]
    fn plain_best_fits_match_model(seed in any::<u64>(), shift in 3u32..14) {
        best_fit_churn(seed, 6000, 2 * CLASSES, shift)?;
    }
}

/// The churn reaches two inner levels: class words in a root, in inner
/// nodes below it and from leaves are kept and checked.
#[test]
fn plain_best_fits_reach_every_level() {
    let height = best_fit_churn(7, 40_000, 24, 12).expect("matches the model");
    assert!(height >= 2, "height {height}");
}

/// A window or an alignment above the floor turns the classes off, and
/// the size index then files every block.
#[test]
fn a_request_the_classes_cannot_answer_turns_them_off() {
    let mut t = BTree::new();
    for i in 0..200u64 {
        t.insert((i << 20) + (1 << 12), (i << 20) + ((i % 150 + 2) << 12));
    }
    let mut pos = Pos::new();
    let best = |t: &mut BTree, align| {
        let got = t.best_fit(3 << 12, align, 0, u64::MAX, &mut Pos::new());
        assert_eq!(got, t.best_fit_linear(3 << 12, align, 0, u64::MAX));
        got
    };
    assert_eq!(best(&mut t, 1 << 12), Some((2 << 20) + (1 << 12)));
    assert!(t.classes.is_some());
    t.check(0, u64::MAX).expect("classes on");
    assert_eq!(best(&mut t, 1 << 13), Some((3 << 20) + (2 << 12)));
    assert!(t.classes.is_none());
    t.check(0, u64::MAX).expect("classes off");
    assert_eq!(best(&mut t, 1 << 12), Some((2 << 20) + (1 << 12)));
    assert_eq!(t.best_fit(1, 1, 0, u64::MAX, &mut pos), Some(1 << 12));
}

/// `may_beat` sees blocks in a root leaf, in a deeper tree and in the
/// wilderness (a short one, within the classes).
#[test]
fn may_beat_sees_every_place_a_block_is() {
    let g = 1u64 << 12;
    for blocks in [4u64, 200] {
        let mut t = BTree::new();
        // One-granule blocks, one of three granules, and a wilderness of five.
        for i in 0..blocks {
            t.insert(i * 8 * g, i * 8 * g + g);
        }
        t.insert(blocks * 8 * g, blocks * 8 * g + 3 * g);
        let top = (blocks + 1) * 8 * g;
        t.insert(top, top + 5 * g);
        assert_eq!(
            t.best_fit(2 * g, g, 0, u64::MAX, &mut Pos::new()),
            Some(blocks * 8 * g)
        );
        assert!(t.class_granule().is_some());
        assert_eq!(blocks > 100, t.height > 0);
        assert!(t.may_beat(g, (g, u64::MAX)), "the one-granule blocks");
        assert!(
            !t.may_beat(2 * g, (2 * g, 0)),
            "nothing is two granules long"
        );
        assert!(
            t.may_beat(2 * g, (3 * g, u64::MAX)),
            "the three-granule block"
        );
        assert!(
            !t.may_beat(4 * g, (4 * g, u64::MAX)),
            "nothing is four granules long"
        );
        assert!(t.may_beat(4 * g, (5 * g, u64::MAX)), "the wilderness");
        assert!(t.may_beat(5 * g, (CLASSES * g, 0)), "the wilderness");
        assert!(t.may_beat(6 * g, (u64::MAX, 0)), "no bound");
        t.check(0, u64::MAX).expect("a sound tree");
    }
}

/// The root's classes kept between calls are read again when the classes
/// move to a finer granule, even though no block changed since.
#[test]
fn may_beat_follows_the_classes_to_a_finer_granule() {
    let g = 1u64 << 12;
    let mut t = BTree::new();
    t.insert(0, 2 * g);
    t.insert(1 << 20, (1 << 20) + 3 * g);
    assert_eq!(t.best_fit(g, 1, 0, u64::MAX, &mut Pos::new()), Some(0));
    assert_eq!(t.class_granule(), Some(12));
    // A block of three 512-byte granules: the floor falls to 2^9.
    t.insert(4 * g, 4 * g + 1536);
    assert!(t.may_beat(2 * g, (2 * g, u64::MAX)));
    // A best fit that finds nothing moves the classes and changes no block.
    assert_eq!(t.best_fit(1 << 19, 1, 0, u64::MAX, &mut Pos::new()), None);
    assert_eq!(t.class_granule(), Some(9));
    assert!(
        t.may_beat(1536, (1536, u64::MAX)),
        "the block of 1536 bytes"
    );
    t.check(0, u64::MAX).expect("a sound tree");
}
