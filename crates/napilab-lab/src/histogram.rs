//! The sink's one-way latency histogram: microsecond buckets up to 1 ms, then
//! 10 us to 10 ms, 100 us to 100 ms, 1 ms to 10 s; above that one overflow bucket. The
//! mean and the maximum are exact; percentiles are the upper bound of their bucket
//! (never better than measured), capped at the maximum.

use napilab_core::LatencySummary;

const TIERS: [(u64, u64); 4] = [
    (1_000, 1),
    (10_000, 10),
    (100_000, 100),
    (10_000_000, 1_000),
];

#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    overflow: u64,
    samples: u64,
    sum_ns: u128,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

fn n_buckets() -> usize {
    let mut n = 0;
    let mut lo = 0;
    for (hi, w) in TIERS {
        n += ((hi - lo) / w) as usize;
        lo = hi;
    }
    n
}

/// Bucket of a latency in microseconds; None above the last tier.
fn bucket(us: u64) -> Option<usize> {
    let mut base = 0usize;
    let mut lo = 0;
    for (hi, w) in TIERS {
        if us < hi {
            return Some(base + ((us - lo) / w) as usize);
        }
        base += ((hi - lo) / w) as usize;
        lo = hi;
    }
    None
}

/// Upper bound (exclusive) of bucket `i`, microseconds.
fn upper(i: usize) -> u64 {
    let mut base = 0usize;
    let mut lo = 0;
    for (hi, w) in TIERS {
        let n = ((hi - lo) / w) as usize;
        if i < base + n {
            return lo + (i - base + 1) as u64 * w;
        }
        base += n;
        lo = hi;
    }
    u64::MAX
}

impl Histogram {
    pub fn new() -> Self {
        Histogram {
            counts: vec![0; n_buckets()],
            overflow: 0,
            samples: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }

    pub fn record_ns(&mut self, ns: u64) {
        self.samples += 1;
        self.sum_ns += u128::from(ns);
        self.max_ns = self.max_ns.max(ns);
        match bucket(ns / 1000) {
            Some(b) => self.counts[b] += 1,
            None => self.overflow += 1,
        }
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The latency (us) at quantile `q` (0 to 1).
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.samples == 0 {
            return 0.0;
        }
        let max_us = self.max_ns as f64 / 1000.0;
        let rank = ((q * self.samples as f64).ceil() as u64).clamp(1, self.samples);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return (upper(i) as f64).min(max_us);
            }
        }
        max_us
    }

    pub fn summary(&self) -> LatencySummary {
        let mut histogram: Vec<(f64, u64)> = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (upper(i) as f64, *c))
            .collect();
        if self.overflow > 0 {
            histogram.push((self.max_ns as f64 / 1000.0, self.overflow));
        }
        LatencySummary {
            samples: self.samples,
            mean_us: if self.samples == 0 {
                0.0
            } else {
                self.sum_ns as f64 / self.samples as f64 / 1000.0
            },
            p50_us: self.quantile_us(0.50),
            p90_us: self.quantile_us(0.90),
            p99_us: self.quantile_us(0.99),
            p999_us: self.quantile_us(0.999),
            max_us: self.max_ns as f64 / 1000.0,
            histogram,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous() {
        for us in [
            0, 1, 999, 1000, 1009, 1010, 9999, 10_000, 99_999, 100_000, 9_999_999,
        ] {
            let b = bucket(us).expect("in range");
            assert!(upper(b) > us, "{us} -> bucket {b} upper {}", upper(b));
            if b > 0 {
                assert!(upper(b - 1) <= us, "{us}");
            }
        }
        assert_eq!(bucket(10_000_000), None);
    }

    #[test]
    fn percentiles_of_a_uniform_distribution() {
        let mut h = Histogram::new();
        // 1..=1000 us, one sample each.
        for us in 1..=1000u64 {
            h.record_ns(us * 1000 - 500);
        }
        let s = h.summary();
        assert_eq!(s.samples, 1000);
        assert_eq!(s.p50_us, 500.0);
        assert_eq!(s.p90_us, 900.0);
        assert_eq!(s.p99_us, 990.0);
        assert_eq!(s.p999_us, 999.0);
        assert!((s.mean_us - 500.0).abs() < 1e-9, "{}", s.mean_us);
        assert_eq!(s.max_us, 999.5);
    }

    #[test]
    fn tail_and_overflow() {
        let mut h = Histogram::new();
        for _ in 0..999 {
            h.record_ns(10_000); // 10 us
        }
        h.record_ns(25_000_000_000); // 25 s: overflow
        let s = h.summary();
        assert_eq!(s.p50_us, 11.0);
        assert_eq!(s.p99_us, 11.0);
        assert_eq!(s.p999_us, 11.0);
        assert_eq!(s.max_us, 25_000_000.0);
        assert_eq!(h.quantile_us(1.0), 25_000_000.0);
        assert_eq!(s.histogram.last(), Some(&(25_000_000.0, 1)));
        let mut e = Histogram::new();
        e.record_ns(2_345_000); // 2.345 ms -> bucket [2340, 2350)
        assert_eq!(e.quantile_us(0.5), 2345.0);
    }
}
