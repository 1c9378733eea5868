//! Kernel mechanisms of docs/kernel.md and the misreadings of docs/studies.md#misreadings that the
//! twin must reproduce, on the router scenario.

mod common;
use common::*;
use napilab_core::trace::ExecContext;
use napilab_core::{OriginKind, RuleId, Source, Subject};
use napilab_sim::config::NapiContext;

/// Misreading 3 (docs/studies.md M3; docs/kernel.md#cpu-accounting): at low load the
/// softirq work runs right after an IRQ on an otherwise idle CPU, and tick-sampled
/// /proc/stat (NOHZ idle) shows far less softirq time than the CPU really spends.
#[test]
fn misreading_3_tick_sampling_hides_softirq_at_low_load() {
    let r = run_router(200_000.0, 200.0);
    let c = &r.model.totals.cpus[0];
    let true_softirq = c.softirq_inline + c.ksoftirqd;
    assert!(true_softirq > 0.1, "true softirq share {true_softirq:.3}");
    assert!(
        c.tick_softirq < true_softirq / 5.0,
        "tick view {:.3} vs true {true_softirq:.3}",
        c.tick_softirq
    );
    // The same appears in the Observation: the tick view carries Source::Tick.
    let time = r.observation.intervals[0].cpus[0]
        .time
        .as_ref()
        .expect("time");
    assert_eq!(time.softirq.source, Source::Tick);
    assert!(time.softirq.value < true_softirq / 5.0);

    // With a periodic tick the sample is unbiased, and close to the truth.
    let mut cfg = router_config(200_000.0, 200.0);
    cfg.host.tick = napilab_sim::config::TickMode::Periodic;
    cfg.host.hz = 1000;
    let r = napilab_sim::run(&cfg, &router_profile(), 1);
    let c = &r.model.totals.cpus[0];
    let true_busy = c.busy;
    let tick_busy = 1.0 - c.tick_idle;
    assert!(
        (tick_busy - true_busy).abs() < 0.08,
        "{tick_busy:.3} vs {true_busy:.3}"
    );
}

/// Misreading 2: RX softirqs outnumber RX IRQs because TX completion IRQs raise
/// NET_RX_SOFTIRQ too (docs/kernel.md#packet-path, step 6).
#[test]
fn misreading_2_tx_completions_inflate_rx_softirqs() {
    let r = run_router(500_000.0, 50.0);
    let c = &r.model.totals.cpus[0];
    assert!(c.tx_completion_irqs_per_s > 10_000.0);
    assert!(
        c.net_rx_softirqs_per_s > 1.1 * c.rx_irqs_per_s,
        "{} softirqs vs {} RX IRQs",
        c.net_rx_softirqs_per_s,
        c.rx_irqs_per_s
    );
}

/// At saturation NAPI stays in polling mode: every RX poll uses its whole weight, the
/// inline softirq hits its restart/time limit and hands over to ksoftirqd, and
/// ksoftirqd time is charged to softirq in the tick view (docs/kernel.md#cpu-accounting).
/// `net_rx_action` polls each listed instance at most once per run, so with one RX
/// instance (64) plus the TX completion instance the 300-packet budget is never hit:
/// no `time_squeeze` (as in Linux: the run ends when only `repoll` is left).
#[test]
fn saturation_hands_over_to_ksoftirqd() {
    let r = run_router(2_000_000.0, 60.0);
    let c = &r.model.totals.cpus[0];
    assert!(c.ksoftirqd > 0.8, "ksoftirqd share {:.3}", c.ksoftirqd);
    assert!(c.tick_softirq > 0.9, "tick softirq {:.3}", c.tick_softirq);
    assert_eq!(c.time_squeeze_per_s, 0.0);
    let hist = &r.model.packets_per_poll_histogram;
    let rx_polls: u64 = hist[1..].iter().sum();
    assert!(hist[64] as f64 / rx_polls as f64 > 0.95);
}

