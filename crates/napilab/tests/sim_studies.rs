//! `napilab sim run` on the studies' scenarios (scenarios/studies/): each names its
//! hardware profile, the WireGuard baseline's findings come out as the lab's do, a
//! legacy twin configuration still runs with a notice naming its replacement, and a
//! wrong profile is answered with every shipped one.

use std::path::PathBuf;
use std::process::Output;

fn napilab(args: &[&str]) -> Output {
    napilab_testkit::output_of(env!("CARGO_BIN_EXE_napilab"), args)
}

fn root(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
        .display()
        .to_string()
}

/// The WireGuard study's baseline lists the execution-order finding under its softirq
/// configuration (its NAPI polls land on the few CPUs whose workers run them).
#[test]
fn wireguard_scenario_lists_the_load_imbalance_under_softirq() {
    let file = root("scenarios/studies/wireguard.toml");
    let out = napilab(&["sim", "run", &file, "--json", "--no-report"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let configs = v["configurations"].as_array().expect("configurations");
    let names: Vec<&str> = configs.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(
        names,
        ["softirq", "threaded", "threaded-pinned", "workqueue"]
    );
    let softirq = &configs[0];
    let rules: Vec<&str> = softirq["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["rule"].as_str())
        .collect();
    assert!(rules.contains(&"napi_load_imbalance"), "{rules:?}");
    let profile = softirq["settings"]
        .as_array()
        .expect("settings")
        .iter()
        .find(|p| p[0] == "profile")
        .and_then(|p| p[1].as_str())
        .map(str::to_string);
    assert_eq!(profile.as_deref(), Some("wg-xeon-gold-5220"));
}

/// A twin configuration of an earlier release still runs, says what replaces it, and
/// gives the same delivered rate as its replacement.
#[test]
fn a_legacy_twin_configuration_runs_with_a_notice_naming_its_replacement() {
    let legacy = root("crates/napilab-sim/tests/fixtures/legacy/router-sq.toml");
    let out = napilab(&[
        "sim",
        "run",
        &legacy,
        "--profile",
        "router-e3-1230-ixgbe",
        "--loads",
        "1M",
        "--json",
        "--no-report",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("scenarios/studies/router-sq.toml") && err.contains("\"baseline\""),
        "{err}"
    );
    let old: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(old["notices"][0]["why"]
        .as_str()
        .is_some_and(|w| w.contains("scenarios/studies/router-sq.toml")));
    let study = root("scenarios/studies/router-sq.toml");
    let out = napilab(&[
        "sim",
        "run",
        &study,
        "--loads",
        "1M",
        "--json",
        "--no-report",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let new: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    // The classes' counts (sent, received, dropped) and the offered rate.
    let delivered = |v: &serde_json::Value| {
        let p = &v["configurations"][0]["points"][0];
        serde_json::json!([p["offered_pps"], p["classes"]])
    };
    assert_eq!(delivered(&old), delivered(&new));
    assert!(!old["configurations"][0]["points"][0]["classes"].is_null());
}

/// A legacy file without --profile, and an unknown profile: every shipped profile is
/// listed (from the files compiled in), with the profile each study expects.
#[test]
fn a_missing_or_unknown_profile_lists_every_shipped_one() {
    let legacy = root("crates/napilab-sim/tests/fixtures/legacy/wg-softirq.toml");
    let missing = napilab(&["sim", "run", &legacy, "--no-report"]);
    let study = root("scenarios/studies/ap-w2e.toml");
    let unknown = napilab(&["sim", "run", &study, "--profile", "nosuch", "--no-report"]);
    for out in [missing, unknown] {
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        for name in [
            "ap-cortex-a72-bcmgenet",
            "ap-cortex-a72-w2e",
            "router-e3-1230-ixgbe",
            "veth-lab",
            "veth-lab-server",
            "wg-xeon-gold-5220",
        ] {
            assert!(err.contains(name), "{name} missing: {err}");
        }
        assert!(
            err.contains("scenarios/studies/wireguard.toml expects wg-xeon-gold-5220"),
            "{err}"
        );
    }
}
