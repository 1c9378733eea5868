//! `napilab tune`: plan, apply, revert, show, profiles (docs/tune.md).

use std::path::PathBuf;

use anyhow::{Context, Result};
use napilab_tune::journal::journal_dir;
use napilab_tune::plan::Plan;
use napilab_tune::profile::{self, Params};

#[derive(clap::Args)]
pub struct TuneArgs {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(clap::Args)]
struct ProfileArgs {
    /// A shipped profile name (see `napilab tune profiles`) or a TOML file.
    profile: String,
    /// Device(s) the profile applies to (repeatable, or comma-separated).
    #[arg(long = "dev", value_name = "DEV")]
    dev: Vec<String>,
    /// CPUs for the profile (e.g. 0,1 or 2-3; order matters for lists like dual-core).
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Other profile parameters, NAME=VALUE (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    param: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct PlanArgs {
    #[command(flatten)]
    args: ProfileArgs,
    /// Also predict the profile's effect on this host (root, BPF): observe it with the
    /// trace tier, fit a twin to it and print current -> predicted per CPU, with
    /// intervals, what the prediction assumed, or why it refuses (docs/tune.md).
    #[arg(long)]
    predict: bool,
    /// With --predict: how long to observe the host first.
    #[arg(long = "for", value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration, requires = "predict")]
    duration: std::time::Duration,
}

#[derive(clap::Subcommand)]
enum Verb {
    /// Print exactly what the profile would change (from, to, why); changes nothing.
    /// With --predict, also what it would do to this host's packet CPU.
    Plan(PlanArgs),
    /// Predict the profile from a recorded Observation (`napilab observe --trace --json`)
    /// or a traced lab point (a run.json and --point): the twin fitted to the recording,
    /// current -> predicted as `plan --predict` prints it. Reads and changes nothing on
    /// this host; exits non-zero when the twin refuses, saying why.
    Predict {
        #[command(flatten)]
        args: ProfileArgs,
        /// The recording: an Observation's JSON, or a lab run's run.json.
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
        /// With a run.json: the configuration, and after a colon which of its sweep points
        /// (from 0; default 0), e.g. `one-cpu/softirq:0`.
        #[arg(long, value_name = "CONFIGURATION[:N]")]
        point: Option<String>,
    },
    /// Make the changes, journalling each one before it is made.
    Apply {
        #[command(flatten)]
        args: ProfileArgs,
        /// Journal directory (default $NAPILAB_JOURNAL_DIR, else /var/lib/napilab/journal).
        #[arg(long, value_name = "DIR")]
        journal_dir: Option<PathBuf>,
        /// Predict first (as `plan --predict`) and keep the prediction in the journal
        /// for `napilab tune verify`.
        #[arg(long)]
        predict: bool,
        /// With --predict: how long to observe the host first.
        #[arg(long = "for", value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration, requires = "predict")]
        duration: std::time::Duration,
    },
    /// Observe again and print the prediction kept by `apply --predict` against what is
    /// measured now, with the error of each figure.
    Verify {
        /// A journal file, or its name in the journal directory (default: the newest
        /// one in force here).
        journal: Option<String>,
        #[arg(long, value_name = "DIR")]
        journal_dir: Option<PathBuf>,
        /// How long to observe.
        #[arg(long = "for", value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
        duration: std::time::Duration,
        #[arg(long)]
        json: bool,
    },
    /// Restore the old values of a journal (default: the newest one in force here).
    Revert {
        /// A journal file, or its name in the journal directory.
        journal: Option<String>,
        #[arg(long, value_name = "DIR")]
        journal_dir: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// List the journals and their state.
    Show {
        #[arg(long, value_name = "DIR")]
        journal_dir: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// List the shipped profiles and the studies they come from.
    Profiles {
        #[arg(long)]
        json: bool,
    },
}

fn params(args: &ProfileArgs) -> Result<Params> {
    Params::from_args(&args.dev, args.cpus.as_deref(), &args.param).map_err(anyhow::Error::msg)
}

/// Runs a verb; with `--json`, a failure is also printed as a JSON object on stdout.
pub fn run(args: TuneArgs) -> Result<()> {
    let json = match &args.verb {
        Verb::Plan(PlanArgs { args: a, .. })
        | Verb::Apply { args: a, .. }
        | Verb::Predict { args: a, .. } => a.json,
        Verb::Revert { json, .. }
        | Verb::Verify { json, .. }
        | Verb::Show { json, .. }
        | Verb::Profiles { json } => *json,
    };
    let result = run_verb(args);
    // With --predict the plan's refusal is already part of the printed JSON.
    if let (true, Err(e)) = (json, &result) {
        if e.is::<crate::tune_predict::Refused>() {
            return result;
        }
        let out =
            serde_json::json!({ "schema": "napilab.tune-error/1", "error": format!("{e:#}") });
        println!("{out}");
    }
    result
}

fn run_verb(args: TuneArgs) -> Result<()> {
    match args.verb {
        Verb::Plan(PlanArgs {
            args: a,
            predict: true,
            duration,
        }) => {
            return crate::tune_predict::plan_and_predict(
                &a.profile,
                &params(&a)?,
                duration,
                a.json,
                render_plan,
            )
        }
        Verb::Plan(PlanArgs { args: a, .. }) => {
            let mut ctx = napilab_tune::host_ctx();
            let plan = napilab_tune::plan_profile(&mut ctx, &a.profile, &params(&a)?)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&plan)?);
            } else {
                print!("{}", render_plan(&plan));
            }
        }
        Verb::Predict {
            args: a,
            from,
            point,
        } => crate::tune_predict::predict_recorded(
            &a.profile,
            &params(&a)?,
            &from,
            point.as_deref(),
            a.json,
        )?,
        Verb::Apply {
            args: a,
            journal_dir: dir,
            predict,
            duration,
        } => apply_verb(&a, dir.as_deref(), predict.then_some(duration))?,
        Verb::Revert {
            journal,
            journal_dir: dir,
            json,
        } => {
            let dir = journal_dir(dir.as_deref());
            let path = napilab_tune::find_journal(&dir, journal.as_deref())?;
            let mut ctx = napilab_tune::host_ctx();
            let report = napilab_tune::revert(&mut ctx, &path)
                .with_context(|| format!("reverting {}", path.display()))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("journal {} (profile {})", path.display(), report.profile);
                if let Some(m) = &report.message {
                    println!("{m}");
                }
                for r in &report.restored {
                    let flag = if r.unconfirmed {
                        "  (entry had no done mark: restored anyway)"
                    } else {
                        ""
                    };
                    println!("  restored {} = {}{flag}", r.key, r.to);
                }
                for (k, why) in &report.skipped {
                    println!("  nothing to restore for {k}: {why}");
                }
            }
        }
        Verb::Verify {
            journal,
            journal_dir: dir,
            duration,
            json,
        } => {
            let dir = journal_dir(dir.as_deref());
            let path = napilab_tune::find_journal(&dir, journal.as_deref())?;
            crate::tune_predict::verify(&path, duration, json)?;
        }
        Verb::Show {
            journal_dir: dir,
            json,
        } => {
            let dir = journal_dir(dir.as_deref());
            let list = napilab_tune::show(&dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() {
                println!("no journals in {}", dir.display());
            } else {
                for j in &list {
                    let params: Vec<String> = j
                        .params
                        .0
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.join(",")))
                        .collect();
                    println!(
                        "{}  {:<20} {:<20} {}/{} done  net:[{}]  {}",
                        j.path.display(),
                        j.profile,
                        format!("{:?}", j.status).to_lowercase(),
                        j.done,
                        j.changes,
                        j.netns,
                        params.join(" ")
                    );
                }
            }
        }
        Verb::Profiles { json } => {
            let mut all = Vec::new();
            for (name, text) in profile::SHIPPED {
                all.push(profile::parse(text, name)?);
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                for p in &all {
                    let params: Vec<String> = p
                        .params
                        .iter()
                        .map(|(k, s)| {
                            if s.required {
                                format!("--{k}")
                            } else {
                                format!("[--{k}]")
                            }
                        })
                        .collect();
                    println!("{:<20} {}  {}", p.name, params.join(" "), p.summary);
                    println!("{:<20} study: {}", "", p.study);
                }
            }
        }
    }
    Ok(())
}

