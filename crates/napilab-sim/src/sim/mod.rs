//! The simulator: wires traffic, NIC, NAPI, softirq, CPUs and accounting together and
//! runs the event loop. One event per batch of CPU work (an IRQ handler, a NAPI poll,
//! a `net_tx_action`), per NIC interrupt and per NAPI timer; packets move through rings
//! inside a batch.
//!
//! Approximation (documented in docs/sim.md): work is not preempted inside a batch. A
//! hard IRQ that arrives while a poll runs is taken when that poll ends. Softirq is not
//! re-entrant on a CPU, so packets are served in the same order as in the kernel; only
//! the position of the handler's own microsecond within the poll moves.
//!
//! One file per mechanism: `interrupts` (NIC vectors and timers), `napi_poll` (NAPI
//! scheduling and the driver poll), `packet_path` (forwarding, RPS, delivery, egress),
//! `softirq_action` (`__do_softirq`, `net_rx_action`, `net_tx_action`), `scheduler`
//! (what a CPU runs next, batches, threads) and `apps` (applications, busy polling).
//! `construct` builds the state from a configuration. This file holds the state and
//! the event loop.

mod apps;
mod client;
mod construct;
mod gro_batch;
mod host_stalls;
mod interrupts;
mod irq_thread;
mod napi_poll;
mod packet_path;
mod scheduler;
mod softirq_action;
mod threaded_busy_poll;
mod tunnel;
mod workqueue;

#[cfg(test)]
mod irq_thread_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod veth_tests;

use std::collections::VecDeque;

use crate::accounting::{Accounting, Ctx};
use crate::config::{QdiscKind, RingPoll, SimConfig};
use crate::cpu::{pick_thread, Cpu, IrqSrc, Thread, ThreadKind};
use crate::event::{EventQueue, Nanos, Window};
use crate::napi::{Completion, Napi};
use crate::nic::{Batch, IrqLine, LineKind, RxRing, TxQueue};
use crate::profile::Profile;
use crate::rng::Rng;
use crate::softirq::{NetRxRun, SoftirqRun, NET_RX, NET_TX};
use crate::traffic::Packet;
use napilab_core::LatencyHistogram;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Ev {
    BatchEnd(usize),
    Irq(usize, u64),
    NapiTimer(usize, u64),
    /// An RPS IPI reaches this CPU.
    Ipi(usize),
    /// A remote wake-up (IPI) of an application thread reaches its CPU.
    WakeApp(usize),
    /// A thread on this CPU was woken from another CPU (the wake-up IPI): look at
    /// the run queue if idle.
    Dispatch(usize),
    /// A tunnel packet was queued for decryption on this CPU: queue its worker's
    /// decryption item (`queue_work_on`).
    QueueDecrypt(usize),
    /// A load generator thread's timer (its next intended send) or a reply reaching
    /// it: wake the thread.
    ClientWake(usize),
    /// A threaded IRQ's thread becomes runnable (`irq_thread.wakeup_ns` after its
    /// hard handler woke it).
    IrqThreadWake(usize),
    /// The host stalls this CPU (`host_stalls`).
    Stall(usize),
}

/// An application and its socket.
pub(crate) struct App {
    pub thread: usize,
    /// Packets queued on the socket and when they were queued.
    socket: VecDeque<(Nanos, Packet)>,
    limit: usize,
    kernel_ns: Nanos,
    user_ns: Nanos,
    /// Kernel time per return of `epoll_wait` with events ([`AppConfig::kernel_cycles_per_return`]).
    return_ns: Nanos,
    /// Kernel time each resume after a preemption ([`AppConfig::kernel_cycles_per_resume`]).
    resume_ns: Nanos,
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
    /// Packets of the last `epoll_wait` return not yet handled: under EEVDF one per
    /// step, so the scheduler looks between them (each ends in a system call's return
    /// to user space, the preemption point of a `preempt=none` kernel).
    unread: usize,
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
    /// A non-blocking epoll loop ([`crate::config::BusyPoll::nonblocking_epoll`]).
    nonblocking_epoll: bool,
}

/// How long the loop runs past the measured window (see `Sim::stop`).
const DRAIN_NS: Nanos = 5_000_000;

