//! What `napilab top` shows, as plain rows: a pure function of an Observation (the
//! map, a window of intervals, the findings over that window), tested without a terminal.
//! Rates come from the window's last interval, as top's do; findings from the window.

use std::collections::BTreeMap;

use napilab_core::topology::Poller;
use napilab_core::trace::ExecContext;
use napilab_core::{Finding, Observation, Severity};

/// One NAPI instance: where it is, who polls it, how often and how much per poll.
#[derive(Clone, Debug, PartialEq)]
pub struct NapiRow {
    pub napi_id: u32,
    pub device: String,
    /// RX queues it serves, e.g. "0" or "0-3"; empty when the map does not say.
    pub queues: String,
    pub irq: Option<u32>,
    /// CPUs it runs on: where the trace tier saw it polled, else the IRQ's affinity or
    /// the kthread's allowed CPUs from the map.
    pub cpus: String,
    /// Who polls it: the contexts the trace tier saw (busiest first), else the map's
    /// poller ("softirq", "kthread napi/...").
    pub polled_by: String,
    /// Polls per second summed over contexts and CPUs (trace tier).
    pub polls_per_s: Option<f64>,
    /// Packets per poll over all contexts (trace tier).
    pub packets_per_poll: Option<f64>,
    /// Per context: (context, polls/s, packets per poll), busiest first.
    pub by_context: Vec<(ExecContext, f64, f64)>,
    /// Packets per second the device (or this queue, where the driver counts per queue)
    /// received (proc tier).
    pub rx_pps: Option<f64>,
    /// False for instances the trace tier saw in another network namespace.
    pub in_map: bool,
}

/// One CPU: softirq and IRQ time measured (trace tier) beside /proc/stat's ticks,
/// softnet counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuRow {
    pub cpu: u32,
    /// Fractions of the CPU.
    pub softirq_measured: Option<f64>,
    pub softirq_ticks: Option<f64>,
    pub irq_measured: Option<f64>,
    pub irq_ticks: Option<f64>,
    pub ksoftirqd: Option<f64>,
    /// Per second.
    pub net_rx_softirqs: Option<f64>,
    pub processed: Option<f64>,
    pub dropped: Option<f64>,
    pub squeezed: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FindingRow {
    pub warning: bool,
    pub rule: &'static str,
    pub subject: String,
    pub title: String,
    /// "name=value (source), ..."
    pub evidence: String,
    /// Seconds into the observation when it fired (held since).
    pub since_s: f64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    pub napi: Vec<NapiRow>,
    pub cpus: Vec<CpuRow>,
    pub findings: Vec<FindingRow>,
    /// True when the last interval carries the trace tier.
    pub traced: bool,
    /// End of the last interval, seconds since the observation began.
    pub at_s: f64,
    pub interval_s: f64,
}

/// Which column the NAPI table is sorted by (`s` cycles through them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortKey {
    #[default]
    Polls,
    RxPackets,
    NapiId,
    Device,
}

impl SortKey {
    pub fn next(self) -> SortKey {
        match self {
            SortKey::Polls => SortKey::RxPackets,
            SortKey::RxPackets => SortKey::NapiId,
            SortKey::NapiId => SortKey::Device,
            SortKey::Device => SortKey::Polls,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Polls => "polls/s",
            SortKey::RxPackets => "rx pkt/s",
            SortKey::NapiId => "napi id",
            SortKey::Device => "device",
        }
    }
}

/// Short names for the table; the help screen spells them out.
pub fn context_short(context: ExecContext) -> &'static str {
    match context {
        ExecContext::Hardirq => "after-irq",
        ExecContext::BhEnable => "bh-enable",
        ExecContext::Ksoftirqd => "ksoftirqd",
        ExecContext::NapiThread => "kthread",
        ExecContext::BusyPoll => "busy-poll",
    }
}

fn cpus_label(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if end > start {
            format!("{start}-{end}")
        } else {
            start.to_string()
        });
        i += 1;
    }
    parts.join(",")
}

