//! The figures the server fit compares: the lab's usable points of each mode and the
//! twin's at the same rates, and the statistics read from either (the server's CPU,
//! its NAPI kthreads', busy polls).

use napilab_core::scenario::{ServerEngine, ServerMode};
use napilab_core::{PointRole, RequestPointResult, RequestResults, RunRecord};

use crate::calibrate::LabProfile;
use crate::from_server_scenario::{self, ServerCosts};
use crate::{ConfigError, TwinPlan};

use super::err;

/// What one mode of the run gives the fit.
#[derive(Clone)]
pub(super) struct ModeRun<'a> {
    /// Index into the plan's configurations.
    pub(super) index: usize,
    pub(super) name: &'a str,
    /// The lab's server device (its NAPI kthreads are `napi/<device>-<id>`).
    pub(super) device: String,
    /// Points that met the objective (so the client kept its schedule, every request
    /// was answered and the server was not saturated) at 90% or more of the offered
    /// rate: their CPU per request is the server's cost. A point whose client fell
    /// behind (its CPU taken by other tasks, on a shared machine) measures a burst,
    /// not the rate; a saturated server's CPU per request is not linear in the rate.
    pub(super) points: Vec<&'a RequestPointResult>,
    pub(super) results: &'a RequestResults,
}

impl ModeRun<'_> {
    /// The distinct requested rates of the usable points, increasing.
    pub(super) fn rates(&self) -> Vec<f64> {
        let mut r: Vec<f64> = self.points.iter().map(|p| p.requested_qps).collect();
        r.sort_by(f64::total_cmp);
        r.dedup();
        r
    }

    pub(super) fn side(&self) -> Side {
        Side::Lab {
            device: self.device.clone(),
        }
    }
}

/// The CPU the server's work took, as a share of one CPU: its workers' own CPU time
/// (the kernel's runtime of each thread, which on a kernel without
/// CONFIG_IRQ_TIME_ACCOUNTING includes the softirqs run at their bh-enable, the
/// replies' receive) plus the server device's NAPI kthreads. Not /proc/stat's busy
/// time of the server's CPUs: on a shared machine that counts every other task there.
/// The twin's side: its workers, its NAPI kthreads and its softirq at bh-enable.
pub(super) fn server_work(p: &RequestPointResult, side: &Side) -> f64 {
    p.server.cpu_busy
        + napi_kthreads(p, side)
        + match side {
            Side::Lab { .. } => 0.0,
            Side::Twin => cpu_entry(p, "softirq at bh-enable (model)"),
        }
}

pub(super) fn cpu_entry(p: &RequestPointResult, name: &str) -> f64 {
    p.cpu
        .iter()
        .find(|(k, _)| k == name)
        .map_or(0.0, |(_, v)| *v)
}

/// The server device's NAPI kthreads' CPU, a share of a CPU: the lab's from the
/// Observation's `napi/<device>-*` threads, the twin's from its own accounting.
pub(super) fn napi_kthreads(p: &RequestPointResult, side: &Side) -> f64 {
    let Side::Lab { device } = side else {
        return cpu_entry(p, "napi kthread (model)");
    };
    p.observation.as_ref().map_or(0.0, |o| {
        let secs: f64 = o.intervals.iter().map(|i| i.duration_s).sum();
        let prefix = format!("napi/{device}-");
        let busy: f64 = o
            .intervals
            .iter()
            .map(|i| {
                i.duration_s
                    * i.threads
                        .iter()
                        .filter(|t| t.name.starts_with(&prefix))
                        .filter_map(|t| t.cpu.as_ref().map(|m| m.value))
                        .sum::<f64>()
            })
            .sum();
        if secs > 0.0 {
            busy / secs
        } else {
            0.0
        }
    })
}

/// Which record a point comes from: the lab's (its server device, whose NAPI
/// kthreads are the server's) or the twin's.
pub(super) enum Side {
    Lab { device: String },
    Twin,
}

/// NAPI polls per second from the server's busy polling (trace tier; the twin's own).
pub(super) fn busy_polls(p: &RequestPointResult) -> Option<f64> {
    p.napi_polls_per_s
        .iter()
        .find(|(k, _)| k == "busy poll")
        .map(|(_, v)| *v)
        .filter(|v| *v > 0.0)
}

/// Polls a second by the server's NAPI kthreads (trace tier; the twin's own).
pub(super) fn kthread_polls(p: &RequestPointResult) -> f64 {
    p.napi_polls_per_s
        .iter()
        .find(|(k, _)| k == "napi kthread")
        .map_or(0.0, |(_, v)| *v)
}

