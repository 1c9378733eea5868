//! Root tests of the per-packet tier (`bpf/packets.bpf.c`, `src/packets.rs`).
//!
//! Each test builds a veth router `napilab-pkt-<pid>-<tag>-{a,r,b}`:
//! a0 (10.83.1.1) <-> r0 (10.83.1.254) | r1 (10.83.2.254) <-> b0 (10.83.2.2), with GRO
//! on the receiving ends (so they have a NAPI instance and use napi_gro_receive),
//! static neighbours and IPv6 off so that only the test's datagrams cross it, and
//! NAPI not threaded: every datagram is processed by the sender's bottom-half enable
//! after its transmit returned, so each packet meets the stages in order. The
//! namespaces are removed on drop, also when a test fails. Results are filtered to the
//! three namespaces (by their inode), so traffic of other processes does not count.
//! Without root or BPF each test prints `SKIPPED <name>: <reason>` and returns.

use std::net::UdpSocket;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use napilab_core::trace::{DropReasonCount, StageLatency};
use napilab_trace::packets::{packet_interval, PacketOptions, PacketTrace};
use napilab_trace::StartError;

/// The tests check that their programs are gone from the kernel afterwards, so they
/// must not overlap.
static SERIAL: Mutex<()> = Mutex::new(());

fn sh(script: &str) -> Result<String, String> {
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

struct Router {
    base: String,
}

impl Router {
    fn ns(&self, n: &str) -> String {
        format!("{}-{n}", self.base)
    }

    fn create(tag: &str) -> Result<Router, String> {
        if !napilab_testkit::is_root() {
            return Err("needs root for namespaces and BPF".into());
        }
        let r = Router {
            base: format!("napilab-pkt-{}-{tag}", std::process::id()),
        };
        let (a, m, b) = (r.ns("a"), r.ns("r"), r.ns("b"));
        sh(&format!(
            "for n in {a} {m} {b}; do ip netns add $n
               ip netns exec $n sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
               ip -n $n link set lo up; done
             ip link add a0 netns {a} type veth peer name r0 netns {m}
             ip link add r1 netns {m} type veth peer name b0 netns {b}
             ip -n {a} addr add 10.83.1.1/24 dev a0; ip -n {a} link set a0 up
             ip -n {m} addr add 10.83.1.254/24 dev r0; ip -n {m} link set r0 up
             ip -n {m} addr add 10.83.2.254/24 dev r1; ip -n {m} link set r1 up
             ip -n {b} addr add 10.83.2.2/24 dev b0; ip -n {b} link set b0 up
             ip -n {a} route add default via 10.83.1.254
             ip -n {b} route add default via 10.83.2.254
             ip netns exec {m} sysctl -qw net.ipv4.ip_forward=1
             ip netns exec {a} ethtool -K a0 tso off gso off >/dev/null
             ip netns exec {m} ethtool -K r0 gro on >/dev/null
             ip netns exec {m} ethtool -K r1 tso off gso off >/dev/null
             ip netns exec {b} ethtool -K b0 gro on >/dev/null
             ip -n {a} neigh replace 10.83.1.254 lladdr $(ip netns exec {m} cat /sys/class/net/r0/address) dev a0 nud permanent
             ip -n {m} neigh replace 10.83.1.1 lladdr $(ip netns exec {a} cat /sys/class/net/a0/address) dev r0 nud permanent
             ip -n {m} neigh replace 10.83.2.2 lladdr $(ip netns exec {b} cat /sys/class/net/b0/address) dev r1 nud permanent
             ip -n {b} neigh replace 10.83.2.254 lladdr $(ip netns exec {m} cat /sys/class/net/r1/address) dev b0 nud permanent"
        ))
        .inspect_err(|_| drop(Router { base: r.base.clone() }))?;
        Ok(r)
    }

    /// The namespace's inode: what the BPF side records as `netns`.
    fn inode(&self, n: &str) -> Result<u32, String> {
        let path = format!("/var/run/netns/{}", self.ns(n));
        let meta = std::fs::metadata(&path).map_err(|e| format!("{path}: {e}"))?;
        u32::try_from(meta.ino()).map_err(|_| format!("{path}: inode {} too large", meta.ino()))
    }

    fn inodes(&self) -> Result<[u32; 3], String> {
        Ok([self.inode("a")?, self.inode("r")?, self.inode("b")?])
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

/// Runs `f` on a thread inside namespace `ns` (network namespaces are per thread).
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        napilab_probe::netns::enter(&ns).map_err(|e| e.to_string())?;
        f()
    })
    .join()
    .map_err(|_| "namespace thread panicked".to_string())?
}

