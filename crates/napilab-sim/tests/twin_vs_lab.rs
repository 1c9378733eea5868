//! The twin beside the lab: the joint calibration (lower-bound maxima are constraints,
//! never targets; known parameters come back from a twin-generated run), the
//! twin-vs-lab table of a recorded lab run, and the ingress-qos lab scenario on the
//! twin (docs/sim.md "The veth-lab profile and its calibration").

use std::path::PathBuf;

use napilab_core::{PointRole, RunKind, RunRecord};
use napilab_sim::calibrate::{self, LabProfile, ParameterStatus};
use napilab_sim::from_scenario;
use napilab_sim::twin_vs_lab;

mod common;

use common::lab_run_fixture as fixture;

/// The fixture's scenario with one-second windows: the joint fit runs the twin's
/// search of every configuration at many delays, and the twin needs no long window.
fn shortened(mut record: RunRecord) -> RunRecord {
    record.scenario_toml = record
        .scenario_toml
        .replace("duration_s = 4.0", "duration_s = 1.0")
        .replace("warmup_s = 1.0", "warmup_s = 0.2");
    assert_ne!(record.scenario_toml.find("duration_s = 1.0"), None);
    record
}

fn parameter(j: &calibrate::JointCalibration, name: &str) -> calibrate::FittedParameter {
    j.parameters
        .iter()
        .find(|p| p.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("no parameter {name}: {:?}", j.parameters))
}

/// The fixture's two softirq maxima are the generator's (`converged_generator_limited`):
/// the fit treats them as "at least" constraints. Lowering them (a weaker bound the
/// twin already clears) must change nothing: they are never targets.
#[test]
fn joint_fit_never_uses_a_lower_bound_maximum_as_a_target() {
    let (record, file) = fixture("lab-run.json");
    let record = shortened(record);
    let base = LabProfile::load("veth-lab").expect("base");
    let joint = calibrate::calibrate_joint(&record, &file, &base).unwrap_or_else(|e| panic!("{e}"));
    // The softirq maxima are the generator's; one-cpu/threaded's poller shares CPU 0
    // with the engines, which the twin has no threads for: its maximum is an upper
    // bound. Only two-cpu/threaded is a target.
    assert_eq!(
        joint.lower_bounds,
        ["one-cpu/softirq", "one-cpu/threaded", "two-cpu/softirq"]
    );
    assert_eq!(joint.targets, ["two-cpu/threaded"]);
    for p in &joint.fitted {
        assert_eq!(
            p.lab_lower_bound || p.twin_upper_bound,
            joint.lower_bounds.contains(&p.name),
            "{p:?}"
        );
    }
    // With one threaded target nothing is left to predict it from, and the fit says so
    // rather than predicting it from itself.
    assert_eq!(joint.leave_one_out.len(), 1);
    let l = &joint.leave_one_out[0];
    assert!(l.fitted_on.is_empty() && l.prediction.is_none(), "{l:?}");
    assert!(
        l.why_none
            .as_deref()
            .is_some_and(|w| w.contains("fixes the wake-up delay")),
        "{l:?}"
    );
    let mut weaker = record.clone();
    for c in &mut weaker.configurations {
        if let Some(m) = c.max_throughput.as_mut() {
            if calibrate::Prediction::is_lower_bound(&m.stopped) {
                m.pps *= 0.5;
            }
        }
    }
    let again = calibrate::calibrate_joint(&weaker, &file, &base).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.calibration.lab, joint.calibration.lab);
    // The delay is fitted and physical.
    let delay = parameter(&joint, "latency_ns.irq_delivery");
    assert!(
        delay.value >= delay.bound.min && delay.value <= delay.bound.max,
        "{delay:?}"
    );
    assert_ne!(delay.status, ParameterStatus::NotFixed, "{delay:?}");
}

