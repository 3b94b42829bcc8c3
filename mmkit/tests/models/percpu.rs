// The brute-force model, operations and step driver of `tests/percpu_model.rs`,
// shared (by `include!`, never copied) with the seeded fuzz driver
// (`tests/fuzz_driver.rs`) and the cargo-fuzz targets (`fuzz/`).

use std::collections::BTreeMap;

use mmkit::baseline::area_map::AreaMapAllocator;
use mmkit::percpu::{BlockMd, PcpuPtr, PercpuAlloc, PercpuAllocator, MAX_ALIGN};
use mmkit::{AllocError, FreeError};
use proptest::prelude::*;

#[derive(Debug, Clone, arbitrary::Arbitrary)]
enum Op {
    Alloc {
        size: u64,
        align: u64,
    },
    /// Free the `n % live`-th live allocation.
    Free(usize),
    /// Free again something already freed (or a made-up pointer).
    FreeStale(usize),
    /// Free an offset inside a live allocation.
    FreeInterior(usize, u32),
    /// Free a pointer in a chunk that may not exist.
    FreeBogus {
        chunk: u32,
        offset: u32,
    },
}

fn size_strategy(unit: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 1u64..=16,
        3 => 17u64..=512,
        1 => 513u64..=unit,
        1 => prop_oneof![Just(0u64), Just(unit + 1), Just(u64::MAX)],
    ]
}

fn align_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => (0u32..=12).prop_map(|s| 1u64 << s),
        1 => prop_oneof![Just(0u64), Just(3), Just(8192), Just(u64::MAX)],
    ]
}

fn ops(unit: u64) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        8 => (size_strategy(unit), align_strategy()).prop_map(|(size, align)| Op::Alloc { size, align }),
        5 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::FreeStale),
        1 => (any::<usize>(), 1u32..64).prop_map(|(n, d)| Op::FreeInterior(n, d)),
        1 => (0u32..6, 0u32..(unit as u32 + 8)).prop_map(|(chunk, offset)| Op::FreeBogus { chunk, offset }),
    ];
    prop::collection::vec(op, 1..120)
}

/// The model: live allocations and the bytes they cover, per chunk.
#[derive(Default)]
struct Model {
    unit: u64,
    live: BTreeMap<PcpuPtr, u64>,
    freed: Vec<PcpuPtr>,
    bytes: BTreeMap<u32, Vec<bool>>,
    /// Check the bitmap allocator's choices (`check_choice`), not only
    /// that an answer is free and aligned.
    choices: bool,
}

/// Bytes per hint block of the bitmap allocator (the kernel's
/// `PCPU_BITMAP_BLOCK_SIZE`, a page).
const HINT_BLOCK: usize = 4096;

/// The kernel's `__pcpu_size_to_slot` for a chunk whose longest free run
/// is `bytes` (> 0): `max(fls(bytes) - 3, 1)`.
fn kernel_slot(bytes: usize) -> usize {
    let fls = usize::BITS - bytes.leading_zeros();
    (fls as usize).saturating_sub(3).max(1)
}

/// The longest run of free bytes in `map[from..to]`.
fn longest_free(map: &[bool], from: usize, to: usize) -> usize {
    let (mut best, mut run) = (0, 0);
    for &used in &map[from..to] {
        run = if used { 0 } else { run + 1 };
        best = best.max(run);
    }
    best
}

/// The longest free run of `map` that lies inside one hint block.
fn longest_in_a_block(map: &[bool]) -> usize {
    (0..map.len())
        .step_by(HINT_BLOCK)
        .map(|b| longest_free(map, b, (b + HINT_BLOCK).min(map.len())))
        .max()
        .unwrap_or(0)
}

/// The lowest multiple of `align` where `len` bytes are free, by trying
/// every one.
fn lowest_fit(map: &[bool], len: usize, align: usize) -> Option<usize> {
    (0..map.len())
        .step_by(align)
        .find(|&o| o + len <= map.len() && map[o..o + len].iter().all(|&u| !u))
}

