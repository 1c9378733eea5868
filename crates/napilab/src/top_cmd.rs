//! `napilab top`: the packet path live in a full-screen terminal view (docs/cli.md).
//!
//! A source thread produces intervals: live, it runs the library loop of `napilab
//! observe` (napilab_trace::live, proc tier, or with `--trace` the BPF tier); with
//! `--replay`, it plays a recording of `napilab observe --record` at its recorded pace.
//! The terminal thread keeps a window of intervals, runs observe's rules over it, turns
//! the result into rows (top::model) and draws them (top::view).

use std::collections::{BTreeMap, VecDeque};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use napilab_core::{Interval, Observation, OBSERVATION_SCHEMA};
use napilab_probe::observe::{describe_host, wait_until, Analysis};
use napilab_probe::record::RecordingHeader;
use napilab_trace::live::{self, Event, LiveOptions};
use ratatui::crossterm::event::{self as term_event, Event as TermEvent};

use crate::top::keys::{self, Action, UiState};
use crate::top::model::{self, Rows};
use crate::top::view::{self, Status};

/// How often the live map (devices, NAPI instances, pollers) is read again.
const MAP_REFRESH: Duration = Duration::from_secs(30);
/// The library loop keeps every interval of its observation; a live view restarts it
/// after this many so a session of days holds a bounded number (a restart costs one
/// interval, and with --trace reloading the BPF programs).
const SEGMENT_INTERVALS: u32 = 3600;
const WAITING: &str = "waiting for the first interval";
/// How long a key wait lasts: the view redraws at least this often.
const REDRAW: Duration = Duration::from_millis(200);

#[derive(clap::Args)]
pub struct TopArgs {
    /// Sampling interval (at least 100ms).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Load the always-on BPF tier (root): polls by execution context per NAPI
    /// instance, measured softirq and IRQ time. Without it, the proc tier (no root).
    #[arg(long)]
    trace: bool,
    /// Play a recording of `napilab observe --record FILE` at its recorded pace.
    #[arg(long, value_name = "FILE", conflicts_with = "trace")]
    replay: Option<PathBuf>,
    /// With --replay: play this many times faster.
    #[arg(
        long,
        value_name = "FACTOR",
        default_value_t = 1.0,
        requires = "replay"
    )]
    speed: f64,
    /// The window the rules (findings) look at.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    window: Duration,
}

/// What the source thread sends to the view.
enum Update {
    Header(Box<RecordingHeader>),
    Interval(Box<Interval>),
    Message(String),
    /// The source stopped (end of a recording, an error); the view stays until `q`.
    Ended(String),
}

/// How long a signalled view has to leave by itself before the process ends.
const QUIT_GRACE: Duration = Duration::from_millis(1500);
/// The exit status after a signal ended the view (128 + SIGTERM, as a shell reports it).
const EXIT_SIGNALLED: i32 = 143;

