//! End-to-end tests on the real kernel (root): a known number of packets through a veth
//! NAPI instance between two private namespaces, then `napilab observe --json` and
//! `napilab map --json`, run in vb's namespace, must account for them and agree with
//! independent kernel sources.

use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::Duration;

use napilab_testkit::VethPair;
use serde_json::Value;

const PACKETS: u64 = 20_000;

fn napilab(pair: &VethPair, args: &[&str]) -> Value {
    let out = pair
        .command(&pair.b, env!("CARGO_BIN_EXE_napilab"))
        .args(args)
        .output()
        .expect("run napilab");
    assert!(
        out.status.success(),
        "napilab {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("napilab --json prints JSON")
}

/// Sum over intervals of rate x duration: the packets a device counted.
fn packets(obs: &Value, device: &str, field: &str) -> f64 {
    obs["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|i| {
            let d = i["devices"]
                .as_array()
                .and_then(|ds| ds.iter().find(|d| d["name"] == device));
            d.and_then(|d| d[field]["value"].as_f64()).unwrap_or(0.0)
                * i["duration_s"].as_f64().unwrap_or(0.0)
        })
        .sum()
}

fn rules(obs: &Value) -> Vec<(String, String)> {
    obs["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["rule"].as_str().unwrap_or_default().to_string(),
                f["subject"]["name"].to_string(),
            )
        })
        .collect()
}

#[test]
fn observe_counts_packets_and_maps_the_napi_thread() {
    let pair = match VethPair::create("napilab-test", "obs", true) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED observe_counts_packets_and_maps_the_napi_thread: {why}");
            return;
        }
    };

    // The map: vb has one NAPI instance, polled by its kthread napi/vb-<id>.
    let map = napilab(&pair, &["map", "--json"]);
    let devices = map["topology"]["devices"].as_array().expect("devices");
    let vb = devices
        .iter()
        .find(|d| d["name"] == "vb")
        .expect("vb in map");
    assert_eq!(vb["driver"], "veth");
    assert_eq!(vb["threaded"], 1);
    assert_eq!(vb["qdisc"]["kind"], "noqueue");
    let napis = vb["napis"].as_array().expect("napis");
    assert_eq!(napis.len(), 1, "{vb:#}");
    let napi_id = napis[0]["id"].as_u64().expect("napi id");
    assert_eq!(napis[0]["poller"]["kind"], "thread", "{vb:#}");
    let pid = napis[0]["poller"]["pid"].as_u64().expect("thread pid");
    // Independent source: the kernel names the thread after the instance it polls.
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("napi thread comm");
    assert_eq!(comm.trim(), format!("napi/vb-{napi_id}"));

    // Observe while exactly PACKETS echo requests cross va -> vb and as many replies
    // go back.
    let observer = pair
        .command(&pair.b, env!("CARGO_BIN_EXE_napilab"))
        .args(["observe", "--for", "6s", "--interval", "500ms", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start observe");
    sleep(Duration::from_millis(1200));
    let ping = pair
        .command(&pair.a, "ping")
        .args([
            "-q",
            "-f",
            "-c",
            &PACKETS.to_string(),
            "-w",
            "4",
            "10.77.0.2",
        ])
        .output()
        .expect("ping (apt package iputils-ping; make deps installs it)");
    let ping_out = String::from_utf8_lossy(&ping.stdout);
    assert!(
        ping_out.contains(&format!("{PACKETS} received")),
        "ping lost packets: {ping_out} {}",
        String::from_utf8_lossy(&ping.stderr)
    );
    let out = observer.wait_with_output().expect("observe output");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let obs: Value = serde_json::from_slice(&out.stdout).expect("observation JSON");

    assert_eq!(obs["schema"], "napilab.observation/1");
    assert_eq!(obs["intervals"].as_array().map(Vec::len), Some(12));
    // Counted by the kernel per interval, summed back: exactly the packets sent.
    assert_eq!(packets(&obs, "vb", "rx_packets").round() as u64, PACKETS);
    assert_eq!(packets(&obs, "vb", "tx_packets").round() as u64, PACKETS);
    let vb_rx = obs["intervals"][0]["devices"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["name"] == "vb"))
        .map(|d| d["rx_packets"]["source"].clone());
    assert_eq!(vb_rx, Some(Value::from("proc")));

    // The NAPI thread is reported in the intervals with its instance.
    let thread_seen = obs["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .any(|i| {
            i["threads"].as_array().is_some_and(|ts| {
                ts.iter().any(|t| {
                    t["pid"].as_u64() == Some(pid) && t["role"]["napi_id"].as_u64() == Some(napi_id)
                })
            })
        });
    assert!(thread_seen, "napi thread missing from intervals");

    // Findings: vb answers without a qdisc at >= 1000 pkt/s on average; the tick caveat
    // where this kernel samples ticks.
    let found = rules(&obs);
    assert!(
        found.contains(&("egress_without_qdisc".into(), "\"vb\"".into())),
        "{found:?}"
    );
    if obs["host"]["accounting"] == "tick_sampled" {
        assert!(
            found.iter().any(|(r, _)| r == "tick_sampled_accounting"),
            "{found:?}"
        );
    }
}

#[test]
fn observe_replays_its_own_recording() {
    let pair = match VethPair::create("napilab-test", "rec", false) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED observe_replays_its_own_recording: {why}");
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("napilab-rec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let file = dir.join("rec.jsonl");
    let file_arg = file.to_str().expect("utf-8 path");
    let live = napilab(
        &pair,
        &[
            "observe",
            "--for",
            "1s",
            "--interval",
            "250ms",
            "--json",
            "--record",
            file_arg,
        ],
    );
    let out = Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args(["observe", "--json", "--replay", file_arg])
        .output()
        .expect("replay");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(replayed["origin"]["kind"], "replay");
    assert_eq!(live["intervals"].as_array().map(Vec::len), Some(4));
    assert_eq!(
        live["intervals"], replayed["intervals"],
        "replay must reproduce the live analysis"
    );
    assert_eq!(live["findings"], replayed["findings"]);
    assert_eq!(live["topology"], replayed["topology"]);
}
