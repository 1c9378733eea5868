//! Calibrating the twin on lab measurements: a lab profile (a platform [`Profile`] plus
//! the testbed's engine costs) fitted from one configuration of a recorded lab run, and
//! the twin's prediction of the other configurations' maxima
//! (`napilab sim calibrate`, docs/sim.md "Lab scenarios and the veth-lab profile").
//!
//! What is fitted, from the points of the calibration configuration run by the engine
//! of its maximum search (threaded NAPI: its poll runs in a kthread of its own whose
//! CPU time the lab's Observation carries):
//! 1. The DUT's per-packet cost: its kthread's CPU per delivered packet at the highest
//!    load (overloaded points included: there its polls are full, which is what bounds
//!    a CPU-limited maximum); then the kthread's cost per wake-up (the twin's context
//!    switch), so the twin's kthread share matches what the lower loads show beyond
//!    the packets (least squares over the twin's wake-up counts, re-running the twin
//!    until it settles; not below 0).
//! 2. The testbed engines' marginal per-packet cost: the sink's CPU over the delivered
//!    rate in the calibration configuration; the generator's over the sent rate where
//!    it sent in batches beside a threaded DUT, in any configuration of the run (the
//!    twin charges the generator only where it shares the DUT poller's CPU). Runs made
//!    since the lab paces in the kernel beside a threaded DUT too have no such
//!    configuration: the generator spins between frames there, so its cost per frame
//!    is fitted together with its cost per idle run (the program counts them).
//! 3. The threaded poller's wake-up delay (`latency_ns.irq_delivery`): bisected so the
//!    twin's maximum-throughput search on the calibration configuration finds the
//!    lab's maximum. It stands for how long the DUT's NAPI kthread waits to run after
//!    the sender woke it; the lab loses packets when veth's 256-entry ring fills in
//!    that time. Softirq configurations drop it ([`TwinConfiguration::profile_for`]).
//!
//! Everything else in the profile is kept from the base profile and marked ASSUMED.

use napilab_core::scenario::{self, Scenario};
use napilab_core::{ConfigurationResult, HostIdentity, PointResult, PointRole, RunRecord};

use crate::from_scenario::{self, Testbed, TwinConfiguration, TwinPlan};
use crate::profile::{ParamSource, SourceKind};
use crate::{ConfigError, Profile, SimConfig};

mod joint;
pub use joint::*;

/// The shipped lab profile of this machine's veth lab.
pub const VETH_LAB_NAME: &str = "veth-lab";
pub const VETH_LAB_TOML: &str = include_str!("../profiles/veth-lab.toml");

/// A profile for lab scenarios: the platform costs and, optionally, the testbed's
/// engines (`[testbed]`, which plain [`Profile`] files do not have).
#[derive(Clone, Debug, PartialEq)]
pub struct LabProfile {
    pub profile: Profile,
    pub testbed: Option<Testbed>,
    /// The host the profile was fitted on (`[fitted_on_host]`, written by `napilab sim
    /// calibrate` from the run's record); None for profiles fitted before napilab kept
    /// the host identity.
    pub fitted_on_host: Option<HostIdentity>,
}

impl LabProfile {
    /// Parses a profile file that may carry a `[testbed]` table; `file` names it in
    /// errors.
    pub fn from_toml_str(text: &str, file: &str) -> Result<Self, ConfigError> {
        let mut table: toml::Table = toml::from_str(text)
            .map_err(|e| ConfigError::new(file, "(parse)", e.to_string().trim().to_string()))?;
        let testbed = match table.remove("testbed") {
            Some(v) => {
                let t: Testbed = v
                    .try_into()
                    .map_err(|e: toml::de::Error| ConfigError::new(file, "testbed", e.message()))?;
                for (field, x) in [
                    (
                        "testbed.generator_cycles_per_packet",
                        t.generator_cycles_per_packet,
                    ),
                    ("testbed.sink_cycles_per_packet", t.sink_cycles_per_packet),
                ] {
                    if !(x >= 0.0 && x.is_finite()) {
                        return Err(ConfigError::new(
                            file,
                            field,
                            "must be a finite number >= 0",
                        ));
                    }
                }
                Some(t)
            }
            None => None,
        };
        let fitted_on_host = match table.remove("fitted_on_host") {
            Some(v) => Some(v.try_into().map_err(|e: toml::de::Error| {
                ConfigError::new(file, "fitted_on_host", e.message())
            })?),
            None => None,
        };
        let profile: Profile = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::new(file, "(parse)", e.message()))?;
        profile.validate(file)?;
        Ok(LabProfile {
            profile,
            testbed,
            fitted_on_host,
        })
    }

    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(&name, "(file)", e.to_string()))?;
        Self::from_toml_str(&text, &name)
    }

    /// A profile file, the shipped `veth-lab`, or another shipped profile by name
    /// (without a testbed).
    pub fn load(name_or_path: &str) -> Result<Self, ConfigError> {
        let path = std::path::Path::new(name_or_path);
        if path.exists() {
            return Self::from_file(path);
        }
        if name_or_path == VETH_LAB_NAME {
            return Self::from_toml_str(VETH_LAB_TOML, "profiles/veth-lab.toml");
        }
        Profile::builtin(name_or_path).map(|profile| LabProfile {
            profile,
            testbed: None,
            fitted_on_host: None,
        })
    }

    /// The profile as TOML (without comments; [`Calibration::to_toml`] adds them).
    pub fn body(&self) -> String {
        let mut out = toml::to_string(&self.profile).unwrap_or_default();
        if let Some(t) = &self.testbed {
            out.push_str("\n[testbed]\n");
            out.push_str(&toml::to_string(t).unwrap_or_default());
        }
        if let Some(h) = &self.fitted_on_host {
            // A table of its own, so its nested tables follow it.
            let mut wrapper = toml::Table::new();
            if let Ok(v) = toml::Value::try_from(h) {
                wrapper.insert("fitted_on_host".into(), v);
                out.push('\n');
                out.push_str(&toml::to_string(&wrapper).unwrap_or_default());
            }
        }
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out
    }
}

