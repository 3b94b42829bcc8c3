//! The statistics every experiment and `mmkit bench` use: a figure
//! measured several times (the median with its spread, or the mean with its
//! standard deviation) and the paired difference of two policies run on
//! the same seeds (its mean with a 95% Student t interval).

use serde::Serialize;

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

    /// Mean and standard deviation of `f` over the runs, each value divided
    /// by `scale` (1000 turns the kernel's thousandths into 0..1).
    pub fn over<R>(runs: &[R], scale: f64, f: impl Fn(&R) -> f64) -> Self {
        Self::of(&runs.iter().map(|r| f(r) / scale).collect::<Vec<_>>())
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

/// The value below which nine tenths of the sorted `v` lie (the element at
/// index `len * 9 / 10`; 0 when empty).
pub fn p90(sorted: &[f64]) -> f64 {
    sorted.get(sorted.len() * 9 / 10).copied().unwrap_or(0.0)
}

/// Two-sided 95% Student t quantile for `df` degrees of freedom (NaN for
/// none; past 30, an approximation within 0.01 of the exact value).
pub fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => T[df - 1],
        _ => 1.96 + 2.4 / df as f64,
    }
}

/// Mean and 95% interval half-width of paired differences `d` (one per
/// seed: the same seed run under two policies). The half-width is NaN for
/// fewer than two: one seed has no interval.
pub fn paired(d: &[f64]) -> (f64, f64) {
    let half = t975(d.len().saturating_sub(1)) * sd(d) / (d.len() as f64).sqrt();
    (mean(d), half)
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
    fn mean_and_sd_of_a_sample() {
        let m = MeanSd::of(&[2.0, 4.0, 6.0]);
        assert_eq!((m.mean, m.sd, m.n), (4.0, 2.0, 3));
        assert_eq!(sd(&[5.0]), 0.0);
        assert!(mean(&[]).is_nan());
        let o = MeanSd::over(&[1000u32, 3000], 1000.0, |&x| f64::from(x));
        assert_eq!((o.mean, o.n), (2.0, 2));
    }

    #[test]
    fn p90_takes_the_element_nine_tenths_in() {
        let v: Vec<f64> = (0..10).map(f64::from).collect();
        assert_eq!(p90(&v), 9.0);
        assert_eq!(p90(&v[..5]), 4.0);
        assert_eq!(p90(&[]), 0.0);
    }

    #[test]
    fn t_quantiles_and_paired_interval() {
        assert_eq!(t975(9), 2.262);
        assert!((t975(100) - 1.984).abs() < 0.01);
        assert!(t975(0).is_nan());
        let (m, h) = paired(&[1.0, 2.0, 3.0]);
        assert_eq!(m, 2.0);
        // sd = 1, n = 3: 4.303 / sqrt(3).
        assert!((h - 4.303 / 3f64.sqrt()).abs() < 1e-9);
        assert!(paired(&[1.0]).1.is_nan());
    }
}