/// The budget is checked after each poll, so a run can exceed netdev_budget by up to
/// weight - 1 (docs/kernel.md#net-rx-action-limits). Four saturated RX queues on one CPU with
/// netdev_budget 100: each run stops after two full polls (128 packets) and counts a
/// `time_squeeze`.
#[test]
fn budget_checked_after_the_poll() {
    let mut cfg = router_config(2_500_000.0, 40.0);
    cfg.settings.netdev_budget = 100;
    let q = cfg.ingress.queues[0].clone();
    cfg.ingress.queues = vec![q.clone(), q.clone(), q.clone(), q];
    let r = napilab_sim::run(&cfg, &router_profile(), 1);
    let iv = &r.observation.intervals[0].cpus[0];
    let per_softirq = iv
        .packets_per_net_rx_softirq
        .as_ref()
        .expect("metric")
        .value;
    // Up to 128 per run; packets are counted when processed and runs when they start,
    // so an interval boundary can shift the ratio by a fraction of a packet.
    assert!(per_softirq > 120.0 && per_softirq <= 128.5, "{per_softirq}");
    let c = &r.model.totals.cpus[0];
    assert!(
        c.time_squeeze_per_s > 0.9 * c.net_rx_softirqs_per_s,
        "{c:?}"
    );
}

/// Threaded NAPI: the poll runs in a kthread, charged as system time, with no
/// NET_RX softirq for the RX queue.
#[test]
fn threaded_napi_runs_as_system_time() {
    let mut cfg = router_config(1_000_000.0, 40.0);
    cfg.ingress.queues[0].napi = NapiContext::Threaded;
    let r = napilab_sim::run(&cfg, &router_profile(), 1);
    let c = &r.model.totals.cpus[0];
    assert!(r.model.totals.forwarded_pps > 0.99e6);
    assert!(c.kthread > 0.4, "kthread share {:.3}", c.kthread);
    let th = r.observation.intervals[0]
        .threads
        .iter()
        .find(|t| t.name.starts_with("napi/"))
        .expect("napi thread listed");
    assert!(th.cpu.as_ref().expect("cpu").value > 0.4);
    // The tracing-tier view: the kthread's polls and its true time by context.
    let tr = r.observation.intervals[0]
        .trace
        .as_ref()
        .expect("trace view");
    let share = |ctx: ExecContext| {
        tr.context_shares
            .iter()
            .find(|s| s.cpu == 0 && s.context == ctx)
            .map(|s| s.share.value)
            .expect("context listed")
    };
    assert!((share(ExecContext::NapiThread) - c.napi_thread).abs() < 1e-9);
    assert!(c.napi_thread > 0.4, "napi kthread {:.3}", c.napi_thread);
    assert!(tr.cpu(0).expect("cpu0").napi_thread_polls.value > 10_000.0);
    // The thread's own share is its polls plus its context switches and penalties.
    let thread_share = th.cpu.as_ref().expect("cpu").value;
    assert!(
        thread_share >= c.napi_thread - 1e-3,
        "{thread_share} vs {}",
        c.napi_thread
    );
    // No RX softirq runs for the threaded queue; what softirq there is reclaims TX
    // completions on the exit of their IRQ, a small share next to the kthread's.
    let after_irq = share(ExecContext::Hardirq);
    assert!(
        after_irq > 0.0 && after_irq < 0.5 * c.napi_thread,
        "{after_irq:.3}"
    );
}

/// The twin fills the tracing tier's view of every interval with its true times
/// (`Source::Model`): softirq and device-IRQ time per CPU beside the tick-sampled
/// /proc/stat shares. napilab's own explain rule for misreading 3 then fires on the
/// twin's Observation at low load, as it does on a traced live host.
#[test]
fn trace_view_carries_true_time_and_explain_finds_misreading_3() {
    let r = run_router(200_000.0, 100.0);
    let c = &r.model.totals.cpus[0];
    let i = &r.observation.intervals[0];
    let t = i
        .trace
        .as_ref()
        .and_then(|t| t.cpu(0))
        .expect("trace view of cpu0");
    assert_eq!(t.softirq.source, Source::Model);
    assert!((t.softirq.value - (c.softirq_inline + c.ksoftirqd)).abs() < 1e-9);
    assert!((t.hardirq.value - c.hardirq_device).abs() < 1e-9);
    assert!(
        t.hardirq.value > 0.01,
        "device IRQ time {:.4}",
        t.hardirq.value
    );
    let findings = napilab_core::explain::explain(&r.observation);
    let f = findings
        .iter()
        .find(|f| f.rule == RuleId::AccountingTruth && f.subject == Subject::Cpu(0))
        .unwrap_or_else(|| panic!("no accounting-truth finding in {findings:#?}"));
    assert!(f.title.contains("/proc/stat"), "{}", f.title);
    // At saturation ksoftirqd does the work and the ticks see it: no finding.
    let r = run_router(2_000_000.0, 40.0);
    let findings = napilab_core::explain::explain(&r.observation);
    assert!(
        !findings
            .iter()
            .any(|f| f.rule == RuleId::AccountingTruth && f.subject == Subject::Cpu(0)),
        "{findings:#?}"
    );
}

