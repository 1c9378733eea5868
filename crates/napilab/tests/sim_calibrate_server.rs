//! `napilab sim calibrate` on a server-topology run (docs/sim.md): the fit and the
//! twin's maxima as JSON, the profile written with its [server] table, `--config`
//! refused with the reason, and `napilab sim run` on a server scenario reading the
//! written profile's costs.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../napilab-sim/tests/fixtures/server-run-twin.json")
}

/// Runs napilab with `args` and returns its JSON output; panics with its stderr when
/// it fails.
fn napilab_json(args: &[&std::ffi::OsStr]) -> Value {
    napilab_testkit::stdout_json(Command::new(env!("CARGO_BIN_EXE_napilab")).args(args))
}

#[test]
fn a_server_run_is_calibrated_and_its_profile_drives_the_twin() {
    let dir =
        napilab_testkit::scratch_dir(env!("CARGO_TARGET_TMPDIR"), "napilab-sim-calibrate-server");
    let profile = dir.join("fitted.toml");
    let lab = fixture();
    let v = napilab_json(&[
        "sim".as_ref(),
        "calibrate".as_ref(),
        "--json".as_ref(),
        "--lab".as_ref(),
        lab.as_os_str(),
        "--out".as_ref(),
        profile.as_os_str(),
    ]);
    assert_eq!(v["topology"], "server");
    let poll = v["server_costs"]["server.poll_cycles"]
        .as_f64()
        .expect("poll");
    assert!((760.0..=840.0).contains(&poll), "{v}");
    let predictions = v["predictions"].as_array().expect("predictions");
    assert_eq!(predictions.len(), 5, "{v}");
    let text = std::fs::read_to_string(&profile).expect("profile written");
    assert!(
        text.contains("\n[server]\n") && text.contains("# on lab run "),
        "{text}"
    );

    let refused = Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args(["sim", "calibrate", "--config", "threaded", "--lab"])
        .arg(fixture())
        .output()
        .expect("run napilab");
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("server-topology run") && err.contains("--config"),
        "{err}"
    );

    let scenario =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/server-calibrate.toml");
    let r = napilab_json(&[
        "sim".as_ref(),
        "run".as_ref(),
        "--json".as_ref(),
        "--no-report".as_ref(),
        "--loads".as_ref(),
        "2000".as_ref(),
        "--profile".as_ref(),
        profile.as_os_str(),
        scenario.as_os_str(),
    ]);
    let settings = r["configurations"][0]["settings"]
        .as_array()
        .expect("settings");
    let poll_source = settings
        .iter()
        .find(|kv| kv[0] == "source: server.poll_cycles")
        .and_then(|kv| kv[1].as_str())
        .expect("poll source");
    assert!(poll_source.contains("fitted"), "{poll_source}");
}
