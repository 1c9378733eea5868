//! The HTML report: one self-contained file (inline CSS and SVG, no scripts, no external
//! assets). Sections are listed in docs/report.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;
use napilab_core::{
    ConfigurationResult, CpuAccounting, CpuInterval, Metric, PointRole, RunKind, RunRecord,
    Severity,
};

use crate::comparison;
use crate::metrics::unit_name;
use napilab_core::uncertainty::ConfidenceInterval;
use plotters::prelude::SeriesLabelPosition;

use crate::plot::{self, colour, fmt_percent, fmt_short, Chart, Series, Style, YAxis};
use crate::series::{class_names, conf_cpus, load_groups, stage_cores};

pub(crate) const CSS: &str = "
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; color: #222;
  margin: 0 auto; max-width: 1400px; padding: 0 24px 48px; line-height: 1.45; }
h1 { font-size: 1.6em; margin: 24px 0 4px; }
h2 { font-size: 1.3em; margin-top: 36px; border-bottom: 2px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 1.08em; margin: 20px 0 6px; }
.sub { color: #555; margin: 0 0 12px; }
.banner { background: #fff4d6; border: 1px solid #e6c25a; padding: 8px 12px; border-radius: 4px; }
nav a { margin-right: 14px; color: #0060a0; text-decoration: none; }
table { border-collapse: collapse; margin: 6px 0 14px; font-size: 0.92em; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e4e4e4; text-align: left; vertical-align: top; }
th { background: #f3f5f7; font-weight: 600; }
.scroll { overflow-x: auto; }
table.wide td, table.wide th { white-space: nowrap; font-size: 0.95em; padding: 3px 8px; }
th.group { text-align: center; border-left: 2px solid #fff; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.meta th { background: none; font-weight: 600; color: #444; }
tr.bottleneck td { background: #fde4e1; }
td.short { color: #b02a00; font-weight: 600; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(600px, 1fr)); gap: 18px; }
figure { margin: 0; border: 1px solid #e2e2e2; border-radius: 4px; padding: 8px; background: #fff; }
figure h4 { margin: 2px 4px 4px; font-size: 0.98em; }
figure svg { display: block; max-width: 100%; height: auto; }
figcaption { font-size: 0.84em; color: #555; margin: 4px; }
.finding { border-left: 4px solid #999; padding: 6px 12px; margin: 10px 0; background: #fafafa; }
.finding.warning { border-color: #d55e00; }
.finding.info { border-color: #0072b2; }
.badge { display: inline-block; font-size: 0.78em; padding: 1px 7px; border-radius: 8px;
  background: #e8e8e8; margin-right: 6px; }
.badge.warning { background: #fbd9c6; }
.badge.info { background: #d3e7f5; }
.empty { color: #777; font-style: italic; }
pre { background: #f6f8fa; border: 1px solid #e1e4e8; padding: 10px; overflow-x: auto; font-size: 0.88em; }
code { font-size: 0.92em; }
";

/// Escapes text for HTML element content and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// 1234567.8 -> "1,234,568".
pub fn grouped(value: f64) -> String {
    if !value.is_finite() {
        return "-".into();
    }
    let rounded = value.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if rounded < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

fn pct(value: f64, decimals: usize) -> String {
    if value.is_finite() {
        format!("{:.*}%", decimals, value * 100.0)
    } else {
        "-".into()
    }
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc(ms: u64) -> String {
    napilab_core::time::UtcTime::from_unix_ms(ms).to_string()
}

/// How the report names the producer of the run.
struct Labels {
    /// "lab" or "twin".
    producer: &'static str,
    /// Where traffic numbers come from.
    traffic: &'static str,
}

fn labels(kind: RunKind) -> Labels {
    match kind {
        RunKind::Lab => Labels {
            producer: "lab",
            traffic: "source: napilab's traffic engine in the lab (generator counts sent \
                      packets, sink counts received ones and timestamps them)",
        },
        RunKind::Model => Labels {
            producer: "twin",
            traffic: "source: twin (model): traffic computed by the simulator, not measured",
        },
    }
}

pub(crate) struct Figure {
    pub(crate) title: String,
    pub(crate) caption: String,
    pub(crate) svg: Option<String>,
    /// Said instead of a figure when there is nothing to draw.
    pub(crate) empty: String,
}

pub(crate) fn figures_html(out: &mut String, figures: &[Figure]) {
    out.push_str("<div class=\"figures\">\n");
    for f in figures {
        let _ = writeln!(out, "<figure>\n<h4>{}</h4>", esc(&f.title));
        match &f.svg {
            Some(svg) => out.push_str(svg),
            None => {
                let _ = write!(out, "<p class=\"empty\">{}</p>", esc(&f.empty));
            }
        }
        let _ = writeln!(
            out,
            "\n<figcaption>{}</figcaption>\n</figure>",
            esc(&f.caption)
        );
    }
    out.push_str("</div>\n");
}

fn anchor(prefix: &str, index: usize) -> String {
    format!("{prefix}-{index}")
}

/// The report as one HTML document.
pub fn report_html(run: &RunRecord) -> Result<String> {
    let l = labels(run.kind);
    let mut out = String::new();
    let title = format!(
        "napilab {} report: {} ({})",
        l.producer, run.scenario_name, run.run_id
    );
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        esc(&title)
    );
    header(&mut out, run, &l);
    out.push_str(
        "<nav><a href=\"#max\">Maximum throughput</a><a href=\"#twin\">Twin vs lab</a><a href=\"#throughput\">Throughput and loss</a>\
         <a href=\"#per-configuration\">Latency, CPU, IRQs</a><a href=\"#headroom\">Engine headroom</a>\
         <a href=\"#requests\">Request load</a><a href=\"#many-napi\">Many NAPI</a><a href=\"#findings\">Findings</a><a href=\"#notices\">Notices</a><a href=\"#scenario\">Scenario</a></nav>\n",
    );
    max_throughput(&mut out, run, &l);
    crate::twin_page::twin_section(&mut out, run);
    crate::server_page::requests_section(&mut out, run)?;
    crate::many_napi_page::section(&mut out, run);
    configurations(&mut out, run);
    throughput_figures(&mut out, run, &l)?;
    per_configuration_figures(&mut out, run, &l)?;
    headroom(&mut out, run, &l);
    findings(&mut out, run);
    notices(&mut out, run);
    let _ = write!(
        out,
        "<h2 id=\"scenario\">Scenario</h2>\n<p class=\"sub\">The scenario file as it was run \
         (repeat the run with it).</p>\n<pre>{}</pre>\n",
        esc(&run.scenario_toml)
    );
    let _ = write!(
        out,
        "<p class=\"sub\">Generated by napilab {} from run {}; the run's data: run.json \
         and points.csv next to this file.</p>\n</body>\n</html>\n",
        esc(env!("CARGO_PKG_VERSION")),
        esc(&run.run_id)
    );
    Ok(out)
}

fn header(out: &mut String, run: &RunRecord, l: &Labels) {
    let kind = match run.kind {
        RunKind::Lab => "lab run: measured on the real kernel in network namespaces",
        RunKind::Model => "twin run: computed by the model (napilab sim), not measured",
    };
    let _ = writeln!(
        out,
        "<h1>napilab {} report: {}</h1>\n<p class=\"sub\">{}</p>",
        l.producer,
        esc(&run.scenario_name),
        esc(kind)
    );
    if run.interrupted {
        out.push_str(
            "<p class=\"banner\">This run was interrupted: it holds only the points that \
             finished.</p>\n",
        );
    }
    let hz = match (run.host.hz.value, run.host.hz.how.as_str()) {
        (Some(v), how) => format!("{v} ({how})"),
        (None, _) => "unknown".into(),
    };
    let accounting = match run.host.accounting {
        CpuAccounting::TickSampled => "tick-sampled (no IRQ time accounting)",
        CpuAccounting::IrqTime => "IRQ time accounting (ksoftirqd still tick-sampled)",
        CpuAccounting::Virtual => "virtual (full dynticks) accounting",
        CpuAccounting::Unknown => "unknown",
    };
    let cpus: Vec<String> = run.host.cpus.iter().map(|c| c.to_string()).collect();
    let points: usize = run.configurations.iter().map(|c| c.points.len()).sum();
    let rows = [
        ("run id", run.run_id.clone()),
        ("kind", format!("{} ({:?})", l.producer, run.kind)),
        ("scenario", run.scenario_name.clone()),
        ("started", utc(run.started_unix_ms)),
        ("finished", utc(run.finished_unix_ms)),
        (
            "configurations / points",
            format!("{} / {}", run.configurations.len(), points),
        ),
        ("host", host_line(run)),
        ("host CPUs", cpus.join(", ")),
        ("kernel HZ", hz),
        ("CPU accounting", accounting.into()),
        ("napilab version", run.napilab_version.clone()),
    ];
    out.push_str("<table class=\"meta\">\n");
    for (k, v) in rows {
        let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    }
    out.push_str("</table>\n");
}

/// The run's host in one line (napilab_core::HostIdentity::summary), or why there is
/// none: a comparison of two reports starts by checking this line.
fn host_line(run: &RunRecord) -> String {
    match (&run.host.identity, run.kind) {
        (Some(id), _) => id.summary(),
        (None, RunKind::Model) => "none: computed by the twin".into(),
        (None, RunKind::Lab) => "unknown (recorded before napilab kept the host identity)".into(),
    }
}

fn stopped_meaning(stopped: &str) -> &'static str {
    // MLRsearch joins its repeats' reasons with `+`; the first one explains.
    match stopped.split('+').next().unwrap_or(stopped) {
        "converged" => "the search converged: the DUT limits throughput here",
        "converged_generator_limited" => {
            "every load above the answer failed only because the generator could not offer \
             it: the testbed's limit, a lower bound of the DUT's maximum"
        }
        "upper_bound_passed" => {
            "the highest load tried passed with loss under the threshold: the DUT was not \
             the limit, so this is a lower bound"
        }
        "no_lower_bound" => "even the lowest load tried failed",
        "time_limit" => "the search ran out of time (search_time_limit_s): the bounds so far",
        "interrupted" => "the run was interrupted: the best passing load found so far",
        _ => "see the run's notices",
    }
}

fn interval_text(ci: Option<&ConfidenceInterval>) -> String {
    match ci {
        Some(ci) => format!(
            "[{}, {}] (&plusmn;{:.1}%)",
            grouped(ci.low),
            grouped(ci.high),
            ci.relative_half_width() * 100.0
        ),
        None => "-".into(),
    }
}

fn max_throughput(out: &mut String, run: &RunRecord, l: &Labels) {
    out.push_str("<h2 id=\"max\">Maximum throughput</h2>\n");
    let rows = comparison::maxima(run);
    let level = comparison::level_of(run);
    let mlr = rows.iter().any(|r| r.method == "mlrsearch");
    let _ = writeln!(
        out,
        "<p class=\"sub\">{} {}.</p>",
        if mlr {
            format!(
                "Found by MLRsearch (draft-ietf-bmwg-mlrsearch; docs/lab.md): per goal, the \
                 conditional throughput at the relevant lower bound, the mean over the \
                 search's repeats with its {:.0}% confidence interval (Student t; none with \
                 one repeat). A trial is disturbed when the machine took CPU from the lab \
                 (steal, other processes) or stalled the generator; the last column gives \
                 the result classified again without those trials.",
                level * 100.0
            )
        } else {
            "Highest offered load with loss at most the threshold, found by bisection in \
             the manner of RFC 2544: one search, no interval."
                .to_string()
        },
        esc(l.traffic)
    );
    if rows.is_empty() {
        out.push_str(
            "<p class=\"empty\">The scenario did not ask for a maximum-throughput search.</p>\n",
        );
        return;
    }
    out.push_str(
        "<table id=\"max-table\">\n<tr><th>configuration</th><th>goal</th><th class=\"num\">loss ratio</th>\
         <th class=\"num\">max throughput (pkt/s)</th><th>confidence interval</th>\
         <th class=\"num\">repeats</th><th class=\"num\">trials (disturbed)</th>\
         <th class=\"num\">without disturbed</th><th>search stopped</th><th>meaning</th></tr>\n",
    );
    for r in &rows {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{} ({})</td><td class=\"num\">{}</td>\
             <td><code>{}</code></td><td>{}</td></tr>",
            esc(&r.configuration),
            esc(&r.goal),
            pct(r.loss_ratio, 3),
            if r.estimate.values.is_empty() {
                "no answer".to_string()
            } else {
                grouped(r.estimate.mean)
            },
            interval_text(r.estimate.interval.as_ref()),
            r.estimate.values.len(),
            r.trials,
            r.disturbed_trials,
            r.undisturbed_mean.map_or("-".into(), grouped),
            esc(&r.stopped),
            esc(stopped_meaning(&r.stopped))
        );
    }
    out.push_str("</table>\n");
    let pairs = comparison::configuration_differences(run);
    if pairs.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<h3 id=\"differences\">Differences between configurations</h3>\n<p class=\"sub\">Each \
         pair's difference of the mean maxima (B - A), its {:.0}% confidence interval and \
         Welch's t-test: <em>significant</em> when p &lt; {:.2}. With one repeat per \
         configuration nothing can be said (run with <code>measurement.search_repeats</code> \
         of 3 or more).</p>",
        level * 100.0,
        1.0 - level
    );
    out.push_str(
        "<table id=\"differences-table\">\n<tr><th>metric</th><th>A</th><th>B</th><th class=\"num\">B - A</th>\
         <th class=\"num\">relative</th><th>interval of the difference</th><th class=\"num\">p</th><th>verdict</th></tr>\n",
    );
    for p in &pairs {
        let d = &p.difference;
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:+.1}%</td>\
             <td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(&p.metric),
            esc(&p.a),
            esc(&p.b),
            grouped(d.delta),
            d.relative * 100.0,
            d.interval
                .as_ref()
                .map_or("-".into(), |ci| format!("[{}, {}]", grouped(ci.low), grouped(ci.high))),
            d.p_value.map_or("-".into(), |p| format!("{p:.3}")),
            esc(&d.verdict)
        );
    }
    out.push_str("</table>\n");
}

/// Latency percentiles per sweep load with their intervals, for configurations whose
/// points measured latency.
fn latency_intervals(out: &mut String, conf: &ConfigurationResult, level: f64) {
    let rows = comparison::latencies(conf, level);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<table class=\"latency-intervals\">\n<tr><th>class</th><th class=\"num\">load (pkt/s)</th>\
         <th>percentile</th><th class=\"num\">us</th><th>{:.0}% interval (us)</th><th>how</th></tr>",
        level * 100.0
    );
    for r in rows.iter().filter(|r| r.percentile != "p50") {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{:.1}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.class),
            grouped(r.requested_pps),
            esc(&r.percentile),
            r.estimate.mean,
            r.estimate
                .interval
                .as_ref()
                .map_or("-".into(), |ci| format!("[{:.1}, {:.1}]", ci.low, ci.high)),
            r.estimate
                .interval
                .as_ref()
                .map_or("-".into(), |ci| esc(&ci.method))
        );
    }
    out.push_str("</table>\n");
}

fn configurations(out: &mut String, run: &RunRecord) {
    out.push_str("<h2 id=\"configurations\">Configurations</h2>\n<table>\n<tr><th>configuration</th><th>settings</th>\
                  <th class=\"num\">points</th><th class=\"num\">findings</th></tr>\n");
    for conf in &run.configurations {
        let settings: Vec<String> = conf
            .settings
            .iter()
            .map(|(k, v)| format!("<code>{}</code> = {}", esc(k), esc(v)))
            .collect();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&conf.name),
            settings.join("<br>"),
            conf.points.len(),
            conf.findings.len()
        );
    }
    out.push_str("</table>\n");
}

const OFFERED_AXIS: &str = "offered load (pkt/s)";

fn throughput_figures(out: &mut String, run: &RunRecord, l: &Labels) -> Result<()> {
    out.push_str("<h2 id=\"throughput\">Throughput and loss</h2>\n");
    let mut delivered = Vec::new();
    let mut loss = Vec::new();
    let mut max_x: f64 = 0.0;
    for (i, conf) in run.configurations.iter().enumerate() {
        let groups = load_groups(conf);
        let points: Vec<(f64, f64)> = groups
            .iter()
            .map(|g| {
                (
                    g.offered(),
                    g.mean(|p| Some(p.delivered_pps())).unwrap_or(0.0),
                )
            })
            .collect();
        max_x = points.iter().map(|p| p.0).fold(max_x, f64::max);
        delivered.push(Series {
            label: conf.name.clone(),
            colour: colour(i),
            style: Style::Solid,
            points,
        });
        loss.push(Series {
            label: conf.name.clone(),
            colour: colour(i),
            style: Style::Solid,
            points: groups
                .iter()
                .map(|g| (g.offered(), g.mean(|p| Some(p.loss_ratio())).unwrap_or(0.0)))
                .collect(),
        });
        let has_sweep = conf.points.iter().any(|p| p.role == PointRole::Sweep);
        let probes: Vec<_> = conf
            .points
            .iter()
            .filter(|p| has_sweep && p.role == PointRole::Search)
            .collect();
        if !probes.is_empty() {
            delivered.push(Series {
                label: format!("{} (search probes)", conf.name),
                colour: colour(i),
                style: Style::Markers,
                points: probes
                    .iter()
                    .map(|p| (p.offered_pps, p.delivered_pps()))
                    .collect(),
            });
            loss.push(Series {
                label: format!("{} (search probes)", conf.name),
                colour: colour(i),
                style: Style::Markers,
                points: probes
                    .iter()
                    .map(|p| (p.offered_pps, p.loss_ratio()))
                    .collect(),
            });
            for p in &probes {
                max_x = max_x.max(p.offered_pps);
            }
        }
    }
    if max_x > 0.0 {
        delivered.push(Series {
            label: "delivered = offered".into(),
            colour: plotters::style::RGBColor(150, 150, 150),
            style: Style::Dotted,
            points: vec![(0.0, 0.0), (max_x, max_x)],
        });
    }
    let thresholds: Vec<f64> = run
        .configurations
        .iter()
        .filter_map(|c| c.max_throughput.as_ref().map(|m| m.loss_threshold))
        .collect();
    if let Some(&t) = thresholds.first() {
        if max_x > 0.0 && thresholds.iter().all(|&x| x == t) {
            loss.push(Series {
                label: format!("loss threshold {}", pct(t, 3)),
                colour: plotters::style::RGBColor(150, 150, 150),
                style: Style::Dashed,
                points: vec![(0.0, t), (max_x, t)],
            });
        }
    }
    let figures = vec![
        Figure {
            title: "Delivered throughput vs offered load".into(),
            caption: format!(
                "Delivered = packets received by the sink over all classes / duration; sweep \
                 points, repeats averaged; rings are the maximum-throughput search's probes. {}.",
                l.traffic
            ),
            svg: plot::render(&Chart {
                x_label: OFFERED_AXIS.into(),
                y_label: "delivered (pkt/s)".into(),
                y_axis: YAxis::Linear,
                y_format: fmt_short,
                legend: SeriesLabelPosition::UpperLeft,
                series: delivered,
            })?,
            empty: "No points were measured.".into(),
        },
        Figure {
            title: "Loss vs offered load".into(),
            caption: format!(
                "Loss = (sent - received) / sent over all classes; the dashed line is the \
                 search's loss threshold. {}.",
                l.traffic
            ),
            svg: plot::render(&Chart {
                x_label: OFFERED_AXIS.into(),
                y_label: "loss (% of sent packets)".into(),
                y_axis: YAxis::Linear,
                y_format: fmt_percent,
                legend: SeriesLabelPosition::UpperLeft,
                series: loss,
            })?,
            empty: "No points were measured.".into(),
        },
    ];
    figures_html(out, &figures);
    Ok(())
}

type CpuPick = fn(&CpuInterval) -> Option<&Metric>;

fn per_configuration_figures(out: &mut String, run: &RunRecord, l: &Labels) -> Result<()> {
    out.push_str("<h2 id=\"per-configuration\">Latency, CPU and IRQs per configuration</h2>\n");
    for (ci, conf) in run.configurations.iter().enumerate() {
        let _ = writeln!(
            out,
            "<h3 id=\"{}\">{}</h3>",
            anchor("conf", ci),
            esc(&conf.name)
        );
        let mut figures = vec![
            latency_figure(conf, l)?,
            cpu_figure(conf, l)?,
            irq_figure(conf, l)?,
            per_softirq_figure(conf, l)?,
        ];
        // Only runs with the trace tier (or the twin) know the measured time.
        if let Some(truth) = softirq_truth_figure(conf, l)? {
            figures.push(truth);
        }
        figures_html(out, &figures);
        latency_intervals(out, conf, comparison::level_of(run));
        stage_table(out, conf);
    }
    Ok(())
}

/// Softirq time as /proc/stat reported it beside the time the tracepoints measured
/// (or the twin computed): misreading 3, per CPU and load.
fn softirq_truth_figure(conf: &ConfigurationResult, l: &Labels) -> Result<Option<Figure>> {
    let groups = load_groups(conf);
    let mut series = Vec::new();
    let mut measured_source = None;
    for (k, &cpu) in conf_cpus(conf).iter().enumerate() {
        let measured: Vec<(f64, f64)> = groups
            .iter()
            .filter_map(|g| {
                let (v, s) = g.traced_cpu(cpu, |t| &t.softirq)?;
                measured_source.get_or_insert(s);
                Some((g.offered(), v))
            })
            .collect();
        if measured.is_empty() {
            continue;
        }
        let reported: Vec<(f64, f64)> = groups
            .iter()
            .filter_map(|g| {
                let (v, _) = g.cpu_metric(cpu, |c| c.time.as_ref().map(|t| &t.softirq))?;
                Some((g.offered(), v))
            })
            .collect();
        let source = measured_source.clone().unwrap_or_default();
        series.push(Series {
            label: format!("cpu{cpu} softirq measured ({source})"),
            colour: colour(k),
            style: Style::Solid,
            points: measured,
        });
        if !reported.is_empty() {
            series.push(Series {
                label: format!("cpu{cpu} softirq in /proc/stat"),
                colour: colour(k),
                style: Style::Dashed,
                points: reported,
            });
        }
    }
    if series.is_empty() {
        return Ok(None);
    }
    let how = if measured_source.as_deref() == Some("model") {
        "computed by the twin, beside what tick sampling at the configured HZ would report"
    } else {
        "measured by the irq:softirq_entry/exit tracepoints, beside /proc/stat's softirq share"
    };
    Ok(Some(Figure {
        title: format!("Softirq time, measured vs reported: {}", conf.name),
        caption: format!(
            "Per CPU, all softirq vectors as a share of the CPU: solid {how}; dashed {}.              Where the dashed line lies below the solid one, /proc/stat understates the              packet work (misreading 3).",
            kernel_source_text(&["tick".to_string()], l.producer)
        ),
        svg: plot::render(&Chart {
            x_label: OFFERED_AXIS.into(),
            y_label: "softirq time (% of one core)".into(),
            y_axis: YAxis::LinearTo(1.0),
            y_format: fmt_percent,
            legend: SeriesLabelPosition::UpperLeft,
            series,
        })?,
        empty: String::new(),
    }))
}

/// The stage profile (trace tier `stages`): CPU per stage of the packet path at each
/// load, from perf sampling mapped to stages.
fn stage_table(out: &mut String, conf: &ConfigurationResult) {
    let groups = load_groups(conf);
    let per_group: Vec<Vec<(String, f64)>> = groups
        .iter()
        .map(|g| {
            let mut sums: Vec<(String, f64, usize)> = Vec::new();
            for p in &g.points {
                for (stage, cores) in p.observation.as_ref().map(stage_cores).unwrap_or_default() {
                    match sums.iter_mut().find(|(s, _, _)| *s == stage) {
                        Some(e) => {
                            e.1 += cores;
                            e.2 += 1;
                        }
                        None => sums.push((stage, cores, 1)),
                    }
                }
            }
            sums.into_iter()
                .map(|(s, total, n)| (s, total / n as f64))
                .collect()
        })
        .collect();
    let mut stages: Vec<&str> = Vec::new();
    for (stage, _) in per_group.iter().flatten() {
        if !stages.contains(&stage.as_str()) {
            stages.push(stage);
        }
    }
    if stages.is_empty() {
        return;
    }
    out.push_str(
        "<h4>Stage profile</h4>\n<p class=\"sub\">CPU used by each stage of the packet path \
         (cores, source <code>sample</code>: perf cpu-clock samples of kernel stacks mapped \
         to stages by the rules of docs/trace.md), mean over the points of each load.</p>\n\
         <table>\n<tr><th>stage</th>",
    );
    for g in &groups {
        let _ = write!(out, "<th>{} pkt/s</th>", grouped(g.offered()));
    }
    out.push_str("</tr>\n");
    for stage in stages {
        let _ = write!(out, "<tr><td>{}</td>", esc(stage));
        for row in &per_group {
            match row.iter().find(|(s, _)| s == stage) {
                Some((_, cores)) => {
                    let _ = write!(out, "<td>{cores:.3}</td>");
                }
                None => out.push_str("<td>-</td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn kernel_source_text(sources: &[String], producer: &str) -> String {
    if sources.is_empty() {
        return "no observation".into();
    }
    let named: Vec<String> = sources
        .iter()
        .map(|s| match s.as_str() {
            "proc" => {
                "proc (kernel counters: /proc/interrupts, /proc/softirqs, /proc/net/softnet_stat)"
                    .to_string()
            }
            "model" => format!("model ({producer})"),
            "trace" => "trace (BPF tracepoints)".to_string(),
            "tick" if producer == "twin" => {
                "tick (the twin's estimate of what tick-sampled /proc/stat would report)"
                    .to_string()
            }
            "tick" => "tick (tick-sampled /proc/stat)".to_string(),
            other => other.to_string(),
        })
        .collect();
    format!("source: {}", named.join("; "))
}

fn latency_figure(conf: &ConfigurationResult, l: &Labels) -> Result<Figure> {
    let groups = load_groups(conf);
    let mut series = Vec::new();
    for (k, class) in class_names(conf).iter().enumerate() {
        type Pick = fn(&napilab_core::LatencySummary) -> f64;
        let percentiles: [(&str, Style, Pick); 3] = [
            ("p50", Style::Solid, |s| s.p50_us),
            ("p99", Style::Dashed, |s| s.p99_us),
            ("p99.9", Style::Dotted, |s| s.p999_us),
        ];
        for (name, style, pick) in percentiles {
            let points: Vec<(f64, f64)> = groups
                .iter()
                .filter_map(|g| {
                    let v = g.mean(|p| {
                        let c = p.classes.iter().find(|c| &c.name == class)?;
                        c.latency.as_ref().map(pick)
                    })?;
                    Some((g.offered(), v))
                })
                .collect();
            if !points.is_empty() {
                series.push(Series {
                    label: format!("{class} {name}"),
                    colour: colour(k),
                    style,
                    points,
                });
            }
        }
    }
    Ok(Figure {
        title: format!("Latency percentiles per class: {}", conf.name),
        caption: format!(
            "One-way latency per traffic class (solid p50, dashed p99, dotted p99.9), log \
             scale; repeats averaged. {}.",
            l.traffic
        ),
        svg: plot::render(&Chart {
            x_label: OFFERED_AXIS.into(),
            y_label: "latency (us, log scale)".into(),
            y_axis: YAxis::Log,
            y_format: fmt_short,
            legend: SeriesLabelPosition::UpperLeft,
            series,
        })?,
        empty: "No latency was measured (only the paced back end timestamps packets).".into(),
    })
}

fn cpu_figure(conf: &ConfigurationResult, l: &Labels) -> Result<Figure> {
    let groups = load_groups(conf);
    let mut series = Vec::new();
    let mut sources: Vec<String> = Vec::new();
    for (k, &cpu) in conf_cpus(conf).iter().enumerate() {
        let mut source = None;
        let points: Vec<(f64, f64)> = groups
            .iter()
            .filter_map(|g| {
                let (v, s) = g.cpu_busy(cpu)?;
                source.get_or_insert(s);
                Some((g.offered(), v))
            })
            .collect();
        if points.is_empty() {
            continue;
        }
        let source = source.unwrap_or_default();
        let label = if source == "tick" {
            format!("cpu{cpu} (tick-sampled)")
        } else {
            format!("cpu{cpu} ({source})")
        };
        if !sources.contains(&source) {
            sources.push(source);
        }
        series.push(Series {
            label,
            colour: colour(k),
            style: Style::Solid,
            points,
        });
    }
    let mut caption = format!(
        "Busy share of each DUT CPU (user+nice+system+irq+softirq+steal of /proc/stat, mean \
         over the point's intervals). {}.",
        kernel_source_text(&sources, l.producer)
    );
    if sources.iter().any(|s| s == "tick") {
        caption.push_str(
            " Tick-sampled: softirq work right after an IRQ on an idle CPU is counted as \
             idle, so these shares can understate the real cost (misreading 3).",
        );
    }
    Ok(Figure {
        title: format!("CPU busy per core: {}", conf.name),
        caption,
        svg: plot::render(&Chart {
            x_label: OFFERED_AXIS.into(),
            y_label: "CPU busy (% of one core)".into(),
            y_axis: YAxis::LinearTo(1.0),
            y_format: fmt_percent,
            legend: SeriesLabelPosition::UpperLeft,
            series,
        })?,
        empty: "No CPU time shares were observed.".into(),
    })
}

fn cpu_series(
    conf: &ConfigurationResult,
    picks: &[(&str, Style, CpuPick)],
    sources: &mut Vec<String>,
) -> Vec<Series> {
    let groups = load_groups(conf);
    let mut series = Vec::new();
    for (k, &cpu) in conf_cpus(conf).iter().enumerate() {
        for &(name, style, pick) in picks {
            let points: Vec<(f64, f64)> = groups
                .iter()
                .filter_map(|g| {
                    let (v, s) = g.cpu_metric(cpu, pick)?;
                    if !sources.contains(&s) {
                        sources.push(s);
                    }
                    Some((g.offered(), v))
                })
                .collect();
            if !points.is_empty() {
                series.push(Series {
                    label: format!("cpu{cpu} {name}"),
                    colour: colour(k),
                    style,
                    points,
                });
            }
        }
    }
    series
}

fn irq_figure(conf: &ConfigurationResult, l: &Labels) -> Result<Figure> {
    let mut sources = Vec::new();
    let picks: [(&str, Style, CpuPick); 2] = [
        ("net IRQs", Style::Solid, |c| c.net_hardirqs.as_ref()),
        ("NET_RX softirqs", Style::Dashed, |c| {
            c.net_rx_softirqs.as_ref()
        }),
    ];
    let series = cpu_series(conf, &picks, &mut sources);
    Ok(Figure {
        title: format!("Network IRQ and NET_RX softirq rates: {}", conf.name),
        caption: format!(
            "Per CPU: hard IRQs of network devices (solid) and NET_RX softirqs (dashed) per \
             second. At saturation IRQs fall while the core is busy (NAPI polls: misreading \
             1); softirqs above IRQs include TX completion work (misreading 2). {}.",
            kernel_source_text(&sources, l.producer)
        ),
        svg: plot::render(&Chart {
            x_label: OFFERED_AXIS.into(),
            y_label: "events per second (/s)".into(),
            y_axis: YAxis::Linear,
            y_format: fmt_short,
            legend: SeriesLabelPosition::UpperRight,
            series,
        })?,
        empty: "No IRQ or softirq counts were observed.".into(),
    })
}

fn per_softirq_figure(conf: &ConfigurationResult, l: &Labels) -> Result<Figure> {
    let mut sources = Vec::new();
    let picks: [(&str, Style, CpuPick); 1] = [("packets/softirq", Style::Solid, |c| {
        c.packets_per_net_rx_softirq.as_ref()
    })];
    let series = cpu_series(conf, &picks, &mut sources);
    Ok(Figure {
        title: format!("Packets per NET_RX softirq: {}", conf.name),
        caption: format!(
            "Per CPU: softnet_stat processed packets / NET_RX softirqs (derived). Large values \
             mean NAPI batches in polling mode; with drivers that return the budget for TX \
             work it stops meaning that (misreading 4). {}.",
            kernel_source_text(&sources, l.producer)
        ),
        svg: plot::render(&Chart {
            x_label: OFFERED_AXIS.into(),
            y_label: "packets per softirq (pkt/ev)".into(),
            y_axis: YAxis::Linear,
            y_format: fmt_short,
            legend: SeriesLabelPosition::UpperLeft,
            series,
        })?,
        empty: "No softnet or softirq counts were observed.".into(),
    })
}

fn engine_busy(busy: Option<f64>) -> String {
    busy.map(|b| pct(b, 1)).unwrap_or_else(|| "-".into())
}

fn headroom(out: &mut String, run: &RunRecord, l: &Labels) {
    out.push_str("<h2 id=\"headroom\">Generator and sink headroom</h2>\n");
    let _ = writeln!(
        out,
        "<p class=\"sub\">Every point, to show the traffic engines were not the bottleneck. \
         Highlighted rows: an engine was saturated (fell behind its schedule or dropped in its \
         own receive path), so that point describes the engine, not the DUT. Offered below \
         99% of requested is marked. {}.</p>",
        esc(l.traffic)
    );
    out.push_str(
        "<div class=\"scroll\"><table id=\"headroom-table\" class=\"wide\">\n\
         <tr><th colspan=\"4\">point</th><th class=\"group\" colspan=\"5\">traffic (pkt/s)</th>\
         <th class=\"group\" colspan=\"3\">generator</th><th class=\"group\" colspan=\"3\">sink</th></tr>\n\
         <tr><th>configuration</th><th class=\"num\">#</th><th>role</th><th class=\"num\">repeat</th>\
         <th class=\"num\">requested</th><th class=\"num\">offered</th><th class=\"num\">offered/req.</th>\
         <th class=\"num\">delivered</th><th class=\"num\">loss</th>\
         <th>back end</th><th class=\"num\">CPU busy</th><th>saturated</th>\
         <th>back end</th><th class=\"num\">CPU busy</th><th>saturated</th></tr>\n",
    );
    for conf in &run.configurations {
        for (pi, p) in conf.points.iter().enumerate() {
            let bottleneck = p.generator.saturated || p.sink.saturated;
            let ratio = if p.requested_pps > 0.0 {
                p.offered_pps / p.requested_pps
            } else {
                f64::NAN
            };
            let short_class = if ratio < 0.99 { " short" } else { "" };
            let role = match p.role {
                PointRole::Sweep => "sweep",
                PointRole::Search => "search",
            };
            let yes_no = |b: bool| if b { "<b>yes</b>" } else { "no" };
            let _ = writeln!(
                out,
                "<tr{}><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num{}\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td>\
                 <td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                if bottleneck { " class=\"bottleneck\"" } else { "" },
                esc(&conf.name),
                pi,
                role,
                p.repeat,
                grouped(p.requested_pps),
                grouped(p.offered_pps),
                short_class,
                pct(ratio, 1),
                grouped(p.delivered_pps()),
                pct(p.loss_ratio(), 3),
                esc(&p.generator.backend),
                engine_busy(p.generator.cpu_busy),
                yes_no(p.generator.saturated),
                esc(&p.sink.backend),
                engine_busy(p.sink.cpu_busy),
                yes_no(p.sink.saturated),
            );
        }
    }
    out.push_str("</table></div>\n");
}

fn findings(out: &mut String, run: &RunRecord) {
    out.push_str("<h2 id=\"findings\">Findings</h2>\n<p class=\"sub\">What the explain rules named over each configuration's points: the evidence (with the source of every number), the rule's threshold and what it means.</p>\n");
    for conf in &run.configurations {
        let _ = writeln!(out, "<h3>{}</h3>", esc(&conf.name));
        if conf.findings.is_empty() {
            out.push_str("<p class=\"empty\">No rule fired.</p>\n");
            continue;
        }
        for f in &conf.findings {
            let sev = match f.severity {
                Severity::Info => "info",
                Severity::Warning => "warning",
            };
            let _ = writeln!(
                out,
                "<div class=\"finding {sev}\">\n<p><span class=\"badge {sev}\">{sev}</span>\
                 <span class=\"badge\">{}</span><span class=\"badge\">{}</span> <b>{}</b></p>",
                esc(f.rule.name()),
                esc(&f.subject.to_string()),
                esc(&f.title)
            );
            if !f.evidence.is_empty() {
                out.push_str(
                    "<table>\n<tr><th>evidence</th><th class=\"num\">value</th><th>unit</th>\
                     <th>source</th><th>derived as</th></tr>\n",
                );
                for e in &f.evidence {
                    let value = if e.metric.unit == napilab_core::Unit::CpuFraction {
                        pct(e.metric.value, 1)
                    } else {
                        fmt_short(e.metric.value)
                    };
                    let _ = writeln!(
                        out,
                        "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td>{}</td>\
                         <td>{}</td><td>{}</td></tr>",
                        esc(&e.name),
                        esc(&value),
                        esc(unit_name(e.metric.unit)),
                        esc(e.metric.source.as_str()),
                        esc(e.metric.derived.as_deref().unwrap_or(""))
                    );
                }
                out.push_str("</table>\n");
            }
            let _ = writeln!(
                out,
                "<p><b>Threshold:</b> {}</p>\n<p>{}</p>\n</div>",
                esc(&f.threshold),
                esc(&f.explanation)
            );
        }
    }
}

fn notices(out: &mut String, run: &RunRecord) {
    out.push_str("<h2 id=\"notices\">Notices</h2>\n");
    // (what, why) -> number of points whose observation reported it.
    let mut from_points: BTreeMap<(String, String), usize> = BTreeMap::new();
    for conf in &run.configurations {
        for p in &conf.points {
            if let Some(obs) = &p.observation {
                for n in &obs.notices {
                    *from_points
                        .entry((n.what.clone(), n.why.clone()))
                        .or_default() += 1;
                }
            }
        }
    }
    if run.notices.is_empty() && from_points.is_empty() {
        out.push_str("<p class=\"empty\">Nothing was missing.</p>\n");
        return;
    }
    out.push_str("<table>\n<tr><th>what</th><th>why, and what is lost</th><th>where</th></tr>\n");
    for n in &run.notices {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>run</td></tr>",
            esc(&n.what),
            esc(&n.why)
        );
    }
    for ((what, why), count) in from_points {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>observation of {count} point(s)</td></tr>",
            esc(&what),
            esc(&why)
        );
    }
    out.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_numbers_and_escaping() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_767_268_800_000), "2026-01-01 12:00:00 UTC");
        assert_eq!(utc(951_782_400_000 + 3_723_000), "2000-02-29 01:02:03 UTC");
        assert_eq!(grouped(0.0), "0");
        assert_eq!(grouped(999.6), "1,000");
        assert_eq!(grouped(1_234_567.8), "1,234,568");
        assert_eq!(grouped(-1234.4), "-1,234");
        assert_eq!(grouped(f64::NAN), "-");
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
