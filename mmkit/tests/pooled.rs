//! `vmap::pooled::PooledVmap` against a model of live areas: every
//! allocation is aligned, inside the space and disjoint from every live
//! area; frees succeed exactly for live areas and return their size; bad
//! input changes nothing; `check()` holds after every operation; a drain
//! gives the exact allocator its whole space back. Then threads churning
//! on their own CPUs, checked at the end.

use std::collections::BTreeMap;

use mmkit::error::{AllocError, FreeError};
use mmkit::vmap::pooled::{PooledConfig, PooledVmap};
use mmkit::vmap::VmapAllocator;
use proptest::prelude::*;

const PAGE: u64 = 4096;
const SPACE: u64 = 256 * PAGE;

fn pooled(cpus: usize, pool_max: usize, lazy_max: u64) -> PooledVmap {
    let cfg = PooledConfig {
        cpus,
        granule: PAGE,
        classes: 8,
        pool_max,
        lazy_max,
    };
    let p = PooledVmap::new(VmapAllocator::new(0, SPACE).unwrap(), cfg).unwrap();
    assert_eq!(p.config(), cfg, "the configuration given");
    p
}

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        cpu: usize,
        pages: u64,
        align_shift: u32,
    },
    Free {
        cpu: usize,
        pick: usize,
        lazy: bool,
        sized: bool,
    },
    FreeBogus {
        cpu: usize,
        addr: u64,
    },
    Drain,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..4, 1u64..12, 0u32..4).prop_map(|(cpu, pages, align_shift)| Op::Alloc { cpu, pages, align_shift }),
        4 => (0usize..4, any::<usize>(), any::<bool>(), any::<bool>())
            .prop_map(|(cpu, pick, lazy, sized)| Op::Free { cpu, pick, lazy, sized }),
        1 => (0usize..4, 0u64..SPACE + PAGE).prop_map(|(cpu, addr)| Op::FreeBogus { cpu, addr }),
        1 => Just(Op::Drain),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pooled_matches_the_model(
        pool_max in 0usize..4,
        lazy_pages in 0u64..16,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        // CPUs 0..3 exist; CPU 3 does not.
        let p = pooled(3, pool_max, lazy_pages * PAGE);
        let mut live: BTreeMap<u64, u64> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Alloc { cpu, pages, align_shift } => {
                    let (size, align) = (pages * PAGE, PAGE << align_shift);
                    match p.alloc(cpu, size, align) {
                        Ok(a) => {
                            prop_assert!(cpu < 3);
                            prop_assert_eq!(a % align, 0);
                            prop_assert!(a + size <= SPACE);
                            let below = live.range(..a + size).next_back();
                            prop_assert!(below.map_or(true, |(&s, &n)| s + n <= a), "{a:#x} overlaps");
                            live.insert(a, size);
                        }
                        Err(AllocError::Invalid) => prop_assert_eq!(cpu, 3),
                        Err(e) => {
                            prop_assert_eq!(e, AllocError::NoSpace);
                            // After the drain it did, nothing is pooled or
                            // lazy: only live areas can be in the way.
                            for c in 0..3 {
                                prop_assert_eq!(p.stats(c).pooled + p.stats(c).lazy, 0);
                            }
                        }
                    }
                }
                Op::Free { cpu, pick, lazy, sized } => {
                    let Some((&a, &size)) = live.iter().nth(pick % live.len().max(1)) else {
                        continue;
                    };
                    let got = match (lazy, sized) {
                        (false, false) => p.free(cpu, a),
                        (true, false) => p.free_lazy(cpu, a),
                        (false, true) => p.free_sized(cpu, a, size + PAGE),
                        (true, true) => p.free_lazy_sized(cpu, a, size - 1),
                    };
                    if cpu < 3 && sized {
                        // The wrong size first: refused, the area kept.
                        prop_assert_eq!(got, Err(FreeError::SizeMismatch));
                        let got = if lazy { p.free_lazy_sized(cpu, a, size) } else { p.free_sized(cpu, a, size) };
                        prop_assert_eq!(got, Ok(size));
                        live.remove(&a);
                    } else if cpu == 3 {
                        prop_assert_eq!(got, Err(FreeError::Invalid));
                    } else {
                        prop_assert_eq!(got, Ok(size));
                        live.remove(&a);
                        // A second free of it is refused.
                        prop_assert_eq!(p.free(cpu, a), Err(FreeError::NotAllocated));
                    }
                }
                Op::FreeBogus { cpu, addr } => {
                    if cpu < 3 && !live.contains_key(&addr) {
                        prop_assert_eq!(p.free_lazy(cpu, addr), Err(FreeError::NotAllocated));
                    }
                }
                Op::Drain => p.drain(),
            }
            if let Err(e) = p.check() {
                return Err(TestCaseError::fail(e.to_string()));
            }
        }
        for (&a, &size) in &live {
            prop_assert_eq!(p.free(0, a), Ok(size));
        }
        p.drain();
        p.check().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (areas, blocks) = p.with_allocator(|va| (va.stats().live_areas, va.stats().free_blocks));
        prop_assert_eq!((areas, blocks), (0, 1));
    }
}

