//! `napilab kv-server` and `napilab kv-load`: the request workload's engines
//! (napilab_lab::request) as processes, so the lab (or a user) can start the server in
//! the DUT namespace pinned to its CPUs and the load generator in the client's, and
//! read their numbers as JSON.

use std::net::SocketAddrV4;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use napilab_lab::request::epoll::EpollMode;
use napilab_lab::request::keyspace::Keyspace;
use napilab_lab::request::loadgen::{self, LoadConfig, ETC_GET_FRACTION};
use napilab_lab::request::results::{LoadResult, LoopKind, ServerStats};
use napilab_lab::request::server::{KvServer, ServerConfig};

fn cpus(s: &str) -> Result<Vec<u32>> {
    napilab_tune::model::parse_cpus(s).map_err(|e| anyhow!("--cpus {s:?}: {e}"))
}

/// Serve the memcached text protocol (get/set/delete) from a preloaded key space, one
/// epoll instance per NAPI instance, with the epoll side of an interrupt mode. Runs
/// until Ctrl-C/SIGTERM (or --for), then prints its statistics.
#[derive(clap::Args)]
pub struct ServerArgs {
    /// Address and port to listen on (TCP).
    #[arg(long, default_value = "0.0.0.0:11211")]
    listen: SocketAddrV4,
    /// Network namespace to serve in (as `ip netns` names it).
    #[arg(long, value_name = "NS")]
    netns: Option<String>,
    /// Worker threads, one per NAPI instance (RX queue) to serve.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// CPUs for the workers (worker i on the i-th, cycling), e.g. `1` or `2-3`.
    #[arg(long, default_value = "")]
    cpus: String,
    /// Interrupt mode whose epoll side to use: no-coalescing, deferral, threaded
    /// (blocking epoll, no busy poll), busy-wait, irq-suspend (EPIOCSPARAMS from the
    /// tune profile of that name). The per-NAPI half is `napilab tune apply MODE`.
    #[arg(long, default_value = "no-coalescing")]
    mode: String,
    /// Keys preloaded (`key:0000000000` ...).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Bytes of each preloaded value.
    #[arg(long, default_value_t = 32)]
    value_size: usize,
    /// Stop after this long (e.g. 30s) instead of waiting for a signal.
    #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Print the statistics as JSON (schema napilab.kv-server/1).
    #[arg(long)]
    json: bool,
    /// Only say which modes this kernel runs (in --netns, whose NAPI instances carry
    /// the per-NAPI attributes), and why not, then exit.
    #[arg(long)]
    list_modes: bool,
}

/// Offer memcached-protocol load to a server: open loop (Poisson arrivals at --qps,
/// latency from the intended send time) or closed loop (--closed: one outstanding
/// request per connection). Prints QPS, latency percentiles, errors and whether the
/// generator itself was the limit.
#[derive(clap::Args)]
pub struct LoadArgs {
    /// The server, ADDR:PORT.
    #[arg(long)]
    server: SocketAddrV4,
    /// Network namespace to run the client in.
    #[arg(long, value_name = "NS")]
    netns: Option<String>,
    /// Open loop at this many requests per second.
    #[arg(long, required_unless_present = "closed", conflicts_with = "closed")]
    qps: Option<f64>,
    /// Closed loop: each connection sends its next request when the reply arrives.
    #[arg(long)]
    closed: bool,
    /// Connections in total.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Generator threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// CPUs for the generator threads, e.g. `0`.
    #[arg(long, default_value = "")]
    cpus: String,
    /// Measurement window (e.g. 5s).
    #[arg(long = "for", value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Warm-up before the window (not measured).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Fraction of gets (the rest are sets); default the study's ETC 30:1.
    #[arg(long, default_value_t = ETC_GET_FRACTION)]
    get_fraction: f64,
    /// Keys to draw from (the server's preloaded key space).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Bytes of each value set.
    #[arg(long, default_value_t = 32)]
    value_size: usize,
    /// How long replies are awaited after the window; later ones count as timeouts.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Seed of the arrival times and key draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Store the key space first (memcached starts empty).
    #[arg(long)]
    preload: bool,
    /// Print the result as JSON (schema napilab.kv-load/1).
    #[arg(long)]
    json: bool,
}

fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install the Ctrl-C handler")?;
    }
    Ok(stop)
}

fn list_modes(netns: Option<&str>, json: bool) -> Result<()> {
    let modes = std::thread::scope(|s| {
        s.spawn(|| {
            if let Some(ns) = netns {
                napilab_lab::netns::enter(ns)
                    .map_err(|e| anyhow!("--netns {ns}: {e} (does it exist?)"))?;
            }
            Ok::<_, anyhow::Error>(napilab_lab::request::epoll::support())
        })
        .join()
        .map_err(|_| anyhow!("mode check panicked"))?
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&modes)?);
    } else {
        for m in &modes {
            match &m.reason {
                None => println!("{:<14} runnable", m.mode),
                Some(r) => println!("{:<14} not runnable: {r}", m.mode),
            }
        }
    }
    Ok(())
}

