//! The runner: a scenario's configurations x offered loads x repeats (warm-up, then the
//! measurement window), then a maximum-throughput search per configuration; per point
//! the traffic results and the DUT's Observation. Ctrl-C (the `stop` flag) ends the run
//! cleanly: the point in progress is dropped, finished points are kept, everything
//! created is removed and `RunRecord.interrupted` is set.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use napilab_core::scenario::{self, Backend, Configuration, Scenario, SearchMethod, TraceTier};
use napilab_core::{
    ClassResult, ConfigurationResult, Finding, MaxThroughput, Notice, Observation, PointResult,
    PointRole, RunKind, RunRecord, RUN_SCHEMA,
};

use crate::counters;
use crate::disturbance;
use crate::linerate::{self, LineRate, LrClass, LrGenResult, LrGenSpec, Pacing, PACED_NICE};
use crate::netns::{self, new_run_id, pid_file, RUN_DIR};
use crate::search::{bisect, Probe};
use crate::throughput;
use crate::topology::{Lab, SINK_ADDR};
use crate::traffic::{start_generator, ClassSpec, GenResult, GenSpec, Sink};

/// SCHED_FIFO priority of line-rate generator threads: below the sink's NAPI thread
/// ([`crate::topology::SINK_NAPI_FIFO`]), so that the sink always gets its CPU first.
/// Tried the other way round (generator 15 above the sink's 10): the sink's ring then
/// overflowed at 250-400 kpps and the generator's frames stayed in flight longer,
/// each call costing more (generator 33-69% busy at 108-500 kpps instead of 22-26%).
pub const LR_GEN_FIFO: u32 = 5;

/// The traffic back end of one configuration.
enum Engine {
    Paced(Sink),
    LineRate {
        lr: Box<LineRate>,
        /// The generator's CPUs do no DUT work (see [`line_rate_apart`]).
        apart: bool,
        /// The DUT polls inline in the generator's softirqs (softirq mode on veth).
        inline_dut: bool,
    },
}

/// Profile-name prefix of the journals the lab writes (`lab clean` reverts them).
pub const JOURNAL_PREFIX: &str = "lab-";

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub scenario_text: String,
    /// Names the scenario in errors and in the record.
    pub scenario_file: String,
    /// Results root: the record goes to `<out_dir>/<run_id>/run.json`.
    pub out_dir: PathBuf,
    /// A `napilab` binary to run `observe --json` in the DUT namespace for each point;
    /// None: points carry no Observation (a notice says so).
    pub observer: Option<PathBuf>,
    /// The `napilab` binary, which the server topology runs inside the DUT namespace
    /// to apply its interrupt modes (`napilab tune apply`); None: server scenarios
    /// refuse to run, saying so.
    pub napilab_exe: Option<PathBuf>,
    /// Journal directory for the global sysctls (napilab-tune).
    pub journal_dir: PathBuf,
    /// Set by SIGINT/SIGTERM handlers: stop cleanly.
    pub stop: Arc<AtomicBool>,
    /// Draw a progress bar on stderr (when it is a terminal).
    pub progress: bool,
    /// Use this run id instead of a new one (tests).
    pub run_id: Option<String>,
}

pub struct RunOutcome {
    pub record: RunRecord,
    pub path: PathBuf,
}

/// Checks root, iproute2, ethtool and network-namespace support; says what is missing.
pub fn preflight() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("napilab lab needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces, veth links and to pin kernel threads: run it with sudo");
    }
    if !Path::new("/proc/self/ns/net").exists() {
        bail!("this kernel has no network namespaces (/proc/self/ns/net is missing): the lab needs CONFIG_NET_NS and CONFIG_VETH");
    }
    for (prog, pkg) in [
        ("ip", "iproute2"),
        ("tc", "iproute2"),
        ("ethtool", "ethtool"),
    ] {
        if Command::new(prog)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            bail!("`{prog}` is not installed: install {pkg} (apt-get install {pkg})");
        }
    }
    Ok(())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(0))
        .unwrap_or(0)
}

/// Removes the pid file on drop.
struct PidFile(PathBuf);

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Reverts the journal of the configuration's sysctl changes on drop.
pub(crate) struct SysctlGuard {
    journal: Option<PathBuf>,
}

