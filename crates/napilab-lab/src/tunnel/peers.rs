//! The tunnel's traffic source: N encrypting peers, each with its own UDP socket (its
//! own outer source port, as each WireGuard client has its own endpoint), sending
//! sealed inner UDP packets to the endpoint at a total rate, spread over a few sender
//! threads. Peer i's inner packets come from `peer_address(inner_net, i)` and go to the
//! endpoint's TUN address, so each lands in TUN queue i.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::endpoint::{check_peers, peer_address, tun_address};
use super::wire::{self, PeerCipher, TAG_LEN};
use crate::netns;

/// Inner source port of peer 0 (peer i uses this + i).
const FIRST_INNER_PORT: u16 = 40_000;
/// A sender this far ahead of its schedule sleeps instead of spinning.
const SLEEP_AHEAD: Duration = Duration::from_micros(200);
/// Largest inner payload: the sealed datagram must fit one UDP datagram.
pub const MAX_PAYLOAD: usize = 65_507 - wire::HEADER_LEN - TAG_LEN - wire::INNER_HEADERS;

#[derive(Clone, Debug)]
pub struct PeersConfig {
    /// Network namespace of the peers (None: the caller's).
    pub netns: Option<String>,
    /// The endpoint's tunnel address.
    pub endpoint: SocketAddrV4,
    pub peers: usize,
    /// Sender threads (peer i is sent by thread i mod threads).
    pub threads: usize,
    /// Thread t runs on `cpus[t % len]`; empty leaves them unpinned.
    pub cpus: Vec<u32>,
    /// Total datagrams per second (None: as fast as the threads go).
    pub rate_pps: Option<f64>,
    pub duration: Duration,
    /// Inner UDP payload bytes (at least 8: the packet counter).
    pub payload: usize,
    /// The endpoint's inner network (same as its config).
    pub inner_net: Ipv4Addr,
    /// Destination port of the inner packets (the endpoint's sink port).
    pub inner_port: u16,
    pub key_seed: [u8; 32],
    /// Every n-th datagram gets a flipped ciphertext bit (0: none), to exercise the
    /// endpoint's authentication failures.
    pub corrupt_every: u64,
}

/// What the peers sent (schema `napilab.tunnel-peers/1`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct PeersStats {
    pub schema: &'static str,
    pub peers: usize,
    pub threads: usize,
    pub offered_pps: Option<f64>,
    pub elapsed_s: f64,
    /// Datagrams handed to the kernel (including corrupted ones).
    pub sent: u64,
    /// Of which deliberately corrupted.
    pub corrupted: u64,
    /// Sends the kernel refused (e.g. ENOBUFS); not retried.
    pub send_errors: u64,
    pub sent_pps: f64,
    /// Sent below 95% of the offered rate: the generator, not the endpoint, was the
    /// limit.
    pub generator_limited: bool,
    /// CPU time of the sender threads, seconds.
    pub cpu_s: f64,
}

#[derive(Default)]
struct ThreadResult {
    sent: u64,
    corrupted: u64,
    send_errors: u64,
    cpu_ns: u64,
}

