//! The twin's run as one point of core's experiment results (`PointResult`), so the
//! store and the report render lab and twin points the same way, and the RFC 2544
//! style maximum-throughput search of a twin configuration (the experiment layer's
//! bisection).

use napilab_core::scenario::SearchMethod;
use napilab_core::{ClassResult, EngineStats, MaxThroughput, PointResult, PointRole};
use napilab_experiment::bisection::{bisect, Probe};
use napilab_experiment::maximum::method_name;

use crate::{run, Profile, SimConfig, SimResult};

impl SimResult {
    /// This run as a measured point. `requested_pps` is the load the caller asked for
    /// (the config's `traffic.rate_pps` for open-loop traffic).
    pub fn to_point(&self, role: PointRole, requested_pps: f64, repeat: u32) -> PointResult {
        let m = &self.model;
        let classes = m
            .classes
            .iter()
            .map(|c| ClassResult {
                name: c.name.clone(),
                packet_bytes: c.size_bytes,
                sent: c.offered,
                received: c.forwarded,
                reordered: 0,
                loss_counters: vec![
                    ("model rx drops".to_string(), c.rx_dropped),
                    ("model tx drops".to_string(), c.tx_dropped),
                ],
                latency: (c.latency.samples > 0).then(|| c.latency.clone()),
            })
            .collect();
        let engine = |what: &str| EngineStats {
            backend: "model".to_string(),
            counters: vec![(what.to_string(), m.events)],
            ..EngineStats::default()
        };
        PointResult {
            role,
            requested_pps,
            offered_pps: m.totals.offered_pps,
            repeat,
            duration_s: m.duration_s,
            classes,
            generator: engine("events"),
            sink: EngineStats {
                backend: "model".to_string(),
                counters: m.loss_counters.clone(),
                ..EngineStats::default()
            },
            observation: Some(self.observation.clone()),
            many_napi: None,
        }
    }
}

/// The highest offered load (open-loop `traffic.rate_pps`) whose loss is at most
/// `loss_threshold`, by the experiment layer's bisection between `low_pps` (assumed to
/// pass) and `high_pps`, stopping when the bracket is narrower than `resolution`
/// (relative). Returns the answer and every probed point, in probe order.
pub fn max_throughput(
    config: &SimConfig,
    profile: &Profile,
    seed: u64,
    loss_threshold: f64,
    low_pps: f64,
    high_pps: f64,
    resolution: f64,
) -> (MaxThroughput, Vec<PointResult>) {
    /// Enough halvings for any bracket of loads the twin runs (2^64).
    const ITERATIONS: u32 = 64;
    let mut cfg = config.clone();
    let mut points = Vec::new();
    let outcome = bisect(
        high_pps,
        &[(low_pps, true)],
        ITERATIONS,
        resolution,
        |pps| {
            cfg.traffic.rate_pps = pps;
            let p = run(&cfg, profile, seed).to_point(PointRole::Search, pps, 0);
            let ok = p.loss_ratio() <= loss_threshold;
            points.push(p);
            if ok {
                Probe::Pass
            } else {
                Probe::Fail
            }
        },
    );
    let probes = (0..points.len()).collect();
    (
        MaxThroughput {
            pps: outcome.pps,
            loss_threshold,
            probes,
            stopped: outcome.stopped.to_string(),
            method: method_name(SearchMethod::Bisection).into(),
            ..MaxThroughput::default()
        },
        points,
    )
}
