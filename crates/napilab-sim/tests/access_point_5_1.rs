//! The WiFi access point of docs/studies.md#ap-study (Cortex-A72, bcmgenet -> AX210/mac80211,
//! Ethernet-to-WiFi). Published figures: at 100 Mbit/s single-core about 8,300
//! packets/s, 4,650 Ethernet RX IRQs/s, 6,350 RX softirqs/s and 2,000 WiFi TX IRQs/s
//! (the softirq excess is TX completion work: misreading 2), checked within 20%; two
//! of the four (the IRQ rates) set the scenario's coalescing (rx_usecs 70, tx_frames
//! 4), so they check the calibration, and the packet and softirq rates follow. At 500
//! Mbit/s only per-stage cycles per second are published (dual-core), checked below,
//! with the one the twin does not reproduce pinned and explained. Dual-core: the
//! published qualitative findings. The twin's predicted maximum per path (E2W, W2E)
//! and core configuration. W2E runs on its own profile built from the W2E stage
//! figures; its one emergent published figure (TX softirq on the other core) is a
//! pinned deviation, see docs/results/sim.md.

mod common;
use common::rel;
use napilab_sim::{Profile, SimConfig};

#[test]
fn e2w_single_core_rates_at_100_mbit() {
    let mut cfg = SimConfig::from_toml_str(
        include_str!("fixtures/legacy/ap-e2w-single-core.toml"),
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

fn ap(toml: &str, what: &str, pps: f64) -> napilab_sim::SimResult {
    let mut cfg = SimConfig::from_toml_str(toml, what).expect("shipped scenario parses");
    cfg.measurement.duration_ms = 1000.0;
    cfg.traffic.rate_pps = pps;
    let p = Profile::builtin("ap-cortex-a72-bcmgenet").expect("shipped profile parses");
    napilab_sim::run(&cfg, &p, 1)
}

const SINGLE: &str = include_str!("fixtures/legacy/ap-e2w-single-core.toml");
const DUAL: &str = include_str!("fixtures/legacy/ap-e2w-dual-core.toml");

/// Dual-core (docs/studies.md AP-7: WiFi IRQ on core 0, Ethernet IRQ on core 1): "E2W is
/// processed entirely on the Ethernet IRQ core because mac80211 bypasses the qdisc"
/// (core 0 only takes the WiFi TX-completion IRQs and reclaims), and "dual-core costs
/// more ... (more IRQs ...)": with the completions on the other core they are no
/// longer reclaimed in passing by the Ethernet core's polls. At 100 and 500 Mbit/s.
#[test]
fn e2w_dual_core_stays_on_the_ethernet_core_with_more_irqs() {
    for pps in [8_300.0, 41_500.0] {
        let s = ap(SINGLE, "ap-e2w-single-core.toml", pps);
        let d = ap(DUAL, "ap-e2w-dual-core.toml", pps);
        for r in [&s, &d] {
            assert!(
                rel(r.model.totals.forwarded_pps, pps) < 0.02,
                "{pps}: forwarded {}",
                r.model.totals.forwarded_pps
            );
        }
        let (c0, c1) = (&d.model.totals.cpus[0], &d.model.totals.cpus[1]);
        // Published at 500 Mbit/s (docs/studies.md#ap-11): core 1 926.2 M, core 0
        // 182.7 M cycles/s, 5.1 times; the twin 3.9 (100 Mbit/s: 4.7) since the WiFi
        // vector runs threaded (its thread's runs and switches on core 0; 4.7 and 6.0
        // before, with the whole cost fitted to hard-IRQ handlers: docs/results/sim.md).
        assert!(
            c1.busy > 3.5 * c0.busy,
            "{pps}: core 1 {:.3}, core 0 {:.3}",
            c1.busy,
            c0.busy
        );
        assert_eq!(c0.rx_irqs_per_s, 0.0);
        assert_eq!(c1.tx_completion_irqs_per_s, 0.0);
        assert!(c0.tx_completion_irqs_per_s > 0.0);
        let irqs = |r: &napilab_sim::SimResult| -> f64 {
            r.model.totals.cpus.iter().map(|c| c.hardirqs_per_s).sum()
        };
        assert!(
            irqs(&d) > irqs(&s),
            "{pps}: dual {} vs single {}",
            irqs(&d),
            irqs(&s)
        );
    }
}

/// 500 Mbit/s (41,500 packets/s), dual-core: the per-stage cycles per second of
/// docs/studies.md AP-5 (E2W: poll 125 M, IP stack 24 M, init xmit 546 M, TX reclaim 42 M),
/// within 20%, from the twin's counts of the work each stage did (packets polled,
/// through the IP stack, transmitted, descriptors reclaimed) times the profile's
/// per-packet cycles. The profile's per-packet cycles were derived from these very
/// figures, so this checks that the twin charges each stage once per packet at this
/// load (no drop, no double reclaim), not the figures themselves.
///
/// The fifth figure, "RX SoftIRQ" 35 M cycles/s, is a per-run cost the profile takes
/// as 1,100 cycles assuming 0.77 runs per packet (the 100 Mbit/s single-core ratio).
/// The twin instead predicts about 5,400 NET_RX runs/s on the Ethernet core at 500
/// Mbit/s (its 70 us RX coalescing collects about 7.6 packets per IRQ), which gives
/// about 6 M cycles/s: known deviation, pinned here below half the published value
/// (if it ever reaches the published figure, update docs/results/sim.md and this test). The
/// published figure implies either about 32,000 runs/s (far less coalescing at 500
/// Mbit/s than the 70 us that fits 100 Mbit/s) or about 6,400 cycles per run; no
/// published IRQ or softirq rate at 500 Mbit/s decides between them.
#[test]
fn e2w_stage_cycles_at_500_mbit() {
    let p = Profile::builtin("ap-cortex-a72-bcmgenet").expect("shipped profile parses");
    let d = ap(DUAL, "ap-e2w-dual-core.toml", 41_500.0);
    let t = &d.model.totals;
    let obs = &d.observation.intervals[0];
    let rx = obs.devices[0].rx_packets.as_ref().expect("rx").value;
    let tx = obs.devices[1].tx_packets.as_ref().expect("tx").value;
    let processed: f64 = obs
        .cpus
        .iter()
        .map(|c| c.softnet_processed.as_ref().expect("processed").value)
        .sum();
    let s = &p.stage_cycles;
    let stages = [
        ("poll", rx * s.poll, 125e6),
        ("IP stack", processed * s.ip_stack, 24e6),
        ("init xmit", tx * s.xmit, 546e6),
        // Every transmitted descriptor is reclaimed once, on core 0.
        ("TX reclaim", tx * s.tx_reclaim, 42e6),
    ];
    for (what, twin, published) in stages {
        assert!(
            rel(twin, published) < 0.20,
            "{what}: twin {:.1} M cycles/s, published {:.0} M",
            twin / 1e6,
            published / 1e6
        );
    }
    let softirq_stage = t.cpus[1].net_rx_softirqs_per_s * p.fixed_cycles.softirq;
    assert!(
        softirq_stage > 0.0 && softirq_stage < 0.5 * 35e6,
        "RX SoftIRQ stage {:.1} M cycles/s",
        softirq_stage / 1e6
    );
}

/// The twin's predicted maximum E2W throughput (RFC 2544 style search, loss <= 0.1%),
/// per core configuration (the study forwarded 500 Mbit/s; it quotes no maximum). With
/// the profile's whole cost calibrated on the published total cycles per core
/// (docs/studies.md#ap-10, #ap-11) both are CPU-bound below the Gigabit line rate of
/// 1,506-byte packets (predicted 68,652 / 72,461 packets/s, 827 / 873 Mbit/s; with the
/// stage figures alone they reached line rate), dual-core higher, as core 0 does the
/// reclaim and its IRQs.
#[test]
fn e2w_predicted_maximum_per_core_configuration() {
    let p = Profile::builtin("ap-cortex-a72-bcmgenet").expect("shipped profile parses");
    let max = |toml: &str, link: f64| {
        let mut cfg = SimConfig::from_toml_str(toml, "ap").expect("parses");
        cfg.measurement.duration_ms = 300.0;
        cfg.egress.link_mbps = link;
        napilab_sim::max_throughput(&cfg, &p, 1, 0.001, 10_000.0, 400_000.0, 0.01)
            .0
            .pps
    };
    let line = 1e9 / ((1506.0 + 20.0) * 8.0);
    let (s, d) = (max(SINGLE, 1000.0), max(DUAL, 1000.0));
    assert!(
        s < 0.9 * line && d < 0.95 * line,
        "single {s:.0}, dual {d:.0} vs line rate {line:.0}"
    );
    assert!(
        s > 0.6 * line,
        "single {s:.0}: the published 500 Mbit/s (41,500/s) leaves headroom"
    );
    assert!(d > 1.03 * s, "CPU-bound: single {s:.0}, dual {d:.0}");
    // The link is not the limit: unconstrained, the same maxima.
    assert!(rel(max(SINGLE, 100_000.0), s) < 0.02);
}

/// Wi-Fi-to-Ethernet (W2E) with the W2E per-stage cycles of docs/studies.md AP-6
/// (`profiles/ap-cortex-a72-w2e.toml`; coalescing assumed as for E2W). Predicted:
/// 500 Mbit/s forwarded without loss in both core configurations; in dual-core the
/// Ethernet IRQ core takes the TX completions and the reclaim; the maximum is the
/// Gigabit line rate in both, and with the link unconstrained the CPU gives out later
/// in dual-core (CPU-bound 83,887 / 87,695 packets/s with the E2W profile's whole cost
/// ASSUMED for W2E). Known deviation, pinned: the published "TX SoftIRQ" 23 M cycles/s
/// (the Ethernet qdisc running on the other core) does not appear, because the twin's
/// FIFO is bypassed while empty and the TX ring never fills at 500 Mbit/s; FQ-CoDel,
/// which is never bypassed, is not modelled (docs/results/sim.md).
#[test]
fn w2e_single_and_dual_core() {
    let p = Profile::from_toml_str(
        include_str!("../profiles/ap-cortex-a72-w2e.toml"),
        "profiles/ap-cortex-a72-w2e.toml",
    )
    .expect("shipped profile parses");
    let cfg = |toml: &str| SimConfig::from_toml_str(toml, "w2e").expect("parses");
    let single = cfg(include_str!("fixtures/legacy/ap-w2e-single-core.toml"));
    let dual = cfg(include_str!("fixtures/legacy/ap-w2e-dual-core.toml"));
    let (s, d) = (
        napilab_sim::run(&single, &p, 1),
        napilab_sim::run(&dual, &p, 1),
    );
    for r in [&s, &d] {
        let t = &r.model.totals;
        assert!(rel(t.forwarded_pps, 41_500.0) < 0.02, "{}", t.forwarded_pps);
        assert_eq!(t.rx_dropped_pps + t.tx_dropped_pps, 0.0);
        let net_tx: f64 = t.cpus.iter().map(|c| c.net_tx_softirqs_per_s).sum();
        assert_eq!(
            net_tx, 0.0,
            "pinned deviation: no NET_TX work with a bypassed FIFO"
        );
    }
    let (s0, d0, d1) = (
        &s.model.totals.cpus[0],
        &d.model.totals.cpus[0],
        &d.model.totals.cpus[1],
    );
    assert!(d1.tx_completion_irqs_per_s > 0.0 && d0.tx_completion_irqs_per_s == 0.0);
    assert!(
        d1.busy > 0.01 && d0.busy < s0.busy,
        "{} {} {}",
        s0.busy,
        d0.busy,
        d1.busy
    );
    let max = |mut c: SimConfig, link: f64| {
        c.measurement.duration_ms = 300.0;
        c.egress.link_mbps = link;
        napilab_sim::max_throughput(&c, &p, 1, 0.001, 10_000.0, 400_000.0, 0.01)
            .0
            .pps
    };
    let line = 1e9 / ((1506.0 + 20.0) * 8.0);
    for c in [single.clone(), dual.clone()] {
        let m = max(c, 1000.0);
        assert!(
            m > 0.97 * line && m < 1.03 * line,
            "{m} vs line rate {line}"
        );
    }
    let (ms, md) = (max(single, 100_000.0), max(dual, 100_000.0));
    assert!(
        ms > line && md > 1.02 * ms,
        "CPU-bound: single {ms:.0}, dual {md:.0}"
    );
}

/// The whole cost (docs/studies.md#ap-10, #ap-11): the twin's true busy share of each
/// packet-switching core against the published total cycles (perf cycles over the
/// 1.5 GHz clock), within 12% (the profile's two calibrated costs were fitted by least
/// squares to these five figures with every interrupt a hard-IRQ handler). Since the
/// WiFi vector runs threaded (each interrupt adds its thread's run and two context
/// switches) and the profile was not re-fitted, dual-core core 0 (the WiFi core) reads
/// +28%: that deviation is pinned below 35% (docs/results/sim.md, "Threaded IRQ
/// handlers on the access point"); the others are -1.7% / 0.0% / -7.2% / -0.7%.
#[test]
fn e2w_total_cycles_per_core_match_the_published_totals() {
    let busy = |toml: &str, what: &str, pps: f64| -> Vec<f64> {
        let mut cfg = SimConfig::from_toml_str(toml, what).expect("parses");
        cfg.traffic.rate_pps = pps;
        cfg.measurement.duration_ms = 2000.0;
        let r = napilab_sim::run(
            &cfg,
            &Profile::builtin("ap-cortex-a72-bcmgenet").expect("profile"),
            1,
        );
        r.model.totals.cpus.iter().map(|c| c.busy).collect()
    };
    let s100 = busy(SINGLE, "single", 8_300.0);
    let s500 = busy(SINGLE, "single", 41_500.0);
    let d100 = busy(DUAL, "dual", 8_300.0);
    let d500 = busy(DUAL, "dual", 41_500.0);
    let checks = [
        ("single-core core 0, 100 Mbit/s", s100[0], 0.1945),
        ("single-core core 0, 500 Mbit/s", s500[0], 0.696),
        ("dual-core cores 0+1, 100 Mbit/s", d100[0] + d100[1], 0.207),
        ("dual-core core 0, 500 Mbit/s", d500[0], 182.7e6 / 1.5e9),
        ("dual-core core 1, 500 Mbit/s", d500[1], 926.2e6 / 1.5e9),
    ];
    for (what, twin, published) in checks {
        eprintln!("{what}: twin {twin:.4}, published {published:.4}");
        let tolerance = if what == "dual-core core 0, 500 Mbit/s" {
            0.35
        } else {
            0.12
        };
        assert!(
            rel(twin, published) < tolerance,
            "{what}: twin {twin:.4}, published {published:.4}"
        );
    }
}

/// The tick view against mpstat (docs/studies.md#ap-10, #ap-11, #ap-12: misreading 3),
/// with the WiFi vector threaded (iwlwifi) and the tick kept as tick-sched.c keeps it
/// (docs/sim.md, "The tick and /proc/stat"). At 100 Mbit/s the tick shows a small part
/// of the true cost (published: 1.27% against 19.45% single-core, 1.05% against 20.7%
/// dual-core). At 500 Mbit/s the WiFi core's tick view is its threads' work (a thread
/// leaving the idle loop restarts the tick; published 6.38% for dual-core core 0), while
/// the Ethernet core, where no task ever runs, has its tick stopped by the idle loop and
/// never restarted: it reads exactly 0 (published 11.63%: not reproduced), and single-
/// core reads well below the published 74.4% (not reproduced). Nothing goes to
/// ksoftirqd at MAX_SOFTIRQ_RESTART 10 or 1 (published: core 1 from about 11% to 67%,
/// not reproduced): no pass ends with work pending. No tick is charged to irq. The
/// values the model gives in these 2 s runs (seed 1; 5 s runs give 2.7%, 2.0%, 17.9%,
/// 9.1%) are pinned within 0.03 points of share, about two standard deviations of a
/// 500-tick sample at these shares. docs/results/sim.md, "The tick as
/// the kernel keeps it: the access point".
#[test]
fn e2w_tick_view_against_mpstat() {
    let p = Profile::builtin("ap-cortex-a72-bcmgenet").expect("profile");
    let run = |toml: &str, pps: f64, restart: u32| {
        let mut cfg = SimConfig::from_toml_str(toml, "ap").expect("parses");
        cfg.traffic.rate_pps = pps;
        cfg.measurement.duration_ms = 2000.0;
        cfg.settings.max_softirq_restart = restart;
        napilab_sim::run(&cfg, &p, 1)
    };
    let tick = |c: &napilab_sim::CpuReport| 1.0 - c.tick_idle;
    let near = |what: &str, twin: f64, model: f64| {
        eprintln!("{what}: tick view {twin:.4}");
        assert!(
            (twin - model).abs() < 0.03,
            "{what}: tick view {twin:.4}, the model gave {model:.4}"
        );
    };
    for (toml, model) in [(SINGLE, 0.0288), (DUAL, 0.0282)] {
        let r = run(toml, 8_300.0, 10);
        let busy: f64 = r.model.totals.cpus.iter().map(|c| c.busy).sum();
        let seen: f64 = r.model.totals.cpus.iter().map(tick).sum();
        assert!(
            busy > 0.15 && seen < 0.25 * busy,
            "100 Mbit/s: true {busy:.3}, tick {seen:.3}"
        );
        near("100 Mbit/s, cores summed", seen, model);
    }
    let s = run(SINGLE, 41_500.0, 10);
    let c0 = &s.model.totals.cpus[0];
    // The tick samples at least the threads' own work, and misses most of the rest.
    let threads = c0.kthread + c0.softirq_bh_enable;
    assert!(
        tick(c0) > 0.5 * threads && tick(c0) < 0.5 * c0.busy,
        "single 500: tick {:.3}, threads {threads:.3}, true {:.3}",
        tick(c0),
        c0.busy
    );
    near("single-core core 0, 500 Mbit/s", tick(c0), 0.1408);
    assert_eq!(c0.tick_irq, 0.0, "a tick is never charged to irq");
    for restart in [10, 1] {
        let d = run(DUAL, 41_500.0, restart);
        let (w, e) = (&d.model.totals.cpus[0], &d.model.totals.cpus[1]);
        // The WiFi core: its busy time is nearly all the threads', and the tick sees it.
        assert!(
            tick(w) > 0.3 * w.busy,
            "restart {restart}: WiFi core tick {:.3}, true {:.3}",
            tick(w),
            w.busy
        );
        near("dual-core core 0, 500 Mbit/s", tick(w), 0.0826);
        // The Ethernet core: busy, but its tick stopped by the idle loop for good.
        assert!(
            e.busy > 0.5,
            "restart {restart}: Ethernet core busy {:.3}",
            e.busy
        );
        assert_eq!(
            e.ticks_sampled,
            0,
            "restart {restart}: Ethernet core tick view {:.4}",
            tick(e)
        );
        for c in [w, e] {
            assert!(
                c.ksoftirqd < 0.01,
                "restart {restart}: ksoftirqd {}",
                c.ksoftirqd
            );
            assert_eq!(c.tick_irq, 0.0, "a tick is never charged to irq");
        }
    }
}
