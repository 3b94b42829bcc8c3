//! Helpers shared by the experiments on real memory (`vmalloc-real`,
//! `vmap_scaling_real`, `vm_buffers`), which run on [`mmkit_vm::Vm`].

use mmkit_vm::{Vm, VmConfig};

/// A `Vm` for an experiment: the old design (`lazy = false`: every free
/// unmaps at once, `vm_map_ram` through whole areas) or the new one.
pub fn vm(lazy: bool, phys_limit: u64, lazy_max: u64) -> Vm {
    Vm::new(VmConfig {
        phys_limit,
        lazy_max,
        lazy_unmap: lazy,
        ..VmConfig::default()
    })
    .expect("a Vm with a valid configuration")
}

/// Unmapping system calls `vm` made so far.
pub fn unmap_calls(vm: &Vm) -> u64 {
    vm.stats().space.unmap_calls
}

/// Writes one byte into each `page`-byte page of `[addr, addr + len)`.
///
/// # Safety
/// The range must be mapped writable and no Rust reference may point
/// into it.
pub unsafe fn touch(addr: u64, len: u64, page: u64) {
    let mut off = 0;
    while off < len {
        // SAFETY: the caller guarantees that the range is mapped writable
        // and unborrowed; `addr + off` lies inside it.
        unsafe { ((addr + off) as usize as *mut u8).write_volatile(1) };
        off += page;
    }
}

/// `VmRSS` and `VmHWM` of this process in MiB (0 when unreadable).
pub fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets `VmHWM` to the current RSS (`/proc/self/clear_refs`, value 5),
/// so the next reading is the peak since now. Best effort.
pub fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
