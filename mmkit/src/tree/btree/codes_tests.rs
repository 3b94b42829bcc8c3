//! The length codes (`node::code`) and the compares and shifts on them,
//! against plain loops over the lengths they stand for.

use super::node::{at_least, code, codes_closed, codes_opened, may_reach};
use alloc::vec::Vec;
use proptest::prelude::*;

/// Lengths around every power of two, and at the ends.
fn edges() -> Vec<u64> {
    let mut v = Vec::from([0, 1, 2, 3, u64::MAX - 1, u64::MAX]);
    for e in 0..64 {
        let p = 1u64 << e;
        v.extend([p - 1, p, p + 1, p + p / 4, p + p / 2, p + p / 2 + p / 4]);
        v.extend([p.wrapping_add(p - 1)]);
    }
    v.sort_unstable();
    v.dedup();
    v
}

#[test]
fn codes_keep_the_lengths_order_in_seven_bits() {
    let v = edges();
    assert_eq!(code(0), 0);
    for w in v.windows(2) {
        assert!(
            code(w[0]) <= code(w[1]),
            "code({:#x}) > code({:#x})",
            w[0],
            w[1]
        );
    }
    for &x in &v {
        assert!(code(x) < 128);
        assert!(x == 0 || code(x) > 0, "code({x:#x}) is an empty slot's");
    }
    // Four codes for each power of two up to 2^30: the compare rules out
    // most lengths shorter than a request.
    assert_eq!(code(1), 4);
    assert_eq!((code(8), code(10), code(12), code(14)), (16, 17, 18, 19));
    assert_eq!(code((1 << 30) + (3 << 28)), 127);
    assert_eq!(code(1 << 31), 127);
}

fn lengths() -> impl Strategy<Value = [u64; 16]> {
    // Some zeros (empty slots) and lengths near the request's.
    let one = prop_oneof![Just(0u64), 1u64..64, 0u64..1 << 20, any::<u64>()];
    proptest::array::uniform16(one)
}

proptest! {
    #[test]
    fn may_reach_holds_every_slot_long_enough_and_no_shorter_code(
        x in lengths(),
        min in prop_oneof![1u64..64, 0u64..1 << 20, any::<u64>()],
    ) {
        let mut codes = [0u8; 16];
        for (c, &v) in codes.iter_mut().zip(&x) {
            *c = code(v);
        }
        let m = may_reach(&codes, min);
        let exact = at_least(&x, min);
        prop_assert_eq!(m & exact, exact, "a slot long enough is missing");
        for (i, &c) in codes.iter().enumerate() {
            let want = c >= code(min.max(1));
            prop_assert_eq!(m >> i & 1 == 1, want, "slot {} code {} min {:#x}", i, c, min);
        }
    }

    #[test]
    fn codes_shift_as_the_slots_do(
        b in proptest::array::uniform16(0u8..128),
        i in 0usize..16,
    ) {
        let mut opened = b;
        codes_opened(&mut opened, i);
        let mut want = b.to_vec();
        want.insert(i, b[i]);
        want.pop();
        prop_assert_eq!(&opened[..], &want[..]);
        let mut closed = b;
        codes_closed(&mut closed, i);
        let mut want = b.to_vec();
        want.remove(i);
        want.push(0);
        prop_assert_eq!(&closed[..], &want[..]);
    }
}
