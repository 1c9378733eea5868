//! The kernel-VPN study's baseline in the twin (docs/studies.md#wireguard-study, WG-1 to
//! WG-3, the paper's baseline evaluation; the paper's section and figure numbers are not
//! recorded in docs/studies.md). The profile `wg-xeon-gold-5220` was calibrated on
//! these figures only; the tolerances say how closely it reproduces them.

use napilab_sim::wireguard::{config, figures, Context, Figures};
use napilab_sim::{Profile, SimConfig};

fn profile() -> Profile {
    Profile::builtin("wg-xeon-gold-5220").expect("shipped profile parses")
}

fn run(clients: u32, context: Context) -> Figures {
    let cfg = config(clients, context, 150.0, 50.0);
    figures(&napilab_sim::run(&cfg, &profile(), 1))
}

/// WG-1: receive throughput near 11.7 Gbit/s at 500 clients and about 4.5 at 1,000.
#[test]
fn baseline_throughput_peaks_near_500_clients_and_collapses_at_1000() {
    let at_500 = run(500, Context::Softirq);
    let at_1000 = run(1000, Context::Softirq);
    eprintln!(
        "500 clients: {:.2} Gbit/s, 1,000 clients: {:.2} Gbit/s",
        at_500.throughput_gbps, at_1000.throughput_gbps
    );
    // docs/studies.md#wg-1: 11.7 (twin 12.5: every packet offered at 500 clients is
    // received; the published 6% loss there is not reproduced) and 4.5 Gbit/s.
    assert!(
        (at_500.throughput_gbps / 11.7 - 1.0).abs() < 0.10,
        "500 clients: {:.2} Gbit/s vs 11.7",
        at_500.throughput_gbps
    );
    assert!(
        (at_1000.throughput_gbps / 4.5 - 1.0).abs() < 0.20,
        "1,000 clients: {:.2} Gbit/s vs 4.5",
        at_1000.throughput_gbps
    );
    // Below the knee nothing is lost.
    let at_100 = run(100, Context::Softirq);
    assert!(at_100.throughput_gbps > 0.99 * at_100.offered_gbps);
}

/// WG-2 and WG-3 at 1,000 clients: one core at about 94% softirq, the others near
/// 20%; about 5 packets per poll on the hot core against about 1 elsewhere.
#[test]
fn baseline_piles_the_polls_onto_one_core_with_big_batches() {
    let f = run(1000, Context::Softirq);
    eprintln!(
        "hot cpu{} softirq {:.2}, others {:.2}; packets per poll {:.2} vs {:.2}",
        f.hot_cpu,
        f.hot_softirq,
        f.others_softirq,
        f.hot_packets_per_poll,
        f.others_packets_per_poll
    );
    // docs/studies.md#wg-2: 0.94 and ~0.20.
    assert!(
        (f.hot_softirq - 0.94).abs() < 0.10,
        "hot core {:.2}",
        f.hot_softirq
    );
    assert!(
        (f.others_softirq - 0.20).abs() < 0.08,
        "others {:.2}",
        f.others_softirq
    );
    // docs/studies.md#wg-3: ~5 vs ~1. The twin's batches on the hot core are larger
    // (about 9) and the others' about 2 (their NIC polls batch too); the ratio is
    // asserted within a factor of two of the published 5.
    let ratio = f.hot_packets_per_poll / f.others_packets_per_poll;
    assert!(
        f.hot_packets_per_poll > 3.0,
        "{:.2}",
        f.hot_packets_per_poll
    );
    assert!(
        f.others_packets_per_poll < 2.5,
        "{:.2}",
        f.others_packets_per_poll
    );
    assert!((2.5..10.0).contains(&ratio), "ratio {ratio:.2}");
}

/// The shipped scenarios parse and name the four contexts.
#[test]
fn shipped_wireguard_scenarios_parse() {
    for (file, text) in [
        (
            "wg-softirq",
            include_str!("fixtures/legacy/wg-softirq.toml"),
        ),
        (
            "wg-threaded",
            include_str!("fixtures/legacy/wg-threaded.toml"),
        ),
        (
            "wg-threaded-pinned",
            include_str!("fixtures/legacy/wg-threaded-pinned.toml"),
        ),
        (
            "wg-workqueue",
            include_str!("fixtures/legacy/wg-workqueue.toml"),
        ),
    ] {
        let cfg = SimConfig::from_toml_str(text, file).expect("parses");
        let t = cfg.tunnel.expect("has a tunnel");
        assert_eq!(t.peers, 1000, "{file}");
    }
}

/// Bad tunnel input is refused with the field named.
#[test]
fn bad_tunnel_fields_are_named() {
    let base = include_str!("fixtures/legacy/wg-threaded.toml");
    let bad = base.replace("peers = 1000", "peers = 0");
    let e = SimConfig::from_toml_str(&bad, "x.toml").expect_err("0 peers");
    assert_eq!(e.field, "tunnel.peers");
    let bad = include_str!("fixtures/legacy/wg-softirq.toml")
        .replace("napi = \"softirq\"", "napi = \"softirq\"\npinned = true");
    let e = SimConfig::from_toml_str(&bad, "x.toml").expect_err("pinned softirq");
    assert_eq!(e.field, "tunnel.pinned");
}

fn run_shared_ring(clients: u32, context: Context) -> Figures {
    let mut cfg = config(clients, context, 150.0, 50.0);
    if let Some(t) = cfg.tunnel.as_mut() {
        t.decrypt_ring = napilab_sim::config::DecryptRing::Shared;
    }
    figures(&napilab_sim::run(&cfg, &profile(), 1))
}

/// A known gap, pinned so that it is not forgotten (docs/sim.md "The WireGuard receive
/// pipeline", "The decryption ring"): with the kernel's shared decryption ring (every
/// worker drains `wg->decrypt_queue`) and the costs calibrated on WG-1..3, the twin
/// does NOT reproduce WG-1's collapse at 1,000 clients: the idle workers take the hot
/// CPU's decryptions, so no packets wait behind its softirq. The collapse the default
/// per-CPU queues show therefore rests on an approximation; the kernel mechanism that
/// makes one core hot is not yet in the model. If a change makes this test fail because
/// the shared ring now collapses, the gap is closed: make `shared` the default.
#[test]
fn shared_decryption_ring_does_not_reproduce_the_collapse() {
    let f = run_shared_ring(1000, Context::Softirq);
    assert!(
        f.throughput_gbps > 15.0,
        "shared ring at 1,000 clients: {:.2} Gbit/s (published ~4.5)",
        f.throughput_gbps
    );
    // No core stands out: the hot core's softirq share is within 1.5x of the others'.
    assert!(
        f.hot_softirq < 1.5 * f.others_softirq.max(0.01),
        "hot {:.2} others {:.2}",
        f.hot_softirq,
        f.others_softirq
    );
}

/// WG-4 (qualitative): NAPI pollers in a workqueue remove the inversion and balance the
/// load. With the kernel's shared ring the twin agrees: no hot softirq core and the
/// work spread over every core; with the per-CPU approximation it does not (docs/sim.md).
#[test]
fn workqueue_napi_balances_the_load_with_the_shared_ring() {
    let f = run_shared_ring(1000, Context::Workqueue);
    assert!(
        f.throughput_gbps > 15.0,
        "workqueue, shared ring: {:.2} Gbit/s",
        f.throughput_gbps
    );
    assert!(f.others_busy > 0.8, "others busy {:.2}", f.others_busy);
}
