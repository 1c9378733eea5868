//! `SimConfig`: what one twin run simulates. It mirrors the sections a napilab scenario
//! file will hold (docs/architecture.md section 2: topology, host settings, traffic, measurement) so
//! it can map onto the shared scenario schema once that exists. Unknown fields are
//! rejected, and every error names the file and the field.

use serde::{Deserialize, Serialize};

pub use crate::cpu::FairScheduler;

use crate::event::Nanos;

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{file}: field `{field}`: {message}")]
pub struct ConfigError {
    pub file: String,
    pub field: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(file: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_string(),
            field: field.into(),
            message: message.into(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    #[serde(default)]
    pub name: String,
    pub host: HostConfig,
    #[serde(default)]
    pub settings: NetSettings,
    pub ingress: IngressConfig,
    #[serde(default)]
    pub egress: EgressConfig,
    pub traffic: TrafficConfig,
    pub measurement: MeasurementConfig,
    /// Applications receiving locally delivered classes (`traffic.classes[].app`).
    #[serde(default)]
    pub apps: Vec<AppConfig>,
    /// A WireGuard-style tunnel terminating every received packet (docs/sim.md
    /// "The WireGuard receive pipeline"); absent: packets are forwarded or delivered.
    #[serde(default)]
    pub tunnel: Option<TunnelConfig>,
}

/// WireGuard's receive pipeline (docs/studies.md#wireguard-study): every packet the
/// NIC delivers is decapsulated in the RX softirq, queued in order on its peer and
/// handed for decryption to the per-CPU worker of the next CPU round robin; a worker
/// that decrypted a packet schedules the peer's NAPI instance on its own CPU, whose
/// poll takes the peer's decrypted packets in order (GRO) and delivers them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TunnelConfig {
    /// Peers (clients), each with its own NAPI instance; packets pick a peer
    /// uniformly at random (equal clients).
    pub peers: u32,
    /// Where the peers' NAPI instances are polled: `softirq` (NET_RX on the CPU whose
    /// worker scheduled them, the stock kernel), `threaded` (a kthread per peer) or
    /// `workqueue` (a work item on the scheduling CPU's worker).
    #[serde(default)]
    pub napi: NapiContext,
    /// `threaded` only: pin peer i's kthread to CPU i mod cpus; otherwise the scheduler
    /// places it on an idle CPU when it wakes (its previous CPU if that is idle).
    #[serde(default)]
    pub pinned: bool,
    /// Packets a peer's in-order receive queue holds (WireGuard's MAX_QUEUED_PACKETS);
    /// a packet finding it full is dropped at decapsulation.
    #[serde(default = "default_tunnel_queue")]
    pub peer_queue: u32,
    /// Packets the decryption queues of all CPUs hold together (WireGuard's device
    /// ring); a packet finding them full is dropped (its slot in the peer's queue is
    /// skipped by the poll).
    #[serde(default = "default_tunnel_queue")]
    pub decrypt_queue: u32,
    /// Which worker decrypts a packet: `shared` (the default: whichever worker reaches
    /// it first in the device's one ring, as the kernel's `ptr_ring_consume_bh` does)
    /// or `per-cpu` (the CPU the round robin kicked; an earlier approximation).
    /// docs/sim.md "The WireGuard receive pipeline" says what each reproduces.
    #[serde(default)]
    pub decrypt_ring: DecryptRing,
    /// `workqueue` NAPI only: where the CPU's decryption item waits when NAPI work
    /// items are queued on the same CPU. `pool` (the default, Linux 6.1): both are
    /// normal-priority bound work items, so they share the CPU's one worker pool and
    /// its one FIFO worklist; the decryption item waits behind the items queued before
    /// it and gets a kworker of its own only when a worker takes it off the list.
    /// `split`: it goes straight to a kworker of its own (the twin's model before
    /// 2026-11-27). docs/sim.md "The WireGuard receive pipeline" gives the sources.
    #[serde(default)]
    pub worklist: Worklist,
}

/// Where a CPU's decryption item waits beside NAPI work items (`tunnel.worklist`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Worklist {
    /// The CPU pool's one worklist, in order (kernel/workqueue.c: `insert_work`,
    /// `worker_thread`, `process_one_work`).
    #[default]
    Pool,
    /// A kworker of its own at once (the earlier approximation).
    Split,
}

/// How the tunnel's decryption work reaches the per-CPU workers.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DecryptRing {
    /// Each packet is decrypted by the worker of the CPU the round robin chose (an
    /// approximation the kernel does not have; the earlier default).
    PerCpu,
    /// One ring drained by every worker that runs (the kernel's `wg->decrypt_queue`).
    #[default]
    Shared,
}

fn default_tunnel_queue() -> u32 {
    1024
}

