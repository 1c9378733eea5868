//! End-to-end tests of `napilab compare` on synthetic run files.

use std::path::{Path, PathBuf};

use napilab_core::RunKind;
use napilab_report::synthetic::{SyntheticConfiguration, SyntheticRun};
use serde_json::Value;

fn napilab(args: &[&str]) -> std::process::Output {
    napilab_testkit::output_of(env!("CARGO_BIN_EXE_napilab"), args)
}

fn scratch(name: &str) -> PathBuf {
    napilab_testkit::scratch_dir(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("napilab-compare-cli-{name}"),
    )
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A run whose first configuration's capacity is `softirq_capacity`, searched three
/// times.
fn write_run(dir: &Path, run_id: &str, softirq_capacity: f64) -> PathBuf {
    write_run_on(dir, run_id, softirq_capacity, None)
}

/// The identity of a host fixture tree of the probe (an AMD or an Intel KVM guest).
fn host(name: &str) -> napilab_core::HostIdentity {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../napilab-probe/tests/fixtures/host")
        .join(name);
    napilab_probe::host_identity::read_host_identity(&root)
}

/// [`write_run`] with the host it ran on (`None`: an older record without one).
fn write_run_on(
    dir: &Path,
    run_id: &str,
    softirq_capacity: f64,
    host: Option<napilab_core::HostIdentity>,
) -> PathBuf {
    let mut synth = SyntheticRun::new(RunKind::Lab).run_id(run_id).searched(3);
    synth.configurations[0] = SyntheticConfiguration {
        name: "one-core/softirq".into(),
        capacity_pps: softirq_capacity,
        generator_limit_pps: 1e9,
    };
    let mut run = synth.build();
    run.host.identity = host;
    let path = dir.join(format!("{run_id}.json"));
    std::fs::write(&path, serde_json::to_string(&run).expect("json")).expect("write run");
    path
}

/// The verdict of the maximum-throughput row of configuration `conf`.
fn max_verdict(v: &Value, conf: &str) -> String {
    v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| {
            r["metric"]
                .as_str()
                .is_some_and(|m| m.starts_with("max throughput"))
                && r["a"].as_str().is_some_and(|a| a.ends_with(conf))
        })
        .and_then(|r| r["difference"]["verdict"].as_str())
        .unwrap_or_else(|| panic!("no max row for {conf}: {v}"))
        .to_string()
}

