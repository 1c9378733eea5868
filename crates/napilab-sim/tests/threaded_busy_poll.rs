//! Threaded busy polling (Linux 6.19, napi-set threaded=busy-poll; docs/sim.md
//! "Threaded busy polling"): the kthread owns its instance for good, so the IRQ stays
//! masked, its CPU is busy at any load, and a packet waits at most one pass.

mod common;
use common::*;
use napilab_sim::config::NapiContext;
use napilab_sim::poll_loop::{config, Delivery};
use napilab_sim::{SimConfig, SimResult};

fn run(cfg: &SimConfig) -> SimResult {
    napilab_sim::run(cfg, &router_profile(), 1)
}

/// Share of the offered packets the class got served.
fn served(r: &SimResult) -> f64 {
    let c = &r.model.classes[0];
    c.forwarded as f64 / c.offered.max(1) as f64
}

/// The router of the ingress-QoS study with its one queue in `napi`, on 6.19.
fn router(napi: NapiContext, rate: f64) -> SimConfig {
    let mut c = router_config(rate, 50.0);
    c.host.kernel = "6.19".into();
    c.ingress.queues[0].napi = napi;
    c
}

/// Under load the busy-polling kthread takes no RX IRQ at all (the first one, in the
/// warm-up, woke it), its CPU is busy the whole window even at 1% of its capacity,
/// and every pass is a poll in the NAPI-thread context; interrupt-driven delivery of
/// the same load takes an IRQ per few packets and leaves the CPU mostly idle.
#[test]
fn the_kthread_masks_the_irq_and_takes_the_cpu() {
    for rate in [20_000.0, 800_000.0] {
        let busy = run(&router(NapiContext::ThreadedBusyPoll, rate));
        let c = &busy.model.totals.cpus[0];
        assert_eq!(c.rx_irqs_per_s, 0.0, "{rate} pps: RX IRQs under busy poll");
        assert!(c.busy > 0.999, "{rate} pps: CPU busy {:.4}", c.busy);
        // The kthread's passes fill the CPU; at high load the TX-completion IRQs and
        // their softirq (the egress, not this instance) take part of it.
        let floor = if rate < 100_000.0 { 0.9 } else { 0.5 };
        assert!(c.napi_thread > floor, "{rate} pps: {:.3}", c.napi_thread);
        assert!(served(&busy) > 0.99, "{rate} pps: {:.3}", served(&busy));
        // One pass: fixed_cycles.poll 400 + the loop's 250 cycles at 3.2 GHz = 203 ns,
        // so about 4.9 million polls a second, nearly all empty at low load.
        let pass_ns = (400.0 + 250.0) / 3.2;
        let polls = c.polls_per_s;
        if rate < 100_000.0 {
            assert!(
                rel(polls, 1e9 / pass_ns) < 0.05,
                "{polls:.0} polls/s, expected about {:.0}",
                1e9 / pass_ns
            );
        }
        let irq = run(&router(NapiContext::Softirq, rate));
        let i = &irq.model.totals.cpus[0];
        assert!(i.rx_irqs_per_s > 0.1 * rate.min(200_000.0), "{rate}: {i:?}");
        if rate < 100_000.0 {
            assert!(
                i.busy < 0.2,
                "interrupt-driven at {rate}: busy {:.3}",
                i.busy
            );
        }
    }
}

/// A packet waits for the next pass instead of an IRQ, a wake-up from idle and the
/// softirq: at low load the p99 is lower than interrupt-driven delivery's.
#[test]
fn busy_poll_p99_below_interrupt_driven_at_low_load() {
    let busy = run(&router(NapiContext::ThreadedBusyPoll, 20_000.0));
    let irq = run(&router(NapiContext::Softirq, 20_000.0));
    let (b, i) = (
        &busy.model.classes[0].latency,
        &irq.model.classes[0].latency,
    );
    assert!(b.p99_us + 1.0 < i.p99_us, "busy {b:?} vs IRQ {i:?}");
    // The wait for the next pass is at most one pass (0.2 us) beyond the packet's own
    // path, so the spread between median and p99 stays small.
    assert!(b.p99_us - b.p50_us < 2.0, "{b:?}");
}

/// The poll loop of the predictions: threaded busy polling keeps CPU 0 busy and takes
/// no IRQ, application busy polling keeps CPU 1 busy instead, interrupt-driven
/// delivery keeps neither; each delivers the whole load.
#[test]
fn poll_loop_deliveries() {
    let rate = 10_000.0;
    let r: Vec<SimResult> = Delivery::ALL
        .iter()
        .map(|d| run(&config(*d, rate, 40.0)))
        .collect();
    for (d, x) in Delivery::ALL.iter().zip(&r) {
        assert!(served(x) > 0.99, "{}: {:.3}", d.as_str(), served(x));
    }
    let cpu = |x: &SimResult, c: usize| x.model.totals.cpus[c].busy;
    let (irq, app, thr) = (&r[0], &r[1], &r[2]);
    assert!(cpu(irq, 0) < 0.2 && cpu(irq, 1) < 0.2);
    assert!(cpu(app, 1) > 0.99, "app busy poll CPU 1 {:.3}", cpu(app, 1));
    assert!(
        cpu(thr, 0) > 0.99,
        "threaded busy poll CPU 0 {:.3}",
        cpu(thr, 0)
    );
    assert!(cpu(thr, 1) < 0.2);
    assert_eq!(thr.model.totals.cpus[0].rx_irqs_per_s, 0.0);
    let p99 = |x: &SimResult| x.model.classes[0].latency.p99_us;
    assert!(p99(thr) < p99(irq), "{} vs {}", p99(thr), p99(irq));
}

/// The kthread shares its CPU with an application fairly: `cond_resched` after each
/// pass lets a woken application run, so a receiver on the kthread's CPU is served.
#[test]
fn an_application_on_the_kthread_cpu_still_runs() {
    let mut cfg = config(Delivery::ThreadedBusyPoll, 10_000.0, 40.0);
    cfg.apps[0].cpu = 0;
    let r = run(&cfg);
    assert!(served(&r) > 0.99, "{:.3}", served(&r));
    let c = &r.model.totals.cpus[0];
    assert!(c.busy > 0.999);
    assert!(c.user > 0.0 && c.napi_thread > 0.8, "{c:?}");
}

/// The kernel that has it, and the settings it makes meaningless, are checked with the
/// field named.
#[test]
fn validation_names_the_kernel_and_the_field() {
    let mut c = router(NapiContext::ThreadedBusyPoll, 1000.0);
    c.host.kernel = "6.18".into();
    let e = c
        .validate("t.toml")
        .expect_err("6.18 has no threaded busy poll");
    assert_eq!(e.field, "host.kernel");
    assert!(
        e.message.contains("6.19") && e.message.contains("6.18"),
        "{e}"
    );
    let mut c = router(NapiContext::ThreadedBusyPoll, 1000.0);
    c.ingress.queues[0].defer_hard_irqs = 2;
    c.ingress.queues[0].gro_flush_timeout_ns = 20_000;
    let e = c.validate("t.toml").expect_err("deferral is meaningless");
    assert_eq!(e.field, "ingress.queues[0].defer_hard_irqs");
    let text = napilab_testkit::minimal_twin_config(
        "kernel = \"6.19\"",
        ", napi = \"threaded_busy_poll\"",
    );
    let c = SimConfig::from_toml_str(&text, "v.toml").expect("the configuration vocabulary");
    assert_eq!(c.ingress.queues[0].napi, NapiContext::ThreadedBusyPoll);
}
