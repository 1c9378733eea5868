//! How long a thread woken onto a CPU waited before it ran, measured on a live host
//! (napilab-probe `wake_up_latency`). A NAPI kthread that is woken for every batch of
//! packets waits this long each time, and the packets arriving meanwhile make its
//! batches: `napilab tune plan --predict` uses it as the twin's kthread wake-up delay
//! (docs/tune.md, "Predict before you tune").

use serde::{Deserialize, Serialize};

use crate::host_speed::nearest_rank;

/// Wake-ups of a thread parked on one CPU, each from a thread on another CPU after the
/// target had been left idle for a while.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WakeUpLatency {
    /// The CPU the woken thread was pinned to.
    pub cpu: u32,
    /// The CPU the waking thread ran on.
    pub waker_cpu: u32,
    /// How long the target was left idle before each wake-up, us.
    pub idle_us: f64,
    /// Per wake-up, ns from just before the wake-up call to the woken thread running,
    /// in the order measured (CLOCK_MONOTONIC, one clock for both CPUs).
    pub delays_ns: Vec<f64>,
}

impl WakeUpLatency {
    /// The median delay, ns; None without samples.
    pub fn median_ns(&self) -> Option<f64> {
        self.quantile_ns(0.5)
    }

    /// The `q` quantile of the delays (nearest rank), ns; None without samples.
    pub fn quantile_ns(&self, q: f64) -> Option<f64> {
        let mut sorted: Vec<f64> = self
            .delays_ns
            .iter()
            .copied()
            .filter(|d| d.is_finite())
            .collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        Some(nearest_rank(&sorted, q))
    }

    /// The share of the wake-ups that took longer than `ns`; None without samples.
    pub fn share_over(&self, ns: f64) -> Option<f64> {
        (!self.delays_ns.is_empty()).then(|| {
            self.delays_ns.iter().filter(|&&d| d > ns).count() as f64 / self.delays_ns.len() as f64
        })
    }

    /// One line: where, the median, p90, p99, the share over 1 ms and the slowest.
    pub fn summary(&self) -> String {
        let us = |q: f64| self.quantile_ns(q).map_or(f64::NAN, |ns| ns / 1e3);
        format!(
            "CPU {} woken from CPU {} after {:.0} us idle: median {:.1} us, p90 {:.1} us, p99 {:.1} us, {:.2}% over 1 ms, slowest {:.1} us ({} wake-ups)",
            self.cpu,
            self.waker_cpu,
            self.idle_us,
            us(0.5),
            us(0.9),
            us(0.99),
            self.share_over(1e6).unwrap_or(f64::NAN) * 100.0,
            us(1.0),
            self.delays_ns.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_samples_and_none_without_any() {
        let w = WakeUpLatency {
            delays_ns: vec![9_000.0, 1_000.0, 5_000.0, f64::NAN, 3_000.0, 7_000.0],
            ..WakeUpLatency::default()
        };
        // Five finite delays: the median is the third, NaN left out.
        assert_eq!(w.median_ns(), Some(5_000.0));
        assert_eq!(w.quantile_ns(0.0), Some(1_000.0));
        assert_eq!(w.quantile_ns(1.0), Some(9_000.0));
        assert_eq!(WakeUpLatency::default().median_ns(), None);
    }

    #[test]
    fn the_summary_names_the_share_of_long_wake_ups() {
        let mut delays_ns = vec![40_000.0; 996];
        delays_ns.extend([2_000_000.0, 3_000_000.0, 5_000_000.0, 900_000.0]);
        let w = WakeUpLatency {
            cpu: 1,
            waker_cpu: 0,
            idle_us: 100.0,
            delays_ns,
        };
        assert_eq!(w.share_over(1e6), Some(0.003));
        let s = w.summary();
        assert!(s.contains("median 40.0 us"), "{s}");
        assert!(s.contains("0.30% over 1 ms"), "{s}");
        assert!(s.contains("slowest 5000.0 us (1000 wake-ups)"), "{s}");
        assert_eq!(WakeUpLatency::default().share_over(1e6), None);
    }
}