/// Two run.json files from different hosts (an AMD and an Intel KVM guest): the host
/// difference is named field by field, and the 20% that is significant on one host is
/// marked "different hosts" unless --across-hosts asks for a verdict.
#[test]
fn runs_from_different_hosts_are_not_called_significant_unless_asked() {
    let dir = scratch("hosts");
    let a = write_run_on(&dir, "20260101-120000-aaaa", 300e3, Some(host("amd-kvm")));
    let b = write_run_on(&dir, "20260101-130000-bbbb", 360e3, Some(host("intel-gce")));
    let out = napilab(&["compare", s(&a), s(&b), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["hosts"]["status"], "different", "{}", v["hosts"]);
    assert_eq!(v["hosts"]["across_hosts"], false);
    let fields: Vec<&str> = v["hosts"]["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .filter_map(|d| d["field"].as_str())
        .collect();
    for f in ["cpu.vendor", "cpu.model_name", "kernel.release"] {
        assert!(fields.contains(&f), "{f} not in {fields:?}");
    }
    assert!(v["hosts"]["a"]
        .as_str()
        .is_some_and(|h| h.starts_with("AMD EPYC")));
    assert!(v["hosts"]["b"]
        .as_str()
        .is_some_and(|h| h.starts_with("Intel(R) Xeon(R)")));
    assert_eq!(max_verdict(&v, "one-core/softirq"), "different hosts");
    // Not significant stays not significant: nothing to withhold.
    assert_eq!(max_verdict(&v, "two-core/threaded"), "not significant");
    // Asked for: judged across hosts.
    let out = napilab(&["compare", s(&a), s(&b), "--json", "--across-hosts"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["hosts"]["across_hosts"], true);
    assert_eq!(max_verdict(&v, "one-core/softirq"), "significant");
    // The text names what differs.
    let out = napilab(&["compare", s(&a), s(&b)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("hosts: DIFFERENT"), "{text}");
    assert!(
        text.contains("differs: cpu.vendor: A AuthenticAMD / B GenuineIntel"),
        "{text}"
    );
    assert!(text.contains("different hosts"), "{text}");
    assert!(text.contains("--across-hosts"), "{text}");
}

/// The same host on both sides: judged as before. An older run.json without identity:
/// "host unknown", judged, and no failure.
#[test]
fn same_host_is_judged_and_an_unknown_host_is_said() {
    let dir = scratch("same-host");
    let a = write_run_on(&dir, "20260101-120000-aaaa", 300e3, Some(host("amd-kvm")));
    let b = write_run_on(&dir, "20260101-130000-bbbb", 360e3, Some(host("amd-kvm")));
    let out = napilab(&["compare", s(&a), s(&b), "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["hosts"]["status"], "same", "{}", v["hosts"]);
    assert_eq!(max_verdict(&v, "one-core/softirq"), "significant");
    let old = write_run(&dir, "20260101-140000-cccc", 360e3);
    let out = napilab(&["compare", s(&a), s(&old)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("hosts: unknown"), "{text}");
    assert!(text.contains("B: host unknown"), "{text}");
    assert!(text.contains("significant"), "{text}");
}

#[test]
fn a_tuned_run_is_told_apart_from_noise() {
    let dir = scratch("ab");
    let a = write_run(&dir, "20260101-120000-aaaa", 300e3);
    // B: the softirq configuration 20% faster, the threaded one unchanged.
    let b = write_run(&dir, "20260101-130000-bbbb", 360e3);
    let html = dir.join("compare.html");
    let out = napilab(&["compare", s(&a), s(&b), "--json", "--html", s(&html)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = v["rows"].as_array().expect("rows");
    let max_row = |conf: &str| {
        rows.iter()
            .find(|r| {
                r["metric"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("max throughput"))
                    && r["a"].as_str().is_some_and(|a| a.ends_with(conf))
            })
            .unwrap_or_else(|| panic!("no max row for {conf}: {rows:?}"))
    };
    let soft = max_row("one-core/softirq");
    assert_eq!(soft["difference"]["verdict"], "significant", "{soft}");
    assert!(soft["difference"]["relative"].as_f64().expect("relative") > 0.15);
    assert!(soft["a_estimate"]["interval"]["low"].as_f64().is_some());
    let threaded = max_row("two-core/threaded");
    assert_eq!(
        threaded["difference"]["verdict"], "not significant",
        "{threaded}"
    );
    let page = std::fs::read_to_string(&html).expect("html page");
    assert!(page.contains("<svg") && page.contains("id=\"comparison\""));
}

#[test]
fn two_configurations_of_one_run_and_bad_input() {
    let dir = scratch("configs");
    let a = write_run(&dir, "20260101-120000-aaaa", 300e3);
    let out = napilab(&[
        "compare",
        s(&a),
        "--configs",
        "one-core/softirq:two-core/threaded",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("significant"), "{text}");
    // A configuration that does not exist is named, with the ones that do.
    let out = napilab(&["compare", s(&a), "--configs", "one-core/softirq:nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"nope\"") && err.contains("two-core/threaded"),
        "{err}"
    );
    // Malformed pair, and a run compared with itself without --configs.
    let out = napilab(&["compare", s(&a), "--configs", "one-core/softirq"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("X:Y"));
    let out = napilab(&["compare", s(&a)]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--configs"));
    // A file that is not a run.
    let junk = dir.join("junk.json");
    std::fs::write(&junk, "{}").expect("write");
    let out = napilab(&["compare", s(&junk), s(&a)]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a napilab run record"));
}

/// Two stored lab runs of the built-in scenario (made with the bisection, one search
/// each): every configuration is compared, and with one value a side the verdict says
/// that nothing can be concluded rather than calling a difference significant.
#[test]
fn stored_bisection_runs_compare_without_a_verdict() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../napilab-sim/tests/fixtures");
    let (a, b) = (
        fixtures.join("lab-run.json"),
        fixtures.join("lab-run-2.json"),
    );
    let out = napilab(&["compare", s(&a), s(&b), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let maxima: Vec<&Value> = v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| {
            r["metric"]
                .as_str()
                .is_some_and(|m| m.starts_with("max throughput"))
        })
        .collect();
    assert_eq!(maxima.len(), 4, "{v}");
    for r in maxima {
        let verdict = r["difference"]["verdict"].as_str().expect("verdict");
        assert!(verdict.starts_with("unknown"), "{r}");
    }
}
