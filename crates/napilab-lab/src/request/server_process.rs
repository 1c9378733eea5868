//! napilab's key-value server as its own process (`napilab kv-server`), for a runner
//! that wants the server's CPU accounted to a process of its own: started inside a
//! namespace, ready once it says it listens, stopped with SIGTERM, its statistics read
//! from the JSON it prints at exit.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddrV4;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::results::ServerStats;

/// How long the server may take to preload and listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `napilab kv-server`; killed on drop if not stopped.
pub struct ServerProcess {
    child: Option<Child>,
    pub addr: SocketAddrV4,
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
        let mut p = ServerProcess {
            child: Some(child),
            addr: listen,
        };
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

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
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
