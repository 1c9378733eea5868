//! The request workload of the `server` topology (the interrupt-mode study,
//! docs/studies.md IRQS-1): which server answers, in which interrupt mode, under which
//! offered request rates, and the latency objective its maximum is searched against.
//! The lab (crates/napilab-lab, `server` topology) runs it; the scenario names it in
//! `[requests]` and each configuration's `mode` and `server`.

use serde::{Deserialize, Serialize};

/// The study's five interrupt modes as they map onto veth (docs/lab.md, "The server
/// topology"). Each is applied through the napilab-tune profile of the same name
/// plus the server's epoll parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerMode {
    /// Per-NAPI defer 0, gro-flush 0, suspend 0: every packet re-arms the interrupt.
    #[default]
    NoCoalescing,
    /// defer-hard-irqs + gro-flush-timeout: the software stand-in for NIC coalescing.
    Deferral,
    /// The application busy-polls with prefer-busy-poll and non-blocking epoll.
    BusyWait,
    /// IRQ suspension: blocking epoll with prefer-busy-poll and irq-suspend-timeout.
    IrqSuspend,
    /// NAPI kthreads (threaded NAPI), blocking epoll.
    Threaded,
    /// Threaded busy polling (Linux 6.19+, netdev napi-set threaded=busy-poll): the
    /// NAPI kthread polls continuously with the IRQ masked; blocking epoll. Not one of
    /// the study's modes; refused by the lab on older kernels.
    ThreadedBusyPoll,
}

impl ServerMode {
    pub const ALL: [ServerMode; 6] = [
        ServerMode::NoCoalescing,
        ServerMode::Deferral,
        ServerMode::BusyWait,
        ServerMode::IrqSuspend,
        ServerMode::Threaded,
        ServerMode::ThreadedBusyPoll,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ServerMode::NoCoalescing => "no-coalescing",
            ServerMode::Deferral => "deferral",
            ServerMode::BusyWait => "busy-wait",
            ServerMode::IrqSuspend => "irq-suspend",
            ServerMode::Threaded => "threaded",
            ServerMode::ThreadedBusyPoll => "threaded-busy-poll",
        }
    }

    /// Whether the mode needs the application's per-epoll busy-poll parameters
    /// (`EPIOCSPARAMS`, Linux 6.9+), which memcached does not set.
    /// Whether the mode's NAPI instances are polled by kthreads (placed on the
    /// server's CPUs).
    pub fn threaded(self) -> bool {
        matches!(self, ServerMode::Threaded | ServerMode::ThreadedBusyPoll)
    }

    pub fn needs_epoll_params(self) -> bool {
        matches!(self, ServerMode::BusyWait | ServerMode::IrqSuspend)
    }
}

/// Which server answers the requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerEngine {
    /// napilab's own key-value server (`napilab kv-server`): one epoll instance per
    /// NAPI instance, per-epoll busy-poll parameters.
    #[default]
    Napilab,
    /// The distribution's memcached, unmodified: the modes without epoll parameters.
    Memcached,
}

impl ServerEngine {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerEngine::Napilab => "napilab",
            ServerEngine::Memcached => "memcached",
        }
    }
}

/// `[requests]`: the request load of a `server` scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestWorkload {
    /// Offered request rates of the sweep (open loop, Poisson arrivals), requests/s.
    #[serde(default)]
    pub loads_qps: Vec<f64>,
    /// Offered rates of the sweep as fractions of the configuration's measured capacity
    /// (the closed-loop probe that starts the configuration, [`CAPACITY_PROBE`]), e.g.
    /// `[0.1, 0.65]` for a light and a heavy load on any machine. Run after `loads_qps`.
    #[serde(default)]
    pub loads_of_capacity: Vec<f64>,
    /// Connections of the load generator (spread over its threads).
    #[serde(default = "d_connections")]
    pub connections: usize,
    /// Load generator threads (on `dut.generator_cpus`, one each, wrapping around).
    #[serde(default = "d_one")]
    pub client_threads: usize,
    /// Share of requests that are `get`s (the rest are `set`s); default the ETC
    /// workload's 30 gets per set.
    #[serde(default = "d_get_fraction")]
    pub get_fraction: f64,
    /// Preloaded keys.
    #[serde(default = "d_keys")]
    pub keys: u64,
    /// Value size, bytes.
    #[serde(default = "d_value_size")]
    pub value_size: usize,
    /// The latency objective: the search's answer is the highest offered rate whose
    /// p99 latency (from the intended send time) stays at or below it, microseconds.
    #[serde(default = "d_slo")]
    pub slo_p99_us: f64,
    /// Search each configuration's maximum rate at the objective.
    #[serde(default = "d_true")]
    pub search: bool,
    /// Upper end of the search, requests/s: a cap. Without it the search range comes
    /// from the capacity probe ([`SEARCH_TOP_OF_CAPACITY`] times its rate), and a search
    /// that meets the objective at the top of that range raises it instead of stopping
    /// there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_max_qps: Option<f64>,
    /// Bisection steps per search.
    #[serde(default = "d_search_iterations")]
    pub search_iterations: u32,
    /// Replies later than this after the window are timeouts, milliseconds.
    #[serde(default = "d_timeout")]
    pub timeout_ms: u64,
}

