//! The single-queue software router of the ingress-QoS study (Xeon E3-1230, X540/ixgbe,
//! one core, 128-byte Poisson traffic, RX ring 512, throttling off) against the
//! published figures of docs/studies.md#ingress-qos-study (QOS-1 to QOS-6). The
//! profile `profiles/router-e3-1230-ixgbe.toml` was
//! calibrated on these figures; these tests keep it so.

mod common;
use common::*;

/// docs/studies.md QOS-1: "SQ forwards at most about 1.75 Mpps" (within 5%).
#[test]
fn maximum_forwarding_rate_is_about_1_75_mpps() {
    let r = run_router(2_200_000.0, 60.0);
    let fwd = r.model.totals.forwarded_pps;
    assert!(
        rel(fwd, 1.75e6) < 0.05,
        "twin forwards {fwd:.0} pps at 2.2 Mpps offered"
    );
    // Overload is dropped at the ring, not queued forever.
    assert!(r.model.totals.rx_dropped_pps > 300_000.0);
}

/// docs/studies.md QOS-2 and QOS-3: "every strategy copes with 1.5 Mpps" and "SQ mean latency about
/// 11.7 us at 1.5 Mpps" (within 15%).
#[test]
fn copes_with_1_5_mpps_at_about_11_7_us() {
    let r = run_router(1_500_000.0, 100.0);
    let t = &r.model.totals;
    assert_eq!(
        t.rx_dropped_pps + t.tx_dropped_pps,
        0.0,
        "no loss at 1.5 Mpps"
    );
    let mean = r.model.classes[0].latency.mean_us;
    assert!(rel(mean, 11.7) < 0.15, "mean latency {mean:.2} us");
}

/// docs/studies.md QOS-4: "SQ IRQ rate about 32k/s at 1.5 Mpps, falling to zero above 1.7
/// Mpps" (misreading 1: IRQs fall while the core is fully busy). Tolerance 15% at 1.5
/// Mpps, as for the latency figure (the twin gives about 36k/s, 13% high; the
/// published value is read off a plot and the profile's per-IRQ costs were fitted to
/// it together with the steep start of the CPU curve).
#[test]
fn irq_rate_about_32k_at_1_5_mpps_and_vanishes_past_saturation() {
    let at = |pps| run_router(pps, 200.0).model.totals.cpus[0].rx_irqs_per_s;
    let i15 = at(1_500_000.0);
    assert!(rel(i15, 32_000.0) < 0.15, "RX IRQs at 1.5 Mpps: {i15:.0}/s");
    let i18 = at(1_800_000.0);
    assert!(i18 < 1_000.0, "RX IRQs at 1.8 Mpps: {i18:.0}/s");
    // ... and the IRQ rate at low load is far higher than at saturation.
    let i05 = at(500_000.0);
    assert!(i05 > 2.0 * i15, "{i05:.0} vs {i15:.0}");
}

/// docs/studies.md QOS-6: "SQ latency jumps near 1.65 Mpps as bursts build backlog".
#[test]
fn latency_jumps_near_saturation() {
    let mean = |pps| run_router(pps, 60.0).model.classes[0].latency.mean_us;
    let (l15, l165, l175) = (mean(1_500_000.0), mean(1_650_000.0), mean(1_750_000.0));
    // Flat-ish up to 1.5 Mpps, then a knee: the last 0.1 Mpps costs several times
    // more latency than the previous 0.15.
    assert!(l165 > l15, "{l15} {l165}");
    assert!(
        l175 - l165 > 3.0 * (l165 - l15),
        "{l15:.1} {l165:.1} {l175:.1}"
    );
    assert!(l175 > 3.0 * l15, "{l15:.1} -> {l175:.1}");
}

/// docs/studies.md QOS-5: "CPU utilisation rises steeply to 0.2 Mpps (IRQ cost) ... then
/// grows linearly to 100% near 1.7 Mpps". The published flat stretch from 0.2 to 0.7
/// Mpps is NOT reproduced (the twin rises by about 0.28 there); docs/results/sim.md says what
/// was ruled out (tick sampling: a periodic tick reads the true curve, NOHZ reads
/// about 0) and what is not modelled. What is checked: the steep start, the slope
/// falling with load, and ~100% near 1.7 Mpps.
#[test]
fn cpu_utilisation_curve_shape() {
    let busy = |pps| run_router(pps, 40.0).model.totals.cpus[0].busy;
    let (u02, u07, u17) = (busy(200_000.0), busy(700_000.0), busy(1_700_000.0));
    let slope_low = u02 / 0.2; // per Mpps, from zero
    let slope_mid = (u07 - u02) / 0.5;
    assert!(u02 > 0.3, "steep start: {u02:.3} busy at 0.2 Mpps");
    assert!(
        slope_low > 2.5 * slope_mid,
        "{slope_low:.2} vs {slope_mid:.2}"
    );
    assert!(u17 > 0.97, "busy at 1.7 Mpps: {u17:.3}");
}

/// The same figure found the way the lab finds it: an RFC 2544 style bisection on
/// loss (here at most 0.1%), each probe a core `PointResult`.
#[test]
fn max_throughput_search_finds_about_1_75_mpps() {
    let cfg = router_config(1.0, 40.0);
    let (mt, points) =
        napilab_sim::max_throughput(&cfg, &router_profile(), 1, 0.001, 1.0e6, 2.5e6, 0.01);
    assert_eq!(mt.stopped, "converged");
    assert!(
        rel(mt.pps, 1.75e6) < 0.05,
        "max throughput {:.0} pps",
        mt.pps
    );
    assert_eq!(mt.probes.len(), points.len());
    // Every probe carries its classes, loss and Observation like a lab point.
    for p in &points {
        let c = &p.classes[0];
        assert!(c.sent > 0 && c.received <= c.sent);
        assert!(p.observation.is_some());
        let l = c.latency.as_ref().expect("latency");
        assert_eq!(l.samples, c.received);
        assert_eq!(l.histogram.iter().map(|b| b.1).sum::<u64>(), l.samples);
    }
    let over = points
        .iter()
        .find(|p| p.requested_pps > 1.9e6)
        .expect("an overload probe");
    assert!(over.loss_ratio() > 0.05);
}
