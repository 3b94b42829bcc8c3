//! `vblock` against a brute-force model, step by step, for both policies;
//! a multi-threaded no-overlap stress test; unit tests for the dirty range
//! and block release.

include!("models/vblock.rs");

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn legacy_matches_model(cfg in configs(), ops in prop::collection::vec(op(16), 1..250)) {
        let ops: Vec<Op> = ops.into_iter().map(|o| clamp_op(o, cfg.max_alloc)).collect();
        run_ops(cfg, Policy::Legacy, &ops)?;
    }

    #[test]
    fn current_matches_model(cfg in configs(), ops in prop::collection::vec(op(16), 1..250)) {
        let ops: Vec<Op> = ops.into_iter().map(|o| clamp_op(o, cfg.max_alloc)).collect();
        run_ops(cfg, Policy::Current, &ops)?;
    }
}

/// Rescales map sizes drawn for max_alloc 16 to the config's max_alloc,
/// keeping small maps small and large ones large.
fn clamp_op(op: Op, max: u64) -> Op {
    match op {
        Op::Map { cpu, pages } if pages <= 16 => Op::Map {
            cpu,
            pages: 1 + (pages - 1) % max,
        },
        Op::Map { cpu, pages } => Op::Map {
            cpu,
            pages: max + 1 + pages % (2 * max),
        },
        o => o,
    }
}

// ---------------------------------------------------------------------------
// Unit tests.

const SMALL: Config = Config {
    page_size: 4096,
    max_alloc: 8,
    bits: 32,
};

#[test]
fn dirty_range_is_flushed_once_then_forgotten() {
    let mut vb = VblockAllocator::new(range(), SMALL, Policy::Current, 1).unwrap();
    let a = vb.map(0, 2).unwrap();
    let b = vb.map(0, 3).unwrap(); // uses 4 pages
    let c = vb.map(0, 1).unwrap();
    assert_eq!((b - a, c - b), (2 * 4096, 4 * 4096));
    vb.unmap(b, 3).unwrap();
    let mut got = Vec::new();
    assert!(vb.unmap_aliases(&mut |s, e| got.push((s, e))));
    assert_eq!(got, vec![(b, b + 4 * 4096)]);
    // Nothing dirty since: no flush at all.
    assert!(!vb.unmap_aliases(&mut |s, e| got.push((s, e))));
    vb.unmap(a, 2).unwrap();
    vb.unmap(c, 1).unwrap();
    assert!(vb.unmap_aliases(&mut |s, e| got.push((s, e))));
    assert_eq!(
        got[1],
        (a, c + 4096),
        "two unflushed unmaps: one covering range"
    );
    assert_eq!(vb.counters().flushes, 2);
    vb.check().unwrap();
}

#[test]
fn legacy_reflushes_its_dirty_bitmap() {
    let mut vb = VblockAllocator::new(range(), SMALL, Policy::Legacy, 1).unwrap();
    let a = vb.map(0, 1).unwrap();
    let b = vb.map(0, 2).unwrap();
    assert_eq!(b - a, 2 * 4096, "aligned order-1 run after page 0");
    let c = vb.map(0, 1).unwrap();
    assert_eq!(c - a, 4096, "the hole below is filled first");
    vb.unmap(a, 1).unwrap();
    let mut got = Vec::new();
    vb.unmap_aliases(&mut |s, e| got.push((s, e)));
    vb.unmap_aliases(&mut |s, e| got.push((s, e)));
    assert_eq!(
        got,
        vec![(a, a + 4096); 2],
        "2008 never cleared the dirty bitmap"
    );
    vb.check().unwrap();
}

#[test]
fn a_fully_dirty_block_is_released_lazily_and_flushed_with_aliases() {
    for policy in [Policy::Legacy, Policy::Current] {
        let mut vb = VblockAllocator::new(range(), SMALL, policy, 1).unwrap();
        let maps: Vec<u64> = (0..4).map(|_| vb.map(0, 8).unwrap()).collect();
        assert_eq!(vb.blocks(), 1);
        let va = maps[0];
        assert!(
            maps.iter().all(|&m| m & !(SMALL.block_size() - 1) == va),
            "one block"
        );
        for &m in &maps[..3] {
            vb.unmap(m, 8).unwrap();
        }
        assert_eq!(
            vb.counters().blocks_released,
            0,
            "{policy:?}: a live map pins the block"
        );
        vb.unmap(maps[3], 8).unwrap();
        let c = vb.counters();
        assert_eq!((c.blocks_created, c.blocks_released), (1, 1), "{policy:?}");
        assert_eq!(vb.blocks(), 0);
        let st = vb.range().stats();
        assert_eq!(
            (st.live_areas, st.lazy_bytes),
            (0, SMALL.block_size()),
            "released lazily"
        );
        let mut got = Vec::new();
        assert!(vb.unmap_aliases(&mut |s, e| got.push((s, e))));
        assert_eq!(got, vec![(va, va + SMALL.block_size())]);
        assert_eq!(vb.range().stats().lazy_bytes, 0);
        vb.check().unwrap();
    }
}

