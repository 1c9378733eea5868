//! The ingress-QoS study's strategies on the twin (docs/studies.md#ingress-qos-study,
//! section V): per strategy and RT share (10-90%), the maximum forwarding rate (RFC
//! 2544 search, loss <= 0.1%) and, at the offered loads given, the RX IRQ rate and the
//! RT and BE mean latency.
//!
//! cargo run --release -p napilab-sim --example ingress-qos -- [ms per point] [pps...]

use napilab_sim::ingress_qos::Strategy;
use napilab_sim::Profile;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let ms: f64 = args.get(1).map(|a| a.parse()).transpose()?.unwrap_or(200.0);
    let loads: Vec<f64> = if args.len() > 2 {
        args[2..]
            .iter()
            .map(|a| a.parse())
            .collect::<Result<_, _>>()?
    } else {
        vec![1.0e6, 1.5e6, 1.7e6]
    };
    let profile = Profile::builtin("router-e3-1230-ixgbe")?;
    println!("strategy rt_share max_mpps | load_mpps loss rx_irq/s rt_mean_us be_mean_us rt_p99_us be_p99_us ...");
    for s in Strategy::ALL {
        for share in [0.1, 0.3, 0.5, 0.7, 0.9] {
            let mut cfg = s.config(1.0, share);
            cfg.measurement.duration_ms = ms.min(100.0);
            cfg.measurement.warmup_ms = 10.0;
            let (mt, _) =
                napilab_sim::max_throughput(&cfg, &profile, 1, 0.001, 1.0e6, 2.5e6, 0.005);
            let mut line = format!(
                "{:<6} {:>4.0}% {:>6.3} |",
                s.name(),
                share * 100.0,
                mt.pps / 1e6
            );
            for &pps in &loads {
                cfg.traffic.rate_pps = pps;
                cfg.measurement.duration_ms = ms;
                let r = napilab_sim::run(&cfg, &profile, 1);
                let t = &r.model.totals;
                let loss = (t.rx_dropped_pps + t.tx_dropped_pps) / t.offered_pps.max(1.0);
                let lat = |n: &str| {
                    r.model
                        .class(n)
                        .map(|c| (c.latency.mean_us, c.latency.p99_us))
                        .unwrap_or((f64::NAN, f64::NAN))
                };
                let (rt, be) = (lat("rt"), lat("be"));
                line += &format!(
                    " {:.2} {:.4} {:>6.0} {:>6.2} {:>7.2} {:>6.2} {:>7.2} |",
                    pps / 1e6,
                    loss,
                    t.cpus[0].rx_irqs_per_s,
                    rt.0,
                    be.0,
                    rt.1,
                    be.1
                );
            }
            println!("{line}");
        }
    }
    Ok(())
}
