//! What the twin runs for a scenario, whichever mapping made it: the plan (loads, seeds,
//! search, configurations), each configuration's [`SimConfig`], and the loop that runs a
//! configuration's sweep and search. The mappings (crate::from_scenario for the veth
//! lab, crate::from_server_scenario for its server topology, crate::from_study for a NIC
//! machine) build it; nothing here depends on them.

use napilab_core::scenario::Measurement;
use napilab_core::{Notice, PointResult, PointRole};

use crate::config::NapiContext;
use crate::{ConfigError, Profile, SimConfig};

/// Entries of veth's per-RX-queue `ptr_ring` (`VETH_RING_SIZE` in drivers/net/veth.c).
pub const VETH_RING: u32 = 256;
/// NAPI weight of a veth instance (`NAPI_POLL_WEIGHT`).
pub const VETH_WEIGHT: u32 = 64;
/// `net.core.netdev_max_backlog` default: the per-CPU backlog veth uses without GRO.
pub const MAX_BACKLOG: u32 = 1000;
/// The lab machine: CONFIG_HZ and kernel (docs/results/lab.md, "Benchmarks").
pub const LAB_HZ: u32 = 250;
pub const LAB_KERNEL: &str = "6.18";
/// The kernel a twin configuration with threaded busy polling runs as: the first that
/// has it (`crate::config::THREADED_BUSY_POLL_KERNEL`).
pub const BUSY_POLL_KERNEL: &str = "6.19";
/// veth has no wire: a rate high enough that serialisation never matters.
pub const VETH_LINK_MBPS: f64 = 1_000_000.0;
/// Ethernet header the twin's frame size adds to the lab's IP packet size (veth has no
/// FCS, preamble or gap; the twin's size only sets bit counters and serialisation).
pub const ETH_HEADER: u32 = 14;

/// Which testbed engines run on the CPU of the DUT's poller (queue 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnginesOnPoller {
    pub generator: bool,
    pub sink: bool,
}

/// Per-packet CPU cost of the lab's traffic engines (a lab profile's `[testbed]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Testbed {
    /// Paced UDP generator: `sendmmsg`, UDP/IP output and `veth_xmit`, per packet.
    pub generator_cycles_per_packet: f64,
    /// Sink: its veth's NAPI poll, UDP receive and the socket read, per packet.
    pub sink_cycles_per_packet: f64,
}

/// One configuration of a scenario, ready for the twin.
#[derive(Clone, Debug, PartialEq)]
pub struct TwinConfiguration {
    pub name: String,
    /// The same (setting, value) pairs the lab records for the configuration.
    pub settings: Vec<(String, String)>,
    /// `traffic.rate_pps` is the scenario's first load; callers set each load.
    pub config: SimConfig,
    /// CPU that polls each ingress queue in the twin (the generator's CPU in softirq
    /// mode, the NAPI kthread's in threaded mode).
    pub poller_cpus: Vec<u32>,
    pub napi: NapiContext,
    pub engines_on_poller: EnginesOnPoller,
    pub notices: Vec<Notice>,
    /// Mapped onto the veth lab (crate::from_scenario, crate::from_server_scenario):
    /// the lab profile's wake-up delay applies to threaded pollers only. False on a
    /// NIC machine (crate::from_study), whose profile's IRQ delay is the NIC's.
    pub veth: bool,
}

/// The rate a configuration's model is mapped with before a point sets its own
/// ([`TwinConfiguration::at`]), when the scenario gives no fixed load.
pub const UNSET_RATE_PPS: f64 = 100_000.0;

/// A whole scenario mapped for the twin.
#[derive(Clone, Debug, PartialEq)]
pub struct TwinPlan {
    pub name: String,
    /// Offered loads of the sweep, in order.
    pub loads: Vec<f64>,
    /// Further sweep loads as fractions of each configuration's probed capacity
    /// (`traffic.sweep.fractions`), measured after `loads`.
    pub load_fractions: Vec<f64>,
    /// One seed per repeat (`traffic.seed`, `traffic.seed + 1`, ...).
    pub seeds: Vec<u64>,
    pub loss_threshold: f64,
    /// The scenario's measurement when it asks for a maximum-throughput search: the
    /// twin runs the lab's search (napilab-experiment), with its method and limits.
    pub search: Option<Measurement>,
    pub configurations: Vec<TwinConfiguration>,
    /// Scenario-wide settings the twin represents only approximately or not at all.
    pub notices: Vec<Notice>,
    /// The request workload of a server scenario (its loads are then requests/s and
    /// `search` is None: the server's search is [`crate::from_server_scenario`]'s).
    pub requests: Option<crate::server_plan::ServerPlan>,
}

/// The veth lab's DUT host as the twin runs it: `cpus` CPUs at [`LAB_HZ`], NOHZ idle,
/// `kernel` (which sets the mechanisms it has).
pub(crate) fn lab_host(cpus: u32, kernel: &str) -> crate::config::HostConfig {
    crate::config::HostConfig {
        cpus,
        hz: LAB_HZ,
        kernel: kernel.into(),
        tick: crate::config::TickMode::NohzIdle,
        sched_scaling: Default::default(),
        scheduler: crate::config::FairScheduler::of_kernel(kernel),
    }
}

