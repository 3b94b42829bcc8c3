// The brute-force model of an allocator built from a memory map: many
// disjoint managed ranges (`add_free`), range frees (`free_range`), and
// the range allocator's contract over them. Shared by `include!` between
// `tests/memmap_model.rs` and `tests/free_list.rs`.

use std::collections::BTreeMap;

use mmkit::range::DEFAULT_LAZY_MAX;
use mmkit::storage::Storage;
use mmkit::vmap::{PerStorage, VmapAllocator};
use mmkit::{AddFreeError, AllocError, FreeError};

/// The contract over several ranges, written as plainly as possible.
#[derive(Debug, Clone)]
struct MapModel {
    /// The managed ranges, sorted, maximal (never adjacent).
    managed: Vec<(u64, u64)>,
    /// Maximal free ranges, sorted, never adjacent.
    free: Vec<(u64, u64)>,
    live: BTreeMap<u64, u64>,
    lazy: BTreeMap<u64, u64>,
    lazy_max: u64,
    flushes: Vec<(u64, u64)>,
}

/// Adds `[a, b)` to a sorted list of maximal ranges, joining neighbours.
fn join(list: &mut Vec<(u64, u64)>, a: u64, b: u64) {
    let i = list.partition_point(|&(s, _)| s < a);
    let (mut s, mut e) = (a, b);
    if i < list.len() && list[i].0 == b {
        e = list.remove(i).1;
    }
    if i > 0 && list[i - 1].1 == a {
        s = list.remove(i - 1).0;
        list.insert(i - 1, (s, e));
    } else {
        list.insert(i, (s, e));
    }
}

impl MapModel {
    fn new() -> Self {
        MapModel {
            managed: Vec::new(),
            free: Vec::new(),
            live: BTreeMap::new(),
            lazy: BTreeMap::new(),
            lazy_max: DEFAULT_LAZY_MAX,
            flushes: Vec::new(),
        }
    }

    /// The hull: lowest start to highest end, `(0, 0)` when empty.
    fn space(&self) -> (u64, u64) {
        match (self.managed.first(), self.managed.last()) {
            (Some(f), Some(l)) => (f.0, l.1),
            _ => (0, 0),
        }
    }

    fn add_free(&mut self, s: u64, e: u64) -> Result<(), AddFreeError> {
        if s >= e {
            return Err(AddFreeError::Empty { start: s, end: e });
        }
        if let Some(&(ms, me)) = self.managed.iter().find(|&&(ms, me)| ms < e && s < me) {
            return Err(AddFreeError::Overlaps {
                start: ms.max(s),
                end: me.min(e),
            });
        }
        join(&mut self.managed, s, e);
        join(&mut self.free, s, e);
        Ok(())
    }

    fn lowest_fit(&self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        for &(s, e) in &self.free {
            let (from, to) = (s.max(lo), e.min(hi));
            if from >= to {
                continue;
            }
            let rem = from % align;
            let Some(a) = (if rem == 0 { Some(from) } else { from.checked_add(align - rem) }) else {
                continue;
            };
            if a < to && to - a >= size {
                return Some(a);
            }
        }
        None
    }

    fn alloc_in(&mut self, size: u64, align: u64, vs: u64, ve: u64) -> Result<u64, AllocError> {
        if size == 0 || !align.is_power_of_two() || vs >= ve {
            return Err(AllocError::Invalid);
        }
        let (hs, he) = self.space();
        let (lo, hi) = (vs.max(hs), ve.min(he));
        let mut found = self.lowest_fit(size, align, lo, hi);
        if found.is_none() && self.purge() {
            found = self.lowest_fit(size, align, lo, hi);
        }
        let a = found.ok_or(AllocError::NoSpace)?;
        self.take(a, a + size);
        self.live.insert(a, a + size);
        Ok(a)
    }

    /// Takes `[a, b)`, inside one free range, out of free space.
    fn take(&mut self, a: u64, b: u64) {
        let i = self.free.iter().position(|&(s, e)| s <= a && b <= e).unwrap();
        let (s, e) = self.free.remove(i);
        let mut at = i;
        if s < a {
            self.free.insert(at, (s, a));
            at += 1;
        }
        if b < e {
            self.free.insert(at, (b, e));
        }
    }

    fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
        let end = self.live.remove(&addr).ok_or(FreeError::NotAllocated)?;
        join(&mut self.free, addr, end);
        Ok(end - addr)
    }

    fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
        let end = self.live.remove(&addr).ok_or(FreeError::NotAllocated)?;
        self.lazy.insert(addr, end);
        if self.lazy.iter().map(|(s, e)| e - s).sum::<u64>() > self.lazy_max {
            self.purge();
        }
        Ok(end - addr)
    }

    /// Every byte of `[s, s + len)` must be live; the areas it cuts keep
    /// their parts outside it.
    fn free_range(&mut self, s: u64, len: u64) -> Result<u64, FreeError> {
        let e = s.checked_add(len).filter(|_| len > 0).ok_or(FreeError::Invalid)?;
        if !self.managed.iter().any(|&(ms, me)| ms <= s && e <= me) {
            return Err(FreeError::Invalid);
        }
        let is_live = |x: u64| self.live.range(..=x).next_back().is_some_and(|(_, &ae)| x < ae);
        // Live areas tile [s, e) when every area boundary inside it and
        // its first byte are live.
        let mut at = s;
        while at < e {
            if !is_live(at) {
                return Err(FreeError::NotAllocated);
            }
            at = *self.live.range(..=at).next_back().unwrap().1;
        }
        let cut: Vec<(u64, u64)> = self
            .live
            .iter()
            .filter(|&(&a, &b)| a < e && s < b)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, b) in cut {
            self.live.remove(&a);
            if a < s {
                self.live.insert(a, s);
            }
            if e < b {
                self.live.insert(e, b);
            }
        }
        join(&mut self.free, s, e);
        Ok(len)
    }

    fn purge(&mut self) -> bool {
        let lazy = std::mem::take(&mut self.lazy);
        let (Some((&lo, _)), Some((_, &hi))) = (lazy.first_key_value(), lazy.last_key_value()) else {
            return false;
        };
        self.flushes.push((lo, hi));
        for (s, e) in lazy {
            join(&mut self.free, s, e);
        }
        true
    }
}

/// What the allocator and the model must agree on after every step.
fn same<S: Storage>(va: &VmapAllocator<S>, m: &MapModel, indexed: bool) -> Result<(), String>
where
    VmapAllocator<S>: PerStorage,
{
    va.check().map_err(|e| e.to_string())?;
    let free: Vec<(u64, u64)> = va.free_blocks().map(|r| (r.start, r.end)).collect();
    if free != m.free {
        return Err(format!("free blocks {free:x?}, model {:x?}", m.free));
    }
    let managed: Vec<(u64, u64)> = va.managed().map(|r| (r.start, r.end)).collect();
    if managed != m.managed {
        return Err(format!("managed {managed:x?}, model {:x?}", m.managed));
    }
    if va.space() != m.space() {
        return Err(format!("space {:x?}, model {:x?}", va.space(), m.space()));
    }
    let s = va.stats();
    let live_bytes: u64 = m.live.iter().map(|(a, b)| b - a).sum();
    let lazy_bytes: u64 = m.lazy.iter().map(|(a, b)| b - a).sum();
    if (s.live_bytes, s.lazy_bytes, s.free_blocks) != (live_bytes, lazy_bytes, m.free.len() as u64) {
        return Err(format!("stats {s:?}, model live {live_bytes} lazy {lazy_bytes}"));
    }
    if indexed {
        let mut live: Vec<(u64, u64)> = va.live_areas().map(|r| (r.start, r.end)).collect();
        live.sort_unstable();
        let want: Vec<(u64, u64)> = m.live.iter().map(|(&a, &b)| (a, b)).collect();
        if live != want || s.live_areas != want.len() as u64 {
            return Err(format!("live {live:x?}, model {want:x?}"));
        }
    }
    Ok(())
}
