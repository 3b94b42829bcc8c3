//! mmkit-kernel: a small x86_64 kernel whose memory management is mmkit,
//! booted by QEMU through the PVH entry. See README.md.
#![no_std]
#![no_main]
#![deny(clippy::undocumented_unsafe_blocks)]

extern crate alloc;

mod apic;
mod arch;
mod boot;
mod buddy_pcp;
mod counters;
mod fault;
mod heap;
mod idt;
mod ipi;
mod linux_like;
mod mm;
mod nodes;
mod paging;
mod percpu;
mod pervar;
mod phys;
mod profile;
mod sample;
mod scale;
mod seed002;
mod serial;
mod smp;
mod stale;
mod stale_vmalloc;
mod test_vmalloc;
mod tests;
mod time;
mod tlb;
mod trap;

use core::panic::PanicInfo;

/// `isa-debug-exit` code of a passing run (QEMU exits with 33).
pub const EXIT_PASS: u32 = 0x10;
/// `isa-debug-exit` code of a failing run (QEMU exits with 35).
pub const EXIT_FAIL: u32 = 0x11;

/// Entry from the PVH boot stage: `info` is the physical address of
/// `hvm_start_info`.
#[no_mangle]
extern "C" fn kmain(info: u64) -> ! {
    let t0 = arch::rdtsc();
    serial::init();
    println!("mmkit-kernel: booted (PVH)");
    time::calibrate();
    println!(
        "time: TSC {} MHz (PIT, best of 5)",
        time::tsc_per_ms() / 1000
    );
    let cpus = smp::cpu_count();
    phys::init(info, cpus);
    percpu::install(0);
    idt::init();
    idt::load();
    // The legacy PICs stay masked: every interrupt comes from the APIC.
    arch::outb(0x21, 0xff);
    arch::outb(0xa1, 0xff);
    apic::init_local();
    arch::sti();
    percpu::set_online();
    paging::init();
    mm::init(cpus);
    pervar::init();
    let online = smp::start_aps(cpus);
    println!(
        "boot: {} CPUs up in {} us",
        online,
        time::ns(arch::rdtsc() - t0) / 1000
    );
    let mut buf = [0u8; 256];
    let cmdline = phys::cmdline(info, &mut buf);
    let scale = scale::Scale::parse(cmdline);
    if scale.profile {
        profile::enable();
    }
    println!(
        "SCALE cpus={} seed_iters={} seed_old_iters={} loops={} busy={} full_fit={} stress_loops={} stress_busy={} stress_full_fit={} buddy_pairs={} cycles={} stale_cycles={} lazy_max_mib={}",
        online,
        scale.seed_iters,
        scale.seed_old_iters,
        scale.loops,
        scale.busy,
        scale.full_fit,
        scale.stress_loops,
        scale.stress_busy,
        scale.stress_full_fit,
        scale.buddy_pairs,
        scale.cycles,
        scale.detector_cycles(),
        mm::lazy_max(online) >> 20
    );
    match run(scale) {
        Ok(n) => {
            println!(
                "DONE pass tests={} ms={} heap_used_kib={}",
                n,
                time::ns(arch::rdtsc() - t0) / 1_000_000,
                heap::used() >> 10
            );
            arch::qemu_exit(EXIT_PASS);
        }
        Err(e) => {
            println!("DONE FAIL {}", e);
            arch::qemu_exit(EXIT_FAIL);
        }
    }
}

/// The tests, then the experiments, each followed by every check.
fn run(scale: scale::Scale) -> Result<usize, alloc::string::String> {
    let n = tests::run_all(scale.detector_cycles())?;
    if scale.tests_only {
        return Ok(n);
    }
    type Step = (
        &'static str,
        fn(scale::Scale) -> Result<(), alloc::string::String>,
    );
    let steps: [Step; 5] = [
        ("ipi", ipi::run),
        ("seed002", seed002::run),
        ("test_vmalloc performance", test_vmalloc::performance),
        ("test_vmalloc stress", test_vmalloc::stress),
        ("buddy_pcp", buddy_pcp::run),
    ];
    for (i, (name, step)) in steps.into_iter().enumerate() {
        if !scale.runs_step(i) {
            continue;
        }
        // Each experiment starts with the lazy lists empty: what the tests
        // or the last experiment left lazily freed is not its debt.
        mm::locked(mm::tree()).purge(&mut mm::KernelMmu, &mut mm::PhysFrames);
        mm::locked(mm::linear_lazy()).purge(&mut mm::KernelMmu, &mut mm::PhysFrames);
        nodes::purge_all();
        let t0 = arch::rdtsc();
        step(scale)?;
        tests::check_all().map_err(|e| alloc::format!("after {name}: {e}"))?;
        println!(
            "STEP {name} ok ({} ms)",
            time::ns(arch::rdtsc() - t0) / 1_000_000
        );
    }
    Ok(n)
}

#[panic_handler]
fn panic(p: &PanicInfo<'_>) -> ! {
    serial::print_unlocked(format_args!("\nKERNEL PANIC: {}\n", p));
    arch::qemu_exit(EXIT_FAIL);
}
