//! Shared helpers of the validation tests.
#![allow(dead_code)]

use napilab_sim::{Profile, SimConfig, SimResult};

pub const ROUTER_SQ: &str = include_str!("../../scenarios/router-sq.toml");

pub fn router_profile() -> Profile {
    Profile::builtin("router-e3-1230-ixgbe").expect("shipped profile parses")
}

pub fn router_config(rate_pps: f64, duration_ms: f64) -> SimConfig {
    let mut c = SimConfig::from_toml_str(ROUTER_SQ, "scenarios/router-sq.toml")
        .expect("shipped scenario parses");
    c.traffic.rate_pps = rate_pps;
    c.measurement.duration_ms = duration_ms;
    c.measurement.warmup_ms = 10.0;
    c
}

pub fn run_router(rate_pps: f64, duration_ms: f64) -> SimResult {
    napilab_sim::run(&router_config(rate_pps, duration_ms), &router_profile(), 1)
}

/// Relative difference.
pub fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

/// The four ingress-QoS strategies of docs/studies.md#ingress-qos-study as shipped
/// twin configurations: (strategy, scenario text, file name).
pub const INGRESS_QOS: [(&str, &str, &str); 4] = [
    (
        "SQ",
        include_str!("../../scenarios/router-sq.toml"),
        "scenarios/router-sq.toml",
    ),
    (
        "RR",
        include_str!("../../scenarios/router-rr.toml"),
        "scenarios/router-rr.toml",
    ),
    (
        "LL-RR",
        include_str!("../../scenarios/router-ll-rr.toml"),
        "scenarios/router-ll-rr.toml",
    ),
    (
        "LL-WFQ",
        include_str!("../../scenarios/router-ll-wfq.toml"),
        "scenarios/router-ll-wfq.toml",
    ),
];

/// A strategy's configuration at `rate_pps` with the RT class taking `rt_share` of it
/// (SQ has one class: its whole traffic).
pub fn strategy_config(
    strategy: &str,
    rate_pps: f64,
    rt_share: f64,
    duration_ms: f64,
) -> SimConfig {
    let (_, text, file) = INGRESS_QOS
        .iter()
        .find(|(s, _, _)| *s == strategy)
        .expect("known strategy");
    let mut c = SimConfig::from_toml_str(text, file).expect("shipped scenario parses");
    c.traffic.rate_pps = rate_pps;
    c.measurement.duration_ms = duration_ms;
    c.measurement.warmup_ms = 10.0;
    if c.traffic.classes.len() == 1 {
        // SQ: both classes share the one ring (FIFO), counted apart.
        let mut rt = c.traffic.classes[0].clone();
        rt.name = "rt".to_string();
        c.traffic.classes.insert(0, rt);
    }
    for class in &mut c.traffic.classes {
        class.share = if class.name == "rt" {
            rt_share
        } else {
            1.0 - rt_share
        };
    }
    c
}
