//! The WireGuard study in the twin (docs/sim.md "The WireGuard receive pipeline"):
//! receive throughput, per-core load, packets per poll and latency per NAPI context
//! and client count.
//!
//! cargo run --release -p napilab-sim --example wireguard -- [clients,...] [contexts,...] [duration_ms] [per-cpu|shared] [OPTION...]
//! e.g. `-- 100,500,1000 softirq,threaded,threaded-pinned,workqueue 200`; the fourth
//! argument picks the decryption ring (`tunnel.decrypt_ring`, default the scenario's).
//! Options: `sched=none|log` (the host's scheduler scaling), `seed=N`, `warmup=MS`,
//! `worklist=pool|split` (`tunnel.worklist`, where the decryption item waits beside
//! the workqueue context's NAPI items), `PARAM=xF` (multiply a profile parameter by F, e.g. `fixed_cycles.context_switch=x1.25`).

use napilab_sim::config::{DecryptRing, SchedScaling, Worklist};
use napilab_sim::wireguard::{config, figures, Context};
use napilab_sim::Profile;

/// Multiply profile parameter `path` by `f`.
fn scale(p: &mut Profile, path: &str, f: f64) -> Result<(), String> {
    let (s, x, l) = (&mut p.stage_cycles, &mut p.fixed_cycles, &mut p.latency_ns);
    let v: &mut f64 = match path {
        "cpu_ghz" => &mut p.cpu_ghz,
        "stage_cycles.poll" => &mut s.poll,
        "stage_cycles.ip_stack" => &mut s.ip_stack,
        "fixed_cycles.hardirq" => &mut x.hardirq,
        "fixed_cycles.softirq" => &mut x.softirq,
        "fixed_cycles.poll" => &mut x.poll,
        "fixed_cycles.context_switch" => &mut x.context_switch,
        "fixed_cycles.idle_exit" => &mut x.idle_exit,
        "fixed_cycles.after_interrupt" => &mut x.after_interrupt,
        "nic.ingress.rx_usecs" => {
            let n = p
                .nic
                .as_mut()
                .ok_or_else(|| format!("profile {} has no nic", p.name))?;
            let u = &mut n.ingress.rx_usecs;
            *u = (*u as f64 * f).round() as u32;
            return Ok(());
        }
        "latency_ns.irq_delivery" | "latency_ns.idle_wakeup" | "latency_ns.rx_dma" => {
            let n = match path {
                "latency_ns.irq_delivery" => &mut l.irq_delivery,
                "latency_ns.idle_wakeup" => &mut l.idle_wakeup,
                _ => &mut l.rx_dma,
            };
            *n = (*n as f64 * f).round() as u64;
            return Ok(());
        }
        _ => {
            let t = p
                .tunnel_cycles
                .as_mut()
                .ok_or_else(|| format!("profile {} has no tunnel_cycles", p.name))?;
            match path {
                "tunnel_cycles.decap" => &mut t.decap,
                "tunnel_cycles.decrypt" => &mut t.decrypt,
                "tunnel_cycles.gro" => &mut t.gro,
                _ => return Err(format!("unknown profile parameter {path:?}")),
            }
        }
    };
    *v *= f;
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let clients: Vec<u32> = args
        .first()
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 250, 500, 750, 1000]);
    let contexts: Vec<Context> = args
        .get(1)
        .map(|s| {
            s.split(',')
                .filter_map(|x| Context::ALL.into_iter().find(|c| c.name() == x))
                .collect()
        })
        .unwrap_or_else(|| Context::ALL.to_vec());
    let duration: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200.0);
    let ring = match args.get(3).map(String::as_str) {
        None => None,
        Some("per-cpu") => Some(DecryptRing::PerCpu),
        Some("shared") => Some(DecryptRing::Shared),
        Some(other) => {
            eprintln!("decryption ring {other:?}: use per-cpu or shared");
            std::process::exit(2);
        }
    };
    let mut profile = match Profile::builtin("wg-xeon-gold-5220") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let mut sched = None;
    let mut worklist = None;
    let mut seed = 1;
    let mut warmup = 50.0;
    for opt in args.iter().skip(4) {
        let Some((k, v)) = opt.split_once('=') else {
            eprintln!("option {opt:?}: use KEY=VALUE");
            std::process::exit(2);
        };
        let bad = |what: &str| -> ! {
            eprintln!("option {opt:?}: {what}");
            std::process::exit(2);
        };
        match k {
            "sched" => {
                sched = Some(match v {
                    "none" => SchedScaling::None,
                    "log" => SchedScaling::Log,
                    _ => bad("use sched=none or sched=log"),
                })
            }
            "worklist" => {
                worklist = Some(match v {
                    "pool" => Worklist::Pool,
                    "split" => Worklist::Split,
                    _ => bad("use worklist=pool or worklist=split"),
                })
            }
            "seed" => seed = v.parse().unwrap_or_else(|_| bad("seed is a number")),
            "warmup" => warmup = v.parse().unwrap_or_else(|_| bad("warmup is in ms")),
            _ => {
                let f: f64 = v
                    .strip_prefix('x')
                    .and_then(|f| f.parse().ok())
                    .unwrap_or_else(|| bad("use PARAM=xFACTOR"));
                if let Err(e) = scale(&mut profile, k, f) {
                    bad(&e)
                }
            }
        }
    }
    println!(
        "context          clients  offered  rx Gbit/s  (arrived)  hot cpu  hot softirq  others softirq  others busy  pkts/poll hot  others  p99 us   mean us  wall s"
    );
    for &ctx in &contexts {
        for &n in &clients {
            let mut cfg = config(n, ctx, duration, warmup);
            if let (Some(t), Some(ring)) = (cfg.tunnel.as_mut(), ring) {
                t.decrypt_ring = ring;
            }
            if let (Some(t), Some(w)) = (cfg.tunnel.as_mut(), worklist) {
                t.worklist = w;
            }
            if let Some(s) = sched {
                cfg.host.sched_scaling = s;
            }
            let t0 = std::time::Instant::now();
            let r = napilab_sim::run(&cfg, &profile, seed);
            let wall = t0.elapsed().as_secs_f64();
            let f = figures(&r);
            println!(
                "{:<16} {:>7} {:>8.2} {:>10.2} {:>10.2} {:>8} {:>12.2} {:>15.2} {:>12.2} {:>14.2} {:>7.2} {:>7.0} {:>9.1} {:>7.1}",
                ctx.name(),
                n,
                f.offered_gbps,
                f.throughput_gbps,
                f.arrived_received_gbps,
                f.hot_cpu,
                f.hot_softirq,
                f.others_softirq,
                f.others_busy,
                f.hot_packets_per_poll,
                f.others_packets_per_poll,
                f.p99_us,
                f.mean_us,
                wall
            );
            if std::env::var_os("WG_LOSS").is_some() {
                println!("    loss: {:?}", r.model.loss_counters);
                let pct = |v: &[f64]| {
                    v.iter()
                        .map(|x| format!("{:.0}", x * 100.0))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                println!("    busy % per cpu: {}", pct(&f.busy));
                println!("    softirq % per cpu: {}", pct(&f.softirq));
                let ks: Vec<f64> = r.model.totals.cpus.iter().map(|c| c.ksoftirqd).collect();
                let bh: Vec<f64> = r
                    .model
                    .totals
                    .cpus
                    .iter()
                    .map(|c| c.softirq_bh_enable)
                    .collect();
                println!("    ksoftirqd % per cpu: {}", pct(&ks));
                let share = |f: fn(&napilab_sim::output::CpuReport) -> f64| -> Vec<f64> {
                    r.model.totals.cpus.iter().map(f).collect()
                };
                println!(
                    "    kworker/kthread % per cpu (decryption, NAPI polls, switches): {}",
                    pct(&share(|c| c.kthread))
                );
                println!(
                    "    NAPI polls in threads % per cpu: {}",
                    pct(&share(|c| c.napi_thread))
                );
                println!("    softirq at bh-enable % per cpu: {}", pct(&bh));
                let ppp: Vec<String> = r
                    .model
                    .totals
                    .cpus
                    .iter()
                    .map(|c| format!("{:.1}", c.packets_per_poll))
                    .collect();
                println!("    packets per poll per cpu: {}", ppp.join(" "));
            }
        }
    }
}