#[test]
fn current_purges_fragmented_blocks_when_space_runs_out() {
    // Room for exactly two blocks.
    let r = VmapAllocator::new(0, 2 * SMALL.block_size()).unwrap();
    let mut vb = VblockAllocator::new(r, SMALL, Policy::Current, 2).unwrap();
    // CPU 0: a block with 1 page left free, nothing live.
    for _ in 0..31 {
        let a = vb.map(0, 1).unwrap();
        vb.unmap(a, 1).unwrap();
    }
    let kept = vb.map(1, 8).unwrap(); // CPU 1's block: the second one
    for _ in 0..3 {
        vb.map(1, 8).unwrap(); // fills it
    }
    assert_eq!(vb.counters().blocks_created, 2);
    // CPU 1 needs a third block: only purging CPU 0's fragmented one helps.
    let third = vb.map(1, 8).unwrap();
    let c = vb.counters();
    assert_eq!(
        (c.blocks_created, c.fragmented_purges, c.blocks_released),
        (3, 1, 1)
    );
    assert_eq!(third, 0, "the purged block's space, reused");
    for _ in 0..3 {
        vb.map(1, 8).unwrap();
    }
    let before = vb.counters();
    assert_eq!(
        vb.map(1, 8),
        Err(AllocError::NoSpace),
        "nothing left to purge"
    );
    assert_eq!(vb.counters(), before);
    vb.check().unwrap();
    vb.unmap(kept, 8).unwrap();
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let mut vb = VblockAllocator::new(range(), SMALL, Policy::Current, 1).unwrap();
    assert_eq!(vb.map(0, 0), Err(AllocError::Invalid));
    assert_eq!(vb.map(1, 1), Err(AllocError::Invalid), "no CPU 1");
    assert_eq!(
        vb.map(0, u64::MAX),
        Err(AllocError::Invalid),
        "size overflows"
    );
    assert_eq!(vb.map(0, u64::MAX / 4096), Err(AllocError::NoSpace));
    let a = vb.map(0, 3).unwrap();
    let big = vb.map(0, 9).unwrap();
    let before = vb.counters();
    assert_eq!(
        vb.unmap(a, 4),
        Err(FreeError::NotAllocated),
        "wrong page count"
    );
    assert_eq!(vb.unmap(a, 0), Err(FreeError::Invalid));
    assert_eq!(vb.unmap(a + 1, 3), Err(FreeError::NotAllocated));
    assert_eq!(vb.unmap(big, 10), Err(FreeError::NotAllocated));
    assert_eq!(vb.unmap(u64::MAX, 1), Err(FreeError::NotAllocated));
    assert_eq!(vb.unmap(u64::MAX, u64::MAX), Err(FreeError::NotAllocated));
    assert_eq!(vb.counters(), before);
    vb.unmap(a, 3).unwrap();
    assert_eq!(vb.unmap(a, 3), Err(FreeError::NotAllocated), "double unmap");
    vb.unmap(big, 9).unwrap();
    assert!(VblockAllocator::new(range(), SMALL, Policy::Current, 0).is_err());
    let bad = Config { bits: 8, ..SMALL };
    assert_eq!(
        VblockAllocator::new(range(), bad, Policy::Current, 1).err(),
        Some(AllocError::Invalid)
    );
    vb.check().unwrap();
}

