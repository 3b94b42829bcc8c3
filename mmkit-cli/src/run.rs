//! What every command shares: the machine's facts, progress bars, units,
//! the kernel's address-space constants and name lookup (statistics live
//! in [`crate::stats`]).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// The page size every experiment and workload uses.
pub const PAGE: u64 = 4096;
/// x86-64's `VMALLOC_START` (4-level paging).
pub const VMALLOC_START: u64 = 0xffff_c900_0000_0000;
/// Size of x86-64's vmalloc space: 32 TiB.
pub const VMALLOC_SIZE: u64 = 32 << 40;
/// End of the vmalloc space.
pub const VMALLOC_END: u64 = VMALLOC_START + VMALLOC_SIZE;
/// A mebibyte.
pub const MIB: u64 = 1 << 20;

/// The machine a run measured, recorded beside every result.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPUs this process may run on.
    pub cpus: usize,
    /// The CPU model (`/proc/cpuinfo`), or the architecture.
    pub model: String,
    /// The operating system and architecture.
    pub os: String,
}

impl Machine {
    /// This machine.
    pub fn here() -> Self {
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        Machine {
            cpus: cpus(),
            model,
            os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        }
    }
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} CPUs, {}", self.cpus, self.model)
    }
}

/// Number of CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:30}] {pos}/{len} {elapsed}")
            .expect("static template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// Milliseconds of a duration.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `base / new`, or `None` when `new` is not positive (no ratio).
pub fn ratio(base: f64, new: f64) -> Option<f64> {
    (new > 0.0 && base.is_finite() && new.is_finite()).then(|| base / new)
}

/// Finds `name` among `all` by `key`; the error names what was asked for
/// and lists the known names ("unknown experiment "x"; known: a, b").
pub fn lookup<'a, T>(
    what: &str,
    name: &str,
    all: &'a [T],
    key: impl Fn(&T) -> &str,
) -> Result<&'a T, String> {
    all.iter().find(|t| key(t) == name).ok_or_else(|| {
        let known: Vec<&str> = all.iter().map(&key).collect();
        format!("unknown {what} {name:?}; known: {}", known.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_lists_the_known_names() {
        let all = ["a", "b"];
        assert_eq!(lookup("thing", "b", &all, |s| s), Ok(&"b"));
        assert_eq!(
            lookup("thing", "c", &all, |s| s),
            Err("unknown thing \"c\"; known: a, b".to_string())
        );
    }

    #[test]
    fn ratio_refuses_a_zero_denominator() {
        assert_eq!(ratio(6.0, 3.0), Some(2.0));
        assert_eq!(ratio(1.0, 0.0), None);
    }
}
