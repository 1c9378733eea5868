//! One configuration of the `server` topology: build it, apply the interrupt mode,
//! sweep the offered request rates (repeats), search the highest rate whose p99 meets
//! the objective (one bisection per search repeat, the answers' Student-t interval),
//! revert and tear down. Each point restarts the server, so its statistics (epoll
//! returns, busy-poll loops, service time) cover that window alone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use napilab_core::requests::CAPACITY_PROBE;

use napilab_core::scenario::{
    Configuration, Measurement, RequestWorkload, ServerEngine, ServerMode,
};
use napilab_core::trace::ExecContext;
use napilab_core::{
    CapacityProbe, ConfigurationResult, LatencySummary, Observation, PointRole, RequestPointResult,
    RequestResults, ServerSummary,
};
use napilab_experiment::request_search::RequestTestbed;
use napilab_experiment::requests::{self, Capacity, RequestBench};

use crate::request::epoll::{self, EpollMode};
use crate::request::keyspace::Keyspace;
use crate::request::loadgen::{self, LoadConfig};
use crate::request::memcached::{self, in_namespace, Memcached, MemcachedConfig};
use crate::request::results::{LatencyPercentiles, LoadResult, LoopKind, ServerStats};
use crate::request::server::{KvServer, ServerConfig};
use crate::run_context::{notice, Ctx, Observer, SysctlGuard};
use crate::server_topology::ServerLab;

/// The mode journals of a run go to `<journal_dir>/lab-<run_id><this>` (`lab clean`
/// removes them once the run's namespaces are gone).
pub(crate) const MODE_JOURNALS_SUFFIX: &str = "-server";

/// Progress-bar length of one configuration: sweep points plus the searches' trials.
pub fn points_per_configuration(w: &RequestWorkload, m: &Measurement) -> u64 {
    u64::from(w.needs_capacity_probe())
        + (w.loads_qps.len() + w.loads_of_capacity.len()) as u64 * u64::from(m.repeats)
        + if w.search {
            u64::from(w.search_iterations) * u64::from(m.search_repeats)
        } else {
            0
        }
}

/// What a point needs that does not change within a configuration.
struct Bench<'a> {
    lab: &'a ServerLab,
    workload: &'a RequestWorkload,
    engine: ServerEngine,
    mode: EpollMode,
    server_cpus: Vec<u32>,
    client_cpus: Vec<u32>,
    /// Observe the DUT during each measured point.
    observe: bool,
}

/// Why `engine` cannot run `mode` here, from outside the namespaces.
fn not_runnable_outside(engine: ServerEngine, mode: ServerMode) -> Option<String> {
    match engine {
        ServerEngine::Memcached if mode.needs_epoll_params() => Some(format!(
            "memcached cannot run {}: it sets no per-epoll busy-poll parameters (EPIOCSPARAMS); napilab's server does",
            mode.as_str()
        )),
        ServerEngine::Memcached => memcached::find_binary().err(),
        ServerEngine::Napilab => None,
    }
}

