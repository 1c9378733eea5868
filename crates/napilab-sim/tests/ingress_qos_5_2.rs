//! The ingress-QoS strategies of docs/studies.md#ingress-qos-study (SQ, RR, LL-RR,
//! LL-WFQ on the software router: Xeon E3-1230, ixgbe, one core, 128-byte Poisson
//! traffic) as shipped twin configurations, against the study's published figures
//! (section V) and the driver poll it describes (section IV-B).

mod common;
use common::*;
use napilab_sim::ingress_qos::Strategy;
use napilab_sim::SimResult;

fn run_strategy(strategy: Strategy, rate_pps: f64, rt_share: f64, duration_ms: f64) -> SimResult {
    napilab_sim::run(
        &strategy_config(strategy, rate_pps, rt_share, duration_ms),
        &router_profile(),
        1,
    )
}

/// Polls that handled at least one RX packet, and how many of them used the whole
/// weight (the histogram's last bucket).
fn rx_polls_and_full(r: &SimResult) -> (u64, u64) {
    let h = &r.model.packets_per_poll_histogram;
    let with_rx: u64 = h.iter().skip(1).sum();
    (with_rx, *h.last().expect("histogram has buckets"))
}

/// Section IV-B: the study's driver polls the RT and BE rings "alternately with small
/// ring budgets until the poll size is exhausted". With both rings holding work
/// (overload), every RX poll of LL-RR (ring budgets 4 / 4) must use the whole device
/// budget of 64, not stop after one visit of each ring (8 packets): the regression
/// of the one-pass poll, where LL-RR saturated at 1.28 Mpps.
#[test]
fn ll_poll_uses_the_whole_device_budget_when_rings_hold_work() {
    let r = run_strategy(Strategy::LlRr, 2_000_000.0, 0.3, 40.0);
    let (with_rx, full) = rx_polls_and_full(&r);
    assert!(with_rx > 1_000, "{with_rx} RX polls");
    let share = full as f64 / with_rx as f64;
    assert!(
        share > 0.95,
        "only {full} of {with_rx} RX polls used the weight (histogram {:?})",
        &r.model.packets_per_poll_histogram[..10]
    );
    // The old single-round poll remains as stock ixgbe's ("one_pass"): one visit per
    // ring, so never more than 4 + 4 packets per poll.
    let mut stock = strategy_config(Strategy::LlRr, 2_000_000.0, 0.3, 40.0);
    stock.ingress.queues[0].ring_poll = napilab_sim::config::RingPoll::OnePass;
    let r1 = napilab_sim::run(&stock, &router_profile(), 1);
    let h = &r1.model.packets_per_poll_histogram;
    assert!(h.iter().skip(9).all(|&n| n == 0), "one pass: {h:?}");
    assert!(h[8] > 1_000, "one pass: full rounds of 8 ({h:?})");
    // ... and the alternating poll forwards more at saturation (fewer poll calls,
    // IRQs and softirq runs per packet).
    assert!(
        r.model.totals.forwarded_pps > 1.05 * r1.model.totals.forwarded_pps,
        "alternate {:.0} vs one pass {:.0} pps",
        r.model.totals.forwarded_pps,
        r1.model.totals.forwarded_pps
    );
}

/// With little work the alternating poll completes (no "not done" report): a poll
/// that found both rings empty before the weight ran out is not a full poll.
#[test]
fn ll_poll_completes_when_the_rings_run_empty() {
    let r = run_strategy(Strategy::LlWfq, 300_000.0, 0.3, 40.0);
    let (with_rx, full) = rx_polls_and_full(&r);
    assert!(with_rx > 1_000, "{with_rx} RX polls");
    assert_eq!(full, 0, "no poll should use the weight at 0.3 Mpps");
    assert!(r.model.totals.cpus[0].rx_irqs_per_s > 10_000.0);
}

/// docs/studies.md#qos-2: "every strategy copes with 1.5 Mpps". Checked at RT shares
/// of 10, 50 and 90%: no packet lost, and no standing backlog (a standing backlog in
/// a 512-descriptor ring would put the mean latency near 512 x 0.57 us = 290 us; the
/// bound of 30 us is under three times SQ's published 11.7 us, docs/studies.md#qos-3).
#[test]
fn every_strategy_copes_with_1_5_mpps() {
    for s in Strategy::ALL {
        for share in [0.1, 0.5, 0.9] {
            let r = run_strategy(s, 1_500_000.0, share, 100.0);
            let t = &r.model.totals;
            assert_eq!(
                t.rx_dropped_pps + t.tx_dropped_pps,
                0.0,
                "{} at RT share {share}: loss",
                s.name()
            );
            for class in ["rt", "be"] {
                let c = r.model.class(class).expect("class");
                assert!(
                    c.latency.mean_us < 30.0,
                    "{} at RT share {share}: {class} mean latency {:.1} us",
                    s.name(),
                    c.latency.mean_us
                );
            }
        }
    }
}

