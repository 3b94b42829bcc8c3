//! Page faults and other exceptions. A fault at one of the probe
//! instructions (reads and writes of the vmalloc area by tests and
//! experiments) is recorded with what the allocators know of the address
//! and resumes after the access, as the kernel's exception tables do; any
//! other fault is reported and ends the run as a failure.

use core::arch::global_asm;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::paging::{self, VMALLOC_SIZE, VMALLOC_START};
use crate::trap::TrapFrame;
use crate::{arch, mm, phys, serial};

global_asm!(
    r#"
    .text
    .global probe_read_asm
probe_read_asm:
    xor %edx, %edx
probe_read_insn:
    mov (%rdi), %rax
    ret
    .global probe_write_asm
probe_write_asm:
    xor %edx, %edx
probe_write_insn:
    mov %rsi, (%rdi)
    ret
    .global probe_fixup
probe_fixup:
    mov $1, %edx
    ret
"#,
    options(att_syntax)
);

extern "C" {
    static probe_read_insn: u8;
    static probe_write_insn: u8;
    static probe_fixup: u8;
}

/// Faults caught at a probe, and the last one's address.
pub static CAUGHT: AtomicU64 = AtomicU64::new(0);
/// Address of the last caught fault.
pub static LAST_ADDR: AtomicU64 = AtomicU64::new(0);

fn in_vmalloc(va: u64) -> bool {
    (VMALLOC_START..VMALLOC_START + VMALLOC_SIZE).contains(&va) && va % 8 == 0
}

/// Reads the word at `va` (8-aligned, in the vmalloc area); `None` when
/// the access faults (the fault is counted in [`CAUGHT`]).
pub fn probe_read(va: u64) -> Option<u64> {
    if !in_vmalloc(va) {
        return None;
    }
    let (v, faulted): (u64, u64);
    // SAFETY: the vmalloc area holds no Rust objects (only frames mapped by
    // the layers), so reading it aliases nothing; a fault there is resumed
    // at probe_fixup, which reports it in rdx.
    unsafe {
        core::arch::asm!("call probe_read_asm", in("rdi") va, out("rax") v, out("rdx") faulted, clobber_abi("C"))
    };
    (faulted == 0).then_some(v)
}

/// Writes the word `v` at `va` (8-aligned, in the vmalloc area); false
/// when the access faults.
pub fn probe_write(va: u64, v: u64) -> bool {
    if !in_vmalloc(va) {
        return false;
    }
    let faulted: u64;
    // SAFETY: as probe_read: only frames mapped by the layers are written.
    unsafe {
        core::arch::asm!("call probe_write_asm", in("rdi") va, in("rsi") v, out("rdx") faulted, clobber_abi("C"))
    };
    faulted == 0
}

fn addr_of(s: &u8) -> u64 {
    s as *const u8 as u64
}

/// The page-fault handler.
pub fn page_fault(f: &mut TrapFrame) {
    let addr = arch::cr2();
    // SAFETY: only the addresses of the probe labels are taken.
    let (r, w, fix) = unsafe {
        (
            addr_of(&probe_read_insn),
            addr_of(&probe_write_insn),
            addr_of(&probe_fixup),
        )
    };
    if f.rip == r || f.rip == w {
        CAUGHT.fetch_add(1, Ordering::SeqCst);
        LAST_ADDR.store(addr, Ordering::SeqCst);
        f.rip = fix;
        return;
    }
    serial::print_unlocked(format_args!(
        "\nPAGE FAULT on cpu {} at {:#x} ({}), rip {:#x}, error {:#x}: {}\n",
        arch::cpu_id(),
        addr,
        if f.error & 2 != 0 { "write" } else { "read" },
        f.rip,
        f.error,
        describe(addr)
    ));
    arch::qemu_exit(crate::EXIT_FAIL);
}

/// What the allocators know of `addr`, in words.
pub fn describe(addr: u64) -> &'static str {
    if !(VMALLOC_START..VMALLOC_START + VMALLOC_SIZE).contains(&addr) {
        return "outside the vmalloc area";
    }
    match mm::whereabouts(addr) {
        None => "vmalloc area (its layer's lock is held)",
        Some(mmkit_vmalloc::Where::Mapped { .. }) => "inside a live area (a stale or racing fault)",
        Some(mmkit_vmalloc::Where::Guard { .. }) => "the guard page after a live area",
        Some(mmkit_vmalloc::Where::Block { .. }) => "inside a vm_map_ram block",
        Some(mmkit_vmalloc::Where::Lazy { .. }) => {
            "a lazily freed area (PTEs cleared, flush pending)"
        }
        Some(mmkit_vmalloc::Where::Freed { .. }) => "a freed and flushed area (use after vfree)",
        Some(mmkit_vmalloc::Where::Free) => "free space, never allocated or freed long ago",
    }
}

/// Any other exception: report and fail.
pub fn fatal(f: &mut TrapFrame) {
    serial::print_unlocked(format_args!(
        "\nEXCEPTION {} on cpu {} at rip {:#x}, error {:#x}, cr2 {:#x}\n",
        f.vector,
        arch::cpu_id(),
        f.rip,
        f.error,
        arch::cr2()
    ));
    arch::qemu_exit(crate::EXIT_FAIL);
}

/// Fresh words for [`touch`]: none is written twice.
static TOUCHES: AtomicU64 = AtomicU64::new(1);

/// The loops' "touch": writes a fresh word at each page of
/// `[va, va + pages)` through `va`, then reads it back from the frame the
/// page table maps there, through the identity map. A write that a stale
/// translation sent to another frame is missed there. Returns whether
/// every page took its word (and none faulted).
pub fn touch(va: u64, pages: u64) -> bool {
    (0..pages).all(|i| {
        let at = va + i * phys::PAGE;
        let v = TOUCHES.fetch_add(1, Ordering::Relaxed);
        probe_write(at, v) && paging::translate(at).and_then(phys::read_frame) == Some(v)
    })
}

/// `n` fresh words for [`touch_frames`], none handed out before: the
/// first of them.
pub fn fresh_words(n: u64) -> u64 {
    TOUCHES.fetch_add(n, Ordering::Relaxed)
}

/// The vm_map_ram loop's touch: writes the word `word + i` at page `i` of
/// the mapping at `va`, then reads it back from `frames[i]`, the frame the
/// caller asked to map there, through the identity map. A write that a
/// stale translation (or a wrong PTE) sent elsewhere is missed there.
/// The words come from [`fresh_words`], so none is found by chance.
/// Returns whether every page took its word. A plain write, not a probe:
/// the mapping was just made, so a fault is a bug, and the fault handler
/// ends the run with it (as a kernel oopses).
pub fn touch_frames(va: u64, frames: &[phys::DataFrame], word: u64) -> bool {
    // The run lies in the area when its first and last words do (checked
    // once, not per page).
    let Some(last_page) = (frames.len() as u64).checked_sub(1) else {
        return true;
    };
    let last = last_page
        .checked_mul(phys::PAGE)
        .and_then(|o| va.checked_add(o));
    if !last.is_some_and(|l| in_vmalloc(va) && in_vmalloc(l)) {
        return false;
    }
    let mut at = va;
    for (v, f) in (word..).zip(frames) {
        // SAFETY: `at` is an aligned word in the vmalloc area (checked
        // above for the run), which holds no Rust objects (only frames the
        // layers map), so the write aliases nothing; unmapped, it faults
        // into the page-fault handler, which reports it and ends the run.
        unsafe { core::ptr::write_volatile(at as *mut u64, v) };
        if f.read() != v {
            return false;
        }
        at += phys::PAGE;
    }
    true
}
