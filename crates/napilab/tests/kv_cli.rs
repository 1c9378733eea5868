//! End-to-end tests of `napilab kv-server` and `napilab kv-load`: bad input names the
//! flag (no root), and (root) the server started in one namespace answers the load
//! generator in another, and prints its statistics as JSON on SIGTERM. Namespaces
//! `nl-kv-cli-<pid>-*` from napilab-testkit, deleted on drop.

use serde_json::Value;

fn napilab(args: &[&str]) -> std::process::Output {
    napilab_testkit::output_of(env!("CARGO_BIN_EXE_napilab"), args)
}

#[test]
fn bad_input_names_the_flag() {
    let out = napilab(&["kv-server", "--mode", "adaptive", "--listen", "127.0.0.1:0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--mode") && err.contains("irq-suspend"),
        "{err}"
    );

    let out = napilab(&["kv-load", "--server", "127.0.0.1:1", "--qps=-5"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("qps"), "{err}");

    let out = napilab(&[
        "kv-load",
        "--server",
        "127.0.0.1:1",
        "--closed",
        "--cpus",
        "x",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cpus"), "{err}");
}

#[test]
fn server_and_load_in_namespaces_report_json() {
    let pair = match napilab_testkit::VethPair::create("nl-kv-cli", "e2e", false) {
        Ok(p) => p,
        Err(e) => {
            println!("SKIPPED server_and_load_in_namespaces_report_json: {e}");
            return;
        }
    };
    // Ready once it says it listens; stopped with SIGTERM, after which it prints its
    // statistics.
    let server = server_process::ServerProcess::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_napilab")),
        &pair.b,
        "10.77.0.2:11211".parse().expect("address"),
        &["--keys", "1000", "--for", "20s"],
    )
    .expect("start kv-server");
    let out = napilab(&[
        "kv-load",
        "--netns",
        &pair.a,
        "--server",
        "10.77.0.2:11211",
        "--qps",
        "2000",
        "--for",
        "1s",
        "--warmup",
        "200ms",
        "--keys",
        "1000",
        "--json",
    ]);
    let stats = server.stop().expect("kv-server statistics");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let load: Value = serde_json::from_slice(&out.stdout).expect("kv-load JSON");
    assert_eq!(load["schema"], "napilab.kv-load/1");
    assert_eq!(load["errors"], 0, "{load}");
    assert_eq!(load["timeouts"], 0, "{load}");
    let achieved = load["achieved_qps"].as_f64().expect("achieved_qps");
    assert!(achieved > 1500.0 && achieved < 2500.0, "{load}");
    assert!(
        load["latency"]["p99_us"].as_f64().expect("p99") > 0.0,
        "{load}"
    );

    assert_eq!(stats.schema, "napilab.kv-server/1");
    assert_eq!(stats.engine, "napilab-kv");
    let replies = load["replies"].as_u64().expect("replies");
    assert!(stats.requests >= replies, "{stats:?}");
    assert!(stats.workers[0].epoll.returns_with_events > 0, "{stats:?}");
}

#[test]
fn list_modes_says_what_this_kernel_runs() {
    let pair = match napilab_testkit::VethPair::create("nl-kv-cli", "modes", false) {
        Ok(p) => p,
        Err(e) => {
            println!("SKIPPED list_modes_says_what_this_kernel_runs: {e}");
            return;
        }
    };
    let out = napilab(&["kv-server", "--list-modes", "--netns", &pair.b, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let modes: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let modes = modes.as_array().expect("array");
    assert_eq!(modes.len(), 6, "{modes:?}");
    for m in modes {
        // Each mode is either runnable or says why not.
        assert!(
            m["runnable"].as_bool().expect("runnable") || m["reason"].is_string(),
            "{m}"
        );
    }
    let irq = modes
        .iter()
        .find(|m| m["mode"] == "irq-suspend")
        .expect("irq-suspend listed");
    assert_eq!(irq["blocking"], true, "{irq}");
    assert_eq!(irq["params"]["prefer_busy_poll"], true, "{irq}");
    // Threaded busy polling runs from Linux 6.19; before, the reason names the version.
    let tbp = modes
        .iter()
        .find(|m| m["mode"] == "threaded-busy-poll")
        .expect("threaded-busy-poll listed");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok();
    if napilab_tune::knobs::busy_poll_support(release.as_deref().map(str::trim), None).is_err() {
        assert_eq!(tbp["runnable"], false, "{tbp}");
        let why = tbp["reason"].as_str().unwrap_or_default();
        assert!(why.contains("6.19") && why.contains("`threaded`"), "{tbp}");
    }
}

/// `napilab kv-server` as a process of its own (the lab runs the same server in-process,
/// request::server::KvServer): started inside a namespace, ready once it says it
/// listens, stopped with SIGTERM, its statistics read from the JSON it prints at exit.
mod server_process {
    use std::io::{BufRead, BufReader, Read};
    use std::net::SocketAddrV4;
    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use napilab_lab::request::results::ServerStats;

    /// How long the server may take to preload and listen.
    const START_TIMEOUT: Duration = Duration::from_secs(30);

    /// A running `napilab kv-server`; killed on drop if not stopped.
    pub struct ServerProcess {
        child: Option<Child>,
    }

    impl ServerProcess {
        /// Runs `napilab_exe kv-server --netns NS --listen ADDR --json EXTRA...` and waits
        /// for its "listening on" line. `extra`: `--workers`, `--cpus`, `--mode`, `--keys`...
        pub fn start(
            napilab_exe: &Path,
            netns: &str,
            listen: SocketAddrV4,
            extra: &[&str],
        ) -> Result<ServerProcess, String> {
            let mut child = Command::new(napilab_exe)
                .args([
                    "kv-server",
                    "--netns",
                    netns,
                    "--listen",
                    &listen.to_string(),
                    "--json",
                ])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("starting {} kv-server: {e}", napilab_exe.display()))?;
            let Some(stderr) = child.stderr.take() else {
                let _ = child.kill();
                return Err("kv-server: no stderr pipe".into());
            };
            // The first stderr line says it listens, or why it could not start. Read it on a
            // thread so a server that hangs cannot block us past the timeout.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stderr);
                let mut line = String::new();
                let _ = r.read_line(&mut line);
                let _ = tx.send(line);
                // Keep draining so the server never blocks on a full pipe.
                let mut rest = String::new();
                let _ = r.read_to_string(&mut rest);
            });
            let mut p = ServerProcess { child: Some(child) };
            let deadline = Instant::now() + START_TIMEOUT;
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.contains("listening on") => Ok(p),
                Ok(line) => {
                    p.kill();
                    Err(format!("kv-server did not start: {}", line.trim()))
                }
                Err(_) => {
                    p.kill();
                    Err(format!("kv-server did not listen within {START_TIMEOUT:?}"))
                }
            }
        }

        /// SIGTERM, then the statistics it prints (killed after 5 s without them).
        pub fn stop(mut self) -> Result<ServerStats, String> {
            let Some(mut child) = self.child.take() else {
                return Err("kv-server already stopped".into());
            };
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
                return Err("kv-server did not stop within 5 s of SIGTERM; killed".into());
            }
            let mut out = String::new();
            if let Some(mut s) = child.stdout.take() {
                s.read_to_string(&mut out)
                    .map_err(|e| format!("reading kv-server's statistics: {e}"))?;
            }
            serde_json::from_str(&out).map_err(|e| {
                format!(
                    "kv-server's statistics are not its JSON ({e}): {}",
                    out.trim()
                )
            })
        }

        fn kill(&mut self) {
            if let Some(mut c) = self.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    impl Drop for ServerProcess {
        fn drop(&mut self) {
            self.kill();
        }
    }
}
