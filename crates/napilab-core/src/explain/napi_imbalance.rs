//! Misreading 6: NAPI load imbalance from execution-order inversion
//! (docs/studies.md M6, WG-2, WG-3). When threads schedule NAPI instances
//! (`napi_schedule` from a worker, as WireGuard's decryption workers or a TUN writer
//! do), the poll runs on the scheduling thread's CPU at its next bottom-half enable.
//! Polls then pile onto the CPUs those threads happen to run on, not where the device
//! IRQs land: one CPU carries most of the NET_RX softirq time with big batches, while
//! the others poll often and find little. Tick-sampled CPU figures show only "one hot
//! core"; the trace tier shows why.
//!
//! Reads the trace tier (`observe --trace`): per-CPU NET_RX softirq time, NAPI polls by
//! context with their work histogram, and device hard IRQs. Fires when all hold:
//! packet work worth judging, a fair share of softirq polls run at bh-enable (scheduled
//! from threads), one CPU's NET_RX time far above the others', larger batches on that
//! CPU than on the others, and device IRQs much less concentrated than that time.

use std::collections::{BTreeMap, BTreeSet};

use crate::finding::{Evidence, Finding, RuleId, Severity, Subject};
use crate::metric::{Metric, Source};
use crate::observation::Observation;
use crate::trace::ExecContext;
use crate::units::Unit;

/// NAPI packets per second (softirq contexts, all CPUs) below which the rule is silent.
pub const MIN_PACKETS_PER_SECOND: f64 = 10_000.0;
/// The hot CPU's NET_RX softirq time, as a fraction of the CPU, for it to count as hot.
pub const MIN_HOT_NET_RX: f64 = 0.30;
/// The hot CPU's NET_RX time over the mean of the other CPUs'.
pub const MIN_TIME_RATIO: f64 = 3.0;
/// Packets per poll on the hot CPU over packets per poll on the others.
pub const MIN_BATCH_RATIO: f64 = 2.0;
/// Share of softirq-context polls (all CPUs) that ran at bh-enable.
pub const MIN_BH_ENABLE_SHARE: f64 = 0.20;
/// The device-IRQ concentration (hot CPU's rate over the others' mean) must stay below
/// the NET_RX time ratio divided by this: the work is where the threads are, not where
/// the IRQs are.
pub const IRQ_VS_TIME: f64 = 2.0;

/// Per-CPU sums over the traced intervals.
#[derive(Default, Clone)]
struct CpuSums {
    net_rx_ns: u64,
    polls: u64,
    empty_polls: u64,
    packets: u64,
    bh_enable_polls: u64,
    irqs: u64,
    /// Devices polled at bh-enable on this CPU: where threads schedule NAPI.
    bh_enable_devices: BTreeSet<String>,
}

fn is_softirq(context: ExecContext) -> bool {
    matches!(
        context,
        ExecContext::Hardirq | ExecContext::BhEnable | ExecContext::Ksoftirqd
    )
}

fn ratio(numerator: f64, denominator: f64) -> f64 {
    if denominator > 0.0 {
        numerator / denominator
    } else if numerator > 0.0 {
        f64::INFINITY
    } else {
        0.0
    }
}

pub fn check(observation: &Observation) -> Vec<Finding> {
    let (per_cpu, seconds, intervals) = sum_per_cpu(observation);
    match measure(&per_cpu, seconds) {
        Some(m) => vec![finding(&m, intervals)],
        None => Vec::new(),
    }
}

