//! What every topology's runner (packet_runner, server_runner, vpn_runner) shares
//! with the run loop in runner.rs: the run's options and context, the DUT's
//! observer, the guard of the global sysctls and the notices. A module of its own so
//! that runner.rs dispatches to the topology runners and they import from here,
//! never from runner.rs: no import circle.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use napilab_core::scenario::{Configuration, Scenario, TraceTier};
use napilab_core::{Notice, Observation};
use napilab_trace::live::LiveOptions;

use crate::netns;

/// Profile-name prefix of the journals the lab writes (`lab clean` reverts them).
pub const JOURNAL_PREFIX: &str = "lab-";

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub scenario_text: String,
    /// Names the scenario in errors and in the record.
    pub scenario_file: String,
    /// Results root: the record goes to `<out_dir>/<run_id>/run.json`.
    pub out_dir: PathBuf,
    /// Write `run.json` here. false: the caller writes it from the returned record
    /// (`napilab lab run` adds the twin first, so the file is written once); a run
    /// that fails is still written here, since its caller gets no record.
    pub write_record: bool,
    /// Observe the DUT namespace during each point (in-process, on a thread in that
    /// namespace); false: points carry no Observation (a notice says so).
    pub observe: bool,
    /// Journal directory for the global sysctls (napilab-tune).
    pub journal_dir: PathBuf,
    /// Set by SIGINT/SIGTERM handlers: stop cleanly.
    pub stop: Arc<AtomicBool>,
    /// Draw a progress bar on stderr (when it is a terminal).
    pub progress: bool,
    /// Use this run id instead of a new one (tests).
    pub run_id: Option<String>,
}

impl RunOptions {
    /// A run for a test or a benchmark: no observer, no progress bar, the record and
    /// the journal under `out_dir`, a new run id, stopped by nothing but its own end.
    pub fn quiet(
        scenario_text: &str,
        scenario_file: &str,
        out_dir: &std::path::Path,
    ) -> RunOptions {
        RunOptions {
            scenario_text: scenario_text.to_string(),
            scenario_file: scenario_file.to_string(),
            out_dir: out_dir.to_path_buf(),
            write_record: true,
            observe: false,
            journal_dir: out_dir.join("journal"),
            stop: Arc::new(AtomicBool::new(false)),
            progress: false,
            run_id: None,
        }
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(0))
        .unwrap_or(0)
}

/// Reverts the journal of the configuration's sysctl changes on drop.
pub(crate) struct SysctlGuard {
    journal: Option<PathBuf>,
}

impl SysctlGuard {
    pub(crate) fn apply(
        run_id: &str,
        cfg: &Configuration,
        dir: &Path,
    ) -> Result<(SysctlGuard, Vec<String>)> {
        let s = &cfg.settings;
        let mut items = String::new();
        let mut what = Vec::new();
        for (attr, v) in [
            ("netdev_budget", s.netdev_budget),
            ("netdev_budget_usecs", s.netdev_budget_usecs),
        ] {
            if let Some(v) = v {
                items.push_str(&format!(
                    "[[set]]\nsetting = \"sysctl.{attr}\"\nvalue = {v}\nwhy = \"lab run {run_id}, configuration {}\"\n",
                    cfg.name.replace('"', "'")
                ));
                what.push(format!("net.core.{attr} = {v}"));
            }
        }
        if items.is_empty() {
            return Ok((SysctlGuard { journal: None }, what));
        }
        let name = format!("{JOURNAL_PREFIX}{run_id}");
        let text = format!(
            "name = \"{name}\"\nsummary = \"napilab lab run {run_id}: global sysctls of one configuration\"\nstudy = \"napilab lab\"\n{items}"
        );
        let profile = napilab_tune::profile::parse(&text, &name)
            .map_err(|e| anyhow::anyhow!("internal profile for the sysctls: {e}"))?;
        let mut ctx = napilab_tune::host_ctx();
        let plan = napilab_tune::plan::plan(
            &mut ctx,
            &profile,
            &format!("napilab lab {run_id}"),
            &napilab_tune::profile::Params::default(),
        )
        .context("planning net.core sysctls (run napilab in the initial network namespace)")?;
        let report = napilab_tune::apply(&mut ctx, plan, dir)
            .with_context(|| format!("applying {}", what.join(", ")))?;
        Ok((
            SysctlGuard {
                journal: report.journal,
            },
            what,
        ))
    }

