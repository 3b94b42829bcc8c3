//! Running one allocator on one [`Plan`]: set-up, an untimed warm-up, a
//! timed run of free+alloc pairs, then a checking run on the same instance
//! that replays pairs beside a shadow [`VmapAllocator`] to judge every
//! answer.
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

use mmkit::vmap::VmapAllocator;

use super::workload::{Op, Plan};
use super::{PeerRange, SPACE};

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
    let mut shadow = VmapAllocator::new(0, SPACE).expect("SPACE is non-empty");
    shadow.reserve(2 * slots.len() + 2);
    for &(addr, size, _) in slots.iter().flatten() {
        if let Err(e) = mirror(&mut shadow, addr, size) {
            out.violation = Some(format!("before the judged pairs: {e}"));
            return;
        }
    }
    for &op in ops {
        if let Err(e) = judge(a, &mut shadow, slots, op, out) {
            out.violation = Some(e);
            return;
        }
    }
}

/// Marks `[addr, addr + size)` live in the shadow: the lowest fit inside
/// exactly that window is `addr` if and only if the range is free.
fn mirror(shadow: &mut VmapAllocator, addr: u64, size: u64) -> Result<(), String> {
    let end = addr
        .checked_add(size)
        .ok_or("a range wraps past u64::MAX")?;
    match shadow.alloc_in(size, 1, addr, end) {
        Ok(a) if a == addr => Ok(()),
        _ => Err(format!(
            "[{addr:#x}, {end:#x}) overlaps a live area or leaves the space"
        )),
    }
}

/// Runs one operation on the peer and judges it against the shadow.
fn judge<P: PeerRange>(
    a: &mut P,
    shadow: &mut VmapAllocator,
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
            if let Some((addr, _, h)) = slots[slot as usize].take() {
                if !a.free(h) {
                    return Err(format!("freeing its own area {addr:#x} failed"));
                }
                shadow
                    .free(addr)
                    .map_err(|e| format!("shadow free {addr:#x}: {e}"))?;
            }
        }
    }
    Ok(())
}

/// Compares the peer's answer `got` with the shadow's lowest fit and leaves
/// the shadow holding the peer's area.
fn judge_alloc(
    shadow: &mut VmapAllocator,
    got: Option<u64>,
    size: u64,
    align: u64,
    out: &mut Outcome,
) -> Result<(), String> {
    out.judged += 1;
    let lowest = shadow.alloc(size, align).ok();
    if got.is_some() && got == lowest {
        out.lowest += 1;
        return Ok(());
    }
    if let Some(l) = lowest {
        shadow
            .free(l)
            .map_err(|e| format!("shadow free {l:#x}: {e}"))?;
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
