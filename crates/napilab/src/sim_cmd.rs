//! `napilab sim run`: the twin on a lab scenario (every configuration, its sweep and its
//! search, as the lab runs them) or on a twin configuration file (a load sweep and an
//! optional maximum-throughput search), producing the same RunRecord as the lab; and
//! `napilab sim calibrate`: a lab profile fitted from a lab run.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use napilab_core::{
    ConfigurationResult, CpuAccounting, HostFacts, Hz, PointResult, PointRole, RunKind, RunRecord,
};
use napilab_experiment::configuration;
use napilab_experiment::record::{self, RunStart};
use napilab_sim::calibrate::{self, LabProfile};
use napilab_sim::calibrate_server::{self, ServerProfile};
use napilab_sim::from_scenario::{self, InputKind, TwinPlan};
use napilab_sim::from_server_scenario;
use napilab_sim::twin_testbed::{self, provenance_pairs, run_side_by_side, TwinPackets};
use napilab_sim::{max_throughput, studies, Profile, SimConfig, SimResult};

#[derive(clap::Args)]
pub struct SimArgs {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(clap::Subcommand)]
enum SimCommand {
    /// Run the twin on a scenario (scenarios/*.toml and the studies'
    /// scenarios/studies/*.toml, docs/lab.md: every configuration with its sweep,
    /// repeats and search, as `napilab lab run` does) with a hardware profile; a twin
    /// configuration file of earlier releases is still read, with a notice naming its
    /// replacement.
    Run(RunArgs),
    /// Fit a lab profile (per-packet, per-wake-up and testbed costs, the poller's
    /// wake-up delay) on a lab run: jointly over every searched configuration (the
    /// generator- or sink-limited maxima only as "at least" constraints, every number
    /// within a physical range), with leave-one-out predictions; or, with --config,
    /// on one configuration (docs/sim.md, "Lab scenarios and the veth-lab profile"). On a
    /// server-topology run: fit the load generator's and the server's costs (the
    /// generator's CPU per request, the requests' receive, the server's cost per request
    /// and per epoll return, busy-wait's pass, the NAPI kthread's cost per run, the
    /// worker's resume after the kthread preempted it, the request path's latency and
    /// tail, this path's wake-ups against the probe's) and set the twin's maximum per
    /// mode beside the lab's (docs/sim.md, "Calibration from a server run").
    Calibrate(CalibrateArgs),
    /// Advise settings from the studies' rules, checked on the twin.
    #[command(subcommand)]
    Advise(AdviseCommand),
}

#[derive(clap::Subcommand)]
enum AdviseCommand {
    /// The ingress-QoS study's ring-budget rule (docs/studies.md#qos-7): the largest
    /// best-effort ring budget b that keeps the real-time waiting bound
    /// Tmax = b x / (1 - rho_RT) under a latency target, then a twin run of LL-WFQ at
    /// that b (RT ring budget 60, BE offered beyond the core's capacity) comparing the
    /// RT waits with Tmax (docs/sim.md, "The ingress-QoS strategies").
    RingBudget(RingBudgetArgs),
}

#[derive(clap::Args)]
struct RingBudgetArgs {
    /// RT load as a fraction of the core's capacity (rho_RT), e.g. 0.3.
    #[arg(long, value_name = "FRACTION")]
    rt_load: f64,
    /// Per-packet service time x in ns (the check then runs on a profile where only
    /// per-packet work costs time).
    #[arg(long, value_name = "NS", conflicts_with = "profile")]
    service_ns: Option<f64>,
    /// Take x from a platform profile (shipped name or file): its per-packet stage
    /// cycles (poll, IP stack, transmit, TX reclaim) at its clock; the check runs on it.
    #[arg(long)]
    profile: Option<String>,
    /// Latency target in packet times (m).
    #[arg(long, value_name = "PACKETS", conflicts_with = "target_us")]
    target_packets: Option<f64>,
    /// Latency target in microseconds (m = target / x).
    #[arg(long, value_name = "US")]
    target_us: Option<f64>,
    /// Simulated milliseconds per check run (two runs: constant-rate and Poisson RT).
    #[arg(long, default_value_t = 100.0)]
    duration_ms: f64,
    /// Seed of the check's random traffic.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Only the arithmetic, no twin check.
    #[arg(long)]
    no_check: bool,
    /// Print the advice and the check as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct CalibrateArgs {
    /// The lab run's record (results/<run id>/run.json of `napilab lab run`).
    #[arg(long, value_name = "RUN_JSON")]
    lab: PathBuf,
    /// Packet runs: fit on this one configuration only (the earlier single-configuration fit):
    /// threaded NAPI without RPS, with a maximum-throughput search whose points carry
    /// Observations (not --no-observe); the run's other threaded configurations give
    /// the generator's batch cost. Default: the joint fit over every searched
    /// configuration (docs/sim.md "The veth-lab profile and its calibration").
    #[arg(long, value_name = "NAME")]
    config: Option<String>,
    /// With --config: configurations to predict (comma-separated); default: every
    /// other searched one.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    predict: Vec<String>,
    /// Profile to start from (its assumed numbers are kept): a file or a shipped name.
    #[arg(long, default_value = "veth-lab")]
    base: String,
    /// Write the fitted profile, with its provenance, to this file.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print the fit (profile, how each number was fixed, the DUT's share at each load,
    /// the predictions) as JSON instead of the text summary.
    #[arg(long)]
    json: bool,
    /// No fit: the twin-vs-lab table that `napilab lab run` adds to a run (the shipped
    /// veth-lab profile's predictions beside the lab's figures), for a run recorded
    /// before it did or on another machine.
    #[arg(long, conflicts_with_all = ["config", "out", "predict"])]
    twin_vs_lab: bool,
}

