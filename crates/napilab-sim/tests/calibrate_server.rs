//! The server-run calibration (`napilab sim calibrate` on a `server` topology run,
//! crate::calibrate_server).
//!
//! Fixture `server-run-twin.json`: a run of scenarios/server-calibrate.toml made by
//! the twin with known server costs (app_user 2,400 + app_kernel 5,600, epoll return
//! 3,000, receive 2,500, poll 800, NAPI kthread run 2,000 and packet 1,500, the
//! worker's resume after a preemption 1,500 cycles; the client 4,000 a
//! request; the path the assumed 60 us with an exponential tail of mean 11 us; on the
//! veth-lab profile) and shaped like a lab record by
//! `trim-server-run.py --from-twin twin` (kind "lab", the lab's `server_device`
//! setting, the twin's own client CPU with the softirqs on its CPU, Observations cut
//! to the NAPI kthread rows of threaded, latency histograms removed):
//!
//! ```text
//! napilab sim run scenarios/server-calibrate.toml --profile KNOWN.toml --json --no-report > twin.json
//! python3 crates/napilab-sim/tests/fixtures/trim-server-run.py twin.json crates/napilab-sim/tests/fixtures/server-run-twin.json --from-twin twin
//! ```
//! (KNOWN.toml: profiles/veth-lab.toml plus a `[server]` table with those costs:
//! `app_user_cycles = 2400.0`, `app_kernel_cycles = 5600.0`, `epoll_return_cycles =
//! 3000.0`, `receive_cycles = 2500.0`, `poll_cycles = 800.0`, `kthread_run_cycles =
//! 2000.0`, `kthread_packet_cycles = 1500.0`, `client_cycles_per_request = 4000.0`,
//! `resume_cycles = 1500.0`.)

use napilab_core::{RunKind, RunRecord, TwinMaxQps};
use napilab_sim::calibrate::LabProfile;
use napilab_sim::calibrate_server::{self, ServerProfile, VETH_LAB_SERVER_NAME};

const FIXTURE: &str = include_str!("fixtures/server-run-twin.json");
const FIXTURE_NAME: &str = "tests/fixtures/server-run-twin.json";

fn record() -> RunRecord {
    serde_json::from_str(FIXTURE).expect("fixture parses")
}

fn base() -> LabProfile {
    LabProfile::load("veth-lab").expect("veth-lab")
}

fn within(what: &str, got: f64, want: f64, tolerance: f64) {
    assert!(
        (got - want).abs() <= tolerance * want,
        "{what}: fitted {got:.0}, the run was made with {want:.0} (tolerance {:.0}%)",
        tolerance * 100.0
    );
}

/// The fit recovers the costs the run was made with: each statistic it matches is
/// the twin's own, so only the twin's run-to-run noise (other seeds at the search
/// points) separates the answer from the truth.
#[test]
fn recovers_known_server_costs_from_a_twin_made_run() {
    let cal = calibrate_server::calibrate(&record(), FIXTURE_NAME, &base(), "test")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(cal.unfixed.is_empty(), "{:?}", cal.unfixed);
    let c = cal.profile.costs.as_ref().expect("costs fitted");
    within(
        "app_user + app_kernel",
        c.app_user_cycles + c.app_kernel_cycles,
        8_000.0,
        0.03,
    );
    within("epoll_return_cycles", c.epoll_return_cycles, 3_000.0, 0.10);
    within("receive_cycles", c.receive_cycles, 2_500.0, 0.10);
    within("poll_cycles", c.poll_cycles, 800.0, 0.05);
    within("kthread_run_cycles", c.kthread_run_cycles, 2_000.0, 0.10);
    within(
        "kthread_packet_cycles",
        c.kthread_packet_cycles,
        1_500.0,
        0.10,
    );
    // The loosest: threaded's worker CPU, which it is fitted on, moves with how often
    // the kthread happens to preempt the worker at each seed.
    within("resume_cycles", c.resume_cycles, 1_500.0, 0.40);
    // The path from each mode's p50 and p99 at its lowest rate (3,000 requests: the
    // p99 is 30 of them, so the tail is the looser).
    within("path_ns", c.path_ns, 60_000.0, 0.10);
    within("path_tail_ns", c.path_tail_ns, 11_000.0, 0.25);
    within(
        "client cycles per request",
        cal.profile.client_cycles_per_request.unwrap_or(0.0),
        4_000.0,
        0.05,
    );
    for key in [
        "server.app_user_cycles",
        "server.app_kernel_cycles",
        "server.epoll_return_cycles",
        "server.receive_cycles",
        "server.poll_cycles",
        "server.kthread_run_cycles",
        "server.kthread_packet_cycles",
        "server.resume_cycles",
        "server.client_cycles",
        "server.path_ns",
        "server.path_tail_ns",
    ] {
        let src = c.provenance.get(key).expect("provenance");
        assert_eq!(src.kind.as_str(), "fitted", "{key}: {src:?}");
        assert!(
            src.reference.contains("20261129-133756-7db0"),
            "{key}: {src:?}"
        );
    }
    // Every statistic the fit matched, the twin now reproduces: CPU and polls within
    // 2%, latency within 10% (a p99 of 3,000 requests moves with the seed).
    for check in &cal.checks {
        let latency = check.statistic.contains("latency");
        within(
            &format!("{} {}", check.configuration, check.statistic),
            check.twin,
            check.lab,
            if latency { 0.10 } else { 0.02 },
        );
    }
}

