//! Calibrating the twin's server costs on a lab run of the `server` topology
//! (`napilab sim calibrate --lab RUN.json` when the run's topology is `server`;
//! docs/sim.md, "The server topology on the twin").
//!
//! The four costs the twin charges a request ([`ServerCosts`]) are fitted from the CPU
//! time of the server's own threads (its workers and its device's NAPI kthreads: not
//! /proc/stat's busy time of its CPU, which on a shared machine counts every other
//! task), each against the twin's own figure for the same statistic at the same
//! offered rates (so what the twin adds by itself, such as context switches or polls,
//! is not counted twice), from the points that met the objective:
//! 1. `app_user_cycles + app_kernel_cycles`: the slope of that CPU over the achieved
//!    rate in `no-coalescing` (else `deferral`), where the requests' receive runs on
//!    the client's CPU (veth polls in the sender's softirq) and the server's CPU does
//!    the server's work and the replies' receive. The user/kernel split stays assumed
//!    (the lab measures a worker's time as one number).
//! 2. `poll_cycles`: the worker's CPU time per busy poll (trace tier) at busy-wait's
//!    low rates, against the twin's pass.
//! 3. `receive_cycles`: the same slope in `threaded` (else `irq-suspend`), where the
//!    requests' receive moves onto the server's CPU.
//! 4. The client's cost per request: the slope of the load generator's CPU over the
//!    achieved rate in the modes that poll on the server's CPU. The twin's client is
//!    ideal: the number is reported, not modelled (its maxima are upper bounds where
//!    the lab's client is the limit).
//!
//! Each twin statistic is taken as linear in its cost: the twin is run at two values,
//! the line solved for the lab's figure and refined by secant steps, then clamped to
//! physical bounds (with the reason). A cost the run cannot fix (its mode is missing,
//! too few points met the objective) keeps its assumed value and says why.

use std::collections::BTreeMap;

use napilab_core::scenario::{ServerEngine, ServerMode};
use napilab_core::{PointRole, RequestPointResult, RequestResults, RunKind, RunRecord};
use serde::{Deserialize, Serialize};

use crate::calibrate::{self, LabProfile};
use crate::from_server_scenario::{self, ServerCosts};
use crate::profile::{ParamSource, SourceKind};
use crate::{ConfigError, TwinPlan};

/// The shipped profile of this machine's veth lab with server costs fitted on a
/// server run (the veth-lab platform costs plus a `[server]` table).
pub const VETH_LAB_SERVER_NAME: &str = "veth-lab-server";
pub const VETH_LAB_SERVER_TOML: &str = include_str!("../profiles/veth-lab-server.toml");

fn err(file: &str, field: &str, msg: impl Into<String>) -> ConfigError {
    ConfigError::new(file, field, msg)
}

/// The `[server]` table of a profile file: the costs, the client's cost per request
/// (measured, not modelled) and where each number comes from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerTable {
    app_user_cycles: f64,
    app_kernel_cycles: f64,
    /// The costs per epoll return, per NAPI kthread poll and per round of the
    /// generator's loop; absent (a table fitted before the twin charged them): 0, not
    /// charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    epoll_return_cycles: Option<f64>,
    receive_cycles: f64,
    poll_cycles: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kthread_poll_cycles: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_cycles_per_request: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_round_cycles: Option<f64>,
    /// The share of the client's cycles spent sending, and the TCP/veth latency per
    /// request and its tail (ns); absent: the assumed ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_send_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path_tail_ns: Option<f64>,
    #[serde(default)]
    provenance: BTreeMap<String, ParamSource>,
}

/// A lab profile with, optionally, the server costs (`[server]`).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerProfile {
    pub lab: LabProfile,
    pub costs: Option<ServerCosts>,
    /// The load generator's CPU per request, cycles (the twin does not charge it).
    pub client_cycles_per_request: Option<f64>,
}

impl ServerProfile {
    /// Parses a profile file that may carry `[server]` (and `[testbed]`).
    pub fn from_toml_str(text: &str, file: &str) -> Result<Self, ConfigError> {
        let mut table: toml::Table = toml::from_str(text)
            .map_err(|e| err(file, "(parse)", e.to_string().trim().to_string()))?;
        let server = match table.remove("server") {
            Some(v) => {
                let t: ServerTable = v
                    .try_into()
                    .map_err(|e: toml::de::Error| err(file, "server", e.message()))?;
                Some(t)
            }
            None => None,
        };
        let rest = toml::to_string(&table).map_err(|e| err(file, "(parse)", e.to_string()))?;
        let lab = LabProfile::from_toml_str(&rest, file)?;
        let (costs, client) = match server {
            Some(t) => {
                for (field, x) in [
                    ("server.app_user_cycles", t.app_user_cycles),
                    ("server.app_kernel_cycles", t.app_kernel_cycles),
                    (
                        "server.epoll_return_cycles",
                        t.epoll_return_cycles.unwrap_or(0.0),
                    ),
                    (
                        "server.client_round_cycles",
                        t.client_round_cycles.unwrap_or(0.0),
                    ),
                    ("server.receive_cycles", t.receive_cycles),
                    (
                        "server.kthread_poll_cycles",
                        t.kthread_poll_cycles.unwrap_or(0.0),
                    ),
                    ("server.poll_cycles", t.poll_cycles),
                    (
                        "server.client_cycles_per_request",
                        t.client_cycles_per_request.unwrap_or(0.0),
                    ),
                    ("server.path_ns", t.path_ns.unwrap_or(0.0)),
                    ("server.path_tail_ns", t.path_tail_ns.unwrap_or(0.0)),
                ] {
                    if !(x >= 0.0 && x.is_finite()) {
                        return Err(err(file, field, "must be a finite number >= 0"));
                    }
                }
                if t.poll_cycles <= 0.0 {
                    return Err(err(
                        file,
                        "server.poll_cycles",
                        "must be > 0: it is the length of a busy-polling pass (0 loops in zero time)",
                    ));
                }
                if let Some(x) = t.client_send_share {
                    if !(0.0..=1.0).contains(&x) {
                        return Err(err(
                            file,
                            "server.client_send_share",
                            "must be between 0 and 1 (the part of the client's cycles spent sending)",
                        ));
                    }
                }
                let assumed = ServerCosts::assumed();
                let mut provenance = assumed.provenance;
                if t.client_cycles_per_request.is_some() {
                    // A value from the table must not keep the assumed one's source.
                    provenance.insert(
                        "server.client_cycles".into(),
                        ParamSource {
                            kind: SourceKind::Assumed,
                            reference: String::new(),
                            detail: format!(
                                "the [server] table's client_cycles_per_request of {file}, which gives no source for it"
                            ),
                        },
                    );
                }
                let given = [
                    ("server.epoll_return_cycles", t.epoll_return_cycles),
                    ("server.kthread_poll_cycles", t.kthread_poll_cycles),
                    ("server.client_round_cycles", t.client_round_cycles),
                ];
                // A value given in the table without a source of its own there is the
                // table's (not the assumed cost's "0, not charged").
                let given: Vec<(&str, Option<f64>, bool)> = given
                    .into_iter()
                    .map(|(k, v)| (k, v, t.provenance.contains_key(k)))
                    .collect();
                provenance.extend(t.provenance);
                for (key, value, sourced) in given {
                    if let (Some(v), false) = (value, sourced) {
                        provenance.insert(
                            key.into(),
                            ParamSource {
                                kind: SourceKind::Assumed,
                                reference: String::new(),
                                detail: format!(
                                    "{v}: given in the [server] table of {file}, which names no source for it"
                                ),
                            },
                        );
                    }
                }
                (
                    Some(ServerCosts {
                        app_user_cycles: t.app_user_cycles,
                        app_kernel_cycles: t.app_kernel_cycles,
                        epoll_return_cycles: t
                            .epoll_return_cycles
                            .unwrap_or(assumed.epoll_return_cycles),
                        receive_cycles: t.receive_cycles,
                        poll_cycles: t.poll_cycles,
                        kthread_poll_cycles: t
                            .kthread_poll_cycles
                            .unwrap_or(assumed.kthread_poll_cycles),
                        client_cycles: t.client_cycles_per_request.unwrap_or(assumed.client_cycles),
                        client_send_share: t.client_send_share.unwrap_or(assumed.client_send_share),
                        client_round_cycles: t
                            .client_round_cycles
                            .unwrap_or(assumed.client_round_cycles),
                        path_ns: t.path_ns.unwrap_or(assumed.path_ns),
                        path_tail_ns: t.path_tail_ns.unwrap_or(assumed.path_tail_ns),
                        provenance,
                    }),
                    t.client_cycles_per_request,
                )
            }
            None => (None, None),
        };
        Ok(ServerProfile {
            lab,
            costs,
            client_cycles_per_request: client,
        })
    }

