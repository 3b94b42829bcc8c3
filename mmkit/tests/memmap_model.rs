#![allow(dead_code)]
//! An allocator built from a memory map (`VmapAllocator::new_empty`,
//! `add_free`) and range frees (`free_range`), against a brute-force
//! model: many disjoint ranges (up to thousands, so the free tree reaches
//! two inner levels), added in shuffled order, then random allocations,
//! exact and windowed, frees whole, lazy and by range, and more ranges
//! added between and around. After every step the result, the free blocks,
//! the managed ranges, the live areas and `check()` must agree.

use mmkit::storage::Fixed;

include!("models/range.rs");
include!("models/memmap.rs");

/// One step; raw numbers are resolved against the current state, so most
/// steps name a live area, a hole or a free block rather than noise.
#[derive(Debug, Clone)]
enum MapOp {
    Alloc {
        size: u64,
        align_log: u8,
        window: Option<(u64, u64)>,
    },
    Free {
        pick: usize,
        lazy: bool,
    },
    FreeRange {
        pick: usize,
        off: u64,
        len: u64,
    },
    FreeRaw {
        start: u64,
        len: u64,
    },
    AddFree {
        start: u64,
        len: u64,
    },
    Purge,
    AllowHeap,
}

fn map_op_strategy(span: u64) -> impl Strategy<Value = MapOp> {
    prop_oneof![
        4 => (1u64..64, 0u8..6, prop::option::of((0..span, 1..span))).prop_map(
            |(size, align_log, window)| MapOp::Alloc { size, align_log, window }
        ),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, lazy)| MapOp::Free { pick, lazy }),
        4 => (any::<usize>(), 0u64..64, 1u64..160).prop_map(|(pick, off, len)| MapOp::FreeRange { pick, off, len }),
        1 => (0..span, 0u64..64).prop_map(|(start, len)| MapOp::FreeRaw { start, len }),
        2 => (0..span + 200, 0u64..40).prop_map(|(start, len)| MapOp::AddFree { start, len }),
        1 => Just(MapOp::Purge),
        1 => Just(MapOp::AllowHeap),
    ]
}

/// `n` disjoint ranges in a stride-64 grid above `base` (lengths 1..=48,
/// starts 0..16 into each slot), in an order that fills gaps between
/// ranges already added as often as it extends the hull.
fn map(base: u64, n: usize, seed: u64) -> Vec<(u64, u64)> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut v: Vec<(u64, u64)> = (0..n as u64)
        .map(|i| {
            let s = base + i * 64 + next() % 16;
            (s, s + 1 + next() % 48)
        })
        .collect();
    for i in (1..v.len()).rev() {
        v.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    v
}