impl SysctlGuard {
    pub(crate) fn apply(
        run_id: &str,
        cfg: &Configuration,
        dir: &Path,
    ) -> Result<(SysctlGuard, Vec<String>)> {
        let s = &cfg.settings;
        let mut items = String::new();
        let mut what = Vec::new();
        for (attr, v) in [
            ("netdev_budget", s.netdev_budget),
            ("netdev_budget_usecs", s.netdev_budget_usecs),
        ] {
            if let Some(v) = v {
                items.push_str(&format!(
                    "[[set]]\nsetting = \"sysctl.{attr}\"\nvalue = {v}\nwhy = \"lab run {run_id}, configuration {}\"\n",
                    cfg.name.replace('"', "'")
                ));
                what.push(format!("net.core.{attr} = {v}"));
            }
        }
        if items.is_empty() {
            return Ok((SysctlGuard { journal: None }, what));
        }
        let name = format!("{JOURNAL_PREFIX}{run_id}");
        let text = format!(
            "name = \"{name}\"\nsummary = \"napilab lab run {run_id}: global sysctls of one configuration\"\nstudy = \"napilab lab\"\n{items}"
        );
        let profile = napilab_tune::profile::parse(&text, &name)
            .map_err(|e| anyhow::anyhow!("internal profile for the sysctls: {e}"))?;
        let mut ctx = napilab_tune::host_ctx();
        let plan = napilab_tune::plan::plan(
            &mut ctx,
            &profile,
            &format!("napilab lab {run_id}"),
            &napilab_tune::profile::Params::default(),
        )
        .context("planning net.core sysctls (run napilab in the initial network namespace)")?;
        let report = napilab_tune::apply(&mut ctx, plan, dir)
            .with_context(|| format!("applying {}", what.join(", ")))?;
        Ok((
            SysctlGuard {
                journal: report.journal,
            },
            what,
        ))
    }

    pub(crate) fn revert(&mut self) -> Result<()> {
        if let Some(j) = self.journal.take() {
            let mut ctx = napilab_tune::host_ctx();
            napilab_tune::revert(&mut ctx, &j)
                .with_context(|| format!("reverting {} (run `napilab lab clean`)", j.display()))?;
        }
        Ok(())
    }
}

impl Drop for SysctlGuard {
    fn drop(&mut self) {
        if let Err(e) = self.revert() {
            eprintln!("napilab: {e:#}");
        }
    }
}

/// Kills the observer process on drop. Its output is read while it runs: an
/// Observation with the trace tier (stage tables, context shares) is larger than a
/// pipe's buffer, and an observer blocked writing it would never exit.
pub(crate) struct Observer {
    child: Option<Child>,
    output: Option<std::thread::JoinHandle<String>>,
}

impl Observer {
    pub(crate) fn start(
        exe: &Path,
        ns: &str,
        duration: Duration,
        tier: TraceTier,
    ) -> Option<Observer> {
        let secs = duration.as_secs_f64();
        let interval = if secs >= 2.0 { 1.0 } else { secs };
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(exe)
            .args([
                "observe",
                "--json",
                "--no-map",
                "--for",
                &format!("{}ms", (secs * 1000.0).round()),
                "--interval",
                &format!("{}ms", (interval * 1000.0).round()),
            ])
            .args(tier.observe_flags())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let output = child.stdout.take().map(|mut o| {
            std::thread::spawn(move || {
                let mut out = String::new();
                let _ = o.read_to_string(&mut out);
                out
            })
        });
        Some(Observer {
            child: Some(child),
            output,
        })
    }

    /// Waits (bounded) for the Observation.
    pub(crate) fn finish(
        mut self,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<Observation, String> {
        let Some(mut child) = self.child.take() else {
            return Err("observer not started".into());
        };
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline && !stop.load(Ordering::Relaxed) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err("the observer did not finish in time".into());
                }
            }
        }
        // The process has exited: its end of the pipe is closed, so the reader ends.
        let out = self
            .output
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        serde_json::from_str(&out).map_err(|e| format!("observer output: {e}"))
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) struct Ctx<'a> {
    pub(crate) scenario: &'a Scenario,
    pub(crate) opts: &'a RunOptions,
    pub(crate) notices: Vec<Notice>,
    next_point: u32,
    pub(crate) bar: indicatif::ProgressBar,
    observer_offset_noted: bool,
    /// CPUs of the host (the highest CPU number + 1).
    pub(crate) ncpus: u32,
}

pub(crate) fn notice(notices: &mut Vec<Notice>, what: impl Into<String>, why: impl Into<String>) {
    let what = what.into();
    if !notices.iter().any(|n| n.what == what) {
        notices.push(Notice {
            what,
            why: why.into(),
        });
    }
}