pub(crate) fn run_configuration(
    ctx: &mut Ctx<'_>,
    run_id: &str,
    cfg: &Configuration,
) -> Result<(ConfigurationResult, bool)> {
    let s = ctx.scenario;
    let w = s
        .requests
        .as_ref()
        .context("the server topology needs [requests] (the scenario check should have said so)")?;
    let set = &cfg.settings;
    let server_cpus = if set.server_cpus.is_empty() {
        vec![ctx.ncpus.saturating_sub(1)]
    } else {
        set.server_cpus.clone()
    };
    let mut settings = vec![("topology".to_string(), "server".to_string())];
    settings.extend(set.server_pairs());
    settings.retain(|(k, _)| k != "server_cpus");
    settings.push((
        "server_cpus".into(),
        napilab_core::scenario::cpu_list(&server_cpus),
    ));
    let mut requests = RequestResults {
        engine: set.server.as_str().into(),
        mode: set.mode.as_str().into(),
        slo_p99_us: w.slo_p99_us,
        ..Default::default()
    };
    let mut result = ConfigurationResult::new(&cfg.name, settings);
    // A mode this kernel or server cannot run is a result, not an error.
    let not_runnable = |ctx: &mut Ctx<'_>, why: String| {
        notice(
            &mut ctx.notices,
            format!("configuration {}", cfg.name),
            format!("not runnable: {why}"),
        );
        RequestResults {
            not_runnable: Some(why),
            ..requests.clone()
        }
    };
    if let Some(why) = not_runnable_outside(set.server, set.mode) {
        result.requests = Some(not_runnable(ctx, why));
        return Ok((result, false));
    }
    let mode = EpollMode::named(set.mode.as_str()).map_err(anyhow::Error::msg)?;
    let (mut sysctls, sysctl_notes) = SysctlGuard::apply(run_id, cfg, &ctx.opts.journal_dir)?;
    for n in sysctl_notes {
        result.settings.push(("sysctl".into(), n));
    }
    let mut lab = ServerLab::build(run_id, &s.topology)
        .context("building the client and DUT namespaces and their veth pair")?;
    result
        .settings
        .push(("server_device".into(), lab.dut_dev.clone()));
    // The kernel checks need the DUT's NAPI instances: from inside its namespace.
    let check = {
        let mode = mode.clone();
        in_namespace(&lab.dut_ns, move || Ok(epoll::check_supported(&mode)))
            .unwrap_or_else(|e| Err(format!("checking the mode in the DUT namespace: {e}")))
    };
    if let Err(why) = check {
        result.requests = Some(not_runnable(ctx, why));
        lab.teardown()
            .context("deleting the namespaces (run `napilab lab clean`)")?;
        sysctls.revert()?;
        return Ok((result, false));
    }
    let journals = ctx.opts.journal_dir.join(format!(
        "{}{run_id}{MODE_JOURNALS_SUFFIX}",
        crate::run_context::JOURNAL_PREFIX
    ));
    let applied = lab
        .apply_mode(set.mode, &server_cpus, &journals)
        .map_err(|e| anyhow::anyhow!("applying mode {}: {e}", set.mode.as_str()))?;
    for (k, v) in applied.changes {
        result.settings.push((format!("mode: {k}"), v));
    }
    let bench = Bench {
        lab: &lab,
        workload: w,
        engine: set.server,
        mode,
        server_cpus,
        client_cpus: set.generator_cpus.clone(),
        observe: ctx.opts.observe,
    };
    let stopped = measure_all(ctx, &bench, cfg, &mut requests)?;
    result.findings = napilab_core::explain::findings_of(
        requests
            .points
            .iter()
            .filter_map(|p| p.observation.as_ref()),
    );
    result.requests = Some(requests);
    lab.teardown()
        .context("reverting the mode and deleting the namespaces (run `napilab lab clean`)")?;
    sysctls.revert()?;
    Ok((result, stopped))
}

/// The configuration's capacity probe, sweep and searches: the experiment layer's
/// request loop ([`napilab_experiment::requests::run`]) on the lab. Returns whether the
/// run was stopped.
fn measure_all(
    ctx: &mut Ctx<'_>,
    bench: &Bench<'_>,
    cfg: &Configuration,
    out: &mut RequestResults,
) -> Result<bool> {
    let m = &ctx.scenario.measurement;
    let w = bench.workload;
    let plan = requests::Plan {
        loads_qps: w.loads_qps.clone(),
        loads_of_capacity: w.loads_of_capacity.clone(),
        repeats: m.repeats,
        search: w.search,
        search_max_qps: w.search_max_qps,
        search_iterations: w.search_iterations,
        search_repeats: m.search_repeats,
        confidence: m.confidence_level,
    };
    let mut testbed = LabRequests {
        ctx: &mut *ctx,
        bench,
        name: &cfg.name,
    };
    requests::run(&mut testbed, &plan, out).map_err(|e| match e {
        requests::Error::Testbed(e) => e,
        requests::Error::Plan(why) => anyhow::anyhow!("configuration {}: {why}", cfg.name),
    })
}

