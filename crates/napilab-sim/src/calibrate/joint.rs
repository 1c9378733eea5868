//! The joint calibration: every searched configuration of a lab run at once (the
//! generator- or sink-limited maxima only as "at least" constraints, every number
//! within a physical range), with leave-one-out predictions.

use super::*;

/// A physical range of a fitted parameter, and why: a fit that lands outside it is
/// reporting something the twin does not model, not a cost.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Bound {
    pub min: f64,
    pub max: f64,
    pub why: &'static str,
}

impl Bound {
    /// `x` within the range; when it was not, a note saying what the data asked for.
    fn clamp(&self, what: &str, x: f64, unit: &str) -> (f64, Option<String>) {
        let kept = x.clamp(self.min, self.max);
        if kept == x {
            return (x, None);
        }
        let side = if x < self.min { "minimum" } else { "maximum" };
        (
            kept,
            Some(format!(
                "{what}: the data give {x:.0} {unit}, outside the physical range [{:.0}, {:.0}]: kept at the {side} {kept:.0} ({})",
                self.min, self.max, self.why
            )),
        )
    }
}

/// The DUT's forwarding cost a packet (stage_cycles poll + ip_stack + xmit), in cycles
/// of the nominal 1 GHz clock (ns).
pub const DUT_PACKET_CYCLES: Bound = Bound {
    min: 200.0,
    max: 20_000.0,
    why: "below 200 ns a packet one CPU would forward 5 Mpps through veth and the IP stack, four times the most any configuration of this lab has reached (1.25 Mpps); above 20 us it would forward under 50 kpps, below every maximum measured here",
};

/// The DUT kthread's cost per wake-up (fixed_cycles.context_switch).
pub const WAKEUP_CYCLES: Bound = Bound {
    min: 0.0,
    max: 20_000.0,
    why: "a cost is not negative; a kthread wake-up with its context switch costs microseconds on a VM, not tens of them",
};

/// The testbed engines' cost a packet (testbed.generator_ / sink_cycles_per_packet).
pub const ENGINE_PACKET_CYCLES: Bound = Bound {
    min: 30.0,
    max: 5_000.0,
    why: "the generator builds and sends each frame, the sink runs its veth poll and an XDP program on it: each touches the frame's memory, tens of ns at the least (a slope below that means an intercept took the cost, as a 2-cycle sink fit once did); above 5 us a frame neither engine would reach the 200 kpps every sweep here reaches",
};

/// The threaded poller's wake-up delay (latency_ns.irq_delivery), ns.
pub const WAKEUP_DELAY_NS: Bound = Bound {
    min: 0.0,
    max: 4_000_000.0,
    why: "a delay is not negative; a woken kthread waits for a fairly shared CPU about one scheduler tick (4 ms at CONFIG_HZ 250) at the most, so a longer fitted delay would stand for something the twin does not model",
};

/// How the data fixed a parameter of the joint fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParameterStatus {
    /// Fixed by the data, inside its physical range.
    Fixed,
    /// The data asked for a value outside the range: kept at the bound.
    AtBound,
    /// The data cannot fix it: kept from the base profile.
    NotFixed,
}

/// One parameter of the joint fit: its value, its range and how it was fixed.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FittedParameter {
    pub name: String,
    pub value: f64,
    pub bound: Bound,
    pub status: ParameterStatus,
    pub how: String,
}

/// A configuration's maximum predicted from a fit that did not see it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LeaveOneOut {
    pub name: String,
    /// The DUT-limited maxima the delay was fitted on (this one left out).
    pub fitted_on: Vec<String>,
    pub prediction: Option<Prediction>,
    /// Why there is no prediction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_none: Option<String>,
}

