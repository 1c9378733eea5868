//! Misreading 1: IRQ and softirq counts do not track the packet rate. Once NAPI batches
//! (many packets per softirq or per IRQ) it is in polling mode: IRQs stay masked while
//! work remains, so at saturation IRQ rates fall towards zero while the CPU is 100% busy.

use crate::finding::{Evidence, Finding, RuleId, Severity, Subject};
use crate::metric::{Metric, Source};
use crate::observation::Observation;
use crate::stats::{cpu_mean, cpus, short};
use crate::trace::ExecContext;
use crate::units::Unit;

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
        // With the trace tier, packets per net_rx_action run come from the tracepoints;
        // softnet's `processed` also counts polls of NAPI kthreads, which run no softirq,
        // so the /proc ratio overstates the batching of softirqs under threaded NAPI.
        let traced = traced_packets_per_net_rx_run(observation, cpu);
        let per_softirq = traced
            .clone()
            .or_else(|| cpu_mean(observation, cpu, |c| c.packets_per_net_rx_softirq.as_ref()));
        let outside_softirq = traced_packets_outside_softirq(observation, cpu);
        let per_irq = cpu_mean(observation, cpu, |c| c.packets_per_net_hardirq.as_ref());
        let batching = [&per_softirq, &per_irq]
            .iter()
            .filter_map(|m| m.as_ref())
            .any(|(m, _)| m.value >= MIN_PACKETS_PER_EVENT);
        // No NET_RX softirq at all while packets flow: threaded NAPI or busy polling
        // does the work, which is the extreme of the same misreading.
        let no_softirqs = cpu_mean(observation, cpu, |c| c.net_rx_softirqs.as_ref())
            .is_some_and(|(m, _)| m.value < 1.0)
            || outside_softirq
                .as_ref()
                .is_some_and(|(m, _)| m.value >= MIN_PACKETS_PER_SECOND);
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
            (
                if traced.is_some() {
                    "packets_per_net_rx_run"
                } else {
                    "packets_per_net_rx_softirq"
                },
                per_softirq.clone(),
            ),
            ("packets_per_net_hardirq", per_irq.clone()),
            ("packets_polled_outside_softirq", outside_softirq.clone()),
        ] {
            if let Some((metric, _)) = pick {
                evidence.push(Evidence {
                    name: format!("cpu{cpu}.{name}"),
                    metric,
                });
            }
        }
        let batch = match (&outside_softirq, &per_softirq, &per_irq) {
            (Some((m, _)), _, _) if m.value >= MIN_PACKETS_PER_SECOND => format!(
                "{} pkt/s polled by NAPI kthreads or busy polling, outside any softirq (traced)",
                short(m.value)
            ),
            (_, Some((m, _)), _) if traced.is_some() => {
                format!("{:.1} packets per NET_RX run (traced)", m.value)
            }
            (_, Some((m, _)), _) | (_, None, Some((m, _))) => {
                format!("{:.1} packets per event", m.value)
            }
            _ => "no NET_RX softirqs".into(),
        };
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

/// Packets per `net_rx_action` run on `cpu`, summed over the traced intervals.
fn traced_packets_per_net_rx_run(
    observation: &Observation,
    cpu: u32,
) -> Option<(Metric, Vec<usize>)> {
    let (mut runs, mut packets, mut used) = (0u64, 0u64, Vec::new());
    for interval in &observation.intervals {
        let Some(trace) = &interval.trace else {
            continue;
        };
        let rows: Vec<_> = trace.net_rx_runs.iter().filter(|r| r.cpu == cpu).collect();
        if rows.is_empty() {
            continue;
        }
        runs += rows.iter().map(|r| r.runs).sum::<u64>();
        packets += rows.iter().map(|r| r.packets).sum::<u64>();
        used.push(interval.index);
    }
    (runs > 0).then(|| {
        let metric = Metric::derived(
            packets as f64 / runs as f64,
            Unit::PacketsPerEvent,
            Source::Trace,
            "packets polled in net_rx_action / net_rx_action runs (napi:napi_poll, irq:softirq_entry)",
        );
        (metric, used)
    })
}

