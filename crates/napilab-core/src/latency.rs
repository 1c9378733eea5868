//! Latency distributions, one kind for every source: the lab's sink and request
//! workloads record into a [`LatencyHistogram`], and so does the twin, and both report
//! a [`LatencySummary`].
//!
//! The histogram is an HDR histogram (the `hdrhistogram` crate) over nanoseconds from
//! 0 to [`MAX_TRACKABLE_NS`]; the count, mean, minimum and maximum are kept exactly
//! beside it. A quantile is the upper edge of its bucket (the largest value the bucket
//! holds: never better than measured), capped at the recorded maximum. With the default
//! [`SIGNIFICANT_DIGITS`] a bucket is at most 1/128 of its values wide (within 0.8%);
//! [`LatencyHistogram::with_digits`] takes 3 for 0.1%.

use serde::{Deserialize, Serialize};

/// Highest latency a histogram holds (60 s); longer ones are recorded as 60 s and
/// counted in [`LatencyHistogram::above_range`] (the maximum stays exact).
pub const MAX_TRACKABLE_NS: u64 = 60_000_000_000;
/// Significant decimal digits of [`LatencyHistogram::new`]: 2, so each power of two
/// is split into 128 buckets.
pub const SIGNIFICANT_DIGITS: u8 = 2;

/// A latency recorder in nanoseconds. [`LatencyHistogram::merge`] adds two of the same
/// precision up exactly (one per thread, then merged).
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist: hdrhistogram::Histogram<u64>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
    above_range: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// A histogram with [`SIGNIFICANT_DIGITS`].
    pub fn new() -> Self {
        Self::with_digits(SIGNIFICANT_DIGITS)
    }

    /// A histogram whose buckets keep `digits` significant decimal digits (1 to 5).
    pub fn with_digits(digits: u8) -> Self {
        let digits = digits.clamp(1, 5);
        LatencyHistogram {
            hist: hdrhistogram::Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, digits).expect(
                "constant bounds hdrhistogram accepts: low >= 1, high >= 2 low, digits <= 5",
            ),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
            above_range: 0,
        }
    }

    // Inline: the twin records every packet, and is optimised in test builds where
    // this crate is not (Cargo.toml, profile.dev.package.napilab-sim).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        if ns > MAX_TRACKABLE_NS {
            self.above_range += 1;
        }
        self.hist.saturating_record(ns.min(MAX_TRACKABLE_NS));
        self.count += 1;
        self.sum += u128::from(ns);
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
    }

    /// [`LatencyHistogram::record`] for each value.
    #[inline]
    pub fn record_all(&mut self, values: &[u64]) {
        for &v in values {
            self.record(v);
        }
    }

    /// Adds `other`'s samples. Histograms of the same precision share their buckets,
    /// so no sample moves; with different ones, `other`'s are re-recorded at its
    /// buckets' upper edges.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        if self.hist.add(&other.hist).is_err() {
            for v in other.hist.iter_recorded() {
                self.hist
                    .saturating_record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.above_range += other.above_range;
    }

    pub fn samples(&self) -> u64 {
        self.count
    }

    /// Samples above [`MAX_TRACKABLE_NS`] (recorded as that).
    pub fn above_range(&self) -> u64 {
        self.above_range
    }

    /// The exact mean, ns (0 without samples).
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// The exact maximum, ns (0 without samples).
    pub fn max_ns(&self) -> u64 {
        self.max
    }

    /// The q-quantile (0 to 1), ns: the upper edge of its bucket, within the recorded
    /// minimum and maximum (0 without samples).
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        self.hist
            .value_at_quantile(q)
            .min(self.max)
            .max(self.min.min(MAX_TRACKABLE_NS))
    }

    /// The q-quantile in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.quantile_ns(q) as f64 / 1e3
    }

    /// (upper edge of the bucket in us, samples) of every non-empty bucket, increasing.
    pub fn buckets_us(&self) -> Vec<(f64, u64)> {
        self.hist
            .iter_recorded()
            .map(|v| (v.value_iterated_to() as f64 / 1e3, v.count_at_value()))
            .collect()
    }

    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            samples: self.count,
            mean_us: self.mean_ns() / 1e3,
            p50_us: self.quantile_us(0.50),
            p90_us: self.quantile_us(0.90),
            p99_us: self.quantile_us(0.99),
            p999_us: self.quantile_us(0.999),
            max_us: self.max as f64 / 1e3,
            histogram: self.buckets_us(),
        }
    }
}

