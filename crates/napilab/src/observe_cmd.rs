//! `napilab observe`: live sampling, recording and replay.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use napilab_core::Observation;
use napilab_probe::observe::replay;
use napilab_trace::live::{self, Event, LiveOptions};

use crate::render;

pub struct Options {
    /// What to observe and how (the library's options).
    pub live: LiveOptions,
    pub json: bool,
    pub replay: Option<PathBuf>,
    pub show_map: bool,
}

pub fn run(options: &Options) -> Result<()> {
    let observation = match &options.replay {
        Some(path) => replay(path).with_context(|| {
            format!(
                "cannot replay {}: make recordings with `napilab observe --record FILE`",
                path.display()
            )
        })?,
        None => observe_live(options)?,
    };
    if options.json {
        // Streamed to stdout: the whole document as one String first grew by doubling
        // with every interval (copies and fresh pages) before a byte was printed.
        use std::io::Write as _;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        serde_json::to_writer_pretty(&mut out, &observation)?;
        writeln!(out)?;
        out.flush()?;
    } else {
        print!("{}", render::observation(&observation, options.show_map));
    }
    Ok(())
}

fn observe_live(options: &Options) -> Result<Observation> {
    if options.live.interval < Duration::from_millis(100) {
        bail!(
            "--interval {:?} is too short: use 100ms or more",
            options.live.interval
        );
    }
    if options.live.duration < options.live.interval {
        bail!(
            "--for {} is shorter than --interval {}: observe for at least one interval",
            humantime::format_duration(options.live.duration),
            humantime::format_duration(options.live.interval)
        );
    }
    let root = options.live.root.as_deref().unwrap_or(Path::new("/"));
    if !root.join("proc/stat").exists() {
        bail!(
            "{} has no proc/stat: --root must name a directory holding proc/ and sys/",
            root.display()
        );
    }
    let stop = stop_on_signals()?;
    let live = &options.live;
    let mut progress = indicatif::ProgressBar::hidden();
    let observed = live::observe(live, &stop, &mut |event| match event {
        Event::Begin { steps, interval } => progress = progress_bar(steps, interval),
        // A hidden bar (stderr not a terminal) still updates its rate estimate on
        // every inc: skip it.
        Event::Step if !progress.is_hidden() => progress.inc(1),
        Event::Ready | Event::Step | Event::Interval(_) => {}
        Event::End => progress.finish_and_clear(),
        Event::Message(line) => eprintln!("napilab: {line}"),
    });
    match observed {
        Err(e) if e.is::<live::Interrupted>() => {
            Err(crate::Interrupted("napilab observe: interrupted before its first sample").into())
        }
        other => other,
    }
}

/// A channel that receives a message on SIGINT or SIGTERM, so the sampling loop can
/// block until its next deadline and still stop at once.
fn stop_on_signals() -> Result<mpsc::Receiver<()>> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .context("cannot install the Ctrl-C handler")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            let _ = tx.send(());
        }
    });
    Ok(rx)
}

fn progress_bar(steps: u64, interval: Duration) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(steps);
    let style = indicatif::ProgressStyle::with_template(
        "observing {bar:30} {pos}/{len} intervals of {msg} (Ctrl-C stops and reports)",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(humantime::format_duration(interval).to_string());
    bar
}
