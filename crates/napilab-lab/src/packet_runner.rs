//! The packet topologies' configurations (router, ap, many-napi): build the three namespaces,
//! start the traffic engine (paced UDP or line-rate XDP frames), sweep the offered loads
//! with repeats, search the maximum throughput (MLRsearch or the RFC 2544 bisection),
//! tear down. The runner (crate::runner) calls [`run_configuration`] for them and
//! crate::server_runner for the server topology.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use napilab_core::scenario::{self, Backend, Configuration, SearchMethod};
use napilab_core::{ClassResult, ConfigurationResult, PacketCapacityProbe, PointResult, PointRole};
use napilab_experiment::configuration::{self, PointSpec, Probed, SearchSetup, Testbed};
use napilab_experiment::maximum::{MeasuredTrial, PacketTestbed};

use crate::counters;
use crate::disturbance;
use crate::linerate::{self, LineRate, LrClass, LrGenResult, LrGenSpec, Pacing, PACED_NICE};
use crate::run_context::{notice, now_ms, Ctx, Observer, SysctlGuard};
use crate::topology::{Lab, SINK_ADDR};
use crate::traffic::{start_generator, ClassSpec, GenResult, GenSpec, Sink};

/// SCHED_FIFO priority of line-rate generator threads: below the sink's NAPI thread
/// ([`crate::topology::SINK_NAPI_FIFO`]), so that the sink always gets its CPU first.
/// Tried the other way round (generator 15 above the sink's 10): the sink's ring then
/// overflowed at 250-400 kpps and the generator's frames stayed in flight longer,
/// each call costing more (generator 33-69% busy at 108-500 kpps instead of 22-26%).
pub const LR_GEN_FIFO: u32 = 5;

/// The load the capacity probe requests: above what either back end's generator offers
/// on veth (the line-rate one offered 6.2-7.0 Mpps from one core at full speed,
/// docs/results/lab.md "Line-rate benchmark"), so that the generator runs at its own
/// capacity and the DUT is overloaded.
pub const PROBE_REQUEST_PPS: f64 = 20e6;

/// The capacity probe's window, seconds (after the scenario's warm-up): long enough
/// for the DUT's queues to fill and its forwarded rate to settle, short beside a search.
pub const PROBE_S: f64 = 1.0;

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

/// One configuration on the lab through the experiment layer's loop
/// ([`napilab_experiment::configuration::run`]): namespaces, sysctls and the traffic
/// engine, the sweep, the search, teardown. Returns the result and whether the run was
/// stopped.
pub(crate) fn run_configuration(
    ctx: &mut Ctx<'_>,
    run_id: &str,
    cfg: &Configuration,
    per_config: u64,
) -> Result<(ConfigurationResult, bool)> {
    let plan = configuration::Plan::of_scenario(ctx.scenario);
    let pos0 = ctx.bar.position();
    let mut testbed = LabPackets {
        ctx: &mut *ctx,
        run_id,
        built: None,
    };
    let outcome = configuration::run(&mut testbed, cfg, &plan)?;
    ctx.bar.set_position(pos0 + per_config);
    Ok((outcome.result, outcome.stopped))
}

/// The lab as a packet testbed: each configuration built on its own three namespaces,
/// each point measured on them with the machine's disturbance readings.
struct LabPackets<'c, 'a> {
    ctx: &'c mut Ctx<'a>,
    run_id: &'c str,
    built: Option<Built>,
}

/// A configuration as built on the lab. Fields drop in order: the engine (its BPF
/// programs detached, its sink thread stopped) before the namespaces it uses, the
/// sysctls reverted last.
struct Built {
    engine: Engine,
    lab: Lab,
    sysctls: SysctlGuard,
    cfg: Configuration,
    lab_cpus: Vec<u32>,
}

impl<'a> LabPackets<'_, 'a> {
    fn built(&mut self) -> Result<(&mut Ctx<'a>, &mut Built)> {
        match self.built.as_mut() {
            Some(b) => Ok((&mut *self.ctx, b)),
            None => {
                anyhow::bail!("internal: a point was asked for before its configuration was built")
            }
        }
    }
}

