//! The server topology's part of the HTML report: the maximum request rate at the
//! latency objective per mode with its interval and CPU cost, p99 latency, CPU per
//! request and NAPI polls against the achieved rate per mode, and the modes this
//! kernel or server could not run.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;
use napilab_core::{RequestResults, RunRecord};
use plotters::prelude::SeriesLabelPosition;

use crate::markup::{esc, figures_html, grouped, Figure};
use crate::plot::{self, colour, fmt_short, Chart, Series, Style, YAxis};

const QPS_AXIS: &str = "achieved requests/s";

/// (configuration, results) of the run's server configurations.
fn server_configurations(run: &RunRecord) -> Vec<(&str, &RequestResults)> {
    run.configurations
        .iter()
        .filter_map(|c| c.requests.as_ref().map(|q| (c.name.as_str(), q)))
        .collect()
}

/// Per configuration, (achieved QPS, value) averaged over the points of each
/// requested rate, in increasing rate.
fn curve(
    q: &RequestResults,
    value: impl Fn(&napilab_core::RequestPointResult) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let mut by_rate: BTreeMap<u64, (f64, f64, u32)> = BTreeMap::new();
    for p in &q.points {
        let Some(v) = value(p) else { continue };
        let e = by_rate
            .entry(p.requested_qps.round() as u64)
            .or_insert((0.0, 0.0, 0));
        e.0 += p.achieved_qps;
        e.1 += v;
        e.2 += 1;
    }
    by_rate
        .values()
        .map(|(x, y, n)| (x / f64::from(*n), y / f64::from(*n)))
        .collect()
}

fn figure(
    run: &RunRecord,
    title: &str,
    y_label: &str,
    y_axis: YAxis,
    caption: &str,
    value: impl Fn(&napilab_core::RequestPointResult) -> Option<f64>,
) -> Result<Figure> {
    let series: Vec<Series> = server_configurations(run)
        .into_iter()
        .enumerate()
        .filter_map(|(k, (name, q))| {
            let points = curve(q, &value);
            (!points.is_empty()).then(|| Series {
                label: name.to_string(),
                colour: colour(k),
                style: Style::Solid,
                points,
            })
        })
        .collect();
    Ok(Figure {
        title: title.into(),
        caption: caption.into(),
        svg: plot::render(&Chart {
            x_label: QPS_AXIS.into(),
            y_label: y_label.into(),
            y_axis,
            y_format: fmt_short,
            legend: SeriesLabelPosition::UpperLeft,
            series,
        })?,
        empty:
            "No point measured this (run with measurement.trace = \"always\" for CPU and polls)."
                .into(),
    })
}

/// Appends the section; nothing when the run has no server configuration.
pub(crate) fn requests_section(out: &mut String, run: &RunRecord) -> Result<()> {
    let confs = server_configurations(run);
    if confs.is_empty() {
        return Ok(());
    }
    out.push_str(
        "<h2 id=\"requests\">Request load: the interrupt modes</h2>\n<p class=\"sub\">The highest \
         offered request rate whose p99 latency (from each request's intended send time: a \
         stalled server is not hidden) met the objective, per configuration: one bisection per \
         search, their mean and Student-t interval. A point counts only when every request was \
         answered without error and the client kept its schedule.</p>\n<table>\n<tr>\
         <th>configuration</th><th>server</th><th>mode</th><th class=\"num\">max requests/s at \
         the objective</th><th>interval</th><th>searches</th><th class=\"num\">CPU per request \
         at the maximum (us)</th><th>how the searches ended</th></tr>\n",
    );
    for (name, q) in &confs {
        if let Some(why) = &q.not_runnable {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td colspan=\"5\">not runnable: {}</td></tr>",
                esc(name),
                esc(&q.engine),
                esc(&q.mode),
                esc(why)
            );
            continue;
        }
        let Some(m) = &q.max_qps else { continue };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{} (p99 &le; {} us)</td><td>{}</td>\
             <td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(name),
            esc(&q.engine),
            esc(&q.mode),
            grouped(m.qps),
            grouped(q.slo_p99_us),
            m.interval.map_or_else(
                || "-".into(),
                |(lo, hi)| format!("[{}, {}] at {:.0}%", grouped(lo), grouped(hi), m.confidence * 100.0)
            ),
            m.searches.iter().map(|v| grouped(*v)).collect::<Vec<_>>().join(", "),
            m.cpu_per_request_us.map_or_else(|| "-".into(), |v| format!("{v:.1}")),
            esc(&m.note)
        );
    }
    out.push_str("</table>\n");
    twin_section(out, &confs);
    let figures = [
        figure(
            run,
            "p99 latency per mode",
            "p99 latency (us, log scale)",
            YAxis::Log,
            "p99 from the intended send time, against the achieved rate; points of the same offered rate averaged (sweep and search).",
            |p| (p.latency.samples > 0).then_some(p.latency.p99_us),
        )?,
        figure(
            run,
            "CPU per request per mode",
            "busy CPU of the server's CPUs per reply (us)",
            YAxis::Linear,
            "/proc/stat busy time of the server's CPUs (user, system, softirq, irq; busy polling and NAPI kthreads count as system) over the replies: busy-wait pays a whole CPU at any rate.",
            |p| p.cpu_per_request_us,
        )?,
        figure(
            run,
            "NAPI polls of the server's device per mode",
            "polls/s (all contexts)",
            YAxis::Linear,
            "Polls of the server veth's NAPI instances per second, measured by the trace tier; the table below splits them by context.",
            |p| (!p.napi_polls_per_s.is_empty()).then(|| p.napi_polls_per_s.iter().map(|(_, v)| v).sum()),
        )?,
    ];
    figures_html(out, &figures);
    out.push_str(
        "<table>\n<tr><th>configuration</th><th class=\"num\">requested/s</th><th class=\"num\">achieved/s</th>\
         <th class=\"num\">p50 us</th><th class=\"num\">p99 us</th><th class=\"num\">p99.9 us</th><th>objective</th>\
         <th>CPU of the server's CPUs (share of a CPU, by source)</th><th>NAPI polls/s by context</th>\
         <th class=\"num\">epoll returns with events / empty</th><th>client</th></tr>\n",
    );
    for (name, q) in &confs {
        for p in &q.points {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:.0}</td>\
                 <td class=\"num\">{:.0}</td><td class=\"num\">{:.0}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td class=\"num\">{} / {}</td><td>{}</td></tr>",
                esc(name),
                grouped(p.requested_qps),
                grouped(p.achieved_qps),
                p.latency.p50_us,
                p.latency.p99_us,
                p.latency.p999_us,
                if p.meets_slo { "met" } else { "missed" },
                esc(&p
                    .cpu
                    .iter()
                    .filter(|(_, v)| *v > 0.0005)
                    .map(|(k, v)| format!("{k} {:.1}%", v * 100.0))
                    .collect::<Vec<_>>()
                    .join(", ")),
                esc(&p
                    .napi_polls_per_s
                    .iter()
                    .map(|(k, v)| format!("{k} {}", grouped(*v)))
                    .collect::<Vec<_>>()
                    .join(", ")),
                p.server.epoll_returns_with_events,
                p.server.epoll_empty_returns,
                esc(&if p.client_limited {
                    format!("limited: {}", p.client_reasons.join("; "))
                } else {
                    format!("{:.0}% busy", p.client_cpu_busy * 100.0)
                })
            );
        }
    }
    out.push_str("</table>\n");
    Ok(())
}

