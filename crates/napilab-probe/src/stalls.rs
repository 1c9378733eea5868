//! How much of a CPU a thread that never sleeps does not get (napilab-core
//! `CpuStalls`): a thread pinned to the CPU reads CLOCK_MONOTONIC in a tight loop for a
//! while, and every gap between two reads of at least `STALL_MIN_NS` is time the CPU
//! spent elsewhere: an interrupt and its softirqs, and on a VM the exits they cause and
//! whatever the hypervisor ran meanwhile. /proc/stat's steal for the CPU over the same
//! time is read beside it: steal counts only what the hypervisor says it ran instead,
//! not the exits themselves. As `sysjitter` and `hwlatdetect` do; no kernel module.

use std::path::Path;
use std::time::{Duration, Instant};

use napilab_core::cpu_stalls::{CpuStalls, STALL_MIN_NS};

use crate::procfs::read_stat;

/// Log2 buckets of stall lengths kept: up to 2^24 ns (16.8 ms) and longer.
const BUCKETS: usize = 25;

#[derive(Debug, thiserror::Error)]
pub enum StallError {
    #[error("cannot pin the stall probe to CPU {cpu}: {source} (is CPU {cpu} online and in this process's affinity mask?)")]
    Pin { cpu: u32, source: std::io::Error },
    #[error("cannot start the stall probe's thread: {0}")]
    Spawn(std::io::Error),
    #[error("the stall probe needs /proc/stat for CPU {cpu}'s steal: {why}")]
    Stat { cpu: u32, why: String },
}

fn steal_ticks(cpu: u32) -> Result<u64, StallError> {
    let stat = read_stat(Path::new("/")).map_err(|e| StallError::Stat {
        cpu,
        why: e.to_string(),
    })?;
    stat.cpu(cpu)
        .map(|t| t.steal)
        .ok_or_else(|| StallError::Stat {
            cpu,
            why: "no such CPU row".into(),
        })
}

/// Spins on `cpu` for `length`, on a thread of its own pinned there.
pub fn measure(cpu: u32, length: Duration) -> Result<CpuStalls, StallError> {
    std::thread::Builder::new()
        .name(format!("napilab-stalls-{cpu}"))
        .spawn(move || {
            crate::pin::pin_this_thread(cpu).map_err(|source| StallError::Pin { cpu, source })?;
            let user_hz = f64::from(crate::kernel::user_hz());
            let steal_before = steal_ticks(cpu)?;
            let start = Instant::now();
            let end = start + length;
            let mut last = start;
            let mut counts = vec![0u64; BUCKETS];
            let (mut stalled, mut longest, mut n) = (0u64, 0u64, 0u64);
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                let gap = (now - last).as_nanos() as u64;
                if gap >= STALL_MIN_NS {
                    let bucket = (63 - gap.leading_zeros()) as usize;
                    counts[bucket.min(BUCKETS - 1)] += 1;
                    stalled += gap;
                    longest = longest.max(gap);
                    n += 1;
                }
                last = now;
            }
            let seconds = start.elapsed().as_secs_f64();
            let steal = steal_ticks(cpu)?.saturating_sub(steal_before) as f64 / user_hz;
            Ok(CpuStalls {
                cpu,
                seconds,
                per_s: n as f64 / seconds,
                stalled_share: stalled as f64 / 1e9 / seconds,
                steal_share: steal / seconds,
                longest_ns: longest,
                counts,
            })
        })
        .map_err(StallError::Spawn)?
        .join()
        .unwrap_or_else(|_| {
            Err(StallError::Spawn(std::io::Error::other(
                "the stall probe's thread panicked",
            )))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spinning_thread_sees_at_least_the_ticks_it_is_interrupted_by() {
        let nohz_full =
            std::fs::read_to_string("/sys/devices/system/cpu/nohz_full").unwrap_or_default();
        if !nohz_full.trim().is_empty() && nohz_full.trim() != "(null)" {
            println!("SKIPPED a_spinning_thread_sees_at_least_the_ticks_it_is_interrupted_by: nohz_full CPUs ({}) may run a lone thread without a tick", nohz_full.trim());
            return;
        }
        let s = measure(0, Duration::from_millis(300)).expect("measured");
        assert!((0.25..1.0).contains(&s.seconds), "{s:?}");
        // A CPU running a thread takes the tick (at least CONFIG_HZ 100) unless it is
        // a nohz_full CPU, and every tick is a gap; more than a few a millisecond
        // would mean the loop itself is slow, not the CPU taken.
        assert!(s.per_s >= 50.0 && s.per_s < 20_000.0, "{s:?}");
        assert!(
            (0.0..1.0).contains(&s.stalled_share) && s.longest_ns >= STALL_MIN_NS,
            "{s:?}"
        );
        assert_eq!(
            s.counts.iter().sum::<u64>() as f64,
            (s.per_s * s.seconds).round(),
            "{s:?}"
        );
    }
}
