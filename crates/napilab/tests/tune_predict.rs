//! `napilab tune plan PROFILE --predict` on a live host (root): a veth pair in two
//! namespaces of its own, a UDP flood from `a` into `vb` (GRO on, so vb has a NAPI
//! instance), and napilab run inside `b`. Asserts the prediction's mechanisms and its
//! refusals, not timings. Prints `SKIPPED <test>: <why>` when not root or when the
//! trace tier (BPF) cannot run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use napilab_testkit::{root_or_skip, VethPair};
use serde_json::Value;

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

/// `tune plan threaded --predict` on vb while a UDP flood (pinned to `cpu` when given)
/// runs: the plan's JSON; `None`, printed as skipped, where the trace tier is missing.
fn predict_threaded_under_flood(pair: &VethPair, name: &str, cpu: Option<u32>) -> Option<Value> {
    let stop = Arc::new(AtomicBool::new(false));
    let sender = pair.flood_on(cpu, stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    let (out, ok) = plan_predict(pair, &["threaded", "--dev", "vb", "--for", "2s"]);
    stop.store(true, Ordering::Relaxed);
    let _ = sender.join();
    assert!(ok, "plan of threaded on vb failed: {out:#}");
    if let Some(r) = out["refusal"].as_str() {
        if r.contains("trace tier") {
            println!("SKIPPED {name}: {r}");
            return None;
        }
        panic!("prediction refused under load: {r}");
    }
    Some(out)
}

/// The tests of this file run one at a time. Each pair's `vb` is told apart from the
/// others' by its namespace, but the CPU time the twin is fitted to (softirq and busy per
/// CPU, the sender's cost) is the host's: a second flood at once would be fitted as this
/// test's packet path or sender, and the figures the apply/verify test prints would be
/// the two floods' (CPU per packet predicted 9,917 ns against 3,993 measured when they
/// ran together on 2026-11-27).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    let _serial = one_at_a_time();
    let Some(pair) = pair_or_skip(name, "pred") else {
        return;
    };
    let Some(out) = predict_threaded_under_flood(&pair, name, None) else {
        return;
    };
    assert_eq!(out["schema"], "napilab.tune-plan-predict/1");
    assert!(
        out["plan"]["changes"].is_array(),
        "the plan is there: {out:#}"
    );
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
    // The kthread's wake-up delay: measured on this host (the wake-up probe on a host of
    // two or more CPUs, or a kernel thread's run delay) or the lab's, and which one is
    // said.
    let wake = &p["kthread_wake_up"];
    let source = wake["source"]
        .as_str()
        .expect("a wake-up delay for threaded");
    assert!(wake["delay_ns"].as_f64().expect("delay") >= 0.0, "{wake}");
    if wake["measured"] == true {
        assert!(
            source.starts_with("wake-up probe of this host (CPU ")
                || source.starts_with("run delay of "),
            "{source}"
        );
        // On a host of two CPUs or more the probe measures every CPU, each woken from
        // another, and the twin takes it.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus >= 2 {
            assert!(source.starts_with("wake-up probe"), "{source}");
            // Enough wake-ups that the twin draws each from them, its tail included.
            let drawn = wake["samples_ns"].as_array().map_or(0, Vec::len);
            assert_eq!(
                drawn,
                napilab_probe::wake_up_latency::TAIL_WAKE_UPS,
                "{source}"
            );
        }
    } else {
        assert!(source.contains("veth-lab"), "{source}");
    }
    assert!(
        assumed.iter().any(|a| a.contains("NAPI kthread runs")),
        "the delay is an assumption: {assumed:#?}"
    );
    // Headroom, current and predicted: an interval around the mean, under the search's
    // cap, and not under the observed load unless the search says so.
    for side in ["current", "predicted"] {
        let h = &p[side]["headroom_pps"];
        let (lo, mean, hi, cap) = (
            h["low"].as_f64().expect("low"),
            h["mean"].as_f64().expect("mean"),
            h["high"].as_f64().expect("high"),
            h["cap_pps"].as_f64().expect("cap"),
        );
        assert!(lo <= mean && mean <= hi && mean <= cap, "{side}: {h}");
        assert!(
            mean >= measured_pps || h["stopped"] == "below_observed",
            "{side}: headroom under the observed load without saying so: {h}"
        );
    }
    println!(
        "{name}: measured {measured_pps:.0} pps, {measured_ns:.0} ns/packet; twin current {twin_ns:.0} ns/packet, predicted {:.0} ns/packet; fit factor {}; wake-up {:.1} us ({source}); headroom {} -> {} pps ({} -> {})",
        p["predicted"]["cpu_ns_per_packet"]["mean"].as_f64().unwrap_or(0.0),
        p["fit_factor"],
        wake["delay_ns"].as_f64().unwrap_or(0.0) / 1e3,
        p["current"]["headroom_pps"]["mean"],
        p["predicted"]["headroom_pps"]["mean"],
        p["current"]["headroom_pps"]["stopped"],
        p["predicted"]["headroom_pps"]["stopped"],
    );
}