/// `tune apply`: predicted first when `predict` gives how long to observe, then
/// applied with its journal, the prediction kept in it.
fn apply_verb(
    a: &ProfileArgs,
    dir: Option<&std::path::Path>,
    predict: Option<std::time::Duration>,
) -> Result<()> {
    let mut ctx = napilab_tune::host_ctx();
    let plan = napilab_tune::plan_profile(&mut ctx, &a.profile, &params(a)?)?;
    // Predicted before anything changes, kept once the journal exists.
    let prediction = match predict {
        Some(duration) => Some(crate::tune_predict::predict_here(
            &a.profile,
            &params(a)?,
            duration,
        )?),
        None => None,
    };
    let dir = journal_dir(dir);
    let report = napilab_tune::apply(&mut ctx, plan, &dir)?;
    let kept = match (&prediction, &report.journal) {
        (Some(Ok(p)), Some(j)) => {
            napilab_tune::journal::keep_prediction(j, serde_json::to_value(p)?)
                .with_context(|| format!("keeping the prediction in {}", j.display()))?;
            true
        }
        _ => false,
    };
    if a.json {
        let mut v = serde_json::to_value(&report)?;
        if let Some(p) = &prediction {
            v["prediction"] = match p {
                Ok(p) => serde_json::to_value(p)?,
                Err(_) => serde_json::Value::Null,
            };
            v["refusal"] = p
                .as_ref()
                .err()
                .map_or(serde_json::Value::Null, |r| r.clone().into());
            v["prediction_kept"] = kept.into();
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        if let Some(p) = &prediction {
            match p {
                Ok(p) => println!("{}", crate::tune_predict::render(p)),
                Err(r) => println!("prediction refused: {r}\n"),
            }
        }
        if kept {
            println!("prediction kept in the journal: check it with napilab tune verify");
        }
        let mut out = render_plan(&report.plan);
        match &report.journal {
            None => out.push_str("\nnothing to change: no journal written\n"),
            Some(j) => {
                out.push_str(&format!(
                    "\napplied {} change(s); journal {}\nundo with: napilab tune revert {}\n",
                    report.applied.len(),
                    j.display(),
                    j.display()
                ));
                for k in &report.already {
                    out.push_str(&format!("  already as wanted at apply time: {k}\n"));
                }
            }
        }
        print!("{out}");
    }
    Ok(())
}

fn render_plan(plan: &Plan) -> String {
    let mut out = format!(
        "profile {} ({}): {}\nstudy: {}\n",
        plan.profile, plan.source, plan.summary, plan.study
    );
    let params: Vec<String> = plan
        .params
        .0
        .iter()
        .map(|(k, v)| format!("{k}={}", v.join(",")))
        .collect();
    out.push_str(&format!("parameters: {}\n", params.join(" ")));
    out.push_str(&format!("\nchanges ({}):\n", plan.changes.len()));
    for c in &plan.changes {
        let from = c
            .from
            .as_ref()
            .map_or_else(|| "(read at apply)".to_string(), ToString::to_string);
        let opt = if c.required { "" } else { " [optional]" };
        out.push_str(&format!(
            "  {}: {from} -> {}{opt}\n      why: {}\n",
            c.key, c.to, c.why
        ));
        if let Some(n) = &c.note {
            out.push_str(&format!("      note: {n}\n"));
        }
    }
    if !plan.unchanged.is_empty() {
        out.push_str(&format!("already as wanted ({}):\n", plan.unchanged.len()));
        for c in &plan.unchanged {
            out.push_str(&format!("  {} = {}\n", c.key, c.to));
        }
    }
    if !plan.skipped.is_empty() {
        out.push_str(&format!("skipped, optional ({}):\n", plan.skipped.len()));
        for s in &plan.skipped {
            out.push_str(&format!("  {}: {}\n", s.setting, s.reason));
        }
    }
    if let Some(app) = &plan.app {
        out.push_str(&format!(
            "for the application (napilab does not set these): EPIOCSPARAMS busy_poll_usecs={} busy_poll_budget={} prefer_busy_poll={}, {} epoll_wait; {}\n  example: cargo run -p napilab-tune --example epoll_busy_poll -- --help\n",
            app.busy_poll_usecs,
            app.busy_poll_budget,
            u8::from(app.prefer_busy_poll),
            if app.blocking_epoll { "blocking" } else { "non-blocking (timeout 0)" },
            app.note
        ));
    }
    out
}
