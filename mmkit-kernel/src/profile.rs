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

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
/// [`Phase::LockWait`].
pub struct TimedSpin(spin::Mutex<()>);

// SAFETY: every method forwards to spin's raw mutex, which upholds the
// trait's contract (one holder at a time, `unlock` only by the holder);
// the timing around `lock` does not change what is acquired.
unsafe impl lock_api::RawMutex for TimedSpin {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = TimedSpin(<spin::Mutex<()> as lock_api::RawMutex>::INIT);
    type GuardMarker = lock_api::GuardSend;

    fn lock(&self) {
        if lock_api::RawMutex::try_lock(&self.0) {
            return;
        }
        if !on() {
            lock_api::RawMutex::lock(&self.0);
            return;
        }
        let t0 = arch::rdtsc();
        lock_api::RawMutex::lock(&self.0);
        add(Phase::LockWait, arch::rdtsc() - t0);
    }

    fn try_lock(&self) -> bool {
        lock_api::RawMutex::try_lock(&self.0)
    }

    unsafe fn unlock(&self) {
        // SAFETY: the caller holds the lock (the trait's contract).
        unsafe { lock_api::RawMutex::unlock(&self.0) }
    }

    fn is_locked(&self) -> bool {
        lock_api::RawMutex::is_locked(&self.0)
    }
}
