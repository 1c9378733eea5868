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
}
