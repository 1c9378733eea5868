//! Misreading 7: `time_squeeze` rising. `net_rx_action` stopped with work left because it
//! used its packet budget (`netdev_budget`, default 300) or its time limit
//! (`netdev_budget_usecs`), and re-raised the softirq.

use crate::finding::{Evidence, Finding, RuleId, Severity, Subject};
use crate::metric::{Metric, Source};
use crate::observation::Observation;
use crate::stats::{cpu_mean, cpus, short};
use crate::units::Unit;

/// Squeezes per second from which the rule speaks.
pub const MIN_SQUEEZES_PER_SECOND: f64 = 0.5;

pub fn check(observation: &Observation) -> Vec<Finding> {
    let budget = observation.settings.netdev_budget.unwrap_or(300) as f64;
    let usecs = observation.settings.netdev_budget_usecs;
    let mut findings = Vec::new();
    for cpu in cpus(observation) {
        let Some((squeeze, intervals)) = cpu_mean(observation, cpu, |c| c.time_squeeze.as_ref())
        else {
            continue;
        };
        if squeeze.value < MIN_SQUEEZES_PER_SECOND {
            continue;
        }
        let per_softirq = cpu_mean(observation, cpu, |c| c.packets_per_net_rx_softirq.as_ref());
        // A run that stopped on budget handled about `netdev_budget` packets (up to 63
        // more, since the budget is checked after each poll). If the average run is far
        // below that, the time limit cut it short. The average mixes squeezed and
        // unsqueezed runs, so only the clear cases are named.
        let cause = match per_softirq.as_ref().map(|(m, _)| m.value) {
            Some(p) if p >= budget * 0.8 => format!("the packet budget (netdev_budget = {budget:.0}): runs average {p:.0} packets"),
            Some(p) if p < budget * 0.5 => format!(
                "most likely the time limit (netdev_budget_usecs = {}): runs average only {p:.0} packets, far below the budget of {budget:.0}, so slow polls or a busy CPU end them",
                usecs.map(|u| u.to_string()).unwrap_or_else(|| "unknown".into())
            ),
            _ => "the budget or the time limit; tier-0 counters cannot tell which (observe --trace can)".into(),
        };
        let mut evidence = vec![Evidence {
            name: format!("cpu{cpu}.time_squeeze"),
            metric: squeeze.clone(),
        }];
        if let Some((m, _)) = per_softirq {
            evidence.push(Evidence {
                name: format!("cpu{cpu}.packets_per_net_rx_softirq"),
                metric: m,
            });
        }
        evidence.push(Evidence {
            name: "net.core.netdev_budget".into(),
            metric: Metric::new(budget, Unit::Count, Source::Proc),
        });
        if let Some(u) = usecs {
            evidence.push(Evidence {
                name: "net.core.netdev_budget_usecs".into(),
                metric: Metric::new(u as f64, Unit::Count, Source::Proc),
            });
        }
        findings.push(Finding {
            rule: RuleId::TimeSqueeze,
            severity: Severity::Warning,
            subject: Subject::Cpu(cpu),
            title: format!("cpu{cpu}: net_rx_action ran out of budget {}/s", short(squeeze.value)),
            evidence,
            threshold: format!("time_squeeze >= {MIN_SQUEEZES_PER_SECOND}/s"),
            explanation: format!(
                "The NET_RX softirq on cpu{cpu} repeatedly stopped with packets still waiting, because of {cause}. The leftover work is re-raised and, if softirqs keep coming back, handed to ksoftirqd, where it competes with applications and packets wait longer. Spread the load (more queues, RPS, threaded NAPI on another core) or raise netdev_budget / netdev_budget_usecs with napilab tune."
            ),
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
    fn names_the_budget_when_runs_are_full() {
        let obs = observation_of(vec![cpu(1)
            .processed(900_000.0)
            .net_rx(2_800.0)
            .squeeze(40.0)]);
        let f = check(&obs);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].explanation.contains("packet budget"),
            "{}",
            f[0].explanation
        );
    }

    #[test]
    fn names_the_time_limit_when_runs_are_short() {
        let obs = observation_of(vec![cpu(1)
            .processed(50_000.0)
            .net_rx(2_000.0)
            .squeeze(10.0)]);
        assert!(check(&obs)[0].explanation.contains("time limit"));
    }

    #[test]
    fn silent_without_squeezes() {
        let obs = observation_of(vec![cpu(1)
            .processed(900_000.0)
            .net_rx(2_800.0)
            .squeeze(0.0)]);
        assert!(check(&obs).is_empty());
    }
}
