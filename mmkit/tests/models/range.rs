// The brute-force model, operations and step driver of `tests/range_model.rs`,
// shared (by `include!`, never copied) with the seeded fuzz driver
// (`tests/fuzz_driver.rs`) and the cargo-fuzz targets (`fuzz/`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use mmkit::baseline::linear_vmap::LinearVmap;
use mmkit::range::{RangeAllocator, RangeStats, DEFAULT_LAZY_MAX};
use mmkit::vmap::VmapAllocator;
use mmkit::{AllocError, FreeError};
use proptest::prelude::*;

// ---------------------------------------------------------------------------
// The brute-force model
// ---------------------------------------------------------------------------

/// The contract, written as plainly as possible.
#[derive(Debug, Clone)]
struct Model {
    space: (u64, u64),
    /// Maximal free ranges `[s, e)`, sorted, never adjacent.
    free: Vec<(u64, u64)>,
    /// Live areas: start -> end.
    live: BTreeMap<u64, u64>,
    /// Lazily freed areas: start -> end.
    lazy: BTreeMap<u64, u64>,
    lazy_max: u64,
    /// Every flush, in order (explicit purges and automatic ones alike).
    flushes: Vec<(u64, u64)>,
}

impl Model {
    fn new(start: u64, end: u64) -> Self {
        Model {
            space: (start, end),
            free: vec![(start, end)],
            live: BTreeMap::new(),
            lazy: BTreeMap::new(),
            lazy_max: DEFAULT_LAZY_MAX,
            flushes: Vec::new(),
        }
    }