/// docs/studies.md#qos-3: "SQ mean latency about 11.7 us at 1.5 Mpps, independent of
/// the RT share" (15%, as router_5_2's SQ test); both classes wait in one FIFO, so
/// their means agree to within 3%.
#[test]
fn sq_latency_does_not_depend_on_the_rt_share() {
    for share in [0.1, 0.5, 0.9] {
        let r = run_strategy(Strategy::Sq, 1_500_000.0, share, 100.0);
        let rt = r.model.class("rt").expect("rt").latency.mean_us;
        let be = r.model.class("be").expect("be").latency.mean_us;
        assert!(rel(rt, 11.7) < 0.15, "share {share}: RT {rt:.2} us");
        assert!(
            rel(be, rt) < 0.03,
            "share {share}: BE {be:.2} vs RT {rt:.2} us"
        );
    }
}

/// docs/studies.md#qos-7 on the study's platform: under LL-WFQ (BE ring budget 4)
/// with RT at 30% of the core's capacity and BE offered beyond the rest, the mean RT
/// wait stays under Tmax = b x / (1 - rho_RT) (x: the profile's service time per
/// packet, 550 ns; Tmax 3.1 us). With the study's Poisson traffic only the mean is
/// bounded (tests/oracles.rs explains why); with constant-rate RT the maximum wait
/// exceeds it only by the driver's per-poll overheads, which the bound leaves out
/// (poll call and TX reclaim between visits): checked within 1.5 Tmax (the twin: 1.1).
#[test]
fn ll_wfq_keeps_rt_waiting_under_tmax_on_the_router() {
    let p = router_profile();
    let x = napilab_sim::ingress_qos::service_ns(&p);
    let tmax = napilab_sim::ingress_qos::tmax(4, x, 0.3);
    let checks = napilab_sim::ingress_qos::check_be_budget(&p, 0.3, 4, 60.0, 1);
    assert_eq!(checks.len(), 2);
    for c in &checks {
        eprintln!("{c:?} Tmax {tmax:.0} ns");
        assert!(c.rt_packets > 10_000, "{c:?}");
        assert_eq!(c.rt_dropped, 0, "{c:?}");
        assert!(c.mean_wait_ns <= tmax, "{c:?} Tmax {tmax:.0}");
    }
    assert!(checks[0].max_wait_ns <= 1.5 * tmax, "{:?}", checks[0]);
}

/// docs/studies.md#ingress-qos-study (the strategies' purpose, section IV): under
/// LL-WFQ the RT latency does not depend on the BE load, up to and past the core's
/// saturation, while under SQ the RT packets wait behind the BE backlog. RT fixed at
/// 0.3 Mpps, BE 0.3 to 1.9 Mpps: LL-WFQ's RT mean latency never above 1.05 times its
/// value at the lowest BE load; SQ's grows more than tenfold.
#[test]
fn rt_latency_is_independent_of_the_be_load_under_ll_wfq() {
    let rt_pps = 300_000.0;
    let rt_mean = |s: Strategy, be_pps: f64| {
        let total = rt_pps + be_pps;
        let r = run_strategy(s, total, rt_pps / total, 60.0);
        r.model.class("rt").expect("rt").latency.mean_us
    };
    let loads = [300_000.0, 900_000.0, 1_300_000.0, 1_900_000.0];
    let wfq: Vec<f64> = loads
        .iter()
        .map(|&be| rt_mean(Strategy::LlWfq, be))
        .collect();
    let sq: Vec<f64> = loads.iter().map(|&be| rt_mean(Strategy::Sq, be)).collect();
    eprintln!("RT mean latency by BE load {loads:?}: LL-WFQ {wfq:.2?} us, SQ {sq:.2?} us");
    // Not growing with the BE load (it falls a little: at low load each RT packet
    // more often pays an IRQ and the wake-up from idle, 10.9 -> 8.7 us).
    assert!(
        wfq.iter().all(|&l| l <= 1.05 * wfq[0]),
        "LL-WFQ RT latency {wfq:?}"
    );
    assert!(sq[3] > 10.0 * sq[0], "SQ RT latency {sq:?}");
}
