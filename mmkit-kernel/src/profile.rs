//! Per-phase cycle counters, on when the command line says `profile`:
//! TSC ticks spent waiting for a contended lock, taking and giving back
//! frames, writing PTEs, clearing them, and flushing (the local flush,
//! the IPIs and the wait for every acknowledgement), summed over every
//! CPU; and the ticks of the calls themselves, whose remainder is the
//! driver's own work (the range allocator's reserve and free, the area
//! books, the `vm_map_ram` queues). Off, each costs one relaxed load.
//!
//! The lock counted is [`TimedSpin`]: a spin lock whose `lock` times only
//! the waits of a contended acquisition (the uncontended path takes no
//! timestamp).

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::arch;
use crate::percpu::MAX_CPUS;

/// A phase of a call.
#[derive(Debug, Clone, Copy)]
pub enum Phase {
    /// Waiting for a contended lock.
    LockWait = 0,
    /// Frames from and back to the buddy allocator's per-CPU lists.
    Frames = 1,
    /// PTE writes.
    Map = 2,
    /// PTE clears.
    Clear = 3,
    /// Flushes: local, IPIs, the wait for every acknowledgement.
    Flush = 4,
    /// Whole calls (vmalloc, vfree, a map or unmap of the loop).
    Calls = 5,
}

/// The phases' names in `ROW phases` lines, in [`Phase`] order.
pub const NAMES: [&str; 6] = ["lock_wait", "frames", "map", "clear", "flush", "calls"];

static ON: AtomicBool = AtomicBool::new(false);
static TICKS: [[AtomicU64; 6]; MAX_CPUS] = [const { [const { AtomicU64::new(0) }; 6] }; MAX_CPUS];

/// Turns the counters on (the command line's `profile`).
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether the counters are on.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Adds `ticks` to `phase` on the running CPU.
fn add(phase: Phase, ticks: u64) {
    if let Some(c) = TICKS.get(arch::cpu_id()) {
        c[phase as usize].fetch_add(ticks, Ordering::Relaxed);
    }
}

/// Runs `f`, its ticks counted in `phase` when the counters are on.
#[inline]
pub fn timed<T>(phase: Phase, f: impl FnOnce() -> T) -> T {
    if !on() {
        return f();
    }
    let t0 = arch::rdtsc();
    let r = f();
    add(phase, arch::rdtsc() - t0);
    r
}

/// Every phase's ticks so far, summed over the CPUs.
pub fn totals() -> [u64; 6] {
    let mut out = [0; 6];
    for cpu in &TICKS {
        for (o, c) in out.iter_mut().zip(cpu) {
            *o += c.load(Ordering::Relaxed);
        }
    }
    out
}

/// Prints one `ROW phases` line for `what`: ns per phase since `before`
/// (from [`totals`]), and `driver_ns`, the calls' ticks less the others
/// (lock waits outside a call count in `lock_wait` only). Nothing when
/// the counters are off.
pub fn report(what: &str, before: &[u64; 6]) {
    report_ticks(what, &since(before));
}

/// The ticks of each phase since `before` (from [`totals`]).
pub fn since(before: &[u64; 6]) -> [u64; 6] {
    let now = totals();
    core::array::from_fn(|i| now[i] - before[i])
}

/// Prints one `ROW phases` line for `what` from the ticks `d` of each
/// phase (see [`report`]).
pub fn report_ticks(what: &str, d: &[u64; 6]) {
    if !on() {
        return;
    }
    let mut line = alloc::format!("ROW phases {what}");
    for (name, &t) in NAMES.iter().zip(d) {
        line += &alloc::format!(" {name}_ns={}", crate::time::ns(t));
    }
    let inner: u64 = d[..5].iter().sum();
    line += &alloc::format!(
        " driver_ns={}",
        crate::time::ns(d[Phase::Calls as usize].saturating_sub(inner))
    );
    crate::println!("{line}");
}

