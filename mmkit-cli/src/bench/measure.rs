//! Running one allocator on one [`Plan`]: set-up, an untimed warm-up, a
//! timed run of free+alloc pairs, then a checking run on the same instance
//! that replays pairs beside a shadow [`Oracle`] (a plain lowest fit of the
//! judge's own, sharing no code with any allocator under test) to judge
//! every answer.
//!
//! ```text
//!  set-up ──> warm-up pairs ──> timed pairs ──> mirror live areas ──> judged pairs
//!            (budget / 4)     (5 segments,        into the shadow     (no clock)
//!                              budget / 5 each)
//! ```
//!
//! The checks never run inside the timed part. Operations name slots, not
//! addresses, so any stretch of the churn is valid from any state: a pass
//! cut short by its time budget simply leaves the remaining pairs out.

use std::time::{Duration, Instant};

use super::workload::{Op, Plan};
use super::{PeerRange, PAGE, SPACE};

/// Pairs run between two reads of the clock.
const CHUNK: usize = 256;

/// The timed pairs are run as this many segments, each with its share of
/// the budget; the reported speed is the best segment's, which filters out
/// the other processes of a shared machine.
pub const SEGMENTS: usize = 5;

/// A slot's live area: address, size, and the peer's handle for it.
type Slot<H> = Option<(u64, u64, H)>;

/// What one allocator did on one plan.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Warm-up pairs run (fewer than planned if their budget ran out).
    pub warm_pairs: usize,
    /// Pairs timed (fewer than planned if the budget ran out).
    pub pairs: usize,
    /// Each timed segment: pairs and their wall time.
    pub segments: Vec<(usize, Duration)>,
    /// Allocations judged by the checking run.
    pub judged: usize,
    /// Of those, how many returned the exact lowest fit.
    pub lowest: usize,
    /// Judged allocations that failed although a fit existed.
    pub failed_with_room: usize,
    /// Judged allocations that failed because nothing fit.
    pub failed_full: usize,
    /// The first broken promise (overlap, misalignment, failed free).
    pub violation: Option<String>,
    /// Wall time of the whole run: set-up, warm-up, timed, judged.
    pub wall: Duration,
}

impl Outcome {
    /// Nanoseconds per free+alloc pair in the fastest timed segment.
    pub fn ns_per_pair(&self) -> f64 {
        self.segments
            .iter()
            .filter(|&&(pairs, _)| pairs > 0)
            .map(|&(pairs, t)| t.as_secs_f64() * 1e9 / pairs as f64)
            .fold(f64::INFINITY, f64::min)
    }

    /// Nanoseconds per pair over all timed segments together.
    pub fn mean_ns_per_pair(&self) -> f64 {
        let t: Duration = self.segments.iter().map(|s| s.1).sum();
        t.as_secs_f64() * 1e9 / self.pairs.max(1) as f64
    }

    /// Percent of judged allocations that were the lowest fit.
    pub fn lowest_pct(&self) -> f64 {
        100.0 * self.lowest as f64 / self.judged.max(1) as f64
    }
}

/// Runs `P` on `plan`: at most `budget` timed, then up to `judge` pairs
/// checked.
pub fn run<P: PeerRange>(plan: &Plan, budget: Duration, judge: usize) -> Outcome {
    let wall = Instant::now();
    let (mut a, mut slots) = set_up::<P>(plan);
    let (warm, timed) = plan.churn.split_at(2 * plan.warmup);
    let mut out = Outcome::default();
    (out.warm_pairs, _) = drive(&mut a, &mut slots, warm, budget / 4);
    for part in timed.chunks(timed.len().div_ceil(2 * SEGMENTS).max(1) * 2) {
        let (pairs, elapsed) = drive(&mut a, &mut slots, part, budget / SEGMENTS as u32);
        out.segments.push((pairs, elapsed));
        out.pairs += pairs;
    }
    // Judge no more pairs than were timed: a slow peer stays bounded.
    let n = 2 * judge.min(out.pairs);
    check(&mut a, &mut slots, &timed[..n], &mut out);
    drop(a);
    out.wall = wall.elapsed();
    out
}

/// Builds `P` and runs the plan's set-up on it.
fn set_up<P: PeerRange>(plan: &Plan) -> (P, Vec<Slot<P::Handle>>) {
    let mut a = P::new(SPACE, plan.slots);
    let mut slots: Vec<Slot<P::Handle>> = (0..plan.slots).map(|_| None).collect();
    let mut addrs = plan.setup_addrs.iter();
    for op in &plan.setup {
        match *op {
            Op::Alloc { slot, size, align } => {
                let lowest = *addrs.next().expect("one address per set-up alloc");
                slots[slot as usize] = placed(&mut a, lowest, size, align);
            }
            Op::Free { slot } => {
                if let Some((_, _, h)) = slots[slot as usize].take() {
                    a.free(h);
                }
            }
        }
    }
    (a, slots)
}