#[derive(clap::Args)]
struct RunArgs {
    /// A scenario (docs/lab.md; scenarios/, scenarios/studies/). A file with [host]
    /// and no [topology] is a twin configuration of earlier releases (read for one more
    /// release, with a notice naming the scenario that replaces it).
    config: PathBuf,
    /// Hardware profile: a shipped name (every file of crates/napilab-sim/profiles/) or
    /// a TOML file. Default: the scenario's [twin] profile (the studies name theirs),
    /// else veth-lab, or veth-lab-server for server scenarios (its [server] table holds
    /// the server costs fitted by `napilab sim calibrate`); required for a legacy twin
    /// configuration.
    #[arg(long)]
    profile: Option<String>,
    /// Seed of the random traffic; the same seed gives the same result. Default: the
    /// scenario's traffic.seed (repeats use seed, seed + 1, ...), or 1.
    #[arg(long)]
    seed: Option<u64>,
    /// Offered loads in packets per second, comma-separated, with k/M suffixes
    /// (e.g. 0.2M,0.7M,1.5M); default: the scenario's loads, or the configuration's
    /// traffic.rate_pps.
    #[arg(long, value_delimiter = ',', value_parser = parse_rate)]
    loads: Vec<f64>,
    /// Also search the maximum throughput: the highest load with loss <= --loss (a
    /// twin configuration: the RFC 2544 bisection; a scenario: its own search_method,
    /// and it searches anyway when its measurement.search says so).
    #[arg(long)]
    max_search: bool,
    /// Loss threshold of the search, as a fraction (default: the scenario's
    /// loss_threshold, or 0.001).
    #[arg(long)]
    loss: Option<f64>,
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
        SimCommand::Run(a) => {
            let text = std::fs::read_to_string(&a.config)
                .with_context(|| format!("cannot read {}", a.config.display()))?;
            match input_kind(&text, &a.config)? {
                InputKind::Scenario => run_scenario(&a, &text),
                InputKind::LegacyTwinConfig => run_twin(&a),
            }
        }
        SimCommand::Calibrate(a) => run_calibrate(&a),
        SimCommand::Advise(AdviseCommand::RingBudget(a)) => run_advise_ring_budget(&a),
    }
}

