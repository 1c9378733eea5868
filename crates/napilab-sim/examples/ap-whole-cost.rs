//! The access point's whole CPU cost on the twin against the published totals
//! (docs/studies.md#ap-10, #ap-11, #ap-12): per core configuration and rate, each
//! core's true busy share (= its cycles / 1.5 GHz), the tick view (what mpstat shows)
//! and the event rates, for `MAX_SOFTIRQ_RESTART` 10 and 1.
//!
//! cargo run --release -p napilab-sim --example ap-whole-cost -- [PROFILE.toml] [ms] [w2e]

use napilab_sim::{Profile, SimConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let profile = match args.get(1) {
        Some(p) => Profile::from_file(std::path::Path::new(p))?,
        None => Profile::builtin("ap-cortex-a72-bcmgenet")?,
    };
    let ms: f64 = args
        .get(2)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(5000.0);
    // The studies' AP configurations as twin files (the same model as scenarios/studies/
    // ap-e2w.toml on its profile: tests/study_migration.rs).
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/legacy/");
    println!("config mbit restart | cpu busy tick_busy(mpstat) tick_softirq tick_system ksoftirqd ksoftirqd/softirq hardirqs/s rx_irq/s tx_irq/s net_rx/s pkts/poll | ...");
    // A third argument `w2e` runs the W2E configurations instead (with their profile,
    // ap-cortex-a72-w2e.toml, as the first argument).
    let files = match args.get(3).map(String::as_str) {
        Some("w2e") => ["ap-w2e-single-core.toml", "ap-w2e-dual-core.toml"],
        _ => ["ap-e2w-single-core.toml", "ap-e2w-dual-core.toml"],
    };
    let mbits: &[f64] = match args.get(3).map(String::as_str) {
        Some("w2e") => &[100.0, 500.0, 900.0, 1000.0],
        _ => &[100.0, 500.0],
    };
    for file in files {
        let path = format!("{dir}{file}");
        let base = SimConfig::from_file(std::path::Path::new(&path))?;
        for &mbit in mbits {
            for restart in [10, 1] {
                let mut cfg = base.clone();
                cfg.traffic.rate_pps = 8300.0 * mbit / 100.0;
                cfg.measurement.duration_ms = ms;
                cfg.settings.max_softirq_restart = restart;
                let r = napilab_sim::run(&cfg, &profile, 1);
                let t = &r.model.totals;
                let mut line = format!(
                    "{:<20} {:>4} {:>2} |",
                    file.trim_end_matches(".toml"),
                    mbit,
                    restart
                );
                for c in &t.cpus {
                    let softirq = c.softirq_inline + c.ksoftirqd;
                    let in_ksoftirqd = if softirq > 0.0 {
                        c.ksoftirqd / softirq
                    } else {
                        0.0
                    };
                    line += &format!(
                        " cpu{} {:.4} {:.4} {:.4} {:.4} {:.4} {:.3} {:>6.0} {:>6.0} {:>6.0} {:>6.0} {:>5.2} |",
                        c.cpu,
                        c.busy,
                        1.0 - c.tick_idle,
                        c.tick_softirq,
                        c.tick_system,
                        c.ksoftirqd,
                        in_ksoftirqd,
                        c.hardirqs_per_s,
                        c.rx_irqs_per_s,
                        c.tx_completion_irqs_per_s,
                        c.net_rx_softirqs_per_s,
                        c.packets_per_poll
                    );
                }
                println!("{line}");
            }
        }
    }
    Ok(())
}