/// Sends `n` 64-byte datagrams from namespace a to 10.83.2.2:`port`, one at a time.
fn send(router: &Router, n: u32, port: u16) -> Result<(), String> {
    in_ns(&router.ns("a"), move || {
        let s = UdpSocket::bind("10.83.1.1:0").map_err(|e| format!("bind in a: {e}"))?;
        for i in 0..n {
            let mut payload = [0u8; 64];
            payload[..4].copy_from_slice(&i.to_be_bytes());
            s.send_to(&payload, ("10.83.2.2", port))
                .map_err(|e| format!("send {i}: {e}"))?;
        }
        Ok(())
    })
}

/// Starts the tier or says why the test is skipped.
fn start(name: &str, options: &PacketOptions) -> Option<PacketTrace> {
    match PacketTrace::start(options) {
        Ok(t) => Some(t),
        Err(e @ (StartError::NoBtf | StartError::NoPrivilege(_))) => {
            println!("SKIPPED {name}: {e}");
            None
        }
        // Anything else is a bug of the tier (verifier, CO-RE): fail.
        Err(e) => panic!("{name}: {e}"),
    }
}

/// Names of every BPF program loaded in the kernel (BPF_PROG_GET_NEXT_ID).
fn kernel_program_names() -> Vec<String> {
    libbpf_rs::query::ProgInfoIter::default()
        .map(|p| p.name.to_string_lossy().into_owned())
        .collect()
}

/// Drops the tier and checks that none of its programs is left in the kernel.
fn assert_unloaded(trace: PacketTrace) {
    let names = trace.program_names();
    assert!(!names.is_empty(), "the tier loaded no programs");
    let before = kernel_program_names();
    assert!(
        names.iter().any(|n| before.contains(n)),
        "the kernel's program list does not show ours ({names:?}): the check below would prove nothing"
    );
    drop(trace);
    // Freeing a program after its last fd closes is deferred (RCU): wait, bounded.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<String> = kernel_program_names()
            .into_iter()
            .filter(|n| names.contains(n))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "BPF programs still loaded 5 s after the tier was dropped: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ours<'a>(rows: &'a [StageLatency], inodes: &[u32; 3]) -> Vec<&'a StageLatency> {
    rows.iter()
        .filter(|s| inodes.contains(&s.netns) && inodes.contains(&s.from_netns))
        .collect()
}

fn pair_count(rows: &[&StageLatency], from_dev: &str, from: &str, dev: &str, to: &str) -> u64 {
    rows.iter()
        .filter(|s| s.from_device == from_dev && s.from == from && s.device == dev && s.to == to)
        .map(|s| s.count)
        .sum()
}

/// A UDP socket bound to the sink address in namespace b, with a read timeout.
fn sink_socket(router: &Router, port: u16, timeout: Duration) -> UdpSocket {
    in_ns(&router.ns("b"), move || {
        let s = UdpSocket::bind(("10.83.2.2", port)).map_err(|e| format!("bind in b: {e}"))?;
        s.set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        Ok(s)
    })
    .expect("sink socket")
}

