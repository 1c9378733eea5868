//! Misreading 2: more NET_RX softirqs than RX IRQs. TX completion IRQs also raise
//! NET_RX_SOFTIRQ (reclaim runs inside the NAPI poll), several devices can share one
//! CPU's poll list, and software raises it too (veth transmit, RPS IPIs, busy polling).

use crate::finding::{Evidence, Finding, RuleId, Severity, Subject};
use crate::metric::{Metric, Source};
use crate::observation::{Interval, Observation};
use crate::stats::{cpus, mean_over, short, sum};
use crate::units::Unit;

/// NET_RX softirq rate below which the rule stays silent.
pub const MIN_SOFTIRQS_PER_SECOND: f64 = 100.0;
/// Softirqs must exceed RX IRQs by this factor.
pub const EXCESS_FACTOR: f64 = 1.2;

/// RX (or combined) IRQs of network devices taken by `cpu` in the interval, per second.
fn rx_irqs_on(interval: &Interval, observation: &Observation, cpu: u32) -> f64 {
    sum(interval
        .irqs
        .iter()
        .filter(|irq| {
            let info = observation.topology.irq(irq.number);
            info.is_some_and(|i| !i.queue.as_deref().is_some_and(|q| q.starts_with("tx-")))
        })
        .flat_map(|irq| irq.per_cpu.iter())
        .filter(|(c, _)| *c == cpu)
        .map(|(_, m)| m.value))
}

pub fn check(observation: &Observation) -> Vec<Finding> {
    let mut findings = Vec::new();
    for cpu in cpus(observation) {
        let Some((softirqs, intervals)) = mean_over(
            observation
                .intervals
                .iter()
                .map(|i| (i, i.cpu(cpu).and_then(|c| c.net_rx_softirqs.as_ref()))),
        ) else {
            continue;
        };
        if softirqs.value < MIN_SOFTIRQS_PER_SECOND {
            continue;
        }
        let rx_irq_metrics: Vec<(usize, Metric)> = observation
            .intervals
            .iter()
            .filter(|i| intervals.contains(&i.index))
            .map(|i| {
                (
                    i.index,
                    Metric::derived(
                        rx_irqs_on(i, observation, cpu),
                        Unit::PerSecond,
                        Source::Proc,
                        "IRQs of network RX/combined queues on this CPU (/proc/interrupts)",
                    ),
                )
            })
            .collect();
        let Some((rx_irqs, _)) = mean_over(
            rx_irq_metrics
                .iter()
                .filter_map(|(idx, m)| observation.intervals.get(*idx).map(|i| (i, Some(m)))),
        ) else {
            continue;
        };
        if softirqs.value <= rx_irqs.value * EXCESS_FACTOR {
            continue;
        }
        let tx_irqs = sum(observation
            .intervals
            .iter()
            .filter(|i| intervals.contains(&i.index))
            .flat_map(|i| i.irqs.iter())
            .filter(|irq| {
                observation
                    .topology
                    .irq(irq.number)
                    .and_then(|i| i.queue.as_deref())
                    .is_some_and(|q| q.starts_with("tx-"))
            })
            .flat_map(|irq| irq.per_cpu.iter())
            .filter(|(c, _)| *c == cpu)
            .map(|(_, m)| m.value))
            / intervals.len().max(1) as f64;
        let why = if rx_irqs.value < 1.0 {
            "no RX IRQ of a network device arrives on this CPU, so the softirqs are raised by software: a veth or loopback transmit, RPS IPIs from other CPUs, or busy polling"
        } else if tx_irqs > 0.0 {
            "TX completion IRQs on this CPU raise NET_RX_SOFTIRQ as well, because TX reclaim runs inside the NAPI poll"
        } else {
            "the extra softirqs come from TX completions reclaimed in the NAPI poll, other devices sharing this CPU's poll list, or software (veth, RPS IPIs)"
        };
        findings.push(Finding {
            rule: RuleId::SoftirqsExceedRxIrqs,
            severity: Severity::Info,
            subject: Subject::Cpu(cpu),
            title: format!(
                "cpu{cpu}: {} NET_RX softirqs/s but {} RX IRQs/s",
                short(softirqs.value),
                short(rx_irqs.value)
            ),
            evidence: vec![
                Evidence {
                    name: format!("cpu{cpu}.net_rx_softirqs"),
                    metric: softirqs.clone(),
                },
                Evidence {
                    name: format!("cpu{cpu}.rx_irqs"),
                    metric: rx_irqs,
                },
                Evidence {
                    name: format!("cpu{cpu}.tx_irqs"),
                    metric: Metric::derived(
                        tx_irqs,
                        Unit::PerSecond,
                        Source::Proc,
                        "IRQs of network TX queues on this CPU (/proc/interrupts)",
                    ),
                },
            ],
            threshold: format!(
                "NET_RX softirqs >= {MIN_SOFTIRQS_PER_SECOND}/s and > {EXCESS_FACTOR} x RX IRQs on the same CPU"
            ),
            explanation: format!(
                "A NET_RX softirq is not one received interrupt: {why}. Do not read the NET_RX count of /proc/softirqs as receive load; packets per second and the per-NAPI poll counts (observe --trace) tell what the softirqs did."
            ),
            intervals,
        });
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::testkit::{cpu, observation_of, with_irq};

    #[test]
    fn fires_when_softirqs_outnumber_rx_irqs() {
        let obs = with_irq(
            observation_of(vec![cpu(0).net_rx(6_350.0)]),
            40,
            "rx-0",
            0,
            4_650.0,
        );
        let obs = with_irq(obs, 41, "tx-0", 0, 2_000.0);
        let f = check(&obs);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].explanation.contains("TX completion"));
    }

    #[test]
    fn software_raised_softirqs_are_named() {
        let obs = observation_of(vec![cpu(1).net_rx(5_000.0)]);
        let f = check(&obs);
        assert_eq!(f.len(), 1);
        assert!(f[0].explanation.contains("raised by software"));
    }

    #[test]
    fn silent_when_softirqs_match_irqs() {
        let obs = with_irq(
            observation_of(vec![cpu(0).net_rx(4_700.0)]),
            40,
            "rx-0",
            0,
            4_650.0,
        );
        assert!(check(&obs).is_empty());
    }
}
