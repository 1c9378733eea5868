//! Benchmark of the request workload engines (docs/lab.md, "Request workloads"), all in
//! one run on one pair of namespaces (`nl-kv-<pid>-bench-a` client on CPU 0, `-b`
//! server on CPU 1):
//!
//! 1. memcached (`-t 1`, CPU 1), closed loop: its capacity here, and the CPU time the
//!    load generator spent per request beside the CPU time memcached spent per request
//!    (their ratio says how many memcached cores one generator core can load).
//! 2. memcached, open loop at rising QPS: what the generator offers from one core, and
//!    where it reports itself (not the server) as the limit.
//! 3. napilab's server, closed loop, in each interrupt mode (no-coalescing, deferral,
//!    busy-wait, irq-suspend; per-NAPI settings applied with napilab-tune's journal and
//!    reverted): its capacity per mode.
//!
//! ```text
//! sudo cargo run --release -p napilab-lab --example kv-bench -- [SECONDS=3] [REPEATS=2]
//! ```
//! Each row is the median of REPEATS runs of SECONDS; rows of the same table alternate
//! their order between repeats so that they see the same machine load.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use napilab_lab::request::epoll::EpollMode;
use napilab_lab::request::keyspace::Keyspace;
use napilab_lab::request::loadgen::{self, LoadConfig, ETC_GET_FRACTION};
use napilab_lab::request::memcached::{in_namespace, Memcached, MemcachedConfig};
use napilab_lab::request::results::{LoadResult, LoopKind, ServerStats};
use napilab_lab::request::server::{KvServer, ServerConfig};
use napilab_testkit::VethPair;

const CHILD_ENV: &str = "NL_KV_BENCH_CHILD";
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn keyspace() -> Keyspace {
    Keyspace::default()
}

fn load(
    p: &VethPair,
    server: std::net::SocketAddrV4,
    kind: LoopKind,
    secs: f64,
    conns: usize,
) -> Result<LoadResult, String> {
    loadgen::run(
        &LoadConfig {
            server,
            netns: Some(p.a.clone()),
            cpus: vec![0],
            threads: 1,
            connections: conns,
            kind,
            warmup: Duration::from_millis(500),
            duration: Duration::from_secs_f64(secs),
            get_fraction: ETC_GET_FRACTION,
            keyspace: keyspace(),
            timeout: Duration::from_secs(1),
            seed: 7,
        },
        &STOP,
    )
}

