//! Calibrating the twin on lab measurements: a lab profile (a platform [`Profile`] plus
//! the testbed's engine costs) fitted from one configuration of a recorded lab run, and
//! the twin's prediction of the other configurations' maxima
//! (`napilab sim calibrate`, docs/sim.md "Lab scenarios and the veth-lab profile").
//!
//! What is fitted, from the calibration configuration (threaded NAPI: its poll runs in a
//! kthread of its own whose CPU time the lab's Observation carries):
//! 1. The DUT's per-packet cost and per-poll cost: the twin's NAPI kthread CPU share is
//!    `a + pps * per_packet + polls * per_poll` (`a`: the twin's other fixed costs in
//!    that thread); the two costs are solved so the twin's share matches the measured
//!    one at the passing sweep loads (exactly with two loads, least squares with more),
//!    re-running the twin until the poll counts settle. One load fixes only the
//!    per-packet cost (the per-poll cost stays as shipped).
//! 2. The testbed engines' per-packet cost: the slope of the generator thread's CPU and
//!    of the sink's thread plus its NAPI kthread over the delivered rate (their
//!    marginal cost; a single load gives the ratio instead).
//! 3. The poller's wake-up delay (`latency_ns.irq_delivery`): bisected so the twin's
//!    maximum-throughput search on the calibration configuration finds the lab's
//!    maximum. It stands for how long the DUT's poller waits to run after the sender
//!    scheduled it while other threads hold its CPU; the lab loses packets when veth's
//!    256-entry ring fills in that time.
//!
//! Everything else in the profile is kept from the base profile and marked ASSUMED.

use napilab_core::scenario::{self, Scenario};
use napilab_core::{ConfigurationResult, PointResult, PointRole, RunRecord};

use crate::from_scenario::{self, Testbed, TwinConfiguration, TwinPlan};
use crate::{ConfigError, Profile, SimConfig};

/// The shipped lab profile of this machine's veth lab.
pub const VETH_LAB_NAME: &str = "veth-lab";
pub const VETH_LAB_TOML: &str = include_str!("../profiles/veth-lab.toml");

