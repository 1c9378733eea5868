//! End-to-end tests of `napilab kv-server` and `napilab kv-load`: bad input names the
//! flag (no root), and (root) the server started in one namespace answers the load
//! generator in another, and prints its statistics as JSON on SIGTERM. Namespaces
//! `nl-kv-cli-<pid>-*` from napilab-testkit, deleted on drop.

use std::process::Command;

use serde_json::Value;

fn napilab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args(args)
        .output()
        .expect("run napilab")
}

#[test]
fn bad_input_names_the_flag() {
    let out = napilab(&["kv-server", "--mode", "adaptive", "--listen", "127.0.0.1:0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--mode") && err.contains("irq-suspend"),
        "{err}"
    );

    let out = napilab(&["kv-load", "--server", "127.0.0.1:1", "--qps=-5"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("qps"), "{err}");

    let out = napilab(&[
        "kv-load",
        "--server",
        "127.0.0.1:1",
        "--closed",
        "--cpus",
        "x",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cpus"), "{err}");
}

#[test]
fn server_and_load_in_namespaces_report_json() {
    let pair = match napilab_testkit::VethPair::create("nl-kv-cli", "e2e", false) {
        Ok(p) => p,
        Err(e) => {
            println!("SKIPPED server_and_load_in_namespaces_report_json: {e}");
            return;
        }
    };
    // Started as the lab starts it (request::server_process): ready once it says it
    // listens; stopped with SIGTERM, after which it prints its statistics.
    let server = napilab_lab::request::server_process::ServerProcess::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_napilab")),
        &pair.b,
        "10.77.0.2:11211".parse().expect("address"),
        &["--keys", "1000", "--for", "20s"],
    )
    .expect("start kv-server");
    let out = napilab(&[
        "kv-load",
        "--netns",
        &pair.a,
        "--server",
        "10.77.0.2:11211",
        "--qps",
        "2000",
        "--for",
        "1s",
        "--warmup",
        "200ms",
        "--keys",
        "1000",
        "--json",
    ]);
    let stats = server.stop().expect("kv-server statistics");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let load: Value = serde_json::from_slice(&out.stdout).expect("kv-load JSON");
    assert_eq!(load["schema"], "napilab.kv-load/1");
    assert_eq!(load["errors"], 0, "{load}");
    assert_eq!(load["timeouts"], 0, "{load}");
    let achieved = load["achieved_qps"].as_f64().expect("achieved_qps");
    assert!(achieved > 1500.0 && achieved < 2500.0, "{load}");
    assert!(
        load["latency"]["p99_us"].as_f64().expect("p99") > 0.0,
        "{load}"
    );

    assert_eq!(stats.schema, "napilab.kv-server/1");
    assert_eq!(stats.engine, "napilab-kv");
    let replies = load["replies"].as_u64().expect("replies");
    assert!(stats.requests >= replies, "{stats:?}");
    assert!(stats.workers[0].epoll.returns_with_events > 0, "{stats:?}");
}

#[test]
fn list_modes_says_what_this_kernel_runs() {
    let pair = match napilab_testkit::VethPair::create("nl-kv-cli", "modes", false) {
        Ok(p) => p,
        Err(e) => {
            println!("SKIPPED list_modes_says_what_this_kernel_runs: {e}");
            return;
        }
    };
    let out = napilab(&["kv-server", "--list-modes", "--netns", &pair.b, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let modes: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let modes = modes.as_array().expect("array");
    assert_eq!(modes.len(), 5, "{modes:?}");
    for m in modes {
        // Each mode is either runnable or says why not.
        assert!(
            m["runnable"].as_bool().expect("runnable") || m["reason"].is_string(),
            "{m}"
        );
    }
    let irq = modes
        .iter()
        .find(|m| m["mode"] == "irq-suspend")
        .expect("irq-suspend listed");
    assert_eq!(irq["blocking"], true, "{irq}");
    assert_eq!(irq["params"]["prefer_busy_poll"], true, "{irq}");
}
