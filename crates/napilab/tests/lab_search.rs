//! `napilab lab run` with MLRsearch on a veth router: a short search (two repeats,
//! 0.5 s trials) ends with each goal's conditional throughput between its relevant
//! bounds, every trial recorded with what the machine took away from it, and an
//! interval over the repeats, over a range derived from the configuration's capacity
//! probe (the scenario gives no search_max_pps); the record and the report carry the
//! twin's prediction beside the lab's maximum. Needs root (namespaces, BPF); without it the test prints
//! why it was skipped.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

const SCENARIO: &str = r#"
name = "search-short"
[dut]
generator_cpus = [0]
sink_cpus = [0]
[traffic]
backend = "line-rate"
loads_pps = []
[[traffic.classes]]
name = "be"
share = 1.0
size = 64
port = 9000
[measurement]
duration_s = 0.5
warmup_s = 0.3
drain_ms = 100
search = true
search_repeats = 2
search_time_limit_s = 25
[[measurement.search_goals]]
name = "ndr"
loss_ratio = 0.0
initial_trial_s = 0.5
width = 0.2
[[measurement.search_goals]]
name = "pdr"
loss_ratio = 0.005
initial_trial_s = 0.5
width = 0.2
[[configurations]]
name = "threaded"
set = { napi = "threaded", napi_cpus = [1] }
"#;

