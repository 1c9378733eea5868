//! Experiment scenarios (TOML): topology, the DUT's host settings, traffic, measurement
//! and the configurations to compare. The lab (real kernel, in network namespaces)
//! reads them; the twin (napilab-sim) can map them onto its own config. The format is
//! documented in docs/lab.md and by the examples in `scenarios/`.
//!
//! Validation errors name the file, the line and the field, and say what is allowed:
//! `scenarios/x.toml:12: traffic.classes[0].size: 20 is out of range: use 64 to 1500`.

use std::fmt;
use std::ops::Range;

use serde::{Deserialize, Serialize};

pub use crate::requests::{RequestWorkload, ServerEngine, ServerMode};
pub use crate::tunnel_workload::TunnelWorkload;

/// The built-in scenario (`napilab lab run` without a file).
pub const DEFAULT_SCENARIO: &str = include_str!("../../../scenarios/default.toml");
pub const DEFAULT_SCENARIO_NAME: &str = "scenarios/default.toml (built in)";

/// Smallest and largest IP packet size a class may use, bytes.
pub const MIN_PACKET: u32 = 64;
pub const MAX_PACKET: u32 = 1500;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub topology: Topology,
    /// The baseline host settings; configurations override fields of it.
    #[serde(default)]
    pub dut: DutPatch,
    /// The packet traffic (router and ap topologies).
    #[serde(default)]
    pub traffic: Traffic,
    /// The request workload (server topology).
    #[serde(default)]
    pub requests: Option<RequestWorkload>,
    /// The tunnel's peers and rates (vpn topology).
    #[serde(default)]
    pub tunnel: Option<TunnelWorkload>,
    #[serde(default)]
    pub measurement: Measurement,
    /// Named variations of the baseline, run in this order.
    #[serde(default)]
    pub configurations: Vec<ConfigurationSpec>,
    /// A matrix: every combination of one value per axis becomes a configuration named
    /// `value1/value2/...`, after the explicit `configurations`.
    #[serde(default)]
    pub axes: Vec<Axis>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    #[serde(default)]
    pub kind: TopologyKind,
    /// For `ap`: which way traffic crosses the access point.
    #[serde(default)]
    pub direction: ApDirection,
    /// RX queues of the DUT's ingress device (1 to 8). With more than one, each
    /// traffic class names its `queue`, and the generator sends each queue's classes
    /// from its own CPU (`generator_cpus[queue]`), which XPS maps to that queue.
    #[serde(default = "one")]
    pub ingress_queues: u32,
}

/// The kernel's limit on a device's queues (`rtnl_create_link` refuses more, and veth
/// enforces the same), hence on the many-napi topology's NAPI instances.
pub const MAX_VETH_QUEUES: u32 = 4096;