/// The veth lab DUT's softirq settings: the scenario's netdev budgets, veth's weight
/// and the kernel's backlog and restart defaults.
pub(crate) fn lab_net_settings(
    r: &napilab_core::scenario::DutSettings,
) -> crate::config::NetSettings {
    crate::config::NetSettings {
        netdev_budget: r.netdev_budget.unwrap_or(300),
        netdev_budget_usecs: r.netdev_budget_usecs,
        weight: VETH_WEIGHT,
        max_backlog: MAX_BACKLOG,
        max_softirq_restart: crate::softirq::MAX_SOFTIRQ_RESTART,
        gro_normal_batch: crate::config::GRO_NORMAL_BATCH,
    }
}

/// A veth device's receive side as the twin runs it: `ring` entries per queue, no
/// interrupt moderation, and veth's re-check at completion and interrupt-free
/// notification (`IngressConfig::veth`: veth has no interrupt at all).
pub(crate) fn veth_ingress(
    name: &str,
    ring: u32,
    queues: Vec<crate::config::RxQueueConfig>,
) -> crate::config::IngressConfig {
    crate::config::IngressConfig {
        name: name.into(),
        rx_ring_size: ring,
        rx_usecs: 0,
        rx_frames: 0,
        moderation: crate::config::Moderation::Timer,
        adaptive_rx: false,
        irq_mode: Default::default(),
        veth: true,
        queues,
    }
}

/// A veth device's transmit side as the twin runs it: no TX completions at all (veth
/// has none), so a ring of `tx_ring` entries that holds every packet of the run and a
/// completion timer past its end; `qdisc` over a backlog of `MAX_BACKLOG`.
pub(crate) fn veth_egress(
    name: &str,
    tx_ring: u32,
    qdisc: crate::config::QdiscKind,
) -> crate::config::EgressConfig {
    crate::config::EgressConfig {
        name: name.into(),
        qdisc,
        qdisc_limit: MAX_BACKLOG,
        tx_ring_size: tx_ring,
        link_mbps: VETH_LINK_MBPS,
        tx_usecs: u32::MAX,
        tx_frames: 0,
        moderation: crate::config::Moderation::Timer,
        tx_work_limit: 256,
        completion: Default::default(),
        irq_mode: Default::default(),
    }
}

pub(crate) fn notice(what: impl Into<String>, why: impl Into<String>) -> Notice {
    Notice {
        what: what.into(),
        why: why.into(),
    }
}

impl TwinConfiguration {
    /// The profile this configuration runs with: `base`, plus the per-packet cost of
    /// the testbed engines that share the CPU of the DUT's poller, added to the `poll`
    /// stage: the one stage that always runs on the poller's CPU (with RPS the later
    /// stages move to other CPUs, the engines do not). The cost is charged in the
    /// poller's context instead of the engines' threads, so the poller's CPU shows it
    /// as kernel time of the DUT: a fold, not a model of the engines' scheduling.
    ///
    /// In softirq mode veth's notification is synchronous (the sender's `veth_xmit`
    /// raises NET_RX, which runs when the sender re-enables bottom halves), so the
    /// profile's `irq_delivery`, which in a lab profile is the threaded poller's
    /// wake-up delay, is dropped.
    pub fn profile_for(&self, base: &Profile, testbed: Option<&Testbed>) -> Profile {
        let mut p = base.clone();
        if let Some(t) = testbed {
            if self.engines_on_poller.generator {
                p.stage_cycles.poll += t.generator_cycles_per_packet;
            }
            if self.engines_on_poller.sink {
                p.stage_cycles.poll += t.sink_cycles_per_packet;
            }
        }
        if self.veth && self.napi == NapiContext::Softirq {
            p.latency_ns.irq_delivery = 0;
        }
        p
    }

    /// This configuration at one offered load.
    pub fn at(&self, pps: f64) -> SimConfig {
        let mut c = self.config.clone();
        c.traffic.rate_pps = pps;
        // The no-completion stand-in (a completion timer past the run) keeps every
        // packet of the point on the egress ring, which the plan sized for the
        // scenario's own loads; a load given instead (`sim run --loads`) may be higher,
        // and the ring must still hold it, or the twin drops what veth never would.
        if c.egress.tx_usecs == u32::MAX {
            let window_s = (c.measurement.warmup_ms + c.measurement.duration_ms) / 1e3 + 0.1;
            let needed = (pps * window_s).ceil().min(f64::from(u32::MAX - 4096)) as u32 + 4096;
            c.egress.tx_ring_size = c.egress.tx_ring_size.max(needed);
        }
        c
    }
}

/// Whether a point passes the search, as the lab judges it: loss within the threshold
/// and the offered load at least 99% of the requested one.
pub use napilab_experiment::maximum::passes;

/// Runs `batch` one after the other on this thread (`try_run`, then `to_point`).
pub fn run_serial(
    batch: &[(SimConfig, u64, PointRole)],
    profile: &Profile,
) -> Result<Vec<PointResult>, ConfigError> {
    batch
        .iter()
        .map(|(c, seed, role)| {
            crate::try_run(c, profile, *seed).map(|r| r.to_point(*role, c.traffic.rate_pps, 0))
        })
        .collect()
}
