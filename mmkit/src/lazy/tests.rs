//! The lazy list against a tiny model: a plain vector of ranges for the
//! lazy ones and one for the stuck ones, the threshold and the spans
//! recomputed from scratch at every step.

use alloc::vec::Vec;

use proptest::prelude::*;

use super::*;

/// What the list must do, the slow way.
#[derive(Debug, Default)]
struct Model {
    lazy: Vec<(u64, u64)>,
    stuck: Vec<(u64, u64)>,
    max: u64,
}

impl Model {
    fn bytes(&self) -> u64 {
        self.lazy.iter().map(|r| r.1 - r.0).sum()
    }

    fn span(list: &[(u64, u64)]) -> Option<(u64, u64)> {
        let lo = list.iter().map(|r| r.0).min()?;
        let hi = list.iter().map(|r| r.1).max()?;
        Some((lo, hi))
    }
}

#[derive(Debug, Clone)]
enum Op {
    Push(u64, u64),
    SetMax(u64),
    Purge,
    TakeRecycle,
    /// A purge whose flush refuses these ranges (relative to its span).
    Refusable(Vec<(u64, u64)>),
    FlushNow(u64, u64, bool),
}

fn range() -> impl Strategy<Value = (u64, u64)> {
    (0u64..1000, 1u64..64).prop_map(|(s, len)| (s, s + len))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => range().prop_map(|(s, e)| Op::Push(s, e)),
        1 => (0u64..400).prop_map(Op::SetMax),
        2 => Just(Op::Purge),
        1 => Just(Op::TakeRecycle),
        2 => proptest::collection::vec((0u64..1100, 1u64..40), 0..3)
            .prop_map(|v| Op::Refusable(v.into_iter().map(|(s, l)| (s, s + l)).collect())),
        1 => (range(), any::<bool>()).prop_map(|((s, e), r)| Op::FlushNow(s, e, r)),
    ]
}

type Ranges = Vec<(u64, u64)>;

/// Splits `list` as a flush refusing `refused` must: (released, stuck).
fn split(list: &[(u64, u64)], refused: &[(u64, u64)]) -> (Ranges, Ranges) {
    list.iter()
        .partition(|r| !refused.iter().any(|&(s, e)| r.0 < e && s < r.1))
}

fn step(r: &mut Retiring<(u64, u64)>, m: &mut Model, op: Op) {
    let l = r.lazy_mut();
    match op {
        Op::Push(s, e) => {
            m.lazy.push((s, e));
            assert_eq!(l.push((s, e)), m.bytes() > m.max);
        }
        Op::SetMax(max) => {
            m.max = max;
            assert_eq!(l.set_max(max), m.bytes() > max);
        }
        Op::Purge => {
            let want = Model::span(&m.lazy);
            let mut flushes = Vec::new();
            let mut got = Vec::new();
            let did = l.purge(|lo, hi| flushes.push((lo, hi)), |r| got.push(r));
            assert_eq!(did, want.is_some());
            assert_eq!(flushes, want.into_iter().collect::<Vec<_>>());
            assert_eq!(got, core::mem::take(&mut m.lazy));
        }
        Op::TakeRecycle => match l.take() {
            None => assert!(m.lazy.is_empty()),
            Some(mut b) => {
                assert_eq!(Some(b.span), Model::span(&m.lazy));
                assert_eq!(b.items, core::mem::take(&mut m.lazy));
                b.items.clear();
                l.recycle(b.items);
            }
        },
        Op::Refusable(refused) => {
            let mut all = m.stuck.clone();
            all.extend(m.lazy.iter().copied());
            let Some(span) = Model::span(&all) else {
                assert!(r.purge(|_, _| -> [(u64, u64); 0] { panic!() }).is_none());
                return;
            };
            let p = r
                .purge(|lo, hi| {
                    assert_eq!((lo, hi), span, "one flush over stuck and lazy");
                    refused.clone()
                })
                .unwrap();
            let (released, stuck) = split(&all, &refused);
            assert_eq!(p.span, span);
            assert_eq!(p.released, released);
            assert_eq!(p.refused, refused.len() as u64);
            m.lazy.clear();
            m.stuck = stuck;
        }
        Op::FlushNow(s, e, refuse) => {
            let refused: Vec<_> = if refuse {
                alloc::vec![(e - 1, e)]
            } else {
                Vec::new()
            };
            let p = r.flush_now((s, e), |lo, hi| {
                assert_eq!((lo, hi), (s, e));
                refused.clone()
            });
            if refuse {
                assert!(p.released.is_empty());
                m.stuck.push((s, e));
            } else {
                assert_eq!(p.released, [(s, e)]);
            }
        }
    }
}

fn agree(r: &Retiring<(u64, u64)>, m: &Model) {
    r.check().unwrap();
    let l = r.lazy();
    assert_eq!(l.iter().copied().collect::<Vec<_>>(), m.lazy);
    assert_eq!(r.stuck(), &m.stuck[..]);
    assert_eq!(
        (l.len(), l.bytes(), l.max()),
        (m.lazy.len(), m.bytes(), m.max)
    );
    assert_eq!(l.span(), Model::span(&m.lazy));
    assert_eq!(l.over(), m.bytes() > m.max);
    assert_eq!(l.is_empty(), m.lazy.is_empty());
    assert_eq!(r.is_empty(), m.lazy.is_empty() && m.stuck.is_empty());
}

proptest! {
    #[test]
    fn lazy_list_matches_the_model(max in 0u64..400, ops in proptest::collection::vec(op(), 1..80)) {
        let mut r = Retiring::new(max);
        let mut m = Model { max, ..Model::default() };
        for op in ops {
            step(&mut r, &mut m, op);
            agree(&r, &m);
        }
    }
}

#[test]
fn the_threshold_is_strict() {
    let mut l = LazyList::new(8);
    assert!(!l.push((0, 8)));
    assert!(l.push((8, 9)));
    let mut l = LazyList::new(u64::MAX);
    assert!(!l.push((0, u64::MAX)));
}

#[test]
fn a_purge_keeps_the_buffer() {
    let mut l = LazyList::new(u64::MAX);
    for i in 0..100 {
        l.push((i * 2, i * 2 + 1));
    }
    let cap = l.heap_bytes();
    assert!(l.purge(|_, _| {}, |_| {}));
    assert_eq!(l.heap_bytes(), cap);
    l.push((0, 1));
    assert_eq!(l.heap_bytes(), cap);
}

#[test]
fn check_names_what_is_broken() {
    use crate::error::Invariant;
    let mut l = LazyList::new(100);
    l.push((10, 20));
    l.bytes += 1;
    assert_eq!(l.check().unwrap_err().invariant(), Invariant::Accounting);
    l.bytes -= 1;
    l.areas.push((30, 40));
    l.bytes += 10;
    let e = l.check().unwrap_err();
    assert_eq!((e.invariant(), e.at()), (Invariant::Bounds, Some(30)));
    l.hi = 40;
    l.check().unwrap();
    l.areas.push((50, 50));
    assert_eq!(l.check().unwrap_err().invariant(), Invariant::Layout);
}

#[test]
fn a_refused_range_touching_nothing_releases_everything() {
    let mut r = Retiring::new(u64::MAX);
    r.push((0, 4));
    let p = r.purge(|_, _| [(4, 8)]).unwrap();
    assert_eq!((p.released, p.refused), (alloc::vec![(0, 4)], 1));
    assert!(r.is_empty());
}
