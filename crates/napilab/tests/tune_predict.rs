//! `napilab tune plan PROFILE --predict` on a live host (root): a veth pair in two
//! namespaces of its own, a UDP flood from `a` into `vb` (GRO on, so vb has a NAPI
//! instance), and napilab run inside `b`. Asserts the prediction's mechanisms and its
//! refusals, not timings. Prints `SKIPPED <test>: <why>` when not root or when the
//! trace tier (BPF) cannot run.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use napilab_testkit::{root_or_skip, VethPair};
use serde_json::Value;

/// Sends 64-byte datagrams from `ns` to vb until `stop` (nobody listens on the port:
/// vb's host drops them after the poll and the IP stack, which is the work measured).
fn flood(ns: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        napilab_probe::netns::enter(&ns).expect("netns");
        let sock = UdpSocket::bind("10.77.0.1:0").expect("bind");
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..64 {
                let _ = sock.send_to(&[0u8; 64], ("10.77.0.2", 9));
            }
        }
    })
}

/// `napilab tune plan ARGS --predict --json` in vb's namespace; its JSON and whether it
/// exited 0.
fn plan_predict(pair: &VethPair, args: &[&str]) -> (Value, bool) {
    let out = pair
        .command(&pair.b, env!("CARGO_BIN_EXE_napilab"))
        .args(["tune", "plan"])
        .args(args)
        .args(["--predict", "--json"])
        .output()
        .expect("run napilab");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (json, out.status.success())
}

fn sum(cpus: &Value, field: &str) -> f64 {
    cpus.as_array()
        .expect("cpus")
        .iter()
        .map(|c| c[field]["mean"].as_f64().expect("figure mean"))
        .sum()
}

fn pair_or_skip(name: &str, tag: &str) -> Option<VethPair> {
    if !root_or_skip(name, "needs root for namespaces and the trace tier") {
        return None;
    }
    match VethPair::create("napilab-tune", tag, false) {
        Ok(p) => Some(p),
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            None
        }
    }
}

#[test]
fn threaded_prediction_moves_the_poll_into_a_kthread() {
    let name = "threaded_prediction_moves_the_poll_into_a_kthread";
    let Some(pair) = pair_or_skip(name, "pred") else {
        return;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let sender = flood(pair.a.clone(), stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    let (out, ok) = plan_predict(&pair, &["threaded", "--dev", "vb", "--for", "2s"]);
    stop.store(true, Ordering::Relaxed);
    let _ = sender.join();
    assert!(ok, "plan of threaded on vb failed: {out:#}");
    assert_eq!(out["schema"], "napilab.tune-plan-predict/1");
    assert!(
        out["plan"]["changes"].is_array(),
        "the plan is there: {out:#}"
    );
    if let Some(r) = out["refusal"].as_str() {
        if r.contains("trace tier") {
            println!("SKIPPED {name}: {r}");
            return;
        }
        panic!("prediction refused under load: {r}");
    }
    let p = &out["prediction"];
    assert_eq!(p["schema"], "napilab.tune-prediction/1");
    assert_eq!(p["current"]["settings"][0]["context"], "softirq", "{p:#}");
    assert_eq!(
        p["predicted"]["settings"][0]["context"], "threaded",
        "{p:#}"
    );
    // The mechanism: the poll's CPU leaves the softirq for the NAPI kthread.
    let (cur, new) = (&p["current"]["cpus"], &p["predicted"]["cpus"]);
    assert!(
        sum(cur, "napi_thread") < 0.005,
        "softirq polling has no kthread CPU: {cur:#}"
    );
    assert!(
        sum(new, "napi_thread") > 0.01,
        "threaded: kthread CPU: {new:#}"
    );
    assert!(
        sum(new, "softirq") < sum(cur, "softirq"),
        "threaded takes the poll out of the softirq: {cur:#} -> {new:#}"
    );
    // Every figure has an interval around its mean.
    for c in new.as_array().expect("cpus") {
        let f = &c["polls_per_s"];
        let (lo, mean, hi) = (
            f["low"].as_f64().expect("low"),
            f["mean"].as_f64().expect("mean"),
            f["high"].as_f64().expect("high"),
        );
        assert!(lo <= mean && mean <= hi, "{f}");
    }
    // The twin of the current settings carries the observed load and, fitted, its CPU.
    let measured_pps = p["measured"]["packets_per_s"].as_f64().expect("pps");
    let twin_pps = p["current"]["packets_per_s"]["mean"].as_f64().expect("pps");
    assert!(
        (twin_pps / measured_pps - 1.0).abs() < 0.3,
        "twin {twin_pps:.0} vs measured {measured_pps:.0} packets/s"
    );
    let measured_ns = p["measured"]["cpu_ns_per_packet"].as_f64().expect("ns");
    let twin_ns = p["current"]["cpu_ns_per_packet"]["mean"]
        .as_f64()
        .expect("ns");
    assert!(
        (twin_ns / measured_ns - 1.0).abs() < 0.15,
        "the fit: twin {twin_ns:.0} vs measured {measured_ns:.0} ns per packet"
    );
    let assumed: Vec<&str> = p["assumed"]
        .as_array()
        .expect("assumed")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        assumed.iter().any(|a| a.contains("scaled by")),
        "the fit is stated: {assumed:#?}"
    );
    println!(
        "{name}: measured {measured_pps:.0} pps, {measured_ns:.0} ns/packet; twin current {twin_ns:.0} ns/packet, predicted {:.0} ns/packet; fit factor {}",
        p["predicted"]["cpu_ns_per_packet"]["mean"].as_f64().unwrap_or(0.0),
        p["fit_factor"]
    );
}

#[test]
fn prediction_refuses_without_load_and_without_the_kernel() {
    let name = "prediction_refuses_without_load_and_without_the_kernel";
    let Some(pair) = pair_or_skip(name, "idle") else {
        return;
    };
    // No flood: nothing to fit.
    let (out, ok) = plan_predict(&pair, &["threaded", "--dev", "vb", "--for", "1s"]);
    assert!(ok, "the plan itself is fine: {out:#}");
    assert!(out["prediction"].is_null(), "{out:#}");
    let r = out["refusal"].as_str().expect("a refusal");
    if r.contains("trace tier") {
        println!("SKIPPED {name}: {r}");
        return;
    }
    assert!(
        r.contains("too little load") && r.contains("1000 packets/s"),
        "the refusal names the threshold: {r}"
    );
    // Threaded busy polling on a kernel before 6.19: refused by the twin too, naming
    // the kernel, whatever the load.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let version: Vec<u32> = release
        .trim()
        .split(['.', '-'])
        .take(2)
        .filter_map(|p| p.parse().ok())
        .collect();
    if version.as_slice() >= [6, 19].as_slice() {
        println!(
            "SKIPPED {name} (busy-poll part): this kernel {release} has threaded busy polling"
        );
        return;
    }
    let (out, _) = plan_predict(&pair, &["threaded-busy-poll", "--dev", "vb", "--for", "1s"]);
    let r = out["refusal"].as_str().expect("a refusal");
    assert!(
        r.contains("6.19") && r.contains(release.trim()),
        "the refusal names the kernel: {r}"
    );
}
