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
//! The summary of a set of ranges is [`AlignSummary::of_subtree`] of its
//! parts (ranges, and the summaries of subsets). The B+tree stores upper
//! bounds of it, not always the value itself (see `btree`), and
//! `BTree::check` holds every stored summary to the usable lengths
//! computed from the blocks.
//!
//! # The fast combine
//!
//! [`AlignSummary::of_subtree`] is the definition: unpack each part's
//! deficits into lanes, add its *base* (how many granules it is shorter
//! than the longest range), take the minimum per lane, clamp at "no fit",
//! pack. Where a block joins a set whose summary is known (a block
//! inserted or grown, up every level of the tree), the tree uses
//! [`AlignSummary::combine`] instead, which gives the same word
//! bit for bit (a proptest compares them on arbitrary words) without
//! unpacking: the ten class fields are operated on in place, as lanes of
//! one `u64` of uneven widths (SWAR).
//! - *minimum*: per field, subtracting the other field's low bits from
//!   this one's with its top bit forced on never borrows from the next
//!   field, and leaves `a_low >= b_low` in the top bit; with the top bits
//!   that decides `a < b` per field. The top bits found are filled down
//!   their field (four shifts, masked to stay inside it) to select.
//! - *base*: added to every field, saturating at the field's largest value
//!   `2^i - 1`. Exact for the minimum, because some part is not shorter
//!   than the longest range (base 0) and its class-`i` deficit is below
//!   `2^i` granules, so the minimum of a field never is a saturated sum.
//!   For the same reason the fields can start all ones.
//! - *a range*: class `i` loses the low `i` bits of `t`, the granules that
//!   rounding its start up to `2^(g+CLASSES)` costs: copies of `t`, placed
//!   by a multiplication, masked to each field.
//! - *no fit*: a child's fields plus its base never exceed the subtree's
//!   "no fit" value (they are at most the child's own, and the granules
//!   add up), so only the range is clamped, in scalar: its fields grow
//!   with the class, so the clamp takes all of them from the first that
//!   exceeds it. A part whose base reaches "no fit" loses at every class
//!   and is skipped.
//! - a child whose granule is coarser than the subtree's is rescaled field
//!   by field and clamped (the only loop; rare once subtrees are large),
//!   and of two equal children only one counts.
//!
//! [`AlignSummary::merge`] is the same combine of two child-like parts and
//! no range: the summary of a union of two sets of ranges, since a summary
//! depends on its set alone; for two equally long parts of one granule it
//! is a lone fieldwise minimum. [`AlignSummary::of_range`] is the combine
//! of a lone range.
//!
//! A node recomputed whole has up to 16 parts:
//! [`AlignSummary::of_ranges`] (a leaf's blocks) and
//! [`AlignSummary::of_children`] (an inner node's entries) are
//! `of_subtree` read straight from the node's arrays, bit for bit (proptests
//! again), in `i16` lanes that SSE2 takes the minimum of in one instruction:
//! independent lanes, where folding the children with the SWAR combine is
//! one long dependency chain. A child's ten fields reach their lanes by
//! three multiplications, each placing several fields at once, into three
//! words whose bytes are the lanes' (`class_lanes`): the lanes are read
//! back as one block, with no shift and store per lane.

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
/// longest range (the encoding is derived in `mmkit/src/tree/summary/mod.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlignSummary(u64);

/// Where `M_k` lies in summaries of granule `g`, for
/// [`AlignSummary::usable_by`].
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    g: u32,
    shift: u32,
    mask: u64,
}

