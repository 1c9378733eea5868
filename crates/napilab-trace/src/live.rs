//! A live observation: the proc tier (and, when asked, the BPF trace tier) sampled
//! every interval for a duration, turned into an [`Observation`]. `napilab observe`
//! and the lab's in-process observer (napilab_lab::runner) both run this loop; the
//! caller owns the terminal (progress, messages) through [`Event`]s and stops it by
//! sending on, or dropping the sender of, the `stop` channel.
//!
//! What it reads follows the calling thread's view: netlink sockets opened on that
//! thread, /proc/net and /sys as its mount namespace shows them, and its own network
//! namespace from /proc/thread-self (napilab_probe::netns::own_inode). The whole loop runs on the
//! calling thread, so a lab thread that was given a namespace's view
//! (napilab_lab::netns::enter_view) observes that namespace.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use napilab_core::{Observation, OriginKind};
use napilab_probe::observe::{describe_host, wait_until, Analysis};
use napilab_probe::record::RecordingWriter;
use napilab_probe::sample::Sampler;

/// What a live observation does; the caller has checked the durations.
#[derive(Clone, Debug, Default)]
pub struct LiveOptions {
    pub duration: Duration,
    pub interval: Duration,
    /// Record the raw samples to this file.
    pub record: Option<PathBuf>,
    /// A directory holding proc/ and sys/ (recorded fixtures); None: the live host,
    /// with netlink.
    pub root: Option<PathBuf>,
    /// Load the always-on BPF tier (docs/trace.md).
    pub trace: bool,
    /// Sample kernel stacks and split CPU time by stage (needs `trace`).
    pub stages: bool,
    pub flamegraph: Option<PathBuf>,
    /// Load the opt-in per-packet tier: stage latencies and drops by reason (needs
    /// `trace`).
    pub trace_packets: bool,
    /// With `trace_packets`: every packet instead of tracing windows.
    pub trace_packets_full: bool,
    /// With `trace`: `softirq_raise` attached all the time instead of in its windows.
    pub trace_raise_always: bool,
    /// Wait until this wall-clock time (ms since the Unix epoch) before the first sample.
    pub start_at_unix_ms: Option<u64>,
}

/// What the loop tells its caller while it runs.
#[derive(Debug)]
pub enum Event {
    /// The programs are loaded and the host is described: the first sample comes next
    /// (at `start_at_unix_ms` when given). A caller that opens its own window (the lab:
    /// traffic that starts after the observer is ready) may block in this event until
    /// the window opens; the first sample is taken when it returns.
    Ready,
    /// The sampling loop starts: `steps` intervals of `interval` follow.
    Begin { steps: u64, interval: Duration },
    /// One interval closed.
    Step,
    /// The interval that just closed, with its trace tier when traced (sent before its
    /// `Step`), for callers that show the observation while it runs (`napilab top`).
    Interval(Box<napilab_core::Interval>),
    /// The sampling loop ended (before the flame graph and the cost are reported).
    End,
    /// A line for the user (`napilab observe` prints it as `napilab: <line>`).
    Message(String),
}

/// The observation was stopped before its first sample (nothing to report).
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted before the first sample")
    }
}

impl std::error::Error for Interrupted {}

/// The furthest ahead `start_at_unix_ms` may be.
const MAX_START_DELAY: Duration = Duration::from_secs(600);

/// How often the process list is rescanned for new ksoftirqd/napi threads.
const THREAD_RESCAN: Duration = Duration::from_secs(10);