    /// A profile file, the shipped `veth-lab-server`, or any name [`LabProfile::load`]
    /// knows (then without server costs).
    pub fn load(name_or_path: &str) -> Result<Self, ConfigError> {
        let path = std::path::Path::new(name_or_path);
        if path.exists() {
            let name = path.display().to_string();
            let text =
                std::fs::read_to_string(path).map_err(|e| err(&name, "(file)", e.to_string()))?;
            return Self::from_toml_str(&text, &name);
        }
        if name_or_path == VETH_LAB_SERVER_NAME {
            return Self::from_toml_str(VETH_LAB_SERVER_TOML, "profiles/veth-lab-server.toml");
        }
        Ok(ServerProfile {
            lab: LabProfile::load(name_or_path)?,
            costs: None,
            client_cycles_per_request: None,
        })
    }

    /// The server costs, or the assumed ones when the profile has none.
    pub fn costs_or_assumed(&self) -> ServerCosts {
        self.costs.clone().unwrap_or_else(ServerCosts::assumed)
    }
}

/// What one mode of the run gives the fit.
#[derive(Clone)]
struct ModeRun<'a> {
    /// Index into the plan's configurations.
    index: usize,
    name: &'a str,
    /// The lab's server device (its NAPI kthreads are `napi/<device>-<id>`).
    device: String,
    /// Points that met the objective (so the client kept its schedule, every request
    /// was answered and the server was not saturated) at 90% or more of the offered
    /// rate: their CPU per request is the server's cost. A point whose client fell
    /// behind (its CPU taken by other tasks, on a shared machine) measures a burst,
    /// not the rate; a saturated server's CPU per request is not linear in the rate.
    points: Vec<&'a RequestPointResult>,
    results: &'a RequestResults,
}