/// A sender pinned to one CPU floods vb: veth runs vb's polls in that CPU's softirq, and
/// one thread sending without pause keeps it saturated. Threaded moves the poll into a
/// kthread the scheduler wakes elsewhere, so the prediction says the host is
/// sender-limited and runs the twin at the rate the sender then reaches, above the
/// observed one. Asserts the mechanism and its wording, not the rate.
#[test]
fn a_saturated_veth_sender_is_predicted_to_send_faster_threaded() {
    let name = "a_saturated_veth_sender_is_predicted_to_send_faster_threaded";
    let _serial = one_at_a_time();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        println!("SKIPPED {name}: needs a second CPU for the kthread to move to");
        return;
    }
    let Some(pair) = pair_or_skip(name, "sender") else {
        return;
    };
    let cpu = u32::try_from(cpus - 1).expect("CPU number");
    let Some(out) = predict_threaded_under_flood(&pair, name, Some(cpu)) else {
        return;
    };
    let p = &out["prediction"];
    let s = &p["sender_rate"];
    let says = s["says"]
        .as_str()
        .expect("the sender rate says what it found");
    assert_eq!(s["verdict"], "sender_limited", "{s:#}");
    assert_eq!(s["cost"]["cpu"], cpu, "the pinned sender's CPU: {s:#}");
    assert!(
        s["cost"]["busy"].as_f64().expect("busy")
            >= s["saturated_busy"].as_f64().expect("threshold"),
        "{s:#}"
    );
    assert!(
        says.starts_with(&format!("sender-limited on CPU {cpu}: predicted rate "))
            && says.contains(" from sender cost "),
        "{says}"
    );
    let measured = p["measured"]["packets_per_s"].as_f64().expect("pps");
    let rate = s["rate_pps"].as_f64().expect("the rate the twin ran at");
    let sender_pps = s["sender_pps"].as_f64().expect("the sender's rate");
    assert!(rate <= sender_pps * (1.0 + 1e-9), "{s:#}");
    assert!(
        rate > measured,
        "without the poll the sender is faster: {rate:.0} vs observed {measured:.0} packets/s ({says})"
    );
    // The twin ran the profile at that rate, and the current settings at the observed one.
    let predicted = p["predicted"]["packets_per_s"]["mean"]
        .as_f64()
        .expect("pps");
    let offered_loss = p["predicted"]["dropped_per_s"]["mean"]
        .as_f64()
        .expect("drops");
    assert!(
        ((predicted + offered_loss) / rate - 1.0).abs() < 0.05,
        "the twin is offered {rate:.0}: {predicted:.0} carried + {offered_loss:.0} dropped"
    );
    let current = p["current"]["packets_per_s"]["mean"].as_f64().expect("pps");
    assert!(
        (current / measured - 1.0).abs() < 0.3,
        "{current} vs {measured}"
    );
    println!("{name}: {says}");
}