/// Packets an application takes from one return of `epoll_wait`.
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
    /// A NAPI kthread's poll; `passes` > 1: a busy-polling kthread's empty passes
    /// simulated as one batch (the last `passes - 1` found nothing either).
    ThreadPoll {
        thread: usize,
        napi: usize,
        work: u32,
        repoll: bool,
        passes: u64,
    },
    /// A workqueue worker's poll of a NAPI instance.
    WorkPoll {
        napi: usize,
        work: u32,
        repoll: bool,
    },
    /// An IRQ thread ran its handler for line `line` up to `local_bh_enable`.
    IrqThreadRun {
        line: usize,
    },
    /// A tunnel worker decrypted packet `seq` of peer `peer`.
    Decrypted {
        peer: usize,
        seq: u64,
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
    /// `spin_unlock_bh` in a workqueue worker (`do_softirq` from process context):
    /// subject to the same 4.9-6.4 rule as `Irq` (`do_softirq` returned early while
    /// ksoftirqd was running until the rule's revert in 6.5).
    WorkerBhEnable,
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
    /// Application steps that took requests off their socket: each is one return of
    /// `epoll_wait` with events (the lab server's `epoll_returns_with_events`).
    pub epoll_returns: u64,
    /// Time the host's stalls took the CPU, ns (`host_stalls`).
    pub stalled_ns: u64,
    /// Polls by execution context (`napilab_core::trace::ExecContext::ALL` order:
    /// softirq after a hard IRQ, at bh-enable, in ksoftirqd, NAPI thread or worker,
    /// busy poll): polls, packets, polls that found nothing, polls that used the
    /// whole budget.
    pub ctx_polls: [u64; 5],
    pub ctx_packets: [u64; 5],
    pub ctx_empty: [u64; 5],
    pub ctx_full: [u64; 5],
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Counts {
    pub cpus: Vec<CpuCount>,
    pub lines: Vec<u64>,
    pub thread_ns: Vec<u64>,
    /// Per thread: times it was given a CPU, and its time runnable without one, ns
    /// (schedstat's `pcount` and `run_delay`).
    pub thread_runs: Vec<u64>,
    pub thread_wait_ns: Vec<u64>,
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
    /// Tunnel packets dropped at decapsulation: the peer's queue was full, or the
    /// decryption queues were.
    pub tunnel_peer_drops: u64,
    pub tunnel_decrypt_drops: u64,
    /// Tunnel packets handed to the socket, by the time they were (not their arrival).
    pub tunnel_delivered: u64,
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
        self.epoll_returns += o.epoll_returns;
        self.stalled_ns += o.stalled_ns;
        for i in 0..5 {
            self.ctx_polls[i] += o.ctx_polls[i];
            self.ctx_packets[i] += o.ctx_packets[i];
            self.ctx_empty[i] += o.ctx_empty[i];
            self.ctx_full[i] += o.ctx_full[i];
        }
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
        add_into(&mut self.thread_runs, &o.thread_runs);
        add_into(&mut self.thread_wait_ns, &o.thread_wait_ns);
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
        self.tunnel_peer_drops += o.tunnel_peer_drops;
        self.tunnel_decrypt_drops += o.tunnel_decrypt_drops;
        self.tunnel_delivered += o.tunnel_delivered;
    }
}