/// A run the twin made with known parameters, labelled as the lab's: the joint fit
/// finds them again (the DUT's cost from its kthread's CPU, the sink's from its CPU,
/// the wake-up delay from the DUT-limited maxima).
#[test]
fn joint_fit_recovers_known_parameters_from_a_twin_generated_run() {
    let (record, file) = fixture("lab-run.json");
    let mut record = shortened(record);
    let mut truth = LabProfile::load("veth-lab").expect("veth-lab");
    truth.profile.latency_ns.irq_delivery = 400_000;
    let sink_cycles = truth.testbed.expect("testbed").sink_cycles_per_packet;
    let (_, plan) = calibrate::plan_of(&record, &file).unwrap_or_else(|e| panic!("{e}"));
    let mut plan = plan;
    plan.seeds.truncate(1);
    for c in &mut record.configurations {
        let conf = plan
            .configurations
            .iter()
            .find(|t| t.name == c.name)
            .expect("configuration");
        let profile = conf.profile_for(&truth.profile, truth.testbed.as_ref());
        let (mut points, max) = from_scenario::run_configuration(&plan, conf, |b| {
            from_scenario::run_serial(b, &profile)
        })
        .unwrap_or_else(|e| panic!("{e}"));
        for p in &mut points {
            // The twin has no sink thread: give the record the sink CPU the truth
            // charges (cpu_ghz 1: cycles are ns), as the lab's XDP sink reports it.
            p.sink.backend = "xdp-sink".into();
            p.sink.cpus = vec![0];
            p.sink.cpu_busy = Some(sink_cycles * p.delivered_pps() * 1e-9);
        }
        c.points = points;
        c.max_throughput = max;
        // The twin's DUT kthread is napi/dut-in-*.
        for (k, v) in &mut c.settings {
            if k == "dut_in" {
                *v = "dut-in".into();
            }
        }
    }
    record.kind = RunKind::Lab;
    let mut base = truth.clone();
    base.profile.latency_ns.irq_delivery = 0;
    // A wrong per-packet cost in the base (the split between the stages is kept: no
    // lab figure fixes it, docs/sim.md).
    for c in [
        &mut base.profile.stage_cycles.poll,
        &mut base.profile.stage_cycles.ip_stack,
        &mut base.profile.stage_cycles.xmit,
    ] {
        *c *= 1.5;
    }
    let joint = calibrate::calibrate_joint(&record, &file, &base).unwrap_or_else(|e| panic!("{e}"));
    let got = &joint.calibration.lab;
    let per_packet = |p: &napilab_sim::Profile| {
        p.stage_cycles.poll + p.stage_cycles.ip_stack + p.stage_cycles.xmit
    };
    let (want, have) = (per_packet(&truth.profile), per_packet(&got.profile));
    assert!(
        (have - want).abs() <= 0.1 * want,
        "DUT cycles a packet: fitted {have}, truth {want}"
    );
    let sink = got.testbed.expect("testbed").sink_cycles_per_packet;
    assert!(
        (sink - sink_cycles).abs() <= 0.05 * sink_cycles,
        "sink cycles: fitted {sink}, truth {sink_cycles}"
    );
    let delay = got.profile.latency_ns.irq_delivery as f64;
    let fitted = joint
        .parameters
        .iter()
        .find(|p| p.name == "latency_ns.irq_delivery")
        .expect("delay");
    assert_eq!(fitted.status, ParameterStatus::Fixed, "{fitted:?}");
    assert!(
        (delay - 400e3).abs() <= 0.25 * 400e3,
        "wake-up delay: fitted {delay} ns, truth 400000; {:?}",
        joint.calibration.notes
    );
    // The twin's own maxima are DUT-limited: all are targets but one-cpu/threaded,
    // where the twin is an upper bound; the fitted profile reproduces them all.
    assert_eq!(joint.lower_bounds, ["one-cpu/threaded"]);
    for p in &joint.fitted {
        assert!(p.relative_error.abs() <= 0.1, "{p:?}");
    }
}

