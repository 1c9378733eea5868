//! The studies' scenarios shipped with napilab (scenarios/studies/), each with the
//! hardware profile it names in `[twin] profile`, and the twin configuration files they
//! replace. The twin's own code (crate::wireguard, crate::ingress_qos, the examples)
//! builds its configurations from them, so there is one description of each study.

use napilab_core::scenario::{self, Scenario};

use crate::twin_plan::TwinPlan;
use crate::{ConfigError, Profile, SimConfig};

/// Every study scenario: (path from the repository root, text).
pub const STUDIES: &[(&str, &str)] = &[
    (
        "scenarios/studies/wireguard.toml",
        include_str!("../../../scenarios/studies/wireguard.toml"),
    ),
    (
        "scenarios/studies/router-sq.toml",
        include_str!("../../../scenarios/studies/router-sq.toml"),
    ),
    (
        "scenarios/studies/ingress-qos.toml",
        include_str!("../../../scenarios/studies/ingress-qos.toml"),
    ),
    (
        "scenarios/studies/ap-e2w.toml",
        include_str!("../../../scenarios/studies/ap-e2w.toml"),
    ),
    (
        "scenarios/studies/ap-w2e.toml",
        include_str!("../../../scenarios/studies/ap-w2e.toml"),
    ),
];

pub const WIREGUARD: &str = "scenarios/studies/wireguard.toml";
pub const ROUTER_SQ: &str = "scenarios/studies/router-sq.toml";
pub const INGRESS_QOS: &str = "scenarios/studies/ingress-qos.toml";
pub const AP_E2W: &str = "scenarios/studies/ap-e2w.toml";
pub const AP_W2E: &str = "scenarios/studies/ap-w2e.toml";

/// The twin configuration files of earlier releases (now
/// crates/napilab-sim/tests/fixtures/legacy/, by their `name`) and the study scenario and configuration that replace each.
pub const LEGACY: &[(&str, &str, &str)] = &[
    ("wg-softirq", WIREGUARD, "softirq"),
    ("wg-threaded", WIREGUARD, "threaded"),
    ("wg-threaded-pinned", WIREGUARD, "threaded-pinned"),
    ("wg-workqueue", WIREGUARD, "workqueue"),
    ("router-sq", ROUTER_SQ, "baseline"),
    ("router-rr", INGRESS_QOS, "rr"),
    ("router-ll-rr", INGRESS_QOS, "ll-rr"),
    ("router-ll-wfq", INGRESS_QOS, "ll-wfq"),
    ("ap-e2w-single-core", AP_E2W, "single-core"),
    ("ap-e2w-dual-core", AP_E2W, "dual-core"),
    ("ap-w2e-single-core", AP_W2E, "single-core"),
    ("ap-w2e-dual-core", AP_W2E, "dual-core"),
];

/// The replacement (scenario, configuration) of a legacy twin configuration, by its
/// `name` or, when it has none, its file's stem.
pub fn replacement(legacy_name: &str) -> Option<(&'static str, &'static str)> {
    LEGACY
        .iter()
        .find(|(n, _, _)| *n == legacy_name)
        .map(|(_, s, c)| (*s, *c))
}

fn text_of(path: &str) -> Result<&'static str, ConfigError> {
    STUDIES
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, t)| *t)
        .ok_or_else(|| ConfigError::new(path, "(file)", "not a shipped study scenario"))
}

/// A shipped study scenario, parsed.
pub fn scenario(path: &str) -> Result<Scenario, ConfigError> {
    let text = text_of(path)?;
    scenario::parse(text, path, None).map_err(|e| ConfigError::new(path, "(parse)", e.to_string()))
}

/// The hardware profile a scenario names (`[twin] profile`), if any.
pub fn default_profile(s: &Scenario) -> Option<&str> {
    s.twin.profile.as_deref()
}

/// Each shipped study and the profile it expects, for messages.
pub fn expected_profiles() -> Vec<(&'static str, String)> {
    STUDIES
        .iter()
        .map(|(p, t)| {
            let profile = scenario::parse(t, p, None)
                .ok()
                .and_then(|s| s.twin.profile)
                .unwrap_or_else(|| "veth-lab".into());
            (*p, profile)
        })
        .collect()
}

/// A shipped study mapped onto its own profile: the plan and the profile.
pub fn plan(path: &str) -> Result<(TwinPlan, Profile), ConfigError> {
    let s = scenario(path)?;
    let name = default_profile(&s)
        .ok_or_else(|| ConfigError::new(path, "twin.profile", "a study names its profile"))?;
    let profile = Profile::builtin(name)?;
    let plan = crate::from_study::plan(&s, &profile, path)?;
    Ok((plan, profile))
}

/// One configuration of a shipped study as the twin runs it (at the scenario's first
/// load), with the study's profile.
pub fn config(path: &str, configuration: &str) -> Result<(SimConfig, Profile), ConfigError> {
    let (plan, profile) = plan(path)?;
    let names: Vec<String> = plan.configurations.iter().map(|c| c.name.clone()).collect();
    let c = plan
        .configurations
        .into_iter()
        .find(|c| c.name == configuration)
        .ok_or_else(|| {
            ConfigError::new(
                path,
                "configurations",
                format!(
                    "no configuration {configuration:?} (it has {})",
                    names.join(", ")
                ),
            )
        })?;
    let p = c.profile_for(&profile, None);
    Ok((c.config, p))
}
