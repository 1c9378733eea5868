//! The sampler's floor: the reads of one `napilab observe` sample and nothing else.
//!
//!     cargo run --release -p napilab-probe --example sample-reads -- SECONDS [INTERVAL_MS=1000]
//!
//! Samples like `observe --for SECONDS --interval INTERVAL_MS`: one `Sampler::sample_into()`
//! at the start and one per interval after it (SECONDS / interval + 1 in all), the
//! thread rescan every 10 s as observe does, sleeping in between. No parsing, no
//! deriving, no output: what is left is what this kernel charges for reading exactly
//! what napilab reads (its /proc files and netlink dumps, by napilab's own code), plus
//! one wake-up per sample. bench/sampling-cost.sh measures it beside napilab and sar
//! as "reads only (the floor)".

use std::path::Path;
use std::time::{Duration, Instant};

use napilab_probe::sample::Sampler;

/// As `observe`'s rescan of the packet threads.
const THREAD_RESCAN: Duration = Duration::from_secs(10);

fn usage() -> ! {
    eprintln!("usage: sample-reads SECONDS [INTERVAL_MS=1000] (SECONDS >= interval)");
    std::process::exit(2);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| usage());
    let interval_ms: u64 = match args.next() {
        Some(a) => a.parse().unwrap_or_else(|_| usage()),
        None => 1000,
    };
    if interval_ms == 0 || seconds * 1000 < interval_ms {
        usage();
    }
    let interval = Duration::from_millis(interval_ms);
    let steps = seconds * 1000 / interval_ms;
    let mut sampler = Sampler::new(Path::new("/"), true);
    let start = Instant::now();
    let mut last_rescan = start;
    // As observe does: one RawSample refilled each step.
    let mut raw = napilab_probe::sample::RawSample::default();
    for step in 0..=steps {
        let deadline = start + interval * u32::try_from(step).unwrap_or(u32::MAX);
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        if last_rescan.elapsed() >= THREAD_RESCAN {
            sampler.refresh_threads();
            last_rescan = Instant::now();
        }
        sampler.sample_into(&mut raw);
        std::hint::black_box(&raw);
    }
    for notice in &sampler.notices.0 {
        eprintln!("sample-reads: {}: {}", notice.what, notice.why);
    }
}