fn one() -> u32 {
    1
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            kind: TopologyKind::default(),
            direction: ApDirection::default(),
            ingress_queues: 1,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyKind {
    /// gen -> DUT (IP forwarding) -> sink; the DUT's egress qdisc is `dut.qdisc`.
    #[default]
    Router,
    /// The same DUT with a wired side (egress through `dut.qdisc`, like an AP's
    /// Ethernet) and a wireless side (no qdisc, like mac80211, which bypasses it).
    Ap,
    /// clients -> DUT running a key-value server (napilab's or memcached) in one of
    /// the interrupt modes; the load is `[requests]`.
    Server,
    /// peers -> DUT running a tunnel endpoint (kernel WireGuard where it exists, else
    /// napilab's user-space endpoint) into a multi-queue TUN device; the load is
    /// `[tunnel]`.
    Vpn,
    /// The router with many NAPI instances on the DUT's ingress
    /// (`dut.napi_instances` RX queues of one veth), the traffic spread over them by
    /// flow.
    ManyNapi,
}

impl TopologyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TopologyKind::Router => "router",
            TopologyKind::Ap => "ap",
            TopologyKind::Server => "server",
            TopologyKind::Vpn => "vpn",
            TopologyKind::ManyNapi => "many-napi",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApDirection {
    /// E2W: in on the wired side, out on the wireless side (no qdisc).
    #[default]
    WiredToWireless,
    /// W2E: in on the wireless side, out on the wired side (through the qdisc).
    WirelessToWired,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NapiContext {
    #[default]
    Softirq,
    Threaded,
}

impl NapiContext {
    pub fn as_str(self) -> &'static str {
        match self {
            NapiContext::Softirq => "softirq",
            NapiContext::Threaded => "threaded",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QdiscKind {
    /// `noqueue`: the transmit path calls the driver directly.
    #[default]
    None,
    PfifoFast,
    Pfifo,
    Htb,
    Tbf,
}

/// The DUT's egress qdisc.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Qdisc {
    pub kind: QdiscKind,
    /// Queue limit in packets (`pfifo`; `htb`'s leaf pfifo).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Rate (`htb`, `tbf`), Mbit/s.
    #[serde(default)]
    pub rate_mbit: Option<f64>,
    /// Bucket size (`htb`, `tbf`), bytes.
    #[serde(default)]
    pub burst_bytes: Option<u32>,
    /// `tbf`: the longest a packet may wait in the bucket's queue, ms (sets its limit).
    #[serde(default)]
    pub latency_ms: Option<f64>,
}

impl Qdisc {
    /// The qdisc as `tc` arguments after `... root`, e.g. `["tbf", "rate", "10mbit", ...]`.
    pub fn tc_args(&self) -> Vec<String> {
        let rate = format!(
            "{}kbit",
            (self.rate_mbit.unwrap_or(1000.0) * 1000.0).round()
        );
        let burst = self.burst_bytes.unwrap_or(16_000).to_string();
        let mut a: Vec<String> = Vec::new();
        match self.kind {
            QdiscKind::None => a.push("noqueue".into()),
            QdiscKind::PfifoFast => a.push("pfifo_fast".into()),
            QdiscKind::Pfifo => {
                a.push("pfifo".into());
                if let Some(l) = self.limit {
                    a.extend(["limit".into(), l.to_string()]);
                }
            }
            QdiscKind::Tbf => {
                let latency = format!("{}us", (self.latency_ms.unwrap_or(50.0) * 1000.0).round());
                a.extend(["tbf".into(), "rate".into(), rate, "burst".into(), burst]);
                a.extend(["latency".into(), latency]);
            }
            QdiscKind::Htb => {
                // The class and its leaf are added by the lab (see `htb_class_args`).
                a.extend(["handle".into(), "1:".into(), "htb".into()]);
                a.extend(["default".into(), "10".into()]);
            }
        }
        a
    }

    /// For `htb`: the one class all traffic goes through, `tc class add dev X` args.
    pub fn htb_class_args(&self) -> Vec<String> {
        let rate = format!(
            "{}kbit",
            (self.rate_mbit.unwrap_or(1000.0) * 1000.0).round()
        );
        let burst = self.burst_bytes.unwrap_or(16_000).to_string();
        vec![
            "parent".into(),
            "1:".into(),
            "classid".into(),
            "1:10".into(),
            "htb".into(),
            "rate".into(),
            rate,
            "burst".into(),
            burst,
        ]
    }

    pub fn describe(&self) -> String {
        let mut s = self.tc_args().join(" ");
        if self.kind == QdiscKind::Htb {
            s = format!("htb class {}", self.htb_class_args()[6..].join(" "));
            if let Some(l) = self.limit {
                s.push_str(&format!(" leaf pfifo limit {l}"));
            }
        }
        s
    }
}

/// Host settings of the DUT. Every field is optional so that a configuration can
/// override just some; [`DutPatch::resolve`] fills the defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DutPatch {
    /// NAPI context of the DUT's ingress device: `softirq` or `threaded`.
    pub napi: Option<NapiContext>,
    /// CPUs of the ingress NAPI kthreads (threaded): the stand-in for IRQ affinity.
    pub napi_cpus: Option<Vec<u32>>,
    /// Threaded: SCHED_FIFO priority of the ingress NAPI kthread per RX queue (queue
    /// i gets `napi_fifo[i]`; 0 or absent: SCHED_OTHER), e.g. an RT queue's thread.
    pub napi_fifo: Option<Vec<u32>>,
    /// RPS CPUs of the ingress device's RX queue(s); empty: RPS off.
    pub rps_cpus: Option<Vec<u32>>,
    /// GRO on the ingress device (veth uses NAPI only with GRO on).
    pub gro: Option<bool>,
    /// `napi_defer_hard_irqs` of the ingress device: polls that find no work before the
    /// "interrupt" is re-armed; needs `gro_flush_timeout_ns`.
    pub defer_hard_irqs: Option<u32>,
    /// `gro_flush_timeout` of the ingress device, ns: the timer that re-polls while
    /// interrupts stay deferred (and flushes GRO).
    pub gro_flush_timeout_ns: Option<u64>,
    /// Egress qdisc of the DUT's egress device (router) or wired side (ap).
    pub qdisc: Option<Qdisc>,
    /// `net.core.netdev_budget` during the configuration (journalled, reverted).
    pub netdev_budget: Option<u32>,
    /// `net.core.netdev_budget_usecs` during the configuration (journalled, reverted).
    pub netdev_budget_usecs: Option<u32>,
    /// CPUs the traffic generator runs on (it uses the first).
    pub generator_cpus: Option<Vec<u32>>,
    /// CPUs the sink runs on (the sink thread and the sink veth's NAPI thread).
    pub sink_cpus: Option<Vec<u32>>,
    /// Server topology: the interrupt mode (`no-coalescing`, `deferral`, `busy-wait`,
    /// `irq-suspend`, `threaded`).
    pub mode: Option<ServerMode>,
    /// Server topology: `napilab` (its own key-value server) or `memcached`.
    pub server: Option<ServerEngine>,
    /// Server topology: CPUs of the server's workers (worker i on the i-th, wrapping)
    /// and of the DUT veth's NAPI kthreads in `threaded` mode; default the last CPU.
    pub server_cpus: Option<Vec<u32>>,
    /// many-napi topology: NAPI instances on the DUT's ingress (RX queues of its veth,
    /// each its own instance), 1 to [`MAX_VETH_QUEUES`].
    pub napi_instances: Option<u32>,
}

/// Resolved host settings of one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DutSettings {
    pub napi: NapiContext,
    pub napi_cpus: Vec<u32>,
    pub napi_fifo: Vec<u32>,
    pub rps_cpus: Vec<u32>,
    pub gro: bool,
    pub defer_hard_irqs: u32,
    pub gro_flush_timeout_ns: u64,
    pub qdisc: Qdisc,
    pub netdev_budget: Option<u32>,
    pub netdev_budget_usecs: Option<u32>,
    pub generator_cpus: Vec<u32>,
    pub sink_cpus: Vec<u32>,
    pub mode: ServerMode,
    pub server: ServerEngine,
    /// Empty: the runner picks the host's last CPU.
    pub server_cpus: Vec<u32>,
    /// NAPI instances of the DUT's ingress (many-napi topology; 1 elsewhere).
    #[serde(default = "one")]
    pub napi_instances: u32,
}

impl DutPatch {
    /// `self` with the fields `over` sets replaced.
    pub fn overlay(&self, over: &DutPatch) -> DutPatch {
        fn pick<T: Clone>(a: &Option<T>, b: &Option<T>) -> Option<T> {
            b.clone().or_else(|| a.clone())
        }
        DutPatch {
            napi: pick(&self.napi, &over.napi),
            napi_cpus: pick(&self.napi_cpus, &over.napi_cpus),
            napi_fifo: pick(&self.napi_fifo, &over.napi_fifo),
            rps_cpus: pick(&self.rps_cpus, &over.rps_cpus),
            gro: pick(&self.gro, &over.gro),
            defer_hard_irqs: pick(&self.defer_hard_irqs, &over.defer_hard_irqs),
            gro_flush_timeout_ns: pick(&self.gro_flush_timeout_ns, &over.gro_flush_timeout_ns),
            qdisc: pick(&self.qdisc, &over.qdisc),
            netdev_budget: pick(&self.netdev_budget, &over.netdev_budget),
            netdev_budget_usecs: pick(&self.netdev_budget_usecs, &over.netdev_budget_usecs),
            generator_cpus: pick(&self.generator_cpus, &over.generator_cpus),
            sink_cpus: pick(&self.sink_cpus, &over.sink_cpus),
            mode: pick(&self.mode, &over.mode),
            server: pick(&self.server, &over.server),
            server_cpus: pick(&self.server_cpus, &over.server_cpus),
            napi_instances: pick(&self.napi_instances, &over.napi_instances),
        }
    }

    pub fn resolve(&self) -> DutSettings {
        DutSettings {
            napi: self.napi.unwrap_or_default(),
            napi_cpus: self.napi_cpus.clone().unwrap_or_default(),
            napi_fifo: self.napi_fifo.clone().unwrap_or_default(),
            rps_cpus: self.rps_cpus.clone().unwrap_or_default(),
            gro: self.gro.unwrap_or(true),
            defer_hard_irqs: self.defer_hard_irqs.unwrap_or(0),
            gro_flush_timeout_ns: self.gro_flush_timeout_ns.unwrap_or(0),
            qdisc: self.qdisc.clone().unwrap_or_default(),
            netdev_budget: self.netdev_budget,
            netdev_budget_usecs: self.netdev_budget_usecs,
            generator_cpus: self.generator_cpus.clone().unwrap_or_else(|| vec![0]),
            sink_cpus: self.sink_cpus.clone().unwrap_or_else(|| vec![0]),
            mode: self.mode.unwrap_or_default(),
            server: self.server.unwrap_or_default(),
            server_cpus: self.server_cpus.clone().unwrap_or_default(),
            napi_instances: self.napi_instances.unwrap_or(1),
        }
    }

    /// The (setting, value) pairs this patch sets, for naming what a configuration
    /// changes.
    pub fn pairs(&self) -> Vec<(String, String)> {
        let r = self.resolve();
        let mut out = Vec::new();
        if self.napi.is_some() {
            out.push(("napi".into(), r.napi.as_str().into()));
        }
        if self.napi_cpus.is_some() {
            out.push(("napi_cpus".into(), cpu_list(&r.napi_cpus)));
        }
        if self.napi_fifo.is_some() {
            out.push(("napi_fifo".into(), cpu_list(&r.napi_fifo)));
        }
        if self.rps_cpus.is_some() {
            out.push(("rps_cpus".into(), cpu_list(&r.rps_cpus)));
        }
        if self.gro.is_some() {
            out.push(("gro".into(), on_off(r.gro).into()));
        }
        if let Some(n) = self.defer_hard_irqs {
            out.push(("defer_hard_irqs".into(), n.to_string()));
        }
        if let Some(ns) = self.gro_flush_timeout_ns {
            out.push(("gro_flush_timeout_ns".into(), ns.to_string()));
        }
        if self.qdisc.is_some() {
            out.push(("qdisc".into(), r.qdisc.describe()));
        }
        if let Some(b) = self.netdev_budget {
            out.push(("netdev_budget".into(), b.to_string()));
        }
        if let Some(b) = self.netdev_budget_usecs {
            out.push(("netdev_budget_usecs".into(), b.to_string()));
        }
        if self.generator_cpus.is_some() {
            out.push(("generator_cpus".into(), cpu_list(&r.generator_cpus)));
        }
        if self.sink_cpus.is_some() {
            out.push(("sink_cpus".into(), cpu_list(&r.sink_cpus)));
        }
        if self.mode.is_some() {
            out.push(("mode".into(), r.mode.as_str().into()));
        }
        if self.server.is_some() {
            out.push(("server".into(), r.server.as_str().into()));
        }
        if self.server_cpus.is_some() {
            out.push(("server_cpus".into(), cpu_list(&r.server_cpus)));
        }
        if let Some(n) = self.napi_instances {
            out.push(("napi_instances".into(), n.to_string()));
        }
        out
    }
}

impl DutSettings {
    /// Every setting as (setting, value) pairs (`ConfigurationResult.settings`).
    pub fn pairs(&self) -> Vec<(String, String)> {
        let budget =
            |v: Option<u32>| v.map_or_else(|| "host default".to_string(), |b| b.to_string());
        vec![
            ("napi".into(), self.napi.as_str().into()),
            ("napi_cpus".into(), cpu_list(&self.napi_cpus)),
            ("napi_fifo".into(), cpu_list(&self.napi_fifo)),
            ("rps_cpus".into(), cpu_list(&self.rps_cpus)),
            ("gro".into(), on_off(self.gro).into()),
            ("defer_hard_irqs".into(), self.defer_hard_irqs.to_string()),
            (
                "gro_flush_timeout_ns".into(),
                self.gro_flush_timeout_ns.to_string(),
            ),
            ("qdisc".into(), self.qdisc.describe()),
            ("netdev_budget".into(), budget(self.netdev_budget)),
            (
                "netdev_budget_usecs".into(),
                budget(self.netdev_budget_usecs),
            ),
            ("generator_cpus".into(), cpu_list(&self.generator_cpus)),
            ("sink_cpus".into(), cpu_list(&self.sink_cpus)),
        ]
        .into_iter()
        .chain((self.napi_instances != 1).then(|| {
            (
                "napi_instances".to_string(),
                self.napi_instances.to_string(),
            )
        }))
        .collect()
    }

    /// The server topology's settings as (setting, value) pairs.
    pub fn server_pairs(&self) -> Vec<(String, String)> {
        vec![
            ("mode".into(), self.mode.as_str().into()),
            ("server".into(), self.server.as_str().into()),
            ("server_cpus".into(), cpu_list(&self.server_cpus)),
            ("client_cpus".into(), cpu_list(&self.generator_cpus)),
        ]
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// `0,1` or `-` for an empty list.
pub fn cpu_list(cpus: &[u32]) -> String {
    if cpus.is_empty() {
        "-".into()
    } else {
        cpus.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigurationSpec {
    pub name: String,
    #[serde(default)]
    pub set: DutPatch,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Axis {
    pub name: String,
    pub values: Vec<ConfigurationSpec>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Constant bit rate: equal inter-departure times.
    #[default]
    Cbr,
    /// Exponential inter-departure times with the class's mean rate.
    Poisson,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// Userspace UDP with per-packet departure timestamps (latency measured).
    #[default]
    Paced,
    /// In-kernel frames at line rate (XDP live frames); no per-packet latency.
    LineRate,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficClass {
    pub name: String,
    /// Fraction of the offered load; the shares of all classes add up to 1.
    pub share: f64,
    /// IP packet size, bytes (64 to 1500).
    pub size: u32,
    /// UDP destination port (distinct per class).
    pub port: u16,
    #[serde(default)]
    pub pattern: Pattern,
    /// The DUT ingress RX queue this class lands on (`topology.ingress_queues` > 1).
    #[serde(default)]
    pub queue: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    pub from_pps: f64,
    pub to_pps: f64,
    pub steps: u32,
    /// Geometric spacing instead of linear.
    #[serde(default)]
    pub log: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Traffic {
    pub classes: Vec<TrafficClass>,
    /// Offered loads (packets per second, all classes), in this order.
    #[serde(default)]
    pub loads_pps: Vec<f64>,
    /// Or a sweep (added after `loads_pps`).
    #[serde(default)]
    pub sweep: Option<Sweep>,
    #[serde(default)]
    pub backend: Backend,
    /// Seed of the Poisson departure times.
    #[serde(default = "default_seed")]
    pub seed: u64,
}

fn default_seed() -> u64 {
    1
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measurement {
    #[serde(default = "d_duration")]
    pub duration_s: f64,
    #[serde(default = "d_warmup")]
    pub warmup_s: f64,
    #[serde(default = "d_repeats")]
    pub repeats: u32,
    /// Highest loss ratio the maximum-throughput search accepts.
    #[serde(default = "d_loss")]
    pub loss_threshold: f64,
    /// Run the maximum-throughput search per configuration.
    #[serde(default)]
    pub search: bool,
    /// The back end of the maximum-throughput search; default: `traffic.backend`.
    /// `line-rate` with a `paced` sweep measures latency with the paced back end and
    /// the maximum with frames made and counted in the kernel, so that neither the
    /// generator nor the sink sets the maximum.
    #[serde(default)]
    pub search_backend: Option<Backend>,
    /// Highest load the search tries, packets per second.
    #[serde(default = "d_search_max")]
    pub search_max_pps: f64,
    /// Most probes the bisection makes (`search_method = "bisection"`).
    #[serde(default = "d_search_iterations")]
    pub search_iterations: u32,
    /// The bisection stops when (high - low) / high is below this; also the default
    /// goal width of MLRsearch.
    #[serde(default = "d_search_resolution")]
    pub search_resolution: f64,
    /// `mlrsearch` (default: several goals in one pass, short trials first, a goal
    /// exceed ratio, docs/lab.md "The maximum-throughput search") or `bisection`
    /// (RFC 2544 section 26.1 with `loss_threshold`).
    #[serde(default)]
    pub search_method: SearchMethod,
    /// MLRsearch goals; default: one goal `pdr` with `loss_threshold`.
    #[serde(default)]
    pub search_goals: Vec<SearchGoal>,
    /// Independent repeats of the whole search per configuration: the maximum is
    /// reported as their mean with a confidence interval (needs at least 2).
    #[serde(default = "d_search_repeats")]
    pub search_repeats: u32,
    /// What MLRsearch does with a trial the machine disturbed (CPU steal, other
    /// processes on the lab's CPUs, a stalled generator): `keep` it, or `repeat` it
    /// (at most `disturbed_retries` times) and leave it out of the classification.
    #[serde(default)]
    pub disturbed_trials: DisturbedTrials,
    #[serde(default = "d_disturbed_retries")]
    pub disturbed_retries: u32,
    /// Most seconds of trials one search may spend (a search that runs out reports the
    /// bounds it has, stopped `time_limit`).
    #[serde(default = "d_search_time_limit")]
    pub search_time_limit_s: f64,
    /// Confidence level of every interval and significance verdict in the report.
    #[serde(default = "d_confidence")]
    pub confidence_level: f64,
    /// Wait after the last departure for packets in flight, ms.
    #[serde(default = "d_drain")]
    pub drain_ms: u64,
    /// What the DUT's Observation of every point adds to the /proc counters.
    #[serde(default)]
    pub trace: TraceTier,
}

/// How much tracing a lab point records on the DUT (docs/trace.md): each tier adds to
/// the one before it, and costs more (the costs are published in docs/trace.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceTier {
    /// /proc, /sys and netlink counters only.
    #[default]
    Off,
    /// The always-on BPF tier: polls, softirqs and IRQs by execution context.
    Always,
    /// Always-on plus the perf stage profile (1 kHz cpu-clock sampling).
    Stages,
    /// Always-on plus the per-packet tier (stage-to-stage latency, drops by reason).
    Packets,
}

impl TraceTier {
    /// The `napilab observe` flags that record this tier.
    pub fn observe_flags(self) -> &'static [&'static str] {
        match self {
            TraceTier::Off => &[],
            TraceTier::Always => &["--trace"],
            TraceTier::Stages => &["--trace", "--stages"],
            TraceTier::Packets => &["--trace", "--trace-packets"],
        }
    }
}

fn d_duration() -> f64 {
    5.0
}
fn d_warmup() -> f64 {
    1.0
}
fn d_repeats() -> u32 {
    1
}
fn d_loss() -> f64 {
    0.001
}
fn d_search_max() -> f64 {
    1_000_000.0
}
fn d_search_iterations() -> u32 {
    8
}
fn d_search_resolution() -> f64 {
    0.03
}
fn d_drain() -> u64 {
    200
}
fn d_search_repeats() -> u32 {
    1
}
fn d_disturbed_retries() -> u32 {
    2
}
fn d_search_time_limit() -> f64 {
    180.0
}
fn d_confidence() -> f64 {
    0.95
}

/// How the maximum-throughput search looks for the maximum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SearchMethod {
    #[default]
    Mlrsearch,
    Bisection,
}

/// What the search does with disturbed trials.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DisturbedTrials {
    Keep,
    #[default]
    Repeat,
}

/// One MLRsearch goal (draft-ietf-bmwg-mlrsearch, section "Search Goal"): a load is a
/// lower bound when trials longer than `final_trial_s` with loss at most `loss_ratio`
/// make up at least `1 - exceed_ratio` of `duration_sum_s` (short trials can only
/// count against it), an upper bound when high-loss trials already exceed
/// `exceed_ratio` of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchGoal {
    pub name: String,
    pub loss_ratio: f64,
    /// Share of the trial time that may exceed the loss ratio, e.g. 0.5.
    #[serde(default = "d_exceed")]
    pub exceed_ratio: f64,
    /// Trials at least this long decide a lower bound; default `measurement.duration_s`.
    #[serde(default)]
    pub final_trial_s: Option<f64>,
    /// Trial time a decision needs; default twice the final trial duration.
    #[serde(default)]
    pub duration_sum_s: Option<f64>,
    /// Duration of the first, exploring trials; default a quarter of the final one,
    /// at least 0.5 s.
    #[serde(default)]
    pub initial_trial_s: Option<f64>,
    /// The search stops when (upper - lower) / upper is at most this; default
    /// `measurement.search_resolution`.
    #[serde(default)]
    pub width: Option<f64>,
}

fn d_exceed() -> f64 {
    0.5
}

/// A goal with every default filled in from the measurement.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResolvedGoal {
    pub name: String,
    pub loss_ratio: f64,
    pub exceed_ratio: f64,
    pub final_trial_s: f64,
    pub duration_sum_s: f64,
    pub initial_trial_s: f64,
    pub width: f64,
}

impl Measurement {
    /// The MLRsearch goals with their defaults filled in.
    pub fn resolved_goals(&self) -> Vec<ResolvedGoal> {
        let default_goal = [SearchGoal {
            name: "pdr".into(),
            loss_ratio: self.loss_threshold,
            exceed_ratio: d_exceed(),
            final_trial_s: None,
            duration_sum_s: None,
            initial_trial_s: None,
            width: None,
        }];
        let goals: &[SearchGoal] = if self.search_goals.is_empty() {
            &default_goal
        } else {
            &self.search_goals
        };
        goals
            .iter()
            .map(|g| {
                let final_trial_s = g.final_trial_s.unwrap_or(self.duration_s);
                ResolvedGoal {
                    name: g.name.clone(),
                    loss_ratio: g.loss_ratio,
                    exceed_ratio: g.exceed_ratio,
                    final_trial_s,
                    duration_sum_s: g.duration_sum_s.unwrap_or(2.0 * final_trial_s),
                    initial_trial_s: g
                        .initial_trial_s
                        .unwrap_or((final_trial_s / 4.0).max(0.5))
                        .min(final_trial_s),
                    width: g.width.unwrap_or(self.search_resolution),
                }
            })
            .collect()
    }
}

impl Default for Measurement {
    fn default() -> Self {
        Measurement {
            duration_s: d_duration(),
            warmup_s: d_warmup(),
            repeats: d_repeats(),
            loss_threshold: d_loss(),
            search: false,
            search_backend: None,
            search_max_pps: d_search_max(),
            search_iterations: d_search_iterations(),
            search_resolution: d_search_resolution(),
            search_method: SearchMethod::default(),
            search_goals: Vec::new(),
            search_repeats: d_search_repeats(),
            disturbed_trials: DisturbedTrials::default(),
            disturbed_retries: d_disturbed_retries(),
            search_time_limit_s: d_search_time_limit(),
            confidence_level: d_confidence(),
            drain_ms: d_drain(),
            trace: TraceTier::Off,
        }
    }
}

/// One configuration to run: a name, the resolved settings and what it changed.
#[derive(Clone, Debug, PartialEq)]
pub struct Configuration {
    pub name: String,
    pub settings: DutSettings,
    /// The settings the configuration (or its axis values) set over the baseline.
    pub overrides: Vec<(String, String)>,
}

/// A validation error: where (file, line) and which field, and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: String,
    pub line: Option<usize>,
    pub field: String,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}: {}", self.file, l, self.field, self.message),
            None => write!(f, "{}: {}: {}", self.file, self.field, self.message),
        }
    }
}

