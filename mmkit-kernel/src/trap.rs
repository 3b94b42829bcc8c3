//! The interrupt vectors the kernel uses and the frame its entry stubs
//! push: the words the interrupt table, the APIC, the shootdown and the fault
//! handler share, in a module that imports none of them.

/// The TLB-shootdown IPI.
pub const TLB_VECTOR: u8 = 0xf0;
/// The wake-up IPI (a CPU idling in `hlt` has work).
pub const WAKE_VECTOR: u8 = 0xf1;
/// The local APIC timer's sampling interrupt (the `sample=` word).
pub const SAMPLE_VECTOR: u8 = 0xf2;
/// The local APIC's spurious vector.
pub const SPURIOUS_VECTOR: u8 = 0xff;

/// Registers as the stubs leave them on the stack.
#[repr(C)]
#[derive(Debug)]
#[allow(missing_docs)]
pub struct TrapFrame {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rbp: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub rbx: u64,
    pub rax: u64,
    pub vector: u64,
    pub error: u64,
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}