impl ModeRun<'_> {
    /// The distinct requested rates of the usable points, increasing.
    fn rates(&self) -> Vec<f64> {
        let mut r: Vec<f64> = self.points.iter().map(|p| p.requested_qps).collect();
        r.sort_by(f64::total_cmp);
        r.dedup();
        r
    }

    fn side(&self) -> Side {
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
fn server_work(p: &RequestPointResult, side: &Side) -> f64 {
    p.server.cpu_busy
        + napi_kthreads(p, side)
        + match side {
            Side::Lab { .. } => 0.0,
            Side::Twin => cpu_entry(p, "softirq at bh-enable (model)"),
        }
}

fn cpu_entry(p: &RequestPointResult, name: &str) -> f64 {
    p.cpu
        .iter()
        .find(|(k, _)| k == name)
        .map_or(0.0, |(_, v)| *v)
}

/// The server device's NAPI kthreads' CPU, a share of a CPU: the lab's from the
/// Observation's `napi/<device>-*` threads, the twin's from its own accounting.
fn napi_kthreads(p: &RequestPointResult, side: &Side) -> f64 {
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
enum Side {
    Lab { device: String },
    Twin,
}

/// NAPI polls per second from the server's busy polling (trace tier; the twin's own).
fn busy_polls(p: &RequestPointResult) -> Option<f64> {
    p.napi_polls_per_s
        .iter()
        .find(|(k, _)| k == "busy poll")
        .map(|(_, v)| *v)
        .filter(|v| *v > 0.0)
}

/// The worker's CPU time per pass of its busy-polling loop, seconds.
fn pass_time(p: &RequestPointResult) -> Option<f64> {
    busy_polls(p).map(|polls| p.server.cpu_busy / polls)
}

/// The twin's points of configuration `index` at `rates` with `costs` (one run each,
/// the plan's first seed).
fn twin_points(
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

/// One cost solved against the lab: its value, whether a bound clamped it, and the
/// twin's figures at the value against the lab's.
struct Solved {
    value: f64,
    clamped: Option<String>,
}

/// The value of a cost at which the twin's figures (`twin(x)`, one per target) best
/// match `targets` by least squares. Each figure is taken as linear in the cost
/// between two runs of the twin (first `x0` and `x1`), the lines solved, and the
/// solution refined by re-running the twin there (secant steps, at most four, until
/// it moves by less than 0.5%); the answer is clamped to `bounds` (lower, upper, and
/// why each). `None` when no figure moves with the cost.
fn solve_linear(
    mut twin: impl FnMut(f64) -> Result<Vec<f64>, ConfigError>,
    targets: &[f64],
    (x0, x1): (f64, f64),
    bounds: ((f64, &str), (f64, &str)),
) -> Result<Option<Solved>, ConfigError> {
    let ((lo, lo_why), (hi, hi_why)) = bounds;
    let mut a = (x0, twin(x0)?);
    let mut b = (x1, twin(x1)?);
    let mut raw = f64::NAN;
    for _ in 0..4 {
        let Some(x) = least_squares_root(&a, &b, targets) else {
            break;
        };
        let settled = raw.is_finite() && (x - raw).abs() <= 0.005 * raw.abs().max(1.0);
        raw = x;
        // Outside the bounds the twin is not re-run: the clamp decides.
        if settled || x < lo || x > hi {
            break;
        }
        let y = twin(x)?;
        a = b;
        b = (x, y);
    }
    if !raw.is_finite() {
        return Ok(None);
    }
    let (value, clamped) = if raw < lo {
        (
            lo,
            Some(format!(
                "the data gave {raw:.0}, below the bound {lo:.0} ({lo_why})"
            )),
        )
    } else if raw > hi {
        (
            hi,
            Some(format!(
                "the data gave {raw:.0}, above the bound {hi:.0} ({hi_why})"
            )),
        )
    } else {
        (raw, None)
    };
    Ok(Some(Solved { value, clamped }))
}

/// The x at which the lines through `a` and `b` (one per figure) come closest to
/// `targets` by least squares; `None` when no figure moves between them.
fn least_squares_root(a: &(f64, Vec<f64>), b: &(f64, Vec<f64>), targets: &[f64]) -> Option<f64> {
    let dx = b.0 - a.0;
    if dx == 0.0 {
        return None;
    }
    let (mut num, mut den) = (0.0, 0.0);
    for ((ya, yb), t) in a.1.iter().zip(&b.1).zip(targets) {
        let slope = (yb - ya) / dx;
        num += slope * (t - (ya - slope * a.0));
        den += slope * slope;
    }
    let scale = a.1.iter().chain(&b.1).map(|v| v.abs()).fold(0.0, f64::max);
    (den > (1e-9 * scale / dx.abs()).powi(2) && num.is_finite()).then(|| num / den)
}

/// The most a cost per epoll return or per NAPI kthread poll may be, ns: longer
/// would be a stall, not a cost.
const STALL_NS: f64 = 100_000.0;
/// The receive fit leaves out rates below this share of the highest (see
/// `ServerFit::receive`).
const LOW_RATE_SHARE: f64 = 0.1;

/// Least squares through the origin of `z` on two regressors `(x, y, z)`: the
/// coefficients of `x` and `y`; `None` when the two regressors are (nearly) collinear,
/// |correlation| above 0.9995, so that their coefficients cannot be told apart.
fn regress_pair(points: impl Iterator<Item = (f64, f64, f64)>) -> Option<(f64, f64)> {
    let (mut a11, mut a12, mut a22, mut b1, mut b2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (x, y, z) in points {
        a11 += x * x;
        a12 += x * y;
        a22 += y * y;
        b1 += x * z;
        b2 += y * z;
    }
    let det = a11 * a22 - a12 * a12;
    (det.is_finite() && det > 1e-3 * a11 * a22)
        .then(|| ((b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det))
}

/// The lab's mean of `value` over `run`'s usable points at each of its rates
/// ([`ModeRun::rates`] order), and the points' count.
fn lab_by_rate(run: &ModeRun<'_>, value: impl Fn(&RequestPointResult) -> f64) -> Vec<f64> {
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
fn twin_by_rate(
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

/// Notes a fitted cost (`key` = `value`, how) and records its provenance.
fn record_fit(
    notes: &mut Vec<String>,
    costs: &mut ServerCosts,
    reference: &str,
    key: &str,
    value: f64,
    detail: String,
) {
    notes.push(format!("{key} {value:.0}: {detail}"));
    costs
        .provenance
        .insert(key.to_string(), fitted(reference, detail));
}

/// One fitted cost's record for the profile's provenance and the summary.
fn fitted(reference: &str, detail: String) -> ParamSource {
    ParamSource {
        kind: SourceKind::Fitted,
        reference: reference.to_string(),
        detail,
    }
}

/// A finished server calibration.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerCalibration {
    pub profile: ServerProfile,
    /// How each number was fixed (or why it was not), in order.
    pub notes: Vec<String>,
    /// The costs the run could not fix (kept assumed), each with why.
    pub unfixed: Vec<String>,
    /// Per mode used: (configuration, statistic, lab, twin with the fitted costs).
    pub checks: Vec<FitCheck>,
}

/// The twin's figure against the lab's for one statistic the fit used.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FitCheck {
    pub configuration: String,
    pub statistic: String,
    pub lab: f64,
    pub twin: f64,
}

/// The run's record of configuration `name`, if it has request results.
fn results<'a>(record: &'a RunRecord, name: &str) -> Option<&'a RequestResults> {
    record
        .configurations
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| c.requests.as_ref())
}

/// The server scenario of a lab run, mapped for the twin, checked to be one.
pub fn server_plan(record: &RunRecord, file: &str) -> Result<TwinPlan, ConfigError> {
    if record.kind != RunKind::Lab {
        return Err(err(
            file,
            "kind",
            "this run was not measured by the lab: calibrate on a `napilab lab run` record",
        ));
    }
    let (_, plan) = calibrate::plan_of(record, file)?;
    if plan.requests.is_none() {
        return Err(err(
            file,
            "scenario_toml: topology.kind",
            "not a server-topology run: the server calibration needs request points",
        ));
    }
    Ok(plan)
}

/// The run's configurations of napilab's server in `mode`, with their usable points.
fn mode_runs<'a>(plan: &TwinPlan, record: &'a RunRecord, mode: ServerMode) -> Vec<ModeRun<'a>> {
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
fn too_few(runs: &[ModeRun<'_>], mode: ServerMode) -> Option<String> {
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

fn clamp_note(s: &Solved) -> String {
    s.clamped
        .as_deref()
        .map_or(String::new(), |c| format!("; clamped: {c}"))
}

fn names(runs: &[ModeRun<'_>]) -> String {
    runs.iter()
        .map(|r| r.name)
        .collect::<Vec<_>>()
        .join(" and ")
}

/// Fits the server costs on lab run `record` (`file` names it in errors), starting
/// from `base`'s platform costs (kept) and the assumed server costs. `command` is
/// recorded in the provenance.
pub fn calibrate(
    record: &RunRecord,
    file: &str,
    base: &LabProfile,
    command: &str,
) -> Result<ServerCalibration, ConfigError> {
    let plan = server_plan(record, file)?;
    let mut fit = ServerFit {
        idle_polling: idle_polling_share(&plan, record),
        plan,
        record,
        base,
        ghz: base.profile.cpu_ghz,
        reference: format!("lab run {} by {command}", record.run_id),
        costs: ServerCosts::assumed(),
        notes: Vec::new(),
        unfixed: Vec::new(),
    };
    // The client first: in no-coalescing the requests' receive runs on its CPU, so
    // with a client costlier than the lab's the twin's server never sees the rates
    // the app's costs are fitted at.
    // The costs are coupled (every poll call costs poll_cycles, also the requests'
    // polls on the client's CPU; the busy-poll pass holds the epoll returns), so the
    // steps run twice, the second from the first's values; its notes are the fit's.
    let (mut client, mut receive_runs, mut app_runs, mut low) =
        (None, Vec::new(), Vec::new(), None);
    for _ in 0..2 {
        fit.notes.clear();
        fit.unfixed.clear();
        client = fit.client()?;
        receive_runs = fit.receive()?;
        app_runs = fit.app()?;
        low = fit.poll()?;
        fit.kthread_poll();
    }
    fit.mark_unfixed();
    let checks = fit.checks(&app_runs, &receive_runs, low.as_ref())?;
    let ServerFit {
        costs,
        notes,
        unfixed,
        ..
    } = fit;
    let cycles = |seconds: f64| seconds * 1e9 * base.profile.cpu_ghz;
    let mut lab = base.clone();
    lab.profile.name = VETH_LAB_SERVER_NAME.into();
    lab.profile.description = format!(
        "veth lab of this machine ({}) with server costs fitted on lab run {}",
        base.profile.name, record.run_id
    );
    Ok(ServerCalibration {
        profile: ServerProfile {
            lab,
            costs: Some(costs),
            client_cycles_per_request: client.map(|s| cycles(s).round()),
        },
        notes,
        unfixed,
        checks,
    })
}

/// The share of its idle polling that the lab's generator counts as busy: its busy
/// share at threaded's lowest rate that met the objective, where its work is about
/// 1% of a CPU and no softirq runs on its CPU (threaded polls the requests in the
/// server's NAPI kthread), so the rest is polling (run 20261128-195727-32e3: 0.12 at
/// 2,000 requests/s, about 60 us a request); without threaded, the median of the
/// other modes' lowest points. At most 0.5: more would not be bookkeeping.
fn idle_polling_share(plan: &TwinPlan, record: &RunRecord) -> f64 {
    let lowest_busy = |r: &ModeRun<'_>| {
        r.points
            .iter()
            .min_by(|a, b| a.requested_qps.total_cmp(&b.requested_qps))
            .map(|p| p.client_cpu_busy)
    };
    if let Some(b) = mode_runs(plan, record, ServerMode::Threaded)
        .first()
        .and_then(lowest_busy)
    {
        return b.clamp(0.0, 0.5);
    }
    let mut lowest: Vec<f64> = ServerMode::ALL
        .iter()
        .flat_map(|&m| mode_runs(plan, record, m))
        .filter_map(|r| lowest_busy(&r))
        .collect();
    lowest.sort_by(f64::total_cmp);
    lowest
        .get(lowest.len() / 2)
        .copied()
        .unwrap_or(0.0)
        .clamp(0.0, 0.5)
}

/// Busy-wait's run at its low rates: (run, requested rate, the lab's median CPU time
/// per busy poll, points the median is over).
type LowRates<'r> = (ModeRun<'r>, f64, f64, usize);

/// The server fit's inputs and what it has fitted so far; each step fits one cost,
/// in order, on the costs the steps before it fitted.
struct ServerFit<'r> {
    plan: TwinPlan,
    /// The share of its idle polling that the lab's generator counts as busy
    /// ([`idle_polling_share`]).
    idle_polling: f64,
    record: &'r RunRecord,
    base: &'r LabProfile,
    ghz: f64,
    /// Names the run and the command in the provenance.
    reference: String,
    costs: ServerCosts,
    notes: Vec<String>,
    unfixed: Vec<String>,
}

impl<'r> ServerFit<'r> {
    fn cycles(&self, seconds: f64) -> f64 {
        seconds * 1e9 * self.ghz
    }

    /// The twin's generator CPU (with the softirqs on its CPU) at each rate of each of
    /// `runs`, in order, with `costs`.
    fn twin_client_cpu(
        &self,
        runs: &[ModeRun<'_>],
        costs: &ServerCosts,
    ) -> Result<Vec<f64>, ConfigError> {
        let mut all = Vec::new();
        for r in runs {
            all.extend(twin_by_rate(
                &self.plan,
                r.index,
                self.base,
                costs,
                &r.rates(),
                |p| p.client_cpu_busy,
            )?);
        }
        Ok(all)
    }

    /// The lab generator's own work, a share of a CPU, from its busy share: between
    /// sends it polls without sleeping (SPIN_AHEAD_NS) and leaves `idle_polling` of
    /// that polling counted as busy (the rounds' bookkeeping outside the idle time it
    /// subtracts), so busy = work + idle_polling x (1 - work). The twin's generator
    /// sleeps instead.
    fn client_work(&self, busy: f64) -> f64 {
        ((busy - self.idle_polling) / (1.0 - self.idle_polling)).max(0.0)
    }

    /// A cost per request on one CPU cannot exceed that CPU's time per request at the
    /// highest rate the server kept up with.
    fn ceiling(&self, runs: &[ModeRun<'_>]) -> f64 {
        let top = runs
            .iter()
            .flat_map(|r| r.points.iter().map(|p| p.achieved_qps))
            .fold(0.0, f64::max);
        self.cycles(1.0 / top.max(1.0))
    }

    /// Step 1: the server's own cost, where the requests' receive is on the client's
    /// CPU. Returns the runs it was fitted on.
    fn app(&mut self) -> Result<Vec<ModeRun<'r>>, ConfigError> {
        let (plan, record) = (&self.plan, self.record);
        let mut app_runs = mode_runs(plan, record, ServerMode::NoCoalescing);
        let mut why_not = too_few(&app_runs, ServerMode::NoCoalescing);
        if let Some(first) = &why_not {
            let deferral = mode_runs(plan, record, ServerMode::Deferral);
            match too_few(&deferral, ServerMode::Deferral) {
                None => {
                    app_runs = deferral;
                    why_not = None;
                }
                Some(second) => why_not = Some(format!("{first}; {second}")),
            }
        }
        app_runs.retain(|r| r.rates().len() >= 2);
        // The lab's worker time is one number (user and system together): the split
        // between the two is kept from the assumed costs.
        let user_part = self.costs.app_user_cycles
            / (self.costs.app_user_cycles + self.costs.app_kernel_cycles);
        match (why_not, app_runs.first()) {
            (None, Some(run)) => {
                // The cost per epoll return from the lab's own counts: its CPU against
                // its requests and its returns (one a request at low rates, fewer as
                // the load batches them). Not solved through the twin: while the
                // twin's server keeps up with its requests each has a return of its
                // own, and the two costs move its CPU alike.
                let side = run.side();
                let per_return = regress_pair(run.points.iter().map(|p| {
                    let secs = p.duration_s.max(f64::MIN_POSITIVE);
                    (
                        p.achieved_qps,
                        p.server.epoll_returns_with_events as f64 / secs,
                        server_work(p, &side),
                    )
                }))
                .map(|(_, w)| self.cycles(w))
                .filter(|w| w.is_finite() && *w >= 0.0);
                let returns_per_request = lab_by_rate(run, |p| {
                    p.server.epoll_returns_with_events as f64 / p.server.requests.max(1) as f64
                })
                .iter()
                .map(|t| format!("{t:.2}"))
                .collect::<Vec<_>>()
                .join("/");
                match per_return {
                    Some(w) => {
                        self.costs.epoll_return_cycles =
                            w.min(STALL_NS * self.ghz).round();
                        let detail = format!(
                            "the lab's server CPU in {} (workers and NAPI kthreads) against its requests and its epoll_wait returns with events a second, least squares through the origin over {} points (returns per request {returns_per_request} by rate); the coefficient of the returns",
                            run.name,
                            run.points.len(),
                        );
                        let value = self.costs.epoll_return_cycles;
                        record_fit(&mut self.notes, &mut self.costs, &self.reference, "server.epoll_return_cycles", value, detail);
                    }
                    None => self.unfixed.push(format!(
                        "server.epoll_return_cycles kept ASSUMED ({:.0}): {}'s points do not tell a cost per epoll return from one per request (no returns counted, or as many as requests at every rate)",
                        self.costs.epoll_return_cycles, run.name
                    )),
                }
                // Then the cost per request: the twin's server CPU at each rate matched
                // to the lab's.
                let targets = lab_by_rate(run, |p| server_work(p, &side));
                let rates = run.rates();
                let solved = solve_linear(
                    |total| {
                        let mut c = self.costs.clone();
                        c.app_user_cycles = total * user_part;
                        c.app_kernel_cycles = total * (1.0 - user_part);
                        twin_by_rate(&self.plan, run.index, self.base, &c, &rates, |p| {
                            server_work(p, &Side::Twin)
                        })
                    },
                    &targets,
                    (1_000.0, 4_000.0),
                    (
                        (0.0, "a cost is not negative"),
                        (
                            self.ceiling(std::slice::from_ref(run)),
                            "a CPU cannot spend more per request than 1 / the highest rate it kept up with",
                        ),
                    ),
                )?;
                match solved {
                    Some(s) => {
                        self.costs.app_user_cycles = (s.value * user_part).round();
                        self.costs.app_kernel_cycles = (s.value * (1.0 - user_part)).round();
                        let detail = format!(
                            "the server's CPU in {} (its workers' CPU time and NAPI kthreads', a share of a CPU: {} at {} requests/s), where the requests' receive runs on the client's CPU, the twin's matched by least squares beside server.epoll_return_cycles{}; the user/kernel split {:.0}/{:.0} is ASSUMED (the lab measures the worker's time as one number)",
                            run.name,
                            targets.iter().map(|t| format!("{t:.3}")).collect::<Vec<_>>().join("/"),
                            rates.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join("/"),
                            clamp_note(&s),
                            user_part * 100.0,
                            (1.0 - user_part) * 100.0
                        );
                        self.notes.push(format!(
                            "server.app_user_cycles {:.0} + server.app_kernel_cycles {:.0}: {detail}",
                            self.costs.app_user_cycles, self.costs.app_kernel_cycles
                        ));
                        for key in ["server.app_user_cycles", "server.app_kernel_cycles"] {
                            self.costs
                                .provenance
                                .insert(key.into(), fitted(&self.reference, detail.clone()));
                        }
                    }
                    None => self.unfixed.push(format!(
                        "server.app_user_cycles, server.app_kernel_cycles kept ASSUMED: the twin's server CPU in {} does not move with them",
                        run.name
                    )),
                }
            }
            (why, _) => self.unfixed.push(format!(
                "server.app_user_cycles, server.app_kernel_cycles kept ASSUMED ({:.0}, {:.0}): {}",
                self.costs.app_user_cycles,
                self.costs.app_kernel_cycles,
                why.unwrap_or_default()
            )),
        }

        Ok(app_runs)
    }

    /// The NAPI kthread's loop per poll: the lab's kthread CPU in threaded against its
    /// requests (the receive) and its polls (each a wake-up at low rates), least
    /// squares through the origin; the polls' coefficient less what the twin already
    /// charges a kthread poll (the poll call and the switch in).
    fn kthread_poll(&mut self) {
        let (plan, record) = (&self.plan, self.record);
        let runs = mode_runs(plan, record, ServerMode::Threaded);
        let Some(run) = runs.first() else {
            self.unfixed.push(format!(
                "server.kthread_poll_cycles kept ASSUMED ({:.0}): the run has no configuration of napilab's server in mode threaded that met the objective",
                self.costs.kthread_poll_cycles
            ));
            return;
        };
        let side = run.side();
        let points: Vec<(f64, f64, f64)> = run
            .points
            .iter()
            .filter_map(|p| {
                let polls = p
                    .napi_polls_per_s
                    .iter()
                    .find(|(k, _)| k == "napi kthread")
                    .map(|(_, v)| *v)?;
                Some((p.achieved_qps, polls, napi_kthreads(p, &side)))
            })
            .filter(|(_, polls, cpu)| *polls > 0.0 && *cpu > 0.0)
            .collect();
        let per_poll = regress_pair(points.iter().copied())
            .map(|(_, b)| self.cycles(b))
            .filter(|b| b.is_finite());
        let Some(lab) = per_poll else {
            self.unfixed.push(format!(
                "server.kthread_poll_cycles kept ASSUMED ({:.0}): {}'s points do not tell the kthread's cost per poll from its cost per request (kthread polls counted at fewer than two rates, or as many as requests at every rate: measurement.trace = \"always\" counts them)",
                self.costs.kthread_poll_cycles, run.name
            ));
            return;
        };
        let twin_own = self.costs.poll_cycles + self.base.profile.fixed_cycles.context_switch;
        let value = (lab - twin_own).clamp(0.0, STALL_NS * self.ghz).round();
        self.costs.kthread_poll_cycles = value;
        let detail = format!(
            "{}'s NAPI kthread CPU (napi/<device>-* in the Observation) against its requests and its kthread polls a second (trace tier), least squares through the origin over {} points: {:.0} ns a poll, less the {:.0} the twin already charges a kthread poll (server.poll_cycles and the profile's context switch)",
            run.name,
            points.len(),
            lab,
            twin_own
        );
        record_fit(
            &mut self.notes,
            &mut self.costs,
            &self.reference,
            "server.kthread_poll_cycles",
            value,
            detail,
        );
    }

    /// Step 2: one pass of the busy-polling loop. Returns the low rates it was
    /// fitted at.
    fn poll(&mut self) -> Result<Option<LowRates<'r>>, ConfigError> {
        let (plan, record) = (&self.plan, self.record);
        // One pass of the busy-polling loop: the worker's CPU time per busy poll at
        // busy-wait's low rates (up to three times the lowest, where passes that find
        // nothing dominate), the median over those points: the worker's CPU time and the
        // trace tier's poll count cover slightly different windows, so single points
        // scatter.
        let busy = mode_runs(plan, record, ServerMode::BusyWait);
        let low = busy.first().and_then(|run| {
            let lowest = run
                .results
                .points
                .iter()
                .map(|p| p.requested_qps)
                .fold(f64::INFINITY, f64::min);
            let mut passes: Vec<(f64, f64)> = run
                .results
                .points
                .iter()
                .filter(|p| p.requested_qps <= 3.0 * lowest)
                .filter_map(|p| Some((p.requested_qps, pass_time(p)?)))
                .collect();
            passes.sort_by(|a, b| a.1.total_cmp(&b.1));
            let median = passes.get(passes.len() / 2)?;
            Some((run, median.0, median.1, passes.len()))
        });
        match low {
        None => self.unfixed.push(format!(
            "server.poll_cycles kept ASSUMED ({:.0}): {}",
            self.costs.poll_cycles,
            if busy.is_empty() {
                "the run has no configuration of napilab's server in mode busy-wait"
            } else {
                "busy-wait's lowest rate has no busy polls counted (measurement.trace = \"always\" counts them)"
            }
        )),
        Some((run, qps, lab_pass, n)) => {
            let solved = solve_linear(
                |x| {
                    let mut c = self.costs.clone();
                    c.poll_cycles = x;
                    let pts = twin_points(&self.plan, run.index, self.base, &c, &[qps])?;
                    Ok(vec![pts.first().and_then(pass_time).unwrap_or(0.0)])
                },
                &[lab_pass],
                (200.0, 1_000.0),
                (
                    (50.0 * self.ghz, "a system call and an empty veth poll take at least ~50 ns"),
                    (100_000.0 * self.ghz, "a pass of 100 us would not be busy polling"),
                ),
            )?;
            match solved {
                Some(s) => {
                    self.costs.poll_cycles = s.value.round();
                    let detail = format!(
                        "{}'s worker CPU time per busy poll, the median of {n} point(s) at its low rates: {:.0} ns at {qps:.0} requests/s (its CPU time over the trace tier's busy polls; CPU time, not wall time, so a worker waiting for its CPU does not lengthen the pass); solved so the twin's pass at that rate matches{}",
                        run.name,
                        lab_pass * 1e9,
                        clamp_note(&s)
                    );
                    let value = self.costs.poll_cycles;
                    record_fit(&mut self.notes, &mut self.costs, &self.reference, "server.poll_cycles", value, detail);
                }
                None => self.unfixed.push(format!(
                    "server.poll_cycles kept ASSUMED ({:.0}): the twin's busy-polling pass in {} does not move with it",
                    self.costs.poll_cycles, run.name
                )),
            }
        }
    }

        // The run is cloned so that the checks at the end can use it again.
        Ok(low.map(|(run, qps, pass, n)| (run.clone(), qps, pass, n)))
    }

    /// Step 3: the requests' receive. Returns the runs it was fitted on.
    fn receive(&mut self) -> Result<Vec<ModeRun<'r>>, ConfigError> {
        let (plan, record) = (&self.plan, self.record);
        // The requests' receive where the lab times it beside nothing else: on the
        // client's CPU in no-coalescing (else deferral), in the softirq the client's
        // send raises and runs at its bh-enable, which the kernel (no
        // CONFIG_IRQ_TIME_ACCOUNTING) counts in the generator thread's runtime. The
        // generator's own costs are fitted first (step 1), where the requests are polled
        // on the server's CPU. Not in threaded: there the server's CPU also holds the
        // NAPI kthread's wake-ups, which the twin charges only a context switch.
        let mut receive_runs = mode_runs(plan, record, ServerMode::NoCoalescing);
        receive_runs.retain(|r| r.rates().len() >= 2);
        if receive_runs.is_empty() {
            receive_runs = mode_runs(plan, record, ServerMode::Deferral);
            receive_runs.retain(|r| r.rates().len() >= 2);
        }
        for r in &mut receive_runs {
            let top = r.points.iter().map(|p| p.achieved_qps).fold(0.0, f64::max);
            r.points.retain(|p| p.requested_qps >= LOW_RATE_SHARE * top);
        }
        receive_runs.retain(|r| r.rates().len() >= 2);
        if receive_runs.is_empty() {
            self.unfixed.push(format!(
                "server.receive_cycles kept ASSUMED ({:.0}): neither no-coalescing nor deferral of napilab's server met the objective at two offered rates above a tenth of its highest",
                self.costs.receive_cycles
            ));
            return Ok(receive_runs);
        }
        let targets: Vec<f64> = receive_runs
            .iter()
            .flat_map(|r| lab_by_rate(r, |p| self.client_work(p.client_cpu_busy)))
            .collect();
        let top = self.ceiling(&receive_runs);
        let solved = solve_linear(
            |x| {
                let mut c = self.costs.clone();
                c.receive_cycles = x;
                self.twin_client_cpu(&receive_runs, &c)
            },
            &targets,
            (500.0, 5_000.0),
            (
                (0.0, "a cost is not negative"),
                (
                    (top - self.costs.client_cycles).max(0.0),
                    "with the generator's own cost it cannot exceed 1 / the highest rate served",
                ),
            ),
        )?;
        match solved {
            Some(s) => {
                self.costs.receive_cycles = s.value.round();
                let detail = format!(
                    "the load generator thread's CPU in {} (a share of a CPU, with the softirqs at its bh-enable: {} at {} requests/s; rates below a tenth of the highest left out), where the requests' receive runs in the softirq its sends raise, beside its own costs; the twin's matched by least squares{}",
                    names(&receive_runs),
                    targets.iter().map(|t| format!("{t:.3}")).collect::<Vec<_>>().join("/"),
                    receive_runs.iter().flat_map(|r| r.rates()).map(|r| format!("{r:.0}")).collect::<Vec<_>>().join("/"),
                    clamp_note(&s)
                );
                let value = self.costs.receive_cycles;
                record_fit(&mut self.notes, &mut self.costs, &self.reference, "server.receive_cycles", value, detail);
            }
            None => self.unfixed.push(format!(
                "server.receive_cycles kept ASSUMED ({:.0}): the twin's generator CPU in {} does not move with it",
                self.costs.receive_cycles,
                names(&receive_runs)
            )),
        }
        Ok(receive_runs)
    }

    /// Step 4: the load generator's cost per request and per round of its loop,
    /// where the requests are not polled on its CPU. Returns the cost per request.
    fn client(&mut self) -> Result<Option<f64>, ConfigError> {
        let (plan, record) = (&self.plan, self.record);
        // The modes that poll the requests on the server's CPU: the generator's CPU
        // there is its own work (and, in busy-wait and irq-suspend at low rates, the
        // requests' polls while the IRQ is not masked, which the twin puts on its CPU
        // too). In threaded each send may also wake the NAPI kthread on the other CPU,
        // an IPI the twin does not charge the sender (docs/sim.md).
        let mut client_runs = mode_runs(plan, record, ServerMode::Threaded);
        client_runs.extend(mode_runs(plan, record, ServerMode::BusyWait));
        client_runs.extend(mode_runs(plan, record, ServerMode::IrqSuspend));
        client_runs.retain(|r| !r.points.is_empty());
        let rates: usize = client_runs.iter().map(|r| r.rates().len()).sum();
        if rates < 2 {
            self.unfixed.push(
                "server.client_cycles kept ASSUMED: threaded, busy-wait and irq-suspend of napilab's server met the objective at fewer than two offered rates".into(),
            );
            return Ok(None);
        }
        let targets: Vec<f64> = client_runs
            .iter()
            .flat_map(|r| lab_by_rate(r, |p| self.client_work(p.client_cpu_busy)))
            .collect();
        let ceiling = self.ceiling(&client_runs);
        let solved = solve_linear(
            |per_request| {
                let mut c = self.costs.clone();
                c.client_cycles = per_request;
                self.twin_client_cpu(&client_runs, &c)
            },
            &targets,
            (2_000.0, 8_000.0),
            (
                (0.0, "a cost is not negative"),
                (
                    ceiling,
                    "a CPU cannot spend more per request than 1 / the highest rate it kept up with",
                ),
            ),
        )?;
        let Some(s) = solved else {
            self.unfixed.push(format!(
                "server.client_cycles kept ASSUMED: the twin's generator CPU in {} does not move with it",
                names(&client_runs)
            ));
            return Ok(None);
        };
        self.costs.client_cycles = s.value.round();
        let detail = format!(
            "the load generator thread's CPU in {} (a share of a CPU less the {:.3} of its idle polling that the lab counts as busy: {} at {} requests/s; the requests are polled on the server's CPU there), the twin's matched by least squares; split between send and read by server.client_send_share{}",
            names(&client_runs),
            self.idle_polling,
            targets.iter().map(|t| format!("{t:.3}")).collect::<Vec<_>>().join("/"),
            client_runs.iter().flat_map(|r| r.rates()).map(|r| format!("{r:.0}")).collect::<Vec<_>>().join("/"),
            clamp_note(&s)
        );
        self.costs.provenance.insert(
            "server.client_cycles".into(),
            fitted(&self.reference, detail.clone()),
        );
        self.notes.push(format!(
            "client_cycles_per_request {:.0}: {detail}",
            self.costs.client_cycles
        ));
        Ok(Some(s.value / (1e9 * self.ghz)))
    }

    fn mark_unfixed(&mut self) {
        // A cost the run could not fix says so in its provenance, beside why it is assumed.
        for (key, src) in self.costs.provenance.iter_mut() {
            if src.kind == SourceKind::Assumed {
                if let Some(why) = self.unfixed.iter().find(|u| u.contains(key.as_str())) {
                    src.detail = format!(
                        "{}; not fitted on lab run {}: {why}",
                        src.detail, self.record.run_id
                    );
                }
            }
        }
    }

    /// The fitted costs against the lab, per statistic used.
    fn checks(
        &self,
        app_runs: &[ModeRun<'r>],
        receive_runs: &[ModeRun<'r>],
        low: Option<&LowRates<'r>>,
    ) -> Result<Vec<FitCheck>, ConfigError> {
        // In % of a CPU: the summary prints whole numbers.
        let mean = |v: &[f64]| 100.0 * v.iter().sum::<f64>() / v.len().max(1) as f64;
        let mut checks = Vec::new();
        for r in app_runs {
            let side = r.side();
            let twin = twin_by_rate(
                &self.plan,
                r.index,
                self.base,
                &self.costs,
                &r.rates(),
                |p| server_work(p, &Side::Twin),
            )?;
            checks.push(FitCheck {
                configuration: r.name.to_string(),
                statistic: "server CPU (workers + NAPI kthreads), mean % of a CPU over its rates"
                    .into(),
                lab: mean(&lab_by_rate(r, |p| server_work(p, &side))),
                twin: mean(&twin),
            });
        }
        for r in receive_runs {
            checks.push(FitCheck {
                configuration: r.name.to_string(),
                statistic:
                    "load generator CPU (less its idle polling), mean % of a CPU over its rates"
                        .into(),
                lab: mean(&lab_by_rate(r, |p| self.client_work(p.client_cpu_busy))),
                twin: mean(&self.twin_client_cpu(std::slice::from_ref(r), &self.costs)?),
            });
        }
        if let Some(&(ref run, qps, lab_pass, _)) = low {
            let pts = twin_points(&self.plan, run.index, self.base, &self.costs, &[qps])?;
            checks.push(FitCheck {
                configuration: run.name.to_string(),
                statistic: format!("worker CPU per busy poll at {qps:.0} requests/s, ns"),
                lab: lab_pass * 1e9,
                twin: pts.first().and_then(pass_time).unwrap_or(0.0) * 1e9,
            });
        }
        Ok(checks)
    }
}

/// What limited the lab's maximum at the objective.
fn lab_limiter(q: &RequestResults) -> (&'static str, bool) {
    let Some(m) = &q.max_qps else {
        return ("no search", false);
    };
    let mut client = false;
    let mut bound = false;
    for (i, answer) in m.searches.iter().enumerate() {
        let above = q
            .points
            .iter()
            .filter(|p| p.role == PointRole::Search && p.repeat as usize == i)
            .filter(|p| !p.meets_slo && p.requested_qps > *answer)
            .min_by(|a, b| a.requested_qps.total_cmp(&b.requested_qps));
        match above {
            Some(p) => client |= p.client_limited,
            None => bound = true,
        }
    }
    if client {
        ("client-limited", true)
    } else if bound {
        ("search_max_qps", true)
    } else {
        ("latency objective", false)
    }
}

/// The twin's maximum for every runnable configuration of a lab server run, beside
/// the lab's, with `profile`'s costs (or the assumed ones). `basis` says how the
/// costs were obtained (a prediction with a shipped profile, a fit on this run).
pub fn predict(
    record: &RunRecord,
    file: &str,
    profile: &ServerProfile,
    profile_name: &str,
    basis: &str,
) -> Result<Vec<(String, napilab_core::TwinMaxQps)>, ConfigError> {
    let mut plan = server_plan(record, file)?;
    let costs = profile.costs_or_assumed();
    plan.seeds.truncate(1);
    // The sweep is not needed for the maximum.
    plan.loads.clear();
    if let Some(sp) = plan.requests.as_mut() {
        sp.costs = costs.clone();
    }
    let mut out = Vec::new();
    for (index, conf) in plan.configurations.iter().enumerate() {
        let Some(lab) = results(record, &conf.name) else {
            continue;
        };
        let Some(lab_max) = &lab.max_qps else {
            continue;
        };
        if lab.not_runnable.is_some() {
            continue;
        }
        let mut p = costs.profile(&conf.profile_for(&profile.lab.profile, None));
        let server_cpus = plan
            .requests
            .as_ref()
            .and_then(|sp| sp.configurations.get(index))
            .map_or(&[][..], |s| &s.server_cpus[..]);
        let wake_ups = crate::wake_up::probed_wake_ups(&record.host.wake_up, server_cpus);
        let basis = match &wake_ups {
            Some(w) => {
                draw_wake_ups_from(&mut p, w);
                format!("{basis}; wake-ups drawn from this run's probe")
            }
            None => basis.to_string(),
        };
        let twin = from_server_scenario::run_configuration(&plan, index, &mut |batch| {
            batch
                .iter()
                .map(|(c, seed)| crate::try_run(c, &p, *seed))
                .collect()
        })?;
        let twin_max = twin.max_qps.map_or(0.0, |m| m.qps);
        let (limiter, lower_bound) = lab_limiter(lab);
        out.push((
            conf.name.clone(),
            napilab_core::TwinMaxQps {
                basis,
                profile: profile_name.to_string(),
                twin_max_qps: twin_max,
                lab_max_qps: lab_max.qps,
                lab_limiter: limiter.to_string(),
                lab_lower_bound: lower_bound,
                relative_error: (lab_max.qps > 0.0).then(|| (twin_max - lab_max.qps) / lab_max.qps),
                wake_ups: wake_ups.map(|w| w.source),
            },
        ));
    }
    Ok(out)
}

/// The twin's remote wake-ups of an idle CPU on `p` drawn from the probe's `w` (the
/// server thread woken by a request the client's CPU received, a NAPI kthread woken
/// by the client's send), and a threaded poller's fixed wake-up delay replaced by the
/// probe's, as `napilab tune plan --predict` does for a router.
fn draw_wake_ups_from(p: &mut crate::Profile, w: &crate::wake_up::WakeUp) {
    p.latency_ns.wake_up_samples = w.samples_ns.clone();
    if p.latency_ns.irq_delivery > 0 {
        p.latency_ns.irq_delivery = w.delay_ns.round() as u64;
    }
}

impl ServerCalibration {
    /// The fitted profile as a file: the base lab profile's body, the `[server]` table
    /// and the provenance in comments.
    pub fn to_toml(
        &self,
        command: &str,
        record: &RunRecord,
        predictions: &[(String, napilab_core::TwinMaxQps)],
    ) -> String {
        let mut out = String::new();
        out.push_str("# This machine's veth lab (docs/lab.md) with the key-value server's costs, for server\n");
        out.push_str(
            "# scenarios on the twin (`napilab sim run scenarios/server-modes.toml`).\n#\n",
        );
        out.push_str(
            "# Provenance: the platform costs and [testbed] are the base profile's (veth-lab,\n",
        );
        out.push_str("# fitted on UDP forwarding, see its own file); [server] was FITTED by\n");
        out.push_str(&format!("#   {command}\n"));
        out.push_str(&format!(
            "# on lab run {} (scenario {:?}, napilab {}).\n",
            record.run_id, record.scenario_name, record.napilab_version
        ));
        for (i, n) in self.notes.iter().enumerate() {
            out.push_str(&calibrate::wrap(&format!("{}. {n}", i + 1)));
        }
        for u in &self.unfixed {
            out.push_str(&calibrate::wrap(&format!("NOT FITTED: {u}")));
        }
        if !predictions.is_empty() {
            out.push_str(
                "# The twin's maximum at the objective with this profile, against the run's:\n",
            );
            for (name, p) in predictions {
                out.push_str(&format!("#   {name}: {}\n", p.summary()));
            }
        }
        out.push_str(&self.profile.lab.body());
        out.push_str(&self.server_table());
        out
    }

    fn server_table(&self) -> String {
        let Some(c) = &self.profile.costs else {
            return String::new();
        };
        let table = ServerTable {
            app_user_cycles: c.app_user_cycles,
            app_kernel_cycles: c.app_kernel_cycles,
            epoll_return_cycles: Some(c.epoll_return_cycles),
            receive_cycles: c.receive_cycles,
            poll_cycles: c.poll_cycles,
            kthread_poll_cycles: Some(c.kthread_poll_cycles),
            client_round_cycles: Some(c.client_round_cycles),
            client_cycles_per_request: self.profile.client_cycles_per_request,
            client_send_share: Some(c.client_send_share),
            path_ns: Some(c.path_ns),
            path_tail_ns: Some(c.path_tail_ns),
            provenance: c.provenance.clone(),
        };
        let mut wrapper = toml::Table::new();
        if let Ok(v) = toml::Value::try_from(&table) {
            wrapper.insert("server".into(), v);
        }
        format!("\n{}", toml::to_string(&wrapper).unwrap_or_default())
    }
}