/// The rows of `observation`: its intervals are the window, its findings those of the
/// window. `fired_s` says when each finding (rule, subject) first fired; findings not in
/// it fired at the window's end.
pub fn rows(observation: &Observation, fired_s: &BTreeMap<(String, String), f64>) -> Rows {
    let Some(last) = observation.intervals.last() else {
        return Rows::default();
    };
    let at_s = last.start_s + last.duration_s;
    Rows {
        napi: napi_rows(observation, last),
        cpus: cpu_rows(last),
        findings: finding_rows(&observation.findings, fired_s, at_s),
        traced: last.trace.is_some(),
        at_s,
        interval_s: last.duration_s,
    }
}

#[derive(Default)]
struct Traced {
    device: String,
    /// The device's network namespace inode (0: unknown or no device).
    netns: u32,
    cpus: Vec<u32>,
    /// context -> (polls, packets) per second
    contexts: BTreeMap<ExecContext, (f64, f64)>,
}

fn napi_rows(observation: &Observation, last: &napilab_core::Interval) -> Vec<NapiRow> {
    let mut traced: BTreeMap<u32, Traced> = BTreeMap::new();
    for p in last.trace.iter().flat_map(|t| &t.napi) {
        let t = traced.entry(p.napi_id).or_default();
        if t.device.is_empty() {
            t.device = p.device.clone();
            t.netns = p.netns;
        }
        t.cpus.push(p.cpu);
        let c = t.contexts.entry(p.context).or_default();
        c.0 += p.polls_per_s.value;
        c.1 += p.packets_per_s.value;
    }
    let topology = &observation.topology;
    let mut rows = Vec::new();
    for device in &topology.devices {
        let device_rx = last
            .device(&device.name)
            .and_then(|d| d.rx_packets.as_ref())
            .map(|m| m.value);
        for napi in &device.napis {
            let (map_poller, map_cpus) = match &napi.poller {
                Poller::Thread(t) => (format!("kthread {}", t.name), t.allowed_cpus.clone()),
                Poller::Softirq { cpus, .. } => ("softirq".to_string(), cpus.clone()),
                Poller::Unknown => ("unknown".to_string(), Vec::new()),
            };
            let irq_cpus = napi
                .irq
                .and_then(|n| topology.irqs.iter().find(|i| i.number == n))
                .map(|i| i.affinity.clone());
            // Per-queue packets where the driver counts them, else the device's.
            let queue_rx = last.device(&device.name).and_then(|d| {
                let mine: Vec<f64> = d
                    .queues
                    .iter()
                    .filter(|q| q.napi_id == Some(napi.id))
                    .filter_map(|q| q.packets.as_ref().map(|m| m.value))
                    .collect();
                (!mine.is_empty()).then(|| mine.iter().sum())
            });
            let rx_pps = queue_rx.or(if device.napis.len() == 1 {
                device_rx
            } else {
                None
            });
            let t = traced.remove(&napi.id);
            rows.push(row(
                napi.id,
                device.name.clone(),
                cpus_label(&napi.rx_queues),
                napi.irq,
                irq_cpus.unwrap_or(map_cpus),
                map_poller,
                t,
                rx_pps,
                true,
                last.trace.is_some(),
            ));
        }
    }
    // What the trace tier saw that the map does not know: the backlog (id 0) and
    // instances of devices in other network namespaces.
    for (napi_id, t) in traced {
        let device = if napi_id == 0 {
            "backlog".to_string()
        } else {
            napilab_core::device_join::label(topology.netns, &t.device, t.netns)
        };
        rows.push(row(
            napi_id,
            device,
            String::new(),
            None,
            Vec::new(),
            String::new(),
            Some(t),
            None,
            false,
            true,
        ));
    }
    rows
}

