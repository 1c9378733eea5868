//! The HTML page of `napilab compare`: the table of every compared metric (both
//! values with their intervals, the difference and the verdict) and, per metric, the
//! paired plot (A and B side by side with their confidence intervals as whiskers).

use std::fmt::Write as _;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::comparison::{Comparison, Estimate, HostComparison, PairDifference};
use crate::markup::{esc, grouped, CSS};
use crate::plot::{colour, fmt_short};

const WIDTH: u32 = 440;
const HEIGHT: u32 = 300;

/// The page.
pub fn comparison_html(c: &Comparison) -> Result<String> {
    let mut out = String::new();
    let title = format!("napilab compare: {} vs {}", c.a_run, c.b_run);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        esc(&title),
        esc(&title)
    );
    let _ = writeln!(
        out,
        "<p class=\"sub\">A = {}, B = {}. Intervals at {:.0}%: Student t over the repeats, or \
         order statistics within one point for a latency percentile measured once. The \
         verdict is Welch's t-test of B - A (significant when p &lt; {:.2}); it needs at \
         least two repeats on each side.</p>",
        esc(&c.a_run),
        esc(&c.b_run),
        c.level * 100.0,
        1.0 - c.level
    );
    hosts(&mut out, &c.hosts);
    if !c.unmatched.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"sub\">Configurations without a counterpart (not compared): {}.</p>",
            esc(&c.unmatched.join(", "))
        );
    }
    out.push_str(
        "<table id=\"comparison\">\n<tr><th>metric</th><th>A</th><th class=\"num\">A value</th><th>A interval</th>\
         <th>B</th><th class=\"num\">B value</th><th>B interval</th><th class=\"num\">B - A</th>\
         <th class=\"num\">p</th><th>verdict</th></tr>\n",
    );
    for r in &c.rows {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td>{}</td><td class=\"num\">{:+.1}%</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(&r.metric),
            esc(&r.a),
            grouped(r.a_estimate.mean),
            interval(&r.a_estimate),
            esc(&r.b),
            grouped(r.b_estimate.mean),
            interval(&r.b_estimate),
            r.difference.relative * 100.0,
            r.difference.p_value.map_or("-".into(), |p| format!("{p:.3}")),
            esc(&r.difference.verdict)
        );
    }
    out.push_str("</table>\n<h2>Paired plots</h2>\n<div class=\"figures\">\n");
    let mut metrics: Vec<&str> = Vec::new();
    for r in &c.rows {
        if !metrics.contains(&r.metric.as_str()) {
            metrics.push(&r.metric);
        }
    }
    for metric in metrics {
        let rows: Vec<&PairDifference> = c.rows.iter().filter(|r| r.metric == metric).collect();
        let svg = paired_plot(&rows)?;
        let _ = writeln!(
            out,
            "<figure>{svg}<figcaption>{}</figcaption></figure>",
            esc(metric)
        );
    }
    out.push_str("</div>\n</body>\n</html>\n");
    Ok(out)
}

fn interval(e: &Estimate) -> String {
    e.interval.as_ref().map_or("-".into(), |ci| {
        format!("[{}, {}]", grouped(ci.low), grouped(ci.high))
    })
}

