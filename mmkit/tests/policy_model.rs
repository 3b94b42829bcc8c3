//! `VmapAllocator::allocate` with every policy (lowest, highest, exact),
//! lazy frees, purges, `grow` and `shrink`, against a brute-force model: a
//! sorted list of free ranges scanned linearly. Results (addresses and
//! every error with its fields) and the free blocks must agree after every
//! operation, and `check()` must pass.

use std::collections::BTreeMap;

use mmkit::request::{Policy, Request, RequestError};
use mmkit::vmap::VmapAllocator;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        size: u64,
        align: u64,
        window: Option<(u64, u64)>,
        policy: Policy,
    },
    Free(usize),
    FreeLazy(usize),
    Purge,
    Grow(u64, u64),
    Shrink(u64, u64),
}

fn op() -> impl Strategy<Value = Op> {
    let policy = prop_oneof![
        Just(Policy::Lowest),
        Just(Policy::Highest),
        (0u64..5000).prop_map(Policy::Exact),
    ];
    let align = prop_oneof![4 => (0u32..9).prop_map(|k| 1u64 << k), 1 => Just(3u64)];
    let window = proptest::option::of((0u64..5000, 0u64..5000));
    prop_oneof![
        6 => (1u64..300, align, window, policy).prop_map(|(size, align, window, policy)| Op::Alloc {
            size, align, window, policy
        }),
        3 => any::<usize>().prop_map(Op::Free),
        2 => any::<usize>().prop_map(Op::FreeLazy),
        1 => Just(Op::Purge),
        1 => (0u64..64, 0u64..64).prop_map(|(a, b)| Op::Grow(a, b)),
        1 => (0u64..64, 0u64..64).prop_map(|(a, b)| Op::Shrink(a, b)),
    ]
}

/// The model: free ranges sorted by start, live and lazy areas.
struct Model {
    space: (u64, u64),
    free: Vec<(u64, u64)>,
    live: BTreeMap<u64, u64>,
    lazy: Vec<(u64, u64)>,
}

impl Model {
    fn add_free(&mut self, s: u64, e: u64) {
        self.free.push((s, e));
        self.free.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for r in self.free.drain(..) {
            match merged.last_mut() {
                Some(last) if last.1 == r.0 => last.1 = r.1,
                _ => merged.push(r),
            }
        }
        self.free = merged;
    }

    fn take(&mut self, a: u64, end: u64) {
        let i = self
            .free
            .iter()
            .position(|&(s, e)| s <= a && end <= e)
            .unwrap();
        let (s, e) = self.free.remove(i);
        if end < e {
            self.free.insert(i, (end, e));
        }
        if s < a {
            self.free.insert(i, (s, a));
        }
    }

    fn purge(&mut self) -> bool {
        let lazy = std::mem::take(&mut self.lazy);
        for &(s, e) in &lazy {
            self.add_free(s, e);
        }
        !lazy.is_empty()
    }

    fn find(&self, size: u64, align: u64, lo: u64, hi: u64, policy: Policy) -> Option<u64> {
        let low = |&(s, e): &(u64, u64)| {
            let a = s.max(lo).checked_add(align - 1)? & !(align - 1);
            (a.checked_add(size)? <= e.min(hi)).then_some(a)
        };
        let high = |&(s, e): &(u64, u64)| {
            let (s, e) = (s.max(lo), e.min(hi));
            let a = e.checked_sub(size)? & !(align - 1);
            (s < e && a >= s).then_some(a)
        };
        match policy {
            Policy::Lowest => self.free.iter().find_map(low),
            Policy::Highest => self.free.iter().rev().find_map(high),
            Policy::Exact(a) => {
                let end = a.checked_add(size)?;
                let ok = a >= lo && end <= hi && self.free.iter().any(|&(s, e)| s <= a && end <= e);
                ok.then_some(a)
            }
        }
    }

