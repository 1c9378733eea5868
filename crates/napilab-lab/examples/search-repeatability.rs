//! Repeatability of the maximum-throughput search (root): `make bench-lab`.
//!
//! The DUT of scenarios/line-rate.toml (NAPI kthread on CPU 1, line-rate engines on
//! CPU 0) searched `rounds` times with the RFC 2544 bisection and `rounds` times with
//! MLRsearch, alternating in one run so that both see the same machine. Prints each
//! answer, each method's spread (max - min) / mean, its Student-t interval, and for
//! MLRsearch whether the searches' [lower, upper] bounds overlap and how many trials
//! were disturbed (docs/lab.md, "Disturbed trials").
//!
//! Arguments: `[rounds] [final trial seconds]` (defaults 5 and 2).

use napilab_core::uncertainty::t_interval;
use napilab_core::RunRecord;

const SCENARIO: &str = include_str!("../../../scenarios/line-rate.toml");

fn search_once(method: &str, secs: f64, round: u32) -> Result<RunRecord, String> {
    let mut text = SCENARIO.replace("duration_s = 2.0", &format!("duration_s = {secs}"));
    text = text.replace("loads_pps = [100000, 400000]", "loads_pps = []");
    text.push_str(&format!("search_method = \"{method}\"\n"));
    if method == "mlrsearch" {
        text.push_str(
            "search_time_limit_s = 120\n\n[[measurement.search_goals]]\nname = \"pdr\"\nloss_ratio = 0.005\nexceed_ratio = 0.5\ninitial_trial_s = 0.5\nduration_sum_s = ",
        );
        text.push_str(&format!("{}\nwidth = 0.02\n", 2.0 * secs));
    }
    let out = std::env::temp_dir().join(format!(
        "napilab-search-bench-{}-{method}-{round}",
        std::process::id()
    ));
    let opts = napilab_lab::RunOptions::quiet(
        &text,
        &format!("scenarios/line-rate.toml ({method})"),
        &out,
    );
    let rec = napilab_lab::run(&opts)
        .map_err(|e| format!("{e:#}"))?
        .record;
    let _ = std::fs::remove_dir_all(&out);
    Ok(rec)
}

fn spread(values: &[f64]) -> (f64, f64) {
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    let (lo, hi) = values
        .iter()
        .fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
    (mean, if mean > 0.0 { (hi - lo) / mean } else { 0.0 })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let secs: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2.0);
    if let Err(e) = napilab_lab::runner::preflight() {
        eprintln!("search-repeatability: cannot run here: {e:#}");
        std::process::exit(2);
    }
    println!("== the DUT's maximum (scenarios/line-rate.toml), {rounds} searches per method, alternating; final trials {secs} s, loss <= 0.5%");
    let mut bisection = Vec::new();
    let mut mlr = Vec::new();
    let mut bounds = Vec::new();
    let mut disturbed = (0usize, 0usize);
    let started = std::time::Instant::now();
    for round in 0..rounds {
        for method in ["rfc2544-bisection", "mlrsearch"] {
            let t0 = std::time::Instant::now();
            let name = if method == "mlrsearch" {
                "mlrsearch"
            } else {
                "bisection"
            };
            let rec = match search_once(name, secs, round) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("search-repeatability: {method} round {round}: {e}");
                    std::process::exit(1);
                }
            };
            let Some(m) = rec
                .configurations
                .first()
                .and_then(|c| c.max_throughput.clone())
            else {
                eprintln!("search-repeatability: no maximum in the run");
                std::process::exit(1);
            };
            let (lb, ub) = m
                .searches
                .first()
                .and_then(|s| s.goals.first())
                .map_or((None, None), |g| {
                    (g.relevant_lower_bound, g.relevant_upper_bound)
                });
            let d = m.trials.iter().filter(|t| t.disturbance.disturbed).count();
            println!(
                "   round {} {:<17} {:>7.1} kpps  stopped {:<28} trials {:>3} (disturbed {:>3}){}  {:.0} s",
                round + 1,
                method,
                m.pps / 1e3,
                m.stopped,
                if m.trials.is_empty() { m.probes.len() } else { m.trials.len() },
                d,
                match (lb, ub) {
                    (Some(l), Some(u)) => format!("  bounds [{:.1}, {:.1}] kpps", l / 1e3, u / 1e3),
                    (Some(l), None) => format!("  bounds [{:.1}, -]", l / 1e3),
                    _ => String::new(),
                },
                t0.elapsed().as_secs_f64()
            );
            if method == "mlrsearch" {
                mlr.push(m.pps);
                bounds.push((lb.unwrap_or(0.0), ub.unwrap_or(f64::INFINITY)));
                disturbed.0 += d;
                disturbed.1 += m.trials.len();
            } else {
                bisection.push(m.pps);
            }
        }
    }
    let mut verdicts = Vec::new();
    for (name, values) in [("bisection", &bisection), ("mlrsearch", &mlr)] {
        let (mean, s) = spread(values);
        verdicts.push(napilab_testkit::bench_verdict(
            "bench-lab",
            &format!(
                "{name} maxima spread {:.1}% (max-min)/mean over {} searches",
                s * 100.0,
                values.len()
            ),
            "<= 5%",
            s <= 0.05,
        ));
        let ci = t_interval(values, 0.95);
        println!(
            "   {name}: mean {:.1} kpps, spread (max-min)/mean {:.1}% (goal <= 5%: {}), 95% interval {}",
            mean / 1e3,
            s * 100.0,
            if s <= 0.05 { "met" } else { "NOT met" },
            ci.map_or("-".into(), |c| format!("[{:.1}, {:.1}] kpps", c.low / 1e3, c.high / 1e3))
        );
    }
    let common_low = bounds.iter().map(|b| b.0).fold(0.0, f64::max);
    let common_high = bounds.iter().map(|b| b.1).fold(f64::INFINITY, f64::min);
    println!(
        "   mlrsearch bounds {} (highest lower bound {:.1}, lowest upper bound {:.1} kpps); {} of {} trials disturbed; {:.0} s in all",
        if common_low <= common_high { "all overlap" } else { "do NOT all overlap" },
        common_low / 1e3,
        common_high / 1e3,
        disturbed.0,
        disturbed.1,
        started.elapsed().as_secs_f64()
    );
    for v in verdicts {
        println!("{v}");
    }
}
