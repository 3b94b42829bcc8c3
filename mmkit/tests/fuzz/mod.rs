//! The fuzz targets, one function per allocator: bytes in, operations out
//! (decoded with `arbitrary`), each mirrored into the brute-force model of
//! the allocator's model test, with `check()` after every operation.
//!
//! Shared by the seeded driver (`tests/fuzz_driver.rs`, run by
//! `cargo test`) and the coverage-guided cargo-fuzz targets (`fuzz/`), which
//! include this file by path. A disagreement panics with the first
//! difference; a finding becomes a regression test in `fuzz_driver.rs`.
#![allow(dead_code, unused_imports)]

use arbitrary::{Arbitrary, Unstructured};

/// Most operations one input decodes into (keeps a seeded run's time bounded).
pub const MAX_OPS: usize = 512;

/// Decodes operations until the bytes run out (or [`MAX_OPS`]). Not a
/// decoded `Vec`: `arbitrary` stops a collection after each element with
/// probability 1/2 on random bytes, which left the seeded driver about one
/// operation per input.
pub fn ops<'a, T: Arbitrary<'a>>(u: &mut Unstructured<'a>) -> Vec<T> {
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS && !u.is_empty() {
        match T::arbitrary(u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    ops
}

/// The range allocators' model (`tests/range_model.rs`).
pub mod range {
    #![allow(dead_code, unused_imports)]
    include!("../models/range.rs");
    use arbitrary::Unstructured;

    /// A space `[start, end)` with `start < end`: the model test's fixed
    /// spaces (touching 0, 2^63 and `u64::MAX`) or any small one.
    pub fn space(u: &mut Unstructured<'_>) -> (u64, u64) {
        let kind = u.arbitrary::<u8>().unwrap_or(0) % 8;
        let (s, len): (u64, u64) = (u.arbitrary().unwrap_or(0), u.arbitrary().unwrap_or(1));
        let small = |max: u64| {
            let len = 1 + len % max;
            let s = s.min(u64::MAX - len);
            (s, s + len)
        };
        match kind {
            0 => (0, 1 << 16),
            1 => (u64::MAX - (1 << 16), u64::MAX),
            2 => ((1 << 63) - (1 << 15), (1 << 63) + (1 << 15)),
            3 => (0, u64::MAX),
            4 => (1, u64::MAX),
            5 => small(1 << 16),
            6 => small(64),
            _ => small(u64::MAX - 1),
        }
    }

    /// Runs the decoded operations on a fresh allocator and on the model.
    pub fn fuzz<A: RangeAllocator>(data: &[u8], make: fn(u64, u64) -> A) {
        let mut u = Unstructured::new(data);
        let space = space(&mut u);
        let ops: Vec<Op> = super::ops(&mut u);
        if let Err(e) = run_steps(make, space, &ops) {
            panic!("space {space:x?}: {e}");
        }
    }

    /// Areas the deep target cuts before its steps: about 320 free blocks,
    /// a tree of three levels (checked by `run_deep`).
    pub const DEEP_FUZZ_AREAS: u64 = 640;

    /// A fragmented space (seeded by the input), then the decoded steps.
    pub fn fuzz_deep(data: &[u8]) {
        let mut u = Unstructured::new(data);
        let seed: u64 = u.arbitrary().unwrap_or(0);
        let ops: Vec<Deep> = super::ops(&mut u);
        if let Err(e) = run_deep(tree, DEEP_FUZZ_AREAS, seed, &ops) {
            panic!("seed {seed}: {e}");
        }
    }

    /// The tree allocator of `space`.
    pub fn tree_for_fuzz(s: u64, e: u64) -> VmapAllocator {
        tree(s, e)
    }

    /// The busy-list baseline of `space`.
    pub fn linear_for_fuzz(s: u64, e: u64) -> LinearVmap {
        linear(s, e)
    }
}

/// Frees that carry the size (`tests/sized_model.rs`), on both kinds of
/// exact allocator.
pub mod sized {
    #![allow(dead_code, unused_imports)]
    include!("../models/range.rs");
    include!("../models/sized.rs");
    use arbitrary::Unstructured;

    /// Runs the decoded operations on an allocator with a busy index or
    /// without one (the first byte says which) and on the model.
    pub fn fuzz(data: &[u8]) {
        let mut u = Unstructured::new(data);
        let sized_only = u.arbitrary::<bool>().unwrap_or(false);
        let space = super::range::space(&mut u);
        let ops: Vec<SizedOp> = super::ops(&mut u);
        let make = if sized_only { untracked } else { tree };
        if let Err(e) = run_sized(make, space, &ops, sized_only) {
            panic!("space {space:x?}, without index {sized_only}: {e}");
        }
    }
}

/// The vmap nodes' model (`tests/nodes_model.rs`).
pub mod nodes {
    #![allow(dead_code, unused_imports)]
    include!("../models/nodes.rs");
    use arbitrary::Unstructured;

    /// Runs the decoded operations on a `VmapNodes` of a small
    /// configuration and on the model.
    pub fn fuzz(data: &[u8]) {
        let mut u = Unstructured::new(data);
        let cfg = nodes_cfg(u.arbitrary().unwrap_or(0), u.arbitrary().unwrap_or(0));
        let ops: Vec<NodesOp> = super::ops(&mut u);
        if let Err(e) = run_nodes(cfg, &ops) {
            panic!("{cfg:?}: {e}");
        }
    }
}

/// The percpu allocators' model (`tests/percpu_model.rs`).
pub mod percpu {
    #![allow(dead_code, unused_imports)]
    include!("../models/percpu.rs");
    use arbitrary::Unstructured;

    /// Sizes mostly within a unit (some 0 and beyond), alignments mostly
    /// powers of two up to 4 KiB (some 0, odd or huge).
    fn shape(op: Op, unit: u64) -> Op {
        match op {
            Op::Alloc { size, align } => Op::Alloc {
                size: if size >> 60 == 0xf {
                    size
                } else {
                    size % (unit + 2)
                },
                align: if align >> 60 == 0xf {
                    align
                } else {
                    1 << (align % 14)
                },
            },
            Op::FreeBogus { chunk, offset } => Op::FreeBogus {
                chunk: chunk % 8,
                offset: offset % (unit as u32 + 8),
            },
            o => o,
        }
    }

    /// Runs the decoded operations on `make(unit)` and on the model.
    /// `choices`: check the bitmap allocator's choices too.
    pub fn fuzz<A: PercpuAlloc>(data: &[u8], make: fn(u64) -> A, choices: bool) {
        let mut u = Unstructured::new(data);
        let unit = [4096, 8192, 12288][usize::from(u.arbitrary::<u8>().unwrap_or(0) % 3)];
        let ops: Vec<Op> = super::ops(&mut u);
        let ops: Vec<Op> = ops.into_iter().map(|o| shape(o, unit)).collect();
        run(make(unit), &ops, choices);
    }
}

/// The buddy allocator's model (`tests/buddy_model.rs`).
pub mod buddy {
    #![allow(dead_code, unused_imports)]
    include!("../models/buddy.rs");
    use arbitrary::Unstructured;

    /// A setup as the proptest draws them: orders, a start pfn, up to five
    /// segments (present or a hole), a placement.
    fn arbitrary_setup(u: &mut Unstructured<'_>) -> Setup {
        let orders = [(3u8, 2u8), (4, 2), (5, 3), (4, 4), (10, 9)];
        let (max_order, pb) = orders[usize::from(u.arbitrary::<u8>().unwrap_or(0) % 5)];
        let start = u64::from(u.arbitrary::<u16>().unwrap_or(0) % 3000);
        let n = 1 + usize::from(u.arbitrary::<u8>().unwrap_or(0) % 5);
        let mut segs = Vec::new();
        let mut p = start;
        for _ in 0..n {
            let len = 1 + u64::from(u.arbitrary::<u8>().unwrap_or(0) % 119);
            let present = u.arbitrary::<u8>().unwrap_or(0) % 4 != 0;
            segs.push((p, p + len, present));
            p += len;
        }
        let placement = if u.arbitrary().unwrap_or(false) {
            Placement::Head
        } else {
            Placement::TailIfMergeLikely
        };
        Setup {
            max_order,
            pb,
            start,
            segs,
            placement,
        }
    }

    fn shape(op: Op) -> Op {
        match op {
            Op::Alloc { order, mt } => Op::Alloc {
                order: order % 12,
                mt: mt % 4,
            },
            Op::FreeRaw { off, order } => Op::FreeRaw {
                off: off % 800,
                order: order % 12,
            },
            Op::SetType { off, mt } => Op::SetType {
                off: off % 800,
                mt: mt % 4,
            },
            Op::AddSeg { seg } => Op::AddSeg { seg: seg % 6 },
            o => o,
        }
    }

    /// Runs the decoded operations, then frees everything, comparing with
    /// the model after every step.
    pub fn fuzz(data: &[u8]) {
        let mut u = Unstructured::new(data);
        let s = arbitrary_setup(&mut u);
        let ops: Vec<Op> = super::ops(&mut u);
        let (mut b, mut m) = build(&s);
        let fail = |e: TestCaseError| panic!("setup {s:?}: {e}");
        compare(&b, &m).unwrap_or_else(fail);
        for op in ops.into_iter().map(shape) {
            step(&mut b, &mut m, &s, &op).unwrap_or_else(|e| panic!("{op:?}, setup {s:?}: {e}"));
            compare(&b, &m).unwrap_or_else(|e| panic!("{op:?}, setup {s:?}: {e}"));
        }
        let live: Vec<(u64, u8)> = m.live.iter().map(|(&p, &o)| (p, o)).collect();
        for (pfn, order) in live {
            assert_eq!(b.free(pfn, order), Ok(()));
            m.live.remove(&pfn);
            m.mark(pfn, order, false);
            m.kern.free(pfn, order).unwrap();
            compare(&b, &m).unwrap_or_else(fail);
        }
    }
}

/// The vblock front end's model (`tests/vblock_model.rs`).
pub mod vblock {
    #![allow(dead_code, unused_imports)]
    include!("../models/vblock.rs");
    use arbitrary::Unstructured;

    /// The model test's configurations.
    const CONFIGS: [(u64, u64); 4] = [(8, 16), (8, 32), (16, 128), (5, 64)];

    fn shape(op: Op, max: u64) -> Op {
        match op {
            Op::Map { cpu, pages } => Op::Map {
                cpu: cpu % 2,
                pages: 1 + pages % (3 * max),
            },
            Op::Bad { kind, pick } => Op::Bad {
                kind: kind % 5,
                pick,
            },
            o => o,
        }
    }

    /// Runs the decoded operations under either policy.
    pub fn fuzz(data: &[u8]) {
        let mut u = Unstructured::new(data);
        let (max_alloc, bits) = CONFIGS[usize::from(u.arbitrary::<u8>().unwrap_or(0) % 4)];
        let cfg = Config {
            page_size: 4096,
            max_alloc,
            bits,
        };
        let policy = if u.arbitrary().unwrap_or(false) {
            Policy::Legacy
        } else {
            Policy::Current
        };
        let ops: Vec<Op> = super::ops(&mut u);
        let ops: Vec<Op> = ops.into_iter().map(|o| shape(o, max_alloc)).collect();
        if let Err(e) = run_ops(cfg, policy, &ops) {
            panic!("{cfg:?} {policy:?}: {e}");
        }
    }
}

/// `VmapAllocator::allocate` with every policy, lazy frees, purges, `grow`
/// and `shrink` (`tests/policy_model.rs`).
pub mod policy {
    #![allow(dead_code, unused_imports)]
    include!("../models/policy.rs");
    use arbitrary::{Arbitrary, Unstructured};

    /// `x` reduced below `m`, except values with a top nibble of 0xf, kept
    /// raw (huge sizes, odd alignments, windows and addresses far away).
    fn small(x: u64, m: u64) -> u64 {
        if x >> 60 == 0xf {
            x
        } else {
            x % m
        }
    }

    /// Sizes, offsets and resizes mostly small and relative to the space,
    /// so most operations can succeed; alignments mostly powers of two.
    fn shape(op: Op, (lo, _): (u64, u64)) -> Op {
        let at = |x: u64| lo.saturating_add(small(x, 1 << 13));
        match op {
            Op::Alloc {
                size,
                align,
                window,
                place,
            } => Op::Alloc {
                size: small(size, 1 << 12),
                align: if align >> 60 == 0xf {
                    align
                } else {
                    1 << (align % 16)
                },
                window: window.map(|(a, b)| (at(a), at(b))),
                place: match place {
                    Place::Exact(a) => Place::Exact(at(a)),
                    p => p,
                },
            },
            Op::Grow(a, b) => Op::Grow(small(a, 1 << 13), small(b, 1 << 13)),
            Op::Shrink(a, b) => Op::Shrink(small(a, 1 << 10), small(b, 1 << 10)),
            op => op,
        }
    }

    /// Runs the decoded operations on a fresh allocator and on the model.
    pub fn fuzz(data: &[u8]) {
        let mut u = Unstructured::new(data);
        let space = super::range::space(&mut u);
        let ops: Vec<Op> = super::ops(&mut u);
        let ops: Vec<Op> = ops.into_iter().map(|o| shape(o, space)).collect();
        if let Err(e) = run_policy_ops(space, &ops) {
            panic!("space {space:x?}: {e}");
        }
    }
}

/// A target: its name and the function that runs one input.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: [Target; 10] = [
    ("vmap", |d| range::fuzz(d, range::tree_for_fuzz)),
    ("vmap_deep", range::fuzz_deep),
    ("linear_vmap", |d| range::fuzz(d, range::linear_for_fuzz)),
    ("vblock", vblock::fuzz),
    ("percpu", |d| {
        percpu::fuzz(
            d,
            |u| mmkit::percpu::PercpuAllocator::new(u).expect("valid unit"),
            true,
        )
    }),
    ("area_map", |d| {
        percpu::fuzz(
            d,
            |u| mmkit::baseline::area_map::AreaMapAllocator::new(u).expect("valid unit"),
            false,
        )
    }),
    ("buddy", buddy::fuzz),
    ("vmap_policy", policy::fuzz),
    ("vmap_sized", sized::fuzz),
    ("vmap_nodes", nodes::fuzz),
];
