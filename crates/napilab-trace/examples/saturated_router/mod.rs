//! The saturated veth router both trace-cost benchmarks measure (`overhead` and
//! `packets-overhead`): three namespaces `<tag>-<pid>-bench-{a,r,b}`, kept at the DUT's
//! maximum forwarding rate.
//!  - generator: threads in namespace a, pinned to CPU 0, sending prebuilt 64-byte UDP
//!    frames with `sendmmsg` on an AF_PACKET socket (qdisc bypassed). They offer more
//!    than the DUT forwards; the excess is dropped at the DUT's full veth ring (a0's
//!    tx_dropped), which is what shows that the DUT is the bottleneck. (A UDP socket
//!    reaches less than the DUT forwards from one CPU.)
//!  - DUT: the router's ingress veth uses threaded NAPI, its kthread pinned to CPU 1,
//!    so GRO, routing and the egress veth run on CPU 1 in polls of up to 64 packets.
//!  - sink: the router sends every frame to a MAC address the sink's veth does not
//!    have, so the sink's IP layer drops it (PACKET_OTHERHOST) at its first check (no
//!    socket, no ICMP, no iptables or XDP). The forwarded count is the sink veth's RX
//!    packet counter.
//!
//! Every namespace is removed when the [`Router`] is dropped, also after an early
//! return; the senders stop when the [`Flood`] is dropped and are bounded in time.

// Each example compiles this module on its own and uses part of it.
#![allow(dead_code)]

use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// CPU of the generator (and of the benchmark's own thread), and CPU of the DUT's NAPI
/// kthread.
pub const GEN_CPU: usize = 0;

/// The share of rounds (or pairs of windows) both benches leave out at each end before
/// averaging a cost (Yuen's trimmed mean). Why not the plain mean: a window that lands
/// in one of the VM's slow or fast spells (docs/lab.md, "Host speed") moves by 10-25
/// points while most move by 1-3, and those few set the mean's interval. The
/// family-26 VM's 54 rounds of 2026-11-28 (docs/trace.md): the control's interval
/// +-1.19 points over the mean of its pairs, +-0.44 over the 20% trimmed mean.
pub const TRIM: f64 = 0.2;
pub const DUT_CPU: usize = 1;
/// Frames per `sendmmsg` call.
const BATCH: usize = 64;
/// UDP payload bytes per datagram (a 106-byte frame).
const PAYLOAD: usize = 64;

/// What tells one benchmark's router from another's: names, addresses, MACs.
pub struct RouterNames {
    /// Namespace prefix, e.g. `napilab-trace` (the pid and `-bench` follow).
    pub tag: &'static str,
    /// Prefix of the DUT ingress device's name (the pid follows): its NAPI kthread is
    /// found by that name.
    pub device: &'static str,
    /// Second octet of the router's 10.x.1.0/24 and 10.x.2.0/24 networks.
    pub octet: u8,
    /// Fifth byte of the generator's, the DUT's and the wrong sink MAC addresses.
    pub mac_byte: u8,
}

