//! `napilab tunnel-endpoint` and `napilab tunnel-peers`: the user-space tunnel endpoint
//! and its encrypting peers (napilab_lab::tunnel) as processes, so the vpn topology's
//! engine can be run and read by hand; `tunnel-endpoint --detect` says which endpoint
//! the vpn topology would use on this kernel.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use napilab_lab::tunnel::endpoint::{
    self, Endpoint, EndpointConfig, EndpointStats, DEFAULT_INNER_NET, DEFAULT_SINK_PORT,
};
use napilab_lab::tunnel::peers::{self, PeersConfig, PeersStats};
use napilab_lab::tunnel::{detect, tun_device};

/// The key seed both ends use unless told otherwise (a lab tunnel, not a secret).
const DEFAULT_KEY_SEED: &str = "6e6170696c61622d6c61622d74756e6e656c2d6b65792d736565642d30303031";

/// Receive a UDP tunnel (WireGuard-shaped datagrams, ChaCha20-Poly1305), decrypt on a
/// pool of workers dispatched round robin, and write each peer's packets into its own
/// queue of a multi-queue TUN device opened with IFF_NAPI. Runs until Ctrl-C/SIGTERM
/// (or --for), then prints its statistics.
#[derive(clap::Args)]
pub struct EndpointArgs {
    /// Only say which endpoint the vpn topology would use here (kernel WireGuard, found
    /// with `ip link add ... type wireguard` in a scratch namespace, or this one), then
    /// exit.
    #[arg(long)]
    detect: bool,
    /// Network namespace to run in (as `ip netns` names it).
    #[arg(long, value_name = "NS")]
    netns: Option<String>,
    /// The tunnel's UDP address.
    #[arg(long, default_value = "0.0.0.0:51820")]
    listen: SocketAddrV4,
    /// Peers, 1 to 256 (one TUN queue each; TUN's queue limit).
    #[arg(long, default_value_t = 4)]
    peers: usize,
    /// Decryption workers (default: one per CPU, as WireGuard).
    #[arg(long)]
    workers: Option<usize>,
    /// CPUs for the workers (worker i on the i-th, cycling), e.g. `0-1`.
    #[arg(long, default_value = "")]
    cpus: String,
    /// CPU of the UDP receiver thread.
    #[arg(long)]
    receiver_cpu: Option<u32>,
    /// Name of the TUN device to create.
    #[arg(long, default_value = "nltun0")]
    tun_name: String,
    /// Inner /16 network: the TUN device gets .0.1, peer i .1.1 + i.
    #[arg(long, default_value_t = DEFAULT_INNER_NET)]
    inner_net: Ipv4Addr,
    /// Poll the TUN device's NAPI instances in their kthreads (threaded NAPI).
    #[arg(long)]
    threaded: bool,
    /// UDP port on the TUN address where a sink counts the delivered inner packets.
    #[arg(long, default_value_t = DEFAULT_SINK_PORT)]
    sink_port: u16,
    /// No sink: the stack answers the inner packets with ICMP port unreachable.
    #[arg(long)]
    no_sink: bool,
    /// Seed of the peers' keys, 64 hex digits (the peers need the same).
    #[arg(long, default_value = DEFAULT_KEY_SEED)]
    key_seed: String,
    /// Stop after this long (e.g. 30s) instead of waiting for a signal.
    #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Print the statistics as JSON (schema napilab.tunnel-endpoint/1).
    #[arg(long)]
    json: bool,
}

