// The brute-force model, operations and step driver of `tests/percpu_model.rs`,
// shared (by `include!`, never copied) with the seeded fuzz driver
// (`tests/fuzz_driver.rs`) and the cargo-fuzz targets (`fuzz/`).

use std::collections::BTreeMap;

use mmkit::baseline::area_map::AreaMapAllocator;
use mmkit::percpu::{PcpuPtr, PercpuAlloc, PercpuAllocator, MAX_ALIGN};
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
}

impl Model {
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

fn run<A: PercpuAlloc>(mut a: A, ops: &[Op]) {
    let mut m = Model {
        unit: a.unit_size(),
        ..Model::default()
    };
    for op in ops {
        step(&mut a, &mut m, op);
        if let Err(e) = a.check() {
            panic!("after {op:?}: {e}");
        }
        let s = a.stats();
        assert_eq!(s.live, m.live.len() as u64);
        assert_eq!(s.used_bytes, m.live.values().sum::<u64>());
        assert!(s.empty_chunks <= 1);
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