/// Per-CPU sums over the traced intervals, the traced seconds and the intervals used.
fn sum_per_cpu(observation: &Observation) -> (BTreeMap<u32, CpuSums>, f64, Vec<usize>) {
    let mut per_cpu: BTreeMap<u32, CpuSums> = BTreeMap::new();
    let mut seconds = 0.0;
    let mut intervals = Vec::new();
    for interval in &observation.intervals {
        let Some(trace) = &interval.trace else {
            continue;
        };
        if interval.duration_s <= 0.0 {
            continue;
        }
        seconds += interval.duration_s;
        intervals.push(interval.index);
        // Every CPU the trace measured counts, also one that polled nothing.
        for cpu in &trace.cpus {
            per_cpu.entry(cpu.cpu).or_default();
        }
        for row in trace.softirqs.iter().filter(|s| s.name == "NET_RX") {
            per_cpu.entry(row.cpu).or_default().net_rx_ns += row.total_ns;
        }
        for row in trace.napi.iter().filter(|r| is_softirq(r.context)) {
            let sums = per_cpu.entry(row.cpu).or_default();
            sums.polls += row.polls;
            sums.packets += row.packets;
            sums.empty_polls += row.work_histogram.first().copied().unwrap_or(0);
            if row.context == ExecContext::BhEnable {
                sums.bh_enable_polls += row.polls;
                if !row.device.is_empty() {
                    sums.bh_enable_devices.insert(row.device.clone());
                }
            }
        }
        for row in &trace.irqs {
            per_cpu.entry(row.cpu).or_default().irqs += row.count;
        }
    }
    (per_cpu, seconds, intervals)
}

/// The figures of an imbalance that passed every threshold.
struct Imbalance {
    seconds: f64,
    hot_cpu: u32,
    hot_time: f64,
    cool_time: f64,
    bh_share: f64,
    bh_polls: u64,
    total_polls: u64,
    hot_batch: f64,
    cool_batch: f64,
    cool_polls: u64,
    cool_empty: u64,
    hot_irq_rate: f64,
    cool_irq_rate: f64,
    /// Devices polled at bh-enable on the hot CPU, comma separated ("<dev>" if none).
    device_list: String,
}

/// The hot CPU against the others, where every condition of the rule holds.
fn measure(per_cpu: &BTreeMap<u32, CpuSums>, seconds: f64) -> Option<Imbalance> {
    if per_cpu.len() < 2 || seconds <= 0.0 {
        return None;
    }
    let total_packets: u64 = per_cpu.values().map(|s| s.packets).sum();
    let total_polls: u64 = per_cpu.values().map(|s| s.polls).sum();
    let bh_polls: u64 = per_cpu.values().map(|s| s.bh_enable_polls).sum();
    if (total_packets as f64) / seconds < MIN_PACKETS_PER_SECOND || total_polls == 0 {
        return None;
    }
    let bh_share = bh_polls as f64 / total_polls as f64;
    if bh_share < MIN_BH_ENABLE_SHARE {
        return None;
    }
    let (&hot_cpu, hot) = per_cpu.iter().max_by_key(|(_, s)| s.net_rx_ns)?;
    let others: Vec<&CpuSums> = per_cpu
        .iter()
        .filter(|(cpu, _)| **cpu != hot_cpu)
        .map(|(_, s)| s)
        .collect();
    let n_others = others.len() as f64;
    let hot_time = hot.net_rx_ns as f64 / 1e9 / seconds;
    let cool_time =
        others.iter().map(|s| s.net_rx_ns as f64).sum::<f64>() / 1e9 / seconds / n_others;
    let time_ratio = ratio(hot_time, cool_time);
    let cool_polls: u64 = others.iter().map(|s| s.polls).sum();
    let cool_packets: u64 = others.iter().map(|s| s.packets).sum();
    let cool_empty: u64 = others.iter().map(|s| s.empty_polls).sum();
    // Polls on the cool CPUs are part of the signature (pollers that run too early);
    // with none there, one CPU simply owns every instance: not this misreading.
    if hot.polls == 0 || cool_polls == 0 {
        return None;
    }
    let hot_batch = hot.packets as f64 / hot.polls as f64;
    let cool_batch = cool_packets as f64 / cool_polls as f64;
    let batch_ratio = ratio(hot_batch, cool_batch);
    let hot_irq_rate = hot.irqs as f64 / seconds;
    let cool_irq_rate = others.iter().map(|s| s.irqs as f64).sum::<f64>() / seconds / n_others;
    let irqs_concentrated =
        hot.irqs > 0 && ratio(hot_irq_rate, cool_irq_rate) >= time_ratio / IRQ_VS_TIME;
    if hot_time < MIN_HOT_NET_RX
        || time_ratio < MIN_TIME_RATIO
        || batch_ratio < MIN_BATCH_RATIO
        || irqs_concentrated
    {
        return None;
    }
    let devices: Vec<String> = hot.bh_enable_devices.iter().cloned().collect();
    let device_list = if devices.is_empty() {
        "<dev>".to_string()
    } else {
        devices.join(",")
    };
    Some(Imbalance {
        seconds,
        hot_cpu,
        hot_time,
        cool_time,
        bh_share,
        bh_polls,
        total_polls,
        hot_batch,
        cool_batch,
        cool_polls,
        cool_empty,
        hot_irq_rate,
        cool_irq_rate,
        device_list,
    })
}

