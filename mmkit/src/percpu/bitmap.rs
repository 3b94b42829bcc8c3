//! Word-at-a-time bit scanning over `[u64]` bitmaps.
//!
//! Bit `i` lives in word `i / 64` at position `i % 64` (least significant
//! first). Every search works on whole words with `trailing_zeros` and masks,
//! never bit by bit: a 64 KiB unit has 16 Ki bits but only 256 words.
//!
//! All ranges are half-open `[from, to)`. Bits at or past the end of the
//! slice read as set (busy), so a search never runs off the map.

/// Bits per word.
const W: usize = 64;

/// Mask of the bits `>= lo` of one word (`lo < 64`).
#[inline]
fn from_bit(lo: usize) -> u64 {
    !0u64 << lo
}

/// Mask of the bits `< hi` of one word (`hi <= 64`).
#[inline]
fn below_bit(hi: usize) -> u64 {
    if hi >= W {
        !0
    } else {
        (1u64 << hi) - 1
    }
}

/// Is bit `i` set?
#[inline]
pub(crate) fn test(map: &[u64], i: usize) -> bool {
    map[i / W] >> (i % W) & 1 == 1
}

/// Sets bit `i`.
#[inline]
pub(crate) fn set(map: &mut [u64], i: usize) {
    map[i / W] |= 1 << (i % W);
}

/// Sets or clears every bit of `[from, to)`, a word at a time.
fn fill(map: &mut [u64], from: usize, to: usize, value: bool) {
    if from >= to {
        return;
    }
    let (fw, lw) = (from / W, (to - 1) / W);
    for (w, word) in map.iter_mut().enumerate().take(lw + 1).skip(fw) {
        let mut m = !0u64;
        if w == fw {
            m &= from_bit(from % W);
        }
        if w == lw {
            m &= below_bit(to - lw * W);
        }
        if value {
            *word |= m;
        } else {
            *word &= !m;
        }
    }
}

/// Sets every bit of `[from, to)`.
pub(crate) fn set_range(map: &mut [u64], from: usize, to: usize) {
    fill(map, from, to, true);
}

/// Clears every bit of `[from, to)`.
pub(crate) fn clear_range(map: &mut [u64], from: usize, to: usize) {
    fill(map, from, to, false);
}

/// First index in `[from, to)` whose bit equals `want`, or `to`.
fn find_next(map: &[u64], from: usize, to: usize, want: bool) -> usize {
    if from >= to {
        return to;
    }
    let mut w = from / W;
    let flip = if want { 0 } else { !0 };
    let mut word = (map.get(w).copied().unwrap_or(!0) ^ flip) & from_bit(from % W);
    loop {
        if word != 0 {
            let i = w * W + word.trailing_zeros() as usize;
            return i.min(to);
        }
        w += 1;
        if w * W >= to {
            return to;
        }
        word = map.get(w).copied().unwrap_or(!0) ^ flip;
    }
}

/// First set bit in `[from, to)`, or `to` when there is none.
pub(crate) fn next_set(map: &[u64], from: usize, to: usize) -> usize {
    find_next(map, from, to, true)
}

/// First clear bit in `[from, to)`, or `to` when there is none.
pub(crate) fn next_zero(map: &[u64], from: usize, to: usize) -> usize {
    find_next(map, from, to, false)
}

/// Last set bit in `[floor, before)`, or `None`.
pub(crate) fn prev_set(map: &[u64], floor: usize, before: usize) -> Option<usize> {
    if floor >= before {
        return None;
    }
    let mut w = (before - 1) / W;
    let mut word = map[w] & below_bit(before - w * W);
    loop {
        if word != 0 {
            let i = w * W + (W - 1 - word.leading_zeros() as usize);
            return (i >= floor).then_some(i);
        }
        if w == 0 || w * W <= floor {
            return None;
        }
        w -= 1;
        word = map[w];
    }
}

/// Calls `f(start, end)` for every maximal run of clear bits inside
/// `[from, to)` (runs are cut at `from` and `to`), in increasing order.
pub(crate) fn for_each_zero_run(
    map: &[u64],
    from: usize,
    to: usize,
    mut f: impl FnMut(usize, usize),
) {
    let mut pos = next_zero(map, from, to);
    while pos < to {
        let end = next_set(map, pos, to);
        f(pos, end);
        pos = next_zero(map, end, to);
    }
}

/// Word `w` of the map with every bit outside `[from, to)` forced to 1.
#[inline]
fn busy_outside(map: &[u64], w: usize, from: usize, to: usize) -> u64 {
    let base = w * W;
    let mut word = map.get(w).copied().unwrap_or(!0);
    if from > base {
        word |= if from - base >= W {
            !0
        } else {
            below_bit(from - base)
        };
    }
    if to < base + W {
        word |= if to <= base { !0 } else { from_bit(to - base) };
    }
    word
}

