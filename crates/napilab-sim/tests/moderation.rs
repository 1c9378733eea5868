//! NIC interrupt moderation (docs/sim.md, "Interrupt moderation"): ixgbe's interrupt
//! throttling with its fixed and adaptive ITR (the Linux 3.16 driver, `crate::nic::
//! IxgbeItr`) on the single-queue router of docs/studies.md#ingress-qos-study, and
//! the generic coalescing timer. The IRQ rates below follow from the mechanism; none
//! is fitted.

mod common;
use common::*;
use napilab_sim::config::Moderation;
use napilab_sim::SimConfig;

fn irqs(c: &SimConfig) -> f64 {
    napilab_sim::run(c, &router_profile(), 1).model.totals.cpus[0].rx_irqs_per_s
}

fn throttled(rate_pps: f64, rx_usecs: u32, duration_ms: f64) -> SimConfig {
    let mut c = router_config(rate_pps, duration_ms);
    c.ingress.moderation = Moderation::IxgbeItr;
    c.ingress.rx_usecs = rx_usecs;
    c
}

/// A fixed ITR of 100 us is a ceiling of 10,000 interrupts a second at any load, and
/// past the point where polls stay busy (the core saturates near 1.75 Mpps) the
/// rate falls towards zero as without throttling (misreading 1).
#[test]
fn fixed_itr_caps_the_irq_rate_and_saturation_still_silences_it() {
    let ceiling = 1e6 / 100.0;
    let mut rates = Vec::new();
    for pps in [100_000.0, 500_000.0, 1_000_000.0, 1_500_000.0] {
        let r = irqs(&throttled(pps, 100, 100.0));
        // One window edge may hold one extra interrupt.
        assert!(r <= ceiling * 1.01, "{r:.0}/s at {pps} pps");
        rates.push(r);
    }
    // At 100 kpps the interval, not the packet rate, sets the rate (the unthrottled
    // router takes several times more there).
    let free = irqs(&router_config(100_000.0, 100.0));
    assert!(rates[0] > 0.9 * ceiling, "{rates:?}");
    assert!(free > 3.0 * rates[0], "{free:.0} vs {:.0}", rates[0]);
    let saturated = irqs(&throttled(1_900_000.0, 100, 100.0));
    assert!(
        saturated < 0.2 * rates[3],
        "{saturated:.0} vs {:.0}",
        rates[3]
    );
}

/// rx-usecs 0 is ixgbe's "throttling off": exactly the unmoderated run.
#[test]
fn rx_usecs_zero_disables_throttling() {
    for pps in [200_000.0, 1_500_000.0] {
        let off = irqs(&throttled(pps, 0, 60.0));
        let none = irqs(&router_config(pps, 60.0));
        assert_eq!(off, none, "at {pps} pps");
        assert!(off > 10_000.0, "{off:.0}");
    }
}

/// The adaptive ITR (rx-usecs 1, the driver default): at high load it settles in the
/// bulk range, whose interval caps the IRQ rate (IXGBE_8K_ITR, which the driver's
/// integer smoothing leaves at ITR 490, an EITR interval of 122 us: at most 8,197
/// interrupts a second); at a low rate of
/// small packets it stays in the lowest-latency range (10 us), so nearly every packet
/// interrupts; the same rate of MTU-sized packets climbs out of it and interrupts
/// less.
#[test]
fn adaptive_itr_follows_rate_and_size() {
    // At 1.5 Mpps many polls end full and re-poll without an interrupt, so the
    // vector stays below its ceiling, far below the unthrottled rate.
    let high = irqs(&throttled(1_500_000.0, 1, 200.0));
    let free = irqs(&router_config(1_500_000.0, 200.0));
    assert!(high <= 8_197.0 * 1.01, "{high:.0}/s at 1.5 Mpps");
    assert!(
        high > 1_000.0 && high < 0.2 * free,
        "{high:.0} vs {free:.0}"
    );

    let low = |size: u32| {
        let mut c = throttled(20_000.0, 1, 200.0);
        c.traffic.classes[0].size_bytes = size;
        irqs(&c)
    };
    let (small, large) = (low(64), low(1500));
    assert!(small > 0.8 * 20_000.0, "64-byte packets: {small:.0}/s");
    assert!(
        large < 0.8 * small,
        "1500-byte {large:.0}/s vs 64-byte {small:.0}/s"
    );
}

/// The generic timer is not the ITR: with the same 100 us it waits after the first
/// frame, so at a low rate it interrupts less often than the packet rate but, unlike
/// the throttle, it never fires the first frame at once (the mean latency grows by
/// about the timer).
#[test]
fn timer_coalescing_delays_the_first_frame_throttling_does_not() {
    let lat = |c: &SimConfig| {
        napilab_sim::run(c, &router_profile(), 1).model.classes[0]
            .latency
            .mean_us
    };
    let mut timer = router_config(2_000.0, 400.0);
    timer.ingress.rx_usecs = 100;
    let itr = throttled(2_000.0, 100, 400.0);
    let (lt, li) = (lat(&timer), lat(&itr));
    assert!(lt > li + 60.0, "timer {lt:.1} us, ITR {li:.1} us");
}
