//! `napilab lab run` with MLRsearch on a veth router: a short search (two repeats,
//! 0.5 s trials) ends with each goal's conditional throughput between its relevant
//! bounds, every trial recorded with what the machine took away from it, and an
//! interval over the repeats; the record and the report carry the twin's prediction
//! beside the lab's maximum. Needs root (namespaces, BPF); without it the test prints
//! why it was skipped.

use std::path::PathBuf;
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
search_max_pps = 3000000
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
    if !napilab_testkit::is_root() {
        println!("SKIPPED a_short_mlrsearch_gives_bounded_answers_with_their_trials: needs root for network namespaces and BPF");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("napilab-lab-search");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
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
        let disturbed = t["disturbance"]["disturbed"].as_bool().expect("flag");
        let reasons = t["disturbance"]["reasons"].as_array().expect("reasons");
        assert_eq!(disturbed, !reasons.is_empty(), "{t}");
    }
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
}