/// Each of the `n` datagrams that left through r1's qdisc counted once from
/// net_dev_queue to qdisc_dequeue and once from there to net_dev_start_xmit.
fn assert_every_packet_through_r1_qdisc(stages: &[StageLatency], n: u32) {
    let rows: Vec<&StageLatency> = stages.iter().collect();
    for (from, to) in [
        ("net_dev_queue", "qdisc_dequeue"),
        ("qdisc_dequeue", "net_dev_start_xmit"),
    ] {
        let count = pair_count(&rows, "r1", from, "r1", to);
        assert_eq!(
            count,
            u64::from(n),
            "r1 {from} -> r1 {to}: {count}, expected the {n} datagrams that left"
        );
    }
}

fn forwarding(name: &str, options: &PacketOptions) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let router = match Router::create(name) {
        Ok(r) => r,
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            return;
        }
    };
    let Some(trace) = start(name, options) else {
        return;
    };
    assert!(
        trace.attached() >= 9,
        "only {} hooks attached: {:?}",
        trace.attached(),
        trace.notices
    );
    let inodes = router.inodes().expect("namespace inodes");
    const N: u32 = 2000;
    const PORT: u16 = 7001;
    let sink = sink_socket(&router, PORT, Duration::from_millis(200));
    let before = trace.snapshot();
    let t0 = Instant::now();
    // Batches small enough for the sink's receive buffer, each drained before the next
    // (bounded): every datagram must arrive, else the test's premise (no loss) fails.
    const BATCH: u32 = 100;
    let mut received = 0u32;
    let mut buf = [0u8; 128];
    let deadline = Instant::now() + Duration::from_secs(20);
    for _ in 0..N / BATCH {
        let goal = received + BATCH;
        send(&router, BATCH, PORT).expect("send");
        while received < goal && Instant::now() < deadline {
            if sink.recv(&mut buf).is_ok() {
                received += 1;
            }
        }
    }
    let after = trace.snapshot();
    let (stages, drops) = packet_interval(
        &before,
        &after,
        t0.elapsed().as_secs_f64(),
        &trace.reasons,
        None,
    );
    assert_eq!(received, N, "the sink received {received} of {N} datagrams");
    let rows = ours(&stages, &inodes);
    let expect = [
        ("a0", "net_dev_queue", "a0", "net_dev_start_xmit"),
        ("a0", "net_dev_start_xmit", "a0", "net_dev_xmit"),
        ("a0", "net_dev_xmit", "r0", "napi_gro_receive_entry"),
        ("r0", "napi_gro_receive_entry", "r0", "netif_receive_skb"),
        ("r0", "netif_receive_skb", "r1", "net_dev_queue"),
        ("r1", "net_dev_queue", "r1", "net_dev_start_xmit"),
        ("r1", "net_dev_start_xmit", "r1", "net_dev_xmit"),
        ("r1", "net_dev_xmit", "b0", "napi_gro_receive_entry"),
        ("b0", "napi_gro_receive_entry", "b0", "netif_receive_skb"),
    ];
    for (fd, from, d, to) in expect {
        let n = pair_count(&rows, fd, from, d, to);
        assert_eq!(
            n,
            u64::from(N),
            "{fd} {from} -> {d} {to}: {n} packets, expected {N}; rows: {:#?}",
            rows.iter()
                .map(|s| format!(
                    "{} {} -> {} {}: {}",
                    s.from_device, s.from, s.device, s.to, s.count
                ))
                .collect::<Vec<_>>()
        );
    }
    // And no other pair: a recycled sk_buff address must not pair one packet's stage
    // with another's (e.g. b0 netif_receive_skb -> a0 net_dev_queue).
    for s in &rows {
        assert!(
            expect.iter().any(|(fd, from, d, to)| s.from_device == *fd
                && s.from == *from
                && s.device == *d
                && s.to == *to),
            "unexpected stage pair {} {} -> {} {} ({} packets)",
            s.from_device,
            s.from,
            s.device,
            s.to,
            s.count
        );
        assert!(s.mean_ns > 0.0 && s.p50_ns <= s.p99_ns, "{s:?}");
        assert!(
            s.p50_ns <= s.max_bucket_ns as f64,
            "p50 beyond the histogram: {s:?}"
        );
    }
    // Nothing of ours was dropped: every datagram reached the socket.
    let dropped: Vec<&DropReasonCount> = drops
        .iter()
        .filter(|d| inodes.contains(&d.netns) && d.protocol == "ipv4")
        .collect();
    assert!(dropped.is_empty(), "unexpected drops: {dropped:?}");
    println!(
        "{name}: {} hooks ({}), {N} datagrams, pairs: {}",
        trace.attached(),
        trace.attach_kind,
        rows.iter()
            .map(|s| format!(
                "{} {}->{} {} n={} p50={:.0}ns",
                s.from_device, s.from, s.device, s.to, s.count, s.p50_ns
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    assert_unloaded(trace);
}

#[test]
fn stage_pairs_count_every_forwarded_packet() {
    forwarding(
        "stage_pairs_count_every_forwarded_packet",
        &PacketOptions::default(),
    );
}

#[test]
fn raw_tp_fallback_counts_every_forwarded_packet() {
    forwarding(
        "raw_tp_fallback_counts_every_forwarded_packet",
        &PacketOptions {
            force_raw_tp: true,
            ..PacketOptions::default()
        },
    );
}

#[test]
fn drops_to_a_closed_port_are_no_socket() {
    let name = "drops_to_a_closed_port_are_no_socket";
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let router = match Router::create("drop") {
        Ok(r) => r,
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            return;
        }
    };
    let Some(trace) = start(name, &PacketOptions::default()) else {
        return;
    };
    assert!(
        trace.reasons.len() > 10,
        "drop reasons were not named: {}",
        trace.reasons.origin
    );
    let b = router.inode("b").expect("namespace inode");
    const M: u32 = 500;
    let before = trace.snapshot();
    let t0 = Instant::now();
    // Nothing listens on this port in b: UDP drops each datagram as NO_SOCKET.
    send(&router, M, 7999).expect("send");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut no_socket = 0;
    let mut drops = Vec::new();
    while Instant::now() < deadline {
        let (_, d) = packet_interval(
            &before,
            &trace.snapshot(),
            t0.elapsed().as_secs_f64(),
            &trace.reasons,
            Some(b),
        );
        drops = d;
        no_socket = drops
            .iter()
            .filter(|d| d.netns == b && d.reason == "NO_SOCKET")
            .map(|d| d.count)
            .sum();
        if no_socket >= u64::from(M) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let ours: Vec<&DropReasonCount> = drops.iter().filter(|d| d.netns == b).collect();
    assert_eq!(
        no_socket,
        u64::from(M),
        "NO_SOCKET drops in b: {no_socket}, expected {M}; b's drops: {ours:?}"
    );
    for d in ours.iter().filter(|d| d.reason == "NO_SOCKET") {
        assert_eq!(d.device, "b0", "{d:?}");
        assert_eq!(d.protocol, "ipv4", "{d:?}");
        assert_eq!(d.last_stage.as_deref(), Some("netif_receive_skb"), "{d:?}");
    }
    println!("{name}: {ours:?}");
    assert_unloaded(trace);
}

#[test]
fn a_tiny_token_bucket_drops_and_dequeues() {
    let name = "a_tiny_token_bucket_drops_and_dequeues";
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let router = match Router::create("tbf") {
        Ok(r) => r,
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            return;
        }
    };
    // 1 Mbit/s with a 3000-byte queue on the router's egress: a burst of datagrams
    // mostly overflows it. The qdisc lives in the test's namespace and goes with it.
    if let Err(e) = sh(&format!(
        "ip netns exec {} tc qdisc replace dev r1 root tbf rate 1mbit burst 1600 limit 3000",
        router.ns("r")
    )) {
        println!("SKIPPED {name}: this kernel has no tbf qdisc ({e})");
        return;
    }
    let Some(trace) = start(name, &PacketOptions::default()) else {
        return;
    };
    let r = router.inode("r").expect("namespace inode");
    const N: u32 = 300;
    const PORT: u16 = 7002;
    let sink = sink_socket(&router, PORT, Duration::from_millis(100));
    let before = trace.snapshot();
    let t0 = Instant::now();
    send(&router, N, PORT).expect("send");
    // Drain what the token bucket lets through (bounded): stop after 1 s of silence.
    let mut received = 0u32;
    let mut buf = [0u8; 128];
    let mut last = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && last.elapsed() < Duration::from_secs(1) {
        if sink.recv(&mut buf).is_ok() {
            received += 1;
            last = Instant::now();
        }
    }
    let (stages, drops) = packet_interval(
        &before,
        &trace.snapshot(),
        t0.elapsed().as_secs_f64(),
        &trace.reasons,
        Some(r),
    );
    assert!(
        received > 0 && received < N,
        "{received} of {N} datagrams passed the token bucket: expected some, not all"
    );
    let qdisc_drops: u64 = drops
        .iter()
        .filter(|d| d.device == "r1" && d.reason.starts_with("QDISC"))
        .map(|d| d.count)
        .sum();
    assert_eq!(
        qdisc_drops,
        u64::from(N - received),
        "qdisc drops on r1 vs datagrams that did not arrive; drops: {drops:?}"
    );
    for d in drops.iter().filter(|d| d.device == "r1") {
        assert_eq!(d.last_stage.as_deref(), Some("net_dev_queue"), "{d:?}");
        assert_eq!(d.protocol, "ipv4", "{d:?}");
    }
    assert_every_packet_through_r1_qdisc(&stages, received);
    println!(
        "{name}: {received}/{N} passed; drops {:?}",
        drops
            .iter()
            .map(|d| (d.reason.as_str(), d.device.as_str(), d.count))
            .collect::<Vec<_>>()
    );
    assert_unloaded(trace);
}

/// A token bucket that holds a queue and is then opened releases it in bulk: on a
/// multiqueue device (veth has one TX queue per CPU) `dequeue_skb` chains up to 8
/// packets per call (net/sched/sch_generic.c, `try_bulk_dequeue_skb_slow`) and fires
/// `qdisc_dequeue` once, with the first. Every queued packet still counts one
/// net_dev_queue -> qdisc_dequeue and one qdisc_dequeue -> net_dev_start_xmit.
#[test]
fn a_bulk_dequeue_counts_every_packet() {
    let name = "a_bulk_dequeue_counts_every_packet";
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let router = match Router::create("bulk") {
        Ok(r) => r,
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            return;
        }
    };
    let ns = router.ns("r");
    let txqueues = sh(&format!("ip -n {ns} -d link show dev r1"))
        .ok()
        .and_then(|t| {
            let words: Vec<&str> = t.split_whitespace().collect();
            let i = words.iter().position(|w| *w == "numtxqueues")?;
            words.get(i + 1)?.parse::<u32>().ok()
        })
        .unwrap_or(1);
    if txqueues < 2 {
        println!("SKIPPED {name}: r1 has {txqueues} TX queue: its qdisc bulk-dequeues by BQL bytes, which veth does not count");
        return;
    }
    // 8 kbit/s with a 1600-byte bucket and a 10 kB queue: of 40 datagrams (106-byte
    // frames) about 15 pass at once, the rest wait, none is dropped.
    let tbf = |verb: &str, rate: &str| {
        sh(&format!(
            "ip netns exec {ns} tc qdisc {verb} dev r1 root tbf rate {rate} burst 1600 limit 10000"
        ))
    };
    if let Err(e) = tbf("replace", "8kbit") {
        println!("SKIPPED {name}: this kernel has no tbf qdisc ({e})");
        return;
    }
    let Some(trace) = start(name, &PacketOptions::default()) else {
        return;
    };
    const N: u32 = 40;
    const PORT: u16 = 7003;
    let sink = sink_socket(&router, PORT, Duration::from_millis(100));
    let before = trace.snapshot();
    let t0 = Instant::now();
    send(&router, N, PORT).expect("send");
    let backlog = sh(&format!("ip netns exec {ns} tc -s qdisc show dev r1")).unwrap_or_default();
    // Open the bucket: with the same limit tbf_change keeps its queue; the pending
    // watchdog then dequeues the whole backlog at once.
    tbf("change", "1gbit").expect("tc qdisc change");
    let mut received = 0u32;
    let mut buf = [0u8; 128];
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && received < N {
        if sink.recv(&mut buf).is_ok() {
            received += 1;
        }
    }
    let (stages, drops) = packet_interval(
        &before,
        &trace.snapshot(),
        t0.elapsed().as_secs_f64(),
        &trace.reasons,
        Some(router.inode("r").expect("namespace inode")),
    );
    assert_eq!(
        received, N,
        "{received} of {N} datagrams arrived; qdisc before opening: {backlog}; drops {drops:?}"
    );
    assert!(
        backlog.contains("backlog") && !backlog.contains("backlog 0b"),
        "no backlog before the bucket was opened: {backlog}"
    );
    assert_every_packet_through_r1_qdisc(&stages, N);
    println!(
        "{name}: {received}/{N} passed, backlog before opening: {}",
        backlog
            .lines()
            .find(|l| l.contains("backlog"))
            .unwrap_or("?")
            .trim()
    );
    assert_unloaded(trace);
}

