//! Building a `Sim` from a configuration and a hardware profile: the ingress queues
//! with their rings, IRQ lines, NAPI instances and threads; the egress TX queues; RPS
//! backlogs; applications; the tunnel's peers; workqueue workers; and the counters.
//! Run once per simulation, so clarity comes before speed here.

use std::collections::VecDeque;

use super::{
    client, ns, tunnel, workqueue, App, BusyState, Costs, Counts, CpuCount, Finish, Sim, DRAIN_NS,
};
use crate::accounting::Accounting;
use crate::config::{IrqMode, NapiContext, RingPoll, SimConfig, TickMode, IRQ_THREAD_PRIORITY};
use crate::cpu::{Cpu, Thread, ThreadKind};
use crate::event::{EventQueue, Nanos, Window};
use crate::napi::Napi;
use crate::nic::{IrqLine, LineKind, RxRing, TxQueue};
use crate::profile::Profile;
use crate::rng::Rng;
use crate::traffic::{Feed, Source};
use napilab_core::LatencyHistogram;

/// The devices, instances and threads of a configuration, as they are built one
/// kind after the other (each kind appends to the lists the earlier ones started).
#[derive(Default)]
struct Parts {
    rings: Vec<RxRing>,
    napis: Vec<Napi>,
    lines: Vec<IrqLine>,
    threads: Vec<Thread>,
    /// Rings each class arrives on.
    class_rings: Vec<Vec<usize>>,
    txqs: Vec<TxQueue>,
    tx_lines: Vec<usize>,
    tx_napi: Vec<usize>,
    backlog_napi: Vec<Option<usize>>,
    apps: Vec<App>,
    clients: Vec<client::Client>,
    class_client: Vec<Option<usize>>,
}

/// The measured window, in simulated nanoseconds.
struct Timing {
    start: Nanos,
    end: Nanos,
    interval_ns: Nanos,
    n_intervals: usize,
}

impl Timing {
    fn of(cfg: &SimConfig) -> Timing {
        let ms = |x: f64| (x * 1e6).round() as Nanos;
        let start = ms(cfg.measurement.warmup_ms);
        let duration = ms(cfg.measurement.duration_ms).max(1);
        let interval_ns = cfg
            .measurement
            .interval_ms
            .map(ms)
            .unwrap_or(duration)
            .clamp(1, duration);
        Timing {
            start,
            end: start + duration,
            interval_ns,
            n_intervals: duration.div_ceil(interval_ns) as usize,
        }
    }
}

impl Costs {
    /// The profile's per-event and per-packet cycles as nanoseconds.
    fn of(profile: &Profile) -> Costs {
        let s = &profile.stage_cycles;
        let f = &profile.fixed_cycles;
        Costs {
            hardirq: ns(profile, f.hardirq),
            softirq: ns(profile, f.softirq),
            poll: ns(profile, f.poll),
            tx_softirq: ns(profile, f.tx_softirq),
            switch: ns(profile, f.context_switch),
            idle_exit: ns(profile, f.idle_exit),
            after_interrupt: ns(profile, f.after_interrupt),
            napi_thread_run: ns(profile, f.napi_thread_run),
            napi_thread_packet: ns(profile, f.napi_thread_packet),
            irq_thread: profile
                .irq_thread
                .as_ref()
                .map_or(0, |t| ns(profile, t.handler_cycles)),
            rx_poll: ns(profile, s.poll + s.unmapped),
            ip: ns(profile, s.ip_stack),
            rps: ns(profile, s.rps),
            xmit: ns(profile, s.xmit),
            qdisc: ns(profile, s.qdisc),
            reclaim: ns(profile, s.tx_reclaim),
            busy_loop: ns(profile, super::threaded_busy_poll::BUSY_LOOP_CYCLES).max(1),
        }
    }
}

/// A kernel thread or application thread, not yet runnable.
fn thread(
    pid: u32,
    name: String,
    cpu: usize,
    kind: ThreadKind,
    fifo_priority: Option<u32>,
    pinned: bool,
) -> Thread {
    Thread {
        pid,
        name,
        cpu,
        kind,
        fifo_priority,
        pinned,
        runnable: false,
        vruntime: 0,
        switched_in: false,
        waiting_since: None,
        preempted: false,
    }
}