/// Seed 001 scenario 1 at small scale: Legacy never reuses, Current
/// releases about one block per iteration.
#[test]
fn exhaustion_loop_leaks_only_under_legacy() {
    let cfg = Config::KERNEL;
    let small = (cfg.bits - 16) / 8 - 1;
    for policy in [Policy::Legacy, Policy::Current] {
        let mut vb = VblockAllocator::new(range(), cfg, policy, 1).unwrap();
        for _ in 0..20 {
            let a = vb.map(0, 16).unwrap();
            vb.unmap(a, 16).unwrap();
            for _ in 0..small {
                let a = vb.map(0, 8).unwrap();
                vb.unmap(a, 8).unwrap();
            }
        }
        vb.check().unwrap();
        let c = vb.counters();
        match policy {
            Policy::Legacy => assert_eq!((c.blocks_created, c.blocks_released), (20, 0)),
            Policy::Current => assert!(
                c.blocks_created <= 21 && c.blocks_released + 1 >= c.blocks_created,
                "{c:?}"
            ),
        }
    }
}

// ---------------------------------------------------------------------------
// Multi-threaded stress: no two threads ever hold overlapping mappings.

#[test]
fn threads_never_hold_overlapping_mappings() {
    const THREADS: usize = 4;
    const OPS: usize = 40_000;
    for policy in [Policy::Legacy, Policy::Current] {
        let mut r = range();
        r.set_lazy_max(4 * SMALL.block_size());
        let vb = ConcurrentVblock::new(r, SMALL, policy, 2).unwrap();
        // Every live mapping: start -> (end, owner).
        let held: Mutex<BTreeMap<u64, (u64, usize)>> = Mutex::new(BTreeMap::new());
        // Mappings handed from one thread to another, to unmap there.
        let pool: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (vb, held, pool) = (&vb, &held, &pool);
                s.spawn(move || stress_thread(vb, held, pool, t, OPS));
            }
        });
        for (addr, pages) in pool.lock().unwrap().drain(..) {
            held.lock().unwrap().remove(&addr);
            vb.unmap(addr, pages).unwrap();
        }
        vb.check().unwrap();
        let c = vb.counters();
        assert_eq!(c.map_calls, c.unmap_calls, "{policy:?}: every map unmapped");
        assert!(held.lock().unwrap().is_empty());
        assert_eq!(
            c.blocks_created,
            c.blocks_released + vb.with_range(|r| r.stats().live_areas)
        );
    }
}

fn stress_thread(
    vb: &ConcurrentVblock<VmapAllocator>,
    held: &Mutex<BTreeMap<u64, (u64, usize)>>,
    pool: &Mutex<Vec<(u64, u64)>>,
    t: usize,
    ops: usize,
) {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ ((t as u64 + 1) * 0x1234_5678);
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut mine: Vec<(u64, u64)> = Vec::new();
    for i in 0..ops {
        let r = next();
        if mine.len() < 24 && (r % 3 != 0 || mine.is_empty()) {
            let pages = if r % 29 == 0 {
                9 + r % 7
            } else {
                1 + (r >> 8) % 8
            };
            let addr = if t % 2 == 0 {
                vb.map(pages)
            } else {
                vb.map_on((r >> 20) as usize % 2, pages)
            }
            .unwrap();
            let end = addr + pages * 4096;
            let mut h = held.lock().unwrap();
            if let Some((&a, &(e, owner))) = h.range(..end).next_back() {
                assert!(
                    e <= addr,
                    "thread {t}: [{addr:#x}, {end:#x}) overlaps [{a:#x}, {e:#x}) of thread {owner}"
                );
            }
            h.insert(addr, (end, t));
            mine.push((addr, pages));
        } else if !mine.is_empty() {
            let (addr, pages) = mine.swap_remove((r >> 16) as usize % mine.len());
            if r % 5 == 0 {
                pool.lock().unwrap().push((addr, pages)); // another thread unmaps it
                continue;
            }
            held.lock().unwrap().remove(&addr);
            vb.unmap(addr, pages).unwrap();
            let handed = pool.lock().unwrap().pop();
            if let Some((addr, pages)) = handed {
                held.lock().unwrap().remove(&addr);
                vb.unmap(addr, pages).unwrap();
            }
        }
        if i % 997 == 0 {
            vb.unmap_aliases(&mut |s, e| assert!(s < e));
        }
    }
    for (addr, pages) in mine {
        held.lock().unwrap().remove(&addr);
        vb.unmap(addr, pages).unwrap();
    }
}

// ---------------------------------------------------------------------------
// The thread-safe front end, driven from one thread with explicit CPUs,
// answers exactly as the single-threaded one (same addresses, flushes,
// counters, errors), for both policies.