/// All errors of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioErrors(pub Vec<ScenarioError>);

impl fmt::Display for ScenarioErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioErrors {}

/// Parses and validates a scenario. `file` names it in errors. `host_cpus`, when
/// given, is the number of CPUs: CPU numbers are checked against it.
pub fn parse(text: &str, file: &str, host_cpus: Option<u32>) -> Result<Scenario, ScenarioErrors> {
    let locator = Locator::new(text);
    let scenario: Scenario = match toml::from_str(text) {
        Ok(s) => s,
        Err(e) => {
            let (line, field) = match e.span() {
                Some(span) => (
                    Some(line_of(text, span.start)),
                    locator
                        .path_at(span.start)
                        .unwrap_or_else(|| "(file)".into()),
                ),
                None => (None, "(file)".into()),
            };
            return Err(ScenarioErrors(vec![ScenarioError {
                file: file.to_string(),
                line,
                field,
                message: e.message().trim_end().to_string(),
            }]));
        }
    };
    let mut v = Validator {
        file,
        text,
        locator: &locator,
        errors: Vec::new(),
    };
    validate(&scenario, &mut v, host_cpus);
    if v.errors.is_empty() {
        Ok(scenario)
    } else {
        Err(ScenarioErrors(v.errors))
    }
}

