//! The limits of `napilab export`'s HTTP server (docs/export.md, "HTTP server"), with the
//! real binary on the host's loopback, on a port the kernel picked (no root):
//!
//! - slowloris: 200 connections that each sent part of a request head and then trickle
//!   one byte a second do not keep ordinary scrapes from succeeding, and the server
//!   closes them once the header timeout has passed, although they keep sending;
//! - a request head over the limit gets 431 or a closed connection, and a 64 MiB one does
//!   not grow the exporter's memory (the server does not buffer it);
//! - over `--max-connections`, a new connection is closed at once and counted.
//!
//! Every process is stopped on drop, also when a test fails; every loop is bounded in time.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread::sleep;
use std::time::{Duration, Instant};

mod common;
use common::*;

/// One ordinary scrape: it must answer 200 with the exporter's own families.
fn scrape(addr: SocketAddr, while_what: &str) -> String {
    let (status, body) = get(addr, "/metrics", Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("a scrape failed {while_what}: {e}"));
    assert_eq!(status, 200, "a scrape {while_what}: {body}");
    assert!(
        body.contains("napilab_exporter_http_connections_closed_total"),
        "an incomplete answer {while_what}: {} bytes",
        body.len()
    );
    body
}

/// The value of the series `name` (with its labels, as written) in a text scrape.
fn value(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in the scrape"))
}

/// Waits until the exporter's series `series` reaches `at_least` (the counts are
/// published with each sample, so a scrape right after an event may not show it yet).
fn wait_for_count(addr: SocketAddr, series: &str, at_least: f64) {
    let mut seen = f64::NAN;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        seen = value(&scrape(addr, "while waiting for a count"), series);
        if seen >= at_least {
            return;
        }
        sleep(Duration::from_millis(100));
    }
    panic!("{series} is {seen} 10 s later, expected at least {at_least}");
}

/// Whether the server has closed `stream` (non-blocking): end of stream or a reset.
/// Whatever the server sent before closing is read and dropped.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return true,
        }
    }
}

/// 200 connections that each sent the start of a request head and then one byte a
/// second: ordinary scrapes succeed all along, and the server closes every one of them
/// after the header timeout although they never stop sending.
#[test]
fn slowloris_connections_are_closed_after_the_header_timeout() {
    let addr = free_port();
    let exporter = start_exporter(addr, &["--header-timeout", "3s"]);
    let mut slow: Vec<Option<TcpStream>> = (0..200)
        .map(|i| {
            let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("slow connection {i}: {e}"));
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: slow\r\nX-Slow: ")
                .unwrap_or_else(|e| panic!("slow connection {i}: {e}"));
            stream.set_nonblocking(true).expect("non-blocking");
            Some(stream)
        })
        .collect();
    // The server holds them (its gauge says so) and still answers others.
    wait_for(
        "the exporter to count the 200 slow connections",
        Duration::from_secs(10),
        || {
            value(
                &scrape(addr, "with 200 slow clients"),
                "napilab_exporter_http_connections",
            ) >= 200.0
        },
    );
    let mut scrapes = 0;
    let mut trickled = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut next_byte = Instant::now();
    while slow.iter().any(Option::is_some) {
        assert!(
            Instant::now() < deadline,
            "{} of 200 slow connections still open 30 s after they connected (header timeout 3 s)",
            slow.iter().filter(|s| s.is_some()).count()
        );
        if Instant::now() >= next_byte {
            for stream in slow.iter_mut().flatten() {
                // A write the server no longer reads fails once it has closed: seen below.
                if stream.write(b"a").is_ok() {
                    trickled += 1;
                }
            }
            next_byte += Duration::from_secs(1);
        }
        for entry in slow.iter_mut() {
            if entry.as_mut().is_some_and(closed_by_server) {
                *entry = None;
            }
        }
        scrape(addr, "while slow clients trickle");
        scrapes += 1;
        sleep(Duration::from_millis(100));
    }
    assert!(
        trickled >= 200,
        "the slow clients were meant to keep sending: {trickled} bytes"
    );
    assert!(scrapes >= 1);
    wait_for_count(
        addr,
        "napilab_exporter_http_connections_closed_total{reason=\"header_timeout\"}",
        200.0,
    );
    drop(exporter);
}