/// An enabled, unarmed IRQ line; its number follows its index.
#[allow(clippy::too_many_arguments)]
fn irq_line(
    index: usize,
    name: String,
    kind: LineKind,
    cpu: usize,
    napi: usize,
    usecs: u32,
    frames: u32,
) -> IrqLine {
    IrqLine {
        number: 100 + index as u32,
        name,
        kind,
        cpu,
        napi,
        enabled: true,
        armed: false,
        fire_at: 0,
        gen: 0,
        txq: None,
        usecs,
        frames,
        itr: None,
        last_assert: None,
        itr_seen: (0, 0),
        thread: None,
    }
}

/// (name, size, budget) of each ring of ingress queue `qc`: one ring "rx" when it
/// names none.
fn ring_configs(cfg: &SimConfig, qc: &crate::config::RxQueueConfig) -> Vec<(String, usize, u32)> {
    if qc.rings.is_empty() {
        return vec![(
            "rx".to_string(),
            cfg.ingress.rx_ring_size as usize,
            cfg.settings.weight,
        )];
    }
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
}

/// Each ingress queue's RPS CPUs.
fn rps_cpus_of(cfg: &SimConfig) -> Vec<Vec<usize>> {
    cfg.ingress
        .queues
        .iter()
        .map(|q| q.rps_cpus.iter().map(|&c| c as usize).collect())
        .collect()
}

impl Parts {
    /// A thread of the host's other work on each CPU the profile measured stalls on
    /// (`host_stalls`); per CPU, its index.
    fn host_work(&mut self, profile: &Profile, ncpu: usize) -> Vec<Option<usize>> {
        (0..ncpu)
            .map(|c| {
                profile.stalls.iter().any(|s| s.cpu as usize == c).then(|| {
                    self.threads.push(thread(
                        900 + c as u32,
                        format!("host-work/{c}"),
                        c,
                        ThreadKind::HostWork,
                        None,
                        true,
                    ));
                    self.threads.len() - 1
                })
            })
            .collect()
    }

    /// Each CPU's ksoftirqd.
    fn ksoftirqd(&mut self, cpus: &mut [Cpu]) {
        for (c, cpu) in cpus.iter_mut().enumerate() {
            cpu.ksoftirqd = self.threads.len();
            self.threads.push(thread(
                10 + c as u32,
                format!("ksoftirqd/{c}"),
                c,
                ThreadKind::Ksoftirqd,
                None,
                true,
            ));
        }
    }