pub(crate) struct Costs {
    hardirq: Nanos,
    softirq: Nanos,
    poll: Nanos,
    tx_softirq: Nanos,
    switch: Nanos,
    /// One run of an IRQ thread's handler (outside the softirq it raises).
    irq_thread: Nanos,
    idle_exit: Nanos,
    after_interrupt: Nanos,
    /// A NAPI kthread's run (from its switch-in to its sleep), beyond its polls (not
    /// a busy-polling kthread's).
    napi_thread_run: Nanos,
    /// Per packet a NAPI kthread polls (`fixed_cycles.napi_thread_packet`).
    napi_thread_packet: Nanos,
    rx_poll: Nanos,
    ip: Nanos,
    rps: Nanos,
    xmit: Nanos,
    qdisc: Nanos,
    reclaim: Nanos,
    /// A busy-polling kthread's loop per pass, beyond the driver poll.
    busy_loop: Nanos,
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
    /// The fair scheduler's slice, wake-up granularity and sleeper credit.
    sched: crate::cpu::SchedTunables,
    weight: u32,
    budget_usecs: u64,
    costs: Costs,
    /// Per CPU, what an expiry of a NAPI hrtimer costs there when the profile measured
    /// it (`Profile::timer`), else `costs.hardirq`.
    timer_expiry: Vec<Nanos>,
    lat_irq: Nanos,
    /// The ingress is a veth (`IngressConfig::veth`): its RX lines stand for
    /// `veth_xmit`'s notification, not an interrupt.
    veth_rx: bool,
    lat_wake: Nanos,
    /// The profile's measured remote wake-up delays (`latency_ns.wake_up_samples`) and
    /// the random stream that draws them; empty: every such wake-up takes `lat_irq`.
    wake_up_samples: &'a [Nanos],
    wake_up_rng: Rng,
    lat_irq_thread: Nanos,
    /// TIF_NEED_RESCHED of each CPU's current task, as far as the twin models it: set
    /// by an IRQ thread's wake-up (docs/sim.md, "Threaded IRQ handlers"), cleared by
    /// the next switch.
    need_resched: Vec<bool>,
    /// The kernel thread whose wake-up preempts the CPU's running user thread at its
    /// next preemption point (EEVDF as measured, `crate::cpu::pick_thread`).
    wake_preempt: Vec<Option<usize>>,
    /// Per thread: an IRQ thread's IRQTF_RUNTHREAD (its handler is due).
    irq_thread_run: Vec<bool>,
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
    /// Workqueue workers (empty when nothing uses workers): worker `c` is CPU `c`'s
    /// pool worker; `crypt_worker[c]` runs CPU `c`'s decryption item (`c` itself, or
    /// a second worker of that CPU when NAPI polls are work items too; with the pool's
    /// worklist the two exchange threads when the pool worker reaches that item).
    workers: Vec<workqueue::Worker>,
    crypt_worker: Vec<usize>,
    /// A Dispatch event is on its way to this CPU (a remote wake-up).
    dispatch_pending: Vec<bool>,
    /// The tunnel's receive pipeline, when the configuration has one.
    tunnel: Option<tunnel::Tunnel>,
    /// Load generator threads, and the one sending each class (None: the class's
    /// requests appear on the ring by themselves).
    pub(crate) clients: Vec<client::Client>,
    class_client: Vec<Option<usize>>,
    /// The host's stalls replayed on each CPU.
    host_stalls: host_stalls::HostStalls,
    /// Simulate a busy-polling kthread's uninterruptible empty passes as one batch
    /// (`threaded_busy_poll::idle_passes`); off only in the test that shows it changes
    /// nothing.
    coalesce_idle_passes: bool,
}

fn ns(p: &Profile, cycles: f64) -> Nanos {
    p.ns(cycles)
}

impl<'a> Sim<'a> {
    /// Apply `f` to the counters of the interval holding `t` (the totals are their
    /// sum, taken at the end of the run).
    #[inline(always)]
    fn count(&mut self, t: Nanos, f: impl Fn(&mut Counts)) {
        if let Some(i) = self.win.lookup(t) {
            f(&mut self.counts[i]);
        }
    }

    /// Handle one event.
    fn handle(&mut self, ev: Ev) {
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
            Ev::Dispatch(c) => {
                self.dispatch_pending[c] = false;
                if !self.cpus[c].busy {
                    self.dispatch(c);
                }
            }
            Ev::ClientWake(k) => self.client_wakes(k),
            Ev::Stall(c) => self.stall_due(c),
            Ev::IrqThreadWake(t) => {
                self.irq_thread_wake(t);
                let c = self.threads[t].cpu;
                if !self.cpus[c].busy {
                    self.dispatch(c);
                }
            }
            Ev::QueueDecrypt(c) => {
                self.queue_work(c, workqueue::WorkItem::Decrypt, c);
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
        self.start_clients();
        self.start_stalls();
        let now = 0;
        for l in 0..self.lines.len() {
            self.arm_line(l, now);
        }
        while let Some(t) = self.q.peek_time() {
            if t > self.stop {
                break;
            }
            let Some((_, ev)) = self.q.pop() else { break };
            self.handle(ev);
        }
        self.finish_clients();
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
}