#[test]
fn prediction_refuses_without_load_and_without_the_kernel() {
    let name = "prediction_refuses_without_load_and_without_the_kernel";
    let _serial = one_at_a_time();
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

/// Deferral arms an hrtimer on the polling CPU after every poll that defers; the
/// prediction first measures what such a timer costs this host, and either refuses
/// with the measured cost (a VM where an expiry takes tens of microseconds) or goes on
/// and says what the timer takes. Which one depends on the host; both name the figure.
#[test]
fn deferral_prediction_measures_the_timer_first() {
    let name = "deferral_prediction_measures_the_timer_first";
    let _serial = one_at_a_time();
    let Some(pair) = pair_or_skip(name, "timer") else {
        return;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let sender = pair.flood_on(Some(0), stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    let (out, ok) = plan_predict(&pair, &["deferral", "--dev", "vb", "--for", "2s"]);
    stop.store(true, Ordering::Relaxed);
    let _ = sender.join();
    assert!(ok, "the plan of deferral on vb failed: {out:#}");
    match out["refusal"].as_str() {
        Some(r) if r.contains("trace tier") => println!("SKIPPED {name}: {r}"),
        Some(r) => {
            assert!(
                r.contains("us per expiry")
                    && r.contains("deferral timer would fire up to")
                    && r.contains("napilab tune verify"),
                "a refusal other than the timer's: {r}"
            );
            println!("{name}: refused on this host: {r}");
        }
        None => {
            let assumed = out["prediction"]["assumed"]
                .as_array()
                .expect("assumptions")
                .iter()
                .filter_map(Value::as_str)
                .find(|a| a.contains("deferral timer"))
                .unwrap_or_else(|| panic!("no word on the deferral timer: {out:#}"))
                .to_string();
            assert!(
                assumed.contains("us per expiry") && assumed.contains("takes at most"),
                "the timer's measured cost: {assumed}"
            );
            println!("{name}: predicted on this host: {assumed}");
        }
    }
}

/// `napilab tune ARGS` in vb's namespace: stdout (JSON when asked), stderr, success.
#[test]
fn apply_keeps_the_prediction_and_verify_measures_it() {
    let name = "apply_keeps_the_prediction_and_verify_measures_it";
    let _serial = one_at_a_time();
    let Some(pair) = pair_or_skip(name, "verify") else {
        return;
    };
    let dir = napilab_testkit::scratch_dir(env!("CARGO_TARGET_TMPDIR"), "tune-predict-journal");
    let dir = dir.to_str().expect("utf-8 path").to_string();
    let run = pair.predict_apply_verify(env!("CARGO_BIN_EXE_napilab"), "threaded", "2s", &dir);
    assert!(
        run.applied.ok,
        "apply --predict failed: {}",
        run.applied.stderr
    );
    assert!(run.reverted.ok, "revert failed: {}", run.reverted.stderr);
    let applied: Value = serde_json::from_str(&run.applied.stdout).expect("apply JSON");
    if let Some(r) = applied["refusal"].as_str() {
        if r.contains("trace tier") {
            println!("SKIPPED {name}: {r}");
            return;
        }
        panic!("prediction refused under load: {r}");
    }
    assert_eq!(applied["prediction_kept"], true, "{applied:#}");
    let verified = run.verified.expect("verify ran");
    assert!(verified.ok, "verify failed: {}", verified.stderr);
    let v: Value = serde_json::from_str(&verified.stdout).expect("verify JSON");
    assert_eq!(v["schema"], "napilab.tune-verify/1");
    let checks = v["checks"].as_array().expect("checks");
    let check = |figure: &str| {
        checks
            .iter()
            .find(|c| c["figure"].as_str().is_some_and(|f| f.starts_with(figure)))
            .unwrap_or_else(|| panic!("no check {figure}: {v:#}"))
    };
    // After apply the kthread polls: the measurement shows the mechanism the
    // prediction named, and every figure has its error.
    let kthread = check("NAPI kthread");
    assert!(
        kthread["measured"].as_f64().expect("measured") > 0.0,
        "{kthread}"
    );
    assert!(
        kthread["predicted"]["mean"].as_f64().expect("predicted") > 0.0,
        "{kthread}"
    );
    for c in checks {
        assert!(c["error"].is_number() || c["measured"] == 0.0, "{c}");
    }
    // An unpinned kthread of a sender-limited host goes where the scheduler wakes it:
    // the prediction carries both placements and verify names the one it judged.
    if applied["prediction"]["sender_rate"]["beside_sender_pps"].is_number() {
        let placement = v["placement"].as_str().unwrap_or_else(|| panic!("{v:#}"));
        assert!(
            placement.contains("the scheduler ran the NAPI kthread"),
            "{placement}"
        );
    }
    // Headroom is predicted, and said not to be measured by verify.
    let unverified = v["unverified"].as_array().expect("unverified");
    assert!(
        unverified.iter().any(|u| u["figure"]
            .as_str()
            .is_some_and(|f| f.starts_with("headroom"))
            && u["why"]
                .as_str()
                .is_some_and(|w| w.contains("not verified"))),
        "{v:#}"
    );
    println!(
        "{name}: placement {}; {}",
        v["placement"].as_str().unwrap_or("not judged"),
        checks
            .iter()
            .map(|c| format!(
                "{} predicted {:.3} measured {:.3} error {}",
                c["figure"].as_str().unwrap_or(""),
                c["predicted"]["mean"].as_f64().unwrap_or(0.0),
                c["measured"].as_f64().unwrap_or(0.0),
                c["error"]
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );

    // A journal without a prediction: verify says how to get one.
    let napilab = env!("CARGO_BIN_EXE_napilab");
    let applied = pair.tune(
        napilab,
        &["apply", "threaded", "--dev", "vb", "--journal-dir", &dir],
    );
    assert!(applied.ok, "apply failed: {}", applied.stderr);
    let verified = pair.tune(napilab, &["verify", "--journal-dir", &dir, "--for", "1s"]);
    let reverted = pair.tune(napilab, &["revert", "--journal-dir", &dir]);
    assert!(reverted.ok, "revert failed: {}", reverted.stderr);
    assert!(
        !verified.ok && verified.stderr.contains("--predict"),
        "verify of a journal without a prediction: {}",
        verified.stderr
    );
}