/// A latency distribution in microseconds, from the lab (one-way or request latency)
/// or the twin. Stored in run records: older records said `packets` for `samples`
/// (the twin's output) or carried no `histogram` (request percentiles); both load.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    #[serde(alias = "packets")]
    pub samples: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// (upper bound of the bucket in us, count), increasing bounds, empty buckets left
    /// out.
    #[serde(default)]
    pub histogram: Vec<(f64, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_uniform_within_resolution() {
        let mut h = LatencyHistogram::new();
        for v in 1..=10_000u64 {
            h.record(v);
        }
        assert!((h.mean_ns() - 5000.5).abs() < 1e-9);
        for (q, want) in [(0.5, 5000.0), (0.9, 9000.0), (0.99, 9900.0)] {
            let got = h.quantile_ns(q) as f64;
            assert!(
                got >= want && (got - want) / want <= 1.0 / 128.0,
                "{q}: {got}"
            );
        }
        assert_eq!(h.quantile_ns(1.0), 10_000);
        assert_eq!(h.max_ns(), 10_000);
    }

    #[test]
    fn percentiles_of_microsecond_samples() {
        let mut h = LatencyHistogram::new();
        // 1..=1000 us, one sample each, half a microsecond below the whole.
        for us in 1..=1000u64 {
            h.record(us * 1000 - 500);
        }
        let s = h.summary();
        assert_eq!(s.samples, 1000);
        assert!((s.mean_us - 500.0).abs() < 1e-9, "{}", s.mean_us);
        assert_eq!(s.max_us, 999.5);
        for (got, want) in [
            (s.p50_us, 499.5),
            (s.p90_us, 899.5),
            (s.p99_us, 989.5),
            (s.p999_us, 998.5),
        ] {
            assert!(got >= want && got - want <= want / 128.0, "{got} vs {want}");
        }
        assert_eq!(h.quantile_us(1.0), 999.5, "capped at the maximum");
        assert_eq!(s.histogram.iter().map(|(_, n)| n).sum::<u64>(), 1000);
        assert!(s.histogram.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn above_the_range_is_counted_and_the_maximum_stays_exact() {
        let mut h = LatencyHistogram::new();
        for _ in 0..999 {
            h.record(10_000);
        }
        h.record(75_000_000_000); // 75 s
        assert_eq!(h.above_range(), 1);
        let s = h.summary();
        assert_eq!(s.max_us, 75_000_000.0);
        assert!(s.p999_us >= 10.0 && s.p999_us <= 10.0 * (1.0 + 1.0 / 128.0));
        assert!(h.quantile_us(1.0) >= 60_000_000.0);
        assert_eq!(LatencyHistogram::new().summary(), LatencySummary::default());
    }

    #[test]
    fn merge_adds_exactly() {
        let (mut a, mut b, mut all) = (
            LatencyHistogram::with_digits(3),
            LatencyHistogram::with_digits(3),
            LatencyHistogram::with_digits(3),
        );
        for v in 0..5_000u64 {
            let x = (v * 7_919) % 300_000;
            if v % 2 == 0 { &mut a } else { &mut b }.record(x);
            all.record(x);
        }
        a.merge(&b);
        assert_eq!(a.summary(), all.summary());
        let mut coarse = LatencyHistogram::new();
        coarse.merge(&all);
        assert_eq!(coarse.samples(), all.samples());
        assert_eq!(coarse.max_ns(), all.max_ns());
    }

    #[test]
    fn old_shapes_load() {
        // The twin's summary said `packets`; request percentiles had no histogram.
        let twin: LatencySummary = serde_json::from_str(
            r#"{"packets":3,"mean_us":1.5,"p50_us":1.0,"p90_us":2.0,"p99_us":2.0,"p999_us":2.0,"max_us":2.0,"histogram":[[1.0,1],[2.0,2]]}"#,
        )
        .expect("twin shape");
        assert_eq!(twin.samples, 3);
        assert_eq!(twin.histogram, vec![(1.0, 1), (2.0, 2)]);
        let request: LatencySummary = serde_json::from_str(
            r#"{"samples":9,"mean_us":4.0,"p50_us":3.0,"p90_us":5.0,"p95_us":5.5,"p99_us":6.0,"p999_us":7.0,"max_us":8.0,"above_range":0}"#,
        )
        .expect("request shape");
        assert_eq!((request.samples, request.p99_us), (9, 6.0));
        assert!(request.histogram.is_empty());
    }

    #[test]
    fn a_stored_class_result_loads() {
        // A class of a run.json written before the summary moved here.
        let class: crate::ClassResult = serde_json::from_str(
            r#"{"name":"be","packet_bytes":64,"sent":1000,"received":998,"reordered":0,
                "loss_counters":[["dut-in rx_dropped",2]],
                "latency":{"samples":998,"mean_us":12.5,"p50_us":11.0,"p90_us":15.0,
                           "p99_us":31.0,"p999_us":44.0,"max_us":47.25,
                           "histogram":[[11.0,600],[15.0,300],[31.0,88],[47.25,10]]}}"#,
        )
        .expect("old class result");
        let l = class.latency.expect("latency");
        assert_eq!((l.samples, l.p99_us, l.max_us), (998, 31.0, 47.25));
        assert_eq!(l.histogram.len(), 4);
    }
}
