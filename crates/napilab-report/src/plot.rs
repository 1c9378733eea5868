//! Line charts as inline SVG, drawn with plotters' SVG backend.

use std::ops::Range;

use anyhow::{anyhow, Result};
use napilab_core::stats::short;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

pub const WIDTH: u32 = 660;
pub const HEIGHT: u32 = 380;

/// Colour-blind-safe palette (Okabe-Ito), in the order series take them.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(120, 120, 120),
    RGBColor(240, 228, 66),
];

pub fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Solid,
    Dashed,
    Dotted,
    /// Markers without a line (e.g. the throughput search's probes).
    Markers,
}

pub struct Series {
    pub label: String,
    pub colour: RGBColor,
    pub style: Style,
    pub points: Vec<(f64, f64)>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum YAxis {
    /// From zero to a little above the largest value.
    Linear,
    /// From zero to `max` (or the largest value if larger).
    LinearTo(f64),
    Log,
}

pub struct Chart {
    pub x_label: String,
    pub y_label: String,
    pub y_axis: YAxis,
    pub y_format: fn(f64) -> String,
    /// Where the legend goes: the corner the lines leave free.
    pub legend: SeriesLabelPosition,
    pub series: Vec<Series>,
}

pub fn fmt_short(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() < 10.0 {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else {
        short(v).trim_end_matches(".0").to_string()
    }
}

pub fn fmt_percent(v: f64) -> String {
    format!("{}%", fmt_short(v * 100.0))
}

/// The chart as an `<svg>` element, or `None` when no series has a point to draw.
pub fn render(chart: &Chart) -> Result<Option<String>> {
    let log = chart.y_axis == YAxis::Log;
    let usable = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!log || y > 0.0);
    let all: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied().filter(usable))
        .collect();
    if all.is_empty() {
        return Ok(None);
    }
    let x_max = all.iter().map(|p| p.0).fold(0.0, f64::max);
    let x_max = if x_max > 0.0 { x_max * 1.05 } else { 1.0 };
    let y_max = all.iter().map(|p| p.1).fold(0.0, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
        let result = match chart.y_axis {
            YAxis::Log => {
                let y_min = all.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
                let lo = y_min / 1.5;
                let hi = if y_max > lo { y_max * 1.5 } else { lo * 10.0 };
                draw(&root, chart, 0.0..x_max, (lo..hi).log_scale())
            }
            YAxis::Linear => {
                let hi = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
                draw(&root, chart, 0.0..x_max, 0.0..hi)
            }
            YAxis::LinearTo(max) => {
                let hi = if y_max > max { y_max * 1.05 } else { max };
                draw(&root, chart, 0.0..x_max, 0.0..hi)
            }
        };
        result.map_err(|e| anyhow!("plot: {e}"))?;
        root.present().map_err(|e| anyhow!("plot: {e}"))?;
    }
    // Inline SVG in HTML needs no namespace declaration; dropping it keeps the report
    // free of anything that looks like an external reference.
    let svg = svg.replace(" xmlns=\"http://www.w3.org/2000/svg\"", "");
    Ok(Some(svg))
}

fn draw<'a, Y>(
    root: &DrawingArea<SVGBackend<'a>, Shift>,
    chart: &Chart,
    x: Range<f64>,
    y: Y,
) -> std::result::Result<(), Box<dyn std::error::Error + 'a>>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let font = ("sans-serif", 13);
    let mut ctx = ChartBuilder::on(root)
        .margin(12)
        .x_label_area_size(46)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)?;
    let y_format = chart.y_format;
    ctx.configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .axis_desc_style(("sans-serif", 15))
        .label_style(font)
        .x_labels(8)
        .y_labels(8)
        .x_label_formatter(&|v| fmt_short(*v))
        .y_label_formatter(&|v| y_format(*v))
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()?;
    let log = chart.y_axis == YAxis::Log;
    for s in &chart.series {
        let points: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|&(x, y)| x.is_finite() && y.is_finite() && (!log || y > 0.0))
            .collect();
        if points.is_empty() {
            continue;
        }
        let colour = s.colour;
        let line = colour.stroke_width(2);
        let anno = match s.style {
            Style::Solid => {
                let markers = points.iter().map(|&p| Circle::new(p, 3, colour.filled()));
                ctx.draw_series(markers)?;
                ctx.draw_series(LineSeries::new(points, line))?
            }
            Style::Dashed => {
                let markers = points.iter().map(|&p| Circle::new(p, 3, colour.filled()));
                ctx.draw_series(markers)?;
                ctx.draw_series(DashedLineSeries::new(points, 7, 4, line))?
            }
            Style::Dotted => {
                let markers = points.iter().map(|&p| Circle::new(p, 3, colour.filled()));
                ctx.draw_series(markers)?;
                ctx.draw_series(DashedLineSeries::new(points, 2, 3, line))?
            }
            Style::Markers => ctx.draw_series(
                points
                    .iter()
                    .map(|&p| Circle::new(p, 4, colour.stroke_width(2))),
            )?,
        };
        let legend_style = s.style;
        anno.label(s.label.as_str()).legend(move |(x, y)| {
            // Four strokes per legend mark, so every style has the same element type.
            let strokes: [[(i32, i32); 2]; 4] = match legend_style {
                Style::Solid => [
                    [(0, 0), (5, 0)],
                    [(5, 0), (10, 0)],
                    [(10, 0), (15, 0)],
                    [(15, 0), (20, 0)],
                ],
                Style::Dashed => [
                    [(0, 0), (4, 0)],
                    [(4, 0), (8, 0)],
                    [(12, 0), (16, 0)],
                    [(16, 0), (20, 0)],
                ],
                Style::Dotted => [
                    [(0, 0), (2, 0)],
                    [(6, 0), (8, 0)],
                    [(12, 0), (14, 0)],
                    [(18, 0), (20, 0)],
                ],
                // A small diamond, like the ring markers.
                Style::Markers => [
                    [(6, 0), (10, -4)],
                    [(10, -4), (14, 0)],
                    [(14, 0), (10, 4)],
                    [(10, 4), (6, 0)],
                ],
            };
            let seg = |[a, b]: [(i32, i32); 2]| {
                PathElement::new(
                    vec![(x + a.0, y + a.1), (x + b.0, y + b.1)],
                    colour.stroke_width(2),
                )
            };
            EmptyElement::at((0, 0))
                + seg(strokes[0])
                + seg(strokes[1])
                + seg(strokes[2])
                + seg(strokes[3])
        });
    }
    ctx.configure_series_labels()
        .position(chart.legend.clone())
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(190, 190, 190))
        .draw()?;
    Ok(())
}
