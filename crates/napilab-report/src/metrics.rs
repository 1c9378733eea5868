//! A point flattened into long-format rows (scope, name, value, unit, source), the shape
//! of the store's `metrics` table. Every row keeps the source of its number (docs/architecture.md
//! principle 1); a derived number also says how it was derived.

use napilab_core::stats::mean_over;
use napilab_core::{Metric, Observation, PointResult, RunKind, Source, Unit};
use serde::Serialize;

/// Source of numbers counted by napilab's own traffic engine (generator and sink) in a
/// lab run. The twin's traffic numbers carry `model`.
pub const ENGINE_SOURCE: &str = "engine";

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricRow {
    /// What the number is about: `traffic`, `class:<name>`, `generator`, `sink`,
    /// `cpu<N>`, a device name, `irq<N>`, `thread:<name>`, `host`.
    pub scope: String,
    pub name: String,
    pub value: f64,
    /// `packets_per_second`, `cpu_fraction`, ... (napilab-core's `Unit` names) or one of
    /// `packets`, `ratio`, `microseconds`, `nanoseconds`, `flag`.
    pub unit: String,
    /// `proc`, `tick`, `trace`, `sample`, `model`, or `engine`.
    pub source: String,
    /// For a derived number: how it was computed.
    pub derived: Option<String>,
}

pub fn unit_name(unit: Unit) -> &'static str {
    match unit {
        Unit::PerSecond => "per_second",
        Unit::PacketsPerSecond => "packets_per_second",
        Unit::BitsPerSecond => "bits_per_second",
        Unit::CpuFraction => "cpu_fraction",
        Unit::PacketsPerEvent => "packets_per_event",
        Unit::CpuPerMbps => "cpu_per_mbps",
        Unit::Count => "count",
        Unit::Nanoseconds => "nanoseconds",
    }
}

/// Source of the traffic engine's numbers for this kind of run.
pub fn traffic_source(kind: RunKind) -> &'static str {
    match kind {
        RunKind::Lab => ENGINE_SOURCE,
        RunKind::Model => "model",
    }
}

/// Source of the kernel loss counters a class reports.
fn counter_source(kind: RunKind) -> &'static str {
    match kind {
        RunKind::Lab => "proc",
        RunKind::Model => "model",
    }
}

struct Rows {
    rows: Vec<MetricRow>,
}

impl Rows {
    fn plain(&mut self, scope: &str, name: &str, value: f64, unit: &str, source: &str) {
        self.derived(scope, name, value, unit, source, None);
    }

    fn derived(
        &mut self,
        scope: &str,
        name: &str,
        value: f64,
        unit: &str,
        source: &str,
        how: Option<String>,
    ) {
        if value.is_finite() {
            self.rows.push(MetricRow {
                scope: scope.to_string(),
                name: name.to_string(),
                value,
                unit: unit.to_string(),
                source: source.to_string(),
                derived: how,
            });
        }
    }

    fn metric(&mut self, scope: &str, name: &str, metric: &Metric) {
        self.derived(
            scope,
            name,
            metric.value,
            unit_name(metric.unit),
            metric.source.as_str(),
            metric.derived.clone(),
        );
    }
}

/// All numbers of one point as metric rows. Observation metrics are duration-weighted
/// means over the point's intervals; the per-interval series stays in the run's JSON.
pub fn point_metrics(kind: RunKind, point: &PointResult) -> Vec<MetricRow> {
    let mut r = Rows { rows: Vec::new() };
    let traffic = traffic_source(kind);
    r.plain(
        "traffic",
        "offered_pps",
        point.offered_pps,
        "packets_per_second",
        traffic,
    );
    r.derived(
        "traffic",
        "delivered_pps",
        point.delivered_pps(),
        "packets_per_second",
        traffic,
        Some("received packets of all classes / duration".into()),
    );
    r.derived(
        "traffic",
        "loss",
        point.loss_ratio(),
        "ratio",
        traffic,
        Some("(sent - received) / sent over all classes".into()),
    );
    for class in &point.classes {
        let scope = format!("class:{}", class.name);
        r.plain(&scope, "sent", class.sent as f64, "packets", traffic);
        r.plain(
            &scope,
            "received",
            class.received as f64,
            "packets",
            traffic,
        );
        r.plain(
            &scope,
            "reordered",
            class.reordered as f64,
            "packets",
            traffic,
        );
        for (counter, value) in &class.loss_counters {
            r.plain(
                &scope,
                &format!("loss_counter:{counter}"),
                *value as f64,
                "packets",
                counter_source(kind),
            );
        }
        if let Some(lat) = &class.latency {
            r.plain(
                &scope,
                "latency_samples",
                lat.samples as f64,
                "count",
                traffic,
            );
            for (name, value) in [
                ("latency_mean_us", lat.mean_us),
                ("latency_p50_us", lat.p50_us),
                ("latency_p90_us", lat.p90_us),
                ("latency_p99_us", lat.p99_us),
                ("latency_p999_us", lat.p999_us),
                ("latency_max_us", lat.max_us),
            ] {
                r.plain(&scope, name, value, "microseconds", traffic);
            }
        }
    }
    for (scope, engine) in [("generator", &point.generator), ("sink", &point.sink)] {
        if let Some(busy) = engine.cpu_busy {
            r.plain(scope, "cpu_busy", busy, "cpu_fraction", traffic);
        }
        r.plain(
            scope,
            "saturated",
            if engine.saturated { 1.0 } else { 0.0 },
            "flag",
            traffic,
        );
        for (counter, value) in &engine.counters {
            r.plain(scope, counter, *value as f64, "count", traffic);
        }
    }
    if let Some(obs) = &point.observation {
        observation_rows(&mut r, obs);
    }
    if let Some(m) = &point.many_napi {
        many_napi_rows(&mut r, m);
    }
    r.rows
}

