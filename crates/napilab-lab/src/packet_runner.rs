//! The packet topologies' configurations (router, ap, many-napi): build the three namespaces,
//! start the traffic engine (paced UDP or line-rate XDP frames), sweep the offered loads
//! with repeats, search the maximum throughput (MLRsearch or the RFC 2544 bisection),
//! tear down. The runner (crate::runner) calls [`run_configuration`] for them and
//! crate::server_runner for the server topology.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use napilab_core::scenario::{self, Backend, Configuration, SearchMethod};
use napilab_core::{ConfigurationResult, PacketCapacityProbe, PointResult, PointRole};
use napilab_experiment::capacity_probe::{doubling_probe, After, Doubling};
use napilab_experiment::configuration::{self, PointSpec, Probed, SearchSetup, Testbed};
use napilab_experiment::maximum::{MeasuredTrial, PacketTestbed, MAX_TOP_PPS};

use crate::disturbance::{self, GeneratorEvidence};
use crate::linerate::{LineRate, LrClass, PACED_NICE};
use crate::packet_point::{measure_point, Engine, LR_GEN_FIFO};
use crate::run_context::{notice, Ctx, SysctlGuard};
use crate::topology::Lab;
use crate::traffic::Sink;

/// The load the capacity probe requests: above what either back end's generator offers
/// on veth (the line-rate one offered 6.2-7.0 Mpps from one core at full speed,
/// docs/results/lab.md "Line-rate benchmark"), so that the generator runs at its own
/// capacity and the DUT is overloaded.
pub const PROBE_REQUEST_PPS: f64 = 20e6;

/// The capacity probe's window, seconds (after the scenario's warm-up): long enough
/// for the DUT's queues to fill and its forwarded rate to settle, short beside a search.
pub const PROBE_S: f64 = 1.0;

/// The paced probe's first request and its most doublings (50 kpps .. 3.2 Mpps).
pub const PACED_PROBE_FROM_PPS: f64 = 50_000.0;
pub const PACED_PROBE_STEPS: u32 = 7;

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
    /// The run's limits, with this configuration's generator noise once probed.
    limits: disturbance::Limits,
    /// The generator's CPUs do none of the DUT's or the sink's work
    /// ([`disturbance::generator_shares_cpu`]).
    generator_alone: bool,
    /// The highest rate the search's generator has offered in this configuration.
    generator_reached: f64,
}

/// Sets `b`'s generator limit from the generator's lateness `late` in a light trial
/// ([`LIGHT_TRIAL_PPS`]), and notes the limits in the run, per configuration and
/// back end (the sweep's and the search's generators differ).
fn generator_noise(ctx: &mut Ctx<'_>, b: &mut Built, late: f64) {
    let backend = match b.engine {
        Engine::LineRate { .. } => "line-rate",
        Engine::Paced(_) => "paced",
    };
    b.limits = ctx.disturbance_limits.with_generator_noise(
        late,
        &format!("in a {PROBE_S} s trial at {LIGHT_TRIAL_PPS:.0} pkt/s ({backend} generator)"),
    );
    notice(
        &mut ctx.notices,
        format!("disturbance limits of {} ({backend})", b.cfg.name),
        b.limits.detail(),
    );
}

/// A load far below any DUT's capacity here: what a generator is late on at this load
/// is its own noise (the DUT does not hold it back). The paced probe's first trial.
const LIGHT_TRIAL_PPS: f64 = PACED_PROBE_FROM_PPS;