/// What the lab measured for one configuration, as the fit uses it.
#[derive(Clone, Debug, PartialEq)]
pub struct LabFigures {
    pub name: String,
    pub max_pps: f64,
    pub stopped: String,
    /// The traffic engine the maximum was searched with (the generator's `backend`).
    pub engine: String,
    /// Points run by that engine with the DUT's NAPI kthread in their Observation,
    /// passing or not (an overloaded point shows the DUT's CPU at full batches).
    pub points: Vec<LabPoint>,
}

/// One lab point as the fit uses it; CPU shares are fractions of one CPU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LabPoint {
    pub delivered_pps: f64,
    pub sent_pps: f64,
    pub dut_share: f64,
    /// The generator thread's CPU (in-kernel pacing spins between frames: see
    /// `generator_in_kernel`).
    pub generator_share: f64,
    pub generator_in_kernel: bool,
    /// The sink's CPU: the line-rate sink is its veth's NAPI kthread (an XDP program);
    /// the paced sink is a socket thread plus that kthread.
    pub sink_share: f64,
}

fn err(file: &str, field: &str, msg: impl Into<String>) -> ConfigError {
    ConfigError::new(file, field, msg)
}

fn setting<'a>(c: &'a ConfigurationResult, key: &str) -> Option<&'a str> {
    c.settings
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// CPU share of the threads whose name starts with `prefix`, averaged over the
/// Observation's intervals.
fn thread_share(p: &PointResult, prefix: &str) -> Option<f64> {
    let o = p.observation.as_ref()?;
    let mut total = 0.0;
    let mut secs = 0.0;
    let mut seen = false;
    for iv in &o.intervals {
        let share: f64 = iv
            .threads
            .iter()
            .filter(|t| t.name.starts_with(prefix))
            .filter_map(|t| t.cpu.as_ref().map(|m| m.value))
            .inspect(|_| seen = true)
            .sum();
        total += share * iv.duration_s;
        secs += iv.duration_s;
    }
    (seen && secs > 0.0).then(|| total / secs)
}

/// The figures of configuration `name` of a lab run (`file` names the run in errors).
pub fn lab_figures(record: &RunRecord, name: &str, file: &str) -> Result<LabFigures, ConfigError> {
    if record.kind != napilab_core::RunKind::Lab {
        return Err(err(
            file,
            "kind",
            "this run was not measured by the lab: calibrate on a `napilab lab run` record",
        ));
    }
    let names = || {
        record
            .configurations
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let c = record
        .configurations
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| {
            err(
                file,
                "configurations",
                format!("no configuration {name:?}: the run has {}", names()),
            )
        })?;
    let max = c.max_throughput.as_ref().ok_or_else(|| {
        err(
            file,
            &format!("configurations[{name}].max_throughput"),
            "no maximum-throughput search in this configuration: measure with measurement.search = true",
        )
    })?;
    if setting(c, "napi") != Some("threaded") {
        return Err(err(
            file,
            &format!("configurations[{name}]"),
            "calibrate on a configuration with napi = \"threaded\": only there does the DUT's poll run in a thread of its own whose CPU time the Observation separates from the generator's",
        ));
    }
    if setting(c, "rps_cpus").is_some_and(|v| v != "-") {
        return Err(err(
            file,
            &format!("configurations[{name}]"),
            "calibrate on a configuration without RPS: with RPS the DUT's IP work runs in other CPUs' softirq, which no thread's CPU time shows",
        ));
    }
    let dut_in = setting(c, "dut_in").ok_or_else(|| {
        err(
            file,
            &format!("configurations[{name}].settings"),
            "no dut_in setting: this record predates the lab's device names; measure again",
        )
    })?;
    let sink_prefix = dut_in
        .strip_suffix("-in")
        .map(|p| format!("napi/{p}-sink-"));
    let engine = search_engine(c);
    let points: Vec<LabPoint> = c
        .points
        .iter()
        .filter(|p| p.generator.backend == engine)
        .filter_map(|p| lab_point(p, &format!("napi/{dut_in}-"), sink_prefix.as_deref()))
        .collect();
    if points.is_empty() {
        return Err(err(
            file,
            &format!("configurations[{name}].points"),
            format!("no point of the search's engine ({engine}) with the DUT's NAPI kthread in its Observation: measure without --no-observe"),
        ));
    }
    Ok(LabFigures {
        name: name.to_string(),
        max_pps: max.pps,
        stopped: max.stopped.clone(),
        engine,
        points,
    })
}

