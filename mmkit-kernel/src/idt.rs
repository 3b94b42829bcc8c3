//! Interrupt entry: one assembly stub per vector pushes a uniform
//! [`TrapFrame`] and calls [`trap`] (the vectors and the frame are in
//! [`crate::trap`]); the IDT (shared by every CPU) points
//! at the stubs. Exceptions 0-31, the TLB-shootdown IPI, the wake-up IPI,
//! the sampling timer ([`crate::sample`]) and the APIC's spurious vector.

use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicU64, Ordering};

use crate::trap::{TrapFrame, SAMPLE_VECTOR, SPURIOUS_VECTOR, TLB_VECTOR, WAKE_VECTOR};
use crate::{apic, fault, tlb};

global_asm!(
    r#"
    .text
isr_0:
    push $0
    push $0
    jmp isr_common
isr_1:
    push $0
    push $1
    jmp isr_common
isr_2:
    push $0
    push $2
    jmp isr_common
isr_3:
    push $0
    push $3
    jmp isr_common
isr_4:
    push $0
    push $4
    jmp isr_common
isr_5:
    push $0
    push $5
    jmp isr_common
isr_6:
    push $0
    push $6
    jmp isr_common
isr_7:
    push $0
    push $7
    jmp isr_common
isr_8:
    push $8
    jmp isr_common
isr_9:
    push $0
    push $9
    jmp isr_common
isr_10:
    push $10
    jmp isr_common
isr_11:
    push $11
    jmp isr_common
isr_12:
    push $12
    jmp isr_common
isr_13:
    push $13
    jmp isr_common
isr_14:
    push $14
    jmp isr_common
isr_15:
    push $0
    push $15
    jmp isr_common
isr_16:
    push $0
    push $16
    jmp isr_common
isr_17:
    push $17
    jmp isr_common
isr_18:
    push $0
    push $18
    jmp isr_common
isr_19:
    push $0
    push $19
    jmp isr_common
isr_20:
    push $0
    push $20
    jmp isr_common
isr_21:
    push $21
    jmp isr_common
isr_22:
    push $0
    push $22
    jmp isr_common
isr_23:
    push $0
    push $23
    jmp isr_common
isr_24:
    push $0
    push $24
    jmp isr_common
isr_25:
    push $0
    push $25
    jmp isr_common
isr_26:
    push $0
    push $26
    jmp isr_common
isr_27:
    push $0
    push $27
    jmp isr_common
isr_28:
    push $0
    push $28
    jmp isr_common
isr_29:
    push $29
    jmp isr_common
isr_30:
    push $30
    jmp isr_common
isr_31:
    push $0
    push $31
    jmp isr_common
isr_240:
    push $0
    push $240
    jmp isr_common
isr_241:
    push $0
    push $241
    jmp isr_common
isr_242:
    push $0
    push $242
    jmp isr_common
isr_255:
    push $0
    push $255
    jmp isr_common
isr_common:
    push %rax
    push %rbx
    push %rcx
    push %rdx
    push %rsi
    push %rdi
    push %rbp
    push %r8
    push %r9
    push %r10
    push %r11
    push %r12
    push %r13
    push %r14
    push %r15
    mov %rsp, %rdi
    cld
    call trap
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rbp
    pop %rdi
    pop %rsi
    pop %rdx
    pop %rcx
    pop %rbx
    pop %rax
    add $16, %rsp
    iretq

    .section .rodata
    .p2align 3
    .global isr_table
isr_table:
    .quad isr_0
    .quad isr_1
    .quad isr_2
    .quad isr_3
    .quad isr_4
    .quad isr_5
    .quad isr_6
    .quad isr_7
    .quad isr_8
    .quad isr_9
    .quad isr_10
    .quad isr_11
    .quad isr_12
    .quad isr_13
    .quad isr_14
    .quad isr_15
    .quad isr_16
    .quad isr_17
    .quad isr_18
    .quad isr_19
    .quad isr_20
    .quad isr_21
    .quad isr_22
    .quad isr_23
    .quad isr_24
    .quad isr_25
    .quad isr_26
    .quad isr_27
    .quad isr_28
    .quad isr_29
    .quad isr_30
    .quad isr_31
    .quad isr_240
    .quad isr_241
    .quad isr_242
    .quad isr_255
    .text
"#,
    options(att_syntax)
);

/// Vectors with a stub, in `isr_table` order.
const VECTORS: [u8; 36] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
    26, 27, 28, 29, 30, 31, 240, 241, 242, 255,
];

extern "C" {
    static isr_table: [u64; 36];
}

/// The IDT: 256 gates of two words each.
static IDT: [AtomicU64; 512] = [const { AtomicU64::new(0) }; 512];

/// Fills the IDT (boot CPU, once). The double fault runs on IST 1.
pub fn init() {
    for (i, &v) in VECTORS.iter().enumerate() {
        // SAFETY: isr_table is an initialised array in .rodata.
        let addr = unsafe { isr_table[i] };
        let ist = u64::from(v == 8);
        let lo = (addr & 0xffff)
            | (0x08 << 16)
            | (ist << 32)
            | (0x8e << 40)
            | ((addr >> 16) & 0xffff) << 48;
        IDT[2 * v as usize].store(lo, Ordering::Relaxed);
        IDT[2 * v as usize + 1].store(addr >> 32, Ordering::Relaxed);
    }
}

/// Loads the IDT on this CPU.
pub fn load() {
    #[repr(C, packed)]
    struct Ptr {
        limit: u16,
        base: u64,
    }
    let p = Ptr {
        limit: 4095,
        base: IDT.as_ptr() as u64,
    };
    // SAFETY: IDT is a static table of valid gates (filled by init before
    // any CPU loads it); lidt only reads the pointer.
    unsafe { asm!("lidt [{}]", in(reg) &p, options(readonly, nostack, preserves_flags)) };
}

/// The common interrupt handler, called by the stubs.
#[no_mangle]
extern "C" fn trap(f: &mut TrapFrame) {
    match f.vector as u8 {
        TLB_VECTOR => {
            tlb::on_ipi();
            apic::eoi();
        }
        WAKE_VECTOR => apic::eoi(),
        SAMPLE_VECTOR => {
            crate::sample::record(f.rip);
            apic::eoi();
        }
        SPURIOUS_VECTOR => {}
        14 => fault::page_fault(f),
        _ => fault::fatal(f),
    }
}
