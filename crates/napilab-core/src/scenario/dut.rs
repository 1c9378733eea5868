//! The DUT's host settings: NAPI context, qdisc, the baseline `[dut]` and each
//! configuration's patch over it.

use super::*;

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

pub(super) fn on_off(b: bool) -> &'static str {
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
