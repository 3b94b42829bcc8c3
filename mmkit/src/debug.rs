//! The `debug-check` feature: every public mutating operation of every
//! allocator first runs the allocator's `check()` (talc's `scan_for_errors`
//! at the top of each operation; mimalloc's debug levels), so a corruption
//! is caught at the first operation that follows it, not when it surfaces.
//!
//! `check()` is O(n); long runs (the soak) thin it out with
//! [`set_debug_check_period`]: the check then runs on every Nth operation,
//! counted over all allocators. Without the feature the hook is empty.

use core::sync::atomic::{AtomicU64, Ordering};

static PERIOD: AtomicU64 = AtomicU64::new(1);
static OPS: AtomicU64 = AtomicU64::new(0);

/// Runs the `debug-check` hook on every `period`-th operation (1, the
/// default, checks every operation; 0 is taken as 1). No effect without the
/// feature.
pub fn set_debug_check_period(period: u64) {
    PERIOD.store(period.max(1), Ordering::Relaxed);
}

/// Whether this operation's turn has come (counts the operation).
#[doc(hidden)]
pub fn due() -> bool {
    let n = OPS.fetch_add(1, Ordering::Relaxed);
    n % PERIOD.load(Ordering::Relaxed) == 0
}

/// The hook at the top of each public mutating operation: with the
/// `debug-check` feature, runs `$a.check()` when due and panics with the
/// invariant that failed.
#[cfg(feature = "debug-check")]
#[doc(hidden)]
#[macro_export]
macro_rules! debug_check {
    ($a:expr) => {
        if $crate::debug::due() {
            if let Err(e) = $a.check() {
                panic!("debug-check before an operation: {e}");
            }
        }
    };
}

/// The hook at the top of each public mutating operation (empty without the
/// `debug-check` feature).
#[cfg(not(feature = "debug-check"))]
#[doc(hidden)]
#[macro_export]
macro_rules! debug_check {
    ($a:expr) => {};
}