/// The many-napi topology's numbers under scope `napi` (kthreads: `proc`; polls and
/// NET_RX time: `trace`).
fn many_napi_rows(r: &mut Rows, m: &napilab_core::many_napi::ManyNapiPoint) {
    r.plain(
        "napi",
        "instances",
        f64::from(m.instances),
        "count",
        "engine",
    );
    r.plain("napi", "flows", f64::from(m.flows), "count", "engine");
    if let Some(n) = m.instances_polled {
        r.plain("napi", "instances_polled", f64::from(n), "count", "trace");
    }
    r.plain("napi", "lost_polls", m.lost_polls as f64, "count", "trace");
    if let Some(v) = m.dut_cpu_ns_per_packet {
        r.derived(
            "napi",
            "dut_cpu_ns_per_packet",
            v,
            "nanoseconds",
            "trace",
            Some("(NET_RX softirq ns + NAPI kthread on-CPU ns) / delivered packets".into()),
        );
    }
    if let Some(k) = &m.kthreads {
        for (name, v) in [
            ("kthreads", u64::from(k.count)),
            ("kthreads_pinned", u64::from(k.pinned)),
            ("kthread_voluntary_switches", k.voluntary_switches),
            ("kthread_involuntary_switches", k.involuntary_switches),
            ("kthread_migrations", k.migrations),
            ("kthread_max_voluntary_switches", k.max_voluntary_switches),
            (
                "kthread_max_involuntary_switches",
                k.max_involuntary_switches,
            ),
            ("kthread_max_migrations", k.max_migrations),
        ] {
            r.plain("napi", name, v as f64, "count", "proc");
        }
    }
    for c in &m.polls {
        let scope = format!("napi:{}", c.context.as_str());
        r.plain(&scope, "polls_per_s", c.polls_per_s, "per_second", "trace");
        r.plain(
            &scope,
            "packets_per_poll",
            c.packets_per_poll,
            "packets_per_event",
            "trace",
        );
    }
}

fn observation_rows(r: &mut Rows, obs: &Observation) {
    let iv = &obs.intervals;
    for cpu in napilab_core::stats::cpus(obs) {
        cpu_rows(r, obs, cpu);
    }
    for (stage, cores) in crate::series::stage_cores(obs) {
        r.plain(
            &format!("stage:{stage}"),
            "cpus",
            cores,
            unit_name(Unit::CpuFraction),
            Source::Sample.as_str(),
        );
    }
    device_rows(r, iv);
    irq_and_thread_rows(r, iv);
    for (name, pick) in [
        (
            "rx_bits",
            (|i: &napilab_core::Interval| i.host.rx_bits.as_ref())
                as fn(&napilab_core::Interval) -> Option<&Metric>,
        ),
        ("cpu_per_mbps", |i| i.host.cpu_per_mbps.as_ref()),
    ] {
        if let Some((m, _)) = mean_over(iv.iter().map(|i| (i, pick(i)))) {
            r.metric("host", name, &m);
        }
    }
}