/// An exact allocator that can be placed is put at the known lowest fit
/// (its own search finds the same address, only slower); any other
/// allocator answers for itself.
fn placed<P: PeerRange>(a: &mut P, lowest: u64, size: u64, align: u64) -> Slot<P::Handle> {
    if P::exact_lowest_fit() && lowest != u64::MAX {
        if let Some(h) = a.place(lowest, size) {
            return Some((lowest, size, h));
        }
    }
    a.alloc(size, align).map(|(addr, h)| (addr, size, h))
}

/// One operation, nothing else.
#[inline]
fn step<P: PeerRange>(a: &mut P, slots: &mut [Slot<P::Handle>], op: Op) {
    match op {
        Op::Alloc { slot, size, align } => {
            slots[slot as usize] = a.alloc(size, align).map(|(addr, h)| (addr, size, h));
        }
        Op::Free { slot } => {
            if let Some((_, _, h)) = slots[slot as usize].take() {
                a.free(h);
            }
        }
    }
}

/// Runs `ops` (pairs) in chunks until done or `budget` is spent; returns
/// the pairs run and their wall time.
fn drive<P: PeerRange>(
    a: &mut P,
    slots: &mut [Slot<P::Handle>],
    ops: &[Op],
    budget: Duration,
) -> (usize, Duration) {
    let start = Instant::now();
    let mut pairs = 0;
    for chunk in ops.chunks(2 * CHUNK) {
        for &op in chunk {
            step(a, slots, op);
        }
        pairs += chunk.len() / 2;
        if start.elapsed() > budget {
            break;
        }
    }
    (pairs, start.elapsed())
}

/// Mirrors every live area into a fresh shadow (which proves they do not
/// overlap), then runs `ops` judging each answer. The shadow always holds
/// exactly the peer's live areas, so its answer is the lowest fit in the
/// peer's own state.
fn check<P: PeerRange>(a: &mut P, slots: &mut [Slot<P::Handle>], ops: &[Op], out: &mut Outcome) {
    let live: Vec<(u64, u64)> = slots.iter().flatten().map(|&(a, s, _)| (a, s)).collect();
    let mut shadow = match Oracle::around(SPACE, live) {
        Ok(o) => o,
        Err(e) => {
            out.violation = Some(format!("before the judged pairs: {e}"));
            return;
        }
    };
    for &op in ops {
        if let Err(e) = judge(a, &mut shadow, slots, op, out) {
            out.violation = Some(e);
            return;
        }
    }
}

/// Marks `[addr, addr + size)` live in the shadow, which refuses it unless
/// the whole range is free.
fn mirror(shadow: &mut Oracle, addr: u64, size: u64) -> Result<(), String> {
    let end = addr
        .checked_add(size)
        .ok_or("a range wraps past u64::MAX")?;
    if shadow.take(addr, size) {
        Ok(())
    } else {
        Err(format!(
            "[{addr:#x}, {end:#x}) overlaps a live area or leaves the space"
        ))
    }
}

/// Runs one operation on the peer and judges it against the shadow.
fn judge<P: PeerRange>(
    a: &mut P,
    shadow: &mut Oracle,
    slots: &mut [Slot<P::Handle>],
    op: Op,
    out: &mut Outcome,
) -> Result<(), String> {
    match op {
        Op::Alloc { slot, size, align } => {
            let got = a.alloc(size, align);
            let addr = got.as_ref().map(|&(addr, _)| addr);
            judge_alloc(shadow, addr, size, align, out)?;
            slots[slot as usize] = got.map(|(addr, h)| (addr, size, h));
        }
        Op::Free { slot } => {
            if let Some((addr, size, h)) = slots[slot as usize].take() {
                if !a.free(h) {
                    return Err(format!("freeing its own area {addr:#x} failed"));
                }
                shadow.free(addr, size);
            }
        }
    }
    Ok(())
}