/// Observes for `options.duration`; `stop` receiving a message (or its sender going
/// away) ends the loop early, keeping the complete intervals. Fails with
/// [`Interrupted`] when stopped before the first sample.
pub fn observe(
    options: &LiveOptions,
    stop: &mpsc::Receiver<()>,
    events: &mut dyn FnMut(Event),
) -> Result<Observation> {
    if options.interval.is_zero() {
        bail!("the interval is zero: use 100ms or more");
    }
    let root = options.root.as_deref().unwrap_or(Path::new("/"));
    let use_netlink = options.root.is_none();
    let mut header = describe_host(root, use_netlink);
    let mut sampler = Sampler::new(root, use_netlink);
    let mut tracer = Tracer::start(
        options.trace,
        options.stages,
        options.trace_packets,
        options.trace_packets_full,
        options.trace_raise_always,
        &header,
    );
    events(Event::Ready);
    wait_for_start(options.start_at_unix_ms, stop)?;
    // The observation starts with its first sample, now: loading the BPF programs can
    // take seconds, and a caller lining its own window up with ours (the lab) needs
    // the time our window opened, not the time we started.
    header.origin.started_unix_ms = napilab_probe::observe::unix_ms_now();
    let mut writer = match &options.record {
        Some(path) => Some(RecordingWriter::create(path, &header).with_context(|| {
            format!(
                "cannot record to {}: choose a writable path",
                path.display()
            )
        })?),
        None => None,
    };
    let mut analysis = Analysis::new(header);
    tracer.report_start(&mut analysis);
    let steps = (options.duration.as_nanos() / options.interval.as_nanos()).max(1) as u64;
    events(Event::Begin {
        steps,
        interval: options.interval,
    });
    let start = Instant::now();
    let mut last_rescan = start;
    // One sample refilled each step: its strings are reused, not reallocated.
    let mut raw = napilab_probe::sample::RawSample::default();
    for step in 0..=steps {
        let deadline = start + options.interval * u32::try_from(step).unwrap_or(u32::MAX);
        if wait_until(deadline, stop) {
            events(Event::Message(format!(
                "interrupted: reporting the {} complete interval(s)",
                analysis.intervals().len()
            )));
            break;
        }
        if last_rescan.elapsed() >= THREAD_RESCAN {
            sampler.refresh_threads();
            last_rescan = Instant::now();
        }
        sampler.sample_into(&mut raw);
        if let Some(w) = writer.as_mut() {
            w.append(&raw).context("cannot write the recording")?;
        }
        let traced = tracer.sample();
        let closed = analysis
            .push(&raw)
            .map(|i| i.host.rx_bits.as_ref().map(|m| m.value / 1e6));
        let closed_now = closed.is_some();
        if let (Some(rx_mbps), Some(mut trace)) = (closed, traced) {
            tracer.add_stages(&mut trace, rx_mbps);
            analysis.attach_trace(trace);
        }
        if let (true, Some(last)) = (closed_now, analysis.intervals().last()) {
            events(Event::Interval(Box::new(last.clone())));
        }
        if step > 0 {
            events(Event::Step);
        }
    }
    events(Event::End);
    if let Some(path) = &options.flamegraph {
        match tracer.flamegraph(path) {
            Ok(()) => events(Event::Message(format!(
                "flame graph written to {}",
                path.display()
            ))),
            Err(e) => analysis.add_notice("flame graph", e),
        }
    }
    let cost = tracer.cost();
    if let Some(e) = tracer.packets.as_ref().and_then(|(p, _)| p.window_error()) {
        analysis.add_notice(
            "per-packet tracing windows",
            format!("{e}; the stages it names were not traced in some windows"),
        );
    }
    if let Some((_, Some(e))) = tracer
        .live
        .as_ref()
        .and_then(|(always_on, _, _)| always_on.raise_windows())
    {
        analysis.add_notice(
            "softirq raise windows",
            format!("{e}; the raise-to-entry latency was not sampled in some windows"),
        );
    }
    // Detach and unload the BPF programs before reporting (also after Ctrl-C).
    drop(tracer);
    analysis.merge_notices(&sampler.notices);
    if let Some(path) = &options.record {
        events(Event::Message(format!(
            "recorded to {} (replay with `napilab observe --replay {}`)",
            path.display(),
            path.display()
        )));
    }
    let mut observation = analysis.finish(OriginKind::Live);
    note_lost_polls(&mut observation);
    if let Some(cost) = cost {
        let cost = crate::cost::WithPackets::with_packets(cost, received_packets(&observation));
        events(Event::Message(describe_cost(&cost)));
        observation.trace_cost = Some(cost);
    }
    Ok(observation)
}

/// Waits until `start_at_unix_ms` (the caller's window opening, `--start-at`), at most
/// [`MAX_START_DELAY`] ahead; fails with [`Interrupted`] when stopped first.
fn wait_for_start(start_at_unix_ms: Option<u64>, stop: &mpsc::Receiver<()>) -> Result<()> {
    let Some(at) = start_at_unix_ms else {
        return Ok(());
    };
    let now = napilab_probe::observe::unix_ms_now();
    let wait = Duration::from_millis(at.saturating_sub(now));
    if wait > MAX_START_DELAY {
        anyhow::bail!(
            "--start-at {at} is {} s ahead: give a time at most {} s from now (milliseconds since the Unix epoch)",
            wait.as_secs(),
            MAX_START_DELAY.as_secs()
        );
    }
    if wait_until(Instant::now() + wait, stop) {
        return Err(Interrupted.into());
    }
    Ok(())
}

