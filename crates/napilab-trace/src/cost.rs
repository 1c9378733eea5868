//! What napilab's own BPF programs cost while it observes (docs/trace.md, "What
//! observing costs"): the kernel's run-time statistics (`BPF_ENABLE_STATS`, on for as
//! long as the meter lives; no sysctl is changed) give each program's runs and run time,
//! read from the programs' fdinfo at the start and the end.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::Instant;

use napilab_core::TraceCost;

use crate::always_on::enable_run_time_stats;

/// Per program: (name, runs, run time in ns), as `AlwaysOn::program_costs` and
/// `PacketTrace::program_costs` return them.
pub type ProgramCosts = Vec<(String, u64, u64)>;

/// The statistics, on while it lives, and the counters when they were turned on.
pub struct CostMeter {
    _stats: OwnedFd,
    started: Instant,
    before: ProgramCosts,
}

impl CostMeter {
    /// Turns the statistics on. `before`: the programs' counters now (they only count
    /// while some process holds the statistics on, so they may already be non-zero).
    pub fn start(before: ProgramCosts) -> Result<CostMeter, String> {
        let stats = enable_run_time_stats().ok_or_else(|| {
            "the kernel refused BPF_ENABLE_STATS (needs CAP_SYS_ADMIN and Linux 5.8): the programs' own cost is not shown".to_string()
        })?;
        Ok(CostMeter {
            _stats: stats,
            started: Instant::now(),
            before,
        })
    }

    /// The cost since `start`, from the programs' counters now (packets unknown yet).
    pub fn cost(&self, after: &ProgramCosts) -> TraceCost {
        let (runs, run_ns) = cost_delta(&self.before, after);
        let seconds = self.started.elapsed().as_secs_f64();
        TraceCost {
            seconds,
            runs,
            run_ns,
            cpu_share: if seconds > 0.0 {
                run_ns as f64 / (seconds * 1e9)
            } else {
                0.0
            },
            packets: 0,
            ns_per_packet: None,
            packet_duty: None,
        }
    }
}

/// Runs and run time between two readings, matched by program name (a program only
/// in `after` counts from zero).
pub fn cost_delta(before: &ProgramCosts, after: &ProgramCosts) -> (u64, u64) {
    let earlier: BTreeMap<&str, (u64, u64)> = before
        .iter()
        .map(|(n, r, t)| (n.as_str(), (*r, *t)))
        .collect();
    after.iter().fold((0, 0), |(runs, ns), (name, r, t)| {
        let (r0, t0) = earlier.get(name.as_str()).copied().unwrap_or((0, 0));
        (runs + r.saturating_sub(r0), ns + t.saturating_sub(t0))
    })
}

/// Sets the packets and the cost per packet.
pub trait WithPackets {
    fn with_packets(self, packets: u64) -> Self;
}

impl WithPackets for TraceCost {
    fn with_packets(mut self, packets: u64) -> TraceCost {
        self.packets = packets;
        self.ns_per_packet = (packets > 0).then(|| self.run_ns as f64 / packets as f64);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_match_programs_by_name() {
        let before = vec![("a".to_string(), 10, 1000), ("b".to_string(), 5, 500)];
        let after = vec![
            ("b".to_string(), 7, 800),
            ("a".to_string(), 20, 3000),
            ("c".to_string(), 1, 50),
        ];
        assert_eq!(cost_delta(&before, &after), (10 + 2 + 1, 2000 + 300 + 50));
    }

    #[test]
    fn per_packet_cost() {
        let cost = TraceCost {
            seconds: 1.0,
            runs: 10,
            run_ns: 1000,
            cpu_share: 1e-6,
            packets: 0,
            ns_per_packet: None,
            packet_duty: None,
        };
        assert_eq!(cost.clone().with_packets(0).ns_per_packet, None);
        assert_eq!(cost.with_packets(100).ns_per_packet, Some(10.0));
    }
}