/// A and B of each compared pair side by side: the mean as a dot, the interval as a
/// whisker (none when the value was measured once).
fn paired_plot(rows: &[&PairDifference]) -> Result<String> {
    let bounds = |e: &Estimate| {
        e.interval
            .as_ref()
            .map_or((e.mean, e.mean), |ci| (ci.low, ci.high))
    };
    let top = rows
        .iter()
        .flat_map(|r| [bounds(&r.a_estimate).1, bounds(&r.b_estimate).1])
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
        let n = rows.len() as f64;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5..n - 0.5, 0.0..top)
            .map_err(|e| anyhow!("plot: {e}"))?;
        let labels: Vec<String> = rows.iter().map(|r| r.a.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(rows.len().max(1))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    labels
                        .get(i as usize)
                        .map(|l| l.rsplit(' ').next().unwrap_or(l).to_string())
                        .unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| fmt_short(*y))
            .draw()
            .map_err(|e| anyhow!("plot: {e}"))?;
        for (side, offset, pick) in [
            (
                "A",
                -0.15,
                (|r: &PairDifference| r.a_estimate.clone()) as fn(&_) -> Estimate,
            ),
            ("B", 0.15, |r| r.b_estimate.clone()),
        ] {
            let style = colour(if side == "A" { 0 } else { 1 });
            let points: Vec<(f64, Estimate)> = rows
                .iter()
                .enumerate()
                .map(|(i, r)| (i as f64 + offset, pick(r)))
                .collect();
            chart
                .draw_series(points.iter().map(|(x, e)| {
                    let (lo, hi) = bounds(e);
                    ErrorBar::new_vertical(*x, lo, e.mean, hi, style.filled(), 8)
                }))
                .map_err(|e| anyhow!("plot: {e}"))?
                .label(side)
                .legend(move |(x, y)| Circle::new((x, y), 4, style.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| anyhow!("plot: {e}"))?;
        root.present().map_err(|e| anyhow!("plot: {e}"))?;
    }
    Ok(svg.replace(" xmlns=\"http://www.w3.org/2000/svg\"", ""))
}

/// Where the two runs ran, and what differs between their hosts.
fn hosts(out: &mut String, h: &HostComparison) {
    let _ = write!(
        out,
        "<p class=\"sub\" id=\"hosts\">A ran on {}; B ran on {}. ",
        esc(&h.a),
        esc(&h.b)
    );
    match h.status.as_str() {
        "same" => out.push_str(
            "Same host identity (CPU, microcode, mitigations, kernel, virtualization).</p>\n",
        ),
        "different" => {
            let fields: Vec<String> = h
                .differences
                .iter()
                .map(|d| format!("{} ({} / {})", d.field, d.a, d.b))
                .collect();
            let _ = writeln!(
                out,
                "<strong>Different hosts</strong>: {}. {}</p>",
                esc(&fields.join("; ")),
                if h.across_hosts {
                    "Verdicts are given anyway (--across-hosts): the host may explain part of any difference."
                } else {
                    "A difference that would be significant is marked <em>different hosts</em>: the \
                     host may explain it (napilab compare --across-hosts judges it anyway)."
                }
            );
        }
        _ => {
            out.push_str("Whether they ran on one host is unknown: verdicts assume they did.</p>\n")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comparison::compare;
    use crate::synthetic::SyntheticRun;
    use napilab_core::RunKind;

    #[test]
    fn different_hosts_are_named_with_what_differs() {
        let mut a = SyntheticRun::new(RunKind::Lab).build();
        let mut b = SyntheticRun::new(RunKind::Lab)
            .run_id("20260101-130000-cafe")
            .build();
        let mut id = napilab_core::HostIdentity::default();
        id.kernel.release = Some("6.1.0".into());
        a.host.identity = Some(id.clone());
        id.kernel.release = Some("6.18.4".into());
        b.host.identity = Some(id);
        let html = comparison_html(&compare(&a, &b, &[], false)).expect("html");
        assert!(html.contains("id=\"hosts\""), "{html}");
        assert!(html.contains("kernel.release"), "{html}");
        assert!(html.contains("--across-hosts"), "{html}");
    }

    #[test]
    fn the_page_has_the_table_and_a_plot_per_metric() {
        let a = SyntheticRun::new(RunKind::Lab).build();
        let b = SyntheticRun::new(RunKind::Lab)
            .run_id("20260101-130000-cafe")
            .build();
        let c = compare(&a, &b, &[], false);
        let html = comparison_html(&c).expect("html");
        assert!(html.contains("id=\"comparison\""));
        let metrics: std::collections::BTreeSet<&str> =
            c.rows.iter().map(|r| r.metric.as_str()).collect();
        assert_eq!(html.matches("<svg").count(), metrics.len());
        assert!(!html.contains("http://") && !html.contains("https://"));
    }
}
