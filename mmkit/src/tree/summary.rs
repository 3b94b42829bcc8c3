//! [`AlignSummary`]: what a subtree of free ranges can hold at each
//! alignment, packed in one `u64`, so an aligned lowest-fit search prunes
//! every subtree that cannot hold an aligned fit.
//!
//! For a range `[b, e)` and an alignment `2^k`, the *usable length* is
//! `u_k = e - roundup(b, 2^k)`: an aligned request of `size` fits in the
//! range iff `size <= u_k` (negative: no aligned address at all). For a
//! subtree let `M_k` be the largest `u_k` of its ranges; `M_0 = smax`,
//! the longest range, and `M_k` never grows with `k`.
//!
//! Storing `M_k` for all 64 alignments would take 512 bytes. Two facts make
//! one word enough:
//! - let `g` be the *granule* of the subtree, the largest `g <= 53` such
//!   that every start and end in it is a multiple of `2^g` (4 KiB pages give
//!   `g >= 12`). For `k <= g`, `u_k = e - b`, so `M_k = M_0`;
//! - for `k > g` the *deficit* `D_k = M_0 - M_k` is a multiple of `2^g` and
//!   below `2^k` (the longest range loses less than `2^k` to rounding), so
//!   `D_k / 2^g` fits in `k - g` bits.
//!
//! ```text
//!  bits  0..6    g, the granule (0..=53)
//!  bits  6..7    D_{g+1} / 2^g     (1 bit)
//!  bits  7..9    D_{g+2} / 2^g     (2 bits)
//!   ...
//!  bits 51..61   D_{g+10} / 2^g    (10 bits)
//! ```
//!
//! A negative `M_k` (no range holds an address aligned to `2^k`) is
//! stored as `-2^g`: all negative values mean "no fit", and one canonical
//! value keeps the summary unchanged when such ranges move.
//!
//! So `M_k` is exact for every `k <= g + 10` (up to 1024 granules: 4 MiB
//! for 4 KiB pages), and for larger `k` the summary gives `M_{g+10}`, an
//! upper bound: pruning stays correct, only weaker.
//!
//! Invariant (checked by `RangeTree::check`): a node's summary is
//! [`AlignSummary::of_subtree`] of its own range and its children's
//! summaries.

/// Alignment classes stored above the granule.
pub const CLASSES: u32 = 10;

/// The largest granule kept, so that `g + CLASSES <= 63`.
const G_MAX: u32 = 63 - CLASSES;

const G_BITS: u32 = 6;

/// First bit of class `i`'s deficit (`1 <= i <= CLASSES`): class `j`
/// takes `j` bits.
#[inline]
const fn offset(i: u32) -> u32 {
    G_BITS + i * (i - 1) / 2
}

/// The aligned capacity of a subtree of free ranges, relative to its
/// longest range (the encoding is derived in `mmkit/src/tree/summary.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlignSummary(u64);

/// One part of a subtree, as [`AlignSummary::of_subtree`] combines them.
#[derive(Debug, Clone, Copy)]
pub enum Part {
    /// A range `[start, end)`.
    Range(u64, u64),
    /// A child subtree: its longest range and its summary.
    Subtree(u64, AlignSummary),
}

impl AlignSummary {
    /// The summary of nothing (the default).
    pub const ZERO: AlignSummary = AlignSummary(0);

    /// The granule exponent `g`.
    #[inline]
    pub fn granule(self) -> u32 {
        (self.0 & ((1 << G_BITS) - 1)) as u32
    }

    /// `D_{g+i}`, in bytes (`1 <= i <= CLASSES`).
    #[inline]
    fn deficit(self, i: u32) -> u64 {
        let bits = (self.0 >> offset(i)) & ((1 << i) - 1);
        bits << self.granule()
    }

    /// An upper bound on the usable length `M_k` at alignment `2^k` of the
    /// subtree whose longest range is `smax`, exact when
    /// `k <= granule + CLASSES`; `None` when no range in the subtree holds
    /// an address aligned to `2^k`.
    #[inline]
    pub fn usable(self, smax: u64, k: u32) -> Option<u64> {
        let g = self.granule();
        if k <= g {
            return Some(smax);
        }
        smax.checked_sub(self.deficit((k - g).min(CLASSES)))
    }

    /// The deficits `D_{g+1} .. D_{g+CLASSES}` in units of `2^g`.
    #[inline(always)]
    fn unpack(self) -> [u64; CLASSES as usize] {
        let w = self.0;
        macro_rules! class {
            ($i:expr) => {
                (w >> offset($i)) & ((1 << $i) - 1)
            };
        }
        [
            class!(1),
            class!(2),
            class!(3),
            class!(4),
            class!(5),
            class!(6),
            class!(7),
            class!(8),
            class!(9),
            class!(10),
        ]
    }

