//! Misreading 4: a driver that returns `budget` for TX-completion work fakes polling
//! mode. A poll may return the budget (64) only when it received that many packets, so
//! a NAPI instance's full-budget polls per second cannot exceed the device's received
//! packets per second / 64. Many more full-budget polls than that means the driver
//! breaks the NAPI contract (bcmgenet, mlx5 and bcm63xx with TX work pending;
//! docs/kernel.md#drivers-breaking-the-contract), and "full-budget polls" and packets
//! per softirq stop meaning RX backlog.
//! Needs `observe --trace` (per-NAPI polls) and the device's RX counter.

use std::collections::BTreeMap;

use crate::finding::{Evidence, Finding, RuleId, Severity, Subject};
use crate::metric::{Metric, Source};
use crate::observation::Observation;
use crate::units::Unit;

/// The NAPI weight: a full-budget poll accounts for this many received packets.
pub const WEIGHT: f64 = 64.0;
/// Full-budget polls per second below which the rule stays silent.
pub const MIN_FULL_POLLS: f64 = 10.0;
/// Full-budget polls must exceed what RX justifies by this factor.
pub const MIN_EXCESS: f64 = 2.0;

#[derive(Default)]
struct Totals {
    full_polls: u64,
    polls: u64,
    work: u64,
    rx_packets: f64,
    seconds: f64,
    intervals: Vec<usize>,
}

