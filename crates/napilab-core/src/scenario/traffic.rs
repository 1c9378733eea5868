//! The offered traffic: classes, patterns, back ends, the sweep.

use super::*;

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

/// A sweep of offered loads: `steps` loads from `from_pps` to `to_pps`, or `fractions`
/// of the capacity each configuration's probe measured (so that the loads fit the
/// machine the scenario runs on).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_pps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_pps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u32>,
    /// Geometric spacing instead of linear.
    #[serde(default)]
    pub log: bool,
    /// Loads as fractions of the configuration's probed capacity (the rate the DUT
    /// forwarded in the capacity probe), in this order, instead of from/to/steps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fractions: Vec<f64>,
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

pub(super) fn default_seed() -> u64 {
    1
}
