//! Buddy order-0 pages through the per-CPU lists, every CPU at once:
//! batches of 64 allocations then 64 frees, each CPU's lists behind their
//! own lock.

use alloc::format;
use alloc::string::String;

use crate::scale::Scale;
use crate::{arch, percpu, phys, println, smp, time};

/// Frames held per batch.
const BATCH: usize = 64;

/// One CPU's loop: (ticks, failed allocations).
fn run_loop(pairs: u64) -> (u64, u64) {
    let cpu = arch::cpu_id();
    let mut held = [None; BATCH];
    let mut failed = 0;
    let t0 = arch::rdtsc();
    for _ in 0..pairs / BATCH as u64 {
        for h in held.iter_mut() {
            *h = phys::alloc(cpu, 0, false);
            failed += u64::from(h.is_none());
        }
        for p in held.iter_mut().filter_map(Option::take) {
            phys::free(cpu, p, 0);
        }
    }
    (arch::rdtsc() - t0, failed)
}

/// Runs the loop on every online CPU; one `ROW buddy_pcp` line.
pub fn run(s: Scale) -> Result<(), String> {
    let cpus = percpu::online();
    let pairs = s.buddy_pairs;
    let before: u64 = (0..cpus).map(|c| phys::stats(c).refills).sum();
    let loops = smp::run_on(cpus, |_| run_loop(pairs));
    let refills: u64 = (0..cpus).map(|c| phys::stats(c).refills).sum::<u64>() - before;
    let ticks: u64 = loops.iter().map(|l| l.0).sum();
    let failed: u64 = loops.iter().map(|l| l.1).sum();
    let done = pairs / BATCH as u64 * BATCH as u64 * cpus as u64;
    println!(
        "ROW buddy_pcp cpus={cpus} pairs={done} ns_per_pair={} refills={refills} failed={failed}",
        time::ns(ticks) / done.max(1),
    );
    phys::drain_all();
    match failed {
        0 => Ok(()),
        n => Err(format!("buddy_pcp: {n} allocations failed")),
    }
}