/// The lab as the maximum-rate search's testbed: each point a window of the request
/// load on the configuration's namespaces.
struct LabRequests<'c, 'a, 'b> {
    ctx: &'c mut Ctx<'a>,
    bench: &'b Bench<'b>,
    name: &'b str,
}

impl RequestTestbed for LabRequests<'_, '_, '_> {
    type Error = anyhow::Error;

    fn request_point(
        &mut self,
        qps: f64,
        role: PointRole,
        search: u32,
    ) -> Result<Option<RequestPointResult>> {
        let repeats = self.ctx.scenario.measurement.search_repeats;
        self.ctx.bar.set_message(format!(
            "{} search {}/{repeats} @ {qps:.0} requests/s",
            self.name,
            search + 1,
        ));
        let p = measure_point(self.ctx, self.bench, qps, role, search)?;
        if p.is_some() {
            self.ctx.bar.inc(1);
        }
        Ok(p)
    }
}

impl RequestBench for LabRequests<'_, '_, '_> {
    fn probe_capacity(&mut self) -> Result<Capacity> {
        self.ctx
            .bar
            .set_message(format!("{} capacity probe", self.name));
        let Some(probe) = probe_capacity(self.ctx, self.bench)? else {
            return Ok(Capacity::Stopped);
        };
        self.ctx.bar.inc(1);
        if probe.achieved_qps.is_nan() || probe.achieved_qps < 1.0 {
            anyhow::bail!(
                "configuration {}: the capacity probe ({CAPACITY_PROBE}, {} connections) got no replies from the {} server: check that it starts in the DUT namespace (the probe's client said: {})",
                self.name,
                probe.connections,
                self.bench.engine.as_str(),
                probe.client_reasons.join("; ")
            );
        }
        Ok(Capacity::Measured(probe))
    }

    fn measure(&mut self, points: &[(f64, u32)]) -> Result<Vec<RequestPointResult>> {
        let mut out = Vec::new();
        for &(qps, repeat) in points {
            self.ctx
                .bar
                .set_message(format!("{} @ {qps:.0} requests/s", self.name));
            match measure_point(self.ctx, self.bench, qps, PointRole::Sweep, repeat)? {
                Some(p) => out.push(p),
                None => break,
            }
            self.ctx.bar.inc(1);
        }
        Ok(out)
    }
}

/// The configuration's capacity: [`CAPACITY_PROBE`] for the measurement's duration,
/// unobserved (its only figure is the reply rate). None when the run was stopped.
fn probe_capacity(ctx: &mut Ctx<'_>, bench: &Bench<'_>) -> Result<Option<CapacityProbe>> {
    let m = &ctx.scenario.measurement;
    let w = bench.workload;
    let Some(window) = run_window(ctx, bench, LoopKind::Closed, 0, false)? else {
        return Ok(None);
    };
    let load = window.load.map_err(|e| {
        anyhow::anyhow!("the load generator in the capacity probe ({CAPACITY_PROBE}): {e}")
    })?;
    Ok(Some(CapacityProbe {
        method: CAPACITY_PROBE.into(),
        connections: w.connections,
        duration_s: m.duration_s,
        achieved_qps: load.achieved_qps,
        latency: latency(&load.latency),
        client_limited: load.generator.limited,
        client_reasons: load.generator.reasons,
    }))
}

/// A running server of either engine.
enum RunningServer {
    Napilab(KvServer),
    Memcached(Memcached),
}