impl Testbed for LabPackets<'_, '_> {
    type Configuration = Configuration;

    fn build(&mut self, cfg: &Configuration) -> Result<Vec<(String, String)>> {
        let s = self.ctx.scenario;
        let (sysctls, sysctl_notes) =
            SysctlGuard::apply(self.run_id, cfg, &self.ctx.opts.journal_dir)?;
        let lab = Lab::build(self.run_id, &s.topology, &cfg.settings).with_context(|| {
            if s.topology.kind == scenario::TopologyKind::ManyNapi {
                format!(
                    "building the namespaces and a veth with napi_instances = {} queues (configuration {}: lower it if the kernel refuses)",
                    cfg.settings.napi_instances, cfg.name
                )
            } else {
                "building the namespaces and veth links".to_string()
            }
        })?;
        for w in &lab.warnings {
            notice(
                &mut self.ctx.notices,
                format!("configuration {}", cfg.name),
                w.clone(),
            );
        }
        let (engine, engine_notes) = start_engine(self.ctx, &lab, cfg, s.traffic.backend)?;
        let mut settings = vec![
            (
                "topology".to_string(),
                match s.topology.kind {
                    scenario::TopologyKind::Ap => format!("ap {:?}", s.topology.direction),
                    other => other.as_str().to_string(),
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
        self.built = Some(Built {
            engine,
            lab,
            sysctls,
            cfg: cfg.clone(),
            lab_cpus: lab_cpus(&cfg.settings),
        });
        Ok(settings)
    }

    /// One [`PROBE_S`] trial at [`PROBE_REQUEST_PPS`] with the configuration's current
    /// engine: what the generator offered is its capacity here (it falls short of the
    /// request), what reached the sink the DUT's first estimate.
    fn probe_capacity(&mut self) -> Result<Probed> {
        let (ctx, b) = self.built()?;
        let backend = match &b.engine {
            Engine::LineRate { .. } => "line-rate",
            Engine::Paced(_) => "paced",
        };
        ctx.bar
            .set_message(format!("{} capacity probe ({backend})", b.cfg.name));
        let spec = PointSpec {
            load_pps: PROBE_REQUEST_PPS,
            role: PointRole::Search,
            repeat: 0,
            duration_s: PROBE_S,
        };
        let Some(p) = measure_point(ctx, &b.lab, &mut b.engine, &b.cfg, spec)? else {
            return Ok(Probed::Stopped);
        };
        let forwarded = p.delivered_pps();
        let short = p.offered_pps < 0.99 * p.requested_pps;
        Ok(Probed::Measured(PacketCapacityProbe {
            method: format!(
                "one {PROBE_S} s trial at {PROBE_REQUEST_PPS:.0} pkt/s requested, {backend} back end"
            ),
            requested_pps: p.requested_pps,
            offered_pps: p.offered_pps,
            forwarded_pps: forwarded,
            generator_capacity_pps: short.then_some(p.offered_pps),
            generator_limited: forwarded >= 0.99 * p.offered_pps,
        }))
    }

    fn measure(&mut self, points: &[PointSpec]) -> Result<Vec<PointResult>> {
        let (ctx, b) = self.built()?;
        let mut out = Vec::new();
        for &spec in points {
            ctx.bar
                .set_message(format!("{} @ {:.0} pps", b.cfg.name, spec.load_pps));
            match measure_point(ctx, &b.lab, &mut b.engine, &b.cfg, spec)? {
                Some(p) => {
                    out.push(p);
                    ctx.bar.inc(1);
                }
                None => break,
            }
        }
        Ok(out)
    }

    fn prepare_search(&mut self) -> Result<SearchSetup> {
        let s = self.ctx.scenario;
        let search_backend = s.measurement.search_backend.unwrap_or(s.traffic.backend);
        if search_backend == s.traffic.backend {
            return Ok(SearchSetup {
                settings: Vec::new(),
                sweep_verdicts_hold: true,
            });
        }
        // The sweep's engine measured latency (paced); the search measures throughput
        // with the other one. Sweep verdicts do not carry over: the paced generator
        // fails loads the DUT could carry, so the search starts from its own bounds.
        let Some(Built {
            engine,
            lab,
            sysctls,
            cfg,
            lab_cpus,
        }) = self.built.take()
        else {
            anyhow::bail!("internal: a search was asked for before its configuration was built");
        };
        // The old engine goes before the new one binds the same sink ports (on an
        // error, the namespaces and sysctls go with `lab` and `sysctls`).
        drop(engine);
        let (engine, notes) = start_engine(self.ctx, &lab, &cfg, search_backend)?;
        let mut settings: Vec<(String, String)> = notes
            .into_iter()
            .map(|(k, v)| (format!("search: {k}"), v))
            .collect();
        settings.push((
            "search back end".into(),
            match &engine {
                Engine::LineRate { .. } => "line-rate".into(),
                Engine::Paced(_) => "paced".into(),
            },
        ));
        self.built = Some(Built {
            engine,
            lab,
            sysctls,
            cfg,
            lab_cpus,
        });
        Ok(SearchSetup {
            settings,
            sweep_verdicts_hold: false,
        })
    }

    fn teardown(&mut self) -> Result<()> {
        let Some(Built {
            engine,
            mut lab,
            mut sysctls,
            ..
        }) = self.built.take()
        else {
            return Ok(());
        };
        // Detaches and unloads the BPF programs (line rate) or stops the sink thread
        // before the namespaces go.
        drop(engine);
        lab.teardown()
            .context("deleting the namespaces (run `napilab lab clean`)")?;
        sysctls.revert()
    }
}

/// Each search trial a point on the configuration's namespaces, with what the machine
/// took away during it.
impl PacketTestbed for LabPackets<'_, '_> {
    type Error = anyhow::Error;

    fn search_trial(
        &mut self,
        load: f64,
        duration_s: f64,
        search: u32,
    ) -> Result<Option<MeasuredTrial>> {
        let (ctx, b) = self.built()?;
        let m = &ctx.scenario.measurement;
        let of = match m.search_method {
            SearchMethod::Mlrsearch => format!(" {}/{}", search + 1, m.search_repeats),
            SearchMethod::Bisection => String::new(),
        };
        ctx.bar.set_message(format!(
            "{} search{of} @ {load:.0} pps, {duration_s} s",
            b.cfg.name
        ));
        let started = Instant::now();
        let before = disturbance::snapshot(Path::new("/"));
        let spec = PointSpec {
            load_pps: load,
            role: PointRole::Search,
            repeat: search,
            duration_s,
        };
        let point = measure_point(ctx, &b.lab, &mut b.engine, &b.cfg, spec)?;
        ctx.bar.inc(1);
        Ok(point.map(|point| {
            let after = disturbance::snapshot(Path::new("/"));
            let sent = point.classes.iter().map(|c| c.sent).sum();
            let late = disturbance::generator_late(&point.generator, sent);
            let short = point.offered_pps < 0.99 * point.requested_pps;
            let disturbance = disturbance::assess(
                &before,
                &after,
                &b.lab_cpus,
                LAB_KERNEL_THREADS,
                late,
                short,
            );
            MeasuredTrial {
                point,
                disturbance,
                wall_s: started.elapsed().as_secs_f64(),
            }
        }))
    }
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

/// Measures one point; None when the run was stopped during it.
fn measure_point(
    ctx: &mut Ctx<'_>,
    lab: &Lab,
    engine: &mut Engine,
    cfg: &Configuration,
    spec: PointSpec,
) -> Result<Option<PointResult>> {
    let PointSpec {
        load_pps: load,
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
    // many-napi: the warm-up lasts at least as long as the observer's start-up took
    // before (`observer_lead_s`, learnt from late first samples), as in the vpn
    // topology, because its trace-derived numbers need the observer's window to be the
    // point's.
    let warmup_s = if many_napi_topology(s) && ctx.opts.observe {
        m.warmup_s.max(ctx.observer_lead_s)
    } else {
        m.warmup_s
    };
    let warmup = Duration::from_secs_f64(warmup_s);
    let duration = Duration::from_secs_f64(duration_s);
    // One generator thread per ingress queue, on generator_cpus[queue] (XPS steers
    // its packets to that queue; XDP frames land on the RX queue of the sending CPU
    // modulo the queue count), with the classes of that queue.
    let queues = s.topology.ingress_queues.max(1);
    let many_napi = many_napi_topology(s);
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
            flows: if many_napi {
                crate::many_napi::flows_for(cfg.settings.napi_instances)
            } else {
                1
            },
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
    // The observer covers the measurement window (warm-up excluded): started now, it
    // loads its programs during the warm-up and takes its first sample when the window
    // opens (`--start-at`).
    let t_measure = Instant::now() + warmup + Duration::from_millis(5);
    let measure_wall_ms = now_ms() + (warmup + Duration::from_millis(5)).as_millis() as u64;
    let observer = if ctx.opts.observe && !stop.load(Ordering::Relaxed) {
        match Observer::start(&lab.dut_ns, duration, m.trace, Some(measure_wall_ms)) {
            Ok(o) => Some(o),
            Err(e) => {
                notice(
                    &mut ctx.notices,
                    "DUT observation",
                    format!("could not start the observer in the DUT namespace ({e}): points carry no Observation"),
                );
                None
            }
        }
    } else {
        None
    };
    while Instant::now() < t_measure && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10).min(t_measure - Instant::now()));
    }
    // The NAPI kthreads' counters at the window's opening and (below) its close.
    let kthreads_before = if many_napi {
        crate::many_napi::sample_kthreads(&lab.dut_in)
    } else {
        Vec::new()
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
    let kthreads_after = if many_napi {
        crate::many_napi::sample_kthreads(&lab.dut_in)
    } else {
        Vec::new()
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
                let off = obs.origin.started_unix_ms.saturating_sub(measure_wall_ms);
                if off > 0 && many_napi_topology(s) {
                    ctx.observer_lead_s = (warmup_s + off as f64 / 1000.0 + 0.2).min(10.0);
                }
                // Its first sample waits for the window; later than that only when
                // loading took longer than the warm-up.
                if !ctx.observer_offset_noted && off as f64 > 100.0 * duration_s {
                    ctx.observer_offset_noted = true;
                    notice(
                        &mut ctx.notices,
                        "DUT observation window",
                        format!("each point's Observation comes from the observer run on a thread in the DUT namespace for the measurement's duration, started at the warm-up's beginning and told to take its first sample when the window opens; a point's window opened {off} ms late (loading the programs took longer than warmup_s): give a longer warm-up"),
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
    // The trace tier's polls and NET_RX time count only when its window is the
    // point's: an observer that opened more than a tenth of the window late saw part of
    // the traffic, and its numbers set beside the kthreads' would mislead.
    let late_ms = |o: &napilab_core::Observation| {
        o.origin.started_unix_ms.saturating_sub(measure_wall_ms) as f64
    };
    let traced = observation
        .as_ref()
        .filter(|o| late_ms(o) <= 100.0 * duration_s);
    if many_napi && observation.is_some() && traced.is_none() {
        notice(
            &mut ctx.notices,
            "many-napi trace window",
            "at some points the DUT's observer opened more than a tenth of the window late: their polls by context, instances polled and forwarding CPU are left out (give a longer warmup_s)",
        );
    }
    let many_napi = many_napi.then(|| {
        let delivered = classes.iter().map(|c| c.received).sum();
        crate::many_napi::point(
            cfg.settings.napi_instances,
            &lab.dut_in,
            &kthreads_before,
            &kthreads_after,
            traced,
            delivered,
        )
    });
    if many_napi.as_ref().is_some_and(|p| p.lost_polls > 0) {
        notice(
            &mut ctx.notices,
            "many-napi polls undercounted",
            "the trace tier's per-CPU table of (NAPI instance, context) pairs was full at some points (lost polls > 0 in their row): the report shows \"undercounted\" instead of their polls per second, packets per poll and instances polled (run.json keeps the counted values beside lost_polls)",
        );
    }
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
        many_napi,
    }))
}

fn many_napi_topology(s: &scenario::Scenario) -> bool {
    s.topology.kind == scenario::TopologyKind::ManyNapi
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
