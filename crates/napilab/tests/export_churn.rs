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

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use napilab_testkit::VethPair;

/// A child process stopped (SIGTERM, then SIGKILL after 5 s) and reaped on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        if let Ok(pid) = i32::try_from(self.0.id()) {
            // SAFETY: kill(2) on our own child.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.0 GET, bounded by `timeout`: (status, body).
fn get(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no header end in {text:?}")))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if ok() {
            return;
        }
        sleep(Duration::from_millis(100));
    }
    panic!("{what} did not happen within {within:?}");
}

/// Runs `f` on a thread inside network namespace `ns` (its sockets live there).
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        napilab_probe::netns::enter(&ns).expect("enter the namespace");
        f()
    })
    .join()
    .expect("namespace thread")
}

/// A free loopback port: bound by the kernel's choice, then released for the exporter.
fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("its address")
}

fn start_exporter(addr: SocketAddr) -> Running {
    let child = Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args([
            "export",
            "--interval",
            "100ms",
            "--listen",
            &addr.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start napilab export");
    let running = Running(child);
    wait_for("the exporter's /healthz", Duration::from_secs(20), || {
        get(addr, "/healthz", Duration::from_secs(2)).is_ok_and(|(s, _)| s == 200)
    });
    running
}

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
    let _exporter = start_exporter(addr);
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
    let _exporter = start_exporter(addr);
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
    let child = pair
        .command(&pair.b, env!("CARGO_BIN_EXE_napilab"))
        .args([
            "export",
            "--interval",
            "100ms",
            "--listen",
            &addr.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start napilab export");
    let _exporter = Running(child);
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
    wait_for("the exporter", Duration::from_secs(20), || {
        !scrape().is_empty()
    });
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