/// Packets per second polled on `cpu` by NAPI kthreads and busy polling (no softirq).
fn traced_packets_outside_softirq(
    observation: &Observation,
    cpu: u32,
) -> Option<(Metric, Vec<usize>)> {
    let (mut packets, mut seconds, mut used) = (0u64, 0.0, Vec::new());
    for interval in &observation.intervals {
        let Some(trace) = &interval.trace else {
            continue;
        };
        packets += trace
            .napi
            .iter()
            .filter(|n| {
                n.cpu == cpu && matches!(n.context, ExecContext::NapiThread | ExecContext::BusyPoll)
            })
            .map(|n| n.packets)
            .sum::<u64>();
        seconds += interval.duration_s;
        used.push(interval.index);
    }
    (seconds > 0.0).then(|| {
        let metric = Metric::derived(
            packets as f64 / seconds,
            Unit::PacketsPerSecond,
            Source::Trace,
            "napi:napi_poll packets in NAPI kthreads and busy polling / interval",
        );
        (metric, used)
    })
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

    /// Per second (one-second intervals): `runs` NET_RX runs carrying `run_packets`, and
    /// `thread_packets` polled by a NAPI kthread, on cpu0.
    fn traced(
        mut obs: Observation,
        runs: u64,
        run_packets: u64,
        thread_packets: u64,
    ) -> Observation {
        use crate::trace::{NapiPollTrace, NetRxRunTrace, TraceInterval};
        let rate = |v: u64| Metric::new(v as f64, Unit::PerSecond, Source::Trace);
        for interval in &mut obs.intervals {
            interval.trace = Some(TraceInterval {
                net_rx_runs: vec![NetRxRunTrace {
                    cpu: 0,
                    context: ExecContext::Hardirq,
                    runs,
                    packets: run_packets,
                    budget_limited: 0,
                    time_limited: 0,
                    log2_packets: Vec::new(),
                }],
                napi: vec![NapiPollTrace {
                    napi_id: 8193,
                    device: "veth0".into(),
                    ifindex: 2,
                    netns: 0,
                    cpu: 0,
                    context: ExecContext::NapiThread,
                    application: None,
                    polls: thread_packets / 4,
                    packets: thread_packets,
                    full_budget_polls: 0,
                    work_histogram: Vec::new(),
                    polls_per_s: rate(thread_packets / 4),
                    packets_per_s: rate(thread_packets),
                }],
                ..TraceInterval::default()
            });
        }
        obs
    }

    #[test]
    fn trace_shows_kthread_polling_that_proc_counts_as_softirq_batches() {
        // /proc: 100k pkt/s over 2k NET_RX softirqs looks like 50 packets per softirq;
        // the trace shows one packet per run and the rest polled by the NAPI kthread.
        let obs = observation_of(vec![cpu(0).processed(100_000.0).net_rx(2_000.0)]);
        let f = check(&traced(obs, 2_000, 2_000, 98_000));
        assert_eq!(f.len(), 1);
        assert!(
            f[0].title.contains("polled by NAPI kthreads"),
            "{}",
            f[0].title
        );
        assert!(f[0]
            .evidence
            .iter()
            .any(|e| e.name == "cpu0.packets_per_net_rx_run" && e.metric.source == Source::Trace));
    }

    #[test]
    fn trace_overrules_the_proc_ratio() {
        // The /proc ratio says 50 packets per softirq, the traced runs carry one each and
        // no kthread polls: not polling mode.
        let obs = observation_of(vec![cpu(0).processed(100_000.0).net_rx(2_000.0)]);
        assert!(check(&traced(obs, 100_000, 100_000, 0)).is_empty());
    }

    #[test]
    fn silent_at_low_rate() {
        let obs = observation_of(vec![cpu(0).processed(500.0).net_rx(10.0)]);
        assert!(check(&obs).is_empty());
    }
}
