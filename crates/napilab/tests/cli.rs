//! End-to-end tests of the CLI that need no root: bad input gets a clear error, and a
//! recording made on this kind of machine under forwarding load replays to the
//! documented JSON shape with the expected findings.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn napilab(args: &[&str]) -> std::process::Output {
    napilab_testkit::output_of(env!("CARGO_BIN_EXE_napilab"), args)
}

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

#[test]
fn replay_of_a_missing_file_names_it_and_says_what_to_do() {
    let out = napilab(&["observe", "--replay", "/nonexistent/napilab.jsonl"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/napilab.jsonl"), "{err}");
    assert!(err.contains("--record"), "{err}");
}

#[test]
fn replay_of_a_foreign_file_is_refused_with_the_line() {
    let dir = std::env::temp_dir().join(format!("napilab-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let file = dir.join("not-a-recording.jsonl");
    std::fs::write(&file, "{\"hello\": 1}\n").expect("write");
    let out = napilab(&["observe", "--replay", file.to_str().expect("path")]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 1") && err.contains("not a napilab recording"),
        "{err}"
    );
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `--start-at`: the first sample waits for the given time, and the Observation's start
/// is that first sample, not the process start.
#[test]
fn observe_starts_its_window_at_the_given_time() {
    let at = unix_ms() + 1500;
    let out = napilab(&[
        "observe",
        "--json",
        "--no-map",
        "--for",
        "200ms",
        "--interval",
        "200ms",
        "--start-at",
        &at.to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let obs: Value = serde_json::from_slice(&out.stdout).expect("Observation JSON");
    let started = obs["origin"]["started_unix_ms"].as_u64().expect("started");
    assert!(started >= at, "started {started}, asked {at}");
    let far = (unix_ms() + 3_600_000).to_string();
    let out = napilab(&["observe", "--start-at", &far, "--for", "1s"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--start-at") && err.contains("ahead"), "{err}");
}

#[test]
fn too_short_interval_is_refused() {
    let out = napilab(&["observe", "--interval", "10ms", "--for", "1s"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--interval"));
}

#[test]
fn raise_timing_without_tracing_is_refused_naming_what_it_needs() {
    let out = napilab(&["observe", "--trace-raise-always", "--for", "1s"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--trace") && err.contains("--trace-packets"),
        "{err}"
    );
}

#[test]
fn bad_duration_is_refused_by_name() {
    let out = napilab(&["observe", "--for", "ten seconds"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--for"));
}

#[test]
fn root_without_proc_is_refused() {
    let out = napilab(&["observe", "--root", "/nonexistent-root", "--for", "1s"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("proc/stat"));
}

/// Recorded on this project's VM (2 CPUs, Linux 6.18, HZ=250, tick accounting) while a
/// three-namespace veth router forwarded a UDP flood: see tests/fixtures/README.md.
#[test]
fn forwarding_recording_replays_with_findings() {
    let rec = fixture("forwarding.recording.jsonl");
    let out = napilab(&["observe", "--json", "--replay", rec.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let obs: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(obs["schema"], "napilab.observation/1");
    assert_eq!(obs["origin"]["kind"], "replay");
    assert_eq!(obs["host"]["hz"]["value"], 250);
    assert_eq!(obs["host"]["accounting"], "tick_sampled");
    let intervals = obs["intervals"].as_array().expect("intervals");
    assert!(!intervals.is_empty());
    let cpu0 = &intervals[0]["cpus"][0];
    for field in ["net_rx_softirqs", "softnet_processed", "hardirqs"] {
        assert_eq!(cpu0[field]["source"], "proc", "{field}: {cpu0:#}");
    }
    assert_eq!(cpu0["time"]["softirq"]["source"], "tick");
    assert!(cpu0["packets_per_net_rx_softirq"]["derived"].is_string());
    let rules: Vec<&str> = obs["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["rule"].as_str())
        .collect();
    for expected in [
        "tick_sampled_accounting",
        "egress_without_qdisc",
        "softirqs_exceed_rx_irqs",
    ] {
        assert!(
            rules.contains(&expected),
            "{expected} missing from {rules:?}"
        );
    }
    // The report renders from the same recording.
    let text = napilab(&["observe", "--replay", rec.to_str().expect("path")]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("Per CPU") && text.contains("Findings"),
        "{text}"
    );
}

/// The twin through the CLI: a sweep and a maximum-throughput search on the software
/// router of the ingress-QoS study (published maximum about 1.75 Mpps,
/// docs/studies.md QOS-1).
#[test]
fn sim_run_gives_a_deterministic_model_run_record() {
    let run_twin = |extra: &[&str]| -> Value {
        let mut args = vec![
            "sim",
            "run",
            config_path_str(),
            "--profile",
            "router-e3-1230-ixgbe",
            "--json",
            "--no-report",
        ];
        args.extend_from_slice(extra);
        let out = napilab(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let run = run_twin(&["--loads", "0.5M,1.5M", "--max-search"]);
    assert_eq!(run["schema"], "napilab.run/1");
    assert_eq!(run["kind"], "model");
    let config = &run["configurations"][0];
    assert_eq!(config["points"][0]["requested_pps"], 500_000.0);
    assert_eq!(
        config["points"][0]["observation"]["origin"]["kind"],
        "model"
    );
    let max = config["max_throughput"]["pps"].as_f64().expect("max pps");
    assert!((1.6e6..1.9e6).contains(&max), "twin maximum {max}");
    // Deterministic for a seed: the same points twice.
    let once = run_twin(&["--loads", "0.5M"]);
    let again = run_twin(&["--loads", "0.5M"]);
    assert_eq!(
        once["configurations"][0]["points"],
        again["configurations"][0]["points"]
    );
}

fn config_path_str() -> &'static str {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/studies/router-sq.toml"
    )
}

#[test]
fn sim_run_refuses_an_unknown_profile_by_name() {
    let out = napilab(&[
        "sim",
        "run",
        config_path_str(),
        "--profile",
        "nosuch",
        "--no-report",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nosuch") && err.contains("router-e3-1230-ixgbe"),
        "{err}"
    );
}

#[test]
fn sim_run_writes_the_same_report_as_the_lab() {
    let dir = std::env::temp_dir().join(format!("napilab-sim-report-{}", std::process::id()));
    let db = dir.join("napilab.db");
    let out = napilab(&[
        "sim",
        "run",
        config_path_str(),
        "--profile",
        "router-e3-1230-ixgbe",
        "--loads",
        "1M",
        "--db",
        db.to_str().expect("path"),
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let html = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("report.html"))
        .find(|p| p.exists());
    let html = html.and_then(|p| std::fs::read_to_string(p).ok());
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("report.html"), "{err}");
    let html = html.expect("report.html written");
    assert!(
        html.contains("<svg") && html.contains("twin"),
        "report lacks plots or twin labels"
    );
}

/// A reader that stops early (`napilab ... --json | head`) ends a read-only command
/// quietly by SIGPIPE, as Unix tools do, instead of a panic in println!.
#[test]
fn a_closed_pipe_ends_a_read_only_command_without_a_panic() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let sim = PathBuf::from(config_path_str());
    let mut child = Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args(["sim", "run"])
        .arg(&sim)
        .args([
            "--profile",
            "router-e3-1230-ixgbe",
            // Eight points: about 200 KB of JSON, more than a pipe buffer holds.
            "--loads",
            "0.1M,0.2M,0.3M,0.4M,0.5M,0.6M,0.7M,0.8M",
            "--json",
            "--no-report",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run napilab");
    let mut first = [0u8; 16];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("some output");
    // The read end is closed here (the ChildStdout was dropped).
    let out = child.wait_with_output().expect("waits");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?} {err}",
        out.status
    );
}