/// A profile for lab scenarios: the platform costs and, optionally, the testbed's
/// engines (`[testbed]`, which plain [`Profile`] files do not have).
#[derive(Clone, Debug, PartialEq)]
pub struct LabProfile {
    pub profile: Profile,
    pub testbed: Option<Testbed>,
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
        let profile: Profile = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::new(file, "(parse)", e.message()))?;
        profile.validate(file)?;
        Ok(LabProfile { profile, testbed })
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
        })
    }

    /// The profile as TOML (without comments; [`Calibration::to_toml`] adds them).
    fn body(&self) -> String {
        let mut out = toml::to_string(&self.profile).unwrap_or_default();
        if let Some(t) = &self.testbed {
            out.push_str("\n[testbed]\n");
            out.push_str(&toml::to_string(t).unwrap_or_default());
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
    /// Passing sweep points: (delivered pps, DUT NAPI kthread CPU share, generator
    /// thread CPU share, sink thread + sink NAPI kthread CPU share).
    pub points: Vec<[f64; 4]>,
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
    let threshold = max.loss_threshold;
    let mut points = Vec::new();
    for p in c.points.iter().filter(|p| p.role == PointRole::Sweep) {
        if !(from_scenario::passes(p, threshold)) {
            continue;
        }
        let Some(dut) = thread_share(p, &format!("napi/{dut_in}-")) else {
            continue;
        };
        let pps = p.delivered_pps();
        let gen = p.generator.cpu_busy.unwrap_or(0.0) * p.generator.cpus.len().max(1) as f64;
        let sink_thread = p.sink.cpu_busy.unwrap_or(0.0) * p.sink.cpus.len().max(1) as f64;
        let sink_napi = sink_prefix
            .as_deref()
            .and_then(|s| thread_share(p, s))
            .unwrap_or(0.0);
        if pps > 0.0 {
            points.push([pps, dut, gen, sink_thread + sink_napi]);
        }
    }
    if points.is_empty() {
        return Err(err(
            file,
            &format!("configurations[{name}].points"),
            "no passing sweep point with the DUT's NAPI kthread in its Observation: measure with a sweep below the maximum and without --no-observe",
        ));
    }
    Ok(LabFigures {
        name: name.to_string(),
        max_pps: max.pps,
        stopped: max.stopped.clone(),
        points,
    })
}

/// The scenario the run measured, mapped for the twin.
pub fn plan_of(record: &RunRecord, file: &str) -> Result<(Scenario, TwinPlan), ConfigError> {
    let what = format!("{file} (scenario_toml)");
    let s = scenario::parse(&record.scenario_toml, &what, None)
        .map_err(|e| err(&what, "(scenario)", e.to_string()))?;
    let plan = from_scenario::plan(&s, &what)?;
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
fn line(points: &[(f64, f64)]) -> Option<(f64, f64)> {
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
}

/// The twin's DUT NAPI kthread share and its polls per second at `pps`.
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
    let polls = r.model.cpu(cpu).map_or(0.0, |c| c.polls_per_s);
    Ok((share, polls))
}

/// Fits a lab profile on configuration `name` of `record`, starting from `base`.
/// `command` is the command line recorded in the provenance.
pub fn calibrate(
    record: &RunRecord,
    file: &str,
    name: &str,
    base: &LabProfile,
) -> Result<Calibration, ConfigError> {
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
    // 2. The engines: marginal cost per packet, in cycles of the profile's clock.
    let fit_engine = |k: usize| -> f64 {
        let pts: Vec<(f64, f64)> = figures.points.iter().map(|p| (p[0], p[k])).collect();
        let ns = match line(&pts) {
            Some((slope, _)) if slope > 0.0 => slope * 1e9,
            _ => pts.iter().map(|(x, y)| y / x).fold(f64::INFINITY, f64::min) * 1e9,
        };
        ns * ghz
    };
    let testbed = Testbed {
        generator_cycles_per_packet: fit_engine(2).max(0.0).round(),
        sink_cycles_per_packet: fit_engine(3).max(0.0).round(),
    };
    notes.push(format!(
        "testbed.generator_cycles_per_packet {:.0}, sink_cycles_per_packet {:.0}: slope of the generator thread's CPU and of the sink thread plus its NAPI kthread over the delivered rate, {} passing sweep point(s) of {name}",
        testbed.generator_cycles_per_packet, testbed.sink_cycles_per_packet, figures.points.len()
    ));
    lab.testbed = Some(testbed);
    // 1. The DUT's per-packet and per-poll costs, solved against the twin's own poll
    // counts (the engines are not folded here: the fit compares the DUT's thread alone).
    let sum = |p: &Profile| p.stage_cycles.poll + p.stage_cycles.ip_stack + p.stage_cycles.xmit;
    let split = {
        let s = &base.profile.stage_cycles;
        let total = sum(&base.profile).max(1e-9);
        [s.poll / total, s.ip_stack / total, s.xmit / total]
    };
    let set = |p: &mut Profile, per_packet: f64, per_poll: f64| {
        // Whole cycles: the data fix nothing finer.
        p.stage_cycles.poll = (per_packet * split[0]).round();
        p.stage_cycles.ip_stack = (per_packet * split[1]).round();
        p.stage_cycles.xmit = (per_packet * split[2]).round();
        p.fixed_cycles.poll = per_poll.round();
    };
    let mut loads: Vec<[f64; 4]> = figures.points.clone();
    loads.sort_by(|a, b| a[0].total_cmp(&b[0]));
    // Start from the measured CPU per packet at the highest load and no per-poll cost,
    // so the fit does not depend on the base profile's fitted numbers.
    let mut per_packet = loads.last().map_or(0.0, |p| p[1] / p[0] * 1e9 * ghz);
    let mut per_poll = 0.0;
    set(&mut lab.profile, per_packet, per_poll);
    // The costs are fitted with prompt wake-ups (the sweep loads lost nothing in the
    // lab); the delay is fitted last, against the maximum.
    lab.profile.latency_ns.irq_delivery = 0;
    for _ in 0..4 {
        let mut rows = Vec::new();
        for p in &loads {
            let (share, polls) = twin_dut(conf, &lab.profile, p[0])?;
            // The twin's share split into its known parts and the rest (a).
            let known = (p[0] * per_packet + polls * per_poll) / ghz * 1e-9;
            rows.push((p[0], polls, p[1] - (share - known)));
        }
        // Solve target = (pps * c + polls * q) / ghz * 1e-9 for c, q >= 0.
        let (c, q) = solve(&rows, ghz).unwrap_or_else(|| {
            // The loads cannot separate the two costs (e.g. one load, or one poll per
            // packet at every load): least squares for the per-packet cost alone, the
            // per-poll cost kept.
            let k = 1e-9 / ghz;
            let num: f64 = rows
                .iter()
                .map(|(pps, polls, t)| pps * k * (t - polls * per_poll * k))
                .sum();
            let den: f64 = rows.iter().map(|(pps, _, _)| (pps * k).powi(2)).sum();
            ((num / den.max(f64::MIN_POSITIVE)).max(0.0), per_poll)
        });
        let settled = (c - per_packet).abs() < 0.01 * per_packet.max(1.0)
            && (q - per_poll).abs() < 0.01 * per_poll.max(1.0);
        per_packet = c;
        per_poll = q;
        set(&mut lab.profile, per_packet, per_poll);
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
        "stage_cycles poll + ip_stack + xmit = {per_packet:.0} (split as the base profile's, ASSUMED) and fixed_cycles.poll = {per_poll:.0}: the DUT's NAPI kthread CPU at {} load(s) of {name}, measured {} vs twin {}",
        loads.len(),
        dut_share.iter().map(|d| format!("{:.3}", d.1)).collect::<Vec<_>>().join("/"),
        dut_share.iter().map(|d| format!("{:.3}", d.2)).collect::<Vec<_>>().join("/"),
    ));
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
            "latency_ns.irq_delivery = {} ns: bisected so the twin's maximum-throughput search on {name} comes closest to the lab's {target:.0} pkt/s (twin {:.0}; without a delay {at_zero:.0}); it stands for how long the DUT's poller waits for its CPU on this shared machine",
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
    })
}

