//! `make bench-predict`: each tune profile the live host's twin can predict, on a veth
//! pair under a known load, predicted before it is applied and measured after, with
//! repeats; the last line is `predict: N profiles, max |error| X%` over CPU per packet,
//! and a verdict against the goal (CPU per packet within 10%).
//!
//! Per repeat and profile: a veth pair in two namespaces of its own (`VethPair`, GRO on
//! the receiver), a UDP flood from `a` into `vb`, then in `b`'s namespace
//! `napilab tune apply PROFILE --dev vb --predict --for OBSERVE`, `napilab tune verify
//! --for OBSERVE --json` and `napilab tune revert`; the pair goes with the repeat. Only
//! the veth pair's namespaces change. verify cannot measure headroom (nothing there drives
//! the pair to loss); each verify prints every figure it checks.
//!
//! Then the lab (`LAB=1`, the default): `napilab lab run scenarios/bench-predict-lab.toml`
//! (about 6 minutes) records a traced point of the one-CPU softirq router and searches
//! the maximum of the threaded router whose kthread has CPU 1 to itself; `napilab tune
//! predict threaded --cpus 1 --from run.json --point one-cpu/softirq` predicts that
//! configuration's headroom from the softirq point, and the bench prints it against the
//! measured maximum with its interval, and beside it what the DUT forwarded saturated in
//! the configuration's capacity probe (its CPU limit). The lab's namespaces go with its
//! run; its record stays in `$RESULTS` (default `results/`).
//!
//!     cargo run --release -p napilab --example predict_bench -- NAPILAB [REPEATS=3] [OBSERVE=3s] [LAB=1]

use napilab_testkit::{TuneOutput, VethPair};
use serde_json::Value;

/// The profiles the twin predicts on a veth host (others are refused by name).
const PROFILES: [&str; 2] = ["threaded", "deferral"];

/// The goal of "predict before you tune": CPU per packet within 10%, headroom within 15%.
const GOAL: f64 = 0.10;
const HEADROOM_GOAL: f64 = 0.15;

/// How a repeat whose prediction the twin refused begins its error.
const REFUSED: &str = "the prediction was refused";

/// A `napilab tune` command's JSON, or what it said on failure.
fn json_of(step: &str, out: &TuneOutput) -> Result<Value, String> {
    if !out.ok {
        return Err(format!("napilab tune {step} failed: {}", out.stderr.trim()));
    }
    Ok(serde_json::from_str(&out.stdout).unwrap_or(Value::Null))
}

/// One repeat of one profile: the verification's JSON.
fn one(napilab: &str, profile: &str, observe: &str, repeat: u32) -> Result<Value, String> {
    let pair = VethPair::create("napilab-pb", &format!("{repeat}"), false)?;
    let journal = std::env::temp_dir().join(format!(
        "napilab-predict-bench-{}-{repeat}",
        std::process::id()
    ));
    let run = pair.predict_apply_verify(napilab, profile, observe, &journal.to_string_lossy());
    let _ = std::fs::remove_dir_all(&journal);
    json_of("revert", &run.reverted)?;
    let applied = json_of("apply", &run.applied)?;
    if let Some(r) = applied["refusal"].as_str() {
        return Err(format!("{REFUSED}: {r}"));
    }
    let verified = run.verified.ok_or("verify did not run")?;
    json_of("verify", &verified)
}

fn error_of(v: &Value, figure: &str) -> Option<f64> {
    v["checks"]
        .as_array()?
        .iter()
        .find(|c| c["figure"] == figure)?["error"]
        .as_f64()
}

/// The lab scenario of the headroom comparison, and its two configurations.
const LAB_SCENARIO: &str = "scenarios/bench-predict-lab.toml";
const LAB_OBSERVED: &str = "one-cpu/softirq";
const LAB_PREDICTED: &str = "two-cpu/threaded";

/// The threaded profile's headroom predicted from the lab's softirq point against the
/// threaded configuration's measured maximum: the relative error, or why there is none.
fn lab_headroom(napilab: &str) -> Result<f64, String> {
    let out_dir =
        std::path::PathBuf::from(std::env::var("RESULTS").unwrap_or_else(|_| "results".into()));
    let run = std::process::Command::new(napilab)
        .args(["lab", "run", "--json", "--out"])
        .arg(&out_dir)
        .arg(LAB_SCENARIO)
        .output()
        .map_err(|e| format!("running {napilab} lab run: {e}"))?;
    judge_lab_run(napilab, &out_dir, &run)
}