/// Runs a scenario end to end and writes `<out_dir>/<run_id>/run.json`.
pub fn run(opts: &RunOptions) -> Result<RunOutcome> {
    preflight()?;
    let host = napilab_probe::observe::describe_host(Path::new("/"), false).host;
    let ncpus = host.cpus.iter().copied().max().map_or(1, |m| m + 1);
    let scenario = scenario::parse(&opts.scenario_text, &opts.scenario_file, Some(ncpus))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let run_id = opts.run_id.clone().unwrap_or_else(new_run_id);
    std::fs::create_dir_all(RUN_DIR).with_context(|| format!("creating {RUN_DIR}"))?;
    std::fs::write(pid_file(&run_id), std::process::id().to_string())
        .with_context(|| format!("writing {}", pid_file(&run_id).display()))?;
    let _pid = PidFile(pid_file(&run_id));
    let started = now_ms();
    let configs = scenario.configurations();
    let loads = scenario.loads();
    let m = &scenario.measurement;
    let per_config = match &scenario.requests {
        Some(w) => crate::server_runner::points_per_configuration(w, m),
        None => {
            loads.len() as u64 * u64::from(m.repeats)
                + match (m.search, m.search_method) {
                    (false, _) => 0,
                    (true, SearchMethod::Bisection) => u64::from(m.search_iterations),
                    // About a dozen trials per MLRsearch (the bar's end is corrected
                    // per configuration).
                    (true, SearchMethod::Mlrsearch) => 12 * u64::from(m.search_repeats),
                }
        }
    };
    let bar = if opts.progress && std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(per_config * configs.len() as u64);
        let style = indicatif::ProgressStyle::with_template(
            "lab {bar:30} {pos}/{len} points, eta {eta} {msg} (Ctrl-C stops, keeps finished points)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        b.set_style(style);
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut ctx = Ctx {
        scenario: &scenario,
        opts,
        notices: Vec::new(),
        next_point: 1,
        bar,
        observer_offset_noted: false,
        ncpus,
    };
    if opts.observer.is_none() {
        notice(
            &mut ctx.notices,
            "DUT observation",
            "no napilab binary was given to observe the DUT namespace: points carry no Observation",
        );
    }
    let mut results = Vec::new();
    let mut interrupted = false;
    let mut error = None;
    for cfg in &configs {
        if opts.stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        ctx.bar.set_message(cfg.name.clone());
        let outcome = match scenario.topology.kind {
            scenario::TopologyKind::Server => {
                crate::server_runner::run_configuration(&mut ctx, &run_id, cfg)
            }
            _ => run_configuration(&mut ctx, &run_id, cfg, per_config),
        };
        match outcome {
            Ok((r, stopped)) => {
                results.push(r);
                if stopped {
                    interrupted = true;
                    break;
                }
            }
            Err(e) => {
                error = Some(e.context(format!("configuration {}", cfg.name)));
                break;
            }
        }
    }
    ctx.bar.finish_and_clear();
    let record = RunRecord {
        schema: RUN_SCHEMA.into(),
        run_id: run_id.clone(),
        kind: RunKind::Lab,
        scenario_name: scenario.name.clone(),
        scenario_toml: opts.scenario_text.clone(),
        started_unix_ms: started,
        finished_unix_ms: now_ms(),
        host,
        napilab_version: env!("CARGO_PKG_VERSION").into(),
        interrupted: interrupted || error.is_some(),
        configurations: results,
        notices: ctx.notices,
    };
    let dir = opts.out_dir.join(&run_id);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("run.json");
    std::fs::write(&path, serde_json::to_string_pretty(&record)?)
        .with_context(|| format!("writing {}", path.display()))?;
    if let Some(e) = error {
        return Err(e.context(format!(
            "the run stopped; its finished points are in {}",
            path.display()
        )));
    }
    Ok(RunOutcome { record, path })
}

/// One configuration: topology, sysctls, sink, sweep, search, teardown. Returns the
/// result and whether the run was stopped.
fn run_configuration(
    ctx: &mut Ctx<'_>,
    run_id: &str,
    cfg: &Configuration,
    per_config: u64,
) -> Result<(ConfigurationResult, bool)> {
    let s = ctx.scenario;
    let m = &s.measurement;
    let pos0 = ctx.bar.position();
    let (mut sysctls, sysctl_notes) = SysctlGuard::apply(run_id, cfg, &ctx.opts.journal_dir)?;
    let mut lab = Lab::build(run_id, &s.topology, &cfg.settings)
        .context("building the namespaces and veth links")?;
    for w in &lab.warnings {
        notice(
            &mut ctx.notices,
            format!("configuration {}", cfg.name),
            w.clone(),
        );
    }
    let (mut engine, engine_notes) = start_engine(ctx, &lab, cfg, s.traffic.backend)?;
    let mut settings = vec![
        (
            "topology".to_string(),
            match s.topology.kind {
                scenario::TopologyKind::Router => "router".to_string(),
                scenario::TopologyKind::Ap => format!("ap {:?}", s.topology.direction),
                scenario::TopologyKind::Server => "server".to_string(),
            },
        ),
        ("dut_in".into(), lab.dut_in.clone()),
        ("dut_out".into(), lab.dut_out.clone()),
    ];
    settings.extend(cfg.settings.pairs());
    for n in sysctl_notes {
        settings.push(("sysctl".into(), n));
    }
    settings.extend(engine_notes);
    let mut result = ConfigurationResult {
        name: cfg.name.clone(),
        settings,
        points: Vec::new(),
        max_throughput: None,
        findings: Vec::new(),
        requests: None,
    };
    let mut stopped = false;
    let mut known: Vec<(f64, bool)> = Vec::new();
    'sweep: for &load in &s.loads() {
        for repeat in 0..m.repeats {
            ctx.bar
                .set_message(format!("{} @ {:.0} pps", cfg.name, load));
            let spec = PointSpec {
                load,
                role: PointRole::Sweep,
                repeat,
                duration_s: m.duration_s,
            };
            match measure_point(ctx, &lab, &mut engine, cfg, spec)? {
                Some(p) => {
                    known.push((load, passes(&p, m.loss_threshold)));
                    result.points.push(p);
                    ctx.bar.inc(1);
                }
                None => {
                    stopped = true;
                    break 'sweep;
                }
            }
        }
    }
    let search_backend = m.search_backend.unwrap_or(s.traffic.backend);
    if m.search && !stopped && search_backend != s.traffic.backend {
        // The sweep's engine measured latency (paced); the search measures throughput
        // with the other one. Sweep verdicts do not carry over: the paced generator
        // fails loads the DUT could carry, so the search starts from its own bounds.
        drop(engine);
        let (search_engine, notes) = start_engine(ctx, &lab, cfg, search_backend)?;
        engine = search_engine;
        result
            .settings
            .extend(notes.into_iter().map(|(k, v)| (format!("search: {k}"), v)));
        result.settings.push((
            "search back end".into(),
            match &engine {
                Engine::Paced(_) => "paced".into(),
                Engine::LineRate { .. } => "line-rate".into(),
            },
        ));
        known.clear();
    }
    if m.search && !stopped {
        let (max, search_stopped) = match m.search_method {
            SearchMethod::Bisection => {
                bisection(ctx, &lab, &mut engine, cfg, &known, &mut result.points)?
            }
            SearchMethod::Mlrsearch => {
                let lab_cpus = lab_cpus(&cfg.settings);
                let lab = &lab;
                let engine = &mut engine;
                let ctx = &mut *ctx;
                throughput::mlrsearch(m, &mut result.points, |load, duration_s, search| {
                    ctx.bar.set_message(format!(
                        "{} search {}/{} @ {:.0} pps, {duration_s} s",
                        cfg.name,
                        search + 1,
                        m.search_repeats,
                        load
                    ));
                    let before = disturbance::snapshot(Path::new("/"));
                    let spec = PointSpec {
                        load,
                        role: PointRole::Search,
                        repeat: search,
                        duration_s,
                    };
                    let point = measure_point(ctx, lab, engine, cfg, spec)?;
                    ctx.bar.inc(1);
                    Ok(point.map(|point| {
                        let after = disturbance::snapshot(Path::new("/"));
                        let sent = point.classes.iter().map(|c| c.sent).sum();
                        let late = disturbance::generator_late(&point.generator, sent);
                        let short = point.offered_pps < 0.99 * point.requested_pps;
                        let disturbance = disturbance::assess(
                            &before,
                            &after,
                            &lab_cpus,
                            LAB_KERNEL_THREADS,
                            late,
                            short,
                        );
                        throughput::MeasuredTrial { point, disturbance }
                    }))
                })?
            }
        };
        stopped |= search_stopped;
        result.max_throughput = Some(max);
    }
    ctx.bar.set_position(pos0 + per_config);
    result.findings = findings_of(&result.points);
    // Detaches and unloads the BPF programs (line rate) or stops the sink thread
    // before the namespaces go.
    drop(engine);
    lab.teardown()
        .context("deleting the namespaces (run `napilab lab clean`)")?;
    sysctls.revert()?;
    Ok((result, stopped))
}

