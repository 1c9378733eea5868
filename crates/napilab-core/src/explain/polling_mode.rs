//! Misreading 1: IRQ and softirq counts do not track the packet rate. Once NAPI batches
//! (many packets per softirq or per IRQ) it is in polling mode: IRQs stay masked while
//! work remains, so at saturation IRQ rates fall towards zero while the CPU is 100% busy.

use crate::finding::{Evidence, Finding, RuleId, Severity, Subject};
use crate::observation::Observation;
use crate::stats::{cpu_mean, cpus, short};

/// Packet rate below which batching is not worth a finding.
pub const MIN_PACKETS_PER_SECOND: f64 = 10_000.0;
/// Packets per NET_RX softirq (or per network IRQ) from which NAPI is taken to batch.
pub const MIN_PACKETS_PER_EVENT: f64 = 8.0;

pub fn check(observation: &Observation) -> Vec<Finding> {
    let mut findings = Vec::new();
    for cpu in cpus(observation) {
        let Some((processed, intervals)) =
            cpu_mean(observation, cpu, |c| c.softnet_processed.as_ref())
        else {
            continue;
        };
        if processed.value < MIN_PACKETS_PER_SECOND {
            continue;
        }
        let per_softirq = cpu_mean(observation, cpu, |c| c.packets_per_net_rx_softirq.as_ref());
        let per_irq = cpu_mean(observation, cpu, |c| c.packets_per_net_hardirq.as_ref());
        let batching = [&per_softirq, &per_irq]
            .iter()
            .filter_map(|m| m.as_ref())
            .any(|(m, _)| m.value >= MIN_PACKETS_PER_EVENT);
        // No NET_RX softirq at all while packets flow: threaded NAPI or busy polling
        // does the work, which is the extreme of the same misreading.
        let no_softirqs = cpu_mean(observation, cpu, |c| c.net_rx_softirqs.as_ref())
            .is_some_and(|(m, _)| m.value < 1.0);
        if !batching && !no_softirqs {
            continue;
        }
        let mut evidence = vec![Evidence {
            name: format!("cpu{cpu}.softnet_processed"),
            metric: processed.clone(),
        }];
        for (name, pick) in [
            (
                "net_rx_softirqs",
                cpu_mean(observation, cpu, |c| c.net_rx_softirqs.as_ref()),
            ),
            (
                "net_hardirqs",
                cpu_mean(observation, cpu, |c| c.net_hardirqs.as_ref()),
            ),
            ("packets_per_net_rx_softirq", per_softirq.clone()),
            ("packets_per_net_hardirq", per_irq.clone()),
        ] {
            if let Some((metric, _)) = pick {
                evidence.push(Evidence {
                    name: format!("cpu{cpu}.{name}"),
                    metric,
                });
            }
        }
        let batch = per_softirq
            .as_ref()
            .or(per_irq.as_ref())
            .map(|(m, _)| format!("{:.1} packets per event", m.value))
            .unwrap_or_else(|| "no NET_RX softirqs".into());
        findings.push(Finding {
            rule: RuleId::PollingModeHidesLoad,
            severity: Severity::Warning,
            subject: Subject::Cpu(cpu),
            title: format!(
                "cpu{cpu}: {} pkt/s handled with {batch}: IRQ and softirq counts understate the load",
                short(processed.value)
            ),
            evidence,
            threshold: format!(
                "softnet processed >= {MIN_PACKETS_PER_SECOND} pkt/s and (packets per NET_RX softirq or per network IRQ >= {MIN_PACKETS_PER_EVENT}, or no NET_RX softirqs)"
            ),
            explanation: "NAPI is in polling mode here: while a poll finds work, the device's IRQ stays masked and the instance is polled again without a new interrupt, so one IRQ or softirq stands for many packets. IRQ and softirq rates therefore stop tracking the packet rate; at saturation they fall towards zero while the CPU is fully busy. Judge load by packets per second and by measured CPU time (napilab observe --trace), not by /proc/interrupts or /proc/softirqs.".into(),
            intervals,
        });
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::testkit::{cpu, observation_of};

    #[test]
    fn fires_when_packets_batch() {
        let obs = observation_of(vec![cpu(0)
            .processed(200_000.0)
            .net_rx(2_000.0)
            .net_irqs(1_500.0)]);
        let f = check(&obs);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].subject, Subject::Cpu(0));
        assert!(
            f[0].title.contains("100.0 packets per event"),
            "{}",
            f[0].title
        );
    }

    #[test]
    fn silent_when_one_packet_per_interrupt() {
        let obs = observation_of(vec![cpu(0)
            .processed(20_000.0)
            .net_rx(19_000.0)
            .net_irqs(19_000.0)]);
        assert!(check(&obs).is_empty());
    }

    #[test]
    fn silent_at_low_rate() {
        let obs = observation_of(vec![cpu(0).processed(500.0).net_rx(10.0)]);
        assert!(check(&obs).is_empty());
    }
}