fn compare_fronts(
    cfg: Config,
    policy: Policy,
    range: fn(&Config) -> VmapAllocator,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let mut single = VblockAllocator::new(range(&cfg), cfg, policy, 2).expect("valid");
    let shared = ConcurrentVblock::new(range(&cfg), cfg, policy, 2).expect("valid");
    let mut live: Vec<(u64, u64)> = Vec::new();
    for op in ops {
        match *op {
            Op::Map { cpu, pages } => {
                let a = single.map(cpu, pages);
                prop_assert_eq!(a, shared.map_on(cpu, pages));
                if let Ok(a) = a {
                    live.push((a, pages));
                }
            }
            Op::Unmap { pick } if !live.is_empty() => {
                let (a, p) = live.swap_remove(pick % live.len());
                prop_assert_eq!(single.unmap(a, p), Ok(()));
                prop_assert_eq!(shared.unmap(a, p), Ok(()));
            }
            Op::Unmap { .. } => {}
            Op::Bad { kind, pick } => {
                let (a, p) = live
                    .get(pick % live.len().max(1))
                    .copied()
                    .unwrap_or((START, 1));
                let (a, p) = if kind % 2 == 0 {
                    (a, p + 1)
                } else {
                    (a + 4096, p)
                };
                if live.contains(&(a, p)) {
                    continue; // a live mapping: not a bad unmap
                }
                prop_assert_eq!(single.unmap(a, p), shared.unmap(a, p));
            }
            Op::Aliases => {
                let (mut x, mut y) = (Vec::new(), Vec::new());
                single.unmap_aliases(&mut |s, e| x.push((s, e)));
                shared.unmap_aliases(&mut |s, e| y.push((s, e)));
                prop_assert_eq!(x, y);
            }
        }
        prop_assert_eq!(single.counters(), shared.counters());
        for cpu in 0..3 {
            prop_assert_eq!(single.cpu_counters(cpu), shared.cpu_counters(cpu));
        }
        shared
            .check()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn concurrent_front_end_matches_single(
        cfg in configs(),
        legacy in any::<bool>(),
        ops in prop::collection::vec(op(16), 1..200),
    ) {
        let ops: Vec<Op> = ops.into_iter().map(|o| clamp_op(o, cfg.max_alloc)).collect();
        let policy = if legacy { Policy::Legacy } else { Policy::Current };
        compare_fronts(cfg, policy, |_| range(), &ops)?;
    }

    /// Room for three blocks: the fronts run out of space, and Current's
    /// forced purge of fragmented blocks on every CPU, then one retry,
    /// must give the same answers in both.
    #[test]
    fn concurrent_front_end_matches_single_when_space_runs_out(
        cfg in configs(),
        legacy in any::<bool>(),
        ops in prop::collection::vec(op(16), 1..200),
    ) {
        let ops: Vec<Op> = ops.into_iter().map(|o| clamp_op(o, cfg.max_alloc)).collect();
        let policy = if legacy { Policy::Legacy } else { Policy::Current };
        compare_fronts(cfg, policy, three_blocks, &ops)?;
    }
}

fn three_blocks(cfg: &Config) -> VmapAllocator {
    let mut r = VmapAllocator::new(START, START + 3 * cfg.block_size()).expect("valid space");
    r.set_lazy_max(u64::MAX);
    r
}

/// The shared front end purges fragmented blocks on every CPU when no new
/// block fits, then retries once: the single front end's scenario in
/// `current_purges_fragmented_blocks_when_space_runs_out`, answered alike.
#[test]
fn concurrent_front_end_purges_fragmented_blocks_when_space_runs_out() {
    let r = VmapAllocator::new(0, 2 * SMALL.block_size()).unwrap();
    let vb = ConcurrentVblock::new(r, SMALL, Policy::Current, 2).unwrap();
    for _ in 0..31 {
        let a = vb.map_on(0, 1).unwrap();
        vb.unmap(a, 1).unwrap();
    }
    for _ in 0..4 {
        vb.map_on(1, 8).unwrap();
    }
    assert_eq!(
        vb.map_on(1, 8),
        Ok(0),
        "CPU 0's fragmented block, purged and reused"
    );
    let c = vb.cpu_counters(0).unwrap();
    assert_eq!((c.fragmented_purges, c.blocks_released), (1, 1));
    for _ in 0..3 {
        vb.map_on(1, 8).unwrap();
    }
    assert_eq!(vb.map_on(1, 8), Err(AllocError::NoSpace));
    vb.check().unwrap();
}

/// `max_alloc` above 2^63 would make `next_power_of_two` wrap to 0 (release
/// builds), so that validation accepts it and `map` hands out the same
/// pages twice; a count of 2^32 + 1 must not truncate to 1.
#[test]
fn huge_max_alloc_is_refused_never_overlapping() {
    for max_alloc in [u64::MAX, (1 << 63) + 1, 1 << 32, 1 << 20] {
        let cfg = Config {
            page_size: 4096,
            max_alloc,
            bits: 1024,
        };
        assert_eq!(cfg.validate(), Err(AllocError::Invalid), "{max_alloc:#x}");
        assert_eq!(cfg.order_of(u64::MAX), None, "no order above max_alloc");
        for policy in [Policy::Legacy, Policy::Current] {
            let range = VmapAllocator::new(0, 64 << 20).unwrap();
            assert_eq!(
                VblockAllocator::new(range, cfg, policy, 1).err(),
                Some(AllocError::Invalid)
            );
            let range = VmapAllocator::new(0, 64 << 20).unwrap();
            assert_eq!(
                ConcurrentVblock::new(range, cfg, policy, 1).err(),
                Some(AllocError::Invalid)
            );
        }
    }
}

/// A request of 2^32 + 1 pages is large (range
/// allocator), never truncated to one page from a block.
#[test]
fn page_counts_never_truncate() {
    let mut vb = VblockAllocator::new(range(), SMALL, Policy::Current, 1).unwrap();
    let pages = (1 << 32) + 1;
    assert_eq!(vb.map(0, pages), Err(AllocError::NoSpace));
    assert_eq!(vb.unmap(START, pages), Err(FreeError::NotAllocated));
    assert_eq!(vb.blocks(), 0);
    vb.check().unwrap();
}

/// `live_pages` counts the pages asked for, not the
/// power-of-two slot a block reserves for them.
#[test]
fn live_pages_counts_requested_pages() {
    for policy in [Policy::Legacy, Policy::Current] {
        let mut vb = VblockAllocator::new(range(), Config::KERNEL, policy, 1).unwrap();
        let a = vb.map(0, 17).unwrap();
        assert_eq!(vb.live_pages(), 17, "{policy:?}");
        let b = vb.map(0, 100).unwrap(); // large
        assert_eq!(vb.live_pages(), 117);
        vb.unmap(a, 17).unwrap();
        assert_eq!(vb.live_pages(), 100);
        vb.unmap(b, 100).unwrap();
        assert_eq!(vb.live_pages(), 0);
    }
}

/// `cpus = u32::MAX` would abort allocating the queues: a CPU count above
/// `MAX_CPUS` is refused before anything is allocated.
#[test]
fn absurd_cpu_counts_are_refused_before_allocating() {
    for cpus in [u32::MAX as usize, 1 << 20] {
        let r = VblockAllocator::new(range(), Config::KERNEL, Policy::Current, cpus);
        assert_eq!(r.err(), Some(AllocError::Invalid), "{cpus} cpus");
        let r = ConcurrentVblock::new(range(), Config::KERNEL, Policy::Current, cpus);
        assert_eq!(r.err(), Some(AllocError::Invalid), "{cpus} cpus");
    }
}

/// A clock that moves 1000 at every read: every timed operation, which
/// reads it at least twice, counts 1000 or more (tests running at once
/// only move it further).
fn tick() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static TICKS: AtomicU64 = AtomicU64::new(0);
    TICKS.fetch_add(1000, Ordering::Relaxed) + 1000
}

