//! End-to-end test on the real kernel (root): a known number of packets through a veth
//! NAPI instance in a private namespace, then `napilab observe --json` and `napilab map
//! --json` must account for them and agree with independent kernel sources.

mod netns;

use std::process::Command;
use std::thread::sleep;
use std::time::Duration;

use netns::Netns;
use serde_json::Value;

const PACKETS: u64 = 20_000;

fn napilab(ns: &Netns, args: &[&str]) -> Value {
    let out = ns
        .command(env!("CARGO_BIN_EXE_napilab"))
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

#[test]
fn observe_counts_packets_and_maps_the_napi_thread() {
    let ns = match Netns::create("obs") {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!("SKIPPED observe_counts_packets_and_maps_the_napi_thread: {why}");
            return;
        }
    };
    ns.veth_pair(true).expect("veth pair");

    // The map: vb has one NAPI instance, polled by its kthread napi/vb-<id>.
    let map = napilab(&ns, &["map", "--json"]);
    let devices = map["topology"]["devices"].as_array().expect("devices");
    let vb = devices
        .iter()
        .find(|d| d["name"] == "vb")
        .expect("vb in map");
    assert_eq!(vb["driver"], "veth");
    let napis = vb["napis"].as_array().expect("napis");
    assert_eq!(napis.len(), 1, "{vb:#}");
    let napi_id = napis[0]["id"].as_u64().expect("napi id");
    assert_eq!(napis[0]["poller"]["kind"], "thread", "{vb:#}");
    let pid = napis[0]["poller"]["pid"].as_u64().expect("thread pid");
    // Independent source: the kernel names the thread after the instance it polls.
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("napi thread comm");
    assert_eq!(comm.trim(), format!("napi/vb-{napi_id}"));
    assert_eq!(vb["threaded"], 1);

    // Observe while exactly PACKETS echo requests cross va -> vb (and as many replies
    // come back).
    let observer = ns
        .command(env!("CARGO_BIN_EXE_napilab"))
        .args(["observe", "--for", "6s", "--interval", "500ms", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start observe");
    sleep(Duration::from_millis(1200));
    let ping = ns
        .command("ping")
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
        .expect("ping");
    let ping_out = String::from_utf8_lossy(&ping.stdout);
    assert!(
        ping_out.contains(&format!("{PACKETS} received")),
        "ping lost packets: {ping_out}"
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
    // Counted by the kernel in each interval, summed back: exactly the packets sent.
    assert_eq!(packets(&obs, "vb", "rx_packets").round() as u64, PACKETS);
    assert_eq!(packets(&obs, "va", "rx_packets").round() as u64, PACKETS);
    assert_eq!(packets(&obs, "va", "tx_packets").round() as u64, PACKETS);
    assert_eq!(
        obs["intervals"][0]["devices"][0]["rx_packets"]["source"],
        "proc"
    );

    // The NAPI thread did the work on vb and is reported with its CPU share.
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

    // Findings: veth transmits without a qdisc; NET_RX softirqs without any RX IRQ
    // (software-raised); and the tick caveat where this kernel samples ticks.
    let rules: Vec<&str> = obs["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["rule"].as_str())
        .collect();
    assert!(rules.contains(&"egress_without_qdisc"), "{rules:?}");
    assert!(
        obs["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .any(|f| f["rule"] == "egress_without_qdisc" && f["subject"]["name"] == "va"),
        "{rules:?}"
    );
    if obs["host"]["accounting"] == "tick_sampled" {
        assert!(rules.contains(&"tick_sampled_accounting"), "{rules:?}");
    }
}

#[test]
fn observe_replays_its_own_recording() {
    let ns = match Netns::create("rec") {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!("SKIPPED observe_replays_its_own_recording: {why}");
            return;
        }
    };
    ns.veth_pair(false).expect("veth pair");
    let dir = std::env::temp_dir().join(format!("napilab-rec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let file = dir.join("rec.jsonl");
    let live = napilab(
        &ns,
        &[
            "observe",
            "--for",
            "1s",
            "--interval",
            "250ms",
            "--json",
            "--record",
            file.to_str().expect("path"),
        ],
    );
    let replayed: Value = {
        let out = Command::new(env!("CARGO_BIN_EXE_napilab"))
            .args([
                "observe",
                "--json",
                "--replay",
                file.to_str().expect("path"),
            ])
            .output()
            .expect("replay");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(replayed["origin"]["kind"], "replay");
    assert_eq!(
        live["intervals"], replayed["intervals"],
        "replay must reproduce the live analysis"
    );
    assert_eq!(live["findings"], replayed["findings"]);
    assert_eq!(live["topology"], replayed["topology"]);
}
