//! Turning a finished simulation into napilab's `Observation` (OriginKind::Model) plus
//! the twin-only detail core's Observation has no place for yet: true CPU time by
//! context next to the tick-sampled view, and per-class latency.

// Core's types are being extended concurrently; `..Default::default()` keeps this
// file compiling when they gain optional fields (hence needless_update is allowed).
#![allow(clippy::needless_update)]

use napilab_core::trace::{
    ContextShare, CpuTraceTime, ExecContext, IrqTrace, NapiPollTrace, SoftirqTrace, TraceInterval,
};
use napilab_core::{
    CpuAccounting, CpuInterval, CpuTimeShares, Device, DeviceInterval, HostFacts, HostInterval, Hz,
    Interval, IrqInfo, IrqInterval, IrqMatch, Metric, Napi as CoreNapi, Observation, Origin,
    OriginKind, Poller, QdiscInfo, QdiscInterval, QueueInterval, QueueKind, RxQueue, Settings,
    Source, ThreadInfo, ThreadInterval, ThreadRole, TopologyMap, TxQueue as CoreTxQueue, Unit,
    OBSERVATION_SCHEMA,
};
use serde::Serialize;

use crate::accounting::{Column, CpuTime, Ctx};
use crate::config::{QdiscKind, TickMode};
use crate::cpu::ThreadKind;
use crate::nic::LineKind;
use crate::sim::{Counts, Sim};
use napilab_core::LatencySummary;

/// Everything one run produced.
#[derive(Clone, Debug, Serialize)]
pub struct SimResult {
    /// The shared vocabulary: rates and counts with `Source::Model`, the /proc/stat
    /// view with `Source::Tick`.
    pub observation: Observation,
    pub model: ModelReport,
}

/// Twin-only detail (see the report for the core additions that would carry it).
#[derive(Clone, Debug, Serialize)]
pub struct ModelReport {
    pub config: String,
    pub profile: String,
    pub seed: u64,
    /// `nohz_idle` or `periodic`: how the tick view was sampled.
    pub tick: String,
    /// Events the loop processed (for the benchmark).
    pub events: u64,
    /// The whole measured window as one interval.
    pub totals: ModelInterval,
    pub intervals: Vec<ModelInterval>,
    pub classes: Vec<ClassReport>,
    /// Polls by RX packets handled (index = packets; the last bucket is the weight).
    pub packets_per_poll_histogram: Vec<u64>,
    /// Measured window in seconds.
    pub duration_s: f64,
    /// Where the model counted lost packets, as core's experiment results name them.
    pub loss_counters: Vec<(String, u64)>,
    /// Load generator threads (classes with a `client`), with the lab generator's
    /// health figures.
    pub clients: Vec<ClientReport>,
    /// A tunnel's packets handed to the socket during the window, whenever they
    /// arrived, per second: what a receiver measures (the classes' `forwarded_pps`
    /// counts the packets that arrived in the window, which differs once packets wait
    /// longer than the window). None without a tunnel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tunnel_delivered_pps: Option<f64>,
}

