//! What every command shares: the machine's facts, progress bars, units,
//! the kernel's address-space constants, name lookup, and small
//! statistics for repeated runs.

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

/// A figure measured several times: the median, with the spread.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Spread {
    /// Median of the runs (the mean of the middle two for an even count).
    pub median: f64,
    /// Smallest run.
    pub min: f64,
    /// Largest run.
    pub max: f64,
    /// Runs measured.
    pub runs: usize,
}

impl Spread {
    /// The spread of `runs` (empty: all NaN, zero runs).
    pub fn of(runs: &[f64]) -> Self {
        let mut v = runs.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => v[n / 2],
            _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Spread {
            median,
            min: v.first().copied().unwrap_or(f64::NAN),
            max: v.last().copied().unwrap_or(f64::NAN),
            runs: n,
        }
    }
}

/// A mean with its sample standard deviation, over seeds or runs.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct MeanSd {
    /// Mean of the values.
    pub mean: f64,
    /// Sample standard deviation (0 for fewer than two values).
    pub sd: f64,
    /// Values averaged (sentinels excluded).
    pub n: usize,
}

impl MeanSd {
    /// Mean and standard deviation of `v`.
    pub fn of(v: &[f64]) -> Self {
        MeanSd {
            mean: mean(v),
            sd: sd(v),
            n: v.len(),
        }
    }
}

/// Mean of `v` (NaN when empty: an average over nothing is no number).
pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Sample standard deviation (0 for fewer than two values).
pub fn sd(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_the_median_and_the_extremes() {
        let s = Spread::of(&[5.5, 129.0, 2.7]);
        assert_eq!((s.median, s.min, s.max, s.runs), (5.5, 2.7, 129.0, 3));
        assert_eq!(Spread::of(&[1.0, 3.0]).median, 2.0);
        assert!(Spread::of(&[]).median.is_nan());
    }

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