    /// The lowest fit: the free ranges in address order, and in each the
    /// first multiple of `align` at or above the window's start whose area
    /// ends inside both the range and the window. Written here, with no
    /// library helper, so the model states the answer on its own.
    fn lowest_fit(&self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        for &(s, e) in &self.free {
            let (from, to) = (s.max(lo), e.min(hi));
            if from >= to {
                continue;
            }
            // The first multiple of `align` at or above `from` (none when
            // rounding up passes u64::MAX).
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

    /// The contract's checks of a request and the window it is clamped to.
    fn window(&self, size: u64, align: u64, vstart: u64, vend: u64) -> Result<(u64, u64), AllocError> {
        if size == 0 || align == 0 || align & (align - 1) != 0 || vstart >= vend {
            return Err(AllocError::Invalid);
        }
        let lo = if vstart > self.space.0 { vstart } else { self.space.0 };
        let hi = if vend < self.space.1 { vend } else { self.space.1 };
        Ok((lo, hi))
    }

    fn alloc(&mut self, size: u64, align: u64, vstart: u64, vend: u64) -> Result<u64, AllocError> {
        let (lo, hi) = self.window(size, align, vstart, vend)?;
        let mut found = self.lowest_fit(size, align, lo, hi);
        if found.is_none() && self.purge() {
            found = self.lowest_fit(size, align, lo, hi);
        }
        let a = found.ok_or(AllocError::NoSpace)?;
        self.take(a, a + size);
        self.live.insert(a, a + size);
        Ok(a)
    }

    /// Removes `[a, b)` (inside one free range) from free space.
    fn take(&mut self, a: u64, b: u64) {
        let i = self
            .free
            .iter()
            .position(|&(s, e)| s <= a && b <= e)
            .unwrap();
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

    /// Returns `[a, b)` to free space, merging with both neighbours.
    fn give(&mut self, a: u64, b: u64) {
        let i = self.free.partition_point(|&(s, _)| s < a);
        let (mut s, mut e) = (a, b);
        if i < self.free.len() && self.free[i].0 == b {
            e = self.free.remove(i).1;
        }
        if i > 0 && self.free[i - 1].1 == a {
            s = self.free.remove(i - 1).0;
            self.free.insert(i - 1, (s, e));
        } else {
            self.free.insert(i, (s, e));
        }
    }

    fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
        let end = self.live.remove(&addr).ok_or(FreeError::NotAllocated)?;
        self.give(addr, end);
        Ok(end - addr)
    }

    fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
        let end = self.live.remove(&addr).ok_or(FreeError::NotAllocated)?;
        self.lazy.insert(addr, end);
        if self.lazy_bytes() > self.lazy_max {
            self.purge();
        }
        Ok(end - addr)
    }

    /// A threshold below the bytes already lazy purges at once.
    fn set_lazy_max(&mut self, bytes: u64) {
        self.lazy_max = bytes;
        if self.lazy_bytes() > bytes {
            self.purge();
        }
    }

    fn purge(&mut self) -> bool {
        let lazy = std::mem::take(&mut self.lazy);
        let (Some((&lo, _)), Some((_, &hi))) = (lazy.first_key_value(), lazy.last_key_value())
        else {
            return false;
        };
        self.flushes.push((lo, hi));
        for (s, e) in lazy {
            self.give(s, e);
        }
        true
    }

    fn lazy_bytes(&self) -> u64 {
        self.lazy.iter().map(|(s, e)| e - s).sum()
    }

    /// The counters every implementation must agree on (`metadata_bytes`
    /// is an implementation detail). A purge counts only when it released
    /// something, so `purges` equals the flushes.
    fn stats(&self) -> RangeStats {
        RangeStats {
            free_blocks: self.free.len() as u64,
            free_bytes: self.free.iter().map(|(s, e)| e - s).sum(),
            largest_free: self.free.iter().map(|(s, e)| e - s).max().unwrap_or(0),
            live_areas: self.live.len() as u64,
            live_bytes: self.live.iter().map(|(s, e)| e - s).sum(),
            lazy_areas: self.lazy.len() as u64,
            lazy_bytes: self.lazy_bytes(),
            flushes: self.flushes.len() as u64,
            purges: self.flushes.len() as u64,
            ..RangeStats::default()
        }
    }
}

/// The comparable part of an implementation's stats.
fn comparable(s: RangeStats) -> RangeStats {
    RangeStats {
        metadata_bytes: 0,
        ..s
    }
}

// ---------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------

/// One random step. Raw numbers are turned into sizes, alignments and
/// addresses relative to the space by [`Op::resolve`], so the same
/// generator covers small spaces and spaces that end at `u64::MAX`.
#[derive(Debug, Clone, arbitrary::Arbitrary)]
enum Op {
    Alloc {
        size: (u8, u64),
        align: (u8, u64),
        window: (u8, u64, u64),
    },
    /// Free the n-th address ever returned (live, lazy or already freed).
    Free(usize),
    /// Lazily free the n-th address ever returned.
    FreeLazy(usize),
    /// Free a raw address: an interior address of a returned area or any.
    FreeAt(u8, usize, u64),
    Purge,
    SetLazyMax(u64),
}

/// A resolved step, with concrete numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Alloc(u64, u64, u64, u64),
    Free(u64),
    FreeLazy(u64),
    Purge,
    SetLazyMax(u64),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let alloc = (
        (0u8..12, any::<u64>()),
        (0u8..10, any::<u64>()),
        (0u8..10, any::<u64>(), any::<u64>()),
    )
        .prop_map(|(size, align, window)| Op::Alloc {
            size,
            align,
            window,
        });
    prop_oneof![
        8 => alloc,
        3 => any::<usize>().prop_map(Op::Free),
        3 => any::<usize>().prop_map(Op::FreeLazy),
        1 => (0u8..3, any::<usize>(), any::<u64>()).prop_map(|(k, i, x)| Op::FreeAt(k, i, x)),
        1 => Just(Op::Purge),
        1 => any::<u64>().prop_map(Op::SetLazyMax),
    ]
}

fn space_strategy() -> impl Strategy<Value = (u64, u64)> {
    prop_oneof![
        Just((0, 1 << 16)),
        Just((u64::MAX - (1 << 16), u64::MAX)),
        Just(((1 << 63) - (1 << 15), (1 << 63) + (1 << 15))),
        Just((0, u64::MAX)),
        Just((1, u64::MAX)),
        (any::<u64>(), 1u64..=1 << 16).prop_map(|(s, len)| {
            let s = s.min(u64::MAX - len);
            (s, s + len)
        }),
        (any::<u64>(), 1u64..64).prop_map(|(s, len)| {
            let s = s.min(u64::MAX - len);
            (s, s + len)
        }),
    ]
}