/// After a lab run the record carries the twin's prediction of every searched
/// maximum beside the lab's, with its limiter; the text of the verdicts says which
/// maxima are lower bounds.
#[test]
fn a_lab_runs_record_gets_the_twin_vs_lab_table() {
    let (record, _) = fixture("lab-run-2.json");
    let t = twin_vs_lab::compare(&record, false).expect("a lab run of a packet topology");
    assert_eq!(t.profile, "veth-lab");
    assert!(t.basis.contains("no figure of this run"), "{}", t.basis);
    let names: Vec<&str> = t.maxima.iter().map(|m| m.configuration.as_str()).collect();
    assert_eq!(
        names,
        [
            "one-cpu/softirq",
            "one-cpu/threaded",
            "two-cpu/softirq",
            "two-cpu/threaded"
        ]
    );
    for m in &t.maxima {
        let lab = record
            .configurations
            .iter()
            .find(|c| c.name == m.configuration)
            .and_then(|c| c.max_throughput.as_ref())
            .expect("searched");
        assert_eq!(m.lab_pps, lab.pps);
        assert_eq!(m.lab_stopped, lab.stopped);
        assert!(m.twin_pps > 0.0, "{m:?}");
        assert_eq!(
            m.lab_lower_bound,
            m.verdict.contains("lower bound"),
            "{m:?}"
        );
    }
    // Old runs load without the field; the twin's own runs get none.
    assert!(record.twin.is_none());
    let mut model = record.clone();
    model.kind = RunKind::Model;
    assert!(twin_vs_lab::compare(&model, false).is_none());
    // It survives the record's JSON.
    let mut with = record.clone();
    with.twin = Some(t.clone());
    let back: RunRecord =
        serde_json::from_str(&serde_json::to_string(&with).expect("json")).expect("record");
    assert_eq!(back.twin, Some(t));
    // A search without an answer (a disturbed machine) gives a row without an error,
    // and the record still loads.
    let mut unanswered = record.clone();
    for c in &mut unanswered.configurations {
        if let Some(m) = c.max_throughput.as_mut() {
            m.pps = 0.0;
            m.stopped = "time_limit".into();
        }
    }
    let t = twin_vs_lab::compare(&unanswered, false).expect("a lab run");
    for m in &t.maxima {
        assert!(m.lab_unfinished && m.relative_error.is_none(), "{m:?}");
        assert!(m.verdict.contains("no answer"), "{m:?}");
    }
    unanswered.twin = Some(t);
    let text = serde_json::to_string(&unanswered).expect("json");
    let back: RunRecord = serde_json::from_str(&text).expect("record with unanswered rows");
    assert_eq!(back.twin, unanswered.twin);
}

/// The ingress-qos lab scenario's stock-kernel mechanism on the twin (docs/results/sim.md):
/// the RT and BE queues' NAPI kthreads share CPU 1 (the BE sender too). Beyond
/// CPU 1's capacity (1.5 Mpps offered, 10% RT) BE's ring stays full and BE loses
/// packets, while the RT kthread gets CPU 1 at the BE poller's next poll boundary: RT
/// waits a poll, BE a ring. The twin finds the same with the RT kthread at SCHED_FIFO
/// 50 as at equal priority: its fair scheduler already lets the less-served RT
/// kthread in at that boundary (the lab's BE sender thread, which could take CPU 1
/// from a SCHED_OTHER RT poller, has no thread in the twin). The lab profile's
/// wake-up delay is left out, as the twin-vs-lab class rows leave it out: it stands
/// for ring overflows at the maximum, not a latency.
#[test]
fn ingress_qos_on_the_twin_ranks_rt_below_be_latency() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/ingress-qos.toml");
    let text = std::fs::read_to_string(&path).expect("scenario");
    let file = path.display().to_string();
    let s = napilab_core::scenario::parse(&text, &file, Some(2)).unwrap_or_else(|e| panic!("{e}"));
    let plan = from_scenario::plan(&s, &file).unwrap_or_else(|e| panic!("{e}"));
    let mut lab = LabProfile::load("veth-lab").expect("veth-lab");
    lab.profile.latency_ns.irq_delivery = 0;
    // (RT mean us, RT lost, BE mean us, BE lost) of one configuration at `pps`.
    let run = |conf_name: &str, pps: f64| {
        let conf = plan
            .configurations
            .iter()
            .find(|c| c.name == conf_name)
            .expect("configuration");
        let profile = conf.profile_for(&lab.profile, lab.testbed.as_ref());
        let p = from_scenario::run_serial(&[(conf.at(pps), 1, PointRole::Sweep)], &profile)
            .unwrap_or_else(|e| panic!("{e}"))
            .remove(0);
        let class = |n: &str| {
            let c = p.classes.iter().find(|c| c.name == n).expect("class");
            let mean = c.latency.as_ref().expect("latency").mean_us;
            (mean, c.sent.saturating_sub(c.received))
        };
        let (rt, be) = (class("rt"), class("be"));
        (rt.0, rt.1, be.0, be.1)
    };
    for name in ["equal-priority", "rt-fifo"] {
        let (rt, rt_lost, be, be_lost) = run(name, 1.5e6);
        assert!(
            rt_lost == 0 && be_lost > 0,
            "{name}: RT lost {rt_lost}, BE {be_lost}"
        );
        assert!(rt * 4.0 < be, "{name}: RT {rt} us, BE {be} us");
    }
    // The scenario's own loads (20-100 kpps) leave CPU 1 mostly idle: no loss, and
    // neither class waits behind the other for long.
    let (rt, rt_lost, be, be_lost) = run("rt-fifo", 100e3);
    assert_eq!((rt_lost, be_lost), (0, 0));
    assert!(rt < 10.0 && be < 10.0, "RT {rt} us, BE {be} us");
}