    /// Ingress: per queue its rings (each fed by one independent stream per class
    /// arriving there), its IRQ line, its NAPI instance and, when threaded, its kthread.
    fn ingress(&mut self, cfg: &SimConfig, seed: u64) {
        // A class without a queue is spread evenly over the queues (RSS).
        let total_share = open_loop_share(cfg);
        self.class_rings = vec![Vec::new(); cfg.traffic.classes.len()];
        let mut stream = 0u64;
        let nq = cfg.ingress.queues.len();
        for (qi, qc) in cfg.ingress.queues.iter().enumerate() {
            let napi_id = self.napis.len();
            let mut ring_ids = Vec::new();
            for (ri, (name, size, budget)) in ring_configs(cfg, qc).into_iter().enumerate() {
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
                    self.class_rings[ci].push(self.rings.len());
                    if class.closed_loop.is_some() || class.client.is_some() {
                        continue; // its arrivals are injected by its clients
                    }
                    let spread = if class.queue.is_some() {
                        1.0
                    } else {
                        nq as f64
                    };
                    let rate = cfg.traffic.rate_pps * class.share / total_share / spread;
                    stream += 1;
                    feed.push(Source::bursty(
                        Rng::new(seed, stream),
                        cfg.traffic.pattern,
                        rate,
                        ci as u16,
                        class.size_bytes,
                        cfg.traffic.burst,
                    ));
                }
                ring_ids.push(self.rings.len());
                self.rings.push(RxRing::new(name, qi, size, budget, feed));
            }
            let line = self.lines.len();
            let mut l = irq_line(
                line,
                format!("{}-TxRx-{qi}", cfg.ingress.name),
                LineKind::Rx { queue: qi },
                qc.cpu as usize,
                napi_id,
                cfg.ingress.rx_usecs,
                cfg.ingress.rx_frames,
            );
            if cfg.ingress.moderation == crate::config::Moderation::IxgbeItr {
                // rx_usecs is ixgbe's ITR setting, not a coalescing timer.
                l.usecs = 0;
                l.itr = Some(crate::nic::IxgbeItr::new(
                    cfg.ingress.rx_usecs,
                    cfg.ingress.adaptive_rx,
                ));
            }
            self.lines.push(l);
            let busy = qc.napi == NapiContext::ThreadedBusyPoll;
            let kthread = (qc.napi == NapiContext::Threaded || busy).then(|| {
                self.threads.push(thread(
                    1000 + napi_id as u32,
                    format!("napi/{}-{}", cfg.ingress.name, 8192 + napi_id),
                    qc.cpu as usize,
                    ThreadKind::Napi(napi_id),
                    qc.thread.fifo_priority,
                    true,
                ));
                self.threads.len() - 1
            });
            self.napis.push(Napi {
                rings: ring_ids,
                ring_poll: qc.ring_poll,
                line: Some(line),
                defer_hard_irqs: qc.defer_hard_irqs,
                gro_flush_timeout: qc.gro_flush_timeout_ns,
                thread: kthread,
                threaded_busy_poll: busy,
                workqueue: qc.napi == NapiContext::Workqueue,
                ..Napi::idle(
                    8192 + napi_id as u32,
                    format!("{}-rx-{qi}", cfg.ingress.name),
                    qc.cpu as usize,
                )
            });
        }
    }

    /// Egress: TX queue k is used by CPU k (XPS) and reclaimed by its own NAPI in
    /// NET_RX_SOFTIRQ on CPU k after a TX completion IRQ (docs/kernel.md#packet-path,
    /// step 6); with combined vectors, by the RX instance on that CPU.
    fn egress(&mut self, cfg: &SimConfig, ncpu: usize) {
        for c in 0..ncpu {
            let combined = (cfg.egress.completion == crate::config::TxCompletion::RxNapi)
                .then(|| cfg.ingress.queues.iter().position(|q| q.cpu as usize == c))
                .flatten();
            if let Some(qi) = combined {
                self.txqs
                    .push(TxQueue::new(cfg.egress.tx_ring_size as usize));
                self.napis[qi].txq = Some(c);
                let line = self.napis[qi].line.unwrap_or(qi);
                self.lines[line].txq = Some(c);
                self.tx_lines.push(line);
                self.tx_napi.push(qi);
                continue;
            }
            let napi_id = self.napis.len();
            self.tx_napi.push(napi_id);
            let line = self.lines.len();
            self.txqs
                .push(TxQueue::new(cfg.egress.tx_ring_size as usize));
            self.tx_lines.push(line);
            // The CPU taking this queue's completion IRQ, and so reclaiming.
            let irq_cpu = match cfg.egress.completion {
                crate::config::TxCompletion::OnCpu(k) => k as usize,
                _ => c,
            };
            let mut l = irq_line(
                line,
                format!("{}-TxRx-{c}", cfg.egress.name),
                LineKind::TxCompletion { txq: c },
                irq_cpu,
                napi_id,
                cfg.egress.tx_usecs,
                cfg.egress.tx_frames,
            );
            if cfg.egress.moderation == crate::config::Moderation::IxgbeItr {
                l.usecs = 0;
                l.itr = Some(crate::nic::IxgbeItr::new(cfg.egress.tx_usecs, false));
            }
            self.lines.push(l);
            self.napis.push(Napi {
                txq: Some(c),
                line: Some(line),
                ..Napi::idle(
                    8192 + napi_id as u32,
                    format!("{}-tx-{c}", cfg.egress.name),
                    irq_cpu,
                )
            });
        }
    }

    /// RPS: one backlog instance per CPU when any queue steers.
    fn backlogs(&mut self, rps_cpus: &[Vec<usize>], ncpu: usize) {
        self.backlog_napi = vec![None; ncpu];
        if rps_cpus.iter().any(|v| !v.is_empty()) {
            for (c, slot) in self.backlog_napi.iter_mut().enumerate() {
                *slot = Some(self.napis.len());
                self.napis.push(Napi {
                    backlog: Some(c),
                    ..Napi::idle(8192 + self.napis.len() as u32, format!("backlog-{c}"), c)
                });
            }
        }
    }

    /// The applications, each with its socket and thread.
    fn apps(&mut self, cfg: &SimConfig, profile: &Profile) {
        for (i, a) in cfg.apps.iter().enumerate() {
            self.apps.push(App {
                thread: self.threads.len(),
                socket: VecDeque::new(),
                limit: a.socket_limit as usize,
                kernel_ns: ns(profile, a.kernel_cycles_per_packet),
                user_ns: ns(profile, a.user_cycles_per_packet),
                return_ns: ns(profile, a.kernel_cycles_per_return),
                resume_ns: ns(profile, a.kernel_cycles_per_resume),
                reply_bytes: a.reply_bytes,
                wake_pending: false,
                busy: a.busy_poll.map(|b| BusyState {
                    napi: b.queue as usize,
                    usecs: b.usecs as Nanos * 1000,
                    budget: b.budget,
                    prefer: b.prefer,
                    suspend: cfg.ingress.queues[b.queue as usize].irq_suspend_timeout_ns,
                    nonblocking_epoll: b.nonblocking_epoll,
                }),
                busy_deadline: None,
                busy_polled: false,
                busy_loop_done: false,
                owns_napi: false,
                unread: 0,
            });
            self.threads.push(thread(
                2000 + i as u32,
                a.name.clone(),
                a.cpu as usize,
                ThreadKind::App(i),
                a.fifo_priority,
                true,
            ));
        }
    }

    /// Load generator threads: one per class with a `client`, sending into the class's
    /// ring at the class's share of the rate.
    fn clients(&mut self, cfg: &SimConfig, profile: &Profile, seed: u64) {
        let total_share = open_loop_share(cfg);
        self.class_client = vec![None; cfg.traffic.classes.len()];
        for (ci, class) in cfg.traffic.classes.iter().enumerate() {
            let (Some(cs), Some(&ring)) = (class.client, self.class_rings[ci].first()) else {
                continue;
            };
            let rate = if total_share > 0.0 {
                cfg.traffic.rate_pps * class.share / total_share
            } else {
                0.0
            };
            let k = self.clients.len();
            self.class_client[ci] = Some(k);
            self.clients.push(client::Client::new(
                &cs,
                ci,
                ring,
                self.threads.len(),
                rate,
                profile,
                Rng::new(seed, 3_000_000 + ci as u64),
            ));
            self.threads.push(thread(
                3000 + k as u32,
                format!("client-{}", class.name),
                cs.cpu as usize,
                ThreadKind::Client(k),
                None,
                true,
            ));
        }
    }

    /// Tunnel peers: an instance each, not tied to a ring, polled in the tunnel's
    /// NAPI context; threaded peers get a kthread each.
    fn tunnel(
        &mut self,
        cfg: &SimConfig,
        profile: &Profile,
        ncpu: usize,
        seed: u64,
    ) -> Option<tunnel::Tunnel> {
        let tc = cfg.tunnel.as_ref()?;
        let mut tun = tunnel::Tunnel::new(tc, profile, ncpu, seed);
        for i in 0..tc.peers as usize {
            let napi_id = self.napis.len();
            let home = i % ncpu;
            let kthread = (tc.napi == NapiContext::Threaded).then(|| {
                self.threads.push(thread(
                    5000 + i as u32,
                    format!("napi/wg0-{}", 8192 + napi_id),
                    home,
                    ThreadKind::Napi(napi_id),
                    None,
                    tc.pinned,
                ));
                self.threads.len() - 1
            });
            self.napis.push(Napi {
                thread: kthread,
                workqueue: tc.napi == NapiContext::Workqueue,
                peer: Some(i),
                ..Napi::idle(8192 + napi_id as u32, format!("wg0-peer-{i}"), home)
            });
            tun.add_peer(napi_id);
        }
        Some(tun)
    }

    /// Workqueue workers, one per CPU, when an instance or the tunnel needs them, and
    /// which of them runs each CPU's decryption item: the CPU's one worker, or a second
    /// worker of the CPU when NAPI polls are work items too (the decryption item is
    /// CPU-intensive, so the pool runs the polls beside it: `sim::workqueue`).
    fn workers(&mut self, ncpu: usize, tunnel: bool) -> (Vec<workqueue::Worker>, Vec<usize>) {
        let napi_items = self.napis.iter().any(|n| n.workqueue);
        if !tunnel && !napi_items {
            return (Vec::new(), Vec::new());
        }
        let per_cpu = if tunnel && napi_items { 2 } else { 1 };
        let mut workers = Vec::new();
        for k in 0..per_cpu {
            for c in 0..ncpu {
                let w = workers.len();
                self.threads.push(thread(
                    3000 + w as u32,
                    format!("kworker/{c}:{}", k + 1),
                    c,
                    ThreadKind::Worker(w),
                    None,
                    true,
                ));
                workers.push(workqueue::Worker {
                    cpu: c,
                    thread: self.threads.len() - 1,
                    items: VecDeque::new(),
                    started: false,
                });
            }
        }
        let crypt = (0..ncpu).map(|c| (per_cpu - 1) * ncpu + c).collect();
        (workers, crypt)
    }

    /// One `irq/N-<dev>` thread per line of a device with `irq_mode = "threaded"`, on
    /// the line's CPU (the thread follows its IRQ's affinity: kernel/irq/manage.c
    /// `irq_thread_check_affinity`), SCHED_FIFO 50. Appended last, so the other
    /// threads keep their numbers.
    fn irq_threads(&mut self, cfg: &SimConfig) {
        for l in 0..self.lines.len() {
            let mode = match self.lines[l].kind {
                LineKind::Rx { .. } => cfg.ingress.irq_mode,
                LineKind::TxCompletion { .. } => cfg.egress.irq_mode,
            };
            if mode != IrqMode::Threaded {
                continue;
            }
            let line = &self.lines[l];
            let dev = match line.kind {
                LineKind::Rx { .. } => &cfg.ingress.name,
                LineKind::TxCompletion { .. } => &cfg.egress.name,
            };
            self.threads.push(thread(
                2000 + l as u32,
                format!("irq/{}-{dev}", line.number),
                line.cpu,
                ThreadKind::Irq(l),
                Some(IRQ_THREAD_PRIORITY),
                true,
            ));
            self.lines[l].thread = Some(self.threads.len() - 1);
        }
    }
}

