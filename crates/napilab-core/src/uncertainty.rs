//! Uncertainty of compared numbers: a confidence interval for the mean of repeated
//! measurements (Student's t), Welch's test for the difference of two such means, and
//! a distribution-free interval for a percentile of one sample (order statistics), and
//! an interval for a trimmed mean (Yuen) where a few measurements are far off.
//!
//! Why Student's t and not a bootstrap: the lab repeats a search 3 to 5 times, and a
//! bootstrap of 3 values only resamples those 3 values (its interval is never wider
//! than their range), which claims far more certainty than 3 repeats give. The t
//! interval assumes the repeats are independent and roughly normal; the report says so.

use serde::{Deserialize, Serialize};
use statrs::distribution::{Beta, ContinuousCDF, StudentsT};

/// A two-sided confidence interval and how it was computed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfidenceInterval {
    pub low: f64,
    pub high: f64,
    /// Confidence level, e.g. 0.95.
    pub level: f64,
    /// `student-t over N repeats`, `order statistics of N samples`, ...
    pub method: String,
}

impl ConfidenceInterval {
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }

    /// Half the width relative to the midpoint, e.g. 0.03 for +-3%.
    pub fn relative_half_width(&self) -> f64 {
        let mid = (self.low + self.high) / 2.0;
        if mid == 0.0 {
            0.0
        } else {
            (self.high - self.low) / 2.0 / mid.abs()
        }
    }
}

/// Mean and sample standard deviation (n - 1); None for an empty slice.
pub fn mean_sd(values: &[f64]) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let sd = if values.len() < 2 {
        0.0
    } else {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    };
    Some((mean, sd))
}

/// The `1 - (1 - level) / 2` quantile of Student's t with `df` degrees of freedom.
fn t_quantile(level: f64, df: f64) -> Option<f64> {
    let t = StudentsT::new(0.0, 1.0, df).ok()?;
    Some(t.inverse_cdf(1.0 - (1.0 - level) / 2.0))
}

/// Confidence interval of the mean of repeated measurements; None with fewer than two
/// finite values (one repeat says nothing about its own spread).
pub fn t_interval(values: &[f64], level: f64) -> Option<ConfidenceInterval> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.len() < 2 || !(0.0..1.0).contains(&level) {
        return None;
    }
    let (mean, sd) = mean_sd(&finite)?;
    let n = finite.len() as f64;
    let half = t_quantile(level, n - 1.0)? * sd / n.sqrt();
    Some(ConfidenceInterval {
        low: mean - half,
        high: mean + half,
        level,
        method: format!("student-t over {} repeats", finite.len()),
    })
}

/// Confidence interval of the `trim`-trimmed mean (e.g. 0.2: the lowest and highest
/// 20% left out) of paired differences or repeated measurements, by Yuen's method
/// (Yuen 1974; Wilcox, Introduction to Robust Estimation, section 4.4): the
/// winsorized variance, (1 - 2 trim) of the sample kept, Student's t with h - 1
/// degrees of freedom for the h values kept. Why not the mean: on a shared VM a
/// measurement now and then lands in a slow or fast spell of its CPU (docs/lab.md,
/// "Host speed"), and those few pairs, not the many, set the mean's standard error.
/// None with fewer than three finite values after trimming or a trim outside [0, 0.5).
pub fn trimmed_mean_interval(
    values: &[f64],
    trim: f64,
    level: f64,
) -> Option<(f64, ConfidenceInterval)> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if !(0.0..0.5).contains(&trim) || !(0.0..1.0).contains(&level) {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let g = (trim * n as f64).floor() as usize;
    let h = n.saturating_sub(2 * g);
    if h < 3 {
        return None;
    }
    let kept = &sorted[g..n - g];
    let mean = kept.iter().sum::<f64>() / h as f64;
    let (low_edge, high_edge) = (kept[0], kept[h - 1]);
    let winsorized: Vec<f64> = sorted
        .iter()
        .map(|v| v.clamp(low_edge, high_edge))
        .collect();
    let (_, winsorized_sd) = mean_sd(&winsorized)?;
    let ssd = winsorized_sd.powi(2) * (n as f64 - 1.0);
    let se = (ssd / (h as f64 * (h as f64 - 1.0))).sqrt();
    let half = t_quantile(level, h as f64 - 1.0)? * se;
    Some((
        mean,
        ConfidenceInterval {
            low: mean - half,
            high: mean + half,
            level,
            method: format!(
                "yuen, {:.0}% trimmed mean of {n} values ({h} kept)",
                100.0 * trim
            ),
        },
    ))
}

/// Whether two sets of repeats differ, by Welch's t-test (unequal variances).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// mean(b) - mean(a).
    pub delta: f64,
    /// delta / mean(a).
    pub relative: f64,
    /// Confidence interval of the difference at `level`.
    pub interval: Option<ConfidenceInterval>,
    /// Two-sided p-value; None when it cannot be computed (fewer than 2 repeats on a
    /// side, or no spread on either side with different means).
    pub p_value: Option<f64>,
    pub level: f64,
    /// `significant`, `not significant`, or `unknown (...)` with the reason.
    pub verdict: String,
}

