//! `napilab sim advise ring-budget`: the ingress-QoS study's ring-budget rule and its
//! twin check, end to end through the CLI (no root needed).

use serde_json::Value;

fn napilab(args: &[&str]) -> std::process::Output {
    napilab_testkit::output_of(env!("CARGO_BIN_EXE_napilab"), args)
}

/// The study's own example (docs/studies.md#qos-7: m = 6, rho_RT 0.3 gives b = 4),
/// with x = 500 ns and the target in microseconds (3 us = 6 packet times); the twin
/// check on the bound's model keeps the constant-rate maximum and the Poisson mean
/// under Tmax.
#[test]
fn ring_budget_json_gives_the_studys_b_and_a_passing_check() {
    let out = napilab(&[
        "sim",
        "advise",
        "ring-budget",
        "--rt-load",
        "0.3",
        "--service-ns",
        "500",
        "--target-us",
        "3",
        "--duration-ms",
        "50",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["advice"]["be_budget"], 4);
    let tmax = v["advice"]["tmax_ns"].as_f64().expect("tmax");
    assert!((tmax - 2000.0 / 0.7).abs() < 1e-6, "{tmax}");
    let check = v["check"].as_array().expect("check");
    assert_eq!(check.len(), 2);
    assert_eq!(check[0]["pattern"], "constant");
    assert_eq!(check[0]["max_within_tmax"], true, "{check:?}");
    assert_eq!(check[1]["pattern"], "poisson");
    assert_eq!(check[1]["mean_within_tmax"], true, "{check:?}");
    assert!(check[1]["rt_packets"].as_u64().expect("packets") > 10_000);
}

#[test]
fn ring_budget_refuses_bad_input_by_name() {
    let out = napilab(&[
        "sim",
        "advise",
        "ring-budget",
        "--rt-load",
        "1.5",
        "--service-ns",
        "500",
        "--target-packets",
        "6",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--rt-load"), "{err}");
    let out = napilab(&[
        "sim",
        "advise",
        "ring-budget",
        "--rt-load",
        "0.3",
        "--target-packets",
        "6",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--service-ns") && err.contains("--profile"),
        "{err}"
    );
}

/// A target no budget can meet is an answer, not an error: b = 1 already waits
/// x / (1 - rho_RT) = 2 packet times at rho_RT 0.5.
#[test]
fn ring_budget_says_when_no_budget_meets_the_target() {
    let out = napilab(&[
        "sim",
        "advise",
        "ring-budget",
        "--rt-load",
        "0.5",
        "--service-ns",
        "500",
        "--target-packets",
        "1.5",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(v["advice"]["be_budget"].is_null());
    assert!(v["advice"]["note"]
        .as_str()
        .expect("note")
        .contains("b = 1"));
    assert_eq!(v["check"].as_array().map(Vec::len), Some(0));
}
