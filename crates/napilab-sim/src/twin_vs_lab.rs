//! The twin beside a lab run (docs/sim.md, "The joint calibration"): after `napilab lab run`, every
//! searched configuration's maximum and, in scenarios with several traffic classes
//! (ingress-qos), every class's latency and loss at each sweep load, predicted with the
//! shipped `veth-lab` profile. That profile was fitted on other runs (its description
//! names them), so no figure of the run at hand goes into its own prediction.
//! With `leave_one_out` every DUT-limited maximum is also predicted by the joint fit
//! to the run's other configurations (`napilab sim calibrate --lab RUN.json`,
//! calibrate.rs): the twin judged on the host the run came from, whatever host the
//! shipped profile was fitted on. Each comparison says whether the profile's host is
//! the run's.

use napilab_core::{
    LeaveOneOutMaximum, PointResult, PointRole, RunKind, RunRecord, TwinClassPoint, TwinMaximum,
    TwinVsLab,
};

use crate::calibrate::{self, LabProfile, Prediction};
use crate::from_scenario::{self, TwinConfiguration, TwinPlan};
use crate::ConfigError;

/// The twin's predictions for `record`, or `None` where the twin does not compare:
/// runs of the twin itself, interrupted runs and server runs (their request points
/// have their own comparison). What the twin cannot run is said in the notes.
/// `leave_one_out`: also the predictions of a fit to the run's other configurations
/// (the joint fit runs the twin's searches at many wake-up delays: a minute or more).
pub fn compare(record: &RunRecord, leave_one_out: bool) -> Option<TwinVsLab> {
    if record.kind != RunKind::Lab
        || record.interrupted
        || record.configurations.iter().any(|c| c.requests.is_some())
    {
        return None;
    }
    let lab = match LabProfile::load(calibrate::VETH_LAB_NAME) {
        Ok(l) => l,
        Err(e) => {
            return Some(unavailable(format!(
                "the shipped profile does not load: {e}"
            )))
        }
    };
    let mut out = compare_with(record, &lab)
        .unwrap_or_else(|e| unavailable(format!("the twin cannot run this scenario: {e}")));
    if leave_one_out && out.maxima.len() >= 2 {
        add_leave_one_out(record, &lab, &mut out);
    }
    Some(out)
}

