//! The WireGuard study's server in the twin (docs/studies.md#wireguard-study; docs/sim.md
//! "The WireGuard receive pipeline"): its configurations at any client count and NAPI
//! context, and the figures the study reports, read from a run.

use crate::config::{NapiContext, SimConfig};
use crate::output::SimResult;

/// The study's scenario (its configuration `softirq` is the baseline).
pub const SCENARIO: &str = crate::studies::WIREGUARD;

/// Packets per second one client sends: 25 Mbit/s of 1,500-byte frames.
pub const CLIENT_PPS: f64 = 25e6 / (1500.0 * 8.0);

/// Where the peers' NAPI instances are polled, as the study's configurations name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// Stock: NET_RX softirq on the CPU whose worker scheduled the instance.
    Softirq,
    /// A kthread per peer, placed by the scheduler.
    Threaded,
    /// A kthread per peer, peer i pinned to CPU i mod cpus.
    ThreadedPinned,
    /// A work item on the scheduling CPU's worker.
    Workqueue,
}

impl Context {
    pub const ALL: [Context; 4] = [
        Context::Softirq,
        Context::Threaded,
        Context::ThreadedPinned,
        Context::Workqueue,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Context::Softirq => "softirq",
            Context::Threaded => "threaded",
            Context::ThreadedPinned => "threaded-pinned",
            Context::Workqueue => "workqueue",
        }
    }
}

/// The study's server with `clients` clients (one peer each) at 25 Mbit/s, the peers'
/// NAPI instances in `context`, measuring `duration_ms` after `warmup_ms`.
pub fn config(clients: u32, context: Context, duration_ms: f64, warmup_ms: f64) -> SimConfig {
    let mut cfg = match crate::studies::config(SCENARIO, "softirq") {
        Ok((c, _)) => c,
        // The scenario is compiled in and mapped by the tests.
        Err(e) => panic!("shipped scenario {SCENARIO} does not map: {e}"),
    };
    cfg.name = format!("wg-{}-{clients}", context.name());
    cfg.traffic.rate_pps = clients as f64 * CLIENT_PPS;
    cfg.measurement.duration_ms = duration_ms;
    cfg.measurement.warmup_ms = warmup_ms;
    if let Some(t) = cfg.tunnel.as_mut() {
        t.peers = clients;
        t.napi = match context {
            Context::Softirq => NapiContext::Softirq,
            Context::Threaded | Context::ThreadedPinned => NapiContext::Threaded,
            Context::Workqueue => NapiContext::Workqueue,
        };
        t.pinned = context == Context::ThreadedPinned;
    }
    cfg
}

/// What the study reports of a run, from the twin's true times.
#[derive(Clone, Debug)]
pub struct Figures {
    /// Received through the tunnel (1,500-byte frames), Gbit/s: what the receiver
    /// got during the window, as the study's receivers measured it.
    pub throughput_gbps: f64,
    /// Of the packets that arrived during the window, those received, Gbit/s (equal to
    /// `throughput_gbps` unless packets wait longer than the window).
    pub arrived_received_gbps: f64,
    pub offered_gbps: f64,
    /// Per CPU: softirq share (inline, at bh-enable and ksoftirqd) and busy share.
    pub softirq: Vec<f64>,
    pub busy: Vec<f64>,
    /// The CPU with the most softirq time, its share and the mean of the others.
    pub hot_cpu: usize,
    pub hot_softirq: f64,
    pub others_softirq: f64,
    pub others_busy: f64,
    /// Packets per NAPI poll on the hot CPU and on the others together.
    pub hot_packets_per_poll: f64,
    pub others_packets_per_poll: f64,
    /// Delivered packets' latency, NIC arrival to the socket, us.
    pub p99_us: f64,
    pub mean_us: f64,
}

/// Read the study's figures from a run of a configuration made by [`config`].
pub fn figures(r: &SimResult) -> Figures {
    let m = &r.model;
    let cpus = &m.totals.cpus;
    let softirq: Vec<f64> = cpus
        .iter()
        .map(|c| c.softirq_inline + c.ksoftirqd)
        .collect();
    let busy: Vec<f64> = cpus.iter().map(|c| c.busy).collect();
    let hot_cpu = softirq
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i);
    let n_others = (cpus.len().max(2) - 1) as f64;
    let others = |v: &[f64]| (v.iter().sum::<f64>() - v[hot_cpu]) / n_others;
    let polls: Vec<(f64, f64)> = cpus
        .iter()
        .map(|c| (c.polls_per_s, c.polls_per_s * c.packets_per_poll))
        .collect();
    let (op, ok) = polls
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != hot_cpu)
        .fold((0.0, 0.0), |(p, k), (_, (pp, kk))| (p + pp, k + kk));
    let ratio = |k: f64, p: f64| if p > 0.0 { k / p } else { 0.0 };
    let bits = |pps: f64| pps * 1500.0 * 8.0 / 1e9;
    let class = m.classes.first();
    Figures {
        throughput_gbps: bits(
            m.tunnel_delivered_pps
                .unwrap_or_else(|| class.map_or(0.0, |c| c.forwarded_pps)),
        ),
        arrived_received_gbps: bits(class.map_or(0.0, |c| c.forwarded_pps)),
        offered_gbps: bits(class.map_or(0.0, |c| c.offered_pps)),
        hot_softirq: softirq.get(hot_cpu).copied().unwrap_or(0.0),
        others_softirq: if softirq.is_empty() {
            0.0
        } else {
            others(&softirq)
        },
        others_busy: if busy.is_empty() { 0.0 } else { others(&busy) },
        hot_packets_per_poll: polls.get(hot_cpu).map_or(0.0, |(p, k)| ratio(*k, *p)),
        others_packets_per_poll: ratio(ok, op),
        p99_us: class.map_or(0.0, |c| c.latency.p99_us),
        mean_us: class.map_or(0.0, |c| c.latency.mean_us),
        softirq,
        busy,
        hot_cpu,
    }
}
