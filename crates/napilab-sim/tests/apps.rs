//! Application threads receiving locally delivered traffic (docs/kernel.md#cpu-accounting,
//! docs/kernel.md#softirq-restart; misreading M8 of docs/studies.md#misreadings).

mod common;
use common::*;
use napilab_sim::config::AppConfig;
use napilab_sim::SimConfig;

fn server(rate: f64, app_cpu: u32, cpus: u32) -> SimConfig {
    let mut cfg = router_config(rate, 200.0);
    cfg.host.hz = 1000;
    cfg.host.cpus = cpus;
    cfg.host.kernel = "6.8".into();
    cfg.apps = vec![AppConfig {
        name: "server".into(),
        cpu: app_cpu,
        fifo_priority: None,
        kernel_cycles_per_packet: 1_000.0,
        kernel_cycles_per_return: 0.0,
        kernel_cycles_per_resume: 0.0,
        user_cycles_per_packet: 3_000.0,
        reply_bytes: Some(128),
        socket_limit: 1000,
        busy_poll: None,
    }];
    cfg.traffic.classes[0].app = Some("server".into());
    cfg
}

/// The application's work shows as user time on its CPU, in the true view and in the
/// tick view (a thread is sampled by the tick, unlike softirq from idle), while the
/// packet path stays on the IRQ's CPU.
#[test]
fn app_on_its_own_cpu_is_user_time() {
    let r = napilab_sim::run(&server(300_000.0, 1, 2), &router_profile(), 1);
    let t = &r.model.totals;
    assert!(rel(r.model.classes[0].forwarded_pps, 300_000.0) < 0.02);
    let (c0, c1) = (&t.cpus[0], &t.cpus[1]);
    // 3,000 user cycles at 3.2 GHz per packet: 0.28 of a CPU, plus the cache penalty
    // (after_interrupt) each time a TX-completion IRQ interrupted the application.
    assert!(
        c1.user > 0.28 * 0.97 && c1.user < 0.28 * 1.15,
        "user {:.3}",
        c1.user
    );
    assert!(rel(c1.tick_user, c1.user / (c1.user + c1.kthread + c1.idle)) < 0.25);
    assert!(c0.user == 0.0 && c0.softirq_inline > 0.1);
    // Every reply leaves through the egress.
    assert!(rel(t.forwarded_pps, 300_000.0) < 0.02);
    let l = &r.model.classes[0].latency;
    assert!(l.mean_us > 11.0 && l.mean_us < 40.0, "{l:?}");
}

/// Misreading 8 and the kernel switch: the application shares the IRQ's CPU with a
/// flood the softirq cannot keep up with (3.5 Mpps). On 5.15 (4.9-6.4 rule) the
/// softirq work moves to ksoftirqd, which the fair scheduler shares with the
/// application. On 6.8 every IRQ exit (here the TX completions of the replies) runs
/// the softirq inline again, and the application starves: the receive livelock the
/// 4.9 rule ("softirq: Let ksoftirqd do its job") was made to prevent.
#[test]
fn ksoftirqd_competes_with_the_application() {
    let run = |kernel: &str| {
        let mut cfg = server(3_500_000.0, 0, 1);
        cfg.host.kernel = kernel.into();
        napilab_sim::run(&cfg, &router_profile(), 1)
    };
    let old = run("5.15");
    let c = &old.model.totals.cpus[0];
    assert!(c.busy > 0.99);
    assert!(c.ksoftirqd > 0.3, "5.15 ksoftirqd {:.3}", c.ksoftirqd);
    assert!(c.user > 0.2, "5.15 user {:.3}", c.user);
    // ksoftirqd's time shows as softirq in /proc/stat.
    assert!(c.tick_softirq > 0.3, "{:.3}", c.tick_softirq);
    let new = run("6.8");
    let c = &new.model.totals.cpus[0];
    assert!(
        c.softirq_inline > 0.6,
        "6.8 inline softirq {:.3}",
        c.softirq_inline
    );
    assert!(c.user < 0.15, "6.8 user {:.3}", c.user);
    let served = |r: &napilab_sim::SimResult| r.model.classes[0].forwarded_pps;
    assert!(
        served(&new) < 0.5 * served(&old),
        "requests served: 5.15 {:.0}/s, 6.8 {:.0}/s",
        served(&old),
        served(&new)
    );
}