/// One CPU's means: counters, tick-sampled time shares, busy time and traced time.
fn cpu_rows(r: &mut Rows, obs: &Observation, cpu: u32) {
    let iv = &obs.intervals;
    let scope = format!("cpu{cpu}");
    type Pick = fn(&napilab_core::CpuInterval) -> Option<&Metric>;
    let picks: [(&str, Pick); 12] = [
        ("hardirqs", |c| c.hardirqs.as_ref()),
        ("net_hardirqs", |c| c.net_hardirqs.as_ref()),
        ("net_rx_softirqs", |c| c.net_rx_softirqs.as_ref()),
        ("net_tx_softirqs", |c| c.net_tx_softirqs.as_ref()),
        ("softnet_processed", |c| c.softnet_processed.as_ref()),
        ("softnet_dropped", |c| c.softnet_dropped.as_ref()),
        ("time_squeeze", |c| c.time_squeeze.as_ref()),
        ("flow_limit", |c| c.flow_limit.as_ref()),
        ("received_rps", |c| c.received_rps.as_ref()),
        ("packets_per_net_rx_softirq", |c| {
            c.packets_per_net_rx_softirq.as_ref()
        }),
        ("packets_per_net_hardirq", |c| {
            c.packets_per_net_hardirq.as_ref()
        }),
        ("ksoftirqd", |c| c.ksoftirqd.as_ref()),
    ];
    for (name, pick) in picks {
        let mean = mean_over(iv.iter().map(|i| (i, i.cpu(cpu).and_then(pick))));
        if let Some((m, _)) = mean {
            r.metric(&scope, name, &m);
        }
    }
    type SharePick = fn(&napilab_core::CpuTimeShares) -> &Metric;
    let shares: [(&str, SharePick); 8] = [
        ("time.user", |t| &t.user),
        ("time.nice", |t| &t.nice),
        ("time.system", |t| &t.system),
        ("time.idle", |t| &t.idle),
        ("time.iowait", |t| &t.iowait),
        ("time.irq", |t| &t.irq),
        ("time.softirq", |t| &t.softirq),
        ("time.steal", |t| &t.steal),
    ];
    for (name, pick) in shares {
        let mean = mean_over(
            iv.iter()
                .map(|i| (i, i.cpu(cpu).and_then(|c| c.time.as_ref()).map(pick))),
        );
        if let Some((m, _)) = mean {
            r.metric(&scope, name, &m);
        }
    }
    if let Some(busy) = crate::series::cpu_busy(obs, cpu) {
        r.metric(&scope, "time.busy", &busy);
    }
    type TracePick = fn(&napilab_core::trace::CpuTraceTime) -> &Metric;
    let traced: [(&str, TracePick); 4] = [
        ("measured.softirq", |t| &t.softirq),
        ("measured.net_softirq", |t| &t.net_softirq),
        ("measured.softirq_ksoftirqd", |t| &t.softirq_ksoftirqd),
        ("measured.hardirq", |t| &t.hardirq),
    ];
    for (name, pick) in traced {
        if let Some(m) = crate::series::traced_cpu_time(obs, cpu, pick) {
            r.metric(&scope, name, &m);
        }
    }
}

/// Each device's means over the intervals that saw it.
fn device_rows(r: &mut Rows, iv: &[napilab_core::Interval]) {
    let mut devices: Vec<&str> = iv
        .iter()
        .flat_map(|i| i.devices.iter().map(|d| d.name.as_str()))
        .collect();
    devices.sort_unstable();
    devices.dedup();
    for dev in devices {
        type DevPick = fn(&napilab_core::DeviceInterval) -> Option<&Metric>;
        let picks: [(&str, DevPick); 11] = [
            ("rx_packets", |d| d.rx_packets.as_ref()),
            ("tx_packets", |d| d.tx_packets.as_ref()),
            ("rx_bits", |d| d.rx_bits.as_ref()),
            ("tx_bits", |d| d.tx_bits.as_ref()),
            ("rx_dropped", |d| d.rx_dropped.as_ref()),
            ("tx_dropped", |d| d.tx_dropped.as_ref()),
            ("rx_errors", |d| d.rx_errors.as_ref()),
            ("tx_errors", |d| d.tx_errors.as_ref()),
            ("qdisc.packets", |d| {
                d.qdisc.as_ref().and_then(|q| q.packets.as_ref())
            }),
            ("qdisc.drops", |d| {
                d.qdisc.as_ref().and_then(|q| q.drops.as_ref())
            }),
            ("qdisc.requeues", |d| {
                d.qdisc.as_ref().and_then(|q| q.requeues.as_ref())
            }),
        ];
        for (name, pick) in picks {
            let mean = mean_over(iv.iter().map(|i| (i, i.device(dev).and_then(pick))));
            if let Some((m, _)) = mean {
                r.metric(dev, name, &m);
            }
        }
    }
}

/// Each IRQ's total and each thread's CPU share, as means.
fn irq_and_thread_rows(r: &mut Rows, iv: &[napilab_core::Interval]) {
    let mut irqs: Vec<u32> = iv
        .iter()
        .flat_map(|i| i.irqs.iter().map(|q| q.number))
        .collect();
    irqs.sort_unstable();
    irqs.dedup();
    for irq in irqs {
        let mean = mean_over(iv.iter().map(|i| {
            let q = i.irqs.iter().find(|q| q.number == irq);
            (i, q.and_then(|q| q.total.as_ref()))
        }));
        if let Some((m, _)) = mean {
            r.metric(&format!("irq{irq}"), "total", &m);
        }
    }
    let mut threads: Vec<&str> = iv
        .iter()
        .flat_map(|i| i.threads.iter().map(|t| t.name.as_str()))
        .collect();
    threads.sort_unstable();
    threads.dedup();
    for thread in threads {
        let mean = mean_over(iv.iter().map(|i| {
            let t = i.threads.iter().find(|t| t.name == thread);
            (i, t.and_then(|t| t.cpu.as_ref()))
        }));
        if let Some((m, _)) = mean {
            r.metric(&format!("thread:{thread}"), "cpu", &m);
        }
    }
}
