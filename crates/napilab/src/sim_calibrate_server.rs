//! The server topology's side of `napilab sim calibrate` (its costs fitted on a server
//! run) and of `napilab lab run` (the twin's maximum at the objective beside the lab's,
//! per mode). The fit is napilab_sim::calibrate_server's; this prints and writes it.

use std::path::Path;

use anyhow::{Context, Result};
use napilab_core::{RunRecord, TwinMaxQps};
use napilab_sim::calibrate::LabProfile;
use napilab_sim::calibrate_server::{self, ServerProfile, VETH_LAB_SERVER_NAME};

/// Whether `record` is a server-topology run (its configurations carry request points).
pub fn is_server_run(record: &RunRecord) -> bool {
    record.configurations.iter().any(|c| c.requests.is_some())
}

/// `napilab sim calibrate --lab RUN.json` on a server run: fit the server costs on
/// `base`, print how, predict the run's maxima with them, write the profile to `out`.
pub fn calibrate(
    record: &RunRecord,
    file: &str,
    base_name: &str,
    base: &LabProfile,
    out: Option<&Path>,
    json: bool,
) -> Result<()> {
    let command = format!(
        "napilab sim calibrate --lab {file}{}{}",
        out.map_or(String::new(), |o| format!(" --out {}", o.display())),
        if base_name == napilab_sim::calibrate::VETH_LAB_NAME {
            String::new()
        } else {
            format!(" --base {base_name}")
        }
    );
    eprintln!(
        "fitting the server costs on run {} (the twin re-runs each mode at the run's rates, then searches each mode's maximum: seconds to a minute)",
        record.run_id
    );
    let cal = calibrate_server::calibrate(record, file, base, &command)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let predictions = calibrate_server::predict(
        record,
        file,
        &cal.profile,
        "fitted on this run",
        "fit on this run's CPU: costs from its CPU at each rate, maxima not fitted",
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(out) = out {
        std::fs::write(out, cal.to_toml(&command, record, &predictions))
            .with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!("profile written to {}", out.display());
    }
    let costs = cal.profile.costs_or_assumed();
    if json {
        let json = serde_json::json!({
            "run_id": record.run_id,
            "scenario": record.scenario_name,
            "topology": "server",
            "server_costs": costs.parameters().into_iter().map(|(k, v)| (k.to_string(), v)).collect::<std::collections::BTreeMap<_, _>>(),
            "client_cycles_per_request": cal.profile.client_cycles_per_request,
            "cpu_ghz": cal.profile.lab.profile.cpu_ghz,
            "how_fitted": cal.notes,
            "not_fitted": cal.unfixed,
            "checks": cal.checks,
            "predictions": predictions.iter().map(|(name, p)| serde_json::json!({"configuration": name, "twin": p})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    println!(
        "server costs fitted on run {} ({}), platform costs of {base_name} kept",
        record.run_id, record.scenario_name
    );
    for n in &cal.notes {
        println!("  {n}");
    }
    for u in &cal.unfixed {
        println!("  NOT FITTED: {u}");
    }
    println!(
        "fitted: {} (cycles at cpu_ghz {}); client {}",
        costs
            .parameters()
            .iter()
            .map(|(k, v)| format!("{k} {v:.0}"))
            .collect::<Vec<_>>()
            .join(", "),
        cal.profile.lab.profile.cpu_ghz,
        cal.profile.client_cycles_per_request.map_or_else(
            || "not fitted".into(),
            |c| format!("{c:.0} cycles a request (not modelled)")
        )
    );
    let mut t = crate::render::table(vec!["configuration", "statistic", "lab", "twin (fitted)"]);
    for c in &cal.checks {
        t.add_row(vec![
            c.configuration.clone(),
            c.statistic.clone(),
            format!("{:.0}", c.lab),
            format!("{:.0}", c.twin),
        ]);
    }
    println!("{t}");
    print!("{}", maxima_table(&predictions));
    Ok(())
}

/// Per configuration: the lab's maximum with its limiter, the twin's, the error.
fn maxima_table(rows: &[(String, TwinMaxQps)]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut t = crate::render::table(vec![
        "configuration",
        "lab max QPS at SLO",
        "what ended the lab's search",
        "twin max QPS",
        "twin's costs",
        "error (lower bound: at least)",
    ]);
    for (name, p) in rows {
        t.add_row(vec![
            name.clone(),
            format!("{:.0}", p.lab_max_qps),
            p.lab_limiter.clone(),
            format!("{:.0}", p.twin_max_qps),
            format!("{} ({})", p.profile, p.basis),
            p.verdict(),
        ]);
    }
    format!("the twin's maximum at the objective beside the lab's\n{t}\n")
}

/// After a lab server run: the twin's maximum per configuration, predicted with the
/// shipped `veth-lab-server` profile (fitted on another run of this machine) and
/// with costs fitted on this run's own CPU, stored in each configuration's
/// `requests.twin`. A failure is a notice, not a failed run: the lab's results stand.
pub fn beside_lab(record: &mut RunRecord, file: &str) {
    if !is_server_run(record) || record.interrupted {
        return;
    }
    eprintln!("the twin beside the lab: each mode's maximum on the twin, predicted and fitted on this run (seconds to a minute)");
    let mut rows: Vec<(String, TwinMaxQps)> = Vec::new();
    let mut problems = Vec::new();
    match ServerProfile::load(VETH_LAB_SERVER_NAME).and_then(|shipped| {
        calibrate_server::predict(
            record,
            file,
            &shipped,
            VETH_LAB_SERVER_NAME,
            "prediction: shipped profile, fitted on another run of this machine",
        )
    }) {
        Ok(r) => rows.extend(r),
        Err(e) => problems.push(format!("prediction with {VETH_LAB_SERVER_NAME}: {e}")),
    }
    let fitted = LabProfile::load(napilab_sim::calibrate::VETH_LAB_NAME).and_then(|base| {
        let cal =
            calibrate_server::calibrate(record, file, &base, "napilab lab run (after the run)")?;
        problems.extend(cal.unfixed.iter().map(|u| format!("fit on this run: {u}")));
        calibrate_server::predict(
            record,
            file,
            &cal.profile,
            "fitted on this run",
            "fit on this run's CPU: costs from its CPU at each rate, maxima not fitted",
        )
    });
    match fitted {
        Ok(r) => rows.extend(r),
        Err(e) => problems.push(format!("fit on this run: {e}")),
    }
    // Every row of a configuration drew from the same probe: said once per source.
    let mut wake_ups: Vec<String> = rows
        .iter()
        .filter_map(|(_, t)| t.wake_ups.clone())
        .collect();
    wake_ups.sort();
    wake_ups.dedup();
    for why in wake_ups {
        record.notices.push(napilab_core::Notice {
            what: "the twin beside the lab: wake-ups".into(),
            why: format!(
                "the server thread's wake-ups of an idle CPU (and a NAPI kthread's): {why}"
            ),
        });
    }
    for (name, twin) in rows {
        if let Some(q) = record
            .configurations
            .iter_mut()
            .find(|c| c.name == name)
            .and_then(|c| c.requests.as_mut())
        {
            q.twin.push(twin);
        }
    }
    for why in problems {
        record.notices.push(napilab_core::Notice {
            what: "the twin beside the lab".into(),
            why,
        });
    }
}

/// The text report's table of the twin beside the lab (empty without twin rows).
pub fn twin_table(record: &RunRecord) -> String {
    let rows: Vec<(String, TwinMaxQps)> = record
        .configurations
        .iter()
        .filter_map(|c| Some((c.name.clone(), c.requests.as_ref()?)))
        .flat_map(|(name, q)| q.twin.iter().map(move |t| (name.clone(), t.clone())))
        .collect();
    maxima_table(&rows)
}
