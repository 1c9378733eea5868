//! Benchmark of the user-space tunnel endpoint (root): decrypted packets per second and
//! the decryption workers' CPU per packet with the TUN device's NAPI instances polled
//! in softirq (at the workers' bottom-half enable: WireGuard's inversion) and threaded
//! (in their kthreads), measured side by side in alternating rounds of one run.
//!
//! Namespaces `nl-tun-bench-<pid>-r<round><mode>-a` (peers) and `-b` (endpoint), each
//! removed at the end of its round. Run:
//!
//! ```text
//! sudo cargo run --release -p napilab-lab --example tunnel-bench -- [PEERS] [SECONDS] [ROUNDS]
//! ```
//! (defaults 4 peers, 3 s per trial, 3 rounds).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use napilab_lab::tunnel::endpoint::{
    Endpoint, EndpointConfig, DEFAULT_INNER_NET, DEFAULT_PORT, DEFAULT_SINK_PORT,
};
use napilab_lab::tunnel::peers::{self, PeersConfig};
use napilab_testkit::VethPair;

const SEED: [u8; 32] = [3; 32];

struct Trial {
    sent_pps: f64,
    decrypted_pps: f64,
    delivered_share: f64,
    worker_us_per_packet: f64,
    queue_full: u64,
    /// Written into TUN queues but not delivered to the sink: dropped by the TUN device
    /// (its rx_dropped) or by the sink socket's buffer.
    tun_dropped: u64,
    stack_lost: u64,
    /// UDP `RcvbufErrors` in the DUT namespace: inner packets the sink socket's full
    /// buffer dropped.
    rcvbuf_errors: Option<u64>,
}

/// `Udp: ... RcvbufErrors` from the namespace's /proc/net/snmp.
fn udp_rcvbuf_errors(ns: &str) -> Option<u64> {
    let text = napilab_lab::netns::sh_in(ns, "cat /proc/net/snmp").ok()?;
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next()?, udp.next()?);
    let i = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

fn trial(peers_n: usize, secs: f64, threaded: bool, tag: &str) -> Result<Trial, String> {
    let pair = VethPair::create("nl-tun-bench", tag, false)?;
    let ep = Endpoint::start(EndpointConfig {
        netns: Some(pair.b.clone()),
        listen: format!("10.77.0.2:{DEFAULT_PORT}")
            .parse()
            .map_err(|e| format!("{e}"))?,
        peers: peers_n,
        workers: 2,
        worker_cpus: vec![0, 1],
        receiver_cpu: None,
        tun_name: "nltunb0".into(),
        inner_net: DEFAULT_INNER_NET,
        threaded,
        key_seed: SEED,
        sink_port: Some(DEFAULT_SINK_PORT),
    })?;
    let sent = peers::run(
        &PeersConfig {
            netns: Some(pair.a.clone()),
            endpoint: ep.listen_addr(),
            peers: peers_n,
            threads: 1,
            cpus: vec![],
            rate_pps: None,
            duration: Duration::from_secs_f64(secs),
            payload: 64,
            inner_net: DEFAULT_INNER_NET,
            inner_port: DEFAULT_SINK_PORT,
            key_seed: SEED,
            corrupt_every: 0,
        },
        &AtomicBool::new(false),
    )?;
    std::thread::sleep(Duration::from_millis(200));
    let st = ep.stop();
    let rcvbuf_errors = udp_rcvbuf_errors(&pair.b);
    let worker_cpu: f64 = st.workers.iter().map(|w| w.cpu_s).sum();
    Ok(Trial {
        sent_pps: sent.sent_pps,
        decrypted_pps: st.decrypted as f64 / sent.elapsed_s,
        delivered_share: st.delivered.unwrap_or(0) as f64 / sent.sent.max(1) as f64,
        worker_us_per_packet: worker_cpu * 1e6 / st.decrypted.max(1) as f64,
        queue_full: st.worker_queue_full,
        tun_dropped: st.tun_rx_dropped.unwrap_or(0),
        stack_lost: st.written.saturating_sub(st.delivered.unwrap_or(0)),
        rcvbuf_errors,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: f64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (peers_n, secs, rounds) = (arg(0, 4.0) as usize, arg(1, 3.0), arg(2, 3.0) as usize);
    if !napilab_testkit::is_root() {
        eprintln!("tunnel-bench: needs root (namespaces, IFF_NAPI)");
        std::process::exit(2);
    }
    println!(
        "tunnel-bench: {peers_n} peers, {secs} s per trial, {rounds} rounds, 2 workers on CPUs 0-1, 64-byte inner payload, peers unpaced"
    );
    println!("round mode      sent/s  decrypted/s  delivered  worker us/pkt  queue-full  tun-dropped  written-not-delivered  udp-rcvbuf-errors");
    let mut sums = [(0.0, 0.0); 2];
    for round in 0..rounds {
        for (m, threaded) in [false, true].into_iter().enumerate() {
            let mode = if threaded { "threaded" } else { "softirq" };
            match trial(peers_n, secs, threaded, &format!("r{round}{}", &mode[..1])) {
                Ok(t) => {
                    println!(
                        "{round:>5} {mode:<8} {:>8.0} {:>12.0} {:>9.1}% {:>14.2} {:>11} {:>12} {:>22} {:>18}",
                        t.sent_pps,
                        t.decrypted_pps,
                        t.delivered_share * 100.0,
                        t.worker_us_per_packet,
                        t.queue_full,
                        t.tun_dropped,
                        t.stack_lost,
                        t.rcvbuf_errors.map_or("-".into(), |n| n.to_string())
                    );
                    sums[m].0 += t.decrypted_pps;
                    sums[m].1 += t.worker_us_per_packet;
                }
                Err(e) => {
                    eprintln!("tunnel-bench: round {round} {mode}: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
    let n = rounds.max(1) as f64;
    println!(
        "mean decrypted/s: softirq {:.0}, threaded {:.0} (threaded/softirq {:.2}); worker us/pkt: softirq {:.2}, threaded {:.2} (ratio {:.2})",
        sums[0].0 / n,
        sums[1].0 / n,
        sums[1].0 / sums[0].0.max(f64::MIN_POSITIVE),
        sums[0].1 / n,
        sums[1].1 / n,
        sums[1].1 / sums[0].1.max(f64::MIN_POSITIVE)
    );
}
