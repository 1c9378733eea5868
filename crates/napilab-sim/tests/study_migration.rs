//! The studies' scenarios (scenarios/studies/) with their hardware profiles replace the
//! twin configuration files of earlier releases (kept in tests/fixtures/legacy/). Each
//! replacement must give the twin the same model and the same results for the same
//! seed: these tests are how the migration is shown to change nothing.

use napilab_core::PointRole;
use napilab_sim::{studies, Profile, SimConfig, SimResult};

fn legacy(name: &str) -> SimConfig {
    let path = format!(
        "{}/tests/fixtures/legacy/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    SimConfig::from_file(std::path::Path::new(&path)).unwrap_or_else(|e| panic!("{e}"))
}

/// Old file and new scenario at a short window, same seed: (old, new) results.
fn both(name: &str, duration_ms: f64) -> (SimResult, SimResult, SimConfig, SimConfig) {
    let (study, configuration) =
        studies::replacement(name).unwrap_or_else(|| panic!("{name}: no replacement"));
    let (mut new, profile) =
        studies::config(study, configuration).unwrap_or_else(|e| panic!("{e}"));
    let mut old = legacy(name);
    old.host.sched_scaling = sched_scaling_of(&old, &new);
    for c in [&mut old, &mut new] {
        c.measurement.duration_ms = duration_ms;
        c.measurement.warmup_ms = duration_ms / 4.0;
    }
    let base = Profile::builtin(profile.name.as_str()).unwrap_or_else(|e| panic!("{e}"));
    let r_old = napilab_sim::run(&old, &base, 7);
    let r_new = napilab_sim::run(&new, &profile, 7);
    (r_old, r_new, old, new)
}

/// The old files predate `host.sched_scaling`: the WireGuard profile now runs CFS as
/// the kernel scales it for its 18 CPUs (`log`), a model change made after the
/// migration, so an old WireGuard file is compared with that setting; every other file
/// keeps its own (the default, `none`).
fn sched_scaling_of(old: &SimConfig, new: &SimConfig) -> napilab_sim::config::SchedScaling {
    if old.tunnel.is_some() {
        new.host.sched_scaling
    } else {
        old.host.sched_scaling
    }
}

/// The figures the migration must keep: offered, forwarded, dropped, IRQs and polls.
fn figures(r: &SimResult, rate: f64) -> Vec<(String, f64)> {
    let p = r.to_point(PointRole::Sweep, rate, 0);
    let mut out = vec![
        ("offered_pps".to_string(), p.offered_pps),
        ("delivered_pps".to_string(), p.delivered_pps()),
        ("loss_ratio".to_string(), p.loss_ratio()),
    ];
    let m = serde_json::to_value(&r.model.totals).expect("json");
    for (i, cpu) in m["cpus"].as_array().expect("cpus").iter().enumerate() {
        for key in [
            "rx_irqs_per_s",
            "packets_per_poll",
            "busy",
            "softirq_inline",
        ] {
            let v = cpu[key].as_f64().unwrap_or(0.0);
            out.push((format!("cpu{i}.{key}"), v));
        }
    }
    out
}

fn same(name: &str, duration_ms: f64) {
    let (r_old, r_new, old, _) = both(name, duration_ms);
    let rate = old.traffic.rate_pps;
    let (a, b) = (figures(&r_old, rate), figures(&r_new, rate));
    // A CPU the old file did not model (the AP's single-core configuration on the
    // two-core AP profile) must be idle in the new run.
    for (k, v) in &b[a.len().min(b.len())..] {
        assert!(
            *v == 0.0,
            "{name}: {k} = {v} on a CPU the old file did not model"
        );
    }
    for ((k, x), (_, y)) in a.iter().zip(&b) {
        let tol = 1e-9 * x.abs().max(1.0);
        assert!((x - y).abs() <= tol, "{name}: {k}: old {x}, new {y}");
    }
    assert!(a[1].1 > 0.0, "{name}: nothing delivered");
}

/// The model itself is the old file's, field for field (the name aside; the AP's
/// single-core configuration runs on the two-core AP profile with core 1 idle).
#[test]
fn every_legacy_file_maps_to_the_same_model() {
    for (name, study, configuration) in studies::LEGACY {
        let (mut new, _) = studies::config(study, configuration).unwrap_or_else(|e| panic!("{e}"));
        let mut old = legacy(name);
        old.host.sched_scaling = sched_scaling_of(&old, &new);
        old.name.clear();
        new.name.clear();
        if name.ends_with("single-core") {
            assert_eq!((old.host.cpus, new.host.cpus), (1, 2), "{name}");
            new.host.cpus = 1;
        }
        // The router profile now names how its ixgbe ports moderate (ITR throttling);
        // with throttling off (rx-usecs / tx-usecs 0) that is no moderation, as the
        // old files' timer with 0 us (tests/moderation.rs
        // rx_usecs_zero_disables_throttling; the results test above compares the runs).
        use napilab_sim::config::Moderation;
        let off = |m: Moderation, usecs: u32| m == Moderation::IxgbeItr && usecs == 0;
        if off(new.ingress.moderation, new.ingress.rx_usecs) && !new.ingress.adaptive_rx {
            new.ingress.moderation = Moderation::Timer;
        }
        if off(new.egress.moderation, new.egress.tx_usecs) {
            new.egress.moderation = Moderation::Timer;
        }
        assert_eq!(old, new, "{name} vs {study} {configuration}");
    }
}

#[test]
fn wireguard_results_are_unchanged() {
    for name in [
        "wg-softirq",
        "wg-threaded",
        "wg-threaded-pinned",
        "wg-workqueue",
    ] {
        same(name, 8.0);
    }
}

#[test]
fn router_results_are_unchanged() {
    for name in ["router-sq", "router-rr", "router-ll-rr", "router-ll-wfq"] {
        same(name, 20.0);
    }
}

#[test]
fn ap_results_are_unchanged() {
    for name in [
        "ap-e2w-single-core",
        "ap-e2w-dual-core",
        "ap-w2e-single-core",
        "ap-w2e-dual-core",
    ] {
        same(name, 200.0);
    }
}

/// Every study under scenarios/studies/ is shipped, parses, names its profile, and the
/// lab refuses the ones with twin-only configurations by name.
#[test]
fn every_study_is_shipped_and_the_lab_says_what_it_cannot_run() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/studies");
    for f in std::fs::read_dir(dir).expect("studies") {
        let p = f.expect("entry").path();
        let rel = format!(
            "scenarios/studies/{}",
            p.file_name().expect("name").to_string_lossy()
        );
        assert!(
            studies::STUDIES.iter().any(|(s, _)| *s == rel),
            "{rel} is not in studies::STUDIES"
        );
    }
    for (path, text) in studies::STUDIES {
        let s = studies::scenario(path).unwrap_or_else(|e| panic!("{e}"));
        let profile = s.twin.profile.clone().expect("a study names its profile");
        Profile::builtin(&profile).unwrap_or_else(|e| panic!("{path}: {e}"));
        let twin_only = napilab_core::scenario::twin_only_configurations(&s);
        let lab = napilab_core::scenario::parse(text, path, Some(32));
        match (twin_only.is_empty(), lab) {
            (true, _) => {}
            (false, Ok(_)) => panic!("{path}: the lab accepted twin-only configurations"),
            (false, Err(e)) => {
                let e = e.to_string();
                for (name, _) in &twin_only {
                    assert!(e.contains(&format!("{name:?}")), "{path}: {e}");
                }
                assert!(e.contains("napilab sim run"), "{path}: {e}");
            }
        }
    }
}
