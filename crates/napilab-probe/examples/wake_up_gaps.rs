//! How a woken thread's wait depends on how long its CPU was idle before
//! (napilab_probe::wake_up_latency at several idle gaps):
//!
//!     cargo run --release -p napilab-probe --example wake_up_gaps -- [CPU=1] [WAKE_UPS=200] [IDLE_US,...]

use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let cpu: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    let gaps: Vec<u64> = args
        .next()
        .map(|s| s.split(',').filter_map(|g| g.parse().ok()).collect())
        .unwrap_or_else(|| vec![2, 5, 10, 20, 50, 100, 200, 500, 2000]);
    for idle_us in gaps {
        let r = vec![napilab_probe::wake_up_latency::measure(
            cpu,
            1 - cpu.min(1),
            n,
            Duration::from_micros(idle_us),
        )];
        match r.into_iter().next() {
            Some(Ok(w)) => println!(
                "cpu {cpu}, idle {idle_us:>5} us: median {:.1} us, p10 {:.1}, p90 {:.1}, p99 {:.1}, p99.9 {:.1}, longest {:.1}; over 1 ms: {} of {}",
                w.median_ns().unwrap_or(f64::NAN) / 1e3,
                w.quantile_ns(0.1).unwrap_or(f64::NAN) / 1e3,
                w.quantile_ns(0.9).unwrap_or(f64::NAN) / 1e3,
                w.quantile_ns(0.99).unwrap_or(f64::NAN) / 1e3,
                w.quantile_ns(0.999).unwrap_or(f64::NAN) / 1e3,
                w.delays_ns.iter().copied().fold(0.0, f64::max) / 1e3,
                w.delays_ns.iter().filter(|&&d| d > 1e6).count(),
                w.delays_ns.len()
            ),
            Some(Err(e)) => println!("cpu {cpu}: {e}"),
            None => println!("cpu {cpu}: nothing measured"),
        }
    }
}