/// Time-sliced tracing (`PacketOptions::windows`): stage rates seen in the windows and
/// scaled by their measured open time converge to the exact count of paced traffic
/// within the error the tier reports, and drops stay exact between windows.
#[test]
fn windowed_estimates_converge_to_exact_counts() {
    use napilab_trace::packets::OUTSIDE_WINDOW_NAME;
    use napilab_trace::windows::windowed_rate;
    use napilab_trace::Windows;
    let name = "windowed_estimates_converge_to_exact_counts";
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let router = match Router::create("win") {
        Ok(r) => r,
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            return;
        }
    };
    // 10 ms of every 50 ms: duty 0.2, 60 windows over the 3 s of traffic.
    let windows = Windows {
        window: Duration::from_millis(10),
        period: Duration::from_millis(50),
    };
    let options = PacketOptions {
        windows: Some(windows),
        ..PacketOptions::default()
    };
    // The window thread (started from this thread, so with its affinity) on CPU 0 and
    // the sender on CPU 1: attaching takes about 2 ms of CPU per window here, and a
    // sender sharing its CPU would be delayed around the windows, which would put more
    // or fewer of its packets in them than their share of time.
    let two_cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    if two_cpus {
        pin_self(0);
    }
    let Some(trace) = start(name, &options) else {
        return;
    };
    let b = router.inode("b").expect("namespace inode");
    // Paced: 10 datagrams every millisecond for 3 s, to a port nothing listens on in b
    // (each is dropped there as NO_SOCKET, after the tier's stages).
    const N: u32 = 30_000;
    let before = trace.snapshot();
    let progress0 = trace.window_progress().expect("windowed");
    let t0 = Instant::now();
    in_ns(&router.ns("a"), move || {
        if two_cpus {
            pin_self(1);
        }
        let s = UdpSocket::bind("10.83.1.1:0").map_err(|e| format!("bind in a: {e}"))?;
        let start = Instant::now();
        for i in 0..N {
            if i % 10 == 0 {
                let due = start + Duration::from_micros(u64::from(i / 10) * 1000);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            s.send_to(&[0u8; 64], ("10.83.2.2", 7998))
                .map_err(|e| format!("send {i}: {e}"))?;
        }
        Ok(())
    })
    .expect("send");
    // The interval is the traffic's: packets and window time up to now (the window
    // open now included).
    let after = trace.snapshot();
    let seconds = t0.elapsed().as_secs_f64();
    let progress1 = trace.window_progress().expect("windowed");
    println!(
        "{name}: {} windows, {:.1} ms open, {:.2} ms attaching and detaching",
        progress1.0 - progress0.0,
        (progress1.1 - progress0.1) as f64 / 1e6,
        (progress1.2 - progress0.2) as f64 / 1e6
    );
    let (w0, w1) = (
        before.windows.expect("windowed"),
        after.windows.expect("windowed"),
    );
    let open_secs = w1.open_ns.saturating_sub(w0.open_ns) as f64 / 1e9;
    // While the stage programs attach or detach some are counting and the windows'
    // clock is not, so the open time is uncertain by up to the transitions' time: on a
    // loaded machine (milliseconds per transition) a bias of that relative size, on a
    // quiet one next to nothing.
    let transition_share = (progress1.2 - progress0.2) as f64 / 1e9 / open_secs.max(1e-9);
    let rates = w1.rates.since(&w0.rates);
    assert!(
        open_secs > 0.1 * seconds && open_secs < 0.35 * seconds,
        "windows open {open_secs:.3} s of {seconds:.3} s, expected about 20%"
    );
    let (stages, _) = packet_interval(&before, &after, seconds, &trace.reasons, None);
    let inodes = router.inodes().expect("namespace inodes");
    let rows = ours(&stages, &inodes);
    // Exact: every drop is counted, inside a window or not (read once they all landed).
    let deadline = Instant::now() + Duration::from_secs(5);
    let drops = loop {
        let (_, drops) =
            packet_interval(&before, &trace.snapshot(), seconds, &trace.reasons, Some(b));
        let n: u64 = drops
            .iter()
            .filter(|d| d.reason == "NO_SOCKET")
            .map(|d| d.count)
            .sum();
        if n >= u64::from(N) || Instant::now() > deadline {
            break drops;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let no_socket: u64 = drops
        .iter()
        .filter(|d| d.netns == b && d.reason == "NO_SOCKET")
        .map(|d| d.count)
        .sum();
    assert_eq!(no_socket, u64::from(N), "NO_SOCKET drops in b: {drops:?}");
    let outside: u64 = drops
        .iter()
        .filter(|d| d.reason == "NO_SOCKET" && d.last_stage.as_deref() == Some(OUTSIDE_WINDOW_NAME))
        .map(|d| d.count)
        .sum();
    assert!(
        outside > u64::from(N) / 2,
        "only {outside} of {N} drops were outside a window: were the stages detached?"
    );
    // Estimated: each forward stage pair, scaled by the windows' open time.
    for (fd, from, d, to) in [
        ("a0", "net_dev_xmit", "r0", "napi_gro_receive_entry"),
        ("r0", "netif_receive_skb", "r1", "net_dev_queue"),
        ("r1", "net_dev_xmit", "b0", "napi_gro_receive_entry"),
    ] {
        let seen = pair_count(&rows, fd, from, d, to);
        let (rate, sd) = windowed_rate(seen, open_secs, seconds, Some(&rates));
        let estimate = rate * seconds;
        let error = sd * seconds;
        let row = rows
            .iter()
            .find(|s| s.from_device == fd && s.from == from && s.device == d && s.to == to)
            .expect("the pair was seen");
        assert!(
            (row.rate.value - rate).abs() < 1e-6 * rate.max(1.0),
            "the interval's rate {} is not the windowed estimate {rate}",
            row.rate.value
        );
        println!(
            "{name}: {fd} {from} -> {d} {to}: {seen} seen in {:.0} ms of windows, estimate {estimate:.0} +- {error:.0} (1 sd) of {N} sent",
            open_secs * 1e3
        );
        let clock = f64::from(N) * transition_share;
        assert!(
            (estimate - f64::from(N)).abs() <= 4.0 * error + clock,
            "{fd} {from} -> {d} {to}: estimate {estimate:.0} is more than 4 sd ({error:.0}) and the windows' clock uncertainty ({clock:.0}) from the {N} packets sent"
        );
    }
    assert_unloaded(trace);
}

/// Pins the calling thread to one CPU (best effort: an error leaves it unpinned).
fn pin_self(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it; sched_setaffinity reads
    // a set of the size passed and affects only the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}