/// A joint calibration (docs/sim.md, "The joint calibration"): the costs from the CPU figures of one
/// threaded configuration, clamped to physical ranges, and the threaded poller's
/// wake-up delay fitted by least squares over every DUT-limited maximum of the run,
/// with the testbed-limited maxima as "at least" constraints only.
#[derive(Clone, Debug, PartialEq)]
pub struct JointCalibration {
    /// The profile and the cost configuration's figures.
    pub calibration: Calibration,
    /// Configurations whose DUT-limited maximum the fit matches.
    pub targets: Vec<String>,
    /// Configurations the twin is held at or above, never fitted to: the lab's maximum
    /// is the generator's or the sink's, or the twin's is an upper bound
    /// ([`twin_is_upper_bound`]).
    pub lower_bounds: Vec<String>,
    pub parameters: Vec<FittedParameter>,
    /// Every searched configuration with the fitted profile (in-sample for targets).
    pub fitted: Vec<Prediction>,
    /// Every target predicted by a fit without it.
    pub leave_one_out: Vec<LeaveOneOut>,
}

/// The wake-up delays the joint fit tries first (ns): dense where the lab's fits have
/// landed (0.2-0.3 ms), coarse up to the bound; the best is refined between neighbours.
pub(super) const DELAY_GRID_NS: [f64; 14] = [
    0.0, 10e3, 25e3, 50e3, 100e3, 150e3, 200e3, 250e3, 300e3, 400e3, 600e3, 1e6, 2e6, 4e6,
];

/// The twin's maxima for the run's configurations as the wake-up delay varies, each
/// (configuration, delay) computed once.
pub(super) struct MaximaByDelay<'a> {
    plan: &'a TwinPlan,
    lab: LabProfile,
    confs: Vec<(&'a TwinConfiguration, f64, bool)>,
    cache: std::collections::HashMap<(usize, u64), f64>,
}

impl MaximaByDelay<'_> {
    /// The twin's maximum of configurations `which` at `delay` ns (softirq ones do not
    /// depend on it), computed on as many threads as there are configurations.
    fn at(&mut self, which: &[usize], delay: u64) -> Result<Vec<f64>, ConfigError> {
        let key = |i: usize, confs: &[(&TwinConfiguration, f64, bool)]| {
            let threaded = confs[i].0.napi == crate::config::NapiContext::Threaded;
            (i, if threaded { delay } else { 0 })
        };
        let missing: Vec<usize> = which
            .iter()
            .copied()
            .filter(|&i| !self.cache.contains_key(&key(i, &self.confs)))
            .collect();
        let mut lab = self.lab.clone();
        lab.profile.latency_ns.irq_delivery = delay;
        let results: Vec<Result<f64, ConfigError>> = std::thread::scope(|s| {
            let handles: Vec<_> = missing
                .iter()
                .map(|&i| {
                    let (conf, plan, lab) = (self.confs[i].0, self.plan, &lab);
                    s.spawn(move || twin_max(plan, conf, lab))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(err(&self.plan.name, "(twin)", "a twin thread panicked"))
                    })
                })
                .collect()
        });
        for (&i, r) in missing.iter().zip(results) {
            let k = key(i, &self.confs);
            self.cache.insert(k, r?);
        }
        Ok(which
            .iter()
            .map(|&i| self.cache[&key(i, &self.confs)])
            .collect())
    }

    /// Squared relative misses over `targets`, plus the squared shortfall below each of
    /// `bounds` (zero where the twin is at least the lab: a lower bound is a
    /// constraint, not a target).
    fn misfit(
        &mut self,
        targets: &[usize],
        bounds: &[usize],
        delay: u64,
    ) -> Result<f64, ConfigError> {
        let all: Vec<usize> = targets.iter().chain(bounds).copied().collect();
        let twin = self.at(&all, delay)?;
        Ok(all
            .iter()
            .zip(twin)
            .map(|(&i, t)| {
                let lab = self.confs[i].1;
                let miss = (t - lab) / lab;
                if targets.contains(&i) {
                    miss * miss
                } else {
                    miss.min(0.0).powi(2)
                }
            })
            .sum())
    }

    /// The delay (whole microseconds) that minimises the misfit within
    /// [`WAKEUP_DELAY_NS`]: the grid, then a golden-section search between the best
    /// point's neighbours. `None` when no target is threaded (nothing else depends on
    /// the delay).
    fn fit(
        &mut self,
        targets: &[usize],
        bounds: &[usize],
    ) -> Result<Option<DelayFit>, ConfigError> {
        if !targets.iter().any(|&i| self.confs[i].2) {
            return Ok(None);
        }
        let mut tried = Vec::new();
        for d in DELAY_GRID_NS {
            tried.push((d, self.misfit(targets, bounds, d as u64)?));
        }
        let best = (0..tried.len())
            .min_by(|&a, &b| tried[a].1.total_cmp(&tried[b].1))
            .unwrap_or(0);
        let (mut lo, mut hi) = (
            tried[best.saturating_sub(1)].0,
            tried[(best + 1).min(tried.len() - 1)].0,
        );
        let phi = 0.5 * (5f64.sqrt() - 1.0);
        let round = |x: f64| (x / 1e3).round() * 1e3;
        for _ in 0..10 {
            if hi - lo <= 2_000.0 {
                break;
            }
            let (a, b) = (round(hi - phi * (hi - lo)), round(lo + phi * (hi - lo)));
            let fa = self.misfit(targets, bounds, a as u64)?;
            let fb = self.misfit(targets, bounds, b as u64)?;
            tried.extend([(a, fa), (b, fb)]);
            if fa <= fb {
                hi = b;
            } else {
                lo = a;
            }
        }
        let found = tried
            .iter()
            .copied()
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)))
            .unwrap_or((0.0, f64::INFINITY));
        // Every delay tried that fits as well (within a 1% miss on one maximum): the
        // maxima fix the delay no closer than that.
        let equally = tried.iter().filter(|t| t.1 <= found.1 + DELAY_FLAT_MISFIT);
        let low = equally.clone().map(|t| t.0).fold(f64::INFINITY, f64::min);
        let high = equally.map(|t| t.0).fold(0.0, f64::max);
        Ok(Some(DelayFit {
            delay_ns: found.0 as u64,
            misfit: found.1,
            equally_good_ns: (low, high),
        }))
    }
}