struct Validator<'a> {
    file: &'a str,
    text: &'a str,
    locator: &'a Locator<'a>,
    errors: Vec<ScenarioError>,
}

impl Validator<'_> {
    fn err(&mut self, field: &str, message: impl Into<String>) {
        let line = self
            .locator
            .span_of(field)
            .map(|s| line_of(self.text, s.start));
        self.errors.push(ScenarioError {
            file: self.file.to_string(),
            line,
            field: field.to_string(),
            message: message.into(),
        });
    }
}

fn check_search(m: &Measurement, v: &mut Validator<'_>) {
    if m.search_repeats == 0 || m.search_repeats > 20 {
        v.err(
            "measurement.search_repeats",
            format!("{} is out of range: use 1 to 20", m.search_repeats),
        );
    }
    if m.disturbed_retries > 10 {
        v.err("measurement.disturbed_retries", "use 0 to 10");
    }
    if !(m.search_time_limit_s >= 1.0 && m.search_time_limit_s <= 86_400.0) {
        v.err(
            "measurement.search_time_limit_s",
            "use 1 to 86400 s (the most trial time one search may spend)",
        );
    }
    if !(m.confidence_level >= 0.5 && m.confidence_level < 1.0) {
        v.err(
            "measurement.confidence_level",
            format!("{} is out of range: use e.g. 0.95", m.confidence_level),
        );
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, g) in m.search_goals.iter().enumerate() {
        let f = format!("measurement.search_goals[{i}]");
        if g.name.trim().is_empty() || !names.insert(g.name.clone()) {
            v.err(
                &format!("{f}.name"),
                "give each goal a unique, non-empty name",
            );
        }
        if !(g.loss_ratio >= 0.0 && g.loss_ratio < 1.0) {
            v.err(
                &format!("{f}.loss_ratio"),
                "use a ratio in [0, 1), e.g. 0.005",
            );
        }
        if !(g.exceed_ratio >= 0.0 && g.exceed_ratio < 1.0) {
            v.err(
                &format!("{f}.exceed_ratio"),
                "use a ratio in [0, 1), e.g. 0.5 (0 makes every high-loss trial decide)",
            );
        }
        let fin = g.final_trial_s.unwrap_or(m.duration_s);
        if let Some(d) = g.final_trial_s {
            if !(0.2..=3600.0).contains(&d) {
                v.err(&format!("{f}.final_trial_s"), "use 0.2 to 3600 s");
            }
        }
        if let Some(d) = g.initial_trial_s {
            if !(d >= 0.2 && d <= fin) {
                v.err(
                    &format!("{f}.initial_trial_s"),
                    format!("use 0.2 s up to the final trial duration ({fin} s)"),
                );
            }
        }
        if let Some(d) = g.duration_sum_s {
            if !(d >= fin && d <= 86_400.0) {
                v.err(
                    &format!("{f}.duration_sum_s"),
                    format!("use at least the final trial duration ({fin} s)"),
                );
            }
        }
        if let Some(w) = g.width {
            if !(w > 0.0 && w < 1.0) {
                v.err(&format!("{f}.width"), "use a fraction in (0, 1), e.g. 0.05");
            }
        }
    }
}

