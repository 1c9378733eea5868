//! Calibrating the twin's server costs on a lab run of the `server` topology
//! (`napilab sim calibrate --lab RUN.json` when the run's topology is `server`;
//! docs/sim.md, "The server topology on the twin").
//!
//! The costs the twin charges a request ([`ServerCosts`]) are fitted from the CPU time
//! of the server's own threads (its workers and its device's NAPI kthreads: not
//! /proc/stat's busy time of its CPU, which on a shared machine counts every other
//! task) and of the load generator, each against the twin's own figure for the same
//! statistic at the same offered rates (so what the twin adds by itself, such as
//! context switches or polls, is not counted twice), from the points that met the
//! objective, in this order (`fit.rs`, the reasons in docs/sim.md "Calibration from a
//! server run"): the generator's cost a request; the requests' receive (no-coalescing's
//! generator CPU); the cost an epoll return and a request (no-coalescing's server);
//! busy-wait's pass; the NAPI kthread's cost a run (threaded's kthread); then the
//! request path's latency and tail, and how much shorter than the probe's this path's
//! wake-ups are (`path.rs`, each mode's lowest rate). The steps run twice; the twin
//! wakes its threads as the run's probe measured throughout.
//!
//! Each twin statistic is taken as linear in its cost: the twin is run at two values,
//! the line solved for the lab's figure and refined by secant steps, then clamped to
//! physical bounds (with the reason, `solve.rs`). A cost the run cannot fix (its mode
//! is missing, too few points met the objective) keeps its assumed value and says why.

use std::collections::BTreeMap;

use napilab_core::{PointRole, RequestResults, RunKind, RunRecord};
use serde::{Deserialize, Serialize};

use crate::calibrate::{self, LabProfile};
use crate::from_server_scenario::{self, ServerCosts};
use crate::profile::{ParamSource, SourceKind};
use crate::{ConfigError, TwinPlan};

mod fit;
mod path;
mod points;
mod solve;

use fit::{idle_polling_share, ServerFit};

