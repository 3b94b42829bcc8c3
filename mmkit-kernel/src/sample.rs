//! A sampling profile of the code a step runs (the command line's
//! `sample=N`): the local APIC timer interrupts the CPU every N ns, and
//! each interrupt counts the instruction it stopped at. Under QEMU's
//! instruction counting a guest ns is one instruction, so the counts are
//! where the instructions go, the same on every boot. `ROW sample` lines
//! give the counts by address; `scripts/linux/samples.py` names them with
//! the kernel's symbols and sums them per function or part of the system.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::apic;
use crate::trap::SAMPLE_VECTOR;

/// Addresses kept: more distinct ones than a step's hot code has.
const SLOTS: usize = 1 << 14;
/// Slots probed past an address's home before a sample is dropped.
const PROBES: usize = 64;

static RIPS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static HITS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Counts one sample at `rip` (the timer's interrupt handler).
pub fn record(rip: u64) {
    let home = (rip.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 50) as usize;
    for i in 0..PROBES {
        let slot = (home + i) % SLOTS;
        let held = match RIPS[slot].compare_exchange(0, rip, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => rip,
            Err(v) => v,
        };
        if held == rip {
            HITS[slot].fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    DROPPED.fetch_add(1, Ordering::Relaxed);
}

/// Starts sampling this CPU every `interval` ns; nothing when 0.
pub fn start(interval: u64) {
    if interval != 0 {
        apic::timer_periodic(SAMPLE_VECTOR, interval.min(u64::from(u32::MAX)) as u32);
    }
}

/// Stops sampling this CPU (nothing when `interval` is 0: it was off).
pub fn stop(interval: u64) {
    if interval != 0 {
        apic::timer_stop();
    }
}

/// Prints one `ROW sample` line per address counted since the last
/// report, most counted first, then a total, for `what`; clears the
/// counts. Nothing when `interval` is 0 (sampling was off).
pub fn report(what: &str, interval: u64) {
    if interval == 0 {
        return;
    }
    let mut hits: alloc::vec::Vec<(u64, u64)> = (0..SLOTS)
        .map(|i| {
            (
                HITS[i].swap(0, Ordering::Relaxed),
                RIPS[i].swap(0, Ordering::Relaxed),
            )
        })
        .filter(|&(n, _)| n != 0)
        .collect();
    hits.sort_unstable_by(|a, b| b.cmp(a));
    let total: u64 = hits.iter().map(|h| h.0).sum();
    for (n, rip) in &hits {
        crate::println!("ROW sample {what} rip={rip:#x} n={n}");
    }
    crate::println!(
        "ROW sample {what} total={total} interval_ns={interval} addresses={} dropped={}",
        hits.len(),
        DROPPED.swap(0, Ordering::Relaxed)
    );
}