/// The worker's CPU time per pass of its busy-polling loop, seconds.
pub(super) fn pass_time(p: &RequestPointResult) -> Option<f64> {
    busy_polls(p).map(|polls| p.server.cpu_busy / polls)
}

/// The twin's points of configuration `index` at `rates` with `costs` (one run each,
/// the plan's first seed).
pub(super) fn twin_points(
    plan: &TwinPlan,
    index: usize,
    lab: &LabProfile,
    costs: &ServerCosts,
    rates: &[f64],
) -> Result<Vec<RequestPointResult>, ConfigError> {
    let (conf, server, sp) = match (
        plan.configurations.get(index),
        plan.requests
            .as_ref()
            .and_then(|s| s.configurations.get(index).map(|c| (c, s))),
    ) {
        (Some(c), Some((s, sp))) => (c, s, sp),
        _ => {
            return Err(err(
                &plan.name,
                "configurations",
                format!("no configuration {index}"),
            ))
        }
    };
    let profile = costs.profile(&conf.profile_for(&lab.profile, None));
    let base = costs.apply(&conf.config);
    let seed = plan.seeds.first().copied().unwrap_or(1);
    rates
        .iter()
        .map(|&qps| {
            let mut c = base.clone();
            c.traffic.rate_pps = qps;
            let r = crate::try_run(&c, &profile, seed)?;
            Ok(from_server_scenario::request_point(
                &r,
                PointRole::Sweep,
                0,
                qps,
                &server.server_cpus,
                sp.workload.slo_p99_us,
            ))
        })
        .collect()
}

/// The lab's mean of `value` over `run`'s usable points at each of its rates
/// ([`ModeRun::rates`] order), and the points' count.
pub(super) fn lab_by_rate(
    run: &ModeRun<'_>,
    value: impl Fn(&RequestPointResult) -> f64,
) -> Vec<f64> {
    run.rates()
        .iter()
        .map(|&r| {
            let at: Vec<f64> = run
                .points
                .iter()
                .filter(|p| p.requested_qps == r)
                .map(|p| value(p))
                .collect();
            at.iter().sum::<f64>() / at.len().max(1) as f64
        })
        .collect()
}

/// The twin's `value` at each of `rates` in configuration `index` with `costs`.
pub(super) fn twin_by_rate(
    plan: &TwinPlan,
    index: usize,
    base: &LabProfile,
    costs: &ServerCosts,
    rates: &[f64],
    value: impl Fn(&RequestPointResult) -> f64,
) -> Result<Vec<f64>, ConfigError> {
    let pts = twin_points(plan, index, base, costs, rates)?;
    Ok(pts.iter().map(value).collect())
}

/// The run's configurations of napilab's server in `mode`, with their usable points.
pub(super) fn mode_runs<'a>(
    plan: &TwinPlan,
    record: &'a RunRecord,
    mode: ServerMode,
) -> Vec<ModeRun<'a>> {
    let Some(sp) = &plan.requests else {
        return Vec::new();
    };
    sp.configurations
        .iter()
        .enumerate()
        .filter(|(_, s)| s.mode == mode && s.engine == ServerEngine::Napilab)
        .filter_map(|(index, s)| {
            let c = record.configurations.iter().find(|c| c.name == s.name)?;
            let results = c.requests.as_ref()?;
            let device = c
                .settings
                .iter()
                .find(|(k, _)| k == "server_device")
                .map_or_else(String::new, |(_, v)| v.clone());
            let points = results
                .points
                .iter()
                .filter(|p| {
                    p.meets_slo
                        && p.achieved_qps > 0.0
                        && p.achieved_qps >= 0.9 * p.requested_qps
                        && p.server.requests > 0
                })
                .collect();
            Some(ModeRun {
                index,
                name: c.name.as_str(),
                device,
                points,
                results,
            })
        })
        .collect()
}

/// Why `runs` (of `mode`) give no slope, or None when one does.
pub(super) fn too_few(runs: &[ModeRun<'_>], mode: ServerMode) -> Option<String> {
    if runs.is_empty() {
        return Some(format!(
            "the run has no configuration of napilab's server in mode {}",
            mode.as_str()
        ));
    }
    if runs.iter().all(|r| r.rates().len() < 2) {
        return Some(format!(
            "{}: fewer than two offered rates met the objective (which needs the client on its schedule: on a machine shared with other work it falls behind)",
            runs.iter().map(|r| r.name).collect::<Vec<_>>().join(", ")
        ));
    }
    None
}

pub(super) fn names(runs: &[ModeRun<'_>]) -> String {
    runs.iter()
        .map(|r| r.name)
        .collect::<Vec<_>>()
        .join(" and ")
}