fn start_server(bench: &Bench<'_>, keyspace: Keyspace) -> Result<RunningServer, String> {
    let lab = bench.lab;
    match bench.engine {
        ServerEngine::Napilab => KvServer::start(ServerConfig {
            listen: lab.server_addr(),
            netns: Some(lab.dut_ns.clone()),
            workers: lab.queues as usize,
            cpus: bench.server_cpus.clone(),
            mode: bench.mode.clone(),
            keyspace,
        })
        .map(RunningServer::Napilab),
        ServerEngine::Memcached => {
            let server = Memcached::start(&MemcachedConfig {
                netns: lab.dut_ns.clone(),
                listen: lab.server_addr(),
                threads: lab.queues,
                cpus: bench.server_cpus.clone(),
                memory_mb: 1024,
                mode: bench.mode.clone(),
            })?;
            let addr = lab.server_addr();
            let stop = Arc::new(AtomicBool::new(false));
            in_namespace(&lab.client_ns, move || {
                loadgen::preload(addr, &keyspace, &stop).map_err(std::io::Error::other)
            })
            .map_err(|e| format!("preloading memcached: {e}"))?;
            Ok(RunningServer::Memcached(server))
        }
    }
}

fn stop_server(server: RunningServer, ns: &str) -> ServerStats {
    match server {
        RunningServer::Napilab(s) => s.stop(),
        RunningServer::Memcached(s) => s.stop(ns),
    }
}

/// One window at `qps`; None when the run was stopped.
fn measure_point(
    ctx: &mut Ctx<'_>,
    bench: &Bench<'_>,
    qps: f64,
    role: PointRole,
    repeat: u32,
) -> Result<Option<RequestPointResult>> {
    let observe = bench.observe;
    let Some(window) = run_window(ctx, bench, LoopKind::Open { qps }, repeat, observe)? else {
        return Ok(None);
    };
    let loaded = window
        .load
        .map_err(|e| anyhow::anyhow!("the load generator at {qps:.0} requests/s: {e}"))?;
    Ok(Some(point_result(
        bench,
        role,
        repeat,
        qps,
        ctx.scenario.measurement.duration_s,
        loaded,
        &window.stats,
        window.observation,
    )))
}

/// What one window of load left: the client's result, the server's statistics and
/// the DUT's Observation (when observed).
struct Window {
    load: Result<LoadResult, String>,
    stats: ServerStats,
    observation: Option<Observation>,
}

/// Starts the server, offers `kind` for the measurement's warm-up and duration
/// (observing the DUT when `observe`), stops the server. None when the run was stopped.
fn run_window(
    ctx: &mut Ctx<'_>,
    bench: &Bench<'_>,
    kind: LoopKind,
    repeat: u32,
    observe: bool,
) -> Result<Option<Window>> {
    let stop = ctx.opts.stop.clone();
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let m = &ctx.scenario.measurement;
    let w = bench.workload;
    let keyspace = Keyspace {
        keys: w.keys,
        value_size: w.value_size,
    };
    let server = start_server(bench, keyspace).map_err(|e| {
        anyhow::anyhow!(
            "starting the {} server in {}: {e}",
            bench.engine.as_str(),
            bench.lab.dut_ns
        )
    })?;
    let rate_salt = match kind {
        LoopKind::Open { qps } => qps as u64,
        LoopKind::Closed => 0,
    };
    let load = LoadConfig {
        server: bench.lab.server_addr(),
        netns: Some(bench.lab.client_ns.clone()),
        cpus: bench.client_cpus.clone(),
        threads: w.client_threads,
        connections: w.connections,
        kind,
        warmup: Duration::from_secs_f64(m.warmup_s),
        duration: Duration::from_secs_f64(m.duration_s),
        get_fraction: w.get_fraction,
        keyspace,
        timeout: Duration::from_millis(w.timeout_ms),
        seed: ctx.scenario.traffic.seed ^ rate_salt ^ (u64::from(repeat) << 32),
    };
    // The observer first, ready (its BPF programs loaded: seconds on a busy machine)
    // before the client starts; its window opens when the client's warm-up ends, so
    // that its window is the client's.
    let warmup = Duration::from_secs_f64(m.warmup_s);
    let observed = observe && bench.observe;
    let observer = observed.then(|| {
        Observer::start(
            &bench.lab.dut_ns,
            Duration::from_secs_f64(m.duration_s),
            m.trace,
            &stop,
        )
    });
    let (loaded, observation) = std::thread::scope(|scope| {
        let mut observer = observer;
        let client = scope.spawn(|| loadgen::run(&load, &stop));
        sleep_unless_stopped(warmup, &stop);
        if let Some(Ok(o)) = observer.as_mut() {
            o.open();
        }
        let loaded = client
            .join()
            .unwrap_or_else(|_| Err("the load generator panicked".into()));
        let observation =
            observer.map(|o| o.and_then(|o| o.finish(Duration::from_secs(20), &stop)));
        (loaded, observation)
    });
    let stats = stop_server(server, &bench.lab.dut_ns);
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let observation = match observation {
        Some(Ok(o)) => Some(o),
        Some(Err(e)) => {
            notice(
                &mut ctx.notices,
                "DUT observation",
                format!("a server point has no Observation: {e}"),
            );
            None
        }
        None => None,
    };
    Ok(Some(Window {
        load: loaded,
        stats,
        observation,
    }))
}

fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) {
    let end = std::time::Instant::now() + d;
    while std::time::Instant::now() < end && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn latency(p: &LatencyPercentiles) -> LatencySummary {
    LatencySummary {
        samples: p.samples,
        mean_us: p.mean_us,
        p50_us: p.p50_us,
        p90_us: p.p90_us,
        p99_us: p.p99_us,
        p999_us: p.p999_us,
        max_us: p.max_us,
        histogram: Vec::new(),
    }
}

fn server_summary(s: &ServerStats) -> ServerSummary {
    let mut napi_ids: Vec<u32> = s.workers.iter().flat_map(|w| w.napi_ids.clone()).collect();
    napi_ids.sort_unstable();
    napi_ids.dedup();
    ServerSummary {
        requests: s.requests,
        cpu_busy: s.workers.iter().map(|w| w.cpu_busy).sum(),
        busy_when_scheduled: s
            .workers
            .iter()
            .filter_map(|w| w.busy_when_scheduled)
            .reduce(f64::max),
        epoll_waits: s.workers.iter().map(|w| w.epoll.waits).sum(),
        epoll_returns_with_events: s.workers.iter().map(|w| w.epoll.returns_with_events).sum(),
        epoll_empty_returns: s.workers.iter().map(|w| w.epoll.empty_returns).sum(),
        busy_loop_iterations: s.workers.iter().map(|w| w.epoll.busy_loop_iterations).sum(),
        service_p99_us: s.service_time.as_ref().map(|t| t.p99_us),
        napi_ids,
        connections_off_napi: s.workers.iter().map(|w| w.connections_off_napi).sum(),
    }
}

#[allow(clippy::too_many_arguments)]
fn point_result(
    bench: &Bench<'_>,
    role: PointRole,
    repeat: u32,
    qps: f64,
    duration_s: f64,
    load: LoadResult,
    stats: &ServerStats,
    observation: Option<Observation>,
) -> RequestPointResult {
    let w = bench.workload;
    let lat = latency(&load.latency);
    let answered = load.errors == 0 && load.timeouts == 0;
    let meets_slo = answered
        && !load.generator.limited
        && load.latency.samples > 0
        && lat.p99_us <= w.slo_p99_us;
    let server = server_summary(stats);
    let split = observation
        .as_ref()
        .map(|o| cpu_split(o, &bench.server_cpus, &bench.lab.dut_dev, &server.napi_ids));
    let (cpu, busy, polls, empty) = split.unwrap_or_default();
    RequestPointResult {
        role,
        repeat,
        duration_s,
        requested_qps: qps,
        offered_qps: load.offered_qps,
        achieved_qps: load.achieved_qps,
        latency: lat,
        errors: load.errors,
        timeouts: load.timeouts,
        client_limited: load.generator.limited,
        client_reasons: load.generator.reasons.clone(),
        client_cpu_busy: load.generator.cpu_busy,
        meets_slo,
        server,
        cpu_per_request_us: (observation.is_some() && load.achieved_qps > 0.0)
            .then(|| busy / load.achieved_qps * 1e6),
        cpu,
        napi_polls_per_s: polls,
        empty_polls_per_s: empty,
        observation,
    }
}

type CpuSplit = (Vec<(String, f64)>, f64, Vec<(String, f64)>, Option<f64>);

/// The server CPUs' time by what ran there, their busy total, NAPI polls per second of
/// `dev` (or its `napi_ids`) by context and empty polls per second, averaged over the Observation's
/// intervals (weighted by length). /proc/stat's split is tick-sampled (`proc`); the
/// trace tier's softirq time by context, device IRQ time and polls are measured
/// (`trace`).
fn cpu_split(o: &Observation, cpus: &[u32], dev: &str, napi_ids: &[u32]) -> CpuSplit {
    let total: f64 = o.intervals.iter().map(|i| i.duration_s).sum();
    if total <= 0.0 {
        return Default::default();
    }
    let mut proc = [0.0f64; 5];
    let mut busy = 0.0;
    let mut by_context = [0.0f64; 5];
    let mut hardirq = 0.0;
    let mut polls = [0.0f64; 5];
    let mut empty = 0.0;
    let mut traced = false;
    for i in &o.intervals {
        let wgt = i.duration_s / total;
        for &c in cpus {
            if let Some(t) = i.cpu(c).and_then(|c| c.time.as_ref()) {
                for (slot, v) in [
                    t.user.value + t.nice.value,
                    t.system.value,
                    t.softirq.value,
                    t.irq.value,
                    t.steal.value,
                ]
                .into_iter()
                .enumerate()
                {
                    proc[slot] += wgt * v;
                }
                busy += wgt * t.busy();
            }
        }
        let Some(tr) = &i.trace else { continue };
        traced = true;
        for sr in tr.softirqs.iter().filter(|r| cpus.contains(&r.cpu)) {
            if let Some(k) = ExecContext::ALL.iter().position(|c| *c == sr.context) {
                by_context[k] += wgt * sr.share.value;
            }
        }
        hardirq += wgt
            * tr.cpus
                .iter()
                .filter(|c| cpus.contains(&c.cpu))
                .map(|c| c.hardirq.value)
                .sum::<f64>();
        // The trace tier sees every namespace's polls; the server's device is named
        // or, where the name could not be resolved, known by its NAPI ids.
        for n in tr
            .napi
            .iter()
            .filter(|n| n.device == dev || (n.device.is_empty() && napi_ids.contains(&n.napi_id)))
        {
            if let Some(k) = ExecContext::ALL.iter().position(|c| *c == n.context) {
                polls[k] += wgt * n.polls_per_s.value;
            }
            if i.duration_s > 0.0 {
                empty += wgt * n.work_histogram.first().copied().unwrap_or(0) as f64 / i.duration_s;
            }
        }
    }
    let mut split: Vec<(String, f64)> = ["user", "system", "softirq", "irq", "steal"]
        .iter()
        .zip(proc)
        .map(|(k, v)| (format!("{k} (proc ticks)"), v))
        .collect();
    let mut napi_polls = Vec::new();
    if traced {
        for (k, ctx) in ExecContext::ALL.iter().enumerate() {
            if by_context[k] > 0.0 {
                split.push((format!("{} (trace)", ctx.as_str()), by_context[k]));
            }
            if polls[k] > 0.0 {
                napi_polls.push((ctx.as_str().to_string(), polls[k]));
            }
        }
        split.push(("device hardirq (trace)".into(), hardirq));
    }
    (split, busy, napi_polls, traced.then_some(empty))
}
