//! Benchmark of the paced back end (docs/lab.md, "The paced back end"): does the generator
//! hold the requested rate, and do generator and sink keep up? For each requested rate
//! it runs the send paths side by side (UDP GSO batches, and one sendmmsg message per
//! packet as before), interleaved so that both see the same machine load, and prints
//! offered / requested, what the sink received, CPU of generator and sink, late
//! departures and the timestamp bound.
//!
//! ```text
//! sudo cargo run --release -p napilab-lab --example paced-bench -- \
//!     [--loads 100000,250000,500000,750000,1000000] [--modes gso,sendmmsg-other] \
//!     [--duration 2] [--warmup 0.5] [--repeats 2] [--gen-cpu 0] [--dut-cpu 1] \
//!     [--sink-cpu 1] [--sink-napi-cpu 1] [--sink-gro off,on] [--size 64] [--direct]
//! ```
//!
//! Topology: the lab's router (gen -> DUT -> sink, DUT NAPI threaded on `--dut-cpu`).
//! `--direct` adds rows with the generator inside the sink's namespace sending to the
//! sink's own address (loopback: no veth, no DUT), the generator and sink alone.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use napilab_core::scenario::{DutPatch, NapiContext, Pattern, Topology};
use napilab_lab::counters;
use napilab_lab::netns::new_run_id;
use napilab_lab::topology::{Lab, SINK_ADDR};
use napilab_lab::traffic::{
    start_generator_with, ClassSpec, GenOptions, GenSched, GenSpec, Sink, SinkOptions, TxPath,
};

struct Opts {
    loads: Vec<f64>,
    modes: Vec<(String, GenOptions)>,
    duration: f64,
    warmup: f64,
    repeats: u32,
    gen_cpu: u32,
    dut_cpu: u32,
    sink_cpu: u32,
    sink_napi_cpu: Option<u32>,
    size: u32,
    direct: bool,
    sink_gro: Vec<bool>,
}

fn parse() -> Result<Opts> {
    let mut o = Opts {
        loads: vec![100e3, 250e3, 500e3, 750e3, 1e6],
        modes: ["gso", "sendmmsg-other"]
            .iter()
            .map(|m| mode(m))
            .collect::<Result<_>>()?,
        duration: 2.0,
        warmup: 0.5,
        repeats: 2,
        gen_cpu: 0,
        dut_cpu: 1,
        sink_cpu: 1,
        sink_napi_cpu: None,
        size: 64,
        direct: false,
        sink_gro: vec![false],
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--direct" {
            o.direct = true;
            i += 1;
            continue;
        }
        let v = args
            .get(i + 1)
            .with_context(|| format!("{a} needs a value"))?;
        let num = |v: &str| -> Result<f64> {
            v.parse::<f64>()
                .with_context(|| format!("{a}: `{v}` is not a number"))
        };
        match a {
            "--loads" => {
                o.loads = v.split(',').map(num).collect::<Result<_>>()?;
            }
            "--modes" => {
                o.modes = v.split(',').map(mode).collect::<Result<_>>()?;
            }
            "--duration" => o.duration = num(v)?,
            "--warmup" => o.warmup = num(v)?,
            "--repeats" => o.repeats = num(v)? as u32,
            "--gen-cpu" => o.gen_cpu = num(v)? as u32,
            "--dut-cpu" => o.dut_cpu = num(v)? as u32,
            "--sink-cpu" => o.sink_cpu = num(v)? as u32,
            "--sink-gro" => {
                o.sink_gro = v
                    .split(',')
                    .map(|x| match x {
                        "off" => Ok(false),
                        "on" => Ok(true),
                        _ => bail!("--sink-gro: `{x}` is not on or off"),
                    })
                    .collect::<Result<_>>()?;
            }
            "--sink-napi-cpu" => o.sink_napi_cpu = Some(num(v)? as u32),
            "--size" => o.size = num(v)? as u32,
            _ => bail!("unknown option {a} (see the example's documentation)"),
        }
        i += 2;
    }
    if !(0.1..=60.0).contains(&o.duration) || !(0.0..=10.0).contains(&o.warmup) {
        bail!("--duration must be 0.1-60 s and --warmup 0-10 s");
    }
    if !(64..=1500).contains(&o.size) {
        bail!("--size must be 64-1500 bytes (IP packet)");
    }
    Ok(o)
}

