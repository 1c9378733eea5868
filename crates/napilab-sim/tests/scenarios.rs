//! Every twin configuration of earlier releases (tests/fixtures/legacy/) parses with
//! every shipped profile and runs briefly: the format is still read for one release.

use napilab_sim::profile::builtin_profiles;
use napilab_sim::{Profile, SimConfig};

const SCENARIOS: &[(&str, &str)] = &[
    (
        "router-sq.toml",
        include_str!("fixtures/legacy/router-sq.toml"),
    ),
    (
        "ap-e2w-single-core.toml",
        include_str!("fixtures/legacy/ap-e2w-single-core.toml"),
    ),
    (
        "server-irq-suspend.toml",
        include_str!("fixtures/legacy/server-irq-suspend.toml"),
    ),
    (
        "ap-e2w-dual-core.toml",
        include_str!("fixtures/legacy/ap-e2w-dual-core.toml"),
    ),
    (
        "ap-w2e-single-core.toml",
        include_str!("fixtures/legacy/ap-w2e-single-core.toml"),
    ),
    (
        "ap-w2e-dual-core.toml",
        include_str!("fixtures/legacy/ap-w2e-dual-core.toml"),
    ),
    (
        "router-rr.toml",
        include_str!("fixtures/legacy/router-rr.toml"),
    ),
    (
        "router-ll-rr.toml",
        include_str!("fixtures/legacy/router-ll-rr.toml"),
    ),
    (
        "router-ll-wfq.toml",
        include_str!("fixtures/legacy/router-ll-wfq.toml"),
    ),
];

#[test]
fn shipped_scenarios_run() {
    for (name, text) in SCENARIOS {
        let mut cfg = SimConfig::from_toml_str(text, name).expect("shipped scenario parses");
        cfg.measurement.duration_ms = 5.0;
        cfg.measurement.interval_ms = None;
        let w2e = Profile::from_toml_str(
            include_str!("../profiles/ap-cortex-a72-w2e.toml"),
            "profiles/ap-cortex-a72-w2e.toml",
        )
        .expect("shipped profile parses");
        let profiles = builtin_profiles()
            .filter(|(n, _)| *n != "ap-cortex-a72-w2e")
            .map(|(n, _)| (n.to_string(), Profile::builtin(n).expect("profile")))
            .chain([("ap-cortex-a72-w2e".to_string(), w2e)]);
        let threaded = [cfg.ingress.irq_mode, cfg.egress.irq_mode]
            .contains(&napilab_sim::config::IrqMode::Threaded);
        for (pname, p) in profiles {
            if threaded && p.irq_thread.is_none() {
                // A threaded IRQ needs the profile's [irq_thread] costs: refused, named.
                let e = napilab_sim::try_run(&cfg, &p, 1).expect_err("no [irq_thread]");
                assert_eq!(e.field, "irq_thread", "{name} on {pname}");
                continue;
            }
            let r = napilab_sim::run(&cfg, &p, 1);
            let t = &r.model.totals;
            assert!(t.offered_pps > 0.0, "{name} on {pname}");
            assert!(t.forwarded_pps > 0.0, "{name} on {pname}");
        }
    }
}

#[test]
fn irq_suspend_scenario_keeps_irqs_off_under_load() {
    let (name, text) = SCENARIOS[2];
    let mut cfg = SimConfig::from_toml_str(text, name).expect("parses");
    cfg.measurement.duration_ms = 40.0;
    let p = Profile::builtin("router-e3-1230-ixgbe").expect("profile");
    let r = napilab_sim::run(&cfg, &p, 1);
    let c = &r.model.totals.cpus[0];
    assert!(c.rx_irqs_per_s < 1_000.0, "{}", c.rx_irqs_per_s);
    assert!(r.observation.intervals.len() == 1);
}
