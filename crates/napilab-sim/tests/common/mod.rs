//! Shared helpers of the validation tests.
#![allow(dead_code)]

use napilab_sim::{Profile, SimConfig, SimResult};

pub const ROUTER_SQ: &str = include_str!("../fixtures/legacy/router-sq.toml");

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

/// A strategy of docs/studies.md#ingress-qos-study at `rate_pps` with the RT class
/// taking `rt_share`, measured for `duration_ms`.
pub fn strategy_config(
    strategy: napilab_sim::ingress_qos::Strategy,
    rate_pps: f64,
    rt_share: f64,
    duration_ms: f64,
) -> SimConfig {
    let mut c = strategy.config(rate_pps, rt_share);
    c.measurement.duration_ms = duration_ms;
    c.measurement.warmup_ms = 10.0;
    c
}

/// A recorded lab run under tests/fixtures (the default scenario measured on the lab
/// machine, docs/sim.md) and its path, for errors.
pub fn lab_run_fixture(name: &str) -> (napilab_core::RunRecord, String) {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("fixture");
    (
        serde_json::from_str(&text).expect("run record"),
        path.display().to_string(),
    )
}
