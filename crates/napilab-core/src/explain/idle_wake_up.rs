//! A VM whose idle vCPUs halt at once: every NAPI kthread woken onto an idle vCPU pays
//! a VM exit and entry before it polls. The `haltpoll` cpuidle driver (KVM guests,
//! drivers/cpuidle/cpuidle-haltpoll.c and governors/haltpoll.c) polls for up to
//! `guest_halt_poll_ns` before it halts, so a wake-up that comes within that window
//! costs a few microseconds instead of tens; at 0 it never polls. The rule speaks when
//! the host says so (its cpuidle driver and the parameter, in the Observation's host
//! identity) and the packet path is woken that way (NAPI kthreads polling), with the
//! wake-up delay when it was measured (`napilab host --wake-up`, `tune plan --predict`).

use crate::finding::{Evidence, Finding, RuleId, Severity, Subject};
use crate::metric::{Metric, Source};
use crate::observation::Observation;
use crate::trace::ExecContext;
use crate::units::Unit;

/// NAPI kthread polls per second from which the wake-ups matter.
pub const MIN_KTHREAD_POLLS: f64 = 1_000.0;

pub fn check(observation: &Observation) -> Vec<Finding> {
    let Some(identity) = &observation.host.identity else {
        return Vec::new();
    };
    if !identity.cpuidle.halts_at_once() {
        return Vec::new();
    }
    let (mut polls, mut packets, mut seconds, mut intervals) = (0u64, 0u64, 0.0, Vec::new());
    for interval in &observation.intervals {
        let Some(trace) = &interval.trace else {
            continue;
        };
        let kthread = trace
            .napi
            .iter()
            .filter(|r| r.context == ExecContext::NapiThread);
        let (p, k) = kthread.fold((0, 0), |(p, k), r| (p + r.polls, k + r.packets));
        seconds += interval.duration_s;
        if p > 0 {
            polls += p;
            packets += k;
            intervals.push(interval.index);
        }
    }
    if seconds <= 0.0 || (polls as f64 / seconds) < MIN_KTHREAD_POLLS {
        return Vec::new();
    }
    let polls_per_s = polls as f64 / seconds;
    let mut evidence = vec![
        Evidence {
            name: "cpuidle.guest_halt_poll_ns".into(),
            metric: Metric::derived(
                0.0,
                Unit::Nanoseconds,
                Source::Proc,
                "/sys/module/haltpoll/parameters/guest_halt_poll_ns",
            ),
        },
        Evidence {
            name: "napi_kthread.polls".into(),
            metric: Metric::derived(
                polls_per_s,
                Unit::PerSecond,
                Source::Trace,
                "napi_poll in NAPI kthreads, per second",
            ),
        },
        Evidence {
            name: "napi_kthread.packets_per_poll".into(),
            metric: Metric::derived(
                packets as f64 / polls.max(1) as f64,
                Unit::PacketsPerEvent,
                Source::Trace,
                "napi_poll work / polls in NAPI kthreads",
            ),
        },
    ];
    let medians: Vec<f64> = observation
        .host
        .wake_up
        .iter()
        .filter_map(|w| w.median_ns())
        .collect();
    let measured = medians.iter().copied().reduce(f64::min);
    if let Some(least) = measured {
        evidence.push(Evidence {
            name: "wake_up.median_least".into(),
            metric: Metric::derived(
                least,
                Unit::Nanoseconds,
                Source::Trace,
                "wake-up probe: the least median of any CPU (a thread woken onto an idle CPU)",
            ),
        });
    }
    let delay = measured.map_or(
        "tens of microseconds (not measured here: `napilab host --wake-up` measures it)".into(),
        |ns| format!("{:.0} us (the wake-up probe's least median)", ns / 1e3),
    );
    vec![Finding {
        rule: RuleId::IdleVcpuWakeUp,
        severity: Severity::Info,
        subject: Subject::Host,
        title: format!(
            "idle vCPUs halt at once (haltpoll, guest_halt_poll_ns 0) while NAPI kthreads poll {polls_per_s:.0} times a second: each wake-up onto an idle vCPU costs {delay}"
        ),
        evidence,
        threshold: format!(
            "cpuidle driver haltpoll with guest_halt_poll_ns 0, and NAPI kthread polls >= {MIN_KTHREAD_POLLS:.0}/s"
        ),
        explanation: "This is a KVM guest whose cpuidle driver (haltpoll) is told not to poll before halting. A vCPU that goes idle halts at once, and waking it (the IPI that schedules a NAPI kthread, an interrupt, an epoll wake-up) takes a VM exit and entry first. Threaded NAPI pays that every time its kthread ran its ring dry and slept, so packets wait and batches grow; softirq polling after an interrupt on an idle vCPU pays it too. Raising /sys/module/haltpoll/parameters/guest_halt_poll_ns (for example to 200000, the governor's default: `napilab tune apply vcpu-halt-poll`, journalled and reverted by `napilab tune revert`) lets an idle vCPU poll that long before it halts, trading guest CPU for wake-up latency; keeping the kthread's CPU busy (softirq mode, or busy polling) avoids the wake-ups. Measure the delay with `napilab host --wake-up` before and after.".into(),
        intervals,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::testkit::{cpu, observation_of};
    use crate::host_identity::HostIdentity;
    use crate::trace::{NapiPollTrace, TraceInterval};
    use crate::wake_up_latency::WakeUpLatency;

    /// One second with a NAPI kthread polling `polls` times (2 packets each) on a host
    /// whose cpuidle driver is `driver` with `halt_poll_ns`.
    fn host(driver: &str, halt_poll_ns: Option<u64>, polls: u64) -> Observation {
        let mut o = observation_of(vec![cpu(0), cpu(1)]);
        let mut identity = HostIdentity::default();
        identity.cpuidle.driver = Some(driver.into());
        identity.cpuidle.guest_halt_poll_ns = halt_poll_ns;
        o.host.identity = Some(identity);
        for interval in &mut o.intervals {
            interval.trace = Some(TraceInterval {
                napi: vec![NapiPollTrace {
                    napi_id: 9,
                    device: "vb".into(),
                    ifindex: 2,
                    netns: 0,
                    cpu: 1,
                    context: ExecContext::NapiThread,
                    application: None,
                    polls,
                    packets: 2 * polls,
                    full_budget_polls: 0,
                    work_histogram: Vec::new(),
                    polls_per_s: Metric::new(polls as f64, Unit::PerSecond, Source::Trace),
                    packets_per_s: Metric::new(
                        2.0 * polls as f64,
                        Unit::PacketsPerSecond,
                        Source::Trace,
                    ),
                }],
                ..TraceInterval::default()
            });
        }
        o
    }

    #[test]
    fn fires_when_idle_vcpus_halt_at_once_under_kthread_polling() {
        let mut o = host("haltpoll", Some(0), 20_000);
        let f = check(&o);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].title.contains("not measured here"), "{}", f[0].title);
        // With the probe's medians, the least is the evidence.
        o.host.wake_up = [40_000.0, 65_000.0]
            .iter()
            .enumerate()
            .map(|(cpu, &d)| WakeUpLatency {
                cpu: cpu as u32,
                waker_cpu: 1 - cpu as u32,
                idle_us: 100.0,
                delays_ns: vec![d; 5],
            })
            .collect();
        let f = check(&o);
        assert!(f[0].title.contains("costs 40 us"), "{}", f[0].title);
        assert!(f[0]
            .evidence
            .iter()
            .any(|e| e.name == "wake_up.median_least" && e.metric.value == 40_000.0));
    }

    #[test]
    fn silent_when_the_vcpu_polls_first_or_nothing_wakes_kthreads() {
        assert!(check(&host("haltpoll", Some(200_000), 20_000)).is_empty());
        assert!(check(&host("acpi_idle", None, 20_000)).is_empty());
        assert!(check(&host("haltpoll", Some(0), 100)).is_empty());
        let mut unknown = host("haltpoll", Some(0), 20_000);
        unknown.host.identity = None;
        assert!(check(&unknown).is_empty());
    }
}
