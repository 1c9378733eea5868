//! `napilab tune predict PROFILE --from FILE`: the twin's prediction from a recorded
//! Observation or a lab run's traced point, without root and without touching the host
//! (docs/tune.md, "Predicting from a recording").

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../napilab-sim/tests/fixtures/lab-line-rate-softirq-observation.json")
}

fn napilab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args(args)
        .output()
        .expect("run napilab")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `napilab tune predict threaded --dev DEV` with `extra` arguments.
fn predict_threaded(dev: &str, extra: &[&str]) -> Output {
    let mut a = vec!["tune", "predict", "threaded", "--dev", dev];
    a.extend_from_slice(extra);
    napilab(&a)
}

/// The command failed and its error line says `needle`.
fn assert_fails_saying(out: &Output, needle: &str) {
    let err = text(&out.stderr);
    assert!(
        !out.status.success() && err.contains(needle),
        "expected a failure saying {needle:?}: {err}"
    );
}

/// A lab record holding the fixture as sweep point 0 of configuration one-cpu/softirq.
fn lab_record(dir: &Path) -> PathBuf {
    let obs: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture()).expect("fixture")).expect("JSON");
    let record = serde_json::json!({
        "schema": "napilab.run/1",
        "configurations": [
            {"name": "one-cpu/softirq", "points": [{"role": "search", "observation": null}, {"role": "sweep", "observation": obs}]},
            {"name": "two-cpu/threaded", "points": [{"role": "sweep", "observation": null}]}
        ]
    });
    let path = dir.join("run.json");
    std::fs::write(&path, record.to_string()).expect("write");
    path
}

#[test]
fn predicts_from_a_recorded_observation() {
    let file = fixture();
    let f = file.to_str().expect("utf-8");
    let out = predict_threaded("n6b01-in", &["--cpus", "1", "--json", "--from", f]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["schema"], "napilab.tune-predict/1");
    assert!(v["source"]["point"].is_null());
    let p = &v["prediction"];
    assert_eq!(p["predicted"]["settings"][0]["context"], "threaded");
    let headroom = p["predicted"]["headroom_pps"]["mean"].as_f64();
    assert!(headroom.unwrap_or(0.0) > 0.0, "{p}");

    let out = predict_threaded("n6b01-in", &["--from", f]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        said.contains("nothing on this host was read or changed"),
        "{said}"
    );
    assert!(said.contains("headroom"), "{said}");
}

#[test]
fn picks_a_lab_point_and_names_what_to_give() {
    let dir = std::env::temp_dir().join(format!("napilab-tune-predict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let record = lab_record(&dir);
    let r = record.to_str().expect("utf-8");
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "tune", "predict", "threaded", "--dev", "n6b01-in", "--from", r,
        ];
        a.extend_from_slice(extra);
        napilab(&a)
    };

    // Without --point: what to give, and which configurations there are.
    assert_fails_saying(
        &args(&[]),
        "--point CONFIGURATION[:N] (configurations: one-cpu/softirq, two-cpu/threaded)",
    );

    let out = args(&["--point", "one-cpu/softirq", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        v["source"]["point"], "one-cpu/softirq:0",
        "the sweep's first point, not the search's"
    );

    assert_fails_saying(
        &args(&["--point", "one-cpu/softirq:3"]),
        "has 1 sweep points",
    );

    assert_fails_saying(&args(&["--point", "two-cpu/threaded"]), "no Observation");

    assert_fails_saying(&args(&["--point", "four-cpu"]), "no configuration");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_refusal_says_why_and_fails() {
    let file = fixture();
    let f = file.to_str().expect("utf-8");
    let out = predict_threaded("eth9", &["--json", "--from", f]);
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let why = v["refusal"].as_str().unwrap_or_default();
    assert!(why.contains("eth9") && v["prediction"].is_null(), "{v}");

    let not_a_run = predict_threaded("n6b01-in", &["--from", f, "--point", "x"]);
    assert_fails_saying(&not_a_run, "not a lab record");
    let missing = "/nonexistent/obs.json";
    assert_fails_saying(&predict_threaded("n6b01-in", &["--from", missing]), missing);
}

#[test]
fn a_lab_runs_wake_up_probe_is_what_the_kthread_draws_from() {
    // A searching lab run probes wake-ups at its start into the record's host facts
    // (docs/lab.md, "Wake-ups"); the prediction from its point draws from them.
    let dir =
        std::env::temp_dir().join(format!("napilab-tune-predict-wake-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = lab_record(&dir);
    let mut record: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("record")).expect("JSON");
    let mut delays: Vec<f64> = vec![45_000.0; 1996];
    delays.extend([2.0e6, 3.0e6, 5.0e6, 6.8e6]);
    record["host"] = serde_json::json!({
        "wake_up": [{"cpu": 1, "waker_cpu": 0, "idle_us": 100.0, "delays_ns": delays}]
    });
    std::fs::write(&path, record.to_string()).expect("write");
    let r = path.to_str().expect("utf-8");
    let out = predict_threaded(
        "n6b01-in",
        &[
            "--cpus",
            "1",
            "--json",
            "--from",
            r,
            "--point",
            "one-cpu/softirq",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let w = &v["prediction"]["kthread_wake_up"];
    assert_eq!(w["samples_ns"].as_array().map(Vec::len), Some(2000), "{w}");
    let source = w["source"].as_str().unwrap_or_default();
    assert!(
        source.contains("2000 wake-ups of CPU 1 (4 over 1 ms"),
        "{source}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