fn closed_loop_server(clients: u32, think_us: f64, rtt_us: f64) -> SimConfig {
    let mut cfg = server(0.0, 1, 2);
    cfg.apps[0].user_cycles_per_packet = 10_000.0;
    cfg.traffic.classes[0].closed_loop = Some(napilab_sim::config::ClosedLoop {
        clients,
        think_us,
        rtt_us,
    });
    cfg
}

/// Closed-loop clients (issue: "closed-loop clients"): Little's law ties throughput,
/// clients and the cycle time: X = N / (response time + round trip + think time), where
/// the twin's response time is measured at the server from request arrival to reply on
/// the wire (its recorded latency minus the RX DMA delay it adds).
#[test]
fn closed_loop_obeys_littles_law() {
    let p = router_profile();
    let rx_dma_us = p.latency_ns.rx_dma as f64 / 1e3;
    for (n, think, rtt) in [(1, 0.0, 30.0), (8, 20.0, 50.0)] {
        let r = napilab_sim::run(&closed_loop_server(n, think, rtt), &p, 1);
        let c = &r.model.classes[0];
        let cycle_us = c.latency.mean_us - rx_dma_us + rtt + think;
        let little = n as f64 / (cycle_us * 1e-6);
        eprintln!(
            "closed loop N={n}: twin {:.0}/s, Little {little:.0}/s",
            c.forwarded_pps
        );
        assert!(
            rel(c.forwarded_pps, little) < 0.03,
            "N={n}: twin {:.0}/s, Little {little:.0}/s",
            c.forwarded_pps
        );
        assert_eq!(c.rx_dropped_pps, 0.0);
    }
}

/// With many clients the application's CPU saturates and throughput levels off at
/// its capacity (about 1 / (10,000 user + 1,000 kernel + 550 xmit cycles) at 3.2 GHz,
/// less the TX-completion work on the same CPU).
#[test]
fn closed_loop_saturates_the_application() {
    let p = router_profile();
    let few = napilab_sim::run(&closed_loop_server(4, 0.0, 20.0), &p, 1);
    let many = napilab_sim::run(&closed_loop_server(256, 0.0, 20.0), &p, 1);
    let x = |r: &napilab_sim::SimResult| r.model.classes[0].forwarded_pps;
    let capacity = 3.2e9 / 11_550.0;
    eprintln!(
        "closed loop: N=4 {:.0}/s, N=256 {:.0}/s, capacity bound {capacity:.0}/s",
        x(&few),
        x(&many)
    );
    assert!(
        x(&many) < capacity && x(&many) > 0.8 * capacity,
        "{:.0}",
        x(&many)
    );
    assert!(x(&few) < 0.8 * x(&many));
    assert!(many.model.totals.cpus[1].busy > 0.98);
    assert!(
        many.model.classes[0].latency.mean_us > 10.0 * few.model.classes[0].latency.mean_us / 4.0
    );
}

fn with_busy_poll(mut cfg: SimConfig, usecs: u32, budget: u32, prefer: bool) -> SimConfig {
    cfg.apps[0].busy_poll = Some(napilab_sim::config::BusyPoll {
        usecs,
        budget,
        queue: 0,
        prefer,
        nonblocking_epoll: false,
    });
    cfg
}