pub struct Router {
    base: String,
    /// Device names carry the pid: the NAPI kthread is found by its name.
    pub ingress: String,
    /// The DUT's NAPI kthread(s), once pinned.
    dut_pids: Vec<i32>,
    /// Nice value of the DUT kthreads and the generator threads (0: unchanged).
    pub nice: i32,
    gen_mac: [u8; 6],
    dut_mac: [u8; 6],
    octet: u8,
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

pub fn sh(script: &str) -> Result<String, String> {
    let out = Command::new("sh")
        .args(["-ec", script])
        .output()
        .map_err(|e| format!("cannot run sh: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Pins thread `pid` (0: the calling thread, and the threads it starts later) to one CPU.
pub fn pin(pid: i32, cpu: usize) -> Result<(), String> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it; sched_setaffinity is
    // given a valid set of the size passed.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!(
                "cannot pin thread {pid} to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// Sets the nice value of thread `tid` (0: the calling thread); 0 leaves it alone.
fn set_nice(tid: i32, nice: i32) -> Result<(), String> {
    if nice == 0 {
        return Ok(());
    }
    // SAFETY: plain syscall on a thread id; the result is checked.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) } != 0 {
        return Err(format!(
            "cannot set nice {nice} on thread {tid}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Moves the calling thread into namespace `ns` (network namespaces are per thread).
fn enter(ns: &str) -> Result<(), String> {
    napilab_probe::netns::enter(ns).map_err(|e| e.to_string())
}

/// (rx_packets, tx_packets, tx_dropped) of `dev` in namespace `ns`, from
/// /proc/thread-self/net/dev read by a thread inside the namespace.
fn counters(ns: &str, dev: &str) -> Result<(u64, u64, u64), String> {
    let (ns, dev) = (ns.to_string(), dev.to_string());
    std::thread::spawn(move || {
        enter(&ns)?;
        let text = std::fs::read_to_string("/proc/thread-self/net/dev")
            .map_err(|e| format!("/proc/net/dev in {ns}: {e}"))?;
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{dev}:")))
            .ok_or_else(|| format!("{dev} missing from /proc/net/dev in {ns}"))?;
        let f: Vec<u64> = line
            .split_once(':')
            .map(|(_, r)| {
                r.split_whitespace()
                    .filter_map(|v| v.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if f.len() < 16 {
            return Err(format!("unexpected /proc/net/dev line in {ns}: {line}"));
        }
        Ok((f[1], f[9], f[11]))
    })
    .join()
    .map_err(|_| "counter reader panicked".to_string())?
}

impl Router {
    pub fn ns(&self, n: &str) -> String {
        format!("{}-{n}", self.base)
    }

    /// Builds the three namespaces and the two veth pairs, with the DUT's kthread
    /// pinned to [`DUT_CPU`] at nice `nice`.
    pub fn create(names: &RouterNames, nice: i32) -> Result<Router, String> {
        let pid = std::process::id();
        let mac = |last: u8| [0x02, 0x6e, 0x61, 0x70, names.mac_byte, last];
        let mut r = Router {
            base: format!("{}-{pid}-bench", names.tag),
            ingress: format!("{}{pid}", names.device),
            dut_pids: Vec::new(),
            nice,
            gen_mac: mac(0x0a),
            dut_mac: mac(0x0b),
            octet: names.octet,
        };
        let (a, m, b, ri) = (r.ns("a"), r.ns("r"), r.ns("b"), r.ingress.clone());
        let (gen_mac, dut_mac, wrong_mac) = (
            mac_text(r.gen_mac),
            mac_text(r.dut_mac),
            mac_text(mac(0x01)),
        );
        let o = names.octet;
        // `r` exists before anything is created: an early return drops it, and its
        // Drop removes whatever was created.
        sh(&format!("for n in {a} {m} {b}; do ip netns add $n; done"))?;
        sh(&format!(
            "for n in {a} {m} {b}; do ip -n $n link set lo up
               ip netns exec $n sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1; done
             ip link add a0 netns {a} type veth peer name {ri} netns {m}
             ip link add r1 netns {m} type veth peer name b0 netns {b}
             ip -n {a} link set a0 address {gen_mac}; ip -n {m} link set {ri} address {dut_mac}
             ip -n {a} addr add 10.{o}.1.1/24 dev a0; ip -n {a} link set a0 up
             ip -n {m} addr add 10.{o}.1.254/24 dev {ri}; ip -n {m} link set {ri} up
             ip -n {m} addr add 10.{o}.2.254/24 dev r1; ip -n {m} link set r1 up
             ip -n {b} addr add 10.{o}.2.2/24 dev b0; ip -n {b} link set b0 up
             ip -n {m} neigh replace 10.{o}.1.1 lladdr {gen_mac} dev {ri} nud permanent
             ip -n {m} neigh replace 10.{o}.2.2 lladdr {wrong_mac} dev r1 nud permanent
             ip netns exec {m} sysctl -qw net.ipv4.ip_forward=1
             ip netns exec {a} ethtool -K a0 tso off gso off >/dev/null
             ip netns exec {m} ethtool -K {ri} gro on >/dev/null
             ip netns exec {m} ethtool -K r1 tso off gso off >/dev/null
             ip netns exec {m} sh -c 'echo 1 > /sys/class/net/{ri}/threaded'"
        ))?;
        r.pin_dut()?;
        Ok(r)
    }

    /// Pins the ingress device's NAPI kthread(s) (`napi/<dev>-<id>`) to the DUT CPU.
    fn pin_dut(&mut self) -> Result<(), String> {
        let prefix = format!("napi/{}", self.ingress);
        let dir = std::fs::read_dir("/proc").map_err(|e| format!("/proc: {e}"))?;
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            if comm.trim_end().starts_with(&prefix) {
                pin(pid, DUT_CPU)?;
                set_nice(pid, self.nice)?;
                self.dut_pids.push(pid);
            }
        }
        if self.dut_pids.is_empty() {
            return Err(format!(
                "no kthread named {prefix}-*: threaded NAPI did not start on {}",
                self.ingress
            ));
        }
        Ok(())
    }

    /// (offered, forwarded) packet counters: what the generator put on its veth
    /// (taken by the DUT's ring plus dropped because the ring was full) and what
    /// reached the sink.
    pub fn counts(&self) -> Result<(u64, u64), String> {
        let (_, a_tx, a_drop) = counters(&self.ns("a"), "a0")?;
        Ok((a_tx + a_drop, self.forwarded()?))
    }

    /// Packets that reached the sink.
    pub fn forwarded(&self) -> Result<u64, String> {
        Ok(counters(&self.ns("b"), "b0")?.0)
    }

    /// CPU time (ns) the DUT's kthreads have run, from /proc/<pid>/schedstat. Without
    /// CONFIG_IRQ_TIME_ACCOUNTING this includes the softirqs they run at bh-enable (the
    /// sink's backlog) and the interrupts that hit them, and excludes steal time (with
    /// CONFIG_PARAVIRT_TIME_ACCOUNTING): the DUT's own cost, whoever else shares CPU 1.
    pub fn dut_cpu_ns(&self) -> Result<u64, String> {
        let mut total = 0;
        for pid in &self.dut_pids {
            let path = format!("/proc/{pid}/schedstat");
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
            total += text
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| format!("{path}: unexpected content {text:?}"))?;
        }
        Ok(total)
    }

    /// An Ethernet + IPv4 + UDP frame from the generator to the sink's address.
    fn frame(&self, src_port: u16) -> Vec<u8> {
        let udp_len = 8 + PAYLOAD;
        let ip_len = 20 + udp_len;
        let mut f = Vec::with_capacity(14 + ip_len);
        f.extend_from_slice(&self.dut_mac);
        f.extend_from_slice(&self.gen_mac);
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        ip[8] = 64; // TTL
        ip[9] = 17; // UDP
        ip[12..16].copy_from_slice(&[10, self.octet, 1, 1]);
        ip[16..20].copy_from_slice(&[10, self.octet, 2, 2]);
        let mut sum: u32 = ip
            .chunks_exact(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&src_port.to_be_bytes());
        f.extend_from_slice(&9u16.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]); // no UDP checksum (allowed on IPv4)
        f.resize(14 + ip_len, 0);
        f
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        for n in ["a", "r", "b"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .status();
        }
    }
}

/// One sender thread: AF_PACKET on a0, qdisc bypassed, `sendmmsg` batches of one
/// prebuilt frame until `stop`, bounded by `limit` in any case.
fn sender(
    ns: String,
    mut frame: Vec<u8>,
    dut_mac: [u8; 6],
    nice: i32,
    stop: Arc<AtomicBool>,
    limit: Duration,
) -> Result<(), String> {
    pin(0, GEN_CPU)?;
    set_nice(0, nice)?;
    enter(&ns)?;
    // SAFETY: plain socket syscall (send only: no protocol, so nothing is queued for
    // reading); the result is checked and owned below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!(
            "AF_PACKET socket in {ns}: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: fd is a fresh socket we own.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(c"a0".as_ptr()) };
    if ifindex == 0 {
        return Err(format!("a0 missing in {ns}"));
    }
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a valid int option.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    // SAFETY: sockaddr_ll is plain data.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = 0x0800u16.to_be();
    addr.sll_ifindex = ifindex as i32;
    addr.sll_halen = 6;
    addr.sll_addr[..6].copy_from_slice(&dut_mac);
    let mut iov: Vec<libc::iovec> = (0..BATCH)
        .map(|_| libc::iovec {
            iov_base: frame.as_mut_ptr().cast(),
            iov_len: frame.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain data; zeroed is a valid "no address, no control" header.
    let mut msgs: Vec<libc::mmsghdr> = (0..BATCH)
        .map(|_| unsafe { std::mem::zeroed::<libc::mmsghdr>() })
        .collect();
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_name = (&mut addr as *mut libc::sockaddr_ll).cast();
        m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) && start.elapsed() < limit {
        // SAFETY: msgs, iov, addr and frame outlive the call and describe valid buffers.
        let n = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                0,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOBUFS) && e.raw_os_error() != Some(libc::EAGAIN) {
                return Err(format!("sendmmsg on a0 in {ns}: {e}"));
            }
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// The flood's sender threads; dropping it stops and joins them.
pub struct Flood {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Result<(), String>>>,
}

impl Flood {
    pub fn start(router: &Router, senders: usize, limit: Duration) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..senders)
            .map(|i| {
                let (ns, stop, nice) = (router.ns("a"), stop.clone(), router.nice);
                let (frame, dut_mac) = (router.frame(9 + i as u16), router.dut_mac);
                std::thread::spawn(move || sender(ns, frame, dut_mac, nice, stop, limit))
            })
            .collect();
        Flood { stop, threads }
    }

    pub fn stop(mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            t.join().map_err(|_| "sender panicked".to_string())??;
        }
        Ok(())
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