/// An application thread reading one socket: woken when data arrives, it handles up to
/// 16 packets per step (recv system call, then its own work) and can answer each
/// request with a reply sent through the egress device.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AppConfig {
    pub name: String,
    pub cpu: u32,
    /// SCHED_FIFO priority 1-99; absent: SCHED_NORMAL.
    #[serde(default)]
    pub fifo_priority: Option<u32>,
    /// Kernel cycles per packet in the application's context (recv system call, copy).
    #[serde(default)]
    pub kernel_cycles_per_packet: f64,
    /// Kernel cycles per return of `epoll_wait` with events, however many packets it
    /// brings (the system call, and the switch back in after the thread slept): what
    /// makes a server's CPU per request fall as its load batches requests.
    #[serde(default)]
    pub kernel_cycles_per_return: f64,
    /// Kernel cycles each time the thread resumes after being preempted (its switch
    /// back in and the cache it lost): under `eevdf` mostly by a woken kernel thread
    /// ([`FairScheduler::Eevdf`]), under either at the end of its slice.
    #[serde(default)]
    pub kernel_cycles_per_resume: f64,
    /// The application's own cycles per packet (user time).
    pub user_cycles_per_packet: f64,
    /// Answer every request with a reply of this many bytes; absent: no reply.
    #[serde(default)]
    pub reply_bytes: Option<u32>,
    /// Socket receive queue limit in packets; beyond it packets are dropped.
    #[serde(default = "default_socket_limit")]
    pub socket_limit: u32,
    /// Busy polling (SO_BUSY_POLL / epoll busy_poll_usecs, without prefer-busy-poll):
    /// when its socket is empty the application polls the NAPI instance itself.
    #[serde(default)]
    pub busy_poll: Option<BusyPoll>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BusyPoll {
    /// How long to poll before blocking (busy_poll_usecs / SO_BUSY_POLL).
    pub usecs: u32,
    /// Packets per busy poll (busy_poll_budget, SO_BUSY_POLL_BUDGET; kernel default 8).
    #[serde(default = "default_busy_budget")]
    pub budget: u32,
    /// RX queue whose NAPI instance the socket's NAPI id names.
    #[serde(default)]
    pub queue: u32,
    /// prefer_busy_poll (SO_PREFER_BUSY_POLL / epoll): when a busy loop ends, re-arm
    /// the instance's deferral (defer-hard-irqs, gro-flush-timeout) instead of
    /// unmasking its IRQ; with the queue's `irq_suspend_timeout_ns`, every epoll return
    /// with events also pushes the timer out to that timeout (IRQ suspension, 6.13+).
    #[serde(default)]
    pub prefer: bool,
    /// The application calls `epoll_wait` in a loop without blocking (a 1 ns timeout,
    /// the lab server's `busy-wait`): when a busy loop of `usecs` finds nothing, epoll
    /// forgets its NAPI id (`ep_busy_loop`, fs/eventpoll.c) and the loop spins without
    /// polling until a packet reaches the socket by another way (the instance's timer or
    /// IRQ), whose NAPI id epoll then takes again. False: blocking epoll, or a socket's
    /// busy polling.
    #[serde(default)]
    pub nonblocking_epoll: bool,
}

fn default_busy_budget() -> u32 {
    8
}

fn default_socket_limit() -> u32 {
    1000
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    pub cpus: u32,
    /// CONFIG_HZ: tick-sampling granularity, jiffies for `MAX_SOFTIRQ_TIME` and the
    /// `netdev_budget_usecs` default (docs/kernel.md#net-rx-action-limits).
    #[serde(default = "default_hz")]
    pub hz: u32,
    /// Kernel version `major.minor`; selects the 4.9-6.4 rule that skips inline softirq
    /// processing while ksoftirqd is runnable (docs/kernel.md#softirq-restart).
    #[serde(default = "default_kernel")]
    pub kernel: String,
    #[serde(default)]
    pub tick: TickMode,
    /// How the fair scheduler's tunables follow the CPU count (docs/sim.md, "The
    /// WireGuard receive pipeline").
    #[serde(default)]
    pub sched_scaling: SchedScaling,
    /// Which fair scheduler decides wake-up preemption: `cfs` (up to 6.5, the
    /// default every study profile was calibrated with) or `eevdf` (6.6 on; the veth
    /// lab's twin runs it, as its 6.18 kernel does; docs/sim.md, "Wake-up preemption
    /// on the lab's kernel").
    #[serde(default)]
    pub scheduler: FairScheduler,
}

/// The fair scheduler's tunables (`crate::cpu::SchedTunables`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SchedScaling {
    /// The 1-CPU values whatever the CPU count: what every profile was calibrated with
    /// before the scaling was modelled (an approximation on bigger machines).
    #[default]
    None,
    /// The kernel's default (`kernel.sched_tunable_scaling` = 1, log): the slice, the
    /// wake-up granularity and the sleeper credit grow with 1 + ilog2(min(cpus, 8)).
    Log,
}

impl HostConfig {
    /// The scheduler tunables this host runs with.
    pub fn sched_tunables(&self) -> crate::cpu::SchedTunables {
        use crate::cpu::SchedTunables;
        let tunables = match self.sched_scaling {
            SchedScaling::None => SchedTunables::UNSCALED,
            SchedScaling::Log => SchedTunables::log_scaled(self.cpus),
        };
        tunables.with_scheduler(self.scheduler)
    }
}

fn default_hz() -> u32 {
    250
}
fn default_kernel() -> String {
    "6.8".to_string()
}

/// How the timer tick behaves when a CPU idles; decides what /proc/stat shows.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TickMode {
    /// CONFIG_NO_HZ_IDLE (distribution default): the idle loop stops the tick unless a
    /// timer-wheel event is due within a jiffy, a task leaving the idle loop restarts it
    /// on the jiffy grid, and an IRQ that interrupts the idle loop does not, so an IRQ
    /// plus inline softirq served from idle is sampled only by a tick that fires during
    /// it; /proc/stat idle is the measured idle sleep time (docs/sim.md, "The tick and
    /// /proc/stat").
    #[default]
    NohzIdle,
    /// A periodic tick every 1/HZ whatever the CPU does; idle is counted in ticks too.
    Periodic,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NetSettings {
    /// `net.core.netdev_budget`: packets per `net_rx_action` run (checked after each poll).
    #[serde(default = "default_netdev_budget")]
    pub netdev_budget: u32,
    /// `net.core.netdev_budget_usecs`; default two jiffies of `host.hz`.
    #[serde(default)]
    pub netdev_budget_usecs: Option<u32>,
    /// NAPI weight (`dev_weight` for the backlog, the driver's weight otherwise).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// `net.core.netdev_max_backlog`: packets per CPU backlog (RPS) before drops.
    #[serde(default = "default_max_backlog")]
    pub max_backlog: u32,
    /// `MAX_SOFTIRQ_RESTART` (kernel/softirq.c, a compile-time constant, 10): passes
    /// of `__do_softirq` before pending work goes to ksoftirqd. A setting so that the
    /// access-point study's experiment with 1 can be rerun (docs/studies.md#ap-12).
    #[serde(default = "default_max_softirq_restart")]
    pub max_softirq_restart: u32,
    /// `net.core.gro_normal_batch`: packets GRO passes up the stack at once. Sets what a
    /// veth poll's loop takes of packets that arrive during the poll (sim::gro_batch).
    #[serde(default = "default_gro_normal_batch")]
    pub gro_normal_batch: u32,
}

/// `net.core.gro_normal_batch`'s default.
pub const GRO_NORMAL_BATCH: u32 = 8;

fn default_gro_normal_batch() -> u32 {
    GRO_NORMAL_BATCH
}

fn default_max_softirq_restart() -> u32 {
    crate::softirq::MAX_SOFTIRQ_RESTART
}