pub fn run(args: TopArgs) -> Result<()> {
    if args.interval < Duration::from_millis(100) {
        bail!(
            "--interval {:?} is too short: use 100ms or more",
            args.interval
        );
    }
    if !(args.speed > 0.0 && args.speed.is_finite()) {
        bail!(
            "--speed {} is not a positive factor: use e.g. 1 or 10",
            args.speed
        );
    }
    // Read a recording before taking the terminal, so its errors print plainly.
    let recording = match &args.replay {
        Some(path) => Some(
            napilab_probe::record::read_recording(path).with_context(|| {
                format!(
                    "cannot replay {}: make recordings with `napilab observe --record FILE`",
                    path.display()
                )
            })?,
        ),
        None => None,
    };
    if !std::io::stdout().is_terminal() {
        bail!("napilab top draws on a terminal and stdout is not one: run it in a terminal, or use `napilab observe` for text or JSON");
    }
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel();
    let source = match recording {
        Some((header, samples)) => {
            let speed = args.speed;
            std::thread::Builder::new()
                .name("napilab-top-replay".into())
                .spawn(move || replay(header, samples, speed, &tx, &stop_rx))
        }
        None => {
            let (interval, trace) = (args.interval, args.trace);
            std::thread::Builder::new()
                .name("napilab-top-live".into())
                .spawn(move || observe_live(interval, trace, &tx, &stop_rx))
        }
    }
    .context("cannot start the sampling thread")?;

    // SIGTERM/SIGHUP (a closed terminal) end the view like `q`; Ctrl-C arrives as a key
    // in raw mode, and SIGINT from `kill` is honoured too.
    let quit = Arc::new(AtomicBool::new(false));
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGINT,
    ])
    .context("cannot install the signal handlers")?;
    {
        // The view loop sees the flag between two terminal reads. On a terminal that
        // went away (tmux kill-session, a closed ssh session) crossterm's read never
        // returns (it spins on the hung-up tty), so a signal that the loop has not
        // answered within QUIT_GRACE ends the process: its BPF links are file
        // descriptors, closed (and so detached) by the exit.
        let quit = quit.clone();
        std::thread::Builder::new()
            .name("napilab-top-signals".into())
            .spawn(move || {
                if signals.forever().next().is_some() {
                    quit.store(true, Ordering::SeqCst);
                    std::thread::sleep(QUIT_GRACE);
                    ratatui::restore();
                    std::process::exit(EXIT_SIGNALLED);
                }
            })
            .context("cannot start the signal thread")?;
    }

    let source_name = match &args.replay {
        Some(path) => format!("replay {}", file_name(path)),
        None => "live".to_string(),
    };
    // ratatui::try_init enters raw mode and the alternate screen, and installs a panic
    // hook that restores the terminal before the panic message prints.
    let mut terminal = ratatui::try_init().context("cannot set up the terminal")?;
    let result = view_loop(&mut terminal, &rx, &quit, &args, &source_name);
    ratatui::restore();
    // Stops the sampling loop; it drops its tracer, detaching the BPF programs. The
    // sender goes too, so a loop that took the message finds the channel closed when it
    // asks whether to start another segment.
    let _ = stop_tx.send(());
    drop(stop_tx);
    drop(rx);
    if source.join().is_err() {
        eprintln!("napilab top: the sampling thread panicked");
    }
    result
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The view's state between frames.
struct View {
    header: Option<RecordingHeader>,
    window: VecDeque<Interval>,
    window_len: usize,
    /// When each active finding first fired (seconds into the observation).
    fired: BTreeMap<(String, String), f64>,
    latest: Rows,
    shown: Rows,
    tier: String,
    message: String,
}

impl View {
    fn apply(&mut self, update: Update, paused: bool) {
        match update {
            Update::Header(h) => self.header = Some(*h),
            Update::Message(m) => self.message = m,
            Update::Ended(m) => self.message = m,
            Update::Interval(i) => {
                // A restarted live segment starts again at t=0: the window restarts too.
                if self
                    .window
                    .back()
                    .is_some_and(|last| i.start_s < last.start_s)
                {
                    self.window.clear();
                }
                self.tier = if i.trace.is_some() { "trace" } else { "proc" }.into();
                if self.message == WAITING {
                    self.message.clear();
                }
                self.window.push_back(*i);
                while self.window.len() > self.window_len {
                    self.window.pop_front();
                }
                if let Some(observation) = self.observation() {
                    let at_s = self
                        .window
                        .back()
                        .map(|i| i.start_s + i.duration_s)
                        .unwrap_or(0.0);
                    let active: Vec<_> = observation
                        .findings
                        .iter()
                        .map(model::finding_key)
                        .collect();
                    self.fired.retain(|k, _| active.contains(k));
                    for key in active {
                        self.fired.entry(key).or_insert(at_s);
                    }
                    self.latest = model::rows(&observation, &self.fired);
                }
            }
        }
        if !paused {
            self.shown = self.latest.clone();
        }
    }

    /// The window as an Observation with the rules' findings.
    fn observation(&self) -> Option<Observation> {
        let header = self.header.as_ref()?;
        let mut observation = Observation {
            schema: OBSERVATION_SCHEMA.into(),
            origin: header.origin.clone(),
            host: header.host.clone(),
            settings: header.settings.clone(),
            topology: header.topology.clone(),
            intervals: self.window.iter().cloned().collect(),
            findings: Vec::new(),
            notices: Vec::new(),
            trace_cost: None,
        };
        observation.findings = napilab_core::explain::explain(&observation);
        Some(observation)
    }
}