/// A spin lock that counts the ticks of its contended acquisitions in
/// [`Phase::LockWait`]. A waiter that has spun [`SPINS`] times halts
/// (when its interrupts are on) until the holder's unlock wakes it: a
/// halted vCPU leaves its host CPU to the holder and takes a shootdown
/// IPI at once, where a spinning one must wait for the host to run it.
pub struct TimedSpin {
    /// [`FREE`], [`HELD`] or [`HELD_WAKE`].
    state: AtomicU32,
    /// The CPUs halted in `lock`, one bit each.
    sleepers: AtomicU64,
}

/// The lock is free.
const FREE: u32 = 0;
/// Held, no waiter halted.
const HELD: u32 = 1;
/// Held, and a waiter may be halted: the unlock wakes the sleepers.
const HELD_WAKE: u32 = 2;
/// Tries before a waiter halts.
const SPINS: u32 = 256;

impl TimedSpin {
    #[inline]
    fn try_take(&self, to: u32) -> Result<(), u32> {
        self.state
            .compare_exchange(FREE, to, Ordering::Acquire, Ordering::Relaxed)
            .map(|_| ())
    }

    /// A contended `lock`: waits, its ticks counted when the counters are
    /// on.
    #[cold]
    #[inline(never)]
    fn contended(&self) {
        if !on() {
            self.wait();
            return;
        }
        let t0 = arch::rdtsc();
        self.wait();
        add(Phase::LockWait, arch::rdtsc() - t0);
    }

    /// Waits for the lock: spins, then halts until an unlock wakes it.
    fn wait(&self) {
        let bit = 1u64 << (arch::cpu_id() % MAX_CPUS);
        loop {
            for _ in 0..SPINS {
                if self.state.load(Ordering::Relaxed) == FREE && self.try_take(HELD).is_ok() {
                    return;
                }
                arch::pause();
            }
            if !arch::interrupts_on() {
                continue;
            }
            // The bit is set before the state says a waiter may sleep, and
            // the unlock reads the bits after it frees the state (SeqCst
            // both): an unlock that frees the lock after the check below
            // wakes this CPU, and `sti; hlt` takes the wake-up even if it
            // came first. Taken here, the lock keeps HELD_WAKE: another
            // sleeper may wait.
            let mut got = false;
            arch::cli_then(|| {
                self.sleepers.fetch_or(bit, Ordering::SeqCst);
                got = self.try_take(HELD_WAKE).is_ok();
                let asleep = !got
                    && self
                        .state
                        .compare_exchange(HELD, HELD_WAKE, Ordering::SeqCst, Ordering::SeqCst)
                        .map_or_else(|now| now == HELD_WAKE, |_| true);
                if asleep {
                    arch::sti_hlt();
                }
                self.sleepers.fetch_and(!bit, Ordering::SeqCst);
            });
            if got {
                return;
            }
        }
    }

    /// Wakes every CPU halted in `lock` (an unlock found HELD_WAKE).
    #[cold]
    #[inline(never)]
    fn wake(&self) {
        let mut halted = self.sleepers.load(Ordering::SeqCst);
        while halted != 0 {
            let cpu = halted.trailing_zeros();
            halted &= halted - 1;
            crate::apic::send_to(cpu, crate::trap::WAKE_VECTOR);
        }
    }
}

// SAFETY: one holder at a time: the lock is taken only by a
// compare-exchange from FREE, and freed only by `unlock`, which the
// trait's contract reserves to the holder; Acquire on taking and the
// SeqCst swap on freeing order the guarded data.
unsafe impl lock_api::RawMutex for TimedSpin {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = TimedSpin {
        state: AtomicU32::new(FREE),
        sleepers: AtomicU64::new(0),
    };
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    fn lock(&self) {
        if self.try_take(HELD).is_err() {
            self.contended();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.try_take(HELD).is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        if self.state.swap(FREE, Ordering::SeqCst) == HELD_WAKE {
            self.wake();
        }
    }

    fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) != FREE
    }
}
