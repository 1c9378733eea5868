//! Latency distributions: exact count, mean and max, and quantiles from a log-linear
//! histogram (64 sub-buckets per power of two, so a quantile is within 1.6% of the
//! recorded value). Per-packet latencies are recorded without storing every packet.

use serde::Serialize;

const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;

#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    buckets: Vec<u64>,
    count: u64,
    sum: u128,
    max: u64,
    min: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

fn bucket_of(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    let sub = (v >> shift) - SUB; // 0..SUB
    ((shift as u64 + 1) * SUB + sub) as usize
}

/// The upper edge of a bucket, i.e. the largest value it can hold.
fn bucket_high(b: usize) -> u64 {
    let b = b as u64;
    if b < SUB {
        return b;
    }
    let shift = b / SUB - 1;
    let sub = b % SUB;
    ((SUB + sub + 1) << shift) - 1
}

impl LatencyHistogram {
    pub fn new() -> Self {
        LatencyHistogram {
            buckets: vec![0; (64 * SUB) as usize],
            count: 0,
            sum: 0,
            max: 0,
            min: u64::MAX,
        }
    }

    pub fn record(&mut self, ns: u64) {
        self.buckets[bucket_of(ns)] += 1;
        self.count += 1;
        self.sum += ns as u128;
        self.max = self.max.max(ns);
        self.min = self.min.min(ns);
    }

    /// [`LatencyHistogram::record`] for each value, the sums kept in registers.
    pub fn record_all(&mut self, values: &[u64]) {
        let (mut sum, mut max, mut min) = (0u128, self.max, self.min);
        for &v in values {
            self.buckets[bucket_of(v)] += 1;
            sum += v as u128;
            max = max.max(v);
            min = min.min(v);
        }
        self.count += values.len() as u64;
        self.sum += sum;
        (self.max, self.min) = (max, min);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    pub fn max_ns(&self) -> u64 {
        self.max
    }

    /// The q-quantile (0..=1), reported as the upper edge of its bucket and never above
    /// the recorded maximum.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return bucket_high(b).min(self.max).max(self.min);
            }
        }
        self.max
    }

    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            packets: self.count,
            mean_us: self.mean_ns() / 1e3,
            p50_us: self.quantile_ns(0.5) as f64 / 1e3,
            p90_us: self.quantile_ns(0.9) as f64 / 1e3,
            p99_us: self.quantile_ns(0.99) as f64 / 1e3,
            p999_us: self.quantile_ns(0.999) as f64 / 1e3,
            max_us: self.max as f64 / 1e3,
            histogram: self
                .buckets
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(b, &n)| (bucket_high(b) as f64 / 1e3, n))
                .collect(),
        }
    }
}

/// A latency distribution in microseconds (source: the twin).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    pub packets: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// (upper bound of the bucket in us, packets), increasing, empty buckets left out.
    pub histogram: Vec<(f64, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_trip_within_resolution() {
        for v in [0u64, 1, 63, 64, 65, 1000, 11_700, 1 << 40, u64::MAX / 3] {
            let b = bucket_of(v);
            assert!(bucket_high(b) >= v, "{v}");
            assert!((bucket_high(b) - v) as f64 <= v as f64 / 64.0 + 1.0, "{v}");
        }
    }

    #[test]
    fn quantiles_of_uniform() {
        let mut h = LatencyHistogram::new();
        for v in 1..=10_000u64 {
            h.record(v);
        }
        assert!((h.mean_ns() - 5000.5).abs() < 1e-9);
        let p50 = h.quantile_ns(0.5) as f64;
        assert!((p50 - 5000.0).abs() / 5000.0 < 0.02, "{p50}");
        let p99 = h.quantile_ns(0.99) as f64;
        assert!((p99 - 9900.0).abs() / 9900.0 < 0.02, "{p99}");
        assert_eq!(h.quantile_ns(1.0), 10_000);
    }
}