fn finding(m: &Imbalance, intervals: Vec<usize>) -> Finding {
    // Named for the messages' inline captures.
    let (hot_cpu, device_list) = (m.hot_cpu, &m.device_list);
    let cool_empty_share = m.cool_empty as f64 / m.cool_polls as f64;
    let trace = |v: f64, unit: Unit, how: &str| Metric::derived(v, unit, Source::Trace, how);
    Finding {
        rule: RuleId::NapiLoadImbalance,
        severity: Severity::Warning,
        subject: Subject::Cpu(hot_cpu),
        title: format!(
            "cpu{hot_cpu} carries {:.0}% NET_RX softirq time against {:.0}% on the other CPUs, with NAPI polls scheduled from threads ({:.0}% at bh-enable)",
            m.hot_time * 100.0,
            m.cool_time * 100.0,
            m.bh_share * 100.0
        ),
        evidence: vec![
            Evidence {
                name: format!("cpu{hot_cpu}.net_rx_softirq_time"),
                metric: trace(m.hot_time, Unit::CpuFraction, "NET_RX softirq_entry/exit time / interval"),
            },
            Evidence {
                name: "other_cpus.net_rx_softirq_time".into(),
                metric: trace(m.cool_time, Unit::CpuFraction, "mean over the other traced CPUs"),
            },
            Evidence {
                name: format!("cpu{hot_cpu}.packets_per_poll"),
                metric: trace(m.hot_batch, Unit::PacketsPerEvent, "softirq napi_poll work / polls"),
            },
            Evidence {
                name: "other_cpus.packets_per_poll".into(),
                metric: trace(m.cool_batch, Unit::PacketsPerEvent, "softirq napi_poll work / polls"),
            },
            Evidence {
                name: "other_cpus.empty_polls".into(),
                metric: trace(m.cool_empty as f64 / m.seconds, Unit::PerSecond, "softirq napi_poll that returned 0, summed over the other CPUs"),
            },
            Evidence {
                name: "other_cpus.polls".into(),
                metric: trace(m.cool_polls as f64 / m.seconds, Unit::PerSecond, "softirq napi_poll, summed over the other CPUs"),
            },
            Evidence {
                name: "napi_polls.bh_enable".into(),
                metric: trace(m.bh_polls as f64 / m.seconds, Unit::PerSecond, "napi_poll in a softirq run at local_bh_enable, all CPUs"),
            },
            Evidence {
                name: "napi_polls.softirq".into(),
                metric: trace(m.total_polls as f64 / m.seconds, Unit::PerSecond, "napi_poll in any softirq context, all CPUs"),
            },
            Evidence {
                name: format!("cpu{hot_cpu}.device_irqs"),
                metric: trace(m.hot_irq_rate, Unit::PerSecond, "irq_handler_entry per second"),
            },
            Evidence {
                name: "other_cpus.device_irqs".into(),
                metric: trace(m.cool_irq_rate, Unit::PerSecond, "mean over the other traced CPUs"),
            },
        ],
        threshold: format!(
            "NAPI work >= {MIN_PACKETS_PER_SECOND} pkt/s; bh-enable polls >= {MIN_BH_ENABLE_SHARE} of softirq polls; hot NET_RX time >= {MIN_HOT_NET_RX} and >= {MIN_TIME_RATIO} x the others' mean; packets per poll >= {MIN_BATCH_RATIO} x the others'; device IRQs on the hot CPU < (time ratio / {IRQ_VS_TIME}) x the others' mean"
        ),
        explanation: format!(
            "NAPI instances here are scheduled by threads (polls at bh-enable), so each poll runs on whichever CPU the scheduling thread ran on, not where the device interrupts land. cpu{hot_cpu} ends up with most of the NET_RX work in large late batches while the other CPUs poll often and find little ({:.0}% of their polls returned nothing): the execution-order inversion of the WireGuard study (docs/studies.md M6, WG-2, WG-3), where a later pipeline stage preempts an earlier one. Tick-sampled CPU figures show only a hot core. Threaded NAPI gives each instance its own kthread that the scheduler spreads over CPUs: `napilab tune plan threaded --dev {device_list}` shows the change, `napilab tune apply threaded --dev {device_list}` makes it (journalled) and `napilab tune revert` undoes it.",
            cool_empty_share * 100.0
        ),
        intervals,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::testkit::{cpu, observation_of};
    use crate::trace::{CpuTraceTime, IrqTrace, NapiPollTrace, SoftirqTrace, TraceInterval};

    /// One CPU's trace for a one-second interval: NET_RX time, softirq polls in
    /// `context` (`polls` of which returned nothing), and device IRQs.
    struct CpuLoad {
        cpu: u32,
        net_rx: f64,
        context: ExecContext,
        polls: u64,
        empty: u64,
        packets: u64,
        irqs: u64,
    }

    fn m(v: f64, unit: Unit) -> Metric {
        Metric::new(v, unit, Source::Trace)
    }

    fn traced(loads: &[CpuLoad]) -> Observation {
        let mut obs = observation_of(loads.iter().map(|l| cpu(l.cpu)).collect());
        let trace = TraceInterval {
            napi: loads
                .iter()
                .filter(|l| l.polls > 0)
                .map(|l| NapiPollTrace {
                    napi_id: 0,
                    device: "tun0".into(),
                    ifindex: 5,
                    netns: 0,
                    cpu: l.cpu,
                    context: l.context,
                    application: None,
                    polls: l.polls,
                    packets: l.packets,
                    full_budget_polls: 0,
                    work_histogram: vec![l.empty],
                    polls_per_s: m(l.polls as f64, Unit::PerSecond),
                    packets_per_s: m(l.packets as f64, Unit::PacketsPerSecond),
                })
                .collect(),
            softirqs: loads
                .iter()
                .map(|l| SoftirqTrace {
                    cpu: l.cpu,
                    vector: 3,
                    name: "NET_RX".into(),
                    context: l.context,
                    count: l.polls,
                    total_ns: (l.net_rx * 1e9) as u64,
                    share: m(l.net_rx, Unit::CpuFraction),
                    log2_ns: Vec::new(),
                    raised_runs: 0,
                    raise_to_entry_ns: 0,
                })
                .collect(),
            irqs: loads
                .iter()
                .filter(|l| l.irqs > 0)
                .map(|l| IrqTrace {
                    irq: 40 + l.cpu,
                    cpu: l.cpu,
                    count: l.irqs,
                    total_ns: 0,
                    share: m(0.0, Unit::CpuFraction),
                })
                .collect(),
            cpus: loads
                .iter()
                .map(|l| CpuTraceTime {
                    cpu: l.cpu,
                    softirq: m(l.net_rx, Unit::CpuFraction),
                    net_softirq: m(l.net_rx, Unit::CpuFraction),
                    softirq_ksoftirqd: m(0.0, Unit::CpuFraction),
                    hardirq: m(0.0, Unit::CpuFraction),
                    napi_thread_polls: m(0.0, Unit::PerSecond),
                    busy_poll_polls: m(0.0, Unit::PerSecond),
                })
                .collect(),
            ..TraceInterval::default()
        };
        for interval in &mut obs.intervals {
            interval.trace = Some(trace.clone());
        }
        obs
    }

    /// The WireGuard baseline's shape on four CPUs (WG-2, WG-3): cpu0 at 94% NET_RX
    /// with about 5 packets per poll, the others near 20% with about 1 and many empty
    /// polls, device IRQs spread evenly by RSS, polls scheduled at bh-enable.
    fn inverted(irqs_on_hot: u64) -> Vec<CpuLoad> {
        let mut loads = vec![CpuLoad {
            cpu: 0,
            net_rx: 0.94,
            context: ExecContext::BhEnable,
            polls: 40_000,
            empty: 1_000,
            packets: 200_000,
            irqs: irqs_on_hot,
        }];
        for cpu in 1..4 {
            loads.push(CpuLoad {
                cpu,
                net_rx: 0.20,
                context: ExecContext::BhEnable,
                polls: 30_000,
                empty: 12_000,
                packets: 30_000,
                irqs: 20_000,
            });
        }
        loads
    }

    #[test]
    fn fires_on_the_inversion_signature() {
        let f = check(&traced(&inverted(20_000)));
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].rule, RuleId::NapiLoadImbalance);
        assert_eq!(f[0].subject, Subject::Cpu(0));
        assert!(f[0].title.contains("94%"), "{}", f[0].title);
        assert!(
            f[0].explanation
                .contains("napilab tune apply threaded --dev tun0"),
            "{}",
            f[0].explanation
        );
        let batch = f[0]
            .evidence
            .iter()
            .find(|e| e.name == "cpu0.packets_per_poll")
            .expect("hot batch evidence");
        assert!((batch.metric.value - 5.0).abs() < 1e-9);
        let empty = f[0]
            .evidence
            .iter()
            .find(|e| e.name == "other_cpus.empty_polls")
            .expect("empty-poll evidence");
        assert!((empty.metric.value - 36_000.0).abs() < 1e-6);
        assert!(
            f[0].explanation.contains("(40% of their polls"),
            "{}",
            f[0].explanation
        );
    }

    #[test]
    fn fires_without_any_device_irq() {
        // A TUN device written by threads has no hard IRQ at all.
        assert_eq!(check(&traced(&inverted(0))).len(), 1);
    }

    #[test]
    fn silent_when_the_irqs_are_where_the_work_is() {
        // All device IRQs on cpu0: an IRQ-affinity problem (hot_cpu says so), not an
        // inversion.
        let mut loads = inverted(200_000);
        for l in &mut loads[1..] {
            l.irqs = 1_000;
        }
        assert!(check(&traced(&loads)).is_empty());
    }

    #[test]
    fn silent_when_the_polls_follow_the_irqs() {
        let mut loads = inverted(20_000);
        for l in &mut loads {
            l.context = ExecContext::Hardirq;
        }
        assert!(check(&traced(&loads)).is_empty());
    }

    #[test]
    fn silent_when_the_load_is_balanced() {
        let loads: Vec<CpuLoad> = (0..4)
            .map(|cpu| CpuLoad {
                cpu,
                net_rx: 0.45,
                context: ExecContext::BhEnable,
                polls: 20_000,
                empty: 2_000,
                packets: 60_000,
                irqs: 20_000,
            })
            .collect();
        assert!(check(&traced(&loads)).is_empty());
    }

    #[test]
    fn silent_with_threaded_napi() {
        // The remedy: kthreads poll, no softirq-context polls remain to judge.
        let mut loads = inverted(20_000);
        for l in &mut loads {
            l.context = ExecContext::NapiThread;
            l.net_rx = 0.01;
        }
        assert!(check(&traced(&loads)).is_empty());
    }

    #[test]
    fn silent_at_low_packet_rates_and_without_trace() {
        let mut loads = inverted(20_000);
        for l in &mut loads {
            l.packets /= 100;
        }
        assert!(check(&traced(&loads)).is_empty());
        assert!(check(&observation_of(vec![cpu(0), cpu(1)])).is_empty());
    }
}
