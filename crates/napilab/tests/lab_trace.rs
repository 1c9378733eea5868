//! `napilab lab run` with `measurement.trace = "stages"`: every point carries its
//! Observation with the stage profile. Such an Observation is larger than a pipe's
//! buffer; the lab once waited for the observer to exit before reading its output, so
//! every traced point ended with "the observer did not finish in time" and no
//! Observation (3 s at 400 kpps made about 135 KB of it). The load is heavy for the
//! machine it runs on: 80% of what the DUT forwarded in the configuration's capacity
//! probe. Needs root (namespaces, BPF, perf events); without it the test prints
//! why it was skipped.

use std::process::Command;

use serde_json::Value;

fn scenario_text() -> String {
    napilab_testkit::router_scenario(
        "trace-stages",
        r#"backend = "line-rate"
sweep = { fractions = [0.8] }"#,
        r#"duration_s = 3.0
warmup_s = 1.0
trace = "stages""#,
        r#"[[configurations]]
name = "threaded"
set = { napi = "threaded", napi_cpus = [1] }"#,
    )
}

#[test]
fn traced_points_carry_their_stage_profile() {
    if !napilab_testkit::root_or_skip(
        "traced_points_carry_their_stage_profile",
        "needs root for network namespaces, BPF and perf events",
    ) {
        return;
    }
    let dir = napilab_testkit::scratch_dir(env!("CARGO_TARGET_TMPDIR"), "napilab-lab-trace");
    let scenario = dir.join("trace-stages.toml");
    std::fs::write(&scenario, scenario_text()).expect("scenario");
    let out = Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args(["lab", "run", "--json", "--out"])
        .arg(&dir)
        .arg(&scenario)
        .output()
        .expect("run napilab");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let record: Value = serde_json::from_slice(&out.stdout).expect("RunRecord JSON");
    let notices = record["notices"].to_string();
    assert!(
        !notices.contains("did not finish in time"),
        "the observer was killed: {notices}"
    );
    let point = &record["configurations"][0]["points"][0];
    let observation = &point["observation"];
    let intervals = observation["intervals"]
        .as_array()
        .unwrap_or_else(|| panic!("no Observation: {notices}"));
    let observer_notices = observation["notices"].to_string();
    if observer_notices.contains("stage profile (--stages)")
        || observer_notices.contains("BPF tracing tier")
    {
        println!("SKIPPED the stage-profile check: this kernel gave the observer no stage profile: {observer_notices}");
        return;
    }
    let stage_samples: u64 = intervals
        .iter()
        .flat_map(|iv| iv["trace"]["stages"].as_array().into_iter().flatten())
        .filter_map(|s| s["samples"].as_u64())
        .sum();
    assert!(stage_samples > 0, "no stage samples in {intervals:?}");
}
