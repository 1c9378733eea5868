//! A/B overhead benchmark of the always-on tier (design.md principle 8).
//!
//! Builds a three-namespace veth router (`napilab-trace-<pid>-bench-{a,r,b}`), floods
//! UDP from a through r to b, and measures the forwarding rate (b's veth RX packets per
//! second) alternately without (A) and with (B) the BPF programs attached. Prints every
//! round, the mean B/A ratio and the spread of the per-pair ratios. Needs root.
//!
//!     cargo run --release -p napilab-trace --example overhead -- [ROUNDS] [SECONDS]

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use napilab_trace::{AlwaysOn, TraceOptions};

fn sh(script: &str) -> Result<String, String> {
    let out = Command::new("sh")
        .args(["-ec", script])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

struct Router {
    base: String,
}

impl Router {
    fn ns(&self, n: &str) -> String {
        format!("{}-{n}", self.base)
    }

    fn create() -> Result<Router, String> {
        let r = Router {
            base: format!("napilab-trace-{}-bench", std::process::id()),
        };
        let (a, m, b) = (r.ns("a"), r.ns("r"), r.ns("b"));
        sh(&format!(
            "for n in {a} {m} {b}; do ip netns add $n; ip -n $n link set lo up; done
             ip link add a0 netns {a} type veth peer name r0 netns {m}
             ip link add r1 netns {m} type veth peer name b0 netns {b}
             ip -n {a} addr add 10.82.1.1/24 dev a0; ip -n {a} link set a0 up
             ip -n {m} addr add 10.82.1.254/24 dev r0; ip -n {m} link set r0 up
             ip -n {m} addr add 10.82.2.254/24 dev r1; ip -n {m} link set r1 up
             ip -n {b} addr add 10.82.2.2/24 dev b0; ip -n {b} link set b0 up
             ip -n {a} route add default via 10.82.1.254
             ip -n {b} route add default via 10.82.2.254
             ip netns exec {m} sysctl -qw net.ipv4.ip_forward=1
             ip netns exec {a} ethtool -K a0 tso off gso off >/dev/null
             ip netns exec {m} ethtool -K r0 gro on >/dev/null
             ip netns exec {m} ethtool -K r1 tso off gso off >/dev/null
             ip netns exec {b} ethtool -K b0 gro on >/dev/null
             ip netns exec {a} ping -c1 -W1 10.82.2.2 >/dev/null"
        ))?;
        Ok(r)
    }

    fn delivered(&self) -> u64 {
        sh(&format!(
            "ip netns exec {} cat /sys/class/net/b0/statistics/rx_packets",
            self.ns("b")
        ))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        for n in ["a", "r", "b"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .status();
        }
    }
}

fn flood(ns: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let Ok(file) = std::fs::File::open(format!("/var/run/netns/{ns}")) else {
            return;
        };
        // SAFETY: setns on a valid namespace fd affects only this thread.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return;
        }
        let Ok(sock) = UdpSocket::bind("10.82.1.1:0") else {
            return;
        };
        let payload = [0u8; 64];
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..256 {
                let _ = sock.send_to(&payload, ("10.82.2.2", 9));
            }
        }
    })
}

fn round(router: &Router, seconds: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let sender = flood(router.ns("a"), stop.clone());
    std::thread::sleep(Duration::from_millis(300)); // warm-up
    let before = router.delivered();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let rate = router.delivered().saturating_sub(before) as f64 / start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = sender.join();
    rate
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let router = match Router::create() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot build the router (needs root): {e}");
            std::process::exit(1);
        }
    };
    let mut ratios = Vec::new();
    let mut stage_ratios: Vec<f64> = Vec::new();
    let (mut sum_a, mut sum_b) = (0.0, 0.0);
    for i in 0..rounds {
        let a = round(&router, seconds);
        let tracer = match AlwaysOn::start(&TraceOptions::default()) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("cannot load the BPF tier: {e}");
                std::process::exit(1);
            }
        };
        let b = round(&router, seconds);
        // Run-time statistics cost two clock reads per program run, so they are taken
        // in a separate one-second round that does not count towards B.
        let stats = napilab_trace::always_on::enable_run_time_stats();
        let started = Instant::now();
        let _ = round(&router, 1.0);
        let elapsed = started.elapsed().as_secs_f64();
        if stats.is_some() {
            let costs = tracer.program_costs();
            let runs: u64 = costs.iter().map(|c| c.1).sum();
            let ns: u64 = costs.iter().map(|c| c.2).sum();
            println!(
                "  BPF programs ran {:.0} times/s, {:.0} ns per run, {:.2}% of one CPU (kernel run-time stats)",
                runs as f64 / elapsed,
                ns as f64 / runs.max(1) as f64,
                ns as f64 / elapsed / 1e7
            );
            for (name, n, t) in costs.iter().filter(|c| c.1 > 0) {
                println!(
                    "    {name}: {:.0}/s, {:.0} ns/run",
                    *n as f64 / elapsed,
                    *t as f64 / (*n).max(1) as f64
                );
            }
        }
        drop(stats);
        drop(tracer);
        let cpus: Vec<u32> = (0..napilab_trace::always_on::possible_cpus() as u32).collect();
        let c = match napilab_trace::stages::StageSampler::start(&cpus, 1000) {
            Ok(sampler) => {
                let c = round(&router, seconds);
                drop(sampler);
                Some(c)
            }
            Err(e) => {
                eprintln!("stage sampler unavailable: {e}");
                None
            }
        };
        println!(
            "round {i}: A (no trace) {:.0} pkt/s, B (always-on) {:.0} pkt/s, B/A {:.3}{}",
            a,
            b,
            b / a,
            c.map(|c| format!(
                ", C (1 kHz stage sampling only) {c:.0} pkt/s, C/A {:.3}",
                c / a
            ))
            .unwrap_or_default()
        );
        if let Some(c) = c {
            stage_ratios.push(c / a);
        }
        ratios.push(b / a);
        sum_a += a;
        sum_b += b;
    }
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    println!(
        "forwarding rate B/A = {:.3} (mean A {:.0} pkt/s, mean B {:.0} pkt/s); per-round ratios {min:.3}..{max:.3}",
        sum_b / sum_a,
        sum_a / rounds as f64,
        sum_b / rounds as f64
    );
    if !stage_ratios.is_empty() {
        let mean = stage_ratios.iter().sum::<f64>() / stage_ratios.len() as f64;
        let min = stage_ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let max = stage_ratios
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        println!("1 kHz stage sampling: C/A mean {mean:.3}, per-round {min:.3}..{max:.3}");
    }
}
