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

mod dut;
mod locate;
mod measurement;
#[cfg(test)]
mod tests;
mod traffic;
mod tunnel;
mod twin;
mod validate;

pub use dut::*;
pub use locate::*;
pub use measurement::*;
pub use traffic::*;
pub use twin::*;
pub use validate::*;

pub use crate::requests::{RequestWorkload, ServerEngine, ServerMode};
pub use tunnel::TunnelWorkload;

/// The built-in scenario (`napilab lab run` without a file).
pub const DEFAULT_SCENARIO: &str = include_str!("../../../../scenarios/default.toml");
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
    /// The twin's side (`napilab sim run`): the hardware profile the scenario was
    /// written for.
    #[serde(default)]
    pub twin: TwinSection,
}

/// `[twin]`: what `napilab sim run` uses when the command line does not say.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TwinSection {
    /// The hardware profile (a shipped name, crates/napilab-sim/profiles/) the
    /// scenario describes; `--profile` overrides it. Absent: the veth lab's profile.
    #[serde(default)]
    pub profile: Option<String>,
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

pub(super) fn one() -> u32 {
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigurationSpec {
    pub name: String,
    #[serde(default)]
    pub set: DutPatch,
    /// Why only the twin can run this configuration (a mechanism no stock kernel or
    /// no veth lab has); the lab refuses the scenario and says so. Required when
    /// `twin` sets anything.
    #[serde(default)]
    pub twin_only: Option<String>,
    /// Settings of mechanisms only the twin models.
    #[serde(default)]
    pub twin: TwinPatch,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Axis {
    pub name: String,
    pub values: Vec<ConfigurationSpec>,
}

/// One configuration to run: a name, the resolved settings and what it changed.
#[derive(Clone, Debug, PartialEq)]
pub struct Configuration {
    pub name: String,
    pub settings: DutSettings,
    /// The settings the configuration (or its axis values) set over the baseline.
    pub overrides: Vec<(String, String)>,
    /// Why only the twin can run it (see [`ConfigurationSpec::twin_only`]).
    pub twin_only: Option<String>,
    /// Its twin-only settings.
    pub twin: TwinPatch,
}

impl Scenario {
    /// The configurations to run, in order: explicit ones, then the axes' product;
    /// a single `baseline` when there are neither.
    pub fn configurations(&self) -> Vec<Configuration> {
        expand_with_origin(self).0
    }

    /// The offered loads of the sweep given in packets per second, in order (a sweep
    /// of fractions adds [`Scenario::load_fractions`] after them).
    pub fn loads(&self) -> Vec<f64> {
        let mut out = self.traffic.loads_pps.clone();
        if let Some(Sweep {
            from_pps: Some(from),
            to_pps: Some(to),
            steps: Some(steps),
            log,
            ..
        }) = &self.traffic.sweep
        {
            let n = (*steps).max(1);
            for i in 0..n {
                let x = if n == 1 {
                    0.0
                } else {
                    f64::from(i) / f64::from(n - 1)
                };
                let v = if *log {
                    from * (to / from).powf(x)
                } else {
                    from + (to - from) * x
                };
                out.push(v.round());
            }
        }
        out
    }

    /// The sweep's loads given as fractions of each configuration's probed capacity,
    /// in order; measured after [`Scenario::loads`].
    pub fn load_fractions(&self) -> Vec<f64> {
        self.traffic
            .sweep
            .as_ref()
            .map(|sw| sw.fractions.clone())
            .unwrap_or_default()
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
            twin_only: c.twin_only.clone(),
            twin: c.twin.clone(),
        });
        origin.push(format!("configurations[{i}]"));
    }
    let axes: Vec<&Axis> = s.axes.iter().filter(|a| !a.values.is_empty()).collect();
    if !axes.is_empty() {
        let mut idx = vec![0usize; axes.len()];
        loop {
            let mut patch = DutPatch::default();
            let mut twin = TwinPatch::default();
            let mut twin_only = None;
            let mut names = Vec::new();
            for (a, &j) in axes.iter().zip(&idx) {
                let v = &a.values[j];
                patch = patch.overlay(&v.set);
                twin = twin.overlay(&v.twin);
                twin_only = twin_only.or_else(|| v.twin_only.clone());
                names.push(v.name.clone());
            }
            out.push(Configuration {
                name: names.join("/"),
                settings: s.dut.overlay(&patch).resolve(),
                overrides: patch.pairs(),
                twin_only,
                twin,
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
            twin_only: None,
            twin: TwinPatch::default(),
        });
        origin.push("dut".into());
    }
    (out, origin)
}