/// The twin's maximum at the objective beside the lab's, per configuration and per
/// way the twin got its costs (`requests.twin`, added by `napilab lab run`); nothing
/// when the run has none.
fn twin_section(out: &mut String, confs: &[(&str, &RequestResults)]) {
    if confs.iter().all(|(_, q)| q.twin.is_empty()) {
        return;
    }
    out.push_str(
        "<h3 id=\"requests-twin\">The twin beside the lab</h3>\n<p class=\"sub\">The twin's \
         maximum at the same objective (the lab's bisection on the twin), with the shipped \
         veth-lab-server profile (a prediction: its server costs were fitted on another run) \
         and with server costs fitted on this run's own CPU per request (not on its maxima, \
         but not independent of this run either). Where the lab's search was ended by its \
         client or by search_max_qps, the lab's maximum is a lower bound and the twin's is \
         judged only as at least as high. The twin's client is ideal: its maxima are upper \
         bounds where the lab's client is the limit (docs/sim.md, \"The server topology on \
         the twin\").</p>\n<table>\n<tr><th>configuration</th><th class=\"num\">lab max \
         requests/s</th><th>what ended the lab's search</th><th class=\"num\">twin max \
         requests/s</th><th>twin's costs</th><th>error</th></tr>\n",
    );
    for (name, q) in confs {
        for t in &q.twin {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{} ({})</td><td>{}</td></tr>",
                esc(name),
                grouped(t.lab_max_qps),
                esc(&t.lab_limiter),
                grouped(t.twin_max_qps),
                esc(&t.profile),
                esc(&t.basis),
                esc(&t.verdict())
            );
        }
    }
    out.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::SyntheticRun;
    use napilab_core::{MaxQpsAtSlo, RunKind, TwinMaxQps};

    /// A server configuration with the twin beside it: the report has the table, the
    /// lab's limiter and the verdict (a lower bound judged "at least"); without twin
    /// rows the table is absent.
    #[test]
    fn the_twin_beside_the_lab_is_tabulated_per_mode() {
        let mut run = SyntheticRun::new(RunKind::Lab).build();
        let twin = |basis: &str, twin: f64, lower: bool| TwinMaxQps {
            basis: basis.into(),
            profile: "veth-lab-server".into(),
            twin_max_qps: twin,
            lab_max_qps: 40_000.0,
            lab_limiter: if lower {
                "client-limited"
            } else {
                "latency objective"
            }
            .into(),
            lab_lower_bound: lower,
            relative_error: Some((twin - 40_000.0) / 40_000.0),
            lab_interval: None,
            wake_ups: None,
        };
        run.configurations[0].requests = Some(RequestResults {
            engine: "napilab".into(),
            mode: "irq-suspend".into(),
            slo_p99_us: 500.0,
            max_qps: Some(MaxQpsAtSlo {
                qps: 40_000.0,
                ..MaxQpsAtSlo::default()
            }),
            twin: vec![
                twin("prediction: shipped profile", 44_000.0, false),
                twin("fit on this run's CPU", 30_000.0, true),
            ],
            ..RequestResults::default()
        });
        let mut html = String::new();
        requests_section(&mut html, &run).expect("section");
        assert!(html.contains("The twin beside the lab"), "{html}");
        assert!(html.contains("44,000") && html.contains("+10.0%"), "{html}");
        assert!(
            html.contains("client-limited") && html.contains("twin &gt;= lab BROKEN"),
            "{html}"
        );
        run.configurations[0]
            .requests
            .as_mut()
            .expect("requests")
            .twin
            .clear();
        let mut html = String::new();
        requests_section(&mut html, &run).expect("section");
        assert!(!html.contains("The twin beside the lab"), "{html}");
    }
}