/// Encrypting peers: each with its own UDP socket sends sealed inner UDP packets to a
/// tunnel endpoint, at a total rate, for a while; prints what was sent and whether the
/// generator kept up.
#[derive(clap::Args)]
pub struct PeersArgs {
    /// The endpoint's tunnel address, ADDR:PORT.
    #[arg(long)]
    endpoint: SocketAddrV4,
    /// Network namespace to send from.
    #[arg(long, value_name = "NS")]
    netns: Option<String>,
    /// Peers, 1 to 256 (as many as the endpoint was started with, or fewer).
    #[arg(long, default_value_t = 4)]
    peers: usize,
    /// Total datagrams per second (omit: as fast as the sender threads go).
    #[arg(long)]
    rate: Option<f64>,
    /// How long to send (e.g. 5s).
    #[arg(long = "for", value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Sender threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// CPUs for the sender threads, e.g. `0`.
    #[arg(long, default_value = "")]
    cpus: String,
    /// Inner UDP payload bytes.
    #[arg(long, default_value_t = 64)]
    payload: usize,
    /// The endpoint's inner /16 network.
    #[arg(long, default_value_t = DEFAULT_INNER_NET)]
    inner_net: Ipv4Addr,
    /// Destination port of the inner packets (the endpoint's sink port).
    #[arg(long, default_value_t = DEFAULT_SINK_PORT)]
    inner_port: u16,
    /// Seed of the peers' keys, 64 hex digits (the endpoint's).
    #[arg(long, default_value = DEFAULT_KEY_SEED)]
    key_seed: String,
    /// Corrupt every n-th datagram (flip a tag bit), to see the endpoint drop them.
    #[arg(long, default_value_t = 0)]
    corrupt_every: u64,
    /// Print the result as JSON (schema napilab.tunnel-peers/1).
    #[arg(long)]
    json: bool,
}

fn cpus(s: &str) -> Result<Vec<u32>> {
    napilab_tune::model::parse_cpus(s).map_err(|e| anyhow!("--cpus {s:?}: {e}"))
}

fn key_seed(s: &str) -> Result<[u8; 32]> {
    let s = s.trim();
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!(
            "--key-seed: give 64 hex digits (32 bytes), got {} characters",
            s.len()
        );
    }
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b =
            u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| anyhow!("--key-seed: {e}"))?;
    }
    Ok(k)
}

fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install the Ctrl-C handler")?;
    }
    Ok(stop)
}

fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn run_detect(json: bool) -> Result<()> {
    let d = detect::detect().map_err(|e| anyhow!("tunnel-endpoint --detect: {e}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&d)?);
    } else {
        println!("{}", d.summary());
    }
    Ok(())
}

pub fn run_endpoint(a: EndpointArgs) -> Result<()> {
    if a.detect {
        return run_detect(a.json);
    }
    if a.peers == 0 || a.peers > tun_device::MAX_QUEUES {
        bail!(
            "--peers: {}",
            endpoint::check_peers(a.peers).err().unwrap_or_default()
        );
    }
    let stop = stop_flag()?;
    let worker_cpus = cpus(&a.cpus)?;
    let workers = a.workers.unwrap_or(if worker_cpus.is_empty() {
        online_cpus()
    } else {
        worker_cpus.len()
    });
    let ep = Endpoint::start(EndpointConfig {
        netns: a.netns.clone(),
        listen: a.listen,
        peers: a.peers,
        workers,
        worker_cpus,
        receiver_cpu: a.receiver_cpu,
        tun_name: a.tun_name.clone(),
        inner_net: a.inner_net,
        threaded: a.threaded,
        key_seed: key_seed(&a.key_seed)?,
        sink_port: (!a.no_sink).then_some(a.sink_port),
    })
    .map_err(|e| anyhow!("tunnel-endpoint: {e}"))?;
    eprintln!(
        "napilab tunnel-endpoint: UDP {}{}, {} peer(s) -> TUN {} ({} at {}, {} NAPI), {} worker(s); Ctrl-C or SIGTERM stops it",
        ep.listen_addr(),
        a.netns.as_deref().map(|n| format!(" in {n}")).unwrap_or_default(),
        a.peers,
        ep.tun_name(),
        a.peers,
        ep.tun_addr(),
        if a.threaded { "threaded" } else { "softirq" },
        workers,
    );
    let progress = !a.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut last_print = Instant::now();
    crate::timed_run::serve_until(&stop, a.duration, || {
        if progress && last_print.elapsed() >= Duration::from_secs(1) {
            last_print = Instant::now();
            let s = ep.stats();
            eprint!(
                "\r{:.0} s: {} datagrams, {} decrypted, {} bad, {} queue-full drops   ",
                s.elapsed_s, s.datagrams, s.decrypted, s.bad_ciphertext, s.worker_queue_full
            );
        }
    });
    if progress {
        eprintln!();
    }
    let stats = ep.stop();
    print_endpoint(&stats, a.json)
}

fn print_endpoint(s: &EndpointStats, json: bool) -> Result<()> {
    if crate::render::printed_as_json(s, json)? {
        return Ok(());
    }
    println!(
        "{} endpoint, TUN {} ({} peers, {} NAPI), {:.1} s: {} datagrams, {} decrypted ({:.0}/s), {} bad ciphertext, {} malformed, {} unknown peer, {} worker-queue-full drops",
        s.engine,
        s.tun_device,
        s.peers,
        if s.threaded { "threaded" } else { "softirq" },
        s.elapsed_s,
        s.datagrams,
        s.decrypted,
        s.decrypted_per_s,
        s.bad_ciphertext,
        s.malformed,
        s.unknown_peer,
        s.worker_queue_full
    );
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
    println!(
        "written into TUN queues {} ({} errors); TUN rx_packets {}, rx_dropped {}; delivered to the sink {}",
        s.written,
        s.write_errors,
        opt(s.tun_rx_packets),
        opt(s.tun_rx_dropped),
        opt(s.delivered)
    );
    for w in &s.workers {
        println!(
            "worker {} cpu {}: {} datagrams, {} decrypted, {} bad, {:.2} s CPU",
            w.worker,
            w.cpu.map_or("-".to_string(), |c| c.to_string()),
            w.datagrams,
            w.decrypted,
            w.bad_ciphertext,
            w.cpu_s
        );
    }
    println!("receiver: {:.2} s CPU", s.receiver_cpu_s);
    Ok(())
}

pub fn run_peers(a: PeersArgs) -> Result<()> {
    let stop = stop_flag()?;
    let cfg = PeersConfig {
        netns: a.netns.clone(),
        endpoint: a.endpoint,
        peers: a.peers,
        threads: a.threads,
        cpus: cpus(&a.cpus)?,
        rate_pps: a.rate,
        duration: a.duration,
        payload: a.payload,
        inner_net: a.inner_net,
        inner_port: a.inner_port,
        key_seed: key_seed(&a.key_seed)?,
        corrupt_every: a.corrupt_every,
    };
    crate::timed_run::run_and_print(
        "tunnel-peers",
        "tunnel-peers stopped early; the numbers above cover a shortened window",
        a.duration,
        a.json,
        &stop,
        || peers::run(&cfg, &stop),
        print_peers,
    )
}

fn print_peers(r: &PeersStats, json: bool) -> Result<()> {
    if crate::render::printed_as_json(r, json)? {
        return Ok(());
    }
    println!(
        "{} peers, {} thread(s), {:.1} s: sent {} datagrams ({:.0}/s{}), {} corrupted on purpose, {} send errors, {:.2} s CPU{}",
        r.peers,
        r.threads,
        r.elapsed_s,
        r.sent,
        r.sent_pps,
        r.offered_pps
            .map(|o| format!(" of {o:.0}/s offered"))
            .unwrap_or_default(),
        r.corrupted,
        r.send_errors,
        r.cpu_s,
        if r.generator_limited {
            "; the generator fell short of the rate (it, not the endpoint, was the limit)"
        } else {
            ""
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_seeds_are_64_hex_digits() {
        assert_eq!(key_seed(DEFAULT_KEY_SEED).expect("default parses")[0], 0x6e);
        assert!(key_seed("00").is_err());
        assert!(key_seed(&"zz".repeat(32)).is_err());
    }
}