impl Model {
    /// The bitmap allocator's `largest_free` and `metadata_bytes`: the
    /// longest run is its chunks' contig hints, which lie between the
    /// longest run inside one hint block of a chunk in use (block hints
    /// are exact) and the longest run of any chunk; each chunk's two
    /// bitmaps take a bit per 4 bytes, and each 4 KiB block a hint record.
    fn check_stats(&self, s: &mmkit::percpu::PercpuStats) {
        let in_use = |map: &&Vec<bool>| map.iter().any(|&u| u);
        let low = self.bytes.values().filter(in_use).map(|m| longest_in_a_block(m)).max();
        let high = self.bytes.values().filter(in_use).map(|m| longest_free(m, 0, m.len())).max();
        let empty = if s.empty_chunks > 0 { self.unit } else { 0 };
        let (low, high) = (low.unwrap_or(0) as u64, (high.unwrap_or(0) as u64).max(empty));
        assert!(
            low <= s.largest_free && s.largest_free <= high,
            "largest free {} outside [{low}, {high}]",
            s.largest_free
        );
        // Two bitmaps of a bit per 4 bytes (the bound map one word more at
        // most), and a hint record per 4 KiB block.
        let per_chunk = self.unit / 16 + self.unit / 4096 * std::mem::size_of::<BlockMd>() as u64;
        assert!(
            s.metadata_bytes >= s.chunks * per_chunk && s.metadata_bytes <= s.chunks * (per_chunk + 64),
            "{s:?}"
        );
    }

    /// The bitmap allocator's choice of `p` for `size` bytes aligned to
    /// `align`, against a brute-force scan of the chunks as they were:
    /// - for requests aligned to at most 4, the offset is the lowest fit
    ///   in its chunk (every offset tried), 0 in a chunk that held nothing;
    /// - a chunk with nothing allocated (the free slot, or a new chunk) is
    ///   used only when no chunk in use holds the request inside one hint
    ///   block (block hints are exact, and the chunk's hint is at least
    ///   each block's, so such a chunk sits in a slot the search visits);
    /// - no such chunk sits in a lower slot than the one chosen: the search
    ///   walks the slots upward from the request's, so it prefers the
    ///   fuller chunk (seed 003's point). Slots are bounded by brute force:
    ///   the chosen chunk's is at least that of its longest run inside a
    ///   block, another's at most that of its longest run.
    ///
    /// The last two are checked for requests of 32 bytes or more: smaller
    /// ones may legally skip a chunk
    /// that an earlier failure parked in slot 0 (`SLOT_FAIL_THRESHOLD`).
    fn check_choice(&self, p: PcpuPtr, size: u64, align: u64) {
        let (len, align) = (size.div_ceil(4) as usize * 4, align.max(4) as usize);
        let unit = self.unit as usize;
        let free = vec![false; unit];
        let in_use = |c: u32| self.bytes.get(&c).is_some_and(|m| m.iter().any(|&u| u));
        let map = self.bytes.get(&p.chunk).filter(|_| in_use(p.chunk)).unwrap_or(&free);
        if align > 4 {
            // The block walk tests a block's longest run at that run's
            // own alignment and may pass over a lower aligned fit.
            return;
        }
        assert_eq!(
            Some(p.offset as usize),
            lowest_fit(map, len, align),
            "alloc({size}) = {p:?}: not the lowest fit in its chunk"
        );
        if len < 32 {
            return;
        }
        let chosen_low = kernel_slot(longest_in_a_block(map).max(1));
        for (&c, other) in &self.bytes {
            if c == p.chunk || !in_use(c) || longest_in_a_block(other) < len {
                continue;
            }
            assert!(
                in_use(p.chunk),
                "alloc({size}) = {p:?} used an empty chunk; chunk {c} holds it in a block"
            );
            let other_high = kernel_slot(longest_free(other, 0, unit));
            assert!(
                other_high >= chosen_low,
                "alloc({size}) = {p:?} (slot >= {chosen_low}); chunk {c} fits in slot <= {other_high}"
            );
        }
    }

    fn valid(&self, size: u64, align: u64) -> bool {
        size >= 1 && size <= self.unit && align.is_power_of_two() && align <= MAX_ALIGN
    }

    fn take(&mut self, p: PcpuPtr, size: u64, align: u64) {
        let rounded = size.div_ceil(4) * 4;
        let (off, unit) = (u64::from(p.offset), self.unit);
        assert_eq!(off % align.max(4), 0, "{p:?} not aligned to {align}");
        assert!(off + rounded <= unit, "{p:?} + {rounded} past the unit");
        let map = self
            .bytes
            .entry(p.chunk)
            .or_insert_with(|| vec![false; unit as usize]);
        for b in &mut map[off as usize..(off + rounded) as usize] {
            assert!(!*b, "{p:?} overlaps a live allocation");
            *b = true;
        }
        self.live.insert(p, rounded);
        self.freed.retain(|q| *q != p);
    }