/// The shipped profile of this machine's veth lab with server costs fitted on a
/// server run (the veth-lab platform costs plus a `[server]` table).
pub const VETH_LAB_SERVER_NAME: &str = "veth-lab-server";
pub const VETH_LAB_SERVER_TOML: &str = include_str!("../../profiles/veth-lab-server.toml");

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
    /// The costs per epoll return, per NAPI kthread run and per round of the
    /// generator's loop; absent (a table fitted before the twin charged them): 0, not
    /// charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    epoll_return_cycles: Option<f64>,
    receive_cycles: f64,
    poll_cycles: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kthread_run_cycles: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kthread_packet_cycles: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resume_cycles: Option<f64>,
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
                        "server.kthread_run_cycles",
                        t.kthread_run_cycles.unwrap_or(0.0),
                    ),
                    (
                        "server.kthread_packet_cycles",
                        t.kthread_packet_cycles.unwrap_or(0.0),
                    ),
                    ("server.resume_cycles", t.resume_cycles.unwrap_or(0.0)),
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
                    ("server.kthread_run_cycles", t.kthread_run_cycles),
                    ("server.kthread_packet_cycles", t.kthread_packet_cycles),
                    ("server.resume_cycles", t.resume_cycles),
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
                        kthread_run_cycles: t
                            .kthread_run_cycles
                            .unwrap_or(assumed.kthread_run_cycles),
                        kthread_packet_cycles: t
                            .kthread_packet_cycles
                            .unwrap_or(assumed.kthread_packet_cycles),
                        resume_cycles: t.resume_cycles.unwrap_or(assumed.resume_cycles),
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
    let probe = crate::wake_up::probed_wake_ups(&record.host.wake_up, &server_cpus(&plan));
    let mut fit = ServerFit {
        idle_polling: idle_polling_share(&plan, record),
        plan,
        record,
        base: base.clone(),
        // The fit's twin wakes its threads as the run's probe measured (shifted to
        // this path's, see `ServerFit::path`), as the twin's maximum beside the lab's
        // does, and the profile keeps those wake-ups: fitted with one delay and run
        // with another, the NAPI kthread's runs (and so its cost a run) would not be
        // the lab's.
        probe,
        wake_up_shift_ns: 0.0,
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
    // The fit's twin charges each timer expiry what the run's probe measured (docs/sim.md,
    // "A timer's expiry on a virtual machine"): the deferring modes' CPU and latency
    // are fitted with it, and the profile keeps it.
    if !record.host.timer.is_empty() {
        fit.base.profile.timer = record.host.timer.clone();
    }
    fit.shift_wake_ups(0.0);
    let (mut client, mut receive_runs, mut app_runs, mut low, mut kthread_run) =
        (None, Vec::new(), Vec::new(), None, None);
    let mut path_checks = Vec::new();
    for _ in 0..2 {
        fit.notes.clear();
        fit.unfixed.clear();
        client = fit.client()?;
        receive_runs = fit.receive()?;
        app_runs = fit.app()?;
        low = fit.poll()?;
        fit.resume(kthread_run.as_ref())?;
        kthread_run = fit.kthread_run()?;
        // Last: the path adds latency, not CPU, but its wake-ups move the CPU costs
        // of the next pass (a shorter wake-up, smaller batches).
        path_checks = fit.path()?;
    }
    fit.mark_unfixed();
    let mut checks = fit.checks(&app_runs, &receive_runs, low.as_ref(), kthread_run.as_ref())?;
    checks.extend(path_checks);
    // The run's stalls are not replayed: with them the twin's generator fell behind
    // at half the lab's maxima (docs/sim.md, "Host stalls"); a profile that carries
    // `[[stalls]]` replays its own.
    let ServerFit {
        costs,
        notes,
        unfixed,
        base: twin_base,
        ..
    } = fit;
    let cycles = |seconds: f64| seconds * 1e9 * base.profile.cpu_ghz;
    let mut lab = twin_base;
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
        // A profile with wake-ups of its own (fitted on a run, shifted to the
        // server's path) keeps them; one without draws them from this run's probe.
        let wake_ups = if p.latency_ns.wake_up_samples.is_empty() {
            crate::wake_up::probed_wake_ups(&record.host.wake_up, server_cpus)
        } else {
            None
        };
        let basis = match &wake_ups {
            Some(w) => {
                draw_wake_ups_from(&mut p, w);
                format!("{basis}; wake-ups drawn from this run's probe")
            }
            None if !p.latency_ns.wake_up_samples.is_empty() => {
                let fitted_here = p
                    .provenance
                    .get("latency_ns.irq_delivery")
                    .is_some_and(|s| s.reference.contains(&record.run_id));
                if fitted_here {
                    format!("{basis}; wake-ups drawn from this run's probe, fitted to its path")
                } else {
                    format!("{basis}; wake-ups drawn from the profile's")
                }
            }
            None => basis.to_string(),
        };
        let basis = if p.stalls.is_empty() {
            basis
        } else {
            format!("{basis}; the host's stalls the profile's")
        };
        // Timer expiries likewise: the profile's own costs, else this run's probe.
        if p.timer.is_empty() {
            p.timer = record.host.timer.clone();
        }
        let basis = if p.timer.is_empty() {
            basis
        } else if p.timer == record.host.timer {
            format!("{basis}; timer expiries cost what this run's probe measured")
        } else {
            format!("{basis}; timer expiries cost what the profile says")
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
                lab_interval: lab_max.interval,
                wake_ups: wake_ups.map(|w| w.source),
            },
        ));
    }
    Ok(out)
}

/// Every CPU a configuration of `plan` runs its server on, each once.
fn server_cpus(plan: &TwinPlan) -> Vec<u32> {
    let mut cpus: Vec<u32> = plan
        .requests
        .iter()
        .flat_map(|sp| sp.configurations.iter())
        .flat_map(|s| s.server_cpus.iter().copied())
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
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
            kthread_run_cycles: Some(c.kthread_run_cycles),
            kthread_packet_cycles: Some(c.kthread_packet_cycles),
            resume_cycles: Some(c.resume_cycles),
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
