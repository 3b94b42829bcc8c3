//! The PVH entry: QEMU's `-kernel` loads the ELF, reads the Xen note of
//! type 18 (`XEN_ELFNOTE_PHYS32_ENTRY`) and starts the boot CPU at its
//! address in 32-bit protected mode, paging off, `%ebx` = the physical
//! address of `hvm_start_info`. The 32-bit stage builds an identity map of
//! 0-4 GiB in 2 MiB pages (RAM, the kernel and the local APIC), enters long
//! mode and calls [`crate::kmain`]. Application processors come through the
//! real-mode trampoline below, copied to [`TRAMPOLINE`], and share the same
//! tables and GDT until they load their own.

use core::arch::global_asm;
use core::sync::atomic::{AtomicU64, Ordering};

/// Physical address the AP trampoline runs from (SIPI vector 0x08).
pub const TRAMPOLINE: u64 = 0x8000;

global_asm!(
    r#"
    .section .note.Xen, "a", @note
    .p2align 2
    .long 4
    .long 8
    .long 18
    .asciz "Xen"
    .p2align 2
    .quad _start32
    .p2align 2

    .section .boot_bss, "aw", @nobits
    .p2align 12
    .global boot_pml4
boot_pml4: .skip 4096
boot_pdpt: .skip 4096
boot_pd:   .skip 4 * 4096
    .p2align 4
boot_stack: .skip 65536
boot_stack_top:

    .section .rodata
    .p2align 3
    .global gdt64
gdt64:
    .quad 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
gdt64_end:
    .global gdt64_ptr
gdt64_ptr:
    .word gdt64_end - gdt64 - 1
    .quad gdt64

    .section .text.boot, "ax"
    .code32
    .global _start32
_start32:
    cli
    cld
    mov %ebx, %esi
    mov $boot_pml4, %edi
    mov $(6 * 1024), %ecx
    xor %eax, %eax
    rep stosl
    mov $boot_pdpt, %eax
    or $3, %eax
    mov %eax, boot_pml4
    mov $boot_pd, %eax
    or $3, %eax
    mov $boot_pdpt, %edi
    mov $4, %ecx
1:  mov %eax, (%edi)
    add $4096, %eax
    add $8, %edi
    loop 1b
    mov $boot_pd, %edi
    mov $0x83, %eax
    mov $2048, %ecx
2:  mov %eax, (%edi)
    add $0x200000, %eax
    add $8, %edi
    loop 2b
    call enter_long_mode32
    lgdt gdt64_ptr
    ljmp $0x08, $start64

    /* CR3 = boot_pml4, PAE, EFER.LME|NXE, then paging on with caches on. */
enter_long_mode32:
    mov $boot_pml4, %eax
    mov %eax, %cr3
    mov %cr4, %eax
    or $0x20, %eax
    mov %eax, %cr4
    mov $0xC0000080, %ecx
    rdmsr
    or $0x900, %eax
    wrmsr
    mov %cr0, %eax
    and $0x9fffffff, %eax
    or $0x80010001, %eax
    mov %eax, %cr0
    ret

    .code64
start64:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %ax, %ax
    mov %ax, %fs
    mov %ax, %gs
    lea boot_stack_top(%rip), %rsp
    lea bss_start(%rip), %rdi
    lea bss_end(%rip), %rcx
    sub %rdi, %rcx
    xor %eax, %eax
    rep stosb
    mov %esi, %edi
    call kmain
3:  hlt
    jmp 3b

    .code64
ap_start64:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %ax, %ax
    mov %ax, %fs
    mov %ax, %gs
    mov ap_stack_top(%rip), %rsp
    call ap_main
4:  hlt
    jmp 4b

    /* The AP trampoline, copied to 0x8000: real mode -> protected mode ->
       long mode with the boot tables -> ap_start64. */
    .code16
    .global tramp_start
tramp_start:
    cli
    cld
    xor %ax, %ax
    mov %ax, %ds
    lgdtl (0x8000 + tramp_gdt_ptr - tramp_start)
    mov %cr0, %eax
    and $0x9fffffff, %eax
    or $1, %eax
    mov %eax, %cr0
    ljmpl $0x08, $(0x8000 + tramp32 - tramp_start)
    .code32
tramp32:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov $enter_long_mode32, %eax
    mov $(0x8000 + tramp_stack - tramp_start), %esp
    call *%eax
    lgdt gdt64_ptr
    ljmp $0x08, $ap_start64
    .p2align 3
tramp_gdt:
    .quad 0
    .quad 0x00cf9a000000ffff
    .quad 0x00cf92000000ffff
tramp_gdt_end:
tramp_gdt_ptr:
    .word tramp_gdt_end - tramp_gdt - 1
    .long 0x8000 + tramp_gdt - tramp_start
    .p2align 4
    .skip 64
tramp_stack:
    .global tramp_end
tramp_end:
    .code64
    .text
"#,
    options(att_syntax)
);

extern "C" {
    static tramp_start: u8;
    static tramp_end: u8;
    static boot_pml4: u8;
    static kernel_start: u8;
    static kernel_end: u8;
}

/// The stack the next AP starts on (top address), set before its SIPI;
/// the trampoline reads it by its symbol (an atomic has a `u64`'s layout).
#[export_name = "ap_stack_top"]
static AP_STACK_TOP: AtomicU64 = AtomicU64::new(0);

/// Sets the stack top the next AP starts on.
pub fn set_ap_stack(top: u64) {
    AP_STACK_TOP.store(top, Ordering::SeqCst);
}

/// The trampoline's bytes in the kernel image: `(address, length)`.
pub fn trampoline_image() -> (u64, u64) {
    // SAFETY: only the addresses of linker symbols are taken.
    let (s, e) = unsafe {
        (
            &tramp_start as *const u8 as u64,
            &tramp_end as *const u8 as u64,
        )
    };
    (s, e - s)
}

/// Physical address of the boot PML4 (the kernel's top-level table).
pub fn pml4_phys() -> u64 {
    // SAFETY: only the address of a linker symbol is taken.
    unsafe { &boot_pml4 as *const u8 as u64 }
}

/// Physical range of the kernel image, boot tables and stack included.
pub fn kernel_range() -> (u64, u64) {
    // SAFETY: only the addresses of linker symbols are taken.
    unsafe {
        (
            &kernel_start as *const u8 as u64,
            &kernel_end as *const u8 as u64,
        )
    }
}