/// Per RX ring: whether every packet it carries is forwarded by the polling CPU (no
/// RPS, no local delivery, no closed-loop client, no tunnel), so that
/// `poll_ring_forward` applies.
fn ring_forwards(
    cfg: &SimConfig,
    parts: &Parts,
    class_app: &[Option<usize>],
    rps_cpus: &[Vec<usize>],
) -> Vec<bool> {
    let mut forwards = vec![true; parts.rings.len()];
    for (ci, rs) in parts.class_rings.iter().enumerate() {
        let cls = &cfg.traffic.classes[ci];
        if class_app[ci].is_some() || cls.closed_loop.is_some() {
            for &r in rs {
                forwards[r] = false;
            }
        }
    }
    for (r, ring) in parts.rings.iter().enumerate() {
        if !rps_cpus[ring.queue].is_empty() || cfg.tunnel.is_some() {
            forwards[r] = false;
        }
    }
    forwards
}

/// Zeroed counters shaped for this configuration.
fn empty_counts(cfg: &SimConfig, parts: &Parts, ncpu: usize) -> Counts {
    let nclass = cfg.traffic.classes.len();
    let nq = cfg.ingress.queues.len();
    Counts {
        cpus: vec![CpuCount::default(); ncpu],
        lines: vec![0; parts.lines.len()],
        thread_ns: vec![0; parts.threads.len()],
        thread_runs: vec![0; parts.threads.len()],
        thread_wait_ns: vec![0; parts.threads.len()],
        class_offered: vec![0; nclass],
        class_forwarded: vec![0; nclass],
        class_rx_dropped: vec![0; nclass],
        class_tx_dropped: vec![0; nclass],
        queue_rx_packets: vec![0; nq],
        queue_rx_dropped: vec![0; nq],
        ..Counts::default()
    }
}

