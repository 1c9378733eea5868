//! The distribution's memcached as a second server: started in a namespace as a plain
//! process (`memcached -U 0 -l ADDR -p PORT -t N`, never the system service), pinned
//! with `taskset`, preloaded by the client with the same [`Keyspace`], stopped with
//! SIGTERM. It runs the modes whose difference is all in the kernel (no coalescing,
//! deferral, threaded NAPI, and the global `net.core.busy_poll`/`busy_read` busy
//! polling); it cannot set `EPIOCSPARAMS`, so the per-epoll modes (`busy-wait`,
//! `irq-suspend`) are refused for it (docs/lab.md).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::epoll::EpollMode;
use super::results::ServerStats;
use crate::netns;

/// How long memcached may take to accept connections after starting.
const START_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct MemcachedConfig {
    pub netns: String,
    pub listen: SocketAddrV4,
    /// Worker threads (`-t`).
    pub threads: u32,
    /// CPUs for `taskset -c` (empty: unpinned).
    pub cpus: Vec<u32>,
    /// Item memory (`-m`), MB.
    pub memory_mb: u32,
    pub mode: EpollMode,
}

/// A running memcached; stopped and reaped on [`Memcached::stop`] or drop.
pub struct Memcached {
    child: Option<Child>,
    addr: SocketAddrV4,
    mode: String,
    started: Instant,
}

/// The memcached binary on PATH, or why there is none.
pub fn find_binary() -> Result<PathBuf, String> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|d| d.join("memcached"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "memcached is not installed (Debian package `memcached`; `make deps` installs it)"
                .into()
        })
}

impl Memcached {
    /// Starts memcached in `cfg.netns` and waits until it accepts connections.
    pub fn start(cfg: &MemcachedConfig) -> Result<Memcached, String> {
        if cfg.mode.params.is_some() {
            return Err(format!(
                "memcached cannot run mode {}: it needs per-epoll busy-poll parameters (EPIOCSPARAMS) that unmodified memcached does not set; use napilab's server (napilab kv-server) for it",
                cfg.mode.name
            ));
        }
        let bin = find_binary()?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &cfg.netns]);
        if !cfg.cpus.is_empty() {
            let list: Vec<String> = cfg.cpus.iter().map(u32::to_string).collect();
            cmd.args(["taskset", "-c", &list.join(",")]);
        }
        cmd.arg(&bin).args([
            "-U",
            "0",
            "-l",
            &cfg.listen.ip().to_string(),
            "-p",
            &cfg.listen.port().to_string(),
            "-t",
            &cfg.threads.max(1).to_string(),
            "-m",
            &cfg.memory_mb.max(16).to_string(),
            // memcached refuses to run as root without -u; it drops to this user.
            "-u",
            "nobody",
        ]);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {} in {}: {e}", bin.display(), cfg.netns))?;
        let mut m = Memcached {
            child: Some(child),
            addr: cfg.listen,
            mode: cfg.mode.name.clone(),
            started: Instant::now(),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(c) = m.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    let mut err = String::new();
                    if let Some(mut e) = c.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    m.child = None;
                    return Err(format!(
                        "memcached exited at start ({status}): {}",
                        err.trim()
                    ));
                }
            }
            if in_namespace(&cfg.netns, || {
                TcpStream::connect_timeout(&cfg.listen.into(), Duration::from_millis(200)).map(drop)
            })
            .is_ok()
            {
                return Ok(m);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "memcached did not accept connections on {} within {START_TIMEOUT:?}",
                    cfg.listen
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// The pid of memcached itself (`ip netns exec` execs it; `taskset` too).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Reads memcached's own counters (`stats`) from inside `netns`, then stops it.
    pub fn stop(mut self, netns: &str) -> ServerStats {
        let stats = in_namespace(netns, || read_stats(self.addr)).unwrap_or_default();
        let get = |k: &str| stats.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let secs = |k: &str| get(k).and_then(|v| v.parse::<f64>().ok());
        let out = ServerStats {
            schema: "napilab.kv-server/1".into(),
            engine: "memcached".into(),
            mode: self.mode.clone(),
            epoll_params: None,
            blocking_epoll: true,
            uptime_s: self.started.elapsed().as_secs_f64(),
            requests: num("cmd_get") + num("cmd_set") + num("delete_hits") + num("delete_misses"),
            gets: num("cmd_get"),
            get_hits: num("get_hits"),
            sets: num("cmd_set"),
            deletes: num("delete_hits") + num("delete_misses"),
            protocol_errors: 0,
            service_time: None,
            workers: Vec::new(),
            cpu_user_s: secs("rusage_user"),
            cpu_system_s: secs("rusage_system"),
        };
        self.kill();
        out
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `f` on a scratch thread inside `ns` (the caller's thread keeps its namespace).
pub fn in_namespace<T: Send>(
    ns: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send,
) -> std::io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            netns::enter(ns)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("namespace thread panicked")))
    })
}

/// memcached's `stats` as (name, value) pairs.
fn read_stats(addr: SocketAddrV4) -> std::io::Result<Vec<(String, String)>> {
    let mut s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    s.write_all(b"stats\r\n")?;
    let mut out = Vec::new();
    // Bounded: memcached's stats are about 100 lines.
    for line in BufReader::new(s).lines().take(1000) {
        let line = line?;
        let line = line.trim_end();
        if line == "END" {
            break;
        }
        let mut t = line.split(' ');
        if let (Some("STAT"), Some(k), Some(v)) = (t.next(), t.next(), t.next()) {
            out.push((k.to_string(), v.to_string()));
        }
    }
    Ok(out)
}