/// A misfit this much above the best (a 1% miss on one maximum) fits as well.
pub(super) const DELAY_FLAT_MISFIT: f64 = 1e-4;

/// The wake-up delay the maxima ask for.
pub(super) struct DelayFit {
    delay_ns: u64,
    /// Sum of squared relative misses (and shortfalls below the constraints).
    misfit: f64,
    /// The range of the delays tried that fit as well: when it reaches 0 the maxima
    /// only bound the delay from above (the CPU sets them, not the delay).
    equally_good_ns: (f64, f64),
}

/// The configuration whose CPU figures fix the costs: threaded NAPI without RPS and
/// with a search; the DUT alone on its CPU first (its kthread's CPU is then the DUT's
/// alone), a DUT-limited maximum next.
pub(super) fn cost_configuration(
    record: &RunRecord,
    plan: &TwinPlan,
    file: &str,
) -> Option<String> {
    let mut candidates: Vec<(bool, bool, &str)> = record
        .configurations
        .iter()
        .filter(|c| lab_figures(record, &c.name, file).is_ok())
        .filter_map(|c| {
            let conf = plan.configurations.iter().find(|t| t.name == c.name)?;
            let shared = conf.engines_on_poller.generator || conf.engines_on_poller.sink;
            let bound = c
                .max_throughput
                .as_ref()
                .is_some_and(|m| Prediction::is_lower_bound(&m.stopped));
            Some((shared, bound, c.name.as_str()))
        })
        .collect();
    candidates.sort();
    candidates.first().map(|c| c.2.to_string())
}