/// The RFC 2544 bisection (`search_method = "bisection"`), one trial per load.
fn bisection(
    ctx: &mut Ctx<'_>,
    lab: &Lab,
    engine: &mut Engine,
    cfg: &Configuration,
    known: &[(f64, bool)],
    all_points: &mut Vec<PointResult>,
) -> Result<(MaxThroughput, bool)> {
    let m = &ctx.scenario.measurement;
    let first_probe = all_points.len();
    let mut probes = Vec::new();
    let mut points = Vec::new();
    let mut failure = None;
    let outcome = bisect(
        m.search_max_pps,
        known,
        m.search_iterations,
        m.search_resolution,
        |load| {
            ctx.bar
                .set_message(format!("{} search @ {:.0} pps", cfg.name, load));
            let spec = PointSpec {
                load,
                role: PointRole::Search,
                repeat: 0,
                duration_s: m.duration_s,
            };
            match measure_point(ctx, lab, engine, cfg, spec) {
                Ok(Some(p)) => {
                    let ok = passes(&p, m.loss_threshold);
                    probes.push(first_probe + points.len());
                    points.push(p);
                    ctx.bar.inc(1);
                    if ok {
                        Probe::Pass
                    } else {
                        Probe::Fail
                    }
                }
                Ok(None) => Probe::Interrupted,
                Err(e) => {
                    failure = Some(e);
                    Probe::Interrupted
                }
            }
        },
    );
    all_points.extend(points);
    if let Some(e) = failure {
        return Err(e);
    }
    let max = MaxThroughput {
        pps: outcome.pps,
        loss_threshold: m.loss_threshold,
        probes,
        stopped: search_stopped(outcome.stopped, outcome.pps, all_points, m.loss_threshold),
        method: "rfc2544-bisection".into(),
        ..MaxThroughput::default()
    };
    Ok((max, outcome.stopped == "interrupted"))
}