    fn allocate(
        &mut self,
        size: u64,
        align: u64,
        window: Option<(u64, u64)>,
        policy: Policy,
    ) -> Result<u64, RequestError> {
        if !align.is_power_of_two() {
            return Err(RequestError::BadAlign { align });
        }
        let (ws, we) = window.unwrap_or(self.space);
        if ws >= we {
            return Err(RequestError::EmptyWindow { start: ws, end: we });
        }
        if let Policy::Exact(addr) = policy {
            if addr % align != 0 {
                return Err(RequestError::Misaligned { addr, align });
            }
        }
        let (lo, hi) = (ws.max(self.space.0), we.min(self.space.1));
        let mut got = self.find(size, align, lo, hi, policy);
        if got.is_none() && self.purge() {
            got = self.find(size, align, lo, hi, policy);
        }
        match got {
            Some(a) => {
                self.take(a, a + size);
                self.live.insert(a, a + size);
                Ok(a)
            }
            None => Err(match policy {
                Policy::Exact(start) => RequestError::NotFree {
                    start,
                    end: start.saturating_add(size),
                },
                _ => RequestError::NoFit {
                    size,
                    align,
                    window: if lo < hi { (lo, hi) } else { (lo, lo) },
                    largest_free: self.free.iter().map(|(s, e)| e - s).max().unwrap_or(0),
                },
            }),
        }
    }

    fn grow(&mut self, new: (u64, u64)) -> Result<(), RequestError> {
        let (s, e) = self.space;
        if new.0 > s || new.1 < e {
            return Err(RequestError::BadSpace {
                space: self.space,
                asked: new,
            });
        }
        if new.0 < s {
            self.add_free(new.0, s);
        }
        if new.1 > e {
            self.add_free(e, new.1);
        }
        self.space = new;
        Ok(())
    }

    fn shrink(&mut self, new: (u64, u64)) -> Result<(), RequestError> {
        let (s, e) = self.space;
        if new.0 >= new.1 || new.0 < s || new.1 > e {
            return Err(RequestError::BadSpace {
                space: self.space,
                asked: new,
            });
        }
        let parts = [(s, new.0), (new.1, e)];
        for (a, b) in parts {
            if a < b && !self.free.iter().any(|&(fs, fe)| fs <= a && b <= fe) {
                return Err(RequestError::InUse { start: a, end: b });
            }
        }
        for (a, b) in parts {
            if a < b {
                self.take(a, b);
            }
        }
        self.space = new;
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn policies_grow_and_shrink_match_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        let (s, e) = (1000u64, 4000u64);
        let mut v = VmapAllocator::new(s, e).unwrap();
        let mut m = Model { space: (s, e), free: vec![(s, e)], live: BTreeMap::new(), lazy: vec![] };
        for op in ops {
            match op {
                Op::Alloc { size, align, window, policy } => {
                    let mut req = Request::bytes(size).unwrap().align(align).policy(policy);
                    if let Some((a, b)) = window {
                        req = req.within(a..b);
                    }
                    let got = v.allocate(req);
                    let want = m.allocate(size, align, window, policy);
                    prop_assert_eq!(got, want, "{:?}", op);
                }
                Op::Free(i) | Op::FreeLazy(i) if !m.live.is_empty() => {
                    let (&a, &end) = m.live.iter().nth(i % m.live.len()).unwrap();
                    m.live.remove(&a);
                    if matches!(op, Op::Free(_)) {
                        prop_assert_eq!(v.free(a), Ok(end - a));
                        m.add_free(a, end);
                    } else {
                        prop_assert_eq!(v.free_lazy(a), Ok(end - a));
                        m.lazy.push((a, end));
                    }
                }
                Op::Free(_) | Op::FreeLazy(_) => {}
                Op::Purge => prop_assert_eq!(v.purge(&mut |_, _| {}), m.purge()),
                Op::Grow(a, b) => {
                    let new = (m.space.0.saturating_sub(a * 8), m.space.1 + b * 8);
                    let new = if a == 63 { (new.0 + 1, new.1) } else { new }; // sometimes refused
                    prop_assert_eq!(v.grow(new.0..new.1), m.grow(new));
                }
                Op::Shrink(a, b) => {
                    let new = (m.space.0 + a, m.space.1.saturating_sub(b));
                    prop_assert_eq!(v.shrink(new.0..new.1), m.shrink(new));
                }
            }
            v.check().map_err(|e| TestCaseError::fail(e.to_string()))?;
            let free: Vec<_> = v.free_blocks().map(|r| (r.start, r.end)).collect();
            prop_assert_eq!(&free, &m.free);
            prop_assert_eq!(v.space(), m.space);
        }
    }
}