/// Says when the trace tier's per-CPU table of (NAPI instance, context) pairs was full:
/// the per-instance poll counts are then low.
fn note_lost_polls(observation: &mut Observation) {
    let lost_polls: u64 = observation
        .intervals
        .iter()
        .filter_map(|i| i.trace.as_ref())
        .map(|t| t.lost_polls)
        .sum();
    if lost_polls > 0 {
        observation.notices.push(napilab_core::Notice {
            what: "NAPI polls by instance (trace tier)".into(),
            why: format!(
                "{lost_polls} polls were not counted: a CPU's table of {} (NAPI instance, context) pairs was full, so the per-instance poll counts are low (the per-CPU softirq and CPU times are not affected)",
                crate::snapshot::NAPI_SLOTS
            ),
        });
    }
}

/// Packets the observation's devices received over all its intervals.
fn received_packets(observation: &Observation) -> u64 {
    let packets: f64 = observation
        .intervals
        .iter()
        .flat_map(|i| {
            i.devices
                .iter()
                .filter_map(move |d| d.rx_packets.as_ref().map(|m| m.value * i.duration_s))
        })
        .sum();
    packets.max(0.0).round() as u64
}

/// "tracing cost: ..." for the end of a traced observation.
fn describe_cost(cost: &napilab_core::TraceCost) -> String {
    let mut text = format!(
        "tracing cost: BPF programs ran {} times for {:.1} ms in {:.1} s = {:.2}% of one CPU",
        cost.runs,
        cost.run_ns as f64 / 1e6,
        cost.seconds,
        cost.cpu_share * 100.0
    );
    match cost.ns_per_packet {
        Some(ns) => text.push_str(&format!(
            ", {ns:.1} ns per received packet ({} packets on the observed devices)",
            cost.packets
        )),
        None => text.push_str(", no packets received on the observed devices"),
    }
    if let Some(duty) = cost.packet_duty {
        text.push_str(&format!(
            "; per-packet stages traced {:.1}% of the time",
            duty * 100.0
        ));
    }
    text.push_str(" (kernel BPF statistics, which add two clock reads per run: an upper bound)");
    text
}

/// The BPF tracing tier during a live observation (`--trace`). When it cannot start,
/// the observation goes on with /proc only and a notice says what is missing.
struct Tracer {
    live: Option<(crate::AlwaysOn, crate::Snapshot, Instant)>,
    cpus: Vec<u32>,
    notices: Vec<(String, String)>,
    /// The stage sampler, its previous reading, and the reading and length of the
    /// interval `sample` last closed.
    stages: Option<StageState>,
    /// The per-packet tier (`--trace-packets`) and its previous reading.
    packets: Option<(crate::PacketTrace, crate::packets::PacketSnapshot)>,
    /// The kernel's BPF run-time statistics, on while tracing, and the programs' run
    /// counters when they were turned on.
    meter: Option<crate::cost::CostMeter>,
}

struct StageState {
    sampler: crate::stages::StageSampler,
    previous: crate::stages::StageSamples,
    pending: Option<(crate::stages::StageSamples, f64)>,
}

/// Stage sampling frequency (cpu-clock samples per second and CPU).
const STAGE_HZ: u64 = 1000;

