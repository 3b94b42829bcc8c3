//! Order-0 alloc+free pairs through the per-CPU page lists, against a bare
//! list push+pop: the issue-11 measurement in a form that is repeatable on
//! a busy machine (criterion's `benches/buddy.rs` has the same loops).
//!
//! - `pcp_pairs time [N]`: best of 15 rounds of `N` pairs (default 10^6)
//!   for each loop, interleaved, in ns per pair, with the ratio to the list.
//!   The best round is the one least disturbed by other processes.
//! - `pcp_pairs list|pcp|cz N`: just `N` pairs of one loop, for counting
//!   instructions; the difference between two runs is the loop's own:
//!
//! ```text
//! ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!          --toggle-collect='pcp_pairs::run_*' target/release/examples/pcp_pairs $1 $2 2>&1 \
//!          | grep -o 'Collected : [0-9]*' | grep -o '[0-9]*'; }
//! echo $(( ($(ir pcp 200000) - $(ir pcp 100000)) / 100000 ))   # instructions per pair
//! ```
//!
//! `list` is the bench's baseline (a doubly-linked list threaded through
//! two vectors), `pcp` a `PcpZone` over a zone where every odd frame is
//! free, `cz` a `ConcurrentZone` used by one thread.

use std::hint::black_box;
use std::time::Instant;

use mmkit::buddy::pcp::{ConcurrentZone, PcpConfig, PcpZone};
use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};

const START: u64 = 0x10_0000;
const FRAMES: u64 = 262_144;
#[path = "../benches/common/vec_list.rs"]
mod vec_list;
use vec_list::VecList;

fn zone() -> BuddyAllocator {
    let mut b = BuddyAllocator::new(START, FRAMES, BuddyConfig::default()).expect("valid zone");
    b.add_free_range(START, FRAMES).expect("fresh range");
    b
}

/// Every odd frame free: an order-0 pair neither splits nor merges.
fn fragmented() -> BuddyAllocator {
    let mut b = zone();
    while b.alloc(0, MigrateType::Movable).is_ok() {}
    for pfn in (START..START + FRAMES).skip(1).step_by(2) {
        b.free(pfn, 0).expect("allocated above");
    }
    b
}

#[inline(never)]
fn run_list(l: &mut VecList, n: u64) {
    for _ in 0..n {
        let i = l.pop().expect("non-empty");
        l.push(black_box(i));
    }
}

#[inline(never)]
fn run_pcp(z: &mut PcpZone, n: u64) {
    for _ in 0..n {
        let pfn = z.alloc(0, 0, MigrateType::Movable).expect("free pages");
        z.free(0, black_box(pfn), 0).expect("just allocated");
    }
}

#[inline(never)]
fn run_cz(z: &ConcurrentZone, n: u64) {
    for _ in 0..n {
        let pfn = z.alloc(0, 0, MigrateType::Movable).expect("free pages");
        z.free(0, black_box(pfn), 0).expect("just allocated");
    }
}

/// ns per pair of `n` calls of `f`.
fn per_pair(n: u64, f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("time", String::as_str);
    let n: u64 = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut list = VecList::new(FRAMES as u32);
    let mut pcp = PcpZone::new(fragmented(), PcpConfig::default()).expect("valid config");
    let cz = ConcurrentZone::new(zone(), PcpConfig::default()).expect("valid config");
    // Warm: the lists refill once before anything is counted.
    run_list(&mut list, 1000);
    run_pcp(&mut pcp, 1000);
    run_cz(&cz, 1000);
    match mode {
        "list" => run_list(&mut list, n),
        "pcp" => run_pcp(&mut pcp, n),
        "cz" => run_cz(&cz, n),
        "time" => {
            let mut best = [f64::MAX; 3];
            for _ in 0..15 {
                best[0] = best[0].min(per_pair(n, || run_list(&mut list, n)));
                best[1] = best[1].min(per_pair(n, || run_pcp(&mut pcp, n)));
                best[2] = best[2].min(per_pair(n, || run_cz(&cz, n)));
            }
            let [l, p, c] = best;
            println!("ns per pair, best of 15 rounds of {n}:");
            println!("  list push+pop           {l:6.2}");
            println!(
                "  PcpZone                 {p:6.2}  ({:.2}x the list)",
                p / l
            );
            println!(
                "  ConcurrentZone, 1 thread {c:5.2}  ({:.2}x the list)",
                c / l
            );
        }
        _ => {
            eprintln!("usage: pcp_pairs [time|list|pcp|cz] [N]");
            std::process::exit(2);
        }
    }
}