/// One load generator thread over the measured window.
#[derive(Clone, Debug, Serialize)]
pub struct ClientReport {
    pub class: String,
    pub cpu: u32,
    /// Requests intended in the window and sent; of those sent more than 100 us after
    /// their intended time; the latest lateness.
    pub sent: u64,
    pub late: u64,
    pub max_late_us: f64,
    /// Intended sends of the window never sent (the open loop fell behind).
    pub behind: u64,
    /// The thread's CPU time over the window, a fraction of one CPU, with the softirqs
    /// run on its CPU (as the lab's generator thread's runtime holds those run at its
    /// bh-enable).
    pub cpu_busy: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModelInterval {
    pub index: usize,
    pub start_s: f64,
    pub duration_s: f64,
    pub offered_pps: f64,
    /// Packets put on the egress wire.
    pub forwarded_pps: f64,
    pub rx_dropped_pps: f64,
    pub tx_dropped_pps: f64,
    pub cpus: Vec<CpuReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CpuReport {
    pub cpu: u32,
    /// True time by context, fractions of the interval.
    pub hardirq: f64,
    pub softirq_inline: f64,
    pub ksoftirqd: f64,
    /// Kernel work in thread context: NAPI kthreads, context switches, system calls.
    pub kthread: f64,
    /// Applications' own work.
    pub user: f64,
    /// Finer split of the above: device IRQ handlers (in `hardirq`, with the NAPI
    /// timer and RPS IPIs making up the rest), inline softirq entered from
    /// `local_bh_enable` (in `softirq_inline`, the rest entered on IRQ exit), and the
    /// parts of `kthread` spent in threaded-NAPI polls, in busy polling and in
    /// applications' other system calls (the rest is context switches).
    pub hardirq_device: f64,
    pub softirq_bh_enable: f64,
    pub napi_thread: f64,
    pub busy_poll: f64,
    pub app_system: f64,
    pub idle: f64,
    pub busy: f64,
    /// Of `busy` (in `kthread`), the share the host's other work took (the profile's
    /// `stalls`, replayed).
    pub stalled: f64,
    /// What /proc/stat would show (shares of the sum of its columns, as mpstat does).
    pub tick_irq: f64,
    pub tick_softirq: f64,
    pub tick_system: f64,
    pub tick_user: f64,
    pub tick_idle: f64,
    pub ticks_sampled: u64,
    pub hardirqs_per_s: f64,
    pub rx_irqs_per_s: f64,
    pub tx_completion_irqs_per_s: f64,
    pub net_rx_softirqs_per_s: f64,
    pub net_tx_softirqs_per_s: f64,
    pub polls_per_s: f64,
    /// Polls by threaded-NAPI kthreads and by busy polling (included in `polls_per_s`).
    pub napi_thread_polls_per_s: f64,
    pub busy_polls_per_s: f64,
    /// Returns of the applications' `epoll_wait` with events on this CPU.
    pub epoll_returns_per_s: f64,
    pub packets_per_poll: f64,
    pub full_budget_polls_per_s: f64,
    pub time_squeeze_per_s: f64,
    /// NAPI polls by execution context (every context that polled).
    pub polls_by_context: Vec<ContextPolls>,
}

/// NAPI polls of one CPU in one execution context over an interval.
#[derive(Clone, Debug, Serialize)]
pub struct ContextPolls {
    pub context: ExecContext,
    pub polls: u64,
    pub packets: u64,
    /// Polls that returned no packet.
    pub empty_polls: u64,
    pub full_budget_polls: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassReport {
    pub name: String,
    pub size_bytes: u32,
    /// Packets that arrived in the window, and of those: served (forwarded, or
    /// delivered to the application), dropped at the NIC ring, RPS backlog or socket
    /// (`rx_dropped`), dropped at the egress (`tx_dropped`).
    pub offered: u64,
    pub forwarded: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub offered_pps: f64,
    pub forwarded_pps: f64,
    pub rx_dropped_pps: f64,
    pub tx_dropped_pps: f64,
    /// From NIC arrival to the end of transmission on the egress wire.
    pub latency: LatencySummary,
}

impl ModelReport {
    pub fn cpu(&self, cpu: u32) -> Option<&CpuReport> {
        self.totals.cpus.iter().find(|c| c.cpu == cpu)
    }

    pub fn class(&self, name: &str) -> Option<&ClassReport> {
        self.classes.iter().find(|c| c.name == name)
    }
}

fn m(v: f64, unit: Unit) -> Metric {
    Metric::new(v, unit, Source::Model)
}

fn cpu_report(sim: &Sim, c: usize, k: &Counts, t: &CpuTime, secs: f64) -> CpuReport {
    let window = secs * 1e9;
    let f = |ctx: Ctx| t.busy_ns[ctx as usize] as f64 / window;
    let busy_ns: u64 = t.busy_ns.iter().sum();
    let busy = busy_ns as f64 / window;
    let stalled = k.cpus[c].stalled_ns as f64 / window;
    // /proc/stat columns in ns: sampled ticks, plus (NOHZ) measured idle sleep.
    let tick_ns = sim.acct.tick_ns() as f64;
    let col = |x: Column| t.ticks[x as usize] as f64 * tick_ns;
    let idle_col = if sim.acct.nohz() {
        (window - busy_ns as f64).max(0.0)
    } else {
        col(Column::Idle)
    };
    let (irq, sirq, sys, usr) = (
        col(Column::Irq),
        col(Column::Softirq),
        col(Column::System),
        col(Column::User),
    );
    let sum = irq + sirq + sys + usr + idle_col;
    let share = |x: f64| if sum > 0.0 { x / sum } else { 0.0 };
    let cc = &k.cpus[c];
    let mut rx_irqs = 0;
    let mut tx_irqs = 0;
    for (l, line) in sim.lines.iter().enumerate() {
        if line.cpu == c {
            match line.kind {
                LineKind::Rx { .. } => rx_irqs += k.lines[l],
                LineKind::TxCompletion { .. } => tx_irqs += k.lines[l],
            }
        }
    }
    let rate = |x: u64| x as f64 / secs;
    CpuReport {
        cpu: c as u32,
        hardirq: f(Ctx::HardIrq) + f(Ctx::OtherIrq),
        softirq_inline: f(Ctx::Softirq) + f(Ctx::SoftirqBh),
        ksoftirqd: f(Ctx::Ksoftirqd),
        kthread: f(Ctx::KThread) + f(Ctx::NapiThread) + f(Ctx::BusyPoll) + f(Ctx::AppKernel),
        user: f(Ctx::User),
        hardirq_device: f(Ctx::HardIrq),
        softirq_bh_enable: f(Ctx::SoftirqBh),
        napi_thread: f(Ctx::NapiThread),
        busy_poll: f(Ctx::BusyPoll),
        app_system: f(Ctx::AppKernel),
        idle: 1.0 - busy,
        busy,
        stalled,
        tick_irq: share(irq),
        tick_softirq: share(sirq),
        tick_system: share(sys),
        tick_user: share(usr),
        tick_idle: share(idle_col),
        ticks_sampled: t.ticks.iter().sum(),
        hardirqs_per_s: rate(cc.hardirqs),
        rx_irqs_per_s: rate(rx_irqs),
        tx_completion_irqs_per_s: rate(tx_irqs),
        net_rx_softirqs_per_s: rate(cc.rx_softirqs),
        net_tx_softirqs_per_s: rate(cc.tx_softirqs),
        polls_per_s: rate(cc.polls),
        napi_thread_polls_per_s: rate(cc.thread_polls),
        busy_polls_per_s: rate(cc.busy_polls),
        epoll_returns_per_s: rate(cc.epoll_returns),
        packets_per_poll: if cc.polls > 0 {
            cc.poll_packets as f64 / cc.polls as f64
        } else {
            0.0
        },
        full_budget_polls_per_s: rate(cc.full_polls),
        time_squeeze_per_s: rate(cc.squeeze),
        polls_by_context: ExecContext::ALL
            .iter()
            .enumerate()
            .filter(|(i, _)| cc.ctx_polls[*i] > 0)
            .map(|(i, &context)| ContextPolls {
                context,
                polls: cc.ctx_polls[i],
                packets: cc.ctx_packets[i],
                empty_polls: cc.ctx_empty[i],
                full_budget_polls: cc.ctx_full[i],
            })
            .collect(),
    }
}

fn model_interval(
    sim: &Sim,
    index: usize,
    start_s: f64,
    secs: f64,
    k: &Counts,
    times: &[CpuTime],
) -> ModelInterval {
    let sum = |v: &[u64]| v.iter().sum::<u64>() as f64 / secs;
    ModelInterval {
        index,
        start_s,
        duration_s: secs,
        offered_pps: sum(&k.class_offered),
        forwarded_pps: k.tx_packets as f64 / secs,
        rx_dropped_pps: sum(&k.class_rx_dropped),
        tx_dropped_pps: sum(&k.class_tx_dropped),
        cpus: (0..sim.cpus.len())
            .map(|c| cpu_report(sim, c, k, &times[c], secs))
            .collect(),
    }
}

fn interval_secs(sim: &Sim, i: usize) -> (f64, f64) {
    let s = sim.start + i as u64 * sim.interval_ns;
    let e = (s + sim.interval_ns).min(sim.end);
    let e = if i + 1 == sim.n_intervals { sim.end } else { e };
    ((s - sim.start) as f64 / 1e9, (e - s) as f64 / 1e9)
}

pub(crate) fn build(sim: &Sim) -> SimResult {
    let ncpu = sim.cpus.len();
    let mut intervals = Vec::new();
    let mut obs_intervals = Vec::new();
    let mut total_times = vec![CpuTime::default(); ncpu];
    for i in 0..sim.n_intervals {
        let (start_s, secs) = interval_secs(sim, i);
        let times: Vec<CpuTime> = (0..ncpu).map(|c| sim.acct.cpus[c][i].clone()).collect();
        for (c, t) in times.iter().enumerate() {
            for x in 0..t.busy_ns.len() {
                total_times[c].busy_ns[x] += t.busy_ns[x];
            }
            for x in 0..t.ticks.len() {
                total_times[c].ticks[x] += t.ticks[x];
            }
        }
        let mi = model_interval(sim, i, start_s, secs, &sim.counts[i], &times);
        obs_intervals.push(observation_interval(sim, &mi, &sim.counts[i], secs));
        intervals.push(mi);
    }
    let total_secs = (sim.end - sim.start) as f64 / 1e9;
    let totals = model_interval(sim, 0, 0.0, total_secs, &sim.total, &total_times);
    let mut client_cpu_softirq = vec![0.0; sim.cpus.len()];
    for c in &totals.cpus {
        if let Some(slot) = client_cpu_softirq.get_mut(c.cpu as usize) {
            *slot = c.softirq_inline;
        }
    }
    let classes = sim
        .cfg
        .traffic
        .classes
        .iter()
        .enumerate()
        .map(|(i, c)| ClassReport {
            name: c.name.clone(),
            size_bytes: c.size_bytes,
            offered: sim.total.class_offered[i],
            forwarded: sim.total.class_forwarded[i],
            rx_dropped: sim.total.class_rx_dropped[i],
            tx_dropped: sim.total.class_tx_dropped[i],
            offered_pps: sim.total.class_offered[i] as f64 / total_secs,
            forwarded_pps: sim.total.class_forwarded[i] as f64 / total_secs,
            rx_dropped_pps: sim.total.class_rx_dropped[i] as f64 / total_secs,
            tx_dropped_pps: sim.total.class_tx_dropped[i] as f64 / total_secs,
            latency: sim.latency[i].summary(),
        })
        .collect();
    let mut observation = Observation {
        schema: OBSERVATION_SCHEMA.to_string(),
        origin: Origin {
            kind: OriginKind::Model,
            hostname: None,
            kernel: Some(sim.cfg.host.kernel.clone()),
            // The twin has no wall clock (docs/architecture.md principle 7).
            started_unix_ms: 0,
            napilab_version: env!("CARGO_PKG_VERSION").to_string(),
        },
        host: HostFacts {
            cpus: (0..ncpu as u32).collect(),
            hz: Hz {
                value: Some(sim.cfg.host.hz),
                how: "config".to_string(),
            },
            accounting: CpuAccounting::TickSampled,
            user_hz: 100,
            identity: None,
            speed: Vec::new(),
            wake_up: Vec::new(),
            timer: Vec::new(),
            stalls: Vec::new(),
            ..Default::default()
        },
        settings: Settings {
            netdev_budget: Some(sim.cfg.settings.netdev_budget as u64),
            netdev_budget_usecs: Some(
                sim.cfg
                    .settings
                    .netdev_budget_usecs
                    .map(u64::from)
                    .unwrap_or(2_000_000 / sim.cfg.host.hz as u64),
            ),
            dev_weight: Some(sim.cfg.settings.weight as u64),
            busy_poll: None,
            busy_read: None,
            ..Default::default()
        },
        topology: topology(sim),
        intervals: obs_intervals,
        findings: vec![],
        notices: vec![],
        trace_cost: None,
    };
    // The twin's Observation goes through the same rules as the live host's and the
    // lab's (one vocabulary: docs/architecture.md), so its findings say the same things.
    observation.findings = napilab_core::explain::explain(&observation);
    SimResult {
        observation,
        model: ModelReport {
            config: sim.cfg.name.clone(),
            profile: sim.profile.name.clone(),
            seed: sim.seed,
            tick: tick_mode_name(sim.cfg.host.tick).to_string(),
            events: sim.q.popped(),
            totals,
            intervals,
            classes,
            packets_per_poll_histogram: sim.poll_hist.clone(),
            duration_s: total_secs,
            loss_counters: loss_counters(sim),
            tunnel_delivered_pps: sim
                .cfg
                .tunnel
                .as_ref()
                .map(|_| sim.total.tunnel_delivered as f64 / total_secs.max(1e-12)),
            clients: sim
                .clients
                .iter()
                .map(|cl| ClientReport {
                    class: sim.cfg.traffic.classes[cl.class].name.clone(),
                    cpu: sim.threads[cl.thread].cpu as u32,
                    sent: cl.sent,
                    late: cl.late,
                    max_late_us: cl.max_late_ns as f64 / 1e3,
                    behind: cl.behind,
                    // As the kernel counts a thread's runtime without
                    // CONFIG_IRQ_TIME_ACCOUNTING (the lab's figure): with the softirqs
                    // run on its CPU while it ran, the requests' receive in the softirq
                    // modes (nothing else runs on a generator's CPU).
                    cpu_busy: sim.total.thread_ns[cl.thread] as f64 / (total_secs * 1e9)
                        + client_cpu_softirq
                            .get(sim.threads[cl.thread].cpu)
                            .copied()
                            .unwrap_or(0.0),
                })
                .collect(),
        },
    }
}

fn loss_counters(sim: &Sim) -> Vec<(String, u64)> {
    let k = &sim.total;
    let cfg = sim.cfg;
    let mut v = vec![
        (
            format!("{} rx_dropped (ring full)", cfg.ingress.name),
            k.queue_rx_dropped.iter().sum(),
        ),
        (format!("qdisc drops {}", cfg.egress.name), k.qdisc_drops),
    ];
    for (c, cc) in k.cpus.iter().enumerate() {
        if sim.backlog_napi[c].is_some() {
            v.push((format!("softnet dropped cpu{c}"), cc.backlog_drops));
        }
        if cc.socket_drops > 0 {
            v.push((format!("socket drops cpu{c}"), cc.socket_drops));
        }
    }
    if sim.cfg.tunnel.is_some() {
        v.push(("wg0 peer queue full".into(), k.tunnel_peer_drops));
        v.push(("wg0 decryption queue full".into(), k.tunnel_decrypt_drops));
    }
    v
}

fn topology(sim: &Sim) -> TopologyMap {
    let cfg = sim.cfg;
    let napi_of = |n: usize| {
        let napi = &sim.napis[n];
        let line = napi.line.map(|l| &sim.lines[l]);
        let poller = match napi.thread {
            Some(t) => {
                let th = &sim.threads[t];
                Poller::Thread(ThreadInfo {
                    pid: th.pid,
                    name: th.name.clone(),
                    last_cpu: Some(th.cpu as u32),
                    allowed_cpus: vec![th.cpu as u32],
                    policy: Some(
                        if th.fifo_priority.is_some() {
                            "SCHED_FIFO"
                        } else {
                            "SCHED_OTHER"
                        }
                        .to_string(),
                    ),
                    rt_priority: th.fifo_priority,
                    nice: Some(0),
                })
            }
            None => Poller::Softirq {
                cpus: vec![napi.cpu as u32],
                how: "model: the CPU of the instance's IRQ".to_string(),
            },
        };
        CoreNapi {
            id: napi.id,
            ifindex: 0,
            irq: line.map(|l| l.number),
            defer_hard_irqs: Some(napi.defer_hard_irqs),
            gro_flush_timeout_ns: Some(napi.gro_flush_timeout),
            irq_suspend_timeout_ns: cfg.ingress.queues.get(n).map(|q| q.irq_suspend_timeout_ns),
            threaded: Some(napi.thread.is_some()),
            rx_queues: match line.map(|l| l.kind) {
                Some(LineKind::Rx { queue }) => vec![queue as u32],
                _ => vec![],
            },
            tx_queues: napi.txq.map(|q| vec![q as u32]).unwrap_or_default(),
            poller,
            observed_polling: Vec::new(),
        }
    };
    let nq = cfg.ingress.queues.len();
    let ingress = Device {
        name: cfg.ingress.name.clone(),
        ifindex: 2,
        driver: Some("model".to_string()),
        threaded: Some(cfg.ingress.queues.iter().any(|q| {
            matches!(
                q.napi,
                crate::config::NapiContext::Threaded | crate::config::NapiContext::ThreadedBusyPoll
            )
        }) as u32),
        ethtool: Some(model_ethtool(
            nq,
            "rx",
            cfg.ingress.rx_ring_size,
            cfg.ingress.rx_usecs,
            cfg.ingress.rx_frames,
        )),
        rx_queues: (0..nq as u32)
            .map(|i| RxQueue {
                index: i,
                napi_id: Some(sim.napis[i as usize].id),
                rps_cpus: sim.rps_cpus[i as usize].iter().map(|&c| c as u32).collect(),
                rps_flow_cnt: None,
            })
            .collect(),
        napis: (0..nq).map(napi_of).collect(),
        ..Device::default()
    };
    let ncpu = sim.cpus.len();
    let egress = Device {
        name: cfg.egress.name.clone(),
        ifindex: 3,
        driver: Some("model".to_string()),
        threaded: Some(0),
        qdisc: Some(QdiscInfo {
            kind: qdisc_name(cfg.egress.qdisc).to_string(),
            children: vec![],
        }),
        ethtool: Some(model_ethtool(
            ncpu,
            "tx",
            cfg.egress.tx_ring_size,
            cfg.egress.tx_usecs,
            cfg.egress.tx_frames,
        )),
        tx_queues: (0..ncpu as u32)
            .map(|i| CoreTxQueue {
                index: i,
                napi_id: Some(sim.napis[sim.tx_napi[i as usize]].id),
                xps_cpus: vec![i],
            })
            .collect(),
        // Only the instances that belong to the egress device (combined vectors are
        // listed under the ingress device).
        napis: sim
            .tx_napi
            .iter()
            .copied()
            .filter(|&n| n >= nq)
            .map(napi_of)
            .collect(),
        ..Device::default()
    };
    let irqs = sim
        .lines
        .iter()
        .map(|l| IrqInfo {
            number: l.number,
            name: l.name.clone(),
            device: match l.kind {
                LineKind::Rx { .. } => cfg.ingress.name.clone(),
                LineKind::TxCompletion { .. } => cfg.egress.name.clone(),
            },
            queue: Some(match l.kind {
                LineKind::Rx { queue } => format!("combined-{queue}"),
                LineKind::TxCompletion { txq } => format!("combined-{txq}"),
            }),
            affinity: vec![l.cpu as u32],
            effective_affinity: vec![l.cpu as u32],
            matched_by: IrqMatch::NetlinkNapi,
        })
        .collect();
    TopologyMap {
        devices: vec![ingress, egress],
        irqs,
        // The twin has no namespaces: its trace rows are its own devices'.
        netns: None,
    }
}

fn qdisc_name(q: QdiscKind) -> &'static str {
    match q {
        QdiscKind::None => "noqueue",
        QdiscKind::Fifo => "pfifo_fast",
    }
}

/// What `ethtool` would show of a modelled device: `channels` combined channels, one
/// ring size and the coalescing of its `dir` ("rx" or "tx") side.
fn model_ethtool(
    channels: usize,
    dir: &str,
    ring_size: u32,
    usecs: u32,
    frames: u32,
) -> napilab_core::EthtoolInfo {
    napilab_core::EthtoolInfo {
        channels: vec![("combined".to_string(), channels as u64)],
        rings: vec![(dir.to_string(), ring_size as u64)],
        coalesce: vec![
            (format!("{dir}-usecs"), usecs as u64),
            (format!("{dir}-frames"), frames as u64),
        ],
    }
}

fn observation_interval(sim: &Sim, mi: &ModelInterval, k: &Counts, secs: f64) -> Interval {
    let rate = |x: u64| x as f64 / secs;
    let cfg = sim.cfg;
    let cpus = cpu_intervals(sim, mi, k, secs);
    let devices = device_intervals(sim, mi, k, secs);
    let irqs = irq_intervals(sim, k, secs);
    let threads = thread_intervals(sim, k, secs);
    let rx_mbps = rate(k.rx_bytes) * 8.0 / 1e6;
    let busy: f64 = mi.cpus.iter().map(|c| c.busy).sum();
    Interval {
        index: mi.index,
        start_s: mi.start_s,
        duration_s: secs,
        cpus,
        devices,
        irqs,
        threads,
        trace: Some(trace_interval(mi, cfg.tunnel.is_some().then_some("wg0"))),
        host: HostInterval {
            rx_bits: Some(m(rate(k.rx_bytes) * 8.0, Unit::BitsPerSecond)),
            cpu_per_mbps: (rx_mbps > 0.0).then(|| {
                Metric::derived(
                    busy / rx_mbps,
                    Unit::CpuPerMbps,
                    Source::Model,
                    "true busy CPU summed over CPUs / received Mbit/s",
                )
            }),
        },
    }
}

/// Each CPU's counters and tick-sampled shares over the interval.
fn cpu_intervals(sim: &Sim, mi: &ModelInterval, k: &Counts, secs: f64) -> Vec<CpuInterval> {
    let rate = |x: u64| x as f64 / secs;
    let rps = sim.backlog_napi.iter().any(|b| b.is_some());
    mi.cpus
        .iter()
        .map(|r| {
            let c = r.cpu as usize;
            let cc = &k.cpus[c];
            let tick = |v: f64| Metric::new(v, Unit::CpuFraction, Source::Tick);
            CpuInterval {
                cpu: r.cpu,
                // The model has no other IRQ sources than the NIC and NAPI timers.
                hardirqs: Some(m(r.hardirqs_per_s, Unit::PerSecond)),
                net_hardirqs: Some(m(rate(cc.net_hardirqs), Unit::PerSecond)),
                net_rx_softirqs: Some(m(r.net_rx_softirqs_per_s, Unit::PerSecond)),
                net_tx_softirqs: Some(m(r.net_tx_softirqs_per_s, Unit::PerSecond)),
                softnet_processed: Some(m(rate(cc.processed), Unit::PacketsPerSecond)),
                // The backlog exists in the model only when RPS is configured.
                softnet_dropped: rps.then(|| m(rate(cc.backlog_drops), Unit::PacketsPerSecond)),
                time_squeeze: Some(m(r.time_squeeze_per_s, Unit::PerSecond)),
                flow_limit: None,
                received_rps: rps.then(|| m(rate(cc.received_rps), Unit::PerSecond)),
                packets_per_net_rx_softirq: (cc.rx_softirqs > 0).then(|| {
                    Metric::derived(
                        cc.processed as f64 / cc.rx_softirqs as f64,
                        Unit::PacketsPerEvent,
                        Source::Model,
                        "softnet processed / NET_RX softirqs",
                    )
                }),
                packets_per_net_hardirq: (cc.net_hardirqs > 0).then(|| {
                    Metric::derived(
                        cc.processed as f64 / cc.net_hardirqs as f64,
                        Unit::PacketsPerEvent,
                        Source::Model,
                        "softnet processed / network hard IRQs",
                    )
                }),
                time: Some(CpuTimeShares {
                    user: tick(r.tick_user),
                    nice: tick(0.0),
                    system: tick(r.tick_system),
                    idle: tick(r.tick_idle),
                    iowait: tick(0.0),
                    irq: tick(r.tick_irq),
                    softirq: tick(r.tick_softirq),
                    steal: tick(0.0),
                }),
                ksoftirqd: Some(m(r.ksoftirqd, Unit::CpuFraction)),
            }
        })
        .collect()
}

/// The ingress device (its RX queues) and the egress device (its qdisc).
fn device_intervals(sim: &Sim, mi: &ModelInterval, k: &Counts, secs: f64) -> Vec<DeviceInterval> {
    let rate = |x: u64| x as f64 / secs;
    let cfg = sim.cfg;
    let nq = cfg.ingress.queues.len();
    let ingress = DeviceInterval {
        name: cfg.ingress.name.clone(),
        ifindex: 2,
        rx_packets: Some(m(rate(k.rx_packets), Unit::PacketsPerSecond)),
        rx_bits: Some(m(rate(k.rx_bytes) * 8.0, Unit::BitsPerSecond)),
        rx_dropped: Some(m(mi.rx_dropped_pps, Unit::PacketsPerSecond)),
        queues: (0..nq)
            .map(|q| QueueInterval {
                kind: QueueKind::Rx,
                index: q as u32,
                napi_id: Some(sim.napis[q].id),
                packets: Some(m(rate(k.queue_rx_packets[q]), Unit::PacketsPerSecond)),
                // Ring overflow: the NIC found no free descriptor.
                hw_drops: Some(m(rate(k.queue_rx_dropped[q]), Unit::PacketsPerSecond)),
                ..QueueInterval::default()
            })
            .collect(),
        ..DeviceInterval::default()
    };
    let egress = DeviceInterval {
        name: cfg.egress.name.clone(),
        ifindex: 3,
        tx_packets: Some(m(rate(k.tx_packets), Unit::PacketsPerSecond)),
        tx_bits: Some(m(rate(k.tx_bytes) * 8.0, Unit::BitsPerSecond)),
        tx_dropped: Some(m(mi.tx_dropped_pps, Unit::PacketsPerSecond)),
        qdisc: Some(QdiscInterval {
            kind: qdisc_name(cfg.egress.qdisc).to_string(),
            packets: Some(m(rate(k.qdisc_enqueued), Unit::PacketsPerSecond)),
            drops: Some(m(rate(k.qdisc_drops), Unit::PacketsPerSecond)),
            requeues: None,
            overlimits: None,
            backlog_packets: None,
        }),
        ..DeviceInterval::default()
    };
    vec![ingress, egress]
}

/// Each IRQ line's rate, on its one CPU.
fn irq_intervals(sim: &Sim, k: &Counts, secs: f64) -> Vec<IrqInterval> {
    let rate = |x: u64| x as f64 / secs;
    let cfg = sim.cfg;
    sim.lines
        .iter()
        .enumerate()
        .map(|(l, line)| IrqInterval {
            number: line.number,
            name: line.name.clone(),
            device: Some(match line.kind {
                LineKind::Rx { .. } => cfg.ingress.name.clone(),
                LineKind::TxCompletion { .. } => cfg.egress.name.clone(),
            }),
            queue: Some(match line.kind {
                LineKind::Rx { queue } => format!("combined-{queue}"),
                LineKind::TxCompletion { txq } => format!("combined-{txq}"),
            }),
            total: Some(m(rate(k.lines[l]), Unit::PerSecond)),
            per_cpu: vec![(line.cpu as u32, m(rate(k.lines[l]), Unit::PerSecond))],
        })
        .collect()
}

/// Each thread's CPU share, with its role (workqueue workers have none, and are left out).
fn thread_intervals(sim: &Sim, k: &Counts, secs: f64) -> Vec<ThreadInterval> {
    let cfg = sim.cfg;
    sim.threads
        .iter()
        .enumerate()
        .filter_map(|(t, th)| {
            let role = match th.kind {
                ThreadKind::Ksoftirqd => ThreadRole::Ksoftirqd { cpu: th.cpu as u32 },
                ThreadKind::Napi(n) => ThreadRole::NapiThread {
                    device: Some(if sim.napis[n].peer.is_some() {
                        "wg0".to_string()
                    } else {
                        cfg.ingress.name.clone()
                    }),
                    napi_id: Some(sim.napis[n].id),
                },
                ThreadKind::App(a) => ThreadRole::Application {
                    name: cfg.apps[a].name.clone(),
                },
                // The load generator is an application of the client namespace.
                ThreadKind::Client(_) => ThreadRole::Application {
                    name: th.name.clone(),
                },
                // The Observation has no role for workqueue workers; their time is the
                // CPUs' system time.
                ThreadKind::Worker(_) | ThreadKind::HostWork => return None,
                // Nor for IRQ threads (system time of their CPU, as in /proc/stat).
                ThreadKind::Irq(_) => return None,
            };
            Some(ThreadInterval {
                pid: th.pid,
                name: th.name.clone(),
                role,
                last_cpu: Some(th.cpu as u32),
                cpu: Some(m(k.thread_ns[t] as f64 / (secs * 1e9), Unit::CpuFraction)),
                // Its schedstat as the lab reads it, but the run delay counts from the
                // wake-up, with the IPI's delay to an idle CPU (the kernel's from the
                // enqueue on that CPU, after the IPI).
                sched: Some(napilab_core::SchedDelta {
                    on_cpu_ns: k.thread_ns[t],
                    run_delay_ns: k.thread_wait_ns[t],
                    runs: k.thread_runs[t],
                }),
            })
        })
        .collect()
}

/// The tracing tier's view of an interval, as the model knows it exactly: per CPU the
/// true softirq, ksoftirqd and device-IRQ time and the polls by kthreads and busy
/// polling (`cpus`), and the time per execution context (`context_shares`, which the
/// live tier estimates from stack samples; here `samples` is 0 because nothing was
/// sampled). The model has no softirq vectors other than NET_RX and NET_TX, so
/// `softirq` and `net_softirq` are the same time.
/// The tracing tier's view of an interval. `tunnel_device`: with a tunnel, the per-poll,
/// per-softirq and per-IRQ rows are filled too (per CPU and context), under that
/// device name; other configurations carry only the time rows.
/// A CPU's time by execution context, the three softirq contexts first (a softirq after
/// an interrupt, at bh-enable, in ksoftirqd), then the NAPI kthread and busy polling.
fn context_times(r: &CpuReport) -> [(ExecContext, f64); 5] {
    [
        (ExecContext::Hardirq, r.softirq_inline - r.softirq_bh_enable),
        (ExecContext::BhEnable, r.softirq_bh_enable),
        (ExecContext::Ksoftirqd, r.ksoftirqd),
        (ExecContext::NapiThread, r.napi_thread),
        (ExecContext::BusyPoll, r.busy_poll),
    ]
}

fn trace_interval(mi: &ModelInterval, tunnel_device: Option<&str>) -> TraceInterval {
    let share = |v: f64| m(v, Unit::CpuFraction);
    let cpus = mi
        .cpus
        .iter()
        .map(|r| CpuTraceTime {
            cpu: r.cpu,
            softirq: share(r.softirq_inline + r.ksoftirqd),
            net_softirq: share(r.softirq_inline + r.ksoftirqd),
            softirq_ksoftirqd: share(r.ksoftirqd),
            hardirq: share(r.hardirq_device),
            napi_thread_polls: m(r.napi_thread_polls_per_s, Unit::PerSecond),
            busy_poll_polls: m(r.busy_polls_per_s, Unit::PerSecond),
        })
        .collect();
    let context_shares = mi
        .cpus
        .iter()
        .flat_map(|r| {
            context_times(r).map(|(context, v)| ContextShare {
                cpu: r.cpu,
                context,
                samples: 0,
                share: share(v.max(0.0)),
            })
        })
        .collect();
    // The tracing tier's per-poll and per-run rows, per CPU and context (the model
    // does not keep them per instance: one row per CPU and context, napi_id 0).
    let secs = mi.duration_s;
    let Some(device) = tunnel_device else {
        return TraceInterval {
            cpus,
            context_shares,
            ..TraceInterval::default()
        };
    };
    let napi = mi
        .cpus
        .iter()
        .flat_map(|r| {
            r.polls_by_context.iter().map(move |p| NapiPollTrace {
                napi_id: 0,
                device: device.to_string(),
                ifindex: 0,
                netns: 0,
                cpu: r.cpu,
                context: p.context,
                application: None,
                polls: p.polls,
                packets: p.packets,
                full_budget_polls: p.full_budget_polls,
                // Only what the model counts: empty polls, and the rest in slot 1.
                work_histogram: vec![p.empty_polls, p.polls - p.empty_polls],
                polls_per_s: m(p.polls as f64 / secs, Unit::PerSecond),
                packets_per_s: m(p.packets as f64 / secs, Unit::PerSecond),
            })
        })
        .collect();
    let softirqs = mi
        .cpus
        .iter()
        .flat_map(|r| {
            // The softirq contexts: the first three.
            context_times(r)
                .into_iter()
                .take(3)
                .filter(|(_, v)| *v > 0.0)
                .map(|(context, v)| SoftirqTrace {
                    cpu: r.cpu,
                    vector: 3,
                    name: "NET_RX".into(),
                    context,
                    count: 0,
                    total_ns: (v * secs * 1e9) as u64,
                    share: share(v),
                    log2_ns: Vec::new(),
                    raised_runs: 0,
                    raise_to_entry_ns: 0,
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let irqs = mi
        .cpus
        .iter()
        .filter(|r| r.rx_irqs_per_s + r.tx_completion_irqs_per_s > 0.0)
        .map(|r| IrqTrace {
            irq: 0,
            cpu: r.cpu,
            count: ((r.rx_irqs_per_s + r.tx_completion_irqs_per_s) * secs).round() as u64,
            total_ns: (r.hardirq_device * secs * 1e9) as u64,
            share: share(r.hardirq_device),
        })
        .collect();
    TraceInterval {
        napi,
        softirqs,
        irqs,
        cpus,
        context_shares,
        ..TraceInterval::default()
    }
}

/// Whether the tick view came from NOHZ idle (for docs and callers).
pub fn tick_mode_name(t: TickMode) -> &'static str {
    match t {
        TickMode::NohzIdle => "nohz_idle",
        TickMode::Periodic => "periodic",
    }
}