impl Tracer {
    fn start(
        enabled: bool,
        stages: bool,
        packets: bool,
        packets_full: bool,
        raise_always: bool,
        header: &napilab_probe::record::RecordingHeader,
    ) -> Tracer {
        let mut tracer = Tracer {
            live: None,
            cpus: header.online_cpus.clone(),
            notices: Vec::new(),
            stages: None,
            packets: None,
            meter: None,
        };
        if !enabled {
            return tracer;
        }
        let options = crate::TraceOptions {
            netdev_budget: header.settings.netdev_budget,
            netdev_budget_usecs: header.settings.netdev_budget_usecs,
            raise_timing: if raise_always {
                crate::RaiseTiming::Always
            } else {
                crate::RaiseTiming::default()
            },
            ..crate::TraceOptions::default()
        };
        match crate::AlwaysOn::start(&options) {
            Ok(always_on) => {
                tracer.notices.extend(always_on.notices.iter().cloned());
                if packets {
                    let options = crate::PacketOptions {
                        windows: (!packets_full).then_some(crate::Windows::DEFAULT),
                        ..crate::PacketOptions::default()
                    };
                    match crate::PacketTrace::start(&options) {
                        Ok(trace) => {
                            tracer.notices.extend(trace.notices.iter().cloned());
                            let first = trace.snapshot();
                            tracer.packets = Some((trace, first));
                        }
                        Err(e) => tracer.notices.push((
                            "per-packet tier (--trace-packets)".into(),
                            format!("{e}; stage latencies and drops by reason are absent"),
                        )),
                    }
                }
                let first = always_on.snapshot(&tracer.cpus);
                let mut programs = always_on.program_costs();
                if let Some((p, _)) = &tracer.packets {
                    programs.extend(p.program_costs());
                }
                match crate::cost::CostMeter::start(programs) {
                    Ok(meter) => tracer.meter = Some(meter),
                    Err(e) => tracer.notices.push(("tracing cost".into(), e)),
                }
                tracer.live = Some((always_on, first, Instant::now()));
                if stages {
                    match crate::stages::StageSampler::start(&tracer.cpus, STAGE_HZ) {
                        Ok(sampler) => {
                            let previous = sampler.read();
                            tracer.stages = Some(StageState {
                                sampler,
                                previous,
                                pending: None,
                            });
                        }
                        Err(e) => tracer.notices.push((
                            "stage profile (--stages)".into(),
                            format!("{e}; per-stage shares are absent"),
                        )),
                    }
                }
            }
            Err(e) => tracer.notices.push((
                "BPF tracing tier (--trace)".into(),
                format!("{e}; observing with /proc only, so measured softirq/IRQ time and per-NAPI contexts are absent"),
            )),
        }
        tracer
    }

    /// What the programs cost since they were attached (the statistics stay on until
    /// the tracer is dropped).
    fn cost(&self) -> Option<napilab_core::TraceCost> {
        let meter = self.meter.as_ref()?;
        let (always_on, _, _) = self.live.as_ref()?;
        let mut programs = always_on.program_costs();
        let mut duty = None;
        if let Some((p, _)) = &self.packets {
            programs.extend(p.program_costs());
            duty = Some(p.window_duty().unwrap_or(1.0));
        }
        let mut cost = meter.cost(&programs);
        cost.packet_duty = duty;
        Some(cost)
    }

    fn report_start(&self, analysis: &mut Analysis) {
        for (what, why) in &self.notices {
            analysis.add_notice(what.clone(), why.clone());
        }
    }

    /// The trace interval since the previous call (the first call covers the time since
    /// the programs were attached, and is discarded with the first /proc sample).
    fn sample(&mut self) -> Option<napilab_core::trace::TraceInterval> {
        let (always_on, previous, at) = self.live.as_mut()?;
        let now = Instant::now();
        let current = always_on.snapshot(&self.cpus);
        let mut interval =
            crate::trace_interval(previous, &current, now.duration_since(*at).as_secs_f64());
        let seconds = now.duration_since(*at).as_secs_f64();
        if let Some((packets, packets_before)) = self.packets.as_mut() {
            let packets_now = packets.snapshot();
            (interval.packet_stages, interval.drops) = crate::packets::packet_interval(
                packets_before,
                &packets_now,
                seconds,
                &packets.reasons,
                // Rows of this network namespace, like the per-device tables.
                napilab_probe::netns::own_inode(),
            );
            *packets_before = packets_now;
        }
        *previous = current;
        *at = now;
        if let Some(stages) = self.stages.as_mut() {
            // A reading whose interval was discarded (the first) starts the next one.
            if let Some((unused, _)) = stages.pending.take() {
                stages.previous = unused;
            }
            stages.pending = Some((stages.sampler.read(), seconds));
        }
        Some(interval)
    }

    /// Adds the stage shares of the interval `sample` last closed.
    fn add_stages(&mut self, trace: &mut napilab_core::trace::TraceInterval, rx_mbps: Option<f64>) {
        let Some(stages) = self.stages.as_mut() else {
            return;
        };
        let Some((current, seconds)) = stages.pending.take() else {
            return;
        };
        let (shares, costs) =
            crate::stages::stage_shares(&stages.previous, &current, seconds, rx_mbps);
        trace.stages = shares;
        trace.stage_costs = costs;
        trace.context_shares = crate::stages::context_shares(&stages.previous, &current, seconds);
        stages.previous = current;
    }

    fn flamegraph(&self, path: &Path) -> std::result::Result<(), String> {
        let stages = self
            .stages
            .as_ref()
            .ok_or("the stage sampler is not running")?;
        crate::stages::write_flamegraph(&stages.sampler.read(), path)
    }
}
