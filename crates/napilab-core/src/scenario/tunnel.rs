//! The load of the `vpn` topology (the WireGuard study, docs/studies.md#wireguard-study):
//! peers sending encrypted UDP datagrams to a tunnel endpoint in the DUT, which decrypts
//! them on worker threads and writes the inner packets into a multi-queue TUN device,
//! one queue (one NAPI instance) per peer. The lab (crates/napilab-lab, `vpn`
//! topology) runs it; the scenario names it in `[tunnel]`.

use serde::{Deserialize, Serialize};

/// TUN's queue limit (`MAX_TAP_QUEUES` in drivers/net/tun.c): one queue per peer; the
/// lab's limit (checked when the lab runs a scenario).
pub const MAX_PEERS: usize = 256;
/// The twin's limit: a NAPI instance per peer, as many as a large server has clients.
pub const MAX_TWIN_PEERS: usize = 100_000;

/// `[tunnel]`: the vpn scenario's peers and offered rates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelWorkload {
    /// Peers: each has its own TUN queue and NAPI instance; 1 to 256 in the lab (TUN's
    /// queues), up to 100000 on the twin.
    #[serde(default = "d_peers")]
    pub peers: usize,
    /// Offered datagrams per second (all peers), in this order.
    pub loads_pps: Vec<f64>,
    /// Inner UDP payload bytes (8 to 1400).
    #[serde(default = "d_payload")]
    pub payload_bytes: usize,
    /// Decryption workers (default: one per `dut.server_cpus` CPU, as WireGuard runs one
    /// per CPU).
    #[serde(default)]
    pub workers: Option<usize>,
    /// Arrivals of the peers' datagrams: `cbr` (the lab's peers) or `poisson` (the
    /// twin only).
    #[serde(default)]
    pub pattern: super::traffic::Pattern,
}

fn d_peers() -> usize {
    4
}
fn d_payload() -> usize {
    64
}

impl TunnelWorkload {
    /// Every problem as (field under `tunnel.`, message).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut err = |f: &str, m: String| out.push((format!("tunnel.{f}"), m));
        if self.peers == 0 || self.peers > MAX_TWIN_PEERS {
            err(
                "peers",
                format!(
                    "{} is out of range: use 1 to {MAX_PEERS} (one TUN queue per peer; TUN allows {MAX_PEERS} queues, MAX_TAP_QUEUES), or up to {MAX_TWIN_PEERS} on the twin",
                    self.peers
                ),
            );
        }
        if self.loads_pps.is_empty() {
            err("loads_pps", "give at least one offered rate".into());
        }
        for (i, l) in self.loads_pps.iter().enumerate() {
            if !(*l >= 1.0 && *l <= 10e6) {
                err(
                    &format!("loads_pps[{i}]"),
                    format!("{l} is out of range: use 1 to 10000000 datagrams/s"),
                );
            }
        }
        if !(8..=1400).contains(&self.payload_bytes) {
            err(
                "payload_bytes",
                format!(
                    "{} is out of range: use 8 to 1400 bytes",
                    self.payload_bytes
                ),
            );
        }
        if let Some(w) = self.workers {
            if w == 0 || w > 256 {
                err("workers", "use 1 to 256 decryption workers".into());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_limit_is_named() {
        let w = TunnelWorkload {
            peers: MAX_TWIN_PEERS + 1,
            loads_pps: vec![1000.0],
            payload_bytes: 64,
            workers: None,
            pattern: Default::default(),
        };
        let p = w.problems();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0, "tunnel.peers");
        assert!(p[0].1.contains("MAX_TAP_QUEUES"), "{}", p[0].1);
    }
}