/// Sends for `cfg.duration` (or until `stop`), then returns what was sent.
pub fn run(cfg: &PeersConfig, stop: &AtomicBool) -> Result<PeersStats, String> {
    check_peers(cfg.peers)?;
    if cfg.threads == 0 {
        return Err("threads = 0: the peers need at least 1 sender thread".into());
    }
    if cfg.payload > MAX_PAYLOAD {
        return Err(format!(
            "payload {} bytes: at most {MAX_PAYLOAD} (the sealed datagram must fit in UDP)",
            cfg.payload
        ));
    }
    if let Some(r) = cfg.rate_pps {
        if !(r.is_finite() && r > 0.0) {
            return Err(format!(
                "rate {r}: give a positive number of packets per second"
            ));
        }
    }
    let threads = cfg.threads.min(cfg.peers);
    let started = Instant::now();
    let results: Vec<Result<ThreadResult, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || send_thread(cfg, t, threads, started, stop)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a sender thread panicked".into()))
            })
            .collect()
    });
    let elapsed_s = started.elapsed().as_secs_f64();
    let mut st = PeersStats {
        schema: "napilab.tunnel-peers/1",
        peers: cfg.peers,
        threads,
        offered_pps: cfg.rate_pps,
        elapsed_s,
        ..PeersStats::default()
    };
    for r in results {
        let r = r?;
        st.sent += r.sent;
        st.corrupted += r.corrupted;
        st.send_errors += r.send_errors;
        st.cpu_s += r.cpu_ns as f64 / 1e9;
    }
    if elapsed_s > 0.0 {
        st.sent_pps = st.sent as f64 / elapsed_s;
    }
    st.generator_limited = cfg.rate_pps.is_some_and(|r| st.sent_pps < 0.95 * r);
    Ok(st)
}

struct Peer {
    index: u32,
    socket: UdpSocket,
    cipher: PeerCipher,
    counter: u64,
}

fn send_thread(
    cfg: &PeersConfig,
    thread: usize,
    threads: usize,
    started: Instant,
    stop: &AtomicBool,
) -> Result<ThreadResult, String> {
    netns::enter_if(cfg.netns.as_deref())?;
    if !cfg.cpus.is_empty() {
        let _ = netns::pin(0, &[cfg.cpus[thread % cfg.cpus.len()]]);
    }
    let mut peers = Vec::new();
    for i in (thread..cfg.peers).step_by(threads) {
        let socket = UdpSocket::bind("0.0.0.0:0")
            .map_err(|e| format!("peer {i}: cannot bind a UDP socket: {e}"))?;
        socket
            .connect(cfg.endpoint)
            .map_err(|e| format!("peer {i}: cannot reach the endpoint {}: {e}", cfg.endpoint))?;
        peers.push(Peer {
            index: i as u32,
            socket,
            cipher: PeerCipher::new(&cfg.key_seed, i as u32),
            counter: 0,
        });
    }
    // This thread's share of the total rate.
    let rate = cfg
        .rate_pps
        .map(|r| r * peers.len() as f64 / cfg.peers as f64);
    let dst = tun_address(cfg.inner_net);
    let deadline = started + cfg.duration;
    let cpu0 = netns::thread_cpu_ns();
    let mut out = ThreadResult::default();
    let (mut inner, mut dgram) = (Vec::new(), Vec::new());
    let mut k: u64 = 0;
    loop {
        let now = Instant::now();
        if now >= deadline || stop.load(Ordering::Relaxed) {
            break;
        }
        if let Some(r) = rate {
            let due = started + Duration::from_secs_f64(k as f64 / r);
            if due > now {
                let ahead = due - now;
                if ahead > SLEEP_AHEAD {
                    std::thread::sleep(ahead.min(deadline.saturating_duration_since(now)));
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
        }
        let n = peers.len() as u64;
        let p = &mut peers[(k % n) as usize];
        let sport = FIRST_INNER_PORT.wrapping_add(p.index as u16);
        wire::inner_udp(
            peer_address(cfg.inner_net, p.index),
            dst,
            sport,
            cfg.inner_port,
            cfg.payload,
            p.counter,
            &mut inner,
        );
        p.cipher.seal(p.index, p.counter, &inner, &mut dgram);
        p.counter += 1;
        k += 1;
        let global = k * threads as u64 + thread as u64;
        let corrupt = cfg.corrupt_every > 0 && global % cfg.corrupt_every == 0;
        if corrupt {
            let last = dgram.len() - 1;
            dgram[last] ^= 0x01;
        }
        match p.socket.send(&dgram) {
            Ok(_) => {
                out.sent += 1;
                out.corrupted += u64::from(corrupt);
            }
            Err(_) => out.send_errors += 1,
        }
    }
    out.cpu_ns = netns::thread_cpu_ns() - cpu0;
    Ok(out)
}
