//! `points.csv`: one row per point and traffic class (columns in docs/report.md).

use napilab_core::{ClassResult, PointResult, PointRole, RunRecord};

use crate::series::cpu_busy;

/// Columns before the per-CPU ones.
pub const FIXED_COLUMNS: &[&str] = &[
    "configuration",
    "point",
    "role",
    "repeat",
    "requested_pps",
    "offered_pps",
    "delivered_pps",
    "loss",
    "class",
    "class_packet_bytes",
    "class_sent",
    "class_received",
    "class_loss",
    "class_delivered_pps",
    "latency_samples",
    "latency_mean_us",
    "latency_p50_us",
    "latency_p90_us",
    "latency_p99_us",
    "latency_p999_us",
    "latency_max_us",
    "generator_cpu_busy",
    "generator_saturated",
    "sink_cpu_busy",
    "sink_saturated",
    "traffic_source",
];

fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn num(value: Option<f64>) -> String {
    value
        .filter(|v| v.is_finite())
        .map(|v| v.to_string())
        .unwrap_or_default()
}

fn class_cells(point: &PointResult, class: Option<&ClassResult>) -> Vec<String> {
    let Some(c) = class else {
        return vec![String::new(); 13];
    };
    let loss = (c.sent > 0).then(|| c.sent.saturating_sub(c.received) as f64 / c.sent as f64);
    let delivered = (point.duration_s > 0.0).then(|| c.received as f64 / point.duration_s);
    let lat = c.latency.as_ref();
    vec![
        field(&c.name),
        c.packet_bytes.to_string(),
        c.sent.to_string(),
        c.received.to_string(),
        num(loss),
        num(delivered),
        lat.map(|l| l.samples.to_string()).unwrap_or_default(),
        num(lat.map(|l| l.mean_us)),
        num(lat.map(|l| l.p50_us)),
        num(lat.map(|l| l.p90_us)),
        num(lat.map(|l| l.p99_us)),
        num(lat.map(|l| l.p999_us)),
        num(lat.map(|l| l.max_us)),
    ]
}

/// The CSV text. Per-CPU columns (`cpu<N>_busy`, `cpu<N>_busy_source`,
/// `cpu<N>_net_hardirqs_per_s`, `cpu<N>_net_rx_softirqs_per_s`,
/// `cpu<N>_packets_per_net_rx_softirq`) follow for every CPU seen in the run; their values
/// are means over the point's observation intervals.
pub fn points_csv(run: &RunRecord) -> String {
    let mut cpus: Vec<u32> = run
        .configurations
        .iter()
        .flat_map(crate::series::conf_cpus)
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    let mut header: Vec<String> = FIXED_COLUMNS.iter().map(|s| s.to_string()).collect();
    for cpu in &cpus {
        header.push(format!("cpu{cpu}_busy"));
        header.push(format!("cpu{cpu}_busy_source"));
        header.push(format!("cpu{cpu}_net_hardirqs_per_s"));
        header.push(format!("cpu{cpu}_net_rx_softirqs_per_s"));
        header.push(format!("cpu{cpu}_packets_per_net_rx_softirq"));
    }
    let mut out = header.join(",");
    out.push('\n');
    let traffic = crate::metrics::traffic_source(run.kind);
    for conf in &run.configurations {
        for (pi, point) in conf.points.iter().enumerate() {
            let mut cpu_cells = Vec::new();
            for &cpu in &cpus {
                let obs = point.observation.as_ref();
                let busy = obs.and_then(|o| cpu_busy(o, cpu));
                let mean =
                    |pick: fn(&napilab_core::CpuInterval) -> Option<&napilab_core::Metric>| {
                        obs.and_then(|o| napilab_core::stats::cpu_mean(o, cpu, pick))
                            .map(|(m, _)| m.value)
                    };
                cpu_cells.push(num(busy.as_ref().map(|m| m.value)));
                cpu_cells.push(
                    busy.map(|m| m.source.as_str().to_string())
                        .unwrap_or_default(),
                );
                cpu_cells.push(num(mean(|c| c.net_hardirqs.as_ref())));
                cpu_cells.push(num(mean(|c| c.net_rx_softirqs.as_ref())));
                cpu_cells.push(num(mean(|c| c.packets_per_net_rx_softirq.as_ref())));
            }
            let classes: Vec<Option<&ClassResult>> = if point.classes.is_empty() {
                vec![None]
            } else {
                point.classes.iter().map(Some).collect()
            };
            for class in classes {
                let mut row = vec![
                    field(&conf.name),
                    pi.to_string(),
                    match point.role {
                        PointRole::Sweep => "sweep".to_string(),
                        PointRole::Search => "search".to_string(),
                    },
                    point.repeat.to_string(),
                    num(Some(point.requested_pps)),
                    num(Some(point.offered_pps)),
                    num(Some(point.delivered_pps())),
                    num(Some(point.loss_ratio())),
                ];
                row.extend(class_cells(point, class));
                row.push(num(point.generator.cpu_busy));
                row.push(point.generator.saturated.to_string());
                row.push(num(point.sink.cpu_busy));
                row.push(point.sink.saturated.to_string());
                row.push(traffic.to_string());
                row.extend(cpu_cells.iter().cloned());
                out.push_str(&row.join(","));
                out.push('\n');
            }
        }
    }
    out
}