    pub(crate) fn revert(&mut self) -> Result<()> {
        if let Some(j) = self.journal.take() {
            let mut ctx = napilab_tune::host_ctx();
            napilab_tune::revert(&mut ctx, &j)
                .with_context(|| format!("reverting {} (run `napilab lab clean`)", j.display()))?;
        }
        Ok(())
    }
}

impl Drop for SysctlGuard {
    fn drop(&mut self) {
        if let Err(e) = self.revert() {
            eprintln!("napilab: {e:#}");
        }
    }
}

/// The DUT's observer: napilab_trace::live (the loop of `napilab observe`) on a thread
/// that sees the DUT's namespace (netns::enter_view), so its devices, counters and
/// per-namespace settings are the DUT's. No process is started: a killed run takes its
/// observer with it. Dropping it, or a stop, ends the loop at its next wait.
pub(crate) struct Observer {
    ns: String,
    /// Dropped to stop the loop (the loop stops when its channel's sender goes).
    stop: Option<mpsc::Sender<()>>,
    /// Sent (or dropped) to open the window: the first sample is taken then.
    open: Option<mpsc::Sender<()>>,
    /// The window's length, and when [`Observer::open`] opened it (ms since the Unix
    /// epoch): [`Observer::finish`] judges the first sample's lateness against them.
    window: Duration,
    opened_ms: Option<u64>,
    thread: Option<std::thread::JoinHandle<std::io::Result<Result<Observation, String>>>>,
}

/// How long [`Observer::start`] waits for the observer to load its programs: seconds on
/// a busy machine, more only when something is wrong.
const OBSERVER_READY_WAIT: Duration = Duration::from_secs(30);

/// How long a ready observer waits for its window to open before it opens it itself
/// (its caller is gone or stuck): longer than any warm-up.
const OBSERVER_OPEN_WAIT: Duration = Duration::from_secs(120);

/// The shortest interval the observer samples (`napilab observe --interval`'s floor).
const MIN_OBSERVER_INTERVAL: Duration = Duration::from_millis(100);

