//! `napilab lab run|clean`: scenarios on the real kernel, in network namespaces
//! (docs/lab.md).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{Context, Result};
use comfy_table::Table;
use napilab_core::scenario::{DEFAULT_SCENARIO, DEFAULT_SCENARIO_NAME};
use napilab_core::{PointRole, RunRecord};
use napilab_lab::{clean, RunOptions};
use napilab_report::comparison;

#[derive(clap::Args)]
pub struct LabArgs {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(clap::Subcommand)]
enum LabCommand {
    /// Run a scenario (default: the built-in scenarios/default.toml): configurations x
    /// offered loads x repeats, then a maximum-throughput search per configuration.
    /// Needs root; everything it creates is removed at the end, also on Ctrl-C.
    Run(RunArgs),
    /// Remove what interrupted or killed lab runs left behind: namespaces
    /// napilab-<run>-*, their processes, and sysctl changes of their journals.
    Clean(CleanArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Scenario file (TOML, see scenarios/ and docs/lab.md); default: built in.
    scenario: Option<PathBuf>,
    /// Print the RunRecord as JSON instead of the summary table.
    #[arg(long)]
    json: bool,
    /// Results directory: the record goes to DIR/<run_id>/run.json.
    #[arg(long, value_name = "DIR", default_value = "results")]
    out: PathBuf,
    /// Journal directory for the global sysctls (default $NAPILAB_JOURNAL_DIR, else
    /// /var/lib/napilab/journal).
    #[arg(long, value_name = "DIR")]
    journal_dir: Option<PathBuf>,
    /// Do not observe the DUT namespace per point (no Observation in the record).
    #[arg(long)]
    no_observe: bool,
    /// Also print every search trial (they are always in the report, points.csv and
    /// run.json).
    #[arg(long, short)]
    verbose: bool,
}

#[derive(clap::Args)]
struct CleanArgs {
    /// Print what was removed as JSON.
    #[arg(long)]
    json: bool,
    /// Journal directory (default $NAPILAB_JOURNAL_DIR, else /var/lib/napilab/journal).
    #[arg(long, value_name = "DIR")]
    journal_dir: Option<PathBuf>,
}

pub fn run(args: LabArgs) -> Result<()> {
    match args.command {
        LabCommand::Run(a) => run_scenario(a),
        LabCommand::Clean(a) => {
            napilab_lab::runner::preflight()?;
            let dir = napilab_tune::journal::journal_dir(a.journal_dir.as_deref());
            let r = clean::clean(&dir);
            if a.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                for n in &r.namespaces_removed {
                    println!("removed namespace {n}");
                }
                for j in &r.journals_reverted {
                    println!("reverted journal {j}");
                }
                for j in &r.journals_removed {
                    println!(
                        "removed the mode journals {j} (their device went with its namespace)"
                    );
                }
                for n in &r.left_running {
                    println!("left alone (its run is still in progress): {n}");
                }
                if r.namespaces_removed.is_empty()
                    && r.journals_reverted.is_empty()
                    && r.journals_removed.is_empty()
                {
                    println!("nothing to clean");
                }
            }
            if !r.errors.is_empty() {
                anyhow::bail!("lab clean incomplete: {}", r.errors.join("; "));
            }
            Ok(())
        }
    }
}

