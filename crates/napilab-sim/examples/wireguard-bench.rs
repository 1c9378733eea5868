//! Twin speed with 1,000 NAPI instances on 18 CPUs (docs/results/sim.md): the WireGuard study's
//! server at 1,000 clients in each NAPI context, events per second of wall time and
//! wall seconds per simulated second, measured side by side in one run.
//!
//! cargo run --release -p napilab-sim --example wireguard-bench -- [simulated_ms]

use napilab_sim::wireguard::{config, Context};
use napilab_sim::Profile;

fn main() {
    let simulated_ms: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(500.0);
    let profile = match Profile::builtin("wg-xeon-gold-5220") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    println!(
        "1,000 peers (NAPI instances), 18 CPUs, {simulated_ms} ms simulated after 50 ms warm-up, seed 1"
    );
    println!("context          events      wall s   events/s     wall s per simulated s");
    for ctx in Context::ALL {
        let cfg = config(1000, ctx, simulated_ms, 50.0);
        let simulated_s = (simulated_ms + 50.0) / 1e3;
        let t0 = std::time::Instant::now();
        let r = napilab_sim::run(&cfg, &profile, 1);
        let wall = t0.elapsed().as_secs_f64();
        let events = r.model.events;
        println!(
            "{:<16} {:>10} {:>8.2} {:>12.0} {:>10.2}",
            ctx.name(),
            events,
            wall,
            events as f64 / wall,
            wall / simulated_s
        );
    }
}