/// The CPUs a configuration's lab uses (the engines, the DUT's NAPI and RPS CPUs):
/// where a disturbance matters.
fn lab_cpus(s: &scenario::DutSettings) -> Vec<u32> {
    let mut cpus: Vec<u32> = s
        .generator_cpus
        .iter()
        .chain(&s.sink_cpus)
        .chain(&s.napi_cpus)
        .chain(&s.rps_cpus)
        .copied()
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// Kernel threads that do the lab's work, by command-name prefix: their run delay is
/// recorded per trial.
const LAB_KERNEL_THREADS: &[&str] = &["napi/", "ksoftirqd/", "kworker/"];

/// Starts the traffic back end of a configuration (its sink side stays up for all of
/// its points); a line-rate back end that cannot run here falls back to paced, with a
/// notice. Returns the engine and the settings it adds to the configuration's.
fn start_engine(
    ctx: &mut Ctx<'_>,
    lab: &Lab,
    cfg: &Configuration,
    backend: Backend,
) -> Result<(Engine, Vec<(String, String)>)> {
    let s = ctx.scenario;
    let mut notes = Vec::new();
    if backend == Backend::LineRate {
        let classes: Vec<LrClass> = s
            .traffic
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| LrClass {
                id: i as u16,
                port: c.port,
                size: c.size,
                share: c.share,
            })
            .collect();
        match LineRate::start(lab, &classes, cfg.settings.gro) {
            Ok(lr) => {
                notes.extend(lr.applied.iter().cloned());
                let apart = line_rate_apart(&cfg.settings);
                let inline_dut = cfg.settings.napi == scenario::NapiContext::Softirq;
                notes.push((
                    "line-rate generator sched".into(),
                    if apart {
                        format!("in-kernel pacing (nice {PACED_NICE}) for a thread with one class, else 200 us batches at SCHED_FIFO {LR_GEN_FIFO}")
                    } else if inline_dut {
                        "1 ms batches, normal priority: the DUT polls inline in the generator's softirqs".into()
                    } else {
                        "in-kernel pacing at SCHED_IDLE for a thread with one class (it shares a CPU with the DUT's NAPI or RPS work: it spins only in time the DUT leaves idle, so that CPU reads busy and the DUT's share is its kthread's row), else 200 us batches, normal priority".into()
                    },
                ));
                notice(
                    &mut ctx.notices,
                    "line-rate back end",
                    "frames made in the kernel (XDP live frames through BPF_PROG_RUN) and counted by an XDP program at the sink: latency is not measured (points carry none), and each class is sent at a constant rate, frame by frame (in-kernel pacing) or in batches of 200 us to 1 ms (pattern = \"poisson\" is not followed)",
                );
                return Ok((
                    Engine::LineRate {
                        lr: Box::new(lr),
                        apart,
                        inline_dut,
                    },
                    notes,
                ));
            }
            Err(e) => notice(
                &mut ctx.notices,
                "line-rate back end",
                format!("cannot run here: {e}; the paced UDP back end was used"),
            ),
        }
    }
    let ports: Vec<u16> = s.traffic.classes.iter().map(|c| c.port).collect();
    let sink =
        Sink::start(&lab.sink_ns, &ports, &cfg.settings.sink_cpus).context("starting the sink")?;
    Ok((Engine::Paced(sink), notes))
}

/// Why the search stopped, refined: `converged_generator_limited` when every load above
/// the answer failed only because the generator could not offer it (no excess loss):
/// then the answer is the testbed's sending limit, not a DUT loss limit.
fn search_stopped(stopped: &str, answer: f64, points: &[PointResult], threshold: f64) -> String {
    let above: Vec<&PointResult> = points
        .iter()
        .filter(|p| p.requested_pps > answer && !passes(p, threshold))
        .collect();
    if stopped == "converged"
        && !above.is_empty()
        && above.iter().all(|p| p.loss_ratio() <= threshold)
    {
        "converged_generator_limited".into()
    } else {
        stopped.to_string()
    }
}

/// A load passes when loss is within the threshold and the generator offered it
/// (at least 99% of the request).
pub fn passes(p: &PointResult, threshold: f64) -> bool {
    p.loss_ratio() <= threshold && p.offered_pps >= 0.99 * p.requested_pps
}

