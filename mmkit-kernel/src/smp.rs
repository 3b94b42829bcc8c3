//! Bringing up the application processors (INIT-SIPI-SIPI through the
//! local APIC, the real-mode trampoline at 0x8000, a stack each) and
//! running work on every CPU at once.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use spin::Mutex;

use crate::arch::{self, inb, outw};
use crate::trap::WAKE_VECTOR;
use crate::{apic, boot, idt, percpu, phys, println, time};

/// The CPU count QEMU reports through fw_cfg (key 0x05).
pub fn cpu_count() -> usize {
    outw(0x510, 0x05);
    let lo = inb(0x511);
    let hi = inb(0x511);
    (usize::from(lo) | usize::from(hi) << 8).clamp(1, percpu::MAX_CPUS)
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

/// The job every CPU runs: `f(cpu)`. Borrowed from [`run_on`]'s caller,
/// which waits for every CPU to finish before the borrow ends.
type Job = &'static (dyn Fn(usize) + Sync);
static JOB: Mutex<Option<Job>> = Mutex::new(None);
static JOB_GEN: AtomicU64 = AtomicU64::new(0);
static JOB_DONE: AtomicUsize = AtomicUsize::new(0);
/// Starts every AP; returns the CPUs online.
pub fn start_aps(cpus: usize) -> usize {
    let (src, len) = boot::trampoline_image();
    // SAFETY: 0x8000..0x8000+len is conventional RAM below 1 MiB that the
    // buddy allocator never manages (everything under 1 MiB stays out),
    // and the trampoline image is a few hundred bytes of .text.
    unsafe {
        core::ptr::copy_nonoverlapping(src as *const u8, boot::TRAMPOLINE as *mut u8, len as usize)
    };
    for id in 1..cpus {
        let stack = phys::alloc(0, 4, false).expect("an AP stack");
        boot::set_ap_stack((stack + 16) * phys::PAGE);
        NEXT_ID.store(id, Ordering::SeqCst);
        let before = percpu::online();
        let apic_id = id as u32;
        apic::send_init(apic_id);
        time::delay_us(10_000);
        apic::send_sipi(apic_id, (boot::TRAMPOLINE >> 12) as u8);
        time::delay_us(200);
        if percpu::online() == before {
            apic::send_sipi(apic_id, (boot::TRAMPOLINE >> 12) as u8);
        }
        let deadline = arch::rdtsc() + 2000 * time::tsc_per_ms();
        while percpu::online() == before {
            assert!(arch::rdtsc() < deadline, "CPU {id} did not come up");
            arch::pause();
        }
    }
    println!("smp: {} CPUs online", percpu::online());
    percpu::online()
}

/// Entry of an AP, on its own stack, with the boot tables.
#[no_mangle]
extern "C" fn ap_main() -> ! {
    let id = NEXT_ID.load(Ordering::SeqCst);
    percpu::install(id);
    idt::load();
    apic::init_local();
    arch::sti();
    percpu::set_online();
    idle(id)
}

fn idle(cpu: usize) -> ! {
    let mut seen = 0;
    loop {
        let gen = JOB_GEN.load(Ordering::Acquire);
        if gen != seen {
            seen = gen;
            let job = *JOB.lock();
            if let Some(job) = job {
                job(cpu);
            }
            JOB_DONE.fetch_add(1, Ordering::AcqRel);
            continue;
        }
        // `sti; hlt` is atomic: a wake-up sent after the check still wakes.
        arch::cli_then(|| {
            if JOB_GEN.load(Ordering::Acquire) == seen {
                arch::sti_hlt();
            }
        });
    }
}

/// Runs `f(cpu)` on CPUs `0..n` at once (the caller is CPU 0), waits for
/// all, and returns their results in CPU order. CPUs at or above `n` stay
/// idle; `n` is at most the CPUs online.
pub fn run_on<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let online = percpu::online();
    let n = n.clamp(1, online);
    let results: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let job = |cpu: usize| {
        if let Some(slot) = results.get(cpu) {
            let r = f(cpu);
            *slot.lock() = Some(r);
        }
    };
    let borrowed: &(dyn Fn(usize) + Sync) = &job;
    // SAFETY: only the lifetime changes. The other CPUs call the job only
    // between the generation bump below and their increment of JOB_DONE;
    // this function waits for every increment and clears JOB before
    // `job`, `f` and `results` go out of scope, and the next run_on cannot
    // start before that.
    let job_static: Job = unsafe {
        core::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(borrowed)
    };
    *JOB.lock() = Some(job_static);
    JOB_DONE.store(0, Ordering::Release);
    JOB_GEN.fetch_add(1, Ordering::AcqRel);
    if online > 1 {
        apic::send_all_but_self(WAKE_VECTOR);
    }
    job(0);
    while JOB_DONE.load(Ordering::Acquire) < online - 1 {
        arch::pause();
    }
    *JOB.lock() = None;
    results
        .into_iter()
        .map(|r| r.into_inner().expect("every CPU below n ran the job"))
        .collect()
}