/// Whether `lab` was fitted on the host `record` ran on, in words (see
/// [`TwinVsLab::profile_host`]).
pub fn profile_host(record: &RunRecord, lab: &LabProfile) -> String {
    match (&lab.fitted_on_host, &record.host.identity) {
        (None, _) => "unknown: the profile does not record the host it was fitted on (fitted before napilab kept host identities)".into(),
        (Some(_), None) => "unknown: this run does not record its host".into(),
        (Some(fitted), Some(here)) => {
            let differs = fitted.differences(here);
            if differs.is_empty() {
                "same host".into()
            } else {
                format!(
                    "different host: {}",
                    differs
                        .iter()
                        .map(|d| format!("{} {} (profile) vs {} (run)", d.field, d.a, d.b))
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            }
        }
    }
}

/// Each DUT-limited maximum predicted by the joint fit to the others (the costs from
/// the run's threaded cost configuration, the wake-up delay from the other maxima).
fn add_leave_one_out(record: &RunRecord, lab: &LabProfile, out: &mut TwinVsLab) {
    let file = format!("run {}", record.run_id);
    let joint = match calibrate::calibrate_joint(record, &file, lab) {
        Ok(j) => j,
        Err(e) => {
            out.notes.push(format!(
                "no leave-one-out predictions: the run cannot be fitted ({e})"
            ));
            return;
        }
    };
    if joint.targets.is_empty() {
        out.notes.push("no leave-one-out predictions: no maximum of this run is one the twin predicts (the searches did not finish, the testbed set them, or the DUT's NAPI kthread shares its CPU with the generator or the sink, where the twin, without the engines' threads, gives only an upper bound)".into());
        return;
    }
    for l in joint.leave_one_out {
        let Some(row) = out.maxima.iter_mut().find(|m| m.configuration == l.name) else {
            continue;
        };
        row.leave_one_out = Some(match l.prediction {
            Some(p) => LeaveOneOutMaximum {
                fitted_on: l.fitted_on,
                twin_pps: Some(p.twin_max_pps),
                relative_error: p.relative_error.is_finite().then_some(p.relative_error),
                verdict: p.verdict(),
            },
            None => LeaveOneOutMaximum {
                fitted_on: l.fitted_on,
                twin_pps: None,
                relative_error: None,
                verdict: l.why_none.unwrap_or_else(|| "no prediction".to_string()),
            },
        });
    }
    out.notes.push(format!(
        "leave-one-out: each DUT-limited maximum ({}) predicted by a fit to this run without it (costs from the CPU figures of {}, the threaded wake-up delay from the other maxima); rows whose lab maximum is the testbed's are bounds in the fit, not predicted",
        joint.targets.join(", "),
        joint.calibration.figures.name
    ));
}

fn unavailable(why: String) -> TwinVsLab {
    TwinVsLab {
        profile: calibrate::VETH_LAB_NAME.into(),
        notes: vec![why],
        ..TwinVsLab::default()
    }
}

/// The comparison with the lab profile `lab`.
pub fn compare_with(record: &RunRecord, lab: &LabProfile) -> Result<TwinVsLab, ConfigError> {
    let file = format!("run {}", record.run_id);
    let (scenario, plan) = calibrate::plan_of(record, &file)?;
    let several_classes = scenario.traffic.classes.len() > 1;
    let confs: Vec<&TwinConfiguration> = record
        .configurations
        .iter()
        .filter_map(|c| plan.configurations.iter().find(|t| t.name == c.name))
        .collect();
    // One thread per configuration: each runs its own search on the twin.
    let results: Vec<Result<TwinFigures, ConfigError>> = std::thread::scope(|s| {
        let handles: Vec<_> = confs
            .iter()
            .map(|&conf| {
                let plan = &plan;
                let lab_loads = lab_sweep_loads(record, &conf.name);
                s.spawn(move || twin_of(plan, conf, lab, several_classes, lab_loads))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(ConfigError::new(&file, "(twin)", "a twin thread panicked"))
                })
            })
            .collect()
    });
    // The shipped profile names the run it was fitted on: on that run its rows are a
    // fit, not a prediction.
    let own = if lab.profile.description.contains(&record.run_id) {
        "; this is the run the profile was FITTED on, so its calibration configuration's row is in-sample, not a prediction"
    } else {
        "; no figure of this run went into it"
    };
    let mut out = TwinVsLab {
        profile_host: profile_host(record, lab),
        profile: lab.profile.name.clone(),
        basis: format!(
            "predicted with the shipped {} profile ({}){own}. `napilab sim calibrate --lab run.json` fits this run jointly and predicts each DUT-limited maximum from the others",
            lab.profile.name, lab.profile.description
        ),
        ..TwinVsLab::default()
    };
    for (conf, result) in confs.iter().zip(results) {
        let (twin_max, twin_points) = result?;
        let Some(lab_c) = record.configurations.iter().find(|c| c.name == conf.name) else {
            continue;
        };
        if let (Some(m), Some(twin)) = (&lab_c.max_throughput, twin_max) {
            let p = Prediction::new(
                &conf.name,
                m.pps,
                &m.stopped,
                twin,
                calibrate::twin_is_upper_bound(conf),
            );
            out.maxima.push(TwinMaximum {
                configuration: p.name.clone(),
                lab_pps: p.lab_max_pps,
                lab_stopped: p.lab_stopped.clone(),
                lab_lower_bound: p.lab_lower_bound,
                twin_upper_bound: p.twin_upper_bound,
                lab_unfinished: Prediction::is_unfinished(&p.lab_stopped, p.lab_max_pps),
                twin_pps: p.twin_max_pps,
                relative_error: p.relative_error.is_finite().then_some(p.relative_error),
                verdict: p.verdict(),
                leave_one_out: None,
            });
        }
        if !several_classes {
            continue;
        }
        for lp in lab_c
            .points
            .iter()
            .filter(|p| p.role == PointRole::Sweep && p.repeat == 0)
        {
            let Some(tp) = twin_points
                .iter()
                .find(|t| (t.requested_pps - lp.requested_pps).abs() <= 0.01 * lp.requested_pps)
            else {
                continue;
            };
            for lc in &lp.classes {
                let tc = tp.classes.iter().find(|c| c.name == lc.name);
                out.classes.push(TwinClassPoint {
                    configuration: conf.name.clone(),
                    requested_pps: lp.requested_pps,
                    class: lc.name.clone(),
                    lab_p50_us: lc.latency.as_ref().map(|l| l.p50_us),
                    lab_p99_us: lc.latency.as_ref().map(|l| l.p99_us),
                    lab_loss: loss(lc.sent, lc.received),
                    twin_p50_us: tc.and_then(|c| c.latency.as_ref()).map(|l| l.p50_us),
                    twin_p99_us: tc.and_then(|c| c.latency.as_ref()).map(|l| l.p99_us),
                    twin_loss: tc.map_or(f64::NAN, |c| loss(c.sent, c.received)),
                });
            }
        }
    }
    if several_classes && lab.profile.latency_ns.irq_delivery > 0 {
        out.notes.push(format!(
            "the class rows run the twin without the profile's fitted wake-up delay ({} us): it stands for veth's ring overflowing while the poller waits at the maximum, and paid on every wake-up it would swamp the latencies; the twin's class latencies say how the classes rank, not what the lab's clocks read (the twin has no threads for the generator and the sink, whose scheduling the lab's latencies include)",
            lab.profile.latency_ns.irq_delivery / 1000
        ));
    }
    if out
        .maxima
        .iter()
        .any(|m| Prediction::is_unfinished(&m.lab_stopped, m.lab_pps))
    {
        out.notes.push("a lab search that did not finish (its time limit, e.g. when other processes disturbed its trials) gives no maximum to judge the twin by: those rows are for information only".into());
    }
    if out.maxima.iter().any(|m| m.lab_lower_bound) {
        out.notes.push("a lab maximum that the generator or the sink set (lab_lower_bound) only says the DUT forwards at least that much: the twin is judged by \"twin >= lab\" there".into());
    }
    Ok(out)
}

