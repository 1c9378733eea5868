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

/// Columns of `requests.csv`.
pub const REQUEST_COLUMNS: [&str; 28] = [
    "configuration",
    "server",
    "mode",
    "role",
    "repeat",
    "requested_qps",
    "offered_qps",
    "achieved_qps",
    "latency_samples",
    "p50_us",
    "p90_us",
    "p99_us",
    "p999_us",
    "max_us",
    "meets_slo",
    "errors",
    "timeouts",
    "client_limited",
    "client_cpu_busy",
    "server_requests",
    "server_cpu_busy",
    "epoll_returns_with_events",
    "epoll_empty_returns",
    "busy_loop_iterations",
    "cpu_per_request_us",
    "napi_polls_per_s",
    "empty_polls_per_s",
    "not_runnable",
];

/// `requests.csv` of a server-topology run: one row per request point (columns in
/// docs/report.md); None when the run has no request results.
pub fn requests_csv(run: &RunRecord) -> Option<String> {
    if run.configurations.iter().all(|c| c.requests.is_none()) {
        return None;
    }
    let mut out = REQUEST_COLUMNS.join(",");
    out.push('\n');
    for c in &run.configurations {
        let Some(q) = &c.requests else { continue };
        if let Some(why) = &q.not_runnable {
            let mut row = vec![String::new(); REQUEST_COLUMNS.len()];
            row[0] = field(&c.name);
            row[1] = field(&q.engine);
            row[2] = field(&q.mode);
            row[REQUEST_COLUMNS.len() - 1] = field(why);
            out.push_str(&row.join(","));
            out.push('\n');
        }
        for p in &q.points {
            let row: [String; REQUEST_COLUMNS.len()] = [
                field(&c.name),
                field(&q.engine),
                field(&q.mode),
                match p.role {
                    PointRole::Sweep => "sweep".into(),
                    PointRole::Search => "search".into(),
                },
                p.repeat.to_string(),
                num(Some(p.requested_qps)),
                num(Some(p.offered_qps)),
                num(Some(p.achieved_qps)),
                p.latency.samples.to_string(),
                num(Some(p.latency.p50_us)),
                num(Some(p.latency.p90_us)),
                num(Some(p.latency.p99_us)),
                num(Some(p.latency.p999_us)),
                num(Some(p.latency.max_us)),
                p.meets_slo.to_string(),
                p.errors.to_string(),
                p.timeouts.to_string(),
                p.client_limited.to_string(),
                num(Some(p.client_cpu_busy)),
                p.server.requests.to_string(),
                num(Some(p.server.cpu_busy)),
                p.server.epoll_returns_with_events.to_string(),
                p.server.epoll_empty_returns.to_string(),
                p.server.busy_loop_iterations.to_string(),
                num(p.cpu_per_request_us),
                num((!p.napi_polls_per_s.is_empty())
                    .then(|| p.napi_polls_per_s.iter().map(|(_, v)| v).sum())),
                num(p.empty_polls_per_s),
                String::new(),
            ];
            out.push_str(&row.join(","));
            out.push('\n');
        }
    }
    Some(out)
}