pub fn run_server(a: ServerArgs) -> Result<()> {
    if a.list_modes {
        return list_modes(a.netns.as_deref(), a.json);
    }
    let stop = stop_flag()?;
    let mode = EpollMode::named(&a.mode).map_err(|e| anyhow!("--mode: {e}"))?;
    let keyspace = Keyspace {
        keys: a.keys,
        value_size: a.value_size,
    };
    if a.value_size > napilab_lab::request::protocol::MAX_VALUE_LEN {
        bail!(
            "--value-size {} is above the protocol's {}-byte limit",
            a.value_size,
            napilab_lab::request::protocol::MAX_VALUE_LEN
        );
    }
    let server = KvServer::start(ServerConfig {
        listen: a.listen,
        netns: a.netns.clone(),
        workers: a.workers,
        cpus: cpus(&a.cpus)?,
        mode,
        keyspace,
    })
    .map_err(|e| anyhow!("kv-server: {e}"))?;
    eprintln!(
        "napilab kv-server: listening on {}{} ({} worker(s), mode {}); Ctrl-C or SIGTERM stops it",
        server.addr(),
        a.netns
            .as_deref()
            .map(|n| format!(" in {n}"))
            .unwrap_or_default(),
        a.workers,
        a.mode
    );
    crate::timed_run::serve_until(&stop, a.duration, || {});
    let stats = server.stop();
    print_server(&stats, a.json)
}

fn print_server(s: &ServerStats, json: bool) -> Result<()> {
    if crate::render::printed_as_json(s, json)? {
        return Ok(());
    }
    println!(
        "{} mode {}: {} requests in {:.1} s ({} gets, {} hits, {} sets, {} deletes, {} protocol errors)",
        s.engine, s.mode, s.requests, s.uptime_s, s.gets, s.get_hits, s.sets, s.deletes, s.protocol_errors
    );
    if let Some(t) = &s.service_time {
        println!(
            "service time us: p50 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
            t.p50_us, t.p99_us, t.p999_us, t.max_us
        );
    }
    for w in &s.workers {
        println!(
            "worker {} cpu {}: {} conns, napi {:?}, {} requests, {:.0}% busy, epoll_wait {} ({} with events, {} empty, {} busy-loop passes)",
            w.worker,
            w.cpu.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            w.connections,
            w.napi_ids,
            w.requests,
            w.cpu_busy * 100.0,
            w.epoll.waits,
            w.epoll.returns_with_events,
            w.epoll.empty_returns,
            w.epoll.busy_loop_iterations
        );
    }
    Ok(())
}

pub fn run_load(a: LoadArgs) -> Result<()> {
    let stop = stop_flag()?;
    let keyspace = Keyspace {
        keys: a.keys,
        value_size: a.value_size,
    };
    let cfg = LoadConfig {
        server: a.server,
        netns: a.netns.clone(),
        cpus: cpus(&a.cpus)?,
        threads: a.threads,
        connections: a.connections,
        kind: match a.qps {
            Some(qps) => LoopKind::Open { qps },
            None => LoopKind::Closed,
        },
        warmup: a.warmup,
        duration: a.duration,
        get_fraction: a.get_fraction,
        keyspace,
        timeout: a.timeout,
        seed: a.seed,
    };
    cfg.validate().map_err(|e| anyhow!("kv-load: {e}"))?;
    if a.preload {
        let ns = a.netns.clone();
        let stop2 = stop.clone();
        let addr = a.server;
        std::thread::spawn(move || -> Result<(), String> {
            if let Some(ns) = &ns {
                napilab_lab::netns::enter(ns).map_err(|e| format!("entering {ns}: {e}"))?;
            }
            loadgen::preload(addr, &keyspace, &stop2)
        })
        .join()
        .map_err(|_| anyhow!("preload thread panicked"))?
        .map_err(|e| anyhow!("kv-load: {e}"))?;
    }
    let total = a.warmup + a.duration;
    crate::timed_run::run_and_print(
        "kv-load",
        "kv-load stopped early; the numbers above cover a shortened window",
        total,
        a.json,
        &stop,
        || loadgen::run(&cfg, &stop),
        print_load,
    )
}

fn print_load(r: &LoadResult, json: bool) -> Result<()> {
    if crate::render::printed_as_json(r, json)? {
        return Ok(());
    }
    let kind = match r.kind {
        LoopKind::Open { qps } => format!("open loop at {qps:.0} QPS"),
        LoopKind::Closed => "closed loop".into(),
    };
    println!(
        "{kind}, {} connections, {} thread(s), {:.1} s window: offered {:.0} QPS, achieved {:.0} QPS",
        r.connections, r.threads, r.window_s, r.offered_qps, r.achieved_qps
    );
    let l = &r.latency;
    println!(
        "latency us: p50 {:.1}  p90 {:.1}  p95 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  ({} samples)",
        l.p50_us, l.p90_us, l.p95_us, l.p99_us, l.p999_us, l.max_us, l.samples
    );
    println!(
        "gets: {} hits, {} misses; errors {}, timeouts {}",
        r.get_hits, r.get_misses, r.errors, r.timeouts
    );
    let g = &r.generator;
    println!(
        "generator: {:.0}% busy (and {:.0}% polling before its sends){}, {} late sends (max {:.0} us), {} behind at end{}",
        g.cpu_busy * 100.0,
        g.idle_polling * 100.0,
        g.waited_for_cpu
            .map(|w| format!(", waited for its CPU {:.0}% of the time", w * 100.0))
            .unwrap_or_default(),
        g.late_sends,
        g.max_lateness_us,
        g.behind_at_end,
        if g.limited {
            format!("; THE GENERATOR WAS THE LIMIT: {}", g.reasons.join("; "))
        } else {
            String::new()
        }
    );
    Ok(())
}
