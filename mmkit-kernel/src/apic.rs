//! The local APIC in xAPIC mode (MMIO at 0xfee00000, identity mapped by
//! the boot tables): enable, EOI, IPIs, INIT-SIPI-SIPI.

use core::ptr::{read_volatile, write_volatile};

use crate::trap::SPURIOUS_VECTOR;

const BASE: u64 = 0xfee0_0000;
const TPR: u64 = 0x80;
const EOI: u64 = 0xb0;
const SVR: u64 = 0xf0;
const ICR_LO: u64 = 0x300;
const ICR_HI: u64 = 0x310;
const LVT_TIMER: u64 = 0x320;
const TIMER_INITIAL: u64 = 0x380;
const TIMER_DIVIDE: u64 = 0x3e0;

fn read(reg: u64) -> u32 {
    // SAFETY: BASE + reg is a local APIC register, mapped uncached-enough
    // for QEMU's APIC; a 32-bit aligned read of it has no other effect.
    unsafe { read_volatile((BASE + reg) as *const u32) }
}

fn write(reg: u64, v: u32) {
    // SAFETY: as read; writing the registers used here changes only the
    // APIC's state (EOI, IPIs, enable).
    unsafe { write_volatile((BASE + reg) as *mut u32, v) }
}

/// Enables this CPU's local APIC and accepts every priority.
pub fn init_local() {
    write(TPR, 0);
    write(SVR, 0x100 | u32::from(SPURIOUS_VECTOR));
}

/// Starts this CPU's timer: `vector` every `count` bus cycles (QEMU's
/// APIC bus runs at 1 GHz), periodic, the bus clock undivided.
pub fn timer_periodic(vector: u8, count: u32) {
    write(TIMER_DIVIDE, 0b1011);
    write(LVT_TIMER, (1 << 17) | u32::from(vector));
    write(TIMER_INITIAL, count);
}

/// Stops this CPU's timer (masked, count 0).
pub fn timer_stop() {
    write(LVT_TIMER, 1 << 16);
    write(TIMER_INITIAL, 0);
}

/// Acknowledges the interrupt in service.
pub fn eoi() {
    write(EOI, 0);
}

/// One IPI, interrupts off from the destination's write to the send: an
/// interrupt handler that sends (the shootdown's wake-up) must not change
/// the destination register between the two writes.
fn send(dest: u32, lo: u32) {
    crate::arch::without_interrupts(|| {
        write(ICR_HI, dest << 24);
        write(ICR_LO, lo);
        while read(ICR_LO) & (1 << 12) != 0 {
            core::hint::spin_loop();
        }
    })
}

/// A fixed IPI of `vector` to every CPU but this one.
pub fn send_all_but_self(vector: u8) {
    send(0, (0b11 << 18) | u32::from(vector));
}

/// A fixed IPI of `vector` to the CPU whose APIC id is `apic`.
pub fn send_to(apic: u32, vector: u8) {
    send(apic, u32::from(vector));
}

/// INIT (assert), then the de-assert that old APICs need.
pub fn send_init(apic: u32) {
    send(apic, 0x4500);
    send(apic, 0x8500);
}

/// A start-up IPI: the AP runs real-mode code at `page << 12`.
pub fn send_sipi(apic: u32, page: u8) {
    send(apic, 0x4600 | u32::from(page));
}