    fn release(&mut self, p: PcpuPtr) -> u64 {
        let n = self.live.remove(&p).expect("live");
        let off = p.offset as usize;
        let map = self.bytes.get_mut(&p.chunk).expect("chunk");
        map[off..off + n as usize]
            .iter_mut()
            .for_each(|b| *b = false);
        self.freed.push(p);
        n
    }

    fn nth(&self, n: usize) -> Option<(PcpuPtr, u64)> {
        (!self.live.is_empty()).then(|| {
            let (p, s) = self.live.iter().nth(n % self.live.len()).unwrap();
            (*p, *s)
        })
    }

    /// Does chunk `c` certainly exist (the model has something live in it)?
    fn chunk_live(&self, c: u32) -> bool {
        self.live.keys().any(|p| p.chunk == c)
    }
}

/// A free that must fail; it must change nothing.
fn bad_free<A: PercpuAlloc>(a: &mut A, m: &Model, p: PcpuPtr) {
    let before = a.stats();
    let r = a.free(p);
    assert!(r.is_err(), "free of {p:?} succeeded");
    if m.chunk_live(p.chunk) && u64::from(p.offset) < m.unit {
        assert_eq!(r, Err(FreeError::NotAllocated), "{p:?}");
    }
    assert_eq!(a.stats(), before, "a refused free changed the allocator");
}

fn step<A: PercpuAlloc>(a: &mut A, m: &mut Model, op: &Op) {
    match *op {
        Op::Alloc { size, align } => match a.alloc(size, align) {
            Ok(p) => {
                assert!(
                    m.valid(size, align),
                    "alloc({size}, {align}) should be invalid"
                );
                if m.choices {
                    m.check_choice(p, size, align);
                }
                m.take(p, size, align);
            }
            Err(e) => {
                assert!(!m.valid(size, align), "alloc({size}, {align}) failed: {e}");
                assert_eq!(e, AllocError::Invalid);
            }
        },
        Op::Free(n) => {
            if let Some((p, size)) = m.nth(n) {
                assert_eq!(a.free(p), Ok(size), "free of live {p:?}");
                m.release(p);
            }
        }
        Op::FreeStale(n) => {
            if !m.freed.is_empty() {
                let p = m.freed[n % m.freed.len()];
                if !m.live.contains_key(&p) {
                    bad_free(a, m, p);
                }
            }
        }
        Op::FreeInterior(n, d) => {
            if let Some((p, size)) = m.nth(n) {
                let d = u64::from(d) % size;
                if d != 0 {
                    let q = PcpuPtr {
                        chunk: p.chunk,
                        offset: p.offset + d as u32,
                    };
                    bad_free(a, m, q);
                }
            }
        }
        Op::FreeBogus { chunk, offset } => {
            let p = PcpuPtr { chunk, offset };
            if !m.live.contains_key(&p) {
                bad_free(a, m, p);
            }
        }
    }
}

/// Runs `ops` on `a` and the model; `choices`: check the bitmap
/// allocator's choices too (see `Model::check_choice`).
fn run<A: PercpuAlloc>(a: A, ops: &[Op], choices: bool) {
    let m = Model {
        unit: a.unit_size(),
        choices,
        ..Model::default()
    };
    run_from(a, m, ops);
}

/// [`run`] from a state already built on both.
fn run_from<A: PercpuAlloc>(mut a: A, mut m: Model, ops: &[Op]) {
    for op in ops {
        step(&mut a, &mut m, op);
        if let Err(e) = a.check() {
            panic!("after {op:?}: {e}");
        }
        let s = a.stats();
        assert_eq!(s.live, m.live.len() as u64);
        assert_eq!(s.used_bytes, m.live.values().sum::<u64>());
        assert!(s.empty_chunks <= 1);
        assert_eq!(s.unit_size, m.unit);
        // Every chunk held is listed in exactly one slot.
        assert_eq!(s.slot_counts.iter().sum::<u64>(), s.chunks, "{s:?}");
        if m.choices && m.bytes.len() <= 16 {
            m.check_stats(&s); // a scan of every byte: not on the crowded set-ups
        }
    }
    // Everything frees, and then at most one chunk is kept.
    let all: Vec<_> = m.live.iter().map(|(p, s)| (*p, *s)).collect();
    for (p, size) in all {
        assert_eq!(a.free(p), Ok(size));
        m.release(p);
        a.check().unwrap();
    }
    let s = a.stats();
    assert!(s.chunks <= 1 && s.used_bytes == 0, "{s:?}");
}

fn unit_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![Just(4096u64), Just(8192), Just(12288)]
}
