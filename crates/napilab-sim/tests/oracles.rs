//! Closed-form oracles (docs/architecture.md section 5: "closed-form oracles for the twin").

mod common;
use common::rel;
use napilab_sim::{Profile, SimConfig};

/// A profile where only per-packet work costs time: S = `service_ns` per packet, split
/// over the stages; IRQs, softirq entry, polls, DMA and context switches are free.
fn ideal_profile(service_ns: f64) -> Profile {
    let cycles = service_ns; // at 1 GHz a cycle is a nanosecond
    let text = format!(
        r#"
        name = "ideal"
        cpu_ghz = 1.0
        [stage_cycles]
        poll = {p}
        ip_stack = {i}
        xmit = {x}
        qdisc = 0.0
        tx_reclaim = 0.0
        [fixed_cycles]
        hardirq = 0.0
        softirq = 0.0
        poll = 0.0
        [latency_ns]
        irq_delivery = 0
        rx_dma = 0
        tx_dma = 0
        "#,
        p = cycles * 0.25,
        i = cycles * 0.5,
        x = cycles * 0.25
    );
    Profile::from_toml_str(&text, "ideal").expect("ideal profile parses")
}

fn one_queue(rate_pps: f64, duration_ms: f64, classes: &str, rings: &str) -> SimConfig {
    one_queue_pattern(rate_pps, duration_ms, classes, rings, "poisson")
}

fn one_queue_pattern(
    rate_pps: f64,
    duration_ms: f64,
    classes: &str,
    rings: &str,
    pattern: &str,
) -> SimConfig {
    let text = format!(
        r#"
        [host]
        cpus = 1
        hz = 1000
        [ingress]
        rx_ring_size = 100000
        queues = [{{ cpu = 0 {rings} }}]
        [egress]
        # A wire so fast that serialisation is negligible: the poller is the server.
        link_mbps = 1e9
        tx_ring_size = 100000
        [traffic]
        rate_pps = {rate_pps}
        pattern = "{pattern}"
        classes = [{classes}]
        [measurement]
        duration_ms = {duration_ms}
        warmup_ms = 5
        "#
    );
    SimConfig::from_toml_str(&text, "oracle").expect("oracle config parses")
}