/// Every event counter, summed over the CPU queues, against the count of
/// calls made here; with a clock that ticks on every read, every time
/// counter moves.
#[test]
fn counters_add_up_over_the_cpus() {
    assert_eq!(
        (Policy::Legacy.name(), Policy::Current.name()),
        ("legacy", "current")
    );
    let mut vb = VblockAllocator::new(range(), SMALL, Policy::Current, 2).unwrap();
    vb.set_clock(Some(tick));
    // On each CPU: one block filled with four maps of 8 pages, and one
    // large map (above max_alloc); then everything unmapped.
    let mut maps = Vec::new();
    for cpu in 0..2 {
        for _ in 0..4 {
            maps.push((vb.map(cpu, 8).unwrap(), 8));
        }
        maps.push((vb.map(cpu, 9).unwrap(), 9));
    }
    for &(a, pages) in &maps {
        vb.unmap(a, pages).unwrap();
    }
    assert!(vb.unmap_aliases(&mut |_, _| {}));
    let c = vb.counters();
    assert_eq!(
        (c.map_calls, c.unmap_calls, c.large_maps, c.large_unmaps),
        (10, 10, 2, 2),
        "{c:?}"
    );
    assert_eq!(
        (c.blocks_created, c.blocks_released, c.flushes),
        (2, 2, 1),
        "{c:?}"
    );
    // Every timed operation reads the clock at least twice, 1000 apart.
    assert!(
        c.map_ns >= 10_000 && c.unmap_ns >= 10_000 && c.create_ns >= 2000 && c.release_ns >= 2000,
        "{c:?}"
    );
    vb.check().unwrap();

    // Large maps alone: their time is in the sum though no CPU's queue
    // timed anything.
    let mut vb = VblockAllocator::new(range(), SMALL, Policy::Current, 2).unwrap();
    vb.set_clock(Some(tick));
    let a = vb.map(0, 9).unwrap();
    vb.unmap(a, 9).unwrap();
    let c = vb.counters();
    assert_eq!(vb.cpu_counters(0).map(|q| q.map_ns), Some(0));
    assert!(c.map_ns >= 1000 && c.unmap_ns >= 1000, "{c:?}");
}

