//! The simulator: wires traffic, NIC, NAPI, softirq, CPUs and accounting together and
//! runs the event loop. One event per batch of CPU work (an IRQ handler, a NAPI poll,
//! a `net_tx_action`), per NIC interrupt and per NAPI timer; packets move through rings
//! inside a batch.
//!
//! Approximation (documented in docs/sim.md): work is not preempted inside a batch. A
//! hard IRQ that arrives while a poll runs is taken when that poll ends. Softirq is not
//! re-entrant on a CPU, so packets are served in the same order as in the kernel; only
//! the position of the handler's own microsecond within the poll moves.

use std::collections::VecDeque;

use crate::accounting::{Accounting, Ctx};
use crate::config::{NapiContext, QdiscKind, RingPoll, SimConfig, TickMode};
use crate::cpu::{pick_thread, Cpu, IrqSrc, Thread, ThreadKind};
use crate::event::{EventQueue, Nanos, Window};
use crate::latency::LatencyHistogram;
use crate::napi::{Completion, Napi};
use crate::nic::{Batch, IrqLine, LineKind, RxRing, TxQueue};
use crate::profile::Profile;
use crate::rng::Rng;
use crate::softirq::{NetRxRun, SoftirqRun, NET_RX, NET_TX};
use crate::traffic::{Feed, Packet, Source};

#[derive(Clone, Copy, Debug)]
pub(crate) enum Ev {
    BatchEnd(usize),
    Irq(usize, u64),
    NapiTimer(usize, u64),
    /// An RPS IPI reaches this CPU.
    Ipi(usize),
    /// A remote wake-up (IPI) of an application thread reaches its CPU.
    WakeApp(usize),
}

/// An application and its socket.
pub(crate) struct App {
    pub thread: usize,
    /// Packets queued on the socket and when they were queued.
    socket: VecDeque<(Nanos, Packet)>,
    limit: usize,
    kernel_ns: Nanos,
    user_ns: Nanos,
    reply_bytes: Option<u32>,
    /// A wake-up is already on its way.
    wake_pending: bool,
    busy: Option<BusyState>,
    /// End of the current busy loop (None: not busy polling), and whether it has
    /// polled at least once (a loop always polls once, even with 0 usecs).
    busy_deadline: Option<Nanos>,
    busy_polled: bool,
    /// The last busy loop ended without data: epoll_wait now blocks.
    busy_loop_done: bool,
    /// The application holds the instance (NAPI_STATE_SCHED + IN_BUSY_POLL).
    owns_napi: bool,
}

/// An application's busy-poll parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BusyState {
    napi: usize,
    usecs: Nanos,
    budget: u32,
    prefer: bool,
    /// The instance's irq-suspend-timeout (0: no IRQ suspension).
    suspend: Nanos,
}

/// How long the loop runs past the measured window (see `Sim::stop`).
const DRAIN_NS: Nanos = 5_000_000;

/// Packets an application handles per step before the scheduler looks again.
const APP_BATCH: usize = 16;

/// What to do when a CPU's current batch ends.
#[derive(Clone, Copy, Debug)]
enum Finish {
    Nothing,
    Irq(IrqSrc),
    SoftirqPoll {
        napi: usize,
        work: u32,
        repoll: bool,
    },
    ThreadPoll {
        thread: usize,
        napi: usize,
        work: u32,
        repoll: bool,
    },
    /// `busy_poll_stop`: the application's last, normal poll of the instance.
    /// `skip`: prefer-busy-poll re-armed the deferral timer instead of handing a
    /// full instance to the softirq.
    BusyPollStop {
        napi: usize,
        work: u32,
        repoll: bool,
        skip: bool,
    },
}