/// Welch's test of mean(b) - mean(a) at `level` (e.g. 0.95).
pub fn welch(a: &[f64], b: &[f64], level: f64) -> Difference {
    let (ma, va, na) = moments(a);
    let (mb, vb, nb) = moments(b);
    let delta = mb - ma;
    let relative = if ma != 0.0 { delta / ma } else { f64::NAN };
    let unknown = |why: &str| Difference {
        delta,
        relative,
        interval: None,
        p_value: None,
        level,
        verdict: format!("unknown ({why})"),
    };
    if na < 2.0 || nb < 2.0 {
        return unknown("needs at least 2 repeats on each side");
    }
    let se2 = va / na + vb / nb;
    if se2 <= 0.0 {
        return if delta == 0.0 {
            Difference {
                delta,
                relative,
                interval: None,
                p_value: Some(1.0),
                level,
                verdict: "not significant".into(),
            }
        } else {
            unknown("no spread within either side")
        };
    }
    // Welch-Satterthwaite degrees of freedom.
    let df = se2.powi(2) / ((va / na).powi(2) / (na - 1.0) + (vb / nb).powi(2) / (nb - 1.0));
    let Ok(dist) = StudentsT::new(0.0, 1.0, df) else {
        return unknown("degrees of freedom out of range");
    };
    let t = delta / se2.sqrt();
    let p = 2.0 * (1.0 - dist.cdf(t.abs()));
    let half = dist.inverse_cdf(1.0 - (1.0 - level) / 2.0) * se2.sqrt();
    Difference {
        delta,
        relative,
        interval: Some(ConfidenceInterval {
            low: delta - half,
            high: delta + half,
            level,
            method: format!("welch t, {df:.1} degrees of freedom"),
        }),
        p_value: Some(p),
        level,
        verdict: if p < 1.0 - level {
            "significant".into()
        } else {
            "not significant".into()
        },
    }
}

fn moments(values: &[f64]) -> (f64, f64, f64) {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let (mean, sd) = mean_sd(&finite).unwrap_or((f64::NAN, 0.0));
    (mean, sd * sd, finite.len() as f64)
}