#[test]
fn a_short_mlrsearch_gives_bounded_answers_with_their_trials() {
    if !napilab_testkit::root_or_skip(
        "a_short_mlrsearch_gives_bounded_answers_with_their_trials",
        "needs root for network namespaces and BPF",
    ) {
        return;
    }
    let dir = napilab_testkit::scratch_dir(env!("CARGO_TARGET_TMPDIR"), "napilab-lab-search");
    let scenario = dir.join("search-short.toml");
    std::fs::write(&scenario, SCENARIO).expect("scenario");
    let out = Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args(["lab", "run", "--json", "--no-observe", "--out"])
        .arg(&dir)
        .arg(&scenario)
        .output()
        .expect("run napilab");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let record: Value = serde_json::from_slice(&out.stdout).expect("RunRecord JSON");
    // The host's speed, timed on every CPU at the run's start and at its end.
    let cpus = record["host"]["cpus"].as_array().expect("cpus").len();
    let speed = record["host"]["speed"].as_array().expect("host.speed");
    for when in ["run start", "run end"] {
        let at: Vec<&Value> = speed.iter().filter(|s| s["when"] == when).collect();
        assert_eq!(at.len(), cpus, "{when}: {speed:?}");
        for s in at {
            let samples = s["ns_per_unit"].as_array().expect("samples");
            assert!(
                !samples.is_empty() && samples.iter().all(|x| x.as_f64().is_some_and(|x| x > 0.0)),
                "{s}"
            );
        }
    }
    // And the wake-ups of each idle CPU, enough for the twin to draw its tail from
    // (docs/lab.md, "Wake-ups"): every CPU woken from another, each delay positive.
    if cpus >= 2 {
        let wake_up = record["host"]["wake_up"].as_array().expect("host.wake_up");
        assert_eq!(wake_up.len(), cpus, "{wake_up:?}");
        for w in wake_up {
            let delays = w["delays_ns"].as_array().expect("delays");
            assert_eq!(delays.len(), napilab_probe::wake_up_latency::TAIL_WAKE_UPS);
            assert!(delays.iter().all(|d| d.as_f64().is_some_and(|d| d > 0.0)));
            assert_ne!(w["cpu"], w["waker_cpu"], "{}", w["cpu"]);
            // Each CPU's probe is summed up in a notice of its own.
            let what = format!("wake-ups of CPU {}", w["cpu"]);
            assert!(
                record["notices"]
                    .as_array()
                    .is_some_and(|n| n.iter().any(|n| n["what"] == what.as_str())),
                "no notice {what:?}"
            );
        }
    } else {
        println!("one CPU: no wake-up probe to check (nothing to wake it from)");
    }
    // The steal limit comes from the idle windows and from both probes (a vCPU woken
    // from halt brings steal that an idle one does not: docs/lab.md, "Disturbed
    // trials").
    let limits = record["notices"]
        .as_array()
        .expect("notices")
        .iter()
        .find(|n| n["what"] == "disturbance limits")
        .unwrap_or_else(|| panic!("no disturbance limits notice: {}", record["notices"]));
    let detail = limits["why"].as_str().expect("why");
    assert!(detail.contains("idle windows"), "{detail}");
    assert!(
        detail.contains("steal while every CPU was busy"),
        "{detail}"
    );
    if cpus >= 2 {
        assert!(
            detail.contains("steal while the wake-up probe woke"),
            "{detail}"
        );
    }
    let conf = &record["configurations"][0];
    let max = &conf["max_throughput"];
    assert_eq!(max["method"], "mlrsearch", "{max}");
    let trials = max["trials"].as_array().expect("trials");
    let points = conf["points"].as_array().expect("points");
    assert!(!trials.is_empty());
    for t in trials {
        // Every trial names its point, and carries the machine's share of it.
        let p = &points[t["point"].as_u64().expect("point") as usize];
        assert_eq!(p["requested_pps"], t["load_pps"], "{t}");
        assert!(
            t["disturbance"]["steal"]
                .as_array()
                .is_some_and(|s| !s.is_empty()),
            "{t}"
        );
        // And the speed its CPUs ran at right after it.
        assert!(
            t["disturbance"]["host_speed_ns"]
                .as_array()
                .is_some_and(|s| !s.is_empty()),
            "{t}"
        );
        let disturbed = t["disturbance"]["disturbed"].as_bool().expect("flag");
        let reasons = t["disturbance"]["reasons"].as_array().expect("reasons");
        assert_eq!(disturbed, !reasons.is_empty(), "{t}");
    }
    // Capacity first: the range came from the line-rate capacity probe, not the scenario,
    // and the last search's trials stayed in it.
    let range = &max["range"];
    let probe = &range["probe"];
    assert!(
        probe["forwarded_pps"].as_f64().is_some_and(|x| x > 0.0),
        "{range}"
    );
    assert!(
        probe["method"]
            .as_str()
            .is_some_and(|m| m.contains("line-rate")),
        "{range}"
    );
    assert_ne!(range["source"], "scenario_cap", "{range}");
    let top = range["max_pps"].as_f64().expect("the range's top");
    assert!(
        trials
            .iter()
            .all(|t| t["load_pps"].as_f64().is_some_and(|l| l <= top)),
        "{range}"
    );
    println!("search range: {range}");
    let searches = max["searches"].as_array().expect("searches");
    assert_eq!(searches.len(), 2);
    for s in searches {
        for g in s["goals"].as_array().expect("goals") {
            let stopped = g["stopped"].as_str().expect("stopped");
            if stopped == "time_limit" {
                println!("search stopped by its time limit on this machine: {g}");
                continue;
            }
            let lb = g["relevant_lower_bound"].as_f64().expect("lower bound");
            let ct = g["conditional_throughput"]
                .as_f64()
                .expect("conditional throughput");
            assert!(ct <= lb + 1e-6 && ct > 0.0, "{g}");
            if let Some(ub) = g["relevant_upper_bound"].as_f64() {
                assert!(lb < ub && (ub - lb) / ub <= 0.2 + 1e-9, "{g}");
            }
            for i in g["supporting_trials"].as_array().expect("supporting") {
                let t = &trials[i.as_u64().expect("index") as usize];
                assert_eq!(t["load_pps"].as_f64(), Some(lb), "{t}");
            }
        }
    }
    // The twin beside the lab (docs/sim.md): the record and the report carry its
    // prediction of the configuration's maximum, with the lab's limiter.
    let twin = &record["twin"]["maxima"][0];
    assert_eq!(twin["configuration"], "threaded", "{}", record["twin"]);
    assert_eq!(twin["lab_stopped"], max["stopped"], "{twin}");
    assert!(twin["twin_pps"].as_f64().is_some_and(|x| x > 0.0), "{twin}");
    assert!(
        twin["verdict"].as_str().is_some_and(|v| !v.is_empty()),
        "{twin}"
    );
    let run_id = record["run_id"].as_str().expect("run id");
    let html = std::fs::read_to_string(dir.join(run_id).join("report.html")).expect("report");
    assert!(html.contains("<h2 id=\"twin\">Twin vs lab</h2>"));
    assert!(html.contains("<ul id=\"search-ranges\">"));
    // The goals over the repeats: NDR's maximum is not above PDR's in any repeat.
    let goals = max["goals"].as_array().expect("goal summaries");
    assert_eq!(goals.len(), 2);
    let values = |i: usize| -> Vec<f64> {
        goals[i]["values"]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    if values(0).len() == 2 {
        assert!(
            goals[0]["interval"]["low"].as_f64().is_some(),
            "{}",
            goals[0]
        );
    }
    println!(
        "ndr {:?} pdr {:?}, {} trials ({} disturbed)",
        values(0),
        values(1),
        trials.len(),
        trials
            .iter()
            .filter(|t| t["disturbance"]["disturbed"] == true)
            .count()
    );
    // One experiment, two testbeds: the same scenario file on the twin goes through the
    // same search, so its record has the lab's shape; only the testbed's own parts
    // (the engines' statistics, the machine's disturbance readings, the observation,
    // which this lab run leaves out) and the values differ.
    let twin = Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args([
            "sim",
            "run",
            "--json",
            "--no-report",
            "--profile",
            "veth-lab",
        ])
        .arg(&scenario)
        .output()
        .expect("run napilab sim");
    assert!(
        twin.status.success(),
        "{}",
        String::from_utf8_lossy(&twin.stderr)
    );
    let twin: Value = serde_json::from_slice(&twin.stdout).expect("twin RunRecord JSON");
    let twin_max = &twin["configurations"][0]["max_throughput"];
    assert_eq!(twin_max["method"], max["method"], "{twin_max}");
    assert_eq!(twin_max["searches"].as_array().map(Vec::len), Some(2));
    let (lab_shape, twin_shape) = (shape(conf), shape(&twin["configurations"][0]));
    let differ: Vec<&String> = lab_shape
        .symmetric_difference(&twin_shape)
        .filter(|p| !by_value(p))
        .collect();
    assert!(
        differ.is_empty(),
        "the lab's and the twin's records differ in shape at {differ:?}\nlab: {lab_shape:?}\ntwin: {twin_shape:?}"
    );
}

/// Fields whose presence depends on the values: optional answers (a search that found
/// no lower bound has no conditional throughput, one search has no interval), the
/// findings' contents (none without an observation), the generator's capacity (the
/// twin's traffic is ideal: none) and who set a maximum the DUT did not.
const BY_VALUE: [&str; 10] = [
    "findings",
    "generator_capacity_pps",
    "limited_by",
    "conditional_throughput",
    "undisturbed_conditional_throughput",
    "relevant_lower_bound",
    "relevant_upper_bound",
    "interval",
    "mean",
    "undisturbed_mean",
];

fn by_value(path: &str) -> bool {
    path.split('.')
        .any(|segment| BY_VALUE.contains(&segment.trim_end_matches("[]")))
}

/// Parts of a record that belong to one testbed: what the lab's engines and machine
/// report, and the Observation (the twin always models one; this lab run has none).
const TESTBED_OWN: [&str; 5] = ["generator", "sink", "disturbance", "observation", "latency"];

/// The key paths of a configuration's record (arrays as `[]`, every element's keys),
/// without the testbed's own parts; a null or absent field has no path.
fn shape(v: &Value) -> BTreeSet<String> {
    let mut out =
        napilab_testkit::json_key_paths(v, &|k, child| child.is_null() || TESTBED_OWN.contains(&k));
    // Settings are (name, value) pairs: their shape is the list, not the names.
    out.retain(|p| !p.starts_with(".settings[]"));
    out
}