/// A generator variant: `gso` or `sendmmsg`, then optionally `-fifo` (SCHED_FIFO
/// priority 5) or `-other` (SCHED_OTHER; neither: automatic, as in the lab's runs) and
/// `-spinN` (spin when the next departure is under N us away).
fn mode(m: &str) -> Result<(String, GenOptions)> {
    let mut o = GenOptions::default();
    for (i, part) in m.split('-').enumerate() {
        match (i, part) {
            (0, "gso") => o.path = TxPath::UdpGso,
            (0, "sendmmsg") => o.path = TxPath::Sendmmsg,
            (_, "fifo") if i > 0 => o.sched = GenSched::Fifo(5),
            (_, "other") if i > 0 => o.sched = GenSched::Other,
            (_, p) if i > 0 && p.starts_with("spin") => {
                o.spin_ns = Some(
                    p[4..].parse::<u64>().with_context(|| {
                        format!("--modes: `{m}`: spin needs microseconds, e.g. spin20")
                    })? * 1000,
                );
            }
            _ => bail!("--modes: `{m}` is not gso|sendmmsg[-fifo|-other][-spinN]"),
        }
    }
    Ok((m.to_string(), o))
}

fn main() -> Result<()> {
    let o = parse()?;
    if let Err(e) = napilab_lab::runner::preflight() {
        println!("SKIPPED paced-bench: {e}");
        return Ok(());
    }
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    for c in [
        o.gen_cpu,
        o.dut_cpu,
        o.sink_cpu,
        o.sink_napi_cpu.unwrap_or(0),
    ] {
        if c >= ncpu {
            bail!("CPU {c} does not exist (this machine has {ncpu}): pick --gen-cpu/--dut-cpu/--sink-cpu below {ncpu}");
        }
    }
    let mut settings = DutPatch::default().resolve();
    settings.napi = NapiContext::Threaded;
    settings.napi_cpus = vec![o.dut_cpu];
    settings.generator_cpus = vec![o.gen_cpu];
    let sink_napi_cpu = o.sink_napi_cpu.unwrap_or(o.sink_cpu);
    settings.sink_cpus = vec![sink_napi_cpu];
    let id = new_run_id();
    let lab = Lab::build(&id, &Topology::default(), &settings).context("building the lab")?;
    println!(
        "placement: generator CPU {}, DUT NAPI kthread CPU {}, sink thread CPU {}, sink NAPI kthread (SCHED_FIFO) CPU {}; {} B packets, {} s windows after {} s warm-up",
        o.gen_cpu, o.dut_cpu, o.sink_cpu, sink_napi_cpu, o.size, o.duration, o.warmup
    );
    println!(
        "{:<7} {:<15} {:>4} {:>8} {:>9} {:>8} {:>9} {:>10} {:>6} {:>8} {:>7} {:>6} {:>6} {:>6} {:>8} {:>8} {:>6} {:>6}  saturated / notes",
        "route", "mode", "rep", "req k", "offered k", "off/req", "sink k", "gen%(send)", "sink%", "late", "behind", "stampu", "maxb", "meanb", "sockdrop", "fullrd", "p50us", "p99us"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut point = 0u32;
    let mut ratios: Vec<(String, f64, f64)> = Vec::new();
    let routes: Vec<(&str, &str)> = if o.direct {
        vec![
            ("router", lab.gen_ns.as_str()),
            ("direct", lab.sink_ns.as_str()),
        ]
    } else {
        vec![("router", lab.gen_ns.as_str())]
    };
    for rep in 0..o.repeats {
        for &load in &o.loads {
            for &(route, ns) in &routes {
                for &gro in &o.sink_gro {
                    // A fresh sink per point, so sinks with and without UDP GRO alternate.
                    let sink = Sink::start_with(
                        &lab.sink_ns,
                        &[9000],
                        &[o.sink_cpu],
                        SinkOptions { udp_gro: gro },
                    )
                    .context("starting the sink")?;
                    for (mname, mopts) in &o.modes {
                        point += 1;
                        let spec = GenSpec {
                            ns: ns.to_string(),
                            dst: SINK_ADDR,
                            classes: vec![ClassSpec {
                                id: 0,
                                port: 9000,
                                size: o.size,
                                share: 1.0,
                                pattern: Pattern::Cbr,
                            }],
                            rate_pps: load,
                            warmup: Duration::from_secs_f64(o.warmup),
                            duration: Duration::from_secs_f64(o.duration),
                            point,
                            cpus: vec![o.gen_cpu],
                            seed: u64::from(point),
                            flows: 1,
                        };
                        sink.begin(point);
                        let before = counters::snapshot(&lab);
                        let g = start_generator_with(spec, *mopts, stop.clone())
                            .join()
                            .map_err(|_| anyhow::anyhow!("the generator thread panicked"))?
                            .context("generator")?;
                        std::thread::sleep(Duration::from_millis(300));
                        let s = sink.collect()?;
                        let after = counters::snapshot(&lab);
                        let lost_at: Vec<String> = counters::deltas(&before, &after)
                            .into_iter()
                            .filter(|(k, _)| !k.starts_with("sink udp"))
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect();
                        let sent: u64 = g.sent.iter().sum();
                        let offered = sent as f64 / g.window_s.max(1e-9);
                        let sc = &s.classes[0];
                        let received = sc.received as f64 / g.window_s.max(1e-9);
                        let lat = sc.latency.summary();
                        let mut notes = Vec::new();
                        if g.saturated() {
                            notes.push("GEN".to_string());
                        }
                        if sc.socket_drops > 0 {
                            notes.push("SINK".to_string());
                        }
                        if s.negative_latency > 0 {
                            notes.push(format!("negative latency {}", s.negative_latency));
                        }
                        if g.stolen_ms > 0 {
                            notes.push(format!("gen CPU stolen {} ms", g.stolen_ms));
                        }
                        if let Some(p) = g.fifo_priority {
                            notes.push(format!("FIFO{p}"));
                        }
                        if g.slow_sends > 0 {
                            notes.push(format!("slow_sends={}", g.slow_sends));
                        }
                        if let Some(n) = &g.tx_note {
                            notes.push(n.clone());
                        }
                        notes.extend(lost_at);
                        println!(
                        "{:<7} {:<15} {:>4} {:>8.0} {:>9.1} {:>7.2}% {:>9.1} {:>4.0}({:>3.0}) {:>6.0} {:>8} {:>7} {:>6} {:>6} {:>6.2} {:>8} {:>8} {:>6.0} {:>6.0}  {}",
                        route,
                        format!("{mname}{}", if gro { "+sgro" } else { "" }),
                        rep + 1,
                        load / 1e3,
                        offered / 1e3,
                        offered / load * 100.0,
                        received / 1e3,
                        g.cpu_busy * 100.0,
                        g.send_busy * 100.0,
                        s.cpu_busy * 100.0,
                        g.late,
                        g.behind_at_end,
                        g.max_stamp_age_ns.div_ceil(1000),
                        g.max_batch,
                        sent as f64 / g.batches.max(1) as f64,
                        sc.socket_drops,
                        s.full_reads,
                        lat.p50_us,
                        lat.p99_us,
                        notes.join(" ")
                    );
                        ratios.push((
                            format!(
                                "{route} {:>5.0}k {mname}{}",
                                load / 1e3,
                                if gro { " sink-gro" } else { "" }
                            ),
                            offered / load,
                            g.send_busy,
                        ));
                    }
                }
            }
        }
    }
    println!("\nsummary: offered/requested (min-max over repeats), generator send-busy (mean)");
    // First-seen order: route, then load, then mode, as measured.
    let mut keys: Vec<String> = Vec::new();
    for r in &ratios {
        if !keys.contains(&r.0) {
            keys.push(r.0.clone());
        }
    }
    for k in keys {
        let v: Vec<&(String, f64, f64)> = ratios.iter().filter(|r| r.0 == k).collect();
        let lo = v.iter().map(|r| r.1).fold(f64::MAX, f64::min);
        let hi = v.iter().map(|r| r.1).fold(f64::MIN, f64::max);
        let cpu = v.iter().map(|r| r.2).sum::<f64>() / v.len() as f64;
        println!(
            "  {k:<30} {:>7.2}% - {:>7.2}%   gen send-busy {:>4.0}%",
            lo * 100.0,
            hi * 100.0,
            cpu * 100.0
        );
    }
    drop(lab);
    Ok(())
}
