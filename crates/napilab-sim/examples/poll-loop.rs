//! The single-queue poll loop of docs/sim.md "Threaded busy polling": the twin's p50,
//! p99 and CPU for interrupt-driven delivery, application busy polling and threaded
//! busy polling at a few loads.
//!
//!     cargo run --release -p napilab-sim --example poll-loop [-- --profile NAME] [-- --app-cpu N]

use napilab_sim::poll_loop::{config, Delivery};
use napilab_sim::Profile;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let name = arg("--profile").unwrap_or_else(|| "router-e3-1230-ixgbe".into());
    let profile = match Profile::builtin(&name) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let app_cpu: Option<u32> = arg("--app-cpu").and_then(|v| v.parse().ok());
    println!("poll loop on profile {name}: 1 RX queue (IRQ on CPU 0), receiver on CPU {}, 64-byte Poisson arrivals, 200 ms after 20 ms warm-up, seed 1", app_cpu.unwrap_or(1));
    println!(
        "{:>9}  {:<22} {:>8} {:>8} {:>8} {:>7} {:>7} {:>10} {:>10}",
        "load pps", "delivery", "served", "p50 us", "p99 us", "cpu0", "cpu1", "rx irq/s", "polls/s"
    );
    for rate in [10_000.0, 100_000.0, 500_000.0] {
        for d in Delivery::ALL {
            let mut cfg = config(d, rate, 200.0);
            if let Some(c) = app_cpu {
                cfg.apps[0].cpu = c;
            }
            let r = match napilab_sim::try_run(&cfg, &profile, 1) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(1);
                }
            };
            let cl = &r.model.classes[0];
            let t = &r.model.totals;
            let polls: f64 = t.cpus.iter().map(|c| c.polls_per_s).sum();
            let irqs: f64 = t.cpus.iter().map(|c| c.rx_irqs_per_s).sum();
            println!(
                "{:>9.0}  {:<22} {:>8.3} {:>8.2} {:>8.2} {:>7.3} {:>7.3} {:>10.0} {:>10.0}",
                rate,
                d.as_str(),
                cl.forwarded as f64 / cl.offered.max(1) as f64,
                cl.latency.p50_us,
                cl.latency.p99_us,
                t.cpus[0].busy,
                t.cpus[1].busy,
                irqs,
                polls
            );
        }
    }
}