impl Observer {
    /// Starts observing `ns` for `duration` with the trace tier `tier` and returns once
    /// the observer is ready (its programs loaded, at most [`OBSERVER_READY_WAIT`]); its
    /// first sample waits for [`Observer::open`], so that the caller starts its traffic
    /// with the observer ready and opens the window when its warm-up ends, however long
    /// loading took (seconds on a busy machine: a window opened by the clock instead
    /// once missed most of a point's traffic).
    /// A stop (Ctrl-C) ends the wait at once.
    pub(crate) fn start(
        ns: &str,
        duration: Duration,
        tier: TraceTier,
        stop: &AtomicBool,
    ) -> Result<Observer, String> {
        let secs = duration.as_secs_f64();
        let interval = if secs >= 2.0 { 1.0 } else { secs };
        // Whole milliseconds, as `napilab observe --for .. --interval ..` took them.
        let ms = |s: f64| Duration::from_millis((s * 1000.0).round() as u64);
        let (duration, interval) = (ms(secs), ms(interval));
        if interval < MIN_OBSERVER_INTERVAL {
            return Err(format!(
                "the measurement window of {secs} s is shorter than the observer's shortest interval (100 ms): give a longer duration_s"
            ));
        }
        let (trace, stages, trace_packets) = match tier {
            TraceTier::Off => (false, false, false),
            TraceTier::Always => (true, false, false),
            TraceTier::Stages => (true, true, false),
            TraceTier::Packets => (true, false, true),
        };
        let options = LiveOptions {
            duration,
            interval,
            trace,
            stages,
            trace_packets,
            ..LiveOptions::default()
        };
        let (tx, rx) = mpsc::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let (open_tx, open_rx) = mpsc::channel::<()>();
        let thread = netns::spawn_in_view(ns, "napilab-observe", move || {
            napilab_trace::live::observe(&options, &rx, &mut |event| {
                if let napilab_trace::live::Event::Ready = event {
                    let _ = ready_tx.send(());
                    // A message or the caller gone: the window is open.
                    let _ = open_rx.recv_timeout(OBSERVER_OPEN_WAIT);
                }
            })
            .map_err(|e| format!("{e:#}"))
        })
        .map_err(|e| format!("starting the observer's thread: {e}"))?;
        let mut observer = Observer {
            ns: ns.to_string(),
            stop: Some(tx),
            open: Some(open_tx),
            window: duration,
            opened_ms: None,
            thread: Some(thread),
        };
        let deadline = Instant::now() + OBSERVER_READY_WAIT;
        let mut ready = ready_rx.recv_timeout(Duration::from_millis(50));
        while matches!(ready, Err(mpsc::RecvTimeoutError::Timeout))
            && Instant::now() < deadline
            && !stop.load(Ordering::Relaxed)
        {
            ready = ready_rx.recv_timeout(Duration::from_millis(50));
        }
        match ready {
            Ok(()) => Ok(observer),
            // The thread ended before it was ready: its error says why.
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(
                match observer.finish(OBSERVER_STOP_WAIT, &AtomicBool::new(false)) {
                    Err(e) => e,
                    Ok(_) => "the observer ended before its first sample".into(),
                },
            ),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                observer.stop.take();
                observer.open.take();
                if let Some(t) = observer.thread.take() {
                    wait_for(&t, OBSERVER_STOP_WAIT);
                }
                Err(if stop.load(Ordering::Relaxed) {
                    "stopped before the observer was ready".to_string()
                } else {
                    format!(
                        "the observer was not ready within {} s (loading its programs): the machine is overloaded, or observe without the trace tier",
                        OBSERVER_READY_WAIT.as_secs()
                    )
                })
            }
        }
    }

    /// Opens the window: the observer takes its first sample now.
    pub(crate) fn open(&mut self) {
        if let Some(open) = self.open.take() {
            let _ = open.send(());
        }
        self.opened_ms = Some(now_ms());
    }

    /// Waits (bounded by `timeout`, and ended early by `stop`) for the Observation.
    /// The observer samples as soon as the window opens, later only when its thread
    /// waited for a CPU: an Observation whose first sample came more than a tenth of the
    /// window after [`Observer::open`] did not see the point's traffic, and is an error.
    pub(crate) fn finish(
        mut self,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<Observation, String> {
        let Some(thread) = self.thread.take() else {
            return Err("observer not started".into());
        };
        // A window never opened opens now rather than holding the thread for
        // OBSERVER_OPEN_WAIT.
        self.open.take();
        let deadline = Instant::now() + timeout;
        while !thread.is_finished() {
            if Instant::now() >= deadline || stop.load(Ordering::Relaxed) {
                self.stop.take();
                wait_for(&thread, OBSERVER_STOP_WAIT);
                return Err("the observer did not finish in time".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut observation = match thread.join() {
            Ok(Ok(Ok(o))) => o,
            Ok(Ok(Err(e))) => return Err(e),
            Ok(Err(e)) => return Err(format!("the observer's view of {}: {e}", self.ns)),
            Err(_) => return Err("the observer panicked".into()),
        };
        if let Some(opened) = self.opened_ms {
            let late_ms = observation.origin.started_unix_ms.saturating_sub(opened);
            if late_ms as f64 > 100.0 * self.window.as_secs_f64() {
                return Err(format!(
                    "its first sample came {late_ms} ms after the window opened (the observer's thread in {} waited for a CPU), more than a tenth of the window: it did not see the point's traffic and is left out",
                    self.ns
                ));
            }
        }
        // The run's own `host.identity` names the machine once: the observer runs on the
        // same host, and a copy in every point would add about 1.5 KB per point to
        // run.json and the store.
        observation.host.identity = None;
        Ok(observation)
    }
}

/// How long a stopped observer is given to detach its BPF programs and end.
const OBSERVER_STOP_WAIT: Duration = Duration::from_secs(5);

fn wait_for<T>(thread: &std::thread::JoinHandle<T>, within: Duration) {
    let end = Instant::now() + within;
    while !thread.is_finished() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        // Its loop ends at its next wait; its programs go with its thread.
        self.stop.take();
        if let Some(t) = self.thread.take() {
            wait_for(&t, OBSERVER_STOP_WAIT);
        }
    }
}

pub(crate) struct Ctx<'a> {
    pub(crate) scenario: &'a Scenario,
    pub(crate) opts: &'a RunOptions,
    pub(crate) notices: Vec<Notice>,
    pub(crate) next_point: u32,
    pub(crate) bar: indicatif::ProgressBar,
    /// CPUs of the host (the highest CPU number + 1).
    pub(crate) ncpus: u32,
    /// Above what a search trial is marked disturbed: this machine's noise, measured
    /// at the run's start, plus fixed margins.
    pub(crate) disturbance_limits: crate::disturbance::Limits,
}

pub(crate) fn notice(notices: &mut Vec<Notice>, what: impl Into<String>, why: impl Into<String>) {
    let what = what.into();
    if !notices.iter().any(|n| n.what == what) {
        notices.push(Notice {
            what,
            why: why.into(),
        });
    }
}
