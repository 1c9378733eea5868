//! `napilab tune plan PROFILE --predict`: the plan as without it, then an observation of
//! this host with the trace tier, the twin's prediction (napilab_sim::predict) and its
//! text table or JSON (docs/tune.md, "Predict before you tune").

use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result};
use napilab_sim::predict::{self, CpuFigures, Figure, Prediction};
use napilab_trace::live::{self, Event, LiveOptions};
use napilab_tune::plan::Plan;
use napilab_tune::profile::{self, Params};
use serde::Serialize;

pub const PLAN_PREDICT_SCHEMA: &str = "napilab.tune-plan-predict/1";

/// What `--predict --json` prints: the plan (or why it was refused) and the prediction
/// (or why the twin refused).
#[derive(Serialize)]
struct PlanPrediction<'a> {
    schema: &'static str,
    plan: Option<&'a Plan>,
    plan_error: Option<String>,
    prediction: Option<&'a Prediction>,
    refusal: Option<String>,
}

/// A refusal already printed in the command's JSON (the plan's, with the prediction;
/// the twin's, of `tune predict`): the caller exits non-zero without printing it again.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The sampling interval for an observation of `duration`: one second, or half the
/// duration when that is shorter, so there are always two intervals to average.
fn interval_for(duration: Duration) -> Duration {
    (duration / 2).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// This host (the caller's network namespace) observed for `duration` with the
/// trace tier.
fn observe_traced(duration: Duration) -> Result<napilab_core::Observation> {
    if duration < Duration::from_millis(200) {
        anyhow::bail!(
            "--for {} is too short to measure the packet path: observe for 1s or more",
            humantime::format_duration(duration)
        );
    }
    let (stop_tx, stop) = mpsc::channel::<()>();
    let options = LiveOptions {
        duration,
        interval: interval_for(duration),
        trace: true,
        ..LiveOptions::default()
    };
    let observed = live::observe(&options, &stop, &mut |event| {
        if let Event::Message(line) = event {
            eprintln!("napilab: {line}");
        }
    });
    drop(stop_tx);
    observed
}

/// How long a thread woken onto each of `cpus` waits to run, woken from the next CPU
/// (napilab-probe `wake_up_latency`, enough wake-ups for the twin to draw its rare long
/// ones from), under the load the observation saw; about 0.4 s per CPU. None on a host
/// of one CPU (nothing to wake from), and a CPU the probe fails on is said and left
/// out: the twin then falls back to the run delays (docs/tune.md).
fn probe_wake_ups(cpus: &[u32]) -> Vec<napilab_core::WakeUpLatency> {
    if cpus.len() < 2 {
        eprintln!("napilab: wake-up probe skipped: this host has one CPU, nothing to wake it from");
    }
    napilab_probe::wake_up_latency::measure_tail_each(cpus)
        .into_iter()
        .filter_map(|r| {
            r.map_err(|e| eprintln!("napilab: wake-up probe: {e}; that CPU is left out"))
                .ok()
        })
        .collect()
}

/// The deferral timeout the profile sets (`napi.gro-flush-timeout` above 0), if any.
fn deferral_timeout(profile: &profile::Profile) -> Option<Duration> {
    profile
        .items
        .iter()
        .filter(|i| i.setting == "napi.gro-flush-timeout")
        .filter_map(|i| i.value.as_integer())
        .find(|&ns| ns > 0)
        .map(|ns| Duration::from_nanos(ns as u64))
}

/// At most this many CPUs are given the timer probe (`each_seconds_per_cpu` each).
const TIMER_PROBE_CPUS: usize = 8;

/// What a timer re-armed every `timeout` costs each CPU that polled a NAPI instance in
/// the observation (napilab-probe `timer_interrupt_cost`): the deferral timer fires on
/// the polling CPU. A CPU that cannot be probed is left out, with a notice.
fn probe_timers(
    obs: &napilab_core::Observation,
    timeout: Duration,
) -> Vec<napilab_core::TimerCost> {
    let mut cpus: Vec<u32> = obs
        .intervals
        .iter()
        .flat_map(|i| i.trace.iter().flat_map(|t| &t.napi))
        .filter(|n| n.polls > 0)
        .map(|n| n.cpu)
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.len() > TIMER_PROBE_CPUS {
        eprintln!(
            "napilab: the timer probe measures the first {TIMER_PROBE_CPUS} of the {} polling CPUs",
            cpus.len()
        );
        cpus.truncate(TIMER_PROBE_CPUS);
    }
    eprintln!(
        "napilab: measuring what a {} us timer costs CPU {} (the profile defers; about {:.1} s)",
        timeout.as_micros(),
        cpus.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        cpus.len() as f64 * napilab_probe::timer_interrupt_cost::each_seconds_per_cpu()
    );
    napilab_probe::timer_interrupt_cost::measure_each(&cpus, timeout)
        .into_iter()
        .filter_map(|r| {
            r.map_err(|e| eprintln!("napilab: timer probe: {e}; that CPU is left out"))
                .ok()
        })
        .collect()
}

/// Observes this host and predicts profile `name`: the prediction, or the refusal's
/// reason (the twin's or the observation's).
pub fn predict_here(
    name: &str,
    given: &Params,
    duration: Duration,
) -> Result<std::result::Result<Prediction, String>> {
    let (profile, _) = profile::load(name)?;
    Ok(match observe_traced(duration) {
        Ok(mut obs) => {
            obs.host.wake_up = probe_wake_ups(&obs.host.cpus);
            if let Some(timeout) = deferral_timeout(&profile) {
                obs.host.timer = probe_timers(&obs, timeout);
            }
            predict::predict(&obs, &profile, given).map_err(|r| r.reason)
        }
        Err(e) => Err(format!("observing this host failed: {e:#}")),
    })
}

/// `render_plan`: how `tune plan` prints a plan (passed in, so the prediction's module
/// does not import the command's).
pub fn plan_and_predict(
    name: &str,
    given: &Params,
    duration: Duration,
    json: bool,
    render_plan: fn(&Plan) -> String,
) -> Result<()> {
    let mut ctx = napilab_tune::host_ctx();
    let plan = napilab_tune::plan_profile(&mut ctx, name, given);
    // The prediction is made also when the plan is refused: a profile this host cannot
    // apply (a mechanism of a newer kernel) still gets the twin's reason.
    let prediction = predict_here(name, given, duration)?;
    let plan_error = plan.as_ref().err().map(|e| e.to_string());
    if json {
        let out = PlanPrediction {
            schema: PLAN_PREDICT_SCHEMA,
            plan: plan.as_ref().ok(),
            plan_error: plan_error.clone(),
            prediction: prediction.as_ref().ok(),
            refusal: prediction.as_ref().err().cloned(),
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        let mut out = match &plan {
            Ok(p) => render_plan(p),
            Err(e) => format!("{e}\n"),
        };
        out.push('\n');
        match &prediction {
            Ok(p) => out.push_str(&render(p)),
            Err(reason) => out.push_str(&format!("prediction refused: {reason}\n")),
        }
        print!("{out}");
    }
    match plan_error {
        Some(e) => Err(Refused(e).into()),
        None => Ok(()),
    }
}

/// Picks one figure of a CPU's.
type Pick = fn(&CpuFigures) -> &Figure;

fn fig(f: &Figure, scale: f64, digits: usize) -> String {
    if (f.high - f.low).abs() * scale < 0.5 * 10f64.powi(-(digits as i32)) {
        format!("{:.*}", digits, f.mean * scale)
    } else {
        format!(
            "{:.*} [{:.*}, {:.*}]",
            digits,
            f.mean * scale,
            digits,
            f.low * scale,
            digits,
            f.high * scale
        )
    }
}

/// A headroom figure with what bounds it: `>=` when the search passed at its cap,
/// `<` observed when the observed load already lost packets in the twin.
fn headroom(h: &predict::Headroom) -> String {
    let f = fig(&h.pps, 1.0, 0);
    match h.stopped.as_str() {
        "at_cap" => format!(">= {f} (the search's cap)"),
        "below_observed" => format!("{f} (below the observed load)"),
        "converged" => f,
        other => format!("{f} ({other})"),
    }
}

/// The prediction as text: the measured load, then per CPU current -> predicted.
pub fn render(p: &Prediction) -> String {
    let m = &p.measured;
    let mut out = format!(
        "prediction for {} on {} (kernel {}), {} observed for {:.1} s: {:.0} packets/s, {:.0}-byte frames, {:.0} ns packet CPU per packet\n",
        p.profile,
        p.hostname.as_deref().unwrap_or("this host"),
        p.kernel,
        p.devices.join(","),
        m.seconds,
        m.packets_per_s,
        m.frame_bytes,
        m.cpu_ns_per_packet
    );
    out.push_str(&format!(
        "twin (fit factor {:.3}, {:.0}% intervals over {} seeds): current -> predicted\n",
        p.fit_factor,
        p.level * 100.0,
        p.seeds.len()
    ));
    let row = |label: &str, a: String, b: String| format!("  {label:<34} {a:>28} -> {b}\n");
    out.push_str(&row(
        "packets/s",
        fig(&p.current.packets_per_s, 1.0, 0),
        fig(&p.predicted.packets_per_s, 1.0, 0),
    ));
    out.push_str(&row(
        "dropped/s",
        fig(&p.current.dropped_per_s, 1.0, 0),
        fig(&p.predicted.dropped_per_s, 1.0, 0),
    ));
    out.push_str(&row(
        "packet CPU per packet (ns)",
        fig(&p.current.cpu_ns_per_packet, 1.0, 0),
        fig(&p.predicted.cpu_ns_per_packet, 1.0, 0),
    ));
    if let (Some(a), Some(b)) = (&p.current.headroom_pps, &p.predicted.headroom_pps) {
        out.push_str(&row(
            &format!(
                "headroom (packets/s, loss <= {:.1}%)",
                b.loss_threshold * 100.0
            ),
            headroom(a),
            headroom(b),
        ));
    }
    if let Some(s) = &p.sender_rate {
        out.push_str(&format!("sender: {}\n", s.says));
    }
    for (c, n) in p.current.cpus.iter().zip(&p.predicted.cpus) {
        let per: [(&str, Pick, f64, usize); 6] = [
            ("softirq %", |x| &x.softirq, 100.0, 1),
            ("NAPI kthread %", |x| &x.napi_thread, 100.0, 1),
            ("busy poll %", |x| &x.busy_poll, 100.0, 1),
            ("polls/s", |x| &x.polls_per_s, 1.0, 0),
            ("packets per poll", |x| &x.packets_per_poll, 1.0, 1),
            ("notifications (IRQs)/s", |x| &x.irqs_per_s, 1.0, 0),
        ];
        for (label, get, scale, digits) in per {
            let (a, b) = (get(c), get(n));
            if a.mean == 0.0 && b.mean == 0.0 {
                continue;
            }
            out.push_str(&row(
                &format!("cpu {} {label}", c.cpu),
                fig(a, scale, digits),
                fig(b, scale, digits),
            ));
        }
    }
    out.push_str("settings: current -> predicted\n");
    for (c, n) in p.current.settings.iter().zip(&p.predicted.settings) {
        out.push_str(&format!(
            "  {}-{}: {:?} on cpu {} (defer {}) -> {:?} on cpu {} (defer {})\n",
            c.device,
            c.queue,
            c.context,
            c.cpu,
            c.defer_hard_irqs,
            n.context,
            n.cpu,
            n.defer_hard_irqs
        ));
    }
    out.push_str("measured per CPU (the fit's input):\n");
    for c in &m.cpus {
        out.push_str(&format!(
            "  cpu {}: softirq {:.1}%, NAPI kthread {:.1}%, {:.0} polls/s, {:.1} packets per poll\n",
            c.cpu,
            c.softirq * 100.0,
            c.napi_thread * 100.0,
            c.polls_per_s,
            c.packets_per_poll
        ));
    }
    if let Some(w) = &p.kthread_wake_up {
        out.push_str(&format!(
            "NAPI kthread wake-up delay: {:.1} us ({})\n",
            w.delay_ns / 1e3,
            if w.measured {
                "measured on this host"
            } else {
                "not measured here"
            }
        ));
    }
    if p.predicted.headroom_pps.is_some() {
        out.push_str(&format!(
            "headroom: {}\n",
            napilab_sim::predict_verify::HEADROOM_NOT_VERIFIED
        ));
    }
    out.push_str("assumed:\n");
    for a in &p.assumed {
        out.push_str(&format!("  - {a}\n"));
    }
    out
}

/// `napilab tune verify`: the prediction kept in `journal` against this host observed
/// now for `duration`.
pub fn verify(journal: &std::path::Path, duration: Duration, json: bool) -> Result<()> {
    let j = napilab_tune::journal::Journal::read(journal)
        .with_context(|| format!("reading {}", journal.display()))?;
    let Some(kept) = j.prediction() else {
        anyhow::bail!(
            "{} keeps no prediction: apply the profile with --predict (napilab tune apply PROFILE --predict) to check it later",
            journal.display()
        );
    };
    let prediction: Prediction = serde_json::from_value(kept.clone()).with_context(|| {
        format!(
            "{}: the kept prediction is not a {} (made by another napilab version?)",
            journal.display(),
            predict::PREDICTION_SCHEMA
        )
    })?;
    if j.status() == napilab_tune::journal::Status::Reverted {
        anyhow::bail!(
            "{} is reverted: its profile is no longer in force, so there is nothing to verify (apply it again with --predict)",
            journal.display()
        );
    }
    let dev = prediction.devices.first().cloned().unwrap_or_default();
    let obs = observe_traced(duration)?;
    let measured = predict::measure(&obs, &dev).map_err(|r| anyhow::anyhow!(r.reason))?;
    let v = napilab_sim::predict_verify::verify(&prediction, measured);
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let mut out = format!(
        "verify {} on {dev} (journal {}): predicted before apply vs measured now over {:.1} s, all CPUs\n",
        v.profile,
        journal.display(),
        v.measured.seconds
    );
    out.push_str(&format!(
        "  {:<32} {:>30} {:>12} {:>8}\n",
        "figure", "predicted", "measured", "error"
    ));
    for c in &v.checks {
        let digits = if c.measured.abs() < 10.0 { 3 } else { 0 };
        out.push_str(&format!(
            "  {:<32} {:>30} {:>12.*} {:>8}{}\n",
            c.figure,
            fig(&c.predicted, 1.0, digits),
            digits,
            c.measured,
            c.error
                .map_or("-".to_string(), |e| format!("{:+.0}%", e * 100.0)),
            if c.within { "  (in the interval)" } else { "" }
        ));
    }
    if let Some(e) = v.max_abs_error {
        out.push_str(&format!("max |error| {:.0}%\n", e * 100.0));
    }
    if let Some(p) = &v.placement {
        out.push_str(&format!("placement: {p}\n"));
    }
    for u in &v.unverified {
        out.push_str(&format!(
            "  {:<32} {:>30} {:>12} {:>8}  {}\n",
            u.figure,
            fig(&u.predicted, 1.0, 0),
            "-",
            "-",
            u.why
        ));
    }
    print!("{out}");
    Ok(())
}

/// Where `tune predict --from` found its Observation, as printed and in the JSON.
#[derive(Serialize)]
struct RecordedSource {
    file: String,
    /// `CONFIGURATION:N` for a lab record: the configuration's Nth sweep point.
    point: Option<String>,
}

/// What `tune predict --json` prints.
#[derive(Serialize)]
struct RecordedPrediction<'a> {
    schema: &'static str,
    source: RecordedSource,
    prediction: Option<&'a Prediction>,
    refusal: Option<String>,
}

pub const RECORDED_PREDICT_SCHEMA: &str = "napilab.tune-predict/1";

/// The Observation in `path`: the JSON `napilab observe --json` prints, or a lab run's
/// record (run.json) with `point` naming a configuration and, after a colon, which of
/// its sweep points (0 when left out). Every error names the file and what to give.
/// The record is walked as JSON rather than read as a whole `RunRecord`: only the
/// configuration names, the points' roles and the chosen point's Observation must
/// parse, so a run.json of an older napilab whose other fields changed still predicts.
pub fn recorded_observation(
    path: &std::path::Path,
    point: Option<&str>,
) -> Result<(napilab_core::Observation, Option<String>)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let Some(configurations) = value.get("configurations").and_then(|c| c.as_array()) else {
        if point.is_some() {
            anyhow::bail!(
                "{} is an Observation, not a lab record: --point picks a point of a lab run's run.json; leave it out",
                path.display()
            );
        }
        let obs = serde_json::from_value(value).with_context(|| {
            format!(
                "{} is neither an Observation (napilab observe --trace --json) nor a lab record (run.json)",
                path.display()
            )
        })?;
        return Ok((obs, None));
    };
    let names: Vec<&str> = configurations
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let Some(point) = point else {
        anyhow::bail!(
            "{} is a lab record: name the point to predict from with --point CONFIGURATION[:N] (configurations: {})",
            path.display(),
            names.join(", ")
        );
    };
    let (name, index) = match point.rsplit_once(':') {
        Some((n, i)) => (
            n,
            i.parse::<usize>().with_context(|| {
                format!("--point {point}: after the colon comes a sweep point's index (0, 1, ...)")
            })?,
        ),
        None => (point, 0),
    };
    let Some(config) = configurations.iter().find(|c| c["name"] == name) else {
        anyhow::bail!(
            "{}: no configuration {name:?}; it has {}",
            path.display(),
            names.join(", ")
        );
    };
    let sweep: Vec<&serde_json::Value> = config["points"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["role"] == "sweep")
        .collect();
    let Some(p) = sweep.get(index) else {
        anyhow::bail!(
            "{}: configuration {name} has {} sweep points; --point {name}:N takes N from 0 to {}",
            path.display(),
            sweep.len(),
            sweep.len().saturating_sub(1)
        );
    };
    if p["observation"].is_null() {
        anyhow::bail!(
            "{}: sweep point {index} of {name} carries no Observation (the run was made with --no-observe?): run the lab again without it, with measurement.trace = \"always\"",
            path.display()
        );
    }
    let mut obs: napilab_core::Observation = serde_json::from_value(p["observation"].clone())
        .with_context(|| {
            format!(
                "{}: the Observation of {name}:{index} does not parse (made by another napilab version?)",
                path.display()
            )
        })?;
    // The lab probes wake-ups once, at the run's start, into the record's host facts
    // (docs/lab.md, "Wake-ups"); a point's Observation does not repeat them.
    if obs.host.wake_up.is_empty() {
        if let Ok(probed) = serde_json::from_value(value["host"]["wake_up"].clone()) {
            obs.host.wake_up = probed;
        }
    }
    Ok((obs, Some(format!("{name}:{index}"))))
}