#[allow(clippy::too_many_arguments)]
fn row(
    napi_id: u32,
    device: String,
    queues: String,
    irq: Option<u32>,
    map_cpus: Vec<u32>,
    map_poller: String,
    traced: Option<Traced>,
    rx_pps: Option<f64>,
    in_map: bool,
    tier_traced: bool,
) -> NapiRow {
    let mut by_context: Vec<(ExecContext, f64, f64)> = traced
        .as_ref()
        .map(|t| {
            t.contexts
                .iter()
                .map(|(c, (polls, packets))| {
                    let per = if *polls > 0.0 { packets / polls } else { 0.0 };
                    (*c, *polls, per)
                })
                .collect()
        })
        .unwrap_or_default();
    by_context.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let polls: f64 = by_context.iter().map(|c| c.1).sum();
    let packets: f64 = traced
        .as_ref()
        .map(|t| t.contexts.values().map(|c| c.1).sum())
        .unwrap_or(0.0);
    let polled_by = if by_context.iter().any(|c| c.1 > 0.0) {
        by_context
            .iter()
            .filter(|c| c.1 > 0.0)
            .map(|c| context_short(c.0))
            .collect::<Vec<_>>()
            .join(" ")
    } else if tier_traced && map_poller.is_empty() {
        "idle".into()
    } else {
        map_poller
    };
    let cpus = match traced.as_ref() {
        Some(t) if !t.cpus.is_empty() => cpus_label(&t.cpus),
        _ => cpus_label(&map_cpus),
    };
    NapiRow {
        napi_id,
        device,
        queues,
        irq,
        cpus,
        polled_by,
        // The trace tier counts every instance: one it did not see did not poll.
        polls_per_s: tier_traced.then_some(polls),
        packets_per_poll: (tier_traced && polls > 0.0).then(|| packets / polls),
        by_context,
        rx_pps,
        in_map,
    }
}

fn cpu_rows(last: &napilab_core::Interval) -> Vec<CpuRow> {
    let value = |m: &Option<napilab_core::Metric>| m.as_ref().map(|m| m.value);
    last.cpus
        .iter()
        .map(|c| {
            let measured = last
                .trace
                .as_ref()
                .and_then(|t| t.cpus.iter().find(|m| m.cpu == c.cpu));
            CpuRow {
                cpu: c.cpu,
                softirq_measured: measured.map(|m| m.softirq.value),
                softirq_ticks: c.time.as_ref().map(|t| t.softirq.value),
                irq_measured: measured.map(|m| m.hardirq.value),
                irq_ticks: c.time.as_ref().map(|t| t.irq.value),
                ksoftirqd: value(&c.ksoftirqd),
                net_rx_softirqs: value(&c.net_rx_softirqs),
                processed: value(&c.softnet_processed),
                dropped: value(&c.softnet_dropped),
                squeezed: value(&c.time_squeeze),
            }
        })
        .collect()
}

/// The key under which a finding's first firing is remembered.
pub fn finding_key(f: &Finding) -> (String, String) {
    (f.rule.name().to_string(), f.subject.to_string())
}

fn finding_rows(
    findings: &[Finding],
    fired_s: &BTreeMap<(String, String), f64>,
    at_s: f64,
) -> Vec<FindingRow> {
    let mut rows: Vec<FindingRow> = findings
        .iter()
        .map(|f| FindingRow {
            warning: f.severity == Severity::Warning,
            rule: f.rule.name(),
            subject: f.subject.to_string(),
            title: f.title.clone(),
            evidence: f
                .evidence
                .iter()
                .map(napilab_core::Evidence::brief)
                .collect::<Vec<_>>()
                .join(", "),
            since_s: fired_s.get(&finding_key(f)).copied().unwrap_or(at_s),
        })
        .collect();
    // Warnings first, then the most recent.
    rows.sort_by(|a, b| {
        b.warning
            .cmp(&a.warning)
            .then(b.since_s.total_cmp(&a.since_s))
            .then(a.rule.cmp(b.rule))
    });
    rows
}