/// A run without the modes a cost needs keeps that cost assumed and says which mode
/// is missing; the costs the remaining modes fix are still fitted.
#[test]
fn a_run_missing_modes_says_which_costs_it_cannot_fix() {
    let mut r = record();
    r.configurations
        .retain(|c| !matches!(c.name.as_str(), "busy-wait" | "no-coalescing" | "deferral"));
    let cal = calibrate_server::calibrate(&r, FIXTURE_NAME, &base(), "test")
        .unwrap_or_else(|e| panic!("{e}"));
    let c = cal.profile.costs.as_ref().expect("costs");
    let assumed = napilab_sim::from_server_scenario::ServerCosts::assumed();
    assert_eq!(c.poll_cycles, assumed.poll_cycles);
    assert_eq!(c.app_kernel_cycles, assumed.app_kernel_cycles);
    let text = cal.unfixed.join("\n");
    assert!(
        text.contains("server.poll_cycles kept ASSUMED")
            && text.contains("no configuration of napilab's server in mode busy-wait"),
        "{text}"
    );
    assert!(
        text.contains("server.app_user_cycles, server.app_kernel_cycles kept ASSUMED")
            && text.contains("mode no-coalescing")
            && text.contains("mode deferral"),
        "{text}"
    );
    assert!(
        text.contains("server.receive_cycles kept ASSUMED")
            && text.contains("neither no-coalescing nor deferral"),
        "{text}"
    );
    assert_eq!(
        c.provenance["server.poll_cycles"].kind.as_str(),
        "assumed",
        "an unfitted cost keeps its assumed provenance"
    );
    // threaded and irq-suspend are still there: the generator's costs and the NAPI
    // kthread's are fitted.
    for key in ["server.client_cycles", "server.kthread_run_cycles"] {
        assert_eq!(c.provenance[key].kind.as_str(), "fitted", "{key}");
    }
}

/// Points that missed the objective (e.g. the client fell behind on a busy machine)
/// are not used for a slope: with none left, the cost is not fitted, and the message
/// says why.
#[test]
fn points_that_missed_the_objective_fix_nothing() {
    let mut r = record();
    for c in &mut r.configurations {
        if let Some(q) = c.requests.as_mut() {
            for p in &mut q.points {
                p.meets_slo = false;
                p.client_limited = true;
            }
        }
    }
    let cal = calibrate_server::calibrate(&r, FIXTURE_NAME, &base(), "test")
        .unwrap_or_else(|e| panic!("{e}"));
    let text = cal.unfixed.join("\n");
    assert!(
        text.contains("fewer than two offered rates met the objective"),
        "{text}"
    );
    assert!(
        text.contains("server.receive_cycles kept ASSUMED"),
        "{text}"
    );
    assert!(text.contains("server.client_cycles kept ASSUMED"), "{text}");
    assert!(
        text.contains("server.kthread_run_cycles kept ASSUMED"),
        "{text}"
    );
}

#[test]
fn packet_and_model_runs_are_refused_by_name() {
    let packet: RunRecord =
        serde_json::from_str(include_str!("fixtures/lab-run.json")).expect("packet fixture");
    let e = calibrate_server::server_plan(&packet, "lab-run.json").expect_err("packet run");
    assert!(e.to_string().contains("not a server-topology run"), "{e}");
    let mut model = record();
    model.kind = RunKind::Model;
    let e = calibrate_server::server_plan(&model, "twin.json").expect_err("model run");
    assert!(e.to_string().contains("not measured by the lab"), "{e}");
}