/// Drives `va` and the model through `ops` over the map; `base` places the
/// map (0, or near `u64::MAX`).
///
/// An allocator in fixed storage may refuse a step for lack of room
/// (`StorageFull`, also for every lazy free until the heap is allowed):
/// the model then skips the step, and the comparison after it shows that
/// nothing changed.
fn run<S: Storage>(
    mut va: VmapAllocator<S>,
    base: u64,
    n: usize,
    seed: u64,
    ops: &[MapOp],
) -> Result<(), TestCaseError>
where
    VmapAllocator<S>: PerStorage,
{
    let fixed = S::FIXED;
    let indexed = !fixed && (!va.frees_need_size() || cfg!(debug_assertions));
    let mut m = MapModel::new();
    // `$got` is the allocator's answer; the model answers `$want` unless
    // fixed storage was full.
    macro_rules! step {
        ($got:expr, $want:expr, $full:pat, $op:expr) => {{
            let got = $got;
            if !(fixed && matches!(got, Err($full))) {
                prop_assert_eq!(got, $want, "{:?}", $op);
            }
        }};
    }
    for (s, e) in map(base, n, seed) {
        step!(
            va.add_free(s, e),
            m.add_free(s, e),
            AddFreeError::StorageFull,
            (s, e)
        );
    }
    same(&va, &m, indexed).map_err(TestCaseError::fail)?;
    for op in ops {
        match *op {
            MapOp::Alloc {
                size,
                align_log,
                window,
            } => {
                let align = 1u64 << align_log;
                let (vs, ve) = window.map_or((0, u64::MAX), |(s, l)| {
                    (base + s, (base + s).saturating_add(l))
                });
                step!(
                    va.alloc_in(size, align, vs, ve),
                    m.alloc_in(size, align, vs, ve),
                    AllocError::StorageFull,
                    op
                );
            }
            MapOp::Free { pick, lazy } => {
                let Some((&a, &b)) = m.m.live.iter().nth(pick % m.m.live.len().max(1)) else {
                    continue;
                };
                if va.frees_need_size() {
                    let got = if lazy {
                        va.free_lazy_sized(a, b - a)
                    } else {
                        va.free_sized(a, b - a)
                    };
                    if !(fixed && got == Err(FreeError::StorageFull)) {
                        let want = if lazy { m.free_lazy(a) } else { m.free(a) };
                        prop_assert_eq!(got, want);
                    }
                } else if lazy {
                    prop_assert_eq!(va.free_lazy(a), m.free_lazy(a));
                } else {
                    prop_assert_eq!(va.free(a), m.free(a));
                }
            }
            MapOp::FreeRange { pick, off, len } => {
                let Some((&a, &b)) = m.m.live.iter().nth(pick % m.m.live.len().max(1)) else {
                    continue;
                };
                let start = a + off % (b - a);
                step!(
                    va.free_range(start, len),
                    m.free_range(start, len),
                    FreeError::StorageFull,
                    op
                );
            }
            MapOp::FreeRaw { start, len } => {
                let start = base + start;
                step!(
                    va.free_range(start, len),
                    m.free_range(start, len),
                    FreeError::StorageFull,
                    op
                );
            }
            MapOp::AddFree { start, len } => {
                let s = (base + start).min(u64::MAX - len);
                step!(
                    va.add_free(s, s + len),
                    m.add_free(s, s + len),
                    AddFreeError::StorageFull,
                    op
                );
            }
            MapOp::Purge => {
                prop_assert_eq!(va.purge(&mut |_, _| {}), m.purge());
            }
            MapOp::AllowHeap => va.allow_heap(),
        }
        same(&va, &m, indexed).map_err(|e| TestCaseError::fail(format!("after {op:?}: {e}")))?;
    }
    Ok(())
}

/// Map sizes: a leaf's worth, one inner level, two inner levels.
fn ranges() -> impl Strategy<Value = usize> {
    prop_oneof![3 => 1usize..20, 2 => 200usize..400, 1 => 3000usize..4200]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn indexed_matches_model(n in ranges(), seed in any::<u64>(), ops in prop::collection::vec(map_op_strategy(4000 * 64), 1..160)) {
        run(VmapAllocator::new_empty(), 0, n, seed, &ops)?;
    }

    #[test]
    fn without_index_matches_model(n in ranges(), seed in any::<u64>(), ops in prop::collection::vec(map_op_strategy(4000 * 64), 1..160)) {
        run(VmapAllocator::empty_without_busy_index(), 0, n, seed, &ops)?;
    }

    #[test]
    fn fixed_storage_matches_model(n in 1usize..60, seed in any::<u64>(), ops in prop::collection::vec(map_op_strategy(60 * 64), 1..160)) {
        run(VmapAllocator::<Fixed<6>>::new_fixed(), 0, n, seed, &ops)?;
    }

    #[test]
    fn at_the_top_of_u64(n in 1usize..40, seed in any::<u64>(), ops in prop::collection::vec(map_op_strategy(40 * 64), 1..160)) {
        run(VmapAllocator::new_empty(), u64::MAX - 40 * 64 - 300, n, seed, &ops)?;
    }
}
