//! A blocking run of known length on a scoped thread, with an elapsed-time progress bar
//! unless the output is JSON (the load generators of `kv-load` and `tunnel-peers`), and
//! the wait of a server that runs until stopped (`kv-server`, `tunnel-endpoint`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::anyhow;

/// A load generator's run from a command: [`with_progress`], then its result printed by
/// `print` (JSON or text), then an [`Interrupted`](crate::Interrupted) error saying
/// `stopped_early` when `stop` cut the window short, so the exit status says the
/// numbers cover less than asked.
pub fn run_and_print<T: Send>(
    label: &str,
    stopped_early: &'static str,
    total: Duration,
    json: bool,
    stop: &AtomicBool,
    work: impl FnOnce() -> Result<T, String> + Send,
    print: impl FnOnce(&T, bool) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let result = with_progress(label, total, json, work).map_err(|e| anyhow!("{label}: {e}"))?;
    print(&result, json)?;
    if stop.load(Ordering::Relaxed) {
        return Err(crate::Interrupted(stopped_early).into());
    }
    Ok(())
}

/// Runs `work` on a scoped thread and draws a bar labelled `label` over `total` while it
/// runs (none when `quiet`); a panic of `work` becomes an error naming `label`.
pub fn with_progress<T: Send>(
    label: &str,
    total: Duration,
    quiet: bool,
    work: impl FnOnce() -> Result<T, String> + Send,
) -> Result<T, String> {
    let bar = (!quiet).then(|| {
        let b = indicatif::ProgressBar::new(total.as_millis() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {elapsed}/{duration}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b.set_message(label.to_string());
        b
    });
    let result = std::thread::scope(|s| {
        let h = s.spawn(work);
        let t0 = Instant::now();
        while !h.is_finished() {
            if let Some(b) = &bar {
                b.set_position(t0.elapsed().as_millis() as u64);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        h.join()
            .unwrap_or_else(|_| Err(format!("{label} panicked")))
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    result
}

/// Waits until `stop` is set or `duration` (if any) has passed, calling `tick` every
/// 50 ms: how a server command (`kv-server`, `tunnel-endpoint`) runs until Ctrl-C.
pub fn serve_until(stop: &AtomicBool, duration: Option<Duration>, mut tick: impl FnMut()) {
    let deadline = duration.map(|d| Instant::now() + d);
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        std::thread::sleep(Duration::from_millis(50));
        tick();
    }
}
