//! How fast this machine's CPUs ran the same work over a stretch of time (docs/lab.md,
//! "Host speed"). On a shared VM the hypervisor's other guests slow a vCPU without any
//! steal showing: the guest sees its own thread on the CPU the whole time, only slower.
//! A trial cannot be steadier than the CPU it ran on, so a lab run measures this and
//! says how far its intervals are the host's.
//!
//! The probe (napilab-probe `host_speed`) fills this; this module only summarises.

use serde::{Deserialize, Serialize};

/// Timed repetitions of one fixed piece of work on one CPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostSpeed {
    /// When in a run it was measured, e.g. `run start`.
    pub when: String,
    /// The CPU the work ran on (pinned).
    pub cpu: u32,
    /// The length of one sample, ms.
    pub sample_ms: f64,
    /// Per sample: ns of the thread's own CPU time per unit of work (steal and time
    /// off the CPU excluded), in the order measured.
    pub ns_per_unit: Vec<f64>,
}

/// The spread of a [`HostSpeed`]: each sample as a slowdown against the fastest.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpeedSpread {
    pub samples: usize,
    /// The fastest sample, ns per unit.
    pub fastest_ns: f64,
    /// Median and 90th percentile of sample / fastest (1.0 = as fast as the fastest).
    pub median_slowdown: f64,
    pub p90_slowdown: f64,
    pub slowest_slowdown: f64,
    /// Share of samples more than [`SLOW_SAMPLE`] times the fastest.
    pub slow_share: f64,
}

/// A sample this much slower than the fastest counts as slow: the ±5% a maximum's
/// interval is asked to hold, plus as much again for the probe's own noise.
pub const SLOW_SAMPLE: f64 = 1.10;

/// The `q` quantile of `sorted` (ascending, not empty) by nearest rank: a sample that
/// was measured, not an interpolation between two.
pub fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize]
}

impl HostSpeed {
    /// `None` without samples (or with nothing positive to divide by).
    pub fn spread(&self) -> Option<SpeedSpread> {
        let mut v: Vec<f64> = self
            .ns_per_unit
            .iter()
            .copied()
            .filter(|x| x.is_finite() && *x > 0.0)
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let fastest = v[0];
        let at = |q: f64| nearest_rank(&v, q) / fastest;
        Some(SpeedSpread {
            samples: v.len(),
            fastest_ns: fastest,
            median_slowdown: at(0.5),
            p90_slowdown: at(0.9),
            slowest_slowdown: v[v.len() - 1] / fastest,
            slow_share: v.iter().filter(|x| **x > SLOW_SAMPLE * fastest).count() as f64
                / v.len() as f64,
        })
    }

    /// One line: "run start, CPU 1, 50 samples of 200 ms: median 1.31x the fastest, p90 1.62x,
    /// slowest 2.18x; 64% of samples more than 1.10x".
    pub fn summary(&self) -> String {
        match self.spread() {
            None => format!("{}CPU {}: no sample", self.prefix(), self.cpu),
            Some(s) => format!(
                "{}CPU {}, {} samples of {:.0} ms: median {:.2}x the fastest, p90 {:.2}x, slowest {:.2}x; {:.0}% of samples more than {:.2}x",
                self.prefix(),
                self.cpu,
                s.samples,
                self.sample_ms,
                s.median_slowdown,
                s.p90_slowdown,
                s.slowest_slowdown,
                100.0 * s.slow_share,
                SLOW_SAMPLE
            ),
        }
    }

    fn prefix(&self) -> String {
        if self.when.is_empty() {
            String::new()
        } else {
            format!("{}, ", self.when)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_is_against_the_fastest_sample() {
        let speed = HostSpeed {
            when: "run start".into(),
            cpu: 1,
            sample_ms: 200.0,
            ns_per_unit: vec![100.0, 200.0, 105.0, 130.0, 100.0],
        };
        let s = speed.spread().expect("samples");
        assert_eq!(s.samples, 5);
        assert_eq!(s.fastest_ns, 100.0);
        assert!((s.median_slowdown - 1.05).abs() < 1e-9, "{s:?}");
        assert!((s.slowest_slowdown - 2.0).abs() < 1e-9, "{s:?}");
        assert!((s.slow_share - 0.4).abs() < 1e-9, "{s:?}");
        let line = speed.summary();
        assert!(
            line.starts_with("run start, CPU 1, 5 samples of 200 ms"),
            "{line}"
        );
        assert!(line.contains("40% of samples more than 1.10x"), "{line}");
    }

    #[test]
    fn no_usable_sample_gives_no_spread() {
        let speed = HostSpeed {
            ns_per_unit: vec![0.0, f64::NAN],
            ..Default::default()
        };
        assert_eq!(speed.spread(), None);
        assert!(speed.summary().contains("no sample"));
    }
}