fn validate(s: &Scenario, v: &mut Validator<'_>, host_cpus: Option<u32>) {
    if s.name.trim().is_empty() {
        v.err("name", "must not be empty");
    }
    check_patch(&s.dut, "dut", v, host_cpus);
    check_workload_kind(s, v);
    // Traffic (the packet topologies).
    let t = &s.traffic;
    let packets = matches!(
        s.topology.kind,
        TopologyKind::Router | TopologyKind::Ap | TopologyKind::ManyNapi
    );
    if packets && t.classes.is_empty() {
        v.err("traffic.classes", "add at least one [[traffic.classes]]");
    }
    let mut share = 0.0;
    let mut names = std::collections::BTreeSet::new();
    let mut ports = std::collections::BTreeSet::new();
    for (i, c) in t.classes.iter().enumerate() {
        let f = |x: &str| format!("traffic.classes[{i}].{x}");
        if c.name.is_empty()
            || !c
                .name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
        {
            v.err(&f("name"), "use letters, digits, '-' and '_'");
        }
        if !names.insert(c.name.clone()) {
            v.err(&f("name"), format!("class {:?} is defined twice", c.name));
        }
        if !(c.share > 0.0 && c.share <= 1.0) {
            v.err(
                &f("share"),
                format!("{} is out of range: use a fraction in (0, 1]", c.share),
            );
        }
        share += c.share;
        if !(MIN_PACKET..=MAX_PACKET).contains(&c.size) {
            v.err(
                &f("size"),
                format!(
                    "{} is out of range: use {MIN_PACKET} to {MAX_PACKET} (IP packet bytes)",
                    c.size
                ),
            );
        }
        if c.port < 1024 {
            v.err(
                &f("port"),
                format!("{} is a privileged port: use 1024 to 65535", c.port),
            );
        }
        if !ports.insert(c.port) {
            v.err(
                &f("port"),
                format!(
                    "port {} is used by two classes: give each class its own port",
                    c.port
                ),
            );
        }
    }
    let nq = s.topology.ingress_queues;
    if nq == 0 || nq > 8 {
        v.err(
            "topology.ingress_queues",
            format!("{nq} is out of range: use 1 to 8"),
        );
    }
    check_many_napi(s, v);
    for (i, c) in t.classes.iter().enumerate() {
        if c.queue >= nq.max(1) {
            v.err(
                &format!("traffic.classes[{i}].queue"),
                format!(
                    "queue {} does not exist: topology.ingress_queues = {nq} gives queues 0 to {}",
                    c.queue,
                    nq.max(1) - 1
                ),
            );
        }
    }
    if !t.classes.is_empty() && (share - 1.0).abs() > 1e-6 {
        v.err(
            "traffic.classes",
            format!("the shares add up to {share}: they must add up to 1"),
        );
    }
    for (i, l) in t.loads_pps.iter().enumerate() {
        if !(*l >= 1.0 && *l <= 100e6) {
            v.err(
                &format!("traffic.loads_pps[{i}]"),
                format!("{l} is out of range: use 1 to 100000000 packets/s"),
            );
        }
    }
    if let Some(sw) = &t.sweep {
        if !(sw.from_pps >= 1.0 && sw.to_pps >= sw.from_pps && sw.to_pps <= 100e6) {
            v.err("traffic.sweep", "use 1 <= from_pps <= to_pps <= 100000000");
        }
        if sw.steps == 0 || sw.steps > 100 {
            v.err(
                "traffic.sweep.steps",
                format!("{} is out of range: use 1 to 100", sw.steps),
            );
        }
    }
    if packets && t.loads_pps.is_empty() && t.sweep.is_none() && !s.measurement.search {
        v.err(
            "traffic",
            "nothing to measure: give loads_pps, a [traffic.sweep], or measurement.search = true",
        );
    }
    // Measurement.
    let m = &s.measurement;
    if !(m.duration_s >= 0.2 && m.duration_s <= 3600.0) {
        v.err(
            "measurement.duration_s",
            format!("{} is out of range: use 0.2 to 3600 s", m.duration_s),
        );
    }
    if !(m.warmup_s >= 0.0 && m.warmup_s <= 600.0) {
        v.err(
            "measurement.warmup_s",
            format!("{} is out of range: use 0 to 600 s", m.warmup_s),
        );
    }
    if m.repeats == 0 || m.repeats > 100 {
        v.err(
            "measurement.repeats",
            format!("{} is out of range: use 1 to 100", m.repeats),
        );
    }
    if !(m.loss_threshold >= 0.0 && m.loss_threshold < 1.0) {
        v.err(
            "measurement.loss_threshold",
            format!(
                "{} is out of range: use a ratio in [0, 1)",
                m.loss_threshold
            ),
        );
    }
    if !(m.search_max_pps >= 10.0 && m.search_max_pps <= 100e6) {
        v.err(
            "measurement.search_max_pps",
            "use 10 to 100000000 packets/s",
        );
    }
    if m.search_iterations == 0 || m.search_iterations > 30 {
        v.err(
            "measurement.search_iterations",
            format!("{} is out of range: use 1 to 30", m.search_iterations),
        );
    }
    if !(m.search_resolution > 0.0 && m.search_resolution < 1.0) {
        v.err(
            "measurement.search_resolution",
            "use a fraction in (0, 1), e.g. 0.03",
        );
    }
    if m.drain_ms > 10_000 {
        v.err("measurement.drain_ms", "use at most 10000 ms");
    }
    check_search(m, v);
    // Configurations and axes.
    let mut config_names = std::collections::BTreeSet::new();
    for (i, c) in s.configurations.iter().enumerate() {
        let f = format!("configurations[{i}]");
        if c.name.trim().is_empty() {
            v.err(&format!("{f}.name"), "must not be empty");
        }
        if !config_names.insert(c.name.clone()) {
            v.err(
                &format!("{f}.name"),
                format!("configuration {:?} is defined twice", c.name),
            );
        }
        check_patch(&c.set, &format!("{f}.set"), v, host_cpus);
    }
    for (i, a) in s.axes.iter().enumerate() {
        if a.values.is_empty() {
            v.err(
                &format!("axes[{i}].values"),
                "an axis needs at least one value",
            );
        }
        for (j, c) in a.values.iter().enumerate() {
            if c.name.trim().is_empty() || c.name.contains('/') {
                v.err(
                    &format!("axes[{i}].values[{j}].name"),
                    "must be non-empty without '/'",
                );
            }
            check_patch(&c.set, &format!("axes[{i}].values[{j}].set"), v, host_cpus);
        }
    }
    if v.errors.is_empty() {
        // Combinations: check each resolved configuration (e.g. threaded without GRO).
        let (configs, origin) = expand_with_origin(s);
        for (c, field) in configs.iter().zip(origin) {
            let r = &c.settings;
            if s.topology.kind != TopologyKind::ManyNapi && r.napi_instances != 1 {
                v.err(&field, format!("configuration {:?}: napi_instances = {} is the many-napi topology's setting: set topology.kind = \"many-napi\" or remove it", c.name, r.napi_instances));
            }
            if s.topology.kind == TopologyKind::ManyNapi && !r.gro {
                v.err(&field, format!("configuration {:?}: the many-napi topology needs gro = true (veth has NAPI instances only with GRO or XDP on)", c.name));
            } else if r.napi == NapiContext::Threaded && !r.gro {
                v.err(&field, format!("configuration {:?}: napi = \"threaded\" needs gro = true (veth has NAPI instances only with GRO on)", c.name));
            }
            if r.defer_hard_irqs > 0 && r.gro_flush_timeout_ns == 0 {
                v.err(&field, format!("configuration {:?}: defer_hard_irqs = {} has no effect without gro_flush_timeout_ns (the timer that polls while interrupts stay deferred): set both, e.g. gro_flush_timeout_ns = 20000", c.name, r.defer_hard_irqs));
            }
            if s.topology.ingress_queues > 1
                && (r.generator_cpus.len() as u32) < s.topology.ingress_queues
            {
                v.err(&field, format!("configuration {:?}: {} ingress queues need {} generator_cpus (one per queue: XPS steers each CPU's packets to its queue)", c.name, s.topology.ingress_queues, s.topology.ingress_queues));
            }
            if s.topology.kind == TopologyKind::Ap && r.qdisc.kind == QdiscKind::None {
                v.err(&field, format!("configuration {:?}: the ap topology's wired side needs a qdisc (qdisc.kind pfifo_fast, pfifo, htb or tbf); its wireless side has none", c.name));
            }
        }
        if configs.len() > 64 {
            v.err(
                "axes",
                format!("{} configurations: use at most 64", configs.len()),
            );
        }
    }
}

/// The many-napi topology's traffic: on the paced back end (which spreads flows over
/// the queues), with its queues from `dut.napi_instances` only.
fn check_many_napi(s: &Scenario, v: &mut Validator<'_>) {
    if s.topology.kind != TopologyKind::ManyNapi {
        return;
    }
    if s.topology.ingress_queues != 1 {
        v.err(
            "topology.ingress_queues",
            "the many-napi topology sets its queues from dut.napi_instances: remove ingress_queues",
        );
    }
    if s.traffic.backend != Backend::Paced {
        v.err(
            "traffic.backend",
            "the many-napi topology needs the paced back end (its flows are what spreads the traffic over the NAPI instances): use backend = \"paced\"",
        );
    }
    if s.measurement
        .search_backend
        .is_some_and(|b| b != Backend::Paced)
    {
        v.err(
            "measurement.search_backend",
            "the many-napi topology searches with the paced back end only: remove search_backend",
        );
    }
}

/// A server scenario has `[requests]` and no packet classes; the packet topologies
/// have no `[requests]` and no server settings.
fn check_workload_kind(s: &Scenario, v: &mut Validator<'_>) {
    let server = s.topology.kind == TopologyKind::Server;
    match (&s.requests, server) {
        (None, true) => v.err(
            "requests",
            "topology.kind = \"server\" needs a [requests] section (loads_qps, slo_p99_us, ...)",
        ),
        (Some(_), false) => v.err(
            "requests",
            "[requests] is the server topology's workload: set topology.kind = \"server\" or remove it",
        ),
        (Some(r), true) => {
            for (field, message) in r.problems() {
                v.err(&field, message);
            }
        }
        (None, false) => {}
    }
    let vpn = s.topology.kind == TopologyKind::Vpn;
    match (&s.tunnel, vpn) {
        (None, true) => v.err(
            "tunnel",
            "topology.kind = \"vpn\" needs a [tunnel] section (peers, loads_pps)",
        ),
        (Some(_), false) => v.err(
            "tunnel",
            "[tunnel] is the vpn topology's workload: set topology.kind = \"vpn\" or remove it",
        ),
        (Some(t), true) => {
            for (field, message) in t.problems() {
                v.err(&field, message);
            }
        }
        (None, false) => {}
    }
    if (server || vpn) && !s.traffic.classes.is_empty() {
        v.err(
            "traffic.classes",
            format!(
                "the {} topology's load is [{}]: remove the packet classes",
                s.topology.kind.as_str(),
                if server { "requests" } else { "tunnel" }
            ),
        );
    }
    if !server {
        let patches = std::iter::once(("dut".to_string(), &s.dut))
            .chain(
                s.configurations
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (format!("configurations[{i}].set"), &c.set)),
            )
            .chain(s.axes.iter().enumerate().flat_map(|(i, a)| {
                a.values
                    .iter()
                    .enumerate()
                    .map(move |(j, c)| (format!("axes[{i}].values[{j}].set"), &c.set))
            }));
        for (at, p) in patches {
            for (name, set) in [
                ("mode", p.mode.is_some()),
                ("server", p.server.is_some()),
                ("server_cpus", p.server_cpus.is_some() && !vpn),
            ] {
                if set {
                    v.err(
                        &format!("{at}.{name}"),
                        format!("{name} is a server-topology setting: set topology.kind = \"server\" or remove it"),
                    );
                }
            }
        }
    }
}