/// The NAPI rows to show: those matching `filter` (a substring of the device, the
/// NAPI id, the CPUs or who polls it; empty: all), sorted by `key` (largest first for
/// the rates, ascending for ids and names; `reverse` flips it).
pub fn arrange(rows: &[NapiRow], key: SortKey, reverse: bool, filter: &str) -> Vec<NapiRow> {
    let needle = filter.to_lowercase();
    let mut shown: Vec<NapiRow> = rows
        .iter()
        .filter(|r| {
            needle.is_empty()
                || r.device.to_lowercase().contains(&needle)
                || r.napi_id.to_string() == needle
                || r.polled_by.to_lowercase().contains(&needle)
                || r.irq.is_some_and(|i| i.to_string() == needle)
        })
        .cloned()
        .collect();
    let rate = |v: Option<f64>| v.unwrap_or(-1.0);
    shown.sort_by(|a, b| {
        let order = match key {
            SortKey::Polls => rate(b.polls_per_s).total_cmp(&rate(a.polls_per_s)),
            SortKey::RxPackets => rate(b.rx_pps).total_cmp(&rate(a.rx_pps)),
            SortKey::NapiId => a.napi_id.cmp(&b.napi_id),
            SortKey::Device => a.device.cmp(&b.device),
        };
        order.then(a.napi_id.cmp(&b.napi_id))
    });
    if reverse {
        shown.reverse();
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use napilab_core::trace::{CpuTraceTime, NapiPollTrace, TraceInterval};
    use napilab_core::{
        CpuInterval, CpuTimeShares, Device, DeviceInterval, HostFacts, Interval, IrqInfo, Metric,
        Napi, Origin, OriginKind, Settings, Source, ThreadInfo, TopologyMap, Unit,
    };

    fn m(value: f64, unit: Unit) -> Metric {
        Metric::new(value, unit, Source::Proc)
    }

    fn observation() -> Observation {
        let mut obs = Observation {
            schema: napilab_core::OBSERVATION_SCHEMA.into(),
            origin: Origin {
                kind: OriginKind::Replay,
                hostname: Some("h".into()),
                kernel: None,
                started_unix_ms: 0,
                napilab_version: "test".into(),
            },
            host: HostFacts::default(),
            settings: Settings::default(),
            topology: TopologyMap::default(),
            intervals: Vec::new(),
            findings: Vec::new(),
            notices: Vec::new(),
            trace_cost: None,
        };
        obs.topology.devices = vec![
            Device {
                name: "eth0".into(),
                ifindex: 2,
                napis: vec![
                    Napi {
                        id: 8193,
                        irq: Some(40),
                        rx_queues: vec![0],
                        poller: Poller::Softirq {
                            cpus: vec![0],
                            how: "IRQ affinity".into(),
                        },
                        ..Default::default()
                    },
                    Napi {
                        id: 8194,
                        irq: Some(41),
                        rx_queues: vec![1],
                        poller: Poller::Thread(ThreadInfo {
                            name: "napi/eth0-8194".into(),
                            allowed_cpus: vec![1],
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
            Device {
                name: "veth0".into(),
                ifindex: 3,
                napis: vec![Napi {
                    id: 8195,
                    ..Default::default()
                }],
                ..Default::default()
            },
        ];
        obs.topology.irqs = vec![IrqInfo {
            number: 40,
            affinity: vec![0, 1],
            ..Default::default()
        }];
        let shares = |softirq: f64, irq: f64| CpuTimeShares {
            user: m(0.1, Unit::CpuFraction),
            nice: m(0.0, Unit::CpuFraction),
            system: m(0.1, Unit::CpuFraction),
            idle: m(0.5, Unit::CpuFraction),
            iowait: m(0.0, Unit::CpuFraction),
            irq: m(irq, Unit::CpuFraction),
            softirq: m(softirq, Unit::CpuFraction),
            steal: m(0.0, Unit::CpuFraction),
        };
        obs.intervals = vec![Interval {
            index: 0,
            start_s: 0.0,
            duration_s: 1.0,
            cpus: vec![CpuInterval {
                cpu: 0,
                time: Some(shares(0.04, 0.01)),
                softnet_processed: Some(m(1000.0, Unit::PacketsPerSecond)),
                softnet_dropped: Some(m(3.0, Unit::PacketsPerSecond)),
                time_squeeze: Some(m(2.0, Unit::PerSecond)),
                net_rx_softirqs: Some(m(500.0, Unit::PerSecond)),
                ..Default::default()
            }],
            devices: vec![DeviceInterval {
                name: "veth0".into(),
                ifindex: 3,
                rx_packets: Some(m(1000.0, Unit::PacketsPerSecond)),
                ..Default::default()
            }],
            ..Default::default()
        }];
        obs
    }

    fn poll(
        napi_id: u32,
        device: &str,
        cpu: u32,
        context: ExecContext,
        polls: f64,
        packets: f64,
    ) -> NapiPollTrace {
        NapiPollTrace {
            napi_id,
            device: device.into(),
            ifindex: 0,
            netns: 0,
            cpu,
            context,
            application: None,
            polls: polls as u64,
            packets: packets as u64,
            full_budget_polls: 0,
            work_histogram: Vec::new(),
            polls_per_s: Metric::new(polls, Unit::PerSecond, Source::Trace),
            packets_per_s: Metric::new(packets, Unit::PacketsPerSecond, Source::Trace),
        }
    }

    #[test]
    fn proc_tier_rows_come_from_the_map_and_the_counters() {
        let rows = rows(&observation(), &BTreeMap::new());
        assert!(!rows.traced);
        assert_eq!(rows.napi.len(), 3);
        let eth0 = &rows.napi[0];
        assert_eq!(
            (eth0.napi_id, eth0.queues.as_str(), eth0.irq),
            (8193, "0", Some(40))
        );
        // The IRQ's affinity, not the poller's guess.
        assert_eq!(eth0.cpus, "0-1");
        assert_eq!(eth0.polled_by, "softirq");
        assert_eq!(
            eth0.polls_per_s, None,
            "no trace tier: polls are unknown, not zero"
        );
        // Two instances on eth0 and no per-queue counters: its packets are not split.
        assert_eq!(eth0.rx_pps, None);
        assert_eq!(rows.napi[1].polled_by, "kthread napi/eth0-8194");
        assert_eq!(rows.napi[1].cpus, "1");
        assert_eq!(rows.napi[2].rx_pps, Some(1000.0));
        let cpu = &rows.cpus[0];
        assert_eq!(cpu.softirq_ticks, Some(0.04));
        assert_eq!(cpu.softirq_measured, None);
        assert_eq!((cpu.dropped, cpu.squeezed), (Some(3.0), Some(2.0)));
    }

    #[test]
    fn trace_tier_rows_split_polls_by_context_and_keep_other_namespaces() {
        let mut obs = observation();
        obs.intervals[0].trace = Some(TraceInterval {
            napi: vec![
                poll(8195, "veth0", 0, ExecContext::Hardirq, 100.0, 400.0),
                poll(8195, "veth0", 1, ExecContext::Ksoftirqd, 300.0, 19200.0),
                poll(9000, "vb", 1, ExecContext::BhEnable, 10.0, 10.0),
            ],
            cpus: vec![CpuTraceTime {
                cpu: 0,
                softirq: Metric::new(0.12, Unit::CpuFraction, Source::Trace),
                net_softirq: Metric::new(0.1, Unit::CpuFraction, Source::Trace),
                softirq_ksoftirqd: Metric::new(0.0, Unit::CpuFraction, Source::Trace),
                hardirq: Metric::new(0.02, Unit::CpuFraction, Source::Trace),
                napi_thread_polls: Metric::new(0.0, Unit::PerSecond, Source::Trace),
                busy_poll_polls: Metric::new(0.0, Unit::PerSecond, Source::Trace),
            }],
            ..TraceInterval::default()
        });
        let rows = rows(&obs, &BTreeMap::new());
        assert!(rows.traced);
        let veth = rows
            .napi
            .iter()
            .find(|r| r.napi_id == 8195)
            .expect("veth0's instance");
        assert_eq!(veth.polls_per_s, Some(400.0));
        assert_eq!(veth.packets_per_poll, Some(49.0));
        assert_eq!(
            veth.polled_by, "ksoftirqd after-irq",
            "busiest context first"
        );
        assert_eq!(veth.by_context[0], (ExecContext::Ksoftirqd, 300.0, 64.0));
        assert_eq!(veth.cpus, "0-1");
        // Traced but not polled: zero polls, not unknown.
        let eth0 = rows.napi.iter().find(|r| r.napi_id == 8193).expect("eth0");
        assert_eq!(eth0.polls_per_s, Some(0.0));
        assert_eq!(eth0.packets_per_poll, None);
        let other = rows
            .napi
            .iter()
            .find(|r| r.napi_id == 9000)
            .expect("other netns");
        assert!(!other.in_map);
        assert_eq!(other.device, "vb");
        assert_eq!(rows.cpus[0].softirq_measured, Some(0.12));
        assert_eq!(rows.cpus[0].irq_measured, Some(0.02));
    }

    #[test]
    fn findings_carry_evidence_and_when_they_fired_warnings_first() {
        let mut obs = observation();
        let finding = |rule, severity, subject: &str| Finding {
            rule,
            severity,
            subject: napilab_core::Subject::Device(subject.into()),
            title: format!("{subject} title"),
            evidence: vec![napilab_core::Evidence {
                name: "drops".into(),
                metric: m(1500.0, Unit::PerSecond),
            }],
            threshold: String::new(),
            explanation: String::new(),
            intervals: vec![0],
        };
        obs.findings = vec![
            finding(
                napilab_core::RuleId::EgressWithoutQdisc,
                Severity::Info,
                "veth0",
            ),
            finding(napilab_core::RuleId::TimeSqueeze, Severity::Warning, "eth0"),
        ];
        let mut fired = BTreeMap::new();
        fired.insert(
            ("egress_without_qdisc".to_string(), "veth0".to_string()),
            0.5,
        );
        let rows = rows(&obs, &fired);
        assert_eq!(rows.findings[0].rule, "time_squeeze");
        assert!(rows.findings[0].warning);
        assert_eq!(rows.findings[0].since_s, 1.0, "not seen before: fired now");
        assert_eq!(rows.findings[1].since_s, 0.5);
        assert_eq!(rows.findings[1].evidence, "drops=1.5k (proc)");
    }

    #[test]
    fn arrange_filters_and_sorts() {
        let rows = rows(&observation(), &BTreeMap::new()).napi;
        let ids = |v: Vec<NapiRow>| v.iter().map(|r| r.napi_id).collect::<Vec<_>>();
        assert_eq!(
            ids(arrange(&rows, SortKey::RxPackets, false, "")),
            [8195, 8193, 8194]
        );
        assert_eq!(
            ids(arrange(&rows, SortKey::NapiId, true, "")),
            [8195, 8194, 8193]
        );
        assert_eq!(
            ids(arrange(&rows, SortKey::Device, false, "")),
            [8193, 8194, 8195]
        );
        assert_eq!(ids(arrange(&rows, SortKey::Device, false, "VETH")), [8195]);
        assert_eq!(
            ids(arrange(&rows, SortKey::Polls, false, "kthread")),
            [8194]
        );
        assert_eq!(ids(arrange(&rows, SortKey::Polls, false, "41")), [8194]);
        assert!(arrange(&rows, SortKey::Polls, false, "nothing").is_empty());
    }

    #[test]
    fn an_observation_without_intervals_has_no_rows() {
        let mut obs = observation();
        obs.intervals.clear();
        assert_eq!(rows(&obs, &BTreeMap::new()), Rows::default());
    }
}
