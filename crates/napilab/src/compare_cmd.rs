//! `napilab compare`: two stored runs (or two configurations of one run) side by side,
//! each number with its interval, the difference and whether it is significant.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use napilab_report::comparison::{compare, Comparison, Estimate, HostComparison};

use crate::report_cmd::load;

#[derive(clap::Args)]
pub struct CompareArgs {
    /// Run A: a run id from the results store, or a run.json file.
    #[arg(value_name = "RUN_A")]
    a: String,
    /// Run B (default: run A again, to compare two of its configurations with
    /// --configs).
    #[arg(value_name = "RUN_B")]
    b: Option<String>,
    /// Compare configuration X of A with configuration Y of B (`X:Y`; repeatable).
    /// Default: every configuration name both runs have.
    #[arg(long = "configs", value_name = "X:Y")]
    configs: Vec<String>,
    /// The results store (SQLite).
    #[arg(long, value_name = "PATH", default_value = "results/napilab.db")]
    db: PathBuf,
    /// Also write an HTML page with the table and the paired plots.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Print the comparison as JSON.
    #[arg(long)]
    json: bool,
    /// Judge differences even when the runs ran on different hosts (CPU, microcode,
    /// kernel, hypervisor...). Without it such a difference is marked `different hosts`
    /// instead of `significant`: the host may explain it.
    #[arg(long)]
    across_hosts: bool,
}

pub fn run(args: CompareArgs) -> Result<()> {
    let a = load(&args.a, &args.db)?;
    let b = match &args.b {
        Some(b) => load(b, &args.db)?,
        None => a.clone(),
    };
    let mut pairs = Vec::new();
    for c in &args.configs {
        let Some((x, y)) = c.split_once(':') else {
            bail!("--configs {c:?}: write it as X:Y (configuration X of run A against Y of run B)");
        };
        for (name, run, side) in [(x, &a, "A"), (y, &b, "B")] {
            if !run.configurations.iter().any(|c| c.name == name) {
                let names: Vec<&str> = run.configurations.iter().map(|c| c.name.as_str()).collect();
                bail!(
                    "--configs {c:?}: run {side} ({}) has no configuration {name:?}; it has: {}",
                    run.run_id,
                    names.join(", ")
                );
            }
        }
        pairs.push((x.to_string(), y.to_string()));
    }
    if args.b.is_none() && pairs.is_empty() {
        bail!("one run compared with itself says nothing: name run B, or pick two of its configurations with --configs X:Y");
    }
    let c = compare(&a, &b, &pairs, args.across_hosts);
    if c.rows.is_empty() {
        bail!(
            "nothing to compare: the runs share no configuration with a maximum or a latency \
             at the same load (use --configs X:Y to pair configurations of different names)"
        );
    }
    if let Some(path) = &args.html {
        write_html(&c, path)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        print!("{}", text(&c));
        if let Some(path) = &args.html {
            println!("page: {}", path.display());
        }
    }
    Ok(())
}

fn write_html(c: &Comparison, path: &Path) -> Result<()> {
    let html = napilab_report::comparison_html(c)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, html).with_context(|| format!("cannot write {}", path.display()))
}

fn value(e: &Estimate) -> String {
    match &e.interval {
        Some(ci) => format!("{:.1} [{:.1}, {:.1}]", e.mean, ci.low, ci.high),
        None => format!("{:.1}", e.mean),
    }
}

/// Where A and B ran, and whether that allows a verdict.
fn hosts_text(h: &HostComparison) -> String {
    let sides = format!("  A: {}\n  B: {}\n", h.a, h.b);
    match h.status.as_str() {
        "same" => format!(
            "hosts: the same (CPU, microcode, mitigations, kernel, virtualization)\n{sides}"
        ),
        "different" => {
            let mut out = format!("hosts: DIFFERENT\n{sides}");
            for d in &h.differences {
                out.push_str(&format!("  differs: {}: A {} / B {}\n", d.field, d.a, d.b));
            }
            out.push_str(if h.across_hosts {
                "  verdicts given anyway (--across-hosts): the host may explain part of any difference\n"
            } else {
                "  a difference that would be significant is marked \"different hosts\": the host may explain it (--across-hosts judges it anyway)\n"
            });
            out
        }
        _ => format!(
            "hosts: unknown whether both ran on one host (verdicts assume they did)\n{sides}"
        ),
    }
}

fn text(c: &Comparison) -> String {
    let mut t = crate::render::table(vec![
        "metric".to_string(),
        "A".into(),
        "A value [interval]".into(),
        "B".into(),
        "B value [interval]".into(),
        "B - A".into(),
        "p".into(),
        "verdict".into(),
    ]);
    for r in &c.rows {
        t.add_row(vec![
            r.metric.clone(),
            r.a.clone(),
            value(&r.a_estimate),
            r.b.clone(),
            value(&r.b_estimate),
            format!("{:+.1}%", r.difference.relative * 100.0),
            r.difference
                .p_value
                .map_or("-".into(), |p| format!("{p:.3}")),
            r.difference.verdict.clone(),
        ]);
    }
    let mut out = format!(
        "A = {}, B = {}; intervals at {:.0}% (Student t over repeats; order statistics within one point for a percentile measured once); verdict: Welch's t-test\n{}{t}\n",
        c.a_run,
        c.b_run,
        c.level * 100.0,
        hosts_text(&c.hosts)
    );
    if !c.unmatched.is_empty() {
        out.push_str(&format!(
            "not compared (no counterpart): {}\n",
            c.unmatched.join(", ")
        ));
    }
    out
}