fn run_advise_ring_budget(args: &RingBudgetArgs) -> Result<()> {
    use napilab_sim::ingress_qos;
    let (service_ns, profile) = match (args.service_ns, &args.profile) {
        (Some(x), None) => {
            if !(x > 0.0 && x.is_finite()) {
                bail!(
                    "--service-ns {x}: give the per-packet service time as a positive number of ns"
                );
            }
            (x, ingress_qos::ideal_profile(x))
        }
        (None, Some(name)) => {
            let p = load_profile(name)?.profile;
            (ingress_qos::service_ns(&p), p)
        }
        _ => bail!("give the per-packet service time: --service-ns NS or --profile NAME"),
    };
    let target_packets = match (args.target_packets, args.target_us) {
        (Some(m), None) => m,
        (None, Some(us)) => us * 1e3 / service_ns,
        _ => bail!("give the latency target: --target-packets M or --target-us US"),
    };
    if !(args.duration_ms >= 10.0 && args.duration_ms <= 10_000.0) {
        bail!(
            "--duration-ms {}: give 10 to 10000 simulated ms per check run",
            args.duration_ms
        );
    }
    let advice = ingress_qos::advise(args.rt_load, service_ns, target_packets).map_err(|e| {
        anyhow::anyhow!("{e} (--rt-load, --service-ns/--profile, --target-packets/--target-us)")
    })?;
    let checks = match (args.no_check, advice.be_budget) {
        (false, Some(b)) => {
            if !args.json {
                eprintln!(
                    "checking b = {b} on the twin ({} ms of constant-rate and of Poisson RT traffic)...",
                    args.duration_ms
                );
            }
            ingress_qos::check_be_budget(&profile, args.rt_load, b, args.duration_ms, args.seed)
        }
        _ => Vec::new(),
    };
    let tmax = advice.tmax_ns;
    let verdict = |c: &ingress_qos::BudgetCheck| {
        let t = tmax.unwrap_or(f64::NAN);
        serde_json::json!({
            "pattern": c.pattern,
            "rt_packets": c.rt_packets,
            "rt_dropped": c.rt_dropped,
            "mean_wait_ns": c.mean_wait_ns,
            "p99_wait_ns": c.p99_wait_ns,
            "max_wait_ns": c.max_wait_ns,
            "mean_within_tmax": c.mean_wait_ns <= t,
            "p99_within_tmax": c.p99_wait_ns <= t,
            "max_within_tmax": c.max_wait_ns <= t,
        })
    };
    if args.json {
        let out = serde_json::json!({
            "advice": advice,
            "profile": profile.name,
            "seed": args.seed,
            "duration_ms": args.duration_ms,
            "check": checks.iter().map(verdict).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "RT load rho_RT {:.3}, service time x {:.1} ns ({}), target m {:.2} packet times ({:.2} us)",
        advice.rt_load,
        service_ns,
        profile.name,
        target_packets,
        target_packets * service_ns / 1e3
    );
    match (advice.be_budget, tmax) {
        (Some(b), Some(t)) => println!(
            "largest BE ring budget b = {b}: Tmax = b x / (1 - rho_RT) = {:.0} ns ({:.2} packet times)",
            t,
            t / service_ns
        ),
        _ => println!("no BE ring budget meets the target"),
    }
    if let Some(n) = &advice.note {
        println!("note: {n}");
    }
    if !checks.is_empty() {
        let mut table = crate::render::table(vec![
            "RT traffic",
            "RT packets",
            "RT lost",
            "mean wait ns",
            "p99 wait ns",
            "max wait ns",
        ]);
        for c in &checks {
            table.add_row(vec![
                c.pattern.to_string(),
                c.rt_packets.to_string(),
                c.rt_dropped.to_string(),
                format!("{:.0}", c.mean_wait_ns),
                format!("{:.0}", c.p99_wait_ns),
                format!("{:.0}", c.max_wait_ns),
            ]);
        }
        println!("twin check, LL-WFQ (RT ring budget 60, BE at b, BE offered 1.2x the capacity):\n{table}");
        println!(
            "the bound holds for every packet only with constant-rate RT (max wait); with Poisson RT it holds for the mean (docs/sim.md)"
        );
    }
    Ok(())
}

fn input_kind(text: &str, path: &Path) -> Result<InputKind> {
    from_scenario::input_kind(text).map_err(|why| anyhow::anyhow!("{}: {why}", path.display()))
}

/// What `--profile` may name: every shipped profile (from the files compiled in) and
/// the profile each shipped study expects.
fn profile_help() -> String {
    let studies = studies::expected_profiles()
        .into_iter()
        .map(|(study, profile)| format!("{study} expects {profile}"))
        .collect::<Vec<_>>()
        .join("; ");
    format!(
        "name a shipped profile ({}) or a profile file; the study scenarios name their own ({studies})",
        napilab_sim::profile::shipped_names().join(", ")
    )
}

fn load_profile(name: &str) -> Result<LabProfile> {
    LabProfile::load(name).map_err(|e| anyhow::anyhow!("{e}: {}", profile_help()))
}

/// A scenario's plan and profile: `--profile`, else the scenario's `[twin] profile`,
/// else the veth lab's (veth-lab-server for the server topology). A profile with
/// `[host]` and `[nic]` is a NIC machine (napilab_sim::from_study); without them it
/// is the veth lab (from_scenario).
fn load_plan(
    args: &RunArgs,
    scenario: &napilab_core::scenario::Scenario,
    file: &str,
) -> Result<(TwinPlan, LabProfile, String)> {
    let server = scenario.topology.kind == napilab_core::scenario::TopologyKind::Server;
    let profile_name = args
        .profile
        .clone()
        .or_else(|| scenario.twin.profile.clone())
        .unwrap_or_else(|| {
            if server {
                calibrate_server::VETH_LAB_SERVER_NAME.to_string()
            } else {
                calibrate::VETH_LAB_NAME.to_string()
            }
        });
    if server {
        let mut plan = from_scenario::plan(scenario, file).map_err(|e| anyhow::anyhow!("{e}"))?;
        // A profile with a [server] table replaces the assumed costs.
        let server = ServerProfile::load(&profile_name)
            .map_err(|e| anyhow::anyhow!("{e}: {}", profile_help()))?;
        if let (Some(costs), Some(sp)) = (&server.costs, plan.requests.as_mut()) {
            sp.costs = costs.clone();
            for n in plan.notices.iter_mut().filter(|n| n.what == "server costs") {
                n.why = format!(
                    "the server's per-request costs and the TCP receive cost are profile {profile_name}'s [server] table (see each configuration's source: server.* settings)"
                );
            }
        }
        return Ok((plan, server.lab, profile_name));
    }
    let lab = load_profile(&profile_name)?;
    let plan = if lab.profile.hardware().is_some() {
        napilab_sim::from_study::plan(scenario, &lab.profile, file)
    } else {
        from_scenario::plan(scenario, file)
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((plan, lab, profile_name))
}

/// Runs `configs` on the twin, spread over the machine's CPUs; results keep their order.
fn run_parallel(configs: &[SimConfig], profile: &Profile, seed: u64) -> Result<Vec<SimResult>> {
    let batch: Vec<(SimConfig, u64)> = configs.iter().map(|c| (c.clone(), seed)).collect();
    run_side_by_side(&batch, profile).map_err(|e| anyhow::anyhow!("{e}"))
}

/// The notice a legacy twin configuration gets: what replaces it.
fn legacy_notice(config: &SimConfig, path: &Path) -> napilab_core::Notice {
    let stem = path
        .file_stem()
        .map_or(String::new(), |s| s.to_string_lossy().into_owned());
    let name = if config.name.is_empty() {
        stem
    } else {
        config.name.clone()
    };
    let why = match studies::replacement(&name) {
        Some((study, configuration)) => format!(
            "the twin configuration format is read for one more release; this file is replaced by scenario {study}, configuration {configuration:?} (napilab sim run {study}, which names its hardware profile)"
        ),
        None => "the twin configuration format is read for one more release: write it as a scenario with a hardware profile ([host], [nic]; docs/sim.md \"Scenarios and hardware profiles\")".into(),
    };
    napilab_core::Notice {
        what: format!("{} (legacy twin configuration)", path.display()),
        why,
    }
}

fn run_twin(args: &RunArgs) -> Result<()> {
    let config = SimConfig::from_file(&args.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let legacy = legacy_notice(&config, &args.config);
    eprintln!("notice: {}: {}", legacy.what, legacy.why);
    let Some(profile_name) = args.profile.clone() else {
        bail!(
            "{}: a legacy twin configuration needs --profile: {}",
            args.config.display(),
            profile_help()
        );
    };
    let profile = load_profile(&profile_name)?.profile;
    let seed = args.seed.unwrap_or(1);
    let loss = args.loss.unwrap_or(0.001);
    if !(0.0..1.0).contains(&loss) {
        bail!("--loss {loss} must be a fraction between 0 and 1 (e.g. 0.001)");
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
    let results = run_parallel(&configs, &profile, seed)?;
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
            identity: None,
            speed: Vec::new(),
            wake_up: Vec::new(),
            timer: Vec::new(),
            stalls: Vec::new(),
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
        let (max, probes) = max_throughput(&config, &profile, seed, loss, 0.0, high, 0.01);
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
    let start = RunStart {
        run_id: napilab_core::experiment::run_id(started, std::process::id()),
        kind: RunKind::Model,
        scenario_name: name.clone(),
        scenario_toml,
        started_unix_ms: started,
    };
    let configuration = ConfigurationResult {
        name: format!("{name} on {profile_name}"),
        settings: [
            ("profile".to_string(), profile_name.clone()),
            ("seed".to_string(), seed.to_string()),
        ]
        .into_iter()
        .chain(provenance_pairs(&profile))
        .collect(),
        findings: napilab_core::explain::findings_of(
            points.iter().filter_map(|p| p.observation.as_ref()),
        ),
        points,
        max_throughput: max,
        requests: None,
    };
    let record = start.finish(unix_ms(), host, vec![configuration], false, vec![legacy]);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        print!("{}", summary(&record, &results));
        print!("{}", provenance_block(&profile));
    }
    if !args.no_report {
        // The same outputs as a lab run: report.html, points.csv, run.json, the store.
        write_report(&record, &args.db)?;
    }
    Ok(())
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0))
}

fn summary(record: &RunRecord, sweep: &[SimResult]) -> String {
    let mut t = crate::render::table(vec![
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
        let lat = class_latencies(point, 1);
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

/// The same, as a block of the text summary.
fn provenance_block(profile: &Profile) -> String {
    let mut out = format!(
        "profile {}: where each parameter comes from (published / calibrated / fitted / assumed)\n",
        profile.name
    );
    for (key, value) in profile.parameters() {
        out.push_str(&format!(
            "  {key} = {}\n",
            profile.provenance_text(key, value)
        ));
    }
    out
}

/// `napilab sim run SCENARIO`: every configuration of a lab scenario on the twin, with
/// the scenario's loads, repeats and search, recorded as the lab records a run.
fn run_scenario(args: &RunArgs, text: &str) -> Result<()> {
    let file = args.config.display().to_string();
    let scenario =
        napilab_core::scenario::parse(text, &file, None).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (mut plan, lab, profile_name) = load_plan(args, &scenario, &file)?;
    if let Some(seed) = args.seed {
        plan.seeds = (0..plan.seeds.len() as u64)
            .map(|r| seed.wrapping_add(r))
            .collect();
    }
    if !args.loads.is_empty() {
        plan.loads = args.loads.clone();
        plan.load_fractions.clear();
    }
    if let Some(loss) = args.loss {
        if !(0.0..1.0).contains(&loss) {
            bail!("--loss {loss} must be a fraction between 0 and 1 (e.g. 0.001)");
        }
        plan.loss_threshold = loss;
    }
    if args.max_search && plan.search.is_none() {
        // The range comes from each configuration's capacity probe, as the lab's
        // does (napilab_experiment::maximum::derive_range), capped only by a
        // search_max_pps the scenario gives.
        plan.search = Some(scenario.measurement.clone());
    }
    let requests_search = plan.requests.as_ref().is_some_and(|r| r.workload.search);
    if plan.loads.is_empty() && plan.search.is_none() && !requests_search {
        bail!("{file}: nothing to run: the scenario has no loads and no search (give --loads or --max-search)");
    }
    let mut notices: Vec<napilab_core::Notice> = plan.notices.clone();
    if lab.testbed.is_none() && plan.requests.is_none() {
        notices.push(napilab_core::Notice {
            what: format!("profile {profile_name}"),
            why: "has no [testbed]: the generator's and the sink's CPU use on the DUT's CPUs is not modelled (use the veth-lab profile for lab scenarios)".into(),
        });
    }
    let started = unix_ms();
    let start = RunStart {
        run_id: napilab_core::experiment::run_id(started, std::process::id()),
        kind: RunKind::Model,
        scenario_name: scenario.name.clone(),
        scenario_toml: text.to_string(),
        started_unix_ms: started,
    };
    // A server scenario's configurations run their request load instead.
    let configurations = if plan.requests.is_some() {
        run_server_configurations(&plan, &lab.profile, &profile_name, &file, &mut notices)?
    } else {
        let experiment_plan = twin_testbed::plan_of(&plan);
        // The twin's runs are short and not interruptible part way: nothing stops them.
        let never = std::sync::atomic::AtomicBool::new(false);
        let done = record::each_configuration(&plan.configurations, &never, |conf| {
            let profile = conf.profile_for(&lab.profile, lab.testbed.as_ref());
            for n in &conf.notices {
                notices.push(napilab_core::Notice {
                    what: format!("configuration {}: {}", conf.name, n.what),
                    why: n.why.clone(),
                });
            }
            let mut settings = vec![("profile".to_string(), profile_name.clone())];
            settings.extend(provenance_pairs(&profile));
            settings.push((
                "seeds".into(),
                plan.seeds
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ));
            let mut testbed = TwinPackets::new(&plan, |batch: &[(SimConfig, u64, PointRole)]| {
                let pairs: Vec<(SimConfig, u64)> =
                    batch.iter().map(|(c, s, _)| (c.clone(), *s)).collect();
                let results = run_side_by_side(&pairs, &profile)
                    .map_err(|e| napilab_sim::ConfigError::new(&file, "(run)", e.to_string()))?;
                Ok(results
                    .iter()
                    .zip(batch)
                    .map(|(r, (c, _, role))| r.to_point(*role, c.traffic.rate_pps, 0))
                    .collect())
            })
            .with_settings(settings);
            let outcome = configuration::run(&mut testbed, conf, &experiment_plan)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            anyhow::Ok((outcome.result, outcome.stopped))
        });
        if let Some(e) = done.error {
            return Err(e);
        }
        done.results
    };
    let cpus = plan
        .configurations
        .first()
        .map_or(2, |c| c.config.host.cpus);
    let mut host = configurations
        .iter()
        .flat_map(|c| c.points.iter())
        .find_map(|p| p.observation.as_ref().map(|o| o.host.clone()))
        .unwrap_or_else(|| HostFacts {
            cpus: Vec::new(),
            hz: Hz {
                value: Some(from_scenario::LAB_HZ),
                how: "config".into(),
            },
            accounting: CpuAccounting::TickSampled,
            user_hz: 100,
            identity: None,
            speed: Vec::new(),
            wake_up: Vec::new(),
            timer: Vec::new(),
            stalls: Vec::new(),
        });
    if host.cpus.is_empty() {
        host.cpus = (0..cpus).collect();
    }
    let record = start.finish(unix_ms(), host, configurations, false, notices);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        if plan.requests.is_some() {
            print!("{}", from_server_scenario::summary(&record, &profile_name));
        } else {
            print!("{}", scenario_summary(&record, &profile_name));
        }
        print!("{}", provenance_block(&lab.profile));
    }
    if !args.no_report {
        write_report(&record, &args.db)?;
    }
    Ok(())
}

/// The configurations of a server scenario on the twin: each one's request sweep and
/// searches ([`from_server_scenario::run_configuration`]), with the server's costs on
/// the profile and their sources among the settings.
fn run_server_configurations(
    plan: &TwinPlan,
    base: &Profile,
    profile_name: &str,
    file: &str,
    notices: &mut Vec<napilab_core::Notice>,
) -> Result<Vec<ConfigurationResult>> {
    let Some(sp) = &plan.requests else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (i, conf) in plan.configurations.iter().enumerate() {
        eprintln!(
            "twin: configuration {} ({}/{})",
            conf.name,
            i + 1,
            plan.configurations.len()
        );
        for n in &conf.notices {
            notices.push(napilab_core::Notice {
                what: format!("configuration {}: {}", conf.name, n.what),
                why: n.why.clone(),
            });
        }
        let profile = sp.costs.profile(&conf.profile_for(base, None));
        let requests = from_server_scenario::run_configuration(plan, i, &mut |batch| {
            run_side_by_side(batch, &profile)
                .map_err(|e| napilab_sim::ConfigError::new(file, "(run)", e.to_string()))
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut settings = conf.settings.clone();
        settings.push(("profile".into(), profile_name.to_string()));
        settings.extend(provenance_pairs(&profile));
        settings.extend(sp.costs.provenance_pairs());
        out.push(ConfigurationResult {
            name: conf.name.clone(),
            settings,
            points: Vec::new(),
            max_throughput: None,
            findings: napilab_core::explain::findings_of(
                requests
                    .points
                    .iter()
                    .filter_map(|p| p.observation.as_ref()),
            ),
            requests: Some(requests),
        });
    }
    Ok(out)
}

fn write_report(record: &RunRecord, db: &Path) -> Result<()> {
    let dir = db.parent().unwrap_or(Path::new(".")).join(&record.run_id);
    let outputs = napilab_report::write_outputs(record, &dir, db)?;
    eprintln!(
        "report: {} (points: {}, record: {}, stored in {})",
        outputs.html.display(),
        outputs.csv.display(),
        outputs.json.display(),
        outputs.db.display()
    );
    Ok(())
}

/// Each class's latency of a point, `name: p50/p99` in microseconds with `decimals`.
fn class_latencies(point: &PointResult, decimals: usize) -> String {
    point
        .classes
        .iter()
        .filter_map(|c| {
            c.latency.as_ref().map(|l| {
                format!(
                    "{}: {:.decimals$}/{:.decimals$}",
                    c.name, l.p50_us, l.p99_us
                )
            })
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn scenario_summary(record: &RunRecord, profile: &str) -> String {
    let mut t = crate::render::table(vec![
        "configuration",
        "role",
        "offered kpps",
        "delivered kpps",
        "loss %",
        "latency p50/p99 us",
        "cpu busy (/proc/stat view)",
    ]);
    for c in &record.configurations {
        for p in &c.points {
            let lat = class_latencies(p, 0);
            let busy = p
                .observation
                .as_ref()
                .and_then(|o| o.intervals.first())
                .map(|iv| {
                    iv.cpus
                        .iter()
                        .filter_map(|c| c.time.as_ref().map(|t| (c.cpu, t.busy())))
                        .map(|(cpu, b)| format!("cpu{cpu} {:.0}%", b * 100.0))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            t.add_row(vec![
                c.name.clone(),
                format!("{:?}", p.role).to_lowercase(),
                format!("{:.1}", p.offered_pps / 1e3),
                format!("{:.1}", p.delivered_pps() / 1e3),
                format!("{:.3}", p.loss_ratio() * 100.0),
                lat,
                busy,
            ]);
        }
    }
    let mut out = format!(
        "twin run {} (model) of scenario {} on profile {profile}; every figure is source `model`\n{t}\n",
        record.run_id, record.scenario_name
    );
    let maxima: Vec<_> = record
        .configurations
        .iter()
        .filter_map(|c| c.max_throughput.as_ref().map(|m| (c, m)))
        .collect();
    if !maxima.is_empty() {
        let mut m = crate::render::table(vec![
            "configuration",
            "max forwarding kpps",
            "loss threshold",
            "probes",
            "stopped",
        ]);
        let mut methods: Vec<&str> = Vec::new();
        for (c, x) in maxima {
            m.add_row(vec![
                c.name.clone(),
                format!("{:.1}", x.pps / 1e3),
                format!("{}", x.loss_threshold),
                x.probes.len().to_string(),
                x.stopped.clone(),
            ]);
            if !methods.contains(&x.method.as_str()) {
                methods.push(&x.method);
            }
        }
        out.push_str(&format!(
            "maximum throughput (the lab's search on the twin: {})\n{m}\n",
            methods.join(", ")
        ));
    }
    for n in &record.notices {
        out.push_str(&format!("note: {}: {}\n", n.what, n.why));
    }
    out
}

/// `napilab sim calibrate`: fit, print the figures, predict, write the profile.
fn run_calibrate(args: &CalibrateArgs) -> Result<()> {
    let file = args.lab.display().to_string();
    let text = std::fs::read_to_string(&args.lab).with_context(|| format!("cannot read {file}"))?;
    let record: RunRecord = serde_json::from_str(&text)
        .with_context(|| format!("{file}: not a run record (results/<run id>/run.json)"))?;
    if args.twin_vs_lab {
        let mut record = record;
        record.twin = napilab_sim::twin_vs_lab::compare(&record, true);
        if args.json {
            println!("{}", serde_json::to_string_pretty(&record.twin)?);
        } else if record.twin.is_none() {
            bail!("{file}: run {} has no twin-vs-lab table: the twin compares finished lab runs of packet topologies", record.run_id);
        } else {
            print!("{}", crate::twin_table::tables(&record));
        }
        return Ok(());
    }
    let base = load_profile(&args.base)?;
    if crate::sim_calibrate_server::is_server_run(&record) {
        if args.config.is_some() || !args.predict.is_empty() {
            bail!("{file}: run {} is a server-topology run: --config and --predict are for packet runs (the server fit uses the run's modes and predicts all its searched ones)", record.run_id);
        }
        return crate::sim_calibrate_server::calibrate(
            &record,
            &file,
            &args.base,
            &base,
            args.out.as_deref(),
            args.json,
        );
    }
    let Some(config) = args.config.clone() else {
        return run_joint_calibrate(args, &record, &file, &base);
    };
    eprintln!(
        "fitting on {} of run {} (the twin re-runs the configuration at each load and bisects its search: about a minute)",
        config, record.run_id
    );
    let cal =
        calibrate::calibrate(&record, &file, &config, &base).map_err(|e| anyhow::anyhow!("{e}"))?;
    let names: Vec<String> = if args.predict.is_empty() {
        record
            .configurations
            .iter()
            .filter(|c| c.max_throughput.is_some() && c.name != config)
            .map(|c| c.name.clone())
            .collect()
    } else {
        args.predict.clone()
    };
    let predictions = if names.is_empty() {
        Vec::new()
    } else {
        eprintln!("predicting {}", names.join(", "));
        calibrate::predict(&record, &file, &cal.lab, &names).map_err(|e| anyhow::anyhow!("{e}"))?
    };
    if let Some(out) = &args.out {
        let command = format!(
            "napilab sim calibrate --lab {} --config {} --out {}{}",
            file,
            config,
            out.display(),
            if args.base == calibrate::VETH_LAB_NAME {
                String::new()
            } else {
                format!(" --base {}", args.base)
            }
        );
        std::fs::write(out, cal.to_toml(&command, &record, &predictions))
            .with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!("profile written to {}", out.display());
    }
    if args.json {
        let json = serde_json::json!({
            "run_id": record.run_id,
            "scenario": record.scenario_name,
            "calibration_configuration": config,
            "lab_max_pps": cal.figures.max_pps,
            "lab_search_stopped": cal.figures.stopped,
            "search_engine": cal.figures.engine,
            "twin_max_pps": cal.twin_max_pps,
            "profile": cal.lab.profile,
            "testbed": cal.lab.testbed,
            "how_fitted": cal.notes,
            "dut_kthread_share": cal
                .dut_share
                .iter()
                .map(|(pps, lab, twin)| serde_json::json!({"delivered_pps": pps, "lab": lab, "twin": twin}))
                .collect::<Vec<_>>(),
            "predictions": predictions,
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    println!(
        "calibrated on {} of run {} ({}): lab maximum {:.0} pkt/s, twin {:.0} pkt/s",
        config, record.run_id, record.scenario_name, cal.figures.max_pps, cal.twin_max_pps
    );
    for n in &cal.notes {
        println!("  {n}");
    }
    let p = &cal.lab.profile;
    println!(
        "fitted: stage_cycles poll {:.0} + ip_stack {:.0} + xmit {:.0}, fixed_cycles.context_switch {:.0}, latency_ns.irq_delivery {}; testbed generator {:.0}, sink {:.0} cycles/packet (cpu_ghz {})",
        p.stage_cycles.poll,
        p.stage_cycles.ip_stack,
        p.stage_cycles.xmit,
        p.fixed_cycles.context_switch,
        p.latency_ns.irq_delivery,
        cal.lab.testbed.map_or(0.0, |t| t.generator_cycles_per_packet),
        cal.lab.testbed.map_or(0.0, |t| t.sink_cycles_per_packet),
        p.cpu_ghz
    );
    let mut t = crate::render::table(vec![
        "configuration",
        "lab max kpps",
        "lab search stopped",
        "twin max kpps",
        "error (lower bound: at least)",
    ]);
    for x in &predictions {
        t.add_row(vec![
            x.name.clone(),
            format!("{:.1}", x.lab_max_pps / 1e3),
            x.lab_stopped.clone(),
            format!("{:.1}", x.twin_max_pps / 1e3),
            x.verdict(),
        ]);
    }
    if !predictions.is_empty() {
        println!("predictions with the fitted profile\n{t}");
    }
    Ok(())
}

/// `napilab sim calibrate` without --config: the joint fit, its parameters with their
/// ranges, the fitted maxima and the leave-one-out predictions.
fn run_joint_calibrate(
    args: &CalibrateArgs,
    record: &RunRecord,
    file: &str,
    base: &LabProfile,
) -> Result<()> {
    eprintln!(
        "fitting jointly on run {} (the twin searches every configuration's maximum at each trial delay: a few minutes)",
        record.run_id
    );
    let joint =
        calibrate::calibrate_joint(record, file, base).map_err(|e| anyhow::anyhow!("{e}"))?;
    let loo: Vec<calibrate::Prediction> = joint
        .leave_one_out
        .iter()
        .filter_map(|l| l.prediction.clone())
        .collect();
    if let Some(out) = &args.out {
        let command = format!(
            "napilab sim calibrate --lab {file} --out {}{}",
            out.display(),
            if args.base == calibrate::VETH_LAB_NAME {
                String::new()
            } else {
                format!(" --base {}", args.base)
            }
        );
        std::fs::write(out, joint.calibration.to_toml(&command, record, &loo))
            .with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!("profile written to {}", out.display());
    }
    let cal = &joint.calibration;
    if args.json {
        let json = serde_json::json!({
            "run_id": record.run_id,
            "scenario": record.scenario_name,
            "fit": "joint",
            "cost_configuration": cal.figures.name,
            "targets": joint.targets,
            "lower_bounds": joint.lower_bounds,
            "parameters": joint.parameters,
            "profile": cal.lab.profile,
            "testbed": cal.lab.testbed,
            "how_fitted": cal.notes,
            "fitted": joint.fitted,
            "leave_one_out": joint.leave_one_out,
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    println!(
        "joint fit on run {} ({}): costs from the CPU figures of {}; wake-up delay fitted to the DUT-limited maxima of {}; lower bounds only: {}",
        record.run_id,
        record.scenario_name,
        cal.figures.name,
        if joint.targets.is_empty() { "none".to_string() } else { joint.targets.join(", ") },
        if joint.lower_bounds.is_empty() { "none".to_string() } else { joint.lower_bounds.join(", ") },
    );
    for n in &cal.notes {
        println!("  {n}");
    }
    let mut t = crate::render::table(vec![
        "parameter",
        "value",
        "physical range",
        "status",
        "how",
    ]);
    for p in &joint.parameters {
        t.add_row(vec![
            p.name.clone(),
            format!("{:.0}", p.value),
            format!("{:.0} .. {:.0}", p.bound.min, p.bound.max),
            format!("{:?}", p.status),
            p.how.clone(),
        ]);
    }
    println!("parameters (ranges and their reasons: --json)\n{t}");
    let mut t = crate::render::table(vec![
        "configuration",
        "lab max kpps",
        "lab search stopped",
        "twin, joint fit (in-sample)",
        "error",
        "twin, leave-one-out",
        "error (a prediction)",
    ]);
    for x in &joint.fitted {
        let loo = joint.leave_one_out.iter().find(|l| l.name == x.name);
        let (loo_max, loo_err) = match loo {
            Some(l) => match &l.prediction {
                Some(p) => (format!("{:.1}", p.twin_max_pps / 1e3), p.verdict()),
                None => ("-".into(), l.why_none.clone().unwrap_or_default()),
            },
            None => ("-".into(), "a constraint, not a target".into()),
        };
        t.add_row(vec![
            x.name.clone(),
            format!("{:.1}", x.lab_max_pps / 1e3),
            x.lab_stopped.clone(),
            format!("{:.1}", x.twin_max_pps / 1e3),
            x.verdict(),
            loo_max,
            loo_err,
        ]);
    }
    println!("maxima\n{t}");
    Ok(())
}