fn run_scenario(a: RunArgs) -> Result<()> {
    let (text, file) = match &a.scenario {
        Some(p) => (
            std::fs::read_to_string(p)
                .with_context(|| format!("cannot read scenario {}", p.display()))?,
            p.display().to_string(),
        ),
        None => (
            DEFAULT_SCENARIO.to_string(),
            DEFAULT_SCENARIO_NAME.to_string(),
        ),
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install the Ctrl-C handler")?;
    }
    let opts = RunOptions {
        scenario_text: text,
        scenario_file: file,
        out_dir: a.out.clone(),
        // Written once, with the twin, by write_outputs below.
        write_record: false,
        observe: !a.no_observe,
        journal_dir: napilab_tune::journal::journal_dir(a.journal_dir.as_deref()),
        stop,
        progress: !a.json,
        run_id: None,
    };
    let started = std::time::Instant::now();
    let mut outcome = napilab_lab::run(&opts)?;
    // A server run gets the twin's maximum per mode beside the lab's.
    crate::sim_calibrate_server::beside_lab(&mut outcome.record, &opts.scenario_file);
    // The twin beside the lab (docs/sim.md): its predictions go into the record, so every
    // report of the run shows them.
    let packet_run = outcome
        .record
        .configurations
        .iter()
        .all(|c| c.requests.is_none());
    if !a.json && packet_run {
        eprintln!("running the twin on the scenario for the twin-vs-lab table, then fitting it to this run for the leave-one-out predictions...");
    }
    outcome.record.twin = napilab_sim::twin_vs_lab::compare(&outcome.record, true);
    // The report and the store, beside the record: results/<run_id>/report.html,
    // points.csv, run.json and results/napilab.db.
    let dir = outcome.path.parent().unwrap_or(&a.out).to_path_buf();
    let outputs = napilab_report::write_outputs(&outcome.record, &dir, &a.out.join("napilab.db"))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&outcome.record)?);
    } else {
        print!("{}", summary(&outcome.record, a.verbose));
        println!(
            "wall time {:.0} s\nreport: {}\npoints: {}\nrecord: {}\nopenmetrics: {}\nstored in {} (napilab report {} re-renders it)",
            started.elapsed().as_secs_f64(),
            outputs.html.display(),
            outputs.csv.display(),
            outputs.json.display(),
            outputs.openmetrics.display(),
            outputs.db.display(),
            outcome.record.run_id
        );
    }
    if outcome.record.interrupted {
        // The finished points are saved, but the run is incomplete: scripts must see it.
        return Err(crate::Interrupted("the record and report hold the finished points").into());
    }
    Ok(())
}

/// (class, delivered pps, loss ratio, latency, loss counters) of one summary row.
type Row<'a> = (
    String,
    f64,
    f64,
    Option<&'a napilab_core::LatencySummary>,
    Vec<String>,
);

fn kpps(x: f64) -> String {
    format!("{:.1}", x / 1000.0)
}

/// The summary a person reads: the maxima with their intervals and differences and
/// the twin beside the lab first, then the sweep's points; the searches' trials only
/// when `verbose` (they are in the report and points.csv).
pub fn summary(r: &RunRecord, verbose: bool) -> String {
    let mut out = format!(
        "run {} ({}), scenario {}{}\n",
        r.run_id,
        "lab",
        r.scenario_name,
        if r.interrupted { ", INTERRUPTED" } else { "" }
    );
    out.push_str(&match &r.host.identity {
        Some(id) => format!("host: {}\n", id.summary()),
        None => "host: unknown (recorded before napilab kept the host identity)\n".into(),
    });
    out.push_str(&host_speed_line(&r.host.speed));
    let (t, trials_left_out) = points_table(r, verbose);
    out.push_str(&maxima_table(r));
    out.push_str(&crate::lab_requests::maxima(r));
    out.push_str(&crate::twin_table::tables(r));
    out.push_str(&many_napi_table(r));
    if !t.is_empty() {
        out.push_str(&format!("{t}\n"));
    }
    out.push_str(&crate::lab_requests::points(r, verbose));
    let request_trials = crate::lab_requests::search_trials(r);
    if !verbose && trials_left_out + request_trials > 0 {
        out.push_str(&format!(
            "{} search trials are in the report and points.csv (--verbose prints them here)\n",
            trials_left_out + request_trials
        ));
    }
    for n in &r.notices {
        out.push_str(&format!("note: {}: {}\n", n.what, n.why));
    }
    out
}

