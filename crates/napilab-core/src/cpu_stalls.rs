//! How much of a CPU a thread that never sleeps does not get, and in what pieces
//! (napilab-probe `stalls` measures it; docs/observation.md, "CPU stalls"). The kernel's
//! interrupts (the tick, timers, IPIs) take a running thread's CPU for a moment; on a
//! virtual machine each of them may also be an exit to the hypervisor, and the
//! hypervisor may run something else, and only the last is counted as steal.

use serde::{Deserialize, Serialize};

/// Gaps of at least this long count as stalls: longer than any clock read or cache
/// miss, shorter than the cheapest interrupt on a VM.
pub const STALL_MIN_NS: u64 = 5_000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuStalls {
    pub cpu: u32,
    /// The probe's length, seconds.
    pub seconds: f64,
    /// Stalls (gaps of at least [`STALL_MIN_NS`] between consecutive clock reads of the
    /// spinning thread) per second.
    pub per_s: f64,
    /// The share of the time they took.
    pub stalled_share: f64,
    /// The share of the same time /proc/stat counted as steal on the CPU.
    pub steal_share: f64,
    /// The longest stall, ns.
    pub longest_ns: u64,
    /// Stalls by length: `counts[i]` lasted [2^i, 2^(i+1)) ns (below 2^13 none are
    /// counted; the last bucket holds everything longer).
    pub counts: Vec<u64>,
}

impl CpuStalls {
    /// One line: the share lost, how often, the typical and longest stall, beside the
    /// steal /proc/stat counted.
    pub fn summary(&self) -> String {
        let typical = self.typical_ns().map_or(String::new(), |(lo, hi)| {
            format!(
                ", most of it in stalls of {:.0}-{:.0} us",
                lo as f64 / 1e3,
                hi as f64 / 1e3
            )
        });
        format!(
            "CPU {}: a spinning thread did not get {:.2}% of {:.1} s, in {:.0} stalls a second{typical}, the longest {:.0} us; /proc/stat counted {:.2}% steal",
            self.cpu,
            self.stalled_share * 100.0,
            self.seconds,
            self.per_s,
            self.longest_ns as f64 / 1e3,
            self.steal_share * 100.0
        )
    }

    /// This probe and `other` (the same CPU, another stretch of time) as one.
    pub fn merged(&self, other: &CpuStalls) -> CpuStalls {
        let seconds = self.seconds + other.seconds;
        let weighted = |a: f64, b: f64| {
            if seconds > 0.0 {
                (a * self.seconds + b * other.seconds) / seconds
            } else {
                0.0
            }
        };
        let n = self.counts.len().max(other.counts.len());
        let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
        CpuStalls {
            cpu: self.cpu,
            seconds,
            per_s: weighted(self.per_s, other.per_s),
            stalled_share: weighted(self.stalled_share, other.stalled_share),
            steal_share: weighted(self.steal_share, other.steal_share),
            longest_ns: self.longest_ns.max(other.longest_ns),
            counts: (0..n)
                .map(|i| at(&self.counts, i) + at(&other.counts, i))
                .collect(),
        }
    }

    /// The lengths with most of the stalled time: the range of log2 buckets, from the
    /// largest, that holds at least half of it; (low, high) ns. None without stalls.
    pub fn typical_ns(&self) -> Option<(u64, u64)> {
        let weight = |i: usize| self.counts[i] as f64 * (1u64 << i) as f64 * 1.5;
        let total: f64 = (0..self.counts.len()).map(weight).sum();
        if total <= 0.0 {
            return None;
        }
        let mut order: Vec<usize> = (0..self.counts.len())
            .filter(|&i| self.counts[i] > 0)
            .collect();
        order.sort_by(|&a, &b| weight(b).total_cmp(&weight(a)));
        let (mut got, mut low, mut high) = (0.0, usize::MAX, 0);
        for i in order {
            got += weight(i);
            low = low.min(i);
            high = high.max(i);
            if got >= total / 2.0 {
                break;
            }
        }
        Some((1u64 << low, 1u64 << (high + 1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typical_stall_is_where_most_of_the_time_went() {
        let mut counts = vec![0u64; 24];
        counts[13] = 100; // 8-16 us: many but short
        counts[16] = 900; // 65-131 us: most of the time
        counts[19] = 1; // one 0.5 ms
        let s = CpuStalls {
            cpu: 0,
            seconds: 1.0,
            per_s: 1001.0,
            stalled_share: 0.09,
            steal_share: 0.0,
            longest_ns: 600_000,
            counts,
        };
        assert_eq!(s.typical_ns(), Some((65_536, 131_072)));
        let none = CpuStalls {
            counts: vec![0; 24],
            ..s
        };
        assert_eq!(none.typical_ns(), None);
    }

    #[test]
    fn merged_probes_add_their_stalls_and_weigh_their_rates_by_time() {
        let a = CpuStalls {
            cpu: 1,
            seconds: 1.0,
            per_s: 10.0,
            stalled_share: 0.01,
            steal_share: 0.0,
            longest_ns: 2_000_000,
            counts: vec![0, 4, 6],
        };
        let b = CpuStalls {
            seconds: 3.0,
            per_s: 30.0,
            stalled_share: 0.05,
            steal_share: 0.02,
            longest_ns: 1_000_000,
            counts: vec![1, 89],
            ..a.clone()
        };
        let m = a.merged(&b);
        assert_eq!(m.seconds, 4.0);
        assert_eq!(m.counts, vec![1, 93, 6]);
        assert_eq!(m.longest_ns, 2_000_000);
        assert!((m.per_s - 25.0).abs() < 1e-9, "{}", m.per_s);
        assert!((m.stalled_share - 0.04).abs() < 1e-9);
        assert!((m.steal_share - 0.015).abs() < 1e-9);
    }
}
