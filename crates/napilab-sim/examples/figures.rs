//! Print the twin's values for the published figures that the validation tests check
//! (the tests assert tolerances; this prints the numbers for docs/sim.md).
//!
//!   cargo run --release -p napilab-sim --example figures

use napilab_sim::{Profile, SimConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let router = Profile::builtin("router-e3-1230-ixgbe")?;
    let sq = |pps: f64, ms: f64| -> Result<napilab_sim::SimResult, Box<dyn std::error::Error>> {
        let mut c = SimConfig::from_toml_str(
            include_str!("../scenarios/router-sq.toml"),
            "scenarios/router-sq.toml",
        )?;
        c.traffic.rate_pps = pps;
        c.measurement.duration_ms = ms;
        Ok(napilab_sim::run(&c, &router, 1))
    };
    println!("router SQ (domain.md 5.2), 500 ms per point, seed 1");
    let r = sq(2_200_000.0, 500.0)?;
    println!(
        "  max forwarding: {:.3} Mpps (published about 1.75)",
        r.model.totals.forwarded_pps / 1e6
    );
    let mut c = SimConfig::from_toml_str(
        include_str!("../scenarios/router-sq.toml"),
        "scenarios/router-sq.toml",
    )?;
    c.measurement.duration_ms = 200.0;
    let (mt, points) = napilab_sim::max_throughput(&c, &router, 1, 0.001, 1.0e6, 2.5e6, 0.005);
    println!(
        "  RFC 2544 search (loss <= 0.1%, 200 ms probes): {:.3} Mpps after {} probes",
        mt.pps / 1e6,
        points.len()
    );
    let r = sq(1_500_000.0, 500.0)?;
    let c = &r.model.totals.cpus[0];
    println!(
        "  at 1.5 Mpps: mean latency {:.2} us (published 11.7), RX IRQs {:.0}/s (published about 32k), loss {:.0} pps",
        r.model.classes[0].latency.mean_us,
        c.rx_irqs_per_s,
        r.model.totals.rx_dropped_pps
    );
    for pps in [1.8e6, 2.0e6] {
        let r = sq(pps, 500.0)?;
        println!(
            "  at {:.2} Mpps: RX IRQs {:.0}/s (published: towards zero)",
            pps / 1e6,
            r.model.totals.cpus[0].rx_irqs_per_s
        );
    }
    print!("  CPU busy (true):");
    for pps in [0.1e6, 0.2e6, 0.5e6, 0.7e6, 1.0e6, 1.5e6, 1.7e6] {
        print!(
            " {:.1}M {:.2}",
            pps / 1e6,
            sq(pps, 500.0)?.model.totals.cpus[0].busy
        );
    }
    println!();
    print!("  mean latency us:");
    for pps in [1.5e6, 1.6e6, 1.65e6, 1.7e6, 1.75e6] {
        print!(
            " {:.2}M {:.1}",
            pps / 1e6,
            sq(pps, 500.0)?.model.classes[0].latency.mean_us
        );
    }
    println!();
    let r = sq(200_000.0, 500.0)?;
    let c = &r.model.totals.cpus[0];
    println!(
        "  misreading 3 at 0.2 Mpps: true softirq {:.3} (busy {:.3}), /proc/stat softirq {:.3} (NOHZ idle, HZ 250)",
        c.softirq_inline + c.ksoftirqd,
        c.busy,
        c.tick_softirq
    );

    let ap = Profile::builtin("ap-cortex-a72-bcmgenet")?;
    let mut c = SimConfig::from_toml_str(
        include_str!("../scenarios/ap-e2w-single-core.toml"),
        "scenarios/ap-e2w-single-core.toml",
    )?;
    c.measurement.duration_ms = 5000.0;
    let r = napilab_sim::run(&c, &ap, 1);
    let t = &r.model.totals;
    let c = &t.cpus[0];
    println!("access point E2W single-core at 100 Mbit/s (domain.md 5.1), 5 s");
    println!(
        "  packets/s {:.0} (published 8,300), Ethernet RX IRQs/s {:.0} (4,650), RX softirqs/s {:.0} (6,350), WiFi TX IRQs/s {:.0} (2,000)",
        t.forwarded_pps, c.rx_irqs_per_s, c.net_rx_softirqs_per_s, c.tx_completion_irqs_per_s
    );
    Ok(())
}