/// The twin judged on the run's own host, beside the shipped profile. With leave-one-out, every
/// DUT-limited maximum also gets the prediction of a fit to the run without it, beside
/// the shipped profile's; the testbed-limited ones (lower bounds) and those where the
/// twin is only an upper bound get none: they are bounds in the fit, not targets. The table
/// says whether the shipped profile was fitted on this run's host.
#[test]
fn the_twin_table_predicts_each_dut_limited_maximum_from_the_others() {
    let (record, _) = fixture("lab-run.json");
    let mut record = shortened(record);
    // As on a faster CPU than the fixture's: one-cpu/softirq's maximum is the DUT's,
    // not the generator's, so the costs fitted on two-cpu/threaded predict it.
    for c in &mut record.configurations {
        if c.name == "one-cpu/softirq" {
            if let Some(m) = c.max_throughput.as_mut() {
                m.stopped = "converged".into();
            }
        }
    }
    let t = twin_vs_lab::compare(&record, true).expect("a lab run of a packet topology");
    assert!(
        t.profile_host.starts_with("unknown"),
        "the shipped profile and this old run record no host: {}",
        t.profile_host
    );
    let mut predicted = 0;
    for m in &t.maxima {
        match &m.leave_one_out {
            Some(l) => {
                assert!(!m.lab_lower_bound, "a lower bound is never a target: {m:?}");
                assert!(!l.fitted_on.contains(&m.configuration), "{m:?}");
                if let Some(twin) = l.twin_pps {
                    assert!(twin > 0.0, "{m:?}");
                    predicted += 1;
                }
                assert!(!l.verdict.is_empty(), "{m:?}");
            }
            None => assert!(
                m.lab_lower_bound || m.lab_unfinished || m.twin_upper_bound,
                "a DUT-limited maximum without a leave-one-out row: {m:?}"
            ),
        }
    }
    let softirq = t
        .maxima
        .iter()
        .find(|m| m.configuration == "one-cpu/softirq")
        .and_then(|m| m.leave_one_out.as_ref())
        .expect("the DUT-limited softirq maximum is predicted");
    assert!(
        softirq.twin_pps.is_some() && softirq.relative_error.is_some(),
        "{softirq:?}"
    );
    assert!(predicted >= 1, "{:?}", t.maxima);
    assert!(
        t.notes.iter().any(|n| n.starts_with("leave-one-out")),
        "{:?}",
        t.notes
    );
}

/// A profile names the host it was fitted on; the comparison says whether it is the
/// run's and, if not, what differs.
#[test]
fn the_profiles_host_is_compared_with_the_runs() {
    let (mut record, _) = fixture("lab-run-2.json");
    let mut lab = LabProfile::load(calibrate::VETH_LAB_NAME).expect("shipped profile");
    let amd = napilab_core::HostIdentity {
        cpu: napilab_core::CpuIdentity {
            vendor: Some("AuthenticAMD".into()),
            model_name: Some("AMD EPYC".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut intel = amd.clone();
    intel.cpu.vendor = Some("GenuineIntel".into());
    intel.cpu.model_name = Some("Intel Xeon".into());
    record.host.identity = Some(amd.clone());
    assert!(twin_vs_lab::profile_host(&record, &lab).starts_with("unknown"));
    lab.fitted_on_host = Some(amd.clone());
    assert_eq!(twin_vs_lab::profile_host(&record, &lab), "same host");
    lab.fitted_on_host = Some(intel);
    let differs = twin_vs_lab::profile_host(&record, &lab);
    assert!(
        differs.starts_with("different host") && differs.contains("GenuineIntel"),
        "{differs}"
    );
    // The host survives the profile file written by `napilab sim calibrate`.
    let text = lab.body();
    let back = LabProfile::from_toml_str(&text, "test").expect("profile with its host");
    assert_eq!(back.fitted_on_host, lab.fitted_on_host);
}