/// The written profile reads back with the same costs and provenance; a bad value is
/// named.
#[test]
fn the_fitted_profile_round_trips_and_bad_values_are_named() {
    let r = record();
    let cal =
        calibrate_server::calibrate(&r, FIXTURE_NAME, &base(), "napilab sim calibrate --lab x")
            .unwrap_or_else(|e| panic!("{e}"));
    let text = cal.to_toml("napilab sim calibrate --lab x", &r, &[]);
    assert!(text.contains("# on lab run 20261129-133756-7db0"), "{text}");
    let back = ServerProfile::from_toml_str(&text, "fitted.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.costs, cal.profile.costs);
    assert_eq!(
        back.client_cycles_per_request,
        cal.profile.client_cycles_per_request
    );
    assert_eq!(back.lab.profile.stage_cycles, base().profile.stage_cycles);
    let bad: String = text
        .lines()
        .map(|l| {
            if l.starts_with("poll_cycles = ") {
                "poll_cycles = 0.0"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(bad, text, "the poll_cycles line is in the file");
    let e = ServerProfile::from_toml_str(&bad, "fitted.toml").expect_err("poll 0");
    assert!(e.to_string().contains("server.poll_cycles"), "{e}");
}

/// The costs per epoll return and per generator round: absent from a `[server]` table,
/// 0 (not charged, saying so); given, charged with the table named as their source;
/// negative, refused by name.
#[test]
fn per_return_and_per_round_costs_come_from_the_server_table() {
    // A table written before these costs were fitted: without them.
    let text = format!(
        "{}\n[server]\napp_user_cycles = 2400.0\napp_kernel_cycles = 5600.0\nreceive_cycles = 2500.0\npoll_cycles = 800.0\n",
        include_str!("../profiles/veth-lab.toml")
    );
    let absent =
        ServerProfile::from_toml_str(&text, "fitted.toml").unwrap_or_else(|e| panic!("{e}"));
    let c = absent.costs.expect("[server]");
    assert_eq!((c.epoll_return_cycles, c.client_round_cycles), (0.0, 0.0));
    assert!(
        c.provenance["server.epoll_return_cycles"]
            .detail
            .contains("not charged"),
        "{:?}",
        c.provenance["server.epoll_return_cycles"]
    );
    let given = text.replace(
        "\npoll_cycles = ",
        "\nepoll_return_cycles = 2500.0\nclient_round_cycles = 1200.0\npoll_cycles = ",
    );
    assert_ne!(given, text, "the poll_cycles line is in the file");
    let c = ServerProfile::from_toml_str(&given, "given.toml")
        .unwrap_or_else(|e| panic!("{e}"))
        .costs
        .expect("[server]");
    assert_eq!(
        (c.epoll_return_cycles, c.client_round_cycles),
        (2500.0, 1200.0)
    );
    assert!(
        c.provenance["server.client_round_cycles"]
            .detail
            .contains("given.toml"),
        "{:?}",
        c.provenance["server.client_round_cycles"]
    );
    let bad = given.replace("epoll_return_cycles = 2500.0", "epoll_return_cycles = -1.0");
    let e = ServerProfile::from_toml_str(&bad, "bad.toml").expect_err("negative");
    assert!(e.to_string().contains("server.epoll_return_cycles"), "{e}");
    assert!(e.to_string().contains("bad.toml"), "{e}");
}

/// The shipped veth-lab-server profile has fitted server costs.
#[test]
fn the_shipped_server_profile_has_fitted_costs() {
    let p = ServerProfile::load(VETH_LAB_SERVER_NAME).unwrap_or_else(|e| panic!("{e}"));
    let c = p.costs.expect("[server] table");
    assert!(c.poll_cycles > 0.0);
    assert!(
        c.provenance.values().any(|s| s.kind.as_str() == "fitted"),
        "{:?}",
        c.provenance
    );
}

/// The twin beside the lab: the prediction's maximum per mode, and a lab maximum
/// ended by its client is compared only as a lower bound.
#[test]
fn predictions_judge_client_limited_maxima_as_lower_bounds() {
    let mut r = record();
    let known = ServerProfile::from_toml_str(
        &format!(
            "{}\n[server]\napp_user_cycles = 2400.0\napp_kernel_cycles = 5600.0\nreceive_cycles = 2500.0\npoll_cycles = 800.0\n",
            napilab_sim::calibrate::VETH_LAB_TOML
        ),
        "known.toml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // threaded's search: the failure above each answer was the client's.
    let threaded = r
        .configurations
        .iter_mut()
        .find(|c| c.name == "threaded")
        .and_then(|c| c.requests.as_mut())
        .expect("threaded");
    for p in threaded.points.iter_mut().filter(|p| !p.meets_slo) {
        p.client_limited = true;
    }
    let rows = calibrate_server::predict(&r, FIXTURE_NAME, &known, "known", "test")
        .unwrap_or_else(|e| panic!("{e}"));
    let row = |name: &str| -> &TwinMaxQps { &rows.iter().find(|(n, _)| n == name).expect(name).1 };
    let t = row("threaded");
    assert!(
        t.lab_lower_bound && t.lab_limiter == "client-limited",
        "{t:?}"
    );
    assert!(
        t.verdict().starts_with("lab is a lower bound"),
        "{}",
        t.verdict()
    );
    // With the costs it was made with, the twin finds the run's own maxima (its
    // searches used other seeds: within one bisection step of 100k / 2^5).
    let b = row("busy-wait");
    assert!(!b.lab_lower_bound, "{b:?}");
    assert!(
        (b.twin_max_qps - b.lab_max_qps).abs() <= 100_000.0 / 32.0 + 1.0,
        "{b:?}"
    );
}

/// A real lab run on this shared 2-CPU machine (run 20261125-210128-fea0 of
/// scenarios/server-calibrate.toml, trimmed by `trim-server-run.py`): other work
/// held the client's CPU, so no point kept its schedule and none met the objective.
/// The fit uses no such point for a cost per request and says so; the busy-polling
/// pass (worker CPU time per busy poll, which a waiting worker does not lengthen) is
/// still fixed, within its physical bounds.
#[test]
fn a_lab_run_whose_client_fell_behind_fits_only_the_busy_poll_pass() {
    let r: RunRecord = serde_json::from_str(include_str!("fixtures/server-lab-run.json"))
        .expect("lab fixture parses");
    let cal = calibrate_server::calibrate(&r, "server-lab-run.json", &base(), "test")
        .unwrap_or_else(|e| panic!("{e}"));
    let c = cal.profile.costs.as_ref().expect("costs");
    assert_eq!(c.provenance["server.poll_cycles"].kind.as_str(), "fitted");
    assert!(
        (50.0..=100_000.0).contains(&c.poll_cycles),
        "{}",
        c.poll_cycles
    );
    let text = cal.unfixed.join("\n");
    for cost in [
        "server.app_user_cycles",
        "server.receive_cycles",
        "server.client_cycles",
    ] {
        assert!(
            text.contains(cost),
            "{cost} should be reported unfixed: {text}"
        );
    }
    assert!(text.contains("met the objective"), "{text}");
    // Every lab maximum is 0 with the client as the limiter: nothing to compare.
    let rows = calibrate_server::predict(&r, "server-lab-run.json", &cal.profile, "fit", "test")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rows.len(), 5);
    for (name, t) in &rows {
        assert_eq!(t.lab_limiter, "client-limited", "{name}: {t:?}");
        assert!(
            t.verdict().contains("nothing to compare"),
            "{name}: {}",
            t.verdict()
        );
    }
}

/// A probe whose wake-ups are longer than the run's path (the probe's thread is woken
/// from user space): the twin drawing them is slower than the lab at the lowest rate
/// of every mode whose requests wake the server from the client's CPU, so the fit
/// shortens the wake-ups by the excess instead of adding a path, the profile keeps the
/// shortened ones and says so, and the twin's medians at those rates come back to the
/// lab's. Without irq-suspend: its requests there are polled by its timer on the
/// server's CPU and wake nothing remotely (docs/sim.md, "A timer's expiry on a virtual
/// machine"), so the probe does not reach them.
#[test]
fn wake_ups_longer_than_the_path_are_shortened_by_the_excess() {
    let mut r = record();
    r.configurations.retain(|c| c.name != "irq-suspend");
    // A probe that saw 150 us on the server's CPU, 1,000 times. The run was made
    // with a 60 us path: at the lowest rate a wake-up and the path add up (one of
    // each a request), so the twin's medians meet the lab's with the wake-ups 90 us
    // shorter and no path, which the fit finds (a path cannot be negative).
    r.host.wake_up = vec![napilab_core::WakeUpLatency {
        cpu: 1,
        waker_cpu: 0,
        idle_us: 100.0,
        delays_ns: (0..1000).map(|i| 150_000.0 + f64::from(i % 10)).collect(),
    }];
    let cal = calibrate_server::calibrate(&r, FIXTURE_NAME, &base(), "test")
        .unwrap_or_else(|e| panic!("{e}"));
    let lat = &cal.profile.lab.profile.latency_ns;
    assert_eq!(
        lat.wake_up_samples.len(),
        1000,
        "the profile keeps the probe's wake-ups"
    );
    let shortened = 150_000.0 - lat.wake_up_samples[0] as f64;
    assert!(
        (80_000.0..=100_000.0).contains(&shortened),
        "shortened by {shortened:.0} ns"
    );
    let c = cal.profile.costs.as_ref().expect("costs");
    let why = &c.provenance["server.path_ns"].detail;
    assert!(why.contains("its wake-ups shortened by"), "{why}");
    let src = &cal.profile.lab.profile.provenance["latency_ns.irq_delivery"];
    assert!(src.detail.contains("each delay less"), "{src:?}");
    for check in cal.checks.iter().filter(|c| c.statistic.starts_with("p50")) {
        if check.configuration != "threaded" {
            within(
                &format!("{} {}", check.configuration, check.statistic),
                check.twin,
                check.lab,
                0.25,
            );
        }
    }
}