fn check_patch(p: &DutPatch, at: &str, v: &mut Validator<'_>, host_cpus: Option<u32>) {
    let cpus = [
        ("napi_cpus", &p.napi_cpus),
        ("rps_cpus", &p.rps_cpus),
        ("generator_cpus", &p.generator_cpus),
        ("sink_cpus", &p.sink_cpus),
        ("server_cpus", &p.server_cpus),
    ];
    for (name, list) in cpus {
        let Some(list) = list else { continue };
        if matches!(name, "generator_cpus" | "sink_cpus" | "server_cpus") && list.is_empty() {
            v.err(&format!("{at}.{name}"), "give at least one CPU");
        }
        if let Some(n) = host_cpus {
            for c in list {
                if *c >= n {
                    v.err(
                        &format!("{at}.{name}"),
                        format!(
                            "CPU {c} does not exist: this host has CPUs 0 to {}",
                            n.saturating_sub(1)
                        ),
                    );
                }
            }
        }
        if host_cpus.is_none() && list.iter().any(|c| *c >= 1024) {
            v.err(&format!("{at}.{name}"), "CPU numbers must be below 1024");
        }
    }
    if let Some(n) = p.napi_instances {
        if n == 0 || n > MAX_VETH_QUEUES {
            v.err(
                &format!("{at}.napi_instances"),
                format!("{n} is out of range: use 1 to {MAX_VETH_QUEUES} (the kernel refuses more queues on one device)"),
            );
        }
    }
    if let Some(f) = &p.napi_fifo {
        if f.iter().any(|x| *x > 99) {
            v.err(
                &format!("{at}.napi_fifo"),
                "SCHED_FIFO priorities are 1 to 99 (0: SCHED_OTHER)",
            );
        }
    }
    if let Some(n) = p.defer_hard_irqs {
        if n > i32::MAX as u32 {
            v.err(
                &format!("{at}.defer_hard_irqs"),
                format!(
                    "{n} is out of range: use 0 to {} (the kernel's limit)",
                    i32::MAX
                ),
            );
        }
    }
    if let Some(ns) = p.gro_flush_timeout_ns {
        if ns > 1_000_000_000 {
            v.err(
                &format!("{at}.gro_flush_timeout_ns"),
                format!("{ns} is out of range: use 0 to 1000000000 ns (0: off)"),
            );
        }
    }
    if let Some(b) = p.netdev_budget {
        if b == 0 || b > 100_000 {
            v.err(
                &format!("{at}.netdev_budget"),
                format!("{b} is out of range: use 1 to 100000 (kernel default 300)"),
            );
        }
    }
    if let Some(b) = p.netdev_budget_usecs {
        if b == 0 || b > 1_000_000 {
            v.err(
                &format!("{at}.netdev_budget_usecs"),
                format!("{b} is out of range: use 1 to 1000000 (kernel default 2 jiffies)"),
            );
        }
    }
    if let Some(q) = &p.qdisc {
        let f = |x: &str| format!("{at}.qdisc.{x}");
        let needs_rate = matches!(q.kind, QdiscKind::Htb | QdiscKind::Tbf);
        match q.rate_mbit {
            Some(r) if !(0.01..=100_000.0).contains(&r) => v.err(
                &f("rate_mbit"),
                format!("{r} is out of range: use 0.01 to 100000 Mbit/s"),
            ),
            None if needs_rate => v.err(&f("kind"), "htb and tbf need rate_mbit"),
            Some(_) if !needs_rate => v.err(&f("rate_mbit"), "only htb and tbf take a rate"),
            _ => {}
        }
        if let Some(l) = q.limit {
            if !matches!(q.kind, QdiscKind::Pfifo | QdiscKind::Htb) {
                v.err(&f("limit"), "only pfifo and htb (its leaf pfifo) take a limit; tbf's limit comes from latency_ms");
            } else if l == 0 || l > 1_000_000 {
                v.err(
                    &f("limit"),
                    format!("{l} is out of range: use 1 to 1000000 packets"),
                );
            }
        }
        if q.latency_ms.is_some() && q.kind != QdiscKind::Tbf {
            v.err(&f("latency_ms"), "only tbf takes latency_ms");
        }
        if let Some(l) = q.latency_ms {
            if !(0.01..=10_000.0).contains(&l) {
                v.err(
                    &f("latency_ms"),
                    format!("{l} is out of range: use 0.01 to 10000 ms"),
                );
            }
        }
        if q.burst_bytes.is_some() && !needs_rate {
            v.err(&f("burst_bytes"), "only htb and tbf take burst_bytes");
        }
        if let Some(b) = q.burst_bytes {
            if !(1600..=100_000_000).contains(&b) {
                v.err(
                    &f("burst_bytes"),
                    format!("{b} is out of range: use 1600 (one MTU-sized frame) to 100000000"),
                );
            }
        }
    }
}

impl Scenario {
    /// The configurations to run, in order: explicit ones, then the axes' product;
    /// a single `baseline` when there are neither.
    pub fn configurations(&self) -> Vec<Configuration> {
        expand_with_origin(self).0
    }

    /// The offered loads of the sweep, packets per second, in order.
    pub fn loads(&self) -> Vec<f64> {
        let mut out = self.traffic.loads_pps.clone();
        if let Some(sw) = &self.traffic.sweep {
            let n = sw.steps.max(1);
            for i in 0..n {
                let x = if n == 1 {
                    0.0
                } else {
                    f64::from(i) / f64::from(n - 1)
                };
                let v = if sw.log {
                    sw.from_pps * (sw.to_pps / sw.from_pps).powf(x)
                } else {
                    sw.from_pps + (sw.to_pps - sw.from_pps) * x
                };
                out.push(v.round());
            }
        }
        out
    }
}

/// The configurations and, for each, the field its errors point at.
fn expand_with_origin(s: &Scenario) -> (Vec<Configuration>, Vec<String>) {
    let mut out = Vec::new();
    let mut origin = Vec::new();
    for (i, c) in s.configurations.iter().enumerate() {
        out.push(Configuration {
            name: c.name.clone(),
            settings: s.dut.overlay(&c.set).resolve(),
            overrides: c.set.pairs(),
        });
        origin.push(format!("configurations[{i}]"));
    }
    let axes: Vec<&Axis> = s.axes.iter().filter(|a| !a.values.is_empty()).collect();
    if !axes.is_empty() {
        let mut idx = vec![0usize; axes.len()];
        loop {
            let mut patch = DutPatch::default();
            let mut names = Vec::new();
            for (a, &j) in axes.iter().zip(&idx) {
                patch = patch.overlay(&a.values[j].set);
                names.push(a.values[j].name.clone());
            }
            out.push(Configuration {
                name: names.join("/"),
                settings: s.dut.overlay(&patch).resolve(),
                overrides: patch.pairs(),
            });
            origin.push("axes".into());
            // Odometer: the last axis varies fastest.
            let mut k = axes.len();
            loop {
                if k == 0 {
                    return (out, origin);
                }
                k -= 1;
                idx[k] += 1;
                if idx[k] < axes[k].values.len() {
                    break;
                }
                idx[k] = 0;
            }
        }
    }
    if out.is_empty() {
        out.push(Configuration {
            name: "baseline".into(),
            settings: s.dut.resolve(),
            overrides: Vec::new(),
        });
        origin.push("dut".into());
    }
    (out, origin)
}

/// 1-based line of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// Finds the spans of fields (`traffic.classes[0].size`) in the document.
struct Locator<'a> {
    doc: Option<toml::Spanned<toml::de::DeTable<'a>>>,
}

impl<'a> Locator<'a> {
    fn new(text: &'a str) -> Self {
        Locator {
            doc: toml::de::DeTable::parse(text).ok(),
        }
    }

