//! Print the twin's values for the published figures that the validation tests check
//! (the tests assert tolerances; this prints the numbers for docs/results/sim.md).
//!
//!   cargo run --release -p napilab-sim --example figures

use napilab_sim::{Profile, SimConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let router = Profile::builtin("router-e3-1230-ixgbe")?;
    let sq = |pps: f64, ms: f64| -> Result<napilab_sim::SimResult, Box<dyn std::error::Error>> {
        let mut c = SimConfig::from_toml_str(
            include_str!("../tests/fixtures/legacy/router-sq.toml"),
            "scenarios/router-sq.toml",
        )?;
        c.traffic.rate_pps = pps;
        c.measurement.duration_ms = ms;
        Ok(napilab_sim::run(&c, &router, 1))
    };
    println!("router SQ (docs/studies.md#ingress-qos-study), 500 ms per point, seed 1");
    let r = sq(2_200_000.0, 500.0)?;
    println!(
        "  max forwarding: {:.3} Mpps (published about 1.75)",
        r.model.totals.forwarded_pps / 1e6
    );
    let mut c = SimConfig::from_toml_str(
        include_str!("../tests/fixtures/legacy/router-sq.toml"),
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
    let cycles = |r: &napilab_sim::SimResult, cpu: usize| {
        // "RX SoftIRQ" stage (docs/studies.md AP-5): __do_softirq + net_rx_action
        // minus the poll, i.e. the per-run cost times the NET_RX runs on the Ethernet core.
        r.model.totals.cpus[cpu].net_rx_softirqs_per_s * ap.fixed_cycles.softirq / 1e6
    };
    println!("access point E2W (docs/studies.md#ap-study), 5 s per point, seed 1");
    for (name, toml, eth_cpu) in [
        (
            "single-core",
            include_str!("../tests/fixtures/legacy/ap-e2w-single-core.toml"),
            0usize,
        ),
        (
            "dual-core",
            include_str!("../tests/fixtures/legacy/ap-e2w-dual-core.toml"),
            1usize,
        ),
    ] {
        let mut c = SimConfig::from_toml_str(toml, name)?;
        c.measurement.duration_ms = 5000.0;
        for (mbit, pps) in [(100, 8_300.0), (500, 41_500.0)] {
            c.traffic.rate_pps = pps;
            let r = napilab_sim::run(&c, &ap, 1);
            let t = &r.model.totals;
            let eth = &t.cpus[eth_cpu];
            let wifi_irqs: f64 = t.cpus.iter().map(|x| x.tx_completion_irqs_per_s).sum();
            let rx_softirqs: f64 = t.cpus.iter().map(|x| x.net_rx_softirqs_per_s).sum();
            println!(
                "  {name} {mbit} Mbit/s: packets/s {:.0}, Ethernet RX IRQs/s {:.0}, RX softirqs/s {:.0} (all cores), WiFi TX IRQs/s {:.0}, busy {}, RX SoftIRQ stage {:.1} M cycles/s on the Ethernet core",
                t.forwarded_pps,
                eth.rx_irqs_per_s,
                rx_softirqs,
                wifi_irqs,
                t.cpus
                    .iter()
                    .map(|x| format!("cpu{} {:.3}", x.cpu, x.busy))
                    .collect::<Vec<_>>()
                    .join(" "),
                cycles(&r, eth_cpu)
            );
        }
        c.measurement.duration_ms = 1000.0;
        let (mt, points) =
            napilab_sim::max_throughput(&c, &ap, 1, 0.001, 10_000.0, 200_000.0, 0.005);
        println!(
            "  {name}: predicted maximum (loss <= 0.1%, 1 s probes) {:.0} packets/s = {:.0} Mbit/s of 1,506-byte packets ({} probes, {})",
            mt.pps,
            mt.pps * 1506.0 * 8.0 / 1e6,
            points.len(),
            mt.stopped
        );
        // The same search with an unconstrained egress link: where the CPU gives out.
        c.egress.link_mbps = 100_000.0;
        let (mt, points) =
            napilab_sim::max_throughput(&c, &ap, 1, 0.001, 10_000.0, 400_000.0, 0.005);
        println!(
            "  {name}: CPU-bound maximum (link unconstrained) {:.0} packets/s = {:.0} Mbit/s ({} probes, {})",
            mt.pps,
            mt.pps * 1506.0 * 8.0 / 1e6,
            points.len(),
            mt.stopped
        );
    }
    let w2e = Profile::from_toml_str(
        include_str!("../profiles/ap-cortex-a72-w2e.toml"),
        "profiles/ap-cortex-a72-w2e.toml",
    )?;
    println!("access point W2E (docs/studies.md#ap-study; profile and coalescing partly assumed), seed 1");
    for (name, toml) in [
        (
            "single-core",
            include_str!("../tests/fixtures/legacy/ap-w2e-single-core.toml"),
        ),
        (
            "dual-core",
            include_str!("../tests/fixtures/legacy/ap-w2e-dual-core.toml"),
        ),
    ] {
        let mut c = SimConfig::from_toml_str(toml, name)?;
        c.measurement.duration_ms = 5000.0;
        let r = napilab_sim::run(&c, &w2e, 1);
        let t = &r.model.totals;
        println!(
            "  {name} 500 Mbit/s: packets/s {:.0}, busy {}, NET_TX runs/s {:.0} (TX SoftIRQ stage {:.1} M cycles/s; published 23 M)",
            t.forwarded_pps,
            t.cpus
                .iter()
                .map(|x| format!("cpu{} {:.3}", x.cpu, x.busy))
                .collect::<Vec<_>>()
                .join(" "),
            t.cpus.iter().map(|x| x.net_tx_softirqs_per_s).sum::<f64>(),
            t.cpus.iter().map(|x| x.net_tx_softirqs_per_s).sum::<f64>() * w2e.fixed_cycles.tx_softirq / 1e6
        );
        c.measurement.duration_ms = 1000.0;
        let (mt, points) =
            napilab_sim::max_throughput(&c, &w2e, 1, 0.001, 10_000.0, 200_000.0, 0.005);
        println!(
            "  {name}: predicted maximum (loss <= 0.1%) {:.0} packets/s = {:.0} Mbit/s ({} probes, {})",
            mt.pps,
            mt.pps * 1506.0 * 8.0 / 1e6,
            points.len(),
            mt.stopped
        );
        c.egress.link_mbps = 100_000.0;
        let (mt, points) =
            napilab_sim::max_throughput(&c, &w2e, 1, 0.001, 10_000.0, 400_000.0, 0.005);
        println!(
            "  {name}: CPU-bound maximum (link unconstrained) {:.0} packets/s = {:.0} Mbit/s ({} probes, {})",
            mt.pps,
            mt.pps * 1506.0 * 8.0 / 1e6,
            points.len(),
            mt.stopped
        );
    }
    println!("  published (docs/studies.md AP-1 to AP-5): 100 Mbit/s single-core 8,300 packets/s, 4,650 RX IRQs/s, 6,350 RX softirqs/s, 2,000 WiFi TX IRQs/s; 500 Mbit/s dual-core RX SoftIRQ stage 35 M cycles/s");
    Ok(())
}
