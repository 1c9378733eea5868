//! Plots the exporter soak's CSV (bench/soak-export.py): RSS (solid; its anonymous part
//! dashed) and CPU over time, one colour per exporter, as SVG files beside it.
//!
//!     soak_plot DIR/soak.csv DIR        -> DIR/rss.svg, DIR/cpu.svg

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use napilab_report::plot::{self, Chart, Series, Style, YAxis};
use plotters::chart::SeriesLabelPosition;

/// At most this many points per line: a day at one row per second would draw 86,400
/// markers; each point is the mean of its bucket of rows.
const MAX_POINTS: usize = 720;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [csv, out] = args.as_slice() else {
        bail!("usage: soak_plot SOAK.CSV OUT_DIR");
    };
    let text = std::fs::read_to_string(csv).with_context(|| format!("cannot read {csv}"))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .with_context(|| format!("{csv} is empty"))?
        .split(',')
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .with_context(|| format!("{csv} has no column {name}: is it a soak-export CSV?"))
    };
    let (t, exporter, rss, cpu) = (
        col("t_s")?,
        col("exporter")?,
        col("rss_bytes")?,
        col("cpu_s_per_s")?,
    );
    let anon = col("rss_anon_bytes").ok();
    let heap = col("heap_allocated_bytes").ok();
    // exporter -> (hours, MB, ms/s, anonymous MB, live heap MB)
    let mut rows: BTreeMap<String, Vec<[f64; 5]>> = BTreeMap::new();
    for (n, line) in lines.enumerate() {
        let f: Vec<&str> = line.split(',').collect();
        let num = |i: usize| -> Result<f64> {
            f.get(i).and_then(|v| v.parse().ok()).with_context(|| {
                format!("{csv} line {}: column {} is not a number", n + 2, header[i])
            })
        };
        // The last line of a CSV still being written may be partial.
        let (Ok(h), Ok(m), Ok(c)) = (num(t), num(rss), num(cpu)) else {
            continue;
        };
        let a = anon.map(num).and_then(Result::ok).unwrap_or(f64::NAN);
        // Empty when the exporter had not answered yet, or predates the metric.
        let live = heap.map(num).and_then(Result::ok).unwrap_or(f64::NAN);
        let name = f.get(exporter).copied().unwrap_or("?").to_string();
        rows.entry(name).or_default().push([
            h / 3600.0,
            m / 1048576.0,
            c * 1000.0,
            a / 1048576.0,
            live / 1048576.0,
        ]);
    }
    if rows.is_empty() {
        bail!("{csv} has no rows yet");
    }
    for (file, y_label, picks) in [
        (
            "rss.svg",
            "RSS (MB)",
            &[(1usize, ""), (3, ", anonymous"), (4, ", live heap")][..],
        ),
        ("cpu.svg", "CPU (ms per s)", &[(2, "")][..]),
    ] {
        let mut series = Vec::new();
        for (i, (name, points)) in rows.iter().enumerate() {
            for (pick, what) in picks {
                let points = buckets(points, *pick);
                if points.is_empty() {
                    continue;
                }
                series.push(Series {
                    label: format!("napilab export --interval {name}{what}"),
                    colour: plot::colour(i),
                    style: match *what {
                        "" => Style::Solid,
                        ", live heap" => Style::Dotted,
                        _ => Style::Dashed,
                    },
                    points,
                });
            }
        }
        let chart = Chart {
            x_label: "hours".into(),
            y_label: y_label.into(),
            y_axis: YAxis::Linear,
            y_format: plot::fmt_short,
            legend: SeriesLabelPosition::LowerRight,
            series,
        };
        let svg = plot::render(&chart)?.context("nothing to plot")?;
        // render() drops the namespace for inline HTML; a standalone file needs it.
        let svg = svg.replacen("<svg", "<svg xmlns=\"http://www.w3.org/2000/svg\"", 1);
        let path = std::path::Path::new(out).join(file);
        std::fs::write(&path, svg).with_context(|| format!("cannot write {}", path.display()))?;
        println!("plot: {}", path.display());
    }
    Ok(())
}

fn buckets(points: &[[f64; 5]], pick: usize) -> Vec<(f64, f64)> {
    let per = points.len().div_ceil(MAX_POINTS).max(1);
    points
        .chunks(per)
        // Rows without the value (NaN: a CSV column absent or still empty) are left out,
        // and a bucket without any is not drawn.
        .filter_map(|c| {
            let known: Vec<&[f64; 5]> = c.iter().filter(|p| !p[pick].is_nan()).collect();
            let n = known.len() as f64;
            (!known.is_empty()).then(|| {
                let x = known.iter().map(|p| p[0]).sum::<f64>() / n;
                let y = known.iter().map(|p| p[pick]).sum::<f64>() / n;
                (x, y)
            })
        })
        .collect()
}