/// Mask of the positions of word `w` that are multiples of `align` bits.
#[inline]
fn align_mask(w: usize, align: usize) -> u64 {
    if align >= W {
        u64::from((w * W) % align == 0)
    } else {
        // 1 every `align` bits: MAX / (2^align - 1) = 0b..0001_0001 (align 4).
        u64::MAX / ((1u64 << align) - 1)
    }
}

/// Lowest `a` in `[from, to)` with `a % align == 0` and `[a, a + n)` all
/// clear inside `[from, to)`, or `None`. `align` is a power of two.
///
/// Runs of at most 64 bits are found 64 candidate starts at a time: the
/// clear bits of two adjacent words are AND-ed with themselves shifted
/// (doubling the run length each step), which leaves a 1 at each position
/// where a long-enough run starts, then masked with the aligned positions.
/// Longer runs jump from clear bit to set bit.
pub(crate) fn find_zero_run(
    map: &[u64],
    from: usize,
    to: usize,
    n: usize,
    align: usize,
) -> Option<usize> {
    if n == 0 || from >= to || to - from < n {
        return None;
    }
    if n <= W {
        find_short_run(map, from, to, n, align)
    } else {
        find_long_run(map, from, to, n, align)
    }
}

fn find_short_run(map: &[u64], from: usize, to: usize, n: usize, align: usize) -> Option<usize> {
    let last_start = to - n;
    for w in from / W..=last_start / W {
        let lo = busy_outside(map, w, from, to);
        let hi = busy_outside(map, w + 1, from, to);
        let free = !(u128::from(lo) | (u128::from(hi) << 64));
        let starts = run_starts(free, n) as u64 & align_mask(w, align);
        if starts != 0 {
            return Some(w * W + starts.trailing_zeros() as usize);
        }
    }
    None
}

/// Bit `i` of the result is set iff bits `i .. i + n` of `free` are all set.
#[inline]
fn run_starts(free: u128, n: usize) -> u128 {
    let (mut r, mut k) = (free, 1);
    while k < n {
        let s = k.min(n - k);
        r &= r >> s;
        k += s;
    }
    r
}

fn find_long_run(map: &[u64], from: usize, to: usize, n: usize, align: usize) -> Option<usize> {
    let mut pos = from;
    loop {
        pos = next_zero(map, pos, to);
        let a = pos.checked_next_multiple_of(align)?;
        if a.checked_add(n)? > to {
            return None;
        }
        let busy = next_set(map, a, a + n);
        if busy == a + n {
            return Some(a);
        }
        pos = busy + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn slow_run(bits: &[bool], from: usize, to: usize, n: usize, align: usize) -> Option<usize> {
        (from..to)
            .filter(|a| a % align == 0 && a + n <= to)
            .find(|&a| (a..a + n).all(|i| !bits[i]))
    }

    #[test]
    fn searches_agree_with_bit_loops() {
        // A fixed pseudo-random pattern with long and short runs.
        let nbits: usize = 700;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let bits: Vec<bool> = (0..nbits)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if (200..400).contains(&i) {
                    x % 11 == 0
                } else {
                    x % 3 == 0
                }
            })
            .collect();
        let mut map = vec![0u64; nbits.div_ceil(64)];
        for (i, &b) in bits.iter().enumerate() {
            if b {
                set(&mut map, i);
            }
        }
        for from in [0, 1, 63, 64, 65, 130, 333] {
            for to in [from + 1, from + 64, 500, nbits] {
                if to > nbits || to <= from {
                    continue;
                }
                let ns = (from..to).find(|&i| bits[i]).unwrap_or(to);
                assert_eq!(next_set(&map, from, to), ns);
                let nz = (from..to).find(|&i| !bits[i]).unwrap_or(to);
                assert_eq!(next_zero(&map, from, to), nz);
                let ps = (from..to).rev().find(|&i| bits[i]);
                assert_eq!(prev_set(&map, from, to), ps);
                for n in [1, 2, 3, 5, 9, 31, 64, 65, 100] {
                    for align in [1, 2, 4, 8, 64, 128, 256] {
                        assert_eq!(
                            find_zero_run(&map, from, to, n, align),
                            slow_run(&bits, from, to, n, align),
                            "from {from} to {to} n {n} align {align}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn ranges_set_and_clear_exactly() {
        let mut map = vec![0u64; 4];
        set_range(&mut map, 3, 130);
        assert_eq!(next_set(&map, 0, 256), 3);
        assert_eq!(next_zero(&map, 3, 256), 130);
        clear_range(&mut map, 64, 128);
        assert_eq!(next_zero(&map, 3, 256), 64);
        assert_eq!(next_set(&map, 64, 256), 128);
        let mut runs = Vec::new();
        for_each_zero_run(&map, 0, 256, |s, e| runs.push((s, e)));
        assert_eq!(runs, vec![(0, 3), (64, 128), (130, 256)]);
    }
}
