//! `make bench-predict`: each tune profile the live host's twin can predict, on a veth
//! pair under a known load, predicted before it is applied and measured after, with
//! repeats; the last line is `predict: N profiles, max |error| X%` over CPU per packet,
//! and a verdict against the goal (CPU per packet within 10%).
//!
//! Per repeat and profile: a veth pair in two namespaces of its own (`VethPair`, GRO on
//! the receiver), a UDP flood from `a` into `vb`, then in `b`'s namespace
//! `napilab tune apply PROFILE --dev vb --predict --for OBSERVE`, `napilab tune verify
//! --for OBSERVE --json` and `napilab tune revert`; the pair goes with the repeat. Only
//! the veth pair's namespaces change. Headroom is predicted and printed per repeat, but
//! not in the line: verify cannot measure it (nothing here drives the pair to loss);
//! each verify prints every figure it checks.
//!
//!     cargo run --release -p napilab --example predict_bench -- NAPILAB [REPEATS=3] [OBSERVE=3s]

use napilab_testkit::{TuneOutput, VethPair};
use serde_json::Value;

/// The profiles the twin predicts on a veth host (others are refused by name).
const PROFILES: [&str; 2] = ["threaded", "deferral"];

/// The goal of "predict before you tune": CPU per packet within 10%.
const GOAL: f64 = 0.10;

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
        return Err(format!("the prediction was refused: {r}"));
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
    if !napilab_testkit::is_root() {
        eprintln!("predict-bench: needs root (namespaces, the trace tier, tune apply)");
        std::process::exit(2);
    }
    let mut worst: Option<f64> = None;
    let mut profiles = 0;
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
                Err(e) => println!("{profile} repeat {r}: {e}"),
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
    let Some(worst) = worst else {
        println!("predict: 0 profiles: no repeat gave a verification (see above)");
        std::process::exit(1);
    };
    println!(
        "predict: {profiles} profiles, max |error| {:.0}% (CPU per packet; headroom predicted, not measured)",
        worst * 100.0
    );
    println!(
        "{}",
        napilab_testkit::bench_verdict(
            "bench-predict",
            &format!("max |error| of CPU per packet {:.0}%", worst * 100.0),
            "<= 10%",
            worst <= GOAL
        )
    );
}