/// Software IRQ deferral (defer-hard-irqs, gro-flush-timeout) and hardware
/// coalescing both cut the RX IRQ rate at moderate load.
#[test]
fn deferral_and_coalescing_cut_irqs() {
    let base = run_router(300_000.0, 40.0).model.totals.cpus[0].rx_irqs_per_s;
    let mut cfg = router_config(300_000.0, 40.0);
    cfg.ingress.queues[0].defer_hard_irqs = 2;
    cfg.ingress.queues[0].gro_flush_timeout_ns = 20_000;
    let r = napilab_sim::run(&cfg, &router_profile(), 1);
    let deferred = r.model.totals.cpus[0].rx_irqs_per_s;
    assert!(deferred < base / 3.0, "{deferred} vs {base}");
    assert!(r.model.totals.forwarded_pps > 0.99 * 300_000.0 * 0.99);
    let mut cfg = router_config(300_000.0, 40.0);
    cfg.ingress.rx_usecs = 50;
    let r = napilab_sim::run(&cfg, &router_profile(), 1);
    let c = &r.model.totals.cpus[0];
    // One IRQ per 50 us at most (plus the poll time): below 20k/s.
    assert!(c.rx_irqs_per_s < 20_000.0, "{}", c.rx_irqs_per_s);
    assert!(r.model.classes[0].latency.mean_us > 25.0);
}

/// docs/architecture.md principle 7: the same inputs give the same result; another seed differs.
#[test]
fn deterministic_for_a_seed() {
    let cfg = router_config(1_000_000.0, 20.0);
    let p = router_profile();
    let a = serde_json::to_string(&napilab_sim::run(&cfg, &p, 5)).expect("json");
    let b = serde_json::to_string(&napilab_sim::run(&cfg, &p, 5)).expect("json");
    let c = serde_json::to_string(&napilab_sim::run(&cfg, &p, 6)).expect("json");
    assert_eq!(a, b);
    assert_ne!(a, c);
}

/// The Observation is a Model one, every metric is Model or Tick, intervals tile the
/// window, and the topology maps queue -> NAPI -> IRQ -> CPU.
#[test]
fn observation_shape() {
    let mut cfg = router_config(800_000.0, 40.0);
    cfg.measurement.interval_ms = Some(10.0);
    let r = napilab_sim::run(&cfg, &router_profile(), 1);
    let o = &r.observation;
    assert_eq!(o.origin.kind, OriginKind::Model);
    assert_eq!(o.intervals.len(), 4);
    for (i, iv) in o.intervals.iter().enumerate() {
        assert!((iv.start_s - i as f64 * 0.01).abs() < 1e-9);
        let c = &iv.cpus[0];
        for m in [
            &c.hardirqs,
            &c.net_rx_softirqs,
            &c.time_squeeze,
            &c.ksoftirqd,
        ] {
            assert_eq!(m.as_ref().expect("present").source, Source::Model);
        }
        let rx = iv
            .device("eth0")
            .expect("ingress")
            .rx_packets
            .as_ref()
            .expect("rx");
        assert!(rel(rx.value, 800_000.0) < 0.05, "{}", rx.value);
    }
    let eth0 = o.topology.device("eth0").expect("ingress in map");
    let napi = &eth0.napis[0];
    let irq = o.topology.irq(napi.irq.expect("irq")).expect("irq in map");
    assert_eq!(irq.affinity, vec![0]);
    assert_eq!(eth0.rx_queues[0].napi_id, Some(napi.id));
    // Round-trips through JSON as core defines it.
    let json = serde_json::to_string(o).expect("json");
    let back: napilab_core::Observation = serde_json::from_str(&json).expect("parse");
    assert_eq!(&back, o);
}