fn d_connections() -> usize {
    16
}
fn d_one() -> usize {
    1
}
/// ETC: 30 gets per set (docs/studies.md IRQS-1).
fn d_get_fraction() -> f64 {
    30.0 / 31.0
}
fn d_keys() -> u64 {
    100_000
}
fn d_value_size() -> usize {
    200
}
fn d_slo() -> f64 {
    500.0
}
fn d_true() -> bool {
    true
}
fn d_search_iterations() -> u32 {
    6
}
fn d_timeout() -> u64 {
    1000
}

impl Default for RequestWorkload {
    fn default() -> Self {
        RequestWorkload {
            loads_qps: Vec::new(),
            connections: d_connections(),
            client_threads: d_one(),
            get_fraction: d_get_fraction(),
            keys: d_keys(),
            value_size: d_value_size(),
            slo_p99_us: d_slo(),
            loads_of_capacity: Vec::new(),
            search: true,
            search_max_qps: None,
            search_iterations: d_search_iterations(),
            timeout_ms: d_timeout(),
        }
    }
}

/// How the capacity of a configuration is probed before its sweep and searches: a
/// closed loop (each connection keeps one request outstanding) for the measurement's
/// duration. Its reply rate is what the server answers with `connections` requests in
/// flight: a first estimate of the DUT, not its maximum at the latency objective (an
/// open loop with more in flight can exceed it, a tight objective stays below it).
pub const CAPACITY_PROBE: &str = "closed loop, one request outstanding per connection";

/// The top of a search range derived from the capacity probe, as a multiple of the
/// probe's rate: above the probe, since an open loop can batch more than a closed one.
pub const SEARCH_TOP_OF_CAPACITY: f64 = 1.5;

/// How many times a search that met the objective at the top of a derived range doubles
/// the range before it gives up (and says so): 24x the probe's rate at most.
pub const SEARCH_RAISES: u32 = 4;

impl RequestWorkload {
    /// Whether a configuration needs the capacity probe: loads given as fractions of it,
    /// or a search without a cap.
    pub fn needs_capacity_probe(&self) -> bool {
        !self.loads_of_capacity.is_empty() || (self.search && self.search_max_qps.is_none())
    }

    /// Every problem as (field under `requests.`, message).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut err = |f: &str, m: String| out.push((format!("requests.{f}"), m));
        for (i, q) in self.loads_qps.iter().enumerate() {
            if !(*q >= 1.0 && *q <= 10e6) {
                err(
                    &format!("loads_qps[{i}]"),
                    format!("{q} is out of range: use 1 to 10000000 requests/s"),
                );
            }
        }
        for (i, f) in self.loads_of_capacity.iter().enumerate() {
            if !(*f > 0.0 && *f <= 2.0) {
                err(
                    &format!("loads_of_capacity[{i}]"),
                    format!("{f} is out of range: give a fraction of the measured capacity in (0, 2], e.g. 0.65"),
                );
            }
        }
        if self.loads_qps.is_empty() && self.loads_of_capacity.is_empty() && !self.search {
            err(
                "loads_qps",
                "nothing to measure: give loads_qps, loads_of_capacity or search = true".into(),
            );
        }
        if self.client_threads == 0 || self.client_threads > 64 {
            err("client_threads", "use 1 to 64".into());
        }
        if self.connections < self.client_threads || self.connections > 4096 {
            err(
                "connections",
                format!(
                    "{} is out of range: use at least one per client thread ({}) and at most 4096",
                    self.connections, self.client_threads
                ),
            );
        }
        if !(0.0..=1.0).contains(&self.get_fraction) {
            err("get_fraction", "use a fraction in [0, 1]".into());
        }
        if self.keys == 0 || self.keys > 10_000_000 {
            err("keys", "use 1 to 10000000".into());
        }
        if self.value_size > 1 << 20 {
            err(
                "value_size",
                "use at most 1048576 bytes (the protocol's cap)".into(),
            );
        }
        if !(self.slo_p99_us >= 1.0 && self.slo_p99_us <= 60e6) {
            err(
                "slo_p99_us",
                format!(
                    "{} is not a usable latency: give microseconds, e.g. 500",
                    self.slo_p99_us
                ),
            );
        }
        if let Some(top) = self.search_max_qps {
            if !(10.0..=10e6).contains(&top) {
                err(
                    "search_max_qps",
                    "use 10 to 10000000 requests/s, or leave it out to search from the measured capacity".into(),
                );
            }
        }
        if self.search_iterations == 0 || self.search_iterations > 20 {
            err("search_iterations", "use 1 to 20".into());
        }
        if self.timeout_ms == 0 || self.timeout_ms > 60_000 {
            err("timeout_ms", "use 1 to 60000 ms".into());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_fields_are_named() {
        assert!(RequestWorkload {
            loads_qps: vec![1000.0],
            ..Default::default()
        }
        .problems()
        .is_empty());
        let bad = RequestWorkload {
            loads_qps: vec![0.0],
            slo_p99_us: -1.0,
            connections: 0,
            ..Default::default()
        };
        let fields: Vec<String> = bad.problems().into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            fields,
            [
                "requests.loads_qps[0]",
                "requests.connections",
                "requests.slo_p99_us"
            ]
        );
    }

    #[test]
    fn modes_round_trip_by_name() {
        for m in ServerMode::ALL {
            let text = format!("\"{}\"", m.as_str());
            let back: ServerMode = serde_json::from_str(&text).expect("mode name parses");
            assert_eq!(back, m);
        }
        assert!(serde_json::from_str::<ServerMode>("\"coalescing\"").is_err());
    }
}