/// `napilab tune predict PROFILE --from FILE`: the twin's prediction from a recorded
/// Observation; nothing on this host is read or changed. The wake-up delay of a NAPI
/// kthread comes from the recording (its probe, or its threads' run delays), else from
/// the veth-lab profile, and the prediction says which.
pub fn predict_recorded(
    name: &str,
    given: &Params,
    path: &std::path::Path,
    point: Option<&str>,
    json: bool,
) -> Result<()> {
    let (profile, _) = profile::load(name)?;
    let (obs, point) = recorded_observation(path, point)?;
    let prediction = predict::predict(&obs, &profile, given).map_err(|r| r.reason);
    let source = RecordedSource {
        file: path.display().to_string(),
        point,
    };
    if json {
        let out = RecordedPrediction {
            schema: RECORDED_PREDICT_SCHEMA,
            source,
            prediction: prediction.as_ref().ok(),
            refusal: prediction.as_ref().err().cloned(),
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "predicted from {}{} (recorded; nothing on this host was read or changed)",
            source.file,
            source
                .point
                .as_deref()
                .map_or(String::new(), |p| format!(", point {p}"))
        );
        match &prediction {
            Ok(p) => print!("{}", render(p)),
            // Said once, by the caller's error line.
            Err(reason) => anyhow::bail!("prediction refused: {reason}"),
        }
    }
    match prediction {
        Ok(_) => Ok(()),
        Err(reason) => Err(Refused(reason).into()),
    }
}