impl Op {
    /// Concrete numbers for this step in `space`, given the addresses
    /// returned so far.
    fn resolve(&self, space: (u64, u64), returned: &[(u64, u64)]) -> Step {
        let (start, end) = space;
        let len = end - start;
        let pick = |i: usize| returned.get(i % returned.len().max(1)).copied();
        match *self {
            Op::Alloc {
                size,
                align,
                window,
            } => {
                let (vstart, vend) = resolve_window(window, space);
                Step::Alloc(resolve_size(size, len), resolve_align(align), vstart, vend)
            }
            Op::Free(i) => Step::Free(pick(i).map_or(start, |r| r.0)),
            Op::FreeLazy(i) => Step::FreeLazy(pick(i).map_or(start, |r| r.0)),
            Op::FreeAt(kind, i, x) => Step::Free(match (kind, pick(i)) {
                // An interior address (or the end) of a returned area.
                (0, Some((s, e))) => s + 1 + x % (e - s),
                (1, _) => start.wrapping_add(x % len.saturating_add(2)),
                _ => x,
            }),
            Op::Purge => Step::Purge,
            Op::SetLazyMax(x) => Step::SetLazyMax(match x % 4 {
                0 => 0,
                1 => x % len.max(1),
                2 => x % 64,
                _ => x,
            }),
        }
    }
}

fn resolve_size((kind, x): (u8, u64), len: u64) -> u64 {
    match kind {
        // Few distinct sizes, so holes of exactly a requested size are common.
        0..=3 => (len / 64).max(1) * (1 + x % 4),
        4..=5 => 1 + x % (len / 32).max(1),
        6..=7 => 1 + x % len,
        8 => len.saturating_sub(x % 4).max(1),
        9 => [u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) + 1, x][(x % 5) as usize],
        10 => 1 + x % 8,
        _ => 0,
    }
}

fn resolve_align((kind, x): (u8, u64)) -> u64 {
    match kind {
        0..=3 => 1,
        4..=5 => 1 << (x % 8),
        6 => 1 << (x % 64),
        7 => 1 << 63,
        8 => [0, 3, 6, u64::MAX, (1 << 63) + 1][(x % 5) as usize],
        _ => 1 << (x % 20),
    }
}

fn resolve_window((kind, a, b): (u8, u64, u64), (start, end): (u64, u64)) -> (u64, u64) {
    let len = end - start;
    match kind {
        0..=3 => (start, end),
        4 => {
            let (a, b) = (start + a % len, start + b % len);
            (a.min(b), a.max(b).saturating_add(1))
        }
        5 => (a.min(b), a.max(b)),
        6 => (a.max(b), a.min(b)),
        _ => (0, u64::MAX),
    }
}

// ---------------------------------------------------------------------------
// The generic driver
// ---------------------------------------------------------------------------

type Log = Arc<Mutex<Vec<(u64, u64)>>>;

/// Builds an allocator of `space` with a flush hook that records into the
/// returned log.
fn instrumented<A: RangeAllocator>(make: &impl Fn(u64, u64) -> A, space: (u64, u64)) -> (A, Log) {
    let mut a = make(space.0, space.1);
    let log: Log = Arc::default();
    let sink = log.clone();
    a.set_flush_hook(Some(Box::new(move |s, e| {
        sink.lock().unwrap().push((s, e))
    })));
    (a, log)
}

/// Applies one step to both; returns the area allocated, if any, or a
/// description of the first difference.
fn step<A: RangeAllocator>(
    a: &mut A,
    m: &mut Model,
    log: &Log,
    s: Step,
) -> Result<Option<(u64, u64)>, String> {
    step_with(a, m, log, s, true)
}