/// The generator back end of a configuration's maximum-throughput search (its probes'
/// engine; the sweep may have used another, `measurement.search_backend`).
fn search_engine(c: &ConfigurationResult) -> String {
    c.max_throughput
        .as_ref()
        .and_then(|m| m.probes.first())
        .and_then(|&i| c.points.get(i))
        .or_else(|| c.points.iter().find(|p| p.role == PointRole::Search))
        .or(c.points.first())
        .map(|p| p.generator.backend.clone())
        .unwrap_or_default()
}

/// `p` as the fit uses it; `None` without traffic, or without the DUT's kthread (named
/// by `dut_prefix`) in its Observation. An empty `dut_prefix` needs no Observation and
/// leaves `dut_share` 0 (the generator's fit).
fn lab_point(p: &PointResult, dut_prefix: &str, sink_prefix: Option<&str>) -> Option<LabPoint> {
    let dut_share = if dut_prefix.is_empty() {
        0.0
    } else {
        thread_share(p, dut_prefix)?
    };
    let delivered_pps = p.delivered_pps();
    let sent_pps = p.offered_pps;
    let generator_share =
        p.generator.cpu_busy.unwrap_or(0.0) * p.generator.cpus.len().max(1) as f64;
    let generator_in_kernel = p
        .generator
        .counters
        .iter()
        .any(|(k, v)| k == "in_kernel_pacing" && *v > 0);
    let sink_thread = p.sink.cpu_busy.unwrap_or(0.0) * p.sink.cpus.len().max(1) as f64;
    // The XDP sink's CPU is measured on its NAPI kthread already.
    let sink_napi = if p.sink.backend == "xdp-sink" {
        0.0
    } else {
        sink_prefix.and_then(|s| thread_share(p, s)).unwrap_or(0.0)
    };
    (delivered_pps > 0.0 && sent_pps > 0.0).then_some(LabPoint {
        delivered_pps,
        sent_pps,
        dut_share,
        generator_share,
        generator_in_kernel,
        sink_share: sink_thread + sink_napi,
    })
}

/// The points of `engine` in the run's threaded configurations (the generator's thread
/// carries no DUT work there) as the generator's fit uses them, with their
/// configuration's name.
fn threaded_generator_points<'a>(
    record: &'a RunRecord,
    engine: &'a str,
) -> impl Iterator<Item = (&'a str, &'a PointResult, LabPoint)> + 'a {
    record
        .configurations
        .iter()
        .filter(|c| setting(c, "napi") == Some("threaded"))
        .flat_map(move |c| {
            c.points
                .iter()
                .filter(move |p| p.generator.backend == engine)
                .filter_map(move |p| Some((c.name.as_str(), p, lab_point(p, "", None)?)))
        })
}

