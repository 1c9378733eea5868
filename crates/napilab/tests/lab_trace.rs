//! `napilab lab run` with `measurement.trace = "stages"`: every point carries its
//! Observation with the stage profile. Such an Observation is larger than a pipe's
//! buffer; the lab once waited for the observer to exit before reading its output, so
//! every traced point ended with "the observer did not finish in time" and no
//! Observation (3 s at 400 kpps made about 135 KB of it). The load is heavy for the
//! machine it runs on: 80% of what the DUT forwarded in the configuration's capacity
//! probe. No warm-up: the observer must be ready before the traffic starts, however
//! long loading the stage profile takes (its window once opened by the clock, after
//! most of the traffic). Needs root (namespaces, BPF, perf events); without it the test prints
//! why it was skipped.

use std::process::Command;

use serde_json::Value;

fn scenario_text() -> String {
    napilab_testkit::router_scenario(
        "trace-stages",
        r#"backend = "line-rate"
sweep = { fractions = [0.8] }"#,
        r#"duration_s = 3.0
warmup_s = 0.0
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
    assert_window_saw_the_traffic(point, intervals);
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

/// The Observation's window is the point's: the DUT's ingress took about what the sink
/// received. Its observer once took its first sample by the clock, and when loading the
/// trace tier outlasted the warm-up it sampled after the traffic had ended (a threaded
/// point read 33,251 packets/s in its first second and 0 after, with 398,953 frames at
/// the sink).
fn assert_window_saw_the_traffic(point: &Value, intervals: &[Value]) {
    let dut_in_packets: f64 = intervals
        .iter()
        .map(|iv| {
            let rate = iv["devices"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|d| d["name"].as_str().is_some_and(|n| n.ends_with("-in")))
                .and_then(|d| d["rx_packets"]["value"].as_f64())
                .unwrap_or(0.0);
            rate * iv["duration_s"].as_f64().unwrap_or(0.0)
        })
        .sum();
    let received: f64 = point["classes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["received"].as_f64())
        .sum();
    assert!(received > 0.0, "nothing reached the sink: {point}");
    let ratio = dut_in_packets / received;
    assert!(
        (0.8..1.25).contains(&ratio),
        "the DUT's ingress took {dut_in_packets:.0} packets in the Observation's window and the sink received {received:.0}: the window is not the point's"
    );
}