/// RPS (docs/kernel.md#rps): the receiving CPU runs only the driver poll and steers
/// each packet to a target CPU's backlog, woken by an IPI at the end of
/// `net_rx_action`; the target's backlog NAPI runs the IP stack. A full backlog drops
/// (softnet_stat column 2).
#[test]
fn rps_moves_the_stack_to_the_target_cpu() {
    let mut cfg = router_config(1_000_000.0, 40.0);
    cfg.host.cpus = 2;
    cfg.ingress.queues[0].rps_cpus = vec![1];
    let r = napilab_sim::run(&cfg, &router_profile(), 1);
    let iv = &r.observation.intervals[0];
    let processed = |c: u32| {
        iv.cpu(c)
            .and_then(|x| x.softnet_processed.as_ref())
            .expect("processed")
            .value
    };
    assert!(rel(r.model.totals.forwarded_pps, 1e6) < 0.02);
    assert_eq!(processed(0), 0.0);
    assert!(rel(processed(1), 1e6) < 0.02);
    let cpu1 = iv.cpu(1).expect("cpu 1");
    assert!(cpu1.received_rps.as_ref().expect("rps").value > 1_000.0);
    assert_eq!(cpu1.softnet_dropped.as_ref().expect("drops").value, 0.0);
    let (c0, c1) = (&r.model.totals.cpus[0], &r.model.totals.cpus[1]);
    assert!(c1.busy > c0.busy, "{} vs {}", c1.busy, c0.busy);

    // Spreading over both CPUs lifts the single-core limit of about 1.75 Mpps.
    let mut cfg = router_config(2_400_000.0, 40.0);
    cfg.host.cpus = 2;
    cfg.ingress.queues[0].rps_cpus = vec![0, 1];
    let r = napilab_sim::run(&cfg, &router_profile(), 1);
    assert!(
        r.model.totals.forwarded_pps > 2.0e6,
        "{}",
        r.model.totals.forwarded_pps
    );

    // One target CPU, overloaded: its backlog overflows.
    let mut cfg = router_config(3_000_000.0, 40.0);
    cfg.host.cpus = 2;
    cfg.ingress.queues[0].rps_cpus = vec![1];
    let r = napilab_sim::run(&cfg, &router_profile(), 1);
    let drops = r.observation.intervals[0]
        .cpu(1)
        .and_then(|c| c.softnet_dropped.as_ref())
        .expect("drops")
        .value;
    assert!(drops > 100_000.0, "backlog drops {drops}");
}

/// TX reclaim inside the RX poll (docs/kernel.md#packet-path, step 6) with a combined TxRx vector:
/// no separate TX-completion IRQs; the one vector fires for both; the ring never
/// overflows because every RX poll reclaims first. At saturation the RX poll runs
/// continuously and reclaims as it goes, so the TX-completion IRQ overhead of the
/// two-vector router disappears.
#[test]
fn combined_vector_reclaims_inside_the_rx_poll() {
    use napilab_sim::config::TxCompletion;
    let run = |pps: f64, completion| {
        let mut cfg = router_config(pps, 40.0);
        cfg.egress.completion = completion;
        napilab_sim::run(&cfg, &router_profile(), 1)
    };
    let r = run(500_000.0, TxCompletion::RxNapi);
    let c = &r.model.totals.cpus[0];
    assert_eq!(c.tx_completion_irqs_per_s, 0.0);
    assert!(c.rx_irqs_per_s > 10_000.0);
    assert!(rel(r.model.totals.forwarded_pps, 500_000.0) < 0.02);
    assert_eq!(r.model.totals.tx_dropped_pps, 0.0);
    // All NET_RX softirqs now come from the one vector (no misreading 2 excess).
    assert!(c.net_rx_softirqs_per_s < 1.1 * c.rx_irqs_per_s);
    let sat = |completion| run(2_200_000.0, completion).model.totals.forwarded_pps;
    let (combined, separate) = (sat(TxCompletion::RxNapi), sat(TxCompletion::TxIrq));
    assert!(combined > separate, "{combined:.0} vs {separate:.0}");
}

/// Invalid configs built in code are reported with the field, not run.
#[test]
fn try_run_names_the_bad_field() {
    let mut cfg = router_config(1_000.0, 1.0);
    cfg.ingress.queues[0].rps_cpus = vec![7];
    let e = napilab_sim::try_run(&cfg, &router_profile(), 1).expect_err("rejected");
    assert_eq!(e.field, "ingress.queues[0].rps_cpus");
}

#[test]
fn completion_cpu_must_exist() {
    let mut cfg = router_config(1_000.0, 1.0);
    cfg.egress.completion = napilab_sim::config::TxCompletion::OnCpu(3);
    let e = napilab_sim::try_run(&cfg, &router_profile(), 1).expect_err("rejected");
    assert_eq!(e.field, "egress.completion.on_cpu");
    assert!(e.to_string().contains("host.cpus = 1"), "{e}");
}