fn loss(sent: u64, received: u64) -> f64 {
    if sent == 0 {
        0.0
    } else {
        sent.saturating_sub(received) as f64 / sent as f64
    }
}

/// One configuration on the twin: its maximum (with a search) and its sweep points
/// (several-class scenarios).
type TwinFigures = (Option<f64>, Vec<PointResult>);

/// The twin's maximum of one configuration (the scenario's search after its sweep, as
/// `calibrate::twin_max` runs it) and, for `classes`, its sweep points (first seed
/// only) run without the lab profile's wake-up delay: the delay stands for veth's
/// ring overflowing while the poller waits at the maximum (docs/sim.md), and paid on
/// every wake-up it would swamp the latencies the classes are compared by.
/// The loads the lab's sweep of configuration `name` measured (its first repeat's, in
/// order): fractions of the probed capacity are the lab's capacity's, not the twin's.
fn lab_sweep_loads(record: &RunRecord, name: &str) -> Vec<f64> {
    record
        .configurations
        .iter()
        .find(|c| c.name == name)
        .map(|c| {
            c.points
                .iter()
                .filter(|p| p.role == napilab_core::PointRole::Sweep && p.repeat == 0)
                .map(|p| p.requested_pps)
                .collect()
        })
        .unwrap_or_default()
}

/// The twin at the lab's sweep loads `lab_loads` (when the lab measured any).
fn twin_of(
    plan: &TwinPlan,
    conf: &TwinConfiguration,
    lab: &LabProfile,
    classes: bool,
    lab_loads: Vec<f64>,
) -> Result<TwinFigures, ConfigError> {
    let mut plan = plan.clone();
    plan.seeds.truncate(1);
    if !lab_loads.is_empty() {
        plan.loads = lab_loads;
        plan.load_fractions.clear();
    }
    let mut max = None;
    if plan.search.is_some() {
        let profile = conf.profile_for(&lab.profile, lab.testbed.as_ref());
        let (_, m) = from_scenario::run_configuration(&plan, conf, |batch| {
            from_scenario::run_serial(batch, &profile)
        })?;
        max = m.map(|m| m.pps);
    }
    let mut points = Vec::new();
    if classes && !plan.loads.is_empty() {
        let mut profile = conf.profile_for(&lab.profile, lab.testbed.as_ref());
        profile.latency_ns.irq_delivery = 0;
        plan.search = None;
        (points, _) = from_scenario::run_configuration(&plan, conf, |batch| {
            from_scenario::run_serial(batch, &profile)
        })?;
    }
    Ok((max, points))
}
