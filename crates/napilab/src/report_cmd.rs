//! `napilab report`: (re)render a stored run or a run.json file as HTML, CSV and JSON, or
//! list the stored runs.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use napilab_core::RunRecord;
use napilab_report::{write_outputs, Store};

#[derive(clap::Args)]
pub struct ReportArgs {
    /// A run id from the results store, or a run.json file.
    #[arg(value_name = "RUN_ID|run.json", required_unless_present = "list")]
    run: Option<String>,
    /// The results store (SQLite).
    #[arg(long, value_name = "PATH", default_value = "results/napilab.db")]
    db: PathBuf,
    /// Where to write report.html, points.csv and run.json [default: results/<run id>].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// List the stored runs instead of rendering one.
    #[arg(long, conflicts_with = "run")]
    list: bool,
    /// Print the result (file paths, or the list of runs) as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ReportArgs) -> Result<()> {
    if args.list {
        return list(&args.db, args.json);
    }
    let Some(what) = args.run.as_deref() else {
        bail!("name a run id or a run.json file, or pass --list to see the stored runs");
    };
    let record = load(what, &args.db)?;
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("results").join(&record.run_id));
    let outputs = write_outputs(&record, &dir, &args.db)
        .with_context(|| format!("cannot write the report of run {}", record.run_id))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outputs)?);
    } else {
        println!("run {} ({})", record.run_id, record.scenario_name);
        println!("  report: {}", outputs.html.display());
        println!("  points: {}", outputs.csv.display());
        println!("  record: {}", outputs.json.display());
        println!("  openmetrics: {}", outputs.openmetrics.display());
        println!("  stored: {}", outputs.db.display());
    }
    Ok(())
}

fn looks_like_file(what: &str) -> bool {
    what.ends_with(".json") || what.contains('/') || Path::new(what).is_file()
}

pub(crate) fn load(what: &str, db: &Path) -> Result<RunRecord> {
    if looks_like_file(what) {
        let text = std::fs::read_to_string(what)
            .with_context(|| format!("cannot read the run file {what}: check the path"))?;
        let record: RunRecord = serde_json::from_str(&text).with_context(|| {
            format!("{what} is not a napilab run record (the run.json a lab or sim run writes)")
        })?;
        if !record.schema.starts_with("napilab.run/") {
            bail!(
                "{what} has schema {:?}, not a napilab run record (napilab.run/1)",
                record.schema
            );
        }
        return Ok(record);
    }
    if !db.exists() {
        bail!(
            "no results store at {}: run `napilab lab run` or `napilab sim run` first, pass \
             --db PATH, or give a run.json file",
            db.display()
        );
    }
    Store::open(db)?.load_run(what)
}

fn list(db: &Path, json: bool) -> Result<()> {
    if !db.exists() {
        bail!(
            "no results store at {}: run `napilab lab run` or `napilab sim run` first, or pass --db PATH",
            db.display()
        );
    }
    let runs = Store::open(db)?.list_runs()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(());
    }
    if runs.is_empty() {
        println!("no runs stored in {}", db.display());
        return Ok(());
    }
    println!(
        "{:<22} {:<6} {:<28} {:>7} {:>7}  started",
        "run id", "kind", "scenario", "configs", "points"
    );
    for r in runs {
        println!(
            "{:<22} {:<6} {:<28} {:>7} {:>7}  {}{}",
            r.run_id,
            r.kind,
            r.scenario_name,
            r.configurations,
            r.points,
            napilab_report::utc(r.started_unix_ms),
            if r.interrupted { " (interrupted)" } else { "" }
        );
    }
    Ok(())
}