impl<'a> Sim<'a> {
    pub fn new(cfg: &'a SimConfig, profile: &'a Profile, seed: u64) -> Self {
        let ncpu = cfg.host.cpus as usize;
        let Timing {
            start,
            end,
            interval_ns,
            n_intervals,
        } = Timing::of(cfg);
        let tick_ns = cfg.tick_ns();
        let hz = cfg.host.hz;
        let mut parts = Parts::default();
        let mut cpus: Vec<Cpu> = (0..ncpu).map(|_| Cpu::default()).collect();
        // The order fixes thread, line and instance numbers: keep it.
        parts.ksoftirqd(&mut cpus);
        parts.ingress(cfg, seed);
        parts.egress(cfg, ncpu);
        let rps_cpus = rps_cpus_of(cfg);
        parts.backlogs(&rps_cpus, ncpu);
        parts.apps(cfg, profile);
        parts.clients(cfg, profile, seed);
        let tunnel = parts.tunnel(cfg, profile, ncpu, seed);
        let (workers, crypt_worker) = parts.workers(ncpu, tunnel.is_some());
        parts.irq_threads(cfg);
        // Last, so that every other thread keeps its number with or without them.
        let host_work = parts.host_work(profile, ncpu);
        for (t, th) in parts.threads.iter().enumerate() {
            cpus[th.cpu].threads.push(t);
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
        let closed = closed_loops(cfg, seed);
        let nq = cfg.ingress.queues.len();
        let rps_rng = (0..nq)
            .map(|q| Rng::new(seed, 1_000_000 + q as u64))
            .collect();
        let nclass = cfg.traffic.classes.len();
        let counts0 = empty_counts(cfg, &parts, ncpu);
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
        let ring_forwards = ring_forwards(cfg, &parts, &class_app, &rps_cpus);
        for r in parts.rings.iter_mut() {
            r.count_in(win, nclass);
        }
        let Parts {
            rings,
            napis,
            lines,
            threads,
            class_rings,
            txqs,
            tx_lines,
            tx_napi,
            backlog_napi,
            apps,
            clients,
            class_client,
        } = parts;
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
            sched: cfg.host.sched_tunables(),
            weight,
            budget_usecs: cfg
                .settings
                .netdev_budget_usecs
                .map(u64::from)
                .unwrap_or(2_000_000 / hz as u64),
            costs: Costs::of(profile),
            timer_expiry: timer_expiry_per_cpu(profile, ncpu),
            lat_irq: profile.latency_ns.irq_delivery,
            veth_rx: cfg.ingress.veth,
            lat_wake: profile.latency_ns.idle_wakeup,
            wake_up_samples: &profile.latency_ns.wake_up_samples,
            wake_up_rng: Rng::new(seed, 4_000_000),
            lat_irq_thread: profile.irq_thread.as_ref().map_or(0, |t| t.wakeup_ns),
            need_resched: vec![false; ncpu],
            wake_preempt: vec![None; ncpu],
            irq_thread_run: vec![false; threads.len()],
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
            workers,
            crypt_worker,
            dispatch_pending: vec![false; ncpu],
            tunnel,
            clients,
            class_client,
            host_stalls: super::host_stalls::HostStalls::new(profile, seed, host_work),
            coalesce_idle_passes: true,
        }
    }
}

/// Per CPU, what an expiry of a NAPI hrtimer costs there: the profile's measured cost
/// of that CPU (`Profile::timer`), else its hard-IRQ cost.
fn timer_expiry_per_cpu(profile: &Profile, ncpu: usize) -> Vec<Nanos> {
    let hardirq = Costs::of(profile).hardirq;
    (0..ncpu)
        .map(|c| profile.timer_expiry_ns(c).unwrap_or(hardirq))
        .collect()
}

/// Per class, its closed loop of clients (if it has one) with the random stream of its
/// think times.
fn closed_loops(cfg: &SimConfig, seed: u64) -> Vec<Option<(crate::config::ClosedLoop, Rng)>> {
    cfg.traffic
        .classes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            c.closed_loop
                .map(|cl| (cl, Rng::new(seed, 2_000_000 + i as u64)))
        })
        .collect()
}

/// The share of the offered rate the open-loop classes (those without a closed loop of
/// clients) add up to: each such class gets its share of it.
fn open_loop_share(cfg: &SimConfig) -> f64 {
    cfg.traffic
        .classes
        .iter()
        .filter(|c| c.closed_loop.is_none())
        .map(|c| c.share)
        .sum()
}