    /// The span of the value at `path` (or of its nearest existing parent).
    fn span_of(&self, path: &str) -> Option<Range<usize>> {
        let doc = self.doc.as_ref()?;
        let mut best: Option<Range<usize>> = None;
        let mut table: Option<&toml::de::DeTable<'_>> = Some(doc.get_ref());
        let mut value: Option<&toml::Spanned<toml::de::DeValue<'_>>> = None;
        for part in split_path(path) {
            match part {
                PathPart::Key(k) => {
                    let t = match (table, value) {
                        (Some(t), None) => t,
                        (_, Some(v)) => match v.get_ref() {
                            toml::de::DeValue::Table(t) => t,
                            _ => return best,
                        },
                        _ => return best,
                    };
                    let hit = t.iter().find(|(key, _)| key.get_ref().as_ref() == k);
                    let Some((key, v)) = hit else { return best };
                    best = Some(key.span());
                    table = None;
                    value = Some(v);
                }
                PathPart::Index(i) => {
                    let Some(v) = value else { return best };
                    let toml::de::DeValue::Array(a) = v.get_ref() else {
                        return best;
                    };
                    let Some(item) = a.get(i) else { return best };
                    best = Some(item.span());
                    value = Some(item);
                }
            }
        }
        best
    }

    /// The dotted path of the entry an offset belongs to: the key or array item that
    /// starts last at or before it (table values' spans cover only their headers).
    fn path_at(&self, offset: usize) -> Option<String> {
        let doc = self.doc.as_ref()?;
        let mut all = Vec::new();
        collect_table(doc.get_ref(), "", &mut all);
        all.into_iter()
            .filter(|(_, start)| *start <= offset)
            .max_by_key(|(path, start)| (*start, path.len()))
            .map(|(path, _)| path)
    }
}

/// Every key and array item with the offset where it starts.
fn collect_table(t: &toml::de::DeTable<'_>, prefix: &str, out: &mut Vec<(String, usize)>) {
    for (k, v) in t.iter() {
        let path = if prefix.is_empty() {
            k.get_ref().to_string()
        } else {
            format!("{prefix}.{}", k.get_ref())
        };
        out.push((path.clone(), k.span().start.min(v.span().start)));
        collect_value(v, &path, out);
    }
}

fn collect_value(
    v: &toml::Spanned<toml::de::DeValue<'_>>,
    path: &str,
    out: &mut Vec<(String, usize)>,
) {
    match v.get_ref() {
        toml::de::DeValue::Table(t) => collect_table(t, path, out),
        toml::de::DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                let p = format!("{path}[{i}]");
                out.push((p.clone(), item.span().start));
                collect_value(item, &p, out);
            }
        }
        _ => {}
    }
}

enum PathPart<'p> {
    Key(&'p str),
    Index(usize),
}