/// Per configuration, how fast the CPUs ran right after its search trials, against the
/// fastest this run saw on each CPU (docs/lab.md, "Host speed").
fn trial_speed_lines(r: &RunRecord) -> String {
    let mut fastest: std::collections::BTreeMap<u32, f64> = std::collections::BTreeMap::new();
    let trial_samples = |c: &napilab_core::ConfigurationResult| -> Vec<(u32, f64)> {
        c.max_throughput
            .iter()
            .flat_map(|m| &m.trials)
            .flat_map(|t| t.disturbance.host_speed_ns.iter().copied())
            .filter(|(_, ns)| ns.is_finite() && *ns > 0.0)
            .collect()
    };
    let run_samples = r
        .host
        .speed
        .iter()
        .flat_map(|s| s.ns_per_unit.iter().map(move |ns| (s.cpu, *ns)))
        .filter(|(_, ns)| ns.is_finite() && *ns > 0.0);
    for (cpu, ns) in r
        .configurations
        .iter()
        .flat_map(trial_samples)
        .chain(run_samples)
    {
        let f = fastest.entry(cpu).or_insert(ns);
        *f = f.min(ns);
    }
    let mut out = String::new();
    for c in &r.configurations {
        let mut slowdowns: Vec<f64> = trial_samples(c)
            .into_iter()
            .filter_map(|(cpu, ns)| Some(ns / fastest.get(&cpu)?))
            .collect();
        if slowdowns.is_empty() {
            continue;
        }
        slowdowns.sort_by(f64::total_cmp);
        let at = |q: f64| napilab_core::nearest_rank(&slowdowns, q);
        out.push_str(&format!(
            "  {}: CPUs after its trials ran a fixed piece of work at a median {:.2}x the run's fastest, p90 {:.2}x ({} samples)\n",
            c.name,
            at(0.5),
            at(0.9),
            slowdowns.len()
        ));
    }
    out
}

/// "host speed: run start CPU 0 1.64x, CPU 1 1.51x; run end ..." (the median sample
/// against the fastest; docs/lab.md, "Host speed"), or nothing when not measured.
fn host_speed_line(speed: &[napilab_core::HostSpeed]) -> String {
    if speed.is_empty() {
        return String::new();
    }
    let mut parts: Vec<String> = Vec::new();
    for s in speed {
        let figure = s.spread().map_or("no sample".to_string(), |x| {
            format!("{:.2}x", x.median_slowdown)
        });
        match parts.last_mut() {
            Some(last) if last.starts_with(&s.when) => {
                last.push_str(&format!(", CPU {} {figure}", s.cpu))
            }
            _ => parts.push(format!("{} CPU {} {figure}", s.when, s.cpu)),
        }
    }
    format!(
        "host speed (median time of a fixed piece of work against its fastest; a maximum cannot be steadier than its CPU): {}\n",
        parts.join("; ")
    )
}

/// The sweep's points (and the searches' trials when `verbose`) as a table, and how
/// many trials it left out.
fn points_table(r: &RunRecord, verbose: bool) -> (Table, usize) {
    let mut t = crate::render::table(vec![
        "configuration",
        "role",
        "class",
        "req kpps",
        "offered kpps",
        "delivered kpps",
        "loss %",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "gen cpu %",
        "gen late",
        "sink cpu %",
        "loss counted at",
    ]);
    let mut trials_left_out = 0;
    for c in &r.configurations {
        for p in &c.points {
            if p.role == PointRole::Search && !verbose {
                trials_left_out += 1;
                continue;
            }
            add_point_rows(&mut t, &c.name, p);
        }
    }
    (t, trials_left_out)
}

/// One point's rows: one for the point, then one per class when there are several.
fn add_point_rows(t: &mut Table, configuration: &str, p: &napilab_core::PointResult) {
    let late = p
        .generator
        .counters
        .iter()
        .find(|(k, _)| k == "late_departures")
        .map_or(0, |(_, v)| *v);
    let role = match p.role {
        PointRole::Sweep => "sweep",
        PointRole::Search => "search",
    };
    for (i, (class, delivered, loss, lat, counted)) in class_rows(p).into_iter().enumerate() {
        let lat_cell = |f: fn(&napilab_core::LatencySummary) -> f64| {
            lat.map_or_else(|| "-".to_string(), |l| format!("{:.0}", f(l)))
        };
        let first = i == 0;
        t.add_row(vec![
            if first {
                configuration.to_string()
            } else {
                String::new()
            },
            if first { role.into() } else { String::new() },
            class,
            if first {
                kpps(p.requested_pps)
            } else {
                String::new()
            },
            if first {
                kpps(p.offered_pps)
            } else {
                String::new()
            },
            kpps(delivered),
            format!("{:.3}", loss * 100.0),
            lat_cell(|l| l.p50_us),
            lat_cell(|l| l.p99_us),
            lat_cell(|l| l.p999_us),
            if first {
                format!("{:.0}", p.generator.cpu_busy.unwrap_or(0.0) * 100.0)
            } else {
                String::new()
            },
            if first {
                late.to_string()
            } else {
                String::new()
            },
            if first {
                format!("{:.0}", p.sink.cpu_busy.unwrap_or(0.0) * 100.0)
            } else {
                String::new()
            },
            counted.join(", "),
        ]);
    }
}

