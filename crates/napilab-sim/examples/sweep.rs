//! Print the twin's curves for a scenario over a range of offered loads.
//!
//! cargo run --release -p napilab-sim --example sweep -- SCENARIO.toml PROFILE.toml [pps...]

use napilab_sim::{Profile, SimConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: sweep SCENARIO.toml PROFILE.toml [pps...]".into());
    }
    let mut cfg = SimConfig::from_file(std::path::Path::new(&args[1]))?;
    let profile = Profile::from_file(std::path::Path::new(&args[2]))?;
    let rates: Vec<f64> = if args.len() > 3 {
        args[3..]
            .iter()
            .map(|a| a.parse())
            .collect::<Result<_, _>>()?
    } else {
        (1..=20).map(|i| i as f64 * 100_000.0).collect()
    };
    println!("offered_pps forwarded_pps drop_pps busy tick_softirq tick_idle rx_irq/s tx_irq/s rx_softirq/s pkts/poll squeeze/s ksoftirqd mean_us p99_us p999_us");
    for r in rates {
        cfg.traffic.rate_pps = r;
        let res = napilab_sim::run(&cfg, &profile, 1);
        let t = &res.model.totals;
        let c = &t.cpus[0];
        let l = &res.model.classes[0].latency;
        println!(
            "{:>9.0} {:>9.0} {:>8.0} {:.3} {:.3} {:.3} {:>8.0} {:>8.0} {:>8.0} {:>6.1} {:>6.0} {:.3} {:>8.2} {:>8.2} {:>8.2}",
            t.offered_pps, t.forwarded_pps, t.rx_dropped_pps + t.tx_dropped_pps, c.busy, c.tick_softirq, c.tick_idle,
            c.rx_irqs_per_s, c.tx_completion_irqs_per_s, c.net_rx_softirqs_per_s, c.packets_per_poll, c.time_squeeze_per_s, c.ksoftirqd,
            l.mean_us, l.p99_us, l.p999_us
        );
    }
    Ok(())
}