fn default_max_backlog() -> u32 {
    1000
}

fn default_netdev_budget() -> u32 {
    300
}
fn default_weight() -> u32 {
    64
}

impl Default for NetSettings {
    fn default() -> Self {
        NetSettings {
            netdev_budget: default_netdev_budget(),
            netdev_budget_usecs: None,
            weight: default_weight(),
            max_backlog: default_max_backlog(),
            max_softirq_restart: default_max_softirq_restart(),
            gro_normal_batch: default_gro_normal_batch(),
        }
    }
}

/// The receiving device: its RX queues, each with its own IRQ and NAPI instance.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IngressConfig {
    #[serde(default = "default_ingress_name")]
    pub name: String,
    /// RX descriptors per ring unless a ring says otherwise (ethtool -G rx).
    #[serde(default = "default_ring")]
    pub rx_ring_size: u32,
    /// Hardware interrupt moderation (ethtool -C rx-usecs / rx-frames / adaptive-rx),
    /// applied as `moderation` says: with `timer` the IRQ fires `rx_usecs` after the
    /// first pending packet, or at the `rx_frames`-th one if earlier; with `ixgbe-itr`
    /// `rx_usecs` is ixgbe's ITR setting (0 off, 1 adaptive, else a minimum interval
    /// between interrupts). 0 = off.
    #[serde(default)]
    pub rx_usecs: u32,
    #[serde(default)]
    pub rx_frames: u32,
    /// How the NIC holds back its RX interrupt.
    #[serde(default)]
    pub moderation: Moderation,
    /// ethtool adaptive-rx: the driver retunes the moderation from the traffic it
    /// sees. Modelled for `ixgbe-itr` (the driver's dynamic ITR, which ixgbe of that
    /// era exposes as rx-usecs 1); DIM (`net_dim`, the generic adaptive-rx) is not.
    #[serde(default)]
    pub adaptive_rx: bool,
    /// How the driver handles the device's interrupts: in the hard IRQ (`hardirq`,
    /// the default) or in a per-vector IRQ thread (`threaded`).
    #[serde(default, skip_serializing_if = "IrqMode::is_hardirq")]
    pub irq_mode: IrqMode,
    /// The device is a veth: it has no interrupt line (docs/sim.md, "veth ingress").
    /// When a poll completes, an instance whose ring already holds an arrived packet
    /// is scheduled again at once (`veth_poll` re-checks its `ptr_ring` after
    /// `napi_complete_done`); a packet arriving after the instance went idle notifies
    /// it without the line's delivery latency (`veth_xmit` calls `napi_schedule` from
    /// the sender). Off for a NIC.
    #[serde(default, skip_serializing_if = "is_false")]
    pub veth: bool,
    pub queues: Vec<RxQueueConfig>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// How a device's driver handles its interrupts (docs/sim.md, "Threaded IRQ handlers").
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum IrqMode {
    /// `request_irq`: the handler runs in the hard IRQ and schedules NAPI there; the
    /// softirq it raises runs on IRQ exit.
    #[default]
    Hardirq,
    /// `request_threaded_irq` (iwlwifi's MSI-X vectors, Linux 5.12+): the hard handler
    /// only wakes the vector's `irq/N-<dev>` thread (SCHED_FIFO 50) on its CPU; the
    /// thread schedules NAPI between `local_bh_disable` and `local_bh_enable`, so the
    /// softirq runs at that bh-enable, in the thread's context. The wake-up sets
    /// need_resched, which ends an inline `__do_softirq` restart loop early.
    Threaded,
}

impl IrqMode {
    pub fn is_hardirq(&self) -> bool {
        *self == IrqMode::Hardirq
    }
}

/// The SCHED_FIFO priority of every IRQ thread (`sched_set_fifo` in kernel/irq/manage.c
/// `setup_irq_thread`: MAX_RT_PRIO / 2).
pub const IRQ_THREAD_PRIORITY: u32 = 50;

/// `IXGBE_MAX_EITR`: the EITR interval field (bits 3..11, in 2-us units), so the
/// driver's ITR value is microseconds times 4 (drivers/net/ethernet/intel/ixgbe/ixgbe.h,
/// Linux 3.16). Here, not in `crate::nic`, so that validating a configuration does not
/// import the NIC model.
pub const IXGBE_MAX_EITR: u32 = 0x0FF8;

/// How a NIC holds back its RX interrupt (docs/sim.md, "Interrupt moderation").
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Moderation {
    /// Generic coalescing: a timer started by the first pending frame (`rx_usecs`)
    /// and a frame count (`rx_frames`), whichever ends first; what mlx5's CQ
    /// moderation (period started by the first completion) and bcmgenet's RX DMA
    /// timeout and MBUF_DONE threshold do.
    #[default]
    Timer,
    /// Intel's interrupt throttling as ixgbe programs it (EITR on 82599/X540): the
    /// NIC asserts the vector at most once per ITR interval, counted from the last
    /// assertion, so a frame arriving after a quiet interval interrupts at once.
    /// `rx_usecs` follows `ixgbe_set_coalesce`: 0 no throttling, 1 the adaptive ITR
    /// of `ixgbe_set_itr`, otherwise a fixed interval. See `crate::nic::IxgbeItr`.
    IxgbeItr,
}