/// The process clock the time counters use under `std` moves forward.
#[test]
fn the_monotonic_clock_advances() {
    let t0 = mmkit::vblock::monotonic_ns();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let t1 = mmkit::vblock::monotonic_ns();
    assert!(t1 >= t0 + 2_000_000, "{t0} -> {t1}");
}

/// Maps of 64 pages or more (the kernel's `VMAP_MAX_ALLOC` is 64): the
/// legacy policy finds an aligned region of whole bitmap words, the lowest
/// one wholly clear.
#[test]
fn legacy_maps_of_whole_words_take_the_lowest_clear_region() {
    let cfg = Config {
        page_size: 4096,
        max_alloc: 64,
        bits: 256,
    };
    let mut vb = VblockAllocator::new(range(), cfg, Policy::Legacy, 1).unwrap();
    let a = vb.map(0, 1).unwrap();
    let b = vb.map(0, 64).unwrap();
    assert_eq!(b - a, 64 * 4096, "the first word holds page 0");
    let c = vb.map(0, 33).unwrap();
    assert_eq!(c - a, 128 * 4096, "a 33-page map takes a 64-page region");
    vb.check().unwrap();
}

/// The shared front end times its maps and unmaps on the CPU's queue.
#[test]
fn the_shared_front_end_times_each_cpu() {
    let mut vb = ConcurrentVblock::new(range(), SMALL, Policy::Current, 2).unwrap();
    vb.set_clock(Some(tick));
    let a = vb.map_on(1, 2).unwrap();
    vb.unmap(a, 2).unwrap();
    let c = vb.cpu_counters(1).unwrap();
    assert!(c.map_ns >= 1000 && c.unmap_ns >= 1000, "{c:?}");
    assert_eq!(vb.cpu_counters(0).unwrap().map_ns, 0);
}

/// `map` uses the calling thread's queue, `current_slot() % cpus`, and
/// threads get slots of their own.
#[test]
fn each_thread_maps_on_its_own_slot() {
    let vb = ConcurrentVblock::new(range(), SMALL, Policy::Current, 3).unwrap();
    let mut slots = Vec::new();
    for _ in 0..3 {
        // One thread at a time: each map is the only change to the counters.
        let (slot, calls) = std::thread::scope(|s| {
            s.spawn(|| {
                let slot = mmkit::vblock::current_slot();
                let before = vb.cpu_counters(slot % 3).unwrap().map_calls;
                vb.map(1).unwrap();
                (slot, vb.cpu_counters(slot % 3).unwrap().map_calls - before)
            })
            .join()
            .unwrap()
        });
        assert_eq!(calls, 1, "slot {slot}: the map ran on another queue");
        slots.push(slot);
    }
    slots.dedup();
    assert_eq!(slots.len(), 3, "threads share a slot: {slots:?}");
    assert_eq!(vb.counters().map_calls, 3);
}