/// Why a softirq may now run inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ExitKind {
    /// `irq_exit` -> `invoke_softirq`: subject to the 4.9-6.4 ksoftirqd rule.
    Irq,
    /// `local_bh_enable` -> `do_softirq`: runs pending softirqs whatever ksoftirqd does.
    BhEnable,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct CpuCount {
    pub hardirqs: u64,
    pub net_hardirqs: u64,
    pub rx_softirqs: u64,
    pub tx_softirqs: u64,
    pub polls: u64,
    pub poll_packets: u64,
    pub full_polls: u64,
    pub squeeze: u64,
    pub tx_reclaimed: u64,
    /// Packets through `__netif_receive_skb_core` on this CPU (softnet "processed").
    pub processed: u64,
    /// RPS: packets dropped because this CPU's backlog was full.
    pub backlog_drops: u64,
    /// RPS: IPIs received (softnet "received_rps").
    pub received_rps: u64,
    /// Packets dropped because an application's socket queue was full.
    pub socket_drops: u64,
    /// Polls run by threaded-NAPI kthreads and by busy polling (part of `polls`).
    pub thread_polls: u64,
    pub busy_polls: u64,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Counts {
    pub cpus: Vec<CpuCount>,
    pub lines: Vec<u64>,
    pub thread_ns: Vec<u64>,
    pub class_offered: Vec<u64>,
    pub class_forwarded: Vec<u64>,
    pub class_rx_dropped: Vec<u64>,
    pub class_tx_dropped: Vec<u64>,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub queue_rx_packets: Vec<u64>,
    pub queue_rx_dropped: Vec<u64>,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub qdisc_enqueued: u64,
    pub qdisc_drops: u64,
}

impl CpuCount {
    fn add(&mut self, o: &CpuCount) {
        self.hardirqs += o.hardirqs;
        self.net_hardirqs += o.net_hardirqs;
        self.rx_softirqs += o.rx_softirqs;
        self.tx_softirqs += o.tx_softirqs;
        self.polls += o.polls;
        self.poll_packets += o.poll_packets;
        self.full_polls += o.full_polls;
        self.squeeze += o.squeeze;
        self.tx_reclaimed += o.tx_reclaimed;
        self.processed += o.processed;
        self.backlog_drops += o.backlog_drops;
        self.received_rps += o.received_rps;
        self.socket_drops += o.socket_drops;
        self.thread_polls += o.thread_polls;
        self.busy_polls += o.busy_polls;
    }
}

fn add_into(a: &mut [u64], b: &[u64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

impl Counts {
    /// Add another interval's counters (same shape) to these.
    fn add(&mut self, o: &Counts) {
        for (a, b) in self.cpus.iter_mut().zip(&o.cpus) {
            a.add(b);
        }
        add_into(&mut self.lines, &o.lines);
        add_into(&mut self.thread_ns, &o.thread_ns);
        add_into(&mut self.class_offered, &o.class_offered);
        add_into(&mut self.class_forwarded, &o.class_forwarded);
        add_into(&mut self.class_rx_dropped, &o.class_rx_dropped);
        add_into(&mut self.class_tx_dropped, &o.class_tx_dropped);
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        add_into(&mut self.queue_rx_packets, &o.queue_rx_packets);
        add_into(&mut self.queue_rx_dropped, &o.queue_rx_dropped);
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.qdisc_enqueued += o.qdisc_enqueued;
        self.qdisc_drops += o.qdisc_drops;
    }
}

pub(crate) struct Costs {
    hardirq: Nanos,
    softirq: Nanos,
    poll: Nanos,
    tx_softirq: Nanos,
    switch: Nanos,
    idle_exit: Nanos,
    after_interrupt: Nanos,
    rx_poll: Nanos,
    ip: Nanos,
    rps: Nanos,
    xmit: Nanos,
    qdisc: Nanos,
    reclaim: Nanos,
}

pub(crate) struct Sim<'a> {
    pub cfg: &'a SimConfig,
    pub profile: &'a Profile,
    pub seed: u64,
    pub q: EventQueue<Ev>,
    pub start: Nanos,
    pub end: Nanos,
    /// The loop runs on past `end` until `stop` so that packets which arrived inside
    /// the window can finish (as a lab sink waits for stragglers); nothing after `end`
    /// is counted.
    stop: Nanos,
    pub interval_ns: Nanos,
    pub n_intervals: usize,
    /// The same window with a look-up cache, for per-packet counting.
    win: Window,
    /// TX queues whose qdisc each CPU's NET_TX softirq must run (`sd->output_queue`).
    tx_sched: Vec<Vec<usize>>,
    /// Serialization time of the last frame size sent (sizes repeat).
    ser_memo: (u32, Nanos),
    /// Per RX ring: every packet it carries is forwarded by the polling CPU (no RPS,
    /// no local delivery, no closed-loop client), so `poll_ring_forward` applies.
    ring_forwards: Vec<bool>,
    /// Scratch for `poll_ring_forward`'s batches: arrival times and latencies.
    pop_buf: Vec<Nanos>,
    lat_buf: Vec<Nanos>,
    /// Emptied NAPI lists kept for their buffers (`spare_list`).
    spare_lists: Vec<VecDeque<usize>>,
    tick_ns: Nanos,
    hz: u32,
    skip_rule: bool,
    weight: u32,
    budget_usecs: u64,
    costs: Costs,
    lat_irq: Nanos,
    lat_wake: Nanos,
    lat_rx_dma: Nanos,
    lat_tx_dma: Nanos,
    ser_ns_per_byte: f64,
    pub rings: Vec<RxRing>,
    pub napis: Vec<Napi>,
    pub lines: Vec<IrqLine>,
    /// Egress TX queue per CPU, and the IRQ line of its completions.
    pub txqs: Vec<TxQueue>,
    tx_lines: Vec<usize>,
    /// NAPI instance reclaiming each TX queue.
    pub tx_napi: Vec<usize>,
    wire_free: Nanos,
    pub cpus: Vec<Cpu>,
    finish: Vec<Finish>,
    exit: Vec<Option<ExitKind>>,
    pub threads: Vec<Thread>,
    pub acct: Accounting,
    pub counts: Vec<Counts>,
    pub total: Counts,
    pub latency: Vec<LatencyHistogram>,
    pub poll_hist: Vec<u64>,
    /// RPS: target CPUs per RX queue, the steering hash stream per queue, each CPU's
    /// backlog (packet and the time it was queued) and its backlog NAPI instance.
    pub rps_cpus: Vec<Vec<usize>>,
    rps_rng: Vec<Rng>,
    backlogs: Vec<VecDeque<(Nanos, Packet)>>,
    pub backlog_napi: Vec<Option<usize>>,
    pub apps: Vec<App>,
    /// Application receiving each class locally (None: forwarded).
    class_app: Vec<Option<usize>>,
    /// Rings each class arrives on (client `f` of a closed-loop class uses ring
    /// `f % len`), and the closed-loop clients' parameters and random stream.
    class_rings: Vec<Vec<usize>>,
    closed: Vec<Option<(crate::config::ClosedLoop, Rng)>>,
}

fn ns(p: &Profile, cycles: f64) -> Nanos {
    p.ns(cycles)
}

impl<'a> Sim<'a> {
    pub fn new(cfg: &'a SimConfig, profile: &'a Profile, seed: u64) -> Self {
        let ncpu = cfg.host.cpus as usize;
        let ms = |x: f64| (x * 1e6).round() as Nanos;
        let start = ms(cfg.measurement.warmup_ms);
        let duration = ms(cfg.measurement.duration_ms).max(1);
        let end = start + duration;
        let interval_ns = cfg
            .measurement
            .interval_ms
            .map(ms)
            .unwrap_or(duration)
            .clamp(1, duration);
        let n_intervals = duration.div_ceil(interval_ns) as usize;
        let tick_ns = cfg.tick_ns();
        let hz = cfg.host.hz;
        let s = &profile.stage_cycles;
        let f = &profile.fixed_cycles;
        let costs = Costs {
            hardirq: ns(profile, f.hardirq),
            softirq: ns(profile, f.softirq),
            poll: ns(profile, f.poll),
            tx_softirq: ns(profile, f.tx_softirq),
            switch: ns(profile, f.context_switch),
            idle_exit: ns(profile, f.idle_exit),
            after_interrupt: ns(profile, f.after_interrupt),
            rx_poll: ns(profile, s.poll + s.unmapped),
            ip: ns(profile, s.ip_stack),
            rps: ns(profile, s.rps),
            xmit: ns(profile, s.xmit),
            qdisc: ns(profile, s.qdisc),
            reclaim: ns(profile, s.tx_reclaim),
        };

        // Traffic: one independent stream per (class, ring). A class without a queue is
        // spread evenly over the queues (RSS).
        let total_share: f64 = cfg
            .traffic
            .classes
            .iter()
            .filter(|c| c.closed_loop.is_none())
            .map(|c| c.share)
            .sum();
        let mut class_rings: Vec<Vec<usize>> = vec![Vec::new(); cfg.traffic.classes.len()];
        let mut rings = Vec::new();
        let mut napis = Vec::new();
        let mut lines = Vec::new();
        let mut threads = Vec::new();
        let mut cpus: Vec<Cpu> = (0..ncpu).map(|_| Cpu::default()).collect();
        for (c, cpu) in cpus.iter_mut().enumerate() {
            cpu.ksoftirqd = threads.len();
            threads.push(Thread {
                pid: 10 + c as u32,
                name: format!("ksoftirqd/{c}"),
                cpu: c,
                kind: ThreadKind::Ksoftirqd,
                fifo_priority: None,
                runnable: false,
                vruntime: 0,
            });
        }
        let mut stream = 0u64;
        let nq = cfg.ingress.queues.len();
        for (qi, qc) in cfg.ingress.queues.iter().enumerate() {
            let napi_id = napis.len();
            let mut ring_ids = Vec::new();
            let ring_cfgs: Vec<(String, usize, u32)> = if qc.rings.is_empty() {
                vec![(
                    "rx".to_string(),
                    cfg.ingress.rx_ring_size as usize,
                    cfg.settings.weight,
                )]
            } else {
                // Stock ixgbe divides its budget among the vector's rings; the study's
                // alternating poll gives an unset ring the whole weight per visit.
                let default_budget = match qc.ring_poll {
                    RingPoll::Alternate => cfg.settings.weight,
                    RingPoll::OnePass => (cfg.settings.weight / qc.rings.len() as u32).max(1),
                };
                qc.rings
                    .iter()
                    .map(|r| {
                        (
                            r.name.clone(),
                            r.size.unwrap_or(cfg.ingress.rx_ring_size) as usize,
                            r.budget.unwrap_or(default_budget),
                        )
                    })
                    .collect()
            };
            for (ri, (name, size, budget)) in ring_cfgs.into_iter().enumerate() {
                let mut feed = Feed::default();
                for (ci, class) in cfg.traffic.classes.iter().enumerate() {
                    let here = match (class.queue, &class.ring) {
                        (Some(q), Some(r)) => q as usize == qi && *r == name,
                        (Some(q), None) => q as usize == qi && ri == 0,
                        (None, _) => ri == 0,
                    };
                    if !here {
                        continue;
                    }
                    class_rings[ci].push(rings.len());
                    if class.closed_loop.is_some() {
                        continue; // its arrivals are injected by its clients
                    }
                    let spread = if class.queue.is_some() {
                        1.0
                    } else {
                        nq as f64
                    };
                    let rate = cfg.traffic.rate_pps * class.share / total_share / spread;
                    stream += 1;
                    feed.push(Source::new(
                        Rng::new(seed, stream),
                        cfg.traffic.pattern,
                        rate,
                        ci as u16,
                        class.size_bytes,
                    ));
                }
                ring_ids.push(rings.len());
                rings.push(RxRing::new(name, qi, size, budget, feed));
            }
            let line = lines.len();
            lines.push(IrqLine {
                number: 100 + line as u32,
                name: format!("{}-TxRx-{qi}", cfg.ingress.name),
                kind: LineKind::Rx { queue: qi },
                cpu: qc.cpu as usize,
                napi: napi_id,
                enabled: true,
                armed: false,
                fire_at: 0,
                gen: 0,
                txq: None,
                usecs: cfg.ingress.rx_usecs,
                frames: cfg.ingress.rx_frames,
            });
            let thread = (qc.napi == NapiContext::Threaded).then(|| {
                threads.push(Thread {
                    pid: 1000 + napi_id as u32,
                    name: format!("napi/{}-{}", cfg.ingress.name, 8192 + napi_id),
                    cpu: qc.cpu as usize,
                    kind: ThreadKind::Napi(napi_id),
                    fifo_priority: qc.thread.fifo_priority,
                    runnable: false,
                    vruntime: 0,
                });
                threads.len() - 1
            });
            napis.push(Napi {
                rings: ring_ids,
                ring_poll: qc.ring_poll,
                line: Some(line),
                defer_hard_irqs: qc.defer_hard_irqs,
                gro_flush_timeout: qc.gro_flush_timeout_ns,
                thread,
                ..Napi::idle(
                    8192 + napi_id as u32,
                    format!("{}-rx-{qi}", cfg.ingress.name),
                    qc.cpu as usize,
                )
            });
        }
        // Egress: TX queue k is used by CPU k (XPS) and reclaimed by its own NAPI in
        // NET_RX_SOFTIRQ on CPU k after a TX completion IRQ (docs/kernel.md#packet-path, step 6).
        let mut txqs = Vec::new();
        let mut tx_lines = Vec::new();
        let mut tx_napi = Vec::new();
        for c in 0..ncpu {
            let combined = (cfg.egress.completion == crate::config::TxCompletion::RxNapi)
                .then(|| cfg.ingress.queues.iter().position(|q| q.cpu as usize == c))
                .flatten();
            if let Some(qi) = combined {
                txqs.push(TxQueue::new(cfg.egress.tx_ring_size as usize));
                napis[qi].txq = Some(c);
                let line = napis[qi].line.unwrap_or(qi);
                lines[line].txq = Some(c);
                tx_lines.push(line);
                tx_napi.push(qi);
                continue;
            }
            let napi_id = napis.len();
            tx_napi.push(napi_id);
            let line = lines.len();
            txqs.push(TxQueue::new(cfg.egress.tx_ring_size as usize));
            tx_lines.push(line);
            // The CPU taking this queue's completion IRQ, and so reclaiming.
            let irq_cpu = match cfg.egress.completion {
                crate::config::TxCompletion::OnCpu(k) => k as usize,
                _ => c,
            };
            lines.push(IrqLine {
                number: 100 + line as u32,
                name: format!("{}-TxRx-{c}", cfg.egress.name),
                kind: LineKind::TxCompletion { txq: c },
                cpu: irq_cpu,
                napi: napi_id,
                enabled: true,
                armed: false,
                fire_at: 0,
                gen: 0,
                txq: None,
                usecs: cfg.egress.tx_usecs,
                frames: cfg.egress.tx_frames,
            });
            napis.push(Napi {
                txq: Some(c),
                line: Some(line),
                ..Napi::idle(
                    8192 + napi_id as u32,
                    format!("{}-tx-{c}", cfg.egress.name),
                    irq_cpu,
                )
            });
        }
        // RPS: one backlog instance per CPU when any queue steers.
        let rps_cpus: Vec<Vec<usize>> = cfg
            .ingress
            .queues
            .iter()
            .map(|q| q.rps_cpus.iter().map(|&c| c as usize).collect())
            .collect();
        let mut backlog_napi = vec![None; ncpu];
        if rps_cpus.iter().any(|v| !v.is_empty()) {
            for (c, slot) in backlog_napi.iter_mut().enumerate() {
                *slot = Some(napis.len());
                napis.push(Napi {
                    backlog: Some(c),
                    ..Napi::idle(8192 + napis.len() as u32, format!("backlog-{c}"), c)
                });
            }
        }
        let mut apps = Vec::new();
        for (i, a) in cfg.apps.iter().enumerate() {
            apps.push(App {
                thread: threads.len(),
                socket: VecDeque::new(),
                limit: a.socket_limit as usize,
                kernel_ns: ns(profile, a.kernel_cycles_per_packet),
                user_ns: ns(profile, a.user_cycles_per_packet),
                reply_bytes: a.reply_bytes,
                wake_pending: false,
                busy: a.busy_poll.map(|b| BusyState {
                    napi: b.queue as usize,
                    usecs: b.usecs as Nanos * 1000,
                    budget: b.budget,
                    prefer: b.prefer,
                    suspend: cfg.ingress.queues[b.queue as usize].irq_suspend_timeout_ns,
                }),
                busy_deadline: None,
                busy_polled: false,
                busy_loop_done: false,
                owns_napi: false,
            });
            threads.push(Thread {
                pid: 2000 + i as u32,
                name: a.name.clone(),
                cpu: a.cpu as usize,
                kind: ThreadKind::App(i),
                fifo_priority: a.fifo_priority,
                runnable: false,
                vruntime: 0,
            });
        }
        let class_app: Vec<Option<usize>> = cfg
            .traffic
            .classes
            .iter()
            .map(|c| {
                c.app
                    .as_ref()
                    .and_then(|a| cfg.apps.iter().position(|x| &x.name == a))
            })
            .collect();
        let closed: Vec<Option<(crate::config::ClosedLoop, Rng)>> = cfg
            .traffic
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                c.closed_loop
                    .map(|cl| (cl, Rng::new(seed, 2_000_000 + i as u64)))
            })
            .collect();
        let rps_rng = (0..nq)
            .map(|q| Rng::new(seed, 1_000_000 + q as u64))
            .collect();
        let nclass = cfg.traffic.classes.len();
        let counts0 = Counts {
            cpus: vec![CpuCount::default(); ncpu],
            lines: vec![0; lines.len()],
            thread_ns: vec![0; threads.len()],
            class_offered: vec![0; nclass],
            class_forwarded: vec![0; nclass],
            class_rx_dropped: vec![0; nclass],
            class_tx_dropped: vec![0; nclass],
            queue_rx_packets: vec![0; nq],
            queue_rx_dropped: vec![0; nq],
            ..Counts::default()
        };
        let acct = Accounting::new(
            ncpu,
            tick_ns,
            cfg.host.tick == TickMode::NohzIdle,
            start,
            interval_ns,
            n_intervals,
            end,
        );
        let weight = cfg.settings.weight;
        let win = Window::new(start, end, interval_ns, n_intervals);
        let mut ring_forwards = vec![true; rings.len()];
        for (ci, rs) in class_rings.iter().enumerate() {
            let cls = &cfg.traffic.classes[ci];
            if class_app[ci].is_some() || cls.closed_loop.is_some() {
                for &r in rs {
                    ring_forwards[r] = false;
                }
            }
        }
        for (r, ring) in rings.iter().enumerate() {
            if !rps_cpus[ring.queue].is_empty() {
                ring_forwards[r] = false;
            }
        }
        for r in rings.iter_mut() {
            r.count_in(win, nclass);
        }
        Sim {
            cfg,
            profile,
            seed,
            q: EventQueue::new(),
            start,
            end,
            stop: end + DRAIN_NS,
            interval_ns,
            n_intervals,
            win,
            tx_sched: vec![Vec::new(); ncpu],
            ser_memo: (u32::MAX, 0),
            ring_forwards,
            pop_buf: Vec::new(),
            lat_buf: Vec::new(),
            spare_lists: Vec::new(),
            tick_ns,
            hz,
            skip_rule: cfg.skip_inline_while_ksoftirqd(),
            weight,
            budget_usecs: cfg
                .settings
                .netdev_budget_usecs
                .map(u64::from)
                .unwrap_or(2_000_000 / hz as u64),
            costs,
            lat_irq: profile.latency_ns.irq_delivery,
            lat_wake: profile.latency_ns.idle_wakeup,
            lat_rx_dma: profile.latency_ns.rx_dma,
            lat_tx_dma: profile.latency_ns.tx_dma,
            ser_ns_per_byte: 8_000.0 / cfg.egress.link_mbps,
            rings,
            napis,
            lines,
            txqs,
            tx_lines,
            tx_napi,
            wire_free: 0,
            finish: vec![Finish::Nothing; ncpu],
            exit: vec![None; ncpu],
            cpus,
            threads,
            acct,
            counts: vec![counts0.clone(); n_intervals],
            total: counts0,
            latency: vec![LatencyHistogram::new(); nclass],
            poll_hist: vec![0; weight as usize + 1],
            rps_cpus,
            rps_rng,
            backlogs: vec![VecDeque::new(); ncpu],
            backlog_napi,
            apps,
            class_app,
            class_rings,
            closed,
        }
    }

    /// Apply `f` to the counters of the interval holding `t` (the totals are their
    /// sum, taken at the end of the run).
    #[inline(always)]
    fn count(&mut self, t: Nanos, f: impl Fn(&mut Counts)) {
        if let Some(i) = self.win.lookup(t) {
            f(&mut self.counts[i]);
        }
    }

    pub fn run(&mut self) {
        for c in 0..self.cpus.len() {
            self.cpus[c].idle_since = Some(0);
        }
        // Closed-loop clients start staggered over one think time plus round trip.
        for ci in 0..self.closed.len() {
            let Some((cl, mut rng)) = self.closed[ci].take() else {
                continue;
            };
            let spread = (cl.think_us + cl.rtt_us).max(10.0) * 1e3;
            for f in 0..cl.clients {
                let at = (rng.next_f64() * spread) as Nanos;
                self.inject(ci, f, at);
            }
            self.closed[ci] = Some((cl, rng));
        }
        let now = 0;
        for l in 0..self.lines.len() {
            self.arm_line(l, now);
        }
        while let Some(t) = self.q.peek_time() {
            if t > self.stop {
                break;
            }
            let Some((_, ev)) = self.q.pop() else { break };
            match ev {
                Ev::BatchEnd(c) => self.batch_end(c),
                Ev::Irq(l, gen) => self.irq_fires(l, gen),
                Ev::NapiTimer(n, gen) => self.napi_timer(n, gen),
                Ev::WakeApp(a) => {
                    self.apps[a].wake_pending = false;
                    let t = self.apps[a].thread;
                    self.wake_thread(t);
                    let c = self.threads[t].cpu;
                    if !self.cpus[c].busy {
                        self.dispatch(c);
                    }
                }
                Ev::Ipi(c) => {
                    self.cpus[c].pending_irqs.push_back(IrqSrc::RpsIpi);
                    if !self.cpus[c].busy {
                        self.dispatch(c);
                    }
                }
            }
        }
        // Arrivals nobody polled still count as offered (or dropped if the ring filled).
        let nclass = self.latency.len();
        for r in 0..self.rings.len() {
            self.rings[r].admit_until(self.stop);
            let ring = &self.rings[r];
            for (i, k) in self.counts.iter_mut().enumerate() {
                for c in 0..nclass {
                    let (a, d) = (ring.admitted[i * nclass + c], ring.dropped[i * nclass + c]);
                    k.class_offered[c] += a + d;
                    k.class_rx_dropped[c] += d;
                    k.queue_rx_dropped[ring.queue] += d;
                }
            }
        }
        let mut total = self.total.clone();
        for k in &self.counts {
            total.add(k);
        }
        self.total = total;
        self.acct.finish();
    }

    // ---- NIC side -------------------------------------------------------------

    /// A closed-loop client's request arrives at `at` on its ring.
    fn inject(&mut self, class: usize, flow: u32, at: Nanos) {
        let rings = &self.class_rings[class];
        if rings.is_empty() {
            return;
        }
        let r = rings[flow as usize % rings.len()];
        let size = self.cfg.traffic.classes[class].size_bytes;
        self.rings[r].inject(Packet {
            arrival: at,
            class: class as u16,
            size,
            flow,
        });
        // The new arrival may come before what the line's interrupt was armed for.
        let q = self.rings[r].queue;
        if let Some(l) = self.napis[q].line {
            if self.lines[l].enabled {
                self.lines[l].armed = false;
                let now = self.q.now();
                self.arm_line(l, now);
            }
        }
    }

    /// Schedule the interrupt of an unmasked line with pending work.
    fn arm_line(&mut self, l: usize, now: Nanos) {
        let line = &self.lines[l];
        if !line.enabled || line.armed {
            return;
        }
        let frames = line.frames as usize;
        let (first, nth) = match line.kind {
            LineKind::Rx { .. } => {
                let napi = line.napi;
                let mut first: Option<Nanos> = None;
                let mut times: Vec<Nanos> = Vec::new();
                for i in 0..self.napis[napi].rings.len() {
                    let r = self.napis[napi].rings[i];
                    if let Some(t) = self.rings[r].nth_pending(1) {
                        first = Some(first.map_or(t, |f: Nanos| f.min(t)));
                    }
                    if frames > 0 {
                        for k in 1..=frames {
                            match self.rings[r].nth_pending(k) {
                                Some(t) => times.push(t),
                                None => break,
                            }
                        }
                    }
                }
                let nth = if frames > 0 && times.len() >= frames {
                    times.sort_unstable();
                    Some(times[frames - 1])
                } else {
                    None
                };
                // A combined vector also fires for the first TX completion.
                if let Some(x) = line.txq {
                    if let Some(&d) = self.txqs[x].inflight.front() {
                        first = Some(first.map_or(d, |f| f.min(d)));
                    }
                }
                (first, nth)
            }
            LineKind::TxCompletion { txq } => {
                let inflight = &self.txqs[txq].inflight;
                let nth = if frames > 0 {
                    inflight.get(frames - 1).copied()
                } else {
                    None
                };
                (inflight.front().copied(), nth)
            }
        };
        let Some(first) = first else { return };
        let fire = self.lines[l].fire_time(now, first, nth) + self.lat_irq;
        if fire <= self.stop {
            let line = &mut self.lines[l];
            line.armed = true;
            line.fire_at = fire;
            line.gen += 1;
            self.q.schedule(fire, Ev::Irq(l, line.gen));
        }
    }

    /// A TX completion line counting frames: a new descriptor may reach the frame
    /// count before the armed timer; fire then instead.
    fn rearm_tx_frames(&mut self, l: usize) {
        let line = &self.lines[l];
        let frames = line.frames as usize;
        if !line.enabled || !line.armed || frames == 0 {
            return;
        }
        let LineKind::TxCompletion { txq } = line.kind else {
            return;
        };
        let Some(&nth) = self.txqs[txq].inflight.get(frames - 1) else {
            return;
        };
        let fire = nth.max(self.q.now()) + self.lat_irq;
        if fire < line.fire_at {
            let line = &mut self.lines[l];
            line.fire_at = fire;
            line.gen += 1;
            self.q.schedule(fire, Ev::Irq(l, line.gen));
        }
    }

    fn irq_fires(&mut self, l: usize, gen: u64) {
        let line = &mut self.lines[l];
        if gen != line.gen {
            return; // superseded by an earlier re-arm
        }
        line.armed = false;
        if !line.enabled {
            return;
        }
        // The handler masks the vector (docs/kernel.md#packet-path, step 2); the NIC
        // does not raise it again until the driver unmasks it.
        line.enabled = false;
        let c = line.cpu;
        self.cpus[c].pending_irqs.push_back(IrqSrc::Line(l));
        if !self.cpus[c].busy {
            self.dispatch(c);
        }
    }

    fn napi_timer(&mut self, n: usize, gen: u64) {
        let napi = &self.napis[n];
        if napi.timer_gen != gen || napi.scheduled {
            return;
        }
        let c = napi.cpu;
        self.cpus[c].pending_irqs.push_back(IrqSrc::NapiTimer(n));
        if !self.cpus[c].busy {
            self.dispatch(c);
        }
    }

    // ---- NAPI -----------------------------------------------------------------

    fn napi_schedule(&mut self, n: usize) {
        if !self.napis[n].schedule() {
            return;
        }
        match self.napis[n].thread {
            Some(t) => self.wake_thread(t),
            None => {
                let c = self.napis[n].cpu;
                self.cpus[c].poll_list.push_back(n);
                self.cpus[c].softirq_pending |= NET_RX;
            }
        }
    }

    fn napi_complete(&mut self, n: usize, work: u32, now: Nanos) {
        match self.napis[n].complete_done(work) {
            Completion::Reschedule => match self.napis[n].thread {
                Some(t) => self.wake_thread(t),
                None => {
                    let c = self.napis[n].cpu;
                    self.cpus[c].poll_list.push_back(n);
                    self.cpus[c].softirq_pending |= NET_RX;
                }
            },
            Completion::Defer(timeout) => {
                let gen = self.napis[n].timer_gen;
                self.q.schedule(now + timeout, Ev::NapiTimer(n, gen));
            }
            Completion::Unmask => match (self.napis[n].line, self.napis[n].backlog) {
                (Some(l), _) => {
                    self.lines[l].enabled = true;
                    self.arm_line(l, now);
                }
                (None, Some(b)) => {
                    // Packets queued "later" by another CPU's batch computed ahead of
                    // this one: their enqueuer would have found the instance idle and
                    // sent an IPI; deliver that IPI when the first one is queued.
                    if let Some(&(ready, _)) = self.backlogs[b].front() {
                        self.napis[n].scheduled = true;
                        self.q.schedule(ready.max(now) + self.lat_irq, Ev::Ipi(b));
                    }
                }
                (None, None) => {}
            },
        }
    }

    /// Run the driver poll of instance `n` from `t`; returns (end time, RX packets,
    /// whether the poll reports "not done" by returning the whole weight).
    fn poll(&mut self, c: usize, n: usize, mut t: Nanos, weight: u32) -> (Nanos, u32, bool) {
        t += self.costs.poll;
        let mut clean = true;
        if let Some(x) = self.napis[n].txq {
            let (k, complete) = self.txqs[x].reclaim(t, self.cfg.egress.tx_work_limit);
            t += k as u64 * self.costs.reclaim;
            clean &= complete;
            self.count(t, |cn| cn.cpus[c].tx_reclaimed += k as u64);
            // netif_tx_wake_queue: a stopped queue with a backlog reschedules the qdisc
            // on this CPU's output queue (the reclaiming CPU, which need not be the one
            // that transmitted).
            if !self.txqs[x].qdisc.is_empty() && self.txqs[x].has_room() {
                if !self.tx_sched[c].contains(&x) {
                    self.tx_sched[c].push(x);
                }
                self.cpus[c].softirq_pending |= NET_TX;
            }
        }
        let mut total = 0u32;
        let nrings = self.napis[n].rings.len();
        let alternate = self.napis[n].ring_poll == RingPoll::Alternate;
        // One round visits every ring once. The stock driver stops after one round;
        // the study's driver goes round again while the weight lasts and some ring's
        // last visit used its whole allotment (so may hold more).
        loop {
            let mut ring_left_full = false;
            for i in 0..nrings {
                if total >= weight {
                    break;
                }
                let r = self.napis[n].rings[i];
                let rb = self.rings[r].budget.min(weight - total);
                let k;
                (t, k) = self.poll_one_ring(c, r, t, rb);
                // A ring that used its whole allotment may hold more: the stock driver
                // reports "not done" (ixgbe: clean_complete = false) and is polled
                // again; the alternating driver first goes round again.
                if k == rb {
                    ring_left_full = true;
                }
                total += k;
            }
            if !ring_left_full {
                break;
            }
            if !alternate || total >= weight {
                clean = false;
                break;
            }
        }
        if let Some(b) = self.napis[n].backlog {
            // process_backlog: up to the weight, only what was queued by now.
            while total < weight {
                match self.backlogs[b].front() {
                    Some(&(ready, _)) if ready <= t => {}
                    _ => break,
                }
                let Some((_, p)) = self.backlogs[b].pop_front() else {
                    break;
                };
                t = self.forward(c, p, t);
                total += 1;
            }
            if total == weight {
                clean = false;
            }
        }
        let repoll = !clean;
        (t, total, repoll)
    }

    /// One visit of ring `r` by a driver poll: up to `rb` packets from `t`; returns
    /// (end time, packets taken).
    fn poll_one_ring(&mut self, c: usize, r: usize, mut t: Nanos, rb: u32) -> (Nanos, u32) {
        let q = self.rings[r].queue;
        let mut k = 0;
        if self.ring_forwards[r] {
            (t, k) = self.poll_ring_forward(c, r, t, rb);
        }
        while k < rb {
            let Some(p) = self.rings[r].pop_at(t) else {
                break;
            };
            t += self.costs.rx_poll;
            let size = p.size as u64;
            self.count(t, |cn| {
                cn.rx_packets += 1;
                cn.rx_bytes += size;
                cn.queue_rx_packets[q] += 1;
            });
            if self.rps_cpus[q].is_empty() {
                t = self.forward(c, p, t);
            } else {
                t += self.costs.rps;
                self.rps_enqueue(c, q, p, t);
            }
            k += 1;
        }
        (t, k)
    }

    /// The ring loop of `poll` for a ring whose packets are all forwarded by this CPU
    /// (no RPS, no local delivery, no closed-loop client): the same steps as
    /// `forward` -> `egress` -> `send` per packet, written out so that the common case
    /// of a router stays a tight loop. A packet that meets a non-empty qdisc or a full
    /// TX ring takes the general `egress`. A dedicated TX-completion IRQ is armed once
    /// after the loop rather than after each descriptor: the same fire time results
    /// (the first pending completion plus tx-usecs, or the tx-frames-th completion),
    /// since no completion is reclaimed inside the loop.
    fn poll_ring_forward(&mut self, c: usize, r: usize, mut t: Nanos, rb: u32) -> (Nanos, u32) {
        let (rx_poll, ip, xmit) = (self.costs.rx_poll, self.costs.ip, self.costs.xmit);
        let q = self.rings[r].queue;
        let noqueue = self.cfg.egress.qdisc == QdiscKind::None;
        let arm_each = !matches!(
            self.lines[self.tx_lines[c]].kind,
            LineKind::TxCompletion { .. }
        );
        if !arm_each {
            let txq = &self.txqs[c];
            if (noqueue || txq.qdisc.is_empty()) && txq.inflight.len() + rb as usize <= txq.size {
                // Every packet of the poll takes the bypass to a TX ring with room, so
                // the k-th pop is at t + k (rx_poll + ip + xmit) whatever arrives: the
                // ring can do its admissions and pops in one pass.
                let mut buf = std::mem::take(&mut self.pop_buf);
                buf.clear();
                let step = rx_poll + ip + xmit;
                let done = self.rings[r].pop_batch(t, step, rb, &mut buf);
                if let Some(b) = done {
                    t = self.forward_batch(c, q, t, b, &buf);
                }
                self.pop_buf = buf;
                if let Some(b) = done {
                    if b.n > 0 {
                        self.arm_tx_line(c);
                    }
                    return (t, b.n);
                }
            }
        }
        let mut sent = false;
        let mut k = 0;
        // Counters of the interval span holding the times seen so far, added to the
        // interval at the end (or when a time leaves the span): rx packets, rx bytes,
        // processed, tx packets, tx bytes.
        let (_, mut hi, mut idx) = self.win.span(t);
        let mut acc = [0u64; 5];
        while k < rb {
            let Some(p) = self.rings[r].pop_at(t) else {
                break;
            };
            let size = p.size as u64;
            let t_rx = t + rx_poll;
            t = t_rx + ip;
            if t < hi {
                acc[0] += 1;
                acc[1] += size;
                acc[2] += 1;
            } else {
                self.flush_forward(c, q, idx, &mut acc);
                self.count(t_rx, |cn| {
                    cn.rx_packets += 1;
                    cn.rx_bytes += size;
                    cn.queue_rx_packets[q] += 1;
                });
                self.count(t, |cn| cn.cpus[c].processed += 1);
                (_, hi, idx) = self.win.span(t);
            }
            let txq = &self.txqs[c];
            if noqueue || txq.qdisc.is_empty() {
                t += xmit;
                if txq.has_room() {
                    let done = self.send_wire(c, p, t);
                    if t < hi {
                        acc[3] += 1;
                        acc[4] += size;
                    } else {
                        self.flush_forward(c, q, idx, &mut acc);
                        self.count(t, |cn| {
                            cn.tx_packets += 1;
                            cn.tx_bytes += size;
                        });
                        (_, hi, idx) = self.win.span(t);
                    }
                    self.send_delivered(p, done);
                    if arm_each {
                        self.arm_tx_line(c);
                    }
                    sent = true;
                } else if noqueue {
                    self.count(p.arrival, |cn| cn.class_tx_dropped[p.class as usize] += 1);
                } else {
                    // A full TX ring: the qdisc takes it (undo the bypass cost).
                    t = self.egress(c, p, t - xmit);
                }
            } else {
                t = self.egress(c, p, t);
            }
            k += 1;
        }
        self.flush_forward(c, q, idx, &mut acc);
        if sent && !arm_each {
            self.arm_tx_line(c);
        }
        (t, k)
    }

    /// The rest of `poll_ring_forward` for packets popped by `RxRing::pop_batch` at
    /// `t0`, `t0 + step`, ...: the same counters, TX descriptors and latencies as the
    /// packet-at-a-time loop, the counters added once when the batch's times fall in
    /// one interval. Returns the time after the last packet.
    fn forward_batch(
        &mut self,
        c: usize,
        q: usize,
        t0: Nanos,
        b: Batch,
        arrivals: &[Nanos],
    ) -> Nanos {
        let (rx_poll, ip, xmit) = (self.costs.rx_poll, self.costs.ip, self.costs.xmit);
        let step = rx_poll + ip + xmit;
        let n = arrivals.len() as u64;
        let size = b.size as u64;
        let end = t0 + n * step;
        if n == 0 {
            return end;
        }
        // CPU-side counters: rx at t + rx_poll, processed at + ip, tx at + xmit.
        let (_, hi, idx) = self.win.span(t0 + rx_poll);
        if end < hi {
            if let Some(i) = idx {
                let k = &mut self.counts[i];
                k.rx_packets += n;
                k.rx_bytes += n * size;
                k.queue_rx_packets[q] += n;
                k.cpus[c].processed += n;
                k.tx_packets += n;
                k.tx_bytes += n * size;
            }
        } else {
            for j in 0..n {
                let t_rx = t0 + j * step + rx_poll;
                self.count(t_rx, |cn| {
                    cn.rx_packets += 1;
                    cn.rx_bytes += size;
                    cn.queue_rx_packets[q] += 1;
                });
                self.count(t_rx + ip, |cn| cn.cpus[c].processed += 1);
                self.count(t_rx + ip + xmit, |cn| {
                    cn.tx_packets += 1;
                    cn.tx_bytes += size;
                });
            }
        }
        // The wire (send_wire) and each packet's latency, counted by its arrival.
        if self.ser_memo.0 != b.size {
            let ser = ((b.size as f64 + 20.0) * self.ser_ns_per_byte).round() as Nanos;
            self.ser_memo = (b.size, ser);
        }
        let ser = self.ser_memo.1;
        let (dma, rx_dma) = (self.lat_tx_dma, self.lat_rx_dma);
        // Departures first (a serial max/add chain), then the TX ring takes them in
        // one extend, then they become latencies in place: three simple loops
        // rather than one with two growing containers.
        let mut lat = std::mem::take(&mut self.lat_buf);
        lat.clear();
        let mut wire = self.wire_free;
        let mut t_tx = t0 + step;
        lat.extend(arrivals.iter().map(|_| {
            let done = (t_tx + dma).max(wire) + ser;
            wire = done;
            t_tx += step;
            done
        }));
        self.txqs[c].inflight.extend(lat.iter().copied());
        for (l, &a) in lat.iter_mut().zip(arrivals) {
            *l = *l + rx_dma - a;
        }
        self.wire_free = wire;
        let cls = b.class as usize;
        let (_, hi, idx) = self.win.span(arrivals[0]);
        if arrivals[arrivals.len() - 1] < hi {
            if let Some(i) = idx {
                self.counts[i].class_forwarded[cls] += n;
                self.latency[cls].record_all(&lat);
            }
        } else {
            for (&a, &l) in arrivals.iter().zip(&lat) {
                if let Some(i) = self.win.lookup(a) {
                    self.counts[i].class_forwarded[cls] += 1;
                    self.latency[cls].record(l);
                }
            }
        }
        self.lat_buf = lat;
        end
    }

    /// Add `poll_ring_forward`'s accumulated counters to interval `idx` and reset them.
    #[inline]
    fn flush_forward(&mut self, c: usize, q: usize, idx: Option<usize>, acc: &mut [u64; 5]) {
        if let Some(i) = idx {
            let k = &mut self.counts[i];
            k.rx_packets += acc[0];
            k.rx_bytes += acc[1];
            k.queue_rx_packets[q] += acc[0];
            k.cpus[c].processed += acc[2];
            k.tx_packets += acc[3];
            k.tx_bytes += acc[4];
        }
        *acc = [0; 5];
    }

    /// RPS: `enqueue_to_backlog` of the target CPU at time `t`.
    fn rps_enqueue(&mut self, c: usize, q: usize, p: Packet, t: Nanos) {
        let cpus = &self.rps_cpus[q];
        let target = cpus[(self.rps_rng[q].next_u64() % cpus.len() as u64) as usize];
        if self.backlogs[target].len() >= self.cfg.settings.max_backlog as usize {
            self.count(t, |k| k.cpus[target].backlog_drops += 1);
            self.count(p.arrival, |k| k.class_rx_dropped[p.class as usize] += 1);
            return;
        }
        self.backlogs[target].push_back((t, p));
        let Some(n) = self.backlog_napi[target] else {
            return;
        };
        if self.napis[n].scheduled {
            return;
        }
        self.napis[n].scheduled = true;
        if target == c {
            self.cpus[c].poll_list.push_back(n);
            self.cpus[c].softirq_pending |= NET_RX;
        } else if !self.cpus[c].rps_ipi.contains(&target) {
            self.cpus[c].rps_ipi.push(target);
        }
    }

    /// `net_rps_action_and_irq_enable`: send the IPIs queued during the run.
    fn send_rps_ipis(&mut self, c: usize) {
        if self.cpus[c].rps_ipi.is_empty() {
            return;
        }
        let now = self.q.now();
        for b in std::mem::take(&mut self.cpus[c].rps_ipi) {
            self.q.schedule(now + self.lat_irq, Ev::Ipi(b));
        }
    }

    /// One received packet through the IP stack (on CPU `c`) to the egress.
    #[inline]
    fn forward(&mut self, c: usize, p: Packet, mut t: Nanos) -> Nanos {
        t += self.costs.ip;
        self.count(t, |k| k.cpus[c].processed += 1);
        if let Some(a) = self.class_app[p.class as usize] {
            self.deliver(c, a, p, t);
            return t;
        }
        self.egress(c, p, t)
    }

    /// Local delivery: queue on the application's socket and wake its thread.
    fn deliver(&mut self, c: usize, a: usize, p: Packet, t: Nanos) {
        if self.apps[a].socket.len() >= self.apps[a].limit {
            self.count(t, |k| k.cpus[c].socket_drops += 1);
            self.count(p.arrival, |k| k.class_rx_dropped[p.class as usize] += 1);
            return;
        }
        self.apps[a].socket.push_back((t, p));
        let th = self.apps[a].thread;
        if self.threads[th].runnable || self.apps[a].wake_pending {
            return;
        }
        if self.threads[th].cpu == c {
            // Same CPU: the thread becomes runnable; it runs after the softirq.
            self.wake_thread(th);
        } else {
            self.apps[a].wake_pending = true;
            self.q.schedule(t + self.lat_irq, Ev::WakeApp(a));
        }
    }

    /// The transmit half: qdisc (or none) and the driver, on CPU `c`'s TX queue.
    #[inline]
    fn egress(&mut self, c: usize, p: Packet, mut t: Nanos) -> Nanos {
        match self.cfg.egress.qdisc {
            QdiscKind::None => {
                t += self.costs.xmit;
                if self.txqs[c].has_room() {
                    self.send(c, p, t);
                } else {
                    self.count(p.arrival, |k| k.class_tx_dropped[p.class as usize] += 1);
                }
            }
            QdiscKind::Fifo => {
                if self.txqs[c].qdisc.is_empty() && self.txqs[c].has_room() {
                    // TCQ_F_CAN_BYPASS: an empty qdisc sends directly.
                    t += self.costs.xmit;
                    self.send(c, p, t);
                } else if self.txqs[c].qdisc.len() < self.cfg.egress.qdisc_limit as usize {
                    t += self.costs.qdisc;
                    self.txqs[c].qdisc.push_back(p);
                    self.count(t, |k| k.qdisc_enqueued += 1);
                    t = self.qdisc_run(c, t, u32::MAX);
                } else {
                    t += self.costs.qdisc;
                    self.count(t, |k| k.qdisc_drops += 1);
                    self.count(p.arrival, |k| k.class_tx_dropped[p.class as usize] += 1);
                }
            }
        }
        t
    }

    /// `__qdisc_run`: dequeue while the TX ring has room, at most `quota` packets.
    fn qdisc_run(&mut self, c: usize, mut t: Nanos, quota: u32) -> Nanos {
        let mut k = 0;
        while k < quota && self.txqs[c].has_room() {
            let Some(p) = self.txqs[c].qdisc.pop_front() else {
                break;
            };
            t += self.costs.xmit;
            self.send(c, p, t);
            k += 1;
        }
        t
    }

    /// The driver writes a TX descriptor at `t`; the NIC sends it at line rate.
    #[inline]
    fn send(&mut self, c: usize, p: Packet, t: Nanos) {
        let done = self.send_wire(c, p, t);
        // A reply to a closed-loop client: its next request follows.
        let cls = p.class as usize;
        if let Some((cl, rng)) = self.closed[cls].as_mut() {
            let think = if cl.think_us > 0.0 {
                rng.exp(cl.think_us * 1e3) as Nanos
            } else {
                0
            };
            let next = done + (cl.rtt_us * 1e3) as Nanos + think;
            self.inject(cls, p.flow, next);
        }
        self.send_count(p, t, done);
        self.arm_tx_line(c);
    }

    /// The descriptor's DMA and serialization: when the frame has left the wire.
    #[inline(always)]
    fn send_wire(&mut self, c: usize, p: Packet, t: Nanos) -> Nanos {
        if self.ser_memo.0 != p.size {
            let ser = ((p.size as f64 + 20.0) * self.ser_ns_per_byte).round() as Nanos;
            self.ser_memo = (p.size, ser);
        }
        let ser = self.ser_memo.1;
        let start = (t + self.lat_tx_dma).max(self.wire_free);
        let done = start + ser;
        self.wire_free = done;
        self.txqs[c].inflight.push_back(done);
        done
    }

    /// TX counters at `t`, and the packet's delivery and latency by its arrival.
    #[inline(always)]
    fn send_count(&mut self, p: Packet, t: Nanos, done: Nanos) {
        let size = p.size as u64;
        self.count(t, |k| {
            k.tx_packets += 1;
            k.tx_bytes += size;
        });
        self.send_delivered(p, done);
    }

    /// The packet's delivery and latency, counted by its arrival.
    #[inline(always)]
    fn send_delivered(&mut self, p: Packet, done: Nanos) {
        if let Some(i) = self.win.lookup(p.arrival) {
            let cls = p.class as usize;
            self.counts[i].class_forwarded[cls] += 1;
            self.latency[cls].record(done + self.lat_rx_dma - p.arrival);
        }
    }

    /// A descriptor was written on CPU `c`'s TX queue: arm its completion IRQ.
    #[inline(always)]
    fn arm_tx_line(&mut self, c: usize) {
        // Most sends find the completion IRQ masked (a poll is running) or already
        // armed: test that here, without the calls.
        let l = self.tx_lines[c];
        let line = &self.lines[l];
        if line.enabled && (!line.armed || line.frames > 0) {
            let now = self.q.now();
            self.arm_line(l, now);
            self.rearm_tx_frames(l);
        }
    }

    // ---- CPU ------------------------------------------------------------------

    fn wake_thread(&mut self, t: usize) {
        if self.threads[t].runnable {
            return;
        }
        // CFS places a waking thread near the CPU's least-served runnable thread, so
        // a long sleep does not buy it an unbounded claim on the CPU.
        let cpu = self.threads[t].cpu;
        let min = self
            .threads
            .iter()
            .filter(|x| x.cpu == cpu && x.runnable)
            .map(|x| x.vruntime)
            .min();
        if let Some(m) = min {
            let floor = m.saturating_sub(crate::cpu::TIME_SLICE_NS / 2);
            self.threads[t].vruntime = self.threads[t].vruntime.max(floor);
        }
        // Every wake-up comes from work on the thread's own CPU (IRQ, timer, softirq
        // of that CPU), whose dispatch follows, so no dispatch here.
        self.threads[t].runnable = true;
    }

    /// Start a batch of `pre` + work computed by `work(start)` ... see callers. Returns
    /// the start time (after an idle wake-up) and the idle-exit penalty to add.
    fn begin(&mut self, c: usize, irq: bool) -> (Nanos, Nanos) {
        let now = self.q.now();
        match self.cpus[c].idle_since.take() {
            Some(_) => {
                let wake = if irq { self.lat_wake } else { 0 };
                (now + wake, self.costs.idle_exit)
            }
            None => (now, 0),
        }
    }

    fn commit(&mut self, c: usize, start: Nanos, end: Nanos, ctx: Ctx, finish: Finish) {
        let end = end.max(start);
        let in_idle_loop = self.cpus[c].current.is_none();
        if !in_idle_loop
            && matches!(
                ctx,
                Ctx::HardIrq | Ctx::OtherIrq | Ctx::Softirq | Ctx::SoftirqBh
            )
        {
            self.cpus[c].interrupted = true;
        }
        self.acct.record(c, start, end, ctx, in_idle_loop);
        if matches!(
            ctx,
            Ctx::Ksoftirqd
                | Ctx::KThread
                | Ctx::User
                | Ctx::NapiThread
                | Ctx::BusyPoll
                | Ctx::AppKernel
        ) {
            if let Some(t) = self.cpus[c].current {
                self.threads[t].vruntime += end - start;
                let d = end - start;
                self.count(start, |k| k.thread_ns[t] += d);
            }
        }
        self.cpus[c].busy = true;
        self.finish[c] = finish;
        self.q.schedule(end, Ev::BatchEnd(c));
    }

    /// A batch of thread work whose first part [start, mid) is `first` and the rest
    /// `second` (an application's system calls, then its own work).
    fn commit_split(
        &mut self,
        c: usize,
        start: Nanos,
        mid: Nanos,
        end: Nanos,
        first: Ctx,
        second: Ctx,
    ) {
        let in_idle_loop = self.cpus[c].current.is_none();
        self.acct.record(c, start, mid, first, in_idle_loop);
        self.commit(c, mid, end, second, Finish::Nothing);
        // commit() charged [mid, end) to the thread; charge the first part too.
        if let Some(t) = self.cpus[c].current {
            self.threads[t].vruntime += mid - start;
            let d = mid - start;
            self.count(start, |k| k.thread_ns[t] += d);
        }
    }

    fn batch_end(&mut self, c: usize) {
        self.cpus[c].busy = false;
        let now = self.q.now();
        match std::mem::replace(&mut self.finish[c], Finish::Nothing) {
            Finish::Nothing => {}
            Finish::Irq(src) => {
                match src {
                    IrqSrc::Line(l) => {
                        let n = self.lines[l].napi;
                        self.count(now, |k| {
                            k.cpus[c].hardirqs += 1;
                            k.cpus[c].net_hardirqs += 1;
                            k.lines[l] += 1;
                        });
                        self.napi_schedule(n);
                    }
                    IrqSrc::RpsIpi => {
                        // The enqueuer already set SCHED; the IPI puts the backlog on
                        // this CPU's poll list.
                        self.count(now, |k| {
                            k.cpus[c].hardirqs += 1;
                            k.cpus[c].received_rps += 1;
                        });
                        if let Some(n) = self.backlog_napi[c] {
                            self.napis[n].scheduled = true;
                            let queued = self.cpus[c].poll_list.contains(&n)
                                || self.cpus[c]
                                    .softirq
                                    .as_ref()
                                    .and_then(|r| r.net_rx.as_ref())
                                    .is_some_and(|nr| {
                                        nr.list.contains(&n) || nr.repoll.contains(&n)
                                    });
                            if !queued {
                                self.cpus[c].poll_list.push_back(n);
                            }
                            self.cpus[c].softirq_pending |= NET_RX;
                        }
                    }
                    IrqSrc::NapiTimer(n) => {
                        // napi_watchdog (hrtimer): schedule unless already scheduled.
                        self.count(now, |k| k.cpus[c].hardirqs += 1);
                        if !self.napis[n].scheduled {
                            self.napi_schedule(n);
                        }
                    }
                }
                self.exit[c] = Some(ExitKind::Irq);
            }
            Finish::SoftirqPoll { napi, work, repoll } => {
                self.record_poll(now, c, work, repoll);
                if repoll {
                    if let Some(nr) = self.net_rx_mut(c) {
                        nr.repoll.push_back(napi);
                    }
                } else {
                    self.napi_complete(napi, work, now);
                }
                let returned = if repoll { self.weight } else { work };
                let tick_ns = self.tick_ns;
                let squeezed = self
                    .net_rx_mut(c)
                    .is_some_and(|nr| nr.account_poll(returned, now, tick_ns));
                if squeezed {
                    self.count(now, |k| k.cpus[c].squeeze += 1);
                }
            }
            Finish::BusyPollStop {
                napi,
                work,
                repoll,
                skip,
            } => {
                self.record_poll(now, c, work, repoll);
                self.count(now, |k| k.cpus[c].busy_polls += 1);
                // MISSED is cleared: this poll is the reschedule it asked for.
                self.napis[napi].missed = false;
                if repoll && skip {
                    // __busy_poll_stop with skip_schedule: release; the timer polls.
                    let nn = &mut self.napis[napi];
                    nn.scheduled = false;
                    nn.timer_gen += 1;
                    let (gen, t) = (nn.timer_gen, nn.gro_flush_timeout);
                    self.q.schedule(now + t, Ev::NapiTimer(napi, gen));
                } else if repoll {
                    // __napi_schedule from the application: this CPU's poll list.
                    match self.napis[napi].thread {
                        Some(t) => self.wake_thread(t),
                        None => {
                            self.cpus[c].poll_list.push_back(napi);
                            self.cpus[c].softirq_pending |= NET_RX;
                        }
                    }
                } else {
                    self.napi_complete(napi, work, now);
                }
                self.exit[c] = Some(ExitKind::BhEnable);
            }
            Finish::ThreadPoll {
                thread,
                napi,
                work,
                repoll,
            } => {
                self.record_poll(now, c, work, repoll);
                self.count(now, |k| k.cpus[c].thread_polls += 1);
                if !repoll {
                    self.napi_complete(napi, work, now);
                    self.threads[thread].runnable = self.napis[napi].scheduled;
                }
                self.send_rps_ipis(c);
                // napi_threaded_poll wraps each poll in local_bh_disable/enable.
                self.exit[c] = Some(ExitKind::BhEnable);
            }
        }
        self.dispatch(c);
    }

    fn record_poll(&mut self, now: Nanos, c: usize, work: u32, repoll: bool) {
        let full = repoll as u64;
        self.count(now, |k| {
            k.cpus[c].polls += 1;
            k.cpus[c].poll_packets += work as u64;
            k.cpus[c].full_polls += full;
        });
        if self.win.index(now).is_some() {
            let i = (work as usize).min(self.poll_hist.len() - 1);
            self.poll_hist[i] += 1;
        }
    }

    /// An empty NAPI list with a buffer from an earlier `net_rx_action`: each run
    /// takes the poll list and makes a repoll list, and allocating both afresh
    /// every time (then growing them one push at a time) showed in the profile.
    fn spare_list(&mut self) -> VecDeque<usize> {
        self.spare_lists.pop().unwrap_or_default()
    }

    /// Keep an emptied list's buffer for `spare_list` (a few at most: memory stays
    /// bounded).
    fn keep_list(&mut self, mut l: VecDeque<usize>) {
        l.clear();
        if self.spare_lists.len() < 8 {
            self.spare_lists.push(l);
        }
    }

    fn net_rx_mut(&mut self, c: usize) -> Option<&mut NetRxRun> {
        self.cpus[c].softirq.as_mut()?.net_rx.as_mut()
    }

    /// Decide what CPU `c` does next, by priority: hard IRQs, the softirq in progress
    /// (or one to start on IRQ exit), then threads; else idle.
    fn dispatch(&mut self, c: usize) {
        loop {
            if self.cpus[c].busy {
                return;
            }
            let now = self.q.now();
            if let Some(src) = self.cpus[c].pending_irqs.pop_front() {
                let (start, pen) = self.begin(c, true);
                let end = start + pen + self.costs.hardirq;
                let ctx = match src {
                    IrqSrc::Line(_) => Ctx::HardIrq,
                    IrqSrc::RpsIpi | IrqSrc::NapiTimer(_) => Ctx::OtherIrq,
                };
                self.commit(c, start, end, ctx, Finish::Irq(src));
                return;
            }
            if let Some(kind) = self.exit[c].take() {
                let cpu = &self.cpus[c];
                if cpu.softirq.is_none() && cpu.softirq_pending != 0 {
                    let ksoftirqd = cpu.ksoftirqd;
                    let blocked =
                        kind == ExitKind::Irq && self.skip_rule && self.threads[ksoftirqd].runnable;
                    if !blocked {
                        let pending = std::mem::take(&mut self.cpus[c].softirq_pending);
                        let mut run = SoftirqRun::new(
                            false,
                            now,
                            self.tick_ns,
                            self.hz,
                            pending,
                            self.cfg.settings.max_softirq_restart,
                        );
                        run.bh_enable = kind == ExitKind::BhEnable;
                        self.cpus[c].softirq = Some(run);
                    }
                }
            }
            if self.cpus[c].softirq.is_some() {
                if self.softirq_step(c) {
                    return;
                }
                continue;
            }
            let cur = self.cpus[c].current;
            let slice = self.cpus[c].slice_start;
            match pick_thread(&self.threads, c, cur, slice, now) {
                Some(t) => {
                    if cur != Some(t) {
                        self.cpus[c].current = Some(t);
                        self.cpus[c].slice_start = now;
                        self.cpus[c].interrupted = false;
                        let (start, pen) = self.begin(c, false);
                        let end = start + pen + self.costs.switch;
                        self.commit(c, start, end, Ctx::KThread, Finish::Nothing);
                        return;
                    }
                    if std::mem::take(&mut self.cpus[c].interrupted)
                        && self.costs.after_interrupt > 0
                    {
                        let ctx = match self.threads[t].kind {
                            ThreadKind::App(_) => Ctx::User,
                            ThreadKind::Ksoftirqd => Ctx::Ksoftirqd,
                            ThreadKind::Napi(_) => Ctx::NapiThread,
                        };
                        let end = now + self.costs.after_interrupt;
                        self.commit(c, now, end, ctx, Finish::Nothing);
                        return;
                    }
                    if self.thread_step(c, t) {
                        return;
                    }
                }
                None => {
                    self.cpus[c].current = None;
                    self.cpus[c].interrupted = false;
                    if self.cpus[c].idle_since.is_none() {
                        self.cpus[c].idle_since = Some(now);
                    }
                    return;
                }
            }
        }
    }

    /// One step of thread `t`; false if it had nothing to do (it then sleeps).
    fn thread_step(&mut self, c: usize, t: usize) -> bool {
        match self.threads[t].kind {
            ThreadKind::Ksoftirqd => {
                let pending = std::mem::take(&mut self.cpus[c].softirq_pending);
                if pending == 0 {
                    self.threads[t].runnable = false;
                    return false;
                }
                let now = self.q.now();
                self.cpus[c].softirq = Some(SoftirqRun::new(
                    true,
                    now,
                    self.tick_ns,
                    self.hz,
                    pending,
                    self.cfg.settings.max_softirq_restart,
                ));
                self.softirq_step(c)
            }
            ThreadKind::App(a) => self.app_step(c, t, a),
            ThreadKind::Napi(n) => {
                if !self.napis[n].scheduled {
                    self.threads[t].runnable = false;
                    return false;
                }
                let (start, pen) = self.begin(c, false);
                let (end, work, repoll) = self.poll(c, n, start + pen, self.weight);
                self.commit(
                    c,
                    start,
                    end,
                    Ctx::NapiThread,
                    Finish::ThreadPoll {
                        thread: t,
                        napi: n,
                        work,
                        repoll,
                    },
                );
                true
            }
        }
    }

    /// Busy polling (`napi_busy_loop`, net/core/dev.c): with an empty socket the
    /// application polls the instance with its busy-poll budget, holding it so that
    /// the driver does not complete it and its IRQ stays masked, until data arrives or
    /// the busy-poll time is up; then `busy_poll_stop` polls once more normally, which
    /// completes the instance (unmasking the IRQ) or hands it to the softirq if that
    /// poll used the whole budget. Returns true if a batch was started.
    fn busy_poll_step(&mut self, c: usize, a: usize, data: bool) -> bool {
        let Some(bs) = self.apps[a].busy else {
            return false;
        };
        let n = bs.napi;
        let now = self.q.now();
        if data {
            self.apps[a].busy_loop_done = false;
        } else if self.apps[a].busy_loop_done {
            return false; // the loop is over: block
        }
        let deadline = *self.apps[a].busy_deadline.get_or_insert(now + bs.usecs);
        if !data && (now < deadline || !self.apps[a].busy_polled) {
            self.apps[a].busy_polled = true;
            let (start, pen) = self.begin(c, false);
            let mut tt = start + pen;
            if !self.apps[a].owns_napi && !self.napis[n].scheduled {
                self.napis[n].scheduled = true;
                self.apps[a].owns_napi = true;
            }
            if self.apps[a].owns_napi {
                let (end, work, _) = self.poll(c, n, tt, bs.budget);
                tt = end;
                self.record_poll(end, c, work, work == bs.budget);
                self.count(end, |k| k.cpus[c].busy_polls += 1);
            } else {
                // Another context polls the instance: spin.
                tt += self.costs.poll.max(1);
            }
            self.commit(c, start, tt.max(start + 1), Ctx::BusyPoll, Finish::Nothing);
            return true;
        }
        self.apps[a].busy_deadline = None;
        self.apps[a].busy_polled = false;
        self.apps[a].busy_loop_done = !data;
        if !self.apps[a].owns_napi {
            return false;
        }
        self.apps[a].owns_napi = false;
        // prefer-busy-poll: reload the deferral so the final completion re-arms the
        // gro-flush-timeout timer and leaves the IRQ masked.
        let napi = &mut self.napis[n];
        let skip = bs.prefer && napi.defer_hard_irqs > 0 && napi.gro_flush_timeout > 0;
        if skip {
            napi.defer_count = napi.defer_hard_irqs;
        }
        let (start, pen) = self.begin(c, false);
        let (end, work, repoll) = self.poll(c, n, start + pen, bs.budget);
        self.commit(
            c,
            start,
            end,
            Ctx::BusyPoll,
            Finish::BusyPollStop {
                napi: n,
                work,
                repoll: repoll || work == bs.budget,
                skip,
            },
        );
        true
    }

    /// IRQ suspension (6.13 `napi_suspend_irqs`): epoll returned events, so push the
    /// instance's timer out to irq-suspend-timeout.
    fn suspend_irqs(&mut self, a: usize) {
        let Some(bs) = self.apps[a].busy else { return };
        if !bs.prefer || bs.suspend == 0 {
            return;
        }
        let now = self.q.now();
        let napi = &mut self.napis[bs.napi];
        napi.timer_gen += 1;
        let gen = napi.timer_gen;
        self.q
            .schedule(now + bs.suspend, Ev::NapiTimer(bs.napi, gen));
    }

    /// `napi_resume_irqs`: epoll found nothing and the application blocks; hand the
    /// instance to the softirq, whose completions then count down the deferral.
    fn resume_irqs(&mut self, c: usize, a: usize) {
        let Some(bs) = self.apps[a].busy else { return };
        if !bs.prefer || bs.suspend == 0 {
            return;
        }
        let n = bs.napi;
        if self.napis[n].schedule() {
            match self.napis[n].thread {
                Some(t) => self.wake_thread(t),
                None => {
                    self.cpus[c].poll_list.push_back(n);
                    self.cpus[c].softirq_pending |= NET_RX;
                }
            }
            self.exit[c] = Some(ExitKind::BhEnable);
        }
    }

    /// One step of an application: up to APP_BATCH packets already on its socket.
    fn app_step(&mut self, c: usize, t: usize, a: usize) -> bool {
        let now = self.q.now();
        let ready = self.apps[a]
            .socket
            .iter()
            .take(APP_BATCH)
            .take_while(|(r, _)| *r <= now)
            .count();
        if self.apps[a].busy.is_some() && self.busy_poll_step(c, a, ready > 0) {
            return true;
        }
        if ready == 0 {
            self.threads[t].runnable = false;
            self.apps[a].busy_loop_done = false;
            self.resume_irqs(c, a);
            // Data queued by a batch computed ahead of time: wake up when it lands.
            if let Some(&(r, _)) = self.apps[a].socket.front() {
                if !self.apps[a].wake_pending {
                    self.apps[a].wake_pending = true;
                    self.q.schedule(r, Ev::WakeApp(a));
                }
            }
            return false;
        }
        self.suspend_irqs(a);
        let (start, pen) = self.begin(c, false);
        let mut tt = start + pen;
        let mut user = 0;
        for _ in 0..ready {
            let Some((_, p)) = self.apps[a].socket.pop_front() else {
                break;
            };
            tt += self.apps[a].kernel_ns + self.apps[a].user_ns;
            user += self.apps[a].user_ns;
            match self.apps[a].reply_bytes {
                Some(size) => {
                    // The reply carries the request's arrival time and class: its
                    // latency is the request's response time at the server's NIC.
                    let reply = Packet { size, ..p };
                    tt = self.egress(c, reply, tt);
                }
                None => {
                    if let Some(i) = self.win.lookup(p.arrival) {
                        let cls = p.class as usize;
                        self.counts[i].class_forwarded[cls] += 1;
                        self.latency[cls].record(tt + self.lat_rx_dma - p.arrival);
                    }
                }
            }
        }
        // Kernel part (penalty, system calls, transmit) first, then user time.
        self.commit_split(c, start, tt - user, tt, Ctx::AppKernel, Ctx::User);
        true
    }

    /// Advance the softirq run of CPU `c`; true if a batch was started.
    fn softirq_step(&mut self, c: usize) -> bool {
        loop {
            let now = self.q.now();
            let tick_ns = self.tick_ns;
            let Some(run) = self.cpus[c].softirq.as_mut() else {
                return false;
            };
            let ctx = if run.ksoftirqd {
                Ctx::Ksoftirqd
            } else if run.bh_enable {
                Ctx::SoftirqBh
            } else {
                Ctx::Softirq
            };
            if let Some(nr) = run.net_rx.as_mut() {
                if !nr.squeezed {
                    if nr.list.is_empty() && nr.repoll.is_empty() {
                        // Instances scheduled during this run (6.x "goto start").
                        let cpu = &mut self.cpus[c];
                        if !cpu.poll_list.is_empty() {
                            // Moved over, the poll list keeping its buffer.
                            match cpu.softirq.as_mut().and_then(|r| r.net_rx.as_mut()) {
                                Some(nr) => nr.list.append(&mut cpu.poll_list),
                                None => cpu.poll_list.clear(),
                            }
                            continue;
                        }
                    }
                    let nr = self.net_rx_mut(c).expect("net_rx present");
                    if let Some(n) = nr.list.pop_front() {
                        let entry = !std::mem::replace(&mut nr.entry_paid, true);
                        let (start, pen) = self.begin(c, false);
                        let pre = pen + if entry { self.costs.softirq } else { 0 };
                        let (end, work, repoll) = self.poll(c, n, start + pre, self.weight);
                        self.commit(
                            c,
                            start,
                            end,
                            ctx,
                            Finish::SoftirqPoll {
                                napi: n,
                                work,
                                repoll,
                            },
                        );
                        return true;
                    }
                    if !nr.entry_paid {
                        nr.entry_paid = true;
                        let (start, pen) = self.begin(c, false);
                        let end = start + pen + self.costs.softirq;
                        self.commit(c, start, end, ctx, Finish::Nothing);
                        return true;
                    }
                }
                // End of net_rx_action: what is left goes back on the poll list, the
                // untouched instances first, then the newly scheduled, then repoll.
                let cpu = &mut self.cpus[c];
                let Some(nr) = cpu.softirq.as_mut().and_then(|r| r.net_rx.take()) else {
                    continue;
                };
                let (mut list, mut repoll) = (nr.list, nr.repoll);
                list.append(&mut cpu.poll_list);
                list.append(&mut repoll);
                if !list.is_empty() {
                    cpu.softirq_pending |= NET_RX;
                }
                let old = std::mem::replace(&mut cpu.poll_list, list);
                self.keep_list(old);
                self.keep_list(repoll);
                self.send_rps_ipis(c);
                continue;
            }
            if run.todo & NET_TX != 0 {
                run.todo &= !NET_TX;
                self.count(now, |k| k.cpus[c].tx_softirqs += 1);
                let (start, pen) = self.begin(c, false);
                let t0 = start + pen + self.costs.tx_softirq;
                // net_tx_action: run the qdiscs on this CPU's output queue, one quota
                // each; one that still has a backlog and room stays scheduled.
                let mut end = t0;
                let scheduled = std::mem::take(&mut self.tx_sched[c]);
                for &x in &scheduled {
                    end = self.qdisc_run(x, end, 64);
                    if !self.txqs[x].qdisc.is_empty() && self.txqs[x].has_room() {
                        self.tx_sched[c].push(x);
                        self.cpus[c].softirq_pending |= NET_TX;
                    }
                }
                self.commit(c, start, end, ctx, Finish::Nothing);
                return true;
            }
            if run.todo & NET_RX != 0 {
                run.todo &= !NET_RX;
                self.count(now, |k| k.cpus[c].rx_softirqs += 1);
                let fresh = self.spare_list();
                let repoll = self.spare_list();
                let cpu = &mut self.cpus[c];
                let list: VecDeque<usize> = std::mem::replace(&mut cpu.poll_list, fresh);
                let mut nr = NetRxRun::new(
                    list,
                    self.cfg.settings.netdev_budget,
                    self.budget_usecs,
                    now,
                    tick_ns,
                    self.hz,
                );
                nr.repoll = repoll;
                if let Some(run) = cpu.softirq.as_mut() {
                    run.net_rx = Some(nr);
                }
                continue;
            }
            // End of a pass of __do_softirq.
            let cpu = &mut self.cpus[c];
            let pending = cpu.softirq_pending;
            let run = cpu.softirq.as_mut().expect("softirq run present");
            if pending != 0 {
                if run.may_restart(now, tick_ns) {
                    run.todo = pending;
                    cpu.softirq_pending = 0;
                    continue;
                }
                // wakeup_softirqd
                let k = self.cpus[c].ksoftirqd;
                self.cpus[c].softirq = None;
                self.wake_thread(k);
                return false;
            }
            let was_ksoftirqd = run.ksoftirqd;
            self.cpus[c].softirq = None;
            if was_ksoftirqd {
                let k = self.cpus[c].ksoftirqd;
                self.threads[k].runnable = self.cpus[c].softirq_pending != 0;
            }
            return false;
        }
    }
}