/// The configurations named in `names`, each once, in order.
fn distinct(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// Least squares through the origin of `z` on two regressors `(x, y, z)`: the
/// coefficients of `x` and `y`; `None` when the regressors are collinear within
/// `min_det_share` (the determinant at most that share of the product of their sums of
/// squares: 1 - correlation squared), so that their coefficients cannot be told apart.
pub(crate) fn regress_pair(
    points: impl Iterator<Item = (f64, f64, f64)>,
    min_det_share: f64,
) -> Option<(f64, f64)> {
    let (mut a11, mut a12, mut a22, mut b1, mut b2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (x, y, z) in points {
        a11 += x * x;
        a12 += x * y;
        a22 += y * y;
        b1 += x * z;
        b2 += y * z;
    }
    let det = a11 * a22 - a12 * a12;
    (det.is_finite() && det > min_det_share * a11 * a22)
        .then(|| ((b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det))
}

/// The generator's cost per frame where it paces in the kernel (one long call, the
/// program sending a frame when one is due and dropping the run otherwise): its
/// thread's CPU is `a` per frame sent plus `b` per idle run (`idle_runs_in_window`),
/// fitted by least squares over the in-kernel paced points of `engine` in threaded
/// configurations. Used when no configuration sent in batches beside a threaded DUT
/// (since the lab paces there too). Returns `a` in ns and the configurations used.
fn generator_paced_cost(record: &RunRecord, engine: &str) -> Option<(f64, Vec<String>)> {
    let pts: Vec<(&str, f64, f64, f64)> = threaded_generator_points(record, engine)
        .filter(|(_, p, lp)| lp.generator_in_kernel && p.duration_s > 0.0)
        .filter_map(|(name, p, lp)| {
            let idle_runs = p
                .generator
                .counters
                .iter()
                .find(|(k, _)| k == "idle_runs_in_window")?
                .1 as f64;
            Some((
                name,
                lp.sent_pps,
                idle_runs / p.duration_s,
                lp.generator_share,
            ))
        })
        .collect();
    if pts.len() < 3 {
        return None;
    }
    let (per_frame, _) = regress_pair(pts.iter().map(|&(_, x, y, z)| (x, y, z)), 1e-9)?;
    let used = distinct(pts.iter().map(|p| p.0.to_string()));
    (per_frame > 0.0).then_some((per_frame * 1e9, used))
}

/// The generator's cost per frame when it sends in batches (as it does on a CPU where
/// the DUT polls): the slope of its thread's CPU over the sent rate at the points of
/// `engine` where it ran in batches and its thread carried no DUT work (threaded NAPI),
/// in any configuration of the run. In-kernel pacing (the generator alone on its CPU)
/// spins between frames, so its CPU says nothing about the cost of a frame. Returns
/// the slope in ns and the configurations used.
fn generator_batch_cost(record: &RunRecord, engine: &str) -> Option<(f64, Vec<String>)> {
    let batch: Vec<(&str, LabPoint)> = threaded_generator_points(record, engine)
        .filter(|(_, _, lp)| !lp.generator_in_kernel)
        .map(|(name, _, lp)| (name, lp))
        .collect();
    let pts: Vec<(f64, f64)> = batch
        .iter()
        .map(|(_, lp)| (lp.sent_pps, lp.generator_share))
        .collect();
    let used = distinct(batch.iter().map(|(name, _)| name.to_string()));
    match line(&pts) {
        Some((slope, _)) if slope > 0.0 => Some((slope * 1e9, used)),
        _ => None,
    }
}

/// The scenario the run measured, mapped for the twin.
pub fn plan_of(record: &RunRecord, file: &str) -> Result<(Scenario, TwinPlan), ConfigError> {
    let what = format!("{file} (scenario_toml)");
    let s = scenario::parse(&record.scenario_toml, &what, None)
        .map_err(|e| err(&what, "(scenario)", e.to_string()))?;
    let mut plan = from_scenario::plan(&s, &what)?;
    // The twin answers with the search the lab used, so that the two maxima differ by
    // the testbed alone.
    let recorded = record
        .configurations
        .iter()
        .filter_map(|c| c.max_throughput.as_ref())
        .find_map(napilab_experiment::maximum::recorded_method);
    if let (Some(m), Some(method)) = (plan.search.as_mut(), recorded) {
        m.search_method = method;
    }
    Ok((s, plan))
}

/// The twin's maximum for one configuration (the scenario's search, after its sweep).
pub fn twin_max(
    plan: &TwinPlan,
    conf: &TwinConfiguration,
    lab: &LabProfile,
) -> Result<f64, ConfigError> {
    let profile = conf.profile_for(&lab.profile, lab.testbed.as_ref());
    let mut plan = plan.clone();
    plan.seeds.truncate(1);
    if plan.search.is_none() {
        return Err(err(
            &plan.name,
            "measurement.search",
            "the scenario has no maximum-throughput search",
        ));
    }
    let (_, max) = from_scenario::run_configuration(&plan, conf, |batch| {
        from_scenario::run_serial(batch, &profile)
    })?;
    Ok(max.map_or(0.0, |m| m.pps))
}

/// Slope and intercept of y over x (least squares); `None` with fewer than two
/// distinct x.
pub(crate) fn line(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if points.len() < 2 || sxx <= mx * mx * 1e-6 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    Some((slope, my - slope * mx))
}

/// A finished calibration.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    pub lab: LabProfile,
    pub figures: LabFigures,
    /// The twin's maximum for the calibration configuration with the fitted profile.
    pub twin_max_pps: f64,
    /// Per sweep load: (pps, measured DUT kthread share, twin's).
    pub dut_share: Vec<(f64, f64, f64)>,
    /// How each number was fixed, for the profile's provenance and the report.
    pub notes: Vec<String>,
    /// How `latency_ns.irq_delivery` was fixed, for its provenance.
    pub delay_fit: String,
}

/// The twin's DUT NAPI kthread share and the kthread's wake-ups per second at `pps`
/// (the sender's notifications: each finds the instance idle and wakes its kthread,
/// which switches in).
fn twin_dut(
    conf: &TwinConfiguration,
    profile: &Profile,
    pps: f64,
) -> Result<(f64, f64), ConfigError> {
    let cfg: SimConfig = conf.at(pps);
    let r = crate::try_run(&cfg, profile, 1)?;
    let share = r
        .observation
        .intervals
        .iter()
        .flat_map(|iv| iv.threads.iter())
        .filter(|t| t.name.starts_with("napi/dut-in"))
        .filter_map(|t| t.cpu.as_ref().map(|m| m.value))
        .sum::<f64>()
        / r.observation.intervals.len().max(1) as f64;
    let cpu = conf.poller_cpus.first().copied().unwrap_or(0);
    let wakeups = r.model.cpu(cpu).map_or(0.0, |c| c.rx_irqs_per_s);
    Ok((share, wakeups))
}

/// The costs a calibration measures on the CPU of one threaded configuration (the
/// DUT's per packet and per wake-up, the testbed engines' per packet), before any
/// maximum is matched: steps 1 and 2 of the module's procedure.
struct CostFit {
    lab: LabProfile,
    figures: LabFigures,
    plan: TwinPlan,
    conf: TwinConfiguration,
    /// Per load: (pps, measured DUT kthread share, twin's).
    dut_share: Vec<(f64, f64, f64)>,
    notes: Vec<String>,
}

fn fit_costs(
    record: &RunRecord,
    file: &str,
    name: &str,
    base: &LabProfile,
) -> Result<CostFit, ConfigError> {
    let figures = lab_figures(record, name, file)?;
    let (_, plan) = plan_of(record, file)?;
    let conf = plan
        .configurations
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| {
            err(
                file,
                "configurations",
                format!("{name:?} is not in the run's scenario"),
            )
        })?;
    let ghz = base.profile.cpu_ghz;
    let mut notes = Vec::new();
    let mut lab = base.clone();
    lab.profile.name = VETH_LAB_NAME.into();
    lab.profile.description = format!(
        "veth lab of this machine, fitted on {name} of lab run {}",
        record.run_id
    );
    let (testbed, note) = fit_testbed(record, &figures, base, name);
    notes.push(note);
    lab.testbed = Some(testbed);
    // 1. The DUT's per-packet and per-poll costs, solved against the twin's own poll
    // counts (the engines are not folded here: the fit compares the DUT's thread alone).
    let sum = |p: &Profile| p.stage_cycles.poll + p.stage_cycles.ip_stack + p.stage_cycles.xmit;
    let split = {
        let s = &base.profile.stage_cycles;
        let total = sum(&base.profile).max(1e-9);
        [s.poll / total, s.ip_stack / total, s.xmit / total]
    };
    let set = |p: &mut Profile, per_packet: f64, wakeup: f64| {
        // Whole cycles: the data fix nothing finer.
        p.stage_cycles.poll = (per_packet * split[0]).round();
        p.stage_cycles.ip_stack = (per_packet * split[1]).round();
        p.stage_cycles.xmit = (per_packet * split[2]).round();
        p.fixed_cycles.context_switch = wakeup.round();
    };
    let mut loads: Vec<[f64; 2]> = figures
        .points
        .iter()
        .map(|p| [p.delivered_pps, p.dut_share])
        .collect();
    loads.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let per_packet = loads.last().map_or(0.0, |p| p[1] / p[0] * 1e9 * ghz);
    let mut wakeup = base.profile.fixed_cycles.context_switch;
    set(&mut lab.profile, per_packet, wakeup);
    // The costs are fitted with prompt wake-ups; the delay is fitted last, against the
    // maximum.
    lab.profile.latency_ns.irq_delivery = 0;
    // The per-packet cost is the lab's CPU per delivered packet at the highest load,
    // where the DUT's polls are full and its CPU per packet is what bounds a
    // CPU-limited maximum. (Matching the twin's share there instead is ill-conditioned:
    // near 100% CPU a share of 0.975 or 0.990 moves the cost by 10%. A least-squares fit
    // of a per-packet and a per-poll cost over all loads let the twin's per-wake-up
    // cost, then ASSUMED, pull the per-packet cost down by 40%.) The kthread's cost per
    // wake-up (the twin's context switch, charged to the kthread as /proc charges it)
    // then takes what the lower loads show beyond the packets: least squares over the
    // twin's wake-up counts, re-running the twin until it settles, not below 0.
    let k = 1e-9 / ghz;
    for _ in 0..8 {
        let mut rows = Vec::new();
        for p in &loads[..loads.len().saturating_sub(1)] {
            let (share, wakeups) = twin_dut(conf, &lab.profile, p[0])?;
            rows.push((wakeups, p[1] - share));
        }
        let (num, den) = rows.iter().fold((0.0, 0.0), |(n, d), &(w, gap)| {
            (n + w * k * gap, d + (w * k).powi(2))
        });
        let next = if den > 0.0 {
            (wakeup + num / den).max(0.0)
        } else {
            wakeup
        };
        let settled = (next - wakeup).abs() < 0.01 * wakeup.max(10.0);
        wakeup = next;
        set(&mut lab.profile, per_packet, wakeup);
        if settled {
            break;
        }
    }
    let mut dut_share = Vec::new();
    for p in &loads {
        let (share, _) = twin_dut(conf, &lab.profile, p[0])?;
        dut_share.push((p[0], p[1], share));
    }
    notes.push(format!(
        "stage_cycles poll + ip_stack + xmit = {per_packet:.0} (split as the base profile's, ASSUMED): the DUT's NAPI kthread CPU per delivered packet at the highest load of {name} ({:.0} pkt/s delivered, CPU share {:.3}), where its polls are fullest; fixed_cycles.context_switch = {wakeup:.0}: the kthread's cost per wake-up, what the lower loads show beyond the packets (least squares over the twin's wake-ups). Measured vs twin share at the {} load(s): {} vs {}",
        loads.last().map_or(0.0, |p| p[0]),
        loads.last().map_or(0.0, |p| p[1]),
        loads.len(),
        dut_share.iter().map(|d| format!("{:.3}", d.1)).collect::<Vec<_>>().join("/"),
        dut_share.iter().map(|d| format!("{:.3}", d.2)).collect::<Vec<_>>().join("/"),
    ));
    Ok(CostFit {
        lab,
        figures,
        conf: conf.clone(),
        plan,
        dut_share,
        notes,
    })
}

/// Step 2 of the module's procedure, the engines: their marginal cost per packet, in
/// cycles of the profile's clock, and the note that says where each came from.
fn fit_testbed(
    record: &RunRecord,
    figures: &LabFigures,
    base: &LabProfile,
    name: &str,
) -> (Testbed, String) {
    let ghz = base.profile.cpu_ghz;
    let base_testbed = base.testbed.unwrap_or_default();
    let (generator, generator_note) = match generator_batch_cost(record, &figures.engine) {
        Some((ns, used)) => (
            (ns * ghz).round(),
            format!(
                "slope of the generator thread's CPU over the sent rate where it sent in batches beside a threaded DUT ({} of this run; the generator is testbed, not DUT)",
                used.join(", ")
            ),
        ),
        None => match generator_paced_cost(record, &figures.engine) {
            Some((ns, used)) => (
                (ns * ghz).round(),
                format!(
                    "per frame sent where the generator paced in the kernel (least squares of its thread's CPU over frames sent and idle runs, {} of this run), applied also to batches (ASSUMED: no configuration sent in batches beside a threaded DUT)",
                    used.join(", ")
                ),
            ),
            None => (
                base_testbed.generator_cycles_per_packet,
                format!("kept from the base profile (ASSUMED here): no configuration of this run had the {} generator sending in batches beside a threaded DUT or pacing in the kernel", figures.engine),
            ),
        },
    };
    let sink_pts: Vec<(f64, f64)> = figures
        .points
        .iter()
        .map(|p| (p.delivered_pps, p.sink_share))
        .collect();
    let sink_ns = match line(&sink_pts) {
        Some((slope, _)) if slope > 0.0 => slope * 1e9,
        _ => {
            sink_pts
                .iter()
                .map(|(x, y)| y / x)
                .fold(f64::INFINITY, f64::min)
                * 1e9
        }
    };
    let testbed = Testbed {
        generator_cycles_per_packet: generator.max(0.0),
        sink_cycles_per_packet: (sink_ns * ghz).max(0.0).round(),
    };
    let note = format!(
        "testbed.generator_cycles_per_packet {:.0}: {generator_note}; sink_cycles_per_packet {:.0}: slope of the sink's CPU over the delivered rate at {} point(s) of {name}",
        testbed.generator_cycles_per_packet, testbed.sink_cycles_per_packet, figures.points.len()
    );
    (testbed, note)
}

/// Fits a lab profile on configuration `name` of `record`, starting from `base`.
/// `command` is the command line recorded in the provenance.
pub fn calibrate(
    record: &RunRecord,
    file: &str,
    name: &str,
    base: &LabProfile,
) -> Result<Calibration, ConfigError> {
    let costs = fit_costs(record, file, name, base)?;
    let CostFit {
        mut lab,
        figures,
        plan,
        conf,
        dut_share,
        mut notes,
    } = costs;
    let conf = &conf;
    // 3. The poller's wake-up delay, so the twin's maximum matches the lab's.
    let target = figures.max_pps;
    let max_at = |lab: &LabProfile, delay: u64| -> Result<f64, ConfigError> {
        let mut l = lab.clone();
        l.profile.latency_ns.irq_delivery = delay;
        twin_max(&plan, conf, &l)
    };
    let at_zero = max_at(&lab, 0)?;
    let delay = if at_zero <= target {
        notes.push(format!(
            "latency_ns.irq_delivery = 0: with no wake-up delay the twin's maximum ({at_zero:.0} pkt/s) is already at or below the lab's ({target:.0} pkt/s); the CPU cost alone sets it"
        ));
        0
    } else {
        // Bisection on the delay: the twin's maximum falls as the delay grows. Its
        // search answers only loads it probed (as the lab's does), so the delay whose
        // maximum came closest to the lab's is kept.
        let (mut lo, mut hi) = (0u64, 50_000_000u64);
        let mut best = (0u64, at_zero);
        for _ in 0..24 {
            if hi - lo <= 1_000 {
                break;
            }
            let mid = lo + (hi - lo) / 2;
            let got = max_at(&lab, mid)?;
            if (got - target).abs() < (best.1 - target).abs() {
                best = (mid, got);
            }
            if got > target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        notes.push(format!(
            "latency_ns.irq_delivery = {} ns: bisected so the twin's maximum-throughput search on {name} comes closest to the lab's {target:.0} pkt/s (twin {:.0}; without a delay {at_zero:.0}); it stands for how long the DUT's NAPI kthread waits for its CPU on this shared machine, and applies to threaded configurations only (in softirq mode veth's notification is synchronous)",
            best.0, best.1
        ));
        best.0
    };
    lab.profile.latency_ns.irq_delivery = delay;
    let twin_max_pps = twin_max(&plan, conf, &lab)?;
    Ok(Calibration {
        lab,
        figures,
        twin_max_pps,
        dut_share,
        notes,
        delay_fit: "bisected so the twin's maximum search on the calibration configuration comes closest to the lab's; threaded configurations only".into(),
    })
}

/// The twin's prediction of one configuration's maximum against the lab's.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Prediction {
    pub name: String,
    pub lab_max_pps: f64,
    pub lab_stopped: String,
    pub twin_max_pps: f64,
    /// (twin - lab) / lab.
    pub relative_error: f64,
    /// The lab's search stopped at the generator's or the sink's limit, not the
    /// DUT's: its maximum is a lower bound on the DUT's, and a prediction is compared
    /// with it only as "at least": it bounds the DUT's maximum from below.
    pub lab_lower_bound: bool,
    /// The twin lacks a mechanism that can only lower this configuration's maximum
    /// (see [`twin_is_upper_bound`]): its maximum is an upper bound on the lab's, and
    /// it too is compared only as "twin >= lab".
    pub twin_upper_bound: bool,
}

/// Whether the twin's maximum of `conf` is only an upper bound: a threaded poller that
/// shares its CPU with the generator or the sink. The twin has no threads for the
/// engines (their cost is folded into the poll, docs/sim.md "How a scenario maps onto
/// the twin"), so it cannot show the DUT's kthread waiting behind them, which in the
/// lab loses packets at veth's ring with the CPU not full.
pub fn twin_is_upper_bound(conf: &TwinConfiguration) -> bool {
    matches!(
        conf.napi,
        crate::config::NapiContext::Threaded | crate::config::NapiContext::ThreadedBusyPoll
    ) && (conf.engines_on_poller.generator || conf.engines_on_poller.sink)
}

impl Prediction {
    /// The comparison of the twin's `twin` pkt/s with the lab's maximum `lab_pps`
    /// (stopped for `stopped`) of configuration `name`.
    pub fn new(name: &str, lab_pps: f64, stopped: &str, twin: f64, twin_upper_bound: bool) -> Self {
        Prediction {
            name: name.to_string(),
            lab_max_pps: lab_pps,
            lab_stopped: stopped.to_string(),
            twin_max_pps: twin,
            relative_error: if lab_pps > 0.0 {
                (twin - lab_pps) / lab_pps
            } else {
                f64::NAN
            },
            lab_lower_bound: Self::is_lower_bound(stopped),
            twin_upper_bound,
        }
    }

    /// Whether the lab maximum is the testbed's, not the DUT's.
    pub fn is_lower_bound(stopped: &str) -> bool {
        stopped.contains("generator_limited")
            || stopped.contains("sink_limited")
            || stopped == "upper_bound_passed"
    }

    /// Whether the lab's search did not finish (its time limit, an interruption, no
    /// answer): its maximum is neither the DUT's nor a bound on it, so a fit does not
    /// use it and a comparison with it is for information only.
    pub fn is_unfinished(stopped: &str, pps: f64) -> bool {
        pps.is_nan()
            || pps <= 0.0
            || stopped.contains("time_limit")
            || stopped.contains("interrupted")
    }

    /// How the prediction compares: a signed error against a DUT-limited maximum;
    /// against a lower bound, whether the twin's maximum is at least the lab's.
    pub fn verdict(&self) -> String {
        if Self::is_unfinished(&self.lab_stopped, self.lab_max_pps) {
            return if self.lab_max_pps > 0.0 {
                format!(
                    "lab search unfinished ({}): {:+.1}%, for information only",
                    self.lab_stopped,
                    self.relative_error * 100.0
                )
            } else {
                format!(
                    "lab search found no answer ({}): no comparison",
                    self.lab_stopped
                )
            };
        }
        if self.lab_lower_bound || self.twin_upper_bound {
            let holds = if self.twin_max_pps >= self.lab_max_pps {
                "holds"
            } else {
                "BROKEN"
            };
            let why = if self.lab_lower_bound {
                "lab is a lower bound"
            } else {
                "twin is an upper bound (no engine threads)"
            };
            format!(
                "{why}: twin >= lab {holds} ({:+.1}%)",
                self.relative_error * 100.0
            )
        } else {
            format!("{:+.1}%", self.relative_error * 100.0)
        }
    }
}

/// Predicts the maximum of every configuration in `names` (all searched ones when
/// empty) with `lab`, against the lab run's measured maxima.
pub fn predict(
    record: &RunRecord,
    file: &str,
    lab: &LabProfile,
    names: &[String],
) -> Result<Vec<Prediction>, ConfigError> {
    let (_, plan) = plan_of(record, file)?;
    let mut out = Vec::new();
    for c in &record.configurations {
        if !names.is_empty() && !names.contains(&c.name) {
            continue;
        }
        let Some(m) = &c.max_throughput else { continue };
        let conf = plan
            .configurations
            .iter()
            .find(|t| t.name == c.name)
            .ok_or_else(|| {
                err(
                    file,
                    "configurations",
                    format!("{:?} is not in the run's scenario", c.name),
                )
            })?;
        let twin = twin_max(&plan, conf, lab)?;
        out.push(Prediction::new(
            &c.name,
            m.pps,
            &m.stopped,
            twin,
            twin_is_upper_bound(conf),
        ));
    }
    for n in names {
        if !out.iter().any(|p| &p.name == n) {
            return Err(err(
                file,
                "configurations",
                format!("{n:?}: no configuration of that name with a maximum-throughput search in the run"),
            ));
        }
    }
    Ok(out)
}

impl Calibration {
    /// The fitted profile as a file, with its provenance in comments.
    pub fn to_toml(&self, command: &str, record: &RunRecord, predictions: &[Prediction]) -> String {
        let mut out = String::new();
        out.push_str("# This machine's veth lab (docs/lab.md: generator -> DUT -> sink over veth in network\n");
        out.push_str("# namespaces, 2-CPU VM), for lab scenarios on the twin (`napilab sim run SCENARIO`).\n#\n");
        out.push_str("# Provenance: FITTED from lab measurements on this machine by\n");
        out.push_str(&format!("#   {command}\n"));
        out.push_str(&format!(
            "# on run {} (scenario {:?}, napilab {}), configuration {:?}: lab maximum {:.0} pkt/s\n# ({}), twin maximum with this profile {:.0} pkt/s.\n",
            record.run_id,
            record.scenario_name,
            record.napilab_version,
            self.figures.name,
            self.figures.max_pps,
            self.figures.stopped,
            self.twin_max_pps
        ));
        for (i, n) in self.notes.iter().enumerate() {
            out.push_str(&wrap(&format!("{}. {n}", i + 1)));
        }
        out.push_str("# cpu_ghz is nominal: 1 cycle = 1 ns at 1 GHz.\n");
        out.push_str(
            "# ASSUMED (not fixed by the lab figures): the split of the per-packet cost between\n",
        );
        out.push_str("# poll, ip_stack and xmit; hardirq (the sender's notification), softirq,\n");
        out.push_str("# qdisc, rps, idle_exit, after_interrupt; the other latencies.\n");
        out.push_str("# veth has no TX completions: tx_reclaim and tx_softirq are never used.\n");
        if !predictions.is_empty() {
            out.push_str("# Predictions of the run's other configurations with this profile:\n");
            for p in predictions {
                out.push_str(&format!(
                    "#   {}: lab {:.0} pkt/s ({}), twin {:.0} pkt/s, error {}\n",
                    p.name,
                    p.lab_max_pps,
                    p.lab_stopped,
                    p.twin_max_pps,
                    p.verdict()
                ));
            }
        }
        let mut lab = self.lab.clone();
        lab.profile.provenance = self.provenance(command, record);
        lab.fitted_on_host = record.host.identity.clone();
        out.push_str(&lab.body());
        out
    }

    /// The machine-readable source of every parameter of the fitted profile: the
    /// fitted ones name the run, the configuration and the command; the others say
    /// why they are assumed.
    fn provenance(
        &self,
        command: &str,
        record: &RunRecord,
    ) -> std::collections::BTreeMap<String, ParamSource> {
        let reference = format!(
            "lab run {} (configuration {}) by {command}",
            record.run_id, self.figures.name
        );
        let fitted = |detail: &str| ParamSource {
            kind: SourceKind::Fitted,
            reference: reference.clone(),
            detail: detail.to_string(),
        };
        let assumed = |detail: &str| ParamSource {
            kind: SourceKind::Assumed,
            reference: String::new(),
            detail: detail.to_string(),
        };
        let per_packet = "a third of the DUT kthread's CPU per delivered packet at the highest load (the split between poll, ip_stack and xmit is assumed equal)";
        let mut map = std::collections::BTreeMap::new();
        for (key, _) in self.lab.profile.parameters() {
            let src = match key {
                "cpu_ghz" => assumed("nominal: 1 cycle = 1 ns at 1 GHz"),
                "stage_cycles.poll" | "stage_cycles.ip_stack" | "stage_cycles.xmit" => {
                    fitted(per_packet)
                }
                "fixed_cycles.context_switch" => fitted(
                    "the DUT kthread's cost per wake-up: least squares over the lower loads' CPU beyond the packets",
                ),
                "latency_ns.irq_delivery" => fitted(&self.delay_fit),
                "stage_cycles.tx_reclaim" | "fixed_cycles.tx_softirq" => {
                    assumed("veth has no TX completions: never used")
                }
                _ => assumed("not fixed by the lab figures the calibration uses"),
            };
            map.insert(key.to_string(), src);
        }
        map
    }
}

/// `text` as comment lines of at most about 88 columns, continuation lines indented.
pub(crate) fn wrap(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() + word.len() + 1 > 88 && line.len() > 4 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#  ");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::Prediction;

    fn prediction(lab: f64, stopped: &str, twin: f64) -> Prediction {
        Prediction {
            name: "c".into(),
            lab_max_pps: lab,
            lab_stopped: stopped.into(),
            twin_max_pps: twin,
            relative_error: (twin - lab) / lab,
            lab_lower_bound: Prediction::is_lower_bound(stopped),
            twin_upper_bound: false,
        }
    }

    /// A generator- or sink-limited lab maximum is a lower bound: a twin above it is
    /// consistent, one below it is not; a DUT-limited one gets a signed error.
    #[test]
    fn testbed_limited_maxima_are_compared_as_lower_bounds() {
        let above = prediction(700_000.0, "converged_generator_limited", 800_000.0);
        assert!(above.lab_lower_bound);
        assert!(above.verdict().contains("holds"), "{}", above.verdict());
        let below = prediction(700_000.0, "converged_sink_limited", 600_000.0);
        assert!(below.verdict().contains("BROKEN"), "{}", below.verdict());
        assert!(Prediction::is_lower_bound("upper_bound_passed"));
        let dut = prediction(1_000_000.0, "converged", 1_100_000.0);
        assert!(!dut.lab_lower_bound);
        assert_eq!(dut.verdict(), "+10.0%");
    }
}
