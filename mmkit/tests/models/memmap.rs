// The brute-force model of an allocator built from a memory map: many
// disjoint managed ranges (`add_free`), range frees (`free_range`), and
// the range allocator's contract over them (the range model, which must
// be included first). Shared by `include!` between
// `tests/memmap_model.rs` and `tests/free_list.rs`.

use mmkit::storage::Storage;
use mmkit::vmap::PerStorage;
use mmkit::AddFreeError;

/// The contract over several ranges: the range model (`models/range.rs`,
/// included first) over the hull, and the managed ranges beside it, of
/// which every byte outside a hole is free, live or lazy.
#[derive(Debug, Clone)]
struct MapModel {
    /// The managed ranges, sorted, maximal (never adjacent).
    managed: Vec<(u64, u64)>,
    /// Free, live and lazy ranges; its space is the hull.
    m: Model,
}

impl MapModel {
    fn new() -> Self {
        let mut m = Model::new(0, 1);
        m.free.clear();
        m.space = (0, 0);
        MapModel {
            managed: Vec::new(),
            m,
        }
    }

    /// The hull: lowest start to highest end, `(0, 0)` when empty.
    fn space(&self) -> (u64, u64) {
        self.m.space
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
        // The managed ranges join as the free ones do.
        let free = std::mem::replace(&mut self.m.free, std::mem::take(&mut self.managed));
        self.m.give(s, e);
        self.managed = std::mem::replace(&mut self.m.free, free);
        self.m.give(s, e);
        self.m.space = (self.managed[0].0, self.managed[self.managed.len() - 1].1);
        Ok(())
    }

    fn alloc_in(&mut self, size: u64, align: u64, vs: u64, ve: u64) -> Result<u64, AllocError> {
        self.m.alloc(size, align, vs, ve)
    }

    fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
        self.m.free(addr)
    }

    fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
        self.m.free_lazy(addr)
    }

    fn purge(&mut self) -> bool {
        self.m.purge()
    }

    /// Every byte of `[s, s + len)` must be live; the areas it cuts keep
    /// their parts outside it.
    fn free_range(&mut self, s: u64, len: u64) -> Result<u64, FreeError> {
        let e = s.checked_add(len).filter(|_| len > 0).ok_or(FreeError::Invalid)?;
        if !self.managed.iter().any(|&(ms, me)| ms <= s && e <= me) {
            return Err(FreeError::Invalid);
        }
        let live = &mut self.m.live;
        // Live areas tile [s, e) when each boundary inside it is live.
        let mut at = s;
        while at < e {
            match live.range(..=at).next_back() {
                Some((_, &ae)) if at < ae => at = ae,
                _ => return Err(FreeError::NotAllocated),
            }
        }
        let cut: Vec<(u64, u64)> = live
            .iter()
            .filter(|&(&a, &b)| a < e && s < b)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, b) in cut {
            live.remove(&a);
            if a < s {
                live.insert(a, s);
            }
            if e < b {
                live.insert(e, b);
            }
        }
        self.m.give(s, e);
        Ok(len)
    }
}

/// What the allocator and the model must agree on after every step.
fn same<S: Storage>(va: &VmapAllocator<S>, m: &MapModel, indexed: bool) -> Result<(), String>
where
    VmapAllocator<S>: PerStorage,
{
    va.check().map_err(|e| e.to_string())?;
    let free: Vec<(u64, u64)> = va.free_blocks().map(|r| (r.start, r.end)).collect();
    if free != m.m.free {
        return Err(format!("free blocks {free:x?}, model {:x?}", m.m.free));
    }
    let managed: Vec<(u64, u64)> = va.managed().map(|r| (r.start, r.end)).collect();
    if managed != m.managed {
        return Err(format!("managed {managed:x?}, model {:x?}", m.managed));
    }
    if va.space() != m.space() {
        return Err(format!("space {:x?}, model {:x?}", va.space(), m.space()));
    }
    let s = va.stats();
    let live_bytes: u64 = m.m.live.iter().map(|(a, b)| b - a).sum();
    let lazy_bytes: u64 = m.m.lazy.iter().map(|(a, b)| b - a).sum();
    if (s.live_bytes, s.lazy_bytes, s.free_blocks) != (live_bytes, lazy_bytes, m.m.free.len() as u64) {
        return Err(format!("stats {s:?}, model live {live_bytes} lazy {lazy_bytes}"));
    }
    if indexed {
        let mut live: Vec<(u64, u64)> = va.live_areas().map(|r| (r.start, r.end)).collect();
        live.sort_unstable();
        let want: Vec<(u64, u64)> = m.m.live.iter().map(|(&a, &b)| (a, b)).collect();
        if live != want || s.live_areas != want.len() as u64 {
            return Err(format!("live {live:x?}, model {want:x?}"));
        }
    }
    Ok(())
}
