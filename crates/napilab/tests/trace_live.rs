//! End-to-end test of `napilab observe --trace` (root): a flood through a veth NAPI
//! instance run by a NAPI kthread, observed with the BPF tier. The Observation must
//! carry trace data for the instance and name the accounting truth (the kthread's
//! packet work is "system" time for /proc/stat). Prints `SKIPPED <name>: <reason>` when
//! not root or when BPF is unavailable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use napilab_testkit::VethPair;
use serde_json::Value;

/// `napilab ARGS` (JSON out) run in vb's namespace of a fresh veth pair `tag` while a
/// flood crosses it; None (with a SKIPPED line) when the pair cannot be made.
fn json_during_flood(name: &str, tag: &str, args: &[&str]) -> Option<Value> {
    let pair = match VethPair::create("napilab-test", tag, true) {
        Ok(p) => p,
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            return None;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let sender = pair.flood(stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    let out = pair
        .command(&pair.b, env!("CARGO_BIN_EXE_napilab"))
        .args(args)
        .output()
        .expect("run napilab");
    stop.store(true, Ordering::Relaxed);
    let _ = sender.join();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("JSON"))
}

/// The intervals of `obs` with trace data; none (printed as the test's skip, with the
/// notices that say why) when the trace tier could not run.
fn traced_intervals<'a>(name: &str, obs: &'a Value) -> Option<Vec<&'a Value>> {
    let traced: Vec<&Value> = obs["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .filter(|i| !i["trace"].is_null())
        .collect();
    if traced.is_empty() {
        println!(
            "SKIPPED {name}: no trace data (BPF unavailable?): {}",
            obs["notices"]
        );
        return None;
    }
    Some(traced)
}

#[test]
fn observe_trace_reports_contexts_and_accounting_truth() {
    let name = "observe_trace_reports_contexts_and_accounting_truth";
    let Some(obs) = json_during_flood(
        name,
        "cli",
        &["observe", "--trace", "--for", "3s", "--json"],
    ) else {
        return;
    };
    let Some(traced) = traced_intervals(name, &obs) else {
        return;
    };
    let kthread_polls: u64 = traced
        .iter()
        .flat_map(|i| i["trace"]["napi"].as_array().cloned().unwrap_or_default())
        .filter(|n| n["device"] == "vb" && n["context"] == "napi_thread")
        .map(|n| n["polls"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        kthread_polls > 0,
        "no napi_thread polls of vb in {traced:#?}"
    );
    let rules: Vec<&str> = obs["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["rule"].as_str())
        .collect();
    assert!(
        rules.contains(&"accounting_truth"),
        "no accounting_truth finding: {rules:?}"
    );
}

#[test]
fn map_trace_shows_the_kthread_polling_the_instance() {
    let name = "map_trace_shows_the_kthread_polling_the_instance";
    let Some(map) = json_during_flood(name, "map", &["map", "--trace", "--for", "1s", "--json"])
    else {
        return;
    };
    let vb = map["topology"]["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .find(|d| d["name"] == "vb")
        .expect("vb in the map")
        .clone();
    let observed: Vec<Value> = vb["napis"]
        .as_array()
        .expect("napis")
        .iter()
        .flat_map(|n| {
            n["observed_polling"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    if observed.is_empty() && map["notices"].to_string().contains("--trace") {
        println!(
            "SKIPPED {name}: no trace data (BPF unavailable?): {}",
            map["notices"]
        );
        return;
    }
    assert!(
        observed.iter().any(
            |o| o["context"] == "napi_thread" && o["polls_per_s"]["value"].as_f64() > Some(0.0)
        ),
        "vb's instance not seen polled by its kthread: {observed:#?}"
    );
}

#[test]
fn observe_stages_finds_napi_kthread_time_inside_system() {
    let name = "observe_stages_finds_napi_kthread_time_inside_system";
    let Some(obs) = json_during_flood(
        name,
        "ctx",
        &["observe", "--trace", "--stages", "--for", "3s", "--json"],
    ) else {
        return;
    };
    let shares: Vec<Value> = obs["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .flat_map(|i| {
            i["trace"]["context_shares"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    if shares.is_empty() && obs["notices"].to_string().contains("stage") {
        println!("SKIPPED {name}: no stage sampler: {}", obs["notices"]);
        return;
    }
    let kthread: f64 = shares
        .iter()
        .filter(|s| s["context"] == "napi_thread")
        .filter_map(|s| s["share"]["value"].as_f64())
        .sum();
    assert!(
        kthread > 0.0,
        "no sampled NAPI-kthread time during a threaded flood: {shares:#?}"
    );
    assert!(shares.iter().all(|s| s["share"]["source"] == "sample"));
}

#[test]
fn observe_trace_packets_shows_stage_latency_and_drop_reasons() {
    let name = "observe_trace_packets_shows_stage_latency_and_drop_reasons";
    // The flood goes to a port nobody listens on: every datagram is a NO_SOCKET drop.
    let Some(obs) = json_during_flood(
        name,
        "pkt",
        &["observe", "--trace-packets", "--for", "2s", "--json"],
    ) else {
        return;
    };
    let Some(traced) = traced_intervals(name, &obs) else {
        return;
    };
    let no_socket: u64 = traced
        .iter()
        .flat_map(|i| i["trace"]["drops"].as_array().cloned().unwrap_or_default())
        .filter(|d| d["reason"] == "NO_SOCKET" && d["device"] == "vb")
        .map(|d| d["count"].as_u64().unwrap_or(0))
        .sum();
    assert!(no_socket > 0, "no NO_SOCKET drops on vb: {traced:#?}");
    let staged: u64 = traced
        .iter()
        .flat_map(|i| {
            i["trace"]["packet_stages"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|s| s["device"] == "vb")
        .map(|s| s["count"].as_u64().unwrap_or(0))
        .sum();
    assert!(staged > 0, "no stage latency on vb: {traced:#?}");
}