impl<'a> LabPackets<'_, 'a> {
    /// One light trial with the configuration's current engine, for its lateness.
    fn measure_generator_noise(&mut self) -> Result<()> {
        let (ctx, b) = self.built()?;
        let spec = PointSpec {
            load_pps: LIGHT_TRIAL_PPS,
            role: PointRole::Search,
            repeat: 0,
            duration_s: PROBE_S,
        };
        if let Some(p) = measure_point(ctx, &b.lab, &mut b.engine, &b.cfg, spec)? {
            generator_noise(ctx, b, disturbance::point_lateness(&p));
        }
        Ok(())
    }

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
            limits: self.ctx.disturbance_limits.clone(),
            generator_alone: generator_alone(self.ctx, cfg),
            generator_reached: 0.0,
        });
        Ok(settings)
    }

    /// One [`PROBE_S`] trial at [`PROBE_REQUEST_PPS`] with the configuration's current
    /// engine: what the generator offered is its capacity here (it falls short of the
    /// request), what reached the sink the DUT's first estimate.
    fn probe_capacity(&mut self) -> Result<Probed> {
        let (ctx, b) = self.built()?;
        let paced = matches!(b.engine, Engine::Paced(_));
        let backend = if paced { "paced" } else { "line-rate" };
        ctx.bar
            .set_message(format!("{} capacity probe ({backend})", b.cfg.name));
        // The generator's lateness in the probe's first trial, the lightest: what it
        // is late on its own, with the DUT far from holding it back.
        let mut first_late: Option<f64> = None;
        let mut trial = |ctx: &mut Ctx<'_>, load_pps: f64| {
            let spec = PointSpec {
                load_pps,
                role: PointRole::Search,
                repeat: 0,
                duration_s: PROBE_S,
            };
            let p = measure_point(ctx, &b.lab, &mut b.engine, &b.cfg, spec)?;
            if let (None, Some(p)) = (first_late, p.as_ref()) {
                first_late = Some(disturbance::point_lateness(p));
            }
            anyhow::Ok(p)
        };
        // The line-rate generator sends as fast as it can when asked for more: one trial
        // at an unreachable rate. The paced one keeps a schedule, and a schedule it
        // cannot follow leaves its measured window with departures from the warm-up (a
        // probe at 20 Mpps measured nothing): doubling trials from PACED_PROBE_FROM_PPS
        // while it follows the request and the DUT forwards what it offered.
        let (p, method) = if paced {
            let doubling = Doubling {
                from_pps: PACED_PROBE_FROM_PPS,
                max_trials: PACED_PROBE_STEPS,
                ceiling_pps: MAX_TOP_PPS,
            };
            let followed_and_forwarded = |load: f64, p: &PointResult| {
                if p.offered_pps < 0.95 * load {
                    // A trial the generator could not follow says less than the one
                    // before.
                    After::StopBefore
                } else if p.delivered_pps() < 0.99 * p.offered_pps {
                    After::StopHere
                } else {
                    After::Double
                }
            };
            let Some(p) = doubling_probe(doubling, |l| trial(ctx, l), followed_and_forwarded)?
            else {
                return Ok(Probed::Stopped);
            };
            if let Some(late) = first_late {
                generator_noise(ctx, b, late);
            }
            let method = format!(
                "{PROBE_S} s trials doubling from {PACED_PROBE_FROM_PPS:.0} pkt/s while the paced generator followed and the DUT forwarded everything, last {:.0} pkt/s requested",
                p.requested_pps
            );
            (p, method)
        } else {
            let Some(p) = trial(ctx, PROBE_REQUEST_PPS)? else {
                return Ok(Probed::Stopped);
            };
            self.measure_generator_noise()?;
            let method = format!(
                "one {PROBE_S} s trial at {PROBE_REQUEST_PPS:.0} pkt/s requested, line-rate back end"
            );
            (p, method)
        };
        let forwarded = p.delivered_pps();
        let short = p.generator_short();
        Ok(Probed::Measured(PacketCapacityProbe {
            method,
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
            limits: _,
            generator_alone,
            generator_reached: _,
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
            limits: self.ctx.disturbance_limits.clone(),
            generator_alone,
            generator_reached: 0.0,
        });
        // The search's generator is late on its own differently from the sweep's.
        self.measure_generator_noise()?;
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
            let generator = GeneratorEvidence::of(&point, b.generator_reached, b.generator_alone);
            b.generator_reached = b.generator_reached.max(point.offered_pps);
            let mut disturbance = disturbance::assess(
                &before,
                &after,
                &b.lab_cpus,
                LAB_KERNEL_THREADS,
                &generator,
                &b.limits,
            );
            disturbance.host_speed_ns = disturbance::host_speed_after_trial(&b.lab_cpus);
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

/// Whether the configuration's generator has its CPUs to itself; when it does not, the
/// run says once that its lateness and shortfall do not mark trials, and why.
fn generator_alone(ctx: &mut Ctx<'_>, cfg: &Configuration) -> bool {
    match disturbance::generator_shares_cpu(&cfg.settings) {
        None => true,
        Some(why) => {
            notice(
                &mut ctx.notices,
                format!("generator of {} not judged", cfg.name),
                format!("{why}: its lateness and shortfall there are the load of that work, recorded in each trial but marking none (docs/lab.md, \"Disturbed trials\")"),
            );
            false
        }
    }
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
