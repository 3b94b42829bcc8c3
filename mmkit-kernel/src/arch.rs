//! The instructions the kernel needs, each behind a small safe function.
//! The unsafe blocks are here and in the modules that own a hardware
//! structure (page tables, the local APIC, the IDT).

use core::arch::asm;

/// Writes a byte to an I/O port.
pub fn outb(port: u16, v: u8) {
    // SAFETY: the ports used (serial, PIC, PIT, debug exit, fw_cfg) have no
    // effect on memory safety.
    unsafe {
        asm!("out dx, al", in("dx") port, in("al") v, options(nomem, nostack, preserves_flags))
    };
}

/// Writes a 16-bit word to an I/O port.
pub fn outw(port: u16, v: u16) {
    // SAFETY: as outb.
    unsafe {
        asm!("out dx, ax", in("dx") port, in("ax") v, options(nomem, nostack, preserves_flags))
    };
}

/// Writes a 32-bit word to an I/O port.
pub fn outl(port: u16, v: u32) {
    // SAFETY: as outb.
    unsafe {
        asm!("out dx, eax", in("dx") port, in("eax") v, options(nomem, nostack, preserves_flags))
    };
}

/// Reads a byte from an I/O port.
pub fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: as outb; reading these ports has no effect on memory.
    unsafe {
        asm!("in al, dx", in("dx") port, out("al") v, options(nomem, nostack, preserves_flags))
    };
    v
}

/// Time-stamp counter, ordered after earlier loads (`lfence; rdtsc`).
#[inline]
pub fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: lfence and rdtsc only read the counter.
    unsafe {
        asm!("lfence", "rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags))
    };
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Writes a model-specific register.
pub fn wrmsr(msr: u32, v: u64) {
    // SAFETY: callers write only GS base, which the kernel owns per CPU.
    unsafe {
        asm!("wrmsr", in("ecx") msr, in("eax") v as u32, in("edx") (v >> 32) as u32, options(nostack, preserves_flags))
    };
}

/// The faulting address of the last page fault.
pub fn cr2() -> u64 {
    let v: u64;
    // SAFETY: reads a control register.
    unsafe { asm!("mov {}, cr2", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Reloads CR3: drops every non-global TLB entry of this CPU.
pub fn flush_tlb_local() {
    // SAFETY: writes back the same top-level table; only the TLB changes.
    unsafe { asm!("mov {0}, cr3", "mov cr3, {0}", out(reg) _, options(nostack, preserves_flags)) };
}

/// Drops this CPU's TLB entry of the page holding `va`.
#[inline]
pub fn invlpg(va: u64) {
    // SAFETY: invalidating a translation never breaks memory safety.
    unsafe { asm!("invlpg [{}]", in(reg) va, options(nostack, preserves_flags)) };
}

/// Enables interrupts.
pub fn sti() {
    // SAFETY: the IDT and local APIC are set up before any CPU calls this.
    unsafe { asm!("sti", options(nomem, nostack)) };
}

/// Waits for the next interrupt.
pub fn hlt() {
    // SAFETY: halts until an interrupt.
    unsafe { asm!("hlt", options(nomem, nostack)) };
}

/// A spin-wait hint.
#[inline]
pub fn pause() {
    core::hint::spin_loop();
}

/// CPU number of the caller (the per-CPU word at GS:0, set at bring-up).
#[inline]
pub fn cpu_id() -> usize {
    let v: u64;
    // SAFETY: GS base points at this CPU's `PerCpu`, whose first word is
    // its id (set by `percpu::install` before any caller runs).
    unsafe { asm!("mov {}, gs:[0]", out(reg) v, options(nostack, preserves_flags, readonly)) };
    v as usize
}

/// Ends QEMU through the `isa-debug-exit` device at port 0xf4: QEMU exits
/// with status `2 * code + 1`.
pub fn qemu_exit(code: u32) -> ! {
    outl(0xf4, code);
    loop {
        hlt();
    }
}

/// Runs `f` with interrupts off (they stay off if `f` ends in
/// [`sti_hlt`], which turns them back on).
pub fn cli_then(f: impl FnOnce()) {
    // SAFETY: masking interrupts on this CPU only delays them.
    unsafe { asm!("cli", options(nomem, nostack)) };
    f();
    sti();
}

/// Whether interrupts are on on this CPU (`IF` in RFLAGS).
pub fn interrupts_on() -> bool {
    let flags: u64;
    // SAFETY: reads RFLAGS through the stack; nothing else changes.
    unsafe { asm!("pushfq", "pop {}", out(reg) flags, options(preserves_flags)) };
    flags & (1 << 9) != 0
}

/// Runs `f` with interrupts off, then puts them back as they were.
pub fn without_interrupts<T>(f: impl FnOnce() -> T) -> T {
    let on = interrupts_on();
    // SAFETY: masking interrupts on this CPU only delays them.
    unsafe { asm!("cli", options(nomem, nostack)) };
    let r = f();
    if on {
        sti();
    }
    r
}

/// `sti; hlt`: enables interrupts and halts, with no window between them
/// for an interrupt to be taken and missed.
pub fn sti_hlt() {
    // SAFETY: as sti and hlt.
    unsafe { asm!("sti", "hlt", options(nomem, nostack)) };
}
