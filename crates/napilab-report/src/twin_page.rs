//! The report's "Twin vs lab" section: the twin's predictions stored in the run
//! (`RunRecord::twin`, computed by napilab-sim after a lab run), per configuration the
//! lab's maximum with its limiter beside the twin's, and per class (several-class
//! scenarios such as ingress-qos) the latencies and losses side by side.

use std::fmt::Write as _;

use napilab_core::RunRecord;

use crate::markup::{esc, grouped};

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
    if !t.profile_host.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"sub\">The {} profile's host: {}</p>",
            esc(&t.profile),
            esc(&t.profile_host)
        );
    }
    if !t.maxima.is_empty() {
        out.push_str("<table>\n<tr><th>configuration</th><th>lab max pkt/s</th><th>lab limiter (search stopped)</th><th>twin max pkt/s (profile)</th><th>error (lower bound: at least)</th><th>leave-one-out twin pkt/s</th><th>leave-one-out error</th></tr>\n");
        for m in &t.maxima {
            let (loo_pps, loo_verdict) = m.leave_one_out.as_ref().map_or_else(
                || ("-".to_string(), "-".to_string()),
                |l| {
                    (
                        l.twin_pps.map_or_else(|| "-".into(), grouped),
                        l.verdict.clone(),
                    )
                },
            );
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"num\">{}</td><td>{} ({})</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                esc(&m.configuration),
                grouped(m.lab_pps),
                esc(&m.lab_stopped),
                m.limiter(),
                grouped(m.twin_pps),
                esc(&m.verdict),
                loo_pps,
                esc(&loo_verdict)
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

#[cfg(test)]
mod tests {
    use napilab_core::{RunKind, TwinClassPoint, TwinMaximum, TwinVsLab};

    use crate::synthetic::SyntheticRun;

    /// A lab run that carries the twin's predictions shows them in its report: each
    /// configuration's maximum with the lab's limiter and the verdict, each class's
    /// latencies side by side; a run without them has no such section.
    #[test]
    fn the_report_shows_the_twin_beside_the_lab() {
        let mut run = SyntheticRun::new(RunKind::Lab).build();
        let html = crate::report_html(&run).expect("report");
        assert!(!html.contains("<h2 id=\"twin\">"));
        run.twin = Some(TwinVsLab {
            profile: "veth-lab".into(),
            basis: "predicted with the shipped veth-lab profile".into(),
            maxima: vec![TwinMaximum {
                configuration: "two-cpu/softirq".into(),
                lab_pps: 1_000_000.0,
                lab_stopped: "converged_generator_limited".into(),
                lab_lower_bound: true,
                twin_upper_bound: false,
                lab_unfinished: false,
                twin_pps: 1_043_750.0,
                relative_error: Some(0.04375),
                verdict: "lab is a lower bound: twin >= lab holds (+4.4%)".into(),
                leave_one_out: None,
            }],
            classes: vec![TwinClassPoint {
                configuration: "rt-fifo".into(),
                requested_pps: 100_000.0,
                class: "rt".into(),
                lab_p50_us: Some(31.0),
                lab_p99_us: Some(88.0),
                lab_loss: 0.0,
                twin_p50_us: Some(1.0),
                twin_p99_us: Some(2.0),
                twin_loss: 0.0,
            }],
            notes: vec!["a note".into()],
            profile_host: "same host".into(),
        });
        let html = crate::report_html(&run).expect("report");
        let at = html
            .find("<h2 id=\"twin\">Twin vs lab</h2>")
            .expect("section");
        let section = &html[at..];
        for want in [
            "predicted with the shipped veth-lab profile",
            "two-cpu/softirq",
            "1,000,000",
            "converged_generator_limited (testbed: lower bound)",
            "1,043,750",
            "twin &gt;= lab holds (+4.4%)",
            "rt-fifo",
            "31 / 88",
            "a note",
            "The veth-lab profile's host: same host",
        ] {
            assert!(section.contains(want), "{want:?} missing from {section}");
        }
    }
}
