//! Stretch goal: the WiFi access point of domain.md 5.1, E2W single-core at 100 Mbit/s.
//! Published: about 8,300 packets/s, 4,650 Ethernet RX IRQs/s, 6,350 RX softirqs/s and
//! 2,000 WiFi TX IRQs/s (the softirq excess is TX completion work: misreading 2).
//! Checked within 20%. Two of the four (RX and TX IRQ rates) were used to set the
//! scenario's coalescing (rx_usecs 70, tx_frames 4), so they check the calibration; the
//! packet rate and the RX softirq rate then follow from the model.

mod common;
use common::rel;
use napilab_sim::{Profile, SimConfig};

#[test]
fn e2w_single_core_rates_at_100_mbit() {
    let mut cfg = SimConfig::from_toml_str(
        include_str!("../scenarios/ap-e2w-single-core.toml"),
        "scenarios/ap-e2w-single-core.toml",
    )
    .expect("shipped scenario parses");
    cfg.measurement.duration_ms = 1000.0;
    let p = Profile::builtin("ap-cortex-a72-bcmgenet").expect("shipped profile parses");
    let r = napilab_sim::run(&cfg, &p, 1);
    let t = &r.model.totals;
    let c = &t.cpus[0];
    let checks = [
        ("packets/s", t.forwarded_pps, 8_300.0),
        ("Ethernet RX IRQs/s", c.rx_irqs_per_s, 4_650.0),
        ("RX softirqs/s", c.net_rx_softirqs_per_s, 6_350.0),
        ("WiFi TX IRQs/s", c.tx_completion_irqs_per_s, 2_000.0),
    ];
    for (what, twin, published) in checks {
        assert!(
            rel(twin, published) < 0.20,
            "{what}: twin {twin:.0}, published {published:.0}"
        );
    }
    // E2W has no qdisc: everything stays on the one core, nothing is queued.
    assert_eq!(t.tx_dropped_pps, 0.0);
    assert!(c.net_rx_softirqs_per_s > c.rx_irqs_per_s);
}
