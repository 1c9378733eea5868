//! napilab's twin: a deterministic discrete-event model of the Linux receive, forward
//! and transmit path (NAPI, softirq, IRQs, kernel threads), producing the same
//! `Observation` as a live host or a lab run (docs/architecture.md section 2).
//!
//! Entry point: [`run`]. The model is described in docs/sim.md; kernel semantics follow
//! docs/kernel.md.

pub mod accounting;
pub mod calibrate;
pub mod calibrate_server;
pub mod config;
pub mod cpu;
pub mod deferral_timer;
pub mod event;
pub mod from_scenario;
pub mod from_server_scenario;
pub mod from_study;
pub mod hardware;
pub mod ingress_qos;
pub mod napi;
pub mod nic;
pub mod output;
pub mod point;
pub mod poll_loop;
pub mod predict;
pub mod predict_inputs;
pub mod predict_verify;
pub mod profile;
pub mod rng;
pub mod sender_rate;
pub mod server_plan;
mod sim;
pub mod softirq;
pub mod studies;
pub mod traffic;
pub mod twin_plan;
pub mod twin_testbed;
pub mod twin_vs_lab;
pub mod wake_up;
pub mod wireguard;

pub use calibrate::LabProfile;
pub use config::{ConfigError, SimConfig};
pub use from_scenario::{plan as plan_scenario, TwinPlan};
pub use output::{ClassReport, CpuReport, ModelInterval, ModelReport, SimResult};
pub use point::max_throughput;
pub use profile::Profile;

/// Simulate `config` on `profile` with `seed`. Pure: no wall clock, no global state;
/// the same inputs give the same result.
///
/// The config must be valid ([`SimConfig::validate`]); configs parsed with
/// [`SimConfig::from_toml_str`] are. An invalid one is a programming error and panics
/// with the validation message.
pub fn run(config: &SimConfig, profile: &Profile, seed: u64) -> SimResult {
    match try_run(config, profile, seed) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    }
}

/// [`run`] for configs and profiles built in code: validation errors are returned
/// (naming the field) instead of panicking.
pub fn try_run(config: &SimConfig, profile: &Profile, seed: u64) -> Result<SimResult, ConfigError> {
    config.validate("(config passed to napilab_sim::run)")?;
    profile.validate("(profile passed to napilab_sim::run)")?;
    let threaded = [
        ("ingress.irq_mode", config.ingress.irq_mode),
        ("egress.irq_mode", config.egress.irq_mode),
    ]
    .into_iter()
    .find(|(_, m)| *m == config::IrqMode::Threaded);
    if let (Some((field, _)), None) = (threaded, &profile.irq_thread) {
        return Err(ConfigError::new(
            &format!("profile {}", profile.name),
            "irq_thread",
            format!("the configuration's {field} is \"threaded\", but the profile has no [irq_thread] table (handler_cycles, wakeup_ns): add one, or set {field} to \"hardirq\""),
        ));
    }
    let mut sim = sim::Sim::new(config, profile, seed);
    sim.run();
    Ok(output::build(&sim))
}