#[test]
fn pooled_areas_are_reused_on_their_cpu() {
    let p = pooled(2, 4, 0); // every lazy free purges at once
    let a = p.alloc(1, 2 * PAGE, PAGE).unwrap();
    p.free_lazy(1, a).unwrap();
    // CPU 1 pooled it; CPU 0's pool is empty, so it gets fresh space.
    assert_ne!(p.alloc(0, 2 * PAGE, PAGE).unwrap(), a);
    assert_eq!(p.alloc(1, 2 * PAGE, PAGE).unwrap(), a);
    assert_eq!((p.stats(1).hits, p.stats(1).purges), (1, 1));
    // Freed on another CPU, an area goes back to its owner's lazy list.
    p.free_lazy(0, a).unwrap();
    assert_eq!((p.stats(0).purges, p.stats(1).purges), (0, 2));
    assert_eq!(p.alloc(1, 2 * PAGE, PAGE).unwrap(), a);
    // A pooled area that is not aligned enough is left in its pool.
    let b = p.alloc(1, PAGE, PAGE).unwrap();
    p.free(1, b).unwrap();
    let align = (b + PAGE).next_power_of_two() << 1;
    let c = p.alloc(1, PAGE, align).unwrap();
    assert_ne!(c, b);
    assert_eq!(c % align, 0);
    assert_eq!(p.stats(1).pooled, 1);
    p.check().unwrap();
}

#[test]
fn bad_input_changes_nothing() {
    let p = pooled(2, 4, 8 * PAGE);
    let a = p.alloc(0, PAGE, PAGE).unwrap();
    assert_eq!(p.alloc(0, PAGE, 3 * PAGE), Err(AllocError::Invalid));
    assert_eq!(p.alloc(0, 0, PAGE), Err(AllocError::Invalid));
    assert_eq!(p.alloc(2, PAGE, PAGE), Err(AllocError::Invalid));
    assert_eq!(p.alloc(0, u64::MAX, PAGE), Err(AllocError::NoSpace));
    assert_eq!(p.free(0, a + 1), Err(FreeError::NotAllocated));
    assert_eq!(p.free(5, a), Err(FreeError::Invalid));
    assert_eq!(p.free_lazy(0, u64::MAX), Err(FreeError::NotAllocated));
    p.check().unwrap();
    assert_eq!(p.free(1, a), Ok(PAGE));
    assert_eq!(p.free_lazy(0, a), Err(FreeError::NotAllocated));
    p.check().unwrap();
    // A bad alignment is refused even where a pooled area would meet it.
    assert_eq!((a % (3 * PAGE), p.stats(0).pooled), (0, 1));
    assert_eq!(p.alloc(0, PAGE, 3 * PAGE), Err(AllocError::Invalid));
    assert_eq!(p.stats(0).pooled, 1);
    let bad = PooledConfig {
        granule: 3,
        ..PooledConfig::default()
    };
    assert!(PooledVmap::new(VmapAllocator::new(0, SPACE).unwrap(), bad).is_err());
    let mut used = VmapAllocator::new(0, SPACE).unwrap();
    used.alloc(PAGE, PAGE).unwrap();
    assert!(PooledVmap::new(used, PooledConfig::default()).is_err());
}

#[test]
fn threads_churning_on_their_cpus_stay_consistent() {
    let cfg = PooledConfig {
        cpus: 4,
        lazy_max: 64 * PAGE,
        ..PooledConfig::default()
    };
    let p = PooledVmap::new(VmapAllocator::new(0, 1 << 40).unwrap(), cfg).unwrap();
    std::thread::scope(|s| {
        for t in 0..4usize {
            let p = &p;
            s.spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (t as u64 + 1);
                let mut own = std::collections::VecDeque::new();
                for i in 0..20_000u32 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if own.len() < 32 {
                        let size = (1 + x % 20) * PAGE;
                        own.push_back((p.alloc(t, size, PAGE).unwrap(), size));
                    } else {
                        let (a, size) = own.pop_front().unwrap();
                        // Free on another CPU now and then: any CPU may.
                        let cpu = if i % 7 == 0 { (t + 1) % 4 } else { t };
                        let got = if x % 2 == 0 {
                            p.free_lazy(cpu, a)
                        } else {
                            p.free(cpu, a)
                        };
                        assert_eq!(got, Ok(size));
                    }
                }
                for (a, size) in own {
                    assert_eq!(p.free(t, a), Ok(size));
                }
            });
        }
    });
    p.check().unwrap();
    assert!((0..4).map(|c| p.stats(c).hits).sum::<u64>() > 0);
    p.drain();
    p.check().unwrap();
    assert_eq!(p.with_allocator(|va| va.stats().live_areas), 0);
}

/// A CPU's lazy list is purged when its bytes pass `lazy_max`, not when
/// they reach it; misses are counted; a flush hook sees each purge.
#[test]
fn lazy_lists_purge_past_their_limit_through_the_hook() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let p = pooled(2, 0, 2 * PAGE);
    let flushes = Arc::new(AtomicU64::new(0));
    let f = flushes.clone();
    p.set_flush_hook(Some(Box::new(move |_, _| {
        f.fetch_add(1, Ordering::Relaxed);
    })));
    let a: Vec<u64> = (0..3).map(|_| p.alloc(0, PAGE, PAGE).unwrap()).collect();
    assert_eq!((p.stats(0).misses, p.stats(0).hits), (3, 0));
    p.free_lazy(0, a[0]).unwrap();
    p.free_lazy(0, a[1]).unwrap();
    assert_eq!((p.stats(0).lazy, p.stats(0).purges), (2, 0), "at the limit");
    p.free_lazy(0, a[2]).unwrap();
    assert_eq!((p.stats(0).lazy, p.stats(0).purges), (0, 1), "past it");
    assert_eq!(flushes.load(Ordering::Relaxed), 1);
    p.check().unwrap();
}