/// Plain busy polling (docs/kernel.md#busy-polling): the application polls
/// the NAPI instance from its own context, charged as its system time, burning the
/// CPU at low load and cutting latency. Without prefer-busy-poll, `busy_poll_stop`
/// completes the instance and unmasks the IRQ after every busy loop that found data,
/// so the IRQ rate does not fall: the reason prefer-busy-poll exists.
#[test]
fn plain_busy_polling_burns_the_cpu_but_keeps_irqs() {
    let irq = napilab_sim::run(&server(100_000.0, 0, 1), &router_profile(), 1);
    let busy = napilab_sim::run(
        &with_busy_poll(server(100_000.0, 0, 1), 1000, 8, false),
        &router_profile(),
        1,
    );
    let (ci, cb) = (&irq.model.totals.cpus[0], &busy.model.totals.cpus[0]);
    assert!(rel(busy.model.classes[0].forwarded_pps, 100_000.0) < 0.02);
    assert!(
        ci.busy < 0.8 && cb.busy > 0.99,
        "{:.3} vs {:.3}",
        ci.busy,
        cb.busy
    );
    assert!(cb.kthread > 0.5, "system time {:.3}", cb.kthread);
    assert!(cb.tick_system > 0.5, "tick system {:.3}", cb.tick_system);
    // Which system time: busy polling, and the application's thread by name.
    assert!(cb.busy_poll > 0.5, "busy-poll time {:.3}", cb.busy_poll);
    assert!(cb.busy_polls_per_s > 10_000.0, "{}", cb.busy_polls_per_s);
    let iv = &busy.observation.intervals[0];
    let tr = iv.trace.as_ref().expect("trace view");
    let bp = tr
        .context_shares
        .iter()
        .find(|s| s.cpu == 0 && s.context == napilab_core::trace::ExecContext::BusyPoll)
        .expect("busy-poll context");
    assert!((bp.share.value - cb.busy_poll).abs() < 1e-9);
    let app = iv
        .threads
        .iter()
        .find(|t| matches!(&t.role, napilab_core::ThreadRole::Application { name } if name == "server"))
        .expect("application thread listed");
    // The thread's time holds its busy polls, system calls and own work.
    let share = app.cpu.as_ref().expect("cpu").value;
    assert!(
        share >= cb.busy_poll + cb.app_system + cb.user - 1e-3,
        "thread {share:.3} vs busy poll {:.3} + system calls {:.3} + user {:.3}",
        cb.busy_poll,
        cb.app_system,
        cb.user
    );
    assert!(
        cb.rx_irqs_per_s > 0.5 * ci.rx_irqs_per_s,
        "{} vs {}",
        cb.rx_irqs_per_s,
        ci.rx_irqs_per_s
    );
    let lat = |r: &napilab_sim::SimResult| r.model.classes[0].latency.mean_us;
    assert!(
        lat(&busy) < 0.8 * lat(&irq),
        "{} vs {}",
        lat(&busy),
        lat(&irq)
    );
}

