//! The locks the thread-safe wrappers use: parking_lot's mutex (loom's
//! under `--cfg loom`, so `tests/loom.rs` model-checks the same code, as
//! crossbeam does), and [`TurnMutex`] over it for `range::Locked`.
//!
//! parking_lot's rather than std's: under contention it spins before it
//! parks, and a thread that releases it may take it again at once, so a
//! shared allocator changes cores less often. With 2 threads churning one
//! `range::Locked` (`cargo bench -p mmkit --bench vmap -- locked_threads`),
//! the time per pair over both threads was 1.95-2.70x that of one thread
//! with std's mutex and 1.67-1.94x with parking_lot's, three runs of each.
//! Those threads still alternated at almost every acquisition;
//! [`TurnMutex`] makes them take turns in batches (see the README for its
//! figures).

#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard};

/// Locks, ignoring poisoning (loom's lock poisons, parking_lot's does
/// not): every critical section leaves the structure consistent before
/// anything that could panic.
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(loom)]
    return m.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    #[cfg(not(loom))]
    m.lock()
}

/// The value out of its lock, ignoring poisoning as [`lock`] does.
#[inline]
pub(crate) fn into_inner<T>(m: Mutex<T>) -> T {
    #[cfg(loom)]
    return m
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    #[cfg(not(loom))]
    m.into_inner()
}

#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

/// Acquisitions in a row the thread holding the turn makes while another
/// waits, before it hands the turn over: about 25 µs of the bench's
/// operations, so a waiter waits that long at most while the holder is
/// busy (larger batches trade that wait for fewer hand-overs: see
/// docs/bench-history.md). Small under loom, so that its model checks
/// reach the hand-over.
#[cfg(not(loom))]
const BATCH: u32 = 512;
#[cfg(loom)]
const BATCH: u32 = 2;
/// Spins between a waiter's looks at whether the holder went idle.
#[cfg(not(loom))]
const POLL: u32 = 64;
#[cfg(loom)]
const POLL: u32 = 2;
/// Looks after which a waiter stops waiting for its turn and queues on the
/// mutex itself (parking_lot's eventual fairness then bounds its wait).
#[cfg(not(loom))]
const PATIENCE: u32 = 256;
#[cfg(loom)]
const PATIENCE: u32 = 2;
/// Looks after which a waiter yields its CPU before each look.
const YIELD_AFTER: u32 = 16;
/// The low bit of `turn`: set by a hand-over, cleared by the new holder.
const HANDED: usize = 1;

#[cfg(loom)]
loom::thread_local!(static TOKEN: u64 = 0);
#[cfg(not(loom))]
std::thread_local!(static TOKEN: u64 = const { 0 });

/// This thread's token: the address of a thread-local, even and non-zero.
#[inline]
fn token() -> usize {
    TOKEN.with(|t| t as *const u64 as usize)
}

/// The turn: whose it is, and who waits for it. Kept on its own cache
/// lines, which a waiter reads while it spins and the holder writes only
/// when it hands the turn over.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Turn {
    /// The token of the thread whose turn it is (`HANDED` set while the
    /// thread it was handed to has not taken the lock yet); 0: nobody's.
    holder: AtomicUsize,
    /// The token of one thread waiting for the turn; 0: none.
    waiter: AtomicUsize,
}

/// A mutex that lets the thread that took it last take it again, up to
/// [`BATCH`] times in a row while another thread waits, instead of
/// alternating with the waiter at every acquisition.
///
/// Why: a range allocator's critical section touches a few cache lines of
/// tree nodes, and when two threads alternate, every acquisition first
/// pulls those lines from the other core. Taking turns in batches moves
/// them once per batch. With 2 threads churning one `range::Locked`
/// (`cargo bench -p mmkit --bench vmap -- locked_threads`), plain
/// parking_lot took 1.52-1.66x one thread's time per pair and this lock
/// 1.17-1.25x, in the same sessions. A thread that holds the turn pays
/// about 17 instructions more per acquisition in the lock's own code (a
/// thread-local read, two relaxed loads, `try_lock`), 34 in all once the
/// larger `Locked` methods are no longer inlined into the caller
/// (callgrind, one thread churning).
///
/// Liveness: a thread that finds the lock free takes it at once, whoever
/// holds the turn. A waiter that arrived while it was held looks every
/// [`POLL`] spins whether the holder made an acquisition since its last
/// look; if not (the holder went idle) it takes the lock out of turn, and
/// after [`PATIENCE`] looks it queues on the mutex like any other thread.
/// It yields its CPU between looks after the first few, in case the holder
/// was preempted. Mutual exclusion is the inner mutex's alone: the turn
/// only decides who tries.
#[derive(Debug, Default)]
pub(crate) struct TurnMutex<T> {
    turn: Turn,
    mutex: Mutex<T>,
    /// Acquisitions in a row by the holder of the turn while a waiter
    /// waited; written only under the mutex.
    streak: AtomicU32,
    /// Acquisitions while a waiter waited, never reset: a waiter that sees
    /// it unchanged between two looks takes a free lock out of turn.
    ticks: AtomicU32,
}