/// Compares the peer's answer `got` with the shadow's lowest fit and leaves
/// the shadow holding the peer's area.
fn judge_alloc(
    shadow: &mut Oracle,
    got: Option<u64>,
    size: u64,
    align: u64,
    out: &mut Outcome,
) -> Result<(), String> {
    out.judged += 1;
    let lowest = shadow.alloc(size, align);
    if got.is_some() && got == lowest {
        out.lowest += 1;
        return Ok(());
    }
    if let Some(l) = lowest {
        shadow.free(l, size);
    }
    match got {
        Some(addr) if addr % align != 0 => Err(format!("{addr:#x} is not {align:#x}-aligned")),
        Some(addr) => mirror(shadow, addr, size),
        None if lowest.is_some() => {
            out.failed_with_room += 1;
            Ok(())
        }
        None => {
            out.failed_full += 1;
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------
// The judge's own lowest fit
// ---------------------------------------------------------------------------

/// Free ranges per bucket before a bucket is split in two.
const BUCKET: usize = 256;

/// Alignments the buckets summarize: `PAGE << k` for `k` below this.
const SHIFTS: usize = 24;

/// The lowest fit by a scan of the free ranges in address order, written
/// for the judge alone: it shares no code with any allocator under test
/// (`mmkit`'s included), so a wrong answer of mmkit's is not also the
/// judge's. The ranges sit in buckets of consecutive ranges, each with the
/// longest run it offers at each page alignment, so that the scan passes
/// over a bucket that holds no fit without reading its ranges; within a
/// bucket it tries every range in order.
#[derive(Debug, Clone)]
pub struct Oracle {
    buckets: Vec<Bucket>,
}

#[derive(Debug, Clone)]
struct Bucket {
    /// Maximal free ranges `[s, e)`, sorted, never adjacent.
    ranges: Vec<(u64, u64)>,
    /// `best[k]`: the most bytes any range offers from an address aligned
    /// to `PAGE << k`.
    best: [u64; SHIFTS],
}

/// The first multiple of `align` (a power of two) at or above `s`.
fn round_up(s: u64, align: u64) -> Option<u64> {
    s.checked_add(align - 1).map(|x| x & !(align - 1))
}

/// Bytes `[s, e)` offers from its first address aligned to `align`.
fn usable((s, e): (u64, u64), align: u64) -> u64 {
    round_up(s, align).map_or(0, |a| e.saturating_sub(a))
}

/// The summary index of `align`, when it has one.
fn shift_of(align: u64) -> Option<usize> {
    let k = (align / PAGE).trailing_zeros() as usize;
    (align >= PAGE && align == PAGE << k && k < SHIFTS).then_some(k)
}

impl Bucket {
    fn new(ranges: Vec<(u64, u64)>) -> Bucket {
        let mut b = Bucket {
            ranges,
            best: [0; SHIFTS],
        };
        b.refresh();
        b
    }

    fn refresh(&mut self) {
        for k in 0..SHIFTS {
            self.refresh_shift(k);
        }
    }

    fn refresh_shift(&mut self, k: usize) {
        self.best[k] = self
            .ranges
            .iter()
            .map(|&r| usable(r, PAGE << k))
            .max()
            .unwrap_or(0);
    }

    /// Range `r` was added or grown.
    fn grew(&mut self, r: (u64, u64)) {
        for (k, best) in self.best.iter_mut().enumerate() {
            *best = (*best).max(usable(r, PAGE << k));
        }
    }

    /// Range `old` shrank or left: only the alignments it was the best at
    /// are recomputed.
    fn shrank(&mut self, old: (u64, u64)) {
        for k in 0..SHIFTS {
            if usable(old, PAGE << k) >= self.best[k] {
                self.refresh_shift(k);
            }
        }
    }

    /// Whether some range may hold `size` at `align`.
    fn may_hold(&self, size: u64, align: u64) -> bool {
        shift_of(align).is_none_or(|k| self.best[k] >= size)
    }
}

impl Oracle {
    /// `[0, space)` free.
    pub fn new(space: u64) -> Oracle {
        Oracle {
            buckets: vec![Bucket::new(vec![(0, space)])],
        }
    }

    /// `[0, space)` with `live` (areas `(addr, size)`) taken: the free
    /// ranges are the gaps between them, built in one pass in address
    /// order, where taking each area in turn would rescan a bucket per
    /// area. Refused when two areas overlap or one leaves the space.
    pub fn around(space: u64, mut live: Vec<(u64, u64)>) -> Result<Oracle, String> {
        live.sort_unstable();
        let mut gaps = Vec::with_capacity(live.len() + 1);
        let mut at = 0;
        for (addr, size) in live {
            let end = addr
                .checked_add(size)
                .filter(|&e| e <= space)
                .ok_or_else(|| format!("[{addr:#x}, +{size:#x}) leaves the space"))?;
            if addr < at {
                return Err(format!(
                    "[{addr:#x}, {end:#x}) overlaps a live area or leaves the space"
                ));
            }
            if at < addr {
                gaps.push((at, addr));
            }
            at = end;
        }
        if at < space {
            gaps.push((at, space));
        }
        Ok(Oracle {
            buckets: gaps
                .chunks(BUCKET)
                .map(|c| Bucket::new(c.to_vec()))
                .collect(),
        })
    }

    /// Takes and returns the lowest `align`-aligned address with `size`
    /// free bytes, or `None`.
    pub fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        for bi in 0..self.buckets.len() {
            if !self.buckets[bi].may_hold(size, align) {
                continue;
            }
            for ri in 0..self.buckets[bi].ranges.len() {
                let (s, e) = self.buckets[bi].ranges[ri];
                let Some(a) = round_up(s, align) else {
                    continue;
                };
                if a < e && e - a >= size {
                    self.cut(bi, ri, a, a + size);
                    return Some(a);
                }
            }
        }
        None
    }

    /// Takes exactly `[addr, addr + size)`; `false` (nothing changes) when
    /// it is not wholly free.
    pub fn take(&mut self, addr: u64, size: u64) -> bool {
        let Some(end) = addr.checked_add(size) else {
            return false;
        };
        let Some((bi, ri)) = self.at_or_before(addr) else {
            return false;
        };
        let (s, e) = self.buckets[bi].ranges[ri];
        if !(s <= addr && end <= e) {
            return false;
        }
        self.cut(bi, ri, addr, end);
        true
    }

    /// Returns `[addr, addr + size)` (not free now) to free space, merged
    /// with its free neighbours.
    pub fn free(&mut self, addr: u64, size: u64) {
        let end = addr + size;
        let prev = self.at_or_before(addr);
        let next = match prev {
            Some((bi, ri)) => self.after(bi, ri),
            None => (!self.buckets.is_empty()).then_some((0, 0)),
        };
        let joins_prev = prev.filter(|&(bi, ri)| self.buckets[bi].ranges[ri].1 == addr);
        let joins_next = next.filter(|&(bi, ri)| self.buckets[bi].ranges[ri].0 == end);
        match (joins_prev, joins_next) {
            (Some((pb, pr)), Some((nb, nr))) => {
                let e = self.buckets[nb].ranges[nr].1;
                self.remove(nb, nr);
                self.grow(pb, pr, (self.buckets[pb].ranges[pr].0, e));
            }
            (Some((pb, pr)), None) => self.grow(pb, pr, (self.buckets[pb].ranges[pr].0, end)),
            (None, Some((nb, nr))) => self.grow(nb, nr, (addr, self.buckets[nb].ranges[nr].1)),
            (None, None) => self.insert(prev, (addr, end)),
        }
    }

    /// The last range starting at or below `addr`.
    fn at_or_before(&self, addr: u64) -> Option<(usize, usize)> {
        let bi = self
            .buckets
            .partition_point(|b| b.ranges[0].0 <= addr)
            .checked_sub(1)?;
        let ri = self.buckets[bi].ranges.partition_point(|r| r.0 <= addr) - 1;
        Some((bi, ri))
    }

    /// The range after `(bi, ri)`.
    fn after(&self, bi: usize, ri: usize) -> Option<(usize, usize)> {
        if ri + 1 < self.buckets[bi].ranges.len() {
            Some((bi, ri + 1))
        } else {
            (bi + 1 < self.buckets.len()).then_some((bi + 1, 0))
        }
    }

    /// Replaces range `(bi, ri)` by what is left of it around `[a, b)`.
    fn cut(&mut self, bi: usize, ri: usize, a: u64, b: u64) {
        let (s, e) = self.buckets[bi].ranges[ri];
        let left: Vec<(u64, u64)> = [(s, a), (b, e)].into_iter().filter(|r| r.0 < r.1).collect();
        self.buckets[bi].ranges.splice(ri..=ri, left);
        self.buckets[bi].shrank((s, e));
        self.settle(bi);
    }

    fn remove(&mut self, bi: usize, ri: usize) {
        let old = self.buckets[bi].ranges.remove(ri);
        self.buckets[bi].shrank(old);
        self.settle(bi);
    }

    /// Range `(bi, ri)` becomes the larger `r`.
    fn grow(&mut self, bi: usize, ri: usize, r: (u64, u64)) {
        self.buckets[bi].ranges[ri] = r;
        self.buckets[bi].grew(r);
    }

    /// Inserts a range with no free neighbour just after `prev`.
    fn insert(&mut self, prev: Option<(usize, usize)>, r: (u64, u64)) {
        let (bi, ri) = match prev {
            Some((bi, ri)) => (bi, ri + 1),
            None if self.buckets.is_empty() => {
                self.buckets.push(Bucket::new(vec![r]));
                return;
            }
            None => (0, 0),
        };
        self.buckets[bi].ranges.insert(ri, r);
        self.buckets[bi].grew(r);
        self.settle(bi);
    }

    /// After bucket `bi` changed (its summary kept): split when too long,
    /// dropped when empty.
    fn settle(&mut self, bi: usize) {
        let b = &mut self.buckets[bi];
        if b.ranges.is_empty() {
            self.buckets.remove(bi);
        } else if b.ranges.len() > 2 * BUCKET {
            let upper = b.ranges.split_off(BUCKET);
            b.refresh();
            self.buckets.insert(bi + 1, Bucket::new(upper));
        }
    }
}
