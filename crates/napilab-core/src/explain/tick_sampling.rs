//! Misreading 3, as far as tier 0 can tell: the softirq and CPU-time figures of
//! /proc/stat are tick-sampled. Measuring the size of the error needs tracepoints
//! (observe --trace); without them napilab says the figures are sampled and how coarse.

use crate::finding::{Evidence, Finding, RuleId, Severity, Subject};
use crate::metric::Source;
use crate::observation::{CpuAccounting, Observation};
use crate::stats::{cpu_mean, cpus};

/// NET_RX softirqs per second (any CPU) from which the caveat becomes a warning.
pub const PACKET_WORK_SOFTIRQS: f64 = 100.0;

pub fn check(observation: &Observation) -> Vec<Finding> {
    let tick_cpus: Vec<u32> = cpus(observation)
        .into_iter()
        .filter(|cpu| {
            observation.intervals.iter().any(|i| {
                i.cpu(*cpu)
                    .and_then(|c| c.time.as_ref())
                    .is_some_and(|t| t.softirq.source == Source::Tick)
            })
        })
        .collect();
    if tick_cpus.is_empty() {
        return Vec::new();
    }
    let mut evidence = Vec::new();
    let mut intervals = Vec::new();
    let mut packet_work = false;
    for cpu in &tick_cpus {
        if let Some((softirq, used)) =
            cpu_mean(observation, *cpu, |c| c.time.as_ref().map(|t| &t.softirq))
        {
            evidence.push(Evidence {
                name: format!("cpu{cpu}.time.softirq"),
                metric: softirq,
            });
            intervals.extend(used);
        }
        if let Some((rx, _)) = cpu_mean(observation, *cpu, |c| c.net_rx_softirqs.as_ref()) {
            packet_work |= rx.value >= PACKET_WORK_SOFTIRQS;
            evidence.push(Evidence {
                name: format!("cpu{cpu}.net_rx_softirqs"),
                metric: rx,
            });
        }
    }
    intervals.sort_unstable();
    intervals.dedup();
    let hz = observation
        .host
        .hz
        .value
        .map(|hz| format!("HZ={hz}, one tick every {:.1} ms", 1000.0 / f64::from(hz)))
        .unwrap_or_else(|| "HZ unknown".into());
    let mode = match observation.host.accounting {
        CpuAccounting::Unknown => "the CPU-accounting mode is unknown (assumed tick-sampled)",
        _ => "this kernel has no IRQ time accounting (CONFIG_IRQ_TIME_ACCOUNTING is off)",
    };
    vec![Finding {
        rule: RuleId::TickSampledAccounting,
        severity: if packet_work { Severity::Warning } else { Severity::Info },
        subject: Subject::Host,
        title: format!("CPU and softirq shares are tick-sampled ({hz}): softirq time is understated"),
        evidence,
        threshold: format!(
            "any CPU time share with source `tick`; a warning when NET_RX softirqs >= {PACKET_WORK_SOFTIRQS}/s on a CPU"
        ),
        explanation: format!(
            "{mode}, so /proc/stat charges each whole tick to whatever the timer interrupt finds running. Softirq work that runs right after a hard IRQ on an otherwise idle CPU is mostly counted as idle, and ksoftirqd, NAPI threads and busy polling show up as softirq or system time of a thread. Treat the softirq and irq columns as a lower bound: on this kind of VM a forwarding CPU showed 0-2% softirq where tracepoints measured 8-16% (docs/kernel.md LAB-2). `napilab observe --trace` measures the real time."
        ),
        intervals,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::testkit::{cpu, observation_of};
    use crate::observation::CpuAccounting;

    #[test]
    fn warns_on_tick_sampled_host_with_packet_work() {
        let obs = observation_of(vec![cpu(0).net_rx(5_000.0).shares(0.01, 0.5, Source::Tick)]);
        let f = check(&obs);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
    }

    #[test]
    fn informs_when_idle() {
        let obs = observation_of(vec![cpu(0).net_rx(3.0).shares(0.0, 0.99, Source::Tick)]);
        assert_eq!(check(&obs)[0].severity, Severity::Info);
    }

    #[test]
    fn silent_with_measured_irq_time() {
        let mut obs = observation_of(vec![cpu(0).net_rx(5_000.0).shares(0.2, 0.5, Source::Proc)]);
        obs.host.accounting = CpuAccounting::IrqTime;
        assert!(check(&obs).is_empty());
    }
}
