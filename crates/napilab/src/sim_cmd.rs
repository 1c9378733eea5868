//! `napilab sim run`: the twin on a twin configuration file, as a load sweep and an
//! optional maximum-throughput search, producing the same RunRecord as the lab.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use napilab_core::{
    ConfigurationResult, CpuAccounting, HostFacts, Hz, PointResult, PointRole, RunKind, RunRecord,
    RUN_SCHEMA,
};
use napilab_sim::{max_throughput, try_run, Profile, SimConfig, SimResult};

#[derive(clap::Args)]
pub struct SimArgs {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(clap::Subcommand)]
enum SimCommand {
    /// Run the twin on a configuration file (see crates/napilab-sim/scenarios/ and
    /// docs/sim.md): one point per offered load, run in parallel across CPUs.
    Run(RunArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Twin configuration (TOML).
    config: PathBuf,
    /// Platform profile: a shipped name (router-e3-1230-ixgbe, ap-cortex-a72-bcmgenet)
    /// or a TOML file.
    #[arg(long)]
    profile: String,
    /// Seed of the random traffic; the same seed gives the same result.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Offered loads in packets per second, comma-separated, with k/M suffixes
    /// (e.g. 0.2M,0.7M,1.5M); default: the configuration's traffic.rate_pps.
    #[arg(long, value_delimiter = ',', value_parser = parse_rate)]
    loads: Vec<f64>,
    /// Also search the maximum throughput: the highest load with loss <= --loss.
    #[arg(long)]
    max_search: bool,
    /// Loss threshold of the search, as a fraction.
    #[arg(long, default_value_t = 0.001)]
    loss: f64,
    /// Print the RunRecord as JSON.
    #[arg(long)]
    json: bool,
    /// Results store; the report goes to results/<run id>/ beside it.
    #[arg(long, value_name = "PATH", default_value = "results/napilab.db")]
    db: PathBuf,
    /// Do not write the report and do not store the run.
    #[arg(long)]
    no_report: bool,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let (num, scale) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1e3),
        Some('M' | 'm') => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v * scale),
        _ => Err(format!(
            "'{s}' is not a positive rate (e.g. 250000, 250k, 1.5M)"
        )),
    }
}

pub fn run(args: SimArgs) -> Result<()> {
    match args.command {
        SimCommand::Run(a) => run_twin(&a),
    }
}

fn load_profile(name: &str) -> Result<Profile> {
    let path = Path::new(name);
    if path.exists() {
        return Profile::from_file(path).map_err(|e| anyhow::anyhow!("{e}"));
    }
    Profile::builtin(name).map_err(|e| {
        anyhow::anyhow!("{e}: name a shipped profile (router-e3-1230-ixgbe, ap-cortex-a72-bcmgenet) or a profile file")
    })
}

/// Runs `configs` on the twin, spread over the machine's CPUs; results keep their order.
fn run_parallel(configs: &[SimConfig], profile: &Profile, seed: u64) -> Result<Vec<SimResult>> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = configs.len().div_ceil(workers).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|c| try_run(c, profile, seed))
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        let mut results = Vec::with_capacity(configs.len());
        for handle in handles {
            let part = handle
                .join()
                .map_err(|_| anyhow::anyhow!("a twin worker thread panicked"))?
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            results.extend(part);
        }
        Ok(results)
    })
}

