//! Misreading 8: ksoftirqd is doing the packet work. Softirqs that keep coming back
//! (after 10 restarts or ~2 ms) are handed to `ksoftirqd/N`, an ordinary SCHED_OTHER
//! thread that competes with applications for the CPU.

use crate::finding::{Evidence, Finding, RuleId, Severity, Subject};
use crate::observation::Observation;
use crate::stats::{cpu_mean, cpus};

/// ksoftirqd CPU share from which the rule speaks.
pub const MIN_KSOFTIRQD_SHARE: f64 = 0.05;

pub fn check(observation: &Observation) -> Vec<Finding> {
    let mut findings = Vec::new();
    for cpu in cpus(observation) {
        let Some((share, intervals)) = cpu_mean(observation, cpu, |c| c.ksoftirqd.as_ref()) else {
            continue;
        };
        if share.value < MIN_KSOFTIRQD_SHARE {
            continue;
        }
        let mut evidence = vec![Evidence {
            name: format!("cpu{cpu}.ksoftirqd"),
            metric: share.clone(),
        }];
        if let Some((squeeze, _)) = cpu_mean(observation, cpu, |c| c.time_squeeze.as_ref()) {
            evidence.push(Evidence {
                name: format!("cpu{cpu}.time_squeeze"),
                metric: squeeze,
            });
        }
        findings.push(Finding {
            rule: RuleId::KsoftirqdActive,
            severity: Severity::Warning,
            subject: Subject::Cpu(cpu),
            title: format!(
                "cpu{cpu}: ksoftirqd/{cpu} used {:.0}% of the CPU: softirq work is deferred to a thread",
                share.value * 100.0
            ),
            evidence,
            threshold: format!("ksoftirqd CPU share >= {:.0}%", MIN_KSOFTIRQD_SHARE * 100.0),
            explanation: format!(
                "Softirqs on cpu{cpu} kept being re-raised past the restart limits, so the kernel handed them to ksoftirqd/{cpu}, a normal-priority thread. Packet processing now waits for the scheduler and shares the CPU fairly with applications, which adds latency under load. Its time is charged as softirq in /proc/stat. Consider moving the packet work to a dedicated core, threaded NAPI with a chosen priority, or more queues."
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
    fn fires_on_busy_ksoftirqd() {
        let f = check(&observation_of(vec![cpu(0).ksoftirqd(0.4)]));
        assert_eq!(f.len(), 1);
        assert!(f[0].title.contains("40%"));
    }

    #[test]
    fn silent_on_idle_ksoftirqd() {
        assert!(check(&observation_of(vec![cpu(0).ksoftirqd(0.01)])).is_empty());
    }
}
