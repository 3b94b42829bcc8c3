//! The shootdown's round trip, measured: CPU 0 sends an empty shootdown
//! to one other CPU, or to every other CPU, and times it to the last
//! acknowledgement (TSC), with the targets idle (in `hlt`, as between
//! the performance-mode tests) and busy (spinning with interrupts on, as
//! in stress mode); beside it, what a whole flush costs (the local
//! `invlpg`s or CR3 reload, the IPIs and the wait), for 1 page and for 64
//! (past the single-page ceiling: a CR3 reload everywhere). One `ROW ipi`
//! line per case: the median of up to [`ROUNDS`] rounds after a tenth
//! untimed, fewer when a case passes [`BUDGET_MS`] (under emulation on a
//! loaded host a busy target's thread may wait for a host CPU for
//! milliseconds).

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::paging::VMALLOC_START;
use crate::scale::Scale;
use crate::{arch, percpu, println, smp, time, tlb};

/// Timed rounds per case, at most.
pub const ROUNDS: usize = 200;
/// Time one case may take, at most.
pub const BUDGET_MS: u64 = 250;

/// Median, least and most of `ticks`, in TSC ticks.
fn summary(mut ticks: Vec<u64>) -> (u64, u64, u64) {
    ticks.sort_unstable();
    let mid = ticks.get(ticks.len() / 2).copied().unwrap_or(0);
    let lo = ticks.first().copied().unwrap_or(0);
    let hi = ticks.last().copied().unwrap_or(0);
    (mid, lo, hi)
}

/// Up to `ROUNDS` timings of `once` after a tenth untimed, within
/// `BUDGET_MS`; `None` when it cannot run.
fn timed(once: &dyn Fn() -> Option<u64>) -> Option<Vec<u64>> {
    for _ in 0..ROUNDS / 10 {
        once()?;
    }
    let end = arch::rdtsc() + BUDGET_MS * time::tsc_per_ms();
    let mut out = Vec::with_capacity(ROUNDS);
    while out.len() < ROUNDS && (out.is_empty() || arch::rdtsc() < end) {
        out.push(once()?);
    }
    Some(out)
}

fn print(what: &str, state: &str, ticks: Vec<u64>) {
    let rounds = ticks.len();
    let (mid, lo, hi) = summary(ticks);
    println!(
        "ROW ipi cpus={} what={what} targets={state} rounds={rounds} median_ns={} min_ns={} max_ns={} median_cycles={mid}",
        percpu::online(),
        time::ns(mid),
        time::ns(lo),
        time::ns(hi),
    );
}

/// Every case with the other CPUs in `state` (CPU 0 measures).
fn cases(state: &str) {
    let cases: [(&str, &dyn Fn() -> Option<u64>); 4] = [
        ("round_trip_one", &|| tlb::ping(Some(1))),
        ("round_trip_all", &|| tlb::ping(None)),
        ("flush_1_page", &|| Some(flush(1))),
        ("flush_64_pages", &|| Some(flush(64))),
    ];
    for (what, once) in cases {
        if let Some(t) = timed(once) {
            print(what, state, t);
        }
    }
}

/// TSC ticks of one flush of `pages` pages of the vmalloc area's first
/// 16 GiB, which no layer uses (nothing there is mapped).
fn flush(pages: u64) -> u64 {
    let t0 = arch::rdtsc();
    tlb::flush_range(VMALLOC_START, VMALLOC_START + pages * 4096);
    arch::rdtsc() - t0
}

/// The round trips and flush costs, with the other CPUs idle and then
/// busy. At one CPU there is no other CPU to send to: said so.
pub fn run(_s: Scale) -> Result<(), String> {
    let cpus = percpu::online();
    if cpus < 2 {
        println!("ROW ipi cpus=1 what=none targets=none (no other CPU)");
        return Ok(());
    }
    cases("idle");
    let done = AtomicBool::new(false);
    smp::run_on(cpus, |cpu| {
        if cpu == 0 {
            cases("busy");
            done.store(true, Ordering::Release);
        } else {
            while !done.load(Ordering::Acquire) {
                arch::pause();
            }
        }
    });
    Ok(())
}
