//! End-to-end tests of `napilab host`: it only reads /proc and /sys, so it runs
//! without root, on this host and on the probe's fixture trees.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn napilab(args: &[&str]) -> std::process::Output {
    napilab_testkit::output_of(env!("CARGO_BIN_EXE_napilab"), args)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../napilab-probe/tests/fixtures/host")
        .join(name)
}

#[test]
fn host_json_describes_this_machine() {
    let out = napilab(&["host", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    for key in [
        "cpu",
        "mitigations",
        "kernel",
        "virtualization",
        "cpuidle",
        "cpufreq_driver",
        "hz",
        "numa_nodes",
    ] {
        assert!(v.get(key).is_some(), "no {key} in {v}");
    }
    // The release is what the kernel says it is (Linux always has this file).
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    assert_eq!(v["kernel"]["release"], release.trim(), "{v}");
    // It parses back into the type records carry.
    let id: napilab_core::HostIdentity = serde_json::from_value(v).expect("HostIdentity");
    assert!(id.summary().contains(release.trim()));
}

#[test]
fn host_text_starts_with_the_summary_then_one_line_per_field() {
    let root = fixture("amd-kvm");
    let out = napilab(&["host", "--root", root.to_str().expect("utf-8 path")]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(
            "host: AMD EPYC (family 25 model 1 stepping 1, microcode 0x1000065), Linux 6.18.44-fc-v782, KVM"
        )
    );
    let rest: Vec<&str> = lines.collect();
    for (name, value) in [
        ("cpu vendor", "AuthenticAMD"),
        ("cpufreq driver", "none"),
        ("cpuidle governor", "menu"),
        ("hypervisor", "KVM (from available clocksource kvm-clock)"),
        ("steal time", "yes (228 ticks since boot)"),
        ("mitigation spectre_v1", "Mitigation: usercopy/swapgs"),
    ] {
        assert!(
            rest.iter()
                .any(|l| l.trim_start().starts_with(name) && l.contains(value)),
            "no line {name}: {value} in\n{text}"
        );
    }
    // An empty tree: every field unknown, the kernel config unreadable, and no failure.
    let empty = fixture("stripped");
    let out = napilab(&["host", "--root", empty.to_str().expect("utf-8 path")]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("host: CPU unknown, kernel unknown, virtualization unknown\n"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("kernel config sha256") && l.ends_with("unreadable")),
        "{text}"
    );
}

/// `--speed` times the same work on the CPUs asked for and gives every sample and the
/// spread against the fastest.
#[test]
fn speed_times_the_work_on_each_cpu_asked_for() {
    let out = napilab(&["host", "--json", "--speed", "0.4", "--cpus", "0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v["identity"]["kernel"].is_object(), "{v}");
    let speed = v["speed"].as_array().expect("speed");
    assert_eq!(speed.len(), 1, "{v}");
    assert_eq!(speed[0]["samples"]["cpu"], 0);
    assert_eq!(
        speed[0]["samples"]["ns_per_unit"].as_array().map(Vec::len),
        Some(2)
    );
    let median = speed[0]["spread"]["median_slowdown"]
        .as_f64()
        .expect("median");
    assert!(median >= 1.0, "{v}");
    let text = napilab(&["host", "--speed", "0.2", "--cpus", "0"]);
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("speed: CPU 0, 1 samples of 200 ms"));
}

#[test]
fn speed_refuses_a_bad_duration_or_cpu_list_and_says_what_to_give() {
    let out = napilab(&["host", "--speed", "0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--speed 0: give between 0.2 and 3600 seconds"),
        "{err}"
    );
    let out = napilab(&["host", "--speed", "1", "--cpus", "x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cpus: \"x\" is not a CPU list"), "{err}");
}

/// `--wake-up` wakes a thread on each CPU asked for from the next, after a short and a
/// long idle gap, and gives every delay with its median; one CPU or `--cpus` alone is
/// refused with what to give.
#[test]
fn wake_up_times_each_cpu_woken_from_the_next() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        println!(
            "SKIPPED wake_up_times_each_cpu_woken_from_the_next: needs two CPUs, this host has one"
        );
        return;
    }
    let out = napilab(&["host", "--json", "--wake-up", "--cpus", "0,1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let woken: Vec<(u64, u64, f64, usize)> = v["wake_up"]
        .as_array()
        .expect("wake_up")
        .iter()
        .map(|w| {
            let s = &w["samples"];
            (
                s["cpu"].as_u64().expect("cpu"),
                s["waker_cpu"].as_u64().expect("waker"),
                s["idle_us"].as_f64().expect("idle"),
                s["delays_ns"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    assert_eq!(
        woken,
        [
            (0, 1, 100.0, 200),
            (1, 0, 100.0, 200),
            (0, 1, 2000.0, 200),
            (1, 0, 2000.0, 200)
        ],
        "{v}"
    );
    for w in v["wake_up"].as_array().expect("wake_up") {
        assert!(w["median_ns"].as_f64().expect("median") > 0.0, "{w}");
    }
    // --wake-ups sets the count, bounded, and only with --wake-up.
    let few = napilab(&[
        "host",
        "--json",
        "--wake-up",
        "--wake-ups",
        "30",
        "--cpus",
        "0,1",
    ]);
    assert!(
        few.status.success(),
        "{}",
        String::from_utf8_lossy(&few.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&few.stdout).expect("json");
    let counts: Vec<usize> = v["wake_up"]
        .as_array()
        .expect("wake_up")
        .iter()
        .map(|w| w["samples"]["delays_ns"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(counts, [30, 30, 30, 30], "{counts:?}");
    let none = napilab(&["host", "--wake-up", "--wake-ups", "0", "--cpus", "0,1"]);
    assert!(!none.status.success());
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(err.contains("--wake-ups 0: give between 1 and"), "{err}");
    let without = napilab(&["host", "--wake-ups", "30"]);
    assert!(!without.status.success());
    let one = napilab(&["host", "--wake-up", "--cpus", "1"]);
    assert!(!one.status.success());
    let err = String::from_utf8_lossy(&one.stderr);
    assert!(err.contains("--wake-up needs two CPUs or more"), "{err}");
    let alone = napilab(&["host", "--cpus", "0"]);
    assert!(!alone.status.success());
    let err = String::from_utf8_lossy(&alone.stderr);
    assert!(err.contains("give one of them too"), "{err}");
}

/// `--timer` measures each CPU asked for: programming its timer device and a 20 us
/// timer re-armed as it fires, with the share of the CPU such a timer takes at most.
/// Values depend on the host (well under a microsecond on bare metal, tens on some
/// VMs) and are not judged; that every CPU asked for has them, and only those, is.
#[test]
fn timer_measures_each_cpu_asked_for() {
    let out = napilab(&["host", "--json", "--timer", "--cpus", "0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let timers = v["timer"].as_array().expect("timer");
    assert_eq!(timers.len(), 1, "{v}");
    let t = &timers[0];
    let s = &t["samples"];
    assert_eq!(s["cpu"], 0, "{v}");
    assert_eq!(s["period_ns"].as_f64(), Some(20_000.0), "{v}");
    assert!(s["expiries_per_s"].as_f64().expect("rate") > 0.0, "{v}");
    for field in ["reprogram_ns", "ns_per_expiry"] {
        assert!(
            s[field].as_f64().is_some_and(f64::is_finite),
            "{field}: {v}"
        );
    }
    let share = t["max_share"].as_f64().expect("max_share");
    assert!((0.0..1.0).contains(&share), "{v}");
    assert!(v["identity"].is_object(), "{v}");
}

/// `--stalls SECONDS` spins on each CPU asked for and gives its stalls by length beside
/// the steal /proc/stat counted; a length out of range is refused with the range.
#[test]
fn stalls_spin_on_each_cpu_asked_for() {
    let out = napilab(&["host", "--json", "--stalls", "0.3", "--cpus", "0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let stalls = v["stalls"].as_array().expect("stalls");
    assert_eq!(stalls.len(), 1, "{v}");
    let s = &stalls[0];
    assert_eq!(s["cpu"], 0, "{v}");
    assert!(
        (0.25..1.0).contains(&s["seconds"].as_f64().expect("seconds")),
        "{v}"
    );
    assert_eq!(s["counts"].as_array().map(Vec::len), Some(25), "{v}");
    for field in ["per_s", "stalled_share", "steal_share"] {
        assert!(s[field].as_f64().is_some_and(|x| x >= 0.0), "{field}: {v}");
    }
    let bad = napilab(&["host", "--stalls", "0"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("--stalls 0: give between 0.1 and"), "{err}");
}