fn findings_of(points: &[PointResult]) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for p in points {
        for f in p.observation.iter().flat_map(|o| o.findings.iter()) {
            if !out.iter().any(|g| g.rule == f.rule) {
                out.push(f.clone());
            }
        }
    }
    out
}

/// Whether the line-rate generator's CPUs do no DUT work (threaded NAPI elsewhere, no
/// RPS there): only then may it spin at a high priority (nice -10) or run SCHED_FIFO;
/// otherwise it would take CPU time from the DUT it measures, and it spins only at
/// SCHED_IDLE.
fn line_rate_apart(s: &scenario::DutSettings) -> bool {
    let dut_cpus: Vec<u32> = s.napi_cpus.iter().chain(&s.rps_cpus).copied().collect();
    s.napi == scenario::NapiContext::Threaded
        && !s.napi_cpus.is_empty()
        && s.generator_cpus.iter().all(|c| !dut_cpus.contains(c))
}

/// How a line-rate generator thread with `classes` classes keeps its schedule.
fn line_rate_pacing(apart: bool, inline_dut: bool, classes: usize) -> Pacing {
    match (apart, inline_dut, classes) {
        (true, _, 1) => Pacing::InKernel { beside_dut: false },
        (true, _, _) => Pacing::Batches {
            fifo: Some(LR_GEN_FIFO),
            inline_dut,
        },
        // Beside a threaded poller or RPS work (not inline): see Pacing::InKernel.
        (false, false, 1) => Pacing::InKernel { beside_dut: true },
        (false, _, _) => Pacing::Batches {
            fifo: None,
            inline_dut,
        },
    }
}

/// The generator threads of one point.
enum Gens {
    Paced(Vec<std::thread::JoinHandle<std::io::Result<GenResult>>>),
    LineRate(Vec<std::thread::JoinHandle<std::io::Result<LrGenResult>>>),
}

/// The line-rate counters at the start of a point.
struct LineRateStart {
    counts: linerate::Counts,
    sink_cpu_ns: Option<u64>,
    at: Instant,
}

/// What one point measures.
#[derive(Clone, Copy, Debug)]
struct PointSpec {
    load: f64,
    role: PointRole,
    repeat: u32,
    duration_s: f64,
}