/// Child mode: `napilab tune apply|revert` of a mode's profile on `vb`, inside the
/// namespace (`ip netns exec` gives it the namespace's /sys).
fn child(spec: &str) -> i32 {
    let mut it = spec.splitn(3, ' ');
    let (verb, profile, dir) = (
        it.next().unwrap_or(""),
        it.next().unwrap_or(""),
        PathBuf::from(it.next().unwrap_or("/nonexistent")),
    );
    let mut ctx = napilab_tune::host_ctx();
    let r = match verb {
        "apply" => napilab_tune::profile::Params::from_args(&["vb".to_string()], None, &[])
            .and_then(|params| {
                let plan = napilab_tune::plan_profile(&mut ctx, profile, &params)
                    .map_err(|e| e.to_string())?;
                napilab_tune::apply(&mut ctx, plan, &dir)
                    .map(drop)
                    .map_err(|e| e.to_string())
            }),
        "revert" => napilab_tune::find_journal(&dir, None)
            .and_then(|j| napilab_tune::revert(&mut ctx, &j))
            .map(drop)
            .map_err(|e| e.to_string()),
        _ => Err(format!("unknown verb {verb}")),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// Ok(true) when apply wrote a journal (something changed).
fn tune(ns: &str, verb: &str, profile: &str, dir: &Path) -> Result<bool, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(exe)
        .env(CHILD_ENV, format!("{verb} {profile} {}", dir.display()))
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim() == "journal")
    } else {
        Err(format!(
            "tune {verb} {profile}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

struct Row {
    qps: Vec<f64>,
    p99: Vec<f64>,
    gen_cpu_us: Vec<f64>,
    srv_cpu_us: Vec<f64>,
    limited: Vec<String>,
    offered: Vec<f64>,
    gen_busy: Vec<f64>,
}

impl Row {
    fn new() -> Row {
        Row {
            qps: vec![],
            p99: vec![],
            gen_cpu_us: vec![],
            srv_cpu_us: vec![],
            limited: vec![],
            offered: vec![],
            gen_busy: vec![],
        }
    }
    /// `server`: the server's CPU seconds and requests over the whole load (warm-up
    /// included).
    fn add(&mut self, r: &LoadResult, server: Option<(f64, u64)>) {
        self.qps.push(r.achieved_qps);
        self.offered.push(r.offered_qps);
        self.gen_busy.push(r.generator.cpu_busy);
        self.p99.push(r.latency.p99_us);
        // Generator CPU per request: its busy share (thread CPU / wall over the whole
        // run) at a steady rate of achieved_qps.
        self.gen_cpu_us
            .push(r.generator.cpu_busy * 1e6 / r.achieved_qps.max(1.0));
        if let Some((cpu_s, requests)) = server {
            self.srv_cpu_us.push(cpu_s * 1e6 / requests.max(1) as f64);
        }
        if r.generator.limited {
            self.limited.push(r.generator.reasons.join("; "));
        }
    }
}

/// The worker threads' CPU seconds and the requests they served.
fn server_cpu(s: &ServerStats) -> Option<(f64, u64)> {
    let busy: f64 = s.workers.iter().map(|w| w.cpu_busy).sum();
    (busy > 0.0).then_some((busy * s.uptime_s, s.requests))
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        std::process::exit(child(&spec));
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let repeats: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    if let Err(e) = run(secs, repeats) {
        eprintln!("kv-bench: {e}");
        std::process::exit(1);
    }
}

fn run(secs: f64, repeats: usize) -> Result<(), String> {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let p = VethPair::create("nl-kv", "bench", false)?;
    let ks = keyspace();
    println!("kv-bench: {secs} s windows, median of {repeats}; client CPU 0, server CPU 1; {} keys of {} B, get fraction {:.3}", ks.keys, ks.value_size, ETC_GET_FRACTION);
    println!(
        "machine load: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );

    // 1 and 2: memcached.
    let mc_cfg = MemcachedConfig {
        netns: p.b.clone(),
        listen: "10.77.0.2:11211".parse().map_err(|e| format!("{e}"))?,
        threads: 1,
        cpus: vec![1],
        memory_mb: 256,
        mode: EpollMode::named("no-coalescing")?,
    };
    let open_loads = [10_000.0, 20_000.0, 40_000.0, 80_000.0, 160_000.0];
    let mut mc_closed = Row::new();
    let mut mc_open: Vec<Row> = open_loads.iter().map(|_| Row::new()).collect();
    for rep in 0..repeats {
        if STOP.load(Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        let m = Memcached::start(&mc_cfg)?;
        let a = m.addr();
        let stop = Arc::new(AtomicBool::new(false));
        in_namespace(&p.a, || {
            loadgen::preload(a, &ks, &stop).map_err(std::io::Error::other)
        })
        .map_err(|e| e.to_string())?;
        let before = m_cpu(&p, a);
        let r = load(&p, a, LoopKind::Closed, secs, 32)?;
        let after = m_cpu(&p, a);
        mc_closed.add(&r, after.zip(before).map(|(x, y)| (x.0 - y.0, x.1 - y.1)));
        let order: Vec<usize> = if rep % 2 == 0 {
            (0..open_loads.len()).collect()
        } else {
            (0..open_loads.len()).rev().collect()
        };
        for i in order {
            let r = load(&p, a, LoopKind::Open { qps: open_loads[i] }, secs, 32)?;
            mc_open[i].add(&r, None);
        }
        m.stop(&p.b);
    }
    let gen_us = median(mc_closed.gen_cpu_us.clone());
    let mc_us = median(mc_closed.srv_cpu_us.clone());
    println!("\n1. memcached -t 1, closed loop, 32 connections");
    println!("   achieved {:.0} QPS, p99 {:.0} us; CPU per request: generator {:.2} us, memcached (process, user+system) {:.2} us -> one generator core drives {:.2} memcached cores{}",
        median(mc_closed.qps.clone()), median(mc_closed.p99.clone()), gen_us, mc_us, mc_us / gen_us,
        if mc_closed.limited.is_empty() { String::new() } else { format!("; GENERATOR LIMITED: {}", mc_closed.limited.join(" | ")) });
    println!("   generator capacity from one core (1 / CPU per request): {:.0} requests/s; memcached's: {:.0} requests/s (process time only, its softirq time is not in it)", 1e6 / gen_us, 1e6 / mc_us);
    println!("\n2. memcached, open loop from one generator core");
    println!(
        "   {:>10} {:>10} {:>10} {:>10} {:>10}  generator",
        "target", "offered", "achieved", "p99 us", "gen CPU %"
    );
    for (i, q) in open_loads.iter().enumerate() {
        let r = &mc_open[i];
        println!(
            "   {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>10.0}  {}",
            q,
            median(r.offered.clone()),
            median(r.qps.clone()),
            median(r.p99.clone()),
            median(r.gen_busy.clone()) * 100.0,
            if r.limited.is_empty() {
                "kept its schedule".to_string()
            } else {
                format!("LIMIT in {}/{repeats}: {}", r.limited.len(), r.limited[0])
            }
        );
    }

    // 3: napilab's server per mode.
    let modes = ["no-coalescing", "deferral", "busy-wait", "irq-suspend"];
    let dir = std::env::temp_dir().join(format!("nl-kv-bench-{}-journal", std::process::id()));
    let mut rows: Vec<Row> = modes.iter().map(|_| Row::new()).collect();
    let mut skipped: Vec<Option<String>> = vec![None; modes.len()];
    for rep in 0..repeats {
        let order: Vec<usize> = if rep % 2 == 0 {
            (0..modes.len()).collect()
        } else {
            (0..modes.len()).rev().collect()
        };
        for i in order {
            if STOP.load(Ordering::Relaxed) {
                return Err("interrupted".into());
            }
            let mode = modes[i];
            let m = EpollMode::named(mode)?;
            if let Err(e) = in_namespace(&p.b, || {
                napilab_lab::request::epoll::check_supported(&m).map_err(std::io::Error::other)
            }) {
                skipped[i] = Some(e.to_string());
                continue;
            }
            // `deferral` is the no-coalescing server with software interrupt deferral
            // (the lab's stand-in for NIC coalescing): defer 2 polls, 20 us timer.
            let profile = if mode == "deferral" { None } else { Some(mode) };
            let mut journalled = false;
            if let Some(pr) = profile {
                journalled = tune(&p.b, "apply", pr, &dir)?;
            } else {
                napilab_lab::netns::set_irq_deferral(&p.b, "vb", 2, 20_000)
                    .map_err(|e| e.to_string())?;
            }
            let res = (|| {
                let srv = KvServer::start(ServerConfig {
                    listen: "10.77.0.2:11311".parse().map_err(|e| format!("{e}"))?,
                    netns: Some(p.b.clone()),
                    workers: 1,
                    cpus: vec![1],
                    mode: m.clone(),
                    keyspace: ks,
                })?;
                let r = load(&p, srv.addr(), LoopKind::Closed, secs, 32);
                let s = srv.stop();
                Ok::<_, String>((r?, s))
            })();
            if let Some(pr) = profile {
                if journalled {
                    tune(&p.b, "revert", pr, &dir)?;
                }
            } else {
                napilab_lab::netns::set_irq_deferral(&p.b, "vb", 0, 0)
                    .map_err(|e| e.to_string())?;
            }
            let (r, s) = res?;
            rows[i].add(&r, server_cpu(&s));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("\n3. napilab kv server, 1 worker on CPU 1, closed loop, 32 connections");
    println!(
        "   {:>14} {:>10} {:>10} {:>16}  generator",
        "mode", "QPS", "p99 us", "worker us/req"
    );
    let base = median(rows[0].qps.clone());
    for (i, mode) in modes.iter().enumerate() {
        if let Some(e) = &skipped[i] {
            println!("   {mode:>14} not runnable: {e}");
            continue;
        }
        let r = &rows[i];
        let q = median(r.qps.clone());
        println!("   {mode:>14} {:>10.0} {:>10.0} {:>16.2}  {} (x{:.2} of no-coalescing; napilab/memcached {:.2})",
            q, median(r.p99.clone()), median(r.srv_cpu_us.clone()),
            if r.limited.is_empty() { "not the limit".to_string() } else { format!("LIMIT in {}/{repeats}: {}", r.limited.len(), r.limited[0]) },
            q / base, q / median(mc_closed.qps.clone()));
    }
    println!(
        "\nrerun: sudo cargo run --release -p napilab-lab --example kv-bench -- {secs} {repeats}"
    );
    // A server maximum is the server's only when the generator is not the limit: one
    // generator core must drive at least one server core (docs/lab.md, "Benchmark").
    let drives = mc_us / gen_us;
    println!(
        "{}",
        napilab_testkit::bench_verdict(
            "bench-kv",
            &format!("one generator core drives {drives:.2} memcached cores"),
            ">= 1",
            drives >= 1.0
        )
    );
    Ok(())
}

/// memcached's process CPU seconds (rusage user + system) and requests (cmd_get +
/// cmd_set) from its `stats`.
fn m_cpu(p: &VethPair, a: std::net::SocketAddrV4) -> Option<(f64, u64)> {
    in_namespace(&p.a, || {
        use std::io::{BufRead, BufReader, Write};
        let mut s = std::net::TcpStream::connect(a)?;
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
        s.write_all(b"stats\r\n")?;
        let (mut cpu, mut requests) = (0.0, 0u64);
        for line in BufReader::new(s).lines().take(1000) {
            let line = line?;
            if line.trim_end() == "END" {
                break;
            }
            let t: Vec<&str> = line.split_whitespace().collect();
            if t.len() == 3 && (t[1] == "rusage_user" || t[1] == "rusage_system") {
                cpu += t[2].parse::<f64>().unwrap_or(0.0);
            }
            if t.len() == 3 && (t[1] == "cmd_get" || t[1] == "cmd_set") {
                requests += t[2].parse::<u64>().unwrap_or(0);
            }
        }
        Ok((cpu, requests))
    })
    .ok()
}
