//! Per-CPU state: an id at GS:0, its own GDT and TSS (a double-fault stack
//! on IST 1), and the online count.

use alloc::boxed::Box;
use core::arch::asm;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::arch::wrmsr;

/// Most CPUs the kernel starts.
pub const MAX_CPUS: usize = 64;

const GS_BASE: u32 = 0xc000_0101;

/// One CPU's own data; `id` must stay the first field (read at GS:0).
#[repr(C, align(64))]
struct PerCpu {
    id: u64,
    gdt: [u64; 5],
    tss: [u32; 26],
    df_stack: [u8; 8192],
}

static ONLINE: AtomicUsize = AtomicUsize::new(0);

/// CPUs that have finished bring-up and take interrupts.
pub fn online() -> usize {
    ONLINE.load(Ordering::Acquire)
}

/// Counts this CPU online (after `sti`).
pub fn set_online() {
    ONLINE.fetch_add(1, Ordering::AcqRel);
}

/// Sets up this CPU's id, GDT and TSS, and loads them.
pub fn install(id: usize) {
    let mut p = Box::new(PerCpu {
        id: id as u64,
        gdt: [0; 5],
        tss: [0; 26],
        df_stack: [0; 8192],
    });
    let ist1 = p.df_stack.as_ptr() as u64 + 8192;
    p.tss[9] = ist1 as u32;
    p.tss[10] = (ist1 >> 32) as u32;
    p.tss[25] = 104 << 16; // no I/O bitmap
    let tss = p.tss.as_ptr() as u64;
    p.gdt[1] = 0x00af_9a00_0000_ffff;
    p.gdt[2] = 0x00cf_9200_0000_ffff;
    p.gdt[3] = 103 | (tss & 0xff_ffff) << 16 | 0x89 << 40 | ((tss >> 24) & 0xff) << 56;
    p.gdt[4] = tss >> 32;
    let p = Box::leak(p);
    #[repr(C, packed)]
    struct Ptr {
        limit: u16,
        base: u64,
    }
    let gp = Ptr {
        limit: 39,
        base: p.gdt.as_ptr() as u64,
    };
    // SAFETY: the GDT (leaked, so it lives forever) keeps the selectors in
    // use (0x08 code, 0x10 data) with the same meaning; 0x18 is an
    // available 64-bit TSS.
    unsafe {
        asm!(
            "lgdt [{gp}]",
            "push 0x08",
            "lea {t}, [rip + 2f]",
            "push {t}",
            "retfq",
            "2:",
            "mov ax, 0x18",
            "ltr ax",
            gp = in(reg) &gp,
            t = out(reg) _,
            out("ax") _,
        )
    };
    wrmsr(GS_BASE, p as *const PerCpu as u64);
}