/// The point's row (all classes, or its only class) and, with several classes, a
/// row per class.
fn class_rows(p: &napilab_core::PointResult) -> Vec<Row<'_>> {
    let mut rows: Vec<Row<'_>> = Vec::new();
    let counted = |classes: &[&napilab_core::ClassResult]| {
        let mut v: Vec<String> = Vec::new();
        for cl in classes {
            for (k, n) in &cl.loss_counters {
                let s = format!("{k}={n}");
                if !v.contains(&s) {
                    v.push(s);
                }
            }
        }
        v
    };
    let all: Vec<&napilab_core::ClassResult> = p.classes.iter().collect();
    let single = p.classes.len() == 1;
    rows.push((
        if single {
            p.classes[0].name.clone()
        } else {
            "all".into()
        },
        p.delivered_pps(),
        p.loss_ratio(),
        if single {
            p.classes[0].latency.as_ref()
        } else {
            None
        },
        counted(&all),
    ));
    if !single {
        for cl in &p.classes {
            let loss = if cl.sent == 0 {
                0.0
            } else {
                cl.sent.saturating_sub(cl.received) as f64 / cl.sent as f64
            };
            let delivered = if p.duration_s > 0.0 {
                cl.received as f64 / p.duration_s
            } else {
                0.0
            };
            rows.push((
                cl.name.clone(),
                delivered,
                loss,
                cl.latency.as_ref(),
                Vec::new(),
            ));
        }
    }
    rows
}

/// The many-napi topology's NAPI measurements; empty for other runs.
fn many_napi_table(r: &RunRecord) -> String {
    use napilab_report::many_napi_page;
    let rows = many_napi_page::rows(r);
    if rows.is_empty() {
        return String::new();
    }
    let mut t = crate::render::table(many_napi_page::HEADER.to_vec());
    for row in rows {
        t.add_row(row);
    }
    format!("many NAPI instances (DUT CPU: NET_RX softirq of the host + NAPI kthreads; brackets: polled instances, most of one kthread)\n{t}\n")
}

