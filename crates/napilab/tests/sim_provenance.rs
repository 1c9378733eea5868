//! `napilab sim run` shows where each profile parameter comes from,
//! in its JSON (the configuration's settings, which the report renders) and its text.

use std::path::PathBuf;
use std::process::Command;

fn scenario() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/studies/ap-e2w.toml")
}

#[test]
fn sim_run_json_and_text_carry_every_parameters_source() {
    let base = [
        "sim",
        "run",
        "--profile",
        "ap-cortex-a72-bcmgenet",
        "--loads",
        "8300",
        "--no-report",
    ];
    let v = napilab_testkit::stdout_json(
        Command::new(env!("CARGO_BIN_EXE_napilab"))
            .args(base)
            .arg(scenario())
            .arg("--json"),
    );
    let settings = v["configurations"][0]["settings"]
        .as_array()
        .expect("settings");
    let source = |key: &str| -> String {
        settings
            .iter()
            .find(|p| p[0] == format!("source: {key}"))
            .and_then(|p| p[1].as_str())
            .unwrap_or_else(|| panic!("no source for {key}: {settings:?}"))
            .to_string()
    };
    assert!(source("stage_cycles.xmit").contains("published: docs/studies.md#ap-5"));
    assert!(source("stage_cycles.unmapped").starts_with("4047 (calibrated: docs/studies.md#ap-10"));
    assert!(source("latency_ns.rx_dma").contains("assumed:"));
    let n = settings
        .iter()
        .filter(|p| p[0].as_str().is_some_and(|k| k.starts_with("source: ")))
        .count();
    // 21 costs and latencies, the NIC's 5 interrupt moderation settings (rx-usecs,
    // rx-frames, adaptive-rx, tx-usecs, tx-frames), each from its driver's source, and
    // the WiFi device's threaded IRQ with the thread's 2 costs.
    assert_eq!(n, 29, "one source per parameter: {settings:?}");
    assert!(source("nic.egress.irq_threaded").contains("devm_request_threaded_irq"));
    assert!(settings
        .iter()
        .all(|p| !p[1].as_str().unwrap_or("").contains("source not given")));

    let text = Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args(base)
        .arg(scenario())
        .output()
        .expect("run napilab");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("where each parameter comes from"), "{text}");
    assert!(
        text.contains("fixed_cycles.hardirq = 12444 (calibrated:"),
        "{text}"
    );
}
