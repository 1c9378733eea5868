//! Run ids, namespace names and the commands that build the lab.

use std::io;
use std::path::PathBuf;
use std::process::Command;

/// Prefix of everything the lab names: namespaces `napilab-<run_id>-<role>`.
pub const PREFIX: &str = "napilab-";

/// Where a running lab run keeps its pid file, so `lab clean` leaves it alone.
pub const RUN_DIR: &str = "/run/napilab/lab";

/// A new run id: `YYYYMMDD-HHMMSS-<4 hex>` (UTC), salted with the process id and the
/// clock's nanoseconds so that two runs started in the same second differ.
pub fn new_run_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let unix_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
    napilab_core::experiment::run_id(unix_ms, now.subsec_nanos() ^ (std::process::id() << 16))
}

/// True for strings shaped like a run id.
pub fn is_run_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b[8] == b'-'
        && b[15] == b'-'
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[16..].iter().all(u8::is_ascii_hexdigit)
}

/// `napilab-<run_id>-<role>`.
pub fn ns_name(run_id: &str, role: &str) -> String {
    format!("{PREFIX}{run_id}-{role}")
}

/// The run id of a lab namespace name, if it is one.
pub fn run_id_of_ns(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(PREFIX)?;
    let id = rest.get(..20)?;
    (is_run_id(id) && rest[20..].starts_with('-')).then_some(id)
}

pub fn pid_file(run_id: &str) -> PathBuf {
    PathBuf::from(RUN_DIR).join(format!("{run_id}.pid"))
}

/// True when the run's process is alive (its pid file names a live process).
pub fn run_alive(run_id: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(pid_file(run_id)) else {
        return false;
    };
    let Ok(pid) = text.trim().parse::<i32>() else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid, 0) == 0 }
}

/// Runs a command; the error carries its stderr.
pub fn cmd(program: &str, args: &[&str]) -> io::Result<String> {
    let out = Command::new(program).args(args).output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot run {program}: {e} (is it installed? the lab needs iproute2 and ethtool)"
            ),
        )
    })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a shell snippet inside a namespace (`ip netns exec NS sh -c ...`), which
/// gives it the namespace's own /sys.
pub fn sh_in(ns: &str, script: &str) -> io::Result<String> {
    cmd("ip", &["netns", "exec", ns, "sh", "-c", script])
}

/// The MAC address of `dev` in `ns`.
pub fn mac_of(ns: &str, dev: &str) -> io::Result<String> {
    Ok(sh_in(ns, &format!("cat /sys/class/net/{dev}/address"))?
        .trim()
        .to_string())
}

/// A permanent neighbour entry `ip` -> `mac` on `dev` in `ns`: no ARP traffic or
/// ARP-queue drops during a measurement.
pub fn static_neighbour(ns: &str, ip: std::net::Ipv4Addr, mac: &str, dev: &str) -> io::Result<()> {
    cmd(
        "ip",
        &[
            "-n",
            ns,
            "neigh",
            "replace",
            &ip.to_string(),
            "lladdr",
            mac,
            "dev",
            dev,
            "nud",
            "permanent",
        ],
    )
    .map(drop)
}

/// One end of [`linked_namespaces`]: namespace, device, /30 address.
pub struct LinkEnd<'a> {
    pub ns: &'a str,
    pub dev: &'a str,
    pub addr: std::net::Ipv4Addr,
}

