//! Order-0 alloc+free pair of the buddy allocator against a bare
//! doubly-linked-list push+pop (the goal: under 2x).
//!
//! - `list_push_pop`: a Vec-indexed doubly-linked list (head, next, prev),
//!   one pop from the head and one push at the head: the floor any
//!   free-list allocator pays.
//! - `buddy_order0_pair/<placement>`: a 1 GiB zone (262144 frames) where
//!   every odd frame is free, so an order-0 request takes an order-0 block
//!   and its free finds the buddy busy (no split, no merge): the common case
//!   in a full zone.
//! - `buddy_order0_split_merge/<placement>`: an empty zone, so each pair
//!   splits an order-10 block down and merges it back up (the worst case).
//! - `pcp_order0_pair`: the same pair through the per-CPU lists of a
//!   `PcpZone` over the fragmented zone (the goal: under 2x the list).
//! - `pcp_threads/<n>`: `n` threads, each on its own CPU of a
//!   `ConcurrentZone`, doing order-0 pairs; the time is per pair per thread
//!   (the goal: 2 threads under 1.2x of 1). Each round allocates 64
//!   pages, then frees them. `pcp_threads/2-separate-zones` is the control:
//!   two threads with a zone each, sharing nothing.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use mmkit::buddy::pcp::{ConcurrentZone, PcpConfig, PcpZone};
use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType, Placement};

const FRAMES: u64 = 262_144;
#[path = "common/vec_list.rs"]
mod vec_list;
use vec_list::VecList;

fn zone(placement: Placement) -> BuddyAllocator {
    let cfg = BuddyConfig {
        placement,
        ..BuddyConfig::default()
    };
    let mut b = BuddyAllocator::new(0x100000, FRAMES, cfg).expect("valid zone");
    b.add_free_range(0x100000, FRAMES).expect("fresh range");
    b
}

fn fragmented(placement: Placement) -> BuddyAllocator {
    let mut b = zone(placement);
    while b.alloc(0, MigrateType::Movable).is_ok() {}
    for pfn in (0x100000..0x100000 + FRAMES).skip(1).step_by(2) {
        b.free(pfn, 0).expect("allocated above");
    }
    b
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("order0");
    let mut list = VecList::new(FRAMES as u32);
    g.bench_function("list_push_pop", |bch| {
        bch.iter(|| {
            let i = list.pop().expect("non-empty");
            list.push(black_box(i));
        })
    });
    for (name, p) in [
        ("head", Placement::Head),
        ("tail", Placement::TailIfMergeLikely),
    ] {
        let mut b = fragmented(p);
        g.bench_function(format!("buddy_order0_pair/{name}"), |bch| {
            bch.iter(|| {
                let pfn = b.alloc(0, MigrateType::Movable).expect("free pages");
                b.free(black_box(pfn), 0).expect("just allocated");
            })
        });
        let mut b = zone(p);
        g.bench_function(format!("buddy_order0_split_merge/{name}"), |bch| {
            bch.iter(|| {
                let pfn = b.alloc(0, MigrateType::Movable).expect("free pages");
                b.free(black_box(pfn), 0).expect("just allocated");
            })
        });
    }
    let mut z = PcpZone::new(
        fragmented(Placement::TailIfMergeLikely),
        PcpConfig::default(),
    )
    .expect("valid config");
    g.bench_function("pcp_order0_pair", |bch| {
        bch.iter(|| {
            let pfn = z.alloc(0, 0, MigrateType::Movable).expect("free pages");
            z.free(0, black_box(pfn), 0).expect("just allocated");
        })
    });
    g.finish();

    let mut g = c.benchmark_group("pcp_threads");
    let new_zone = || {
        ConcurrentZone::new(zone(Placement::TailIfMergeLikely), PcpConfig::default())
            .expect("valid config")
    };
    for n in [1usize, 2] {
        let z = [new_zone()];
        g.bench_function(format!("{n}"), |bch| {
            bch.iter_custom(|iters| threads_pairs(&z, n, iters))
        });
    }
    // The control: two threads that share nothing (a zone each). Its ratio
    // to `1` is what this machine allows; `2` above that is the zone's cost.
    let zs = [new_zone(), new_zone()];
    g.bench_function("2-separate-zones", |bch| {
        bch.iter_custom(|iters| threads_pairs(&zs, 2, iters))
    });
    g.finish();
}

/// Wall time of `n` threads each doing `iters` order-0 pairs on its own CPU
/// (thread `i` uses CPU `i` of `zones[i % zones.len()]`), in rounds of 64
/// allocations then 64 frees; criterion reports the time per pair per
/// thread. Once warm, a CPU's lists hold 62 to 126 pages, so the rounds
/// touch only the CPU's own lists (no refill or drain).
fn threads_pairs(zones: &[ConcurrentZone], n: usize, iters: u64) -> Duration {
    let barrier = Barrier::new(n + 1);
    std::thread::scope(|s| {
        for cpu in 0..n {
            let barrier = &barrier;
            let z = &zones[cpu % zones.len()];
            s.spawn(move || {
                let mut held = Vec::with_capacity(64);
                barrier.wait();
                let mut left = iters;
                while left > 0 {
                    let k = left.min(64);
                    for _ in 0..k {
                        held.push(z.alloc(cpu, 0, MigrateType::Movable).expect("free pages"));
                    }
                    for p in held.drain(..) {
                        z.free(cpu, black_box(p), 0).expect("just allocated");
                    }
                    left -= k;
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let t = Instant::now();
        barrier.wait();
        t.elapsed()
    })
}

criterion_group!(benches, bench);
criterion_main!(benches);
