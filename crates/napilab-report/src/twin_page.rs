//! The report's "Twin vs lab" section: the twin's predictions stored in the run
//! (`RunRecord::twin`, computed by napilab-sim after a lab run), per configuration the
//! lab's maximum with its limiter beside the twin's, and per class (several-class
//! scenarios such as ingress-qos) the latencies and losses side by side.

use std::fmt::Write as _;

use napilab_core::RunRecord;

use crate::html::{esc, grouped};

fn us(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.3}%", x * 100.0)
    } else {
        "-".into()
    }
}

/// The section, or nothing when the run carries no comparison.
pub fn twin_section(out: &mut String, run: &RunRecord) {
    let Some(t) = &run.twin else { return };
    out.push_str("<h2 id=\"twin\">Twin vs lab</h2>\n");
    let _ = writeln!(out, "<p class=\"sub\">{}</p>", esc(&t.basis));
    if !t.maxima.is_empty() {
        out.push_str("<table>\n<tr><th>configuration</th><th>lab max pkt/s</th><th>lab limiter (search stopped)</th><th>twin max pkt/s</th><th>error (lower bound: at least)</th></tr>\n");
        for m in &t.maxima {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"num\">{}</td><td>{}{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                esc(&m.configuration),
                grouped(m.lab_pps),
                esc(&m.lab_stopped),
                if m.lab_lower_bound { " (testbed: lower bound)" } else { " (DUT)" },
                grouped(m.twin_pps),
                esc(&m.verdict)
            );
        }
        out.push_str("</table>\n");
    }
    if !t.classes.is_empty() {
        out.push_str("<table>\n<tr><th>configuration</th><th>load pkt/s</th><th>class</th><th>lab p50 / p99 us</th><th>twin p50 / p99 us</th><th>lab loss</th><th>twin loss</th></tr>\n");
        for c in &t.classes {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{} / {}</td><td class=\"num\">{} / {}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                esc(&c.configuration),
                grouped(c.requested_pps),
                esc(&c.class),
                us(c.lab_p50_us),
                us(c.lab_p99_us),
                us(c.twin_p50_us),
                us(c.twin_p99_us),
                pct(c.lab_loss),
                pct(c.twin_loss)
            );
        }
        out.push_str("</table>\n");
    }
    for n in &t.notes {
        let _ = writeln!(out, "<p class=\"sub\">{}</p>", esc(n));
    }
}
