//! A single-queue poll loop (docs/sim.md "Threaded busy polling"): one RX queue whose
//! IRQ is on CPU 0 and one application thread on CPU 1 that receives in a loop, with
//! the packets reaching it in one of three ways. The configurations the predictions
//! of threaded busy polling are made on (`examples/poll-loop.rs`) and the tests pin.

use crate::config::{
    AppConfig, BusyPoll, ClassConfig, EgressConfig, HostConfig, IngressConfig, MeasurementConfig,
    NapiContext, NetSettings, Pattern, RxQueueConfig, SimConfig, TickMode, TrafficConfig,
};

/// How received packets reach the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Interrupt-driven: the IRQ on CPU 0 schedules the instance, NET_RX polls it
    /// there and wakes the blocked application on CPU 1.
    Interrupt,
    /// Application busy polling (SO_BUSY_POLL / epoll busy_poll_usecs, budget 8,
    /// without prefer-busy-poll): the application polls the instance from CPU 1
    /// whenever its socket is empty, and never blocks.
    AppBusyPoll,
    /// Threaded busy polling (6.19): the instance's kthread polls continuously on
    /// CPU 0 with the IRQ masked and wakes the blocked application on CPU 1.
    ThreadedBusyPoll,
}

impl Delivery {
    pub const ALL: [Delivery; 3] = [
        Delivery::Interrupt,
        Delivery::AppBusyPoll,
        Delivery::ThreadedBusyPoll,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Interrupt => "interrupt-driven",
            Delivery::AppBusyPoll => "application busy poll",
            Delivery::ThreadedBusyPoll => "threaded busy poll",
        }
    }
}

/// Application cycles per packet in its own context: the receive system call
/// (kernel) and its own work (user). A small UDP receiver; ASSUMED.
pub const APP_KERNEL_CYCLES: f64 = 1_500.0;
pub const APP_USER_CYCLES: f64 = 500.0;

/// The poll loop at `rate_pps` (64-byte frames, Poisson arrivals) for `duration_ms`
/// after a 20 ms warm-up, on a 2-CPU host running Linux 6.19.
pub fn config(delivery: Delivery, rate_pps: f64, duration_ms: f64) -> SimConfig {
    let napi = match delivery {
        Delivery::ThreadedBusyPoll => NapiContext::ThreadedBusyPoll,
        Delivery::Interrupt | Delivery::AppBusyPoll => NapiContext::Softirq,
    };
    let busy_poll = (delivery == Delivery::AppBusyPoll).then_some(BusyPoll {
        // A receive loop that never blocks: it busy-polls for as long as the run lasts.
        usecs: u32::MAX,
        budget: 8,
        queue: 0,
        prefer: false,
        nonblocking_epoll: false,
    });
    SimConfig {
        name: format!("poll loop, {}", delivery.as_str()),
        host: HostConfig {
            cpus: 2,
            hz: 250,
            kernel: crate::twin_plan::BUSY_POLL_KERNEL.into(),
            tick: TickMode::NohzIdle,
            sched_scaling: Default::default(),
            // CFS, as when docs/sim.md's dated predictions of this loop were written.
            scheduler: Default::default(),
        },
        settings: NetSettings::default(),
        ingress: IngressConfig {
            name: "eth0".into(),
            rx_ring_size: 512,
            rx_usecs: 0,
            rx_frames: 0,
            moderation: Default::default(),
            adaptive_rx: false,
            irq_mode: Default::default(),
            veth: false,
            queues: vec![RxQueueConfig {
                cpu: 0,
                napi,
                thread: Default::default(),
                defer_hard_irqs: 0,
                gro_flush_timeout_ns: 0,
                irq_suspend_timeout_ns: 0,
                rps_cpus: Vec::new(),
                rings: Vec::new(),
                ring_poll: Default::default(),
            }],
        },
        egress: EgressConfig::default(),
        traffic: TrafficConfig {
            burst: 1,
            rate_pps,
            pattern: Pattern::Poisson,
            classes: vec![ClassConfig {
                name: "rx".into(),
                share: 1.0,
                size_bytes: 64,
                queue: Some(0),
                ring: None,
                app: Some("receiver".into()),
                closed_loop: None,
                client: None,
            }],
        },
        measurement: MeasurementConfig {
            duration_ms,
            warmup_ms: 20.0,
            interval_ms: None,
        },
        apps: vec![AppConfig {
            name: "receiver".into(),
            cpu: 1,
            fifo_priority: None,
            kernel_cycles_per_packet: APP_KERNEL_CYCLES,
            kernel_cycles_per_return: 0.0,
            kernel_cycles_per_resume: 0.0,
            user_cycles_per_packet: APP_USER_CYCLES,
            reply_bytes: None,
            socket_limit: 1000,
            busy_poll,
        }],
        tunnel: None,
    }
}