/// Creates the namespaces of `a` and `b` (loopback up, IPv6 off) and a veth pair with
/// `queues` queues each way between them, addressed /30, up, with static neighbours.
pub fn linked_namespaces(a: &LinkEnd<'_>, b: &LinkEnd<'_>, queues: u32) -> io::Result<()> {
    for ns in [a.ns, b.ns] {
        cmd("ip", &["netns", "add", ns])?;
        sh_in(
            ns,
            "ip link set lo up; \
             sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
        )?;
    }
    let q = queues.max(1).to_string();
    cmd(
        "ip",
        &[
            "link",
            "add",
            a.dev,
            "netns",
            a.ns,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            b.dev,
            "netns",
            b.ns,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ],
    )?;
    for end in [a, b] {
        let cidr = format!("{}/30", end.addr);
        cmd("ip", &["-n", end.ns, "addr", "add", &cidr, "dev", end.dev])?;
        cmd("ip", &["-n", end.ns, "link", "set", end.dev, "up"])?;
    }
    let (amac, bmac) = (mac_of(a.ns, a.dev)?, mac_of(b.ns, b.dev)?);
    static_neighbour(a.ns, b.addr, &bmac, a.dev)?;
    static_neighbour(b.ns, a.addr, &amac, b.dev)
}

/// Sets interrupt deferral on every NAPI instance of `dev` in `ns` (its device-wide
/// sysfs `napi_defer_hard_irqs` and `gro_flush_timeout`); 0 and 0 restore the kernel's
/// defaults.
pub fn set_irq_deferral(
    ns: &str,
    dev: &str,
    defer_hard_irqs: u32,
    gro_flush_timeout_ns: u64,
) -> io::Result<()> {
    sh_in(
        ns,
        &format!(
            "echo {defer_hard_irqs} > /sys/class/net/{dev}/napi_defer_hard_irqs && echo {gro_flush_timeout_ns} > /sys/class/net/{dev}/gro_flush_timeout"
        ),
    )
    .map(drop)
}

/// Moves the calling thread into the network namespace `ns` (other threads stay).
/// Sockets created afterwards belong to it.
pub fn enter(ns: &str) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(format!("/run/netns/{ns}"))?;
    // SAFETY: setns on a valid namespace fd affects only the calling thread.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Pins the calling thread (pid 0) or a task to `cpus`.
pub fn pin(pid: i32, cpus: &[u32]) -> io::Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds are checked by the caller's
    // validated CPU numbers (< 1024 = CPU_SETSIZE).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c as usize, &mut set);
        }
        if libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The hex CPU mask for sysfs (`rps_cpus`, `xps_cpus`), e.g. `[1]` -> `2`.
pub fn cpu_mask(cpus: &[u32]) -> String {
    if cpus.is_empty() {
        return "0".into();
    }
    let max = cpus.iter().copied().max().unwrap_or(0) as usize;
    let mut words = vec![0u32; max / 32 + 1];
    for &c in cpus {
        words[c as usize / 32] |= 1 << (c % 32);
    }
    words
        .iter()
        .rev()
        .enumerate()
        .map(|(i, w)| {
            if i == 0 {
                format!("{w:x}")
            } else {
                format!("{w:08x}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every namespace on the host.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of the calling thread, nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Every network namespace name `ip netns list` shows.
pub fn list_namespaces() -> io::Result<Vec<String>> {
    Ok(cmd("ip", &["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect())
}

/// Kills every process in `ns` and deletes it.
pub fn delete_namespace(ns: &str) -> io::Result<()> {
    if let Ok(pids) = cmd("ip", &["netns", "pids", ns]) {
        for p in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            if p != std::process::id() as i32 {
                // SAFETY: sending SIGKILL to a process inside our own namespace.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
        }
    }
    cmd("ip", &["netns", "del", ns]).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_and_names() {
        let id = new_run_id();
        assert!(is_run_id(&id), "{id}");
        let ns = ns_name(&id, "dut");
        assert_eq!(run_id_of_ns(&ns), Some(id.as_str()));
        assert_eq!(run_id_of_ns("napilab-bench-12-s"), None);
    }

    #[test]
    fn masks() {
        assert_eq!(cpu_mask(&[1]), "2");
        assert_eq!(cpu_mask(&[0, 1]), "3");
        assert_eq!(cpu_mask(&[33]), "2,00000000");
        assert_eq!(cpu_mask(&[]), "0");
    }
}
