//! A hot CPU: one CPU close to saturation while doing packet work and another has
//! headroom. Packet work piles up where IRQs, NAPI threads or `napi_schedule` callers put
//! it (misreading 6 is the trace-level form of this).

use crate::finding::{Evidence, Finding, RuleId, Severity, Subject};
use crate::metric::{Metric, Source};
use crate::observation::Observation;
use crate::stats::{cpu_mean, cpus, mean_over, short};
use crate::units::Unit;

/// Busy share from which a CPU counts as hot.
pub const HOT_BUSY: f64 = 0.90;
/// Busy share below which another CPU counts as having headroom.
pub const COOL_BUSY: f64 = 0.50;
/// Packet work on the hot CPU: softnet packets per second.
pub const MIN_PACKETS_PER_SECOND: f64 = 1_000.0;

fn busy(observation: &Observation, cpu: u32) -> Option<(Metric, Vec<usize>)> {
    let values: Vec<(usize, Metric)> = observation
        .intervals
        .iter()
        .filter_map(|i| {
            let t = i.cpu(cpu)?.time.as_ref()?;
            Some((
                i.index,
                Metric::derived(
                    t.busy(),
                    Unit::CpuFraction,
                    t.system.source,
                    "1 - idle - iowait (/proc/stat)",
                ),
            ))
        })
        .collect();
    mean_over(
        values
            .iter()
            .filter_map(|(idx, m)| observation.intervals.get(*idx).map(|i| (i, Some(m)))),
    )
}

pub fn check(observation: &Observation) -> Vec<Finding> {
    let all = cpus(observation);
    let loads: Vec<(u32, Metric, Vec<usize>)> = all
        .iter()
        .filter_map(|cpu| busy(observation, *cpu).map(|(m, idx)| (*cpu, m, idx)))
        .collect();
    let Some((cool_cpu, cool, _)) = loads
        .iter()
        .min_by(|a, b| a.1.value.total_cmp(&b.1.value))
        .cloned()
    else {
        return Vec::new();
    };
    let mut findings = Vec::new();
    for (cpu, load, intervals) in &loads {
        if load.value < HOT_BUSY || cool.value > COOL_BUSY || *cpu == cool_cpu {
            continue;
        }
        let packets = cpu_mean(observation, *cpu, |c| c.softnet_processed.as_ref());
        let napi_thread_here = observation.intervals.iter().any(|i| {
            i.threads
                .iter()
                .any(|t| t.last_cpu == Some(*cpu) && t.cpu.as_ref().is_some_and(|m| m.value >= 0.2))
        });
        let packet_work = packets
            .as_ref()
            .is_some_and(|(m, _)| m.value >= MIN_PACKETS_PER_SECOND);
        if !packet_work && !napi_thread_here {
            continue;
        }
        let mut evidence = vec![
            Evidence {
                name: format!("cpu{cpu}.busy"),
                metric: load.clone(),
            },
            Evidence {
                name: format!("cpu{cool_cpu}.busy"),
                metric: cool.clone(),
            },
        ];
        if let Some((m, _)) = packets {
            evidence.push(Evidence {
                name: format!("cpu{cpu}.softnet_processed"),
                metric: m,
            });
        }
        let sampled = if load.source == Source::Tick {
            " (tick-sampled)"
        } else {
            ""
        };
        findings.push(Finding {
            rule: RuleId::HotCpu,
            severity: Severity::Warning,
            subject: Subject::Cpu(*cpu),
            title: format!(
                "cpu{cpu} is {:.0}% busy{sampled} with packet work while cpu{cool_cpu} is {:.0}% busy",
                load.value * 100.0,
                cool.value * 100.0
            ),
            evidence,
            threshold: format!(
                "busy >= {:.0}% with >= {} pkt/s or a busy NAPI thread, while another CPU is <= {:.0}% busy",
                HOT_BUSY * 100.0,
                short(MIN_PACKETS_PER_SECOND),
                COOL_BUSY * 100.0
            ),
            explanation: format!(
                "cpu{cpu} is the bottleneck of the packet path while cpu{cool_cpu} has headroom. Packet work runs where the IRQ is delivered, where a NAPI thread is pinned, or (for software devices such as veth, and for WireGuard-style pipelines) on whichever CPU called napi_schedule. Spread it: IRQ affinity or more queues, RPS, or threaded NAPI placed on the idle core (see napilab map for who polls what)."
            ),
            intervals: intervals.clone(),
        });
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::testkit::{cpu, observation_of};

    #[test]
    fn fires_on_imbalance_with_packet_work() {
        let obs = observation_of(vec![
            cpu(0).processed(300_000.0).shares(0.6, 0.02, Source::Tick),
            cpu(1).shares(0.0, 0.9, Source::Tick),
        ]);
        let f = check(&obs);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].subject, Subject::Cpu(0));
    }

    #[test]
    fn silent_when_both_busy_or_no_packets() {
        let both = observation_of(vec![
            cpu(0).processed(300_000.0).shares(0.6, 0.02, Source::Tick),
            cpu(1).processed(300_000.0).shares(0.6, 0.02, Source::Tick),
        ]);
        assert!(check(&both).is_empty());
        let compute = observation_of(vec![
            cpu(0).shares(0.0, 0.02, Source::Tick),
            cpu(1).shares(0.0, 0.9, Source::Tick),
        ]);
        assert!(check(&compute).is_empty());
    }
}