impl Probe {
    /// The probe for alignment `2^k` in summaries of granule `g`.
    pub fn new(g: u32, k: u32) -> Probe {
        if k <= g {
            // No loss to rounding: the mask reads a deficit of 0.
            return Probe {
                g,
                shift: 0,
                mask: 0,
            };
        }
        let i = (k - g).min(CLASSES);
        Probe {
            g,
            shift: offset(i),
            mask: (1 << i) - 1,
        }
    }
}

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

    /// The word as it is stored: a size tree keeps a plain number in a
    /// summary's slot of its inner nodes (`btree/size_tree.rs`).
    #[inline]
    pub(crate) const fn to_bits(self) -> u64 {
        self.0
    }

    /// A slot holding the word `bits` (see [`to_bits`](Self::to_bits)).
    #[inline]
    pub(crate) const fn from_bits(bits: u64) -> AlignSummary {
        AlignSummary(bits)
    }

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

    /// [`usable`](Self::usable) read through `p`, made once for a search
    /// that reads many summaries at one alignment: for a summary of the
    /// probe's granule (the usual case) a shift and a mask.
    #[inline]
    pub fn usable_by(self, p: &Probe, smax: u64, k: u32) -> Option<u64> {
        if self.granule() == p.g {
            smax.checked_sub(((self.0 >> p.shift) & p.mask) << p.g)
        } else {
            self.usable(smax, k)
        }
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
    /// `parts` (ranges, and the summaries of subsets): the definition,
    /// which the tests hold [`combine`](Self::combine) and the node
    /// recomputations to.
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
        let mut lanes = [0i16; LANES];
        for (l, &di) in lanes.iter_mut().zip(&d) {
            *l = di as i16;
        }
        pack(smax, g, &lanes)
    }

    /// [`of_subtree`](Self::of_subtree) of ranges alone (a B+tree leaf's
    /// blocks, `starts[i]..starts[i] + lens[i]`, the longest `smax`): the
    /// same word, bit for bit, without building parts. The granule is the
    /// trailing zeros of all starts and lengths OR-ed together (a start
    /// and its end are multiples of `2^g` iff the start and the length
    /// are, so that is the minimum of the bounds'), and no end is formed;
    /// each range goes into every lane at once, and one `CAP` granules
    /// shorter than the longest is skipped (it loses at every class).
    /// Lanes are `i16` (every value stays below `2^11`), whose minimum is
    /// one SSE2 instruction.
    ///
    /// # Complexity
    /// O(ranges), about twenty instructions each.
    #[inline]
    pub fn of_ranges(smax: u64, starts: &[u64], lens: &[u64]) -> AlignSummary {
        let n = starts.len().min(lens.len());
        let (starts, lens) = (&starts[..n], &lens[..n]);
        let bounds = starts.iter().chain(lens).fold(0, |a, &x| a | x);
        let g = bounds.trailing_zeros().min(G_MAX);
        let mut d = [CAP as i16; LANES];
        for (&s, &len) in starts.iter().zip(lens) {
            let base = units(smax - len, g);
            if base == CAP {
                continue; // loses at every class
            }
            let base = base as i16;
            let t = (s.wrapping_neg() >> g) as i16 & (CAP as i16 - 1);
            for (di, m) in d.iter_mut().zip(RANGE_MASKS) {
                *di = (*di).min(base + (t & m));
            }
        }
        pack(smax, g, &d)
    }

    /// [`of_subtree`](Self::of_subtree) of child subtrees alone (a B+tree
    /// inner node's entries: longest blocks `maxes[i]`, summaries
    /// `sums[i]`): the same word, bit for bit, without building parts.
    ///
    /// # Complexity
    /// O(children).
    #[inline]
    pub fn of_children(smax: u64, maxes: &[u64], sums: &[AlignSummary]) -> AlignSummary {
        let n = maxes.len().min(sums.len());
        let (maxes, sums) = (&maxes[..n], &sums[..n]);
        let g = sums.iter().fold(G_MAX, |g, s| g.min(s.granule()));
        let mut d = [CAP as i16; LANES];
        for (&m, &sum) in maxes.iter().zip(sums) {
            let base = units(smax - m, g);
            if base == CAP {
                continue; // loses at every class: not unpacked
            }
            let c = sum.lanes(g);
            for (di, ci) in d.iter_mut().zip(c) {
                *di = (*di).min(base as i16 + ci as i16);
            }
        }
        pack(smax, g, &d)
    }

    /// [`of_subtree`](Self::of_subtree) of a range `[start, end)` and up
    /// to two summarized sets `(smax, summary)`, where `smax` is the
    /// longest of the parts (the B+tree passes one set: the blocks the
    /// range joins). The same value, bit for bit, computed on the packed
    /// words (see "The fast combine" in the module docs).
    ///
    /// # Complexity
    /// O(1): a few dozen word operations.
    #[inline]
    pub fn combine(
        smax: u64,
        start: u64,
        end: u64,
        left: Option<(u64, AlignSummary)>,
        right: Option<(u64, AlignSummary)>,
    ) -> AlignSummary {
        let mut g = start.trailing_zeros().min(end.trailing_zeros()).min(G_MAX);
        if let Some((_, sum)) = left {
            g = g.min(sum.granule());
        }
        if let Some((_, sum)) = right {
            g = g.min(sum.granule());
        }
        // Every field at its largest: at or above every part's deficit.
        let mut acc = CLASS_BITS;
        // "No fit": every stored deficit is clamped to it. A child's
        // fields, plus its base, never exceed it (its own clamp), so only
        // the range and rescaled children are clamped, and a part whose
        // base reaches it loses at every class.
        let none = units(smax, g) + 1;
        let base = units(smax - (end - start), g);
        if base < none.min(CAP) {
            let t = (start.wrapping_neg() >> g) & u64::from(CAP - 1);
            acc = raise(spread_capped(t, none - base), base);
        }
        if let Some((m, sum)) = left {
            acc = sum.lower(acc, smax - m, g, none);
        }
        // Two equal children give the minimum of one.
        if let Some((m, sum)) = right.filter(|&r| Some(r) != left) {
            acc = sum.lower(acc, smax - m, g, none);
        }
        AlignSummary(acc | u64::from(g))
    }

    /// This summary of a subtree whose longest range was `old_max`, made
    /// an upper bound for the same subtree after its ranges only shrank
    /// (each new one inside an old one) and its longest became `new_max`:
    /// every usable length capped at `new_max`, `M'_k = min(M_k, new_max)`.
    /// The drop is counted in granules rounded up, so that the bound holds
    /// also when the new ranges are finer than the summary's granule.
    ///
    /// # Complexity
    /// O(1): a saturating subtraction from every field at once (SWAR).
    #[inline]
    pub fn capped(self, old_max: u64, new_max: u64) -> AlignSummary {
        let g = self.granule();
        let drop = old_max.saturating_sub(new_max);
        if drop == 0 {
            return self;
        }
        let cut = ((drop - 1) >> g) + 1;
        let fields = self.0 & CLASS_BITS;
        let rest = self.0 & !CLASS_BITS;
        if cut >= u64::from(CAP) {
            return AlignSummary(rest); // above every field: all to 0
        }
        // Each field less its minimum with the cut (saturating at 0):
        // no field borrows from the next.
        let y = broadcast(cut as u16);
        AlignSummary(rest | (fields - min_fields(fields, y)))
    }

    /// The summary of one range `[start, end)`: [`combine`](Self::combine)
    /// with no children, without their code.
    #[inline]
    pub fn of_range(start: u64, end: u64) -> AlignSummary {
        let g = start.trailing_zeros().min(end.trailing_zeros()).min(G_MAX);
        let t = (start.wrapping_neg() >> g) & u64::from(CAP - 1);
        AlignSummary(spread_capped(t, units(end - start, g) + 1) | u64::from(g))
    }

    /// The summary of the union of two sets of ranges, from theirs: `a`
    /// and `b` are `(smax, summary)` of each, `smax` the larger. Exact
    /// because a summary is a function of its set of ranges alone (its
    /// granule, and each stored deficit, is that of the set), so the
    /// union's is [`of_subtree`](Self::of_subtree) of the two as children.
    /// What a subtree that only gained a range needs: its old summary
    /// merged with the new range's.
    #[inline]
    pub fn merge(smax: u64, a: (u64, AlignSummary), b: (u64, AlignSummary)) -> AlignSummary {
        if a.0 == b.0 && a.1.granule() == b.1.granule() {
            // Equally long, one granule: no base, no rescaling, so the
            // fields' minimum is the whole merge (same-sized ranges, as the
            // padding holes of an aligned workload). The equal granule
            // bits subtract without a borrow and the select keeps them.
            return AlignSummary(min_fields(a.1 .0, b.1 .0));
        }
        let g = a.1.granule().min(b.1.granule());
        let none = units(smax, g) + 1;
        let acc = a.1.part(smax - a.0, g, none).unwrap_or(CLASS_BITS);
        AlignSummary(b.1.lower(acc, smax - b.0, g, none) | u64::from(g))
    }

    /// `acc` lowered to this child's deficits, in granules of `2^g`, for a
    /// child `shorter` bytes shorter than the longest range, in a subtree
    /// whose "no fit" is `none`.
    #[inline(always)]
    fn lower(self, acc: u64, shorter: u64, g: u32, none: u16) -> u64 {
        match self.part(shorter, g, none) {
            Some(w) => min_fields(acc, w),
            None => acc,
        }
    }

    /// What [`lower`](Self::lower) takes the minimum with: this child's
    /// class fields in the subtree's frame, or `None` when it loses at
    /// every class.
    #[inline(always)]
    fn part(self, shorter: u64, g: u32, none: u16) -> Option<u64> {
        let base = units(shorter, g);
        if base >= none.min(CAP) {
            return None;
        }
        let shift = self.granule() - g;
        Some(if shift == 0 {
            raise(self.0 & CLASS_BITS, base)
        } else {
            self.rescaled(shift, base, none)
        })
    }

    /// The contribution of a child whose granule is `shift` above the
    /// subtree's: its fields rescaled (see [`rebase`](Self::rebase)) plus
    /// `base`, clamped at `none` (its own clamp, rescaled, may exceed it).
    #[cold]
    #[inline(never)]
    fn rescaled(self, shift: u32, base: u16, none: u16) -> u64 {
        let w = raise(self.rebase(shift), base);
        if none < CAP - 1 {
            min_fields(w, broadcast(none))
        } else {
            w
        }
    }

    /// The class fields of this summary in granules `shift` classes
    /// finer than its own: the field of class `i` holds the summary's class
    /// `i - shift` scaled by `2^shift` (below `2^i`, so it fits), and 0
    /// for `i <= shift` (no loss to rounding at or below its granule).
    fn rebase(self, shift: u32) -> u64 {
        let mut w = 0;
        for i in shift + 1..=CLASSES {
            let j = i - shift;
            let d = (self.0 >> offset(j)) & ((1 << j) - 1);
            w |= d << (shift + offset(i));
        }
        w
    }

    /// The deficits `D_{g+1} .. D_{g+CLASSES}` in granules of `2^g`, for a
    /// granule `g` at most this summary's own: a class at or below the
    /// summary's granule loses nothing to rounding.
    #[inline(always)]
    fn lanes(self, g: u32) -> Lanes {
        let shift = (self.granule() - g) as usize;
        if shift == 0 {
            // The common case: one granule, classes line up.
            return class_lanes(self.0);
        }
        let own = self.unpack();
        let mut c = [0; LANES];
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

/// The class fields of the summary word `w` as lanes (class `i` in lane
/// `i - 1`, the padding lanes 0), as [`AlignSummary::unpack`] gives them,
/// four lanes to a word. A multiplication places several fields at once:
/// each factor bit adds a copy of the masked word shifted by it, and the
/// copies are chosen so that the field each lane keeps is not overlapped,
/// nor reached by a carry, from another copy.
#[inline(always)]
fn class_lanes(w: u64) -> Lanes {
    // Classes 1-4, ten bits from `offset(1)`: the copies (at 0, 15, 29
    // and 42) do not overlap at all.
    let x = (w >> offset(1)) & 0x3ff;
    let a =
        x.wrapping_mul(1 | 1 << 15 | 1 << 29 | 1 << 42) & (0x1 | 0x3 << 16 | 0x7 << 32 | 0xf << 48);
    // Classes 5-8, 26 bits from `offset(5)`, in two multiplications: 5
    // and 7 (copies at 0 and 21 do not overlap); 6 and 8 (copies at 11
    // and 30 overlap in bits 35-36, whose sum stays below bit 42, clear of
    // the lanes kept).
    let y = w >> offset(5);
    let odd = (y & (0x1f | 0x7f << 11)).wrapping_mul(1 | 1 << 21) & (0x1f | 0x7f << 32);
    let even =
        (y & (0x3f << 5 | 0xff << 18)).wrapping_mul(1 << 11 | 1 << 30) & (0x3f << 16 | 0xff << 48);
    // Classes 9 and 10, 19 bits from `offset(9)`.
    let z = w >> offset(9);
    let c = (z & 0x1ff) | ((z >> 9) & 0x3ff) << 16;
    // Lane `4j + k` is bits `16k..` of word `j`: the words' little-endian
    // bytes are the lanes' (read back as one block, not lane by lane).
    let mut bytes = [0u8; 2 * LANES];
    for (j, word) in [a, odd | even, c].into_iter().enumerate() {
        bytes[8 * j..8 * j + 8].copy_from_slice(&word.to_le_bytes());
    }
    let mut lanes = [0; LANES];
    for (l, b) in lanes.iter_mut().zip(bytes.chunks_exact(2)) {
        *l = u16::from_le_bytes([b[0], b[1]]);
    }
    lanes
}

/// A deficit of `2^CLASSES` granules or more: above the true deficit of
/// every class, so larger contributions are clamped to it.
const CAP: u16 = 1 << CLASSES;

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

/// Lane `i` of a range's deficits keeps the low `i + 1` bits of the
/// granules its start rounds up by (see [`range_lanes`]); padding lanes 0.
const RANGE_MASKS: [i16; LANES] = {
    let mut m = [0; LANES];
    let mut i = 0;
    while i < CLASSES as usize {
        m[i] = (2 << i) - 1;
        i += 1;
    }
    m
};

/// The summary word of granule `g` whose class deficits, in granules, are
/// the first [`CLASSES`] lanes of `d` (each at most [`CAP`]). Every
/// negative `M_k` means the same (no aligned fit at all): it is stored as
/// `-2^g`, so moving ranges that hold no aligned address leave the summary
/// unchanged and its propagation stops early.
#[inline(always)]
fn pack(smax: u64, g: u32, d: &[i16; LANES]) -> AlignSummary {
    let none = units(smax, g) + 1;
    let mut word = u64::from(g);
    for (i, &di) in d[..CLASSES as usize].iter().enumerate() {
        let (i, di) = (i as u32 + 1, (di as u16).min(none));
        debug_assert!(u64::from(di) < 1 << i, "deficit {di:#x} not below 2^k");
        word |= u64::from(di) << offset(i);
    }
    AlignSummary(word)
}

/// Field `i`'s bits (`1 <= i <= CLASSES`).
const fn field(i: u32) -> u64 {
    ((1 << i) - 1) << offset(i)
}

/// Every class field (bits `G_BITS..offset(CLASSES + 1)`).
const CLASS_BITS: u64 = field_sum(1, CLASSES + 1, 0);

/// The top bit of every class field.
const TOPS: u64 = {
    let (mut m, mut i) = (0, 1);
    while i <= CLASSES {
        m |= 1 << (offset(i) + i - 1);
        i += 1;
    }
    m
};

/// The fields `lo..hi` and `bit` (1) or all (0) of each.
const fn field_sum(lo: u32, hi: u32, bit: u32) -> u64 {
    let (mut m, mut i) = (0, lo);
    while i < hi {
        m |= if bit == 1 { 1 << offset(i) } else { field(i) };
        i += 1;
    }
    m
}

/// The bits `p` of each field such that `p + s` is in the same field.
const fn within(s: u32) -> u64 {
    let (mut m, mut i) = (0, s + 1);
    while i <= CLASSES {
        m |= ((1 << (i - s)) - 1) << offset(i);
        i += 1;
    }
    m
}

/// [`broadcast`]'s tables, by the bit length `k` of the value: the low
/// bit of each field `>= k` (the value fits there) and every bit of each
/// field `< k` (saturated).
const BCAST: [(u64, u64); CLASSES as usize + 1] = {
    let mut t = [(0, 0); CLASSES as usize + 1];
    let mut k = 1;
    while k <= CLASSES {
        t[k as usize] = (field_sum(k, CLASSES + 1, 1), field_sum(1, k, 0));
        k += 1;
    }
    t
};

/// Fills every field whose top bit is set in `tops`, by doubling spans
/// kept inside their field.
#[inline(always)]
fn fill(tops: u64) -> u64 {
    let mut f = tops;
    const SPANS: [u64; 4] = [within(1), within(2), within(4), within(8)];
    f |= (f >> 1) & SPANS[0];
    f |= (f >> 2) & SPANS[1];
    f |= (f >> 4) & SPANS[2];
    f |= (f >> 8) & SPANS[3];
    f
}

/// The fieldwise minimum of two words of class fields. Per field, the
/// low bits of `a` are compared by subtracting them from `a`'s field
/// with its top bit forced on, which never borrows from the next field;
/// the top bits decide the rest.
#[inline(always)]
fn min_fields(a: u64, b: u64) -> u64 {
    let d = (a | TOPS) - (b & !TOPS);
    let less = ((!a & b) | (!(a ^ b) & !d)) & TOPS;
    b ^ ((a ^ b) & fill(less))
}

/// `b` (`1..CAP`) in every class field, saturated at the field's
/// largest value where it does not fit.
#[inline(always)]
fn broadcast(b: u16) -> u64 {
    let (low, ones) = BCAST[(16 - b.leading_zeros()) as usize];
    (u64::from(b) * low) | ones
}

/// `b` (`0..CAP`) added to every class field of `x`, saturating at the
/// field's largest value. Exact for the minimum: the part holding the
/// longest range contributes its deficit of class `i`, below `2^i`, to
/// every subtree, so a field's minimum never is a saturated sum.
#[inline(always)]
fn raise(x: u64, b: u16) -> u64 {
    if b == 0 {
        return x;
    }
    let y = broadcast(b);
    // The low bits of each field add without leaving it; the top bits
    // then give the sum and the carry out of the field.
    let low = (x & !TOPS) + (y & !TOPS);
    let sum = low ^ ((x ^ y) & TOPS);
    let carry = ((x & y) | ((x | y) & !sum)) & TOPS;
    sum | fill(carry)
}

/// The class fields of a range whose start rounds up by `t` granules
/// (`t < CAP`) to the alignment `2^(g+CLASSES)`: class `i` loses the low
/// `i` bits of `t`. A product by a sum of powers of two places copies of
/// `t` at each of their offsets, exactly when the copies do not overlap:
/// two such groups of fields 10 bits apart, and two fields by hand.
#[inline(always)]
fn spread(t: u64) -> u64 {
    const A: (u64, u64) = copies(&[1, 5, 7, 9]);
    const B: (u64, u64) = copies(&[2, 6, 8, 10]);
    ((t * A.0) & A.1)
        | ((t * B.0) & B.1)
        | ((t << offset(3)) & field(3))
        | ((t << offset(4)) & field(4))
}

/// [`spread`] with every field clamped at `c` (`>= 1`). A range's fields
/// grow with the class (each adds a bit of `t`), so the clamp takes every
/// field from the first that exceeds `c`: the one `c`'s bit length
/// reaches, or past it the first that adds a set bit of `t`.
#[inline(always)]
fn spread_capped(t: u64, c: u16) -> u64 {
    let w = spread(t);
    let k = 16 - c.leading_zeros();
    if k > CLASSES {
        // c >= 2^CLASSES: above every field.
        return w;
    }
    let c = u64::from(c);
    let j = if t & ((1 << k) - 1) > c {
        k
    } else {
        k + 1 + (t >> k).trailing_zeros()
    };
    if j > CLASSES {
        return w;
    }
    // c < 2^k <= 2^j fits in every field from j on.
    let (low, ones) = BCAST[j as usize];
    (w & ones) | (c * low)
}

/// For [`spread`]: the offsets of `fields`, whose copies of a `t` must not
/// overlap, and their bits.
const fn copies(fields: &[u32]) -> (u64, u64) {
    let (mut at, mut bits, mut k) = (0, 0, 0);
    while k < fields.len() {
        let i = fields[k];
        assert!(k == 0 || offset(fields[k - 1]) + CLASSES <= offset(i));
        at |= 1 << offset(i);
        bits |= field(i);
        k += 1;
    }
    (at, bits)
}

#[cfg(test)]
mod tests;
