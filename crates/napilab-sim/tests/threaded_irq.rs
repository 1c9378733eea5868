//! Threaded IRQ handlers (docs/sim.md, "Threaded IRQ handlers"), on the access point
//! whose WiFi device (iwlwifi) requests its vectors threaded: each WiFi interrupt adds
//! a run of the `irq/N-wlan0` thread and two context switches, its NET_RX poll runs at
//! the thread's bh-enable, and the CPU leaves the idle loop for the thread, so the
//! tick samples work that a hard-IRQ handler from idle hides (misreading 3).

mod common;
use common::rel;
use napilab_sim::config::IrqMode;
use napilab_sim::{Profile, SimConfig, SimResult};

const SINGLE: &str = include_str!("fixtures/legacy/ap-e2w-single-core.toml");

fn run(pps: f64, mode: IrqMode) -> SimResult {
    let mut cfg = SimConfig::from_toml_str(SINGLE, "ap-e2w-single-core.toml").expect("parses");
    cfg.traffic.rate_pps = pps;
    cfg.measurement.duration_ms = 1000.0;
    cfg.egress.irq_mode = mode;
    let p = Profile::builtin("ap-cortex-a72-bcmgenet").expect("profile");
    napilab_sim::run(&cfg, &p, 1)
}

/// Per WiFi interrupt the thread costs its handler run and two context switches (into
/// the thread, and out of it to the idle loop), plus the cache refill the twin charges
/// a thread resuming after the softirq at its bh-enable (as for a threaded-NAPI
/// kthread): 1,000 + 2 x 3,000 + 1,000 cycles at 1.5 GHz. Under `hardirq` no thread
/// runs, and no poll runs at a bh-enable.
#[test]
fn a_threaded_irq_adds_the_thread_run_and_two_context_switches_per_interrupt() {
    let p = Profile::builtin("ap-cortex-a72-bcmgenet").expect("profile");
    let per_irq_ns = (p.irq_thread.as_ref().expect("[irq_thread]").handler_cycles
        + 2.0 * p.fixed_cycles.context_switch
        + p.fixed_cycles.after_interrupt)
        / p.cpu_ghz;
    let hard = run(8_300.0, IrqMode::Hardirq);
    let threaded = run(8_300.0, IrqMode::Threaded);
    let (h, t) = (&hard.model.totals.cpus[0], &threaded.model.totals.cpus[0]);
    assert!(h.kthread < 1e-4, "hardirq: kthread {}", h.kthread);
    assert_eq!(h.softirq_bh_enable, 0.0);
    let wifi_irqs = t.tx_completion_irqs_per_s;
    assert!(wifi_irqs > 1_000.0, "{wifi_irqs}");
    let thread_ns_per_irq = t.kthread * 1e9 / wifi_irqs;
    assert!(
        rel(thread_ns_per_irq, per_irq_ns) < 0.05,
        "thread time per WiFi IRQ {thread_ns_per_irq:.0} ns, expected {per_irq_ns:.0}"
    );
    // The reclaim polls run in the softirq at the thread's bh-enable.
    assert!(t.softirq_bh_enable > 0.0);
    // The same traffic is forwarded either way.
    assert!(
        rel(
            t.packets_per_poll * t.polls_per_s,
            h.packets_per_poll * h.polls_per_s
        ) < 0.05
    );
}

/// NOHZ idle: under `hardirq` every IRQ and its softirq start from the idle loop and
/// the tick samples none of them; under `threaded` the CPU leaves the idle loop for
/// each WiFi interrupt's thread, whose run and softirq the tick samples, as it does
/// any Ethernet IRQ taken meanwhile.
#[test]
fn the_tick_sees_busy_time_under_threaded_irqs_that_it_misses_under_hardirq() {
    for pps in [8_300.0, 41_500.0] {
        let hard = run(pps, IrqMode::Hardirq);
        let threaded = run(pps, IrqMode::Threaded);
        let (h, t) = (&hard.model.totals.cpus[0], &threaded.model.totals.cpus[0]);
        assert!(
            1.0 - h.tick_idle < 0.02,
            "{pps}: hardirq tick busy {:.3} (true {:.3})",
            1.0 - h.tick_idle,
            h.busy
        );
        // The tick samples the thread's own time and its softirq at least.
        let sampled = t.kthread + t.softirq_bh_enable;
        assert!(
            1.0 - t.tick_idle > 0.5 * sampled,
            "{pps}: threaded tick busy {:.3}, thread + its softirq {sampled:.3}",
            1.0 - t.tick_idle
        );
        assert!(1.0 - t.tick_idle > 0.02, "{pps}: {:.3}", 1.0 - t.tick_idle);
    }
}