/// Fits a lab profile on every searched configuration of `record` jointly, starting
/// from `base` (module docs; docs/sim.md "The veth-lab profile and its calibration").
pub fn calibrate_joint(
    record: &RunRecord,
    file: &str,
    base: &LabProfile,
) -> Result<JointCalibration, ConfigError> {
    let (_, plan) = plan_of(record, file)?;
    let cost_name = cost_configuration(record, &plan, file).ok_or_else(|| {
        err(
            file,
            "configurations",
            "the data cannot fix the DUT's per-packet cost: no configuration with napi = \"threaded\", no RPS, a maximum-throughput search and the DUT's NAPI kthread in its Observation (only there does a thread's CPU time show the DUT's work alone); measure one",
        )
    })?;
    let CostFit {
        mut lab,
        figures,
        dut_share,
        mut notes,
        ..
    } = fit_costs(record, file, &cost_name, base)?;
    notes.insert(
        0,
        format!(
            "joint fit over run {}: the costs from the CPU figures of {cost_name}, the wake-up delay by least squares over every DUT-limited maximum",
            record.run_id
        ),
    );
    lab.profile.description = format!(
        "veth lab of this machine, fitted jointly on lab run {} (costs from {cost_name})",
        record.run_id
    );
    let mut parameters = clamp_costs(&mut lab, &cost_name, &mut notes);
    let Searched {
        confs,
        targets,
        bounds,
    } = searched(record, &plan, &mut notes);
    let names = |v: &[usize]| {
        v.iter()
            .map(|&i| confs[i].0.name.clone())
            .collect::<Vec<_>>()
    };
    let (target_names, bound_names) = (names(&targets), names(&bounds));
    let mut maxima = MaximaByDelay {
        plan: &plan,
        lab: lab.clone(),
        confs: confs.clone(),
        cache: Default::default(),
    };
    let base_delay = base.profile.latency_ns.irq_delivery;
    let (delay, parameter, note) = match maxima.fit(&targets, &bounds)? {
        Some(fit) => fitted_delay(&fit, &target_names, &bound_names),
        None => unfixed_delay(base_delay),
    };
    parameters.push(parameter);
    notes.push(note);
    lab.profile.latency_ns.irq_delivery = delay;
    let all: Vec<usize> = (0..confs.len()).collect();
    let twin_all = maxima.at(&all, delay)?;
    let prediction = |i: usize, twin: f64| {
        let c = record
            .configurations
            .iter()
            .find(|c| c.name == confs[i].0.name);
        let stopped = c
            .and_then(|c| c.max_throughput.as_ref())
            .map_or(String::new(), |m| m.stopped.clone());
        Prediction::new(
            &confs[i].0.name,
            confs[i].1,
            &stopped,
            twin,
            twin_is_upper_bound(confs[i].0),
        )
    };
    let fitted: Vec<Prediction> = all.iter().map(|&i| prediction(i, twin_all[i])).collect();
    // Leave one out: each target predicted by the delay the others fix.
    let mut leave_one_out = Vec::new();
    for &t in &targets {
        let others: Vec<usize> = targets.iter().copied().filter(|&i| i != t).collect();
        let twin = left_out_maximum(&mut maxima, t, &others, &bounds)?;
        leave_one_out.push(LeaveOneOut {
            name: confs[t].0.name.clone(),
            fitted_on: names(&others),
            prediction: twin.map(|twin| prediction(t, twin)),
            why_none: twin.is_none().then(|| {
                "no other DUT-limited threaded maximum in the run fixes the wake-up delay".into()
            }),
        });
    }
    let cost_twin = fitted
        .iter()
        .find(|p| p.name == cost_name)
        .map_or(0.0, |p| p.twin_max_pps);
    Ok(JointCalibration {
        calibration: Calibration {
            lab,
            figures,
            twin_max_pps: cost_twin,
            dut_share,
            notes,
            delay_fit: format!("least squares over the DUT-limited maxima of {} (testbed-limited ones as lower bounds only); threaded configurations only", target_names.join(", ")),
        },
        targets: target_names,
        lower_bounds: bound_names,
        parameters,
        fitted,
        leave_one_out,
    })
}