/// [`step`], comparing the results and flushes always, and `check()` and
/// the counters only when `full` (both cost O(blocks)).
fn step_with<A: RangeAllocator>(
    a: &mut A,
    m: &mut Model,
    log: &Log,
    s: Step,
    full: bool,
) -> Result<Option<(u64, u64)>, String> {
    let mut area = None;
    let (got, want) = match s {
        Step::Alloc(size, align, lo, hi) => {
            let got = a.alloc_in(size, align, lo, hi);
            area = got.ok().map(|x| (x, x + size));
            (
                format!("{got:?}"),
                format!("{:?}", m.alloc(size, align, lo, hi)),
            )
        }
        Step::Free(x) => (format!("{:?}", a.free(x)), format!("{:?}", m.free(x))),
        Step::FreeLazy(x) => (
            format!("{:?}", a.free_lazy(x)),
            format!("{:?}", m.free_lazy(x)),
        ),
        Step::Purge => {
            let log = log.clone();
            let r = a.purge(&mut |s, e| log.lock().unwrap().push((s, e)));
            (format!("{r}"), format!("{}", m.purge()))
        }
        Step::SetLazyMax(x) => {
            a.set_lazy_max(x);
            m.set_lazy_max(x);
            (String::new(), String::new())
        }
    };
    if got != want {
        return Err(format!("result {got}, model {want}"));
    }
    let flushes = log.lock().unwrap().clone();
    if flushes != m.flushes {
        return Err(format!("flushes {flushes:x?}, model {:x?}", m.flushes));
    }
    if !full {
        return Ok(area);
    }
    a.check().map_err(|e| e.to_string())?;
    let (got, want) = (comparable(a.stats()), m.stats());
    if got != want {
        return Err(format!("stats {got:?}, model {want:?}"));
    }
    Ok(area)
}

/// Runs `ops` on a fresh allocator of `space` and on the model, step by step.
fn run_ops<A: RangeAllocator>(
    make: impl Fn(u64, u64) -> A,
    space: (u64, u64),
    ops: &[Op],
) -> Result<(), TestCaseError> {
    run_steps(make, space, ops).map_err(TestCaseError::fail)
}

/// [`run_ops`] without proptest: the first difference, as text.
fn run_steps<A: RangeAllocator>(
    make: impl Fn(u64, u64) -> A,
    space: (u64, u64),
    ops: &[Op],
) -> Result<(), String> {
    let (mut a, log) = instrumented(&make, space);
    let mut m = Model::new(space.0, space.1);
    let mut returned: Vec<(u64, u64)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let s = op.resolve(space, &returned);
        let area = step(&mut a, &mut m, &log, s).map_err(|e| format!("step {i} {s:x?}: {e}"))?;
        returned.extend(area);
    }
    Ok(())
}

fn linear(s: u64, e: u64) -> LinearVmap {
    LinearVmap::new(s, e).unwrap()
}

fn tree(s: u64, e: u64) -> VmapAllocator {
    VmapAllocator::new(s, e).unwrap()
}

// ---------------------------------------------------------------------------
// Runs on a tree of three levels and more
// ---------------------------------------------------------------------------

/// Blocks a leaf of mmkit's B+tree holds at most, and children an inner
/// node has at most (`LEAF_CAP` and `FANOUT` in `mmkit/src/tree/btree`,
/// internal to the crate). Larger nodes need more blocks for three levels:
/// raise the deep runs' sizes with them.
const LEAF_CAP: u64 = 16;
const FANOUT: u64 = 16;

/// The fewest levels (leaves included) a B+tree of `n` blocks can have.
fn min_levels(n: u64) -> u32 {
    let mut nodes = n.div_ceil(LEAF_CAP);
    let mut levels = 1;
    while nodes > 1 {
        nodes = nodes.div_ceil(FANOUT);
        levels += 1;
    }
    levels
}

/// Pages in the deep runs' space.
const PAGE: u64 = 0x1000;