fn default_ingress_name() -> String {
    "eth0".to_string()
}
fn default_ring() -> u32 {
    512
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RxQueueConfig {
    /// CPU that takes this queue's IRQ (smp_affinity) and therefore polls its NAPI.
    pub cpu: u32,
    #[serde(default)]
    pub napi: NapiContext,
    /// Scheduling of the NAPI kthread when `napi = "threaded"` or
    /// `"threaded_busy_poll"`.
    #[serde(default)]
    pub thread: ThreadPolicy,
    /// Per-NAPI `defer-hard-irqs` (D) and `gro-flush-timeout` (T, ns).
    #[serde(default)]
    pub defer_hard_irqs: u32,
    #[serde(default)]
    pub gro_flush_timeout_ns: u64,
    /// Per-NAPI `irq-suspend-timeout` (ns, 6.13+): used with a prefer-busy-poll
    /// application (`apps[].busy_poll.prefer`).
    #[serde(default)]
    pub irq_suspend_timeout_ns: u64,
    /// RPS: CPUs this queue's packets are steered to (`rps_cpus`); empty: off. Steered
    /// packets are queued on the target CPU's backlog and processed there by its
    /// backlog NAPI (weight `settings.weight`), woken by an IPI.
    #[serde(default)]
    pub rps_cpus: Vec<u32>,
    /// RX rings served by this queue's NAPI poll, in service order. Empty: one ring
    /// named "rx" of `rx_ring_size` with the whole weight.
    #[serde(default)]
    pub rings: Vec<RingConfig>,
    /// How the driver poll serves several rings (ignored with one ring).
    #[serde(default)]
    pub ring_poll: RingPoll,
}

/// The order in which one NAPI poll serves the rings of its queue.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RingPoll {
    /// The ingress-QoS study's driver (docs/studies.md#ingress-qos-study, section
    /// IV-B: `ixgbe_poll` "extended by an additional loop that allows both Rx rings
    /// to be polled alternately with small ring budgets until the poll size is
    /// exhausted"): the rings are visited in order, a ring budget at a time, again and
    /// again until the weight is used or a whole round found every ring empty. "Not
    /// done" only when the weight ran out while a ring's last visit used its whole
    /// allotment (the driver cannot know that ring is empty).
    #[default]
    Alternate,
    /// Stock `ixgbe_poll` (drivers/net/ethernet/intel/ixgbe/ixgbe_main.c): each ring
    /// of the vector once per poll with `max(weight / rings, 1)` packets unless the
    /// ring sets its own budget; "not done" (`clean_complete = false`) when any ring
    /// used its whole ring budget.
    OnePass,
}

