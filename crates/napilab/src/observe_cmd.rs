//! `napilab observe`: live sampling, recording and replay.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use napilab_core::{Observation, OriginKind};
use napilab_probe::observe::{describe_host, replay, wait_until, Analysis};
use napilab_probe::record::RecordingWriter;
use napilab_probe::sample::Sampler;

use crate::render;

pub struct Options {
    pub duration: Duration,
    pub interval: Duration,
    pub json: bool,
    pub record: Option<PathBuf>,
    pub replay: Option<PathBuf>,
    pub root: Option<PathBuf>,
    pub show_map: bool,
}

/// How often the process list is rescanned for new ksoftirqd/napi threads.
const THREAD_RESCAN: Duration = Duration::from_secs(10);

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
        println!("{}", serde_json::to_string_pretty(&observation)?);
    } else {
        print!("{}", render::observation(&observation, options.show_map));
    }
    Ok(())
}

fn observe_live(options: &Options) -> Result<Observation> {
    if options.interval < Duration::from_millis(100) {
        bail!(
            "--interval {:?} is too short: use 100ms or more",
            options.interval
        );
    }
    if options.duration < options.interval {
        bail!(
            "--for {} is shorter than --interval {}: observe for at least one interval",
            humantime::format_duration(options.duration),
            humantime::format_duration(options.interval)
        );
    }
    let root = options.root.as_deref().unwrap_or(Path::new("/"));
    if !root.join("proc/stat").exists() {
        bail!(
            "{} has no proc/stat: --root must name a directory holding proc/ and sys/",
            root.display()
        );
    }
    let use_netlink = options.root.is_none();
    let stop = stop_on_signals()?;
    let header = describe_host(root, use_netlink);
    let mut writer = match &options.record {
        Some(path) => Some(RecordingWriter::create(path, &header).with_context(|| {
            format!(
                "cannot record to {}: choose a writable path",
                path.display()
            )
        })?),
        None => None,
    };
    let mut sampler = Sampler::new(root, use_netlink);
    let mut analysis = Analysis::new(header);
    let steps = (options.duration.as_nanos() / options.interval.as_nanos()).max(1) as u64;
    let progress = progress_bar(steps, options.interval);
    let start = Instant::now();
    let mut last_rescan = start;
    for step in 0..=steps {
        let deadline = start + options.interval * u32::try_from(step).unwrap_or(u32::MAX);
        if wait_until(deadline, &stop) {
            eprintln!(
                "napilab: interrupted: reporting the {} complete interval(s)",
                analysis.intervals().len()
            );
            break;
        }
        if last_rescan.elapsed() >= THREAD_RESCAN {
            sampler.refresh_threads();
            last_rescan = Instant::now();
        }
        let raw = sampler.sample();
        if let Some(w) = writer.as_mut() {
            w.append(&raw).context("cannot write the recording")?;
        }
        analysis.push(&raw);
        if step > 0 {
            progress.inc(1);
        }
    }
    progress.finish_and_clear();
    analysis.merge_notices(&sampler.notices);
    if let Some(path) = &options.record {
        eprintln!(
            "napilab: recorded to {} (replay with `napilab observe --replay {}`)",
            path.display(),
            path.display()
        );
    }
    Ok(analysis.finish(OriginKind::Live))
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
