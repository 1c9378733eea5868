//! Feature combinations run to completion with consistent books: every packet that
//! arrived is served, dropped, or still in flight; CPU time never exceeds the window;
//! the tick view's shares add up to one.

mod common;
use common::*;
use napilab_sim::config::{AppConfig, BusyPoll, ClosedLoop, NapiContext, TickMode, TxCompletion};

#[test]
fn feature_combinations_keep_consistent_books() {
    let mut n = 0;
    for cpus in [1u32, 2] {
        for threaded in [false, true] {
            for rps in [false, true] {
                for app in [None, Some(false), Some(true)] {
                    for (completion, tick, kernel) in [
                        (TxCompletion::TxIrq, TickMode::NohzIdle, "6.8"),
                        (TxCompletion::RxNapi, TickMode::Periodic, "5.4"),
                    ] {
                        n += 1;
                        let mut cfg = router_config(600_000.0 + 150_000.0 * n as f64, 8.0);
                        cfg.host.cpus = cpus;
                        cfg.host.tick = tick;
                        cfg.host.kernel = kernel.into();
                        cfg.egress.completion = completion;
                        let q = &mut cfg.ingress.queues[0];
                        if threaded {
                            q.napi = NapiContext::Threaded;
                        }
                        q.defer_hard_irqs = (n % 3) as u32;
                        q.gro_flush_timeout_ns = if n % 3 > 0 { 10_000 } else { 0 };
                        q.irq_suspend_timeout_ns = 1_000_000;
                        if rps {
                            q.rps_cpus = (0..cpus).collect();
                        }
                        if let Some(busy) = app {
                            cfg.apps = vec![AppConfig {
                                name: "app".into(),
                                cpu: cpus - 1,
                                fifo_priority: None,
                                kernel_cycles_per_packet: 500.0,
                                kernel_cycles_per_return: 0.0,
                                kernel_cycles_per_resume: 0.0,
                                user_cycles_per_packet: 1500.0,
                                reply_bytes: Some(200),
                                socket_limit: 256,
                                busy_poll: busy.then_some(BusyPoll {
                                    usecs: (n % 2) as u32 * 50,
                                    budget: 16,
                                    queue: 0,
                                    prefer: true,
                                    nonblocking_epoll: false,
                                }),
                            }];
                            cfg.traffic.classes[0].app = Some("app".into());
                            if n % 2 == 0 {
                                cfg.traffic.classes[0].closed_loop = Some(ClosedLoop {
                                    clients: 32,
                                    think_us: 5.0,
                                    rtt_us: 10.0,
                                });
                            }
                        }
                        let r = napilab_sim::run(&cfg, &router_profile(), n);
                        for c in &r.model.classes {
                            assert!(
                                c.forwarded + c.rx_dropped + c.tx_dropped <= c.offered,
                                "case {n}: {c:?}"
                            );
                            // In flight at the end: at most what rings, backlogs and
                            // sockets can hold.
                            let in_flight = c.offered - c.forwarded - c.rx_dropped - c.tx_dropped;
                            assert!(in_flight <= 512 + 1000 * 2 + 256, "case {n}: {in_flight}");
                        }
                        for cpu in &r.model.totals.cpus {
                            assert!(cpu.busy <= 1.0 + 1e-9 && cpu.busy >= 0.0, "case {n}");
                            let ticks = cpu.tick_irq
                                + cpu.tick_softirq
                                + cpu.tick_system
                                + cpu.tick_user
                                + cpu.tick_idle;
                            assert!(ticks == 0.0 || (ticks - 1.0).abs() < 1e-9, "case {n}");
                        }
                    }
                }
            }
        }
    }
}
