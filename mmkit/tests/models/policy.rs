// The brute-force model of `VmapAllocator::allocate` (every `Policy`),
// lazy frees, purges, `grow` and `shrink`: a sorted list of free ranges
// scanned linearly. Shared (by `include!`) by `tests/policy_model.rs`, the
// seeded fuzz driver and the cargo-fuzz target `vmap_policy`.

use std::collections::BTreeMap;

use mmkit::request::{Policy, Request, RequestError};
use mmkit::vmap::VmapAllocator;

/// Where an allocation goes (a mirror of [`Policy`] that `arbitrary` can
/// decode).
#[derive(Debug, Clone, Copy, arbitrary::Arbitrary)]
pub enum Place {
    Lowest,
    Highest,
    BestFit,
    Exact(u64),
    Linux,
}

impl Place {
    pub fn policy(self) -> Policy {
        match self {
            Place::Lowest => Policy::Lowest,
            Place::Highest => Policy::Highest,
            Place::BestFit => Policy::BestFit,
            Place::Exact(a) => Policy::Exact(a),
            Place::Linux => Policy::Linux,
        }
    }
}

#[derive(Debug, Clone, arbitrary::Arbitrary)]
pub enum Op {
    Alloc {
        size: u64,
        align: u64,
        window: Option<(u64, u64)>,
        place: Place,
    },
    /// Frees the i-th live area (modulo their number).
    Free(usize),
    FreeLazy(usize),
    Purge,
    /// Grows the space by (below, above) bytes, saturating.
    Grow(u64, u64),
    /// Shrinks the space by (below, above) bytes, saturating.
    Shrink(u64, u64),
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
            // The shortest block that holds the request, the lowest of
            // those; in it, the lowest fit.
            Policy::BestFit => self
                .free
                .iter()
                .filter_map(|b| low(b).map(|a| (b.1 - b.0, b.0, a)))
                .min()
                .map(|(_, _, a)| a),
            Policy::Linux => self.linux(size, align, lo, hi),
            Policy::Exact(a) => {
                let end = a.checked_add(size)?;
                let ok = a >= lo && end <= hi && self.free.iter().any(|&(s, e)| s <= a && end <= e);
                ok.then_some(a)
            }
        }
    }

    /// Linux 6.12's answer, block by block in address order: blocks
    /// shorter than `size + align - 1` (alignment above the page, window
    /// wider than the size) are passed over; the first other block with
    /// an aligned fit above `lo` decides, and fails if that fit ends past
    /// `hi`.
    fn linux(&self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        if lo >= hi {
            return None;
        }
        let len = if align > 4096 && hi - lo != size {
            size.checked_add(align - 1)?
        } else {
            size
        };
        for &(s, e) in &self.free {
            if e - s < len {
                continue;
            }
            let a = s.max(lo).checked_add(align - 1)? & !(align - 1);
            if a.checked_add(size).is_some_and(|end| end <= e) {
                return (a + size <= hi).then_some(a);
            }
        }
        None
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

/// Runs `ops` on a fresh allocator of `space` and on the model; the first
/// disagreement (a result, an error's fields, the free blocks, the space) or
/// `check()` failure is returned as text.
pub fn run_policy_ops(space: (u64, u64), ops: &[Op]) -> Result<(), String> {
    let (v, m) = fresh(space)?;
    run_policy_ops_from(v, m, ops)
}

/// A fresh allocator of `space` and its model.
fn fresh(space: (u64, u64)) -> Result<(VmapAllocator, Model), String> {
    let mut v = VmapAllocator::new(space.0, space.1).map_err(|e| format!("{e}"))?;
    v.set_lazy_max(u64::MAX); // purges only when asked or when out of space
    let m = Model {
        space,
        free: vec![space],
        live: BTreeMap::new(),
        lazy: vec![],
    };
    Ok((v, m))
}

/// [`run_policy_ops`] from a state already built on both.
fn run_policy_ops_from(mut v: VmapAllocator, mut m: Model, ops: &[Op]) -> Result<(), String> {
    for op in ops {
        step(&mut v, &mut m, op).map_err(|e| format!("{op:?}: {e}"))?;
        v.check().map_err(|e| format!("after {op:?}: {e}"))?;
        let mut lazy: Vec<_> = v.lazy_areas().map(|r| (r.start, r.end)).collect();
        let mut want = m.lazy.clone();
        lazy.sort_unstable();
        want.sort_unstable();
        if lazy != want {
            return Err(format!("after {op:?}: lazy areas {lazy:x?}, model {want:x?}"));
        }
        let free: Vec<_> = v.free_blocks().map(|r| (r.start, r.end)).collect();
        if free != m.free || v.space() != m.space {
            return Err(format!(
                "after {op:?}: free {free:x?} space {:x?}, model {:x?} {:x?}",
                v.space(),
                m.free,
                m.space
            ));
        }
    }
    Ok(())
}

fn same<T: PartialEq + core::fmt::Debug>(got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("got {got:x?}, model {want:x?}"))
    }
}

fn step(v: &mut VmapAllocator, m: &mut Model, op: &Op) -> Result<(), String> {
    match *op {
        Op::Alloc {
            size,
            align,
            window,
            place,
        } => {
            let Some(mut req) = Request::bytes(size) else {
                return Ok(()); // a zero size cannot be asked for
            };
            req = req.align(align).policy(place.policy());
            if let Some((a, b)) = window {
                req = req.within(a..b);
            }
            same(v.allocate(req), m.allocate(size, align, window, place.policy()))
        }
        Op::Free(i) | Op::FreeLazy(i) if !m.live.is_empty() => {
            let (&a, &end) = m.live.iter().nth(i % m.live.len()).expect("non-empty");
            m.live.remove(&a);
            if matches!(op, Op::Free(_)) {
                m.add_free(a, end);
                same(v.free(a), Ok(end - a))
            } else {
                m.lazy.push((a, end));
                same(v.free_lazy(a), Ok(end - a))
            }
        }
        Op::Free(_) | Op::FreeLazy(_) => Ok(()),
        Op::Purge => same(v.purge(&mut |_, _| {}), m.purge()),
        Op::Grow(a, b) => {
            let (s, e) = m.space;
            // Refused first, changing nothing: one side moved inward.
            for bad in [(s + 1, e.saturating_add(b)), (s.saturating_sub(a), e - 1)] {
                same(v.grow(bad.0..bad.1), m.grow(bad))?;
            }
            let new = (s.saturating_sub(a), e.saturating_add(b));
            same(v.grow(new.0..new.1), m.grow(new))
        }
        Op::Shrink(a, b) => {
            let (s, e) = m.space;
            // Refused first, changing nothing: one side moved outward.
            for bad in [(s.saturating_sub(1), e - b.min(e)), (s.saturating_add(a), e.saturating_add(1))] {
                same(v.shrink(bad.0..bad.1), m.shrink(bad))?;
            }
            let new = (s.saturating_add(a), e.saturating_sub(b));
            same(v.shrink(new.0..new.1), m.shrink(new))
        }
    }
}