fn judge_lab_run(
    napilab: &str,
    out_dir: &std::path::Path,
    run: &std::process::Output,
) -> Result<f64, String> {
    if !run.status.success() {
        return Err(format!(
            "napilab lab run {LAB_SCENARIO} failed: {}",
            String::from_utf8_lossy(&run.stderr).trim()
        ));
    }
    let record: Value = serde_json::from_slice(&run.stdout)
        .map_err(|e| format!("the lab run's --json output does not parse: {e}"))?;
    let run_json = out_dir
        .join(record["run_id"].as_str().unwrap_or_default())
        .join("run.json");
    println!(
        "lab: run {} (`napilab report` renders it)",
        run_json.display()
    );
    let config = |name: &str| {
        record["configurations"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == name)
            .cloned()
            .ok_or_else(|| format!("the lab run has no configuration {name}"))
    };
    let observed = config(LAB_OBSERVED)?;
    let dut_in = observed["settings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|kv| kv[0] == "dut_in")
        .and_then(|kv| kv[1].as_str())
        .ok_or("the lab run does not name its DUT's ingress (settings dut_in)")?
        .to_string();
    let predicted = std::process::Command::new(napilab)
        .args([
            "tune", "predict", "threaded", "--dev", &dut_in, "--cpus", "1", "--json", "--from",
        ])
        .arg(&run_json)
        .args(["--point", LAB_OBSERVED])
        .output()
        .map_err(|e| format!("running {napilab} tune predict: {e}"))?;
    let p: Value = serde_json::from_slice(&predicted.stdout).map_err(|_| {
        format!(
            "tune predict printed no JSON: {}",
            String::from_utf8_lossy(&predicted.stderr).trim()
        )
    })?;
    if let Some(r) = p["refusal"].as_str() {
        return Err(format!("{REFUSED}: {r}"));
    }
    let headroom = &p["prediction"]["predicted"]["headroom_pps"];
    let h = headroom["mean"]
        .as_f64()
        .ok_or("the prediction has no headroom")?;
    let max = &config(LAB_PREDICTED)?["max_throughput"];
    // The DUT's rate at saturation in the configuration's capacity probe: its CPU limit,
    // which the twin's headroom is when the loss below it is not the host's doing.
    let probe = &max["range"]["probe"];
    if let Some(fwd) = probe["forwarded_pps"].as_f64().filter(|f| *f > 0.0) {
        println!(
            "lab: {LAB_PREDICTED} forwarded {fwd:.0} packets/s saturated in its capacity probe ({}{}): the twin's headroom is {:+.0}% of it",
            probe["method"].as_str().unwrap_or("?"),
            if probe["generator_limited"] == true { "; generator-limited" } else { "" },
            (h / fwd - 1.0) * 100.0
        );
    }
    let goal = &max["goals"][0];
    let measured = goal["mean"].as_f64().filter(|m| *m > 0.0).ok_or_else(|| {
        format!(
            "{LAB_PREDICTED} found no maximum (stopped: {}): nothing to judge the predicted {h:.0} packets/s by",
            max["stopped"].as_str().unwrap_or("?")
        )
    })?;
    let interval = |k: &str| {
        goal["interval"][k]
            .as_f64()
            .map_or("-".into(), |v| format!("{v:.0}"))
    };
    let error = h / measured - 1.0;
    println!(
        "lab: {LAB_PREDICTED} headroom predicted from {LAB_OBSERVED} at {:.0} packets/s ({:.0} ns per packet, {:.1} packets a poll): {h:.0} [{:.0}, {:.0}] packets/s at loss <= {:.1}%; measured maximum {measured:.0} [{}, {}] at loss <= {:.1}% (MLRsearch, {} searches, {} stopped); error {:+.0}%",
        p["prediction"]["measured"]["packets_per_s"].as_f64().unwrap_or(0.0),
        p["prediction"]["measured"]["cpu_ns_per_packet"].as_f64().unwrap_or(0.0),
        p["prediction"]["measured"]["total"]["packets_per_poll"].as_f64().unwrap_or(0.0),
        headroom["low"].as_f64().unwrap_or(0.0),
        headroom["high"].as_f64().unwrap_or(0.0),
        headroom["loss_threshold"].as_f64().unwrap_or(0.0) * 100.0,
        interval("low"),
        interval("high"),
        goal["goal"]["loss_ratio"].as_f64().unwrap_or(0.0) * 100.0,
        goal["values"].as_array().map_or(0, Vec::len),
        max["stopped"].as_str().unwrap_or("?"),
        error * 100.0
    );
    // What the measurement itself allows: a maximum whose own interval is wider than
    // the goal cannot tell a good prediction from a poor one.
    if let (Some(low), Some(high)) = (
        goal["interval"]["low"].as_f64(),
        goal["interval"]["high"].as_f64(),
    ) {
        let half = (high - low) / 2.0 / measured;
        println!(
            "lab: the measured maximum's own 95% interval is +-{:.0}% of it{}",
            half * 100.0,
            if half > HEADROOM_GOAL {
                format!(", wider than the {:.0}% goal: this host's searches do not repeat closely enough to judge a prediction within it (docs/tune.md, \"The wake-up distribution\")", HEADROOM_GOAL * 100.0)
            } else {
                String::new()
            }
        );
    }
    // The wake-ups the twin drew from: the run's probe at its start.
    for w in record["host"]["wake_up"].as_array().into_iter().flatten() {
        if let Ok(w) = serde_json::from_value::<napilab_core::WakeUpLatency>(w.clone()) {
            println!("lab: wake-up probe at the run's start: {}", w.summary());
        }
    }
    Ok(error)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(napilab) = args.next() else {
        eprintln!("usage: predict_bench NAPILAB [REPEATS=3] [OBSERVE=3s] (root)");
        std::process::exit(2);
    };
    let repeats: u32 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .clamp(1, 20);
    let observe = args.next().unwrap_or_else(|| "3s".into());
    let lab = args.next().is_none_or(|a| a != "0");
    if !napilab_testkit::is_root() {
        eprintln!("predict-bench: needs root (namespaces, the trace tier, tune apply)");
        std::process::exit(2);
    }
    let mut worst: Option<f64> = None;
    let mut profiles = 0;
    // Profiles the twin refused to predict on this host (e.g. deferral where a timer
    // expiry costs tens of microseconds): named in the last line, not judged.
    let mut refused: Vec<&str> = Vec::new();
    for profile in PROFILES {
        let mut errors = Vec::new();
        for r in 0..repeats {
            match one(&napilab, profile, &observe, r) {
                Ok(v) => {
                    let figures: Vec<String> = v["checks"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| {
                            format!(
                                "{} {}",
                                c["figure"].as_str().unwrap_or("?"),
                                c["error"]
                                    .as_f64()
                                    .map_or("-".into(), |e| format!("{:+.0}%", e * 100.0))
                            )
                        })
                        .collect();
                    println!("{profile} repeat {r}: {}", figures.join(", "));
                    for u in v["unverified"].as_array().into_iter().flatten() {
                        println!(
                            "{profile} repeat {r}: {} predicted {:.0} [{:.0}, {:.0}], not measured",
                            u["figure"].as_str().unwrap_or("?"),
                            u["predicted"]["mean"].as_f64().unwrap_or(0.0),
                            u["predicted"]["low"].as_f64().unwrap_or(0.0),
                            u["predicted"]["high"].as_f64().unwrap_or(0.0),
                        );
                    }
                    if let Some(e) = error_of(&v, "packet CPU per packet (ns)") {
                        errors.push(e);
                    }
                }
                Err(e) => {
                    if e.starts_with(REFUSED) && !refused.contains(&profile) {
                        refused.push(profile);
                    }
                    println!("{profile} repeat {r}: {e}");
                }
            }
        }
        if let Some(m) = errors.iter().map(|e| e.abs()).reduce(f64::max) {
            profiles += 1;
            println!(
                "{profile}: CPU per packet error over {} repeats: {}; max |error| {:.0}%",
                errors.len(),
                errors
                    .iter()
                    .map(|e| format!("{:+.0}%", e * 100.0))
                    .collect::<Vec<_>>()
                    .join(" "),
                m * 100.0
            );
            worst = Some(worst.map_or(m, |w: f64| w.max(m)));
        }
    }
    let refused = if refused.is_empty() {
        String::new()
    } else {
        format!("; refused on this host: {}", refused.join(", "))
    };
    let Some(worst) = worst else {
        println!("predict: 0 profiles: no repeat gave a verification (see above){refused}");
        std::process::exit(1);
    };
    let headroom_error = if lab {
        lab_headroom(&napilab)
            .map_err(|e| println!("lab: {e}"))
            .ok()
    } else {
        None
    };
    let headroom = match (lab, headroom_error) {
        (_, Some(e)) => format!("; headroom in the lab (threaded) {:+.0}%", e * 100.0),
        (true, None) => "; headroom in the lab: not judged (above)".into(),
        (false, None) => "; headroom not measured (LAB=0)".into(),
    };
    println!(
        "predict: {profiles} profiles, max |error| {:.0}% (CPU per packet on the veth pair){headroom}{refused}",
        worst * 100.0
    );
    println!(
        "{}",
        napilab_testkit::bench_verdict(
            "bench-predict",
            &format!(
                "max |error| of CPU per packet {:.0}%{}",
                worst * 100.0,
                headroom_error.map_or(String::new(), |e| format!(
                    ", of headroom {:.0}%",
                    e.abs() * 100.0
                ))
            ),
            "CPU per packet <= 10%, headroom <= 15% where measured",
            worst <= GOAL && headroom_error.is_none_or(|e| e.abs() <= HEADROOM_GOAL)
        )
    );
}