pub fn check(observation: &Observation) -> Vec<Finding> {
    let mut per_napi: BTreeMap<(String, u32), Totals> = BTreeMap::new();
    for interval in &observation.intervals {
        let Some(trace) = &interval.trace else {
            continue;
        };
        let mut seen: BTreeMap<(String, u32), (u64, u64, u64)> = BTreeMap::new();
        for row in &trace.napi {
            if row.device.is_empty() {
                continue; // the RPS/backlog instance has no device
            }
            if crate::device_join::is_elsewhere(observation.topology.netns, row.netns) {
                continue; // a device of another namespace, which may share the name
            }
            let e = seen.entry((row.device.clone(), row.napi_id)).or_default();
            e.0 += row.full_budget_polls;
            e.1 += row.polls;
            e.2 += row.packets;
        }
        for ((device, napi_id), (full, polls, work)) in seen {
            // Without the device's own RX counter (e.g. it lives in another network
            // namespace) the rule cannot judge.
            let Some(rx) = interval.device(&device).and_then(|d| d.rx_packets.as_ref()) else {
                continue;
            };
            let t = per_napi.entry((device, napi_id)).or_default();
            t.full_polls += full;
            t.polls += polls;
            t.work += work;
            t.rx_packets += rx.value * interval.duration_s;
            t.seconds += interval.duration_s;
            t.intervals.push(interval.index);
        }
    }
    let mut findings = Vec::new();
    for ((device, napi_id), t) in per_napi {
        if t.seconds <= 0.0 {
            continue;
        }
        let full_rate = t.full_polls as f64 / t.seconds;
        let rx_rate = t.rx_packets / t.seconds;
        let justified = rx_rate / WEIGHT;
        if full_rate < MIN_FULL_POLLS || full_rate <= MIN_EXCESS * justified {
            continue;
        }
        let per_poll = if t.polls > 0 {
            t.work as f64 / t.polls as f64
        } else {
            0.0
        };
        let trace = |v: f64, unit: Unit, how: &str| Metric::derived(v, unit, Source::Trace, how);
        findings.push(Finding {
            rule: RuleId::DriverContract,
            severity: Severity::Warning,
            subject: Subject::Device(device.clone()),
            title: format!(
                "{device} NAPI {napi_id}: {full_rate:.0} full-budget polls/s, but {rx_rate:.0} received packets/s justify at most {justified:.1}/s"
            ),
            evidence: vec![
                Evidence {
                    name: format!("{device}.napi{napi_id}.full_budget_polls"),
                    metric: trace(full_rate, Unit::PerSecond, "napi_poll with work >= budget, per second"),
                },
                Evidence {
                    name: format!("{device}.rx_packets"),
                    metric: Metric::new(rx_rate, Unit::PacketsPerSecond, Source::Proc),
                },
                Evidence {
                    name: format!("{device}.napi{napi_id}.packets_per_poll"),
                    metric: trace(per_poll, Unit::PacketsPerEvent, "napi_poll work / polls"),
                },
            ],
            threshold: format!(
                "full-budget polls >= {MIN_FULL_POLLS}/s and > {MIN_EXCESS} x (device RX packets/s / {WEIGHT})"
            ),
            explanation: format!(
                "A NAPI poll may return its budget only when it received that many packets; {device}'s driver returns it far more often than its RX counter allows, which is what drivers do when they count TX completions as work. Full-budget polls, packets per softirq and time_squeeze then no longer mean an RX backlog: this CPU is kept in polling mode by transmit work. Judge load from the device's packet counters and the measured softirq time instead, and check the driver's TX reclaim path."
            ),
            intervals: t.intervals,
        });
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::testkit::device;
    use crate::explain::testkit::observation_of_devices;
    use crate::trace::{ExecContext, NapiPollTrace, TraceInterval};

    fn with_polls(rx_pps: f64, full: u64, polls: u64, work: u64) -> Observation {
        let mut obs = observation_of_devices(vec![device("eth0", "mq", 0.0)]);
        for i in &mut obs.intervals {
            i.devices[0].rx_packets =
                Some(Metric::new(rx_pps, Unit::PacketsPerSecond, Source::Proc));
            i.trace = Some(TraceInterval {
                napi: vec![NapiPollTrace {
                    napi_id: 9,
                    device: "eth0".into(),
                    ifindex: 2,
                    netns: 0,
                    cpu: 0,
                    context: ExecContext::Hardirq,
                    application: None,
                    polls,
                    packets: work,
                    full_budget_polls: full,
                    work_histogram: Vec::new(),
                    polls_per_s: Metric::new(polls as f64, Unit::PerSecond, Source::Trace),
                    packets_per_s: Metric::new(work as f64, Unit::PacketsPerSecond, Source::Trace),
                }],
                ..TraceInterval::default()
            });
        }
        obs
    }

    #[test]
    fn flags_full_budget_polls_without_rx() {
        // 8,300 pkt/s justify 130 full polls/s at most; the driver reports 2,000.
        let f = check(&with_polls(8_300.0, 2_000, 6_000, 2_000 * 64 + 4_000));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].subject, Subject::Device("eth0".into()));
        assert!(f[0].title.contains("NAPI 9"), "{}", f[0].title);
    }

    #[test]
    fn silent_when_rx_explains_the_full_polls() {
        // 1 Mpps: 15,600 full polls/s are justified.
        assert!(check(&with_polls(1_000_000.0, 15_000, 16_000, 1_000_000)).is_empty());
    }

    #[test]
    fn another_namespaces_device_of_the_same_name_is_not_judged_by_this_ones_rx() {
        // Full polls of a container's eth0, against this namespace's idle eth0.
        let mut obs = with_polls(8_300.0, 2_000, 6_000, 2_000 * 64 + 4_000);
        obs.topology.netns = Some(4026531840);
        for t in obs.intervals.iter_mut().filter_map(|i| i.trace.as_mut()) {
            t.napi[0].netns = 4026532500;
        }
        assert!(check(&obs).is_empty());
        // The same rows recorded in this namespace are judged.
        for t in obs.intervals.iter_mut().filter_map(|i| i.trace.as_mut()) {
            t.napi[0].netns = 4026531840;
        }
        assert_eq!(check(&obs).len(), 1);
    }

    #[test]
    fn silent_without_trace() {
        let obs = observation_of_devices(vec![device("eth0", "mq", 0.0)]);
        assert!(check(&obs).is_empty());
    }
}