/// Measures one point; None when the run was stopped during it.
fn measure_point(
    ctx: &mut Ctx<'_>,
    lab: &Lab,
    engine: &mut Engine,
    cfg: &Configuration,
    spec: PointSpec,
) -> Result<Option<PointResult>> {
    let PointSpec {
        load,
        role,
        repeat,
        duration_s,
    } = spec;
    let s = ctx.scenario;
    let m = &s.measurement;
    let stop = ctx.opts.stop.clone();
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let point = ctx.next_point;
    ctx.next_point += 1;
    let warmup = Duration::from_secs_f64(m.warmup_s);
    let duration = Duration::from_secs_f64(duration_s);
    // One generator thread per ingress queue, on generator_cpus[queue] (XPS steers
    // its packets to that queue; XDP frames land on the RX queue of the sending CPU
    // modulo the queue count), with the classes of that queue.
    let queues = s.topology.ingress_queues.max(1);
    let gcpus = &cfg.settings.generator_cpus;
    let mut specs = Vec::new();
    for q in 0..queues {
        let classes: Vec<ClassSpec> = s
            .traffic
            .classes
            .iter()
            .enumerate()
            .filter(|(_, c)| c.queue == q)
            .map(|(i, c)| ClassSpec {
                id: i as u16,
                port: c.port,
                size: c.size,
                share: c.share,
                pattern: c.pattern,
            })
            .collect();
        let share: f64 = classes.iter().map(|c| c.share).sum();
        if classes.is_empty() || share <= 0.0 {
            continue;
        }
        specs.push(GenSpec {
            ns: lab.gen_ns.clone(),
            dst: SINK_ADDR,
            classes: classes
                .into_iter()
                .map(|mut c| {
                    c.share /= share;
                    c
                })
                .collect(),
            rate_pps: load * share,
            warmup,
            duration,
            point,
            cpus: vec![gcpus[q as usize % gcpus.len()]],
            seed: s
                .traffic
                .seed
                .wrapping_add(u64::from(point))
                .wrapping_add(u64::from(q) << 32),
        });
    }
    let used_cpus: Vec<u32> = specs.iter().flat_map(|g| g.cpus.clone()).collect();
    let class_ids: Vec<Vec<u16>> = specs
        .iter()
        .map(|g| g.classes.iter().map(|c| c.id).collect())
        .collect();
    let mut lr_start = None;
    let before;
    let gens = match &mut *engine {
        Engine::Paced(sink) => {
            sink.begin(point);
            before = counters::snapshot(lab);
            Gens::Paced(
                specs
                    .into_iter()
                    .map(|spec| start_generator(spec, stop.clone()))
                    .collect(),
            )
        }
        Engine::LineRate {
            lr,
            apart,
            inline_dut,
        } => {
            lr.begin(point);
            before = counters::snapshot(lab);
            lr_start = Some(LineRateStart {
                counts: lr.counts().context("reading the line-rate BPF counters")?,
                sink_cpu_ns: lr.sink_cpu_ns(),
                at: Instant::now(),
            });
            Gens::LineRate(
                specs
                    .into_iter()
                    .map(|g| {
                        let spec = LrGenSpec {
                            classes: g
                                .classes
                                .iter()
                                .map(|c| LrClass {
                                    id: c.id,
                                    port: c.port,
                                    size: c.size,
                                    share: c.share,
                                })
                                .collect(),
                            rate_pps: g.rate_pps,
                            warmup,
                            duration,
                            point,
                            pacing: line_rate_pacing(*apart, *inline_dut, g.classes.len()),
                            cpus: g.cpus,
                        };
                        lr.start_generator(spec, stop.clone())
                    })
                    .collect(),
            )
        }
    };
    // The observer covers the measurement window (warm-up excluded).
    let t_measure = Instant::now() + warmup + Duration::from_millis(5);
    while Instant::now() < t_measure && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10).min(t_measure - Instant::now()));
    }
    let measure_wall_ms = now_ms();
    let observer = match &ctx.opts.observer {
        Some(exe) if !stop.load(Ordering::Relaxed) => {
            let o = Observer::start(exe, &lab.dut_ns, duration, m.trace);
            if o.is_none() {
                notice(
                    &mut ctx.notices,
                    "DUT observation",
                    format!("could not start `{} observe` in the DUT namespace: points carry no Observation", exe.display()),
                );
            }
            o
        }
        _ => None,
    };
    let (g, lr_gen) = match gens {
        Gens::Paced(handles) => {
            let mut parts = Vec::new();
            for h in handles {
                parts.push(
                    h.join()
                        .map_err(|_| anyhow::anyhow!("the generator thread panicked"))?
                        .context("generator")?,
                );
            }
            (
                Some(GenResult::merge(
                    &parts,
                    &class_ids,
                    s.traffic.classes.len(),
                )),
                None,
            )
        }
        Gens::LineRate(handles) => {
            let mut parts = Vec::new();
            for h in handles {
                parts.push(
                    h.join()
                        .map_err(|_| anyhow::anyhow!("the line-rate generator thread panicked"))?
                        .context("line-rate generator (XDP live frames)")?,
                );
            }
            (None, Some(LrGenResult::merge(&parts)))
        }
    };
    let interrupted =
        g.as_ref().is_some_and(|g| g.interrupted) || lr_gen.as_ref().is_some_and(|g| g.interrupted);
    if interrupted || stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    if let Some(e) = lr_gen.as_ref().and_then(|g| g.first_error.clone()) {
        notice(
            &mut ctx.notices,
            "line-rate generator errors",
            format!("some BPF_PROG_RUN calls failed (their frames were not sent; the point's offered load shows it): {e}"),
        );
    }
    std::thread::sleep(Duration::from_millis(m.drain_ms));
    let collected = match &*engine {
        Engine::Paced(sink) => Collected::Paced(sink.collect()?),
        Engine::LineRate { lr, .. } => {
            let start = lr_start.context("internal: line-rate point without a start")?;
            let counts = lr
                .counts()
                .context("reading the line-rate BPF counters")?
                .since(&start.counts);
            let wall = start.at.elapsed().as_nanos().max(1) as f64;
            let busy = match (start.sink_cpu_ns, lr.sink_cpu_ns()) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / wall),
                _ => None,
            };
            Collected::LineRate { counts, busy }
        }
    };
    let after = counters::snapshot(lab);
    let observation = match observer {
        Some(o) => match o.finish(duration + Duration::from_secs(10), &stop) {
            Ok(obs) => {
                if !ctx.observer_offset_noted {
                    ctx.observer_offset_noted = true;
                    let off = obs.origin.started_unix_ms.saturating_sub(measure_wall_ms);
                    notice(
                        &mut ctx.notices,
                        "DUT observation window",
                        format!("each point's Observation comes from `napilab observe` run in the DUT namespace for the measurement's duration; it starts when that process has read the host (first point: {off} ms after the measurement window opened), so its window is shifted by about that much"),
                    );
                }
                Some(obs)
            }
            Err(e) => {
                notice(
                    &mut ctx.notices,
                    "DUT observation",
                    format!("a point has no Observation: {e}"),
                );
                None
            }
        },
        None => None,
    };
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let mut shared = counters::deltas(&before, &after);
    if let Collected::LineRate { .. } = collected {
        // The sink's own XDP_DROPs are how it discards what it counted, not loss.
        shared.retain(|(k, _)| !(k.starts_with(&lab.sink_dev) && k.contains("xdp_drops")));
    }
    let n = s.traffic.classes.len();
    let shared_counters = |loss_counters: &mut Vec<(String, u64)>| {
        for (k, v) in &shared {
            let k = if n > 1 {
                format!("{k} (all classes)")
            } else {
                k.clone()
            };
            loss_counters.push((k, *v));
        }
    };
    let (classes, sent, window, generator, sink_stats) = match (&collected, g, lr_gen) {
        (Collected::Paced(sk), Some(g), _) => {
            let classes: Vec<ClassResult> = s
                .traffic
                .classes
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let sc = &sk.classes[i];
                    let mut loss_counters = Vec::new();
                    if sc.socket_drops > 0 {
                        loss_counters.push((
                            format!("sink socket drops port {} (SO_MEMINFO)", c.port),
                            sc.socket_drops,
                        ));
                    }
                    shared_counters(&mut loss_counters);
                    ClassResult {
                        name: c.name.clone(),
                        packet_bytes: c.size,
                        sent: g.sent[i],
                        received: sc.received,
                        reordered: sc.reordered,
                        loss_counters,
                        latency: Some(sc.latency.summary()),
                    }
                })
                .collect();
            let window = if g.window_s > 0.0 {
                g.window_s
            } else {
                duration_s
            };
            let sent: u64 = g.sent.iter().sum();
            (
                classes,
                sent,
                window,
                g.engine_stats(&used_cpus),
                sk.engine_stats(&cfg.settings.sink_cpus),
            )
        }
        (Collected::LineRate { counts, busy }, _, Some(g)) => {
            let classes: Vec<ClassResult> = s
                .traffic
                .classes
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let mut loss_counters = Vec::new();
                    shared_counters(&mut loss_counters);
                    ClassResult {
                        name: c.name.clone(),
                        packet_bytes: c.size,
                        sent: counts.gen.get(i).map_or(0, |x| x[1]),
                        received: counts.sink.get(i).copied().unwrap_or(0),
                        // Frames carry no sequence numbers, and no departure times:
                        // neither reordering nor latency is measured.
                        reordered: 0,
                        loss_counters,
                        latency: None,
                    }
                })
                .collect();
            let window = if g.window_s > 0.0 {
                g.window_s
            } else {
                duration_s
            };
            let sent: u64 = classes.iter().map(|c| c.sent).sum();
            let emitted: u64 = counts.gen.iter().map(|x| x[0] + x[1]).sum();
            let ring_drops = shared
                .iter()
                .filter(|(k, _)| k.as_str() == format!("{} tx_dropped", lab.dut_out))
                .map(|(_, v)| *v)
                .sum();
            (
                classes,
                sent,
                window,
                g.engine_stats(&used_cpus, load, sent as f64 / window, emitted),
                linerate::sink_engine_stats(&cfg.settings.sink_cpus, *busy, ring_drops, counts),
            )
        }
        _ => anyhow::bail!("internal: generator and sink results of different back ends"),
    };
    Ok(Some(PointResult {
        role,
        requested_pps: load,
        offered_pps: sent as f64 / window,
        repeat,
        duration_s: window,
        classes,
        generator,
        sink: sink_stats,
        observation,
    }))
}

