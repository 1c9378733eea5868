//! Latency distributions: exact count, mean and max, and quantiles from a log-linear
//! histogram (64 sub-buckets per power of two, so a quantile is within 1.6% of the
//! recorded value). Per-packet latencies are recorded without storing every packet.

use serde::Serialize;

const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = (64 * SUB) as usize;
/// Counters per bucket: `record_all` spreads consecutive values over them.
const LANES: usize = 4;

#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    /// `LANES` counters per bucket, `[bucket * LANES + lane]`; a bucket's count is
    /// their sum (see `record_all`).
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

#[inline(always)]
fn bucket_of(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    if v < 1 << 53 {
        // v is exact as an f64, whose biased exponent is 1023 + the index of v's top
        // bit and whose next SUB_BITS mantissa bits are the sub-bucket: one
        // conversion and a shift give bucket_of_bits's answer without a bit scan.
        let bits = ((v as i64) as f64).to_bits() >> (52 - SUB_BITS);
        return (bits - ((1023 + SUB_BITS as u64 - 1) << SUB_BITS)) as usize;
    }
    bucket_of_bits(v)
}

/// The bucket of `v >= SUB` from its top bit: the top bit's index selects the power
/// of two, the SUB_BITS bits below it the sub-bucket.
fn bucket_of_bits(v: u64) -> usize {
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
            buckets: vec![0; BUCKETS * LANES],
            count: 0,
            sum: 0,
            max: 0,
            min: u64::MAX,
        }
    }

    pub fn record(&mut self, ns: u64) {
        self.buckets[bucket_of(ns) * LANES] += 1;
        self.count += 1;
        self.sum += ns as u128;
        self.max = self.max.max(ns);
        self.min = self.min.min(ns);
    }

    /// [`LatencyHistogram::record`] for each value, the sums kept in registers.
    /// Consecutive packets of a queue mostly fall in the same bucket, and adding one
    /// to the same memory word packet after packet is a chain of dependent
    /// load-add-stores (several cycles each); the i-th value goes to the bucket's
    /// counter `i mod LANES`, so LANES chains run side by side, with no branch on
    /// whether the bucket changed (mispredicted whenever it does).
    pub fn record_all(&mut self, values: &[u64]) {
        let (mut sum, mut max, mut min) = (0u128, self.max, self.min);
        for (i, &v) in values.iter().enumerate() {
            self.buckets[bucket_of(v) * LANES + i % LANES] += 1;
            sum += v as u128;
            max = max.max(v);
            min = min.min(v);
        }
        self.count += values.len() as u64;
        self.sum += sum;
        (self.max, self.min) = (max, min);
    }

    /// Count per bucket, lanes added.
    fn bucket_counts(&self) -> impl Iterator<Item = u64> + '_ {
        self.buckets.chunks_exact(LANES).map(|l| l.iter().sum())
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
        for (b, n) in self.bucket_counts().enumerate() {
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
                .bucket_counts()
                .enumerate()
                .filter(|&(_, n)| n > 0)
                .map(|(b, n)| (bucket_high(b) as f64 / 1e3, n))
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
    fn float_bucket_is_bit_bucket() {
        let mut r = crate::rng::Rng::new(3, 3);
        for k in 6..64 {
            for v in [1u64 << k, (1u64 << k) - 1, (1u64 << k) + 1] {
                if v >= SUB {
                    assert_eq!(bucket_of(v), bucket_of_bits(v), "{v}");
                }
            }
        }
        for _ in 0..100_000 {
            let v = r.next_u64() >> (r.next_u64() % 64);
            if v >= SUB {
                assert_eq!(bucket_of(v), bucket_of_bits(v), "{v}");
            }
        }
    }

    #[test]
    fn record_all_is_record_each() {
        let vals: Vec<u64> = (0..5_000u64)
            .map(|i| (i * 7_919) % 3_000 + i * 13 + (i % 5) * 100_000)
            .chain([0, 1, 63, 64, u64::MAX / 2])
            .collect();
        let (mut a, mut b) = (LatencyHistogram::new(), LatencyHistogram::new());
        for &v in &vals {
            a.record(v);
        }
        for chunk in vals.chunks(37) {
            b.record_all(chunk);
        }
        b.record_all(&[]);
        assert!(a.bucket_counts().eq(b.bucket_counts()));
        assert_eq!(
            (a.count, a.sum, a.max, a.min),
            (b.count, b.sum, b.max, b.min)
        );
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
