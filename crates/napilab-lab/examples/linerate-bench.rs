//! Benchmark of the line-rate back end (root): `make bench-linerate`.
//!
//! 1. Offered rate from one core at full speed (requested far above what a core can
//!    do), DUT NAPI threaded on the other core.
//! 2. Requested vs offered at a few rates (and what the sink counted).
//! 3. The DUT's maximum forwarding rate (RFC 2544 bisection through the runner, line
//!    rate back end), measured `TRIALS` times, with its spread (max - min) / mean.
//!
//! Arguments: `[trials] [seconds per point] [parts]` (defaults 5, 2 and 123; `3` runs
//! only the repeated searches).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use napilab_core::scenario::{DutPatch, NapiContext, Topology};
use napilab_lab::linerate::{LineRate, LrClass, LrGenSpec};
use napilab_lab::netns::new_run_id;
use napilab_lab::topology::Lab;

const SCENARIO: &str = include_str!("../../../scenarios/line-rate.toml");
const GEN_CPU: u32 = 0;
const DUT_CPU: u32 = 1;

fn build_lab(sink_cpu: u32) -> Result<Lab, String> {
    let mut s = DutPatch::default().resolve();
    s.napi = NapiContext::Threaded;
    s.napi_cpus = vec![DUT_CPU];
    s.napi_fifo = vec![20];
    s.generator_cpus = vec![GEN_CPU];
    s.sink_cpus = vec![sink_cpu];
    Lab::build(&new_run_id(), &Topology::default(), &s)
        .map_err(|e| format!("building the lab: {e}"))
}

/// One generator run; returns (offered pps, generator CPU busy, sink received,
/// generator emitted) over the measurement window.
fn point(
    lr: &mut LineRate,
    rate: f64,
    secs: f64,
    point: u32,
) -> Result<(f64, f64, u64, u64, u64), String> {
    lr.begin(point);
    let before = lr.counts().map_err(|e| e.to_string())?;
    let spec = LrGenSpec {
        classes: vec![LrClass {
            id: 0,
            port: 9000,
            size: 64,
            share: 1.0,
        }],
        rate_pps: rate,
        warmup: Duration::from_millis(300),
        duration: Duration::from_secs_f64(secs),
        point,
        cpus: vec![GEN_CPU],
        pacing: napilab_lab::linerate::Pacing::InKernel { beside_dut: false },
    };
    let g = lr
        .start_generator(spec, Arc::new(AtomicBool::new(false)))
        .join()
        .map_err(|_| "generator panicked".to_string())?
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(300));
    let d = lr.counts().map_err(|e| e.to_string())?.since(&before);
    if let Some(e) = &g.first_error {
        eprintln!("  generator error: {e}");
    }
    Ok((
        d.gen[0][1] as f64 / g.window_s,
        g.cpu_busy,
        d.sink[0],
        d.gen[0][1],
        g.skipped,
    ))
}

fn main() {
    if !napilab_probe::kernel::is_root() {
        eprintln!("linerate-bench needs root (network namespaces, BPF)");
        std::process::exit(2);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let trials: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(5);
    let secs: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2.0);
    let parts = args.get(2).cloned().unwrap_or_else(|| "123".into());
    if let Err(e) = run(trials, secs, &parts) {
        eprintln!("linerate-bench: {e}");
        std::process::exit(1);
    }
}

fn run(trials: u32, secs: f64, parts: &str) -> Result<(), String> {
    let mut verdicts = Vec::new();
    if parts.contains('1') || parts.contains('2') {
        let best = offered_rates(secs)?;
        verdicts.push(napilab_testkit::bench_verdict(
            "bench-linerate",
            &format!("one core offers {:.2} Mpps at full rate (best)", best / 1e6),
            ">= 4 Mpps",
            best >= 4e6,
        ));
    }
    if parts.contains('3') {
        if let Some(spread) = repeated_searches(trials, secs)? {
            verdicts.push(napilab_testkit::bench_verdict(
                "bench-linerate",
                &format!(
                    "maxima of repeated searches spread {:.1}% (max-min)/mean",
                    spread * 100.0
                ),
                "<= 5%",
                spread <= 0.05,
            ));
        }
    }
    for v in verdicts {
        println!("{v}");
    }
    Ok(())
}

