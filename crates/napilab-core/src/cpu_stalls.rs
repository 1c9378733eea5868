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
}
