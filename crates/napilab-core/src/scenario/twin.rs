//! Settings of mechanisms only the twin (napilab-sim) models, and what the lab says
//! about configurations that use them.
//!
//! A configuration that needs one of these names why in `twin_only`; the lab refuses a
//! scenario with such a configuration (naming each one and its reason) instead of
//! running the rest silently, and `napilab sim run` runs all of them.

use super::*;

/// Where NAPI instances are polled, with the twin's extra context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TwinNapi {
    Softirq,
    Threaded,
    /// A work item on the per-CPU worker of the CPU that scheduled the instance: no
    /// stock kernel has it (the WireGuard study's remedy 2, docs/studies.md#wg-4).
    Workqueue,
    /// Threaded busy polling (Linux 6.19, netdev napi-set threaded=busy-poll): the
    /// kthread polls continuously with the IRQ masked. Twin-only on kernels before
    /// 6.19, such as the lab's 6.18.
    ThreadedBusyPoll,
}

impl TwinNapi {
    pub fn as_str(self) -> &'static str {
        match self {
            TwinNapi::Softirq => "softirq",
            TwinNapi::Threaded => "threaded",
            TwinNapi::Workqueue => "workqueue",
            TwinNapi::ThreadedBusyPoll => "threaded-busy-poll",
        }
    }
}

/// A configuration's twin-only settings (`twin = { ... }`); every field optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TwinPatch {
    /// Overrides `napi` in the twin (for `workqueue`, which the lab cannot set).
    #[serde(default)]
    pub napi: Option<TwinNapi>,
    /// The ingress queues become rings of ONE NAPI instance and one IRQ, served
    /// alternately with these per-ring budgets until the poll's weight is used (the
    /// ingress-QoS study's extended `ixgbe_poll`, docs/studies.md#ingress-qos-study
    /// IV-B); one budget per `topology.ingress_queues`.
    #[serde(default)]
    pub ring_budgets: Option<Vec<u32>>,
    /// The CPU every TX-completion IRQ of the egress device has its affinity on (a
    /// NIC's; veth has no TX completions). Absent: the transmitting CPU.
    #[serde(default)]
    pub tx_irq_cpu: Option<u32>,
}

impl TwinPatch {
    /// `self` with the fields `over` sets replaced.
    pub fn overlay(&self, over: &TwinPatch) -> TwinPatch {
        TwinPatch {
            napi: over.napi.or(self.napi),
            ring_budgets: over
                .ring_budgets
                .clone()
                .or_else(|| self.ring_budgets.clone()),
            tx_irq_cpu: over.tx_irq_cpu.or(self.tx_irq_cpu),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == TwinPatch::default()
    }

    /// The (setting, value) pairs it sets, prefixed `twin.`.
    pub fn pairs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(n) = self.napi {
            out.push(("twin.napi".into(), n.as_str().into()));
        }
        if let Some(b) = &self.ring_budgets {
            out.push(("twin.ring_budgets".into(), cpu_list(b)));
        }
        if let Some(c) = self.tx_irq_cpu {
            out.push(("twin.tx_irq_cpu".into(), c.to_string()));
        }
        out
    }
}

/// Each configuration the lab cannot run, with why (its `twin_only`).
pub fn twin_only_configurations(s: &Scenario) -> Vec<(String, String)> {
    s.configurations()
        .into_iter()
        .filter_map(|c| c.twin_only.map(|why| (c.name, why)))
        .collect()
}

/// Checks of the twin-only parts: a `twin` patch needs its `twin_only` reason; with
/// `host_cpus` (the scenario is about to run on this host, in the lab) a scenario with a
/// twin-only configuration, or a load only the twin can offer, is refused.
pub(super) fn check_twin(s: &Scenario, v: &mut Validator<'_>, host_cpus: Option<u32>) {
    let specs = s
        .configurations
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("configurations[{i}]"), c))
        .chain(s.axes.iter().enumerate().flat_map(|(i, a)| {
            a.values
                .iter()
                .enumerate()
                .map(move |(j, c)| (format!("axes[{i}].values[{j}]"), c))
        }));
    for (at, c) in specs {
        if !c.twin.is_empty() && c.twin_only.as_deref().is_none_or(|w| w.trim().is_empty()) {
            v.err(
                &format!("{at}.twin"),
                format!("configuration {:?} sets twin-only mechanisms: say why the lab cannot run it in twin_only = \"...\"", c.name),
            );
        }
        if let Some(b) = &c.twin.ring_budgets {
            if b.len() as u32 != s.topology.ingress_queues || b.contains(&0) {
                v.err(
                    &format!("{at}.twin.ring_budgets"),
                    format!(
                        "give one positive budget per ingress queue ({} queues, topology.ingress_queues)",
                        s.topology.ingress_queues
                    ),
                );
            }
        }
    }
    if host_cpus.is_none() {
        return;
    }
    let twin_only = twin_only_configurations(s);
    if !twin_only.is_empty() {
        let list = twin_only
            .iter()
            .map(|(n, why)| format!("{n:?} ({why})"))
            .collect::<Vec<_>>()
            .join("; ");
        v.err(
            "configurations",
            format!("the lab cannot run configuration(s) {list}: only the twin models them. Run the whole scenario on the twin (napilab sim run FILE), or remove the twin-only configuration(s) from a copy of the file to run the rest in the lab"),
        );
    }
    if let Some(t) = &s.tunnel {
        if t.peers > super::tunnel::MAX_PEERS {
            v.err(
                "tunnel.peers",
                format!(
                    "{} peers: the lab's TUN device allows {} queues (MAX_TAP_QUEUES), one per peer; only the twin runs more (napilab sim run FILE)",
                    t.peers,
                    super::tunnel::MAX_PEERS
                ),
            );
        }
        if t.pattern == Pattern::Poisson {
            v.err(
                "tunnel.pattern",
                "the lab's peers send at a constant rate; Poisson arrivals are the twin's only (napilab sim run FILE), or remove pattern",
            );
        }
    }
    if s.measurement.duration_s < LAB_MIN_DURATION_S {
        v.err(
            "measurement.duration_s",
            format!(
                "{} s is too short for the lab: use {LAB_MIN_DURATION_S} to 3600 s (shorter windows are the twin's only)",
                s.measurement.duration_s
            ),
        );
    }
}

/// The shortest measured window the lab accepts: below it a point's counters hold too
/// few samples of the real kernel (the twin has no such noise, down to 1 ms).
pub const LAB_MIN_DURATION_S: f64 = 0.2;