/// Parts 1 and 2: what the generator offers, alone and against requests.
fn offered_rates(secs: f64) -> Result<f64, String> {
    let lab = build_lab(DUT_CPU)?;
    let classes = [LrClass {
        id: 0,
        port: 9000,
        size: 64,
        share: 1.0,
    }];
    let mut lr = LineRate::start(&lab, &classes, true).map_err(|e| e.to_string())?;
    println!("== 1. offered rate from one core (CPU {GEN_CPU}), requested 100 Mpps, 64-byte packets, DUT NAPI threaded on CPU {DUT_CPU}");
    let mut full = Vec::new();
    for i in 0..3 {
        let (off, busy, rx, tx, _) = point(&mut lr, 100e6, secs, 1 + i)?;
        println!(
            "   run {}: offered {:.2} Mpps (generator CPU busy {:.0}%); the DUT forwarded {:.2} Mpps of it ({:.1}%; the rest was refused at its full ingress ring)",
            i + 1,
            off / 1e6,
            busy * 100.0,
            rx as f64 / secs / 1e6,
            100.0 * rx as f64 / tx.max(1) as f64
        );
        full.push(off);
    }
    let best = full.iter().copied().fold(0.0, f64::max);
    println!(
        "   offered at full rate: best {:.2} Mpps, mean {:.2} Mpps (goal >= 4 Mpps: {})",
        best / 1e6,
        full.iter().sum::<f64>() / full.len() as f64 / 1e6,
        if best >= 4e6 { "met" } else { "NOT met" }
    );
    // Part 1 keeps the generator alone on its CPU (the sink is on the DUT's CPU and
    // what the DUT delivers does not matter); from here on the sink shares the
    // generator's CPU, as in scenarios/line-rate.toml.
    drop(lr);
    drop(lab);
    let lab = build_lab(GEN_CPU)?;
    let mut lr = LineRate::start(&lab, &classes, true).map_err(|e| e.to_string())?;
    println!("== 2. requested vs offered (and received by the sink; sink on CPU {GEN_CPU}, DUT on CPU {DUT_CPU})");
    for (i, rate) in [10_000.0, 100_000.0, 500_000.0, 1_000_000.0, 2_000_000.0]
        .into_iter()
        .enumerate()
    {
        let (off, busy, rx, tx, skipped) = point(&mut lr, rate, secs, 10 + i as u32)?;
        println!(
            "   requested {:>9.0} pps: offered {:>10.0} pps (ratio {:.4}, {} frames skipped behind schedule), generator CPU busy {:>3.0}%, sink received {} of {} ({:.2}%)",
            rate,
            off,
            off / rate,
            skipped,
            busy * 100.0,
            rx,
            tx,
            100.0 * rx as f64 / tx.max(1) as f64
        );
    }
    Ok(best)
}

/// Part 3: the DUT's maximum through the runner, `trials` times.
fn repeated_searches(trials: u32, secs: f64) -> Result<Option<f64>, String> {
    println!("== 3. the DUT's maximum forwarding rate, {trials} searches (scenarios/line-rate.toml: DUT NAPI on CPU {DUT_CPU}, generator and sink on CPU {GEN_CPU})");
    let mut text = SCENARIO.to_string();
    text.push_str("\n[[axes]]\nname = \"trial\"\nvalues = [");
    for t in 1..=trials {
        text.push_str(&format!("{{ name = \"trial-{t}\" }}, "));
    }
    text.push_str("]\n");
    text = text.replace("duration_s = 2.0", &format!("duration_s = {secs}"));
    let out = std::env::temp_dir().join(format!("napilab-linerate-bench-{}", std::process::id()));
    let opts = napilab_lab::RunOptions::quiet(&text, "scenarios/line-rate.toml (x trials)", &out);
    let rec = napilab_lab::run(&opts)
        .map_err(|e| format!("{e:#}"))?
        .record;
    let _ = std::fs::remove_dir_all(&out);
    for n in &rec.notices {
        println!("   notice: {}: {}", n.what, n.why);
    }
    let mut maxima = Vec::new();
    for c in &rec.configurations {
        let Some(mt) = &c.max_throughput else {
            continue;
        };
        // The point at the answer: the engines' headroom there.
        let at = c.points.iter().rfind(|p| p.requested_pps == mt.pps);
        let above: Vec<String> = c
            .points
            .iter()
            .filter(|p| p.requested_pps > mt.pps)
            .map(|p| {
                let lost: Vec<String> = p.classes[0]
                    .loss_counters
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                format!(
                    "{:.0}k: loss {:.2}% [{}]",
                    p.requested_pps / 1e3,
                    p.loss_ratio() * 100.0,
                    lost.join(", ")
                )
            })
            .take(2)
            .collect();
        println!(
            "   {}: max {:.0} kpps ({}); at the answer offered {:.0} kpps, generator busy {:.0}%, sink busy {}{}; above: {}",
            c.name,
            mt.pps / 1e3,
            mt.stopped,
            at.map_or(0.0, |p| p.offered_pps / 1e3),
            at.and_then(|p| p.generator.cpu_busy).unwrap_or(0.0) * 100.0,
            at.and_then(|p| p.sink.cpu_busy)
                .map_or("n/a".to_string(), |b| format!("{:.0}%", b * 100.0)),
            if at.is_some_and(|p| p.sink.saturated) { " (SATURATED)" } else { "" },
            above.join("; ")
        );
        maxima.push(mt.pps);
    }
    let mut spread = None;
    if !maxima.is_empty() {
        let mean = maxima.iter().sum::<f64>() / maxima.len() as f64;
        let (lo, hi) = maxima
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
        println!(
            "   maxima kpps: {}; mean {:.0} kpps, spread (max-min)/mean = {:.1}% (goal <= 5%: {})",
            maxima
                .iter()
                .map(|x| format!("{:.0}", x / 1e3))
                .collect::<Vec<_>>()
                .join(", "),
            mean / 1e3,
            (hi - lo) / mean * 100.0,
            if (hi - lo) / mean <= 0.05 {
                "met"
            } else {
                "NOT met"
            }
        );
        spread = Some((hi - lo) / mean);
    }
    Ok(spread)
}