/// The maxima with their intervals and the verdicts between configurations.
fn maxima_table(r: &RunRecord) -> String {
    let rows = comparison::maxima(r);
    if rows.is_empty() {
        return String::new();
    }
    let level = comparison::level_of(r);
    let mut m = crate::render::table(vec![
        "configuration".to_string(),
        "goal (loss)".into(),
        "max kpps".into(),
        format!("{:.0}% interval", level * 100.0),
        "repeats".into(),
        "trials (disturbed)".into(),
        "w/o disturbed".into(),
        "stopped".into(),
    ]);
    for x in &rows {
        m.add_row(vec![
            x.configuration.clone(),
            format!("{} ({})", x.goal, x.loss_ratio),
            if x.estimate.values.is_empty() {
                // Every search stopped (time limit, interrupt) before a load passed
                // with enough trial time: no conditional throughput, not 0.
                "no answer".into()
            } else {
                kpps(x.estimate.mean)
            },
            x.estimate.interval.as_ref().map_or("-".into(), |ci| {
                format!("{} - {}", kpps(ci.low), kpps(ci.high))
            }),
            x.estimate.values.len().to_string(),
            format!("{} ({})", x.trials, x.disturbed_trials),
            x.undisturbed_mean.map_or("-".into(), kpps),
            x.stopped.clone(),
        ]);
    }
    let mut out = String::new();
    if rows.iter().any(|x| x.method == "mlrsearch") {
        out.push_str("maximum throughput (MLRsearch: conditional throughput per goal, mean over the search's repeats, Student-t interval; a trial is disturbed when steal, other processes or a stalled generator took from it)\n");
    } else {
        out.push_str("maximum throughput (RFC 2544 bisection; a load passes when loss <= threshold and the generator offered >= 99% of it)\n");
    }
    out.push_str(&format!("{m}\n"));
    // What the disturbed trials were taken out by, per configuration.
    for c in &r.configurations {
        let Some(max) = c.max_throughput.as_ref() else {
            continue;
        };
        let by = napilab_core::disturbed_by(max.trials.iter().map(|t| &t.disturbance));
        if by.is_empty() {
            continue;
        }
        let kinds: Vec<String> = by
            .iter()
            .map(|(k, n)| format!("{} {n}", k.describe()))
            .collect();
        let disturbed = max
            .trials
            .iter()
            .filter(|t| t.disturbance.disturbed)
            .count();
        out.push_str(&format!(
            "  {}: {disturbed} of {} trials disturbed, by {}\n",
            c.name,
            max.trials.len(),
            kinds.join(", ")
        ));
    }
    out.push_str(&trial_speed_lines(r));
    // Where each search's range came from, and who set an answer the DUT did not.
    for c in &r.configurations {
        if let Some(range) = c.max_throughput.as_ref().and_then(|m| m.range.as_ref()) {
            out.push_str(&format!(
                "  {}: searched {} - {} ({}){}\n",
                c.name,
                kpps(range.min_pps),
                kpps(range.max_pps),
                range.detail,
                range
                    .limited_by
                    .as_ref()
                    .map_or(String::new(), |by| format!("; {by}"))
            ));
        }
    }
    let pairs = comparison::configuration_differences(r);
    if !pairs.is_empty() {
        let mut t = crate::render::table(vec!["metric", "A", "B", "B - A", "p", "verdict"]);
        for p in &pairs {
            t.add_row(vec![
                p.metric.clone(),
                p.a.clone(),
                p.b.clone(),
                format!("{:+.1}%", p.difference.relative * 100.0),
                p.difference
                    .p_value
                    .map_or("-".into(), |v| format!("{v:.3}")),
                p.difference.verdict.clone(),
            ]);
        }
        out.push_str(&format!(
            "differences between configurations (Welch's t-test at {:.0}%)\n{t}\n",
            level * 100.0
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use napilab_core::{Disturbance, DisturbanceKind, HostSpeed, RunKind, TrialRecord};
    use napilab_report::synthetic::SyntheticRun;

    #[test]
    fn the_host_speed_line_gives_each_cpus_median_slowdown_at_start_and_end() {
        let speed = |when: &str, cpu: u32, ns: Vec<f64>| HostSpeed {
            when: when.into(),
            cpu,
            sample_ms: 200.0,
            ns_per_unit: ns,
        };
        let line = super::host_speed_line(&[
            speed("run start", 0, vec![100.0, 150.0, 200.0]),
            speed("run start", 1, vec![100.0, 100.0, 120.0]),
            speed("run end", 0, vec![]),
        ]);
        assert!(
            line.ends_with("run start CPU 0 1.50x, CPU 1 1.00x; run end CPU 0 no sample\n"),
            "{line}"
        );
        assert_eq!(super::host_speed_line(&[]), "");
    }

    #[test]
    fn the_summary_says_what_took_the_disturbed_trials_out() {
        let mut searched = SyntheticRun::new(RunKind::Lab);
        searched.search_repeats = 3;
        let mut run = searched.build();
        let quiet = super::summary(&run, false);
        assert!(!quiet.contains("trials disturbed"), "{quiet}");
        let name = run.configurations[0].name.clone();
        let max = run.configurations[0]
            .max_throughput
            .as_mut()
            .expect("the synthetic run has a maximum");
        let trial = |kinds: Vec<DisturbanceKind>| TrialRecord {
            disturbance: Disturbance {
                disturbed: !kinds.is_empty(),
                marked_by: kinds,
                ..Disturbance::default()
            },
            ..TrialRecord::default()
        };
        max.trials = vec![
            trial(vec![DisturbanceKind::GeneratorLate]),
            trial(vec![]),
            trial(vec![DisturbanceKind::GeneratorLate, DisturbanceKind::Steal]),
        ];
        let trials = max.trials.len();
        let text = super::summary(&run, false);
        let expected =
            format!("{name}: 2 of {trials} trials disturbed, by generator late 2, steal 1");
        assert!(text.contains(&expected), "{expected} not in\n{text}");
        // The host's speed after each trial, against the fastest of the run.
        let max = run.configurations[0].max_throughput.as_mut().expect("max");
        for (t, ns) in max.trials.iter_mut().zip([100.0, 150.0, 300.0]) {
            t.disturbance.host_speed_ns = vec![(1, ns)];
        }
        let text = super::summary(&run, false);
        let expected = format!("{name}: CPUs after its trials ran a fixed piece of work at a median 1.50x the run's fastest, p90 3.00x (3 samples)");
        assert!(text.contains(&expected), "{expected} not in\n{text}");
    }
}
