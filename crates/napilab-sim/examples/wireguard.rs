//! The WireGuard study in the twin (docs/sim.md "The WireGuard receive pipeline"):
//! receive throughput, per-core load, packets per poll and latency per NAPI context
//! and client count.
//!
//! cargo run --release -p napilab-sim --example wireguard -- [clients,...] [contexts,...] [duration_ms] [per-cpu|shared]
//! e.g. `-- 100,500,1000 softirq,threaded,threaded-pinned,workqueue 200`; the last
//! argument picks the decryption ring (`tunnel.decrypt_ring`, default per-cpu).

use napilab_sim::config::DecryptRing;
use napilab_sim::wireguard::{config, figures, Context};
use napilab_sim::Profile;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let clients: Vec<u32> = args
        .first()
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 250, 500, 750, 1000]);
    let contexts: Vec<Context> = args
        .get(1)
        .map(|s| {
            s.split(',')
                .filter_map(|x| Context::ALL.into_iter().find(|c| c.name() == x))
                .collect()
        })
        .unwrap_or_else(|| Context::ALL.to_vec());
    let duration: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200.0);
    let ring = match args.get(3).map(String::as_str) {
        None | Some("per-cpu") => DecryptRing::PerCpu,
        Some("shared") => DecryptRing::Shared,
        Some(other) => {
            eprintln!("decryption ring {other:?}: use per-cpu or shared");
            std::process::exit(2);
        }
    };
    let profile = match Profile::builtin("wg-xeon-gold-5220") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    println!(
        "context          clients  offered  rx Gbit/s  hot cpu  hot softirq  others softirq  others busy  pkts/poll hot  others  p99 us   mean us  wall s"
    );
    for &ctx in &contexts {
        for &n in &clients {
            let mut cfg = config(n, ctx, duration, 50.0);
            if let Some(t) = cfg.tunnel.as_mut() {
                t.decrypt_ring = ring;
            }
            let t0 = std::time::Instant::now();
            let r = napilab_sim::run(&cfg, &profile, 1);
            let wall = t0.elapsed().as_secs_f64();
            let f = figures(&r);
            println!(
                "{:<16} {:>7} {:>8.2} {:>10.2} {:>8} {:>12.2} {:>15.2} {:>12.2} {:>14.2} {:>7.2} {:>7.0} {:>9.1} {:>7.1}",
                ctx.name(),
                n,
                f.offered_gbps,
                f.throughput_gbps,
                f.hot_cpu,
                f.hot_softirq,
                f.others_softirq,
                f.others_busy,
                f.hot_packets_per_poll,
                f.others_packets_per_poll,
                f.p99_us,
                f.mean_us,
                wall
            );
            if std::env::var_os("WG_LOSS").is_some() {
                println!("    loss: {:?}", r.model.loss_counters);
                let pct = |v: &[f64]| {
                    v.iter()
                        .map(|x| format!("{:.0}", x * 100.0))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                println!("    busy % per cpu: {}", pct(&f.busy));
                println!("    softirq % per cpu: {}", pct(&f.softirq));
                let ks: Vec<f64> = r.model.totals.cpus.iter().map(|c| c.ksoftirqd).collect();
                let bh: Vec<f64> = r
                    .model
                    .totals
                    .cpus
                    .iter()
                    .map(|c| c.softirq_bh_enable)
                    .collect();
                println!("    ksoftirqd % per cpu: {}", pct(&ks));
                println!("    softirq at bh-enable % per cpu: {}", pct(&bh));
            }
        }
    }
}