/// What the sink side gave for one point.
enum Collected {
    Paced(crate::traffic::SinkResult),
    LineRate {
        counts: linerate::Counts,
        /// On-CPU share of the sink's NAPI kthread over the point.
        busy: Option<f64>,
    },
}

/// Deletes namespaces even when the caller forgets (kept for `clean`).
pub fn namespaces_of(run_id: &str) -> Vec<String> {
    netns::list_namespaces()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| netns::run_id_of_ns(n) == Some(run_id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_rate_pacing_spins_beside_a_threaded_dut_only_at_idle_priority() {
        // Apart from the DUT: spin at nice -10 with one class, FIFO batches with more.
        assert_eq!(
            line_rate_pacing(true, false, 1),
            Pacing::InKernel { beside_dut: false }
        );
        assert!(matches!(
            line_rate_pacing(true, false, 2),
            Pacing::Batches { fifo: Some(_), .. }
        ));
        // Beside a threaded poller: paced at SCHED_IDLE, batches with several classes.
        assert_eq!(
            line_rate_pacing(false, false, 1),
            Pacing::InKernel { beside_dut: true }
        );
        assert_eq!(
            line_rate_pacing(false, false, 3),
            Pacing::Batches {
                fifo: None,
                inline_dut: false
            }
        );
        // The DUT polls inline in the generator's softirqs: batches, whatever the classes.
        assert_eq!(
            line_rate_pacing(false, true, 1),
            Pacing::Batches {
                fifo: None,
                inline_dut: true
            }
        );
    }
}