fn split_path(path: &str) -> Vec<PathPart<'_>> {
    let mut out = Vec::new();
    for seg in path.split('.') {
        let mut rest = seg;
        if let Some(b) = rest.find('[') {
            out.push(PathPart::Key(&rest[..b]));
            rest = &rest[b..];
            while let Some(stripped) = rest.strip_prefix('[') {
                let Some(e) = stripped.find(']') else { break };
                if let Ok(i) = stripped[..e].parse() {
                    out.push(PathPart::Index(i));
                }
                rest = &stripped[e + 1..];
            }
        } else {
            out.push(PathPart::Key(rest));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINI: &str = r#"
name = "mini"
[traffic]
loads_pps = [1000]
[[traffic.classes]]
name = "be"
share = 1.0
size = 64
port = 9000
"#;

    #[test]
    fn default_scenario_parses_and_expands() {
        let s = parse(DEFAULT_SCENARIO, DEFAULT_SCENARIO_NAME, Some(2)).expect("default scenario");
        let c = s.configurations();
        assert!(c.len() >= 2, "{c:?}");
        assert!(c.iter().any(|c| c.settings.napi == NapiContext::Threaded));
        assert!(c.iter().any(|c| c.settings.napi == NapiContext::Softirq));
        assert!(s.measurement.search);
        assert!(!s.loads().is_empty());
        // Latency from the paced sweep, the maximum from the line-rate engine.
        assert_eq!(s.traffic.backend, Backend::Paced);
        assert_eq!(s.measurement.search_backend, Some(Backend::LineRate));
    }

    #[test]
    fn search_backend_is_optional_and_checked() {
        let s = parse(MINI, "mini.toml", None).expect("mini");
        assert_eq!(s.measurement.search_backend, None);
        let bad = format!("{MINI}\n[measurement]\nsearch_backend = \"dpdk\"\n");
        let e = parse(&bad, "x.toml", None).expect_err("dpdk");
        assert_eq!(e.0[0].field, "measurement.search_backend");
        assert!(
            e.0[0].message.contains("paced") && e.0[0].message.contains("line-rate"),
            "{e}"
        );
    }

    #[test]
    fn the_many_napi_scenario_parses_and_its_bad_fields_are_named() {
        let text = include_str!("../../../scenarios/many-napi.toml");
        let s = parse(text, "scenarios/many-napi.toml", Some(2)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.topology.kind, TopologyKind::ManyNapi);
        let configs = s.configurations();
        assert_eq!(configs.len(), 12);
        let instances: std::collections::BTreeSet<u32> =
            configs.iter().map(|c| c.settings.napi_instances).collect();
        assert_eq!(
            instances.into_iter().collect::<Vec<_>>(),
            [1, 10, 100, 1000]
        );
        assert!(configs
            .iter()
            .any(|c| c.settings.napi == NapiContext::Threaded && c.settings.napi_cpus == [1]));
        let many = MINI.replace("[traffic]", "[topology]\nkind = \"many-napi\"\n[traffic]");
        let first_error = |text: &str| {
            let e = parse(text, "m.toml", Some(2)).expect_err(text);
            (e.0[0].field.clone(), e.0[0].message.clone())
        };
        // Beyond the kernel's queue limit.
        let (field, message) = first_error(&format!("{many}[dut]\nnapi_instances = 5000\n"));
        assert_eq!(field, "dut.napi_instances");
        assert!(message.contains("4096"), "{message}");
        assert_eq!(
            first_error(&format!("{many}[dut]\nnapi_instances = 0\n")).0,
            "dut.napi_instances"
        );
        // The line-rate engine cannot spread flows over the queues.
        assert_eq!(
            first_error(&many.replace("[traffic]", "[traffic]\nbackend = \"line-rate\"")).0,
            "traffic.backend"
        );
        // No NAPI instances without GRO on veth.
        let (field, message) = first_error(&format!("{many}[dut]\ngro = false\n"));
        assert_eq!(field, "dut");
        assert!(message.contains("gro = true"), "{message}");
        // napi_instances belongs to many-napi only.
        let (field, message) = first_error(&format!(
            "{MINI}[[configurations]]\nname = \"a\"\nset = {{ napi_instances = 8 }}\n"
        ));
        assert_eq!(field, "configurations[0]");
        assert!(message.contains("many-napi"), "{message}");
        let ok = parse(
            &format!("{many}[dut]\nnapi_instances = 4096\n"),
            "m.toml",
            Some(2),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.configurations()[0].settings.napi_instances, 4096);
    }

    const SERVER: &str =
        "name = \"s\"\n[topology]\nkind = \"server\"\n[requests]\nloads_qps = [1000]\n";

    #[test]
    fn a_server_scenario_names_its_bad_fields() {
        let ok = parse(
            &format!("{SERVER}[[configurations]]\nname = \"a\"\nset = {{ mode = \"irq-suspend\", server = \"memcached\" }}\n"),
            "s.toml",
            Some(2),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let c = &ok.configurations()[0];
        assert_eq!(c.settings.mode, ServerMode::IrqSuspend);
        assert_eq!(c.settings.server, ServerEngine::Memcached);
        let field_of = |text: &str| {
            parse(text, "s.toml", Some(2)).expect_err(text).0[0]
                .field
                .clone()
        };
        assert_eq!(
            field_of(&format!(
                "{SERVER}[[configurations]]\nname = \"a\"\nset = {{ mode = \"coalescing\" }}\n"
            )),
            "configurations[0].set.mode"
        );
        assert_eq!(
            field_of(&SERVER.replace("[1000]", "[1000]\nslo_p99_us = \"500us\"")),
            "requests.slo_p99_us"
        );
        assert_eq!(
            field_of("name = \"s\"\n[topology]\nkind = \"server\"\n"),
            "requests"
        );
        assert_eq!(
            field_of(&format!("{SERVER}[dut]\nserver_cpus = [7]\n")),
            "dut.server_cpus"
        );
        // Server settings in a packet scenario are refused, not ignored.
        let router = "name = \"r\"\n[dut]\nmode = \"busy-wait\"\n[traffic]\nloads_pps = [1000]\n[[traffic.classes]]\nname = \"be\"\nshare = 1.0\nsize = 64\nport = 9000\n";
        assert_eq!(field_of(router), "dut.mode");
    }

    #[test]
    fn example_scenarios_parse() {
        for (name, text) in [
            ("ap.toml", include_str!("../../../scenarios/ap.toml")),
            (
                "ingress-qos.toml",
                include_str!("../../../scenarios/ingress-qos.toml"),
            ),
            (
                "bench-paced.toml",
                include_str!("../../../scenarios/bench-paced.toml"),
            ),
            (
                "bench-repeat.toml",
                include_str!("../../../scenarios/bench-repeat.toml"),
            ),
            (
                "server-modes.toml",
                include_str!("../../../scenarios/server-modes.toml"),
            ),
            (
                "bench-server-modes.toml",
                include_str!("../../../scenarios/bench-server-modes.toml"),
            ),
        ] {
            if let Err(e) = parse(text, name, Some(2)) {
                panic!("{e}");
            }
        }
    }

    #[test]
    fn minimal_scenario_has_a_baseline() {
        let s = parse(MINI, "mini.toml", None).expect("mini");
        let c = s.configurations();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].name, "baseline");
        assert_eq!(c[0].settings.napi, NapiContext::Softirq);
        assert!(c[0].settings.gro);
        assert_eq!(s.measurement.loss_threshold, 0.001);
    }

    #[test]
    fn trace_tier_defaults_off_and_parses_each_tier() {
        let s = parse(MINI, "mini.toml", None).expect("mini");
        assert_eq!(s.measurement.trace, TraceTier::Off);
        assert!(s.measurement.trace.observe_flags().is_empty());
        let with = |tier: &str| format!("{MINI}\n[measurement]\ntrace = \"{tier}\"\n");
        let stages = parse(&with("stages"), "t.toml", None).expect("stages");
        assert_eq!(
            stages.measurement.trace.observe_flags(),
            ["--trace", "--stages"]
        );
        let e = parse(&with("everything"), "t.toml", None).expect_err("unknown tier");
        assert_eq!(e.0[0].field, "measurement.trace", "{e}");
        assert!(e.to_string().contains("packets"), "{e}");
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let bad = MINI.replace("size = 64", "size = 20");
        let e = parse(&bad, "bad.toml", None).expect_err("size 20");
        let e0 = &e.0[0];
        assert_eq!(e0.field, "traffic.classes[0].size");
        assert_eq!(e0.line, Some(8));
        assert!(e0.message.contains("64 to 1500"), "{e0}");
        assert!(
            e.to_string()
                .starts_with("bad.toml:8: traffic.classes[0].size:"),
            "{e}"
        );
    }

    #[test]
    fn unknown_field_is_located() {
        let bad = MINI.replace("port = 9000", "port = 9000\ncolour = \"red\"");
        let e = parse(&bad, "bad.toml", None).expect_err("unknown field");
        let e0 = &e.0[0];
        assert_eq!(e0.line, Some(10), "{e0}");
        assert_eq!(e0.field, "traffic.classes[0].colour");
        assert!(e0.field.starts_with("traffic.classes"), "{e0}");
        assert!(e0.message.contains("colour"), "{e0}");
    }

    #[test]
    fn bad_enum_value_says_what_is_allowed() {
        let bad = MINI.replace("port = 9000", "port = 9000\npattern = \"bursty\"");
        let e = parse(&bad, "bad.toml", None).expect_err("bad pattern");
        assert!(
            e.0[0].message.contains("cbr") && e.0[0].message.contains("poisson"),
            "{e}"
        );
        assert_eq!(e.0[0].line, Some(10));
        assert_eq!(e.0[0].field, "traffic.classes[0].pattern");
    }

    #[test]
    fn cpus_are_checked_against_the_host() {
        let bad = format!("{MINI}\n[dut]\nnapi_cpus = [5]\n");
        let e = parse(&bad, "x.toml", Some(2)).expect_err("cpu 5");
        assert_eq!(e.0[0].field, "dut.napi_cpus");
        assert_eq!(e.0[0].line, Some(12));
        assert!(parse(&bad, "x.toml", Some(8)).is_ok());
    }

    #[test]
    fn interrupt_deferral_needs_its_timer() {
        let with =
            |set: &str| format!("{MINI}\n[[configurations]]\nname = \"d\"\nset = {{ {set} }}\n");
        let e = parse(&with("defer_hard_irqs = 2"), "d.toml", None).expect_err("no timer");
        assert!(e.to_string().contains("gro_flush_timeout_ns"), "{e}");
        let ok = parse(
            &with("defer_hard_irqs = 2, gro_flush_timeout_ns = 20000"),
            "d.toml",
            None,
        )
        .expect("deferral with its timer");
        let r = &ok.configurations()[0].settings;
        assert_eq!((r.defer_hard_irqs, r.gro_flush_timeout_ns), (2, 20_000));
        let e = parse(&with("gro_flush_timeout_ns = 5000000000"), "d.toml", None).expect_err("5 s");
        assert_eq!(
            e.0[0].field, "configurations[0].set.gro_flush_timeout_ns",
            "{e}"
        );
    }

    #[test]
    fn threaded_without_gro_is_refused() {
        let bad = format!(
            "{MINI}\n[[configurations]]\nname = \"t\"\nset = {{ napi = \"threaded\", gro = false }}\n"
        );
        let e = parse(&bad, "x.toml", None).expect_err("threaded without gro");
        assert_eq!(e.0[0].field, "configurations[0]");
        assert_eq!(e.0[0].line, Some(11));
        assert!(e.0[0].message.contains("gro = true"));
    }

    #[test]
    fn queues_need_a_generator_cpu_each() {
        let text = MINI.replace("port = 9000", "port = 9000\nqueue = 1")
            + "\n[topology]\ningress_queues = 2\n";
        let e = parse(&text, "x.toml", None).expect_err("one generator cpu for two queues");
        assert!(e.0[0].message.contains("2 generator_cpus"), "{e}");
        let ok = text.clone() + "\n[dut]\ngenerator_cpus = [0, 1]\n";
        parse(&ok, "x.toml", None).expect("two cpus");
        let bad = MINI.replace("port = 9000", "port = 9000\nqueue = 3");
        let e = parse(&bad, "x.toml", None).expect_err("queue 3 of 1");
        assert_eq!(e.0[0].field, "traffic.classes[0].queue");
    }

    #[test]
    fn shares_must_add_up() {
        let bad = MINI.replace("share = 1.0", "share = 0.5");
        let e = parse(&bad, "x.toml", None).expect_err("shares");
        assert_eq!(e.0[0].field, "traffic.classes");
    }

    #[test]
    fn axes_make_a_product_and_overlay_the_baseline() {
        let text = format!(
            "{MINI}\n[dut]\nsink_cpus = [1]\n\n[[axes]]\nname = \"placement\"\nvalues = [{{ name = \"a\", set = {{ napi_cpus = [0] }} }}, {{ name = \"b\", set = {{ napi_cpus = [1] }} }}]\n\n[[axes]]\nname = \"napi\"\nvalues = [{{ name = \"softirq\", set = {{ napi = \"softirq\" }} }}, {{ name = \"threaded\", set = {{ napi = \"threaded\" }} }}]\n"
        );
        let s = parse(&text, "x.toml", Some(2)).expect("axes");
        let c = s.configurations();
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["a/softirq", "a/threaded", "b/softirq", "b/threaded"]
        );
        assert_eq!(c[3].settings.napi_cpus, [1]);
        assert_eq!(c[3].settings.napi, NapiContext::Threaded);
        assert_eq!(c[3].settings.sink_cpus, [1]);
        assert!(c[3].overrides.contains(&("napi".into(), "threaded".into())));
    }

    #[test]
    fn sweep_is_linear_or_geometric() {
        let text = MINI.replace(
            "loads_pps = [1000]",
            "sweep = { from_pps = 1000, to_pps = 100000, steps = 3, log = true }",
        );
        let s = parse(&text, "x.toml", None).expect("sweep");
        assert_eq!(s.loads(), [1000.0, 10000.0, 100000.0]);
        let text = MINI.replace(
            "loads_pps = [1000]",
            "sweep = { from_pps = 1000, to_pps = 3000, steps = 3 }",
        );
        let s = parse(&text, "x.toml", None).expect("sweep");
        assert_eq!(s.loads(), [1000.0, 2000.0, 3000.0]);
    }

    #[test]
    fn qdisc_arguments() {
        let q = Qdisc {
            kind: QdiscKind::Tbf,
            limit: None,
            rate_mbit: Some(10.0),
            burst_bytes: Some(3000),
            latency_ms: Some(5.0),
        };
        assert_eq!(
            q.tc_args().join(" "),
            "tbf rate 10000kbit burst 3000 latency 5000us"
        );
        let bad = format!("{MINI}\n[dut]\nqdisc = {{ kind = \"tbf\" }}\n");
        let e = parse(&bad, "x.toml", None).expect_err("tbf without rate");
        assert_eq!(e.0[0].field, "dut.qdisc.kind");
    }
}
