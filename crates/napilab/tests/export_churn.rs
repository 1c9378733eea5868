//! `napilab export` on a host that changes and under bad clients:
//!
//! - the series of a device deleted from the exporter's namespace (and of its NAPI
//!   instance) go away, so cardinality stays bounded on a host that creates and deletes
//!   devices (root: a namespace pair of its own);
//! - slow clients (slowloris: one header byte per second) and clients with huge headers
//!   do not block the other scrapers (no root: the exporter on the host's loopback, on a
//!   port the kernel picked).
//!
//! Every process and namespace is removed on drop, also when a test fails. Each test is
//! bounded in time.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use napilab_testkit::VethPair;

mod common;
use common::*;

/// Scrapes /metrics for `for_how_long` and returns each scrape's duration; every scrape
/// must answer 200 with the last family present.
fn scrape_for(addr: SocketAddr, for_how_long: Duration) -> Vec<Duration> {
    let mut took = Vec::new();
    let end = Instant::now() + for_how_long;
    while Instant::now() < end {
        let began = Instant::now();
        let (status, body) = get(addr, "/metrics", Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("a scrape failed while bad clients were connected: {e}"));
        assert_eq!(status, 200);
        assert!(
            body.contains("napilab_exporter_samples_total"),
            "an incomplete answer: {} bytes",
            body.len()
        );
        took.push(began.elapsed());
        sleep(Duration::from_millis(100));
    }
    took
}

fn assert_prompt(took: &[Duration], what: &str) {
    let slowest = took.iter().max().copied().unwrap_or_default();
    assert!(
        took.len() >= 10 && slowest < Duration::from_secs(1),
        "with {what}: {} scrapes, the slowest took {slowest:?} (expected >= 10 under 1 s each)",
        took.len()
    );
}

/// Twenty connections that each send one byte of a request per second and never finish
/// it: other scrapers are answered at once all along.
#[test]
fn slowloris_clients_do_not_block_other_scrapers() {
    let addr = free_port();
    let _exporter = start_exporter(addr, &[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow: Vec<_> = (0..20)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let Ok(mut stream) = TcpStream::connect(addr) else {
                    return 0;
                };
                let request = b"GET /metrics HTTP/1.1\r\nHost: slow\r\nX-Slow: ";
                let mut sent = 0;
                for byte in request.iter().chain(std::iter::repeat(&b'a')) {
                    if stop.load(std::sync::atomic::Ordering::SeqCst)
                        || stream.write_all(&[*byte]).is_err()
                    {
                        break;
                    }
                    sent += 1;
                    sleep(Duration::from_secs(1));
                }
                sent
            })
        })
        .collect();
    sleep(Duration::from_secs(2));
    let took = scrape_for(addr, Duration::from_secs(8));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let sent: Vec<usize> = slow.into_iter().map(|t| t.join().unwrap_or(0)).collect();
    assert!(
        sent.iter().all(|s| *s >= 5),
        "the slow clients were meant to trickle for the whole test: {sent:?} bytes"
    );
    assert_prompt(&took, "20 slowloris clients");
}

/// Clients that send a 16 MiB header line (and one that sends 100,000 small headers)
/// as fast as they can: other scrapers are answered at once, and the exporter is still
/// healthy after they go.
#[test]
fn huge_headers_do_not_block_other_scrapers() {
    let addr = free_port();
    let _exporter = start_exporter(addr, &[]);
    let big: Vec<_> = (0..2)
        .map(|i| {
            std::thread::spawn(move || {
                let Ok(mut stream) = TcpStream::connect(addr) else {
                    return;
                };
                let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
                let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: big\r\n");
                let chunk = if i == 0 {
                    vec![b'a'; 1 << 20]
                } else {
                    b"X-Many: b\r\n".repeat(10_000)
                };
                if i == 0 {
                    let _ = stream.write_all(b"X-Huge: ");
                }
                for _ in 0..16 {
                    if stream.write_all(&chunk).is_err() {
                        break;
                    }
                }
                // Held open, unfinished, while the others scrape.
                sleep(Duration::from_secs(6));
            })
        })
        .collect();
    let took = scrape_for(addr, Duration::from_secs(6));
    for t in big {
        let _ = t.join();
    }
    assert_prompt(&took, "clients sending huge headers");
    let (status, _) = get(addr, "/healthz", Duration::from_secs(2)).expect("healthz after");
    assert_eq!(status, 200);
}

/// A device created in the exporter's namespace shows up in its series; deleted, its
/// series (counters and info) go within seconds, not at the next 30 s map refresh.
#[test]
fn series_of_a_deleted_device_go_away() {
    let pair = match VethPair::create("napilab-test", "exchurn", false) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let ns = pair.b.clone();
    let run_in = |script: &str| {
        let status = Command::new("ip")
            .args(["netns", "exec", &ns, "sh", "-ec", script])
            .status()
            .expect("ip netns exec");
        assert!(status.success(), "{script} failed in {ns}");
    };
    let addr: SocketAddr = "127.0.0.1:9979".parse().expect("address");
    let scrape = {
        let ns = ns.clone();
        move || {
            in_netns(&ns, move || {
                get(addr, "/metrics", Duration::from_secs(5))
                    .ok()
                    .filter(|(s, _)| *s == 200)
                    .map(|(_, body)| body)
                    .unwrap_or_default()
            })
        }
    };
    let _exporter = spawn_exporter(
        pair.command(&pair.b, env!("CARGO_BIN_EXE_napilab")).args([
            "export",
            "--interval",
            "100ms",
            "--listen",
            &addr.to_string(),
        ]),
        || !scrape().is_empty(),
    );
    // A veth pair inside the exporter's namespace, GRO on so it has NAPI instances.
    run_in("ip link add gone0 type veth peer name gone1; ip link set gone0 up; ip link set gone1 up; ethtool -K gone0 gro on >/dev/null 2>&1 || true");
    let series = |body: &str, device: &str| -> Vec<String> {
        body.lines()
            .filter(|l| !l.starts_with('#') && l.contains(&format!("device=\"{device}\"")))
            .map(|l| l.split(' ').next().unwrap_or("").to_string())
            .collect()
    };
    let mut seen = Vec::new();
    wait_for("gone0's series", Duration::from_secs(10), || {
        seen = series(&scrape(), "gone0");
        seen.iter()
            .any(|s| s.starts_with("node_network_receive_packets_total"))
            && seen.iter().any(|s| s.starts_with("napilab_device_info"))
    });
    run_in("ip link del gone0");
    let mut left = seen.clone();
    wait_for("gone0's series to go", Duration::from_secs(5), || {
        let body = scrape();
        left = [series(&body, "gone0"), series(&body, "gone1")].concat();
        !body.is_empty() && left.is_empty()
    });
    assert!(left.is_empty(), "left after the delete: {left:?}");
    // The veth pair of the fixture is still exported: only the deleted ones went.
    assert!(!series(&scrape(), "vb").is_empty(), "vb's series went too");
}
