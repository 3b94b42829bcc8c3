//! What the unit tests share: random numbers and the brute-force model of a
//! set of free ranges (sorted, maximal, searched linearly).

use alloc::vec::Vec;

/// A xorshift64 generator from `seed` (non-zero), cheap and the same on
/// every platform.
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// Takes `[a, a + size)`, which lies in one of them, out of the sorted free
/// ranges `model`.
pub(crate) fn model_take(model: &mut Vec<(u64, u64)>, a: u64, size: u64) {
    let i = model.iter().position(|&(s, e)| s <= a && a < e).unwrap();
    let (s, e) = model.remove(i);
    if a + size < e {
        model.insert(i, (a + size, e));
    }
    if s < a {
        model.insert(i, (s, a));
    }
}

/// Puts `[s, e)` back into the sorted free ranges `model`, merged with its
/// neighbours.
pub(crate) fn model_free(model: &mut Vec<(u64, u64)>, s: u64, e: u64) {
    let i = model.partition_point(|&(ms, _)| ms < s);
    model.insert(i, (s, e));
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(model.len());
    for r in model.drain(..) {
        match merged.last_mut() {
            Some(last) if last.1 == r.0 => last.1 = r.1,
            _ => merged.push(r),
        }
    }
    *model = merged;
}