/// The four modes of docs/studies.md IRQS-1 on one core running the application and its NAPI
/// instance (combined TxRx channel as on the ConnectX-4): No Coalescing, hardware
/// coalescing (rx-usecs 8, rx-frames 128; DIM itself is not modelled), Busy Wait, IRQ
/// Suspend, each with its published settings. Published findings checked
/// qualitatively: Busy Wait burns 100% CPU at any load; IRQ Suspend falls back to
/// interrupt-driven CPU use when load is low; under load both take almost no NIC IRQs
/// and almost no softirq time, and IRQ Suspend's tail latency beats No Coalescing.
/// Why IRQ Suspend's latency is above Busy Wait's at 500k requests/s (mean about 1.6x,
/// p99 about 1.4x; the study found the tails equal "under load"): with
/// busy_poll_usecs 0, an epoll_wait that finds the socket empty after its one busy
/// poll blocks and hands the instance back (`napi_resume_irqs` schedules it); the
/// deferral then keeps the IRQ masked, so the next request waits for the 20 us
/// gro-flush timer's poll (half of it on average: the twin counts about 3,500 timer
/// polls/s at 500k/s). This is the kernel's mechanism, not a modelling gap: the gap
/// closes as the load approaches what the core can serve, where the socket is rarely
/// empty (here ~555k/s: at 545k/s the timer fires 660 times/s and p99 is within 15%;
/// at saturation the two modes are identical). The study's "under load" points ran
/// the 8 servers near their maximum with ~25k cycles per query.
#[test]
fn irq_suspension_versus_busy_wait() {
    let mode = |name: &str, pps: f64| {
        let mut cfg = server(pps, 0, 1);
        cfg.measurement.duration_ms = 50.0;
        cfg.host.kernel = "6.15".into();
        // ConnectX-4 channels are combined: TX completions are reclaimed by the same
        // NAPI instance (so by the busy poller too).
        cfg.egress.completion = napilab_sim::config::TxCompletion::RxNapi;
        let q = &mut cfg.ingress.queues[0];
        match name {
            "no_coalescing" => cfg.ingress.rx_usecs = 1,
            "busy_wait" => {
                q.defer_hard_irqs = 100;
                q.gro_flush_timeout_ns = 5_000_000;
                cfg = with_busy_poll(cfg, 1000, 64, true);
            }
            "irq_suspend" => {
                q.defer_hard_irqs = 100;
                q.gro_flush_timeout_ns = 20_000;
                q.irq_suspend_timeout_ns = 20_000_000;
                cfg = with_busy_poll(cfg, 0, 64, true);
            }
            _ => {
                cfg.ingress.rx_usecs = 8;
                cfg.ingress.rx_frames = 128;
            }
        }
        let r = napilab_sim::run(&cfg, &router_profile(), 1);
        let c = r.model.totals.cpus[0].clone();
        let l = r.model.classes[0].latency.clone();
        eprintln!(
            "{name:>14} {pps:>7.0}/s: busy {:.3} softirq {:.3} sys {:.3} user {:.3} NIC IRQs/s {:>6.0} mean {:.1} us p99 {:.1} us",
            c.busy,
            c.softirq_inline + c.ksoftirqd,
            c.kthread,
            c.user,
            c.rx_irqs_per_s,
            l.mean_us,
            l.p99_us
        );
        let cl = &r.model.classes[0];
        assert!(
            rel(cl.forwarded_pps, cl.offered_pps) < 0.01,
            "{name}: all served"
        );
        (c, l)
    };
    mode("coalescing", 500_000.0);
    let (bw_low, _) = mode("busy_wait", 20_000.0);
    let (is_low, _) = mode("irq_suspend", 20_000.0);
    assert!(
        bw_low.busy > 0.99,
        "busy wait at low load {:.3}",
        bw_low.busy
    );
    assert!(
        is_low.busy < 0.5,
        "irq suspend at low load {:.3}",
        is_low.busy
    );
    let (nc, ncl) = mode("no_coalescing", 500_000.0);
    let (bw, _) = mode("busy_wait", 500_000.0);
    let (is, isl) = mode("irq_suspend", 500_000.0);
    assert!(bw.busy > 0.99);
    for c in [&bw, &is] {
        assert!(
            c.rx_irqs_per_s < 0.05 * nc.rx_irqs_per_s,
            "{} vs {}",
            c.rx_irqs_per_s,
            nc.rx_irqs_per_s
        );
        assert!(c.softirq_inline + c.ksoftirqd < 0.05);
    }
    assert!(nc.softirq_inline > 0.1);
    assert!(isl.p99_us < ncl.p99_us, "{} vs {}", isl.p99_us, ncl.p99_us);
    // Near the core's capacity the socket is rarely empty and the tails meet.
    let (_, bw_hi) = mode("busy_wait", 545_000.0);
    let (_, is_hi) = mode("irq_suspend", 545_000.0);
    assert!(
        rel(is_hi.p99_us, bw_hi.p99_us) < 0.15,
        "p99 at 545k/s: irq suspend {:.1} us, busy wait {:.1} us",
        is_hi.p99_us,
        bw_hi.p99_us
    );
}