/// Distribution-free confidence interval of the `q` quantile (e.g. 0.99) of a sample
/// given as a histogram of (upper bound, count) buckets in increasing order: the
/// bucket bounds of the order statistics whose ranks cover the quantile with
/// probability `level` (the Clopper-Pearson bounds of the rank, as in Hahn & Meeker,
/// Statistical Intervals, section 5.2). It assumes independent samples; packet
/// latencies are correlated in bursts, so this is a lower bound on the uncertainty.
pub fn quantile_interval(
    histogram: &[(f64, u64)],
    q: f64,
    level: f64,
) -> Option<ConfidenceInterval> {
    let n: u64 = histogram.iter().map(|(_, c)| c).sum();
    if n < 2 || !(0.0..1.0).contains(&q) || !(0.0..1.0).contains(&level) {
        return None;
    }
    let alpha = 1.0 - level;
    let k = (q * n as f64).floor();
    // Clopper-Pearson interval of the proportion below the quantile, turned into ranks.
    let lo_p = if k <= 0.0 {
        0.0
    } else {
        Beta::new(k, n as f64 - k + 1.0)
            .ok()?
            .inverse_cdf(alpha / 2.0)
    };
    let hi_p = if k >= n as f64 {
        1.0
    } else {
        Beta::new(k + 1.0, n as f64 - k)
            .ok()?
            .inverse_cdf(1.0 - alpha / 2.0)
    };
    let lo_rank = ((lo_p * n as f64).floor() as u64).clamp(1, n);
    let hi_rank = ((hi_p * n as f64).ceil() as u64).clamp(1, n);
    let at_rank = |rank: u64| {
        let mut seen = 0;
        for (bound, count) in histogram {
            seen += count;
            if seen >= rank {
                return *bound;
            }
        }
        histogram.last().map_or(f64::NAN, |(b, _)| *b)
    };
    Some(ConfidenceInterval {
        low: at_rank(lo_rank),
        high: at_rank(hi_rank),
        level,
        method: format!("order statistics of {n} samples (assumes independence)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trimmed_mean_interval_without_trimming_is_the_t_interval() {
        let v = [9.0, 10.0, 10.0, 11.0, 12.5];
        let (mean, ci) = trimmed_mean_interval(&v, 0.0, 0.95).expect("interval");
        let t = t_interval(&v, 0.95).expect("t");
        assert!((mean - 10.5).abs() < 1e-12);
        assert!(
            (ci.low - t.low).abs() < 1e-9 && (ci.high - t.high).abs() < 1e-9,
            "{ci:?} {t:?}"
        );
    }

    #[test]
    fn a_trimmed_mean_interval_matches_yuens_formula_by_hand() {
        // n 10, 20% trimmed: g 2, h 6; kept 3..8, mean 5.5; winsorized
        // [3,3,3,4,5,6,7,8,8,8], mean 5.5, squared deviations 42.5;
        // se = sqrt(42.5 / (6 * 5)) = 1.1902; t(0.975, 5) = 2.5706.
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 100.0];
        let (mean, ci) = trimmed_mean_interval(&v, 0.2, 0.95).expect("interval");
        let half = 2.570_582 * (42.5f64 / 30.0).sqrt();
        assert!((mean - 5.5).abs() < 1e-12);
        assert!((ci.high - (5.5 + half)).abs() < 1e-4, "{ci:?}");
        assert!((ci.low - (5.5 - half)).abs() < 1e-4, "{ci:?}");
        assert!(trimmed_mean_interval(&v[..2], 0.2, 0.95).is_none());
        assert!(trimmed_mean_interval(&v, 0.5, 0.95).is_none());
    }

    #[test]
    fn one_far_off_pair_widens_the_mean_and_not_the_trimmed_mean() {
        // 40 pairs near 0 with a spread of about 1, and two slow spells of +-25.
        let mut v: Vec<f64> = (0..40).map(|i| ((i * 7) % 11) as f64 / 5.0 - 1.0).collect();
        v.extend([25.0, -25.0]);
        let t = t_interval(&v, 0.95).expect("t");
        let (_, trimmed) = trimmed_mean_interval(&v, 0.2, 0.95).expect("trimmed");
        assert!(
            trimmed.high - trimmed.low < 0.25 * (t.high - t.low),
            "{trimmed:?} {t:?}"
        );
    }

    #[test]
    fn t_interval_matches_the_textbook() {
        // Mean 10, sd 1, n 4: t(0.975, 3) = 3.182, half width 3.182 / 2 = 1.591.
        let ci = t_interval(&[9.0, 10.0, 10.0, 11.0], 0.95).expect("interval");
        let sd = (2.0f64 / 3.0).sqrt();
        let half = 3.182446 * sd / 2.0;
        assert!((ci.low - (10.0 - half)).abs() < 1e-4, "{ci:?}");
        assert!((ci.high - (10.0 + half)).abs() < 1e-4, "{ci:?}");
        assert!(t_interval(&[5.0], 0.95).is_none());
        assert!(t_interval(&[5.0, f64::NAN], 0.95).is_none());
    }

    #[test]
    fn t_interval_covers_the_true_mean_about_as_often_as_it_says() {
        // Deterministic pseudo-normal draws (sum of 12 uniforms - 6).
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut uniform = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut covered = 0;
        let trials = 2000;
        for _ in 0..trials {
            let v: Vec<f64> = (0..5)
                .map(|_| 100.0 + (0..12).map(|_| uniform()).sum::<f64>() - 6.0)
                .collect();
            if t_interval(&v, 0.95).expect("ci").contains(100.0) {
                covered += 1;
            }
        }
        let rate = covered as f64 / trials as f64;
        assert!((0.93..=0.97).contains(&rate), "coverage {rate}");
    }

    #[test]
    fn welch_tells_a_real_difference_from_noise() {
        let a = [100.0, 101.0, 99.0, 100.5, 99.5];
        let b = [110.0, 111.0, 109.0, 110.5, 109.5];
        let d = welch(&a, &b, 0.95);
        assert_eq!(d.verdict, "significant");
        assert!((d.delta - 10.0).abs() < 1e-9);
        assert!(d.p_value.expect("p") < 1e-6);
        let c = [100.2, 100.9, 99.1, 100.4, 99.8];
        let d = welch(&a, &c, 0.95);
        assert_eq!(d.verdict, "not significant", "{d:?}");
        let d = welch(&a, &[105.0], 0.95);
        assert!(d.verdict.starts_with("unknown"), "{d:?}");
        // Textbook check: Welch df for equal variances and sizes is 2(n-1).
        let d = welch(&[1.0, 2.0, 3.0], &[2.0, 3.0, 4.0], 0.95);
        assert!(d.interval.expect("ci").method.contains("4.0 degrees"));
    }

    #[test]
    fn quantile_interval_brackets_the_percentile() {
        // 1000 samples: 1 us .. 1000 us, one per bucket.
        let h: Vec<(f64, u64)> = (1..=1000).map(|i| (i as f64, 1)).collect();
        let ci = quantile_interval(&h, 0.5, 0.95).expect("ci");
        // Order-statistic ranks for the median of 1000 at 95%: about 469 and 531.
        assert!((460.0..=475.0).contains(&ci.low), "{ci:?}");
        assert!((525.0..=540.0).contains(&ci.high), "{ci:?}");
        let ci = quantile_interval(&h, 0.99, 0.95).expect("ci");
        assert!(
            ci.low < 990.0 && ci.high > 990.0 && ci.high <= 1000.0,
            "{ci:?}"
        );
        assert!(quantile_interval(&[(1.0, 1)], 0.5, 0.95).is_none());
    }
}
