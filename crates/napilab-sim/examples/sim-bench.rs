//! Speed of the twin, measured side by side in one run (docs/architecture.md principle 8).
//!
//!   cargo run --release -p napilab-sim --example sim-bench
//!
//! Prints: events/s of the raw event loop (hold model), the wall time to simulate one
//! second of a single-core router offered 2 Mpps, and the speed ratio against the
//! minimal SimPy model in bench/simpy/router.py (needs `python3` with `pip install
//! simpy`; skipped with a message otherwise). Set NAPILAB_PYTHON to choose the
//! interpreter.

use std::process::Command;
use std::time::Instant;

use napilab_sim::event::EventQueue;
use napilab_sim::rng::Rng;
use napilab_sim::{Profile, SimConfig};

const ROUTER_SQ: &str = include_str!("../tests/fixtures/legacy/router-sq.toml");

/// The classic "hold" benchmark: a heap of `pending` events; each step pops the earliest
/// and schedules one at a random later time.
fn raw_event_loop(pending: usize, steps: u64) -> f64 {
    let mut q: EventQueue<u32> = EventQueue::new();
    let mut rng = Rng::new(1, 1);
    for i in 0..pending {
        q.schedule(rng.next_u64() % 1_000_000, i as u32);
    }
    let t0 = Instant::now();
    let mut sink = 0u64;
    for _ in 0..steps {
        let Some((t, e)) = q.pop() else { break };
        sink = sink.wrapping_add(e as u64);
        q.schedule(t + 1 + rng.next_u64() % 1_000_000, e);
    }
    let secs = t0.elapsed().as_secs_f64();
    std::hint::black_box(sink);
    steps as f64 / secs
}

/// Time this thread has spent on a CPU, in seconds (first field of
/// /proc/thread-self/schedstat, in ns); None where that file is missing.
fn thread_cpu_s() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns / 1e9)
}