/// One RX ring. Several rings under one NAPI model the per-class rings of the ingress
/// QoS study (docs/studies.md#ingress-qos-study), each served up to its own `budget` per poll.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RingConfig {
    pub name: String,
    #[serde(default)]
    pub size: Option<u32>,
    /// Packets this ring may hand over per visit; default: the NAPI weight
    /// (`ring_poll = "alternate"`) or `max(weight / rings, 1)` (`"one_pass"`, as
    /// stock ixgbe divides its budget).
    #[serde(default)]
    pub budget: Option<u32>,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NapiContext {
    /// Polled by `net_rx_action` in NET_RX_SOFTIRQ on the IRQ's CPU.
    #[default]
    Softirq,
    /// Polled by its own `napi/<dev>-<id>` kthread (no netdev_budget or time limit).
    Threaded,
    /// Threaded busy polling (Linux 6.19, netdev netlink `napi-set threaded=busy-poll`):
    /// once its first IRQ wakes the kthread, the kthread polls the instance again and
    /// again, never completing it, so the IRQ stays masked and the kthread's CPU is
    /// busy whatever the load; a packet waits for the next pass (docs/sim.md
    /// "Threaded busy polling"). Needs `host.kernel` 6.19 or later.
    ThreadedBusyPoll,
    /// Polled by a work item on the per-CPU worker (normal priority) of the CPU that
    /// scheduled it, in turn with that worker's other items (twin only: no stock
    /// kernel has it; the WireGuard study's remedy, docs/studies.md#wg-4).
    Workqueue,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ThreadPolicy {
    /// SCHED_FIFO priority 1-99; absent: SCHED_NORMAL.
    #[serde(default)]
    pub fifo_priority: Option<u32>,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum QdiscKind {
    /// `noqueue`: a full TX ring drops the packet.
    None,
    /// A FIFO (pfifo/pfifo_fast) that is bypassed while empty (TCQ_F_CAN_BYPASS).
    #[default]
    Fifo,
}

/// The transmitting device. CPU k transmits on TX queue k (XPS); its completions are
/// reclaimed in NET_RX_SOFTIRQ on CPU k, by a TX-completion vector of its own or by
/// the RX poll of a combined vector (`completion`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EgressConfig {
    #[serde(default = "default_egress_name")]
    pub name: String,
    #[serde(default)]
    pub qdisc: QdiscKind,
    /// Packets (txqueuelen).
    #[serde(default = "default_qdisc_limit")]
    pub qdisc_limit: u32,
    #[serde(default = "default_ring")]
    pub tx_ring_size: u32,
    #[serde(default = "default_link")]
    pub link_mbps: f64,
    /// TX completion coalescing (ethtool -C tx-usecs / tx-frames). 0 = off. With
    /// `moderation = "ixgbe-itr"`, `tx_usecs` is the ITR setting of the vector that
    /// takes the completions (0 off, 1 adaptive, else a minimum interval); ixgbe's
    /// vectors are TxRx pairs, whose ITR is the port's rx-usecs.
    #[serde(default)]
    pub tx_usecs: u32,
    #[serde(default)]
    pub tx_frames: u32,
    /// How the NIC holds back its TX-completion interrupt (as `ingress.moderation`).
    #[serde(default)]
    pub moderation: Moderation,
    /// Descriptors reclaimed per poll before the poll reports it is not done.
    #[serde(default = "default_tx_work_limit")]
    pub tx_work_limit: u32,
    /// Who reclaims TX completions.
    #[serde(default)]
    pub completion: TxCompletion,
    /// How the driver handles the TX-completion interrupts (as `ingress.irq_mode`).
    #[serde(default, skip_serializing_if = "IrqMode::is_hardirq")]
    pub irq_mode: IrqMode,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TxCompletion {
    /// The egress device's own vector per TX queue: a TX-completion IRQ schedules a
    /// NAPI instance that only reclaims (a router with separate ports).
    #[default]
    TxIrq,
    /// A combined TxRx vector: the RX queue served on the transmitting CPU reclaims
    /// TX completions inside its RX poll, and its one IRQ fires for RX arrivals and TX
    /// completions alike (one-armed router, ixgbe/mlx5 combined channels). A CPU
    /// without an RX queue keeps a TX-completion vector.
    RxNapi,
    /// As `tx_irq`, but every TX-completion vector has its affinity on this CPU, so
    /// the reclaim runs there whichever CPU transmitted (`completion = { on_cpu = 0 }`;
    /// the access point's dual-core configuration,
    /// docs/studies.md#ap-study: WiFi IRQ on core 0, Ethernet IRQ on core 1).
    OnCpu(u32),
}

fn default_egress_name() -> String {
    "eth1".to_string()
}
fn default_qdisc_limit() -> u32 {
    1000
}
fn default_link() -> f64 {
    10_000.0
}
fn default_tx_work_limit() -> u32 {
    256
}

impl Default for EgressConfig {
    fn default() -> Self {
        EgressConfig {
            name: default_egress_name(),
            qdisc: QdiscKind::default(),
            qdisc_limit: default_qdisc_limit(),
            tx_ring_size: default_ring(),
            link_mbps: default_link(),
            tx_usecs: 0,
            tx_frames: 0,
            moderation: Moderation::Timer,
            tx_work_limit: default_tx_work_limit(),
            completion: TxCompletion::default(),
            irq_mode: IrqMode::Hardirq,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrafficConfig {
    /// Offered load of all classes together, packets per second.
    pub rate_pps: f64,
    #[serde(default)]
    pub pattern: Pattern,
    /// Packets per burst: each stream's arrivals come `burst` at a time, back to back,
    /// and the bursts follow `pattern` at the rate divided by `burst` (a sender that
    /// hands the kernel a batch at once, as XDP live frames or sendmmsg do). 1: single
    /// packets.
    #[serde(default = "one_packet")]
    pub burst: u32,
    pub classes: Vec<ClassConfig>,
}

fn one_packet() -> u32 {
    1
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Exponential inter-arrival times; a class's share of a Poisson stream is again
    /// Poisson, so each ring gets an independent stream.
    #[default]
    Poisson,
    /// Constant bit rate: each class's stream (per ring) is evenly spaced.
    Constant,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClassConfig {
    pub name: String,
    /// Fraction of `rate_pps`; shares are normalised to sum to one.
    pub share: f64,
    /// Frame size in bytes, Ethernet header to FCS; the wire adds 20 bytes of preamble
    /// and inter-frame gap.
    #[serde(default = "default_size")]
    pub size_bytes: u32,
    /// RX queue index; absent: spread evenly over all queues (RSS).
    #[serde(default)]
    pub queue: Option<u32>,
    /// Ring name within the queue; absent: the queue's first ring.
    #[serde(default)]
    pub ring: Option<String>,
    /// Deliver locally to this application instead of forwarding.
    #[serde(default)]
    pub app: Option<String>,
    /// Closed-loop clients instead of an open-loop rate (the class's share is then
    /// ignored): each client sends a request, waits for the application's reply, and
    /// sends the next one `rtt_us` plus an exponential think time later.
    #[serde(default)]
    pub closed_loop: Option<ClosedLoop>,
    /// A load generator thread sends this class's requests and reads the application's
    /// replies (docs/sim.md, "The server topology on the twin"); absent: requests
    /// appear on the ring at their arrival times, as from another machine.
    #[serde(default)]
    pub client: Option<ClientSide>,
}

/// A load generator thread on one of the host's CPUs, mutilate-style as the lab's
/// (crates/napilab-lab request load generator): in the open loop it draws Poisson
/// intended send times at the class's rate and sends each when the thread gets to it
/// (due sends first, then the replies that are in); latency runs from the intended
/// time to the end of the reply's read, so a late client shows in the tail.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientSide {
    pub cpu: u32,
    /// Cycles of the client thread per request sent (building it, `send`, the TCP
    /// transmit and `veth_xmit` up to the receiver's queue).
    pub send_cycles: f64,
    /// Cycles of the client thread per reply read (`epoll_wait`, `recv`, parsing).
    pub read_cycles: f64,
    /// Cycles of the client thread per round of its loop (a burst of due sends, then
    /// the replies that are in: the flush over its connections and the `epoll_wait`),
    /// however many requests the round carries: what makes the generator's CPU per
    /// request fall as its load batches them.
    #[serde(default)]
    pub round_cycles: f64,
    /// Fixed latency the model does not otherwise carry, ns: TCP on both sides and the
    /// reply's way to the client and its wake-up.
    #[serde(default)]
    pub path_ns: u64,
    /// Mean of an exponential addition to `path_ns` per request, ns: the path's tail.
    #[serde(default)]
    pub path_tail_ns: u64,
    /// A closed loop over this many connections, one request outstanding on each (the
    /// lab's capacity probe), instead of the open loop at the class's rate.
    #[serde(default)]
    pub connections: Option<u32>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClosedLoop {
    pub clients: u32,
    /// Mean think time between a reply and the next request (exponential); 0: none.
    #[serde(default)]
    pub think_us: f64,
    /// Network round trip outside the server (client stack, wires, switches).
    #[serde(default)]
    pub rtt_us: f64,
}

fn default_size() -> u32 {
    128
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MeasurementConfig {
    /// Measured time after warm-up, milliseconds.
    pub duration_ms: f64,
    #[serde(default)]
    pub warmup_ms: f64,
    /// Length of one Observation interval; default: the whole duration.
    #[serde(default)]
    pub interval_ms: Option<f64>,
}

impl SimConfig {
    /// Parse and validate a TOML document; `file` names it in errors.
    pub fn from_toml_str(text: &str, file: &str) -> Result<Self, ConfigError> {
        let cfg: SimConfig = toml::from_str(text).map_err(|e| {
            // toml's message carries the key path and line; keep it whole.
            ConfigError::new(file, "(parse)", e.to_string().trim().to_string())
        })?;
        cfg.validate(file)?;
        Ok(cfg)
    }

    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(&name, "(file)", e.to_string()))?;
        Self::from_toml_str(&text, &name)
    }

    /// Checks that serde cannot express. Also used by [`crate::run`] on configs built
    /// in code.
    fn validate_tunnel(&self, t: &TunnelConfig, file: &str) -> Result<(), ConfigError> {
        let err = |field: &str, msg: &str| Err(ConfigError::new(file, field, msg));
        if !(1..=100_000).contains(&t.peers) {
            return err("tunnel.peers", "must be 1..=100000");
        }
        if t.napi == NapiContext::ThreadedBusyPoll {
            return err(
                "tunnel.napi",
                "threaded busy polling of the peers' instances is not modelled: choose softirq, threaded or workqueue",
            );
        }
        if t.pinned && t.napi != NapiContext::Threaded {
            return err(
                "tunnel.pinned",
                "pinning applies to threaded NAPI kthreads only: set tunnel.napi = \"threaded\" or drop pinned",
            );
        }
        if t.peer_queue == 0 {
            return err("tunnel.peer_queue", "must be positive");
        }
        if t.decrypt_queue == 0 {
            return err("tunnel.decrypt_queue", "must be positive");
        }
        for (i, c) in self.traffic.classes.iter().enumerate() {
            if c.app.is_some() || c.closed_loop.is_some() {
                return err(
                    &format!("traffic.classes[{i}]"),
                    "with a [tunnel] every packet ends in the tunnel: remove app and closed_loop",
                );
            }
        }
        if self.ingress.queues.iter().any(|q| !q.rps_cpus.is_empty()) {
            return err(
                "ingress.queues",
                "RPS with a [tunnel] is not modelled: remove rps_cpus",
            );
        }
        Ok(())
    }

    /// Checks that serde cannot express, one part of the config at a time. Also used by
    /// [`crate::run`] on configs built in code.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        self.validate_host(file)?;
        self.validate_ingress(file)?;
        self.validate_egress(file)?;
        self.validate_traffic(file)?;
        self.validate_apps(file)?;
        self.validate_measurement(file)?;
        Ok(())
    }

    /// The host and the softirq settings.
    fn validate_host(&self, file: &str) -> Result<(), ConfigError> {
        let err = |field: &str, msg: &str| Err(ConfigError::new(file, field, msg));
        if self.host.cpus == 0 || self.host.cpus > 1024 {
            return err("host.cpus", "must be 1..=1024");
        }
        if !(10..=10_000).contains(&self.host.hz) {
            return err("host.hz", "must be 10..=10000");
        }
        if parse_kernel(&self.host.kernel).is_none() {
            return err("host.kernel", "expected `major.minor`, e.g. \"6.8\"");
        }
        if self.settings.max_softirq_restart == 0 {
            return err(
                "settings.max_softirq_restart",
                "must be at least 1 (the kernel always runs one pass)",
            );
        }
        if self.settings.gro_normal_batch == 0 {
            return err(
                "settings.gro_normal_batch",
                "must be at least 1 (net.core.gro_normal_batch; 1 passes each packet up at once)",
            );
        }
        if self.settings.netdev_budget == 0 {
            return err("settings.netdev_budget", "must be positive");
        }
        if self.settings.weight == 0 || self.settings.weight > 1024 {
            return err("settings.weight", "must be 1..=1024");
        }
        if self.settings.max_backlog == 0 {
            return err("settings.max_backlog", "must be positive");
        }
        if self.settings.netdev_budget_usecs == Some(0) {
            return err("settings.netdev_budget_usecs", "must be positive");
        }
        Ok(())
    }

    /// The RX queues: CPUs, thread priorities, deferral, rings.
    fn validate_ingress(&self, file: &str) -> Result<(), ConfigError> {
        let err = |field: &str, msg: &str| Err(ConfigError::new(file, field, msg));
        if self.ingress.queues.is_empty() {
            return err("ingress.queues", "at least one RX queue is needed");
        }
        if self.ingress.rx_ring_size == 0 {
            return err("ingress.rx_ring_size", "must be positive");
        }
        if let Some(t) = &self.tunnel {
            self.validate_tunnel(t, file)?;
        }
        self.validate_moderation(file)?;
        for (i, q) in self.ingress.queues.iter().enumerate() {
            if q.cpu >= self.host.cpus {
                return err(
                    &format!("ingress.queues[{i}].cpu"),
                    "names a CPU the host does not have",
                );
            }
            if q.rps_cpus.iter().any(|&c| c >= self.host.cpus) {
                return err(
                    &format!("ingress.queues[{i}].rps_cpus"),
                    "names a CPU the host does not have",
                );
            }
            if let Some(p) = q.thread.fifo_priority {
                if !(1..=99).contains(&p) {
                    return err(
                        &format!("ingress.queues[{i}].thread.fifo_priority"),
                        "must be 1..=99",
                    );
                }
            }
            if q.napi == NapiContext::ThreadedBusyPoll {
                self.validate_threaded_busy_poll(i, q, file)?;
            }
            if q.defer_hard_irqs > 0 && q.gro_flush_timeout_ns == 0 {
                // The kernel accepts it but it does nothing; say so rather than
                // silently simulate a no-op.
                return err(
                    &format!("ingress.queues[{i}].defer_hard_irqs"),
                    "has no effect without gro_flush_timeout_ns > 0",
                );
            }
            let mut names = std::collections::HashSet::new();
            for (j, r) in q.rings.iter().enumerate() {
                if !names.insert(r.name.as_str()) {
                    return err(
                        &format!("ingress.queues[{i}].rings[{j}].name"),
                        "duplicate ring name",
                    );
                }
                if r.size == Some(0) {
                    return err(
                        &format!("ingress.queues[{i}].rings[{j}].size"),
                        "must be positive",
                    );
                }
                if r.budget == Some(0) {
                    return err(
                        &format!("ingress.queues[{i}].rings[{j}].budget"),
                        "must be positive",
                    );
                }
            }
        }
        Ok(())
    }

    /// The RX interrupt moderation: only combinations the twin models, with the limits
    /// the driver itself enforces.
    fn validate_moderation(&self, file: &str) -> Result<(), ConfigError> {
        let err = |field: &str, msg: &str| Err(ConfigError::new(file, field, msg));
        let i = &self.ingress;
        match i.moderation {
            Moderation::Timer if i.adaptive_rx => err(
                "ingress.adaptive_rx",
                "adaptive-rx through DIM (net_dim) is not modelled: set rx_usecs and \
                 rx_frames to the profile DIM settles on, or use moderation = \"ixgbe-itr\"",
            ),
            Moderation::IxgbeItr if i.rx_frames != 0 => err(
                "ingress.rx_frames",
                "ixgbe's interrupt throttling has no frame count: set it to 0",
            ),
            Moderation::IxgbeItr if i.rx_usecs > IXGBE_MAX_EITR >> 2 => err(
                "ingress.rx_usecs",
                "above ixgbe's largest ITR interval (1022 us, IXGBE_MAX_EITR >> 2); \
                 ixgbe_set_coalesce refuses it",
            ),
            _ => Ok(()),
        }?;
        let e = &self.egress;
        match e.moderation {
            Moderation::IxgbeItr if e.tx_frames != 0 => err(
                "egress.tx_frames",
                "ixgbe's interrupt throttling has no frame count: set it to 0",
            ),
            Moderation::IxgbeItr if e.tx_usecs > IXGBE_MAX_EITR >> 2 => err(
                "egress.tx_usecs",
                "above ixgbe's largest ITR interval (1022 us, IXGBE_MAX_EITR >> 2)",
            ),
            _ => Ok(()),
        }
    }

    /// An RX queue in threaded busy polling: the kernel that has it, and the settings
    /// the mode makes meaningless (its kthread never completes the instance, so
    /// `napi_complete_done` never reaches the deferral or the IRQ suspension).
    fn validate_threaded_busy_poll(
        &self,
        i: usize,
        q: &RxQueueConfig,
        file: &str,
    ) -> Result<(), ConfigError> {
        let err = |field: &str, msg: String| Err(ConfigError::new(file, field, msg));
        if parse_kernel(&self.host.kernel).is_some_and(|v| v < THREADED_BUSY_POLL_KERNEL) {
            return err(
                "host.kernel",
                format!(
                    "ingress.queues[{i}].napi = \"threaded_busy_poll\" needs Linux {}.{} or later (netdev netlink napi-set threaded=busy-poll), not {}: set host.kernel = \"6.19\" or choose napi = \"threaded\"",
                    THREADED_BUSY_POLL_KERNEL.0, THREADED_BUSY_POLL_KERNEL.1, self.host.kernel
                ),
            );
        }
        if q.defer_hard_irqs > 0 || q.gro_flush_timeout_ns > 0 || q.irq_suspend_timeout_ns > 0 {
            return err(
                &format!("ingress.queues[{i}].defer_hard_irqs"),
                "deferral and IRQ suspension have no effect in threaded busy polling (the kthread never completes the instance): remove defer_hard_irqs, gro_flush_timeout_ns and irq_suspend_timeout_ns".into(),
            );
        }
        Ok(())
    }

    /// The transmitting device.
    fn validate_egress(&self, file: &str) -> Result<(), ConfigError> {
        let err = |field: &str, msg: &str| Err(ConfigError::new(file, field, msg));
        let e = &self.egress;
        if e.tx_ring_size == 0 {
            return err("egress.tx_ring_size", "must be positive");
        }
        if !(e.link_mbps > 0.0 && e.link_mbps.is_finite()) {
            return err("egress.link_mbps", "must be positive");
        }
        if e.tx_work_limit == 0 {
            return err("egress.tx_work_limit", "must be positive");
        }
        if let TxCompletion::OnCpu(c) = e.completion {
            if c >= self.host.cpus {
                return err(
                    "egress.completion.on_cpu",
                    &format!("CPU {c} does not exist (host.cpus = {})", self.host.cpus),
                );
            }
        }
        Ok(())
    }

    /// The traffic classes: shares, sizes, where each lands, closed loops.
    fn validate_traffic(&self, file: &str) -> Result<(), ConfigError> {
        let err = |field: &str, msg: &str| Err(ConfigError::new(file, field, msg));
        let t = &self.traffic;
        if !(t.rate_pps >= 0.0 && t.rate_pps.is_finite()) {
            return err("traffic.rate_pps", "must be a finite number >= 0");
        }
        if t.classes.is_empty() {
            return err("traffic.classes", "at least one class is needed");
        }
        let mut total = 0.0;
        let mut open = false;
        for (i, c) in t.classes.iter().enumerate() {
            if !(c.share >= 0.0 && c.share.is_finite()) {
                return err(&format!("traffic.classes[{i}].share"), "must be >= 0");
            }
            if let Some(cs) = c.client {
                let replies = c
                    .app
                    .as_ref()
                    .and_then(|a| self.apps.iter().find(|x| &x.name == a))
                    .is_some_and(|a| a.reply_bytes.is_some());
                if !replies || c.closed_loop.is_some() || c.queue.is_none() {
                    return err(
                        &format!("traffic.classes[{i}].client"),
                        "needs `queue`, `app` naming an application with `reply_bytes`, and no `closed_loop`",
                    );
                }
                if cs.cpu >= self.host.cpus {
                    return err(
                        &format!("traffic.classes[{i}].client.cpu"),
                        "names a CPU the host does not have",
                    );
                }
                for (k, v) in [
                    ("send_cycles", cs.send_cycles),
                    ("read_cycles", cs.read_cycles),
                ] {
                    if !(v >= 0.0 && v.is_finite()) {
                        return err(
                            &format!("traffic.classes[{i}].client.{k}"),
                            "must be a finite number >= 0",
                        );
                    }
                }
                if cs.connections == Some(0) {
                    return err(
                        &format!("traffic.classes[{i}].client.connections"),
                        "must be at least 1",
                    );
                }
            }
            if let Some(cl) = c.closed_loop {
                if cl.clients == 0 || cl.clients > 1_000_000 {
                    return err(
                        &format!("traffic.classes[{i}].closed_loop.clients"),
                        "must be 1..=1000000",
                    );
                }
                let ok = |v: f64| v >= 0.0 && v.is_finite();
                if !ok(cl.think_us) {
                    return err(
                        &format!("traffic.classes[{i}].closed_loop.think_us"),
                        "must be >= 0",
                    );
                }
                if !ok(cl.rtt_us) {
                    return err(
                        &format!("traffic.classes[{i}].closed_loop.rtt_us"),
                        "must be >= 0",
                    );
                }
                let replies = c
                    .app
                    .as_ref()
                    .and_then(|a| self.apps.iter().find(|x| &x.name == a))
                    .is_some_and(|a| a.reply_bytes.is_some());
                if !replies {
                    return err(
                        &format!("traffic.classes[{i}].closed_loop"),
                        "needs `app` naming an application with `reply_bytes`",
                    );
                }
            } else {
                open = true;
                total += c.share;
            }
            if !(60..=65_535).contains(&c.size_bytes) {
                return err(
                    &format!("traffic.classes[{i}].size_bytes"),
                    "must be 60..=65535",
                );
            }
            if let Some(q) = c.queue {
                let Some(qc) = self.ingress.queues.get(q as usize) else {
                    return err(
                        &format!("traffic.classes[{i}].queue"),
                        "names an RX queue that does not exist",
                    );
                };
                if let Some(r) = &c.ring {
                    if !qc.rings.iter().any(|x| &x.name == r) {
                        return err(
                            &format!("traffic.classes[{i}].ring"),
                            "names a ring the queue does not have",
                        );
                    }
                }
            } else if c.ring.is_some() {
                return err(
                    &format!("traffic.classes[{i}].ring"),
                    "a ring needs a `queue` too",
                );
            }
        }
        if open && total <= 0.0 {
            return err("traffic.classes", "open-loop shares must not all be zero");
        }
        Ok(())
    }

    /// The applications and the classes that name them.
    fn validate_apps(&self, file: &str) -> Result<(), ConfigError> {
        let err = |field: &str, msg: &str| Err(ConfigError::new(file, field, msg));
        let t = &self.traffic;
        for (i, a) in self.apps.iter().enumerate() {
            if a.cpu >= self.host.cpus {
                return err(
                    &format!("apps[{i}].cpu"),
                    "names a CPU the host does not have",
                );
            }
            if let Some(p) = a.fifo_priority {
                if !(1..=99).contains(&p) {
                    return err(&format!("apps[{i}].fifo_priority"), "must be 1..=99");
                }
            }
            let finite = |v: f64| v >= 0.0 && v.is_finite();
            if !finite(a.kernel_cycles_per_packet) {
                return err(
                    &format!("apps[{i}].kernel_cycles_per_packet"),
                    "must be >= 0",
                );
            }
            if !finite(a.user_cycles_per_packet) {
                return err(&format!("apps[{i}].user_cycles_per_packet"), "must be >= 0");
            }
            if a.socket_limit == 0 {
                return err(&format!("apps[{i}].socket_limit"), "must be positive");
            }
            if let Some(b) = a.reply_bytes {
                if !(60..=65_535).contains(&b) {
                    return err(&format!("apps[{i}].reply_bytes"), "must be 60..=65535");
                }
            }
            if let Some(bp) = a.busy_poll {
                if bp.usecs == 0 && !bp.prefer {
                    return err(
                        &format!("apps[{i}].busy_poll.usecs"),
                        "must be positive unless `prefer` is set",
                    );
                }
                if !(1..=1024).contains(&bp.budget) {
                    return err(&format!("apps[{i}].busy_poll.budget"), "must be 1..=1024");
                }
                if bp.queue as usize >= self.ingress.queues.len() {
                    return err(
                        &format!("apps[{i}].busy_poll.queue"),
                        "names an RX queue that does not exist",
                    );
                }
            }
            if self.apps[..i].iter().any(|x| x.name == a.name) {
                return err(&format!("apps[{i}].name"), "duplicate application name");
            }
        }
        for (i, c) in t.classes.iter().enumerate() {
            if let Some(a) = &c.app {
                if !self.apps.iter().any(|x| &x.name == a) {
                    return err(
                        &format!("traffic.classes[{i}].app"),
                        "names an application not listed under [[apps]]",
                    );
                }
            }
        }
        Ok(())
    }

    /// The measurement window.
    fn validate_measurement(&self, file: &str) -> Result<(), ConfigError> {
        let err = |field: &str, msg: &str| Err(ConfigError::new(file, field, msg));
        let m = &self.measurement;
        if !(m.duration_ms > 0.0 && m.duration_ms.is_finite()) {
            return err("measurement.duration_ms", "must be positive");
        }
        if !(m.warmup_ms >= 0.0 && m.warmup_ms.is_finite()) {
            return err("measurement.warmup_ms", "must be >= 0");
        }
        if let Some(iv) = m.interval_ms {
            if !(iv > 0.0 && iv.is_finite()) {
                return err("measurement.interval_ms", "must be positive");
            }
        }
        Ok(())
    }

    pub fn tick_ns(&self) -> Nanos {
        1_000_000_000 / self.host.hz as u64
    }

    /// Whether inline softirq processing is skipped while ksoftirqd is runnable: the
    /// rule of kernels 4.9 to 6.4 (docs/kernel.md#softirq-restart).
    pub fn skip_inline_while_ksoftirqd(&self) -> bool {
        match parse_kernel(&self.host.kernel) {
            Some(v) => ((4, 9)..(6, 5)).contains(&v),
            None => false,
        }
    }
}

/// The first kernel with threaded busy polling (`NETDEV_NAPI_THREADED_BUSY_POLL`).
pub const THREADED_BUSY_POLL_KERNEL: (u32, u32) = (6, 19);

/// `(major, minor)` of `host.kernel` (napilab_core's one parser of kernel releases).
pub fn parse_kernel(s: &str) -> Option<(u32, u32)> {
    napilab_core::host_identity::kernel_version(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn min() -> String {
        napilab_testkit::minimal_twin_config("", "")
    }

    #[test]
    fn minimal_config_parses_with_defaults() {
        let c = SimConfig::from_toml_str(&min(), "min.toml").expect("parses");
        assert_eq!(c.settings.netdev_budget, 300);
        assert_eq!(c.host.hz, 250);
        assert_eq!(c.egress.qdisc, QdiscKind::Fifo);
        assert!(!c.skip_inline_while_ksoftirqd());
    }

    #[test]
    fn errors_name_file_and_field() {
        let bad = min().replace("cpu = 0", "cpu = 3");
        let e = SimConfig::from_toml_str(&bad, "x.toml").expect_err("must be rejected");
        assert_eq!(e.file, "x.toml");
        assert_eq!(e.field, "ingress.queues[0].cpu");
        let unknown = min().replace("cpus = 1", "cpus = 1\nfoo = 2");
        let e = SimConfig::from_toml_str(&unknown, "y.toml").expect_err("must be rejected");
        assert!(
            e.to_string().contains("y.toml") && e.to_string().contains("foo"),
            "{e}"
        );
    }

    #[test]
    fn kernel_rule() {
        assert_eq!(parse_kernel("5.15.0-91-generic"), Some((5, 15)));
        let mut c = SimConfig::from_toml_str(&min(), "m").expect("parses");
        c.host.kernel = "5.15".into();
        assert!(c.skip_inline_while_ksoftirqd());
        c.host.kernel = "4.4".into();
        assert!(!c.skip_inline_while_ksoftirqd());
    }
}