    /// The summary of a subtree whose longest range is `smax`, made of
    /// `parts` (its own range and its children).
    ///
    /// Deficits are combined in units of the granule, in 16-bit lanes:
    /// every true deficit of class `i` is below `2^i` granules, so a
    /// contribution is clamped at `2^CLASSES` granules without changing
    /// the minimum, and the lanes stay small enough to vectorize.
    ///
    /// # Complexity
    /// O(CLASSES * parts).
    #[inline]
    pub fn of_subtree(smax: u64, parts: &[Part]) -> AlignSummary {
        let mut g = G_MAX;
        for p in parts {
            g = g.min(match *p {
                Part::Range(s, e) => s.trailing_zeros().min(e.trailing_zeros()),
                Part::Subtree(_, sum) => sum.granule(),
            });
        }
        // d[i] = D_{g+1+i} of the whole, in granules, = min over parts.
        let mut d = [CAP; LANES];
        for p in parts {
            let len = match *p {
                Part::Range(s, e) => e - s,
                Part::Subtree(m, _) => m,
            };
            let base = units(smax - len, g);
            if base == CAP {
                // CAP granules shorter than the longest range: it loses to
                // that range at every class (a free block beside the huge
                // last one, say), so skip unpacking it.
                continue;
            }
            let c = match *p {
                Part::Range(s, _) => range_lanes(s, g),
                Part::Subtree(_, sum) => sum.lanes(g),
            };
            for (di, ci) in d.iter_mut().zip(c) {
                *di = (*di).min(base + ci);
            }
        }
        // Every negative M_k means the same (no aligned fit at all): store
        // it as -2^g, so moving ranges that hold no aligned address leave
        // the summary unchanged and its propagation stops early.
        let none = units(smax, g) + 1;
        let mut word = u64::from(g);
        for (i, &di) in d[..CLASSES as usize].iter().enumerate() {
            let (i, di) = (i as u32 + 1, di.min(none));
            debug_assert!(u64::from(di) < 1 << i, "deficit {di:#x} not below 2^k");
            word |= u64::from(di) << offset(i);
        }
        AlignSummary(word)
    }

    /// Whether `part`, beside a child subtree with this summary that holds
    /// the longest range `smax`, leaves the summary unchanged: it is at
    /// least `2^CLASSES` granules shorter (it loses at every class) and no
    /// finer than this summary's granule. When every other part of a
    /// subtree does, the subtree's summary is this one (what
    /// [`of_subtree`](Self::of_subtree) computes, without unpacking and
    /// packing): the spine above a huge free block, the space's last say.
    #[inline]
    pub fn dominates(self, smax: u64, part: Part) -> bool {
        let g = self.granule();
        let (len, granule) = match part {
            Part::Range(s, e) => (e - s, s.trailing_zeros().min(e.trailing_zeros())),
            Part::Subtree(m, sum) => (m, sum.granule()),
        };
        far_shorter(smax - len, g) && granule >= g
    }

    /// The deficits `D_{g+1} .. D_{g+CLASSES}` in granules of `2^g`, for a
    /// granule `g` at most this summary's own: a class at or below the
    /// summary's granule loses nothing to rounding.
    #[inline(always)]
    fn lanes(self, g: u32) -> Lanes {
        let own = self.unpack();
        let shift = (self.granule() - g) as usize;
        let mut c = [0; LANES];
        if shift == 0 {
            // The common case: one granule, classes line up.
            for (ci, o) in c.iter_mut().zip(own) {
                *ci = o as u16;
            }
            return c;
        }
        for i in shift..CLASSES as usize {
            // The class g+1+i is class g+1+i-shift of the summary's; its
            // deficit is below 2^(i + 1) granules, so it fits in a lane.
            c[i] = (own[i - shift] << shift) as u16;
        }
        c
    }
}

/// Lanes of deficits in granules: `CLASSES` used, padded for vectorizing.
const LANES: usize = 16;
type Lanes = [u16; LANES];

/// A deficit of `2^CLASSES` granules or more: above the true deficit of
/// every class, so larger contributions are clamped to it.
const CAP: u16 = 1 << CLASSES;

/// Whether a range `shorter` bytes shorter than a subtree's longest loses
/// to it at every alignment class of granule `2^g`: `2^CLASSES` granules.
#[inline]
pub(crate) fn far_shorter(shorter: u64, g: u32) -> bool {
    shorter >> g >= u64::from(CAP)
}

/// `x` in granules of `2^g`, clamped at [`CAP`].
#[inline(always)]
fn units(x: u64, g: u32) -> u16 {
    (x >> g).min(u64::from(CAP)) as u16
}

/// What rounding `start` up to each alignment `2^(g+1) .. 2^(g+CLASSES)`
/// costs, in granules (`start` is a multiple of `2^g`).
#[inline(always)]
fn range_lanes(start: u64, g: u32) -> Lanes {
    let t = (start.wrapping_neg() >> g) as u16 & (CAP - 1);
    let mut c = [0; LANES];
    for (i, ci) in c[..CLASSES as usize].iter_mut().enumerate() {
        *ci = t & ((2 << i) - 1);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use proptest::prelude::*;

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
}
