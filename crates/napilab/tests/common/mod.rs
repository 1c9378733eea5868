//! What the exporter's end-to-end tests share: a child process stopped on drop, a
//! bounded HTTP/1.0 GET, waiting for a condition, a free port, a thread in a namespace.
//! Each test file compiles this module on its own and uses part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// A child process (named for messages) stopped on drop: SIGTERM, so that an exporter
/// detaches its BPF programs, then SIGKILL after 5 s; reaped either way.
pub struct Running(pub Child, pub &'static str);

impl Running {
    /// Sends SIGTERM and waits (at most 5 s) for the exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let pid = i32::try_from(self.0.id()).ok()?;
        // SAFETY: plain kill(2) on our own child.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Some(status);
            }
            sleep(Duration::from_millis(50));
        }
        None
    }

    /// The child's resident memory, from /proc/PID/status (VmRSS), in bytes.
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id()))
            .expect("the child's /proc/PID/status");
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("VmRSS in /proc/PID/status");
        kb * 1024
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Already reaped (terminate): its pid may belong to another process by now.
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        if self.terminate().is_some() {
            return;
        }
        eprintln!("{} did not stop on SIGTERM: killing it", self.1);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.0 GET with `extra` header lines (each ending in CRLF), bounded by
/// `timeout`: (status, head, body).
pub fn exchange(
    addr: SocketAddr,
    path: &str,
    extra: &str,
    timeout: Duration,
) -> std::io::Result<(u16, String, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{extra}\r\n")?;
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
    Ok((status, head.to_string(), body.to_string()))
}

/// One HTTP/1.0 GET with `extra` header lines, bounded by `timeout`: (status, body).
pub fn get_with(
    addr: SocketAddr,
    path: &str,
    extra: &str,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    exchange(addr, path, extra, timeout).map(|(status, _, body)| (status, body))
}

/// One HTTP/1.0 GET, bounded by `timeout`: (status, body).
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    get_with(addr, path, "", timeout)
}

/// Waits (polling every 100 ms) until `ok`; panics naming `what` after `within`.
pub fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if ok() {
            return;
        }
        sleep(Duration::from_millis(100));
    }
    panic!("{what} did not happen within {within:?}");
}

/// A free loopback port: bound by the kernel's choice, then released for the exporter.
pub fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("its address")
}

/// Runs `f` on a thread that has entered network namespace `ns` (sockets it opens live
/// there); the test's own thread stays in the host namespace.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        napilab_probe::netns::enter(&ns).expect("enter the namespace");
        f()
    })
    .join()
    .expect("namespace thread")
}

/// Spawns `cmd` (a `napilab export` command line) and waits, at most 20 s, until
/// `healthy` (its /healthz answers 200 where it listens).
pub fn spawn_exporter(cmd: &mut Command, healthy: impl FnMut() -> bool) -> Running {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start napilab export");
    let running = Running(child, "napilab export");
    wait_for("the exporter's /healthz", Duration::from_secs(20), healthy);
    running
}

/// `napilab export --interval 100ms --listen ADDR EXTRA..` on the host, ready.
pub fn start_exporter(addr: SocketAddr, extra: &[&str]) -> Running {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_napilab"));
    cmd.args([
        "export",
        "--interval",
        "100ms",
        "--listen",
        &addr.to_string(),
    ])
    .args(extra);
    spawn_exporter(&mut cmd, || {
        get(addr, "/healthz", Duration::from_secs(2)).is_ok_and(|(s, _)| s == 200)
    })
}