/// Least squares for target = (pps * c + polls * q) / ghz * 1e-9 with c, q >= 0;
/// `None` when the loads cannot separate the two (fewer than two rows, or singular).
fn solve(rows: &[(f64, f64, f64)], ghz: f64) -> Option<(f64, f64)> {
    if rows.len() < 2 {
        return None;
    }
    let k = 1e-9 / ghz;
    let (mut a11, mut a12, mut a22, mut b1, mut b2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, y, t) in rows {
        let (x, y) = (x * k, y * k);
        a11 += x * x;
        a12 += x * y;
        a22 += y * y;
        b1 += x * t;
        b2 += y * t;
    }
    let det = a11 * a22 - a12 * a12;
    // Nearly collinear (polls proportional to packets): the loads cannot separate them.
    if det.abs() <= 1e-3 * a11 * a22 {
        return None;
    }
    let c = (b1 * a22 - b2 * a12) / det;
    let q = (a11 * b2 - a12 * b1) / det;
    if c >= 0.0 && q >= 0.0 {
        return Some((c, q));
    }
    // A negative part: fit the per-packet cost alone (per-poll cost 0).
    let c = (b1 / a11).max(0.0);
    Some((c, 0.0))
}

/// The twin's prediction of one configuration's maximum against the lab's.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    pub name: String,
    pub lab_max_pps: f64,
    pub lab_stopped: String,
    pub twin_max_pps: f64,
    /// (twin - lab) / lab.
    pub relative_error: f64,
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
        out.push(Prediction {
            name: c.name.clone(),
            lab_max_pps: m.pps,
            lab_stopped: m.stopped.clone(),
            twin_max_pps: twin,
            relative_error: if m.pps > 0.0 {
                (twin - m.pps) / m.pps
            } else {
                f64::NAN
            },
        });
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
        out.push_str(
            "# context_switch, qdisc, rps, idle_exit, after_interrupt; the other latencies.\n",
        );
        out.push_str("# veth has no TX completions: tx_reclaim and tx_softirq are never used.\n");
        if !predictions.is_empty() {
            out.push_str("# Predictions of the run's other configurations with this profile:\n");
            for p in predictions {
                out.push_str(&format!(
                    "#   {}: lab {:.0} pkt/s ({}), twin {:.0} pkt/s, error {:+.1}%\n",
                    p.name,
                    p.lab_max_pps,
                    p.lab_stopped,
                    p.twin_max_pps,
                    p.relative_error * 100.0
                ));
            }
        }
        out.push_str(&self.lab.body());
        out
    }
}

/// `text` as comment lines of at most about 88 columns, continuation lines indented.
fn wrap(text: &str) -> String {
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