impl<T> TurnMutex<T> {
    pub(crate) fn new(value: T) -> Self {
        TurnMutex {
            turn: Turn::default(),
            mutex: Mutex::new(value),
            streak: AtomicU32::new(0),
            ticks: AtomicU32::new(0),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        let me = token();
        // A free lock is taken whoever holds the turn, except while the
        // turn is being handed over: the thread that handed it away would
        // take the lock back before the one it handed it to could.
        if self.turn.holder.load(Relaxed) & HANDED == 0 {
            if let Some(g) = self.try_lock() {
                self.took(me);
                return g;
            }
        }
        // Not by `lock` on the mutex even in turn: a thread that took the
        // lock out of turn holds the turn now, and this one waits for it
        // by spinning, not in the mutex's queue, where it would park and
        // each release would pay a wake-up.
        let g = self.wait_turn(me);
        self.took(me);
        g
    }

    /// Waits until the turn is this thread's or nobody's and the lock is
    /// free, or the lock is free when polled, or patience runs out.
    #[cold]
    fn wait_turn(&self, me: usize) -> MutexGuard<'_, T> {
        let mut seen = self.ticks.load(Relaxed);
        for look in 0..PATIENCE {
            if look >= YIELD_AFTER {
                yield_now();
            }
            if self.turn.waiter.load(Relaxed) == 0 {
                let _ = self.turn.waiter.compare_exchange(0, me, Relaxed, Relaxed);
            }
            for _ in 0..POLL {
                let holder = self.turn.holder.load(Relaxed) & !HANDED;
                if holder == 0 || holder == me {
                    if let Some(g) = self.try_lock() {
                        return g;
                    }
                }
                spin();
            }
            // Out of turn only if the holder seems idle: it made no
            // acquisition since the last look (or is in a long one).
            let now = self.ticks.load(Relaxed);
            if now == seen {
                if let Some(g) = self.try_lock() {
                    return g;
                }
            }
            seen = now;
        }
        lock(&self.mutex)
    }

    #[inline]
    fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        #[cfg(loom)]
        return self.mutex.try_lock().ok();
        #[cfg(not(loom))]
        self.mutex.try_lock()
    }

    /// Bookkeeping under the lock: take the turn if it was another's, and
    /// hand it to a waiter after `BATCH` acquisitions in a row.
    #[inline]
    fn took(&self, me: usize) {
        let holder = self.turn.holder.load(Relaxed);
        let waiter = self.turn.waiter.load(Relaxed);
        if holder != me || waiter != 0 {
            self.took_contended(me, holder, waiter);
        }
    }

    #[cold]
    fn took_contended(&self, me: usize, holder: usize, waiter: usize) {
        if holder != me {
            self.turn.holder.store(me, Relaxed);
            self.streak.store(0, Relaxed);
        }
        if waiter == me {
            self.turn.waiter.store(0, Relaxed);
        } else if waiter != 0 {
            self.ticks
                .store(self.ticks.load(Relaxed).wrapping_add(1), Relaxed);
            let streak = self.streak.load(Relaxed) + 1;
            if streak >= BATCH {
                self.streak.store(0, Relaxed);
                self.turn.waiter.store(0, Relaxed);
                self.turn.holder.store(waiter | HANDED, Relaxed);
            } else {
                self.streak.store(streak, Relaxed);
            }
        }
    }

    pub(crate) fn into_inner(self) -> T {
        into_inner(self.mutex)
    }
}

fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::vec::Vec;

    const ME: usize = 0x1000;
    const OTHER: usize = 0x2000;

    #[test]
    fn the_turn_passes_to_a_waiter_after_a_batch() {
        let m = TurnMutex::new(0u32);
        m.took(ME);
        assert_eq!(m.turn.holder.load(Relaxed), ME);
        // Nobody waits: the holder keeps the turn however long it runs.
        for _ in 0..2 * BATCH {
            m.took(ME);
        }
        assert_eq!(m.turn.holder.load(Relaxed), ME);
        m.turn.waiter.store(OTHER, Relaxed);
        for _ in 0..BATCH - 1 {
            m.took(ME);
        }
        assert_eq!(m.turn.holder.load(Relaxed), ME);
        m.took(ME);
        assert_eq!(m.turn.holder.load(Relaxed), OTHER | HANDED);
        assert_eq!(m.turn.waiter.load(Relaxed), 0);
        // The waiter takes the lock: its turn, no longer handed over.
        m.took(OTHER);
        assert_eq!(m.turn.holder.load(Relaxed), OTHER);
        assert_eq!(m.streak.load(Relaxed), 0);
    }

    #[test]
    fn a_waiter_takes_the_lock_when_the_holder_goes_idle() {
        // The main thread holds the turn, then stops using the lock while
        // holding it for a while: the waiter must get in once it is free,
        // long before its patience runs out.
        let m = Arc::new(TurnMutex::new(0u32));
        let g = m.lock();
        let done = Arc::new(AtomicBool::new(false));
        let t = {
            let (m, done) = (Arc::clone(&m), Arc::clone(&done));
            std::thread::spawn(move || {
                *m.lock() += 1;
                done.store(true, Relaxed);
            })
        };
        while m.turn.waiter.load(Relaxed) == 0 {
            std::thread::yield_now();
        }
        drop(g);
        t.join().unwrap();
        assert!(done.load(Relaxed));
        assert_eq!(*m.lock(), 1);
    }

    #[test]
    fn more_threads_than_cpus_all_finish() {
        let m = Arc::new(TurnMutex::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        *m.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*m.lock(), 80_000);
    }
}