/// Sends `len` bytes of one header value after a request line, in 1 MiB writes, until
/// the server stops taking them; then reads what it answered. (bytes sent, status: 0 when
/// the connection was closed without an answer that could be read).
fn send_huge_header(addr: SocketAddr, len: usize) -> (usize, u16) {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .expect("write timeout");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let chunk = vec![b'a'; 1 << 20];
    let mut sent = 0;
    if stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: big\r\nX-Huge: ")
        .is_ok()
    {
        while sent < len {
            let n = chunk.len().min(len - sent);
            match stream.write(&chunk[..n]) {
                Ok(0) | Err(_) => break,
                Ok(n) => sent += n,
            }
        }
        let _ = stream.write_all(b"\r\n\r\n");
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let status = String::from_utf8_lossy(&answer)
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (sent, status)
}

/// A request head over 16 KiB is refused (431, or the connection closed), one under it
/// is served; a 64 MiB head is not taken in: the client cannot send it, and the
/// exporter's memory does not grow by it.
#[test]
fn oversized_request_heads_are_refused_without_buffering_them() {
    let addr = free_port();
    let exporter = start_exporter(addr, &[]);
    // Within the limit: served.
    let fine = format!("X-Fine: {}\r\n", "b".repeat(8 * 1024));
    let (status, _) =
        get_with(addr, "/metrics", &fine, Duration::from_secs(5)).expect("8 KiB head");
    assert_eq!(status, 200, "a request with an 8 KiB header was refused");
    // Over it: 431 or closed, and nothing in between.
    let over = format!("X-Over: {}\r\n", "b".repeat(20 * 1024));
    match get_with(addr, "/metrics", &over, Duration::from_secs(5)) {
        Ok((status, _)) => assert_eq!(status, 431, "a 20 KiB header was answered {status}"),
        Err(e) => assert!(
            matches!(
                e.kind(),
                ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::Other
            ),
            "a 20 KiB header: {e}"
        ),
    }
    // Warm up (the answers' paths run once), then the baseline.
    for _ in 0..20 {
        scrape(addr, "before the huge header");
    }
    let before = exporter.rss_bytes();
    let (sent, status) = send_huge_header(addr, 64 << 20);
    assert!(
        sent < 64 << 20,
        "the server took all of a 64 MiB request head ({sent} bytes) instead of closing"
    );
    assert!(
        status == 431 || status == 0,
        "a 64 MiB request head was answered {status}"
    );
    scrape(addr, "after the huge header");
    let after = exporter.rss_bytes();
    let grew = after.saturating_sub(before);
    eprintln!("VmRSS {before} -> {after} bytes after a 64 MiB request head ({sent} bytes of it taken, status {status})");
    assert!(
        grew < 4 << 20,
        "the exporter's RSS grew by {grew} bytes ({before} -> {after}) after a 64 MiB request head"
    );
    // The 20 KiB and the 64 MiB heads.
    wait_for_count(
        addr,
        "napilab_exporter_http_connections_closed_total{reason=\"header_too_large\"}",
        2.0,
    );
    let (status, _) = get(addr, "/healthz", Duration::from_secs(2)).expect("healthz after");
    assert_eq!(status, 200);
}

/// With --max-connections 20 and 20 connections held open, the next one is closed as
/// soon as it is accepted, and counted; once the 20 go, scrapes are served again.
#[test]
fn connections_over_the_bound_are_closed_at_once() {
    let addr = free_port();
    let exporter = start_exporter(addr, &["--max-connections", "20"]);
    let held: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
            s.write_all(b"GET /metrics HTTP/1.1\r\n").expect("write");
            s
        })
        .collect();
    // Each held connection is accepted before the next probe, which then finds the bound
    // reached: it is closed with no answer.
    let mut refused = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !refused && Instant::now() < deadline {
        refused = get(addr, "/healthz", Duration::from_secs(5)).is_err();
        sleep(Duration::from_millis(100));
    }
    assert!(
        refused,
        "a 21st connection was served with --max-connections 20"
    );
    drop(held);
    wait_for(
        "a scrape after the held connections went",
        Duration::from_secs(10),
        || get(addr, "/metrics", Duration::from_secs(5)).is_ok_and(|(s, _)| s == 200),
    );
    wait_for_count(
        addr,
        "napilab_exporter_http_connections_closed_total{reason=\"over_limit\"}",
        1.0,
    );
    drop(exporter);
}