fn view_loop(
    terminal: &mut ratatui::DefaultTerminal,
    rx: &mpsc::Receiver<Update>,
    quit: &AtomicBool,
    args: &TopArgs,
    source_name: &str,
) -> Result<()> {
    let interval = if args.replay.is_some() {
        Duration::from_secs(1)
    } else {
        args.interval
    };
    let mut view = View {
        header: None,
        window: VecDeque::new(),
        window_len: (args.window.as_nanos() / interval.as_nanos().max(1)).clamp(1, 600) as usize,
        fired: BTreeMap::new(),
        latest: Rows::default(),
        shown: Rows::default(),
        tier: if args.trace { "trace" } else { "proc" }.into(),
        message: WAITING.into(),
    };
    let mut ui = UiState::default();
    loop {
        let host = view
            .header
            .as_ref()
            .and_then(|h| h.origin.hostname.clone())
            .unwrap_or_default();
        let status = Status {
            source: source_name,
            host: &host,
            tier: &view.tier,
            message: &view.message,
        };
        terminal
            .draw(|frame| view::draw(frame, &view.shown, &ui, &status))
            .context("cannot draw on the terminal")?;
        if term_event::poll(REDRAW).context("cannot read the terminal")? {
            if let TermEvent::Key(key) = term_event::read().context("cannot read the terminal")? {
                let was_paused = ui.paused;
                if keys::handle(&mut ui, key) == Action::Quit {
                    return Ok(());
                }
                if was_paused && !ui.paused {
                    view.shown = view.latest.clone();
                }
            }
        }
        if quit.load(Ordering::SeqCst) {
            return Ok(());
        }
        while let Ok(update) = rx.try_recv() {
            view.apply(update, ui.paused);
        }
    }
}

/// The live source: the library loop in segments of SEGMENT_INTERVALS, the map read
/// again every MAP_REFRESH.
fn observe_live(
    interval: Duration,
    trace: bool,
    tx: &mpsc::Sender<Update>,
    stop: &mpsc::Receiver<()>,
) {
    let mut last_map = Instant::now();
    let _ = tx.send(Update::Header(Box::new(describe_host(
        Path::new("/"),
        true,
    ))));
    let options = LiveOptions {
        duration: interval * SEGMENT_INTERVALS,
        interval,
        trace,
        ..LiveOptions::default()
    };
    loop {
        let observed = live::observe(&options, stop, &mut |event| match event {
            Event::Interval(i) => {
                if last_map.elapsed() >= MAP_REFRESH {
                    let _ = tx.send(Update::Header(Box::new(describe_host(
                        Path::new("/"),
                        true,
                    ))));
                    last_map = Instant::now();
                }
                let _ = tx.send(Update::Interval(i));
            }
            Event::Message(m) => {
                // Start-up notices (why BPF is off) matter; the cost line at a segment's
                // end is the same each time.
                if !m.starts_with("tracing cost") {
                    let _ = tx.send(Update::Message(m));
                }
            }
            Event::Ready | Event::Begin { .. } | Event::Step | Event::End => {}
        });
        match observed {
            Err(e) if e.is::<live::Interrupted>() => return,
            Err(e) => {
                let _ = tx.send(Update::Ended(format!("sampling stopped: {e:#}")));
                return;
            }
            Ok(_) => {}
        }
        // Stopped (q: a message, then the channel closed) or the segment ended: go on
        // only in the latter case.
        if wait_until(Instant::now(), stop) {
            return;
        }
    }
}

/// The replay source: the recording's intervals at their recorded pace.
fn replay(
    header: RecordingHeader,
    samples: Vec<napilab_probe::sample::RawSample>,
    speed: f64,
    tx: &mpsc::Sender<Update>,
    stop: &mpsc::Receiver<()>,
) {
    let _ = tx.send(Update::Header(Box::new(header.clone())));
    let mut analysis = Analysis::new(header);
    let mut played = 0usize;
    for sample in &samples {
        let Some(interval) = analysis.push(sample) else {
            continue;
        };
        let pause = Duration::from_secs_f64((interval.duration_s / speed).clamp(0.0, 3600.0));
        let _ = tx.send(Update::Interval(Box::new(interval.clone())));
        played += 1;
        if wait_until(Instant::now() + pause, stop) {
            return;
        }
    }
    let _ = tx.send(Update::Ended(format!(
        "end of recording: {played} intervals played (q quits)"
    )));
}
