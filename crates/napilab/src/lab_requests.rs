//! The server topology's text tables for `napilab lab run` and `napilab report`: one
//! row per request point, then each configuration's maximum rate at the latency
//! objective with its interval and CPU cost.

use napilab_core::{ConfigurationResult, PointRole, RequestResults, RunRecord};

fn cpu_cell(split: &[(String, f64)], what: &str) -> String {
    split
        .iter()
        .find(|(k, _)| k.starts_with(what))
        .map_or_else(|| "-".into(), |(_, v)| format!("{:.0}", v * 100.0))
}

/// Empty when the run has no server configurations.
fn with_requests(r: &RunRecord) -> Vec<(&ConfigurationResult, &RequestResults)> {
    r.configurations
        .iter()
        .filter_map(|c| c.requests.as_ref().map(|q| (c, q)))
        .collect()
}

/// The request runs' search trials (left out of the points table without --verbose).
pub fn search_trials(r: &RunRecord) -> usize {
    with_requests(r)
        .iter()
        .map(|(_, q)| {
            q.points
                .iter()
                .filter(|p| p.role == PointRole::Search)
                .count()
        })
        .sum()
}

/// The request points: the sweep's, and the searches' trials when `verbose`.
pub fn points(r: &RunRecord, verbose: bool) -> String {
    let with_requests = with_requests(r);
    if with_requests.is_empty() {
        return String::new();
    }
    let mut t = crate::render::table(vec![
        "configuration",
        "role",
        "req QPS",
        "offered",
        "achieved",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "SLO",
        "err/timeout",
        "usr %",
        "sys %",
        "softirq %",
        "CPU/req us",
        "NAPI polls/s by context",
        "epoll events/empty",
        "client",
    ]);
    for (c, q) in &with_requests {
        if let Some(why) = &q.not_runnable {
            t.add_row(vec![c.name.clone(), "not runnable".into(), why.clone()]);
            continue;
        }
        for p in q
            .points
            .iter()
            .filter(|p| verbose || p.role == PointRole::Sweep)
        {
            t.add_row(vec![
                c.name.clone(),
                match p.role {
                    PointRole::Sweep => "sweep".into(),
                    PointRole::Search => format!("search {}", p.repeat + 1),
                },
                format!("{:.0}", p.requested_qps),
                format!("{:.0}", p.offered_qps),
                format!("{:.0}", p.achieved_qps),
                format!("{:.0}", p.latency.p50_us),
                format!("{:.0}", p.latency.p99_us),
                format!("{:.0}", p.latency.p999_us),
                if p.meets_slo { "met" } else { "missed" }.into(),
                format!("{}/{}", p.errors, p.timeouts),
                cpu_cell(&p.cpu, "user"),
                cpu_cell(&p.cpu, "system"),
                cpu_cell(&p.cpu, "softirq (proc"),
                p.cpu_per_request_us
                    .map_or_else(|| "-".into(), |x| format!("{x:.1}")),
                p.napi_polls_per_s
                    .iter()
                    .map(|(k, v)| format!("{k} {v:.0}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                format!(
                    "{}/{}",
                    p.server.epoll_returns_with_events, p.server.epoll_empty_returns
                ),
                if p.client_limited {
                    format!("LIMITED: {}", p.client_reasons.join("; "))
                } else {
                    format!("{:.0}% busy", p.client_cpu_busy * 100.0)
                },
            ]);
        }
    }
    format!("{t}\n")
}

/// Each configuration's capacity probe and maximum at the objective, then the twin
/// beside the lab.
pub fn maxima(r: &RunRecord) -> String {
    let with_requests = with_requests(r);
    if with_requests.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let mut m = crate::render::table(vec![
        "configuration".to_string(),
        "server".into(),
        "mode".into(),
        "capacity probe QPS".into(),
        "max QPS at SLO".into(),
        "interval".into(),
        "searches".into(),
        "CPU/req us at max".into(),
        "how".into(),
    ]);
    for (c, q) in &with_requests {
        let probe = q.capacity.as_ref().map_or_else(
            || "-".to_string(),
            |p| {
                format!(
                    "{:.0}{}",
                    p.achieved_qps,
                    if p.client_limited {
                        " (client-limited)"
                    } else {
                        ""
                    }
                )
            },
        );
        let Some(x) = &q.max_qps else {
            if q.capacity.is_some() {
                m.add_row(vec![
                    c.name.clone(),
                    q.engine.clone(),
                    q.mode.clone(),
                    probe,
                ]);
            }
            continue;
        };
        m.add_row(vec![
            c.name.clone(),
            q.engine.clone(),
            q.mode.clone(),
            probe,
            format!("{:.0} (p99 <= {:.0} us)", x.qps, q.slo_p99_us),
            x.interval.map_or_else(
                || "-".into(),
                |(lo, hi)| format!("[{lo:.0}, {hi:.0}] at {:.0}%", x.confidence * 100.0),
            ),
            x.searches
                .iter()
                .map(|v| format!("{v:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            x.cpu_per_request_us
                .map_or_else(|| "-".into(), |v| format!("{v:.1}")),
            x.note.clone(),
        ]);
    }
    if !m.is_empty() {
        out.push_str(&format!("{m}\n"));
    }
    out.push_str(&crate::sim_calibrate_server::twin_table(r));
    out
}