/// Cuts `[0, 2^40)` into `areas` areas of 1 to 4 pages (a seeded
/// sequence), on `a` and the model alike, and frees every other one: about
/// `areas / 2` free blocks, holes of four lengths, each length in most
/// leaves. Returns the areas handed out.
fn fragment<A: RangeAllocator>(a: &mut A, m: &mut Model, areas: u64, seed: u64) -> Vec<(u64, u64)> {
    let mut x = seed | 1;
    let mut out = Vec::new();
    for _ in 0..areas {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let size = PAGE * (1 + x % 4);
        let got = a.alloc(size, PAGE);
        assert_eq!(got, m.alloc(size, PAGE, 0, u64::MAX), "set-up alloc");
        let addr = got.unwrap();
        out.push((addr, addr + size));
    }
    for &(s, e) in out.iter().step_by(2) {
        assert_eq!(a.free(s), Ok(e - s));
        m.free(s).unwrap();
    }
    a.check().unwrap();
    assert_eq!(comparable(a.stats()), m.stats());
    out
}

/// One step on a fragmented space: requests of the holes' sizes (and
/// between them), page-aligned or not, in the whole space or a window.
/// Raw numbers, shaped by [`Deep::resolve`].
#[derive(Debug, Clone, arbitrary::Arbitrary)]
enum Deep {
    Alloc {
        pages: u8,
        bytes: u16,
        align: u8,
        window: Option<(u32, u32)>,
    },
    /// Free (or lazily free) the n-th address ever returned.
    Free(usize),
    FreeLazy(usize),
    Purge,
}

fn deep_op() -> impl Strategy<Value = Deep> {
    let window = proptest::option::weighted(0.25, any::<(u32, u32)>());
    prop_oneof![
        6 => (any::<u8>(), any::<u16>(), any::<u8>(), window)
            .prop_map(|(pages, bytes, align, window)| Deep::Alloc { pages, bytes, align, window }),
        3 => any::<usize>().prop_map(Deep::Free),
        1 => any::<usize>().prop_map(Deep::FreeLazy),
        1 => Just(Deep::Purge),
    ]
}

impl Deep {
    fn resolve(&self, returned: &[(u64, u64)]) -> Step {
        let pick = |i: usize| returned[i % returned.len()].0;
        match *self {
            Deep::Alloc {
                pages,
                bytes,
                align,
                window,
            } => {
                let size = (u64::from(pages % 5) * PAGE + u64::from(bytes) % PAGE).max(1);
                let align = [1, PAGE, 2 * PAGE, 8 * PAGE][usize::from(align % 4)];
                // Windows inside the fragmented part: [s, s + len) with s
                // below 2^26 and len below 2^25.
                let (lo, hi) = window.map_or((0, u64::MAX), |(s, len)| {
                    let s = u64::from(s) % (1 << 26);
                    (s, s + 1 + u64::from(len) % (1 << 25))
                });
                Step::Alloc(size, align, lo, hi)
            }
            Deep::Free(i) => Step::Free(pick(i)),
            Deep::FreeLazy(i) => Step::FreeLazy(pick(i)),
            Deep::Purge => Step::Purge,
        }
    }
}

/// `ops` on a fragmented allocator and its model, compared after every step.
fn run_deep<A: RangeAllocator>(
    make: fn(u64, u64) -> A,
    areas: u64,
    seed: u64,
    ops: &[Deep],
) -> Result<(), String> {
    let (mut a, log) = instrumented(&make, (0, 1 << 40));
    let mut m = Model::new(0, 1 << 40);
    a.set_lazy_max(64 * PAGE);
    m.set_lazy_max(64 * PAGE);
    let mut returned = fragment(&mut a, &mut m, areas, seed);
    let tree_blocks = m.free.len() as u64 - 1; // the highest is kept out of the tree
    if min_levels(tree_blocks) < 3 {
        return Err(format!("{tree_blocks} blocks: fewer than three levels"));
    }
    for (i, op) in ops.iter().enumerate() {
        let s = op.resolve(&returned);
        let full = i % 32 == 31 || i + 1 == ops.len();
        let area = step_with(&mut a, &mut m, &log, s, full)
            .map_err(|e| format!("step {i} {s:x?}: {e}"))?;
        returned.extend(area);
    }
    Ok(())
}

