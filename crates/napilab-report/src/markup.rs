//! The pieces of markup every page of the report shares: the style sheet, escaping,
//! number grouping and the grid of figures. A module of its own so that the run
//! report (html.rs) and the pages it embeds (twin, server, many-NAPI, comparison)
//! all import from here rather than from each other.

use std::fmt::Write as _;

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
