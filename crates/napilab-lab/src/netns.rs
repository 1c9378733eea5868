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

/// Creates namespace `ns` with its loopback up and IPv6 off (only the lab's own IPv4
/// packets cross its links), then runs `extra` (more sysctls) in it.
pub fn new_namespace(ns: &str, extra: &str) -> io::Result<()> {
    cmd("ip", &["netns", "add", ns])?;
    sh_in(
        ns,
        &format!(
            "ip link set lo up; \
             sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1; {extra}"
        ),
    )
    .map(|_| ())
}

/// A veth pair from `a_dev` in `a_ns` to `b_dev` in `b_ns`, with `queues` queues each
/// way on both ends (None: the kernel's default).
pub fn veth_pair(
    (a_ns, a_dev): (&str, &str),
    (b_ns, b_dev): (&str, &str),
    queues: Option<u32>,
) -> io::Result<()> {
    let q = queues.map(|q| q.max(1).to_string());
    let queue_args: Vec<&str> = match &q {
        Some(q) => vec!["numtxqueues", q, "numrxqueues", q],
        None => Vec::new(),
    };
    let mut args = vec!["link", "add", a_dev, "netns", a_ns];
    args.extend(&queue_args);
    args.extend(["type", "veth", "peer", "name", b_dev, "netns", b_ns]);
    args.extend(&queue_args);
    cmd("ip", &args).map(|_| ())
}

/// Gives `dev` in `ns` the /30 address `addr` and brings it up.
pub fn address_up(ns: &str, dev: &str, addr: std::net::Ipv4Addr) -> io::Result<()> {
    cmd(
        "ip",
        &["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", dev],
    )?;
    cmd("ip", &["-n", ns, "link", "set", dev, "up"]).map(|_| ())
}

/// Creates the namespaces of `a` and `b` (loopback up, IPv6 off) and a veth pair with
/// `queues` queues each way between them, addressed /30, up, with static neighbours.
pub fn linked_namespaces(a: &LinkEnd<'_>, b: &LinkEnd<'_>, queues: u32) -> io::Result<()> {
    for ns in [a.ns, b.ns] {
        new_namespace(ns, "")?;
    }
    veth_pair((a.ns, a.dev), (b.ns, b.dev), Some(queues))?;
    for end in [a, b] {
        address_up(end.ns, end.dev, end.addr)?;
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
    napilab_probe::netns::enter(ns)
}

/// [`enter`] when a namespace is given (None: the thread stays where it is), with an
/// error that names the namespace and says how to check it: for the threads of the
/// lab's servers, generators and tunnel endpoint.
pub fn enter_if(ns: Option<&str>) -> Result<(), String> {
    match ns {
        Some(ns) => enter(ns).map_err(|e| {
            format!("cannot enter network namespace {ns}: {e} (does it exist? see `ip netns list`)")
        }),
        None => Ok(()),
    }
}

/// Gives the calling thread the view of the network namespace `ns` that `ip netns
/// exec` gives a process, without a process: the thread enters `ns` (setns), takes a
/// mount namespace of its own (unshare(CLONE_NEWNS), which also unshares its
/// filesystem context from the other threads), makes every mount in it a slave (no
/// mount propagates back to the host), mounts a fresh sysfs on /sys (sysfs shows the
/// devices of the mounting task's network namespace), and covers `/proc/<pid>/net`,
/// where `/proc/net` (a link to `/proc/self/net`) leads, with this thread's own
/// `/proc/thread-self/net`: `/proc/self` is the thread-group leader, which stays in
/// the host's namespace. After this the probe's parsers, netlink sockets opened on
/// the thread and napilab-tune see `ns` with root `/`. The other threads are
/// untouched; the mounts go away with the thread.
///
/// Use a thread of its own ([`spawn_in_view`], [`in_view`]): the change cannot be
/// undone.
pub fn enter_view(ns: &str) -> io::Result<()> {
    use std::ffi::CString;
    enter(ns).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("entering network namespace {ns}: {e} (does it exist? see `ip netns list`)"),
        )
    })?;
    let c = |s: &str| CString::new(s).map_err(|_| io::Error::other("path with a NUL byte"));
    let fail = |what: &str| {
        let e = io::Error::last_os_error();
        io::Error::new(
            e.kind(),
            format!(
                "{what} for the view of {ns}: {e} (the lab needs CAP_SYS_ADMIN: run it as root)"
            ),
        )
    };
    // SAFETY: unshare only changes the calling thread's own mount namespace and
    // filesystem context (CLONE_NEWNS implies CLONE_FS, which a thread of a
    // multi-threaded process may unshare); no memory is shared with the kernel.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(fail("unshare(CLONE_NEWNS)"));
    }
    let root = c("/")?;
    let none = c("none")?;
    // SAFETY: every pointer is a valid NUL-terminated string (or null where mount(2)
    // allows it) that outlives the call; the mount namespace is this thread's alone
    // (unshared above), so nothing another thread sees changes.
    if unsafe {
        libc::mount(
            none.as_ptr(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(fail("making / a slave mount"));
    }
    let sys = c("/sys")?;
    let sysfs = c("sysfs")?;
    let name = c(ns)?;
    // SAFETY: as above; detaching the host's /sys in this thread's namespace (it may
    // not be mounted: then the fresh one covers the directory).
    unsafe { libc::umount2(sys.as_ptr(), libc::MNT_DETACH) };
    // SAFETY: as above.
    if unsafe {
        libc::mount(
            name.as_ptr(),
            sys.as_ptr(),
            sysfs.as_ptr(),
            0,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(fail("mounting sysfs on /sys"));
    }
    // /proc/thread-self/net resolved to this thread's task directory, bound over the
    // directory /proc/net leads to.
    // SAFETY: getpid and gettid have no preconditions.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    let own = c(&format!("/proc/{pid}/task/{tid}/net"))?;
    let leader = c(&format!("/proc/{pid}/net"))?;
    // SAFETY: as above.
    if unsafe {
        libc::mount(
            own.as_ptr(),
            leader.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(fail("binding /proc/thread-self/net on /proc/net"));
    }
    Ok(())
}

/// Runs `f` on a new thread named `name` that sees `ns` ([`enter_view`]); the handle
/// gives `f`'s result, or why the view could not be set up.
pub fn spawn_in_view<T: Send + 'static>(
    ns: &str,
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<std::thread::JoinHandle<io::Result<T>>> {
    let ns = ns.to_string();
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            enter_view(&ns)?;
            Ok(f())
        })
}

/// Runs `f` on a thread that sees `ns` ([`enter_view`]) and waits for it.
pub fn in_view<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("napilab-netns".into())
            .spawn_scoped(s, || {
                enter_view(ns)?;
                Ok(f())
            })?
            .join()
            .unwrap_or_else(|_| Err(io::Error::other(format!("the thread in {ns} panicked"))))
    })
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
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread, nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
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