/// Peak resident set size (VmHWM of /proc/self/status).
fn peak_rss() -> Option<String> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(l["VmHWM:".len()..].trim().to_string())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let profile = Profile::builtin("router-e3-1230-ixgbe")?;
    // `sim-bench twin`: only the twin's router timing (for quick A/B while tuning).
    let twin_only = std::env::args().nth(1).as_deref() == Some("twin");
    println!("napilab-sim benchmark (one core; wall times of this machine)");

    for pending in [64usize, 1024, 65536].into_iter().filter(|_| !twin_only) {
        let eps = raw_event_loop(pending, 20_000_000);
        println!(
            "raw event loop, {pending:>6} pending events: {:>6.1} M events/s",
            eps / 1e6
        );
    }

    let mut cfg = SimConfig::from_toml_str(ROUTER_SQ, "scenarios/router-sq.toml")?;
    cfg.traffic.rate_pps = 2_000_000.0;
    cfg.measurement.warmup_ms = 0.0;
    cfg.measurement.duration_ms = 1000.0;
    let mut best = f64::INFINITY;
    let mut best_cpu = f64::INFINITY;
    let mut last = None;
    for _ in 0..if twin_only { 7 } else { 3 } {
        let c0 = thread_cpu_s();
        let t0 = Instant::now();
        let r = napilab_sim::run(&cfg, &profile, 1);
        best = best.min(t0.elapsed().as_secs_f64());
        if let (Some(a), Some(b)) = (c0, thread_cpu_s()) {
            best_cpu = best_cpu.min(b - a);
        }
        last = Some(r);
    }
    let r = last.ok_or("no run")?;
    if best_cpu.is_finite() {
        println!(
            "twin: on-CPU time of the best run {best_cpu:.3} s (/proc/thread-self/schedstat; \
             wall time includes waiting for a CPU on this shared machine)"
        );
    }
    let twin_speed = 1.0 / best;
    println!(
        "twin: 1 s of the single-core router at 2 Mpps offered: {:.3} s wall (best of 3), \
         {} events, {:.2} M packets/s of wall time; forwarded {:.0} pps",
        best,
        r.model.events,
        r.model.totals.offered_pps / best / 1e6,
        r.model.totals.forwarded_pps
    );

    if twin_only {
        return Ok(());
    }
    // The SimPy model with the same costs, taken from the profile.
    let s = &profile.stage_cycles;
    let f = &profile.fixed_cycles;
    let ns = |c: f64| c / profile.cpu_ghz;
    let py = std::env::var("NAPILAB_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/simpy/router.py");
    let simpy_duration = 0.2;
    let args = [
        script.to_string(),
        "--rate".into(),
        "2000000".into(),
        "--duration".into(),
        simpy_duration.to_string(),
        "--per-packet-ns".into(),
        format!("{:.1}", ns(s.poll + s.ip_stack + s.xmit)),
        "--per-poll-ns".into(),
        format!("{:.1}", ns(f.poll)),
        "--per-irq-ns".into(),
        format!("{:.1}", ns(f.hardirq + f.softirq)),
        "--irq-delivery-ns".into(),
        profile.latency_ns.irq_delivery.to_string(),
    ];
    println!("simpy: {py} {}", args.join(" "));
    // Best of three, as for the twin.
    let mut simpy: Option<(f64, f64, f64)> = None;
    let mut verdict = None;
    for _ in 0..3 {
        match Command::new(&py).args(&args).output() {
            Ok(out) if out.status.success() => {
                let line = String::from_utf8_lossy(&out.stdout);
                let v: serde_json::Value = serde_json::from_str(line.trim())?;
                let wall = v["wall_s"].as_f64().ok_or("no wall_s")?;
                let sim_s = v["simulated_s"].as_f64().ok_or("no simulated_s")?;
                let fwd = v["forwarded_pps"].as_f64().unwrap_or(f64::NAN);
                if simpy.is_none_or(|(w, _, _)| wall < w) {
                    simpy = Some((wall, sim_s, fwd));
                }
            }
            Ok(out) => {
                println!(
                    "simpy: skipped, the model failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                break;
            }
            Err(e) => {
                println!("simpy: skipped, cannot run {py}: {e} (pip install simpy)");
                break;
            }
        }
    }
    if let Some((wall, sim_s, fwd)) = simpy {
        let simpy_speed = sim_s / wall;
        println!(
            "simpy: {sim_s} s simulated in {wall:.3} s wall, best of 3 ({simpy_speed:.3} \
             simulated s per wall s); forwarded {fwd:.0} pps"
        );
        let ratio = twin_speed / simpy_speed;
        println!(
            "ratio: twin is {ratio:.1}x faster than the SimPy model (simulated seconds per wall \
             second, best of 3 each, same machine, same run)"
        );
        verdict = Some(napilab_testkit::bench_verdict(
            "bench-sim",
            &format!("the twin {ratio:.1}x as fast as the SimPy model"),
            ">= 100x",
            ratio >= 100.0,
        ));
    }

    // Memory over long runs: the twin keeps packets only in rings and queues and
    // counters per interval, so peak memory must not grow with simulated time.
    let mut long = cfg.clone();
    long.traffic.rate_pps = 1_500_000.0;
    long.measurement.interval_ms = Some(1000.0);
    for secs in [6.0, 60.0] {
        long.measurement.duration_ms = secs * 1000.0;
        let t0 = Instant::now();
        let r = napilab_sim::run(&long, &profile, 1);
        println!(
            "long run: {secs:.0} simulated s at 1.5 Mpps in {:.2} s wall, {} events; peak RSS \
             of this process so far {}",
            t0.elapsed().as_secs_f64(),
            r.model.events,
            peak_rss().unwrap_or_else(|| "unknown".into())
        );
    }
    println!("rerun: cargo run --release -p napilab-sim --example sim-bench");
    println!(
        "{}",
        verdict.unwrap_or_else(|| napilab_testkit::bench_verdict(
            "bench-sim",
            "no ratio: the SimPy model did not run (see above)",
            ">= 100x",
            false
        ))
    );
    Ok(())
}