/// A fitted parameter, at its bound where `note` says it was clamped, with `how` it
/// was fixed otherwise.
fn parameter(
    name: &str,
    value: f64,
    bound: Bound,
    note: &Option<String>,
    how: impl FnOnce() -> String,
) -> FittedParameter {
    FittedParameter {
        name: name.into(),
        value,
        bound,
        status: if note.is_some() {
            ParameterStatus::AtBound
        } else {
            ParameterStatus::Fixed
        },
        how: note.clone().unwrap_or_else(how),
    }
}

/// Clamps the fitted costs to their physical ranges (the fit says where it did):
/// the DUT's cycles a packet and a wake-up, the engines' cycles a packet.
fn clamp_costs(
    lab: &mut LabProfile,
    cost_name: &str,
    notes: &mut Vec<String>,
) -> Vec<FittedParameter> {
    let mut parameters = Vec::new();
    let p = &lab.profile.stage_cycles;
    let per_packet = p.poll + p.ip_stack + p.xmit;
    let (kept, note) = DUT_PACKET_CYCLES.clamp("DUT cycles a packet", per_packet, "cycles");
    if kept != per_packet {
        let scale = kept / per_packet.max(1e-9);
        let s = &mut lab.profile.stage_cycles;
        s.poll = (s.poll * scale).round();
        s.ip_stack = (s.ip_stack * scale).round();
        s.xmit = (s.xmit * scale).round();
    }
    parameters.push(parameter(
        "stage_cycles.poll + ip_stack + xmit",
        kept,
        DUT_PACKET_CYCLES,
        &note,
        || format!("the DUT kthread's CPU per delivered packet at the highest load of {cost_name}"),
    ));
    notes.extend(note);
    let wake = lab.profile.fixed_cycles.context_switch;
    let (kept, note) = WAKEUP_CYCLES.clamp("DUT cycles a wake-up", wake, "cycles");
    lab.profile.fixed_cycles.context_switch = kept;
    parameters.push(parameter("fixed_cycles.context_switch", kept, WAKEUP_CYCLES, &note, || {
        format!("least squares over the lower loads of {cost_name}: the DUT kthread's CPU beyond the packets")
    }));
    notes.extend(note);
    let mut testbed = lab.testbed.take().unwrap_or_default();
    for (name, value) in [
        (
            "testbed.generator_cycles_per_packet",
            &mut testbed.generator_cycles_per_packet,
        ),
        (
            "testbed.sink_cycles_per_packet",
            &mut testbed.sink_cycles_per_packet,
        ),
    ] {
        let (kept, note) = ENGINE_PACKET_CYCLES.clamp(name, *value, "cycles");
        *value = kept;
        parameters.push(parameter(name, kept, ENGINE_PACKET_CYCLES, &note, || {
            "slope of the engine's CPU over its rate (see the notes)".into()
        }));
        notes.extend(note);
    }
    lab.testbed = Some(testbed);
    parameters
}

/// The searched configurations the twin can run: (configuration, lab maximum,
/// threaded) each, and which of them are targets (DUT-limited) and which only bounds.
struct Searched<'a> {
    confs: Vec<(&'a TwinConfiguration, f64, bool)>,
    targets: Vec<usize>,
    bounds: Vec<usize>,
}

/// Targets and constraints: every searched configuration the twin can run; those
/// whose search did not finish are named in a note and left out.
fn searched<'a>(record: &RunRecord, plan: &'a TwinPlan, notes: &mut Vec<String>) -> Searched<'a> {
    let mut confs = Vec::new();
    let (mut targets, mut bounds, mut unfinished) = (Vec::new(), Vec::new(), Vec::new());
    for c in &record.configurations {
        let Some(m) = &c.max_throughput else { continue };
        let Some(conf) = plan.configurations.iter().find(|t| t.name == c.name) else {
            continue;
        };
        if Prediction::is_unfinished(&m.stopped, m.pps) {
            unfinished.push(c.name.clone());
            continue;
        }
        let i = confs.len();
        confs.push((
            conf,
            m.pps,
            conf.napi == crate::config::NapiContext::Threaded,
        ));
        if Prediction::is_lower_bound(&m.stopped) || twin_is_upper_bound(conf) {
            bounds.push(i);
        } else {
            targets.push(i);
        }
    }
    if !unfinished.is_empty() {
        notes.push(format!(
            "not used: {} (the lab's search did not finish, e.g. its time limit on a disturbed machine: that maximum is neither the DUT's nor a bound on it)",
            unfinished.join(", ")
        ));
    }
    Searched {
        confs,
        targets,
        bounds,
    }
}

