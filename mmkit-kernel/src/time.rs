//! Time from the TSC, calibrated once against the PIT (channel 2, 10 ms).

use core::sync::atomic::{AtomicU64, Ordering};

use crate::arch::{inb, outb, rdtsc};

static TSC_PER_MS: AtomicU64 = AtomicU64::new(1_000_000);

/// Measures TSC ticks per millisecond: the fewest of five 10 ms PIT
/// intervals (a slow first pass, under emulation, only adds ticks).
pub fn calibrate() {
    let best = (0..5).map(|_| once()).min().unwrap_or(1);
    TSC_PER_MS.store(best.max(1), Ordering::Relaxed);
}

fn once() -> u64 {
    const TICKS: u16 = 11932; // 10 ms at 1.193182 MHz
    let gate = inb(0x61);
    outb(0x61, (gate & !0x02) & !0x01);
    outb(0x43, 0b1011_0000); // channel 2, lobyte/hibyte, mode 0
    outb(0x42, TICKS as u8);
    outb(0x42, (TICKS >> 8) as u8);
    let g = inb(0x61);
    outb(0x61, g | 0x01); // gate high: counting starts
    let t0 = rdtsc();
    while inb(0x61) & 0x20 == 0 {
        core::hint::spin_loop();
    }
    let t1 = rdtsc();
    outb(0x61, gate);
    (t1 - t0) / 10
}

/// TSC ticks per millisecond.
pub fn tsc_per_ms() -> u64 {
    TSC_PER_MS.load(Ordering::Relaxed)
}

/// Nanoseconds in `ticks` TSC ticks.
pub fn ns(ticks: u64) -> u64 {
    (u128::from(ticks) * 1_000_000 / u128::from(tsc_per_ms())) as u64
}

/// Spins for `us` microseconds.
pub fn delay_us(us: u64) {
    let end = rdtsc() + us * tsc_per_ms() / 1000;
    while rdtsc() < end {
        core::hint::spin_loop();
    }
}
