//! The many-napi topology's table (docs/lab.md, "The many-napi topology"): per point,
//! the NAPI instances and how many carried traffic, the DUT's forwarding CPU per
//! packet, the NAPI kthreads' context switches and migrations, and polls per second and
//! packets per poll by context. One set of rows for the text summary (`napilab lab run`,
//! `napilab report`) and the HTML report.

use std::fmt::Write as _;

use napilab_core::many_napi::ManyNapiPoint;
use napilab_core::RunRecord;

use crate::markup::esc;

pub const HEADER: [&str; 11] = [
    "configuration",
    "req kpps",
    "delivered kpps",
    "instances (polled)",
    "DUT CPU ns/pkt",
    "kthreads (pinned)",
    "ctx sw vol/invol (max one)",
    "migrations (max one)",
    "polls/s by context",
    "pkts/poll by context",
    "lost polls",
];

/// One row per point of the run's many-napi configurations; empty when it has none.
pub fn rows(run: &RunRecord) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for c in &run.configurations {
        for p in &c.points {
            let Some(m) = &p.many_napi else { continue };
            out.push(row(&c.name, p.requested_pps, p.delivered_pps(), m));
        }
    }
    out
}

fn row(name: &str, requested: f64, delivered: f64, m: &ManyNapiPoint) -> Vec<String> {
    // The trace tier's per-CPU table overflowed: its counts are too low, so they are
    // not shown as if they were the point's (run.json keeps them beside lost_polls).
    let undercounted = m.lost_polls > 0;
    let traced = |v: String| {
        if undercounted {
            "undercounted".to_string()
        } else {
            v
        }
    };
    let by_context = |f: &dyn Fn(&napilab_core::many_napi::ContextPolls) -> String| {
        if m.polls.is_empty() {
            "-".to_string()
        } else {
            traced(
                m.polls
                    .iter()
                    .map(|c| format!("{} {}", c.context.as_str(), f(c)))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        }
    };
    let (kthreads, switches, migrations) = match &m.kthreads {
        Some(k) => (
            format!("{} ({})", k.count, k.pinned),
            format!(
                "{}/{} ({}/{})",
                k.voluntary_switches,
                k.involuntary_switches,
                k.max_voluntary_switches,
                k.max_involuntary_switches
            ),
            format!("{} ({})", k.migrations, k.max_migrations),
        ),
        None => ("-".into(), "-".into(), "-".into()),
    };
    vec![
        name.to_string(),
        format!("{:.1}", requested / 1000.0),
        format!("{:.1}", delivered / 1000.0),
        match m.instances_polled {
            Some(n) if !undercounted => format!("{} ({n})", m.instances),
            Some(_) => format!("{} (undercounted)", m.instances),
            None => m.instances.to_string(),
        },
        m.dut_cpu_ns_per_packet
            .map_or_else(|| "-".into(), |v| format!("{v:.0}")),
        kthreads,
        switches,
        migrations,
        by_context(&|c| format!("{:.0}", c.polls_per_s)),
        by_context(&|c| format!("{:.2}", c.packets_per_poll)),
        m.lost_polls.to_string(),
    ]
}

/// The HTML section; nothing when the run has no many-napi points.
pub fn section(out: &mut String, run: &RunRecord) {
    let rows = rows(run);
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "<h2 id=\"many-napi\">Many NAPI instances</h2>\n<p class=\"sub\">Per point: the DUT \
         ingress's NAPI instances (in brackets those the trace tier saw poll packets), the \
         DUT's forwarding CPU per delivered packet (NET_RX softirq time of the host plus the \
         NAPI kthreads' on-CPU time), the kthreads' context switches and migrations summed \
         (in brackets the most of one kthread), polls by execution context. \
         \"undercounted\": the trace tier's per-CPU table of (instance, context) pairs was \
         full (lost polls), so its counts are too low and are not shown.</p>\n<table>\n<tr>",
    );
    for h in HEADER {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>\n");
    for r in rows {
        out.push_str("<tr>");
        for cell in r {
            let _ = write!(out, "<td>{}</td>", esc(&cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use napilab_core::many_napi::{ContextPolls, KthreadActivity};
    use napilab_core::trace::ExecContext;
    use napilab_core::RunKind;

    #[test]
    fn rows_show_kthreads_and_mark_undercounted_polls() {
        let mut run = crate::synthetic::SyntheticRun::new(RunKind::Lab).build();
        assert!(rows(&run).is_empty(), "no many-napi points, no rows");
        let point = &mut run.configurations[0].points[0];
        point.many_napi = Some(ManyNapiPoint {
            instances: 1000,
            flows: 4000,
            instances_polled: Some(600),
            dut_cpu_ns: Some(5_000_000),
            dut_cpu_ns_per_packet: Some(2500.0),
            kthreads: Some(KthreadActivity {
                count: 1000,
                pinned: 1000,
                voluntary_switches: 9000,
                involuntary_switches: 12,
                migrations: 0,
                max_voluntary_switches: 40,
                max_involuntary_switches: 2,
                max_migrations: 0,
                on_cpu_ns: 4_000_000,
            }),
            polls: vec![ContextPolls {
                context: ExecContext::NapiThread,
                polls: 8000,
                packets: 9000,
                polls_per_s: 4000.0,
                packets_per_poll: 1.125,
            }],
            lost_polls: 37,
        });
        let rows = rows(&run);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(r.len(), HEADER.len());
        assert_eq!(r[3], "1000 (undercounted)");
        assert_eq!(r[4], "2500");
        assert_eq!(r[5], "1000 (1000)");
        assert_eq!(r[6], "9000/12 (40/2)");
        assert_eq!(r[8], "undercounted");
        assert_eq!(r[9], "undercounted");
        assert_eq!(r[10], "37");
        let mut html = String::new();
        section(&mut html, &run);
        assert!(html.contains("id=\"many-napi\"") && html.contains("undercounted"));
    }
}