/// The wake-up delay the maxima fixed: (delay, its parameter, its note).
fn fitted_delay(
    fit: &DelayFit,
    target_names: &[String],
    bound_names: &[String],
) -> (u64, FittedParameter, String) {
    let d = fit.delay_ns;
    let (kept, note) = WAKEUP_DELAY_NS.clamp("latency_ns.irq_delivery", d as f64, "ns");
    let (low, high) = fit.equally_good_ns;
    let how = format!(
        "least squares of the twin's relative miss over the DUT-limited maxima of {} (root of the misfit {:.1}%, shortfalls below the constraints included; delays from {:.0} to {:.0} us fit as well), the twin held at or above the maxima of {} (testbed-limited, or where the twin can only overestimate)",
        target_names.join(", "),
        fit.misfit.sqrt() * 100.0,
        low / 1e3,
        high / 1e3,
        if bound_names.is_empty() {
            "none".to_string()
        } else {
            bound_names.join(", ")
        }
    );
    let at_bound = d as f64 >= WAKEUP_DELAY_NS.max;
    let unfixed = low <= 0.0 && high > 0.0;
    let status = if note.is_some() || at_bound {
        ParameterStatus::AtBound
    } else if unfixed {
        ParameterStatus::NotFixed
    } else {
        ParameterStatus::Fixed
    };
    let said = match status {
        ParameterStatus::AtBound => format!(
            "; at the bound of {:.0} ns ({})",
            WAKEUP_DELAY_NS.max, WAKEUP_DELAY_NS.why
        ),
        ParameterStatus::NotFixed => format!(
            "; the data cannot fix it: any delay up to {:.0} us gives the same maxima (the CPU sets them, not the delay), so it is only bounded from above",
            high / 1e3
        ),
        ParameterStatus::Fixed => String::new(),
    };
    let parameter = FittedParameter {
        name: "latency_ns.irq_delivery".into(),
        value: kept,
        bound: WAKEUP_DELAY_NS,
        status,
        how: format!("{how}{said}"),
    };
    let note = format!("latency_ns.irq_delivery = {kept:.0} ns: {how}{said}");
    (kept as u64, parameter, note)
}

/// The wake-up delay kept from the base profile when no maximum fixes it.
fn unfixed_delay(base_delay: u64) -> (u64, FittedParameter, String) {
    let how = format!(
        "the data cannot fix it: no DUT-limited maximum of a threaded configuration the twin models fully (the only ones it affects); kept from the base profile ({base_delay} ns)"
    );
    let parameter = FittedParameter {
        name: "latency_ns.irq_delivery".into(),
        value: base_delay as f64,
        bound: WAKEUP_DELAY_NS,
        status: ParameterStatus::NotFixed,
        how: how.clone(),
    };
    (
        base_delay,
        parameter,
        format!("latency_ns.irq_delivery: {how}"),
    )
}

/// The twin's maximum of target `t` at the delay fitted on `others` (None: they fix
/// none); a softirq maximum does not depend on the delay, the costs predict it.
fn left_out_maximum(
    maxima: &mut MaximaByDelay<'_>,
    t: usize,
    others: &[usize],
    bounds: &[usize],
) -> Result<Option<f64>, ConfigError> {
    if !maxima.confs[t].2 {
        return Ok(Some(maxima.at(&[t], 0)?[0]));
    }
    match maxima.fit(others, bounds)? {
        Some(fit) => {
            let d = fit.delay_ns.min(WAKEUP_DELAY_NS.max as u64);
            Ok(Some(maxima.at(&[t], d)?[0]))
        }
        None => Ok(None),
    }
}