fn run_twin(args: &RunArgs) -> Result<()> {
    let config = SimConfig::from_file(&args.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let profile = load_profile(&args.profile)?;
    if !(0.0..1.0).contains(&args.loss) {
        bail!(
            "--loss {} must be a fraction between 0 and 1 (e.g. 0.001)",
            args.loss
        );
    }
    let started = unix_ms();
    let loads = if args.loads.is_empty() {
        vec![config.traffic.rate_pps]
    } else {
        args.loads.clone()
    };
    let configs: Vec<SimConfig> = loads
        .iter()
        .map(|pps| {
            let mut c = config.clone();
            c.traffic.rate_pps = *pps;
            c
        })
        .collect();
    let results = run_parallel(&configs, &profile, args.seed)?;
    let mut points: Vec<PointResult> = results
        .iter()
        .zip(&loads)
        .map(|(r, pps)| r.to_point(PointRole::Sweep, *pps, 0))
        .collect();
    let mut host = results
        .first()
        .map(|r| r.observation.host.clone())
        .unwrap_or_else(|| HostFacts {
            cpus: (0..config.host.cpus).collect(),
            hz: Hz {
                value: Some(config.host.hz),
                how: "config".into(),
            },
            accounting: CpuAccounting::TickSampled,
            user_hz: 100,
        });
    if host.cpus.is_empty() {
        // The twin's Observation names CPUs per interval only; the run lists them all.
        host.cpus = (0..config.host.cpus).collect();
    }
    let max = if args.max_search {
        let high = loads
            .iter()
            .copied()
            .fold(config.traffic.rate_pps, f64::max)
            * 2.0;
        let (max, probes) =
            max_throughput(&config, &profile, args.seed, args.loss, 0.0, high, 0.01);
        let offset = points.len();
        points.extend(probes);
        Some(napilab_core::MaxThroughput {
            probes: max.probes.iter().map(|i| i + offset).collect(),
            ..max
        })
    } else {
        None
    };
    let scenario_toml = std::fs::read_to_string(&args.config)
        .with_context(|| format!("cannot read {}", args.config.display()))?;
    let name = if config.name.is_empty() {
        args.config
            .file_stem()
            .map_or("twin".into(), |s| s.to_string_lossy().into_owned())
    } else {
        config.name.clone()
    };
    let record = RunRecord {
        schema: RUN_SCHEMA.into(),
        run_id: napilab_core::experiment::run_id(started, std::process::id()),
        kind: RunKind::Model,
        scenario_name: name.clone(),
        scenario_toml,
        started_unix_ms: started,
        finished_unix_ms: unix_ms(),
        host,
        napilab_version: env!("CARGO_PKG_VERSION").into(),
        interrupted: false,
        configurations: vec![ConfigurationResult {
            name: format!("{name} on {}", args.profile),
            settings: vec![
                ("profile".into(), args.profile.clone()),
                ("seed".into(), args.seed.to_string()),
            ],
            findings: points
                .iter()
                .filter_map(|p| p.observation.as_ref())
                .flat_map(|o| o.findings.clone())
                .fold(Vec::new(), |mut all, f| {
                    if !all
                        .iter()
                        .any(|x: &napilab_core::Finding| x.rule == f.rule && x.subject == f.subject)
                    {
                        all.push(f);
                    }
                    all
                }),
            points,
            max_throughput: max,
        }],
        notices: Vec::new(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        print!("{}", summary(&record, &results));
    }
    if !args.no_report {
        // The same outputs as a lab run: report.html, points.csv, run.json, the store.
        let dir = args
            .db
            .parent()
            .unwrap_or(Path::new("."))
            .join(&record.run_id);
        let outputs = napilab_report::write_outputs(&record, &dir, &args.db)?;
        eprintln!(
            "report: {} (points: {}, record: {}, stored in {})",
            outputs.html.display(),
            outputs.csv.display(),
            outputs.json.display(),
            outputs.db.display()
        );
    }
    Ok(())
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0))
}

fn summary(record: &RunRecord, sweep: &[SimResult]) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "offered pkt/s",
        "delivered pkt/s",
        "loss %",
        "latency p50/p99 us",
        "cpu busy (true)",
        "softirq true / tick",
        "RX IRQs/s",
        "pkt/poll",
    ]);
    let Some(config) = record.configurations.first() else {
        return String::new();
    };
    for (point, result) in config.points.iter().zip(sweep) {
        let lat = point
            .classes
            .iter()
            .filter_map(|c| {
                c.latency
                    .as_ref()
                    .map(|l| format!("{}: {:.1}/{:.1}", c.name, l.p50_us, l.p99_us))
            })
            .collect::<Vec<_>>()
            .join(" ");
        let cpus = &result.model.totals.cpus;
        let per_cpu = |f: fn(&napilab_sim::CpuReport) -> String| {
            cpus.iter().map(f).collect::<Vec<_>>().join(" ")
        };
        t.add_row(vec![
            format!("{:.0}", point.offered_pps),
            format!("{:.0}", point.delivered_pps()),
            format!("{:.3}", point.loss_ratio() * 100.0),
            lat,
            per_cpu(|c| format!("cpu{} {:.0}%", c.cpu, c.busy * 100.0)),
            per_cpu(|c| {
                format!(
                    "{:.0}% / {:.0}%",
                    (c.softirq_inline + c.ksoftirqd) * 100.0,
                    c.tick_softirq * 100.0
                )
            }),
            per_cpu(|c| format!("{:.0}", c.rx_irqs_per_s)),
            per_cpu(|c| format!("{:.1}", c.packets_per_poll)),
        ]);
    }
    let mut out = format!(
        "twin run {} ({}), {} point(s); every figure is source `model`, the tick column is what /proc/stat would show\n{t}\n",
        record.run_id,
        config.name,
        sweep.len()
    );
    if let Some(max) = &config.max_throughput {
        out.push_str(&format!(
            "maximum throughput with loss <= {:.3}%: {:.0} pkt/s ({}, {} probes)\n",
            max.loss_threshold * 100.0,
            max.pps,
            max.stopped,
            max.probes.len()
        ));
    }
    out
}