/// One poller, one queue, Poisson arrivals and a fixed cost per packet is an M/D/1
/// queue: mean wait W = rho * S / (2 (1 - rho)) (Pollaczek-Khinchine). The twin's
/// latency is W + S when every other cost is zero.
#[test]
fn one_poller_matches_m_d_1_mean_wait() {
    let s_ns = 1_000.0;
    let p = ideal_profile(s_ns);
    for (rho, tol) in [(0.3, 0.05), (0.6, 0.05), (0.85, 0.08)] {
        let rate = rho / (s_ns * 1e-9);
        let mut waits = Vec::new();
        for seed in 1..=3 {
            let cfg = one_queue(rate, 150.0, r#"{ name = "a", share = 1.0 }"#, "");
            let r = napilab_sim::run(&cfg, &p, seed);
            waits.push(r.model.classes[0].latency.mean_us * 1e3 - s_ns);
        }
        let w = waits.iter().sum::<f64>() / waits.len() as f64;
        let oracle = rho * s_ns / (2.0 * (1.0 - rho));
        eprintln!("M/D/1 rho {rho}: twin W = {w:.1} ns, oracle {oracle:.1} ns");
        assert!(
            rel(w, oracle) < tol,
            "rho {rho}: twin W = {w:.1} ns, M/D/1 W = {oracle:.1} ns"
        );
    }
}

/// docs/studies.md QOS-7: with per-ring budgets in one NAPI poll (LL-WFQ: RT 60, BE 4), an RT
/// packet waits at most Tmax = b * x / (1 - rho_RT), b the BE ring budget and x the
/// per-packet service time, even with the BE ring flooded (1.2 x capacity here).
///
/// Under which assumptions: the bound is the fixed point of W = b x + rho_RT W. A
/// newly arrived RT packet waits for at most one BE batch (b x), plus the RT work that
/// arrives while it waits, taken as rho_RT W, i.e. RT traffic arriving at its mean
/// rate (fluid, or constant-rate to within one packet). That is a bound on every
/// packet only for smooth RT arrivals, and that is what is checked: with constant-rate
/// RT traffic the twin's maximum RT wait stays under Tmax. With Poisson RT traffic
/// (the study's traffic) more than rho_RT W of RT work can arrive in a window, RT
/// packets queue behind each other's bursts, and no finite bound on every packet
/// exists (an M/D/1 queue has unbounded waits); the fixed point then holds for the
/// expected RT work, so the check is the mean RT wait <= Tmax, plus the 99th
/// percentile, which the twin also keeps under Tmax (its rare maximum is about 1.2
/// Tmax). The model is right to exceed it there. SQ (one shared ring) under the same
/// load is far worse.
#[test]
fn ll_wfq_keeps_rt_waiting_under_the_ingress_qos_bound() {
    let x_ns = 500.0;
    let p = ideal_profile(x_ns);
    let capacity = 1e9 / x_ns; // 2 Mpps
    let rho_rt = 0.3;
    let b = 4.0;
    let tmax = b * x_ns / (1.0 - rho_rt);
    let total = capacity * (rho_rt + 1.2);
    let rt_share = rho_rt / (rho_rt + 1.2);
    let classes = format!(
        r#"{{ name = "rt", share = {rt_share}, queue = 0, ring = "rt" }},
           {{ name = "be", share = {}, queue = 0, ring = "be" }}"#,
        1.0 - rt_share
    );
    let rings = r#", rings = [{ name = "rt", budget = 60, size = 512 }, { name = "be", budget = 4, size = 512 }]"#;

    let cfg = one_queue_pattern(total, 100.0, &classes, rings, "constant");
    let r = napilab_sim::run(&cfg, &p, 7);
    let rt = r.model.class("rt").expect("rt class");
    assert!(rt.latency.samples > 10_000);
    let max_wait = rt.latency.max_us * 1e3 - x_ns;
    eprintln!("LL-WFQ CBR: RT max wait {max_wait:.0} ns, Tmax {tmax:.0} ns");
    assert!(
        max_wait <= tmax,
        "CBR: RT max wait {max_wait:.0} ns > Tmax {tmax:.0} ns"
    );
    assert_eq!(rt.rx_dropped_pps, 0.0, "RT loses nothing");
    let be = r.model.class("be").expect("be class");
    // BE gets the rest of the CPU: 1 - rho_RT of capacity.
    assert!(
        rel(be.forwarded_pps, capacity * (1.0 - rho_rt)) < 0.03,
        "{}",
        be.forwarded_pps
    );

    let cfg = one_queue_pattern(total, 100.0, &classes, rings, "poisson");
    let r = napilab_sim::run(&cfg, &p, 7);
    let rt = r.model.class("rt").expect("rt class");
    let p99_wait = rt.latency.p99_us * 1e3 - x_ns;
    let mean_wait = rt.latency.mean_us * 1e3 - x_ns;
    eprintln!(
        "LL-WFQ Poisson: RT mean wait {mean_wait:.0} ns, p99 wait {p99_wait:.0} ns, max wait {:.0} ns, Tmax {tmax:.0} ns",
        rt.latency.max_us * 1e3 - x_ns
    );
    assert!(
        mean_wait <= tmax,
        "Poisson: RT mean wait {mean_wait:.0} ns > Tmax {tmax:.0} ns"
    );
    assert!(
        p99_wait <= tmax,
        "Poisson: RT p99 wait {p99_wait:.0} ns > Tmax {tmax:.0} ns"
    );
    assert_eq!(rt.rx_dropped_pps, 0.0, "RT loses nothing");

    // SQ: the same traffic through one shared ring of 512 waits behind BE backlog.
    let sq = one_queue(
        total,
        100.0,
        &classes
            .replace(", ring = \"rt\"", "")
            .replace(", ring = \"be\"", ""),
        r#", rings = [{ name = "rx", size = 512 }]"#,
    );
    let r = napilab_sim::run(&sq, &p, 7);
    let rt_sq = r.model.class("rt").expect("rt class");
    eprintln!("SQ: RT mean latency {:.1} us", rt_sq.latency.mean_us);
    assert!(
        rt_sq.latency.mean_us * 1e3 > 20.0 * tmax,
        "{:?}",
        rt_sq.latency
    );
}
