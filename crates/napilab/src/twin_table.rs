//! The text report's "twin vs lab" tables (`RunRecord::twin`): the lab's maxima with
//! their limiter beside the twin's predictions, and per class the latencies and losses
//! (several-class scenarios such as ingress-qos).

use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use napilab_core::RunRecord;

fn us(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.3}", x * 100.0)
    } else {
        "-".into()
    }
}

/// The tables, or nothing when the run carries no comparison.
pub fn tables(r: &RunRecord) -> String {
    let Some(t) = &r.twin else {
        return String::new();
    };
    let mut out = format!("twin vs lab: {}\n", t.basis);
    let same_host = t.profile_host == "same host";
    if !t.profile_host.is_empty() {
        out.push_str(&format!(
            "the {} profile's host: {}\n",
            t.profile, t.profile_host
        ));
    }
    if !t.maxima.is_empty() {
        let with_loo = t.maxima.iter().any(|x| x.leave_one_out.is_some());
        let mut m = Table::new();
        m.load_style(UTF8_BORDERS_ONLY);
        let mut header = vec![
            "configuration".to_string(),
            "lab max kpps".into(),
            "lab limiter (search stopped)".into(),
            format!("twin max kpps ({})", t.profile),
            "error (lower bound: at least)".into(),
        ];
        if with_loo {
            header.push("leave-one-out twin kpps".into());
            header.push("leave-one-out error".into());
        }
        m.set_header(header);
        for x in &t.maxima {
            let mut row = vec![
                x.configuration.clone(),
                format!("{:.1}", x.lab_pps / 1e3),
                format!("{} ({})", x.lab_stopped, x.limiter()),
                format!("{:.1}", x.twin_pps / 1e3),
                if same_host || t.profile_host.is_empty() {
                    x.verdict.clone()
                } else {
                    format!("{} [profile from another or unknown host]", x.verdict)
                },
            ];
            if with_loo {
                match &x.leave_one_out {
                    Some(l) => {
                        row.push(
                            l.twin_pps
                                .map_or_else(|| "-".into(), |v| format!("{:.1}", v / 1e3)),
                        );
                        row.push(l.verdict.clone());
                    }
                    None => row.extend(["-".to_string(), "not a fitted maximum".to_string()]),
                }
            }
            m.add_row(row);
        }
        out.push_str(&format!("{m}\n"));
    }
    if !t.classes.is_empty() {
        let mut c = crate::render::table(vec![
            "configuration",
            "load kpps",
            "class",
            "lab p50/p99 us",
            "twin p50/p99 us",
            "lab loss %",
            "twin loss %",
        ]);
        for x in &t.classes {
            c.add_row(vec![
                x.configuration.clone(),
                format!("{:.1}", x.requested_pps / 1e3),
                x.class.clone(),
                format!("{}/{}", us(x.lab_p50_us), us(x.lab_p99_us)),
                format!("{}/{}", us(x.twin_p50_us), us(x.twin_p99_us)),
                pct(x.lab_loss),
                pct(x.twin_loss),
            ]);
        }
        out.push_str(&format!("{c}\n"));
    }
    for n in &t.notes {
        out.push_str(&format!("twin note: {n}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use napilab_core::{LeaveOneOutMaximum, RunKind, TwinMaximum, TwinVsLab};
    use napilab_report::synthetic::SyntheticRun;

    /// The text report of a lab run with the twin's predictions lists each
    /// configuration's lab maximum, its limiter, the twin's and the verdict.
    #[test]
    fn the_text_report_lists_the_twin_beside_the_lab() {
        let mut run = SyntheticRun::new(RunKind::Lab).build();
        assert_eq!(super::tables(&run), "");
        run.twin = Some(TwinVsLab {
            profile: "veth-lab".into(),
            basis: "predicted with the shipped veth-lab profile".into(),
            maxima: vec![TwinMaximum {
                configuration: "two-cpu/threaded".into(),
                lab_pps: 968_750.0,
                lab_stopped: "converged".into(),
                lab_lower_bound: false,
                twin_upper_bound: false,
                lab_unfinished: false,
                twin_pps: 959_375.0,
                relative_error: Some(-0.0097),
                verdict: "-1.0%".into(),
                leave_one_out: Some(LeaveOneOutMaximum {
                    fitted_on: vec!["one-cpu/threaded".into()],
                    twin_pps: Some(1_001_000.0),
                    relative_error: Some(0.033),
                    verdict: "+3.3%".into(),
                }),
            }],
            profile_host: "different host: cpu.vendor AuthenticAMD (profile) vs GenuineIntel (run)"
                .into(),
            ..TwinVsLab::default()
        });
        let text = super::tables(&run);
        for want in [
            "twin vs lab: predicted with the shipped veth-lab profile",
            "two-cpu/threaded",
            "968.8",
            "converged (DUT)",
            "959.4",
            "-1.0% [profile from another or unknown host]",
            "the veth-lab profile's host: different host: cpu.vendor",
            "leave-one-out twin kpps",
            "1001.0",
            "+3.3%",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        assert!(crate::lab_cmd::summary(&run, false).contains("twin vs lab"));
    }
}
